/*
 * fuzz_tracectx.c: the W3C Trace Context readers (gateway/http/tracectx.c)
 * on arbitrary bytes, never NUL-terminated. The first byte picks the
 * header: even, `traceparent`; odd, `tracestate`. A traceparent read has
 * a trace id and a parent id that are not zero, and written back (version
 * 00) it reads as the same context; a tracestate found valid fits the
 * bound.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "http/tracectx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_tracectx tc, back;
    char *text, out[LG_TRACEPARENT_LEN];
    size_t len;

    text = fuzz_input_rest(data, size, &len);
    if (text == NULL) {
        return 0;
    }
    if ((data[0] & 1) == 0) {
        if (lg_tracectx_parse(text, len, &tc) == LG_OK) {
            bool zero = true;

            for (int i = 0; i < 16; i++) {
                zero = zero && tc.trace_id[i] == 0;
            }
            if (zero || tc.parent_id == 0) {
                abort();
            }
            lg_tracectx_format(out, tc.trace_id, tc.parent_id, tc.flags);
            if (lg_tracectx_parse(out, sizeof(out), &back) != LG_OK
                || memcmp(back.trace_id, tc.trace_id, 16) != 0 || back.parent_id != tc.parent_id
                || back.flags != tc.flags) {
                abort();
            }
        }
    } else if (lg_tracestate_valid(text, len) && len > LG_TRACESTATE_MAX) {
        abort();
    }
    free(text);
    return 0;
}
