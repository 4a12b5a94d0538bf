/*
 * reader.c: reading a request off a client connection: llhttp over the
 * input's extents, with the limits applied as the bytes come (the request
 * line, the head's size and fields, the body's size with its chunk framing,
 * chunk extensions and trailers, the body's deadline), the head checked as
 * it comes for what llhttp 8 lets through (headcheck.c), the body moved
 * into the request's buffer, not copied when it arrives in one piece. It
 * stops at the head (which the connection checks before any body byte is
 * read), at the end of the request, or at an error, and says which: the
 * connection (client.c) decides what follows.
 *
 * Owns nothing: the parser and the request are the client's.
 */
#include "serve/reader.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>

#include "base/config.h"
#include "fleet/fleet.h"
#include "http/headcheck.h"
#include "http/httphdr.h"
#include "serve/client_types.h"
#include "serve/worker.h"

/* The configuration a request is read under: the worker's (a request takes
 * its fleet, and that fleet's configuration, once it is read). */
static const struct lg_config *
reader_conf(const struct lg_client *c)
{
    return c->w->fleet->conf;
}

static int
reader_reject(struct lg_client *c, int status, const char *code, const char *why)
{
    c->req.reject.status = status;
    c->req.reject.code = code;
    c->req.reject.why = why;
    return HPE_USER;
}

/*
 * The whole-body deadline: the body must come at timeouts.client_body_min_rate
 * on average, after a grace of timeouts.client_body_grace from the head
 * (Kestrel's MinRequestBodyDataRate, mod_reqtimeout's MinRate): each byte of
 * data moves it on by 1/rate, framing moves it nowhere. 0: none.
 */
static uint64_t
reader_body_deadline(const struct lg_config *conf, const struct lg_request *req)
{
    const struct lg_timeouts_conf *t = &conf->timeouts;

    if (t->client_body_min_rate == 0 || req->t_body == 0) {
        return 0; /* no deadline, or the body not found incomplete yet */
    }
    /* body_bytes <= 1 GiB: the product stays far below 2^64 */
    return req->t_body + t->client_body_grace_ms * LG_NS_PER_MS
           + req->body_bytes * LG_NS_PER_S / t->client_body_min_rate;
}

bool
lg_reader_is_late(const struct lg_client *c, uint64_t now)
{
    uint64_t deadline = reader_body_deadline(reader_conf(c), &c->req);

    return c->state == LG_CLIENT_ST_READ_BODY && deadline != 0 && now >= deadline;
}

/* A body still coming: the read timeout is its idle time or what is left of
 * its deadline, whichever is less; refuses it (408) once the deadline passed. */
static int
reader_body_timeout(struct lg_client *c, const struct lg_config *conf)
{
    struct lg_request *req = &c->req;
    uint64_t deadline, now;

    c->read_tmo_want = conf->timeouts.client_body_ms;
    if (conf->timeouts.client_body_min_rate == 0) {
        return HPE_OK;
    }
    now = lg_now_ns();
    if (req->t_body == 0) {
        /* the first pass that leaves the body incomplete: the one that read
         * the head's end (a body that comes with its head never gets here) */
        req->t_body = now;
    }
    deadline = reader_body_deadline(conf, req);
    if (now >= deadline) {
        return reader_reject(c, 408, "request_timeout",
                             "the request body arrives slower than the gateway accepts "
                             "(timeouts.client_body_min_rate)");
    }
    c->read_tmo_want = LG_MIN(c->read_tmo_want, (deadline - now) / LG_NS_PER_MS + 1);
    return HPE_OK;
}

static int
reader_on_message_begin(llhttp_t *p)
{
    struct lg_client *c = p->data;

    if (c->req.t_start == 0) {
        c->req.t_start = lg_now_ns();
        c->req.wall_start = lg_wall_ns();
    }
    return 0;
}

static int
reader_on_url(llhttp_t *p, const char *at, size_t n)
{
    struct lg_client *c = p->data;

    if (lg_hdrs_on_url(&c->req.hdrs, at, n) != LG_OK) {
        return reader_reject(c, 414, "uri_too_long", "the request line is too long");
    }
    return 0;
}

/*
 * Chunk extensions and trailer fields are never forwarded nor kept, but
 * they are counted: together at most limits.max_header_bytes (besides the
 * head's own), so a body cannot stream them for ever.
 */
static int
reader_count_meta(struct lg_client *c, size_t n, int status, const char *code, const char *why)
{
    struct lg_request *req = &c->req;

    req->meta_bytes += n;
    if (req->meta_bytes > reader_conf(c)->limits.max_header_bytes) {
        return reader_reject(c, status, code, why);
    }
    return 0;
}

static int
reader_on_trailer(struct lg_client *c, size_t n)
{
    return reader_count_meta(c, n, 431, "headers_too_large",
                             "the trailer fields exceed the limit (limits.max_header_bytes)");
}

static int
reader_on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct lg_client *c = p->data;

    if (c->state == LG_CLIENT_ST_READ_BODY) {
        return reader_on_trailer(c, n); /* a chunked body's trailer */
    }
    if (lg_hdrs_on_field(&c->req.hdrs, at, n) != LG_OK) {
        return reader_reject(c, 431, "headers_too_large", "the request head is too large");
    }
    return 0;
}

static int
reader_on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct lg_client *c = p->data;

    if (c->state == LG_CLIENT_ST_READ_BODY) {
        return reader_on_trailer(c, n);
    }
    if (lg_hdrs_on_value(&c->req.hdrs, at, n) != LG_OK) {
        return reader_reject(c, 431, "headers_too_large", "the request head is too large");
    }
    return 0;
}

static int
reader_on_chunk_extension(llhttp_t *p, const char *at, size_t n)
{
    (void)at;
    return reader_count_meta(p->data, n, 413, "body_too_large",
                             "the chunk extensions exceed the limit (limits.max_header_bytes)");
}

static int
reader_on_headers_complete(llhttp_t *p)
{
    (void)p;
    return HPE_PAUSED; /* the caller checks the head before any body byte */
}

static int
reader_on_body(llhttp_t *p, const char *at, size_t n)
{
    struct lg_client *c = p->data;
    struct lg_request *req = &c->req;

    if (req->body_bytes + req->frame_bytes + n > reader_conf(c)->limits.max_body_bytes) {
        return reader_reject(c, 413, "body_too_large",
                             "the request body exceeds the limit (limits.max_body_bytes)");
    }
    req->body_bytes += n;
    if (req->flags & LG_REQ_F_CHUNKED) {
        evbuffer_add(req->body, at, n); /* chunk framing interleaves: decode */
    } else {
        c->pass_body += n; /* contiguous: moved after the pass */
    }
    return 0;
}

static int
reader_on_message_complete(llhttp_t *p)
{
    struct lg_client *c = p->data;

    c->req.flags |= LG_REQ_F_COMPLETE;
    if (llhttp_should_keep_alive(p)) {
        c->req.flags |= LG_REQ_F_KEEPALIVE;
    }
    return HPE_PAUSED; /* stop at the message boundary: one request at a time */
}

static const llhttp_settings_t reader_settings = {
    .on_message_begin = reader_on_message_begin,
    .on_url = reader_on_url,
    .on_header_field = reader_on_header_field,
    .on_header_value = reader_on_header_value,
    .on_headers_complete = reader_on_headers_complete,
    .on_body = reader_on_body,
    .on_message_complete = reader_on_message_complete,
    .on_chunk_extension_name = reader_on_chunk_extension,
    .on_chunk_extension_value = reader_on_chunk_extension,
};

void
lg_reader_init(struct lg_client *c)
{
    llhttp_init(&c->parser, HTTP_REQUEST, &reader_settings);
    c->parser.data = c;
}

int
lg_reader_run(struct lg_client *c, int *err_out)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    const struct lg_config *conf = reader_conf(c);

    while (c->state == LG_CLIENT_ST_READ_HEAD || c->state == LG_CLIENT_ST_READ_BODY) {
        struct lg_request *req = &c->req;
        size_t avail = evbuffer_get_length(in), consumed;
        int err;

        if (avail == 0 && c->state == LG_CLIENT_ST_READ_HEAD) {
            return LG_READER_MORE;
        }
        c->pass_body = 0;
        err = lg_http_execute(&c->parser, in, &consumed);
        if (c->state == LG_CLIENT_ST_READ_HEAD) {
            /* RFC 9112 sections 2.2, 5.2: what llhttp 8 lets through, checked
             * in every piece of the head before it is drained */
            const char *bad = lg_headcheck_feed(&req->headcheck, in, consumed);

            if (bad != NULL && (err == HPE_OK || err == HPE_PAUSED)) {
                err = reader_reject(c, 400, "bad_request", bad);
            } else if (err == HPE_INVALID_VERSION && lg_headcheck_version_unsupported(&c->parser)) {
                err = reader_reject(c, 505, "http_version_not_supported",
                                    "only HTTP/1.0 and HTTP/1.1 are supported");
            }
            evbuffer_drain(in, consumed);
            req->head_bytes += consumed;
            if (err == HPE_PAUSED) {
                llhttp_resume(&c->parser);
                return LG_READER_HEAD;
            }
            if (err == HPE_OK && req->head_bytes > conf->limits.max_header_bytes) {
                err = reader_reject(c, 431, "headers_too_large", "the request head is too large");
            } else if (err == HPE_OK && req->t_start != 0) {
                /* client_header bounds the whole head, not the gap between
                 * reads: a byte every second must not keep a slot forever */
                uint64_t spent_ms = (lg_now_ns() - req->t_start) / LG_NS_PER_MS;

                c->read_tmo_want = spent_ms < conf->timeouts.client_header_ms
                                       ? conf->timeouts.client_header_ms - spent_ms
                                       : 1;
            } else if (err == HPE_OK) {
                c->read_tmo_want = conf->timeouts.client_header_ms; /* no message begun */
            }
        } else {
            /* body bytes: moved when contiguous, already decoded when chunked */
            size_t framing = consumed - c->pass_body;

            if (req->flags & LG_REQ_F_CHUNKED) {
                evbuffer_drain(in, consumed);
            } else {
                evbuffer_drain(in, framing);
                evbuffer_remove_buffer(in, req->body, c->pass_body);
            }
            req->head_bytes += framing;
            req->frame_bytes += framing;
            if (err == HPE_PAUSED && (req->flags & LG_REQ_F_COMPLETE)) {
                llhttp_resume(&c->parser);
                return LG_READER_DONE;
            }
            if (err == HPE_OK && req->body_bytes + req->frame_bytes > conf->limits.max_body_bytes) {
                /* size lines and their padding: framing counts with the data */
                err = reader_reject(c, 413, "body_too_large",
                                    "the request body with its chunk framing exceeds the limit "
                                    "(limits.max_body_bytes)");
            } else if (err == HPE_OK) {
                err = reader_body_timeout(c, conf);
            }
        }
        if (err != HPE_OK) {
            *err_out = err;
            return LG_READER_ERROR;
        }
        if (evbuffer_get_length(in) == 0) {
            return LG_READER_MORE;
        }
    }
    return LG_READER_MORE;
}
