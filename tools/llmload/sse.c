/*
 * sse.c: the incremental text/event-stream scanner and the allocation-free
 * JSON walk that tells whether a chunk carries content and how many tokens a
 * usage block reports.
 * Owns: the scanner's line and data buffers (kept across events, bounded by
 * max_event). Borrows: the bytes fed to it, for the duration of a call.
 * The scanner follows the WHATWG event-stream rules: lines end in CR, LF or
 * CRLF (a CRLF may be split across feeds), "data" lines are joined with '\n',
 * a blank line dispatches, other fields and ':' comments are ignored.
 */
#include <stdlib.h>
#include <string.h>

#include "llmload.h"

void
lg_ld_sse_init(struct lg_ld_sse *s, size_t max_event)
{
    memset(s, 0, sizeof(*s));
    s->max_event = max_event;
}

void
lg_ld_sse_reset(struct lg_ld_sse *s)
{
    s->line_len = 0;
    s->data_len = 0;
    s->has_data = false;
    s->skip_lf = false;
}

void
lg_ld_sse_free(struct lg_ld_sse *s)
{
    free(s->line);
    free(s->data);
    s->line = NULL;
    s->data = NULL;
    s->line_cap = 0;
    s->data_cap = 0;
}

/* Appends to a growable buffer bounded by max; LG_EPROTO past the bound. */
static int
sse_append(char **buf, size_t *len, size_t *cap, size_t max, const char *p, size_t n)
{
    if (n == 0) {
        return LG_OK;
    }
    if (n > max - *len) {
        return LG_EPROTO;
    }
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 256;

        while (c < *len + n) {
            c *= 2;
        }
        *buf = lg_xrealloc(*buf, c);
        *cap = c;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    return LG_OK;
}

/* Handles one complete line (without its terminator). */
static int
sse_line(struct lg_ld_sse *s, const char *p, size_t n, lg_ld_sse_event_fn fn, void *arg)
{
    const char *colon;
    size_t name_len;
    int rc;

    if (n == 0) {
        if (!s->has_data) {
            return LG_OK;
        }
        s->has_data = false;
        rc = fn(arg, s->data ? s->data : "", s->data_len);
        s->data_len = 0;
        return rc;
    }
    if (p[0] == ':') {
        return LG_OK;
    }
    colon = memchr(p, ':', n);
    name_len = colon ? (size_t)(colon - p) : n;
    if (name_len != 4 || memcmp(p, "data", 4) != 0) {
        return LG_OK;
    }
    if (colon != NULL) {
        p = colon + 1;
        n -= name_len + 1;
        if (n > 0 && p[0] == ' ') {
            p++;
            n--;
        }
    } else {
        n = 0;
    }
    if (s->has_data) {
        rc = sse_append(&s->data, &s->data_len, &s->data_cap, s->max_event, "\n", 1);
        if (rc != LG_OK) {
            return rc;
        }
    }
    s->has_data = true;
    return sse_append(&s->data, &s->data_len, &s->data_cap, s->max_event, p, n);
}

int
lg_ld_sse_feed(struct lg_ld_sse *s, const char *p, size_t n, lg_ld_sse_event_fn fn, void *arg)
{
    const char *end = p + n;
    int rc;

    if (s->skip_lf && p < end) {
        s->skip_lf = false;
        if (*p == '\n') {
            p++;
        }
    }
    while (p < end) {
        const char *eol = p;

        while (eol < end && *eol != '\n' && *eol != '\r') {
            eol++;
        }
        if (eol == end) {
            /* Keep the partial line for the next feed. */
            return sse_append(&s->line, &s->line_len, &s->line_cap, s->max_event, p,
                              (size_t)(end - p));
        }
        if (s->line_len > 0) {
            rc = sse_append(&s->line, &s->line_len, &s->line_cap, s->max_event, p,
                            (size_t)(eol - p));
            if (rc == LG_OK) {
                rc = sse_line(s, s->line, s->line_len, fn, arg);
            }
            s->line_len = 0;
        } else {
            rc = sse_line(s, p, (size_t)(eol - p), fn, arg);
        }
        if (rc != LG_OK) {
            return rc;
        }
        if (*eol == '\r') {
            if (eol + 1 == end) {
                s->skip_lf = true;
            } else if (eol[1] == '\n') {
                eol++;
            }
        }
        p = eol + 1;
    }
    return LG_OK;
}

/* ---- the JSON walk ---------------------------------------------------------- */

/* Where a value sits, as far as llmload cares. */
enum chunk_at {
    CHUNK_AT_OTHER = 0,
    CHUNK_AT_ROOT,
    CHUNK_AT_CHOICES,    /* root.choices */
    CHUNK_AT_CHOICE,     /* root.choices[i] */
    CHUNK_AT_DELTA,      /* root.choices[i].delta or .message */
    CHUNK_AT_TEXT,       /* a string whose non-emptiness is content */
    CHUNK_AT_TOOL_CALLS, /* an array whose non-emptiness is content */
    CHUNK_AT_USAGE,      /* root.usage */
    CHUNK_AT_COMPLETION, /* root.usage.completion_tokens */
    CHUNK_AT_ERROR,      /* root.error */
};

#define CHUNK_MAX_DEPTH 64

struct chunk_walk {
    const char *p;
    const char *end;
    struct lg_ld_chunk *out;
};

static bool
chunk_key_is(const char *k, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(k, lit, n) == 0;
}

/* Where the member named k of an object at `at` sits. */
static enum chunk_at
chunk_member(enum chunk_at at, const char *k, size_t n)
{
    switch (at) {
    case CHUNK_AT_ROOT:
        if (chunk_key_is(k, n, "choices")) {
            return CHUNK_AT_CHOICES;
        }
        if (chunk_key_is(k, n, "usage")) {
            return CHUNK_AT_USAGE;
        }
        if (chunk_key_is(k, n, "error")) {
            return CHUNK_AT_ERROR;
        }
        return CHUNK_AT_OTHER;
    case CHUNK_AT_CHOICE:
        if (chunk_key_is(k, n, "delta") || chunk_key_is(k, n, "message")) {
            return CHUNK_AT_DELTA;
        }
        if (chunk_key_is(k, n, "text")) {
            return CHUNK_AT_TEXT;
        }
        return CHUNK_AT_OTHER;
    case CHUNK_AT_DELTA:
        if (chunk_key_is(k, n, "content") || chunk_key_is(k, n, "reasoning_content")
            || chunk_key_is(k, n, "reasoning")) {
            return CHUNK_AT_TEXT;
        }
        if (chunk_key_is(k, n, "tool_calls")) {
            return CHUNK_AT_TOOL_CALLS;
        }
        return CHUNK_AT_OTHER;
    case CHUNK_AT_USAGE:
        return chunk_key_is(k, n, "completion_tokens") ? CHUNK_AT_COMPLETION : CHUNK_AT_OTHER;
    default:
        return CHUNK_AT_OTHER;
    }
}

static void
chunk_ws(struct chunk_walk *w)
{
    while (w->p < w->end && (*w->p == ' ' || *w->p == '\t' || *w->p == '\n' || *w->p == '\r')) {
        w->p++;
    }
}

static bool
chunk_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string starting at '"'; *start and *len give the raw (escaped) body. */
static int
chunk_string(struct chunk_walk *w, const char **start, size_t *len)
{
    const char *p = w->p + 1;

    *start = p;
    while (p < w->end) {
        unsigned char c = (unsigned char)*p;

        if (c == '"') {
            *len = (size_t)(p - *start);
            w->p = p + 1;
            return LG_OK;
        }
        if (c < 0x20) {
            return LG_EPROTO;
        }
        if (c == '\\') {
            if (p + 1 >= w->end) {
                return LG_EPROTO;
            }
            c = (unsigned char)p[1];
            if (c == 'u') {
                if (w->end - p < 6 || !chunk_hex(p[2]) || !chunk_hex(p[3]) || !chunk_hex(p[4])
                    || !chunk_hex(p[5])) {
                    return LG_EPROTO;
                }
                p += 6;
                continue;
            }
            if (strchr("\"\\/bfnrt", c) == NULL || c == '\0') {
                return LG_EPROTO;
            }
            p += 2;
            continue;
        }
        p++;
    }
    return LG_EPROTO;
}

/* A number per RFC 8259; its integer value lands in *iv when it has no
 * fraction or exponent and fits (else *is_int is false). */
static int
chunk_number(struct chunk_walk *w, int64_t *iv, bool *is_int)
{
    const char *p = w->p;
    bool neg = false;
    int64_t v = 0;

    *is_int = true;
    if (p < w->end && *p == '-') {
        neg = true;
        p++;
    }
    if (p >= w->end || *p < '0' || *p > '9') {
        return LG_EPROTO;
    }
    if (*p == '0') {
        p++;
    } else {
        while (p < w->end && *p >= '0' && *p <= '9') {
            if (v > (INT64_MAX - 9) / 10) {
                *is_int = false;
            } else {
                v = v * 10 + (*p - '0');
            }
            p++;
        }
    }
    if (p < w->end && *p == '.') {
        *is_int = false;
        p++;
        if (p >= w->end || *p < '0' || *p > '9') {
            return LG_EPROTO;
        }
        while (p < w->end && *p >= '0' && *p <= '9') {
            p++;
        }
    }
    if (p < w->end && (*p == 'e' || *p == 'E')) {
        *is_int = false;
        p++;
        if (p < w->end && (*p == '+' || *p == '-')) {
            p++;
        }
        if (p >= w->end || *p < '0' || *p > '9') {
            return LG_EPROTO;
        }
        while (p < w->end && *p >= '0' && *p <= '9') {
            p++;
        }
    }
    *iv = neg ? -v : v;
    w->p = p;
    return LG_OK;
}

static int
chunk_literal(struct chunk_walk *w, const char *lit)
{
    size_t n = strlen(lit);

    if ((size_t)(w->end - w->p) < n || memcmp(w->p, lit, n) != 0) {
        return LG_EPROTO;
    }
    w->p += n;
    return LG_OK;
}

static int chunk_value(struct chunk_walk *w, enum chunk_at at, int depth);

static int
chunk_object(struct chunk_walk *w, enum chunk_at at, int depth)
{
    w->p++; /* '{' */
    chunk_ws(w);
    if (w->p < w->end && *w->p == '}') {
        w->p++;
        return LG_OK;
    }
    for (;;) {
        const char *k;
        size_t kn;

        if (w->p >= w->end || *w->p != '"' || chunk_string(w, &k, &kn) != LG_OK) {
            return LG_EPROTO;
        }
        chunk_ws(w);
        if (w->p >= w->end || *w->p != ':') {
            return LG_EPROTO;
        }
        w->p++;
        if (chunk_value(w, chunk_member(at, k, kn), depth + 1) != LG_OK) {
            return LG_EPROTO;
        }
        chunk_ws(w);
        if (w->p < w->end && *w->p == ',') {
            w->p++;
            chunk_ws(w);
            continue;
        }
        if (w->p < w->end && *w->p == '}') {
            w->p++;
            return LG_OK;
        }
        return LG_EPROTO;
    }
}

static int
chunk_array(struct chunk_walk *w, enum chunk_at at, int depth)
{
    enum chunk_at elem = at == CHUNK_AT_CHOICES ? CHUNK_AT_CHOICE : CHUNK_AT_OTHER;

    w->p++; /* '[' */
    chunk_ws(w);
    if (w->p < w->end && *w->p == ']') {
        w->p++;
        return LG_OK;
    }
    if (at == CHUNK_AT_TOOL_CALLS) {
        w->out->content = true;
    }
    for (;;) {
        if (chunk_value(w, elem, depth + 1) != LG_OK) {
            return LG_EPROTO;
        }
        chunk_ws(w);
        if (w->p < w->end && *w->p == ',') {
            w->p++;
            continue;
        }
        if (w->p < w->end && *w->p == ']') {
            w->p++;
            return LG_OK;
        }
        return LG_EPROTO;
    }
}

static int
chunk_value(struct chunk_walk *w, enum chunk_at at, int depth)
{
    const char *s;
    size_t n;
    int64_t iv;
    bool is_int;

    if (depth > CHUNK_MAX_DEPTH) {
        return LG_EPROTO;
    }
    chunk_ws(w);
    if (w->p >= w->end) {
        return LG_EPROTO;
    }
    switch (*w->p) {
    case '{':
        if (at == CHUNK_AT_ERROR) {
            w->out->error = true;
        }
        return chunk_object(w, at, depth);
    case '[':
        return chunk_array(w, at, depth);
    case '"':
        if (chunk_string(w, &s, &n) != LG_OK) {
            return LG_EPROTO;
        }
        if (at == CHUNK_AT_TEXT && n > 0) {
            w->out->content = true;
        } else if (at == CHUNK_AT_ERROR) {
            w->out->error = true;
        }
        return LG_OK;
    case 't':
        return chunk_literal(w, "true");
    case 'f':
        return chunk_literal(w, "false");
    case 'n':
        return chunk_literal(w, "null");
    default:
        if (chunk_number(w, &iv, &is_int) != LG_OK) {
            return LG_EPROTO;
        }
        if (at == CHUNK_AT_COMPLETION && is_int && iv >= 0) {
            w->out->has_usage = true;
            w->out->completion_tokens = iv;
        }
        return LG_OK;
    }
}

int
lg_ld_chunk_inspect(const char *p, size_t n, struct lg_ld_chunk *out)
{
    struct chunk_walk w = { .p = p, .end = p + n, .out = out };

    memset(out, 0, sizeof(*out));
    if (chunk_value(&w, CHUNK_AT_ROOT, 0) != LG_OK) {
        return LG_EPROTO;
    }
    chunk_ws(&w);
    return w.p == w.end ? LG_OK : LG_EPROTO;
}
