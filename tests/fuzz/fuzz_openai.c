/*
 * fuzz_openai.c: request-body inspection (gateway/http/openai.c) on arbitrary
 * bytes. The first byte picks a prefix length and a split point; the rest is
 * the body. lg_openai_inspect_mem() and lg_openai_inspect() (over an evbuffer
 * made of two chains, as a body read in pieces is) must agree on everything;
 * a failure must say why, with a 400 (inputs this small never reach the
 * tape's bound, 413), a success must give a bounded, terminated model.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "http/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_openai_req a, b;
    char err_a[256] = "", err_b[256] = "";
    struct evbuffer *buf;
    const char *p;
    size_t n, split, prefix;
    int rc_a, rc_b;

    if (size < 1) {
        return 0;
    }
    p = (const char *)data + 1;
    n = size - 1;
    prefix = (size_t)(data[0] & 0x0f) * 37;
    split = n ? (size_t)(data[0] >> 4) * n / 15 : 0;
    rc_a = lg_openai_inspect_mem(p, n, prefix, &a, err_a, sizeof(err_a));

    buf = evbuffer_new();
    evbuffer_add(buf, p, split);
    {
        /* a second chain, as when the body arrived in two reads */
        struct evbuffer *tail = evbuffer_new();

        evbuffer_add(tail, p + split, n - split);
        evbuffer_add_buffer(buf, tail);
        evbuffer_free(tail);
    }
    rc_b = lg_openai_inspect(buf, prefix, &b, err_b, sizeof(err_b));
    if (evbuffer_get_length(buf) != n) {
        abort(); /* inspection must leave the body untouched */
    }
    evbuffer_free(buf);

    if (rc_a != rc_b || (rc_a != LG_OK && rc_a != LG_EINVAL)) {
        abort();
    }
    if (rc_a != LG_OK) {
        if (err_a[0] == '\0' || err_b[0] == '\0' || strcmp(err_a, err_b) != 0) {
            abort(); /* a refusal always says why, the same way */
        }
        if (a.code == NULL || b.code == NULL || strcmp(a.code, b.code) != 0 || a.param != b.param) {
            abort(); /* with the same code and field (both static strings) */
        }
        if (a.status != 400 || b.status != 400) {
            abort();
        }
        if (strcmp(a.code, "duplicate_key") == 0 && a.param == NULL) {
            abort(); /* a duplicate is always named */
        }
        return 0;
    }
    if (memchr(a.model, '\0', sizeof(a.model)) == NULL || strlen(a.model) > LG_MODEL_MAX) {
        abort();
    }
    if (strcmp(a.model, b.model) != 0 || a.stream != b.stream || a.include_usage != b.include_usage
        || a.max_tokens != b.max_tokens || a.prompt_bytes != b.prompt_bytes
        || a.prefix_hash != b.prefix_hash || a.choices != b.choices || a.store != b.store) {
        abort();
    }
    if (a.choices == 0) {
        abort(); /* a request asks for one choice at least */
    }
    if (a.max_tokens < -1 || (prefix == 0 && a.prefix_hash != 0)) {
        abort();
    }
    return 0;
}
