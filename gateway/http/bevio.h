/*
 * bevio.h: plain socket bufferevents without libevent's per-event overheads:
 * write queued output in the current loop iteration, read large inputs in
 * large pieces; and, for any bufferevent, watermark and enable calls that
 * cost nothing when nothing changes.
 */
#ifndef LG_BEVIO_H
#define LG_BEVIO_H

#include <stddef.h>

struct bufferevent;
struct evbuffer;
struct event_base;

/* Learns what a plain socket bufferevent looks like (once, any base). */
void lg_bevio_init(struct event_base *base);

/*
 * If bev is a plain socket bufferevent waiting to write, runs its write now
 * (later in this loop iteration) instead of after the next epoll_wait. Safe
 * on any bufferevent: TLS and filter ones, and those not waiting to write,
 * are left alone. Never on a socket whose connect is still in progress.
 */
void lg_bevio_flush(struct bufferevent *bev);

/*
 * Reads up to `max` more bytes from a plain socket bufferevent straight
 * into its input buffer, in one readv: libevent 2.1 reads at most 4 KiB per
 * read event (a loop round trip, an ioctl and a readv each), which makes a
 * large request body cost hundreds of them. Returns the bytes read; 0 when
 * nothing was waiting, on EOF or error (the bufferevent reports those itself
 * on its next read), or for other kinds of bufferevent.
 */
size_t lg_bevio_read(struct bufferevent *bev, size_t max);

/* What lg_bevio_read() callers take per callback at most (a large request
 * body, a large answer), so that the worker's other connections get their
 * turn. */
#define LG_BEVIO_READ_BUDGET (1024 * 1024)

/*
 * From now on a plain socket bufferevent reads through llmgate's callback:
 * no ioctl(FIONREAD) per read, up to 5 KiB per read event (libevent: 4 KiB),
 * the same callbacks, watermarks and timeouts. Call once its socket is
 * connected (a connect in progress keeps libevent's callback, which knows
 * about refused connects); again is a no-op; other bufferevents are left
 * alone.
 */
void lg_bevio_own_reads(struct bufferevent *bev);

/*
 * Writes up to n bytes from the front of src straight to the socket of a
 * plain socket bufferevent whose output is empty (and which is connected
 * and writing), draining what was written from src. Returns the bytes
 * written: 0 where this does not apply, or the socket takes nothing now or
 * fails; the caller queues the rest on the output as usual, where the
 * bufferevent's own write meets any error and reports it. Bytes that fit
 * leave without a write event armed, run and disarmed.
 */
size_t lg_bevio_write_from(struct bufferevent *bev, struct evbuffer *src, size_t n);

/*
 * Sends a message on bev: head_len bytes from head, then the bytes of body
 * (NULL for none), which is only read, never drained (a caller keeps it, for
 * a retry). On a plain socket bufferevent whose output is empty (and which
 * is connected and writing) they go straight to the socket in one writev,
 * without a copy into the output, its callbacks, or a write event armed and
 * disarmed; whatever does not leave so, or all of it where this does not
 * apply, is queued on the output as usual: the head's rest copied, the
 * body's by reference (evbuffer_add_buffer_reference), and the bufferevent's
 * own write takes it from there (and meets and reports any error). Returns
 * the bytes written straight away.
 */
size_t lg_bevio_write_msg(struct bufferevent *bev, const void *head, size_t head_len,
                          struct evbuffer *body);

/*
 * bufferevent_setwatermark() when the marks change. libevent's call costs
 * the same either way: a read mark re-adds the read event (and restarts its
 * timeout) even when it is set to what it was.
 */
void lg_bevio_watermark(struct bufferevent *bev, short what, size_t low, size_t high);

/*
 * Bounds the bytes bev's input may hold (the read high watermark; low 0).
 * libevent's watermark watches every change of the input through a buffer
 * callback (three runs per proxied request) to suspend reading at the mark
 * and resume under it. A socket whose reads are ours (lg_bevio_own_reads)
 * only records the mark: its reads stop at it, and libevent's watermark is
 * set the first time the input is found full, to suspend and resume from
 * then on. Other bufferevents get libevent's watermark at once.
 */
void lg_bevio_read_limit(struct bufferevent *bev, size_t high);

/*
 * bufferevent_enable() of the directions in `what` not enabled yet.
 * libevent's re-adds an enabled event too (an event_add, restarting its
 * timeout); callers here set a new timeout with bufferevent_set_timeouts(),
 * which re-arms what is pending itself.
 */
void lg_bevio_enable(struct bufferevent *bev, short what);

/*
 * bufferevent_set_timeouts() (NULL = none) for a timeout that starts now on
 * the read side: on a plain socket bufferevent whose write timeout is
 * already `write`, only the read event is re-armed (one event_add), not
 * both events deleted and added. Otherwise, and on any other bufferevent,
 * bufferevent_set_timeouts() itself.
 */
struct timeval;
void lg_bevio_timeouts(struct bufferevent *bev, const struct timeval *read,
                       const struct timeval *write);

/* The same with the write timeout kept as it is. */
void lg_bevio_read_timeout(struct bufferevent *bev, const struct timeval *read);

#endif /* LG_BEVIO_H */
