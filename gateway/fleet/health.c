/*
 * health.c: the fleet's checker thread (see health.h): its event base, the
 * connection to each checked or scraped backend, and the timers of its
 * parts: active checks (health_check.c), engine scrapes (health_scrape.c,
 * with gaugelag.c), peer gateways (health_peers.c) and the models' priors
 * (priors.c), all running on this thread.
 *
 * Owns: struct lg_health (health_types.h), its thread and event base, the
 * table of targets with one evhttp connection each (keep-alive, reused for
 * checks and scrapes), the priors' and the stop timers. Borrows: the fleet
 * and its backends (the fleet stops this thread before it frees them).
 * Writes, in backends: health (UP/DOWN), up_since_ns, the engine sample,
 * the peers' requests; in routes: the prior. Workers only read those.
 */
#include "fleet/health.h"

#include <stdlib.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "base/config.h"
#include "fleet/health_check.h"
#include "fleet/health_http.h"
#include "fleet/health_peers.h"
#include "fleet/health_scrape.h"
#include "fleet/priors.h"
#include "http/tls.h"

/* Twice a second: the models' priors (priors.c). */
static void
health_on_prior_timer(evutil_socket_t fd, short what, void *arg)
{
    struct lg_health *h = arg;

    (void)fd;
    (void)what;
    lg_priors_update(&h->f, lg_now_ns());
}

/* ---- thread ------------------------------------------------------------- */

static void
health_on_stop(evutil_socket_t fd, short what, void *arg)
{
    struct lg_health *h = arg;

    (void)fd;
    (void)what;
    event_base_loopbreak(h->base);
}

static void *
health_main(void *arg)
{
    struct lg_health *h = arg;

    event_base_dispatch(h->base);
    return NULL;
}

static void
health_free(struct lg_health *h)
{
    for (size_t i = 0; i < h->n; i++) {
        struct lg_health_target *t = &h->targets[i];

        lg_health_check_stop(t);
        lg_health_scrape_stop(t);
        if (t->conn != NULL) {
            evhttp_connection_free(t->conn); /* cancels requests in flight */
        }
    }
    free(h->targets);
    lg_health_peers_stop(h);
    if (h->prior_ev != NULL) {
        event_free(h->prior_ev);
    }
    if (h->stop_ev != NULL) {
        event_free(h->stop_ev);
    }
    if (h->base != NULL) {
        event_base_free(h->base);
    }
    free(h);
}

/* Sets up checks and scrapes for one backend; false if it gets neither. */
static bool
health_target_init(struct lg_health *h, struct lg_health_target *t, size_t i)
{
    const struct lg_health_conf *hc = &h->f.conf->health;
    struct lg_backend *b = h->f.backends[i];
    const struct lg_backend_conf *bc = &h->f.conf->backends[i];
    bool check = hc->interval_ms > 0 && bc->health_path && bc->health_path[0];
    bool scrape = hc->scrape_interval_ms > 0 && bc->flavor != LG_ENGINE_NONE
                  && bc->metrics_path && bc->metrics_path[0];
    struct timeval tv;

    t->h = h;
    t->b = b;
    t->conf = bc;
    t->scrape.flavor = bc->flavor;
    lg_backend_read_engine(b, &t->eng);
    if (!check && !scrape) {
        return false;
    }
    if (bc->tls) {
        /* the requests' verification: CA, name (SNI), client certificate (tls.c); evhttp
         * reconnects through the same bufferevent, its SSL cleared for a new handshake.
         * No deferred callbacks (evhttp's own bufferevents have none): one still queued
         * when the thread stops would keep the bufferevent, and its SSL, alive for good */
        struct bufferevent *bev =
            lg_tls_connect_bev(h->base, bc, &b->tls_ctx, BEV_OPT_CLOSE_ON_FREE);

        t->conn = bev != NULL ? evhttp_connection_base_bufferevent_new(h->base, NULL, bev,
                                                                       bc->host, bc->port)
                              : NULL;
    } else {
        t->conn = evhttp_connection_base_new(h->base, NULL, bc->host, bc->port);
    }
    if (t->conn == NULL) {
        LG_WARN("backend %s: cannot set up health checks and engine scrapes; it is judged by its "
                "requests alone",
                b->name);
        return false;
    }
    tv = lg_health_tv(hc->timeout_ms ? hc->timeout_ms : 1000);
    evhttp_connection_set_timeout_tv(t->conn, &tv);
    evhttp_connection_set_retries(t->conn, 0);
    evhttp_connection_set_max_headers_size(t->conn, 64 * 1024);
    evhttp_connection_set_max_body_size(t->conn, LG_ENGINE_METRICS_MAX_BYTES);
    if (check) {
        lg_health_check_start(t);
    }
    if (scrape) {
        lg_health_scrape_start(t);
    }
    return true;
}

int
lg_health_start(const struct lg_health_fleet *f, struct lg_health **out)
{
    struct lg_health *h;
    struct timeval tv;
    size_t active = 0;

    *out = NULL;
    if (f->nbackends == 0) {
        return LG_OK;
    }
    h = lg_xcalloc(1, sizeof(*h));
    h->f = *f;
    h->base = event_base_new();
    if (h->base == NULL) {
        LG_ERROR("health checks: cannot create an event base");
        free(h);
        return LG_ERR;
    }
    h->targets = lg_xcalloc(f->nbackends, sizeof(*h->targets));
    h->n = f->nbackends;
    for (size_t i = 0; i < f->nbackends; i++) {
        active += health_target_init(h, &h->targets[i], i);
    }
    active += lg_health_peers_start(h);
    h->prior_ev = event_new(h->base, -1, EV_PERSIST, health_on_prior_timer, h);
    tv = lg_health_tv(500);
    event_add(h->prior_ev, &tv);
    h->stop_ev = event_new(h->base, -1, 0, health_on_stop, h);
    event_add(h->stop_ev, NULL);
    if (pthread_create(&h->thread, NULL, health_main, h) != 0) {
        LG_ERROR("health checks: cannot start the thread");
        health_free(h);
        return LG_ERR;
    }
    pthread_setname_np(h->thread, "lg-health");
    LG_DEBUG("health: %zu of %zu backends checked or scraped", active, f->nbackends);
    *out = h;
    return LG_OK;
}

void
lg_health_stop(struct lg_health *h)
{
    if (h == NULL) {
        return;
    }
    event_active(h->stop_ev, EV_READ, 0);
    pthread_join(h->thread, NULL);
    health_free(h);
}
