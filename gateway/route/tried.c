/*
 * tried.c: the set of backends a request has tried (see tried.h).
 *
 * Owns: each set's words past the first (t->high), freed by lg_tried_clear().
 * Invariant: t->count is the number of bits set in low and high.
 */
#include "route/tried.h"

#include <stdlib.h>
#include <string.h>

void
lg_tried_add(struct lg_tried *t, size_t i, size_t n)
{
    uint64_t *w, bit;

    if (i < 64) {
        w = &t->low;
        bit = 1ull << i;
    } else {
        size_t word = (i - 64) / 64;

        if (word >= t->nhigh) {
            /* sized to the route (and to i, should a caller pass a shorter n) */
            size_t words = (LG_MAX(n, i + 1) - 64 + 63) / 64;

            t->high = lg_xrealloc(t->high, words * sizeof(*t->high));
            memset(t->high + t->nhigh, 0, (words - t->nhigh) * sizeof(*t->high));
            t->nhigh = (uint32_t)words;
        }
        w = &t->high[word];
        bit = 1ull << ((i - 64) % 64);
    }
    t->count += (*w & bit) == 0;
    *w |= bit;
}

void
lg_tried_del(struct lg_tried *t, size_t i)
{
    uint64_t *w, bit;

    if (i < 64) {
        w = &t->low;
        bit = 1ull << i;
    } else if ((i - 64) / 64 < t->nhigh) {
        w = &t->high[(i - 64) / 64];
        bit = 1ull << ((i - 64) % 64);
    } else {
        return;
    }
    t->count -= (*w & bit) != 0;
    *w &= ~bit;
}

void
lg_tried_clear(struct lg_tried *t)
{
    free(t->high);
    memset(t, 0, sizeof(*t));
}
