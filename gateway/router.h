/*
 * router.h: picks a backend for a request from live per-backend state.
 *
 * The router is the seam between the proxy and routing policies: the proxy
 * describes the request (struct lg_route_req), the router filters the model's
 * backends down to candidates (available, under max in-flight, not tried
 * already) and asks the configured policy to pick one, with an explanation
 * for the access log.
 */
#ifndef LG_ROUTER_H
#define LG_ROUTER_H

#include "lg_core.h"

struct lg_backend;
struct lg_config;
struct lg_model_route;

struct lg_route_req {
    const char *model;
    const char *path;
    bool stream;
    uint64_t prompt_bytes;    /* bytes of prompt text */
    uint32_t max_tokens;      /* 0 = not given */
    uint64_t prefix_hash;     /* hash of the first prefix_bytes of the prompt; 0 = none */
    uint64_t session_hash;    /* hash of the session header's value; 0 = none */
};

#define LG_ROUTE_EXPLAIN_BYTES 512

struct lg_route_result {
    struct lg_backend *backend;           /* borrowed from the fleet */
    const char *policy;                   /* static or owned by the router */
    const char *reason;                   /* static string */
    uint32_t retry_after_ms;              /* on LG_EBUSY: when a backend may be back */
    char explain[LG_ROUTE_EXPLAIN_BYTES]; /* JSON array of candidate score inputs */
};

struct lg_router;

/* Creates the router for conf (policy by name); errors are logged. */
int lg_router_new(const struct lg_config *conf, struct lg_router **out);
void lg_router_free(struct lg_router *r);

/*
 * Picks one of route->backends, skipping those whose bit is set in
 * `tried_mask` (bit i = route->backends[i]). Returns LG_OK with out filled,
 * or LG_EBUSY when no candidate is available (out->reason says why).
 */
int lg_router_pick(struct lg_router *r, const struct lg_model_route *route,
                   const struct lg_route_req *req, uint64_t tried_mask,
                   struct lg_route_result *out);

/* Is any backend of route still a candidate (available, not tried)? */
bool lg_router_has_candidate(const struct lg_model_route *route, uint64_t tried_mask);

#endif /* LG_ROUTER_H */
