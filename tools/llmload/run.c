/*
 * run.c: the load run: one event loop, a pool of keep-alive connections, the
 * open-loop scheduler and closed-loop slots, and per-request timing.
 * Owns: the event base, every connection (and its bufferevent, parser, SSE
 * scanner and timer), the request records, the item array handed in, the
 * replica names and the inter-token histogram.
 * Timing (CLOCK_MONOTONIC): every event found in one read carries the
 * kernel's receive time of that read's newest segment (SO_TIMESTAMPNS), so a
 * late wake-up of this process is not counted as server latency; t_send is
 * stamped just before the write call that holds the request's last byte. The
 * loop uses EVENT_BASE_FLAG_PRECISE_TIMER so that arrivals fire on time
 * instead of on the next millisecond.
 * The bufferevent of a connection connects and writes; its reads go through
 * conn_on_readable() (recvmsg() for the timestamps) on the same socket.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>
#include <llhttp.h>

#include "lg_version.h"
#include "llmload.h"

#define RUN_MAX_EVENT_BYTES (1u << 20)  /* one SSE event */
#define RUN_MAX_BODY_BYTES  (64u << 20) /* one non-streamed body */
#define RUN_FILLER_SLACK    4096        /* spread of user-part offsets */
#define RUN_READ_BYTES      (64u << 10) /* one recvmsg() */

enum lg_ld_conn_state {
    LG_LD_CONN_ST_DOWN = 0,   /* no socket */
    LG_LD_CONN_ST_IDLE,       /* kept alive, no request */
    LG_LD_CONN_ST_CONNECTING, /* connect in progress, request queued */
    LG_LD_CONN_ST_SENDING,    /* request bytes leaving */
    LG_LD_CONN_ST_READING,    /* request sent, response expected */
};

enum conn_body {
    CONN_BODY_DISCARD = 0, /* a non-200 response */
    CONN_BODY_SSE,         /* text/event-stream */
    CONN_BODY_JSON,        /* a whole JSON body */
};

struct lg_ld_conn {
    struct lg_ld_run *run;   /* borrowed */
    struct bufferevent *bev; /* owned; NULL when down; writes only */
    struct event *rd;        /* owned: reads on the bev's socket */
    struct event *timer;     /* owned: the request's timeout */
    enum lg_ld_conn_state state;
    llhttp_t parser;
    size_t req;                   /* index of the request in flight */
    TAILQ_ENTRY(lg_ld_conn) link; /* on run->idle_up or run->idle_down when free */
    bool busy;
    bool reused;    /* the request went out on a kept-alive socket */
    bool got_bytes; /* response bytes seen for this request */
    bool msg_done;
    bool done_seen; /* data: [DONE] */
    bool invalid;
    bool stream_error; /* an SSE event carried an "error" object */
    bool ctype_sse;
    bool hname_long;
    enum conn_body body;
    uint16_t replica;
    uint64_t now; /* stamp of the read being parsed (absolute ns) */
    struct lg_ld_sse sse;
    char *json; /* owned: a non-streamed body, grown as needed */
    size_t json_len;
    size_t json_cap;
    char hname[64];
    size_t hname_len;
    char hval[128];
    size_t hval_len;
};

TAILQ_HEAD(lg_ld_conn_list, lg_ld_conn);

struct lg_ld_run {
    const struct lg_ld_opts *o;
    struct event_base *base;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    llhttp_settings_t settings;
    uint64_t t0;      /* absolute ns */
    uint64_t t0_wall; /* CLOCK_REALTIME at t0, for matching packet captures */

    struct lg_ld_item *items; /* owned; closed loop appends */
    size_t n_items;
    size_t cap_items;
    struct lg_ld_rec *recs; /* owned; recs[i] belongs to items[i] */
    size_t next;            /* next item to launch */
    size_t inflight;
    size_t done;
    size_t ok;
    size_t failed;
    size_t *pending; /* owned ring of item indexes waiting for a connection */
    size_t pend_head;
    size_t pend_len;
    size_t pend_cap;

    struct lg_ld_conn **conns; /* owned, max_conns slots */
    size_t n_conns;
    struct lg_ld_conn_list idle_up;
    struct lg_ld_conn_list idle_down;

    struct event *sched_ev;
    struct event *stop_ev;
    struct event *progress_ev;
    struct event *sig_int;
    struct event *sig_term;
    bool stopping; /* start no more requests */
    bool interrupted;
    uint64_t last_end_ns; /* relative to t0 */
    size_t progress_done;

    struct lg_ld_gen gen; /* closed loop draws contents as it goes */
    struct lg_ld_hist itl;
    char *replicas[LG_LD_MAX_REPLICAS];
    size_t n_replicas;

    char *filler; /* owned prompt text, [a-z .] only */
    char *rbuf;   /* owned: RUN_READ_BYTES, the target of every read */
    size_t filler_len;
    char *model_json; /* owned, quoted */
    char *head;       /* owned: header lines after the request line */
    size_t head_len;
};

static void run_launch(struct lg_ld_run *run, size_t i);
static void run_after_done(struct lg_ld_run *run);
static void conn_send(struct lg_ld_conn *c);
static void conn_write_request(struct lg_ld_conn *c);

/* ---- records ------------------------------------------------------------ */

static inline uint64_t
run_rel(const struct lg_ld_run *run, uint64_t abs_ns)
{
    return abs_ns > run->t0 ? abs_ns - run->t0 : 0;
}

static uint16_t
run_replica(struct lg_ld_run *run, const char *v, size_t n)
{
    char name[sizeof(((struct lg_ld_conn *)0)->hval)];

    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) {
        n--;
    }
    for (size_t i = 0; i < n; i++) {
        name[i] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
    }
    name[n] = '\0';
    for (size_t i = 0; i < run->n_replicas; i++) {
        if (strcmp(run->replicas[i], name) == 0) {
            return (uint16_t)(i + 1);
        }
    }
    if (run->n_replicas == LG_LD_MAX_REPLICAS - 1) {
        /* The last slot collects every name past the bound. */
        run->replicas[run->n_replicas++] = lg_xstrdup("(other)");
    }
    if (run->n_replicas == LG_LD_MAX_REPLICAS) {
        return LG_LD_MAX_REPLICAS;
    }
    run->replicas[run->n_replicas++] = lg_xstrdup(name);
    return (uint16_t)run->n_replicas;
}

static void
run_note_content(struct lg_ld_run *run, struct lg_ld_rec *rec, uint64_t now_abs)
{
    uint64_t t = run_rel(run, now_abs);

    if (!(rec->flags & LG_LD_REC_F_FIRST)) {
        rec->flags |= LG_LD_REC_F_FIRST;
        rec->t_first_ns = t;
    } else {
        uint64_t gap = t > rec->t_last_ns ? t - rec->t_last_ns : 0;

        lg_ld_hist_add(&run->itl, gap);
        rec->itl_sum_ns += gap;
        rec->itl_n++;
        if (gap > rec->itl_max_ns) {
            rec->itl_max_ns = gap;
        }
    }
    rec->t_last_ns = t;
    rec->events++;
}

/* ---- connections ---------------------------------------------------------- */

static void
conn_down(struct lg_ld_conn *c)
{
    if (c->rd != NULL) {
        event_free(c->rd); /* before the bufferevent closes the fd */
        c->rd = NULL;
    }
    if (c->bev != NULL) {
        bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
        bufferevent_free(c->bev); /* safe from its own callback: libevent defers the free */
        c->bev = NULL;
    }
    c->state = LG_LD_CONN_ST_DOWN;
}

/* Ends the request in flight on c with outcome err; c returns to the pool. */
static void
conn_complete_at(struct lg_ld_conn *c, enum lg_ld_err err, bool keep, uint64_t now)
{
    struct lg_ld_run *run = c->run;
    struct lg_ld_rec *rec = &run->recs[c->req];

    evtimer_del(c->timer);
    rec->t_end_ns = run_rel(run, now);
    rec->error = (uint8_t)err;
    rec->flags |= LG_LD_REC_F_DONE;
    if (rec->t_end_ns > run->last_end_ns) {
        run->last_end_ns = rec->t_end_ns;
    }
    if (err == LG_LD_ERR_NONE) {
        run->ok++;
    } else {
        run->failed++;
    }
    run->inflight--;
    run->done++;
    c->busy = false;
    if (keep && c->bev != NULL) {
        c->state = LG_LD_CONN_ST_IDLE;
        TAILQ_INSERT_HEAD(&run->idle_up, c, link);
    } else {
        conn_down(c);
        TAILQ_INSERT_HEAD(&run->idle_down, c, link);
    }
    run_after_done(run);
}

static void
conn_complete(struct lg_ld_conn *c, enum lg_ld_err err, bool keep)
{
    conn_complete_at(c, err, keep, lg_now_ns());
}

static void
conn_on_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct lg_ld_conn *c = arg;

    conn_complete(c, c->state == LG_LD_CONN_ST_CONNECTING ? LG_LD_ERR_CONNECT : LG_LD_ERR_TIMEOUT,
                  false);
}

/* The message is complete (its last bytes arrived at `now`): classify it. */
static void
conn_finish(struct lg_ld_conn *c, bool keep, uint64_t now)
{
    struct lg_ld_run *run = c->run;
    struct lg_ld_rec *rec = &run->recs[c->req];
    enum lg_ld_err err = LG_LD_ERR_NONE;

    if (c->parser.status_code != 200) {
        err = LG_LD_ERR_STATUS;
    } else if (c->body == CONN_BODY_SSE) {
        /* An engine that fails mid-stream sends an error event, often
         * followed by [DONE]: the user got no complete answer. */
        err = c->stream_error ? LG_LD_ERR_INVALID : c->done_seen ? LG_LD_ERR_NONE : LG_LD_ERR_CUT;
    } else if (c->body == CONN_BODY_JSON) {
        struct lg_ld_chunk ch;

        if (lg_ld_chunk_inspect(c->json ? c->json : "", c->json_len, &ch) != LG_OK || ch.error) {
            err = LG_LD_ERR_INVALID;
        } else {
            /* A whole response: its first token is its last byte. */
            if (ch.content) {
                run_note_content(run, rec, c->now);
            }
            if (ch.has_usage) {
                rec->usage_tokens = ch.completion_tokens;
            }
        }
    }
    conn_complete_at(c, err, keep && run->o->reuse && llhttp_should_keep_alive(&c->parser), now);
}

/* The connection broke while a request was in flight. */
static void
conn_broken(struct lg_ld_conn *c)
{
    struct lg_ld_rec *rec = &c->run->recs[c->req];

    if (c->reused && !c->got_bytes && !(rec->flags & LG_LD_REC_F_RETRIED)) {
        /* The server closed a kept-alive connection as we reused it; like
         * any HTTP client, send once more on a fresh one. */
        rec->flags |= LG_LD_REC_F_RETRIED;
        rec->flags &= (uint8_t)~LG_LD_REC_F_SENT;
        conn_down(c);
        conn_send(c);
        return;
    }
    if (c->parser.status_code != 0 && c->parser.status_code != 200) {
        conn_complete(c, LG_LD_ERR_STATUS, false);
    } else if (c->body == CONN_BODY_SSE && c->done_seen) {
        /* Everything a client reads came before [DONE]. */
        conn_complete(c, c->stream_error ? LG_LD_ERR_INVALID : LG_LD_ERR_NONE, false);
    } else {
        conn_complete(c, LG_LD_ERR_CUT, false);
    }
}

static int
conn_on_sse_event(void *arg, const char *data, size_t len)
{
    struct lg_ld_conn *c = arg;
    struct lg_ld_rec *rec = &c->run->recs[c->req];
    struct lg_ld_chunk ch;

    if (c->done_seen) {
        return 0;
    }
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        c->done_seen = true;
        return 0;
    }
    if (lg_ld_chunk_inspect(data, len, &ch) != LG_OK) {
        return 1;
    }
    if (ch.has_usage) {
        rec->usage_tokens = ch.completion_tokens;
    }
    if (ch.content) {
        run_note_content(c->run, rec, c->now);
    }
    c->stream_error |= ch.error;
    return 0;
}

static int
conn_on_header_field(llhttp_t *p, const char *at, size_t len)
{
    struct lg_ld_conn *c = p->data;

    if (len > sizeof(c->hname) - c->hname_len) {
        c->hname_long = true;
        return 0;
    }
    memcpy(c->hname + c->hname_len, at, len);
    c->hname_len += len;
    return 0;
}

static int
conn_on_header_value(llhttp_t *p, const char *at, size_t len)
{
    struct lg_ld_conn *c = p->data;
    size_t room = sizeof(c->hval) - 1 - c->hval_len;

    len = LG_MIN(len, room); /* longer values are truncated: only names are kept */
    memcpy(c->hval + c->hval_len, at, len);
    c->hval_len += len;
    return 0;
}

static int
conn_on_header_value_complete(llhttp_t *p)
{
    struct lg_ld_conn *c = p->data;

    if (!c->hname_long) {
        if (lg_str_ieq(c->hname, c->hname_len, c->run->o->replica_header)) {
            c->replica = run_replica(c->run, c->hval, c->hval_len);
        } else if (lg_str_ieq(c->hname, c->hname_len, "content-type")) {
            c->ctype_sse = c->hval_len >= 17 && strncasecmp(c->hval, "text/event-stream", 17) == 0;
        }
    }
    c->hname_len = 0;
    c->hval_len = 0;
    c->hname_long = false;
    return 0;
}

static int
conn_on_headers_complete(llhttp_t *p)
{
    struct lg_ld_conn *c = p->data;
    struct lg_ld_rec *rec = &c->run->recs[c->req];

    rec->status = p->status_code;
    rec->replica = c->replica;
    if (p->status_code != 200) {
        c->body = CONN_BODY_DISCARD;
    } else if (c->ctype_sse) {
        c->body = CONN_BODY_SSE;
    } else {
        c->body = CONN_BODY_JSON;
    }
    return 0;
}

static int
conn_on_body(llhttp_t *p, const char *at, size_t len)
{
    struct lg_ld_conn *c = p->data;

    switch (c->body) {
    case CONN_BODY_SSE:
        if (lg_ld_sse_feed(&c->sse, at, len, conn_on_sse_event, c) != LG_OK) {
            c->invalid = true;
            return HPE_USER;
        }
        return 0;
    case CONN_BODY_JSON:
        if (len > RUN_MAX_BODY_BYTES - c->json_len) {
            c->invalid = true;
            return HPE_USER;
        }
        if (c->json_len + len > c->json_cap) {
            c->json_cap = LG_MAX(c->json_cap * 2, c->json_len + len);
            c->json = lg_xrealloc(c->json, c->json_cap);
        }
        memcpy(c->json + c->json_len, at, len);
        c->json_len += len;
        return 0;
    default:
        return 0;
    }
}

static int
conn_on_message_complete(llhttp_t *p)
{
    struct lg_ld_conn *c = p->data;

    c->msg_done = true;
    return HPE_PAUSED; /* finish outside the parser */
}

/* The stamp for bytes just read: the kernel's receive time of the newest
 * segment in them (SO_TIMESTAMPNS, on CLOCK_REALTIME, carried over to the
 * monotonic clock), so that a late wake-up of this process does not count
 * as server latency. Falls back to the time of the read. */
static uint64_t
conn_rx_stamp(struct msghdr *msg)
{
    uint64_t now = lg_now_ns();

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            uint64_t wall = lg_wall_ns(), k;

            memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
            k = (uint64_t)ts.tv_sec * LG_NS_PER_S + (uint64_t)ts.tv_nsec;
            if (k <= wall && wall - k < 10 * LG_NS_PER_S && wall - k < now) {
                return now - (wall - k);
            }
        }
    }
    return now;
}

/* The peer closed: a body delimited by the close completes now. */
static void
conn_on_eof(struct lg_ld_conn *c)
{
    if (c->got_bytes) {
        llhttp_errno_t e = llhttp_finish(&c->parser);

        if ((e == HPE_OK || e == HPE_PAUSED) && c->msg_done) {
            conn_finish(c, false, lg_now_ns());
            return;
        }
    }
    conn_broken(c);
}

static void
conn_drop_idle(struct lg_ld_conn *c)
{
    TAILQ_REMOVE(&c->run->idle_up, c, link);
    conn_down(c);
    TAILQ_INSERT_TAIL(&c->run->idle_down, c, link);
}

/* Reads with recvmsg() rather than through the bufferevent, to get the
 * receive timestamps; the bytes go straight from a run-wide buffer into
 * llhttp, so nothing is copied or kept between reads. */
static void
conn_on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct lg_ld_conn *c = arg;
    struct lg_ld_run *run = c->run;
    char ctl[CMSG_SPACE(sizeof(struct timespec)) * 2];
    struct iovec iov = { .iov_base = run->rbuf, .iov_len = RUN_READ_BYTES };
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)
    };
    ssize_t n = recvmsg(fd, &msg, 0);
    llhttp_errno_t e;
    uint64_t now;

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        return;
    }
    if (!c->busy) {
        /* Close or bytes nobody asked for on an idle connection. */
        conn_drop_idle(c);
        return;
    }
    if (n < 0) {
        if (c->state == LG_LD_CONN_ST_CONNECTING) {
            conn_complete(c, LG_LD_ERR_CONNECT, false);
        } else {
            conn_broken(c);
        }
        return;
    }
    if (n == 0) {
        conn_on_eof(c);
        return;
    }
    now = conn_rx_stamp(&msg);
    if (!(run->recs[c->req].flags & LG_LD_REC_F_SENT)) {
        /* A response before the write callback ran. */
        struct lg_ld_rec *rec = &run->recs[c->req];

        rec->t_send_ns = run_rel(run, now);
        rec->flags |= LG_LD_REC_F_SENT;
    }
    c->state = LG_LD_CONN_ST_READING;
    c->now = now;
    c->got_bytes = true;
    e = llhttp_execute(&c->parser, run->rbuf, (size_t)n);
    if (e == HPE_OK) {
        return;
    }
    if (e == HPE_PAUSED && c->msg_done) {
        /* Bytes past the end of the response: the connection is not clean. */
        conn_finish(c, llhttp_get_error_pos(&c->parser) == run->rbuf + n, now);
        return;
    }
    if (!c->invalid) {
        LG_DEBUG("request %zu: bad response: %s", c->req, llhttp_errno_name(e));
    }
    conn_complete(c, LG_LD_ERR_INVALID, false);
}

static void
conn_on_write(struct bufferevent *bev, void *arg)
{
    struct lg_ld_conn *c = arg;

    if (c->busy && c->state == LG_LD_CONN_ST_SENDING) {
        struct lg_ld_rec *rec = &c->run->recs[c->req];

        rec->t_send_ns = run_rel(c->run, lg_now_ns());
        rec->flags |= LG_LD_REC_F_SENT;
        c->state = LG_LD_CONN_ST_READING;
    }
}

static void
conn_on_event(struct bufferevent *bev, short what, void *arg)
{
    struct lg_ld_conn *c = arg;

    if (what & BEV_EVENT_CONNECTED) {
        bufferevent_set_timeouts(bev, NULL, NULL);
        if (c->busy && c->state == LG_LD_CONN_ST_CONNECTING) {
            conn_write_request(c);
        }
        return;
    }
    if (!c->busy) {
        conn_drop_idle(c);
        return;
    }
    if (c->state == LG_LD_CONN_ST_CONNECTING) {
        conn_complete(c, LG_LD_ERR_CONNECT, false);
        return;
    }
    /* A write failed or the connect timed out: reads come through
     * conn_on_readable(), which sees the close itself. */
    conn_broken(c);
}

/* The request in flight failed before reaching the wire: report it from
 * the loop, not from here, so a run of synchronous failures cannot recurse. */
static void
conn_fail_soon(struct lg_ld_conn *c)
{
    struct timeval zero = { 0, 0 };

    conn_down(c);
    c->state = LG_LD_CONN_ST_CONNECTING;
    evtimer_del(c->timer);
    evtimer_add(c->timer, &zero);
}

static bool
conn_open(struct lg_ld_conn *c)
{
    struct lg_ld_run *run = c->run;
    double ct = run->o->connect_timeout_s;
    struct timeval tv;
    evutil_socket_t fd;
    int one = 1;

    c->bev = bufferevent_socket_new(run->base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (c->bev == NULL) {
        return false;
    }
    bufferevent_setcb(c->bev, NULL, conn_on_write, conn_on_event, c);
    /* While connecting, libevent applies the write timeout to the connect. */
    tv.tv_sec = (time_t)ct;
    tv.tv_usec = (suseconds_t)((ct - (double)tv.tv_sec) * 1e6);
    bufferevent_set_timeouts(c->bev, NULL, &tv);
    bufferevent_enable(c->bev, EV_WRITE); /* conn_on_readable() does the reading */
    c->state = LG_LD_CONN_ST_CONNECTING;
    if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&run->addr, (int)run->addr_len)
        != 0) {
        LG_DEBUG("connect: %s", strerror(errno));
        return false;
    }
    fd = bufferevent_getfd(c->bev);
    if (fd < 0) {
        return false;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    c->rd = event_new(run->base, fd, EV_READ | EV_PERSIST, conn_on_readable, c);
    return c->rd != NULL && event_add(c->rd, NULL) == 0;
}

struct conn_piece {
    const char *p;
    size_t n;
};

/* Writes the request on a connected socket: a head, then the JSON body in
 * pieces, the large prompt slices by reference. */
static void
conn_write_request(struct lg_ld_conn *c)
{
    struct lg_ld_run *run = c->run;
    const struct lg_ld_opts *o = run->o;
    const struct lg_ld_item *it = &run->items[c->req];
    struct evbuffer *out;
    char pre[512], tail[256], ph[64], uh[64], head[1100], mt[48];
    struct conn_piece pc[12];
    size_t np = 0, total = 0, ph_len = 0, p_fill = 0, uh_len, u_fill;
    bool sys;
    uint64_t t;
    int n;
    /* a replayed trace's request may name its own model, API and stream flag */
    const char *model = it->model != NULL ? it->model : run->model_json;
    enum lg_ld_api api = it->api >= 0 ? (enum lg_ld_api)it->api : o->api;
    bool stream = it->stream >= 0 ? it->stream != 0 : o->stream;

    c->state = LG_LD_CONN_ST_SENDING;

    /* Prompt text: a group header plus filler for the shared prefix, a
     * request header plus filler (at a per-request offset) for the rest. */
    if (it->group >= 0 && o->prefix_bytes > 0) {
        n = snprintf(ph, sizeof(ph), "System prompt of group %" PRId32 ". ", it->group);
        ph_len = LG_MIN((size_t)n, o->prefix_bytes);
        p_fill = o->prefix_bytes - ph_len;
    }
    sys = ph_len + p_fill > 0;
    n = snprintf(uh, sizeof(uh), "Request %zu. ", c->req);
    uh_len = LG_MIN((size_t)n, it->prompt_bytes);
    u_fill = it->prompt_bytes - uh_len;

    if (api == LG_LD_API_CHAT) {
        n = snprintf(pre, sizeof(pre),
                     "{\"model\":%s,\"messages\":[{\"role\":\"%s\",\"content\":\"", model,
                     sys ? "system" : "user");
    } else {
        n = snprintf(pre, sizeof(pre), "{\"model\":%s,\"%s\":\"", model,
                     api == LG_LD_API_COMPLETIONS ? "prompt" : "input");
    }
    pc[np++] = (struct conn_piece){ pre, (size_t)n };
    pc[np++] = (struct conn_piece){ ph, ph_len };
    pc[np++] = (struct conn_piece){ run->filler, p_fill };
    if (api == LG_LD_API_CHAT && sys) {
        static const char next_msg[] = "\"},{\"role\":\"user\",\"content\":\"";

        pc[np++] = (struct conn_piece){ next_msg, sizeof(next_msg) - 1 };
    }
    pc[np++] = (struct conn_piece){ uh, uh_len };
    pc[np++] = (struct conn_piece){ run->filler + (c->req * 7919u) % RUN_FILLER_SLACK, u_fill };
    if (api == LG_LD_API_EMBEDDINGS) {
        n = snprintf(tail, sizeof(tail), "\"");
    } else {
        mt[0] = '\0';
        if (!it->no_max_tokens) {
            snprintf(mt, sizeof(mt), ",\"max_tokens\":%" PRIu32, it->max_tokens);
        }
        n = snprintf(tail, sizeof(tail), "\"%s%s,\"stream\":%s%s",
                     api == LG_LD_API_CHAT ? "}]" : "", mt, stream ? "true" : "false",
                     stream && o->include_usage ? ",\"stream_options\":{\"include_usage\":true}"
                                                : "");
    }
    pc[np++] = (struct conn_piece){ tail, (size_t)n };
    if (o->extra_body != NULL) {
        pc[np++] = (struct conn_piece){ ",", 1 };
        pc[np++] = (struct conn_piece){ o->extra_body, strlen(o->extra_body) };
    }
    if (it->extra != NULL) {
        pc[np++] = (struct conn_piece){ ",", 1 };
        pc[np++] = (struct conn_piece){ it->extra, strlen(it->extra) };
    }
    pc[np++] = (struct conn_piece){ "}", 1 };
    for (size_t i = 0; i < np; i++) {
        total += pc[i].n;
    }

    out = bufferevent_get_output(c->bev);
    n = snprintf(head, sizeof(head), "POST %s HTTP/1.1\r\n", o->api_paths[api]);
    evbuffer_add(out, head, (size_t)n);
    evbuffer_add(out, run->head, run->head_len);
    n = snprintf(head, sizeof(head), "Accept: %s\r\nContent-Length: %zu\r\n\r\n",
                 stream ? "text/event-stream" : "application/json", total);
    evbuffer_add(out, head, (size_t)n);
    for (size_t i = 0; i < np; i++) {
        if (pc[i].n >= 1024 && pc[i].p >= run->filler && pc[i].p < run->filler + run->filler_len) {
            evbuffer_add_reference(out, pc[i].p, pc[i].n, NULL, NULL);
        } else if (pc[i].n > 0) {
            evbuffer_add(out, pc[i].p, pc[i].n);
        }
    }
    /* Write now rather than on the next loop turn. t_send is stamped just
     * before the call: on loopback the kernel sends within it, and waking
     * the server there may preempt this process, so a stamp taken after it
     * could be late by a whole time slice. What does not fit goes out when
     * the socket is writable, and the write callback stamps it then. */
    t = lg_now_ns();
    if (evbuffer_write(out, bufferevent_getfd(c->bev)) > 0 && evbuffer_get_length(out) == 0) {
        struct lg_ld_rec *rec = &run->recs[c->req];

        rec->t_send_ns = run_rel(run, t);
        rec->flags |= LG_LD_REC_F_SENT;
        c->state = LG_LD_CONN_ST_READING;
    }
}

/* Sends the request in flight: now on a kept-alive connection, once
 * connected on a new one. */
static void
conn_send(struct lg_ld_conn *c)
{
    if (c->bev != NULL) {
        c->reused = true;
        conn_write_request(c);
        return;
    }
    c->reused = false;
    if (!conn_open(c)) {
        conn_fail_soon(c);
    }
}

/* Starts request i on connection c. */
static void
conn_start(struct lg_ld_conn *c, size_t i)
{
    struct lg_ld_run *run = c->run;
    struct lg_ld_rec *rec = &run->recs[i];
    struct timeval tv;

    rec->flags |= LG_LD_REC_F_LAUNCHED;
    rec->t_start_ns = run_rel(run, lg_now_ns());
    run->inflight++;
    c->busy = true;
    c->req = i;
    c->got_bytes = false;
    c->msg_done = false;
    c->done_seen = false;
    c->invalid = false;
    c->stream_error = false;
    c->ctype_sse = false;
    c->hname_long = false;
    c->hname_len = 0;
    c->hval_len = 0;
    c->body = CONN_BODY_DISCARD;
    c->replica = 0;
    c->json_len = 0;
    lg_ld_sse_reset(&c->sse);
    llhttp_init(&c->parser, HTTP_RESPONSE, &run->settings);
    c->parser.data = c;
    tv.tv_sec = (time_t)run->o->timeout_s;
    tv.tv_usec = (suseconds_t)((run->o->timeout_s - (double)tv.tv_sec) * 1e6);
    evtimer_add(c->timer, &tv);
    conn_send(c);
}

static struct lg_ld_conn *
conn_new(struct lg_ld_run *run)
{
    struct lg_ld_conn *c = lg_xcalloc(1, sizeof(*c));

    c->run = run;
    c->timer = evtimer_new(run->base, conn_on_timeout, c);
    if (c->timer == NULL) {
        free(c);
        return NULL;
    }
    lg_ld_sse_init(&c->sse, RUN_MAX_EVENT_BYTES);
    return c;
}

static void
conn_free(struct lg_ld_conn *c)
{
    conn_down(c);
    event_free(c->timer);
    lg_ld_sse_free(&c->sse);
    free(c->json);
    free(c);
}

/* ---- scheduling ----------------------------------------------------------- */

static void
run_grow(struct lg_ld_run *run, size_t need)
{
    if (need <= run->cap_items) {
        return;
    }
    run->cap_items = LG_MAX(need, run->cap_items * 2);
    run->items = lg_xrealloc(run->items, run->cap_items * sizeof(*run->items));
    run->recs = lg_xrealloc(run->recs, run->cap_items * sizeof(*run->recs));
}

static void
run_rec_init(struct lg_ld_run *run, size_t i, uint64_t t_sched_ns)
{
    struct lg_ld_rec *rec = &run->recs[i];
    const struct lg_ld_item *it = &run->items[i];

    memset(rec, 0, sizeof(*rec));
    rec->t_sched_ns = t_sched_ns;
    rec->usage_tokens = -1;
    rec->prompt_bytes = it->prompt_bytes;
    rec->max_tokens = it->no_max_tokens ? 0 : it->max_tokens;
    rec->group = it->group;
}

static void
run_launch(struct lg_ld_run *run, size_t i)
{
    struct lg_ld_conn *c = TAILQ_FIRST(&run->idle_up);

    if (c != NULL) {
        TAILQ_REMOVE(&run->idle_up, c, link);
    } else if ((c = TAILQ_FIRST(&run->idle_down)) != NULL) {
        TAILQ_REMOVE(&run->idle_down, c, link);
    } else if (run->n_conns < run->o->max_conns && (c = conn_new(run)) != NULL) {
        run->conns[run->n_conns++] = c;
    } else {
        if (run->pend_len == run->pend_cap) {
            size_t cap = LG_MAX(1024, run->pend_cap * 2);
            size_t *v = lg_xmalloc(cap * sizeof(*v));

            for (size_t k = 0; k < run->pend_len; k++) {
                v[k] = run->pending[(run->pend_head + k) % run->pend_cap];
            }
            free(run->pending);
            run->pending = v;
            run->pend_cap = cap;
            run->pend_head = 0;
        }
        run->pending[(run->pend_head + run->pend_len++) % run->pend_cap] = i;
        return;
    }
    conn_start(c, i);
}

static void
run_maybe_finish(struct lg_ld_run *run)
{
    bool all_started;

    if (run->o->mode == LG_LD_MODE_CLOSED) {
        all_started = run->stopping || (run->o->requests > 0 && run->next >= run->o->requests);
    } else {
        all_started = run->stopping || (run->next >= run->n_items && run->pend_len == 0);
    }
    if (all_started && run->inflight == 0) {
        event_base_loopexit(run->base, NULL);
    }
}

/* Closed loop: the next request, drawn now and scheduled now. */
static void
run_launch_closed(struct lg_ld_run *run)
{
    size_t i = run->next++;
    uint64_t now = run_rel(run, lg_now_ns());

    run_grow(run, i + 1);
    lg_ld_gen_contents(&run->gen, &run->items[i]);
    run->items[i].t_us = now / 1000;
    run->n_items = i + 1;
    run_rec_init(run, i, now);
    run_launch(run, i);
}

static void
run_after_done(struct lg_ld_run *run)
{
    if (run->o->mode == LG_LD_MODE_CLOSED) {
        if (!run->stopping && (run->o->requests == 0 || run->next < run->o->requests)) {
            run_launch_closed(run);
            return;
        }
    } else if (run->pend_len > 0 && !run->stopping) {
        size_t i = run->pending[run->pend_head];

        run->pend_head = (run->pend_head + 1) % run->pend_cap;
        run->pend_len--;
        run_launch(run, i);
        return;
    }
    run_maybe_finish(run);
}

static void
run_on_sched(evutil_socket_t fd, short what, void *arg)
{
    struct lg_ld_run *run = arg;
    uint64_t now = lg_now_ns();

    while (run->next < run->n_items && !run->stopping) {
        uint64_t due = run->t0 + run->items[run->next].t_us * 1000;
        struct timeval tv;

        if (due > now) {
            now = lg_now_ns();
            if (due > now) {
                tv.tv_sec = (time_t)((due - now) / LG_NS_PER_S);
                tv.tv_usec = (suseconds_t)((due - now) % LG_NS_PER_S / 1000);
                evtimer_add(run->sched_ev, &tv);
                return;
            }
        }
        run_rec_init(run, run->next, run->items[run->next].t_us * 1000);
        run->next++;
        run_launch(run, run->next - 1);
    }
    run_maybe_finish(run);
}

static void
run_on_stop(evutil_socket_t fd, short what, void *arg)
{
    struct lg_ld_run *run = arg;

    run->stopping = true;
    run_maybe_finish(run);
}

static void
run_on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct lg_ld_run *run = arg;

    run->interrupted = true;
    if (run->stopping) {
        event_base_loopbreak(run->base);
        return;
    }
    fprintf(stderr,
            "llmload: stopping; waiting for %zu requests in flight "
            "(again to abort)\n",
            run->inflight);
    run->stopping = true;
    run_maybe_finish(run);
}

static void
run_on_progress(evutil_socket_t fd, short what, void *arg)
{
    struct lg_ld_run *run = arg;
    double t = (double)run_rel(run, lg_now_ns()) / 1e9;

    fprintf(stderr,
            "llmload %6.1fs  started %zu  done %zu  ok %zu  errors %zu  inflight %zu  "
            "conns %zu  waiting %zu  rps %zu\n",
            t, run->next - run->pend_len, run->done, run->ok, run->failed, run->inflight,
            run->n_conns, run->pend_len, run->done - run->progress_done);
    run->progress_done = run->done;
}

/* ---- setup ------------------------------------------------------------------ */

static int
run_resolve(struct lg_ld_run *run)
{
    struct addrinfo hints, *res = NULL;
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(run->o->host, run->o->port, &hints, &res);
    if (rc != 0 || res == NULL) {
        LG_ERROR("cannot resolve %s:%s: %s", run->o->host, run->o->port, gai_strerror(rc));
        return LG_ERR;
    }
    memcpy(&run->addr, res->ai_addr, res->ai_addrlen);
    run->addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    return LG_OK;
}

/* Prompt filler: seeded words, [a-z .] only, so it needs no JSON escaping. */
static void
run_make_filler(struct lg_ld_run *run, size_t n)
{
    static const char *const words[] = {
        "the",    "model",   "answers", "a",      "question", "about",  "routing", "tokens",
        "while",  "replica", "queues",  "grow",   "and",      "shrink", "under",   "load",
        "each",   "request", "streams", "events", "to",       "its",    "client",  "gateway",
        "engine", "cache",   "prefix",  "shared", "latency",  "budget", "of",      "time",
    };
    struct lg_ld_rng r;
    size_t len = 0;

    lg_ld_rng_init(&r, 0x5eed, 99);
    run->filler = lg_xmalloc(n + 16);
    while (len < n) {
        const char *w = words[lg_ld_rng_next(&r) % LG_ARRAY_SIZE(words)];
        size_t wl = strlen(w);

        memcpy(run->filler + len, w, wl);
        len += wl;
        run->filler[len++] = lg_ld_rng_next(&r) % 12 == 0 ? '.' : ' ';
    }
    run->filler_len = len;
}

static void
run_make_head(struct lg_ld_run *run)
{
    const struct lg_ld_opts *o = run->o;
    size_t cap = 768, len = 0;
    bool v6 = strchr(o->host, ':') != NULL, own_host = false;

    for (size_t i = 0; i < o->n_headers; i++) {
        cap += strlen(o->headers[i]) + 2;
        own_host |= strncasecmp(o->headers[i], "host:", 5) == 0;
    }
    run->head = lg_xmalloc(cap);
    if (!own_host) { /* --header 'Host: ...' replaces ours */
        len = (size_t)snprintf(run->head, cap, "Host: %s%s%s:%s\r\n", v6 ? "[" : "", o->host,
                               v6 ? "]" : "", o->port);
    }
    len += (size_t)snprintf(run->head + len, cap - len,
                            "User-Agent: llmload/%s\r\n"
                            "Content-Type: application/json\r\n%s",
                            LG_VERSION, o->reuse ? "" : "Connection: close\r\n");
    for (size_t i = 0; i < o->n_headers; i++) {
        len += (size_t)snprintf(run->head + len, cap - len, "%s\r\n", o->headers[i]);
    }
    run->head_len = len;
}

static void
run_raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int
lg_ld_run_new(struct lg_ld_run **out, const struct lg_ld_opts *o, struct lg_ld_item *items,
              size_t n_items)
{
    struct lg_ld_run *run = lg_xcalloc(1, sizeof(*run));
    struct event_config *cfg;
    json_t *m;
    uint64_t max_prompt = lg_ld_spec_max(&o->prompt_bytes);

    *out = run;
    run->o = o;
    run->items = items;
    run->n_items = n_items;
    run->cap_items = n_items;
    run->recs = lg_xcalloc(LG_MAX(n_items, 1), sizeof(*run->recs));
    if (n_items == 0) {
        run->cap_items = 0;
    }
    TAILQ_INIT(&run->idle_up);
    TAILQ_INIT(&run->idle_down);
    lg_ld_hist_init(&run->itl);
    lg_ld_gen_init(&run->gen, o);
    run->conns = lg_xcalloc(o->max_conns, sizeof(*run->conns));
    for (size_t i = 0; i < n_items; i++) {
        max_prompt = LG_MAX(max_prompt, items[i].prompt_bytes);
    }
    run_make_filler(run, LG_MAX(max_prompt, o->prefix_bytes) + RUN_FILLER_SLACK);
    m = json_string(o->model);
    run->model_json = m ? json_dumps(m, JSON_ENCODE_ANY | JSON_ENSURE_ASCII) : NULL;
    json_decref(m);
    if (run->model_json == NULL) {
        LG_ERROR("--model: not valid UTF-8");
        return LG_ERR;
    }
    run_make_head(run);
    run->rbuf = lg_xmalloc(RUN_READ_BYTES);

    llhttp_settings_init(&run->settings);
    run->settings.on_header_field = conn_on_header_field;
    run->settings.on_header_value = conn_on_header_value;
    run->settings.on_header_value_complete = conn_on_header_value_complete;
    run->settings.on_headers_complete = conn_on_headers_complete;
    run->settings.on_body = conn_on_body;
    run->settings.on_message_complete = conn_on_message_complete;

    if (run_resolve(run) != LG_OK) {
        return LG_ERR;
    }
    signal(SIGPIPE, SIG_IGN);
    run_raise_nofile();
    cfg = event_config_new();
    if (cfg == NULL) {
        return LG_ERR;
    }
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    run->base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (run->base == NULL) {
        LG_ERROR("cannot create the event loop");
        return LG_ERR;
    }
    run->sched_ev = evtimer_new(run->base, run_on_sched, run);
    run->stop_ev = evtimer_new(run->base, run_on_stop, run);
    run->progress_ev = event_new(run->base, -1, EV_PERSIST, run_on_progress, run);
    run->sig_int = evsignal_new(run->base, SIGINT, run_on_signal, run);
    run->sig_term = evsignal_new(run->base, SIGTERM, run_on_signal, run);
    if (run->sched_ev == NULL || run->stop_ev == NULL || run->progress_ev == NULL
        || run->sig_int == NULL || run->sig_term == NULL) {
        LG_ERROR("cannot create events");
        return LG_ERR;
    }
    return LG_OK;
}

int
lg_ld_run_go(struct lg_ld_run *run, struct lg_ld_result *res)
{
    const struct lg_ld_opts *o = run->o;
    struct timeval one_s = { 1, 0 };

    evsignal_add(run->sig_int, NULL);
    evsignal_add(run->sig_term, NULL);
    if (o->progress) {
        evtimer_add(run->progress_ev, &one_s);
    }
    if (o->realtime) {
        struct sched_param sp = { .sched_priority = 10 };

        /* It sleeps in epoll when idle, and the kernel's RT throttling
         * still leaves other tasks 5% of each CPU. */
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
            LG_WARN("--realtime: %s; running at normal priority", strerror(errno));
        }
    }
    run->t0_wall = lg_wall_ns();
    run->t0 = lg_now_ns();
    if (o->mode == LG_LD_MODE_CLOSED) {
        if (o->duration_s > 0) {
            struct timeval tv;

            tv.tv_sec = (time_t)o->duration_s;
            tv.tv_usec = (suseconds_t)((o->duration_s - (double)tv.tv_sec) * 1e6);
            evtimer_add(run->stop_ev, &tv);
        }
        for (uint64_t k = 0; k < o->concurrency && !run->stopping; k++) {
            if (o->requests > 0 && run->next >= o->requests) {
                break;
            }
            run_launch_closed(run);
        }
    } else {
        run_on_sched(-1, 0, run);
    }
    if (event_base_dispatch(run->base) < 0) {
        LG_ERROR("event loop failed");
        return LG_ERR;
    }

    memset(res, 0, sizeof(*res));
    res->o = o;
    res->recs = run->recs;
    res->n = run->next;
    res->itl = &run->itl;
    res->replicas = run->replicas;
    res->n_replicas = run->n_replicas;
    res->elapsed_ns = run->last_end_ns;
    res->start_wall_ns = run->t0_wall;
    if (run->done == 0) {
        res->elapsed_ns = run_rel(run, lg_now_ns());
    }
    res->interrupted = run->interrupted;
    res->items = run->items;
    return LG_OK;
}

void
lg_ld_run_free(struct lg_ld_run *run)
{
    if (run == NULL) {
        return;
    }
    for (size_t i = 0; i < run->n_conns; i++) {
        conn_free(run->conns[i]);
    }
    free(run->conns);
    if (run->sched_ev) {
        event_free(run->sched_ev);
    }
    if (run->stop_ev) {
        event_free(run->stop_ev);
    }
    if (run->progress_ev) {
        event_free(run->progress_ev);
    }
    if (run->sig_int) {
        event_free(run->sig_int);
    }
    if (run->sig_term) {
        event_free(run->sig_term);
    }
    if (run->base) {
        event_base_free(run->base);
    }
    for (size_t i = 0; i < run->n_replicas; i++) {
        free(run->replicas[i]);
    }
    lg_ld_hist_free(&run->itl);
    lg_ld_gen_free(&run->gen);
    free(run->pending);
    lg_ld_items_free(run->items, run->n_items);
    free(run->recs);
    free(run->filler);
    free(run->rbuf);
    free(run->model_json);
    free(run->head);
    free(run);
}
