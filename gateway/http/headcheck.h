/*
 * headcheck.h: checks of a request head that llhttp (strict mode) leaves to
 * the server: obs-fold and bare LF line ends (RFC 9112 sections 2.2 and
 * 5.2), header field names (an empty or non-token name: RFC 9110 section
 * 5.1), the Host header rules of RFC 9112 section 3.2, the request target
 * (origin-form, no fragment: RFC 9112 section 3.2.1), the transfer coding
 * (chunked alone: RFC 9112 section 6.1) and the version. A request that
 * fails any of them is refused (400, 501 or 505) and its connection closed,
 * so the gateway never forwards a head a backend could read differently.
 */
#ifndef LG_HEADCHECK_H
#define LG_HEADCHECK_H

#include <llhttp.h>

#include "base/lg_core.h"

struct evbuffer;
struct lg_hdrs;

/* The raw-head scanner's state, kept across reads; zeroed at each request. */
struct lg_headcheck {
    char prev;     /* the byte before */
    bool line_end; /* the byte before ended a line */
};

/*
 * Scans the next len bytes of the raw head (the request line to the blank
 * line, in as many pieces as it arrived) at the start of `in`, for a line
 * folded onto the previous one, a line ending in a bare LF, or a field line
 * that starts with its colon (an empty name). Call it on
 * every piece before it is drained. Returns NULL while clean, else a static
 * reason.
 */
const char *lg_headcheck_feed(struct lg_headcheck *h, struct evbuffer *in, size_t len);

/*
 * Checks the parsed fields: no empty name (llhttp's strict mode refuses one
 * with a byte that is not a tchar, but takes an empty one); exactly one Host
 * (HTTP/1.1) or at most one (HTTP/1.0), with a valid value. Returns NULL
 * when fine, else a static reason.
 */
const char *lg_headcheck_fields(const struct lg_hdrs *hs, unsigned http_minor);

/* Checks the request target (len bytes, need not be terminated): an absolute
 * path, without a fragment. Returns NULL when fine, else a static reason. */
const char *lg_headcheck_target(const char *url, size_t len);

/*
 * Checks a request's Transfer-Encoding value (len bytes): 0 when it is
 * exactly "chunked" (any case, optional whitespace); 400 when the list is
 * malformed (an empty or non-token element, parameters), does not end in
 * chunked, or has chunked twice; 501 when chunked follows other codings
 * (which the gateway does not decode). *why: a static reason when not 0.
 */
int lg_headcheck_transfer_coding(const char *value, size_t len, const char **why);

/*
 * Did llhttp refuse the request line for a well-formed version it does not
 * speak ("HTTP/1.2", "HTTP/3.0": 505), rather than a malformed one (400)?
 * For a parser stopped with HPE_INVALID_VERSION.
 */
bool lg_headcheck_version_unsupported(const llhttp_t *parser);

#endif /* LG_HEADCHECK_H */
