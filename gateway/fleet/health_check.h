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

/*
 * Who hears that a check marked a backend up (any fleet's checker thread):
 * the process has one listener at most (serve/admission.c, waking the
 * requests held for a replica). fn runs on a checker thread, under a lock
 * that lg_health_check_set_up_hook() also takes: once that returned with
 * NULL, fn is not running and will not run. fn must be quick.
 */
typedef void (*lg_health_up_fn)(void *arg, const struct lg_backend *b);
void lg_health_check_set_up_hook(lg_health_up_fn fn, void *arg);

#endif /* LG_HEALTH_CHECK_H */
