/*
 * openai.c: request-body inspection and OpenAI-style error bodies.
 *
 * Owns nothing past a call: the token tape lives only inside
 * lg_openai_inspect() (on the stack for ordinary bodies). Bodies are bounded
 * by the caller (max_body_bytes, at most 1 GiB: offsets fit in 32 bits)
 * before they reach here.
 */
#include "openai.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define OA_AVX2 1 /* compiled in for every x86-64 build, used where the CPU has it */
#endif

/*
 * The body is read once by a validating scanner that accepts exactly what
 * jansson's json_loadb(..., 0) accepts (RFC 8259, UTF-8 checked, no \u0000,
 * integers within int64, finite reals, nesting up to 2048, an object or an
 * array at the top) and records each value as one token of a flat tape. The
 * fields are then read from the tape with jansson's semantics (the last of
 * duplicate keys wins; keys compare after unescaping), in one walk of each
 * object for all the names read from it. No string is copied except the
 * model name; the hashed prompt prefix is unescaped on the fly.
 * About 40 times fewer instructions than building a jansson document, and
 * no allocation for an ordinary body (tests/fuzz/fuzz_openai_ref.c compares the
 * two on every input).
 */

#define OA_MAX_DEPTH  2048 /* jansson's JSON_PARSER_MAX_DEPTH */
#define OA_STACK_TOKS 128  /* tape entries kept on the stack */

enum { OA_OBJ = 1, OA_ARR, OA_STR, OA_INT, OA_REAL, OA_TRUE, OA_FALSE, OA_NULL };

struct oa_tok {
    uint8_t type;
    bool esc;     /* string: has backslash escapes */
    bool big;     /* real: may be out of a double's range (strtod decides) */
    uint32_t off; /* string: first byte after the quote; number: first byte */
    uint32_t len; /* string, number: raw length; array: element count */
    uint32_t aux; /* string: unescaped length; object, array: index after its last token */
};

struct oa_scan {
    const struct evbuffer_iovec *vec;
    int nvec;
    int seg;                  /* segment being read */
    const unsigned char *p;   /* next byte */
    const unsigned char *end; /* end of the segment */
    uint32_t seg_off;         /* body offset of the segment's first byte */
    uintptr_t off_bias;       /* seg_off - the segment's address: p + off_bias = p's offset */
    uint32_t *starts;         /* body offset of each segment (random access) */
    struct oa_tok *tok;
    uint32_t ntok;
    uint32_t cap;
    const char *err; /* static: why the body was refused */
    uint32_t err_off;
    uint32_t first_big; /* index + 1 of the first real marked big; 0 = none */
};

/* Byte classes inside a string: 0 = plain, else what needs a look. */
enum { OA_C_PLAIN = 0, OA_C_QUOTE, OA_C_ESC, OA_C_CTRL, OA_C_U2, OA_C_U3, OA_C_U4, OA_C_BAD };

static const uint8_t oa_class[256] = {
    [0x00 ... 0x1f] = OA_C_CTRL, ['"'] = OA_C_QUOTE,         ['\\'] = OA_C_ESC,
    [0x80 ... 0xc1] = OA_C_BAD,  [0xc2 ... 0xdf] = OA_C_U2,  [0xe0 ... 0xef] = OA_C_U3,
    [0xf0 ... 0xf4] = OA_C_U4,   [0xf5 ... 0xff] = OA_C_BAD,
};

static uint32_t
oa_off(const struct oa_scan *s)
{
    return (uint32_t)((uintptr_t)s->p + s->off_bias); /* wraps to the offset */
}

/* Moves to the next non-empty segment; false at the end of the body. */
static bool
oa_fill(struct oa_scan *s)
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
oa_peek(struct oa_scan *s)
{
    if (s->p == s->end && !oa_fill(s)) {
        return -1;
    }
    return *s->p;
}

static inline int
oa_get(struct oa_scan *s)
{
    int c = oa_peek(s);

    if (c >= 0) {
        s->p++;
    }
    return c;
}

static int
oa_fail(struct oa_scan *s, const char *why)
{
    if (s->err == NULL) {
        s->err = why;
        s->err_off = oa_off(s);
    }
    return LG_EINVAL;
}

static int
oa_ws(struct oa_scan *s)
{
    int c;

    while ((c = oa_peek(s)) == ' ' || c == '\t' || c == '\n' || c == '\r') {
        s->p++;
    }
    return c;
}

static struct oa_tok *
oa_push(struct oa_scan *s, uint8_t type, uint32_t off)
{
    struct oa_tok *t;

    if (s->ntok == s->cap) {
        bool on_stack = s->cap == OA_STACK_TOKS;
        struct oa_tok *n = on_stack ? lg_xmalloc(2 * s->cap * sizeof(*n))
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
oa_hex4(struct oa_scan *s, uint32_t *out)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        int c = oa_get(s);

        if (c >= '0' && c <= '9') {
            v = v * 16 + (uint32_t)(c - '0');
        } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
            v = v * 16 + (uint32_t)((c | 0x20) - 'a' + 10);
        } else {
            return oa_fail(s, "invalid \\u escape");
        }
    }
    *out = v;
    return LG_OK;
}

/* After a backslash: checks one escape; adds its unescaped size to *dlen. */
static int
oa_escape(struct oa_scan *s, uint32_t *dlen)
{
    uint32_t cp, lo;

    switch (oa_get(s)) {
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
        return oa_fail(s, "invalid escape in a string");
    }
    if (oa_hex4(s, &cp) != LG_OK) {
        return LG_EINVAL;
    }
    if (cp == 0) {
        return oa_fail(s, "\\u0000 is not allowed in a string");
    }
    if (cp >= 0xdc00 && cp <= 0xdfff) {
        return oa_fail(s, "lone low surrogate in a \\u escape");
    }
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (oa_get(s) != '\\' || oa_get(s) != 'u' || oa_hex4(s, &lo) != LG_OK) {
            return oa_fail(s, "high surrogate without its low half in a \\u escape");
        }
        if (lo < 0xdc00 || lo > 0xdfff) {
            return oa_fail(s, "high surrogate without its low half in a \\u escape");
        }
        *dlen += 4;
        return LG_OK;
    }
    *dlen += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
    return LG_OK;
}

/* A multi-byte UTF-8 sequence of n bytes starting with lead (consumed). */
static int
oa_utf8(struct oa_scan *s, int lead, int n)
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
        int c = oa_get(s);

        if (c < lo || c > hi) {
            return oa_fail(s, "invalid UTF-8");
        }
        lo = 0x80;
        hi = 0xbf;
    }
    return LG_OK;
}

#ifdef OA_AVX2
/*
 * oa_plain_run's loop 64 bytes at a time, for CPUs that have AVX2. A byte
 * stops the run if it is below ' ' or 0x80 and above (one signed compare), or
 * if the table entry at its low four bits is the byte itself: '"' at 2, '\\'
 * at 12, every other entry its own index, a control byte that stops anyway
 * (vpshufb gives 0 for bytes with the top bit set, never the byte). Four
 * operations per 32 bytes instead of six for three compares.
 */
__attribute__((target("avx2"))) static const unsigned char *
oa_plain_run_avx2(const unsigned char *p, const unsigned char *end)
{
    __m256i v_space = _mm256_set1_epi8(0x20);
    const __m256i v_table = _mm256_setr_epi8(0, 1, '"', 3, 4, 5, 6, 7, 8, 9, 10, 11, '\\', 13, 14,
                                             15, 0, 1, '"', 3, 4, 5, 6, 7, 8, 9, 10, 11, '\\',
                                             13, 14, 15);

    /* keeps the compiler from turning `' ' > x` into a min and an equality */
    __asm__("" : "+x"(v_space));
#define OA_STOPS(x)                                                                            \
    _mm256_or_si256(_mm256_cmpgt_epi8(v_space, (x)),                                           \
                    _mm256_cmpeq_epi8(_mm256_shuffle_epi8(v_table, (x)), (x)))

    /* 64 bytes per test, then the 32 that hold the stop */
    while (end - p >= 64) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)p);
        __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
        __m256i a = OA_STOPS(x), b = OA_STOPS(y);

        if (_mm256_movemask_epi8(_mm256_or_si256(a, b)) != 0) {
            unsigned bits = (unsigned)_mm256_movemask_epi8(a);

            return bits != 0 ? p + __builtin_ctz(bits)
                             : p + 32 + __builtin_ctz((unsigned)_mm256_movemask_epi8(b));
        }
        p += 64;
    }
#undef OA_STOPS
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
oa_plain_run(const unsigned char *p, const unsigned char *end)
{
#ifdef OA_AVX2
    if (end - p >= 64 && __builtin_cpu_supports("avx2")) {
        p = oa_plain_run_avx2(p, end);
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
    while (p < end && oa_class[*p] == OA_C_PLAIN) {
        p++;
    }
    return p;
}

static int
oa_string(struct oa_scan *s)
{
    uint32_t off, dlen = 0;
    bool esc = false;
    struct oa_tok *t;

    s->p++; /* the opening quote */
    off = oa_off(s);
    for (;;) {
        const unsigned char *q;
        int c;

        if (s->p == s->end && !oa_fill(s)) {
            return oa_fail(s, "unterminated string");
        }
        q = oa_plain_run(s->p, s->end);
        dlen += (uint32_t)(q - s->p);
        s->p = q;
        if (q == s->end) {
            continue;
        }
        c = *s->p++;
        switch (oa_class[c]) {
        case OA_C_QUOTE:
            t = oa_push(s, OA_STR, off);
            t->len = oa_off(s) - 1 - off;
            t->aux = dlen;
            t->esc = esc;
            return LG_OK;
        case OA_C_ESC:
            esc = true;
            if (oa_escape(s, &dlen) != LG_OK) {
                return LG_EINVAL;
            }
            break;
        case OA_C_CTRL:
            s->p--;
            return oa_fail(s, "control character in a string");
        case OA_C_U2:
        case OA_C_U3:
        case OA_C_U4: {
            int n = oa_class[c] - OA_C_U2 + 2;

            if (oa_utf8(s, c, n) != LG_OK) {
                return LG_EINVAL;
            }
            dlen += (uint32_t)n;
            break;
        }
        default:
            s->p--;
            return oa_fail(s, "invalid UTF-8");
        }
    }
}

static bool
oa_digit(int c)
{
    return c >= '0' && c <= '9';
}

/*
 * A number, with jansson's limits: integers within int64, reals finite.
 * A real is below 10^(integer digits + exponent): only one where that
 * exceeds 10^308 is marked big, for oa_check_reals to run strtod on.
 */
static int
oa_number(struct oa_scan *s)
{
    uint32_t off = oa_off(s);
    bool neg = false, real = false;
    uint64_t v = 0, limit;
    bool overflow = false;
    int64_t int_digits = 1, exponent = 0; /* "0" counts one digit */
    struct oa_tok *t;
    int c = oa_peek(s);

    if (c == '-') {
        neg = true;
        s->p++;
        c = oa_peek(s);
    }
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    if (c == '0') {
        s->p++;
        if (oa_digit(oa_peek(s))) {
            return oa_fail(s, "invalid number");
        }
    } else if (oa_digit(c)) {
        while (oa_digit(c = oa_peek(s))) {
            uint64_t d = (uint64_t)(c - '0');

            if (v > (limit - d) / 10) {
                overflow = true;
            } else {
                v = v * 10 + d;
            }
            s->p++;
        }
        int_digits = oa_off(s) - off - neg;
    } else {
        return oa_fail(s, "invalid number");
    }
    c = oa_peek(s);
    if (c == '.') {
        real = true;
        s->p++;
        if (!oa_digit(oa_peek(s))) {
            return oa_fail(s, "invalid number");
        }
        while (oa_digit(oa_peek(s))) {
            s->p++;
        }
        c = oa_peek(s);
    }
    if (c == 'e' || c == 'E') {
        bool exponent_neg;

        real = true;
        s->p++;
        c = oa_peek(s);
        exponent_neg = c == '-';
        if (c == '+' || c == '-') {
            s->p++;
        }
        if (!oa_digit(oa_peek(s))) {
            return oa_fail(s, "invalid number");
        }
        while (oa_digit(c = oa_peek(s))) {
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
        return oa_fail(s, "integer out of range");
    }
    t = oa_push(s, real ? OA_REAL : OA_INT, off);
    t->len = oa_off(s) - off;
    if (real && int_digits + exponent > 308) {
        t->big = true;
        if (s->first_big == 0) {
            s->first_big = s->ntok;
        }
    }
    return LG_OK;
}

static int
oa_literal(struct oa_scan *s, const char *word, uint8_t type)
{
    uint32_t off = oa_off(s);

    for (const char *w = word; *w != '\0'; w++) {
        if (oa_get(s) != (unsigned char)*w) {
            return oa_fail(s, "invalid token");
        }
    }
    oa_push(s, type, off);
    return LG_OK;
}

static int oa_value(struct oa_scan *s, unsigned depth);

static int
oa_container(struct oa_scan *s, unsigned depth, bool object)
{
    uint32_t idx = s->ntok, n = 0;
    int close = object ? '}' : ']';
    int c;

    oa_push(s, object ? OA_OBJ : OA_ARR, oa_off(s));
    s->p++;
    c = oa_ws(s);
    if (c == close) {
        s->p++;
    } else {
        for (;;) {
            if (object) {
                if (c != '"') {
                    return oa_fail(s, "string or '}' expected");
                }
                if (oa_string(s) != LG_OK) {
                    return LG_EINVAL;
                }
                if (oa_ws(s) != ':') {
                    return oa_fail(s, "':' expected");
                }
                s->p++;
            }
            if (oa_value(s, depth + 1) != LG_OK) {
                return LG_EINVAL;
            }
            n++;
            c = oa_ws(s);
            if (c == ',') {
                s->p++;
                c = oa_ws(s);
                continue;
            }
            if (c != close) {
                return oa_fail(s, object ? "',' or '}' expected" : "',' or ']' expected");
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
oa_value(struct oa_scan *s, unsigned depth)
{
    int c = oa_ws(s);

    if (depth > OA_MAX_DEPTH) {
        return oa_fail(s, "maximum nesting depth reached");
    }
    switch (c) {
    case '{':
        return oa_container(s, depth, true);
    case '[':
        return oa_container(s, depth, false);
    case '"':
        return oa_string(s);
    case 't':
        return oa_literal(s, "true", OA_TRUE);
    case 'f':
        return oa_literal(s, "false", OA_FALSE);
    case 'n':
        return oa_literal(s, "null", OA_NULL);
    case -1:
        return oa_fail(s, "unexpected end of input");
    default:
        if (c == '-' || oa_digit(c)) {
            return oa_number(s);
        }
        return oa_fail(s, "invalid token");
    }
}

/* Reals must be finite, as jansson's strtod check demands. */
static int oa_check_reals(struct oa_scan *s);

static int
oa_parse(struct oa_scan *s)
{
    int c = oa_ws(s);

    if (c != '{' && c != '[') {
        return oa_fail(s, "'{' or '[' expected");
    }
    if (oa_value(s, 1) != LG_OK) {
        return LG_EINVAL;
    }
    if (oa_ws(s) != -1) {
        return oa_fail(s, "end of input expected after the JSON value");
    }
    return oa_check_reals(s);
}

/* ---- random access to the body for the tape's strings -------------------- */

/* Calls fn on the raw bytes [off, off + len) of the body, segment by segment. */
static void
oa_raw(const struct oa_scan *s, uint32_t off, uint32_t len,
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

struct oa_copy {
    char *dst;
    size_t n;
    size_t cap;
};

static void
oa_copy_cb(void *arg, const char *p, size_t n)
{
    struct oa_copy *c = arg;
    size_t k = LG_MIN(n, c->cap - c->n);

    memcpy(c->dst + c->n, p, k);
    c->n += k;
}

/* Up to cap raw bytes of a token into dst; returns how many. */
static size_t
oa_raw_copy(const struct oa_scan *s, uint32_t off, uint32_t len, char *dst, size_t cap)
{
    struct oa_copy c = { dst, 0, cap };

    oa_raw(s, off, LG_MIN(len, cap), oa_copy_cb, &c);
    return c.n;
}

static void
oa_put_utf8(uint32_t cp, char *out, size_t *n)
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
struct oa_cur {
    const struct oa_scan *s;
    int seg;
    const unsigned char *p;
    const unsigned char *end;
    uint32_t left;
};

static void
oa_cur_init(struct oa_cur *c, const struct oa_scan *s, const struct oa_tok *t)
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
oa_cur_get(struct oa_cur *c)
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
oa_cur_hex4(struct oa_cur *c)
{
    uint32_t v = 0;

    for (int i = 0; i < 4; i++) {
        int h = oa_cur_get(c) | 0x20;

        v = v * 16 + (uint32_t)(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    return v;
}

/*
 * Calls fn on the first `limit` unescaped bytes of string token t (a cut
 * may fall inside a multi-byte character, as with any byte count).
 */
static void
oa_unescape(const struct oa_scan *s, const struct oa_tok *t, size_t limit,
            void (*fn)(void *arg, const char *p, size_t n), void *arg)
{
    char out[256];
    size_t n = 0;
    struct oa_cur c;

    if (!t->esc) {
        oa_raw(s, t->off, (uint32_t)LG_MIN((size_t)t->len, limit), fn, arg);
        return;
    }
    oa_cur_init(&c, s, t);
    while (c.left > 0 && limit > 0) {
        char ch[4];
        size_t k = 0;
        int b = oa_cur_get(&c);

        if (b != '\\') {
            ch[k++] = (char)b;
        } else {
            switch (b = oa_cur_get(&c)) {
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
                uint32_t cp = oa_cur_hex4(&c);

                if (cp >= 0xd800 && cp <= 0xdbff) {
                    oa_cur_get(&c); /* backslash */
                    oa_cur_get(&c); /* u */
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (oa_cur_hex4(&c) - 0xdc00);
                }
                oa_put_utf8(cp, ch, &k);
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

/* A member name looked for, with its length (no NUL in it: \u0000 is refused). */
struct oa_key {
    const char *name;
    uint32_t len;
};

#define OA_KEY(lit)                         \
    {                                       \
        .name = lit, .len = sizeof(lit) - 1 \
    }
#define OA_KEY_MAX 32 /* no name looked for is longer */

/*
 * The unescaped bytes of key token t, which unescapes to at most OA_KEY_MAX
 * bytes: in place when it has no escapes and lies in one segment (the usual
 * case), else copied into buf.
 */
static const char *
oa_key_bytes(const struct oa_scan *s, const struct oa_tok *t, char *buf)
{
    struct oa_copy c = { buf, 0, OA_KEY_MAX };

    if (!t->esc) {
        int i = 0;

        while (i + 1 < s->nvec && s->starts[i + 1] <= t->off) {
            i++;
        }
        if (t->off - s->starts[i] + t->len <= s->vec[i].iov_len) {
            return (const char *)s->vec[i].iov_base + (t->off - s->starts[i]);
        }
        oa_raw(s, t->off, t->len, oa_copy_cb, &c);
        return buf;
    }
    oa_unescape(s, t, OA_KEY_MAX, oa_copy_cb, &c);
    return buf;
}

/* Index of the token after value i. */
static uint32_t
oa_skip(const struct oa_scan *s, uint32_t i)
{
    return s->tok[i].type == OA_OBJ || s->tok[i].type == OA_ARR ? s->tok[i].aux : i + 1;
}

/*
 * One walk over the members of object o (nothing found when o is 0 or no
 * object): found[k] is set to the value of the last member named keys[k]
 * (jansson: the last duplicate wins), or to 0. Names compare unescaped; a
 * member's name is read only when its length is one looked for. With dup,
 * *dup is set to k + 1 for the first of keys that comes a second time (in
 * the order of those second times; 0: none).
 */
static void
oa_members(const struct oa_scan *s, uint32_t o, const struct oa_key *keys, size_t nkeys,
           uint32_t *found, uint32_t *dup)
{
    char buf[OA_KEY_MAX];

    memset(found, 0, nkeys * sizeof(*found));
    if (dup != NULL) {
        *dup = 0;
    }
    if (o == 0 || s->tok[o - 1].type != OA_OBJ) {
        return;
    }
    for (uint32_t i = o; i < s->tok[o - 1].aux; i = oa_skip(s, i + 1)) {
        const struct oa_tok *t = &s->tok[i];
        const char *name = NULL;

        for (size_t k = 0; k < nkeys; k++) {
            if (keys[k].len != t->aux) {
                continue;
            }
            if (name == NULL) {
                name = oa_key_bytes(s, t, buf);
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
static uint32_t
oa_member(const struct oa_scan *s, uint32_t o, const struct oa_key *key)
{
    uint32_t found;

    oa_members(s, o, key, 1, &found, NULL);
    return found;
}

static int
oa_check_reals(struct oa_scan *s)
{
    /* only the reals marked big can be out of range (oa_number) */
    for (uint32_t i = s->first_big == 0 ? s->ntok : s->first_big - 1; i < s->ntok; i++) {
        char buf[64], *num = buf, *end;
        const struct oa_tok *t = &s->tok[i];
        double d;

        if (t->type != OA_REAL || !t->big) {
            continue;
        }
        if (t->len >= sizeof(buf)) {
            num = lg_xmalloc((size_t)t->len + 1);
        }
        num[oa_raw_copy(s, t->off, t->len, num, t->len)] = '\0';
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

/* ---- reading the fields (jansson semantics on the tape) ------------------ */

/*
 * Tape references below are "index + 1" so that 0 means absent, like the
 * NULL jansson returns.
 */
#define OA_T(s, r) (&(s)->tok[(r)-1])

struct openai_prefix {
    struct lg_hstream hash;
    size_t left; /* prefix bytes still to hash */
    bool any;
};

static void
openai_prefix_cb(void *arg, const char *p, size_t n)
{
    struct openai_prefix *pre = arg;
    size_t k = LG_MIN(n, pre->left);

    if (k == 0) {
        return;
    }
    lg_hstream_feed(&pre->hash, p, k);
    pre->left -= k;
    pre->any = true;
}

static void
openai_prefix_add(const struct oa_scan *s, struct openai_prefix *pre, uint32_t r)
{
    if (pre->left > 0) {
        oa_unescape(s, OA_T(s, r), pre->left, openai_prefix_cb, pre);
    }
}

static const struct oa_key openai_key_text = OA_KEY("text");
static const struct oa_key openai_key_include_usage = OA_KEY("include_usage");

/* The members of a message, in the order they are hashed. */
enum { OPENAI_MSG_ROLE = 0, OPENAI_MSG_CONTENT, OPENAI_MSG_N };
static const struct oa_key openai_msg_keys[OPENAI_MSG_N] = {
    [OPENAI_MSG_ROLE] = OA_KEY("role"),
    [OPENAI_MSG_CONTENT] = OA_KEY("content"),
};

/*
 * The top-level members read, found in one walk of the body's object. None
 * may come twice: the gateway reads the last of duplicates (as jansson does)
 * and an engine may read the first, so a key authorised for one model could
 * be served another (and a stream taken for a plain answer). `user` is not
 * read but attributes the request at the engine: it is refused twice too.
 */
enum {
    OPENAI_F_MODEL = 0,
    OPENAI_F_MESSAGES,
    OPENAI_F_MAX_TOKENS,
    OPENAI_F_STREAM,
    OPENAI_F_STREAM_OPTIONS,
    OPENAI_F_MAX_COMPLETION_TOKENS,
    OPENAI_F_PROMPT,
    OPENAI_F_INPUT,
    OPENAI_F_USER,
    OPENAI_F_N
};
static const struct oa_key openai_fields[OPENAI_F_N] = {
    [OPENAI_F_MODEL] = OA_KEY("model"),
    [OPENAI_F_MESSAGES] = OA_KEY("messages"),
    [OPENAI_F_MAX_TOKENS] = OA_KEY("max_tokens"),
    [OPENAI_F_STREAM] = OA_KEY("stream"),
    [OPENAI_F_STREAM_OPTIONS] = OA_KEY("stream_options"),
    [OPENAI_F_MAX_COMPLETION_TOKENS] = OA_KEY("max_completion_tokens"),
    [OPENAI_F_PROMPT] = OA_KEY("prompt"),
    [OPENAI_F_INPUT] = OA_KEY("input"),
    [OPENAI_F_USER] = OA_KEY("user"),
};

/* Adds a content value (string or array of parts) to the size and prefix. */
static void
openai_add_text(const struct oa_scan *s, uint32_t r, struct lg_openai_req *out,
                struct openai_prefix *pre)
{
    const struct oa_tok *t;

    if (r == 0) {
        return;
    }
    t = OA_T(s, r);
    if (t->type == OA_STR) {
        out->prompt_bytes += t->aux;
        openai_prefix_add(s, pre, r);
        return;
    }
    if (t->type != OA_ARR) {
        return;
    }
    for (uint32_t i = r; i < t->aux; i = oa_skip(s, i)) {
        const struct oa_tok *part = &s->tok[i];

        if (part->type == OA_STR) {
            openai_add_text(s, i + 1, out, pre);
        } else if (part->type == OA_OBJ) {
            openai_add_text(s, oa_member(s, i + 1, &openai_key_text), out, pre);
        } else if (part->type == OA_INT) {
            out->prompt_bytes += 4; /* a token id: about four bytes of text */
        } else if (part->type == OA_ARR) {
            out->prompt_bytes += 4 * (uint64_t)part->len;
        }
    }
}

/* The value of an integer token's n bytes (the scanner checked it fits int64). */
static int64_t
oa_int(const char *num, size_t n)
{
    bool neg = n > 0 && num[0] == '-';
    uint64_t v = 0;

    for (size_t i = neg; i < n; i++) {
        v = v * 10 + (uint64_t)(num[i] - '0');
    }
    return neg && v > 0 ? -(int64_t)(v - 1) - 1 : (int64_t)v;
}

static bool
oa_is_null(const struct oa_scan *s, uint32_t r)
{
    return r == 0 || OA_T(s, r)->type == OA_NULL;
}

/* Refuses the body because of field `param` (its name; NULL: the body as a whole). */
static int __attribute__((format(printf, 5, 6)))
openai_refuse(struct lg_openai_req *out, const char *param, char *err, size_t errlen,
              const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    out->param = param;
    return LG_EINVAL;
}

static int
openai_read_fields(const struct oa_scan *s, size_t prefix_bytes, struct lg_openai_req *out,
                   char *err, size_t errlen)
{
    struct openai_prefix pre = { .left = prefix_bytes };
    uint32_t f[OPENAI_F_N], v, dup;
    size_t k;

    lg_hstream_init(&pre.hash);
    if (s->tok[0].type != OA_OBJ) {
        return openai_refuse(out, NULL, err, errlen, "the request body must be a JSON object");
    }
    oa_members(s, 1, openai_fields, OPENAI_F_N, f, &dup);
    if (dup != 0) {
        out->code = "duplicate_key";
        return openai_refuse(out, openai_fields[dup - 1].name, err, errlen,
                             "the request body has the key \"%s\" more than once (engines read "
                             "either one): send it once",
                             openai_fields[dup - 1].name);
    }
    v = f[OPENAI_F_MODEL];
    if (!oa_is_null(s, v)) {
        const struct oa_tok *t = OA_T(s, v);
        struct oa_copy c = { out->model, 0, LG_MODEL_MAX };

        if (t->type != OA_STR) {
            return openai_refuse(out, "model", err, errlen, "\"model\" must be a string");
        }
        if (t->aux > LG_MODEL_MAX) {
            return openai_refuse(out, "model", err, errlen, "\"model\" is longer than %d bytes",
                                 LG_MODEL_MAX);
        }
        oa_unescape(s, t, LG_MODEL_MAX, oa_copy_cb, &c);
        out->model[c.n] = '\0';
    }
    v = f[OPENAI_F_STREAM];
    if (!oa_is_null(s, v)) {
        if (OA_T(s, v)->type != OA_TRUE && OA_T(s, v)->type != OA_FALSE) {
            return openai_refuse(out, "stream", err, errlen, "\"stream\" must be a boolean");
        }
        out->stream = OA_T(s, v)->type == OA_TRUE;
    }
    v = f[OPENAI_F_STREAM_OPTIONS];
    if (v != 0 && OA_T(s, v)->type == OA_OBJ) {
        uint32_t iu = oa_member(s, v, &openai_key_include_usage);

        out->include_usage = iu != 0 && OA_T(s, iu)->type == OA_TRUE;
    }
    v = f[OPENAI_F_MAX_COMPLETION_TOKENS];
    k = OPENAI_F_MAX_COMPLETION_TOKENS;
    if (oa_is_null(s, v)) {
        v = f[OPENAI_F_MAX_TOKENS];
        k = OPENAI_F_MAX_TOKENS;
    }
    if (!oa_is_null(s, v)) {
        const struct oa_tok *t = OA_T(s, v);
        char num[32];

        if (t->type == OA_INT && t->len < sizeof(num)) {
            out->max_tokens = oa_int(num, oa_raw_copy(s, t->off, t->len, num, sizeof(num)));
        }
        if (t->type != OA_INT || t->len >= sizeof(num) || out->max_tokens < 0) {
            out->max_tokens = -1;
            return openai_refuse(out, openai_fields[k].name, err, errlen,
                                 "\"%s\" must be a non-negative integer", openai_fields[k].name);
        }
    }

    v = f[OPENAI_F_MESSAGES];
    if (v != 0 && OA_T(s, v)->type == OA_ARR) {
        for (uint32_t i = v; i < OA_T(s, v)->aux; i = oa_skip(s, i)) {
            uint32_t m[OPENAI_MSG_N];

            oa_members(s, i + 1, openai_msg_keys, OPENAI_MSG_N, m, NULL);
            if (m[OPENAI_MSG_ROLE] != 0 && OA_T(s, m[OPENAI_MSG_ROLE])->type == OA_STR) {
                openai_prefix_add(s, &pre, m[OPENAI_MSG_ROLE]);
            }
            openai_add_text(s, m[OPENAI_MSG_CONTENT], out, &pre);
        }
    } else {
        uint32_t prompt = f[OPENAI_F_PROMPT];

        openai_add_text(s, prompt != 0 ? prompt : f[OPENAI_F_INPUT], out, &pre);
    }
    out->prefix_hash = pre.any ? lg_mix64(lg_hstream_value(&pre.hash)) | 1 : 0;
    return LG_OK;
}

static void
openai_init(struct lg_openai_req *out)
{
    memset(out, 0, sizeof(*out));
    out->max_tokens = -1;
}

/* Line and column (1-based, bytes) of body offset `off`, for error messages. */
static void
oa_position(const struct oa_scan *s, uint32_t off, unsigned *line, unsigned *col)
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

static int
openai_inspect_vec(const struct evbuffer_iovec *vec, int nvec, size_t prefix_bytes,
                   struct lg_openai_req *out, char *err, size_t errlen)
{
    struct oa_tok stack_tok[OA_STACK_TOKS];
    uint32_t stack_starts[16], *starts = stack_starts;
    struct oa_scan s = { 0 };
    int rc;

    openai_init(out);
    if (nvec > (int)LG_ARRAY_SIZE(stack_starts)) {
        starts = lg_xmalloc((size_t)nvec * sizeof(*starts));
    }
    for (int i = 0; i < nvec; i++) {
        starts[i] = i == 0 ? 0 : starts[i - 1] + (uint32_t)vec[i - 1].iov_len;
    }
    s.vec = vec;
    s.nvec = nvec;
    s.starts = starts;
    s.tok = stack_tok;
    s.cap = OA_STACK_TOKS;
    if (nvec > 0) {
        s.p = vec[0].iov_base;
        s.end = s.p + vec[0].iov_len;
        s.off_bias = -(uintptr_t)s.p;
    } else {
        static const struct evbuffer_iovec none = { NULL, 0 };

        s.vec = &none;
        s.nvec = 1;
    }
    rc = oa_parse(&s);
    if (rc != LG_OK) {
        unsigned line, col;

        oa_position(&s, s.err_off, &line, &col);
        snprintf(err, errlen, "malformed JSON body at line %u column %u: %s", line, col, s.err);
    } else {
        rc = openai_read_fields(&s, prefix_bytes, out, err, errlen);
    }
    if (rc != LG_OK && out->code == NULL) {
        out->code = "invalid_json";
    }
    if (s.tok != stack_tok) {
        free(s.tok);
    }
    if (starts != stack_starts) {
        free(starts);
    }
    return rc;
}

int
lg_openai_inspect(struct evbuffer *body, size_t prefix_bytes, struct lg_openai_req *out, char *err,
                  size_t errlen)
{
    struct evbuffer_iovec stackvec[16], *vec = stackvec;
    int n, rc;

    n = evbuffer_peek(body, -1, NULL, NULL, 0);
    if (n > (int)LG_ARRAY_SIZE(stackvec)) {
        vec = lg_xcalloc((size_t)n, sizeof(*vec));
    }
    n = evbuffer_peek(body, -1, NULL, vec, n);
    rc = openai_inspect_vec(vec, n, prefix_bytes, out, err, errlen);
    if (vec != stackvec) {
        free(vec);
    }
    return rc;
}

int
lg_openai_inspect_mem(const char *data, size_t len, size_t prefix_bytes, struct lg_openai_req *out,
                      char *err, size_t errlen)
{
    struct evbuffer_iovec v = { (void *)(uintptr_t)data, len };

    return openai_inspect_vec(&v, len > 0 ? 1 : 0, prefix_bytes, out, err, errlen);
}

void
lg_json_append_string(struct evbuffer *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;

    evbuffer_add(out, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6];

        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        evbuffer_add(out, s + i - run, run);
        run = 0;
        esc[0] = '\\';
        switch (c) {
        case '"':
        case '\\':
            esc[1] = (char)c;
            evbuffer_add(out, esc, 2);
            break;
        case '\n':
            evbuffer_add(out, "\\n", 2);
            break;
        case '\r':
            evbuffer_add(out, "\\r", 2);
            break;
        case '\t':
            evbuffer_add(out, "\\t", 2);
            break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            evbuffer_add(out, esc, 6);
            break;
        }
    }
    evbuffer_add(out, s + n - run, run);
    evbuffer_add(out, "\"", 1);
}

size_t
lg_openai_error_body(struct evbuffer *out, const char *message, const char *type, const char *param,
                     const char *code)
{
    size_t before = evbuffer_get_length(out);

    evbuffer_add(out, "{\"error\":{\"message\":", 20);
    lg_json_append_string(out, message, strlen(message));
    evbuffer_add(out, ",\"type\":", 8);
    lg_json_append_string(out, type, strlen(type));
    evbuffer_add(out, ",\"param\":", 9);
    if (param != NULL) {
        lg_json_append_string(out, param, strlen(param));
    } else {
        evbuffer_add(out, "null", 4);
    }
    evbuffer_add(out, ",\"code\":", 8);
    if (code != NULL) {
        lg_json_append_string(out, code, strlen(code));
    } else {
        evbuffer_add(out, "null", 4);
    }
    evbuffer_add(out, "}}\n", 3);
    return evbuffer_get_length(out) - before;
}

const char *
lg_openai_error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 429:
        return "rate_limit_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}
