/*
 * test_health.c: folding engine scrapes into a backend's engine state: the
 * counts, our in-flight at the time, and the capacity inferred from them.
 */
#include "fleet/backend.h"
#include "fleet/enginemetrics.h"
#include "fleet/health_scrape.h"
#include "lg_test.h"

#define MS(x) ((uint64_t)(x)*LG_NS_PER_MS)

static struct lg_engine_sample
sample(int32_t waiting, int32_t running)
{
    struct lg_engine_sample s = {
        .flavor = LG_ENGINE_VLLM, .waiting = waiting, .running = running, .kv_usage = 0.5
    };

    return s;
}

static int
test_counts_and_lower_bound(void)
{
    struct lg_backend_engine e = { .waiting = -1, .running = -1, .kv_usage = -1 };
    struct lg_engine_sample s = sample(0, 3);

    lg_health_fold_sample(&e, &s, MS(1000), 2, MS(250), true);
    LG_CHECK(e.waiting == 0 && e.running == 3 && e.kv_usage == 0.5);
    LG_CHECK(e.t_ns == MS(1000) && e.inflight_at_scrape == 2 && e.flavor == LG_ENGINE_VLLM);
    LG_CHECK(e.capacity == 3 && e.capacity_confirmed == 0); /* at least 3 slots */
    s = sample(0, 2);
    lg_health_fold_sample(&e, &s, MS(1250), 2, MS(250), true);
    LG_CHECK(e.capacity == 3); /* a lower bound never falls */
    return 0;
}

static int
test_capacity_from_a_lasting_queue(void)
{
    struct lg_backend_engine e = { .waiting = -1, .running = -1, .kv_usage = -1 };
    struct lg_engine_sample s;

    /* one scrape with a queue: a request waiting for the next step, not proof */
    s = sample(0, 5);
    lg_health_fold_sample(&e, &s, MS(1000), 0, MS(250), true);
    s = sample(2, 6);
    lg_health_fold_sample(&e, &s, MS(1250), 0, MS(250), true);
    LG_CHECK(e.capacity_confirmed == 0 && e.capacity == 6);
    /* the queue lasts: full at 8 */
    s = sample(3, 8);
    lg_health_fold_sample(&e, &s, MS(1500), 0, MS(250), true);
    LG_CHECK(e.capacity_confirmed == 1 && e.capacity == 8);

    /* a queue none of ours is held in beyond a step (a long prefill of ours
     * in progress, or every request of ours there on time) says nothing
     * about slots */
    e = (struct lg_backend_engine){ .waiting = -1, .running = -1, .kv_usage = -1 };
    s = sample(4, 2);
    lg_health_fold_sample(&e, &s, MS(1000), 0, MS(250), false);
    lg_health_fold_sample(&e, &s, MS(1250), 0, MS(250), false);
    LG_CHECK(e.capacity_confirmed == 0);

    /* two queued scrapes too far apart do not confirm either */
    e = (struct lg_backend_engine){ .waiting = -1, .running = -1, .kv_usage = -1 };
    lg_health_fold_sample(&e, &s, MS(1000), 0, MS(250), true);
    lg_health_fold_sample(&e, &s, MS(3000), 0, MS(250), true);
    LG_CHECK(e.capacity_confirmed == 0);
    return 0;
}

static int
test_queue_below_the_most_seen(void)
{
    struct lg_backend_engine e = { .waiting = -1, .running = -1, .kv_usage = -1 };
    struct lg_engine_sample s;
    double slots = 0;

    /* it ran 12 at once; then a long step holds arrivals at 4 running */
    s = sample(0, 12);
    lg_health_fold_sample(&e, &s, MS(1000), 0, MS(250), true);
    s = sample(3, 4);
    lg_health_fold_sample(&e, &s, MS(1250), 0, MS(250), true);
    lg_health_fold_sample(&e, &s, MS(1500), 0, MS(250), true);
    lg_health_fold_sample(&e, &s, MS(1750), 0, MS(250), true);
    LG_CHECK(e.capacity_confirmed == 0 && e.run_max == 12);
    LG_CHECK(!lg_backend_engine_slots(&e, NULL));

    /* the same queue with the KV cache full: full at 4 for lack of cache */
    s.kv_usage = 0.95;
    lg_health_fold_sample(&e, &s, MS(2000), 0, MS(250), true);
    LG_CHECK(e.capacity_confirmed == 1 && e.capacity == 4);
    LG_CHECK(lg_backend_engine_slots(&e, &slots) && slots == 4);

    /* no queue confirms it again: it stays known (no guess of 16 in its
     * place), and grows when more run at once */
    s = sample(0, 4);
    s.kv_usage = 0.5;
    for (int i = 1; i <= 80; i++) {
        lg_health_fold_sample(&e, &s, MS(2000 + 250 * i), 0, MS(250), true);
    }
    LG_CHECK(lg_backend_engine_slots(&e, &slots) && slots == 4);
    s = sample(0, 5);
    lg_health_fold_sample(&e, &s, MS(30000), 0, MS(250), true);
    LG_CHECK(lg_backend_engine_slots(&e, &slots) && slots == 5);

    /* the most seen is forgotten when not reached for long (a restart with
     * fewer slots): then a queue at 4 confirms 4 again */
    e = (struct lg_backend_engine){ .waiting = -1, .running = -1, .kv_usage = -1 };
    s = sample(0, 12);
    lg_health_fold_sample(&e, &s, MS(1000), 0, MS(250), true);
    s = sample(3, 4);
    lg_health_fold_sample(&e, &s, MS(1000) + LG_ENGINE_RUN_MAX_TTL_S * LG_NS_PER_S + 1, 0, MS(250),
                          true);
    LG_CHECK(e.run_max == 4);
    lg_health_fold_sample(&e, &s, MS(1250) + LG_ENGINE_RUN_MAX_TTL_S * LG_NS_PER_S, 0, MS(250),
                          true);
    LG_CHECK(e.capacity_confirmed == 1 && e.capacity == 4);
    return 0;
}

static int
test_step_boundary_is_not_full(void)
{
    struct lg_backend_engine e = { .waiting = -1, .running = -1, .kv_usage = -1 };
    struct lg_engine_sample s;

    /* it ran 16 at once; a queue with 15 running is an arrival waiting for
     * the next step while a finished request's slot is free */
    s = sample(0, 16);
    lg_health_fold_sample(&e, &s, MS(1000), 0, MS(250), true);
    s = sample(1, 15);
    lg_health_fold_sample(&e, &s, MS(1250), 0, MS(250), true);
    lg_health_fold_sample(&e, &s, MS(1500), 0, MS(250), true);
    LG_CHECK(e.capacity_confirmed == 0 && e.capacity == 16);

    /* full at 16 with the queue lasting: 16, not the mean with the 15 before */
    s = sample(2, 16);
    lg_health_fold_sample(&e, &s, MS(1750), 0, MS(250), true);
    LG_CHECK(e.capacity_confirmed == 1 && e.capacity == 16);
    /* a step boundary afterwards leaves the capacity where it is */
    s = sample(1, 15);
    lg_health_fold_sample(&e, &s, MS(2000), 0, MS(250), true);
    lg_health_fold_sample(&e, &s, MS(2250), 0, MS(250), true);
    LG_CHECK(e.capacity == 16 && e.confirmed_t_ns == MS(1750));
    return 0;
}

static int
test_ours_queued_beyond_a_step(void)
{
    /* a quarter-speed replica (a step every 55 ms), a 160 ms prompt of ours
     * 40 ms late: it arrived during a step and waits for the next, which
     * two scrapes in a clump of arrivals show as a queue; not proof */
    LG_CHECK(!lg_health_ours_queued(40, 55, 160, 160, MS(250)));
    /* 300 ms late: held for a slot */
    LG_CHECK(lg_health_ours_queued(300, 55, 160, 160, MS(250)));
    /* later than two steps but not than the longest prompt there, which a
     * step admitting it with ours takes */
    LG_CHECK(!lg_health_ours_queued(150, 55, 200, 200, MS(250)));
    /* a long prefill of ours in progress holds the queue whatever the slots */
    LG_CHECK(!lg_health_ours_queued(900, 55, 600, 300, MS(250)));
    LG_CHECK(!lg_health_ours_queued(900, 55, 120, 100, MS(100)));
    /* none of ours there */
    LG_CHECK(!lg_health_ours_queued(0, 20, 0, 0, MS(250)));
    return 0;
}

LG_TEST_MAIN(test_ours_queued_beyond_a_step, test_counts_and_lower_bound,
             test_capacity_from_a_lasting_queue, test_queue_below_the_most_seen,
             test_step_boundary_is_not_full)
