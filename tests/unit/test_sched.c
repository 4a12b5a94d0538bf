/*
 * test_sched.c: the admission queue's order (serve/sched.c) and the
 * tenants and classes it orders by (serve/tenant.c): classes first,
 * least attained service between tenants (with its half-life), deadlines
 * then arrival inside a tenant, first come first served when not fair.
 */
#include <math.h>

#include "base/config.h"
#include "lg_test.h"
#include "serve/sched.h"
#include "serve/tenant.h"

#define MS 1000000ull

static struct lg_sched_item *
item(struct lg_sched_item *it, int cls, uint64_t deadline)
{
    memset(it, 0, sizeof(*it));
    it->cls = (uint8_t)cls;
    it->deadline_ns = deadline;
    return it;
}

/* Pops the head; returns its index in base. */
static long
pop(struct lg_sched *s, struct lg_sched_item *base)
{
    struct lg_sched_item *h = lg_sched_head(s);

    if (h == NULL) {
        return -1;
    }
    lg_sched_remove(s, h);
    return h - base;
}

static int
test_classes_first_then_arrival(void)
{
    struct lg_sched s;
    struct lg_sched_item it[6];

    lg_sched_init(&s);
    lg_sched_push(&s, item(&it[0], LG_CLASS_BATCH, 0), NULL, true);
    lg_sched_push(&s, item(&it[1], LG_CLASS_DEFAULT, 0), NULL, true);
    lg_sched_push(&s, item(&it[2], LG_CLASS_BATCH, 0), NULL, true);
    lg_sched_push(&s, item(&it[3], LG_CLASS_SYSTEM, 0), NULL, true);
    lg_sched_push(&s, item(&it[4], LG_CLASS_INTERACTIVE, 0), NULL, true);
    lg_sched_push(&s, item(&it[5], LG_CLASS_DEFAULT, 0), NULL, true);
    LG_CHECK(lg_sched_count(&s) == 6);
    LG_CHECK(lg_sched_above(&s, LG_CLASS_DEFAULT) == 2);
    LG_CHECK(pop(&s, it) == 3);
    LG_CHECK(pop(&s, it) == 4);
    LG_CHECK(pop(&s, it) == 1);
    LG_CHECK(pop(&s, it) == 5);
    LG_CHECK(pop(&s, it) == 0);
    LG_CHECK(pop(&s, it) == 2);
    LG_CHECK(pop(&s, it) == -1 && lg_sched_count(&s) == 0);
    lg_sched_destroy(&s);
    return 0;
}

static int
test_fifo_ignores_classes_and_deadlines(void)
{
    struct lg_sched s;
    struct lg_sched_item it[4];
    struct lg_tenant a = { .name = "a", .key = -INFINITY };

    lg_sched_init(&s);
    lg_sched_push(&s, item(&it[0], LG_CLASS_BATCH, 900 * MS), &a, false);
    lg_sched_push(&s, item(&it[1], LG_CLASS_SYSTEM, 5 * MS), NULL, false);
    lg_sched_push(&s, item(&it[2], LG_CLASS_INTERACTIVE, 1 * MS), &a, false);
    lg_sched_push(&s, item(&it[3], LG_CLASS_DEFAULT, 0), NULL, false);
    for (long i = 0; i < 4; i++) {
        LG_CHECK(pop(&s, it) == i);
    }
    LG_CHECK(a.flows == NULL);
    lg_sched_destroy(&s);
    return 0;
}

static int
test_deadline_then_arrival_inside_a_tenant(void)
{
    struct lg_sched s;
    struct lg_sched_item it[5];
    struct lg_tenant a = { .name = "a", .key = -INFINITY };

    lg_sched_init(&s);
    lg_sched_push(&s, item(&it[0], LG_CLASS_DEFAULT, 0), &a, true); /* no deadline */
    lg_sched_push(&s, item(&it[1], LG_CLASS_DEFAULT, 300 * MS), &a, true);
    lg_sched_push(&s, item(&it[2], LG_CLASS_DEFAULT, 100 * MS), &a, true);
    lg_sched_push(&s, item(&it[3], LG_CLASS_DEFAULT, 300 * MS), &a, true); /* same: arrival */
    lg_sched_push(&s, item(&it[4], LG_CLASS_DEFAULT, 0), &a, true);
    /* a removal from the middle (a client that left) keeps the order */
    lg_sched_remove(&s, &it[1]);
    LG_CHECK(pop(&s, it) == 2);
    LG_CHECK(pop(&s, it) == 3);
    LG_CHECK(pop(&s, it) == 0);
    LG_CHECK(pop(&s, it) == 4);
    LG_CHECK(a.flows == NULL && lg_sched_count(&s) == 0);
    lg_sched_destroy(&s);
    return 0;
}

/*
 * Tenant "flood" queues 1000 requests, "trickle" 10; served in turns, each
 * charged 100 tokens at dispatch: the trickle is served at once (it has
 * attained less), and after it the flood takes every slot (work-conserving).
 */
static int
test_least_attained_service_between_tenants(void)
{
    struct lg_sched s;
    static struct lg_sched_item it[1010];
    struct lg_tenant flood = { .name = "flood", .key = -INFINITY };
    struct lg_tenant trickle = { .name = "trickle", .key = -INFINITY };
    double now = 1000.0;
    int served_trickle_by = -1, ntrickle = 0;

    lg_sched_init(&s);
    lg_sched_charge(&flood, 50000, now, 60); /* it has been busy */
    for (int i = 0; i < 1000; i++) {
        lg_sched_push(&s, item(&it[i], LG_CLASS_DEFAULT, 0), &flood, true);
    }
    for (int i = 1000; i < 1010; i++) {
        lg_sched_push(&s, item(&it[i], LG_CLASS_DEFAULT, 0), &trickle, true);
    }
    for (int n = 0; n < 1010; n++) {
        long i = pop(&s, it);

        LG_CHECK(i >= 0);
        lg_sched_charge(i >= 1000 ? &trickle : &flood, 100, now, 60);
        now += 0.01;
        if (i >= 1000 && ++ntrickle == 10) {
            served_trickle_by = n;
        }
    }
    LG_CHECK(served_trickle_by == 9);
    LG_CHECK(lg_sched_count(&s) == 0 && flood.flows == NULL && trickle.flows == NULL);
    lg_sched_destroy(&s);
    return 0;
}

/*
 * Two tenants with equal backlogs share alternately; a tenant's past
 * service halves over the half-life, so a heavy user of an hour ago is
 * not punished now.
 */
static int
test_fair_shares_over_time(void)
{
    struct lg_sched s;
    static struct lg_sched_item it[200];
    struct lg_tenant a = { .name = "a", .key = -INFINITY };
    struct lg_tenant b = { .name = "b", .key = -INFINITY };
    double now = 10.0;
    int na = 0, nb = 0;

    lg_sched_init(&s);
    for (int i = 0; i < 100; i++) {
        lg_sched_push(&s, item(&it[i], LG_CLASS_DEFAULT, 0), &a, true);
        lg_sched_push(&s, item(&it[100 + i], LG_CLASS_DEFAULT, 0), &b, true);
    }
    for (int n = 0; n < 100; n++) {
        long i = pop(&s, it);

        lg_sched_charge(i < 100 ? &a : &b, i < 100 ? 100 : 300, now, 60); /* b's cost 3x */
        if (i < 100) {
            na++;
        } else {
            nb++;
        }
        now += 0.01;
    }
    /* equal service: a gets about 3 requests for each of b's */
    LG_CHECK(na >= 72 && na <= 78 && nb >= 22 && nb <= 28);
    while (pop(&s, it) >= 0) {
    }
    /* the half-life: 5000 tokens an hour ago weigh less than 100 now */
    {
        struct lg_tenant old = { .name = "old", .key = -INFINITY };
        struct lg_tenant fresh = { .name = "fresh", .key = -INFINITY };

        lg_sched_charge(&old, 5000, 0, 60);
        lg_sched_charge(&fresh, 100, 3600, 60);
        LG_CHECK(lg_sched_key(&old) < lg_sched_key(&fresh));
        LG_CHECK(fabs(lg_sched_service(&old, 60, 60) - 2500) < 1e-6);
        LG_CHECK(lg_sched_service(&old, 3600, 60) < 1e-9);
        /* ordering by key never needs the decay applied: it is time-invariant */
        lg_sched_charge(&old, 1000, 3601, 60);
        LG_CHECK(lg_sched_key(&old) > lg_sched_key(&fresh));
    }
    lg_sched_destroy(&s);
    return 0;
}

/* A tenant's charge re-orders its flows in every queue and class it waits in. */
static int
test_charge_reorders_every_flow(void)
{
    struct lg_sched s1, s2;
    struct lg_sched_item it[4];
    struct lg_tenant a = { .name = "a", .key = -INFINITY };
    struct lg_tenant b = { .name = "b", .key = -INFINITY };

    lg_sched_init(&s1);
    lg_sched_init(&s2);
    lg_sched_push(&s1, item(&it[0], LG_CLASS_BATCH, 0), &a, true);
    lg_sched_push(&s1, item(&it[1], LG_CLASS_BATCH, 0), &b, true);
    lg_sched_push(&s2, item(&it[2], LG_CLASS_DEFAULT, 0), &a, true);
    lg_sched_push(&s2, item(&it[3], LG_CLASS_DEFAULT, 0), &b, true);
    LG_CHECK(lg_sched_head(&s1) == &it[0] && lg_sched_head(&s2) == &it[2]);
    lg_sched_charge(&a, 10, 1, 60);
    LG_CHECK(lg_sched_head(&s1) == &it[1] && lg_sched_head(&s2) == &it[3]);
    lg_sched_charge(&b, 20, 1, 60);
    LG_CHECK(lg_sched_head(&s1) == &it[0] && lg_sched_head(&s2) == &it[2]);
    for (int i = 0; i < 2; i++) {
        lg_sched_remove(&s1, &it[i]);
        lg_sched_remove(&s2, &it[2 + i]);
    }
    LG_CHECK(a.flows == NULL && b.flows == NULL);
    lg_sched_destroy(&s1);
    lg_sched_destroy(&s2);
    return 0;
}

/* Random pushes and removals against a brute-force order. */
static int
test_random_against_brute_force(void)
{
    enum { N = 400 };
    struct lg_sched s;
    static struct lg_sched_item it[N];
    static bool in[N];
    struct lg_tenant t[5];
    uint64_t rnd = 12345;

    memset(t, 0, sizeof(t));
    for (int i = 0; i < 5; i++) {
        snprintf(t[i].name, sizeof(t[i].name), "t%d", i);
        t[i].key = (double)i; /* fixed services: t0 first */
    }
    lg_sched_init(&s);
    for (int step = 0; step < 20000; step++) {
        int i;

        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        i = (int)((rnd >> 33) % N);
        if (!in[i]) {
            item(&it[i], (int)((rnd >> 20) % LG_NCLASSES), ((rnd >> 40) % 4) * MS);
            lg_sched_push(&s, &it[i], &t[i % 5], true);
            in[i] = true;
        } else {
            lg_sched_remove(&s, &it[i]);
            in[i] = false;
        }
        if (step % 97 == 0) {
            /* brute force: highest class, least key, earliest deadline, then seq */
            struct lg_sched_item *best = NULL;
            int bt = -1;

            for (int j = 0; j < N; j++) {
                struct lg_sched_item *x = &it[j];
                uint64_t dx, db;

                if (!in[j]) {
                    continue;
                }
                if (best == NULL || x->cls > best->cls
                    || (x->cls == best->cls && t[j % 5].key < t[bt].key)) {
                    best = x;
                    bt = j % 5;
                    continue;
                }
                if (x->cls != best->cls || t[j % 5].key != t[bt].key) {
                    continue;
                }
                dx = x->deadline_ns ? x->deadline_ns : UINT64_MAX;
                db = best->deadline_ns ? best->deadline_ns : UINT64_MAX;
                if (dx < db || (dx == db && x->seq < best->seq)) {
                    best = x;
                }
            }
            LG_CHECK(lg_sched_head(&s) == best);
        }
    }
    for (int i = 0; i < N; i++) {
        if (in[i]) {
            lg_sched_remove(&s, &it[i]);
        }
    }
    lg_sched_destroy(&s);
    return 0;
}

static int
test_headers_and_names(void)
{
    LG_CHECK(lg_class_parse("batch", 5) == LG_CLASS_BATCH);
    LG_CHECK(lg_class_parse(" Interactive ", 13) == LG_CLASS_INTERACTIVE);
    LG_CHECK(lg_class_parse("SYSTEM", 6) == LG_CLASS_SYSTEM);
    LG_CHECK(lg_class_parse("sys", 3) == -1 && lg_class_parse("", 0) == -1);
    LG_CHECK(lg_class_parse("defaultx", 8) == -1);
    LG_CHECK(lg_tenant_parse_ms("500", 3) == 500);
    LG_CHECK(lg_tenant_parse_ms(" 1200 ", 6) == 1200);
    LG_CHECK(lg_tenant_parse_ms("3600000", 7) == 3600000);
    LG_CHECK(lg_tenant_parse_ms("3600001", 7) == 0);
    LG_CHECK(lg_tenant_parse_ms("0", 1) == 0 && lg_tenant_parse_ms("", 0) == 0);
    LG_CHECK(lg_tenant_parse_ms("5s", 2) == 0 && lg_tenant_parse_ms("-5", 2) == 0);
    LG_CHECK(lg_tenant_parse_ms("99999999999999999999", 20) == 0);
    LG_CHECK(lg_tenant_name_ok("team-a", 6) && lg_tenant_name_ok("proj/x:1@y", 10));
    LG_CHECK(!lg_tenant_name_ok("a b", 3) && !lg_tenant_name_ok("", 0));
    LG_CHECK(!lg_tenant_name_ok("a\0b", 3));
    LG_CHECK(strcmp(lg_shed_name(LG_SHED_TTFT_TARGET), "ttft_target") == 0);
    LG_CHECK(lg_shed_name(LG_SHED_NONE) == NULL);
    return 0;
}

/* The table is bounded: past max, new names share "other" until idle ones expire. */
static int
test_tenant_table_bounded_with_expiry(void)
{
    struct lg_tenants_conf conf = { .max = 2, .idle_expiry_ms = 1000, .half_life_ms = 60000 };
    struct lg_tenants *t = lg_tenants_new(&conf);
    uint64_t now = 10ull * 1000 * MS;
    struct lg_tenant *a = lg_tenants_get(t, "a", 1, now);
    struct lg_tenant *b = lg_tenants_get(t, "b", 1, now);
    struct lg_tenant *c = lg_tenants_get(t, "c", 1, now);
    struct lg_tenant *a2 = lg_tenants_get(t, "a", 1, now);

    LG_CHECK(a == a2 && a != b);
    LG_CHECK(strcmp(c->name, "other") == 0 && lg_tenants_count(t) == 2);
    lg_tenants_put(t, a);
    lg_tenants_put(t, a2);
    lg_tenants_put(t, c);
    /* b is held: it stays; a is idle past the expiry: its place goes to d */
    c = lg_tenants_get(t, "d", 1, now + 2000 * MS);
    LG_CHECK(strcmp(c->name, "d") == 0 && lg_tenants_count(t) == 2);
    lg_tenants_put(t, c);
    lg_tenants_put(t, b);
    lg_tenants_free(t);
    return 0;
}

LG_TEST_MAIN(test_classes_first_then_arrival, test_fifo_ignores_classes_and_deadlines,
             test_deadline_then_arrival_inside_a_tenant,
             test_least_attained_service_between_tenants, test_fair_shares_over_time,
             test_charge_reorders_every_flow, test_random_against_brute_force,
             test_headers_and_names, test_tenant_table_bounded_with_expiry)
