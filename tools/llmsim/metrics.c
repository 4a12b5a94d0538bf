/*
 * metrics.c: renders llmsim's /metrics in the Prometheus text format, with
 * each engine's own names, label conventions, HELP and TYPE lines, so that
 * the gateway's scrapers are exercised against the real vocabularies:
 *   vllm      vllm:num_requests_running{model_name,engine} ... (prometheus_client)
 *   sglang    sglang:num_running_reqs{model_name} ...
 *   tgi       tgi_queue_size, tgi_batch_current_size ... (no labels)
 *   llamacpp  llamacpp:requests_processing ... (no labels)
 * Every flavor also carries the flavor-neutral llmsim_* series. Owns nothing;
 * reads the replica's counters only.
 */
#include "metrics.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include <event2/buffer.h>

#include "api.h"
#include "base/lg_core.h"
#include "sim.h"

struct metrics_ctx {
    struct evbuffer *out;
    const char *labels; /* rendered label pairs without braces, "" for none */
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
    evbuffer_add_printf(m->out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
metrics_sample_u64(const struct metrics_ctx *m, const char *name, uint64_t v)
{
    if (m->labels[0]) {
        evbuffer_add_printf(m->out, "%s{%s} %" PRIu64 "\n", name, m->labels, v);
    } else {
        evbuffer_add_printf(m->out, "%s %" PRIu64 "\n", name, v);
    }
}

static void
metrics_sample_f(const struct metrics_ctx *m, const char *name, double v)
{
    if (!isfinite(v)) {
        v = 0;
    }
    if (m->labels[0]) {
        evbuffer_add_printf(m->out, "%s{%s} %.9g\n", name, m->labels, v);
    } else {
        evbuffer_add_printf(m->out, "%s %.9g\n", name, v);
    }
}

static void
metrics_counter(const struct metrics_ctx *m, const char *name, const char *help, uint64_t v)
{
    metrics_family(m, name, "counter", help);
    metrics_sample_u64(m, name, v);
}

static void
metrics_gauge(const struct metrics_ctx *m, const char *name, const char *help, double v)
{
    metrics_family(m, name, "gauge", help);
    metrics_sample_f(m, name, v);
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

static void
metrics_ttft_histogram(const struct metrics_ctx *m, const struct lg_sim_engine_stats *st,
                       const char *name, const char *help)
{
    uint64_t cumulative = 0;
    char le[32];
    const char *sep = m->labels[0] ? "," : "";

    metrics_family(m, name, "histogram", help);
    for (size_t b = 0; b <= LG_SIM_TTFT_BUCKETS; b++) {
        cumulative += st->ttft_counts[b];
        if (b < LG_SIM_TTFT_BUCKETS) {
            metrics_le(le, sizeof(le), lg_sim_ttft_buckets[b]);
        } else {
            snprintf(le, sizeof(le), "+Inf");
        }
        evbuffer_add_printf(m->out, "%s_bucket{le=\"%s\"%s%s} %" PRIu64 "\n", name, le, sep,
                            m->labels, cumulative);
    }
    if (m->labels[0]) {
        evbuffer_add_printf(m->out, "%s_count{%s} %" PRIu64 "\n%s_sum{%s} %.9g\n", name, m->labels,
                            cumulative, name, m->labels, st->ttft_sum_s);
    } else {
        evbuffer_add_printf(m->out, "%s_count %" PRIu64 "\n%s_sum %.9g\n", name, cumulative, name,
                            st->ttft_sum_s);
    }
}

static double
metrics_hit_rate(const struct lg_sim_engine_stats *st)
{
    return st->prefix_queries ? (double)st->prefix_hits / (double)st->prefix_queries : 0;
}

static void
metrics_vllm(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    char labels[LG_SIM_API_MODEL_MAX * 2 + 64];
    const struct metrics_ctx m = { .out = out, .labels = labels };

    snprintf(labels, sizeof(labels), "model_name=\"%s\",engine=\"0\"", sim->conf->models[0].label);
    metrics_gauge(&m, "vllm:num_requests_running", "Number of requests in model execution batches.",
                  e->nrunning);
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
                    "Cumulative number of preemption from the engine.", 0);
    metrics_counter(&m, "vllm:prompt_tokens_total", "Number of prefill tokens processed.",
                    st->prompt_tokens);
    metrics_counter(&m, "vllm:generation_tokens_total", "Number of generation tokens processed.",
                    st->generation_tokens);
    metrics_family(&m, "vllm:request_success_total", "counter",
                   "Count of successfully processed requests.");
    evbuffer_add_printf(out,
                        "vllm:request_success_total{%s,finished_reason=\"length\"} %" PRIu64 "\n",
                        labels, st->completed);
    metrics_ttft_histogram(&m, st, "vllm:time_to_first_token_seconds",
                           "Histogram of time to first token in seconds.");
}

static void
metrics_sglang(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    char labels[LG_SIM_API_MODEL_MAX * 2 + 64];
    const struct metrics_ctx m = { .out = out, .labels = labels };
    double capacity = (double)e->conf.prefix_cache_blocks * e->conf.prefix_block_tokens;
    uint64_t used = lg_sim_engine_kv_tokens(e);

    snprintf(labels, sizeof(labels), "model_name=\"%s\"", sim->conf->models[0].label);
    metrics_gauge(&m, "sglang:num_running_reqs", "The number of running requests.", e->nrunning);
    metrics_gauge(&m, "sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                  e->nwaiting);
    metrics_gauge(&m, "sglang:num_used_tokens", "The number of used tokens.", (double)used);
    metrics_gauge(&m, "sglang:token_usage", "The token usage.", lg_sim_engine_kv_usage(e));
    metrics_gauge(&m, "sglang:max_total_num_tokens",
                  "Maximum total number of tokens in the KV cache pool.", capacity);
    metrics_gauge(&m, "sglang:cache_hit_rate", "The prefix cache hit rate.", metrics_hit_rate(st));
    metrics_counter(&m, "sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                    st->prompt_tokens);
    metrics_counter(&m, "sglang:generation_tokens_total", "Number of generation tokens processed.",
                    st->generation_tokens);
    metrics_counter(&m, "sglang:num_requests_total", "Number of requests processed.",
                    st->completed);
    metrics_ttft_histogram(&m, st, "sglang:time_to_first_token_seconds",
                           "Histogram of time to first token in seconds.");
}

static void
metrics_tgi(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    const struct metrics_ctx m = { .out = out, .labels = "" };
    const struct lg_sim_counters *cn = &sim->counters;

    /* metrics-exporter-prometheus: integer values, counters without _total */
    metrics_family(&m, "tgi_queue_size", "gauge", "Current queue size");
    metrics_sample_u64(&m, "tgi_queue_size", e->nwaiting);
    metrics_family(&m, "tgi_batch_current_size", "gauge", "Current batch size");
    metrics_sample_u64(&m, "tgi_batch_current_size", e->nrunning);
    metrics_family(&m, "tgi_batch_current_max_tokens", "gauge",
                   "Maximum tokens for the current batch");
    metrics_sample_u64(&m, "tgi_batch_current_max_tokens", lg_sim_engine_kv_tokens(e));
    metrics_counter(&m, "tgi_request_count", "Total number of requests", cn->requests);
    metrics_counter(&m, "tgi_request_success", "Number of successful requests", cn->requests_ok);
    metrics_counter(&m, "tgi_request_generated_tokens_total", "Total generated tokens",
                    st->generation_tokens);
}

static void
metrics_llamacpp(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    const struct metrics_ctx m = { .out = out, .labels = "" };
    double prefill_s = (double)st->prefill_ns / 1e9;
    double decode_s = (double)st->decode_ns / 1e9;

    metrics_counter(&m, "llamacpp:prompt_tokens_total", "Number of prompt tokens processed.",
                    st->prefilled_tokens);
    metrics_family(&m, "llamacpp:prompt_seconds_total", "counter", "Prompt process time");
    metrics_sample_f(&m, "llamacpp:prompt_seconds_total", prefill_s);
    metrics_counter(&m, "llamacpp:tokens_predicted_total", "Number of generation tokens processed.",
                    st->generation_tokens);
    metrics_family(&m, "llamacpp:tokens_predicted_seconds_total", "counter",
                   "Predict process time");
    metrics_sample_f(&m, "llamacpp:tokens_predicted_seconds_total", decode_s);
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
                  e->nrunning);
    metrics_gauge(&m, "llamacpp:requests_deferred", "Number of requests deferred.", e->nwaiting);
}

/* Flavor-neutral series, the same in every flavor. */
static void
metrics_llmsim(struct evbuffer *out, const struct lg_sim *sim)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    const struct lg_sim_counters *cn = &sim->counters;
    const struct metrics_ctx m = { .out = out, .labels = "" };

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
    metrics_gauge(&m, "llmsim_running", "Sequences holding a slot.", e->nrunning);
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
