/*
 * upstream.c: backend connections and the keep-alive pool.
 *
 * Owns: struct lg_upconn and its bufferevent (BEV_OPT_CLOSE_ON_FREE: the
 * bufferevent owns the socket). Pools are per backend and per worker; only
 * that worker's thread touches them, so no locks.
 * Invariant: an idle connection has upstream_on_idle_* callbacks and no
 * client; a lent one has the proxy's callbacks and exactly one client.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "http/bevio.h"
#include "http/tls.h"
#include "serve/upstream.h"
#include "serve/worker.h"

#define UPSTREAM_MAX_HEAD_BYTES  (64 * 1024)
#define UPSTREAM_MAX_HEAD_FIELDS 200

static void
upstream_close(struct lg_upconn *u)
{
    if (u->state == LG_UPCONN_ST_CLOSED) {
        return;
    }
    if (u->state == LG_UPCONN_ST_IDLE) {
        struct lg_backend_pool *pool = &u->b->pools[u->w->id];

        TAILQ_REMOVE(&pool->idle, u, link);
        pool->nidle--;
    }
    u->state = LG_UPCONN_ST_CLOSED;
    u->client = NULL;
    u->attempt = NULL;
    bufferevent_setcb(u->bev, NULL, NULL, NULL, NULL);
    bufferevent_disable(u->bev, EV_READ | EV_WRITE);
    lg_worker_reap(u->w, &u->reap);
}

/* The worker's reaper: the connection is closed and nothing refers to it. */
static void
upstream_free(struct lg_reap *r)
{
    struct lg_upconn *u = LG_CONTAINER_OF(r, struct lg_upconn, reap);

    bufferevent_free(u->bev); /* closes the socket: the engine sees EOF */
    lg_hdrs_release(&u->hdrs);
    lg_backend_unref(u->b);
    free(u);
}

/* An idle connection became readable: the backend closed it or sent garbage. */
static void
upstream_on_idle_read(struct bufferevent *bev, void *arg)
{
    struct lg_upconn *u = arg;

    LG_DEBUG("upconn=%" PRIu64 " backend=%s: unexpected %zu bytes on an idle connection", u->id,
             u->b->name, evbuffer_get_length(bufferevent_get_input(bev)));
    upstream_close(u);
}

static void
upstream_on_idle_event(struct bufferevent *bev, short what, void *arg)
{
    struct lg_upconn *u = arg;

    (void)bev;
    LG_DEBUG("upconn=%" PRIu64 " backend=%s: idle connection %s", u->id, u->b->name,
             (what & BEV_EVENT_TIMEOUT) ? "timed out" : "closed");
    upstream_close(u);
}

static struct lg_upconn *
upstream_connect(struct lg_worker *w, struct lg_backend *b)
{
    static uint64_t seq;
    struct lg_upconn *u;
    struct bufferevent *bev;
    struct timeval tv;
    uint64_t ms = w->fleet->conf->timeouts.upstream_connect_ms;
    const struct lg_backend_conf *bc = lg_backend_conf(b);
    int one = 1;

    if (bc->tls) {
        bev = lg_tls_connect_bev(w->base, bc, &b->tls_ctx,
                                 BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    } else {
        bev = bufferevent_socket_new(w->base, -1, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    }
    if (bev == NULL) {
        return NULL;
    }
    /* a large request body leaves in one write (up to 4 MiB, what the socket
     * takes), not in libevent's 16 KiB per event: in 256 KiB slices a 1 MiB
     * body took three more loop round trips, and under load its slices took
     * turns with other bodies', each one finishing later (bench/NOTES.md 42);
     * TLS keeps 256 KiB, its encryption being done in the call */
    bufferevent_set_max_single_write(bev, bc->tls ? 256 * 1024 : 4 * 1024 * 1024);
    tv.tv_sec = (time_t)(ms / 1000);
    tv.tv_usec = (suseconds_t)((ms % 1000) * 1000);
    /* libevent applies the write timeout to the connect itself; a TLS
     * handshake also waits to read, so it gets the same bound */
    bufferevent_set_timeouts(bev, bc->tls ? &tv : NULL, &tv);
    if (bufferevent_socket_connect(bev, (const struct sockaddr *)&bc->addr, (int)bc->addrlen)
        != 0) {
        bufferevent_free(bev);
        return NULL;
    }
    if (bufferevent_getfd(bev) >= 0) {
        setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    u = lg_xcalloc(1, sizeof(*u));
    u->id = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
    u->w = w;
    u->reap.free = upstream_free;
    u->b = lg_backend_ref(b);
    u->bev = bev;
    u->state = LG_UPCONN_ST_CONNECTING;
    lg_hdrs_init(&u->hdrs, UPSTREAM_MAX_HEAD_BYTES, UPSTREAM_MAX_HEAD_FIELDS);
    LG_STAT_ADD(b, connects, 1);
    return u;
}

int
lg_upstream_acquire(struct lg_worker *w, struct lg_backend *b, struct lg_client *c,
                    struct lg_upconn **out, bool *reused)
{
    struct lg_backend_pool *pool = &b->pools[w->id];
    struct lg_upconn *u = TAILQ_FIRST(&pool->idle);

    if (u != NULL) {
        TAILQ_REMOVE(&pool->idle, u, link);
        pool->nidle--;
        pool->idle_low = LG_MIN(pool->idle_low, pool->nidle);
        u->state = LG_UPCONN_ST_ACTIVE;
        *reused = true;
        LG_STAT_ADD(b, reuses, 1);
    } else {
        u = upstream_connect(w, b);
        if (u == NULL) {
            if (lg_log_ratelimit(&b->warn_ratelimit_ns, LG_NS_PER_S)) {
                LG_WARN("backend %s: cannot create a connection: %s", b->name, strerror(errno));
            }
            return LG_EIO;
        }
        *reused = false;
    }
    u->client = c;
    u->requests++;
    *out = u;
    return LG_OK;
}

void
lg_upstream_release(struct lg_upconn *u, bool keep)
{
    struct lg_backend_pool *pool = &u->b->pools[u->w->id];
    const struct lg_config *conf = u->w->fleet->conf;
    struct timeval tmp;

    u->client = NULL;
    u->attempt = NULL;
    if (!keep || u->w->draining || __atomic_load_n(&u->b->retired, __ATOMIC_RELAXED)
        || conf->limits.upstream_keepalive == 0
        || (pool->nidle >= conf->limits.upstream_keepalive && conf->timeouts.upstream_purge_ms == 0)
        || evbuffer_get_length(bufferevent_get_input(u->bev)) != 0) {
        upstream_close(u);
        return;
    }
    u->state = LG_UPCONN_ST_IDLE;
    u->idle_since_ns = lg_now_ns();
    bufferevent_setcb(u->bev, upstream_on_idle_read, NULL, upstream_on_idle_event, u);
    /*
     * The pool's connections sit in the queue of this duration (an append);
     * the write timeout stays (nothing is written while pooled), so only
     * the read side is re-armed.
     */
    lg_bevio_read_timeout(u->bev, lg_worker_timeout(u->w, conf->timeouts.upstream_idle_ms, &tmp));
    lg_bevio_watermark(u->bev, EV_READ, 0, 0);
    lg_bevio_enable(u->bev, EV_READ);
    TAILQ_INSERT_HEAD(&pool->idle, u, link);
    pool->nidle++;
    if (pool->nidle > conf->limits.upstream_keepalive && !evtimer_pending(u->w->purge_ev, NULL)) {
        struct timeval tv;

        /* a period starts (a pool that goes over the count while the timer
         * runs for another keeps the low mark of its last purge, 0 before
         * the first: its first period closes less, and never under the count) */
        pool->idle_low = pool->nidle;
        evtimer_add(u->w->purge_ev, lg_timeval_ms(conf->timeouts.upstream_purge_ms, &tv));
    }
}

/*
 * A burst leaves more connections idle than upstream_keepalive; closing the
 * excess at once makes the next burst open them again (a connect and a
 * close per request, bench/NOTES.md 26-27). They stay pooled instead, and
 * every upstream_purge half of those above the kept count that sat idle
 * through the whole period (the fewest idle seen in it) are closed, the
 * longest idle first (the list's tail: release inserts at the head, acquire
 * takes from it). A load that keeps coming back keeps its connections; one
 * that went away is down to the kept count in a few periods. HAProxy's
 * pool-purge-delay works the same way.
 */
void
lg_upstream_on_purge(evutil_socket_t fd, short what, void *arg)
{
    struct lg_worker *w = arg;
    const struct lg_config *conf = w->fleet->conf;
    uint32_t keep = conf->limits.upstream_keepalive;
    bool more = false;

    (void)fd;
    (void)what;
    for (size_t i = 0; i < w->fleet->nbackends; i++) {
        struct lg_backend_pool *pool = &w->fleet->backends[i]->pools[w->id];
        uint32_t excess = pool->nidle > keep ? pool->nidle - keep : 0;

        excess = LG_MIN(excess, pool->idle_low);
        for (uint32_t k = (excess + 1) / 2; k > 0; k--) {
            upstream_close(TAILQ_LAST(&pool->idle, lg_upconn_tailq));
        }
        pool->idle_low = pool->nidle;
        more = more || pool->nidle > keep;
    }
    if (more) {
        struct timeval tv;

        evtimer_add(w->purge_ev, lg_timeval_ms(conf->timeouts.upstream_purge_ms, &tv));
    }
}

void
lg_upstream_pool_flush(struct lg_worker *w, struct lg_backend *b)
{
    struct lg_backend_pool *pool = &b->pools[w->id];
    struct lg_upconn *u;

    while ((u = TAILQ_FIRST(&pool->idle)) != NULL) {
        upstream_close(u);
    }
}
