/*
 * priors.c: each model's prior (priors.h): the medians of its backends' own
 * estimates (TTFT fit, gap between tokens, hold time, slots seen with a
 * queue, prefill per ms of step), recomputed by the fleet's health thread
 * twice a second. A backend's estimates lean back to it as their samples
 * age, and a new backend starts from it.
 *
 * Owns nothing: reads the backends' published estimates, writes each
 * route's prior (lg_route_publish_prior()).
 */
#include "fleet/priors.h"

#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/estimate.h"
#include "fleet/health_types.h"

/* A backend's lateness counts toward the fleet's while its last first token
 * is this recent. */
#define PRIORS_LATE_RECENT_NS (5 * LG_NS_PER_S)

static double
priors_median(double *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        double x = v[i];
        size_t j = i;

        while (j > 0 && v[j - 1] > x) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The prior of each model: medians of its backends' own estimates. A
 * backend's prefill counts once its own samples outweigh the prior, as ms
 * per KiB per ms of its decode step (the speed-free part: a slow replica's
 * prior is this times its own step). */
void
lg_priors_update(const struct lg_health_fleet *f, uint64_t now)
{
    for (size_t m = 0; m < f->nmodels; m++) {
        struct lg_model_route *r = &f->models[m];
        struct lg_est_prior p;
        double fixed[64], slope[64], itl[64], hold[64], slots[64], prefill[64];
        double late = -1;
        size_t nf = 0, ni = 0, nh = 0, ns = 0, np = 0, nl = 0;

        lg_route_read_prior(r, &p);
        for (size_t i = 0; i < r->n && i < 64; i++) {
            struct lg_backend_est est;
            struct lg_backend_engine eng;
            struct lg_est_value v;
            double itl_ms;

            lg_backend_read_engine(r->backends[i], &eng);
            if (lg_backend_engine_slots(&eng, &slots[ns])) {
                ns++;
            }
            lg_backend_read_est(r->backends[i], &est);
            lg_est_ttft_read(&est.ttft, now, &p, &v);
            if (est.late.t_ns != 0 && now < est.late.t_ns + PRIORS_LATE_RECENT_NS) {
                /* first tokens there lately: the least lateness among them */
                double l = lg_est_late_read(&est.late, now);

                late = nl++ == 0 ? l : LG_MIN(late, l);
            }
            if (v.samples >= 1) {
                fixed[nf] = v.fixed_ms / v.peak;
                slope[nf++] = v.ms_per_kib / v.peak;
            }
            itl_ms = lg_est_mean_read(&est.itl, now, p.itl_ms, LG_EST_MEAN_HALF_LIFE_S);
            if (lg_est_mean_weight(&est.itl, now, LG_EST_MEAN_HALF_LIFE_S) >= 1) {
                itl[ni++] = itl_ms;
            }
            if (lg_est_mean_weight(&est.hold, now, LG_EST_MEAN_HALF_LIFE_S) >= 1) {
                hold[nh++] = lg_est_mean_read(&est.hold, now, p.hold_ms, LG_EST_MEAN_HALF_LIFE_S);
            }
            if (lg_est_line_weight(&est.prefill, now, LG_EST_MEAN_HALF_LIFE_S)
                >= LG_EST_MEAN_PRIOR_WEIGHT) {
                double step = lg_backend_step_ms(r->backends[i], now, itl_ms);
                double per_kib = lg_est_line_slope(&est.prefill);

                if (step > 0 && per_kib > 0) {
                    prefill[np++] = per_kib / step;
                }
            }
        }
        if (nf > 0) {
            p.fixed_ms = priors_median(fixed, nf);
            p.ms_per_kib = priors_median(slope, nf);
        }
        if (ni > 0) {
            p.itl_ms = priors_median(itl, ni);
        }
        if (nh > 0) {
            p.hold_ms = priors_median(hold, nh);
        }
        if (ns > 0) {
            p.slots = priors_median(slots, ns);
        }
        if (np > 0) {
            p.prefill_per_step = priors_median(prefill, np);
        }
        /* every replica with first tokens lately late: the fleet is slower
         * than learnt, the replicas without any too */
        p.late = nl >= 2 ? late : 0;
        lg_route_publish_prior(r, &p);
    }
}
