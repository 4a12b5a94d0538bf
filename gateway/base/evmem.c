/*
 * evmem.c: libevent's allocations through a per-thread cache of its small
 * buffer chains.
 *
 * libevent allocates a 1 KiB chain (its smallest on 64-bit, header
 * included) for every read reserved into a bufferevent's input and for
 * every small message queued to an output, and frees it once drained:
 * about three allocations and four frees per proxied request. A worker
 * frees them in bursts (a loop pass serves many connections), more than
 * glibc's per-thread cache of 7 chunks per size holds, so most of them went
 * through the arena: about 210 instructions a malloc and 150 a free. Here
 * each thread keeps up to EVMEM_CACHE_MAX freed chunks of that size and
 * hands them back to libevent's next allocation of it, LIFO (the one just
 * freed is still in the cache).
 *
 * Every block is glibc's own (malloc's, its usable size read back with
 * malloc_usable_size), so memory libevent returns to its caller (a line of
 * evbuffer_readln) may still go to free(), and a block allocated on one
 * thread may be freed on another (it joins that thread's cache). A thread's
 * cache is freed when it exits. Under AddressSanitizer nothing is installed:
 * a reused chunk would hide a use after free.
 *
 * Owns: each thread's cached chunks until that thread exits.
 */
#include "base/evmem.h"

#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include <event2/event.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EVMEM_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define EVMEM_OFF 1
#endif
#endif

#define EVMEM_SIZE      1024 /* libevent's MIN_BUFFER_SIZE on 64-bit: a chain's allocation */
#define EVMEM_CACHE_MAX 128  /* chunks a thread keeps (about 130 KiB at most) */

struct evmem_free {
    struct evmem_free *next;
};

struct evmem_cache {
    struct evmem_free *head;
    unsigned n;
    bool keyed; /* the exit destructor is set for this thread */
};

static __thread struct evmem_cache evmem_cache;
static pthread_key_t evmem_key;
static size_t evmem_usable; /* malloc_usable_size() of a malloc(EVMEM_SIZE) */

/* A thread's cached chunks back to malloc, when the thread exits. */
static void
evmem_thread_exit(void *arg)
{
    struct evmem_cache *c = arg;

    while (c->head != NULL) {
        struct evmem_free *f = c->head;

        c->head = f->next;
        free(f);
    }
    c->n = 0;
}

static void *
evmem_malloc(size_t n)
{
    struct evmem_cache *c = &evmem_cache;

    if (n > EVMEM_SIZE / 2 && n <= evmem_usable && c->head != NULL) {
        struct evmem_free *f = c->head;

        c->head = f->next;
        c->n--;
        return f;
    }
    return malloc(n);
}

static void *
evmem_realloc(void *p, size_t n)
{
    return realloc(p, n);
}

static void
evmem_release(void *p)
{
    struct evmem_cache *c = &evmem_cache;

    if (p == NULL) {
        return;
    }
    if (c->n < EVMEM_CACHE_MAX && malloc_usable_size(p) == evmem_usable) {
        struct evmem_free *f = p;

        if (!c->keyed) {
            /* the first chunk this thread keeps: free them all at its exit */
            if (pthread_setspecific(evmem_key, c) != 0) {
                free(p);
                return;
            }
            c->keyed = true;
        }
        f->next = c->head;
        c->head = f;
        c->n++;
        return;
    }
    free(p);
}

bool
lg_evmem_install(void)
{
#ifdef EVMEM_OFF
    return false;
#else
    void *probe = malloc(EVMEM_SIZE);

    if (probe == NULL) {
        return false;
    }
    evmem_usable = malloc_usable_size(probe);
    free(probe);
    if (pthread_key_create(&evmem_key, evmem_thread_exit) != 0) {
        return false;
    }
    event_set_mem_functions(evmem_malloc, evmem_realloc, evmem_release);
    return true;
#endif
}
