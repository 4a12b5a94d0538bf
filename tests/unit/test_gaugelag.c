/*
 * test_gaugelag.c: from an engine's scrapes, whether anyone else is served
 * there (its finished count against ours) and how long its gauges hold a
 * request of ours after its end, on a backend whose ends are set here.
 */
#include <math.h>
#include <string.h>

#include "base/config_types.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/gaugelag.h"
#include "lg_test.h"

#define MS(x) ((uint64_t)(x)*LG_NS_PER_MS)

static struct lg_backend_conf conf = { .name = "r1",
                                       .url = "http://127.0.0.1:9001",
                                       .host = "127.0.0.1",
                                       .host_header = "127.0.0.1:9001",
                                       .port = 9001 };

/* n requests of ours on b that end at the given times (ms after t0). */
static void
ends(struct lg_backend *b, uint64_t t0, const unsigned *at_ms, size_t n)
{
    lg_backend_inflight_add(b, (int)n);
    for (size_t i = 0; i < n; i++) {
        lg_backend_inflight_end(b, t0 + MS(at_ms[i]));
    }
}

/* Others are unknown until read for 5 s; none while its finishes match ours. */
static int
test_others(void)
{
    struct lg_backend *b = lg_backend_new(&conf, 1);
    struct lg_backend_engine e = { .others = -1, .capacity = 7, .run_max = 7 };
    struct lg_gaugelag g;
    uint64_t t0 = MS(1000000);
    unsigned at[3] = { 100, 200, 300 };

    memset(&g, 0, sizeof(g));
    lg_gaugelag_fold_finished(&g, &e, b, 40, 0, t0); /* the first read */
    LG_CHECK(e.others == -1);
    ends(b, t0, at, 3);
    lg_gaugelag_fold_finished(&g, &e, b, 43, 0, t0 + MS(2500)); /* its 3 were ours */
    LG_CHECK(e.others == -1 && e.capacity == 7);
    lg_gaugelag_fold_finished(&g, &e, b, 43, 0, t0 + MS(5000)); /* alone for 5 s */
    LG_CHECK(e.others == 0);
    /* its capacity, never confirmed by a queue, may hold ended requests: read again */
    LG_CHECK(e.capacity == 0 && e.run_max == 0);
    /* five finishes none of ours explains (more than 3 + our 1 in flight): others' */
    lg_gaugelag_fold_finished(&g, &e, b, 48, 1, t0 + MS(5250));
    LG_CHECK(e.others == 1);
    /* no finished count: unknown again */
    lg_gaugelag_fold_finished(&g, &e, b, -1, 0, t0 + MS(5500));
    LG_CHECK(e.others == -1);
    lg_backend_unref(b);
    return 0;
}

/* Alone there, the gauges' excess over ours is the lag of our latest ends. */
static int
test_lag(void)
{
    struct lg_backend *b = lg_backend_new(&conf, 1);
    struct lg_backend_engine e = { .others = 0 };
    struct lg_gaugelag g;
    uint64_t t0 = MS(1000000), sent = t0 + MS(1000);
    unsigned at[3] = { 200, 600, 900 };

    memset(&g, 0, sizeof(g));
    ends(b, t0, at, 3);
    /* two more than ours in its gauges: the 2nd latest end, 400 ms before the scrape */
    lg_gaugelag_learn(&g, &e, b, 2, sent, sent + MS(5));
    LG_CHECK(fabs(e.gauge_lag_ms - 400) < 1e-9);
    /* a smaller excess keeps the maximum; it decays by half a minute later */
    lg_gaugelag_learn(&g, &e, b, 1, sent, sent + MS(10));
    LG_CHECK(e.gauge_lag_ms > 399.9 && e.gauge_lag_ms <= 400);
    lg_gaugelag_learn(&g, &e, b, 0, sent, sent + MS(10) + MS(60000));
    LG_CHECK(fabs(e.gauge_lag_ms - 200) < 0.05); /* a half-life of 60 s */
    /* with others there, an excess is theirs: nothing learnt */
    e.others = 1;
    lg_gaugelag_learn(&g, &e, b, 3, sent, sent + MS(60020));
    LG_CHECK(e.gauge_lag_ms < 200);
    /* what the gauges may still count of ours: two steps before the scrape,
     * or 1.25 x the lag where alone */
    e.gauge_lag_ms = 400;
    LG_CHECK(lg_gaugelag_counted(&e, b, sent, 60, false) == 1); /* ended at 900 */
    LG_CHECK(lg_gaugelag_counted(&e, b, sent, 60, true) == 2);  /* 500 ms back: 600, 900 */
    lg_backend_unref(b);
    return 0;
}

LG_TEST_MAIN(test_others, test_lag)
