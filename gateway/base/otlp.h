/*
 * otlp.h: spans exported over OTLP/HTTP (protobuf or JSON). A worker fills a struct
 * lg_span (fixed size, static keys, its strings in the span's own text) and
 * hands it to lg_otlp_submit(), which copies it into a bounded queue or
 * counts it dropped: it never waits on the network. The exporter's thread
 * sends the queue in batches (POST, one ExportTraceServiceRequest) to the
 * collector, within a timeout; a batch it could not send is counted failed.
 */
#ifndef LG_OTLP_H
#define LG_OTLP_H

#include <string.h>

#include "base/config_types.h"
#include "base/lg_core.h"

/* OTLP's Span.SpanKind values */
enum lg_span_kind {
    LG_SPAN_INTERNAL = 1,
    LG_SPAN_SERVER = 2,
    LG_SPAN_CLIENT = 3,
};

/* OTLP's Status.StatusCode values */
enum lg_span_status {
    LG_SPAN_UNSET = 0,
    LG_SPAN_OK = 1,
    LG_SPAN_ERROR = 2,
};

enum lg_span_attr_type {
    LG_SPAN_A_STR = 0,
    LG_SPAN_A_INT,
    LG_SPAN_A_DOUBLE,
    LG_SPAN_A_BOOL,
};

#define LG_SPAN_ATTRS  20
#define LG_SPAN_EVENTS 4
#define LG_SPAN_TEXT   1024

/*
 * An attribute's key and an event's name are static (string literals): the
 * span holds a pointer to them, the exporter's thread writes them out in
 * the configured encoding (protobuf or JSON).
 */
struct lg_span_attr {
    const char *key;  /* static */
    uint8_t key_len;
    uint8_t type;     /* enum lg_span_attr_type */
    uint16_t off;     /* STR: its bytes in the span's text */
    uint16_t len;
    union {
        int64_t i;
        double d;
    } v;
};

struct lg_span_event {
    const char *name; /* static */
    uint8_t name_len;
    uint64_t t_unix_ns;
};

struct lg_span {
    uint8_t trace_id[16];
    uint64_t span_id;
    uint64_t parent_id;     /* 0: none (the trace's root) */
    uint64_t start_unix_ns;
    uint64_t end_unix_ns;
    uint8_t kind;           /* enum lg_span_kind */
    uint8_t status;         /* enum lg_span_status */
    uint8_t nattrs;
    uint8_t nevents;
    uint16_t name_off, name_len;     /* in text */
    uint16_t state_off, state_len;   /* its tracestate, in text; 0 bytes: none */
    uint16_t msg_off, msg_len;       /* the status's message, in text */
    uint16_t text_len;
    struct lg_span_attr attrs[LG_SPAN_ATTRS];
    struct lg_span_event events[LG_SPAN_EVENTS];
    char text[LG_SPAN_TEXT];
};

/* Copies n bytes into the span's text (truncated to what is left); its offset. */
static inline uint16_t
lg_span_text(struct lg_span *s, const char *p, size_t n, uint16_t *len)
{
    uint16_t off = s->text_len;

    n = LG_MIN(n, (size_t)(LG_SPAN_TEXT - s->text_len));
    memcpy(s->text + off, p, n);
    s->text_len = (uint16_t)(s->text_len + n);
    *len = (uint16_t)n;
    return off;
}

/*
 * Attributes (dropped once LG_SPAN_ATTRS are set) and events (once
 * LG_SPAN_EVENTS are). KEY and NAME are string literals without quotes,
 * backslashes or control bytes, under 128 bytes:
 * lg_span_str(s, "gen_ai.request.model", p, n).
 */
#define lg_span_str(s, key, p, n) lg_span_put_str((s), "" key, sizeof(key) - 1, (p), (n))
#define lg_span_int(s, key, x)                                                             \
    lg_span_put_num((s), "" key, sizeof(key) - 1, LG_SPAN_A_INT, (int64_t)(x), 0)
#define lg_span_double(s, key, x)                                                          \
    lg_span_put_num((s), "" key, sizeof(key) - 1, LG_SPAN_A_DOUBLE, 0, (x))
#define lg_span_bool(s, key, x)                                                            \
    lg_span_put_num((s), "" key, sizeof(key) - 1, LG_SPAN_A_BOOL, (x) ? 1 : 0, 0)
#define lg_span_event(s, name, t) lg_span_put_event((s), "" name, sizeof(name) - 1, (t))

static inline struct lg_span_attr *
lg_span_attr(struct lg_span *s, const char *key, size_t key_len, uint8_t type)
{
    struct lg_span_attr *a;

    if (s->nattrs >= LG_SPAN_ATTRS) {
        return NULL;
    }
    a = &s->attrs[s->nattrs++];
    a->key = key;
    a->key_len = (uint8_t)key_len;
    a->type = type;
    return a;
}

static inline void
lg_span_put_str(struct lg_span *s, const char *key, size_t key_len, const char *p, size_t n)
{
    struct lg_span_attr *a = lg_span_attr(s, key, key_len, LG_SPAN_A_STR);

    if (a != NULL) {
        a->off = lg_span_text(s, p, n, &a->len);
    }
}

static inline void
lg_span_put_num(struct lg_span *s, const char *key, size_t key_len, uint8_t type, int64_t i,
                double d)
{
    struct lg_span_attr *a = lg_span_attr(s, key, key_len, type);

    if (a != NULL) {
        if (type == LG_SPAN_A_DOUBLE) {
            a->v.d = d;
        } else {
            a->v.i = i;
        }
    }
}

static inline void
lg_span_put_event(struct lg_span *s, const char *name, size_t name_len, uint64_t t_unix_ns)
{
    if (s->nevents < LG_SPAN_EVENTS) {
        s->events[s->nevents].name = name;
        s->events[s->nevents].name_len = (uint8_t)name_len;
        s->events[s->nevents].t_unix_ns = t_unix_ns;
        s->nevents++;
    }
}

/*
 * The bytes of the valid UTF-8 character at p[0..n) (1 to 4; 1 for ASCII),
 * or 0 when none starts there (a stray continuation byte, a sequence cut
 * short, an overlong form, a surrogate, past U+10FFFF). A span's text is not
 * checked as UTF-8 (a request's bytes, or cut at a limit inside a
 * character): both encoders send each byte where no character starts as '?'.
 */
static inline size_t
lg_otlp_utf8_len(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    size_t len, k;
    uint32_t cp, min;

    if (c < 0x80) {
        return 1;
    }
    if ((c & 0xe0) == 0xc0) {
        len = 2, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, min = 0x10000;
    } else {
        return 0;
    }
    cp = c & (0x7fu >> len);
    for (k = 1; k < len && k < n && (p[k] & 0xc0) == 0x80; k++) {
        cp = (cp << 6) | (p[k] & 0x3fu);
    }
    if (k < len || cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        return 0;
    }
    return len;
}

/* What the exporter did, for /metrics (atomic reads). */
struct lg_otlp_stats {
    uint64_t submitted; /* spans queued */
    uint64_t dropped;   /* spans not queued: the queue was full */
    uint64_t exported;  /* spans the collector took (2xx) */
    uint64_t failed;    /* spans in exports that failed (no connection, timeout, not 2xx) */
    uint64_t exports;   /* exports tried */
    uint32_t queued;    /* spans waiting now */
};

struct lg_otlp;

/*
 * Checks a collector URL: "http://host[:port][/path]" (port 80 by default,
 * path /v1/traces when none). host, port and path, when not NULL, receive
 * its parts. false with the reason in why.
 */
bool lg_otlp_parse_url(const char *url, char *host, size_t hostsz, char *port, size_t portsz,
                       char *path, size_t pathsz, char *why, size_t whysz);

/* Config check for tracing.endpoint (lg_conf_check_fn). */
bool lg_otlp_check_url(const char *url, char *why, size_t whysz);

/*
 * Starts the exporter's thread for conf (copied: a reload does not change
 * it). LG_OK with *out set, or LG_ERR (logged).
 */
int lg_otlp_start(const struct lg_tracing_conf *conf, struct lg_otlp **out);

/* Stops the thread within about half a second (an export in flight may end,
 * one batch more is sent, the rest dropped) and frees it. NULL: nothing. */
void lg_otlp_stop(struct lg_otlp *o);

/* Queues a copy of s, or counts it dropped. Any thread; never blocks on I/O. */
void lg_otlp_submit(struct lg_otlp *o, const struct lg_span *s);

/* The share of the traces started here that are sampled. */
double lg_otlp_sample_ratio(const struct lg_otlp *o);

void lg_otlp_get_stats(struct lg_otlp *o, struct lg_otlp_stats *st);

/*
 * Writes spans[0..n) as one OTLP ExportTraceServiceRequest into a malloc'd
 * buffer (*out, *outlen; NUL-terminated past its length): protobuf
 * (base/otlp_pb.c) or JSON (base/otlp_json.c); service names the resource.
 */
void lg_otlp_encode(const struct lg_span *spans, size_t n, const char *service,
                    enum lg_otlp_encoding enc, char **out, size_t *outlen);
void lg_otlp_encode_json(const struct lg_span *spans, size_t n, const char *service, char **out,
                         size_t *outlen);
void lg_otlp_encode_pb(const struct lg_span *spans, size_t n, const char *service, char **out,
                       size_t *outlen);

#endif /* LG_OTLP_H */
