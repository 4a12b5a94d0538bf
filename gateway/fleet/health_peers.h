/*
 * health_peers.h: what the other gateways in front of the fleet (config
 * "peers") have on each backend, fetched by the health thread
 * (health_peers.c) and published into the backends for the engine model.
 */
#ifndef LG_HEALTH_PEERS_H
#define LG_HEALTH_PEERS_H

#include "fleet/health_types.h"

/* Connections to the configured peers, each asked at once; false if none. */
bool lg_health_peers_start(struct lg_health *h);

/* Frees the peers' connections, timers and last answers (requests out are cancelled). */
void lg_health_peers_stop(struct lg_health *h);

#endif /* LG_HEALTH_PEERS_H */
