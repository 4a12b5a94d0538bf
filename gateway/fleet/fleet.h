/*
 * fleet.h: the backends of one configuration, indexed by model (fleet.c).
 */
#ifndef LG_FLEET_H
#define LG_FLEET_H

#include "base/lg_core.h"

struct lg_backend;
struct lg_config;
struct lg_health;
struct lg_model_route;
struct lg_router;

/*
 * How a fleet frees the router it was given (route/router.c's
 * lg_router_free): the fleet owns its router and knows nothing else of it.
 */
typedef void (*lg_fleet_router_free_fn)(struct lg_router *r);

/*
 * The fleet: every backend of one configuration and a model index. Refcounted
 * and immutable once built; workers hold the current one, requests hold the
 * one they started with.
 */
struct lg_fleet {
    int refcnt;                   /* atomic */
    struct lg_config *conf;       /* one reference, released with the fleet */
    struct lg_backend **backends; /* owned references */
    size_t nbackends;
    struct lg_model_route *models; /* sorted by name */
    size_t nmodels;
    struct lg_router *router;            /* owned: the routing pipeline (route/) */
    lg_fleet_router_free_fn router_free; /* frees router with the fleet */
    struct lg_health *health; /* owned: active checks and scrapes; NULL when off */
};

/*
 * Builds a fleet for conf with `nworkers` pool slots per backend, owning
 * `router` (may be NULL; freed with router_free, on failure too) and
 * starting its health thread. Backends of `prev` (may be NULL) with the same
 * name and URL are reused with their live state, so a reload keeps
 * statistics and pooled connections. The gateway, reloads and tests build
 * fleets with lg_router_fleet_new() (route/router.h), which makes the
 * router first.
 */
int lg_fleet_new(struct lg_config *conf, unsigned nworkers, const struct lg_fleet *prev,
                 struct lg_router *router, lg_fleet_router_free_fn router_free,
                 struct lg_fleet **out);
/*
 * f goes in force (control thread, before the workers are told): the
 * backends it kept from the previous fleet take f's settings for them
 * (lg_backend_reconf: weight, max_inflight, models, paths, keys, address...),
 * their live state staying. Until then they serve with the settings of the
 * fleet in force, so a reload refused after its fleet was built changes
 * nothing. f's own model index and health thread read f's settings.
 */
void lg_fleet_adopt(struct lg_fleet *f);
struct lg_fleet *lg_fleet_ref(struct lg_fleet *f);
/* f is no longer in force (a reload replaced it; control thread, f still
 * referenced): stops its health thread, whose checks, scrapes and peer fetches
 * the new fleet's thread now makes for the backends they share. Requests that
 * hold f finish on it; its priors stay as they were. */
void lg_fleet_retire(struct lg_fleet *f);
void lg_fleet_unref(struct lg_fleet *f);

/* The backends serving `model` (NULL if none). */
const struct lg_model_route *lg_fleet_find_model(const struct lg_fleet *f, const char *model);

#endif /* LG_FLEET_H */
