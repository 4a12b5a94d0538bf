/*
 * proxy.h: a request's path through the gateway, top to bottom (proxy.c):
 * from the client's read request to a backend and back, with the
 * decisions on the way (route, wait, retry, relay, end).
 */
#ifndef LG_PROXY_H
#define LG_PROXY_H

#include "base/lg_core.h"

struct lg_client;
struct lg_client_ops;

/*
 * What a client connection calls on its request's behalf: dispatch when it
 * is read, abort, release, drained (client.h). The listener gives it to
 * every client it accepts.
 */
extern const struct lg_client_ops lg_proxy_client_ops;

#endif /* LG_PROXY_H */
