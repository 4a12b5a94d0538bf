/*
 * enginemetrics.c: a Prometheus text-format parser and the per-engine
 * vocabularies (see enginemetrics.h).
 *
 * Owns nothing. The parser never allocates and never writes into the text:
 * names and labels are reported as spans, a value is copied into a small
 * bounded buffer for strtod().
 */
#include "fleet/enginemetrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <jansson.h>

/*
 * Each number under every name an engine version has used for it: the first
 * name present in an exposition wins (an engine exporting both during a
 * deprecation is read once). Where each comes from: tests/fixtures/engines/.
 */
#define EM_ALT 2

enum { EM_WAITING = 0, EM_RUNNING, EM_KV, EM_FINISHED, EM_NQUANT };

struct em_vocab {
    const char *prefix;                   /* detection: any series starting with it */
    const char *names[EM_NQUANT][EM_ALT]; /* NULL = none */
};

static const struct em_vocab em_vocabs[] = {
    /* vLLM: the V0 engine and V1 alike; V1 0.9 renamed the KV gauge */
    [LG_ENGINE_VLLM] = { "vllm:",
                         { { "vllm:num_requests_waiting", NULL },
                           { "vllm:num_requests_running", NULL },
                           { "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc" },
                           { "vllm:request_success_total", NULL } } },
    /* SGLang: the 2024 metrics_collector.py names came first */
    [LG_ENGINE_SGLANG] = { "sglang:",
                           { { "sglang:num_queue_reqs", "sglang:num_requests_waiting" },
                             { "sglang:num_running_reqs", "sglang:num_requests_running" },
                             { "sglang:token_usage", NULL },
                             { "sglang:num_requests_total", NULL } } },
    [LG_ENGINE_TGI] = { "tgi_",
                        { { "tgi_queue_size", NULL },
                          { "tgi_batch_current_size", NULL },
                          { NULL, NULL },
                          { "tgi_request_success", NULL } } },
    /* llama.cpp: the KV gauge went with the old KV-cache API (2025) */
    [LG_ENGINE_LLAMACPP] = { "llamacpp:",
                             { { "llamacpp:requests_deferred", NULL },
                               { "llamacpp:requests_processing", NULL },
                               { "llamacpp:kv_cache_usage_ratio", NULL },
                               { NULL, NULL } } },
};

const char *
lg_engine_flavor_name(enum lg_engine_flavor f)
{
    switch (f) {
    case LG_ENGINE_AUTO:
        return "auto";
    case LG_ENGINE_VLLM:
        return "vllm";
    case LG_ENGINE_SGLANG:
        return "sglang";
    case LG_ENGINE_TGI:
        return "tgi";
    case LG_ENGINE_LLAMACPP:
        return "llamacpp";
    case LG_ENGINE_NONE:
        return "none";
    }
    return "?";
}

/* ---- the text format ---------------------------------------------------- */

static bool
em_is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static bool
em_is_name_char(char c)
{
    return em_is_name_start(c) || (c >= '0' && c <= '9');
}

/*
 * Finds the closing brace of a label set starting after '{', honouring
 * quoted values with \\, \" and \n escapes. Returns its offset or -1.
 */
static ssize_t
em_label_end(const char *s, size_t n)
{
    bool quoted = false;

    for (size_t i = 0; i < n; i++) {
        char c = s[i];

        if (quoted) {
            if (c == '\\') {
                i++;
            } else if (c == '"') {
                quoted = false;
            }
        } else if (c == '"') {
            quoted = true;
        } else if (c == '}') {
            return (ssize_t)i;
        }
    }
    return -1;
}

/* Parses a sample value: a float, NaN, +Inf or -Inf. */
static bool
em_parse_value(const char *s, size_t n, double *out)
{
    char buf[64];
    char *end;

    if (n == 0 || n >= sizeof(buf)) {
        return false;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (strcmp(buf, "+Inf") == 0 || strcmp(buf, "Inf") == 0) {
        *out = INFINITY;
        return true;
    }
    if (strcmp(buf, "-Inf") == 0) {
        *out = -INFINITY;
        return true;
    }
    if (strcmp(buf, "NaN") == 0) {
        *out = NAN;
        return true;
    }
    /* strtod also takes hex, "inf" and "nan(...)": not Prometheus numbers */
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];

        if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')) {
            return false;
        }
    }
    *out = strtod(buf, &end);
    return end == buf + n;
}

static bool
em_is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* One sample line (no newline). Returns false if malformed. */
static bool
em_parse_line(const char *s, size_t n, lg_prom_sample_fn fn, void *arg)
{
    size_t i = 0, name_len, labels_off = 0, labels_len = 0, v;
    double value;

    if (n == 0 || !em_is_name_start(s[0])) {
        return false;
    }
    while (i < n && em_is_name_char(s[i])) {
        i++;
    }
    name_len = i;
    if (i < n && s[i] == '{') {
        ssize_t end = em_label_end(s + i + 1, n - i - 1);

        if (end < 0) {
            return false;
        }
        labels_off = i + 1;
        labels_len = (size_t)end;
        i += (size_t)end + 2;
    }
    if (i >= n || !em_is_space(s[i])) {
        return false;
    }
    while (i < n && em_is_space(s[i])) {
        i++;
    }
    v = i;
    while (i < n && !em_is_space(s[i])) {
        i++;
    }
    if (!em_parse_value(s + v, i - v, &value)) {
        return false;
    }
    while (i < n && em_is_space(s[i])) {
        i++;
    }
    /* an optional integer timestamp (ms) */
    if (i < n) {
        if (s[i] == '-') {
            i++;
        }
        if (i >= n) {
            return false;
        }
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            i++;
        }
        while (i < n && em_is_space(s[i])) {
            i++;
        }
        if (i != n) {
            return false;
        }
    }
    fn(arg, s, name_len, s + labels_off, labels_len, value);
    return true;
}

uint32_t
lg_prom_parse(const char *text, size_t len, lg_prom_sample_fn fn, void *arg)
{
    uint32_t bad = 0;
    size_t pos = 0;

    while (pos < len) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - line) : len - pos;

        pos += n + (nl ? 1 : 0);
        if (n > 0 && line[n - 1] == '\r') {
            n--;
        }
        while (n > 0 && em_is_space(line[0])) {
            line++;
            n--;
        }
        if (n == 0 || line[0] == '#') {
            continue;
        }
        if (!em_parse_line(line, n, fn, arg)) {
            bad++;
        }
    }
    return bad;
}

/* ---- vocabularies ------------------------------------------------------- */

struct em_ctx {
    enum lg_engine_flavor flavor;
    bool detect;
    double v[EM_NQUANT][EM_ALT];
    bool has[EM_NQUANT][EM_ALT];
    uint32_t samples;
};

static bool
em_name_is(const char *name, size_t n, const char *lit)
{
    return lit != NULL && strlen(lit) == n && memcmp(name, lit, n) == 0;
}

static void
em_on_sample(void *arg, const char *name, size_t name_len, const char *labels, size_t labels_len,
             double value)
{
    struct em_ctx *x = arg;
    const struct em_vocab *v;

    (void)labels;
    (void)labels_len;
    x->samples++;
    if (x->detect && x->flavor == LG_ENGINE_AUTO) {
        for (int f = LG_ENGINE_VLLM; f <= LG_ENGINE_LLAMACPP; f++) {
            size_t pl = strlen(em_vocabs[f].prefix);

            if (name_len > pl && memcmp(name, em_vocabs[f].prefix, pl) == 0) {
                x->flavor = (enum lg_engine_flavor)f;
                break;
            }
        }
    }
    if (x->flavor < LG_ENGINE_VLLM || x->flavor > LG_ENGINE_LLAMACPP || !isfinite(value)) {
        return;
    }
    v = &em_vocabs[x->flavor];
    for (int q = 0; q < EM_NQUANT; q++) {
        for (int k = 0; k < EM_ALT; k++) {
            if (!em_name_is(name, name_len, v->names[q][k])) {
                continue;
            }
            if (q == EM_KV) { /* several engines: the fullest */
                if (value >= 0) {
                    x->v[q][k] = x->has[q][k] ? LG_MAX(x->v[q][k], value) : value;
                    x->has[q][k] = true;
                }
            } else if (value >= 0 && value < (q == EM_FINISHED ? 1e15 : 1e7)) { /* counts add up */
                x->v[q][k] += value;
                x->has[q][k] = true;
            }
            return;
        }
    }
}

/* The quantity under the first of its names present, or -1. */
static double
em_pick(const struct em_ctx *x, int q)
{
    for (int k = 0; k < EM_ALT; k++) {
        if (x->has[q][k]) {
            return x->v[q][k];
        }
    }
    return -1;
}

int
lg_engine_metrics_parse(const char *text, size_t len, enum lg_engine_flavor flavor,
                        struct lg_engine_sample *out)
{
    struct em_ctx x = { .flavor = flavor, .detect = flavor == LG_ENGINE_AUTO };
    double waiting, running, kv, finished;

    /*
     * Detection looks at every line, so a flavor whose first series comes
     * late (after the process_* ones) is still found; samples before the
     * detecting one cannot be the flavor's own (they have its prefix).
     */
    out->bad_lines = lg_prom_parse(text, len, em_on_sample, &x);
    out->flavor = x.flavor;
    out->samples = x.samples;
    waiting = em_pick(&x, EM_WAITING);
    running = em_pick(&x, EM_RUNNING);
    kv = em_pick(&x, EM_KV);
    finished = em_pick(&x, EM_FINISHED);
    out->waiting = waiting >= 0 ? (int32_t)LG_MIN(waiting, 1e7) : -1;
    out->running = running >= 0 ? (int32_t)LG_MIN(running, 1e7) : -1;
    out->kv_usage = kv >= 0 ? LG_MIN(kv, 1.0) : -1;
    out->finished = finished;
    return waiting >= 0 || running >= 0 ? LG_OK : LG_EDECLINED;
}

/* ---- llama.cpp's /props ------------------------------------------------- */

int
lg_engine_props_parse(const char *text, size_t len, double *slots)
{
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    json_t *n = json_is_object(root) ? json_object_get(root, "total_slots") : NULL;
    double v = json_is_integer(n) ? (double)json_integer_value(n) : -1;

    json_decref(root);
    if (!(v >= 1 && v <= LG_ENGINE_MAX_SLOTS)) {
        return LG_EDECLINED;
    }
    *slots = v;
    return LG_OK;
}
