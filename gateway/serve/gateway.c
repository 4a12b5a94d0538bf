/*
 * gateway.c: what the gateway's workers run, assembled: the worker_ops a
 * worker's loop calls (worker.h). It attaches the listeners, the pools'
 * purge timer and the idle clients' park timer, gives LG_WORKER_CMD_ADMIT to the admission queue, closes the
 * pooled connections a new fleet no longer needs, drains, and closes what
 * is left after the loop. Each runs on the worker's thread.
 *
 * Owns nothing: everything it touches belongs to the worker or to the
 * module it calls.
 */
#include "serve/gateway.h"

#include <sys/queue.h>

#include <event2/event.h>

#include "fleet/fleet.h"
#include "serve/admission.h"
#include "serve/client.h"
#include "serve/listener.h"
#include "serve/upstream.h"

static int
gateway_attach(struct lg_worker *w)
{
    w->purge_ev = evtimer_new(w->base, lg_upstream_on_purge, w);
    w->park_ev = evtimer_new(w->base, lg_client_on_park, w);
    if (w->purge_ev == NULL || w->park_ev == NULL) {
        return LG_ENOMEM;
    }
    return lg_listener_attach(w);
}

static void
gateway_admit(struct lg_worker *w)
{
    lg_admission_wake_worker(w->gw->admission, w->id);
}

/* Closes idle pooled connections of backends the new fleet no longer has;
 * waiters look again (the new fleet may have a replica they wait for). */
static void
gateway_adopted(struct lg_worker *w, struct lg_fleet *old)
{
    const struct lg_fleet *f = w->fleet;

    lg_admission_wake_worker(w->gw->admission, w->id);

    for (size_t i = 0; i < old->nbackends; i++) {
        bool kept = false;

        for (size_t k = 0; k < f->nbackends && !kept; k++) {
            kept = f->backends[k] == old->backends[i];
        }
        if (!kept) {
            lg_upstream_pool_flush(w, old->backends[i]);
        }
    }
}

static void
gateway_drain(struct lg_worker *w)
{
    struct lg_client *c, *next;

    lg_listener_close(w);
    for (c = TAILQ_FIRST(&w->clients); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        lg_client_drain(c);
    }
}

static void
gateway_cleanup(struct lg_worker *w)
{
    struct lg_client *c;

    lg_listener_close(w);
    while ((c = TAILQ_FIRST(&w->clients)) != NULL) {
        lg_client_close(c, "shutdown");
    }
    for (size_t i = 0; i < w->fleet->nbackends; i++) {
        lg_upstream_pool_flush(w, w->fleet->backends[i]);
    }
}

const struct lg_worker_ops lg_gateway_worker_ops = {
    .attach = gateway_attach,
    .admit = gateway_admit,
    .adopted = gateway_adopted,
    .drain = gateway_drain,
    .cleanup = gateway_cleanup,
};
