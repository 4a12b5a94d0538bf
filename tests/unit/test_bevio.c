/*
 * test_bevio.c: a plain socket bufferevent reading through llmgate's own
 * read callback (lg_bevio_own_reads) behaves as libevent's: every byte in
 * order, small and large writes, the read high watermark honoured, EOF and
 * read timeouts reported, with and without deferred callbacks; and the
 * watermark and enable calls that skip what is already set leave a running
 * read timeout alone, where libevent's own calls restart it; a direct write
 * (lg_bevio_write_from) sends what the socket takes, only where nothing is
 * queued ahead, and leaves the rest and any failure to the caller.
 */
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>

#include "base/lg_core.h"
#include "http/bevio.h"
#include "lg_test.h"

#define TOTAL (300 * 1024 + 17)

struct rd {
    struct event_base *base;
    size_t got;      /* bytes taken out of the input so far */
    size_t max_len;  /* most bytes the input held at a read callback */
    size_t take;     /* bytes the read callback drains per call (0: all) */
    short events;    /* what the event callback saw */
    int bad;         /* bytes out of order */
    int calls;
};

static unsigned char
pattern(size_t i)
{
    return (unsigned char)((i * 131 + i / 251) & 0xff);
}

static void
rd_on_read(struct bufferevent *bev, void *arg)
{
    struct rd *r = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len = evbuffer_get_length(in), n;
    unsigned char buf[4096];

    r->calls++;
    if (len > r->max_len) {
        r->max_len = len;
    }
    n = r->take ? (len < r->take ? len : r->take) : len;
    while (n > 0) {
        size_t k = n < sizeof(buf) ? n : sizeof(buf);

        evbuffer_remove(in, buf, k);
        for (size_t i = 0; i < k; i++) {
            r->bad += buf[i] != pattern(r->got + i);
        }
        r->got += k;
        n -= k;
    }
    if (r->take && evbuffer_get_length(in) > 0) {
        /* more is waiting: come back without new bytes from the socket */
        bufferevent_trigger(bev, EV_READ, BEV_TRIG_DEFER_CALLBACKS);
    }
}

static void
rd_on_event(struct bufferevent *bev, short what, void *arg)
{
    struct rd *r = arg;

    (void)bev;
    r->events = what;
    event_base_loopexit(r->base, NULL);
}

struct wr {
    size_t sent;
    size_t piece;
};

static void
wr_on_write(struct bufferevent *bev, void *arg)
{
    struct wr *w = arg;
    unsigned char buf[8192];
    size_t n = TOTAL - w->sent < w->piece ? TOTAL - w->sent : w->piece;

    if (n == 0) {
        if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
            shutdown(bufferevent_getfd(bev), SHUT_WR); /* EOF for the reader */
            bufferevent_disable(bev, EV_WRITE);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        buf[i] = pattern(w->sent + i);
    }
    bufferevent_write(bev, buf, n);
    w->sent += n;
}

/* Sends TOTAL bytes in pieces of `piece` to a reader with own reads; returns 0 if all arrived. */
static int
run_transfer(size_t piece, int opts, size_t high, size_t take)
{
    struct event_base *base = event_base_new();
    struct bufferevent *a, *b;
    struct rd r = { .base = base, .take = take };
    struct wr w = { .piece = piece };
    event_callback_fn libevent_cb;
    int sv[2];

    LG_CHECK(base != NULL);
    LG_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    evutil_make_socket_nonblocking(sv[0]);
    evutil_make_socket_nonblocking(sv[1]);
    lg_bevio_init(base);
    a = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE | opts);
    b = bufferevent_socket_new(base, sv[1], BEV_OPT_CLOSE_ON_FREE);
    LG_CHECK(a != NULL && b != NULL);
    libevent_cb = event_get_callback(&a->ev_read);
    lg_bevio_own_reads(a);
    LG_CHECK(event_get_callback(&a->ev_read) != libevent_cb);
    lg_bevio_own_reads(a); /* again: no-op */
    bufferevent_setcb(a, rd_on_read, NULL, rd_on_event, &r);
    bufferevent_setwatermark(a, EV_READ, 0, high);
    bufferevent_enable(a, EV_READ);
    bufferevent_setcb(b, NULL, wr_on_write, NULL, &w);
    bufferevent_enable(b, EV_WRITE);
    wr_on_write(b, &w);
    event_base_dispatch(base);
    bufferevent_free(a);
    bufferevent_free(b);
    event_base_free(base);
    LG_CHECK(r.got == TOTAL);
    LG_CHECK(r.bad == 0);
    LG_CHECK(r.events == (BEV_EVENT_READING | BEV_EVENT_EOF));
    if (high != 0) {
        LG_CHECK(r.max_len <= high);
    }
    return 0;
}

static int
test_small_writes(void)
{
    return run_transfer(100, 0, 0, 0);
}

static int
test_large_writes(void)
{
    return run_transfer(8192, 0, 0, 0);
}

static int
test_deferred(void)
{
    return run_transfer(3000, BEV_OPT_DEFER_CALLBACKS, 0, 0);
}

static int
test_high_watermark(void)
{
    /* the reader takes 1000 bytes per call: reading must stop at 4096 */
    return run_transfer(8192, 0, 4096, 1000);
}

/* A reader of sv[0] of a new socket pair, reading with a read timeout of
 * tv, taken over by lg_bevio_own_reads() once armed. */
static struct bufferevent *
timed_reader(struct event_base *base, struct rd *r, const struct timeval *tv, int sv[2])
{
    struct bufferevent *a;

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        return NULL;
    }
    evutil_make_socket_nonblocking(sv[0]);
    lg_bevio_init(base);
    a = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE);
    bufferevent_setcb(a, rd_on_read, NULL, rd_on_event, r);
    /* armed before it is taken over: the timeout carries over */
    bufferevent_set_timeouts(a, tv, NULL);
    bufferevent_enable(a, EV_READ);
    lg_bevio_own_reads(a);
    return a;
}

static int
test_read_timeout(void)
{
    struct event_base *base = event_base_new();
    struct bufferevent *a;
    struct rd r = { .base = base };
    struct timeval tv = { 0, 50 * 1000 };
    int sv[2];

    a = timed_reader(base, &r, &tv, sv);
    LG_CHECK(a != NULL);
    event_base_dispatch(base);
    LG_CHECK(r.events == (BEV_EVENT_READING | BEV_EVENT_TIMEOUT));
    LG_CHECK(r.calls == 0);
    /* a timed-out read is disabled, as libevent does */
    LG_CHECK((bufferevent_get_enabled(a) & EV_READ) == 0);
    bufferevent_free(a);
    close(sv[1]);
    event_base_free(base);
    return 0;
}

/* when the read event's timeout expires (event_pending's answer) */
static uint64_t
read_expiry_us(struct bufferevent *bev)
{
    struct timeval tv;

    LG_CHECK(event_pending(&bev->ev_read, EV_TIMEOUT, &tv) != 0);
    return (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec;
}

/* returns once the clock has moved on by 30 ms (libevent reads a coarse
 * monotonic clock: a tick of up to 10 ms) */
static void
clock_moves(void)
{
    uint64_t t0 = lg_now_ns();

    while (lg_now_ns() - t0 < 30 * LG_NS_PER_MS) {
    }
}

static int
test_unchanged_is_skipped(void)
{
    struct event_base *base = event_base_new();
    struct bufferevent *a;
    struct rd r = { .base = base };
    struct timeval tv = { 10, 0 };
    uint64_t t1;
    int sv[2];

    a = timed_reader(base, &r, &tv, sv);
    LG_CHECK(a != NULL);
    t1 = read_expiry_us(a);
    clock_moves();
    /* set as they are: nothing is re-added, the timeout runs on */
    lg_bevio_watermark(a, EV_READ, 0, 0);
    lg_bevio_enable(a, EV_READ);
    LG_CHECK(read_expiry_us(a) == t1);
    /* libevent's own call restarts it (what the wrappers save) */
    bufferevent_setwatermark(a, EV_READ, 0, 0);
    LG_CHECK(read_expiry_us(a) > t1);
    /* a change goes through */
    lg_bevio_watermark(a, EV_READ, 0, 4096);
    LG_CHECK(a->wm_read.high == 4096 && a->wm_read.low == 0);
    lg_bevio_watermark(a, EV_WRITE, 100, 0);
    LG_CHECK(a->wm_write.low == 100);
    lg_bevio_enable(a, EV_READ | EV_WRITE);
    LG_CHECK(bufferevent_get_enabled(a) == (EV_READ | EV_WRITE));
    bufferevent_free(a);
    close(sv[1]);
    event_base_free(base);
    return 0;
}

/*
 * Two socket pairs on base: *a on sv[0], connected and reading through
 * bevio (as llmgate's connections are once connected), and *fresh on
 * sv2[0], still on libevent's read callback (a connect not seen yet); both
 * enabled both ways, and the write events libevent arms at enable run
 * once and disarm. sv[1] is non-blocking too (the tests drain it).
 */
static int
pairs_open(struct event_base *base, int sv[2], int sv2[2], struct bufferevent **a,
           struct bufferevent **fresh)
{
    signal(SIGPIPE, SIG_IGN); /* as llmgate does */
    LG_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    LG_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv2) == 0);
    evutil_make_socket_nonblocking(sv[0]);
    evutil_make_socket_nonblocking(sv[1]);
    evutil_make_socket_nonblocking(sv2[0]);
    lg_bevio_init(base);
    *a = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    *fresh = bufferevent_socket_new(base, sv2[0], BEV_OPT_CLOSE_ON_FREE);
    lg_bevio_own_reads(*a);
    bufferevent_enable(*a, EV_READ | EV_WRITE);
    bufferevent_enable(*fresh, EV_READ | EV_WRITE);
    event_base_loop(base, EVLOOP_NONBLOCK);
    LG_CHECK(event_pending(&(*a)->ev_write, EV_WRITE, NULL) == 0);
    return 0;
}

static int
test_write_from(void)
{
    struct event_base *base = event_base_new();
    struct evbuffer *src = evbuffer_new();
    struct bufferevent *a, *fresh;
    static char big[4 << 20];
    char got[16];
    size_t sent;
    int sv[2], sv2[2];

    LG_CHECK(pairs_open(base, sv, sv2, &a, &fresh) == 0);

    /* nothing queued: written at once, drained from src, no write event */
    evbuffer_add(src, "hello world", 11);
    LG_CHECK(lg_bevio_write_from(a, src, 5) == 5);
    LG_CHECK(evbuffer_get_length(src) == 6);
    LG_CHECK(read(sv[1], got, sizeof(got)) == 5 && memcmp(got, "hello", 5) == 0);
    LG_CHECK(event_pending(&a->ev_write, EV_WRITE, NULL) == 0);
    /* bytes queued ahead: not this way (they would be overtaken) */
    bufferevent_write(a, "!", 1);
    LG_CHECK(lg_bevio_write_from(a, src, 6) == 0 && evbuffer_get_length(src) == 6);
    event_base_loop(base, EVLOOP_NONBLOCK); /* the bufferevent writes it */
    LG_CHECK(read(sv[1], got, sizeof(got)) == 1 && got[0] == '!');
    /* a bufferevent still reading through libevent (connect not seen) */
    LG_CHECK(lg_bevio_write_from(fresh, src, 6) == 0);
    /* not writing */
    bufferevent_disable(a, EV_WRITE);
    LG_CHECK(lg_bevio_write_from(a, src, 6) == 0);
    bufferevent_enable(a, EV_WRITE);
    /* more than the socket takes: what it took is gone from src, the rest stays */
    evbuffer_drain(src, 6);
    memset(big, 'x', sizeof(big));
    evbuffer_add(src, big, sizeof(big));
    sent = lg_bevio_write_from(a, src, sizeof(big));
    LG_CHECK(sent > 0 && sent < sizeof(big));
    LG_CHECK(evbuffer_get_length(src) == sizeof(big) - sent);
    /* the peer gone: nothing written, nothing lost from src */
    evbuffer_drain(src, evbuffer_get_length(src));
    evbuffer_add(src, "late", 4);
    close(sv[1]);
    LG_CHECK(lg_bevio_write_from(a, src, 4) == 0 && evbuffer_get_length(src) == 4);

    evbuffer_free(src);
    bufferevent_free(a);
    bufferevent_free(fresh);
    close(sv2[1]);
    event_base_free(base);
    return 0;
}

/* Reads everything sv offers until `want` bytes came (the loop writes the rest). */
static size_t
drain_peer(struct event_base *base, int fd, char *dst, size_t want)
{
    size_t have = 0;

    for (int spins = 0; have < want && spins < 100000; spins++) {
        ssize_t got = read(fd, dst + have, want - have);

        if (got > 0) {
            have += (size_t)got;
        } else {
            event_base_loop(base, EVLOOP_NONBLOCK);
        }
    }
    return have;
}

static int
test_write_msg(void)
{
    struct event_base *base = event_base_new();
    struct evbuffer *body = evbuffer_new();
    struct bufferevent *a, *fresh;
    static char big[3 << 20], got[(3 << 20) + 64];
    char head[] = "HEAD\r\n\r\n";
    size_t sent, hl = sizeof(head) - 1;
    int sv[2], sv2[2];

    LG_CHECK(pairs_open(base, sv, sv2, &a, &fresh) == 0);

    /* head and body in one write; the body kept, nothing queued or armed */
    evbuffer_add(body, "body", 4);
    evbuffer_add(body, "+more", 5); /* two chains at least */
    LG_CHECK(lg_bevio_write_msg(a, head, hl, body) == hl + 9);
    LG_CHECK(evbuffer_get_length(body) == 9);
    LG_CHECK(evbuffer_get_length(bufferevent_get_output(a)) == 0);
    LG_CHECK(event_pending(&a->ev_write, EV_WRITE, NULL) == 0);
    LG_CHECK(read(sv[1], got, sizeof(got)) == (ssize_t)hl + 9
             && memcmp(got, "HEAD\r\n\r\nbody+more", hl + 9) == 0);
    /* no body */
    LG_CHECK(lg_bevio_write_msg(a, head, hl, NULL) == hl);
    LG_CHECK(read(sv[1], got, sizeof(got)) == (ssize_t)hl);

    /* more than the socket takes: the rest queued (the output's front is
     * frozen: its own write alone may drain it) and written by the loop, in
     * order, every byte once; the body still whole for a retry */
    for (size_t i = 0; i < sizeof(big); i++) {
        big[i] = (char)('a' + i % 26);
    }
    evbuffer_drain(body, evbuffer_get_length(body));
    evbuffer_add(body, big, sizeof(big) / 3);
    evbuffer_add(body, big + sizeof(big) / 3, sizeof(big) - sizeof(big) / 3);
    sent = lg_bevio_write_msg(a, head, hl, body);
    LG_CHECK(sent > hl && sent < hl + sizeof(big));
    LG_CHECK(evbuffer_get_length(bufferevent_get_output(a)) == hl + sizeof(big) - sent);
    LG_CHECK(evbuffer_get_length(body) == sizeof(big));
    LG_CHECK(drain_peer(base, sv[1], got, hl + sizeof(big)) == hl + sizeof(big));
    LG_CHECK(memcmp(got, head, hl) == 0 && memcmp(got + hl, big, sizeof(big)) == 0);
    LG_CHECK(read(sv[1], got, 1) < 0);

    /* bytes queued ahead: all of it queued behind them */
    evbuffer_drain(body, evbuffer_get_length(body));
    evbuffer_add(body, "b", 1);
    bufferevent_write(a, "!", 1);
    LG_CHECK(lg_bevio_write_msg(a, head, hl, body) == 0);
    LG_CHECK(evbuffer_get_length(bufferevent_get_output(a)) == 1 + hl + 1);
    LG_CHECK(drain_peer(base, sv[1], got, hl + 2) == hl + 2);
    LG_CHECK(got[0] == '!' && memcmp(got + 1, head, hl) == 0 && got[hl + 1] == 'b');
    /* a connect not seen yet: queued, for the bufferevent to write */
    LG_CHECK(lg_bevio_write_msg(fresh, head, hl, body) == 0);
    LG_CHECK(evbuffer_get_length(bufferevent_get_output(fresh)) == hl + 1);

    evbuffer_free(body);
    bufferevent_free(a);
    bufferevent_free(fresh);
    close(sv[1]);
    close(sv2[1]);
    event_base_free(base);
    return 0;
}

LG_TEST_MAIN(test_small_writes, test_large_writes, test_deferred, test_high_watermark,
             test_read_timeout, test_unchanged_is_skipped, test_write_from, test_write_msg)
