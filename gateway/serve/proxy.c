/*
 * proxy.c: a request's path through the gateway, top to bottom, and the
 * decisions on the way. The stages, in the order the request meets them:
 *
 *   1. listener   listener.c accepts the connection; it becomes a client.
 *   2. client     client.c reads the request: llhttp, the limits, the head's
 *                 checks and its API key, before any body byte is read.
 *   3. openai     proxy_dispatch(): the gateway's own endpoints
 *                 (endpoints.c), else the body is inspected (http/openai.c)
 *                 for the model and what routing reads, and the key may
 *                 use that model (auth.c).
 *   4. router     proxy_start(), proxy_attempt(): the policy picks a
 *                 backend (route/router.c), or the request waits for one
 *                 in the admission queue (admission.c); the attempt takes
 *                 its place there (attempt.c).
 *   5. upstream   a pooled or a new connection (upstream.c) carries the
 *                 request (relay.c); proxy_on_up_event() sees it connect.
 *   6. relay      proxy_on_up_read(): the response head (retry elsewhere on
 *                 a retryable status, before any byte reached the client),
 *                 then the body moved with backpressure and its SSE events
 *                 stamped (relay.c).
 *                 A failure after that is cut, unless resume.c can go on
 *                 with the stream on another backend (proxy_failed_midway()).
 *   7. client     proxy_complete(), or a failure: the request ends in the
 *                 client's one exit (lg_client_finish, _fail, _cut in
 *                 client.c), which writes the access-log line, the metrics
 *                 and the backend's statistics (record.c).
 *
 * Owns, per request: the fleet reference and the total-deadline timer.
 * Borrows: the client (which owns the request) and, while an attempt runs,
 * what attempt.c holds for it (the backend, the upstream connection).
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
#include "fleet/fleet.h"
#include "http/bevio.h"
#include "http/openai.h"
#include "http/tls.h"
#include "route/router.h"
#include "serve/admission.h"
#include "serve/attempt.h"
#include "serve/auth.h"
#include "serve/client.h"
#include "serve/endpoints.h"
#include "serve/hedge.h"
#include "serve/relay.h"
#include "serve/resume.h"
#include "serve/upstream.h"
#include "serve/worker.h"

static void proxy_start(struct lg_client *c);
static void proxy_abort(struct lg_client *c, enum lg_fail why);
static void proxy_attempt(struct lg_client *c);
static void proxy_admitted(struct lg_client *c);
static void proxy_attempt_failed(struct lg_client *c, enum lg_fail why);
static void proxy_on_up_read(struct bufferevent *bev, void *arg);
static void proxy_on_up_event(struct bufferevent *bev, short what, void *arg);
static void proxy_up_read(struct lg_client *c, struct lg_upconn *u, struct evbuffer *in);
static void proxy_complete(struct lg_client *c, struct lg_upconn *u, bool reusable);
static void proxy_protocol_error(struct lg_client *c, struct lg_upconn *u, int err);
static void proxy_on_total_timeout(evutil_socket_t fd, short what, void *arg);
static void proxy_failed_midway(struct lg_client *c, enum lg_fail why);

/* A duplicate that wins, or a held attempt released, reads through these (hedge.c). */
static const struct lg_hedge_ops proxy_hedge_ops = {
    .read = proxy_on_up_read,
    .event = proxy_on_up_event,
};

static const struct lg_config *
proxy_conf(const struct lg_client *c)
{
    return c->req.fleet->conf;
}

/* How long an attempt waits for its answer: a continuation's client is
 * mid-stream, so stream_idle bounds that silence too. */
static uint64_t
proxy_first_byte_ms(const struct lg_client *c)
{
    const struct lg_config *conf = proxy_conf(c);

    if (c->req.flags & LG_REQ_F_STARTED) {
        return LG_MIN(conf->timeouts.first_byte_ms, conf->timeouts.stream_idle_ms);
    }
    return conf->timeouts.first_byte_ms;
}

/* The first-byte timeout starts now (a pooled connection keeps its stream-idle write timeout). */
static void
proxy_set_timeouts(struct bufferevent *bev, uint64_t read_ms, uint64_t write_ms)
{
    struct timeval r, w;

    lg_bevio_timeouts(bev, lg_timeval_ms(read_ms, &r), lg_timeval_ms(write_ms, &w));
}

/* ---- 3. openai: the request is read -------------------------------------- */

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
    if (lg_openai_inspect(req->body, lg_client_conf(c)->routing.prefix_bytes, &req->info, err,
                          sizeof(err))
        != LG_OK) {
        lg_client_fail_param(c, 400, req->info.code, req->info.param, "%s", err);
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

    if ((req->flags & LG_REQ_F_STARTED)
        || !(proxy_conf(c)->routing.retry.on & LG_FAIL_BIT(why))) {
        return false;
    }
    if (req->attempts >= proxy_conf(c)->routing.retry.attempts) {
        return false;
    }
    if (!lg_router_has_candidate(lg_fleet_find_model(req->fleet, req->info.model),
                                 req->tried_mask)
        && !lg_admission_can_wait(lg_fleet_find_model(req->fleet, req->info.model),
                                  req->tried_mask)) {
        return false; /* nobody left to try, now or after a wait in the queue */
    }
    return proxy_take_retry_token(c);
}

/* ---- 4. router: a backend for the request -------------------------------- */

static void
proxy_start(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    const struct lg_config *conf;
    const struct lg_model_route *route;

    req->fleet = lg_fleet_ref(c->w->fleet);
    conf = req->fleet->conf;
    proxy_retry_refill(c, 1.0); /* this request earns its share of retries */
    route = lg_fleet_find_model(req->fleet, req->info.model);
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
    req->route.session_hash = 0;
    if (conf->routing.session_header != NULL) {
        const struct lg_hdr *h = lg_hdrs_find(&req->hdrs, conf->routing.session_header);

        if (h != NULL && h->value_len > 0) {
            req->route.session_hash =
                lg_mix64(lg_hash64(lg_hdrs_value(&req->hdrs, h), h->value_len, LG_HASH64_INIT))
                | 1;
        }
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
    proxy_attempt(c);
}

static void
proxy_attempt(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    const struct lg_config *conf = proxy_conf(c);
    const struct lg_model_route *route = lg_fleet_find_model(req->fleet, req->info.model);
    struct lg_backend *b;
    struct lg_upconn *u;
    int rc;

    rc = lg_router_pick(req->fleet->router, route, &req->route, req->tried_mask, &req->pick);
    /* a continuation (resume.c) does not queue: its client is mid-stream */
    if (!(req->flags & LG_REQ_F_STARTED)
        && lg_admission_hold(c->w->gw->admission, c, rc, proxy_admitted)) {
        return; /* waits for a backend slot (admission.c), or was refused */
    }
    if (rc != LG_OK && (req->flags & LG_REQ_F_STARTED)) {
        req->resume_fail = LG_STATS_RESUME_NO_BACKEND;
        lg_client_cut(c, req->fail != LG_FAIL_NONE ? req->fail : LG_FAIL_NO_BACKEND);
        return;
    }
    if (rc != LG_OK) {
        if (req->attempts > 0) {
            lg_client_fail(c, req->fail != LG_FAIL_NONE ? lg_fail_status(req->fail) : 502,
                           req->error ? req->error : "bad_gateway",
                           "no other backend left to try after: %s",
                           req->error ? req->error : "failure");
        } else {
            lg_client_fail(c, 503, "no_backend_available",
                           "no backend serving model \"%s\" is available (%s)", req->info.model,
                           req->pick.reason);
        }
        return;
    }
    b = req->pick.backend;
    req->tried_mask |= lg_attempt_backend_bit(c, b);
    req->attempts++;
    lg_attempt_begin(c, b);
    /* 5. upstream: a pooled connection, or a new one, carries the request */
    req->t_connect = 0;
    if (!(req->flags & LG_REQ_F_STARTED)) {
        req->t_first_byte = 0; /* a continuation's client had its first byte */
    }
    if (lg_upstream_acquire(c->w, b, c, &u, &req->up_reused) != LG_OK) {
        LG_STAT_ADD(b, connect_failures, 1);
        proxy_attempt_failed(c, LG_FAIL_CONNECT);
        return;
    }
    req->up = u;
    lg_relay_start(u);
    bufferevent_setcb(u->bev, proxy_on_up_read, NULL, proxy_on_up_event, u);
    lg_bevio_watermark(u->bev, EV_READ, 0, 0);
    lg_hedge_arm(c, &proxy_hedge_ops); /* a stream may be held for a duplicate (hedge.c) */
    lg_relay_send_request(c, u);
    if (u->state == LG_UPCONN_ST_CONNECTING) {
        lg_client_set_state(c, LG_CLIENT_ST_CONNECT);
    } else {
        req->t_connect = req->t_dispatch;
        proxy_set_timeouts(u->bev, proxy_first_byte_ms(c), conf->timeouts.stream_idle_ms);
        lg_client_set_state(c, LG_CLIENT_ST_WAIT_HEAD);
    }
    lg_bevio_enable(u->bev, EV_READ | EV_WRITE);
    if (u->state != LG_UPCONN_ST_CONNECTING) {
        lg_bevio_flush(u->bev); /* what was queued leaves in this iteration */
    }
}

/* A request that waited in the admission queue may try for a backend now. */
static void
proxy_admitted(struct lg_client *c)
{
    proxy_attempt(c);
}

/* ---- 5. upstream: connected, or not -------------------------------------- */

static void
proxy_on_up_event(struct bufferevent *bev, short what, void *arg)
{
    struct lg_upconn *u = arg;
    struct lg_client *c = u->client;
    struct lg_request *req;
    const struct lg_config *conf;

    (void)bev;
    if (c == NULL) {
        return;
    }
    req = &c->req;
    conf = proxy_conf(c);
    if (what & BEV_EVENT_CONNECTED) {
        u->state = LG_UPCONN_ST_ACTIVE;
        lg_bevio_own_reads(u->bev); /* connected: reads without FIONREAD from now on */
        req->t_connect = lg_now_ns();
        proxy_set_timeouts(u->bev, proxy_first_byte_ms(c), conf->timeouts.stream_idle_ms);
        lg_client_set_state(c, LG_CLIENT_ST_WAIT_HEAD);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        if (c->state == LG_CLIENT_ST_CONNECT) {
            LG_STAT_ADD(u->b, connect_failures, 1);
            proxy_attempt_failed(c, LG_FAIL_CONNECT_TIMEOUT);
        } else if (c->state == LG_CLIENT_ST_WAIT_HEAD) {
            LG_STAT_ADD(u->b, timeouts, 1);
            proxy_attempt_failed(c, LG_FAIL_FIRST_BYTE_TIMEOUT);
        } else {
            LG_STAT_ADD(u->b, timeouts, 1);
            proxy_failed_midway(c, LG_FAIL_STREAM_IDLE);
        }
        return;
    }
    /* EOF or error */
    if (c->state == LG_CLIENT_ST_CONNECT && u->b->conf.tls) {
        char why[512];

        if (lg_tls_failed(u->bev, why, sizeof(why))) {
            static uint64_t last;

            if (lg_log_ratelimit(&last, LG_NS_PER_S)) {
                LG_CONN_LOG(LG_LOG_WARN, c, "backend %s (%s): %s", u->b->name, u->b->conf.url, why);
            }
            LG_STAT_ADD(u->b, connect_failures, 1);
            proxy_attempt_failed(c, LG_FAIL_TLS);
            return;
        }
    }
    if (c->state == LG_CLIENT_ST_CONNECT) {
        LG_STAT_ADD(u->b, connect_failures, 1);
        /* nothing listens there: down, not misbehaving (backend.c holds it off) */
        proxy_attempt_failed(c, LG_FAIL_CONNECT_REFUSED);
        return;
    }
    if (c->state == LG_CLIENT_ST_WAIT_HEAD) {
        if (req->up_reused && req->up_bytes == 0
            && evbuffer_get_length(bufferevent_get_input(bev)) == 0) {
            /* a keep-alive race, not the backend's fault: retry, count nothing */
            lg_attempt_end(c, false);
            req->attempts--;
            req->tried_mask &= ~lg_attempt_backend_bit(c, u->b);
            proxy_attempt(c);
            return;
        }
        proxy_attempt_failed(c, LG_FAIL_CLOSED);
        return;
    }
    if (c->state == LG_CLIENT_ST_RELAY && (what & BEV_EVENT_EOF) && (req->flags & LG_REQ_F_UP_EOF)) {
        /* close-delimited body: EOF is its end (llhttp_finish runs on_message_complete) */
        llhttp_errno_t err = llhttp_finish(&u->parser);

        if ((err == HPE_OK || err == HPE_PAUSED) && u->resp_done) {
            proxy_complete(c, u, false);
            return;
        }
    }
    proxy_failed_midway(c, (what & BEV_EVENT_EOF) ? LG_FAIL_CLOSED_MIDWAY : LG_FAIL_RESET);
}

/* ---- 6. relay: the response ---------------------------------------------- */

/* Returns LG_OK when the response is being relayed, else LG_EAGAIN (retried or failed). */
static int
proxy_on_head(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    const struct lg_config *conf = proxy_conf(c);
    int status = u->parser.status_code;
    uint64_t retry_after = lg_relay_retry_after_ns(&u->hdrs);
    enum lg_fail fail = lg_fail_of_status(status);

    lg_backend_note_result(req->backend, &conf->health, status, retry_after, 0);
    if (fail != LG_FAIL_NONE) {
        lg_router_note_result(req->fleet->router, lg_attempt_route(c), &req->route, req->backend,
                              status, 0, 0);
    }
    if (fail != LG_FAIL_NONE && proxy_can_retry(c, fail)) {
        LG_CONN_LOG(LG_LOG_INFO, c, "backend %s answered %d: retrying elsewhere",
                    req->backend->name, status);
        lg_attempt_end(c, false);
        req->error = lg_fail_name(fail);
        req->fail = fail;
        proxy_attempt(c);
        return LG_EAGAIN;
    }
    if (!(req->flags & LG_REQ_F_STARTED)) {
        lg_relay_write_head(c, u);
        lg_resume_watch(c, u); /* a stream that may go on elsewhere: relayed event by event */
    } else if (lg_resume_head(c, u) != LG_OK) {
        /* a continuation (resume.c), and no stream to go on with */
        proxy_attempt_failed(c, LG_FAIL_RESUME_REFUSED);
        return LG_EAGAIN;
    }
    lg_client_set_state(c, LG_CLIENT_ST_RELAY);
    /* the relay's timeouts, unless the response ends in this read (then
     * the pool's and the next request's apply): proxy_on_up_read() */
    req->flags |= LG_REQ_F_RELAY_TMO;
    return LG_OK;
}

static void
proxy_on_up_read(struct bufferevent *bev, void *arg)
{
    struct lg_upconn *u = arg;
    struct lg_client *c = u->client;

    if (c == NULL) {
        return;
    }
    if (c->req.hedge != NULL && lg_hedge_holds(c, u)) {
        return; /* no winner yet: the bytes wait in the input (hedge.c) */
    }
    proxy_up_read(c, u, bufferevent_get_input(bev));
    if (c->req.flags & LG_REQ_F_RELAY_TMO) {
        c->req.flags &= ~LG_REQ_F_RELAY_TMO;
        if (c->req.up == u && c->state == LG_CLIENT_ST_RELAY) {
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
proxy_up_read(struct lg_client *c, struct lg_upconn *u, struct evbuffer *in)
{
    struct lg_request *req = &c->req;
    struct lg_relay_read rd = { .budget = LG_BEVIO_READ_BUDGET };
    int err = HPE_OK;

    req->t_now = lg_now_ns();
    if (req->t_first_byte == 0) {
        req->t_first_byte = req->t_now;
    }
    for (;;) {
        switch (lg_relay_read(c, u, in, &rd, &err)) {
        case LG_RELAY_HEAD:
            if (proxy_on_head(c, u) != LG_OK) {
                return; /* retried or failed: u is no longer ours */
            }
            continue;
        case LG_RELAY_DONE:
            if (lg_resume_failing(c)) {
                /* the engine ended its stream with an error resume.c held back */
                proxy_failed_midway(c, LG_FAIL_ENGINE_ERROR);
                return;
            }
            proxy_complete(c, u, evbuffer_get_length(in) == 0);
            return;
        case LG_RELAY_ERROR:
            proxy_protocol_error(c, u, err);
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
        proxy_on_up_read(c->req.up->bev, c->req.up);
    }
}

/* ---- 7. client: the end -------------------------------------------------- */

static void
proxy_complete(struct lg_client *c, struct lg_upconn *u, bool reusable)
{
    struct lg_request *req = &c->req;
    struct lg_backend *b = req->backend;
    bool keep = reusable && llhttp_should_keep_alive(&u->parser);

    req->t_end = lg_now_ns();
    if (!(req->flags & LG_REQ_F_SSE) || req->t_first_token == 0) {
        req->t_first_token = req->t_end; /* non-streaming: TTFT is the whole response */
    }
    if ((req->flags & LG_REQ_F_SSE) && req->sse.error_events > 0) {
        /*
         * The engine failed after its 200 and said so in the stream (vLLM,
         * SGLang, TGI and llama.cpp write `data: {"error": ...}`, some with a
         * [DONE] after it): a failure for health and routing, as a cut
         * stream is, and nothing to learn a duration from.
         */
        lg_attempt_failed_in_stream(c);
        if (lg_log_ratelimit(&b->warn_ratelimit_ns, LG_NS_PER_S)) {
            LG_CONN_LOG(LG_LOG_WARN, c, "backend %s sent an error event in a stream", b->name);
        }
    } else {
        lg_attempt_learn_done(c, !(req->flags & LG_REQ_F_SSE));
    }
    lg_relay_end(c);
    LG_STAT_ADD(b, bytes_in, req->up_bytes);
    lg_attempt_end(c, keep);
    lg_client_finish(c);
}

/* An attempt failed before any response byte reached the client. */
static void
proxy_attempt_failed(struct lg_client *c, enum lg_fail why)
{
    struct lg_request *req = &c->req;

    if (req->backend != NULL) {
        lg_backend_note_result(req->backend, &proxy_conf(c)->health, 0, 0,
                               lg_fail_table[why].refused ? LG_BACKEND_R_REFUSED : 0);
        lg_router_note_result(req->fleet->router, lg_attempt_route(c), &req->route, req->backend, 0,
                              0, 0);
        if (lg_log_ratelimit(&req->backend->warn_ratelimit_ns, LG_NS_PER_S)) {
            LG_CONN_LOG(LG_LOG_WARN, c, "backend %s failed: %s (attempt %u)",
                        req->backend->name, lg_fail_name(why), req->attempts);
        }
    }
    lg_attempt_end(c, false);
    req->error = lg_fail_name(why);
    req->fail = why;
    if (req->flags & LG_REQ_F_STARTED) {
        proxy_failed_midway(c, why); /* a continuation's attempt (resume.c) */
        return;
    }
    if (lg_hedge_takeover(c)) {
        return; /* a duplicate was racing it: it goes on alone (hedge.c) */
    }
    if (proxy_can_retry(c, why)) {
        proxy_attempt(c);
        return;
    }
    lg_client_fail(c, lg_fail_status(why), req->error, "the backend failed before responding (%s)",
                   req->error);
}

static void
proxy_protocol_error(struct lg_client *c, struct lg_upconn *u, int err)
{
    struct lg_request *req = &c->req;

    LG_CONN_LOG(LG_LOG_WARN, c, "backend %s sent a malformed response: %s (%s)",
                req->backend ? req->backend->name : "?", llhttp_errno_name((llhttp_errno_t)err),
                llhttp_get_error_reason(&u->parser));
    if (req->flags & LG_REQ_F_STARTED) {
        proxy_failed_midway(c, LG_FAIL_PROTOCOL);
    } else {
        proxy_attempt_failed(c, LG_FAIL_PROTOCOL);
    }
}

/*
 * The backend failed after the response started: the stream goes on on
 * another backend where resume.c can continue it, else it is cut.
 */
static void
proxy_failed_midway(struct lg_client *c, enum lg_fail why)
{
    lg_attempt_failed_midway(c);
    if (!lg_resume_begin(c, why, proxy_take_retry_token)) {
        lg_client_cut(c, why);
        return;
    }
    proxy_abort(c, why); /* the failed attempt ends: its engine stops */
    c->req.up_bytes = 0; /* counted for that backend; the next counts its own */
    proxy_attempt(c);
}

static void
proxy_on_total_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct lg_client *c = arg;

    (void)fd;
    (void)what;
    if (c->req.backend != NULL) {
        LG_STAT_ADD(c->req.backend, timeouts, 1);
    }
    if (c->req.flags & LG_REQ_F_STARTED) {
        lg_client_cut(c, LG_FAIL_TOTAL_TIMEOUT);
    } else {
        proxy_abort(c, LG_FAIL_TOTAL_TIMEOUT);
        lg_client_fail(c, 504, "total_timeout", "the request took longer than the total timeout");
    }
}

static void
proxy_abort(struct lg_client *c, enum lg_fail why)
{
    struct lg_request *req = &c->req;

    lg_hedge_stop(c); /* a racing duplicate closes too */
    if (req->up == NULL && req->backend == NULL) {
        return;
    }
    if (req->backend != NULL && why == LG_FAIL_CLIENT_CLOSED) {
        LG_STAT_ADD(req->backend, client_aborts, 1);
    }
    if (req->backend != NULL && (req->flags & LG_REQ_F_STARTED)) {
        LG_STAT_ADD(req->backend, bytes_in, req->up_bytes);
    }
    lg_attempt_end(c, false); /* closing the socket makes the engine abort */
}

static void
proxy_release(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    lg_admission_cancel(c);
    proxy_abort(c, LG_FAIL_ABORTED);
    lg_resume_release(c);
    lg_hedge_free(c);
    if (req->timer != NULL) {
        event_free(req->timer);
        req->timer = NULL;
    }
    lg_fleet_unref(req->fleet);
    req->fleet = NULL;
}

const struct lg_client_ops lg_proxy_client_ops = {
    .dispatch = proxy_dispatch,
    .abort = proxy_abort,
    .release = proxy_release,
    .drained = proxy_on_client_drained,
};
