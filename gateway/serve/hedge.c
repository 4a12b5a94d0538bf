/*
 * hedge.c: hedged first tokens. A streamed completion that has no first
 * token within its deadline (factor x the TTFT the router predicted for its
 * pick, within [min, max]) gets a duplicate on the router's next choice,
 * within a budget; the first attempt to produce a content event, or to
 * complete its answer, wins; the other is closed at once (its engine sees
 * EOF and stops).
 *
 * Holding. The engines send a response head at once and may send events
 * without content (a role) before the first token; an attempt that may
 * still lose must not have them reach the client. So while no winner is
 * known, an attempt's bytes stay unread in its upstream input (a read
 * watermark of routing.hedge.hold_bytes bounds them) and are only scanned
 * here, with a parser and SSE scanner of their own. The winner's bytes are
 * then read by the relay as if they had just arrived: the client gets one
 * attempt's bytes, untouched, its head with the first content event.
 *
 * The request's attempt (struct lg_request's fields, attempt.c) is always
 * the one the relay would go on with; the duplicate's part of those fields
 * is parked in struct hedge_attempt, and swapped in (hedge_swap) to begin
 * or end it through attempt.c, and for good when it wins or goes on alone.
 *
 * Owns, per request: struct lg_hedge (req->hedge), its deadline timer, the
 * duplicate's attempt while it is parked (a backend reference and its
 * in-flight count, a lent upstream connection). Borrows: the client (which
 * owns the request).
 * States: WAIT (the request's attempt runs, held; the deadline is armed)
 * -> RACE (the duplicate runs too; both held) -> DONE (one attempt goes on,
 * nothing held). WAIT -> DONE when no duplicate can be sent (budget, no
 * other backend); an attempt that answers an error in WAIT is released
 * and a retry may be held again.
 */
#include "serve/hedge.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <llhttp.h>

#include "base/config.h"
#include "base/endpoint.h"
#include "base/stats.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "http/bevio.h"
#include "http/openai.h"
#include "http/sse.h"
#include "route/router.h"
#include "serve/admission.h"
#include "serve/attempt.h"
#include "serve/client.h"
#include "serve/relay.h"
#include "serve/upstream.h"
#include "serve/worker.h"

enum hedge_state {
    HEDGE_ST_WAIT = 0, /* the request's attempt runs; the deadline is armed */
    HEDGE_ST_RACE,     /* a duplicate runs too */
    HEDGE_ST_DONE,     /* one attempt goes on alone; nothing held */
};

/* What a held attempt's bytes say so far. */
enum hedge_verdict {
    HEDGE_MORE = 0, /* nothing yet: hold on */
    HEDGE_WIN,      /* a content event, a complete answer, or hold_bytes without either */
    HEDGE_OUT,      /* an error status, an error event, or bytes that are not HTTP */
};

/* A held attempt's response, read in place (its bytes stay in the input). */
struct hedge_scan {
    llhttp_t parser;
    struct lg_sse sse;
    size_t scanned;   /* bytes of the input parsed so far */
    int status;       /* 0 until the (final) head is in */
    bool interim;     /* parsing a 1xx head: skipped */
    bool complete;    /* the whole response is in */
    unsigned content; /* content events seen */
};

/* The request's fields that belong to an attempt (attempt.c, proxy.c). */
#define HEDGE_ATTEMPT_FLAGS \
    (LG_REQ_F_TOKEN_WAIT | LG_REQ_F_PROBE | LG_REQ_F_AGED | LG_REQ_F_END_SLOT | LG_REQ_F_SEQ)

/* An attempt's part of struct lg_request while it is not the request's own. */
struct hedge_attempt {
    struct lg_backend *backend;
    struct lg_upconn *up;
    bool up_reused;
    struct lg_route_result pick;
    uint32_t flags; /* HEDGE_ATTEMPT_FLAGS */
    uint64_t t_dispatch;
    uint64_t t_connect;
    uint64_t t_first_byte;
    int due_slot;
    int end_slot;
    int seq_slot;
};

struct lg_hedge {
    enum hedge_state state;
    const struct lg_hedge_ops *ops; /* static: the request's attempt's callbacks */
    struct event *timer;            /* owned: the deadline */
    bool held;                      /* the request's attempt is held */
    struct hedge_scan scan[2];      /* [0]: the request's attempt, [1]: the duplicate */
    struct hedge_attempt dup;       /* the duplicate while parked (RACE) */
};

static void hedge_on_deadline(evutil_socket_t fd, short what, void *arg);
static void hedge_on_dup_read(struct bufferevent *bev, void *arg);
static void hedge_on_dup_event(struct bufferevent *bev, short what, void *arg);

static const struct lg_hedge_conf *
hedge_conf(const struct lg_client *c)
{
    return &c->req.fleet->conf->routing.hedge;
}

static void
hedge_count(struct lg_client *c, enum lg_stats_hedge what)
{
    __atomic_fetch_add(&c->w->metrics.hedges[what], 1, __ATOMIC_RELAXED);
}

/* ---- pure parts ------------------------------------------------------------- */

bool
lg_hedge_eligible(const struct lg_hedge_conf *hc, const char *path, size_t path_len,
                  const struct lg_openai_req *info)
{
    const struct lg_endpoint *e;

    if (!hc->enabled || !info->stream || info->choices > 1 || info->store) {
        return false;
    }
    e = lg_endpoint_find(path, path_len);
    return e != NULL && (e->id == LG_ENDPOINT_CHAT || e->id == LG_ENDPOINT_COMPLETIONS);
}

double
lg_hedge_deadline_ms(const struct lg_hedge_conf *hc, const struct lg_route_result *pick)
{
    double predicted = pick->model_pred_ms >= 0 ? pick->model_pred_ms
                                                : pick->wait_ms + pick->ahead_ms + pick->service_ms;
    double ms = hc->factor * predicted;

    if (!(predicted > 0) || !isfinite(ms)) {
        return (double)hc->max_ms; /* nothing predicted: the latest deadline */
    }
    return LG_MIN(LG_MAX(ms, (double)hc->min_ms), (double)hc->max_ms);
}

bool
lg_hedge_budget_update(struct lg_hedge_budget *b, const struct lg_hedge_conf *hc, unsigned nworkers,
                       uint64_t now_ns, double earned, bool take)
{
    double keep = 10.0 + hc->budget_min; /* kept however long unspent */

    if (b->refill_ns == 0) {
        b->refill_ns = now_ns; /* it starts empty */
    }
    if (now_ns > b->refill_ns) {
        double dt = (double)(now_ns - b->refill_ns) / 1e9;

        b->tokens += dt * hc->budget_min / (double)LG_MAX(nworkers, 1u);
        if (b->tokens > keep) {
            b->tokens = keep + (b->tokens - keep) * exp2(-dt / LG_HEDGE_BUDGET_HALF_LIFE_S);
        }
        b->refill_ns = now_ns;
    }
    b->tokens += earned * hc->budget_ratio;
    if (b->tokens < 1.0) {
        return false;
    }
    if (take) {
        b->tokens -= 1.0;
    }
    return true;
}

/* ---- the parked attempt ----------------------------------------------------- */

/* Exchanges the request's attempt with the parked one. */
static void
hedge_swap(struct lg_request *req, struct hedge_attempt *a)
{
    struct hedge_attempt mine = {
        .backend = req->backend,
        .up = req->up,
        .up_reused = req->up_reused,
        .pick = req->pick,
        .flags = req->flags & HEDGE_ATTEMPT_FLAGS,
        .t_dispatch = req->t_dispatch,
        .t_connect = req->t_connect,
        .t_first_byte = req->t_first_byte,
        .due_slot = req->due_slot,
        .end_slot = req->end_slot,
        .seq_slot = req->seq_slot,
    };

    req->backend = a->backend;
    req->up = a->up;
    req->up_reused = a->up_reused;
    req->pick = a->pick;
    req->flags = (req->flags & ~HEDGE_ATTEMPT_FLAGS) | a->flags;
    req->t_dispatch = a->t_dispatch;
    req->t_connect = a->t_connect;
    req->t_first_byte = a->t_first_byte;
    req->due_slot = a->due_slot;
    req->end_slot = a->end_slot;
    req->seq_slot = a->seq_slot;
    *a = mine;
}

/* Ends the parked duplicate: its connection closes (its engine stops), its
 * backend is released; nothing is learnt from it. */
static void
hedge_dup_end(struct lg_client *c, struct lg_hedge *h)
{
    hedge_swap(&c->req, &h->dup);
    lg_attempt_end(c, false);
    hedge_swap(&c->req, &h->dup);
    lg_route_result_clear(&h->dup.pick);
    h->dup.backend = NULL;
    h->dup.up = NULL;
}

/* ---- scanning held bytes ---------------------------------------------------- */

static int
hedge_scan_on_headers_complete(llhttp_t *p)
{
    struct hedge_scan *s = p->data;

    if (p->status_code >= 100 && p->status_code < 200) {
        s->interim = true; /* the real head follows */
        return 0;
    }
    s->status = p->status_code;
    lg_sse_init(&s->sse);
    return 0;
}

static int
hedge_scan_on_body(llhttp_t *p, const char *at, size_t n)
{
    struct hedge_scan *s = p->data;

    s->content += lg_sse_feed(&s->sse, at, n);
    return s->content > 0 ? HPE_PAUSED : 0; /* the verdict is in */
}

static int
hedge_scan_on_message_complete(llhttp_t *p)
{
    struct hedge_scan *s = p->data;

    if (s->interim) {
        s->interim = false;
        return 0;
    }
    s->complete = true;
    return HPE_PAUSED;
}

static const llhttp_settings_t hedge_scan_settings = {
    .on_headers_complete = hedge_scan_on_headers_complete,
    .on_body = hedge_scan_on_body,
    .on_message_complete = hedge_scan_on_message_complete,
};

static void
hedge_scan_start(struct hedge_scan *s)
{
    memset(s, 0, sizeof(*s));
    llhttp_init(&s->parser, HTTP_RESPONSE, &hedge_scan_settings);
    s->parser.data = s;
}

/* Parses what came since the last look, in place; says what it means. */
static enum hedge_verdict
hedge_scan(struct hedge_scan *s, struct evbuffer *in, size_t hold_bytes)
{
    size_t len = evbuffer_get_length(in);
    struct evbuffer_iovec vec[8];
    struct evbuffer_ptr at;
    llhttp_errno_t err = HPE_OK;

    while (s->scanned < len && err == HPE_OK) {
        int n;

        if (evbuffer_ptr_set(in, &at, s->scanned, EVBUFFER_PTR_SET) != 0) {
            break;
        }
        n = evbuffer_peek(in, (ev_ssize_t)(len - s->scanned), &at, vec, LG_ARRAY_SIZE(vec));
        for (int i = 0; i < n && i < (int)LG_ARRAY_SIZE(vec) && err == HPE_OK; i++) {
            err = llhttp_execute(&s->parser, vec[i].iov_base, vec[i].iov_len);
            s->scanned +=
                err == HPE_OK
                    ? vec[i].iov_len
                    : (size_t)(llhttp_get_error_pos(&s->parser) - (const char *)vec[i].iov_base);
        }
    }
    if (err != HPE_OK && err != HPE_PAUSED) {
        return HEDGE_OUT; /* not HTTP: the relay says so if it is the last one left */
    }
    if (s->status != 0 && (s->status < 200 || s->status >= 300)) {
        return HEDGE_OUT;
    }
    if (s->content > 0 || s->complete) {
        return HEDGE_WIN;
    }
    if (s->sse.error_events > 0) {
        return HEDGE_OUT; /* the engine reported a failure inside its 200 */
    }
    return s->scanned >= hold_bytes ? HEDGE_WIN : HEDGE_MORE;
}

/* ---- the end of the race ---------------------------------------------------- */

/* The request's attempt is held no more: the relay reads it as any. */
static void
hedge_unhold(struct lg_hedge *h, struct lg_upconn *u)
{
    h->held = false;
    lg_bevio_watermark(u->bev, EV_READ, 0, 0);
}

/* The race is over: one attempt goes on (still held until its first content
 * event, so that a failure before it may still be retried). */
static void
hedge_settle(struct lg_client *c, struct lg_hedge *h, enum lg_req_hedge outcome)
{
    h->state = HEDGE_ST_DONE;
    evtimer_del(h->timer);
    c->req.hedge_out = outcome;
}

/*
 * The duplicate takes the request's place (the request's attempt has ended):
 * by its first content event (won: read by the relay at once), or because the
 * first attempt failed or answered an error (held, as the first was). Its
 * bytes so far go through the request's read callback now; nothing may touch
 * the request after this (it may have ended).
 */
static void
hedge_dup_goes_on(struct lg_client *c, struct lg_hedge *h, bool won)
{
    struct lg_request *req = &c->req;
    struct lg_upconn *u;

    hedge_swap(req, &h->dup);
    lg_route_result_clear(&h->dup.pick); /* the first attempt's */
    memset(&h->dup, 0, sizeof(h->dup));
    lg_admission_cancel(c); /* a first attempt waiting for a slot again waits no more */
    u = req->up;
    hedge_settle(c, h, LG_REQ_HEDGE_DUP);
    hedge_count(c, LG_STATS_HEDGE_WON);
    h->scan[0] = h->scan[1];
    h->scan[0].parser.data = &h->scan[0];
    h->held = true;
    if (won) {
        hedge_unhold(h, u);
    }
    bufferevent_setcb(u->bev, h->ops->read, NULL, h->ops->event, u);
    lg_client_set_state(c, u->state == LG_UPCONN_ST_CONNECTING ? LG_CLIENT_ST_CONNECT
                                                               : LG_CLIENT_ST_WAIT_HEAD);
    if (evbuffer_get_length(bufferevent_get_input(u->bev)) > 0) {
        h->ops->read(u->bev, u);
    }
}

/* The duplicate is out (it lost, failed or answered an error, or nobody waits
 * any more): closed, and counted as wasted. The request's attempt goes on. */
static void
hedge_dup_loses(struct lg_client *c, struct lg_hedge *h, enum lg_req_hedge outcome)
{
    hedge_dup_end(c, h);
    hedge_settle(c, h, outcome);
    hedge_count(c, LG_STATS_HEDGE_WASTED);
}

/* The duplicate failed or answered an error: its backend is told, as a
 * failed attempt's would be (status 0: no answer; flags: lg_backend_note_result). */
static void
hedge_dup_failed(struct lg_client *c, struct lg_hedge *h, enum lg_fail why, int status)
{
    struct lg_request *req = &c->req;
    struct lg_backend *b = h->dup.backend;
    struct lg_upconn *u = h->dup.up;

    lg_backend_note_result(b, &req->fleet->conf->health, status,
                           status != 0 ? lg_relay_retry_after_ns(&u->hdrs) : 0,
                           lg_fail_table[why].refused ? LG_BACKEND_R_REFUSED : 0);
    if (status == 0 || status == 429 || status >= 500) {
        lg_router_note_result(req->fleet->router, lg_attempt_route(c), &req->route, b, status, 0,
                              0);
    }
    if (lg_log_ratelimit(&b->warn_ratelimit_ns, LG_NS_PER_S)) {
        LG_CONN_LOG(LG_LOG_WARN, c, "hedge on backend %s failed: %s", b->name,
                    lg_fail_name(why));
    }
    hedge_dup_loses(c, h, LG_REQ_HEDGE_FIRST);
}

/* ---- the duplicate ---------------------------------------------------------- */

/* Sends the duplicate to the router's next choice; false when there is none. */
static bool
hedge_send(struct lg_client *c, struct lg_hedge *h)
{
    struct lg_request *req = &c->req;
    const struct lg_config *conf = req->fleet->conf;
    const struct lg_model_route *route = lg_attempt_route(c);
    uint64_t mask = req->tried_mask | lg_attempt_backend_bit(c, req->backend);
    uint32_t attempts = req->attempts;
    struct lg_backend *b;
    struct lg_upconn *u;
    bool reused;

    memset(&h->dup, 0, sizeof(h->dup));
    if (route == NULL
        || lg_router_pick(req->fleet->router, route, &req->route, mask, &h->dup.pick) != LG_OK) {
        lg_route_result_clear(&h->dup.pick);
        return false;
    }
    b = h->dup.pick.backend;
    if (lg_upstream_acquire(c->w, b, c, &u, &reused) != LG_OK) {
        LG_STAT_ADD(b, connect_failures, 1);
        if (h->dup.pick.probe) {
            lg_backend_release_probe(b);
        }
        lg_route_result_clear(&h->dup.pick);
        return false;
    }
    /* the duplicate's attempt, begun through attempt.c with the request's
     * fields; not a retry (attempts 1 there), counted in the request's */
    hedge_swap(req, &h->dup);
    req->attempts = 1;
    lg_attempt_begin(c, b);
    req->attempts = attempts + 1;
    req->tried_mask = mask | lg_attempt_backend_bit(c, b);
    req->up = u;
    req->up_reused = reused;
    req->t_connect = reused ? req->t_dispatch : 0;
    req->t_first_byte = 0;
    hedge_swap(req, &h->dup);
    hedge_scan_start(&h->scan[1]);
    lg_relay_start(u);
    bufferevent_setcb(u->bev, hedge_on_dup_read, NULL, hedge_on_dup_event, u);
    lg_bevio_watermark(u->bev, EV_READ, 0, hedge_conf(c)->hold_bytes);
    lg_relay_send_request(c, u);
    if (u->state != LG_UPCONN_ST_CONNECTING) {
        struct timeval r, w;

        lg_bevio_timeouts(u->bev, lg_timeval_ms(conf->timeouts.first_byte_ms, &r),
                          lg_timeval_ms(conf->timeouts.stream_idle_ms, &w));
    }
    lg_bevio_enable(u->bev, EV_READ | EV_WRITE);
    if (u->state != LG_UPCONN_ST_CONNECTING) {
        lg_bevio_flush(u->bev);
    }
    return true;
}

static void
hedge_on_dup_read(struct bufferevent *bev, void *arg)
{
    struct lg_upconn *u = arg;
    struct lg_client *c = u->client;
    struct lg_hedge *h;

    if (c == NULL || (h = c->req.hedge) == NULL || h->state != HEDGE_ST_RACE || h->dup.up != u) {
        return;
    }
    if (h->dup.t_first_byte == 0) {
        h->dup.t_first_byte = lg_now_ns();
    }
    switch (hedge_scan(&h->scan[1], bufferevent_get_input(bev), hedge_conf(c)->hold_bytes)) {
    case HEDGE_MORE:
        return;
    case HEDGE_WIN:
        /* the request's attempt loses: closed, nothing learnt from it */
        lg_attempt_end(c, false);
        hedge_dup_goes_on(c, h, true);
        return;
    case HEDGE_OUT:
        hedge_dup_failed(c, h,
                         h->scan[1].status == 0 ? LG_FAIL_PROTOCOL
                         : h->scan[1].status < 200 || h->scan[1].status >= 300
                             ? LG_FAIL_HTTP_STATUS
                             : LG_FAIL_ENGINE_ERROR,
                         h->scan[1].status);
        return;
    }
}

static void
hedge_on_dup_event(struct bufferevent *bev, short what, void *arg)
{
    struct lg_upconn *u = arg;
    struct lg_client *c = u->client;
    const struct lg_config *conf;
    struct lg_hedge *h;
    bool connecting;

    if (c == NULL || (h = c->req.hedge) == NULL || h->state != HEDGE_ST_RACE || h->dup.up != u) {
        return;
    }
    conf = c->req.fleet->conf;
    connecting = u->state == LG_UPCONN_ST_CONNECTING;
    if (what & BEV_EVENT_CONNECTED) {
        struct timeval r, w;

        u->state = LG_UPCONN_ST_ACTIVE;
        lg_bevio_own_reads(bev);
        h->dup.t_connect = lg_now_ns();
        lg_bevio_timeouts(bev, lg_timeval_ms(conf->timeouts.first_byte_ms, &r),
                          lg_timeval_ms(conf->timeouts.stream_idle_ms, &w));
        return;
    }
    if (connecting) {
        LG_STAT_ADD(u->b, connect_failures, 1);
    } else if (what & BEV_EVENT_TIMEOUT) {
        LG_STAT_ADD(u->b, timeouts, 1);
    }
    hedge_dup_failed(c, h,
                     (what & BEV_EVENT_TIMEOUT)
                         ? (connecting ? LG_FAIL_CONNECT_TIMEOUT : LG_FAIL_FIRST_BYTE_TIMEOUT)
                     : !connecting      ? LG_FAIL_CLOSED
                     : u->b->conf.tls ? LG_FAIL_CONNECT
                                      : LG_FAIL_CONNECT_REFUSED,
                     0);
}

/* The deadline passed with no first token: a duplicate, if the budget and
 * the fleet allow one; else the request's attempt goes on alone (held). */
static void
hedge_on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct lg_client *c = arg;
    struct lg_request *req = &c->req;
    struct lg_hedge *h = req->hedge;
    struct lg_hedge_budget *budget = &c->w->hedge_budget;

    (void)fd;
    (void)what;
    if (h == NULL || h->state != HEDGE_ST_WAIT || !h->held || req->up == NULL) {
        return;
    }
    if (!lg_hedge_budget_update(budget, hedge_conf(c), c->w->gw->nworkers, lg_now_ns(), 0, false)) {
        hedge_count(c, LG_STATS_HEDGE_NO_BUDGET);
        hedge_settle(c, h, LG_REQ_HEDGE_NONE);
        return;
    }
    if (!hedge_send(c, h)) {
        hedge_count(c, LG_STATS_HEDGE_NO_BACKEND);
        hedge_settle(c, h, LG_REQ_HEDGE_NONE);
        return;
    }
    lg_hedge_budget_update(budget, hedge_conf(c), c->w->gw->nworkers, lg_now_ns(), 0, true);
    h->state = HEDGE_ST_RACE;
    req->hedge_out = LG_REQ_HEDGE_RACING;
    hedge_count(c, LG_STATS_HEDGE_SENT);
    LG_CONN_LOG(LG_LOG_DEBUG, c, "no first token from %s after %.0f ms: hedged on %s",
                req->backend->name, req->hedge_after_ms, h->dup.backend->name);
}

/* ---- hooks ------------------------------------------------------------------ */

void
lg_hedge_arm(struct lg_client *c, const struct lg_hedge_ops *ops)
{
    struct lg_request *req = &c->req;
    const struct lg_hedge_conf *hc = hedge_conf(c);
    struct lg_hedge *h = req->hedge;
    double ms;
    struct timeval tv;

    if (req->flags & LG_REQ_F_STARTED) {
        return; /* the client has bytes of a stream already: nothing to race for */
    }
    if (h == NULL) {
        const struct lg_model_route *route = lg_attempt_route(c);

        if (!lg_hedge_eligible(hc, req->hdrs.buf + req->hdrs.url_off, req->hdrs.url_len, &req->info)
            || route == NULL) {
            return;
        }
        if (req->attempts <= 1) { /* the request's share of the budget, at its first */
            lg_hedge_budget_update(&c->w->hedge_budget, hc, c->w->gw->nworkers, lg_now_ns(), 1,
                                   false);
        }
        if (!lg_router_has_candidate(route,
                                     req->tried_mask | lg_attempt_backend_bit(c, req->backend))) {
            return; /* no other backend could take a duplicate: nothing to hold for */
        }
        h = lg_xcalloc(1, sizeof(*h));
        h->timer = evtimer_new(c->w->base, hedge_on_deadline, c);
        if (h->timer == NULL) {
            free(h);
            return;
        }
        h->ops = ops;
        req->hedge = h;
    }
    /* every attempt of the request is held until its first content event: a
     * new one (a retry, or a pooled connection that closed under the first
     * in a race) as the first */
    h->held = true;
    hedge_scan_start(&h->scan[0]);
    lg_bevio_watermark(req->up->bev, EV_READ, 0, hc->hold_bytes);
    if (h->state != HEDGE_ST_WAIT) {
        return; /* racing, or over: no other deadline */
    }
    ms = lg_hedge_deadline_ms(hc, &req->pick);
    req->hedge_after_ms = (float)ms;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(fmod(ms, 1000) * 1000);
    evtimer_add(h->timer, &tv); /* from the dispatch, which was now */
}

bool
lg_hedge_holds(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    struct lg_hedge *h = req->hedge;

    if (h == NULL || !h->held || u != req->up) {
        return false;
    }
    if (req->t_first_byte == 0) {
        req->t_first_byte = lg_now_ns();
    }
    switch (hedge_scan(&h->scan[0], bufferevent_get_input(u->bev), hedge_conf(c)->hold_bytes)) {
    case HEDGE_MORE:
        return true;
    case HEDGE_WIN:
        if (h->state == HEDGE_ST_RACE) {
            hedge_dup_loses(c, h, LG_REQ_HEDGE_FIRST);
        } else {
            hedge_settle(c, h, req->hedge_out); /* no duplicate was needed */
        }
        hedge_unhold(h, u);
        return false;
    case HEDGE_OUT:
        if (h->state == HEDGE_ST_RACE) {
            /* the request's attempt answered an error while the duplicate
             * runs: it leaves, told to its backend as proxy.c would */
            lg_backend_note_result(req->backend, &req->fleet->conf->health, h->scan[0].status,
                                   h->scan[0].status != 0 ? lg_relay_retry_after_ns(&u->hdrs) : 0,
                                   0);
            lg_attempt_end(c, false);
            hedge_dup_goes_on(c, h, false);
            return true;
        }
        /* alone: the relay deals with it (and a retry is held again) */
        evtimer_del(h->timer);
        hedge_unhold(h, u);
        return false;
    }
    return false;
}

bool
lg_hedge_takeover(struct lg_client *c)
{
    struct lg_hedge *h = c->req.hedge;

    if (h == NULL) {
        return false;
    }
    if (h->state != HEDGE_ST_RACE) {
        evtimer_del(h->timer); /* a retry arms it again */
        return false;
    }
    hedge_dup_goes_on(c, h, false);
    return true;
}

void
lg_hedge_stop(struct lg_client *c)
{
    struct lg_hedge *h = c->req.hedge;

    if (h == NULL) {
        return;
    }
    if (h->state == HEDGE_ST_RACE) {
        hedge_dup_loses(c, h, LG_REQ_HEDGE_NEITHER);
    } else if (h->state == HEDGE_ST_WAIT) {
        hedge_settle(c, h, c->req.hedge_out);
    }
    h->held = false;
}

void
lg_hedge_free(struct lg_client *c)
{
    struct lg_hedge *h = c->req.hedge;

    if (h == NULL) {
        return;
    }
    lg_hedge_stop(c);
    event_free(h->timer);
    free(h);
    c->req.hedge = NULL;
}
