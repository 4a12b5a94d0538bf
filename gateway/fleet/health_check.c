/*
 * health_check.c: active health checks of one backend (health_check.h): a
 * GET of its health_path every health.interval on the target's connection;
 * rise successes in a row mark a DOWN backend up, fall failures an UP one
 * down. Writes the backend's health and up_since_ns; workers only read
 * them.
 *
 * Owns: the target's check timer. Runs on the fleet's health thread.
 */
#include "fleet/health_check.h"

#include <pthread.h>

#include <event2/event.h>
#include <event2/http.h>

#include "base/config.h"
#include "fleet/health_http.h"

/* The one listener of backends marked up (lg_health_check_set_up_hook()). */
static pthread_mutex_t health_up_lock = PTHREAD_MUTEX_INITIALIZER;
static lg_health_up_fn health_up_fn;
static void *health_up_arg;

void
lg_health_check_set_up_hook(lg_health_up_fn fn, void *arg)
{
    pthread_mutex_lock(&health_up_lock);
    health_up_fn = fn;
    health_up_arg = arg;
    pthread_mutex_unlock(&health_up_lock);
}

static void
health_check_notify_up(const struct lg_backend *b)
{
    pthread_mutex_lock(&health_up_lock);
    if (health_up_fn != NULL) {
        health_up_fn(health_up_arg, b);
    }
    pthread_mutex_unlock(&health_up_lock);
}

static void
health_check_result(struct lg_health_target *t, bool ok, int code)
{
    const struct lg_health_conf *hc = &t->h->f.conf->health;
    struct lg_backend *b = t->b;
    int state = __atomic_load_n(&b->health, __ATOMIC_RELAXED);

    if (code != 0) {
        lg_backend_note_listening(b, lg_now_ns()); /* a refused engine is back */
    }
    if (ok) {
        t->check.fail_run = 0;
        t->check.ok_run++;
        if (state == LG_BACKEND_DOWN && t->check.ok_run >= hc->rise) {
            __atomic_store_n(&b->up_since_ns, lg_now_ns(), __ATOMIC_RELAXED);
            __atomic_store_n(&b->health, LG_BACKEND_UP, __ATOMIC_RELAXED);
            LG_INFO("backend %s is up (%u checks passed)", b->name, t->check.ok_run);
            health_check_notify_up(b);
        }
        return;
    }
    t->check.ok_run = 0;
    t->check.fail_run++;
    if (state == LG_BACKEND_UP && t->check.fail_run >= hc->fall) {
        char why[256];

        __atomic_store_n(&b->health, LG_BACKEND_DOWN, __ATOMIC_RELAXED);
        LG_WARN("backend %s is down (%u checks failed, last: %s)", b->name, t->check.fail_run,
                lg_health_outcome(t, code, "health_path", why, sizeof(why)));
    }
    t->why[0] = '\0';
    t->why_tls = false;
    t->why_too_large = false;
}

static void
health_on_check_done(struct evhttp_request *req, void *arg)
{
    struct lg_health_target *t = arg;
    int code = req ? evhttp_request_get_response_code(req) : 0;

    t->check.out = false;
    health_check_result(t, code >= 200 && code < 300, code);
}

static void
health_on_check_timer(evutil_socket_t fd, short what, void *arg)
{
    struct lg_health_target *t = arg;
    const struct lg_health_conf *hc = &t->h->f.conf->health;
    struct timeval tv = lg_health_tv(hc->interval_ms);

    (void)fd;
    (void)what;
    event_add(t->check.ev, &tv);
    if (t->check.out) {
        return; /* the previous one is still out: its timeout will count */
    }
    t->check.out = true;
    if (lg_health_get(t, t->conf->health_path, health_on_check_done) != LG_OK) {
        t->check.out = false;
        health_check_result(t, false, 0);
    }
}

void
lg_health_check_start(struct lg_health_target *t)
{
    const struct lg_health_conf *hc = &t->h->f.conf->health;
    struct timeval tv = lg_health_tv(lg_mix64(t->b->id) % (hc->interval_ms + 1));

    t->check.ev = event_new(t->h->base, -1, 0, health_on_check_timer, t);
    event_add(t->check.ev, &tv);
}

void
lg_health_check_stop(struct lg_health_target *t)
{
    if (t->check.ev != NULL) {
        event_free(t->check.ev);
        t->check.ev = NULL;
    }
}
