/*
 * hedge.h: hedged first tokens (hedge.c). A streamed request that has no
 * first token within a deadline derived from what the router predicted for
 * it gets a duplicate on the router's next choice; the first attempt to
 * produce a content event (or a complete answer) wins, the other is closed,
 * and nothing of an attempt reaches the client before it has won. Worker
 * thread of the request only.
 */
#ifndef LG_HEDGE_H
#define LG_HEDGE_H

#include "base/lg_core.h"

struct bufferevent;
struct lg_client;
struct lg_hedge_budget;
struct lg_hedge_conf;
struct lg_openai_req;
struct lg_route_result;
struct lg_upconn;

/*
 * The callbacks of the request's own attempt (proxy.c's): a duplicate that
 * wins, or goes on alone, is handed to them, and a held attempt's bytes go
 * through them once it is released.
 */
struct lg_hedge_ops {
    void (*read)(struct bufferevent *bev, void *arg);
    void (*event)(struct bufferevent *bev, short what, void *arg);
};

/*
 * The request's attempt has started (its upstream connection and callbacks
 * set): when the request may be hedged and no winner is known, its bytes
 * are held from now on and the deadline runs from its dispatch.
 */
void lg_hedge_arm(struct lg_client *c, const struct lg_hedge_ops *ops);

/*
 * In the request's attempt's read callback, first: true while u's bytes are
 * held (the caller returns and reads nothing); false when they may be
 * relayed: no hedging, or u has won, or it is the only attempt left.
 */
bool lg_hedge_holds(struct lg_client *c, struct lg_upconn *u);

/*
 * The request's attempt failed before any response byte reached the client
 * (and has ended): true when a duplicate was racing it and goes on alone in
 * its place (the caller neither retries nor fails the request).
 */
bool lg_hedge_takeover(struct lg_client *c);

/* The request is aborted (client gone, total timeout, the end): a racing
 * duplicate is closed and the deadline stopped. Safe when there is none. */
void lg_hedge_stop(struct lg_client *c);

/* The request is over: frees what hedging held for it. */
void lg_hedge_free(struct lg_client *c);

/* ---- pure parts, for the unit tests -------------------------------------- */

/*
 * Whether a request may be hedged at all: hedging on, a streamed chat or
 * text completion (path without its query), one choice (`n` and `best_of`
 * at most 1), not stored (`store` not true).
 */
bool lg_hedge_eligible(const struct lg_hedge_conf *hc, const char *path, size_t path_len,
                       const struct lg_openai_req *info);

/*
 * The deadline for a first token, ms after dispatch: factor x the TTFT the
 * router predicted for its pick (the engine model's where it predicted,
 * else queueing + work ahead + service), within [min, max]; max when there
 * is no usable prediction.
 */
double lg_hedge_deadline_ms(const struct lg_hedge_conf *hc, const struct lg_route_result *pick);

/* Unspent hedge budget beyond 10 + budget_min fades with this half-life: a
 * burst of stalls may spend at once about 14 s of what the traffic earned,
 * and at least 10 + budget_min. */
#define LG_HEDGE_BUDGET_HALF_LIFE_S 10.0

/*
 * The budget at now_ns: each eligible request earns budget_ratio of a token
 * (`earned` requests), budget_min tokens a second arrive regardless, spread
 * over `nworkers`, and what is not spent beyond 10 + budget_min fades
 * (LG_HEDGE_BUDGET_HALF_LIFE_S); it starts empty. take: spends one if there
 * is one. Returns whether one was there (and, with take, spent).
 */
bool lg_hedge_budget_update(struct lg_hedge_budget *b, const struct lg_hedge_conf *hc,
                            unsigned nworkers, uint64_t now_ns, double earned, bool take);

#endif /* LG_HEDGE_H */
