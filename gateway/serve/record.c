/*
 * record.c: what a request leaves behind when it ends: its worker's
 * counters, its metrics (by route and status, its routing decision, its
 * backend's latencies and tokens) and its access-log line (one JSON object,
 * always the same keys in the same order). Written once per request, by the
 * client's one exit (client.c); /metrics and the writer thread only read.
 *
 * Owns nothing: the counters are the worker's and the backend's, the line
 * goes to the worker's access-log buffer (base/accesslog.c).
 * Invariant: relaxed atomic adds only; a routing-decision slot is filled
 * before ndecisions grows past it.
 */
#include "serve/record.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <llhttp.h>

#include "base/accesslog.h"
#include "base/jsonput.h"
#include "base/endpoint.h"
#include "base/stats.h"
#include "fleet/backend.h"
#include "serve/client_types.h"
#include "serve/worker.h"

#define STAT_ADD(p, n) __atomic_fetch_add((p), (n), __ATOMIC_RELAXED)

/* ---- metrics ------------------------------------------------------------ */

/* Counts a routing decision under (policy, reason); the table is the worker's own. */
static void
record_decision(struct lg_worker_metrics *m, const char *policy, const char *reason)
{
    uint32_t n = __atomic_load_n(&m->ndecisions, __ATOMIC_RELAXED);
    struct lg_stats_decision *d;

    for (uint32_t i = 0; i < n; i++) {
        d = &m->decisions[i];
        if (d->reason == reason && strcmp(d->policy, policy) == 0) {
            STAT_ADD(&d->count, 1);
            return;
        }
    }
    if (n == LG_STATS_MAX_DECISIONS) {
        STAT_ADD(&m->decisions_dropped, 1);
        return;
    }
    d = &m->decisions[n];
    snprintf(d->policy, sizeof(d->policy), "%s", policy);
    d->reason = reason;
    d->count = 1;
    __atomic_store_n(&m->ndecisions, n + 1, __ATOMIC_RELEASE);
}

/*
 * The answer's tokens: the engine's count where it gave one (usage), else
 * its content events. After a continuation (resume.c) the usage counts the
 * continuation's own: the events delivered before it are added.
 */
static uint64_t
record_tokens(const struct lg_request *req)
{
    int64_t usage = (req->flags & LG_REQ_F_SSE) ? lg_sse_completion_tokens(&req->scan.sse)
                                                : req->scan.probe.completion_tokens;

    if (usage < 0) {
        return req->content_events;
    }
    return (uint64_t)usage + (req->tries.resumed > 0 ? req->tries.resume_events : 0);
}

/* An answer that started: one that ended (2xx), or whose client left in the
 * middle (499 after the first byte). Its first token and tokens are real. */
static bool
record_answered(const struct lg_request *req)
{
    return (req->status >= 200 && req->status < 300)
           || (req->status == 499 && (req->flags & LG_REQ_F_STARTED));
}

/* Counts the request by route and status, its routing decision, and on its
 * backend: latencies, tokens, prompt bytes. */
static void
record_metrics(struct lg_worker_metrics *wm, const struct lg_request *req)
{
    const char *path = req->hdrs.buf != NULL ? req->hdrs.buf + req->hdrs.url_off : "";
    enum lg_stats_route route = lg_endpoint_route(path, req->hdrs.buf ? req->hdrs.url_len : 0);
    const struct lg_route_result *pick = req->att != NULL ? &req->att->pick : NULL;
    struct lg_backend *b = (req->flags & LG_REQ_F_PROXIED) && pick != NULL ? pick->backend : NULL;
    int status = req->status;
    struct lg_backend_metrics *bm;
    int64_t tokens;

    if (status >= LG_STATS_MIN_CODE && status < LG_STATS_MIN_CODE + LG_STATS_NCODES) {
        STAT_ADD(&wm->requests[route][status - LG_STATS_MIN_CODE], 1);
    }
    if (req->tries.resumed > 0) {
        STAT_ADD(&wm->resumed, req->tries.resumed);
    }
    if (req->tries.resume_fail != LG_STATS_RESUME_NONE
        && req->tries.resume_fail < LG_STATS_NRESUME) {
        STAT_ADD(&wm->resume_failed[req->tries.resume_fail], 1);
    }
    if (b == NULL) {
        return;
    }
    if (pick->policy != NULL && pick->reason != NULL) {
        record_decision(wm, pick->policy, pick->reason);
    }
    bm = &b->metrics;
    STAT_ADD(&bm->requests, 1);
    STAT_ADD(&bm->prompt_bytes, req->info.prompt_bytes);
    if ((req->flags & LG_REQ_F_SSE) && req->scan.sse.error_events > 0) {
        STAT_ADD(&bm->stream_errors, 1); /* the status was sent before the engine failed */
    }
    if (!record_answered(req)) {
        return; /* latencies describe answers, not failures (counted by status) */
    }
    if (req->t_first_token != 0 && req->t_first_token >= req->t_start) {
        lg_hist_observe(&bm->ttft, lg_hist_latency_bounds,
                        (double)(req->t_first_token - req->t_start) / 1e9);
    }
    if (status != 499 && req->t_end != 0 && req->t_end >= req->t_start) {
        lg_hist_observe(&bm->duration, lg_hist_latency_bounds,
                        (double)(req->t_end - req->t_start) / 1e9);
    }
    if (req->content_events > 1 && req->t_last_token > req->t_first_token) {
        lg_hist_observe(&bm->itl, lg_hist_itl_bounds,
                        (double)(req->t_last_token - req->t_first_token)
                            / (double)(req->content_events - 1) / 1e9);
    }
    STAT_ADD(&bm->completion_tokens, record_tokens(req));
    tokens = (req->flags & LG_REQ_F_SSE) ? req->scan.sse.probe.prompt_tokens : req->scan.probe.prompt_tokens;
    if (tokens > 0) {
        STAT_ADD(&bm->prompt_tokens, (uint64_t)tokens);
    }
}

/* ---- the access-log line -------------------------------------------------- */

/*
 * Most bytes a logged string takes in the line, quotes included: a longer one
 * is cut (lg_jput_str), so that the line stays one JSON object whatever the
 * client sent. The request path gets more room than the other strings.
 */
#define ALOG_STR_MAX  512
#define ALOG_PATH_MAX 2048

/*
 * When the first byte of the response the client got came: its attempt's
 * (a continuation's client had it from an attempt before it, which the
 * ended ones' list keeps while the log is on), or 0.
 */
static uint64_t
record_first_byte(const struct lg_request *req)
{
    const struct lg_attempt_log *log = req->tries.log;

    if (req->att == NULL || req->att->kind != LG_ATTEMPT_CONTINUATION) {
        return req->att != NULL ? req->att->t_first_byte : 0;
    }
    for (uint32_t i = log != NULL ? log->n : 0; i-- > 0;) {
        if (log->rec[i].kind != LG_ATTEMPT_CONTINUATION) {
            return log->rec[i].t_first_byte;
        }
    }
    return 0;
}

/* Bytes one entry of "attempts" takes at most: its backend's name, the rest. */
#define ALOG_ATTEMPT_MAX (ALOG_STR_MAX + 256)

/* One try: its backend, kind and status, its times from the request's
 * first byte, how it ended; at most ALOG_ATTEMPT_MAX bytes. */
static char *
record_attempt(char *p, const struct lg_request *req, const struct lg_attempt_rec *r)
{
    static const struct {
        const char *s;
        size_t n;
    } kinds[LG_ATTEMPT_NKINDS] = {
#define KIND(k) { "\",\"kind\":\"" k "\",\"status\":", sizeof("\",\"kind\":\"" k "\",\"status\":") - 1 }
        [LG_ATTEMPT_FIRST] = KIND("first"),
        [LG_ATTEMPT_RETRY] = KIND("retry"),
        [LG_ATTEMPT_HEDGE] = KIND("hedge"),
        [LG_ATTEMPT_CONTINUATION] = KIND("continuation"),
#undef KIND
    };
    const char *name = r->backend->name;
    size_t n = LG_MIN(strlen(name), (size_t)ALOG_STR_MAX - 2); /* as lg_jput_safe */

    p = LG_JPUT_LIT(p, "{\"backend\":\"");
    p = lg_jput_raw(p, name, n);
    p = lg_jput_raw(p, kinds[r->kind].s, kinds[r->kind].n); /* as lg_attempt_kind_name() */
    p = r->status != 0 ? lg_jput_u64(p, r->status) : LG_JPUT_LIT(p, "null");
    p = LG_JPUT_LIT(p, ",\"dispatch\":");
    p = lg_jput_ms(p, req->t_start, r->t_dispatch);
    p = LG_JPUT_LIT(p, ",\"connect\":");
    p = lg_jput_ms(p, req->t_start, r->t_connect);
    p = LG_JPUT_LIT(p, ",\"first_byte\":");
    p = lg_jput_ms(p, req->t_start, r->t_first_byte);
    p = LG_JPUT_LIT(p, ",\"first_token\":");
    p = lg_jput_ms(p, req->t_start, r->t_first_token);
    p = LG_JPUT_LIT(p, ",\"end\":");
    p = lg_jput_ms(p, req->t_start, r->t_end);
    if (r->fail != LG_FAIL_NONE) {
        p = LG_JPUT_LIT(p, ",\"failure\":");
        p = lg_jput_safe(p, lg_fail_name(r->fail), ALOG_STR_MAX);
        return LG_JPUT_LIT(p, "}");
    }
    return LG_JPUT_LIT(p, ",\"failure\":null}");
}

/* An attempt's entry from the attempt itself (its last one: still the request's). */
static void
record_attempt_rec(struct lg_attempt_rec *r, const struct lg_attempt *a)
{
    *r = (struct lg_attempt_rec){
        .backend = a->pick.backend,
        .kind = a->kind,
        .fail = a->fail,
        .status = a->status,
        .t_dispatch = a->t_dispatch,
        .t_connect = a->t_connect,
        .t_first_byte = a->t_first_byte,
        .t_first_token = a->t_first_token,
        .t_end = a->t_end,
    };
}

/*
 * "attempts": every try, in the order they were launched: the ended ones
 * the request kept (attempt.c, while the log is on) and its last one.
 */
static char *
record_attempts(char *p, const struct lg_request *req)
{
    struct lg_attempt_rec all[LG_ATTEMPT_LOG_MAX + 1];
    const struct lg_attempt *a = req->att;
    bool last = a != NULL && a->t_dispatch != 0 && a->pick.backend != NULL;
    size_t n = 0;

    if (req->tries.log == NULL) {
        /* one try or none (most requests): no copy, no sort */
        if (!last) {
            return LG_JPUT_LIT(p, "[]");
        }
        record_attempt_rec(&all[0], a);
        *p++ = '[';
        p = record_attempt(p, req, &all[0]);
        *p++ = ']';
        return p;
    }
    n = LG_MIN(req->tries.log->n, (uint32_t)LG_ATTEMPT_LOG_MAX);
    memcpy(all, req->tries.log->rec, n * sizeof(all[0]));
    if (last) {
        record_attempt_rec(&all[n++], a);
    }
    for (size_t i = 1; i < n; i++) { /* by launch: a hedge's loser ended before the winner */
        struct lg_attempt_rec x = all[i];
        size_t j = i;

        for (; j > 0 && all[j - 1].t_dispatch > x.t_dispatch; j--) {
            all[j] = all[j - 1];
        }
        all[j] = x;
    }
    *p++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            *p++ = ',';
        }
        p = record_attempt(p, req, &all[i]);
    }
    *p++ = ']';
    return p;
}

/*
 * The line's longest: its fixed part with every number at its longest (under
 * 1 KiB), the explanation, the path, eleven other strings and the attempts
 * at their most: no line is ever cut, and no field checks for room.
 */
#define ALOG_LINE_MAX                                                                      \
    (1280 + LG_ROUTE_EXPLAIN_BYTES + ALOG_PATH_MAX + 11 * ALOG_STR_MAX                     \
     + (LG_ATTEMPT_LOG_MAX + 1) * ALOG_ATTEMPT_MAX)

/* A string the gateway names itself (a static one), or null. */
static inline char *
record_name(char *p, const char *s)
{
    return s != NULL ? lg_jput_cstr(p, s, ALOG_STR_MAX) : LG_JPUT_LIT(p, "null");
}

/* The request's access-log line, into the worker's buffer (the log is on). */
static void
record_line(struct lg_alog_buf *buf, const struct lg_request *req, const char *client_addr)
{
    const struct lg_hdrs *hs = &req->hdrs;
    static const struct lg_attempt none;
    const struct lg_attempt *att = req->att != NULL ? req->att : &none; /* the last attempt */
    bool proxied = (req->flags & LG_REQ_F_PROXIED) != 0;
    char mem[ALOG_LINE_MAX];
    char *p = mem;

    p = LG_JPUT_LIT(p, "{\"ts\":");
    p = lg_jput_time(p, req->wall_start);
    p = LG_JPUT_LIT(p, ",\"id\":");
    p = lg_jput_safe(p, req->id, ALOG_STR_MAX); /* nothing to escape: client_set_request_id */
    p = LG_JPUT_LIT(p, ",\"client\":");
    p = lg_jput_safe(p, client_addr, ALOG_STR_MAX);
    p = LG_JPUT_LIT(p, ",\"key\":");
    p = lg_jput_cstr(p, lg_keys_name(&req->auth), ALOG_STR_MAX); /* the key's name, never the key */
    p = LG_JPUT_LIT(p, ",\"tenant\":");
    if (req->sched.tenant != NULL) { /* classified (tenant.c) */
        p = lg_jput_cstr(p, req->sched.tenant->name, ALOG_STR_MAX);
        p = LG_JPUT_LIT(p, ",\"class\":");
        p = lg_jput_safe(p, lg_class_name(req->sched.cls), ALOG_STR_MAX);
    } else {
        p = LG_JPUT_LIT(p, "null,\"class\":null");
    }
    p = LG_JPUT_LIT(p, ",\"method\":");
    p = lg_jput_safe(p, llhttp_method_name((llhttp_method_t)req->method), ALOG_STR_MAX);
    p = LG_JPUT_LIT(p, ",\"path\":");
    p = lg_jput_str(p, hs->url_len ? hs->buf + hs->url_off : "", hs->url_len, ALOG_PATH_MAX);
    p = LG_JPUT_LIT(p, ",\"model\":");
    if (req->info.model[0] != '\0') {
        p = lg_jput_cstr(p, req->info.model, ALOG_STR_MAX);
    } else {
        p = LG_JPUT_LIT(p, "null");
    }
    p = req->info.stream ? LG_JPUT_LIT(p, ",\"stream\":true,\"prompt_bytes\":")
                         : LG_JPUT_LIT(p, ",\"stream\":false,\"prompt_bytes\":");
    p = lg_jput_u64(p, req->info.prompt_bytes);
    p = LG_JPUT_LIT(p, ",\"max_tokens\":");
    if (req->info.model[0] != '\0' && req->info.max_tokens >= 0) {
        p = lg_jput_u64(p, (uint64_t)req->info.max_tokens);
    } else {
        p = LG_JPUT_LIT(p, "null");
    }
    p = LG_JPUT_LIT(p, ",\"status\":");
    p = lg_jput_u64(p, (uint64_t)req->status);
    p = LG_JPUT_LIT(p, ",\"backend\":");
    if (att->pick.backend != NULL && proxied) {
        p = lg_jput_safe(p, att->pick.backend->name, ALOG_STR_MAX);
    } else {
        p = LG_JPUT_LIT(p, "null");
    }
    p = LG_JPUT_LIT(p, ",\"attempt_count\":");
    p = lg_jput_u64(p, req->tries.n);
    p = LG_JPUT_LIT(p, ",\"hedge_after\":");
    p = lg_jput_ms_f(p, (double)req->tries.hedge_after_ms);
    switch (req->tries.hedge) {
    case LG_REQ_HEDGE_NONE:
        p = LG_JPUT_LIT(p, ",\"hedged\":false,\"hedge_winner\":null,\"policy\":");
        break;
    case LG_REQ_HEDGE_FIRST:
        p = LG_JPUT_LIT(p, ",\"hedged\":true,\"hedge_winner\":\"first\",\"policy\":");
        break;
    case LG_REQ_HEDGE_DUP:
        p = LG_JPUT_LIT(p, ",\"hedged\":true,\"hedge_winner\":\"hedge\",\"policy\":");
        break;
    default:
        p = LG_JPUT_LIT(p, ",\"hedged\":true,\"hedge_winner\":null,\"policy\":");
        break;
    }
    p = record_name(p, proxied ? att->pick.policy : NULL);
    p = LG_JPUT_LIT(p, ",\"reason\":");
    p = record_name(p, att->pick.reason);
    p = LG_JPUT_LIT(p, ",\"bytes_in\":");
    p = lg_jput_u64(p, req->head_bytes + req->body_bytes);
    p = LG_JPUT_LIT(p, ",\"bytes_out\":");
    p = lg_jput_u64(p, req->bytes_out);
    p = LG_JPUT_LIT(p, ",\"read\":");
    p = lg_jput_ms(p, req->t_start, req->t_read);
    p = LG_JPUT_LIT(p, ",\"queue\":");
    p = lg_jput_ms(p, req->t_read, att->t_dispatch);
    p = LG_JPUT_LIT(p, ",\"queue_wait\":");
    p = lg_jput_ns_ms(p, req->sched.queue_ns);
    p = LG_JPUT_LIT(p, ",\"ttft_target\":");
    if (req->sched.ttft_target_ms > 0) {
        p = lg_jput_u64(p, req->sched.ttft_target_ms);
    } else {
        p = LG_JPUT_LIT(p, "null");
    }
    p = LG_JPUT_LIT(p, ",\"shed\":");
    if (req->sched.shed != LG_SHED_NONE && lg_shed_name((enum lg_shed)req->sched.shed) != NULL) {
        p = lg_jput_safe(p, lg_shed_name((enum lg_shed)req->sched.shed), ALOG_STR_MAX);
    } else {
        p = LG_JPUT_LIT(p, "null");
    }
    p = LG_JPUT_LIT(p, ",\"connect\":");
    p = lg_jput_ms(p, att->t_dispatch, att->t_connect);
    p = LG_JPUT_LIT(p, ",\"ttfb\":");
    p = lg_jput_ms(p, req->t_start, record_first_byte(req));
    p = LG_JPUT_LIT(p, ",\"ttft\":");
    p = lg_jput_ms(p, req->t_start, record_answered(req) ? req->t_first_token : 0);
    p = LG_JPUT_LIT(p, ",\"total\":");
    p = lg_jput_ms(p, req->t_start, req->t_end);
    p = LG_JPUT_LIT(p, ",\"tokens\":");
    p = lg_jput_u64(p, record_tokens(req));
    p = LG_JPUT_LIT(p, ",\"itl\":");
    if (req->content_events > 1) {
        p = lg_jput_us_ms(p, (req->t_last_token - req->t_first_token) / (req->content_events - 1)
                                 / 1000);
    } else {
        p = LG_JPUT_LIT(p, "null");
    }
    p = LG_JPUT_LIT(p, ",\"resumed\":");
    p = lg_jput_u64(p, req->tries.resumed);
    p = LG_JPUT_LIT(p, ",\"resume_pause\":");
    p = lg_jput_ns_ms(p, req->tries.resume_pause_ns);
    p = LG_JPUT_LIT(p, ",\"attempts\":");
    p = record_attempts(p, req);
    if (att->pick.explain_len > 0 && att->pick.explain_len <= LG_ROUTE_EXPLAIN_BYTES) {
        /* the router's, its length known: one copy (a longer one, asked by the admin API's
         * dry runs, never comes here) */
        p = LG_JPUT_LIT(p, ",\"candidates\":");
        p = lg_jput_raw(p, att->pick.explain, att->pick.explain_len);
    }
    p = LG_JPUT_LIT(p, ",\"error\":");
    if (req->error == NULL && (req->flags & LG_REQ_F_SSE) && req->scan.sse.error_events > 0) {
        p = LG_JPUT_LIT(p, "\"engine_error_event\""); /* a 200 whose stream reported a failure */
    } else {
        p = lg_jput_cstr(p, req->error, ALOG_STR_MAX);
    }
    p = LG_JPUT_LIT(p, "}\n");
    LG_BUG_ON(p > mem + sizeof(mem));
    lg_accesslog_append(buf, mem, (size_t)(p - mem));
}

void
lg_record_request(struct lg_worker *w, const struct lg_request *req, const char *client_addr)
{
    __atomic_fetch_add(&w->stats.requests, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&w->stats.bytes_in, req->head_bytes + req->body_bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&w->stats.bytes_out, req->bytes_out, __ATOMIC_RELAXED);
    record_metrics(&w->metrics, req);
    if (w->alog != NULL) {
        record_line(w->alog, req, client_addr);
    }
}
