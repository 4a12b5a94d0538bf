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

struct alog_line {
    char *p;
    size_t len;
    size_t cap;
};

/* Cut at the line's end: a line never grows past its buffer. */
static __attribute__((noinline)) void
line_raw_cut(struct alog_line *l, const char *s, size_t n)
{
    n = LG_MIN(n, l->cap - l->len);
    memcpy(l->p + l->len, s, n);
    l->len += n;
}

/*
 * Inline, so that a copy of known length (the literals, most of a line) is a
 * few moves instead of a call to memcpy.
 */
static inline void
line_raw(struct alog_line *l, const char *s, size_t n)
{
    if (__builtin_expect(n > l->cap - l->len, 0)) {
        line_raw_cut(l, s, n);
        return;
    }
    memcpy(l->p + l->len, s, n);
    l->len += n;
}

static inline void
line_lit(struct alog_line *l, const char *s)
{
    line_raw(l, s, strlen(s));
}

/* Bytes a JSON string cannot hold as they are. */
static const bool alog_esc[256] = {
    [0x00 ... 0x1f] = true,
    ['"'] = true,
    ['\\'] = true,
    [0x7f] = true,
};

/* alog_esc for eight bytes at once (lg_swar_*: the lowest byte flagged is a true one). */
static inline uint64_t
alog_esc8(uint64_t x)
{
    return lg_swar_lt(x, 0x20) | lg_swar_eq(x, '"') | lg_swar_eq(x, '\\') | lg_swar_eq(x, 0x7f);
}

/* Writes the JSON escape of c (2 or 6 bytes) at d; returns its length. */
static inline size_t
alog_escape(char *d, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";

    d[0] = '\\';
    if (c == '"' || c == '\\') {
        d[1] = (char)c;
        return 2;
    }
    memcpy(d + 1, "u00", 3);
    d[4] = hex[c >> 4];
    d[5] = hex[c & 15];
    return 6;
}

/*
 * Most bytes a logged string takes in the line, quotes included: a longer one
 * is cut (at a character, never inside an escape or a UTF-8 sequence) and
 * ends in "...", so that the line stays one JSON object whatever the client
 * sent. The request path gets more room than the other strings.
 */
#define ALOG_STR_MAX  512
#define ALOG_PATH_MAX 2048

static void
line_str_max(struct alog_line *l, const char *s, size_t n, size_t max)
{
    size_t i = 0, room = l->cap - l->len, budget;
    char *d;

    if (s == NULL) {
        line_lit(l, "null");
        return;
    }
    if (room >= 16 && n <= (LG_MIN(room, max) - 16) / 6) {
        /*
         * Room for the worst case (every byte a 6-byte escape): eight bytes
         * are tested and stored per step, and the output moves on by those
         * that needed no escape (no copy call, no room checks).
         */
        d = l->p + l->len;
        *d++ = '"';
        for (;;) {
            while (n - i >= 8) {
                uint64_t x, m;

                memcpy(&x, s + i, 8);
                memcpy(d, &x, 8);
                m = alog_esc8(x);
                if (m != 0) {
                    size_t k = lg_swar_first(m);

                    d += k;
                    i += k;
                    goto escape;
                }
                d += 8;
                i += 8;
            }
            while (i < n && !alog_esc[(unsigned char)s[i]]) {
                *d++ = s[i++];
            }
            if (i == n) {
                break;
            }
        escape:
            d += alog_escape(d, (unsigned char)s[i++]);
        }
        *d++ = '"';
        l->len = (size_t)(d - l->p);
        return;
    }
    /* may not fit: byte by byte within the budget, which keeps 5 for `..."` */
    if (room < 8) {
        return; /* cannot happen within record_line's buffer */
    }
    budget = LG_MIN(room, max) - 5;
    d = l->p + l->len;
    *d++ = '"';
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = alog_esc[c] ? (c == '"' || c == '\\' ? 2 : 6) : 1;

        if ((size_t)(d - (l->p + l->len)) + k > budget) {
            /* cut before a continuation byte: back to the sequence's start */
            while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80 && d[-1] == s[i - 1]) {
                i--;
                d--;
            }
            memcpy(d, "...", 3);
            d += 3;
            break;
        }
        if (k == 1) {
            *d++ = (char)c;
        } else {
            d += alog_escape(d, c);
        }
        i++;
    }
    *d++ = '"';
    l->len = (size_t)(d - l->p);
}

static inline void
line_str(struct alog_line *l, const char *s, size_t n)
{
    line_str_max(l, s, n, ALOG_STR_MAX);
}

static void
line_cstr(struct alog_line *l, const char *s)
{
    line_str(l, s, s ? strlen(s) : 0);
}

/*
 * A string with no byte JSON must escape, quoted (no scan): what the
 * gateway wrote itself (an address, a method's name, a failure's) or the
 * configuration checked (a backend's name: lg_conf_check_name and
 * lg_conf_check_expanded_name allow none, and 128 bytes at most).
 */
static void
line_safe(struct alog_line *l, const char *s)
{
    size_t n = LG_MIN(strlen(s), (size_t)ALOG_STR_MAX - 2);

    line_raw(l, "\"", 1);
    line_raw(l, s, n);
    line_raw(l, "\"", 1);
}

/* "00" to "99": numbers are written two digits a step (half the divisions). */
static const char alog_digits2[200] = "00010203040506070809101112131415161718192021222324"
                                      "25262728293031323334353637383940414243444546474849"
                                      "50515253545556575859606162636465666768697071727374"
                                      "75767778798081828384858687888990919293949596979899";

/* The digits of v (at least `min` of them, zeros in front) end at `end`; returns their start. */
static inline char *
alog_digits(char *end, uint64_t v, int min)
{
    char *p = end;

    while (v >= 100 || min > 2) {
        p -= 2;
        memcpy(p, alog_digits2 + 2 * (v % 100), 2);
        v /= 100;
        min -= 2;
    }
    if (v >= 10 || min == 2) {
        p -= 2;
        memcpy(p, alog_digits2 + 2 * v, 2);
    } else {
        *--p = (char)('0' + v);
    }
    return p;
}

/* How many digits v has. */
static inline size_t
alog_ndigits(uint64_t v)
{
    size_t n = 1;

    while (v >= 100) {
        v /= 100;
        n += 2;
    }
    return n + (v >= 10);
}

/*
 * Numbers go straight into the line where it has room for the longest (no
 * copy through a scratch array and memcpy: a fifth of the line's
 * instructions went there).
 */
static void
line_u64(struct alog_line *l, uint64_t v)
{
    char b[LG_U64_DIGITS];
    char *p;

    if (__builtin_expect(l->cap - l->len >= LG_U64_DIGITS, 1)) {
        size_t n = alog_ndigits(v);

        alog_digits(l->p + l->len + n, v, 1);
        l->len += n;
        return;
    }
    p = alog_digits(b + sizeof(b), v, 1);
    line_raw(l, p, (size_t)(b + sizeof(b) - p));
}

/* Milliseconds with microsecond precision between two stamps, or null. */
static void
line_ms(struct alog_line *l, uint64_t from, uint64_t to)
{
    char b[LG_U64_DIGITS + 2];
    char *p;
    uint64_t us;

    if (from == 0 || to == 0 || to < from) {
        line_lit(l, "null");
        return;
    }
    us = (to - from) / 1000;
    if (__builtin_expect(l->cap - l->len >= sizeof(b), 1)) {
        size_t n;

        if (us < 100000) {
            /* under 100 ms, most of a line's times: "d.ddd" or "dd.ddd" stored at once */
            unsigned whole = (unsigned)us / 1000, frac = (unsigned)us % 1000;

            p = l->p + l->len;
            if (whole < 10) {
                *p++ = (char)('0' + whole);
            } else {
                memcpy(p, alog_digits2 + 2 * whole, 2);
                p += 2;
            }
            p[0] = '.';
            memcpy(p + 1, alog_digits2 + 2 * (frac / 10), 2);
            p[3] = (char)('0' + frac % 10);
            l->len = (size_t)(p + 4 - l->p);
            return;
        }
        n = alog_ndigits(us / 1000) + 4;

        p = alog_digits(l->p + l->len + n, us % 1000, 3);
        *--p = '.';
        alog_digits(p, us / 1000, 1);
        l->len += n;
        return;
    }
    p = alog_digits(b + sizeof(b), us % 1000, 3);
    *--p = '.';
    p = alog_digits(p, us / 1000, 1);
    line_raw(l, p, (size_t)(b + sizeof(b) - p));
}

/* "YYYY-MM-DDTHH:MM:SS.uuuuuuZ" (quoted); the date part is made once a second per thread. */
static void
line_time(struct alog_line *l, uint64_t wall_ns)
{
    static __thread time_t cached_sec = -1;
    static __thread char cached[24];
    static __thread size_t cached_len;
    time_t sec = (time_t)(wall_ns / LG_NS_PER_S);
    unsigned us = (unsigned)((wall_ns / 1000) % 1000000);
    char frac[10];

    if (l->cap - l->len < 40) {
        return;
    }
    if (sec != cached_sec) {
        struct tm tm;

        gmtime_r(&sec, &tm);
        cached_len = strftime(cached, sizeof(cached), "\"%Y-%m-%dT%H:%M:%S", &tm);
        cached_sec = sec;
    }
    line_raw(l, cached, cached_len);
    frac[0] = '.';
    for (int i = 6; i >= 1; i--) {
        frac[i] = (char)('0' + us % 10);
        us /= 10;
    }
    frac[7] = 'Z';
    frac[8] = '"';
    line_raw(l, frac, 9);
}

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
 * first byte, how it ended. */
static void
record_attempt(struct alog_line *l, const struct lg_request *req, const struct lg_attempt_rec *r)
{
    static const struct {
        const char *s;
        size_t n;
    } kinds[LG_ATTEMPT_NKINDS] = {
#define KIND(k) { ",\"kind\":\"" k "\",\"status\":", sizeof(",\"kind\":\"" k "\",\"status\":") - 1 }
        [LG_ATTEMPT_FIRST] = KIND("first"),
        [LG_ATTEMPT_RETRY] = KIND("retry"),
        [LG_ATTEMPT_HEDGE] = KIND("hedge"),
        [LG_ATTEMPT_CONTINUATION] = KIND("continuation"),
#undef KIND
    };

    line_lit(l, "{\"backend\":");
    line_safe(l, r->backend->name);
    line_raw(l, kinds[r->kind].s, kinds[r->kind].n); /* as lg_attempt_kind_name() */
    if (r->status != 0) {
        line_u64(l, r->status);
    } else {
        line_lit(l, "null");
    }
    line_lit(l, ",\"dispatch\":");
    line_ms(l, req->t_start, r->t_dispatch);
    line_lit(l, ",\"connect\":");
    line_ms(l, req->t_start, r->t_connect);
    line_lit(l, ",\"first_byte\":");
    line_ms(l, req->t_start, r->t_first_byte);
    line_lit(l, ",\"first_token\":");
    line_ms(l, req->t_start, r->t_first_token);
    line_lit(l, ",\"end\":");
    line_ms(l, req->t_start, r->t_end);
    line_lit(l, ",\"failure\":");
    if (r->fail != LG_FAIL_NONE) {
        line_safe(l, lg_fail_name(r->fail));
        line_lit(l, "}");
    } else {
        line_lit(l, "null}");
    }
}

/*
 * "attempts": every try, in the order they were launched: the ended ones
 * the request kept (attempt.c, while the log is on) and its last one.
 */
static void
record_attempts(struct alog_line *l, const struct lg_request *req)
{
    struct lg_attempt_rec all[LG_ATTEMPT_LOG_MAX + 1];
    const struct lg_attempt *a = req->att;
    size_t n = 0;

    if (req->tries.log != NULL) {
        n = LG_MIN(req->tries.log->n, (uint32_t)LG_ATTEMPT_LOG_MAX);
        memcpy(all, req->tries.log->rec, n * sizeof(all[0]));
    }
    if (a != NULL && a->t_dispatch != 0 && a->pick.backend != NULL) {
        all[n++] = (struct lg_attempt_rec){
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
    for (size_t i = 1; i < n; i++) { /* by launch: a hedge's loser ended before the winner */
        struct lg_attempt_rec x = all[i];
        size_t j = i;

        for (; j > 0 && all[j - 1].t_dispatch > x.t_dispatch; j--) {
            all[j] = all[j - 1];
        }
        all[j] = x;
    }
    line_lit(l, "[");
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            line_lit(l, ",");
        }
        record_attempt(l, req, &all[i]);
    }
    line_lit(l, "]");
}

/* The request's access-log line, into the worker's buffer (the log is on). */
static void
record_line(struct lg_alog_buf *buf, const struct lg_request *req, const char *client_addr)
{
    const struct lg_hdrs *hs = &req->hdrs;
    static const struct lg_attempt none;
    const struct lg_attempt *att = req->att != NULL ? req->att : &none; /* the last attempt */
    /* the fixed part and numbers (under 1 KiB), the explanation, the path,
     * eleven other strings and the attempts at their most: no line is ever cut */
    char mem[1280 + LG_ROUTE_EXPLAIN_BYTES + ALOG_PATH_MAX + 11 * ALOG_STR_MAX
             + (LG_ATTEMPT_LOG_MAX + 1) * ALOG_ATTEMPT_MAX];
    struct alog_line l = { mem, 0, sizeof(mem) - 2 };

    line_lit(&l, "{\"ts\":");
    line_time(&l, req->wall_start);
    line_lit(&l, ",\"id\":");
    line_cstr(&l, req->id);
    line_lit(&l, ",\"client\":");
    line_safe(&l, client_addr);
    line_lit(&l, ",\"key\":");
    line_cstr(&l, lg_keys_name(&req->auth)); /* the key's name, never the key */
    line_lit(&l, ",\"tenant\":");
    line_cstr(&l, req->sched.tenant != NULL ? req->sched.tenant->name : NULL);
    line_lit(&l, ",\"class\":");
    if (req->sched.tenant != NULL) { /* classified (tenant.c) */
        line_safe(&l, lg_class_name(req->sched.cls));
    } else {
        line_lit(&l, "null");
    }
    line_lit(&l, ",\"method\":");
    line_safe(&l, llhttp_method_name((llhttp_method_t)req->method));
    line_lit(&l, ",\"path\":");
    line_str_max(&l, hs->url_len ? hs->buf + hs->url_off : "", hs->url_len, ALOG_PATH_MAX);
    line_lit(&l, ",\"model\":");
    line_cstr(&l, req->info.model[0] ? req->info.model : NULL);
    line_lit(&l, ",\"stream\":");
    line_lit(&l, req->info.stream ? "true" : "false");
    line_lit(&l, ",\"prompt_bytes\":");
    line_u64(&l, req->info.prompt_bytes);
    line_lit(&l, ",\"max_tokens\":");
    if (req->info.model[0] != '\0' && req->info.max_tokens >= 0) {
        line_u64(&l, (uint64_t)req->info.max_tokens);
    } else {
        line_lit(&l, "null");
    }
    line_lit(&l, ",\"status\":");
    line_u64(&l, (uint64_t)req->status);
    line_lit(&l, ",\"backend\":");
    if (att->pick.backend != NULL && (req->flags & LG_REQ_F_PROXIED)) {
        line_safe(&l, att->pick.backend->name);
    } else {
        line_lit(&l, "null");
    }
    line_lit(&l, ",\"attempt_count\":");
    line_u64(&l, req->tries.n);
    line_lit(&l, ",\"hedge_after\":");
    if (req->tries.hedge_after_ms > 0) {
        line_ms(&l, 1, 1 + (uint64_t)((double)req->tries.hedge_after_ms * 1e6));
    } else {
        line_lit(&l, "null");
    }
    line_lit(&l, ",\"hedged\":");
    line_lit(&l, req->tries.hedge != LG_REQ_HEDGE_NONE ? "true" : "false");
    line_lit(&l, ",\"hedge_winner\":");
    line_cstr(&l, req->tries.hedge == LG_REQ_HEDGE_FIRST ? "first"
                  : req->tries.hedge == LG_REQ_HEDGE_DUP ? "hedge"
                                                         : NULL);
    line_lit(&l, ",\"policy\":");
    line_cstr(&l, (req->flags & LG_REQ_F_PROXIED) ? att->pick.policy : NULL);
    line_lit(&l, ",\"reason\":");
    line_cstr(&l, att->pick.reason);
    line_lit(&l, ",\"bytes_in\":");
    line_u64(&l, req->head_bytes + req->body_bytes);
    line_lit(&l, ",\"bytes_out\":");
    line_u64(&l, req->bytes_out);
    line_lit(&l, ",\"read\":");
    line_ms(&l, req->t_start, req->t_read);
    line_lit(&l, ",\"queue\":");
    line_ms(&l, req->t_read, att->t_dispatch);
    line_lit(&l, ",\"queue_wait\":");
    line_ms(&l, req->sched.queue_ns ? 1 : 0, 1 + req->sched.queue_ns);
    line_lit(&l, ",\"ttft_target\":");
    if (req->sched.ttft_target_ms > 0) {
        line_u64(&l, req->sched.ttft_target_ms);
    } else {
        line_lit(&l, "null");
    }
    line_lit(&l, ",\"shed\":");
    line_cstr(&l, lg_shed_name((enum lg_shed)req->sched.shed));
    line_lit(&l, ",\"connect\":");
    line_ms(&l, att->t_dispatch, att->t_connect);
    line_lit(&l, ",\"ttfb\":");
    line_ms(&l, req->t_start, record_first_byte(req));
    line_lit(&l, ",\"ttft\":");
    line_ms(&l, req->t_start, record_answered(req) ? req->t_first_token : 0);
    line_lit(&l, ",\"total\":");
    line_ms(&l, req->t_start, req->t_end);
    line_lit(&l, ",\"tokens\":");
    line_u64(&l, record_tokens(req));
    line_lit(&l, ",\"itl\":");
    if (req->content_events > 1) {
        line_ms(&l, 0 + 1, 1 + (req->t_last_token - req->t_first_token) / (req->content_events - 1));
    } else {
        line_lit(&l, "null");
    }
    line_lit(&l, ",\"resumed\":");
    line_u64(&l, req->tries.resumed);
    line_lit(&l, ",\"resume_pause\":");
    line_ms(&l, req->tries.resume_pause_ns ? 1 : 0, 1 + req->tries.resume_pause_ns);
    line_lit(&l, ",\"attempts\":");
    record_attempts(&l, req);
    if (att->pick.explain != NULL && att->pick.explain[0] != '\0') {
        line_lit(&l, ",\"candidates\":");
        line_lit(&l, att->pick.explain);
    }
    line_lit(&l, ",\"error\":");
    if (req->error == NULL && (req->flags & LG_REQ_F_SSE) && req->scan.sse.error_events > 0) {
        line_cstr(&l, "engine_error_event"); /* a 200 whose stream reported a failure */
    } else {
        line_cstr(&l, req->error);
    }
    mem[l.len++] = '}';
    mem[l.len++] = '\n';
    lg_accesslog_append(buf, mem, l.len);
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
