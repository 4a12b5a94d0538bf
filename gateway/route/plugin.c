/*
 * plugin.c: the policy registry, the dlopen loader with its ABI checks, and
 * the host API.
 *
 * Owns: the registry (process-wide, guarded by registry_lock), the dlopen
 * handles and path copies of loaded plugins. Registered plugins stay until
 * lg_plugin_unload_all(): routers of older fleets may still call their ops.
 * Borrows: descriptors and ops tables (static data of the plugin or of
 * policies.c).
 */
#include "route/plugin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route/options.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lg_plugin registry[LG_PLUGIN_MAX];
static size_t registry_n;
static bool registry_builtins;

/* ---- host API ----------------------------------------------------------- */

static void plugin_host_log(int level, const char *plugin, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
plugin_host_log(int level, const char *plugin, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (level < LG_LOG_ERROR) {
        level = LG_LOG_ERROR;
    }
    if (level > (int)__atomic_load_n(&lg_log_threshold, __ATOMIC_RELAXED)) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    lg_log_emit((enum lg_log_level)level, "plugin", 0, "%s: %s", plugin ? plugin : "?", msg);
}

static uint64_t
plugin_host_now(void)
{
    return lg_now_ns();
}

uint64_t
lg_plugin_random(void)
{
    static __thread uint64_t state;

    if (state == 0) {
        state = lg_mix64(lg_now_ns() ^ (uint64_t)(uintptr_t)&state);
    }
    state += 0x9e3779b97f4a7c15ull;
    return lg_mix64(state);
}

static const struct lg_host_api plugin_host = {
    .size = sizeof(struct lg_host_api),
    .log = plugin_host_log,
    .now_ns = plugin_host_now,
    .random = lg_plugin_random,
    .opt_number = lg_options_number,
    .opt_bool = lg_options_bool,
    .opt_duration_ms = lg_options_duration_ms,
    .opt_size = lg_options_size,
    .opt_enum = lg_options_enum,
    .opt_string = lg_options_string,
};

const struct lg_host_api *
lg_plugin_host(void)
{
    return &plugin_host;
}

int
lg_plugin_create(const struct lg_plugin *p, json_t *options, void **state, char *err,
                 size_t errlen, bool *at_key)
{
    struct lg_options o;
    int rc;

    *state = NULL;
    lg_options_init(&o, options, err, errlen);
    rc = p->ops->create(&plugin_host, &o, state, err, errlen);
    if (lg_options_finish(&o, rc) != LG_OK) {
        if (rc == 0) {
            p->ops->destroy(*state); /* it took what a getter refused, or an unknown key */
        }
        *state = NULL;
        if (at_key != NULL) {
            *at_key = o.err_at_key;
        }
        return LG_EINVAL;
    }
    return LG_OK;
}

int
lg_plugin_create_text(const struct lg_plugin *p, const char *options, void **state, char *err,
                      size_t errlen)
{
    json_error_t jerr;
    json_t *obj = json_loads(options, JSON_REJECT_DUPLICATES, &jerr);
    int rc;

    if (!json_is_object(obj)) {
        snprintf(err, errlen, ": options must be a JSON object");
        json_decref(obj);
        return LG_EINVAL;
    }
    rc = lg_plugin_create(p, obj, state, err, errlen, NULL);
    json_decref(obj);
    return rc;
}

/* ---- checks ------------------------------------------------------------- */

static bool
plugin_name_ok(const char *name)
{
    size_t n = 0;

    if (name == NULL || name[0] == '\0') {
        return false;
    }
    for (const char *p = name; *p; p++, n++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'
              || *p == '.')) {
            return false;
        }
    }
    return n <= 64;
}

int
lg_plugin_check(const struct lg_plugin_desc *d, char *err, size_t errlen)
{
    const struct lg_policy_ops *ops;
    size_t need = offsetof(struct lg_policy_ops, score) + sizeof(ops->score);

    if (d == NULL) {
        snprintf(err, errlen, "lg_plugin_describe() returned NULL");
        return LG_EINVAL;
    }
    if (d->abi_major != LG_PLUGIN_ABI_MAJOR) {
        snprintf(err, errlen, "built for plugin ABI %u.%u, this gateway has %u.%u (major differs)",
                 d->abi_major, d->abi_minor, LG_PLUGIN_ABI_MAJOR, LG_PLUGIN_ABI_MINOR);
        return LG_EINVAL;
    }
    if (d->abi_minor > LG_PLUGIN_ABI_MINOR) {
        snprintf(err, errlen,
                 "built for plugin ABI %u.%u, newer than this gateway's %u.%u: upgrade the gateway",
                 d->abi_major, d->abi_minor, LG_PLUGIN_ABI_MAJOR, LG_PLUGIN_ABI_MINOR);
        return LG_EINVAL;
    }
    if (d->kind != LG_PLUGIN_POLICY) {
        snprintf(err, errlen, "kind %d is not a policy", (int)d->kind);
        return LG_EINVAL;
    }
    if (!plugin_name_ok(d->name)) {
        snprintf(err, errlen, "name must be 1-64 of [a-z0-9_.-]");
        return LG_EINVAL;
    }
    ops = d->ops;
    if (ops == NULL) {
        snprintf(err, errlen, "%s: no ops table", d->name);
        return LG_EINVAL;
    }
    if (ops->size < need) {
        snprintf(err, errlen, "%s: ops table of %zu bytes is smaller than the %zu required",
                 d->name, ops->size, need);
        return LG_EINVAL;
    }
    if (ops->create == NULL || ops->destroy == NULL || ops->score == NULL) {
        snprintf(err, errlen, "%s: required op %s is NULL", d->name,
                 ops->create == NULL    ? "create"
                 : ops->destroy == NULL ? "destroy"
                                        : "score");
        return LG_EINVAL;
    }
    return LG_OK;
}

/* ---- registry ----------------------------------------------------------- */

/* Whether the policy asked for the engine model, at this gateway's version of it. */
static bool
plugin_lends_model(const struct lg_policy_ops *ops)
{
    return (ops->wants & LG_POLICY_WANTS_MODEL) && ops->model_version == LG_ENGINE_MODEL_VERSION;
}

static struct lg_plugin *
registry_find(const char *name)
{
    for (size_t i = 0; i < registry_n; i++) {
        if (strcmp(registry[i].desc->name, name) == 0) {
            return &registry[i];
        }
    }
    return NULL;
}

/* registry_lock held */
static void
registry_add_builtins(void)
{
    char err[256];

    if (registry_builtins) {
        return;
    }
    registry_builtins = true;
    for (size_t i = 0; i < lg_builtin_npolicies && registry_n < LG_PLUGIN_MAX; i++) {
        const struct lg_plugin_desc *d = lg_builtin_policies[i];

        LG_BUG_ON(lg_plugin_check(d, err, sizeof(err)) != LG_OK);
        registry[registry_n++] = (struct lg_plugin){ .desc = d, .ops = d->ops };
        registry[registry_n - 1].lends_model = plugin_lends_model(d->ops);
        LG_BUG_ON(((const struct lg_policy_ops *)d->ops)->wants != 0
                  && !registry[registry_n - 1].lends_model); /* built with this gateway */
    }
}

int
lg_plugin_load(const char *path, char *err, size_t errlen)
{
    const struct lg_plugin_desc *(*describe)(void);
    const struct lg_plugin_desc *d;
    struct lg_plugin *have;
    char why[256];
    void *dl;
    int rc = LG_EINVAL;

    pthread_mutex_lock(&registry_lock);
    registry_add_builtins();
    dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (dl == NULL) {
        snprintf(err, errlen, "%s: cannot load: %s", path, dlerror());
        goto out;
    }
    *(void **)&describe = dlsym(dl, "lg_plugin_describe");
    if (describe == NULL) {
        snprintf(err, errlen, "%s: no lg_plugin_describe symbol: not an llmgate plugin", path);
        goto out_close;
    }
    d = describe();
    if (lg_plugin_check(d, why, sizeof(why)) != LG_OK) {
        snprintf(err, errlen, "%s: %s", path, why);
        goto out_close;
    }
    have = registry_find(d->name);
    if (have != NULL) {
        if (have->desc == d) {
            rc = LG_OK; /* the same object again (a reload): keep the first handle */
        } else {
            snprintf(err, errlen, "%s: a policy named \"%s\" is already registered (%s)", path,
                     d->name, have->path ? have->path : "built in");
        }
        goto out_close;
    }
    if (registry_n >= LG_PLUGIN_MAX) {
        snprintf(err, errlen, "%s: too many plugins (at most %d)", path, LG_PLUGIN_MAX);
        goto out_close;
    }
    registry[registry_n++] = (struct lg_plugin){ .desc = d,
                                                 .ops = d->ops,
                                                 .path = lg_xstrdup(path),
                                                 .dl = dl,
                                                 .lends_model = plugin_lends_model(d->ops) };
    LG_INFO("loaded policy plugin %s %s from %s (ABI %u.%u)", d->name, d->version ? d->version : "",
            path, d->abi_major, d->abi_minor);
    if ((((const struct lg_policy_ops *)d->ops)->wants & LG_POLICY_WANTS_MODEL)
        && !registry[registry_n - 1].lends_model) {
        LG_WARN("policy plugin %s reads engine model view %u, this gateway has %u: it runs "
                "without the model (view->model NULL) until rebuilt",
                d->name, ((const struct lg_policy_ops *)d->ops)->model_version,
                LG_ENGINE_MODEL_VERSION);
    }
    pthread_mutex_unlock(&registry_lock);
    return LG_OK;

out_close:
    dlclose(dl);
out:
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

const struct lg_plugin *
lg_plugin_find(const char *name)
{
    const struct lg_plugin *p;

    pthread_mutex_lock(&registry_lock);
    registry_add_builtins();
    p = registry_find(name);
    pthread_mutex_unlock(&registry_lock);
    return p;
}

void
lg_plugin_names(char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    pthread_mutex_lock(&registry_lock);
    registry_add_builtins();
    for (size_t i = 0; i < registry_n && off < len; i++) {
        off +=
            (size_t)snprintf(buf + off, len - off, "%s%s", i ? ", " : "", registry[i].desc->name);
    }
    pthread_mutex_unlock(&registry_lock);
}

void
lg_plugin_unload_all(void)
{
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_n; i++) {
        if (registry[i].dl != NULL) {
            dlclose(registry[i].dl);
        }
        free(registry[i].path);
    }
    registry_n = 0;
    registry_builtins = false;
    pthread_mutex_unlock(&registry_lock);
}
