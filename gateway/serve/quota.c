/*
 * quota.c: a request against its key's token budget and request rate:
 * the reservation at admission, the x-ratelimit-* headers, the settlement
 * at the end (see quota.h).
 *
 * Owns: each request's struct lg_quota (req->quota), from admission (or
 * a refusal of its key's rate) to the request's end. The account is the
 * key's (borrowed through the request's key hold, which outlives the
 * reservation: client.c ends the quota before it releases the key).
 * Invariant: a request reserves at most once and settles at most once.
 */
#include "serve/quota.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config_types.h"
#include "serve/auth.h"
#include "serve/client_types.h"
#include "serve/tenant.h"

static const char *const quota_period_names[LG_BUDGET_NPERIODS] = {
    [LG_BUDGET_MINUTE] = "tokens per min (TPM)",
    [LG_BUDGET_DAY] = "tokens per day (TPD)",
};

static uint64_t
quota_sat_mul(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static bool
quota_is_embeddings(const struct lg_request *req)
{
    static const char path[] = "/v1/embeddings";

    return req->hdrs.buf != NULL && req->hdrs.url_len >= sizeof(path) - 1
           && memcmp(req->hdrs.buf + req->hdrs.url_off, path, sizeof(path) - 1) == 0;
}

uint64_t
lg_quota_estimate(const struct lg_request *req, const struct lg_budgets_conf *conf,
                  uint64_t *prompt)
{
    uint64_t bpt = conf->prompt_bytes_per_token ? conf->prompt_bytes_per_token : 1;
    uint64_t p = LG_MAX((req->info.prompt_bytes + bpt - 1) / bpt, UINT64_C(1));
    uint64_t cap;

    if (req->info.max_tokens >= 0) {
        cap = (uint64_t)req->info.max_tokens;
    } else {
        cap = quota_is_embeddings(req) ? 0 : conf->default_max_tokens;
    }
    cap = quota_sat_mul(cap, LG_MAX(req->info.choices, 1u));
    *prompt = p;
    return p + cap < p ? UINT64_MAX : p + cap;
}

/* The request's quota, made on first need. */
static struct lg_quota *
quota_of(struct lg_request *req)
{
    if (req->quota == NULL) {
        req->quota = lg_xcalloc(1, sizeof(*req->quota));
    }
    return req->quota;
}

void
lg_quota_note_rate(struct lg_request *req)
{
    struct lg_keys_rate_view rv;

    if (lg_keys_rate_view(&req->auth, lg_now_ns(), &rv)) {
        struct lg_quota *q = quota_of(req);

        q->requests = rv;
        q->flags |= LG_QUOTA_F_REQUESTS;
    }
}

/*
 * Reserves `tokens` in account for the request (`who`: "key", "tenant"); on
 * a refusal fills *no (429, the message in OpenAI's words) and returns its
 * LG_EBUSY or LG_EINVAL.
 */
static int
quota_reserve(struct lg_request *req, struct lg_budget *account,
              const struct lg_budget_limits *lim, uint64_t tokens, const char *who,
              const char *name, struct lg_auth_refusal *no)
{
    struct lg_quota *q = req->quota;
    struct lg_budget_view v;
    char wait[32];
    int rc = lg_budget_reserve(account, lim, tokens, lg_wall_ns() / LG_NS_PER_MS, &v);

    /* the headers tell of the budget with the least left */
    if (!(q->flags & LG_QUOTA_F_TOKENS) || rc != LG_OK || v.remaining < q->tokens.remaining) {
        q->tokens = v;
    }
    q->flags |= LG_QUOTA_F_TOKENS;
    if (rc == LG_OK) {
        return LG_OK;
    }
    no->status = 429;
    no->code = "rate_limit_exceeded";
    if (rc == LG_EINVAL) {
        q->flags |= LG_QUOTA_F_NEVER;
        req->retry_after_ms = (uint32_t)LG_MIN(v.reset_ms, UINT64_C(86400000));
        snprintf(no->message, sizeof(no->message),
                 "Request too large for %s \"%s\" on %s: Limit %" PRIu64 ", Requested %" PRIu64
                 " (the prompt's estimate and max_tokens for each choice). Lower max_tokens or "
                 "send a shorter prompt.",
                 who, name, quota_period_names[v.period], v.limit, v.requested);
        return LG_EINVAL;
    }
    req->retry_after_ms = (uint32_t)LG_MIN(v.retry_ms, UINT64_C(86400000));
    lg_quota_duration(v.retry_ms, wait, sizeof(wait));
    snprintf(no->message, sizeof(no->message),
             "Rate limit reached for %s \"%s\" on %s: Limit %" PRIu64 ", Used %" PRIu64
             ", Requested %" PRIu64 ". Please try again in %s.",
             who, name, quota_period_names[v.period], v.limit, v.used, v.requested, wait);
    return LG_EBUSY;
}

int
lg_quota_admit(struct lg_request *req, const struct lg_budgets_conf *conf,
               struct lg_tenants *tenants, const bool *store_refuses, struct lg_auth_refusal *no)
{
    const struct lg_budget_limits *lim = NULL;
    struct lg_budget_limits tlim;
    struct lg_budget *account = NULL, *taccount = NULL;
    struct lg_quota *q;
    uint64_t tokens, prompt;

    if (req->auth.key != NULL) {
        lg_quota_note_rate(req);
        account = lg_keys_budget(&req->auth, &lim);
    }
    if (req->sched.by_header && req->sched.tenant != NULL && tenants != NULL) {
        taccount = lg_tenants_budget(tenants, req->sched.tenant, &tlim);
    }
    if ((account == NULL && taccount == NULL)
        || (req->quota != NULL && (req->quota->account != NULL || req->quota->tenant_account))) {
        lg_budget_unref(taccount);
        return LG_OK;
    }
    q = quota_of(req);
    if (__atomic_load_n(store_refuses, __ATOMIC_RELAXED)) {
        lg_budget_unref(taccount);
        req->retry_after_ms = 1000;
        no->status = 503;
        no->code = "budget_store_unavailable";
        snprintf(no->message, sizeof(no->message),
                 "the %s \"%s\" has a token budget shared with other gateways, and their store "
                 "does not answer; try again later",
                 account != NULL ? "key" : "tenant",
                 account != NULL ? lg_keys_name(&req->auth) : req->sched.tenant->name);
        return LG_EINVAL;
    }
    tokens = lg_quota_estimate(req, conf, &prompt);
    q->prompt_estimate = prompt;
    if (account != NULL) {
        if (quota_reserve(req, account, lim, tokens, "key", lg_keys_name(&req->auth), no)
            != LG_OK) {
            lg_budget_unref(taccount);
            return LG_EINVAL;
        }
        q->account = account;
        q->reserved = tokens;
    }
    if (taccount != NULL) {
        if (quota_reserve(req, taccount, &tlim, tokens, "tenant", req->sched.tenant->name, no)
            != LG_OK) {
            lg_budget_unref(taccount);
            if (q->account != NULL) {
                /* the key's reservation goes back: the request does not run */
                lg_budget_settle(q->account, q->reserved, 0, lg_wall_ns() / LG_NS_PER_MS);
                q->account = NULL;
            }
            return LG_EINVAL;
        }
        q->tenant_account = taccount;
        q->tenant_reserved = tokens;
    }
    return LG_OK;
}

size_t
lg_quota_duration(uint64_t ms, char *buf, size_t cap)
{
    uint64_t h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60, frac = ms % 1000;
    char sec[32];
    int n;

    if (ms < 1000) {
        n = snprintf(buf, cap, "%" PRIu64 "ms", ms);
        return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
    }
    if (frac == 0) {
        snprintf(sec, sizeof(sec), "%" PRIu64 "s", s);
    } else {
        /* Go's form: the fraction without its trailing zeros */
        int digits = frac % 100 == 0 ? 1 : frac % 10 == 0 ? 2 : 3;

        snprintf(sec, sizeof(sec), "%" PRIu64 ".%0*" PRIu64 "s", s, digits,
                 digits == 1   ? frac / 100
                 : digits == 2 ? frac / 10
                               : frac);
    }
    if (h > 0) {
        n = snprintf(buf, cap, "%" PRIu64 "h%" PRIu64 "m%s", h, m, sec);
    } else if (m > 0) {
        n = snprintf(buf, cap, "%" PRIu64 "m%s", m, sec);
    } else {
        n = snprintf(buf, cap, "%s", sec);
    }
    return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

size_t
lg_quota_headers(const struct lg_request *req, char *buf, size_t cap)
{
    const struct lg_quota *q = req->quota;
    char reset[32];
    size_t n = 0;
    int k;

    if (q == NULL) {
        return 0;
    }
    if (q->flags & LG_QUOTA_F_REQUESTS) {
        lg_quota_duration(q->requests.reset_ms, reset, sizeof(reset));
        k = snprintf(buf, cap,
                     "x-ratelimit-limit-requests: %" PRIu32 "\r\n"
                     "x-ratelimit-remaining-requests: %" PRIu32 "\r\n"
                     "x-ratelimit-reset-requests: %s\r\n",
                     q->requests.limit, q->requests.remaining, reset);
        if (k < 0 || (size_t)k >= cap) {
            return 0;
        }
        n = (size_t)k;
    }
    if (q->flags & LG_QUOTA_F_TOKENS) {
        /* refused: what is left for a request of any size (none was reserved) */
        uint64_t left = q->account != NULL || q->tenant_account != NULL ? q->tokens.remaining
                        : q->tokens.used >= q->tokens.limit ? 0
                                                            : q->tokens.limit - q->tokens.used;

        lg_quota_duration(q->tokens.reset_ms, reset, sizeof(reset));
        k = snprintf(buf + n, cap - n,
                     "x-ratelimit-limit-tokens: %" PRIu64 "\r\n"
                     "x-ratelimit-remaining-tokens: %" PRIu64 "\r\n"
                     "x-ratelimit-reset-tokens: %s\r\n",
                     q->tokens.limit, left, reset);
        if (k < 0 || (size_t)k >= cap - n) {
            return 0;
        }
        n += (size_t)k;
    }
    if (q->flags & LG_QUOTA_F_NEVER) {
        k = snprintf(buf + n, cap - n, "x-should-retry: false\r\n");
        if (k < 0 || (size_t)k >= cap - n) {
            return 0;
        }
        n += (size_t)k;
    }
    return n;
}

uint64_t
lg_quota_used(const struct lg_request *req)
{
    const struct lg_json_probe *p = (req->flags & LG_REQ_F_SSE) ? &req->scan.sse.probe : &req->scan.probe;
    uint64_t prompt, completion;

    /* an answer that began: it ended (2xx), or its client left in the middle (499 after
     * the first byte); anything else had no answer, the engine produced nothing for it */
    if (!(req->flags & LG_REQ_F_STARTED)
        || ((req->status < 200 || req->status >= 300) && req->status != 499)) {
        return 0;
    }
    if (req->quota == NULL) {
        return 0;
    }
    if (!(req->flags & LG_REQ_F_SSE) && p->completion_tokens < 0) {
        return req->quota->reserved; /* an answer that says nothing of its size */
    }
    prompt = p->prompt_tokens >= 0 ? (uint64_t)p->prompt_tokens : req->quota->prompt_estimate;
    completion = req->content_events; /* a stream's events, when it reported no usage */
    if (p->completion_tokens >= 0) {
        /* after a continuation (resume.c) the usage is the continuation's own */
        completion = LG_MAX(completion, (uint64_t)p->completion_tokens
                                            + (req->tries.resumed > 0 ? req->tries.resume_events : 0));
    }
    return prompt + completion;
}

/* Out of line: a request without a quota pays only the caller's test. */
__attribute__((noinline)) void
lg_quota_end(struct lg_request *req)
{
    struct lg_quota *q = req->quota;

    if (q->account != NULL) {
        lg_budget_settle(q->account, q->reserved, lg_quota_used(req), lg_wall_ns() / LG_NS_PER_MS);
    }
    if (q->tenant_account != NULL) {
        lg_budget_settle(q->tenant_account, q->tenant_reserved, lg_quota_used(req),
                         lg_wall_ns() / LG_NS_PER_MS);
        lg_budget_unref(q->tenant_account);
    }
    free(q);
    req->quota = NULL;
}
