/*
 * record.h: what a request leaves behind when it ends (record.c).
 */
#ifndef LG_RECORD_H
#define LG_RECORD_H

#include "base/lg_core.h"

struct lg_request;
struct lg_worker;

/*
 * Records a request that ended, once (the client's exit, on its worker's
 * thread): the worker's request and byte counters, the metrics /metrics
 * shows (by route and status, the routing decision, the backend's
 * latencies and tokens) and the access-log line (when the log is on).
 * client_addr: the client's address as text.
 */
void lg_record_request(struct lg_worker *w, const struct lg_request *req, const char *client_addr);

#endif /* LG_RECORD_H */
