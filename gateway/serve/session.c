/*
 * session.c: a request's session key from its headers (session.h).
 *
 * Owns nothing: reads the configuration and the request's head.
 */
#include "serve/session.h"

#include "base/config_types.h"
#include "http/httphdr.h"

const char *const lg_session_default_headers[] = {
    "x-session-affinity",
    "session-id",
    "x-session-id",
    NULL,
};

/* The value of header `name` when present and not empty, else NULL. */
static const char *
session_value(const struct lg_hdrs *hdrs, const char *name, size_t *len)
{
    const struct lg_hdr *h = lg_hdrs_find(hdrs, name);

    if (h == NULL || h->value_len == 0) {
        return NULL;
    }
    *len = h->value_len;
    return lg_hdrs_value(hdrs, h);
}

const char *
lg_session_key(const struct lg_routing_conf *rc, const struct lg_hdrs *hdrs, size_t *len,
               const char **header)
{
    const char *const *names = (const char *const *)rc->session_headers;
    const char *v;

    if (rc->session_header != NULL
        && (v = session_value(hdrs, rc->session_header, len)) != NULL) {
        if (header != NULL) {
            *header = rc->session_header;
        }
        return v;
    }
    if (names == NULL && rc->session_header == NULL) {
        names = lg_session_default_headers;
    }
    for (size_t i = 0; names != NULL && names[i] != NULL; i++) {
        if ((v = session_value(hdrs, names[i], len)) != NULL) {
            if (header != NULL) {
                *header = names[i];
            }
            return v;
        }
    }
    *len = 0;
    return NULL;
}

uint64_t
lg_session_hash(const struct lg_routing_conf *rc, const struct lg_hdrs *hdrs)
{
    size_t n;
    const char *v = lg_session_key(rc, hdrs, &n, NULL);

    return v != NULL ? lg_mix64(lg_hash64(v, n, LG_HASH64_INIT)) | 1 : 0;
}
