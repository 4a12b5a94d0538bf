/*
 * metrics.h: the Prometheus text exposition (format 0.0.4) of the gateway,
 * served on the admin listener at /metrics. It only reads: counters are
 * recorded by their owners (serve/record.c, fleet/backend.c, serve/proxy.c and
 * attempt.c, ops/reload.c).
 */
#ifndef LG_METRICS_H
#define LG_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;
struct lg_gateway;
struct lg_stats_decision;

/* Appends the whole exposition to out (any thread). */
void lg_metrics_render(struct lg_gateway *gw, struct evbuffer *out);

/*
 * The workers' routing decisions summed by (policy, reason) into out (max
 * pairs, counts cumulative); returns the pairs written. *dropped gets the
 * decisions no pair could count (the workers' tables full, or out). Any
 * thread: reads relaxed atomics.
 */
size_t lg_metrics_decisions(const struct lg_gateway *gw, struct lg_stats_decision *out, size_t max,
                            uint64_t *dropped);

#endif /* LG_METRICS_H */
