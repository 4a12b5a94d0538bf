/*
 * config.c: JSON config file -> validated, immutable struct lg_config.
 * Every key is declared once in the tables below (type, offset, default,
 * bounds), with the checks across fields; config_table.c walks the
 * document against them (config_value.c reads each value's syntax),
 * collects every error with FILE:LINE:COL and never stops at the first.
 * Owns: each struct lg_config it builds (strings, arrays, the parsed json_t)
 * until its last lg_config_unref(). Borrows: text and name during a load.
 */
#include "base/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/http.h>
#include <jansson.h>

#include "base/config_loc.h"
#include "base/config_table.h"
#include "base/config_value.h"
#include "base/fail.h"
#include "base/otlp.h"

#define CONF_MAX_WORKERS LG_CONFIG_MAX_WORKERS

/* ---- cross-field checks ------------------------------------------------- */

static void __attribute__((format(printf, 3, 4)))
conf_error_at(struct lg_conf_ctx *ctx, const char *suffix, const char *fmt, ...)
{
    size_t mark = ctx->ptr_len;
    va_list ap;

    lg_conf_ptr_add(ctx, suffix, strlen(suffix));
    va_start(ap, fmt);
    lg_conf_verror(ctx, false, fmt, ap);
    va_end(ap);
    lg_conf_ptr_pop(ctx, mark);
}

static void
conf_check_health(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    struct lg_health_conf *h = base;
    char a[32];
    char b[32];

    if (clean && h->eject_base_ms > h->eject_max_ms) {
        conf_error_at(ctx, "/eject_base", "must not exceed eject_max (%s > %s)",
                      lg_conf_fmt_duration(a, sizeof(a), h->eject_base_ms),
                      lg_conf_fmt_duration(b, sizeof(b), h->eject_max_ms));
    }
}

static bool
conf_same_addr(const struct sockaddr_storage *a, socklen_t alen, const struct sockaddr_storage *b,
               socklen_t blen)
{
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)a;

    if (alen == 0 || alen != blen || a->ss_family != b->ss_family || a4->sin_port == 0) {
        return false; /* port 0 binds a fresh port each time: never a clash */
    }
    return memcmp(a, b, alen) == 0;
}

static bool
conf_is_loopback(const struct sockaddr_storage *ss, socklen_t len)
{
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)ss;
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;

    if (len == 0) {
        return true; /* not resolved (LG_CONFIG_F_NO_RESOLVE): nothing to say */
    }
    if (ss->ss_family == AF_INET) {
        return (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
    }
    return ss->ss_family == AF_INET6
           && (IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr)
               || (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr) && a6->sin6_addr.s6_addr[12] == 127));
}

/* Two backends at one URL: scheme, host (any case), port and path prefix. */
static bool
conf_same_url(const struct lg_backend_conf *a, const struct lg_backend_conf *b)
{
    return a->url != NULL && b->url != NULL && a->tls == b->tls && a->port == b->port
           && strcasecmp(a->host, b->host) == 0 && strcmp(a->path_prefix, b->path_prefix) == 0;
}

/*
 * Risky settings that are valid: warnings (`--check-config` prints them and
 * exits 0; the gateway logs them at start and on reload). The timeouts warn
 * as they are set (warn_above in their table).
 */
static void
conf_warn_root(struct lg_conf_ctx *ctx, const struct lg_config *c)
{
    char sfx[64];
    char q[CONF_QBUF];

    if (c->admin.listen != NULL && c->admin.token == NULL
        && !conf_is_loopback(&c->admin.addr, c->admin.addrlen)) {
        lg_conf_warn_at(ctx,
                     json_is_string(json_object_get(c->root, "admin")) ? "/admin" : "/admin/listen",
                     "the admin listener is on %s, not loopback, without a token: whoever reaches "
                     "it can drain backends, reload and read the fleet; set admin.token (then "
                     "/admin/ and /metrics need it) or listen on 127.0.0.1",
                     lg_conf_quote(q, sizeof(q), c->admin.listen));
    }
    for (size_t i = 0; i < c->nlisten; i++) {
        /* an explicit 0 says unlimited is meant (clients behind a proxy or NAT) */
        if (!conf_is_loopback(&c->listen[i].addr, c->listen[i].addrlen)
            && json_object_get(json_object_get(c->root, "limits"), "max_connections_per_ip")
                   == NULL) {
            json_t *l = json_object_get(c->root, "listen");

            snprintf(sfx, sizeof(sfx),
                     json_is_object(json_array_get(l, i)) ? "/listen/%zu/address" : "/listen/%zu",
                     i);
            lg_conf_warn_at(ctx, json_is_string(l) ? "/listen" : sfx,
                            "clients reach %s beyond loopback and limits.max_connections_per_ip "
                            "is not set: one address may hold all %u connections "
                            "(limits.max_connections); set it (e.g. 256), or to 0 if clients "
                            "come through a proxy or NAT that shares their address",
                            lg_conf_quote(q, sizeof(q), c->listen[i].address),
                            c->limits.max_connections);
            break;
        }
    }
    if (c->timeouts.client_body_min_rate == 0) {
        lg_conf_warn_at(ctx, "/timeouts/client_body_min_rate",
                        "0 turns the whole-body deadline off: a client may hold a connection "
                        "for as long as it sends a byte of its body every timeouts.client_body; "
                        "the default is 1KiB");
    }
    for (size_t i = 0; i < c->nbackends; i++) {
        for (size_t j = 0; c->backends[i].enabled && j < i; j++) {
            if (c->backends[j].enabled && conf_same_url(&c->backends[i], &c->backends[j])) {
                snprintf(sfx, sizeof(sfx), "/backends/%zu/url", i);
                lg_conf_warn_at(ctx, sfx,
                             "the same URL as /backends/%zu (%s): one engine counted as two "
                             "backends gets twice its share, and neither sees its whole load; "
                             "list it once (\"weight\" gives it a larger share)",
                             j, lg_conf_quote(q, sizeof(q), c->backends[j].name));
                break;
            }
        }
    }
}

static void
conf_check_root(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    struct lg_config *c = base;
    char sfx[64];
    char q[CONF_QBUF];
    size_t enabled = 0;

    c->scheduling.priority_header_len =
        c->scheduling.priority_header != NULL ? strlen(c->scheduling.priority_header) : 0;
    c->scheduling.ttft_header_len =
        c->scheduling.ttft_header != NULL ? strlen(c->scheduling.ttft_header) : 0;
    for (size_t i = 0; i < c->nlisten; i++) {
        for (size_t j = 0; j < i; j++) {
            if (conf_same_addr(&c->listen[i].addr, c->listen[i].addrlen, &c->listen[j].addr,
                               c->listen[j].addrlen)) {
                snprintf(sfx, sizeof(sfx), "/listen/%zu", i);
                conf_error_at(ctx, sfx, "duplicate listen address %s (first at /listen/%zu)",
                              lg_conf_quote(q, sizeof(q), c->listen[i].address), j);
                break;
            }
        }
    }
    for (size_t i = 0; c->admin.listen != NULL && i < c->nlisten; i++) {
        if (conf_same_addr(&c->admin.addr, c->admin.addrlen, &c->listen[i].addr,
                           c->listen[i].addrlen)) {
            /* "admin": "host:port" has no /admin/listen in the text */
            conf_error_at(
                ctx, json_is_string(json_object_get(c->root, "admin")) ? "/admin" : "/admin/listen",
                "same address as /listen/%zu", i);
        }
    }
    for (size_t i = 0; i < c->nbackends; i++) {
        const char *name = c->backends[i].name;

        enabled += c->backends[i].enabled;
        for (size_t j = 0; name != NULL && j < i; j++) {
            if (c->backends[j].name != NULL && strcmp(name, c->backends[j].name) == 0) {
                snprintf(sfx, sizeof(sfx), "/backends/%zu/name", i);
                conf_error_at(ctx, sfx, "duplicate backend name %s (first at /backends/%zu)",
                              lg_conf_quote(q, sizeof(q), name), j);
                break;
            }
        }
    }
    if (c->nbackends > 0 && enabled == 0) {
        conf_error_at(ctx, "/backends", "every backend is disabled; enable at least one");
    }
    if (clean) {
        conf_warn_root(ctx, c);
    }
}

/* ---- the tables --------------------------------------------------------- */

static const char *const conf_log_levels[] = { "error", "warn", "info", "debug", NULL };
static const char *const conf_flavors[] = { "auto",     "vllm", "sglang", "tgi",
                                            "llamacpp", "none", NULL };

static const char *const conf_load_headers[] = { "off", "text", "json", NULL };

_Static_assert(LG_LOAD_HEADER_JSON == 2, "conf_load_headers follows enum lg_load_header");
_Static_assert(sizeof(enum lg_load_header) == sizeof(int), "LG_CONF_ENUM stores an int");
_Static_assert(LG_LOG_DEBUG == 3, "conf_log_levels follows enum lg_log_level");
_Static_assert(LG_ENGINE_NONE == 5, "conf_flavors follows enum lg_engine_flavor");
_Static_assert(sizeof(enum lg_log_level) == sizeof(int), "LG_CONF_ENUM stores an int");
_Static_assert(sizeof(enum lg_engine_flavor) == sizeof(int), "LG_CONF_ENUM stores an int");

#define TLS(f) offsetof(struct lg_listen_conf, f)
static const struct lg_conf_field conf_tls_fields[] = {
    { "cert", LG_CONF_FILE, TLS(tls_cert), .required = true },
    { "key", LG_CONF_FILE, TLS(tls_key), .required = true },
    { .name = NULL },
};
/* tls fields live in struct lg_listen_conf itself: the "tls" field has offset 0 */
static const struct lg_conf_table conf_tls_table = { sizeof(struct lg_listen_conf), conf_tls_fields,
                                                     NULL };

static const struct lg_conf_field conf_listen_fields[] = {
    { "address", LG_CONF_ADDRESS, TLS(address), .required = true, .aux_offset = TLS(addr),
      .aux2_offset = TLS(addrlen) },
    { "tls", LG_CONF_OBJECT, 0, .sub = &conf_tls_table },
    { .name = NULL },
};
#undef TLS
static const struct lg_conf_table conf_listen_table = { sizeof(struct lg_listen_conf),
                                                        conf_listen_fields, NULL };

#define TO(f) offsetof(struct lg_timeouts_conf, f)
static const struct lg_conf_field conf_timeouts_fields[] = {
    { "client_header", LG_CONF_DURATION, TO(client_header_ms), .def = CONF_S(10), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(1),
      .warn = "a client may hold a connection that long before its request is complete "
              "(slowloris)" },
    { "client_body", LG_CONF_DURATION, TO(client_body_ms), .def = CONF_S(30), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(5),
      .warn = "a client may hold a connection that long between two pieces of its body" },
    { "client_body_grace", LG_CONF_DURATION, TO(client_body_grace_ms), .def = CONF_S(10),
      .min = 1, .max = CONF_H(1), .warn_above = CONF_M(5),
      .warn = "a client may hold a connection that long before the first byte of its body" },
    { "client_body_min_rate", LG_CONF_SIZE, TO(client_body_min_rate), .def = CONF_KIB(1),
      .min = 0, .max = CONF_GIB(1) },
    { "client_idle", LG_CONF_DURATION, TO(client_idle_ms), .def = CONF_S(75), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(10),
      .warn = "idle keep-alive connections stay open that long, each counted against "
              "limits.max_connections" },
    { "upstream_connect", LG_CONF_DURATION, TO(upstream_connect_ms), .def = CONF_S(3), .min = 1,
      .max = CONF_M(5), .warn_above = CONF_M(1),
      .warn = "a backend that does not answer holds each request that long before a retry" },
    { "first_byte", LG_CONF_DURATION, TO(first_byte_ms), .def = CONF_S(300), .min = 1,
      .max = CONF_H(1) },
    { "stream_idle", LG_CONF_DURATION, TO(stream_idle_ms), .def = CONF_S(120), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(10),
      .warn = "a stalled engine keeps each of its streams, and the client, that long" },
    { "total", LG_CONF_DURATION, TO(total_ms), .def = 0, .min = 0, .max = CONF_H(24) },
    { "drain", LG_CONF_DURATION, TO(drain_ms), .def = CONF_S(30), .min = 0, .max = CONF_H(1) },
    { "upstream_idle", LG_CONF_DURATION, TO(upstream_idle_ms), .def = CONF_S(60), .min = 1,
      .max = CONF_H(1) },
    { "upstream_purge", LG_CONF_DURATION, TO(upstream_purge_ms), .def = CONF_S(1), .min = 0,
      .max = CONF_H(1) },
    { "client_stall", LG_CONF_DURATION, TO(client_stall_ms), .def = CONF_S(60), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(10),
      .warn = "a client that reads nothing keeps its stream, and a slot of the engine, that "
              "long" },
    { "queue", LG_CONF_DURATION, TO(queue_ms), .def = CONF_S(30), .min = 1, .max = CONF_H(1) },
    { .name = NULL },
};
#undef TO
static const struct lg_conf_table conf_timeouts_table = { sizeof(struct lg_timeouts_conf),
                                                          conf_timeouts_fields, NULL };

#define LI(f) offsetof(struct lg_limits_conf, f)
static const struct lg_conf_field conf_limits_fields[] = {
    { "max_header_bytes", LG_CONF_SIZE, LI(max_header_bytes), .def = CONF_KIB(16), .min = 256,
      .max = CONF_MIB(1) },
    { "max_headers", LG_CONF_UINT, LI(max_headers), .def = 100, .min = 1, .max = 10000 },
    { "max_body_bytes", LG_CONF_SIZE, LI(max_body_bytes), .def = CONF_MIB(16), .min = 1,
      .max = CONF_GIB(1) },
    { "max_connections", LG_CONF_UINT, LI(max_connections), .def = 20000, .min = 1,
      .max = 1000000 },
    { "max_connections_per_ip", LG_CONF_UINT, LI(max_connections_per_ip), .def = 0, .min = 0,
      .max = 1000000 },
    { "stream_buffer_bytes", LG_CONF_SIZE, LI(stream_buffer_bytes), .def = CONF_KIB(64),
      .min = CONF_KIB(1), .max = CONF_MIB(64) },
    { "upstream_keepalive", LG_CONF_UINT, LI(upstream_keepalive), .def = 64, .min = 0,
      .max = 10000 },
    { "queue_length", LG_CONF_UINT, LI(queue_length), .def = 1024, .min = 0, .max = 1000000 },
    { .name = NULL },
};
#undef LI
static const struct lg_conf_table conf_limits_table = { sizeof(struct lg_limits_conf),
                                                        conf_limits_fields, NULL };

#define RE(f) offsetof(struct lg_retry_conf, f)
static const struct lg_conf_field conf_retry_fields[] = {
    { "attempts", LG_CONF_UINT, RE(attempts), .def = 2, .min = 1, .max = 10 },
    { "budget_ratio", LG_CONF_DOUBLE, RE(budget_ratio), .def = 0.2, .min = 0, .max = 1 },
    { "budget_min", LG_CONF_UINT, RE(budget_min), .def = 10, .min = 0, .max = 1000000 },
    { "on", LG_CONF_MASK, RE(on), .def = LG_FAIL_RETRY_DEFAULT, .min = 0,
      .max = LG_FAIL_COUNT, .bit = lg_fail_retry_bit },
    { .name = NULL },
};
#undef RE
static const struct lg_conf_table conf_retry_table = { sizeof(struct lg_retry_conf),
                                                       conf_retry_fields, NULL };

/* What resume.models may say of a model (enum lg_resume_mode). */
static const char *const conf_resume_modes[] = { "off", "greedy", "seeded", NULL };

/* A JSON pointer segment for a member name (RFC 6901: ~ and / escaped). */
static void
conf_ptr_segment(char *out, size_t cap, const char *name)
{
    size_t n = 0;

    if (cap < 2) {
        return;
    }
    out[n++] = '/';
    for (; *name != '\0' && n + 3 < cap; name++) {
        if (*name == '~' || *name == '/') {
            out[n++] = '~';
            out[n++] = *name == '~' ? '0' : '1';
        } else {
            out[n++] = *name;
        }
    }
    out[n] = '\0';
}

/* resume.models: every model's value is one of the modes ("#" keys are
 * comments); read into rules[] (and `others`, for "*") once, at load. */
static void
conf_check_resume(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    struct lg_resume_conf *r = base;
    const char *name;
    json_t *v;

    if (r->models == NULL) {
        return;
    }
    r->rules = lg_xcalloc(json_object_size(r->models) + 1, sizeof(*r->rules));
    json_object_foreach (r->models, name, v) {
        const char *mode = json_is_string(v) ? json_string_value(v) : NULL;
        char sfx[300];
        size_t i = 0;

        if (name[0] == '#') {
            continue;
        }
        while (mode != NULL && conf_resume_modes[i] != NULL
               && strcmp(mode, conf_resume_modes[i]) != 0) {
            i++;
        }
        if (mode == NULL || conf_resume_modes[i] == NULL) {
            memcpy(sfx, "/models", 7);
            conf_ptr_segment(sfx + 7, sizeof(sfx) - 7, name);
            conf_error_at(ctx, sfx, "expected \"off\", \"greedy\" or \"seeded\"");
        } else if (strcmp(name, "*") == 0) {
            r->others = (enum lg_resume_mode)i;
        } else {
            r->rules[r->nrules].model = name;
            r->rules[r->nrules++].mode = (enum lg_resume_mode)i;
        }
    }
    (void)clean;
}

#define RS(f) offsetof(struct lg_resume_conf, f)
static const struct lg_conf_field conf_resume_fields[] = {
    { "models", LG_CONF_JSON, RS(models), .required = false },
    { "attempts", LG_CONF_UINT, RS(attempts), .def = 2, .min = 1, .max = 10 },
    { "max_text", LG_CONF_SIZE, RS(max_text), .def = CONF_KIB(256), .min = CONF_KIB(1),
      .max = CONF_MIB(64) },
    { .name = NULL },
};
#undef RS
static const struct lg_conf_table conf_resume_table = { sizeof(struct lg_resume_conf),
                                                        conf_resume_fields, conf_check_resume };
static void
conf_check_hedge(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    struct lg_hedge_conf *h = base;
    char a[32];
    char b[32];

    if (clean && h->min_ms > h->max_ms) {
        conf_error_at(ctx, "/min", "must not exceed max (%s > %s)",
                      lg_conf_fmt_duration(a, sizeof(a), h->min_ms),
                      lg_conf_fmt_duration(b, sizeof(b), h->max_ms));
    }
}

#define HG(f) offsetof(struct lg_hedge_conf, f)
static const struct lg_conf_field conf_hedge_fields[] = {
    { "enabled", LG_CONF_BOOL, HG(enabled), .def = 0 },
    { "factor", LG_CONF_DOUBLE, HG(factor), .def = 3, .min = 1, .max = 100 },
    { "min", LG_CONF_DURATION, HG(min_ms), .def = CONF_MS(250), .min = 1, .max = CONF_H(1) },
    { "max", LG_CONF_DURATION, HG(max_ms), .def = CONF_S(10), .min = 1, .max = CONF_H(1) },
    { "budget_ratio", LG_CONF_DOUBLE, HG(budget_ratio), .def = 0.05, .min = 0, .max = 1 },
    { "budget_min", LG_CONF_UINT, HG(budget_min), .def = 1, .min = 0, .max = 1000000 },
    { "hold_bytes", LG_CONF_SIZE, HG(hold_bytes), .def = CONF_KIB(16), .min = CONF_KIB(1),
      .max = CONF_MIB(1) },
    { .name = NULL },
};
#undef HG
static const struct lg_conf_table conf_hedge_table = { sizeof(struct lg_hedge_conf),
                                                       conf_hedge_fields, conf_check_hedge };

#define RP(f) offsetof(struct lg_responses_conf, f)
static const struct lg_conf_field conf_responses_fields[] = {
    { "table", LG_CONF_UINT, RP(table), .def = 65536, .min = 16, .max = 1000000 },
    { "ttl", LG_CONF_DURATION, RP(ttl_ms), .def = CONF_M(60), .min = CONF_S(1),
      .max = CONF_M(7 * 24 * 60) },
    { .name = NULL },
};
#undef RP
static const struct lg_conf_table conf_responses_table = { sizeof(struct lg_responses_conf),
                                                          conf_responses_fields, NULL };

#define ST(f) offsetof(struct lg_route_stage_conf, f)
static const struct lg_conf_field conf_stage_fields[] = {
    { "policy", LG_CONF_STR, ST(policy), .required = true },
    { "weight", LG_CONF_DOUBLE, ST(weight), .def = 1, .min = 0, .max = 1000000 },
    { "options", LG_CONF_JSON, ST(options), .required = false },
    { .name = NULL },
};
#undef ST
static const struct lg_conf_table conf_stage_table = { sizeof(struct lg_route_stage_conf),
                                                       conf_stage_fields, NULL };

/* A pipeline replaces the one-stage `policy` (whose default is then "ttft"); a
 * stage of weight 0 is a shadow, so one at least must weigh something. */
static void
conf_check_routing(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    struct lg_routing_conf *r = base;
    size_t deciding = 0;

    if (clean && r->policy != NULL && r->npipeline > 0) {
        conf_error_at(ctx, "/policy", "give either policy or pipeline, not both");
    }
    for (size_t i = 0; i < r->npipeline; i++) {
        deciding += r->pipeline[i].weight > 0;
    }
    if (clean && r->npipeline > 0 && deciding == 0) {
        conf_error_at(ctx, "/pipeline",
                      "every stage has weight 0 (a shadow: scored and logged, never deciding); "
                      "at least one must decide");
    }
}

#define RO(f) offsetof(struct lg_routing_conf, f)
static const struct lg_conf_field conf_routing_fields[] = {
    { "policy", LG_CONF_STR, RO(policy), .required = false },
    { "pipeline", LG_CONF_OBJARRAY, RO(pipeline), .min = 1, .max = 8, .sub = &conf_stage_table,
      .shorthand = "policy", .aux_offset = RO(npipeline) },
    { "plugins", LG_CONF_STRARRAY, RO(plugins), .min = 0, .max = 64, .aux_offset = RO(nplugins) },
    { "options", LG_CONF_JSON, RO(policy_options), .required = false },
    { "retry", LG_CONF_OBJECT, RO(retry), .sub = &conf_retry_table },
    { "resume", LG_CONF_OBJECT, RO(resume), .sub = &conf_resume_table },
    { "hedge", LG_CONF_OBJECT, RO(hedge), .sub = &conf_hedge_table },
    { "session_header", LG_CONF_STR, RO(session_header), .check = lg_conf_check_header_name },
    { "session_headers", LG_CONF_STRARRAY, RO(session_headers), .min = 1, .max = 8,
      .aux_offset = RO(nsession_headers), .check = lg_conf_check_header_name, .unique = true },
    { "responses", LG_CONF_OBJECT, RO(responses), .sub = &conf_responses_table },
    { "prefix_bytes", LG_CONF_SIZE, RO(prefix_bytes), .def = 2048, .min = 0, .max = CONF_MIB(1) },
    { .name = NULL },
};
#undef RO
static const struct lg_conf_table conf_routing_table = { sizeof(struct lg_routing_conf),
                                                         conf_routing_fields, conf_check_routing };

#define AL(f) offsetof(struct lg_access_log_conf, f)
static const struct lg_conf_field conf_access_log_fields[] = {
    { "path", LG_CONF_STR, AL(path), .def_str = "-" },
    { "flush", LG_CONF_DURATION, AL(flush_ms), .def = CONF_S(1), .min = 0, .max = CONF_M(1) },
    { "buffer", LG_CONF_SIZE, AL(buffer_bytes), .def = CONF_KIB(64), .min = CONF_KIB(4),
      .max = CONF_MIB(64) },
    { .name = NULL },
};
#undef AL
static const struct lg_conf_table conf_access_log_table = { sizeof(struct lg_access_log_conf),
                                                            conf_access_log_fields, NULL };

#define HE(f) offsetof(struct lg_health_conf, f)
static const struct lg_conf_field conf_health_fields[] = {
    { "interval", LG_CONF_DURATION, HE(interval_ms), .def = CONF_S(5), .min = 10,
      .max = CONF_H(1) },
    { "timeout", LG_CONF_DURATION, HE(timeout_ms), .def = CONF_S(2), .min = 1, .max = CONF_M(5) },
    { "rise", LG_CONF_UINT, HE(rise), .def = 2, .min = 1, .max = 100 },
    { "fall", LG_CONF_UINT, HE(fall), .def = 3, .min = 1, .max = 100 },
    { "scrape_interval", LG_CONF_DURATION, HE(scrape_interval_ms), .def = CONF_MS(250), .min = 0,
      .max = CONF_H(1) },
    { "load_interval", LG_CONF_DURATION, HE(load_interval_ms), .def = CONF_MS(100), .min = 10,
      .max = CONF_H(1) },
    { "eject_consecutive", LG_CONF_UINT, HE(eject_consecutive), .def = 5, .min = 0, .max = 1000 },
    { "eject_base", LG_CONF_DURATION, HE(eject_base_ms), .def = CONF_S(5), .min = 1,
      .max = CONF_H(1) },
    { "eject_max", LG_CONF_DURATION, HE(eject_max_ms), .def = CONF_S(60), .min = 1,
      .max = CONF_H(24) },
    { "slow_start", LG_CONF_DURATION, HE(slow_start_ms), .def = CONF_S(10), .min = 0,
      .max = CONF_H(1) },
    { "peer_interval", LG_CONF_DURATION, HE(peer_interval_ms), .def = CONF_MS(2), .min = 0,
      .max = CONF_M(1) },
    { .name = NULL },
};
#undef HE
static const struct lg_conf_table conf_health_table = { sizeof(struct lg_health_conf),
                                                        conf_health_fields, conf_check_health };

/* A history holds two points at least and LG_HISTORY_MAX_POINTS at most. */
static void
conf_check_history(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    const struct lg_history_conf *h = base;
    char a[32];
    char b[32];

    if (!clean || h->window_ms == 0 || h->resolution_ms == 0) {
        return;
    }
    if (h->window_ms < 2 * h->resolution_ms) {
        conf_error_at(ctx, "/window",
                      "must hold two points at least (2 x resolution %s; 0 turns the history "
                      "off)",
                      lg_conf_fmt_duration(a, sizeof(a), h->resolution_ms));
    } else if (h->window_ms / h->resolution_ms > LG_HISTORY_MAX_POINTS) {
        conf_error_at(ctx, "/window",
                      "%s at a resolution of %s is %llu points; at most %d (a longer "
                      "resolution or a shorter window)",
                      lg_conf_fmt_duration(a, sizeof(a), h->window_ms),
                      lg_conf_fmt_duration(b, sizeof(b), h->resolution_ms),
                      (unsigned long long)(h->window_ms / h->resolution_ms), LG_HISTORY_MAX_POINTS);
    }
}

#define HI(f) offsetof(struct lg_history_conf, f)
static const struct lg_conf_field conf_history_fields[] = {
    { "resolution", LG_CONF_DURATION, HI(resolution_ms), .def = CONF_S(5), .min = CONF_S(1),
      .max = CONF_M(1) },
    { "window", LG_CONF_DURATION, HI(window_ms), .def = CONF_M(15), .min = 0, .max = CONF_H(24) },
    { .name = NULL },
};
#undef HI
static const struct lg_conf_table conf_history_table = { sizeof(struct lg_history_conf),
                                                         conf_history_fields, conf_check_history };

#define AD(f) offsetof(struct lg_admin_conf, f)
static const struct lg_conf_field conf_admin_fields[] = {
    { "listen", LG_CONF_ADDRESS, AD(listen), .required = true, .aux_offset = AD(addr),
      .aux2_offset = AD(addrlen) },
    { "token", LG_CONF_STR, AD(token), .required = false },
    { "history", LG_CONF_OBJECT, AD(history), .sub = &conf_history_table },
    { .name = NULL },
};
#undef AD
static const struct lg_conf_table conf_admin_table = { sizeof(struct lg_admin_conf),
                                                       conf_admin_fields, NULL };

/* A peer is reached at its address: a port and a host to connect to. */
static void
conf_check_peer(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    const struct lg_peer_conf *p = base;
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&p->addr;
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&p->addr;

    if (!clean || p->addrlen == 0) {
        return;
    }
    if (a4->sin_port == 0) {
        conf_error_at(ctx, "/admin", "a peer's admin address needs its port");
    } else if ((p->addr.ss_family == AF_INET && a4->sin_addr.s_addr == htonl(INADDR_ANY))
               || (p->addr.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr))) {
        conf_error_at(ctx, "/admin", "a peer's admin address needs a host to connect to");
    }
}

#define PE(f) offsetof(struct lg_peer_conf, f)
static const struct lg_conf_field conf_peer_fields[] = {
    { "admin", LG_CONF_ADDRESS, PE(admin), .required = true, .aux_offset = PE(addr),
      .aux2_offset = PE(addrlen) },
    { .name = NULL },
};
#undef PE
static const struct lg_conf_table conf_peer_table = { sizeof(struct lg_peer_conf), conf_peer_fields,
                                                      conf_check_peer };

#define DI(f) offsetof(struct lg_discover_conf, f)
static const struct lg_conf_field conf_discover_fields[] = {
    { "dns", LG_CONF_STR, DI(dns), .required = true, .check = lg_conf_check_dns_name },
    { "port", LG_CONF_UINT, DI(port), .required = true, .min = 1, .max = 65535 },
    { "interval", LG_CONF_DURATION, DI(interval_ms), .def = CONF_S(5), .min = 100,
      .max = CONF_H(1) },
    { .name = NULL },
};
#undef DI
static const struct lg_conf_table conf_discover_table = { sizeof(struct lg_discover_conf),
                                                          conf_discover_fields, NULL };

/*
 * Cross checks of a backend: url or discover, TLS settings need https (or a
 * discovered backend), a client key needs its certificate.
 */
static void
conf_check_backend(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    struct lg_backend_conf *b = base;

    if (!clean) {
        return;
    }
    if (b->url != NULL && b->discover.dns != NULL) {
        conf_error_at(ctx, "/discover", "give either url or discover, not both");
    } else if (!b->tls
               && (b->tls_ca_file || b->tls_server_name || b->tls_cert || b->tls_key
                   || b->tls_insecure)) {
        conf_error_at(ctx, "/tls", "TLS settings need an https:// URL");
    } else if ((b->tls_cert == NULL) != (b->tls_key == NULL)) {
        conf_error_at(ctx, b->tls_cert ? "/tls/cert" : "/tls/key",
                      "a client certificate needs both cert and key");
    } else if (b->tls_insecure && b->tls_ca_file != NULL) {
        conf_error_at(ctx, "/tls/insecure_skip_verify", "contradicts ca_file: choose one");
    } else if (b->engine_priority != LG_ENGINE_PRIORITY_NONE
               && b->priority_field == LG_PRIORITY_FIELD_OFF) {
        conf_error_at(ctx, "/engine_priority",
                      "the engine hears no class: set priority_field too");
    }
}

#define BT(f) offsetof(struct lg_backend_conf, f)
static const struct lg_conf_field conf_backend_tls_fields[] = {
    { "ca_file", LG_CONF_FILE, BT(tls_ca_file), .required = false },
    { "server_name", LG_CONF_STR, BT(tls_server_name), .check = lg_conf_check_server_name },
    { "cert", LG_CONF_FILE, BT(tls_cert), .required = false },
    { "key", LG_CONF_FILE, BT(tls_key), .required = false },
    { "insecure_skip_verify", LG_CONF_BOOL, BT(tls_insecure), .def = 0 },
    { .name = NULL },
};
#undef BT
/* like listen's: the fields live in struct lg_backend_conf, the "tls" field has offset 0 */
static const struct lg_conf_table conf_backend_tls_table = { sizeof(struct lg_backend_conf),
                                                             conf_backend_tls_fields, NULL };

#define BE(f) offsetof(struct lg_backend_conf, f)
static const char *const conf_priority_fields[] = { "off", "vllm", NULL };
static const char *const conf_engine_priorities[] = { "none", "preempt", NULL };
_Static_assert(LG_ENGINE_PRIORITY_PREEMPT == 1, "conf_engine_priorities follows the enum");

static const struct lg_conf_field conf_backend_fields[] = {
    { "name", LG_CONF_STR, BE(name), .required = true, .check = lg_conf_check_name },
    { "url", LG_CONF_URL, BE(url), .required = true, .unless = "discover" },
    { "discover", LG_CONF_OBJECT, BE(discover), .sub = &conf_discover_table },
    { "models", LG_CONF_STRARRAY, BE(models), .required = true, .unique = true, .min = 1,
      .max = 1024, .aux_offset = BE(nmodels) },
    { "weight", LG_CONF_UINT, BE(weight), .def = 1, .min = 1, .max = 1000 },
    { "max_inflight", LG_CONF_UINT, BE(max_inflight), .def = 0, .min = 0, .max = 1000000 },
    { "priority_field", LG_CONF_ENUM, BE(priority_field), .def = LG_PRIORITY_FIELD_OFF,
      .names = conf_priority_fields },
    { "engine_priority", LG_CONF_ENUM, BE(engine_priority), .def = LG_ENGINE_PRIORITY_NONE,
      .names = conf_engine_priorities },
    { "flavor", LG_CONF_ENUM, BE(flavor), .def = LG_ENGINE_AUTO, .names = conf_flavors },
    { "metrics_path", LG_CONF_STR, BE(metrics_path), .def_str = "/metrics",
      .check = lg_conf_check_path },
    { "health_path", LG_CONF_STR, BE(health_path), .def_str = "/health",
      .check = lg_conf_check_path },
    { "load_header", LG_CONF_ENUM, BE(load_header), .def = LG_LOAD_HEADER_OFF,
      .names = conf_load_headers },
    { "load_path", LG_CONF_STR, BE(load_path), .required = false, .check = lg_conf_check_path },
    { "prefill_chunk", LG_CONF_UINT, BE(prefill_chunk), .def = 0, .min = 0, .max = 1000000 },
    { "api_key", LG_CONF_STR, BE(api_key), .required = false },
    { "enabled", LG_CONF_BOOL, BE(enabled), .def = 1 },
    { "tls", LG_CONF_OBJECT, 0, .sub = &conf_backend_tls_table },
    { .name = NULL },
};
#undef BE
static const struct lg_conf_table conf_backend_table = { sizeof(struct lg_backend_conf),
                                                         conf_backend_fields, conf_check_backend };

#define DS(f) offsetof(struct lg_discovery_conf, f)
static const struct lg_conf_field conf_discovery_fields[] = {
    { "nameserver", LG_CONF_ADDRESS, DS(nameserver), .aux_offset = DS(addr),
      .aux2_offset = DS(addrlen) },
    { "timeout", LG_CONF_DURATION, DS(timeout_ms), .def = CONF_S(2), .min = 10, .max = CONF_M(1) },
    { .name = NULL },
};
#undef DS
static const struct lg_conf_table conf_discovery_table = { sizeof(struct lg_discovery_conf),
                                                           conf_discovery_fields, NULL };

#define AU(f) offsetof(struct lg_auth_conf, f)
static const struct lg_conf_field conf_auth_fields[] = {
    { "keys_file", LG_CONF_FILE, AU(keys_file), .required = true },
    { .name = NULL },
};
#undef AU
static const struct lg_conf_table conf_auth_table = { sizeof(struct lg_auth_conf), conf_auth_fields,
                                                      NULL };

static const char *const conf_budget_failures[] = { "open", "closed", NULL };

_Static_assert(LG_BUDGET_FAIL_CLOSED == 1, "conf_budget_failures follows enum lg_budget_failure");

/* The Redis server is reached at its address: a host to connect to. */
static void
conf_check_redis(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    const struct lg_budget_redis_conf *r = base;
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&r->addr;
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&r->addr;

    if (!clean || r->addrlen == 0) {
        return;
    }
    if ((r->addr.ss_family == AF_INET && a4->sin_addr.s_addr == htonl(INADDR_ANY))
        || (r->addr.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr))) {
        /* "redis": "host:port" has no /address in the text: its string is found instead */
        conf_error_at(ctx, "/address", "the Redis server needs a host to connect to");
    }
}

#define RD(f) offsetof(struct lg_budget_redis_conf, f)
static const struct lg_conf_field conf_redis_fields[] = {
    { "address", LG_CONF_ADDRESS, RD(address), .required = true, .aux_offset = RD(addr),
      .aux2_offset = RD(addrlen) },
    { "password", LG_CONF_STR, RD(password), .required = false },
    { "db", LG_CONF_UINT, RD(db), .def = 0, .min = 0, .max = 1000000 },
    { "key_prefix", LG_CONF_STR, RD(key_prefix), .def_str = "llmgate:budget",
      .check = lg_conf_check_name },
    { "sync_interval", LG_CONF_DURATION, RD(sync_interval_ms), .def = CONF_MS(200),
      .min = CONF_MS(10), .max = CONF_S(10) },
    { "timeout", LG_CONF_DURATION, RD(timeout_ms), .def = CONF_MS(500), .min = CONF_MS(10),
      .max = CONF_M(1) },
    { "on_failure", LG_CONF_ENUM, RD(on_failure), .def = LG_BUDGET_FAIL_OPEN,
      .names = conf_budget_failures },
    { .name = NULL },
};
#undef RD
static const struct lg_conf_table conf_redis_table = { sizeof(struct lg_budget_redis_conf),
                                                       conf_redis_fields, conf_check_redis };

#define BU(f) offsetof(struct lg_budgets_conf, f)
static const struct lg_conf_field conf_budgets_fields[] = {
    { "prompt_bytes_per_token", LG_CONF_UINT, BU(prompt_bytes_per_token), .def = 4, .min = 1,
      .max = 64 },
    { "default_max_tokens", LG_CONF_UINT, BU(default_max_tokens), .def = 1024, .min = 0,
      .max = 10000000 },
    { "redis", LG_CONF_OBJECT, BU(redis), .sub = &conf_redis_table, .shorthand = "address" },
    { .name = NULL },
};
#undef BU
static const struct lg_conf_table conf_budgets_table = { sizeof(struct lg_budgets_conf),
                                                         conf_budgets_fields, NULL };

static const char *const conf_class_over[] = { "clamp", "refuse", NULL };

#define CL(f) offsetof(struct lg_class_conf, f)
static const struct lg_conf_field conf_class_fields[] = {
    { "queue_deadline", LG_CONF_DURATION, CL(queue_deadline_ms), .def = 0, .min = 0,
      .max = CONF_H(1) },
    { "sheddable", LG_CONF_BOOL, CL(sheddable), .def = 0 },
    { "ttft_target", LG_CONF_DURATION, CL(ttft_target_ms), .def = 0, .min = 0, .max = CONF_H(1) },
    { "reserve", LG_CONF_DOUBLE, CL(reserve), .def = 0, .min = 0, .max = 0.95 },
    { "yield_prefill", LG_CONF_BOOL, CL(yield_prefill), .def = 0 },
    { "prompts_per_step", LG_CONF_UINT, CL(prompts_per_step), .def = 0, .min = 0, .max = 64 },
    { .name = NULL },
};
#undef CL

static const struct lg_conf_table conf_class_table = { sizeof(struct lg_class_conf),
                                                       conf_class_fields, NULL };

#define SC(f) offsetof(struct lg_scheduling_conf, f)
#define SC_CLASS(i) (SC(classes) + (i) * sizeof(struct lg_class_conf))
static const struct lg_conf_field conf_scheduling_fields[] = {
    { "fair", LG_CONF_BOOL, SC(fair), .def = 1 },
    { "priority_header", LG_CONF_STR, SC(priority_header), .def_str = "x-llmgate-priority",
      .check = lg_conf_check_header_name },
    { "ttft_header", LG_CONF_STR, SC(ttft_header), .def_str = "x-llmgate-ttft-target-ms",
      .check = lg_conf_check_header_name },
    { "over_max_class", LG_CONF_ENUM, SC(over_max_class), .def = LG_CLASS_OVER_CLAMP,
      .names = conf_class_over },
    { "batch", LG_CONF_OBJECT, SC_CLASS(LG_CLASS_BATCH), .sub = &conf_class_table },
    { "default", LG_CONF_OBJECT, SC_CLASS(LG_CLASS_DEFAULT), .sub = &conf_class_table },
    { "interactive", LG_CONF_OBJECT, SC_CLASS(LG_CLASS_INTERACTIVE), .sub = &conf_class_table },
    { "system", LG_CONF_OBJECT, SC_CLASS(LG_CLASS_SYSTEM), .sub = &conf_class_table },
    { .name = NULL },
};
#undef SC_CLASS
#undef SC

/* yield_prefill and prompts_per_step yield to a higher class: the highest
 * has none to yield to. */
static void
conf_check_scheduling(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    const struct lg_scheduling_conf *sc = base;

    if (clean && sc->classes[LG_CLASS_SYSTEM].yield_prefill) {
        conf_error_at(ctx, "/system/yield_prefill",
                      "no class is above system: there is nothing to yield to");
    }
    if (clean && sc->classes[LG_CLASS_SYSTEM].prompts_per_step > 0) {
        conf_error_at(ctx, "/system/prompts_per_step",
                      "no class is above system: there is nothing to yield to");
    }
}

static const struct lg_conf_table conf_scheduling_table = { sizeof(struct lg_scheduling_conf),
                                                            conf_scheduling_fields,
                                                            conf_check_scheduling };

/* Each tenant header is a header name. */
static void
conf_check_tenants(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    const struct lg_tenants_conf *t = base;
    char why[256];

    for (size_t i = 0; clean && i < t->nheaders; i++) {
        if (!lg_conf_check_header_name(t->headers[i], why, sizeof(why))) {
            char suffix[32];

            snprintf(suffix, sizeof(suffix), "/headers/%zu", i);
            conf_error_at(ctx, suffix, "%s", why);
        }
    }
}

/* The wake-up webhook: a plain http:// URL (called from the control thread, without TLS). */
static bool
conf_check_webhook(const char *s, char *why, size_t whysz)
{
    struct evhttp_uri *u = strncasecmp(s, "http://", 7) == 0 ? evhttp_uri_parse(s) : NULL;
    bool ok = u != NULL && evhttp_uri_get_host(u) != NULL && evhttp_uri_get_host(u)[0] != '\0'
              && evhttp_uri_get_userinfo(u) == NULL && evhttp_uri_get_fragment(u) == NULL;

    if (u != NULL) {
        evhttp_uri_free(u);
    }
    if (!ok) {
        snprintf(why, whysz, "must be an http:// URL with a host (https is not supported)");
    }
    return ok;
}

/* scale_from_zero.models: each model once. */
static void
conf_check_sfz(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    const struct lg_sfz_conf *z = base;

    for (size_t i = 0; clean && i < z->nmodels; i++) {
        for (size_t k = 0; k < i; k++) {
            if (strcmp(z->models[i].model, z->models[k].model) == 0) {
                char at[48];

                snprintf(at, sizeof(at), "/models/%zu/model", i);
                conf_error_at(ctx, at, "model \"%s\" is listed twice (also /models/%zu)",
                              z->models[i].model, k);
                break;
            }
        }
    }
}

#define TB(f) offsetof(struct lg_tenant_budget_conf, f)
static const struct lg_conf_field conf_tenant_budget_fields[] = {
    { "tokens_per_minute", LG_CONF_UINT, TB(tokens_per_minute), .def = 0, .min = 0,
      .max = 4000000000.0 },
    { "tokens_per_day", LG_CONF_UINT, TB(tokens_per_day), .def = 0, .min = 0,
      .max = 4000000000.0 },
    { .name = NULL },
};
#undef TB
static const struct lg_conf_table conf_tenant_budget_table = {
    sizeof(struct lg_tenant_budget_conf), conf_tenant_budget_fields, NULL
};

#define TE(f) offsetof(struct lg_tenants_conf, f)
static const struct lg_conf_field conf_tenants_fields[] = {
    { "headers", LG_CONF_STRARRAY, TE(headers), .min = 0, .max = 8, .aux_offset = TE(nheaders) },
    { "max", LG_CONF_UINT, TE(max), .def = 1000, .min = 1, .max = 100000 },
    { "idle_expiry", LG_CONF_DURATION, TE(idle_expiry_ms), .def = CONF_M(10), .min = CONF_S(1),
      .max = CONF_H(24 * 7) },
    { "half_life", LG_CONF_DURATION, TE(half_life_ms), .def = CONF_S(60), .min = CONF_MS(100),
      .max = CONF_H(24) },
    { "budget", LG_CONF_OBJECT, TE(budget), .sub = &conf_tenant_budget_table },
    { .name = NULL },
};
#undef TE
static const struct lg_conf_table conf_tenants_table = { sizeof(struct lg_tenants_conf),
                                                         conf_tenants_fields, conf_check_tenants };

/* tracing.headers: {"name": "value"}, each name an HTTP token, each value printable. */
static void
conf_check_tracing(struct lg_conf_ctx *ctx, void *base, bool clean)
{
    const struct lg_tracing_conf *t = base;
    const char *name;
    json_t *v;
    char sfx[300];

    (void)clean;
    if (t->headers == NULL) {
        return;
    }
    json_object_foreach(t->headers, name, v) {
        const char *s = json_string_value(v);
        bool ok = name[0] != '\0' && strlen(name) < 128;

        for (const char *p = name; ok && *p; p++) {
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')
                 || strchr("!#$%&'*+-.^_`|~", *p) != NULL;
        }
        snprintf(sfx, sizeof(sfx), "/headers/%.200s", name);
        if (!ok) {
            conf_error_at(ctx, sfx, "a header name is 1..127 bytes of an HTTP token");
            continue;
        }
        ok = s != NULL && strlen(s) < 1024;
        for (const char *p = s; ok && *p; p++) {
            ok = (unsigned char)*p >= 0x20 && *p != 0x7f;
        }
        if (!ok) {
            conf_error_at(ctx, sfx, "a header value is a string of printable bytes, under 1 KiB");
        }
    }
}

#define ZM(f) offsetof(struct lg_sfz_model_conf, f)
static const struct lg_conf_field conf_sfz_model_fields[] = {
    { "model", LG_CONF_STR, ZM(model), .required = true },
    { "enabled", LG_CONF_BOOL, ZM(enabled), .def = 1 },
    { "max_held", LG_CONF_UINT, ZM(max_held), .def = 0, .min = 0, .max = 100000 },
    { "hold", LG_CONF_DURATION, ZM(hold_ms), .def = 0, .min = 0, .max = CONF_H(1) },
    { .name = NULL },
};
#undef ZM
static const struct lg_conf_table conf_sfz_model_table = { sizeof(struct lg_sfz_model_conf),
                                                           conf_sfz_model_fields, NULL };

#define ZF(f) offsetof(struct lg_sfz_conf, f)
static const struct lg_conf_field conf_sfz_fields[] = {
    { "enabled", LG_CONF_BOOL, ZF(enabled), .def = 0 },
    { "max_held", LG_CONF_UINT, ZF(max_held), .def = 100, .min = 1, .max = 100000 },
    { "hold", LG_CONF_DURATION, ZF(hold_ms), .def = CONF_S(60), .min = 1, .max = CONF_H(1) },
    { "retry_after", LG_CONF_DURATION, ZF(retry_after_ms), .def = CONF_S(10), .min = CONF_S(1),
      .max = CONF_H(1) },
    { "webhook", LG_CONF_STR, ZF(webhook), .required = false, .check = conf_check_webhook },
    { "webhook_timeout", LG_CONF_DURATION, ZF(webhook_timeout_ms), .def = CONF_S(2),
      .min = CONF_MS(10), .max = CONF_M(1) },
    { "models", LG_CONF_OBJARRAY, ZF(models), .min = 0, .max = 4096, .sub = &conf_sfz_model_table,
      .shorthand = "model", .aux_offset = ZF(nmodels) },
    { .name = NULL },
};
#undef ZF
static const struct lg_conf_table conf_sfz_table = { sizeof(struct lg_sfz_conf), conf_sfz_fields,
                                                     conf_check_sfz };
static const char *const conf_otlp_encodings[] = { "protobuf", "json", NULL };

#define TR(f) offsetof(struct lg_tracing_conf, f)
static const struct lg_conf_field conf_tracing_fields[] = {
    { "endpoint", LG_CONF_STR, TR(endpoint), .required = false, .check = lg_otlp_check_url },
    { "headers", LG_CONF_JSON, TR(headers), .required = false },
    { "sample_ratio", LG_CONF_DOUBLE, TR(sample_ratio), .def = 1, .min = 0, .max = 1 },
    { "service_name", LG_CONF_STR, TR(service_name), .def_str = "llmgate" },
    { "queue", LG_CONF_UINT, TR(queue), .def = 4096, .min = 16, .max = 1000000 },
    { "batch", LG_CONF_UINT, TR(batch), .def = 512, .min = 1, .max = 100000 },
    { "interval", LG_CONF_DURATION, TR(interval_ms), .def = CONF_S(1), .min = CONF_MS(10),
      .max = CONF_M(1) },
    { "timeout", LG_CONF_DURATION, TR(timeout_ms), .def = CONF_S(2), .min = CONF_MS(10),
      .max = CONF_M(1) },
    { "encoding", LG_CONF_ENUM, TR(encoding), .def = LG_OTLP_PROTOBUF,
      .names = conf_otlp_encodings },
    { .name = NULL },
};
#undef TR
static const struct lg_conf_table conf_tracing_table = { sizeof(struct lg_tracing_conf),
                                                         conf_tracing_fields, conf_check_tracing };

#define CF(f) offsetof(struct lg_config, f)
static const struct lg_conf_field conf_root_fields[] = {
    { "listen", LG_CONF_OBJARRAY, CF(listen), .required = true, .min = 1, .max = 64,
      .sub = &conf_listen_table, .shorthand = "address", .aux_offset = CF(nlisten) },
    { "workers", LG_CONF_UINT, CF(workers), .def = 0, .min = 0, .max = CONF_MAX_WORKERS,
      .zero_word = "auto" },
    { "log_level", LG_CONF_ENUM, CF(log_level), .def = LG_LOG_INFO, .names = conf_log_levels },
    { "access_log", LG_CONF_OBJECT, CF(access_log), .sub = &conf_access_log_table,
      .shorthand = "path", .off_false = true },
    { "timeouts", LG_CONF_OBJECT, CF(timeouts), .sub = &conf_timeouts_table },
    { "limits", LG_CONF_OBJECT, CF(limits), .sub = &conf_limits_table },
    { "routing", LG_CONF_OBJECT, CF(routing), .sub = &conf_routing_table },
    { "health", LG_CONF_OBJECT, CF(health), .sub = &conf_health_table },
    { "admin", LG_CONF_OBJECT, CF(admin), .sub = &conf_admin_table, .shorthand = "listen" },
    { "peers", LG_CONF_OBJARRAY, CF(peers), .min = 0, .max = 64, .sub = &conf_peer_table,
      .shorthand = "admin", .aux_offset = CF(npeers) },
    { "discovery", LG_CONF_OBJECT, CF(discovery), .sub = &conf_discovery_table },
    { "auth", LG_CONF_OBJECT, CF(auth), .sub = &conf_auth_table, .shorthand = "keys_file" },
    { "budgets", LG_CONF_OBJECT, CF(budgets), .sub = &conf_budgets_table },
    { "scheduling", LG_CONF_OBJECT, CF(scheduling), .sub = &conf_scheduling_table },
    { "tenants", LG_CONF_OBJECT, CF(tenants), .sub = &conf_tenants_table },
    { "scale_from_zero", LG_CONF_OBJECT, CF(scale_from_zero), .sub = &conf_sfz_table },
    { "tracing", LG_CONF_OBJECT, CF(tracing), .sub = &conf_tracing_table,
      .shorthand = "endpoint" },
    { "backends", LG_CONF_OBJARRAY, CF(backends), .required = true, .min = 1, .max = 4096,
      .sub = &conf_backend_table, .aux_offset = CF(nbackends) },
    { .name = NULL },
};
#undef CF
static const struct lg_conf_table conf_root_table = { sizeof(struct lg_config), conf_root_fields,
                                                      conf_check_root };

/* ---- loading ------------------------------------------------------------ */

static void
conf_free(struct lg_config *c)
{
    for (size_t i = 0; i < c->ntemplates; i++) {
        lg_conf_free_fields(&conf_backend_table, &c->templates[i]);
    }
    free(c->templates);
    free(c->routing.resume.rules);
    lg_conf_free_fields(&conf_root_table, c);
    json_decref(c->root);
    for (size_t i = 0; i < c->nwarnings; i++) {
        free(c->warnings[i]);
    }
    free(c->warnings);
    free(c->path);
    free(c->text);
    free(c);
}

/* Backends with "enabled": false were validated like the others; drop them.
 * Templates ("discover") move to templates[]: discovery.c expands them. */
static void
conf_drop_disabled(struct lg_config *c)
{
    size_t k = 0;

    c->templates = lg_xcalloc(c->nbackends ? c->nbackends : 1, sizeof(*c->templates));
    for (size_t i = 0; i < c->nbackends; i++) {
        if (!c->backends[i].enabled) {
            lg_conf_free_fields(&conf_backend_table, &c->backends[i]);
        } else if (c->backends[i].discover.dns != NULL) {
            c->templates[c->ntemplates++] = c->backends[i];
        } else {
            c->backends[k++] = c->backends[i];
        }
    }
    c->nbackends = k;
}

/* 1-based line and column (in UTF-8 characters, as jansson counts) of text[pos]. */
static void
conf_line_col(const char *text, size_t pos, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            ++*line;
            *col = 1;
        } else if (((unsigned char)text[i] & 0xc0) != 0x80) {
            ++*col;
        }
    }
}

int
lg_config_load_buffer_flags(const char *text, size_t len, const char *name, unsigned flags,
                            struct lg_config **out, struct lg_config_errors *errs)
{
    struct lg_conf_ctx ctx = {
        .name = name, .text = text, .len = len, .flags = flags, .errs = errs
    };
    json_error_t jerr;
    struct lg_config *c;
    const char *nul;
    json_t *root;

    if (len > LG_CONFIG_MAX_BYTES) {
        lg_conf_errors_add(errs, "%s:1:1: error: /: the file is larger than %u MiB", name,
                           LG_CONFIG_MAX_BYTES >> 20);
        return LG_EINVAL;
    }
    nul = memchr(text, '\0', len);
    if (nul != NULL) {
        /* jansson's buffered reader skips NUL bytes, so positions would drift */
        int line;
        int col;

        conf_line_col(text, (size_t)(nul - text), &line, &col);
        lg_conf_errors_add(errs, "%s:%d:%d: error: /: NUL byte in the file", name, line, col);
        return LG_EINVAL;
    }
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        lg_conf_errors_add(errs, "%s:%d:%d: error: /: %s", name, LG_MAX(jerr.line, 1),
                           LG_MAX(jerr.column, 1), jerr.text);
        return LG_EINVAL;
    }
    c = lg_xcalloc(1, sizeof(*c));
    c->path = lg_xstrdup(name);
    c->text = lg_xmalloc(len + 1);
    memcpy(c->text, text, len);
    c->text[len] = '\0';
    c->text_len = len;
    c->root = root;
    c->refcnt = 1;
    lg_conf_defaults(&conf_root_table, c);
    lg_conf_object(&ctx, &conf_root_table, root, c);
    free(ctx.ptr);
    c->warnings = ctx.warnings; /* freed with c */
    c->nwarnings = ctx.nwarnings;
    if (ctx.nerrors > 0) {
        conf_free(c);
        return LG_EINVAL;
    }
    conf_drop_disabled(c);
    *out = c;
    return LG_OK;
}

int
lg_config_load_buffer(const char *text, size_t len, const char *name, struct lg_config **out,
                      struct lg_config_errors *errs)
{
    return lg_config_load_buffer_flags(text, len, name, 0, out, errs);
}

int
lg_config_load(const char *path, struct lg_config **out, struct lg_config_errors *errs)
{
    size_t len = 0;
    size_t cap = (size_t)64 * 1024;
    char *text = NULL;
    FILE *f;
    int rc;

    f = fopen(path, "rb");
    if (f == NULL) {
        lg_conf_errors_add(errs, "%s: error: cannot read: %s", path, strerror(errno));
        return LG_EIO;
    }
    text = lg_xmalloc(cap);
    for (;;) {
        size_t n = fread(text + len, 1, cap - len, f);

        len += n;
        if (n == 0 || len > LG_CONFIG_MAX_BYTES) {
            break;
        }
        if (len == cap) {
            cap *= 2;
            text = lg_xrealloc(text, cap);
        }
    }
    if (ferror(f)) {
        lg_conf_errors_add(errs, "%s: error: cannot read: %s", path, strerror(errno));
        rc = LG_EIO;
    } else {
        rc = lg_config_load_buffer(text, len, path, out, errs);
    }
    fclose(f);
    free(text);
    return rc;
}

struct lg_config *
lg_config_ref(struct lg_config *conf)
{
    __atomic_add_fetch(&conf->refcnt, 1, __ATOMIC_RELAXED);
    return conf;
}

void
lg_config_unref(struct lg_config *conf)
{
    if (conf != NULL && __atomic_sub_fetch(&conf->refcnt, 1, __ATOMIC_ACQ_REL) == 0) {
        conf_free(conf);
    }
}

void
lg_config_errors_print(const struct lg_config_errors *errs, void *file)
{
    FILE *f = file != NULL ? file : stderr;

    for (size_t i = 0; i < errs->n; i++) {
        fprintf(f, "%s\n", errs->msgs[i]);
    }
    if (errs->dropped > 0) {
        fprintf(f, "(%zu more error%s not shown)\n", errs->dropped, errs->dropped > 1 ? "s" : "");
    }
}

void
lg_config_errors_free(struct lg_config_errors *errs)
{
    for (size_t i = 0; i < errs->n; i++) {
        free(errs->msgs[i]);
    }
    memset(errs, 0, sizeof(*errs));
}

bool
lg_config_sfz(const struct lg_config *conf, const char *model, uint32_t *max_held,
              uint64_t *hold_ms)
{
    const struct lg_sfz_conf *z = &conf->scale_from_zero;

    *max_held = z->max_held;
    *hold_ms = z->hold_ms;
    for (size_t i = 0; i < z->nmodels; i++) {
        const struct lg_sfz_model_conf *m = &z->models[i];

        if (strcmp(m->model, model) == 0) {
            *max_held = m->max_held != 0 ? m->max_held : z->max_held;
            *hold_ms = m->hold_ms != 0 ? m->hold_ms : z->hold_ms;
            return m->enabled;
        }
    }
    return z->enabled;
}

const struct lg_backend_conf *
lg_config_backend(const struct lg_config *conf, const char *name)
{
    for (size_t i = 0; i < conf->nbackends; i++) {
        if (strcmp(conf->backends[i].name, name) == 0) {
            return &conf->backends[i];
        }
    }
    return NULL;
}

int
lg_config_parse_address(const char *s, struct sockaddr_storage *addr, socklen_t *len)
{
    char why[1024]; /* the reason is not shown: LG_EINVAL says it all */

    return lg_conf_address_parse(s, 0, addr, len, why, sizeof(why)) == 0 ? LG_OK : LG_EINVAL;
}

void
lg_config_position(const struct lg_config *conf, const char *pointer, bool at_key, char *buf,
                   size_t len)
{
    int line = 1;
    int col = 1;

    if (conf->text == NULL) {
        /* not loaded from a document (a test's hand-made config) */
    } else if (at_key) {
        lg_config_loc_find_key(conf->text, conf->text_len, pointer, &line, &col);
    } else {
        lg_config_loc_find(conf->text, conf->text_len, pointer, &line, &col);
    }
    snprintf(buf, len, "%s:%d:%d", conf->path ? conf->path : "<config>", line, col);
}
