/*
 * jsonput.h: JSON values written at a cursor, for the access log's line
 * (serve/record.c).
 *
 * Each lg_jput_* writes one value at p and returns the cursor after it. None
 * checks for room: the caller's buffer holds the longest the line can take
 * (each variable part has a stated maximum, below), so a line is formatted
 * with its cursor in a register and no bound check per field. Numbers are
 * written by hand, two digits a step (no printf); the clock's date part once
 * a second per thread.
 */
#ifndef LG_JSONPUT_H
#define LG_JSONPUT_H

#include <math.h>
#include <string.h>
#include <time.h>

#include "base/lg_core.h"

/* Most bytes lg_jput_u64 writes; lg_jput_ms and lg_jput_ms_f: */
#define LG_JPUT_U64_MAX 20
#define LG_JPUT_MS_MAX  (LG_JPUT_U64_MAX + 1)
/* lg_jput_time's: "YYYY-MM-DDTHH:MM:SS.uuuuuuZ" and its quotes (a year past 9999: 40) */
#define LG_JPUT_TIME_MAX 40

/* Copies n bytes; with n a constant, a few moves (inline). */
static inline __attribute__((always_inline)) char *
lg_jput_raw(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

/* A literal: its length is a constant. */
#define LG_JPUT_LIT(p, lit) lg_jput_raw((p), (lit), sizeof(lit) - 1)

/* "00" to "99" */
extern const char lg_jput_digits2[200];
/* ".000" to ".999": a time's fraction in one store */
extern const char lg_jput_frac3[1000][4];

/* The digits of v (at least `min` of them, zeros in front) end at `end`; returns their start. */
static inline char *
lg_jput_digits_back(char *end, uint64_t v, int min)
{
    char *p = end;

    while (v >= 100 || min > 2) {
        p -= 2;
        memcpy(p, lg_jput_digits2 + 2 * (v % 100), 2);
        v /= 100;
        min -= 2;
    }
    if (v >= 10 || min == 2) {
        p -= 2;
        memcpy(p, lg_jput_digits2 + 2 * v, 2);
    } else {
        *--p = (char)('0' + v);
    }
    return p;
}

/* How many digits v has. */
static inline size_t
lg_jput_ndigits(uint64_t v)
{
    size_t n = 1;

    while (v >= 100) {
        v /= 100;
        n += 2;
    }
    return n + (v >= 10);
}

/* v in decimal; under 1000 (most of a line's numbers) without a loop. */
static inline char *
lg_jput_u64(char *p, uint64_t v)
{
    size_t n;

    if (v < 10) {
        *p = (char)('0' + v);
        return p + 1;
    }
    if (v < 100) {
        memcpy(p, lg_jput_digits2 + 2 * v, 2);
        return p + 2;
    }
    if (v < 1000) {
        *p = (char)('0' + v / 100);
        memcpy(p + 1, lg_jput_digits2 + 2 * (v % 100), 2);
        return p + 3;
    }
    n = lg_jput_ndigits(v);
    lg_jput_digits_back(p + n, v, 1);
    return p + n;
}

/* Microseconds as milliseconds with three decimals ("0.000", "12.345"). */
static inline char *
lg_jput_us_ms(char *p, uint64_t us)
{
    if (us < 100000) {
        /* under 100 ms, most of a line's times: "d.ddd" or "dd.ddd" stored at once */
        unsigned whole = (unsigned)us / 1000, frac = (unsigned)us - whole * 1000;

        if (whole < 10) {
            *p++ = (char)('0' + whole);
        } else {
            memcpy(p, lg_jput_digits2 + 2 * whole, 2);
            p += 2;
        }
        memcpy(p, lg_jput_frac3[frac], 4);
        return p + 4;
    }
    p = lg_jput_u64(p, us / 1000);
    memcpy(p, lg_jput_frac3[us % 1000], 4);
    return p + 4;
}

/* The milliseconds from one stamp (ns) to another, microsecond precision; null
 * where either is 0 or they are out of order. */
static inline char *
lg_jput_ms(char *p, uint64_t from, uint64_t to)
{
    if (from == 0 || to == 0 || to < from) {
        return LG_JPUT_LIT(p, "null");
    }
    return lg_jput_us_ms(p, (to - from) / 1000);
}

/* A duration in nanoseconds as milliseconds; null where 0 (not measured). */
static inline char *
lg_jput_ns_ms(char *p, uint64_t ns)
{
    return ns != 0 ? lg_jput_us_ms(p, ns / 1000) : LG_JPUT_LIT(p, "null");
}

/* Milliseconds given as a double, to the microsecond (rounded down, as a
 * stamp's); null where not above 0 or not finite (no NaN in a JSON line). */
static inline char *
lg_jput_ms_f(char *p, double ms)
{
    if (!(ms > 0) || !isfinite(ms)) {
        return LG_JPUT_LIT(p, "null");
    }
    if (ms >= 1.8e13) {
        ms = 1.8e13; /* what fits a uint64_t of nanoseconds */
    }
    /* as the nanoseconds' stamps: 1 + ms * 1e6 ns after 1, whole microseconds */
    return lg_jput_us_ms(p, (uint64_t)(ms * 1e6) / 1000);
}

/* Bytes a JSON string cannot hold as they are. */
extern const bool lg_jput_esc[256];

/* lg_jput_esc for eight bytes at once (lg_swar_*: the lowest byte flagged is a true one). */
static inline uint64_t
lg_jput_esc8(uint64_t x)
{
    return lg_swar_lt(x, 0x20) | lg_swar_eq(x, '"') | lg_swar_eq(x, '\\') | lg_swar_eq(x, 0x7f);
}

/* The JSON escape of c (2 or 6 bytes) at d; returns its length. */
static inline size_t
lg_jput_escape(char *d, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";

    d[0] = '\\';
    if (c == '"' || c == '\\') {
        d[1] = (char)c;
        return 2;
    }
    memcpy(d + 1, "u00", 3);
    d[4] = hex[c >> 4];
    d[5] = hex[c & 15];
    return 6;
}

/*
 * s (n bytes; NULL: null) as a JSON string of at most max bytes, quotes
 * included (max >= 16): a longer one is cut (at a character, never inside
 * an escape or a UTF-8 sequence) and ends in "...". The buffer holds max
 * bytes at p. Out of line (jsonput.c): a string is long enough for a call.
 */
char *lg_jput_str(char *p, const char *s, size_t n, size_t max);

/*
 * lg_jput_str of a C string. Most are short and need no escape (a tenant's
 * or a model's name, a reason): those are copied here, eight bytes a step,
 * with no call; any other goes to lg_jput_str whole.
 */
static inline char *
lg_jput_cstr(char *p, const char *s, size_t max)
{
    size_t n, i = 0;

    if (s == NULL) {
        return LG_JPUT_LIT(p, "null");
    }
    n = strlen(s);
    if (n > 32 || max < 16 + 6 * 32) {
        return lg_jput_str(p, s, n, max);
    }
    p[0] = '"';
    for (; n - i >= 8; i += 8) {
        uint64_t x;

        memcpy(&x, s + i, 8);
        if (lg_jput_esc8(x) != 0) {
            return lg_jput_str(p, s, n, max);
        }
        memcpy(p + 1 + i, &x, 8);
    }
    for (; i < n; i++) {
        if (lg_jput_esc[(unsigned char)s[i]]) {
            return lg_jput_str(p, s, n, max);
        }
        p[1 + i] = s[i];
    }
    p[1 + n] = '"';
    return p + n + 2;
}

/*
 * A string with no byte JSON must escape (what the gateway wrote itself, or
 * a name the configuration checked), quoted, its first max - 2 bytes: no
 * scan for escapes.
 */
static inline char *
lg_jput_safe_n(char *p, const char *s, size_t n, size_t max)
{
    n = LG_MIN(n, max - 2);
    *p++ = '"';
    memcpy(p, s, n);
    p[n] = '"';
    return p + n + 1;
}

static inline char *
lg_jput_safe(char *p, const char *s, size_t max)
{
    return lg_jput_safe_n(p, s, strlen(s), max);
}

/* The wall-clock time wall_ns, quoted: "YYYY-MM-DDTHH:MM:SS.uuuuuuZ" (UTC). */
char *lg_jput_time(char *p, uint64_t wall_ns);

#endif
