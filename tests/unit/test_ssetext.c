/*
 * test_ssetext.c: the text a stream delivered, from its events' JSON. Every
 * stream is also fed split at every byte (and byte by byte) and must give
 * the same text; the engines' own transcripts (tests/fixtures/engines/)
 * give what jansson reads from each event's choices[0].delta.content or
 * choices[0].text.
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "lg_test.h"
#include "http/ssetext.h"

struct run {
    char text[4096];
    size_t len;
    unsigned flags;
    uint64_t events;
    size_t added; /* sum of what event_end returned */
};

/*
 * Feeds `events` (each event's data, events separated by \x1e) with the
 * whole input split at `split` (SIZE_MAX: byte by byte), ending each event.
 */
static struct run
feed(const char *events, size_t split, size_t max)
{
    struct lg_ssetext t;
    struct run r = { .len = 0 };
    size_t n = strlen(events), start = 0;

    lg_ssetext_init(&t, max);
    for (size_t i = 0; i <= n; i++) {
        if (i < n && events[i] != '\x1e') {
            continue;
        }
        /* the event is events[start, i): fed in pieces cut at the split point */
        if (split == SIZE_MAX) {
            for (size_t k = start; k < i; k++) {
                lg_ssetext_feed(&t, events + k, 1);
            }
        } else if (split > start && split < i) {
            lg_ssetext_feed(&t, events + start, split - start);
            lg_ssetext_feed(&t, events + split, i - split);
        } else {
            lg_ssetext_feed(&t, events + start, i - start);
        }
        r.added += lg_ssetext_event_end(&t);
        start = i + 1;
    }
    {
        size_t len;
        const char *s = lg_ssetext_text(&t, &len);

        LG_BUG_ON(len >= sizeof(r.text));
        memcpy(r.text, s, len);
        r.len = len;
    }
    r.flags = t.flags;
    r.events = t.events;
    LG_BUG_ON(r.flags == 0 && r.added != r.len);
    lg_ssetext_free(&t);
    return r;
}

/* The text and flags expected, for every split and byte by byte. */
static int
check(const char *events, const char *text, size_t text_len, unsigned flags, size_t max)
{
    size_t n = strlen(events);

    for (size_t k = 0; k <= n + 1; k++) {
        struct run r = feed(events, k == n + 1 ? SIZE_MAX : k, max);

        if (r.flags != flags || r.len != text_len || memcmp(r.text, text, text_len) != 0) {
            fprintf(stderr, "split %zu: got flags %u, %zu bytes \"%.*s\"; want %u, \"%s\"\n", k,
                    r.flags, r.len, (int)r.len, r.text, flags, text);
            return 1;
        }
    }
    return 0;
}

#define CHUNK(delta) "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":" delta ",\"finish_reason\":null}]}"

static int
test_chat_and_completions(void)
{
    /* vLLM's shape: role chunk, contents with escapes, finish, usage, [DONE] */
    const char *chat = CHUNK("{\"role\":\"assistant\",\"content\":\"\"}") "\x1e"
        CHUNK("{\"content\":\"He\\\"llo\"}") "\x1e"
        CHUNK("{\"content\":\"\\n\\t\\\\ \\/ \\u00e9\\u20AC\\ud83d\\ude00\"}") "\x1e"
        "{\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":{\"content\":"
        "[{\"token\":\"no\",\"bytes\":[1,2]}]},\"finish_reason\":\"length\"}]}\x1e"
        "{\"id\":\"x\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\x1e"
        "[DONE]";
    const char *want = "He\"llo\n\t\\ / \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    struct run r;

    LG_CHECK(check(chat, want, strlen(want), 0, 1024) == 0);
    r = feed(chat, 0, 1024);
    LG_CHECK(r.events == 2); /* the events that added text */
    /* completions: choices[0].text; a "text" anywhere else is not the answer */
    LG_CHECK(check("{\"choices\":[{\"text\":\" a\",\"index\":0,\"logprobs\":null}],"
                   "\"usage\":null,\"x\":{\"text\":\"no\"}}\x1e"
                   "{\"choices\":[{\"index\":0,\"text\":\"b\\u0000c\"}]}",
                   " ab\0c", 5, 0, 1024)
             == 0);
    /* keys in any order, whitespace and LF-joined data lines; content null; nested others */
    LG_CHECK(check("{ \"choices\" : [ { \"delta\" : { \"content\" : null } , \"index\" : 0 } ] }"
                   "\x1e{\n\"choices\":\n[{\"finish_reason\":null,\"delta\":{\"tool_calls\":[],"
                   "\"content\":\"x\",\"extra\":[{\"content\":\"no\"},[\"no\"]]},\"index\":0}]}",
                   "x", 1, 0, 1024)
             == 0);
    /* events without JSON or data a client would skip: no text, no flag */
    LG_CHECK(check("\x1eping\x1e[DONE]\x1e{\"error\":{\"message\":\"m\",\"code\":500}}", "", 0, 0,
                   1024)
             == 0);
    return 0;
}

static int
test_what_cannot_be_continued(void)
{
    /* reasoning, tool calls, a second choice, a legacy function call */
    LG_CHECK(check(CHUNK("{\"content\":\"a\"}") "\x1e" CHUNK("{\"reasoning_content\":\"r\"}"), "", 0,
                   LG_SSETEXT_F_OTHER, 1024)
             == 0);
    LG_CHECK(check(CHUNK("{\"reasoning\":\"\\u0041\"}"), "", 0, LG_SSETEXT_F_OTHER, 1024) == 0);
    LG_CHECK(check(CHUNK("{\"reasoning_content\":\"\",\"content\":\"a\"}"), "a", 1, 0, 1024) == 0);
    LG_CHECK(check(CHUNK("{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}"), "",
                   0, LG_SSETEXT_F_OTHER, 1024)
             == 0);
    LG_CHECK(check(CHUNK("{\"function_call\":{\"name\":\"f\"}}"), "", 0, LG_SSETEXT_F_OTHER, 1024)
             == 0);
    LG_CHECK(check(CHUNK("{\"function_call\":null,\"content\":\"a\"}"), "a", 1, 0, 1024) == 0);
    LG_CHECK(check("{\"choices\":[{\"index\":1,\"delta\":{\"content\":\"a\"}}]}", "", 0,
                   LG_SSETEXT_F_OTHER, 1024)
             == 0);
    LG_CHECK(check("{\"choices\":[{\"index\":10,\"text\":\"a\"}]}", "", 0, LG_SSETEXT_F_OTHER, 1024)
             == 0);
    LG_CHECK(check("{\"choices\":[{\"text\":\"a\"},{\"text\":\"b\"}]}", "", 0, LG_SSETEXT_F_OTHER,
                   1024)
             == 0);
    LG_CHECK(check("{\"choices\":[]}\x1e{\"choices\":[{\"text\":\"a\"}]}", "a", 1, 0, 1024) == 0);
    /* escapes that are no text, JSON cut short, brackets that do not match */
    LG_CHECK(check(CHUNK("{\"content\":\"\\ud83d\"}"), "", 0, LG_SSETEXT_F_BAD, 1024) == 0);
    LG_CHECK(check(CHUNK("{\"content\":\"\\ud83dx\"}"), "", 0, LG_SSETEXT_F_BAD, 1024) == 0);
    LG_CHECK(check(CHUNK("{\"content\":\"\\ud83d\\n\"}"), "", 0, LG_SSETEXT_F_BAD, 1024) == 0);
    LG_CHECK(check(CHUNK("{\"content\":\"\\ude00\"}"), "", 0, LG_SSETEXT_F_BAD, 1024) == 0);
    LG_CHECK(check(CHUNK("{\"content\":\"\\x\"}"), "", 0, LG_SSETEXT_F_BAD, 1024) == 0);
    LG_CHECK(check(CHUNK("{\"content\":\"\\u12g4\"}"), "", 0, LG_SSETEXT_F_BAD, 1024) == 0);
    LG_CHECK(check("{\"choices\":[{\"delta\":{\"content\":\"a\"}}]", "", 0, LG_SSETEXT_F_BAD, 1024)
             == 0);
    LG_CHECK(check("{\"choices\":[{\"delta\":{\"content\":\"a", "", 0, LG_SSETEXT_F_BAD, 1024) == 0);
    LG_CHECK(check("{\"choices\":[}", "", 0, LG_SSETEXT_F_BAD, 1024) == 0);
    LG_CHECK(check("]", "", 0, LG_SSETEXT_F_BAD, 1024) == 0);
    LG_CHECK(check("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "", 0,
                   LG_SSETEXT_F_BAD, 1024)
             == 0);
    /* the bound: exactly max fits, a byte more drops the text */
    LG_CHECK(check(CHUNK("{\"content\":\"abc\"}") "\x1e" CHUNK("{\"content\":\"d\"}"), "abcd", 4, 0,
                   4)
             == 0);
    LG_CHECK(check(CHUNK("{\"content\":\"abc\"}") "\x1e" CHUNK("{\"content\":\"de\"}"), "", 0,
                   LG_SSETEXT_F_FULL, 4)
             == 0);
    LG_CHECK(check(CHUNK("{\"content\":\"\\u00e9\"}"), "", 0, LG_SSETEXT_F_FULL, 1) == 0);
    return 0;
}

/* An event that never ends (its stream was cut) leaves the text as it was. */
static int
test_event_dropped(void)
{
    struct lg_ssetext t;
    const char *a = CHUNK("{\"content\":\"one\"}");
    const char *b = CHUNK("{\"content\":\"two\"}");
    const char *s;
    size_t len;

    lg_ssetext_init(&t, 64);
    lg_ssetext_feed(&t, a, strlen(a));
    LG_CHECK(lg_ssetext_event_end(&t) == 3);
    lg_ssetext_feed(&t, b, strlen(b) - 10); /* cut inside the event, text read already */
    s = lg_ssetext_text(&t, &len);
    LG_CHECK(len == 3 && memcmp(s, "one", 3) == 0);
    lg_ssetext_event_drop(&t);
    lg_ssetext_feed(&t, b, strlen(b)); /* the next event starts clean */
    LG_CHECK(lg_ssetext_event_end(&t) == 3);
    s = lg_ssetext_text(&t, &len);
    LG_CHECK(len == 6 && memcmp(s, "onetwo", 6) == 0);
    LG_CHECK(t.flags == 0 && t.events == 2);
    lg_ssetext_free(&t);
    return 0;
}

/* What jansson reads from one event's data: choices[0].delta.content or .text. */
static void
reference_event(const char *data, size_t n, char *out, size_t *len, size_t cap)
{
    json_t *root = json_loadb(data, n, 0, NULL);
    json_t *choice = json_array_get(json_object_get(root, "choices"), 0);
    json_t *v = json_object_get(json_object_get(choice, "delta"), "content");

    if (!json_is_string(v)) {
        v = json_object_get(choice, "text");
    }
    if (json_is_string(v)) {
        size_t k = json_string_length(v);

        LG_BUG_ON(*len + k > cap);
        memcpy(out + *len, json_string_value(v), k);
        *len += k;
    }
    json_decref(root);
}

/* Every engine's OpenAI chat transcript (llama.cpp's native /completion is
 * no OpenAI stream): the text, as jansson reads it event by event. */
static int
test_engine_transcripts(void)
{
    static const char *const files[] = {
        "tests/fixtures/engines/vllm/chat_stream.sse",
        "tests/fixtures/engines/sglang/chat_stream.sse",
        "tests/fixtures/engines/tgi/chat_stream.sse",
        "tests/fixtures/engines/llamacpp/chat_stream.sse",
        "tests/fixtures/engines/vllm/chat_stream_error.sse",
    };

    for (size_t f = 0; f < LG_ARRAY_SIZE(files); f++) {
        static char buf[65536], events[65536], want[8192];
        size_t n = lg_test_read_src(files[f], buf, sizeof(buf)), ne = 0, nw = 0;
        size_t line = 0, ev_start = 0;

        LG_CHECK(n > 0);
        /* each event's data lines (the value after "data:" and one space), LF-joined */
        for (size_t i = 0; i <= n; i++) {
            if (i < n && buf[i] != '\n') {
                continue;
            }
            if (i == line || i == n) { /* a blank line: the event ends */
                if (ne > ev_start) {
                    reference_event(events + ev_start, ne - ev_start, want, &nw, sizeof(want));
                    events[ne++] = '\x1e';
                    ev_start = ne;
                }
            } else if (i - line > 5 && memcmp(buf + line, "data:", 5) == 0) {
                size_t v = line + 5 + (buf[line + 5] == ' ');

                if (ne > ev_start) {
                    events[ne++] = '\n';
                }
                memcpy(events + ne, buf + v, i - v);
                ne += i - v;
            }
            line = i + 1;
        }
        events[ne] = '\0';
        LG_CHECK(nw > 0);
        if (check(events, want, nw, 0, 65536) != 0) {
            fprintf(stderr, "in %s\n", files[f]);
            return 1;
        }
    }
    return 0;
}

LG_TEST_MAIN(test_chat_and_completions, test_what_cannot_be_continued, test_event_dropped,
             test_engine_transcripts)
