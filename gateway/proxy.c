/*
 * proxy.c: a request's exchange with its backend.
 *
 * Owns, per request: the fleet reference, the backend reference and the
 * backend's in-flight count for the running attempt, and the total-deadline
 * timer. Borrows: the client (which owns the request) and the upstream
 * connection (lent by the pool while attached; given back with
 * lg_upstream_release(), never freed here).
 * Invariants: req->backend != NULL exactly while an attempt counts in the
 * backend's in-flight; req->up != NULL exactly while a connection is lent;
 * nothing is retried once LG_REQ_F_STARTED is set (a response byte is queued
 * to the client), and nothing is ever added inside a relayed body.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "accesslog.h"
#include "admission.h"
#include "backend.h"
#include "bevio.h"
#include "client.h"
#include "config.h"
#include "proxy.h"
#include "tls.h"
#include "upstream.h"
#include "worker.h"

static void proxy_attempt(struct lg_client *c);
static void proxy_on_up_read(struct bufferevent *bev, void *arg);
static void proxy_on_up_event(struct bufferevent *bev, short what, void *arg);

static const struct lg_config *
proxy_conf(const struct lg_client *c)
{
    return c->req.fleet->conf;
}

/* The first-byte timeout starts now (a pooled connection keeps its stream-idle write timeout). */
static void
proxy_set_timeouts(struct bufferevent *bev, uint64_t read_ms, uint64_t write_ms)
{
    struct timeval r, w;

    lg_bevio_timeouts(bev, lg_timeval_ms(read_ms, &r), lg_timeval_ms(write_ms, &w));
}

/* ---- learning ----------------------------------------------------------- */

static const struct lg_model_route *
proxy_route(const struct lg_client *c)
{
    return lg_fleet_find_model(c->req.fleet, c->req.info.model);
}

/* The attempt no longer awaits a first token (it came, or the attempt ended). */
static void
proxy_token_wait_end(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (req->flags & LG_REQ_F_TOKEN_WAIT) {
        req->flags &= ~LG_REQ_F_TOKEN_WAIT;
        lg_backend_ages_del(req->backend, LG_BACKEND_AGES_PENDING, req->t_dispatch);
        lg_backend_due_del(req->backend, req->due_slot);
    }
}

/* The attempt no longer holds a predicted end on its backend. */
static void
proxy_end_slot_clear(struct lg_request *req)
{
    if (req->flags & LG_REQ_F_END_SLOT) {
        req->flags &= ~LG_REQ_F_END_SLOT;
        lg_backend_end_del(req->backend, req->end_slot);
    }
}

/* The attempt no longer holds a sequence in its backend's engine model. */
static void
proxy_seq_clear(struct lg_request *req)
{
    if (req->flags & LG_REQ_F_SEQ) {
        req->flags &= ~LG_REQ_F_SEQ;
        lg_backend_seq_del(req->backend, req->seq_slot);
    }
}

/* (Re)sets when the attempt should end, from its output length: after
 * `ms` more (lg_backend_end_add; a slot it holds is moved in place).
 * Nothing without max_tokens. */
static void
proxy_end_slot_set(struct lg_request *req, uint64_t from_ns, double ms)
{
    uint64_t end_ns;

    if (!(ms >= 0) || req->info.max_tokens <= 0) {
        proxy_end_slot_clear(req);
        return; /* (NaN included) */
    }
    ms = LG_MIN(ms, 86400e3); /* a day: later than any slot frees */
    end_ns = from_ns + (uint64_t)(ms * 1e6);
    if (req->flags & LG_REQ_F_END_SLOT) {
        lg_backend_end_move(req->backend, req->end_slot, end_ns);
        return;
    }
    req->end_slot = lg_backend_end_add(req->backend, end_ns, (uint32_t)(from_ns >> 10));
    if (req->end_slot >= 0) {
        req->flags |= LG_REQ_F_END_SLOT;
    }
}

/* Whether this response's first token teaches its backend anything (a
 * success there): then *prior is its route's, which the samples blend in. */
static bool
proxy_sample_prior(struct lg_client *c, struct lg_est_prior *prior)
{
    struct lg_request *req = &c->req;
    const struct lg_model_route *route = proxy_route(c);

    if (req->backend == NULL || route == NULL || req->status < 200 || req->status >= 300) {
        return false;
    }
    lg_route_read_prior(route, prior);
    return true;
}

/* The time from dispatch to the first token: the gateway queues nothing
 * before it. */
static double
proxy_ttft_ms(const struct lg_request *req)
{
    return (double)(req->t_first_token - req->t_dispatch) / 1e6;
}

/*
 * Whether the first token of this response teaches the backend's TTFT model:
 * then *prior and *ttft_ms are set.
 */
static bool
proxy_ttft_sample(struct lg_client *c, struct lg_est_prior *prior, double *ttft_ms)
{
    if (c->req.pick.queued || !proxy_sample_prior(c, prior)) {
        return false; /* queued: it waited for a slot, which says how busy, not how fast */
    }
    *ttft_ms = proxy_ttft_ms(&c->req);
    return true;
}

/*
 * Every PROXY_END_EVERY content events of a stream its predicted end is
 * moved to what the stream's recent pace says: the events still to come
 * (max_tokens less those seen) at its mean gap since the last move. The gap
 * the pick assumed was the replica's before this request joined its batch;
 * as the batch grows (or the replica slows), streams there run longer than
 * that, and a slot they were thought to free soon stays taken.
 */
#define PROXY_END_EVERY 8

/*
 * The engine's step, from a stream: the lower quartile of its last gaps. A
 * step that admits a prompt lasts its prefill longer; the engine model adds
 * the prefills it knows of, so it steps by the plain ones (the mean, or a
 * median when most steps admit one, would count prefills twice).
 */
static double
proxy_gap_step(const struct lg_request *req)
{
    float g[LG_ARRAY_SIZE(req->gaps)];
    size_t n = LG_MIN(req->ngaps, LG_ARRAY_SIZE(g));

    memcpy(g, req->gaps, n * sizeof(g[0]));
    for (size_t i = 1; i < n; i++) {
        float x = g[i];
        size_t j = i;

        for (; j > 0 && g[j - 1] > x; j--) {
            g[j] = g[j - 1];
        }
        g[j] = x;
    }
    return n >= 8 ? ((double)g[n / 4 - 1] + (double)g[n / 4]) / 2 : (double)g[n / 4];
}

static void
proxy_end_refresh(struct lg_request *req)
{
    uint64_t n = req->content_events - req->pace_events;
    double gap_ms, left;

    if (n == 0 || req->t_now <= req->t_pace) {
        return;
    }
    gap_ms = (double)(req->t_now - req->t_pace) / 1e6 / (double)n;
    left = (double)req->info.max_tokens - (double)req->content_events;
    proxy_end_slot_set(req, req->t_now, (left > 0 ? left : 0) * gap_ms);
    if (req->ngaps >= 4) {
        lg_backend_note_pace(req->backend, req->t_now, proxy_gap_step(req));
    }
    req->t_pace = req->t_now;
    req->pace_events = req->content_events;
}

/* What the pick predicted before the request's own first-token work: a
 * slot, then the first tokens of the requests there before it. */
static double
proxy_pick_wait_ms(const struct lg_request *req)
{
    return req->pick.wait_ms + req->pick.ahead_ms;
}

/* The first content event of a stream: the TTFT sample, at once. */
static void
proxy_first_token(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    struct lg_est_prior prior;

    proxy_token_wait_end(c);
    if (req->flags & LG_REQ_F_END_SLOT) {
        proxy_end_slot_set(req, req->t_first_token,
                           (double)(req->info.max_tokens - 1) * req->pick.itl_ms);
    }
    if (proxy_sample_prior(c, &prior)) {
        /* the engine model's samples where it could tell, and the TTFT fit's
         * unless it queued (as proxy_ttft_sample()) */
        lg_backend_note_first_token(req->backend, &prior, req->info.prompt_bytes,
                                    proxy_ttft_ms(req),
                                    req->pick.queued ? -1 : proxy_pick_wait_ms(req),
                                    req->pick.model_ms, req->pick.model_pred_ms);
    }
}

/*
 * A response ended well: decode speed, slot hold time, a success for the
 * error rate, policies' on_result; for a whole (non-streamed) response also
 * its TTFT sample, all under one lock.
 */
static void
proxy_learn_done(struct lg_client *c, bool whole)
{
    struct lg_request *req = &c->req;
    struct lg_backend *b = req->backend;
    struct lg_est_prior prior;
    double itl = -1, hold, ttft = 0;
    bool learn_ttft = false;

    if (whole) {
        proxy_token_wait_end(c);
        learn_ttft = proxy_ttft_sample(c, &prior, &ttft);
    }
    if (b == NULL || req->status < 200 || req->status >= 300) {
        return;
    }
    if ((req->flags & LG_REQ_F_SSE) && req->content_events > 1) {
        itl = (double)(req->t_last_token - req->t_first_token) / 1e6
              / (double)(req->content_events - 1);
    }
    /* less the wait for a slot only: behind others' prefill it holds one */
    hold = (double)(req->t_end - req->t_dispatch) / 1e6 - req->pick.wait_ms;
    lg_backend_note_done(b, learn_ttft ? &prior : NULL, req->info.prompt_bytes, ttft,
                         proxy_pick_wait_ms(req), itl, hold > 0 ? hold : 0);
    lg_router_note_result(req->fleet->router, proxy_route(c), &req->route, b, req->status,
                          req->t_first_token - req->t_dispatch, req->t_end - req->t_dispatch);
}

/* The backend failed after the response started (reset, silence, garbage). */
static void
proxy_failed_midway(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (req->backend != NULL) {
        lg_backend_note_result(req->backend, &proxy_conf(c)->health, 0, 0, LG_BACKEND_R_MIDWAY);
        lg_router_note_result(req->fleet->router, proxy_route(c), &req->route, req->backend, 0,
                              0, 0);
    }
}

/*
 * A message head is assembled here and handed to the bufferevent in one
 * evbuffer_add: each add to a bufferevent's output runs its callbacks (and
 * takes the event base lock), which cost more than the copy.
 */
struct proxy_head {
    struct evbuffer *out;
    size_t n;
    char buf[2048];
};

static __attribute__((noinline)) void
head_add_full(struct proxy_head *h, const void *p, size_t n)
{
    evbuffer_add(h->out, h->buf, h->n);
    h->n = 0;
    if (n > sizeof(h->buf)) {
        evbuffer_add(h->out, p, n);
        return;
    }
    memcpy(h->buf + h->n, p, n);
    h->n += n;
}

/* Inline: a literal's copy is a few moves, not a call to memcpy. */
static inline void
head_add(struct proxy_head *h, const void *p, size_t n)
{
    if (__builtin_expect(h->n + n > sizeof(h->buf), 0)) {
        head_add_full(h, p, n);
        return;
    }
    memcpy(h->buf + h->n, p, n);
    h->n += n;
}

static inline void
head_str(struct proxy_head *h, const char *s)
{
    head_add(h, s, strlen(s));
}

static void
head_u64(struct proxy_head *h, uint64_t v)
{
    char b[LG_U64_DIGITS];
    char *p = lg_u64_digits(b, v);

    head_add(h, p, (size_t)(b + LG_U64_DIGITS - p));
}

static void
head_flush(struct proxy_head *h)
{
    evbuffer_add(h->out, h->buf, h->n);
    h->n = 0;
}

/* ---- response parser callbacks (parser.data is the upstream connection) -- */

static int
proxy_on_status(llhttp_t *p, const char *at, size_t n)
{
    struct lg_upconn *u = p->data;

    return lg_hdrs_on_url(&u->hdrs, at, n) == LG_OK ? 0 : -1;
}

static int
proxy_on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct lg_upconn *u = p->data;

    return lg_hdrs_on_field(&u->hdrs, at, n) == LG_OK ? 0 : -1;
}

static int
proxy_on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct lg_upconn *u = p->data;

    return lg_hdrs_on_value(&u->hdrs, at, n) == LG_OK ? 0 : -1;
}

static int
proxy_on_headers_complete(llhttp_t *p)
{
    struct lg_upconn *u = p->data;

    if (p->status_code >= 100 && p->status_code < 200) {
        if (p->status_code == 101) {
            llhttp_set_error_reason(p, "unexpected protocol switch");
            return -1;
        }
        u->resp_1xx = true; /* interim response: skip it, the real one follows */
        return 0;
    }
    return HPE_PAUSED; /* the read loop decides: relay, or retry elsewhere */
}

static int
proxy_on_body(llhttp_t *p, const char *at, size_t n)
{
    struct lg_upconn *u = p->data;
    struct lg_client *c = u->client;
    struct lg_request *req = &c->req;

    if (req->flags & LG_REQ_F_SSE) {
        unsigned got = lg_sse_feed(&req->sse, at, n);

        if (got > 0) {
            uint64_t before = req->content_events;

            if (req->t_first_token != 0) {
                req->gaps[req->ngaps++ % LG_ARRAY_SIZE(req->gaps)] =
                    (float)((double)(req->t_now - req->t_last_token) / 1e6 / got);
            }
            req->t_last_token = req->t_now;
            req->content_events += got;
            if (req->flags & LG_REQ_F_SEQ) {
                lg_backend_seq_left(req->backend, req->seq_slot,
                                    (uint64_t)req->info.max_tokens > req->content_events
                                        ? (uint64_t)req->info.max_tokens - req->content_events
                                        : 0,
                                    req->t_now);
            }
            if (req->t_first_token == 0) {
                req->t_first_token = req->t_now;
                req->t_pace = req->t_now;
                req->pace_events = req->content_events;
                proxy_first_token(c);
            } else if ((req->flags & LG_REQ_F_END_SLOT)
                       && before / PROXY_END_EVERY != req->content_events / PROXY_END_EVERY) {
                proxy_end_refresh(req);
            }
        }
    } else {
        lg_json_probe_feed(&req->probe, at, n);
    }
    if (req->flags & LG_REQ_F_DECHUNK) {
        evbuffer_add(bufferevent_get_output(c->bev), at, n);
    }
    return 0;
}

static int
proxy_on_message_complete(llhttp_t *p)
{
    struct lg_upconn *u = p->data;

    if (u->resp_1xx) {
        u->resp_1xx = false;
        lg_hdrs_reset(&u->hdrs);
        return 0;
    }
    u->resp_done = true;
    return HPE_PAUSED;
}

static const llhttp_settings_t proxy_up_settings = {
    .on_status = proxy_on_status,
    .on_header_field = proxy_on_header_field,
    .on_header_value = proxy_on_header_value,
    .on_headers_complete = proxy_on_headers_complete,
    .on_body = proxy_on_body,
    .on_message_complete = proxy_on_message_complete,
};

/* ---- attempts ----------------------------------------------------------- */

/* Ends the running attempt: gives the connection back, releases the backend. */
static void
proxy_end_attempt(struct lg_client *c, bool keep)
{
    struct lg_request *req = &c->req;

    if (req->up != NULL) {
        lg_upstream_release(req->up, keep);
        req->up = NULL;
    }
    if (req->backend != NULL) {
        proxy_token_wait_end(c);
        proxy_end_slot_clear(req);
        proxy_seq_clear(req);
        if (req->flags & LG_REQ_F_AGED) {
            req->flags &= ~LG_REQ_F_AGED;
            lg_backend_ages_del(req->backend, LG_BACKEND_AGES_INFLIGHT, req->t_dispatch);
        }
        if (req->flags & LG_REQ_F_PROBE) {
            req->flags &= ~LG_REQ_F_PROBE;
            lg_backend_release_probe(req->backend);
        }
        lg_backend_inflight_add(req->backend, -1);
        lg_backend_unref(req->backend);
        req->backend = NULL;
        lg_admission_released(c->w->gw->admission, c->w->id, req->info.model);
    }
}

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

static bool
proxy_can_retry(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (req->flags & LG_REQ_F_STARTED) {
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

/* An attempt failed before any response byte reached the client. */
static void
proxy_attempt_failed(struct lg_client *c, const char *why, int status, unsigned flags)
{
    struct lg_request *req = &c->req;

    if (req->backend != NULL) {
        lg_backend_note_result(req->backend, &proxy_conf(c)->health, 0, 0, flags);
        lg_router_note_result(req->fleet->router, proxy_route(c), &req->route, req->backend, 0,
                              0, 0);
        if (lg_log_ratelimit(&req->backend->warn_ratelimit_ns, LG_NS_PER_S)) {
            LG_CONN_LOG(LG_LOG_WARN, c, "backend %s failed: %s (attempt %u)",
                        req->backend->name, why, req->attempts);
        }
    }
    proxy_end_attempt(c, false);
    req->error = why;
    req->fail_status = status;
    if (proxy_can_retry(c)) {
        proxy_attempt(c);
        return;
    }
    lg_client_fail(c, status, why, "the backend failed before responding (%s)", why);
}

/* The bit of backend b in tried_mask (its index in the model's route). */
static uint64_t
proxy_backend_bit(struct lg_client *c, const struct lg_backend *b)
{
    const struct lg_model_route *route = proxy_route(c);
    uint64_t bits = 0;

    for (size_t i = 0; route != NULL && i < route->n && i < 64; i++) {
        if (route->backends[i] == b) {
            bits |= 1ull << i;
        }
    }
    return bits;
}

static void
proxy_write_request(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    struct lg_hdrs *hs = &req->hdrs;
    const struct lg_backend_conf *bc = &u->b->conf;
    struct evbuffer *out = bufferevent_get_output(u->bev);
    struct proxy_head hb = { .out = out };
    const struct lg_hdr *xff = lg_hdrs_find(hs, "x-forwarded-for");
    const char *method = llhttp_method_name((llhttp_method_t)req->method);
    size_t before = evbuffer_get_length(out), sent;

    head_str(&hb, method);
    head_add(&hb, " ", 1);
    head_str(&hb, bc->path_prefix);
    head_add(&hb, hs->buf + hs->url_off, hs->url_len);
    head_add(&hb, " HTTP/1.1\r\nHost: ", 17);
    head_str(&hb, bc->host_header);
    head_add(&hb, "\r\n", 2);
    for (uint32_t i = 0; i < hs->n; i++) {
        const struct lg_hdr *h = &hs->h[i];
        const char *name = lg_hdrs_name(hs, h);

        if (h->hop || lg_str_ieq(name, h->name_len, "host")
            || lg_str_ieq(name, h->name_len, "content-length")
            || lg_str_ieq(name, h->name_len, "expect")
            || lg_str_ieq(name, h->name_len, "x-forwarded-for")
            || lg_str_ieq(name, h->name_len, "x-forwarded-proto") /* ours, not a client's */
            || lg_str_ieq(name, h->name_len, "x-request-id")
            || ((bc->api_key != NULL || c->w->gw->keys != NULL)
                && lg_str_ieq(name, h->name_len, "authorization"))) {
            continue;
        }
        head_add(&hb, name, h->name_len);
        head_add(&hb, ": ", 2);
        head_add(&hb, lg_hdrs_value(hs, h), h->value_len);
        head_add(&hb, "\r\n", 2);
    }
    head_add(&hb, "X-Forwarded-For: ", 17);
    if (xff != NULL) {
        head_add(&hb, lg_hdrs_value(hs, xff), xff->value_len);
        head_add(&hb, ", ", 2);
    }
    head_str(&hb, c->addr_str);
    if (c->tls) {
        head_add(&hb, "\r\nX-Forwarded-Proto: https\r\nX-Request-Id: ", 42);
    } else {
        head_add(&hb, "\r\nX-Forwarded-Proto: http\r\nX-Request-Id: ", 41);
    }
    head_str(&hb, req->id);
    if (bc->api_key != NULL) {
        head_add(&hb, "\r\nAuthorization: Bearer ", 24);
        head_str(&hb, bc->api_key);
    }
    if (req->method != HTTP_GET || req->body_bytes > 0) {
        head_add(&hb, "\r\nContent-Length: ", 18);
        head_u64(&hb, req->body_bytes);
    }
    head_add(&hb, "\r\n\r\n", 4);
    /*
     * Straight to the socket when nothing is queued (a pooled connection),
     * else queued; the body by reference either way, kept intact in
     * req->body for a retry. A head too long for hb has its front queued
     * already: then all of it is.
     */
    sent = lg_bevio_write_msg(u->bev, hb.buf, hb.n, req->body_bytes > 0 ? req->body : NULL);
    LG_STAT_ADD(u->b, bytes_out, evbuffer_get_length(out) + sent - before);
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
    if (lg_admission_hold(c->w->gw->admission, c, rc)) {
        return; /* waits for a backend slot (admission.c), or was refused */
    }
    if (rc != LG_OK) {
        if (req->attempts > 0) {
            lg_client_fail(c, req->fail_status ? req->fail_status : 502,
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
    req->tried_mask |= proxy_backend_bit(c, b);
    req->attempts++;
    req->backend = lg_backend_ref(b);
    lg_backend_inflight_add(b, 1);
    LG_STAT_ADD(b, requests, 1);
    if (req->attempts > 1) {
        LG_STAT_ADD(b, retries, 1);
    }
    req->flags |= LG_REQ_F_PROXIED;
    req->t_dispatch = lg_now_ns();
    if (req->pick.probe) {
        req->flags |= LG_REQ_F_PROBE;
    }
    if (lg_backend_ages_add(b, LG_BACKEND_AGES_PENDING, req->t_dispatch)) {
        req->flags |= LG_REQ_F_TOKEN_WAIT;
        req->due_slot = lg_backend_due_add(b, req->t_dispatch, req->pick.service_ms,
                                           (uint32_t)(req->t_dispatch >> 10));
    }
    if (lg_backend_ages_add(b, LG_BACKEND_AGES_INFLIGHT, req->t_dispatch)) {
        req->flags |= LG_REQ_F_AGED;
    }
    proxy_end_slot_set(req, req->t_dispatch,
                       proxy_pick_wait_ms(req) + req->pick.service_ms
                           + (double)req->info.max_tokens * req->pick.itl_ms);
    if (req->info.stream && req->info.max_tokens > 0) {
        /* a stream's tokens tell the engine model how far it is */
        req->seq_slot = lg_backend_seq_add(b, req->t_dispatch, req->info.prompt_bytes,
                                           (uint32_t)LG_MIN(req->info.max_tokens, UINT32_MAX),
                                           (uint32_t)(req->t_dispatch >> 10));
        if (req->seq_slot >= 0) {
            req->flags |= LG_REQ_F_SEQ;
        }
    }
    req->t_connect = 0;
    req->t_first_byte = 0;
    if (lg_upstream_acquire(c->w, b, c, &u, &req->up_reused) != LG_OK) {
        LG_STAT_ADD(b, connect_failures, 1);
        proxy_attempt_failed(c, "connect_failed", 503, 0);
        return;
    }
    req->up = u;
    u->resp_1xx = false;
    u->resp_done = false;
    lg_hdrs_reset(&u->hdrs);
    llhttp_init(&u->parser, HTTP_RESPONSE, &proxy_up_settings);
    u->parser.data = u;
    bufferevent_setcb(u->bev, proxy_on_up_read, NULL, proxy_on_up_event, u);
    lg_bevio_watermark(u->bev, EV_READ, 0, 0);
    proxy_write_request(c, u);
    if (u->state == LG_UPCONN_ST_CONNECTING) {
        lg_client_set_state(c, LG_CLIENT_ST_CONNECT);
    } else {
        req->t_connect = req->t_dispatch;
        proxy_set_timeouts(u->bev, conf->timeouts.first_byte_ms, conf->timeouts.stream_idle_ms);
        lg_client_set_state(c, LG_CLIENT_ST_WAIT_HEAD);
    }
    lg_bevio_enable(u->bev, EV_READ | EV_WRITE);
    if (u->state != LG_UPCONN_ST_CONNECTING) {
        lg_bevio_flush(u->bev); /* what was queued leaves in this iteration */
    }
}

/* ---- the response head -------------------------------------------------- */

static bool
proxy_is_retryable_status(int status)
{
    return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

/* Retry-After as seconds (delta form only; an HTTP date counts as 1 s). */
static uint64_t
proxy_retry_after_ns(const struct lg_hdrs *hs)
{
    const struct lg_hdr *h = lg_hdrs_find(hs, "retry-after");
    char *end;
    unsigned long s;

    if (h == NULL) {
        return 0;
    }
    s = strtoul(lg_hdrs_value(hs, h), &end, 10);
    if (end == lg_hdrs_value(hs, h)) {
        return LG_NS_PER_S;
    }
    return (uint64_t)LG_MIN(s, 3600ul) * LG_NS_PER_S;
}

static const char *
proxy_reason_phrase(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Unknown";
    }
}

/* Writes the client's response head from the backend's; decides framing. */
static void
proxy_write_head(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    struct lg_hdrs *hs = &u->hdrs;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    struct proxy_head hb = { .out = out };
    size_t before = evbuffer_get_length(out);
    int status = u->parser.status_code;
    bool has_id = false, has_accel = false;
    const char *reason = hs->url_len ? hs->buf + hs->url_off : proxy_reason_phrase(status);

    lg_hdrs_mark_hop_by_hop(hs);
    head_add(&hb, "HTTP/1.1 ", 9);
    head_u64(&hb, (uint64_t)status);
    head_add(&hb, " ", 1);
    head_str(&hb, reason);
    head_add(&hb, "\r\n", 2);
    for (uint32_t i = 0; i < hs->n; i++) {
        const struct lg_hdr *h = &hs->h[i];
        const char *name = lg_hdrs_name(hs, h);
        const char *value = lg_hdrs_value(hs, h);

        if (h->hop) {
            continue;
        }
        /* a shorter value ends in its NUL, where the compare stops */
        if (lg_str_ieq(name, h->name_len, "content-type")
            && lg_mem_ieq(value, "text/event-stream", 17)) {
            req->flags |= LG_REQ_F_SSE;
        } else if (lg_str_ieq(name, h->name_len, "x-request-id")) {
            has_id = true;
        } else if (lg_str_ieq(name, h->name_len, "x-accel-buffering")) {
            has_accel = true;
        }
        head_add(&hb, name, h->name_len);
        head_add(&hb, ": ", 2);
        head_add(&hb, value, h->value_len);
        head_add(&hb, "\r\n", 2);
    }
    if (u->parser.flags & F_CHUNKED) {
        req->flags |= LG_REQ_F_UP_CHUNKED;
        if (req->http_minor == 0) {
            req->flags |= LG_REQ_F_DECHUNK | LG_REQ_F_CLOSE; /* HTTP/1.0 knows no chunks */
        } else {
            head_add(&hb, "Transfer-Encoding: chunked\r\n", 28);
        }
    } else if (!(u->parser.flags & F_CONTENT_LENGTH) && llhttp_message_needs_eof(&u->parser)) {
        /* Close-delimited: re-frame as chunks so a cut can never look complete. */
        req->flags |= LG_REQ_F_UP_EOF;
        if (req->http_minor == 0) {
            req->flags |= LG_REQ_F_CLOSE;
        } else {
            req->flags |= LG_REQ_F_ENCHUNK;
            head_add(&hb, "Transfer-Encoding: chunked\r\n", 28);
        }
    }
    if (!has_id) {
        head_add(&hb, "X-Request-Id: ", 14);
        head_str(&hb, req->id);
        head_add(&hb, "\r\n", 2);
    }
    if ((req->flags & LG_REQ_F_SSE) && !has_accel) {
        head_add(&hb, "X-Accel-Buffering: no\r\n", 23);
    }
    if (c->w->draining) {
        req->flags |= LG_REQ_F_CLOSE;
    }
    if (req->flags & LG_REQ_F_CLOSE) {
        head_add(&hb, "Connection: close\r\n\r\n", 21);
    } else if (req->http_minor == 0) {
        head_add(&hb, "Connection: keep-alive\r\n\r\n", 26);
    } else {
        head_add(&hb, "\r\n", 2);
    }
    head_flush(&hb);
    req->status = status;
    req->flags |= LG_REQ_F_STARTED;
    req->bytes_out += evbuffer_get_length(out) - before;
    if (req->flags & LG_REQ_F_SSE) {
        lg_sse_init(&req->sse);
    }
    lg_json_probe_init(&req->probe);
}

/* Returns LG_OK when the response is being relayed, else LG_EAGAIN (retried or failed). */
static int
proxy_on_head(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    const struct lg_config *conf = proxy_conf(c);
    int status = u->parser.status_code;
    uint64_t retry_after = proxy_retry_after_ns(&u->hdrs);

    lg_backend_note_result(req->backend, &conf->health, status, retry_after, 0);
    if (proxy_is_retryable_status(status)) {
        lg_router_note_result(req->fleet->router, proxy_route(c), &req->route, req->backend,
                              status, 0, 0);
    }
    if (proxy_is_retryable_status(status) && proxy_can_retry(c)) {
        LG_CONN_LOG(LG_LOG_INFO, c, "backend %s answered %d: retrying elsewhere",
                    req->backend->name, status);
        proxy_end_attempt(c, false);
        req->error = "retried_on_status";
        req->fail_status = 502;
        proxy_attempt(c);
        return LG_EAGAIN;
    }
    proxy_write_head(c, u);
    lg_client_set_state(c, LG_CLIENT_ST_RELAY);
    /* the relay's timeouts, unless the response ends in this read (then
     * the pool's and the next request's apply): proxy_on_up_read() */
    req->flags |= LG_REQ_F_RELAY_TMO;
    return LG_OK;
}

/* ---- relaying the body -------------------------------------------------- */

static void
proxy_backpressure(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    size_t high = proxy_conf(c)->limits.stream_buffer_bytes;

    if (!(req->flags & LG_REQ_F_PAUSED_UP)
        && evbuffer_get_length(bufferevent_get_output(c->bev)) >= high) {
        bufferevent_disable(u->bev, EV_READ);
        bufferevent_setwatermark(c->bev, EV_WRITE, high / 2, 0);
        lg_client_watch_drain(c); /* resumes in lg_proxy_on_client_drained() */
        req->flags |= LG_REQ_F_PAUSED_UP;
    }
}

void
lg_proxy_on_client_drained(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (!(req->flags & LG_REQ_F_PAUSED_UP)) {
        return;
    }
    req->flags &= ~LG_REQ_F_PAUSED_UP;
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    if (req->up != NULL) {
        bufferevent_enable(req->up->bev, EV_READ);
        /* bytes may be waiting already: run the read path now */
        if (evbuffer_get_length(bufferevent_get_input(req->up->bev)) > 0) {
            proxy_on_up_read(req->up->bev, req->up);
        }
    }
}

/*
 * Moves n consumed body bytes from the upstream input to the client. The
 * response's `last` bytes are queued, never written at once: they leave at
 * the flush, after proxy_complete() has counted the request done, so a
 * client that has read its whole answer never finds it still in flight
 * (in /metrics, the admission queue, the access log).
 */
static void
proxy_move_body(struct lg_client *c, struct evbuffer *in, size_t n, bool last)
{
    struct lg_request *req = &c->req;
    struct evbuffer *out = bufferevent_get_output(c->bev);

    req->up_bytes += n;
    if (req->flags & LG_REQ_F_DECHUNK) {
        size_t before = evbuffer_get_length(out);

        evbuffer_drain(in, n); /* on_body already queued the decoded bytes */
        req->bytes_out += evbuffer_get_length(out) - before;
        return;
    }
    if (req->flags & LG_REQ_F_ENCHUNK) {
        char size[20];
        size_t k = sizeof(size) - 2, v = n;

        memcpy(size + k, "\r\n", 2);
        do {
            size[--k] = "0123456789abcdef"[v & 15];
            v >>= 4;
        } while (v != 0);
        evbuffer_add(out, size + k, sizeof(size) - k);
        evbuffer_remove_buffer(in, out, n);
        evbuffer_add(out, "\r\n", 2);
    } else {
        /* nothing queued ahead of them (a stream's events after its head):
         * the bytes go straight from the backend's input to the client's
         * socket, and only what it does not take now is queued */
        size_t sent = last ? 0 : lg_bevio_write_from(c->bev, in, n); /* 0 if bytes are queued */

        if (sent < n) {
            evbuffer_remove_buffer(in, out, n - sent);
        }
    }
    req->bytes_out += n;
}

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
        proxy_token_wait_end(c);
        proxy_failed_midway(c);
        if (lg_log_ratelimit(&b->warn_ratelimit_ns, LG_NS_PER_S)) {
            LG_CONN_LOG(LG_LOG_WARN, c, "backend %s sent an error event in a stream", b->name);
        }
    } else {
        proxy_learn_done(c, !(req->flags & LG_REQ_F_SSE));
    }
    if (req->flags & LG_REQ_F_ENCHUNK) {
        struct evbuffer *out = bufferevent_get_output(c->bev);

        evbuffer_add(out, "0\r\n\r\n", 5);
        req->bytes_out += 5;
    }
    LG_STAT_ADD(b, bytes_in, req->up_bytes);
    proxy_end_attempt(c, keep);
    lg_client_finish(c);
}

static void
proxy_protocol_error(struct lg_client *c, struct lg_upconn *u, int err)
{
    struct lg_request *req = &c->req;

    LG_CONN_LOG(LG_LOG_WARN, c, "backend %s sent a malformed response: %s (%s)",
                req->backend ? req->backend->name : "?", llhttp_errno_name((llhttp_errno_t)err),
                llhttp_get_error_reason(&u->parser));
    if (req->flags & LG_REQ_F_STARTED) {
        proxy_failed_midway(c);
        lg_client_cut(c, "upstream_protocol_error");
    } else {
        proxy_attempt_failed(c, "upstream_protocol_error", 502, 0);
    }
}

static void proxy_up_read(struct lg_client *c, struct lg_upconn *u, struct evbuffer *in);

static void
proxy_on_up_read(struct bufferevent *bev, void *arg)
{
    struct lg_upconn *u = arg;
    struct lg_client *c = u->client;

    if (c == NULL) {
        return;
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

/*
 * How much more of a Content-Length answer to read now (0: none). A large
 * answer (16 KiB or more to come: embeddings, a long completion) is read
 * in reads of what is waiting, up to the per-callback budget and one
 * stream buffer at a time, instead of about 5 KiB per read event (bevio.c's
 * own reads are sized for heads and SSE events): 30 reads and writes for 1
 * MiB instead of 215 (bench/NOTES.md 43). A small answer's rest comes with
 * the next read event, with no read that finds nothing; chunked and
 * close-delimited answers keep the read events' path.
 */
static size_t
proxy_up_more(const struct lg_client *c, const struct lg_upconn *u, size_t budget)
{
    size_t high = proxy_conf(c)->limits.stream_buffer_bytes;

    if (!(u->parser.flags & F_CONTENT_LENGTH) || (u->parser.flags & F_CHUNKED)
        || u->parser.content_length < 16 * 1024 || (c->req.flags & LG_REQ_F_PAUSED_UP)) {
        return 0;
    }
    return (size_t)LG_MIN(LG_MIN((uint64_t)budget, u->parser.content_length), (uint64_t)high);
}

static void
proxy_up_read(struct lg_client *c, struct lg_upconn *u, struct evbuffer *in)
{
    struct lg_request *req;
    size_t budget = LG_BEVIO_READ_BUDGET;
    bool drained = false;

    req = &c->req;
    req->t_now = lg_now_ns();
    if (req->t_first_byte == 0) {
        req->t_first_byte = req->t_now;
    }
    while (req->up == u && !(req->flags & LG_REQ_F_PAUSED_UP)) {
        size_t avail = evbuffer_get_length(in), consumed;
        int err = lg_http_execute(&u->parser, in, &consumed);

        if (c->state == LG_CLIENT_ST_WAIT_HEAD) {
            evbuffer_drain(in, consumed); /* head bytes: rewritten, not relayed */
            req->up_bytes += consumed;
            if (err == HPE_PAUSED) {
                llhttp_resume(&u->parser);
                if (proxy_on_head(c, u) != LG_OK) {
                    return; /* retried or failed: u is no longer ours */
                }
                continue;
            }
            if (err != HPE_OK) {
                proxy_protocol_error(c, u, err);
                return;
            }
            if (consumed == avail) {
                return; /* need more of the head */
            }
            continue;
        }
        if (consumed > 0) {
            proxy_move_body(c, in, consumed, err == HPE_PAUSED && u->resp_done);
        }
        if (err == HPE_PAUSED && u->resp_done) {
            proxy_complete(c, u, evbuffer_get_length(in) == 0);
            return;
        }
        if (err != HPE_OK) {
            proxy_protocol_error(c, u, err);
            return;
        }
        proxy_backpressure(c, u);
        if (evbuffer_get_length(in) == 0) {
            size_t want = drained ? 0 : proxy_up_more(c, u, budget), got;

            if (want == 0 || (got = lg_bevio_read(u->bev, want)) == 0) {
                return;
            }
            budget -= LG_MIN(budget, got);
            drained = got < want; /* the socket is empty: no read that finds nothing */
        }
    }
}

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
        proxy_set_timeouts(u->bev, conf->timeouts.first_byte_ms, conf->timeouts.stream_idle_ms);
        lg_client_set_state(c, LG_CLIENT_ST_WAIT_HEAD);
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        if (c->state == LG_CLIENT_ST_CONNECT) {
            LG_STAT_ADD(u->b, connect_failures, 1);
            proxy_attempt_failed(c, "connect_timeout", 504, 0);
        } else if (c->state == LG_CLIENT_ST_WAIT_HEAD) {
            LG_STAT_ADD(u->b, timeouts, 1);
            proxy_attempt_failed(c, "first_byte_timeout", 504, 0);
        } else {
            LG_STAT_ADD(u->b, timeouts, 1);
            proxy_failed_midway(c);
            lg_client_cut(c, "stream_idle_timeout");
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
            proxy_attempt_failed(c, "upstream_tls_error", 502, 0);
            return;
        }
    }
    if (c->state == LG_CLIENT_ST_CONNECT) {
        LG_STAT_ADD(u->b, connect_failures, 1);
        /* nothing listens there: down, not misbehaving (backend.c holds it off) */
        proxy_attempt_failed(c, "connect_refused", 503, LG_BACKEND_R_REFUSED);
        return;
    }
    if (c->state == LG_CLIENT_ST_WAIT_HEAD) {
        if (req->up_reused && req->up_bytes == 0) {
            /* a keep-alive race, not the backend's fault: retry, count nothing */
            proxy_end_attempt(c, false);
            req->attempts--;
            req->tried_mask &= ~proxy_backend_bit(c, u->b);
            proxy_attempt(c);
            return;
        }
        proxy_attempt_failed(c, "upstream_closed", 502, 0);
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
    proxy_failed_midway(c);
    lg_client_cut(c, (what & BEV_EVENT_EOF) ? "upstream_closed_mid_response" : "upstream_reset");
}

/* ---- start, abort, end -------------------------------------------------- */

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
        lg_client_cut(c, "total_timeout");
    } else {
        lg_proxy_abort(c, "total_timeout");
        lg_client_fail(c, 504, "total_timeout", "the request took longer than the total timeout");
    }
}

void
lg_proxy_start(struct lg_client *c)
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

void
lg_proxy_abort(struct lg_client *c, const char *why)
{
    struct lg_request *req = &c->req;

    if (req->up == NULL && req->backend == NULL) {
        return;
    }
    if (req->backend != NULL && (strcmp(why, "client_closed") == 0)) {
        LG_STAT_ADD(req->backend, client_aborts, 1);
    }
    if (req->backend != NULL && (req->flags & LG_REQ_F_STARTED)) {
        LG_STAT_ADD(req->backend, bytes_in, req->up_bytes);
    }
    proxy_end_attempt(c, false); /* closing the socket makes the engine abort */
}

void
lg_proxy_admitted(struct lg_client *c)
{
    proxy_attempt(c);
}

void
lg_proxy_release(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    lg_admission_cancel(c);
    lg_proxy_abort(c, "released");
    if (req->timer != NULL) {
        event_free(req->timer);
        req->timer = NULL;
    }
    lg_fleet_unref(req->fleet);
    req->fleet = NULL;
}
