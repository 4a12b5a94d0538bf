/*
 * test_budget.c: the token budgets' ledger (serve/budget.c): reserve,
 * settle and refund, windows rolling over, threads sharing an account, and
 * the shares a store syncs.
 */
#include <pthread.h>

#include "lg_test.h"
#include "serve/budget.h"

#define MIN_MS 60000ull
#define DAY_MS 86400000ull
/* 2024-01-01T00:00:10Z: 10 s into a minute and into a day */
#define T0 (1704067200000ull + 10000)

static struct lg_budget_limits
limits(uint64_t per_minute, uint64_t per_day)
{
    struct lg_budget_limits l = { .tokens = { per_minute, per_day } };

    return l;
}

static int
test_reserve_settle_refund(void)
{
    struct lg_budget *b = lg_budget_new("key:a");
    struct lg_budget_limits l = limits(1000, 0);
    struct lg_budget_view v;
    struct lg_budget_state st;

    LG_CHECK(lg_budget_reserve(b, &l, 600, T0, &v) == LG_OK);
    LG_CHECK(v.period == LG_BUDGET_MINUTE && v.limit == 1000 && v.used == 0);
    LG_CHECK(v.remaining == 400 && v.requested == 600);
    LG_CHECK(v.reset_ms == MIN_MS - 10000);
    /* 600 held: 500 more do not fit, and only the reservation holds the room */
    LG_CHECK(lg_budget_reserve(b, &l, 500, T0 + 1, &v) == LG_EBUSY);
    LG_CHECK(v.used == 600 && v.remaining == 0 && v.retry_ms == 1000);
    LG_CHECK(lg_budget_reserve(b, &l, 400, T0 + 2, &v) == LG_OK);
    LG_CHECK(v.remaining == 0);
    /* the first request used 100 of its 600: 500 come back */
    lg_budget_settle(b, 600, 100, T0 + 3);
    lg_budget_read(b, T0 + 3, &st);
    LG_CHECK(st.reserved == 400 && st.used[LG_BUDGET_MINUTE] == 100);
    LG_CHECK(lg_budget_reserve(b, &l, 500, T0 + 4, &v) == LG_OK);
    LG_CHECK(v.used == 500 && v.remaining == 0);
    /* a failed request (nothing used) gives everything back */
    lg_budget_settle(b, 500, 0, T0 + 5);
    lg_budget_settle(b, 400, 400, T0 + 6);
    lg_budget_read(b, T0 + 6, &st);
    LG_CHECK(st.reserved == 0 && st.used[LG_BUDGET_MINUTE] == 500);
    LG_CHECK(st.charged_total == 500 && st.refused_total == 1);
    /* charged tokens hold the room until the window ends: retry then */
    LG_CHECK(lg_budget_reserve(b, &l, 600, T0 + 7, &v) == LG_EBUSY);
    LG_CHECK(v.retry_ms == MIN_MS - 10000 - 7 && v.retry_ms == v.reset_ms);
    /* larger than the whole limit: never fits */
    LG_CHECK(lg_budget_reserve(b, &l, 1001, T0 + 8, &v) == LG_EINVAL);
    LG_CHECK(v.limit == 1000 && v.requested == 1001);
    lg_budget_unref(b);
    return 0;
}

static int
test_windows_roll_over(void)
{
    struct lg_budget *b = lg_budget_new("key:roll");
    struct lg_budget_limits l = limits(1000, 2500);
    struct lg_budget_view v;
    struct lg_budget_state st;
    uint64_t t = T0;

    LG_CHECK(lg_budget_reserve(b, &l, 900, t, &v) == LG_OK);
    lg_budget_settle(b, 900, 900, t);
    LG_CHECK(lg_budget_reserve(b, &l, 200, t, &v) == LG_EBUSY);
    LG_CHECK(v.period == LG_BUDGET_MINUTE && v.retry_ms == MIN_MS - 10000);
    /* the next minute: the minute is empty again, the day still counts */
    t += v.retry_ms;
    LG_CHECK(lg_budget_reserve(b, &l, 1000, t, &v) == LG_OK);
    LG_CHECK(v.period == LG_BUDGET_MINUTE && v.remaining == 0 && v.used == 0);
    lg_budget_settle(b, 1000, 1000, t);
    t += MIN_MS;
    /* the minute has room for 700, the day (1900 of 2500 used) does not */
    LG_CHECK(lg_budget_reserve(b, &l, 700, t, &v) == LG_EBUSY);
    LG_CHECK(v.period == LG_BUDGET_DAY && v.used == 1900);
    LG_CHECK(v.retry_ms == DAY_MS - 10000 - 2 * (MIN_MS - 10000) - 10000);
    LG_CHECK(lg_budget_reserve(b, &l, 600, t, &v) == LG_OK);
    LG_CHECK(v.period == LG_BUDGET_DAY && v.remaining == 0 && v.used == 1900); /* minute: 400 */
    /*
     * A request that runs across the minute's end: its reservation counts
     * in the new minute too, and its tokens land where it ends.
     */
    t += MIN_MS;
    LG_CHECK(lg_budget_reserve(b, &l, 500, t, &v) == LG_EBUSY); /* the day is full */
    lg_budget_settle(b, 600, 300, t);
    lg_budget_read(b, t, &st);
    LG_CHECK(st.used[LG_BUDGET_MINUTE] == 300 && st.used[LG_BUDGET_DAY] == 2200);
    /* the next day */
    t += DAY_MS;
    lg_budget_read(b, t, &st);
    LG_CHECK(st.used[LG_BUDGET_MINUTE] == 0 && st.used[LG_BUDGET_DAY] == 0);
    LG_CHECK(lg_budget_reserve(b, &l, 1000, t, &v) == LG_OK);
    lg_budget_unref(b);
    return 0;
}

static int
test_both_periods_full_waits_for_the_later(void)
{
    struct lg_budget *b = lg_budget_new("key:both");
    struct lg_budget_limits l = limits(100, 100);
    struct lg_budget_view v;

    LG_CHECK(lg_budget_reserve(b, &l, 100, T0, &v) == LG_OK);
    lg_budget_settle(b, 100, 100, T0);
    LG_CHECK(lg_budget_reserve(b, &l, 1, T0, &v) == LG_EBUSY);
    LG_CHECK(v.period == LG_BUDGET_DAY && v.retry_ms == DAY_MS - 10000);
    /* larger than the day's limit says so even when the minute has no room */
    LG_CHECK(lg_budget_reserve(b, &l, 101, T0, &v) == LG_EINVAL);
    lg_budget_unref(b);
    return 0;
}

/* ---- across workers ---- */

#define THREADS 4
#define ROUNDS  20000

struct worker_arg {
    struct lg_budget *b;
    uint64_t admitted;
};

static void *
worker_run(void *p)
{
    struct worker_arg *a = p;
    struct lg_budget_limits l = limits(0, 1000000000ull);
    struct lg_budget_view v;

    for (int i = 0; i < ROUNDS; i++) {
        if (lg_budget_reserve(a->b, &l, 10, T0, &v) == LG_OK) {
            a->admitted++;
            lg_budget_settle(a->b, 10, 3, T0); /* used 3 of 10 */
        }
    }
    return NULL;
}

/* A limit that every thread's admissions add up to, exactly. */
static void *
worker_exact(void *p)
{
    struct worker_arg *a = p;
    struct lg_budget_limits l = limits(0, 5000);
    struct lg_budget_view v;

    for (int i = 0; i < ROUNDS; i++) {
        if (lg_budget_reserve(a->b, &l, 1, T0, &v) == LG_OK) {
            a->admitted++;
        }
    }
    return NULL;
}

static int
test_threads_share_an_account(void)
{
    struct lg_budget *b = lg_budget_new("key:threads");
    struct worker_arg args[THREADS];
    pthread_t th[THREADS];
    struct lg_budget_state st;
    uint64_t admitted = 0;

    for (int i = 0; i < THREADS; i++) {
        args[i] = (struct worker_arg){ .b = b };
        LG_CHECK(pthread_create(&th[i], NULL, worker_run, &args[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        admitted += args[i].admitted;
    }
    lg_budget_read(b, T0, &st);
    LG_CHECK(admitted == THREADS * ROUNDS);
    LG_CHECK(st.reserved == 0 && st.used[LG_BUDGET_DAY] == 3 * admitted);
    lg_budget_unref(b);

    b = lg_budget_new("key:exact");
    admitted = 0;
    for (int i = 0; i < THREADS; i++) {
        args[i] = (struct worker_arg){ .b = b };
        LG_CHECK(pthread_create(&th[i], NULL, worker_exact, &args[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        admitted += args[i].admitted;
    }
    lg_budget_read(b, T0, &st);
    LG_CHECK(admitted == 5000 && st.reserved == 5000);
    LG_CHECK(st.refused_total == THREADS * ROUNDS - 5000);
    lg_budget_unref(b);
    return 0;
}

/* ---- shares ---- */

static const struct lg_budget_share *
find_share(const struct lg_budget_share *s, size_t n, const struct lg_budget *b)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i].b == b) {
            return &s[i];
        }
    }
    return NULL;
}

static int
test_shares_and_the_others_part(void)
{
    struct lg_budget *a = lg_budget_new("key:shared");
    struct lg_budget *idle = lg_budget_new("key:idle");
    struct lg_budget_limits l = limits(1000, 0);
    struct lg_budget_share *s;
    const struct lg_budget_share *sa;
    struct lg_budget_view v;
    struct lg_budget_state st;
    size_t n;
    uint64_t total[LG_BUDGET_NPERIODS];

    LG_CHECK(lg_budget_count() >= 2);
    LG_CHECK(lg_budget_reserve(a, &l, 300, T0, &v) == LG_OK);
    lg_budget_settle(a, 300, 200, T0);
    LG_CHECK(lg_budget_reserve(a, &l, 100, T0, &v) == LG_OK);
    /* the first collect writes both (neither was ever written) */
    n = lg_budget_collect(T0, 1000, &s);
    sa = find_share(s, n, a);
    LG_CHECK(sa != NULL && find_share(s, n, idle) != NULL);
    LG_CHECK(sa->mine[LG_BUDGET_MINUTE] == 300 && sa->mine[LG_BUDGET_DAY] == 300);
    LG_CHECK(sa->window[LG_BUDGET_MINUTE] == T0 / MIN_MS);
    LG_CHECK(sa->end_ms[LG_BUDGET_MINUTE] == (T0 / MIN_MS + 1) * MIN_MS);
    /* the store's sums: another gateway used 500 this minute */
    total[LG_BUDGET_MINUTE] = 800;
    total[LG_BUDGET_DAY] = 300;
    lg_budget_learn(sa, total);
    lg_budget_shares_free(s, n);
    lg_budget_read(a, T0, &st);
    LG_CHECK(st.others[LG_BUDGET_MINUTE] == 500 && st.others[LG_BUDGET_DAY] == 0);
    /* 200 charged + 100 reserved + 500 elsewhere: 200 fit, 201 do not */
    LG_CHECK(lg_budget_reserve(a, &l, 201, T0 + 1, &v) == LG_EBUSY);
    LG_CHECK(v.used == 800);
    /* nothing changed and no use lately: nothing to write (the idle account neither) */
    n = lg_budget_collect(T0 + 5000, 1000, &s);
    LG_CHECK(find_share(s, n, a) == NULL && find_share(s, n, idle) == NULL);
    lg_budget_shares_free(s, n);
    /* recently used: written again, to learn the others' part */
    n = lg_budget_collect(T0 + 500, 1000, &s);
    LG_CHECK(find_share(s, n, a) != NULL && find_share(s, n, idle) == NULL);
    lg_budget_shares_free(s, n);
    /* a change is written; a failed write is written again */
    lg_budget_settle(a, 100, 50, T0 + 6000);
    n = lg_budget_collect(T0 + 6000, 1000, &s);
    sa = find_share(s, n, a);
    LG_CHECK(sa != NULL && sa->mine[LG_BUDGET_MINUTE] == 250);
    lg_budget_unsent(sa);
    lg_budget_shares_free(s, n);
    n = lg_budget_collect(T0 + 6000, 0, &s);
    sa = find_share(s, n, a);
    LG_CHECK(sa != NULL && sa->mine[LG_BUDGET_MINUTE] == 250);
    /* a new connection: everything is written again */
    lg_budget_shares_free(s, n);
    n = lg_budget_collect(T0 + 6000, 0, &s);
    LG_CHECK(find_share(s, n, a) == NULL);
    lg_budget_shares_free(s, n);
    lg_budget_unsent_all();
    n = lg_budget_collect(T0 + 6000, 0, &s);
    LG_CHECK(find_share(s, n, a) != NULL && find_share(s, n, idle) != NULL);
    sa = find_share(s, n, a);
    /* an answer for a minute that has passed teaches nothing about the next */
    lg_budget_read(a, T0 + MIN_MS, &st); /* rolls the minute */
    total[LG_BUDGET_MINUTE] = 5000;
    total[LG_BUDGET_DAY] = 900;
    lg_budget_learn(sa, total);
    lg_budget_shares_free(s, n);
    lg_budget_read(a, T0 + MIN_MS, &st);
    LG_CHECK(st.others[LG_BUDGET_MINUTE] == 0 && st.others[LG_BUDGET_DAY] == 650);
    lg_budget_unref(idle);
    lg_budget_unref(a);
    return 0;
}

static int
test_a_collected_account_outlives_its_owner(void)
{
    struct lg_budget *b = lg_budget_new("key:gone");
    struct lg_budget_share *s;
    size_t before = lg_budget_count(), n;
    const struct lg_budget_share *sb;

    n = lg_budget_collect(T0, 0, &s);
    sb = find_share(s, n, b);
    LG_CHECK(sb != NULL);
    lg_budget_unref(b); /* its key is gone; the share still holds it */
    LG_CHECK(lg_budget_count() == before);
    LG_CHECK(strcmp(lg_budget_name(sb->b), "key:gone") == 0);
    lg_budget_shares_free(s, n);
    LG_CHECK(lg_budget_count() == before - 1);
    return 0;
}

LG_TEST_MAIN(test_reserve_settle_refund, test_windows_roll_over,
             test_both_periods_full_waits_for_the_later, test_threads_share_an_account,
             test_shares_and_the_others_part, test_a_collected_account_outlives_its_owner)
