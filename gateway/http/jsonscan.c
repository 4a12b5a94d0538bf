/*
 * jsonscan.c: a validating JSON scanner over a body's extents (the
 * evbuffer's, never linearised) that accepts exactly what jansson's
 * json_loadb(..., 0) accepts (RFC 8259, UTF-8 checked, no \u0000, integers
 * within int64, finite reals, nesting up to 2048, an object or an array at
 * the top) and records, as tokens of a flat tape, only the values its caller
 * reads (a struct lg_jsonscan_want: named members, chosen elements); every
 * other value is checked as strictly and leaves nothing, so the tape grows
 * with what is read, not with the body, and never past LG_JSONSCAN_MAX_TOKS.
 * Member names are matched (unescaped, as jansson compares them) while
 * scanning; then random access back into the body for the tape's strings,
 * and the walk of an object's members with jansson's semantics (the last of
 * duplicate keys wins). About 40 times fewer instructions than building a
 * jansson document, and no allocation for an ordinary body
 * (tests/fuzz/fuzz_openai_ref.c compares the two on every input, through
 * openai.c). An allocation that fails fails the scan (LG_ENOMEM), not the
 * process.
 *
 * Owns: a tape grown past the caller's stack array, and a segment table
 * past its own, until lg_jsonscan_done(). Borrows: the body's extents.
 */
#include "http/jsonscan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define JS_AVX2 1 /* compiled in for every x86-64 build, used where the CPU has it */
#endif

#define JS_MAX_DEPTH 2048 /* jansson's JSON_PARSER_MAX_DEPTH */

/* Byte classes inside a string: 0 = plain, else what needs a look. */
enum { JS_C_PLAIN = 0, JS_C_QUOTE, JS_C_ESC, JS_C_CTRL, JS_C_U2, JS_C_U3, JS_C_U4, JS_C_BAD };

static const uint8_t js_class[256] = {
    [0x00 ... 0x1f] = JS_C_CTRL, ['"'] = JS_C_QUOTE,         ['\\'] = JS_C_ESC,
    [0x80 ... 0xc1] = JS_C_BAD,  [0xc2 ... 0xdf] = JS_C_U2,  [0xe0 ... 0xef] = JS_C_U3,
    [0xf0 ... 0xf4] = JS_C_U4,   [0xf5 ... 0xff] = JS_C_BAD,
};

static uint32_t
js_off(const struct lg_jsonscan *s)
{
    return (uint32_t)((uintptr_t)s->p + s->off_bias); /* wraps to the offset */
}

/* Moves to the next non-empty segment; false at the end of the body. */
static bool
js_fill(struct lg_jsonscan *s)
{
    while (s->p == s->end) {
        if (s->seg + 1 >= s->nvec) {
            return false;
        }
        s->seg_off += (uint32_t)s->vec[s->seg].iov_len;
        s->seg++;
        s->p = s->vec[s->seg].iov_base;
        s->end = s->p + s->vec[s->seg].iov_len;
        s->off_bias = (uintptr_t)s->seg_off - (uintptr_t)s->p;
    }
    return true;
}

/* The next byte without consuming it, or -1 at the end. */
static inline int
js_peek(struct lg_jsonscan *s)
{
    if (s->p == s->end && !js_fill(s)) {
        return -1;
    }
    return *s->p;
}

static inline int
js_get(struct lg_jsonscan *s)
{
    int c = js_peek(s);

    if (c >= 0) {
        s->p++;
    }
    return c;
}

static int
js_fail(struct lg_jsonscan *s, const char *why)
{
    if (s->err == NULL) {
        s->err = why;
        s->err_off = js_off(s);
    }
    return LG_EINVAL;
}

static int
js_ws(struct lg_jsonscan *s)
{
    int c;

    while ((c = js_peek(s)) == ' ' || c == '\t' || c == '\n' || c == '\r') {
        s->p++;
    }
    return c;
}

/* Doubles the tape, up to LG_JSONSCAN_MAX_TOKS; LG_ENOMEM past it or without memory. */
static __attribute__((noinline)) int
js_grow(struct lg_jsonscan *s)
{
    struct lg_jsonscan_tok *n;
    uint32_t cap;

    if (s->cap >= LG_JSONSCAN_MAX_TOKS) {
        s->capped = true;
        return LG_ENOMEM;
    }
    cap = LG_MIN(LG_MAX(2 * s->cap, 16u), LG_JSONSCAN_MAX_TOKS);
    if (!s->tok_heap) {
        n = malloc(cap * sizeof(*n));
        if (n != NULL) {
            memcpy(n, s->tok, s->ntok * sizeof(*n));
        }
    } else {
        n = realloc(s->tok, cap * sizeof(*n));
    }
    if (n == NULL) {
        return LG_ENOMEM;
    }
    s->tok = n;
    s->tok_heap = true;
    s->cap = cap;
    return LG_OK;
}

/* A token at the tape's end, or NULL (LG_ENOMEM: js_grow). */
static inline struct lg_jsonscan_tok *
js_push(struct lg_jsonscan *s, uint8_t type, uint32_t off, uint8_t key)
{
    struct lg_jsonscan_tok *t;

    if (__builtin_expect(s->ntok == s->cap, 0) && js_grow(s) != LG_OK) {
        return NULL;
    }
    t = &s->tok[s->ntok++];
    t->type = type;
    t->esc = false;
    t->key = key;
    t->off = off;
    t->len = 0;
    t->aux = 0;
    return t;
}

/* A value just scanned: its type, whether its token is on the tape, an array's elements. */
struct js_val {
    uint8_t type;
    bool recorded;
    uint32_t n;
};

static int
js_hex4(struct lg_jsonscan *s, uint32_t *out)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        int c = js_get(s);

        if (c >= '0' && c <= '9') {
            v = v * 16 + (uint32_t)(c - '0');
        } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
            v = v * 16 + (uint32_t)((c | 0x20) - 'a' + 10);
        } else {
            return js_fail(s, "invalid \\u escape");
        }
    }
    *out = v;
    return LG_OK;
}

/* After a backslash: checks one escape; adds its unescaped size to *dlen. */
static int
js_escape(struct lg_jsonscan *s, uint32_t *dlen)
{
    uint32_t cp, lo;

    switch (js_get(s)) {
    case '"':
    case '\\':
    case '/':
    case 'b':
    case 'f':
    case 'n':
    case 'r':
    case 't':
        *dlen += 1;
        return LG_OK;
    case 'u':
        break;
    default:
        return js_fail(s, "invalid escape in a string");
    }
    if (js_hex4(s, &cp) != LG_OK) {
        return LG_EINVAL;
    }
    if (cp == 0) {
        return js_fail(s, "\\u0000 is not allowed in a string");
    }
    if (cp >= 0xdc00 && cp <= 0xdfff) {
        return js_fail(s, "lone low surrogate in a \\u escape");
    }
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (js_get(s) != '\\' || js_get(s) != 'u' || js_hex4(s, &lo) != LG_OK) {
            return js_fail(s, "high surrogate without its low half in a \\u escape");
        }
        if (lo < 0xdc00 || lo > 0xdfff) {
            return js_fail(s, "high surrogate without its low half in a \\u escape");
        }
        *dlen += 4;
        return LG_OK;
    }
    *dlen += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
    return LG_OK;
}

/* A multi-byte UTF-8 sequence of n bytes starting with lead (consumed). */
static int
js_utf8(struct lg_jsonscan *s, int lead, int n)
{
    int lo = 0x80, hi = 0xbf;

    /* second-byte bounds reject overlong forms, surrogates and > U+10FFFF */
    if (lead == 0xe0) {
        lo = 0xa0;
    } else if (lead == 0xed) {
        hi = 0x9f;
    } else if (lead == 0xf0) {
        lo = 0x90;
    } else if (lead == 0xf4) {
        hi = 0x8f;
    }
    for (int i = 1; i < n; i++) {
        int c = js_get(s);

        if (c < lo || c > hi) {
            return js_fail(s, "invalid UTF-8");
        }
        lo = 0x80;
        hi = 0xbf;
    }
    return LG_OK;
}

#ifdef JS_AVX2
/*
 * js_plain_run's loop 64 bytes at a time, for CPUs that have AVX2. A byte
 * stops the run if it is below ' ' or 0x80 and above (one signed compare), or
 * if the table entry at its low four bits is the byte itself: '"' at 2, '\\'
 * at 12, every other entry its own index, a control byte that stops anyway
 * (vpshufb gives 0 for bytes with the top bit set, never the byte). Four
 * operations per 32 bytes instead of six for three compares.
 */
__attribute__((target("avx2"))) static const unsigned char *
js_plain_run_avx2(const unsigned char *p, const unsigned char *end)
{
    __m256i v_space = _mm256_set1_epi8(0x20);
    const __m256i v_table =
        _mm256_setr_epi8(0, 1, '"', 3, 4, 5, 6, 7, 8, 9, 10, 11, '\\', 13, 14, 15, 0, 1, '"', 3, 4,
                         5, 6, 7, 8, 9, 10, 11, '\\', 13, 14, 15);

    /* keeps the compiler from turning `' ' > x` into a min and an equality */
    __asm__("" : "+x"(v_space));
#define JS_STOPS(x)                                  \
    _mm256_or_si256(_mm256_cmpgt_epi8(v_space, (x)), \
                    _mm256_cmpeq_epi8(_mm256_shuffle_epi8(v_table, (x)), (x)))

    /* 64 bytes per test, then the 32 that hold the stop */
    while (end - p >= 64) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)p);
        __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
        __m256i a = JS_STOPS(x), b = JS_STOPS(y);

        if (_mm256_movemask_epi8(_mm256_or_si256(a, b)) != 0) {
            unsigned bits = (unsigned)_mm256_movemask_epi8(a);

            return bits != 0 ? p + __builtin_ctz(bits)
                             : p + 32 + __builtin_ctz((unsigned)_mm256_movemask_epi8(b));
        }
        p += 64;
    }
#undef JS_STOPS
    return p;
}
#endif

/*
 * Skips plain string bytes (printable ASCII other than '"' and '\\'), 64
 * (AVX2, where the CPU has it), sixteen (SSE2) or eight at a time while none
 * of them needs a look: prompts are mostly such bytes, and a long prompt's
 * scan is most of the work of reading its body. The first sixteen are
 * looked at alone first: a member's name and a short value end there, and
 * the AVX2 loop's call and setup cost more than the string.
 */
#ifdef __SSE2__
/* The bytes of p[0..16) that end a plain run, one bit each (a signed
 * compare: bytes >= 0x80 are negative, below ' ' as well). */
static inline unsigned
js_stops16(const unsigned char *p)
{
    const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    const __m128i m = _mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
                                   _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                                _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))));

    return (unsigned)_mm_movemask_epi8(m);
}
#endif

static const unsigned char *
js_plain_run(const unsigned char *p, const unsigned char *end)
{
#ifdef __SSE2__
    /* the first 16 bytes: most names and many values end there */
    if (end - p >= 16) {
        unsigned bits = js_stops16(p);

        if (bits != 0) {
            return p + __builtin_ctz(bits);
        }
        p += 16;
    }
#endif
#ifdef JS_AVX2
    if (end - p >= 64 && __builtin_cpu_supports("avx2")) {
        p = js_plain_run_avx2(p, end);
    }
#endif
#ifdef __SSE2__
    while (end - p >= 16) {
        unsigned bits = js_stops16(p);

        if (bits != 0) {
            return p + __builtin_ctz(bits);
        }
        p += 16;
    }
#endif
    while (end - p >= 8) {
        uint64_t x, m;

        memcpy(&x, p, 8);
        /* the bytes < 0x20, '"', '\\' or >= 0x80 */
        m = lg_swar_lt(x, 0x20) | lg_swar_eq(x, '"') | lg_swar_eq(x, '\\') | (x & LG_SWAR_HIGH);
        if (m != 0) {
            return p + lg_swar_first(m);
        }
        p += 8;
    }
    while (p < end && js_class[*p] == JS_C_PLAIN) {
        p++;
    }
    return p;
}

/* A string just scanned: where its bytes lie and what they unescape to. */
struct js_str {
    uint32_t off;  /* first byte after the quote */
    uint32_t len;  /* raw bytes */
    uint32_t dlen; /* unescaped bytes */
    bool esc;      /* has backslash escapes */
};

static int
js_string(struct lg_jsonscan *s, struct js_str *out)
{
    uint32_t off, dlen = 0;
    bool esc = false;

    s->p++; /* the opening quote */
    off = js_off(s);
    for (;;) {
        const unsigned char *q;
        int c;

        if (s->p == s->end && !js_fill(s)) {
            return js_fail(s, "unterminated string");
        }
        q = js_plain_run(s->p, s->end);
        dlen += (uint32_t)(q - s->p);
        s->p = q;
        if (q == s->end) {
            continue;
        }
        c = *s->p++;
        switch (js_class[c]) {
        case JS_C_QUOTE:
            out->off = off;
            out->len = js_off(s) - 1 - off;
            out->dlen = dlen;
            out->esc = esc;
            return LG_OK;
        case JS_C_ESC:
            esc = true;
            if (js_escape(s, &dlen) != LG_OK) {
                return LG_EINVAL;
            }
            break;
        case JS_C_CTRL:
            s->p--;
            return js_fail(s, "control character in a string");
        case JS_C_U2:
        case JS_C_U3:
        case JS_C_U4: {
            int n = js_class[c] - JS_C_U2 + 2;

            if (js_utf8(s, c, n) != LG_OK) {
                return LG_EINVAL;
            }
            dlen += (uint32_t)n;
            break;
        }
        default:
            s->p--;
            return js_fail(s, "invalid UTF-8");
        }
    }
}

static bool
js_digit(int c)
{
    return c >= '0' && c <= '9';
}

/* A string value: its token when types has strings. */
static int
js_string_value(struct lg_jsonscan *s, uint32_t types, uint8_t key, struct js_val *v)
{
    struct js_str str;
    struct lg_jsonscan_tok *t;
    int rc = js_string(s, &str);

    v->type = LG_JSONSCAN_STR;
    if (rc != LG_OK || !(types & LG_JSONSCAN_M(LG_JSONSCAN_STR))) {
        return rc;
    }
    if ((t = js_push(s, LG_JSONSCAN_STR, str.off, key)) == NULL) {
        return LG_ENOMEM;
    }
    t->len = str.len;
    t->aux = str.dlen;
    t->esc = str.esc;
    v->recorded = true;
    return LG_OK;
}

/* Reals must be finite, as jansson's strtod check demands: this one may not be. */
static int
js_real_check(struct lg_jsonscan *s, uint32_t off, uint32_t len)
{
    char buf[64], *num = buf, *end;
    double d;

    if (len >= sizeof(buf) && (num = malloc((size_t)len + 1)) == NULL) {
        return LG_ENOMEM;
    }
    num[lg_jsonscan_raw_copy(s, off, len, num, len)] = '\0';
    errno = 0;
    d = strtod(num, &end);
    if (num != buf) {
        free(num);
    }
    if ((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE) {
        if (s->err == NULL) {
            s->err = "real number out of range";
            s->err_off = off;
        }
        return LG_EINVAL;
    }
    return LG_OK;
}

/*
 * A number, with jansson's limits: integers within int64, reals finite.
 * A real is below 10^(integer digits + exponent): only one where that
 * exceeds 10^308 goes through strtod (js_real_check).
 */
static int
js_number(struct lg_jsonscan *s, uint32_t types, uint8_t key, struct js_val *v)
{
    uint32_t off = js_off(s), len;
    bool neg = false, real = false;
    uint64_t n = 0, limit;
    bool overflow = false;
    int64_t int_digits = 1, exponent = 0; /* "0" counts one digit */
    struct lg_jsonscan_tok *t;
    int c = js_peek(s);

    if (c == '-') {
        neg = true;
        s->p++;
        c = js_peek(s);
    }
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (c == '0') {
        s->p++;
        if (js_digit(js_peek(s))) {
            return js_fail(s, "invalid number");
        }
    } else if (js_digit(c)) {
        while (js_digit(c = js_peek(s))) {
            uint64_t d = (uint64_t)(c - '0');

            if (n > (limit - d) / 10) {
                overflow = true;
            } else {
                n = n * 10 + d;
            }
            s->p++;
        }
        int_digits = js_off(s) - off - neg;
    } else {
        return js_fail(s, "invalid number");
    }
    c = js_peek(s);
    if (c == '.') {
        real = true;
        s->p++;
        if (!js_digit(js_peek(s))) {
            return js_fail(s, "invalid number");
        }
        while (js_digit(js_peek(s))) {
            s->p++;
        }
        c = js_peek(s);
    }
    if (c == 'e' || c == 'E') {
        bool exponent_neg;

        real = true;
        s->p++;
        c = js_peek(s);
        exponent_neg = c == '-';
        if (c == '+' || c == '-') {
            s->p++;
        }
        if (!js_digit(js_peek(s))) {
            return js_fail(s, "invalid number");
        }
        while (js_digit(c = js_peek(s))) {
            if (exponent < 100000) { /* 10^100000 is big and 10^-100000 tiny, whatever follows */
                exponent = exponent * 10 + (c - '0');
            }
            s->p++;
        }
        if (exponent_neg) {
            exponent = -exponent;
        }
    }
    if (!real && overflow) {
        return js_fail(s, "integer out of range");
    }
    len = js_off(s) - off;
    if (real && int_digits + exponent > 308) {
        int rc = js_real_check(s, off, len);

        if (rc != LG_OK) {
            return rc;
        }
    }
    v->type = real ? LG_JSONSCAN_REAL : LG_JSONSCAN_INT;
    if (!(types & LG_JSONSCAN_M(v->type))) {
        return LG_OK;
    }
    if ((t = js_push(s, v->type, off, key)) == NULL) {
        return LG_ENOMEM;
    }
    t->len = len;
    v->recorded = true;
    return LG_OK;
}

static int
js_literal(struct lg_jsonscan *s, const char *word, uint8_t type, uint32_t types, uint8_t key,
           struct js_val *v)
{
    uint32_t off = js_off(s);

    for (const char *w = word; *w != '\0'; w++) {
        if (js_get(s) != (unsigned char)*w) {
            return js_fail(s, "invalid token");
        }
    }
    v->type = type;
    if (!(types & LG_JSONSCAN_M(type))) {
        return LG_OK;
    }
    if (js_push(s, type, off, key) == NULL) {
        return LG_ENOMEM;
    }
    v->recorded = true;
    return LG_OK;
}

/*
 * The unescaped bytes of a member's name that unescapes to at most
 * LG_JSONSCAN_KEY_MAX bytes and was just scanned: in place when it has no
 * escapes and lies in the segment being read (the usual case), else copied
 * into buf.
 */
static const char *
js_name_bytes(const struct lg_jsonscan *s, const struct js_str *name, char *buf)
{
    if (!name->esc && name->off >= s->seg_off) {
        return (const char *)s->p - 1 - name->len; /* the closing quote is p[-1] */
    }
    if (!name->esc) {
        lg_jsonscan_raw_copy(s, name->off, name->len, buf, LG_JSONSCAN_KEY_MAX);
    } else {
        const struct lg_jsonscan_tok t = {
            .type = LG_JSONSCAN_STR,
            .esc = true,
            .off = name->off,
            .len = name->len,
            .aux = name->dlen,
        };
        struct lg_jsonscan_copy c = { buf, 0, LG_JSONSCAN_KEY_MAX };

        lg_jsonscan_unescape(s, &t, LG_JSONSCAN_KEY_MAX, lg_jsonscan_copy_cb, &c);
    }
    return buf;
}

/* The index of want's key that name is, or LG_JSONSCAN_NO_KEY. */
static uint8_t
js_key_find(const struct lg_jsonscan *s, const struct js_str *name,
            const struct lg_jsonscan_want *want)
{
    char buf[LG_JSONSCAN_KEY_MAX];
    const char *bytes = NULL;

    if (want->by_len != NULL) {
        /* the keys of the name's length alone, in the same order */
        if (name->dlen > LG_JSONSCAN_KEY_MAX) {
            return LG_JSONSCAN_NO_KEY;
        }
        for (uint32_t m = want->by_len[name->dlen]; m != 0; m &= m - 1) {
            uint32_t k = (uint32_t)__builtin_ctz(m);

            if (bytes == NULL) {
                bytes = js_name_bytes(s, name, buf);
            }
            if (memcmp(bytes, want->keys[k].name, name->dlen) == 0) {
                return (uint8_t)k;
            }
        }
        return LG_JSONSCAN_NO_KEY;
    }
    for (uint32_t k = 0; k < want->nkeys; k++) {
        if (want->keys[k].len != name->dlen) {
            continue;
        }
        if (bytes == NULL) {
            bytes = js_name_bytes(s, name, buf);
        }
        if (memcmp(bytes, want->keys[k].name, name->dlen) == 0) {
            return (uint8_t)k;
        }
    }
    return LG_JSONSCAN_NO_KEY;
}

static int js_value(struct lg_jsonscan *s, unsigned depth, const struct lg_jsonscan_want *want,
                    uint32_t types, uint8_t key, bool elem, struct js_val *v);

/*
 * An object or an array; its token when rec, and of its contents what want
 * says (lg_jsonscan_want). elem: it is an array's element.
 */
static int
js_container(struct lg_jsonscan *s, unsigned depth, bool object,
             const struct lg_jsonscan_want *want, bool rec, uint8_t key, bool elem,
             struct js_val *v)
{
    uint32_t idx = s->ntok, n = 0, kept = 0, ids = 0;
    int close = object ? '}' : ']';
    int c, rc;

    v->type = object ? LG_JSONSCAN_OBJ : LG_JSONSCAN_ARR;
    if (rec && js_push(s, v->type, js_off(s), key) == NULL) {
        return LG_ENOMEM;
    }
    if (!rec || want == NULL) {
        want = NULL; /* nothing inside is recorded */
    }
    s->p++;
    c = js_ws(s);
    if (c == close) {
        s->p++;
    } else {
        for (;;) {
            const struct lg_jsonscan_want *sub = NULL;
            uint32_t types = 0;
            uint8_t k = LG_JSONSCAN_NO_KEY;
            struct js_val e; /* type set by js_value, n for arrays */

            if (object) {
                struct js_str name;

                if (c != '"') {
                    return js_fail(s, "string or '}' expected");
                }
                if (js_string(s, &name) != LG_OK) {
                    return LG_EINVAL;
                }
                if (want != NULL && want->nkeys > 0
                    && (k = js_key_find(s, &name, want)) != LG_JSONSCAN_NO_KEY) {
                    types = LG_JSONSCAN_M_ALL;
                    sub = want->sub != NULL ? want->sub[k] : NULL;
                }
                if (js_ws(s) != ':') {
                    return js_fail(s, "':' expected");
                }
                s->p++;
            } else if (want != NULL) {
                types = want->elem_types;
                sub = want->elem;
            }
            e.recorded = false;
            if ((rc = js_value(s, depth + 1, sub, types, k, !object, &e)) != LG_OK) {
                return rc;
            }
            n++;
            if (e.recorded) {
                kept++;
            } else if (!object && rec) {
                ids += e.type == LG_JSONSCAN_INT ? 1 : e.type == LG_JSONSCAN_ARR ? e.n : 0;
            }
            c = js_ws(s);
            if (c == ',') {
                s->p++;
                c = js_ws(s);
                continue;
            }
            if (c != close) {
                return js_fail(s, object ? "',' or '}' expected" : "',' or ']' expected");
            }
            s->p++;
            break;
        }
    }
    v->n = n;
    if (!rec) {
        return LG_OK;
    }
    if (object && elem && want != NULL && want->nkeys > 0 && kept == 0) {
        s->ntok = idx; /* an element without a member looked for: nothing to read */
        return LG_OK;
    }
    s->tok[idx].len = n;
    s->tok[idx].aux = s->ntok;
    if (!object) {
        s->tok[idx].ids = ids;
    }
    v->recorded = true;
    return LG_OK;
}

/* A value: its token when its type is in types, and of its contents what want says. */
static int
js_value(struct lg_jsonscan *s, unsigned depth, const struct lg_jsonscan_want *want, uint32_t types,
         uint8_t key, bool elem, struct js_val *v)
{
    int c = js_ws(s);

    if (depth > JS_MAX_DEPTH) {
        return js_fail(s, "maximum nesting depth reached");
    }
    switch (c) {
    case '{':
        return js_container(s, depth, true, want, types & LG_JSONSCAN_M(LG_JSONSCAN_OBJ), key, elem,
                            v);
    case '[':
        return js_container(s, depth, false, want, types & LG_JSONSCAN_M(LG_JSONSCAN_ARR), key,
                            elem, v);
    case '"':
        return js_string_value(s, types, key, v);
    case 't':
        return js_literal(s, "true", LG_JSONSCAN_TRUE, types, key, v);
    case 'f':
        return js_literal(s, "false", LG_JSONSCAN_FALSE, types, key, v);
    case 'n':
        return js_literal(s, "null", LG_JSONSCAN_NULL, types, key, v);
    case -1:
        return js_fail(s, "unexpected end of input");
    default:
        if (c == '-' || js_digit(c)) {
            return js_number(s, types, key, v);
        }
        return js_fail(s, "invalid token");
    }
}

static int
js_parse(struct lg_jsonscan *s, const struct lg_jsonscan_want *want)
{
    struct js_val v = { 0 };
    int c = js_ws(s);
    int rc;

    if (c != '{' && c != '[') {
        return js_fail(s, "'{' or '[' expected");
    }
    if ((rc = js_value(s, 1, want, LG_JSONSCAN_M_ALL, LG_JSONSCAN_NO_KEY, false, &v)) != LG_OK) {
        return rc;
    }
    if (js_ws(s) != -1) {
        return js_fail(s, "end of input expected after the JSON value");
    }
    return LG_OK;
}

/* ---- random access to the body for the tape's strings -------------------- */

/* Calls fn on the raw bytes [off, off + len) of the body, segment by segment. */
static void
js_raw(const struct lg_jsonscan *s, uint32_t off, uint32_t len,
       void (*fn)(void *arg, const char *p, size_t n), void *arg)
{
    int i = 0;

    while (i + 1 < s->nvec && s->starts[i + 1] <= off) {
        i++;
    }
    while (len > 0 && i < s->nvec) {
        uint32_t in = off - s->starts[i];
        uint32_t k = LG_MIN(len, (uint32_t)s->vec[i].iov_len - in);

        fn(arg, (const char *)s->vec[i].iov_base + in, k);
        off += k;
        len -= k;
        i++;
    }
}


void
lg_jsonscan_copy_cb(void *arg, const char *p, size_t n)
{
    struct lg_jsonscan_copy *c = arg;
    size_t k = LG_MIN(n, c->cap - c->n);

    memcpy(c->dst + c->n, p, k);
    c->n += k;
}

/* Up to cap raw bytes of a token into dst; returns how many. */
size_t
lg_jsonscan_raw_copy(const struct lg_jsonscan *s, uint32_t off, uint32_t len, char *dst, size_t cap)
{
    struct lg_jsonscan_copy c = { dst, 0, cap };

    js_raw(s, off, LG_MIN(len, cap), lg_jsonscan_copy_cb, &c);
    return c.n;
}

static void
js_put_utf8(uint32_t cp, char *out, size_t *n)
{
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xc0 | (cp >> 6));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xe0 | (cp >> 12));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        out[(*n)++] = (char)(0xf0 | (cp >> 18));
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

/* Reads the raw bytes of one string token in order, across segments. */
struct js_cur {
    const struct lg_jsonscan *s;
    int seg;
    const unsigned char *p;
    const unsigned char *end;
    uint32_t left;
};

static void
js_cur_init(struct js_cur *c, const struct lg_jsonscan *s, const struct lg_jsonscan_tok *t)
{
    c->s = s;
    c->seg = 0;
    while (c->seg + 1 < s->nvec && s->starts[c->seg + 1] <= t->off) {
        c->seg++;
    }
    c->p = (const unsigned char *)s->vec[c->seg].iov_base + (t->off - s->starts[c->seg]);
    c->end = (const unsigned char *)s->vec[c->seg].iov_base + s->vec[c->seg].iov_len;
    c->left = t->len;
}

/* The next raw byte (the scanner checked the token: it is there). */
static int
js_cur_get(struct js_cur *c)
{
    while (c->p == c->end) {
        c->seg++;
        c->p = c->s->vec[c->seg].iov_base;
        c->end = c->p + c->s->vec[c->seg].iov_len;
    }
    c->left--;
    return *c->p++;
}

static uint32_t
js_cur_hex4(struct js_cur *c)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        int h = js_cur_get(c) | 0x20;

        v = v * 16 + (uint32_t)(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    return v;
}

/*
 * Calls fn on the first `limit` unescaped bytes of string token t (a cut
 * may fall inside a multi-byte character, as with any byte count).
 */
void
lg_jsonscan_unescape(const struct lg_jsonscan *s, const struct lg_jsonscan_tok *t, size_t limit,
                     void (*fn)(void *arg, const char *p, size_t n), void *arg)
{
    char out[256];
    size_t n = 0;
    struct js_cur c;

    if (!t->esc) {
        js_raw(s, t->off, (uint32_t)LG_MIN((size_t)t->len, limit), fn, arg);
        return;
    }
    js_cur_init(&c, s, t);
    while (c.left > 0 && limit > 0) {
        char ch[4];
        size_t k = 0;
        int b = js_cur_get(&c);

        if (b != '\\') {
            ch[k++] = (char)b;
        } else {
            switch (b = js_cur_get(&c)) {
            case 'b':
                ch[k++] = '\b';
                break;
            case 'f':
                ch[k++] = '\f';
                break;
            case 'n':
                ch[k++] = '\n';
                break;
            case 'r':
                ch[k++] = '\r';
                break;
            case 't':
                ch[k++] = '\t';
                break;
            case 'u': {
                uint32_t cp = js_cur_hex4(&c);

                if (cp >= 0xd800 && cp <= 0xdbff) {
                    js_cur_get(&c); /* backslash */
                    js_cur_get(&c); /* u */
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (js_cur_hex4(&c) - 0xdc00);
                }
                js_put_utf8(cp, ch, &k);
                break;
            }
            default: /* " \ / */
                ch[k++] = (char)b;
                break;
            }
        }
        k = LG_MIN(k, limit);
        if (n + k > sizeof(out)) {
            fn(arg, out, n);
            n = 0;
        }
        memcpy(out + n, ch, k);
        n += k;
        limit -= k;
    }
    if (n > 0) {
        fn(arg, out, n);
    }
}


/* Index of the token after value i. */
uint32_t
lg_jsonscan_skip(const struct lg_jsonscan *s, uint32_t i)
{
    return s->tok[i].type == LG_JSONSCAN_OBJ || s->tok[i].type == LG_JSONSCAN_ARR ? s->tok[i].aux
                                                                                  : i + 1;
}

/*
 * One walk over the members recorded of object o (nothing found when o is
 * 0 or no object): found[k] is set to the value of the last member whose
 * name is key index k (jansson: the last duplicate wins), or to 0; with
 * second, second[k] to the value of the second such member, or to 0.
 */
void
lg_jsonscan_members(const struct lg_jsonscan *s, uint32_t o, uint32_t nkeys, uint32_t *found,
                    uint32_t *second)
{
    memset(found, 0, nkeys * sizeof(*found));
    if (second != NULL) {
        memset(second, 0, nkeys * sizeof(*second));
    }
    if (o == 0 || s->tok[o - 1].type != LG_JSONSCAN_OBJ) {
        return;
    }
    for (uint32_t i = o; i < s->tok[o - 1].aux; i = lg_jsonscan_skip(s, i)) {
        uint32_t k = s->tok[i].key;

        if (k >= nkeys) {
            continue;
        }
        if (second != NULL && found[k] != 0 && second[k] == 0) {
            second[k] = i + 1;
        }
        found[k] = i + 1;
    }
}

/* The value of the last member of object o named by key index k, or 0. */
uint32_t
lg_jsonscan_member(const struct lg_jsonscan *s, uint32_t o, uint32_t k)
{
    uint32_t found = 0;

    if (o == 0 || s->tok[o - 1].type != LG_JSONSCAN_OBJ) {
        return 0;
    }
    for (uint32_t i = o; i < s->tok[o - 1].aux; i = lg_jsonscan_skip(s, i)) {
        if (s->tok[i].key == k) {
            found = i + 1;
        }
    }
    return found;
}

/* ---- the scan ------------------------------------------------------------ */

/* Line and column (1-based, bytes) of body offset `off`, for error messages. */
static void
js_position(const struct lg_jsonscan *s, uint32_t off, unsigned *line, unsigned *col)
{
    uint32_t pos = 0;

    *line = 1;
    *col = 1;
    for (int i = 0; i < s->nvec && pos < off; i++) {
        const char *p = s->vec[i].iov_base;

        for (size_t k = 0; k < s->vec[i].iov_len && pos < off; k++, pos++) {
            if (p[k] == '\n') {
                (*line)++;
                *col = 1;
            } else {
                (*col)++;
            }
        }
    }
}

int
lg_jsonscan_run(struct lg_jsonscan *s, const struct evbuffer_iovec *vec, int nvec,
                const struct lg_jsonscan_want *want, struct lg_jsonscan_stack *stack, char *err,
                size_t errlen)
{
    static const struct evbuffer_iovec none = { NULL, 0 };
    uint32_t *starts = stack->starts;
    int rc;

    memset(s, 0, sizeof(*s));
    s->tok = stack->tok;
    s->cap = LG_JSONSCAN_STACK_TOKS;
    if (nvec > LG_JSONSCAN_STACK_SEGS) {
        starts = malloc((size_t)nvec * sizeof(*starts));
        if (starts == NULL) {
            s->starts = stack->starts;
            snprintf(err, errlen, "no memory to read the request body");
            return LG_ENOMEM;
        }
        s->starts_heap = true;
    }
    for (int i = 0; i < nvec; i++) {
        starts[i] = i == 0 ? 0 : starts[i - 1] + (uint32_t)vec[i - 1].iov_len;
    }
    s->vec = vec;
    s->nvec = nvec;
    s->starts = starts;
    if (nvec > 0) {
        s->p = vec[0].iov_base;
        s->end = s->p + vec[0].iov_len;
        s->off_bias = -(uintptr_t)s->p;
    } else {
        s->vec = &none;
        s->nvec = 1;
    }
    rc = js_parse(s, want);
    if (rc == LG_ENOMEM) {
        if (s->capped) {
            snprintf(err, errlen,
                     "the request body has more than %u values the gateway reads (messages, "
                     "content parts, prompts)",
                     LG_JSONSCAN_MAX_TOKS);
        } else {
            snprintf(err, errlen, "no memory to read the request body");
        }
        return LG_ENOMEM;
    }
    if (rc != LG_OK) {
        unsigned line, col;

        js_position(s, s->err_off, &line, &col);
        snprintf(err, errlen, "malformed JSON body at line %u column %u: %s", line, col, s->err);
        return LG_EINVAL;
    }
    return LG_OK;
}

void
lg_jsonscan_done(struct lg_jsonscan *s)
{
    if (s->tok_heap) {
        free(s->tok);
    }
    if (s->starts_heap) {
        free(s->starts);
    }
}
