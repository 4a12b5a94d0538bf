/*
 * proxy.h: the exchange between a request and a backend: routing, sending,
 * reading the response head, retrying before the first byte, relaying the
 * body with backpressure, and timing it.
 */
#ifndef LG_PROXY_H
#define LG_PROXY_H

#include "base/lg_core.h"

struct lg_client;
struct lg_worker;

/* The request is read and inspected: route it and send it to a backend. */
void lg_proxy_start(struct lg_client *c);

/* The client's output fell below the low watermark: resume the upstream. */
void lg_proxy_on_client_drained(struct lg_client *c);

/*
 * Ends the exchange at once: the upstream connection (if any) is closed so
 * the engine stops generating, the backend's in-flight count is released.
 * Safe to call when nothing is attached.
 */
void lg_proxy_abort(struct lg_client *c, const char *why);

/* A request that waited in the admission queue may try for a backend now. */
void lg_proxy_admitted(struct lg_client *c);

/* Frees what the request holds of the proxy (timer, fleet); end of request. */
void lg_proxy_release(struct lg_client *c);

#endif /* LG_PROXY_H */
