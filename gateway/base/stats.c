/*
 * stats.c: the histograms and route names behind /metrics (see stats.h);
 * serve/record.c records into them.
 *
 * Owns nothing: the counters live in the worker (struct lg_worker_metrics)
 * and the backend (struct lg_backend_metrics) they describe.
 * Invariant: only relaxed atomic adds here.
 */
#include "base/stats.h"

#include <string.h>

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
    [LG_STATS_ROUTE_RESPONSES] = "responses",   [LG_STATS_ROUTE_MESSAGES] = "messages",
};

const char *const lg_stats_resume_names[LG_STATS_NRESUME] = {
    [LG_STATS_RESUME_NONE] = "none",
    [LG_STATS_RESUME_NO_BACKEND] = "no_backend",
    [LG_STATS_RESUME_BUDGET] = "budget",
    [LG_STATS_RESUME_ATTEMPTS] = "attempts",
    [LG_STATS_RESUME_TEXT_LIMIT] = "text_limit",
    [LG_STATS_RESUME_NOT_TEXT] = "not_text",
    [LG_STATS_RESUME_REQUEST] = "request",
    [LG_STATS_RESUME_COMPLETE] = "complete",
    [LG_STATS_RESUME_EVENT] = "event",
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

