/*
 * stats.c: percentiles over exact samples and a log-linear histogram for the
 * inter-token gaps, whose count is unbounded.
 * Owns: each histogram's bucket array.
 * Percentiles are nearest-rank: the smallest sample with at least p% of the
 * samples at or below it, so p50 of {50, 50, 150, 150} is 50, never an
 * interpolated value nobody observed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "llmload.h"

static size_t
stats_rank(uint64_t n, double p)
{
    double r;

    if (p <= 0) {
        return 1;
    }
    if (p >= 100) {
        return (size_t)n;
    }
    /* The small epsilon keeps 0.9 * 10 from rounding up to rank 10. */
    r = ceil(p / 100.0 * (double)n - 1e-9);
    if (r < 1) {
        r = 1;
    }
    return (size_t)r;
}

double
lg_ld_percentile(const double *sorted, size_t n, double p)
{
    if (n == 0) {
        return 0;
    }
    return sorted[stats_rank(n, p) - 1];
}

static int
stats_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

void
lg_ld_sort(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), stats_cmp);
}

void
lg_ld_hist_init(struct lg_ld_hist *h)
{
    memset(h, 0, sizeof(*h));
    h->buckets = lg_xcalloc(LG_LD_HIST_BUCKETS, sizeof(*h->buckets));
}

void
lg_ld_hist_free(struct lg_ld_hist *h)
{
    free(h->buckets);
    h->buckets = NULL;
}

size_t
lg_ld_hist_index(uint64_t v)
{
    int k;

    if (v < 1024) {
        return (size_t)v;
    }
    k = 63 - __builtin_clzll(v); /* 2^k <= v < 2^(k+1), k >= 10 */
    return (size_t)(k - 9) * 512 + (size_t)(v >> (k - 9));
}

uint64_t
lg_ld_hist_lower(size_t idx)
{
    size_t k, sub;

    if (idx < 1024) {
        return idx;
    }
    k = idx / 512 + 8;
    sub = idx % 512 + 512;
    return (uint64_t)sub << (k - 9);
}

void
lg_ld_hist_add(struct lg_ld_hist *h, uint64_t v)
{
    h->buckets[lg_ld_hist_index(v)]++;
    h->count++;
    h->sum += v;
    if (v > h->max) {
        h->max = v;
    }
}

uint64_t
lg_ld_hist_percentile(const struct lg_ld_hist *h, double p)
{
    size_t rank;
    uint64_t seen = 0;

    if (h->count == 0) {
        return 0;
    }
    if (p >= 100) {
        return h->max;
    }
    rank = stats_rank(h->count, p);
    for (size_t i = 0; i < LG_LD_HIST_BUCKETS; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            uint64_t lo = lg_ld_hist_lower(i);
            uint64_t width =
                i < 1024 || i + 1 >= LG_LD_HIST_BUCKETS ? 1 : lg_ld_hist_lower(i + 1) - lo;
            uint64_t mid = lo + width / 2;

            return mid > h->max ? h->max : mid;
        }
    }
    return h->max;
}
