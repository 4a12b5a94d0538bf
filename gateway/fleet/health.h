/*
 * health.h: active health checks and engine /metrics scraping for a fleet,
 * on a thread of its own (never on the workers' event loops).
 *
 * For each backend: GET health_path every health.interval (rise successes
 * in a row mark it up, fall failures mark it down), and GET metrics_path
 * every health.scrape_interval, parsed in the backend's vocabulary
 * (enginemetrics.h) and published for the router with its time. A failed or
 * unparsable scrape never marks a backend down: its last sample just ages
 * until the router stops counting it (fail open). The thread also
 * recomputes each model's prior (the median of its backends' estimates).
 */
#ifndef LG_HEALTH_H
#define LG_HEALTH_H

#include "base/lg_core.h"

struct lg_backend;
struct lg_backend_engine;
struct lg_config;
struct lg_engine_sample;
struct lg_health;
struct lg_model_route;

/*
 * What a checker thread borrows from its fleet (fleet.c), which stops the
 * thread before it frees any of it.
 */
struct lg_health_fleet {
    const struct lg_config *conf;
    struct lg_backend *const *backends; /* checked, scraped; peers' requests published */
    size_t nbackends;
    struct lg_model_route *models; /* each model's prior is written here */
    size_t nmodels;
};

/*
 * Starts checking the fleet's backends. *out is NULL when there is nothing
 * to do (no checks, no scrapes, no backends). The fleet must outlive it:
 * lg_fleet_unref() stops it first.
 */
int lg_health_start(const struct lg_health_fleet *f, struct lg_health **out);

/* Stops the thread and frees everything (NULL is fine). */
void lg_health_stop(struct lg_health *h);

/*
 * Whether a queue the engine shows can hold a request of ours for a slot:
 * the most overdue of ours there (late_ms past its predicted service) waits
 * longer than two steps (step_ms: the replica's gap between tokens) and the
 * longest prompt pending there explain, and no long prefill of ours
 * (work_ms in all, longest_ms the longest) may be what holds the queue.
 * With no request of ours there (late_ms 0) it is false: the queue is not
 * read, and the capacity stays a guess.
 */
bool lg_health_ours_queued(double late_ms, double step_ms, double work_ms, double longest_ms,
                           uint64_t interval_ns);

/*
 * Folds one parsed scrape into a backend's engine state: counts, time, our
 * in-flight count at that time, and the capacity estimate (the running
 * count while requests waited on two scrapes in a row, interval_ns apart,
 * is the engine's slot count when ours_queued says a request of ours is in
 * that queue for a slot: waiting longer than the next step and any long
 * prefill explain; otherwise the most seen running is only a lower bound).
 */
void lg_health_fold_sample(struct lg_backend_engine *e, const struct lg_engine_sample *s,
                           uint64_t now_ns, uint32_t inflight, uint64_t interval_ns,
                           bool ours_queued);

#endif /* LG_HEALTH_H */
