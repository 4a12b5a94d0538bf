/*
 * api.h: the OpenAI wire format as llmsim speaks it: inspection of request
 * bodies (chat, completions, embeddings) and rendering of responses, stream
 * chunks and error bodies.
 */
#ifndef LG_SIM_API_H
#define LG_SIM_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llmgate/hstream.h>

struct evbuffer;

enum lg_sim_api_kind {
    LG_SIM_API_CHAT = 0,   /* POST /v1/chat/completions */
    LG_SIM_API_COMPLETION, /* POST /v1/completions */
    LG_SIM_API_EMBEDDING,  /* POST /v1/embeddings */
    LG_SIM_API_RESPONSES,  /* POST /v1/responses (OpenAI's Responses API, as vLLM serves it) */
    LG_SIM_API_MESSAGES,   /* POST /v1/messages (Anthropic's Messages API, as vLLM serves it) */
    LG_SIM_API_COUNT_TOKENS, /* POST /v1/messages/count_tokens */
};

#define LG_SIM_API_TEXT_MAX 2048 /* bytes of an answer's text repeated by its final events */

#define LG_SIM_API_MODEL_MAX      256     /* bytes of a model name */
#define LG_SIM_API_MAX_TOKENS     1000000 /* bound on max_tokens */
#define LG_SIM_API_MAX_INPUTS     2048    /* embedding inputs per request */
#define LG_SIM_API_MAX_BLOCK_KEYS (1u << 20)

/* What llmsim needs from a request body; every pointer is owned. */
struct lg_sim_request {
    enum lg_sim_api_kind kind;
    char *model; /* NULL when the body named none */
    bool stream;
    bool include_usage;     /* stream_options.include_usage */
    bool ignore_eos;        /* accepted; llmsim always generates max_tokens */
    uint32_t max_tokens;    /* 0 = not given (the replica's default applies) */
    uint32_t sim_tokens;    /* sim_completion_tokens: generate this many (at most
                               max_tokens when given), as an engine stops at its end of
                               sequence; 0 = not given */
    uint64_t prompt_bytes;  /* message contents or prompt strings */
    uint32_t prompt_tokens; /* prompt_bytes / 4 (or token ids counted), at least 1 */
    uint64_t *block_keys;   /* prefix-cache keys of the prompt's whole blocks */
    uint32_t nblocks;
    uint64_t *input_hashes; /* embeddings: one hash per input */
    uint32_t ninputs;
    bool has_seed;          /* the body's "seed" */
    int32_t priority;       /* the body's "priority" (vLLM's: lower first; default 0) */
    int64_t seed;
    bool continue_final;    /* chat: continue_final_message (the last message left open) */
    bool add_generation_prompt; /* chat: add_generation_prompt (default true) */
    struct lg_hstream context;  /* the prompt as the text generator reads it (api.c:
                                   chat messages rendered, prompt strings, token ids) */
    char *previous_response_id; /* responses: the body's, or NULL */
};

/* A rejected request: HTTP status and the fields of an OpenAI error body. */
struct lg_sim_api_error {
    int status;
    const char *type;  /* "invalid_request_error"... (static) */
    const char *param; /* offending field or NULL (static) */
    char message[256];
};

/*
 * Parses a request body of `len` bytes. block_tokens sets the prefix-cache
 * block size (0: no keys). Returns LG_OK and fills *req (release it with
 * lg_sim_request_free), or LG_EINVAL with *err filled and *req empty.
 */
int lg_sim_api_parse(enum lg_sim_api_kind kind, const char *body, size_t len, uint32_t block_tokens,
                     struct lg_sim_request *req, struct lg_sim_api_error *err);
/* Same, reading (and draining) the body from an evbuffer. */
int lg_sim_api_parse_buffer(enum lg_sim_api_kind kind, struct evbuffer *body, uint32_t block_tokens,
                            struct lg_sim_request *req, struct lg_sim_api_error *err);
void lg_sim_request_free(struct lg_sim_request *req);

/* The text of token number `index` (" tok17"): a function of seed and index only. */
int lg_sim_api_token(uint64_t seed, uint32_t index, char *buf, size_t len);

/* The seed of a response's text in context mode: the model's name and the
 * request's "seed" (none: 0), nothing of the replica. */
uint64_t lg_sim_api_context_seed(const char *model, const struct lg_sim_request *req);

/* Escapes s for use inside a JSON string (no quotes added); NULL if it cannot. */
char *lg_sim_api_json_escape(const char *s);

/* Fixed fields shared by every chunk of one response. */
struct lg_sim_api_resp {
    enum lg_sim_api_kind kind;
    uint64_t id;            /* rendered as chatcmpl-<hex> / cmpl-<hex> */
    int64_t created;        /* wall-clock seconds */
    const char *model_json; /* escaped model name (borrowed) */
    uint32_t prompt_tokens;
    uint32_t completion_tokens;
    uint64_t seed;
    bool stopped; /* ended before max_tokens: finish_reason "stop", else "length" */
    bool role_chunk;         /* a role-only first chunk (content ""), as vLLM and SGLang */
    bool context;            /* each token a function of the text before it (--text context) */
    struct lg_hstream ctx;   /* context mode: the prompt and the tokens so far */
    uint64_t resp_id;        /* responses: the answer's id (resp_<hex>), unique to the replica */
    size_t text_len;         /* responses: the text so far, for the final events */
    char text[LG_SIM_API_TEXT_MAX];
};

/*
 * The text of the response's next token, number `index` (" tok17"). Position
 * mode (the default): a function of r->seed and index only, the same for
 * every request. Context mode: a function of r->seed and the text before it
 * (the prompt as rendered, then the tokens so far), which it then extends: a
 * request whose prompt already ends with the first k tokens of an answer
 * (a chat continuation, a prompt continuation) goes on with token k.
 */
int lg_sim_api_next_token(struct lg_sim_api_resp *r, uint32_t index, char *buf, size_t len);

/*
 * Stream pieces, each one complete HTTP/1.1 chunk (size line, payload, CRLF)
 * appended to out with a single evbuffer_add and no allocation:
 * token: `data: {chunk}\n\n` for token `index` (the first also carries the
 * assistant role); finish: the chunk with finish_reason; usage: the usage
 * chunk; done: `data: [DONE]\n\n` followed by the last-chunk marker.
 */
int lg_sim_api_chunk_token(struct evbuffer *out, struct lg_sim_api_resp *r, uint32_t index);
int lg_sim_api_chunk_finish(struct evbuffer *out, const struct lg_sim_api_resp *r);
int lg_sim_api_chunk_usage(struct evbuffer *out, const struct lg_sim_api_resp *r);
int lg_sim_api_chunk_done(struct evbuffer *out);

/*
 * The Responses and Messages APIs' events before the first token
 * (response.created, .in_progress, .output_item.added, .content_part.added;
 * message_start, content_block_start) and after the last (the done events
 * and response.completed; content_block_stop, message_delta, message_stop
 * and vLLM's [DONE]), in vLLM's shapes (tests/fixtures/engines/vllm/), each
 * one HTTP chunk. lg_sim_api_chunk_token() writes their deltas.
 */
int lg_sim_api_events_start(struct evbuffer *out, const struct lg_sim_api_resp *r);
int lg_sim_api_events_end(struct evbuffer *out, const struct lg_sim_api_resp *r);

/* The count_tokens answer: {"input_tokens": N}. */
int lg_sim_api_body_count_tokens(struct evbuffer *out, const struct lg_sim_request *req);

/* A whole non-streaming completion body (JSON, no HTTP framing). */
int lg_sim_api_body_completion(struct evbuffer *out, struct lg_sim_api_resp *r);

/* An embeddings response body: `dim` numbers per input. */
int lg_sim_api_body_embeddings(struct evbuffer *out, const struct lg_sim_request *req,
                               const char *model_json, uint64_t seed, uint32_t dim);

/* {"error":{"message","type","param","code"}} */
int lg_sim_api_body_error(struct evbuffer *out, int status, const char *type, const char *param,
                          const char *message);

#endif /* LG_SIM_API_H */
