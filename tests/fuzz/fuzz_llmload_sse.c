/*
 * fuzz_llmload_sse.c: llmload's SSE scanner and chunk inspection. The first
 * byte picks the split point and the event bound; each event's data goes
 * through the JSON walk, and the whole input goes through it once more as a
 * non-streamed body.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../../tools/llmload/sse.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
fuzz_event(void *arg, const char *p, size_t n)
{
    struct lg_ld_chunk c;

    (void)lg_ld_chunk_inspect(p, n, &c);
    (*(size_t *)arg)++;
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_ld_sse s;
    struct lg_ld_chunk c;
    size_t split, events = 0;
    const char *p = (const char *)data + 1;
    size_t n;

    if (size < 1) {
        return 0;
    }
    n = size - 1;
    split = n ? (size_t)data[0] * 97 % (n + 1) : 0;
    lg_ld_sse_init(&s, data[0] & 1 ? 64 : 1 << 20);
    if (lg_ld_sse_feed(&s, p, split, fuzz_event, &events) == LG_OK) {
        (void)lg_ld_sse_feed(&s, p + split, n - split, fuzz_event, &events);
    }
    lg_ld_sse_free(&s);
    (void)lg_ld_chunk_inspect(p, n, &c);
    return 0;
}
