/*
 * fleet.c: the backends of one configuration, indexed by model, with their
 * checker thread and their router.
 *
 * Owns: struct lg_fleet (refcounted: the gateway, each worker and each
 * request hold one), its model index, one reference on each of its backends,
 * its health thread and its router. Borrows: the previous fleet while a
 * reload builds the next one from it.
 */
#include "fleet/fleet.h"

#include <stdlib.h>
#include <string.h>

#include "fleet/backend.h"
#include "fleet/health.h"

static int
fleet_model_cmp(const void *a, const void *b)
{
    return strcmp(((const struct lg_model_route *)a)->model,
                  ((const struct lg_model_route *)b)->model);
}

static struct lg_backend *
fleet_reuse(const struct lg_fleet *prev, const struct lg_backend_conf *bc)
{
    if (prev == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < prev->nbackends; i++) {
        struct lg_backend *b = prev->backends[i];
        const struct lg_backend_conf *cur = lg_backend_conf(b);

        /* its TLS client context was made once from its settings: a change
         * there makes a new backend */
        if (strcmp(cur->name, bc->name) == 0 && strcmp(cur->url, bc->url) == 0
            && lg_backend_conf_same_tls(cur, bc)) {
            return b;
        }
    }
    return NULL;
}

static void
fleet_index_models(struct lg_fleet *f)
{
    size_t cap = 0;

    for (size_t i = 0; i < f->nbackends; i++) {
        cap += f->conf->backends[i].nmodels;
    }
    for (size_t i = 0; i < f->conf->ntemplates; i++) {
        cap += f->conf->templates[i].nmodels;
    }
    f->models = lg_xcalloc(cap ? cap : 1, sizeof(*f->models));
    /* the models of this fleet's settings: a backend kept from the fleet in
     * force takes them only as this one takes over (lg_fleet_adopt) */
    for (size_t i = 0; i < f->nbackends; i++) {
        struct lg_backend *b = f->backends[i];
        const struct lg_backend_conf *bc = &f->conf->backends[i];

        for (size_t k = 0; k < bc->nmodels; k++) {
            struct lg_model_route *m = NULL;

            for (size_t j = 0; j < f->nmodels; j++) {
                if (strcmp(f->models[j].model, bc->models[k]) == 0) {
                    m = &f->models[j];
                    break;
                }
            }
            if (m == NULL) {
                m = &f->models[f->nmodels++];
                m->model = bc->models[k];
                m->backends = lg_xcalloc(f->nbackends, sizeof(*m->backends));
                m->prior = (struct lg_est_prior){ .fixed_ms = LG_EST_DEFAULT_FIXED_MS,
                                                  .ms_per_kib = LG_EST_DEFAULT_MS_PER_KIB,
                                                  .itl_ms = LG_EST_DEFAULT_ITL_MS,
                                                  .hold_ms = LG_EST_DEFAULT_HOLD_MS,
                                                  .slots = 0 };
            }
            m->backends[m->n++] = b;
        }
    }
    /* a model only discovered backends serve, none discovered yet: a route
     * without backends answers 503 (none available), not 404 (no such model) */
    for (size_t i = 0; i < f->conf->ntemplates; i++) {
        const struct lg_backend_conf *t = &f->conf->templates[i];

        for (size_t k = 0; k < t->nmodels; k++) {
            bool known = false;

            for (size_t j = 0; j < f->nmodels && !known; j++) {
                known = strcmp(f->models[j].model, t->models[k]) == 0;
            }
            if (!known) {
                f->models[f->nmodels].model = t->models[k];
                f->models[f->nmodels++].backends = lg_xcalloc(1, sizeof(struct lg_backend *));
            }
        }
    }
    qsort(f->models, f->nmodels, sizeof(*f->models), fleet_model_cmp);
}

int
lg_fleet_new(struct lg_config *conf, unsigned nworkers, const struct lg_fleet *prev,
             struct lg_router *router, lg_fleet_router_free_fn router_free, struct lg_fleet **out)
{
    struct lg_fleet *f = lg_xcalloc(1, sizeof(*f));
    int rc;

    f->refcnt = 1;
    f->conf = lg_config_ref(conf);
    f->router = router;
    f->router_free = router_free;
    f->backends = lg_xcalloc(conf->nbackends ? conf->nbackends : 1, sizeof(*f->backends));
    for (size_t i = 0; i < conf->nbackends; i++) {
        struct lg_backend *b = fleet_reuse(prev, &conf->backends[i]);

        if (b != NULL) {
            lg_backend_ref(b);
        } else {
            b = lg_backend_new(&conf->backends[i], nworkers);
            if (prev != NULL) {
                /* joins a running fleet: ramp its share up (slow start) */
                __atomic_store_n(&b->up_since_ns, lg_now_ns(), __ATOMIC_RELAXED);
            }
        }
        b->index = (uint32_t)i;
        f->backends[f->nbackends++] = b;
    }
    fleet_index_models(f);
    rc = lg_health_start(&(struct lg_health_fleet){ .conf = f->conf,
                                                    .backends = f->backends,
                                                    .nbackends = f->nbackends,
                                                    .models = f->models,
                                                    .nmodels = f->nmodels },
                         &f->health);
    if (rc != LG_OK) {
        lg_fleet_unref(f);
        return rc;
    }
    *out = f;
    return LG_OK;
}

void
lg_fleet_adopt(struct lg_fleet *f)
{
    for (size_t i = 0; i < f->nbackends; i++) {
        lg_backend_reconf(f->backends[i], &f->conf->backends[i]);
    }
}

struct lg_fleet *
lg_fleet_ref(struct lg_fleet *f)
{
    __atomic_fetch_add(&f->refcnt, 1, __ATOMIC_RELAXED);
    return f;
}

void
lg_fleet_retire(struct lg_fleet *f)
{
    /* Left running, it would write the same backends' health and engine
     * state as the new thread, and its peers list over the new one, for as
     * long as a stream holds f (minutes). */
    lg_health_stop(f->health);
    f->health = NULL;
}

void
lg_fleet_unref(struct lg_fleet *f)
{
    if (f == NULL || __atomic_sub_fetch(&f->refcnt, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    lg_health_stop(f->health);
    if (f->router != NULL) {
        f->router_free(f->router);
    }
    for (size_t i = 0; i < f->nmodels; i++) {
        free(f->models[i].backends);
    }
    free(f->models);
    for (size_t i = 0; i < f->nbackends; i++) {
        lg_backend_unref(f->backends[i]);
    }
    free(f->backends);
    lg_config_unref(f->conf);
    free(f);
}

const struct lg_model_route *
lg_fleet_find_model(const struct lg_fleet *f, const char *model)
{
    struct lg_model_route key = { .model = model };

    return bsearch(&key, f->models, f->nmodels, sizeof(*f->models), fleet_model_cmp);
}
