/*
 * relay.h: the bytes of an exchange, both ways (relay.c). It reports what
 * it finds; the exchange (proxy.h) decides. Worker thread of the request.
 */
#ifndef LG_RELAY_H
#define LG_RELAY_H

#include "base/lg_core.h"

struct evbuffer;
struct lg_client;
struct lg_hdrs;
struct lg_upconn;

/* What lg_relay_read() found. */
enum lg_relay_rc {
    LG_RELAY_MORE = 0, /* all that was there is handled: wait for more */
    LG_RELAY_HEAD,     /* the response head is in, not yet sent to the client */
    LG_RELAY_DONE,     /* the response is complete; its last bytes are queued */
    LG_RELAY_ERROR,    /* the response broke HTTP framing (llhttp's error) */
};

/* A read callback's budget for reads beyond what libevent read (bevio.c). */
struct lg_relay_read {
    size_t budget;
    bool drained; /* a read found the socket empty: no more this callback */
};

/* A response is expected on u (a new attempt): a fresh parser and head. */
void lg_relay_start(struct lg_upconn *u);

/*
 * Writes the request's head (hop-by-hop and the gateway's own headers
 * replaced, X-Forwarded-For appended, the backend's key if it has one) and
 * its body by reference, kept intact for a retry: straight to the socket
 * when nothing is queued there.
 */
void lg_relay_send_request(struct lg_client *c, struct lg_upconn *u);

/*
 * Parses what the upstream sent (in: its input) while u carries c's
 * request: head bytes are consumed and kept in u->hdrs; body bytes move to
 * the client with their SSE events stamped, with backpressure (the
 * upstream stops being read while the client's output is full; it resumes
 * with lg_relay_resume()). Stops at the head, at the end, at an error (its
 * llhttp errno in *err), or when nothing is left to read.
 */
int lg_relay_read(struct lg_client *c, struct lg_upconn *u, struct evbuffer *in,
                  struct lg_relay_read *rd, int *err);

/*
 * Writes the client's response head from the backend's and decides the
 * framing (chunks kept, decoded for HTTP/1.0, or added to a close-delimited
 * body); marks the response started (LG_REQ_F_STARTED).
 */
void lg_relay_write_head(struct lg_client *c, struct lg_upconn *u);

/* Retry-After of a response head, ns (delta seconds; a date counts as 1 s). */
uint64_t lg_relay_retry_after_ns(const struct lg_hdrs *hs);

/*
 * The client's output drained below the low mark: a paused relay reads
 * the upstream again. Returns true when bytes wait in its input already
 * (the caller runs its read path now).
 */
bool lg_relay_resume(struct lg_client *c);

/* The response is complete: a re-framed (chunked) body gets its last chunk. */
void lg_relay_end(struct lg_client *c);

#endif /* LG_RELAY_H */
