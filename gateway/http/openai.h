/*
 * openai.h: what the gateway reads from an OpenAI-style request body, and
 * the OpenAI-style error bodies it writes.
 */
#ifndef LG_OPENAI_H
#define LG_OPENAI_H

#include "base/lg_core.h"

struct evbuffer;

#define LG_MODEL_MAX 256
/* The longest response id the gateway follows (previous_response_id, http/respid.h). */
#define LG_RESPONSE_ID_MAX 128
/* The largest token count a body may ask for (max_tokens, max_completion_tokens, min_tokens). */
#define LG_OPENAI_TOKENS_MAX 2147483647

struct lg_openai_req {
    char model[LG_MODEL_MAX + 1]; /* "" when absent */
    bool stream;
    bool include_usage;           /* stream_options.include_usage */
    int64_t max_tokens;           /* max_completion_tokens, else max_output_tokens (the
                                     Responses API), else max_tokens (all checked within
                                     0..LG_OPENAI_TOKENS_MAX); -1 = absent */
    char previous_response_id[LG_RESPONSE_ID_MAX + 1]; /* the Responses API's; "" = none */
    uint64_t prompt_bytes;        /* bytes of prompt text (messages, prompt or input) */
    uint64_t prefix_hash;         /* lg_hstream of the first prefix_bytes of role+content, mixed; 0 = empty */
    bool greedy;                  /* "temperature": 0 (greedy decoding) */
    bool seeded;                  /* "seed": an integer (sampling that repeats) */
    int64_t n;                    /* "n", choices asked for; 1 when absent */
    int status;                   /* on failure, the HTTP status to answer: 400 (LG_EINVAL),
                                     413 or 503 (LG_ENOMEM) */
    const char *code;             /* static, on failure: "invalid_json", "duplicate_key",
                                     "too_many_values" or "out_of_memory" */
    const char *param;            /* static, on LG_EINVAL: the field at fault (OpenAI's "param");
                                     NULL: the body as a whole */
    uint32_t choices;             /* the larger of `n` and `best_of`: 1 when both are absent
                                     or null, 2 when either is not a positive integer or
                                     comes twice */
    bool store;                   /* `store` is true (the completion is kept: a side effect),
                                     or one of these three keys comes twice */
};

/*
 * Inspects a JSON request body without linearising it (a validating scanner
 * reads the evbuffer's extents). The body is left untouched.
 * Returns LG_OK, or LG_EINVAL with a human message in err, out->code and
 * out->param set: malformed JSON (with its position), not an object, wrong
 * type of a known field, a token count out of range, or a field the gateway
 * reads given twice (duplicate_key: model, messages, max_tokens,
 * max_completion_tokens, stream, stream_options, prompt, input, user,
 * max_output_tokens, previous_response_id).
 * Or LG_ENOMEM, the whole body checked or not: more values the gateway
 * reads than LG_JSONSCAN_MAX_TOKS (413, too_many_values), or no memory for
 * the scan (503, out_of_memory); out->status says which. Nothing the body
 * holds makes the scan allocate more than that bound.
 * A missing model is not an error here: out->model is "".
 */
int lg_openai_inspect(struct evbuffer *body, size_t prefix_bytes, struct lg_openai_req *out,
                      char *err, size_t errlen);

/* Same on contiguous memory (tests, fuzzing). */
int lg_openai_inspect_mem(const char *data, size_t len, size_t prefix_bytes,
                          struct lg_openai_req *out, char *err, size_t errlen);

/*
 * Appends {"error":{"message":...,"type":...,"param":...,"code":...}} to out
 * (param and code null when NULL). Returns the number of bytes appended.
 */
size_t lg_openai_error_body(struct evbuffer *out, const char *message, const char *type,
                            const char *param, const char *code);

/* The OpenAI error type for an HTTP status. */
const char *lg_openai_error_type(int status);

/* Appends s to out as a JSON string (quotes included). */
void lg_json_append_string(struct evbuffer *out, const char *s, size_t n);

#endif /* LG_OPENAI_H */
