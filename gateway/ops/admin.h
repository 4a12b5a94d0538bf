/*
 * admin.h: the admin listener, on a thread and event base of its own.
 *
 * Off unless "admin" is configured. It serves the admin API (JSON, under
 * /admin/), Prometheus metrics (/metrics) and the status page (/), and
 * samples the status page's history on its timer (history.h), so
 * neither a slow scraper nor a reload waiting on the control thread ever
 * touches the workers' loops. With admin.token set, /admin/ and /metrics
 * require "Authorization: Bearer TOKEN".
 */
#ifndef LG_ADMIN_H
#define LG_ADMIN_H

#include <sys/socket.h>

#include "base/lg_core.h"

struct lg_gateway;
struct lg_admin;

/*
 * Binds conf->admin.listen and starts the thread; the bound address (port 0
 * picks one) is stored in *bound. *out stays NULL when admin is off.
 */
int lg_admin_start(struct lg_gateway *gw, struct sockaddr_storage *bound, struct lg_admin **out);

/* Stops the thread and frees everything (NULL is fine). */
void lg_admin_stop(struct lg_admin *a);

#endif /* LG_ADMIN_H */
