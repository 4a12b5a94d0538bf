/*
 * keys.c: API keys: the keys file, lookup by SHA-256, per-key limits.
 *
 * Owns: struct lg_keys (the path and the table in force, swapped whole on
 * reload under `lock`; a reload's staged table and path until it commits),
 * each table, and the keys (refcounted: the table and every request holding
 * one), and each key's counters and token budget account (refcounted:
 * shared by the keys of the same name in successive tables).
 * Invariant: a key's configuration never changes once built; only its
 * counters move, with atomics, from any worker.
 */
#include "serve/keys.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "base/config.h"
#include "base/config_loc.h"
#include "http/openai.h"
#include "serve/budget.h"
#include "serve/tenant.h"

#define KEYS_MAX        100000
#define KEYS_MAX_BYTES  (64u << 20)
#define KEYS_MAX_MODELS 1024
#define KEYS_MAX_TOKENS 1e12 /* per window: far above any fleet's output */

struct keys_counters {
    int refcnt;        /* atomic: the keys of this name */
    uint32_t inflight; /* atomic: requests counted, all workers */
    uint64_t tat_ns;   /* atomic: GCRA theoretical arrival time */
};

struct lg_key {
    int refcnt; /* atomic: the table and each hold */
    char name[LG_KEY_NAME_MAX + 1];
    uint8_t sha[SHA256_DIGEST_LENGTH];
    char **models; /* NULL: every model ("*") */
    size_t nmodels;
    uint32_t max_concurrency;       /* 0: unlimited */
    uint64_t interval_ns;           /* 1 / rate; 0: no rate limit */
    uint32_t burst;                 /* requests allowed back to back */
    struct keys_counters *ctr;      /* one reference */
    struct lg_budget_limits budget; /* tokens per minute and per day; 0: none */
    struct lg_budget *account;      /* one reference when budget is limited; else NULL */
    struct lg_key_sched sched;      /* class, max_class, ttft_target_ms */
};

struct keys_table {
    struct lg_key **keys; /* [n], one reference each */
    size_t n;
    struct lg_key **slots; /* open addressing by digest, [mask + 1], borrowed */
    size_t mask;
};

struct lg_keys {
    char *path;            /* the reloading thread's: the file of the table in force */
    pthread_rwlock_t lock; /* guards `t` */
    struct keys_table *t;
    struct keys_table *staged; /* the reloading thread's: read, not yet in force */
    char *staged_path;
};

/* ---- keys and tables ---------------------------------------------------- */

static struct lg_key *
keys_ref(struct lg_key *key)
{
    __atomic_add_fetch(&key->refcnt, 1, __ATOMIC_RELAXED);
    return key;
}

static void
keys_unref(struct lg_key *key)
{
    if (key == NULL || __atomic_sub_fetch(&key->refcnt, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    if (key->ctr != NULL && __atomic_sub_fetch(&key->ctr->refcnt, 1, __ATOMIC_ACQ_REL) == 0) {
        free(key->ctr);
    }
    lg_budget_unref(key->account);
    for (size_t i = 0; i < key->nmodels; i++) {
        free(key->models[i]);
    }
    free(key->models);
    free(key);
}

static void
keys_table_free(struct keys_table *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        keys_unref(t->keys[i]);
    }
    free(t->keys);
    free(t->slots);
    free(t);
}

static size_t
keys_slot0(const uint8_t *sha, size_t mask)
{
    uint64_t h;

    memcpy(&h, sha, sizeof(h)); /* a digest is uniform already */
    return (size_t)h & mask;
}

static struct lg_key *
keys_table_find(const struct keys_table *t, const uint8_t *sha)
{
    for (size_t i = keys_slot0(sha, t->mask);; i = (i + 1) & t->mask) {
        struct lg_key *key = t->slots[i];

        if (key == NULL) {
            return NULL;
        }
        if (CRYPTO_memcmp(key->sha, sha, SHA256_DIGEST_LENGTH) == 0) {
            return key;
        }
    }
}

static void
keys_table_index(struct keys_table *t)
{
    size_t cap = 8;

    while (cap < 2 * t->n) {
        cap *= 2;
    }
    t->mask = cap - 1;
    t->slots = lg_xcalloc(cap, sizeof(*t->slots));
    for (size_t k = 0; k < t->n; k++) {
        size_t i = keys_slot0(t->keys[k]->sha, t->mask);

        while (t->slots[i] != NULL) {
            i = (i + 1) & t->mask;
        }
        t->slots[i] = t->keys[k];
    }
}

/* ---- loading ------------------------------------------------------------ */

struct keys_ctx {
    const char *name;
    const char *text;
    size_t len;
    struct lg_config_errors *errs;
    size_t nerrors;
};

static void __attribute__((format(printf, 4, 0)))
keys_verror(struct keys_ctx *ctx, bool at_key, const char *ptr, const char *fmt, va_list ap)
{
    char what[512];
    int line, col;

    ctx->nerrors++;
    if (ctx->errs == NULL) {
        return;
    }
    if (ctx->errs->n >= LG_CONFIG_MAX_ERRORS) {
        ctx->errs->dropped++;
        return;
    }
    vsnprintf(what, sizeof(what), fmt, ap);
    if (at_key) {
        lg_config_loc_find_key(ctx->text, ctx->len, ptr, &line, &col);
    } else {
        lg_config_loc_find(ctx->text, ctx->len, ptr, &line, &col);
    }
    if (asprintf(&ctx->errs->msgs[ctx->errs->n], "%s:%d:%d: error: %s: %s", ctx->name, line, col,
                 ptr[0] ? ptr : "/", what)
        < 0) {
        ctx->errs->msgs[ctx->errs->n] = lg_xstrdup("out of memory formatting an error");
    }
    ctx->errs->n++;
}

/* An error about the value at JSON pointer ptr. */
static void __attribute__((format(printf, 3, 4)))
keys_error(struct keys_ctx *ctx, const char *ptr, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    keys_verror(ctx, false, ptr, fmt, ap);
    va_end(ap);
}

/* An error about the member name at ptr (an unknown key). */
static void __attribute__((format(printf, 3, 4)))
keys_error_key(struct keys_ctx *ctx, const char *ptr, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    keys_verror(ctx, true, ptr, fmt, ap);
    va_end(ap);
}

static int
keys_nibble(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
        return (c | 0x20) - 'a' + 10;
    }
    return -1;
}

/* 64 hex digits (either case) into 32 bytes. */
static bool
keys_hex(const char *s, uint8_t *out)
{
    if (strlen(s) != 2 * SHA256_DIGEST_LENGTH) {
        return false;
    }
    for (size_t i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        int hi = keys_nibble(s[2 * i]), lo = keys_nibble(s[2 * i + 1]);

        if (hi < 0 || lo < 0) {
            return false;
        }
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static bool
keys_name_ok(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-@");

    return n > 0 && n <= LG_KEY_NAME_MAX && s[n] == '\0';
}

/* Reports members of obj not in `known` (NULL-terminated); '#' keys are comments. */
static void
keys_unknown_members(struct keys_ctx *ctx, const char *ptr, json_t *obj, const char *const *known)
{
    const char *k;
    json_t *v;

    json_object_foreach (obj, k, v) {
        size_t i;

        if (k[0] == '#') {
            continue;
        }
        for (i = 0; known[i] != NULL && strcmp(known[i], k) != 0; i++) {
        }
        if (known[i] == NULL) {
            char p[256];

            snprintf(p, sizeof(p), "%s/%s", ptr, k);
            keys_error_key(ctx, p, "unknown key \"%.64s\"", k);
        }
    }
}

/* A non-negative number within [min, max] at obj[member]; def when absent. */
static double
keys_number(struct keys_ctx *ctx, const char *ptr, json_t *obj, const char *member, double min,
            double max, double def)
{
    json_t *v = json_object_get(obj, member);
    char p[256];
    double x;

    if (v == NULL || json_is_null(v)) {
        return def;
    }
    snprintf(p, sizeof(p), "%s/%s", ptr, member);
    if (!json_is_number(v)) {
        keys_error(ctx, p, "expected a number");
        return def;
    }
    x = json_number_value(v);
    if (!(x >= min && x <= max)) {
        keys_error(ctx, p, "must be between %g and %g (got %g)", min, max, x);
        return def;
    }
    return x;
}

static void
keys_rate(struct keys_ctx *ctx, const char *ptr, json_t *rate, struct lg_key *key)
{
    static const char *const known[] = { "requests_per_second", "requests_per_minute", "burst",
                                         NULL };
    char p[256];
    double rps, rpm, per_s, burst;

    snprintf(p, sizeof(p), "%s/rate", ptr);
    if (!json_is_object(rate)) {
        keys_error(ctx, p,
                   "expected an object {requests_per_second or requests_per_minute, "
                   "burst}");
        return;
    }
    keys_unknown_members(ctx, p, rate, known);
    rps = keys_number(ctx, p, rate, "requests_per_second", 0.001, 1e6, 0);
    rpm = keys_number(ctx, p, rate, "requests_per_minute", 0.001, 6e7, 0);
    if ((rps > 0) == (rpm > 0)) {
        keys_error(ctx, p, "give one of requests_per_second and requests_per_minute");
        return;
    }
    per_s = rps > 0 ? rps : rpm / 60.0;
    burst = keys_number(ctx, p, rate, "burst", 1, 1e6, LG_MAX(1.0, ceil(per_s)));
    if (burst != floor(burst)) {
        snprintf(p + strlen(p), sizeof(p) - strlen(p), "/burst");
        keys_error(ctx, p, "must be a whole number of requests");
        return;
    }
    key->interval_ns = (uint64_t)(1e9 / per_s);
    key->burst = (uint32_t)burst;
}

/* "budget": {"tokens_per_minute": N, "tokens_per_day": N}, one of them at least. */
static void
keys_budget(struct keys_ctx *ctx, const char *ptr, json_t *budget, struct lg_key *key)
{
    static const char *const known[] = { "tokens_per_minute", "tokens_per_day", NULL };
    static const char *const field[LG_BUDGET_NPERIODS] = { "tokens_per_minute", "tokens_per_day" };
    char p[256];
    size_t before;

    snprintf(p, sizeof(p), "%s/budget", ptr);
    if (!json_is_object(budget)) {
        keys_error(ctx, p, "expected an object {tokens_per_minute, tokens_per_day}");
        return;
    }
    keys_unknown_members(ctx, p, budget, known);
    before = ctx->nerrors;
    for (int i = 0; i < LG_BUDGET_NPERIODS; i++) {
        double n = keys_number(ctx, p, budget, field[i], 1, KEYS_MAX_TOKENS, 0);

        if (n != floor(n)) {
            char pf[300];

            snprintf(pf, sizeof(pf), "%s/%s", p, field[i]);
            keys_error(ctx, pf, "must be a whole number of tokens");
            continue;
        }
        key->budget.tokens[i] = (uint64_t)n;
    }
    if (ctx->nerrors == before && !lg_budget_limited(&key->budget)) {
        keys_error(ctx, p, "give tokens_per_minute, tokens_per_day or both");
    }
}

/* A class name at obj[member] (def when absent); -1 on error. */
static int
keys_class(struct keys_ctx *ctx, const char *ptr, json_t *obj, const char *member, int def)
{
    json_t *v = json_object_get(obj, member);
    char p[256];
    int cls;

    if (v == NULL || json_is_null(v)) {
        return def;
    }
    snprintf(p, sizeof(p), "%s/%s", ptr, member);
    cls = json_is_string(v) ? lg_class_parse(json_string_value(v), json_string_length(v)) : -1;
    if (cls < 0) {
        keys_error(ctx, p, "expected a class: \"batch\", \"default\", \"interactive\" or "
                           "\"system\"");
    }
    return cls;
}

/* "class", "max_class" (at least class; default: class), "ttft_target_ms". */
static void
keys_sched(struct keys_ctx *ctx, const char *ptr, json_t *e, struct lg_key *key)
{
    int cls = keys_class(ctx, ptr, e, "class", LG_CLASS_DEFAULT);
    int max = keys_class(ctx, ptr, e, "max_class", cls < 0 ? LG_CLASS_DEFAULT : cls);
    double t = keys_number(ctx, ptr, e, "ttft_target_ms", 1, 3600000, 0);
    char p[256];

    if (cls >= 0 && max >= 0 && max < cls) {
        snprintf(p, sizeof(p), "%s/max_class", ptr);
        keys_error(ctx, p, "must not be below class (\"%s\" < \"%s\")", lg_class_name(max),
                   lg_class_name(cls));
    }
    if (t != floor(t)) {
        snprintf(p, sizeof(p), "%s/ttft_target_ms", ptr);
        keys_error(ctx, p, "must be a whole number of milliseconds");
    }
    key->sched.cls = (uint8_t)(cls < 0 ? LG_CLASS_DEFAULT : cls);
    key->sched.max_class = (uint8_t)(max < 0 ? key->sched.cls : max);
    key->sched.ttft_target_ms = (uint32_t)t;
}

static struct lg_key *
keys_entry(struct keys_ctx *ctx, size_t idx, json_t *e)
{
    static const char *const known[] = { "name",   "sha256", "models",    "max_concurrency",
                                         "rate",   "budget", "class",     "max_class",
                                         "ttft_target_ms", NULL };
    struct lg_key *key;
    char ptr[64], p[128];
    const char *name, *sha;
    json_t *models;
    size_t before = ctx->nerrors;
    double mc;

    snprintf(ptr, sizeof(ptr), "/keys/%zu", idx);
    if (!json_is_object(e)) {
        keys_error(ctx, ptr,
                   "expected an object {name, sha256, models, max_concurrency, rate, budget}");
        return NULL;
    }
    key = lg_xcalloc(1, sizeof(*key));
    key->refcnt = 1;
    keys_unknown_members(ctx, ptr, e, known);
    name = json_string_value(json_object_get(e, "name"));
    snprintf(p, sizeof(p), "%s/name", ptr);
    if (name == NULL) {
        keys_error(ctx, json_object_get(e, "name") ? p : ptr, "needs a \"name\" string");
    } else if (!keys_name_ok(name)) {
        keys_error(ctx, p, "names are 1 to %d letters, digits, \".\", \"_\", \":\", \"@\" or \"-\"",
                   LG_KEY_NAME_MAX);
    } else {
        snprintf(key->name, sizeof(key->name), "%s", name);
    }
    sha = json_string_value(json_object_get(e, "sha256"));
    snprintf(p, sizeof(p), "%s/sha256", ptr);
    if (sha == NULL) {
        keys_error(ctx, json_object_get(e, "sha256") ? p : ptr,
                   "needs a \"sha256\" string (llmgate --hash-key prints it)");
    } else if (!keys_hex(sha, key->sha)) {
        keys_error(ctx, p, "must be 64 hexadecimal digits, the SHA-256 of the key");
    }
    models = json_object_get(e, "models");
    snprintf(p, sizeof(p), "%s/models", ptr);
    if (models == NULL) {
        keys_error(ctx, ptr, "needs \"models\": a list of model names, or \"*\" for every model");
    } else if (json_is_string(models) && strcmp(json_string_value(models), "*") == 0) {
        key->models = NULL;
    } else if (!json_is_array(models) || json_array_size(models) == 0
               || json_array_size(models) > KEYS_MAX_MODELS) {
        keys_error(ctx, p, "expected \"*\" or a list of 1 to %d model names", KEYS_MAX_MODELS);
    } else {
        size_t i;
        json_t *m;

        key->models = lg_xcalloc(json_array_size(models), sizeof(*key->models));
        json_array_foreach (models, i, m) {
            if (!json_is_string(m) || json_string_length(m) == 0
                || json_string_length(m) > LG_MODEL_MAX) {
                char pm[160];

                snprintf(pm, sizeof(pm), "%s/%zu", p, i);
                keys_error(ctx, pm, "expected a model name");
                continue;
            }
            key->models[key->nmodels++] = lg_xstrdup(json_string_value(m));
        }
    }
    mc = keys_number(ctx, ptr, e, "max_concurrency", 0, 1e6, 0);
    if (mc != floor(mc)) {
        snprintf(p, sizeof(p), "%s/max_concurrency", ptr);
        keys_error(ctx, p, "must be a whole number");
    }
    key->max_concurrency = (uint32_t)mc;
    if (json_object_get(e, "rate") != NULL && !json_is_null(json_object_get(e, "rate"))) {
        keys_rate(ctx, ptr, json_object_get(e, "rate"), key);
    }
    if (json_object_get(e, "budget") != NULL && !json_is_null(json_object_get(e, "budget"))) {
        keys_budget(ctx, ptr, json_object_get(e, "budget"), key);
    }
    keys_sched(ctx, ptr, e, key);
    if (ctx->nerrors != before) {
        keys_unref(key);
        return NULL;
    }
    return key;
}

/*
 * A key with a budget counts in the account of the key of its name in
 * `prev` (the table in force, on a reload), else in a new one: the tokens
 * counted so far hold through a reload, whatever its limits become.
 */
static void
keys_link_budget(struct lg_key *key, const struct keys_table *prev)
{
    char name[LG_BUDGET_NAME_MAX + 1];

    if (!lg_budget_limited(&key->budget)) {
        return;
    }
    for (size_t k = 0; prev != NULL && k < prev->n; k++) {
        if (prev->keys[k]->account != NULL && strcmp(prev->keys[k]->name, key->name) == 0) {
            key->account = lg_budget_ref(prev->keys[k]->account);
            return;
        }
    }
    snprintf(name, sizeof(name), "key:%s", key->name);
    key->account = lg_budget_new(name);
}

/* Builds a table; counters come from `prev` for the names it has. */
static int
keys_parse(struct keys_ctx *ctx, const struct keys_table *prev, struct keys_table **out)
{
    static const char *const known[] = { "keys", NULL };
    struct keys_table *t;
    json_error_t jerr;
    json_t *root, *arr, *e;
    size_t i;

    if (ctx->len > KEYS_MAX_BYTES || memchr(ctx->text, '\0', ctx->len) != NULL) {
        keys_error(ctx, "", "not a keys file (NUL bytes, or larger than %u MiB)",
                   KEYS_MAX_BYTES >> 20);
        return LG_EINVAL;
    }
    root = json_loadb(ctx->text, ctx->len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        ctx->nerrors++;
        if (ctx->errs != NULL && ctx->errs->n < LG_CONFIG_MAX_ERRORS
            && asprintf(&ctx->errs->msgs[ctx->errs->n], "%s:%d:%d: error: /: %s", ctx->name,
                        LG_MAX(jerr.line, 1), LG_MAX(jerr.column, 1), jerr.text)
                   >= 0) {
            ctx->errs->n++;
        }
        return LG_EINVAL;
    }
    arr = json_object_get(root, "keys");
    if (!json_is_object(root) || !json_is_array(arr)) {
        keys_error(ctx, json_is_object(root) && arr != NULL ? "/keys" : "",
                   "expected {\"keys\": [{name, sha256, models, max_concurrency, rate, "
                   "budget}, ...]}");
        json_decref(root);
        return LG_EINVAL;
    }
    keys_unknown_members(ctx, "", root, known);
    if (json_array_size(arr) > KEYS_MAX) {
        keys_error(ctx, "/keys", "more than %d keys", KEYS_MAX);
        json_decref(root);
        return LG_EINVAL;
    }
    t = lg_xcalloc(1, sizeof(*t));
    t->keys = lg_xcalloc(json_array_size(arr) + 1, sizeof(*t->keys));
    json_array_foreach (arr, i, e) {
        struct lg_key *key = keys_entry(ctx, i, e);
        char p[64];

        if (key == NULL) {
            continue;
        }
        snprintf(p, sizeof(p), "/keys/%zu", i);
        for (size_t k = 0; k < t->n; k++) {
            if (strcmp(t->keys[k]->name, key->name) == 0) {
                keys_error(ctx, p, "duplicate name \"%s\"", key->name);
            } else if (memcmp(t->keys[k]->sha, key->sha, sizeof(key->sha)) == 0) {
                keys_error(ctx, p, "the same key as \"%s\"", t->keys[k]->name);
            }
        }
        for (size_t k = 0; prev != NULL && k < prev->n && key->ctr == NULL; k++) {
            if (strcmp(prev->keys[k]->name, key->name) == 0) {
                key->ctr = prev->keys[k]->ctr;
                __atomic_add_fetch(&key->ctr->refcnt, 1, __ATOMIC_RELAXED);
            }
        }
        if (key->ctr == NULL) {
            key->ctr = lg_xcalloc(1, sizeof(*key->ctr));
            key->ctr->refcnt = 1;
        }
        keys_link_budget(key, prev);
        t->keys[t->n++] = key;
    }
    json_decref(root);
    if (ctx->nerrors > 0) {
        keys_table_free(t);
        return LG_EINVAL;
    }
    keys_table_index(t);
    *out = t;
    return LG_OK;
}

static int
keys_read_file(const char *path, char **text, size_t *len, struct lg_config_errors *errs)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 4096;

    *len = 0;
    if (f == NULL) {
        goto fail;
    }
    *text = lg_xmalloc(cap);
    for (;;) {
        size_t n = fread(*text + *len, 1, cap - *len, f);

        *len += n;
        if (n == 0 || *len > KEYS_MAX_BYTES) {
            break;
        }
        if (*len == cap) {
            cap *= 2;
            *text = lg_xrealloc(*text, cap);
        }
    }
    if (ferror(f)) {
        free(*text);
        *text = NULL;
        fclose(f);
        goto fail;
    }
    fclose(f);
    return LG_OK;

fail:
    if (errs != NULL && errs->n < LG_CONFIG_MAX_ERRORS
        && asprintf(&errs->msgs[errs->n], "%s: error: cannot read: %s", path, strerror(errno))
               >= 0) {
        errs->n++;
    }
    return LG_EIO;
}

int
lg_keys_load_buffer(const char *text, size_t len, const char *name, struct lg_keys **out,
                    struct lg_config_errors *errs)
{
    struct keys_ctx ctx = { .name = name, .text = text, .len = len, .errs = errs };
    struct keys_table *t;
    struct lg_keys *k;

    if (keys_parse(&ctx, NULL, &t) != LG_OK) {
        return LG_EINVAL;
    }
    k = lg_xcalloc(1, sizeof(*k));
    k->path = lg_xstrdup(name);
    pthread_rwlock_init(&k->lock, NULL);
    k->t = t;
    *out = k;
    return LG_OK;
}

int
lg_keys_load(const char *path, struct lg_keys **out, struct lg_config_errors *errs)
{
    char *text = NULL;
    size_t len;
    int rc;

    rc = keys_read_file(path, &text, &len, errs);
    if (rc != LG_OK) {
        return rc;
    }
    rc = lg_keys_load_buffer(text, len, path, out, errs);
    free(text);
    return rc;
}

void
lg_keys_unstage(struct lg_keys *k)
{
    keys_table_free(k->staged); /* its counters are shared: the keys in force keep theirs */
    free(k->staged_path);
    k->staged = NULL;
    k->staged_path = NULL;
}

int
lg_keys_stage(struct lg_keys *k, const char *path)
{
    struct lg_config_errors errs = { 0 };
    struct keys_ctx ctx = { .errs = &errs };
    struct keys_table *t = NULL;
    char *text = NULL;
    int rc;

    lg_keys_unstage(k);
    path = path != NULL ? path : k->path;
    ctx.name = path;
    rc = keys_read_file(path, &text, &ctx.len, &errs);
    if (rc == LG_OK) {
        ctx.text = text;
        pthread_rwlock_rdlock(&k->lock); /* counters are taken from the table in force */
        rc = keys_parse(&ctx, k->t, &t);
        pthread_rwlock_unlock(&k->lock);
    }
    free(text);
    if (rc != LG_OK) {
        for (size_t i = 0; i < errs.n; i++) {
            LG_ERROR("%s", errs.msgs[i]);
        }
        LG_ERROR("keys reload failed: keeping the %zu keys in force (from %s); fix %s and reload",
                 lg_keys_count(k), k->path, path);
        lg_config_errors_free(&errs);
        return rc;
    }
    k->staged = t;
    k->staged_path = lg_xstrdup(path);
    return LG_OK;
}

void
lg_keys_commit(struct lg_keys *k)
{
    struct keys_table *old;
    bool moved;

    if (k->staged == NULL) {
        return;
    }
    pthread_rwlock_wrlock(&k->lock);
    old = k->t;
    k->t = k->staged;
    pthread_rwlock_unlock(&k->lock);
    keys_table_free(old); /* requests holding its keys keep them */
    moved = strcmp(k->path, k->staged_path) != 0;
    free(k->path);
    k->path = k->staged_path;
    k->staged = NULL;
    k->staged_path = NULL;
    LG_INFO("keys: %zu keys loaded from %s%s", k->t->n, k->path, moved ? " (a new keys file)" : "");
}

int
lg_keys_reload(struct lg_keys *k)
{
    int rc = lg_keys_stage(k, NULL);

    if (rc == LG_OK) {
        lg_keys_commit(k);
    }
    return rc;
}

void
lg_keys_free(struct lg_keys *k)
{
    if (k == NULL) {
        return;
    }
    lg_keys_unstage(k);
    keys_table_free(k->t);
    pthread_rwlock_destroy(&k->lock);
    free(k->path);
    free(k);
}

size_t
lg_keys_count(struct lg_keys *k)
{
    size_t n;

    pthread_rwlock_rdlock(&k->lock);
    n = k->t->n;
    pthread_rwlock_unlock(&k->lock);
    return n;
}

/* ---- requests ----------------------------------------------------------- */

/* The key value[i, len) (trailing blanks cut) names, into hold. */
static bool
keys_find_token(struct lg_keys *k, const char *value, size_t i, size_t len,
                struct lg_key_hold *hold)
{
    uint8_t sha[SHA256_DIGEST_LENGTH];
    struct lg_key *key;

    while (len > i && (value[len - 1] == ' ' || value[len - 1] == '\t')) {
        len--;
    }
    if (i == len) {
        return false;
    }
    SHA256((const unsigned char *)value + i, len - i, sha);
    pthread_rwlock_rdlock(&k->lock);
    key = keys_table_find(k->t, sha);
    if (key != NULL) {
        hold->key = keys_ref(key);
    }
    pthread_rwlock_unlock(&k->lock);
    OPENSSL_cleanse(sha, sizeof(sha));
    return key != NULL;
}

bool
lg_keys_authenticate(struct lg_keys *k, const char *value, size_t len, struct lg_key_hold *hold)
{
    size_t i = 0;

    memset(hold, 0, sizeof(*hold));
    /* RFC 9110 section 11.4: the scheme is case-insensitive; RFC 6750 section 2.1 */
    while (i < len && (value[i] == ' ' || value[i] == '\t')) {
        i++;
    }
    if (len - i < 7 || !lg_mem_ieq(value + i, "Bearer ", 7)) {
        return false;
    }
    for (i += 7; i < len && value[i] == ' '; i++) {
    }
    return keys_find_token(k, value, i, len, hold);
}

bool
lg_keys_authenticate_raw(struct lg_keys *k, const char *value, size_t len,
                         struct lg_key_hold *hold)
{
    size_t i = 0;

    memset(hold, 0, sizeof(*hold));
    while (i < len && (value[i] == ' ' || value[i] == '\t')) {
        i++;
    }
    return keys_find_token(k, value, i, len, hold);
}

bool
lg_keys_model_allowed(const struct lg_key_hold *hold, const char *model)
{
    const struct lg_key *key = hold->key;

    if (key == NULL || key->models == NULL) {
        return true;
    }
    for (size_t i = 0; i < key->nmodels; i++) {
        if (strcmp(key->models[i], model) == 0) {
            return true;
        }
    }
    return false;
}

/* GCRA: one more request at `now` conforms if the bucket is not full. */
static bool
keys_take_rate(struct lg_key *key, uint64_t now, uint32_t *retry_after_ms)
{
    uint64_t tat = __atomic_load_n(&key->ctr->tat_ns, __ATOMIC_RELAXED);
    uint64_t limit = key->interval_ns * key->burst;

    for (;;) {
        uint64_t next = LG_MAX(tat, now) + key->interval_ns;

        if (next - now > limit) {
            uint64_t wait = next - now - limit;

            *retry_after_ms = (uint32_t)LG_MIN(wait / LG_NS_PER_MS + 1, 86400000ull);
            return false;
        }
        if (__atomic_compare_exchange_n(&key->ctr->tat_ns, &tat, next, true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            return true;
        }
    }
}

int
lg_keys_admit(struct lg_key_hold *hold, uint64_t now_ns, uint32_t *retry_after_ms)
{
    struct lg_key *key = hold->key;

    *retry_after_ms = 0;
    if (key == NULL || hold->counted) {
        return LG_OK;
    }
    if (key->max_concurrency > 0) {
        uint32_t n = __atomic_add_fetch(&key->ctr->inflight, 1, __ATOMIC_ACQ_REL);

        if (n > key->max_concurrency) {
            __atomic_sub_fetch(&key->ctr->inflight, 1, __ATOMIC_ACQ_REL);
            *retry_after_ms = 1000;
            return LG_EBUSY;
        }
        hold->counted = true;
    }
    if (key->interval_ns > 0 && !keys_take_rate(key, now_ns, retry_after_ms)) {
        if (hold->counted) {
            __atomic_sub_fetch(&key->ctr->inflight, 1, __ATOMIC_ACQ_REL);
            hold->counted = false;
        }
        return LG_EBUSY;
    }
    return LG_OK;
}

void
lg_keys_release(struct lg_key_hold *hold)
{
    if (hold->key == NULL) {
        return;
    }
    if (hold->counted) {
        __atomic_sub_fetch(&hold->key->ctr->inflight, 1, __ATOMIC_ACQ_REL);
    }
    keys_unref(hold->key);
    hold->key = NULL;
    hold->counted = false;
}

struct lg_budget *
lg_keys_budget(const struct lg_key_hold *hold, const struct lg_budget_limits **lim)
{
    const struct lg_key *key = hold->key;

    if (key == NULL || key->account == NULL) {
        return NULL;
    }
    *lim = &key->budget;
    return key->account;
}

bool
lg_keys_rate_view(const struct lg_key_hold *hold, uint64_t now_ns, struct lg_keys_rate_view *out)
{
    const struct lg_key *key = hold->key;
    uint64_t tat, limit, room;

    if (key == NULL || key->interval_ns == 0) {
        return false;
    }
    tat = __atomic_load_n(&key->ctr->tat_ns, __ATOMIC_RELAXED);
    limit = key->interval_ns * key->burst;
    /* GCRA: the bucket is full again at tat; until then it holds (tat - now) / interval */
    room = tat <= now_ns ? limit : tat - now_ns >= limit ? 0 : limit - (tat - now_ns);
    out->limit = key->burst;
    out->remaining = (uint32_t)LG_MIN(room / key->interval_ns, (uint64_t)key->burst);
    out->reset_ms = tat > now_ns ? (tat - now_ns + LG_NS_PER_MS - 1) / LG_NS_PER_MS : 0;
    return true;
}

void
lg_keys_foreach_budget(struct lg_keys *k, lg_keys_budget_fn fn, void *arg)
{
    pthread_rwlock_rdlock(&k->lock);
    for (size_t i = 0; i < k->t->n; i++) {
        const struct lg_key *key = k->t->keys[i];

        if (key->account != NULL) {
            fn(key->name, &key->budget, key->account, arg);
        }
    }
    pthread_rwlock_unlock(&k->lock);
}

const char *
lg_keys_name(const struct lg_key_hold *hold)
{
    return hold->key != NULL ? hold->key->name : NULL;
}

void
lg_keys_hash_hex(const void *data, size_t len, char out[65])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t sha[SHA256_DIGEST_LENGTH];

    SHA256(data, len, sha);
    for (size_t i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        out[2 * i] = hex[sha[i] >> 4];
        out[2 * i + 1] = hex[sha[i] & 15];
    }
    out[64] = '\0';
}

bool
lg_keys_sched(const struct lg_key_hold *hold, struct lg_key_sched *out)
{
    if (hold->key == NULL) {
        return false;
    }
    *out = hold->key->sched;
    return true;
}
