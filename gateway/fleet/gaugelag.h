/*
 * gaugelag.h: whether anyone else is served on an engine, and how long its
 * gauges hold a request of ours after its end (gaugelag.c), inferred from
 * each scrape by the fleet's health thread (health_scrape.c).
 */
#ifndef LG_GAUGELAG_H
#define LG_GAUGELAG_H

#include "base/lg_core.h"

struct lg_backend;
struct lg_backend_engine;

/* One backend's inference, between scrapes (owned by its health target). */
struct lg_gaugelag {
    uint64_t fin_t_ns;   /* the engine's finished count last read; 0 = never */
    double fin_prev;     /* ... that count */
    uint32_t ended_prev; /* ... and ours ended there then */
    double fin_excess;   /* its finishes over ours since the first read */
    double fin_min_cur,
        fin_min_prev;       /* ... the least in this window of GAUGELAG_ALONE_S and the last */
    uint64_t fin_bucket_ns; /* when this one began */
    uint64_t fin_since_ns;  /* counted from (first read, engine restart) */
    uint64_t others_ns;     /* its finishes last outran ours; 0 = not since */
    uint64_t lag_t_ns;      /* e->gauge_lag_ms last decayed */
};

/*
 * Sets the engine's word on others (e->others: 1 seen lately, 0 none for
 * GAUGELAG_ALONE_S, -1 unknown) from its finished count (-1: none) set
 * against ours ended there so far (lg_backend_ended(b)), with inflight of
 * ours there now; on turning alone, forgets a capacity no queue confirmed.
 */
void lg_gaugelag_fold_finished(struct lg_gaugelag *g, struct lg_backend_engine *e,
                               const struct lg_backend *b, double finished, uint32_t inflight,
                               uint64_t now);

/*
 * Learns e->gauge_lag_ms, while alone there, from the gauges' excess over
 * what is ours in flight: the age, when the scrape was sent (sent_ns), of
 * the latest end of ours that explains it (a decaying maximum).
 */
void lg_gaugelag_learn(struct lg_gaugelag *g, struct lg_backend_engine *e,
                       const struct lg_backend *b, double excess, uint64_t sent_ns, uint64_t now);

/*
 * Requests of ours the engine may still count though they have ended: those
 * that ended up to two steps (step_ms) before the scrape was sent (sent_ns)
 * or since, and, where alone there, within the gauges' lag.
 */
unsigned lg_gaugelag_counted(const struct lg_backend_engine *e, const struct lg_backend *b,
                             uint64_t sent_ns, double step_ms, bool alone);

#endif /* LG_GAUGELAG_H */
