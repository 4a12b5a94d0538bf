/*
 * test_llmsim_api.c: llmsim's OpenAI request inspection (token counts, prefix
 * keys, options, rejections) and response rendering (chunk framing).
 */
#include <string.h>

#include <event2/buffer.h>

#include "../../tools/llmsim/api.c"
#include "../../tools/llmsim/prefix.c"
#include "lg_test.h"

static int
parse(enum lg_sim_api_kind kind, const char *body, struct lg_sim_request *req,
      struct lg_sim_api_error *err)
{
    return lg_sim_api_parse(kind, body, strlen(body), 4, req, err);
}

static int
test_chat(void)
{
    struct lg_sim_request req;
    struct lg_sim_api_error err;
    /* contents: 16 + 24 bytes = 10 tokens; keyed text: "system" + 16 + "user" + 24 = 50 bytes */
    const char *body =
        "{\"model\":\"m\",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
        "\"max_tokens\":7,\"messages\":[{\"role\":\"system\",\"content\":\"0123456789abcdef\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ABCDEFGHIJKLMNOPQRSTUVWX\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}";
    const char *text = "system0123456789abcdefuserABCDEFGHIJKLMNOPQRSTUVWX";
    struct evbuffer *buf = evbuffer_new();
    struct lg_hstream st;

    LG_CHECK(parse(LG_SIM_API_CHAT, body, &req, &err) == LG_OK);
    LG_CHECK_STR(req.model, "m");
    LG_CHECK(req.stream && req.include_usage && !req.ignore_eos);
    LG_CHECK(req.max_tokens == 7);
    LG_CHECK(req.prompt_bytes == 40 && req.prompt_tokens == 10);
    LG_CHECK(req.nblocks == 3); /* 16-byte blocks over 50 bytes */
    lg_hstream_init(&st);
    lg_hstream_feed(&st, text, 48);
    LG_CHECK(req.block_keys[2] == llmsim_shm_key(lg_hstream_value(&st)));
    lg_sim_request_free(&req);

    /* the evbuffer path gives the same result, whatever the chain looks like */
    evbuffer_add(buf, body, 20);
    evbuffer_add(buf, body + 20, strlen(body) - 20);
    LG_CHECK(lg_sim_api_parse_buffer(LG_SIM_API_CHAT, buf, 4, &req, &err) == LG_OK);
    LG_CHECK(req.prompt_tokens == 10 && req.nblocks == 3);
    lg_sim_request_free(&req);
    evbuffer_free(buf);

    /* no model, no max_tokens, max_completion_tokens wins, empty prompt counts as 1 */
    LG_CHECK(parse(LG_SIM_API_CHAT,
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"\"}],\"max_tokens\":9,"
                   "\"max_completion_tokens\":3,\"ignore_eos\":true}",
                   &req, &err)
             == LG_OK);
    LG_CHECK(req.model == NULL && req.max_tokens == 3 && req.prompt_tokens == 1);
    LG_CHECK(req.ignore_eos && !req.stream && req.sim_tokens == 0);
    lg_sim_request_free(&req);

    /* a replayed answer's length, beside the client's max_tokens */
    LG_CHECK(parse(LG_SIM_API_CHAT,
                   "{\"messages\":[{\"content\":\"x\"}],\"max_tokens\":90,"
                   "\"sim_completion_tokens\":12}",
                   &req, &err)
             == LG_OK);
    LG_CHECK(req.max_tokens == 90 && req.sim_tokens == 12);
    lg_sim_request_free(&req);
    return 0;
}

static int
test_completions_and_embeddings(void)
{
    struct lg_sim_request req;
    struct lg_sim_request again;
    struct lg_sim_api_error err;

    LG_CHECK(parse(LG_SIM_API_COMPLETION, "{\"prompt\":[\"abcdefgh\",\"ijkl\"]}", &req, &err)
             == LG_OK);
    LG_CHECK(req.prompt_tokens == 3 && req.max_tokens == 0 && req.ninputs == 0);
    lg_sim_request_free(&req);
    LG_CHECK(parse(LG_SIM_API_COMPLETION, "{\"prompt\":[1,2,3,4,5]}", &req, &err) == LG_OK);
    LG_CHECK(req.prompt_tokens == 5 && req.nblocks == 1); /* 4 ids make a 16-byte block */
    lg_sim_request_free(&req);
    LG_CHECK(parse(LG_SIM_API_EMBEDDING, "{\"input\":[\"a\",\"b\",\"a\",[7,8]]}", &req, &err)
             == LG_OK);
    LG_CHECK(req.ninputs == 4);
    LG_CHECK(req.input_hashes[0] == req.input_hashes[2]);
    LG_CHECK(req.input_hashes[0] != req.input_hashes[1]);
    LG_CHECK(parse(LG_SIM_API_EMBEDDING, "{\"input\":\"a\"}", &again, &err) == LG_OK);
    LG_CHECK(again.ninputs == 1 && again.input_hashes[0] == req.input_hashes[0]);
    lg_sim_request_free(&req);
    lg_sim_request_free(&again);
    return 0;
}

static int
test_rejections(void)
{
    static const struct {
        enum lg_sim_api_kind kind;
        const char *body;
        const char *param;
    } bad[] = {
        { LG_SIM_API_CHAT, "", NULL },
        { LG_SIM_API_CHAT, "[]", NULL },
        { LG_SIM_API_CHAT, "{\"messages\":[]}", "messages" },
        { LG_SIM_API_CHAT, "{\"messages\":\"hi\"}", "messages" },
        { LG_SIM_API_CHAT, "{\"messages\":[1]}", "messages" },
        { LG_SIM_API_CHAT, "{\"messages\":[{\"role\":1,\"content\":\"x\"}]}", "messages" },
        { LG_SIM_API_CHAT, "{\"messages\":[{\"content\":7}]}", "messages" },
        { LG_SIM_API_CHAT, "{\"messages\":[{\"content\":[3]}]}", "messages" },
        { LG_SIM_API_CHAT, "{\"model\":5,\"messages\":[{\"content\":\"x\"}]}", "model" },
        { LG_SIM_API_CHAT, "{\"model\":\"\",\"messages\":[{\"content\":\"x\"}]}", "model" },
        { LG_SIM_API_CHAT, "{\"max_tokens\":0,\"messages\":[{\"content\":\"x\"}]}", "max_tokens" },
        { LG_SIM_API_CHAT, "{\"max_tokens\":1.5,\"messages\":[{\"content\":\"x\"}]}",
          "max_tokens" },
        { LG_SIM_API_CHAT, "{\"max_tokens\":10000001,\"messages\":[{\"content\":\"x\"}]}",
          "max_tokens" },
        { LG_SIM_API_CHAT, "{\"stream\":1,\"messages\":[{\"content\":\"x\"}]}", "stream" },
        { LG_SIM_API_CHAT, "{\"sim_completion_tokens\":0,\"messages\":[{\"content\":\"x\"}]}",
          "sim_completion_tokens" },
        { LG_SIM_API_CHAT, "{\"sim_completion_tokens\":\"5\",\"messages\":[{\"content\":\"x\"}]}",
          "sim_completion_tokens" },
        { LG_SIM_API_CHAT, "{\"stream_options\":3,\"messages\":[{\"content\":\"x\"}]}",
          "stream_options" },
        { LG_SIM_API_CHAT,
          "{\"stream_options\":{\"include_usage\":\"y\"},\"messages\":[{\"content\":\"x\"}]}",
          "include_usage" },
        { LG_SIM_API_COMPLETION, "{}", "prompt" },
        { LG_SIM_API_COMPLETION, "{\"prompt\":[]}", "prompt" },
        { LG_SIM_API_COMPLETION, "{\"prompt\":[[]]}", "prompt" },
        { LG_SIM_API_COMPLETION, "{\"prompt\":[1,-2]}", "prompt" },
        { LG_SIM_API_COMPLETION, "{\"prompt\":[1,\"a\"]}", "prompt" },
        { LG_SIM_API_COMPLETION, "{\"prompt\":{}}", "prompt" },
        { LG_SIM_API_EMBEDDING, "{\"input\":null}", "input" },
        { LG_SIM_API_EMBEDDING, "{\"input\":[\"a\",3]}", "input" },
    };

    for (size_t i = 0; i < LG_ARRAY_SIZE(bad); i++) {
        struct lg_sim_request req;
        struct lg_sim_api_error err = { 0 };

        if (parse(bad[i].kind, bad[i].body, &req, &err) != LG_EINVAL || err.status != 400
            || err.message[0] == '\0' || req.model != NULL || req.block_keys != NULL
            || req.input_hashes != NULL
            || (bad[i].param && (!err.param || strcmp(err.param, bad[i].param) != 0))) {
            fprintf(stderr, "case %zu not rejected as expected: %s (%s)\n", i, bad[i].body,
                    err.message);
            return 1;
        }
    }
    return 0;
}

static char *
drain(struct evbuffer *b)
{
    size_t n = evbuffer_get_length(b);
    char *s = malloc(n + 1);

    evbuffer_remove(b, s, n);
    s[n] = '\0';
    return s;
}

static int
test_rendering(void)
{
    struct evbuffer *b = evbuffer_new();
    struct lg_sim_api_resp r = {
        .kind = LG_SIM_API_CHAT,
        .id = 0xabc,
        .created = 1700000000,
        .model_json = "m\\\"x",
        .prompt_tokens = 3,
        .completion_tokens = 2,
        .seed = 5,
    };
    char tok0[32];
    char tok1[32];
    char expect[1024];
    char *s;
    char *esc;
    size_t len;

    lg_sim_api_token(5, 0, tok0, sizeof(tok0));
    lg_sim_api_token(5, 1, tok1, sizeof(tok1));
    LG_CHECK(strncmp(tok0, " tok", 4) == 0);
    LG_CHECK(lg_sim_api_chunk_token(b, &r, 0) == LG_OK);
    s = drain(b);
    snprintf(expect, sizeof(expect),
             "data: {\"id\":\"chatcmpl-0000000000000abc\",\"object\":\"chat.completion.chunk\","
             "\"created\":1700000000,\"model\":\"m\\\"x\",\"choices\":[{\"index\":0,\"delta\":"
             "{\"role\":\"assistant\",\"content\":\"%s\"},\"logprobs\":null,\"finish_reason\":"
             "null}]}\n\n",
             tok0);
    len = strlen(expect);
    /* one HTTP chunk: hex size, CRLF, the event, CRLF */
    LG_CHECK(strtoul(s, NULL, 16) == len);
    LG_CHECK(strncmp(strchr(s, '\n') + 1, expect, len) == 0);
    LG_CHECK(strcmp(strchr(s, '\n') + 1 + len, "\r\n") == 0);
    free(s);
    LG_CHECK(lg_sim_api_chunk_done(b) == LG_OK);
    s = drain(b);
    LG_CHECK_STR(s, "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
    free(s);
    LG_CHECK(lg_sim_api_body_completion(b, &r) == LG_OK);
    s = drain(b);
    snprintf(expect, sizeof(expect), "\"content\":\"%s%s\"}", tok0, tok1);
    LG_CHECK(strstr(s, expect) != NULL);
    LG_CHECK(strstr(s, "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,"
                       "\"total_tokens\":5}}")
             != NULL);
    free(s);
    LG_CHECK(lg_sim_api_body_error(b, 404, "NotFoundError", "model", "no \"x\"") == LG_OK);
    s = drain(b);
    LG_CHECK_STR(s, "{\"error\":{\"message\":\"no \\\"x\\\"\",\"type\":\"NotFoundError\","
                    "\"param\":\"model\",\"code\":404}}");
    free(s);
    esc = lg_sim_api_json_escape("a\"b\\c\n");
    LG_CHECK_STR(esc, "a\\\"b\\\\c\\n");
    free(esc);
    LG_CHECK(lg_sim_api_json_escape("\xff") == NULL);
    evbuffer_free(b);
    return 0;
}

/* The hash of a rendered prompt, for comparing with what the parser fed. */
static uint64_t
context_of(const char *text)
{
    struct lg_hstream h;

    lg_hstream_init(&h);
    lg_hstream_feed(&h, text, strlen(text));
    return lg_hstream_value(&h);
}

/* Context mode: the template, and a continuation going on with the same tokens. */
static int
test_context_text(void)
{
    struct lg_sim_request a, b;
    struct lg_sim_api_error err;
    struct lg_sim_api_resp ra = { .kind = LG_SIM_API_CHAT, .context = true };
    struct lg_sim_api_resp rb = { .kind = LG_SIM_API_CHAT, .context = true };
    char toks[4][32], cont[512], tok[32];

    LG_CHECK(parse(LG_SIM_API_CHAT,
                   "{\"seed\":4,\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                   "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Q\"}]}]}",
                   &a, &err)
             == LG_OK);
    LG_CHECK(a.has_seed && a.seed == 4 && a.add_generation_prompt && !a.continue_final);
    LG_CHECK(lg_hstream_value(&a.context) == context_of("system:S\nuser:Q\nassistant:"));
    ra.ctx = a.context;
    ra.seed = lg_sim_api_context_seed("m", &a);
    for (int i = 0; i < 4; i++) {
        LG_CHECK(lg_sim_api_next_token(&ra, (uint32_t)i, toks[i], sizeof(toks[i])) > 4);
    }
    /* the continuation: the first two tokens as an open assistant message */
    snprintf(cont, sizeof(cont),
             "{\"seed\":4,\"continue_final_message\":true,\"add_generation_prompt\":false,"
             "\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\","
             "\"content\":\"Q\"},{\"role\":\"assistant\",\"content\":\"%s%s\"}]}",
             toks[0], toks[1]);
    LG_CHECK(parse(LG_SIM_API_CHAT, cont, &b, &err) == LG_OK);
    LG_CHECK(b.continue_final && !b.add_generation_prompt);
    rb.ctx = b.context;
    rb.seed = lg_sim_api_context_seed("m", &b);
    LG_CHECK(rb.seed == ra.seed);
    LG_CHECK(lg_sim_api_next_token(&rb, 0, tok, sizeof(tok)) > 4);
    LG_CHECK_STR(tok, toks[2]);
    LG_CHECK(lg_sim_api_next_token(&rb, 1, tok, sizeof(tok)) > 4);
    LG_CHECK_STR(tok, toks[3]);
    /* another model or another seed: another text */
    LG_CHECK(lg_sim_api_context_seed("m2", &a) != ra.seed);
    b.seed = 5;
    LG_CHECK(lg_sim_api_context_seed("m", &b) != ra.seed);
    lg_sim_request_free(&a);
    lg_sim_request_free(&b);
    /* completions: the prompt as it is, no template */
    LG_CHECK(parse(LG_SIM_API_COMPLETION, "{\"prompt\":\"Once\"}", &a, &err) == LG_OK);
    LG_CHECK(lg_hstream_value(&a.context) == context_of("Once"));
    lg_sim_request_free(&a);
    /* both flags true, or a seed that is no integer: rejected */
    LG_CHECK(parse(LG_SIM_API_CHAT,
                   "{\"continue_final_message\":true,\"messages\":[{\"role\":\"user\"}]}", &a,
                   &err)
             == LG_EINVAL);
    LG_CHECK_STR(err.param, "continue_final_message");
    LG_CHECK(parse(LG_SIM_API_CHAT, "{\"seed\":1.5,\"messages\":[{\"role\":\"user\"}]}", &a, &err)
             == LG_EINVAL);
    LG_CHECK_STR(err.param, "seed");
    return 0;
}

LG_TEST_MAIN(test_chat, test_completions_and_embeddings, test_rejections, test_rendering,
             test_context_text)
