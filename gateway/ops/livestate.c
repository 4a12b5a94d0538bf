/*
 * livestate.c: a backend's live state for display (see livestate.h).
 * Owns nothing; reads published state only (atomics, sequence-counted copies).
 */
#include "ops/livestate.h"

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_view.h"
#include "fleet/fleet.h"

const char *const lg_live_state_names[LG_LIVE_NSTATES] = {
    [LG_LIVE_UP] = "up",           [LG_LIVE_DOWN] = "down",
    [LG_LIVE_EJECTED] = "ejected", [LG_LIVE_HALF_OPEN] = "half_open",
    [LG_LIVE_HELD] = "held",       [LG_LIVE_DRAINING] = "draining",
};

const char *
lg_live_flavor_name(int flavor)
{
    static const char *const names[] = { "unknown", "vllm", "sglang", "tgi", "llamacpp", "none" };

    return flavor >= 0 && flavor < (int)LG_ARRAY_SIZE(names) ? names[flavor] : "unknown";
}

void
lg_live_read(const struct lg_fleet *f, const struct lg_backend *b, uint64_t now_ns,
             struct lg_live *out)
{
    const struct lg_health_conf *hc = &f->conf->health;
    const struct lg_model_route *route =
        lg_backend_conf(b)->nmodels > 0 ? lg_fleet_find_model(f, lg_backend_conf(b)->models[0])
                                        : NULL;
    struct lg_est_prior prior = { .fixed_ms = LG_EST_DEFAULT_FIXED_MS,
                                  .ms_per_kib = LG_EST_DEFAULT_MS_PER_KIB,
                                  .itl_ms = LG_EST_DEFAULT_ITL_MS,
                                  .hold_ms = LG_EST_DEFAULT_HOLD_MS };
    struct lg_backend_engine eng;
    int health = __atomic_load_n(&b->health, __ATOMIC_RELAXED);
    uint64_t until = __atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED);

    if (route != NULL) {
        lg_route_read_prior(route, &prior);
    }
    lg_backend_view_fill(b, now_ns, &prior, hc->scrape_interval_ms * LG_NS_PER_MS,
                         hc->slow_start_ms * LG_NS_PER_MS, &out->view, &out->model);
    lg_backend_read_engine(b, &eng);
    out->engine_flavor = eng.flavor;
    out->slots_declared = eng.slots_declared;
    out->slots_confirmed = eng.capacity_confirmed;
    out->engine_others = eng.others;
    out->gauge_lag_ms = eng.gauge_lag_ms;
    out->ttft_1kib_ms = out->view.ttft_fixed_ms + out->view.ttft_ms_per_kib;
    if (health == LG_BACKEND_DRAINING) {
        out->state = LG_LIVE_DRAINING;
    } else if (health == LG_BACKEND_DOWN) {
        out->state = LG_LIVE_DOWN;
    } else if (until != 0) {
        out->state = now_ns < until ? LG_LIVE_EJECTED : LG_LIVE_HALF_OPEN;
    } else if (__atomic_load_n(&b->retry_after_until_ns, __ATOMIC_RELAXED) > now_ns) {
        out->state = LG_LIVE_HELD;
    } else {
        out->state = LG_LIVE_UP;
    }
}
