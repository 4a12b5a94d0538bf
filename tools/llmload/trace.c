/*
 * trace.c: the request trace: seeded arrival times (Poisson, optionally
 * modulated by --burst), prompt sizes, max_tokens and prefix groups; and the
 * trace file (--trace-out / --trace-in), one JSON object per line:
 *   {"t_us":12345,"prompt_bytes":800,"max_tokens":64,"group":3}
 * plus, in a trace made from a recorded log, a request's own "model", "api",
 * "stream" and "extra_body" ("max_tokens": null = none in the body).
 * Owns: the generator's zipf table; the item array until handed to the caller.
 * Each quantity draws from its own stream, so the trace depends only on the
 * seed and the flags that shape it, never on the target.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "llmload.h"

enum trace_stream {
    TRACE_STREAM_ARRIVALS = 1,
    TRACE_STREAM_SIZES,
    TRACE_STREAM_TOKENS,
    TRACE_STREAM_GROUPS,
};

void
lg_ld_gen_init(struct lg_ld_gen *g, const struct lg_ld_opts *o)
{
    memset(g, 0, sizeof(*g));
    g->o = o;
    lg_ld_rng_init(&g->arrivals, o->seed, TRACE_STREAM_ARRIVALS);
    lg_ld_rng_init(&g->sizes, o->seed, TRACE_STREAM_SIZES);
    lg_ld_rng_init(&g->tokens, o->seed, TRACE_STREAM_TOKENS);
    lg_ld_rng_init(&g->groups, o->seed, TRACE_STREAM_GROUPS);
    if (o->prefix_groups > 0 && o->prefix_dist == LG_LD_DIST_ZIPF) {
        double sum = 0;

        g->zipf_cdf = lg_xmalloc(o->prefix_groups * sizeof(double));
        for (uint64_t i = 0; i < o->prefix_groups; i++) {
            sum += 1.0 / pow((double)(i + 1), o->zipf_s);
            g->zipf_cdf[i] = sum;
        }
        for (uint64_t i = 0; i < o->prefix_groups; i++) {
            g->zipf_cdf[i] /= sum;
        }
        g->zipf_cdf[o->prefix_groups - 1] = 1.0;
    }
}

void
lg_ld_gen_free(struct lg_ld_gen *g)
{
    free(g->zipf_cdf);
    g->zipf_cdf = NULL;
}

static int32_t
trace_group(struct lg_ld_gen *g)
{
    uint64_t n = g->o->prefix_groups;
    size_t lo = 0, hi;
    double u;

    if (n == 0) {
        return -1;
    }
    if (g->zipf_cdf == NULL) {
        return (int32_t)lg_ld_rng_range(&g->groups, 0, n - 1);
    }
    u = lg_ld_rng_unit(&g->groups);
    hi = n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (g->zipf_cdf[mid] >= u) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return (int32_t)lo;
}

void
lg_ld_gen_contents(struct lg_ld_gen *g, struct lg_ld_item *it)
{
    it->prompt_bytes = (uint32_t)lg_ld_spec_sample(&g->o->prompt_bytes, &g->sizes);
    it->max_tokens = (uint32_t)lg_ld_spec_sample(&g->o->max_tokens, &g->tokens);
    it->group = trace_group(g);
    it->api = -1;
    it->stream = -1;
    it->no_max_tokens = false;
    it->model = NULL;
    it->extra = NULL;
}

void
lg_ld_items_free(struct lg_ld_item *items, size_t n)
{
    for (size_t i = 0; items != NULL && i < n; i++) {
        free(items[i].model);
        free(items[i].extra);
    }
    free(items);
}

double
lg_ld_gen_arrival(struct lg_ld_gen *g)
{
    const struct lg_ld_opts *o = g->o;
    double e = -log(lg_ld_rng_unit(&g->arrivals)); /* unit-rate exponential */
    double t = g->t_s;

    if (!o->burst.enabled) {
        g->t_s = t + e / o->rate;
        return g->t_s;
    }
    /* Inhomogeneous Poisson process with a piecewise-constant rate: spend the
     * unit exponential across windows until one holds enough rate mass. */
    for (;;) {
        double period = o->burst.on_s + o->burst.off_s;
        double phase = fmod(t, period);
        bool on = phase < o->burst.on_s;
        double seg_end = t - phase + (on ? o->burst.on_s : period);
        double r = o->rate * (on ? o->burst.factor : lg_ld_burst_off_factor(&o->burst));
        double mass;

        if (seg_end <= t) {
            seg_end = nextafter(t, INFINITY);
        }
        mass = r * (seg_end - t);
        if (r > 0 && e <= mass) {
            t += e / r;
            break;
        }
        e -= mass;
        t = seg_end;
    }
    g->t_s = t;
    return t;
}

static int
trace_generate(const struct lg_ld_opts *o, struct lg_ld_item **items, size_t *n)
{
    struct lg_ld_gen g;
    size_t cap = 1024, count = 0;
    struct lg_ld_item *v = lg_xmalloc(cap * sizeof(*v));

    lg_ld_gen_init(&g, o);
    for (;;) {
        double t = lg_ld_gen_arrival(&g);
        struct lg_ld_item it;

        if ((o->duration_s > 0 && t >= o->duration_s) || (o->requests > 0 && count >= o->requests)
            || count >= LG_LD_MAX_TRACE_ITEMS) {
            break;
        }
        it.t_us = (uint64_t)(t * 1e6);
        lg_ld_gen_contents(&g, &it);
        if (count == cap) {
            cap *= 2;
            v = lg_xrealloc(v, cap * sizeof(*v));
        }
        v[count++] = it;
    }
    lg_ld_gen_free(&g);
    *items = v;
    *n = count;
    return LG_OK;
}

/* A member that must be an integer in [min, max] (absent: def, or an error
 * when def is below min). */
static int
trace_int(json_t *obj, const char *key, json_int_t min, json_int_t max, json_int_t def,
          json_int_t *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);

    if (v == NULL) {
        if (def < min) {
            snprintf(err, errlen, "missing \"%s\"", key);
            return LG_EINVAL;
        }
        *out = def;
        return LG_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        snprintf(err, errlen,
                 "\"%s\" must be an integer in [%" JSON_INTEGER_FORMAT ", %" JSON_INTEGER_FORMAT
                 "]",
                 key, min, max);
        return LG_EINVAL;
    }
    *out = json_integer_value(v);
    return LG_OK;
}

/* The optional members naming a request's own model, API, stream flag and
 * body members; absent or null, the command line's apply. */
static int
trace_own(json_t *obj, struct lg_ld_item *it, char *err, size_t errlen)
{
    static const char *const apis[] = { "chat", "completions", "embeddings" };
    json_t *model = json_object_get(obj, "model");
    json_t *api = json_object_get(obj, "api");
    json_t *stream = json_object_get(obj, "stream");
    json_t *extra = json_object_get(obj, "extra_body");

    if (model != NULL && !json_is_null(model)) {
        if (!json_is_string(model) || json_string_length(model) == 0
            || json_string_length(model) > 256) {
            snprintf(err, errlen, "\"model\" must be a string of 1 to 256 bytes");
            return LG_EINVAL;
        }
        it->model = json_dumps(model, JSON_ENCODE_ANY | JSON_ENSURE_ASCII);
    }
    if (api != NULL && !json_is_null(api)) {
        for (size_t i = 0; json_is_string(api) && i < LG_ARRAY_SIZE(apis); i++) {
            if (strcmp(json_string_value(api), apis[i]) == 0) {
                it->api = (int8_t)i;
            }
        }
        if (it->api < 0) {
            snprintf(err, errlen, "\"api\" must be \"chat\", \"completions\" or \"embeddings\"");
            return LG_EINVAL;
        }
    }
    if (stream != NULL && !json_is_null(stream)) {
        if (!json_is_boolean(stream)) {
            snprintf(err, errlen, "\"stream\" must be true or false");
            return LG_EINVAL;
        }
        it->stream = json_is_true(stream) ? 1 : 0;
    }
    if (extra != NULL && !json_is_null(extra)) {
        char *text;

        if (!json_is_object(extra)) {
            snprintf(err, errlen, "\"extra_body\" must be a JSON object");
            return LG_EINVAL;
        }
        text = json_dumps(extra, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (text != NULL && strlen(text) > 2) { /* the members, spliced into the body */
            it->extra = lg_xstrndup(text + 1, strlen(text) - 2);
        }
        free(text);
    }
    return LG_OK;
}

int
lg_ld_trace_parse_line(const char *line, size_t len, struct lg_ld_item *it, char *err,
                       size_t errlen)
{
    json_error_t jerr;
    json_t *j, *mtv;
    json_int_t t, pb, mt = 0, grp;
    size_t i = 0;
    int rc;

    memset(it, 0, sizeof(*it));
    it->api = -1;
    it->stream = -1;

    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) {
        i++;
    }
    if (i == len || line[i] == '#') {
        return LG_EAGAIN;
    }
    j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL) {
        snprintf(err, errlen, "not JSON: %s", jerr.text);
        return LG_EINVAL;
    }
    if (!json_is_object(j)) {
        snprintf(err, errlen, "not a JSON object");
        json_decref(j);
        return LG_EINVAL;
    }
    rc = trace_int(j, "t_us", 0, (json_int_t)1e15, -1, &t, err, errlen);
    if (rc == LG_OK) {
        rc = trace_int(j, "prompt_bytes", 0, LG_LD_MAX_PROMPT_BYTES, -1, &pb, err, errlen);
    }
    mtv = json_object_get(j, "max_tokens");
    it->no_max_tokens = mtv != NULL && json_is_null(mtv); /* null: the body has none */
    if (rc == LG_OK && !it->no_max_tokens) {
        rc = trace_int(j, "max_tokens", 0, LG_LD_MAX_TOKENS, -1, &mt, err, errlen);
    }
    if (rc == LG_OK) {
        rc = trace_int(j, "group", -1, LG_LD_MAX_GROUPS - 1, -1, &grp, err, errlen);
    }
    if (rc == LG_OK) {
        rc = trace_own(j, it, err, errlen);
    }
    json_decref(j);
    if (rc != LG_OK) {
        free(it->model);
        free(it->extra);
        it->model = it->extra = NULL;
        return rc;
    }
    it->t_us = (uint64_t)t;
    it->prompt_bytes = (uint32_t)pb;
    it->max_tokens = (uint32_t)mt;
    it->group = (int32_t)grp;
    return LG_OK;
}

static int
trace_read(const struct lg_ld_opts *o, struct lg_ld_item **items, size_t *n, char *err,
           size_t errlen)
{
    FILE *f = fopen(o->trace_in, "r");
    char *line = NULL, msg[256];
    size_t line_cap = 0, cap = 1024, count = 0, lineno = 0;
    struct lg_ld_item *v;
    ssize_t len;
    int rc = LG_OK;

    if (f == NULL) {
        snprintf(err, errlen, "--trace-in %s: %s", o->trace_in, strerror(errno));
        return LG_ERR;
    }
    v = lg_xmalloc(cap * sizeof(*v));
    while ((len = getline(&line, &line_cap, f)) >= 0) {
        struct lg_ld_item it;
        int prc;

        lineno++;
        prc = lg_ld_trace_parse_line(line, (size_t)len, &it, msg, sizeof(msg));
        if (prc == LG_EAGAIN) {
            continue;
        }
        if (prc == LG_OK && count > 0 && it.t_us < v[count - 1].t_us) {
            free(it.model);
            free(it.extra);
            snprintf(msg, sizeof(msg), "t_us goes backwards");
            prc = LG_EINVAL;
        }
        if (prc != LG_OK) {
            snprintf(err, errlen, "%s:%zu: %s", o->trace_in, lineno, msg);
            rc = LG_EINVAL;
            goto out_free;
        }
        if ((o->duration_s > 0 && (double)it.t_us >= o->duration_s * 1e6)
            || (o->requests > 0 && count >= o->requests)) {
            free(it.model);
            free(it.extra);
            break;
        }
        if (count == LG_LD_MAX_TRACE_ITEMS) {
            free(it.model);
            free(it.extra);
            snprintf(err, errlen, "%s: more than %u requests", o->trace_in, LG_LD_MAX_TRACE_ITEMS);
            rc = LG_EINVAL;
            goto out_free;
        }
        if (count == cap) {
            cap *= 2;
            v = lg_xrealloc(v, cap * sizeof(*v));
        }
        v[count++] = it;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "--trace-in %s: read error", o->trace_in);
        rc = LG_ERR;
    }
out_free:
    free(line);
    fclose(f);
    if (rc != LG_OK) {
        lg_ld_items_free(v, count);
        return rc;
    }
    *items = v;
    *n = count;
    return LG_OK;
}

int
lg_ld_trace_build(const struct lg_ld_opts *o, struct lg_ld_item **items, size_t *n, char *err,
                  size_t errlen)
{
    *items = NULL;
    *n = 0;
    if (o->mode == LG_LD_MODE_REPLAY) {
        return trace_read(o, items, n, err, errlen);
    }
    if (o->mode == LG_LD_MODE_OPEN) {
        return trace_generate(o, items, n);
    }
    return LG_OK;
}

int
lg_ld_trace_write(const char *path, const struct lg_ld_item *items, size_t n)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        LG_ERROR("--trace-out %s: %s", path, strerror(errno));
        return LG_ERR;
    }
    for (size_t i = 0; i < n; i++) {
        static const char *const apis[] = { "chat", "completions", "embeddings" };
        const struct lg_ld_item *it = &items[i];

        fprintf(f, "{\"t_us\":%" PRIu64 ",\"prompt_bytes\":%" PRIu32, it->t_us, it->prompt_bytes);
        if (it->no_max_tokens) {
            fprintf(f, ",\"max_tokens\":null");
        } else {
            fprintf(f, ",\"max_tokens\":%" PRIu32, it->max_tokens);
        }
        fprintf(f, ",\"group\":%" PRId32, it->group);
        /* a replayed trace's own members, as it had them */
        if (it->model != NULL) {
            fprintf(f, ",\"model\":%s", it->model);
        }
        if (it->api >= 0) {
            fprintf(f, ",\"api\":\"%s\"", apis[it->api]);
        }
        if (it->stream >= 0) {
            fprintf(f, ",\"stream\":%s", it->stream ? "true" : "false");
        }
        if (it->extra != NULL) {
            fprintf(f, ",\"extra_body\":{%s}", it->extra);
        }
        fprintf(f, "}\n");
    }
    if (fclose(f) != 0) {
        LG_ERROR("--trace-out %s: %s", path, strerror(errno));
        return LG_ERR;
    }
    return LG_OK;
}
