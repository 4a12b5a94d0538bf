/*
 * stats.c: recording what /metrics shows (see stats.h).
 *
 * Owns nothing: the counters live in the worker (struct lg_worker_metrics)
 * and the backend (struct lg_backend_metrics) they describe.
 * Invariant: only relaxed atomic adds here, one call per finished request;
 * a routing-decision slot is filled before ndecisions grows past it.
 */
#include "stats.h"

#include <string.h>

#include "backend.h"
#include "client.h"
#include "worker.h"

const double lg_hist_latency_bounds[LG_HIST_NBUCKETS] = {
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120,
};

const double lg_hist_itl_bounds[LG_HIST_NBUCKETS] = {
    0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2.5,
};

const char *const lg_stats_route_names[LG_STATS_NROUTES] = {
    [LG_STATS_ROUTE_CHAT] = "chat_completions", [LG_STATS_ROUTE_COMPLETIONS] = "completions",
    [LG_STATS_ROUTE_EMBEDDINGS] = "embeddings", [LG_STATS_ROUTE_MODELS] = "models",
    [LG_STATS_ROUTE_HEALTHZ] = "healthz",       [LG_STATS_ROUTE_OTHER] = "other",
};

#define STAT_ADD(p, n) __atomic_fetch_add((p), (n), __ATOMIC_RELAXED)

void
lg_hist_observe(struct lg_hist *h, const double *bounds, double v)
{
    size_t i = 0;

    while (i < LG_HIST_NBUCKETS && v > bounds[i]) {
        i++;
    }
    STAT_ADD(&h->buckets[i], 1);
    STAT_ADD(&h->sum_us, (uint64_t)(v * 1e6 + 0.5));
    STAT_ADD(&h->count, 1);
}

static bool
stats_path_is(const char *path, size_t len, const char *lit)
{
    size_t n = strlen(lit);

    return len == n && memcmp(path, lit, n) == 0;
}

enum lg_stats_route
lg_stats_route_of(const char *path, size_t len)
{
    const char *q = memchr(path, '?', len);

    if (q != NULL) {
        len = (size_t)(q - path);
    }
    if (stats_path_is(path, len, "/v1/chat/completions")) {
        return LG_STATS_ROUTE_CHAT;
    }
    if (stats_path_is(path, len, "/v1/completions")) {
        return LG_STATS_ROUTE_COMPLETIONS;
    }
    if (stats_path_is(path, len, "/v1/embeddings")) {
        return LG_STATS_ROUTE_EMBEDDINGS;
    }
    if (stats_path_is(path, len, "/v1/models")
        || (len > 11 && memcmp(path, "/v1/models/", 11) == 0)) {
        return LG_STATS_ROUTE_MODELS;
    }
    if (stats_path_is(path, len, "/healthz")) {
        return LG_STATS_ROUTE_HEALTHZ;
    }
    return LG_STATS_ROUTE_OTHER;
}

/* Counts a routing decision under (policy, reason); the table is the worker's own. */
static void
stats_decision(struct lg_worker_metrics *m, const char *policy, const char *reason)
{
    uint32_t n = __atomic_load_n(&m->ndecisions, __ATOMIC_RELAXED);
    struct lg_stats_decision *d;

    for (uint32_t i = 0; i < n; i++) {
        d = &m->decisions[i];
        if (d->reason == reason && strcmp(d->policy, policy) == 0) {
            STAT_ADD(&d->count, 1);
            return;
        }
    }
    if (n == LG_STATS_MAX_DECISIONS) {
        STAT_ADD(&m->decisions_dropped, 1);
        return;
    }
    d = &m->decisions[n];
    snprintf(d->policy, sizeof(d->policy), "%s", policy);
    d->reason = reason;
    d->count = 1;
    __atomic_store_n(&m->ndecisions, n + 1, __ATOMIC_RELEASE);
}

void
lg_stats_request_done(const struct lg_client *c)
{
    const struct lg_request *req = &c->req;
    struct lg_worker_metrics *wm = &c->w->metrics;
    const char *path = req->hdrs.buf != NULL ? req->hdrs.buf + req->hdrs.url_off : "";
    enum lg_stats_route route = lg_stats_route_of(path, req->hdrs.buf ? req->hdrs.url_len : 0);
    struct lg_backend *b = (req->flags & LG_REQ_F_PROXIED) ? req->pick.backend : NULL;
    int status = req->status;
    struct lg_backend_metrics *bm;
    int64_t tokens;

    if (status >= LG_STATS_MIN_CODE && status < LG_STATS_MIN_CODE + LG_STATS_NCODES) {
        STAT_ADD(&wm->requests[route][status - LG_STATS_MIN_CODE], 1);
    }
    if (b == NULL) {
        return;
    }
    if (req->pick.policy != NULL && req->pick.reason != NULL) {
        stats_decision(wm, req->pick.policy, req->pick.reason);
    }
    bm = &b->metrics;
    STAT_ADD(&bm->requests, 1);
    STAT_ADD(&bm->prompt_bytes, req->info.prompt_bytes);
    if ((req->flags & LG_REQ_F_SSE) && req->sse.error_events > 0) {
        STAT_ADD(&bm->stream_errors, 1); /* the status was sent before the engine failed */
    }
    if (status < 200 || status >= 300) {
        return; /* latencies describe answers, not failures (counted by status) */
    }
    if (req->t_first_token != 0 && req->t_first_token >= req->t_start) {
        lg_hist_observe(&bm->ttft, lg_hist_latency_bounds,
                        (double)(req->t_first_token - req->t_start) / 1e9);
    }
    if (req->t_end != 0 && req->t_end >= req->t_start) {
        lg_hist_observe(&bm->duration, lg_hist_latency_bounds,
                        (double)(req->t_end - req->t_start) / 1e9);
    }
    if (req->content_events > 1 && req->t_last_token > req->t_first_token) {
        lg_hist_observe(&bm->itl, lg_hist_itl_bounds,
                        (double)(req->t_last_token - req->t_first_token)
                            / (double)(req->content_events - 1) / 1e9);
    }
    tokens = (req->flags & LG_REQ_F_SSE) ? req->sse.probe.completion_tokens
                                         : req->probe.completion_tokens;
    STAT_ADD(&bm->completion_tokens, tokens >= 0 ? (uint64_t)tokens : req->content_events);
    tokens = (req->flags & LG_REQ_F_SSE) ? req->sse.probe.prompt_tokens : req->probe.prompt_tokens;
    if (tokens > 0) {
        STAT_ADD(&bm->prompt_tokens, (uint64_t)tokens);
    }
}
