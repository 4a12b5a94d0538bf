/*
 * history.h: the last minutes of the fleet and of each backend, for the
 * status page: a ring of points per backend and one for the fleet, one point
 * per admin.history.resolution, window / resolution points kept.
 *
 * A point is what changed between two samples of counters the gateway keeps
 * anyway (serve/record.c's, the backends' statistics, the workers' routing
 * decisions, the engines' last scrape): nothing is added to a request's
 * path. The admin thread samples on its timer (admin.c) and serves the
 * history as JSON (GET /admin/history); the one thread does both, so the
 * history takes no lock.
 */
#ifndef LG_HISTORY_H
#define LG_HISTORY_H

#include <jansson.h>

#include "base/lg_core.h"
#include "base/stats.h"

struct lg_gateway;
struct lg_history_conf;
struct lg_history;

/* One backend's counters at a sample (cumulative unless said). */
struct lg_history_backend_snap {
    uint32_t id;       /* lg_backend.id: the series the sample extends */
    const char *name;  /* borrowed for the call */
    int state;         /* enum lg_live_state, now */
    int32_t queue;     /* the engine's waiting requests, last scrape; -1 = unknown */
    uint32_t inflight; /* this gateway's requests there, now */
    uint64_t requests; /* requests that ended there */
    uint64_t attempts; /* attempts sent there: the router's picks */
    uint64_t errors;   /* attempts with no response or a 5xx */
    uint64_t ttft[LG_HIST_NBUCKETS + 1]; /* TTFT histogram, per bucket (lg_hist) */
    uint64_t ttft_count;
    uint64_t ttft_sum_us;
};

/* The whole gateway at a sample. */
struct lg_history_snap {
    uint64_t t_ns;                                  /* monotonic */
    uint64_t wall_ms;                               /* wall clock: the plots' time axis */
    const struct lg_history_backend_snap *backends; /* borrowed for the call */
    size_t nbackends;
    uint64_t requests;                         /* inference requests answered */
    uint64_t errors;                           /* ... with a 5xx */
    uint32_t held;                             /* in the admission queue, now */
    const struct lg_stats_decision *decisions; /* (policy, reason) counts; borrowed */
    size_t ndecisions;
};

/* An empty history as hc says (resolution, window); NULL when hc turns it off. */
struct lg_history *lg_history_new(const struct lg_history_conf *hc);
void lg_history_free(struct lg_history *h);

/*
 * Adds the point from the previous sample to s (the first sample, and a
 * backend's first, is only a baseline). Backends missing from s get an empty
 * point; a series with nothing but empty points in the window is dropped.
 */
void lg_history_add(struct lg_history *h, const struct lg_history_snap *s);

/* Samples gw now (its fleet in force, its workers' counters) and adds the point. */
void lg_history_sample(struct lg_history *h, struct lg_gateway *gw);

/*
 * The history as JSON (a new reference; NULL only out of memory): the
 * points from sequence number `since` on (0: all it holds), oldest first.
 */
json_t *lg_history_json(const struct lg_history *h, uint64_t since);

#endif /* LG_HISTORY_H */
