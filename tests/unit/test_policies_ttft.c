/*
 * test_policies_ttft.c: the ttft policy on random backend states, against
 * a table pinned from the code before its estimators became one function
 * each (ttft_pinned.inc): the same costs, pick and reason, case by case.
 * The states cover every estimator (the engine model, the measured terms,
 * the formula), the flags that choose among them, and the options that
 * change each term (16 sets, defaults included).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lg_test.h"
#include "route/plugin.h"

static uint64_t rng; /* splitmix64 state */

static uint64_t
next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double
u01(void)
{
    return (double)(next() >> 11) / 9007199254740992.0;
}
static double
uni(double a, double b)
{
    return a + (b - a) * u01();
}
static int
chance(double p)
{
    return u01() < p;
}

static const char *const options[] = {
    "{}",
    "{\"tolerance_ms\": 0}",
    "{\"engine_model\": 0}",
    "{\"measured\": 0}",
    "{\"model_needs_pace\": 0}",
    "{\"model_calibrate\": 0}",
    "{\"slots\": 8}",
    "{\"slots\": 16.5, \"tolerance_ms\": 0}",
    "{\"interference\": 0.3}",
    "{\"e2e_slack\": 0.5}",
    "{\"e2e_slack\": 0.5, \"e2e_slack_load\": 0.8}",
    "{\"model_ahead_weight\": 1.5, \"model_decode_weight\": 0.01, \"model_prefill_share\": 0.5}",
    "{\"decode_weight\": 0.1, \"decode_slack\": 0, \"prefill_share\": 2, \"wait_weight\": 1, "
    "\"ahead_weight\": 1, \"batch_weight\": 2, \"error_penalty\": 5, \"foreign_margin\": 2}",
    "{\"tolerance_ms\": 100, \"tolerance_load\": 0.5, \"tolerance_decode_ms\": 500}",
    "{\"interference\": 1, \"tolerance_ms\": 0, \"engine_model\": 0}",
    "{\"interference\": 0.5, \"tolerance_ms\": 0, \"model_calibrate\": 0, \"e2e_slack\": 1}",
};
#define NOPT (sizeof(options) / sizeof(options[0]))

#define NMAX 8
struct tc_fleet {
    struct lg_backend_view v[NMAX];
    struct lg_engine_model_view m[NMAX];
    const struct lg_backend_view *p[NMAX];
    size_t n;
};

struct tcase {
    int opt;
    struct lg_route_info req;
    struct tc_fleet f;
};

/* The next random case: options, request, 1-6 candidates with their models. */
static void
case_gen(struct tcase *c)
{
    struct tc_fleet *f = &c->f;

    memset(c, 0, sizeof(*c));
    c->opt = (int)(next() % NOPT);
    c->req.size = sizeof(c->req);
    c->req.model = "m";
    c->req.path = "/v1/chat/completions";
    c->req.stream = 1;
    c->req.prompt_bytes = chance(0.1) ? 32000 : (uint64_t)uni(0, 8192);
    c->req.max_tokens = chance(0.2) ? 0 : (uint32_t)uni(1, 512);
    c->req.attempt = 1;
    f->n = 1 + (size_t)(next() % 6);
    for (size_t i = 0; i < f->n; i++) {
        struct lg_backend_view *v = &f->v[i];
        double capacity = chance(0.15) ? 0 : (chance(0.5) ? 16 : floor(uni(2, 32)));
        uint32_t flags = 0;
        int step_guess = chance(0.2), misses = chance(0.25);
        double model_ms = chance(0.3) ? -1 : uni(5, 2000);
        double model_slots = chance(0.5) ? (capacity > 0 ? capacity : 16) : (chance(0.5) ? 16 : 8);
        double scale = chance(0.3) ? 1 : uni(0.3, 4);
        double joined = model_ms < 0 ? 0 : floor(uni(0, 4));
        double err = chance(0.3) ? 0 : uni(0, 2);
        double step = uni(5, 80), per_seq = uni(0, 2), pkib = uni(0, 60), pfixed = uni(0, 25);
        double meas = chance(0.35) ? -1 : uni(10, 3000), mkib = uni(0, 60), merr = uni(0, 2);

        flags |= chance(0.4) ? LG_VIEW_F_STALE : 0;
        flags |= chance(0.3) ? LG_VIEW_F_CAP_GUESS : 0;
        flags |= chance(0.05) ? LG_VIEW_F_RAMPING : 0;
        v->size = sizeof(*v);
        v->name = "r";
        v->id = (uint32_t)i + 1;
        v->weight = 1;
        v->ramp = (flags & LG_VIEW_F_RAMPING) ? uni(0.1, 1) : 1;
        v->inflight = (uint32_t)(next() % 24);
        v->foreign = chance(0.5) ? 0 : uni(0, 10);
        v->load = v->inflight + v->foreign;
        v->engine_waiting = chance(0.3) ? -1 : (int32_t)(next() % 8);
        v->engine_running = chance(0.3) ? -1 : (int32_t)(next() % 20);
        v->engine_kv_usage = chance(0.3) ? -1 : u01();
        v->engine_age_ns = chance(0.2) ? UINT64_MAX : (uint64_t)uni(0, 2e9);
        v->ttft_fixed_ms = uni(5, 300);
        v->ttft_ms_per_kib = uni(0, 100);
        v->itl_ms = uni(5, 120);
        v->itl_own_ms = chance(0.4) ? -1 : uni(5, 150);
        v->samples = uni(0, 100);
        v->error_rate = chance(0.7) ? 0 : uni(0, 1.2);
        v->capacity = capacity;
        v->hold_ms = chance(0.1) ? 0.5 : uni(100, 5000);
        v->slot_wait_ms = chance(0.6) ? 0 : uni(0, 3000);
        v->pending = chance(0.4) ? 0 : (uint32_t)(next() % 10);
        v->pending_age_ms = v->pending ? uni(0, 4000) : 0;
        v->inflight_age_ms = uni(0, 5000);
        v->work_ahead_ms = chance(0.4) ? 0 : uni(0, 3000);
        v->flags = flags;
        {
            struct lg_engine_model_view *m = &f->m[i];

            m->size = sizeof(*m);
            m->version = LG_ENGINE_MODEL_VERSION;
            m->flags = (step_guess ? LG_MODEL_F_STEP_GUESS : 0) | (misses ? LG_MODEL_F_MISSES : 0);
            m->wait_ms = model_ms;
            m->slots = model_slots;
            m->scale = scale;
            m->joined = joined;
            m->err = err;
            m->step_ms = step;
            m->step_ms_per_seq = per_seq;
            m->prefill_ms_per_kib = pkib;
            m->prefill_fixed_ms = pfixed;
            m->measured_ms = meas;
            m->measured_ms_per_kib = mkib;
            m->measured_err = merr;
            v->model = m;
        }
        f->p[i] = v;
    }
}

/* A pinned case: its index in the random stream and what ttft gave. */
struct pinned {
    long index;
    int opt;
    size_t n;
    size_t pick;
    int why;
    double cost[NMAX];
};

static const char *const reasons[] = {
    "lowest_predicted_ttft",
    "lowest_measured_ttft",
    "lowest_ttft_ending_in_time",
    "least_loaded_near_lowest_ttft",
};

static const struct pinned pinned[] = {
#include "ttft_pinned.inc"
};

static void *states[NOPT];

static int
score_case(struct tcase *c, double *cost, const char **why)
{
    size_t best = 0;

    for (size_t j = 0; j < c->f.n; j++) {
        c->f.v[j].model = &c->f.m[j];
        c->f.p[j] = &c->f.v[j];
    }
    *why = NULL;
    lg_plugin_find("ttft")->ops->score(states[c->opt], &c->req, c->f.p, c->f.n, cost, why);
    for (size_t j = 1; j < c->f.n; j++) {
        if (cost[j] < cost[best]) {
            best = j;
        }
    }
    return (int)best;
}

static int
same(double a, double b)
{
    return a == b || fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

static int
test_pinned_cases(void)
{
    const struct lg_plugin *p = lg_plugin_find("ttft");
    const char *write = getenv("LG_TTFT_PINNED_WRITE");
    char err[256];
    size_t k = 0, bad = 0;
    struct tcase c;

    LG_CHECK(p != NULL);
    for (size_t i = 0; i < NOPT; i++) {
        LG_CHECK(lg_plugin_create_text(p, options[i], &states[i], err, sizeof(err)) == LG_OK);
    }
    rng = 12345;
    for (long index = 0; k < LG_ARRAY_SIZE(pinned); index++) {
        double cost[NMAX];
        const char *why;
        int pick;
        int ok;

        case_gen(&c);
        if (index != pinned[k].index) {
            continue;
        }
        pick = score_case(&c, cost, &why);
        if (write != NULL) {
            size_t r = 0;

            while (r < LG_ARRAY_SIZE(reasons) && (why == NULL || strcmp(why, reasons[r]) != 0)) {
                r++;
            }
            printf("    { %ld, %d, %zu, %d, %zu, {", index, c.opt, c.f.n, pick, r);
            for (size_t j = 0; j < c.f.n; j++) {
                printf(" %.17g%s", cost[j], j + 1 < c.f.n ? "," : " } },\n");
            }
            k++;
            continue;
        }
        ok = c.opt == pinned[k].opt && c.f.n == pinned[k].n && (size_t)pick == pinned[k].pick
             && why != NULL && strcmp(why, reasons[pinned[k].why]) == 0;
        for (size_t j = 0; ok && j < c.f.n; j++) {
            ok = same(cost[j], pinned[k].cost[j]);
        }
        if (!ok && bad++ < 5) {
            fprintf(stderr, "case %ld (options %s): pick %d (%s), pinned %zu (%s)\n", index,
                    options[c.opt], pick, why ? why : "-", pinned[k].pick, reasons[pinned[k].why]);
            for (size_t j = 0; j < c.f.n; j++) {
                fprintf(stderr, "  candidate %zu: %.17g, pinned %.17g\n", j, cost[j],
                        j < pinned[k].n ? pinned[k].cost[j] : NAN);
            }
        }
        k++;
    }
    for (size_t i = 0; i < NOPT; i++) {
        p->ops->destroy(states[i]);
    }
    LG_CHECK(bad == 0);
    return 0;
}

/* The table covers every reason the policy gives, every option set, 1 to 6 candidates. */
static int
test_pinned_coverage(void)
{
    size_t why[LG_ARRAY_SIZE(reasons)] = { 0 }, opt[NOPT] = { 0 }, n[NMAX + 1] = { 0 };

    for (size_t k = 0; k < LG_ARRAY_SIZE(pinned); k++) {
        why[pinned[k].why]++;
        opt[pinned[k].opt]++;
        n[pinned[k].n]++;
    }
    for (size_t r = 0; r < LG_ARRAY_SIZE(reasons); r++) {
        LG_CHECK(why[r] >= 10);
    }
    for (size_t i = 0; i < NOPT; i++) {
        LG_CHECK(opt[i] >= 10);
    }
    for (size_t i = 1; i <= 6; i++) {
        LG_CHECK(n[i] >= 10);
    }
    return 0;
}

LG_TEST_MAIN(test_pinned_coverage, test_pinned_cases)
