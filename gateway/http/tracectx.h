/*
 * tracectx.h: W3C Trace Context (https://www.w3.org/TR/trace-context/):
 * the `traceparent` header read strictly and written, `tracestate` checked.
 */
#ifndef LG_TRACECTX_H
#define LG_TRACECTX_H

#include "base/lg_core.h"

/* The trace-flags bit a sampled trace carries. */
#define LG_TRACECTX_SAMPLED 0x01u

/* Longest tracestate kept (the specification's least every vendor must pass on). */
#define LG_TRACESTATE_MAX 512
/* Most list-members a tracestate may hold. */
#define LG_TRACESTATE_MEMBERS 32

/* `traceparent` as written: "00-" 32 hex "-" 16 hex "-" 2 hex. */
#define LG_TRACEPARENT_LEN 55

struct lg_tracectx {
    uint8_t trace_id[16]; /* never all zero */
    uint64_t parent_id;   /* the caller's span; never 0 */
    uint8_t flags;        /* trace-flags (LG_TRACECTX_SAMPLED) */
};

/*
 * Reads a `traceparent` value of n bytes (no NUL needed): version 00 is
 * exactly 55 bytes; a later version (not ff) may be longer, with a '-'
 * after the 55th byte, and is read as 00 is. Lowercase hex only, no
 * surrounding spaces, trace id and parent id not all zero.
 * Returns LG_OK, or LG_EINVAL (out untouched).
 */
int lg_tracectx_parse(const char *s, size_t n, struct lg_tracectx *out);

/*
 * Whether a `tracestate` value (the header's lines joined by ',') is
 * well formed: at most LG_TRACESTATE_MEMBERS list-members of key=value
 * separated by commas with optional spaces and tabs (empty members
 * allowed), keys as the specification's simple-key or tenant@system
 * multi-tenant key, each key once, values of 1..256 printable bytes
 * without ',' or '=' and not ending in a space; at most LG_TRACESTATE_MAX bytes.
 */
bool lg_tracestate_valid(const char *s, size_t n);

/* Writes `traceparent` (version 00) into out: LG_TRACEPARENT_LEN bytes, no NUL. */
void lg_tracectx_format(char *out, const uint8_t trace_id[16], uint64_t span_id, uint8_t flags);

/* Writes n bytes as 2n lowercase hex digits (no NUL). */
void lg_tracectx_hex(char *out, const uint8_t *p, size_t n);

#endif /* LG_TRACECTX_H */
