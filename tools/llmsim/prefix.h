/*
 * prefix.h: llmsim's prefix cache, a bounded LRU set of block keys.
 *
 * Keys are computed by lg_sim_prefix_hasher (one per prompt): block i's key
 * hashes the whole text up to the end of block i, so a block can only match
 * when everything before it matched. The cache's arrays use the layout of
 * llmsim_shm.h, so they can live in the shared state mapping where an oracle
 * policy reads them.
 */
#ifndef LG_SIM_PREFIX_H
#define LG_SIM_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llmsim_shm.h"

/* Keys of a prompt's whole blocks, built incrementally from text pieces. */
struct lg_sim_prefix_hasher {
    struct lg_hstream hash; /* of every byte fed so far */
    size_t block_bytes; /* 0 = no keys are produced */
    size_t fill;        /* bytes fed into the current block */
    uint64_t *keys;     /* owned; lg_sim_prefix_hasher_take() hands them over */
    uint32_t nkeys;
    uint32_t cap;
    uint32_t max_keys; /* keys beyond are not kept (the rest of the prompt never hits) */
};

void lg_sim_prefix_hasher_init(struct lg_sim_prefix_hasher *hs, uint32_t block_tokens,
                               uint32_t max_keys);
void lg_sim_prefix_hasher_feed(struct lg_sim_prefix_hasher *hs, const void *data, size_t len);
/* Hands the keys array (malloc'ed, may be NULL when there are none) to the caller. */
uint64_t *lg_sim_prefix_hasher_take(struct lg_sim_prefix_hasher *hs, uint32_t *nkeys);
void lg_sim_prefix_hasher_free(struct lg_sim_prefix_hasher *hs);

struct lg_sim_prefix {
    struct llmsim_shm_block *blocks; /* cap entries; owned unless external */
    uint32_t *table;                 /* mask + 1 slots: index + 1 of a block, 0 = empty */
    uint32_t cap;                    /* 0 = caching disabled */
    uint32_t mask;
    uint32_t used; /* entries in use; entries [0, used) are allocated */
    uint32_t mru;  /* most recently used entry, index + 1; 0 = empty */
    uint32_t lru;  /* least recently used entry, index + 1 */
    bool external; /* arrays belong to the caller (the shared mapping) */
};

/* Table slots for a cache of `cap` blocks: a power of two >= 2 * cap. */
uint32_t lg_sim_prefix_table_slots(uint32_t cap);

/*
 * Initialises an empty cache of `cap` blocks. With blocks and table non-NULL
 * (sized cap and lg_sim_prefix_table_slots(cap), zeroed) the cache uses that
 * memory and never frees it; otherwise it allocates its own.
 */
int lg_sim_prefix_init(struct lg_sim_prefix *p, uint32_t cap, struct llmsim_shm_block *blocks,
                       uint32_t *table);
void lg_sim_prefix_free(struct lg_sim_prefix *p);

/* Leading keys present in the cache; touches nothing. */
uint32_t lg_sim_prefix_match(const struct lg_sim_prefix *p, const uint64_t *keys, uint32_t n);

/* Same, and marks the matched blocks most recently used. */
uint32_t lg_sim_prefix_lookup(struct lg_sim_prefix *p, const uint64_t *keys, uint32_t n);

/* Adds (or refreshes) every key, in order, evicting least recently used blocks. */
void lg_sim_prefix_insert(struct lg_sim_prefix *p, const uint64_t *keys, uint32_t n);

bool lg_sim_prefix_contains(const struct lg_sim_prefix *p, uint64_t key);

#endif /* LG_SIM_PREFIX_H */
