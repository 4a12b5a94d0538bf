/*
 * test_plugin.c: the plugin loader on real shared objects built from
 * plugins/ (least_kv, and the lgtest_bad_* the loader must refuse), the
 * built-in registry, and the exports of a plugin (nm -D).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg_test.h"
#include "route/plugin.h"

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
    LG_CHECK(p->ops->create(lg_plugin_host(), "{\"ms_per_full\": 400}", &state, err, sizeof(err))
             == 0);
    p->ops->score(state, &info, views, 3, cost, &why);
    LG_CHECK(cost[0] > 300 && cost[0] < 330 && cost[1] < 5 && cost[2] == 0);
    LG_CHECK_STR(why, "least_kv_usage");
    p->ops->destroy(state);
    LG_CHECK(p->ops->create(lg_plugin_host(), "{\"bogus\": 1}", &state, err, sizeof(err)) != 0);
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

static int
test_unload(void)
{
    lg_plugin_unload_all();
    LG_CHECK(lg_plugin_find("least_kv") == NULL);
    LG_CHECK(lg_plugin_find("ttft") != NULL); /* built-ins come back */
    lg_plugin_unload_all();
    return 0;
}

LG_TEST_MAIN(test_builtins, test_load_real_plugin, test_refusals, test_exports, test_unload)
