/*
 * reload.h: configuration reloads and fleet swaps.
 *
 * Everything that replaces the fleet in force goes through here, on the
 * control (main) thread: a reload of the configuration file (SIGHUP, or the
 * admin API through lg_reload_request()) and a change of DNS-discovered
 * addresses (discovery.c). A swap builds a new fleet from the new
 * configuration, reusing the backends it keeps (live state, pools), publishes
 * it under gw->fleet_lock and tells every worker; requests in flight keep the
 * fleet they started with, so a removed backend finishes its running
 * requests and then closes its connections (it is "retired").
 *
 * A file that fails validation is refused with every error in the log, and
 * so is one that changes what a running process cannot: the listen
 * addresses (and whether each has TLS), the worker count, the admin listen
 * address, and turning the access log on or off. Everything else applies:
 * backends, routing, timeouts and limits (for new requests), log level,
 * access-log path, flush and buffer, health settings, discovery.
 */
#ifndef LG_RELOAD_H
#define LG_RELOAD_H

#include "base/lg_core.h"

struct event_base;
struct lg_gateway;
struct lg_reload;

/* The outcome of a reload, for the admin API. */
struct lg_reload_result {
    bool ok;
    uint64_t generation; /* configuration generation in force afterwards */
    size_t nbackends;    /* backends of the fleet in force afterwards */
    char *errors;        /* owned: one message per line; NULL when ok */
};

/* Counters, for metrics and the admin API (any thread). */
struct lg_reload_stats {
    uint64_t reloads_ok;          /* reloads of the file applied */
    uint64_t reloads_failed;      /* reloads refused */
    uint64_t fleet_swaps;         /* fleets published (reloads and discovery) */
    uint64_t generation;          /* of the configuration in force; 1 at start */
    uint64_t last_reload_wall_ns; /* last reload attempt, 0 = none */
    bool last_ok;
};

/*
 * Sets up reloading on the control base for gw (gw->conf loaded): starts
 * discovery, waits (at most a few DNS timeouts) for the first answers, and
 * builds the first fleet into gw->fleet. Call before the base dispatches.
 */
int lg_reload_init(struct lg_gateway *gw, struct event_base *base);

/* Asks for a reload of gw->config_path on the control thread (returns at
 * once; the outcome is logged). `why` names the trigger in the log. */
void lg_reload_schedule(struct lg_gateway *gw, const char *why);

/*
 * From any other thread: asks for a reload and waits (up to timeout_ms) for
 * its outcome. Returns LG_OK with *res filled (res->ok says whether it was
 * applied), or LG_ETIMEDOUT / LG_EBUSY (shutting down). Free res with
 * lg_reload_result_free().
 */
int lg_reload_request(struct lg_gateway *gw, uint64_t timeout_ms, struct lg_reload_result *res);
void lg_reload_result_free(struct lg_reload_result *res);

void lg_reload_read_stats(const struct lg_gateway *gw, struct lg_reload_stats *out);

/* Shutdown: refuses further reloads, wakes waiters, stops discovery. */
void lg_reload_stop(struct lg_gateway *gw);

/* Frees everything (after the control base stopped dispatching). */
void lg_reload_free(struct lg_gateway *gw);

#endif /* LG_RELOAD_H */
