/*
 * llmload.h: types shared by the llmload modules (options, size specs, the
 * request trace, the SSE scanner, statistics, the run). Exported names carry
 * the lg_ld_ prefix so that they never collide with the gateway's modules,
 * which the tool links through lg_core.
 */
#ifndef LG_LLMLOAD_H
#define LG_LLMLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lg_core.h"

/* ---- seeded randomness (spec.c) ------------------------------------------ */

/* splitmix64 stream: one per independent quantity, so that changing one flag
 * (say --max-tokens) does not move the arrival times. */
struct lg_ld_rng {
    uint64_t s;
};

void lg_ld_rng_init(struct lg_ld_rng *r, uint64_t seed, uint64_t stream);
uint64_t lg_ld_rng_next(struct lg_ld_rng *r);
/* Uniform in (0, 1]. */
double lg_ld_rng_unit(struct lg_ld_rng *r);
/* Uniform integer in [lo, hi]. */
uint64_t lg_ld_rng_range(struct lg_ld_rng *r, uint64_t lo, uint64_t hi);

/* ---- size specs (spec.c) ---------------------------------------------------- */

#define LG_LD_SPEC_MAX_PARTS 32

/* "N", "A-B" or "mix:P1%V1,P2%V2,..." where each V is "N" or "A-B". */
struct lg_ld_spec {
    size_t n;                          /* components, 1..LG_LD_SPEC_MAX_PARTS */
    double cum[LG_LD_SPEC_MAX_PARTS];  /* cumulative probability; cum[n-1] == 1 */
    uint64_t lo[LG_LD_SPEC_MAX_PARTS]; /* inclusive bounds of each component */
    uint64_t hi[LG_LD_SPEC_MAX_PARTS];
};

/* Parses s; every value must lie in [0, max]. On error returns LG_EINVAL with
 * a message in err. */
int lg_ld_spec_parse(struct lg_ld_spec *spec, const char *s, uint64_t max, char *err,
                     size_t errlen);
/* Draws one value (two RNG steps for a mix, one otherwise). */
uint64_t lg_ld_spec_sample(const struct lg_ld_spec *spec, struct lg_ld_rng *r);
/* Largest value the spec can produce. */
uint64_t lg_ld_spec_max(const struct lg_ld_spec *spec);
/* Mean of the spec's distribution. */
double lg_ld_spec_mean(const struct lg_ld_spec *spec);

/* --burst FACTOR:ON_S:OFF_S */
struct lg_ld_burst {
    bool enabled;
    double factor; /* rate multiplier during ON windows */
    double on_s;
    double off_s;
};

int lg_ld_burst_parse(struct lg_ld_burst *b, const char *s, char *err, size_t errlen);
/* Rate multiplier during OFF windows that keeps the mean at 1. */
double lg_ld_burst_off_factor(const struct lg_ld_burst *b);

/* Parses a duration: seconds as a decimal, or with a suffix ms|s|m. */
int lg_ld_parse_seconds(const char *s, double *out);

/* ---- options (opts.c) -------------------------------------------------------- */

enum lg_ld_api { LG_LD_API_CHAT = 0, LG_LD_API_COMPLETIONS, LG_LD_API_EMBEDDINGS };
enum lg_ld_dist { LG_LD_DIST_UNIFORM = 0, LG_LD_DIST_ZIPF };
enum lg_ld_mode { LG_LD_MODE_OPEN = 0, LG_LD_MODE_CLOSED, LG_LD_MODE_REPLAY };

#define LG_LD_MAX_HEADERS      64
#define LG_LD_MAX_PROMPT_BYTES (64u << 20)
#define LG_LD_MAX_TOKENS       (1u << 24)
#define LG_LD_MAX_GROUPS       1000000u
#define LG_LD_MAX_TRACE_ITEMS  20000000u

struct lg_ld_opts {
    /* target; strings borrowed from argv unless noted */
    const char *url;
    char host[256]; /* parsed from url */
    char port[8];
    char path[1024]; /* request path: --path, or base + the API's path */
    char api_paths[3][1024]; /* each API's path (all --path's when given), for traces that
                                name a request's API */
    const char *model;
    enum lg_ld_api api;
    const char *path_override;
    const char *replica_header; /* response header naming the replica */
    const char *headers[LG_LD_MAX_HEADERS];
    size_t n_headers;
    char *extra_body; /* owned: members of --extra-body without braces, or NULL */

    /* load shape */
    enum lg_ld_mode mode;
    double rate;          /* requests/s, open loop */
    double duration_s;    /* 0 = unset */
    uint64_t concurrency; /* closed loop */
    uint64_t requests;    /* 0 = unset */
    struct lg_ld_burst burst;
    uint64_t max_conns;

    /* request content */
    bool stream;
    bool include_usage;
    uint64_t seed;
    struct lg_ld_spec prompt_bytes;
    struct lg_ld_spec max_tokens;
    const char *prompt_spec; /* the texts, echoed in the JSON config */
    const char *max_tokens_spec;
    const char *burst_spec;
    uint64_t prefix_groups; /* 0 = no shared prefixes */
    uint64_t prefix_bytes;
    enum lg_ld_dist prefix_dist;
    double zipf_s;

    /* behaviour */
    double timeout_s;
    double connect_timeout_s;
    bool reuse;
    bool progress;
    bool dry_run;
    bool realtime; /* SCHED_FIFO for the run */

    /* files */
    const char *json_path;
    const char *log_path;
    const char *trace_out;
    const char *trace_in;
};

/* Result of lg_ld_opts_parse() other than LG_OK / LG_EINVAL. */
#define LG_LD_OPTS_HELP    1
#define LG_LD_OPTS_VERSION 2

/* Fills o from argv (borrowing the strings). Returns LG_OK, LG_LD_OPTS_HELP,
 * LG_LD_OPTS_VERSION, or LG_EINVAL with a message in err. Resets getopt's
 * state first, so it may be called more than once. lg_ld_opts_free() releases
 * what it allocated, whatever it returned. */
int lg_ld_opts_parse(struct lg_ld_opts *o, int argc, char **argv, char *err, size_t errlen);
void lg_ld_opts_free(struct lg_ld_opts *o);
void lg_ld_opts_usage(FILE *f);
const char *lg_ld_api_name(enum lg_ld_api api);
const char *lg_ld_mode_name(enum lg_ld_mode mode);

/* ---- the request trace (trace.c) -------------------------------------------- */

/* One request: when it arrives and what it asks for. A trace line may also
 * name its own model, API, stream flag and body members (a recorded log's
 * requests differ in these); absent, the flags' apply. */
struct lg_ld_item {
    uint64_t t_us;         /* arrival offset from the start */
    uint32_t prompt_bytes; /* unique user part */
    uint32_t max_tokens;
    int32_t group;      /* shared-prefix group, -1 = none */
    int8_t api;         /* enum lg_ld_api, -1 = --api's */
    int8_t stream;      /* 0 or 1, -1 = --stream's */
    bool no_max_tokens; /* the body has no max_tokens (the trace said null) */
    char *model;        /* owned, a JSON string with its quotes; NULL = --model */
    char *extra;        /* owned: members added to the body (no braces); NULL = none */
};

/* Frees what items[0..n) own, then the array. */
void lg_ld_items_free(struct lg_ld_item *items, size_t n);

/* Draws request contents (and, in open loop, arrival times) from seeded,
 * independent streams. */
struct lg_ld_gen {
    const struct lg_ld_opts *o;
    struct lg_ld_rng arrivals;
    struct lg_ld_rng sizes;
    struct lg_ld_rng tokens;
    struct lg_ld_rng groups;
    double t_s;       /* last arrival, seconds */
    double *zipf_cdf; /* owned; NULL unless --prefix-dist zipf */
};

void lg_ld_gen_init(struct lg_ld_gen *g, const struct lg_ld_opts *o);
void lg_ld_gen_free(struct lg_ld_gen *g);
/* Fills the sizes and group of the next request. */
void lg_ld_gen_contents(struct lg_ld_gen *g, struct lg_ld_item *it);
/* Advances the Poisson (optionally bursty) arrival process: returns the next
 * arrival time in seconds. */
double lg_ld_gen_arrival(struct lg_ld_gen *g);

/* Builds the open-loop trace (generated, or read from --trace-in), bounded by
 * --duration and --requests. *items is owned by the caller (free()). */
int lg_ld_trace_build(const struct lg_ld_opts *o, struct lg_ld_item **items, size_t *n, char *err,
                      size_t errlen);
/* Parses one line of a trace file into *it (which then owns its strings:
 * lg_ld_items_free(), or free it->model and it->extra). Returns LG_OK,
 * LG_EAGAIN for a blank or comment line, or LG_EINVAL with a message
 * (nothing owned). */
int lg_ld_trace_parse_line(const char *line, size_t len, struct lg_ld_item *it, char *err,
                           size_t errlen);
int lg_ld_trace_write(const char *path, const struct lg_ld_item *items, size_t n);

/* ---- SSE scanning and chunk inspection (sse.c) ------------------------------ */

/* Called once per complete event with its data (lines joined by '\n'); the
 * bytes are valid during the call only. Return 0 to go on, non-zero to stop. */
typedef int (*lg_ld_sse_event_fn)(void *arg, const char *data, size_t len);

/* Incremental text/event-stream scanner. Its buffers grow to the largest
 * event seen (bounded by max_event) and are kept, so a steady stream
 * allocates nothing per event. */
struct lg_ld_sse {
    char *line; /* owned: a line split across feeds */
    size_t line_len;
    size_t line_cap;
    char *data; /* owned: the current event's data */
    size_t data_len;
    size_t data_cap;
    size_t max_event; /* bytes; larger lines or events fail with LG_EPROTO */
    bool has_data;    /* a data field was seen in the current event */
    bool skip_lf;     /* the previous feed ended on CR */
};

void lg_ld_sse_init(struct lg_ld_sse *s, size_t max_event);
void lg_ld_sse_reset(struct lg_ld_sse *s);
void lg_ld_sse_free(struct lg_ld_sse *s);
/* Feeds bytes; returns LG_OK, LG_EPROTO (event too large), or the first
 * non-zero value a callback returned. */
int lg_ld_sse_feed(struct lg_ld_sse *s, const char *p, size_t n, lg_ld_sse_event_fn fn, void *arg);

/* What llmload needs to know about one response JSON object (a streamed
 * chunk or a whole non-streamed body). */
struct lg_ld_chunk {
    bool content;   /* non-empty delta/message content, text,
                                   reasoning_content or tool_calls */
    bool has_usage; /* usage.completion_tokens was present */
    int64_t completion_tokens;
    bool error; /* a top-level "error" member */
};

/* Walks one JSON document without allocating. Returns LG_OK, or LG_EPROTO if
 * the text is not a single valid JSON value (nesting bounded at 64). */
int lg_ld_chunk_inspect(const char *p, size_t n, struct lg_ld_chunk *out);

/* ---- statistics (stats.c) ----------------------------------------------------- */

/* Nearest-rank percentile (p in [0, 100]) of a sorted array; 0 when n == 0. */
double lg_ld_percentile(const double *sorted, size_t n, double p);
void lg_ld_sort(double *v, size_t n);

/* Log-linear histogram of nanosecond values: exact below 1024 ns, then 512
 * sub-buckets per power of two (relative error under 0.2%). */
#define LG_LD_HIST_BUCKETS (55 * 512 + 512)

struct lg_ld_hist {
    uint64_t count;
    uint64_t sum;      /* ns */
    uint64_t max;      /* ns */
    uint64_t *buckets; /* owned, LG_LD_HIST_BUCKETS */
};

void lg_ld_hist_init(struct lg_ld_hist *h);
void lg_ld_hist_free(struct lg_ld_hist *h);
void lg_ld_hist_add(struct lg_ld_hist *h, uint64_t v);
/* Nearest-rank percentile, as a bucket midpoint clamped to the maximum. */
uint64_t lg_ld_hist_percentile(const struct lg_ld_hist *h, double p);
size_t lg_ld_hist_index(uint64_t v);
uint64_t lg_ld_hist_lower(size_t idx);

/* ---- the run (run.c) and the report (report.c) -------------------------------- */

enum lg_ld_err {
    LG_LD_ERR_NONE = 0,
    LG_LD_ERR_CONNECT,
    LG_LD_ERR_STATUS,
    LG_LD_ERR_CUT,
    LG_LD_ERR_TIMEOUT,
    LG_LD_ERR_INVALID,
    LG_LD_ERR_COUNT
};

const char *lg_ld_err_name(enum lg_ld_err e);

#define LG_LD_REC_F_LAUNCHED (1u << 0) /* given a connection */
#define LG_LD_REC_F_SENT     (1u << 1) /* t_send_ns is set */
#define LG_LD_REC_F_FIRST    (1u << 2) /* t_first_ns is set */
#define LG_LD_REC_F_DONE     (1u << 3) /* finished, outcome recorded */
#define LG_LD_REC_F_RETRIED  (1u << 4) /* resent once after a stale keep-alive */

/* One request's outcome. Times are nanoseconds from the run's start. */
struct lg_ld_rec {
    uint64_t t_sched_ns; /* scheduled arrival */
    uint64_t t_start_ns; /* handed to a connection */
    uint64_t t_send_ns;  /* last request byte written to the socket */
    uint64_t t_first_ns; /* first content event */
    uint64_t t_last_ns;  /* latest content event */
    uint64_t t_end_ns;   /* finished */
    uint64_t itl_sum_ns;
    uint64_t itl_max_ns;
    int64_t usage_tokens; /* usage.completion_tokens, -1 = absent */
    uint32_t itl_n;
    uint32_t events; /* content events */
    uint32_t prompt_bytes;
    uint32_t max_tokens;
    int32_t group;
    uint16_t status;  /* HTTP status, 0 = no response head */
    uint16_t replica; /* index into the replica table + 1, 0 = none */
    uint8_t error;    /* enum lg_ld_err */
    uint8_t flags;    /* LG_LD_REC_F_* */
};

#define LG_LD_MAX_REPLICAS 256

/* What the report needs from a finished run. */
struct lg_ld_result {
    const struct lg_ld_opts *o;
    const struct lg_ld_rec *recs;   /* borrowed */
    const struct lg_ld_item *items; /* borrowed, parallel to recs */
    size_t n;                       /* launched requests */
    const struct lg_ld_hist *itl;   /* borrowed */
    char *const *replicas;          /* borrowed names, index = rec.replica - 1 */
    size_t n_replicas;
    uint64_t elapsed_ns;    /* start to last completion */
    uint64_t start_wall_ns; /* CLOCK_REALTIME at the start */
    bool interrupted;
};

/* Runs the load; fills res. Returns LG_OK, or LG_ERR when it could not run. */
struct lg_ld_run;
int lg_ld_run_new(struct lg_ld_run **out, const struct lg_ld_opts *o, struct lg_ld_item *items,
                  size_t n_items);
int lg_ld_run_go(struct lg_ld_run *run, struct lg_ld_result *res);
void lg_ld_run_free(struct lg_ld_run *run);

int lg_ld_report_json(const struct lg_ld_result *res, const char *path);
int lg_ld_report_log(const struct lg_ld_result *res, const char *path);
void lg_ld_report_table(const struct lg_ld_result *res, FILE *f);

#endif /* LG_LLMLOAD_H */
