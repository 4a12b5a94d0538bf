/*
 * loadreport.c: engines' load reports, per response (vLLM's
 * endpoint-load-metrics header) or on demand (vLLM's GET /load, SGLang's
 * GET /v1/loads), read into struct lg_load_report (loadreport.h).
 *
 * Owns nothing: pure functions over the caller's bytes.
 */
#include "fleet/loadreport.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void
load_report_clear(struct lg_load_report *r)
{
    r->waiting = -1;
    r->running = -1;
    r->total = -1;
    r->kv_usage = -1;
    r->slots = -1;
    r->tokens_per_s = -1;
}

/* A count or rate as an engine writes it: finite, at least 0, bounded. */
static bool
load_report_number(double v, double max)
{
    return isfinite(v) && v >= 0 && v <= max;
}

#define LOAD_REPORT_MAX_COUNT 1e7

/* One named metric of vLLM's header (orca_metrics.py's names). */
static bool
load_report_named(struct lg_load_report *r, const char *name, size_t n, double v)
{
    if (lg_str_ieq(name, n, "num_requests_waiting") && load_report_number(v, LOAD_REPORT_MAX_COUNT)) {
        r->waiting = v;
        return true;
    }
    if (lg_str_ieq(name, n, "num_requests_running") && load_report_number(v, LOAD_REPORT_MAX_COUNT)) {
        r->running = v;
        return true;
    }
    if ((lg_str_ieq(name, n, "kv_cache_usage_perc") || lg_str_ieq(name, n, "gpu_cache_usage_perc"))
        && load_report_number(v, 1.0)) {
        r->kv_usage = v;
        return true;
    }
    return false;
}

/* TEXT named_metrics.NAME=VALUE, named_metrics.NAME=VALUE... */
static int
load_report_text(const char *s, size_t len, struct lg_load_report *r)
{
    static const char prefix[] = "named_metrics.";
    size_t i = 0;
    bool any = false;

    while (i < len) {
        size_t name_at, name_len, val_at;
        char num[64];
        char *end;
        double v;

        while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == ',')) {
            i++;
        }
        if (i >= len) {
            break;
        }
        name_at = i;
        while (i < len && s[i] != '=' && s[i] != ',') {
            i++;
        }
        if (i >= len || s[i] != '=') {
            continue; /* a field without a value: skipped */
        }
        name_len = i - name_at;
        val_at = ++i;
        while (i < len && s[i] != ',' && s[i] != ' ' && s[i] != '\t') {
            i++;
        }
        if (i - val_at == 0 || i - val_at >= sizeof(num)) {
            continue;
        }
        memcpy(num, s + val_at, i - val_at);
        num[i - val_at] = '\0';
        v = strtod(num, &end);
        if (*end != '\0') {
            continue;
        }
        if (name_len > sizeof(prefix) - 1 && memcmp(s + name_at, prefix, sizeof(prefix) - 1) == 0) {
            any |= load_report_named(r, s + name_at + sizeof(prefix) - 1,
                                     name_len - (sizeof(prefix) - 1), v);
        }
    }
    return any ? LG_OK : LG_EINVAL;
}

/* JSON {"named_metrics": {NAME: VALUE...}} */
static int
load_report_json_header(const char *s, size_t len, struct lg_load_report *r)
{
    json_t *root = json_loadb(s, len, JSON_DECODE_ANY, NULL);
    json_t *named = root ? json_object_get(root, "named_metrics") : NULL;
    const char *key;
    json_t *val;
    bool any = false;

    if (json_is_object(named)) {
        json_object_foreach (named, key, val) {
            if (json_is_number(val)) {
                any |= load_report_named(r, key, strlen(key), json_number_value(val));
            }
        }
    }
    json_decref(root);
    return any ? LG_OK : LG_EINVAL;
}

int
lg_load_report_header_parse(const char *s, size_t len, struct lg_load_report *out)
{
    struct lg_load_report r;
    int rc = LG_EINVAL;

    load_report_clear(&r);
    load_report_clear(out);
    if (s == NULL || len > LG_LOAD_REPORT_MAX_BYTES) {
        return LG_EINVAL;
    }
    while (len > 0 && (*s == ' ' || *s == '\t')) {
        s++;
        len--;
    }
    /* the format's name, in any case, then one space */
    if (len >= 5 && lg_str_ieq(s, 4, "text") && (s[4] == ' ' || s[4] == '\t')) {
        rc = load_report_text(s + 5, len - 5, &r);
    } else if (len >= 5 && lg_str_ieq(s, 4, "json") && (s[4] == ' ' || s[4] == '\t')) {
        rc = load_report_json_header(s + 5, len - 5, &r);
    }
    if (rc == LG_OK) {
        *out = r;
    }
    return rc;
}

static double
load_report_get(const json_t *o, const char *key, double max)
{
    const json_t *v = json_object_get(o, key);

    if (!json_is_number(v) || !load_report_number(json_number_value(v), max)) {
        return -1;
    }
    return json_number_value(v);
}

/* SGLang's /v1/loads: the aggregate, and the slots summed over the ranks. */
static int
load_report_sglang(const json_t *root, struct lg_load_report *r)
{
    const json_t *agg = json_object_get(root, "aggregate");
    const json_t *loads = json_object_get(root, "loads");
    double slots = 0;
    size_t i;
    const json_t *one;

    if (!json_is_object(agg)) {
        return LG_EINVAL;
    }
    r->running = load_report_get(agg, "total_running_reqs", LOAD_REPORT_MAX_COUNT);
    r->waiting = load_report_get(agg, "total_waiting_reqs", LOAD_REPORT_MAX_COUNT);
    r->kv_usage = load_report_get(agg, "avg_token_usage", 1.0);
    if (json_is_array(loads)) {
        double tps = 0;
        bool tps_known = true;

        json_array_foreach (loads, i, one) {
            double m = load_report_get(one, "max_running_requests", LOAD_REPORT_MAX_COUNT);
            double g = load_report_get(one, "gen_throughput", 1e9);

            slots = m > 0 && slots >= 0 ? slots + m : -1;
            tps_known = tps_known && g >= 0;
            tps += g;
        }
        r->slots = json_array_size(loads) > 0 && slots > 0 ? slots : -1;
        r->tokens_per_s = json_array_size(loads) > 0 && tps_known ? tps : -1;
    }
    if (r->tokens_per_s < 0) {
        double avg = load_report_get(agg, "avg_throughput", 1e9);

        r->tokens_per_s = avg;
    }
    return r->running >= 0 || r->waiting >= 0 ? LG_OK : LG_EINVAL;
}

int
lg_load_report_body_parse(const char *s, size_t len, struct lg_load_report *out)
{
    struct lg_load_report r;
    json_t *root;
    int rc = LG_EINVAL;

    load_report_clear(&r);
    load_report_clear(out);
    if (s == NULL || len > LG_LOAD_REPORT_MAX_BYTES) {
        return LG_EINVAL;
    }
    root = json_loadb(s, len, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return LG_EINVAL;
    }
    if (json_object_get(root, "server_load") != NULL) {
        r.total = load_report_get(root, "server_load", LOAD_REPORT_MAX_COUNT);
        rc = r.total >= 0 ? LG_OK : LG_EINVAL;
    } else {
        rc = load_report_sglang(root, &r);
    }
    json_decref(root);
    if (rc == LG_OK) {
        *out = r;
    }
    return rc;
}
