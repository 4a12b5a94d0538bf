/*
 * shm.h: the writer side of llmsim's shared state (--state-shm PATH); the
 * layout and the reader side are in llmsim_shm.h.
 */
#ifndef LG_SIM_SHM_H
#define LG_SIM_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "llmsim_shm.h"

#define LG_SIM_SHM_WAIT_CAP 65536u /* waiting ring entries (a power of two) */

struct lg_sim_shm {
    struct llmsim_shm *map; /* owned mapping; NULL = disabled */
    size_t size;
    int depth;        /* nesting of begin/end */
    struct llmsim_shm_slot *slot; /* slots entries */
    struct llmsim_shm_waiter *ring;
    struct llmsim_shm_block *blocks;
    uint32_t *table;
};

/*
 * Creates (or truncates) path, sizes it for the given slots and cache
 * blocks and maps it shared. The header is filled but `magic` stays 0 until
 * lg_sim_shm_publish_ready(). Logs and returns LG_ERR on failure.
 */
int lg_sim_shm_open(struct lg_sim_shm *s, const char *path, const char *name, uint32_t slots,
                    uint32_t cache_blocks, uint32_t block_tokens);
void lg_sim_shm_publish_ready(struct lg_sim_shm *s);
void lg_sim_shm_close(struct lg_sim_shm *s);

/* Brackets a change: readers retry while it is in progress. Nests. */
static inline void
lg_sim_shm_begin(struct lg_sim_shm *s)
{
    if (s->map == NULL || s->depth++ > 0) {
        return;
    }
    __atomic_store_n(&s->map->seq, s->map->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static inline void
lg_sim_shm_end(struct lg_sim_shm *s)
{
    if (s->map == NULL || --s->depth > 0) {
        return;
    }
    __atomic_store_n(&s->map->seq, s->map->seq + 1, __ATOMIC_RELEASE);
}

#endif /* LG_SIM_SHM_H */
