/*
 * test_ttltable.c: the set-associative table with expiry (base/ttltable.c):
 * a key found where it was written, a new key taking an empty way before
 * the oldest, a full set giving up the entry seen longest ago, expiry.
 */
#include "base/ttltable.h"
#include "lg_test.h"

/* Keys that all fall in the set of `key` (table of nsets sets), the first n of them. */
static size_t
same_set(const struct lg_ttltable *t, uint64_t key, uint64_t *out, size_t n)
{
    size_t set = lg_mix64(key) & (t->nsets - 1), got = 0;

    for (uint64_t k = 1; got < n; k++) {
        if ((lg_mix64(k) & (t->nsets - 1)) == set) {
            out[got++] = k;
        }
    }
    return got;
}

static struct lg_ttl_entry *
put(struct lg_ttltable *t, uint64_t key, uint32_t value, uint64_t now)
{
    struct lg_ttl_entry *victim, *e = lg_ttltable_find(t, key, &victim);

    if (e == NULL) {
        e = victim;
        e->key = key;
    }
    e->value = value;
    e->seen_ns = now;
    return e;
}

static int
test_sizes(void)
{
    struct lg_ttltable t;

    lg_ttltable_init(&t, 1, 10);
    LG_CHECK(t.nsets == 1 && lg_ttltable_size(&t) == 4);
    lg_ttltable_fini(&t);
    lg_ttltable_init(&t, 64, 10);
    LG_CHECK(t.nsets == 16 && lg_ttltable_size(&t) == 64);
    lg_ttltable_fini(&t);
    lg_ttltable_init(&t, 65, 10);
    LG_CHECK(t.nsets == 32 && lg_ttltable_size(&t) == 128);
    LG_CHECK(lg_ttltable_count(&t) == 0);
    lg_ttltable_fini(&t);
    LG_CHECK(t.slot == NULL);
    return 0;
}

static int
test_find_and_evict(void)
{
    struct lg_ttltable t;
    uint64_t k[6];
    struct lg_ttl_entry *e, *victim = NULL, *first;

    lg_ttltable_init(&t, 64, 100);
    LG_CHECK(same_set(&t, 12345, k, 6) == 6);
    /* an empty table: not found, the victim is the set's first way, empty */
    LG_CHECK(lg_ttltable_find(&t, k[0], &victim) == NULL);
    LG_CHECK(victim != NULL && victim->key == 0);
    first = victim;
    /* four keys fill the set, each found with its value */
    for (size_t i = 0; i < 4; i++) {
        put(&t, k[i], (uint32_t)i + 10, 1000 + 10 * (i == 0 ? 5 : i)); /* k[0] not the oldest */
    }
    LG_CHECK(first->key == k[0]);
    LG_CHECK(lg_ttltable_count(&t) == 4);
    for (size_t i = 0; i < 4; i++) {
        e = lg_ttltable_find(&t, k[i], NULL);
        LG_CHECK(e != NULL && e->key == k[i] && e->value == i + 10);
    }
    /* full: the victim is the one seen longest ago (k[1], at 1010), not the first way */
    LG_CHECK(lg_ttltable_find(&t, k[4], &victim) == NULL);
    LG_CHECK(victim->key == k[1]);
    put(&t, k[4], 14, 1100);
    LG_CHECK(lg_ttltable_find(&t, k[1], NULL) == NULL);
    LG_CHECK(lg_ttltable_find(&t, k[4], NULL)->value == 14);
    LG_CHECK(lg_ttltable_count(&t) == 4);
    /* a way cleared is taken before any older used one */
    e = lg_ttltable_find(&t, k[3], NULL);
    e->key = 0;
    LG_CHECK(lg_ttltable_find(&t, k[5], &victim) == NULL && victim == e);
    LG_CHECK(lg_ttltable_count(&t) == 3);
    lg_ttltable_fini(&t);
    return 0;
}

static int
test_expiry(void)
{
    struct lg_ttltable t;
    struct lg_ttl_entry *e;
    uint64_t k[5];

    lg_ttltable_init(&t, 4, 100);
    LG_CHECK(same_set(&t, 1, k, 5) == 5);
    e = put(&t, k[0], 1, 1000);
    LG_CHECK(!lg_ttltable_expired(&t, e, 1000));
    LG_CHECK(!lg_ttltable_expired(&t, e, 1100)); /* the ttl itself: still there */
    LG_CHECK(lg_ttltable_expired(&t, e, 1101));
    /* found even when expired (the caller decides), and seen again it lives on */
    LG_CHECK(lg_ttltable_find(&t, k[0], NULL) == e);
    e->seen_ns = 1101;
    LG_CHECK(!lg_ttltable_expired(&t, e, 1150));
    /* an expired entry is older than any live one: it goes first */
    put(&t, k[1], 2, 1500);
    put(&t, k[2], 3, 1400);
    put(&t, k[3], 4, 1300);
    LG_CHECK(lg_ttltable_expired(&t, e, 1500));
    put(&t, k[4], 5, 1500);
    LG_CHECK(lg_ttltable_find(&t, k[0], NULL) == NULL);
    LG_CHECK(lg_ttltable_find(&t, k[3], NULL) != NULL);
    e->key = 0;
    LG_CHECK(!lg_ttltable_expired(&t, e, 99999)); /* empty: never expired */
    lg_ttltable_fini(&t);
    return 0;
}

LG_TEST_MAIN(test_sizes, test_find_and_evict, test_expiry)
