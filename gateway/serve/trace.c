/*
 * trace.c: a request's trace (trace.h). Context in: the client's
 * traceparent (read strictly, http/tracectx.c) and tracestate, else a trace
 * started here. Context out: each attempt's traceparent names the
 * attempt's own span as the engine's parent. Spans out: the request
 * (SERVER), its wait in the admission queue, each pick and each attempt
 * (CLIENT), named and attributed after OpenTelemetry's HTTP and GenAI
 * conventions, filled on the worker and copied into the exporter's queue
 * (base/otlp.c), which never waits on the network.
 * Owns: struct lg_trace, from lg_trace_begin() to lg_trace_release() (then
 * kept in the worker's list for a next request, up to TRACE_KEEP; the
 * worker frees that list at its end).
 * Borrows: the request, its attempts, the gateway's exporter.
 */
#include "serve/trace.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/endpoint.h"
#include "base/fail.h"
#include "base/otlp.h"
#include "fleet/backend.h"
#include "http/tracectx.h"
#include "serve/worker.h"

struct lg_trace {
    struct lg_free_node link;   /* first: in the worker's list of kept traces */
    uint8_t trace_id[16];
    uint64_t parent_id;     /* the client's span; 0: the trace starts here */
    uint64_t span_id;       /* the request's (SERVER) span */
    uint8_t flags;          /* trace-flags sent on */
    bool sampled;           /* spans are exported */
    const char *operation;  /* static: gen_ai.operation.name; NULL: none fits */
    uint64_t t_hold;        /* monotonic ns: waiting in the admission queue since; 0: not */
    uint64_t t_last_end;    /* monotonic ns: its last attempt's end (the request's span
                               holds its children) */
    uint16_t state_len;
    char state[LG_TRACESTATE_MAX]; /* the client's tracestate, checked */
};

/* ---- ids ----------------------------------------------------------------- */

static __thread uint64_t trace_rng;

static uint64_t
trace_rand(void)
{
    uint64_t z;

    if (trace_rng == 0) {
        if (getrandom(&trace_rng, sizeof(trace_rng), GRND_NONBLOCK) != sizeof(trace_rng)) {
            trace_rng = lg_wall_ns() ^ (uint64_t)(uintptr_t)&trace_rng;
        }
        trace_rng |= 1;
    }
    /* splitmix64 */
    z = (trace_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t
trace_span_id(void)
{
    uint64_t id;

    do {
        id = trace_rand();
    } while (id == 0);
    return id;
}

/* ---- context in ---------------------------------------------------------- */

/* Whether a header is one the trace replaces (traceparent, tracestate). */
static bool
trace_is_header(const char *name, size_t n)
{
    return lg_str_ieq(name, n, "traceparent") || lg_str_ieq(name, n, "tracestate");
}

/* The client's tracestate, its lines joined; dropped whole when malformed. */
static void
trace_state_in(struct lg_trace *t, const struct lg_hdrs *hs)
{
    size_t n = 0;

    for (uint32_t i = 0; i < hs->n; i++) {
        const struct lg_hdr *h = &hs->h[i];

        if (!lg_str_ieq(lg_hdrs_name(hs, h), h->name_len, "tracestate")) {
            continue;
        }
        if (n + (n > 0) + h->value_len > sizeof(t->state)) {
            return; /* too long: none */
        }
        if (n > 0) {
            t->state[n++] = ',';
        }
        memcpy(t->state + n, lg_hdrs_value(hs, h), h->value_len);
        n += h->value_len;
    }
    if (n > 0 && lg_tracestate_valid(t->state, n)) {
        t->state_len = (uint16_t)n;
    }
}

/* The client's context is not forwarded: each attempt sends its own (relay.c skips hop headers). */
static void
trace_hide_inbound(struct lg_hdrs *hs)
{
    for (uint32_t i = 0; i < hs->n; i++) {
        struct lg_hdr *h = &hs->h[i];

        if (trace_is_header(lg_hdrs_name(hs, h), h->name_len)) {
            h->hop = true;
        }
    }
}

static const char *
trace_operation(const struct lg_request *req)
{
    const struct lg_endpoint *e = lg_endpoint_find(req->hdrs.buf + req->hdrs.url_off,
                                                   req->hdrs.url_len);

    switch (e != NULL ? e->id : LG_ENDPOINT_OTHER_V1) {
    case LG_ENDPOINT_CHAT:
        return "chat";
    case LG_ENDPOINT_COMPLETIONS:
        return "text_completion";
    case LG_ENDPOINT_EMBEDDINGS:
        return "embeddings";
    default:
        return NULL;
    }
}

void
lg_trace_begin(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    struct lg_otlp *o = c->w->gw->tracer;
    struct lg_tracectx in;
    const struct lg_hdr *h = NULL;
    struct lg_trace *t;
    bool continued = false, sampled = true, inbound = false;
    uint32_t nparents = 0;

    if (o == NULL) {
        return;
    }
    /* one traceparent exactly: two are invalid, as a malformed one is */
    for (uint32_t i = 0; i < req->hdrs.n; i++) {
        const struct lg_hdr *x = &req->hdrs.h[i];

        if (lg_str_ieq(lg_hdrs_name(&req->hdrs, x), x->name_len, "traceparent")) {
            h = nparents++ == 0 ? x : NULL;
            inbound = true;
        } else if (lg_str_ieq(lg_hdrs_name(&req->hdrs, x), x->name_len, "tracestate")) {
            inbound = true;
        }
    }
    continued = h != NULL
                && lg_tracectx_parse(lg_hdrs_value(&req->hdrs, h), h->value_len, &in) == LG_OK;
    if (!continued) {
        double ratio = lg_otlp_sample_ratio(o);

        sampled = ratio >= 1 || (ratio > 0 && (double)(trace_rand() >> 11) * 0x1p-53 < ratio);
        if (!sampled && !inbound) {
            return; /* not sampled, nothing to continue or replace: no trace */
        }
    }
    /* all but the state's bytes set here (state_len says how many) */
    if (c->w->trace_free != NULL) {
        t = (struct lg_trace *)c->w->trace_free;
        c->w->trace_free = t->link.next;
        c->w->ntrace_free--;
    } else {
        t = lg_xmalloc(sizeof(*t));
    }
    t->parent_id = 0;
    t->state_len = 0;
    t->t_hold = 0;
    t->t_last_end = 0;
    if (continued) {
        memcpy(t->trace_id, in.trace_id, 16);
        t->parent_id = in.parent_id;
        t->flags = in.flags;
        t->sampled = (in.flags & LG_TRACECTX_SAMPLED) != 0;
        trace_state_in(t, &req->hdrs);
    } else {
        uint64_t a = trace_span_id(), b = trace_rand();

        for (int i = 0; i < 8; i++) {
            t->trace_id[i] = (uint8_t)(a >> (56 - 8 * i));
            t->trace_id[8 + i] = (uint8_t)(b >> (56 - 8 * i));
        }
        /* a trace of its own, or one restarted: a malformed inbound context
         * is not sent on (the engine gets this trace's, sampled or not) */
        t->flags = sampled ? LG_TRACECTX_SAMPLED : 0;
        t->sampled = sampled;
    }
    t->span_id = trace_span_id();
    t->operation = trace_operation(req);
    req->tries.trace = t;
    if (inbound) {
        trace_hide_inbound(&req->hdrs);
    }
}

/* Traces a worker keeps for its next requests: as many as it has requests in
 * flight, up to this (about 600 bytes each). */
#define TRACE_KEEP 256

void
lg_trace_release(struct lg_worker *w, struct lg_request *req)
{
    struct lg_trace *t = req->tries.trace;

    if (w->ntrace_free < TRACE_KEEP) {
        t->link.next = w->trace_free; /* the next request's, without malloc and free */
        w->trace_free = &t->link;
        w->ntrace_free++;
    } else {
        free(t);
    }
    req->tries.trace = NULL;
}

/* ---- context out --------------------------------------------------------- */

size_t
lg_trace_headers(const struct lg_request *req, const struct lg_attempt *a, char *buf, size_t n)
{
    const struct lg_trace *t = req->tries.trace;
    size_t need = 13 + LG_TRACEPARENT_LEN + 2 + (t->state_len ? 12 + t->state_len + 2 : 0);

    if (need > n) {
        return 0;
    }
    memcpy(buf, "traceparent: ", 13);
    lg_tracectx_format(buf + 13, t->trace_id, a->span_id != 0 ? a->span_id : t->span_id,
                       t->flags);
    memcpy(buf + 13 + LG_TRACEPARENT_LEN, "\r\n", 2);
    if (t->state_len > 0) {
        char *p = buf + 13 + LG_TRACEPARENT_LEN + 2;

        memcpy(p, "tracestate: ", 12);
        memcpy(p + 12, t->state, t->state_len);
        memcpy(p + 12 + t->state_len, "\r\n", 2);
    }
    return need;
}

void
lg_trace_launch(struct lg_client *c, struct lg_attempt *a)
{
    (void)c;
    a->span_id = trace_span_id();
}

/* ---- spans out ----------------------------------------------------------- */

/* Monotonic ns of the request to wall-clock ns. */
static uint64_t
trace_wall(const struct lg_request *req, uint64_t t)
{
    return req->wall_start + (t > req->t_start ? t - req->t_start : 0);
}

static void
trace_span_init(struct lg_span *s, const struct lg_trace *t, uint64_t id, uint64_t parent,
                enum lg_span_kind kind)
{
    s->nattrs = 0;
    s->nevents = 0;
    s->text_len = 0;
    s->state_len = 0;
    s->msg_len = 0;
    s->status = LG_SPAN_UNSET;
    memcpy(s->trace_id, t->trace_id, 16);
    s->span_id = id;
    s->parent_id = parent;
    s->kind = (uint8_t)kind;
}

/* The span's name: a, then " " and b's bn bytes (at most 256 of them) when bn > 0. */
static void
trace_name(struct lg_span *s, const char *a, const char *b, size_t bn)
{
    uint16_t n1, n2 = 0, n3 = 0;

    s->name_off = lg_span_text(s, a, strlen(a), &n1);
    if (bn > 0) {
        lg_span_text(s, " ", 1, &n2);
        lg_span_text(s, b, LG_MIN(bn, (size_t)256), &n3);
    }
    s->name_len = (uint16_t)(n1 + n2 + n3);
}

static void
trace_error(struct lg_span *s, const char *type)
{
    s->status = LG_SPAN_ERROR;
    lg_span_str(s, "error.type", type, strlen(type));
}

static void
trace_model(struct lg_span *s, const struct lg_trace *t, const struct lg_request *req)
{
    if (t->operation != NULL) {
        lg_span_str(s, "gen_ai.operation.name", t->operation, strlen(t->operation));
    }
    lg_span_str(s, "gen_ai.request.model", req->info.model, strlen(req->info.model));
}

static void
trace_submit(struct lg_client *c, const struct lg_span *s)
{
    lg_otlp_submit(c->w->gw->tracer, s);
}

void
lg_trace_pick(struct lg_client *c, const struct lg_attempt *a, int rc, uint64_t t0)
{
    const struct lg_request *req = &c->req;
    const struct lg_trace *t = req->tries.trace;
    const char *kind = lg_attempt_kind_name(a->kind);
    struct lg_span s;

    if (!t->sampled) {
        return;
    }
    trace_span_init(&s, t, trace_span_id(), t->span_id, LG_SPAN_INTERNAL);
    trace_name(&s, "pick", "", 0);
    s.start_unix_ns = trace_wall(req, t0);
    s.end_unix_ns = trace_wall(req, lg_now_ns());
    lg_span_str(&s, "llmgate.attempt.kind", kind, strlen(kind));
    if (a->pick.policy != NULL) {
        lg_span_str(&s, "llmgate.route.policy", a->pick.policy, strlen(a->pick.policy));
    }
    if (a->pick.reason != NULL) {
        lg_span_str(&s, "llmgate.route.reason", a->pick.reason, strlen(a->pick.reason));
    }
    if (rc == LG_OK && a->pick.backend != NULL) {
        lg_span_str(&s, "llmgate.backend", a->pick.backend->name, strlen(a->pick.backend->name));
        lg_span_double(&s, "llmgate.route.predicted_ttft_ms",
                       a->pick.service_ms + (a->pick.wait_ms > 0 ? a->pick.wait_ms : 0));
        lg_span_double(&s, "llmgate.route.load", a->pick.load);
    } else {
        trace_error(&s, rc == LG_EBUSY ? "busy" : "no_backend");
    }
    trace_submit(c, &s);
}

void
lg_trace_held(struct lg_client *c)
{
    c->req.tries.trace->t_hold = lg_now_ns();
}

static void
trace_queue_span(struct lg_worker *w, const struct lg_request *req, uint64_t end, bool admitted)
{
    struct lg_trace *t = req->tries.trace;
    struct lg_span s;

    if (t->sampled) {
        trace_span_init(&s, t, trace_span_id(), t->span_id, LG_SPAN_INTERNAL);
        trace_name(&s, "queue", "", 0);
        s.start_unix_ns = trace_wall(req, t->t_hold);
        s.end_unix_ns = trace_wall(req, end);
        if (!admitted) {
            trace_error(&s, req->error != NULL ? req->error : "not_admitted");
        }
        lg_otlp_submit(w->gw->tracer, &s);
    }
    t->t_hold = 0;
}

void
lg_trace_admitted(struct lg_client *c)
{
    if (c->req.tries.trace->t_hold != 0) {
        trace_queue_span(c->w, &c->req, lg_now_ns(), true);
    }
}

void
lg_trace_attempt_end(struct lg_client *c, const struct lg_attempt *a)
{
    const struct lg_request *req = &c->req;
    struct lg_trace *t = req->tries.trace;
    const struct lg_backend *b = a->pick.backend;
    const char *kind = lg_attempt_kind_name(a->kind);
    struct lg_span s;

    if (!t->sampled || a->span_id == 0 || b == NULL) {
        return;
    }
    t->t_last_end = LG_MAX(t->t_last_end, a->t_end);
    trace_span_init(&s, t, a->span_id, t->span_id, LG_SPAN_CLIENT);
    trace_name(&s, t->operation != NULL ? t->operation : "POST", req->info.model,
               strlen(req->info.model));
    s.start_unix_ns = trace_wall(req, a->t_dispatch);
    s.end_unix_ns = trace_wall(req, a->t_end != 0 ? a->t_end : lg_now_ns());
    trace_model(&s, t, req);
    lg_span_str(&s, "llmgate.attempt.kind", kind, strlen(kind));
    lg_span_str(&s, "llmgate.backend", b->name, strlen(b->name));
    const struct lg_backend_conf *bconf = lg_backend_conf(b);

    if (bconf->host != NULL) {
        lg_span_str(&s, "server.address", bconf->host, strlen(bconf->host));
        lg_span_int(&s, "server.port", bconf->port);
    }
    lg_span_bool(&s, "llmgate.connection.reused", a->up_reused);
    if (a->status != 0) {
        lg_span_int(&s, "http.response.status_code", a->status);
    }
    lg_span_int(&s, "llmgate.response.bytes", (int64_t)a->up_bytes);
    if (a->t_connect != 0 && !a->up_reused) {
        lg_span_event(&s, "connected", trace_wall(req, a->t_connect));
    }
    if (a->t_first_byte != 0) {
        lg_span_event(&s, "first_byte", trace_wall(req, a->t_first_byte));
    }
    if (a->t_first_token != 0) {
        lg_span_event(&s, "first_token", trace_wall(req, a->t_first_token));
        lg_span_double(&s, "gen_ai.server.time_to_first_token",
                       (double)(a->t_first_token - a->t_dispatch) / 1e9);
    }
    if (a->fail != LG_FAIL_NONE) {
        trace_error(&s, lg_fail_name(a->fail));
    } else if (a->status >= 500) {
        trace_error(&s, "http_status");
    }
    trace_submit(c, &s);
}

static int64_t
trace_tokens(const struct lg_request *req, bool input)
{
    const struct lg_json_probe *p = (req->flags & LG_REQ_F_SSE) ? &req->scan.sse.probe : &req->scan.probe;

    return input ? p->prompt_tokens : p->completion_tokens;
}

void
lg_trace_request_end(struct lg_worker *w, const struct lg_request *req)
{
    struct lg_trace *t = req->tries.trace;
    const char *url = req->hdrs.buf + req->hdrs.url_off;
    size_t plen = strcspn(url, "?");
    const char *method = llhttp_method_name((llhttp_method_t)req->method);
    const struct lg_attempt *a = req->att;
    int64_t in, out;
    struct lg_span s;

    if (t->t_hold != 0) {
        trace_queue_span(w, req, req->t_end, false); /* never admitted */
    }
    if (!t->sampled) {
        return;
    }
    trace_span_init(&s, t, t->span_id, t->parent_id, LG_SPAN_SERVER);
    trace_name(&s, method, url, LG_MIN(plen, req->hdrs.url_len));
    if (t->state_len > 0) {
        s.state_off = lg_span_text(&s, t->state, t->state_len, &s.state_len);
    }
    s.start_unix_ns = req->wall_start;
    s.end_unix_ns = trace_wall(req, LG_MAX(req->t_end, t->t_last_end));
    lg_span_str(&s, "http.request.method", method, strlen(method));
    lg_span_str(&s, "url.path", url, LG_MIN(plen, req->hdrs.url_len));
    if (req->status != 0) {
        lg_span_int(&s, "http.response.status_code", req->status);
    }
    trace_model(&s, t, req);
    if (req->info.max_tokens > 0) {
        lg_span_int(&s, "gen_ai.request.max_tokens", req->info.max_tokens);
    }
    lg_span_bool(&s, "llmgate.request.stream", req->info.stream);
    lg_span_str(&s, "llmgate.request.id", req->id, strlen(req->id));
    in = trace_tokens(req, true);
    out = trace_tokens(req, false);
    if (in >= 0) {
        lg_span_int(&s, "gen_ai.usage.input_tokens", in);
    }
    if (out >= 0) {
        lg_span_int(&s, "gen_ai.usage.output_tokens", out);
    }
    lg_span_int(&s, "llmgate.attempts", req->tries.n);
    if (a != NULL && a->pick.backend != NULL && (req->flags & LG_REQ_F_PROXIED)) {
        lg_span_str(&s, "llmgate.backend", a->pick.backend->name,
                    strlen(a->pick.backend->name));
        if (a->pick.policy != NULL) {
            lg_span_str(&s, "llmgate.route.policy", a->pick.policy, strlen(a->pick.policy));
        }
    }
    if (req->t_first_token != 0 && (req->flags & LG_REQ_F_STARTED)) {
        lg_span_event(&s, "first_token", trace_wall(req, req->t_first_token));
        lg_span_double(&s, "gen_ai.server.time_to_first_token",
                       (double)(req->t_first_token - req->t_start) / 1e9);
    }
    if (req->status >= 500 || req->status == 0) {
        trace_error(&s, req->error != NULL ? req->error : "no_response");
    } else if (req->error != NULL && req->status >= 400 && req->status < 500 && req->status != 499) {
        lg_span_str(&s, "error.type", req->error, strlen(req->error));
    }
    lg_otlp_submit(w->gw->tracer, &s);
}
