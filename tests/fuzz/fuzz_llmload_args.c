/*
 * fuzz_llmload_args.c: llmload's option-level parsers: size specs, --burst,
 * durations, trace-file lines and the whole command line. The input is split
 * at NUL bytes into arguments; the first byte picks what to exercise.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/llmload/opts.c"
#include "../../tools/llmload/spec.c"
#include "../../tools/llmload/trace.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_ARGS 64

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf, *argv[FUZZ_MAX_ARGS + 2];
    char err[512];
    int argc = 1;
    struct lg_ld_spec spec;
    struct lg_ld_burst burst;
    struct lg_ld_item it;
    struct lg_ld_opts o;
    double secs;

    if (size < 1 || size > 4096) {
        return 0;
    }
    buf = malloc(size);
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = '\0';
    switch (data[0] % 4) {
    case 0:
        if (lg_ld_spec_parse(&spec, buf, LG_LD_MAX_PROMPT_BYTES, err, sizeof(err)) == LG_OK) {
            struct lg_ld_rng r;

            lg_ld_rng_init(&r, size, 0);
            for (int i = 0; i < 16; i++) {
                uint64_t v = lg_ld_spec_sample(&spec, &r);

                if (v > lg_ld_spec_max(&spec)) {
                    abort();
                }
            }
        }
        break;
    case 1:
        (void)lg_ld_burst_parse(&burst, buf, err, sizeof(err));
        (void)lg_ld_parse_seconds(buf, &secs);
        break;
    case 2:
        if (lg_ld_trace_parse_line((const char *)data + 1, size - 1, &it, err, sizeof(err))
            == LG_OK) {
            free(it.model);
            free(it.extra);
        }
        break;
    default:
        argv[0] = "llmload";
        for (size_t i = 0; i < size - 1 && argc <= FUZZ_MAX_ARGS;) {
            argv[argc++] = buf + i;
            i += strlen(buf + i) + 1;
        }
        argv[argc] = NULL;
        (void)lg_ld_opts_parse(&o, argc, argv, err, sizeof(err));
        lg_ld_opts_free(&o);
        break;
    }
    free(buf);
    return 0;
}
