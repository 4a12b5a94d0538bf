/*
 * test_llmsim_metrics.c: llmsim's /metrics in each flavor against the real
 * engines' expositions (tests/fixtures/engines/), so the simulator cannot
 * drift from them again: every engine series llmsim writes must exist in
 * the fixture with the same type, HELP text and label names (written in the
 * order the engine's client library writes them), histograms with the same
 * bucket bounds where llmsim claims the engine's; and the gateway's scraper
 * must read llmsim's figures back.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "../../tools/llmsim/engine.c"
#include "../../tools/llmsim/metrics.c"
#include "../../tools/llmsim/prefix.c"
#include "../../tools/llmsim/shm.c"
#include "fleet/enginemetrics.h"
#include "lg_test.h"

#define FAM_MAX  96
#define KEYS_MAX 160
#define LES_MAX  2048

struct fam {
    char name[128];
    char type[16];
    char help[256];
    bool has_help, has_type;
    char keys[KEYS_MAX]; /* label names seen, ",a,b," */
    char les[LES_MAX];   /* bucket bounds seen, ",0.001,1.0," */
    bool unsorted;       /* a sample's labels were not in name order */
};

struct exposition {
    struct fam f[FAM_MAX];
    size_t n;
};

static struct fam *
fam_get(struct exposition *e, const char *name, size_t len)
{
    for (size_t i = 0; i < e->n; i++) {
        if (strlen(e->f[i].name) == len && memcmp(e->f[i].name, name, len) == 0) {
            return &e->f[i];
        }
    }
    if (e->n == FAM_MAX || len >= sizeof(e->f[0].name)) {
        return NULL;
    }
    memset(&e->f[e->n], 0, sizeof(e->f[0]));
    memcpy(e->f[e->n].name, name, len);
    return &e->f[e->n++];
}

static void
set_add(char *set, size_t size, const char *item, size_t len)
{
    char probe[128];

    if (len + 3 > sizeof(probe)) {
        return;
    }
    snprintf(probe, sizeof(probe), ",%.*s,", (int)len, item);
    if (set[0] == '\0') {
        snprintf(set, size, ",");
    }
    if (strstr(set, probe) == NULL && strlen(set) + len + 2 < size) {
        strncat(set, probe + 1, size - strlen(set) - 1);
    }
}

/* The family a sample belongs to: itself, or a histogram's name without its suffix. */
static struct fam *
fam_of_sample(struct exposition *e, const char *name, size_t len)
{
    static const char *const suffixes[] = { "_bucket", "_count", "_sum" };

    for (size_t i = 0; i < e->n; i++) {
        if (strlen(e->f[i].name) == len && memcmp(e->f[i].name, name, len) == 0) {
            return &e->f[i];
        }
    }
    for (size_t s = 0; s < LG_ARRAY_SIZE(suffixes); s++) {
        size_t sl = strlen(suffixes[s]);

        if (len > sl && memcmp(name + len - sl, suffixes[s], sl) == 0) {
            for (size_t i = 0; i < e->n; i++) {
                if (strlen(e->f[i].name) == len - sl && memcmp(e->f[i].name, name, len - sl) == 0
                    && strcmp(e->f[i].type, "histogram") == 0) {
                    return &e->f[i];
                }
            }
        }
    }
    return fam_get(e, name, len); /* a sample without HELP or TYPE */
}

static void
parse_labels(struct fam *f, const char *l, size_t n)
{
    char prev[64] = "";
    size_t i = 0;

    while (i < n) {
        size_t k = i, v;

        while (k < n && l[k] != '=') {
            k++;
        }
        if (k + 1 >= n || l[k + 1] != '"') {
            return;
        }
        v = k + 2;
        while (v < n && l[v] != '"') {
            v += l[v] == '\\' ? 2 : 1;
        }
        if (k - i == 2 && memcmp(l + i, "le", 2) == 0) {
            set_add(f->les, sizeof(f->les), l + k + 2, v - k - 2);
        } else {
            set_add(f->keys, sizeof(f->keys), l + i, k - i);
        }
        if (k - i < sizeof(prev)) {
            char cur[64];

            memcpy(cur, l + i, k - i);
            cur[k - i] = '\0';
            if (prev[0] != '\0' && strcmp(prev, cur) > 0) {
                f->unsorted = true;
            }
            memcpy(prev, cur, k - i + 1);
        }
        i = v + 2; /* past '",' */
    }
}

static void
exposition_parse(struct exposition *e, const char *text, size_t len)
{
    size_t i = 0;

    e->n = 0;
    while (i < len) {
        const char *line = text + i;
        const char *nl = memchr(line, '\n', len - i);
        size_t n = nl ? (size_t)(nl - line) : len - i;

        i += n + 1;
        if (n > 7 && (memcmp(line, "# HELP ", 7) == 0 || memcmp(line, "# TYPE ", 7) == 0)) {
            const char *name = line + 7;
            const char *sp = memchr(name, ' ', n - 7);
            struct fam *f = fam_get(e, name, sp ? (size_t)(sp - name) : n - 7);
            size_t rest = sp ? n - (size_t)(sp + 1 - line) : 0;

            if (f == NULL) {
                continue;
            }
            if (line[2] == 'H') {
                f->has_help = true;
                snprintf(f->help, sizeof(f->help), "%.*s", (int)rest, sp ? sp + 1 : "");
            } else {
                f->has_type = true;
                snprintf(f->type, sizeof(f->type), "%.*s", (int)rest, sp ? sp + 1 : "");
            }
        } else if (n > 0 && line[0] != '#') {
            size_t nl_end = strcspn(line, "{ ");
            struct fam *f = nl_end < n ? fam_of_sample(e, line, nl_end) : NULL;

            if (f != NULL && line[nl_end] == '{') {
                const char *close = memchr(line + nl_end, '}', n - nl_end);

                if (close != NULL) {
                    parse_labels(f, line + nl_end + 1, (size_t)(close - line - nl_end - 1));
                }
            }
        }
    }
}

static char fixture_text[256 * 1024];

static int
fixture_load(struct exposition *e, const char *name)
{
    char rel[256];
    long n;

    snprintf(rel, sizeof(rel), "tests/fixtures/engines/%s", name);
    n = lg_test_read_src(rel, fixture_text, sizeof(fixture_text));
    if (n < 0) {
        return -1;
    }
    exposition_parse(e, fixture_text, (size_t)n);
    return 0;
}

static struct exposition sim_exp, fix_exp;

/* A replica with some load and history, as /metrics would see it. */
static void
sim_setup(struct lg_sim *sim, struct lg_sim_conf *conf, struct lg_sim_model *model, int flavor)
{
    memset(sim, 0, sizeof(*sim));
    memset(conf, 0, sizeof(*conf));
    model->name = model->json = model->label = (char *)"meta-llama/Llama-3.1-8B-Instruct";
    conf->models = model;
    conf->nmodels = 1;
    conf->flavor = (enum lg_sim_flavor)flavor;
    sim->conf = conf;
    TAILQ_INIT(&sim->engine.running);
    sim->engine.conf.slots = 4;
    sim->engine.nrunning = 3;
    sim->engine.nwaiting = 2;
    sim->engine.stats.prompt_tokens = 2097152;
    sim->engine.stats.prefilled_tokens = 1843921;
    sim->engine.stats.generation_tokens = 524288;
    sim->engine.stats.completed = 7;
    sim->engine.stats.completed_tokens = 448;
    sim->engine.stats.gen_counts[3] = 7;
    sim->engine.stats.ttft_counts[5] = 4;
    sim->engine.stats.ttft_counts[9] = 3;
    sim->engine.stats.ttft_sum_s = 1.75;
    sim->engine.stats.prefill_ns = 418377000000ull;
    sim->engine.stats.decode_ns = 9871244000000ull;
    sim->speed = 1;
    sim->counters.requests = 9;
    sim->counters.requests_ok = 7;
}

struct flavor_case {
    int flavor;
    const char *fixture;
    bool sorted_labels; /* prometheus_client writes label names in order */
    bool same_buckets;  /* llmsim's histograms use the engine's bounds */
    double kv;
};

static const struct flavor_case flavor_cases[] = {
    { LG_SIM_FLAVOR_VLLM, "vllm/metrics_v1.prom", true, true, 0.75 },
    /* llmsim's TTFT histogram keeps vLLM's bounds in every flavor */
    { LG_SIM_FLAVOR_SGLANG, "sglang/metrics.prom", true, false, 0.75 },
    { LG_SIM_FLAVOR_TGI, "tgi/metrics.prom", false, true, -1 },
    { LG_SIM_FLAVOR_LLAMACPP, "llamacpp/metrics_with_kv.prom", false, true, 0.75 },
};

static int
check_flavor(const struct flavor_case *fc)
{
    struct lg_sim sim;
    struct lg_sim_conf conf;
    struct lg_sim_model model;
    struct evbuffer *out = evbuffer_new();
    struct lg_engine_sample s;
    size_t len, engine_families = 0;
    char *text;

    sim_setup(&sim, &conf, &model, fc->flavor);
    LG_CHECK(lg_sim_metrics_render(&sim, out) == LG_OK);
    len = evbuffer_get_length(out);
    text = (char *)evbuffer_pullup(out, -1);
    exposition_parse(&sim_exp, text, len);
    LG_CHECK(fixture_load(&fix_exp, fc->fixture) == 0);

    for (size_t i = 0; i < sim_exp.n; i++) {
        const struct fam *a = &sim_exp.f[i];
        const struct fam *b = NULL;

        if (strncmp(a->name, "llmsim_", 7) == 0) {
            continue; /* llmsim's own series */
        }
        engine_families++;
        for (size_t j = 0; j < fix_exp.n; j++) {
            if (strcmp(fix_exp.f[j].name, a->name) == 0) {
                b = &fix_exp.f[j];
            }
        }
        if (b == NULL || strcmp(a->type, b->type) != 0 || a->has_help != b->has_help
            || strcmp(a->help, b->help) != 0) {
            fprintf(stderr, "%s: %s (%s, \"%s\") is not in %s as such\n",
                    lg_sim_flavor_name(fc->flavor), a->name, a->type, a->help, fc->fixture);
            return 1;
        }
        /* every label name llmsim writes, the engine writes */
        for (const char *k = a->keys; k[0] != '\0' && k[1] != '\0';) {
            const char *end = strchr(k + 1, ',');
            char item[80];

            snprintf(item, sizeof(item), "%.*s", (int)(end - k + 1), k);
            if (strstr(b->keys, item) == NULL) {
                fprintf(stderr, "%s: %s has label %s, %s has %s\n", lg_sim_flavor_name(fc->flavor),
                        a->name, item, fc->fixture, b->keys);
                return 1;
            }
            k = end;
        }
        if ((fc->sorted_labels && a->unsorted)
            || (fc->same_buckets && strcmp(a->les, b->les) != 0)) {
            fprintf(stderr, "%s: %s labels out of order, or buckets %s vs %s\n",
                    lg_sim_flavor_name(fc->flavor), a->name, a->les, b->les);
            return 1;
        }
    }
    LG_CHECK(engine_families >= 5);
    /* and the gateway reads it */
    LG_CHECK(lg_engine_metrics_parse(text, len, LG_ENGINE_AUTO, &s) == LG_OK);
    LG_CHECK((int)s.flavor == fc->flavor + LG_ENGINE_VLLM);
    LG_CHECK(s.bad_lines == 0 && s.waiting == 2 && s.running == 3
             && fabs(s.kv_usage - fc->kv) < 1e-9);
    evbuffer_free(out);
    return 0;
}

static int
test_flavors_match_engines(void)
{
    for (size_t i = 0; i < LG_ARRAY_SIZE(flavor_cases); i++) {
        if (check_flavor(&flavor_cases[i]) != 0) {
            return 1;
        }
    }
    return 0;
}

/* Numbers as each engine's library writes them. */
static int
test_number_styles(void)
{
    struct lg_sim sim;
    struct lg_sim_conf conf;
    struct lg_sim_model model;
    struct evbuffer *out;
    const char *text;
    char buf[64];

    metrics_pyfloat(buf, sizeof(buf), 7);
    LG_CHECK_STR(buf, "7.0");
    metrics_pyfloat(buf, sizeof(buf), 2097152);
    LG_CHECK_STR(buf, "2.097152e+06");
    metrics_pyfloat(buf, sizeof(buf), 41617657856.0);
    LG_CHECK_STR(buf, "4.1617657856e+010"); /* Go's exponent, Python's digits */
    metrics_pyfloat(buf, sizeof(buf), 1000000);
    LG_CHECK_STR(buf, "1e+06");
    metrics_pyfloat(buf, sizeof(buf), 0.4134);
    LG_CHECK_STR(buf, "0.4134");
    metrics_pyfloat(buf, sizeof(buf), 1e-05);
    LG_CHECK_STR(buf, "1e-05");
    metrics_pyfloat(buf, sizeof(buf), 0);
    LG_CHECK_STR(buf, "0.0");
    metrics_pyfloat(buf, sizeof(buf), 100); /* not %g's shortest, "1e+02" */
    LG_CHECK_STR(buf, "100.0");
    metrics_pyfloat(buf, sizeof(buf), 30);
    LG_CHECK_STR(buf, "30.0");
    /* repr() itself (the engines' load reports write it without Go's exponent) */
    lg_sim_py_repr(buf, sizeof(buf), 2097152);
    LG_CHECK_STR(buf, "2097152.0");
    lg_sim_py_repr(buf, sizeof(buf), 12.5);
    LG_CHECK_STR(buf, "12.5");
    lg_sim_py_repr(buf, sizeof(buf), 0.0001);
    LG_CHECK_STR(buf, "0.0001");
    lg_sim_py_repr(buf, sizeof(buf), 0.00123);
    LG_CHECK_STR(buf, "0.00123");
    lg_sim_py_repr(buf, sizeof(buf), 1.5e-05);
    LG_CHECK_STR(buf, "1.5e-05");
    lg_sim_py_repr(buf, sizeof(buf), 1e16);
    LG_CHECK_STR(buf, "1e+16");
    lg_sim_py_repr(buf, sizeof(buf), 1234567890123456.0);
    LG_CHECK_STR(buf, "1234567890123456.0");
    lg_sim_py_repr(buf, sizeof(buf), -2.5);
    LG_CHECK_STR(buf, "-2.5");
    lg_sim_py_repr(buf, sizeof(buf), 0.1 + 0.2);
    LG_CHECK_STR(buf, "0.30000000000000004");
    lg_sim_py_repr(buf, sizeof(buf), 1e22);
    LG_CHECK_STR(buf, "1e+22");

    for (int f = LG_SIM_FLAVOR_VLLM; f <= LG_SIM_FLAVOR_LLAMACPP; f++) {
        out = evbuffer_new();
        sim_setup(&sim, &conf, &model, f);
        lg_sim_metrics_render(&sim, out);
        evbuffer_add(out, "", 1);
        text = (const char *)evbuffer_pullup(out, -1);
        switch (f) {
        case LG_SIM_FLAVOR_VLLM:
            LG_CHECK(strstr(text, "vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/"
                                  "Llama-3.1-8B-Instruct\"} 3.0\n")
                     != NULL);
            LG_CHECK(strstr(text, "} 2.097152e+06\n") != NULL);
            LG_CHECK(strstr(text,
                            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"0.06\","
                            "model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 4.0\n")
                     != NULL);
            break;
        case LG_SIM_FLAVOR_TGI:
            LG_CHECK(strstr(text, "\ntgi_queue_size 2\n\n") != NULL);
            LG_CHECK(strstr(text, "tgi_request_generated_tokens_bucket{le=\"81.92\"} 7\n") != NULL);
            LG_CHECK(strstr(text, "tgi_request_generated_tokens_sum 448\n") != NULL);
            break;
        case LG_SIM_FLAVOR_LLAMACPP:
            LG_CHECK(strstr(text, "llamacpp:prompt_tokens_total 1.84392e+06\n") != NULL);
            LG_CHECK(strstr(text, "llamacpp:tokens_predicted_seconds_total 9871.24\n") != NULL);
            break;
        default:
            break;
        }
        evbuffer_free(out);
    }
    return 0;
}

LG_TEST_MAIN(test_flavors_match_engines, test_number_styles)
