/*
 * test_llmload_sse.c: llmload's SSE scanner (events compared as a full trace,
 * fed whole and split at every byte) and its chunk inspection.
 */
#include "../../tools/llmload/sse.c"
#include "lg_test.h"

struct trace {
    char buf[4096];
    size_t len;
    int events;
};

static int
trace_event(void *arg, const char *data, size_t len)
{
    struct trace *t = arg;

    t->len += (size_t)snprintf(t->buf + t->len, sizeof(t->buf) - t->len, "[%.*s]", (int)len, data);
    t->events++;
    return 0;
}

/* Feeds in whole, then split in two at every offset, then byte by byte:
 * the trace must always be the same. */
static int
check_trace(const char *in, const char *expect)
{
    size_t n = strlen(in);

    for (size_t split = 0; split <= n + 1; split++) {
        struct lg_ld_sse s;
        struct trace t = { .len = 0 };

        lg_ld_sse_init(&s, 1024);
        if (split <= n) {
            LG_CHECK(lg_ld_sse_feed(&s, in, split, trace_event, &t) == LG_OK);
            LG_CHECK(lg_ld_sse_feed(&s, in + split, n - split, trace_event, &t) == LG_OK);
        } else {
            for (size_t i = 0; i < n; i++) {
                LG_CHECK(lg_ld_sse_feed(&s, in + i, 1, trace_event, &t) == LG_OK);
            }
        }
        t.buf[t.len] = '\0';
        if (strcmp(t.buf, expect) != 0) {
            fprintf(stderr, "split %zu: got %s expected %s\n", split, t.buf, expect);
            lg_ld_sse_free(&s);
            return 1;
        }
        lg_ld_sse_free(&s);
    }
    return 0;
}

static int
test_sse_framing(void)
{
    LG_CHECK(check_trace("data: a\n\n", "[a]") == 0);
    LG_CHECK(check_trace("data:a\n\ndata:  b\n\n", "[a][ b]") == 0);
    LG_CHECK(check_trace("data: a\r\n\r\ndata: b\r\r", "[a][b]") == 0);
    LG_CHECK(check_trace("data: 1\ndata: 2\n\n", "[1\n2]") == 0);
    LG_CHECK(check_trace(": keepalive\n\nevent: x\nid: 3\nretry: 5\ndata: y\n\n", "[y]") == 0);
    LG_CHECK(check_trace("data\n\n", "[]") == 0);
    LG_CHECK(check_trace("data: [DONE]\n\n", "[[DONE]]") == 0);
    LG_CHECK(check_trace("\n\n\ndata: a\n", "") == 0); /* no blank line: not dispatched */
    LG_CHECK(check_trace("datax: a\n\ndata: b\n\n", "[b]") == 0);
    return 0;
}

static int
test_sse_bounds_and_stop(void)
{
    struct lg_ld_sse s;
    struct trace t = { .len = 0 };
    char big[300];

    memset(big, 'x', sizeof(big));
    lg_ld_sse_init(&s, 256);
    LG_CHECK(lg_ld_sse_feed(&s, "data: ", 6, trace_event, &t) == LG_OK);
    LG_CHECK(lg_ld_sse_feed(&s, big, sizeof(big), trace_event, &t) == LG_EPROTO);
    lg_ld_sse_reset(&s);
    LG_CHECK(lg_ld_sse_feed(&s, "data: ok\n\n", 10, trace_event, &t) == LG_OK);
    LG_CHECK(t.events == 1);
    lg_ld_sse_free(&s);
    return 0;
}

static int
stop_event(void *arg, const char *data, size_t len)
{
    (*(int *)arg)++;
    return 7;
}

static int
test_sse_callback_stops(void)
{
    struct lg_ld_sse s;
    int n = 0;

    lg_ld_sse_init(&s, 256);
    LG_CHECK(lg_ld_sse_feed(&s, "data: a\n\ndata: b\n\n", 18, stop_event, &n) == 7);
    LG_CHECK(n == 1);
    lg_ld_sse_free(&s);
    return 0;
}

static int
inspect(const char *json, struct lg_ld_chunk *c)
{
    return lg_ld_chunk_inspect(json, strlen(json), c);
}

static int
test_chunk_content(void)
{
    struct lg_ld_chunk c;

    LG_CHECK(inspect("{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}", &c) == 0);
    LG_CHECK(c.content && !c.has_usage && !c.error);
    LG_CHECK(inspect("{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}", &c)
             == 0);
    LG_CHECK(!c.content);
    LG_CHECK(inspect("{\"choices\":[{\"delta\":{\"content\":null}}]}", &c) == 0);
    LG_CHECK(!c.content);
    LG_CHECK(inspect("{\"choices\":[{\"text\":\" x\",\"index\":0}]}", &c) == 0);
    LG_CHECK(c.content);
    LG_CHECK(inspect("{\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}", &c) == 0);
    LG_CHECK(c.content);
    LG_CHECK(inspect("{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}", &c) == 0);
    LG_CHECK(c.content);
    LG_CHECK(inspect("{\"choices\":[{\"delta\":{\"tool_calls\":[]}}]}", &c) == 0);
    LG_CHECK(!c.content);
    LG_CHECK(inspect("{\"choices\":[{\"message\":{\"content\":\"whole\"}}]}", &c) == 0);
    LG_CHECK(c.content);
    /* Only the right paths count. */
    LG_CHECK(inspect("{\"content\":\"x\",\"text\":\"y\",\"delta\":{\"content\":\"z\"}}", &c) == 0);
    LG_CHECK(!c.content);
    LG_CHECK(inspect("{\"choices\":[{\"delta\":{\"x\":{\"content\":\"z\"}}}]}", &c) == 0);
    LG_CHECK(!c.content);
    LG_CHECK(
        inspect("{\"choices\":[{\"index\":0,\"delta\":{}},{\"delta\":{\"content\":\"\\u00e9\"}}]}",
                &c)
        == 0);
    LG_CHECK(c.content);
    return 0;
}

static int
test_chunk_usage_and_errors(void)
{
    struct lg_ld_chunk c;

    LG_CHECK(
        inspect("{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":42}}", &c)
        == 0);
    LG_CHECK(c.has_usage && c.completion_tokens == 42 && !c.content);
    LG_CHECK(inspect("{\"usage\":null}", &c) == 0);
    LG_CHECK(!c.has_usage);
    LG_CHECK(inspect("{\"usage\":{\"completion_tokens\":1.5}}", &c) == 0);
    LG_CHECK(!c.has_usage);
    LG_CHECK(inspect("{\"error\":{\"message\":\"boom\"}}", &c) == 0);
    LG_CHECK(c.error);
    LG_CHECK(inspect(" [1, -2.5e+3, true, false, null, \"s\\n\", {}] ", &c) == 0);
    return 0;
}

static int
test_chunk_rejects(void)
{
    static const char *const bad[] = {
        "",      "{",     "{\"a\":}", "{\"a\" 1}", "[1,]",  "{\"a\":1,}", "01",
        "1.",    "-",     "1e",       "tru",       "\"abc", "\"\\x\"",    "\"\\u12g4\"",
        "{} {}", "{a:1}", "[1 2]",    "\"\x01\"",  "nul",   "{\"a\":1]",
    };
    struct lg_ld_chunk c;

    for (size_t i = 0; i < LG_ARRAY_SIZE(bad); i++) {
        if (inspect(bad[i], &c) != LG_EPROTO) {
            fprintf(stderr, "accepted '%s'\n", bad[i]);
            return 1;
        }
    }
    return 0;
}

static int
test_chunk_depth_bound(void)
{
    char deep[200];
    struct lg_ld_chunk c;

    /* 64 levels parse; 80 are refused, without recursing further. */
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    LG_CHECK(lg_ld_chunk_inspect(deep, 128, &c) == LG_OK);
    memset(deep, '[', 80);
    memset(deep + 80, ']', 80);
    LG_CHECK(lg_ld_chunk_inspect(deep, 160, &c) == LG_EPROTO);
    return 0;
}

LG_TEST_MAIN(test_sse_framing, test_sse_bounds_and_stop, test_sse_callback_stops,
             test_chunk_content, test_chunk_usage_and_errors, test_chunk_rejects,
             test_chunk_depth_bound)
