/*
 * jsonscan.c: a validating JSON scanner over a body's extents (the
 * evbuffer's, never linearised) that accepts exactly what jansson's
 * json_loadb(..., 0) accepts (RFC 8259, UTF-8 checked, no \u0000, integers
 * within int64, finite reals, nesting up to 2048, an object or an array at
 * the top) and records each value as one token of a flat tape; then random
 * access back into the body for the tape's strings, and the walk of an
 * object's members with jansson's semantics (the last of duplicate keys
 * wins; keys compare after unescaping), all the names read from it in one
 * walk. About 40 times fewer instructions than building a jansson document,
 * and no allocation for an ordinary body (tests/fuzz/fuzz_openai_ref.c
 * compares the two on every input, through openai.c).
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

static struct lg_jsonscan_tok *
js_push(struct lg_jsonscan *s, uint8_t type, uint32_t off)
{
    struct lg_jsonscan_tok *t;

    if (s->ntok == s->cap) {
        bool on_stack = s->cap == LG_JSONSCAN_STACK_TOKS;
        struct lg_jsonscan_tok *n = on_stack ? lg_xmalloc(2 * s->cap * sizeof(*n))
                                             : lg_xrealloc(s->tok, 2 * s->cap * sizeof(*n));

        if (on_stack) {
            memcpy(n, s->tok, s->cap * sizeof(*n));
        }
        s->tok = n;
        s->cap *= 2;
    }
    t = &s->tok[s->ntok++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    t->off = off;
    return t;
}

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
 * scan is most of the work of reading its body.
 */
static const unsigned char *
js_plain_run(const unsigned char *p, const unsigned char *end)
{
#ifdef JS_AVX2
    if (end - p >= 64 && __builtin_cpu_supports("avx2")) {
        p = js_plain_run_avx2(p, end);
    }
#endif
#ifdef __SSE2__
    const __m128i v_space = _mm_set1_epi8(0x20), v_quote = _mm_set1_epi8('"');
    const __m128i v_bslash = _mm_set1_epi8('\\');

    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        /* a signed compare: bytes >= 0x80 are negative, below ' ' as well */
        __m128i m =
            _mm_or_si128(_mm_cmplt_epi8(x, v_space),
                         _mm_or_si128(_mm_cmpeq_epi8(x, v_quote), _mm_cmpeq_epi8(x, v_bslash)));
        unsigned bits = (unsigned)_mm_movemask_epi8(m);

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

static int
js_string(struct lg_jsonscan *s)
{
    uint32_t off, dlen = 0;
    bool esc = false;
    struct lg_jsonscan_tok *t;

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
            t = js_push(s, LG_JSONSCAN_STR, off);
            t->len = js_off(s) - 1 - off;
            t->aux = dlen;
            t->esc = esc;
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

/*
 * A number, with jansson's limits: integers within int64, reals finite.
 * A real is below 10^(integer digits + exponent): only one where that
 * exceeds 10^308 is marked big, for js_check_reals to run strtod on.
 */
static int
js_number(struct lg_jsonscan *s)
{
    uint32_t off = js_off(s);
    bool neg = false, real = false;
    uint64_t v = 0, limit;
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

            if (v > (limit - d) / 10) {
                overflow = true;
            } else {
                v = v * 10 + d;
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
    t = js_push(s, real ? LG_JSONSCAN_REAL : LG_JSONSCAN_INT, off);
    t->len = js_off(s) - off;
    if (real && int_digits + exponent > 308) {
        t->big = true;
        if (s->first_big == 0) {
            s->first_big = s->ntok;
        }
    }
    return LG_OK;
}

static int
js_literal(struct lg_jsonscan *s, const char *word, uint8_t type)
{
    uint32_t off = js_off(s);

    for (const char *w = word; *w != '\0'; w++) {
        if (js_get(s) != (unsigned char)*w) {
            return js_fail(s, "invalid token");
        }
    }
    js_push(s, type, off);
    return LG_OK;
}

static int js_value(struct lg_jsonscan *s, unsigned depth);

static int
js_container(struct lg_jsonscan *s, unsigned depth, bool object)
{
    uint32_t idx = s->ntok, n = 0;
    int close = object ? '}' : ']';
    int c;

    js_push(s, object ? LG_JSONSCAN_OBJ : LG_JSONSCAN_ARR, js_off(s));
    s->p++;
    c = js_ws(s);
    if (c == close) {
        s->p++;
    } else {
        for (;;) {
            if (object) {
                if (c != '"') {
                    return js_fail(s, "string or '}' expected");
                }
                if (js_string(s) != LG_OK) {
                    return LG_EINVAL;
                }
                if (js_ws(s) != ':') {
                    return js_fail(s, "':' expected");
                }
                s->p++;
            }
            if (js_value(s, depth + 1) != LG_OK) {
                return LG_EINVAL;
            }
            n++;
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
    s->tok[idx].len = n;
    s->tok[idx].aux = s->ntok;
    return LG_OK;
}

static int
js_value(struct lg_jsonscan *s, unsigned depth)
{
    int c = js_ws(s);

    if (depth > JS_MAX_DEPTH) {
        return js_fail(s, "maximum nesting depth reached");
    }
    switch (c) {
    case '{':
        return js_container(s, depth, true);
    case '[':
        return js_container(s, depth, false);
    case '"':
        return js_string(s);
    case 't':
        return js_literal(s, "true", LG_JSONSCAN_TRUE);
    case 'f':
        return js_literal(s, "false", LG_JSONSCAN_FALSE);
    case 'n':
        return js_literal(s, "null", LG_JSONSCAN_NULL);
    case -1:
        return js_fail(s, "unexpected end of input");
    default:
        if (c == '-' || js_digit(c)) {
            return js_number(s);
        }
        return js_fail(s, "invalid token");
    }
}

/* Reals must be finite, as jansson's strtod check demands. */
static int js_check_reals(struct lg_jsonscan *s);

static int
js_parse(struct lg_jsonscan *s)
{
    int c = js_ws(s);

    if (c != '{' && c != '[') {
        return js_fail(s, "'{' or '[' expected");
    }
    if (js_value(s, 1) != LG_OK) {
        return LG_EINVAL;
    }
    if (js_ws(s) != -1) {
        return js_fail(s, "end of input expected after the JSON value");
    }
    return js_check_reals(s);
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


/*
 * The unescaped bytes of key token t, which unescapes to at most LG_JSONSCAN_KEY_MAX
 * bytes: in place when it has no escapes and lies in one segment (the usual
 * case), else copied into buf.
 */
static const char *
js_key_bytes(const struct lg_jsonscan *s, const struct lg_jsonscan_tok *t, char *buf)
{
    struct lg_jsonscan_copy c = { buf, 0, LG_JSONSCAN_KEY_MAX };

    if (!t->esc) {
        int i = 0;

        while (i + 1 < s->nvec && s->starts[i + 1] <= t->off) {
            i++;
        }
        if (t->off - s->starts[i] + t->len <= s->vec[i].iov_len) {
            return (const char *)s->vec[i].iov_base + (t->off - s->starts[i]);
        }
        js_raw(s, t->off, t->len, lg_jsonscan_copy_cb, &c);
        return buf;
    }
    lg_jsonscan_unescape(s, t, LG_JSONSCAN_KEY_MAX, lg_jsonscan_copy_cb, &c);
    return buf;
}

/* Index of the token after value i. */
uint32_t
lg_jsonscan_skip(const struct lg_jsonscan *s, uint32_t i)
{
    return s->tok[i].type == LG_JSONSCAN_OBJ || s->tok[i].type == LG_JSONSCAN_ARR ? s->tok[i].aux
                                                                                  : i + 1;
}

/*
 * One walk over the members of object o (nothing found when o is 0 or no
 * object): found[k] is set to the value of the last member named keys[k]
 * (jansson: the last duplicate wins), or to 0. Names compare unescaped; a
 * member's name is read only when its length is one looked for. With dup,
 * *dup is set to k + 1 for the first of keys that comes a second time (in
 * the order of those second times; 0: none).
 */
void
lg_jsonscan_members(const struct lg_jsonscan *s, uint32_t o, const struct lg_jsonscan_key *keys,
                    size_t nkeys, uint32_t *found, uint32_t *dup)
{
    char buf[LG_JSONSCAN_KEY_MAX];

    memset(found, 0, nkeys * sizeof(*found));
    if (dup != NULL) {
        *dup = 0;
    }
    if (o == 0 || s->tok[o - 1].type != LG_JSONSCAN_OBJ) {
        return;
    }
    for (uint32_t i = o; i < s->tok[o - 1].aux; i = lg_jsonscan_skip(s, i + 1)) {
        const struct lg_jsonscan_tok *t = &s->tok[i];
        const char *name = NULL;

        for (size_t k = 0; k < nkeys; k++) {
            if (keys[k].len != t->aux) {
                continue;
            }
            if (name == NULL) {
                name = js_key_bytes(s, t, buf);
            }
            if (memcmp(name, keys[k].name, keys[k].len) == 0) {
                if (found[k] != 0 && dup != NULL && *dup == 0) {
                    *dup = (uint32_t)k + 1;
                }
                found[k] = i + 2;
                break;
            }
        }
    }
}

/* The value of the last member named key of object o, or 0. */
uint32_t
lg_jsonscan_member(const struct lg_jsonscan *s, uint32_t o, const struct lg_jsonscan_key *key)
{
    uint32_t found;

    lg_jsonscan_members(s, o, key, 1, &found, NULL);
    return found;
}

static int
js_check_reals(struct lg_jsonscan *s)
{
    /* only the reals marked big can be out of range (js_number) */
    for (uint32_t i = s->first_big == 0 ? s->ntok : s->first_big - 1; i < s->ntok; i++) {
        char buf[64], *num = buf, *end;
        const struct lg_jsonscan_tok *t = &s->tok[i];
        double d;

        if (t->type != LG_JSONSCAN_REAL || !t->big) {
            continue;
        }
        if (t->len >= sizeof(buf)) {
            num = lg_xmalloc((size_t)t->len + 1);
        }
        num[lg_jsonscan_raw_copy(s, t->off, t->len, num, t->len)] = '\0';
        errno = 0;
        d = strtod(num, &end);
        if (num != buf) {
            free(num);
        }
        if ((d == HUGE_VAL || d == -HUGE_VAL) && errno == ERANGE) {
            s->err_off = t->off;
            s->err = "real number out of range";
            return LG_EINVAL;
        }
    }
    return LG_OK;
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
                struct lg_jsonscan_stack *stack, char *err, size_t errlen)
{
    static const struct evbuffer_iovec none = { NULL, 0 };
    uint32_t *starts = stack->starts;

    memset(s, 0, sizeof(*s));
    s->stack_tok = stack->tok;
    s->stack_starts = stack->starts;
    if (nvec > LG_JSONSCAN_STACK_SEGS) {
        starts = lg_xmalloc((size_t)nvec * sizeof(*starts));
    }
    for (int i = 0; i < nvec; i++) {
        starts[i] = i == 0 ? 0 : starts[i - 1] + (uint32_t)vec[i - 1].iov_len;
    }
    s->vec = vec;
    s->nvec = nvec;
    s->starts = starts;
    s->tok = stack->tok;
    s->cap = LG_JSONSCAN_STACK_TOKS;
    if (nvec > 0) {
        s->p = vec[0].iov_base;
        s->end = s->p + vec[0].iov_len;
        s->off_bias = -(uintptr_t)s->p;
    } else {
        s->vec = &none;
        s->nvec = 1;
    }
    if (js_parse(s) != LG_OK) {
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
    if (s->tok != s->stack_tok) {
        free(s->tok);
    }
    if (s->starts != s->stack_starts) {
        free(s->starts);
    }
}
