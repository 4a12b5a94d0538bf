/*
 * httphdr.h: bounded storage for an HTTP message head (URL, header fields
 * and values) filled piecewise from llhttp callbacks, and the hop-by-hop
 * rules of RFC 9110 section 7.6.1.
 *
 * One arena holds every byte; entries are offsets into it, so the arena can
 * grow without invalidating them. The arena never grows past `max_bytes` and
 * the index past `max_fields`: appends then fail with LG_EINVAL (the caller
 * answers 431 or 502).
 */
#ifndef LG_HTTPHDR_H
#define LG_HTTPHDR_H

#include <llhttp.h>

#include "base/lg_core.h"

struct lg_hdr {
    uint32_t name_off;
    uint32_t name_len;
    uint32_t value_off;
    uint32_t value_len;
    bool hop;           /* not forwarded: hop-by-hop (set by lg_hdrs_mark_hop_by_hop), or a
                           traced request's traceparent and tracestate, which each
                           attempt replaces with its own (serve/trace.c) */
};

struct lg_hdrs {
    char *buf;          /* owned arena */
    uint32_t len;
    uint32_t cap;
    uint32_t max_bytes;
    struct lg_hdr *h;   /* owned index */
    uint32_t n;
    uint32_t cap_h;
    uint32_t max_fields;
    uint32_t url_off;
    uint32_t url_len;
    uint8_t last;       /* which piece the previous callback appended to */
};

void lg_hdrs_init(struct lg_hdrs *hs, uint32_t max_bytes, uint32_t max_fields);
/* Forgets the content, keeps (a small) arena. */
void lg_hdrs_reset(struct lg_hdrs *hs);
/* Releases the arena and index (the idle-connection state costs no memory). */
void lg_hdrs_release(struct lg_hdrs *hs);
/*
 * For the next message on the same connection: forgets the content and
 * takes the new limits, keeping the arena and index when they are small
 * (LG_HDRS_KEEP_BYTES, LG_HDRS_KEEP_FIELDS; else released as by
 * lg_hdrs_release()), so that a keep-alive connection's next head costs no
 * malloc and free.
 */
#define LG_HDRS_KEEP_BYTES  4096
#define LG_HDRS_KEEP_FIELDS 64
void lg_hdrs_recycle(struct lg_hdrs *hs, uint32_t max_bytes, uint32_t max_fields);

int lg_hdrs_on_url(struct lg_hdrs *hs, const char *at, size_t n);
int lg_hdrs_on_field(struct lg_hdrs *hs, const char *at, size_t n);
int lg_hdrs_on_value(struct lg_hdrs *hs, const char *at, size_t n);

static inline const char *
lg_hdrs_name(const struct lg_hdrs *hs, const struct lg_hdr *h)
{
    return hs->buf + h->name_off;
}

static inline const char *
lg_hdrs_value(const struct lg_hdrs *hs, const struct lg_hdr *h)
{
    return hs->buf + h->value_off;
}

/* First header named by the n bytes at `name` (case-insensitive), or NULL. */
const struct lg_hdr *lg_hdrs_find_n(const struct lg_hdrs *hs, const char *name, size_t n);

/* First header named `name` (case-insensitive), or NULL: inline, so that a
 * literal's length is the compiler's constant, not a strlen call per lookup. */
static inline const struct lg_hdr *
lg_hdrs_find(const struct lg_hdrs *hs, const char *name)
{
    return lg_hdrs_find_n(hs, name, strlen(name));
}

/*
 * Marks the hop-by-hop fields: the fixed list (Connection, Keep-Alive,
 * Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade) and every field
 * the Connection header names, but Content-Length: framing is never a
 * connection option, the message's own framing decides it (a response whose
 * only framing was named there would reach the client with none).
 */
void lg_hdrs_mark_hop_by_hop(struct lg_hdrs *hs);

/* Does the comma-separated value of header `h` contain `token` (case-insensitive)? */
bool lg_hdrs_has_token(const struct lg_hdrs *hs, const struct lg_hdr *h, const char *token);

#endif /* LG_HTTPHDR_H */

struct evbuffer;

/*
 * Runs parser over the bytes of `in` without draining them: extent by
 * extent, until it pauses, fails, or has seen every byte. Runs it once on
 * zero bytes when `in` is empty, so a parser resumed after a pause can
 * complete a message that has no body. Stores in *consumed how many bytes of
 * `in` the parser accepted (up to the pause or error point). Returns the
 * llhttp error code (HPE_OK, HPE_PAUSED, or an error).
 */
int lg_http_execute(llhttp_t *parser, struct evbuffer *in, size_t *consumed);

/* A chunk's size line for n bytes ("1a2\r\n") into buf, which holds at least
 * LG_HTTP_CHUNK_HEAD_MAX bytes; returns its length. */
#define LG_HTTP_CHUNK_HEAD_MAX 18
size_t lg_http_chunk_head(char *buf, uint64_t n);

/* A status's reason phrase (one not listed: "Client Error", "Server Error" or
 * "Unknown", by its class). */
const char *lg_http_reason(int status);
