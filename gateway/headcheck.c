/*
 * headcheck.c: request-head checks beyond llhttp's (see headcheck.h).
 *
 * Owns nothing. Reads the head in place (evbuffer_peek), never copies it.
 */
#include "headcheck.h"

#include <string.h>

#include <event2/buffer.h>

#include "httphdr.h"

const char *
lg_headcheck_raw(struct evbuffer *in, size_t head_len)
{
    struct evbuffer_iovec vec[16];
    int n = evbuffer_peek(in, (ev_ssize_t)head_len, NULL, vec, (int)LG_ARRAY_SIZE(vec));
    size_t seen = 0;
    char prev = '\0';
    bool after_lf = false;

    if (n > (int)LG_ARRAY_SIZE(vec)) {
        return "the request head is too fragmented"; /* cannot happen under max_header_bytes */
    }
    for (int i = 0; i < n && seen < head_len; i++) {
        const char *p = vec[i].iov_base;
        size_t len = LG_MIN(vec[i].iov_len, head_len - seen);

        for (size_t k = 0; k < len; k++) {
            char ch = p[k];

            if (after_lf && (ch == ' ' || ch == '\t')) {
                return "obsolete line folding in a header";
            }
            if (ch == '\n' && prev != '\r') {
                return "a line of the request head ends in a bare LF";
            }
            after_lf = ch == '\n';
            prev = ch;
        }
        seen += len;
    }
    return NULL;
}

/* RFC 3986 section 3.2.2 host (reg-name, IPv4, [IP-literal]) and an optional port. */
static bool
headcheck_host_ok(const char *v, size_t n)
{
    static const char allowed[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                  "0123456789-._~%!$&'()*+,;=:[]";

    for (size_t i = 0; i < n; i++) {
        if (v[i] == '\0' || strchr(allowed, v[i]) == NULL) {
            return false;
        }
    }
    return true;
}

const char *
lg_headcheck_fields(const struct lg_hdrs *hs, unsigned http_minor)
{
    const struct lg_hdr *host = NULL;
    unsigned nhost = 0;

    for (uint32_t i = 0; i < hs->n; i++) {
        const struct lg_hdr *h = &hs->h[i];

        if (lg_str_ieq(lg_hdrs_name(hs, h), h->name_len, "host")) {
            host = h;
            nhost++;
        }
    }
    if (nhost > 1) {
        return "more than one Host header";
    }
    if (nhost == 0 && http_minor >= 1) {
        return "an HTTP/1.1 request needs a Host header";
    }
    if (host != NULL && !headcheck_host_ok(lg_hdrs_value(hs, host), host->value_len)) {
        return "invalid Host header";
    }
    return NULL;
}
