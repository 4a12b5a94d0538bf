/*
 * probe.h: `llmgate --probe`, a health check for containers: one blocking
 * GET, exit status 0 on a 2xx answer. Images then need no curl or wget.
 */
#ifndef LG_PROBE_H
#define LG_PROBE_H

#include "base/lg_core.h"

struct lg_config;

/* GETs an http:// URL; LG_OK on a 2xx status. Failures are printed to stderr. */
int lg_probe_url(const char *url, uint64_t timeout_ms);

/*
 * GETs /healthz on the first listen address of conf without TLS (a wildcard
 * address is reached through loopback): the check Dockerfile's HEALTHCHECK
 * runs with the configuration the gateway itself uses.
 */
int lg_probe_config(const struct lg_config *conf, uint64_t timeout_ms);

/* The same with the configuration file at path (names in it are not resolved). */
int lg_probe_config_file(const char *path, uint64_t timeout_ms);

#endif /* LG_PROBE_H */
