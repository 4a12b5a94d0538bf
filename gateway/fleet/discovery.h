/*
 * discovery.h: backends discovered through DNS.
 *
 * A backend entry with "discover": {"dns", "port", "interval"} is a
 * template. Its name is resolved for A and AAAA records on the control event
 * base (main.c's), on its interval, and expands into one backend per address,
 * named NAME@ADDR:PORT, with the template's other keys. Whenever a set of
 * addresses changes, the owner's callback runs and rebuilds the fleet the
 * same way a reload does (reload.c); backends whose address went away drain.
 *
 * A failed lookup (timeout, SERVFAIL, truncated answer) keeps the last
 * addresses; a definite answer with none (NXDOMAIN, no records) empties the
 * set, and the template's models then answer 503 until an address returns.
 */
#ifndef LG_DISCOVERY_H
#define LG_DISCOVERY_H

#include <sys/socket.h>

#include "base/lg_core.h"

struct event_base;
struct lg_config;
struct lg_config_errors;
struct lg_discovery;

/* The addresses of one (dns, port), for lg_discovery_expand_with(). */
struct lg_discovery_set {
    const char *dns;
    uint32_t port;
    const struct sockaddr_storage *addrs; /* sorted, ports set */
    size_t n;
};

/* Called on the control base when some set of addresses changed. */
typedef void (*lg_discovery_changed_fn)(void *arg);

/* Creates the resolver on `base` (nothing is resolved until configured). */
int lg_discovery_new(struct event_base *base, lg_discovery_changed_fn changed, void *arg,
                     struct lg_discovery **out);

/*
 * Follows conf's templates: a (dns, port) already followed keeps its
 * addresses; new ones start resolving at once. Targets that conf no longer
 * names stay until lg_discovery_prune(), so a refused reload loses nothing.
 * A changed discovery.nameserver or timeout replaces the resolver.
 */
int lg_discovery_configure(struct lg_discovery *d, const struct lg_config *conf);

/* Has every target had a first answer (or failure)? */
bool lg_discovery_answered(const struct lg_discovery *d);

/* Forgets the targets conf does not name. */
void lg_discovery_prune(struct lg_discovery *d, const struct lg_config *conf);

/*
 * Runs the base until every target has had a first answer (or failure), or
 * timeout_ms passed: at start and on reload, so a fleet is not built from
 * names not yet resolved. Must run on the base's thread, outside callbacks.
 */
void lg_discovery_wait(struct lg_discovery *d, uint64_t timeout_ms);

/*
 * Builds the configuration in force: base with one backend per address of
 * each template, after the template in the file's order. Returns base with a
 * new reference when it has no templates. Errors (none expected: base was
 * validated) are logged.
 */
int lg_discovery_expand(const struct lg_discovery *d, struct lg_config *base,
                        struct lg_config **out);

/* The same from explicit sets (tests, and the core of lg_discovery_expand). */
int lg_discovery_expand_with(struct lg_config *base, const struct lg_discovery_set *sets,
                             size_t nsets, struct lg_config **out, struct lg_config_errors *errs);

/*
 * Stops every lookup and timer and frees everything; runs the base once
 * (without blocking) for evdns's deferred callbacks, so call it after the
 * base stopped dispatching, and never dispatch it again.
 */
void lg_discovery_free(struct lg_discovery *d);

#endif /* LG_DISCOVERY_H */
