/*
 * quota_types.h: a request's part in its key's limits (types only: quota.h
 * has the functions); the request holds one (client_types.h) only when its
 * key has a rate or a token budget.
 */
#ifndef LG_QUOTA_TYPES_H
#define LG_QUOTA_TYPES_H

#include "base/lg_core.h"
#include "serve/budget.h"
#include "serve/keys.h"

/* What the response says of the limits (struct lg_quota.flags) */
#define LG_QUOTA_F_TOKENS   (1u << 0) /* x-ratelimit-*-tokens from `tokens` */
#define LG_QUOTA_F_REQUESTS (1u << 1) /* x-ratelimit-*-requests from `requests` */
#define LG_QUOTA_F_NEVER    (1u << 2) /* refused for good (larger than a limit): no retry */

/* A request's part in its key's limits (struct lg_request.quota, owned by quota.c). */
struct lg_quota {
    struct lg_budget *account; /* borrowed from the key hold while tokens are reserved;
                                   NULL: nothing reserved (or settled already) */
    uint64_t reserved;         /* tokens reserved in it */
    uint64_t prompt_estimate;  /* tokens the prompt was estimated at */
    struct lg_budget *tenant_account; /* one reference: its tenant's budget (tenants.budget)
                                         while tokens are reserved there; NULL: none */
    uint64_t tenant_reserved;
    uint32_t flags;            /* LG_QUOTA_F_* */
    struct lg_budget_view tokens;
    struct lg_keys_rate_view requests;
};

#endif /* LG_QUOTA_TYPES_H */
