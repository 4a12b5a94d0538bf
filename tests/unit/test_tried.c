/*
 * test_tried.c: the set of backends a request has tried (route/tried.h),
 * exact past index 63, and the router's picks on a route of 200 backends:
 * every one is a candidate, a retry leaves out each one tried wherever it
 * sits in the route, the explanation can list all 200, and p2c samples two
 * of them (it kept every candidate past 64).
 */
#include <stdio.h>
#include <string.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "lg_test.h"
#include "lg_test_fleet.h"
#include "route/router.h"
#include "route/tried.h"

#define BIG 200

static int
test_set(void)
{
    static const size_t in[] = { 0, 1, 63, 64, 65, 127, 128, 191, 192, 199 };
    struct lg_tried t = { 0 };

    for (size_t k = 0; k < LG_ARRAY_SIZE(in); k++) {
        lg_tried_add(&t, in[k], BIG);
        lg_tried_add(&t, in[k], BIG); /* twice: counted once */
    }
    LG_CHECK(t.count == LG_ARRAY_SIZE(in));
    LG_CHECK(t.nhigh == 3); /* 136 backends past 63: three words, sized to the route */
    for (size_t i = 0; i < BIG + 100; i++) {
        bool want = false;

        for (size_t k = 0; k < LG_ARRAY_SIZE(in); k++) {
            want |= in[k] == i;
        }
        LG_CHECK(lg_tried_has(&t, i) == want);
    }
    lg_tried_del(&t, 64);
    lg_tried_del(&t, 64);
    lg_tried_del(&t, 2);    /* never tried */
    lg_tried_del(&t, 4000); /* past the words: nothing */
    LG_CHECK(t.count == LG_ARRAY_SIZE(in) - 1 && !lg_tried_has(&t, 64) && lg_tried_has(&t, 65));
    lg_tried_clear(&t);
    LG_CHECK(t.count == 0 && t.high == NULL && !lg_tried_has(&t, 0) && !lg_tried_has(&t, 199));
    lg_tried_clear(&t); /* twice: safe */
    /* up to 64 backends: nothing allocated */
    for (size_t i = 0; i < 64; i++) {
        lg_tried_add(&t, i, 64);
    }
    LG_CHECK(t.count == 64 && t.high == NULL && t.low == ~0ull);
    /* a caller that passes a route shorter than the index still gets it */
    lg_tried_add(&t, 300, 10);
    LG_CHECK(lg_tried_has(&t, 300) && t.nhigh == 4);
    lg_tried_clear(&t);
    LG_CHECK(!lg_tried_has(NULL, 3) && lg_tried_count(NULL) == 0);
    return 0;
}

/* 200 backends where nothing listens: no checks (under a sanitizer the test
 * outlasts three of them, which would mark them down), no scrapes */
static int
big_fleet(const char *routing, struct lg_config **c, struct lg_fleet **f)
{
    static char text[32768];
    size_t n = 0;

    n += (size_t)snprintf(text + n, sizeof(text) - n,
                          "{\"listen\": \":0\", \"routing\": %s, \"health\": {\"slow_start\": 0, "
                          "\"scrape_interval\": 0, \"interval\": \"1h\"},"
                          " \"backends\": [",
                          routing);
    for (int i = 0; i < BIG; i++) {
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "%s{\"name\": \"b%03d\", \"url\": \"http://127.0.0.1:%d\", "
                              "\"models\": [\"m\"]}",
                              i ? "," : "", i, 10000 + i);
    }
    snprintf(text + n, sizeof(text) - n, "]}");
    return lg_test_fleet_load(text, c, f);
}

static size_t
count(const char *s, const char *what)
{
    size_t n = 0;

    for (const char *p = s; (p = strstr(p, what)) != NULL; p++) {
        n++;
    }
    return n;
}

static int
test_router_picks_past_64(void)
{
    struct lg_route_req req = {
        .model = "m", .path = "/v1/chat/completions", .max_tokens = 16, .prompt_bytes = 1024
    };
    struct lg_route_result out = { 0 };
    struct lg_tried t = { 0 };
    struct lg_config *conf;
    struct lg_fleet *fleet;
    const struct lg_model_route *route;
    bool seen[BIG] = { false };

    LG_CHECK(big_fleet("{\"policy\": \"round_robin\"}", &conf, &fleet) == 0);
    route = lg_fleet_find_model(fleet, "m");
    LG_CHECK(route != NULL && route->n == BIG);
    /* round robin reaches every one of them */
    for (int k = 0; k < BIG; k++) {
        LG_CHECK(lg_router_pick(fleet->router, route, &req, NULL, &out) == LG_OK);
        for (size_t i = 0; i < BIG; i++) {
            seen[i] |= route->backends[i] == out.backend;
        }
    }
    for (size_t i = 0; i < BIG; i++) {
        LG_CHECK(seen[i]);
    }
    /* every one but the one left: it is the pick, wherever it sits */
    for (size_t left = 0; left < BIG; left += 33) {
        for (size_t i = 0; i < BIG; i++) {
            if (i != left) {
                lg_tried_add(&t, i, route->n);
            }
        }
        LG_CHECK(lg_router_has_candidate(route, &t, 0));
        LG_CHECK(lg_router_pick(fleet->router, route, &req, &t, &out) == LG_OK);
        LG_CHECK(out.backend == route->backends[left]);
        LG_CHECK(strcmp(out.reason, "only_candidate") == 0);
        lg_tried_add(&t, left, route->n);
        LG_CHECK(!lg_router_has_candidate(route, &t, 0));
        LG_CHECK(lg_router_pick(fleet->router, route, &req, &t, &out) == LG_EBUSY);
        LG_CHECK(strcmp(out.reason, "all_backends_tried") == 0);
        lg_tried_clear(&t);
    }
    /* a retry never goes back: 200 picks, each tried after, cover all 200 */
    for (int k = 0; k < BIG; k++) {
        size_t at = BIG;

        LG_CHECK(lg_router_pick(fleet->router, route, &req, &t, &out) == LG_OK);
        for (size_t i = 0; i < BIG; i++) {
            at = route->backends[i] == out.backend ? i : at;
        }
        LG_CHECK(at < BIG && !lg_tried_has(&t, at));
        lg_tried_add(&t, at, route->n);
    }
    LG_CHECK(t.count == BIG);
    lg_tried_clear(&t);
    /* the admin API's dry run asks room for all: all 200 explained */
    out.explain_max = (size_t)BIG * 512;
    LG_CHECK(lg_router_pick(fleet->router, route, &req, NULL, &out) == LG_OK);
    LG_CHECK(count(out.explain, "{\"backend\":") == BIG && strstr(out.explain, "\"more\"") == NULL);
    LG_CHECK(strstr(out.explain, "{\"backend\":\"b199\",") != NULL);
    lg_route_result_clear(&out);
    lg_test_fleet_free(conf, fleet);
    return 0;
}

static int
test_p2c_samples_two_of_200(void)
{
    struct lg_route_req req = {
        .model = "m", .path = "/v1/chat/completions", .max_tokens = 16, .prompt_bytes = 1024
    };
    struct lg_route_result out = { 0 };
    struct lg_config *conf;
    struct lg_fleet *fleet;
    const struct lg_model_route *route;
    unsigned hits[BIG] = { 0 };

    LG_CHECK(big_fleet("{\"policy\": \"p2c\"}", &conf, &fleet) == 0);
    route = lg_fleet_find_model(fleet, "m");
    for (int k = 0; k < 4000; k++) {
        out.explain_max = k < 50 ? (size_t)BIG * 512 : 0; /* all explained, the first 50 */
        LG_CHECK(lg_router_pick(fleet->router, route, &req, NULL, &out) == LG_OK);
        LG_CHECK(k >= 50 || count(out.explain, "\"filtered\":\"p2c\"") == BIG - 2);
        LG_CHECK(k >= 50 || count(out.explain, "\"score\":") == 2);
        for (size_t i = 0; i < BIG; i++) {
            hits[i] += route->backends[i] == out.backend;
        }
    }
    /* drawn from all of them, past 64 too (20 expected each) */
    for (size_t i = 0; i < BIG; i++) {
        LG_CHECK(hits[i] > 0);
    }
    lg_route_result_clear(&out);
    lg_test_fleet_free(conf, fleet);
    return 0;
}

LG_TEST_MAIN(test_set, test_router_picks_past_64, test_p2c_samples_two_of_200)
