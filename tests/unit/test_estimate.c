/*
 * test_estimate.c: the TTFT fit, the Peak-EWMA factor, decayed means, and
 * the load and queueing formulas, on synthetic replicas whose true TTFT is
 * a known line.
 */
#include <math.h>

#include "fleet/estimate.h"
#include "lg_test.h"

/* lg_est_engine_run() with its inputs in one list: the batch (running
 * sequences' tokens left, the line) and the steps (slots, step, step per
 * sequence, prefill per token, per prefilling step, the step in progress's
 * remainder and start). */
#define ENGINE_RUN(left, nleft, queue, nqueue, slots, step, per_seq, prefill, fixed, resid, begun, \
                   joined)                                                                         \
    lg_est_engine_run(&(struct lg_est_batch){ (left), (nleft), (queue), (nqueue) },                \
                      &(struct lg_est_steps){ (slots), (step), (per_seq), (prefill), (fixed),      \
                                              (resid), (begun), 0 },                               \
                      (joined))
/* ... with chunked prefill: a step carries at most `chunk` tokens */
#define ENGINE_RUN_CHUNKED(left, nleft, queue, nqueue, slots, step, prefill, fixed, resid, begun, \
                           chunk, joined)                                                         \
    lg_est_engine_run(&(struct lg_est_batch){ (left), (nleft), (queue), (nqueue) },               \
                      &(struct lg_est_steps){ (slots), (step), 0, (prefill), (fixed), (resid),    \
                                              (begun), (chunk) },                                 \
                      (joined))

#define S(x) ((uint64_t)((x)*1e9))

static const struct lg_est_prior prior = {
    .fixed_ms = 40, .ms_per_kib = 20, .itl_ms = 15, .hold_ms = 500
};

static bool
near(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fabs(want);
}

/* A replica with TTFT = fixed + slope * kib, sampled every 100 ms from t. */
static uint64_t
feed(struct lg_est_ttft *e, uint64_t t, int n, double kib, double fixed, double slope)
{
    for (int i = 0; i < n; i++) {
        t += S(0.1);
        lg_est_ttft_add(e, t, &prior, kib, fixed + slope * kib);
    }
    return t;
}

static int
test_fit_recovers_line(void)
{
    struct lg_est_ttft e;
    struct lg_est_value v;
    uint64_t t = S(1);

    lg_est_ttft_init(&e);
    for (int i = 0; i < 200; i++) {
        double kib = (i % 10) * 3.0;

        t += S(0.05);
        lg_est_ttft_add(&e, t, &prior, kib, 30 + 12 * kib);
    }
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(near(v.fixed_ms, 30, 0.05));
    LG_CHECK(near(v.ms_per_kib, 12, 0.05));
    LG_CHECK(v.peak < 1.05);
    LG_CHECK(v.samples > 50);
    return 0;
}

/*
 * Two healthy replicas of the same speed; one also serves a few very long
 * prompts. Its prediction for short requests must stay that of the other,
 * and its prediction for long ones must match what they really take.
 */
static int
test_long_prompt_does_not_look_slow(void)
{
    struct lg_est_ttft a, b;
    struct lg_est_value va, vb;
    uint64_t ta = S(1), tb = S(1);

    lg_est_ttft_init(&a);
    lg_est_ttft_init(&b);
    ta = feed(&a, ta, 50, 0.5, 40, 20);
    tb = feed(&b, tb, 50, 0.5, 40, 20);
    for (int i = 0; i < 3; i++) {
        ta = feed(&a, ta, 1, 64, 40, 20); /* 64 KiB prompt: 1320 ms, healthy */
        ta = feed(&a, ta, 5, 0.5, 40, 20);
        tb = feed(&b, tb, 6, 0.5, 40, 20);
    }
    lg_est_ttft_read(&a, ta, &prior, &va);
    lg_est_ttft_read(&b, tb, &prior, &vb);
    LG_CHECK(near(lg_est_ttft_predict(&va, 0.5), lg_est_ttft_predict(&vb, 0.5), 0.15));
    LG_CHECK(near(lg_est_ttft_predict(&va, 0.5), 50, 0.15));
    LG_CHECK(near(lg_est_ttft_predict(&va, 64), 1320, 0.2));
    LG_CHECK(va.peak < 1.2);

    /* the very first long prompt, before any slope was learnt, either */
    lg_est_ttft_init(&a);
    ta = feed(&a, S(1), 50, 0.5, 40, 50); /* steeper than the prior's 20 ms/KiB */
    ta = feed(&a, ta, 1, 64, 40, 50);     /* 3240 ms vs ~1300 predicted */
    lg_est_ttft_read(&a, ta, &prior, &va);
    LG_CHECK(va.peak < 1.1);
    LG_CHECK(near(lg_est_ttft_predict(&va, 0.5), 65, 0.2));
    return 0;
}

/* A replica 4x slower on short prompts is assumed 4x slower on long ones too. */
static int
test_slow_replica_slope_scales(void)
{
    struct lg_est_ttft e;
    struct lg_est_value v;
    uint64_t t;

    lg_est_ttft_init(&e);
    t = feed(&e, S(1), 100, 0.5, 160, 80);
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(near(lg_est_ttft_predict(&v, 0.5), 200, 0.1));
    LG_CHECK(lg_est_ttft_predict(&v, 32) > 3 * (40 + 20 * 32));
    return 0;
}

/* The decay against libm: dt from nanoseconds to many half-lives. */
static int
test_decay_function(void)
{
    const double halves[] = { 0.001, 0.5, 10, 3600 };

    LG_CHECK(lg_est_decay(0, 10) == 1.0);
    LG_CHECK(lg_est_decay(S(1), 0) == 0.0);
    for (size_t h = 0; h < sizeof(halves) / sizeof(halves[0]); h++) {
        for (uint64_t dt = 1; dt < UINT64_C(1) << 62; dt = dt * 3 + dt / 7 + 1) {
            double want = exp(-(double)dt / 1e9 * M_LN2 / halves[h]);
            double got = lg_est_decay(dt, halves[h]);

            if (want < 1e-300) {
                LG_CHECK(got < 1e-290);
            } else if (fabs(got - want) > 1e-9 * want) {
                fprintf(stderr, "decay(%llu ns, %g s): %.17g, libm %.17g\n",
                        (unsigned long long)dt, halves[h], got, want);
                LG_CHECK(false);
            }
        }
    }
    /* two half-lives leave a quarter */
    LG_CHECK(fabs(lg_est_decay(S(20), 10) - 0.25) < 1e-9);
    return 0;
}

/* Without samples, a slow replica's estimate returns to the prior. */
static int
test_decay_toward_prior(void)
{
    struct lg_est_ttft e;
    struct lg_est_value v;
    uint64_t t;

    lg_est_ttft_init(&e);
    lg_est_ttft_read(&e, S(5), &prior, &v);
    LG_CHECK(near(v.fixed_ms, prior.fixed_ms, 0.01)); /* nothing known: the prior */
    LG_CHECK(near(v.ms_per_kib, prior.ms_per_kib, 0.01));

    t = feed(&e, S(1), 50, 1, 200, 100); /* 5x slow */
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(lg_est_ttft_predict(&v, 1) > 250);
    lg_est_ttft_read(&e, t + S(10), &prior, &v);
    LG_CHECK(lg_est_ttft_predict(&v, 1) > 200); /* one half-life: still clearly slow */
    lg_est_ttft_read(&e, t + S(90), &prior, &v);
    LG_CHECK(lg_est_ttft_predict(&v, 1) < 1.5 * (40 + 20));
    LG_CHECK(v.samples < 0.2);
    return 0;
}

/* Peak-EWMA: a sudden slowdown shows after one sample; it fades without samples. */
static int
test_peak_reaction(void)
{
    struct lg_est_ttft e;
    struct lg_est_value v;
    uint64_t t;
    double base;

    lg_est_ttft_init(&e);
    t = feed(&e, S(1), 200, 0.5, 40, 20);
    lg_est_ttft_read(&e, t, &prior, &v);
    base = lg_est_ttft_predict(&v, 0.5);
    LG_CHECK(near(base, 50, 0.05));

    t = feed(&e, t, 1, 0.5, 200, 100); /* one 5x sample */
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(lg_est_ttft_predict(&v, 0.5) > 1.8 * base);
    LG_CHECK(lg_est_ttft_predict(&v, 0.5) < 2.5 * base); /* one sample is not proof */
    t = feed(&e, t, 3, 0.5, 200, 100);
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(lg_est_ttft_predict(&v, 0.5) > 2.8 * base); /* a few are */

    /* the replica recovers: fast samples bring it down within seconds */
    t = feed(&e, t, 30, 0.5, 40, 20);
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(lg_est_ttft_predict(&v, 0.5) < 1.5 * base);

    /* a single outlier with no samples after it fades on its own */
    t = feed(&e, t, 1, 0.5, 200, 100);
    lg_est_ttft_read(&e, t + S(20), &prior, &v);
    LG_CHECK(v.peak < 1.2);
    return 0;
}

static int
test_mean(void)
{
    struct lg_est_mean m;
    uint64_t t = S(1);

    lg_est_mean_init(&m);
    LG_CHECK(lg_est_mean_read(&m, t, 15, LG_EST_MEAN_HALF_LIFE_S) == 15);
    LG_CHECK(lg_est_mean_own(&m) == -1); /* no samples */
    for (int i = 0; i < 50; i++) {
        t += S(0.1);
        lg_est_mean_add(&m, t, 60, LG_EST_MEAN_HALF_LIFE_S);
    }
    LG_CHECK(near(lg_est_mean_read(&m, t, 15, LG_EST_MEAN_HALF_LIFE_S), 60,
                  0.1)); /* the prior weighs 4 */
    LG_CHECK(lg_est_mean_weight(&m, t, LG_EST_MEAN_HALF_LIFE_S) > 20);
    LG_CHECK(near(lg_est_mean_read(&m, t + S(60), 15, LG_EST_MEAN_HALF_LIFE_S), 15, 0.05));
    /* the samples' own mean does not lean back: a minute later it is 60 */
    LG_CHECK(near(lg_est_mean_own(&m), 60, 1e-9));
    /* a recent sample weighs more than the old ones */
    lg_est_mean_add(&m, t + S(60), 20, LG_EST_MEAN_HALF_LIFE_S);
    LG_CHECK(lg_est_mean_own(&m) < 40);
    return 0;
}

static int
test_foreign_load(void)
{
    const uint64_t iv = 250 * LG_NS_PER_MS;

    /* 10 on the engine, 4 of them ours: 6 foreign while fresh */
    LG_CHECK(lg_est_foreign_load(4, 6, 4, 100 * LG_NS_PER_MS, iv) == 6);
    LG_CHECK(lg_est_foreign_load(4, 6, 4, 2 * iv, iv) == 6);
    LG_CHECK(near(lg_est_foreign_load(4, 6, 4, 3 * iv, iv), 3, 1e-9)); /* fading */
    LG_CHECK(lg_est_foreign_load(4, 6, 4, 4 * iv, iv) == 0);           /* stale: fail open */
    LG_CHECK(lg_est_foreign_load(4, 6, 4, UINT64_MAX, iv) == 0);       /* never scraped */
    LG_CHECK(lg_est_foreign_load(-1, -1, 0, 0, iv) == 0);              /* unknown */
    LG_CHECK(lg_est_foreign_load(0, 3, 5, 0, iv) == 0); /* ours not there yet: not negative */
    LG_CHECK(lg_est_foreign_load(4, 6, 0, 0, 0) == 0);  /* scraping off */
    return 0;
}

static int
test_queue_wait(void)
{
    LG_CHECK(lg_est_queue_wait_ms(0, 8, 900, -1) == 0);
    LG_CHECK(lg_est_queue_wait_ms(6.5, 8, 900, -1) == 0);
    LG_CHECK(lg_est_queue_wait_ms(7, 8, 900, -1) == 0); /* the 8th slot is free */
    /* full, ages unknown or spread: the first departure, then one per hold/8 */
    LG_CHECK(near(lg_est_queue_wait_ms(8, 8, 900, -1), 100, 1e-9));
    LG_CHECK(near(lg_est_queue_wait_ms(8, 8, 900, 450), 100, 1e-9));
    LG_CHECK(near(lg_est_queue_wait_ms(10, 8, 900, -1), 100 + 2 * 112.5, 1e-9));
    /* a batch refilled 50 ms ago: its first departure is far off */
    LG_CHECK(near(lg_est_queue_wait_ms(8, 8, 900, 50), 500, 1e-9));
    LG_CHECK(near(lg_est_queue_wait_ms(7.5, 8, 900, -1), 50, 1e-9));         /* half a request */
    LG_CHECK(near(lg_est_queue_wait_ms(3, 0, 100, -1), 50 + 2 * 100, 1e-9)); /* one slot */
    return 0;
}

/* One request stuck behind something unseen does not make a replica look slow for long. */
static int
test_outlier_is_bounded(void)
{
    struct lg_est_ttft e;
    struct lg_est_value v;
    uint64_t t;

    lg_est_ttft_init(&e);
    t = feed(&e, S(1), 40, 0.5, 40, 20); /* 50 ms */
    t = feed(&e, t, 1, 0.5, 1500, 0);    /* 30x: admitted with a long prefill */
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(lg_est_ttft_predict(&v, 0.5) < 2.5 * 50);
    lg_est_ttft_read(&e, t + S(10), &prior, &v); /* the peak fades, the fit barely moved */
    LG_CHECK(lg_est_ttft_predict(&v, 0.5) < 1.4 * 50);
    return 0;
}

/*
 * A replica that was 5x slow for a while recovers: its first fast sample
 * halves the weight of the slow ones and drops the peak, so the second
 * prediction is already closer to the truth than half-way.
 */
static double
vp_before(const struct lg_est_ttft *e, uint64_t t)
{
    struct lg_est_value v;

    lg_est_ttft_read(e, t, &prior, &v);
    return v.fixed_ms + v.ms_per_kib;
}

static int
test_recovery_forgets(void)
{
    struct lg_est_ttft e, plain;
    struct lg_est_value v;
    uint64_t t = S(1);

    lg_est_ttft_init(&e);
    t = feed(&e, t, 40, 1.0, 200, 100); /* 300 ms at 1 KiB: five times 60 */
    plain = e;
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(v.fixed_ms + v.ms_per_kib > 250);
    t += S(0.1);
    lg_est_ttft_add(&e, t, &prior, 1.0, 60);
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(v.peak == 1.0);
    /* the slow samples now weigh half (and a little decay) */
    LG_CHECK(e.w < 0.5 * plain.w + 1.0 + 1e-9 && e.w > 0.45 * plain.w + 1.0);
    /* four more: the slow past has faded to a 32nd, the prediction to
     * under half of what it was (a plain weighted mean would still be near
     * 270 ms: 40 slow samples against 5 fast ones) */
    for (int i = 0; i < 4; i++) {
        t += S(0.1);
        lg_est_ttft_add(&e, t, &prior, 1.0, 60);
    }
    lg_est_ttft_read(&e, t, &prior, &v);
    LG_CHECK(v.fixed_ms + v.ms_per_kib < 0.5 * vp_before(&plain, t));
    /* a sample near the fit forgets nothing */
    lg_est_ttft_init(&e);
    t = feed(&e, t, 40, 1.0, 200, 100);
    plain = e;
    t += S(0.1);
    lg_est_ttft_add(&e, t, &prior, 1.0, 250);
    LG_CHECK(e.w > plain.w);
    return 0;
}

/* The engine model against hand-run schedules. */
static int
test_engine_run(void)
{
    uint32_t left[4] = { 5, 3, 9, 2 };
    struct lg_est_queued q[3] = { { 100, 4, 0 }, { 300, 1, 0 }, { 50, 10, 0 } };
    unsigned joined = 99;

    /* a free slot and nobody in line: the rest of this step, then one */
    LG_CHECK(near(ENGINE_RUN(left, 4, NULL, 0, 8, 10, 0, 0.05, 0, 4, -1, NULL), 14, 1e-9));
    /* a fixed 20 ms for a step that prefills: the new one's own step holds it */
    LG_CHECK(near(ENGINE_RUN(left, 4, NULL, 0, 8, 10, 0, 0.05, 20, 4, -1, NULL), 34, 1e-9));
    /* full (4 of 4) with two in line: their steps hold it too, once each
     * (below: 10 + 15 + 25 + 10 without it) */
    LG_CHECK(near(ENGINE_RUN(left, 4, q, 2, 4, 10, 0, 0.05, 20, 0, -1, NULL),
                  10 + (10 + 5 + 20) + (10 + 15 + 20) + 10 + 20, 1e-9));
    /* a step that grows 2 ms a sequence: the new one's step runs five, one
     * more than the 10 ms step now */
    LG_CHECK(near(ENGINE_RUN(left, 4, NULL, 0, 8, 10, 2, 0.05, 0, 4, -1, NULL), 16, 1e-9));
    /* and shrinks: two running, both done after the next step (10 ms, two
     * sequences), the new one's step runs alone: 8 ms */
    {
        uint32_t two[2] = { 2, 2 };

        LG_CHECK(near(ENGINE_RUN(two, 2, NULL, 0, 2, 10, 2, 0.05, 0, 0, -1, NULL), 18, 1e-9));
        /* never under a quarter of the step */
        LG_CHECK(near(ENGINE_RUN(two, 2, NULL, 0, 2, 10, 20, 0.05, 0, 0, -1, NULL), 12.5, 1e-9));
    }
    /* free slots: the line is admitted with the new one, its prefill in that step */
    LG_CHECK(near(ENGINE_RUN(left, 2, q, 3, 8, 10, 0, 0.05, 0, 0, -1, &joined), 10 + 0.05 * 450,
                  1e-9));
    LG_CHECK(joined == 3); /* all three wait for the new one's prefill too */
    /* full (4 of 4): the first slot frees after the step in progress and
     * one more (2 tokens left) */
    LG_CHECK(near(ENGINE_RUN(left, 4, NULL, 0, 4, 10, 0, 0.05, 0, 0, -1, NULL), 10 + 10, 1e-9));
    /*
     * full, two in line: the first (prefill 100, 4 tokens) takes that slot;
     * a step later the next (3 left) frees one for the second (300 tokens,
     * 1 token: it leaves after its own step); the slot it frees is the new
     * one's. Steps: one plain, one with 100 prefilled, one with 300, and
     * the new one's own.
     */
    LG_CHECK(near(ENGINE_RUN(left, 4, q, 2, 4, 10, 0, 0.05, 0, 0, -1, &joined),
                  10 + (10 + 5) + (10 + 15) + 10, 1e-9));
    LG_CHECK(joined == 0); /* the line went in earlier steps */
    /* more running than slots (a capacity guessed low): still ends */
    LG_CHECK(near(ENGINE_RUN(left, 4, NULL, 0, 2, 10, 0, 0, 0, 0, -1, NULL), 4 * 10 + 10, 1e-9));
    {
        /* a sequence whose last token comes with the step in progress
         * leaves a slot free after it */
        uint32_t done[2] = { 1, 7 };
        struct lg_est_queued head = { 200, 3, 12 };

        LG_CHECK(near(ENGINE_RUN(done, 2, NULL, 0, 2, 10, 0, 0, 0, 5, -1, NULL), 5 + 10, 1e-9));
        /* the head of the line came 12 ms ago with a slot free: the step in
         * progress is its prefill's (half a step to start, a step and 10 ms
         * of prefill: 13 ms left); the new one goes with the next */
        LG_CHECK(near(ENGINE_RUN(done + 1, 1, &head, 1, 4, 10, 0, 0.05, 0, 5, -1, &joined),
                      13 + 10, 1e-9));
        LG_CHECK(joined == 0); /* its prefill is under way: not held up by the new one */
        /* it came 2 ms ago: it goes with the new one into the next step */
        head.age_ms = 2;
        LG_CHECK(near(ENGINE_RUN(done + 1, 1, &head, 1, 4, 10, 0, 0.05, 0, 5, -1, &joined),
                      5 + 10 + 10, 1e-9));
        LG_CHECK(joined == 1);
        /* it came 40 ms ago and has no first token yet, 15 ms after it was
         * due: let in some time in the last 25 ms (a slot freed late), it
         * has half of them left, not none */
        head.age_ms = 40;
        LG_CHECK(near(ENGINE_RUN(done + 1, 1, &head, 1, 4, 10, 0, 0.05, 0, 5, -1, NULL), 12.5 + 10,
                      1e-9));
        {
            /* the step in progress prefills a long prompt (8000 tokens, 400
             * ms; begun 195 ms ago); a short one that came 50 ms ago, during
             * it, waits for the next step with the new one, whose prefill
             * then holds it up too */
            struct lg_est_queued two[2] = { { 8000, 3, 200 }, { 100, 3, 50 } };

            LG_CHECK(near(ENGINE_RUN(done + 1, 1, two, 2, 4, 10, 0, 0.05, 0, 5, -1, &joined),
                          (415 - 200) + 10 + 0.05 * 100, 1e-9));
            LG_CHECK(joined == 1);
            /* it came 198 ms ago, before that step began: in it */
            two[1].age_ms = 198;
            LG_CHECK(near(ENGINE_RUN(done + 1, 1, two, 2, 4, 10, 0, 0.05, 0, 5, -1, &joined),
                          (415 - 200) + 10, 1e-9));
            LG_CHECK(joined == 0);
        }
        /*
         * Where the step in progress began is known (begun_ms): 4 ms ago, a
         * plain step has 6 ms left. The head sent 12 ms ago, before it began,
         * is in it (10 + 10 ms of prefill: 16 left); sent 2 ms ago, during
         * it, it goes with the new one into the next.
         */
        LG_CHECK(near(ENGINE_RUN(done + 1, 1, NULL, 0, 4, 10, 0, 0.05, 0, 5, 4, NULL), 6 + 10,
                      1e-9));
        head.age_ms = 12;
        LG_CHECK(near(ENGINE_RUN(done + 1, 1, &head, 1, 4, 10, 0, 0.05, 0, 5, 4, &joined),
                      16 + 10, 1e-9));
        LG_CHECK(joined == 0);
        head.age_ms = 2;
        LG_CHECK(near(ENGINE_RUN(done + 1, 1, &head, 1, 4, 10, 0, 0.05, 0, 5, 4, &joined),
                      6 + 10 + 10, 1e-9));
        LG_CHECK(joined == 1);
        /* no slot free when the step began: it waits whenever it came */
        {
            uint32_t full[2] = { 7, 7 };

            head.age_ms = 12;
            LG_CHECK(near(ENGINE_RUN(full, 2, &head, 1, 2, 10, 0, 0.05, 0, 5, 4, &joined),
                          6 + 6 * 10 + 10 + 10, 1e-9));
            LG_CHECK(joined == 1); /* both leave after 6 more steps; then it and the new one */
        }
        /* begun 30 ms ago, longer than the step and the prefill known in it
         * (20 ms): work not seen here; the guess decides (as above: 12.5) */
        head.age_ms = 40;
        LG_CHECK(near(ENGINE_RUN(done + 1, 1, &head, 1, 4, 10, 0, 0.05, 0, 5, 30, NULL),
                      12.5 + 10, 1e-9));
        /* a long prompt's prefill past due by seconds: still half its own */
        head.prompt_tokens = 8000;
        head.age_ms = 2000;
        LG_CHECK(near(ENGINE_RUN(done + 1, 1, &head, 1, 4, 10, 0, 0.05, 0, 5, -1, NULL),
                      (15 + 400) / 2.0 + 10, 1e-9));
    }
    return 0;
}

/*
 * The line's prompts under chunked prefill: the prompts a step admits run
 * on for as many steps as their tokens together need beside the sequences
 * decoding (lg_est_chunks_ms()), each a step and a prefilling step's fixed
 * part, and what comes after them waits for those steps; a chunk that
 * holds them all changes nothing.
 */
static int
test_engine_run_chunked(void)
{
    uint32_t left[4] = { 5, 3, 9, 2 };
    struct lg_est_queued q[3] = { { 100, 4, 0 }, { 300, 1, 0 }, { 50, 10, 0 } };
    unsigned joined = 99;

    /* free slots, two decoding: the line (450 tokens) goes with the new one,
     * 62 tokens a step: 8 steps, 7 more of 10 + 2 ms before its first token */
    LG_CHECK(near(ENGINE_RUN_CHUNKED(left, 2, q, 3, 8, 10, 0.05, 2, 0, -1, 64, &joined),
                  10 + 2 + 0.05 * 450 + 7 * 12, 1e-9));
    LG_CHECK(joined == 3);
    LG_CHECK(near(ENGINE_RUN_CHUNKED(left, 2, q, 3, 8, 10, 0.05, 2, 0, -1, 2048, NULL),
                  10 + 2 + 0.05 * 450, 1e-9)); /* one step holds them all */
    LG_CHECK(near(ENGINE_RUN_CHUNKED(left, 2, q, 3, 8, 10, 0.05, 2, 0, -1, 0, NULL),
                  ENGINE_RUN(left, 2, q, 3, 8, 10, 0, 0.05, 2, 0, -1, NULL), 1e-12));
    /* full (4 of 4), two in line, 50 tokens a step beside three decoding:
     * the first (100 tokens) takes 2 steps, the second (300) 6, each step
     * after the first 10 + 20 ms (unchunked: 10 + 35 + 45 + 30) */
    LG_CHECK(near(ENGINE_RUN_CHUNKED(left, 4, q, 2, 4, 10, 0.05, 20, 0, -1, 53, NULL),
                  10 + (35 + 30) + (45 + 5 * 30) + 30, 1e-9));
    {
        uint32_t one[1] = { 7 };
        struct lg_est_queued head = { 200, 3, 12 };

        /* the step in progress began 4 ms ago with the head's 200 tokens in
         * it: 100 a step beside one decoding, one step more (unchunked: 16
         * left, then the new one's 10) */
        LG_CHECK(near(ENGINE_RUN_CHUNKED(one, 1, &head, 1, 4, 10, 0.05, 0, 5, 4, 101, NULL),
                      16 + 10 + 10, 1e-9));
        /* not known when it began: the head admitted into the step in
         * progress has its further step still to run (unchunked: 13 + 10) */
        LG_CHECK(near(ENGINE_RUN_CHUNKED(one, 1, &head, 1, 4, 10, 0.05, 0, 5, -1, 101, NULL),
                      13 + 10 + 10, 1e-9));
    }
    return 0;
}

/* slope of a line read at t with prior (0, prior_slope) */
static double
line_slope(const struct lg_est_line *l, uint64_t t, double prior_slope, double *fixed)
{
    double a, b;

    lg_est_line_read(l, t, 0, prior_slope, LG_EST_MEAN_HALF_LIFE_S, &a, &b);
    if (fixed != NULL) {
        *fixed = a;
    }
    return b;
}

static int
test_line(void)
{
    struct lg_est_line s = { 0 };
    uint64_t t = S(1);
    double fixed;

    LG_CHECK(line_slope(&s, t, 12, &fixed) == 12 && fixed == 0);
    /* 30 ms per KiB through the origin, noisy: the line, no fixed part */
    for (int i = 0; i < 200; i++) {
        double x = 0.25 + (i % 8) * 0.5;

        t += S(0.01);
        lg_est_line_add(&s, t, x, 30 * x + ((i & 1) ? 3 : -3), LG_EST_MEAN_HALF_LIFE_S);
    }
    LG_CHECK(near(line_slope(&s, t, 12, &fixed), 30, 0.03) && fixed < 1);
    lg_est_line_add(&s, t, 1, NAN, LG_EST_MEAN_HALF_LIFE_S); /* not a sample */
    LG_CHECK(near(line_slope(&s, t, 12, NULL), 30, 0.03));
    LG_CHECK(near(lg_est_line_slope(&s), 30, 0.03));
    /* long unheard: back to the prior */
    LG_CHECK(near(line_slope(&s, t + S(120), 12, &fixed), 12, 0.05) && fixed < 0.5);

    /* a fixed part per prefilling step (20 ms) and 100 ms per KiB: both,
     * the prior's four pseudo-samples at the samples' mean size +- 1 KiB
     * (a spread of 4 KiB^2) pulling the slope as far as the samples' spread
     * (96 x 0.328 KiB^2) is from outweighing it, and the level at their
     * mean size (1.125 KiB) by four samples in a hundred */
    s = (struct lg_est_line){ 0 };
    for (int i = 0; i < 96; i++) {
        double x = 0.25 + (i % 8) * 0.25;

        lg_est_line_add(&s, t, x, 20 + 100 * x, LG_EST_MEAN_HALF_LIFE_S);
    }
    {
        double sxx = 96 * 0.0625 * 63 / 12, b = (sxx * 100 + 4 * 10) / (sxx + 4);
        double level = (96 * (20 + 100 * 1.125) + 4 * 10 * 1.125) / 100;

        LG_CHECK(near(line_slope(&s, t, 10, &fixed), b, 1e-9) && b > 89 && b < 90);
        LG_CHECK(near(fixed, level - b * 1.125, 1e-9));
    }
    /* a few prompts of about 1 KiB whose first tokens fall with their size
     * (noise: a slow replica's steps are 40 ms): the prior's slope, not a
     * flat line, carries a 32 KB prompt (it took 45 ms for 1.6 s) */
    s = (struct lg_est_line){ 0 };
    lg_est_line_add(&s, t, 0.9, 50, LG_EST_MEAN_HALF_LIFE_S);
    lg_est_line_add(&s, t, 1.1, 30, LG_EST_MEAN_HALF_LIFE_S);
    LG_CHECK(line_slope(&s, t, 50, &fixed) > 45);
    LG_CHECK(fixed + line_slope(&s, t, 50, NULL) * 31.25 > 1400);

    /* small prompts outweigh the prior as soon as large ones: four samples
     * of a quarter KiB at 300 ms per KiB against a prior of 10 land half
     * way at their size (the prior weighs four samples there); one size
     * tells no slope: the prior's, the fixed part taking the rest */
    s = (struct lg_est_line){ 0 };
    for (int i = 0; i < 4; i++) {
        lg_est_line_add(&s, t, 0.25, 75, LG_EST_MEAN_HALF_LIFE_S);
    }
    LG_CHECK(near(line_slope(&s, t, 10, &fixed), 10, 1e-9));
    LG_CHECK(near(fixed + 10 * 0.25, (75 + 2.5) / 2, 1e-9));
    LG_CHECK(near(lg_est_line_weight(&s, t, LG_EST_MEAN_HALF_LIFE_S), 4, 1e-12));
    /* a slope below 0 is none */
    s = (struct lg_est_line){ 0 };
    for (int i = 0; i < 50; i++) {
        lg_est_line_add(&s, t, (i & 1) ? 2 : 0.5, (i & 1) ? 10 : 40, LG_EST_MEAN_HALF_LIFE_S);
    }
    LG_CHECK(line_slope(&s, t, 10, &fixed) == 0 && fixed > 20);
    return 0;
}

/* An estimator's errors: the bias calibrates, the spread says how far off
 * it stays calibrated. */
static int
test_err(void)
{
    struct lg_est_err e = { 0 };
    struct lg_est_err_value v;
    uint64_t t = S(1);

    lg_est_err_read(&e, t, 10, &v);
    LG_CHECK(v.weight == 0 && v.bias == 0 && v.spread == 0);
    /* always twice the prediction: a bias of log 2, no spread */
    for (int i = 0; i < 40; i++) {
        lg_est_err_add(&e, t, 100, 50, 10);
    }
    lg_est_err_read(&e, t, 10, &v);
    LG_CHECK(near(v.bias, log(2) * 40 / 44, 1e-9) && v.spread < 1e-6 && near(v.weight, 40, 1e-9));
    /* half the time right, half the time 4x late: bias log 2, spread log 2 */
    e = (struct lg_est_err){ 0 };
    for (int i = 0; i < 400; i++) {
        lg_est_err_add(&e, t, (i & 1) ? 400 : 100, 100, 10);
    }
    lg_est_err_read(&e, t, 10, &v);
    LG_CHECK(near(v.spread, log(2), 1e-6) && near(v.bias, log(2) * 400 / 404, 1e-6));
    /* a stall 100x late counts as LG_EST_ERR_MAX; no first token is no sample */
    e = (struct lg_est_err){ 0 };
    lg_est_err_add(&e, t, 10000, 100, 10);
    lg_est_err_add(&e, t, 0, 100, 10);
    lg_est_err_add(&e, t, 100, -1, 10);
    lg_est_err_add(&e, t, NAN, 100, 10);
    LG_CHECK(e.w == 1 && near(e.s, log(LG_EST_ERR_MAX), 1e-12));
    /* samples fade: the weight halves every half-life */
    lg_est_err_read(&e, t + S(10), 10, &v);
    LG_CHECK(near(v.weight, 0.5, 1e-6));
    return 0;
}

/* The measured terms: first tokens by the load they were sent into. */
static int
test_curve(void)
{
    struct lg_est_curve c = { 0 };
    uint64_t t = S(1);
    double beyond;

    LG_CHECK(lg_est_curve_read(&c, t, 3, &beyond) == -1);
    /* a 4-slot replica: 40 ms up to 3 requests there, then a slot's wait */
    for (int i = 0; i < 10; i++) {
        lg_est_curve_add(&c, t, 0, 40);
        lg_est_curve_add(&c, t, 1.2, 40);
        lg_est_curve_add(&c, t, 2.9, 44); /* bins of one request, rounded */
        lg_est_curve_add(&c, t, 4, 400);
        lg_est_curve_add(&c, t, 5, 700);
    }
    LG_CHECK(near(lg_est_curve_read(&c, t, 1, &beyond), 40, 1e-9) && beyond == 0);
    /* between bins seen: linear (no bin at 2: between 40 and 44) */
    LG_CHECK(near(lg_est_curve_read(&c, t, 2, NULL), 42, 1e-9));
    LG_CHECK(near(lg_est_curve_read(&c, t, 3.5, NULL), 222, 1e-9));
    /* above the highest seen: on at the last two bins' slope, and how far */
    LG_CHECK(near(lg_est_curve_read(&c, t, 7, &beyond), 1300, 1e-9) && beyond == 2);
    /* a bin lower than one below it reads as that one: more requests there
     * never make a first token sooner */
    for (int i = 0; i < 30; i++) {
        lg_est_curve_add(&c, t, 6, 100);
    }
    LG_CHECK(near(lg_est_curve_read(&c, t, 6, NULL), 700, 1e-9));
    /* a replica seen only at load 3: flat below it */
    c = (struct lg_est_curve){ 0 };
    lg_est_curve_add(&c, t, 3, 90);
    LG_CHECK(near(lg_est_curve_read(&c, t, 0, &beyond), 90, 1e-9) && beyond == 0);
    LG_CHECK(near(lg_est_curve_read(&c, t, 5, &beyond), 90, 1e-9) && beyond == 2);
    /* a bin whose samples have faded is not seen: a sample far later and
     * elsewhere leaves only itself */
    lg_est_curve_add(&c, t + S(200), 1, 30);
    LG_CHECK(near(lg_est_curve_read(&c, t + S(200), 3, &beyond), 30, 1e-9) && beyond == 2);
    /* the last bin takes every load above it */
    lg_est_curve_add(&c, t + S(200), 1000, 5000);
    LG_CHECK(near(lg_est_curve_read(&c, t + S(200), 500, &beyond), 5000, 1e-9) && beyond == 0);
    return 0;
}

/* The engine model's bias by load: right below the real slots, 4x too soon
 * beyond them; unseen loads read the overall bias. */
static int
test_bias_by_load(void)
{
    struct lg_est_bias b = { 0 };
    uint64_t t = S(1);

    LG_CHECK(lg_est_bias_read(&b, t, 3, 0.2, 20) == 0.2);
    for (int i = 0; i < 18; i++) {
        lg_est_bias_add(&b, t, 2, 50, 50, 20);
        lg_est_bias_add(&b, t, 9, 400, 100, 20);
    }
    lg_est_bias_add(&b, t, -1, 400, 100, 20); /* no load known: no sample */
    lg_est_bias_add(&b, t, 9, 400, 0, 20);
    LG_CHECK(near(lg_est_bias_read(&b, t, 2, 0.5, 20), 0.5 * 2 / 20, 1e-9));
    LG_CHECK(near(lg_est_bias_read(&b, t, 9.2, 0, 20), log(4) * 18 / 20, 1e-9));
    LG_CHECK(lg_est_bias_read(&b, t, 5, 0.3, 20) == 0.3);
    /* faded: back to the overall bias */
    LG_CHECK(fabs(lg_est_bias_read(&b, t + S(400), 9, 0.3, 20) - 0.3) < 1e-3);
    return 0;
}

/*
 * Lateness: first tokens 1.5x later than the pick used raise the factor
 * within a dozen samples; used at the raised factor and on time, it holds;
 * sooner, it falls back (never below 1); idle, it fades in seconds.
 */
static int
test_late(void)
{
    struct lg_est_late l = { 0 };
    uint64_t t = 1000 * LG_NS_PER_S, ms = LG_NS_PER_MS;
    double f;

    LG_CHECK(lg_est_late_read(&l, t) == 0);
    for (int i = 0; i < 12; i++) { /* 12 first tokens in 1.2 s, 1.5x late */
        t += 100 * ms;
        lg_est_late_add(&l, t, 150, 100 * exp(lg_est_late_read(&l, t)));
    }
    f = exp(lg_est_late_read(&l, t));
    LG_CHECK(f > 1.3 && f < 1.6);
    for (int i = 0; i < 30; i++) { /* as used, on time: stays about there */
        t += 100 * ms;
        lg_est_late_add(&l, t, 150, 100 * exp(lg_est_late_read(&l, t)));
    }
    f = exp(lg_est_late_read(&l, t));
    LG_CHECK(f > 1.3 && f < 1.6);
    for (int i = 0; i < 30; i++) { /* sooner than used: back toward 1, never below */
        t += 100 * ms;
        lg_est_late_add(&l, t, 50, 100);
    }
    LG_CHECK(lg_est_late_read(&l, t) == 0);
    for (int i = 0; i < 100; i++) { /* a stall: at most LG_EST_LATE_MAX */
        t += 10 * ms;
        lg_est_late_add(&l, t, 100000, 10);
    }
    LG_CHECK(fabs(exp(lg_est_late_read(&l, t)) - LG_EST_LATE_MAX) < 1e-9);
    /* idle for two half-lives: a quarter of the log factor left */
    t += (uint64_t)(2 * LG_EST_LATE_HALF_LIFE_S * LG_NS_PER_S);
    LG_CHECK(fabs(lg_est_late_read(&l, t) - 0.25 * log(LG_EST_LATE_MAX)) < 1e-6);
    lg_est_late_add(&l, t, NAN, 10); /* not a sample */
    LG_CHECK(fabs(lg_est_late_read(&l, t) - 0.25 * log(LG_EST_LATE_MAX)) < 1e-6);
    return 0;
}

/* Chunked prefill: the steps after the first, each a step and a prefilling
 * step's fixed part; none unchunked, nor where the prompt fits one chunk. */
static int
test_chunks(void)
{
    /* 1 KiB = 256 tokens, 16 a step less 3 decoding: 20 steps, 19 more */
    LG_CHECK(fabs(lg_est_chunks_ms(16, 3, 12, 2, 1.0) - 19 * 14) < 1e-9);
    /* llama.cpp's default 512: one step */
    LG_CHECK(lg_est_chunks_ms(512, 3, 12, 2, 1.0) == 0);
    LG_CHECK(lg_est_chunks_ms(0, 3, 12, 2, 1.0) == 0);   /* unchunked */
    LG_CHECK(lg_est_chunks_ms(16, 3, 12, 2, 0) == 0);    /* no prompt */
    /* a batch fuller than the chunk: a token a step (10 tokens, 9 more) */
    LG_CHECK(fabs(lg_est_chunks_ms(8, 20, 12, 0, 10.0 / 256) - 9 * 12) < 1e-9);
    LG_CHECK(lg_est_chunks_ms(16, 3, NAN, 2, 1.0) == 0); /* no step known */
    return 0;
}

LG_TEST_MAIN(test_chunks, test_late, test_err, test_curve, test_bias_by_load, test_recovery_forgets, test_outlier_is_bounded, test_fit_recovers_line, test_long_prompt_does_not_look_slow,
             test_slow_replica_slope_scales, test_decay_function, test_decay_toward_prior, test_peak_reaction, test_mean,
             test_foreign_load, test_queue_wait, test_engine_run, test_engine_run_chunked, test_line)
