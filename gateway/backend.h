/*
 * backend.h: replicas and their live state, and the fleet (the set of
 * backends a configuration names, indexed by model).
 *
 * A struct lg_backend is shared by every worker thread. Its live counters are
 * atomics updated with relaxed ordering (they are statistics and routing
 * hints, not synchronisation); the estimates that need several fields updated
 * together sit behind `lock`. The per-worker upstream pools hang off the
 * backend but each is touched only by its own worker.
 */
#ifndef LG_BACKEND_H
#define LG_BACKEND_H

#include <pthread.h>

#include "config.h"
#include "lg_core.h"

struct lg_upstream_pool;
struct ssl_ctx_st;

enum lg_backend_health {
    LG_BACKEND_UP = 0,      /* takes traffic */
    LG_BACKEND_DOWN,        /* failed active checks */
    LG_BACKEND_EJECTED,     /* passive: too many consecutive failures; back-off running */
    LG_BACKEND_DRAINING,    /* admin or reload: no new requests, running ones finish */
};

/* Response classes counted per backend: 1xx..5xx, and "no response". */
#define LG_BACKEND_NCLASS 6

struct lg_backend_stats {
    uint64_t requests;              /* dispatched attempts */
    uint64_t responses[LG_BACKEND_NCLASS]; /* [0] = failed before a status, [k] = kxx */
    uint64_t retries;               /* attempts that were retries */
    uint64_t connect_failures;
    uint64_t timeouts;
    uint64_t cut_streams;           /* failed after bytes reached the client */
    uint64_t client_aborts;         /* client left; upstream closed at once */
    uint64_t connects;              /* new upstream connections */
    uint64_t reuses;                /* requests sent on a pooled connection */
    uint64_t bytes_in;              /* response bytes relayed */
    uint64_t bytes_out;             /* request bytes sent */
};

struct lg_backend {
    char *name;                     /* owned */
    struct lg_backend_conf conf;    /* owned deep copy: outlives the config it came from */
    uint32_t index;                 /* position in the fleet that created it */
    int refcnt;                     /* atomic: fleets and in-flight requests */

    uint32_t inflight;              /* atomic: requests dispatched and not finished */
    int health;                     /* atomic enum lg_backend_health */
    uint64_t retry_after_until_ns;  /* atomic: honour Retry-After until then */
    uint64_t warn_ratelimit_ns;     /* for lg_log_ratelimit() */
    struct lg_backend_stats stats;  /* atomic fields */

    pthread_mutex_t lock;           /* guards what follows */
    uint32_t consecutive_failures;

    struct lg_upstream_pool *pools; /* [nworkers], each owned by its worker */
    unsigned npools;
    struct ssl_ctx_st *tls_ctx;     /* owned (tls.c): https client context, set once (atomic) */
};

/* One model name and the backends serving it (borrowed from the fleet). */
struct lg_model_route {
    const char *model;              /* borrowed from a backend's conf */
    struct lg_backend **backends;   /* owned array of borrowed pointers */
    size_t n;
};

/*
 * The fleet: every backend of one configuration and a model index. Refcounted
 * and immutable once built; workers hold the current one, requests hold the
 * one they started with.
 */
struct lg_fleet {
    int refcnt;                     /* atomic */
    struct lg_config *conf;         /* one reference, released with the fleet */
    struct lg_backend **backends;   /* owned references */
    size_t nbackends;
    struct lg_model_route *models;  /* sorted by name */
    size_t nmodels;
    struct lg_router *router;       /* owned */
};

/*
 * Builds a fleet for conf with `nworkers` upstream pools per backend. Backends
 * of `prev` (may be NULL) with the same name and URL are reused with their
 * live state, so a reload keeps statistics and pooled connections.
 */
int lg_fleet_new(struct lg_config *conf, unsigned nworkers, const struct lg_fleet *prev,
                 struct lg_fleet **out);
struct lg_fleet *lg_fleet_ref(struct lg_fleet *f);
void lg_fleet_unref(struct lg_fleet *f);

/* The backends serving `model` (NULL if none). */
const struct lg_model_route *lg_fleet_find_model(const struct lg_fleet *f, const char *model);

struct lg_backend *lg_backend_ref(struct lg_backend *b);
void lg_backend_unref(struct lg_backend *b);

bool lg_backend_is_available(const struct lg_backend *b, uint64_t now_ns);

/* Counter helpers (relaxed atomics). */
#define LG_STAT_ADD(b, field, n) __atomic_fetch_add(&(b)->stats.field, (n), __ATOMIC_RELAXED)
#define LG_STAT_GET(b, field)    __atomic_load_n(&(b)->stats.field, __ATOMIC_RELAXED)

static inline uint32_t
lg_backend_inflight(const struct lg_backend *b)
{
    return __atomic_load_n(&b->inflight, __ATOMIC_RELAXED);
}

/* Records the outcome of one attempt: status 0 = no response (connect
 * failure, reset, timeout). Drives passive health. */
void lg_backend_note_result(struct lg_backend *b, int status, uint64_t retry_after_ns);

#endif /* LG_BACKEND_H */
