/*
 * tenant.c: tenants and request classes (see tenant.h).
 *
 * Owns: the table of tenants (hash chains, bounded by tenants.max) and the
 * shared "other". Borrows: nothing. Invariants: a tenant is freed only by
 * the table, only with no reference and idle past tenants.idle_expiry (or
 * when the table goes); its scheduler fields are never touched here.
 */
#include "serve/tenant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/config.h"
#include "http/httphdr.h"
#include "serve/budget.h"

#define TENANT_BUCKETS 1024

struct lg_tenants {
    pthread_mutex_t lock;
    struct lg_tenant *buckets[TENANT_BUCKETS];
    struct lg_tenant other; /* shared once the table is full */
    size_t n;
    uint32_t max;
    uint64_t expiry_ns;
    uint64_t swept_ns;              /* last sweep of idle tenants */
    struct lg_budget_limits budget; /* tenants.budget */
    size_t anon_b;                  /* "anonymous"'s bucket, hashed once */
};

/* The tenant of a request with no tenant header and no key: one for all of them. */
static const char tenant_anon[] = "anonymous";

static const char *const class_names[LG_NCLASSES] = {
    [LG_CLASS_BATCH] = "batch",
    [LG_CLASS_DEFAULT] = "default",
    [LG_CLASS_INTERACTIVE] = "interactive",
    [LG_CLASS_SYSTEM] = "system",
};

static const char *const shed_names[LG_SHED_NREASONS] = {
    [LG_SHED_NONE] = NULL,
    [LG_SHED_SATURATED] = "saturated",
    [LG_SHED_QUEUE_DEADLINE] = "queue_deadline",
    [LG_SHED_TTFT_TARGET] = "ttft_target",
};

const char *
lg_shed_name(enum lg_shed why)
{
    return (unsigned)why < LG_SHED_NREASONS ? shed_names[why] : NULL;
}

int
lg_class_parse(const char *s, size_t len)
{
    while (len > 0 && (*s == ' ' || *s == '\t')) {
        s++;
        len--;
    }
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t')) {
        len--;
    }
    for (int i = 0; i < LG_NCLASSES; i++) {
        if (strlen(class_names[i]) == len && strncasecmp(class_names[i], s, len) == 0) {
            return i;
        }
    }
    return -1;
}

const char *
lg_class_name(int cls)
{
    return cls >= 0 && cls < LG_NCLASSES ? class_names[cls] : "default";
}

uint32_t
lg_tenant_parse_ms(const char *s, size_t len)
{
    uint64_t v = 0;
    size_t i = 0, digits = 0;

    while (i < len && (s[i] == ' ' || s[i] == '\t')) {
        i++;
    }
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > 3600000) {
            return 0;
        }
    }
    while (i < len && (s[i] == ' ' || s[i] == '\t')) {
        i++;
    }
    return i == len && digits > 0 ? (uint32_t)v : 0;
}

bool
lg_tenant_name_ok(const char *s, size_t len)
{
    static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             ".-_:@/+=";

    if (len == 0 || len > LG_TENANT_NAME_MAX) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\0' || strchr(ok, s[i]) == NULL) {
            return false;
        }
    }
    return true;
}

/* ---- the table ---------------------------------------------------------- */

struct lg_tenants *
lg_tenants_new(const struct lg_tenants_conf *conf)
{
    struct lg_tenants *t = lg_xcalloc(1, sizeof(*t));

    pthread_mutex_init(&t->lock, NULL);
    snprintf(t->other.name, sizeof(t->other.name), "other");
    t->other.service_t = 0;
    t->other.key = -INFINITY;
    t->anon_b = lg_hash64(tenant_anon, sizeof(tenant_anon) - 1, LG_HASH64_INIT) % TENANT_BUCKETS;
    lg_tenants_configure(t, conf);
    return t;
}

void
lg_tenants_configure(struct lg_tenants *t, const struct lg_tenants_conf *conf)
{
    pthread_mutex_lock(&t->lock);
    t->max = conf != NULL ? conf->max : 1000;
    t->expiry_ns = (conf != NULL ? conf->idle_expiry_ms : 600000) * LG_NS_PER_MS;
    t->budget.tokens[LG_BUDGET_MINUTE] = conf != NULL ? conf->budget.tokens_per_minute : 0;
    t->budget.tokens[LG_BUDGET_DAY] = conf != NULL ? conf->budget.tokens_per_day : 0;
    pthread_mutex_unlock(&t->lock);
}

void
lg_tenants_free(struct lg_tenants *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t b = 0; b < TENANT_BUCKETS; b++) {
        struct lg_tenant *tn = t->buckets[b], *next;

        for (; tn != NULL; tn = next) {
            next = tn->next;
            lg_budget_unref(tn->account);
            free(tn);
        }
    }
    lg_budget_unref(t->other.account);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* Forgets the tenants idle past the expiry (under the lock), at most once a second. */
static void
tenants_sweep(struct lg_tenants *t, uint64_t now, bool force)
{
    if (!force && now - t->swept_ns < LG_NS_PER_S) {
        return;
    }
    t->swept_ns = now;
    for (size_t b = 0; b < TENANT_BUCKETS; b++) {
        struct lg_tenant **pp = &t->buckets[b];

        while (*pp != NULL) {
            struct lg_tenant *tn = *pp;

            /* no reference: no waiter either (each holds one), so no flow */
            if (__atomic_load_n(&tn->refcnt, __ATOMIC_ACQUIRE) == 0 && now > tn->last_ns
                && now - tn->last_ns > t->expiry_ns) {
                *pp = tn->next;
                lg_budget_unref(tn->account);
                free(tn);
                t->n--;
            } else {
                pp = &tn->next;
            }
        }
    }
}

/* The tenant of name (len bytes, at most LG_TENANT_NAME_MAX), in bucket b. */
static struct lg_tenant *
tenants_get_in(struct lg_tenants *t, const char *name, size_t len, size_t b, uint64_t now_ns)
{
    struct lg_tenant *tn;

    pthread_mutex_lock(&t->lock);
    for (tn = t->buckets[b]; tn != NULL; tn = tn->next) {
        if (strlen(tn->name) == len && memcmp(tn->name, name, len) == 0) {
            goto found;
        }
    }
    if (t->n >= t->max) {
        tenants_sweep(t, now_ns, false);
    }
    if (t->n >= t->max) {
        tn = &t->other;
        goto found;
    }
    tn = lg_xcalloc(1, sizeof(*tn));
    memcpy(tn->name, name, len);
    tn->key = -INFINITY;
    tn->next = t->buckets[b];
    t->buckets[b] = tn;
    t->n++;
found:
    __atomic_add_fetch(&tn->refcnt, 1, __ATOMIC_RELAXED);
    if (now_ns > tn->last_ns) {
        tn->last_ns = now_ns; /* a slow request's start is older than the last use */
    }
    pthread_mutex_unlock(&t->lock);
    return tn;
}

struct lg_tenant *
lg_tenants_get(struct lg_tenants *t, const char *name, size_t len, uint64_t now_ns)
{
    len = LG_MIN(len, (size_t)LG_TENANT_NAME_MAX);
    return tenants_get_in(t, name, len, lg_hash64(name, len, LG_HASH64_INIT) % TENANT_BUCKETS,
                          now_ns);
}

/*
 * Without the table's lock: the count is atomic, and the sweep (under the
 * lock) frees a tenant only when it reads no reference, after which nobody
 * holds one to give back; a new reference is taken under the lock only.
 */
void
lg_tenants_put(struct lg_tenants *t, struct lg_tenant *tn)
{
    uint32_t was;

    (void)t;
    if (tn == NULL) {
        return;
    }
    was = __atomic_fetch_sub(&tn->refcnt, 1, __ATOMIC_RELEASE);
    LG_BUG_ON(was == 0);
}

struct lg_budget *
lg_tenants_budget(struct lg_tenants *t, struct lg_tenant *tn, struct lg_budget_limits *lim)
{
    struct lg_budget *b = NULL;

    pthread_mutex_lock(&t->lock);
    *lim = t->budget;
    if (lg_budget_limited(lim)) {
        if (tn->account == NULL) {
            char name[LG_TENANT_NAME_MAX + 8];

            snprintf(name, sizeof(name), "tenant:%s", tn->name);
            tn->account = lg_budget_new(name);
        }
        b = lg_budget_ref(tn->account);
    }
    pthread_mutex_unlock(&t->lock);
    return b;
}

size_t
lg_tenants_count(struct lg_tenants *t)
{
    size_t n;

    pthread_mutex_lock(&t->lock);
    n = t->n;
    pthread_mutex_unlock(&t->lock);
    return n;
}

void
lg_tenants_foreach(struct lg_tenants *t, lg_tenants_fn fn, void *arg)
{
    pthread_mutex_lock(&t->lock);
    for (size_t b = 0; b < TENANT_BUCKETS; b++) {
        for (struct lg_tenant *tn = t->buckets[b]; tn != NULL; tn = tn->next) {
            fn(tn, arg);
        }
    }
    fn(&t->other, arg);
    pthread_mutex_unlock(&t->lock);
}

/* ---- a request's tenant, class and target -------------------------------- */

int
lg_tenant_resolve(struct lg_tenants *t, const struct lg_config *conf, const struct lg_hdrs *hdrs,
                  const char *key_name, const struct lg_key_sched *ks, uint64_t t_start,
                  struct lg_req_sched *out, struct lg_tenant_refusal *no)
{
    const struct lg_scheduling_conf *sc = &conf->scheduling;
    const struct lg_hdr *h;
    const char *tname = key_name;
    size_t tlen = key_name != NULL ? strlen(key_name) : 0;
    int cls = ks != NULL ? ks->cls : LG_CLASS_DEFAULT;
    int max = ks != NULL ? ks->max_class : LG_CLASS_INTERACTIVE;
    uint32_t target = 0;

    memset(out, 0, sizeof(*out));
    out->asked = -1;
    for (size_t i = 0; i < conf->tenants.nheaders; i++) {
        h = lg_hdrs_find(hdrs, conf->tenants.headers[i]);
        if (h == NULL) {
            continue;
        }
        if (!lg_tenant_name_ok(lg_hdrs_value(hdrs, h), h->value_len)) {
            no->status = 400;
            no->code = "invalid_tenant";
            no->param = conf->tenants.headers[i];
            snprintf(no->message, sizeof(no->message),
                     "the %s header names a tenant: 1 to %d letters, digits or \".-_:@/+=\"",
                     conf->tenants.headers[i], LG_TENANT_NAME_MAX);
            return LG_EINVAL;
        }
        tname = lg_hdrs_value(hdrs, h);
        tlen = h->value_len;
        out->by_header = true;
        break;
    }
    if (sc->priority_header != NULL && (h = lg_hdrs_find(hdrs, sc->priority_header)) != NULL) {
        int want = lg_class_parse(lg_hdrs_value(hdrs, h), h->value_len);

        if (want < 0) {
            no->status = 400;
            no->code = "invalid_priority";
            no->param = sc->priority_header;
            snprintf(no->message, sizeof(no->message),
                     "the %s header is one of batch, default, interactive, system",
                     sc->priority_header);
            return LG_EINVAL;
        }
        if (want > max && sc->over_max_class == LG_CLASS_OVER_REFUSE) {
            no->status = 403;
            no->code = "priority_not_allowed";
            no->param = sc->priority_header;
            snprintf(no->message, sizeof(no->message),
                     "this key may ask for classes up to \"%s\", not \"%s\"", lg_class_name(max),
                     lg_class_name(want));
            return LG_EINVAL;
        }
        out->asked = (int8_t)(want > max ? want : -1);
        cls = LG_MIN(want, max);
    }
    if (sc->ttft_header != NULL && (h = lg_hdrs_find(hdrs, sc->ttft_header)) != NULL) {
        target = lg_tenant_parse_ms(lg_hdrs_value(hdrs, h), h->value_len);
        if (target == 0) {
            no->status = 400;
            no->code = "invalid_ttft_target";
            no->param = sc->ttft_header;
            snprintf(no->message, sizeof(no->message),
                     "the %s header is a whole number of milliseconds, 1 to 3600000",
                     sc->ttft_header);
            return LG_EINVAL;
        }
    }
    if (target == 0 && ks != NULL) {
        target = ks->ttft_target_ms;
    }
    if (target == 0) {
        target = (uint32_t)sc->classes[cls].ttft_target_ms;
    }
    out->cls = (uint8_t)cls;
    out->ttft_target_ms = target;
    out->deadline_ns = target > 0 ? t_start + (uint64_t)target * LG_NS_PER_MS : 0;
    if (t != NULL) { /* its last use: the request's start, no clock read */
        out->tenant = tlen == 0 ? tenants_get_in(t, tenant_anon, sizeof(tenant_anon) - 1,
                                                 t->anon_b, t_start)
                                : lg_tenants_get(t, tname, tlen, t_start);
    }
    return LG_OK;
}

void
lg_tenant_release(struct lg_tenants *t, struct lg_req_sched *s)
{
    if (s->tenant != NULL) {
        lg_tenants_put(t, s->tenant);
        s->tenant = NULL;
    }
}
