/*
 * health_scrape.h: engine /metrics scrapes of one backend (health_scrape.c),
 * and the rules that fold a scrape into the backend's engine state.
 */
#ifndef LG_HEALTH_SCRAPE_H
#define LG_HEALTH_SCRAPE_H

#include "fleet/health_types.h"

struct lg_engine_sample;

/* Arms t's scrapes, the first at once (each re-arms the next). */
void lg_health_scrape_start(struct lg_health_target *t);

/* Frees what lg_health_scrape_start() made (its requests go with t->conn). */
void lg_health_scrape_stop(struct lg_health_target *t);

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

#endif /* LG_HEALTH_SCRAPE_H */
