/*
 * fuzz_config.c: the config loader on arbitrary bytes. It must never crash
 * or leak, a failure must always say why, and every message must have the
 * FILE:LINE:COL: error: shape. Names are not resolved (no DNS while fuzzing);
 * odd-sized inputs also run with no error sink.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;
    char out[4096];
    FILE *f;
    int rc;

    rc = lg_config_load_buffer_flags((const char *)data, size, "f.json", LG_CONFIG_F_NO_RESOLVE, &c,
                                     &errs);
    if (rc == LG_OK) {
        /* routing: a policy, a pipeline, or neither (the default, ttft), never both */
        if (c == NULL || errs.n != 0 || c->nlisten == 0 || c->nbackends + c->ntemplates == 0
            || c->workers > LG_CONFIG_MAX_WORKERS || (c->routing.policy != NULL && c->routing.npipeline > 0)) {
            abort();
        }
        if (c->routing.npipeline > 0) {
            size_t deciding = 0; /* weight 0 is a shadow: one stage at least decides */

            for (size_t i = 0; i < c->routing.npipeline; i++) {
                deciding += c->routing.pipeline[i].weight > 0;
            }
            if (deciding == 0) {
                abort();
            }
        }
        for (size_t i = 0; i < c->ntemplates; i++) {
            if (c->templates[i].discover.dns == NULL || c->templates[i].discover.port == 0
                || c->templates[i].url != NULL) {
                abort();
            }
        }
        for (size_t i = 0; i < c->nbackends; i++) {
            if (c->backends[i].nmodels == 0 || c->backends[i].models[c->backends[i].nmodels]
                || !c->backends[i].enabled || c->backends[i].port == 0
                || lg_config_backend(c, c->backends[i].name) == NULL) {
                abort();
            }
        }
        lg_config_unref(lg_config_ref(c));
        lg_config_unref(c);
    } else if (c != NULL || errs.n == 0) {
        abort();
    }
    for (size_t i = 0; i < errs.n; i++) {
        if (strncmp(errs.msgs[i], "f.json:", 7) != 0
            || strstr(errs.msgs[i], ": error: /") == NULL) {
            abort();
        }
    }
    f = fmemopen(out, sizeof(out), "w");
    if (f != NULL) {
        lg_config_errors_print(&errs, f);
        fclose(f);
    }
    lg_config_errors_free(&errs);
    if (size % 2 == 1) {
        c = NULL;
        rc = lg_config_load_buffer_flags((const char *)data, size, "f.json", LG_CONFIG_F_NO_RESOLVE,
                                         &c, NULL);
        lg_config_unref(rc == LG_OK ? c : NULL);
    }
    return 0;
}
