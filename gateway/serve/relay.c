/*
 * relay.c: the bytes of an exchange, both ways: the request's head (and its
 * body, by reference) to the backend; the response's head, rewritten, to
 * the client; then its body, moved (never copied, never changed) with
 * backpressure, its SSE events stamped as they pass (first token, gaps).
 * It decides nothing: lg_relay_read() says what it found (a head, the end,
 * a framing error) and the exchange (proxy.c) decides.
 *
 * Owns nothing: the bytes move between the upstream connection's
 * bufferevent (the pool's, lent to the request) and the client's.
 * Invariant: nothing is ever added inside a relayed body, only framing
 * (chunk sizes when a close-delimited body is re-framed, or none when an
 * HTTP/1.0 client gets a chunked body decoded, or one chunk per event for a
 * stream resume.c may continue on another backend).
 */
#include "serve/relay.h"

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "http/bevio.h"
#include "http/httphdr.h"
#include "http/tracectx.h"
#include "serve/attempt.h"
#include "serve/client.h"
#include "serve/quota.h"
#include "serve/respmap.h"
#include "serve/resume.h"
#include "serve/trace.h"
#include "serve/upstream.h"
#include "serve/worker.h"

/*
 * A message head is assembled here and handed to the bufferevent in one
 * evbuffer_add: each add to a bufferevent's output runs its callbacks (and
 * takes the event base lock), which cost more than the copy.
 */
struct relay_head {
    struct evbuffer *out;
    size_t n;
    char buf[2048]; /* left uninitialised (relay_head_init): zeroing it cost 260
                       instructions a head */
};

static inline void
relay_head_init(struct relay_head *h, struct evbuffer *out)
{
    h->out = out;
    h->n = 0;
}

static __attribute__((noinline)) void
head_add_full(struct relay_head *h, const void *p, size_t n)
{
    evbuffer_add(h->out, h->buf, h->n);
    h->n = 0;
    if (n > sizeof(h->buf)) {
        evbuffer_add(h->out, p, n);
        return;
    }
    memcpy(h->buf + h->n, p, n);
    h->n += n;
}

/* Inline: a literal's copy is a few moves, not a call to memcpy. */
static inline void
head_add(struct relay_head *h, const void *p, size_t n)
{
    if (__builtin_expect(h->n + n > sizeof(h->buf), 0)) {
        head_add_full(h, p, n);
        return;
    }
    memcpy(h->buf + h->n, p, n);
    h->n += n;
}

static inline void
head_str(struct relay_head *h, const char *s)
{
    head_add(h, s, strlen(s));
}

static void
head_u64(struct relay_head *h, uint64_t v)
{
    char b[LG_U64_DIGITS];
    char *p = lg_u64_digits(b, v);

    head_add(h, p, (size_t)(b + LG_U64_DIGITS - p));
}

static __attribute__((noinline)) void
relay_quota_headers(struct relay_head *h, const struct lg_request *req)
{
    char buf[512];

    head_add(h, buf, lg_quota_headers(req, buf, sizeof(buf)));
}

/* The attempt's traceparent (and the client's tracestate), after a line's end:
 * written in place when the head has room, else through a copy. */
static __attribute__((noinline)) void
relay_trace_headers(struct relay_head *h, const struct lg_request *req, const struct lg_attempt *a)
{
    char buf[2 + 13 + LG_TRACEPARENT_LEN + 2 + 12 + LG_TRACESTATE_MAX + 2];
    char *at = h->n + sizeof(buf) <= sizeof(h->buf) ? h->buf + h->n : buf;
    size_t n = lg_trace_headers(req, a, at + 2, sizeof(buf) - 2);

    if (n == 0) {
        return;
    }
    memcpy(at, "\r\n", 2); /* "\r\n" + the lines, the last one's CRLF dropped */
    if (at == buf) {
        head_add(h, buf, n);
    } else {
        h->n += n;
    }
}

static void
head_flush(struct relay_head *h)
{
    evbuffer_add(h->out, h->buf, h->n);
    h->n = 0;
}

static int
relay_on_status(llhttp_t *p, const char *at, size_t n)
{
    struct lg_upconn *u = p->data;

    return lg_hdrs_on_url(&u->hdrs, at, n) == LG_OK ? 0 : -1;
}

static int
relay_on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct lg_upconn *u = p->data;

    return lg_hdrs_on_field(&u->hdrs, at, n) == LG_OK ? 0 : -1;
}

static int
relay_on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct lg_upconn *u = p->data;

    return lg_hdrs_on_value(&u->hdrs, at, n) == LG_OK ? 0 : -1;
}

static int
relay_on_headers_complete(llhttp_t *p)
{
    struct lg_upconn *u = p->data;

    if (p->status_code >= 100 && p->status_code < 200) {
        if (p->status_code == 101) {
            llhttp_set_error_reason(p, "unexpected protocol switch");
            return -1;
        }
        u->resp_1xx = true; /* interim response: skip it, the real one follows */
        return 1;           /* no body, whatever its head says (below) */
    }
    if (p->status_code == 204 || p->status_code == 304) {
        /*
         * RFC 9112 6.3: a 1xx, 204 or 304 response ends at its empty line,
         * whatever Content-Length or Transfer-Encoding say; llhttp reads a
         * body unless told (returning 1, which pausing replaces: its flag).
         * Read as a body, bytes a backend put there reached the client after
         * a head that has none: the answer to its next request.
         */
        p->flags |= F_SKIPBODY;
    }
    return HPE_PAUSED; /* the read loop decides: relay, or retry elsewhere */
}

/* ---- the Responses API: where an answer was made ----------------------------- */

static struct lg_client *
relay_tap_client(struct lg_sse_tap *t)
{
    struct lg_req_scan *scan = (struct lg_req_scan *)(void *)((char *)t
                                                                - offsetof(struct lg_req_scan, tap));
    struct lg_request *req =
        (struct lg_request *)(void *)((char *)scan - offsetof(struct lg_request, scan));

    return (struct lg_client *)(void *)((char *)req - offsetof(struct lg_client, req));
}

/* Once the answer's id is read: it was made on the attempt's backend (serve/respmap.h). */
static void
relay_learn(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    const char *id = lg_respid_get(&req->scan.respid);

    if (id == NULL || req->scan.learned || req->att == NULL || req->att->backend == NULL
        || req->att->status != 200) {
        return;
    }
    req->scan.learned = true;
    lg_respmap_put(c->w->gw->respmap, id, strlen(id), req->att->backend->id, lg_now_ns());
}

static void
relay_tap_data(struct lg_sse_tap *t, const char *p, size_t n)
{
    struct lg_client *c = relay_tap_client(t);

    if (!c->req.scan.learned) {
        lg_respid_feed(&c->req.scan.respid, p, n);
        relay_learn(c);
    }
}

static void
relay_tap_event(struct lg_sse_tap *t, size_t end, unsigned what)
{
    (void)end;
    (void)what;
    lg_respid_event_end(&relay_tap_client(t)->req.scan.respid);
}

static int
relay_on_body(llhttp_t *p, const char *at, size_t n)
{
    struct lg_upconn *u = p->data;
    struct lg_client *c = u->client;
    struct lg_request *req = &c->req;

    if (req->flags & LG_REQ_F_SSE) {
        /* a stream that may go on elsewhere is sent event by event (resume.c) */
        unsigned got = (req->flags & LG_REQ_F_EVENTS) ? lg_resume_feed(c, at, n)
                                                     : lg_sse_feed(&req->scan.sse, at, n);

        if (got > 0) {
            lg_attempt_tokens(c, got); /* count, gaps, first token, engine model, end */
        }
    } else {
        lg_json_probe_feed(&req->scan.probe, at, n);
        if ((req->flags & LG_REQ_F_RESPID) && !req->scan.learned) {
            lg_respid_feed(&req->scan.respid, at, n);
            relay_learn(c);
        }
    }
    if (req->flags & LG_REQ_F_DECHUNK) {
        evbuffer_add(bufferevent_get_output(c->bev), at, n);
    }
    return 0;
}

static int
relay_on_message_complete(llhttp_t *p)
{
    struct lg_upconn *u = p->data;

    if (u->resp_1xx) {
        u->resp_1xx = false;
        lg_hdrs_reset(&u->hdrs);
        return 0;
    }
    u->resp_done = true;
    return HPE_PAUSED;
}

static const llhttp_settings_t relay_settings = {
    .on_status = relay_on_status,
    .on_header_field = relay_on_header_field,
    .on_header_value = relay_on_header_value,
    .on_headers_complete = relay_on_headers_complete,
    .on_body = relay_on_body,
    .on_message_complete = relay_on_message_complete,
};

/*
 * A response is expected on u (a new attempt): a fresh parser and head
 * storage, with this file's callbacks.
 */
void
lg_relay_start(struct lg_upconn *u)
{
    u->resp_1xx = false;
    u->resp_done = false;
    u->head_t_ns = 0;
    lg_hdrs_reset(&u->hdrs);
    llhttp_init(&u->parser, HTTP_RESPONSE, &relay_settings);
    u->parser.data = u;
}

/*
 * The request's class as the backend's priority field: the body (a JSON
 * object: the proxy parsed it) goes as `{"priority":N,` written in `field`
 * and the rest of the body after its "{" (`}` alone: no comma), copied into
 * a new buffer (*body replaced; the original stays intact for a retry). A client's own "priority" comes later
 * in the object, and wins with the engines' JSON parsers (the last one).
 * False when the body does not start with "{" (nothing changed).
 */
static bool
relay_priority_body(struct evbuffer **body, uint64_t *body_bytes, int cls, char *field,
                    size_t cap, size_t *field_len)
{
    struct evbuffer *b = *body, *rest;
    size_t len = evbuffer_get_length(b), i = 0, skip;
    unsigned char ch = 0;
    bool empty;

    while (i < len) {
        struct evbuffer_ptr p;

        evbuffer_ptr_set(b, &p, i, EVBUFFER_PTR_SET);
        if (evbuffer_copyout_from(b, &p, &ch, 1) != 1 || (ch != ' ' && ch != '\t' && ch != '\r'
                                                          && ch != '\n')) {
            break;
        }
        i++;
    }
    if (ch != '{') {
        return false;
    }
    skip = i + 1;
    for (i = skip, empty = false; i < len; i++) {
        struct evbuffer_ptr p;

        evbuffer_ptr_set(b, &p, i, EVBUFFER_PTR_SET);
        if (evbuffer_copyout_from(b, &p, &ch, 1) != 1) {
            break;
        }
        if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '\n') {
            empty = ch == '}';
            break;
        }
    }
    *field_len = (size_t)snprintf(field, cap, "{\"priority\":%d%s", LG_CLASS_DEFAULT - cls,
                                  empty ? "" : ",");
    /* a copy: the body's chains may be references already, which libevent does not
     * reference again */
    rest = evbuffer_new();
    {
        struct evbuffer_ptr p;
        struct evbuffer_iovec v[16];
        int n;

        evbuffer_ptr_set(b, &p, skip, EVBUFFER_PTR_SET);
        while (p.pos >= 0 && (size_t)p.pos < len
               && (n = evbuffer_peek(b, -1, &p, v, (int)LG_ARRAY_SIZE(v))) > 0) {
            size_t got = 0;

            for (int k = 0; k < LG_MIN(n, (int)LG_ARRAY_SIZE(v)); k++) {
                evbuffer_add(rest, v[k].iov_base, v[k].iov_len);
                got += v[k].iov_len;
            }
            if (evbuffer_ptr_set(b, &p, got, EVBUFFER_PTR_ADD) != 0) {
                break;
            }
        }
    }
    *body = rest;
    *body_bytes = evbuffer_get_length(rest) + *field_len;
    return true;
}

/*
 * Whether a client's field is one the request out writes itself or drops:
 * Host, Content-Length, Expect, X-Forwarded-For and -Proto (ours, not a
 * client's), X-Request-Id; with keys (auth: the gateway's or the backend's)
 * Authorization and X-Api-Key; with load reports their format's field; the
 * gateway's own scheduling fields (scheduling.priority_header and
 * ttft_header: read by the admission queue, meant for no engine). Their
 * lengths compared first, then one switch on the name's length, then one
 * compare (at most two).
 */
static inline bool
relay_field_replaced(const char *name, size_t n, bool auth, enum lg_load_header load_header,
                     const struct lg_scheduling_conf *sc)
{
    if (n == sc->priority_header_len && lg_mem_ieq(name, sc->priority_header, n)) {
        return true;
    }
    if (n == sc->ttft_header_len && lg_mem_ieq(name, sc->ttft_header, n)) {
        return true;
    }
    switch (n) {
    case 4:
        return lg_mem_ieq(name, "host", 4);
    case 6:
        return lg_mem_ieq(name, "expect", 6);
    case 9:
        return auth && lg_mem_ieq(name, "x-api-key", 9);
    case 12:
        return lg_mem_ieq(name, "x-request-id", 12);
    case 13:
        return auth && lg_mem_ieq(name, "authorization", 13);
    case 14:
        return lg_mem_ieq(name, "content-length", 14);
    case 15:
        return lg_mem_ieq(name, "x-forwarded-for", 15);
    case 17:
        return lg_mem_ieq(name, "x-forwarded-proto", 17);
    case 28:
        return load_header != LG_LOAD_HEADER_OFF
               && lg_mem_ieq(name, "endpoint-load-metrics-format", 28);
    default:
        return false;
    }
}

void
lg_relay_send_request(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    struct lg_hdrs *hs = &req->hdrs;
    const struct lg_backend_conf *bc = lg_backend_conf(u->b);
    struct evbuffer *out = bufferevent_get_output(u->bev);
    struct relay_head hb;
    const struct lg_hdr *xff = lg_hdrs_find(hs, "x-forwarded-for");
    const char *method = llhttp_method_name((llhttp_method_t)req->method);
    size_t before = evbuffer_get_length(out), sent;
    struct evbuffer *body = req->body;
    struct evbuffer *own = NULL;
    uint64_t body_bytes = req->body_bytes;
    char prio[48];
    size_t prio_len = 0;
    bool auth = bc->api_key != NULL || c->w->gw->keys != NULL; /* keys checked: not forwarded */
    const struct lg_scheduling_conf *sched = &req->fleet->conf->scheduling;

    relay_head_init(&hb, out);
    lg_resume_request_body(c, &body, &body_bytes); /* a continuation's, once one began */

    head_str(&hb, method);
    head_add(&hb, " ", 1);
    head_str(&hb, bc->path_prefix);
    head_add(&hb, hs->buf + hs->url_off, hs->url_len);
    head_add(&hb, " HTTP/1.1\r\nHost: ", 17);
    head_str(&hb, bc->host_header);
    head_add(&hb, "\r\n", 2);
    for (uint32_t i = 0; i < hs->n; i++) {
        const struct lg_hdr *h = &hs->h[i];
        const char *name = lg_hdrs_name(hs, h);

        if (h->hop || relay_field_replaced(name, h->name_len, auth, bc->load_header, sched)) {
            continue; /* (a traced request's context is marked hop: its attempt's goes below) */
        }
        head_add(&hb, name, h->name_len);
        head_add(&hb, ": ", 2);
        head_add(&hb, lg_hdrs_value(hs, h), h->value_len);
        head_add(&hb, "\r\n", 2);
    }
    head_add(&hb, "X-Forwarded-For: ", 17);
    if (xff != NULL) {
        head_add(&hb, lg_hdrs_value(hs, xff), xff->value_len);
        head_add(&hb, ", ", 2);
    }
    head_str(&hb, c->addr_str);
    if (c->tls) {
        head_add(&hb, "\r\nX-Forwarded-Proto: https\r\nX-Request-Id: ", 42);
    } else {
        head_add(&hb, "\r\nX-Forwarded-Proto: http\r\nX-Request-Id: ", 41);
    }
    head_str(&hb, req->id);
    if (bc->api_key != NULL) {
        head_add(&hb, "\r\nAuthorization: Bearer ", 24);
        head_str(&hb, bc->api_key);
    }
    if (bc->priority_field != LG_PRIORITY_FIELD_OFF && body_bytes > 0
        && relay_priority_body(&body, &body_bytes, req->sched.cls, prio, sizeof(prio), &prio_len)) {
        own = body; /* the body less its "{", after the field (in the head's buffer) */
    }
    if (req->tries.trace != NULL) {
        relay_trace_headers(&hb, req, u->attempt);
    }
    if (bc->load_header != LG_LOAD_HEADER_OFF) {
        /* the engine's load with the response (fleet/loadreport.h) */
        head_str(&hb, bc->load_header == LG_LOAD_HEADER_JSON
                          ? "\r\nEndpoint-Load-Metrics-Format: JSON"
                          : "\r\nEndpoint-Load-Metrics-Format: TEXT");
    }
    if (req->method != HTTP_GET || body_bytes > 0) {
        head_add(&hb, "\r\nContent-Length: ", 18);
        head_u64(&hb, body_bytes);
    }
    head_add(&hb, "\r\n\r\n", 4);
    head_add(&hb, prio, prio_len);
    /*
     * Straight to the socket when nothing is queued (a pooled connection),
     * else queued; the body by reference either way, kept intact in
     * req->body for a retry. A head too long for hb has its front queued
     * already: then all of it is.
     */
    sent = lg_bevio_write_msg(u->bev, hb.buf, hb.n, body_bytes > 0 ? body : NULL);
    if (own != NULL) {
        evbuffer_free(own); /* the output holds its own reference to the bytes */
    }
    LG_STAT_ADD(u->b, bytes_out, evbuffer_get_length(out) + sent - before);
}

/* Retry-After as seconds (delta form only; an HTTP date counts as 1 s). */
uint64_t
lg_relay_retry_after_ns(const struct lg_hdrs *hs)
{
    const struct lg_hdr *h = lg_hdrs_find(hs, "retry-after");
    char *end;
    unsigned long s;

    if (h == NULL) {
        return 0;
    }
    s = strtoul(lg_hdrs_value(hs, h), &end, 10);
    if (end == lg_hdrs_value(hs, h)) {
        return LG_NS_PER_S;
    }
    return (uint64_t)LG_MIN(s, 3600ul) * LG_NS_PER_S;
}

/* Writes the client's response head from the backend's; decides framing. */
void
lg_relay_write_head(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    struct lg_hdrs *hs = &u->hdrs;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    struct relay_head hb;
    size_t before = evbuffer_get_length(out);
    int status = u->parser.status_code;
    bool bodiless = status == 204 || status == 304; /* no body whatever the head says */
    bool has_id = false, has_accel = false;
    const char *reason = hs->url_len ? hs->buf + hs->url_off : lg_http_reason(status);

    relay_head_init(&hb, out);
    lg_hdrs_mark_hop_by_hop(hs);
    head_add(&hb, "HTTP/1.1 ", 9);
    head_u64(&hb, (uint64_t)status);
    head_add(&hb, " ", 1);
    head_str(&hb, reason);
    head_add(&hb, "\r\n", 2);
    for (uint32_t i = 0; i < hs->n; i++) {
        const struct lg_hdr *h = &hs->h[i];
        const char *name = lg_hdrs_name(hs, h);
        const char *value = lg_hdrs_value(hs, h);

        if (h->hop || (status == 204 && lg_str_ieq(name, h->name_len, "content-length"))) {
            continue; /* RFC 9110 8.6: never in a 204 */
        }
        /* a shorter value ends in its NUL, where the compare stops */
        if (lg_str_ieq(name, h->name_len, "content-type")
            && lg_mem_ieq(value, "text/event-stream", 17)) {
            req->flags |= LG_REQ_F_SSE;
        } else if (lg_str_ieq(name, h->name_len, "x-request-id")) {
            has_id = true;
        } else if (lg_str_ieq(name, h->name_len, "x-accel-buffering")) {
            has_accel = true;
        }
        head_add(&hb, name, h->name_len);
        head_add(&hb, ": ", 2);
        head_add(&hb, value, h->value_len);
        head_add(&hb, "\r\n", 2);
    }
    if (bodiless) {
        /* the head's end is the message's: no framing to add or undo */
    } else if (u->parser.flags & F_CHUNKED) {
        req->flags |= LG_REQ_F_UP_CHUNKED;
        if (req->http_minor == 0) {
            req->flags |= LG_REQ_F_DECHUNK | LG_REQ_F_CLOSE; /* HTTP/1.0 knows no chunks */
        } else {
            head_add(&hb, "Transfer-Encoding: chunked\r\n", 28);
        }
    } else if (!(u->parser.flags & F_CONTENT_LENGTH) && llhttp_message_needs_eof(&u->parser)) {
        /* Close-delimited: re-frame as chunks so a cut can never look complete. */
        req->flags |= LG_REQ_F_UP_EOF;
        if (req->http_minor == 0) {
            req->flags |= LG_REQ_F_CLOSE;
        } else {
            req->flags |= LG_REQ_F_ENCHUNK;
            head_add(&hb, "Transfer-Encoding: chunked\r\n", 28);
        }
    }
    if (!has_id) {
        head_add(&hb, "X-Request-Id: ", 14);
        head_str(&hb, req->id);
        head_add(&hb, "\r\n", 2);
    }
    if ((req->flags & LG_REQ_F_SSE) && !has_accel) {
        head_add(&hb, "X-Accel-Buffering: no\r\n", 23);
    }
    if (req->quota != NULL) {
        relay_quota_headers(&hb, req); /* a key with limits: how much is left */
    }
    if (c->w->draining) {
        req->flags |= LG_REQ_F_CLOSE;
    }
    if (req->flags & LG_REQ_F_CLOSE) {
        head_add(&hb, "Connection: close\r\n\r\n", 21);
    } else if (req->http_minor == 0) {
        head_add(&hb, "Connection: keep-alive\r\n\r\n", 26);
    } else {
        head_add(&hb, "\r\n", 2);
    }
    head_flush(&hb);
    req->status = status;
    req->flags |= LG_REQ_F_STARTED;
    req->bytes_out += evbuffer_get_length(out) - before;
    if (req->flags & LG_REQ_F_SSE) {
        lg_sse_init(&req->scan.sse);
    }
    lg_json_probe_init(&req->scan.probe);
    lg_respid_init(&req->scan.respid);
    req->scan.learned = false;
    if ((req->flags & (LG_REQ_F_RESPID | LG_REQ_F_SSE)) == (LG_REQ_F_RESPID | LG_REQ_F_SSE)) {
        /* resume.c never listens to this route's streams: the tap is free */
        req->scan.tap.data = relay_tap_data;
        req->scan.tap.event = relay_tap_event;
        req->scan.sse.tap = &req->scan.tap;
    }
}

static void
relay_backpressure(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    size_t high = c->req.fleet->conf->limits.stream_buffer_bytes;

    if (!(req->flags & LG_REQ_F_PAUSED_UP)
        && evbuffer_get_length(bufferevent_get_output(c->bev)) >= high) {
        bufferevent_disable(u->bev, EV_READ);
        bufferevent_setwatermark(c->bev, EV_WRITE, high / 2, 0);
        lg_client_watch_drain(c); /* resumes in lg_relay_resume() */
        req->flags |= LG_REQ_F_PAUSED_UP;
    }
}

/*
 * The client's output fell below the low watermark: if the relay was
 * paused, it resumes (the upstream is read again). Returns true when the
 * upstream's input holds bytes already: the caller runs its read path now.
 */
bool
lg_relay_resume(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (!(req->flags & LG_REQ_F_PAUSED_UP)) {
        return false;
    }
    req->flags &= ~LG_REQ_F_PAUSED_UP;
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    if (req->att == NULL || req->att->up == NULL) {
        return false;
    }
    bufferevent_enable(req->att->up->bev, EV_READ);
    /* bytes may be waiting already: run the read path now */
    return evbuffer_get_length(bufferevent_get_input(req->att->up->bev)) > 0;
}

/*
 * Moves n consumed body bytes from the upstream input to the client. The
 * response's `last` bytes are queued, never written at once: they leave at
 * the flush, after the exchange has counted the request done, so a
 * client that has read its whole answer never finds it still in flight
 * (in /metrics, the admission queue, the access log).
 */
static void
relay_move_body(struct lg_client *c, struct evbuffer *in, size_t n, bool last)
{
    struct lg_request *req = &c->req;
    struct evbuffer *out = bufferevent_get_output(c->bev);

    req->att->up_bytes += n;
    if (req->flags & LG_REQ_F_EVENTS) {
        evbuffer_drain(in, n); /* on_body handed them to resume.c */
        return;
    }
    if (req->flags & LG_REQ_F_DECHUNK) {
        size_t before = evbuffer_get_length(out);

        evbuffer_drain(in, n); /* on_body already queued the decoded bytes */
        req->bytes_out += evbuffer_get_length(out) - before;
        return;
    }
    if (req->flags & LG_REQ_F_ENCHUNK) {
        char size[LG_HTTP_CHUNK_HEAD_MAX];

        evbuffer_add(out, size, lg_http_chunk_head(size, n));
        evbuffer_remove_buffer(in, out, n);
        evbuffer_add(out, "\r\n", 2);
    } else {
        /* nothing queued ahead of them (a stream's events after its head):
         * the bytes go straight from the backend's input to the client's
         * socket, and only what it does not take now is queued */
        size_t sent = last ? 0 : lg_bevio_write_from(c->bev, in, n); /* 0 if bytes are queued */

        if (sent < n) {
            evbuffer_remove_buffer(in, out, n - sent);
        }
    }
    req->bytes_out += n;
}

/* The response is complete: a re-framed (chunked) body gets its last chunk. */
void
lg_relay_end(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (req->flags & LG_REQ_F_EVENTS) {
        lg_resume_end(c); /* an unfinished last event */
    }
    if (req->flags & LG_REQ_F_ENCHUNK) {
        struct evbuffer *out = bufferevent_get_output(c->bev);

        evbuffer_add(out, "0\r\n\r\n", 5);
        req->bytes_out += 5;
    }
}

/*
 * How much more of a Content-Length answer to read now (0: none). A large
 * answer (16 KiB or more to come: embeddings, a long completion) is read
 * in reads of what is waiting, up to the per-callback budget and one
 * stream buffer at a time, instead of about 5 KiB per read event (bevio.c's
 * own reads are sized for heads and SSE events): 30 reads and writes for 1
 * MiB instead of 215 (bench/NOTES.md 43). A small answer's rest comes with
 * the next read event, with no read that finds nothing; chunked and
 * close-delimited answers keep the read events' path.
 */
static size_t
relay_up_more(const struct lg_client *c, const struct lg_upconn *u, size_t budget)
{
    size_t high = c->req.fleet->conf->limits.stream_buffer_bytes;

    if (!(u->parser.flags & F_CONTENT_LENGTH) || (u->parser.flags & F_CHUNKED)
        || u->parser.content_length < 16 * 1024 || (c->req.flags & LG_REQ_F_PAUSED_UP)) {
        return 0;
    }
    return (size_t)LG_MIN(LG_MIN((uint64_t)budget, u->parser.content_length), (uint64_t)high);
}

/*
 * A head that has begun must end within the attempt's first-byte timeout
 * (lg_attempt_first_byte_ms(): a continuation's no longer than stream_idle
 * either), counted from its first byte, interim (1xx) responses included:
 * the read timeout alone is re-armed by every read, and a backend trickling
 * a header line at a time, or 1xx heads one after another, would hold the
 * request as long as it likes. The read timeout is set to what is left;
 * when it fires the attempt fails as LG_FAIL_FIRST_BYTE_TIMEOUT (504,
 * retried as routing.retry.on says: proxy.c's WAIT_HEAD).
 */
static void
relay_head_deadline(const struct lg_client *c, struct lg_upconn *u)
{
    uint64_t ms = lg_attempt_first_byte_ms(&c->req.fleet->conf->timeouts, u->attempt);
    uint64_t now = lg_now_ns(), spent;
    struct timeval tv;

    if (u->head_t_ns == 0) {
        u->head_t_ns = now;
    }
    spent = (now - u->head_t_ns) / LG_NS_PER_MS;
    lg_bevio_read_timeout(u->bev, lg_timeval_ms(spent < ms ? ms - spent : 1, &tv));
}

int
lg_relay_read(struct lg_client *c, struct lg_upconn *u, struct evbuffer *in,
              struct lg_relay_read *rd, int *err_out)
{
    struct lg_request *req = &c->req;

    while (req->att != NULL && req->att->up == u && !(req->flags & LG_REQ_F_PAUSED_UP)) {
        size_t avail = evbuffer_get_length(in), consumed;
        int err = lg_http_execute(&u->parser, in, &consumed);

        if (c->state == LG_CLIENT_ST_WAIT_HEAD) {
            evbuffer_drain(in, consumed); /* head bytes: rewritten, not relayed */
            req->att->up_bytes += consumed;
            if (err == HPE_PAUSED) {
                llhttp_resume(&u->parser);
                return LG_RELAY_HEAD;
            }
            if (err != HPE_OK) {
                *err_out = err;
                return LG_RELAY_ERROR;
            }
            if (consumed == avail) {
                if (avail > 0) {
                    relay_head_deadline(c, u);
                }
                return LG_RELAY_MORE; /* need more of the head */
            }
            continue;
        }
        if (consumed > 0) {
            relay_move_body(c, in, consumed, err == HPE_PAUSED && u->resp_done);
        }
        if (err == HPE_PAUSED && u->resp_done) {
            return LG_RELAY_DONE;
        }
        if (err != HPE_OK) {
            *err_out = err;
            return LG_RELAY_ERROR;
        }
        relay_backpressure(c, u);
        if (evbuffer_get_length(in) == 0) {
            size_t want = rd->drained ? 0 : relay_up_more(c, u, rd->budget), got;

            if (want == 0 || (got = lg_bevio_read(u->bev, want)) == 0) {
                return LG_RELAY_MORE;
            }
            rd->budget -= LG_MIN(rd->budget, got);
            rd->drained = got < want; /* the socket is empty: no read that finds nothing */
        }
    }
    return LG_RELAY_MORE;
}
