/*
 * fuzz_enginemetrics.c: the engine /metrics parser, and llama.cpp's /props
 * reader. The first input byte picks the vocabulary ('v', 's', 't', 'l';
 * anything else detects it) or, 'p', the /props reader; the rest is the
 * exposition (or the body). Checks that every reported span lies inside the
 * input and that the extracted numbers are in range.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/enginemetrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fuzz_span {
    const char *lo, *hi;
};

static void
fuzz_on_sample(void *arg, const char *name, size_t name_len, const char *labels, size_t labels_len,
               double value)
{
    const struct fuzz_span *s = arg;

    (void)value;
    if (name < s->lo || name + name_len > s->hi || name_len == 0) {
        abort();
    }
    if (labels_len > 0 && (labels < s->lo || labels + labels_len > s->hi)) {
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum lg_engine_flavor f = LG_ENGINE_AUTO;
    struct lg_engine_sample out;
    struct fuzz_span span;
    char *text;

    if (size == 0) {
        return 0;
    }
    switch (data[0]) {
    case 'v':
        f = LG_ENGINE_VLLM;
        break;
    case 's':
        f = LG_ENGINE_SGLANG;
        break;
    case 't':
        f = LG_ENGINE_TGI;
        break;
    case 'l':
        f = LG_ENGINE_LLAMACPP;
        break;
    default:
        break;
    }
    /* an exact-size copy, so ASan sees any read past the end */
    text = malloc(size - 1 ? size - 1 : 1);
    if (text == NULL) {
        return 0;
    }
    memcpy(text, data + 1, size - 1);
    span.lo = text;
    span.hi = text + size - 1;
    if (data[0] == 'p') {
        double slots = 0;

        if (lg_engine_props_parse(text, size - 1, &slots) == LG_OK
            && !(slots >= 1 && slots <= LG_ENGINE_MAX_SLOTS)) {
            abort();
        }
        free(text);
        return 0;
    }
    lg_prom_parse(text, size - 1, fuzz_on_sample, &span);
    if (lg_engine_metrics_parse(text, size - 1, f, &out) == LG_OK) {
        if (out.waiting < -1 || out.running < -1 || out.kv_usage > 1.0) {
            abort();
        }
    }
    free(text);
    return 0;
}
