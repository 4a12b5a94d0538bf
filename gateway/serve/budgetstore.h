/*
 * budgetstore.h: token budgets shared by several gateways through Redis.
 *
 * A thread of its own syncs the accounts (budget.c) with a Redis server
 * every sync_interval: for each account in use, one script call writes this
 * gateway's share of the minute and of the day (absolute values under the
 * gateway's id in a hash per window, which expires after the window) and
 * reads back the sums over every gateway. Requests never wait for it: they
 * decide on the counts in memory, which the sync corrects. When Redis does
 * not answer within `timeout` (down, unreachable, stopped), the store is
 * down until a reconnection succeeds: failing open, requests go on, each
 * gateway on its own counts (and the others' last known); failing closed,
 * requests of keys with budgets are refused (503). The log says which.
 */
#ifndef LG_BUDGETSTORE_H
#define LG_BUDGETSTORE_H

#include <jansson.h>

#include "base/lg_core.h"

struct lg_budget_redis_conf;
struct lg_budgetstore;

/*
 * Starts syncing with the Redis server of `conf` (copied). `refuses` is the
 * flag requests read (lg_budgetstore_refuses()): set while the store is not
 * up and conf fails closed, clear otherwise; it must outlive the store.
 * Returns LG_OK with *out, or LG_ERR (logged: no thread or event base).
 */
int lg_budgetstore_start(const struct lg_budget_redis_conf *conf, bool *refuses,
                         struct lg_budgetstore **out);

/* Stops the thread (a batch in flight is dropped) and frees the store. NULL is fine. */
void lg_budgetstore_stop(struct lg_budgetstore *s);

/*
 * A reload's settings (conf, copied; its address set): when they differ
 * from those in force, the store's thread drops its connection at its next
 * tick and connects again with them. The reloading thread calls this.
 */
void lg_budgetstore_reconfigure(struct lg_budgetstore *s, const struct lg_budget_redis_conf *conf);

/* Should a request of a key with a budget be refused now? Any thread. */
static inline bool
lg_budgetstore_refuses(const bool *refuses)
{
    return __atomic_load_n(refuses, __ATOMIC_RELAXED);
}

/* The store's state for /admin/budgets: a new object (address, state, counts). */
json_t *lg_budgetstore_describe(struct lg_budgetstore *s);

/*
 * Reads a script call's reply: an array of two non-negative integers, the
 * sums over every gateway of the minute and of the day. Returns LG_OK, or
 * LG_EPROTO with a reason in why. `reply` is a hiredis redisReply.
 */
int lg_budgetstore_read_sums(const void *reply, uint64_t sums[2], char *why, size_t whylen);

#endif /* LG_BUDGETSTORE_H */
