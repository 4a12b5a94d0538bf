/*
 * bevio.c: makes a socket bufferevent write what was just queued in this
 * loop iteration.
 *
 * libevent writes a bufferevent's output when EPOLLOUT fires: queueing bytes
 * arms EPOLLOUT (epoll_ctl), the next epoll_wait reports it, the bytes go
 * out, the event is disarmed (epoll_ctl again): two syscalls and a loop
 * round trip per message. Activating the write event by hand runs the same
 * write callback in this iteration; with the epoll changelist (worker bases)
 * the arm and the disarm then cancel out before they reach the kernel. If
 * the socket is full the event simply stays armed, as before.
 * Owns nothing. Only plain socket bufferevents, recognised by their ops
 * table, are touched (bufferevent_struct.h: libevent 2.1's layout).
 */
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>

#include "bevio.h"
#include "lg_core.h"

static const struct bufferevent_ops *bevio_socket_ops;

void
lg_bevio_init(struct event_base *base)
{
    struct bufferevent *b;

    if (__atomic_load_n(&bevio_socket_ops, __ATOMIC_ACQUIRE) != NULL) {
        return;
    }
    b = bufferevent_socket_new(base, -1, 0);
    if (b != NULL) {
        __atomic_store_n(&bevio_socket_ops, b->be_ops, __ATOMIC_RELEASE);
        bufferevent_free(b);
    }
}

void
lg_bevio_flush(struct bufferevent *bev)
{
    if (bev->be_ops == __atomic_load_n(&bevio_socket_ops, __ATOMIC_RELAXED)
        && event_pending(&bev->ev_write, EV_WRITE, NULL)) {
        event_active(&bev->ev_write, EV_WRITE, 1);
    }
}
