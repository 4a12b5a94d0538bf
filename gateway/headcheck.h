/*
 * headcheck.h: checks of a request head that llhttp (strict mode) leaves to
 * the server: obs-fold and bare LF line ends (RFC 9112 sections 2.2 and
 * 5.2), and the Host header rules of RFC 9112 section 3.2. A request that
 * fails any of them is refused with 400 and its connection closed, so the
 * gateway never forwards a head a backend could read differently.
 */
#ifndef LG_HEADCHECK_H
#define LG_HEADCHECK_H

#include "lg_core.h"

struct evbuffer;
struct lg_hdrs;

/*
 * Scans the first head_len bytes of `in` (the raw head, request line to the
 * blank line) for a line folded onto the previous one or a line ending in a
 * bare LF. Returns NULL when clean, else a static reason.
 */
const char *lg_headcheck_raw(struct evbuffer *in, size_t head_len);

/*
 * Checks the parsed fields: exactly one Host (HTTP/1.1) or at most one
 * (HTTP/1.0), with a valid value. Returns NULL when fine, else a static reason.
 */
const char *lg_headcheck_fields(const struct lg_hdrs *hs, unsigned http_minor);

#endif /* LG_HEADCHECK_H */
