/*
 * admission.c: the admission queue (see admission.h).
 *
 * Owns: struct lg_admission; per worker, its list of waiters and its wake
 * and tick events; each waiter (with its deadline timer) from enqueue to
 * dispatch or cancel; the per-model counters (never freed before the whole).
 * Borrows: the waiting clients (a waiter is freed before its client can be).
 * Invariants: a worker's list of waiters is only touched by that worker's
 * thread; the per-model table, each model's queue `q` (its waiters for a
 * busy backend, all workers, in the scheduler's order: sched.c) and
 * `held_q` (its requests held for a replica, scale from zero, by arrival),
 * the list of models with waiters, the tenants' scheduler fields and the
 * counters are shared under `lock`. A waiter is dispatched only when it
 * heads its model's queues (held ones first), across workers.
 */
#include "serve/admission.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/fleet.h"
#include "fleet/health_check.h"
#include "route/router.h"
#include "serve/client.h"
#include "serve/sched.h"
#include "serve/tenant.h"
#include "serve/wakeup.h"
#include "serve/worker.h"

#define ADMISSION_BUCKETS 256
#define ADMISSION_TICK_MS 100
#define ADMISSION_WINDOW  10 /* seconds of completions behind the drain rate */

struct lg_admission_waiter;
TAILQ_HEAD(admission_list, lg_admission_waiter);

struct admission_model {
    char *name;
    uint32_t queued;                 /* waiters, all workers (under lock) */
    struct lg_sched q;               /* the waiters for a busy backend, in order (under lock) */
    struct lg_sched held_q;          /* the held ones (scale from zero), by arrival (under lock) */
    TAILQ_ENTRY(admission_model) active; /* a->active, while it has waiters */
    uint64_t sec[ADMISSION_WINDOW];  /* which second each slot counts */
    uint32_t done[ADMISSION_WINDOW]; /* slots given back during that second */
    /* scale from zero: requests held while no replica of the model was ready */
    uint32_t held;         /* of `queued`, the held ones (under lock) */
    uint64_t woken_ns;     /* when this cold period's wake-up was asked; 0: none yet */
    uint64_t wakeups;      /* wake-ups asked (under lock) */
    uint64_t held_full;    /* refused: max_held were held already */
    uint64_t held_expired; /* the hold passed with no replica ready */
    struct admission_model *next;
};

enum admission_state {
    ADMISSION_ST_QUEUED = 0,  /* in its worker's list */
    ADMISSION_ST_DISPATCHING, /* out of the list while the proxy routes it again */
};

struct lg_admission_waiter {
    struct lg_client *c; /* borrowed; c->req.sched.waiter points back */
    lg_admission_resume_fn resume; /* the request tries again */
    struct admission_worker *aw;
    struct admission_model *m;
    enum admission_state state;
    bool cold;                              /* held for a replica (scale from zero) */
    uint64_t since_ns;                      /* when it joined the queue */
    struct lg_sched_item item;              /* its place in its model's q (held: held_q) */
    struct event *deadline;                 /* owned */
    TAILQ_ENTRY(lg_admission_waiter) link;  /* its worker's list, while QUEUED */
};

struct admission_worker {
    struct lg_admission *a;
    struct lg_worker *w;           /* borrowed */
    struct admission_list waiters; /* by since_ns */
    uint32_t nwaiting;             /* atomic: read by other workers' releases */
    struct event *wake;            /* owned: activated by its worker's thread only */
    struct event *tick;            /* owned: slow re-check while waiters exist */
    bool wake_others;              /* its next wake also wakes the other workers' waiters */
};

struct lg_admission {
    struct lg_gateway *gw; /* borrowed */
    unsigned nworkers;
    struct admission_worker *aw; /* [nworkers] */
    uint32_t waiting;            /* atomic: waiters, all workers */
    pthread_mutex_t lock;        /* guards the model table and its counters */
    struct admission_model *buckets[ADMISSION_BUCKETS];
    TAILQ_HEAD(, admission_model) active; /* models with waiters (under lock) */
    struct lg_tenants *tenants;  /* owned */
    double half_life_s;          /* tenants.half_life (under lock) */
    uint64_t refused[LG_NCLASSES][LG_SHED_NREASONS]; /* atomic */
};

static void admission_on_wake(evutil_socket_t fd, short what, void *arg);

/* ---- models ------------------------------------------------------------- */

/* The model's counters (created on first use); call under a->lock. */
static struct admission_model *
admission_model(struct lg_admission *a, const char *name)
{
    size_t b = lg_hash64(name, strlen(name), LG_HASH64_INIT) % ADMISSION_BUCKETS;
    struct admission_model *m;

    for (m = a->buckets[b]; m != NULL; m = m->next) {
        if (strcmp(m->name, name) == 0) {
            return m;
        }
    }
    m = lg_xcalloc(1, sizeof(*m));
    m->name = lg_xstrdup(name);
    lg_sched_init(&m->q);
    lg_sched_init(&m->held_q);
    m->next = a->buckets[b];
    a->buckets[b] = m;
    return m;
}

/* Completions per second over the last full seconds (under a->lock). */
static double
admission_drain_rate(const struct admission_model *m, uint64_t now_s)
{
    uint64_t n = 0, oldest = now_s;

    for (size_t i = 0; i < ADMISSION_WINDOW; i++) {
        if (m->sec[i] + ADMISSION_WINDOW > now_s && m->sec[i] < now_s) {
            n += m->done[i];
            oldest = LG_MIN(oldest, m->sec[i]);
        }
    }
    return n == 0 ? 0.0 : (double)n / (double)(now_s - oldest);
}

/* Seconds until `ahead` waiters have drained, by the observed rate. */
static uint32_t
admission_retry_after_s(struct lg_admission *a, struct admission_model *m, uint32_t ahead)
{
    uint64_t queue_s = (a->gw->conf->timeouts.queue_ms + 999) / 1000;
    double rate;
    double s;

    pthread_mutex_lock(&a->lock);
    rate = admission_drain_rate(m, lg_now_ns() / LG_NS_PER_S);
    pthread_mutex_unlock(&a->lock);
    s = rate > 0 ? ceil((double)(ahead + 1) / rate) : (double)queue_s;
    return (uint32_t)LG_MAX(1.0, LG_MIN(s, 3600.0));
}

/* ---- setup -------------------------------------------------------------- */

/*
 * A checker thread marked a backend up: every worker with waiters looks at
 * once (held requests wait for exactly this), rather than at its next tick.
 */
static void
admission_on_backend_up(void *arg, const struct lg_backend *b)
{
    struct lg_admission *a = arg;

    (void)b;
    for (unsigned i = 0; i < a->nworkers; i++) {
        if (__atomic_load_n(&a->aw[i].nwaiting, __ATOMIC_ACQUIRE) > 0) {
            lg_worker_post(a->aw[i].w, LG_WORKER_CMD_ADMIT);
        }
    }
}

struct lg_admission *
lg_admission_new(struct lg_gateway *gw)
{
    struct lg_admission *a = lg_xcalloc(1, sizeof(*a));

    a->gw = gw;
    a->nworkers = gw->nworkers;
    a->aw = lg_xcalloc(a->nworkers ? a->nworkers : 1, sizeof(*a->aw));
    pthread_mutex_init(&a->lock, NULL);
    TAILQ_INIT(&a->active);
    a->tenants = lg_tenants_new(&gw->conf->tenants);
    a->half_life_s = (double)gw->conf->tenants.half_life_ms / 1000.0;
    for (unsigned i = 0; i < a->nworkers; i++) {
        struct admission_worker *aw = &a->aw[i];

        aw->a = a;
        aw->w = &gw->workers[i];
        TAILQ_INIT(&aw->waiters);
        aw->wake = event_new(aw->w->base, -1, 0, admission_on_wake, aw);
        aw->tick = event_new(aw->w->base, -1, EV_PERSIST, admission_on_wake, aw);
    }
    lg_health_check_set_up_hook(admission_on_backend_up, a);
    return a;
}

void
lg_admission_free(struct lg_admission *a)
{
    if (a == NULL) {
        return;
    }
    lg_health_check_set_up_hook(NULL, NULL); /* no checker thread calls into a from now on */
    for (unsigned i = 0; i < a->nworkers; i++) {
        LG_BUG_ON(!TAILQ_EMPTY(&a->aw[i].waiters));
        event_free(a->aw[i].wake);
        event_free(a->aw[i].tick);
    }
    for (size_t b = 0; b < ADMISSION_BUCKETS; b++) {
        struct admission_model *m = a->buckets[b], *next;

        for (; m != NULL; m = next) {
            next = m->next;
            lg_sched_destroy(&m->q);
            lg_sched_destroy(&m->held_q);
            free(m->name);
            free(m);
        }
    }
    pthread_mutex_destroy(&a->lock);
    lg_tenants_free(a->tenants);
    free(a->aw);
    free(a);
}

void
lg_admission_configure(struct lg_admission *a, const struct lg_config *conf)
{
    if (a == NULL) {
        return;
    }
    lg_tenants_configure(a->tenants, &conf->tenants);
    pthread_mutex_lock(&a->lock);
    if (a->half_life_s != (double)conf->tenants.half_life_ms / 1000.0) {
        a->half_life_s = (double)conf->tenants.half_life_ms / 1000.0;
    }
    pthread_mutex_unlock(&a->lock);
}

struct lg_tenants *
lg_admission_tenants(struct lg_admission *a)
{
    return a != NULL ? a->tenants : NULL;
}

unsigned
lg_admission_waiting(const struct lg_admission *a)
{
    return a != NULL ? __atomic_load_n(&a->waiting, __ATOMIC_ACQUIRE) : 0;
}

/* ---- the queue ---------------------------------------------------------- */

/* Onto its worker's list (its place in the queue is its item's, kept until dropped). */
static void
admission_insert(struct admission_worker *aw, struct lg_admission_waiter *wt)
{
    TAILQ_INSERT_TAIL(&aw->waiters, wt, link);
    wt->state = ADMISSION_ST_QUEUED;
    if (__atomic_fetch_add(&aw->nwaiting, 1, __ATOMIC_ACQ_REL) == 0) {
        struct timeval tick = { 0, ADMISSION_TICK_MS * 1000 };

        event_add(aw->tick, &tick);
    }
    __atomic_fetch_add(&aw->a->waiting, 1, __ATOMIC_ACQ_REL);
}

static void
admission_unlink(struct lg_admission_waiter *wt)
{
    struct admission_worker *aw = wt->aw;

    TAILQ_REMOVE(&aw->waiters, wt, link);
    if (__atomic_sub_fetch(&aw->nwaiting, 1, __ATOMIC_ACQ_REL) == 0) {
        event_del(aw->tick);
    }
    __atomic_sub_fetch(&aw->a->waiting, 1, __ATOMIC_ACQ_REL);
}

static void admission_wake(struct lg_admission *a, unsigned self);

/*
 * Forgets the waiter: out of its worker's list (if in it), out of its model's
 * order and count, freed. The next in line may go now (or the slot it took is
 * gone, and they find no room): every worker with waiters gets to look.
 */
static void
admission_drop(struct lg_admission_waiter *wt)
{
    struct lg_admission *a = wt->aw->a;
    unsigned self = (unsigned)(wt->aw - a->aw); /* the waiter's worker: this thread */

    if (wt->state == ADMISSION_ST_QUEUED) {
        admission_unlink(wt);
    }
    pthread_mutex_lock(&a->lock);
    lg_sched_remove(wt->cold ? &wt->m->held_q : &wt->m->q, &wt->item);
    wt->m->held -= wt->cold ? 1 : 0;
    if (--wt->m->queued == 0) {
        TAILQ_REMOVE(&a->active, wt->m, active);
    }
    pthread_mutex_unlock(&a->lock);
    if (wt->c->req.sched.tenant != NULL) {
        __atomic_sub_fetch(&wt->c->req.sched.tenant->queued[wt->item.cls], 1, __ATOMIC_RELAXED);
    }
    wt->c->req.sched.queue_ns += lg_now_ns() - wt->since_ns;
    wt->c->req.sched.waiter = NULL;
    event_free(wt->deadline);
    free(wt);
    if (__atomic_load_n(&a->waiting, __ATOMIC_ACQUIRE) > 0) {
        /*
         * From this worker's loop, after what runs now: a waiter that got a
         * slot takes it (its launch) before others look, or another
         * worker's waiter would find the slot still free and overtake.
         */
        a->aw[self].wake_others = true;
        event_active(a->aw[self].wake, EV_TIMEOUT, 0);
    }
}

static void
admission_on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct lg_admission_waiter *wt = arg;
    struct lg_client *c = wt->c;
    struct lg_admission *a = wt->aw->a;
    uint32_t ra;
    int cls;

    (void)fd;
    (void)what;
    if (wt->cold) {
        const struct lg_sfz_conf *z = &c->req.fleet->conf->scale_from_zero;

        pthread_mutex_lock(&a->lock);
        wt->m->held_expired++;
        pthread_mutex_unlock(&a->lock);
        c->req.retry_after_ms = z->retry_after_ms;
        admission_drop(wt);
        lg_client_fail(c, 503, "no_replica_ready",
                       "no replica of model \"%s\" became ready while the request was held; "
                       "it may be scaling up from zero, try again later",
                       c->req.info.model);
        return;
    }
    pthread_mutex_lock(&a->lock);
    ra = wt->m->queued;
    pthread_mutex_unlock(&a->lock);
    c->req.retry_after_ms = admission_retry_after_s(a, wt->m, ra) * 1000;
    cls = wt->item.cls;
    admission_drop(wt);
    if (c->req.fleet->conf->scheduling.classes[cls].queue_deadline_ms > 0) {
        /* the class's own deadline: a rate limit, which clients retry after Retry-After */
        lg_admission_refuse(a, c, LG_SHED_QUEUE_DEADLINE);
        return;
    }
    lg_client_fail(c, 503, "queue_timeout",
                   "every backend for \"%s\" stayed busy for the queue timeout; try again later",
                   c->req.info.model);
}

/* The longest a request of class cls waits in the queue (ms). */
static uint64_t
admission_wait_ms(const struct lg_config *conf, int cls)
{
    uint64_t d = conf->scheduling.classes[cls].queue_deadline_ms;

    return d > 0 ? d : conf->timeouts.queue_ms;
}

/*
 * How a request waits: for a busy backend's slot (limits.queue_length,
 * timeouts.queue), or held for a replica to become ready (cold: the model's
 * scale_from_zero bounds).
 */
struct admission_bounds {
    bool cold;
    uint32_t max;     /* waiters of this kind per model */
    uint64_t wait_ms; /* the deadline */
};

/* A model's first held request in a hold: the wake-up (under a->lock). */
static bool
admission_should_wake(struct admission_model *m, const struct admission_bounds *k, uint64_t now)
{
    if (m->woken_ns != 0 && now - m->woken_ns < k->wait_ms * LG_NS_PER_MS) {
        return false; /* asked already in this cold period (and within its hold) */
    }
    m->woken_ns = now;
    m->wakeups++;
    return true;
}

/* The request is refused: its model's waiters of its kind are `ahead`, the most. */
static void
admission_refuse(struct lg_admission *a, struct lg_client *c, struct admission_model *m,
                 const struct admission_bounds *k, uint32_t ahead)
{
    if (k->cold) {
        c->req.retry_after_ms = c->req.fleet->conf->scale_from_zero.retry_after_ms;
        lg_client_fail(c, 503, "model_scaled_to_zero",
                       "no replica of model \"%s\" is ready (scaled to zero?) and %u requests "
                       "are held for one already; try again later",
                       c->req.info.model, ahead);
        return;
    }
    c->req.retry_after_ms = admission_retry_after_s(a, m, ahead) * 1000;
    lg_client_fail(c, 429, "queue_full",
                   "every backend for \"%s\" is busy and %u requests are waiting already",
                   c->req.info.model, ahead);
}

/* Queues c, or fails it when its model's queue of its kind is full; LG_OK or LG_EBUSY. */
static int
admission_enqueue(struct lg_admission *a, struct lg_client *c, lg_admission_resume_fn resume,
                  const struct admission_bounds *k)
{
    const struct lg_config *conf = c->req.fleet->conf;
    struct admission_worker *aw;
    struct lg_admission_waiter *wt;
    struct admission_model *m;
    uint32_t ahead, held = 0;
    bool full, wake = false;
    struct timeval tv;

    if (a == NULL || c->w->id >= a->nworkers) {
        c->req.retry_after_ms = 1000;
        lg_client_fail(c, 429, "queue_full", "every backend for \"%s\" is busy", c->req.info.model);
        return LG_EBUSY;
    }
    aw = &a->aw[c->w->id];
    wt = lg_xcalloc(1, sizeof(*wt));
    wt->c = c;
    wt->resume = resume;
    wt->aw = aw;
    wt->cold = k->cold;
    wt->state = ADMISSION_ST_DISPATCHING; /* not in the worker's list yet */
    pthread_mutex_lock(&a->lock);
    m = admission_model(a, c->req.info.model);
    ahead = k->cold ? m->held : m->queued - m->held;
    full = ahead >= k->max;
    if (!full) {
        if (m->queued++ == 0) {
            TAILQ_INSERT_TAIL(&a->active, m, active);
        }
        m->held += k->cold ? 1 : 0;
        held = m->held;
        wt->m = m;
        wt->since_ns = lg_now_ns();
        wt->item.cls = c->req.sched.cls;
        if (k->cold) {
            /* held for a replica: released by arrival, whatever the class or tenant */
            wt->item.deadline_ns = 0;
            lg_sched_push(&m->held_q, &wt->item, NULL, false);
            wake = admission_should_wake(m, k, wt->since_ns);
        } else {
            wt->item.deadline_ns = c->req.sched.deadline_ns;
            if (wt->item.deadline_ns == 0) {
                /* no TTFT target: its class's queue deadline orders it among its tenant's */
                wt->item.deadline_ns = wt->since_ns + k->wait_ms * LG_NS_PER_MS;
            }
            lg_sched_push(&m->q, &wt->item, c->req.sched.tenant, conf->scheduling.fair);
        }
    } else {
        m->held_full += k->cold ? 1 : 0;
    }
    pthread_mutex_unlock(&a->lock);
    if (full) {
        free(wt);
        admission_refuse(a, c, m, k, ahead);
        return LG_EBUSY;
    }
    if (c->req.sched.tenant != NULL) {
        __atomic_add_fetch(&c->req.sched.tenant->queued[wt->item.cls], 1, __ATOMIC_RELAXED);
    }
    if (wake) {
        LG_INFO("scale_from_zero: no replica of model \"%s\" is ready: holding its requests%s",
                c->req.info.model,
                conf->scale_from_zero.webhook != NULL ? ", calling the wake-up webhook" : "");
        lg_wakeup_call(a->gw->wakeup, conf->scale_from_zero.webhook,
                       conf->scale_from_zero.webhook_timeout_ms, c->req.info.model, held);
    }
    wt->deadline = evtimer_new(c->w->base, admission_on_deadline, wt);
    tv.tv_sec = (time_t)(k->wait_ms / 1000);
    tv.tv_usec = (suseconds_t)((k->wait_ms % 1000) * 1000);
    evtimer_add(wt->deadline, &tv);
    c->req.sched.waiter = wt;
    admission_insert(aw, wt);
    lg_client_set_state(c, LG_CLIENT_ST_CONNECT); /* waiting; its read stays on for EOF */
    LG_CONN_LOG(LG_LOG_DEBUG, c, "%s for model \"%s\" behind %u", k->cold ? "held" : "queued",
                c->req.info.model, ahead);
    return LG_OK;
}

/* A busy backend's slot: the admission queue's bounds (the wait: its class's). */
static void
admission_busy_bounds(const struct lg_client *c, struct admission_bounds *k)
{
    const struct lg_config *conf = c->req.fleet->conf;

    k->cold = false;
    k->max = conf->limits.queue_length;
    k->wait_ms = admission_wait_ms(conf, c->req.sched.cls);
}

/*
 * Is c a request to hold for a replica: scale from zero is on for its
 * model, it has not tried any backend, and none of its model is ready?
 */
static bool
admission_cold_bounds(const struct lg_client *c, struct admission_bounds *k)
{
    const struct lg_config *conf = c->req.fleet->conf;

    if (c->req.tries.n != 0 || c->req.models == NULL
        || !lg_config_sfz(conf, c->req.info.model, &k->max, &k->wait_ms)) {
        return false;
    }
    k->cold = true;
    return !lg_router_has_candidate(c->req.models, &c->req.tries.tried, c->req.sched.cls);
}

/*
 * Wakes every worker that has waiters (deferred to each one's loop). Called
 * on worker `self`'s thread: its own wake event is activated directly, the
 * others get LG_WORKER_CMD_ADMIT (worker bases have no lock, so another
 * thread must not activate their events).
 */
static void
admission_wake(struct lg_admission *a, unsigned self)
{
    for (unsigned i = 0; i < a->nworkers; i++) {
        if (__atomic_load_n(&a->aw[i].nwaiting, __ATOMIC_ACQUIRE) == 0) {
            continue;
        }
        if (i == self) {
            event_active(a->aw[i].wake, EV_TIMEOUT, 0);
        } else {
            lg_worker_post(a->aw[i].w, LG_WORKER_CMD_ADMIT);
        }
    }
}

void
lg_admission_wake_worker(struct lg_admission *a, unsigned worker)
{
    if (a != NULL && worker < a->nworkers) {
        event_active(a->aw[worker].wake, EV_TIMEOUT, 0);
    }
}

/* Is c of a class refused rather than queued? */
static bool
admission_sheddable(const struct lg_client *c)
{
    const struct lg_scheduling_conf *sc = &c->req.fleet->conf->scheduling;

    return sc->fair && sc->classes[c->req.sched.cls].sheddable;
}

void
lg_admission_refuse(struct lg_admission *a, struct lg_client *c, enum lg_shed why)
{
    struct lg_req_sched *rs = &c->req.sched;
    uint32_t ahead = 0;
    struct admission_model *m = NULL;

    rs->shed = (uint8_t)why;
    if (a != NULL) {
        __atomic_add_fetch(&a->refused[rs->cls][why], 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&a->lock);
        m = admission_model(a, c->req.info.model);
        ahead = m->queued;
        pthread_mutex_unlock(&a->lock);
    }
    if (rs->tenant != NULL) {
        __atomic_add_fetch(&rs->tenant->shed[rs->cls], 1, __ATOMIC_RELAXED);
    }
    c->req.retry_after_ms = m != NULL ? admission_retry_after_s(a, m, ahead) * 1000 : 1000;
    switch (why) {
    case LG_SHED_QUEUE_DEADLINE:
        lg_client_fail(c, 429, "rate_limit_exceeded",
                       "queue: the request waited %" PRIu64 " ms for a backend of \"%s\", its "
                       "class's (%s) queue deadline; try again later",
                       (uint64_t)(rs->queue_ns / LG_NS_PER_MS), c->req.info.model,
                       lg_class_name(rs->cls));
        break;
    case LG_SHED_TTFT_TARGET:
        lg_client_fail(c, 429, "rate_limit_exceeded",
                       "queue: no backend of \"%s\" is predicted to give the first token within "
                       "the target of %u ms; class %s is shed first; try again later",
                       c->req.info.model, rs->ttft_target_ms, lg_class_name(rs->cls));
        break;
    default:
        lg_client_fail(c, 429, "rate_limit_exceeded",
                       "queue: every backend of \"%s\" is busy and class %s does not wait; try "
                       "again later",
                       c->req.info.model, lg_class_name(rs->cls));
        break;
    }
}

bool
lg_admission_hold(struct lg_admission *a, struct lg_client *c, int rc,
                  lg_admission_resume_fn resume)
{
    struct lg_admission_waiter *wt = c->req.sched.waiter;
    bool full = rc != LG_OK && c->req.att != NULL && c->req.att->pick.full; /* its pick's */
    struct admission_bounds k;

    if (wt != NULL) {
        /* back from the queue */
        if (rc == LG_OK && wt->cold) {
            pthread_mutex_lock(&wt->aw->a->lock);
            wt->m->woken_ns = 0; /* a replica is ready: the model's cold period is over */
            pthread_mutex_unlock(&wt->aw->a->lock);
        }
        if (rc == LG_OK || (!full && !wt->cold)) {
            admission_drop(wt);
            return false;
        }
        /* lost the slot to a race, or the replica went again: back to its place */
        admission_insert(wt->aw, wt);
        return true;
    }
    if (rc == LG_OK) {
        uint32_t queued = 0;

        if (a == NULL || __atomic_load_n(&a->waiting, __ATOMIC_ACQUIRE) == 0) {
            return false;
        }
        pthread_mutex_lock(&a->lock);
        queued = admission_model(a, c->req.info.model)->queued;
        pthread_mutex_unlock(&a->lock);
        if (queued == 0) {
            return false;
        }
        if (c->req.att != NULL && c->req.att->pick.probe) {
            /* the pick claimed a half-open backend's probe, which it will not send now */
            lg_backend_release_probe(c->req.att->pick.backend);
            c->req.att->pick.probe = false;
        }
        if (admission_sheddable(c)) {
            lg_admission_refuse(a, c, LG_SHED_SATURATED); /* others wait: it would too */
            return true;
        }
        /* others wait for this model: no overtaking; they get the free slot first */
        admission_busy_bounds(c, &k);
        if (admission_enqueue(a, c, resume, &k) == LG_OK) {
            admission_wake(a, c->w->id); /* there is room: let the first in line take it */
        }
        return true;
    }
    if (full) {
        if (admission_sheddable(c)) {
            lg_admission_refuse(a, c, LG_SHED_SATURATED);
            return true;
        }
        admission_busy_bounds(c, &k);
    } else if (!admission_cold_bounds(c, &k)) {
        return false;
    } /* else no replica is ready: held for one, whatever its class */
    admission_enqueue(a, c, resume, &k);
    return true;
}

bool
lg_admission_can_wait(const struct lg_model_route *route, const struct lg_tried *tried,
                      unsigned cls)
{
    uint64_t now = lg_now_ns();

    for (size_t i = 0; route != NULL && i < route->n; i++) {
        const struct lg_backend *b = route->backends[i];

        uint32_t max = lg_backend_conf(b)->max_inflight;

        if (!lg_tried_has(tried, i) && lg_backend_is_available(b, now) && max != 0
            && lg_backend_inflight_from(b, cls) >= max) {
            return true;
        }
    }
    return false;
}

void
lg_admission_cancel(struct lg_client *c)
{
    if (c->req.sched.waiter != NULL) {
        admission_drop(c->req.sched.waiter);
    }
}

/*
 * The model's next waiter, or NULL (under a->lock): its held ones first, by
 * arrival (they wait for a replica to turn ready, which serves them before
 * the scheduler's order of the others).
 */
static struct lg_sched_item *
admission_head(const struct admission_model *m)
{
    struct lg_sched_item *head = lg_sched_head(&m->held_q);

    return head != NULL ? head : lg_sched_head(&m->q);
}

/*
 * The route a waiter would be dispatched to: its own, or when its worker
 * adopted a newer fleet (a reload, DNS discovery adding replicas) and it
 * has tried nothing yet, its model's route there (NULL: gone), which the
 * proxy moves it to when it resumes.
 */
static const struct lg_model_route *
admission_route(const struct lg_client *c)
{
    if (c->req.tries.n == 0 && c->req.fleet != c->w->fleet) {
        return lg_fleet_find_model(c->w->fleet, c->req.info.model);
    }
    return c->req.models;
}

/*
 * This worker's next waiter to dispatch: of the models with waiters (not in
 * `skip`), the first whose head waits on this worker, is not being
 * dispatched already, and finds a backend with room now (or whose model
 * left the configuration); the models seen without room, or headed
 * elsewhere, are noted in `skip` and not looked at again in this pass.
 * O(models with waiters).
 */
static struct lg_admission_waiter *
admission_next(struct admission_worker *aw, const struct admission_model **skip, size_t *nskip,
               size_t cap)
{
    struct lg_admission *a = aw->a;
    struct lg_admission_waiter *mine[32];
    size_t nmine = 0;
    struct admission_model *m;

    pthread_mutex_lock(&a->lock);
    TAILQ_FOREACH (m, &a->active, active) {
        struct lg_sched_item *head = admission_head(m);
        struct lg_admission_waiter *wt;
        bool known = false;

        for (size_t i = 0; i < *nskip && !known; i++) {
            known = skip[i] == m;
        }
        if (known || head == NULL) {
            continue;
        }
        wt = (struct lg_admission_waiter *)((char *)head
                                            - offsetof(struct lg_admission_waiter, item));
        if (wt->aw == aw && wt->state == ADMISSION_ST_QUEUED && nmine < LG_ARRAY_SIZE(mine)) {
            mine[nmine++] = wt; /* this thread's: freed by nobody else */
        }
    }
    pthread_mutex_unlock(&a->lock);
    for (size_t i = 0; i < nmine; i++) {
        const struct lg_model_route *route = admission_route(mine[i]->c);

        if (route == NULL
            || lg_router_has_candidate(route, &mine[i]->c->req.tries.tried,
                                       mine[i]->c->req.sched.cls)) {
            return mine[i]; /* room now, or its model left the configuration (the proxy says so) */
        }
        if (*nskip < cap) {
            skip[(*nskip)++] = mine[i]->m; /* no room for its model now */
        }
    }
    return NULL;
}

/*
 * Dispatches, in order, the waiters that head their model's queue and find
 * room. Each pass takes one waiter out or notes its model, so it ends. After
 * its resume() the waiter may be freed (and its request over): only
 * the client, which outlives this callback, is looked at again.
 */
static void
admission_on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct admission_worker *aw = arg;
    const struct admission_model *skip[32];
    size_t nskip = 0;
    struct lg_admission_waiter *wt;

    (void)fd;
    (void)what;
    if (aw->wake_others) {
        aw->wake_others = false;
        admission_wake(aw->a, (unsigned)(aw - aw->a->aw));
    }
    while ((wt = admission_next(aw, skip, &nskip, LG_ARRAY_SIZE(skip))) != NULL) {
        struct lg_client *c = wt->c;
        const struct admission_model *m = wt->m;

        admission_unlink(wt);
        wt->state = ADMISSION_ST_DISPATCHING;
        wt->resume(c); /* ends in lg_admission_hold(): dropped or queued again */
        if (c->req.sched.waiter != NULL && c->req.sched.waiter->state == ADMISSION_ST_QUEUED
            && nskip < LG_ARRAY_SIZE(skip)) {
            skip[nskip++] = m; /* it went back: its model is full again */
        }
    }
}

void
lg_admission_kick(struct lg_admission *a, unsigned worker)
{
    if (a != NULL && __atomic_load_n(&a->waiting, __ATOMIC_ACQUIRE) > 0) {
        admission_wake(a, worker);
    }
}

void
lg_admission_released(struct lg_admission *a, unsigned worker, const char *model, uint64_t now_ns)
{
    uint64_t now_s = now_ns / LG_NS_PER_S;
    struct admission_model *m;
    size_t slot = now_s % ADMISSION_WINDOW;

    if (a == NULL) {
        return;
    }
    pthread_mutex_lock(&a->lock);
    m = admission_model(a, model);
    if (m->sec[slot] != now_s) {
        m->sec[slot] = now_s;
        m->done[slot] = 0;
    }
    m->done[slot]++;
    pthread_mutex_unlock(&a->lock);
    if (__atomic_load_n(&a->waiting, __ATOMIC_ACQUIRE) > 0) {
        admission_wake(a, worker);
    }
}

void
lg_admission_model_stats(struct lg_admission *a, const char *model,
                         struct lg_admission_model_stats *out)
{
    struct admission_model *m;

    pthread_mutex_lock(&a->lock);
    m = admission_model(a, model);
    out->queued = m->queued;
    out->held = m->held;
    out->wakeups = m->wakeups;
    out->held_full = m->held_full;
    out->held_expired = m->held_expired;
    pthread_mutex_unlock(&a->lock);
}

uint32_t
lg_admission_queued(struct lg_admission *a, const char *model)
{
    uint32_t n;

    pthread_mutex_lock(&a->lock);
    n = admission_model(a, model)->queued;
    pthread_mutex_unlock(&a->lock);
    return n;
}

/* ---- tenants' attained service ----------------------------------------- */

void
lg_admission_charge(struct lg_admission *a, struct lg_client *c)
{
    struct lg_req_sched *rs = &c->req.sched;
    const struct lg_config *conf = c->req.fleet->conf;
    uint32_t per = conf->budgets.prompt_bytes_per_token ? conf->budgets.prompt_bytes_per_token : 4;

    if (a == NULL || rs->charged || rs->tenant == NULL) {
        return;
    }
    rs->charged = true;
    rs->prompt_tokens = c->req.info.prompt_bytes / per + 1;
    __atomic_add_fetch(&rs->tenant->admitted[rs->cls], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&rs->tenant->wait_ms[rs->cls], rs->queue_ns / LG_NS_PER_MS,
                       __ATOMIC_RELAXED);
    pthread_mutex_lock(&a->lock);
    lg_sched_charge(rs->tenant, (double)rs->prompt_tokens, (double)lg_now_ns() / 1e9,
                    a->half_life_s);
    pthread_mutex_unlock(&a->lock);
}

void
lg_admission_settle(struct lg_admission *a, struct lg_client *c)
{
    const struct lg_request *req = &c->req;
    struct lg_req_sched *rs = &c->req.sched;
    int64_t out = (req->flags & LG_REQ_F_SSE) ? lg_sse_completion_tokens(&req->scan.sse)
                                              : req->scan.probe.completion_tokens;
    int64_t prompt = (req->flags & LG_REQ_F_SSE) ? req->scan.sse.probe.prompt_tokens
                                                 : req->scan.probe.prompt_tokens;
    double rest;

    if (rs->tenant == NULL) {
        return;
    }
    if (rs->charged && a != NULL) {
        if (out < 0) {
            out = (int64_t)req->content_events;
        }
        if (prompt <= 0) {
            prompt = (int64_t)rs->prompt_tokens;
        }
        rest = (double)prompt - (double)rs->prompt_tokens + 2.0 * (double)out;
        __atomic_add_fetch(&rs->tenant->tokens[rs->cls], (uint64_t)prompt + (uint64_t)out,
                           __ATOMIC_RELAXED);
        pthread_mutex_lock(&a->lock);
        /* the request ended a moment ago (its end stamped): no clock read */
        lg_sched_charge(rs->tenant, rest, (double)(req->t_end ? req->t_end : lg_now_ns()) / 1e9,
                        a->half_life_s);
        pthread_mutex_unlock(&a->lock);
    }
    lg_tenant_release(a != NULL ? a->tenants : NULL, rs);
}

/* ---- views -------------------------------------------------------------- */

void
lg_admission_classes(struct lg_admission *a, struct lg_admission_class_view *out)
{
    struct admission_model *m;

    memset(out, 0, LG_NCLASSES * sizeof(*out));
    if (a == NULL) {
        return;
    }
    pthread_mutex_lock(&a->lock);
    TAILQ_FOREACH (m, &a->active, active) {
        for (int c = 0; c < LG_NCLASSES; c++) {
            out[c].queued += m->q.queued[c] + m->held_q.queued[c];
        }
    }
    pthread_mutex_unlock(&a->lock);
    for (int c = 0; c < LG_NCLASSES; c++) {
        for (int r = 0; r < LG_SHED_NREASONS; r++) {
            out[c].refused[r] = __atomic_load_n(&a->refused[c][r], __ATOMIC_RELAXED);
        }
    }
}

void
lg_admission_foreach_model(struct lg_admission *a, lg_admission_model_fn fn, void *arg)
{
    struct admission_model *m;
    uint64_t now = lg_now_ns();

    if (a == NULL) {
        return;
    }
    pthread_mutex_lock(&a->lock);
    TAILQ_FOREACH (m, &a->active, active) {
        struct lg_sched_item *head = admission_head(m);
        uint32_t queued[LG_NCLASSES];
        double wait = 0;

        if (head != NULL) {
            const struct lg_admission_waiter *wt =
                (const struct lg_admission_waiter *)((const char *)head
                                                     - offsetof(struct lg_admission_waiter, item));

            wait = (double)(now - wt->since_ns) / 1e6;
        }
        for (int c = 0; c < LG_NCLASSES; c++) {
            queued[c] = m->q.queued[c] + m->held_q.queued[c];
        }
        fn(m->name, queued, wait, arg);
    }
    pthread_mutex_unlock(&a->lock);
}

struct tenant_views {
    struct lg_admission *a;
    struct lg_tenant_view *v;
    size_t n, cap;
    double now_s;
};

/* Under the tenants' lock (then the queue's: the one order the two nest in). */
static void
admission_tenant_view(struct lg_tenant *tn, void *arg)
{
    struct tenant_views *tv = arg;
    struct lg_tenant_view *v;

    if (tv->n == tv->cap) {
        tv->cap = tv->cap ? 2 * tv->cap : 64;
        tv->v = lg_xrealloc(tv->v, tv->cap * sizeof(*tv->v));
    }
    v = &tv->v[tv->n++];
    memset(v, 0, sizeof(*v));
    snprintf(v->name, sizeof(v->name), "%s", tn->name);
    for (int c = 0; c < LG_NCLASSES; c++) {
        v->queued[c] = __atomic_load_n(&tn->queued[c], __ATOMIC_RELAXED);
        v->admitted[c] = __atomic_load_n(&tn->admitted[c], __ATOMIC_RELAXED);
        v->shed[c] = __atomic_load_n(&tn->shed[c], __ATOMIC_RELAXED);
        v->tokens[c] = __atomic_load_n(&tn->tokens[c], __ATOMIC_RELAXED);
        v->wait_ms[c] = __atomic_load_n(&tn->wait_ms[c], __ATOMIC_RELAXED);
    }
    pthread_mutex_lock(&tv->a->lock);
    v->service = lg_sched_service(tn, tv->now_s, tv->a->half_life_s);
    pthread_mutex_unlock(&tv->a->lock);
}

static uint64_t
tenant_view_tokens(const struct lg_tenant_view *v)
{
    uint64_t n = 0;

    for (int c = 0; c < LG_NCLASSES; c++) {
        n += v->tokens[c];
    }
    return n;
}

static int
tenant_view_cmp(const void *x, const void *y)
{
    uint64_t a = tenant_view_tokens(x), b = tenant_view_tokens(y);

    return a > b ? -1 : a < b ? 1 : strcmp(((const struct lg_tenant_view *)x)->name,
                                           ((const struct lg_tenant_view *)y)->name);
}

size_t
lg_admission_tenant_views(struct lg_admission *a, struct lg_tenant_view **out)
{
    struct tenant_views tv = { .a = a, .now_s = (double)lg_now_ns() / 1e9 };

    *out = NULL;
    if (a == NULL) {
        return 0;
    }
    lg_tenants_foreach(a->tenants, admission_tenant_view, &tv);
    if (tv.n > 1) {
        qsort(tv.v, tv.n, sizeof(*tv.v), tenant_view_cmp);
    }
    *out = tv.v;
    return tv.n;
}
