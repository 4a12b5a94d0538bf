/*
 * sched.h: the order of a model's admission queue.
 *
 * Three levels, as in flow control: priority classes first (a higher class
 * is always served before a lower one); inside a class, the tenant with
 * the least attained service (tokens: the prompt's at dispatch, then the
 * rest of the prompt and twice the output when the request ends, halving
 * over tenants.half_life), so that a tenant's flood cannot starve another's
 * trickle, and a tenant with nothing waiting takes nothing (work-conserving);
 * inside a tenant's flow, the earliest deadline (the TTFT target, else the
 * class's queue deadline), then arrival. With scheduling.fair false every
 * waiter is in one flow, by arrival (first come, first served).
 *
 * Costs: a push, a removal and a charge are O(log n) in heaps (flows in a
 * class, waiters in a flow); the head is O(classes).
 *
 * Not thread-safe: the admission queue calls it under its lock (the
 * tenants' scheduler fields are under that lock too).
 */
#ifndef LG_SCHED_H
#define LG_SCHED_H

#include "base/lg_core.h"
#include "serve/tenant.h"

struct lg_sched_flow;

/* A waiter's place in the queue (embedded in the admission's waiter). */
struct lg_sched_item {
    uint64_t deadline_ns; /* orders a flow's waiters; then seq */
    uint64_t seq;         /* arrival order */
    struct lg_sched_flow *flow;
    uint32_t hidx; /* in its flow's heap */
    uint8_t cls;
};

/* A heap of pointers, each with its index written back (sched.c). */
struct lg_sched_heap {
    void **v;
    uint32_t n, cap;
};

/* One model's queue. */
struct lg_sched {
    struct lg_sched_heap classes[LG_NCLASSES]; /* flows with waiters, least service first */
    struct lg_sched_flow *anon[LG_NCLASSES];   /* the flow of waiters without a tenant */
    uint32_t queued[LG_NCLASSES];
    uint64_t seq;
};

void lg_sched_init(struct lg_sched *s);
/* Frees what an empty queue holds. */
void lg_sched_destroy(struct lg_sched *s);

/*
 * Queues it (it->cls and it->deadline_ns set by the caller; 0: no deadline)
 * for tenant (NULL: none); `fair` false puts it in one flow by arrival.
 */
void lg_sched_push(struct lg_sched *s, struct lg_sched_item *it, struct lg_tenant *tenant,
                   bool fair);
/* Takes it out (it must be queued in s). */
void lg_sched_remove(struct lg_sched *s, struct lg_sched_item *it);
/* The waiter to serve next, or NULL. */
struct lg_sched_item *lg_sched_head(const struct lg_sched *s);
/* Waiters queued, all classes. */
uint32_t lg_sched_count(const struct lg_sched *s);
/* Waiters of classes above cls. */
uint32_t lg_sched_above(const struct lg_sched *s, int cls);

/*
 * Adds `tokens` to the tenant's attained service at time now_s (seconds, any
 * monotonic origin) with the half-life half_life_s; re-orders its flows.
 */
void lg_sched_charge(struct lg_tenant *tn, double tokens, double now_s, double half_life_s);
/* The tenant's attained service now (decayed). */
double lg_sched_service(const struct lg_tenant *tn, double now_s, double half_life_s);
/* The key that orders the tenant's flows (struct lg_tenant's key), computed if not yet. */
double lg_sched_key(struct lg_tenant *tn);

#endif /* LG_SCHED_H */
