/*
 * bevio.c: plain socket bufferevents without libevent's per-event overheads.
 *
 * libevent writes a bufferevent's output when EPOLLOUT fires: queueing bytes
 * arms EPOLLOUT (epoll_ctl), the next epoll_wait reports it, the bytes go
 * out, the event is disarmed (epoll_ctl again): two syscalls and a loop
 * round trip per message. Activating the write event by hand runs the same
 * write callback in this iteration; with the epoll changelist (worker bases)
 * the arm and the disarm then cancel out before they reach the kernel. If
 * the socket is full the event simply stays armed, as before. A stream's
 * events skip the output altogether when nothing is queued ahead of them
 * (lg_bevio_write_from), and so does a request sent on a pooled connection
 * (lg_bevio_write_msg: its head and body in one writev). Answers are not
 * written in the call that completes them (bench/NOTES.md 26 and 34).
 * Reading: libevent 2.1 sizes every read with ioctl(FIONREAD) (a syscall per
 * read, two per proxied request) and reads at most 4 KiB per read event.
 * lg_bevio_own_reads() gives a bufferevent's read event our callback, which
 * reads without asking: into a small reservation at the input's end (a
 * 1 KiB chain, the size libevent picks for a small message) and, when more
 * is waiting, on into a 4 KiB per-thread scratch area whose part is then
 * added (copied) to the input (kept small: a large body is read by
 * lg_bevio_read() straight into the input, and a large copy cost more than
 * the ioctl it saves); then it hands over to the bufferevent exactly as
 * libevent's callback does (read callback past the low watermark, EOF,
 * error, timeout; the high watermark bounds the read, lg_bevio_read_limit()
 * without libevent's buffer callback until it is reached). lg_bevio_read() lets
 * a caller that expects more (a request body) take it in one readv.
 * lg_bevio_watermark() and lg_bevio_enable() skip calls that would set what
 * is already set: libevent re-adds the read event for every read watermark
 * call and every enable (a timer re-armed each time), five times per proxied
 * request before (bench/NOTES.md 22); these two work on any bufferevent.
 * Owns nothing. Only plain socket bufferevents, recognised by their ops
 * table, are touched otherwise (bufferevent_struct.h: libevent 2.1's layout).
 */
#include <errno.h>
#include <sys/uio.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>

#include "base/lg_core.h"
#include "http/bevio.h"

/* with libevent's chain header (48 bytes in 2.1) a 1 KiB allocation */
#define BEVIO_RESERVE 960
#define BEVIO_SCRATCH 4096
/* a message head and the first pieces of its body in one writev */
#define BEVIO_MSG_IOV 8

static const struct bufferevent_ops *bevio_socket_ops;
static __thread char bevio_scratch[BEVIO_SCRATCH];

static bool
bevio_is_socket(const struct bufferevent *bev)
{
    return bev->be_ops == __atomic_load_n(&bevio_socket_ops, __ATOMIC_RELAXED);
}

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
    if (bevio_is_socket(bev)
        && event_pending(&bev->ev_write, EV_WRITE, NULL)) {
        event_active(&bev->ev_write, EV_WRITE, 1);
    }
}

static void bevio_on_read(evutil_socket_t fd, short what, void *arg);

/* How much may go straight to bev's socket now (0: none, or not a case for it). */
static size_t
bevio_direct_max(struct bufferevent *bev)
{
    ev_ssize_t max;

    if (!bevio_is_socket(bev) || bufferevent_getfd(bev) < 0
        || !(bufferevent_get_enabled(bev) & EV_WRITE)
        || evbuffer_get_length(bev->output) != 0
        || event_get_callback(&bev->ev_read) != bevio_on_read) { /* not yet connected */
        return 0;
    }
    max = bufferevent_get_max_to_write(bev);
    return max > 0 ? (size_t)max : 0;
}

size_t
lg_bevio_write_from(struct bufferevent *bev, struct evbuffer *src, size_t n)
{
    size_t max = bevio_direct_max(bev);
    int sent;

    if (n == 0 || max == 0) {
        return 0;
    }
    sent = evbuffer_write_atmost(src, bufferevent_getfd(bev), (ev_ssize_t)LG_MIN(n, max));
    return sent > 0 ? (size_t)sent : 0;
}

size_t
lg_bevio_write_msg(struct bufferevent *bev, const void *head, size_t head_len,
                   struct evbuffer *body)
{
    struct evbuffer *out = bev->output;
    struct iovec iov[BEVIO_MSG_IOV];
    struct evbuffer_iovec vec[BEVIO_MSG_IOV - 1];
    size_t max = bevio_direct_max(bev), total, sent = 0;
    size_t body_len = body != NULL ? evbuffer_get_length(body) : 0;
    ssize_t got;
    int n = 0, k = 1;

    if (max > 0 && head_len > 0) {
        if (body_len > 0) {
            /* the first pieces of the body; what does not fit is queued */
            n = LG_MIN(evbuffer_peek(body, -1, NULL, vec, BEVIO_MSG_IOV - 1), BEVIO_MSG_IOV - 1);
        }
        iov[0].iov_base = (void *)(uintptr_t)head;
        iov[0].iov_len = LG_MIN(head_len, max);
        total = iov[0].iov_len;
        for (int i = 0; i < n && total < max; i++) {
            /* at most the bufferevent's single write, as its own write */
            iov[k].iov_base = vec[i].iov_base;
            iov[k].iov_len = LG_MIN(vec[i].iov_len, max - total);
            total += iov[k++].iov_len;
        }
        got = writev(bufferevent_getfd(bev), iov, k);
        sent = got > 0 ? (size_t)got : 0;
    }
    if (sent < head_len) {
        evbuffer_add(out, (const char *)head + sent, head_len - sent);
    }
    if (sent < head_len + body_len) {
        evbuffer_add_buffer_reference(out, body);
        if (sent > head_len) {
            /* the part of the body that left; the output's front is frozen
             * but for its own write (libevent's), so thaw it for this */
            evbuffer_unfreeze(out, 1);
            evbuffer_drain(out, sent - head_len);
            evbuffer_freeze(out, 1);
        }
    }
    return sent;
}

void
lg_bevio_watermark(struct bufferevent *bev, short what, size_t low, size_t high)
{
    if (((what & EV_READ) && (bev->wm_read.low != low || bev->wm_read.high != high))
        || ((what & EV_WRITE) && (bev->wm_write.low != low || bev->wm_write.high != high))) {
        bufferevent_setwatermark(bev, what, low, high);
    }
}

void
lg_bevio_enable(struct bufferevent *bev, short what)
{
    what &= (short)~bufferevent_get_enabled(bev);
    if (what != 0) {
        bufferevent_enable(bev, what);
    }
}

/* What bufferevent_set_timeouts() does for the read side alone (plain socket bufferevents). */
static void
bevio_rearm_read(struct bufferevent *bev, const struct timeval *read)
{
    if (read != NULL) {
        bev->timeout_read = *read;
    } else {
        evutil_timerclear(&bev->timeout_read);
    }
    if (event_pending(&bev->ev_read, EV_READ, NULL)) {
        if (read != NULL) {
            event_add(&bev->ev_read, read);
        } else {
            event_remove_timer(&bev->ev_read);
        }
    }
}

void
lg_bevio_timeouts(struct bufferevent *bev, const struct timeval *read,
                  const struct timeval *write)
{
    const struct timeval *w = &bev->timeout_write;

    if (!bevio_is_socket(bev)
        || (write != NULL ? !evutil_timercmp(w, write, ==) : evutil_timerisset(w))) {
        bufferevent_set_timeouts(bev, read, write);
        return;
    }
    bevio_rearm_read(bev, read);
}

void
lg_bevio_read_timeout(struct bufferevent *bev, const struct timeval *read)
{
    struct timeval w = bev->timeout_write;

    lg_bevio_timeouts(bev, read, evutil_timerisset(&w) ? &w : NULL);
}

/*
 * One readv from fd into `mine` bytes reserved at the end of `in` and then
 * into spill[0..spill_len) (0 for none); commits what landed in the input
 * and adds what landed in spill (a copy). Unfreezes the input's end for the
 * read, as libevent does. Returns readv's result; -1 with ENOMEM when
 * nothing could be reserved.
 */
static ssize_t
bevio_readv(struct evbuffer *in, int fd, size_t mine, char *spill, size_t spill_len)
{
    struct evbuffer_iovec vec[2];
    struct iovec iov[3];
    size_t left = mine;
    ssize_t got;
    int n, k = 0, err;

    evbuffer_unfreeze(in, 0);
    n = evbuffer_reserve_space(in, (ev_ssize_t)mine, vec, 2);
    if (n <= 0) {
        evbuffer_freeze(in, 0);
        errno = ENOMEM;
        return -1;
    }
    for (int i = 0; i < n; i++) {
        vec[i].iov_len = LG_MIN(vec[i].iov_len, left);
        left -= vec[i].iov_len;
        iov[k].iov_base = vec[i].iov_base;
        iov[k++].iov_len = vec[i].iov_len;
    }
    if (spill_len > 0) {
        iov[k].iov_base = spill;
        iov[k++].iov_len = spill_len;
    }
    got = readv(fd, iov, k);
    err = errno;
    if (got > 0) {
        left = (size_t)got;
        for (int i = 0; i < n; i++) {
            vec[i].iov_len = LG_MIN(vec[i].iov_len, left);
            left -= vec[i].iov_len;
        }
        evbuffer_commit_space(in, vec, n); /* nothing reserved is committed otherwise */
        if (left > 0) {
            evbuffer_add(in, spill, left);
        }
    }
    evbuffer_freeze(in, 0);
    errno = err; /* the caller tells EAGAIN from an error */
    return got;
}

size_t
lg_bevio_read(struct bufferevent *bev, size_t max)
{
    ssize_t got;

    if (!bevio_is_socket(bev) || max == 0 || bufferevent_getfd(bev) < 0) {
        return 0;
    }
    got = bevio_readv(bufferevent_get_input(bev), bufferevent_getfd(bev), max, NULL, 0);
    return got > 0 ? (size_t)got : 0;
}

/*
 * The read event's callback (libevent's bufferevent_readcb, less the
 * FIONREAD and the rate limits, which llmgate does not use). The read
 * callback and the event callback run through the bufferevent's public
 * triggers, deferred like libevent's own when the bufferevent defers.
 */
static void
bevio_on_read(evutil_socket_t fd, short what, void *arg)
{
    struct bufferevent *bev = arg;
    size_t want = BEVIO_RESERVE + BEVIO_SCRATCH, mine;
    short ev = BEV_EVENT_READING;
    ssize_t got;
    int err;

    if (what == EV_TIMEOUT) { /* EV_READ|EV_TIMEOUT: bytes came, no timeout */
        ev |= BEV_EVENT_TIMEOUT;
        goto fail;
    }
    if (bev->wm_read.high != 0) {
        size_t len = evbuffer_get_length(bev->input);

        if (len >= bev->wm_read.high) {
            /* full (or the mark was lowered under what is there): libevent's
             * watermark suspends reading, and resumes it under the mark */
            bufferevent_setwatermark(bev, EV_READ, bev->wm_read.low, bev->wm_read.high);
            return;
        }
        want = LG_MIN(want, bev->wm_read.high - len);
    }
    mine = LG_MIN(want, (size_t)BEVIO_RESERVE);
    got = bevio_readv(bev->input, fd, mine, bevio_scratch, want - mine);
    if (got > 0) {
        bufferevent_trigger(bev, EV_READ, 0);
        return;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        return;
    }
    ev |= got == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR;
fail:
    err = errno;
    bufferevent_disable(bev, EV_READ);
    errno = err; /* a deferred event callback reads it back */
    bufferevent_trigger_event(bev, ev, 0);
}

void
lg_bevio_read_limit(struct bufferevent *bev, size_t high)
{
    if (bevio_is_socket(bev) && event_get_callback(&bev->ev_read) == bevio_on_read
        && bev->wm_read.low == 0 && bev->wm_read.high == 0) {
        bev->wm_read.high = high; /* bevio_on_read sets libevent's when it is reached */
        return;
    }
    bufferevent_setwatermark(bev, EV_READ, 0, high);
}

void
lg_bevio_own_reads(struct bufferevent *bev)
{
    evutil_socket_t fd = bufferevent_getfd(bev);
    struct event_base *base = bufferevent_get_base(bev);
    bool armed;

    if (!bevio_is_socket(bev) || fd < 0 || event_get_callback(&bev->ev_read) == bevio_on_read) {
        return;
    }
    armed = event_pending(&bev->ev_read, EV_READ | EV_TIMEOUT, NULL) != 0;
    event_del(&bev->ev_read);
    /* the flags libevent gives it (EV_FINALIZE: bufferevent_free finalizes it) */
    event_assign(&bev->ev_read, base, fd, EV_READ | EV_PERSIST | EV_FINALIZE, bevio_on_read, bev);
    if (armed) {
        event_add(&bev->ev_read, evutil_timerisset(&bev->timeout_read) ? &bev->timeout_read : NULL);
    }
}
