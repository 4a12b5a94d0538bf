/*
 * headcheck.c: request-head checks beyond llhttp's (see headcheck.h).
 *
 * Owns nothing. Reads the head in place (evbuffer_peek), never copies it.
 */
#include "http/headcheck.h"

#include <string.h>

#include <event2/buffer.h>

#include "http/httphdr.h"

const char *
lg_headcheck_feed(struct lg_headcheck *h, struct evbuffer *in, size_t len)
{
    struct evbuffer_ptr pos;
    size_t seen = 0;

    if (evbuffer_ptr_set(in, &pos, 0, EVBUFFER_PTR_SET) != 0) {
        return NULL;
    }
    while (seen < len) {
        struct evbuffer_iovec vec[16];
        int n = evbuffer_peek(in, (ev_ssize_t)(len - seen), &pos, vec, (int)LG_ARRAY_SIZE(vec));
        size_t pass = 0;

        if (n <= 0) {
            break;
        }
        for (int i = 0; i < LG_MIN(n, (int)LG_ARRAY_SIZE(vec)) && seen + pass < len; i++) {
            const char *p = vec[i].iov_base;
            size_t k = LG_MIN(vec[i].iov_len, len - seen - pass);

            if (k == 0) {
                continue;
            }
            if (h->line_end && (p[0] == ' ' || p[0] == '\t')) {
                return "obsolete line folding in a header";
            }
            if (h->line_end && p[0] == ':') {
                return "a header field with an empty name";
            }
            /* only the bytes either side of each LF matter */
            for (const char *lf = memchr(p, '\n', k); lf != NULL;
                 lf = memchr(lf + 1, '\n', k - (size_t)(lf + 1 - p))) {
                if ((lf > p ? lf[-1] : h->prev) != '\r') {
                    return "a line of the request head ends in a bare LF";
                }
                if (lf + 1 < p + k && (lf[1] == ' ' || lf[1] == '\t')) {
                    return "obsolete line folding in a header";
                }
                if (lf + 1 < p + k && lf[1] == ':') {
                    return "a header field with an empty name";
                }
            }
            h->line_end = p[k - 1] == '\n';
            h->prev = p[k - 1];
            pass += k;
        }
        seen += pass;
        if (evbuffer_ptr_set(in, &pos, pass, EVBUFFER_PTR_ADD) != 0) {
            break;
        }
    }
    return NULL;
}

/* RFC 3986 section 3.2.2 host (reg-name, IPv4, [IP-literal]) and an optional port. */
static bool
headcheck_host_ok(const char *v, size_t n)
{
    static const bool allowed[256] = {
        ['a' ... 'z'] = true, ['A' ... 'Z'] = true, ['0' ... '9'] = true, ['-'] = true,
        ['.'] = true,         ['_'] = true,         ['~'] = true,         ['%'] = true,
        ['!'] = true,         ['$'] = true,         ['&'] = true,         ['\''] = true,
        ['('] = true,         [')'] = true,         ['*'] = true,         ['+'] = true,
        [','] = true,         [';'] = true,         ['='] = true,         [':'] = true,
        ['['] = true,         [']'] = true,
    };

    for (size_t i = 0; i < n; i++) {
        if (!allowed[(unsigned char)v[i]]) {
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

        /* a line such as ": x", which llhttp 8 takes (it refuses a name
         * with a byte that is not a tchar): a proxy and a backend that
         * disagree on it are a smuggling vector */
        if (h->name_len == 0) {
            return "a header field with an empty name";
        }
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

/* RFC 9110 section 5.6.2 tchar */
static const bool headcheck_tchar[256] = {
    ['a' ... 'z'] = true, ['A' ... 'Z'] = true, ['0' ... '9'] = true, ['!'] = true,  ['#'] = true,
    ['$'] = true,         ['%'] = true,         ['&'] = true,         ['\''] = true, ['*'] = true,
    ['+'] = true,         ['-'] = true,         ['.'] = true,         ['^'] = true,  ['_'] = true,
    ['`'] = true,         ['|'] = true,         ['~'] = true,
};

const char *
lg_headcheck_target(const char *url, size_t len)
{
    if (len == 0 || url[0] != '/') {
        return "the request target must be an absolute path";
    }
    if (memchr(url, '#', len) != NULL) {
        return "the request target has a fragment (#): a client never sends one";
    }
    return NULL;
}

static size_t
headcheck_skip_ows(const char *v, size_t i, size_t n)
{
    while (i < n && (v[i] == ' ' || v[i] == '\t')) {
        i++;
    }
    return i;
}

int
lg_headcheck_transfer_coding(const char *v, size_t n, const char **why)
{
    unsigned ncodings = 0, nchunked = 0;
    bool last_chunked = false;
    size_t i = 0;

    for (;;) {
        size_t start = headcheck_skip_ows(v, i, n), end = start;

        while (end < n && headcheck_tchar[(unsigned char)v[end]]) {
            end++;
        }
        i = headcheck_skip_ows(v, end, n);
        if (end == start && (i == n || v[i] == ',')) {
            *why = "an empty element in Transfer-Encoding";
            return 400;
        }
        if (end == start || (i < n && v[i] != ',')) {
            *why = "a transfer coding that is not a token, or has parameters";
            return 400;
        }
        ncodings++;
        last_chunked = lg_str_ieq(v + start, end - start, "chunked");
        nchunked += last_chunked;
        if (i == n) {
            break;
        }
        i++; /* the comma */
    }
    if (!last_chunked) {
        *why = "the last transfer coding is not chunked: the body's length is unknown";
        return 400;
    }
    if (nchunked > 1) {
        *why = "chunked more than once in Transfer-Encoding";
        return 400;
    }
    if (ncodings > 1) {
        *why = "transfer codings other than chunked are not supported";
        return 501;
    }
    return 0;
}

bool
lg_headcheck_version_unsupported(const llhttp_t *parser)
{
    /* llhttp 8 reads both digits, then refuses a pair it does not know with
     * this reason; a malformed version has another ("Invalid major version",
     * "Expected dot"...) */
    const char *reason = llhttp_get_error_reason(parser);

    return llhttp_get_errno(parser) == HPE_INVALID_VERSION && reason != NULL
           && strcmp(reason, "Invalid HTTP version") == 0;
}
