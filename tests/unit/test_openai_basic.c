/*
 * test_openai_basic.c: request-body inspection of chat, completion and embedding
 * bodies split into 7-byte chains, refusals, and error bodies.
 */
#include <string.h>

#include <event2/buffer.h>

#include "http/openai.h"
#include "lg_test.h"

static int
inspect(const char *body, struct lg_openai_req *out, char *err)
{
    struct evbuffer *b = evbuffer_new();
    int rc;

    /* several chains: jansson reads them through the callback */
    for (size_t i = 0; i < strlen(body); i += 7) {
        struct evbuffer *piece = evbuffer_new();

        evbuffer_add(piece, body + i, strlen(body + i) < 7 ? strlen(body + i) : 7);
        evbuffer_add_buffer(b, piece);
        evbuffer_free(piece);
    }
    rc = lg_openai_inspect(b, 16, out, err, 256);
    evbuffer_free(b);
    return rc;
}

static int
test_chat_fields(void)
{
    struct lg_openai_req r;
    char err[256];

    LG_CHECK(inspect("{\"model\":\"llama\",\"stream\":true,\"max_tokens\":42,"
                     "\"stream_options\":{\"include_usage\":true},"
                     "\"messages\":[{\"role\":\"system\",\"content\":\"You are kind.\"},"
                     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}]}",
                     &r, err)
             == LG_OK);
    LG_CHECK_STR(r.model, "llama");
    LG_CHECK(r.stream);
    LG_CHECK(r.include_usage);
    LG_CHECK(r.max_tokens == 42);
    LG_CHECK(r.prompt_bytes == strlen("You are kind.") + 2);
    LG_CHECK(r.prefix_hash != 0);
    return 0;
}

static int
test_prefix_hash_covers_only_the_prefix(void)
{
    struct lg_openai_req a, b, c;
    char err[256];

    /* prefix_bytes is 16: "system" + the first 10 bytes of the system prompt */
    LG_CHECK(inspect("{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":"
                     "\"0123456789 shared\"},{\"role\":\"user\",\"content\":\"one\"}]}",
                     &a, err)
             == LG_OK);
    LG_CHECK(inspect("{\"messages\":[{\"role\":\"system\",\"content\":\"0123456789 other\"},"
                     "{\"content\":\"two\",\"role\":\"user\"}],\"model\":\"m\"}",
                     &b, err)
             == LG_OK);
    LG_CHECK(inspect("{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":"
                     "\"X123456789 shared\"}]}",
                     &c, err)
             == LG_OK);
    LG_CHECK(a.prefix_hash == b.prefix_hash);
    LG_CHECK(a.prefix_hash != c.prefix_hash);
    return 0;
}

static int
test_completions_and_embeddings(void)
{
    struct lg_openai_req r;
    char err[256];

    LG_CHECK(inspect("{\"model\":\"m\",\"prompt\":[\"ab\",\"cde\"],"
                     "\"max_completion_tokens\":7,\"max_tokens\":9}",
                     &r, err)
             == LG_OK);
    LG_CHECK(r.prompt_bytes == 5);
    LG_CHECK(r.max_tokens == 7); /* the newer name wins */
    LG_CHECK(!r.stream);
    LG_CHECK(inspect("{\"model\":\"e\",\"input\":[[1,2,3],\"abcd\"]}", &r, err) == LG_OK);
    LG_CHECK(r.prompt_bytes == 12 + 4);
    return 0;
}

/* The Responses and Messages APIs: their system prompts and inputs are hashed as chat's. */
static int
test_responses_and_messages(void)
{
    struct lg_openai_req a, b, c, m;
    char err[256];

    LG_CHECK(inspect("{\"model\":\"m\",\"instructions\":\"0123456789abcdef\",\"input\":"
                     "[{\"role\":\"user\",\"content\":\"one\"}],\"max_output_tokens\":5,"
                     "\"previous_response_id\":\"resp_1\"}",
                     &a, err)
             == LG_OK);
    LG_CHECK(a.max_tokens == 5);
    LG_CHECK_STR(a.previous_response_id, "resp_1");
    LG_CHECK(a.prompt_bytes == 16 + 3);
    /* prefix_bytes 16: the instructions alone */
    LG_CHECK(inspect("{\"model\":\"m\",\"instructions\":\"0123456789abcdef\",\"input\":"
                     "[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":"
                     "\"two\"}]},{\"type\":\"input_text\",\"text\":\"x\"}]}",
                     &b, err)
             == LG_OK);
    LG_CHECK(a.prefix_hash == b.prefix_hash && a.prefix_hash != 0);
    LG_CHECK(b.prompt_bytes == 16 + 3 + 1);
    LG_CHECK(b.previous_response_id[0] == '\0');
    /* the input's messages are hashed (no instructions: the first message's role and text) */
    LG_CHECK(inspect("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":\"one\"}]}",
                     &c, err)
             == LG_OK);
    LG_CHECK(c.prefix_hash != 0 && c.prefix_hash != a.prefix_hash);
    /* Messages: system (a string or text blocks) first */
    LG_CHECK(inspect("{\"model\":\"m\",\"max_tokens\":9,\"system\":[{\"type\":\"text\","
                     "\"text\":\"0123456789abcdef\"}],\"messages\":[{\"role\":\"user\","
                     "\"content\":\"hi\"}]}",
                     &m, err)
             == LG_OK);
    LG_CHECK(m.max_tokens == 9 && m.prompt_bytes == 16 + 2);
    LG_CHECK(m.prefix_hash == a.prefix_hash);
    LG_CHECK(inspect("{\"model\":\"m\",\"previous_response_id\":7}", &m, err) == LG_EINVAL);
    LG_CHECK_STR(m.param, "previous_response_id");
    return 0;
}

static int
test_errors(void)
{
    struct lg_openai_req r;
    char err[256];

    LG_CHECK(inspect("{\"model\":", &r, err) == LG_EINVAL);
    LG_CHECK(strstr(err, "malformed JSON") != NULL);
    LG_CHECK(inspect("[1,2]", &r, err) == LG_EINVAL);
    LG_CHECK(inspect("{\"model\":3}", &r, err) == LG_EINVAL);
    LG_CHECK(strstr(err, "\"model\" must be a string") != NULL);
    LG_CHECK(inspect("{\"model\":\"m\",\"stream\":\"yes\"}", &r, err) == LG_EINVAL);
    LG_CHECK(inspect("{\"model\":\"m\",\"max_tokens\":-1}", &r, err) == LG_EINVAL);
    LG_CHECK(inspect("{\"model\":\"m\"} trailing", &r, err) == LG_EINVAL);
    /* a missing model is reported by the caller, not here */
    LG_CHECK(inspect("{\"messages\":[]}", &r, err) == LG_OK);
    LG_CHECK(r.model[0] == '\0');
    return 0;
}

static int
test_error_body_escapes(void)
{
    struct evbuffer *b = evbuffer_new();
    char out[512];
    size_t n;

    n = lg_openai_error_body(b, "bad \"x\"\n\x01", "invalid_request_error", NULL, "bad_request");
    LG_CHECK(n == evbuffer_get_length(b) && n < sizeof(out));
    evbuffer_remove(b, out, n);
    out[n] = '\0';
    LG_CHECK_STR(out, "{\"error\":{\"message\":\"bad \\\"x\\\"\\n\\u0001\","
                      "\"type\":\"invalid_request_error\",\"param\":null,"
                      "\"code\":\"bad_request\"}}\n");
    evbuffer_free(b);
    LG_CHECK_STR(lg_openai_error_type(429), "rate_limit_error");
    LG_CHECK_STR(lg_openai_error_type(503), "api_error");
    return 0;
}

LG_TEST_MAIN(test_chat_fields, test_prefix_hash_covers_only_the_prefix,
             test_completions_and_embeddings, test_responses_and_messages, test_errors,
             test_error_body_escapes)
