/*
 * test_sse.c: the SSE scanner and JSON probe. Every stream is also fed split
 * at every byte boundary (and byte by byte), and must give the same events.
 */
#include <string.h>

#include "http/sse.h"
#include "lg_test.h"

struct sse_result {
    unsigned content;  /* content events reported by lg_sse_feed */
    uint64_t events;
    bool done;
    int64_t completion_tokens;
};

static struct sse_result
feed_split(const char *s, size_t split)
{
    struct lg_sse sse;
    struct sse_result r = { 0 };
    size_t n = strlen(s);

    lg_sse_init(&sse);
    if (split > n) {
        split = n;
    }
    r.content += lg_sse_feed(&sse, s, split);
    r.content += lg_sse_feed(&sse, s + split, n - split);
    r.events = sse.events;
    r.done = sse.done;
    r.completion_tokens = lg_sse_completion_tokens(&sse);
    LG_BUG_ON(sse.content_events != r.content);
    return r;
}

static struct sse_result
feed_bytes(const char *s)
{
    struct lg_sse sse;
    struct sse_result r = { 0 };

    lg_sse_init(&sse);
    for (size_t i = 0; s[i] != '\0'; i++) {
        r.content += lg_sse_feed(&sse, s + i, 1);
    }
    r.events = sse.events;
    r.done = sse.done;
    r.completion_tokens = lg_sse_completion_tokens(&sse);
    return r;
}

/* Checks the expected result for every split point and byte-by-byte. */
static int
check_all_splits(const char *s, unsigned content, uint64_t events, bool done, int64_t tokens)
{
    size_t n = strlen(s);

    for (size_t k = 0; k <= n; k++) {
        struct sse_result r = feed_split(s, k);

        if (r.content != content || r.events != events || r.done != done
            || r.completion_tokens != tokens) {
            fprintf(stderr,
                    "split at %zu: content %u/%u events %llu/%llu done %d/%d tokens %lld/%lld\n",
                    k, r.content, content, (unsigned long long)r.events,
                    (unsigned long long)events, r.done, done, (long long)r.completion_tokens,
                    (long long)tokens);
            return 1;
        }
    }
    {
        struct sse_result r = feed_bytes(s);

        LG_CHECK(r.content == content && r.events == events && r.done == done
                 && r.completion_tokens == tokens);
    }
    return 0;
}

static int
test_openai_chat_stream(void)
{
    const char *s =
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
        "\"content\":\"\"}}]}\n\n"
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n"
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n"
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
        "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,"
        "\"completion_tokens\":2,\"total_tokens\":7}}\n\n"
        "data: [DONE]\n\n";

    /* role-only first chunk carries no content; 2 content events, 6 events */
    return check_all_splits(s, 2, 6, true, 2);
}

static int
test_completions_text_and_crlf(void)
{
    const char *s = "data: {\"choices\":[{\"text\":\" a\"}]}\r\n\r\n"
                    "data:{\"choices\":[{\"text\":\"b\"}]}\r\r"
                    "data: {\"choices\":[{\"text\":\"\"}]}\n\n"
                    "data: [DONE]\r\n\r\n";

    return check_all_splits(s, 2, 4, true, -1);
}

static int
test_comments_fields_and_multiline_data(void)
{
    const char *s = ": keep-alive\n\n"
                    "event: message\nid: 7\nretry: 100\n"
                    "data: {\"choices\":[{\"delta\":\n"
                    "data: {\"content\":\"x\"}}]}\n\n"
                    "event: ping\n\n"
                    "data\n\n";

    /* the comment and the data-less event do not count; "data" alone is an empty event */
    return check_all_splits(s, 1, 2, false, -1);
}

static int
test_escapes_do_not_fool_the_probe(void)
{
    const char *s = "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"content\\\":\\\"x\"}}]}\n\n"
                    "data: {\"note\":\"\\\"content\\\":\\\"y\\\"\",\"choices\":[{\"delta\":{}}]}\n\n"
                    "data: {\"choices\":[{\"delta\":{\"content\":\"\\\\\"}}]}\n\n";

    return check_all_splits(s, 2, 3, false, -1);
}

static int
test_tool_calls_and_reasoning(void)
{
    const char *s = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0}]}}]}\n\n"
                    "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n"
                    "data: {\"choices\":[{\"delta\":{\"content\":null}}]}\n\n"
                    "data: {\"choices\":[{\"logprobs\":{\"content\":[]},\"delta\":{}}]}\n\n";

    return check_all_splits(s, 2, 4, false, -1);
}

static int
test_done_must_be_exact(void)
{
    const char *s = "data: [DONE] \n\ndata: [DON\n\ndata:  [DONE]\n\n";

    LG_CHECK(check_all_splits(s, 0, 3, false, -1) == 0);
    return check_all_splits("data:[DONE]\n\n", 0, 1, true, -1);
}

static int
test_incomplete_event_is_not_counted(void)
{
    /* a stream cut before the blank line: the last event never completes */
    return check_all_splits("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n"
                            "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}",
                            0, 0, false, -1);
}

static int
test_probe_whole_body(void)
{
    struct lg_json_probe p;
    const char *body = "{\"id\":\"x\",\"choices\":[{\"message\":{\"role\":\"assistant\","
                       "\"content\":\"hi\"}}],\"usage\":{\"prompt_tokens\": 12,"
                       "\"completion_tokens\" : 345,\"total_tokens\":357}}";

    for (size_t k = 0; k <= strlen(body); k++) {
        lg_json_probe_init(&p);
        lg_json_probe_feed(&p, body, k);
        lg_json_probe_feed(&p, body + k, strlen(body) - k);
        LG_CHECK(p.content);
        LG_CHECK(p.completion_tokens == 345);
        LG_CHECK(p.prompt_tokens == 12);
    }
    return 0;
}

/* A tap that writes down what it hears: data bytes, and each event's end and kind. */
struct rec_tap {
    struct lg_sse_tap tap; /* first */
    uint64_t fed;          /* stream offset of the bytes being fed */
    char data[512];
    size_t ndata;
    uint64_t ends[16];
    unsigned what[16];
    size_t nev;
};

static void
rec_data(struct lg_sse_tap *t, const char *p, size_t n)
{
    struct rec_tap *r = (struct rec_tap *)t;

    LG_BUG_ON(r->ndata + n > sizeof(r->data));
    memcpy(r->data + r->ndata, p, n);
    r->ndata += n;
}

static void
rec_event(struct lg_sse_tap *t, size_t end, unsigned what)
{
    struct rec_tap *r = (struct rec_tap *)t;

    LG_BUG_ON(r->nev == LG_ARRAY_SIZE(r->ends));
    r->ends[r->nev] = r->fed + end;
    r->what[r->nev++] = what;
}

static void
tap_feed(struct lg_sse *s, struct rec_tap *r, const char *p, size_t n)
{
    lg_sse_feed(s, p, n);
    r->fed += n;
}

/*
 * The tap hears each event's data (one leading space cut, lines joined by LF)
 * and where and what each event ended, whatever the split; an event cut
 * short and dropped leaves the next one clean.
 */
static int
test_tap(void)
{
    /* the events, and where each ends: past its blank line's first byte (a
     * CRLF's LF then belongs to what follows) */
    static const struct {
        const char *text;
        size_t end;
        unsigned what;
    } ev[] = {
        { "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", 0,
          LG_SSE_EV_DATA },
        { ": keep-alive\r\n\r\n", 1, 0 },
        { "data:{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\n\r\n", 1,
          LG_SSE_EV_DATA | LG_SSE_EV_CONTENT },
        { "data: {\"choices\":[{\"delta\":{},\ndata: \"finish_reason\":\"stop\"}]}\r\r", 0,
          LG_SSE_EV_DATA | LG_SSE_EV_FINISHED },
        { "data: {\"error\":{\"message\":\"x\"}}\n\n", 0, LG_SSE_EV_DATA | LG_SSE_EV_ERROR },
        { "data: [DONE]\n\n", 0, LG_SSE_EV_DATA | LG_SSE_EV_DONE },
    };
    static const char data[] = "{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}"
                               "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}"
                               "{\"choices\":[{\"delta\":{},\n\"finish_reason\":\"stop\"}]}"
                               "{\"error\":{\"message\":\"x\"}}[DONE]";
    char stream[1024];
    uint64_t ends[LG_ARRAY_SIZE(ev)];
    size_t n = 0;

    for (size_t i = 0; i < LG_ARRAY_SIZE(ev); i++) {
        size_t k = strlen(ev[i].text);

        memcpy(stream + n, ev[i].text, k);
        n += k;
        ends[i] = n - ev[i].end; /* ev[i].end: bytes after the end (a CRLF's LF) */
    }
    for (size_t split = 0; split <= n; split++) {
        struct lg_sse s;
        struct rec_tap r = { .tap = { rec_data, rec_event } };

        lg_sse_init(&s);
        s.tap = &r.tap;
        tap_feed(&s, &r, stream, split);
        tap_feed(&s, &r, stream + split, n - split);
        LG_CHECK(r.ndata == strlen(data) && memcmp(r.data, data, r.ndata) == 0);
        LG_CHECK(r.nev == LG_ARRAY_SIZE(ev));
        for (size_t i = 0; i < r.nev; i++) {
            LG_CHECK(r.what[i] == ev[i].what);
            LG_CHECK(r.ends[i] == ends[i]);
        }
        LG_CHECK(s.content_events == 1 && s.done && s.finished && s.error_events == 1);
    }
    /* cut inside an event, dropped: the next bytes are a new event */
    {
        struct lg_sse s;
        struct rec_tap r = { .tap = { rec_data, rec_event } };
        static const char half[] = "data: {\"choices\":[{\"delta\":{\"content\":\"cut";
        static const char next[] = "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n";

        lg_sse_init(&s);
        s.tap = &r.tap;
        tap_feed(&s, &r, half, strlen(half));
        lg_sse_event_drop(&s);
        r.fed = 0;
        tap_feed(&s, &r, next, strlen(next));
        LG_CHECK(r.nev == 1 && r.what[0] == (LG_SSE_EV_DATA | LG_SSE_EV_CONTENT));
        LG_CHECK(r.ends[0] == strlen(next));
        LG_CHECK(s.content_events == 1 && s.events == 1);
    }
    return 0;
}

LG_TEST_MAIN(test_openai_chat_stream, test_completions_text_and_crlf,
             test_comments_fields_and_multiline_data, test_escapes_do_not_fool_the_probe,
             test_tool_calls_and_reasoning, test_done_must_be_exact,
             test_incomplete_event_is_not_counted, test_probe_whole_body, test_tap)
