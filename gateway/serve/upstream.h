/*
 * upstream.h: connections to backends and the per-worker keep-alive pool.
 *
 * A struct lg_upconn owns its bufferevent. It is owned by the pool of its
 * backend and worker: idle in the pool's list, or lent to one request while
 * active (the request borrows it, never frees it: it gives it back with
 * lg_upstream_release()). The response parser lives here because it belongs
 * to the connection (it tracks message boundaries for reuse); while the
 * connection is lent, proxy.c sets its bufferevent's callbacks and relay.c
 * its parser's.
 */
#ifndef LG_UPSTREAM_H
#define LG_UPSTREAM_H

#include <sys/queue.h>

#include <event2/util.h>
#include <llhttp.h>

#include "base/lg_core.h"
#include "http/httphdr.h"
#include "serve/worker.h"

struct bufferevent;
struct lg_attempt;
struct lg_backend;
struct lg_client;
struct lg_worker;

enum lg_upconn_state {
    LG_UPCONN_ST_CONNECTING = 0, /* lent, TCP connect in progress */
    LG_UPCONN_ST_ACTIVE,         /* lent to a request */
    LG_UPCONN_ST_IDLE,           /* in the pool */
    LG_UPCONN_ST_CLOSED,         /* queued for reaping */
};

struct lg_upconn {
    uint64_t id;
    struct lg_worker *w;          /* borrowed */
    struct lg_backend *b;         /* one reference */
    struct bufferevent *bev;      /* owned */
    enum lg_upconn_state state;
    llhttp_t parser;              /* response parser, reset per request */
    struct lg_hdrs hdrs;          /* response head */
    struct lg_client *client;     /* borrower while lent; NULL otherwise */
    struct lg_attempt *attempt;   /* the borrower's attempt it carries; NULL when not lent */
    uint32_t requests;            /* requests sent on this connection */
    bool resp_1xx;                /* parsing an interim (1xx) response: skip it */
    bool resp_done;               /* the response message is complete */
    uint64_t head_t_ns;           /* the response head's first byte came; 0: none yet */
    uint64_t idle_since_ns;
    TAILQ_ENTRY(lg_upconn) link;  /* pool idle list */
    struct lg_reap reap;          /* the worker frees it once closed */
};

/*
 * Lends a connection to backend b for client c: an idle pooled one (state
 * ACTIVE, *reused = true) or a new one (state CONNECTING; the callbacks
 * c's proxy sets will see BEV_EVENT_CONNECTED or an error). Returns LG_OK or
 * LG_EIO when no socket could be created (logged, rate-limited).
 */
int lg_upstream_acquire(struct lg_worker *w, struct lg_backend *b, struct lg_client *c,
                        struct lg_upconn **out, bool *reused);

/*
 * Gives a lent connection back. keep: the response ended cleanly and the
 * connection may carry another request; otherwise it is closed at once
 * (which is how a request in progress is cancelled: the engine sees EOF).
 */
void lg_upstream_release(struct lg_upconn *u, bool keep);

/* Closes every idle connection this worker holds for backend b. */
void lg_upstream_pool_flush(struct lg_worker *w, struct lg_backend *b);

/*
 * The worker's purge timer (arg: the worker): closes, in each pool, half of
 * the idle connections above limits.upstream_keepalive that sat idle
 * through the whole period, the longest idle first, and comes back after
 * timeouts.upstream_purge while any pool holds more than that count.
 */
void lg_upstream_on_purge(evutil_socket_t fd, short what, void *arg);

#endif /* LG_UPSTREAM_H */
