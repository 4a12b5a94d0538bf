/*
 * connlimit.h: open client connections per source address, for
 * limits.max_connections_per_ip.
 *
 * One table per process, shared by the workers (connections from one address
 * land on any worker: SO_REUSEPORT hashes the whole 4-tuple). Every accepted
 * connection is counted, whatever the limit, so that a reload may change the
 * limit without the counts going wrong.
 */
#ifndef LG_CONNLIMIT_H
#define LG_CONNLIMIT_H

#include <sys/socket.h>

#include "base/lg_core.h"

struct lg_connlimit;

struct lg_connlimit *lg_connlimit_new(void);
/* Frees the table (after the workers stopped). NULL is fine. */
void lg_connlimit_free(struct lg_connlimit *t);

/*
 * Counts one more connection from sa's address unless `max` (> 0) are open
 * already. Returns true when counted (the caller must release it), false when
 * refused. Addresses other than IPv4/IPv6 and a NULL table are never limited
 * (and counted nowhere). Any thread.
 */
bool lg_connlimit_acquire(struct lg_connlimit *t, const struct sockaddr *sa, uint32_t max);

/* Forgets one connection counted by lg_connlimit_acquire(). Any thread. */
void lg_connlimit_release(struct lg_connlimit *t, const struct sockaddr *sa);

/* Open connections from sa's address (tests, metrics). */
uint32_t lg_connlimit_count(struct lg_connlimit *t, const struct sockaddr *sa);

#endif /* LG_CONNLIMIT_H */
