/*
 * gaugelag.c: whether anyone else is served on an engine, and how long its
 * gauges hold a request of ours after its end (gaugelag.h).
 *
 * Some engines hold a request in their gauges much longer than two steps
 * after its end: SGLang sets them at a prefill or once every 40 decode
 * steps (its decode_log_interval), 0.4-2 s. Where the engine also counts
 * the requests it has finished (enginemetrics.h: vLLM, SGLang, TGI), that
 * count set against ours says whether it serves others at all: each scrape
 * adds its finishes less ours since the last, and a rise over the least of
 * the last 5-10 s by more than our requests in flight (one the engine has
 * finished and the gateway not yet is among them: a slow gateway's lag)
 * plus GAUGELAG_OTHERS_MIN is others'. While none has been seen for
 * GAUGELAG_ALONE_S, the gauges' excess over ours is their lag: measured as
 * the age, when the scrape was sent, of the latest end of ours that
 * explains it (a decaying maximum, up to GAUGELAG_MAX_MS), and our ends
 * within it count as ours (lg_gaugelag_counted()). Another client that has
 * just come still shows beyond what our latest ends explain, and is seen
 * for good once a few of its requests finish.
 *
 * Owns nothing: the state is the health target's, the backend's ends are
 * read lock-free (backend_inflight.c). Runs on the fleet's health thread.
 */
#include "fleet/gaugelag.h"

#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/estimate.h"

#define GAUGELAG_OTHERS_MIN  3
#define GAUGELAG_ALONE_S     5
#define GAUGELAG_MAX_MS      3000
#define GAUGELAG_HALF_LIFE_S 60
#define GAUGELAG_SPARE       1.25

/*
 * Those that ended while the scrape was out (the engine counted at some
 * moment before it answered) or up to two of its steps before it was sent
 * (an engine may drop a request from its gauges a step after its last byte:
 * vLLM sets them once a step). Taken for another client's load, each such
 * count turned the engine model off there with one gateway in front: 132 of
 * 225 picks in integration.routing's case, a gauge 12 ms behind 10 ms steps
 * (bench/routing/NOTES.md 54). A longer lag counts only where the engine is
 * known to serve no one else.
 */
unsigned
lg_gaugelag_counted(const struct lg_backend_engine *e, const struct lg_backend *b, uint64_t sent_ns,
                    double step_ms, bool alone)
{
    double ms = LG_MAX(2 * step_ms, alone ? GAUGELAG_SPARE * e->gauge_lag_ms : 0);
    uint64_t lag = (uint64_t)(ms * (double)LG_NS_PER_MS);

    return lg_backend_gone_since(b, sent_ns > lag ? sent_ns - lag : 1);
}

void
lg_gaugelag_fold_finished(struct lg_gaugelag *g, struct lg_backend_engine *e,
                          const struct lg_backend *b, double finished, uint32_t inflight,
                          uint64_t now)
{
    uint32_t ended = lg_backend_ended(b);

    if (finished < 0) {
        g->fin_t_ns = 0;
        e->others = -1;
        return;
    }
    if (g->fin_t_ns == 0 || finished < g->fin_prev) {
        /* the first read, or the engine restarted */
        g->fin_excess = g->fin_min_cur = g->fin_min_prev = 0;
        g->fin_since_ns = g->fin_bucket_ns = now;
        g->others_ns = 0;
    } else {
        g->fin_excess += finished - g->fin_prev - (double)(uint32_t)(ended - g->ended_prev);
        if (now - g->fin_bucket_ns >= GAUGELAG_ALONE_S * LG_NS_PER_S) {
            g->fin_min_prev = g->fin_min_cur;
            g->fin_min_cur = g->fin_excess;
            g->fin_bucket_ns = now;
        }
        g->fin_min_cur = LG_MIN(g->fin_min_cur, g->fin_excess);
        if (g->fin_excess - LG_MIN(g->fin_min_cur, g->fin_min_prev)
            >= GAUGELAG_OTHERS_MIN + (double)inflight) {
            g->others_ns = now;
        }
    }
    g->fin_prev = finished;
    g->ended_prev = ended;
    g->fin_t_ns = now;
    if (now - LG_MAX(g->fin_since_ns, g->others_ns) >= GAUGELAG_ALONE_S * LG_NS_PER_S) {
        if (e->others != 0 && e->capacity_confirmed == 0) {
            /* the most seen running so far may count ended requests its
             * gauges held longer than two steps: read it again from here
             * (a count a queue confirmed is blended at every queue) */
            e->capacity = 0;
            e->run_max = 0;
        }
        e->others = 0;
    } else {
        e->others = g->others_ns != 0 ? 1 : -1; /* seen lately; or not long enough read */
    }
}

void
lg_gaugelag_learn(struct lg_gaugelag *g, struct lg_backend_engine *e, const struct lg_backend *b,
                  double excess, uint64_t sent_ns, uint64_t now)
{
    uint64_t end;

    if (g->lag_t_ns != 0) {
        e->gauge_lag_ms *= lg_est_decay(now - g->lag_t_ns, GAUGELAG_HALF_LIFE_S);
    }
    g->lag_t_ns = now;
    if (e->others != 0 || excess < 1) {
        return;
    }
    end = lg_backend_gone_nth(b, (unsigned)LG_MIN(excess, LG_BACKEND_GONE_SLOTS + 1.0));
    if (end != 0) {
        double ms = end < sent_ns ? (double)(sent_ns - end) / 1e6 : 0;

        if (ms <= GAUGELAG_MAX_MS) {
            e->gauge_lag_ms = LG_MAX(e->gauge_lag_ms, ms);
        }
    }
}
