/*
 * test_evmem.c: libevent's allocations through the per-thread chain cache
 * (base/evmem.c). A chain libevent frees is handed back to its next
 * allocation of that size on the same thread; every byte of buffers built
 * from reused chains is what was written; more freed chunks than the cache
 * keeps go back to malloc; memory libevent hands its caller (a line of
 * evbuffer_readln) may be freed with free() even when it came from the
 * cache; a thread that keeps chunks and exits gives them back (valgrind's
 * memcheck finds nothing lost). In a sanitizer build nothing is installed
 * and the same buffers still hold their bytes.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "base/evmem.h"
#include "lg_test.h"

#define MANY 300 /* more buffers than the cache keeps chunks */

static bool installed;

/*
 * Whether malloc's usable sizes are glibc's chunk sizes (less the header),
 * the only ones the cache keeps: not under valgrind's memcheck, whose
 * malloc_usable_size() is the size asked for.
 */
static bool
glibc_sizes(void)
{
    void *p = malloc(1024);
    bool glibc = p != NULL && malloc_usable_size(p) == 1032;

    free(p);
    return glibc;
}

/* The address of a buffer's first byte (its one chain's data). */
static const void *
first_byte(struct evbuffer *b)
{
    struct evbuffer_iovec v;

    return evbuffer_peek(b, -1, NULL, &v, 1) >= 1 ? v.iov_base : NULL;
}

static int
test_install(void)
{
    /* first, before libevent allocates anything in this process */
    installed = lg_evmem_install();
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    LG_CHECK(installed);
#endif
    return 0;
}

static int
test_chain_reused(void)
{
    struct evbuffer *b = evbuffer_new();
    const void *first, *again;
    char out[100];

    LG_CHECK(b != NULL);
    LG_CHECK(evbuffer_add(b, "0123456789", 10) == 0);
    first = first_byte(b);
    LG_CHECK(evbuffer_drain(b, 10) == 0); /* the chain is freed */
    LG_CHECK(evbuffer_add(b, "abcdefghij", 10) == 0);
    again = first_byte(b);
    if (installed && glibc_sizes()) {
        LG_CHECK(again == first); /* the chunk just freed, handed back */
    }
    LG_CHECK(evbuffer_remove(b, out, sizeof(out)) == 10);
    LG_CHECK(memcmp(out, "abcdefghij", 10) == 0);
    evbuffer_free(b);
    /* a smaller size of its own (the buffer's struct): the same */
    b = evbuffer_new();
    LG_CHECK(b != NULL);
    first = b;
    evbuffer_free(b);
    b = evbuffer_new();
    if (installed && glibc_sizes()) {
        LG_CHECK((const void *)b == first);
    }
    evbuffer_free(b);
    return 0;
}

static int
test_many_buffers_keep_their_bytes(void)
{
    static struct evbuffer *bufs[MANY];
    char line[64], out[64];

    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < MANY; i++) {
            int n = snprintf(line, sizeof(line), "buffer %d of round %d", i, round);

            bufs[i] = evbuffer_new();
            LG_CHECK(bufs[i] != NULL);
            LG_CHECK(evbuffer_add(bufs[i], line, (size_t)n) == 0);
        }
        for (int i = 0; i < MANY; i++) {
            int n = snprintf(line, sizeof(line), "buffer %d of round %d", i, round);

            LG_CHECK(evbuffer_get_length(bufs[i]) == (size_t)n);
            LG_CHECK(evbuffer_remove(bufs[i], out, sizeof(out)) == n);
            LG_CHECK(memcmp(out, line, (size_t)n) == 0);
            evbuffer_free(bufs[i]); /* past the cache's bound: back to malloc */
        }
    }
    return 0;
}

static int
test_readln_freed_with_free(void)
{
    struct evbuffer *b = evbuffer_new();
    char text[700];
    size_t n;
    char *line;

    LG_CHECK(b != NULL);
    /* a freed chain in the cache, then a line whose allocation is of its size */
    LG_CHECK(evbuffer_add(b, "x", 1) == 0);
    LG_CHECK(evbuffer_drain(b, 1) == 0);
    memset(text, 'a', sizeof(text));
    text[600] = '\n';
    LG_CHECK(evbuffer_add(b, text, 601) == 0);
    line = evbuffer_readln(b, &n, EVBUFFER_EOL_LF);
    LG_CHECK(line != NULL && n == 600 && line[0] == 'a' && line[599] == 'a' && line[600] == '\0');
    free(line); /* what the caller of evbuffer_readln does */
    evbuffer_free(b);
    return 0;
}

static void *
thread_frees_chains(void *arg)
{
    struct evbuffer *bufs[16];

    (void)arg;
    for (int i = 0; i < 16; i++) {
        bufs[i] = evbuffer_new();
        if (bufs[i] == NULL || evbuffer_add(bufs[i], "thread", 6) != 0) {
            return (void *)1;
        }
    }
    for (int i = 0; i < 16; i++) {
        evbuffer_free(bufs[i]); /* kept by this thread's cache until it exits */
    }
    return NULL;
}

static int
test_thread_exit(void)
{
    for (int i = 0; i < 4; i++) {
        pthread_t t;
        void *rc = (void *)1;

        LG_CHECK(pthread_create(&t, NULL, thread_frees_chains, NULL) == 0);
        LG_CHECK(pthread_join(t, &rc) == 0);
        LG_CHECK(rc == NULL);
    }
    return 0;
}

LG_TEST_MAIN(test_install, test_chain_reused, test_many_buffers_keep_their_bytes,
             test_readln_freed_with_free, test_thread_exit)
