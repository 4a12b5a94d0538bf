/*
 * gateway.h: what the gateway's workers run (gateway.c).
 */
#ifndef LG_GATEWAY_H
#define LG_GATEWAY_H

#include "serve/worker.h"

/*
 * The workers' duties to the serving modules: set as gw->ops before
 * lg_worker_init() (main.c; tests that run a worker do the same).
 */
extern const struct lg_worker_ops lg_gateway_worker_ops;

#endif /* LG_GATEWAY_H */
