/*
 * priors.h: each model's prior (priors.c), the medians of its backends' own
 * estimates, which a backend's estimates lean back to as their samples age.
 */
#ifndef LG_PRIORS_H
#define LG_PRIORS_H

#include "base/lg_core.h"

struct lg_health_fleet;

/* Recomputes and publishes the prior of every model of the fleet as of now. */
void lg_priors_update(const struct lg_health_fleet *f, uint64_t now);

#endif /* LG_PRIORS_H */
