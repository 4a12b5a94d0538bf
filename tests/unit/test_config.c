/*
 * test_config.c: config validation. One test per error class, each with the
 * exact message and FILE:LINE:COL it must produce; then defaults, shorthands,
 * the shipped example files (found through $LG_SRC) and the refcount.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <unistd.h>

#include "base/config.h"
#include "base/fail.h"
#include "lg_test.h"

/* Loads text as "t.json"; on success returns the config, else NULL with errs set. */
static struct lg_config *
load(const char *text, struct lg_config_errors *errs)
{
    struct lg_config *c = NULL;
    int rc;

    memset(errs, 0, sizeof(*errs));
    rc = lg_config_load_buffer(text, strlen(text), "t.json", &c, errs);
    if ((rc == LG_OK) != (c != NULL) || (rc != LG_OK && rc != LG_EINVAL)) {
        fprintf(stderr, "load: rc=%d conf=%p\n", rc, (void *)c);
        abort();
    }
    return c;
}

/* Compares the n messages got with the NULL-terminated list ap; 0 when the same. */
static int
expect_msgs(const char *what, char *const *got, size_t n, va_list ap)
{
    const char *want;
    size_t i = 0;
    int failed = 0;

    while ((want = va_arg(ap, const char *)) != NULL) {
        if (i >= n || strcmp(got[i], want) != 0) {
            fprintf(stderr, "%s %zu:\n  got:      %s\n  expected: %s\n", what, i,
                    i < n ? got[i] : "(none)", want);
            failed = 1;
        }
        i++;
    }
    if (i != n) {
        fprintf(stderr, "got %zu %ss, expected %zu:\n", n, what, i);
        for (size_t k = 0; k < n; k++) {
            fprintf(stderr, "  %s\n", got[k]);
        }
        failed = 1;
    }
    return failed;
}

/* Loads text, which must fail with exactly the messages given (NULL-terminated). */
static int
expect_errors(const char *text, ...)
{
    struct lg_config_errors errs;
    struct lg_config *c = load(text, &errs);
    int failed;
    va_list ap;

    if (c != NULL) {
        fprintf(stderr, "expected errors, config loaded:\n%s\n", text);
        lg_config_unref(c);
        return 1;
    }
    va_start(ap, text);
    failed = expect_msgs("error", errs.msgs, errs.n, ap);
    va_end(ap);
    lg_config_errors_free(&errs);
    return failed;
}

/* A valid document with `extra` spliced in at the top level (line 2). */
static char *
with_top(const char *extra)
{
    char *s;

    if (asprintf(&s,
                 "{\"listen\": \":0\",\n%s\n"
                 "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:9001\", "
                 "\"models\": [\"m\"]}]}",
                 extra)
        < 0) {
        abort();
    }
    return s;
}

static int
expect_top_error(const char *extra, const char *want)
{
    char *text = with_top(extra);
    int rc = expect_errors(text, want, NULL);

    free(text);
    return rc;
}

static uint16_t
port_of(const struct sockaddr_storage *ss)
{
    return ntohs(((const struct sockaddr_in *)ss)->sin_port); /* same offset for v6 */
}

static const char minimal[] =
    "{\"listen\": \"127.0.0.1:8080\", \"routing\": {\"policy\": \"round_robin\"}, \"backends\": "
    "[{\"name\": \"r1\", \"url\": \"http://127.0.0.1:9001\", \"models\": [\"m\"]}, {\"name\": "
    "\"r2\", \"url\": \"http://127.0.0.1:9002\", \"models\": [\"m\"]}]}";

static int
test_minimal(void)
{
    struct lg_config_errors errs;
    struct lg_config *c = load(minimal, &errs);
    const struct sockaddr_in *sin;
    const struct lg_backend_conf *b;

    LG_CHECK(c != NULL && errs.n == 0);
    LG_CHECK_STR(c->path, "t.json");
    LG_CHECK(c->nlisten == 1);
    LG_CHECK_STR(c->listen[0].address, "127.0.0.1:8080");
    sin = (const struct sockaddr_in *)&c->listen[0].addr;
    LG_CHECK(sin->sin_family == AF_INET && c->listen[0].addrlen == sizeof(*sin));
    LG_CHECK(ntohs(sin->sin_port) == 8080 && ntohl(sin->sin_addr.s_addr) == 0x7f000001);
    LG_CHECK(c->listen[0].tls_cert == NULL && c->listen[0].tls_key == NULL);
    LG_CHECK_STR(c->routing.policy, "round_robin");
    LG_CHECK(c->nbackends == 2);
    b = lg_config_backend(c, "r2");
    LG_CHECK(b == &c->backends[1]);
    LG_CHECK(lg_config_backend(c, "r3") == NULL);
    LG_CHECK_STR(b->name, "r2");
    LG_CHECK_STR(b->url, "http://127.0.0.1:9002");
    LG_CHECK(!b->tls && b->port == 9002);
    LG_CHECK_STR(b->host, "127.0.0.1");
    LG_CHECK_STR(b->host_header, "127.0.0.1:9002");
    LG_CHECK_STR(b->path_prefix, "");
    LG_CHECK(b->nmodels == 1 && b->models[1] == NULL);
    LG_CHECK_STR(b->models[0], "m");
    LG_CHECK(b->addrlen == sizeof(struct sockaddr_in) && port_of(&b->addr) == 9002);
    LG_CHECK(b->enabled);
    lg_config_unref(c);
    return 0;
}

static int
test_defaults(void)
{
    struct lg_config_errors errs;
    struct lg_config *c = load(minimal, &errs);
    const struct lg_backend_conf *b;

    LG_CHECK(c != NULL);
    LG_CHECK(c->workers == 0); /* auto: the CPUs the process may use, chosen at start */
    LG_CHECK(c->log_level == LG_LOG_INFO);
    LG_CHECK_STR(c->access_log.path, "-"); /* one line per request on stdout */
    LG_CHECK(c->access_log.flush_ms == 1000 && c->access_log.buffer_bytes == 65536);
    LG_CHECK(c->timeouts.client_header_ms == 10000);
    LG_CHECK(c->timeouts.client_body_ms == 30000);
    LG_CHECK(c->timeouts.client_body_grace_ms == 10000);
    LG_CHECK(c->timeouts.client_body_min_rate == 1024);
    LG_CHECK(c->timeouts.client_idle_ms == 75000);
    LG_CHECK(c->timeouts.upstream_connect_ms == 3000);
    LG_CHECK(c->timeouts.first_byte_ms == 300000);
    LG_CHECK(c->timeouts.stream_idle_ms == 120000);
    LG_CHECK(c->timeouts.total_ms == 0);
    LG_CHECK(c->timeouts.drain_ms == 30000);
    LG_CHECK(c->timeouts.upstream_idle_ms == 60000);
    LG_CHECK(c->timeouts.upstream_purge_ms == 1000);
    LG_CHECK(c->timeouts.client_stall_ms == 60000);
    LG_CHECK(c->limits.max_header_bytes == 16384);
    LG_CHECK(c->limits.max_headers == 100);
    LG_CHECK(c->limits.max_body_bytes == 16u << 20);
    LG_CHECK(c->limits.max_connections == 20000);
    LG_CHECK(c->limits.max_connections_per_ip == 0);
    LG_CHECK(c->limits.stream_buffer_bytes == 65536);
    LG_CHECK(c->limits.upstream_keepalive == 64);
    LG_CHECK(c->routing.plugins == NULL && c->routing.nplugins == 0);
    LG_CHECK(c->routing.policy_options == NULL);
    LG_CHECK(c->routing.retry.attempts == 2);
    LG_CHECK(c->routing.retry.budget_ratio == 0.2);
    LG_CHECK(c->routing.retry.budget_min == 10);
    LG_CHECK(!c->routing.hedge.enabled && c->routing.hedge.factor == 3);
    LG_CHECK(c->routing.hedge.min_ms == 250 && c->routing.hedge.max_ms == 10000);
    LG_CHECK(c->routing.hedge.budget_ratio == 0.05 && c->routing.hedge.budget_min == 1);
    LG_CHECK(c->routing.hedge.hold_bytes == 16384);
    LG_CHECK(c->routing.session_header == NULL);
    LG_CHECK(c->routing.prefix_bytes == 2048);
    LG_CHECK(c->health.interval_ms == 5000 && c->health.timeout_ms == 2000);
    LG_CHECK(c->health.rise == 2 && c->health.fall == 3);
    LG_CHECK(c->health.scrape_interval_ms == 250);
    LG_CHECK(c->health.eject_consecutive == 5);
    LG_CHECK(c->health.eject_base_ms == 5000 && c->health.eject_max_ms == 60000);
    LG_CHECK(c->health.slow_start_ms == 10000);
    LG_CHECK(c->admin.listen == NULL && c->admin.token == NULL && c->admin.addrlen == 0);
    b = &c->backends[0];
    LG_CHECK(b->weight == 1 && b->max_inflight == 0 && b->flavor == LG_ENGINE_AUTO);
    LG_CHECK(b->prefill_chunk == 0);
    LG_CHECK_STR(b->metrics_path, "/metrics");
    LG_CHECK_STR(b->health_path, "/health");
    LG_CHECK(b->api_key == NULL);
    lg_config_unref(c);
    return 0;
}

static int
test_every_field_set(void)
{
    static const char text[] =
        "{\"listen\": [\":0\", \"[::1]:0\"], \"workers\": 3, \"log_level\": \"DEBUG\",\n"
        " \"access_log\": {\"path\": \"/tmp/a.log\", \"flush\": 0, \"buffer\": \"1MB\"},\n"
        " \"timeouts\": {\"client_header\": \"1.5s\", \"client_body\": \"2s\", \"client_idle\": "
        "\"3s\", \"upstream_connect\": \"250ms\", \"first_byte\": \"5m\", \"stream_idle\": \"1m\", "
        "\"total\": \"1h\", \"drain\": 0, \"upstream_idle\": \"9s\", \"client_stall\": \"8s\"},\n"
        " \"limits\": {\"max_header_bytes\": 4096, \"max_headers\": 50, \"max_body_bytes\": "
        "\"1.5KiB\", \"max_connections\": 10, \"max_connections_per_ip\": 2, "
        "\"stream_buffer_bytes\": \"8KiB\", \"upstream_keepalive\": 0},\n"
        " \"routing\": {\"policy\": \"least_ttft\", \"plugins\": [\"/x/a.so\", \"b.so\"], "
        "\"options\": {\"alpha\": 0.5}, \"retry\": {\"attempts\": 1, \"budget_ratio\": 1, "
        "\"budget_min\": 0}, \"session_header\": \"X-Session-Id\", \"prefix_bytes\": \"4KiB\"},\n"
        " \"health\": {\"interval\": \"1s\", \"timeout\": \"500ms\", \"rise\": 1, \"fall\": 1, "
        "\"scrape_interval\": 0, \"eject_consecutive\": 0, \"eject_base\": \"1s\", \"eject_max\": "
        "\"1s\", \"slow_start\": 0},\n"
        " \"admin\": {\"listen\": \"127.0.0.1:0\", \"token\": \"s3cret\"},\n"
        " \"backends\": [{\"name\": \"a\", \"url\": \"HTTPS://[::1]/v1base/\", \"models\": "
        "[\"m\", \"n\"], \"weight\": 1000, \"max_inflight\": 7, \"flavor\": \"llamacpp\", "
        "\"metrics_path\": \"/m\", \"health_path\": \"/h?x=1\", \"api_key\": \"k\", "
        "\"enabled\": true, \"prefill_chunk\": 512}]}";
    struct lg_config_errors errs;
    struct lg_config *c = load(text, &errs);
    const struct lg_backend_conf *b;

    lg_config_errors_print(&errs, stderr);
    LG_CHECK(c != NULL);
    LG_CHECK(c->nlisten == 2 && c->listen[1].addr.ss_family == AF_INET6);
    LG_CHECK(c->workers == 3 && c->log_level == LG_LOG_DEBUG);
    LG_CHECK_STR(c->access_log.path, "/tmp/a.log");
    LG_CHECK(c->access_log.flush_ms == 0 && c->access_log.buffer_bytes == 1000000);
    LG_CHECK(c->timeouts.client_header_ms == 1500 && c->timeouts.upstream_connect_ms == 250);
    LG_CHECK(c->timeouts.first_byte_ms == 300000 && c->timeouts.total_ms == 3600000);
    LG_CHECK(c->timeouts.drain_ms == 0 && c->timeouts.client_stall_ms == 8000);
    LG_CHECK(c->limits.max_header_bytes == 4096 && c->limits.max_body_bytes == 1536);
    LG_CHECK(c->limits.stream_buffer_bytes == 8192 && c->limits.upstream_keepalive == 0);
    LG_CHECK(c->limits.max_connections == 10 && c->limits.max_connections_per_ip == 2);
    LG_CHECK_STR(c->routing.policy, "least_ttft");
    LG_CHECK(c->routing.nplugins == 2 && c->routing.plugins[2] == NULL);
    LG_CHECK_STR(c->routing.plugins[1], "b.so");
    LG_CHECK(json_real_value(json_object_get(c->routing.policy_options, "alpha")) == 0.5);
    LG_CHECK(c->routing.retry.attempts == 1 && c->routing.retry.budget_ratio == 1.0);
    LG_CHECK_STR(c->routing.session_header, "X-Session-Id");
    LG_CHECK(c->routing.prefix_bytes == 4096);
    LG_CHECK(c->health.timeout_ms == 500 && c->health.scrape_interval_ms == 0);
    LG_CHECK(c->health.eject_base_ms == 1000 && c->health.slow_start_ms == 0);
    LG_CHECK_STR(c->admin.listen, "127.0.0.1:0");
    LG_CHECK_STR(c->admin.token, "s3cret");
    LG_CHECK(c->admin.addrlen == sizeof(struct sockaddr_in));
    b = &c->backends[0];
    LG_CHECK(b->tls && b->port == 443 && b->addr.ss_family == AF_INET6);
    LG_CHECK_STR(b->host, "::1");
    LG_CHECK_STR(b->host_header, "[::1]");
    LG_CHECK_STR(b->path_prefix, "/v1base");
    LG_CHECK(b->weight == 1000 && b->max_inflight == 7 && b->flavor == LG_ENGINE_LLAMACPP);
    LG_CHECK(b->prefill_chunk == 512);
    LG_CHECK_STR(b->health_path, "/h?x=1");
    LG_CHECK_STR(b->api_key, "k");
    lg_config_unref(c);
    return 0;
}

static int
test_syntax_error(void)
{
    /* jansson's own line:column, as is */
    LG_CHECK(expect_errors("{\n  \"listen\": \":0\",\n}",
                           "t.json:3:1: error: /: string or '}' expected near '}'", NULL)
             == 0);
    LG_CHECK(expect_errors("", "t.json:1:1: error: /: '[' or '{' expected near end of file", NULL)
             == 0);
    LG_CHECK(expect_errors("{\"listen\": \":0\", \"listen\": \":1\"}",
                           "t.json:1:25: error: /: duplicate object key near '\"listen\"'", NULL)
             == 0);
    return 0;
}

static int
test_nul_byte(void)
{
    /* jansson would skip it silently; positions after it would drift */
    static const char text[] = "{\"listen\":\n \":0\"\0}";
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;

    LG_CHECK(lg_config_load_buffer(text, sizeof(text) - 1, "t.json", &c, &errs) == LG_EINVAL);
    LG_CHECK(c == NULL && errs.n == 1);
    LG_CHECK_STR(errs.msgs[0], "t.json:2:6: error: /: NUL byte in the file");
    lg_config_errors_free(&errs);
    return 0;
}

static int
test_not_an_object(void)
{
    LG_CHECK(expect_errors("  [1]", "t.json:1:3: error: /: expected an object, got an array", NULL)
             == 0);
    return 0;
}

static int
test_unknown_key(void)
{
    /* close typo, prefix either way, and none */
    LG_CHECK(expect_top_error("\"timeouts\": {\"client_heder\": \"1s\"},",
                              "t.json:2:14: error: /timeouts/client_heder: unknown key "
                              "\"client_heder\"; did you mean \"client_header\"?")
             == 0);
    LG_CHECK(expect_top_error("\"wokres\": 1,", "t.json:2:1: error: /wokres: unknown key "
                                                "\"wokres\"; did you mean \"workers\"?")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"upstream_connect_timeout\": \"1s\"},",
                              "t.json:2:14: error: /timeouts/upstream_connect_timeout: unknown "
                              "key \"upstream_connect_timeout\"; did you mean "
                              "\"upstream_connect\"?")
             == 0);
    LG_CHECK(expect_top_error("\"limits\": {\"max_conn\": 1},",
                              "t.json:2:12: error: /limits/max_conn: unknown key \"max_conn\"; "
                              "did you mean \"max_connections\"?")
             == 0);
    LG_CHECK(expect_top_error("\"zzz\": 1,", "t.json:2:1: error: /zzz: unknown key \"zzz\"") == 0);
    /* keys are echoed escaped, and '/' is ~1 in the pointer */
    LG_CHECK(expect_top_error("\"a/b\\n\\\"\": 1,",
                              "t.json:2:1: error: /a~1b\\n\": unknown key \"a/b\\n\\\"\"")
             == 0);
    return 0;
}

static int
test_wrong_type(void)
{
    LG_CHECK(expect_top_error("\"workers\": \"4\",", "t.json:2:12: error: /workers: expected an "
                                                 "integer or \"auto\", got a string")
             == 0);
    /* only workers takes a word for 0 */
    LG_CHECK(expect_top_error("\"limits\": {\"max_connections\": \"auto\"},",
                              "t.json:2:31: error: /limits/max_connections: expected an integer, "
                              "got a string")
             == 0);
    LG_CHECK(expect_top_error("\"workers\": 1.5,", "t.json:2:12: error: /workers: expected an "
                                                   "integer or \"auto\", got a real number")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": [],",
                              "t.json:2:12: error: /routing: expected an object, got an array")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"policy\": 7},",
                              "t.json:2:23: error: /routing/policy: expected a string, got an "
                              "integer")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"retry\": {\"budget_ratio\": \"0.5\"}},",
                              "t.json:2:39: error: /routing/retry/budget_ratio: expected a "
                              "number, got a string")
             == 0);
    LG_CHECK(expect_top_error("\"access_log\": 1,", "t.json:2:15: error: /access_log: "
                                                    "expected a string, an object or false, got "
                                                    "an integer")
             == 0);
    LG_CHECK(expect_top_error("\"admin\": false,", "t.json:2:10: error: /admin: expected a "
                                                   "string or an object, got a boolean")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"options\": [1]},",
                              "t.json:2:24: error: /routing/options: expected an object, got an "
                              "array")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"plugins\": \"a.so\"},",
                              "t.json:2:24: error: /routing/plugins: expected an array of "
                              "strings, got a string")
             == 0);
    LG_CHECK(expect_errors(
                 "{\"listen\": 8080, \"backends\": [{\"name\": \"r\", \"url\": "
                 "\"http://127.0.0.1:1\", \"models\": [\"m\"], \"enabled\": \"yes\"}]}",
                 "t.json:1:12: error: /listen: expected a string, an object or an array, got an "
                 "integer",
                 "t.json:1:102: error: /backends/0/enabled: expected a boolean, got a "
                 "string",
                 NULL)
             == 0);
    return 0;
}

static int
test_out_of_range(void)
{
    LG_CHECK(expect_top_error("\"workers\": 257,",
                              "t.json:2:12: error: /workers: must be between 0 and 256 (got 257)")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"retry\": {\"attempts\": 0}},",
                              "t.json:2:35: error: /routing/retry/attempts: must be between 1 "
                              "and 10 (got 0)")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"retry\": {\"budget_ratio\": -0.5}},",
                              "t.json:2:39: error: /routing/retry/budget_ratio: must be between 0 "
                              "and 1 (got -0.5)")
             == 0);
    LG_CHECK(expect_top_error("\"limits\": {\"max_headers\": -1},",
                              "t.json:2:27: error: /limits/max_headers: must be between 1 and "
                              "10000 (got -1)")
             == 0);
    LG_CHECK(expect_top_error("\"limits\": {\"max_header_bytes\": \"2MiB\"},",
                              "t.json:2:32: error: /limits/max_header_bytes: must be between 256 "
                              "and 1MiB (got \"2MiB\")")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"upstream_connect\": \"10m\"},",
                              "t.json:2:34: error: /timeouts/upstream_connect: must be between "
                              "1ms and 5m (got \"10m\")")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"client_idle\": 0},",
                              "t.json:2:29: error: /timeouts/client_idle: must be between 1ms and "
                              "1h (got 0)")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"client_body_grace\": 0},",
                              "t.json:2:35: error: /timeouts/client_body_grace: must be between "
                              "1ms and 1h (got 0)")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"client_body_min_rate\": \"2GiB\"},",
                              "t.json:2:38: error: /timeouts/client_body_min_rate: must be between "
                              "0 and 1GiB (got \"2GiB\")")
             == 0);
    return 0;
}

static int
test_bad_duration(void)
{
    LG_CHECK(expect_top_error("\"timeouts\": {\"first_byte\": 30},",
                              "t.json:2:28: error: /timeouts/first_byte: durations need a unit, "
                              "e.g. \"30s\" (got 30)")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"first_byte\": \"30 s\"},",
                              "t.json:2:28: error: /timeouts/first_byte: invalid duration \"30 "
                              "s\"; use a number and a unit: ms, s, m or h (e.g. \"30s\", "
                              "\"1.5s\", \"250ms\")")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"first_byte\": \"0.5ms\"},",
                              "t.json:2:28: error: /timeouts/first_byte: \"0.5ms\" is not a whole "
                              "number of milliseconds")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"first_byte\": \"-1s\"},",
                              "t.json:2:28: error: /timeouts/first_byte: invalid duration \"-1s\"; "
                              "use a number and a unit: ms, s, m or h (e.g. \"30s\", \"1.5s\", "
                              "\"250ms\")")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"first_byte\": [1]},",
                              "t.json:2:28: error: /timeouts/first_byte: expected a duration such "
                              "as \"30s\", got an array")
             == 0);
    LG_CHECK(expect_top_error("\"timeouts\": {\"total\": \"99999999999999999999h\"},",
                              "t.json:2:23: error: /timeouts/total: invalid duration "
                              "\"99999999999999999999h\"; use a number and a unit: ms, s, m or h "
                              "(e.g. \"30s\", \"1.5s\", \"250ms\")")
             == 0);
    return 0;
}

static int
test_bad_size(void)
{
    LG_CHECK(expect_top_error("\"limits\": {\"max_body_bytes\": \"16KB\"},",
                              "t.json:2:30: error: /limits/max_body_bytes: invalid size \"16KB\"; "
                              "use bytes or a number and a unit: B, KiB, MiB, GiB (1024-based) or "
                              "kB, MB, GB (1000-based), e.g. \"16KiB\"")
             == 0);
    LG_CHECK(expect_top_error("\"limits\": {\"max_body_bytes\": \"0.3B\"},",
                              "t.json:2:30: error: /limits/max_body_bytes: \"0.3B\" is not a whole "
                              "number of bytes")
             == 0);
    LG_CHECK(expect_top_error("\"limits\": {\"max_body_bytes\": 1.5},",
                              "t.json:2:30: error: /limits/max_body_bytes: expected a size (bytes, "
                              "or a string such as \"16KiB\"), got a real number")
             == 0);
    LG_CHECK(expect_top_error("\"limits\": {\"max_body_bytes\": 0},",
                              "t.json:2:30: error: /limits/max_body_bytes: must be between 1 and "
                              "1GiB (got 0)")
             == 0);
    return 0;
}

static int
test_bad_url(void)
{
    static const struct {
        const char *url, *what;
    } cases[] = {
        { "tcp://127.0.0.1:1", "scheme must be http or https (got \"tcp\")" },
        { "127.0.0.1:1", "expected a URL like \"http://host:port\" (got \"127.0.0.1:1\")" },
        { "http://:80", "missing host in \"http://:80\"" },
        { "http://a b:80", "invalid host \"a b\" in \"http://a b:80\"" },
        { "http://127.0.0.1:0", "port must be between 1 and 65535 (got \"0\")" },
        { "http://127.0.0.1:65536", "port must be between 1 and 65535 (got \"65536\")" },
        { "http://127.0.0.1:", "port must be between 1 and 65535 (got \"\")" },
        { "http://127.0.0.1/v1?x=1", "a backend URL takes no query or fragment (got "
                                     "\"http://127.0.0.1/v1?x=1\")" },
        { "http://u:p@127.0.0.1", "credentials in the URL are not supported; use \"api_key\"" },
        { "http://[::1:80", "unterminated IPv6 address in \"http://[::1:80\"" },
        { "http://[zz]:80", "invalid IPv6 address in \"http://[zz]:80\"" },
        { "http://10.0.0:80", "invalid IPv4 address \"10.0.0\"" },
        { "http://1:80", "invalid IPv4 address \"1\"" },
        { "http://nosuch.invalid:80", "cannot resolve \"nosuch.invalid\": Name or service not "
                                      "known" },
    };
    char text[512], want[512];

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        snprintf(text, sizeof(text),
                 "{\"listen\": \":0\", \"backends\": [\n"
                 "  {\"name\": \"r1\", \"url\": \"%s\", \"models\": [\"m\"]}]}",
                 cases[i].url);
        snprintf(want, sizeof(want), "t.json:2:25: error: /backends/0/url: %s", cases[i].what);
        if (strstr(cases[i].url, "nosuch") != NULL) {
            /* resolver wording varies: check the prefix only */
            struct lg_config_errors errs;

            LG_CHECK(load(text, &errs) == NULL && errs.n == 1);
            LG_CHECK(strncmp(errs.msgs[0], want,
                             strlen("t.json:2:25: error: /backends/0/url: "
                                    "cannot resolve \"nosuch.invalid\": "))
                     == 0);
            lg_config_errors_free(&errs);
            continue;
        }
        LG_CHECK(expect_errors(text, want, NULL) == 0);
    }
    return 0;
}

static int
test_url_parts(void)
{
    static const char text[] =
        "{\"listen\": \":0\", \"backends\": ["
        "{\"name\": \"a\", \"url\": \"http://localhost:8000/v1base/\", \"models\": [\"m\"]},"
        "{\"name\": \"b\", \"url\": \"https://127.0.0.1:8443\", \"models\": [\"m\"]},"
        "{\"name\": \"c\", \"url\": \"http://[::1]:8000\", \"models\": [\"m\"]},"
        "{\"name\": \"d\", \"url\": \"http://127.0.0.1/\", \"models\": [\"m\"]}]}";
    struct lg_config_errors errs;
    struct lg_config *c = load(text, &errs);

    lg_config_errors_print(&errs, stderr);
    LG_CHECK(c != NULL);
    LG_CHECK_STR(c->backends[0].host, "localhost");
    LG_CHECK_STR(c->backends[0].host_header, "localhost:8000");
    LG_CHECK_STR(c->backends[0].path_prefix, "/v1base");
    LG_CHECK(c->backends[0].addrlen > 0 && port_of(&c->backends[0].addr) == 8000);
    LG_CHECK(c->backends[1].tls && c->backends[1].port == 8443);
    LG_CHECK_STR(c->backends[1].host_header, "127.0.0.1:8443");
    LG_CHECK_STR(c->backends[2].host, "::1");
    LG_CHECK_STR(c->backends[2].host_header, "[::1]:8000");
    LG_CHECK(c->backends[2].addr.ss_family == AF_INET6);
    LG_CHECK(!c->backends[3].tls && c->backends[3].port == 80);
    LG_CHECK_STR(c->backends[3].host_header, "127.0.0.1");
    LG_CHECK_STR(c->backends[3].path_prefix, "");
    lg_config_unref(c);
    return 0;
}

static int
test_duplicate_backend_name(void)
{
    LG_CHECK(expect_errors(
                 "{\"listen\": \":0\", \"backends\": [\n"
                 "  {\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", \"models\": [\"m\"]},\n"
                 "  {\"name\": \"r2\", \"url\": \"http://127.0.0.1:2\", \"models\": [\"m\"]},\n"
                 "  {\"name\": \"r1\", \"url\": \"http://127.0.0.1:3\", \"models\": [\"m\"]}]}",
                 "t.json:4:12: error: /backends/2/name: duplicate backend name \"r1\" "
                 "(first at /backends/0)",
                 NULL)
             == 0);
    LG_CHECK(expect_errors("{\"listen\": \":0\", \"backends\": [\n"
                           "  {\"name\": \"r 1\", \"url\": \"http://127.0.0.1:1\", \"models\": "
                           "[\"m\"]}]}",
                           "t.json:2:12: error: /backends/0/name: names are 1 to 64 letters, "
                           "digits, \".\", \"_\", \":\" or \"-\" (got \"r 1\")",
                           NULL)
             == 0);
    return 0;
}

static int
test_missing_required(void)
{
    /* a missing key points at the object that should hold it */
    LG_CHECK(expect_errors("{\"listen\": \":0\", \"backends\": [\n"
                           "  {\"name\": \"r1\", \"models\": [\"m\"]}]}",
                           "t.json:2:3: error: /backends/0: missing required key \"url\"", NULL)
             == 0);
    LG_CHECK(expect_errors("\n {\"workers\": 1}",
                           "t.json:2:2: error: /: missing required key \"listen\"",
                           "t.json:2:2: error: /: missing required key \"backends\"", NULL)
             == 0);
    LG_CHECK(expect_top_error("\"admin\": {\"token\": \"t\"},",
                              "t.json:2:10: error: /admin: missing required key \"listen\"")
             == 0);
    /* null for a required key is a type error, not "missing" */
    LG_CHECK(expect_errors(
                 "{\"listen\": null, \"backends\": [{\"name\": \"r1\", \"url\": "
                 "\"http://127.0.0.1:1\", \"models\": [\"m\"]}]}",
                 "t.json:1:12: error: /listen: expected a string, an object or an array, got null",
                 NULL)
             == 0);
    return 0;
}

static int
test_models(void)
{
    LG_CHECK(
        expect_errors("{\"listen\": \":0\", \"backends\": [\n"
                      "  {\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", \"models\": []}]}",
                      "t.json:2:57: error: /backends/0/models: must not be empty", NULL)
        == 0);
    LG_CHECK(expect_errors("{\"listen\": \":0\", \"backends\": [\n"
                           "  {\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\",\n"
                           "   \"models\": [\"m\", \"\", 3, \"m\"]}]}",
                           "t.json:3:20: error: /backends/0/models/1: must not be empty",
                           "t.json:3:24: error: /backends/0/models/2: expected a string, got an "
                           "integer",
                           "t.json:3:27: error: /backends/0/models/3: duplicate entry \"m\" "
                           "(first at index 0)",
                           NULL)
             == 0);
    return 0;
}

static int
test_bad_listen(void)
{
    LG_CHECK(
        expect_errors("{\"listen\": [\"127.0.0.1\", \"::1:80\", \"[::1]:99999\", \"a b:1\",\n"
                      "  {\"address\": \"[::1:80\"}, {\"address\": \"127.0.0.1:1\", \"tls\": 1}],\n"
                      " \"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
                      "\"models\": [\"m\"]}]}",
                      "t.json:1:13: error: /listen/0: expected \"host:port\", \"[v6]:port\" "
                      "or \":port\" (got \"127.0.0.1\")",
                      "t.json:1:26: error: /listen/1: IPv6 addresses need brackets, e.g. "
                      "\"[::1]:8080\" (got \"::1:80\")",
                      "t.json:1:36: error: /listen/2: port must be between 0 and 65535 (got "
                      "\"99999\")",
                      "t.json:1:51: error: /listen/3: expected \"host:port\", \"[v6]:port\" "
                      "or \":port\" (got \"a b:1\")",
                      "t.json:2:15: error: /listen/4/address: expected \"host:port\", "
                      "\"[v6]:port\" or \":port\" (got \"[::1:80\")",
                      "t.json:2:61: error: /listen/5/tls: expected an object, got an "
                      "integer",
                      NULL)
        == 0);
    LG_CHECK(expect_errors("{\"listen\": [], \"backends\": [{\"name\": \"r1\", \"url\": "
                           "\"http://127.0.0.1:1\", \"models\": [\"m\"]}]}",
                           "t.json:1:12: error: /listen: must not be empty", NULL)
             == 0);
    LG_CHECK(expect_errors("{\"listen\": [\"127.0.0.1:80\", \"127.0.0.1:80\"], \"admin\": "
                           "\"127.0.0.1:80\", \"backends\": [{\"name\": \"r1\", \"url\": "
                           "\"http://127.0.0.1:1\", \"models\": [\"m\"]}]}",
                           "t.json:1:29: error: /listen/1: duplicate listen address "
                           "\"127.0.0.1:80\" (first at /listen/0)",
                           "t.json:1:55: error: /admin: same address as /listen/0",
                           "t.json:1:55: error: /admin: same address as /listen/1", NULL)
             == 0);
    return 0;
}

static int
test_parse_address(void)
{
    struct sockaddr_storage ss;
    socklen_t len;

    LG_CHECK(lg_config_parse_address(":0", &ss, &len) == LG_OK);
    LG_CHECK(ss.ss_family == AF_INET && len == sizeof(struct sockaddr_in) && port_of(&ss) == 0);
    LG_CHECK(((struct sockaddr_in *)&ss)->sin_addr.s_addr == htonl(INADDR_ANY));
    LG_CHECK(lg_config_parse_address("*:8080", &ss, &len) == LG_OK && port_of(&ss) == 8080);
    LG_CHECK(lg_config_parse_address("[::]:443", &ss, &len) == LG_OK);
    LG_CHECK(ss.ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6));
    LG_CHECK(lg_config_parse_address("localhost:65535", &ss, &len) == LG_OK);
    LG_CHECK(port_of(&ss) == 65535);
    LG_CHECK(lg_config_parse_address("10.1.2.3:1", &ss, &len) == LG_OK);
    LG_CHECK(ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) == 0x0a010203);
    LG_CHECK(lg_config_parse_address("10.1.2.3", &ss, &len) == LG_EINVAL);
    LG_CHECK(lg_config_parse_address("10.1.2:80", &ss, &len) == LG_EINVAL);
    LG_CHECK(lg_config_parse_address("127.1:80", &ss, &len) == LG_EINVAL);
    LG_CHECK(lg_config_parse_address("10.1.2.3:", &ss, &len) == LG_EINVAL);
    LG_CHECK(lg_config_parse_address("10.1.2.3:-1", &ss, &len) == LG_EINVAL);
    LG_CHECK(lg_config_parse_address("[::1]", &ss, &len) == LG_EINVAL);
    LG_CHECK(lg_config_parse_address("[]:1", &ss, &len) == LG_EINVAL);
    LG_CHECK(lg_config_parse_address("", &ss, &len) == LG_EINVAL);
    return 0;
}

static int
test_many_errors(void)
{
    /* 25 errors: every one is found, 20 are kept with positions, 5 counted */
    char text[4096], *p = text, out[8192] = "";
    struct lg_config_errors errs;
    FILE *f;

    p += sprintf(p, "{\"listen\": \":0\", \"backends\": [\n");
    for (int i = 0; i < 25; i++) {
        p += sprintf(p,
                     "%s{\"name\": \"r%d\", \"url\": \"http://127.0.0.1:1\", \"models\": "
                     "[\"m\"], \"weight\": 0}\n",
                     i > 0 ? "," : "", i);
    }
    sprintf(p, "]}");
    LG_CHECK(load(text, &errs) == NULL);
    LG_CHECK(errs.n == LG_CONFIG_MAX_ERRORS && errs.dropped == 5);
    LG_CHECK_STR(errs.msgs[0], "t.json:2:72: error: /backends/0/weight: must be between 1 and "
                               "1000 (got 0)");
    LG_CHECK_STR(errs.msgs[19], "t.json:21:74: error: /backends/19/weight: must be between 1 and "
                                "1000 (got 0)");
    f = fmemopen(out, sizeof(out) - 1, "w");
    LG_CHECK(f != NULL);
    lg_config_errors_print(&errs, f);
    fclose(f);
    LG_CHECK(strstr(out, "t.json:3:73: error: /backends/1/weight: must be between 1 and 1000 "
                         "(got 0)\nt.json:4:73:")
             != NULL);
    LG_CHECK(strstr(out, "(got 0)\n(5 more errors not shown)\n") != NULL);
    lg_config_errors_free(&errs);
    LG_CHECK(errs.n == 0 && errs.dropped == 0);
    return 0;
}

static int
test_several_error_classes(void)
{
    /* different classes at once, in document order, none stops the walk */
    LG_CHECK(
        expect_errors("{\n"
                      "  \"listen\": \":0\",\n"
                      "  \"workers\": \"two\",\n"
                      "  \"timeouts\": {\"first_byte\": 300, \"stram_idle\": \"1s\"},\n"
                      "  \"backends\": [{\"name\": \"r1\", \"url\": \"tcp://x:1\", \"models\": "
                      "[\"m\"], \"weight\": 2000}]\n"
                      "}",
                      "t.json:3:14: error: /workers: expected an integer or \"auto\", got a "
                      "string",
                      "t.json:4:30: error: /timeouts/first_byte: durations need a unit, e.g. "
                      "\"30s\" (got 300)",
                      "t.json:4:35: error: /timeouts/stram_idle: unknown key \"stram_idle\"; "
                      "did you mean \"stream_idle\"?",
                      "t.json:5:38: error: /backends/0/url: scheme must be http or https "
                      "(got \"tcp\")",
                      "t.json:5:78: error: /backends/0/weight: must be between 1 and 1000 "
                      "(got 2000)",
                      NULL)
        == 0);
    return 0;
}

static int
test_comments_ignored(void)
{
    static const char text[] =
        "{\"#\": \"top\", \"#listen\": [1, {\"x\": 2}], \"listen\": [{\"#\": 1, \"address\": "
        "\":0\", \"#tls\": {\"cert\": \"/nonexistent\"}}],\n"
        " \"timeouts\": {\"#client_idle\": null, \"client_idle\": \"1s\"},\n"
        " \"routing\": {\"#\": {}, \"retry\": {\"#attempts\": \"x\"}},\n"
        " \"backends\": [{\"#name\": 5, \"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
        "\"models\": [\"m\"]}]}";
    struct lg_config_errors errs;
    struct lg_config *c = load(text, &errs);

    lg_config_errors_print(&errs, stderr);
    LG_CHECK(c != NULL);
    LG_CHECK(c->timeouts.client_idle_ms == 1000 && c->listen[0].tls_cert == NULL);
    lg_config_unref(c);
    return 0;
}

static int
test_shorthands(void)
{
    char path[1024], text[4096];
    const char *src = getenv("LG_SRC");
    struct lg_config_errors errs;
    struct lg_config *c;

    /* tls files only have to be readable: the example config stands in for PEM files */
    snprintf(path, sizeof(path), "%s/conf/minimal.json", src != NULL ? src : ".");
    snprintf(text, sizeof(text),
             "{\"listen\": [\":0\", {\"address\": \"127.0.0.1:0\", \"tls\": {\"cert\": \"%s\", "
             "\"key\": \"%s\"}}],\n"
             " \"access_log\": \"-\", \"admin\": \"[::1]:0\",\n"
             " \"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", \"models\": "
             "[\"m\"]}]}",
             path, path);
    c = load(text, &errs);
    lg_config_errors_print(&errs, stderr);
    LG_CHECK(c != NULL);
    LG_CHECK(c->nlisten == 2 && c->listen[0].tls_cert == NULL);
    LG_CHECK_STR(c->listen[0].address, ":0");
    LG_CHECK_STR(c->listen[1].tls_cert, path);
    LG_CHECK_STR(c->listen[1].tls_key, path);
    LG_CHECK_STR(c->access_log.path, "-");
    LG_CHECK(c->access_log.flush_ms == 1000);
    LG_CHECK_STR(c->admin.listen, "[::1]:0");
    LG_CHECK(c->admin.addr.ss_family == AF_INET6);
    lg_config_unref(c);

    LG_CHECK(expect_errors("{\"listen\": \":0\",\n"
                           " \"admin\": \"nope\",\n"
                           " \"access_log\": \"\",\n"
                           " \"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
                           "\"models\": [\"m\"]}]}",
                           "t.json:2:11: error: /admin: expected \"host:port\", \"[v6]:port\" or "
                           "\":port\" (got \"nope\")",
                           "t.json:3:16: error: /access_log: must not be empty", NULL)
             == 0);
    return 0;
}

static int
test_tls_files(void)
{
    LG_CHECK(expect_errors("{\"listen\": {\"address\": \":0\", \"tls\": {\"cert\": "
                           "\"/nonexistent/c.pem\", \"key\": \"/\"}},\n"
                           " \"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
                           "\"models\": [\"m\"]}]}",
                           "t.json:1:46: error: /listen/tls/cert: cannot read "
                           "\"/nonexistent/c.pem\": No such file or directory",
                           "t.json:1:75: error: /listen/tls/key: cannot read \"/\": not a "
                           "regular file",
                           NULL)
             == 0);
    LG_CHECK(expect_errors("{\"listen\": [{\"address\": \":0\", \"tls\": {\"cert\": "
                           "\"/nonexistent/c.pem\", \"key\": \"/\"}}],\n"
                           " \"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
                           "\"models\": [\"m\"]}]}",
                           "t.json:1:47: error: /listen/0/tls/cert: cannot read "
                           "\"/nonexistent/c.pem\": No such file or directory",
                           "t.json:1:76: error: /listen/0/tls/key: cannot read \"/\": not a "
                           "regular file",
                           NULL)
             == 0);
    return 0;
}

/* Agent clients: session headers (each a header name, once) and the Responses API's table. */
static int
test_agent_routing(void)
{
    struct lg_config_errors errs;
    char *text = with_top("\"routing\": {\"session_headers\": [\"x-session-affinity\", "
                          "\"session-id\"], \"responses\": {\"table\": 100, \"ttl\": \"5m\"}},");
    struct lg_config *c = load(text, &errs);

    free(text);
    LG_CHECK(c != NULL);
    LG_CHECK(c->routing.nsession_headers == 2);
    LG_CHECK_STR(c->routing.session_headers[1], "session-id");
    LG_CHECK(c->routing.session_headers[2] == NULL);
    LG_CHECK(c->routing.responses.table == 100 && c->routing.responses.ttl_ms == 300000);
    lg_config_unref(c);
    text = with_top("");
    c = load(text, &errs);
    free(text);
    LG_CHECK(c != NULL && c->routing.session_headers == NULL);
    LG_CHECK(c->routing.responses.table == 65536 && c->routing.responses.ttl_ms == 3600000);
    lg_config_unref(c);
    LG_CHECK(expect_top_error("\"routing\": {\"session_headers\": [\"ok\", \"x y\"]},",
                              "t.json:2:39: error: /routing/session_headers/1: not a valid HTTP "
                              "header name (got \"x y\")")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"responses\": {\"table\": 8}},",
                              "t.json:2:36: error: /routing/responses/table: must be between 16 "
                              "and 1e+06 (got 8)")
             == 0);
    return 0;
}

static int
test_strings_checked(void)
{
    LG_CHECK(expect_top_error("\"routing\": {\"session_header\": \"x session\"},",
                              "t.json:2:31: error: /routing/session_header: not a valid HTTP "
                              "header name (got \"x session\")")
             == 0);
    LG_CHECK(expect_top_error("\"admin\": {\"listen\": \":0\", \"token\": \"a\\r\\nb\"},",
                              "t.json:2:36: error: /admin/token: control characters are not "
                              "allowed")
             == 0);
    LG_CHECK(expect_errors("{\"listen\": \":0\", \"backends\": [{\"name\": \"r1\", \"url\": "
                           "\"http://127.0.0.1:1\", \"models\": [\"m\"], \"metrics_path\": "
                           "\"metrics\", \"flavor\": \"ollama\"}]}",
                           "t.json:1:108: error: /backends/0/metrics_path: must be a path "
                           "starting with \"/\" without spaces (got \"metrics\")",
                           "t.json:1:129: error: /backends/0/flavor: must be one of \"auto\", "
                           "\"vllm\", \"sglang\", \"tgi\", \"llamacpp\", \"none\" (got \"ollama\")",
                           NULL)
             == 0);
    LG_CHECK(expect_top_error("\"log_level\": \"verbose\",",
                              "t.json:2:14: error: /log_level: must be one of \"error\", \"warn\", "
                              "\"info\", \"debug\" (got \"verbose\")")
             == 0);
    return 0;
}

/* Loads text, which must load with exactly the warnings given (NULL-terminated). */
static int
expect_warnings(const char *text, ...)
{
    struct lg_config_errors errs;
    struct lg_config *c = load(text, &errs);
    int failed;
    va_list ap;

    if (c == NULL) {
        lg_config_errors_print(&errs, stderr);
        lg_config_errors_free(&errs);
        return 1;
    }
    va_start(ap, text);
    failed = expect_msgs("warning", c->warnings, c->nwarnings, ap);
    va_end(ap);
    lg_config_unref(c);
    return failed;
}

/*
 * Risky but valid settings warn, at their position: an admin listener open
 * beyond loopback without a token, a backend listed twice, a timeout so long
 * it is practically none. The defaults and safe variants do not.
 */
static int
test_warnings(void)
{
    static const char backends2[] =
        "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:9001\", \"models\": "
        "[\"m\"]},\n"
        "  {\"name\": \"r2\", \"url\": \"HTTP://127.0.0.1:9001/\", \"models\": [\"m\"]}]}";
    char text[1024];

    LG_CHECK(expect_warnings(minimal, NULL) == 0);
    snprintf(text, sizeof(text), "{\"listen\": \":0\", \"admin\": \"*:9090\",\n%s", backends2);
    LG_CHECK(expect_warnings(
                 text,
                 "t.json:1:27: warning: /admin: the admin listener is on \"*:9090\", not loopback, "
                 "without a token: whoever reaches it can drain backends, reload and read the "
                 "fleet; set admin.token (then /admin/ and /metrics need it) or listen on "
                 "127.0.0.1",
                 "t.json:1:12: warning: /listen: clients reach \":0\" beyond loopback and "
                 "limits.max_connections_per_ip is not set: one address may hold all 20000 "
                 "connections (limits.max_connections); set it (e.g. 256), or to 0 if clients "
                 "come through a proxy or NAT that shares their address",
                 "t.json:3:25: warning: /backends/1/url: the same URL as /backends/0 (\"r1\"): one "
                 "engine counted as two backends gets twice its share, and neither sees its "
                 "whole load; list it once (\"weight\" gives it a larger share)",
                 NULL)
             == 0);
    /* the object form points at its listen key; a token or a loopback address: no warning */
    LG_CHECK(expect_warnings("{\"listen\": \":0\", \"admin\": {\"listen\": \"[::]:0\"},\n"
                             "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
                             "\"models\": [\"m\"]}], \"limits\": {\"max_connections_per_ip\": 0}}",
                             "t.json:1:38: warning: /admin/listen: the admin listener is on "
                             "\"[::]:0\", not loopback, without a token: whoever reaches it can "
                             "drain backends, reload and read the fleet; set admin.token (then "
                             "/admin/ and /metrics need it) or listen on 127.0.0.1",
                             NULL)
             == 0);
    LG_CHECK(expect_warnings(
                 "{\"listen\": \":0\", \"admin\": {\"listen\": \":9090\", \"token\": \"t\"},\n"
                 "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", \"models\": "
                 "[\"m\"]}], \"limits\": {\"max_connections_per_ip\": 0}}",
                 NULL)
             == 0);
    LG_CHECK(expect_warnings("{\"listen\": \":0\", \"admin\": \"127.0.0.2:0\", \"peers\": [],\n"
                             "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
                             "\"models\": [\"m\"]}], \"limits\": {\"max_connections_per_ip\": 0}}",
                             NULL)
             == 0);
    LG_CHECK(expect_warnings("{\"listen\": \":0\", \"admin\": \"[::1]:0\",\n"
                             "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
                             "\"models\": [\"m\"]}], \"limits\": {\"max_connections_per_ip\": 0}}",
                             NULL)
             == 0);
    /* another port, prefix or scheme is another URL; a disabled twin is no twin */
    LG_CHECK(expect_warnings(
                 "{\"listen\": \":0\", \"backends\": [\n"
                 " {\"name\": \"a\", \"url\": \"http://127.0.0.1:1\", \"models\": [\"m\"]},\n"
                 " {\"name\": \"b\", \"url\": \"http://127.0.0.1:2\", \"models\": [\"m\"]},\n"
                 " {\"name\": \"c\", \"url\": \"http://127.0.0.1:1/v2\", \"models\": [\"m\"]},\n"
                 " {\"name\": \"d\", \"url\": \"https://127.0.0.1:1\", \"models\": [\"m\"]},\n"
                 " {\"name\": \"e\", \"url\": \"http://127.0.0.1:1\", \"models\": [\"m\"], "
                 "\"enabled\": false}], \"limits\": {\"max_connections_per_ip\": 0}}",
                 NULL)
             == 0);
    /* beyond loopback, an explicit max_connections_per_ip (0 included) says it is meant;
     * no whole-body deadline warns at its key */
    LG_CHECK(expect_warnings("{\"listen\": [\"127.0.0.1:0\", {\"address\": \"[::]:0\"}],\n"
                             "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
                             "\"models\": [\"m\"]}]}",
                             "t.json:1:40: warning: /listen/1/address: clients reach \"[::]:0\" "
                             "beyond "
                             "loopback and limits.max_connections_per_ip is not set: one address "
                             "may hold all 20000 connections (limits.max_connections); set it "
                             "(e.g. 256), or to 0 if clients come through a proxy or NAT that "
                             "shares their address",
                             NULL)
             == 0);
    LG_CHECK(expect_warnings(
                 "{\"listen\": \"0.0.0.0:0\", \"limits\": {\"max_connections_per_ip\": 64},\n"
                 "\"timeouts\": {\"client_body_min_rate\": 0},\n"
                 "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", "
                 "\"models\": [\"m\"]}]}",
                 "t.json:2:38: warning: /timeouts/client_body_min_rate: 0 turns the "
                 "whole-body deadline off: a client may hold a connection for as long "
                 "as it sends a byte of its body every timeouts.client_body; the "
                 "default is 1KiB",
                 NULL)
             == 0);
    /* timeouts: at their thresholds nothing, above them practically none */
    LG_CHECK(expect_warnings(
                 "{\"listen\": \":0\", \"timeouts\": {\"client_header\": \"1m\", \"client_body\": "
                 "\"5m\", \"client_idle\": \"10m\", \"upstream_connect\": \"1m\", \"stream_idle\": "
                 "\"10m\", \"client_stall\": \"10m\", \"first_byte\": \"1h\", \"total\": 0},\n"
                 "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", \"models\": "
                 "[\"m\"]}], \"limits\": {\"max_connections_per_ip\": 0}}",
                 NULL)
             == 0);
    LG_CHECK(
        expect_warnings(
            "{\"listen\": \":0\", \"timeouts\": {\n"
            "  \"client_header\": \"61s\", \"client_body\": \"1h\", \"client_idle\": \"11m\",\n"
            "  \"upstream_connect\": \"2m\", \"stream_idle\": \"1h\", \"client_stall\": \"30m\"},\n"
            "\"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:1\", \"models\": "
            "[\"m\"]}], \"limits\": {\"max_connections_per_ip\": 0}}",
            "t.json:2:20: warning: /timeouts/client_header: 61s is practically no timeout: a "
            "client may hold a connection that long before its request is complete "
            "(slowloris); the default is 10s",
            "t.json:2:42: warning: /timeouts/client_body: 1h is practically no timeout: a "
            "client may hold a connection that long between two pieces of its body; the "
            "default is 30s",
            "t.json:2:63: warning: /timeouts/client_idle: 11m is practically no timeout: idle "
            "keep-alive connections stay open that long, each counted against "
            "limits.max_connections; the default is 75s",
            "t.json:3:23: warning: /timeouts/upstream_connect: 2m is practically no timeout: a "
            "backend that does not answer holds each request that long before a retry; the "
            "default is 3s",
            "t.json:3:44: warning: /timeouts/stream_idle: 1h is practically no timeout: a "
            "stalled engine keeps each of its streams, and the client, that long; the "
            "default is 2m",
            "t.json:3:66: warning: /timeouts/client_stall: 30m is practically no timeout: a "
            "client that reads nothing keeps its stream, and a slot of the engine, that "
            "long; the default is 1m",
            NULL)
        == 0);
    return 0;
}

/* The access log: stdout unless turned off with false; true and {} mean the default. */
static int
test_access_log(void)
{
    static const struct {
        const char *value;
        const char *path; /* NULL: off */
        uint64_t flush_ms;
    } cases[] = {
        { "false", NULL, 1000 },
        { "true", "-", 1000 },
        { "{}", "-", 1000 },
        { "{\"flush\": \"250ms\"}", "-", 250 },
        { "\"/var/log/a.log\"", "/var/log/a.log", 1000 },
        { "{\"path\": \"b.log\", \"flush\": 0}", "b.log", 0 },
    };

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        char extra[128];
        char *text;
        struct lg_config_errors errs;
        struct lg_config *c;

        snprintf(extra, sizeof(extra), "\"access_log\": %s,", cases[i].value);
        text = with_top(extra);
        c = load(text, &errs);
        free(text);
        lg_config_errors_print(&errs, stderr);
        LG_CHECK(c != NULL);
        if (cases[i].path == NULL) {
            LG_CHECK(c->access_log.path == NULL);
        } else {
            LG_CHECK_STR(c->access_log.path, cases[i].path);
        }
        LG_CHECK(c->access_log.flush_ms == cases[i].flush_ms);
        lg_config_unref(c);
    }
    return 0;
}

/* "workers": "auto" (any case) is the default, 0; a number is kept as given. */
static int
test_workers_auto(void)
{
    static const struct {
        const char *value;
        uint32_t workers;
    } cases[] = { { "\"auto\"", 0 }, { "\"Auto\"", 0 }, { "0", 0 }, { "3", 3 }, { "256", 256 } };

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        char extra[64];
        char *text;
        struct lg_config_errors errs;
        struct lg_config *c;

        snprintf(extra, sizeof(extra), "\"workers\": %s,", cases[i].value);
        text = with_top(extra);
        c = load(text, &errs);
        free(text);
        LG_CHECK(c != NULL && c->workers == cases[i].workers);
        lg_config_unref(c);
    }
    return 0;
}

static int
test_null_means_default(void)
{
    char *text =
        with_top("\"workers\": null, \"access_log\": null, \"admin\": null, "
                 "\"timeouts\": {\"total\": null}, \"routing\": {\"session_header\": null, "
                 "\"policy\": null},");
    struct lg_config_errors errs;
    struct lg_config *c = load(text, &errs);

    free(text);
    lg_config_errors_print(&errs, stderr);
    LG_CHECK(c != NULL);
    LG_CHECK(c->workers == 0 && c->admin.listen == NULL);
    LG_CHECK_STR(c->access_log.path, "-");
    LG_CHECK(c->routing.policy == NULL); /* the router's default: ttft */
    lg_config_unref(c);
    return 0;
}

static int
test_routing_pipeline(void)
{
    char *text =
        with_top("\"routing\": {\"pipeline\": [\"prefix_affinity\", {\"policy\": \"ttft\", "
                 "\"weight\": 2.5, \"options\": {\"slots\": 8}}]},");
    struct lg_config_errors errs;
    struct lg_config *c = load(text, &errs);

    free(text);
    lg_config_errors_print(&errs, stderr);
    LG_CHECK(c != NULL && c->routing.policy == NULL && c->routing.npipeline == 2);
    LG_CHECK_STR(c->routing.pipeline[0].policy, "prefix_affinity");
    LG_CHECK(c->routing.pipeline[0].weight == 1 && c->routing.pipeline[0].options == NULL);
    LG_CHECK_STR(c->routing.pipeline[1].policy, "ttft");
    LG_CHECK(c->routing.pipeline[1].weight == 2.5);
    LG_CHECK(json_integer_value(json_object_get(c->routing.pipeline[1].options, "slots")) == 8);
    lg_config_unref(c);

    LG_CHECK(expect_top_error("\"routing\": {\"policy\": \"ttft\", \"pipeline\": [\"ttft\"]},",
                              "t.json:2:23: error: /routing/policy: give either policy or "
                              "pipeline, not both")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"pipeline\": []},",
                              "t.json:2:25: error: /routing/pipeline: must not be empty")
             == 0);
    /* weight 0 is a shadow stage; a pipeline of shadows would decide nothing */
    LG_CHECK(
        expect_top_error("\"routing\": {\"pipeline\": [{\"policy\": \"ttft\", \"weight\": 0}]},",
                         "t.json:2:25: error: /routing/pipeline: every stage has weight 0 (a "
                         "shadow: scored and logged, never deciding); at least one must "
                         "decide")
        == 0);
    text = with_top("\"routing\": {\"pipeline\": [{\"weight\": -1}]},");
    LG_CHECK(expect_errors(text,
                           "t.json:2:37: error: /routing/pipeline/0/weight: must be between 0 "
                           "and 1e+06 (got -1)",
                           "t.json:2:26: error: /routing/pipeline/0: missing required key "
                           "\"policy\"",
                           NULL)
             == 0);
    free(text);
    return 0;
}

static int
test_disabled_backends(void)
{
    static const char text[] =
        "{\"listen\": \":0\", \"backends\": [\n"
        "  {\"name\": \"a\", \"url\": \"http://127.0.0.1:1\", \"models\": [\"m\"], \"enabled\": "
        "false},\n"
        "  {\"name\": \"b\", \"url\": \"http://127.0.0.1:2\", \"models\": [\"m\"]},\n"
        "  {\"name\": \"c\", \"url\": \"http://127.0.0.1:3\", \"models\": [\"m\"], \"enabled\": "
        "false}]}";
    struct lg_config_errors errs;
    struct lg_config *c = load(text, &errs);

    LG_CHECK(c != NULL && c->nbackends == 1);
    LG_CHECK_STR(c->backends[0].name, "b");
    LG_CHECK(lg_config_backend(c, "a") == NULL);
    lg_config_unref(c);
    /* a disabled backend is still validated */
    LG_CHECK(
        expect_errors("{\"listen\": \":0\", \"backends\": [\n"
                      "  {\"name\": \"a\", \"url\": \"http://127.0.0.1:1\", \"models\": [\"m\"], "
                      "\"enabled\": false, \"weight\": 0}]}",
                      "t.json:2:91: error: /backends/0/weight: must be between 1 and 1000 "
                      "(got 0)",
                      "t.json:1:30: error: /backends: every backend is disabled; enable at "
                      "least one",
                      NULL)
        == 0);
    return 0;
}

static int
test_hedge_cross_check(void)
{
    LG_CHECK(expect_top_error("\"routing\": {\"hedge\": {\"min\": \"2s\", \"max\": \"1s\"}},",
                              "t.json:2:30: error: /routing/hedge/min: must not exceed max "
                              "(2s > 1s)")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"hedge\": {\"factor\": 0.5}},",
                              "t.json:2:33: error: /routing/hedge/factor: must be between 1 and "
                              "100 (got 0.5)")
             == 0);
    return 0;
}

static int
test_health_cross_check(void)
{
    LG_CHECK(expect_top_error("\"health\": {\"eject_max\": \"3s\"},",
                              "t.json:2:11: error: /health/eject_base: must not exceed eject_max "
                              "(5s > 3s)")
             == 0);
    /* a field error already reported is not followed by a cross-field one */
    LG_CHECK(expect_top_error("\"health\": {\"eject_max\": \"3\"},",
                              "t.json:2:25: error: /health/eject_max: invalid duration \"3\"; use "
                              "a number and a unit: ms, s, m or h (e.g. \"30s\", \"1.5s\", "
                              "\"250ms\")")
             == 0);
    return 0;
}

/* admin.history: defaults, bounds, and a window that holds too few or too many points */
static int
test_admin_history(void)
{
    struct lg_config_errors errs;
    char *text = with_top("\"admin\": \":0\",");
    struct lg_config *c = load(text, &errs);

    free(text);
    LG_CHECK(c != NULL);
    LG_CHECK(c->admin.history.resolution_ms == 5000 && c->admin.history.window_ms == 900000);
    lg_config_unref(c);
    text = with_top("\"admin\": {\"listen\": \":0\", \"history\": {\"window\": 0}},");
    c = load(text, &errs);
    free(text);
    LG_CHECK(c != NULL && c->admin.history.window_ms == 0);
    lg_config_unref(c);
    LG_CHECK(expect_top_error("\"admin\": {\"listen\": \":0\", \"history\": {\"resolution\": "
                              "\"1s\", \"window\": \"1s\"}},",
                              "t.json:2:69: error: /admin/history/window: must hold two points "
                              "at least (2 x resolution 1s; 0 turns the history off)")
             == 0);
    LG_CHECK(expect_top_error("\"admin\": {\"listen\": \":0\", \"history\": {\"window\": "
                              "\"5h\"}},",
                              "t.json:2:49: error: /admin/history/window: 5h at a resolution of "
                              "5s is 3600 points; at most 2880 (a longer resolution or a shorter "
                              "window)")
             == 0);
    LG_CHECK(expect_top_error("\"admin\": {\"listen\": \":0\", \"history\": {\"resolution\": "
                              "\"500ms\"}},",
                              "t.json:2:53: error: /admin/history/resolution: must be between 1s "
                              "and 1m (got \"500ms\")")
             == 0);
    return 0;
}

static int
test_example_files(void)
{
    const char *src = getenv("LG_SRC");
    char path[4096];
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;

    LG_CHECK(src != NULL);
    snprintf(path, sizeof(path), "%s/conf/llmgate.json", src);
    LG_CHECK(lg_config_load(path, &c, &errs) == LG_OK);
    lg_config_errors_print(&errs, stderr);
    LG_CHECK(c != NULL && errs.n == 0);
    LG_CHECK_STR(c->path, path);
    LG_CHECK(c->nbackends == 1); /* the second one is disabled */
    LG_CHECK_STR(c->backends[0].name, "vllm-a");
    LG_CHECK(c->backends[0].nmodels == 2);
    LG_CHECK_STR(c->access_log.path, "-");
    LG_CHECK_STR(c->admin.listen, "127.0.0.1:9090");
    LG_CHECK(json_is_object(c->routing.policy_options));
    LG_CHECK(c->nwarnings == 0); /* the examples show safe settings */
    lg_config_unref(c);

    snprintf(path, sizeof(path), "%s/conf/minimal.json", src);
    c = NULL;
    LG_CHECK(lg_config_load(path, &c, &errs) == LG_OK && c != NULL);
    LG_CHECK(c->nbackends == 2 && c->nlisten == 1);
    LG_CHECK(c->nwarnings == 0);
    lg_config_unref(c);
    return 0;
}

static int
test_io_error(void)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;

    LG_CHECK(lg_config_load("/nonexistent/llmgate.json", &c, &errs) == LG_EIO && c == NULL);
    LG_CHECK(errs.n == 1);
    LG_CHECK_STR(errs.msgs[0], "/nonexistent/llmgate.json: error: cannot read: No such file or "
                               "directory");
    lg_config_errors_free(&errs);
    LG_CHECK(lg_config_load("/", &c, &errs) == LG_EIO && c == NULL);
    LG_CHECK_STR(errs.msgs[0], "/: error: cannot read: Is a directory");
    lg_config_errors_free(&errs);
    /* no errs at all is fine too */
    LG_CHECK(lg_config_load("/nonexistent", &c, NULL) == LG_EIO);
    LG_CHECK(lg_config_load_buffer("{", 1, "x", &c, NULL) == LG_EINVAL);
    LG_CHECK(lg_config_load_buffer("{\"listen\": 1}", 13, "x", &c, NULL) == LG_EINVAL);
    return 0;
}

static int
test_refcount(void)
{
    struct lg_config_errors errs;
    struct lg_config *c = load(minimal, &errs);

    LG_CHECK(c != NULL && c->refcnt == 1);
    LG_CHECK(lg_config_ref(c) == c && c->refcnt == 2);
    lg_config_unref(c);
    LG_CHECK(c->refcnt == 1);
    lg_config_unref(c); /* frees; ASan/valgrind check the rest */
    lg_config_unref(NULL);
    return 0;
}

static int
test_no_resolve_flag(void)
{
    static const char text[] = "{\"listen\": \"nosuch.invalid:1\", \"backends\": [{\"name\": "
                               "\"r1\", \"url\": \"http://nosuch.invalid\", \"models\": [\"m\"]}]}";
    struct lg_config *c = NULL;

    LG_CHECK(lg_config_load_buffer_flags(text, strlen(text), "t", LG_CONFIG_F_NO_RESOLVE, &c, NULL)
             == LG_OK);
    LG_CHECK(c->listen[0].addrlen == 0 && c->backends[0].addrlen == 0);
    LG_CHECK(c->backends[0].port == 80);
    lg_config_unref(c);
    return 0;
}

/* routing.retry.on: the failures retried, by name; every retryable one by default. */
static int
test_routing_retry_on(void)
{
    struct lg_config_errors errs;
    struct lg_config *c = load(minimal, &errs);
    char *text;

    LG_CHECK(c != NULL);
    LG_CHECK(c->routing.retry.on == LG_FAIL_RETRY_DEFAULT);
    for (int f = 0; f < LG_FAIL_COUNT; f++) {
        /* the default is every failure that may be retried */
        LG_CHECK(!!(LG_FAIL_RETRY_DEFAULT & LG_FAIL_BIT(f)) == lg_fail_table[f].retryable);
    }
    lg_config_unref(c);
    text = with_top("\"routing\": {\"retry\": {\"on\": [\"connect_refused\", \"http_503\"]}},");
    c = load(text, &errs);
    free(text);
    LG_CHECK(c != NULL && errs.n == 0);
    LG_CHECK(c->routing.retry.on
             == (LG_FAIL_BIT(LG_FAIL_CONNECT_REFUSED) | LG_FAIL_BIT(LG_FAIL_HTTP_503)));
    lg_config_unref(c);
    text = with_top("\"routing\": {\"retry\": {\"on\": []}},");
    c = load(text, &errs);
    free(text);
    LG_CHECK(c != NULL && c->routing.retry.on == 0); /* nothing retried */
    lg_config_unref(c);
    LG_CHECK(expect_top_error("\"routing\": {\"retry\": {\"on\": [\"http_503\", \"timeout\"]}},",
                              "t.json:2:42: error: /routing/retry/on/1: unknown failure "
                              "\"timeout\"; expected one of connect_failed connect_refused "
                              "connect_timeout upstream_tls_error first_byte_timeout "
                              "upstream_closed upstream_protocol_error http_429 http_500 "
                              "http_502 http_503 http_504")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"retry\": {\"on\": [\"client_closed\"]}},",
                              "t.json:2:30: error: /routing/retry/on/0: \"client_closed\" is "
                              "never retried on another backend")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"retry\": {\"on\": [\"http_503\", \"http_503\"]}},",
                              "t.json:2:42: error: /routing/retry/on/1: duplicate entry "
                              "\"http_503\"")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"retry\": {\"on\": \"http_503\"}},",
                              "t.json:2:29: error: /routing/retry/on: expected an array of "
                              "strings, got a string")
             == 0);
    return 0;
}

/* routing.resume: a map of models to modes, its bounds, off by default. */
static int
test_routing_resume(void)
{
    struct lg_config_errors errs;
    struct lg_config *c = load(minimal, &errs);
    char *text;

    LG_CHECK(c != NULL);
    LG_CHECK(c->routing.resume.models == NULL); /* off for every model */
    LG_CHECK(c->routing.resume.attempts == 2 && c->routing.resume.max_text == 256 * 1024);
    lg_config_unref(c);
    text = with_top("\"routing\": {\"resume\": {\"models\": {\"m\": \"greedy\", \"*\": \"seeded\", "
                    "\"#\": \"comment\", \"x\": \"off\"}, \"attempts\": 3, \"max_text\": \"1MiB\"}},");
    c = load(text, &errs);
    free(text);
    LG_CHECK(c != NULL && errs.n == 0);
    LG_CHECK_STR(json_string_value(json_object_get(c->routing.resume.models, "*")), "seeded");
    LG_CHECK(c->routing.resume.attempts == 3 && c->routing.resume.max_text == 1024 * 1024);
    /* the modes are read once, at load: the models' own, and "*" for the others */
    LG_CHECK(c->routing.resume.nrules == 2 && c->routing.resume.others == LG_RESUME_SEEDED);
    LG_CHECK_STR(c->routing.resume.rules[0].model, "m");
    LG_CHECK(c->routing.resume.rules[0].mode == LG_RESUME_GREEDY);
    LG_CHECK_STR(c->routing.resume.rules[1].model, "x");
    LG_CHECK(c->routing.resume.rules[1].mode == LG_RESUME_OFF);
    lg_config_unref(c);
    LG_CHECK(expect_top_error("\"routing\": {\"resume\": {\"models\": {\"a/b~\": \"always\"}}},",
                              "t.json:2:43: error: /routing/resume/models/a~1b~0: expected "
                              "\"off\", \"greedy\" or \"seeded\"")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"resume\": {\"models\": {\"m\": true}}},",
                              "t.json:2:40: error: /routing/resume/models/m: expected \"off\", "
                              "\"greedy\" or \"seeded\"")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"resume\": {\"models\": [\"m\"]}},",
                              "t.json:2:34: error: /routing/resume/models: expected an object, got "
                              "an array")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"resume\": {\"attempts\": 11}},",
                              "t.json:2:36: error: /routing/resume/attempts: must be between 1 and "
                              "10 (got 11)")
             == 0);
    LG_CHECK(expect_top_error("\"routing\": {\"resume\": {\"max_text\": 100}},",
                              "t.json:2:36: error: /routing/resume/max_text: must be between 1KiB "
                              "and 64MiB (got 100)")
             == 0);
    return 0;
}

/* Token budgets: estimates and the shared store; every error at its place. */
static int
test_budgets(void)
{
    struct lg_config_errors errs;
    struct lg_config *c;
    char *text;

    c = load(minimal, &errs);
    LG_CHECK(c != NULL);
    LG_CHECK(c->budgets.prompt_bytes_per_token == 4 && c->budgets.default_max_tokens == 1024);
    LG_CHECK(c->budgets.redis.address == NULL);
    lg_config_unref(c);
    text = with_top("\"budgets\": {\"default_max_tokens\": 256, \"redis\": \"127.0.0.1:6379\"},");
    c = load(text, &errs);
    free(text);
    LG_CHECK(c != NULL && errs.n == 0);
    LG_CHECK(c->budgets.default_max_tokens == 256);
    LG_CHECK_STR(c->budgets.redis.address, "127.0.0.1:6379");
    LG_CHECK(port_of(&c->budgets.redis.addr) == 6379);
    LG_CHECK_STR(c->budgets.redis.key_prefix, "llmgate:budget");
    LG_CHECK(c->budgets.redis.sync_interval_ms == 200 && c->budgets.redis.timeout_ms == 500);
    LG_CHECK(c->budgets.redis.on_failure == LG_BUDGET_FAIL_OPEN && c->budgets.redis.db == 0);
    LG_CHECK(c->budgets.redis.password == NULL);
    lg_config_unref(c);
    text = with_top("\"budgets\": {\"redis\": {\"address\": \"[::1]:7000\", \"password\": \"pw\", "
                    "\"db\": 3, \"key_prefix\": \"gw:tok\", \"sync_interval\": \"100ms\", "
                    "\"timeout\": \"1s\", \"on_failure\": \"closed\"}},");
    c = load(text, &errs);
    free(text);
    LG_CHECK(c != NULL && errs.n == 0);
    LG_CHECK(port_of(&c->budgets.redis.addr) == 7000 && c->budgets.redis.db == 3);
    LG_CHECK_STR(c->budgets.redis.password, "pw");
    LG_CHECK_STR(c->budgets.redis.key_prefix, "gw:tok");
    LG_CHECK(c->budgets.redis.sync_interval_ms == 100 && c->budgets.redis.timeout_ms == 1000);
    LG_CHECK(c->budgets.redis.on_failure == LG_BUDGET_FAIL_CLOSED);
    lg_config_unref(c);
    LG_CHECK(
        expect_top_error("\"budgets\": {\"prompt_bytes_per_token\": 0},",
                         "t.json:2:39: error: /budgets/prompt_bytes_per_token: must be between "
                         "1 and 64 (got 0)")
        == 0);
    LG_CHECK(expect_top_error("\"budgets\": {\"redis\": {\"address\": \"0.0.0.0:6379\"}},",
                              "t.json:2:34: error: /budgets/redis/address: the Redis server needs "
                              "a host to connect to")
             == 0);
    LG_CHECK(expect_top_error("\"budgets\": {\"redis\": {\"address\": \"127.0.0.1:1\", "
                              "\"on_failure\": \"ajar\"}},",
                              "t.json:2:63: error: /budgets/redis/on_failure: must be one of "
                              "\"open\", \"closed\" (got \"ajar\")")
             == 0);
    text = with_top("\"budgets\": {\"redis\": {\"sync_interval\": \"1ms\"}},");
    LG_CHECK(expect_errors(text,
                           "t.json:2:40: error: /budgets/redis/sync_interval: must be between 10ms "
                           "and 10s (got \"1ms\")",
                           "t.json:2:22: error: /budgets/redis: missing required key \"address\"",
                           NULL)
             == 0);
    free(text);
    return 0;
}

static int
test_scale_from_zero(void)
{
    struct lg_config_errors errs;
    struct lg_config *c;
    char *text;
    uint32_t max_held;
    uint64_t hold_ms;

    /* off by default, with its defaults */
    text = with_top("");
    c = load(text, &errs);
    free(text);
    LG_CHECK(c != NULL);
    LG_CHECK(!c->scale_from_zero.enabled && c->scale_from_zero.max_held == 100);
    LG_CHECK(c->scale_from_zero.hold_ms == 60000 && c->scale_from_zero.retry_after_ms == 10000);
    LG_CHECK(c->scale_from_zero.webhook == NULL && c->scale_from_zero.webhook_timeout_ms == 2000);
    LG_CHECK(!lg_config_sfz(c, "m", &max_held, &hold_ms));
    lg_config_unref(c);
    /* on for one model only (a string entry is its name), another with its own bounds */
    text = with_top("\"scale_from_zero\": {\"max_held\": 5, \"hold\": \"30s\", \"webhook\": "
                    "\"http://scaler.local:8080/wake?x=1\", \"models\": [\"a\", {\"model\": "
                    "\"b\", \"max_held\": 7, \"hold\": \"2m\"}, {\"model\": \"c\", \"enabled\": "
                    "false}]},");
    c = load(text, &errs);
    free(text);
    LG_CHECK(c != NULL && c->scale_from_zero.nmodels == 3);
    LG_CHECK_STR(c->scale_from_zero.webhook, "http://scaler.local:8080/wake?x=1");
    LG_CHECK(!lg_config_sfz(c, "m", &max_held, &hold_ms));
    LG_CHECK(lg_config_sfz(c, "a", &max_held, &hold_ms) && max_held == 5 && hold_ms == 30000);
    LG_CHECK(lg_config_sfz(c, "b", &max_held, &hold_ms) && max_held == 7 && hold_ms == 120000);
    LG_CHECK(!lg_config_sfz(c, "c", &max_held, &hold_ms));
    lg_config_unref(c);
    LG_CHECK(expect_top_error("\"scale_from_zero\": {\"webhook\": \"https://x/wake\"},",
                              "t.json:2:32: error: /scale_from_zero/webhook: must be an http:// "
                              "URL with a host (https is not supported)")
             == 0);
    LG_CHECK(expect_top_error("\"scale_from_zero\": {\"models\": [\"a\", \"a\"]},",
                              "t.json:2:37: error: /scale_from_zero/models/1/model: model \"a\" "
                              "is listed twice (also /models/0)")
             == 0);
    LG_CHECK(expect_top_error("\"scale_from_zero\": {\"max_held\": 0},",
                              "t.json:2:33: error: /scale_from_zero/max_held: must be between 1 "
                              "and 100000 (got 0)")
             == 0);
    return 0;
}

/* engine_priority: read, and refused without priority_field (the engine
 * would hear no class), at the field. */
static int
test_engine_priority(void)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;
    const char *ok = "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", \"url\": "
                     "\"http://127.0.0.1:1\", \"models\": [\"m\"], \"priority_field\": \"vllm\", "
                     "\"engine_priority\": \"preempt\"}, {\"name\": \"b\", \"url\": "
                     "\"http://127.0.0.1:2\", \"models\": [\"m\"]}]}";
    const char *bad = "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", \"url\": "
                      "\"http://127.0.0.1:1\", \"models\": [\"m\"], "
                      "\"engine_priority\": \"preempt\"}]}";

    LG_CHECK(lg_config_load_buffer(ok, strlen(ok), "t.json", &c, &errs) == LG_OK);
    LG_CHECK(c->backends[0].engine_priority == LG_ENGINE_PRIORITY_PREEMPT);
    LG_CHECK(c->backends[1].engine_priority == LG_ENGINE_PRIORITY_NONE);
    lg_config_unref(c);
    c = NULL;
    LG_CHECK(lg_config_load_buffer(bad, strlen(bad), "t.json", &c, &errs) != LG_OK);
    LG_CHECK(errs.n == 1);
    LG_CHECK(strstr(errs.msgs[0], "t.json:1:") == errs.msgs[0]);
    LG_CHECK(strstr(errs.msgs[0], ": error: /backends/0/engine_priority: the engine hears no "
                                  "class: set priority_field too")
             != NULL);
    lg_config_errors_free(&errs);
    /* a kind it does not know */
    {
        const char *unknown = "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", "
                              "\"url\": \"http://127.0.0.1:1\", \"models\": [\"m\"], "
                              "\"priority_field\": \"vllm\", \"engine_priority\": \"order\"}]}";

        memset(&errs, 0, sizeof(errs));
        LG_CHECK(lg_config_load_buffer(unknown, strlen(unknown), "t.json", &c, &errs) != LG_OK);
        LG_CHECK(errs.n == 1 && strstr(errs.msgs[0], "/backends/0/engine_priority") != NULL);
        lg_config_errors_free(&errs);
    }
    return 0;
}

/* A class's yield_prefill: read on a sheddable class (refused elsewhere)
 * and on one that is not (held instead), and refused on system, which has
 * no class above it to yield to, at the field. */
static int
test_yield_prefill(void)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;
    const char *ok = "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", \"url\": "
                     "\"http://127.0.0.1:1\", \"models\": [\"m\"]}], \"scheduling\": "
                     "{\"batch\": {\"sheddable\": true, \"yield_prefill\": true},\n"
                     "\"default\": {\"yield_prefill\": true}}}";
    const char *bad = "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", \"url\": "
                      "\"http://127.0.0.1:1\", \"models\": [\"m\"]}], \"scheduling\": "
                      "{\n\"system\": {\"yield_prefill\": true}}}";
    const char *typo = "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", \"url\": "
                       "\"http://127.0.0.1:1\", \"models\": [\"m\"]}], \"scheduling\": "
                       "{\"default\": {\"yield_prefill\": \"yes\"}}}";

    LG_CHECK(lg_config_load_buffer(ok, strlen(ok), "t.json", &c, &errs) == LG_OK);
    LG_CHECK(c->scheduling.classes[LG_CLASS_BATCH].yield_prefill);
    LG_CHECK(c->scheduling.classes[LG_CLASS_DEFAULT].yield_prefill);
    LG_CHECK(!c->scheduling.classes[LG_CLASS_DEFAULT].sheddable);
    LG_CHECK(!c->scheduling.classes[LG_CLASS_INTERACTIVE].yield_prefill);
    lg_config_unref(c);
    c = NULL;
    LG_CHECK(lg_config_load_buffer(bad, strlen(bad), "t.json", &c, &errs) != LG_OK);
    LG_CHECK(errs.n == 1);
    LG_CHECK(strstr(errs.msgs[0], "t.json:2:") == errs.msgs[0]);
    LG_CHECK(strstr(errs.msgs[0], ": error: /scheduling/system/yield_prefill: no class is "
                                  "above system: there is nothing to yield to")
             != NULL);
    lg_config_errors_free(&errs);
    LG_CHECK(lg_config_load_buffer(typo, strlen(typo), "t.json", &c, &errs) != LG_OK);
    LG_CHECK(errs.n == 1);
    LG_CHECK(strstr(errs.msgs[0], "/scheduling/default/yield_prefill") != NULL);
    lg_config_errors_free(&errs);
    return 0;
}

/* A class's prompts_per_step: read, bounded (0..64), and refused on system. */
static int
test_prompts_per_step(void)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *c = NULL;
    const char *ok = "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", \"url\": "
                     "\"http://127.0.0.1:1\", \"models\": [\"m\"]}], \"scheduling\": "
                     "{\"batch\": {\"sheddable\": true, \"prompts_per_step\": 1}}}";
    const char *big = "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", \"url\": "
                      "\"http://127.0.0.1:1\", \"models\": [\"m\"]}], \"scheduling\": "
                      "{\"batch\":\n {\"prompts_per_step\": 65}}}";
    const char *sys = "{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", \"url\": "
                      "\"http://127.0.0.1:1\", \"models\": [\"m\"]}], \"scheduling\": "
                      "{\"system\": {\"prompts_per_step\": 2}}}";

    LG_CHECK(lg_config_load_buffer(ok, strlen(ok), "t.json", &c, &errs) == LG_OK);
    LG_CHECK(c->scheduling.classes[LG_CLASS_BATCH].prompts_per_step == 1);
    LG_CHECK(c->scheduling.classes[LG_CLASS_DEFAULT].prompts_per_step == 0);
    lg_config_unref(c);
    c = NULL;
    LG_CHECK(lg_config_load_buffer(big, strlen(big), "t.json", &c, &errs) != LG_OK);
    LG_CHECK(errs.n == 1);
    LG_CHECK(strstr(errs.msgs[0], "t.json:2:") == errs.msgs[0]);
    LG_CHECK(strstr(errs.msgs[0], "/scheduling/batch/prompts_per_step") != NULL);
    lg_config_errors_free(&errs);
    LG_CHECK(lg_config_load_buffer(sys, strlen(sys), "t.json", &c, &errs) != LG_OK);
    LG_CHECK(errs.n == 1);
    LG_CHECK(strstr(errs.msgs[0], ": error: /scheduling/system/prompts_per_step: no class is "
                                  "above system")
             != NULL);
    lg_config_errors_free(&errs);
    return 0;
}

LG_TEST_MAIN(test_routing_retry_on, test_engine_priority, test_yield_prefill, test_prompts_per_step, test_minimal, test_defaults, test_budgets, test_every_field_set, test_syntax_error,
             test_nul_byte, test_not_an_object, test_unknown_key, test_wrong_type, test_out_of_range,
             test_bad_duration, test_bad_size, test_bad_url, test_url_parts,
             test_duplicate_backend_name, test_missing_required, test_models, test_bad_listen,
             test_parse_address, test_many_errors, test_several_error_classes,
             test_comments_ignored, test_shorthands, test_tls_files, test_strings_checked,
             test_agent_routing,
             test_access_log, test_warnings, test_workers_auto, test_null_means_default, test_routing_pipeline,
             test_disabled_backends, test_health_cross_check, test_hedge_cross_check,
             test_example_files, test_io_error, test_refcount, test_no_resolve_flag,
             test_routing_resume, test_admin_history, test_scale_from_zero)
