/*
 * budget.h: token budgets: accounts of tokens per minute and per day.
 *
 * An account (struct lg_budget) counts the tokens of whoever it belongs to
 * (an API key: keys.c) in two fixed windows aligned to the wall clock (UTC
 * minutes and days, so that gateways agree on them). A request reserves its
 * estimate at admission (the prompt's estimate plus its completion cap),
 * which counts at once against every window while it runs; it settles on
 * what it really used when it ends: the reservation goes back, the tokens
 * used are charged to the windows in force then.
 *
 * Several gateways share an account through a store (budgetstore.c): each
 * gateway writes its own share of each window (tokens charged there plus
 * those reserved now, an absolute value, so a write may be repeated) and
 * learns the sum; the others' part counts in its decisions until the next
 * sync. Decisions never wait for the store.
 *
 * The limits are not the account's: they belong to the key's configuration,
 * which a reload may change while the account (found again by name) keeps
 * counting. Any thread may use an account; each has its own lock.
 */
#ifndef LG_BUDGET_H
#define LG_BUDGET_H

#include "base/lg_core.h"

#define LG_BUDGET_NAME_MAX 80

enum lg_budget_period {
    LG_BUDGET_MINUTE = 0,
    LG_BUDGET_DAY,
    LG_BUDGET_NPERIODS,
};

struct lg_budget;

/* Tokens allowed per window; 0: no limit for that period. */
struct lg_budget_limits {
    uint64_t tokens[LG_BUDGET_NPERIODS];
};

/*
 * What a reservation saw in the period that binds (the one with the fewest
 * tokens left, or the one that refused): the x-ratelimit-*-tokens headers
 * and the refusal's message come from it.
 */
struct lg_budget_view {
    uint8_t period;     /* enum lg_budget_period */
    uint64_t limit;     /* tokens per window */
    uint64_t used;      /* counted before this request: charged, reserved, other gateways' */
    uint64_t requested; /* this request's reservation */
    uint64_t remaining; /* left after it (0 when refused) */
    uint64_t reset_ms;  /* until the window ends */
    uint64_t retry_ms;  /* refused: when to try again */
};

/* An account's state, for /admin/budgets. */
struct lg_budget_state {
    uint64_t reserved;                     /* by requests running here */
    uint64_t used[LG_BUDGET_NPERIODS];     /* charged here in the current window */
    uint64_t others[LG_BUDGET_NPERIODS];   /* other gateways' share, as last learned */
    uint64_t reset_ms[LG_BUDGET_NPERIODS]; /* until the window ends */
    uint64_t charged_total;                /* tokens charged since the account began */
    uint64_t refused_total;                /* reservations refused */
};

/*
 * Creates an account named `name` (at most LG_BUDGET_NAME_MAX bytes: what
 * the store calls it, e.g. "key:team-a"), with one reference, registered in
 * the process's list (the store syncs what is listed). Never NULL.
 */
struct lg_budget *lg_budget_new(const char *name);
struct lg_budget *lg_budget_ref(struct lg_budget *b);
/* Drops a reference; the last one unlists and frees it. NULL is fine. */
void lg_budget_unref(struct lg_budget *b);
const char *lg_budget_name(const struct lg_budget *b);

/* Does any period have a limit? */
static inline bool
lg_budget_limited(const struct lg_budget_limits *lim)
{
    return (lim->tokens[LG_BUDGET_MINUTE] | lim->tokens[LG_BUDGET_DAY]) != 0;
}

/*
 * Reserves `tokens` against every limited period at wall time now_ms.
 * Returns LG_OK (*v: the binding period, what is left after it), LG_EBUSY
 * when a period has no room for it now (*v: that period; retry_ms is 1 s
 * when the room is only held by running requests' reservations, else the
 * time to the window's end), or LG_EINVAL when the request is larger than
 * a period's whole limit (it can never fit).
 */
int lg_budget_reserve(struct lg_budget *b, const struct lg_budget_limits *lim, uint64_t tokens,
                      uint64_t now_ms, struct lg_budget_view *v);

/*
 * A request that reserved `reserved` ends having used `used` tokens: the
 * reservation goes back and `used` is charged to the windows in force at
 * now_ms (it may exceed the reservation: an engine that ignored the cap).
 */
void lg_budget_settle(struct lg_budget *b, uint64_t reserved, uint64_t used, uint64_t now_ms);

/* Reads the account at now_ms (windows past are read as empty). */
void lg_budget_read(struct lg_budget *b, uint64_t now_ms, struct lg_budget_state *out);

/* The window (its number since the epoch) and its end, for a period at now_ms. */
uint64_t lg_budget_window(enum lg_budget_period p, uint64_t now_ms, uint64_t *end_ms);

/* ---- sharing through a store (budgetstore.c) ------------------------------------------ */

/* One account's share, collected for a write to the store. */
struct lg_budget_share {
    struct lg_budget *b;                 /* one reference (lg_budget_shares_free) */
    uint64_t window[LG_BUDGET_NPERIODS]; /* the windows it is for */
    uint64_t end_ms[LG_BUDGET_NPERIODS]; /* their ends */
    uint64_t mine[LG_BUDGET_NPERIODS];   /* this gateway's share: charged + reserved */
};

/*
 * The accounts to sync at now_ms: those whose share changed since their
 * last write, and those used in the last `active_ms` (their others' part
 * is refreshed). Returns how many were put in *out (an array the caller
 * frees with lg_budget_shares_free(), NULL when none).
 */
size_t lg_budget_collect(uint64_t now_ms, uint64_t active_ms, struct lg_budget_share **out);

/*
 * The store answered a share's write with each window's sum over every
 * gateway: what is not ours is the others' part (a window that has passed
 * since is left alone).
 */
void lg_budget_learn(const struct lg_budget_share *s, const uint64_t total[LG_BUDGET_NPERIODS]);

/*
 * The store did not take a share (it failed): it is written again at the
 * next sync.
 */
void lg_budget_unsent(const struct lg_budget_share *s);

void lg_budget_shares_free(struct lg_budget_share *s, size_t n);

/*
 * A new connection to the store (perhaps another server, or one that lost
 * its data): every account's share is written again at the next sync.
 */
void lg_budget_unsent_all(void);

/* Accounts listed now (tests). */
size_t lg_budget_count(void);

#endif /* LG_BUDGET_H */
