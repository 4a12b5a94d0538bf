/*
 * test_discovery.c: DNS templates in the configuration ("discover") and
 * their expansion into one backend per address (lg_discovery_expand_with()),
 * without a resolver: the sets of addresses are given.
 */
#include <arpa/inet.h>
#include <netinet/in.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/discovery.h"
#include "fleet/fleet.h"
#include "lg_test.h"
#include "route/router.h"

static struct lg_config *
load(const char *text, struct lg_config_errors *errs)
{
    struct lg_config *c = NULL;

    memset(errs, 0, sizeof(*errs));
    lg_config_load_buffer(text, strlen(text), "t.json", &c, errs);
    return c;
}

/* text must fail with exactly one error, `want`. */
static int
expect_error(const char *text, const char *want)
{
    struct lg_config_errors errs;
    struct lg_config *c = load(text, &errs);
    int failed = c != NULL || errs.n != 1 || strcmp(errs.msgs[0], want) != 0;

    if (failed) {
        fprintf(stderr, "expected: %s\ngot:\n", want);
        lg_config_errors_print(&errs, stderr);
    }
    lg_config_unref(c);
    lg_config_errors_free(&errs);
    return failed;
}

static struct sockaddr_storage
addr(const char *ip, uint16_t port)
{
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof(ss));
    if (strchr(ip, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        inet_pton(AF_INET6, ip, &s6->sin6_addr);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        inet_pton(AF_INET, ip, &s4->sin_addr);
    }
    return ss;
}

static const char *const two_templates =
    "{\"listen\": \":0\", \"discovery\": {\"nameserver\": \"127.0.0.1:5353\", \"timeout\": "
    "\"500ms\"},\n"
    " \"backends\": [\n"
    "  {\"name\": \"static\", \"url\": \"http://127.0.0.1:9000\", \"models\": [\"m\"]},\n"
    "  {\"name\": \"vllm\", \"discover\": {\"dns\": \"vllm.ns.svc.cluster.local\", \"port\": "
    "8000, \"interval\": \"2s\"},\n"
    "   \"models\": [\"m\", \"m-alias\"], \"weight\": 3, \"flavor\": \"vllm\"},\n"
    "  {\"name\": \"tgi\", \"discover\": {\"dns\": \"tgi.test\", \"port\": 80}, \"models\": "
    "[\"t\"]},\n"
    "  {\"name\": \"off\", \"discover\": {\"dns\": \"off.test\", \"port\": 80}, \"models\": "
    "[\"o\"], \"enabled\": false}]}";

static int
test_templates_parse(void)
{
    struct lg_config_errors errs;
    struct lg_config *c = load(two_templates, &errs);

    LG_CHECK(c != NULL);
    LG_CHECK(c->nbackends == 1);
    LG_CHECK_STR(c->backends[0].name, "static");
    LG_CHECK(c->ntemplates == 2); /* the disabled one is dropped */
    LG_CHECK_STR(c->templates[0].name, "vllm");
    LG_CHECK_STR(c->templates[0].discover.dns, "vllm.ns.svc.cluster.local");
    LG_CHECK(c->templates[0].discover.port == 8000);
    LG_CHECK(c->templates[0].discover.interval_ms == 2000);
    LG_CHECK(c->templates[0].url == NULL);
    LG_CHECK(c->templates[1].discover.interval_ms == 5000); /* the default */
    LG_CHECK_STR(c->discovery.nameserver, "127.0.0.1:5353");
    LG_CHECK(c->discovery.addrlen > 0);
    LG_CHECK(c->discovery.timeout_ms == 500);
    lg_config_unref(c);
    lg_config_errors_free(&errs);
    return 0;
}

static int
test_template_errors(void)
{
    LG_CHECK(expect_error("{\"listen\": \":0\", \"backends\": [\n"
                          "  {\"name\": \"v\", \"url\": \"http://127.0.0.1:1\", \"discover\": "
                          "{\"dns\": \"a.test\", \"port\": 80}, \"models\": [\"m\"]}]}",
                          "t.json:2:58: error: /backends/0/discover: give either url or "
                          "discover, not both")
             == 0);
    LG_CHECK(expect_error("{\"listen\": \":0\", \"backends\": [\n"
                          "  {\"name\": \"v\", \"models\": [\"m\"]}]}",
                          "t.json:2:3: error: /backends/0: missing required key \"url\"")
             == 0);
    LG_CHECK(expect_error("{\"listen\": \":0\", \"backends\": [\n"
                          "  {\"name\": \"v\", \"discover\": {\"dns\": \"a.test\"}, \"models\": "
                          "[\"m\"]}]}",
                          "t.json:2:29: error: /backends/0/discover: missing required key "
                          "\"port\"")
             == 0);
    LG_CHECK(expect_error("{\"listen\": \":0\", \"backends\": [\n"
                          "  {\"name\": \"v\", \"discover\": {\"dns\": \"a b\", \"port\": 80}, "
                          "\"models\": [\"m\"]}]}",
                          "t.json:2:37: error: /backends/0/discover/dns: expected a DNS name "
                          "such as \"vllm.ns.svc.cluster.local\" (got \"a b\")")
             == 0);
    LG_CHECK(expect_error("{\"listen\": \":0\", \"backends\": [\n"
                          "  {\"name\": \"v\", \"discover\": {\"dns\": \"a.test\", \"port\": 80, "
                          "\"interval\": \"10ms\"}, \"models\": [\"m\"]}]}",
                          "t.json:2:71: error: /backends/0/discover/interval: must be between "
                          "100ms and 1h (got \"10ms\")")
             == 0);
    /* '@' names are the expansion's: a file cannot use them */
    LG_CHECK(expect_error("{\"listen\": \":0\", \"backends\": [\n"
                          "  {\"name\": \"v@1.2.3.4:80\", \"url\": \"http://127.0.0.1:1\", "
                          "\"models\": [\"m\"]}]}",
                          "t.json:2:12: error: /backends/0/name: names are 1 to 64 letters, "
                          "digits, \".\", \"_\", \":\" or \"-\" (got \"v@1.2.3.4:80\")")
             == 0);
    LG_CHECK(expect_error("{\"listen\": \":0\", \"discovery\": {\"nameserver\": \"10.0.0.1\"}, "
                          "\"backends\": [\n"
                          "  {\"name\": \"v\", \"url\": \"http://127.0.0.1:1\", \"models\": "
                          "[\"m\"]}]}",
                          "t.json:1:46: error: /discovery/nameserver: expected \"host:port\", "
                          "\"[v6]:port\" or \":port\" (got \"10.0.0.1\")")
             == 0);
    return 0;
}

static int
test_expand(void)
{
    struct lg_config_errors errs;
    struct lg_config *base = load(two_templates, &errs);
    struct lg_config *c = NULL;
    struct sockaddr_storage v[2] = { addr("10.0.0.7", 8000), addr("fd00::7", 8000) };
    struct lg_discovery_set sets[1] = {
        { .dns = "vllm.ns.svc.cluster.local", .port = 8000, .addrs = v, .n = 2 },
    };
    const struct lg_backend_conf *b;

    LG_CHECK(base != NULL);
    LG_CHECK(lg_discovery_expand_with(base, sets, 1, &c, &errs) == LG_OK);
    /* file order: static, then vllm's two; tgi has no set yet: nothing */
    LG_CHECK(c->nbackends == 3);
    LG_CHECK_STR(c->backends[0].name, "static");
    LG_CHECK_STR(c->backends[1].name, "vllm@10.0.0.7:8000");
    LG_CHECK_STR(c->backends[1].url, "http://10.0.0.7:8000");
    LG_CHECK_STR(c->backends[2].name, "vllm@[fd00::7]:8000");
    LG_CHECK_STR(c->backends[2].url, "http://[fd00::7]:8000");
    b = &c->backends[2];
    LG_CHECK(b->addrlen == sizeof(struct sockaddr_in6) && b->addr.ss_family == AF_INET6);
    LG_CHECK(b->nmodels == 2 && strcmp(b->models[1], "m-alias") == 0);
    LG_CHECK(b->weight == 3 && b->flavor == LG_ENGINE_VLLM);
    LG_CHECK(b->discover.dns == NULL);
    /* the templates stay, for the next expansion and for their models' routes */
    LG_CHECK(c->ntemplates == 2);
    LG_CHECK_STR(c->path, "t.json");
    LG_CHECK(c->backends[0].addrlen == base->backends[0].addrlen);
    lg_config_unref(c);

    /* no template: the same configuration comes back */
    {
        struct lg_config *plain = load("{\"listen\": \":0\", \"backends\": [{\"name\": \"a\", "
                                       "\"url\": \"http://127.0.0.1:1\", \"models\": [\"m\"]}]}",
                                       &errs);
        struct lg_config *same = NULL;

        LG_CHECK(plain != NULL);
        LG_CHECK(lg_discovery_expand_with(plain, NULL, 0, &same, &errs) == LG_OK);
        LG_CHECK(same == plain);
        lg_config_unref(same);
        lg_config_unref(plain);
    }
    lg_config_unref(base);
    lg_config_errors_free(&errs);
    return 0;
}

/* A model only a template serves has a route with no backend (answers 503). */
static int
test_fleet_routes_template_models(void)
{
    struct lg_config_errors errs;
    struct lg_config *base = load(two_templates, &errs);
    struct lg_config *c = NULL;
    struct lg_fleet *f = NULL;
    const struct lg_model_route *r;

    LG_CHECK(base != NULL);
    LG_CHECK(lg_discovery_expand_with(base, NULL, 0, &c, &errs) == LG_OK);
    LG_CHECK(lg_router_fleet_new(c, 1, NULL, &f) == LG_OK);
    LG_CHECK(f->nbackends == 1);
    r = lg_fleet_find_model(f, "m");
    LG_CHECK(r != NULL && r->n == 1);
    r = lg_fleet_find_model(f, "m-alias");
    LG_CHECK(r != NULL && r->n == 0);
    r = lg_fleet_find_model(f, "t");
    LG_CHECK(r != NULL && r->n == 0);
    LG_CHECK(lg_fleet_find_model(f, "o") == NULL); /* disabled template */
    lg_fleet_unref(f);
    lg_config_unref(c);
    lg_config_unref(base);
    lg_config_errors_free(&errs);
    return 0;
}

static int
test_format(void)
{
    struct sockaddr_storage a = addr("127.0.0.2", 8080);
    struct sockaddr_storage b = addr("::1", 80);
    char buf[64];

    lg_sockaddr_format(&a, buf, sizeof(buf));
    LG_CHECK_STR(buf, "127.0.0.2:8080");
    lg_sockaddr_format(&b, buf, sizeof(buf));
    LG_CHECK_STR(buf, "[::1]:80");
    return 0;
}

LG_TEST_MAIN(test_templates_parse, test_template_errors, test_expand,
             test_fleet_routes_template_models, test_format)
