/*
 * ttltable.h: a bounded table of 64-bit keys, each with a 32-bit value and
 * the time it was last written or seen, with expiry: 4-way sets, a key's set
 * picked by its hash, a new key taking an empty way, else the way written
 * longest ago (an expired entry is always older than a live one).
 *
 * The table holds no lock: its users keep one around it and whatever else
 * they keep beside it (serve/respmap.c, prefix_affinity in
 * route/policies.c). Entries are plain structs the user reads and writes;
 * key 0 marks an empty way.
 */
#ifndef LG_TTLTABLE_H
#define LG_TTLTABLE_H

#include "base/lg_core.h"

#define LG_TTLTABLE_WAYS 4

struct lg_ttl_entry {
    uint64_t key; /* 0 = empty */
    uint64_t seen_ns;
    uint32_t value;
};

struct lg_ttltable {
    struct lg_ttl_entry *slot; /* nsets * LG_TTLTABLE_WAYS */
    size_t nsets;              /* a power of two */
    uint64_t ttl_ns;
};

/* At least `entries` entries (the sets rounded up to a power of two), each kept ttl_ns. */
void lg_ttltable_init(struct lg_ttltable *t, size_t entries, uint64_t ttl_ns);
void lg_ttltable_fini(struct lg_ttltable *t);

/* Entries in all (used or not): slot[0 .. size). */
static inline size_t
lg_ttltable_size(const struct lg_ttltable *t)
{
    return t->nsets * LG_TTLTABLE_WAYS;
}

/* e is used and was last written or seen more than the ttl before now_ns. */
static inline bool
lg_ttltable_expired(const struct lg_ttltable *t, const struct lg_ttl_entry *e, uint64_t now_ns)
{
    return e->key != 0 && now_ns - e->seen_ns > t->ttl_ns;
}

/*
 * The entry of `key` (not 0), expired or not, or NULL; when NULL and victim
 * is not NULL, *victim is the way a new entry of key goes in: an empty one,
 * else the one seen longest ago (its old key and value still there, for the
 * caller to account for before overwriting it).
 */
struct lg_ttl_entry *lg_ttltable_find(struct lg_ttltable *t, uint64_t key,
                                      struct lg_ttl_entry **victim);

/* Entries in use, counting expired ones not yet replaced or cleared. */
size_t lg_ttltable_count(const struct lg_ttltable *t);

#endif /* LG_TTLTABLE_H */
