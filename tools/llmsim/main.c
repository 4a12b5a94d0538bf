/*
 * main.c: llmsim's command line: options, validation, --help, then one
 * replica run until SIGTERM.
 *
 * Owns: the configuration (struct lg_sim_conf) for the process's lifetime.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "base/lg_core.h"
#include "lg_version.h"
#include "metrics.h"
#include "sim.h"

static const char llmsim_usage[] =
    "usage: llmsim [OPTIONS]\n"
    "\n"
    "A simulated OpenAI-compatible LLM engine replica for tests and benchmarks:\n"
    "continuous batching over --slots, a FIFO queue, prefill time proportional to\n"
    "the uncached prompt, decode steps that slow down as the batch grows, a prefix\n"
    "cache, engine-specific /metrics, and faults on a schedule.\n"
    "\n"
    "Endpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings,\n"
    "POST /v1/responses, POST /v1/messages, POST /v1/messages/count_tokens,\n"
    "GET /v1/models, GET /health, GET /metrics, GET /props (llamacpp flavor: its\n"
    "slots as total_slots), GET /load and GET /v1/loads (when asked, below); test\n"
    "control: GET /sim/state,\n"
    "POST /sim/control {\"speed\": F, \"fault\": SPEC or [SPEC...], \"clear_faults\": true}.\n"
    "\n"
    "Server:\n"
    "  --listen HOST:PORT          address to listen on; port 0 picks one\n"
    "                              (default 127.0.0.1:8000). Once bound, prints\n"
    "                              \"llmsim ready name=NAME listen=ADDR:PORT\"\n"
    "  --name NAME                 replica name, sent in every response as\n"
    "                              X-Llmsim-Replica (default llmsim)\n"
    "  --model M                   served model name; repeatable (default m).\n"
    "                              Requests for another model get 404\n"
    "  --flavor F                  /metrics vocabulary: vllm, sglang, tgi or\n"
    "                              llamacpp (default vllm)\n"
    "  --ready-file PATH           also write the ready line into PATH\n"
    "  --state-shm PATH            publish the live state in a shared file (e.g.\n"
    "                              under /dev/shm) for an oracle routing policy;\n"
    "                              layout in tools/llmsim/llmsim_shm.h\n"
    "  --max-body-bytes N          request body limit, 413 beyond (default 64 MiB)\n"
    "  --max-header-bytes N        request head limit, 431 beyond (default 64 KiB)\n"
    "  --step-log PATH             write the engine's every step, admission,\n"
    "                              preemption and first token into PATH, one JSON\n"
    "                              object a line, times in wall-clock ms (for\n"
    "                              analysing a tail; off by default)\n"
    "  --quiet                     log warnings and errors only\n"
    "  --log-level L               error, warn, info or debug (default info)\n"
    "\n"
    "Load reports (each in its engine's own format; off unless given):\n"
    "  --endpoint-load-metrics M   answer vLLM's request header\n"
    "                              endpoint-load-metrics-format: TEXT|JSON with an\n"
    "                              endpoint-load-metrics response header (waiting\n"
    "                              requests, KV use): off (default), vllm (answers\n"
    "                              that are not streamed, as vLLM's server), all\n"
    "                              (streamed answers too, in their head)\n"
    "  --enable-server-load-tracking\n"
    "                              answer vLLM's GET /load: {\"server_load\":N}, the\n"
    "                              inference requests being served\n"
    "  --v1-loads                  answer SGLang's GET /v1/loads (?include=,\n"
    "                              ?dp_rank=): running, waiting, KV tokens and use,\n"
    "                              throughput, per rank and aggregated\n"
    "\n"
    "Engine model (deterministic for a given --seed and arrival times):\n"
    "  --slots N                   sequences running at once; more wait in a FIFO\n"
    "                              queue (default 8)\n"
    "  --schedule S                what a step computes: fcfs (default), prefill-first\n"
    "                              or chunked (see below)\n"
    "  --step-tokens N             chunked: tokens one step computes at most, one\n"
    "                              per decoding sequence and the rest prefill; at\n"
    "                              least --slots (default 2048)\n"
    "  --scheduling-policy P       the waiting queue's order, as vLLM's flag: fcfs\n"
    "                              (default) or priority (the body's \"priority\",\n"
    "                              lower first, then arrival)\n"
    "  --priority-preemption-threshold N\n"
    "                              priority: a waiting request whose priority is\n"
    "                              lower by more than N than a running one's takes\n"
    "                              its slot when none is free (SGLang's priority\n"
    "                              preemption; the preempted one waits and later\n"
    "                              computes its tokens again); default: never\n"
    "  --speed F                   relative speed of the replica: every duration\n"
    "                              is divided by F; 1 = baseline, 0.5 = half as\n"
    "                              fast (a slower GPU or a bigger model), 2 =\n"
    "                              twice as fast (default 1)\n"
    "  --prefill-us-per-token X    prefill cost per uncached prompt token, in\n"
    "                              microseconds (default 100)\n"
    "  --prefill-fixed-ms X        added to every step that prefills anything, in\n"
    "                              milliseconds (default 0)\n"
    "  --decode-ms BASE            decode step cost, in milliseconds (default 15)\n"
    "  --decode-ms-per-seq X       added to each step per running sequence, in\n"
    "                              milliseconds (default 0.5)\n"
    "  --decode-batch-exp E        the batch's exponent in that term: per_seq *\n"
    "                              batch^E (default 1: linear; above 1 a big batch\n"
    "                              slows every step more than in proportion)\n"
    "  --jitter SIGMA              every step lasts its time times a lognormal\n"
    "                              factor of mean 1 and this sigma, drawn from\n"
    "                              --seed (default 0: none)\n"
    "  --gauge-lag-ms MS           a sequence that ended stays in /metrics' running\n"
    "                              count this long, as in an engine that sets its\n"
    "                              gauges once a step (default 0: gone at once)\n"
    "  --max-tokens-default N      tokens generated when a request has no\n"
    "                              max_tokens (default 16)\n"
    "  --seed S                    seeds token texts (position mode), ids, jitter\n"
    "                              and the random faults (default 0)\n"
    "  --text MODE                 position: token i's text is a function of --seed\n"
    "                              and i, the same for every request (default);\n"
    "                              context: a function of the model name, the\n"
    "                              request's \"seed\" and all the text before it\n"
    "                              (the prompt as rendered, then the answer so far),\n"
    "                              the same on every replica, so that a\n"
    "                              continuation (chat: the answer so far as a final\n"
    "                              assistant message with continue_final_message;\n"
    "                              completions: appended to the prompt) goes on\n"
    "                              exactly as the answer would have\n"
    "  --role-chunk                chat streams open with a role-only chunk\n"
    "                              (content \"\"), as vLLM and SGLang write them\n"
    "  --prefix-block-tokens N     prefix-cache block size in tokens; 0 disables\n"
    "                              the cache (default 16)\n"
    "  --prefix-cache-blocks N     prefix-cache capacity in blocks, LRU; also the\n"
    "                              KV capacity behind the usage gauges; 0\n"
    "                              disables the cache (default 8192)\n"
    "  --embedding-dim N           numbers per embedding vector (default 8)\n"
    "\n"
    "  A step computes a batch of B sequences, P of whose prompt tokens it\n"
    "  prefills, and lasts\n"
    "    ((P > 0 ? fixed : 0) + X * P + BASE + per_seq * B^E) / F   (x jitter)\n"
    "  and ends with one token for every sequence of its batch whose prompt is\n"
    "  all prefilled; a sequence's first token ends the step that finished its\n"
    "  prefill. The schedule decides the batch when the step starts:\n"
    "    fcfs           admit waiting sequences into free slots (FIFO), prefill\n"
    "                   them whole; the batch is every running sequence\n"
    "    prefill-first  while a sequence waits and a slot is free, admit what\n"
    "                   fits and prefill it whole in a step of its own (the\n"
    "                   running sequences emit nothing); else as fcfs\n"
    "    chunked        one token for every decoding sequence, then the rest of\n"
    "                   --step-tokens to the unfinished prefill, then to waiting\n"
    "                   sequences admitted while a slot is free (a prompt may\n"
    "                   take several steps)\n"
    "  Prompt size in tokens = bytes of the\n"
    "  message contents (or prompt strings) / 4, at least 1. Exactly max_tokens\n"
    "  tokens are generated (\" tok17\"...), finish_reason \"length\"; a body\n"
    "  member \"sim_completion_tokens\": N stops after N (finish_reason \"stop\").\n"
    "\n"
    "Faults (--fault SPEC, repeatable; T counts from start, or from the control\n"
    "request for POST /sim/control; T, D, F are decimals, e.g. 2 or 0.25):\n"
    "  slow@T:F[:D]                from T, F times slower, for D seconds (no D:\n"
    "                              for good)\n"
    "  stall@T[:D]                 accept and read requests but answer nothing and\n"
    "                              emit no token (streams freeze); /sim/* still\n"
    "                              answers; held requests are served when it ends\n"
    "  status@T:CODE:D[:RETRY]     answer inference requests with CODE (400..599),\n"
    "                              an OpenAI-style error body and Retry-After: RETRY\n"
    "                              seconds (default: the rest of the window), for\n"
    "                              D seconds\n"
    "  crash@T[:reset]             exit(1) abruptly at T, streams in flight included;\n"
    "                              with :reset every open connection gets RST\n"
    "                              (ECONNRESET), not a FIN\n"
    "  close-after-tokens:N        close the connection of every generation after\n"
    "                              N tokens, mid-stream, without the final chunk\n"
    "                              (generations of N tokens or fewer complete)\n"
    "  stall-random:RATE:D         stalls as stall@ that begin at random: gaps\n"
    "                              exponential with mean 1/RATE seconds, each D\n"
    "                              seconds long (a GC pause, a preempted batch)\n"
    "  stall-first:P:D             hold each generation's first token D seconds\n"
    "                              with probability P (0..1), the sequence outside\n"
    "                              the batch meanwhile; drawn by the request's rank\n"
    "  The random ones draw from --seed and the fault's rank: a run repeats.\n"
    "\n"
    "A client that disconnects aborts its sequence at once (its slot is freed);\n"
    "aborts are counted in /metrics (llmsim_aborted_total) and /sim/state.\n"
    "SIGTERM or SIGINT: exit 0.\n";

enum {
    OPT_LISTEN = 256,
    OPT_NAME,
    OPT_MODEL,
    OPT_SLOTS,
    OPT_SPEED,
    OPT_SEED,
    OPT_FLAVOR,
    OPT_PREFILL,
    OPT_DECODE,
    OPT_DECODE_PER_SEQ,
    OPT_SCHEDULE,
    OPT_STEP_TOKENS,
    OPT_POLICY,
    OPT_PREEMPT,
    OPT_PREFILL_FIXED,
    OPT_DECODE_EXP,
    OPT_JITTER,
    OPT_GAUGE_LAG,
    OPT_MAX_TOKENS,
    OPT_TEXT,
    OPT_ROLE_CHUNK,
    OPT_BLOCK_TOKENS,
    OPT_CACHE_BLOCKS,
    OPT_EMBED_DIM,
    OPT_MAX_BODY,
    OPT_MAX_HEADER,
    OPT_FAULT,
    OPT_STATE_SHM,
    OPT_READY_FILE,
    OPT_STEP_LOG,
    OPT_QUIET,
    OPT_LOG_LEVEL,
    OPT_LOAD_HEADER,
    OPT_SERVER_LOAD,
    OPT_V1_LOADS,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option llmsim_options[] = {
    { "listen", required_argument, NULL, OPT_LISTEN },
    { "name", required_argument, NULL, OPT_NAME },
    { "model", required_argument, NULL, OPT_MODEL },
    { "slots", required_argument, NULL, OPT_SLOTS },
    { "speed", required_argument, NULL, OPT_SPEED },
    { "seed", required_argument, NULL, OPT_SEED },
    { "flavor", required_argument, NULL, OPT_FLAVOR },
    { "prefill-us-per-token", required_argument, NULL, OPT_PREFILL },
    { "decode-ms", required_argument, NULL, OPT_DECODE },
    { "decode-ms-per-seq", required_argument, NULL, OPT_DECODE_PER_SEQ },
    { "schedule", required_argument, NULL, OPT_SCHEDULE },
    { "step-tokens", required_argument, NULL, OPT_STEP_TOKENS },
    { "scheduling-policy", required_argument, NULL, OPT_POLICY },
    { "priority-preemption-threshold", required_argument, NULL, OPT_PREEMPT },
    { "prefill-fixed-ms", required_argument, NULL, OPT_PREFILL_FIXED },
    { "decode-batch-exp", required_argument, NULL, OPT_DECODE_EXP },
    { "jitter", required_argument, NULL, OPT_JITTER },
    { "gauge-lag-ms", required_argument, NULL, OPT_GAUGE_LAG },
    { "max-tokens-default", required_argument, NULL, OPT_MAX_TOKENS },
    { "text", required_argument, NULL, OPT_TEXT },
    { "role-chunk", no_argument, NULL, OPT_ROLE_CHUNK },
    { "prefix-block-tokens", required_argument, NULL, OPT_BLOCK_TOKENS },
    { "prefix-cache-blocks", required_argument, NULL, OPT_CACHE_BLOCKS },
    { "embedding-dim", required_argument, NULL, OPT_EMBED_DIM },
    { "max-body-bytes", required_argument, NULL, OPT_MAX_BODY },
    { "max-header-bytes", required_argument, NULL, OPT_MAX_HEADER },
    { "fault", required_argument, NULL, OPT_FAULT },
    { "state-shm", required_argument, NULL, OPT_STATE_SHM },
    { "ready-file", required_argument, NULL, OPT_READY_FILE },
    { "step-log", required_argument, NULL, OPT_STEP_LOG },
    { "quiet", no_argument, NULL, OPT_QUIET },
    { "endpoint-load-metrics", required_argument, NULL, OPT_LOAD_HEADER },
    { "enable-server-load-tracking", no_argument, NULL, OPT_SERVER_LOAD },
    { "v1-loads", no_argument, NULL, OPT_V1_LOADS },
    { "log-level", required_argument, NULL, OPT_LOG_LEVEL },
    { "help", no_argument, NULL, OPT_HELP },
    { "version", no_argument, NULL, OPT_VERSION },
    { NULL, 0, NULL, 0 },
};

static bool
main_uint(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v < min || v > max) {
        fprintf(stderr, "llmsim: --%s %s: expected an integer within %" PRIu64 "..%" PRIu64 "\n",
                opt, s, min, max);
        return false;
    }
    *out = v;
    return true;
}

static bool
main_double(const char *opt, const char *s, double min, double max, bool min_exclusive, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v) || v > max
        || (min_exclusive ? v <= min : v < min)) {
        fprintf(stderr, "llmsim: --%s %s: expected a number %s %g and <= %g\n", opt, s,
                min_exclusive ? ">" : ">=", min, max);
        return false;
    }
    *out = v;
    return true;
}

/* Prometheus label values escape backslash, double quote and newline. */
static char *
main_label_escape(const char *s)
{
    size_t n = strlen(s);
    char *out = lg_xmalloc(2 * n + 1);
    char *p = out;

    for (; *s; s++) {
        if (*s == '\\' || *s == '"') {
            *p++ = '\\';
            *p++ = *s;
        } else if (*s == '\n') {
            *p++ = '\\';
            *p++ = 'n';
        } else {
            *p++ = *s;
        }
    }
    *p = '\0';
    return out;
}

static bool
main_add_model(struct lg_sim_conf *conf, const char *name)
{
    struct lg_sim_model *m;
    size_t n = strlen(name);

    if (n == 0 || n > LG_SIM_API_MODEL_MAX) {
        fprintf(stderr, "llmsim: --model: 1 to %d bytes\n", LG_SIM_API_MODEL_MAX);
        return false;
    }
    for (const char *p = name; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            fprintf(stderr, "llmsim: --model: control characters are not allowed\n");
            return false;
        }
    }
    conf->models = lg_xrealloc(conf->models, (conf->nmodels + 1) * sizeof(*conf->models));
    m = &conf->models[conf->nmodels];
    m->json = lg_sim_api_json_escape(name);
    if (m->json == NULL) {
        fprintf(stderr, "llmsim: --model %s: not valid UTF-8\n", name);
        return false;
    }
    m->name = lg_xstrdup(name);
    m->label = main_label_escape(name);
    conf->nmodels++;
    return true;
}

static bool
main_check_name(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n > 63) {
        fprintf(stderr, "llmsim: --name: 1 to 63 characters\n");
        return false;
    }
    for (const char *p = name; *p; p++) {
        if (*p <= ' ' || *p >= 0x7f || *p == '"' || *p == '\\') {
            fprintf(stderr,
                    "llmsim: --name %s: printable ASCII without spaces, quotes or "
                    "backslashes\n",
                    name);
            return false;
        }
    }
    return true;
}

static bool
main_flavor(const char *s, enum lg_sim_flavor *out)
{
    static const char *const names[] = { "vllm", "sglang", "tgi", "llamacpp" };

    for (size_t i = 0; i < LG_ARRAY_SIZE(names); i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = (enum lg_sim_flavor)i;
            return true;
        }
    }
    fprintf(stderr, "llmsim: --flavor %s: expected vllm, sglang, tgi or llamacpp\n", s);
    return false;
}

static void
main_conf_free(struct lg_sim_conf *conf)
{
    for (size_t i = 0; i < conf->nmodels; i++) {
        free(conf->models[i].name);
        free(conf->models[i].json);
        free(conf->models[i].label);
    }
    free(conf->models);
    free((void *)conf->faults);
}

/* Returns -1 to go on, or an exit status. */
static int
main_parse(int argc, char **argv, struct lg_sim_conf *conf)
{
    uint64_t u = 0;
    double d = 0;
    int opt;
    bool ok = true;

    while (ok && (opt = getopt_long(argc, argv, "h", llmsim_options, NULL)) != -1) {
        switch (opt) {
        case OPT_LISTEN:
            conf->listen = optarg;
            break;
        case OPT_NAME:
            conf->name = optarg;
            ok = main_check_name(optarg);
            break;
        case OPT_MODEL:
            ok = main_add_model(conf, optarg);
            break;
        case OPT_SLOTS:
            ok = main_uint("slots", optarg, 1, 65536, &u);
            conf->slots = (uint32_t)u;
            break;
        case OPT_SPEED:
            ok = main_double("speed", optarg, 0, 1e6, true, &conf->speed);
            break;
        case OPT_SEED:
            ok = main_uint("seed", optarg, 0, UINT64_MAX, &conf->seed);
            break;
        case OPT_FLAVOR:
            ok = main_flavor(optarg, &conf->flavor);
            break;
        case OPT_PREFILL:
            ok = main_double("prefill-us-per-token", optarg, 0, 1e6, false,
                             &conf->prefill_us_per_token);
            break;
        case OPT_DECODE:
            ok = main_double("decode-ms", optarg, 0, 1e6, false, &conf->decode_ms);
            break;
        case OPT_DECODE_PER_SEQ:
            ok = main_double("decode-ms-per-seq", optarg, 0, 1e6, false, &d);
            conf->decode_ms_per_seq = d;
            break;
        case OPT_SCHEDULE:
            if (lg_sim_schedule_parse(optarg, &conf->schedule) != LG_OK) {
                fprintf(stderr, "llmsim: --schedule %s: expected fcfs, prefill-first or chunked\n",
                        optarg);
                ok = false;
            }
            break;
        case OPT_STEP_TOKENS:
            ok = main_uint("step-tokens", optarg, 1, 1u << 24, &u);
            conf->step_tokens = (uint32_t)u;
            break;
        case OPT_POLICY:
            if (lg_sim_policy_parse(optarg, &conf->policy) != LG_OK) {
                fprintf(stderr, "llmsim: --scheduling-policy %s: expected fcfs or priority\n",
                        optarg);
                ok = false;
            }
            break;
        case OPT_PREEMPT:
            ok = main_uint("priority-preemption-threshold", optarg, 0, INT32_MAX, &u);
            conf->preempt_threshold = (int32_t)u;
            break;
        case OPT_PREFILL_FIXED:
            ok = main_double("prefill-fixed-ms", optarg, 0, 1e6, false, &conf->prefill_fixed_ms);
            break;
        case OPT_DECODE_EXP:
            ok = main_double("decode-batch-exp", optarg, 0, 4, false, &conf->decode_batch_exp);
            break;
        case OPT_JITTER:
            ok = main_double("jitter", optarg, 0, 2, false, &conf->jitter);
            break;
        case OPT_GAUGE_LAG:
            ok = main_double("gauge-lag-ms", optarg, 0, 60000, false, &conf->gauge_lag_ms);
            break;
        case OPT_MAX_TOKENS:
            ok = main_uint("max-tokens-default", optarg, 1, LG_SIM_API_MAX_TOKENS, &u);
            conf->max_tokens_default = (uint32_t)u;
            break;
        case OPT_TEXT:
            if (strcmp(optarg, "position") == 0 || strcmp(optarg, "context") == 0) {
                conf->text_context = optarg[0] == 'c';
            } else {
                fprintf(stderr, "llmsim: --text %s: expected position or context\n", optarg);
                ok = false;
            }
            break;
        case OPT_LOAD_HEADER:
            if (lg_sim_load_header_mode_parse(optarg, &conf->load_header) != LG_OK) {
                fprintf(stderr, "llmsim: --endpoint-load-metrics %s: expected off, vllm or all\n",
                        optarg);
                ok = false;
            }
            break;
        case OPT_SERVER_LOAD:
            conf->server_load_tracking = true;
            break;
        case OPT_V1_LOADS:
            conf->v1_loads = true;
            break;
        case OPT_ROLE_CHUNK:
            conf->role_chunk = true;
            break;
        case OPT_BLOCK_TOKENS:
            ok = main_uint("prefix-block-tokens", optarg, 0, 1u << 20, &u);
            conf->prefix_block_tokens = (uint32_t)u;
            break;
        case OPT_CACHE_BLOCKS:
            ok = main_uint("prefix-cache-blocks", optarg, 0, 1u << 24, &u);
            conf->prefix_cache_blocks = (uint32_t)u;
            break;
        case OPT_EMBED_DIM:
            ok = main_uint("embedding-dim", optarg, 1, 65536, &u);
            conf->embedding_dim = (uint32_t)u;
            break;
        case OPT_MAX_BODY:
            ok = main_uint("max-body-bytes", optarg, 1, 1ull << 32, &u);
            conf->max_body_bytes = (size_t)u;
            break;
        case OPT_MAX_HEADER:
            ok = main_uint("max-header-bytes", optarg, 256, 1u << 24, &u);
            conf->max_header_bytes = (size_t)u;
            break;
        case OPT_FAULT: {
            struct lg_sim_fault f;
            char err[192];

            if (lg_sim_fault_parse(optarg, &f, err, sizeof(err)) != LG_OK) {
                fprintf(stderr, "llmsim: --fault %s: %s\n", optarg, err);
                ok = false;
                break;
            }
            conf->faults = lg_xrealloc((void *)conf->faults, (conf->nfaults + 1) * sizeof(char *));
            conf->faults[conf->nfaults++] = optarg;
            break;
        }
        case OPT_STATE_SHM:
            conf->state_shm = optarg;
            break;
        case OPT_READY_FILE:
            conf->ready_file = optarg;
            break;
        case OPT_STEP_LOG:
            conf->step_log = optarg;
            break;
        case OPT_QUIET:
            conf->quiet = true;
            lg_log_threshold = LG_LOG_WARN;
            break;
        case OPT_LOG_LEVEL:
            if (lg_log_level_parse(optarg, &lg_log_threshold) != LG_OK) {
                fprintf(stderr, "llmsim: --log-level %s: expected error, warn, info or debug\n",
                        optarg);
                ok = false;
            }
            break;
        case 'h':
        case OPT_HELP:
            fputs(llmsim_usage, stdout);
            return 0;
        case OPT_VERSION:
            printf("llmsim %s (%s)\n", LG_VERSION, LG_GIT_REV);
            return 0;
        default:
            fprintf(stderr, "Try 'llmsim --help'.\n");
            return 2;
        }
    }
    if (!ok) {
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "llmsim: unexpected argument '%s'\nTry 'llmsim --help'.\n", argv[optind]);
        return 2;
    }
    if (conf->nmodels == 0 && !main_add_model(conf, "m")) {
        return 2;
    }
    if (conf->preempt_threshold >= 0 && conf->policy != LG_SIM_POLICY_PRIORITY) {
        fprintf(stderr,
                "llmsim: --priority-preemption-threshold: only with --scheduling-policy priority\n");
        return 2;
    }
    if (conf->schedule != LLMSIM_SHM_SCHED_CHUNKED && conf->step_tokens != 0) {
        fprintf(stderr, "llmsim: --step-tokens: only with --schedule chunked\n");
        return 2;
    }
    if (conf->schedule == LLMSIM_SHM_SCHED_CHUNKED) {
        conf->step_tokens = conf->step_tokens ? conf->step_tokens : 2048;
        if (conf->step_tokens < conf->slots) {
            fprintf(stderr,
                    "llmsim: --step-tokens %u: at least --slots (%u), so every decoding "
                    "sequence fits in a step\n",
                    conf->step_tokens, conf->slots);
            return 2;
        }
    }
    return -1;
}

int
main(int argc, char **argv)
{
    struct lg_sim_conf conf = {
        .listen = "127.0.0.1:8000",
        .name = "llmsim",
        .slots = 8,
        .speed = 1.0,
        .flavor = LG_SIM_FLAVOR_VLLM,
        .prefill_us_per_token = 100,
        .decode_ms = 15,
        .decode_ms_per_seq = 0.5,
        .decode_batch_exp = 1.0,
        .schedule = LLMSIM_SHM_SCHED_FCFS,
        .preempt_threshold = -1,
        .max_tokens_default = 16,
        .prefix_block_tokens = 16,
        .prefix_cache_blocks = 8192,
        .embedding_dim = 8,
        .max_body_bytes = 64u << 20,
        .max_header_bytes = 64u << 10,
    };
    struct lg_sim sim;
    int rc = main_parse(argc, argv, &conf);

    if (rc >= 0) {
        main_conf_free(&conf);
        return rc;
    }
    if (lg_sim_init(&sim, &conf) != LG_OK) {
        lg_sim_free(&sim);
        main_conf_free(&conf);
        return 1;
    }
    LG_INFO("replica %s: %zu model(s), %u slots, schedule %s, policy %s, speed %g, flavor %s",
            conf.name, conf.nmodels, conf.slots, lg_sim_schedule_name(conf.schedule),
            lg_sim_policy_name(conf.policy), conf.speed,
            lg_sim_flavor_name(conf.flavor));
    rc = lg_sim_run(&sim);
    lg_sim_free(&sim);
    main_conf_free(&conf);
    return rc;
}
