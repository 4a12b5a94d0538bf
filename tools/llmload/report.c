/*
 * report.c: what a finished run says: the JSON summary (--json), one JSON
 * line per request (--log) and the human table on stdout.
 * Owns: the sample arrays it sorts, for the duration of a call.
 * Which requests feed which numbers: ttft and ttft_send cover every request
 * that received a first content event (a stream cut later still had one);
 * e2e covers successful requests; itl covers every gap between two content
 * events; tokens count usage.completion_tokens when sent, else content events.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "llmload.h"

const char *
lg_ld_err_name(enum lg_ld_err e)
{
    static const char *const names[] = { "none", "connect", "status", "cut", "timeout", "invalid" };

    return e < LG_LD_ERR_COUNT ? names[e] : "?";
}

struct report_dist {
    size_t n;
    double p50, p90, p99, max, mean;
};

struct report {
    size_t requests;
    size_t ok;
    size_t errors[LG_LD_ERR_COUNT];
    uint64_t status_codes[1000];
    uint64_t tokens;
    uint64_t *per_replica; /* owned */
    double duration_s;
    struct report_dist ttft, ttft_send, e2e, lag;
    double itl_mean, itl_p50, itl_p90, itl_p99, itl_max;
};

static uint64_t
report_tokens(const struct lg_ld_rec *r)
{
    return r->usage_tokens >= 0 ? (uint64_t)r->usage_tokens : r->events;
}

/* b - a in ns, never negative: stamps from different clocks paths (kernel
 * receive time, user-space send time) may be out of order by a few us. */
static uint64_t
report_span(uint64_t a, uint64_t b)
{
    return b > a ? b - a : 0;
}

static void
report_dist(double *v, size_t n, struct report_dist *d)
{
    double sum = 0;

    memset(d, 0, sizeof(*d));
    d->n = n;
    if (n == 0) {
        return;
    }
    lg_ld_sort(v, n);
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
    }
    d->p50 = lg_ld_percentile(v, n, 50);
    d->p90 = lg_ld_percentile(v, n, 90);
    d->p99 = lg_ld_percentile(v, n, 99);
    d->max = v[n - 1];
    d->mean = sum / (double)n;
}

static void
report_compute(const struct lg_ld_result *res, struct report *rp)
{
    size_t n = res->n;
    double *ttft = lg_xmalloc((n + 1) * sizeof(double));
    double *ttft_send = lg_xmalloc((n + 1) * sizeof(double));
    double *e2e = lg_xmalloc((n + 1) * sizeof(double));
    double *lag = lg_xmalloc((n + 1) * sizeof(double));
    size_t nt = 0, nts = 0, ne = 0, nl = 0;
    const struct lg_ld_hist *h = res->itl;

    memset(rp, 0, sizeof(*rp));
    rp->per_replica = lg_xcalloc(res->n_replicas + 1, sizeof(uint64_t));
    for (size_t i = 0; i < n; i++) {
        const struct lg_ld_rec *r = &res->recs[i];

        if (!(r->flags & LG_LD_REC_F_DONE)) {
            continue;
        }
        rp->requests++;
        rp->errors[r->error]++;
        if (r->error == LG_LD_ERR_NONE) {
            rp->ok++;
            e2e[ne++] = (double)report_span(r->t_sched_ns, r->t_end_ns) / 1e6;
        }
        if (r->status != 0 && r->status != 200 && r->status < 1000) {
            rp->status_codes[r->status]++;
        }
        if (r->replica > 0) {
            rp->per_replica[r->replica - 1]++;
        }
        rp->tokens += report_tokens(r);
        if (r->flags & LG_LD_REC_F_FIRST) {
            ttft[nt++] = (double)report_span(r->t_sched_ns, r->t_first_ns) / 1e6;
            if (r->flags & LG_LD_REC_F_SENT) {
                ttft_send[nts++] = (double)report_span(r->t_send_ns, r->t_first_ns) / 1e6;
            }
        }
        if (r->flags & LG_LD_REC_F_LAUNCHED) {
            lag[nl++] = (double)report_span(r->t_sched_ns, r->t_start_ns) / 1e6;
        }
    }
    report_dist(ttft, nt, &rp->ttft);
    report_dist(ttft_send, nts, &rp->ttft_send);
    report_dist(e2e, ne, &rp->e2e);
    report_dist(lag, nl, &rp->lag);
    free(ttft);
    free(ttft_send);
    free(e2e);
    free(lag);
    rp->duration_s = (double)res->elapsed_ns / 1e9;
    if (h->count > 0) {
        rp->itl_mean = (double)h->sum / (double)h->count / 1e6;
        rp->itl_p50 = (double)lg_ld_hist_percentile(h, 50) / 1e6;
        rp->itl_p90 = (double)lg_ld_hist_percentile(h, 90) / 1e6;
        rp->itl_p99 = (double)lg_ld_hist_percentile(h, 99) / 1e6;
        rp->itl_max = (double)h->max / 1e6;
    }
}

static double
report_rate(double count, double s)
{
    return s > 0 ? count / s : 0;
}

/* Rounded to 0.1 us (or its equivalent) so the file stays readable. */
static json_t *
report_real(double v)
{
    return json_real(round(v * 1e4) / 1e4);
}

/* A JSON number, or null when there were no samples. */
static json_t *
report_num(bool have, double v)
{
    return have ? report_real(v) : json_null();
}

static json_t *
report_dist_json(const struct report_dist *d)
{
    bool have = d->n > 0;

    return json_pack("{s:o,s:o,s:o,s:o,s:o,s:I}", "p50", report_num(have, d->p50), "p90",
                     report_num(have, d->p90), "p99", report_num(have, d->p99), "max",
                     report_num(have, d->max), "mean", report_num(have, d->mean), "count",
                     (json_int_t)d->n);
}

static json_t *
report_config(const struct lg_ld_opts *o)
{
    json_t *c = json_object();
    json_t *hdrs = json_array();

    json_object_set_new(c, "url", json_string(o->url ? o->url : ""));
    json_object_set_new(c, "path", json_string(o->path));
    json_object_set_new(c, "model", o->model ? json_string(o->model) : json_null());
    json_object_set_new(c, "api", json_string(lg_ld_api_name(o->api)));
    json_object_set_new(c, "mode", json_string(lg_ld_mode_name(o->mode)));
    json_object_set_new(c, "rate", o->mode == LG_LD_MODE_OPEN ? json_real(o->rate) : json_null());
    json_object_set_new(c, "duration_s",
                        o->duration_s > 0 ? json_real(o->duration_s) : json_null());
    json_object_set_new(c, "concurrency",
                        o->mode == LG_LD_MODE_CLOSED ? json_integer((json_int_t)o->concurrency)
                                                     : json_null());
    json_object_set_new(c, "requests",
                        o->requests > 0 ? json_integer((json_int_t)o->requests) : json_null());
    json_object_set_new(c, "stream", json_boolean(o->stream));
    json_object_set_new(c, "include_usage", json_boolean(o->include_usage));
    json_object_set_new(c, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(c, "prompt_bytes", json_string(o->prompt_spec));
    json_object_set_new(c, "max_tokens", json_string(o->max_tokens_spec));
    json_object_set_new(c, "prefix_groups", json_integer((json_int_t)o->prefix_groups));
    json_object_set_new(c, "prefix_bytes", json_integer((json_int_t)o->prefix_bytes));
    json_object_set_new(c, "prefix_dist",
                        json_string(o->prefix_dist == LG_LD_DIST_ZIPF ? "zipf" : "uniform"));
    json_object_set_new(c, "zipf_s", json_real(o->zipf_s));
    json_object_set_new(c, "burst", o->burst_spec ? json_string(o->burst_spec) : json_null());
    json_object_set_new(c, "trace_in", o->trace_in ? json_string(o->trace_in) : json_null());
    json_object_set_new(c, "timeout_s", json_real(o->timeout_s));
    json_object_set_new(c, "connect_timeout_s", json_real(o->connect_timeout_s));
    json_object_set_new(c, "connections_reuse", json_boolean(o->reuse));
    json_object_set_new(c, "max_connections", json_integer((json_int_t)o->max_conns));
    json_object_set_new(c, "replica_header", json_string(o->replica_header));
    json_object_set_new(c, "realtime", json_boolean(o->realtime));
    for (size_t i = 0; i < o->n_headers; i++) {
        /* Values may be credentials: keep the names only. */
        const char *colon = strchr(o->headers[i], ':');

        json_array_append_new(hdrs, json_stringn(o->headers[i], (size_t)(colon - o->headers[i])));
    }
    json_object_set_new(c, "headers", hdrs);
    return c;
}

int
lg_ld_report_json(const struct lg_ld_result *res, const char *path)
{
    struct report rp;
    json_t *j, *errs, *codes, *reps;
    int rc = LG_OK;

    report_compute(res, &rp);
    errs = json_object();
    for (int e = LG_LD_ERR_CONNECT; e < LG_LD_ERR_COUNT; e++) {
        json_object_set_new(errs, lg_ld_err_name((enum lg_ld_err)e),
                            json_integer((json_int_t)rp.errors[e]));
    }
    codes = json_object();
    for (int s = 0; s < 1000; s++) {
        if (rp.status_codes[s] > 0) {
            char k[8];

            snprintf(k, sizeof(k), "%d", s);
            json_object_set_new(codes, k, json_integer((json_int_t)rp.status_codes[s]));
        }
    }
    reps = json_object();
    for (size_t i = 0; i < res->n_replicas; i++) {
        json_object_set_new(reps, res->replicas[i], json_integer((json_int_t)rp.per_replica[i]));
    }
    j = json_object();
    json_object_set_new(j, "requests", json_integer((json_int_t)rp.requests));
    json_object_set_new(j, "ok", json_integer((json_int_t)rp.ok));
    json_object_set_new(j, "errors", errs);
    json_object_set_new(j, "status_codes", codes);
    json_object_set_new(j, "start_unix_ns", json_integer((json_int_t)res->start_wall_ns));
    json_object_set_new(j, "duration_s", report_real(rp.duration_s));
    json_object_set_new(j, "rps", report_real(report_rate((double)rp.requests, rp.duration_s)));
    json_object_set_new(j, "ok_rps", report_real(report_rate((double)rp.ok, rp.duration_s)));
    json_object_set_new(j, "tokens", json_integer((json_int_t)rp.tokens));
    json_object_set_new(j, "tokens_per_s",
                        report_real(report_rate((double)rp.tokens, rp.duration_s)));
    json_object_set_new(j, "ttft_ms", report_dist_json(&rp.ttft));
    json_object_set_new(j, "ttft_send_ms", report_dist_json(&rp.ttft_send));
    json_object_set_new(j, "e2e_ms", report_dist_json(&rp.e2e));
    json_object_set_new(j, "itl_ms",
                        json_pack("{s:o,s:o,s:o,s:o,s:o,s:I}", "mean",
                                  report_num(res->itl->count > 0, rp.itl_mean), "p50",
                                  report_num(res->itl->count > 0, rp.itl_p50), "p90",
                                  report_num(res->itl->count > 0, rp.itl_p90), "p99",
                                  report_num(res->itl->count > 0, rp.itl_p99), "max",
                                  report_num(res->itl->count > 0, rp.itl_max), "count",
                                  (json_int_t)res->itl->count));
    json_object_set_new(j, "sched_lag_ms", report_dist_json(&rp.lag));
    json_object_set_new(j, "replicas", reps);
    json_object_set_new(j, "interrupted", json_boolean(res->interrupted));
    json_object_set_new(j, "config", report_config(res->o));
    if (json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12))
        != 0) {
        LG_ERROR("--json %s: cannot write", path);
        rc = LG_ERR;
    }
    json_decref(j);
    free(rp.per_replica);
    return rc;
}

/* Replica names were made printable ASCII when recorded; escape for JSON. */
static void
report_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') {
            fputc('\\', f);
        }
        fputc(*s, f);
    }
    fputc('"', f);
}

static void
report_ms(FILE *f, const char *key, bool have, uint64_t ns)
{
    if (have) {
        fprintf(f, ",\"%s\":%.3f", key, (double)ns / 1e6);
    } else {
        fprintf(f, ",\"%s\":null", key);
    }
}

int
lg_ld_report_log(const struct lg_ld_result *res, const char *path)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        LG_ERROR("--log %s: %s", path, strerror(errno));
        return LG_ERR;
    }
    for (size_t i = 0; i < res->n; i++) {
        const struct lg_ld_rec *r = &res->recs[i];
        bool sent = r->flags & LG_LD_REC_F_SENT, first = r->flags & LG_LD_REC_F_FIRST;

        if (!(r->flags & LG_LD_REC_F_DONE)) {
            continue;
        }
        fprintf(f, "{\"i\":%zu,\"t_sched_ms\":%.3f", i, (double)r->t_sched_ns / 1e6);
        report_ms(f, "t_send_ms", sent, r->t_send_ns);
        report_ms(f, "ttft_ms", first, report_span(r->t_sched_ns, r->t_first_ns));
        report_ms(f, "ttft_send_ms", first && sent, report_span(r->t_send_ns, r->t_first_ns));
        report_ms(f, "e2e_ms", true, report_span(r->t_sched_ns, r->t_end_ns));
        fprintf(f, ",\"tokens\":%" PRIu64, report_tokens(r));
        if (r->status != 0) {
            fprintf(f, ",\"status\":%u", r->status);
        } else {
            fputs(",\"status\":null", f);
        }
        if (r->error != LG_LD_ERR_NONE) {
            fprintf(f, ",\"error\":\"%s\"", lg_ld_err_name((enum lg_ld_err)r->error));
        } else {
            fputs(",\"error\":null", f);
        }
        fputs(",\"replica\":", f);
        if (r->replica > 0) {
            report_json_str(f, res->replicas[r->replica - 1]);
        } else {
            fputs("null", f);
        }
        fprintf(f, ",\"prompt_bytes\":%" PRIu32 ",\"max_tokens\":%" PRIu32, r->prompt_bytes,
                r->max_tokens);
        if (r->group >= 0) {
            fprintf(f, ",\"group\":%" PRId32, r->group);
        } else {
            fputs(",\"group\":null", f);
        }
        report_ms(f, "itl_mean_ms", r->itl_n > 0, r->itl_n ? r->itl_sum_ns / r->itl_n : 0);
        report_ms(f, "itl_max_ms", r->itl_n > 0, r->itl_max_ns);
        fputs("}\n", f);
    }
    if (fclose(f) != 0) {
        LG_ERROR("--log %s: %s", path, strerror(errno));
        return LG_ERR;
    }
    return LG_OK;
}

static void
report_row(FILE *f, const char *name, const struct report_dist *d)
{
    if (d->n == 0) {
        fprintf(f, "  %-10s %10s %10s %10s %10s %10s %8s\n", name, "-", "-", "-", "-", "-", "0");
        return;
    }
    fprintf(f, "  %-10s %10.3f %10.3f %10.3f %10.3f %10.3f %8zu\n", name, d->p50, d->p90, d->p99,
            d->max, d->mean, d->n);
}

void
lg_ld_report_table(const struct lg_ld_result *res, FILE *f)
{
    const struct lg_ld_opts *o = res->o;
    struct report rp;
    bool any_code = false;

    report_compute(res, &rp);
    fprintf(f, "llmload: %zu requests in %.3f s (%s loop", rp.requests, rp.duration_s,
            o->mode == LG_LD_MODE_CLOSED ? "closed" : "open");
    if (o->mode == LG_LD_MODE_OPEN) {
        fprintf(f, ", rate %g/s%s%s", o->rate, o->burst.enabled ? ", burst " : "",
                o->burst.enabled ? o->burst_spec : "");
    } else if (o->mode == LG_LD_MODE_CLOSED) {
        fprintf(f, ", concurrency %" PRIu64, o->concurrency);
    } else {
        fprintf(f, ", trace %s", o->trace_in);
    }
    fprintf(f, ", %s, %s)%s\n", lg_ld_api_name(o->api), o->stream ? "stream" : "no stream",
            res->interrupted ? " INTERRUPTED" : "");
    fprintf(f, "  ok %zu   errors: connect %zu  status %zu  cut %zu  timeout %zu  invalid %zu",
            rp.ok, rp.errors[LG_LD_ERR_CONNECT], rp.errors[LG_LD_ERR_STATUS],
            rp.errors[LG_LD_ERR_CUT], rp.errors[LG_LD_ERR_TIMEOUT], rp.errors[LG_LD_ERR_INVALID]);
    for (int s = 0; s < 1000; s++) {
        if (rp.status_codes[s] > 0) {
            fprintf(f, "%s%d:%" PRIu64, any_code ? " " : "  [", s, rp.status_codes[s]);
            any_code = true;
        }
    }
    fprintf(f, "%s\n", any_code ? "]" : "");
    fprintf(f, "  achieved %.1f req/s (ok %.1f), %.1f tokens/s, %" PRIu64 " tokens\n",
            report_rate((double)rp.requests, rp.duration_s),
            report_rate((double)rp.ok, rp.duration_s),
            report_rate((double)rp.tokens, rp.duration_s), rp.tokens);
    fprintf(f, "  %-10s %10s %10s %10s %10s %10s %8s\n", "(ms)", "p50", "p90", "p99", "max", "mean",
            "n");
    report_row(f, "ttft", &rp.ttft);
    report_row(f, "ttft_send", &rp.ttft_send);
    report_row(f, "e2e", &rp.e2e);
    report_row(f, "sched_lag", &rp.lag);
    if (res->itl->count > 0) {
        fprintf(f, "  %-10s %10.3f %10.3f %10.3f %10.3f %10.3f %8" PRIu64 "\n", "itl", rp.itl_p50,
                rp.itl_p90, rp.itl_p99, rp.itl_max, rp.itl_mean, res->itl->count);
    } else {
        fprintf(f, "  %-10s %10s %10s %10s %10s %10s %8s\n", "itl", "-", "-", "-", "-", "-", "0");
    }
    if (res->n_replicas > 0) {
        fputs("  replicas:", f);
        for (size_t i = 0; i < res->n_replicas; i++) {
            fprintf(f, " %s=%" PRIu64, res->replicas[i], rp.per_replica[i]);
        }
        fputc('\n', f);
    }
    free(rp.per_replica);
}
