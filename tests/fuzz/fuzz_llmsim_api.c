/*
 * fuzz_llmsim_api.c: llmsim's OpenAI request inspection. The first byte picks
 * the endpoint (chat, completions, embeddings; with its top bit set, the
 * Responses API, Messages, count_tokens) and the prefix block size; the body is parsed both from memory
 * and from an evbuffer split at a point taken from the second byte, and the
 * two must agree. An accepted request is rendered (chunks and body).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "../../tools/llmsim/api.c"
#include "../../tools/llmsim/prefix.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_sim_request a;
    struct lg_sim_request b;
    struct lg_sim_api_error ea;
    struct lg_sim_api_error eb;
    struct evbuffer *buf;
    struct evbuffer *out;
    enum lg_sim_api_kind kind;
    uint32_t block;
    size_t split;
    int ra;
    int rb;

    if (size < 2) {
        return 0;
    }
    kind = (enum lg_sim_api_kind)(data[0] % 3 + ((data[0] & 0x80) ? 3 : 0));
    block = (uint32_t)(data[0] >> 2) % 9;
    split = size > 2 ? data[1] % (size - 2 + 1) : 0;
    data += 2;
    size -= 2;
    buf = evbuffer_new();
    out = evbuffer_new();
    evbuffer_add(buf, data, split);
    evbuffer_add(buf, data + split, size - split);
    ra = lg_sim_api_parse(kind, (const char *)data, size, block, &a, &ea);
    rb = lg_sim_api_parse_buffer(kind, buf, block, &b, &eb);
    LG_BUG_ON(ra != rb);
    if (ra == LG_OK) {
        struct lg_sim_api_resp r = {
            .kind = kind,
            .model_json = "m",
            .prompt_tokens = a.prompt_tokens,
            .completion_tokens = a.max_tokens % 4,
            .seed = a.prompt_bytes,
            .role_chunk = (a.prompt_bytes & 2) != 0,
            .context = (a.prompt_bytes & 1) != 0,
            .ctx = a.context,
        };

        LG_BUG_ON(a.prompt_tokens != b.prompt_tokens || a.nblocks != b.nblocks);
        LG_BUG_ON(lg_hstream_value(&a.context) != lg_hstream_value(&b.context));
        LG_BUG_ON(a.continue_final != b.continue_final || (a.continue_final && a.add_generation_prompt));
        LG_BUG_ON(a.prompt_tokens < 1 || a.stream != b.stream || a.max_tokens != b.max_tokens);
        LG_BUG_ON(a.nblocks != 0 && memcmp(a.block_keys, b.block_keys, (size_t)a.nblocks * 8) != 0);
        LG_BUG_ON(block == 0 && a.nblocks != 0);
        LG_BUG_ON(kind == LG_SIM_API_EMBEDDING && a.ninputs == 0);
        LG_BUG_ON((a.previous_response_id == NULL) != (b.previous_response_id == NULL)
                  || (a.previous_response_id != NULL
                      && strcmp(a.previous_response_id, b.previous_response_id) != 0));
        if (kind == LG_SIM_API_COUNT_TOKENS) {
            LG_BUG_ON(lg_sim_api_body_count_tokens(out, &a) != LG_OK);
        } else if (kind == LG_SIM_API_RESPONSES || kind == LG_SIM_API_MESSAGES) {
            LG_BUG_ON(lg_sim_api_events_start(out, &r) != LG_OK);
            LG_BUG_ON(lg_sim_api_chunk_token(out, &r, 0) != LG_OK);
            LG_BUG_ON(lg_sim_api_events_end(out, &r) != LG_OK);
            r.text_len = 0;
            LG_BUG_ON(lg_sim_api_body_completion(out, &r) != LG_OK);
        } else if (kind != LG_SIM_API_EMBEDDING) {
            LG_BUG_ON(lg_sim_api_chunk_token(out, &r, 0) != LG_OK);
            LG_BUG_ON(lg_sim_api_chunk_finish(out, &r) != LG_OK);
            LG_BUG_ON(lg_sim_api_chunk_usage(out, &r) != LG_OK);
            LG_BUG_ON(lg_sim_api_body_completion(out, &r) != LG_OK);
        } else {
            LG_BUG_ON(lg_sim_api_body_embeddings(out, &a, "m", 1, 4) != LG_OK);
        }
        lg_sim_request_free(&a);
        lg_sim_request_free(&b);
    } else {
        LG_BUG_ON(ea.status != 400 || eb.status != 400 || ea.message[0] == '\0');
        LG_BUG_ON(lg_sim_api_body_error(out, ea.status, ea.type, ea.param, ea.message) != LG_OK);
    }
    evbuffer_free(buf);
    evbuffer_free(out);
    return 0;
}
