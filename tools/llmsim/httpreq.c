/*
 * httpreq.c: incremental HTTP/1.1 request reader on llhttp for llmsim.
 *
 * Owns: the body evbuffer. Borrows: the bytes passed to _feed, only during
 * the call (the URL, the Expect value and the body are copied, each within
 * its bound: header bytes -> 431, URL -> 414, body -> 413).
 * llhttp pauses at the end of every request, so pipelined requests are read
 * one at a time: the caller answers, then calls _next and feeds the rest.
 */
#include "httpreq.h"

#include <string.h>

#include <event2/buffer.h>

#include "base/lg_core.h"

/* Bytes a header line costs beyond its name and value (": " and CRLF). */
#define HTTPREQ_LINE_OVERHEAD 4

static int
httpreq_fail(struct lg_sim_httpreq *r, int status, const char *reason)
{
    r->error_status = status;
    r->error_reason = reason;
    llhttp_set_error_reason(&r->parser, reason);
    return HPE_USER;
}

static struct lg_sim_httpreq *
httpreq_of(llhttp_t *p)
{
    return p->data;
}

static int
httpreq_count_head(struct lg_sim_httpreq *r, size_t len)
{
    r->header_bytes += len;
    if (r->header_bytes > r->max_header_bytes) {
        return httpreq_fail(r, 431, "request header fields too large");
    }
    return HPE_OK;
}

static int
httpreq_on_message_begin(llhttp_t *p)
{
    struct lg_sim_httpreq *r = httpreq_of(p);

    r->header_bytes = 0;
    r->url_len = 0;
    r->field_len = 0;
    r->field_expect = false;
    r->field_load = false;
    r->load_seen = false;
    r->load_value_len = 0;
    r->expect_continue = false;
    r->continue_sent = false;
    r->in_body = false;
    return HPE_OK;
}

static int
httpreq_on_url(llhttp_t *p, const char *at, size_t len)
{
    struct lg_sim_httpreq *r = httpreq_of(p);
    int rc = httpreq_count_head(r, len);

    if (rc != HPE_OK) {
        return rc;
    }
    if (len >= sizeof(r->url) - r->url_len) {
        return httpreq_fail(r, 414, "request target too long");
    }
    memcpy(r->url + r->url_len, at, len);
    r->url_len += len;
    r->url[r->url_len] = '\0';
    return HPE_OK;
}

static int
httpreq_on_header_field(llhttp_t *p, const char *at, size_t len)
{
    struct lg_sim_httpreq *r = httpreq_of(p);
    int rc = httpreq_count_head(r, len + HTTPREQ_LINE_OVERHEAD);

    if (rc != HPE_OK) {
        return rc;
    }
    r->header_bytes -= HTTPREQ_LINE_OVERHEAD; /* counted once per line, at its value */
    for (size_t i = 0; i < len; i++) {
        if (r->field_len < sizeof(r->field) - 1) {
            char c = at[i];

            r->field[r->field_len] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
        }
        r->field_len++;
    }
    return HPE_OK;
}

static int
httpreq_on_header_field_complete(llhttp_t *p)
{
    struct lg_sim_httpreq *r = httpreq_of(p);

    r->field_expect = r->field_len == 6 && memcmp(r->field, "expect", 6) == 0;
    r->field_load = !r->load_seen && r->field_len == 28
                    && memcmp(r->field, "endpoint-load-metrics-format", 28) == 0;
    if (r->field_load) {
        r->load_value_len = 0;
    }
    r->field_len = 0;
    return HPE_OK;
}

static int
httpreq_on_header_value(llhttp_t *p, const char *at, size_t len)
{
    struct lg_sim_httpreq *r = httpreq_of(p);
    int rc = httpreq_count_head(r, len);

    if (rc != HPE_OK) {
        return rc;
    }
    if (r->field_load) {
        for (size_t i = 0; i < len; i++) {
            if (r->load_value_len < sizeof(r->load_value)) {
                r->load_value[r->load_value_len] = at[i];
            }
            r->load_value_len++;
        }
    }
    if (r->field_expect) {
        /* keep the value in `field` (free now): "100-continue" fits */
        for (size_t i = 0; i < len; i++) {
            if (r->field_len < sizeof(r->field) - 1) {
                r->field[r->field_len] = at[i];
            }
            r->field_len++;
        }
    }
    return HPE_OK;
}

static int
httpreq_on_header_value_complete(llhttp_t *p)
{
    struct lg_sim_httpreq *r = httpreq_of(p);

    if (r->field_expect
        && lg_str_ieq(r->field, LG_MIN(r->field_len, sizeof(r->field) - 1), "100-continue")
        && r->field_len == 12) {
        r->expect_continue = true;
    }
    if (r->field_load) {
        r->load_seen = true;
    }
    r->field_expect = false;
    r->field_load = false;
    r->field_len = 0;
    return httpreq_count_head(r, HTTPREQ_LINE_OVERHEAD);
}

static int
httpreq_on_headers_complete(llhttp_t *p)
{
    struct lg_sim_httpreq *r = httpreq_of(p);

    r->method = (uint8_t)llhttp_get_method(p);
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > r->max_body_bytes) {
        return httpreq_fail(r, 413, "request body too large");
    }
    r->in_body = true;
    return HPE_OK;
}

static int
httpreq_on_body(llhttp_t *p, const char *at, size_t len)
{
    struct lg_sim_httpreq *r = httpreq_of(p);

    if (len > r->max_body_bytes - evbuffer_get_length(r->body)) {
        return httpreq_fail(r, 413, "request body too large");
    }
    /* the one copy of the body: it is parsed as JSON, never relayed */
    if (evbuffer_add(r->body, at, len) != 0) {
        return httpreq_fail(r, 500, "out of memory");
    }
    return HPE_OK;
}

static int
httpreq_on_message_complete(llhttp_t *p)
{
    struct lg_sim_httpreq *r = httpreq_of(p);

    r->keep_alive = llhttp_should_keep_alive(p) != 0;
    r->complete = true;
    return HPE_PAUSED;
}

static const llhttp_settings_t httpreq_settings = {
    .on_message_begin = httpreq_on_message_begin,
    .on_url = httpreq_on_url,
    .on_header_field = httpreq_on_header_field,
    .on_header_field_complete = httpreq_on_header_field_complete,
    .on_header_value = httpreq_on_header_value,
    .on_header_value_complete = httpreq_on_header_value_complete,
    .on_headers_complete = httpreq_on_headers_complete,
    .on_body = httpreq_on_body,
    .on_message_complete = httpreq_on_message_complete,
};

int
lg_sim_httpreq_init(struct lg_sim_httpreq *r, size_t max_header_bytes, size_t max_body_bytes)
{
    memset(r, 0, sizeof(*r));
    r->body = evbuffer_new();
    if (r->body == NULL) {
        return LG_ENOMEM;
    }
    r->max_header_bytes = max_header_bytes;
    r->max_body_bytes = max_body_bytes;
    llhttp_init(&r->parser, HTTP_REQUEST, &httpreq_settings);
    r->parser.data = r;
    return LG_OK;
}

void
lg_sim_httpreq_free(struct lg_sim_httpreq *r)
{
    if (r->body != NULL) {
        evbuffer_free(r->body);
        r->body = NULL;
    }
}

enum lg_sim_httpreq_rc
lg_sim_httpreq_feed(struct lg_sim_httpreq *r, const char *data, size_t len, size_t *consumed)
{
    llhttp_errno_t err;

    *consumed = 0;
    if (r->complete) {
        return LG_SIM_HTTPREQ_DONE;
    }
    if (r->error_status != 0) {
        return LG_SIM_HTTPREQ_ERROR;
    }
    if (len == 0) {
        return LG_SIM_HTTPREQ_MORE;
    }
    err = llhttp_execute(&r->parser, data, len);
    if (err == HPE_OK) {
        *consumed = len;
        return LG_SIM_HTTPREQ_MORE;
    }
    if (err == HPE_PAUSED && r->complete) {
        *consumed = (size_t)(llhttp_get_error_pos(&r->parser) - data);
        return LG_SIM_HTTPREQ_DONE;
    }
    if (r->error_status == 0) {
        r->error_status = 400;
        r->error_reason =
            err == HPE_PAUSED_UPGRADE ? "protocol upgrade not supported" : "malformed HTTP request";
    }
    return LG_SIM_HTTPREQ_ERROR;
}

void
lg_sim_httpreq_next(struct lg_sim_httpreq *r)
{
    evbuffer_drain(r->body, evbuffer_get_length(r->body));
    r->complete = false;
    r->in_body = false;
    r->url_len = 0;
    r->url[0] = '\0';
    if (llhttp_get_errno(&r->parser) == HPE_PAUSED) {
        llhttp_resume(&r->parser);
    }
}

const char *
lg_sim_httpreq_path(const struct lg_sim_httpreq *r, size_t *len)
{
    const char *q = memchr(r->url, '?', r->url_len);

    *len = q ? (size_t)(q - r->url) : r->url_len;
    return r->url;
}

const char *
lg_sim_httpreq_query(const struct lg_sim_httpreq *r, size_t *len)
{
    const char *q = memchr(r->url, '?', r->url_len);

    if (q == NULL) {
        *len = 0;
        return "";
    }
    *len = r->url_len - (size_t)(q - r->url) - 1;
    return q + 1;
}
