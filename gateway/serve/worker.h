/*
 * worker.h: the gateway process and its event-loop threads.
 *
 * struct lg_gateway is the process: configuration, fleet, workers. Each
 * struct lg_worker is one thread with its own event_base, its own listening
 * sockets (SO_REUSEPORT: the kernel spreads connections), its clients and
 * its upstream pools. Objects of a worker, its event base included, are
 * touched only by its thread (the base has no lock): other threads talk to
 * it through lg_worker_post() and nothing else, never event_active().
 *
 * The loop itself knows nothing of what runs on it: objects it frees later
 * say how (struct lg_reap), and what a command means is the gateway's
 * (struct lg_worker_ops, serve/gateway.c).
 */
#ifndef LG_WORKER_H
#define LG_WORKER_H

#include <pthread.h>
#include <sys/queue.h>

#include "base/lg_core.h"
#include "base/stats.h"

struct event;
struct event_base;
struct timeval;
struct evconnlistener;
struct lg_client;
struct lg_connlimit;
struct lg_tls;
struct lg_keys;
struct lg_budgetstore;
struct lg_admission;
struct lg_wakeup;
struct lg_otlp;
struct lg_fleet;
struct lg_config;
struct lg_accesslog;
struct lg_respmap;
struct lg_alog_buf;
struct lg_reload;
struct lg_admin;
struct lg_worker;
struct lg_worker_ops;

TAILQ_HEAD(lg_client_list, lg_client);

/*
 * An object a worker frees at the top of its loop, never from inside one of
 * its own callbacks (lg_worker_reap()): embedded in the object, with the
 * function that frees it.
 */
struct lg_reap {
    TAILQ_ENTRY(lg_reap) link;
    void (*free)(struct lg_reap *r);
};
TAILQ_HEAD(lg_reap_list, lg_reap);

/* Commands another thread can post to a worker (bit flags). */
#define LG_WORKER_CMD_DRAIN 1u /* stop accepting, close idle clients, exit when empty */
#define LG_WORKER_CMD_STOP  2u /* exit now: cut whatever runs */
#define LG_WORKER_CMD_FLEET 4u /* adopt gw->fleet */
#define LG_WORKER_CMD_ADMIT 8u /* look at this worker's admission queue (admission.c) */

/* Durations a worker keeps as libevent common timeouts (lg_worker_timeout). */
#define LG_WORKER_TIMEOUTS 16

struct lg_worker_timeout {
    uint64_t ms;
    const struct timeval *tv; /* event_base_init_common_timeout()'s, owned by the base */
};

struct lg_worker_stats {
    uint64_t accepted;  /* client connections accepted */
    uint64_t refused;   /* refused over max_connections */
    uint64_t requests;  /* requests completed (any status) */
    uint64_t bytes_in;  /* request bytes received from clients */
    uint64_t bytes_out; /* response bytes sent to clients */
};

/* A worker's hedge budget (serve/hedge.c): tokens earned by eligible
 * requests, spent by duplicates. */
struct lg_hedge_budget {
    double tokens;
    uint64_t refill_ns; /* 0: not started (it starts empty) */
};

/* A block kept for reuse, in a list through its first member (free() frees it). */
struct lg_free_node {
    struct lg_free_node *next;
};

struct lg_worker {
    unsigned id;
    struct lg_gateway *gw; /* borrowed */
    pthread_t thread;
    struct event_base *base;           /* owned */
    struct evconnlistener **listeners; /* owned; NULL entries once closed */
    size_t nlisteners;
    struct event *accept_retry; /* re-enables listeners after EMFILE */
    struct event *cmd_ev;       /* reads cmd_fd */
    int cmd_fd;                 /* owned eventfd: lg_worker_post() writes to it */
    uint32_t cmd;               /* atomic: pending LG_WORKER_CMD_* bits */
    struct event *reap_ev;      /* frees what reap holds */
    struct event *purge_ev;     /* closes pooled connections above the kept count */
    struct event *park_ev;      /* parks keep-alive clients idle a while (client.c) */
    struct lg_reap_list reap;   /* closed clients and upstream connections */
    struct lg_client_list clients; /* every open client connection */
    struct lg_client_list idle;    /* keep-alive clients between requests, to be parked,
                                      longest idle first (client.c) */
    uint32_t nclients;
    struct lg_fleet *fleet;   /* one reference: the fleet new requests use */
    struct lg_alog_buf *alog; /* this worker's access-log buffer (NULL: off) */
    uint64_t conn_seq;        /* connection ids: id * 2^40 + seq */
    bool draining;
    double retry_tokens; /* retry budget (proxy.c) */
    uint64_t retry_refill_ns;
    struct lg_hedge_budget hedge_budget; /* hedge.c */
    struct lg_free_node *trace_free;     /* owned: traces of ended requests kept for the
                                            next ones (trace.c); NULL: none */
    uint32_t ntrace_free;
    struct lg_worker_stats stats;     /* atomic reads from other threads */
    struct lg_worker_metrics metrics; /* atomic: requests by route and status, decisions */
    struct lg_worker_timeout timeouts[LG_WORKER_TIMEOUTS]; /* lg_worker_timeout() */
    unsigned ntimeouts;
};

struct lg_gateway {
    struct lg_config *conf; /* one reference: the file's configuration in force; the
                                     main thread's (workers read their fleet's conf) */
    char *config_path;
    unsigned nworkers;
    struct lg_worker *workers; /* owned array */
    int *listen_fds;           /* [nlisten * nworkers], handed to workers */
    size_t nlisten;
    pthread_mutex_t fleet_lock;     /* guards fleet */
    struct lg_fleet *fleet;         /* one reference: the current fleet */
    uint32_t nconnections;          /* atomic: open client connections, all workers */
    struct lg_connlimit *connlimit; /* owned: connections per source address */
    struct lg_tls *tls;             /* owned: server TLS contexts per listen entry */
    struct lg_keys *keys;           /* owned: API keys; NULL: no authentication */
    struct lg_budgetstore *budgetstore; /* owned: token budgets shared through Redis; NULL:
                                           this gateway's alone (main thread's) */
    bool budget_refuses;            /* atomic: the store is down and fails closed
                                       (budgetstore.c sets it, requests read it) */
    struct lg_admission *admission; /* owned: the admission queue */
    struct lg_wakeup *wakeup;       /* owned: scale from zero's webhook (main thread's base) */
    struct lg_accesslog *alog;      /* owned; NULL when off */
    struct lg_otlp *tracer;         /* owned: the span exporter; NULL: tracing off */
    struct lg_reload *reload;       /* owned: reloads, discovery (main thread) */
    struct lg_admin *admin;         /* owned: admin listener; NULL when off */
    struct lg_respmap *respmap;     /* owned: where Responses API answers were made
                                       (serve/respmap.h); NULL: not followed */
    bool draining;                  /* atomic: set by the main thread at SIGTERM */
    const struct lg_worker_ops *ops; /* what the workers run (serve/gateway.c) */
};

/*
 * What a worker's loop calls on the gateway's behalf (all on the worker's
 * thread): serve/gateway.c's lg_gateway_worker_ops.
 */
struct lg_worker_ops {
    /* The base exists: attach what runs on it (listeners, timers). */
    int (*attach)(struct lg_worker *w);
    /* LG_WORKER_CMD_ADMIT: look at the admission queue. */
    void (*admit)(struct lg_worker *w);
    /* LG_WORKER_CMD_FLEET: w adopted gw's fleet; `old` (still referenced)
     * was its fleet before. */
    void (*adopted)(struct lg_worker *w, struct lg_fleet *old);
    /* LG_WORKER_CMD_DRAIN, once: stop accepting, let idle clients go (the
     * worker exits when it has none left). */
    void (*drain)(struct lg_worker *w);
    /* After the loop: cut whatever still runs, close what is pooled. */
    void (*cleanup)(struct lg_worker *w);
};

/* Sets up worker `id` (event base, events, then gw->ops->attach); before lg_workers_start(). */
int lg_worker_init(struct lg_gateway *gw, struct lg_worker *w, unsigned id);
/* Frees what lg_worker_init() made, after the thread ended. */
void lg_worker_destroy(struct lg_worker *w);

/* Starts the worker threads (each runs until drained or stopped). */
int lg_workers_start(struct lg_gateway *gw);
void lg_workers_join(struct lg_gateway *gw);

/*
 * Posts command bits to a worker; safe from any thread (the worker's own
 * included). The worker runs them at its next loop turn.
 */
void lg_worker_post(struct lg_worker *w, uint32_t cmd);

/*
 * The timeval to give event_add() or bufferevent_set_timeouts() for a
 * timeout of `ms` on an event of this worker's base; NULL when ms is 0 (no
 * timeout). It is the base's common timeout for that duration (libevent
 * queues equal durations in arrival order: adding one is an append, not
 * min-heap work); when the table is full, `tmp` filled in.
 * It pays for a timeout that many events hold at once (its queue is rarely
 * empty). One armed briefly, into an empty queue, costs more than a plain
 * timeval: libevent re-arms the queue's own timer in the min-heap whenever
 * an event becomes the queue's head. A common timeout means something only
 * to the base it came from, and the table keeps every duration asked for:
 * durations that vary per call (a remaining time) take a plain timeval.
 * Worker thread only.
 */
const struct timeval *lg_worker_timeout(struct lg_worker *w, uint64_t ms, struct timeval *tmp);

/* Returns the gateway's current fleet with a reference (any thread). */
struct lg_fleet *lg_gateway_fleet(struct lg_gateway *gw);

/* Queues a deferred free: r->free(r) at the top of the loop (worker thread only). */
void lg_worker_reap(struct lg_worker *w, struct lg_reap *r);

/* Total clients across workers (approximate, any thread). */
uint32_t lg_gateway_clients(const struct lg_gateway *gw);

#endif /* LG_WORKER_H */
