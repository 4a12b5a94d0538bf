/*
 * headcheck.h: checks of a request head that llhttp (strict mode) leaves to
 * the server: obs-fold and bare LF line ends (RFC 9112 sections 2.2 and
 * 5.2), and the Host header rules of RFC 9112 section 3.2. A request that
 * fails any of them is refused with 400 and its connection closed, so the
 * gateway never forwards a head a backend could read differently.
 */
#ifndef LG_HEADCHECK_H
#define LG_HEADCHECK_H

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
 * folded onto the previous one or a line ending in a bare LF. Call it on
 * every piece before it is drained. Returns NULL while clean, else a static
 * reason.
 */
const char *lg_headcheck_feed(struct lg_headcheck *h, struct evbuffer *in, size_t len);

/*
 * Checks the parsed fields: exactly one Host (HTTP/1.1) or at most one
 * (HTTP/1.0), with a valid value. Returns NULL when fine, else a static reason.
 */
const char *lg_headcheck_fields(const struct lg_hdrs *hs, unsigned http_minor);

#endif /* LG_HEADCHECK_H */
