/*
 * respmap.c: response id -> the backend that made it (respmap.h).
 *
 * Owns its slots and mutex. An entry is a 64-bit hash of the id (two ids
 * sharing one hash would send a follow-up where the other was made: the
 * engine there answers that it does not know it), the backend's id and
 * the time it was written.
 */
#include "serve/respmap.h"

#include <pthread.h>
#include <stdlib.h>

#define RESPMAP_WAYS 4

struct respmap_slot {
    uint64_t key; /* 0 = empty */
    uint64_t written_ns;
    uint32_t backend_id;
};

struct lg_respmap {
    pthread_mutex_t lock;
    struct respmap_slot *slot; /* nsets * RESPMAP_WAYS */
    size_t nsets;              /* a power of two */
    uint64_t ttl_ns;
};

struct lg_respmap *
lg_respmap_new(size_t entries, uint64_t ttl_ns)
{
    struct lg_respmap *m = lg_xcalloc(1, sizeof(*m));

    m->nsets = 1;
    while (m->nsets * RESPMAP_WAYS < entries) {
        m->nsets *= 2;
    }
    m->slot = lg_xcalloc(m->nsets * RESPMAP_WAYS, sizeof(*m->slot));
    m->ttl_ns = ttl_ns;
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

void
lg_respmap_free(struct lg_respmap *m)
{
    if (m == NULL) {
        return;
    }
    pthread_mutex_destroy(&m->lock);
    free(m->slot);
    free(m);
}

static uint64_t
respmap_key(const char *id, size_t n)
{
    return lg_mix64(lg_hash64(id, n, LG_HASH64_INIT)) | 1;
}

static struct respmap_slot *
respmap_set(struct lg_respmap *m, uint64_t key)
{
    return &m->slot[(lg_mix64(key ^ 0x5bd1e995u) & (m->nsets - 1)) * RESPMAP_WAYS];
}

void
lg_respmap_put(struct lg_respmap *m, const char *id, size_t n, uint32_t backend_id,
               uint64_t now_ns)
{
    uint64_t key;
    struct respmap_slot *set, *e = NULL;

    if (m == NULL || n == 0) {
        return;
    }
    key = respmap_key(id, n);
    pthread_mutex_lock(&m->lock);
    set = respmap_set(m, key);
    for (size_t w = 0; w < RESPMAP_WAYS && e == NULL; w++) {
        if (set[w].key == key) {
            e = &set[w];
        }
    }
    for (size_t w = 0; w < RESPMAP_WAYS && e == NULL; w++) {
        if (set[w].key == 0 || now_ns - set[w].written_ns > m->ttl_ns) {
            e = &set[w];
        }
    }
    if (e == NULL) {
        e = &set[0];
        for (size_t w = 1; w < RESPMAP_WAYS; w++) {
            if (set[w].written_ns < e->written_ns) {
                e = &set[w];
            }
        }
    }
    e->key = key;
    e->backend_id = backend_id;
    e->written_ns = now_ns;
    pthread_mutex_unlock(&m->lock);
}

int
lg_respmap_get(struct lg_respmap *m, const char *id, size_t n, uint64_t now_ns,
               uint32_t *backend_id)
{
    uint64_t key;
    struct respmap_slot *set;
    int rc = LG_EDECLINED;

    if (m == NULL || n == 0) {
        return LG_EDECLINED;
    }
    key = respmap_key(id, n);
    pthread_mutex_lock(&m->lock);
    set = respmap_set(m, key);
    for (size_t w = 0; w < RESPMAP_WAYS; w++) {
        if (set[w].key == key) {
            if (now_ns - set[w].written_ns <= m->ttl_ns) {
                *backend_id = set[w].backend_id;
                rc = LG_OK;
            } else {
                set[w].key = 0; /* expired */
            }
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

size_t
lg_respmap_count(struct lg_respmap *m)
{
    size_t n = 0;

    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->nsets * RESPMAP_WAYS; i++) {
        n += m->slot[i].key != 0;
    }
    pthread_mutex_unlock(&m->lock);
    return n;
}
