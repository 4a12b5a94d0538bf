/*
 * prefix.c: llmsim's prefix cache (bounded LRU set of block keys) and the
 * hasher that turns prompt text into block keys.
 *
 * Owns: its block and table arrays, unless they were lent (shared mapping).
 * Invariants: entries [0, used) are all in the LRU list and in the table;
 * the table uses linear probing and backward-shift deletion, so a reader
 * never needs tombstones (llmsim_shm_cached_blocks() probes it as is).
 */
#include "prefix.h"

#include <stdlib.h>
#include <string.h>

#include "base/lg_core.h"

/* ---- hasher ---------------------------------------------------------------- */

void
lg_sim_prefix_hasher_init(struct lg_sim_prefix_hasher *hs, uint32_t block_tokens, uint32_t max_keys)
{
    memset(hs, 0, sizeof(*hs));
    lg_hstream_init(&hs->hash);
    hs->block_bytes = (size_t)block_tokens * 4;
    hs->max_keys = max_keys;
}

static void
prefix_hasher_push(struct lg_sim_prefix_hasher *hs)
{
    if (hs->nkeys >= hs->max_keys) {
        return;
    }
    if (hs->nkeys == hs->cap) {
        hs->cap = hs->cap ? hs->cap * 2 : 16;
        hs->keys = lg_xrealloc(hs->keys, (size_t)hs->cap * sizeof(*hs->keys));
    }
    hs->keys[hs->nkeys++] = llmsim_shm_key(lg_hstream_value(&hs->hash));
}

void
lg_sim_prefix_hasher_feed(struct lg_sim_prefix_hasher *hs, const void *data, size_t len)
{
    const unsigned char *p = data;

    if (hs->block_bytes == 0 || hs->nkeys >= hs->max_keys) {
        return;
    }
    while (len > 0) {
        size_t k = LG_MIN(len, hs->block_bytes - hs->fill);

        lg_hstream_feed(&hs->hash, p, k);
        hs->fill += k;
        p += k;
        len -= k;
        if (hs->fill == hs->block_bytes) {
            prefix_hasher_push(hs);
            hs->fill = 0;
            if (hs->nkeys >= hs->max_keys) {
                return;
            }
        }
    }
}

uint64_t *
lg_sim_prefix_hasher_take(struct lg_sim_prefix_hasher *hs, uint32_t *nkeys)
{
    uint64_t *keys = hs->keys;

    *nkeys = hs->nkeys;
    hs->keys = NULL;
    hs->nkeys = hs->cap = 0;
    return keys;
}

void
lg_sim_prefix_hasher_free(struct lg_sim_prefix_hasher *hs)
{
    free(hs->keys);
    hs->keys = NULL;
    hs->nkeys = hs->cap = 0;
}

/* ---- cache ----------------------------------------------------------------- */

uint32_t
lg_sim_prefix_table_slots(uint32_t cap)
{
    uint32_t n = 2;

    while (n < 2 * (uint64_t)cap) {
        n *= 2;
    }
    return n;
}

int
lg_sim_prefix_init(struct lg_sim_prefix *p, uint32_t cap, struct llmsim_shm_block *blocks,
                   uint32_t *table)
{
    uint32_t slots = lg_sim_prefix_table_slots(cap);

    memset(p, 0, sizeof(*p));
    p->cap = cap;
    p->mask = slots - 1;
    if (cap == 0) {
        return LG_OK;
    }
    if (blocks != NULL && table != NULL) {
        p->blocks = blocks;
        p->table = table;
        p->external = true;
    } else {
        p->blocks = lg_xcalloc(cap, sizeof(*p->blocks));
        p->table = lg_xcalloc(slots, sizeof(*p->table));
    }
    return LG_OK;
}

void
lg_sim_prefix_free(struct lg_sim_prefix *p)
{
    if (!p->external) {
        free(p->blocks);
        free(p->table);
    }
    p->blocks = NULL;
    p->table = NULL;
    p->cap = p->used = 0;
}

/* Table slot holding `key`, or the empty slot where it would go. */
static uint32_t
prefix_slot(const struct lg_sim_prefix *p, uint64_t key, bool *found)
{
    uint32_t i = (uint32_t)llmsim_shm_mix(key) & p->mask;

    for (;;) {
        uint32_t e = p->table[i];

        if (e == 0) {
            *found = false;
            return i;
        }
        if (p->blocks[e - 1].key == key) {
            *found = true;
            return i;
        }
        i = (i + 1) & p->mask;
    }
}

bool
lg_sim_prefix_contains(const struct lg_sim_prefix *p, uint64_t key)
{
    bool found = false;

    if (p->cap == 0) {
        return false;
    }
    prefix_slot(p, key, &found);
    return found;
}

/* Removes table slot i, shifting later members of its probe run back. */
static void
prefix_table_delete(struct lg_sim_prefix *p, uint32_t i)
{
    uint32_t j = i;

    for (;;) {
        uint32_t e;
        uint32_t home;

        j = (j + 1) & p->mask;
        e = p->table[j];
        if (e == 0) {
            break;
        }
        home = (uint32_t)llmsim_shm_mix(p->blocks[e - 1].key) & p->mask;
        /* e may move to i only if its home is not cyclically within (i, j] */
        if (((j - home) & p->mask) >= ((j - i) & p->mask)) {
            p->table[i] = e;
            i = j;
        }
    }
    p->table[i] = 0;
}

static void
prefix_lru_unlink(struct lg_sim_prefix *p, uint32_t e)
{
    struct llmsim_shm_block *b = &p->blocks[e - 1];

    if (b->prev) {
        p->blocks[b->prev - 1].next = b->next;
    } else {
        p->mru = b->next;
    }
    if (b->next) {
        p->blocks[b->next - 1].prev = b->prev;
    } else {
        p->lru = b->prev;
    }
    b->prev = b->next = 0;
}

static void
prefix_lru_push(struct lg_sim_prefix *p, uint32_t e)
{
    struct llmsim_shm_block *b = &p->blocks[e - 1];

    b->prev = 0;
    b->next = p->mru;
    if (p->mru) {
        p->blocks[p->mru - 1].prev = e;
    }
    p->mru = e;
    if (p->lru == 0) {
        p->lru = e;
    }
}

uint32_t
lg_sim_prefix_match(const struct lg_sim_prefix *p, const uint64_t *keys, uint32_t n)
{
    uint32_t hits = 0;

    while (hits < n && lg_sim_prefix_contains(p, keys[hits])) {
        hits++;
    }
    return hits;
}

uint32_t
lg_sim_prefix_lookup(struct lg_sim_prefix *p, const uint64_t *keys, uint32_t n)
{
    uint32_t hits = 0;

    if (p->cap == 0) {
        return 0;
    }
    for (; hits < n; hits++) {
        bool found;
        uint32_t i = prefix_slot(p, keys[hits], &found);

        if (!found) {
            break;
        }
        prefix_lru_unlink(p, p->table[i]);
        prefix_lru_push(p, p->table[i]);
    }
    return hits;
}

void
lg_sim_prefix_insert(struct lg_sim_prefix *p, const uint64_t *keys, uint32_t n)
{
    if (p->cap == 0) {
        return;
    }
    for (uint32_t k = 0; k < n; k++) {
        bool found;
        uint32_t i = prefix_slot(p, keys[k], &found);
        uint32_t e;

        if (found) {
            prefix_lru_unlink(p, p->table[i]);
            prefix_lru_push(p, p->table[i]);
            continue;
        }
        if (p->used < p->cap) {
            e = ++p->used;
        } else {
            bool victim_found;
            uint32_t vi;

            e = p->lru;
            vi = prefix_slot(p, p->blocks[e - 1].key, &victim_found);
            LG_BUG_ON(!victim_found);
            prefix_lru_unlink(p, e);
            prefix_table_delete(p, vi);
            /* the deletion may have shifted the empty slot meant for the new key */
            i = prefix_slot(p, keys[k], &found);
        }
        p->blocks[e - 1].key = keys[k];
        p->table[i] = e;
        prefix_lru_push(p, e);
    }
}
