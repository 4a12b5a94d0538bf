/*
 * test_plugin.c: the plugin loader on real shared objects built from
 * plugins/ (least_kv, and the lgtest_bad_* the loader must refuse), the
 * built-in registry, the exports of a plugin (nm -D), the host's typed
 * option getters, which policies are lent the engine model, and where in
 * the config a refused option is reported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "lg_test.h"
#include "route/options.h"
#include "route/plugin.h"
#include "route/router.h"

static char err[512];

static const char *
so(const char *name)
{
    static char path[1024];
    const char *build = getenv("LG_BUILD");

    snprintf(path, sizeof(path), "%s/plugins/%s.so", build ? build : "build", name);
    return path;
}

static int
refused(const char *name, const char *why)
{
    err[0] = '\0';
    if (lg_plugin_load(so(name), err, sizeof(err)) != LG_EINVAL) {
        fprintf(stderr, "%s: loaded, should be refused\n", name);
        return 0;
    }
    if (strstr(err, why) == NULL || strstr(err, name) == NULL) {
        fprintf(stderr, "%s: reason \"%s\" lacks \"%s\"\n", name, err, why);
        return 0;
    }
    return 1;
}

static int
test_builtins(void)
{
    const char *names[] = { "ttft", "round_robin",     "least_request",
                            "p2c",  "prefix_affinity", "session_affinity" };
    char list[512];

    for (size_t i = 0; i < LG_ARRAY_SIZE(names); i++) {
        const struct lg_plugin *p = lg_plugin_find(names[i]);

        LG_CHECK(p != NULL && p->path == NULL);
        LG_CHECK(p->desc->abi_major == LG_PLUGIN_ABI_MAJOR);
        LG_CHECK(lg_plugin_check(p->desc, err, sizeof(err)) == LG_OK);
    }
    LG_CHECK(lg_plugin_find("nope") == NULL);
    lg_plugin_names(list, sizeof(list));
    LG_CHECK(strstr(list, "ttft") != NULL && strstr(list, "p2c") != NULL);
    return 0;
}

static int
test_load_real_plugin(void)
{
    const struct lg_plugin *p;
    struct lg_backend_view a = { .size = sizeof(a), .name = "a", .engine_kv_usage = 0.9 };
    struct lg_backend_view b = { .size = sizeof(b), .name = "b", .engine_kv_usage = 0.1 };
    struct lg_backend_view c = { .size = sizeof(c), .name = "c", .engine_kv_usage = -1 };
    const struct lg_backend_view *views[] = { &a, &b, &c };
    struct lg_route_info info = { .size = sizeof(info), .model = "m" };
    double cost[3];
    const char *why = NULL;
    void *state = NULL;

    LG_CHECK(lg_plugin_load(so("least_kv"), err, sizeof(err)) == LG_OK);
    LG_CHECK(lg_plugin_load(so("least_kv"), err, sizeof(err)) == LG_OK); /* again: no-op */
    p = lg_plugin_find("least_kv");
    LG_CHECK(p != NULL && p->path != NULL && p->dl != NULL);
    LG_CHECK(!LG_POLICY_HAS(p->ops, filter) && !LG_POLICY_HAS(p->ops, on_result));
    LG_CHECK(lg_plugin_create_text(p, "{\"ms_per_full\": 400}", &state, err, sizeof(err)) == 0);
    p->ops->score(state, &info, views, 3, cost, &why);
    LG_CHECK(cost[0] > 300 && cost[0] < 330 && cost[1] < 5 && cost[2] == 0);
    LG_CHECK_STR(why, "least_kv_usage");
    p->ops->destroy(state);
    LG_CHECK(lg_plugin_create_text(p, "{\"bogus\": 1}", &state, err, sizeof(err)) != 0);
    LG_CHECK(err[0] == '/');
    return 0;
}

static int
test_refusals(void)
{
    LG_CHECK(refused("lgtest_bad_major", "major differs"));
    LG_CHECK(refused("lgtest_bad_minor", "newer than this gateway"));
    LG_CHECK(refused("lgtest_bad_small_ops", "smaller than"));
    LG_CHECK(refused("lgtest_bad_missing_op", "required op score is NULL"));
    LG_CHECK(refused("lgtest_bad_dup", "already registered"));
    LG_CHECK(refused("lgtest_bad_no_symbol", "no lg_plugin_describe"));
    LG_CHECK(refused("lgtest_does_not_exist", "cannot load"));
    /* a refused name stays free, a built-in stays itself */
    LG_CHECK(lg_plugin_find("bad") == NULL);
    LG_CHECK(lg_plugin_find("ttft")->path == NULL);
    return 0;
}

/* A plugin exports lg_plugin_describe and nothing else. */
static int
test_exports(void)
{
    char cmd[1200], line[256];
    FILE *f;
    int n = 0, ours = 0;

    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", so("least_kv"));
    f = popen(cmd, "r");
    LG_CHECK(f != NULL);
    while (fgets(line, sizeof(line), f) != NULL) {
        char *name = strrchr(line, ' ');

        if (name == NULL) {
            continue;
        }
        name[strcspn(name, "\n")] = '\0';
        n++;
        ours += strcmp(name + 1, "lg_plugin_describe") == 0;
        if (strcmp(name + 1, "lg_plugin_describe") != 0) {
            fprintf(stderr, "unexpected export: %s\n", name + 1);
        }
    }
    LG_CHECK(pclose(f) == 0);
    LG_CHECK(n == 1 && ours == 1);
    return 0;
}

/* Options from JSON text, read through the host API's getters as a plugin does. */
struct opts {
    json_t *obj;
    struct lg_options o;
    char err[256];
};

static struct lg_options *
opts_open(struct opts *x, const char *text)
{
    x->obj = json_loads(text, 0, NULL);
    lg_options_init(&x->o, x->obj, x->err, sizeof(x->err));
    return &x->o;
}

static int
opts_close(struct opts *x, int rc)
{
    rc = lg_options_finish(&x->o, rc);
    json_decref(x->obj);
    return rc;
}

static int
test_option_getters(void)
{
    const struct lg_host_api *h = lg_plugin_host();
    static const char *const modes[] = { "off", "greedy", "seeded", NULL };
    struct lg_options *o;
    struct opts x;
    const char *str;
    uint64_t u;
    double d;
    int b, e;

    LG_CHECK(h->size >= offsetof(struct lg_host_api, opt_string) + sizeof(h->opt_string));
    /* each type, given and defaulted; comments skipped; nothing unknown */
    o = opts_open(&x, "{\"#\": \"why\", \"n\": 2.5, \"on\": true, \"one\": 1, \"t\": \"1.5s\","
                      " \"z\": 0, \"sz\": \"16KiB\", \"bytes\": 4096, \"mode\": \"GREEDY\","
                      " \"s\": \"/dev/shm/%s\"}");
    LG_CHECK(h->opt_number(o, "n", 1, 0, 10, &d) == 0 && d == 2.5);
    LG_CHECK(h->opt_number(o, "absent", 7, 0, 10, &d) == 0 && d == 7);
    LG_CHECK(h->opt_bool(o, "on", 0, &b) == 0 && b == 1);
    LG_CHECK(h->opt_bool(o, "one", 0, &b) == 0 && b == 1); /* 1 and 0 as flags were written */
    LG_CHECK(h->opt_duration_ms(o, "t", 0, 0, 60000, &u) == 0 && u == 1500);
    LG_CHECK(h->opt_duration_ms(o, "z", 9, 0, 60000, &u) == 0 && u == 0);
    LG_CHECK(h->opt_size(o, "sz", 0, 0, 1 << 20, &u) == 0 && u == 16384);
    LG_CHECK(h->opt_size(o, "bytes", 0, 0, 1 << 20, &u) == 0 && u == 4096);
    LG_CHECK(h->opt_enum(o, "mode", modes, 0, &e) == 0 && e == 1);
    LG_CHECK(h->opt_string(o, "s", NULL, &str) == 0 && strcmp(str, "/dev/shm/%s") == 0);
    LG_CHECK(h->opt_string(o, "none", "dflt", &str) == 0 && strcmp(str, "dflt") == 0);
    LG_CHECK(opts_close(&x, 0) == LG_OK && x.err[0] == '\0');

    /* refusals: "/NAME: why", the first one stands, the host refuses whatever create says */
    o = opts_open(&x, "{\"n\": 11, \"on\": \"yes\"}");
    LG_CHECK(h->opt_number(o, "n", 1, 0, 10, &d) == -1 && d == 1);
    LG_CHECK(h->opt_bool(o, "on", 0, &b) == -1);
    LG_CHECK_STR(x.err, "/n: must be a number from 0 to 10");
    LG_CHECK(opts_close(&x, 0) == LG_EINVAL && !x.o.err_at_key);
    o = opts_open(&x, "{\"on\": 0.5}");
    LG_CHECK(h->opt_bool(o, "on", 0, &b) == -1);
    LG_CHECK_STR(x.err, "/on: must be true or false (got 0.5)");
    opts_close(&x, -1);
    o = opts_open(&x, "{\"t\": 250}");
    LG_CHECK(h->opt_duration_ms(o, "t", 0, 0, 60000, &u) == -1);
    LG_CHECK_STR(x.err, "/t: must be a duration with a unit, e.g. \"30s\" (got 250)");
    opts_close(&x, -1);
    o = opts_open(&x, "{\"t\": \"2m\"}");
    LG_CHECK(h->opt_duration_ms(o, "t", 0, 0, 60000, &u) == -1);
    LG_CHECK_STR(x.err, "/t: must be between 0 and 1m (got \"2m\")");
    opts_close(&x, -1);
    o = opts_open(&x, "{\"t\": \"soon\"}");
    LG_CHECK(h->opt_duration_ms(o, "t", 0, 0, 60000, &u) == -1);
    LG_CHECK(strncmp(x.err, "/t: must be a duration such as", 30) == 0);
    opts_close(&x, -1);
    o = opts_open(&x, "{\"sz\": -1}");
    LG_CHECK(h->opt_size(o, "sz", 0, 0, 1 << 20, &u) == -1);
    LG_CHECK(strncmp(x.err, "/sz: must be a size", 19) == 0);
    opts_close(&x, -1);
    o = opts_open(&x, "{\"mode\": \"fast\"}");
    LG_CHECK(h->opt_enum(o, "mode", modes, 0, &e) == -1 && e == 0);
    LG_CHECK_STR(x.err, "/mode: must be one of \"off\", \"greedy\", \"seeded\" (got \"fast\")");
    opts_close(&x, -1);
    o = opts_open(&x, "{\"s\": 3}");
    LG_CHECK(h->opt_string(o, "s", NULL, &str) == -1);
    LG_CHECK_STR(x.err, "/s: must be a string (got 3)");
    opts_close(&x, -1);

    /* what no getter asked for is unknown, at the key; a policy that takes none says so */
    o = opts_open(&x, "{\"a\": 1, \"typo\": 2}");
    LG_CHECK(h->opt_number(o, "a", 0, 0, 10, &d) == 0);
    LG_CHECK(h->opt_number(o, "b", 0, 0, 10, &d) == 0);
    LG_CHECK(opts_close(&x, 0) == LG_EINVAL && x.o.err_at_key);
    LG_CHECK_STR(x.err, "/typo: unknown option (known: a, b)");
    o = opts_open(&x, "{\"a\": 1}");
    LG_CHECK(opts_close(&x, 0) == LG_EINVAL);
    LG_CHECK_STR(x.err, "/a: unknown option (this policy takes none)");
    return 0;
}

/* The engine model is lent to a policy that asked for it at this gateway's version only. */
static int
test_model_lending(void)
{
    const struct lg_plugin *p;

    LG_CHECK(lg_plugin_find("ttft")->lends_model);
    LG_CHECK(!lg_plugin_find("least_request")->lends_model);
    p = lg_plugin_find("least_kv"); /* loaded above */
    LG_CHECK(p != NULL && !p->lends_model);
    /* one built against a newer model view loads, and runs without it */
    LG_CHECK(lg_plugin_load(so("lgtest_model_next"), err, sizeof(err)) == LG_OK);
    p = lg_plugin_find("model_next");
    LG_CHECK(p != NULL && !p->lends_model);
    return 0;
}

/* Builds a router for a config whose routing section is `routing`; returns
 * what it logged (stderr) into out. */
static int
router_log(const char *routing, char *out, size_t len)
{
    char text[1024];
    char path[] = "/tmp/lgtest-plugin-XXXXXX";
    struct lg_config *conf = NULL;
    struct lg_router *r = NULL;
    int fd = mkstemp(path), saved = dup(STDERR_FILENO), rc;
    ssize_t n;

    LG_CHECK(fd >= 0 && saved >= 0);
    snprintf(text, sizeof(text),
             "{\"listen\": \"127.0.0.1:8080\",\n"
             " \"routing\": %s,\n"
             " \"backends\": [{\"name\": \"r1\", \"url\": \"http://127.0.0.1:9001\", "
             "\"models\": [\"m\"]}]}",
             routing);
    LG_CHECK(lg_config_load_buffer(text, strlen(text), "t.json", &conf, NULL) == LG_OK);
    fflush(stderr);
    dup2(fd, STDERR_FILENO);
    rc = lg_router_new(conf, &r);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = pread(fd, out, len - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    if (rc == LG_OK) {
        lg_router_free(r);
    }
    lg_config_unref(conf);
    return rc;
}

/* A refused option is reported where it stands in the config, as the loader would. */
static int
test_options_positions(void)
{
    char log[2048];

    LG_CHECK(router_log("{\"pipeline\": [\"ttft\", {\"policy\": \"least_request\",\n"
                        "  \"options\": {\"ms_per_request\": -5}}]}",
                        log, sizeof(log))
             == LG_EINVAL);
    LG_CHECK(strstr(log, "t.json:3:33: error: /routing/pipeline/1/options/ms_per_request: must be "
                         "a number from 0 to 1e+06")
             != NULL);
    /* an unknown option at its key */
    LG_CHECK(router_log("{\"policy\": \"ttft\",\n  \"options\": {\"ttft\": {\"slotz\": 1}}}", log,
                        sizeof(log))
             == LG_EINVAL);
    LG_CHECK(strstr(log, "t.json:3:24: error: /routing/options/ttft/slotz: unknown option (known: "
                         "slots, ")
             != NULL);
    /* a flag that is neither true nor false */
    LG_CHECK(router_log("{\"options\": {\"ttft\": {\"engine_model\": \"on\"}}}", log, sizeof(log))
             == LG_EINVAL);
    LG_CHECK(strstr(log, "t.json:2:51: error: /routing/options/ttft/engine_model: must be true or "
                         "false (got \"on\")")
             != NULL);
    /* a policy's options that are not an object */
    LG_CHECK(router_log("{\"options\": {\"ttft\": 5}}", log, sizeof(log)) == LG_EINVAL);
    LG_CHECK(strstr(log, "t.json:2:34: error: /routing/options/ttft: a policy's options must be an "
                         "object")
             != NULL);
    LG_CHECK(router_log("{\"options\": {\"ttft\": {\"engine_model\": false}}}", log, sizeof(log))
             == LG_OK);
    return 0;
}

static int
test_unload(void)
{
    lg_plugin_unload_all();
    LG_CHECK(lg_plugin_find("least_kv") == NULL);
    LG_CHECK(lg_plugin_find("ttft") != NULL); /* built-ins come back */
    lg_plugin_unload_all();
    return 0;
}

LG_TEST_MAIN(test_builtins, test_load_real_plugin, test_refusals, test_exports, test_option_getters,
             test_model_lending, test_options_positions, test_unload)
