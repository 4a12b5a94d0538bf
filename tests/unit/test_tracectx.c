/* test_tracectx.c: W3C Trace Context (http/tracectx.c) and the OTLP JSON
 * of a span (base/otlp.c). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/otlp.h"
#include "http/tracectx.h"
#include "lg_test.h"

static int
parse(const char *s, struct lg_tracectx *tc)
{
    return lg_tracectx_parse(s, strlen(s), tc);
}

/* The specification's example, and each way a traceparent is refused. */
static int
test_traceparent(void)
{
    struct lg_tracectx tc;
    char out[LG_TRACEPARENT_LEN + 1] = "";

    LG_CHECK(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &tc) == LG_OK);
    LG_CHECK(tc.trace_id[0] == 0x4b && tc.trace_id[15] == 0x36);
    LG_CHECK(tc.parent_id == 0x00f067aa0ba902b7ull && tc.flags == 1);
    lg_tracectx_format(out, tc.trace_id, 0x1122334455667788ull, 0);
    LG_CHECK_STR(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-1122334455667788-00");
    /* a later version: longer, after a '-'; its flags other than sampled are not ours */
    LG_CHECK(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-xyz", &tc) == LG_OK);
    LG_CHECK(tc.flags == 1);
    LG_CHECK(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &tc) == LG_OK);
    static const char *const bad[] = {
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",   /* 00 has no more */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",     /* short */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    /* uppercase */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    /* zero trace */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    /* zero parent */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    /* version ff */
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    /* not hex */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    /* separator */
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* space */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",    /* flags */
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",   /* later: no '-' */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tc.flags = 0x77;
        LG_CHECK(parse(bad[i], &tc) == LG_EINVAL);
        LG_CHECK(tc.flags == 0x77); /* untouched */
    }
    return 0;
}

static bool
ts(const char *s)
{
    return lg_tracestate_valid(s, strlen(s));
}

static int
test_tracestate(void)
{
    char big[600];

    LG_CHECK(ts("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"));
    LG_CHECK(ts("rojo=1 ,\t, congo=2")); /* spaces around, an empty member */
    LG_CHECK(ts("fw529a3039@dt=ZmJiZjU0MjQ1N2Y3YzNkNQ"));
    LG_CHECK(ts("a/b_c-d*e=x y"));
    LG_CHECK(!ts("Rojo=1"));          /* key: lowercase */
    LG_CHECK(!ts("rojo"));            /* no value */
    LG_CHECK(!ts("rojo="));           /* empty value */
    LG_CHECK(!ts("rojo=a=b"));        /* '=' in the value */
    LG_CHECK(!ts("a=1,a=2"));         /* a key twice */
    LG_CHECK(!ts("@dt=1"));           /* no tenant */
    LG_CHECK(!ts("t@=1"));            /* no system */
    LG_CHECK(!ts("t@0dt=1"));         /* system starts with a letter */
    LG_CHECK(!ts("rojo=\x01"));
    memset(big, 0, sizeof(big));
    for (int i = 0; i < 33; i++) {
        snprintf(big + strlen(big), sizeof(big) - strlen(big), "%sk%d=v", i ? "," : "", i);
    }
    LG_CHECK(!ts(big));               /* 33 members */
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    big[1] = '=';
    LG_CHECK(!ts(big));               /* longer than 512 */
    return 0;
}

/* A span's JSON: OTLP's names, hex ids, times as strings, escapes. */
static int
test_encode(void)
{
    struct lg_span s;
    json_error_t err;
    json_t *doc, *span, *attrs;
    char *out;
    size_t len;

    memset(&s, 0, sizeof(s));
    for (int i = 0; i < 16; i++) {
        s.trace_id[i] = (uint8_t)(i + 1);
    }
    s.span_id = 0xabcdef0102030405ull;
    s.parent_id = 0x1ull;
    s.kind = LG_SPAN_CLIENT;
    s.status = LG_SPAN_ERROR;
    s.start_unix_ns = 1000;
    s.end_unix_ns = 2000;
    s.name_off = lg_span_text(&s, "chat \"m\"\n", 9, &s.name_len);
    lg_span_str(&s, "gen_ai.request.model", "m", 1);
    lg_span_int(&s, "gen_ai.usage.output_tokens", 12);
    lg_span_double(&s, "gen_ai.server.time_to_first_token", 0.25);
    lg_span_bool(&s, "llmgate.connection.reused", true);
    lg_span_event(&s, "first_token", 1500);
    lg_otlp_encode(&s, 1, "svc", &out, &len);
    LG_CHECK(strlen(out) == len);
    doc = json_loads(out, 0, &err);
    LG_CHECK(doc != NULL);
    span = json_array_get(json_object_get(json_array_get(json_object_get(json_array_get(
                                                             json_object_get(doc, "resourceSpans"),
                                                             0),
                                                         "scopeSpans"),
                                          0),
                          "spans"),
                          0);
    LG_CHECK_STR(json_string_value(json_object_get(span, "traceId")),
                 "0102030405060708090a0b0c0d0e0f10");
    LG_CHECK_STR(json_string_value(json_object_get(span, "spanId")), "abcdef0102030405");
    LG_CHECK_STR(json_string_value(json_object_get(span, "parentSpanId")), "0000000000000001");
    LG_CHECK_STR(json_string_value(json_object_get(span, "name")), "chat \"m\"\n");
    LG_CHECK(json_integer_value(json_object_get(span, "kind")) == 3);
    LG_CHECK_STR(json_string_value(json_object_get(span, "startTimeUnixNano")), "1000");
    attrs = json_object_get(span, "attributes");
    LG_CHECK(json_array_size(attrs) == 4);
    LG_CHECK_STR(json_string_value(json_object_get(
                     json_object_get(json_array_get(attrs, 1), "value"), "intValue")),
                 "12");
    LG_CHECK(json_real_value(json_object_get(json_object_get(json_array_get(attrs, 2), "value"),
                                             "doubleValue"))
             == 0.25);
    LG_CHECK(json_is_true(
        json_object_get(json_object_get(json_array_get(attrs, 3), "value"), "boolValue")));
    LG_CHECK(json_integer_value(json_object_get(json_object_get(span, "status"), "code")) == 2);
    json_decref(doc);
    free(out);
    return 0;
}

/* The collector's URL. */
static int
test_url(void)
{
    char host[256], port[8], path[512], why[256];

    LG_CHECK(lg_otlp_parse_url("http://127.0.0.1:4318", host, sizeof(host), port, sizeof(port),
                               path, sizeof(path), why, sizeof(why)));
    LG_CHECK_STR(host, "127.0.0.1");
    LG_CHECK_STR(port, "4318");
    LG_CHECK_STR(path, "/v1/traces");
    LG_CHECK(lg_otlp_parse_url("http://[::1]/otlp/v1/traces", host, sizeof(host), port,
                               sizeof(port), path, sizeof(path), why, sizeof(why)));
    LG_CHECK_STR(host, "::1");
    LG_CHECK_STR(port, "80");
    LG_CHECK_STR(path, "/otlp/v1/traces");
    LG_CHECK(!lg_otlp_check_url("https://c:4318", why, sizeof(why)));
    LG_CHECK(strstr(why, "https") != NULL);
    LG_CHECK(!lg_otlp_check_url("http://c:0", why, sizeof(why)));
    LG_CHECK(!lg_otlp_check_url("http://:80", why, sizeof(why)));
    LG_CHECK(!lg_otlp_check_url("c:4318", why, sizeof(why)));
    return 0;
}

LG_TEST_MAIN(test_traceparent, test_tracestate, test_encode, test_url)
