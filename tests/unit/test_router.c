/*
 * test_router.c: the router's own part of a pick, on a real fleet and the
 * built-in policies: slow start thins a backend after the stages have seen
 * it, so a prefix it owns stays its own while it ramps, and holds it below
 * ramp x the others' in-flight count even where it would win every pick; a
 * stage of weight 0 (a shadow) is scored and shown but decides nothing.
 */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "lg_test.h"
#include "lg_test_fleet.h"
#include "route/router.h"
#include "route/tried.h"

/* the backends of every fleet here: four replicas of model m */
#define FOUR_BACKENDS                                                                  \
    " \"backends\": [\n"                                                               \
    "  {\"name\": \"r1\", \"url\": \"http://127.0.0.1:9001\", \"models\": [\"m\"]},\n" \
    "  {\"name\": \"r2\", \"url\": \"http://127.0.0.1:9002\", \"models\": [\"m\"]},\n" \
    "  {\"name\": \"r3\", \"url\": \"http://127.0.0.1:9003\", \"models\": [\"m\"]},\n" \
    "  {\"name\": \"r4\", \"url\": \"http://127.0.0.1:9004\", \"models\": [\"m\"]}]}"

static const char text[] = "{\"listen\": \"127.0.0.1:8080\", \"routing\": {\"policy\": "
                           "\"prefix_affinity\"},\n" FOUR_BACKENDS;

static struct lg_config *conf;
static struct lg_fleet *fleet;

static int
setup(void)
{
    return lg_test_fleet_load(text, &conf, &fleet);
}

static struct lg_backend *
pick(const struct lg_route_req *req)
{
    const struct lg_model_route *route = lg_fleet_find_model(fleet, "m");
    struct lg_route_result out = { 0 };
    struct lg_backend *b = NULL;

    if (route != NULL && lg_router_pick(fleet->router, route, req, 0, &out) == LG_OK) {
        b = out.backend;
    }
    lg_route_result_clear(&out);
    return b;
}

/*
 * One prefix, owned by the hash's first backend. That backend goes into
 * slow start (ramp about 0.1 for the test's few milliseconds of the default
 * 10 s): it takes about a tenth of the prefix's requests, the others go
 * elsewhere, and the prefix is still its own when the ramp ends. Thinned
 * before the stages (as it was), the policy saw the owner gone, gave the
 * prefix to the next in hash order for good (one key is no one's excess),
 * and every later request went there.
 */
static int
test_slow_start_keeps_prefix(void)
{
    struct lg_route_req req = { .model = "m",
                                .path = "/v1/chat/completions",
                                .stream = true,
                                .prompt_bytes = 4096,
                                .max_tokens = 16,
                                .prefix_hash = 0x5eed1234abcdull };
    struct lg_backend *owner = pick(&req), *b;
    int to_owner = 0;

    LG_CHECK(owner != NULL);
    LG_CHECK(pick(&req) == owner);
    __atomic_store_n(&owner->up_since_ns, lg_now_ns(), __ATOMIC_RELAXED);
    LG_CHECK(lg_backend_ramp(owner, lg_now_ns(), conf->health.slow_start_ms * LG_NS_PER_MS) < 0.2);
    for (int i = 0; i < 200; i++) {
        b = pick(&req);
        LG_CHECK(b != NULL);
        to_owner += b == owner;
    }
    LG_CHECK(to_owner >= 5 && to_owner <= 50); /* about 20 */
    __atomic_store_n(&owner->up_since_ns, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < 20; i++) {
        LG_CHECK(pick(&req) == owner);
    }
    return 0;
}

/*
 * A ramping backend that would win every pick (least_request: it has the
 * fewest in flight) takes a request with probability ramp, and only while
 * it has fewer in flight than ramp x the others' (at least one): its share
 * follows ramp x its fair share, not ramp x all traffic.
 */
static int
test_slow_start_bounds_inflight(void)
{
    static const char ltext[] = "{\"listen\": \"127.0.0.1:8080\", \"routing\": {\"policy\": "
                                "\"least_request\"},\n" FOUR_BACKENDS;
    struct lg_route_req req = { .model = "m", .path = "/v1/chat/completions", .max_tokens = 16 };
    struct lg_config *lconf;
    struct lg_fleet *lfleet;
    const struct lg_model_route *route;
    struct lg_route_result out = { 0 };
    struct lg_backend *ramping;
    uint64_t ss_ns;
    /* its in-flight count, its ramp's age (s of the default 10), picks it got of 200 */
    static const struct {
        uint32_t inflight;
        int age_s;
        int lo, hi;
    } cases[] = {
        { 0, 0, 5, 50 },   /* ramp ~0.1, none in flight: about a tenth */
        { 1, 0, 0, 0 },    /* ramp ~0.1: 0.1 x 8 < 1, so one is its bound */
        { 4, 5, 70, 150 }, /* ramp 0.55: 0.55 x 8 = 4.4, a 5th passes at 0.55 */
        { 5, 5, 0, 0 },    /* at its bound */
    };

    LG_CHECK(lg_test_fleet_load(ltext, &lconf, &lfleet) == 0);
    route = lg_fleet_find_model(lfleet, "m");
    LG_CHECK(route != NULL && route->n == 4);
    ss_ns = lconf->health.slow_start_ms * LG_NS_PER_MS;
    LG_CHECK(ss_ns == 10 * LG_NS_PER_S);
    ramping = route->backends[3];
    for (size_t k = 0; k < 3; k++) {
        __atomic_store_n(&route->backends[k]->inflight, 8, __ATOMIC_RELAXED);
    }
    for (size_t c = 0; c < LG_ARRAY_SIZE(cases); c++) {
        int got = 0;

        __atomic_store_n(&ramping->inflight, cases[c].inflight, __ATOMIC_RELAXED);
        __atomic_store_n(&ramping->up_since_ns,
                         lg_now_ns() - (uint64_t)cases[c].age_s * LG_NS_PER_S, __ATOMIC_RELAXED);
        LG_CHECK(lg_backend_ramp(ramping, lg_now_ns(), ss_ns) < 0.6);
        for (int i = 0; i < 200; i++) {
            LG_CHECK(lg_router_pick(lfleet->router, route, &req, 0, &out) == LG_OK);
            got += out.backend == ramping;
            if (out.backend != ramping) {
                LG_CHECK(strstr(out.explain, "slow_start") != NULL);
            }
        }
        if (got < cases[c].lo || got > cases[c].hi) {
            fprintf(stderr, "case %zu: %d of 200 picks\n", c, got);
            LG_CHECK(0);
        }
    }
    /* its ramp over: it wins every pick again */
    __atomic_store_n(&ramping->up_since_ns, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&ramping->inflight, 5, __ATOMIC_RELAXED);
    LG_CHECK(lg_router_pick(lfleet->router, route, &req, 0, &out) == LG_OK
             && out.backend == ramping);
    lg_route_result_clear(&out);
    for (size_t k = 0; k < 4; k++) {
        __atomic_store_n(&route->backends[k]->inflight, 0, __ATOMIC_RELAXED);
    }
    lg_test_fleet_free(lconf, lfleet);
    return 0;
}

/*
 * Shadow stages (weight 0): round robin decides; least_request and p2c are
 * scored and shown, nothing more. r1 has 5 requests in flight: counted,
 * least_request (100 ms each) would keep every pick off it, and p2c's filter
 * would drop two of the four candidates at each pick.
 */
static int
test_shadow_stage(void)
{
    static const char stext[] =
        "{\"listen\": \"127.0.0.1:8080\", \"routing\": {\"pipeline\": [\"round_robin\",\n"
        "  {\"policy\": \"least_request\", \"weight\": 0},\n"
        "  {\"policy\": \"p2c\", \"weight\": 0}]},\n" FOUR_BACKENDS;
    struct lg_route_req req = { .model = "m", .path = "/v1/chat/completions", .max_tokens = 16 };
    struct lg_config *sconf;
    struct lg_fleet *sfleet;
    const struct lg_model_route *route;
    struct lg_route_result out = { 0 };
    int count[4] = { 0 };

    LG_CHECK(lg_test_fleet_load(stext, &sconf, &sfleet) == 0);
    route = lg_fleet_find_model(sfleet, "m");
    LG_CHECK(route != NULL && route->n == 4);
    LG_CHECK_STR(lg_router_policy(sfleet->router), "round_robin+least_request(shadow)+p2c(shadow)");
    __atomic_store_n(&route->backends[0]->inflight, 5, __ATOMIC_RELAXED);
    for (int i = 0; i < 40; i++) {
        LG_CHECK(lg_router_pick(sfleet->router, route, &req, 0, &out) == LG_OK);
        for (size_t k = 0; k < 4; k++) {
            count[k] += out.backend == route->backends[k];
        }
        LG_CHECK_STR(out.reason, "next_in_turn");
        LG_CHECK(strstr(out.explain, "filtered") == NULL);
        if (out.backend == route->backends[0]) {
            /* the shadow's own cost for r1, unweighted: 5 x 100 ms */
            LG_CHECK(strstr(out.explain, "{\"backend\":\"r1\",\"inflight\":5,") != NULL);
            LG_CHECK(strstr(out.explain, ",500,") != NULL);
        }
    }
    LG_CHECK(count[0] == 10 && count[1] == 10 && count[2] == 10 && count[3] == 10);
    lg_route_result_clear(&out);
    __atomic_store_n(&route->backends[0]->inflight, 0, __ATOMIC_RELAXED);
    lg_test_fleet_free(sconf, sfleet);
    return 0;
}

/*
 * The candidates' explanation is a JSON array whatever its length: cut
 * where the next candidate would not fit (then {"more": N} says how many
 * were left out), never without its closing bracket. A list that filled the
 * buffer to its last byte lost its "]" (the access log line no longer
 * parsed); backends' names of every length from 1 to 48 and 1 to 12
 * candidates end the list at every offset.
 */
static int
test_explain_is_json(void)
{
    for (int len = 1; len <= 48; len++) {
        char text_n[4096], name[64];
        size_t at;
        struct lg_config *c;
        struct lg_fleet *f;
        const struct lg_model_route *route;

        memset(name, 'a', (size_t)len);
        name[len] = '\0';
        at = (size_t)snprintf(text_n, sizeof(text_n),
                              "{\"listen\": \"127.0.0.1:8080\", \"routing\": {\"policy\": "
                              "\"ttft\"}, \"backends\": [");
        for (int i = 0; i < 12; i++) {
            at += (size_t)snprintf(text_n + at, sizeof(text_n) - at,
                                   "%s{\"name\": \"%s%d\", \"url\": \"http://127.0.0.1:%d\", "
                                   "\"models\": [\"m\"]}",
                                   i ? ", " : "", name, i, 9001 + i);
        }
        snprintf(text_n + at, sizeof(text_n) - at, "]}");
        LG_CHECK(lg_test_fleet_load(text_n, &c, &f) == 0);
        route = lg_fleet_find_model(f, "m");
        LG_CHECK(route != NULL);
        for (int n = 1; n <= 12; n++) {
            struct lg_route_req req = {
                .model = "m", .path = "/v1/chat/completions", .stream = true, .prompt_bytes = 1000
            };
            struct lg_route_result out = { 0 };
            struct lg_tried tried = { 0 };
            json_error_t err;
            json_t *list;

            for (int i = n; i < 12; i++) {
                lg_tried_add(&tried, (size_t)i, route->n); /* the first n are candidates */
            }
            LG_CHECK(lg_router_pick(f->router, route, &req, &tried, &out) == LG_OK);
            list = json_loads(out.explain, 0, &err);
            if (!json_is_array(list)) {
                fprintf(stderr, "names %d, %d candidates: %s: %s\n", len, n, err.text, out.explain);
                return 1;
            }
            LG_CHECK(strlen(out.explain) < LG_ROUTE_EXPLAIN_BYTES);
            json_decref(list);
            lg_route_result_clear(&out);
            lg_tried_clear(&tried);
        }
        lg_test_fleet_free(c, f);
    }
    return 0;
}

/*
 * A fleet of 50: the access log's explanation stops at its budget and says how
 * many candidates it left out; a caller that asks for more room (the admin
 * API's dry run, which the status page's Score column reads) gets them all.
 */
static int
test_explain_budget(void)
{
    char big[16384];
    size_t n = 0;
    struct lg_route_req req = {
        .model = "m", .path = "/v1/chat/completions", .max_tokens = 16, .prompt_bytes = 1024
    };
    struct lg_config *bconf;
    struct lg_fleet *bfleet;
    const struct lg_model_route *route;
    struct lg_route_result out = { 0 };
    size_t listed = 0;

    n += (size_t)snprintf(big + n, sizeof(big) - n, "{\"listen\": \":0\", \"backends\": [");
    for (int i = 0; i < 50; i++) {
        n += (size_t)snprintf(big + n, sizeof(big) - n,
                              "%s{\"name\": \"b%02d\", \"url\": \"http://127.0.0.1:%d\", "
                              "\"models\": [\"m\"]}",
                              i ? "," : "", i, 9000 + i);
    }
    snprintf(big + n, sizeof(big) - n, "]}");
    LG_CHECK(lg_test_fleet_load(big, &bconf, &bfleet) == 0);
    route = lg_fleet_find_model(bfleet, "m");
    LG_CHECK(route != NULL && route->n == 50);
    LG_CHECK(lg_router_pick(bfleet->router, route, &req, 0, &out) == LG_OK);
    LG_CHECK(strlen(out.explain) <= LG_ROUTE_EXPLAIN_BYTES);
    LG_CHECK(strstr(out.explain, "{\"more\":") != NULL);
    out.explain_max = (size_t)50 * 512;
    LG_CHECK(lg_router_pick(bfleet->router, route, &req, 0, &out) == LG_OK);
    LG_CHECK(strstr(out.explain, "\"more\"") == NULL);
    for (const char *p = out.explain; (p = strstr(p, "{\"backend\":")) != NULL; p++) {
        listed++;
    }
    LG_CHECK(listed == 50);
    LG_CHECK(strstr(out.explain, "{\"backend\":\"b49\",") != NULL);
    lg_route_result_clear(&out);
    lg_test_fleet_free(bconf, bfleet);
    return 0;
}

static int
teardown(void)
{
    return lg_test_fleet_free(conf, fleet);
}

LG_TEST_MAIN(setup, test_slow_start_keeps_prefix, test_slow_start_bounds_inflight,
             test_shadow_stage, test_explain_is_json, test_explain_budget, teardown)
