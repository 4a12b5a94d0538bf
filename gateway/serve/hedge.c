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
 * The duplicate is an attempt of its own (struct lg_attempt, kind HEDGE),
 * launched by the request's one launch path (proxy.c, through
 * lg_hedge_ops) into storage this file owns; its connection's callbacks are
 * the request's. When it wins, or goes on alone, it becomes the request's
 * current attempt (lg_attempt_make_current()); the attempt it replaces has
 * ended.
 *
 * Owns, per request: struct lg_hedge (req->hedge), its deadline timer, the
 * duplicate's storage (its backend reference and lent connection are the
 * attempt's, attempt.c). Borrows: the client (which owns the request).
 * States: WAIT (the request's attempt runs, held; the deadline is armed)
 * -> RACE (the duplicate runs too; both held) -> DONE (one attempt goes on,
 * still held until its first content event). WAIT -> DONE when no
 * duplicate can be sent (budget, no other backend); an attempt that
 * answers an error in WAIT is released and a retry may be held again.
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
#include "serve/trace.h"
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
    size_t scanned;    /* bytes of the input parsed so far */
    int status;        /* 0 until the (final) head is in */
    bool interim;      /* parsing a 1xx head: skipped */
    bool complete;     /* the whole response is in */
    bool held;         /* the attempt's bytes are held */
    unsigned content;  /* content events seen */
    enum lg_fail fail; /* HEDGE_OUT: how it failed */
};

struct lg_hedge {
    enum hedge_state state;
    const struct lg_hedge_ops *ops; /* static: the request's launch */
    struct event *timer;            /* owned: the deadline */
    struct hedge_scan scan[2];      /* [0]: the request's own attempt, [1]: the duplicate */
    struct lg_attempt dup;          /* the duplicate: this file's while it races, the
                                       request's current attempt once it goes on */
};

static void hedge_on_deadline(evutil_socket_t fd, short what, void *arg);

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
        s->fail = LG_FAIL_PROTOCOL;
        return HEDGE_OUT; /* not HTTP: the relay says so if it is the last one left */
    }
    if (s->status != 0 && (s->status < 200 || s->status >= 300)) {
        s->fail = lg_fail_of_status(s->status);
        s->fail = s->fail != LG_FAIL_NONE ? s->fail : LG_FAIL_HTTP_STATUS;
        return HEDGE_OUT;
    }
    if (s->content > 0 || s->complete) {
        return HEDGE_WIN;
    }
    if (s->sse.error_events > 0) {
        s->fail = LG_FAIL_ENGINE_ERROR;
        return HEDGE_OUT; /* the engine reported a failure inside its 200 */
    }
    return s->scanned >= hold_bytes ? HEDGE_WIN : HEDGE_MORE;
}

/* ---- the end of the race ---------------------------------------------------- */

/* The scan of attempt a: [1] for the duplicate, [0] for the request's own. */
static struct hedge_scan *
hedge_scan_of(struct lg_hedge *h, const struct lg_attempt *a)
{
    return &h->scan[a == &h->dup ? 1 : 0];
}

/* a's bytes are held from now on (scanned here, not relayed). */
static void
hedge_hold(struct lg_client *c, struct lg_hedge *h, struct lg_attempt *a)
{
    struct hedge_scan *s = hedge_scan_of(h, a);

    hedge_scan_start(s);
    s->held = true;
    lg_bevio_watermark(a->up->bev, EV_READ, 0, hedge_conf(c)->hold_bytes);
}

/* a is held no more: the relay reads it as any. */
static void
hedge_unhold(struct lg_hedge *h, struct lg_attempt *a)
{
    hedge_scan_of(h, a)->held = false;
    if (a->up != NULL) {
        lg_bevio_watermark(a->up->bev, EV_READ, 0, 0);
    }
}

/* The race is over: one attempt goes on (still held until its first content
 * event, so that a failure before it may still be retried). */
static void
hedge_settle(struct lg_client *c, struct lg_hedge *h, enum lg_req_hedge outcome)
{
    h->state = HEDGE_ST_DONE;
    evtimer_del(h->timer);
    c->req.tries.hedge = outcome;
}

/*
 * The duplicate takes the request's place (the request's attempt has ended,
 * lost or failed): it is the request's current attempt from now on, still
 * held unless it won.
 */
static void
hedge_dup_goes_on(struct lg_client *c, struct lg_hedge *h)
{
    lg_attempt_make_current(c, &h->dup);
    lg_admission_cancel(c); /* a first attempt waiting for a slot again waits no more */
    hedge_settle(c, h, LG_REQ_HEDGE_DUP);
    hedge_count(c, LG_STATS_HEDGE_WON);
}

/* The duplicate is out (it lost, failed or answered an error, or nobody waits
 * any more), ended already: counted as wasted; the request's attempt goes on. */
static void
hedge_dup_out(struct lg_client *c, struct lg_hedge *h, enum lg_req_hedge outcome)
{
    h->scan[1].held = false;
    hedge_settle(c, h, outcome);
    hedge_count(c, LG_STATS_HEDGE_WASTED);
}

/*
 * Attempt a (either) answered an error while the other runs: it leaves the
 * race, its head told to its backend as the relay would, and the other goes
 * on, still held. Its bytes are never relayed.
 */
static void
hedge_out(struct lg_client *c, struct lg_hedge *h, struct lg_attempt *a)
{
    struct hedge_scan *s = hedge_scan_of(h, a);

    if (s->status != 0) {
        lg_attempt_note_head(c, a, s->status, 0);
    }
    if (a == &h->dup && lg_log_ratelimit(&a->backend->warn_ratelimit_ns, LG_NS_PER_S)) {
        LG_CONN_LOG(LG_LOG_WARN, c, "hedge on backend %s failed: %s", a->backend->name,
                    lg_fail_name(s->fail));
    }
    s->held = false;
    lg_attempt_end(c, a, s->fail, false);
    if (a == &h->dup) {
        hedge_dup_out(c, h, LG_REQ_HEDGE_FIRST);
    } else {
        hedge_dup_goes_on(c, h);
    }
}

/* ---- the duplicate ---------------------------------------------------------- */

/* Sends the duplicate to the router's next choice; false when there is none. */
static bool
hedge_send(struct lg_client *c, struct lg_hedge *h)
{
    struct lg_request *req = &c->req;
    const struct lg_model_route *route = lg_attempt_route(c);
    struct lg_attempt *a = &h->dup;
    uint64_t t0 = req->tries.trace != NULL ? lg_now_ns() : 0;
    int rc;

    lg_attempt_init(a, LG_ATTEMPT_HEDGE);
    if (route == NULL) {
        return false;
    }
    a->pick.no_explain = c->w->alog == NULL; /* the access log is its only reader here */
    /* the tried set holds the request's attempt's backend (since its launch) */
    rc = lg_router_pick(req->fleet->router, route, &req->route, &req->tries.tried, &a->pick);
    if (req->tries.trace != NULL) {
        lg_trace_pick(c, a, rc, t0);
    }
    if (rc != LG_OK) {
        return false;
    }
    if (h->ops->launch(c, a) != LG_OK) {
        lg_attempt_end(c, a, LG_FAIL_CONNECT, false);
        return false;
    }
    return true;
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
    if (h == NULL || h->state != HEDGE_ST_WAIT || req->att == NULL || req->att->up == NULL
        || !hedge_scan_of(h, req->att)->held) {
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
    req->tries.hedge = LG_REQ_HEDGE_RACING;
    hedge_count(c, LG_STATS_HEDGE_SENT);
    LG_CONN_LOG(LG_LOG_DEBUG, c, "no first token from %s after %.0f ms: hedged on %s",
                req->att->backend->name, req->tries.hedge_after_ms, h->dup.backend->name);
}

/* ---- hooks ------------------------------------------------------------------ */

/* The request's hedging state, made when it may be hedged at all (NULL if not). */
static struct lg_hedge *
hedge_new(struct lg_client *c, struct lg_attempt *a, const struct lg_hedge_ops *ops)
{
    struct lg_request *req = &c->req;
    const struct lg_hedge_conf *hc = hedge_conf(c);
    const struct lg_model_route *route = lg_attempt_route(c);
    struct lg_hedge *h;

    if (!lg_hedge_eligible(hc, req->hdrs.buf + req->hdrs.url_off, req->hdrs.url_len, &req->info)
        || route == NULL) {
        return NULL;
    }
    if (req->tries.n <= 1) { /* the request's share of the budget, at its first */
        lg_hedge_budget_update(&c->w->hedge_budget, hc, c->w->gw->nworkers, lg_now_ns(), 1, false);
    }
    if (!lg_router_has_candidate(route, &req->tries.tried, req->sched.cls)) { /* a's in it */
        return NULL; /* no other backend could take a duplicate: nothing to hold for */
    }
    h = lg_xcalloc(1, sizeof(*h));
    h->timer = evtimer_new(c->w->base, hedge_on_deadline, c);
    if (h->timer == NULL) {
        free(h);
        return NULL;
    }
    h->ops = ops;
    req->hedge = h;
    return h;
}

void
lg_hedge_arm(struct lg_client *c, struct lg_attempt *a, const struct lg_hedge_ops *ops)
{
    struct lg_request *req = &c->req;
    struct lg_hedge *h = req->hedge;
    double ms;
    struct timeval tv;

    if (a->kind == LG_ATTEMPT_CONTINUATION) {
        if (h != NULL) {
            hedge_scan_of(h, a)->held = false;
        }
        return; /* the client has bytes of a stream already: nothing to race for */
    }
    if (h == NULL && (h = hedge_new(c, a, ops)) == NULL) {
        return;
    }
    /* every attempt of the request is held until its first content event: a
     * new one (the duplicate, a retry, or a pooled connection that closed
     * under the first in a race) as the first */
    hedge_hold(c, h, a);
    if (h->state != HEDGE_ST_WAIT || a->kind == LG_ATTEMPT_HEDGE) {
        return; /* racing, or over: no other deadline */
    }
    ms = lg_hedge_deadline_ms(hedge_conf(c), &a->pick);
    req->tries.hedge_after_ms = (float)ms;
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)(fmod(ms, 1000) * 1000);
    evtimer_add(h->timer, &tv); /* from the dispatch, which was now */
}

bool
lg_hedge_holds(struct lg_client *c, struct lg_attempt *a)
{
    struct lg_hedge *h = c->req.hedge;
    struct hedge_scan *s = hedge_scan_of(h, a);

    if (!s->held || a->up == NULL) {
        return false;
    }
    switch (hedge_scan(s, bufferevent_get_input(a->up->bev), hedge_conf(c)->hold_bytes)) {
    case HEDGE_MORE:
        return true;
    case HEDGE_WIN:
        hedge_unhold(h, a);
        if (h->state != HEDGE_ST_RACE) {
            hedge_settle(c, h, c->req.tries.hedge); /* no duplicate was needed, or it left */
        } else if (a == &h->dup) {
            /* the request's attempt loses: closed, nothing learnt from it */
            hedge_scan_of(h, c->req.att)->held = false;
            lg_attempt_end(c, c->req.att, LG_FAIL_HEDGE_LOST, false);
            hedge_dup_goes_on(c, h);
        } else {
            lg_attempt_end(c, &h->dup, LG_FAIL_HEDGE_LOST, false);
            hedge_dup_out(c, h, LG_REQ_HEDGE_FIRST);
        }
        return false;
    case HEDGE_OUT:
        if (h->state == HEDGE_ST_RACE) {
            hedge_out(c, h, a);
            return true;
        }
        /* alone: the relay deals with it (and a retry is held again) */
        evtimer_del(h->timer);
        hedge_unhold(h, a);
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
    h->scan[0].held = false;
    hedge_dup_goes_on(c, h);
    return true;
}

void
lg_hedge_dup_failed(struct lg_client *c)
{
    struct lg_hedge *h = c->req.hedge;

    if (h != NULL && h->state == HEDGE_ST_RACE) {
        hedge_dup_out(c, h, LG_REQ_HEDGE_FIRST);
    }
}

void
lg_hedge_stop(struct lg_client *c, enum lg_fail why)
{
    struct lg_hedge *h = c->req.hedge;

    if (h == NULL) {
        return;
    }
    if (h->state == HEDGE_ST_RACE) {
        lg_attempt_end(c, &h->dup, why, false);
        hedge_dup_out(c, h, LG_REQ_HEDGE_NEITHER);
    } else if (h->state == HEDGE_ST_WAIT) {
        hedge_settle(c, h, c->req.tries.hedge);
    }
    h->scan[0].held = false;
    h->scan[1].held = false;
}

void
lg_hedge_free(struct lg_client *c)
{
    struct lg_hedge *h = c->req.hedge;

    if (h == NULL) {
        return;
    }
    lg_hedge_stop(c, LG_FAIL_ABORTED);
    if (c->req.att == &h->dup) {
        c->req.att = NULL;
    }
    lg_route_result_clear(&h->dup.pick);
    event_free(h->timer);
    free(h);
    c->req.hedge = NULL;
}
