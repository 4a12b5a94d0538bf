/*
 * endpoints.h: what the gateway answers itself (endpoints.c). Each writes
 * a 200 (or fails the request) and ends the request.
 */
#ifndef LG_ENDPOINTS_H
#define LG_ENDPOINTS_H

#include "base/lg_core.h"

struct lg_client;

/* GET /v1/models: every model of the worker's fleet, sorted by name. */
void lg_endpoints_models(struct lg_client *c);

/* GET /v1/models/{id}: one model, or 404. */
void lg_endpoints_model(struct lg_client *c, const char *id);

/* GET /healthz: 200 "ok", or 503 "draining". */
void lg_endpoints_healthz(struct lg_client *c);

#endif /* LG_ENDPOINTS_H */
