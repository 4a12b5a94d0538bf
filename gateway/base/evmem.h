/*
 * evmem.h: libevent's allocations through a per-thread cache of its small
 * buffer chains (evmem.c).
 */
#ifndef LG_EVMEM_H
#define LG_EVMEM_H

#include <stdbool.h>

/*
 * Gives libevent the cache's allocation functions. Call once, before
 * anything of libevent allocates (first thing in main). False where nothing
 * was installed (a sanitizer build, or no memory): libevent keeps malloc.
 */
bool lg_evmem_install(void);

#endif
