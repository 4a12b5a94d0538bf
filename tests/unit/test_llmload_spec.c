/*
 * test_llmload_spec.c: llmload's size specs, --burst, durations, seeded
 * streams and trace lines.
 */
#include <math.h>

#include "../../tools/llmload/spec.c"
#include "../../tools/llmload/trace.c"
#include "lg_test.h"

static int
test_spec_forms(void)
{
    struct lg_ld_spec s;
    char err[256];

    LG_CHECK(lg_ld_spec_parse(&s, "800", 1000, err, sizeof(err)) == LG_OK);
    LG_CHECK(s.n == 1 && s.lo[0] == 800 && s.hi[0] == 800);
    LG_CHECK(lg_ld_spec_parse(&s, "10-20", 1000, err, sizeof(err)) == LG_OK);
    LG_CHECK(s.n == 1 && s.lo[0] == 10 && s.hi[0] == 20);
    LG_CHECK(lg_ld_spec_max(&s) == 20 && lg_ld_spec_mean(&s) == 15);
    LG_CHECK(lg_ld_spec_parse(&s, "mix:90%800,10%64000", 100000, err, sizeof(err)) == LG_OK);
    LG_CHECK(s.n == 2 && s.lo[1] == 64000 && fabs(s.cum[0] - 0.9) < 1e-12 && s.cum[1] == 1.0);
    LG_CHECK(fabs(lg_ld_spec_mean(&s) - 7120) < 1e-6);
    LG_CHECK(lg_ld_spec_parse(&s, "mix:33.3%1,33.3%2-3,33.4%4", 10, err, sizeof(err)) == LG_OK);
    LG_CHECK(s.n == 3 && s.lo[1] == 2 && s.hi[1] == 3);
    return 0;
}

static int
test_spec_errors(void)
{
    static const char *const bad[] = {
        "",
        "-1",
        "1-",
        "5-3",
        "abc",
        "1.5",
        "12x",
        "1001",
        "mix:",
        "mix:100%",
        "mix:50%1,40%2",
        "mix:50%1,50%2,",
        "mix:%1",
        "mix:0%1,100%2",
        "mix:-5%1,105%2",
        "mix:50%1;50%2",
        "mix:100%5-2",
        "mix:nan%1",
        "mix:100%99999999999999999999999",
    };
    struct lg_ld_spec s;
    char err[256];

    for (size_t i = 0; i < LG_ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        if (lg_ld_spec_parse(&s, bad[i], 1000, err, sizeof(err)) != LG_EINVAL) {
            fprintf(stderr, "accepted '%s'\n", bad[i]);
            return 1;
        }
        LG_CHECK(err[0] != '\0');
    }
    return 0;
}

static int
test_spec_sampling(void)
{
    struct lg_ld_spec s;
    struct lg_ld_rng r, r2;
    char err[256];
    int big = 0, lo = 0;

    LG_CHECK(lg_ld_spec_parse(&s, "mix:90%800,10%2000-4000", 100000, err, sizeof(err)) == 0);
    lg_ld_rng_init(&r, 42, 1);
    lg_ld_rng_init(&r2, 42, 1);
    for (int i = 0; i < 100000; i++) {
        uint64_t v = lg_ld_spec_sample(&s, &r);

        LG_CHECK(v == lg_ld_spec_sample(&s, &r2)); /* same seed, same sequence */
        LG_CHECK(v == 800 || (v >= 2000 && v <= 4000));
        big += v != 800;
        lo += v == 2000;
    }
    LG_CHECK(big > 9500 && big < 10500);
    LG_CHECK(lo > 0); /* the bounds are inclusive */
    lg_ld_rng_init(&r2, 43, 1);
    LG_CHECK(lg_ld_rng_next(&r) != lg_ld_rng_next(&r2));
    lg_ld_rng_init(&r2, 42, 2);
    lg_ld_rng_init(&r, 42, 1);
    LG_CHECK(lg_ld_rng_next(&r) != lg_ld_rng_next(&r2)); /* streams differ */
    for (int i = 0; i < 1000; i++) {
        double u = lg_ld_rng_unit(&r);

        LG_CHECK(u > 0 && u <= 1);
        LG_CHECK(lg_ld_rng_range(&r, 5, 5) == 5);
    }
    return 0;
}

static int
test_burst_and_seconds(void)
{
    struct lg_ld_burst b;
    char err[256];
    double s;

    LG_CHECK(lg_ld_burst_parse(&b, "2:1:3", err, sizeof(err)) == LG_OK);
    LG_CHECK(b.enabled && b.factor == 2 && b.on_s == 1 && b.off_s == 3);
    /* mean = (2*1 + f*3) / 4 = 1 */
    LG_CHECK(fabs(lg_ld_burst_off_factor(&b) - 2.0 / 3.0) < 1e-12);
    LG_CHECK(lg_ld_burst_parse(&b, "4:500ms:1.5", err, sizeof(err)) == LG_OK);
    LG_CHECK(b.on_s == 0.5 && fabs(lg_ld_burst_off_factor(&b) - 0.0) < 1e-12);
    LG_CHECK(lg_ld_burst_parse(&b, "5:1:1", err, sizeof(err)) == LG_EINVAL); /* 5 > 2 */
    LG_CHECK(lg_ld_burst_parse(&b, "0.5:1:1", err, sizeof(err)) == LG_EINVAL);
    LG_CHECK(lg_ld_burst_parse(&b, "2:1", err, sizeof(err)) == LG_EINVAL);
    LG_CHECK(lg_ld_burst_parse(&b, "2:1:1:1", err, sizeof(err)) == LG_EINVAL);
    LG_CHECK(lg_ld_parse_seconds("2.5", &s) == LG_OK && s == 2.5);
    LG_CHECK(lg_ld_parse_seconds("250ms", &s) == LG_OK && s == 0.25);
    LG_CHECK(lg_ld_parse_seconds("3s", &s) == LG_OK && s == 3);
    LG_CHECK(lg_ld_parse_seconds("2m", &s) == LG_OK && s == 120);
    LG_CHECK(lg_ld_parse_seconds("ms", &s) == LG_EINVAL);
    LG_CHECK(lg_ld_parse_seconds("-1", &s) == LG_EINVAL);
    LG_CHECK(lg_ld_parse_seconds("1h", &s) == LG_EINVAL);
    return 0;
}

static int
test_arrivals(void)
{
    struct lg_ld_opts o;
    struct lg_ld_gen g;
    char err[64];
    double t = 0, on_time = 0;
    int n = 0, on = 0;

    memset(&o, 0, sizeof(o));
    o.seed = 9;
    o.rate = 1000;
    lg_ld_spec_parse(&o.prompt_bytes, "1", 10, err, sizeof(err));
    lg_ld_spec_parse(&o.max_tokens, "1", 10, err, sizeof(err));
    lg_ld_gen_init(&g, &o);
    while ((t = lg_ld_gen_arrival(&g)) < 20) {
        n++;
    }
    lg_ld_gen_free(&g);
    LG_CHECK(n > 19400 && n < 20600); /* 20000 +- 4.2 sigma */

    LG_CHECK(lg_ld_burst_parse(&o.burst, "3:1:4", err, sizeof(err)) == LG_OK);
    lg_ld_gen_init(&g, &o);
    n = 0;
    while ((t = lg_ld_gen_arrival(&g)) < 50) {
        n++;
        on += fmod(t, 5.0) < 1.0;
    }
    lg_ld_gen_free(&g);
    on_time = 10; /* ten ON windows of 1 s at 3000/s */
    LG_CHECK(n > 48500 && n < 51500);
    LG_CHECK(on > 0.95 * 3000 * on_time && on < 1.05 * 3000 * on_time);
    return 0;
}

static int
test_trace_lines(void)
{
    struct lg_ld_item it;
    char err[256];
    const char *ok = "{\"t_us\":1500,\"prompt_bytes\":800,\"max_tokens\":64,\"group\":3}\n";
    const char *nogroup = "{\"t_us\":0,\"prompt_bytes\":1,\"max_tokens\":2}";

    LG_CHECK(lg_ld_trace_parse_line(ok, strlen(ok), &it, err, sizeof(err)) == LG_OK);
    LG_CHECK(it.t_us == 1500 && it.prompt_bytes == 800 && it.max_tokens == 64 && it.group == 3);
    LG_CHECK(lg_ld_trace_parse_line(nogroup, strlen(nogroup), &it, err, sizeof(err)) == LG_OK);
    LG_CHECK(it.group == -1);
    LG_CHECK(lg_ld_trace_parse_line("  \n", 3, &it, err, sizeof(err)) == LG_EAGAIN);
    LG_CHECK(lg_ld_trace_parse_line("# c", 3, &it, err, sizeof(err)) == LG_EAGAIN);
    LG_CHECK(lg_ld_trace_parse_line("{}", 2, &it, err, sizeof(err)) == LG_EINVAL);
    LG_CHECK(strstr(err, "t_us") != NULL);
    LG_CHECK(lg_ld_trace_parse_line("[1]", 3, &it, err, sizeof(err)) == LG_EINVAL);
    LG_CHECK(lg_ld_trace_parse_line("{\"t_us\":-1,\"prompt_bytes\":1,\"max_tokens\":1}", 43, &it,
                                    err, sizeof(err))
             == LG_EINVAL);
    LG_CHECK(lg_ld_trace_parse_line("{\"t_us\":1,\"prompt_bytes\":\"1\",\"max_tokens\":1}", 44, &it,
                                    err, sizeof(err))
             == LG_EINVAL);
    LG_CHECK(it.model == NULL && it.api == -1 && it.stream == -1 && !it.no_max_tokens);
    return 0;
}

/* A line from a recorded log: its own model, API, stream flag and body members. */
static int
test_trace_own_members(void)
{
    struct lg_ld_item it;
    char err[256];
    const char *own = "{\"t_us\":5,\"prompt_bytes\":9,\"max_tokens\":null,\"model\":\"a\\\"b\","
                      "\"api\":\"completions\",\"stream\":false,"
                      "\"extra_body\":{\"sim_completion_tokens\":7}}";
    static const char *const bad[] = {
        "{\"t_us\":5,\"prompt_bytes\":9,\"max_tokens\":1,\"model\":\"\"}",
        "{\"t_us\":5,\"prompt_bytes\":9,\"max_tokens\":1,\"model\":7}",
        "{\"t_us\":5,\"prompt_bytes\":9,\"max_tokens\":1,\"api\":\"chat/completions\"}",
        "{\"t_us\":5,\"prompt_bytes\":9,\"max_tokens\":1,\"stream\":1}",
        "{\"t_us\":5,\"prompt_bytes\":9,\"max_tokens\":1,\"extra_body\":[1]}",
        "{\"t_us\":5,\"prompt_bytes\":9,\"max_tokens\":1,\"model\":\"m\",\"stream\":\"y\"}",
    };
    static const char *const what[] = { "model", "model", "api", "stream", "extra_body", "stream" };

    LG_CHECK(lg_ld_trace_parse_line(own, strlen(own), &it, err, sizeof(err)) == LG_OK);
    LG_CHECK(it.no_max_tokens && it.api == LG_LD_API_COMPLETIONS && it.stream == 0);
    LG_CHECK(it.model != NULL && strcmp(it.model, "\"a\\\"b\"") == 0); /* kept as JSON */
    LG_CHECK(it.extra != NULL && strcmp(it.extra, "\"sim_completion_tokens\":7") == 0);
    free(it.model);
    free(it.extra);
    for (size_t i = 0; i < LG_ARRAY_SIZE(bad); i++) {
        LG_CHECK(lg_ld_trace_parse_line(bad[i], strlen(bad[i]), &it, err, sizeof(err))
                 == LG_EINVAL);
        LG_CHECK(strstr(err, what[i]) != NULL);
        LG_CHECK(it.model == NULL && it.extra == NULL); /* nothing owned after an error */
    }
    return 0;
}

LG_TEST_MAIN(test_spec_forms, test_spec_errors, test_spec_sampling, test_burst_and_seconds,
             test_arrivals, test_trace_lines, test_trace_own_members)
