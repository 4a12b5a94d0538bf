/*
 * trace.h: a request's trace (W3C Trace Context in, OTLP spans out):
 * the context it continues or starts, the traceparent each attempt sends
 * on with a span id of its own, and the spans of the request and its
 * phases (queue, pick, each attempt), handed to the exporter (base/otlp.h).
 * Off (the gateway has no exporter), a request has no trace and none of
 * these is called but lg_trace_begin().
 */
#ifndef LG_TRACE_H
#define LG_TRACE_H

#include "serve/client_types.h"

struct lg_trace;

/* Starts the request's trace when tracing is on: the inbound traceparent
 * continued (its sampled flag followed), or a trace of its own sampled by
 * tracing.sample_ratio (a malformed context is replaced by such a trace).
 * Leaves req->tries.trace NULL when off, or when a trace started here is
 * not sampled and the client sent no context to replace. */
void lg_trace_begin(struct lg_client *c);

/* The router's pick for attempt a (started at t0, monotonic ns): a span. */
void lg_trace_pick(struct lg_client *c, const struct lg_attempt *a, int rc, uint64_t t0);

/* The request waits in the admission queue from now; and is out of it. */
void lg_trace_held(struct lg_client *c);
void lg_trace_admitted(struct lg_client *c);

/* Attempt a is launched: its span id. */
void lg_trace_launch(struct lg_client *c, struct lg_attempt *a);

/* Attempt a ended (lg_attempt_end): its span. */
void lg_trace_attempt_end(struct lg_client *c, const struct lg_attempt *a);

/* The request ended, and its attempts (its release): its span, and a wait
 * never admitted. */
void lg_trace_request_end(struct lg_worker *w, const struct lg_request *req);

/* Frees the request's trace (or keeps it for the worker's next). */
void lg_trace_release(struct lg_worker *w, struct lg_request *req);

/* The headers attempt a sends on ("traceparent: ...\r\n", then the
 * tracestate's if any) into buf; their bytes (0 when they do not fit). */
size_t lg_trace_headers(const struct lg_request *req, const struct lg_attempt *a, char *buf,
                        size_t n);

#endif /* LG_TRACE_H */
