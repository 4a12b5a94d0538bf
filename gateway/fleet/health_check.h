/*
 * health_check.h: active health checks of one backend (health_check.c): GET
 * health_path every health.interval; rise successes in a row mark it up,
 * fall failures mark it down.
 */
#ifndef LG_HEALTH_CHECK_H
#define LG_HEALTH_CHECK_H

#include "fleet/health_types.h"

/* Arms t's checks, the first at a point of the interval spread by the
 * backend's id (a big fleet is not probed in one burst). */
void lg_health_check_start(struct lg_health_target *t);

/* Frees what lg_health_check_start() made (its requests go with t->conn). */
void lg_health_check_stop(struct lg_health_target *t);

#endif /* LG_HEALTH_CHECK_H */
