/*
 * session.h: a request's session, as agent clients name it in a header
 * (`x-session-affinity`, `session-id`, `x-session-id`...): the key
 * session_affinity routes on (keeping a session's turns on the replica that
 * holds its prefix), and what a per-tenant module can read it from.
 */
#ifndef LG_SESSION_H
#define LG_SESSION_H

#include "base/lg_core.h"

struct lg_hdrs;
struct lg_routing_conf;

/* The headers read when the configuration names none. */
extern const char *const lg_session_default_headers[];

/*
 * The request's session key: the value of the first header present (and
 * not empty) of routing.session_header, then routing.session_headers in
 * their order; with neither set, of lg_session_default_headers. Returns a
 * pointer into hdrs (not NUL-terminated) and its length in *len, or NULL
 * when the request names no session. *header (when not NULL) gets the
 * header's configured name.
 */
const char *lg_session_key(const struct lg_routing_conf *rc, const struct lg_hdrs *hdrs,
                           size_t *len, const char **header);

/* The key's hash as the router takes it (lg_route_req.session_hash): 0 when none. */
uint64_t lg_session_hash(const struct lg_routing_conf *rc, const struct lg_hdrs *hdrs);

#endif /* LG_SESSION_H */
