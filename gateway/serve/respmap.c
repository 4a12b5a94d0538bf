/*
 * respmap.c: response id -> the backend that made it (respmap.h).
 *
 * A mutex around a base/ttltable.h table. An entry is a 64-bit hash of
 * the id (two ids sharing one hash would send a follow-up where the other
 * was made: the engine there answers that it does not know it), the
 * backend's id and the time it was written.
 */
#include "serve/respmap.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/ttltable.h"

struct lg_respmap {
    pthread_mutex_t lock;
    struct lg_ttltable table; /* value: the backend's id */
};

struct lg_respmap *
lg_respmap_new(size_t entries, uint64_t ttl_ns)
{
    struct lg_respmap *m = lg_xcalloc(1, sizeof(*m));

    lg_ttltable_init(&m->table, entries, ttl_ns);
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
    lg_ttltable_fini(&m->table);
    free(m);
}

static uint64_t
respmap_key(const char *id, size_t n)
{
    return lg_mix64(lg_hash64(id, n, LG_HASH64_INIT)) | 1;
}

void
lg_respmap_put(struct lg_respmap *m, const char *id, size_t n, uint32_t backend_id,
               uint64_t now_ns)
{
    uint64_t key;
    struct lg_ttl_entry *e, *victim;

    if (m == NULL || n == 0) {
        return;
    }
    key = respmap_key(id, n);
    pthread_mutex_lock(&m->lock);
    e = lg_ttltable_find(&m->table, key, &victim);
    if (e == NULL) {
        e = victim;
        e->key = key;
    }
    e->value = backend_id;
    e->seen_ns = now_ns;
    pthread_mutex_unlock(&m->lock);
}

int
lg_respmap_get(struct lg_respmap *m, const char *id, size_t n, uint64_t now_ns,
               uint32_t *backend_id)
{
    struct lg_ttl_entry *e;
    int rc = LG_EDECLINED;

    if (m == NULL || n == 0) {
        return LG_EDECLINED;
    }
    pthread_mutex_lock(&m->lock);
    e = lg_ttltable_find(&m->table, respmap_key(id, n), NULL);
    if (e != NULL) {
        if (!lg_ttltable_expired(&m->table, e, now_ns)) {
            *backend_id = e->value;
            rc = LG_OK;
        } else {
            e->key = 0; /* expired */
        }
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

size_t
lg_respmap_count(struct lg_respmap *m)
{
    size_t n;

    pthread_mutex_lock(&m->lock);
    n = lg_ttltable_count(&m->table);
    pthread_mutex_unlock(&m->lock);
    return n;
}
