/*
 * test_history.c: the status page's history (ops/history.c) from samples
 * made by hand: rates and shares from two samples, TTFT quantiles from the
 * histogram's buckets, the fleet's sums, the ring's wrap and `since`,
 * backends that join, leave and come back, routing reasons.
 */
#include <math.h>

#include "base/config.h"
#include "lg_test.h"
#include "ops/history.h"
#include "ops/livestate.h"

#define S (1000000000ull)

static const struct lg_history_conf conf_10 = { .resolution_ms = 1000, .window_ms = 10000 };

/* A backend's sample: n first tokens in TTFT bucket k (cumulative counts). */
static struct lg_history_backend_snap
snap_backend(uint32_t id, const char *name, uint64_t attempts, uint64_t requests, size_t k,
             uint64_t n, uint64_t sum_us)
{
    struct lg_history_backend_snap b = { .id = id,
                                         .name = name,
                                         .state = LG_LIVE_UP,
                                         .queue = -1,
                                         .attempts = attempts,
                                         .requests = requests,
                                         .ttft_count = n,
                                         .ttft_sum_us = sum_us };

    b.ttft[k] = n;
    return b;
}

static void
add(struct lg_history *h, uint64_t t_s, const struct lg_history_backend_snap *b, size_t n,
    uint64_t requests)
{
    struct lg_history_snap s = { .t_ns = t_s * S,
                                 .wall_ms = 1700000000000ull + t_s * 1000,
                                 .backends = b,
                                 .nbackends = n,
                                 .requests = requests };

    lg_history_add(h, &s);
}

/* h's JSON: the array at `path` ("fleet.ttft_p50_ms", "backends.1.share"...). */
static json_t *
at(json_t *j, const char *path)
{
    char buf[128];
    char *save = NULL;

    snprintf(buf, sizeof(buf), "%s", path);
    for (char *k = strtok_r(buf, ".", &save); k != NULL && j != NULL;
         k = strtok_r(NULL, ".", &save)) {
        j = json_is_array(j) ? json_array_get(j, strtoul(k, NULL, 10)) : json_object_get(j, k);
    }
    return j;
}

/* Element i of the array at path: a number, NAN for null. */
static double
num(json_t *j, const char *path, size_t i)
{
    json_t *v = json_array_get(at(j, path), i);

    return json_is_null(v) ? NAN : json_number_value(v);
}

static bool
near(double a, double b)
{
    return fabs(a - b) < 0.051;
}

static int
test_off(void)
{
    struct lg_history_conf off = { .resolution_ms = 5000, .window_ms = 0 };

    LG_CHECK(lg_history_new(&off) == NULL);
    lg_history_free(NULL);
    return 0;
}

static int
test_rates_shares_quantiles(void)
{
    struct lg_history *h = lg_history_new(&conf_10);
    struct lg_history_backend_snap b[2];
    json_t *j;

    /* baseline: counters from before the history began count for nothing */
    b[0] = snap_backend(1, "fast", 100, 100, 2, 100, 100 * 40000);
    b[1] = snap_backend(2, "slow", 100, 100, 3, 100, 100 * 80000);
    add(h, 10, b, 2, 200);
    /* two seconds later: fast got 30 picks (TTFT 25..50 ms), slow 10 (50..100 ms) */
    b[0] = snap_backend(1, "fast", 130, 128, 2, 130, 100 * 40000 + 30 * 30000);
    b[1] = snap_backend(2, "slow", 110, 110, 3, 110, 100 * 80000 + 10 * 90000);
    b[0].inflight = 3;
    b[1].inflight = 5;
    b[1].queue = 4;
    b[1].errors = 2;
    add(h, 12, b, 2, 240);
    j = lg_history_json(h, 0);
    LG_CHECK(json_integer_value(at(j, "next")) == 2 && json_integer_value(at(j, "first")) == 0);
    LG_CHECK(json_array_size(at(j, "t_ms")) == 2);
    LG_CHECK_STR(json_string_value(at(j, "backends.0.name")), "fast");
    /* the baseline point: gauges, no rates */
    LG_CHECK(isnan(num(j, "backends.0.requests_per_s", 0)));
    LG_CHECK(isnan(num(j, "fleet.requests_per_s", 0)));
    /* rates per second over the 2 s */
    LG_CHECK(near(num(j, "backends.0.requests_per_s", 1), 14));
    LG_CHECK(near(num(j, "backends.1.requests_per_s", 1), 5));
    LG_CHECK(near(num(j, "backends.1.errors_per_s", 1), 1));
    LG_CHECK(near(num(j, "fleet.requests_per_s", 1), 20));
    /* shares of the router's picks: 30 and 10 of 40 */
    LG_CHECK(near(num(j, "backends.0.share", 1), 0.75));
    LG_CHECK(near(num(j, "backends.1.share", 1), 0.25));
    /* quantiles within the bucket (linear), the mean exact */
    LG_CHECK(near(num(j, "backends.0.ttft_p50_ms", 1), 25 + 25 * 0.5));
    LG_CHECK(near(num(j, "backends.0.ttft_p99_ms", 1), 25 + 25 * 0.99));
    LG_CHECK(near(num(j, "backends.0.ttft_mean_ms", 1), 30));
    LG_CHECK(near(num(j, "backends.1.ttft_p50_ms", 1), 75));
    LG_CHECK(near(num(j, "backends.1.ttft_mean_ms", 1), 90));
    /* the fleet: both histograms merged (40 first tokens: 30 low, 10 high) */
    LG_CHECK(near(num(j, "fleet.ttft_p50_ms", 1), 25 + 25 * 20.0 / 30));
    LG_CHECK(near(num(j, "fleet.ttft_p99_ms", 1), 50 + 50 * (39.6 - 30) / 10));
    LG_CHECK(near(num(j, "fleet.ttft_mean_ms", 1), (30 * 30.0 + 10 * 90.0) / 40));
    LG_CHECK(num(j, "fleet.in_flight", 1) == 8);
    LG_CHECK(num(j, "fleet.queue", 1) == 4); /* the known queue; fast's is unknown */
    LG_CHECK(isnan(num(j, "fleet.queue", 0)));
    LG_CHECK(isnan(num(j, "backends.0.queue", 1)));
    LG_CHECK_STR(json_string_value(at(j, "backends.1.health.1")), "up");
    json_decref(j);
    lg_history_free(h);
    return 0;
}

static int
test_quantile_edges(void)
{
    struct lg_history *h = lg_history_new(&conf_10);
    struct lg_history_backend_snap b = snap_backend(1, "r", 0, 0, 0, 0, 0);
    json_t *j;

    add(h, 1, &b, 1, 0);
    /* beyond the last bound (120 s): the highest bound; an idle interval: no TTFT */
    b = snap_backend(1, "r", 4, 4, LG_HIST_NBUCKETS, 4, 4 * 200000000ull);
    add(h, 2, &b, 1, 4);
    add(h, 3, &b, 1, 4);
    j = lg_history_json(h, 0);
    LG_CHECK(near(num(j, "backends.0.ttft_p50_ms", 1), 120000));
    LG_CHECK(near(num(j, "backends.0.ttft_mean_ms", 1), 200000));
    LG_CHECK(isnan(num(j, "backends.0.ttft_p50_ms", 2)));
    LG_CHECK(num(j, "backends.0.requests_per_s", 2) == 0);
    LG_CHECK(isnan(num(j, "backends.0.share", 2))); /* no pick anywhere: no share */
    json_decref(j);
    lg_history_free(h);
    return 0;
}

/* A sample that read the buckets before an observation and the count after it: the
 * quantiles rank within the buckets (not past them, up to the highest bound). */
static int
test_count_ahead_of_buckets(void)
{
    struct lg_history *h = lg_history_new(&conf_10);
    struct lg_history_backend_snap b = snap_backend(1, "r", 0, 0, 0, 0, 0);
    json_t *j;

    add(h, 1, &b, 1, 0);
    b = snap_backend(1, "r", 10, 10, 1, 10, 10 * 20000); /* 10 in 10..25 ms */
    b.ttft_count = 11;
    add(h, 2, &b, 1, 10);
    j = lg_history_json(h, 0);
    LG_CHECK(near(num(j, "backends.0.ttft_p99_ms", 1), 10 + 15 * 0.99));
    LG_CHECK(near(num(j, "fleet.ttft_p99_ms", 1), 10 + 15 * 0.99));
    json_decref(j);
    lg_history_free(h);
    return 0;
}

static int
test_ring_and_since(void)
{
    struct lg_history *h = lg_history_new(&conf_10);
    struct lg_history_backend_snap b;
    json_t *j;

    for (uint64_t t = 0; t < 13; t++) {
        b = snap_backend(1, "r", t * t, t * t, 0, 0, 0);
        add(h, t, &b, 1, t * t);
    }
    /* 13 points, 10 kept: 3..12, oldest first */
    j = lg_history_json(h, 0);
    LG_CHECK(json_integer_value(at(j, "capacity")) == 10);
    LG_CHECK(json_integer_value(at(j, "first")) == 3 && json_integer_value(at(j, "next")) == 13);
    LG_CHECK(json_array_size(at(j, "backends.0.requests_per_s")) == 10);
    LG_CHECK(near(num(j, "backends.0.requests_per_s", 0), 3 * 3 - 2 * 2));
    LG_CHECK(near(num(j, "backends.0.requests_per_s", 9), 12 * 12 - 11 * 11));
    LG_CHECK(json_integer_value(json_array_get(at(j, "t_ms"), 9)) == 1700000012000);
    json_decref(j);
    /* since: the points from there on, no older than the ring holds, none past the end */
    j = lg_history_json(h, 11);
    LG_CHECK(json_integer_value(at(j, "first")) == 11);
    LG_CHECK(json_array_size(at(j, "fleet.requests_per_s")) == 2);
    LG_CHECK(near(num(j, "fleet.requests_per_s", 1), 12 * 12 - 11 * 11));
    json_decref(j);
    j = lg_history_json(h, 1);
    LG_CHECK(json_integer_value(at(j, "first")) == 3);
    json_decref(j);
    j = lg_history_json(h, 99);
    LG_CHECK(json_array_size(at(j, "t_ms")) == 0 && json_integer_value(at(j, "first")) == 13);
    json_decref(j);
    lg_history_free(h);
    return 0;
}

static int
test_backends_come_and_go(void)
{
    struct lg_history *h = lg_history_new(&conf_10);
    struct lg_history_backend_snap b[2];
    uint64_t t = 0;
    json_t *j;

    b[0] = snap_backend(1, "a", 0, 0, 0, 0, 0);
    add(h, t++, b, 1, 0);
    /* b joins: its first sample is a baseline (its counts are not this interval's) */
    b[0] = snap_backend(1, "a", 10, 10, 0, 0, 0);
    b[1] = snap_backend(7, "b", 500, 500, 0, 0, 0);
    add(h, t++, b, 2, 10);
    b[0] = snap_backend(1, "a", 20, 20, 0, 0, 0);
    b[1] = snap_backend(7, "b", 530, 530, 0, 0, 0);
    add(h, t++, b, 2, 50);
    j = lg_history_json(h, 0);
    LG_CHECK_STR(json_string_value(at(j, "backends.1.name")), "b");
    LG_CHECK(json_is_null(json_array_get(at(j, "backends.1.health"), 0))); /* not there yet */
    LG_CHECK(isnan(num(j, "backends.1.requests_per_s", 1)));
    LG_CHECK(num(j, "backends.1.in_flight", 1) == 0);
    LG_CHECK(near(num(j, "backends.1.requests_per_s", 2), 30));
    LG_CHECK(near(num(j, "backends.1.share", 2), 0.75));
    LG_CHECK(near(num(j, "backends.0.share", 1), 1)); /* a's alone then */
    json_decref(j);
    /* a leaves: empty points while it has any in the window, then its series goes */
    b[0] = b[1];
    for (int i = 0; i < 9; i++) {
        b[0].attempts += 10;
        add(h, t++, b, 1, 0);
    }
    j = lg_history_json(h, 0);
    LG_CHECK(json_array_size(at(j, "backends")) == 2);
    LG_CHECK(json_is_null(json_array_get(at(j, "backends.0.health"), 9)));
    LG_CHECK(json_is_null(json_array_get(at(j, "backends.0.in_flight"), 9)));
    LG_CHECK(near(num(j, "backends.1.share", 9), 1));
    json_decref(j);
    b[0].attempts += 10;
    add(h, t++, b, 1, 0);
    j = lg_history_json(h, 0);
    LG_CHECK(json_array_size(at(j, "backends")) == 1);
    LG_CHECK_STR(json_string_value(at(j, "backends.0.name")), "b");
    json_decref(j);
    /* b leaves for one sample and comes back: a fresh baseline, not a jump */
    add(h, t++, b, 0, 0);
    b[0].attempts += 1000;
    b[0].requests += 1000;
    add(h, t++, b, 1, 0);
    b[0].requests += 5;
    add(h, t++, b, 1, 0);
    j = lg_history_json(h, 0);
    LG_CHECK(isnan(num(j, "backends.0.requests_per_s", 8)));
    LG_CHECK(near(num(j, "backends.0.requests_per_s", 9), 5));
    json_decref(j);
    lg_history_free(h);
    return 0;
}

static int
test_reasons(void)
{
    struct lg_history *h = lg_history_new(&conf_10);
    struct lg_stats_decision d[2] = {
        { .policy = "ttft", .reason = "lowest_predicted_ttft", .count = 50 },
        { .policy = "ttft", .reason = "tie_round_robin" }
    };
    struct lg_history_snap s = { .t_ns = 1 * S, .decisions = d, .ndecisions = 1 };
    json_t *j;

    lg_history_add(h, &s);
    d[0].count = 58;
    s.t_ns = 2 * S;
    lg_history_add(h, &s);
    /* a pair first seen after the baseline: all of its count is new */
    d[1].count = 3;
    s.ndecisions = 2;
    s.t_ns = 3 * S;
    lg_history_add(h, &s);
    j = lg_history_json(h, 0);
    LG_CHECK(json_array_size(at(j, "reasons")) == 2);
    LG_CHECK_STR(json_string_value(at(j, "reasons.0.reason")), "lowest_predicted_ttft");
    LG_CHECK(num(j, "reasons.0.counts", 0) == 0);
    LG_CHECK(num(j, "reasons.0.counts", 1) == 8);
    LG_CHECK(num(j, "reasons.0.counts", 2) == 0);
    LG_CHECK_STR(json_string_value(at(j, "reasons.1.policy")), "ttft");
    LG_CHECK(num(j, "reasons.1.counts", 1) == 0 && num(j, "reasons.1.counts", 2) == 3);
    json_decref(j);
    lg_history_free(h);
    return 0;
}

LG_TEST_MAIN(test_off, test_rates_shares_quantiles, test_quantile_edges,
             test_count_ahead_of_buckets, test_ring_and_since, test_backends_come_and_go,
             test_reasons)
