/*
 * reload.c: configuration reloads and fleet swaps (see reload.h).
 *
 * Owns: struct lg_reload (hung on gw->reload), the discovery state, the
 * configuration waiting for its first DNS answers, the last reload outcome.
 * Borrows: the gateway and the control event base.
 * Invariants: fleets are built and published only on the control thread,
 * one at a time; gw->conf and gw->fleet change only here (gw->fleet under
 * gw->fleet_lock); a backend is marked retired before the workers are told
 * about the fleet that drops it, so none of its connections returns to a pool
 * after the workers flushed them.
 */
#include "ops/reload.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "base/accesslog.h"
#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/discovery.h"
#include "fleet/fleet.h"
#include "http/tls.h"
#include "route/router.h"
#include "serve/admission.h"
#include "serve/budgetstore.h"
#include "serve/keys.h"
#include "serve/worker.h"

#define RELOAD_F_FILE    1u /* re-read the configuration file */
#define RELOAD_F_PUBLISH 2u /* discovered addresses changed: rebuild the fleet */

struct lg_reload {
    struct lg_gateway *gw;     /* borrowed */
    struct event_base *base;   /* borrowed: the control base */
    struct lg_discovery *disc; /* owned */
    struct event *ev;          /* owned: runs the work below on the control thread */
    struct event *wait_timer;  /* owned: deadline of `pending` */
    unsigned todo;             /* atomic RELOAD_F_* */
    const char *why;           /* atomic: static text naming the last trigger */
    bool ready;                /* the first fleet is in force */
    struct lg_config *pending; /* owned: validated, waiting for its first DNS answers */
    uint64_t pending_ticket;
    uint64_t pending_deadline_ns;

    pthread_mutex_t lock; /* guards what follows */
    pthread_cond_t cond;  /* signalled when `completed` moves or on stop */
    bool stopping;
    uint64_t requested;           /* tickets handed to lg_reload_request() callers */
    uint64_t completed;           /* every ticket up to this one has its outcome */
    struct lg_reload_result last; /* owned: outcome of the last reload of the file */

    struct lg_reload_stats stats; /* atomic fields */
};

/* How long a reload (or the start) waits for a new DNS name's first answer:
 * a few of evdns's timeouts, as it retries and walks the search domains. */
static uint64_t
reload_dns_wait_ms(const struct lg_config *conf)
{
    return 4 * conf->discovery.timeout_ms + 1000;
}

static void
reload_stat_add(uint64_t *field, uint64_t n)
{
    __atomic_fetch_add(field, n, __ATOMIC_RELAXED);
}

/* ---- publishing a fleet ------------------------------------------------------ */

static bool
reload_fleet_has(const struct lg_fleet *f, const struct lg_backend *b)
{
    for (size_t i = 0; i < f->nbackends; i++) {
        if (f->backends[i] == b) {
            return true;
        }
    }
    return false;
}

/* Logs "fleet: N backends (+a -b)", and each removed backend's requests left. */
static void
reload_log_diff(const struct lg_fleet *old, const struct lg_fleet *nf, const char *why)
{
    struct evbuffer *line = evbuffer_new();
    size_t len;

    for (size_t i = 0; i < nf->nbackends; i++) {
        if (old == NULL || !reload_fleet_has(old, nf->backends[i])) {
            evbuffer_add_printf(line, " +%s", nf->backends[i]->name);
        }
    }
    for (size_t i = 0; old != NULL && i < old->nbackends; i++) {
        const struct lg_backend *b = old->backends[i];

        if (!reload_fleet_has(nf, b)) {
            evbuffer_add_printf(line, " -%s", b->name);
            LG_INFO("backend %s removed: its %u request%s in flight finish on it", b->name,
                    lg_backend_inflight(b), lg_backend_inflight(b) == 1 ? "" : "s");
        }
    }
    evbuffer_add(line, "", 1);
    len = evbuffer_get_length(line);
    /* each name came with a leading space: the first one is dropped */
    LG_INFO("fleet (%s): %zu backend%s%s%s%s", why, nf->nbackends, nf->nbackends == 1 ? "" : "s",
            len > 1 ? " (" : "", (const char *)evbuffer_pullup(line, -1) + (len > 1),
            len > 1 ? ")" : "");
    evbuffer_free(line);
}

/* Puts nf in force (takes its reference) and tells the workers. */
static void
reload_publish(struct lg_reload *r, struct lg_fleet *nf, const char *why)
{
    struct lg_gateway *gw = r->gw;
    struct lg_fleet *old;

    lg_fleet_adopt(nf); /* the backends it kept take its settings */
    pthread_mutex_lock(&gw->fleet_lock);
    old = gw->fleet;
    gw->fleet = nf;
    pthread_mutex_unlock(&gw->fleet_lock);
    for (size_t i = 0; old != NULL && i < old->nbackends; i++) {
        if (!reload_fleet_has(nf, old->backends[i])) {
            __atomic_store_n(&old->backends[i]->retired, 1, __ATOMIC_RELAXED);
        }
    }
    reload_log_diff(old, nf, why);
    if (old != NULL) {
        lg_fleet_retire(old); /* alive: gw's reference is dropped below */
    }
    /* workers adopt it at their next loop turn and flush the retired pools */
    for (unsigned i = 0; i < gw->nworkers && gw->workers != NULL; i++) {
        lg_worker_post(&gw->workers[i], LG_WORKER_CMD_FLEET);
    }
    lg_fleet_unref(old);
    reload_stat_add(&r->stats.fleet_swaps, 1);
}

/* Builds the fleet for base (expanded with the discovered addresses). */
static int
reload_build(struct lg_reload *r, struct lg_config *base, struct lg_fleet **out)
{
    struct lg_config *eff;
    int rc;

    rc = lg_discovery_expand(r->disc, base, &eff);
    if (rc != LG_OK) {
        return rc;
    }
    /* gw->fleet changes only on this thread: no lock needed to read it here */
    rc = lg_router_fleet_new(eff, r->gw->nworkers, r->gw->fleet, out);
    lg_config_unref(eff);
    return rc;
}

/* Discovered addresses changed: the configuration stays, the fleet follows. */
static void
reload_rediscover(struct lg_reload *r)
{
    struct lg_fleet *nf;

    if (reload_build(r, r->gw->conf, &nf) != LG_OK) {
        LG_ERROR("discovery: cannot build the new fleet; keeping the current one");
        return;
    }
    reload_publish(r, nf, "discovery");
}

/* ---- reloading the file ------------------------------------------------------ */

/*
 * Counts the reload and answers its waiters. The counters come first, and
 * callers log the outcome line ("configuration reloaded", "... refused")
 * after this: whoever acts on that line or on the answer (a scrape of
 * /metrics) sees the reload counted.
 */
static void
reload_complete(struct lg_reload *r, uint64_t ticket, bool ok, struct evbuffer *errors)
{
    size_t n = errors != NULL ? evbuffer_get_length(errors) : 0;
    const struct lg_fleet *f = r->gw->fleet;

    __atomic_store_n(&r->stats.last_ok, ok, __ATOMIC_RELAXED);
    reload_stat_add(ok ? &r->stats.reloads_ok : &r->stats.reloads_failed, 1);
    pthread_mutex_lock(&r->lock);
    free(r->last.errors);
    r->last.ok = ok;
    r->last.generation = __atomic_load_n(&r->stats.generation, __ATOMIC_RELAXED);
    r->last.nbackends = f != NULL ? f->nbackends : 0;
    r->last.errors = NULL;
    if (!ok) {
        r->last.errors = lg_xmalloc(n + 1);
        evbuffer_remove(errors, r->last.errors, n);
        r->last.errors[n] = '\0';
    }
    if (ticket > r->completed) {
        r->completed = ticket;
    }
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

/* Logs each error and answers the waiters; the configuration in force stays. */
static void
reload_refuse(struct lg_reload *r, uint64_t ticket, struct evbuffer *errors)
{
    char *text;
    char *line;
    char *save = NULL;
    size_t n = evbuffer_get_length(errors);

    text = lg_xmalloc(n + 1);
    evbuffer_copyout(errors, text, n);
    text[n] = '\0';
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        LG_ERROR("%s", line);
    }
    free(text);
    reload_complete(r, ticket, false, errors);
    LG_ERROR("configuration reload refused; the configuration in force (generation %" PRIu64
             ") stays",
             __atomic_load_n(&r->stats.generation, __ATOMIC_RELAXED));
}

static bool
reload_same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static bool
reload_same_tracing(const struct lg_tracing_conf *a, const struct lg_tracing_conf *b)
{
    return reload_same_str(a->endpoint, b->endpoint) && a->sample_ratio == b->sample_ratio
           && reload_same_str(a->service_name, b->service_name) && a->queue == b->queue
           && a->batch == b->batch && a->interval_ms == b->interval_ms
           && a->timeout_ms == b->timeout_ms && a->encoding == b->encoding
           && ((a->headers == NULL && b->headers == NULL)
               || (a->headers != NULL && b->headers != NULL && json_equal(a->headers, b->headers)));
}

/*
 * What a running process cannot change: its listening sockets are bound and
 * spread over a fixed number of workers, and the access log, the admin
 * listener and tracing (its exporter) are set up at start. Appends one
 * message per refusal.
 */
static void
reload_check_fixed(const struct lg_config *cur, const struct lg_config *next, unsigned nworkers,
                   struct evbuffer *errors)
{
    bool same = cur->nlisten == next->nlisten;
    const char *path = next->path;

    for (size_t i = 0; same && i < cur->nlisten; i++) {
        same = strcmp(cur->listen[i].address, next->listen[i].address) == 0
               && (cur->listen[i].tls_cert != NULL) == (next->listen[i].tls_cert != NULL);
    }
    if (!same) {
        evbuffer_add_printf(errors,
                            "%s: error: /listen: listen addresses (and whether each has TLS) "
                            "cannot change on reload; restart llmgate to change them\n",
                            path);
    }
    /* "auto" was resolved at start (the CPUs the process could use then)
     * and keeps that count; a number must be the count in force */
    if (next->workers != 0 && next->workers != nworkers) {
        evbuffer_add_printf(errors,
                            "%s: error: /workers: the worker count cannot change on reload "
                            "(%u in force, %u in the file); restart llmgate to change it\n",
                            path, nworkers, next->workers);
    }
    if (!reload_same_str(cur->admin.listen, next->admin.listen)) {
        evbuffer_add_printf(errors,
                            "%s: error: /admin/listen: the admin address cannot change on "
                            "reload (%s in force); restart llmgate to change it\n",
                            path, cur->admin.listen ? cur->admin.listen : "none");
    }
    if (cur->admin.history.resolution_ms != next->admin.history.resolution_ms
        || cur->admin.history.window_ms != next->admin.history.window_ms) {
        evbuffer_add_printf(errors,
                            "%s: error: /admin/history: the status page's history cannot change "
                            "on reload (its rings are set up at start); restart llmgate to "
                            "change it\n",
                            path);
    }
    if ((cur->auth.keys_file == NULL) != (next->auth.keys_file == NULL)) {
        evbuffer_add_printf(errors,
                            "%s: error: /auth: API keys cannot be turned %s on reload (the keys "
                            "file's path and contents can change); restart llmgate to turn them "
                            "%s\n",
                            path, cur->auth.keys_file ? "off" : "on",
                            cur->auth.keys_file ? "off" : "on");
    }
    if ((cur->budgets.redis.address == NULL) != (next->budgets.redis.address == NULL)) {
        evbuffer_add_printf(errors,
                            "%s: error: /budgets/redis: sharing token budgets through Redis "
                            "cannot be turned %s on reload (its settings can change); restart "
                            "llmgate to turn it %s\n",
                            path, cur->budgets.redis.address ? "off" : "on",
                            cur->budgets.redis.address ? "off" : "on");
    }
    if (!reload_same_tracing(&cur->tracing, &next->tracing)) {
        evbuffer_add_printf(errors,
                            "%s: error: /tracing: tracing is set up at start (its exporter, "
                            "queue and sampling) and cannot change on reload; restart llmgate "
                            "to change it\n",
                            path);
    }
    if ((cur->access_log.path == NULL) != (next->access_log.path == NULL)) {
        evbuffer_add_printf(errors,
                            "%s: error: /access_log: the access log cannot be turned %s on "
                            "reload; restart llmgate (its path, flush and buffer can change)\n",
                            path, cur->access_log.path ? "off" : "on");
    }
}

/*
 * TLS certificates and API keys: re-read here, before anything else changes,
 * so that a certificate or keys file that does not load refuses the whole
 * reload. The TLS module swaps the listeners' contexts all or nothing, at
 * once: a later refusal (the fleet cannot be built) leaves the fresh
 * certificates in force, which are what the same files say now either way.
 * The keys are only staged (the file may be another one): reload_commit()
 * puts them in force, a refusal drops them.
 */
static int
reload_prepare_tls(struct lg_reload *r, const struct lg_config *next, struct evbuffer *errors)
{
    struct lg_gateway *gw = r->gw;

    if (gw->tls != NULL && lg_tls_reload(gw->tls, next) != LG_OK) {
        evbuffer_add_printf(errors, "%s: error: /listen: a TLS certificate or key does not load "
                                    "(see above); the certificates in force stay\n",
                            next->path);
        return LG_EINVAL;
    }
    if (gw->keys != NULL && lg_keys_stage(gw->keys, next->auth.keys_file) != LG_OK) {
        evbuffer_add_printf(errors, "%s: error: /auth/keys_file: \"%s\" does not load (see above); "
                                    "the keys in force stay\n",
                            next->path, next->auth.keys_file);
        return LG_EINVAL;
    }
    return LG_OK;
}

/* Every https backend of a new fleet has its client context (fail early). */
static bool
reload_backends_tls(struct lg_fleet *nf)
{
    for (size_t i = 0; i < nf->nbackends; i++) {
        struct lg_backend *b = nf->backends[i];

        if (lg_tls_client_prepare(lg_backend_conf(b), &b->tls_ctx) != LG_OK) {
            return false;
        }
    }
    return true;
}

/* Everything is checked: put conf in force (takes its reference). */
static void
reload_commit(struct lg_reload *r, struct lg_config *conf, uint64_t ticket)
{
    struct lg_gateway *gw = r->gw;
    struct evbuffer *errors = evbuffer_new();
    struct lg_config *old = gw->conf;
    struct lg_fleet *nf = NULL;
    uint64_t gen;

    if (reload_build(r, conf, &nf) != LG_OK) {
        evbuffer_add_printf(errors, "%s: error: cannot build the fleet (see above)\n", conf->path);
    } else if (!reload_backends_tls(nf)) {
        evbuffer_add_printf(errors, "%s: error: /backends: an https backend's TLS files do not "
                                    "load (see above)\n",
                            conf->path);
    } else if (gw->alog != NULL && conf->access_log.path != NULL
               && lg_accesslog_update(gw->alog, &conf->access_log) != LG_OK) {
        evbuffer_add_printf(errors, "%s: error: /access_log/path: cannot open \"%s\"\n", conf->path,
                            conf->access_log.path);
    }
    if (evbuffer_get_length(errors) > 0) {
        if (gw->keys != NULL) {
            lg_keys_unstage(gw->keys);
        }
        lg_fleet_unref(nf);
        lg_discovery_prune(r->disc, old); /* forget names only the refused file had */
        lg_config_unref(conf);
        reload_refuse(r, ticket, errors);
        evbuffer_free(errors);
        return;
    }
    if (gw->keys != NULL) {
        lg_keys_commit(gw->keys); /* nothing refuses the file from here on */
    }
    if (gw->budgetstore != NULL) {
        lg_budgetstore_reconfigure(gw->budgetstore, &conf->budgets.redis);
    }
    lg_admission_configure(gw->admission, conf);
    gen = __atomic_add_fetch(&r->stats.generation, 1, __ATOMIC_RELAXED);
    gw->conf = conf;
    __atomic_store_n(&lg_log_threshold, conf->log_level, __ATOMIC_RELAXED);
    reload_publish(r, nf, "reload");
    lg_discovery_prune(r->disc, conf);
    lg_config_unref(old);
    __atomic_and_fetch(&r->todo, ~RELOAD_F_PUBLISH, __ATOMIC_RELAXED); /* done just now */
    reload_complete(r, ticket, true, NULL);
    LG_INFO("configuration reloaded from %s (generation %" PRIu64 ", %s): backends=%zu "
            "discovered_names=%zu",
            conf->path, gen, __atomic_load_n(&r->why, __ATOMIC_RELAXED), nf->nbackends,
            conf->ntemplates);
    evbuffer_free(errors);
}

/* Returns true when the file was refused (so a discovery change still applies). */
static bool
reload_file(struct lg_reload *r)
{
    struct lg_gateway *gw = r->gw;
    struct lg_config_errors errs = { 0 };
    struct evbuffer *errors;
    struct lg_config *conf = NULL;
    uint64_t ticket;

    pthread_mutex_lock(&r->lock);
    ticket = r->requested; /* every request made so far sees this file */
    pthread_mutex_unlock(&r->lock);
    __atomic_store_n(&r->stats.last_reload_wall_ns, lg_wall_ns(), __ATOMIC_RELAXED);
    LG_INFO("reloading the configuration from %s (%s)", gw->config_path,
            __atomic_load_n(&r->why, __ATOMIC_RELAXED));
    errors = evbuffer_new();
    if (lg_config_load(gw->config_path, &conf, &errs) != LG_OK) {
        for (size_t i = 0; i < errs.n; i++) {
            evbuffer_add_printf(errors, "%s\n", errs.msgs[i]);
        }
        if (errs.dropped > 0) {
            evbuffer_add_printf(errors, "(%zu more errors not shown)\n", errs.dropped);
        }
        lg_config_errors_free(&errs);
    } else {
        for (size_t i = 0; i < conf->nwarnings; i++) {
            LG_WARN("%s", conf->warnings[i]);
        }
        reload_check_fixed(gw->conf, conf, gw->nworkers, errors);
        if (evbuffer_get_length(errors) == 0) {
            reload_prepare_tls(r, conf, errors);
        }
        if (evbuffer_get_length(errors) == 0 && lg_discovery_configure(r->disc, conf) != LG_OK) {
            evbuffer_add_printf(errors, "%s: error: /discovery: cannot set up the resolver\n",
                                conf->path);
        }
    }
    if (evbuffer_get_length(errors) > 0) {
        if (gw->keys != NULL) {
            lg_keys_unstage(gw->keys);
        }
        lg_config_unref(conf);
        lg_discovery_prune(r->disc, gw->conf);
        reload_refuse(r, ticket, errors);
        evbuffer_free(errors);
        return true;
    }
    evbuffer_free(errors);
    if (!lg_discovery_answered(r->disc)) {
        /* a new name to resolve: finish once it answered (or after a few timeouts) */
        uint64_t ms = reload_dns_wait_ms(conf);
        struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };

        r->pending = conf;
        r->pending_ticket = ticket;
        r->pending_deadline_ns = lg_now_ns() + ms * LG_NS_PER_MS;
        evtimer_add(r->wait_timer, &tv);
        return false;
    }
    reload_commit(r, conf, ticket);
    return false;
}

static void
reload_on_event(evutil_socket_t fd, short what, void *arg)
{
    struct lg_reload *r = arg;
    unsigned todo;

    (void)fd;
    (void)what;
    if (!r->ready || r->gw->draining) {
        return;
    }
    if (r->pending != NULL) {
        struct lg_config *conf = r->pending;

        if (!lg_discovery_answered(r->disc) && lg_now_ns() < r->pending_deadline_ns) {
            return; /* the work bits wait too */
        }
        r->pending = NULL;
        evtimer_del(r->wait_timer);
        reload_commit(r, conf, r->pending_ticket);
    }
    todo = __atomic_exchange_n(&r->todo, 0, __ATOMIC_ACQ_REL);
    if ((todo & RELOAD_F_FILE) && !reload_file(r)) {
        return; /* applied (or waiting for DNS): the fleet follows discovery already */
    }
    if (todo & RELOAD_F_PUBLISH) {
        reload_rediscover(r);
    }
}

static void
reload_on_discovery(void *arg)
{
    struct lg_reload *r = arg;

    __atomic_or_fetch(&r->todo, RELOAD_F_PUBLISH, __ATOMIC_ACQ_REL);
    event_active(r->ev, EV_TIMEOUT, 1);
}

/* ---- the API ------------------------------------------------------------------- */

int
lg_reload_init(struct lg_gateway *gw, struct event_base *base)
{
    struct lg_reload *r = lg_xcalloc(1, sizeof(*r));
    int rc;

    r->gw = gw;
    r->base = base;
    r->why = "start";
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->ev = event_new(base, -1, 0, reload_on_event, r);
    r->wait_timer = evtimer_new(base, reload_on_event, r);
    gw->reload = r;
    lg_discovery_new(base, reload_on_discovery, r, &r->disc);
    rc = lg_discovery_configure(r->disc, gw->conf);
    if (rc != LG_OK) {
        return rc;
    }
    if (!lg_discovery_answered(r->disc)) {
        lg_discovery_wait(r->disc, reload_dns_wait_ms(gw->conf));
    }
    rc = reload_build(r, gw->conf, &gw->fleet);
    if (rc != LG_OK) {
        return rc;
    }
    __atomic_store_n(&r->todo, 0, __ATOMIC_RELAXED); /* the first fleet has every answer */
    r->stats.generation = 1;
    r->ready = true;
    return LG_OK;
}

void
lg_reload_schedule(struct lg_gateway *gw, const char *why)
{
    struct lg_reload *r = gw->reload;

    __atomic_store_n(&r->why, why, __ATOMIC_RELAXED);
    __atomic_or_fetch(&r->todo, RELOAD_F_FILE, __ATOMIC_ACQ_REL);
    event_active(r->ev, EV_TIMEOUT, 1);
}

int
lg_reload_request(struct lg_gateway *gw, uint64_t timeout_ms, struct lg_reload_result *res)
{
    struct lg_reload *r = gw->reload;
    struct timespec ts;
    uint64_t ticket;
    int rc = LG_OK;

    memset(res, 0, sizeof(*res));
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(timeout_ms / 1000);
    ts.tv_nsec += (long)((timeout_ms % 1000) * 1000000);
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&r->lock);
    if (r->stopping) {
        pthread_mutex_unlock(&r->lock);
        return LG_EBUSY;
    }
    ticket = ++r->requested;
    pthread_mutex_unlock(&r->lock);
    lg_reload_schedule(gw, "admin API");
    pthread_mutex_lock(&r->lock);
    while (r->completed < ticket && !r->stopping && rc == LG_OK) {
        if (pthread_cond_timedwait(&r->cond, &r->lock, &ts) != 0) {
            rc = LG_ETIMEDOUT;
        }
    }
    if (r->completed >= ticket) {
        *res = r->last;
        res->errors = r->last.errors ? lg_xstrdup(r->last.errors) : NULL;
        rc = LG_OK;
    } else if (r->stopping) {
        rc = LG_EBUSY;
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

void
lg_reload_result_free(struct lg_reload_result *res)
{
    free(res->errors);
    res->errors = NULL;
}

void
lg_reload_read_stats(const struct lg_gateway *gw, struct lg_reload_stats *out)
{
    const struct lg_reload_stats *s = &gw->reload->stats;

    out->reloads_ok = __atomic_load_n(&s->reloads_ok, __ATOMIC_RELAXED);
    out->reloads_failed = __atomic_load_n(&s->reloads_failed, __ATOMIC_RELAXED);
    out->fleet_swaps = __atomic_load_n(&s->fleet_swaps, __ATOMIC_RELAXED);
    out->generation = __atomic_load_n(&s->generation, __ATOMIC_RELAXED);
    out->last_reload_wall_ns = __atomic_load_n(&s->last_reload_wall_ns, __ATOMIC_RELAXED);
    out->last_ok = __atomic_load_n(&s->last_ok, __ATOMIC_RELAXED);
}

void
lg_reload_stop(struct lg_gateway *gw)
{
    struct lg_reload *r = gw->reload;

    if (r == NULL) {
        return;
    }
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

void
lg_reload_free(struct lg_gateway *gw)
{
    struct lg_reload *r = gw->reload;

    if (r == NULL) {
        return;
    }
    lg_reload_stop(gw);
    lg_config_unref(r->pending);
    event_free(r->ev);
    event_free(r->wait_timer);
    lg_discovery_free(r->disc);
    free(r->last.errors);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
    gw->reload = NULL;
}
