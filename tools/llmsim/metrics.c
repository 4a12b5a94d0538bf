/*
 * metrics.c: renders llmsim's /metrics in the Prometheus text format, with
 * each engine's own names, types, HELP text and label conventions, so that
 * the gateway's scrapers are exercised against the real vocabularies. Each
 * flavor is a subset of an exposition in tests/fixtures/engines/ (where the
 * engines' sources are cited), and unit.llmsim_metrics checks it stays so:
 *   vllm      vllm:num_requests_running{engine,model_name} ... (vLLM V1,
 *             prometheus_client: labels sorted, counters with _total)
 *   sglang    sglang:num_running_reqs{engine_type,model_name,pp_rank,tp_rank},
 *             sglang:prompt_tokens_total{model_name} ... (multiprocess mode)
 *   tgi       tgi_queue_size, tgi_batch_current_size ... (metrics-exporter-
 *             prometheus: no labels, counters without _total, a blank line
 *             after each family)
 *   llamacpp  llamacpp:requests_processing ... (hand-written, no labels,
 *             values as a C++ stream prints a double: 6 significant digits;
 *             the server before its KV-cache gauges were removed)
 * Every flavor also carries the flavor-neutral llmsim_* series. Owns nothing;
 * reads the replica's counters only.
 */
#include "metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/buffer.h>

#include "api.h"
#include "base/lg_core.h"
#include "sim.h"

/* How each engine's client library writes a number. */
enum metrics_style {
    METRICS_C = 0, /* llmsim's own: integers as such, floats %.9g */
    METRICS_PY,    /* prometheus_client: every value a float, 7.0, 2.097152e+06 */
    METRICS_RUST,  /* metrics-exporter-prometheus: counters u64, gauges f64 (7, 0.5) */
    METRICS_CPP,   /* a C++ stream: every value a double, 6 significant digits */
};

struct metrics_ctx {
    struct evbuffer *out;
    const char *labels; /* rendered label pairs without braces, "" for none */
    /* for histograms: the pairs that sort before and after "le" */
    const char *le_before, *le_after;
    enum metrics_style style; /* how numbers are written */
    bool family_gap;          /* a blank line after each family (TGI) */
};

static const char *const metrics_flavor_names[] = { "vllm", "sglang", "tgi", "llamacpp" };

const char *
lg_sim_flavor_name(int flavor)
{
    if (flavor < 0 || (size_t)flavor >= LG_ARRAY_SIZE(metrics_flavor_names)) {
        return "?";
    }
    return metrics_flavor_names[flavor];
}

static void
metrics_family(const struct metrics_ctx *m, const char *name, const char *type, const char *help)
{
    if (help != NULL) {
        evbuffer_add_printf(m->out, "# HELP %s %s\n", name, help);
    }
    evbuffer_add_printf(m->out, "# TYPE %s %s\n", name, type);
}

static void
metrics_end_family(const struct metrics_ctx *m)
{
    if (m->family_gap) {
        evbuffer_add(m->out, "\n", 1);
    }
}

/* The fewest significant digits that read back as v (Python's repr, Rust's Display). */
static void
metrics_shortest(char *buf, size_t len, double v)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, len, "%.*g", p, v);
        if (strtod(buf, NULL) == v) {
            return;
        }
    }
}

void
lg_sim_py_repr(char *buf, size_t len, double v)
{
    char sci[40], digits[24];
    const char *e;
    size_t nd = 0;
    int exp, p;

    if (!isfinite(v)) {
        snprintf(buf, len, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    /* the fewest significant digits that read back as v, in d.ddde+XX form */
    for (p = 1; p <= 17; p++) {
        snprintf(sci, sizeof(sci), "%.*e", p - 1, v);
        if (strtod(sci, NULL) == v) {
            break;
        }
    }
    e = strchr(sci, 'e');
    exp = atoi(e + 1);
    for (const char *c = sci; c < e; c++) {
        if (*c >= '0' && *c <= '9' && nd + 1 < sizeof(digits)) {
            digits[nd++] = *c;
        }
    }
    while (nd > 1 && digits[nd - 1] == '0') {
        nd--;
    }
    digits[nd] = '\0';
    if (exp < -4 || exp >= 16) { /* repr(1e-05) "1e-05", repr(1e16) "1e+16" */
        snprintf(buf, len, "%s%c%s%se%c%02d", v < 0 ? "-" : "", digits[0], nd > 1 ? "." : "",
                 digits + 1, exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) { /* 0.00123 */
        snprintf(buf, len, "%s0.%.*s%s", v < 0 ? "-" : "", -exp - 1, "0000", digits);
    } else if ((size_t)exp + 1 >= nd) { /* 120.0: the digits, zeros, ".0" */
        snprintf(buf, len, "%s%s%.*s.0", v < 0 ? "-" : "", digits, (int)((size_t)exp + 1 - nd),
                 "0000000000000000");
    } else { /* 12.5 */
        snprintf(buf, len, "%s%.*s.%s", v < 0 ? "-" : "", exp + 1, digits, digits + exp + 1);
    }
}

/* prometheus_client's floatToGoString(): repr(), with Go's earlier switch to an exponent. */
static void
metrics_pyfloat(char *buf, size_t len, double v)
{
    char *dot;

    lg_sim_py_repr(buf, len, v);
    dot = strchr(buf, '.');
    if (v > 0 && dot != NULL && strchr(buf, 'e') == NULL && dot - buf > 6) {
        char digits[40];
        size_t n = 0;
        int exp = (int)(dot - buf) - 1;

        for (const char *c = buf; *c != '\0' && n + 1 < sizeof(digits); c++) {
            if (*c != '.') {
                digits[n++] = *c;
            }
        }
        while (n > 1 && digits[n - 1] == '0') {
            n--; /* rstrip('0.') */
        }
        digits[n] = '\0';
        snprintf(buf, len, "%c%s%se+0%d", digits[0], n > 1 ? "." : "", digits + 1, exp);
    }
}

static void
metrics_number(const struct metrics_ctx *m, char *buf, size_t len, double v, bool integral)
{
    switch (m->style) {
    case METRICS_PY:
        metrics_pyfloat(buf, len, v);
        break;
    case METRICS_CPP:
        snprintf(buf, len, "%g", v);
        break;
    case METRICS_RUST:
        if (integral || v == floor(v)) {
            snprintf(buf, len, "%.0f", v);
        } else {
            metrics_shortest(buf, len, v);
        }
        break;
    default:
        if (integral) {
            snprintf(buf, len, "%.0f", v);
        } else {
            snprintf(buf, len, "%.9g", v);
        }
        break;
    }
}

static void
metrics_sample(const struct metrics_ctx *m, const char *name, const char *suffix, double v,
               bool integral)
{
    char num[64];

    if (!isfinite(v)) {
        v = 0;
    }
    metrics_number(m, num, sizeof(num), v, integral);
    if (m->labels[0]) {
        evbuffer_add_printf(m->out, "%s%s{%s} %s\n", name, suffix, m->labels, num);
    } else {
        evbuffer_add_printf(m->out, "%s%s %s\n", name, suffix, num);
    }
}

static void
metrics_counter(const struct metrics_ctx *m, const char *name, const char *help, uint64_t v)
{
    metrics_family(m, name, "counter", help);
    metrics_sample(m, name, "", (double)v, true);
    metrics_end_family(m);
}

/* A counter whose value is a float (seconds). */
static void
metrics_counter_f(const struct metrics_ctx *m, const char *name, const char *help, double v)
{
    metrics_family(m, name, "counter", help);
    metrics_sample(m, name, "", v, false);
    metrics_end_family(m);
}

static void
metrics_gauge(const struct metrics_ctx *m, const char *name, const char *help, double v)
{
    metrics_family(m, name, "gauge", help);
    metrics_sample(m, name, "", v, false);
    metrics_end_family(m);
}

/* A bucket bound as prometheus_client writes it: 0.001, 1.0, 2560.0. */
static void
metrics_le(char *buf, size_t len, double le)
{
    if (le == floor(le)) {
        snprintf(buf, len, "%.1f", le);
    } else {
        snprintf(buf, len, "%g", le);
    }
}

/* One histogram series: cumulative buckets, then _count and _sum (prometheus_client). */
static void
metrics_histogram(const struct metrics_ctx *m, const char *name, const double *bounds,
                  size_t nbounds, const uint64_t *counts, double sum)
{
    uint64_t cumulative = 0;
    char le[32], num[64];
    const char *sep1 = m->le_before[0] ? "," : "";
    const char *sep2 = m->le_after[0] ? "," : "";

    for (size_t b = 0; b <= nbounds; b++) {
        cumulative += counts[b];
        if (b < nbounds) {
            metrics_le(le, sizeof(le), bounds[b]);
        } else {
            snprintf(le, sizeof(le), "+Inf");
        }
        metrics_number(m, num, sizeof(num), (double)cumulative, true);
        evbuffer_add_printf(m->out, "%s_bucket{%s%sle=\"%s\"%s%s} %s\n", name, m->le_before, sep1,
                            le, sep2, m->le_after, num);
    }
    metrics_sample(m, name, "_count", (double)cumulative, true);
    metrics_sample(m, name, "_sum", sum, false);
}

static void
metrics_ttft_histogram(const struct metrics_ctx *m, const struct lg_sim_engine_stats *st,
                       const char *name, const char *help)
{
    metrics_family(m, name, "histogram", help);
    metrics_histogram(m, name, lg_sim_ttft_buckets, LG_SIM_TTFT_BUCKETS, st->ttft_counts,
                      st->ttft_sum_s);
}

static double
metrics_hit_rate(const struct lg_sim_engine_stats *st)
{
    return st->prefix_queries ? (double)st->prefix_hits / (double)st->prefix_queries : 0;
}

/* The running gauge: with --gauge-lag-ms, ended sequences linger in it. */
static double
metrics_running(const struct lg_sim_engine *e)
{
    return lg_sim_engine_gauge_running(e, lg_now_ns());
}

static void
metrics_vllm(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    char labels[LG_SIM_API_MODEL_MAX * 2 + 64], after[LG_SIM_API_MODEL_MAX * 2 + 32];
    const struct metrics_ctx m = { .out = out,
                                   .labels = labels,
                                   .le_before = "engine=\"0\"",
                                   .le_after = after,
                                   .style = METRICS_PY };

    /* prometheus_client writes the labels sorted by name */
    snprintf(labels, sizeof(labels), "engine=\"0\",model_name=\"%s\"", sim->conf->models[0].label);
    snprintf(after, sizeof(after), "model_name=\"%s\"", sim->conf->models[0].label);
    metrics_gauge(&m, "vllm:num_requests_running", "Number of requests in model execution batches.",
                  metrics_running(e));
    metrics_gauge(&m, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                  e->nwaiting);
    metrics_gauge(&m, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                  lg_sim_engine_kv_usage(e));
    metrics_counter(&m, "vllm:prefix_cache_queries_total",
                    "Prefix cache queries, in terms of number of queried tokens.",
                    st->prefix_queries);
    metrics_counter(&m, "vllm:prefix_cache_hits_total",
                    "Prefix cache hits, in terms of number of cached tokens.", st->prefix_hits);
    metrics_counter(&m, "vllm:num_preemptions_total",
                    "Cumulative number of preemption from the engine.", st->preempted);
    metrics_counter(&m, "vllm:prompt_tokens_total", "Number of prefill tokens processed.",
                    st->prompt_tokens);
    metrics_counter(&m, "vllm:generation_tokens_total", "Number of generation tokens processed.",
                    st->generation_tokens);
    {
        char reason[LG_SIM_API_MODEL_MAX * 2 + 80];
        const struct metrics_ctx r = { .out = out, .labels = reason, .style = METRICS_PY };

        snprintf(reason, sizeof(reason),
                 "engine=\"0\",finished_reason=\"length\",model_name=\"%s\"",
                 sim->conf->models[0].label);
        metrics_counter(&r, "vllm:request_success_total",
                        "Count of successfully processed requests.", st->completed);
    }
    metrics_ttft_histogram(&m, st, "vllm:time_to_first_token_seconds",
                           "Histogram of time to first token in seconds.");
}

static void
metrics_sglang(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    char sched[LG_SIM_API_MODEL_MAX * 2 + 96], tok[LG_SIM_API_MODEL_MAX * 2 + 32];
    /* the scheduler's gauges carry its ranks, the tokenizer manager's series the model only */
    const struct metrics_ctx m = { .out = out, .labels = sched, .style = METRICS_PY };
    const struct metrics_ctx t = {
        .out = out, .labels = tok, .le_before = "", .le_after = tok, .style = METRICS_PY
    };
    double capacity = (double)e->conf.prefix_cache_blocks * e->conf.prefix_block_tokens;
    uint64_t used = lg_sim_engine_kv_tokens(e);

    snprintf(sched, sizeof(sched),
             "engine_type=\"unified\",model_name=\"%s\",pp_rank=\"0\",tp_rank=\"0\"",
             sim->conf->models[0].label);
    snprintf(tok, sizeof(tok), "model_name=\"%s\"", sim->conf->models[0].label);
    metrics_gauge(&m, "sglang:num_running_reqs", "The number of running requests.",
                  metrics_running(e));
    metrics_gauge(&m, "sglang:num_used_tokens", "The number of used tokens.", (double)used);
    metrics_gauge(&m, "sglang:token_usage", "The token usage.", lg_sim_engine_kv_usage(e));
    metrics_gauge(&m, "sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                  e->nwaiting);
    metrics_gauge(&m, "sglang:cache_hit_rate", "The prefix cache hit rate.", metrics_hit_rate(st));
    metrics_gauge(&m, "sglang:max_total_num_tokens",
                  "Maximum total number of tokens in the KV cache pool.", capacity);
    metrics_counter(&t, "sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                    st->prompt_tokens);
    metrics_counter(&t, "sglang:generation_tokens_total", "Number of generation tokens processed.",
                    st->generation_tokens);
    metrics_counter(&t, "sglang:num_requests_total", "Number of requests processed.",
                    st->completed);
    metrics_ttft_histogram(&t, st, "sglang:time_to_first_token_seconds",
                           "Histogram of time to first token in seconds.");
}

/* TGI's tgi_request_generated_tokens buckets: server.rs, max_total_tokens / 100 * (x + 1) */
static void
metrics_tgi_generated(const struct metrics_ctx *m, const struct lg_sim_engine_stats *st)
{
    uint64_t cumulative = 0;
    char le[32];

    metrics_family(m, "tgi_request_generated_tokens", "histogram", "Generated tokens per request");
    for (size_t b = 0; b <= LG_SIM_GEN_BUCKETS; b++) {
        cumulative += st->gen_counts[b];
        if (b < LG_SIM_GEN_BUCKETS) {
            metrics_shortest(le, sizeof(le), lg_sim_gen_bucket(b));
        } else {
            snprintf(le, sizeof(le), "+Inf");
        }
        evbuffer_add_printf(m->out, "tgi_request_generated_tokens_bucket{le=\"%s\"} %" PRIu64 "\n",
                            le, cumulative);
    }
    evbuffer_add_printf(m->out,
                        "tgi_request_generated_tokens_sum %" PRIu64
                        "\ntgi_request_generated_tokens_count %" PRIu64 "\n",
                        st->completed_tokens, cumulative);
    metrics_end_family(m);
}

static void
metrics_tgi(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    const struct metrics_ctx m = {
        .out = out, .labels = "", .style = METRICS_RUST, .family_gap = true
    };
    const struct lg_sim_counters *cn = &sim->counters;

    /* metrics-exporter-prometheus: counters, then gauges, then histograms */
    metrics_counter(&m, "tgi_request_count", "Total number of requests", cn->requests);
    metrics_counter(&m, "tgi_request_success", "Number of successful requests", cn->requests_ok);
    metrics_gauge(&m, "tgi_queue_size", "Current queue size", e->nwaiting);
    metrics_gauge(&m, "tgi_batch_current_size", "Current batch size", metrics_running(e));
    metrics_gauge(&m, "tgi_batch_current_max_tokens", "Maximum tokens for the current batch",
                  (double)lg_sim_engine_kv_tokens(e));
    metrics_tgi_generated(&m, st);
}

static void
metrics_llamacpp(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    const struct metrics_ctx m = { .out = out, .labels = "", .style = METRICS_CPP };
    double prefill_s = (double)st->prefill_ns / 1e9;
    double decode_s = (double)st->decode_ns / 1e9;

    metrics_counter(&m, "llamacpp:prompt_tokens_total", "Number of prompt tokens processed.",
                    st->prefilled_tokens);
    metrics_counter_f(&m, "llamacpp:prompt_seconds_total", "Prompt process time", prefill_s);
    metrics_counter(&m, "llamacpp:tokens_predicted_total", "Number of generation tokens processed.",
                    st->generation_tokens);
    metrics_counter_f(&m, "llamacpp:tokens_predicted_seconds_total", "Predict process time",
                      decode_s);
    metrics_counter(&m, "llamacpp:n_decode_total", "Total number of llama_decode() calls",
                    st->steps);
    metrics_gauge(&m, "llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
                  prefill_s > 0 ? (double)st->prefilled_tokens / prefill_s : 0);
    metrics_gauge(&m, "llamacpp:predicted_tokens_seconds",
                  "Average generation throughput in tokens/s.",
                  decode_s > 0 ? (double)st->generation_tokens / decode_s : 0);
    metrics_gauge(&m, "llamacpp:kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.",
                  lg_sim_engine_kv_usage(e));
    metrics_gauge(&m, "llamacpp:kv_cache_tokens", "KV-cache tokens.",
                  (double)lg_sim_engine_kv_tokens(e));
    metrics_gauge(&m, "llamacpp:requests_processing", "Number of requests processing.",
                  metrics_running(e));
    metrics_gauge(&m, "llamacpp:requests_deferred", "Number of requests deferred.", e->nwaiting);
}

/* Flavor-neutral series, the same in every flavor. */
static void
metrics_llmsim(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    const struct lg_sim_counters *cn = &sim->counters;
    const struct metrics_ctx m = { .out = out, .labels = "", .style = METRICS_C };

    metrics_counter(&m, "llmsim_requests_total",
                    "Inference requests received (chat, completions, embeddings).", cn->requests);
    metrics_counter(&m, "llmsim_completed_total", "Sequences that generated all their tokens.",
                    st->completed);
    metrics_counter(&m, "llmsim_aborted_total",
                    "Sequences aborted because their client disconnected.", st->aborted);
    metrics_counter(&m, "llmsim_dropped_total", "Sequences cut by the close-after-tokens fault.",
                    st->dropped);
    metrics_counter(&m, "llmsim_fault_responses_total",
                    "Requests answered with a status fault's code.", cn->fault_responses);
    metrics_counter(&m, "llmsim_parked_total",
                    "Sequences whose first token a stall-first fault held.", st->parked);
    metrics_counter(&m, "llmsim_abandoned_total",
                    "Requests held by a stall whose client left before it ended.", cn->abandoned);
    metrics_gauge(&m, "llmsim_running", "Sequences holding a slot.", metrics_running(e));
    metrics_gauge(&m, "llmsim_waiting", "Sequences queued for a slot.", e->nwaiting);
    metrics_gauge(&m, "llmsim_slots", "Sequences that can run at once.", e->conf.slots);
    metrics_gauge(&m, "llmsim_speed", "Effective speed, faults included (1 = baseline).",
                  sim->speed);
    metrics_gauge(&m, "llmsim_connections", "Open client connections.", sim->nconns);
    metrics_counter(&m, "llmsim_prefix_cache_queries_total",
                    "Prompt tokens looked up in the prefix cache.", st->prefix_queries);
    metrics_counter(&m, "llmsim_prefix_cache_hits_total",
                    "Prompt tokens found in the prefix cache (prefill skipped).", st->prefix_hits);
}

int
lg_sim_metrics_render(const struct lg_sim *sim, struct evbuffer *out)
{
    switch (sim->conf->flavor) {
    case LG_SIM_FLAVOR_VLLM:
        metrics_vllm(out, sim);
        break;
    case LG_SIM_FLAVOR_SGLANG:
        metrics_sglang(out, sim);
        break;
    case LG_SIM_FLAVOR_TGI:
        metrics_tgi(out, sim);
        break;
    case LG_SIM_FLAVOR_LLAMACPP:
        metrics_llamacpp(out, sim);
        break;
    }
    metrics_llmsim(out, sim);
    return LG_OK;
}
