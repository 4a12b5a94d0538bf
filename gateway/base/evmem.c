/*
 * evmem.c: libevent's allocations through a per-thread cache of small
 * chunks.
 *
 * libevent allocates a 1 KiB chain (its smallest on 64-bit, header
 * included) for every read reserved into a bufferevent's input and for
 * every small message queued to an output, and frees it once drained, and
 * a request's body buffer (its struct evbuffer) is allocated and freed per
 * request too: about four allocations and five frees per proxied request.
 * A worker frees them in bursts (a loop pass serves many connections), more
 * than glibc's per-thread cache of 7 chunks per size holds, so most of them
 * went through the arena: about 210 instructions a malloc and 150 a free.
 * Here each thread keeps freed chunks of up to a chain's size, by glibc's
 * chunk size (EVMEM_BIN_MAX of a size, EVMEM_BYTES_MAX in all), and hands
 * them back to libevent's next allocation of that size, LIFO (the one just
 * freed first).
 *
 * Every block is glibc's own (malloc's, its usable size read back with
 * malloc_usable_size), so memory libevent returns to its caller (a line of
 * evbuffer_readln) may still go to free(), and a block allocated on one
 * thread may be freed on another (it joins that thread's cache). A thread's
 * cache is freed when it exits. Under AddressSanitizer and ThreadSanitizer
 * nothing is installed: a reused chunk would hide a use after free.
 *
 * Owns: each thread's cached chunks until that thread exits.
 */
#include "base/evmem.h"

#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <event2/event.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EVMEM_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define EVMEM_OFF 1
#endif
#endif

#ifndef EVMEM_OFF
#define EVMEM_SIZE      1024 /* libevent's MIN_BUFFER_SIZE on 64-bit: a chain's allocation */
#define EVMEM_BINS      66   /* one per glibc chunk size up to a chain's: (usable + 8) / 16 */
#define EVMEM_BIN_MAX   128  /* chunks a thread keeps of one size */
#define EVMEM_BYTES_MAX (192 * 1024) /* and of all sizes together */

struct evmem_free {
    struct evmem_free *next;
};

struct evmem_cache {
    struct evmem_free *head[EVMEM_BINS];
    uint16_t n[EVMEM_BINS];
    size_t bytes;
    bool keyed; /* the exit destructor is set for this thread */
};

/* initial-exec: lg_core is linked into executables only, and its code is
 * PIC; the general model's __tls_get_addr sequence costs each call here a
 * frame of saved registers even where the linker relaxes it */
static __thread struct evmem_cache evmem_cache __attribute__((tls_model("initial-exec")));
static pthread_key_t evmem_key;
static size_t evmem_usable; /* malloc_usable_size() of a malloc(EVMEM_SIZE): the largest kept */

/*
 * The bin of a usable size (glibc's chunk size less its 8-byte header: 24,
 * 40, 56 ... bytes), or EVMEM_BINS for one not kept.
 */
static inline unsigned
evmem_bin(size_t usable)
{
    return usable <= evmem_usable && (usable + 8) % 16 == 0 ? (unsigned)((usable + 8) / 16)
                                                            : EVMEM_BINS;
}

/* What malloc(n) would give: its usable size (glibc's request2size, less the header). */
static inline size_t
evmem_usable_of(size_t n)
{
    size_t chunk = (n + 8 + 15) & ~(size_t)15;

    return (chunk < 32 ? 32 : chunk) - 8;
}

/* A thread's cached chunks back to malloc, when the thread exits. */
static void
evmem_thread_exit(void *arg)
{
    struct evmem_cache *c = arg;

    for (unsigned b = 0; b < EVMEM_BINS; b++) {
        while (c->head[b] != NULL) {
            struct evmem_free *f = c->head[b];

            c->head[b] = f->next;
            free(f);
        }
        c->n[b] = 0;
    }
    c->bytes = 0;
}

static void *
evmem_malloc(size_t n)
{
    struct evmem_cache *c = &evmem_cache;

    if (n <= evmem_usable) {
        size_t usable = evmem_usable_of(n);
        unsigned b = evmem_bin(usable);

        if (b < EVMEM_BINS && c->head[b] != NULL) {
            struct evmem_free *f = c->head[b];

            c->head[b] = f->next;
            c->n[b]--;
            c->bytes -= usable;
            return f;
        }
    }
    return malloc(n);
}

static void *
evmem_realloc(void *p, size_t n)
{
    return realloc(p, n);
}

/* The first chunk a thread keeps: its cache is freed at its exit. False: keep nothing. */
static __attribute__((noinline)) bool
evmem_key_thread(struct evmem_cache *c)
{
    if (pthread_setspecific(evmem_key, c) != 0) {
        return false;
    }
    c->keyed = true;
    return true;
}

static void
evmem_release(void *p)
{
    struct evmem_cache *c = &evmem_cache;
    size_t usable;
    unsigned b;

    if (p == NULL) {
        return;
    }
    usable = malloc_usable_size(p);
    b = evmem_bin(usable);
    if (b < EVMEM_BINS && c->n[b] < EVMEM_BIN_MAX && c->bytes + usable <= EVMEM_BYTES_MAX
        && (c->keyed || evmem_key_thread(c))) {
        struct evmem_free *f = p;

        f->next = c->head[b];
        c->head[b] = f;
        c->n[b]++;
        c->bytes += usable;
        return;
    }
    free(p);
}

#endif /* EVMEM_OFF */

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
