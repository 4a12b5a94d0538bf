/*
 * test_enginemetrics.c: the Prometheus text parser compared trace by trace
 * (every sample it reports, in order), and each engine's vocabulary on the
 * real-looking expositions of the fuzz corpus.
 */
#include <math.h>
#include <stdio.h>

#include "enginemetrics.h"
#include "lg_test.h"

struct trace {
    char buf[4096];
    size_t len;
};

static void
trace_on_sample(void *arg, const char *name, size_t name_len, const char *labels, size_t labels_len,
                double value)
{
    struct trace *t = arg;

    t->len += (size_t)snprintf(t->buf + t->len, sizeof(t->buf) - t->len, "%.*s{%.*s}=%g\n",
                               (int)name_len, name, (int)labels_len, labels, value);
}

static int
test_parser_trace(void)
{
    static const char text[] = "# HELP a_total A counter.\n"
                               "# TYPE a_total counter\n"
                               "a_total 12\n"
                               "b{x=\"1\",y=\"a}b\\\"c\"} 0.5 1712345678000\n"
                               "c:d{} -3e2\r\n"
                               "   e_inf{le=\"+Inf\"}\t+Inf\n"
                               "nan_one NaN\n"
                               "\n"
                               "bad line here\n"
                               "f{unterminated=\"x} 1\n"
                               "g 0x10\n"
                               "h 1 2 3\n"
                               "i{a=\"b\"}\n"
                               "last 7";
    static const char want[] = "a_total{}=12\n"
                               "b{x=\"1\",y=\"a}b\\\"c\"}=0.5\n"
                               "c:d{}=-300\n"
                               "e_inf{le=\"+Inf\"}=inf\n"
                               "nan_one{}=nan\n"
                               "last{}=7\n";
    struct trace t = { .len = 0 };
    uint32_t bad = lg_prom_parse(text, sizeof(text) - 1, trace_on_sample, &t);

    LG_CHECK_STR(t.buf, want);
    LG_CHECK(bad == 5); /* "bad line here", unterminated, hex, extra field, no value */
    return 0;
}

static int
parse_file(const char *name, struct lg_engine_sample *out, enum lg_engine_flavor f)
{
    char rel[256], buf[16384];
    long n;

    snprintf(rel, sizeof(rel), "tests/fuzz/corpus/enginemetrics/%s", name);
    n = lg_test_read_src(rel, buf, sizeof(buf));
    if (n < 1) {
        return -100;
    }
    /* the corpus files start with the fuzzer's flavor byte */
    return lg_engine_metrics_parse(buf + 1, (size_t)n - 1, f, out);
}

static int
test_vocabularies(void)
{
    struct lg_engine_sample s;

    LG_CHECK(parse_file("vllm.txt", &s, LG_ENGINE_AUTO) == LG_OK);
    LG_CHECK(s.flavor == LG_ENGINE_VLLM && s.waiting == 3 && s.running == 7);
    LG_CHECK(fabs(s.kv_usage - 0.4134) < 1e-9 && s.bad_lines == 0);
    LG_CHECK(parse_file("vllm.txt", &s, LG_ENGINE_VLLM) == LG_OK && s.waiting == 3);

    /* older vLLM, two data-parallel engines: counts add up, KV is the fuller */
    LG_CHECK(parse_file("vllm_legacy_dp.txt", &s, LG_ENGINE_AUTO) == LG_OK);
    LG_CHECK(s.waiting == 2 && s.running == 9 && fabs(s.kv_usage - 0.75) < 1e-9);

    LG_CHECK(parse_file("sglang.txt", &s, LG_ENGINE_AUTO) == LG_OK);
    LG_CHECK(s.flavor == LG_ENGINE_SGLANG && s.waiting == 0 && s.running == 12);
    LG_CHECK(fabs(s.kv_usage - 0.08) < 1e-9);

    LG_CHECK(parse_file("tgi.txt", &s, LG_ENGINE_AUTO) == LG_OK);
    LG_CHECK(s.flavor == LG_ENGINE_TGI && s.waiting == 5 && s.running == 16);
    LG_CHECK(s.kv_usage == -1);

    LG_CHECK(parse_file("llamacpp.txt", &s, LG_ENGINE_AUTO) == LG_OK);
    LG_CHECK(s.flavor == LG_ENGINE_LLAMACPP && s.waiting == 1 && s.running == 2);
    LG_CHECK(fabs(s.kv_usage - 0.19) < 1e-9);

    /* told the wrong vocabulary: nothing found, the caller fails open */
    LG_CHECK(parse_file("tgi.txt", &s, LG_ENGINE_VLLM) == LG_EDECLINED);
    LG_CHECK(s.waiting == -1 && s.running == -1);
    return 0;
}

static int
test_unknown_and_odd_values(void)
{
    static const char other[] = "process_cpu_seconds_total 3.2\nhttp_requests_total 10\n";
    static const char odd[] = "vllm:num_requests_waiting NaN\n"
                              "vllm:num_requests_running -4\n"
                              "vllm:num_requests_running 2\n"
                              "vllm:kv_cache_usage_perc 7\n";
    struct lg_engine_sample s;

    LG_CHECK(lg_engine_metrics_parse(other, sizeof(other) - 1, LG_ENGINE_AUTO, &s) == LG_EDECLINED);
    LG_CHECK(s.flavor == LG_ENGINE_AUTO && s.samples == 2);
    LG_CHECK(lg_engine_metrics_parse(odd, sizeof(odd) - 1, LG_ENGINE_AUTO, &s) == LG_OK);
    LG_CHECK(s.waiting == -1 && s.running == 2 && s.kv_usage == 1.0);
    LG_CHECK(lg_engine_metrics_parse("", 0, LG_ENGINE_AUTO, &s) == LG_EDECLINED);
    return 0;
}

/* A renamed series: the current name wins when an engine exports both, else the old one counts. */
static int
test_renamed_series(void)
{
    static const char vllm_both[] = "vllm:gpu_cache_usage_perc{engine=\"0\"} 0.9\n"
                                    "vllm:kv_cache_usage_perc{engine=\"0\"} 0.2\n"
                                    "vllm:num_requests_running{engine=\"0\"} 1.0\n";
    static const char vllm_old[] = "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n"
                                   "vllm:num_requests_running{model_name=\"m\"} 1.0\n";
    static const char sglang_both[] = "sglang:num_requests_running 5.0\n"
                                      "sglang:num_running_reqs{tp_rank=\"0\"} 3.0\n"
                                      "sglang:num_requests_waiting 4.0\n"
                                      "sglang:num_queue_reqs{tp_rank=\"0\"} 1.0\n";
    static const char sglang_old[] = "sglang:num_requests_running{model_name=\"m\"} 5.0\n"
                                     "sglang:num_requests_waiting{model_name=\"m\"} 4.0\n";
    struct lg_engine_sample s;

    LG_CHECK(lg_engine_metrics_parse(vllm_both, sizeof(vllm_both) - 1, LG_ENGINE_AUTO, &s)
             == LG_OK);
    LG_CHECK(fabs(s.kv_usage - 0.2) < 1e-9);
    LG_CHECK(lg_engine_metrics_parse(vllm_old, sizeof(vllm_old) - 1, LG_ENGINE_AUTO, &s) == LG_OK);
    LG_CHECK(fabs(s.kv_usage - 0.9) < 1e-9);
    LG_CHECK(lg_engine_metrics_parse(sglang_both, sizeof(sglang_both) - 1, LG_ENGINE_AUTO, &s)
             == LG_OK);
    LG_CHECK(s.running == 3 && s.waiting == 1);
    LG_CHECK(lg_engine_metrics_parse(sglang_old, sizeof(sglang_old) - 1, LG_ENGINE_SGLANG, &s)
             == LG_OK);
    LG_CHECK(s.running == 5 && s.waiting == 4 && s.kv_usage == -1);
    return 0;
}

LG_TEST_MAIN(test_parser_trace, test_vocabularies, test_unknown_and_odd_values, test_renamed_series)
