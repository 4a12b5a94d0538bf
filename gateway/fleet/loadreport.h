/*
 * loadreport.h: the load an engine reports on request, fresher than a
 * /metrics scrape (loadreport.c):
 *
 *   vLLM, per response: the `endpoint-load-metrics` response header, sent
 *     when the request carries `endpoint-load-metrics-format: TEXT` (or
 *     JSON):
 *       TEXT named_metrics.num_requests_waiting=3.0, named_metrics.kv_cache_usage_perc=0.4375
 *       JSON {"named_metrics": {"num_requests_waiting": 3.0, "kv_cache_usage_perc": 0.4375}}
 *     (vllm/entrypoints/serve/utils/orca_metrics.py: waiting and KV use,
 *     not the running count);
 *   vLLM, GET /load (with --enable-server-load-tracking):
 *       {"server_load": 5}   requests in its API server, running or waiting;
 *   SGLang, GET /v1/loads: `aggregate.total_running_reqs`,
 *     `total_waiting_reqs`, `avg_token_usage`, `avg_throughput`, and each
 *     rank's `max_running_requests` (summed: the slots).
 *
 * Fixtures with their sources: tests/fixtures/engines/{vllm,sglang}/.
 */
#ifndef LG_LOADREPORT_H
#define LG_LOADREPORT_H

#include <stddef.h>

#include "base/lg_core.h"

/* Largest report body or header value read, in bytes. */
#define LG_LOAD_REPORT_MAX_BYTES (64u << 10)

/* What one report says; -1 where it says nothing. */
struct lg_load_report {
    double waiting;      /* requests queued */
    double running;      /* requests running */
    double total;        /* running and waiting together (vLLM's /load) */
    double kv_usage;     /* 0..1 */
    double slots;        /* requests it runs at once (SGLang's max_running_requests) */
    double tokens_per_s; /* tokens it generates a second (SGLang's gen_throughput) */
};

/*
 * Parses the value of an `endpoint-load-metrics` header (the text after
 * "endpoint-load-metrics:", leading blanks allowed), TEXT or JSON form;
 * names it does not know are skipped. LG_OK when it held at least one known
 * metric, else LG_EINVAL (*out then says nothing).
 */
int lg_load_report_header_parse(const char *s, size_t len, struct lg_load_report *out);

/*
 * Parses a body of vLLM's GET /load or SGLang's GET /v1/loads (told apart by
 * their members). LG_OK when it held a load, else LG_EINVAL.
 */
int lg_load_report_body_parse(const char *s, size_t len, struct lg_load_report *out);

#endif /* LG_LOADREPORT_H */
