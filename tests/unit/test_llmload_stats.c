/*
 * test_llmload_stats.c: llmload's percentile and histogram code on known
 * distributions.
 */
#include <math.h>

#include "../../tools/llmload/stats.c"
#include "lg_test.h"

static int
test_nearest_rank(void)
{
    double v[10];

    for (int i = 0; i < 10; i++) {
        v[i] = i < 6 ? 50.0 : 150.0; /* 60% fast, 40% slow */
    }
    lg_ld_sort(v, 10);
    LG_CHECK(lg_ld_percentile(v, 10, 50) == 50.0);
    LG_CHECK(lg_ld_percentile(v, 10, 60) == 50.0);
    LG_CHECK(lg_ld_percentile(v, 10, 61) == 150.0);
    LG_CHECK(lg_ld_percentile(v, 10, 90) == 150.0);
    LG_CHECK(lg_ld_percentile(v, 10, 100) == 150.0);
    LG_CHECK(lg_ld_percentile(v, 10, 0) == 50.0);
    LG_CHECK(lg_ld_percentile(v, 0, 50) == 0.0);
    return 0;
}

static int
test_percentiles_of_1_to_1000(void)
{
    double v[1000];

    /* Shuffled 1..1000: p-th percentile is exactly 10*p. */
    for (int i = 0; i < 1000; i++) {
        v[i] = (double)((i * 617) % 1000 + 1);
    }
    lg_ld_sort(v, 1000);
    for (int i = 0; i < 1000; i++) {
        LG_CHECK(v[i] == i + 1);
    }
    LG_CHECK(lg_ld_percentile(v, 1000, 50) == 500);
    LG_CHECK(lg_ld_percentile(v, 1000, 90) == 900);
    LG_CHECK(lg_ld_percentile(v, 1000, 99) == 990);
    LG_CHECK(lg_ld_percentile(v, 1000, 99.9) == 999);
    LG_CHECK(lg_ld_percentile(v, 1000, 100) == 1000);
    return 0;
}

static int
test_hist_index_is_monotonic_and_inverse(void)
{
    size_t prev = 0;

    for (uint64_t v = 0; v < 5000000; v += 7) {
        size_t i = lg_ld_hist_index(v);

        LG_CHECK(i >= prev);
        LG_CHECK(i < LG_LD_HIST_BUCKETS);
        LG_CHECK(lg_ld_hist_lower(i) <= v);
        LG_CHECK(lg_ld_hist_lower(i + 1) > v);
        prev = i;
    }
    LG_CHECK(lg_ld_hist_index(UINT64_MAX) == LG_LD_HIST_BUCKETS - 1);
    LG_CHECK(lg_ld_hist_index(1023) == 1023);
    LG_CHECK(lg_ld_hist_lower(1024) == 1024);
    return 0;
}

static int
test_hist_percentiles(void)
{
    struct lg_ld_hist h;

    lg_ld_hist_init(&h);
    /* 20 ms gaps, with 1% of 100 ms. */
    for (int i = 0; i < 990; i++) {
        lg_ld_hist_add(&h, 20 * LG_NS_PER_MS);
    }
    for (int i = 0; i < 10; i++) {
        lg_ld_hist_add(&h, 100 * LG_NS_PER_MS);
    }
    LG_CHECK(h.count == 1000);
    LG_CHECK(h.max == 100 * LG_NS_PER_MS);
    LG_CHECK(fabs((double)h.sum / 1000.0 / 1e6 - 20.8) < 1e-9); /* the mean is exact */
    /* Bucket midpoints are within 0.2% of the value. */
    LG_CHECK(fabs((double)lg_ld_hist_percentile(&h, 50) / 20e6 - 1) < 0.002);
    LG_CHECK(fabs((double)lg_ld_hist_percentile(&h, 99) / 20e6 - 1) < 0.002);
    LG_CHECK(fabs((double)lg_ld_hist_percentile(&h, 99.1) / 100e6 - 1) < 0.002);
    LG_CHECK(lg_ld_hist_percentile(&h, 99.1) <= 100 * LG_NS_PER_MS); /* never above max */
    LG_CHECK(lg_ld_hist_percentile(&h, 100) == 100 * LG_NS_PER_MS);
    lg_ld_hist_free(&h);

    lg_ld_hist_init(&h);
    LG_CHECK(lg_ld_hist_percentile(&h, 50) == 0);
    for (uint64_t v = 1; v <= 1000; v++) {
        lg_ld_hist_add(&h, v); /* below 1024 ns the buckets are exact */
    }
    LG_CHECK(lg_ld_hist_percentile(&h, 50) == 500);
    LG_CHECK(lg_ld_hist_percentile(&h, 99) == 990);
    lg_ld_hist_free(&h);
    return 0;
}

LG_TEST_MAIN(test_nearest_rank, test_percentiles_of_1_to_1000,
             test_hist_index_is_monotonic_and_inverse, test_hist_percentiles)
