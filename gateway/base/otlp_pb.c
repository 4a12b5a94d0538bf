/*
 * otlp_pb.c: spans as OTLP/HTTP protobuf (otlp.h), OTLP's default encoding:
 * an ExportTraceServiceRequest in the protobuf wire format, written by hand
 * (varints, length-delimited fields, fixed64 times and doubles). Sizes are
 * counted first (a message's length goes before it), then the bytes are
 * written forward into one allocation of exactly that size.
 *
 * Field numbers from github.com/open-telemetry/opentelemetry-proto at commit
 * ac2c4b5d1f3a6079de62f9afec860158ecc8af09:
 *   opentelemetry/proto/collector/trace/v1/trace_service.proto
 *     ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
 *   opentelemetry/proto/trace/v1/trace.proto
 *     ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
 *     ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; }
 *     Span { bytes trace_id = 1; bytes span_id = 2; string trace_state = 3;
 *            bytes parent_span_id = 4; string name = 5; SpanKind kind = 6;
 *            fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
 *            repeated KeyValue attributes = 9; repeated Event events = 11;
 *            Status status = 15; }
 *     Span.Event { fixed64 time_unix_nano = 1; string name = 2; }
 *     Status { string message = 2; StatusCode code = 3; }
 *   opentelemetry/proto/resource/v1/resource.proto
 *     Resource { repeated KeyValue attributes = 1; }
 *   opentelemetry/proto/common/v1/common.proto
 *     InstrumentationScope { string name = 1; string version = 2; }
 *     KeyValue { string key = 1; AnyValue value = 2; }
 *     AnyValue { oneof value { string string_value = 1; bool bool_value = 2;
 *                int64 int_value = 3; double double_value = 4; } }
 * Fields at their proto3 default (a root's parent, an empty tracestate, an
 * UNSET status without message) are left out, as protobuf's encoders do.
 * Owns: the body it returns (the caller frees it).
 */
#include <stdlib.h>
#include <string.h>

#include "base/otlp.h"
#include "lg_version.h"

/* A field's tag byte: (number << 3) | wire type (0 varint, 1 fixed64, 2 bytes). */
#define PB_TAG(field, wt) ((uint8_t)(((field) << 3) | (wt)))
#define PB_VARINT  0
#define PB_FIXED64 1
#define PB_BYTES   2

/* A varint's bytes: 7 bits each (1 for 0..127, 10 for a negative int64). */
static inline size_t
pb_vlen(uint64_t v)
{
    size_t n = 3;

    if (__builtin_expect(v < 0x80, 1)) {
        return 1;
    }
    if (v < 0x4000) {
        return 2;
    }
    for (v >>= 21; v != 0; v >>= 7) {
        n++;
    }
    return n;
}

static inline uint8_t *
pb_varint(uint8_t *p, uint64_t v)
{
    if (__builtin_expect(v < 0x80, 1)) {
        *p = (uint8_t)v;
        return p + 1;
    }
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* fixed64: little-endian */
static inline uint8_t *
pb_fixed64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
    return p + 8;
}

/* A length-delimited field of n bytes: its whole size (tag, length, bytes). */
static inline size_t
pb_field_len(size_t n)
{
    return 1 + pb_vlen(n) + n;
}

static inline uint8_t *
pb_bytes(uint8_t *p, uint8_t tag, const void *s, size_t n)
{
    *p++ = tag;
    p = pb_varint(p, n);
    memcpy(p, s, n);
    return p + n;
}

/* A protobuf string is UTF-8 (strict decoders refuse a message with a string
 * that is not): each byte where no character starts becomes '?' (the length
 * kept: sizes were counted before). */
static void
pb_utf8_fix(uint8_t *p, size_t n)
{
    size_t i = 0;

    while (i < n) {
        size_t len = lg_otlp_utf8_len(p + i, n - i);

        if (len == 0) {
            p[i++] = '?';
        } else {
            i += len;
        }
    }
}

/* A string field from a span's text: its bytes, made valid UTF-8. */
static inline uint8_t *
pb_str(uint8_t *p, uint8_t tag, const char *s, size_t n)
{
    uint8_t *q = pb_bytes(p, tag, s, n);
    uint64_t high = 0;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint64_t w;

        memcpy(&w, s + i, 8);
        high |= w;
    }
    for (; i < n; i++) {
        high |= (uint8_t)s[i];
    }
    if (high & 0x8080808080808080ull) {
        pb_utf8_fix(q - n, n);
    }
    return q;
}

/* A span id as OTLP's 8 bytes: the traceparent's hex order, most significant first. */
static inline uint8_t *
pb_span_id(uint8_t *p, uint8_t tag, uint64_t id)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    id = __builtin_bswap64(id);
#endif
    p[0] = tag;
    p[1] = 8;
    memcpy(p + 2, &id, 8);
    return p + 10;
}

/* AnyValue's size */
static inline size_t
pb_value_len(const struct lg_span_attr *a)
{
    switch (a->type) {
    case LG_SPAN_A_STR:
        return pb_field_len(a->len);
    case LG_SPAN_A_INT:
        return 1 + pb_vlen((uint64_t)a->v.i); /* a negative int64 takes 10 bytes */
    case LG_SPAN_A_DOUBLE:
        return 1 + 8;
    default:
        return 1 + 1;
    }
}

/* KeyValue's size */
static inline size_t
pb_attr_len(const struct lg_span_attr *a, size_t vlen)
{
    return pb_field_len(a->key_len) + pb_field_len(vlen);
}

static inline size_t
pb_event_len(const struct lg_span_event *e)
{
    return 1 + 8 + pb_field_len(e->name_len);
}

static inline size_t
pb_status_len(const struct lg_span *s)
{
    return (s->msg_len > 0 ? pb_field_len(s->msg_len) : 0)
           + (s->status != 0 ? 1 + pb_vlen(s->status) : 0);
}

/* Span's size (without its own tag and length) */
static size_t
pb_span_len(const struct lg_span *s)
{
    size_t n = 18 + 10; /* trace_id, span_id */

    if (s->state_len > 0) {
        n += pb_field_len(s->state_len);
    }
    if (s->parent_id != 0) {
        n += 10;
    }
    n += pb_field_len(s->name_len);
    if (s->kind != 0) {
        n += 1 + pb_vlen(s->kind);
    }
    n += 2 * (1 + 8); /* start, end */
    for (unsigned i = 0; i < s->nattrs; i++) {
        n += pb_field_len(pb_attr_len(&s->attrs[i], pb_value_len(&s->attrs[i])));
    }
    for (unsigned i = 0; i < s->nevents; i++) {
        n += pb_field_len(pb_event_len(&s->events[i]));
    }
    if (s->status != 0 || s->msg_len > 0) {
        n += pb_field_len(pb_status_len(s));
    }
    return n;
}

static uint8_t *
pb_attr(uint8_t *p, const struct lg_span *s, const struct lg_span_attr *a)
{
    size_t vlen = pb_value_len(a);

    *p++ = PB_TAG(9, PB_BYTES); /* Span.attributes */
    p = pb_varint(p, pb_attr_len(a, vlen));
    p = pb_bytes(p, PB_TAG(1, PB_BYTES), a->key, a->key_len); /* KeyValue.key */
    *p++ = PB_TAG(2, PB_BYTES);                                /* KeyValue.value */
    p = pb_varint(p, vlen);
    switch (a->type) {
    case LG_SPAN_A_STR:
        return pb_str(p, PB_TAG(1, PB_BYTES), s->text + a->off, a->len);
    case LG_SPAN_A_INT:
        *p++ = PB_TAG(3, PB_VARINT);
        return pb_varint(p, (uint64_t)a->v.i);
    case LG_SPAN_A_DOUBLE: {
        uint64_t bits;

        memcpy(&bits, &a->v.d, 8);
        *p++ = PB_TAG(4, PB_FIXED64);
        return pb_fixed64(p, bits);
    }
    default:
        *p++ = PB_TAG(2, PB_VARINT);
        *p++ = a->v.i != 0;
        return p;
    }
}

static uint8_t *
pb_span(uint8_t *p, const struct lg_span *s)
{
    p = pb_bytes(p, PB_TAG(1, PB_BYTES), s->trace_id, 16);
    p = pb_span_id(p, PB_TAG(2, PB_BYTES), s->span_id);
    if (s->state_len > 0) {
        p = pb_str(p, PB_TAG(3, PB_BYTES), s->text + s->state_off, s->state_len);
    }
    if (s->parent_id != 0) {
        p = pb_span_id(p, PB_TAG(4, PB_BYTES), s->parent_id);
    }
    p = pb_str(p, PB_TAG(5, PB_BYTES), s->text + s->name_off, s->name_len);
    if (s->kind != 0) {
        *p++ = PB_TAG(6, PB_VARINT);
        p = pb_varint(p, s->kind);
    }
    *p++ = PB_TAG(7, PB_FIXED64);
    p = pb_fixed64(p, s->start_unix_ns);
    *p++ = PB_TAG(8, PB_FIXED64);
    p = pb_fixed64(p, s->end_unix_ns);
    for (unsigned i = 0; i < s->nattrs; i++) {
        p = pb_attr(p, s, &s->attrs[i]);
    }
    for (unsigned i = 0; i < s->nevents; i++) {
        const struct lg_span_event *e = &s->events[i];

        *p++ = PB_TAG(11, PB_BYTES); /* Span.events */
        p = pb_varint(p, pb_event_len(e));
        *p++ = PB_TAG(1, PB_FIXED64); /* Event.time_unix_nano */
        p = pb_fixed64(p, e->t_unix_ns);
        p = pb_bytes(p, PB_TAG(2, PB_BYTES), e->name, e->name_len); /* Event.name */
    }
    if (s->status != 0 || s->msg_len > 0) {
        *p++ = PB_TAG(15, PB_BYTES); /* Span.status */
        p = pb_varint(p, pb_status_len(s));
        if (s->msg_len > 0) {
            p = pb_str(p, PB_TAG(2, PB_BYTES), s->text + s->msg_off, s->msg_len);
        }
        if (s->status != 0) {
            *p++ = PB_TAG(3, PB_VARINT);
            p = pb_varint(p, s->status);
        }
    }
    return p;
}

#define PB_SCOPE_NAME "llmgate"
#define PB_SERVICE_KEY "service.name"

void
lg_otlp_encode_pb(const struct lg_span *spans, size_t n, const char *service, char **out,
                  size_t *outlen)
{
    size_t svc = strlen(service);
    size_t scope = pb_field_len(sizeof(PB_SCOPE_NAME) - 1) + pb_field_len(sizeof(LG_VERSION) - 1);
    size_t kv = pb_field_len(sizeof(PB_SERVICE_KEY) - 1) + pb_field_len(pb_field_len(svc));
    size_t resource = pb_field_len(kv);
    size_t scope_spans = pb_field_len(scope);
    size_t resource_spans, total;
    uint32_t small[64];
    uint32_t *lens = n <= 64 ? small : lg_xmalloc(n * sizeof(*lens));
    uint8_t *buf, *p;

    for (size_t i = 0; i < n; i++) {
        lens[i] = (uint32_t)pb_span_len(&spans[i]);
        scope_spans += pb_field_len(lens[i]);
    }
    resource_spans = pb_field_len(resource) + pb_field_len(scope_spans);
    total = pb_field_len(resource_spans);
    buf = lg_xmalloc(total + 1);
    p = buf;
    *p++ = PB_TAG(1, PB_BYTES); /* ExportTraceServiceRequest.resource_spans */
    p = pb_varint(p, resource_spans);
    *p++ = PB_TAG(1, PB_BYTES); /* ResourceSpans.resource */
    p = pb_varint(p, resource);
    *p++ = PB_TAG(1, PB_BYTES); /* Resource.attributes */
    p = pb_varint(p, kv);
    p = pb_bytes(p, PB_TAG(1, PB_BYTES), PB_SERVICE_KEY, sizeof(PB_SERVICE_KEY) - 1);
    *p++ = PB_TAG(2, PB_BYTES);
    p = pb_varint(p, pb_field_len(svc));
    p = pb_str(p, PB_TAG(1, PB_BYTES), service, svc); /* AnyValue.string_value */
    *p++ = PB_TAG(2, PB_BYTES); /* ResourceSpans.scope_spans */
    p = pb_varint(p, scope_spans);
    *p++ = PB_TAG(1, PB_BYTES); /* ScopeSpans.scope */
    p = pb_varint(p, scope);
    p = pb_bytes(p, PB_TAG(1, PB_BYTES), PB_SCOPE_NAME, sizeof(PB_SCOPE_NAME) - 1);
    p = pb_bytes(p, PB_TAG(2, PB_BYTES), LG_VERSION, sizeof(LG_VERSION) - 1);
    for (size_t i = 0; i < n; i++) {
        *p++ = PB_TAG(2, PB_BYTES); /* ScopeSpans.spans */
        p = pb_varint(p, lens[i]);
        p = pb_span(p, &spans[i]);
    }
    if (lens != small) {
        free(lens);
    }
    *p = '\0';
    *out = (char *)buf;
    *outlen = (size_t)(p - buf); /* == total */
}
