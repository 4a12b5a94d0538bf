/*
 * router.c: candidate filtering and the round-robin policy.
 *
 * Owns: struct lg_router (one per fleet). Borrows: backends of the fleet, for
 * the duration of lg_router_pick().
 */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "router.h"

struct lg_router {
    char *policy;
    uint64_t rr_next; /* atomic: round-robin cursor shared by the workers */
};

int
lg_router_new(const struct lg_config *conf, struct lg_router **out)
{
    struct lg_router *r;
    const char *policy = conf->routing.policy ? conf->routing.policy : "round_robin";

    if (strcmp(policy, "round_robin") != 0) {
        LG_ERROR("routing policy \"%s\" is not known (known: round_robin)", policy);
        return LG_EINVAL;
    }
    r = lg_xcalloc(1, sizeof(*r));
    r->policy = lg_xstrdup(policy);
    *out = r;
    return LG_OK;
}

void
lg_router_free(struct lg_router *r)
{
    if (r == NULL) {
        return;
    }
    free(r->policy);
    free(r);
}

static bool
router_is_candidate(const struct lg_backend *b, size_t i, uint64_t tried_mask, uint64_t now)
{
    if (i < 64 && (tried_mask & (1ull << i))) {
        return false;
    }
    if (!lg_backend_is_available(b, now)) {
        return false;
    }
    return b->conf.max_inflight == 0 || lg_backend_inflight(b) < b->conf.max_inflight;
}

bool
lg_router_has_candidate(const struct lg_model_route *route, uint64_t tried_mask)
{
    uint64_t now = lg_now_ns();

    for (size_t i = 0; i < route->n; i++) {
        if (router_is_candidate(route->backends[i], i, tried_mask, now)) {
            return true;
        }
    }
    return false;
}

int
lg_router_pick(struct lg_router *r, const struct lg_model_route *route,
               const struct lg_route_req *req, uint64_t tried_mask, struct lg_route_result *out)
{
    uint64_t now = lg_now_ns();
    uint64_t start = __atomic_fetch_add(&r->rr_next, 1, __ATOMIC_RELAXED);
    size_t n = route->n;

    size_t nfull = 0;
    uint64_t soonest = UINT64_MAX;

    out->backend = NULL;
    out->policy = r->policy;
    out->explain[0] = '\0';
    out->retry_after_ms = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = (size_t)((start + k) % n);
        struct lg_backend *b = route->backends[i];

        if (router_is_candidate(b, i, tried_mask, now)) {
            out->backend = b;
            out->reason = k == 0 ? "next_in_turn" : "next_available";
            return LG_OK;
        }
        if (i < 64 && (tried_mask & (1ull << i))) {
            continue;
        }
        if (lg_backend_is_available(b, now)) {
            nfull++; /* available, but at max_inflight */
        } else if (__atomic_load_n(&b->health, __ATOMIC_RELAXED) == LG_BACKEND_UP) {
            soonest = LG_MIN(soonest, __atomic_load_n(&b->retry_after_until_ns, __ATOMIC_RELAXED));
        }
    }
    /* "full" and "down" differ for the caller: the first is worth waiting for */
    if (nfull > 0) {
        out->reason = "all_backends_at_max_inflight";
        out->retry_after_ms = 1000;
    } else {
        out->reason = "no_available_backend";
        out->retry_after_ms = soonest == UINT64_MAX
                                  ? 1000
                                  : (uint32_t)LG_MIN((soonest - now) / LG_NS_PER_MS + 1, 3600000);
    }
    return LG_EBUSY;
}
