/*
 * test_policies.c: each built-in policy's choices on hand-made candidate
 * views, through the same ops a dlopen()ed plugin exposes.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lg_test.h"
#include "route/plugin.h"

#define N_MAX 8

struct fleet {
    struct lg_backend_view v[N_MAX];
    struct lg_engine_model_view m[N_MAX]; /* v[i].model: the host lends it to ttft */
    const struct lg_backend_view *p[N_MAX];
    size_t n;
};

/* A candidate's engine model, as the host fills it. */
#define M(v) ((struct lg_engine_model_view *)(uintptr_t)(v)->model)

/* A healthy, idle replica: 40 ms + 20 ms/KiB, 15 ms between tokens, 8 slots. */
static struct lg_backend_view *
add(struct fleet *f, const char *name)
{
    struct lg_backend_view *v = &f->v[f->n];

    memset(v, 0, sizeof(*v));
    v->size = sizeof(*v);
    v->name = name;
    v->id = (uint32_t)f->n + 1;
    v->weight = 1;
    v->ramp = 1;
    v->engine_waiting = -1;
    v->engine_running = -1;
    v->engine_kv_usage = -1;
    v->engine_age_ns = UINT64_MAX;
    v->ttft_fixed_ms = 40;
    v->ttft_ms_per_kib = 20;
    v->itl_ms = 15;
    v->samples = 50;
    v->capacity = 8;
    v->hold_ms = 1000;
    v->flags = LG_VIEW_F_STALE;
    v->itl_own_ms = -1;
    v->model = &f->m[f->n];
    memset(M(v), 0, sizeof(*M(v)));
    M(v)->size = sizeof(*M(v));
    M(v)->version = LG_ENGINE_MODEL_VERSION;
    M(v)->wait_ms = -1; /* the engine model cannot tell: the formula decides */
    M(v)->slots = 8;
    M(v)->scale = 1;
    M(v)->step_ms = 15;
    M(v)->prefill_ms_per_kib = 20;
    M(v)->measured_ms = -1;
    f->p[f->n] = v;
    f->n++;
    return v;
}

static void
set_load(struct lg_backend_view *v, uint32_t inflight, double foreign)
{
    v->inflight = inflight;
    v->foreign = foreign;
    v->load = inflight + foreign;
}

/* g = f without candidate `drop` (a replica removed, ejected or already tried). */
static void
fleet_without(const struct fleet *f, struct fleet *g, size_t drop)
{
    g->n = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (i != drop) {
            g->v[g->n] = f->v[i];
            g->m[g->n] = f->m[i];
            g->v[g->n].model = &g->m[g->n];
            g->p[g->n] = &g->v[g->n];
            g->n++;
        }
    }
}

struct policy {
    const struct lg_plugin *p;
    void *state;
};

static int
open_policy(struct policy *pol, const char *name, const char *options)
{
    char err[256];

    pol->p = lg_plugin_find(name);
    if (pol->p == NULL) {
        return -1;
    }
    if (lg_plugin_create_text(pol->p, options, &pol->state, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s: %s\n", name, err);
        return -1;
    }
    return 0;
}

/* Filters, scores and returns the cheapest candidate's index (first on ties). */
static int
pick(struct policy *pol, const struct lg_route_info *req, struct fleet *f, double *cost,
     const char **why)
{
    const struct lg_backend_view *live[N_MAX];
    unsigned char keep[N_MAX];
    size_t idx[N_MAX], m = 0;
    double c[N_MAX];
    int best = -1;

    memset(keep, 1, sizeof(keep));
    if (LG_POLICY_HAS(pol->p->ops, filter)) {
        pol->p->ops->filter(pol->state, req, f->p, f->n, keep);
    }
    for (size_t i = 0; i < f->n; i++) {
        if (keep[i]) {
            idx[m] = i;
            live[m++] = f->p[i];
        }
    }
    for (size_t k = 0; k < m; k++) {
        c[k] = 0;
    }
    *why = NULL;
    pol->p->ops->score(pol->state, req, live, m, c, why);
    for (size_t i = 0; i < f->n; i++) {
        cost[i] = NAN;
    }
    for (size_t k = 0; k < m; k++) {
        cost[idx[k]] = c[k];
        if (best < 0 || c[k] < cost[best]) {
            best = (int)idx[k];
        }
    }
    return best;
}

static struct lg_route_info
req_of(uint64_t prompt_bytes, uint32_t max_tokens, uint64_t prefix, uint64_t session)
{
    struct lg_route_info r = { .size = sizeof(r),
                               .model = "m",
                               .path = "/v1/chat/completions",
                               .stream = 1,
                               .prompt_bytes = prompt_bytes,
                               .max_tokens = max_tokens,
                               .prefix_hash = prefix,
                               .session_hash = session,
                               .attempt = 1,
                               .prefix_len =
                                   prefix ? (prompt_bytes < 2048 ? prompt_bytes : 2048) : 0 };

    return r;
}

static int
test_round_robin(void)
{
    struct fleet f = { .n = 0 };
    struct policy pol;
    struct lg_route_info r = req_of(100, 10, 0, 0);
    int count[3] = { 0 }, last = -1, repeats = 0;
    double cost[N_MAX];
    const char *why;

    add(&f, "a");
    add(&f, "b")->weight = 2;
    add(&f, "c");
    LG_CHECK(open_policy(&pol, "round_robin", "{}") == 0);
    for (int i = 0; i < 400; i++) {
        int k = pick(&pol, &r, &f, cost, &why);

        count[k]++;
        repeats += k == last && f.v[k].weight == 1;
        last = k;
    }
    LG_CHECK(count[0] == 100 && count[1] == 200 && count[2] == 100); /* weighted turns */
    LG_CHECK(repeats == 0);
    LG_CHECK_STR(why, "next_in_turn");
    pol.p->ops->destroy(pol.state);
    LG_CHECK(open_policy(&pol, "round_robin", "{\"x\":1}") != 0);
    return 0;
}

static int
test_least_request_and_p2c(void)
{
    struct fleet f = { .n = 0 };
    struct policy lr, p2c;
    struct lg_route_info r = req_of(100, 10, 0, 0);
    int count[3] = { 0 };
    double cost[N_MAX];
    const char *why;

    set_load(add(&f, "a"), 5, 0);
    set_load(add(&f, "b"), 2, 9); /* foreign load: least_request counts ours only */
    set_load(add(&f, "c"), 10, 0);
    LG_CHECK(open_policy(&lr, "least_request", "{}") == 0);
    LG_CHECK(pick(&lr, &r, &f, cost, &why) == 1);
    LG_CHECK_STR(why, "least_inflight");
    LG_CHECK(cost[0] == 500 && cost[1] == 200); /* 100 ms per request by default */
    f.v[2].weight = 10;                         /* 10 per weight unit: cheapest */
    LG_CHECK(pick(&lr, &r, &f, cost, &why) == 2);
    f.v[2].weight = 1;

    LG_CHECK(open_policy(&p2c, "p2c", "{}") == 0);
    for (int i = 0; i < 300; i++) {
        int k = pick(&p2c, &r, &f, cost, &why);
        int scored = 0;

        for (size_t j = 0; j < f.n; j++) {
            scored += !isnan(cost[j]);
        }
        LG_CHECK(scored == 2); /* the filter kept two */
        count[k]++;
    }
    /* the most loaded never wins a pair; the least loaded wins both its pairs */
    LG_CHECK(count[2] == 0 && count[1] > count[0] && count[0] > 50);
    LG_CHECK_STR(why, "p2c_least_inflight");
    lr.p->ops->destroy(lr.state);
    p2c.p->ops->destroy(p2c.state);
    return 0;
}

/* Where the host's engine model can tell, it is the prediction. */
static int
test_ttft_engine_model(void)
{
    struct fleet f = { .n = 0 };
    struct policy pol, off;
    double cost[N_MAX];
    const char *why;
    struct lg_backend_view *a, *b;
    struct lg_route_info shrt = req_of(512, 2000, 0, 0), few = req_of(512, 16, 0, 0);

    a = add(&f, "a");
    b = add(&f, "b");
    set_load(a, 8, 0); /* full by the formula's count */
    set_load(b, 3, 0);
    M(a)->wait_ms = 30; /* but a slot frees at once there */
    M(a)->prefill_ms_per_kib = 10;
    M(b)->wait_ms = 60;
    b->itl_ms = 60; /* a 4x slower decoder: not charged where the model tells */
    b->pending = 2;
    M(a)->scale = M(b)->scale = 1;
    /* the model is on by default (the pick's tolerance is off here: the
     * costs are the predictions) */
    LG_CHECK(open_policy(&pol, "ttft", "{\"tolerance_ms\": 0, \"queue_guard\": 0}") == 0);
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 0);
    /* the model's wait plus this prompt's prefill; no margin, no prefill
     * share, no decode charge */
    LG_CHECK(fabs(cost[0] - 35) < 1e-9 && fabs(cost[1] - 70) < 1e-9);
    /* a failing replica still costs more */
    b->error_rate = 0.5;
    pick(&pol, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[1] - 140) < 1e-9);
    b->error_rate = 0;
    /* scaled by what it missed there lately, unless told not to */
    M(b)->scale = 1.5;
    pick(&pol, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[1] - 105) < 1e-9);
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"engine_model\": 1, \"model_calibrate\": 0}") == 0);
    pick(&off, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[1] - 70) < 1e-9);
    off.p->ops->destroy(off.state);
    M(b)->scale = 1;
    /* no stream there lately to time its step: the formula reads it (a is
     * full by its count), unless model_needs_pace is 0 */
    M(a)->flags |= LG_MODEL_F_STEP_GUESS;
    pick(&pol, &shrt, &f, cost, &why);
    LG_CHECK(cost[0] > 35);
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"engine_model\": 1, \"model_needs_pace\": 0}") == 0);
    pick(&off, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - 35) < 1e-9);
    off.p->ops->destroy(off.state);
    M(a)->flags &= ~LG_MODEL_F_STEP_GUESS;
    /* two there would be admitted with it: its prefill (5 ms) holds up
     * both, and counts, unless model_prefill_share is 0 */
    M(a)->joined = 2;
    pick(&pol, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - 45) < 1e-9);
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"engine_model\": 1, \"model_prefill_share\": 0}")
             == 0);
    pick(&off, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - 35) < 1e-9);
    off.p->ops->destroy(off.state);
    M(a)->joined = 0;
    /* first-token work ahead there counts only with model_ahead_weight */
    a->work_ahead_ms = 20;
    pick(&pol, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - 35) < 1e-9);
    LG_CHECK(open_policy(&off, "ttft",
                         "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"engine_model\": 1, \"model_ahead_weight\": 1.5}")
             == 0);
    pick(&off, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - 65) < 1e-9);
    off.p->ops->destroy(off.state);
    a->work_ahead_ms = 0;
    /* model_decode_weight charges the slow decoder: 0.01 x 2000 x (60 - 1.75 x 15) */
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"engine_model\": 1, \"model_decode_weight\": 0.01}")
             == 0);
    pick(&off, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[1] - 70 - 0.01 * 2000 * (60 - 26.25)) < 1e-6);
    off.p->ops->destroy(off.state);
    /* by default the pick tolerates 20 ms: not enough for b (35 ms dearer) */
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0}") == 0);
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 0);
    LG_CHECK_STR(why, "lowest_predicted_ttft"); /* the cheapest leads */
    off.p->ops->destroy(off.state);
    /* tolerance_ms: within 40 ms of the soonest, the replica with the smaller
     * share of its slots taken wins; costs stay in [best, best + 40]. 16
     * tokens at b's gap (45 ms more than a's) take 720 ms longer: within
     * tolerance_decode_ms (2500) */
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 40}") == 0);
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 1);
    LG_CHECK_STR(why, "least_loaded_near_lowest_ttft");
    LG_CHECK(cost[1] >= 35 && cost[1] < cost[0] && cost[0] <= 75);
    /* not so 2,000 tokens (90 s longer), nor an answer of unknown length */
    LG_CHECK(pick(&off, &shrt, &f, cost, &why) == 0);
    few.max_tokens = 0;
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 0);
    few.max_tokens = 16;
    off.p->ops->destroy(off.state);
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 40, \"tolerance_decode_ms\": 1e6}")
             == 0);
    LG_CHECK(pick(&off, &shrt, &f, cost, &why) == 1);
    off.p->ops->destroy(off.state);
    /* beyond it, the soonest still wins */
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 30}") == 0);
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 0);
    LG_CHECK(fabs(cost[1] - 70) < 1e-9 && cost[0] >= 35 && cost[0] <= 65);
    off.p->ops->destroy(off.state);
    /* b with 6 of its 8 slots taken (tolerance_load 0.75): only the soonest
     * qualifies, however full */
    set_load(b, 6, 0);
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 40}") == 0);
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 0);
    LG_CHECK(cost[1] > cost[0] && cost[1] > 35 + 40);
    off.p->ops->destroy(off.state);
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 40, \"tolerance_load\": 0.8}") == 0);
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 1);
    off.p->ops->destroy(off.state);
    /* equally loaded, the sooner one wins within the tolerance */
    set_load(a, 3, 0);
    set_load(b, 3, 0);
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 40}") == 0);
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 0);
    LG_CHECK(cost[0] < cost[1] && cost[1] <= 75);
    off.p->ops->destroy(off.state);
    /* tolerance_count (1 by default): a with 6 of its 32 slots taken, b
     * with 4 of 8; by share (0) the sooner a (0.19 against 0.5), by
     * requests b (4 against 6) */
    a->capacity = 32;
    M(a)->slots = 32;
    set_load(a, 6, 0);
    set_load(b, 4, 0);
    LG_CHECK(open_policy(&off, "ttft",
                         "{\"queue_guard\": 0, \"tolerance_ms\": 40, \"tolerance_count\": 0}")
             == 0);
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 0);
    off.p->ops->destroy(off.state);
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 40}") == 0);
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 1);
    LG_CHECK_STR(why, "least_loaded_near_lowest_ttft");
    /* b at 6 of 8 (tolerance_load 0.75) no longer qualifies, by either rank */
    set_load(b, 6, 0);
    LG_CHECK(pick(&off, &few, &f, cost, &why) == 0);
    off.p->ops->destroy(off.state);
    a->capacity = 8;
    M(a)->slots = 8;
    set_load(a, 8, 0);
    /* turned off, the formula decides: a is full and dearer than its model said */
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"engine_model\": 0}") == 0);
    pick(&off, &shrt, &f, cost, &why);
    LG_CHECK(cost[0] > 35);
    off.p->ops->destroy(off.state);
    /* a capacity guessed under the slots assumed (16 by default): the host
     * runs the model with those slots, and then it is used */
    a->flags |= LG_VIEW_F_CAP_GUESS;
    b->flags |= LG_VIEW_F_CAP_GUESS;
    M(a)->slots = M(b)->slots = 16;
    pick(&pol, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - 35) < 1e-9);
    /* the host ran it with fewer (its siblings' slots): that guess stands */
    M(a)->slots = 8;
    pick(&pol, &shrt, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - 35) < 1e-9);
    /* a model run with other slots than `slots` set here is not used */
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"engine_model\": 1, \"slots\": 16.5}") == 0);
    pick(&off, &shrt, &f, cost, &why);
    LG_CHECK(cost[0] > 35);
    off.p->ops->destroy(off.state);
    M(a)->slots = 16;
    LG_CHECK(open_policy(&off, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"engine_model\": 1, \"slots\": 12}") == 0);
    pick(&off, &shrt, &f, cost, &why);
    LG_CHECK(cost[0] > 35);
    off.p->ops->destroy(off.state);
    /* nor where it cannot tell */
    a->flags &= ~LG_VIEW_F_CAP_GUESS;
    M(a)->wait_ms = -1;
    pick(&pol, &shrt, &f, cost, &why);
    LG_CHECK(cost[0] > 35);
    pol.p->ops->destroy(pol.state);
    return 0;
}

/* Where the host judges the engine model off on a replica, the measured
 * terms there decide, and the pick's reason says so. */
static int
test_ttft_measured_terms(void)
{
    struct fleet f = { .n = 0 };
    struct policy pol, off;
    double cost[N_MAX];
    const char *why;
    struct lg_backend_view *a, *b;
    struct lg_route_info shrt = req_of(512, 16, 0, 0);

    a = add(&f, "a");
    b = add(&f, "b");
    set_load(a, 4, 0);
    set_load(b, 4, 0);
    M(a)->wait_ms = 30; /* the model sees a slot free on a... */
    M(a)->prefill_ms_per_kib = 10;
    M(b)->wait_ms = 60;
    M(b)->prefill_ms_per_kib = 10;
    M(a)->measured_ms = 400; /* ...where first tokens at this load took 400 ms lately */
    M(b)->measured_ms = 70;
    M(a)->measured_ms_per_kib = M(b)->measured_ms_per_kib = 10;
    LG_CHECK(open_policy(&pol, "ttft", "{\"tolerance_ms\": 0}") == 0);
    /* the model not judged off: it decides, whatever the measured terms say */
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 0);
    LG_CHECK(fabs(cost[0] - 35) < 1e-9 && fabs(cost[1] - 65) < 1e-9);
    LG_CHECK_STR(why, "lowest_predicted_ttft");
    /* judged off on a: its measured terms, with its prefill */
    M(a)->flags |= LG_MODEL_F_MISSES;
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 1);
    LG_CHECK(fabs(cost[0] - 405) < 1e-9 && fabs(cost[1] - 65) < 1e-9);
    LG_CHECK_STR(why, "lowest_predicted_ttft"); /* b won on the model's word */
    /* judged off on both: the measured terms decide the winner too */
    M(b)->flags |= LG_MODEL_F_MISSES;
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 1);
    LG_CHECK(fabs(cost[1] - 75) < 1e-9);
    LG_CHECK_STR(why, "lowest_measured_ttft");
    /* never sooner than the model (a queue it sees is there): b's model
     * says 300 ms, its curve 70 */
    M(b)->wait_ms = 295;
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 1);
    LG_CHECK(fabs(cost[1] - 300) < 1e-9);
    M(b)->wait_ms = 60;
    /* also where the model cannot run (others' load there) */
    M(a)->wait_ms = -1;
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 1);
    LG_CHECK(fabs(cost[0] - 405) < 1e-9);
    /* no measured terms there (no first token lately): the model, or the formula */
    M(a)->wait_ms = 30;
    M(a)->measured_ms = -1;
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 0);
    LG_CHECK(fabs(cost[0] - 35) < 1e-9);
    M(a)->measured_ms = 400;
    /* measured 0 leaves the model in charge */
    LG_CHECK(open_policy(&off, "ttft", "{\"tolerance_ms\": 0, \"measured\": 0}") == 0);
    LG_CHECK(pick(&off, &shrt, &f, cost, &why) == 0);
    LG_CHECK(fabs(cost[0] - 35) < 1e-9 && fabs(cost[1] - 65) < 1e-9);
    off.p->ops->destroy(off.state);
    pol.p->ops->destroy(pol.state);
    return 0;
}

static int
test_ttft(void)
{
    struct fleet f = { .n = 0 };
    struct policy pol, dec;
    double cost[N_MAX];
    const char *why;
    struct lg_backend_view *fast, *slow;
    struct lg_route_info shrt = req_of(512, 64, 0, 0), lng = req_of(16 * 1024, 64, 0, 0);

    fast = add(&f, "fast");
    slow = add(&f, "slow");
    slow->ttft_fixed_ms = 160; /* 4x slower */
    slow->ttft_ms_per_kib = 80;
    slow->itl_ms = 60;
    slow->hold_ms = 4000;
    /* the model's terms at unit weights (the default weighs the wait 1.6x:
     * checked below) */
    LG_CHECK(open_policy(&pol, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"decode_weight\": 0, \"wait_weight\": 1}") == 0);

    /* idle: the fast one */
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 0);
    LG_CHECK_STR(why, "lowest_predicted_ttft");
    LG_CHECK(fabs(cost[0] - 50) < 1e-9 && fabs(cost[1] - 200) < 1e-9);

    /* fast has free slots: it still wins, a bit dearer (batching) */
    set_load(fast, 6, 0);
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 0);
    LG_CHECK(cost[0] > 50 && cost[0] < 65);

    /* fast is full and was just refilled: its queue costs more than the slow one */
    set_load(fast, 8, 0);
    fast->inflight_age_ms = 100;
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 1);
    /* ... but not when its batch is about to turn over and slow is busy too */
    fast->inflight_age_ms = 500;
    set_load(slow, 4, 0);
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 0);
    {
        /* the default weighs a full engine's wait 1.6x, and nothing else */
        double unit[N_MAX], wait;

        memcpy(unit, cost, sizeof(unit));
        LG_CHECK(open_policy(&dec, "ttft", "{\"tolerance_ms\": 0, \"decode_weight\": 0}") == 0);
        LG_CHECK(pick(&dec, &shrt, &f, cost, &why) == 1);
        wait = (cost[0] - unit[0]) / 0.6;
        LG_CHECK(wait > 10 && fabs(cost[1] - unit[1]) < 1e-9); /* slow is not full */
        dec.p->ops->destroy(dec.state);
    }

    /* the engine's queue says other clients fill fast: their load counts */
    set_load(fast, 2, 7);
    set_load(slow, 0, 0);
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 1);

    /* a long prompt goes where prefill is fast, even if the fixed part is not */
    set_load(fast, 0, 0);
    fast->ttft_fixed_ms = 20;
    fast->ttft_ms_per_kib = 30;
    slow->ttft_fixed_ms = 60;
    slow->ttft_ms_per_kib = 5;
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 0);
    LG_CHECK(pick(&pol, &lng, &f, cost, &why) == 1);

    /* requests there have waited 3 s for a first token: it is stalled */
    slow->pending = 3;
    slow->pending_age_ms = 3000;
    LG_CHECK(pick(&pol, &lng, &f, cost, &why) == 0);
    slow->pending = 0;

    /* failing replicas cost more: with 90% failing, nearly 3x */
    slow->error_rate = 0.9;
    pick(&pol, &lng, &f, cost, &why);
    LG_CHECK(fabs(cost[1] - 140 * 2.8) < 1e-6);
    slow->error_rate = 0;

    /* equal TTFT, different decode speed: only decode_weight tells them apart */
    fast->ttft_fixed_ms = slow->ttft_fixed_ms = 50;
    fast->ttft_ms_per_kib = slow->ttft_ms_per_kib = 10;
    fast->itl_ms = slow->itl_ms = 15;
    slow->itl_ms = 60;
    fast->hold_ms = slow->hold_ms = 1000;
    fast->itl_ms = 15;
    LG_CHECK(open_policy(&dec, "ttft",
                         "{\"tolerance_ms\": 0, \"decode_weight\": 0.05, \"batch_weight\": 0, \"decode_slack\": 0}")
             == 0);
    {
        struct lg_route_info many = req_of(512, 2000, 0, 0);
        struct lg_backend_view tmp = *fast;

        /* swap so the slow decoder comes first: a tie would pick it */
        *fast = *slow;
        *slow = tmp;
        LG_CHECK(pick(&dec, &many, &f, cost, &why) == 1);
        LG_CHECK(cost[0] - cost[1] > 4000);
        dec.p->ops->destroy(dec.state);

        /* with the default slack of 1.75, only the gap beyond 1.75x the
         * least is charged: 0.05 x 2000 x (60 - 26.25) = 3375 ms more for
         * the 4x slower decoder, 75 for one 1.8x slower, nothing for one
         * 1.7x slower */
        LG_CHECK(open_policy(&dec, "ttft", "{\"tolerance_ms\": 0, \"batch_weight\": 0}") == 0);
        LG_CHECK(pick(&dec, &many, &f, cost, &why) == 1);
        LG_CHECK(fabs(cost[0] - cost[1] - 3375) < 1e-6);
        fast->itl_ms = 27; /* `fast` holds the slow decoder since the swap: now 1.8x the least */
        pick(&dec, &many, &f, cost, &why);
        LG_CHECK(fabs(cost[0] - cost[1] - 75) < 1e-6);
        fast->itl_ms = 25.5; /* 1.7x the least */
        pick(&dec, &many, &f, cost, &why);
        LG_CHECK(fabs(cost[0] - cost[1]) < 1e-6);
    }
    dec.p->ops->destroy(dec.state);
    LG_CHECK(open_policy(&dec, "ttft", "{\"slots\": 0}") != 0); /* out of range */
    pol.p->ops->destroy(pol.state);
    return 0;
}

static int
owner_of(struct policy *pol, struct fleet *f, uint64_t key, bool session)
{
    struct lg_route_info r = req_of(4096, 10, session ? 0 : key, session ? key : 0);
    double cost[N_MAX];
    const char *why;

    return pick(pol, &r, f, cost, &why);
}

static int
test_prefix_affinity(void)
{
    struct fleet f = { .n = 0 }, g = { .n = 0 };
    struct policy pol;
    int count[4] = { 0 }, moved = 0;
    double cost[N_MAX];
    const char *why;
    struct lg_route_info r = req_of(8192, 10, 0x1234567, 0);

    for (int i = 0; i < 4; i++) {
        add(&f, "x");
    }
    LG_CHECK(open_policy(&pol, "prefix_affinity", "{}") == 0);

    /* a prefix has one owner, cost 0; the others pay the prefill it saves */
    int o = pick(&pol, &r, &f, cost, &why);
    LG_CHECK_STR(why, "prefix_owner");
    for (size_t i = 0; i < f.n; i++) {
        /* 6 x 75% of 8 KiB at the prior's 20 ms/KiB */
        LG_CHECK(cost[i] == ((int)i == o ? 0 : 720));
    }
    LG_CHECK(owner_of(&pol, &f, 0x1234567, false) == o);

    /* keys spread evenly */
    for (uint64_t k = 1; k <= 4000; k++) {
        count[owner_of(&pol, &f, lg_mix64(k), false)]++;
    }
    for (int i = 0; i < 4; i++) {
        LG_CHECK(count[i] > 850 && count[i] < 1150);
    }

    /* removing a replica moves only its own keys */
    fleet_without(&f, &g, 2);
    for (uint64_t k = 1; k <= 2000; k++) {
        int a = owner_of(&pol, &f, lg_mix64(k), false);
        int b = owner_of(&pol, &g, lg_mix64(k), false);
        int b_in_f = b >= 2 ? b + 1 : b;

        if (a != 2) {
            moved += a != b_in_f;
        }
    }
    LG_CHECK(moved == 0);

    /* bounded load: an owner far above its fair share hands over to the next */
    set_load(&f.v[o], 12, 0);
    for (size_t i = 0; i < f.n; i++) {
        if ((int)i != o) {
            set_load(&f.v[i], 1, 0);
        }
    }
    LG_CHECK(pick(&pol, &r, &f, cost, &why) != o);
    LG_CHECK_STR(why, "prefix_owner_overflow");
    LG_CHECK(cost[o] == 720);
    /* ... unless it has a free slot: nothing would wait there */
    f.v[o].capacity = 16;
    LG_CHECK(pick(&pol, &r, &f, cost, &why) == o);
    LG_CHECK_STR(why, "prefix_owner");
    /* a guessed capacity (never seen full) counts as at least `slots` (16) */
    f.v[o].capacity = 8;
    f.v[o].flags |= LG_VIEW_F_CAP_GUESS;
    LG_CHECK(pick(&pol, &r, &f, cost, &why) == o);
    f.v[o].flags &= ~LG_VIEW_F_CAP_GUESS;
    LG_CHECK(pick(&pol, &r, &f, cost, &why) != o);

    /* no prefix: no opinion */
    r.prefix_hash = 0;
    for (size_t i = 0; i < f.n; i++) {
        cost[i] = -1;
    }
    pick(&pol, &r, &f, cost, &why);
    for (size_t i = 0; i < f.n; i++) {
        LG_CHECK(cost[i] == 0);
    }
    pol.p->ops->destroy(pol.state);
    return 0;
}

static int
test_session_affinity(void)
{
    struct fleet f = { .n = 0 };
    struct policy pol;
    double cost[N_MAX];
    const char *why;
    struct lg_route_info r = req_of(1024, 10, 0, 0xabcdef);
    int o;

    for (int i = 0; i < 3; i++) {
        add(&f, "x");
    }
    LG_CHECK(open_policy(&pol, "session_affinity", "{\"min_ms\": 250}") == 0);
    o = pick(&pol, &r, &f, cost, &why);
    LG_CHECK_STR(why, "session_owner");
    LG_CHECK(cost[(o + 1) % 3] == 250); /* a short prompt: the floor */
    for (int i = 0; i < 20; i++) {
        LG_CHECK(owner_of(&pol, &f, 0xabcdef, true) == o);
    }
    /* the prefix does not matter to it */
    r.prefix_hash = 99;
    LG_CHECK(pick(&pol, &r, &f, cost, &why) == o);
    pol.p->ops->destroy(pol.state);
    return 0;
}

/*
 * A few shared prefixes are balanced by count, not left to the hash: with
 * 16 keys on 4 replicas each owns exactly 4, whatever order they arrive in,
 * and keeps them. Hashing alone gives some replicas 6 (more than a cache
 * of 5 holds) on most seeds.
 */
static int
test_prefix_key_balance(void)
{
    struct fleet f = { .n = 0 }, g = { .n = 0 };
    struct policy pol, hashed;
    int count[4] = { 0 }, first[16], worst_hashed = 0;
    char err[128];

    for (int i = 0; i < 4; i++) {
        add(&f, "x");
    }
    LG_CHECK(open_policy(&pol, "prefix_affinity", "{}") == 0);
    LG_CHECK(open_policy(&hashed, "prefix_affinity", "{\"balance_keys\": 0}") == 0);
    for (int round = 0; round < 5; round++) {
        for (uint64_t k = 0; k < 16; k++) {
            int o = owner_of(&pol, &f, lg_mix64(k + 100), false);

            if (round == 0) {
                first[k] = o;
                count[o]++;
            }
            LG_CHECK(o == first[k]); /* sticky */
        }
    }
    for (int i = 0; i < 4; i++) {
        LG_CHECK(count[i] == 4);
    }
    /* for contrast, the hash alone over many seeds: some replica gets 6+ */
    for (uint64_t seed = 0; seed < 50; seed++) {
        int hc[4] = { 0 };

        for (uint64_t k = 0; k < 16; k++) {
            hc[owner_of(&hashed, &f, lg_mix64(seed * 1000 + k + 1), false)]++;
        }
        for (int i = 0; i < 4; i++) {
            worst_hashed = hc[i] > worst_hashed ? hc[i] : worst_hashed;
        }
    }
    LG_CHECK(worst_hashed >= 6);

    /* a retry whose key's owner is not a candidate goes by hash order and
     * leaves the key where it is */
    fleet_without(&f, &g, (size_t)first[0]);
    {
        struct lg_route_info r = req_of(4096, 10, lg_mix64(100), 0);
        double cost[N_MAX];
        const char *why;

        r.attempt = 2;
        LG_CHECK(pick(&pol, &r, &g, cost, &why) >= 0);
        LG_CHECK_STR(why, "prefix_owner");
        LG_CHECK(owner_of(&pol, &f, lg_mix64(100), false) == first[0]);
    }

    /* a key whose owner leaves is reassigned and stays, the others stay */
    fleet_without(&f, &g, 1);
    for (uint64_t k = 0; k < 16; k++) {
        int o = owner_of(&pol, &g, lg_mix64(k + 100), false);
        int in_f = o >= 1 ? o + 1 : o;

        if (first[k] != 1) {
            LG_CHECK(in_f == first[k]);
        } else {
            LG_CHECK(in_f != 1);
            LG_CHECK(owner_of(&pol, &g, lg_mix64(k + 100), false) == o);
        }
    }
    pol.p->ops->destroy(pol.state);
    hashed.p->ops->destroy(hashed.state);

    /* the key table is prefix_affinity's alone */
    LG_CHECK(lg_plugin_create_text(lg_plugin_find("session_affinity"), "{\"keys\": 100}",
                                   &pol.state, err, sizeof(err))
             != 0);
    LG_CHECK(strstr(err, "/keys: unknown option") == err);
    return 0;
}

/*
 * A replica back from a crash (or new) in slow start owns no keys, and every
 * other replica holds more than its share: balancing alone would give it
 * every new key (a flood the router's slow start cannot thin, since each
 * time it is a candidate it wins). While it ramps it takes only the keys
 * the hash makes it home to, about a fair share of those it sees (the
 * router passes it over with probability 1 - ramp: ramp x fair in all);
 * after its ramp it catches up on keys, within the load bound.
 */
static int
test_prefix_slow_start(void)
{
    struct fleet f = { .n = 0 }, g = { .n = 0 };
    struct policy pol;
    int back = 0, after = 0, count[4];

    for (int i = 0; i < 4; i++) {
        add(&f, "x");
    }
    LG_CHECK(open_policy(&pol, "prefix_affinity", "{}") == 0);
    fleet_without(&f, &g, 3); /* r4 is down: 300 keys go to the others */
    for (uint64_t k = 1; k <= 300; k++) {
        LG_CHECK(owner_of(&pol, &g, lg_mix64(k), false) < 3);
    }
    f.v[3].ramp = 0.2;
    f.v[3].flags |= LG_VIEW_F_RAMPING;
    for (uint64_t k = 1001; k <= 1400; k++) {
        back += owner_of(&pol, &f, lg_mix64(k), false) == 3;
    }
    /* the hash's 25% of 400 keys, and no more */
    LG_CHECK(back >= 60 && back <= 140);
    /* keys it was given stay with it */
    for (uint64_t k = 1001; k <= 1400; k++) {
        (void)owner_of(&pol, &f, lg_mix64(k), false);
    }
    f.v[3].ramp = 1;
    f.v[3].flags &= ~LG_VIEW_F_RAMPING;
    for (uint64_t k = 2001; k <= 2100; k++) {
        after += owner_of(&pol, &f, lg_mix64(k), false) == 3;
    }
    LG_CHECK(after >= 75); /* under its share of the keys: most new ones (the hash: 25) */
    pol.p->ops->destroy(pol.state);

    /* a whole fleet in slow start (all back at once) is balanced as usual */
    LG_CHECK(open_policy(&pol, "prefix_affinity", "{}") == 0);
    for (int i = 0; i < 4; i++) {
        f.v[i].ramp = 0.3;
        f.v[i].flags |= LG_VIEW_F_RAMPING;
        count[i] = 0;
    }
    for (uint64_t k = 0; k < 16; k++) {
        count[owner_of(&pol, &f, lg_mix64(k + 100), false)]++;
    }
    for (int i = 0; i < 4; i++) {
        LG_CHECK(count[i] == 4);
    }
    pol.p->ops->destroy(pol.state);
    return 0;
}

/*
 * A replica that comes back finds its keys reassigned; the shared prompts
 * are seen again and again, so without moving keys it would get none of
 * them for good (6, 6, 4, 0 of 16 on this seed). Over-share owners hand it
 * one key per request until the counts are level: 4 moves in all, then
 * nothing moves. In slow start it takes only keys it is the hash's first
 * for (the hash-only policy's owner on an idle fleet).
 */
static int
test_prefix_rejoin(void)
{
    struct fleet f = { .n = 0 }, g = { .n = 0 };
    struct policy pol, hashed;
    int before[16], now[16], cnt[4] = { 0 }, moves = 0;

    for (int i = 0; i < 4; i++) {
        add(&f, "x");
    }
    LG_CHECK(open_policy(&pol, "prefix_affinity", "{}") == 0);
    LG_CHECK(open_policy(&hashed, "prefix_affinity", "{\"balance_keys\": 0}") == 0);
    for (uint64_t k = 0; k < 16; k++) {
        (void)owner_of(&pol, &f, lg_mix64(k + 100), false);
    }
    fleet_without(&f, &g, 3); /* r4 out: its keys go to the others */
    for (uint64_t k = 0; k < 16; k++) {
        before[k] = owner_of(&pol, &g, lg_mix64(k + 100), false);
        LG_CHECK(before[k] < 3);
    }
    f.v[3].ramp = 0.5;
    f.v[3].flags |= LG_VIEW_F_RAMPING;
    for (int round = 0; round < 3; round++) {
        for (uint64_t k = 0; k < 16; k++) {
            int o = owner_of(&pol, &f, lg_mix64(k + 100), false);

            if (o == 3) {
                LG_CHECK(owner_of(&hashed, &f, lg_mix64(k + 100), false) == 3);
            }
        }
    }
    f.v[3].ramp = 1;
    f.v[3].flags &= ~LG_VIEW_F_RAMPING;
    for (int round = 0; round < 4; round++) {
        for (uint64_t k = 0; k < 16; k++) {
            now[k] = owner_of(&pol, &f, lg_mix64(k + 100), false);
        }
    }
    for (uint64_t k = 0; k < 16; k++) {
        LG_CHECK(owner_of(&pol, &f, lg_mix64(k + 100), false) == now[k]); /* settled */
        cnt[now[k]]++;
        moves += now[k] != before[k];
    }
    for (int i = 0; i < 4; i++) {
        LG_CHECK(cnt[i] == 4);
    }
    LG_CHECK(moves == 4);
    pol.p->ops->destroy(pol.state);
    hashed.p->ops->destroy(hashed.state);
    return 0;
}

/* e2e_slack: a long answer stays off a replica that starts it soonest but
 * would end it much later; a short one still goes where its first token
 * comes first. */
static int
test_ttft_finish_guard(void)
{
    struct fleet f = { .n = 0 };
    struct policy pol, off;
    double cost[N_MAX];
    const char *why;
    struct lg_backend_view *fast, *slow;
    struct lg_route_info shrt = req_of(512, 12, 0, 0), lng = req_of(512, 200, 0, 0),
                         unknown = req_of(512, 0, 0, 0);

    fast = add(&f, "fast");
    slow = add(&f, "slow");
    M(fast)->wait_ms = 400; /* its slots are full: a first token in 400 ms */
    M(fast)->prefill_ms_per_kib = 0;
    fast->itl_ms = 15;
    M(slow)->wait_ms = 100; /* idle, a quarter of the pace */
    M(slow)->prefill_ms_per_kib = 0;
    slow->itl_ms = 60;
    LG_CHECK(open_policy(&pol, "ttft",
                         "{\"tolerance_ms\": 0, \"e2e_slack\": 0.25, \"e2e_slack_ms\": 250}")
             == 0);
    LG_CHECK(open_policy(&off, "ttft", "{\"tolerance_ms\": 0}") == 0); /* off by default */
    /* 12 tokens: 400 + 180 against 100 + 720, within 1.25x + 250 ms */
    LG_CHECK(pick(&pol, &shrt, &f, cost, &why) == 1);
    LG_CHECK_STR(why, "lowest_predicted_ttft");
    LG_CHECK(fabs(cost[0] - 400) < 1e-9 && fabs(cost[1] - 100) < 1e-9);
    /* 200 tokens: 3,400 against 12,100 ms; raised above the other by its
     * excess over 3,400 x 1.25 + 250 */
    LG_CHECK(pick(&pol, &lng, &f, cost, &why) == 0);
    LG_CHECK_STR(why, "lowest_ttft_ending_in_time");
    LG_CHECK(fabs(cost[0] - 400) < 1e-9 && fabs(cost[1] - (400 + 12100 - 4500)) < 1e-9);
    /* off (the default), or no length given: the first token decides */
    LG_CHECK(pick(&off, &lng, &f, cost, &why) == 1);
    LG_CHECK(pick(&pol, &unknown, &f, cost, &why) == 1);
    /* its own answers' pace counts over the fleet's that itl_ms leans back
     * to when they are old */
    slow->itl_ms = 20;
    slow->itl_own_ms = 60;
    LG_CHECK(pick(&pol, &lng, &f, cost, &why) == 0);
    /* a decoder at most 1.25x slower: the soonest first token wins */
    slow->itl_own_ms = 20;
    LG_CHECK(pick(&pol, &lng, &f, cost, &why) == 1);
    pol.p->ops->destroy(pol.state);
    /* e2e_slack_load: the answer is held to where it ends soonest only if
     * that takes at most this share of its slots (8 here) */
    slow->itl_own_ms = 60;
    LG_CHECK(open_policy(&pol, "ttft",
                         "{\"tolerance_ms\": 0, \"e2e_slack\": 0.25, \"e2e_slack_ms\": 250, "
                         "\"e2e_slack_load\": 0.75}")
             == 0);
    fast->load = 5; /* 6 of 8 with it */
    LG_CHECK(pick(&pol, &lng, &f, cost, &why) == 0);
    LG_CHECK_STR(why, "lowest_ttft_ending_in_time");
    fast->load = 6; /* 7 of 8: no guard, the first token decides */
    LG_CHECK(pick(&pol, &lng, &f, cost, &why) == 1);
    LG_CHECK_STR(why, "lowest_predicted_ttft");
    LG_CHECK(fabs(cost[0] - 400) < 1e-9 && fabs(cost[1] - 100) < 1e-9);
    LG_CHECK(pick(&off, &lng, &f, cost, &why) == 1);
    pol.p->ops->destroy(pol.state);
    off.p->ops->destroy(off.state);
    return 0;
}

/* interference: a prompt goes where its prefill holds up the fewest
 * answers being generated, where that outweighs a slower first token: the
 * replica that prefills fastest takes every prompt otherwise, and its
 * decoders wait through each (chunked prefill most of all). */
static int
test_ttft_interference(void)
{
    struct fleet f = { .n = 0 };
    struct policy pol, off;
    double cost[N_MAX];
    const char *why;
    struct lg_backend_view *fast, *slow;
    struct lg_route_info r = req_of(2048, 64, 0, 0);

    fast = add(&f, "fast");
    slow = add(&f, "slow");
    M(fast)->wait_ms = 60; /* 12 there, 2 awaiting a first token: 10 decoding */
    M(fast)->prefill_ms_per_kib = 20;
    M(fast)->prefill_fixed_ms = 5;
    fast->capacity = 16;
    fast->load = 12;
    fast->pending = 2;
    M(slow)->wait_ms = 90; /* 2 decoding */
    M(slow)->prefill_ms_per_kib = 30;
    M(slow)->prefill_fixed_ms = 5;
    slow->capacity = 16;
    slow->load = 2;
    LG_CHECK(open_policy(&pol, "ttft", "{\"queue_guard\": 0, \"tolerance_ms\": 0, \"interference\": 0.3}") == 0);
    LG_CHECK(open_policy(&off, "ttft", "{\"tolerance_ms\": 0}") == 0); /* off by default */
    /* first tokens 100 against 150 ms; their prefills, 45 ms to 10 answers
     * and 65 ms to 2, charge 0.3 x 450 and 0.3 x 130 */
    LG_CHECK(pick(&pol, &r, &f, cost, &why) == 1);
    LG_CHECK(fabs(cost[0] - 235) < 1e-9 && fabs(cost[1] - 189) < 1e-9);
    LG_CHECK(pick(&off, &r, &f, cost, &why) == 0);
    LG_CHECK(fabs(cost[0] - 100) < 1e-9 && fabs(cost[1] - 150) < 1e-9);
    /* no more decoders than slots, less those awaiting a first token */
    fast->load = 40;
    fast->pending = 6;
    LG_CHECK(pick(&pol, &r, &f, cost, &why) == 1);
    LG_CHECK(fabs(cost[0] - (100 + 0.3 * 45 * 10)) < 1e-9);
    fast->pending = 12; /* 4 decoding: 154 */
    LG_CHECK(pick(&pol, &r, &f, cost, &why) == 0);
    /* where the model cannot tell, the formula's prompt cost: 40 ms for
     * 2 KiB on both (ttft_ms_per_kib 20), to 12 answers against 2; first
     * tokens 91 against 122 ms */
    M(fast)->wait_ms = -1;
    M(slow)->wait_ms = -1;
    slow->ttft_fixed_ms = 80;
    fast->load = 12;
    fast->pending = 0;
    LG_CHECK(pick(&pol, &r, &f, cost, &why) == 1);
    LG_CHECK(pick(&off, &r, &f, cost, &why) == 0);
    pol.p->ops->destroy(pol.state);
    off.p->ops->destroy(off.state);
    return 0;
}

/* least_load: token work over token rate, with the KV cache's pressure. */
static int
test_least_load(void)
{
    struct fleet f = { .n = 0 };
    struct policy ll, opt;
    struct lg_route_info r = req_of(400, 100, 0, 0); /* 100 prompt tokens, 100 out */
    double cost[N_MAX];
    const char *why;
    struct lg_backend_view *a = add(&f, "a"), *b = add(&f, "b"), *c = add(&f, "c");

    /* a: 1000 tokens to go at 500 a second; b: 3000 at 2000 a second (a
     * replica four times as fast, with more work); c: idle but slow */
    a->work_tokens = 1000;
    a->tokens_per_s = 500;
    b->work_tokens = 3000;
    b->tokens_per_s = 2000;
    c->work_tokens = 0;
    c->tokens_per_s = 50;
    LG_CHECK(open_policy(&ll, "least_load", "{}") == 0);
    LG_CHECK(pick(&ll, &r, &f, cost, &why) == 1);
    LG_CHECK_STR(why, "least_expected_load");
    LG_CHECK(fabs(cost[0] - 2400) < 1e-9 && fabs(cost[1] - 1600) < 1e-9);
    LG_CHECK(fabs(cost[2] - 4000) < 1e-9);
    /* a fresh KV cache half full costs 150 ms, 90% full 150 ms x 9 */
    b->engine_kv_usage = 0.5;
    b->flags &= ~LG_VIEW_F_STALE;
    LG_CHECK(pick(&ll, &r, &f, cost, &why) == 1 && fabs(cost[1] - 1750) < 1e-6);
    b->engine_kv_usage = 0.9;
    LG_CHECK(pick(&ll, &r, &f, cost, &why) == 0 && fabs(cost[1] - 2950) < 1e-6);
    b->engine_kv_usage = 0.9;
    b->flags |= LG_VIEW_F_STALE; /* a stale sample does not count */
    LG_CHECK(pick(&ll, &r, &f, cost, &why) == 1);
    /* prompts weighed less: the request's own work shrinks everywhere */
    LG_CHECK(open_policy(&opt, "least_load", "{\"prompt_weight\": 0, \"kv_ms\": 0}") == 0);
    LG_CHECK(pick(&opt, &r, &f, cost, &why) == 1 && fabs(cost[1] - 1550) < 1e-9);
    /* a host without token work (an older view): requests in flight */
    set_load(a, 3, 0);
    set_load(b, 1, 0);
    set_load(c, 2, 0);
    for (size_t i = 0; i < f.n; i++) {
        f.v[i].size = offsetof(struct lg_backend_view, work_tokens);
    }
    LG_CHECK(pick(&opt, &r, &f, cost, &why) == 1 && cost[1] == 100);
    ll.p->ops->destroy(ll.state);
    opt.p->ops->destroy(opt.state);
    return 0;
}

/*
 * Chunked prefill: a step there carries 16 tokens, one for each of the 3
 * sequences decoding first, so a 1 KiB prompt (256 tokens) takes
 * ceil(256 / 13) = 20 steps: 19 more than the model's wait holds, each a
 * step (15 ms) and a prefilling step's fixed part (5 ms). Unchunked (0) or
 * with room for the whole prompt, as before.
 */
static int
test_ttft_chunked(void)
{
    struct fleet f = { .n = 0 };
    struct policy pol;
    double cost[N_MAX];
    const char *why;
    struct lg_backend_view *a, *b;
    struct lg_route_info r = req_of(1024, 16, 0, 0), small = req_of(40, 16, 0, 0);

    a = add(&f, "chunked");
    b = add(&f, "whole");
    M(a)->wait_ms = M(b)->wait_ms = 30;
    M(a)->prefill_fixed_ms = M(b)->prefill_fixed_ms = 5;
    M(a)->scale = M(b)->scale = 1;
    M(a)->prefill_chunk = 16;
    M(a)->decoding = 3;
    LG_CHECK(open_policy(&pol, "ttft", "{\"tolerance_ms\": 0}") == 0);
    LG_CHECK(pick(&pol, &r, &f, cost, &why) == 1);
    LG_CHECK(fabs(cost[1] - 50) < 1e-9);               /* 30 + 20 ms a KiB */
    LG_CHECK(fabs(cost[0] - (50 + 19 * 20)) < 1e-9); /* 19 more steps */
    /* 10 tokens fit one step: no further step */
    LG_CHECK(pick(&pol, &small, &f, cost, &why) == 0);
    LG_CHECK(fabs(cost[0] - cost[1]) < 1e-9);
    /* nothing decoding: 16 a step, 16 steps */
    M(a)->decoding = 0;
    pick(&pol, &r, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - (50 + 15 * 20)) < 1e-9);
    /* more decoding than the chunk holds: a token a step at least */
    M(a)->decoding = 40;
    M(a)->prefill_chunk = 8;
    pick(&pol, &small, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - (30 + 20 * 40.0 / 1024 + 9 * 20)) < 1e-9);
    /* a model view from before these members (size short of them): unchunked */
    M(a)->size = offsetof(struct lg_engine_model_view, prefill_chunk);
    pick(&pol, &r, &f, cost, &why);
    LG_CHECK(fabs(cost[0] - 50) < 1e-9);
    pol.p->ops->destroy(pol.state);
    return 0;
}

LG_TEST_MAIN(test_round_robin, test_least_request_and_p2c, test_least_load, test_ttft, test_ttft_engine_model,
             test_ttft_measured_terms, test_ttft_finish_guard, test_ttft_interference, test_ttft_chunked,
             test_prefix_affinity, test_prefix_key_balance, test_prefix_slow_start,
             test_prefix_rejoin, test_session_affinity)
