/*
 * opts.c: llmload's command line: the flag table, --help, and validation
 * into a struct lg_ld_opts.
 * Owns: the compact --extra-body text. Borrows: every other string, from argv.
 * Errors are written into the caller's buffer (never printed here), so the
 * parser can be driven by tests and the fuzzer.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "llmload.h"

enum opts_id {
    OPT_URL = 256,
    OPT_MODEL,
    OPT_API,
    OPT_PATH,
    OPT_RATE,
    OPT_DURATION,
    OPT_CONCURRENCY,
    OPT_REQUESTS,
    OPT_STREAM,
    OPT_NO_STREAM,
    OPT_SEED,
    OPT_PROMPT_BYTES,
    OPT_MAX_TOKENS,
    OPT_INCLUDE_USAGE,
    OPT_TIMEOUT,
    OPT_CONNECT_TIMEOUT,
    OPT_HEADER,
    OPT_JSON,
    OPT_LOG,
    OPT_PROGRESS,
    OPT_QUIET,
    OPT_REUSE,
    OPT_NO_REUSE,
    OPT_MAX_CONNS,
    OPT_PREFIX_GROUPS,
    OPT_PREFIX_BYTES,
    OPT_PREFIX_DIST,
    OPT_ZIPF_S,
    OPT_BURST,
    OPT_TRACE_OUT,
    OPT_TRACE_IN,
    OPT_DRY_RUN,
    OPT_REPLICA_HEADER,
    OPT_EXTRA_BODY,
    OPT_REALTIME,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option opts_long[] = {
    { "url", required_argument, NULL, OPT_URL },
    { "model", required_argument, NULL, OPT_MODEL },
    { "api", required_argument, NULL, OPT_API },
    { "path", required_argument, NULL, OPT_PATH },
    { "rate", required_argument, NULL, OPT_RATE },
    { "duration", required_argument, NULL, OPT_DURATION },
    { "concurrency", required_argument, NULL, OPT_CONCURRENCY },
    { "requests", required_argument, NULL, OPT_REQUESTS },
    { "stream", no_argument, NULL, OPT_STREAM },
    { "no-stream", no_argument, NULL, OPT_NO_STREAM },
    { "seed", required_argument, NULL, OPT_SEED },
    { "prompt-bytes", required_argument, NULL, OPT_PROMPT_BYTES },
    { "max-tokens", required_argument, NULL, OPT_MAX_TOKENS },
    { "include-usage", no_argument, NULL, OPT_INCLUDE_USAGE },
    { "timeout", required_argument, NULL, OPT_TIMEOUT },
    { "connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT },
    { "header", required_argument, NULL, OPT_HEADER },
    { "json", required_argument, NULL, OPT_JSON },
    { "log", required_argument, NULL, OPT_LOG },
    { "progress", no_argument, NULL, OPT_PROGRESS },
    { "quiet", no_argument, NULL, OPT_QUIET },
    { "connections-reuse", no_argument, NULL, OPT_REUSE },
    { "no-connections-reuse", no_argument, NULL, OPT_NO_REUSE },
    { "max-connections", required_argument, NULL, OPT_MAX_CONNS },
    { "prefix-groups", required_argument, NULL, OPT_PREFIX_GROUPS },
    { "prefix-bytes", required_argument, NULL, OPT_PREFIX_BYTES },
    { "prefix-dist", required_argument, NULL, OPT_PREFIX_DIST },
    { "zipf-s", required_argument, NULL, OPT_ZIPF_S },
    { "burst", required_argument, NULL, OPT_BURST },
    { "trace-out", required_argument, NULL, OPT_TRACE_OUT },
    { "trace-in", required_argument, NULL, OPT_TRACE_IN },
    { "dry-run", no_argument, NULL, OPT_DRY_RUN },
    { "replica-header", required_argument, NULL, OPT_REPLICA_HEADER },
    { "extra-body", required_argument, NULL, OPT_EXTRA_BODY },
    { "realtime", no_argument, NULL, OPT_REALTIME },
    { "help", no_argument, NULL, OPT_HELP },
    { "version", no_argument, NULL, OPT_VERSION },
    { NULL, 0, NULL, 0 },
};

void
lg_ld_opts_usage(FILE *f)
{
    fputs("usage: llmload --url http://HOST:PORT --model M (--rate R | --concurrency C |\n"
          "               --trace-in FILE) [--duration S] [--requests N] [options]\n"
          "\n"
          "Load generator for OpenAI-compatible endpoints: measures what users feel (TTFT,\n"
          "inter-token gaps, end-to-end time) under open-loop or closed-loop load.\n"
          "\n"
          "Target:\n"
          "  --url URL             base URL, http://HOST:PORT[/BASE]; BASE defaults to /v1\n"
          "  --model M             model name sent in every request (required)\n"
          "  --api chat|completions|embeddings\n"
          "                        BASE/chat/completions (default), BASE/completions or\n"
          "                        BASE/embeddings\n"
          "  --path P              request path, overriding --api's\n"
          "  --header 'K: V'       extra request header (repeatable), e.g. Authorization\n"
          "  --extra-body JSON     object whose members are added to every body,\n"
          "                        e.g. '{\"ignore_eos\":true,\"temperature\":0}'\n"
          "  --replica-header H    response header naming the replica (X-Llmsim-Replica)\n"
          "\n"
          "Load shape (exactly one of --rate, --concurrency, --trace-in):\n"
          "  --rate R              open loop: Poisson arrivals at R requests/s\n"
          "  --burst F:ON:OFF      modulate --rate: R*F during ON seconds, then a lower rate\n"
          "                        during OFF seconds chosen so the mean stays R\n"
          "                        (needs F*ON <= ON+OFF); the run starts in an ON window\n"
          "  --concurrency C       closed loop: C requests in flight, each sent as soon as\n"
          "                        the previous one on its slot finished\n"
          "  --trace-in FILE       open loop replaying a trace (from --trace-out) exactly;\n"
          "                        a line may name its own model, api, stream, extra_body\n"
          "  --duration S          stop starting requests after S (s, or with ms|s|m)\n"
          "  --requests N          stop after N requests\n"
          "  --max-connections N   open loop: most connections at once (8192); arrivals\n"
          "                        beyond wait, and their wait counts in ttft\n"
          "  --seed S              seed of every random choice (1): the same seed and flags\n"
          "                        give the same requests at the same offsets\n"
          "\n"
          "Requests:\n"
          "  --stream, --no-stream streamed SSE (default) or whole responses\n"
          "  --include-usage       ask for stream_options.include_usage\n"
          "  --prompt-bytes SPEC   bytes of each request's unique prompt part (256)\n"
          "  --max-tokens SPEC     max_tokens of each request (64)\n"
          "                        SPEC: N | A-B (uniform) | mix:P1%V1,P2%V2,... with each V\n"
          "                        N or A-B and the P adding up to 100, e.g. mix:90%800,10%64000\n"
          "  --prefix-groups G     each request belongs to a seeded group in [0,G) and starts\n"
          "  --prefix-bytes B      with that group's fixed B-byte system prompt\n"
          "  --prefix-dist uniform|zipf\n"
          "                        how groups are chosen (uniform); zipf: P(g) ~ 1/(g+1)^s\n"
          "  --zipf-s S            the zipf exponent (1.0)\n"
          "  --timeout S           per-request timeout, from connecting to the last byte (60)\n"
          "  --connect-timeout S   connect timeout (5)\n"
          "  --connections-reuse, --no-connections-reuse\n"
          "                        keep-alive connections (default) or one per request\n"
          "\n"
          "Output:\n"
          "  --json FILE           JSON summary\n"
          "  --log FILE            one JSON line per request\n"
          "  --trace-out FILE      the arrival trace (t_us, prompt_bytes, max_tokens, group)\n"
          "  --dry-run             build the trace (and --trace-out), send nothing\n"
          "  --progress, --quiet   a progress line on stderr every second (default), or none\n"
          "  --realtime            run under SCHED_FIFO (needs root or CAP_SYS_NICE), so that\n"
          "                        other work on a busy machine cannot delay llmload's clock\n"
          "  --help, --version\n"
          "\n"
          "ttft is measured from the scheduled arrival (client lateness included), ttft_send\n"
          "from the moment the request's last byte was written, both to the first event with\n"
          "non-empty content, text, reasoning_content or tool_calls. Exit status: 0 when the\n"
          "run completed (request errors are counted, not fatal), 2 on bad usage, 1 when it\n"
          "could not run.\n",
          f);
}

const char *
lg_ld_api_name(enum lg_ld_api api)
{
    static const char *const names[] = { "chat", "completions", "embeddings" };

    return names[api];
}

const char *
lg_ld_mode_name(enum lg_ld_mode mode)
{
    static const char *const names[] = { "open", "closed", "replay" };

    return names[mode];
}

static int
opts_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    if (s[0] < '0' || s[0] > '9') {
        return LG_EINVAL;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max) {
        return LG_EINVAL;
    }
    *out = v;
    return LG_OK;
}

static int
opts_double(const char *s, double min, double max, double *out)
{
    char *end;

    errno = 0;
    *out = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(*out) || *out < min || *out > max) {
        return LG_EINVAL;
    }
    return LG_OK;
}

/* http://HOST[:PORT][/BASE] -> host, port, path (BASE, or /v1, + the API's). */
static int
opts_url(struct lg_ld_opts *o, char *err, size_t errlen)
{
    const char *p = o->url, *host, *host_end, *port = NULL, *port_end = NULL, *base;
    static const char *const api_paths[] = { "/chat/completions", "/completions", "/embeddings" };
    size_t base_len;

    if (strncmp(p, "http://", 7) != 0) {
        snprintf(err, errlen, "--url '%s': only http:// URLs are supported", o->url);
        return LG_EINVAL;
    }
    p += 7;
    host = p;
    if (*p == '[') {
        host_end = strchr(p, ']');
        if (host_end == NULL) {
            snprintf(err, errlen, "--url '%s': unterminated [IPv6] host", o->url);
            return LG_EINVAL;
        }
        host++;
        p = host_end + 1;
    } else {
        while (*p != '\0' && *p != ':' && *p != '/') {
            p++;
        }
        host_end = p;
    }
    if (*p == ':') {
        port = ++p;
        while (*p >= '0' && *p <= '9') {
            p++;
        }
        port_end = p;
    }
    base = p;
    if (host_end == host || (size_t)(host_end - host) >= sizeof(o->host)
        || (*base != '\0' && *base != '/')
        || (port != NULL && (port_end == port || port_end - port > 5))) {
        snprintf(err, errlen, "--url '%s': expected http://HOST:PORT[/BASE]", o->url);
        return LG_EINVAL;
    }
    memcpy(o->host, host, (size_t)(host_end - host));
    o->host[host_end - host] = '\0';
    if (port != NULL) {
        uint64_t v = 0;

        memcpy(o->port, port, (size_t)(port_end - port));
        o->port[port_end - port] = '\0';
        if (opts_uint(o->port, 1, 65535, &v) != LG_OK) {
            snprintf(err, errlen, "--url '%s': bad port", o->url);
            return LG_EINVAL;
        }
    } else {
        snprintf(o->port, sizeof(o->port), "80");
    }
    if (strpbrk(base, " \r\n\t?#") != NULL) {
        snprintf(err, errlen, "--url '%s': the base path may not hold spaces, ? or #", o->url);
        return LG_EINVAL;
    }
    if (o->path_override != NULL) {
        if (o->path_override[0] != '/' || strpbrk(o->path_override, " \r\n\t") != NULL
            || strlen(o->path_override) >= sizeof(o->path)) {
            snprintf(err, errlen, "--path '%s': must start with / and hold no spaces",
                     o->path_override);
            return LG_EINVAL;
        }
        snprintf(o->path, sizeof(o->path), "%s", o->path_override);
        for (size_t i = 0; i < LG_ARRAY_SIZE(o->api_paths); i++) {
            snprintf(o->api_paths[i], sizeof(o->api_paths[i]), "%s", o->path_override);
        }
        return LG_OK;
    }
    base_len = strlen(base);
    while (base_len > 0 && base[base_len - 1] == '/') {
        base_len--;
    }
    if (base_len == 0) {
        base = "/v1";
        base_len = 3;
    }
    if (base_len + strlen("/chat/completions") >= sizeof(o->path)) {
        snprintf(err, errlen, "--url '%s': base path too long", o->url);
        return LG_EINVAL;
    }
    for (size_t i = 0; i < LG_ARRAY_SIZE(o->api_paths); i++) {
        snprintf(o->api_paths[i], sizeof(o->api_paths[i]), "%.*s%s", (int)base_len, base,
                 api_paths[i]);
    }
    snprintf(o->path, sizeof(o->path), "%s", o->api_paths[o->api]);
    return LG_OK;
}

/* An HTTP token (RFC 9110 section 5.6.2): a header name. */
static bool
opts_is_token(const char *s, size_t n)
{
    if (n == 0) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c <= ' ' || c >= 127 || strchr("()<>@,;:\\\"/[]?={}", c) != NULL) {
            return false;
        }
    }
    return true;
}

static int
opts_header(const char *h, char *err, size_t errlen)
{
    const char *colon = strchr(h, ':');

    if (colon == NULL || colon == h || strpbrk(h, "\r\n") != NULL) {
        snprintf(err, errlen, "--header '%s': expected 'Name: value' on one line", h);
        return LG_EINVAL;
    }
    if (!opts_is_token(h, (size_t)(colon - h))) {
        snprintf(err, errlen, "--header '%s': bad character in the name", h);
        return LG_EINVAL;
    }
    return LG_OK;
}

static int
opts_extra_body(struct lg_ld_opts *o, const char *s, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *j = json_loads(s, JSON_REJECT_DUPLICATES, &jerr);
    char *text;
    size_t n;

    if (j == NULL || !json_is_object(j)) {
        snprintf(err, errlen, "--extra-body: %s", j ? "must be a JSON object" : jerr.text);
        json_decref(j);
        return LG_EINVAL;
    }
    text = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (text == NULL) {
        snprintf(err, errlen, "--extra-body: cannot serialise");
        return LG_EINVAL;
    }
    n = strlen(text);
    free(o->extra_body);
    o->extra_body = NULL;
    if (n > 2) { /* strip the braces: the members are spliced into each body */
        o->extra_body = lg_xstrndup(text + 1, n - 2);
    }
    free(text);
    return LG_OK;
}

static void
opts_defaults(struct lg_ld_opts *o)
{
    char err[8];

    memset(o, 0, sizeof(*o));
    o->api = LG_LD_API_CHAT;
    o->replica_header = "X-Llmsim-Replica";
    o->stream = true;
    o->seed = 1;
    o->prompt_spec = "256";
    o->max_tokens_spec = "64";
    o->timeout_s = 60;
    o->connect_timeout_s = 5;
    o->reuse = true;
    o->progress = true;
    o->max_conns = 8192;
    o->zipf_s = 1.0;
    (void)lg_ld_spec_parse(&o->prompt_bytes, o->prompt_spec, LG_LD_MAX_PROMPT_BYTES, err,
                           sizeof(err));
    (void)lg_ld_spec_parse(&o->max_tokens, o->max_tokens_spec, LG_LD_MAX_TOKENS, err, sizeof(err));
}

/* Cross-flag checks once every flag is read. */
static int
opts_validate(struct lg_ld_opts *o, bool have_rate, bool have_conc, char *err, size_t errlen)
{
    int modes = have_rate + have_conc + (o->trace_in != NULL);

    if (modes != 1) {
        snprintf(err, errlen, "%s",
                 modes == 0 ? "one of --rate, --concurrency or --trace-in is required"
                            : "--rate, --concurrency and --trace-in exclude each other");
        return LG_EINVAL;
    }
    o->mode = have_rate ? LG_LD_MODE_OPEN : have_conc ? LG_LD_MODE_CLOSED : LG_LD_MODE_REPLAY;
    if (o->mode != LG_LD_MODE_REPLAY && o->duration_s == 0 && o->requests == 0) {
        snprintf(err, errlen, "--%s needs --duration or --requests",
                 have_rate ? "rate" : "concurrency");
        return LG_EINVAL;
    }
    if (o->mode == LG_LD_MODE_OPEN && o->requests == 0
        && o->rate * o->duration_s > 2.0 * LG_LD_MAX_TRACE_ITEMS) {
        snprintf(err, errlen, "--rate * --duration asks for more than %u requests",
                 LG_LD_MAX_TRACE_ITEMS);
        return LG_EINVAL;
    }
    if (o->requests > LG_LD_MAX_TRACE_ITEMS && o->mode != LG_LD_MODE_CLOSED) {
        snprintf(err, errlen, "--requests: at most %u in open loop", LG_LD_MAX_TRACE_ITEMS);
        return LG_EINVAL;
    }
    if (o->burst.enabled && o->mode != LG_LD_MODE_OPEN) {
        snprintf(err, errlen, "--burst needs --rate");
        return LG_EINVAL;
    }
    if ((o->prefix_groups == 0) != (o->prefix_bytes == 0)) {
        snprintf(err, errlen, "--prefix-groups and --prefix-bytes go together");
        return LG_EINVAL;
    }
    if (o->api == LG_LD_API_EMBEDDINGS) {
        o->stream = false;
    }
    if (o->mode == LG_LD_MODE_CLOSED) {
        o->max_conns = o->concurrency;
    }
    if (o->dry_run) {
        return LG_OK;
    }
    if (o->url == NULL) {
        snprintf(err, errlen, "--url is required");
        return LG_EINVAL;
    }
    if (o->model == NULL) {
        snprintf(err, errlen, "--model is required");
        return LG_EINVAL;
    }
    return opts_url(o, err, errlen);
}

int
lg_ld_opts_parse(struct lg_ld_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    bool have_rate = false, have_conc = false;
    int c, rc;

    opts_defaults(o);
    err[0] = '\0';
    optind = 0; /* glibc: 0 also re-initialises getopt's internal state */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", opts_long, NULL)) != -1) {
        const char *a = optarg;

        rc = LG_OK;
        switch (c) {
        case OPT_URL:
            o->url = a;
            break;
        case OPT_MODEL:
            o->model = a;
            if (a[0] == '\0') {
                snprintf(err, errlen, "--model: empty");
                return LG_EINVAL;
            }
            break;
        case OPT_API:
            if (strcmp(a, "chat") == 0) {
                o->api = LG_LD_API_CHAT;
            } else if (strcmp(a, "completions") == 0) {
                o->api = LG_LD_API_COMPLETIONS;
            } else if (strcmp(a, "embeddings") == 0) {
                o->api = LG_LD_API_EMBEDDINGS;
            } else {
                snprintf(err, errlen, "--api '%s': expected chat, completions or embeddings", a);
                return LG_EINVAL;
            }
            break;
        case OPT_PATH:
            o->path_override = a;
            break;
        case OPT_RATE:
            have_rate = true;
            if (opts_double(a, 1e-6, 1e6, &o->rate) != LG_OK || o->rate <= 0) {
                snprintf(err, errlen, "--rate '%s': expected requests/s in (0, 1e6]", a);
                return LG_EINVAL;
            }
            break;
        case OPT_DURATION:
            if (lg_ld_parse_seconds(a, &o->duration_s) != LG_OK || o->duration_s <= 0) {
                snprintf(err, errlen, "--duration '%s': expected seconds > 0", a);
                return LG_EINVAL;
            }
            break;
        case OPT_CONCURRENCY:
            have_conc = true;
            if (opts_uint(a, 1, 100000, &o->concurrency) != LG_OK) {
                snprintf(err, errlen, "--concurrency '%s': expected 1..100000", a);
                return LG_EINVAL;
            }
            break;
        case OPT_REQUESTS:
            if (opts_uint(a, 1, UINT32_MAX, &o->requests) != LG_OK) {
                snprintf(err, errlen, "--requests '%s': expected a count >= 1", a);
                return LG_EINVAL;
            }
            break;
        case OPT_STREAM:
            o->stream = true;
            break;
        case OPT_NO_STREAM:
            o->stream = false;
            break;
        case OPT_SEED:
            if (opts_uint(a, 0, UINT64_MAX, &o->seed) != LG_OK) {
                snprintf(err, errlen, "--seed '%s': expected an unsigned integer", a);
                return LG_EINVAL;
            }
            break;
        case OPT_PROMPT_BYTES:
            o->prompt_spec = a;
            rc = lg_ld_spec_parse(&o->prompt_bytes, a, LG_LD_MAX_PROMPT_BYTES, err, errlen);
            break;
        case OPT_MAX_TOKENS:
            o->max_tokens_spec = a;
            rc = lg_ld_spec_parse(&o->max_tokens, a, LG_LD_MAX_TOKENS, err, errlen);
            break;
        case OPT_INCLUDE_USAGE:
            o->include_usage = true;
            break;
        case OPT_TIMEOUT:
            if (lg_ld_parse_seconds(a, &o->timeout_s) != LG_OK || o->timeout_s <= 0) {
                snprintf(err, errlen, "--timeout '%s': expected seconds > 0", a);
                return LG_EINVAL;
            }
            break;
        case OPT_CONNECT_TIMEOUT:
            if (lg_ld_parse_seconds(a, &o->connect_timeout_s) != LG_OK
                || o->connect_timeout_s <= 0) {
                snprintf(err, errlen, "--connect-timeout '%s': expected seconds > 0", a);
                return LG_EINVAL;
            }
            break;
        case OPT_HEADER:
            if (o->n_headers == LG_LD_MAX_HEADERS) {
                snprintf(err, errlen, "--header: at most %d", LG_LD_MAX_HEADERS);
                return LG_EINVAL;
            }
            rc = opts_header(a, err, errlen);
            o->headers[o->n_headers++] = a;
            break;
        case OPT_JSON:
            o->json_path = a;
            break;
        case OPT_LOG:
            o->log_path = a;
            break;
        case OPT_PROGRESS:
            o->progress = true;
            break;
        case OPT_QUIET:
            o->progress = false;
            break;
        case OPT_REUSE:
            o->reuse = true;
            break;
        case OPT_NO_REUSE:
            o->reuse = false;
            break;
        case OPT_MAX_CONNS:
            if (opts_uint(a, 1, 1000000, &o->max_conns) != LG_OK) {
                snprintf(err, errlen, "--max-connections '%s': expected 1..1000000", a);
                return LG_EINVAL;
            }
            break;
        case OPT_PREFIX_GROUPS:
            if (opts_uint(a, 0, LG_LD_MAX_GROUPS, &o->prefix_groups) != LG_OK) {
                snprintf(err, errlen, "--prefix-groups '%s': expected 0..%u", a, LG_LD_MAX_GROUPS);
                return LG_EINVAL;
            }
            break;
        case OPT_PREFIX_BYTES:
            if (opts_uint(a, 0, LG_LD_MAX_PROMPT_BYTES, &o->prefix_bytes) != LG_OK) {
                snprintf(err, errlen, "--prefix-bytes '%s': expected 0..%u", a,
                         LG_LD_MAX_PROMPT_BYTES);
                return LG_EINVAL;
            }
            break;
        case OPT_PREFIX_DIST:
            if (strcmp(a, "uniform") == 0) {
                o->prefix_dist = LG_LD_DIST_UNIFORM;
            } else if (strcmp(a, "zipf") == 0) {
                o->prefix_dist = LG_LD_DIST_ZIPF;
            } else {
                snprintf(err, errlen, "--prefix-dist '%s': expected uniform or zipf", a);
                return LG_EINVAL;
            }
            break;
        case OPT_ZIPF_S:
            if (opts_double(a, 0, 10, &o->zipf_s) != LG_OK) {
                snprintf(err, errlen, "--zipf-s '%s': expected 0..10", a);
                return LG_EINVAL;
            }
            break;
        case OPT_BURST:
            o->burst_spec = a;
            rc = lg_ld_burst_parse(&o->burst, a, err, errlen);
            break;
        case OPT_TRACE_OUT:
            o->trace_out = a;
            break;
        case OPT_TRACE_IN:
            o->trace_in = a;
            break;
        case OPT_DRY_RUN:
            o->dry_run = true;
            break;
        case OPT_REPLICA_HEADER:
            o->replica_header = a;
            if (!opts_is_token(a, strlen(a))) {
                snprintf(err, errlen, "--replica-header '%s': expected a header name", a);
                return LG_EINVAL;
            }
            break;
        case OPT_EXTRA_BODY:
            rc = opts_extra_body(o, a, err, errlen);
            break;
        case OPT_REALTIME:
            o->realtime = true;
            break;
        case OPT_HELP:
            return LG_LD_OPTS_HELP;
        case OPT_VERSION:
            return LG_LD_OPTS_VERSION;
        case ':':
            snprintf(err, errlen, "%s needs a value", argv[optind - 1]);
            return LG_EINVAL;
        default:
            snprintf(err, errlen, "unknown option '%s'",
                     optind > 0 && optind <= argc ? argv[optind - 1] : "?");
            return LG_EINVAL;
        }
        if (rc != LG_OK) {
            return LG_EINVAL;
        }
    }
    if (optind < argc) {
        snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
        return LG_EINVAL;
    }
    return opts_validate(o, have_rate, have_conc, err, errlen);
}

void
lg_ld_opts_free(struct lg_ld_opts *o)
{
    free(o->extra_body);
    o->extra_body = NULL;
}
