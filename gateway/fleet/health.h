/*
 * health.h: active health checks and engine /metrics scraping for a fleet,
 * on a thread of its own (never on the workers' event loops).
 *
 * For each backend: GET health_path every health.interval (rise successes
 * in a row mark it up, fall failures mark it down: health_check.c), and GET
 * metrics_path every health.scrape_interval, parsed in the backend's
 * vocabulary (enginemetrics.h) and published for the router with its time
 * (health_scrape.c, gaugelag.c). A failed or unparsable scrape never marks a
 * backend down: its last sample just ages until the router stops counting
 * it (fail open). The thread also fetches what peer gateways have on the
 * backends (health_peers.c) and recomputes each model's prior, the median
 * of its backends' estimates (priors.c).
 */
#ifndef LG_HEALTH_H
#define LG_HEALTH_H

#include "base/lg_core.h"
#include "fleet/health_types.h"

struct lg_health;

/*
 * Starts checking the fleet's backends (struct lg_health_fleet,
 * health_types.h: what the thread borrows). *out is NULL when there is
 * nothing to do (no checks, no scrapes, no backends). The fleet must
 * outlive it: lg_fleet_unref() stops it first.
 */
int lg_health_start(const struct lg_health_fleet *f, struct lg_health **out);

/* Stops the thread and frees everything (NULL is fine). */
void lg_health_stop(struct lg_health *h);

#endif /* LG_HEALTH_H */
