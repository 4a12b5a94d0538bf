/*
 * load.c: the engines' own load reports (load.h): vLLM's endpoint-load-metrics
 * response header and GET /load, SGLang's GET /v1/loads. Numbers are written
 * as the engines' Python writes them (repr() of a float, json.dumps with the
 * separators of the response class). Reads the replica's engine and counters;
 * owns nothing but the throughput sample of /v1/loads (in the replica).
 */
#include "load.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>

#include "base/lg_core.h"
#include "httpreq.h"
#include "metrics.h"
#include "sim.h"

int
lg_sim_load_header_mode_parse(const char *s, enum lg_sim_load_header_mode *out)
{
    static const char *const names[] = { "off", "vllm", "all" };

    for (size_t i = 0; i < LG_ARRAY_SIZE(names); i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum lg_sim_load_header_mode)i;
            return LG_OK;
        }
    }
    return LG_EINVAL;
}

enum lg_sim_load_format
lg_sim_load_format_parse(const char *value, size_t len)
{
    while (len > 0 && (value[0] == ' ' || value[0] == '\t')) {
        value++;
        len--;
    }
    while (len > 0 && (value[len - 1] == ' ' || value[len - 1] == '\t')) {
        len--;
    }
    if (lg_str_ieq(value, len, "text")) {
        return LG_SIM_LOAD_FORMAT_TEXT;
    }
    if (lg_str_ieq(value, len, "json")) {
        return LG_SIM_LOAD_FORMAT_JSON;
    }
    return LG_SIM_LOAD_FORMAT_NONE;
}

enum lg_sim_load_format
lg_sim_load_format_of(const struct lg_sim_httpreq *r)
{
    /* a value longer than the buffer is no format vLLM writes */
    if (!r->load_seen || r->load_value_len > sizeof(r->load_value)) {
        return LG_SIM_LOAD_FORMAT_NONE;
    }
    return lg_sim_load_format_parse(r->load_value, r->load_value_len);
}

/*
 * vLLM's create_orca_header(): named_metrics in the order its metrics
 * registry holds the gauges (num_requests_waiting is registered before
 * kv_cache_usage_perc), each value a Python float:
 *   TEXT named_metrics.num_requests_waiting=2.0, named_metrics.kv_cache_usage_perc=0.25
 *   JSON {"named_metrics": {"num_requests_waiting": 2.0, "kv_cache_usage_perc": 0.25}}
 */
const char *
lg_sim_load_header(const struct lg_sim *sim, enum lg_sim_load_format format, char *buf,
                   size_t len)
{
    char waiting[40], kv[40];

    buf[0] = '\0';
    if (format == LG_SIM_LOAD_FORMAT_NONE) {
        return buf;
    }
    lg_sim_py_repr(waiting, sizeof(waiting), (double)sim->engine.nwaiting);
    lg_sim_py_repr(kv, sizeof(kv), lg_sim_engine_kv_usage(&sim->engine));
    if (format == LG_SIM_LOAD_FORMAT_TEXT) {
        snprintf(buf, len,
                 "endpoint-load-metrics: TEXT named_metrics.num_requests_waiting=%s, "
                 "named_metrics.kv_cache_usage_perc=%s\r\n",
                 waiting, kv);
    } else {
        snprintf(buf, len,
                 "endpoint-load-metrics: JSON {\"named_metrics\": {\"num_requests_waiting\": %s, "
                 "\"kv_cache_usage_perc\": %s}}\r\n",
                 waiting, kv);
    }
    return buf;
}

void
lg_sim_load_vllm(const struct lg_sim *sim, struct evbuffer *body)
{
    /* Starlette's JSONResponse: compact separators */
    evbuffer_add_printf(body, "{\"server_load\":%" PRIu32 "}", sim->server_load);
}

/* ---- SGLang's /v1/loads --------------------------------------------------------- */

/* Sections of include=, as GetLoadsReqInput.VALID_SECTIONS. */
enum {
    LOADS_CORE = 1 << 0,
    LOADS_MEMORY = 1 << 1,
    LOADS_SPEC = 1 << 2,
    LOADS_LORA = 1 << 3,
    LOADS_DISAGG = 1 << 4,
    LOADS_QUEUES = 1 << 5,
    LOADS_ALL = 0x3f,
};

static const struct {
    const char *name;
    unsigned bit;
} loads_sections[] = {
    { "core", LOADS_CORE },     { "memory", LOADS_MEMORY }, { "spec", LOADS_SPEC },
    { "lora", LOADS_LORA },     { "disagg", LOADS_DISAGG }, { "queues", LOADS_QUEUES },
    { "all", LOADS_ALL },
};

static int
loads_hex(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
        return (c | 0x20) - 'a' + 10;
    }
    return -1;
}

/* Percent-decodes src[0..len) into dst (at most cap - 1 bytes, terminated); '+' is a space. */
static size_t
loads_unescape(const char *src, size_t len, char *dst, size_t cap)
{
    size_t n = 0;

    for (size_t i = 0; i < len && n + 1 < cap; i++) {
        char c = src[i];

        if (c == '%' && i + 2 < len && loads_hex(src[i + 1]) >= 0 && loads_hex(src[i + 2]) >= 0) {
            c = (char)(loads_hex(src[i + 1]) * 16 + loads_hex(src[i + 2]));
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        dst[n++] = c;
    }
    dst[n] = '\0';
    return n;
}

/* A number as Python's round(v, digits) then repr() writes it. */
static void
loads_round(char *buf, size_t len, double v, int digits)
{
    double scale = pow(10.0, digits);

    lg_sim_py_repr(buf, len, round(v * scale) / scale);
}

struct loads_query {
    unsigned include; /* LOADS_* */
    bool dp_rank_given;
    long dp_rank;
    bool prometheus;
};

/* Reads the query; on a bad one writes FastAPI's error body and returns its status. */
static int
loads_parse_query(const char *q, size_t qlen, struct loads_query *out, struct evbuffer *body)
{
    const char *end = q + qlen;

    *out = (struct loads_query){ .include = LOADS_ALL };
    while (q < end) {
        const char *amp = memchr(q, '&', (size_t)(end - q));
        const char *pend = amp ? amp : end;
        const char *eq = memchr(q, '=', (size_t)(pend - q));
        char key[32], val[256];

        if (eq != NULL) {
            loads_unescape(q, (size_t)(eq - q), key, sizeof(key));
            loads_unescape(eq + 1, (size_t)(pend - eq - 1), val, sizeof(val));
            if (strcmp(key, "include") == 0 && val[0] != '\0') {
                unsigned bits = 0;
                char bad[256] = "";

                for (char *tok = val, *next; tok != NULL; tok = next) {
                    char *comma = strchr(tok, ',');
                    size_t tl;
                    bool known = false;

                    next = comma ? comma + 1 : NULL;
                    if (comma) {
                        *comma = '\0';
                    }
                    while (*tok == ' ') { /* Python's s.strip() */
                        tok++;
                    }
                    tl = strlen(tok);
                    while (tl > 0 && tok[tl - 1] == ' ') {
                        tok[--tl] = '\0';
                    }
                    for (size_t i = 0; i < LG_ARRAY_SIZE(loads_sections); i++) {
                        if (strcmp(tok, loads_sections[i].name) == 0) {
                            bits |= loads_sections[i].bit;
                            known = true;
                        }
                    }
                    if (!known && strlen(bad) + tl + 8 < sizeof(bad)) {
                        snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "%s'%s'",
                                 bad[0] ? ", " : "", tok);
                    }
                }
                if (bad[0] != '\0') {
                    evbuffer_add_printf(body,
                                        "{\"detail\":\"Invalid include sections: {%s}. Valid "
                                        "options: ['all', 'core', 'disagg', 'lora', 'memory', "
                                        "'queues', 'spec']\"}",
                                        bad);
                    return 400;
                }
                out->include = bits;
            } else if (strcmp(key, "dp_rank") == 0) {
                char *e;

                out->dp_rank = strtol(val, &e, 10);
                if (val[0] == '\0' || *e != '\0') {
                    /* FastAPI's 422 for a query parameter that is not an integer */
                    evbuffer_add_printf(
                        body,
                        "{\"detail\":[{\"type\":\"int_parsing\",\"loc\":[\"query\",\"dp_rank\"],"
                        "\"msg\":\"Input should be a valid integer, unable to parse string as "
                        "an integer\",\"input\":\"%s\"}]}",
                        strpbrk(val, "\"\\") ? "?" : val);
                    return 422;
                }
                out->dp_rank_given = true;
            } else if (strcmp(key, "format") == 0 && strcmp(val, "prometheus") == 0) {
                out->prometheus = true;
            }
        }
        q = amp ? amp + 1 : end;
    }
    if (out->prometheus) {
        evbuffer_add_printf(body, "{\"detail\":\"format=prometheus is not served by llmsim\"}");
        return 400;
    }
    return 200;
}

/* datetime.now(timezone.utc).isoformat(): 2026-01-02T03:04:05.678901+00:00 */
static void
loads_timestamp(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    if (ts.tv_nsec / 1000 == 0) {
        strftime(buf, len, "%Y-%m-%dT%H:%M:%S+00:00", &tm);
        return;
    }
    strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + strlen(buf), len - strlen(buf), ".%06ld+00:00", ts.tv_nsec / 1000);
}

/*
 * SGLang's get_loads() in its scheduler and v1_loads.py: one load per
 * data-parallel rank (llmsim has rank 0 only), the dataclass written by
 * dataclasses.asdict() without its None members and its timestamp, then
 * num_total_reqs; the aggregate over the loads. The memory, speculative and
 * LoRA sections are absent, as on a server without those (the memory
 * section's sizes are a GPU's); disaggregation ("null": not disaggregated)
 * and queues are present when included.
 */
int
lg_sim_load_sglang(struct lg_sim *sim, const char *query, size_t qlen, struct evbuffer *body)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    struct loads_query q;
    uint64_t now = lg_now_ns();
    uint64_t capacity = (uint64_t)e->conf.prefix_cache_blocks * e->conf.prefix_block_tokens;
    uint64_t used = lg_sim_engine_kv_tokens(e);
    double usage, throughput, hit_rate;
    char ts[64], usage_s[40], thr_s[40], hit_s[40], avg_usage[40], avg_thr[40];
    uint32_t running = e->nrunning, waiting = e->nwaiting;
    int status = loads_parse_query(query, qlen, &q, body);
    bool rank0;

    if (status != 200) {
        return status;
    }
    if (capacity == 0) {
        capacity = e->conf.slots; /* no KV pool to speak of: its slots */
        used = running;
    }
    usage = capacity ? (double)LG_MIN(used, capacity) / (double)capacity : 0;
    /* generated tokens a second since the previous answer (SGLang: over its last
     * decode_log_interval decode steps) */
    throughput = now > sim->loads_prev_ns
                     ? (double)(st->generation_tokens - sim->loads_prev_tokens) * 1e9
                           / (double)(now - sim->loads_prev_ns)
                     : 0;
    sim->loads_prev_ns = now;
    sim->loads_prev_tokens = st->generation_tokens;
    hit_rate = st->prefix_queries ? (double)st->prefix_hits / (double)st->prefix_queries : 0;
    loads_round(usage_s, sizeof(usage_s), usage, 4);
    loads_round(thr_s, sizeof(thr_s), throughput, 2);
    loads_round(hit_s, sizeof(hit_s), hit_rate, 4);
    loads_timestamp(ts, sizeof(ts));
    rank0 = !q.dp_rank_given || q.dp_rank == 0;

    /* FastAPI's default JSONResponse: compact separators */
    evbuffer_add_printf(body, "{\"timestamp\":\"%s\",\"version\":\"llmsim\",\"dp_rank_count\":%d,"
                              "\"loads\":[",
                        ts, rank0 ? 1 : 0);
    if (rank0) {
        evbuffer_add_printf(body,
                            "{\"dp_rank\":0,\"num_running_reqs\":%" PRIu32
                            ",\"num_waiting_reqs\":%" PRIu32 ",\"num_used_tokens\":%" PRIu64
                            ",\"max_total_num_tokens\":%" PRIu64
                            ",\"token_usage\":%s,\"gen_throughput\":%s,\"cache_hit_rate\":%s,"
                            "\"utilization\":0.0,\"max_running_requests\":%" PRIu32,
                            running, waiting, LG_MIN(used, capacity), capacity, usage_s, thr_s,
                            hit_s, e->conf.slots);
        if (q.include & LOADS_DISAGG) {
            evbuffer_add_printf(
                body, ",\"disaggregation\":{\"mode\":\"null\",\"prefill_prealloc_queue_reqs\":0,"
                      "\"prefill_inflight_queue_reqs\":0,\"decode_prealloc_queue_reqs\":0,"
                      "\"decode_transfer_queue_reqs\":0,\"decode_retracted_queue_reqs\":0,"
                      "\"kv_transfer_speed_gb_s\":0.0,\"kv_transfer_latency_ms\":0.0}");
        }
        if (q.include & LOADS_QUEUES) {
            evbuffer_add_printf(body,
                                ",\"queues\":{\"waiting\":%" PRIu32
                                ",\"grammar\":0,\"paused\":0,\"retracted\":0}",
                                waiting);
        }
        evbuffer_add_printf(body, ",\"num_total_reqs\":%" PRIu32 "}", running + waiting);
    }
    if (!rank0) {
        running = waiting = 0; /* no load of that rank: the aggregate of none */
    }
    loads_round(avg_usage, sizeof(avg_usage), rank0 ? usage : 0, 4);
    loads_round(avg_thr, sizeof(avg_thr), rank0 ? throughput : 0, 2);
    evbuffer_add_printf(body,
                        "],\"aggregate\":{\"total_running_reqs\":%" PRIu32
                        ",\"total_waiting_reqs\":%" PRIu32 ",\"total_reqs\":%" PRIu32
                        ",\"avg_token_usage\":%s,\"avg_throughput\":%s,\"avg_utilization\":0.0}}",
                        running, waiting, running + waiting, avg_usage, avg_thr);
    return 200;
}
