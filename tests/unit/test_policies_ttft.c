/*
 * test_policies_ttft.c: the ttft policy on random backend states, against
 * a table pinned from the code before its estimators became one function
 * each (ttft_pinned.inc): the same costs, pick and reason, case by case.
 * The states cover every estimator (the engine model, the measured terms,
 * the formula), the flags that choose among them, and the options that
 * change each term (16 sets, defaults included).
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
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

/* The options with queue_guard and model_floor off: the table predates
 * both (the guard raises a full replica's cost after every estimator has
 * run, the floor raises the formula's and the measured terms' prediction
 * where only the pace keeps the engine model out; their own tests below). */
static int
guard_off(const struct lg_plugin *p, const char *opts, void **state, char *err, size_t errlen)
{
    char text[512];

    snprintf(text, sizeof(text), "{\"queue_guard\": 0, \"model_floor\": 0%s%s",
             strcmp(opts, "{}") == 0 ? "" : ", ", opts + 1);
    return lg_plugin_create_text(p, text, state, err, errlen);
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
        LG_CHECK(guard_off(p, options[i], &states[i], err, sizeof(err)) == LG_OK);
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

static bool
would_queue(const struct lg_backend_view *v)
{
    return v->capacity > 0 && !(v->flags & LG_VIEW_F_CAP_GUESS) && v->load + 1 > v->capacity;
}

/* The slots ttft counts there at its default `slots` (16). */
static double
slots_of(const struct lg_backend_view *v)
{
    if (v->capacity <= 0) {
        return 16;
    }
    return (v->flags & LG_VIEW_F_CAP_GUESS) ? LG_MAX(v->capacity, 16) : v->capacity;
}

static bool
any_free(const struct tc_fleet *f)
{
    for (size_t j = 0; j < f->n; j++) {
        if (f->p[j]->load + 1 <= slots_of(f->p[j])) {
            return true;
        }
    }
    return false;
}

/*
 * queue_guard on the random states (default options, the guard on and
 * off): wherever it moves the pick, it moves it off a replica where the
 * request would wait for a slot (its capacity known), nearly always onto
 * one where it would not, predicted at most queue_guard (2) times as late,
 * and says so (or the tolerance's reason, where the free one was nearly as
 * soon); it moves some, and one with a slot free is always there.
 */
static int
test_queue_guard_random(void)
{
    const struct lg_plugin *p = lg_plugin_find("ttft");
    void *on, *off;
    char err[256];
    size_t moved = 0, to_free = 0;
    struct tcase c;

    LG_CHECK(lg_plugin_create_text(p, "{}", &on, err, sizeof(err)) == LG_OK);
    LG_CHECK(lg_plugin_create_text(p, "{\"queue_guard\": 0}", &off, err, sizeof(err)) == LG_OK);
    rng = 777;
    for (int index = 0; index < 20000; index++) {
        double c_on[NMAX], c_off[NMAX];
        const char *why_on = NULL, *why_off = NULL;
        size_t a = 0, b = 0;

        case_gen(&c);
        for (size_t j = 0; j < c.f.n; j++) {
            c.f.v[j].model = &c.f.m[j];
            c.f.p[j] = &c.f.v[j];
        }
        p->ops->score(on, &c.req, c.f.p, c.f.n, c_on, &why_on);
        p->ops->score(off, &c.req, c.f.p, c.f.n, c_off, &why_off);
        for (size_t j = 1; j < c.f.n; j++) {
            a = c_on[j] < c_on[a] ? j : a;
            b = c_off[j] < c_off[b] ? j : b;
        }
        if (a == b) {
            continue;
        }
        moved++;
        LG_CHECK(would_queue(c.f.p[b]));
        /* onto one that would not queue, or (rarely) onto another full one
         * whose answer no free candidate comes near in pace */
        to_free += !would_queue(c.f.p[a]);
        LG_CHECK(c_off[a] <= 2 * c_off[b]);
        LG_CHECK(any_free(&c.f));
        LG_CHECK(why_on != NULL
                 && (strcmp(why_on, "free_slot_over_queue") == 0
                     || strcmp(why_on, "least_loaded_near_lowest_ttft") == 0));
    }
    LG_CHECK(moved >= 100);
    LG_CHECK(to_free * 10 >= moved * 9);
    p->ops->destroy(on);
    p->ops->destroy(off);
    return 0;
}

/* Two replicas, the fast one's 4 slots taken (said by its engine): one
 * more goes to the slower one with a slot free while that is predicted at
 * most twice as late and its answer would not take far longer there, else
 * it waits for the fast one's slot. */
static int
test_queue_guard_pair(void)
{
    const struct lg_plugin *p = lg_plugin_find("ttft");
    struct lg_route_info req = { .size = sizeof(req), .model = "m", .stream = 1,
                                 .prompt_bytes = 1024, .max_tokens = 32, .attempt = 1 };
    struct lg_backend_view v[2];
    const struct lg_backend_view *c[2] = { &v[0], &v[1] };
    double cost[2];
    const char *why = NULL;
    void *st;
    char err[256];

    LG_CHECK(lg_plugin_create_text(p, "{\"engine_model\": 0}", &st, err, sizeof(err)) == LG_OK);
    memset(v, 0, sizeof(v));
    for (int i = 0; i < 2; i++) {
        v[i].size = sizeof(v[i]);
        v[i].name = i == 0 ? "fast" : "slow";
        v[i].id = (uint32_t)i + 1;
        v[i].weight = 1;
        v[i].ramp = 1;
        v[i].capacity = 4;
        v[i].hold_ms = 400;
        v[i].itl_ms = 10;
        v[i].engine_waiting = -1;
        v[i].engine_running = -1;
        v[i].engine_kv_usage = -1;
    }
    v[0].inflight = 4; /* full: one more waits for a slot */
    v[0].load = 4;
    v[0].ttft_fixed_ms = 20;
    v[0].slot_wait_ms = 50; /* its soonest end */
    v[1].inflight = 1;
    v[1].load = 1;
    v[1].ttft_fixed_ms = 120; /* 120 + a KiB's prefill */
    v[1].ttft_ms_per_kib = 30;
    p->ops->score(st, &req, c, 2, cost, &why);
    LG_CHECK(cost[1] < cost[0]);
    LG_CHECK_STR(why, "free_slot_over_queue");
    v[1].ttft_fixed_ms = 600; /* far later than the queue: the queue it is */
    why = NULL;
    p->ops->score(st, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    LG_CHECK(why == NULL || strcmp(why, "free_slot_over_queue") != 0);
    /* soon enough again, but a long answer there would take far longer
     * (512 tokens x 30 ms more a token, over tolerance_decode_ms): the
     * queue; a short one (32 x 30 ms) goes to the free slot */
    v[1].ttft_fixed_ms = 120;
    v[1].itl_ms = 40;
    req.max_tokens = 512;
    why = NULL;
    p->ops->score(st, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    req.max_tokens = 32;
    p->ops->score(st, &req, c, 2, cost, &why);
    LG_CHECK(cost[1] < cost[0]);
    LG_CHECK_STR(why, "free_slot_over_queue");
    p->ops->destroy(st);
    return 0;
}

/*
 * queue_reserve on the random states (1 against 0, the guard on in both,
 * the tolerance off so that the pick is the soonest after the guard):
 * wherever it moves the pick, it moves it off a replica whose capacity is
 * known and where the request would take its last slot, mostly onto one
 * that keeps a slot free after it (else onto one whose own last slot the
 * roomy ones are too late to guard), predicted at most queue_guard (2)
 * times as late; it moves some.
 */
static int
test_queue_reserve_random(void)
{
    const struct lg_plugin *p = lg_plugin_find("ttft");
    void *on, *off;
    char err[256];
    size_t moved = 0, to_room = 0;
    struct tcase c;

    LG_CHECK(lg_plugin_create_text(p, "{\"queue_reserve\": 1, \"tolerance_ms\": 0}", &on, err,
                                   sizeof(err))
             == LG_OK);
    LG_CHECK(lg_plugin_create_text(p, "{\"tolerance_ms\": 0}", &off, err, sizeof(err)) == LG_OK);
    rng = 4711;
    for (int index = 0; index < 40000; index++) {
        double c_on[NMAX], c_off[NMAX];
        const char *why_on = NULL, *why_off = NULL;
        size_t a = 0, b = 0;

        case_gen(&c);
        for (size_t j = 0; j < c.f.n; j++) {
            c.f.v[j].model = &c.f.m[j];
            c.f.p[j] = &c.f.v[j];
        }
        p->ops->score(on, &c.req, c.f.p, c.f.n, c_on, &why_on);
        p->ops->score(off, &c.req, c.f.p, c.f.n, c_off, &why_off);
        for (size_t j = 1; j < c.f.n; j++) {
            a = c_on[j] < c_on[a] ? j : a;
            b = c_off[j] < c_off[b] ? j : b;
        }
        if (a == b) {
            continue;
        }
        moved++;
        LG_CHECK(c.f.p[b]->capacity > 0 && !(c.f.p[b]->flags & LG_VIEW_F_CAP_GUESS)
                 && c.f.p[b]->load + 2 > c.f.p[b]->capacity);
        to_room += c.f.p[a]->load + 2 <= slots_of(c.f.p[a]);
        LG_CHECK(c_off[a] <= 2 * c_off[b]);
    }
    LG_CHECK(moved >= 100);
    LG_CHECK(to_room * 4 >= moved * 3);
    p->ops->destroy(on);
    p->ops->destroy(off);
    return 0;
}

/*
 * queue_reserve: the fast replica with 3 of its 4 slots taken (said by its
 * engine), the slow one 1 of 4. Without a reserve the fast one's last slot
 * is the soonest and takes the request; with queue_reserve 1 that slot is
 * guarded as a queue is: a request goes to the slow one while that is
 * predicted at most queue_guard (2) times as late, else the fast one keeps
 * it; and never toward a replica that would then be within its own
 * reserve (the slow one with 3 of 4 taken), nor where the capacity is a
 * guess.
 */
static int
test_queue_reserve_pair(void)
{
    const struct lg_plugin *p = lg_plugin_find("ttft");
    struct lg_route_info req = { .size = sizeof(req), .model = "m", .stream = 1,
                                 .prompt_bytes = 1024, .max_tokens = 32, .attempt = 1 };
    struct lg_backend_view v[2];
    const struct lg_backend_view *c[2] = { &v[0], &v[1] };
    double cost[2];
    const char *why = NULL;
    void *on, *off;
    char err[256];

    LG_CHECK(lg_plugin_create_text(p, "{\"engine_model\": 0, \"queue_reserve\": 1}", &on, err,
                                   sizeof(err))
             == LG_OK);
    LG_CHECK(lg_plugin_create_text(p, "{\"engine_model\": 0}", &off, err, sizeof(err)) == LG_OK);
    memset(v, 0, sizeof(v));
    for (int i = 0; i < 2; i++) {
        v[i].size = sizeof(v[i]);
        v[i].name = i == 0 ? "fast" : "slow";
        v[i].id = (uint32_t)i + 1;
        v[i].weight = 1;
        v[i].ramp = 1;
        v[i].capacity = 4;
        v[i].hold_ms = 400;
        v[i].itl_ms = 10;
        v[i].engine_waiting = -1;
        v[i].engine_running = -1;
        v[i].engine_kv_usage = -1;
    }
    v[0].inflight = 3; /* its last slot free */
    v[0].load = 3;
    v[0].ttft_fixed_ms = 40;
    v[1].inflight = 1;
    v[1].load = 1;
    v[1].ttft_fixed_ms = 60; /* 60 + a KiB's prefill: over the tolerance, under 2x */
    v[1].ttft_ms_per_kib = 30;
    p->ops->score(off, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    why = NULL;
    p->ops->score(on, &req, c, 2, cost, &why);
    LG_CHECK(cost[1] < cost[0]);
    LG_CHECK_STR(why, "free_slot_over_queue");
    /* far later there (a long prompt on the slow one): the last slot */
    v[1].ttft_fixed_ms = 200;
    why = NULL;
    p->ops->score(on, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    /* the slow one would then be within its own reserve: no move */
    v[1].ttft_fixed_ms = 60;
    v[1].inflight = 3;
    v[1].load = 3;
    why = NULL;
    p->ops->score(on, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    /* a capacity guessed, not said: no reserve to keep */
    v[1].inflight = 1;
    v[1].load = 1;
    v[0].flags |= LG_VIEW_F_CAP_GUESS;
    why = NULL;
    p->ops->score(on, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    p->ops->destroy(on);
    p->ops->destroy(off);
    return 0;
}

/*
 * model_floor on the random states, a third of the candidates idle
 * (tolerance, e2e guard and queue guard off, so the costs are the
 * estimators' own): a candidate whose engine model runs, or that has no
 * model's prediction, no step guess or requests there, costs the same
 * either way; an idle one where only the pace keeps the model out costs at
 * least as much with the floor, and some cost more (the model predicted
 * later than the formula or the measured terms read it); the same with
 * model_needs_pace 0 (the model runs there: nothing to floor).
 */
static int
test_model_floor_random(void)
{
    const struct lg_plugin *p = lg_plugin_find("ttft");
    static const char *const opts[2][2] = {
        { "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"model_floor\": 1}",
          "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"model_floor\": 0}" },
        { "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"model_needs_pace\": 0, \"model_floor\": 1}",
          "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"model_needs_pace\": 0, \"model_floor\": 0}" },
    };
    size_t raised = 0, moved = 0, floored = 0;
    char err[256];
    struct tcase c;

    for (int b = 0; b < 2; b++) {
        void *on, *off;

        LG_CHECK(lg_plugin_create_text(p, opts[b][0], &on, err, sizeof(err)) == LG_OK);
        LG_CHECK(lg_plugin_create_text(p, opts[b][1], &off, err, sizeof(err)) == LG_OK);
        rng = 4242;
        for (int index = 0; index < 20000; index++) {
            double c_on[NMAX], c_off[NMAX];
            const char *why_on = NULL, *why_off = NULL;
            size_t a = 0, o = 0;

            case_gen(&c);
            for (size_t j = 0; j < c.f.n; j++) {
                c.f.v[j].model = &c.f.m[j];
                c.f.p[j] = &c.f.v[j];
                if (chance(0.3)) { /* idle: where the floor applies */
                    c.f.v[j].inflight = 0;
                    c.f.v[j].foreign = 0;
                    c.f.v[j].load = 0;
                    c.f.v[j].pending = 0;
                    c.f.v[j].work_ahead_ms = 0;
                }
            }
            p->ops->score(on, &c.req, c.f.p, c.f.n, c_on, &why_on);
            p->ops->score(off, &c.req, c.f.p, c.f.n, c_off, &why_off);
            for (size_t j = 0; j < c.f.n; j++) {
                const struct lg_engine_model_view *m = &c.f.m[j];
                bool guess =
                    (m->flags & LG_MODEL_F_STEP_GUESS) && m->wait_ms >= 0 && c.f.v[j].load < 0.5;

                if (b == 1 || !guess) {
                    LG_CHECK(c_on[j] == c_off[j]);
                    continue;
                }
                LG_CHECK(c_on[j] >= c_off[j]);
                floored++;
                raised += c_on[j] > c_off[j];
            }
            for (size_t j = 1; j < c.f.n; j++) {
                a = c_on[j] < c_on[a] ? j : a;
                o = c_off[j] < c_off[o] ? j : o;
            }
            if (a != o) {
                /* moved off a candidate the floor raised */
                moved++;
                LG_CHECK(c_on[o] > c_off[o]);
            }
        }
        p->ops->destroy(on);
        p->ops->destroy(off);
    }
    LG_CHECK(floored >= 1000);
    LG_CHECK(raised >= 100 && raised < floored);
    LG_CHECK(moved >= 50);
    return 0;
}

/*
 * The real-engine fleet's case (bench/routing/NOTES.md 61): a fast replica
 * with one request there, and an idle slower one that no stream timed
 * lately, whose formula reads a 500-byte prompt at 54 ms where its engine
 * model, from its own prefills and calibration, reads 150: with the floor
 * the request goes to the fast one (45 ms), without it to the idle one
 * (the tolerance's fewer requests, within 20 ms of the soonest).
 */
static int
test_model_floor_pair(void)
{
    const struct lg_plugin *p = lg_plugin_find("ttft");
    struct lg_route_info req = { .size = sizeof(req), .model = "m", .stream = 1,
                                 .prompt_bytes = 500, .max_tokens = 40, .attempt = 1 };
    struct lg_backend_view v[2];
    struct lg_engine_model_view m[2];
    const struct lg_backend_view *c[2] = { &v[0], &v[1] };
    double cost[2];
    const char *why = NULL;
    void *on, *off;
    char err[256];

    LG_CHECK(lg_plugin_create_text(p, "{\"model_floor\": 1}", &on, err, sizeof(err)) == LG_OK);
    LG_CHECK(lg_plugin_create_text(p, "{\"model_floor\": 0}", &off, err, sizeof(err)) == LG_OK);
    memset(v, 0, sizeof(v));
    memset(m, 0, sizeof(m));
    for (int i = 0; i < 2; i++) {
        v[i].size = sizeof(v[i]);
        v[i].name = i == 0 ? "fast" : "slow";
        v[i].id = (uint32_t)i + 1;
        v[i].weight = 1;
        v[i].ramp = 1;
        v[i].capacity = 4;
        v[i].hold_ms = 200;
        v[i].itl_ms = 4;
        v[i].engine_waiting = 0;
        v[i].engine_running = 0;
        v[i].engine_kv_usage = -1;
        v[i].model = &m[i];
        m[i].size = sizeof(m[i]);
        m[i].version = LG_ENGINE_MODEL_VERSION;
        m[i].slots = 4;
        m[i].scale = 1;
        m[i].measured_ms = -1;
    }
    /* fast: one answer generating, its step timed; 45 ms by the model */
    v[0].inflight = 1;
    v[0].load = 1;
    m[0].wait_ms = 5;
    m[0].step_ms = 2;
    m[0].prefill_ms_per_kib = 80;
    /* slow: idle, no stream lately; the formula 40 + 28 ms/KiB, the model
     * (30 + 120 ms/KiB x 500 B) x 1.4 calibrated */
    v[1].ttft_fixed_ms = 40;
    v[1].ttft_ms_per_kib = 28;
    v[1].itl_ms = 6; /* within decode_slack of the fast one's: no charge */
    m[1].flags = LG_MODEL_F_STEP_GUESS;
    m[1].wait_ms = 30;
    m[1].step_ms = 6;
    m[1].prefill_ms_per_kib = 120;
    m[1].scale = 1.4;
    p->ops->score(off, &req, c, 2, cost, &why);
    LG_CHECK(cost[1] < cost[0]);
    LG_CHECK_STR(why, "least_loaded_near_lowest_ttft");
    why = NULL;
    p->ops->score(on, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    LG_CHECK(fabs(cost[1] - (30 + 120 * 500 / 1024.0) * 1.4) < 1e-9);
    LG_CHECK_STR(why, "lowest_predicted_ttft");
    /* a short prompt, the fast one's step busier (30 ms): the formula (42
     * ms) is the later there and stands, within the tolerance: the idle
     * one takes it */
    req.prompt_bytes = 64;
    m[0].wait_ms = 25;
    m[1].wait_ms = 2;
    why = NULL;
    p->ops->score(on, &req, c, 2, cost, &why);
    LG_CHECK(cost[1] < cost[0]);
    LG_CHECK_STR(why, "least_loaded_near_lowest_ttft");
    /* the long prompt again with a request of ours on the slower one: the
     * wait behind it would run at the guessed step, so no floor there (the
     * formula's 54 ms + its batch term stands, far under the model's 150) */
    req.prompt_bytes = 500;
    m[0].wait_ms = 5;
    m[1].wait_ms = 30;
    v[1].inflight = 1;
    v[1].load = 1;
    p->ops->score(on, &req, c, 2, cost, &why);
    LG_CHECK(cost[1] < (30 + 120 * 500 / 1024.0) * 1.4);
    p->ops->destroy(on);
    p->ops->destroy(off);
    return 0;
}

/* A candidate for the by-class tests: 16 slots, 20 requests there. */
static void
class_view(struct lg_backend_view *v, struct lg_engine_model_view *m, uint32_t id)
{
    memset(v, 0, sizeof(*v));
    memset(m, 0, sizeof(*m));
    v->size = sizeof(*v);
    v->name = "r";
    v->id = id;
    v->weight = 1;
    v->ramp = 1;
    v->capacity = 16;
    v->hold_ms = 2000;
    v->itl_ms = 15;
    v->ttft_fixed_ms = 40;
    v->engine_waiting = -1;
    v->engine_running = -1;
    v->engine_kv_usage = -1;
    v->inflight = 20;
    v->load = 20;
    v->model = m;
    m->size = sizeof(*m);
    m->version = LG_ENGINE_MODEL_VERSION;
    m->wait_ms = -1;
    m->measured_ms = -1;
    m->scale = 1;
    m->step_ms = 15;
}

/*
 * On engines that preempt for priority (LG_MODEL_F_BY_CLASS) the ttft
 * policy counts ahead of the request only its class and above: a replica
 * whose many requests are a lower class's long answers wins over one busy
 * with the request's own class, which it loses to class-blind; the step
 * still runs the whole batch.
 */
static int
test_by_class(void)
{
    const struct lg_plugin *p = lg_plugin_find("ttft");
    struct lg_route_info req = { .size = sizeof(req), .model = "m", .stream = 1,
                                 .prompt_bytes = 1024, .max_tokens = 64, .attempt = 1 };
    struct lg_backend_view v[20], flat;
    struct lg_engine_model_view m[20];
    const struct lg_backend_view *c[20];
    double cost[20], by_class;
    const char *why = NULL;
    void *st, *raw;
    char err[256];

    LG_CHECK(lg_plugin_create_text(p, "{}", &st, err, sizeof(err)) == LG_OK);
    for (uint32_t i = 0; i < 2; i++) {
        class_view(&v[i], &m[i], i + 1);
        c[i] = &v[i];
    }
    /* A: its own class's short answers, 14 of them (4 awaiting a first token) */
    v[0].pending = 14;
    v[0].pending_age_ms = 30;
    v[0].work_ahead_ms = 200;
    v[0].slot_wait_ms = 100;
    m[0].class_inflight = 14;
    m[0].class_pending = 4;
    m[0].class_pending_age_ms = 20;
    m[0].class_work_ahead_ms = 120;
    /* B: 18 of a lower class's whole answers (awaiting them for seconds) */
    v[1].pending = 18;
    v[1].pending_age_ms = 1500;
    v[1].work_ahead_ms = 6000;
    v[1].slot_wait_ms = 80;
    m[1].class_inflight = 2;
    m[1].class_pending = 1;
    m[1].class_pending_age_ms = 10;
    m[1].class_work_ahead_ms = 20;
    p->ops->score(st, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]); /* class-blind: B's work ahead */
    m[0].flags = m[1].flags = LG_MODEL_F_BY_CLASS;
    p->ops->score(st, &req, c, 2, cost, &why);
    LG_CHECK(cost[1] < cost[0]);
    /* a plugin view without the members (an older host) is read class-blind */
    m[0].size = m[1].size = offsetof(struct lg_engine_model_view, class_inflight);
    p->ops->score(st, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    m[0].size = m[1].size = sizeof(m[0]);
    p->ops->destroy(st);

    /* the step: B by class costs what a view of its class's counts costs,
     * plus the batch term at every request there (20 of 16 slots) rather
     * than at 2: batch_weight 1 x itl 15 x (16 - 2) / 16 */
    LG_CHECK(lg_plugin_create_text(p, "{\"tolerance_ms\": 0, \"queue_guard\": 0}", &raw, err,
                                   sizeof(err))
             == LG_OK);
    p->ops->score(raw, &req, &c[1], 1, cost, &why);
    by_class = cost[0];
    flat = v[1];
    flat.model = NULL;
    flat.inflight = 2;
    flat.load = 2;
    flat.pending = 1;
    flat.pending_age_ms = 10;
    flat.work_ahead_ms = 20;
    flat.slot_wait_ms = 0;
    c[1] = &flat;
    p->ops->score(raw, &req, &c[1], 1, cost, &why);
    LG_CHECK(fabs(by_class - cost[0] - 15.0 * 14 / 16) < 1e-9);
    c[1] = &v[1];

    /* more candidates than the policy's stack holds: the same by class */
    for (uint32_t i = 0; i < 20; i++) {
        class_view(&v[i], &m[i], i + 1);
        v[i].pending = 10;
        v[i].work_ahead_ms = 500;
        m[i].flags = LG_MODEL_F_BY_CLASS;
        m[i].class_inflight = 10;
        m[i].class_pending = 3;
        m[i].class_work_ahead_ms = 100 + 10 * i;
        c[i] = &v[i];
    }
    m[13].class_inflight = 1;
    m[13].class_pending = 0;
    m[13].class_work_ahead_ms = 0;
    p->ops->score(raw, &req, c, 20, cost, &why);
    for (size_t i = 0; i < 20; i++) {
        LG_CHECK(i == 13 || cost[13] < cost[i]);
    }
    p->ops->destroy(raw);
    return 0;
}

/*
 * lower_prefill_weight: by class, a lower class's prefill that the engine may
 * be running counts ahead of the request (a step is not preempted): off by
 * default (the replica with more of it still wins on its own class's
 * work), on it loses; each ms of it costs ahead_weight x the weight.
 */
static int
test_lower_prefill(void)
{
    const struct lg_plugin *p = lg_plugin_find("ttft");
    struct lg_route_info req = { .size = sizeof(req), .model = "m", .stream = 1,
                                 .prompt_bytes = 1024, .max_tokens = 64, .attempt = 1 };
    struct lg_backend_view v[2];
    struct lg_engine_model_view m[2];
    const struct lg_backend_view *c[2] = { &v[0], &v[1] };
    double cost[2], base0;
    const char *why = NULL;
    void *off, *on;
    char err[256];

    for (uint32_t i = 0; i < 2; i++) {
        class_view(&v[i], &m[i], i + 1);
        m[i].flags = LG_MODEL_F_BY_CLASS;
        m[i].class_inflight = 4;
        m[i].class_pending = 1;
        m[i].class_work_ahead_ms = 10;
    }
    m[1].class_work_ahead_ms = 20;      /* B: more of its own class's work ahead */
    m[0].class_lower_prefill_ms = 40;   /* A: a batch prompt's prefill running */
    LG_CHECK(lg_plugin_create_text(p, "{\"tolerance_ms\": 0, \"queue_guard\": 0}", &off, err,
                                   sizeof(err))
             == LG_OK);
    LG_CHECK(lg_plugin_create_text(p,
                                   "{\"tolerance_ms\": 0, \"queue_guard\": 0, "
                                   "\"lower_prefill_weight\": 0.5}",
                                   &on, err, sizeof(err))
             == LG_OK);
    p->ops->score(off, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    base0 = cost[0];
    p->ops->score(on, &req, c, 2, cost, &why);
    LG_CHECK(cost[1] < cost[0]);
    LG_CHECK(fabs(cost[0] - base0 - 2 * 0.5 * 40) < 1e-9); /* ahead_weight 2 */
    /* a view without the member (an older host): as off */
    m[0].size = m[1].size = offsetof(struct lg_engine_model_view, class_lower_prefill_ms);
    p->ops->score(on, &req, c, 2, cost, &why);
    LG_CHECK(cost[0] < cost[1]);
    p->ops->destroy(off);
    p->ops->destroy(on);
    return 0;
}

LG_TEST_MAIN(test_pinned_coverage, test_pinned_cases, test_queue_guard_random, test_queue_guard_pair,
             test_queue_reserve_random, test_queue_reserve_pair,
             test_model_floor_random, test_model_floor_pair, test_by_class, test_lower_prefill)
