/*
 * backend_view.h: what a routing policy sees of a backend (backend_view.c).
 */
#ifndef LG_BACKEND_VIEW_H
#define LG_BACKEND_VIEW_H

#include "base/lg_core.h"

struct lg_backend;
struct lg_backend_view;
struct lg_engine_model_view;
struct lg_est_prior;

/*
 * Fills a plugin view of b at now_ns: live counts, engine sample blended
 * with in-flight (scrape_interval_ns tells how old is stale), estimates read
 * against the route's prior; and m, the engine model's outputs there. The
 * view borrows b's name; its model pointer is left NULL: the caller lends m
 * to the policies that asked for it.
 */
void lg_backend_view_fill(const struct lg_backend *b, uint64_t now_ns,
                          const struct lg_est_prior *prior, uint64_t scrape_interval_ns,
                          uint64_t slow_start_ns, struct lg_backend_view *v,
                          struct lg_engine_model_view *m);

/* How long a thread reuses a view whose state did not change (backend_view.c). */
#define LG_VIEW_REUSE_NS (1000 * 1000)

/*
 * lg_backend_view_fill(), or the same view this thread filled less than
 * LG_VIEW_REUSE_NS before now_ns, when nothing it reads of b has changed
 * since and prior and the settings are the same.
 */
void lg_backend_view_get(const struct lg_backend *b, uint64_t now_ns,
                         const struct lg_est_prior *prior, uint64_t scrape_interval_ns,
                         uint64_t slow_start_ns, struct lg_backend_view *v,
                         struct lg_engine_model_view *m);

/* Room in this thread's cache for a route of n backends (a pick's, first). */
void lg_backend_view_reserve(size_t n);

#endif /* LG_BACKEND_VIEW_H */
