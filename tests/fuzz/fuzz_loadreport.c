/*
 * fuzz_loadreport.c: engines' load reports (fleet/loadreport.h). The first
 * input byte picks the reader: 'h' the endpoint-load-metrics header's value,
 * anything else a GET /load or /v1/loads body; the rest is the input.
 * Checks that what a report says is in range.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/loadreport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_check(const struct lg_load_report *r)
{
    if (r->waiting < -1 || r->running < -1 || r->total < -1 || r->slots < -1
        || r->tokens_per_s < -1 || r->kv_usage < -1 || r->kv_usage > 1.0) {
        abort();
    }
    if (r->waiting < 0 && r->running < 0 && r->total < 0 && r->kv_usage < 0) {
        abort(); /* LG_OK says it held something */
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_load_report r;
    char *text;
    int rc;

    if (size == 0) {
        return 0;
    }
    /* an exact-size copy, so ASan sees any read past the end */
    text = malloc(size - 1 ? size - 1 : 1);
    if (text == NULL) {
        return 0;
    }
    memcpy(text, data + 1, size - 1);
    if (data[0] == 'h') {
        rc = lg_load_report_header_parse(text, size - 1, &r);
    } else {
        rc = lg_load_report_body_parse(text, size - 1, &r);
    }
    if (rc == LG_OK) {
        fuzz_check(&r);
    }
    free(text);
    return 0;
}
