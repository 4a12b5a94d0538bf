/*
 * test_loadreport.c: engines' load reports (fleet/loadreport.h) read from
 * the engines' own formats (the fixtures in tests/fixtures/engines/), odd
 * input refused, and a report folded into a backend's engine state
 * (lg_load_report_fold, fleet/backend.h): newer than the scrape, it wins.
 */
#include <math.h>
#include <string.h>

#include "fleet/backend.h"
#include "fleet/loadreport.h"
#include "lg_test.h"

#define MS(x) ((uint64_t)(x)*LG_NS_PER_MS)

/* The value of the fixture's header line (after "endpoint-load-metrics:"). */
static long
header_value(const char *rel, char *buf, size_t size, const char **value)
{
    long n = lg_test_read_src(rel, buf, size);
    const char *colon = n > 0 ? strchr(buf, ':') : NULL;

    if (colon == NULL) {
        return -1;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) {
        buf[--n] = '\0';
    }
    *value = colon + 1;
    return n - (colon + 1 - buf);
}

static int
test_vllm_header(void)
{
    char buf[4096];
    const char *v;
    long n;
    struct lg_load_report r;

    n = header_value("tests/fixtures/engines/vllm/load_metrics_text.hdr", buf, sizeof(buf), &v);
    LG_CHECK(n > 0);
    LG_CHECK(lg_load_report_header_parse(v, (size_t)n, &r) == LG_OK);
    LG_CHECK(r.waiting == 3.0 && r.kv_usage == 0.4375 && r.running == -1 && r.total == -1);
    n = header_value("tests/fixtures/engines/vllm/load_metrics_json.hdr", buf, sizeof(buf), &v);
    LG_CHECK(n > 0);
    LG_CHECK(lg_load_report_header_parse(v, (size_t)n, &r) == LG_OK);
    LG_CHECK(r.waiting == 3.0 && r.kv_usage == 0.4375 && r.running == -1);
    /* the format's name in any case; unknown names skipped */
    v = "text named_metrics.foo=2, named_metrics.num_requests_waiting=7";
    LG_CHECK(lg_load_report_header_parse(v, strlen(v), &r) == LG_OK && r.waiting == 7);
    return 0;
}

static int
test_header_refused(void)
{
    static const char *const bad[] = {
        "",
        "TEXT",
        "TEXT ",
        "XML named_metrics.num_requests_waiting=1",
        "TEXT num_requests_waiting=1",            /* not a named metric */
        "TEXT named_metrics.num_requests_waiting=", /* no value */
        "TEXT named_metrics.num_requests_waiting=1x",
        "TEXT named_metrics.num_requests_waiting=-1",
        "TEXT named_metrics.num_requests_waiting=nan",
        "TEXT named_metrics.kv_cache_usage_perc=1.5",
        "JSON {\"named_metrics\": [1]}",
        "JSON {\"named_metrics\": {\"num_requests_waiting\": \"3\"}}",
        "JSON {",
        "TEXTnamed_metrics.num_requests_waiting=1",
    };
    struct lg_load_report r;

    for (size_t i = 0; i < LG_ARRAY_SIZE(bad); i++) {
        if (lg_load_report_header_parse(bad[i], strlen(bad[i]), &r) != LG_EINVAL) {
            fprintf(stderr, "accepted: %s\n", bad[i]);
            return 1;
        }
        LG_CHECK(r.waiting == -1 && r.kv_usage == -1);
    }
    return 0;
}

static int
test_bodies(void)
{
    char buf[16384];
    long n;
    struct lg_load_report r;
    const char *s;

    n = lg_test_read_src("tests/fixtures/engines/vllm/load.json", buf, sizeof(buf));
    LG_CHECK(n > 0);
    LG_CHECK(lg_load_report_body_parse(buf, (size_t)n, &r) == LG_OK);
    LG_CHECK(r.total == 5 && r.waiting == -1 && r.running == -1);
    n = lg_test_read_src("tests/fixtures/engines/sglang/v1_loads.json", buf, sizeof(buf));
    LG_CHECK(n > 0);
    LG_CHECK(lg_load_report_body_parse(buf, (size_t)n, &r) == LG_OK);
    LG_CHECK(r.running == 12 && r.waiting == 3 && r.slots == 128);
    LG_CHECK(fabs(r.kv_usage - 0.125) < 1e-9 && fabs(r.tokens_per_s - 1523.45) < 1e-9);
    n = lg_test_read_src("tests/fixtures/engines/sglang/v1_loads_core.json", buf, sizeof(buf));
    LG_CHECK(n > 0);
    LG_CHECK(lg_load_report_body_parse(buf, (size_t)n, &r) == LG_OK);
    LG_CHECK(r.running == 12 && r.waiting == 2);
    s = "{\"server_load\":-1}";
    LG_CHECK(lg_load_report_body_parse(s, strlen(s), &r) == LG_EINVAL);
    s = "{\"detail\":\"unknown section\"}";
    LG_CHECK(lg_load_report_body_parse(s, strlen(s), &r) == LG_EINVAL);
    s = "[1]";
    LG_CHECK(lg_load_report_body_parse(s, strlen(s), &r) == LG_EINVAL);
    return 0;
}

static struct lg_backend_engine
scraped(int32_t waiting, int32_t running, uint64_t t_ns, uint32_t inflight)
{
    struct lg_backend_engine e = { .waiting = waiting, .running = running, .kv_usage = 0.5,
                                   .t_ns = t_ns, .inflight_at_scrape = inflight };

    return e;
}

static int
test_fold(void)
{
    struct lg_backend_engine e;
    struct lg_backend_report rep = { .source = LG_LOAD_SRC_HEADER };

    /* an older report leaves the scrape alone */
    e = scraped(1, 4, MS(1000), 4);
    rep.t_ns = MS(900);
    rep.r = (struct lg_load_report){ .waiting = 9, .running = -1, .total = -1, .kv_usage = 0.9,
                                     .slots = -1, .tokens_per_s = -1 };
    LG_CHECK(lg_load_report_fold(&e, &rep) == LG_LOAD_SRC_SCRAPE);
    LG_CHECK(e.waiting == 1 && e.running == 4 && e.t_ns == MS(1000));
    /* vLLM's header: waiting and KV from it, running moved by ours since */
    rep.t_ns = MS(1100);
    rep.inflight_at = 6;
    LG_CHECK(lg_load_report_fold(&e, &rep) == LG_LOAD_SRC_HEADER);
    LG_CHECK(e.waiting == 9 && e.running == 6 && e.kv_usage == 0.9 && e.t_ns == MS(1100));
    LG_CHECK(e.inflight_at_scrape == 6);
    /* ... at most the slots known */
    e = scraped(0, 4, MS(1000), 4);
    e.slots_declared = 5;
    LG_CHECK(lg_load_report_fold(&e, &rep) == LG_LOAD_SRC_HEADER);
    LG_CHECK(e.running == 5);
    /* vLLM's /load: a total split at the slots */
    e = scraped(0, 2, MS(1000), 2);
    e.slots_declared = 4;
    rep.source = LG_LOAD_SRC_POLL;
    rep.r = (struct lg_load_report){ .waiting = -1, .running = -1, .total = 7, .kv_usage = -1,
                                     .slots = -1, .tokens_per_s = -1 };
    LG_CHECK(lg_load_report_fold(&e, &rep) == LG_LOAD_SRC_POLL);
    LG_CHECK(e.running == 4 && e.waiting == 3 && e.kv_usage == 0.5);
    /* SGLang's: both counts, and its slots when none are said */
    e = scraped(0, 2, MS(1000), 2);
    rep.r = (struct lg_load_report){ .waiting = 1, .running = 8, .total = -1, .kv_usage = 0.2,
                                     .slots = 8, .tokens_per_s = 100 };
    LG_CHECK(lg_load_report_fold(&e, &rep) == LG_LOAD_SRC_POLL);
    LG_CHECK(e.running == 8 && e.waiting == 1 && e.slots_declared == 8 && e.kv_usage == 0.2);
    /* waiting alone with no scrape to move: nothing to count by */
    e = scraped(-1, -1, 0, 0);
    rep.r = (struct lg_load_report){ .waiting = 1, .running = -1, .total = -1, .kv_usage = -1,
                                     .slots = -1, .tokens_per_s = -1 };
    LG_CHECK(lg_load_report_fold(&e, &rep) == LG_LOAD_SRC_SCRAPE);
    return 0;
}

/* A backend keeps the newest report it was given. */
static int
test_publish(void)
{
    struct lg_backend_conf conf = { .name = "r1",
                                    .url = "http://127.0.0.1:9001",
                                    .host = "127.0.0.1",
                                    .host_header = "127.0.0.1:9001",
                                    .port = 9001 };
    struct lg_backend *b = lg_backend_new(&conf, 1);
    struct lg_backend_report rep = { .source = LG_LOAD_SRC_HEADER }, got;

    rep.r.waiting = 2;
    rep.t_ns = MS(200);
    lg_backend_publish_report(b, &rep);
    rep.r.waiting = 5;
    rep.t_ns = MS(100);
    lg_backend_publish_report(b, &rep);
    lg_backend_read_report(b, &got);
    LG_CHECK(got.r.waiting == 2 && got.t_ns == MS(200));
    lg_backend_unref(b);
    return 0;
}

LG_TEST_MAIN(test_vllm_header, test_header_refused, test_bodies, test_fold, test_publish)
