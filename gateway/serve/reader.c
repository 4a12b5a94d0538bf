/*
 * reader.c: reading a request off a client connection: llhttp over the
 * input's extents, with the limits applied as the bytes come (the request
 * line, the head's size and fields, the body's size), the head checked as
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
    c->req.reject_status = status;
    c->req.reject_code = code;
    c->req.reject_why = why;
    return HPE_USER;
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

static int
reader_on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct lg_client *c = p->data;

    if (c->state == LG_CLIENT_ST_READ_BODY) {
        return 0; /* a chunked body's trailer: never forwarded, not kept */
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
        return 0;
    }
    if (lg_hdrs_on_value(&c->req.hdrs, at, n) != LG_OK) {
        return reader_reject(c, 431, "headers_too_large", "the request head is too large");
    }
    return 0;
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

    if (req->body_bytes + n > reader_conf(c)->limits.max_body_bytes) {
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
            if (err == HPE_PAUSED && (req->flags & LG_REQ_F_COMPLETE)) {
                llhttp_resume(&c->parser);
                return LG_READER_DONE;
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
