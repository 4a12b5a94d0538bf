/*
 * listener.h: listening sockets and accepting client connections.
 */
#ifndef LG_LISTENER_H
#define LG_LISTENER_H

#include <sys/socket.h>

#include "base/lg_core.h"

struct lg_gateway;
struct lg_worker;

/*
 * Opens, for every listen address of the configuration, one SO_REUSEPORT
 * socket per worker, all bound to the same port (a port 0 in the config is
 * resolved by the first bind and reused by the others). Fills gw->listen_fds
 * and stores the bound address of each listen entry in `bound` (nlisten).
 */
int lg_listener_open(struct lg_gateway *gw, struct sockaddr_storage *bound);

/* Wraps worker w's sockets in evconnlisteners on its event base. */
int lg_listener_attach(struct lg_worker *w);

/* Stops accepting on w (drain): closes its listening sockets. */
void lg_listener_close(struct lg_worker *w);

#endif /* LG_LISTENER_H */
