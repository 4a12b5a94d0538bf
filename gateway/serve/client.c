/*
 * client.c: one client connection: its timeouts, keep-alive and closing,
 * the checks of a request's head (what the reader, reader.c, parsed), the
 * responses the gateway writes itself, and the request's single exit,
 * which records it (record.c: access log, metrics, backend statistics).
 * What a read request does next is its exchange's (lg_client_ops).
 *
 * Owns: struct lg_client, its bufferevent (and through it the socket), the
 * request's head storage and body buffer. Borrows: the worker.
 * Invariants: one request at a time; every request that started ends in
 * exactly one of lg_client_fail(), lg_client_finish() or lg_client_cut()
 * (or the connection closing), each of which writes one access-log line; a
 * client is freed only by the worker's reaper; a parked client (between
 * requests) has no `req`, and only the parking code moves a client.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "base/config.h"
#include "base/endpoint.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "http/bevio.h"
#include "http/headcheck.h"
#include "http/httphdr.h"
#include "http/tls.h"
#include "serve/auth.h"
#include "serve/client.h"
#include "serve/connlimit.h"
#include "serve/quota.h"
#include "serve/reader.h"
#include "serve/record.h"
#include "serve/worker.h"

static void client_parse(struct lg_client *c);
static void client_next_request(struct lg_client *c);
static void client_free(struct lg_reap *r);
static void client_idle_end(struct lg_client *c);

static const char *const client_state_names[] = {
    [LG_CLIENT_ST_READ_HEAD] = "reading the request head",
    [LG_CLIENT_ST_READ_BODY] = "reading the request body",
    [LG_CLIENT_ST_CONNECT] = "connecting to the backend",
    [LG_CLIENT_ST_WAIT_HEAD] = "waiting for the response head",
    [LG_CLIENT_ST_RELAY] = "relaying the response",
    [LG_CLIENT_ST_FLUSH] = "flushing the last response",
    [LG_CLIENT_ST_LINGER] = "dropping the rest of a refused request",
    [LG_CLIENT_ST_CLOSING] = "closing",
};

const struct lg_config *
lg_client_conf(const struct lg_client *c)
{
    return c->req.fleet ? c->req.fleet->conf : c->w->fleet->conf;
}

/*
 * The connection's read and write timeouts (ms, 0 = none), set only when one
 * changes (or `rearm`), and then through lg_bevio_timeouts(): when the write
 * timeout stays, only the read event is re-armed (libevent's
 * bufferevent_set_timeouts() deletes and adds both events). A keep-alive
 * connection keeps its idle read timeout across requests, and has a write
 * timeout only while a stream is relayed or the last response flushed (a
 * write event with a timeout costs a timer insert each time it is added),
 * so a request that arrives whole and is answered in one read changes
 * neither: the read timeout stays armed while the response is on its way
 * (client_on_event arms it again if it fires then), and the idle time after
 * a quick response counts from the request's arrival (client_next_request
 * re-arms it after a slow one).
 */
static void
client_set_timeouts(struct lg_client *c, uint64_t read_ms, uint64_t write_ms, bool rearm)
{
    struct timeval r, w;

    if (read_ms == c->read_tmo_ms && write_ms == c->write_tmo_ms && !rearm) {
        return;
    }
    c->read_tmo_ms = read_ms;
    c->write_tmo_ms = write_ms;
    c->read_armed_ns = lg_now_ns();
    /*
     * Plain timevals: as libevent common timeouts (lg_worker_timeout) the
     * idle timeout's re-arm at each read cost more than the min-heap's
     * (callgrind, defaults: about 160 instructions more per request at 64
     * connections, 115 at 512; bench/proxy/README.md).
     */
    lg_bevio_timeouts(c->bev, lg_timeval_ms(read_ms, &r), lg_timeval_ms(write_ms, &w));
}

void
lg_client_set_write_timeout(struct lg_client *c, uint64_t ms)
{
    client_set_timeouts(c, c->read_tmo_ms, ms, false);
}

static void
client_set_read_timeout(struct lg_client *c, uint64_t ms)
{
    client_set_timeouts(c, ms, c->write_tmo_ms, false);
}

static void client_on_read(struct bufferevent *bev, void *arg);
static void client_on_write(struct bufferevent *bev, void *arg);
static void client_on_event(struct bufferevent *bev, short what, void *arg);

void
lg_client_watch_drain(struct lg_client *c)
{
    bufferevent_data_cb wcb;

    bufferevent_getcb(c->bev, NULL, &wcb, NULL, NULL);
    if (wcb == NULL) {
        bufferevent_setcb(c->bev, client_on_read, client_on_write, client_on_event, c);
    }
}

void
lg_client_set_state(struct lg_client *c, enum lg_client_state to)
{
    if (c->state == LG_CLIENT_ST_CLOSING) {
        return; /* nothing leaves CLOSING */
    }
    LG_DEBUG("conn=%" PRIu64 " %s -> %s", c->id, client_state_names[c->state],
             client_state_names[to]);
    c->state = to;
    c->action = client_state_names[to];
    if (to == LG_CLIENT_ST_FLUSH) {
        lg_client_watch_drain(c); /* it closes when its output has left */
    }
}

/* ---- responses the gateway writes itself ------------------------------- */

/* Writes a complete response with a JSON body (moved from `body`). */
void
lg_client_respond(struct lg_client *c, int status, struct evbuffer *body, const char *extra_headers)
{
    struct lg_request *req = &c->req;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t before = evbuffer_get_length(out);
    size_t n = evbuffer_get_length(body);

    if (c->w->draining) {
        req->flags |= LG_REQ_F_CLOSE;
    }
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                        "Content-Length: %zu\r\nX-Request-Id: %s\r\n%s%s\r\n",
                        status, lg_http_reason(status), n, req->id,
                        extra_headers ? extra_headers : "",
                        (req->flags & LG_REQ_F_CLOSE) ? "Connection: close\r\n"
                        : req->http_minor == 0        ? "Connection: keep-alive\r\n"
                                                      : "");
    evbuffer_add_buffer(out, body);
    req->status = status;
    req->bytes_out += evbuffer_get_length(out) - before;
}

/* ---- the end of a request ---------------------------------------------- */

static void
client_log(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (req->flags & LG_REQ_F_LOGGED) {
        return;
    }
    req->flags |= LG_REQ_F_LOGGED;
    if (req->t_end == 0) {
        req->t_end = lg_now_ns();
    }
    lg_record_request(c->w, req, c->addr_str);
}

/* Releases the request's resources; the connection stays. */
static void
client_end_request_keep_head(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    c->ops->release(c);
    if (req->quota != NULL) {
        lg_quota_end(req); /* before the key, whose account it borrows */
    }
    lg_keys_release(&req->auth);
    if (req->body != NULL) {
        evbuffer_free(req->body);
        req->body = NULL;
    }
}

static void
client_end_request(struct lg_client *c)
{
    client_end_request_keep_head(c);
    lg_hdrs_release(&c->req.hdrs);
}

static void __attribute__((format(printf, 5, 0)))
client_vfail(struct lg_client *c, int status, const char *code, const char *param, const char *fmt,
             va_list ap)
{
    struct lg_request *req = &c->req;
    struct evbuffer *body;
    char msg[512];
    char extra[640] = "";
    size_t n;

    if (c->state == LG_CLIENT_ST_CLOSING) {
        return;
    }
    LG_BUG_ON(req->flags & LG_REQ_F_STARTED);
    c->ops->abort(c, LG_FAIL_ABORTED);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (req->error == NULL || status != lg_fail_status(req->tries.fail)) {
        req->error = code;
    }
    if (status == 400 || status == 408 || status == 413 || status == 414 || status == 431
        || status == 501 || status == 505) {
        /* the request stream may be out of sync: never read another one */
        req->flags |= LG_REQ_F_CLOSE;
    }
    if (status == 503 || status == 429) {
        /* when the router knows when a backend may be back, say so */
        uint32_t ra = (req->retry_after_ms + 999) / 1000;

        snprintf(extra, sizeof(extra), "Retry-After: %u\r\n", ra ? ra : 1);
    } else if (status == 401) {
        snprintf(extra, sizeof(extra), "WWW-Authenticate: Bearer realm=\"llmgate\"\r\n");
    } else if (status == 405) {
        const struct lg_endpoint *e =
            req->hdrs.buf ? lg_endpoint_find(req->hdrs.buf + req->hdrs.url_off, req->hdrs.url_len)
                          : NULL;

        snprintf(extra, sizeof(extra), "Allow: %s\r\n", e != NULL ? e->method_name : "POST");
    }
    if (status == 429 && req->auth.key != NULL
        && (req->quota == NULL || !(req->quota->flags & LG_QUOTA_F_REQUESTS))) {
        lg_quota_note_rate(req); /* refused before the body: the key's rate, as it stands */
    }
    if (req->quota != NULL) {
        /* the key's limits, as OpenAI's clients read them */
        n = strlen(extra);
        lg_quota_headers(req, extra + n, sizeof(extra) - n);
    }
    body = evbuffer_new();
    lg_openai_error_body(body, msg, lg_openai_error_type(status), param, code);
    lg_client_respond(c, status, body, extra);
    evbuffer_free(body);
    LG_CONN_LOG(LG_LOG_DEBUG, c, "%d %s: %s", status, code, msg);
    client_next_request(c);
}

void
lg_client_fail(struct lg_client *c, int status, const char *code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    client_vfail(c, status, code, NULL, fmt, ap);
    va_end(ap);
}

void
lg_client_fail_param(struct lg_client *c, int status, const char *code, const char *param,
                     const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    client_vfail(c, status, code, param, fmt, ap);
    va_end(ap);
}

void
lg_client_finish(struct lg_client *c)
{
    client_next_request(c);
}

void
lg_client_cut(struct lg_client *c, enum lg_fail why)
{
    struct lg_request *req = &c->req;

    if (c->state == LG_CLIENT_ST_CLOSING) {
        return;
    }
    if (req->att != NULL && req->att->backend != NULL) {
        struct lg_backend *b = req->att->backend;

        LG_STAT_ADD(b, cut_streams, 1);
        if (lg_log_ratelimit(&b->warn_ratelimit_ns, LG_NS_PER_S)) {
            LG_CONN_LOG(LG_LOG_WARN, c, "response from %s cut: %s", b->name, lg_fail_name(why));
        }
    }
    req->error = lg_fail_name(why);
    c->ops->abort(c, why);
    client_log(c);
    client_end_request(c);
    if (why == LG_FAIL_CLIENT_STALLED) {
        lg_client_close(c, req->error); /* it reads nothing: do not wait for it */
        return;
    }
    /* Every byte the backend sent still goes out, then the connection
     * closes without a clean end of message, so the client sees the cut. */
    lg_client_set_state(c, LG_CLIENT_ST_FLUSH);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
        lg_client_close(c, req->error);
    }
}

void
lg_client_close(struct lg_client *c, const char *why)
{
    if (c->state == LG_CLIENT_ST_CLOSING) {
        return;
    }
    LG_DEBUG("conn=%" PRIu64 " closing: %s", c->id, why);
    if (!c->parked && c->req.t_start != 0 && !(c->req.flags & LG_REQ_F_LOGGED)) {
        if (c->req.status == 0) {
            c->req.status = lg_fail_status(LG_FAIL_CLIENT_CLOSED); /* 499 */
        }
        if (c->req.error == NULL) {
            c->req.error = why;
        }
        c->ops->abort(c, LG_FAIL_ABORTED); /* a client gone was told before */
        client_log(c);
    }
    if (!c->parked) {
        client_end_request(c);
    }
    lg_client_set_state(c, LG_CLIENT_ST_CLOSING);
    TAILQ_REMOVE(&c->w->clients, c, link);
    c->w->nclients--;
    __atomic_fetch_sub(&c->w->gw->nconnections, 1, __ATOMIC_RELAXED);
    lg_connlimit_release(c->w->gw->connlimit, (const struct sockaddr *)&c->addr);
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    client_idle_end(c);
    c->reap.free = client_free;
    if (c->park_queued) {
        c->park_queued = false; /* already on the reap list: freed instead */
    } else {
        lg_worker_reap(c->w, &c->reap);
    }
}

/* The worker's reaper: the client is closed and nothing refers to it. */
static void
client_free(struct lg_reap *r)
{
    struct lg_client *c = LG_CONTAINER_OF(r, struct lg_client, reap);

    bufferevent_free(c->bev);
    free(c);
}

/* ---- idle keep-alive connections: parked ----------------------------------- */

/*
 * A keep-alive connection between requests holds no request, so it gives
 * back the request's part of struct lg_client (which ends with it, three
 * quarters of it): it is shrunk to CLIENT_PARKED_SIZE, and its next
 * request's first bytes grow it back. When: after its first request, at
 * once, into a new block (many clients send one request and then wait: the
 * whole block is what the next connection takes); after later ones, in
 * place, once it has been idle for CLIENT_PARK_AFTER_MS (a busy connection
 * does not pay a shrink and a growth per request: the worker's idle list
 * costs it a link and an unlink). Both happen at the top of the loop (the
 * reaper, the park timer), where nothing below holds a pointer to the
 * client. glibc shrinks in place, and grows in place while the freed tail
 * is still free; where the client moves, client_resize() points at the new
 * place what points at a client between requests: the worker's list, the
 * bufferevent's callbacks, the parser. Nothing reads `req` of a parked
 * client.
 */
#define CLIENT_PARKED_SIZE   offsetof(struct lg_client, req)
#define CLIENT_PARK_AFTER_MS 1000

/*
 * To `size` bytes, by realloc(), or (`fresh`, for a shrink) by a copy into a
 * new block, so that the whole old one goes back whole, for the next
 * connection's client, instead of leaving a hole behind the parked one.
 */
static struct lg_client *
client_resize(struct lg_client *c, size_t size, bool fresh)
{
    struct lg_worker *w = c->w;
    struct lg_client *p;
    bufferevent_data_cb rcb, wcb;
    bufferevent_event_cb ecb;

    TAILQ_REMOVE(&w->clients, c, link);
    if (fresh) {
        p = lg_xmalloc(size);
        memcpy(p, c, size);
        free(c);
    } else {
        p = lg_xrealloc(c, size);
    }
    TAILQ_INSERT_TAIL(&w->clients, p, link);
    if (p != c) {
        bufferevent_getcb(p->bev, &rcb, &wcb, &ecb, NULL);
        bufferevent_setcb(p->bev, rcb, wcb, ecb, p);
        p->parser.data = p;
    }
    return p;
}

/* Parks c if it is still between requests. */
static void
client_park(struct lg_client *c, bool fresh)
{
    if (c->parked || c->state != LG_CLIENT_ST_READ_HEAD || c->req.t_start != 0
        || evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) {
        return; /* its next request began meanwhile */
    }
    lg_hdrs_release(&c->req.hdrs);
    c = client_resize(c, CLIENT_PARKED_SIZE, fresh);
    c->parked = true;
}

/* The reaper's call: parks a client after its first request. */
static void
client_on_reap_park(struct lg_reap *r)
{
    struct lg_client *c = LG_CONTAINER_OF(r, struct lg_client, reap);

    c->park_queued = false;
    c->reap.free = client_free;
    client_park(c, true);
}

static void
client_idle_end(struct lg_client *c)
{
    if (c->idle) {
        c->idle = false;
        TAILQ_REMOVE(&c->w->idle, c, idle_link);
    }
}

/* Between requests (nothing pipelined): parked now, or in a while. */
static void
client_idle_begin(struct lg_client *c, uint64_t now)
{
    struct lg_worker *w = c->w;
    struct timeval tv;

    if (c->park_queued || c->parked || c->idle) {
        return;
    }
    if (c->requests == 1) {
        c->park_queued = true;
        c->reap.free = client_on_reap_park;
        lg_worker_reap(w, &c->reap);
        return;
    }
    c->idle = true;
    c->idle_since = now;
    TAILQ_INSERT_TAIL(&w->idle, c, idle_link);
    if (!evtimer_pending(w->park_ev, NULL)) {
        evtimer_add(w->park_ev, lg_timeval_ms(CLIENT_PARK_AFTER_MS, &tv));
    }
}

void
lg_client_on_park(evutil_socket_t fd, short what, void *arg)
{
    struct lg_worker *w = arg;
    uint64_t now = lg_now_ns(), after = CLIENT_PARK_AFTER_MS * LG_NS_PER_MS;
    struct lg_client *c;
    struct timeval tv;

    (void)fd;
    (void)what;
    while ((c = TAILQ_FIRST(&w->idle)) != NULL && now - c->idle_since >= after) {
        client_idle_end(c);
        client_park(c, false);
    }
    if (c != NULL) {
        evtimer_add(w->park_ev,
                    lg_timeval_ms((c->idle_since + after - now) / LG_NS_PER_MS + 1, &tv));
    }
}

/* A parked client's next request begins: a whole struct lg_client again. */
static struct lg_client *
client_unpark(struct lg_client *c)
{
    const struct lg_config *conf = c->w->fleet->conf;

    c = client_resize(c, sizeof(*c), false);
    c->parked = false;
    memset(&c->req, 0, sizeof(c->req));
    lg_hdrs_init(&c->req.hdrs, (uint32_t)conf->limits.max_header_bytes, conf->limits.max_headers);
    return c;
}

#define CLIENT_LINGER_MS 2000

static void
client_linger_drop(struct lg_client *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);

    evbuffer_drain(in, evbuffer_get_length(in));
}

/*
 * The last response is out. If the client may still be sending a request we
 * refused, closing now would reset the connection (the kernel answers unread
 * input with RST, and the client may lose our response with it): send FIN,
 * then read and drop its bytes for a moment (a deadline, not an idle time).
 * Cut streams and TLS connections just close.
 */
static void
client_close_flushed(struct lg_client *c)
{
    int fd = bufferevent_getfd(c->bev);

    if (!c->linger || c->tls || fd < 0 || shutdown(fd, SHUT_WR) != 0) {
        lg_client_close(c, "done");
        return;
    }
    lg_client_set_state(c, LG_CLIENT_ST_LINGER);
    c->linger_until_ns = lg_now_ns() + CLIENT_LINGER_MS * LG_NS_PER_MS;
    client_linger_drop(c);
    client_set_timeouts(c, CLIENT_LINGER_MS, 0, false);
    bufferevent_enable(c->bev, EV_READ);
}

static void
client_linger_read(struct lg_client *c)
{
    uint64_t now = lg_now_ns();

    client_linger_drop(c);
    if (now >= c->linger_until_ns) {
        lg_client_close(c, "done");
        return;
    }
    client_set_read_timeout(c, (c->linger_until_ns - now) / LG_NS_PER_MS + 1);
}

/* The request is over: log it, then read the next one or close. */
static void
client_next_request(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    bool close_after = (req->flags & LG_REQ_F_CLOSE) || !(req->flags & LG_REQ_F_KEEPALIVE)
                       || c->w->draining;
    uint64_t idle_ms = lg_client_conf(c)->timeouts.client_idle_ms, took_ns, end_ns;
    struct lg_hdrs hdrs;

    client_log(c);
    end_ns = req->t_end;
    took_ns = req->t_read != 0 && req->t_end > req->t_read ? req->t_end - req->t_read : 0;
    client_end_request_keep_head(c);
    c->requests++;
    if (close_after) {
        lg_hdrs_release(&req->hdrs);
        c->linger = !(req->flags & LG_REQ_F_COMPLETE)
                    || evbuffer_get_length(bufferevent_get_input(c->bev)) > 0;
        lg_client_set_state(c, LG_CLIENT_ST_FLUSH);
        bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
        client_set_timeouts(c, 0, lg_client_conf(c)->timeouts.client_stall_ms, false);
        bufferevent_disable(c->bev, EV_READ);
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0) {
            client_close_flushed(c);
        }
        return;
    }
    /* the head's arena stays for the next request (released when parked or closed) */
    hdrs = req->hdrs;
    memset(req, 0, sizeof(*req));
    req->hdrs = hdrs;
    lg_hdrs_recycle(&req->hdrs, (uint32_t)lg_client_conf(c)->limits.max_header_bytes,
                    lg_client_conf(c)->limits.max_headers);
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    lg_client_set_state(c, LG_CLIENT_ST_READ_HEAD);
    /*
     * The idle timeout: unchanged unless the request came in pieces, and
     * counted from the request's last bytes unless its answer took longer
     * than a second (or an eighth of the idle time): then from now.
     */
    client_set_timeouts(c, idle_ms, 0, took_ns > LG_MIN(UINT64_C(1000), idle_ms / 8) * LG_NS_PER_MS);
    lg_bevio_enable(c->bev, EV_READ);
    if (evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) {
        client_parse(c); /* a pipelined request is waiting */
    } else {
        client_idle_begin(c, end_ns);
    }
}

void
lg_client_drain(struct lg_client *c)
{
    if (c->parked || (c->state == LG_CLIENT_ST_READ_HEAD && c->req.t_start == 0)) {
        lg_client_close(c, "draining");
    }
    /* others get Connection: close on their response and close after it */
}

void
lg_client_write_buffer(struct lg_client *c, struct evbuffer *src, size_t n)
{
    evbuffer_remove_buffer(src, bufferevent_get_output(c->bev), n);
    c->req.bytes_out += n;
}

/* ---- reading ------------------------------------------------------------ */

/* v as 16 lower-case hex digits, the most significant first (no NUL). */
static void
client_hex64(char *out, uint64_t v)
{
    for (int i = 15; i >= 0; i--) {
        out[i] = "0123456789abcdef"[v & 15];
        v >>= 4;
    }
}

/* Picks the request id: the client's if it is sane, else a fresh one. */
static void
client_set_request_id(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    const struct lg_hdr *h = lg_hdrs_find(&req->hdrs, "x-request-id");

    if (h != NULL && h->value_len > 0 && h->value_len < sizeof(req->id)) {
        const char *v = lg_hdrs_value(&req->hdrs, h);
        bool ok = true;

        for (uint32_t i = 0; i < h->value_len && ok; i++) {
            ok = v[i] > 0x20 && v[i] < 0x7f && v[i] != '"' && v[i] != '\\';
        }
        if (ok) {
            memcpy(req->id, v, h->value_len);
            req->id[h->value_len] = '\0';
            return;
        }
    }
    /* 32 hex digits: connection id, then a mix of time and request count */
    client_hex64(req->id, c->id);
    client_hex64(req->id + 16, lg_mix64((req->wall_start ? req->wall_start : lg_wall_ns())
                                        ^ (c->id << 20) ^ c->requests));
    req->id[32] = '\0';
}

/* The head is in: check it before reading any body byte. */
static int
client_on_head(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    llhttp_t *p = &c->parser;
    const struct lg_config *conf = lg_client_conf(c);
    struct lg_auth_refusal no;
    const struct lg_hdr *expect, *te;
    const char *bad;
    bool has_body;
    int status;

    req->method = (uint8_t)p->method;
    req->http_minor = p->http_minor;
    lg_hdrs_mark_hop_by_hop(&req->hdrs);
    client_set_request_id(c);
    if (p->http_major == 0) {
        /* llhttp's HTTP/0.9: a request line without a version */
        lg_client_fail(c, 400, "bad_request", "the request line has no HTTP version");
        return LG_EINVAL;
    }
    if (p->http_major != 1) {
        lg_client_fail(c, 505, "http_version_not_supported",
                       "HTTP/%u.%u is not supported: only HTTP/1.0 and HTTP/1.1", p->http_major,
                       p->http_minor);
        return LG_EINVAL;
    }
    bad = lg_headcheck_fields(&req->hdrs, req->http_minor);
    if (bad == NULL) {
        bad = lg_headcheck_target(req->hdrs.buf + req->hdrs.url_off, req->hdrs.url_len);
    }
    if (bad != NULL) {
        lg_client_fail(c, 400, "bad_request", "%s", bad);
        return LG_EINVAL;
    }
    te = (p->flags & F_CHUNKED) ? lg_hdrs_find(&req->hdrs, "transfer-encoding") : NULL;
    status = te != NULL
                 ? lg_headcheck_transfer_coding(lg_hdrs_value(&req->hdrs, te), te->value_len, &bad)
                 : 0;
    if (status != 0) {
        lg_client_fail(c, status, status == 501 ? "unsupported_transfer_coding" : "bad_request",
                       "%s", bad);
        return LG_EINVAL;
    }
    has_body = (p->flags & F_CHUNKED) || ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0);
    if (lg_auth_head(c->w->gw->keys, req, has_body, &no) != LG_OK) {
        lg_client_fail(c, no.status, no.code, "%s", no.message);
        return LG_EINVAL;
    }
    if (p->flags & F_CHUNKED) {
        req->flags |= LG_REQ_F_CHUNKED;
    } else if ((p->flags & F_CONTENT_LENGTH) && p->content_length > conf->limits.max_body_bytes) {
        lg_client_fail(c, 413, "body_too_large",
                       "the request body (%" PRIu64 " bytes) exceeds the limit of %zu bytes",
                       p->content_length, conf->limits.max_body_bytes);
        return LG_EINVAL;
    }
    req->body = evbuffer_new();
    expect = lg_hdrs_find(&req->hdrs, "expect");
    if (expect != NULL && lg_hdrs_has_token(&req->hdrs, expect, "100-continue")
        && req->http_minor >= 1) {
        evbuffer_add(bufferevent_get_output(c->bev), "HTTP/1.1 100 Continue\r\n\r\n", 25);
    }
    lg_client_set_state(c, LG_CLIENT_ST_READ_BODY);
    /* until a body byte comes, the read timeout is the lesser of its idle
     * time and its grace (reader.c: the deadline counts from the head's end) */
    c->read_tmo_want = conf->timeouts.client_body_min_rate == 0
                           ? conf->timeouts.client_body_ms
                           : LG_MIN(conf->timeouts.client_body_ms,
                                    conf->timeouts.client_body_grace_ms); /* client_parse() */
    return LG_OK;
}

static void
client_parse_error(struct lg_client *c, int err)
{
    struct lg_request *req = &c->req;

    req->flags |= LG_REQ_F_CLOSE;
    if (req->t_start == 0) {
        req->t_start = lg_now_ns();
        req->wall_start = lg_wall_ns();
    }
    if (req->id[0] == '\0') {
        client_set_request_id(c);
    }
    if (err == HPE_USER && req->reject.status == 400) {
        lg_client_fail(c, 400, req->reject.code, "malformed HTTP request: %s", req->reject.why);
        return;
    }
    if (err == HPE_USER && req->reject.status == 505) {
        lg_client_fail(c, 505, req->reject.code,
                       "HTTP/%u.%u is not supported: only HTTP/1.0 and HTTP/1.1",
                       c->parser.http_major, c->parser.http_minor);
        return;
    }
    if (err == HPE_USER && req->reject.status != 0) {
        lg_client_fail(c, req->reject.status, req->reject.code, "%s", req->reject.why);
        return;
    }
    lg_client_fail(c, 400, "bad_request", "malformed HTTP request: %s",
                   llhttp_get_error_reason(&c->parser));
}

static void
client_parse_run(struct lg_client *c)
{
    int err = HPE_OK;

    for (;;) {
        switch (lg_reader_run(c, &err)) {
        case LG_READER_HEAD:
            if (client_on_head(c) != LG_OK) {
                return;
            }
            continue; /* parse the body (or complete a body-less message) */
        case LG_READER_DONE:
            c->ops->dispatch(c);
            return;
        case LG_READER_ERROR:
            client_parse_error(c, err);
            return;
        default:
            return;
        }
    }
}

/*
 * Parses what the client sent. The read timeout for what is still to come
 * (the rest of the head, the body) is set once, when the parse stops still
 * reading: a request that arrives whole (the common case) goes from idle to
 * none without passing through the header and body timeouts (each a
 * bufferevent_set_timeouts(), a del and an add of both events).
 */
static void
client_parse(struct lg_client *c)
{
    c->read_tmo_want = UINT64_MAX;
    client_parse_run(c);
    if (c->read_tmo_want != UINT64_MAX
        && (c->state == LG_CLIENT_ST_READ_HEAD || c->state == LG_CLIENT_ST_READ_BODY)) {
        client_set_read_timeout(c, c->read_tmo_want);
    }
}

static void
client_on_read(struct bufferevent *bev, void *arg)
{
    struct lg_client *c = arg;

    (void)bev;
    client_idle_end(c);
    if (c->parked) {
        c = client_unpark(c);
    }
    if (c->state == LG_CLIENT_ST_READ_HEAD || c->state == LG_CLIENT_ST_READ_BODY) {
        size_t budget = LG_BEVIO_READ_BUDGET, want, got;

        client_parse(c);
        /*
         * A large Content-Length body (its size already checked): take the
         * rest of it in one read, up to the budget, never past its end,
         * instead of 4 KiB per read event (nginx reads into a buffer of the
         * body's size the same way). A short read means the socket is
         * drained: the next read event brings the rest, without a readv
         * that finds nothing. Chunked bodies keep libevent's path.
         */
        while (c->state == LG_CLIENT_ST_READ_BODY && !(c->req.flags & LG_REQ_F_CHUNKED)
               && budget > 0 && c->parser.content_length > 0) {
            want = LG_MIN(budget, c->parser.content_length);
            got = lg_bevio_read(c->bev, want);
            if (got == 0) {
                break;
            }
            budget -= LG_MIN(budget, got);
            client_parse(c);
            if (got < want) {
                break;
            }
        }
    } else if (c->state == LG_CLIENT_ST_LINGER) {
        client_linger_read(c);
    }
    /* otherwise a pipelined request waits in the input (bounded by the
     * read high watermark) until this one is done */
}

static void
client_on_write(struct bufferevent *bev, void *arg)
{
    struct lg_client *c = arg;

    if (c->parked) {
        return; /* idle: nothing to write */
    }
    if (c->state == LG_CLIENT_ST_RELAY) {
        c->ops->drained(c);
    } else if (c->state == LG_CLIENT_ST_FLUSH
               && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        client_close_flushed(c);
    }
}

static void
client_on_event(struct bufferevent *bev, short what, void *arg)
{
    struct lg_client *c = arg;
    struct lg_request *req = &c->req;

    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        return; /* TLS handshake done: the request comes next */
    }
    if (c->parked) {
        /* idle between requests: its time is up, or it left */
        if ((what & BEV_EVENT_TIMEOUT)
            && lg_now_ns() - c->read_armed_ns < c->read_tmo_ms * (LG_NS_PER_MS / 2)) {
            lg_bevio_enable(c->bev, EV_READ); /* stale (see below) */
            return;
        }
        lg_client_close(c, (what & BEV_EVENT_TIMEOUT) ? "keepalive_timeout"
                                                      : lg_fail_name(LG_FAIL_CLIENT_CLOSED));
        return;
    }
    if (c->state == LG_CLIENT_ST_LINGER) {
        lg_client_close(c, "done"); /* the client finished, or its time is up */
        return;
    }
    if (what & BEV_EVENT_TIMEOUT) {
        if (what & BEV_EVENT_WRITING) {
            if (req->t_start == 0) {
                /* between requests: nothing to log */
                lg_client_close(c, lg_fail_name(LG_FAIL_CLIENT_STALLED));
            } else {
                lg_client_cut(c, LG_FAIL_CLIENT_STALLED);
            }
            return;
        }
        if (c->state != LG_CLIENT_ST_FLUSH
            && lg_now_ns() - c->read_armed_ns < c->read_tmo_ms * (LG_NS_PER_MS / 2)) {
            /* armed again after it fired (the callback is deferred): stale */
            lg_bevio_enable(c->bev, EV_READ);
            return;
        }
        if (c->state == LG_CLIENT_ST_READ_HEAD && req->t_start == 0) {
            lg_client_close(c, "keepalive_timeout");
        } else if (c->state == LG_CLIENT_ST_READ_HEAD || c->state == LG_CLIENT_ST_READ_BODY) {
            req->flags |= LG_REQ_F_CLOSE;
            if (req->id[0] == '\0') {
                client_set_request_id(c);
            }
            if (lg_reader_is_late(c, lg_now_ns())) {
                lg_client_fail(c, 408, "request_timeout",
                               "the request body arrives slower than the gateway accepts "
                               "(timeouts.client_body_min_rate)");
            } else {
                lg_client_fail(c, 408, "request_timeout", "the request was not received in time");
            }
        } else if (c->state != LG_CLIENT_ST_FLUSH) {
            /* a response is on its way: the read side only watches for the
             * client leaving, and its timeout starts again */
            c->read_armed_ns = lg_now_ns();
            bufferevent_enable(c->bev, EV_READ);
        }
        return;
    }
    /* EOF or error: the client is gone. Stop the engine at once. */
    if (req->flags & LG_REQ_F_STARTED) {
        if (!(req->flags & LG_REQ_F_LOGGED)) {
            /* gone before the end of its answer: 499, with what it was sent
             * (the head said 200; the log says the client did not take it all) */
            req->status = lg_fail_status(LG_FAIL_CLIENT_CLOSED);
        }
        req->error = lg_fail_name(LG_FAIL_CLIENT_CLOSED);
        c->ops->abort(c, LG_FAIL_CLIENT_CLOSED);
    } else if (req->flags & LG_REQ_F_PROXIED) {
        req->status = lg_fail_status(LG_FAIL_CLIENT_CLOSED);
        req->error = lg_fail_name(LG_FAIL_CLIENT_CLOSED);
        c->ops->abort(c, LG_FAIL_CLIENT_CLOSED);
    }
    lg_client_close(c, lg_fail_name(LG_FAIL_CLIENT_CLOSED));
}

int
lg_client_new(struct lg_worker *w, int fd, const struct sockaddr *sa, int salen,
              struct ssl_st *ssl, const struct lg_client_ops *ops)
{
    struct lg_client *c;
    const struct lg_config *conf = w->fleet->conf;
    const int opts = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
    int one = 1, lowat = (int)LG_MIN(conf->limits.stream_buffer_bytes, (size_t)INT32_MAX);

    c = lg_xcalloc(1, sizeof(*c));
    if (ssl != NULL) {
        /* the SSL (and with it the socket) is the bufferevent's now, even on failure */
        c->bev = lg_tls_accept_bev(w->base, fd, ssl, opts);
        c->tls = true;
    } else {
        c->bev = bufferevent_socket_new(w->base, fd, opts);
        if (c->bev == NULL) {
            evutil_closesocket(fd);
        } else {
            lg_bevio_own_reads(c->bev); /* no FIONREAD per read */
            /* a large answer leaves in writes of up to 1 MiB, not 16 KiB per event */
            bufferevent_set_max_single_write(c->bev, 1024 * 1024);
        }
    }
    if (c->bev == NULL) {
        free(c);
        return LG_ENOMEM;
    }
    c->w = w;
    c->ops = ops;
    c->reap.free = client_free;
    c->id = ((uint64_t)w->id << 40) | ++w->conn_seq;
    memcpy(&c->addr, sa, LG_MIN((size_t)salen, sizeof(c->addr)));
    if (sa->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->addr_str,
                  sizeof(c->addr_str));
    } else if (sa->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->addr_str,
                  sizeof(c->addr_str));
    } else {
        snprintf(c->addr_str, sizeof(c->addr_str), "unix");
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /*
     * The kernel keeps at most stream_buffer_bytes unsent for the client (a
     * write past it is short, and the socket is writable again under it):
     * a client that reads nothing (a zero window) then fills our output,
     * whose write timeout (client_stall) cuts it and stops the engine, instead
     * of its stream flowing into a send buffer that autotuning grew to
     * megabytes, unseen, for as long as the engine generates.
     */
    setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat));
    lg_reader_init(c);
    lg_hdrs_init(&c->req.hdrs, (uint32_t)conf->limits.max_header_bytes, conf->limits.max_headers);
    c->state = LG_CLIENT_ST_READ_HEAD;
    c->action = client_state_names[c->state];
    /*
     * No write callback until one is wanted (lg_client_watch_drain): with
     * one, every write that empties the output schedules it (a deferred
     * callback per answer) only for it to find nothing to do.
     */
    bufferevent_setcb(c->bev, client_on_read, NULL, client_on_event, c);
    /* bound what a pipelining or flooding client can make us buffer */
    lg_bevio_read_limit(c->bev, conf->limits.max_header_bytes + 64 * 1024);
    client_set_timeouts(c, conf->timeouts.client_header_ms, 0, true);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    TAILQ_INSERT_TAIL(&w->clients, c, link);
    w->nclients++;
    __atomic_fetch_add(&w->gw->nconnections, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&w->stats.accepted, 1, __ATOMIC_RELAXED);
    return LG_OK;
}
