/*
 * fuzz_otlp.c: the span encoders (gateway/base/otlp_pb.c, otlp_json.c) on
 * spans made of arbitrary bytes: the input, split at each 0xff byte into
 * pieces, gives the span's name, its tracestate, its status message and
 * string attributes (with an integer, a double and a bool between them).
 * The first byte picks the encoding: even, protobuf; odd, JSON. The
 * protobuf read back by the tests' wire reader (tests/unit/lg_pbread.h) has the message's shape,
 * and its strings (name, tracestate, an attribute) are the span's bytes
 * with each byte where no UTF-8 character starts as '?' (found by a strict
 * UTF-8 reader of this file's own); the JSON parses (jansson) with the name
 * the same.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "../unit/lg_pbread.h"
#include "base/otlp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The character at p[0..n) under strict UTF-8 (no overlong form, no surrogate,
 * nothing past U+10FFFF): its bytes, 0 when none starts there. Written apart
 * from the encoders' lg_otlp_utf8_len(), as a reference. */
static size_t
utf8_at(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    uint32_t cp;

    if (len == 0 || len > n) {
        return 0;
    }
    cp = len == 1 ? c : (uint32_t)(c & (0x7f >> len));
    for (size_t k = 1; k < len; k++) {
        if ((p[k] & 0xc0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (p[k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)
        || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        return 0;
    }
    return len;
}

/* What a string of the span's text must be sent as: its characters, '?' for each
 * byte where none starts (same length). */
static void
expected(const char *in, size_t n, uint8_t *out)
{
    size_t i = 0;

    memcpy(out, in, n);
    while (i < n) {
        size_t len = utf8_at(out + i, n - i);

        if (len == 0) {
            out[i++] = '?';
        } else {
            i += len;
        }
    }
}

static bool
same(const uint8_t *got, size_t gn, const char *in, size_t n)
{
    uint8_t want[LG_SPAN_TEXT];

    expected(in, n, want);
    return gn == n && memcmp(got, want, n) == 0;
}

/*
 * Walks a message: every field well formed and inside it; the length-delimited
 * one numbered `want` (the first of them) into *sub. false when malformed.
 */
static bool
walk(const uint8_t *m, size_t n, unsigned want, const uint8_t **sub, size_t *subn)
{
    const uint8_t *p = m, *end = m + n;
    struct lg_pbf f;

    *sub = NULL;
    while (p < end) {
        if (!lg_pb_next(&p, end, &f)) {
            return false;
        }
        if (f.wt == 2 && f.field == want && *sub == NULL) {
            *sub = f.p;
            *subn = f.n;
        }
    }
    return true;
}

/* The span's strings (name 5, trace_state 3, the first attribute's string value) as expected. */
static void
check_pb(const char *out, size_t len, const struct lg_span *s)
{
    const uint8_t *rs, *ss, *sp, *f, *kv, *v;
    size_t rsn, ssn, spn, fn, kvn, vn;

    if (!walk((const uint8_t *)out, len, 1, &rs, &rsn) || rs == NULL || !walk(rs, rsn, 2, &ss, &ssn)
        || ss == NULL || !walk(ss, ssn, 2, &sp, &spn) || sp == NULL || !walk(sp, spn, 5, &f, &fn)) {
        abort();
    }
    if (f == NULL || !same(f, fn, s->text + s->name_off, s->name_len)) {
        abort();
    }
    if (!walk(sp, spn, 3, &f, &fn) || (s->state_len > 0) != (f != NULL)
        || (f != NULL && !same(f, fn, s->text + s->state_off, s->state_len))) {
        abort();
    }
    /* the first attribute is a string */
    if (s->nattrs > 0) {
        if (!walk(sp, spn, 9, &kv, &kvn) || kv == NULL || !walk(kv, kvn, 2, &v, &vn) || v == NULL
            || !walk(v, vn, 1, &f, &fn) || f == NULL
            || !same(f, fn, s->text + s->attrs[0].off, s->attrs[0].len)) {
            abort();
        }
    }
}

static void
check_json(const char *out, size_t len, const struct lg_span *s)
{
    json_error_t err;
    json_t *doc = json_loadb(out, len, JSON_ALLOW_NUL, &err); /* a NUL byte is \u0000 */
    json_t *span, *jname;
    const char *name;

    if (doc == NULL) {
        abort();
    }
    span = json_array_get(
        json_object_get(
            json_array_get(json_object_get(json_array_get(json_object_get(doc, "resourceSpans"), 0),
                                           "scopeSpans"),
                           0),
            "spans"),
        0);
    jname = json_object_get(span, "name");
    name = json_string_value(jname);
    if (name == NULL) {
        abort();
    }
    /* as the protobuf's: its characters, '?' for a byte where none starts */
    if (!same((const uint8_t *)name, json_string_length(jname), s->text + s->name_off,
              s->name_len)) {
        abort();
    }
    json_decref(doc);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_span *s;
    const uint8_t *piece[8];
    size_t plen[8], np = 0, start = 1;
    char *out = NULL;
    size_t len = 0;

    if (size == 0) {
        return 0;
    }
    for (size_t i = 1; i <= size && np < 8; i++) {
        if (i == size || data[i] == 0xff) {
            piece[np] = data + start;
            plen[np++] = i - start;
            start = i + 1;
        }
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return 0;
    }
    for (int i = 0; i < 16; i++) {
        s->trace_id[i] = (uint8_t)(i + 1);
    }
    s->span_id = 2;
    s->parent_id = size & 1 ? 3 : 0;
    s->kind = LG_SPAN_SERVER;
    s->status = (uint8_t)(size % 3);
    s->start_unix_ns = 1;
    s->end_unix_ns = 2;
    s->name_off = lg_span_text(s, (const char *)piece[0], plen[0], &s->name_len);
    if (np > 1) {
        s->state_off = lg_span_text(s, (const char *)piece[1], plen[1], &s->state_len);
    }
    if (np > 2) {
        s->msg_off = lg_span_text(s, (const char *)piece[2], plen[2], &s->msg_len);
    }
    for (size_t i = 3; i < np; i++) {
        lg_span_str(s, "fuzz.s", (const char *)piece[i], plen[i]);
        lg_span_int(s, "fuzz.i", (int64_t)plen[i] - 3);
        lg_span_double(s, "fuzz.d", (double)plen[i] / 7);
        lg_span_bool(s, "fuzz.b", plen[i] & 1);
        lg_span_event(s, "fuzz.e", 1);
    }
    if ((data[0] & 1) == 0) {
        lg_otlp_encode(s, 1, "svc", LG_OTLP_PROTOBUF, &out, &len);
        check_pb(out, len, s);
    } else {
        lg_otlp_encode(s, 1, "svc", LG_OTLP_JSON, &out, &len);
        check_json(out, len, s);
    }
    free(out);
    free(s);
    return 0;
}
