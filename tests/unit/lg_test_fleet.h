/*
 * lg_test_fleet.h: a fleet from a config text, for unit tests of what lives
 * on backends (live state, routing, peers). Returns 0 (LG_CHECK's failure: 1).
 */
#ifndef LG_TEST_FLEET_H
#define LG_TEST_FLEET_H

#include <string.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/estimate.h"
#include "fleet/fleet.h"
#include "lg_test.h"
#include "route/router.h"

static inline int
lg_test_fleet_load(const char *text, struct lg_config **c, struct lg_fleet **f)
{
    struct lg_config_errors errs;

    memset(&errs, 0, sizeof(errs));
    LG_CHECK(lg_config_load_buffer(text, strlen(text), "t.json", c, &errs) == LG_OK);
    lg_config_errors_free(&errs);
    LG_CHECK(lg_router_fleet_new(*c, 1, NULL, f) == LG_OK);
    return 0;
}

static inline int
lg_test_fleet_free(struct lg_config *c, struct lg_fleet *f)
{
    lg_fleet_unref(f);
    lg_config_unref(c);
    return 0;
}

/* lg_backend_engine_model_ms() with the steps in a list: slots, step, step
 * per sequence, prefill per token, per prefilling step; unchunked. */
static inline double
engine_model_ms(const struct lg_backend *b, uint64_t now_ns, unsigned slots, double step_ms,
                double step_per_seq, double prefill_ms, double prefill_fixed_ms, unsigned *joined)
{
    struct lg_est_steps how = { .slots = slots,
                                .step_ms = step_ms,
                                .step_per_seq = step_per_seq,
                                .prefill_ms = prefill_ms,
                                .prefill_fixed_ms = prefill_fixed_ms };

    return lg_backend_engine_model_ms(b, now_ns, &how, joined);
}

#endif /* LG_TEST_FLEET_H */
