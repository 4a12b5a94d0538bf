/*
 * test_config_security.c: the configuration fields of TLS to backends, API
 * keys and the admission queue: defaults, and each error with its
 * FILE:LINE:COL.
 */
#include <stdarg.h>

#include "base/config.h"
#include "lg_test.h"

static int
expect_errors(const char *text, ...)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;
    const char *want;
    size_t i = 0;
    int failed = 0;
    va_list ap;

    if (lg_config_load_buffer(text, strlen(text), "t.json", &c, &errs) == LG_OK) {
        fprintf(stderr, "expected errors, config loaded:\n%s\n", text);
        lg_config_unref(c);
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

static struct lg_config *
load_ok(const char *text)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;

    if (lg_config_load_buffer(text, strlen(text), "t.json", &c, &errs) != LG_OK) {
        lg_config_errors_print(&errs, stderr);
        lg_config_errors_free(&errs);
        return NULL;
    }
    return c;
}

static int
test_defaults(void)
{
    struct lg_config *c = load_ok("{\"listen\": \":0\", \"backends\": [{\"name\": \"b\", "
                                  "\"url\": \"https://127.0.0.1\", \"models\": [\"m\"]}]}");

    LG_CHECK(c != NULL);
    LG_CHECK(c->limits.queue_length == 1024 && c->timeouts.queue_ms == 30000);
    LG_CHECK(c->auth.keys_file == NULL);
    LG_CHECK(c->backends[0].tls && c->backends[0].tls_ca_file == NULL);
    LG_CHECK(c->backends[0].tls_server_name == NULL && !c->backends[0].tls_insecure);
    lg_config_unref(c);
    return 0;
}

static int
test_backend_tls(void)
{
    /* the source file stands in for PEM files: they only have to be readable */
    const char *src = __FILE__;
    char doc[2048];
    struct lg_config *c;

    snprintf(doc, sizeof(doc),
             "{\"listen\": \":0\", \"auth\": \"%s\", \"backends\": [{\"name\": \"b\", "
             "\"url\": \"https://127.0.0.1:8443\", \"models\": [\"m\"], \"tls\": {\"ca_file\": "
             "\"%s\", \"server_name\": \"vllm.internal\", \"cert\": \"%s\", \"key\": \"%s\"}}]}",
             src, src, src, src);
    c = load_ok(doc);
    LG_CHECK(c != NULL);
    LG_CHECK_STR(c->auth.keys_file, src);
    LG_CHECK_STR(c->backends[0].tls_ca_file, src);
    LG_CHECK_STR(c->backends[0].tls_server_name, "vllm.internal");
    LG_CHECK_STR(c->backends[0].tls_cert, src);
    LG_CHECK_STR(c->backends[0].tls_key, src);
    lg_config_unref(c);
    return 0;
}

static int
test_errors(void)
{
    LG_CHECK(
        expect_errors("{\"listen\": \":0\", \"backends\": [\n"
                      " {\"name\": \"a\", \"url\": \"http://127.0.0.1\", \"models\": [\"m\"],\n"
                      "  \"tls\": {\"insecure_skip_verify\": true}},\n"
                      " {\"name\": \"b\", \"url\": \"https://127.0.0.1\", \"models\": [\"m\"],\n"
                      "  \"tls\": {\"server_name\": \"a b\", \"cahfile\": 1}}]}",
                      "t.json:3:10: error: /backends/0/tls: TLS settings need an https:// URL",
                      "t.json:5:26: error: /backends/1/tls/server_name: not a host name "
                      "(got \"a b\")",
                      "t.json:5:33: error: /backends/1/tls/cahfile: unknown key \"cahfile\"; "
                      "did you mean \"ca_file\"?",
                      NULL)
        == 0);
    LG_CHECK(
        expect_errors("{\"listen\": \":0\", \"backends\": [\n"
                      " {\"name\": \"a\", \"url\": \"https://127.0.0.1\", \"models\": [\"m\"],\n"
                      "  \"tls\": {\"cert\": \"" __FILE__ "\"}}]}",
                      "t.json:3:19: error: /backends/0/tls/cert: a client certificate needs "
                      "both cert and key",
                      NULL)
        == 0);
    LG_CHECK(expect_errors("{\"listen\": \":0\",\n \"auth\": {\"keys_file\": \"/nonexistent/k\"},\n"
                           " \"limits\": {\"queue_length\": -1}, \"timeouts\": {\"queue\": 0},\n"
                           " \"backends\": [{\"name\": \"a\", \"url\": \"http://127.0.0.1\", "
                           "\"models\": [\"m\"]}]}",
                           "t.json:2:24: error: /auth/keys_file: cannot read \"/nonexistent/k\": "
                           "No such file or directory",
                           "t.json:3:29: error: /limits/queue_length: must be between 0 and "
                           "1e+06 (got -1)",
                           "t.json:3:56: error: /timeouts/queue: must be between 1ms and 1h "
                           "(got 0)",
                           NULL)
             == 0);
    return 0;
}

static int
test_insecure_with_ca(void)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;
    char doc[1024];

    snprintf(doc, sizeof(doc),
             "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", \"url\": "
             "\"https://127.0.0.1\", \"models\": [\"m\"], \"tls\": {\"ca_file\": \"%s\", "
             "\"insecure_skip_verify\": true}}]}",
             __FILE__);
    LG_CHECK(lg_config_load_buffer(doc, strlen(doc), "t.json", &c, &errs) != LG_OK);
    LG_CHECK(errs.n == 1);
    LG_CHECK(strstr(errs.msgs[0], ": error: /backends/0/tls/insecure_skip_verify: contradicts "
                                  "ca_file: choose one")
             != NULL);
    lg_config_errors_free(&errs);
    return 0;
}

LG_TEST_MAIN(test_defaults, test_backend_tls, test_errors, test_insecure_with_ca)
