/*
 * load.h: the load reports engines give per response or on demand, each in
 * its engine's own format (tests/fixtures/engines/ cites the sources):
 *
 *   vLLM    a request with `endpoint-load-metrics-format: TEXT|JSON` gets an
 *           `endpoint-load-metrics` response header (ORCA named metrics:
 *           num_requests_waiting, kv_cache_usage_perc);
 *           GET /load (--enable-server-load-tracking): {"server_load":N}, the
 *           inference requests the API server is serving;
 *   SGLang  GET /v1/loads: each data-parallel rank's load and their aggregate.
 *
 * Each is off unless asked for (llmsim's flags); an engine that lacks one
 * answers 404 there, as llmsim does then.
 */
#ifndef LG_SIM_LOAD_H
#define LG_SIM_LOAD_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct lg_sim;
struct lg_sim_httpreq;

/* --endpoint-load-metrics: which answers carry the header when a request asks. */
enum lg_sim_load_header_mode {
    LG_SIM_LOAD_HEADER_OFF = 0, /* none (the request header is ignored) */
    LG_SIM_LOAD_HEADER_VLLM,    /* as vLLM's server: answers that are not streamed */
    LG_SIM_LOAD_HEADER_ALL,     /* streamed answers too, in their head */
};

/* The format a request asked for in endpoint-load-metrics-format. */
enum lg_sim_load_format {
    LG_SIM_LOAD_FORMAT_NONE = 0, /* not asked, or a format vLLM does not write */
    LG_SIM_LOAD_FORMAT_TEXT,
    LG_SIM_LOAD_FORMAT_JSON,
};

/* Parses --endpoint-load-metrics (off, vllm, all); LG_EINVAL if unknown. */
int lg_sim_load_header_mode_parse(const char *s, enum lg_sim_load_header_mode *out);

/* The format of a header value: TEXT or JSON in any case, surrounding blanks
 * ignored (vLLM lowercases it); anything else NONE, as vLLM writes no header. */
enum lg_sim_load_format lg_sim_load_format_parse(const char *value, size_t len);

/* The format a request read by r asked for (its first endpoint-load-metrics-format). */
enum lg_sim_load_format lg_sim_load_format_of(const struct lg_sim_httpreq *r);

/*
 * Writes the `endpoint-load-metrics: ...\r\n` header line for format into
 * buf (len bytes; "" for NONE), from the engine's state now: its waiting
 * requests and KV use, as vLLM's gauges hold them. Returns buf.
 */
const char *lg_sim_load_header(const struct lg_sim *sim, enum lg_sim_load_format format,
                               char *buf, size_t len);

/* GET /load's body: {"server_load":N}. */
void lg_sim_load_vllm(const struct lg_sim *sim, struct evbuffer *body);

/*
 * GET /v1/loads?include=...&dp_rank=N: the body for status 200, or a
 * FastAPI-style {"detail": "..."} and 400 for a bad query (an unknown
 * include section, a dp_rank that is not an integer, format=prometheus,
 * which llmsim does not write). Returns the status.
 */
int lg_sim_load_sglang(struct lg_sim *sim, const char *query, size_t qlen, struct evbuffer *body);

#endif /* LG_SIM_LOAD_H */
