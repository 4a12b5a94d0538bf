/*
 * metrics.c: Prometheus text exposition (see metrics.h).
 *
 * Owns nothing. Borrows: the gateway, and the current fleet through a
 * reference held for one rendering.
 * Invariants: reads only (relaxed atomics and published copies); every
 * family's HELP and TYPE come once, before all of its samples; names follow
 * Prometheus conventions (llmgate_ prefix, base units, _total for counters).
 */
#include "ops/metrics.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "base/accesslog.h"
#include "base/config.h"
#include "base/otlp.h"
#include "base/stats.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "lg_version.h"
#include "ops/livestate.h"
#include "ops/reload.h"
#include "serve/admission.h"
#include "serve/wakeup.h"
#include "serve/worker.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

static const char *const metrics_classes[LG_BACKEND_NCLASS] = { "none", "1xx", "2xx",
                                                                "3xx",  "4xx", "5xx" };

static void
mx_family(struct evbuffer *out, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The span exporter's counts (tracing on only). */
static void
mx_tracing(struct evbuffer *out, struct lg_gateway *gw)
{
    struct lg_otlp_stats st;

    lg_otlp_get_stats(gw->tracer, &st);
    mx_family(out, "llmgate_trace_spans_total", "counter",
              "Spans by outcome: queued for export, dropped (the export queue was full), "
              "exported (the collector took them), failed (their export failed).");
    evbuffer_add_printf(out,
                        "llmgate_trace_spans_total{outcome=\"queued\"} %" PRIu64 "\n"
                        "llmgate_trace_spans_total{outcome=\"dropped\"} %" PRIu64 "\n"
                        "llmgate_trace_spans_total{outcome=\"exported\"} %" PRIu64 "\n"
                        "llmgate_trace_spans_total{outcome=\"failed\"} %" PRIu64 "\n",
                        st.submitted, st.dropped, st.exported, st.failed);
    mx_family(out, "llmgate_trace_exports_total", "counter",
              "Exports to the collector tried (one POST each).");
    evbuffer_add_printf(out, "llmgate_trace_exports_total %" PRIu64 "\n", st.exports);
    mx_family(out, "llmgate_trace_queue_spans", "gauge", "Spans waiting for export.");
    evbuffer_add_printf(out, "llmgate_trace_queue_spans %u\n", st.queued);
}

/* A label value, escaped as the text format wants (backslash, quote, newline). */
static void
mx_value(struct evbuffer *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"') {
            evbuffer_add_printf(out, "\\%c", *s);
        } else if (*s == '\n') {
            evbuffer_add(out, "\\n", 2);
        } else {
            evbuffer_add(out, s, 1);
        }
    }
}

static void
mx_backend_u64(struct evbuffer *out, const char *name, const struct lg_backend *b, uint64_t v)
{
    evbuffer_add_printf(out, "%s{backend=\"", name);
    mx_value(out, b->name);
    evbuffer_add_printf(out, "\"} %" PRIu64 "\n", v);
}

static void
mx_double(struct evbuffer *out, double v)
{
    char buf[64];

    /* whole numbers as integers (le="10", never "1e+01"); others as the shortest %g
     * that reads back as the same double: 0.025, not 0.025000000000000001 */
    if (v == (double)(long long)v && v > -1e15 && v < 1e15) {
        evbuffer_add_printf(out, "%lld", (long long)v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof(buf), "%.*g", prec, v);
        if (strtod(buf, NULL) == v) {
            break;
        }
    }
    evbuffer_add_printf(out, "%s", buf);
}

/* A family with one sample and no label. */
static void
mx_scalar(struct evbuffer *out, const char *name, const char *type, const char *help, double v)
{
    mx_family(out, name, type, help);
    evbuffer_add_printf(out, "%s ", name);
    mx_double(out, v);
    evbuffer_add(out, "\n", 1);
}

/* The per-backend samples of a histogram family. */
static void
mx_histogram(struct evbuffer *out, const char *name, const struct lg_backend *b,
             const struct lg_hist *h, const double *bounds)
{
    uint64_t cum = 0;
    uint64_t count = LOAD(&h->count);

    for (int i = 0; i <= LG_HIST_NBUCKETS; i++) {
        cum += LOAD(&h->buckets[i]);
        evbuffer_add_printf(out, "%s_bucket{backend=\"", name);
        mx_value(out, b->name);
        evbuffer_add_printf(out, "\",le=\"");
        if (i < LG_HIST_NBUCKETS) {
            mx_double(out, bounds[i]);
        } else {
            evbuffer_add_printf(out, "+Inf");
            /* count is added last by the writer: the +Inf bucket must not exceed it */
            cum = LG_MAX(cum, count);
            count = cum;
        }
        evbuffer_add_printf(out, "\"} %" PRIu64 "\n", cum);
    }
    evbuffer_add_printf(out, "%s_sum{backend=\"", name);
    mx_value(out, b->name);
    evbuffer_add_printf(out, "\"} ");
    mx_double(out, (double)LOAD(&h->sum_us) / 1e6);
    evbuffer_add_printf(out, "\n%s_count{backend=\"", name);
    mx_value(out, b->name);
    evbuffer_add_printf(out, "\"} %" PRIu64 "\n", count);
}

/* ---- process --------------------------------------------------------------------- */

static void
mx_process(struct evbuffer *out)
{
    char buf[1024];
    unsigned long long utime = 0;
    unsigned long long stime = 0;
    unsigned long long start = 0;
    unsigned long long btime = 0;
    long rss_pages = 0;
    long tick = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    unsigned fds = 0;
    FILE *f;
    DIR *dir;

    f = fopen("/proc/self/stat", "r");
    if (f != NULL && fgets(buf, sizeof(buf), f) != NULL) {
        const char *p = strrchr(buf, ')'); /* the command name may hold spaces */

        if (p == NULL
            || sscanf(p + 2,
                      "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
                      "%*d %*d %llu %*u %ld",
                      &utime, &stime, &start, &rss_pages)
                   != 4) {
            utime = stime = start = 0;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    f = fopen("/proc/stat", "r");
    while (f != NULL && fgets(buf, sizeof(buf), f) != NULL) {
        if (sscanf(buf, "btime %llu", &btime) == 1) {
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    dir = opendir("/proc/self/fd");
    while (dir != NULL && readdir(dir) != NULL) {
        fds++;
    }
    if (dir != NULL) {
        closedir(dir);
        fds = fds > 3 ? fds - 3 : 0; /* ".", ".." and the directory's own fd */
    }
    if (tick <= 0) {
        tick = 100;
    }
    mx_scalar(out, "process_cpu_seconds_total", "counter", "User and system CPU time spent.",
              (double)(utime + stime) / (double)tick);
    mx_scalar(out, "process_start_time_seconds", "gauge",
              "Start time of the process since the Unix epoch.",
              (double)btime + (double)start / (double)tick);
    mx_scalar(out, "process_resident_memory_bytes", "gauge", "Resident memory size.",
              (double)rss_pages * (double)page);
    mx_scalar(out, "process_open_fds", "gauge", "Open file descriptors.", fds);
}

/* ---- the gateway ------------------------------------------------------------------- */

static void
mx_requests(struct evbuffer *out, const struct lg_gateway *gw)
{
    mx_family(out, "llmgate_requests_total", "counter",
              "Requests answered, by route and HTTP status sent to the client (499: the "
              "client left first).");
    for (int r = 0; r < LG_STATS_NROUTES; r++) {
        for (int k = 0; k < LG_STATS_NCODES; k++) {
            uint64_t n = 0;

            for (unsigned i = 0; i < gw->nworkers; i++) {
                n += LOAD(&gw->workers[i].metrics.requests[r][k]);
            }
            if (n > 0) {
                evbuffer_add_printf(
                    out, "llmgate_requests_total{route=\"%s\",code=\"%d\"} %" PRIu64 "\n",
                    lg_stats_route_names[r], k + LG_STATS_MIN_CODE, n);
            }
        }
    }
}

/* Mid-stream failover (serve/resume.c): continuations, and streams it could not save. */
static void
mx_resume(struct evbuffer *out, const struct lg_gateway *gw)
{
    uint64_t resumed = 0;

    for (unsigned i = 0; i < gw->nworkers; i++) {
        resumed += LOAD(&gw->workers[i].metrics.resumed);
    }
    mx_family(out, "llmgate_resumed_total", "counter",
              "Streams continued on another backend after theirs failed mid-stream "
              "(routing.resume), one per continuation.");
    evbuffer_add_printf(out, "llmgate_resumed_total %" PRIu64 "\n", resumed);
    mx_family(out, "llmgate_resume_failed_total", "counter",
              "Streams routing.resume allowed to continue that were cut all the same, by why.");
    for (int k = 1; k < LG_STATS_NRESUME; k++) {
        uint64_t n = 0;

        for (unsigned i = 0; i < gw->nworkers; i++) {
            n += LOAD(&gw->workers[i].metrics.resume_failed[k]);
        }
        evbuffer_add_printf(out, "llmgate_resume_failed_total{reason=\"%s\"} %" PRIu64 "\n",
                            lg_stats_resume_names[k], n);
    }
}

/* Sums the workers' (policy, reason) tables; a small quadratic merge. */
size_t
lg_metrics_decisions(const struct lg_gateway *gw, struct lg_stats_decision *all, size_t max,
                     uint64_t *dropped)
{
    size_t n = 0;

    *dropped = 0;
    for (unsigned i = 0; i < gw->nworkers; i++) {
        const struct lg_worker_metrics *m = &gw->workers[i].metrics;
        uint32_t k = __atomic_load_n(&m->ndecisions, __ATOMIC_ACQUIRE);

        *dropped += LOAD(&m->decisions_dropped);
        for (uint32_t j = 0; j < k; j++) {
            const struct lg_stats_decision *d = &m->decisions[j];
            size_t a = 0;

            while (a < n
                   && !(all[a].reason == d->reason && strcmp(all[a].policy, d->policy) == 0)) {
                a++;
            }
            if (a == n) {
                if (n == max) {
                    *dropped += LOAD(&d->count);
                    continue;
                }
                all[n] = *d;
                all[n++].count = 0;
            }
            all[a].count += LOAD(&d->count);
        }
    }
    return n;
}

static void
mx_decisions(struct evbuffer *out, const struct lg_gateway *gw)
{
    struct lg_stats_decision all[LG_STATS_MAX_DECISIONS * 4];
    uint64_t dropped;
    size_t n = lg_metrics_decisions(gw, all, LG_ARRAY_SIZE(all), &dropped);

    mx_family(out, "llmgate_routing_decisions_total", "counter",
              "Backends picked, by routing policy and the reason it gave.");
    for (size_t i = 0; i < n; i++) {
        evbuffer_add_printf(out, "llmgate_routing_decisions_total{policy=\"");
        mx_value(out, all[i].policy);
        evbuffer_add_printf(out, "\",reason=\"");
        mx_value(out, all[i].reason);
        evbuffer_add_printf(out, "\"} %" PRIu64 "\n", all[i].count);
    }
    mx_family(out, "llmgate_routing_decisions_uncounted_total", "counter",
              "Decisions whose (policy, reason) pair did not fit the counting table.");
    evbuffer_add_printf(out, "llmgate_routing_decisions_uncounted_total %" PRIu64 "\n", dropped);
}

/* Hedged first tokens (serve/hedge.c), summed over the workers. */
static void
mx_hedges(struct evbuffer *out, const struct lg_gateway *gw)
{
    uint64_t n[LG_STATS_NHEDGE] = { 0 };

    for (unsigned i = 0; i < gw->nworkers; i++) {
        for (int k = 0; k < LG_STATS_NHEDGE; k++) {
            n[k] += LOAD(&gw->workers[i].metrics.hedges[k]);
        }
    }
    mx_family(out, "llmgate_hedges_sent_total", "counter",
              "Duplicates sent for streams with no first token by their deadline.");
    evbuffer_add_printf(out, "llmgate_hedges_sent_total %" PRIu64 "\n", n[LG_STATS_HEDGE_SENT]);
    mx_family(out, "llmgate_hedges_won_total", "counter",
              "Duplicates whose stream reached the client (the first attempt was closed).");
    evbuffer_add_printf(out, "llmgate_hedges_won_total %" PRIu64 "\n", n[LG_STATS_HEDGE_WON]);
    mx_family(out, "llmgate_hedges_wasted_total", "counter",
              "Duplicates closed without their stream reaching the client (the first attempt "
              "won, they failed, or the client left).");
    evbuffer_add_printf(out, "llmgate_hedges_wasted_total %" PRIu64 "\n", n[LG_STATS_HEDGE_WASTED]);
    mx_family(out, "llmgate_hedges_skipped_total", "counter",
              "Deadlines that passed without a duplicate, by why.");
    evbuffer_add_printf(out, "llmgate_hedges_skipped_total{reason=\"budget\"} %" PRIu64 "\n",
                        n[LG_STATS_HEDGE_NO_BUDGET]);
    evbuffer_add_printf(out, "llmgate_hedges_skipped_total{reason=\"no_backend\"} %" PRIu64 "\n",
                        n[LG_STATS_HEDGE_NO_BACKEND]);
}

/* Tenants with series of their own; the others add up under tenant="other". */
#define MX_TENANTS_TOP 20

/* One counter family per tenant and class: the top tenants, then "other" (the rest). */
static void
mx_tenant_family(struct evbuffer *out, const char *name, const struct lg_tenant_view *v, size_t n,
                 size_t top, size_t field)
{
    uint64_t rest[LG_NCLASSES] = { 0 };

    for (size_t i = 0; i < n; i++) {
        const uint64_t *x = (const uint64_t *)(const void *)((const char *)&v[i] + field);

        if (i >= top || strcmp(v[i].name, "other") == 0) {
            for (int c = 0; c < LG_NCLASSES; c++) {
                rest[c] += x[c];
            }
            continue;
        }
        for (int c = 0; c < LG_NCLASSES; c++) {
            evbuffer_add_printf(out, "%s{tenant=\"", name);
            mx_value(out, v[i].name);
            evbuffer_add_printf(out, "\",class=\"%s\"} %" PRIu64 "\n", lg_class_name(c), x[c]);
        }
    }
    for (int c = 0; c < LG_NCLASSES; c++) {
        evbuffer_add_printf(out, "%s{tenant=\"other\",class=\"%s\"} %" PRIu64 "\n", name,
                            lg_class_name(c), rest[c]);
    }
}

/* The scheduler: the queue by class, refusals by reason, tenants' service. */

/* The per-tenant counters: each a family by tenant (the top ones; the rest as "other") and class. */
struct mx_tenant_counter {
    const char *name;
    const char *help;
    size_t offset; /* of its uint64_t[LG_NCLASSES] in struct lg_tenant_view */
};

static const struct mx_tenant_counter mx_tenant_counters[] = {
    { "llmgate_tenant_admitted_total",
      "Requests sent to a backend, by tenant (the top ones by tokens; the rest as \"other\") and "
      "class.",
      offsetof(struct lg_tenant_view, admitted) },
    { "llmgate_tenant_shed_total", "Requests refused by the scheduler, by tenant and class.",
      offsetof(struct lg_tenant_view, shed) },
    { "llmgate_tenant_tokens_total", "Tokens served (prompt and completion), by tenant and class.",
      offsetof(struct lg_tenant_view, tokens) },
    { "llmgate_tenant_queue_wait_milliseconds_total",
      "Time admitted requests waited in the admission queue, by tenant and class.",
      offsetof(struct lg_tenant_view, wait_ms) },
};

static void
mx_sched(struct evbuffer *out, struct lg_gateway *gw)
{
    struct lg_admission_class_view cv[LG_NCLASSES];
    struct lg_tenant_view *v;
    size_t n, top;

    lg_admission_classes(gw->admission, cv);
    mx_family(out, "llmgate_sched_queued", "gauge",
              "Requests waiting in the admission queue, by priority class.");
    for (int c = 0; c < LG_NCLASSES; c++) {
        evbuffer_add_printf(out, "llmgate_sched_queued{class=\"%s\"} %u\n", lg_class_name(c),
                            cv[c].queued);
    }
    mx_family(out, "llmgate_sched_refused_total", "counter",
              "Requests refused with 429 by the scheduler, by class and reason.");
    for (int c = 0; c < LG_NCLASSES; c++) {
        for (int r = 1; r < LG_SHED_NREASONS; r++) {
            evbuffer_add_printf(out,
                                "llmgate_sched_refused_total{class=\"%s\",reason=\"%s\"} %" PRIu64
                                "\n",
                                lg_class_name(c), lg_shed_name((enum lg_shed)r),
                                cv[c].refused[r]);
        }
    }
    n = lg_admission_tenant_views(gw->admission, &v);
    /* the shared "other" never takes a place of its own among the top */
    top = LG_MIN(n, (size_t)MX_TENANTS_TOP);
    for (size_t i = 0; i < top; i++) {
        if (strcmp(v[i].name, "other") == 0 && top < n) {
            top++;
            break;
        }
    }
    for (size_t k = 0; k < sizeof(mx_tenant_counters) / sizeof(mx_tenant_counters[0]); k++) {
        const struct mx_tenant_counter *tc = &mx_tenant_counters[k];

        mx_family(out, tc->name, "counter", tc->help);
        mx_tenant_family(out, tc->name, v, n, top, tc->offset);
    }
    mx_family(out, "llmgate_tenant_queued", "gauge",
              "Requests waiting in the admission queue, by tenant (the top ones) and class.");
    for (size_t i = 0; i < top; i++) {
        for (int c = 0; c < LG_NCLASSES; c++) {
            evbuffer_add_printf(out, "llmgate_tenant_queued{tenant=\"");
            mx_value(out, v[i].name);
            evbuffer_add_printf(out, "\",class=\"%s\"} %u\n", lg_class_name(c), v[i].queued[c]);
        }
    }
    free(v);
}

/* Scale from zero, per model it is on for: what an autoscaler reads (KEDA's Prometheus scaler). */
static void
mx_scale_from_zero(struct evbuffer *out, struct lg_gateway *gw, const struct lg_fleet *f)
{
    static const char *const fam[][3] = {
        { "llmgate_requests_held", "gauge",
          "Requests held because no replica of their model is ready (scale from zero): "
          "what an autoscaler reads to wake the model." },
        { "llmgate_wakeups_total", "counter",
          "Wake-ups asked for a model with no replica ready (the webhook is called for each, "
          "when one is set)." },
        { "llmgate_held_refused_total", "counter",
          "Held requests answered 503, by why: the model's max_held were held already (full), "
          "or the hold passed with no replica ready (deadline)." },
    };
    const struct lg_config *conf = f->conf;
    struct lg_admission_model_stats *st;
    bool *on;
    uint32_t max_held;
    uint64_t hold_ms;

    if (!conf->scale_from_zero.enabled && conf->scale_from_zero.nmodels == 0) {
        return;
    }
    st = lg_xcalloc(f->nmodels ? f->nmodels : 1, sizeof(*st));
    on = lg_xcalloc(f->nmodels ? f->nmodels : 1, sizeof(*on));
    for (size_t i = 0; i < f->nmodels; i++) {
        on[i] = lg_config_sfz(conf, f->models[i].model, &max_held, &hold_ms);
        if (on[i]) {
            lg_admission_model_stats(gw->admission, f->models[i].model, &st[i]);
        }
    }
    for (size_t k = 0; k < LG_ARRAY_SIZE(fam); k++) {
        mx_family(out, fam[k][0], fam[k][1], fam[k][2]);
        for (size_t i = 0; i < f->nmodels; i++) {
            if (!on[i]) {
                continue;
            }
            for (int r = 0; r < (k == 2 ? 2 : 1); r++) {
                evbuffer_add_printf(out, "%s{model=\"", fam[k][0]);
                mx_value(out, f->models[i].model);
                if (k == 0) {
                    evbuffer_add_printf(out, "\"} %u\n", st[i].held);
                } else if (k == 1) {
                    evbuffer_add_printf(out, "\"} %" PRIu64 "\n", st[i].wakeups);
                } else {
                    evbuffer_add_printf(out, "\",reason=\"%s\"} %" PRIu64 "\n",
                                        r == 0 ? "full" : "deadline",
                                        r == 0 ? st[i].held_full : st[i].held_expired);
                }
            }
        }
    }
    mx_family(out, "llmgate_wakeup_failures_total", "counter",
              "Wake-up webhook calls that failed (no answer in time, refused, not 2xx).");
    evbuffer_add_printf(out, "llmgate_wakeup_failures_total %" PRIu64 "\n",
                        lg_wakeup_failures(gw->wakeup));
    free(on);
    free(st);
}

static void
mx_gateway(struct evbuffer *out, struct lg_gateway *gw, const struct lg_fleet *f)
{
    struct lg_worker_stats sum = { 0 };
    struct lg_reload_stats rs;

    for (unsigned i = 0; i < gw->nworkers; i++) {
        const struct lg_worker_stats *s = &gw->workers[i].stats;

        sum.accepted += LOAD(&s->accepted);
        sum.refused += LOAD(&s->refused);
        sum.bytes_in += LOAD(&s->bytes_in);
        sum.bytes_out += LOAD(&s->bytes_out);
    }
    lg_reload_read_stats(gw, &rs);
    mx_family(out, "llmgate_build_info", "gauge", "Version and source revision (always 1).");
    evbuffer_add_printf(out, "llmgate_build_info{version=\"%s\",revision=\"", LG_VERSION);
    mx_value(out, LG_GIT_REV);
    evbuffer_add_printf(out, "\"} 1\n");
    mx_family(out, "llmgate_workers", "gauge", "Event-loop threads.");
    evbuffer_add_printf(out, "llmgate_workers %u\n", gw->nworkers);
    mx_family(out, "llmgate_draining", "gauge", "1 once a SIGTERM started the drain.");
    evbuffer_add_printf(out, "llmgate_draining %d\n",
                        __atomic_load_n(&gw->draining, __ATOMIC_RELAXED) ? 1 : 0);
    mx_family(out, "llmgate_connections", "gauge", "Open client connections.");
    evbuffer_add_printf(out, "llmgate_connections %u\n", lg_gateway_clients(gw));
    mx_family(out, "llmgate_queue_waiting", "gauge",
              "Requests waiting in the admission queue (every backend of their model busy, or "
              "held by scale_from_zero).");
    evbuffer_add_printf(out, "llmgate_queue_waiting %u\n", lg_admission_waiting(gw->admission));
    mx_scale_from_zero(out, gw, f);
    if (gw->tracer != NULL) {
        mx_tracing(out, gw);
    }
    mx_family(out, "llmgate_connections_accepted_total", "counter", "Client connections accepted.");
    evbuffer_add_printf(out, "llmgate_connections_accepted_total %" PRIu64 "\n", sum.accepted);
    mx_family(out, "llmgate_connections_refused_total", "counter",
              "Client connections refused at limits.max_connections.");
    evbuffer_add_printf(out, "llmgate_connections_refused_total %" PRIu64 "\n", sum.refused);
    mx_requests(out, gw);
    mx_resume(out, gw);
    mx_hedges(out, gw);
    mx_family(out, "llmgate_request_bytes_total", "counter",
              "Request bytes received from clients (heads and bodies).");
    evbuffer_add_printf(out, "llmgate_request_bytes_total %" PRIu64 "\n", sum.bytes_in);
    mx_family(out, "llmgate_response_bytes_total", "counter", "Response bytes sent to clients.");
    evbuffer_add_printf(out, "llmgate_response_bytes_total %" PRIu64 "\n", sum.bytes_out);
    mx_decisions(out, gw);
    mx_sched(out, gw);
    mx_family(out, "llmgate_config_reloads_total", "counter",
              "Reloads of the configuration file, by result.");
    evbuffer_add_printf(out,
                        "llmgate_config_reloads_total{result=\"success\"} %" PRIu64 "\n"
                        "llmgate_config_reloads_total{result=\"failure\"} %" PRIu64 "\n",
                        rs.reloads_ok, rs.reloads_failed);
    mx_family(out, "llmgate_config_last_reload_success", "gauge",
              "1 if the last reload applied (or none was tried), 0 if it was refused.");
    evbuffer_add_printf(out, "llmgate_config_last_reload_success %d\n",
                        rs.last_reload_wall_ns == 0 || rs.last_ok ? 1 : 0);
    mx_scalar(out, "llmgate_config_last_reload_timestamp_seconds", "gauge",
              "When the last reload was tried (0: never).", (double)rs.last_reload_wall_ns / 1e9);
    mx_scalar(out, "llmgate_config_generation", "gauge",
              "Generation of the configuration in force (1 at start, +1 per applied reload).",
              (double)rs.generation);
    mx_family(out, "llmgate_fleet_updates_total", "counter",
              "Backend sets put in force (reloads and DNS discovery changes).");
    evbuffer_add_printf(out, "llmgate_fleet_updates_total %" PRIu64 "\n", rs.fleet_swaps);
    mx_family(out, "llmgate_backends", "gauge", "Backends in the fleet in force.");
    evbuffer_add_printf(out, "llmgate_backends %zu\n", f->nbackends);
    mx_family(out, "llmgate_access_log_dropped_total", "counter",
              "Access-log lines dropped because the disk could not keep up.");
    evbuffer_add_printf(out, "llmgate_access_log_dropped_total %" PRIu64 "\n",
                        lg_accesslog_dropped(gw->alog));
}

/* ---- backends --------------------------------------------------------------------- */

/* One family over every backend: `expr` reads backend `b`. */
#define MX_BACKEND_FAMILY(out, f, name, type, help, expr)   \
    do {                                                    \
        mx_family((out), (name), (type), (help));           \
        for (size_t i_ = 0; i_ < (f)->nbackends; i_++) {    \
            const struct lg_backend *b = (f)->backends[i_]; \
            mx_backend_u64((out), (name), b, (expr));       \
        }                                                   \
    } while (0)

/* A gauge per backend, skipping those for which `known` is false. */
static void
mx_backend_gauge(struct evbuffer *out, const char *name, const struct lg_backend *b, double v,
                 bool known)
{
    if (!known || !isfinite(v)) {
        return;
    }
    evbuffer_add_printf(out, "%s{backend=\"", name);
    mx_value(out, b->name);
    evbuffer_add_printf(out, "\"} ");
    mx_double(out, v);
    evbuffer_add(out, "\n", 1);
}

/* State, slow start, the engine's last scrape and the router's estimates. */
static void
mx_live(struct evbuffer *out, const struct lg_fleet *f)
{
    struct lg_live *lv = lg_xcalloc(f->nbackends ? f->nbackends : 1, sizeof(*lv));
    uint64_t now = lg_now_ns();
    static const struct {
        const char *name;
        const char *help;
    } g[] = {
        { "llmgate_backend_slow_start_ratio",
          "Share of its traffic a backend in slow start may take now (1: full)." },
        { "llmgate_backend_engine_requests_waiting",
          "Requests waiting in the engine, from its /metrics (all clients)." },
        { "llmgate_backend_engine_requests_running",
          "Requests running in the engine, from its /metrics (all clients)." },
        { "llmgate_backend_engine_kv_cache_usage_ratio",
          "KV-cache use reported by the engine, 0..1." },
        { "llmgate_backend_engine_scrape_age_seconds",
          "Age of the engine's last scraped figures." },
        { "llmgate_backend_engine_capacity",
          "Requests the engine runs at once (slots), as learnt." },
        { "llmgate_backend_load", "Requests on the engine now as the router counts them: this "
                                  "gateway's in flight plus other clients' (faded scrape)." },
        { "llmgate_backend_ttft_estimate_seconds",
          "Learnt service TTFT of a 1 KiB prompt without queueing (the router's estimate)." },
        { "llmgate_backend_inter_token_estimate_seconds", "Learnt gap between tokens." },
        { "llmgate_backend_error_ratio", "Recent share of failed attempts (decaying)." },
    };

    for (size_t i = 0; i < f->nbackends; i++) {
        lg_live_read(f, f->backends[i], now, &lv[i]);
    }
    mx_family(out, "llmgate_backend_state", "gauge",
              "1 for the backend's state (up; down: failed active checks; ejected: passive "
              "back-off; half_open: one probe at a time; held: honouring a Retry-After; "
              "draining: admin, no new requests).");
    for (size_t i = 0; i < f->nbackends; i++) {
        for (int k = 0; k < LG_LIVE_NSTATES; k++) {
            evbuffer_add_printf(out, "llmgate_backend_state{backend=\"");
            mx_value(out, f->backends[i]->name);
            evbuffer_add_printf(out, "\",state=\"%s\"} %d\n", lg_live_state_names[k],
                                (int)lv[i].state == k);
        }
    }
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_ejections_total", "counter",
                      "Passive ejections (failures in a row) since the backend joined.",
                      LOAD(&b->ejections_total));
    for (size_t k = 0; k < LG_ARRAY_SIZE(g); k++) {
        mx_family(out, g[k].name, "gauge", g[k].help);
        for (size_t i = 0; i < f->nbackends; i++) {
            const struct lg_backend_view *v = &lv[i].view;
            bool scraped = v->engine_age_ns != UINT64_MAX;
            double x[] = {
                v->ramp,
                v->engine_waiting,
                v->engine_running,
                v->engine_kv_usage,
                (double)v->engine_age_ns / 1e9,
                v->capacity,
                v->load,
                lv[i].ttft_1kib_ms / 1e3,
                v->itl_ms / 1e3,
                v->error_rate,
            };
            bool known[] = {
                true,
                scraped && v->engine_waiting >= 0,
                scraped && v->engine_running >= 0,
                scraped && v->engine_kv_usage >= 0,
                scraped,
                v->capacity > 0,
                true,
                true,
                true,
                true,
            };

            mx_backend_gauge(out, g[k].name, f->backends[i], x[k], known[k]);
        }
    }
    free(lv);
}


static void
mx_backends(struct evbuffer *out, const struct lg_fleet *f)
{
    mx_family(out, "llmgate_backend_responses_total", "counter",
              "Attempts sent to the backend, by the class of its status (none: no response: "
              "refused, reset, timed out).");
    for (size_t i = 0; i < f->nbackends; i++) {
        const struct lg_backend *b = f->backends[i];

        for (int k = 0; k < LG_BACKEND_NCLASS; k++) {
            evbuffer_add_printf(out, "llmgate_backend_responses_total{backend=\"");
            mx_value(out, b->name);
            evbuffer_add_printf(out, "\",class=\"%s\"} %" PRIu64 "\n", metrics_classes[k],
                                LG_STAT_GET(b, responses[k]));
        }
    }
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_attempts_total", "counter",
                      "Attempts dispatched to the backend (retries included).",
                      LG_STAT_GET(b, requests));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_requests_total", "counter",
                      "Requests whose last attempt went to the backend (each once).",
                      LOAD(&b->metrics.requests));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_in_flight", "gauge",
                      "Requests of this gateway running on the backend now.",
                      (uint64_t)lg_backend_inflight(b));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_retries_total", "counter",
                      "Attempts that were retries of a request that failed elsewhere.",
                      LG_STAT_GET(b, retries));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_connect_failures_total", "counter",
                      "Connections to the backend that could not be made.",
                      LG_STAT_GET(b, connect_failures));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_timeouts_total", "counter",
                      "Attempts that timed out (first byte, stream idle, total).",
                      LG_STAT_GET(b, timeouts));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_cut_streams_total", "counter",
                      "Responses that failed after bytes reached the client.",
                      LG_STAT_GET(b, cut_streams));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_client_aborts_total", "counter",
                      "Requests whose client left; the backend connection was closed at once.",
                      LG_STAT_GET(b, client_aborts));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_connections_opened_total", "counter",
                      "New connections to the backend.", LG_STAT_GET(b, connects));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_connections_reused_total", "counter",
                      "Requests sent on a pooled keep-alive connection.", LG_STAT_GET(b, reuses));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_sent_bytes_total", "counter",
                      "Request bytes sent to the backend.", LG_STAT_GET(b, bytes_out));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_received_bytes_total", "counter",
                      "Response bytes relayed from the backend.", LG_STAT_GET(b, bytes_in));
    mx_live(out, f);
    mx_family(out, "llmgate_backend_ttft_seconds", "histogram",
              "Time to first token: from the request's first byte to the first content event "
              "(the whole response when not streamed), successful responses.");
    for (size_t i = 0; i < f->nbackends; i++) {
        mx_histogram(out, "llmgate_backend_ttft_seconds", f->backends[i],
                     &f->backends[i]->metrics.ttft, lg_hist_latency_bounds);
    }
    mx_family(out, "llmgate_backend_inter_token_seconds", "histogram",
              "Mean gap between content events of each streamed response.");
    for (size_t i = 0; i < f->nbackends; i++) {
        mx_histogram(out, "llmgate_backend_inter_token_seconds", f->backends[i],
                     &f->backends[i]->metrics.itl, lg_hist_itl_bounds);
    }
    mx_family(out, "llmgate_backend_request_duration_seconds", "histogram",
              "From the request's first byte to the response's last, successful responses.");
    for (size_t i = 0; i < f->nbackends; i++) {
        mx_histogram(out, "llmgate_backend_request_duration_seconds", f->backends[i],
                     &f->backends[i]->metrics.duration, lg_hist_latency_bounds);
    }
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_prompt_tokens_total", "counter",
                      "Prompt tokens, as the backend's usage reported them.",
                      LOAD(&b->metrics.prompt_tokens));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_completion_tokens_total", "counter",
                      "Completion tokens (usage, else content events).",
                      LOAD(&b->metrics.completion_tokens));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_stream_errors_total", "counter",
                      "Streamed responses in which the engine sent an error event (after a 200).",
                      LOAD(&b->metrics.stream_errors));
    MX_BACKEND_FAMILY(out, f, "llmgate_backend_prompt_bytes_total", "counter",
                      "Prompt text bytes of the requests (messages, prompt, input).",
                      LOAD(&b->metrics.prompt_bytes));
}

void
lg_metrics_render(struct lg_gateway *gw, struct evbuffer *out)
{
    struct lg_fleet *f = lg_gateway_fleet(gw);

    mx_gateway(out, gw, f);
    mx_backends(out, f);
    mx_process(out);
    lg_fleet_unref(f);
}
