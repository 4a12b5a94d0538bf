/*
 * connlimit.c: connections per source address (see connlimit.h).
 *
 * Owns: the table, its entries (one per address with at least one open
 * connection; freed when the count drops to zero). The table is split into
 * stripes, each a small chained hash under its own mutex, so that accepts on
 * different workers rarely wait for each other.
 */
#include "serve/connlimit.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CONNLIMIT_STRIPES 64
#define CONNLIMIT_BUCKETS 256 /* per stripe */

struct connlimit_entry {
    uint8_t key[16]; /* IPv6 address, or IPv4 as ::ffff:a.b.c.d */
    uint32_t count;
    struct connlimit_entry *next;
};

struct connlimit_stripe {
    pthread_mutex_t lock;
    struct connlimit_entry *buckets[CONNLIMIT_BUCKETS];
};

struct lg_connlimit {
    struct connlimit_stripe stripes[CONNLIMIT_STRIPES];
};

struct lg_connlimit *
lg_connlimit_new(void)
{
    struct lg_connlimit *t = lg_xcalloc(1, sizeof(*t));

    for (size_t i = 0; i < CONNLIMIT_STRIPES; i++) {
        pthread_mutex_init(&t->stripes[i].lock, NULL);
    }
    return t;
}

void
lg_connlimit_free(struct lg_connlimit *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < CONNLIMIT_STRIPES; i++) {
        struct connlimit_stripe *s = &t->stripes[i];

        for (size_t b = 0; b < CONNLIMIT_BUCKETS; b++) {
            struct connlimit_entry *e = s->buckets[b], *next;

            for (; e != NULL; e = next) {
                next = e->next;
                free(e);
            }
        }
        pthread_mutex_destroy(&s->lock);
    }
    free(t);
}

/* The address as 16 bytes (IPv4-mapped for IPv4); false for other families. */
static bool
connlimit_key(const struct sockaddr *sa, uint8_t key[16])
{
    if (sa->sa_family == AF_INET) {
        memset(key, 0, 10);
        key[10] = 0xff;
        key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return true;
    }
    return false;
}

/* Finds the entry for key (creating it when `create`); *s is its locked stripe. */
static struct connlimit_entry **
connlimit_slot(struct lg_connlimit *t, const uint8_t key[16], struct connlimit_stripe **s)
{
    uint64_t h = lg_mix64(lg_hash64(key, 16, LG_HASH64_INIT));
    struct connlimit_entry **pp;

    *s = &t->stripes[h % CONNLIMIT_STRIPES];
    pthread_mutex_lock(&(*s)->lock);
    pp = &(*s)->buckets[(h / CONNLIMIT_STRIPES) % CONNLIMIT_BUCKETS];
    while (*pp != NULL && memcmp((*pp)->key, key, 16) != 0) {
        pp = &(*pp)->next;
    }
    return pp;
}

bool
lg_connlimit_acquire(struct lg_connlimit *t, const struct sockaddr *sa, uint32_t max)
{
    struct connlimit_stripe *s;
    struct connlimit_entry **pp;
    uint8_t key[16];
    bool ok = true;

    if (t == NULL || !connlimit_key(sa, key)) {
        return true;
    }
    pp = connlimit_slot(t, key, &s);
    if (*pp == NULL) {
        *pp = lg_xcalloc(1, sizeof(**pp));
        memcpy((*pp)->key, key, 16);
    }
    if (max > 0 && (*pp)->count >= max) {
        ok = false;
    } else {
        (*pp)->count++;
    }
    if ((*pp)->count == 0) {
        struct connlimit_entry *e = *pp;

        *pp = e->next;
        free(e);
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

void
lg_connlimit_release(struct lg_connlimit *t, const struct sockaddr *sa)
{
    struct connlimit_stripe *s;
    struct connlimit_entry **pp;
    uint8_t key[16];

    if (t == NULL || !connlimit_key(sa, key)) {
        return;
    }
    pp = connlimit_slot(t, key, &s);
    LG_BUG_ON(*pp == NULL || (*pp)->count == 0);
    if (--(*pp)->count == 0) {
        struct connlimit_entry *e = *pp;

        *pp = e->next;
        free(e);
    }
    pthread_mutex_unlock(&s->lock);
}

uint32_t
lg_connlimit_count(struct lg_connlimit *t, const struct sockaddr *sa)
{
    struct connlimit_stripe *s;
    struct connlimit_entry **pp;
    uint8_t key[16];
    uint32_t n;

    if (t == NULL || !connlimit_key(sa, key)) {
        return 0;
    }
    pp = connlimit_slot(t, key, &s);
    n = *pp != NULL ? (*pp)->count : 0;
    pthread_mutex_unlock(&s->lock);
    return n;
}
