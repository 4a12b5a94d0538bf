/*
 * proxy.c: a request's path through the gateway, top to bottom, and the
 * decisions on the way. The stages, in the order the request meets them:
 *
 *   1. listener   listener.c accepts the connection; it becomes a client.
 *   2. client     client.c reads the request: llhttp, the limits, the head's
 *                 checks and its API key, before any body byte is read.
 *   3. openai     proxy_dispatch(): the gateway's own endpoints
 *                 (base/endpoint.c's table, endpoints.c), else the body is
 *                 inspected (http/openai.c) for the model and what routing
 *                 reads, the key may use that model (auth.c), and its token
 *                 budget has room for the request's estimate (quota.c).
 *   4. router     proxy_start(), proxy_attempt(): the policy picks a
 *                 backend (route/router.c) for the request's next attempt
 *                 (attempt.c), or the request waits for one in the
 *                 admission queue (admission.c); proxy_launch() starts
 *                 every attempt, whatever its kind (first, retry, a hedge's
 *                 duplicate, a continuation).
 *   5. upstream   a pooled or a new connection (upstream.c) carries the
 *                 request (relay.c); proxy_on_up_event() sees it connect.
 *   6. relay      proxy_on_up_read(): the response head (retry elsewhere on
 *                 a failure routing.retry.on lists, before any byte reached
 *                 the client), then the body moved with backpressure and
 *                 its SSE events stamped (relay.c). A failure after that
 *                 is cut, unless resume.c can go on with the stream on
 *                 another backend (proxy_failed_midway()).
 *   7. client     proxy_complete(), or a failure: the request ends in the
 *                 client's one exit (lg_client_finish, _fail, _cut in
 *                 client.c), which writes the access-log line, the metrics
 *                 and the backend's statistics (record.c).
 *
 * Each attempt moves through its phases (attempt_types.h); the handlers
 * below say which phases they leave. The upstream callbacks serve every
 * attempt: the request's current one, and a hedge's duplicate (whose bytes
 * hedge.c holds until one of the two wins).
 *
 * Owns, per request: the fleet reference and the total-deadline timer.
 * Borrows: the client (which owns the request and its attempts) and, while
 * an attempt runs, what attempt.c holds for it (the backend, the upstream
 * connection).
 * Invariants: nothing is retried once LG_REQ_F_STARTED is set (a response
 * byte is queued to the client): an attempt after that is a continuation
 * (resume.c), whose head never reaches the client; every attempt ends in
 * lg_attempt_end().
 */
#include "serve/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "base/config.h"
#include "base/endpoint.h"
#include "base/stats.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/fleet.h"
#include "http/bevio.h"
#include "http/openai.h"
#include "http/tls.h"
#include "route/router.h"
#include "route/tried.h"
#include "serve/admission.h"
#include "serve/attempt.h"
#include "serve/auth.h"
#include "serve/client.h"
#include "serve/endpoints.h"
#include "serve/hedge.h"
#include "serve/quota.h"
#include "serve/relay.h"
#include "serve/respmap.h"
#include "serve/resume.h"
#include "serve/session.h"
#include "serve/trace.h"
#include "serve/upstream.h"
#include "serve/worker.h"

static void proxy_start(struct lg_client *c);
static void proxy_abort(struct lg_client *c, enum lg_fail why);
static void proxy_attempt(struct lg_client *c, enum lg_attempt_kind kind);
static int proxy_launch(struct lg_client *c, struct lg_attempt *a);
static void proxy_admitted(struct lg_client *c);
static void proxy_attempt_failed(struct lg_client *c, struct lg_attempt *a, enum lg_fail why);
static void proxy_on_up_read(struct bufferevent *bev, void *arg);
static void proxy_on_up_event(struct bufferevent *bev, short what, void *arg);
static void proxy_up_read(struct lg_client *c, struct lg_attempt *a, struct evbuffer *in);
static void proxy_complete(struct lg_client *c, struct lg_attempt *a, bool reusable);
static void proxy_protocol_error(struct lg_client *c, struct lg_attempt *a, int err);
static void proxy_on_total_timeout(evutil_socket_t fd, short what, void *arg);
static void proxy_failed_midway(struct lg_client *c, enum lg_fail why);

/* A hedge's duplicate is launched as every attempt is (hedge.c). */
static const struct lg_hedge_ops proxy_hedge_ops = {
    .launch = proxy_launch,
};

static const struct lg_config *
proxy_conf(const struct lg_client *c)
{
    return c->req.fleet->conf;
}

/* How long an attempt waits for its answer (attempt.c). */
static uint64_t
proxy_first_byte_ms(const struct lg_client *c, const struct lg_attempt *a)
{
    return lg_attempt_first_byte_ms(&proxy_conf(c)->timeouts, a);
}

/* The first-byte timeout starts now (a pooled connection keeps its stream-idle write timeout). */
static void
proxy_set_timeouts(struct bufferevent *bev, uint64_t read_ms, uint64_t write_ms)
{
    struct timeval r, w;

    lg_bevio_timeouts(bev, lg_timeval_ms(read_ms, &r), lg_timeval_ms(write_ms, &w));
}

/* ---- 3. openai: the request is read -------------------------------------- */

/* The request's tenant, class and TTFT target (tenant.c); LG_OK, or it is refused. */
static int
proxy_classify(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    struct lg_key_sched ks;
    bool has_key = lg_keys_sched(&req->auth, &ks);
    struct lg_tenant_refusal no;

    if (lg_tenant_resolve(lg_admission_tenants(c->w->gw->admission), lg_client_conf(c),
                          &req->hdrs, lg_keys_name(&req->auth), has_key ? &ks : NULL,
                          req->t_start, &req->sched, &no)
        != LG_OK) {
        lg_client_fail_param(c, no.status, no.code, no.param, "%s", no.message);
        return LG_EINVAL;
    }
    if (req->sched.asked >= 0) {
        LG_CONN_LOG(LG_LOG_INFO, c, "key \"%s\" asked for class %s, above its max_class: %s",
                    lg_keys_name(&req->auth) ? lg_keys_name(&req->auth) : "-",
                    lg_class_name(req->sched.asked), lg_class_name(req->sched.cls));
    }
    return LG_OK;
}

/* The request is read completely (client.c): answer it or route it. */
static void
proxy_dispatch(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    const char *url = req->hdrs.buf + req->hdrs.url_off;
    const struct lg_endpoint *e = lg_endpoint_find(url, req->hdrs.url_len);
    int plen = (int)LG_MIN(strcspn(url, "?"), 255);
    struct lg_auth_refusal no;
    char err[256];

    req->t_read = lg_now_ns();
    if (e == NULL) {
        lg_client_fail(c, 404, "not_found", "no route for %s %.*s",
                       llhttp_method_name((llhttp_method_t)req->method), plen, url);
        return;
    }
    if (req->method != e->method) {
        lg_client_fail(c, 405, "method_not_allowed", "%.*s supports %s only", plen, url,
                       e->method_name);
        return;
    }
    switch (e->id) {
    case LG_ENDPOINT_HEALTHZ:
        lg_endpoints_healthz(c);
        return;
    case LG_ENDPOINT_MODELS:
        lg_endpoints_models(c);
        return;
    case LG_ENDPOINT_MODEL: {
        char id[256];

        snprintf(id, sizeof(id), "%.*s", plen - e->path_len, url + e->path_len);
        lg_endpoints_model(c, id);
        return;
    }
    default:
        break; /* proxied */
    }
    /* the worker's fleet now (lg_client_conf()'s, req->fleet not set yet) */
    if (lg_openai_inspect(req->body, lg_router_prefix_bytes(c->w->fleet->router), &req->info, err,
                          sizeof(err))
        != LG_OK) {
        lg_client_fail_param(c, req->info.status, req->info.code, req->info.param, "%s", err);
        return;
    }
    if (req->info.model[0] == '\0') {
        lg_client_fail_param(c, 400, "missing_model", "model",
                             "the request body has no \"model\" field");
        return;
    }
    if (lg_auth_admit(&c->req, &no) != LG_OK) {
        lg_client_fail(c, no.status, no.code, "%s", no.message);
        return;
    }
    if (proxy_classify(c) != LG_OK) {
        return;
    }
    if (lg_quota_admit(req, &lg_client_conf(c)->budgets,
                       lg_admission_tenants(c->w->gw->admission), &c->w->gw->budget_refuses, &no)
        != LG_OK) {
        lg_client_fail(c, no.status, no.code, "%s", no.message);
        return;
    }
    proxy_start(c);
}

/* ---- retries: a budget, and someone left to try -------------------------- */

/*
 * Retry budget, per worker: each request earns budget_ratio of a token, and
 * budget_min tokens a second arrive regardless (spread over the workers); a
 * retry spends one. A fleet-wide outage thus costs at most ratio x traffic.
 */
static void
proxy_retry_refill(struct lg_client *c, double earned)
{
    struct lg_worker *w = c->w;
    const struct lg_retry_conf *rc = &proxy_conf(c)->routing.retry;
    uint64_t now = lg_now_ns();
    double cap = 10.0 + rc->budget_min;

    if (w->retry_refill_ns == 0) {
        w->retry_refill_ns = now;
        w->retry_tokens = cap;
    }
    w->retry_tokens += (double)(now - w->retry_refill_ns) / 1e9 * rc->budget_min
                           / (double)w->gw->nworkers
                       + earned * rc->budget_ratio;
    w->retry_refill_ns = now;
    if (w->retry_tokens > cap) {
        w->retry_tokens = cap;
    }
}

static bool
proxy_take_retry_token(struct lg_client *c)
{
    struct lg_worker *w = c->w;

    proxy_retry_refill(c, 0);
    if (w->retry_tokens < 1.0) {
        return false;
    }
    w->retry_tokens -= 1.0;
    return true;
}

/* May the request try another backend after `why` (routing.retry.on)? */
static bool
proxy_can_retry(struct lg_client *c, enum lg_fail why)
{
    struct lg_request *req = &c->req;
    const struct lg_model_route *route;

    if ((req->flags & LG_REQ_F_STARTED) || !(proxy_conf(c)->routing.retry.on & LG_FAIL_BIT(why))
        || req->tries.n >= proxy_conf(c)->routing.retry.attempts) {
        return false;
    }
    route = lg_attempt_route(c);
    if (!lg_router_has_candidate(route, &req->tries.tried, req->sched.cls)
        && !lg_admission_can_wait(route, &req->tries.tried, req->sched.cls)) {
        return false; /* nobody left to try, now or after a wait in the queue */
    }
    return proxy_take_retry_token(c);
}

/* ---- 4. router: a backend for the request -------------------------------- */

/*
 * The Responses API: an answer's id is learnt as it passes (relay.c), and a
 * follow-up naming it (previous_response_id) may go only to the backend
 * that made it, which holds it (the others are marked tried: the router,
 * the admission queue and retries see that one alone). That backend gone
 * from the model's route: 404 previous_response_not_found; there but not
 * available (ejected, draining, unhealthy): 409
 * previous_response_backend_unavailable; either way never another replica,
 * which would answer without the conversation. An id the table does not
 * know (never seen here, expired, evicted) is routed as usual: the engine
 * that gets it decides. Returns LG_OK to go on, or LG_ERR once answered.
 */
static int
proxy_follow_response(struct lg_client *c, const struct lg_model_route *route)
{
    struct lg_request *req = &c->req;
    const char *url = req->hdrs.buf + req->hdrs.url_off;
    const struct lg_endpoint *e = lg_endpoint_find(url, req->hdrs.url_len);
    const char *prev = req->info.previous_response_id;
    uint32_t bid;
    size_t at = route->n;

    if (e == NULL || e->id != LG_ENDPOINT_RESPONSES || c->w->gw->respmap == NULL) {
        return LG_OK;
    }
    req->flags |= LG_REQ_F_RESPID;
    if (prev[0] == '\0'
        || lg_respmap_get(c->w->gw->respmap, prev, strlen(prev), lg_now_ns(), &bid) != LG_OK) {
        return LG_OK;
    }
    for (size_t i = 0; i < route->n; i++) {
        if (route->backends[i]->id == bid) {
            at = i;
        }
    }
    if (at == route->n) {
        lg_client_fail_param(c, 404, "previous_response_not_found", "previous_response_id",
                             "the response \"%s\" was made on a replica that no longer serves "
                             "the model \"%s\"",
                             prev, req->info.model);
        return LG_ERR;
    }
    if (!lg_backend_is_available(route->backends[at], lg_now_ns())) {
        lg_client_fail_param(c, 409, "previous_response_backend_unavailable",
                             "previous_response_id",
                             "the response \"%s\" is held by the replica \"%s\", which is not "
                             "available now; retry later, or start without previous_response_id",
                             prev, route->backends[at]->name);
        return LG_ERR;
    }
    for (size_t i = 0; i < route->n; i++) {
        if (i != at) {
            lg_tried_add(&req->tries.tried, i, route->n);
        }
    }
    req->flags |= LG_REQ_F_FOLLOW_UP;
    return LG_OK;
}

static void
proxy_start(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    const struct lg_config *conf;
    const struct lg_model_route *route;

    req->fleet = lg_fleet_ref(c->w->fleet);
    conf = req->fleet->conf;
    lg_trace_begin(c); /* nothing when tracing is off */
    proxy_retry_refill(c, 1.0); /* this request earns its share of retries */
    route = lg_fleet_find_model(req->fleet, req->info.model);
    req->models = route; /* the one look-up: lg_attempt_route() from now on */
    if (route == NULL) {
        lg_client_fail(c, 404, "model_not_found", "the model \"%s\" does not exist",
                       req->info.model);
        return;
    }
    req->route.model = req->info.model;
    req->route.path = req->hdrs.buf + req->hdrs.url_off;
    req->route.stream = req->info.stream;
    req->route.prompt_bytes = req->info.prompt_bytes;
    req->route.max_tokens = req->info.max_tokens > 0 ? (uint32_t)req->info.max_tokens : 0;
    req->route.prefix_hash = req->info.prefix_hash;
    req->route.cls = req->sched.cls;
    req->route.session_hash = lg_router_reads_session(req->fleet->router)
                                  ? lg_session_hash(&conf->routing, &req->hdrs)
                                  : 0;
    if (proxy_follow_response(c, route) != LG_OK) {
        return; /* answered */
    }
    if (conf->timeouts.total_ms > 0) {
        struct timeval tv = { (time_t)(conf->timeouts.total_ms / 1000),
                              (suseconds_t)((conf->timeouts.total_ms % 1000) * 1000) };
        uint64_t spent = lg_now_ns() - req->t_start;

        if (req->timer == NULL) {
            req->timer = evtimer_new(c->w->base, proxy_on_total_timeout, c);
        }
        /* the deadline counts from the request's first byte */
        if (spent / 1000 < (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec) {
            uint64_t left = (uint64_t)tv.tv_sec * 1000000 + (uint64_t)tv.tv_usec - spent / 1000;

            tv.tv_sec = (time_t)(left / 1000000);
            tv.tv_usec = (suseconds_t)(left % 1000000);
        } else {
            tv.tv_sec = 0;
            tv.tv_usec = 0;
        }
        evtimer_add(req->timer, &tv);
    }
    proxy_attempt(c, LG_ATTEMPT_FIRST);
}

/*
 * The router's predicted TTFT for its pick (ms), or -1 without one: the
 * engine model's, else the measured terms', else its queueing plus its
 * service where it learnt one.
 */
static double
proxy_predicted_ttft_ms(const struct lg_route_result *p)
{
    if (p->model_pred_ms >= 0) {
        return p->model_pred_ms;
    }
    if (p->meas_pred_ms >= 0) {
        return p->meas_pred_ms;
    }
    return p->service_ms > 0 ? p->wait_ms + p->ahead_ms + p->service_ms : -1;
}

/* Would one more request of class k (cls) on b go past the share its
 * `reserve` leaves to higher classes, or, on an engine that preempts for
 * priority, with its `yield_prefill`, share the prefill step of a higher
 * class's request that awaits its first token there, or, with its
 * `prompts_per_step`, go past that many new prompts of its class and below
 * in the engine's next step? */
static bool
proxy_over_reserve(const struct lg_backend *b, const struct lg_class_conf *k, unsigned cls)
{
    uint32_t max = lg_backend_conf(b)->max_inflight;

    if (max > 0 && k->reserve > 0
        && (double)(lg_backend_inflight_from(b, cls) + 1) > (double)max * (1.0 - k->reserve)) {
        return true;
    }
    if (lg_backend_conf(b)->engine_priority != LG_ENGINE_PRIORITY_PREEMPT) {
        return false;
    }
    if (k->yield_prefill && lg_backend_pending_above(b, cls) > 0) {
        return true;
    }
    return k->prompts_per_step > 0
           && lg_backend_sent_this_step(b, lg_now_ns(), cls) >= k->prompts_per_step;
}

#define PROXY_RESERVE_REPICKS 16

/*
 * A class with a reserve (or yield_prefill): its pick's backend if it has
 * room under the share (and no prefill to yield to), else the router's next
 * pick among the others (the backends passed over are tried for the new
 * pick only, then forgotten); false when none of the first
 * PROXY_RESERVE_REPICKS + 1 has. So a replica with room serves the class
 * while another, the router's first choice, is full to its share.
 */
static bool
proxy_pick_under_reserve(struct lg_client *c, struct lg_attempt *a, const struct lg_class_conf *k)
{
    struct lg_request *req = &c->req;
    const struct lg_backend *over[PROXY_RESERVE_REPICKS];
    size_t n = 0;
    bool ok = true;

    while (proxy_over_reserve(a->pick.backend, k, c->req.sched.cls)) {
        if (n == PROXY_RESERVE_REPICKS) {
            ok = false;
            break;
        }
        over[n++] = a->pick.backend;
        lg_attempt_set_tried(c, a->pick.backend, true);
        if (lg_router_pick(req->fleet->router, lg_attempt_route(c), &req->route,
                           &req->tries.tried, &a->pick)
                != LG_OK) {
            ok = false;
            break;
        }
        if (a->pick.probe) {
            break; /* a half-open probe: it goes there (a single request) */
        }
    }
    for (size_t i = 0; i < n; i++) {
        lg_attempt_set_tried(c, over[i], false);
    }
    return ok;
}

/*
 * A sheddable class's request is refused now (true) where no backend has
 * room left but the share its class's `reserve` leaves to higher classes
 * (its pick's, or another's), or where no backend is predicted to meet its
 * TTFT target (its pick is the best candidate), rather than lengthening
 * everyone's wait.
 */
static bool
proxy_shed_ttft(struct lg_client *c, struct lg_attempt *a)
{
    struct lg_request *req = &c->req;
    const struct lg_scheduling_conf *sc = &req->fleet->conf->scheduling;
    double pred, left_ms;
    uint64_t now;

    if (!sc->fair || !sc->classes[req->sched.cls].sheddable || req->tries.n > 0
        || a->pick.probe) {
        return false;
    }
    if ((sc->classes[req->sched.cls].reserve > 0 || sc->classes[req->sched.cls].yield_prefill
         || sc->classes[req->sched.cls].prompts_per_step > 0)
        && !proxy_pick_under_reserve(c, a, &sc->classes[req->sched.cls])) {
        /* the room left is reserved for higher classes, or their prefills */
        lg_admission_refuse(c->w->gw->admission, c, LG_SHED_SATURATED);
        return true;
    }
    if (req->sched.deadline_ns == 0) {
        return false;
    }
    pred = proxy_predicted_ttft_ms(&a->pick);
    now = lg_now_ns();
    left_ms = req->sched.deadline_ns > now ? (double)(req->sched.deadline_ns - now) / 1e6 : 0;
    if (pred < 0 || pred <= left_ms) {
        return false;
    }
    lg_admission_refuse(c->w->gw->admission, c, LG_SHED_TTFT_TARGET);
    return true;
}

/*
 * A class with yield_prefill (or prompts_per_step) that is not sheddable:
 * where its pick's backend (and the router's next picks, as for a reserve)
 * all have a higher class's request awaiting a first token on an engine that
 * preempts for priority (or that many new prompts for its next step), it
 * waits in the admission queue (true: its pick is marked full, as if every
 * backend were) until one has none (a first token wakes the queue:
 * lg_admission_kick(); an end, and the queue's tick, too), within its
 * class's queue deadline; a yield never refuses it. Its first attempt only.
 */
static bool
proxy_yield_holds(struct lg_client *c, struct lg_attempt *a)
{
    const struct lg_scheduling_conf *sc = &c->req.fleet->conf->scheduling;
    struct lg_class_conf k;

    if (!sc->fair || c->req.tries.n > 0 || a->pick.probe) {
        return false;
    }
    k = sc->classes[c->req.sched.cls];
    if ((!k.yield_prefill && k.prompts_per_step == 0) || k.sheddable) {
        return false;
    }
    k.reserve = 0; /* a reserve is a sheddable class's */
    if (proxy_pick_under_reserve(c, a, &k)) {
        return false;
    }
    a->pick.full = true;
    a->pick.reason = "yield_prefill";
    return true;
}

/*
 * The request's next attempt, of `kind`: the router's pick, then the
 * launch; or a wait in the admission queue; or, with no backend to pick,
 * the request's end (a continuation's stream is cut).
 */
static void
proxy_attempt(struct lg_client *c, enum lg_attempt_kind kind)
{
    struct lg_request *req = &c->req;
    struct lg_attempt *a;
    uint64_t t0;
    int rc;

    if ((req->flags & LG_REQ_F_FOLLOW_UP) && req->att != NULL && req->tries.n == 0) {
        /* a follow-up back from the admission queue: pinned again, on the route it is
         * routed on now (a reload may have changed it; the tried set is its indices):
         * its backend still there and available, or answered 404/409 now */
        lg_tried_clear(&req->tries.tried);
        req->flags &= ~LG_REQ_F_FOLLOW_UP;
        if (proxy_follow_response(c, lg_attempt_route(c)) != LG_OK) {
            return;
        }
    }
    a = lg_attempt_next(c, kind);
    a->pick.no_explain = c->w->alog == NULL; /* the access log is its only reader here */
    t0 = req->tries.trace != NULL ? lg_now_ns() : 0;
    rc = lg_router_pick(req->fleet->router, lg_attempt_route(c), &req->route, &req->tries.tried,
                        &a->pick);

    if (req->tries.trace != NULL) {
        lg_trace_pick(c, a, rc, t0);
    }
    if (rc == LG_OK && kind == LG_ATTEMPT_FIRST && proxy_yield_holds(c, a)) {
        rc = LG_EBUSY; /* held for a higher class's first token: it waits below */
    }
    /* a continuation does not queue: its client is mid-stream */
    if (kind != LG_ATTEMPT_CONTINUATION
        && lg_admission_hold(c->w->gw->admission, c, rc, proxy_admitted)) {
        if (req->tries.trace != NULL && c->req.sched.waiter != NULL) {
            lg_trace_held(c);
        }
        return; /* waits for a backend slot (admission.c), or was refused */
    }
    if (rc == LG_OK && kind != LG_ATTEMPT_CONTINUATION && proxy_shed_ttft(c, a)) {
        return; /* refused: no backend meets its TTFT target */
    }
    if (rc == LG_OK && (req->flags & LG_REQ_F_FOLLOW_UP)) {
        a->pick.reason = "previous_response_owner"; /* the only candidate it had */
    }
    if (rc == LG_OK) {
        lg_admission_charge(c->w->gw->admission, c);
        if (proxy_launch(c, a) != LG_OK) {
            proxy_attempt_failed(c, a, LG_FAIL_CONNECT);
        }
        return;
    }
    req->retry_after_ms = a->pick.retry_after_ms;
    if (kind == LG_ATTEMPT_CONTINUATION) {
        req->tries.resume_fail = LG_STATS_RESUME_NO_BACKEND;
        lg_client_cut(c, req->tries.fail != LG_FAIL_NONE ? req->tries.fail : LG_FAIL_NO_BACKEND);
    } else if (req->tries.n > 0) {
        lg_client_fail(c, req->tries.fail != LG_FAIL_NONE ? lg_fail_status(req->tries.fail) : 502,
                       req->error ? req->error : "bad_gateway",
                       "no other backend left to try after: %s",
                       req->error ? req->error : "failure");
    } else {
        lg_client_fail(c, 503, "no_backend_available",
                       "no backend serving model \"%s\" is available (%s)", req->info.model,
                       a->pick.reason);
    }
}

/*
 * A request that waited in the admission queue (or was held for a replica)
 * may try for a backend now. One that tried none yet moves to its worker's
 * fleet when that is newer: a reload or DNS discovery brought the replica
 * it waited for.
 */
static void
proxy_admitted(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (req->tries.trace != NULL) {
        lg_trace_admitted(c);
    }
    if (req->tries.n == 0 && req->fleet != c->w->fleet) {
        lg_fleet_unref(req->fleet);
        req->fleet = lg_fleet_ref(c->w->fleet);
        req->models = lg_fleet_find_model(req->fleet, req->info.model);
        if (req->models == NULL) {
            lg_client_fail(c, 404, "model_not_found", "the model \"%s\" does not exist",
                           req->info.model);
            return;
        }
    }
    proxy_attempt(c, req->att->kind);
}

/*
 * Launches attempt a (its pick made) on its backend, whatever its kind: it
 * takes its place there (attempt.c), a pooled or a new connection carries
 * the request, and hedging may hold its bytes (hedge.c). Leaves IDLE for
 * CONNECT or WAIT_HEAD. Returns LG_EIO when no connection could be made
 * (the caller ends a).
 */
static int
proxy_launch(struct lg_client *c, struct lg_attempt *a)
{
    struct lg_backend *b = a->pick.backend;
    struct lg_upconn *u;

    lg_attempt_set_tried(c, b, true);
    lg_attempt_begin(c, a);
    a->span_id = 0;
    if (c->req.tries.trace != NULL) {
        lg_trace_launch(c, a); /* its own span id, sent on as the engine's parent */
    }
    /* 5. upstream: a pooled connection, or a new one, carries the request */
    if (lg_upstream_acquire(c->w, b, c, &u, &a->up_reused) != LG_OK) {
        LG_STAT_ADD(b, connect_failures, 1);
        return LG_EIO;
    }
    a->up = u;
    u->attempt = a;
    lg_relay_start(u);
    bufferevent_setcb(u->bev, proxy_on_up_read, NULL, proxy_on_up_event, u);
    lg_bevio_watermark(u->bev, EV_READ, 0, 0);
    lg_hedge_arm(c, a, &proxy_hedge_ops); /* its bytes may be held for a race (hedge.c) */
    lg_relay_send_request(c, u);
    if (u->state == LG_UPCONN_ST_CONNECTING) {
        lg_attempt_set_phase(c, a, LG_ATTEMPT_PH_CONNECT);
    } else {
        a->t_connect = a->t_dispatch;
        proxy_set_timeouts(u->bev, proxy_first_byte_ms(c, a),
                           proxy_conf(c)->timeouts.stream_idle_ms);
        lg_attempt_set_phase(c, a, LG_ATTEMPT_PH_WAIT_HEAD);
    }
    lg_bevio_enable(u->bev, EV_READ | EV_WRITE);
    if (u->state != LG_UPCONN_ST_CONNECTING) {
        lg_bevio_flush(u->bev); /* what was queued leaves in this iteration */
    }
    return LG_OK;
}

/* ---- 5. upstream: connected, or not -------------------------------------- */

/* CONNECT: leaves for WAIT_HEAD (connected) or DONE (refused, timed out, TLS). */
static void
proxy_st_connect(struct lg_client *c, struct lg_attempt *a, short what)
{
    struct lg_upconn *u = a->up;

    if (what & BEV_EVENT_CONNECTED) {
        u->state = LG_UPCONN_ST_ACTIVE;
        lg_bevio_own_reads(u->bev); /* connected: reads without FIONREAD from now on */
        a->t_connect = lg_now_ns();
        proxy_set_timeouts(u->bev, proxy_first_byte_ms(c, a),
                           proxy_conf(c)->timeouts.stream_idle_ms);
        lg_attempt_set_phase(c, a, LG_ATTEMPT_PH_WAIT_HEAD);
        return;
    }
    LG_STAT_ADD(u->b, connect_failures, 1);
    if (what & BEV_EVENT_TIMEOUT) {
        proxy_attempt_failed(c, a, LG_FAIL_CONNECT_TIMEOUT);
        return;
    }
    if (lg_backend_conf(u->b)->tls) {
        char why[512];

        if (lg_tls_failed(u->bev, why, sizeof(why))) {
            static uint64_t last;

            if (lg_log_ratelimit(&last, LG_NS_PER_S)) {
                LG_CONN_LOG(LG_LOG_WARN, c, "backend %s (%s): %s", u->b->name,
                            lg_backend_conf(u->b)->url, why);
            }
            proxy_attempt_failed(c, a, LG_FAIL_TLS);
            return;
        }
    }
    /* nothing listens there: down, not misbehaving (backend.c holds it off) */
    proxy_attempt_failed(c, a, LG_FAIL_CONNECT_REFUSED);
}

/* WAIT_HEAD, an event: leaves for DONE (silent, closed), or IDLE again
 * through DONE when a pooled connection closed as the request went out. */
static void
proxy_st_wait_head(struct lg_client *c, struct lg_attempt *a, short what)
{
    struct lg_upconn *u = a->up;

    if (what & BEV_EVENT_TIMEOUT) {
        LG_STAT_ADD(u->b, timeouts, 1);
        proxy_attempt_failed(c, a, LG_FAIL_FIRST_BYTE_TIMEOUT);
        return;
    }
    if (a == c->req.att && a->up_reused && a->up_bytes == 0
        && evbuffer_get_length(bufferevent_get_input(u->bev)) == 0) {
        /* a keep-alive race, not the backend's fault: sent again, counted nowhere */
        lg_attempt_set_tried(c, u->b, false);
        c->req.tries.n--;
        lg_attempt_end(c, a, LG_FAIL_POOL_RACE, false);
        proxy_attempt(c, a->kind);
        return;
    }
    if ((what & BEV_EVENT_ERROR) && !(what & BEV_EVENT_EOF)) {
        lg_backend_note_reset(u->b, lg_now_ns()); /* reset: most likely gone (backend.h) */
    }
    proxy_attempt_failed(c, a, LG_FAIL_CLOSED);
}

/* RELAY, an event: leaves for DONE (complete at the close, or failed midway). */
static void
proxy_st_relay(struct lg_client *c, struct lg_attempt *a, short what)
{
    struct lg_upconn *u = a->up;

    if (what & BEV_EVENT_TIMEOUT) {
        LG_STAT_ADD(u->b, timeouts, 1);
        proxy_failed_midway(c, LG_FAIL_STREAM_IDLE);
        return;
    }
    if ((what & BEV_EVENT_EOF) && (c->req.flags & LG_REQ_F_UP_EOF)) {
        /* close-delimited body: EOF is its end (llhttp_finish runs on_message_complete) */
        llhttp_errno_t err = llhttp_finish(&u->parser);

        if ((err == HPE_OK || err == HPE_PAUSED) && u->resp_done) {
            proxy_complete(c, a, false);
            return;
        }
    }
    if (!(what & BEV_EVENT_EOF)) {
        lg_backend_note_reset(u->b, lg_now_ns()); /* reset: most likely gone (backend.h) */
    }
    proxy_failed_midway(c, (what & BEV_EVENT_EOF) ? LG_FAIL_CLOSED_MIDWAY : LG_FAIL_RESET);
}

/* Any attempt's connection: connected, timed out, closed or broken. */
static void
proxy_on_up_event(struct bufferevent *bev, short what, void *arg)
{
    struct lg_upconn *u = arg;
    struct lg_client *c = u->client;
    struct lg_attempt *a = u->attempt;

    (void)bev;
    if (c == NULL || a == NULL) {
        return;
    }
    switch (a->phase) {
    case LG_ATTEMPT_PH_CONNECT:
        proxy_st_connect(c, a, what);
        return;
    case LG_ATTEMPT_PH_WAIT_HEAD:
        proxy_st_wait_head(c, a, what);
        return;
    case LG_ATTEMPT_PH_RELAY:
        proxy_st_relay(c, a, what);
        return;
    default:
        return;
    }
}

/* ---- 6. relay: the response ---------------------------------------------- */

/*
 * WAIT_HEAD, the current attempt's head is in: leaves for RELAY (the head
 * goes to the client, or a continuation's is dropped) or DONE (retried
 * elsewhere, or a continuation refused). Returns LG_OK when the response
 * is being relayed, else LG_EAGAIN (a is no longer the request's).
 */
static int
proxy_on_head(struct lg_client *c, struct lg_attempt *a)
{
    struct lg_request *req = &c->req;
    struct lg_upconn *u = a->up;
    int status = u->parser.status_code;
    enum lg_fail fail = lg_fail_of_status(status);

    lg_attempt_note_head(c, a, status, lg_relay_retry_after_ns(&u->hdrs));
    if (fail != LG_FAIL_NONE && proxy_can_retry(c, fail)) {
        LG_CONN_LOG(LG_LOG_INFO, c, "backend %s answered %d: retrying elsewhere", a->backend->name,
                    status);
        lg_attempt_end(c, a, fail, false);
        req->error = lg_fail_name(fail);
        req->tries.fail = fail;
        proxy_attempt(c, LG_ATTEMPT_RETRY);
        return LG_EAGAIN;
    }
    if (a->kind != LG_ATTEMPT_CONTINUATION) {
        lg_relay_write_head(c, u);
        lg_resume_watch(c, u); /* a stream that may go on elsewhere: relayed event by event */
    } else if (lg_resume_head(c, u) != LG_OK) {
        /* no stream to go on with */
        proxy_attempt_failed(c, a, LG_FAIL_RESUME_REFUSED);
        return LG_EAGAIN;
    }
    lg_attempt_set_phase(c, a, LG_ATTEMPT_PH_RELAY);
    /* the relay's timeouts, unless the response ends in this read (then
     * the pool's and the next request's apply): proxy_on_up_read() */
    req->flags |= LG_REQ_F_RELAY_TMO;
    return LG_OK;
}

/* Any attempt's connection has bytes: held (hedge.c), or relayed. */
static void
proxy_on_up_read(struct bufferevent *bev, void *arg)
{
    struct lg_upconn *u = arg;
    struct lg_client *c = u->client;
    struct lg_attempt *a = u->attempt;

    if (c == NULL || a == NULL) {
        return;
    }
    c->req.t_now = lg_now_ns();
    if (a->t_first_byte == 0) {
        a->t_first_byte = c->req.t_now;
    }
    if (c->req.hedge != NULL && lg_hedge_holds(c, a)) {
        return; /* no winner yet: the bytes wait in the input (hedge.c) */
    }
    if (a != c->req.att) {
        return; /* (only the request's current attempt is ever relayed) */
    }
    proxy_up_read(c, a, bufferevent_get_input(bev));
    if (c->req.flags & LG_REQ_F_RELAY_TMO) {
        c->req.flags &= ~LG_REQ_F_RELAY_TMO;
        if (c->req.att != NULL && c->req.att->up == u && c->state == LG_CLIENT_ST_RELAY) {
            const struct lg_config *conf = proxy_conf(c); /* the request is still on */
            uint64_t ms = conf->timeouts.stream_idle_ms;
            struct timeval tmp, wr;

            /*
             * Every relayed stream holds the stream-idle read timeout and
             * re-arms it at each read: the worker's common timeout, an
             * append to the queue of that duration. The write timeouts are
             * armed only while a write is pending, into a queue that is
             * mostly empty, where a common timeout costs more than the
             * min-heap (libevent re-arms the queue's own timer in the heap
             * whenever an event becomes its head): plain timevals.
             */
            bufferevent_set_timeouts(u->bev, lg_worker_timeout(u->w, ms, &tmp),
                                     lg_timeval_ms(ms, &wr));
            lg_client_set_write_timeout(c, conf->timeouts.client_stall_ms);
        }
    }
    lg_bevio_flush(c->bev); /* what was relayed leaves in this iteration */
}

/* The upstream's bytes, head then body: relay.c reads, this decides. */
static void
proxy_up_read(struct lg_client *c, struct lg_attempt *a, struct evbuffer *in)
{
    struct lg_relay_read rd = { .budget = LG_BEVIO_READ_BUDGET };
    int err = HPE_OK;

    for (;;) {
        switch (lg_relay_read(c, a->up, in, &rd, &err)) {
        case LG_RELAY_HEAD:
            if (proxy_on_head(c, a) != LG_OK) {
                return; /* retried or failed: a is no longer the request's */
            }
            continue;
        case LG_RELAY_DONE:
            if (lg_resume_failing(c)) {
                /* the engine ended its stream with an error resume.c held back */
                proxy_failed_midway(c, LG_FAIL_ENGINE_ERROR);
                return;
            }
            proxy_complete(c, a, evbuffer_get_length(in) == 0);
            return;
        case LG_RELAY_ERROR:
            proxy_protocol_error(c, a, err);
            return;
        default:
            return;
        }
    }
}

/* The client's output drained while relaying: a paused relay goes on. */
static void
proxy_on_client_drained(struct lg_client *c)
{
    if (lg_relay_resume(c)) {
        proxy_on_up_read(c->req.att->up->bev, c->req.att->up);
    }
}

/* ---- 7. client: the end -------------------------------------------------- */

/* RELAY, the response is complete: leaves for DONE; the request ends well. */
static void
proxy_complete(struct lg_client *c, struct lg_attempt *a, bool reusable)
{
    struct lg_request *req = &c->req;
    struct lg_backend *b = a->backend;
    bool keep = reusable && llhttp_should_keep_alive(&a->up->parser);
    enum lg_fail how = LG_FAIL_NONE;

    req->t_end = lg_now_ns();
    if (!(req->flags & LG_REQ_F_SSE) || req->t_first_token == 0) {
        req->t_first_token = req->t_end; /* non-streaming: TTFT is the whole response */
    }
    if (a->t_first_token == 0) {
        a->t_first_token = req->t_end;
    }
    if ((req->flags & LG_REQ_F_SSE) && req->scan.sse.error_events > 0) {
        /*
         * The engine failed after its 200 and said so in the stream (vLLM,
         * SGLang, TGI and llama.cpp write `data: {"error": ...}`, some with a
         * [DONE] after it): a failure for health and routing, as a cut
         * stream is, and nothing to learn a duration from.
         */
        how = LG_FAIL_ENGINE_ERROR;
        if (lg_log_ratelimit(&b->warn_ratelimit_ns, LG_NS_PER_S)) {
            LG_CONN_LOG(LG_LOG_WARN, c, "backend %s sent an error event in a stream", b->name);
        }
    } else {
        lg_attempt_learn_done(c, !(req->flags & LG_REQ_F_SSE));
    }
    lg_relay_end(c);
    lg_attempt_end(c, a, how, keep);
    lg_client_finish(c);
}

/*
 * An attempt failed before any byte of its response reached the client
 * (any phase but RELAY; a continuation's too): it ends (DONE), and the
 * request goes on with a racing duplicate, another backend, a continuation
 * (resume.c), or ends in the client's exit.
 */
static void
proxy_attempt_failed(struct lg_client *c, struct lg_attempt *a, enum lg_fail why)
{
    struct lg_request *req = &c->req;

    if (a->backend != NULL && lg_log_ratelimit(&a->backend->warn_ratelimit_ns, LG_NS_PER_S)) {
        LG_CONN_LOG(LG_LOG_WARN, c, "backend %s failed: %s (%s attempt, %u so far)",
                    a->backend->name, lg_fail_name(why), lg_attempt_kind_name(a->kind),
                    req->tries.n);
    }
    lg_attempt_end(c, a, why, false);
    if (a != req->att) {
        lg_hedge_dup_failed(c); /* a duplicate leaves the race; the request's attempt goes on */
        return;
    }
    req->error = lg_fail_name(why);
    req->tries.fail = why;
    if (a->kind == LG_ATTEMPT_CONTINUATION) {
        proxy_failed_midway(c, why);
        return;
    }
    if (lg_hedge_takeover(c)) {
        return; /* a duplicate was racing it: it goes on alone (hedge.c) */
    }
    if (proxy_can_retry(c, why)) {
        proxy_attempt(c, LG_ATTEMPT_RETRY);
        return;
    }
    lg_client_fail(c, lg_fail_status(why), req->error, "the backend failed before responding (%s)",
                   req->error);
}

static void
proxy_protocol_error(struct lg_client *c, struct lg_attempt *a, int err)
{
    LG_CONN_LOG(LG_LOG_WARN, c, "backend %s sent a malformed response: %s (%s)",
                a->pick.backend->name, llhttp_errno_name((llhttp_errno_t)err),
                llhttp_get_error_reason(&a->up->parser));
    if (a->phase == LG_ATTEMPT_PH_RELAY) {
        proxy_failed_midway(c, LG_FAIL_PROTOCOL);
    } else {
        proxy_attempt_failed(c, a, LG_FAIL_PROTOCOL);
    }
}

/*
 * The current attempt failed after the response started: the stream goes
 * on on another backend where resume.c can continue it, else it is cut.
 */
static void
proxy_failed_midway(struct lg_client *c, enum lg_fail why)
{
    if (!lg_resume_begin(c, why, proxy_take_retry_token)) {
        lg_client_cut(c, why);
        return;
    }
    proxy_abort(c, why); /* the failed attempt ends: its engine stops */
    proxy_attempt(c, LG_ATTEMPT_CONTINUATION);
}

static void
proxy_on_total_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct lg_client *c = arg;
    struct lg_attempt *a = c->req.att;

    (void)fd;
    (void)what;
    if (a != NULL && a->backend != NULL) {
        LG_STAT_ADD(a->backend, timeouts, 1);
    }
    if (c->req.flags & LG_REQ_F_STARTED) {
        lg_client_cut(c, LG_FAIL_TOTAL_TIMEOUT);
    } else {
        proxy_abort(c, LG_FAIL_TOTAL_TIMEOUT);
        lg_client_fail(c, 504, "total_timeout", "the request took longer than the total timeout");
    }
}

/* The request's attempts end for `why` (a racing duplicate too). */
static void
proxy_abort(struct lg_client *c, enum lg_fail why)
{
    struct lg_attempt *a = c->req.att;

    lg_hedge_stop(c, why); /* a racing duplicate closes too */
    if (a == NULL || a->backend == NULL) {
        return;
    }
    if (why == LG_FAIL_CLIENT_CLOSED) {
        LG_STAT_ADD(a->backend, client_aborts, 1);
    }
    lg_attempt_end(c, a, why, false); /* closing the socket makes the engine abort */
}

static void
proxy_release(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    lg_admission_cancel(c);
    proxy_abort(c, LG_FAIL_ABORTED);
    if (req->tries.trace != NULL) {
        lg_trace_request_end(c->w, req); /* its attempts ended: the request's span */
        lg_trace_release(c->w, req);
    }
    lg_resume_release(c);
    lg_hedge_free(c);
    req->att = NULL;
    lg_route_result_clear(&req->own.pick);
    free(req->tries.log);
    req->tries.log = NULL;
    if (req->timer != NULL) {
        event_free(req->timer);
        req->timer = NULL;
    }
    lg_tried_clear(&req->tries.tried);
    lg_admission_settle(c->w->gw->admission, c);
    lg_fleet_unref(req->fleet);
    req->fleet = NULL;
}

const struct lg_client_ops lg_proxy_client_ops = {
    .dispatch = proxy_dispatch,
    .abort = proxy_abort,
    .release = proxy_release,
    .drained = proxy_on_client_drained,
};
