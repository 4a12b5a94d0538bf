/* test_tracectx.c: W3C Trace Context (http/tracectx.c) and the OTLP JSON
 * and protobuf of spans (base/otlp_json.c, base/otlp_pb.c). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/otlp.h"
#include "http/tracectx.h"
#include "lg_pbread.h"
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
    {
        /* every digit, each place */
        static const uint8_t id[16] = { 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
                                        0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10 };

        lg_tracectx_format(out, id, 0xf0e1d2c3b4a59687ull, 0xa9);
        LG_CHECK_STR(out, "00-0123456789abcdeffedcba9876543210-f0e1d2c3b4a59687-a9");
        lg_tracectx_format(out, id, 0xffffffffffffffffull, 0);
        LG_CHECK_STR(out, "00-0123456789abcdeffedcba9876543210-ffffffffffffffff-00");
    }
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
    lg_otlp_encode(&s, 1, "svc", LG_OTLP_JSON, &out, &len);
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

    /* UTF-8 goes as it is; a byte where no character starts (a character cut
     * short at a limit) as '?', as in the protobuf */
    s.text_len = 0;
    s.nattrs = 0;
    s.name_off = lg_span_text(&s, "caf\xc3\xa9 \xe2\x82", 8, &s.name_len);
    lg_otlp_encode(&s, 1, "svc", LG_OTLP_JSON, &out, &len);
    LG_CHECK(strstr(out, "\"name\":\"caf\xc3\xa9 ??\"") != NULL);
    free(out);
    return 0;
}

/* ---- protobuf: read back with lg_pbread.h ---- */

/* A sub-message or string field: its bytes. */
static bool
pb_sub(const struct lg_pbf *in, unsigned field, unsigned nth, struct lg_pbf *f)
{
    return lg_pb_get(in->p, in->n, field, nth, f) && f->wt == 2;
}

static bool
pb_is(const struct lg_pbf *f, const char *s)
{
    return f->wt == 2 && f->n == strlen(s) && memcmp(f->p, s, f->n) == 0;
}

/* A span's protobuf: every field where OTLP's schema puts it, read back. */
static int
test_encode_pb(void)
{
    struct lg_span s[2];
    struct lg_pbf top, rs, res, kv, v, ss, f, span, a;
    char *out;
    size_t len;
    double d;
    static const uint8_t span_id[8] = { 0xab, 0xcd, 0xef, 0x01, 0x02, 0x03, 0x04, 0x05 };

    memset(s, 0, sizeof(s));
    for (int i = 0; i < 16; i++) {
        s[0].trace_id[i] = (uint8_t)(i + 1);
    }
    s[0].span_id = 0xabcdef0102030405ull;
    s[0].parent_id = 0x1ull;
    s[0].kind = LG_SPAN_CLIENT;
    s[0].status = LG_SPAN_ERROR;
    s[0].start_unix_ns = 1765000000123456789ull;
    s[0].end_unix_ns = 1765000000223456789ull;
    s[0].name_off = lg_span_text(&s[0], "chat \"m\"\n", 9, &s[0].name_len);
    s[0].state_off = lg_span_text(&s[0], "rojo=1", 6, &s[0].state_len);
    s[0].msg_off = lg_span_text(&s[0], "bad", 3, &s[0].msg_len);
    lg_span_str(&s[0], "gen_ai.request.model", "m", 1);
    lg_span_int(&s[0], "gen_ai.usage.output_tokens", 300);
    lg_span_double(&s[0], "gen_ai.server.time_to_first_token", 0.25);
    lg_span_bool(&s[0], "llmgate.connection.reused", true);
    lg_span_int(&s[0], "llmgate.neg", -2);
    lg_span_bool(&s[0], "llmgate.f", false);
    lg_span_event(&s[0], "first_token", 1765000000173456789ull);
    /* a root span, status unset: those fields left out */
    s[1] = s[0];
    s[1].parent_id = 0;
    s[1].state_len = 0;
    s[1].status = LG_SPAN_UNSET;
    s[1].msg_len = 0;
    s[1].nattrs = 0;
    s[1].nevents = 0;
    lg_otlp_encode(s, 2, "svc", LG_OTLP_PROTOBUF, &out, &len);
    LG_CHECK(out[len] == '\0');
    /* ExportTraceServiceRequest.resource_spans = 1, once */
    LG_CHECK(lg_pb_get((const uint8_t *)out, len, 1, 0, &top) && top.wt == 2);
    LG_CHECK(top.p + top.n == (const uint8_t *)out + len); /* the whole body */
    rs = top;
    /* ResourceSpans.resource = 1 -> Resource.attributes = 1 -> KeyValue */
    LG_CHECK(pb_sub(&rs, 1, 0, &res) && pb_sub(&res, 1, 0, &kv));
    LG_CHECK(pb_sub(&kv, 1, 0, &f) && pb_is(&f, "service.name"));
    LG_CHECK(pb_sub(&kv, 2, 0, &v) && pb_sub(&v, 1, 0, &f) && pb_is(&f, "svc"));
    /* ResourceSpans.scope_spans = 2 -> ScopeSpans.scope = 1 (name 1, version 2) */
    LG_CHECK(pb_sub(&rs, 2, 0, &ss) && pb_sub(&ss, 1, 0, &f));
    LG_CHECK(pb_sub(&f, 1, 0, &v) && pb_is(&v, "llmgate"));
    LG_CHECK(pb_sub(&f, 2, 0, &v) && v.n > 0);
    /* ScopeSpans.spans = 2 */
    LG_CHECK(pb_sub(&ss, 2, 0, &span));
    LG_CHECK(pb_sub(&span, 1, 0, &f) && f.n == 16 && f.p[0] == 1 && f.p[15] == 16);
    LG_CHECK(pb_sub(&span, 2, 0, &f) && f.n == 8 && memcmp(f.p, span_id, 8) == 0);
    LG_CHECK(pb_sub(&span, 3, 0, &f) && pb_is(&f, "rojo=1"));
    LG_CHECK(pb_sub(&span, 4, 0, &f) && f.n == 8 && f.p[7] == 1 && f.p[0] == 0);
    LG_CHECK(pb_sub(&span, 5, 0, &f) && pb_is(&f, "chat \"m\"\n"));
    LG_CHECK(lg_pb_get(span.p, span.n, 6, 0, &f) && f.wt == 0 && f.v == LG_SPAN_CLIENT);
    LG_CHECK(lg_pb_get(span.p, span.n, 7, 0, &f) && f.wt == 1 && f.v == 1765000000123456789ull);
    LG_CHECK(lg_pb_get(span.p, span.n, 8, 0, &f) && f.wt == 1 && f.v == 1765000000223456789ull);
    /* attributes = 9: KeyValue { key 1, value 2: AnyValue { string 1, bool 2, int 3, double 4 } } */
    LG_CHECK(pb_sub(&span, 9, 0, &a) && pb_sub(&a, 1, 0, &f) && pb_is(&f, "gen_ai.request.model"));
    LG_CHECK(pb_sub(&a, 2, 0, &v) && pb_sub(&v, 1, 0, &f) && pb_is(&f, "m"));
    LG_CHECK(pb_sub(&span, 9, 1, &a) && pb_sub(&a, 2, 0, &v));
    LG_CHECK(lg_pb_get(v.p, v.n, 3, 0, &f) && f.wt == 0 && f.v == 300);
    LG_CHECK(pb_sub(&span, 9, 2, &a) && pb_sub(&a, 2, 0, &v));
    LG_CHECK(lg_pb_get(v.p, v.n, 4, 0, &f) && f.wt == 1);
    memcpy(&d, &f.v, 8);
    LG_CHECK(d == 0.25);
    LG_CHECK(pb_sub(&span, 9, 3, &a) && pb_sub(&a, 2, 0, &v));
    LG_CHECK(lg_pb_get(v.p, v.n, 2, 0, &f) && f.wt == 0 && f.v == 1);
    LG_CHECK(pb_sub(&span, 9, 4, &a) && pb_sub(&a, 2, 0, &v));
    LG_CHECK(lg_pb_get(v.p, v.n, 3, 0, &f) && f.wt == 0 && (int64_t)f.v == -2);
    LG_CHECK(pb_sub(&span, 9, 5, &a) && pb_sub(&a, 2, 0, &v));
    LG_CHECK(lg_pb_get(v.p, v.n, 2, 0, &f) && f.wt == 0 && f.v == 0); /* false, still there */
    LG_CHECK(!pb_sub(&span, 9, 6, &a));
    /* events = 11: Event { time_unix_nano 1 fixed64, name 2 } */
    LG_CHECK(pb_sub(&span, 11, 0, &a));
    LG_CHECK(lg_pb_get(a.p, a.n, 1, 0, &f) && f.wt == 1 && f.v == 1765000000173456789ull);
    LG_CHECK(pb_sub(&a, 2, 0, &f) && pb_is(&f, "first_token"));
    /* status = 15: Status { message 2, code 3 } */
    LG_CHECK(pb_sub(&span, 15, 0, &a) && pb_sub(&a, 2, 0, &f) && pb_is(&f, "bad"));
    LG_CHECK(lg_pb_get(a.p, a.n, 3, 0, &f) && f.wt == 0 && f.v == LG_SPAN_ERROR);
    /* the second span: no parent, no state, no status, no attributes */
    LG_CHECK(pb_sub(&ss, 2, 1, &span) && !pb_sub(&ss, 2, 2, &f));
    LG_CHECK(pb_sub(&span, 5, 0, &f) && pb_is(&f, "chat \"m\"\n"));
    LG_CHECK(!lg_pb_get(span.p, span.n, 3, 0, &f) && !lg_pb_get(span.p, span.n, 4, 0, &f));
    LG_CHECK(!lg_pb_get(span.p, span.n, 9, 0, &f) && !lg_pb_get(span.p, span.n, 15, 0, &f));
    free(out);

    /* strings not valid UTF-8 (a raw byte, a character cut short, a surrogate, an
     * overlong form): each bad byte '?', the valid characters kept */
    {
        static const char bad[] = "caf\xc3\xa9 \xff x\xed\xa0\x80 \xc0\xaf \xe2\x82";
        static const char fixed[] = "caf\xc3\xa9 ? x??? ?? ??";

        s[1].text_len = 0;
        s[1].name_off = lg_span_text(&s[1], bad, sizeof(bad) - 1, &s[1].name_len);
        lg_otlp_encode(&s[1], 1, "svc", LG_OTLP_PROTOBUF, &out, &len);
        LG_CHECK(lg_pb_get((const uint8_t *)out, len, 1, 0, &rs) && pb_sub(&rs, 2, 0, &ss));
        LG_CHECK(pb_sub(&ss, 2, 0, &span) && pb_sub(&span, 5, 0, &f) && pb_is(&f, fixed));
        free(out);
    }

    /* many spans (past the encoder's stack array): each read back */
    {
        enum { N = 300 };
        struct lg_span *many = calloc(N, sizeof(*many));

        for (int i = 0; i < N; i++) {
            many[i] = s[0];
            many[i].start_unix_ns = (uint64_t)i;
        }
        lg_otlp_encode(many, N, "svc", LG_OTLP_PROTOBUF, &out, &len);
        LG_CHECK(lg_pb_get((const uint8_t *)out, len, 1, 0, &rs) && pb_sub(&rs, 2, 0, &ss));
        for (int i = 0; i < N; i++) {
            LG_CHECK(pb_sub(&ss, 2, (unsigned)i, &span));
            LG_CHECK(lg_pb_get(span.p, span.n, 7, 0, &f) && f.v == (uint64_t)i);
        }
        LG_CHECK(!pb_sub(&ss, 2, N, &span));
        free(out);
        free(many);
    }
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

LG_TEST_MAIN(test_traceparent, test_tracestate, test_encode, test_encode_pb, test_url)
