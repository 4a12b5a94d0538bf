/*
 * httphdr.c: bounded head storage and hop-by-hop marking (see httphdr.h).
 *
 * Owns: the arena and index of each struct lg_hdrs it is given.
 * Every stored piece is NUL-terminated in the arena, so names and values can
 * be used as C strings; the NUL bytes count against max_bytes.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "http/httphdr.h"

enum { PIECE_NONE = 0, PIECE_URL, PIECE_FIELD, PIECE_VALUE };

void
lg_hdrs_init(struct lg_hdrs *hs, uint32_t max_bytes, uint32_t max_fields)
{
    memset(hs, 0, sizeof(*hs));
    hs->max_bytes = max_bytes;
    hs->max_fields = max_fields;
}

void
lg_hdrs_reset(struct lg_hdrs *hs)
{
    hs->len = 0;
    hs->n = 0;
    hs->url_off = 0;
    hs->url_len = 0;
    hs->last = PIECE_NONE;
}

void
lg_hdrs_release(struct lg_hdrs *hs)
{
    free(hs->buf);
    free(hs->h);
    hs->buf = NULL;
    hs->h = NULL;
    hs->cap = 0;
    hs->cap_h = 0;
    lg_hdrs_reset(hs);
}

void
lg_hdrs_recycle(struct lg_hdrs *hs, uint32_t max_bytes, uint32_t max_fields)
{
    if (hs->cap > LG_HDRS_KEEP_BYTES || hs->cap_h > LG_HDRS_KEEP_FIELDS) {
        lg_hdrs_release(hs);
    }
    lg_hdrs_reset(hs);
    hs->max_bytes = max_bytes;
    hs->max_fields = max_fields;
}

/* Appends n bytes plus a NUL (replacing the previous piece's NUL when `extend`). */
static int
hdrs_append(struct lg_hdrs *hs, const char *at, size_t n, bool extend)
{
    uint32_t base = extend ? hs->len - 1 : hs->len;
    size_t need = (size_t)base + n + 1;

    if (need > hs->max_bytes) {
        return LG_EINVAL;
    }
    if (need > hs->cap) {
        size_t cap = hs->cap ? hs->cap : 512;

        while (cap < need) {
            cap *= 2;
        }
        if (cap > hs->max_bytes) {
            cap = hs->max_bytes;
        }
        hs->buf = lg_xrealloc(hs->buf, cap);
        hs->cap = (uint32_t)cap;
    }
    memcpy(hs->buf + base, at, n);
    hs->buf[base + n] = '\0';
    hs->len = (uint32_t)need;
    return LG_OK;
}

int
lg_hdrs_on_url(struct lg_hdrs *hs, const char *at, size_t n)
{
    bool extend = hs->last == PIECE_URL;
    uint32_t off = hs->len;

    if (hdrs_append(hs, at, n, extend) != LG_OK) {
        return LG_EINVAL;
    }
    if (!extend) {
        hs->url_off = off;
        hs->url_len = 0;
    }
    hs->url_len += (uint32_t)n;
    hs->last = PIECE_URL;
    return LG_OK;
}

int
lg_hdrs_on_field(struct lg_hdrs *hs, const char *at, size_t n)
{
    bool extend = hs->last == PIECE_FIELD;
    uint32_t off = hs->len;
    struct lg_hdr *h;

    if (!extend) {
        if (hs->n >= hs->max_fields) {
            return LG_EINVAL;
        }
        if (hs->n == hs->cap_h) {
            hs->cap_h = hs->cap_h ? hs->cap_h * 2 : 16;
            hs->h = lg_xrealloc(hs->h, hs->cap_h * sizeof(*hs->h));
        }
    }
    if (hdrs_append(hs, at, n, extend) != LG_OK) {
        return LG_EINVAL;
    }
    if (!extend) {
        h = &hs->h[hs->n++];
        memset(h, 0, sizeof(*h));
        h->name_off = off;
    } else {
        h = &hs->h[hs->n - 1];
    }
    h->name_len += (uint32_t)n;
    hs->last = PIECE_FIELD;
    return LG_OK;
}

int
lg_hdrs_on_value(struct lg_hdrs *hs, const char *at, size_t n)
{
    bool extend = hs->last == PIECE_VALUE;
    uint32_t off = hs->len;
    struct lg_hdr *h;

    if (hs->n == 0) {
        return LG_EINVAL;
    }
    h = &hs->h[hs->n - 1];
    if (hdrs_append(hs, at, n, extend) != LG_OK) {
        return LG_EINVAL;
    }
    if (!extend) {
        h->value_off = off;
        h->value_len = 0;
    }
    h->value_len += (uint32_t)n;
    hs->last = PIECE_VALUE;
    return LG_OK;
}

const struct lg_hdr *
lg_hdrs_find_n(const struct lg_hdrs *hs, const char *name, size_t n)
{
    for (uint32_t i = 0; i < hs->n; i++) {
        const struct lg_hdr *h = &hs->h[i];

        if (h->name_len == n && lg_mem_ieq(hs->buf + h->name_off, name, n)) {
            return h;
        }
    }
    return NULL;
}

/* Whether the comma-separated list in h's value has the token of tn bytes. */
static bool
hdrs_has_token_n(const struct lg_hdrs *hs, const struct lg_hdr *h, const char *token, size_t tn)
{
    const char *p = hs->buf + h->value_off;
    const char *end = p + h->value_len;

    while (p < end) {
        const char *q;

        while (p < end && (*p == ' ' || *p == '\t' || *p == ',')) {
            p++;
        }
        q = p;
        while (q < end && *q != ',') {
            q++;
        }
        {
            const char *e = q;

            while (e > p && (e[-1] == ' ' || e[-1] == '\t')) {
                e--;
            }
            if ((size_t)(e - p) == tn && lg_mem_ieq(p, token, tn)) {
                return true;
            }
        }
        p = q;
    }
    return false;
}

bool
lg_hdrs_has_token(const struct lg_hdrs *hs, const struct lg_hdr *h, const char *token)
{
    return hdrs_has_token_n(hs, h, token, strlen(token));
}

/* With their lengths: a header's name is compared only where its length matches. */
#define HDRS_NAME(s) { s, sizeof(s) - 1 }
static const struct {
    const char *name;
    size_t len;
} hdrs_hop_names[] = {
    HDRS_NAME("connection"), HDRS_NAME("keep-alive"),        HDRS_NAME("proxy-connection"),
    HDRS_NAME("te"),         HDRS_NAME("trailer"),           HDRS_NAME("transfer-encoding"),
    HDRS_NAME("upgrade"),
};
#undef HDRS_NAME
/* The lengths among them (bit n: a name of n bytes): most fields are none of them. */
#define HDRS_LEN_BIT(s) (UINT32_C(1) << (sizeof(s) - 1))
static const uint32_t hdrs_hop_lens = HDRS_LEN_BIT("connection") | HDRS_LEN_BIT("keep-alive")
                                      | HDRS_LEN_BIT("proxy-connection") | HDRS_LEN_BIT("te")
                                      | HDRS_LEN_BIT("trailer") | HDRS_LEN_BIT("transfer-encoding")
                                      | HDRS_LEN_BIT("upgrade");
#undef HDRS_LEN_BIT

void
lg_hdrs_mark_hop_by_hop(struct lg_hdrs *hs)
{
    const struct lg_hdr *conn = lg_hdrs_find(hs, "connection");

    for (uint32_t i = 0; i < hs->n; i++) {
        struct lg_hdr *h = &hs->h[i];
        const char *name = hs->buf + h->name_off;

        h->hop = false;
        for (size_t k = 0; k < LG_ARRAY_SIZE(hdrs_hop_names) && h->name_len < 32
                           && ((hdrs_hop_lens >> h->name_len) & 1) != 0;
             k++) {
            if (h->name_len == hdrs_hop_names[k].len
                && lg_mem_ieq(name, hdrs_hop_names[k].name, h->name_len)) {
                h->hop = true;
                break;
            }
        }
        /* RFC 9110 7.6.1: a connection option is never a field meant for every
         * recipient; Content-Length frames the message (Transfer-Encoding, in
         * the list above, is framed anew by whoever forwards it) */
        if (!h->hop && conn != NULL && !lg_str_ieq(name, h->name_len, "content-length")
            && hdrs_has_token_n(hs, conn, name, h->name_len)) {
            h->hop = true;
        }
    }
}

int
lg_http_execute(llhttp_t *parser, struct evbuffer *in, size_t *consumed)
{
    struct evbuffer_iovec vec[16];
    int n = evbuffer_peek(in, -1, NULL, vec, (int)LG_ARRAY_SIZE(vec));
    llhttp_errno_t err = HPE_OK;

    *consumed = 0;
    if (n <= 0) {
        static const char none[1];

        return llhttp_execute(parser, none, 0);
    }
    n = LG_MIN(n, (int)LG_ARRAY_SIZE(vec));
    for (int i = 0; i < n; i++) {
        const char *base = vec[i].iov_base;

        err = llhttp_execute(parser, base, vec[i].iov_len);
        if (err != HPE_OK) {
            const char *pos = llhttp_get_error_pos(parser);

            if (pos != NULL && pos >= base && pos <= base + vec[i].iov_len) {
                *consumed += (size_t)(pos - base);
            }
            return err;
        }
        *consumed += vec[i].iov_len;
    }
    return err;
}

size_t
lg_http_chunk_head(char *buf, uint64_t n)
{
    char tmp[LG_HTTP_CHUNK_HEAD_MAX];
    size_t k = sizeof(tmp) - 2;

    memcpy(tmp + k, "\r\n", 2);
    do {
        tmp[--k] = "0123456789abcdef"[n & 15];
        n >>= 4;
    } while (n != 0);
    memcpy(buf, tmp + k, sizeof(tmp) - k);
    return sizeof(tmp) - k;
}

/* The reason phrase of a status the gateway writes or relays without one, and
 * llmsim writes. */
const char *
lg_http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 413:
        return "Content Too Large";
    case 414:
        return "URI Too Long";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 499:
        return "Client Closed Request";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 501:
        return "Not Implemented";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return status >= 500 ? "Server Error" : status >= 400 ? "Client Error" : "Unknown";
    }
}
