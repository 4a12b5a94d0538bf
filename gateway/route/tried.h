/*
 * tried.h: the backends a request has tried, by their index in its model's
 * route (route->backends[i]), so that a retry, a hedge's duplicate or a
 * stream's continuation goes elsewhere.
 *
 * Exact for a route of any length (a model may have as many replicas as
 * the configuration holds backends): indices 0..63 sit in one word inside
 * the request, so a fleet of up to 64 replicas never allocates; the first
 * time a backend past index 63 is tried, the rest of the set is allocated,
 * sized to the route.
 */
#ifndef LG_TRIED_H
#define LG_TRIED_H

#include "base/lg_core.h"

struct lg_tried {
    uint64_t low;   /* bit i: route->backends[i] tried (i < 64) */
    uint64_t *high; /* owned: bit i - 64 for i >= 64, nhigh words; NULL until one is tried */
    uint32_t nhigh; /* words in high */
    uint32_t count; /* backends tried */
};

/* Was route->backends[i] tried? t NULL: none was. */
static inline bool
lg_tried_has(const struct lg_tried *t, size_t i)
{
    if (t == NULL) {
        return false;
    }
    if (i < 64) {
        return (t->low >> i) & 1u;
    }
    i -= 64;
    return i / 64 < t->nhigh && ((t->high[i / 64] >> (i % 64)) & 1u);
}

/* How many backends were tried (0 for NULL). */
static inline uint32_t
lg_tried_count(const struct lg_tried *t)
{
    return t != NULL ? t->count : 0;
}

/*
 * Marks route->backends[i] tried, in a route of n backends: past index 63
 * the words for the whole route are allocated the first time (lg_xcalloc,
 * which aborts rather than return NULL; a few bytes per request, in fleets
 * of more than 64 replicas only).
 */
void lg_tried_add(struct lg_tried *t, size_t i, size_t n);

/* Forgets route->backends[i] (the attempt did not count: a keep-alive race). */
void lg_tried_del(struct lg_tried *t, size_t i);

/* Empties t and frees what it held; t stays usable. Safe to call twice. */
void lg_tried_clear(struct lg_tried *t);

#endif /* LG_TRIED_H */
