/*
 * bevio.c: plain socket bufferevents without libevent's per-event overheads.
 *
 * libevent writes a bufferevent's output when EPOLLOUT fires: queueing bytes
 * arms EPOLLOUT (epoll_ctl), the next epoll_wait reports it, the bytes go
 * out, the event is disarmed (epoll_ctl again): two syscalls and a loop
 * round trip per message. Activating the write event by hand runs the same
 * write callback in this iteration; with the epoll changelist (worker bases)
 * the arm and the disarm then cancel out before they reach the kernel. If
 * the socket is full the event simply stays armed, as before.
 * Reading: libevent 2.1 reads at most 4 KiB per read event; lg_bevio_read()
 * lets a caller that expects more (a request body) take it in one readv.
 * Owns nothing. Only plain socket bufferevents, recognised by their ops
 * table, are touched (bufferevent_struct.h: libevent 2.1's layout).
 */
#include <sys/uio.h>

#include <event2/buffer.h>
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

size_t
lg_bevio_read(struct bufferevent *bev, size_t max)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer_iovec vec[2];
    struct iovec iov[2];
    size_t left = max;
    ssize_t got;
    int n;

    if (bev->be_ops != __atomic_load_n(&bevio_socket_ops, __ATOMIC_RELAXED) || max == 0
        || bufferevent_getfd(bev) < 0) {
        return 0;
    }
    /* the bufferevent keeps its input's end frozen outside its own reads */
    evbuffer_unfreeze(in, 0);
    n = evbuffer_reserve_space(in, (ev_ssize_t)max, vec, 2);
    for (int i = 0; i < n; i++) {
        vec[i].iov_len = LG_MIN(vec[i].iov_len, left);
        left -= vec[i].iov_len;
        iov[i].iov_base = vec[i].iov_base;
        iov[i].iov_len = vec[i].iov_len;
    }
    got = n > 0 ? readv(bufferevent_getfd(bev), iov, n) : -1;
    if (got > 0) {
        left = (size_t)got;
        for (int i = 0; i < n; i++) {
            vec[i].iov_len = LG_MIN(vec[i].iov_len, left);
            left -= vec[i].iov_len;
        }
        evbuffer_commit_space(in, vec, n);
    }
    evbuffer_freeze(in, 0);
    return got > 0 ? (size_t)got : 0; /* nothing reserved is committed otherwise */
}
