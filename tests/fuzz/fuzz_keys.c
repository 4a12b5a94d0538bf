/*
 * fuzz_keys.c: the keys-file loader (gateway/serve/keys.c) on arbitrary bytes. It
 * must never crash or leak; a failure always says why, each message with the
 * FILE:LINE:COL: error: shape; a loaded set answers lookups (the key "k1" and
 * the first 16 bytes of the input as a bearer token), counts requests and
 * reserves and settles tokens against a key's budget, and no account
 * outlives the set.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "serve/budget.h"
#include "serve/keys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_config_errors errs = { 0 };
    struct lg_keys *k = NULL;
    struct lg_key_hold h;
    struct lg_keys_rate_view rv;
    const struct lg_budget_limits *lim;
    struct lg_budget *acct;
    struct lg_budget_view v;
    size_t accounts = lg_budget_count();
    char token[64];
    uint32_t ra;
    int rc;

    rc = lg_keys_load_buffer((const char *)data, size, "k.json", &k, &errs);
    if (rc == LG_OK) {
        if (k == NULL || errs.n != 0) {
            abort();
        }
        snprintf(token, sizeof(token), "Bearer %.*s", (int)LG_MIN(size, 16), (const char *)data);
        for (int i = 0; i < 2; i++) {
            if (lg_keys_authenticate(k, i ? token : "Bearer k1", i ? strlen(token) : 9, &h)) {
                if (lg_keys_name(&h) == NULL || strlen(lg_keys_name(&h)) > LG_KEY_NAME_MAX) {
                    abort();
                }
                (void)lg_keys_model_allowed(&h, "m");
                for (int n = 0; n < 3; n++) {
                    (void)lg_keys_admit(&h, (uint64_t)n * 1000, &ra);
                }
                if (lg_keys_rate_view(&h, 1000, &rv) && rv.remaining > rv.limit) {
                    abort();
                }
                acct = lg_keys_budget(&h, &lim);
                if (acct != NULL) {
                    if (!lg_budget_limited(lim)) {
                        abort();
                    }
                    rc = lg_budget_reserve(acct, lim, size, 1704067200000ull, &v);
                    if (rc == LG_OK) {
                        lg_budget_settle(acct, size, size / 2, 1704067200000ull);
                    } else if (v.retry_ms == 0 && rc == LG_EBUSY) {
                        abort();
                    }
                }
                lg_keys_release(&h);
            } else if (h.key != NULL) {
                abort();
            }
        }
        lg_keys_free(k);
    } else if (k != NULL || errs.n + errs.dropped == 0) {
        abort();
    }
    if (lg_budget_count() != accounts) {
        abort(); /* every key's account went with its set */
    }
    for (size_t i = 0; i < errs.n; i++) {
        if (strncmp(errs.msgs[i], "k.json:", 7) != 0
            || strstr(errs.msgs[i], ": error: /") == NULL) {
            abort();
        }
    }
    lg_config_errors_free(&errs);
    return 0;
}
