/*
 * api.c: OpenAI request inspection and response rendering for llmsim.
 *
 * Owns: the fields of a struct lg_sim_request it fills (model, block keys,
 * input hashes). Request bodies are parsed with jansson (depth and size are
 * bounded by the caller's body limit and jansson's own depth limit); the
 * parsed document is dropped before returning. Stream chunks are formatted
 * into a stack buffer and appended with one evbuffer_add each, so a token
 * costs no allocation beyond the output buffer's own growth.
 */
#include "api.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "base/lg_core.h"
#include "prefix.h"

/* ---- request inspection ---------------------------------------------------- */

struct api_scan {
    struct lg_sim_prefix_hasher hasher;
    uint64_t bytes; /* text bytes (or 4 per token id) counted as prompt */
    struct lg_hstream *context; /* the rendered prompt (req->context) */
};

/*
 * The prompt as the text generator reads it (context mode): completions'
 * prompt strings as they are (a token id as its four bytes, little-endian);
 * chat messages rendered by a template of llmsim's own,
 *   ROLE ":" CONTENT "\n"        each message (content parts' texts joined)
 *   "assistant:"                 the generation prompt (add_generation_prompt)
 * with continue_final_message the last message left open (no "\n", no
 * generation prompt), as vLLM renders a message to continue. The answer's
 * tokens follow, so "user:hi\nassistant: tok5 tok9" is where the third token
 * comes from both in the answer to [user: hi] and in the continuation of
 * [user: hi, assistant: " tok5 tok9"].
 */
#define API_ROLE_SEP  ":"
#define API_MSG_END   "\n"
#define API_GEN_PROMPT "assistant:"

static void
api_context(struct api_scan *sc, const void *p, size_t n)
{
    lg_hstream_feed(sc->context, p, n);
}

static int api_reject(struct lg_sim_api_error *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
api_reject(struct lg_sim_api_error *err, const char *param, const char *fmt, ...)
{
    va_list ap;

    err->status = 400;
    err->type = "invalid_request_error";
    err->param = param;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
    return LG_EINVAL;
}

static void
api_scan_text(struct api_scan *sc, const char *s, size_t n)
{
    lg_sim_prefix_hasher_feed(&sc->hasher, s, n);
    api_context(sc, s, n);
    sc->bytes += n;
}

/* A token id counts as one token: 4 bytes of prompt, hashed as its value. */
static void
api_scan_token_id(struct api_scan *sc, json_int_t id)
{
    uint32_t v = (uint32_t)id;
    unsigned char b[4] = { (unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                           (unsigned char)(v >> 24) };

    lg_sim_prefix_hasher_feed(&sc->hasher, b, sizeof(b));
    api_context(sc, b, sizeof(b));
    sc->bytes += 4;
}

/* Chat content: a string, null, or an array of parts whose text parts count. */
static int
api_scan_content(struct api_scan *sc, json_t *content, struct lg_sim_api_error *err)
{
    size_t i;
    json_t *part;

    if (content == NULL || json_is_null(content)) {
        return LG_OK;
    }
    if (json_is_string(content)) {
        api_scan_text(sc, json_string_value(content), json_string_length(content));
        return LG_OK;
    }
    if (!json_is_array(content)) {
        return api_reject(err, "messages", "message content must be a string or an array");
    }
    json_array_foreach (content, i, part) {
        json_t *text = json_object_get(part, "text");

        if (!json_is_object(part)) {
            return api_reject(err, "messages", "content parts must be objects");
        }
        if (json_is_string(text)) {
            api_scan_text(sc, json_string_value(text), json_string_length(text));
        }
    }
    return LG_OK;
}

static int
api_scan_messages(struct api_scan *sc, json_t *messages, const struct lg_sim_request *req,
                  struct lg_sim_api_error *err)
{
    size_t i, n = json_array_size(messages);
    json_t *m;

    if (!json_is_array(messages) || n == 0) {
        return api_reject(err, "messages", "'messages' must be a non-empty array");
    }
    json_array_foreach (messages, i, m) {
        json_t *role;
        int rc;

        if (!json_is_object(m)) {
            return api_reject(err, "messages", "messages[%zu] must be an object", i);
        }
        role = json_object_get(m, "role");
        if (role != NULL && !json_is_string(role)) {
            return api_reject(err, "messages", "messages[%zu].role must be a string", i);
        }
        if (role != NULL) {
            /* the role is part of the cached text, not of the counted prompt */
            lg_sim_prefix_hasher_feed(&sc->hasher, json_string_value(role),
                                      json_string_length(role));
            api_context(sc, json_string_value(role), json_string_length(role));
        }
        api_context(sc, API_ROLE_SEP, strlen(API_ROLE_SEP));
        rc = api_scan_content(sc, json_object_get(m, "content"), err);
        if (rc != LG_OK) {
            return rc;
        }
        if (i + 1 < n || !req->continue_final) {
            api_context(sc, API_MSG_END, strlen(API_MSG_END));
        }
    }
    if (req->add_generation_prompt && !req->continue_final) {
        api_context(sc, API_GEN_PROMPT, strlen(API_GEN_PROMPT));
    }
    return LG_OK;
}

/* One prompt or input: a string or an array of token ids; *h hashes it alone. */
static int
api_scan_one(struct api_scan *sc, json_t *v, const char *param, uint64_t *h,
             struct lg_sim_api_error *err)
{
    size_t i;
    json_t *id;

    if (json_is_string(v)) {
        api_scan_text(sc, json_string_value(v), json_string_length(v));
        *h = lg_hash64(json_string_value(v), json_string_length(v), *h);
        return LG_OK;
    }
    if (!json_is_array(v) || json_array_size(v) == 0) {
        return api_reject(err, param, "'%s' must be a string or a non-empty array", param);
    }
    json_array_foreach (v, i, id) {
        if (!json_is_integer(id) || json_integer_value(id) < 0
            || json_integer_value(id) > UINT32_MAX) {
            return api_reject(err, param, "'%s' token ids must be integers within 0..%u", param,
                              UINT32_MAX);
        }
        api_scan_token_id(sc, json_integer_value(id));
        *h = lg_mix64(*h ^ (uint64_t)json_integer_value(id));
    }
    return LG_OK;
}

/*
 * A prompt or input field: a string, an array of token ids, or an array of
 * strings or token-id arrays (several prompts count as one concatenated
 * prompt). Embeddings keep one hash per input for their vectors.
 */
static int
api_scan_prompt(struct api_scan *sc, json_t *v, const char *param, struct lg_sim_request *req,
                struct lg_sim_api_error *err)
{
    bool embed = req->kind == LG_SIM_API_EMBEDDING;
    size_t i;
    size_t n;
    json_t *e;
    int rc;

    if (v == NULL || json_is_null(v)) {
        return api_reject(err, param, "'%s' is required", param);
    }
    if (json_is_string(v) || (json_is_array(v) && json_is_integer(json_array_get(v, 0)))) {
        uint64_t h = LG_HASH64_INIT;

        rc = api_scan_one(sc, v, param, &h, err);
        if (rc == LG_OK && embed) {
            req->input_hashes = lg_xmalloc(sizeof(uint64_t));
            req->input_hashes[0] = h;
            req->ninputs = 1;
        }
        return rc;
    }
    n = json_array_size(v);
    if (!json_is_array(v) || n == 0) {
        return api_reject(err, param, "'%s' must be a string or a non-empty array", param);
    }
    if (n > LG_SIM_API_MAX_INPUTS) {
        return api_reject(err, param, "'%s' has more than %u elements", param,
                          LG_SIM_API_MAX_INPUTS);
    }
    if (embed) {
        req->input_hashes = lg_xcalloc(n, sizeof(uint64_t));
    }
    json_array_foreach (v, i, e) {
        uint64_t h = LG_HASH64_INIT;

        rc = api_scan_one(sc, e, param, &h, err);
        if (rc != LG_OK) {
            return rc;
        }
        if (embed) {
            req->input_hashes[req->ninputs++] = h;
        }
    }
    return LG_OK;
}

static int
api_get_bool(json_t *root, const char *key, bool *out, struct lg_sim_api_error *err)
{
    json_t *v = json_object_get(root, key);

    if (v == NULL || json_is_null(v)) {
        return LG_OK;
    }
    if (!json_is_boolean(v)) {
        return api_reject(err, key, "'%s' must be a boolean", key);
    }
    *out = json_is_true(v);
    return LG_OK;
}

static int
api_get_max_tokens(json_t *root, uint32_t *out, struct lg_sim_api_error *err)
{
    static const char *const keys[] = { "max_completion_tokens", "max_output_tokens",
                                        "max_tokens" };

    for (size_t i = 0; i < LG_ARRAY_SIZE(keys); i++) {
        json_t *v = json_object_get(root, keys[i]);
        json_int_t n;

        if (v == NULL || json_is_null(v)) {
            continue;
        }
        if (!json_is_integer(v)) {
            return api_reject(err, keys[i], "'%s' must be an integer", keys[i]);
        }
        n = json_integer_value(v);
        if (n < 1 || n > LG_SIM_API_MAX_TOKENS) {
            return api_reject(err, keys[i],
                              "'%s' must be within 1..%d (got %" JSON_INTEGER_FORMAT ")", keys[i],
                              LG_SIM_API_MAX_TOKENS, n);
        }
        *out = (uint32_t)n;
        return LG_OK;
    }
    return LG_OK;
}

/* llmsim's own member: the length an engine's answer had, for replaying
 * recorded traffic (the gateway still sees the client's max_tokens). */
static int
api_get_sim_tokens(json_t *root, uint32_t *out, struct lg_sim_api_error *err)
{
    json_t *v = json_object_get(root, "sim_completion_tokens");

    if (v == NULL || json_is_null(v)) {
        return LG_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1
        || json_integer_value(v) > LG_SIM_API_MAX_TOKENS) {
        return api_reject(err, "sim_completion_tokens",
                          "'sim_completion_tokens' must be an integer within 1..%d",
                          LG_SIM_API_MAX_TOKENS);
    }
    *out = (uint32_t)json_integer_value(v);
    return LG_OK;
}

/* The body's "seed": an integer, or null (none). */
static int
api_get_seed(json_t *root, struct lg_sim_request *req, struct lg_sim_api_error *err)
{
    json_t *v = json_object_get(root, "seed");

    if (v == NULL || json_is_null(v)) {
        return LG_OK;
    }
    if (!json_is_integer(v)) {
        return api_reject(err, "seed", "'seed' must be an integer");
    }
    req->has_seed = true;
    req->seed = json_integer_value(v);
    return LG_OK;
}

/* The body's "priority": an integer (vLLM's; read by --scheduling-policy priority). */
static int
api_get_priority(json_t *root, struct lg_sim_request *req, struct lg_sim_api_error *err)
{
    json_t *v = json_object_get(root, "priority");

    if (v == NULL || json_is_null(v)) {
        return LG_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < INT32_MIN
        || json_integer_value(v) > INT32_MAX) {
        return api_reject(err, "priority", "'priority' must be an integer");
    }
    req->priority = (int32_t)json_integer_value(v);
    return LG_OK;
}

/* Chat: continue_final_message and add_generation_prompt, checked as vLLM
 * checks them (both may not be true; the second is true unless given). */
static int
api_get_continuation(json_t *root, struct lg_sim_request *req, struct lg_sim_api_error *err)
{
    int rc = api_get_bool(root, "continue_final_message", &req->continue_final, err);

    if (rc == LG_OK) {
        rc = api_get_bool(root, "add_generation_prompt", &req->add_generation_prompt, err);
    }
    if (rc == LG_OK && req->continue_final && req->add_generation_prompt) {
        return api_reject(err, "continue_final_message",
                          "Cannot set both `continue_final_message` and "
                          "`add_generation_prompt` to True.");
    }
    return rc;
}

static int
api_get_options(json_t *root, struct lg_sim_request *req, struct lg_sim_api_error *err)
{
    json_t *model = json_object_get(root, "model");
    json_t *so = json_object_get(root, "stream_options");
    int rc;

    if (model != NULL && !json_is_null(model)) {
        if (!json_is_string(model) || json_string_length(model) == 0
            || json_string_length(model) > LG_SIM_API_MODEL_MAX
            || strlen(json_string_value(model)) != json_string_length(model)) {
            return api_reject(err, "model",
                              "'model' must be a non-empty string of at most %d bytes",
                              LG_SIM_API_MODEL_MAX);
        }
        req->model = lg_xstrdup(json_string_value(model));
    }
    if (req->kind == LG_SIM_API_EMBEDDING) {
        return LG_OK;
    }
    rc = api_get_bool(root, "stream", &req->stream, err);
    if (rc == LG_OK) {
        rc = api_get_bool(root, "ignore_eos", &req->ignore_eos, err);
    }
    if (rc == LG_OK) {
        rc = api_get_max_tokens(root, &req->max_tokens, err);
    }
    if (rc == LG_OK) {
        rc = api_get_sim_tokens(root, &req->sim_tokens, err);
    }
    if (rc == LG_OK) {
        rc = api_get_seed(root, req, err);
    }
    if (rc == LG_OK) {
        rc = api_get_priority(root, req, err);
    }
    if (rc == LG_OK && req->kind == LG_SIM_API_CHAT) {
        rc = api_get_continuation(root, req, err);
    }
    if (rc == LG_OK && req->kind == LG_SIM_API_RESPONSES) {
        json_t *prev = json_object_get(root, "previous_response_id");

        if (prev != NULL && !json_is_null(prev)) {
            if (!json_is_string(prev) || json_string_length(prev) == 0
                || json_string_length(prev) > 256) {
                return api_reject(err, "previous_response_id",
                                  "'previous_response_id' must be a string of 1 to 256 bytes");
            }
            req->previous_response_id = lg_xstrdup(json_string_value(prev));
        }
    }
    if (rc != LG_OK) {
        return rc;
    }
    if (so != NULL && !json_is_null(so)) {
        if (!json_is_object(so)) {
            return api_reject(err, "stream_options", "'stream_options' must be an object");
        }
        rc = api_get_bool(so, "include_usage", &req->include_usage, err);
    }
    return rc;
}

/* A system prompt (Responses' instructions, Messages' system): a string or text blocks,
 * read as a first message of role "system". */
static int
api_scan_system(struct api_scan *sc, json_t *v, struct lg_sim_api_error *err)
{
    if (v == NULL || json_is_null(v)) {
        return LG_OK;
    }
    lg_sim_prefix_hasher_feed(&sc->hasher, "system", 6);
    api_context(sc, "system", 6);
    api_context(sc, API_ROLE_SEP, strlen(API_ROLE_SEP));
    if (api_scan_content(sc, v, err) != LG_OK) {
        return api_reject(err, "system", "the system prompt must be a string or text blocks");
    }
    api_context(sc, API_MSG_END, strlen(API_MSG_END));
    return LG_OK;
}

/* The Responses API's input: a string (one user message) or an array of items, its
 * messages read as chat messages are. */
static int
api_scan_input(struct api_scan *sc, json_t *root, const struct lg_sim_request *req,
               struct lg_sim_api_error *err)
{
    json_t *input = json_object_get(root, "input");
    int rc = api_scan_system(sc, json_object_get(root, "instructions"), err);

    if (rc != LG_OK) {
        return rc;
    }
    if (json_is_string(input)) {
        lg_sim_prefix_hasher_feed(&sc->hasher, "user", 4);
        api_context(sc, "user", 4);
        api_context(sc, API_ROLE_SEP, strlen(API_ROLE_SEP));
        api_scan_text(sc, json_string_value(input), json_string_length(input));
        api_context(sc, API_MSG_END, strlen(API_MSG_END));
        api_context(sc, API_GEN_PROMPT, strlen(API_GEN_PROMPT));
        return LG_OK;
    }
    if (!json_is_array(input) || json_array_size(input) == 0) {
        return api_reject(err, "input", "'input' must be a string or a non-empty array");
    }
    return api_scan_messages(sc, input, req, err);
}

/* Fills req from a parsed document; consumes the reference to root. */
static int
api_parse_root(enum lg_sim_api_kind kind, json_t *root, const json_error_t *jerr,
               uint32_t block_tokens, struct lg_sim_request *req, struct lg_sim_api_error *err)
{
    struct api_scan sc;
    int rc;

    memset(req, 0, sizeof(*req));
    req->kind = kind;
    req->add_generation_prompt = true;
    lg_hstream_init(&req->context);
    if (root == NULL) {
        return api_reject(err, NULL, "invalid JSON body: %s (line %d, column %d)", jerr->text,
                          jerr->line, jerr->column);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return api_reject(err, NULL, "the request body must be a JSON object");
    }
    lg_sim_prefix_hasher_init(&sc.hasher, block_tokens, LG_SIM_API_MAX_BLOCK_KEYS);
    sc.bytes = 0;
    sc.context = &req->context;
    rc = api_get_options(root, req, err);
    if (rc == LG_OK) {
        switch (kind) {
        case LG_SIM_API_CHAT:
            rc = api_scan_messages(&sc, json_object_get(root, "messages"), req, err);
            break;
        case LG_SIM_API_COMPLETION:
            rc = api_scan_prompt(&sc, json_object_get(root, "prompt"), "prompt", req, err);
            break;
        case LG_SIM_API_EMBEDDING:
            rc = api_scan_prompt(&sc, json_object_get(root, "input"), "input", req, err);
            break;
        case LG_SIM_API_RESPONSES:
            rc = api_scan_input(&sc, root, req, err);
            break;
        case LG_SIM_API_MESSAGES:
        case LG_SIM_API_COUNT_TOKENS:
            rc = api_scan_system(&sc, json_object_get(root, "system"), err);
            if (rc == LG_OK) {
                rc = api_scan_messages(&sc, json_object_get(root, "messages"), req, err);
            }
            break;
        }
    }
    json_decref(root);
    if (rc != LG_OK) {
        lg_sim_prefix_hasher_free(&sc.hasher);
        lg_sim_request_free(req);
        req->kind = kind;
        return rc;
    }
    req->prompt_bytes = sc.bytes;
    req->prompt_tokens = (uint32_t)LG_MIN(UINT32_MAX, LG_MAX(1, sc.bytes / 4));
    req->block_keys = lg_sim_prefix_hasher_take(&sc.hasher, &req->nblocks);
    return LG_OK;
}

int
lg_sim_api_parse(enum lg_sim_api_kind kind, const char *body, size_t len, uint32_t block_tokens,
                 struct lg_sim_request *req, struct lg_sim_api_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);

    return api_parse_root(kind, root, &jerr, block_tokens, req, err);
}

/* jansson pulls the body straight out of the evbuffer: no linear copy of it. */
static size_t
api_evbuffer_read(void *buffer, size_t buflen, void *data)
{
    int n = evbuffer_remove(data, buffer, buflen);

    return n > 0 ? (size_t)n : 0;
}

int
lg_sim_api_parse_buffer(enum lg_sim_api_kind kind, struct evbuffer *body, uint32_t block_tokens,
                        struct lg_sim_request *req, struct lg_sim_api_error *err)
{
    json_error_t jerr;
    json_t *root = json_load_callback(api_evbuffer_read, body, 0, &jerr);

    return api_parse_root(kind, root, &jerr, block_tokens, req, err);
}

void
lg_sim_request_free(struct lg_sim_request *req)
{
    free(req->model);
    free(req->block_keys);
    free(req->input_hashes);
    free(req->previous_response_id);
    memset(req, 0, sizeof(*req));
}

/* ---- rendering ------------------------------------------------------------- */

int
lg_sim_api_token(uint64_t seed, uint32_t index, char *buf, size_t len)
{
    unsigned word = (unsigned)(lg_mix64(seed ^ lg_mix64(index)) % 100);

    return snprintf(buf, len, " tok%u", word);
}

uint64_t
lg_sim_api_context_seed(const char *model, const struct lg_sim_request *req)
{
    uint64_t h = lg_hash64(model, strlen(model), LG_HASH64_INIT);

    return lg_mix64(h ^ lg_mix64(req->has_seed ? (uint64_t)req->seed + 1 : 0));
}

int
lg_sim_api_next_token(struct lg_sim_api_resp *r, uint32_t index, char *buf, size_t len)
{
    unsigned word;
    int n;

    if (!r->context) {
        return lg_sim_api_token(r->seed, index, buf, len);
    }
    word = (unsigned)(lg_mix64(r->seed ^ lg_hstream_value(&r->ctx)) % 100);
    n = snprintf(buf, len, " tok%u", word);
    if (n > 0 && (size_t)n < len) {
        lg_hstream_feed(&r->ctx, buf, (size_t)n);
    }
    return n;
}

char *
lg_sim_api_json_escape(const char *s)
{
    json_t *str = json_string(s);
    char *dumped;
    char *out;
    size_t n;

    if (str == NULL) {
        return NULL;
    }
    dumped = json_dumps(str, JSON_ENCODE_ANY);
    json_decref(str);
    if (dumped == NULL) {
        return NULL;
    }
    n = strlen(dumped);
    out = lg_xstrndup(dumped + 1, n - 2); /* drop the quotes */
    free(dumped);
    return out;
}

#define API_CHUNK_HEAD 16   /* room for the chunk-size line before the payload */
#define API_CHUNK_MAX  4096 /* one event; model names are bounded so it fits */

static int api_chunk(struct evbuffer *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
api_chunk(struct evbuffer *out, const char *fmt, ...)
{
    char buf[API_CHUNK_MAX];
    char head[API_CHUNK_HEAD];
    size_t room = sizeof(buf) - API_CHUNK_HEAD - 2;
    va_list ap;
    int n;
    int h;

    va_start(ap, fmt);
    n = vsnprintf(buf + API_CHUNK_HEAD, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room) {
        return LG_EINVAL;
    }
    h = snprintf(head, sizeof(head), "%x\r\n", (unsigned)n);
    memcpy(buf + API_CHUNK_HEAD - h, head, (size_t)h);
    memcpy(buf + API_CHUNK_HEAD + n, "\r\n", 2);
    return evbuffer_add(out, buf + API_CHUNK_HEAD - h, (size_t)h + (size_t)n + 2) == 0 ? LG_OK
                                                                                       : LG_ENOMEM;
}

static const char *
api_id_prefix(const struct lg_sim_api_resp *r)
{
    return r->kind == LG_SIM_API_CHAT ? "chatcmpl-" : "cmpl-";
}

static const char *
api_chunk_object(const struct lg_sim_api_resp *r)
{
    return r->kind == LG_SIM_API_CHAT ? "chat.completion.chunk" : "text_completion";
}

#define API_HEAD_FMT                                                                             \
    "data: {\"id\":\"%s%016" PRIx64 "\",\"object\":\"%s\",\"created\":%" PRId64 ",\"model\":\"%" \
    "s\","
#define API_HEAD_ARGS(r) \
    api_id_prefix(r), (r)->id, api_chunk_object(r), (r)->created, (r)->model_json

/* ---- the Responses and Messages APIs, in vLLM's shapes (tests/fixtures/engines/vllm/) -- */

/* The token's text kept for the final events (within LG_SIM_API_TEXT_MAX). */
static void
api_text_add(struct lg_sim_api_resp *r, const char *tok, size_t n)
{
    if (r->text_len + n <= sizeof(r->text)) {
        memcpy(r->text + r->text_len, tok, n);
        r->text_len += n;
    }
}

/* One HTTP chunk holding what ev holds (emptied). */
static int
api_chunk_buffer(struct evbuffer *out, struct evbuffer *ev)
{
    size_t n = evbuffer_get_length(ev);
    int rc = evbuffer_add_printf(out, "%zx\r\n", n) < 0;

    rc |= evbuffer_add_buffer(out, ev);
    rc |= evbuffer_add(out, "\r\n", 2);
    return rc ? LG_ENOMEM : LG_OK;
}

/* The answer as a message output item (its text so far). */
static void
api_resp_item(struct evbuffer *b, const struct lg_sim_api_resp *r, bool done)
{
    if (!done) {
        evbuffer_add_printf(b,
                            "{\"id\":\"msg_%016" PRIx64 "\",\"content\":[],\"role\":\"assistant\","
                            "\"status\":\"in_progress\",\"type\":\"message\"}",
                            r->id);
        return;
    }
    evbuffer_add_printf(b,
                        "{\"id\":\"msg_%016" PRIx64 "\",\"content\":[{\"annotations\":[],"
                        "\"text\":\"%.*s\",\"type\":\"output_text\",\"logprobs\":null}],"
                        "\"role\":\"assistant\",\"status\":\"completed\",\"type\":\"message\"}",
                        r->id, (int)r->text_len, r->text);
}

/* vLLM's ResponsesResponse: in progress (no output, no usage) or completed. */
static void
api_resp_object(struct evbuffer *b, const struct lg_sim_api_resp *r, bool done)
{
    evbuffer_add_printf(b,
                        "{\"id\":\"resp_%016" PRIx64 "\",\"created_at\":%" PRId64
                        ",\"incomplete_details\":null,\"instructions\":null,\"metadata\":null,"
                        "\"model\":\"%s\",\"object\":\"response\",\"output\":[",
                        r->resp_id, r->created, r->model_json);
    if (done) {
        api_resp_item(b, r, true);
    }
    evbuffer_add_printf(b,
                        "],\"parallel_tool_calls\":true,\"temperature\":1.0,\"tool_choice\":\"auto\","
                        "\"tools\":[],\"top_p\":1.0,\"background\":false,\"max_output_tokens\":%u,"
                        "\"max_tool_calls\":null,\"previous_response_id\":null,\"prompt\":null,"
                        "\"reasoning\":null,\"service_tier\":\"auto\",\"status\":\"%s\","
                        "\"text\":null,\"top_logprobs\":null,\"truncation\":\"disabled\",\"usage\":",
                        r->completion_tokens, done ? "completed" : "in_progress");
    if (done) {
        evbuffer_add_printf(b,
                            "{\"input_tokens\":%u,\"input_tokens_details\":{\"cached_tokens\":0},"
                            "\"output_tokens\":%u,\"output_tokens_details\":{\"reasoning_tokens\":0},"
                            "\"total_tokens\":%" PRIu64 "}",
                            r->prompt_tokens, r->completion_tokens,
                            (uint64_t)r->prompt_tokens + r->completion_tokens);
    } else {
        evbuffer_add(b, "null", 4);
    }
    evbuffer_add(b, ",\"user\":null}", 13);
}

/* `event: TYPE\ndata: {"response": {...}, "sequence_number": N, "type": TYPE}\n\n` */
static void
api_resp_event(struct evbuffer *b, const struct lg_sim_api_resp *r, const char *type, uint32_t seq,
               bool done)
{
    evbuffer_add_printf(b, "event: %s\ndata: {\"response\":", type);
    api_resp_object(b, r, done);
    evbuffer_add_printf(b, ",\"sequence_number\":%u,\"type\":\"%s\"}\n\n", seq, type);
}

int
lg_sim_api_events_start(struct evbuffer *out, const struct lg_sim_api_resp *r)
{
    struct evbuffer *b = evbuffer_new();
    int rc;

    if (b == NULL) {
        return LG_ENOMEM;
    }
    if (r->kind == LG_SIM_API_RESPONSES) {
        api_resp_event(b, r, "response.created", 0, false);
        api_resp_event(b, r, "response.in_progress", 1, false);
        evbuffer_add_printf(b, "event: response.output_item.added\ndata: {\"item\":");
        api_resp_item(b, r, false);
        evbuffer_add_printf(b,
                            ",\"output_index\":0,\"sequence_number\":2,"
                            "\"type\":\"response.output_item.added\"}\n\n"
                            "event: response.content_part.added\ndata: {\"content_index\":0,"
                            "\"item_id\":\"msg_%016" PRIx64 "\",\"output_index\":0,"
                            "\"part\":{\"annotations\":[],\"text\":\"\",\"type\":\"output_text\","
                            "\"logprobs\":[]},\"sequence_number\":3,"
                            "\"type\":\"response.content_part.added\"}\n\n",
                            r->id);
    } else {
        evbuffer_add_printf(b,
                            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":"
                            "{\"id\":\"chatcmpl-%016" PRIx64 "\",\"content\":[],\"model\":\"%s\","
                            "\"stop_reason\":null,\"stop_sequence\":null,\"usage\":"
                            "{\"input_tokens\":%u,\"output_tokens\":0}}}\n\n"
                            "event: content_block_start\ndata: {\"type\":\"content_block_start\","
                            "\"content_block\":{\"type\":\"text\",\"text\":\"\"},\"index\":0}\n\n",
                            r->id, r->model_json, r->prompt_tokens);
    }
    rc = api_chunk_buffer(out, b);
    evbuffer_free(b);
    return rc;
}

int
lg_sim_api_events_end(struct evbuffer *out, const struct lg_sim_api_resp *r)
{
    struct evbuffer *b = evbuffer_new();
    uint32_t seq = 4 + r->completion_tokens;
    int rc;

    if (b == NULL) {
        return LG_ENOMEM;
    }
    if (r->kind == LG_SIM_API_RESPONSES) {
        evbuffer_add_printf(b,
                            "event: response.output_text.done\ndata: {\"content_index\":0,"
                            "\"item_id\":\"msg_%016" PRIx64 "\",\"logprobs\":[],\"output_index\":0,"
                            "\"sequence_number\":%u,\"text\":\"%.*s\","
                            "\"type\":\"response.output_text.done\"}\n\n"
                            "event: response.content_part.done\ndata: {\"content_index\":0,"
                            "\"item_id\":\"msg_%016" PRIx64 "\",\"output_index\":0,"
                            "\"part\":{\"annotations\":[],\"text\":\"%.*s\",\"type\":\"output_text\","
                            "\"logprobs\":null},\"sequence_number\":%u,"
                            "\"type\":\"response.content_part.done\"}\n\n"
                            "event: response.output_item.done\ndata: {\"item\":",
                            r->id, seq, (int)r->text_len, r->text, r->id, (int)r->text_len,
                            r->text, seq + 1);
        api_resp_item(b, r, true);
        evbuffer_add_printf(b,
                            ",\"output_index\":0,\"sequence_number\":%u,"
                            "\"type\":\"response.output_item.done\"}\n\n",
                            seq + 2);
        api_resp_event(b, r, "response.completed", seq + 3, true);
    } else {
        evbuffer_add_printf(b,
                            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\","
                            "\"index\":0}\n\n"
                            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":"
                            "{\"stop_reason\":\"%s\"},\"usage\":{\"input_tokens\":%u,"
                            "\"output_tokens\":%u}}\n\n"
                            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
                            "data: [DONE]\n\n",
                            r->stopped ? "end_turn" : "max_tokens", r->prompt_tokens,
                            r->completion_tokens);
    }
    rc = api_chunk_buffer(out, b);
    evbuffer_free(b);
    if (rc == LG_OK && evbuffer_add(out, "0\r\n\r\n", 5) != 0) {
        rc = LG_ENOMEM;
    }
    return rc;
}

int
lg_sim_api_body_count_tokens(struct evbuffer *out, const struct lg_sim_request *req)
{
    return evbuffer_add_printf(out, "{\"input_tokens\":%u}", req->prompt_tokens) < 0 ? LG_ENOMEM
                                                                                    : LG_OK;
}

/* A whole answer of the Responses or Messages API. */
static int
api_body_agents(struct evbuffer *out, struct lg_sim_api_resp *r)
{
    char tok[32];

    for (uint32_t i = 0; i < r->completion_tokens; i++) {
        int n = lg_sim_api_next_token(r, i, tok, sizeof(tok));

        api_text_add(r, tok, (size_t)n);
    }
    if (r->kind == LG_SIM_API_RESPONSES) {
        api_resp_object(out, r, true);
        return LG_OK;
    }
    return evbuffer_add_printf(out,
                               "{\"id\":\"chatcmpl-%016" PRIx64 "\",\"type\":\"message\","
                               "\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
                               "\"text\":\"%.*s\"}],\"model\":\"%s\",\"stop_reason\":\"%s\","
                               "\"stop_sequence\":null,\"usage\":{\"input_tokens\":%u,"
                               "\"output_tokens\":%u}}",
                               r->id, (int)r->text_len, r->text, r->model_json,
                               r->stopped ? "end_turn" : "max_tokens", r->prompt_tokens,
                               r->completion_tokens)
                   < 0
               ? LG_ENOMEM
               : LG_OK;
}

int
lg_sim_api_chunk_token(struct evbuffer *out, struct lg_sim_api_resp *r, uint32_t index)
{
    char tok[32];
    int rc, n;

    n = lg_sim_api_next_token(r, index, tok, sizeof(tok));
    if (r->kind == LG_SIM_API_RESPONSES) {
        api_text_add(r, tok, (size_t)n);
        return api_chunk(out,
                         "event: response.output_text.delta\ndata: {\"content_index\":0,"
                         "\"delta\":\"%s\",\"item_id\":\"msg_%016" PRIx64 "\",\"logprobs\":[],"
                         "\"output_index\":0,\"sequence_number\":%u,"
                         "\"type\":\"response.output_text.delta\"}\n\n",
                         tok, r->id, 4 + index);
    }
    if (r->kind == LG_SIM_API_MESSAGES) {
        return api_chunk(out,
                         "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                         "\"delta\":{\"type\":\"text_delta\",\"text\":\"%s\"},\"index\":0}\n\n",
                         tok);
    }
    if (r->kind == LG_SIM_API_COMPLETION) {
        return api_chunk(out,
                         API_HEAD_FMT "\"choices\":[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,"
                                      "\"finish_reason\":null}]}\n\n",
                         API_HEAD_ARGS(r), tok);
    }
    if (index == 0 && r->role_chunk) {
        /* vLLM's and SGLang's first chunk: the role, no content yet */
        rc = api_chunk(out,
                       API_HEAD_FMT "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                                    "\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}"
                                    "\n\n",
                       API_HEAD_ARGS(r));
        if (rc != LG_OK) {
            return rc;
        }
    }
    return api_chunk(out,
                     API_HEAD_FMT "\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"%s\"},"
                                  "\"logprobs\":null,\"finish_reason\":null}]}\n\n",
                     API_HEAD_ARGS(r),
                     index == 0 && !r->role_chunk ? "\"role\":\"assistant\"," : "", tok);
}

int
lg_sim_api_chunk_finish(struct evbuffer *out, const struct lg_sim_api_resp *r)
{
    if (r->kind == LG_SIM_API_COMPLETION) {
        return api_chunk(out,
                         API_HEAD_FMT "\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":null,"
                                      "\"finish_reason\":\"%s\"}]}\n\n",
                         API_HEAD_ARGS(r), r->stopped ? "stop" : "length");
    }
    return api_chunk(out,
                     API_HEAD_FMT "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
                                  "\"finish_reason\":\"%s\"}]}\n\n",
                     API_HEAD_ARGS(r), r->stopped ? "stop" : "length");
}

int
lg_sim_api_chunk_usage(struct evbuffer *out, const struct lg_sim_api_resp *r)
{
    return api_chunk(out,
                     API_HEAD_FMT "\"choices\":[],\"usage\":{\"prompt_tokens\":%u,"
                                  "\"completion_tokens\":%u,\"total_tokens\":%" PRIu64 "}}\n\n",
                     API_HEAD_ARGS(r), r->prompt_tokens, r->completion_tokens,
                     (uint64_t)r->prompt_tokens + r->completion_tokens);
}

int
lg_sim_api_chunk_done(struct evbuffer *out)
{
    static const char done[] = "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";

    return evbuffer_add(out, done, sizeof(done) - 1) == 0 ? LG_OK : LG_ENOMEM;
}

int
lg_sim_api_body_completion(struct evbuffer *out, struct lg_sim_api_resp *r)
{
    bool chat = r->kind == LG_SIM_API_CHAT;
    char tok[32];
    int rc = 0;

    if (r->kind == LG_SIM_API_RESPONSES || r->kind == LG_SIM_API_MESSAGES) {
        return api_body_agents(out, r);
    }
    rc |= evbuffer_add_printf(out,
                              "{\"id\":\"%s%016" PRIx64 "\",\"object\":\"%s\",\"created\":%" PRId64
                              ",\"model\":\"%s\",\"choices\":[{\"index\":0,%s",
                              api_id_prefix(r), r->id, chat ? "chat.completion" : "text_completion",
                              r->created, r->model_json,
                              chat ? "\"message\":{\"role\":\"assistant\",\"content\":\""
                                   : "\"text\":\"")
          < 0;
    for (uint32_t i = 0; i < r->completion_tokens; i++) {
        int n = lg_sim_api_next_token(r, i, tok, sizeof(tok));

        rc |= evbuffer_add(out, tok, (size_t)n);
    }
    rc |= evbuffer_add_printf(out,
                              "\"%s,\"logprobs\":null,\"finish_reason\":\"%s\"}],"
                              "\"usage\":{\"prompt_tokens\":%u,\"completion_tokens\":%u,"
                              "\"total_tokens\":%" PRIu64 "}}",
                              chat ? "}" : "", r->stopped ? "stop" : "length", r->prompt_tokens,
                              r->completion_tokens,
                              (uint64_t)r->prompt_tokens + r->completion_tokens)
          < 0;
    return rc ? LG_ENOMEM : LG_OK;
}

int
lg_sim_api_body_embeddings(struct evbuffer *out, const struct lg_sim_request *req,
                           const char *model_json, uint64_t seed, uint32_t dim)
{
    int rc = 0;

    rc |= evbuffer_add_printf(out, "{\"object\":\"list\",\"data\":[") < 0;
    for (uint32_t i = 0; i < req->ninputs; i++) {
        rc |= evbuffer_add_printf(out, "%s{\"object\":\"embedding\",\"index\":%u,\"embedding\":[",
                                  i ? "," : "", i)
              < 0;
        for (uint32_t j = 0; j < dim; j++) {
            uint64_t x = lg_mix64(req->input_hashes[i] ^ lg_mix64(seed + j));
            double v = (double)(x >> 11) / 9007199254740992.0 * 2.0 - 1.0;

            rc |= evbuffer_add_printf(out, "%s%.6f", j ? "," : "", v) < 0;
        }
        rc |= evbuffer_add(out, "]}", 2);
    }
    rc |= evbuffer_add_printf(out,
                              "],\"model\":\"%s\",\"usage\":{\"prompt_tokens\":%u,"
                              "\"total_tokens\":%u}}",
                              model_json, req->prompt_tokens, req->prompt_tokens)
          < 0;
    return rc ? LG_ENOMEM : LG_OK;
}

int
lg_sim_api_body_error(struct evbuffer *out, int status, const char *type, const char *param,
                      const char *message)
{
    json_t *body = json_pack("{s:{s:s,s:s,s:s?,s:i}}", "error", "message", message, "type", type,
                             "param", param, "code", status);
    char *text;
    int rc;

    if (body == NULL) {
        /* the message was not valid UTF-8 (a quoted fragment of the input) */
        body = json_pack("{s:{s:s,s:s,s:s?,s:i}}", "error", "message", "invalid request", "type",
                         type, "param", param, "code", status);
    }
    if (body == NULL) {
        return LG_ENOMEM;
    }
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (text == NULL) {
        return LG_ENOMEM;
    }
    rc = evbuffer_add(out, text, strlen(text)) == 0 ? LG_OK : LG_ENOMEM;
    free(text);
    return rc;
}
