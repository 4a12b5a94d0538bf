/*
 * otlp_json.c: spans as OTLP/HTTP JSON (otlp.h): an ExportTraceServiceRequest
 * in OTLP's JSON mapping (lowerCamelCase names, ids as hex, 64-bit integers
 * as decimal strings, enums as integers).
 * Owns: the body it returns (the caller frees it).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/otlp.h"
#include "lg_version.h"

/*
 * The body is written with room reserved once per span (its largest JSON:
 * every text byte escaped as \u00XX, every attribute and event at its
 * longest), then by unchecked copies: the exporter's cost is its copies.
 */
struct obuf {
    char *p;
    size_t n, cap;
};

/* A span's JSON at most: its text escaped, keys, numbers and punctuation. */
#define OB_SPAN_MAX (6 * LG_SPAN_TEXT + (LG_SPAN_ATTRS + LG_SPAN_EVENTS) * 300 + 512)

static void
ob_reserve(struct obuf *b, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = LG_MAX(b->cap * 2, b->n + n + 65536);
        b->p = lg_xrealloc(b->p, b->cap);
    }
}

static inline void
ob_put(struct obuf *b, const char *s, size_t n)
{
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

#define OB_LIT(b, s) ob_put((b), (s), sizeof(s) - 1)

/* "00".."99": numbers two digits at a time (a time in ns has 19) */
static const char ob_digits2[201] = "00010203040506070809101112131415161718192021222324252627282930"
                                    "31323334353637383940414243444546474849505152535455565758596061"
                                    "62636465666768697071727374757677787980818283848586878889909192"
                                    "93949596979899";

static void
ob_u64(struct obuf *b, uint64_t v)
{
    char tmp[24];
    char *q = tmp + sizeof(tmp);

    while (v >= 100) {
        q -= 2;
        memcpy(q, ob_digits2 + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10) {
        q -= 2;
        memcpy(q, ob_digits2 + 2 * v, 2);
    } else {
        *--q = (char)('0' + v);
    }
    ob_put(b, q, (size_t)(tmp + sizeof(tmp) - q));
}

static void
ob_i64(struct obuf *b, int64_t v)
{
    if (v < 0) {
        OB_LIT(b, "-");
        ob_u64(b, (uint64_t)0 - (uint64_t)v);
    } else {
        ob_u64(b, (uint64_t)v);
    }
}

/* A double as JSON: six decimals (a time in seconds to the microsecond). */
static void
ob_double(struct obuf *b, double d)
{
    uint64_t whole, frac;
    char digits[6];

    if (!(d == d) || d > 9e12 || d < -9e12) {
        OB_LIT(b, "0"); /* not a number, or past what an attribute here holds */
        return;
    }
    if (d < 0) {
        OB_LIT(b, "-");
        d = -d;
    }
    frac = (uint64_t)(d * 1e6 + 0.5);
    whole = frac / 1000000;
    frac %= 1000000;
    ob_u64(b, whole);
    if (frac != 0) {
        for (int i = 5; i >= 0; i--) {
            digits[i] = (char)('0' + frac % 10);
            frac /= 10;
        }
        OB_LIT(b, ".");
        ob_put(b, digits, 6);
    }
}

/* The bytes a JSON string escapes here: controls, '"', '\\', DEL; and past ASCII,
 * where a character is checked as UTF-8. */
static const bool ob_escaped[256] = {
    [0x00 ... 0x1f] = true, ['"'] = true, ['\\'] = true, [0x7f ... 0xff] = true,
};

/* A JSON string of n bytes: quotes, escapes, control bytes and DEL as
 * \u00XX; UTF-8 characters as they are, a byte where none starts as '?'
 * (as the protobuf encoder). */
static void
ob_str(struct obuf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;

    OB_LIT(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (__builtin_expect(!ob_escaped[ch], 1)) {
            continue;
        }
        if (ch >= 0x80) {
            size_t len = lg_otlp_utf8_len((const uint8_t *)s + i, n - i);

            if (len > 0) {
                i += len - 1; /* kept in the run */
                continue;
            }
            ob_put(b, s + run, i - run);
            run = i + 1;
            OB_LIT(b, "?");
            continue;
        }
        ob_put(b, s + run, i - run);
        run = i + 1;
        if (ch == '"' || ch == '\\') {
            char e[2] = { '\\', (char)ch };

            ob_put(b, e, 2);
        } else {
            char e[6] = { '\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15] };

            ob_put(b, e, 6);
        }
    }
    ob_put(b, s + run, n - run);
    OB_LIT(b, "\"");
}

/* "00".."ff": a byte's two hex digits */
static char ob_hex2[512];

static void
ob_hex_init(void)
{
    static const char hex[] = "0123456789abcdef";

    for (int i = 0; i < 256; i++) {
        ob_hex2[2 * i] = hex[i >> 4];
        ob_hex2[2 * i + 1] = hex[i & 15];
    }
}

static void
ob_id(struct obuf *b, const uint8_t *p, size_t n)
{
    char *out = b->p + b->n;

    out[0] = '"';
    for (size_t i = 0; i < n; i++) {
        memcpy(out + 1 + 2 * i, ob_hex2 + 2 * p[i], 2);
    }
    out[1 + 2 * n] = '"';
    b->n += 2 * n + 2;
}

static void
ob_span_id(struct obuf *b, uint64_t id)
{
    char *out = b->p + b->n;

    out[0] = '"';
    for (int i = 0; i < 8; i++) {
        memcpy(out + 1 + 2 * i, ob_hex2 + 2 * ((id >> (56 - 8 * i)) & 0xff), 2);
    }
    out[17] = '"';
    b->n += 18;
}

/* {"key":"K","value":{"TYPE":V}}: keys are literals that need no escape */
static void
ob_attr(struct obuf *b, const struct lg_span *s, const struct lg_span_attr *a)
{
    OB_LIT(b, "{\"key\":\"");
    ob_put(b, a->key, a->key_len);
    switch (a->type) {
    case LG_SPAN_A_STR:
        OB_LIT(b, "\",\"value\":{\"stringValue\":");
        ob_str(b, s->text + a->off, a->len);
        OB_LIT(b, "}}");
        break;
    case LG_SPAN_A_INT:
        OB_LIT(b, "\",\"value\":{\"intValue\":\"");
        ob_i64(b, a->v.i);
        OB_LIT(b, "\"}}");
        break;
    case LG_SPAN_A_DOUBLE:
        OB_LIT(b, "\",\"value\":{\"doubleValue\":");
        ob_double(b, a->v.d);
        OB_LIT(b, "}}");
        break;
    default:
        if (a->v.i) {
            OB_LIT(b, "\",\"value\":{\"boolValue\":true}}");
        } else {
            OB_LIT(b, "\",\"value\":{\"boolValue\":false}}");
        }
        break;
    }
}

static void
ob_span(struct obuf *b, const struct lg_span *s)
{
    ob_reserve(b, OB_SPAN_MAX);
    OB_LIT(b, "{\"traceId\":");
    ob_id(b, s->trace_id, 16);
    OB_LIT(b, ",\"spanId\":");
    ob_span_id(b, s->span_id);
    if (s->parent_id != 0) {
        OB_LIT(b, ",\"parentSpanId\":");
        ob_span_id(b, s->parent_id);
    }
    if (s->state_len > 0) {
        OB_LIT(b, ",\"traceState\":");
        ob_str(b, s->text + s->state_off, s->state_len);
    }
    OB_LIT(b, ",\"name\":");
    ob_str(b, s->text + s->name_off, s->name_len);
    OB_LIT(b, ",\"kind\":");
    ob_u64(b, s->kind);
    OB_LIT(b, ",\"startTimeUnixNano\":\"");
    ob_u64(b, s->start_unix_ns);
    OB_LIT(b, "\",\"endTimeUnixNano\":\"");
    ob_u64(b, s->end_unix_ns);
    OB_LIT(b, "\",\"attributes\":[");
    for (unsigned i = 0; i < s->nattrs; i++) {
        if (i > 0) {
            OB_LIT(b, ",");
        }
        ob_attr(b, s, &s->attrs[i]);
    }
    OB_LIT(b, "]");
    if (s->nevents > 0) {
        OB_LIT(b, ",\"events\":[");
        for (unsigned i = 0; i < s->nevents; i++) {
            OB_LIT(b, "{\"timeUnixNano\":\"");
            ob_u64(b, s->events[i].t_unix_ns);
            OB_LIT(b, "\",\"name\":\"");
            ob_put(b, s->events[i].name, s->events[i].name_len);
            OB_LIT(b, "\"}");
            if (i + 1 < s->nevents) {
                OB_LIT(b, ",");
            }
        }
        OB_LIT(b, "]");
    }
    OB_LIT(b, ",\"status\":{\"code\":");
    ob_u64(b, s->status);
    if (s->msg_len > 0) {
        OB_LIT(b, ",\"message\":");
        ob_str(b, s->text + s->msg_off, s->msg_len);
    }
    OB_LIT(b, "}}");
}

void
lg_otlp_encode_json(const struct lg_span *spans, size_t n, const char *service, char **out,
                    size_t *outlen)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    struct obuf b = { NULL, 0, 0 };

    pthread_once(&once, ob_hex_init);
    /* about 1.5 KiB a span: one allocation, seldom grown */
    ob_reserve(&b, 6 * strlen(service) + 256 + n * 2048 + OB_SPAN_MAX);
    OB_LIT(&b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\","
               "\"value\":{\"stringValue\":");
    ob_str(&b, service, strlen(service));
    OB_LIT(&b, "}}]},\"scopeSpans\":[{\"scope\":{\"name\":\"llmgate\",\"version\":\"" LG_VERSION
               "\"},\"spans\":[");
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            OB_LIT(&b, ",");
        }
        ob_span(&b, &spans[i]);
    }
    ob_reserve(&b, 16);
    OB_LIT(&b, "]}]}]}");
    b.p[b.n] = '\0';
    *out = b.p;
    *outlen = b.n;
}

