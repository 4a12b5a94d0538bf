/* test_jsonput.c: the access log's value writers (base/jsonput.h). */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/jsonput.h"
#include "lg_test.h"

/* What one writer call left in out (NUL-terminated); the bytes past it untouched. */
#define PUT(out, call)                                   \
    do {                                                 \
        char *p_ = (out);                                \
        memset(p_, '#', sizeof(out));                    \
        p_ = (call);                                     \
        *p_ = '\0';                                      \
    } while (0)

static uint64_t
next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Integers: printf's text, whatever the count of digits. */
static int
test_u64(void)
{
    static const uint64_t fixed[] = { 0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 9999, 10000,
                                      65535, 99999, 100000, 4294967295u, 4294967296u,
                                      999999999999999999u, 1000000000000000000u, UINT64_MAX };
    char out[64], want[64];
    uint64_t s = 88172645463325252u;

    for (size_t i = 0; i < LG_ARRAY_SIZE(fixed); i++) {
        PUT(out, lg_jput_u64(out, fixed[i]));
        snprintf(want, sizeof(want), "%" PRIu64, fixed[i]);
        LG_CHECK_STR(out, want);
    }
    for (int i = 0; i < 100000; i++) {
        uint64_t v = next_rand(&s) >> (next_rand(&s) % 64);

        PUT(out, lg_jput_u64(out, v));
        snprintf(want, sizeof(want), "%" PRIu64, v);
        LG_CHECK_STR(out, want);
        LG_CHECK(strlen(out) <= LG_JPUT_U64_MAX);
    }
    return 0;
}

/* Times: milliseconds to the microsecond, three decimals always; null when unknown. */
static int
test_ms(void)
{
    char out[64], want[64];
    uint64_t s = 2463534242u;

    PUT(out, lg_jput_ms(out, 1000, 1000));
    LG_CHECK_STR(out, "0.000");
    PUT(out, lg_jput_ms(out, 1000, 1999)); /* under a microsecond: rounded down */
    LG_CHECK_STR(out, "0.000");
    PUT(out, lg_jput_ms(out, 1000, 2000));
    LG_CHECK_STR(out, "0.001");
    PUT(out, lg_jput_ms(out, 1, 1 + 99999999));
    LG_CHECK_STR(out, "99.999");
    PUT(out, lg_jput_ms(out, 1, 1 + 100000000));
    LG_CHECK_STR(out, "100.000");
    PUT(out, lg_jput_ms(out, 1, 1 + 1234567000));
    LG_CHECK_STR(out, "1234.567");
    PUT(out, lg_jput_ms(out, 1, UINT64_MAX));
    LG_CHECK_STR(out, "18446744073709.551");
    LG_CHECK(strlen(out) <= LG_JPUT_MS_MAX);
    /* unknown: either stamp missing, or out of order (never a negative time) */
    PUT(out, lg_jput_ms(out, 0, 5000));
    LG_CHECK_STR(out, "null");
    PUT(out, lg_jput_ms(out, 5000, 0));
    LG_CHECK_STR(out, "null");
    PUT(out, lg_jput_ms(out, 5000, 4999));
    LG_CHECK_STR(out, "null");
    PUT(out, lg_jput_ns_ms(out, 0));
    LG_CHECK_STR(out, "null");
    PUT(out, lg_jput_ns_ms(out, 2500000));
    LG_CHECK_STR(out, "2.500");
    for (int i = 0; i < 100000; i++) {
        uint64_t ns = next_rand(&s) >> (next_rand(&s) % 64);
        uint64_t us = ns / 1000;

        PUT(out, lg_jput_ms(out, 7, 7 + ns));
        snprintf(want, sizeof(want), "%" PRIu64 ".%03" PRIu64, us / 1000, us % 1000);
        LG_CHECK_STR(out, want);
    }
    return 0;
}

/* A double's milliseconds: a number JSON reads, or null (never nan, inf or a sign). */
static int
test_ms_f(void)
{
    static const double nulls[] = { 0.0, -0.0, -1.0, -1e300, NAN, -NAN, INFINITY, -INFINITY };
    char out[64];

    for (size_t i = 0; i < LG_ARRAY_SIZE(nulls); i++) {
        PUT(out, lg_jput_ms_f(out, nulls[i]));
        LG_CHECK_STR(out, "null");
    }
    PUT(out, lg_jput_ms_f(out, 1.5));
    LG_CHECK_STR(out, "1.500");
    PUT(out, lg_jput_ms_f(out, 250.0));
    LG_CHECK_STR(out, "250.000");
    PUT(out, lg_jput_ms_f(out, 0.0004)); /* under a microsecond */
    LG_CHECK_STR(out, "0.000");
    PUT(out, lg_jput_ms_f(out, 0.0015));
    LG_CHECK_STR(out, "0.001");
    PUT(out, lg_jput_ms_f(out, 1e300)); /* clamped: still digits */
    LG_CHECK_STR(out, "18000000000000.000");
    PUT(out, lg_jput_ms_f(out, DBL_MIN));
    LG_CHECK_STR(out, "0.000");
    return 0;
}

/* Strings: escaped; a long one cut at a character and ended in "...", never past max. */
static int
test_str(void)
{
    char out[4096], in[2048];

    PUT(out, lg_jput_str(out, NULL, 0, 512));
    LG_CHECK_STR(out, "null");
    PUT(out, lg_jput_str(out, "", 0, 512));
    LG_CHECK_STR(out, "\"\"");
    PUT(out, lg_jput_cstr(out, "anonymous", 512));
    LG_CHECK_STR(out, "\"anonymous\"");
    PUT(out, lg_jput_cstr(out, "/v1/chat/completions?x=\"y\"", 512)); /* the quote past 8 bytes */
    LG_CHECK_STR(out, "\"/v1/chat/completions?x=\\\"y\\\"\"");
    PUT(out, lg_jput_str(out, "a\\b\nc\x01\x7f\x1f", 8, 512));
    LG_CHECK_STR(out, "\"a\\\\b\\u000ac\\u0001\\u007f\\u001f\"");
    PUT(out, lg_jput_cstr(out, "caf\xc3\xa9", 512)); /* UTF-8 as it is */
    LG_CHECK_STR(out, "\"caf\xc3\xa9\"");
    /* at the fast path's limit and one past it: the same text */
    memset(in, 'x', sizeof(in));
    PUT(out, lg_jput_str(out, in, (512 - 16) / 6, 512));
    LG_CHECK(strlen(out) == (512 - 16) / 6 + 2);
    PUT(out, lg_jput_str(out, in, (512 - 16) / 6 + 1, 512));
    LG_CHECK(strlen(out) == (512 - 16) / 6 + 3);
    /* too long: cut within max, ends in ..." */
    PUT(out, lg_jput_str(out, in, sizeof(in), 512));
    LG_CHECK(strlen(out) <= 512 && strlen(out) >= 500);
    LG_CHECK(strcmp(out + strlen(out) - 4, "...\"") == 0);
    /* escapes near the cut: never half an escape */
    memset(in, '"', sizeof(in));
    PUT(out, lg_jput_str(out, in, sizeof(in), 512));
    LG_CHECK(strlen(out) <= 512);
    LG_CHECK(strcmp(out + strlen(out) - 6, "\\\"...\"") == 0);
    /* a multi-byte character at the cut: left out whole */
    for (size_t i = 0; i + 1 < sizeof(in); i += 2) {
        in[i] = '\xc3';
        in[i + 1] = '\xa9';
    }
    PUT(out, lg_jput_str(out, in, sizeof(in), 512));
    LG_CHECK(strlen(out) <= 512);
    LG_CHECK(strcmp(out + strlen(out) - 6, "\xc3\xa9...\"") == 0);
    /* safe strings: copied, quoted, at most max - 2 of their bytes */
    PUT(out, lg_jput_safe(out, "127.0.0.1", 512));
    LG_CHECK_STR(out, "\"127.0.0.1\"");
    memset(in, 'y', sizeof(in));
    in[sizeof(in) - 1] = '\0';
    PUT(out, lg_jput_safe(out, in, 64));
    LG_CHECK(strlen(out) == 64 && out[0] == '"' && out[63] == '"');
    return 0;
}

/* The clock: RFC 3339 in UTC to the microsecond; the cached date follows the seconds. */
static int
test_time(void)
{
    char out[64], want[64];
    uint64_t s = 1234567u;

    PUT(out, lg_jput_time(out, UINT64_C(1796683995927265000)));
    LG_CHECK_STR(out, "\"2026-12-07T22:53:15.927265Z\"");
    PUT(out, lg_jput_time(out, UINT64_C(1796683995000000999)));
    LG_CHECK_STR(out, "\"2026-12-07T22:53:15.000000Z\"");
    PUT(out, lg_jput_time(out, UINT64_C(1796683996000001000)));
    LG_CHECK_STR(out, "\"2026-12-07T22:53:16.000001Z\"");
    for (int i = 0; i < 20000; i++) {
        uint64_t ns = next_rand(&s) % (UINT64_C(4102444800) * LG_NS_PER_S); /* before 2100 */
        time_t sec = (time_t)(ns / LG_NS_PER_S);
        struct tm tm;
        size_t n;

        gmtime_r(&sec, &tm);
        n = strftime(want, sizeof(want), "\"%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(want + n, sizeof(want) - n, ".%06uZ\"", (unsigned)(ns / 1000 % 1000000));
        PUT(out, lg_jput_time(out, ns));
        LG_CHECK_STR(out, want);
        LG_CHECK(strlen(out) <= LG_JPUT_TIME_MAX);
    }
    return 0;
}

LG_TEST_MAIN(test_u64, test_ms, test_ms_f, test_str, test_time)
