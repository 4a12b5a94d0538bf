/*
 * test_keys.c: the keys file (errors with their FILE:LINE:COL), lookup by
 * SHA-256, model lists, concurrency and the rate limit (with a simulated
 * clock), and counters kept across a reload.
 */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "base/config.h"
#include "lg_test.h"
#include "serve/budget.h"
#include "serve/keys.h"

static char sha_k1[65], sha_k2[65];

static struct lg_keys *
load(const char *text, struct lg_config_errors *errs)
{
    struct lg_keys *k = NULL;

    memset(errs, 0, sizeof(*errs));
    if (lg_keys_load_buffer(text, strlen(text), "k.json", &k, errs) != LG_OK) {
        return NULL;
    }
    return k;
}

static int
expect_errors(const char *text, ...)
{
    struct lg_config_errors errs;
    struct lg_keys *k = load(text, &errs);
    const char *want;
    size_t i = 0;
    int failed = 0;
    va_list ap;

    if (k != NULL) {
        fprintf(stderr, "expected errors, keys loaded:\n%s\n", text);
        lg_keys_free(k);
        return 1;
    }
    va_start(ap, text);
    while ((want = va_arg(ap, const char *)) != NULL) {
        if (i >= errs.n || strcmp(errs.msgs[i], want) != 0) {
            fprintf(stderr, "error %zu:\n  got:      %s\n  expected: %s\n", i,
                    i < errs.n ? errs.msgs[i] : "(none)", want);
            failed = 1;
        }
        i++;
    }
    va_end(ap);
    if (i != errs.n) {
        fprintf(stderr, "got %zu errors, expected %zu\n", errs.n, i);
        lg_config_errors_print(&errs, stderr);
        failed = 1;
    }
    lg_config_errors_free(&errs);
    return failed;
}

static char *
keys_doc(const char *k1_extra, const char *k2_extra)
{
    char *s;

    if (asprintf(&s,
                 "{\"keys\": [\n"
                 " {\"name\": \"a\", \"sha256\": \"%s\", \"models\": [\"m\", \"n\"]%s},\n"
                 " {\"name\": \"b\", \"sha256\": \"%s\", \"models\": \"*\"%s}\n]}\n",
                 sha_k1, k1_extra, sha_k2, k2_extra)
        < 0) {
        abort();
    }
    return s;
}

static int
test_lookup_and_models(void)
{
    struct lg_config_errors errs;
    char *doc = keys_doc("", "");
    struct lg_keys *k = load(doc, &errs);
    struct lg_key_hold h;

    free(doc);
    LG_CHECK(k != NULL && lg_keys_count(k) == 2);
    LG_CHECK(lg_keys_authenticate(k, "Bearer k1", 9, &h));
    LG_CHECK_STR(lg_keys_name(&h), "a");
    LG_CHECK(lg_keys_model_allowed(&h, "m") && lg_keys_model_allowed(&h, "n"));
    LG_CHECK(!lg_keys_model_allowed(&h, "x") && !lg_keys_model_allowed(&h, "M"));
    lg_keys_release(&h);
    lg_keys_release(&h); /* idempotent */
    LG_CHECK(lg_keys_name(&h) == NULL);
    /* scheme without case, spaces around the token; the value need not end */
    LG_CHECK(lg_keys_authenticate(k, "  bEaReR   k2  xyz", 13, &h));
    LG_CHECK_STR(lg_keys_name(&h), "b");
    LG_CHECK(lg_keys_model_allowed(&h, "anything"));
    lg_keys_release(&h);
    LG_CHECK(!lg_keys_authenticate(k, "Bearer k3", 9, &h) && h.key == NULL);
    LG_CHECK(!lg_keys_authenticate(k, "Bearer ", 7, &h));
    LG_CHECK(!lg_keys_authenticate(k, "Basic k1", 8, &h));
    LG_CHECK(!lg_keys_authenticate(k, "Bearer k1k1", 11, &h));
    LG_CHECK(!lg_keys_authenticate(k, "", 0, &h));
    /* x-api-key: the key alone, blanks around it */
    LG_CHECK(lg_keys_authenticate_raw(k, " k1 ", 4, &h));
    LG_CHECK_STR(lg_keys_name(&h), "a");
    lg_keys_release(&h);
    LG_CHECK(lg_keys_authenticate_raw(k, "k2xyz", 2, &h));
    LG_CHECK_STR(lg_keys_name(&h), "b");
    lg_keys_release(&h);
    LG_CHECK(!lg_keys_authenticate_raw(k, "Bearer k1", 9, &h) && h.key == NULL);
    LG_CHECK(!lg_keys_authenticate_raw(k, "  ", 2, &h));
    LG_CHECK(!lg_keys_authenticate_raw(k, "", 0, &h));
    lg_keys_free(k);
    return 0;
}

static int
test_concurrency(void)
{
    struct lg_config_errors errs;
    char *doc = keys_doc(", \"max_concurrency\": 2", "");
    struct lg_keys *k = load(doc, &errs);
    struct lg_key_hold h[3];
    uint32_t ra;

    free(doc);
    LG_CHECK(k != NULL);
    for (int i = 0; i < 3; i++) {
        LG_CHECK(lg_keys_authenticate(k, "Bearer k1", 9, &h[i]));
    }
    LG_CHECK(lg_keys_admit(&h[0], 0, &ra) == LG_OK && ra == 0);
    LG_CHECK(lg_keys_admit(&h[0], 0, &ra) == LG_OK); /* counted once */
    LG_CHECK(lg_keys_admit(&h[1], 0, &ra) == LG_OK);
    LG_CHECK(lg_keys_admit(&h[2], 0, &ra) == LG_EBUSY && ra == 1000);
    lg_keys_release(&h[0]);
    LG_CHECK(lg_keys_admit(&h[2], 0, &ra) == LG_OK);
    lg_keys_release(&h[1]);
    lg_keys_release(&h[2]);
    lg_keys_free(k);
    return 0;
}

static int
test_rate(void)
{
    struct lg_config_errors errs;
    char *doc = keys_doc(", \"rate\": {\"requests_per_second\": 2, \"burst\": 3}",
                         ", \"rate\": {\"requests_per_minute\": 30}");
    struct lg_keys *k = load(doc, &errs);
    struct lg_key_hold h;
    struct lg_keys_rate_view rv;
    uint64_t t = 1000 * LG_NS_PER_S;
    uint32_t ra;
    int ok = 0;

    free(doc);
    LG_CHECK(k != NULL);
    LG_CHECK(lg_keys_authenticate(k, "Bearer k1", 9, &h));
    LG_CHECK(lg_keys_rate_view(&h, t, &rv));
    LG_CHECK(rv.limit == 3 && rv.remaining == 3 && rv.reset_ms == 0);
    LG_CHECK(lg_keys_admit(&h, t, &ra) == LG_OK);
    LG_CHECK(lg_keys_rate_view(&h, t, &rv));
    LG_CHECK(rv.limit == 3 && rv.remaining == 2 && rv.reset_ms == 500);
    ok = 1;
    h.counted = false;
    /* a burst of 3 at once, then one every 500 ms */
    for (int i = 0; i < 4; i++) {
        ok += lg_keys_admit(&h, t, &ra) == LG_OK;
        h.counted = false;
    }
    LG_CHECK(ok == 3);
    LG_CHECK(lg_keys_rate_view(&h, t + 100 * LG_NS_PER_MS, &rv));
    LG_CHECK(rv.remaining == 0 && rv.reset_ms == 1400);
    LG_CHECK(lg_keys_admit(&h, t, &ra) == LG_EBUSY && ra > 0 && ra <= 501);
    LG_CHECK(lg_keys_admit(&h, t + 499 * LG_NS_PER_MS, &ra) == LG_EBUSY);
    LG_CHECK(lg_keys_admit(&h, t + 500 * LG_NS_PER_MS, &ra) == LG_OK);
    LG_CHECK(lg_keys_admit(&h, t + 600 * LG_NS_PER_MS, &ra) == LG_EBUSY);
    /* after a long quiet spell the burst is back, not more */
    ok = 0;
    for (int i = 0; i < 5; i++) {
        ok += lg_keys_admit(&h, t + 60 * LG_NS_PER_S, &ra) == LG_OK;
    }
    LG_CHECK(ok == 3);
    lg_keys_release(&h);
    /* per minute, default burst 1: one request, then 2 s */
    LG_CHECK(lg_keys_authenticate(k, "Bearer k2", 9, &h));
    LG_CHECK(lg_keys_rate_view(&h, t, &rv) && rv.limit == 1 && rv.remaining == 1);
    LG_CHECK(lg_keys_admit(&h, t, &ra) == LG_OK);
    LG_CHECK(lg_keys_admit(&h, t, &ra) == LG_EBUSY && ra > 1900 && ra <= 2001);
    LG_CHECK(lg_keys_admit(&h, t + 2 * LG_NS_PER_S, &ra) == LG_OK);
    lg_keys_release(&h);
    lg_keys_free(k);
    return 0;
}

static int
test_errors(void)
{
    char doc[1024];

    LG_CHECK(
        expect_errors("{\"keys\": [}", "k.json:1:11: error: /: unexpected token near '}'", NULL)
        == 0);
    LG_CHECK(expect_errors("[]",
                           "k.json:1:1: error: /: expected {\"keys\": [{name, sha256, "
                           "models, max_concurrency, rate, budget}, ...]}",
                           NULL)
             == 0);
    LG_CHECK(expect_errors("{\"keys\": [], \"extra\": 1}",
                           "k.json:1:14: error: /extra: unknown key \"extra\"", NULL)
             == 0);
    LG_CHECK(
        expect_errors(
            "{\"keys\": [\n  {\"name\": \"a b\", \"sha256\": \"00\", \"models\": 5,\n"
            "   \"max_concurrency\": 1.5, \"rate\": {\"requests_per_second\": 1, \"burst\": 0}}]}",
            "k.json:2:12: error: /keys/0/name: names are 1 to 64 letters, digits, "
            "\".\", \"_\", \":\", \"@\" or \"-\"",
            "k.json:2:29: error: /keys/0/sha256: must be 64 hexadecimal digits, "
            "the SHA-256 of the key",
            "k.json:2:45: error: /keys/0/models: expected \"*\" or a list of 1 to "
            "1024 model names",
            "k.json:3:23: error: /keys/0/max_concurrency: must be a whole number",
            "k.json:3:72: error: /keys/0/rate/burst: must be between 1 and 1e+06 "
            "(got 0)",
            NULL)
        == 0);
    snprintf(doc, sizeof(doc),
             "{\"keys\": [{\"name\": \"a\", \"sha256\": \"%s\", \"models\": \"*\"},\n"
             "  {\"name\": \"a\", \"sha256\": \"%s\", \"models\": \"*\"},\n"
             "  {\"name\": \"c\", \"sha256\": \"%s\", \"models\": \"*\"},\n"
             "  {\"sha256\": \"%s\"}]}",
             sha_k1, sha_k2, sha_k1, sha_k2);
    LG_CHECK(expect_errors(doc, "k.json:2:3: error: /keys/1: duplicate name \"a\"",
                           "k.json:3:3: error: /keys/2: the same key as \"a\"",
                           "k.json:4:3: error: /keys/3: needs a \"name\" string",
                           "k.json:4:3: error: /keys/3: needs \"models\": a list of model names, "
                           "or \"*\" for every model",
                           NULL)
             == 0);
    return 0;
}

static int
test_budget_errors(void)
{
    char doc[1024];

    snprintf(doc, sizeof(doc),
             "{\"keys\": [{\"name\": \"a\", \"sha256\": \"%s\", \"models\": \"*\",\n"
             "  \"budget\": {\"tokens_per_minute\": 0, \"tokens_per_day\": 1.5}},\n"
             " {\"name\": \"b\", \"sha256\": \"%s\", \"models\": \"*\",\n"
             "  \"budget\": {\"tokens_per_hour\": 10}},\n"
             " {\"name\": \"c\", \"sha256\": \"%064d\", \"models\": \"*\", \"budget\": 5},\n"
             " {\"name\": \"d\", \"sha256\": \"%064d\", \"models\": \"*\",\n"
             "  \"budget\": {\"tokens_per_day\": \"lots\", \"tokens_per_minute\": 2e12}}]}",
             sha_k1, sha_k2, 1, 2);
    LG_CHECK(expect_errors(
                 doc,
                 "k.json:2:35: error: /keys/0/budget/tokens_per_minute: must be between 1 and "
                 "1e+12 (got 0)",
                 "k.json:2:56: error: /keys/0/budget/tokens_per_day: must be a whole number of "
                 "tokens",
                 "k.json:4:14: error: /keys/1/budget/tokens_per_hour: unknown key "
                 "\"tokens_per_hour\"",
                 "k.json:4:13: error: /keys/1/budget: give tokens_per_minute, tokens_per_day or "
                 "both",
                 "k.json:5:119: error: /keys/2/budget: expected an object {tokens_per_minute, "
                 "tokens_per_day}",
                 "k.json:7:61: error: /keys/3/budget/tokens_per_minute: must be between 1 and "
                 "1e+12 (got 2e+12)",
                 "k.json:7:32: error: /keys/3/budget/tokens_per_day: expected a number", NULL)
             == 0);
    return 0;
}

/*
 * A key with a budget counts in its account; a reload that keeps the key's
 * name keeps the account (and what it counted), whatever the new limits.
 */
static int
test_budget_kept_across_reload(void)
{
    char path[] = "/tmp/lg-keys-XXXXXX";
    int fd = mkstemp(path);
    char *doc = keys_doc(", \"budget\": {\"tokens_per_minute\": 1000}", "");
    char *doc2 = keys_doc(", \"budget\": {\"tokens_per_minute\": 500, \"tokens_per_day\": 9000}",
                          ", \"budget\": {\"tokens_per_day\": 10}");
    struct lg_config_errors errs = { 0 };
    const struct lg_budget_limits *lim = NULL;
    struct lg_budget *acct, *acct2;
    struct lg_budget_view v;
    struct lg_keys *k = NULL;
    struct lg_key_hold h1, h2;
    size_t accounts = lg_budget_count();
    uint64_t now = 1704067200000ull;
    FILE *f;

    LG_CHECK(fd >= 0);
    f = fdopen(fd, "w");
    fputs(doc, f);
    fclose(f);
    LG_CHECK(lg_keys_load(path, &k, &errs) == LG_OK);
    LG_CHECK(lg_budget_count() == accounts + 1); /* "b" has no budget: no account */
    LG_CHECK(lg_keys_authenticate(k, "Bearer k2", 9, &h1));
    LG_CHECK(lg_keys_budget(&h1, &lim) == NULL);
    lg_keys_release(&h1);
    LG_CHECK(lg_keys_authenticate(k, "Bearer k1", 9, &h1));
    acct = lg_keys_budget(&h1, &lim);
    LG_CHECK(acct != NULL && strcmp(lg_budget_name(acct), "key:a") == 0);
    LG_CHECK(lim->tokens[LG_BUDGET_MINUTE] == 1000 && lim->tokens[LG_BUDGET_DAY] == 0);
    LG_CHECK(lg_budget_reserve(acct, lim, 700, now, &v) == LG_OK);
    /* the reload halves the limit: the 700 reserved count against the new one */
    f = fopen(path, "w");
    fputs(doc2, f);
    fclose(f);
    LG_CHECK(lg_keys_reload(k) == LG_OK);
    LG_CHECK(lg_budget_count() == accounts + 2);
    LG_CHECK(lg_keys_authenticate(k, "Bearer k1", 9, &h2));
    acct2 = lg_keys_budget(&h2, &lim);
    LG_CHECK(acct2 == acct);
    LG_CHECK(lim->tokens[LG_BUDGET_MINUTE] == 500 && lim->tokens[LG_BUDGET_DAY] == 9000);
    LG_CHECK(lg_budget_reserve(acct2, lim, 1, now, &v) == LG_EBUSY);
    /* the request that began before the reload settles in the same account */
    lg_budget_settle(acct, 700, 100, now);
    LG_CHECK(lg_budget_reserve(acct2, lim, 400, now, &v) == LG_OK);
    LG_CHECK(v.remaining == 0 && v.used == 100);
    lg_keys_release(&h1);
    lg_keys_release(&h2);
    lg_keys_free(k);
    LG_CHECK(lg_budget_count() == accounts);
    unlink(path);
    free(doc);
    free(doc2);
    return 0;
}

static int
test_reload_keeps_counters(void)
{
    char path[] = "/tmp/lg-keys-XXXXXX";
    int fd = mkstemp(path);
    char *doc = keys_doc(", \"max_concurrency\": 1", "");
    struct lg_config_errors errs = { 0 };
    struct lg_keys *k = NULL;
    struct lg_key_hold h1, h2;
    uint32_t ra;
    FILE *f;

    LG_CHECK(fd >= 0);
    f = fdopen(fd, "w");
    fputs(doc, f);
    fclose(f);
    LG_CHECK(lg_keys_load(path, &k, &errs) == LG_OK);
    LG_CHECK(lg_keys_authenticate(k, "Bearer k1", 9, &h1));
    LG_CHECK(lg_keys_admit(&h1, 0, &ra) == LG_OK);
    /* same file again: "a" keeps its count of 1, so a second request waits */
    LG_CHECK(lg_keys_reload(k) == LG_OK);
    LG_CHECK(lg_keys_authenticate(k, "Bearer k1", 9, &h2));
    LG_CHECK(h2.key != h1.key);
    LG_CHECK(lg_keys_admit(&h2, 0, &ra) == LG_EBUSY);
    lg_keys_release(&h1); /* the old key gives the slot back to the shared counter */
    LG_CHECK(lg_keys_admit(&h2, 0, &ra) == LG_OK);
    /* a broken file keeps the keys in force */
    f = fopen(path, "w");
    fputs("{\"keys\": 1}", f);
    fclose(f);
    LG_CHECK(lg_keys_reload(k) == LG_EINVAL);
    LG_CHECK(lg_keys_count(k) == 2);
    lg_keys_free(k);
    lg_keys_release(&h2); /* a hold outlives its table */
    unlink(path);
    free(doc);
    return 0;
}

static void
write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    fputs(text, f);
    fclose(f);
}

/*
 * A reload may read another file: staged, nothing changes (and dropping it
 * changes nothing); committed, its keys and its path are in force, and a key
 * of the same name keeps its counters.
 */
static int
test_stage_another_file(void)
{
    char a[] = "/tmp/lg-keys-a-XXXXXX", b[] = "/tmp/lg-keys-b-XXXXXX";
    int fa = mkstemp(a), fb = mkstemp(b);
    char *doc_a = keys_doc(", \"max_concurrency\": 1", "");
    char *doc_b;
    struct lg_config_errors errs = { 0 };
    struct lg_keys *k = NULL;
    struct lg_key_hold h1, h2;
    uint32_t ra;

    LG_CHECK(fa >= 0 && fb >= 0);
    close(fa);
    close(fb);
    /* b: "a" with another model list, "b" gone */
    LG_CHECK(asprintf(&doc_b,
                      "{\"keys\": [{\"name\": \"a\", \"sha256\": \"%s\", \"models\": [\"z\"], "
                      "\"max_concurrency\": 1}]}",
                      sha_k1)
             > 0);
    write_file(a, doc_a);
    write_file(b, doc_b);
    LG_CHECK(lg_keys_load(a, &k, &errs) == LG_OK);
    LG_CHECK(lg_keys_authenticate(k, "Bearer k1", 9, &h1));
    LG_CHECK(lg_keys_admit(&h1, 0, &ra) == LG_OK);
    /* staged, then dropped: the keys of a stay */
    LG_CHECK(lg_keys_stage(k, b) == LG_OK);
    LG_CHECK(lg_keys_count(k) == 2);
    lg_keys_unstage(k);
    lg_keys_commit(k); /* nothing staged: nothing happens */
    LG_CHECK(lg_keys_count(k) == 2);
    /* a file that does not load stages nothing */
    LG_CHECK(lg_keys_stage(k, "/nonexistent/keys.json") == LG_EIO);
    lg_keys_commit(k);
    LG_CHECK(lg_keys_count(k) == 2);
    /* staged and committed: b is in force, "a" still holds its slot */
    LG_CHECK(lg_keys_stage(k, b) == LG_OK);
    lg_keys_commit(k);
    LG_CHECK(lg_keys_count(k) == 1);
    LG_CHECK(!lg_keys_authenticate(k, "Bearer k2", 9, &h2));
    LG_CHECK(lg_keys_authenticate(k, "Bearer k1", 9, &h2));
    LG_CHECK(lg_keys_model_allowed(&h2, "z") && !lg_keys_model_allowed(&h2, "m"));
    LG_CHECK(lg_keys_admit(&h2, 0, &ra) == LG_EBUSY);
    lg_keys_release(&h1);
    LG_CHECK(lg_keys_admit(&h2, 0, &ra) == LG_OK);
    lg_keys_release(&h2);
    /* its path is b's now: a reload re-reads b, not a */
    write_file(a, "{\"keys\": 1}");
    LG_CHECK(lg_keys_reload(k) == LG_OK);
    LG_CHECK(lg_keys_count(k) == 1);
    lg_keys_free(k);
    unlink(a);
    unlink(b);
    free(doc_a);
    free(doc_b);
    return 0;
}

static int
test_hash_hex(void)
{
    char hex[65];

    lg_keys_hash_hex("abc", 3, hex);
    LG_CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    return 0;
}

static int
setup(void)
{
    lg_keys_hash_hex("k1", 2, sha_k1);
    lg_keys_hash_hex("k2", 2, sha_k2);
    return 0;
}

LG_TEST_MAIN(setup, test_hash_hex, test_lookup_and_models, test_concurrency, test_rate, test_errors,
             test_budget_errors, test_budget_kept_across_reload, test_reload_keeps_counters,
             test_stage_another_file)
