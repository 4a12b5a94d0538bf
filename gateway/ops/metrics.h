/*
 * metrics.h: the Prometheus text exposition (format 0.0.4) of the gateway,
 * served on the admin listener at /metrics. It only reads: counters are
 * recorded by their owners (serve/record.c, fleet/backend.c, serve/proxy.c and
 * attempt.c, ops/reload.c).
 */
#ifndef LG_METRICS_H
#define LG_METRICS_H

struct evbuffer;
struct lg_gateway;

/* Appends the whole exposition to out (any thread). */
void lg_metrics_render(struct lg_gateway *gw, struct evbuffer *out);

#endif /* LG_METRICS_H */
