/*
 * test_llmsim_fault.c: llmsim's fault SPEC parser and schedule queries.
 */
#include <string.h>

#include "../../tools/llmsim/fault.c"
#include "lg_test.h"

#define S(x) ((uint64_t)((x)*1e9))

static int
test_parse_valid(void)
{
    struct lg_sim_fault f;
    char err[128];

    LG_CHECK(lg_sim_fault_parse("slow@2:4", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.kind == LG_SIM_FAULT_SLOW && f.start_ns == S(2) && f.factor == 4.0);
    LG_CHECK(f.end_ns == LG_SIM_FAULT_FOREVER);
    LG_CHECK(lg_sim_fault_parse("slow@0.5:1.5:2.25", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.start_ns == S(0.5) && f.factor == 1.5 && f.end_ns == S(2.75));
    LG_CHECK(lg_sim_fault_parse("stall@1", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.kind == LG_SIM_FAULT_STALL && f.end_ns == LG_SIM_FAULT_FOREVER);
    LG_CHECK(lg_sim_fault_parse("stall@1:3", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.end_ns == S(4));
    LG_CHECK(lg_sim_fault_parse("status@0:503:10", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.kind == LG_SIM_FAULT_STATUS && f.status == 503 && f.retry_after_s == -1);
    LG_CHECK(f.end_ns == S(10));
    LG_CHECK(lg_sim_fault_parse("status@1:429:2:30", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.status == 429 && f.retry_after_s == 30 && f.start_ns == S(1));
    LG_CHECK(lg_sim_fault_parse("crash@7.5", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.kind == LG_SIM_FAULT_CRASH && f.start_ns == S(7.5) && !f.reset);
    LG_CHECK(lg_sim_fault_parse("crash@3:reset", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.kind == LG_SIM_FAULT_CRASH && f.start_ns == S(3) && f.reset);
    LG_CHECK(lg_sim_fault_parse("close-after-tokens:3", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.kind == LG_SIM_FAULT_CLOSE_AFTER_TOKENS && f.tokens == 3 && f.start_ns == 0);
    LG_CHECK(lg_sim_fault_parse("stall-random:0.25:1.5", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.kind == LG_SIM_FAULT_STALL_RANDOM && f.rate == 0.25 && f.hold_ns == S(1.5));
    LG_CHECK(f.start_ns == 0 && f.end_ns == LG_SIM_FAULT_FOREVER);
    LG_CHECK(lg_sim_fault_parse("stall-first:0.02:2", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.kind == LG_SIM_FAULT_STALL_FIRST && f.prob == 0.02 && f.hold_ns == S(2));
    LG_CHECK(lg_sim_fault_parse("stall-first:1:30", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(f.prob == 1.0);
    return 0;
}

static int
test_parse_invalid(void)
{
    static const char *const bad[] = {
        "",
        "slow",
        "slow@",
        "slow@1",
        "slow@1:",
        "slow@1:0",
        "slow@-1:2",
        "slow@1:2:",
        "slow@1:2:3:4",
        "slow@1e3:2",
        "slow@ 1:2",
        "slow@1.:2",
        "slow@.5:2",
        "slow@1:nan",
        "slow@1:inf",
        "slow@0x10:2",
        "slow@2000000:2",
        "stall@1:",
        "stall@1:2x",
        "status@1:503",
        "status@1:200:3",
        "status@1:600:3",
        "status@1:503:3:",
        "status@1:503:3:-1",
        "status@1:503:3:100000",
        "crash@",
        "crash@1:2",
        "crash@1:",
        "crash@1:resets",
        "crash@1:reset:",
        "crash@:reset",
        "close-after-tokens:0",
        "close-after-tokens:",
        "close-after-tokens:-1",
        "close-after-tokens:99999999999999999999",
        "close-after-tokens@1:3",
        "reboot@1",
        "SLOW@1:2",
        "stall-random",
        "stall-random:",
        "stall-random:0:1",
        "stall-random:1001:1",
        "stall-random:1:0",
        "stall-random:1",
        "stall-random:1:2:3",
        "stall-random@1:2",
        "stall-first:1.5:1",
        "stall-first:-0.1:1",
        "stall-first:0.5:0",
        "stall-first:0.5:",
        "stall-first:0.5:2000000",
    };
    struct lg_sim_fault f;
    char err[128];

    for (size_t i = 0; i < LG_ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        if (lg_sim_fault_parse(bad[i], &f, err, sizeof(err)) != LG_EINVAL || err[0] == '\0') {
            fprintf(stderr, "accepted or no reason: \"%s\"\n", bad[i]);
            return 1;
        }
    }
    return 0;
}

static int
test_format_round_trip(void)
{
    static const char *const specs[] = {
        "slow@2:4",          "slow@0.5:1.5:2.25",    "stall@1:3", "status@0:503:10", "crash@7.5",
        "status@1:429:2:30", "close-after-tokens:3", "stall@0", "crash@2:reset",
        "stall-random:0.25:1.5", "stall-first:0.02:2",
    };
    char buf[128];

    for (size_t i = 0; i < LG_ARRAY_SIZE(specs); i++) {
        struct lg_sim_fault f;
        struct lg_sim_faults fs = { .n = 0 };

        LG_CHECK(lg_sim_fault_parse(specs[i], &f, buf, sizeof(buf)) == LG_OK);
        LG_CHECK(lg_sim_faults_add(&fs, &f, S(100)) == LG_OK);
        lg_sim_fault_format(&fs.list[0], S(100), buf, sizeof(buf));
        LG_CHECK_STR(buf, specs[i]);
    }
    return 0;
}

static int
add(struct lg_sim_faults *fs, const char *spec, uint64_t origin)
{
    struct lg_sim_fault f;
    char err[128];

    if (lg_sim_fault_parse(spec, &f, err, sizeof(err)) != LG_OK) {
        return -1;
    }
    return lg_sim_faults_add(fs, &f, origin);
}

static int
test_schedule(void)
{
    struct lg_sim_faults fs = { .n = 0 };
    uint64_t o = S(1000);
    uint32_t retry;
    int status;
    bool reset;

    LG_CHECK(add(&fs, "slow@1:2:2", o) == 0);
    LG_CHECK(add(&fs, "slow@2:3", o) == 0);
    LG_CHECK(add(&fs, "stall@5:1", o) == 0);
    LG_CHECK(add(&fs, "status@6:503:2", o) == 0);
    LG_CHECK(add(&fs, "status@7:429:4:9", o) == 0);
    LG_CHECK(add(&fs, "crash@20", o) == 0);
    LG_CHECK(lg_sim_faults_slowdown(&fs, o) == 1.0);
    LG_CHECK(lg_sim_faults_slowdown(&fs, o + S(1)) == 2.0);
    LG_CHECK(lg_sim_faults_slowdown(&fs, o + S(2.5)) == 6.0);
    LG_CHECK(lg_sim_faults_slowdown(&fs, o + S(3)) == 3.0); /* the window is [start, end) */
    LG_CHECK(!lg_sim_faults_stalled(&fs, o + S(4.9)));
    LG_CHECK(lg_sim_faults_stalled(&fs, o + S(5)));
    LG_CHECK(!lg_sim_faults_stalled(&fs, o + S(6)));
    LG_CHECK(!lg_sim_faults_status(&fs, o + S(5.9), &status, &retry));
    LG_CHECK(lg_sim_faults_status(&fs, o + S(6.2), &status, &retry));
    LG_CHECK(status == 503 && retry == 2); /* 1.8 s left, rounded up */
    LG_CHECK(lg_sim_faults_status(&fs, o + S(7.5), &status, &retry));
    LG_CHECK(status == 429 && retry == 9); /* the latest added wins */
    LG_CHECK(lg_sim_faults_status(&fs, o + S(7.999999), &status, &retry));
    LG_CHECK(status == 429);
    LG_CHECK(!lg_sim_faults_crash_due(&fs, o + S(19.9), &reset));
    LG_CHECK(lg_sim_faults_crash_due(&fs, o + S(20), &reset) && !reset);
    LG_CHECK(add(&fs, "crash@25:reset", o) == 0);
    LG_CHECK(lg_sim_faults_crash_due(&fs, o + S(20), &reset) && !reset);
    LG_CHECK(lg_sim_faults_crash_due(&fs, o + S(25), &reset) && reset);
    LG_CHECK(lg_sim_faults_next_edge(&fs, o) == o + S(1));
    LG_CHECK(lg_sim_faults_next_edge(&fs, o + S(1)) == o + S(2));
    LG_CHECK(lg_sim_faults_next_edge(&fs, o + S(3)) == o + S(5));
    LG_CHECK(lg_sim_faults_next_edge(&fs, o + S(11)) == o + S(20));
    LG_CHECK(lg_sim_faults_next_edge(&fs, o + S(20)) == o + S(25));
    LG_CHECK(lg_sim_faults_next_edge(&fs, o + S(25)) == LG_SIM_FAULT_FOREVER);
    lg_sim_faults_prune(&fs, o + S(8.5));
    LG_CHECK(fs.n == 4); /* slow@2 (forever), status 429 (until 11), both crashes */
    LG_CHECK(lg_sim_faults_close_after(&fs, o) == 0);
    LG_CHECK(add(&fs, "close-after-tokens:5", o) == 0);
    LG_CHECK(add(&fs, "close-after-tokens:3", o) == 0);
    LG_CHECK(lg_sim_faults_close_after(&fs, o) == 3);
    lg_sim_faults_clear(&fs);
    LG_CHECK(fs.n == 0 && lg_sim_faults_slowdown(&fs, o + S(3)) == 1.0);
    for (int i = 0; i < LG_SIM_FAULTS_MAX; i++) {
        LG_CHECK(add(&fs, "stall@1", o) == 0);
    }
    LG_CHECK(add(&fs, "stall@1", o) == LG_EBUSY);
    return 0;
}

/* stall-random: stalls of D at exponential gaps of mean 1/RATE, the same for the same seed. */
static int
test_stall_random(void)
{
    struct lg_sim_faults a = { .n = 0 }, b = { .n = 0 }, c = { .n = 0 };
    struct lg_sim_fault f;
    char err[128];
    uint64_t o = S(1000), t = o, stalled_ns = 0, prev_end = o;
    double gaps = 0;
    int n = 0;

    LG_CHECK(lg_sim_fault_parse("stall-random:0.5:1", &f, err, sizeof(err)) == LG_OK);
    f.seed = 7;
    LG_CHECK(lg_sim_faults_add(&a, &f, o) == LG_OK && lg_sim_faults_add(&b, &f, o) == LG_OK);
    f.seed = 8;
    LG_CHECK(lg_sim_faults_add(&c, &f, o) == LG_OK);
    LG_CHECK(a.list[0].win_start_ns == b.list[0].win_start_ns);
    LG_CHECK(a.list[0].win_start_ns != c.list[0].win_start_ns);
    /* walk 4000 s of edges as the replica does: prune, then ask */
    while (t < o + S(4000)) {
        uint64_t next;

        lg_sim_faults_prune(&a, t);
        next = lg_sim_faults_next_edge(&a, t);
        LG_CHECK(next > t && next != LG_SIM_FAULT_FOREVER);
        if (lg_sim_faults_stalled(&a, t)) {
            LG_CHECK(next - t == S(1)); /* a stall lasts D, from its start */
            LG_CHECK(lg_sim_faults_stalled(&a, next - 1));
            stalled_ns += next - t;
            gaps += (double)(t - prev_end) / 1e9;
            n++;
        } else {
            LG_CHECK(!lg_sim_faults_stalled(&a, next - 1));
            prev_end = t;
        }
        t = next;
    }
    LG_CHECK(a.n == 1); /* for good: never pruned */
    /* about 4000 / (2 + 1) stalls; the mean gap within 10% of 1/RATE */
    LG_CHECK(n > 1150 && n < 1500);
    LG_CHECK(gaps / n > 1.8 && gaps / n < 2.2);
    LG_CHECK(stalled_ns == (uint64_t)n * S(1));
    /* a replica that slept through many stalls catches up to now */
    lg_sim_faults_prune(&b, o + S(100000));
    LG_CHECK(b.list[0].win_end_ns > o + S(100000));
    return 0;
}

/* stall-first: each request held with probability P, by its rank: reproducible. */
static int
test_stall_first(void)
{
    struct lg_sim_faults fs = { .n = 0 }, all = { .n = 0 };
    struct lg_sim_fault f;
    char err[128];
    uint64_t o = S(1000);
    int held = 0;

    LG_CHECK(lg_sim_fault_parse("stall-first:0.1:2", &f, err, sizeof(err)) == LG_OK);
    f.seed = 42;
    LG_CHECK(lg_sim_faults_add(&fs, &f, o) == LG_OK);
    for (uint64_t i = 0; i < 10000; i++) {
        uint64_t h = lg_sim_faults_first_hold(&fs, o + S(1), i);

        LG_CHECK(h == 0 || h == S(2));
        LG_CHECK(h == lg_sim_faults_first_hold(&fs, o + S(5), i)); /* the rank decides */
        held += h != 0;
    }
    LG_CHECK(held > 900 && held < 1100);
    for (uint64_t i = 0; i < 100; i++) {
        LG_CHECK(lg_sim_faults_first_hold(&fs, o - 1, i) == 0); /* before the origin: none */
    }
    LG_CHECK(lg_sim_fault_parse("stall-first:1:3", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(lg_sim_faults_add(&all, &f, o) == LG_OK);
    LG_CHECK(lg_sim_fault_parse("stall-first:0:9", &f, err, sizeof(err)) == LG_OK);
    LG_CHECK(lg_sim_faults_add(&all, &f, o) == LG_OK);
    for (uint64_t i = 0; i < 100; i++) {
        LG_CHECK(lg_sim_faults_first_hold(&all, o, i) == S(3)); /* P 1: every one; P 0: none */
    }
    LG_CHECK(lg_sim_faults_next_edge(&all, o) == LG_SIM_FAULT_FOREVER);
    LG_CHECK(!lg_sim_faults_stalled(&all, o));
    return 0;
}

LG_TEST_MAIN(test_parse_valid, test_parse_invalid, test_format_round_trip, test_schedule,
             test_stall_random, test_stall_first)
