/*
 * test_engine_fixtures.c: the engines' own /metrics expositions and SSE
 * transcripts (tests/fixtures/engines/, each with the source it was taken
 * from) through the gateway's scraper and SSE scanner.
 *
 * Every exposition must parse without a bad line and give the engine's
 * waiting, running and KV-cache figures, in each version's names. Every
 * transcript is fed whole, split at every byte and byte by byte, and must
 * give the same events, content events (the first one is the TTFT event),
 * error events, token counts and end; and every prefix of it (a stream cut
 * there) must not look complete before the event that completes it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/enginemetrics.h"
#include "http/sse.h"
#include "lg_test.h"

#define FIXTURE_MAX (256 * 1024)

static char fixture_buf[FIXTURE_MAX];

/* Reads tests/fixtures/engines/<name> into fixture_buf; returns its length or -1. */
static long
fixture_read(const char *name)
{
    char rel[256];

    snprintf(rel, sizeof(rel), "tests/fixtures/engines/%s", name);
    return lg_test_read_src(rel, fixture_buf, sizeof(fixture_buf));
}

/* ---- /metrics ------------------------------------------------------------- */

struct metrics_case {
    const char *file;
    enum lg_engine_flavor flavor;
    int32_t waiting, running;
    double kv;       /* -1: none */
    double finished; /* requests finished (counter), every label set; -1: none */
};

static const struct metrics_case metrics_cases[] = {
    /* V0 engine: gpu_cache_usage_perc, model_name only, no _created series */
    { "vllm/metrics_v0.prom", LG_ENGINE_VLLM, 2, 4, 0.3125, 214 },
    /* V1 0.8: gpu_cache_usage_perc, engine label, _created gauges, 2.097152e+06 */
    { "vllm/metrics_v1_0.8.prom", LG_ENGINE_VLLM, 0, 6, 0.21484375, 322 },
    /* V1 0.10: both KV gauges, two data-parallel engines: counts add, KV is the fuller */
    { "vllm/metrics_v1_0.10_dp2.prom", LG_ENGINE_VLLM, 1, 8, 0.6875, 896 },
    { "vllm/metrics_v1.prom", LG_ENGINE_VLLM, 3, 7, 0.4134, 1117 },
    /* two data-parallel schedulers, a pid-labelled gauge, histogram _sum first */
    { "sglang/metrics.prom", LG_ENGINE_SGLANG, 3, 10, 0.57, 1622 },
    /* SGLang 0.3: num_requests_running / num_requests_waiting */
    { "sglang/metrics_v0.3.prom", LG_ENGINE_SGLANG, 4, 9, 0.62, -1 },
    /* blank line after each family, a family without HELP, 1e-4 * 1.5^k buckets */
    { "tgi/metrics.prom", LG_ENGINE_TGI, 3, 8, -1, 1179 },
    /* values printed with 6 significant digits: 1.84392e+06 */
    { "llamacpp/metrics_with_kv.prom", LG_ENGINE_LLAMACPP, 1, 2, 0.190002, -1 },
    /* the KV gauges are gone */
    { "llamacpp/metrics.prom", LG_ENGINE_LLAMACPP, 2, 3, -1, -1 },
};

/* llama.cpp's GET /props: its slots (total_slots), which /metrics does not say. */
static int
test_props_fixture(void)
{
    long n = fixture_read("llamacpp/props.json");
    double slots = 0;
    static const char *const bad[] = {
        "",
        "[]",
        "{}",
        "{\"total_slots\":0}",
        "{\"total_slots\":-4}",
        "{\"total_slots\":\"4\"}",
        "{\"total_slots\":4.5}",
        "{\"total_slots\":1000000}",
        "{\"total_slots\":4,\"total_slots\":5}",
        "{\"total_slots\":4",
        "<html>not found</html>",
    };

    LG_CHECK(n > 0);
    LG_CHECK(lg_engine_props_parse(fixture_buf, (size_t)n, &slots) == LG_OK && slots == 4);
    for (size_t i = 0; i < LG_ARRAY_SIZE(bad); i++) {
        slots = 7;
        LG_CHECK(lg_engine_props_parse(bad[i], strlen(bad[i]), &slots) == LG_EDECLINED);
        LG_CHECK(slots == 7);
    }
    return 0;
}

/* Sample lines: neither blank nor a comment. */
static uint32_t
count_samples(const char *text, size_t len)
{
    uint32_t n = 0;
    size_t i = 0;

    while (i < len) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;

        if (end > i && text[i] != '#') {
            n++;
        }
        i = end + 1;
    }
    return n;
}

static int
test_metrics_fixtures(void)
{
    for (size_t c = 0; c < LG_ARRAY_SIZE(metrics_cases); c++) {
        const struct metrics_case *mc = &metrics_cases[c];
        long n = fixture_read(mc->file);
        struct lg_engine_sample s, t;

        LG_CHECK(n > 0);
        LG_CHECK(lg_engine_metrics_parse(fixture_buf, (size_t)n, LG_ENGINE_AUTO, &s) == LG_OK);
        if (s.flavor != mc->flavor || s.waiting != mc->waiting || s.running != mc->running
            || fabs(s.kv_usage - mc->kv) > 1e-9 || s.finished != mc->finished || s.bad_lines != 0
            || s.samples != count_samples(fixture_buf, (size_t)n)) {
            fprintf(stderr,
                    "%s: flavor %s waiting %d running %d kv %g finished %g bad %u samples %u/%u\n",
                    mc->file, lg_engine_flavor_name(s.flavor), s.waiting, s.running, s.kv_usage,
                    s.finished, s.bad_lines, s.samples, count_samples(fixture_buf, (size_t)n));
            return 1;
        }
        /* told the flavor: the same; told another: nothing found (callers fail open) */
        LG_CHECK(lg_engine_metrics_parse(fixture_buf, (size_t)n, mc->flavor, &t) == LG_OK);
        LG_CHECK(t.waiting == s.waiting && t.running == s.running && t.kv_usage == s.kv_usage);
        LG_CHECK(lg_engine_metrics_parse(
                     fixture_buf, (size_t)n,
                     mc->flavor == LG_ENGINE_TGI ? LG_ENGINE_VLLM : LG_ENGINE_TGI, &t)
                 == LG_EDECLINED);
    }
    return 0;
}

/* ---- SSE ---------------------------------------------------------------------- */

struct sse_case {
    const char *file;
    uint64_t events;        /* dispatched events with data */
    uint64_t content;       /* of which carried generated content */
    uint64_t first_content; /* ordinal (1-based) of the first content event: TTFT */
    uint32_t errors;        /* error events */
    bool done;              /* data: [DONE] */
    bool finished;          /* an event said generation ended */
    int64_t completion, prompt;
};

static const struct sse_case sse_cases[] = {
    /* role-only first chunk, the last token with finish_reason "length", usage chunk, [DONE] */
    { "vllm/chat_stream.sse", 8, 5, 2, 0, true, true, 5, 12 },
    /* data: {"error": {...}} after two tokens, and [DONE] all the same */
    { "vllm/chat_stream_error.sse", 5, 2, 2, 1, true, false, -1, -1 },
    /* a finish chunk with an empty delta; usage counts the end token */
    { "sglang/chat_stream.sse", 9, 5, 2, 0, true, true, 6, 21 },
    /* an abort's error chunk, then the usage chunk and [DONE] all the same */
    { "sglang/chat_stream_error.sse", 5, 1, 2, 1, true, false, 1, 21 },
    /* data: without a space, no [DONE]; the end token is an event; details carry the counts */
    { "tgi/generate_stream.sse", 6, 6, 1, 0, false, true, 6, 9 },
    /* {"error": "...", "error_type": "generation"}, then the stream ends */
    { "tgi/generate_stream_error.sse", 3, 2, 1, 1, false, false, -1, -1 },
    /* no role-only chunk, a keep-alive comment, usage chunk, data:[DONE] */
    { "tgi/chat_stream.sse", 8, 5, 1, 0, true, true, 6, 9 },
    { "tgi/chat_stream_error.sse", 3, 1, 1, 1, true, false, -1, -1 },
    /* "content": null first, usage chunk with timings */
    { "llamacpp/chat_stream.sse", 9, 5, 2, 0, true, true, 5, 14 },
    /* the current framing: data: {"error": ...} ends the stream, no [DONE] */
    { "llamacpp/chat_stream_error.sse", 4, 2, 2, 1, false, false, -1, -1 },
    /* the old framing: an `error:` field line (no data), then data: [DONE] */
    { "llamacpp/chat_stream_error_legacy.sse", 3, 1, 2, 1, true, false, -1, -1 },
    /* native /completion: running tokens_predicted, "stop": true, no [DONE] */
    { "llamacpp/completion_stream.sse", 5, 4, 1, 0, false, true, 4, 6 },
    /* the Responses API: `type` last; the done events and response.completed repeat the
     * text (no content), response.completed ends it with usage, no [DONE] */
    { "vllm/responses_stream.sse", 15, 7, 5, 0, false, true, 7, 12 },
    /* Anthropic's Messages API: message_start's usage, text_delta content, message_delta's
     * output_tokens, message_stop, then vLLM's [DONE] */
    { "vllm/messages_stream.sse", 13, 7, 3, 0, true, true, 7, 12 },
    /* its error event after two tokens, then [DONE] */
    { "vllm/messages_stream_error.sse", 6, 2, 3, 1, true, false, 0, 12 },
    /* SGLang streams a plain model's answer whole in response.completed: that event is its
     * first (and only) content event */
    { "sglang/responses_stream.sse", 3, 1, 3, 0, false, true, 7, 12 },
};

struct sse_seen {
    uint64_t events, content, first_content, reported;
    uint32_t errors;
    bool done, finished;
    int64_t completion, prompt;
};

static void
sse_seen_of(const struct lg_sse *s, uint64_t reported, uint64_t first, struct sse_seen *r)
{
    r->events = s->events;
    r->content = s->content_events;
    r->first_content = first;
    r->reported = reported;
    r->errors = s->error_events;
    r->done = s->done;
    r->finished = s->finished;
    r->completion = lg_sse_completion_tokens(s);
    r->prompt = s->probe.prompt_tokens;
}

/* first: whether r knows which event was the first content event */
static bool
sse_seen_is(const struct sse_seen *r, const struct sse_case *c, bool first)
{
    return r->events == c->events && r->content == c->content && r->reported == c->content
           && (!first || r->first_content == c->first_content) && r->errors == c->errors
           && r->done == c->done && r->finished == c->finished && r->completion == c->completion
           && r->prompt == c->prompt;
}

static void
sse_print(const char *how, const struct sse_seen *r)
{
    fprintf(stderr,
            "  %s: events %llu content %llu (reported %llu) first %llu errors %u done %d "
            "finished %d tokens %lld/%lld\n",
            how, (unsigned long long)r->events, (unsigned long long)r->content,
            (unsigned long long)r->reported, (unsigned long long)r->first_content, r->errors,
            r->done, r->finished, (long long)r->completion, (long long)r->prompt);
}

/* Feeds text in two pieces. */
static void
sse_feed_split(const char *text, size_t n, size_t split, struct sse_seen *r)
{
    struct lg_sse s;
    uint64_t reported = 0;

    lg_sse_init(&s);
    reported += lg_sse_feed(&s, text, split);
    reported += lg_sse_feed(&s, text + split, n - split);
    sse_seen_of(&s, reported, 0, r);
}

static int
test_sse_fixtures(void)
{
    for (size_t c = 0; c < LG_ARRAY_SIZE(sse_cases); c++) {
        const struct sse_case *sc = &sse_cases[c];
        long len = fixture_read(sc->file);
        size_t n = (size_t)len, complete_at = 0;
        struct lg_sse s;
        struct sse_seen r;
        uint64_t reported = 0, first = 0;
        bool was_complete = false;

        LG_CHECK(len > 0);
        /* byte by byte: the reference for the TTFT event and where the stream completes */
        lg_sse_init(&s);
        for (size_t i = 0; i < n; i++) {
            unsigned got = lg_sse_feed(&s, fixture_buf + i, 1);

            reported += got;
            if (got > 0 && first == 0) {
                first = s.events;
            }
            if (!was_complete && lg_sse_complete(&s)) {
                was_complete = true;
                complete_at = i + 1;
            }
            if (was_complete && !lg_sse_complete(&s)) {
                fprintf(stderr, "%s: complete, then not, at byte %zu\n", sc->file, i);
                return 1;
            }
        }
        sse_seen_of(&s, reported, first, &r);
        if (!sse_seen_is(&r, sc, true)) {
            fprintf(stderr, "%s:\n", sc->file);
            sse_print("byte by byte", &r);
            return 1;
        }
        /* complete once the completing event ended, at the end of an event, never before */
        if (sc->done || sc->finished) {
            LG_CHECK(was_complete && complete_at >= 2);
            LG_CHECK(fixture_buf[complete_at - 1] == '\n' && fixture_buf[complete_at - 2] == '\n');
        } else {
            LG_CHECK(!was_complete); /* ends like a cut stream: only an error event says why */
        }
        /* every split gives the same; a prefix (a cut stream) is complete only past complete_at */
        for (size_t k = 0; k <= n; k++) {
            struct lg_sse p;

            sse_feed_split(fixture_buf, n, k, &r);
            if (!sse_seen_is(&r, sc, false)) {
                fprintf(stderr, "%s: split at %zu:\n", sc->file, k);
                sse_print("split", &r);
                return 1;
            }
            lg_sse_init(&p);
            lg_sse_feed(&p, fixture_buf, k);
            if (lg_sse_complete(&p) != (was_complete && k >= complete_at)) {
                fprintf(stderr, "%s: cut at %zu looks %scomplete\n", sc->file, k,
                        lg_sse_complete(&p) ? "" : "in");
                return 1;
            }
        }
    }
    return 0;
}

/* The non-streaming bodies the probe also reads: the last data value of each is JSON too. */
static int
test_probe_error_bodies(void)
{
    static const char *const errors[] = {
        /* vLLM, SGLang: json.dumps (spaces after the separators) */
        "{\"error\": {\"object\": \"error\", \"message\": \"m\", \"type\": \"BadRequestError\", "
        "\"param\": null, \"code\": 400}}",
        /* TGI */
        "{\"error\":\"Input validation error: `inputs` must not be empty\","
        "\"error_type\":\"validation\"}",
        /* llama.cpp */
        "{\"error\":{\"code\":400,\"message\":\"m\",\"type\":\"invalid_request_error\"}}",
    };
    static const char *const fine[] = {
        /* an OpenAI Responses object: "error": null is no error */
        "{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"error\":null}",
        /* the word in a value or a longer key is no error either */
        "{\"object\":\"error\",\"error_type\":\"none\",\"text\":\"error\"}",
    };
    struct lg_json_probe p;

    for (size_t i = 0; i < LG_ARRAY_SIZE(errors); i++) {
        lg_json_probe_init(&p);
        lg_json_probe_feed(&p, errors[i], strlen(errors[i]));
        LG_CHECK(p.error && !p.content && !p.finished);
    }
    for (size_t i = 0; i < LG_ARRAY_SIZE(fine); i++) {
        lg_json_probe_init(&p);
        lg_json_probe_feed(&p, fine[i], strlen(fine[i]));
        LG_CHECK(!p.error);
    }
    return 0;
}

/* The Responses and Messages APIs' whole answers: content and their usage. */
static int
test_probe_api_bodies(void)
{
    static const char *const files[] = { "vllm/responses.json", "vllm/messages.json" };

    for (size_t i = 0; i < LG_ARRAY_SIZE(files); i++) {
        struct lg_json_probe p;
        long n = fixture_read(files[i]);

        LG_CHECK(n > 0);
        lg_json_probe_init(&p);
        lg_json_probe_feed(&p, fixture_buf, (size_t)n);
        LG_CHECK(p.content && !p.error);
        LG_CHECK(p.completion_tokens == 7 && p.prompt_tokens == 12);
    }
    return 0;
}

LG_TEST_MAIN(test_metrics_fixtures, test_props_fixture, test_sse_fixtures, test_probe_error_bodies,
             test_probe_api_bodies)
