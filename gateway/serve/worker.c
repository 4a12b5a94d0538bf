/*
 * worker.c: event-loop threads, cross-thread commands and deferred frees.
 * What runs on a worker, and what its commands mean, is the gateway's
 * (gw->ops: serve/gateway.c).
 *
 * Owns: each worker's event_base (without a lock: one thread) and its
 * events, the command eventfd, the reap list, the table of the base's
 * common timeouts.
 * Invariants: a worker's base, clients, upstream connections and pools are
 * only touched by its thread; other threads only call lg_worker_post(),
 * which sets command bits and writes to the eventfd (an event_active() from
 * another thread would race: the base has no lock). Objects
 * are freed from the reap event, at the top of the loop, never from inside
 * their own callbacks.
 */
#include "serve/worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/accesslog.h"
#include "fleet/fleet.h"
#include "http/bevio.h"

static void
worker_maybe_exit(struct lg_worker *w)
{
    if (w->draining && w->nclients == 0) {
        event_base_loopexit(w->base, NULL);
    }
}

static void
worker_on_reap(evutil_socket_t fd, short what, void *arg)
{
    struct lg_worker *w = arg;
    struct lg_reap *r;

    (void)fd;
    (void)what;
    while ((r = TAILQ_FIRST(&w->reap)) != NULL) {
        TAILQ_REMOVE(&w->reap, r, link);
        r->free(r);
    }
    worker_maybe_exit(w);
}

void
lg_worker_reap(struct lg_worker *w, struct lg_reap *r)
{
    TAILQ_INSERT_TAIL(&w->reap, r, link);
    event_active(w->reap_ev, EV_TIMEOUT, 0);
}

static void
worker_drain(struct lg_worker *w)
{
    if (w->draining) {
        return;
    }
    w->draining = true;
    w->gw->ops->drain(w);
    worker_maybe_exit(w);
}

/* Takes the gateway's current fleet; the gateway closes what the old one leaves. */
static void
worker_adopt_fleet(struct lg_worker *w)
{
    struct lg_fleet *old = w->fleet;
    struct lg_fleet *f = lg_gateway_fleet(w->gw);

    if (f == old) {
        lg_fleet_unref(f);
        return;
    }
    w->fleet = f;
    if (old != NULL) {
        w->gw->ops->adopted(w, old);
    }
    lg_fleet_unref(old);
}

static void
worker_on_cmd(evutil_socket_t fd, short what, void *arg)
{
    struct lg_worker *w = arg;
    uint64_t n;
    uint32_t cmd;

    (void)what;
    /*
     * Reset the eventfd before taking the bits: a post whose bits the
     * exchange below misses wrote to the eventfd after this read, so the
     * event fires again.
     */
    if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN) {
        LG_ERROR("worker %u: cannot read commands: %s", w->id, strerror(errno));
    }
    cmd = __atomic_exchange_n(&w->cmd, 0, __ATOMIC_ACQ_REL);
    if (cmd & LG_WORKER_CMD_ADMIT) {
        w->gw->ops->admit(w);
    }
    if (cmd & LG_WORKER_CMD_FLEET) {
        worker_adopt_fleet(w);
    }
    if (cmd & LG_WORKER_CMD_DRAIN) {
        worker_drain(w);
    }
    if (cmd & LG_WORKER_CMD_STOP) {
        event_base_loopbreak(w->base);
    }
}

void
lg_worker_post(struct lg_worker *w, uint32_t cmd)
{
    static const uint64_t one = 1;

    __atomic_fetch_or(&w->cmd, cmd, __ATOMIC_ACQ_REL);
    /* fails only when the counter is near 2^64 - 1, which means "readable" anyway */
    if (write(w->cmd_fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        LG_ERROR("worker %u: cannot post a command: %s", w->id, strerror(errno));
    }
}

const struct timeval *
lg_worker_timeout(struct lg_worker *w, uint64_t ms, struct timeval *tmp)
{
    const struct timeval *tv;

    if (ms == 0) {
        return NULL;
    }
    for (unsigned i = 0; i < w->ntimeouts; i++) {
        if (w->timeouts[i].ms == ms) {
            return w->timeouts[i].tv;
        }
    }
    lg_timeval_ms(ms, tmp);
    /* full (reloads brought new durations): the rest take the min-heap */
    if (w->ntimeouts == LG_WORKER_TIMEOUTS) {
        return tmp;
    }
    tv = event_base_init_common_timeout(w->base, tmp);
    if (tv == NULL) {
        return tmp;
    }
    w->timeouts[w->ntimeouts].ms = ms;
    w->timeouts[w->ntimeouts].tv = tv;
    w->ntimeouts++;
    return tv;
}

/* After the loop: cut what still runs and free everything the worker holds. */
static void
worker_cleanup(struct lg_worker *w)
{
    w->gw->ops->cleanup(w);
    worker_on_reap(-1, 0, w);
}

static void *
worker_main(void *arg)
{
    struct lg_worker *w = arg;
    char name[16];

    snprintf(name, sizeof(name), "llmgate-w%u", w->id);
    pthread_setname_np(pthread_self(), name); /* top -H, perf, schedulers see who is who */
    event_base_dispatch(w->base);
    worker_cleanup(w);
    return NULL;
}

int
lg_workers_start(struct lg_gateway *gw)
{
    for (unsigned i = 0; i < gw->nworkers; i++) {
        struct lg_worker *w = &gw->workers[i];

        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            LG_ERROR("cannot start worker thread %u: %s", i, strerror(errno));
            return LG_ERR;
        }
    }
    return LG_OK;
}

void
lg_workers_join(struct lg_gateway *gw)
{
    for (unsigned i = 0; i < gw->nworkers; i++) {
        pthread_join(gw->workers[i].thread, NULL);
    }
}

int
lg_worker_init(struct lg_gateway *gw, struct lg_worker *w, unsigned id)
{
    struct event_config *cfg;

    memset(w, 0, sizeof(*w));
    w->id = id;
    w->gw = gw;
    w->cmd_fd = -1;
    TAILQ_INIT(&w->reap);
    TAILQ_INIT(&w->clients);
    TAILQ_INIT(&w->idle);
    /*
     * No lock: only this thread touches the base (others post through the
     * eventfd), and with evthread_use_pthreads() on, libevent would take the
     * base's mutex in every event_add, event_del, event_pending and
     * event_active, dozens of times per request.
     * The epoll changelist applies event changes at the next epoll_wait, so
     * a write event armed and disarmed within one loop iteration (bevio.c)
     * costs no syscall. (It must not meet dup()ed descriptors: we make none.)
     */
    cfg = event_config_new();
    if (cfg == NULL || event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK) != 0
        || event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST) != 0) {
        event_config_free(cfg);
        return LG_ENOMEM;
    }
    w->base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (w->base == NULL) {
        return LG_ENOMEM;
    }
    w->cmd_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->cmd_fd < 0) {
        LG_ERROR("worker %u: eventfd: %s", id, strerror(errno));
        return LG_ERR;
    }
    lg_bevio_init(w->base);
    w->reap_ev = event_new(w->base, -1, 0, worker_on_reap, w);
    w->cmd_ev = event_new(w->base, w->cmd_fd, EV_READ | EV_PERSIST, worker_on_cmd, w);
    if (w->reap_ev == NULL || w->cmd_ev == NULL || event_add(w->cmd_ev, NULL) != 0) {
        return LG_ENOMEM;
    }
    w->fleet = lg_gateway_fleet(gw);
    w->alog = lg_accesslog_buffer(gw->alog, id);
    return gw->ops->attach(w);
}

void
lg_worker_destroy(struct lg_worker *w)
{
    free(w->listeners);
    if (w->accept_retry != NULL) {
        event_free(w->accept_retry);
    }
    if (w->reap_ev != NULL) {
        event_free(w->reap_ev);
    }
    if (w->purge_ev != NULL) {
        event_free(w->purge_ev);
    }
    if (w->park_ev != NULL) {
        event_free(w->park_ev);
    }
    if (w->cmd_ev != NULL) {
        event_free(w->cmd_ev);
    }
    if (w->base != NULL && w->cmd_fd >= 0) { /* base: lg_worker_init() ran (cmd_fd set) */
        close(w->cmd_fd);
    }
    lg_fleet_unref(w->fleet);
    while (w->trace_free != NULL) {
        struct lg_free_node *next = w->trace_free->next;

        free(w->trace_free);
        w->trace_free = next;
    }
    if (w->base != NULL) {
        event_base_free(w->base);
    }
}

struct lg_fleet *
lg_gateway_fleet(struct lg_gateway *gw)
{
    struct lg_fleet *f;

    pthread_mutex_lock(&gw->fleet_lock);
    f = lg_fleet_ref(gw->fleet);
    pthread_mutex_unlock(&gw->fleet_lock);
    return f;
}

uint32_t
lg_gateway_clients(const struct lg_gateway *gw)
{
    return __atomic_load_n(&gw->nconnections, __ATOMIC_RELAXED);
}
