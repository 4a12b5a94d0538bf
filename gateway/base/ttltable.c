/*
 * ttltable.c: a set-associative table with expiry (ttltable.h).
 */
#include "base/ttltable.h"

#include <stdlib.h>

void
lg_ttltable_init(struct lg_ttltable *t, size_t entries, uint64_t ttl_ns)
{
    t->nsets = 1;
    while (t->nsets * LG_TTLTABLE_WAYS < entries) {
        t->nsets *= 2;
    }
    t->slot = lg_xcalloc(t->nsets * LG_TTLTABLE_WAYS, sizeof(*t->slot));
    t->ttl_ns = ttl_ns;
}

void
lg_ttltable_fini(struct lg_ttltable *t)
{
    free(t->slot);
    t->slot = NULL;
    t->nsets = 0;
}

struct lg_ttl_entry *
lg_ttltable_find(struct lg_ttltable *t, uint64_t key, struct lg_ttl_entry **victim)
{
    struct lg_ttl_entry *set = &t->slot[(lg_mix64(key) & (t->nsets - 1)) * LG_TTLTABLE_WAYS];
    struct lg_ttl_entry *v = NULL;

    for (size_t w = 0; w < LG_TTLTABLE_WAYS; w++) {
        if (set[w].key == key) {
            return &set[w];
        }
        if (v == NULL || (v->key != 0 && (set[w].key == 0 || set[w].seen_ns < v->seen_ns))) {
            v = &set[w];
        }
    }
    if (victim != NULL) {
        *victim = v;
    }
    return NULL;
}

size_t
lg_ttltable_count(const struct lg_ttltable *t)
{
    size_t n = 0;

    for (size_t i = 0; i < lg_ttltable_size(t); i++) {
        n += t->slot[i].key != 0;
    }
    return n;
}
