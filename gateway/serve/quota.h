/*
 * quota.h: a request against its key's token budget and request rate.
 *
 * Once the body is read (the model, the prompt's size and the completion's
 * cap known), lg_quota_admit() reserves the request's estimate in its key's
 * budget (budget.c) or refuses it; the x-ratelimit-* headers OpenAI's
 * clients read are written from what it saw, on the answer or on the
 * refusal (lg_quota_headers()); when the request ends, whatever its end,
 * lg_quota_end() charges what it used and gives the rest back.
 * A request's struct lg_quota exists only for a key with a budget or a
 * rate: any other request costs a test of a pointer where it passes.
 */
#ifndef LG_QUOTA_H
#define LG_QUOTA_H

#include "base/lg_core.h"
#include "serve/quota_types.h"

struct lg_auth_refusal;
struct lg_budgets_conf;
struct lg_request;
struct lg_tenants;

/*
 * The tokens a request reserves: its prompt's estimate (bytes over
 * conf->prompt_bytes_per_token, at least 1) plus its completion's cap
 * (max_completion_tokens or max_tokens, else conf->default_max_tokens; none
 * for embeddings) for each choice it asks for.
 */
uint64_t lg_quota_estimate(const struct lg_request *req, const struct lg_budgets_conf *conf,
                           uint64_t *prompt);

/*
 * Reserves the request's tokens in its key's budget (a key without one:
 * nothing) and notes the key's limits for the headers (req->quota, for a
 * key with a budget or a rate). `store_refuses`: the gateway's flag, set
 * while the shared store is down and the configuration fails closed.
 * Returns LG_OK, or LG_EINVAL with *no filled: 429 rate_limit_exceeded
 * (with req->pick.retry_after_ms; LG_QUOTA_F_NEVER when the request is
 * larger than a whole window's limit) or 503 budget_store_unavailable.
 */
int lg_quota_admit(struct lg_request *req, const struct lg_budgets_conf *conf,
                   struct lg_tenants *tenants, const bool *store_refuses,
                   struct lg_auth_refusal *no);

/*
 * Notes the held key's request rate for the headers of a refusal that came
 * before the body (the key's concurrency or rate).
 */
void lg_quota_note_rate(struct lg_request *req);

/*
 * Writes req->quota's x-ratelimit-* header lines (each ending in CRLF;
 * x-should-retry when refused for good) into buf; returns their length (0:
 * none, or cap too small). 512 bytes are always enough.
 */
size_t lg_quota_headers(const struct lg_request *req, char *buf, size_t cap);

/* Writes ms as OpenAI's reset headers give a duration ("850ms", "1s", "6m0s", "2h3m4.5s"). */
size_t lg_quota_duration(uint64_t ms, char *buf, size_t cap);

/*
 * The request ended (any end: answered, failed, cut, the client gone):
 * charges what it used (the engine's usage, else its content events; an
 * answer that never started or failed uses nothing), gives the rest of its
 * reservation back, and frees req->quota. Call only when req->quota is set.
 */
void lg_quota_end(struct lg_request *req);

/* The tokens lg_quota_end() charges for the request as it stands. */
uint64_t lg_quota_used(const struct lg_request *req);

#endif /* LG_QUOTA_H */
