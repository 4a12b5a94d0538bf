/* test_fail.c: the failures' table (base/fail.c). */
#include <stdio.h>
#include <string.h>

#include "base/fail.h"
#include "lg_test.h"

/* Every failure has one name of its own; only "none" has none. */
static int
test_names_unique(void)
{
    LG_CHECK(lg_fail_name(LG_FAIL_NONE) == NULL);
    for (int f = LG_FAIL_NONE + 1; f < LG_FAIL_COUNT; f++) {
        LG_CHECK(lg_fail_table[f].name != NULL && lg_fail_table[f].name[0] != '\0');
        for (int g = LG_FAIL_NONE + 1; g < f; g++) {
            LG_CHECK(strcmp(lg_fail_table[f].name, lg_fail_table[g].name) != 0);
        }
    }
    return 0;
}

/* A failure that may be retried ends the request with an error status
 * when it is not, and is one routing.retry.on takes by name. */
static int
test_retryable(void)
{
    char why[512];

    for (int f = LG_FAIL_NONE + 1; f < LG_FAIL_COUNT; f++) {
        int bit = lg_fail_retry_bit(lg_fail_table[f].name, why, sizeof(why));

        if (lg_fail_table[f].retryable) {
            LG_CHECK(bit == f);
            LG_CHECK(lg_fail_status(f) >= 500);
            LG_CHECK(LG_FAIL_RETRY_DEFAULT & LG_FAIL_BIT(f));
        } else {
            LG_CHECK(bit == -1 && strstr(why, "never retried") != NULL);
            LG_CHECK(!(LG_FAIL_RETRY_DEFAULT & LG_FAIL_BIT(f)));
        }
    }
    LG_CHECK(lg_fail_retry_bit("timeout", why, sizeof(why)) == -1);
    LG_CHECK(strstr(why, "unknown failure \"timeout\"; expected one of connect_failed") == why);
    LG_CHECK(strstr(why, "client_closed") == NULL); /* only what may be retried is offered */
    /* the midway failures count against their backend, and end no request with a status */
    LG_CHECK(lg_fail_table[LG_FAIL_CLOSED_MIDWAY].counts && lg_fail_status(LG_FAIL_RESET) == 0);
    LG_CHECK(!lg_fail_table[LG_FAIL_CLIENT_CLOSED].counts);
    LG_CHECK(lg_fail_table[LG_FAIL_CONNECT_REFUSED].refused);
    LG_CHECK(!lg_fail_table[LG_FAIL_CONNECT].refused);
    return 0;
}

static int
test_status(void)
{
    static const int retried[] = { 429, 500, 502, 503, 504 };

    for (size_t i = 0; i < LG_ARRAY_SIZE(retried); i++) {
        enum lg_fail f = lg_fail_of_status(retried[i]);
        char name[16];

        LG_CHECK(f != LG_FAIL_NONE && lg_fail_table[f].retryable);
        snprintf(name, sizeof(name), "http_%d", retried[i]);
        LG_CHECK_STR(lg_fail_name(f), name);
    }
    LG_CHECK(lg_fail_of_status(200) == LG_FAIL_NONE);
    LG_CHECK(lg_fail_of_status(404) == LG_FAIL_NONE);
    LG_CHECK(lg_fail_of_status(501) == LG_FAIL_NONE);
    return 0;
}

LG_TEST_MAIN(test_names_unique, test_retryable, test_status)
