/*
 * admission.h: the admission queue.
 *
 * When every backend that serves a model is at its max_inflight, a new
 * request waits here instead of failing: in a queue bounded per model
 * (limits.queue_length) and in time (timeouts.queue). Past either bound it
 * gets 429 (queue full) or 503 (waited too long), with a Retry-After from the
 * observed drain rate (requests finished per second for that model).
 *
 * Waiting requests stay on their worker (a queue per worker, in arrival
 * order); the per-model length and the drain rate are shared. Whenever an
 * attempt anywhere releases its backend slot, every worker with waiters is
 * woken (its own wake event, or LG_WORKER_CMD_ADMIT through lg_worker_post()
 * from another worker: worker bases have no lock) and dispatches
 * what the router now has room for; a slow tick on each worker with waiters
 * also re-checks, for capacity that returns another way (Retry-After over,
 * a backend back up). A request is never dispatched from inside another
 * request's callbacks: wake-ups are always deferred to the worker's loop.
 *
 * Scale from zero (scale_from_zero in the configuration): a new request for
 * a model with no replica ready (none up, or none registered yet) is held
 * apart from the scheduler's waiters (sched.h), by arrival, served before
 * them, within bounds of its own (max_held, hold; whatever its class);
 * past either it gets 503 with the configured Retry-After (reasons
 * model_scaled_to_zero, no_replica_ready). The first held request of a cold
 * period asks for the wake-up webhook (wakeup.c). A health check marking a
 * backend up (through fleet/health_check.h's hook), a worker adopting a new
 * fleet (discovery added a replica) and the slow tick dispatch the held
 * requests in arrival order once a replica is ready.
 */
#ifndef LG_ADMISSION_H
#define LG_ADMISSION_H

#include "base/lg_core.h"
#include "serve/tenant.h"

struct lg_admission;
struct lg_admission_waiter;
struct lg_client;
struct lg_config;
struct lg_gateway;
struct lg_model_route;
struct lg_tried;

/* Creates the queues for gw's workers (their event bases must exist). */
struct lg_admission *lg_admission_new(struct lg_gateway *gw);
/* After the workers stopped. NULL is fine. */
void lg_admission_free(struct lg_admission *a);

/* Requests waiting in the queue now, all workers and models (0 for NULL). */
unsigned lg_admission_waiting(const struct lg_admission *a);

/* How a request that waited tries for a backend again (the proxy's). */
typedef void (*lg_admission_resume_fn)(struct lg_client *c);

/*
 * Called by the proxy with the result (rc) of each routing of a request (a
 * retry may wait too), including when a queued request is routed on its way
 * out of the queue.
 * Returns true when the request waits now (the proxy stops there; resume(c)
 * runs later from this worker's loop, and routes it again) or was refused
 * with 429 (queue full, or queueing off); false when the proxy goes on with
 * rc as it is. A new request waits when every backend of its model is at
 * max_inflight, and also when others wait for its model already (no
 * overtaking).
 */
bool lg_admission_hold(struct lg_admission *a, struct lg_client *c, int rc,
                       lg_admission_resume_fn resume);

/*
 * Could a request of class cls wait in the queue for one of route's
 * backends not in `tried` (one that is up but at max_inflight for it,
 * lg_backend_inflight_from())? A retry may then wait for it rather than
 * fail.
 */
bool lg_admission_can_wait(const struct lg_model_route *route, const struct lg_tried *tried,
                           unsigned cls);

/* Takes c out of the queue if it is there (request ending); idempotent. */
void lg_admission_cancel(struct lg_client *c);

/*
 * A request of `model` on worker `worker` gave back its backend slot at
 * now_ns (monotonic): counts it for the drain rate and wakes the workers
 * that have waiters. On worker `worker`'s thread.
 */
void lg_admission_released(struct lg_admission *a, unsigned worker, const char *model,
                           uint64_t now_ns);

/*
 * Something other than a released slot may let a waiter go (a higher
 * class's first token, which a class's yield_prefill holds for): wakes the
 * workers that have waiters, as lg_admission_released() does. On worker
 * `worker`'s thread; nothing when none waits. NULL a is fine.
 */
void lg_admission_kick(struct lg_admission *a, unsigned worker);

/*
 * Worker `worker` received LG_WORKER_CMD_ADMIT: schedules a look at its
 * waiters in its loop. On that worker's thread. NULL a is fine.
 */
void lg_admission_wake_worker(struct lg_admission *a, unsigned worker);

/* A reload: the tenants' table bounds and half-life. NULL a is fine. */
void lg_admission_configure(struct lg_admission *a, const struct lg_config *conf);

/* The tenants (tenant.h), or NULL for a NULL a. */
struct lg_tenants *lg_admission_tenants(struct lg_admission *a);

/*
 * Refuses c with 429 rate_limit_exceeded for `why` (its access log's
 * "shed"), with a Retry-After from the drain rate; counts it for its class
 * and tenant. NULL a is fine.
 */
void lg_admission_refuse(struct lg_admission *a, struct lg_client *c, enum lg_shed why);

/*
 * The request goes to a backend: its prompt's estimate counts in its
 * tenant's attained service now, its queue wait in its tenant's counters.
 * Once per request.
 */
void lg_admission_charge(struct lg_admission *a, struct lg_client *c);

/*
 * The request ended: the rest of its cost (the prompt's real count less the
 * estimate, and twice the output) counts in its tenant's service; its
 * tenant reference is given back. Idempotent.
 */
void lg_admission_settle(struct lg_admission *a, struct lg_client *c);

/* What the queues hold, for /admin/queues, the metrics and the status page. */
struct lg_admission_class_view {
    uint32_t queued;                     /* waiting now, all models */
    uint64_t refused[LG_SHED_NREASONS];  /* refused since start, by reason */
};

/* Fills out[cls] for every class. NULL a: zeros. */
void lg_admission_classes(struct lg_admission *a, struct lg_admission_class_view *out);

typedef void (*lg_admission_model_fn)(const char *model, const uint32_t *queued,
                                      double head_wait_ms, void *arg);
/*
 * Calls fn for each model with waiters: its waiters by class
 * (queued[LG_NCLASSES]) and how long its head has waited (under the queue's
 * lock: fn must not call into the queue).
 */
void lg_admission_foreach_model(struct lg_admission *a, lg_admission_model_fn fn, void *arg);

/* A tenant's counters, copied. */
struct lg_tenant_view {
    char name[LG_TENANT_NAME_MAX + 1];
    double service;                 /* attained service now (tokens, decayed) */
    uint32_t queued[LG_NCLASSES];
    uint64_t admitted[LG_NCLASSES];
    uint64_t shed[LG_NCLASSES];
    uint64_t tokens[LG_NCLASSES];
    uint64_t wait_ms[LG_NCLASSES];
};

/*
 * Every tenant's view, most tokens first ("other", the shared one, among
 * them), in *out (free() it); returns how many.
 */
size_t lg_admission_tenant_views(struct lg_admission *a, struct lg_tenant_view **out);

/* A model's waiters and scale-from-zero counts (metrics). */
struct lg_admission_model_stats {
    uint32_t queued;       /* waiting now, both kinds */
    uint32_t held;         /* of them, held for a replica to become ready */
    uint64_t wakeups;      /* wake-ups asked (cold periods begun, or a hold passed in one) */
    uint64_t held_full;    /* refused: the model's max_held were held already */
    uint64_t held_expired; /* the hold passed with no replica ready */
};

/* `model`'s counts now, all workers; any thread. */
void lg_admission_model_stats(struct lg_admission *a, const char *model,
                              struct lg_admission_model_stats *out);

/* Requests waiting for `model` now, all workers (tests, metrics). */
uint32_t lg_admission_queued(struct lg_admission *a, const char *model);

#endif /* LG_ADMISSION_H */
