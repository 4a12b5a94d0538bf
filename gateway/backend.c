/*
 * backend.c: backend objects, their live state, and fleets.
 *
 * Owns: struct lg_backend (refcounted: each fleet listing it and each request
 * dispatched to it hold a reference), struct lg_fleet (refcounted: the
 * gateway, each worker and each request hold one).
 * Invariant: a backend's pools are freed only when its last reference goes,
 * which happens on a worker-free path (see upstream.c: pools are emptied by
 * their workers before the final unref at shutdown or after a reload).
 */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "router.h"
#include "tls.h"
#include "upstream.h"

static void
backend_conf_copy(struct lg_backend_conf *dst, const struct lg_backend_conf *src)
{
    *dst = *src;
    dst->name = lg_xstrdup(src->name);
    dst->url = lg_xstrdup(src->url);
    dst->host = lg_xstrdup(src->host);
    dst->host_header = lg_xstrdup(src->host_header);
    dst->path_prefix = lg_xstrdup(src->path_prefix ? src->path_prefix : "");
    dst->metrics_path = src->metrics_path ? lg_xstrdup(src->metrics_path) : NULL;
    dst->health_path = src->health_path ? lg_xstrdup(src->health_path) : NULL;
    dst->api_key = src->api_key ? lg_xstrdup(src->api_key) : NULL;
    dst->tls_ca_file = src->tls_ca_file ? lg_xstrdup(src->tls_ca_file) : NULL;
    dst->tls_server_name = src->tls_server_name ? lg_xstrdup(src->tls_server_name) : NULL;
    dst->tls_cert = src->tls_cert ? lg_xstrdup(src->tls_cert) : NULL;
    dst->tls_key = src->tls_key ? lg_xstrdup(src->tls_key) : NULL;
    dst->models = lg_xcalloc(src->nmodels + 1, sizeof(char *));
    for (size_t i = 0; i < src->nmodels; i++) {
        dst->models[i] = lg_xstrdup(src->models[i]);
    }
}

static void
backend_conf_free(struct lg_backend_conf *c)
{
    free(c->name);
    free(c->url);
    free(c->host);
    free(c->host_header);
    free(c->path_prefix);
    free(c->metrics_path);
    free(c->health_path);
    free(c->api_key);
    free(c->tls_ca_file);
    free(c->tls_server_name);
    free(c->tls_cert);
    free(c->tls_key);
    for (size_t i = 0; i < c->nmodels; i++) {
        free(c->models[i]);
    }
    free(c->models);
    memset(c, 0, sizeof(*c));
}

static struct lg_backend *
backend_new(const struct lg_backend_conf *bc, unsigned nworkers)
{
    struct lg_backend *b = lg_xcalloc(1, sizeof(*b));

    backend_conf_copy(&b->conf, bc);
    b->name = b->conf.name;
    b->refcnt = 1;
    pthread_mutex_init(&b->lock, NULL);
    b->npools = nworkers;
    b->pools = lg_upstream_pools_new(b, nworkers);
    return b;
}

struct lg_backend *
lg_backend_ref(struct lg_backend *b)
{
    __atomic_fetch_add(&b->refcnt, 1, __ATOMIC_RELAXED);
    return b;
}

void
lg_backend_unref(struct lg_backend *b)
{
    if (b == NULL || __atomic_sub_fetch(&b->refcnt, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    lg_tls_backend_release(b);
    lg_upstream_pools_free(b->pools, b->npools);
    pthread_mutex_destroy(&b->lock);
    backend_conf_free(&b->conf);
    free(b);
}

bool
lg_backend_is_available(const struct lg_backend *b, uint64_t now_ns)
{
    int h = __atomic_load_n(&b->health, __ATOMIC_RELAXED);

    if (h != LG_BACKEND_UP) {
        return false;
    }
    return __atomic_load_n(&b->retry_after_until_ns, __ATOMIC_RELAXED) <= now_ns;
}

void
lg_backend_note_result(struct lg_backend *b, int status, uint64_t retry_after_ns)
{
    int cls = (status >= 100 && status < 600) ? status / 100 : 0;
    bool failed = cls == 0 || cls == 5 || status == 429;

    LG_STAT_ADD(b, responses[cls], 1);
    if (retry_after_ns > 0) {
        __atomic_store_n(&b->retry_after_until_ns, lg_now_ns() + retry_after_ns,
                         __ATOMIC_RELAXED);
    }
    pthread_mutex_lock(&b->lock);
    b->consecutive_failures = failed ? b->consecutive_failures + 1 : 0;
    pthread_mutex_unlock(&b->lock);
}

/* ---- fleet -------------------------------------------------------------- */

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

        if (strcmp(b->conf.name, bc->name) == 0 && strcmp(b->conf.url, bc->url) == 0) {
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
        cap += f->backends[i]->conf.nmodels;
    }
    f->models = lg_xcalloc(cap ? cap : 1, sizeof(*f->models));
    for (size_t i = 0; i < f->nbackends; i++) {
        struct lg_backend *b = f->backends[i];

        for (size_t k = 0; k < b->conf.nmodels; k++) {
            struct lg_model_route *m = NULL;

            for (size_t j = 0; j < f->nmodels; j++) {
                if (strcmp(f->models[j].model, b->conf.models[k]) == 0) {
                    m = &f->models[j];
                    break;
                }
            }
            if (m == NULL) {
                m = &f->models[f->nmodels++];
                m->model = b->conf.models[k];
                m->backends = lg_xcalloc(f->nbackends, sizeof(*m->backends));
            }
            m->backends[m->n++] = b;
        }
    }
    qsort(f->models, f->nmodels, sizeof(*f->models), fleet_model_cmp);
}

int
lg_fleet_new(struct lg_config *conf, unsigned nworkers, const struct lg_fleet *prev,
             struct lg_fleet **out)
{
    struct lg_fleet *f = lg_xcalloc(1, sizeof(*f));
    int rc;

    f->refcnt = 1;
    f->conf = lg_config_ref(conf);
    f->backends = lg_xcalloc(conf->nbackends ? conf->nbackends : 1, sizeof(*f->backends));
    for (size_t i = 0; i < conf->nbackends; i++) {
        struct lg_backend *b = fleet_reuse(prev, &conf->backends[i]);

        if (b != NULL) {
            lg_backend_ref(b);
        } else {
            b = backend_new(&conf->backends[i], nworkers);
        }
        b->index = (uint32_t)i;
        f->backends[f->nbackends++] = b;
    }
    fleet_index_models(f);
    rc = lg_router_new(conf, &f->router);
    if (rc != LG_OK) {
        lg_fleet_unref(f);
        return rc;
    }
    *out = f;
    return LG_OK;
}

struct lg_fleet *
lg_fleet_ref(struct lg_fleet *f)
{
    __atomic_fetch_add(&f->refcnt, 1, __ATOMIC_RELAXED);
    return f;
}

void
lg_fleet_unref(struct lg_fleet *f)
{
    if (f == NULL || __atomic_sub_fetch(&f->refcnt, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    lg_router_free(f->router);
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
