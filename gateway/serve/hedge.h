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

#include "base/fail.h"
#include "base/lg_core.h"

struct lg_attempt;
struct lg_client;
struct lg_hedge_budget;
struct lg_hedge_conf;
struct lg_openai_req;
struct lg_route_result;

/* What hedging needs of the request's path (proxy.c's). */
struct lg_hedge_ops {
    /* Launches attempt a, its pick made, as every attempt is; LG_OK, or
     * LG_EIO when no connection could be made (the caller ends a). */
    int (*launch)(struct lg_client *c, struct lg_attempt *a);
};

/*
 * Attempt a was launched (its upstream connection and callbacks set): when
 * the request may be hedged and no winner is known, a's bytes are held from
 * now on, and for the request's own attempt the deadline runs from its
 * dispatch. A continuation is never held.
 */
void lg_hedge_arm(struct lg_client *c, struct lg_attempt *a, const struct lg_hedge_ops *ops);

/*
 * In the read callback of any attempt, first: true while a's bytes are held
 * (the caller returns and reads nothing); false when they may be relayed:
 * no hedging, or a has won (it is the request's current attempt now), or it
 * is the only attempt left. An attempt that answers an error while the
 * other runs leaves the race here (ended, told to its backend).
 */
bool lg_hedge_holds(struct lg_client *c, struct lg_attempt *a);

/*
 * The request's current attempt failed before any response byte reached
 * the client (and has ended): true when a duplicate was racing it and goes
 * on alone in its place, as the request's current attempt (the caller
 * neither retries nor fails the request).
 */
bool lg_hedge_takeover(struct lg_client *c);

/* The racing duplicate failed (and has ended, proxy.c): the request's
 * attempt goes on alone, still held until its first content event. */
void lg_hedge_dup_failed(struct lg_client *c);

/* The request is aborted (client gone, total timeout, the end): a racing
 * duplicate ends for `why` and the deadline stops. Safe when there is none. */
void lg_hedge_stop(struct lg_client *c, enum lg_fail why);

/* The request is over (its log line written): frees what hedging held for
 * it, the duplicate's storage included. */
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
