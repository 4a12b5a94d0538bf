/*
 * lg_test_fleet.h: a fleet from a config text, for unit tests of what lives
 * on backends (live state, routing, peers). Returns 0 (LG_CHECK's failure: 1).
 */
#ifndef LG_TEST_FLEET_H
#define LG_TEST_FLEET_H

#include <string.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "lg_test.h"
#include "route/router.h"

static inline int
lg_test_fleet_load(const char *text, struct lg_config **c, struct lg_fleet **f)
{
    struct lg_config_errors errs;

    memset(&errs, 0, sizeof(errs));
    LG_CHECK(lg_config_load_buffer(text, strlen(text), "t.json", c, &errs) == LG_OK);
    lg_config_errors_free(&errs);
    LG_CHECK(lg_router_fleet_new(*c, 1, NULL, f) == LG_OK);
    return 0;
}

static inline int
lg_test_fleet_free(struct lg_config *c, struct lg_fleet *f)
{
    lg_fleet_unref(f);
    lg_config_unref(c);
    return 0;
}

#endif /* LG_TEST_FLEET_H */
