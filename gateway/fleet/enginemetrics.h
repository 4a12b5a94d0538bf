/*
 * enginemetrics.h: reads an inference engine's Prometheus /metrics into
 * the few numbers routing uses: requests waiting, requests running and
 * KV-cache usage, in each engine's own vocabulary.
 *
 *   flavor    waiting                     running                      KV usage (0..1)
 *   vllm      vllm:num_requests_waiting   vllm:num_requests_running    vllm:kv_cache_usage_perc
 *                                                                      (vllm:gpu_cache_usage_perc)
 *   sglang    sglang:num_queue_reqs       sglang:num_running_reqs      sglang:token_usage
 *             (sglang:num_requests_waiting) (sglang:num_requests_running)
 *   tgi       tgi_queue_size              tgi_batch_current_size       -
 *   llamacpp  llamacpp:requests_deferred  llamacpp:requests_processing llamacpp:kv_cache_usage_ratio
 *
 * and the requests it has finished (a counter, read when the exposition has
 * it; the health checker sets it against ours to tell whether anyone else is
 * served there): vllm:request_success_total (every finished_reason, aborts
 * too), sglang:num_requests_total, tgi_request_success; llama.cpp's server
 * counts tokens, not requests.
 *
 * Names in parentheses are older versions' (vLLM before 0.9 and its V0
 * engine; SGLang before its collector.py, 2024), read when the current name
 * is absent. Recent llama.cpp servers export no KV gauge. Each engine's
 * exposition, with the source it was taken from: tests/fixtures/engines/.
 *
 * Samples of one series with several label sets (several models, or data
 * parallel engines) are summed; KV usage takes the highest. The flavor can
 * be detected from the names' prefixes.
 */
#ifndef LG_ENGINEMETRICS_H
#define LG_ENGINEMETRICS_H

#include "base/config.h"
#include "base/lg_core.h"

/* Largest exposition accepted, in bytes (the scraper stops reading beyond). */
#define LG_ENGINE_METRICS_MAX_BYTES (4u << 20)

struct lg_engine_sample {
    enum lg_engine_flavor flavor; /* the vocabulary used (detected if asked) */
    int32_t waiting;              /* -1: not in the exposition */
    int32_t running;              /* -1: not in the exposition */
    double kv_usage;              /* 0..1; -1: not in the exposition */
    double finished;              /* requests finished (counter); -1: not in the exposition */
    uint32_t samples;             /* sample lines read */
    uint32_t bad_lines;           /* lines that are not valid exposition (skipped) */
};

/*
 * Called for each sample line of an exposition: the metric name, the text
 * between the braces (without them; empty when none) and the value. The
 * pointers are into the caller's text and valid during the call only.
 */
typedef void (*lg_prom_sample_fn)(void *arg, const char *name, size_t name_len, const char *labels,
                                  size_t labels_len, double value);

/*
 * Parses the Prometheus text format (version 0.0.4): comments and blank
 * lines are skipped, every sample line goes to fn. A malformed line is
 * skipped and counted, never fatal, so one odd series cannot blind the
 * router. Returns the number of malformed lines.
 */
uint32_t lg_prom_parse(const char *text, size_t len, lg_prom_sample_fn fn, void *arg);

/*
 * Extracts the routing numbers from an exposition. flavor LG_ENGINE_AUTO
 * detects it (out->flavor says which, LG_ENGINE_AUTO if no known series was
 * seen). Returns LG_OK when waiting or running was found, LG_EDECLINED when
 * the exposition has neither (unknown engine: callers fail open).
 */
int lg_engine_metrics_parse(const char *text, size_t len, enum lg_engine_flavor flavor,
                            struct lg_engine_sample *out);

/*
 * llama.cpp's server says how many requests it runs at once (its slots,
 * `--parallel`) in GET /props, as `total_slots` (not in /metrics). Reads
 * that from the body: LG_OK and *slots (1..LG_ENGINE_MAX_SLOTS), or
 * LG_EDECLINED when the body is not a JSON object with a sane total_slots
 * (another server, or a version without it). The other engines' /metrics
 * say no slot count, and vLLM, SGLang and TGI serve none elsewhere that
 * states the batch they run (SGLang 0.3's max_running_requests, TGI's
 * max_concurrent_requests are admission limits, far above it).
 */
#define LG_ENGINE_PROPS_PATH "/props"
#define LG_ENGINE_MAX_SLOTS  65536
int lg_engine_props_parse(const char *text, size_t len, double *slots);

/* "vllm", "sglang", "tgi", "llamacpp", "auto" or "none". */
const char *lg_engine_flavor_name(enum lg_engine_flavor f);

#endif /* LG_ENGINEMETRICS_H */
