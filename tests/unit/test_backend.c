/*
 * test_backend.c: a backend's live state as the policies see it: first-token
 * work ahead and slot ends counted request by request, and a slow replica's estimate
 * fading faster once it sits idle, so that it is tried again; a view reused
 * only while nothing it reads changed.
 */
#include <math.h>
#include <string.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/backend_view.h"
#include "fleet/fleet.h"
#include "lg_test.h"
#include "lg_test_fleet.h"
#include "route/plugin.h"
#include "route/router.h"

static const char text[] =
    "{\"listen\": \"127.0.0.1:8080\", \"backends\": "
    "[{\"name\": \"r1\", \"url\": \"http://127.0.0.1:9001\", \"models\": [\"m\"]}]}";

static struct lg_config *conf;
static struct lg_fleet *fleet;

static int
setup(void)
{
    return lg_test_fleet_load(text, &conf, &fleet);
}

/* The most overdue request's lateness, as the work-ahead scan reports it. */
static double
late_at(struct lg_backend *b, uint64_t t)
{
    double late = -1;

    lg_backend_work_ahead_ms(b, t, NULL, &late);
    return late;
}

static int
test_work_ahead_per_request(void)
{
    struct lg_backend *b = fleet->backends[0];
    uint64_t t = lg_now_ns();
    double longest = -1;
    int s1, s2, s3;

    LG_CHECK(lg_backend_work_ahead_ms(b, t, &longest, NULL) == 0 && longest == 0);
    s1 = lg_backend_due_add(b, t, 100, 0, 0);
    s2 = lg_backend_due_add(b, t, 40, 0, 0); /* same hint: the next free slot */
    LG_CHECK(s1 >= 0 && s2 >= 0 && s1 != s2);
    LG_CHECK(lg_backend_work_ahead_ms(b, t, &longest, NULL) == 140 && longest == 100);
    /* 60 ms later: 40 left of the first; the second is overdue and has a
     * quarter of its 60 ms age left (15), not -20 taken off the first */
    LG_CHECK(lg_backend_work_ahead_ms(b, t + 60 * LG_NS_PER_MS, NULL, NULL) == 40 + 15);
    /* the most overdue: the second, 20 ms past its 40; none overdue before */
    LG_CHECK(late_at(b, t + 60 * LG_NS_PER_MS) == 20);
    LG_CHECK(late_at(b, t + 30 * LG_NS_PER_MS) == 0);
    lg_backend_due_del(b, s1);
    LG_CHECK(lg_backend_work_ahead_ms(b, t, &longest, NULL) == 40 && longest == 40);
    lg_backend_due_del(b, s2);
    LG_CHECK(late_at(b, t + 60 * LG_NS_PER_MS) == 0); /* none pending */
    /* every slot taken: the next is not counted, and says so */
    for (int i = 0; i < LG_BACKEND_DUE_SLOTS; i++) {
        LG_CHECK(lg_backend_due_add(b, t, 1, 0, (uint32_t)i * 7) >= 0);
    }
    s3 = lg_backend_due_add(b, t, 1, 0, 3);
    LG_CHECK(s3 == -1);
    LG_CHECK(lg_backend_work_ahead_ms(b, t, NULL, NULL) == LG_BACKEND_DUE_SLOTS);
    for (int i = 0; i < LG_BACKEND_DUE_SLOTS; i++) {
        lg_backend_due_del(b, i);
    }
    LG_CHECK(lg_backend_work_ahead_ms(b, t, NULL, NULL) == 0);
    return 0;
}

/* The ends of our requests are kept for the scrapes: those since a time. */
static int
test_gone_since(void)
{
    struct lg_backend *b = fleet->backends[0];
    uint64_t t = lg_now_ns(), ms = LG_NS_PER_MS;
    uint32_t before = lg_backend_inflight(b);

    LG_CHECK(lg_backend_gone_since(b, t) == 0);
    LG_CHECK(lg_backend_gone_nth(b, 1) == 0 && lg_backend_ended(b) == 0);
    lg_backend_inflight_add(b, 3);
    lg_backend_inflight_end(b, t + 10 * ms);
    lg_backend_inflight_end(b, t + 20 * ms);
    lg_backend_inflight_end(b, t + 30 * ms);
    LG_CHECK(lg_backend_inflight(b) == before);
    LG_CHECK(lg_backend_gone_since(b, t) == 3);
    LG_CHECK(lg_backend_gone_since(b, t + 20 * ms) == 2);
    LG_CHECK(lg_backend_gone_since(b, t + 31 * ms) == 0);
    /* the k-th latest, and how many ended (the engine's finished count is set against it) */
    LG_CHECK(lg_backend_gone_nth(b, 1) == t + 30 * ms && lg_backend_gone_nth(b, 3) == t + 10 * ms);
    LG_CHECK(lg_backend_gone_nth(b, 4) == 0 && lg_backend_gone_nth(b, 0) == 0);
    LG_CHECK(lg_backend_ended(b) == 3);
    /* the ring keeps the latest LG_BACKEND_GONE_SLOTS */
    for (int i = 0; i < 2 * LG_BACKEND_GONE_SLOTS; i++) {
        lg_backend_inflight_add(b, 1);
        lg_backend_inflight_end(b, t + (uint64_t)(100 + i) * ms);
    }
    LG_CHECK(lg_backend_gone_since(b, t) == LG_BACKEND_GONE_SLOTS);
    LG_CHECK(lg_backend_gone_nth(b, LG_BACKEND_GONE_SLOTS)
             == t + (uint64_t)(100 + LG_BACKEND_GONE_SLOTS) * ms);
    LG_CHECK(lg_backend_gone_nth(b, LG_BACKEND_GONE_SLOTS + 1) == 0);
    LG_CHECK(lg_backend_ended(b) == 3 + 2 * LG_BACKEND_GONE_SLOTS);
    LG_CHECK(lg_backend_gone_since(b, t + (uint64_t)(100 + 2 * LG_BACKEND_GONE_SLOTS - 5) * ms)
             == 5);
    LG_CHECK(lg_backend_inflight(b) == before);
    return 0;
}

/* The k-th soonest predicted end is when the k-th request in line gets a slot. */
static int
test_slot_ends(void)
{
    struct lg_backend *b = fleet->backends[0];
    uint64_t t = lg_now_ns(), ms = LG_NS_PER_MS;
    int s[4];

    LG_CHECK(lg_backend_end_wait_ms(b, t, 1, 10) == -1); /* nothing known */
    s[0] = lg_backend_end_add(b, t + 300 * ms, 0, 0);
    s[1] = lg_backend_end_add(b, t + 100 * ms, 0, 0);
    s[2] = lg_backend_end_add(b, t + 200 * ms, 0, 0);
    s[3] = lg_backend_end_add(b, t - 50 * ms, 0, 0); /* overdue: about to end */
    for (int i = 0; i < 4; i++) {
        LG_CHECK(s[i] >= 0);
    }
    LG_CHECK(lg_backend_end_wait_ms(b, t, 1, 10) == 10); /* the overdue one, a gap away */
    LG_CHECK(fabs(lg_backend_end_wait_ms(b, t, 2, 10) - 100) <= 1);
    LG_CHECK(fabs(lg_backend_end_wait_ms(b, t, 3, 10) - 200) <= 1);
    LG_CHECK(fabs(lg_backend_end_wait_ms(b, t, 4, 10) - 300) <= 1);
    LG_CHECK(lg_backend_end_wait_ms(b, t, 5, 10) == -1); /* fewer ends than needed */
    LG_CHECK(lg_backend_end_wait_ms(b, t, 0, 10) == -1);
    lg_backend_end_del(b, s[1]);
    LG_CHECK(fabs(lg_backend_end_wait_ms(b, t, 2, 10) - 200) <= 1);
    lg_backend_end_move(b, s[2], t + 400 * ms); /* re-set at a first token: same slot */
    LG_CHECK(fabs(lg_backend_end_wait_ms(b, t, 2, 10) - 300) <= 1);
    LG_CHECK(fabs(lg_backend_end_wait_ms(b, t, 3, 10) - 400) <= 1);
    for (int i = 0; i < 4; i++) {
        lg_backend_end_del(b, s[i]);
    }
    LG_CHECK(lg_backend_end_wait_ms(b, t, 1, 10) == -1);
    return 0;
}

/*
 * By class (an engine that preempts for priority): a request of class c
 * counts ahead of it only ours of c and above, in flight, awaiting a first
 * token with their work, and their ends for the slot it waits for.
 */
static int
test_by_class(void)
{
    static const char two[] =
        "{\"listen\": \"127.0.0.1:8080\", \"backends\": "
        "[{\"name\": \"p\", \"url\": \"http://127.0.0.1:9002\", \"models\": [\"m\"], "
        "\"priority_field\": \"vllm\", \"engine_priority\": \"preempt\"}]}";
    struct lg_config *c2;
    struct lg_fleet *f2;
    struct lg_backend *b;
    struct lg_backend_by_class k;
    uint64_t t = lg_now_ns(), ms = LG_NS_PER_MS;
    int due[4], ends[4];

    LG_CHECK(lg_test_fleet_load(two, &c2, &f2) == 0);
    b = f2->backends[0];
    LG_CHECK(lg_backend_conf(b)->engine_priority == LG_ENGINE_PRIORITY_PREEMPT);
    /* two batch requests (long, 0.8 s awaiting their whole answer), one
     * default and one interactive, each awaiting its first token */
    for (int i = 0; i < 2; i++) {
        lg_backend_class_add(b, LG_CLASS_BATCH, 1);
        due[i] = lg_backend_due_add(b, t - 800 * ms, 100, LG_CLASS_BATCH, 0);
        ends[i] = lg_backend_end_add(b, t + (uint64_t)(100 + 100 * i) * ms, LG_CLASS_BATCH, 0);
    }
    lg_backend_class_add(b, LG_CLASS_DEFAULT, 1);
    due[2] = lg_backend_due_add(b, t, 80, LG_CLASS_DEFAULT, 0);
    ends[2] = lg_backend_end_add(b, t + 900 * ms, LG_CLASS_DEFAULT, 0);
    lg_backend_class_add(b, LG_CLASS_INTERACTIVE, 1);
    due[3] = lg_backend_due_add(b, t, 30, LG_CLASS_INTERACTIVE, 0);
    ends[3] = lg_backend_end_add(b, t + 600 * ms, LG_CLASS_INTERACTIVE, 0);
    for (int i = 0; i < 4; i++) {
        LG_CHECK(due[i] >= 0 && ends[i] >= 0);
    }
    /* batch counts everything: 2 x 800 / 4 overdue + 80 + 30 */
    lg_backend_class_read(b, t, LG_CLASS_BATCH, 0, 10, &k);
    LG_CHECK(k.inflight == 4 && k.pending == 4);
    LG_CHECK(k.work_ahead_ms == 200 + 200 + 80 + 30);
    LG_CHECK(fabs(k.pending_age_ms - 400) <= 1);
    LG_CHECK(k.work_ahead_ms == lg_backend_work_ahead_ms(b, t, NULL, NULL));
    /* yield_prefill's question: ours of a class above it awaiting a first
     * token (batch: the default and the interactive request; none above
     * interactive) */
    LG_CHECK(lg_backend_pending_above(b, LG_CLASS_BATCH) == 2);
    LG_CHECK(lg_backend_pending_above(b, LG_CLASS_DEFAULT) == 1);
    LG_CHECK(lg_backend_pending_above(b, LG_CLASS_INTERACTIVE) == 0);
    /* the lower classes' prefill left, the longest of those not past their
     * prediction: for interactive the default request's 80 ms (batch's are
     * overdue: done or stuck, no prefill of theirs is counted); for default,
     * none; for batch, no lower class */
    lg_backend_class_read(b, t, LG_CLASS_INTERACTIVE, 0, 10, &k);
    LG_CHECK(k.lower_prefill_ms == 80);
    lg_backend_class_read(b, t, LG_CLASS_DEFAULT, 0, 10, &k);
    LG_CHECK(k.lower_prefill_ms == 0);
    lg_backend_class_read(b, t, LG_CLASS_SYSTEM, 0, 10, &k);
    LG_CHECK(k.lower_prefill_ms == 80);
    /* interactive: only its own class (and system) */
    lg_backend_class_read(b, t, LG_CLASS_INTERACTIVE, 0, 10, &k);
    LG_CHECK(k.inflight == 1 && k.pending == 1 && k.work_ahead_ms == 30);
    LG_CHECK(k.slot_wait_ms == 0); /* no capacity known: no wait told */
    lg_backend_class_read(b, t, LG_CLASS_DEFAULT, 0, 10, &k);
    LG_CHECK(k.inflight == 2 && k.pending == 2 && k.work_ahead_ms == 110);
    lg_backend_class_read(b, t, LG_CLASS_SYSTEM, 0, 10, &k);
    LG_CHECK(k.inflight == 0 && k.pending == 0 && k.work_ahead_ms == 0);
    /* max_inflight there bounds a class and those above it; the lowest
     * class, every request (and elsewhere every class) */
    lg_backend_inflight_add(b, 4);
    LG_CHECK(lg_backend_inflight_from(b, LG_CLASS_INTERACTIVE) == 1);
    LG_CHECK(lg_backend_inflight_from(b, LG_CLASS_DEFAULT) == 2);
    LG_CHECK(lg_backend_inflight_from(b, LG_CLASS_BATCH) == 4);
    lg_backend_inflight_add(fleet->backends[0], 3);
    LG_CHECK(lg_backend_inflight_from(fleet->backends[0], LG_CLASS_INTERACTIVE) == 3);
    lg_backend_inflight_add(fleet->backends[0], -3);
    lg_backend_inflight_add(b, -4);
    /* two slots: the default request waits for the sooner end of the two of
     * its class and above (the interactive one, 600 ms), not for batch's
     * 100 ms (batch gives its slot up at once); with three slots it has one */
    lg_backend_class_read(b, t, LG_CLASS_DEFAULT, 2, 10, &k);
    LG_CHECK(fabs(k.slot_wait_ms - 600) <= 1);
    lg_backend_class_read(b, t, LG_CLASS_DEFAULT, 3, 10, &k);
    LG_CHECK(k.slot_wait_ms == 0);
    /* class-blind, the first end is batch's */
    LG_CHECK(fabs(lg_backend_end_wait_ms(b, t, 1, 10) - 100) <= 1);
    /* a moved end keeps its class */
    lg_backend_end_move(b, ends[3], t + 700 * ms);
    lg_backend_class_read(b, t, LG_CLASS_DEFAULT, 2, 10, &k);
    LG_CHECK(fabs(k.slot_wait_ms - 700) <= 1);
    for (int i = 0; i < 4; i++) {
        lg_backend_due_del(b, due[i]);
        lg_backend_end_del(b, ends[i]);
    }
    lg_backend_class_add(b, LG_CLASS_BATCH, -2);
    lg_backend_class_add(b, LG_CLASS_DEFAULT, -1);
    lg_backend_class_add(b, LG_CLASS_INTERACTIVE, -1);
    LG_CHECK(lg_backend_pending_above(b, LG_CLASS_BATCH) == 0);
    lg_backend_class_read(b, t, LG_CLASS_BATCH, 0, 10, &k);
    LG_CHECK(k.inflight == 0 && k.pending == 0 && k.work_ahead_ms == 0);
    return lg_test_fleet_free(c2, f2);
}

/*
 * prompts_per_step's question: ours of a class and below sent since the
 * engine's step in progress began (the last token a stream got there), still
 * awaiting a first token; nothing known without a token in the last second.
 */
static int
test_sent_this_step(void)
{
    static const char one[] =
        "{\"listen\": \"127.0.0.1:8080\", \"backends\": "
        "[{\"name\": \"p\", \"url\": \"http://127.0.0.1:9003\", \"models\": [\"m\"], "
        "\"priority_field\": \"vllm\", \"engine_priority\": \"preempt\"}]}";
    struct lg_config *c1;
    struct lg_fleet *f1;
    struct lg_backend *b;
    uint64_t t = lg_now_ns(), ms = LG_NS_PER_MS;
    int seq, due[4];

    LG_CHECK(lg_test_fleet_load(one, &c1, &f1) == 0);
    b = f1->backends[0];
    /* no stream has had a token there: the step is not known */
    due[0] = lg_backend_due_add(b, t - 5 * ms, 40, LG_CLASS_BATCH, 0);
    LG_CHECK(lg_backend_sent_this_step(b, t, LG_CLASS_BATCH) == 0);
    /* a stream's token 20 ms ago began the step in progress: the batch
     * request sent 5 ms ago is for the next step, one sent before is not */
    seq = lg_backend_seq_add(b, t - 200 * ms, 400, 16, 0);
    LG_CHECK(seq >= 0);
    lg_backend_seq_left(b, seq, 10, t - 20 * ms);
    due[1] = lg_backend_due_add(b, t - 30 * ms, 40, LG_CLASS_BATCH, 1);
    LG_CHECK(lg_backend_sent_this_step(b, t, LG_CLASS_BATCH) == 1);
    /* a default one sent 2 ms ago counts for default and above, not batch;
     * an interactive one for interactive only */
    due[2] = lg_backend_due_add(b, t - 2 * ms, 40, LG_CLASS_DEFAULT, 2);
    due[3] = lg_backend_due_add(b, t - 1 * ms, 30, LG_CLASS_INTERACTIVE, 3);
    LG_CHECK(lg_backend_sent_this_step(b, t, LG_CLASS_BATCH) == 1);
    LG_CHECK(lg_backend_sent_this_step(b, t, LG_CLASS_DEFAULT) == 2);
    LG_CHECK(lg_backend_sent_this_step(b, t, LG_CLASS_INTERACTIVE) == 3);
    /* its first token came: it is no new prompt any more */
    lg_backend_due_del(b, due[2]);
    LG_CHECK(lg_backend_sent_this_step(b, t, LG_CLASS_DEFAULT) == 1);
    /* the next step began: nothing sent since */
    lg_backend_seq_left(b, seq, 9, t);
    LG_CHECK(lg_backend_sent_this_step(b, t + 1 * ms, LG_CLASS_INTERACTIVE) == 0);
    /* no token for a second: the step is not known */
    LG_CHECK(lg_backend_sent_this_step(b, t + LG_NS_PER_S, LG_CLASS_INTERACTIVE) == 0);
    lg_backend_due_del(b, due[0]);
    lg_backend_due_del(b, due[1]);
    lg_backend_due_del(b, due[3]);
    lg_backend_seq_del(b, seq);
    return lg_test_fleet_free(c1, f1);
}

/*
 * A whole (not streamed) answer's time teaches the TTFT fit only where no
 * stream was timed there lately: a first token and every token after it
 * would read as a replica many times slower than it is.
 */
static int
test_whole_answer_teaches_only_without_streams(void)
{
    static const char one[] =
        "{\"listen\": \"127.0.0.1:8080\", \"backends\": "
        "[{\"name\": \"w\", \"url\": \"http://127.0.0.1:9003\", \"models\": [\"m\"]}]}";
    struct lg_est_prior prior = { .fixed_ms = 30, .ms_per_kib = 10, .itl_ms = 15, .hold_ms = 500 };
    struct lg_config *c2;
    struct lg_fleet *f2;
    struct lg_backend *b;
    struct lg_backend_est e0, e1;

    LG_CHECK(lg_test_fleet_load(one, &c2, &f2) == 0);
    b = f2->backends[0];
    /* no stream there: a whole answer is all it has to go by */
    lg_backend_read_est(b, &e0);
    lg_backend_note_done(b, &prior, 1024, 2000, 0, -1, 2000);
    lg_backend_read_est(b, &e1);
    LG_CHECK(e1.ttft.w > e0.ttft.w && e1.ttft.sy > e0.ttft.sy);
    /* streams end there (their gaps between tokens timed, their first
     * tokens taught the fit): whole answers teach it no more */
    for (int i = 0; i < 3; i++) {
        lg_backend_note_done(b, NULL, 1024, 0, 0, 15, 1000);
    }
    lg_backend_read_est(b, &e0);
    lg_backend_note_done(b, &prior, 1024, 2000, 0, -1, 2000);
    lg_backend_read_est(b, &e1);
    LG_CHECK(e1.ttft.w == e0.ttft.w && e1.ttft.sy == e0.ttft.sy);
    /* what whole answers measure honestly still counts: the slot's hold */
    LG_CHECK(e1.hold.w > e0.hold.w);
    return lg_test_fleet_free(c2, f2);
}

static double
fixed_at(struct lg_backend *b, uint64_t now)
{
    struct lg_est_prior prior = { .fixed_ms = 30, .ms_per_kib = 10, .itl_ms = 15, .hold_ms = 500 };
    struct lg_backend_view v;
    struct lg_engine_model_view m;

    lg_backend_view_fill(b, now, &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    return v.ttft_fixed_ms;
}

/* The calibration the picks applied to the engine model's predictions in
 * note_first() (the view's scale then). */
static double note_scale = 1;

/* A first token with no measured terms and no load known. */
static void
note_first(struct lg_backend *b, const struct lg_est_prior *prior, uint64_t prompt_bytes,
           double ttft_ms, double wait_ms, double model_ms, double pred_ms)
{
    struct lg_backend_first f = { .prompt_bytes = prompt_bytes,
                                  .ttft_ms = ttft_ms,
                                  .wait_ms = wait_ms,
                                  .model_ms = model_ms,
                                  .pred_ms = pred_ms,
                                  .model_scale = note_scale,
                                  .meas_pred_ms = -1,
                                  .load = -1 };

    lg_backend_note_first_token(b, prior, &f);
}

static int
test_idle_slow_replica_fades_faster(void)
{
    struct lg_est_prior prior = { .fixed_ms = 30, .ms_per_kib = 10, .itl_ms = 15, .hold_ms = 500 };
    struct lg_backend *b = fleet->backends[0];
    uint64_t t0, s = LG_NS_PER_S;
    double at2, at6, at10, busy6, busy10;

    for (int i = 0; i < 40; i++) {
        note_first(b, &prior, 512, 160, 0, -1, -1); /* five times the prior */
    }
    t0 = lg_now_ns();
    at2 = fixed_at(b, t0 + 2 * s);
    at6 = fixed_at(b, t0 + 6 * s);
    at10 = fixed_at(b, t0 + 10 * s);
    /* with a request of ours in flight there, it reads as before */
    __atomic_fetch_add(&b->inflight, 1, __ATOMIC_RELAXED);
    busy6 = fixed_at(b, t0 + 6 * s);
    busy10 = fixed_at(b, t0 + 10 * s);
    __atomic_fetch_sub(&b->inflight, 1, __ATOMIC_RELAXED);
    LG_CHECK(at2 > 130 && busy6 > 130 && busy10 > 130);
    {
        /* before its own prefills are seen, the engine model's prefill
         * slope is its TTFT fit's: five times slow, not the fleet's 10 */
        struct lg_backend_view v;
        struct lg_engine_model_view m;

        lg_backend_view_fill(b, t0 + 2 * s, &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
        LG_CHECK(m.prefill_ms_per_kib > 3 * prior.ms_per_kib);
        LG_CHECK(m.prefill_ms_per_kib <= v.ttft_ms_per_kib + 1e-9); /* its peak left out */
    }
    /* idle past LG_EST_IDLE_S: each second counts as five */
    LG_CHECK(at6 < busy6 - 10);
    LG_CHECK(at10 < 0.6 * busy10);
    return 0;
}

/*
 * A replica whose capacity is only guessed (never seen with a queue; the
 * most it ran is all the policy ever sent it) is not "queued": its TTFT
 * is learnt, and no queueing is taken off the sample.
 */
static int
test_guessed_capacity_is_not_queued(void)
{
    struct lg_backend *b = fleet->backends[0];
    struct lg_backend_engine eng = { .waiting = 0,
                                     .running = 1,
                                     .kv_usage = 0.1,
                                     .t_ns = lg_now_ns(),
                                     .capacity = 1,
                                     .run_max = 1,
                                     .run_max_t_ns = lg_now_ns() };
    struct lg_route_req req = {
        .model = "m", .path = "/v1/chat/completions", .stream = true, .prompt_bytes = 1024
    };
    struct lg_route_result out = { 0 };
    const struct lg_model_route *route = lg_fleet_find_model(fleet, "m");

    lg_backend_publish_engine(b, &eng);
    __atomic_fetch_add(&b->inflight, 3, __ATOMIC_RELAXED);
    LG_CHECK(route != NULL);
    LG_CHECK(lg_router_pick(fleet->router, route, &req, 0, &out) == LG_OK);
    LG_CHECK(out.backend == b && !out.queued && out.wait_ms == 0);
    /* the same load with that capacity confirmed by a queue: queued */
    eng.capacity_confirmed = 1;
    eng.confirmed_t_ns = lg_now_ns();
    lg_backend_publish_engine(b, &eng);
    LG_CHECK(lg_router_pick(fleet->router, route, &req, 0, &out) == LG_OK);
    LG_CHECK(out.backend == b && out.queued);
    lg_route_result_clear(&out);
    __atomic_fetch_sub(&b->inflight, 3, __ATOMIC_RELAXED);
    return 0;
}

/*
 * A reload that keeps a backend (same name and URL): the next fleet reuses
 * it, and once that fleet goes in force (lg_fleet_adopt) the backend serves
 * with every setting of the new file, its live state carried over; the
 * fleet it came from meanwhile keeps the old settings in force. Settings
 * unchanged install nothing; a TLS change makes a new backend.
 */
static int
test_kept_backend_takes_new_settings(void)
{
    static const char next_text[] =
        "{\"listen\": \"127.0.0.1:8080\", \"backends\": "
        "[{\"name\": \"r1\", \"url\": \"http://127.0.0.1:9001\", \"models\": [\"m\", \"m2\"],"
        "  \"weight\": 7, \"max_inflight\": 3, \"metrics_path\": \"/stats\", "
        "  \"api_key\": \"k\"}]}";
    struct lg_config *c0, *c1;
    struct lg_fleet *f0, *f1;
    struct lg_config_errors errs;
    struct lg_backend *b;
    const struct lg_backend_conf *before;
    struct lg_backend_view v;
    struct lg_engine_model_view m;
    struct lg_est_prior prior = { .fixed_ms = 40, .ms_per_kib = 10, .itl_ms = 20, .hold_ms = 2000 };

    LG_CHECK(lg_test_fleet_load(text, &c0, &f0) == 0);
    b = f0->backends[0];
    __atomic_store_n(&b->inflight, 2, __ATOMIC_RELAXED);
    lg_backend_note_done(b, &prior, 1024, 80, 0, 20, 900);
    before = lg_backend_conf(b);
    memset(&errs, 0, sizeof(errs));
    LG_CHECK(lg_config_load_buffer(next_text, sizeof(next_text) - 1, "t.json", &c1, &errs) == LG_OK);
    lg_config_errors_free(&errs);
    LG_CHECK(lg_router_fleet_new(c1, 1, f0, &f1) == LG_OK);
    LG_CHECK(f1->backends[0] == b); /* kept */
    /* built, not yet in force: the old settings serve; the new fleet's
     * model index already has its models */
    LG_CHECK(lg_backend_conf(b) == before && lg_backend_conf(b)->weight == 1);
    LG_CHECK(lg_fleet_find_model(f1, "m2") != NULL && lg_fleet_find_model(f0, "m2") == NULL);
    lg_fleet_adopt(f1);
    LG_CHECK(lg_backend_conf(b)->weight == 7 && lg_backend_conf(b)->max_inflight == 3);
    LG_CHECK(strcmp(lg_backend_conf(b)->metrics_path, "/stats") == 0);
    LG_CHECK(strcmp(lg_backend_conf(b)->api_key, "k") == 0 && lg_backend_conf(b)->nmodels == 2);
    LG_CHECK(strcmp(b->name, "r1") == 0);
    /* the old settings stay readable for whoever still holds them */
    LG_CHECK(before->weight == 1 && strcmp(before->models[0], "m") == 0);
    /* the live state carried over, and the view reads the new settings */
    LG_CHECK(lg_backend_inflight(b) == 2 && b->est.itl.w > 0);
    lg_backend_view_get(b, lg_now_ns(), &prior, 0, 0, &v, &m);
    LG_CHECK(v.weight == 7 && v.max_inflight == 3 && v.inflight == 2);
    /* the same settings again: nothing new installed */
    before = lg_backend_conf(b);
    lg_fleet_adopt(f1);
    LG_CHECK(lg_backend_conf(b) == before);
    /* the class to the engine, and what it does with it: new settings too */
    {
        static const char prio_text[] =
            "{\"listen\": \"127.0.0.1:8080\", \"backends\": "
            "[{\"name\": \"r1\", \"url\": \"http://127.0.0.1:9001\", \"models\": [\"m\", \"m2\"],"
            "  \"weight\": 7, \"max_inflight\": 3, \"metrics_path\": \"/stats\", "
            "  \"api_key\": \"k\", \"priority_field\": \"vllm\", \"engine_priority\": \"preempt\"}]}";
        struct lg_config *c2;
        struct lg_fleet *f2;

        memset(&errs, 0, sizeof(errs));
        LG_CHECK(lg_config_load_buffer(prio_text, sizeof(prio_text) - 1, "t.json", &c2, &errs)
                 == LG_OK);
        lg_config_errors_free(&errs);
        LG_CHECK(lg_router_fleet_new(c2, 1, f1, &f2) == LG_OK);
        LG_CHECK(f2->backends[0] == b);
        lg_fleet_adopt(f2);
        LG_CHECK(lg_backend_conf(b) != before);
        LG_CHECK(lg_backend_conf(b)->priority_field == LG_PRIORITY_FIELD_VLLM
                 && lg_backend_conf(b)->engine_priority == LG_ENGINE_PRIORITY_PREEMPT);
        lg_fleet_unref(f2);
        lg_config_unref(c2);
    }
    lg_fleet_unref(f0);
    lg_config_unref(c0);
    /* https verified otherwise: another backend (its client context is made once) */
    {
        static const char tls_a[] =
            "{\"listen\": \"127.0.0.1:8080\", \"backends\": "
            "[{\"name\": \"s\", \"url\": \"https://127.0.0.1:9443\", \"models\": [\"m\"]}]}";
        static const char tls_b[] =
            "{\"listen\": \"127.0.0.1:8080\", \"backends\": "
            "[{\"name\": \"s\", \"url\": \"https://127.0.0.1:9443\", \"models\": [\"m\"],"
            "  \"tls\": {\"insecure_skip_verify\": true}}]}";
        struct lg_config *ca, *cb;
        struct lg_fleet *fa, *fb;

        LG_CHECK(lg_test_fleet_load(tls_a, &ca, &fa) == 0);
        memset(&errs, 0, sizeof(errs));
        LG_CHECK(lg_config_load_buffer(tls_b, sizeof(tls_b) - 1, "t.json", &cb, &errs) == LG_OK);
        lg_config_errors_free(&errs);
        LG_CHECK(lg_router_fleet_new(cb, 1, fa, &fb) == LG_OK);
        LG_CHECK(fb->backends[0] != fa->backends[0] && lg_backend_conf(fb->backends[0])->tls_insecure);
        lg_fleet_unref(fb);
        lg_config_unref(cb);
        LG_CHECK(lg_router_fleet_new(ca, 1, fa, &fb) == LG_OK);
        LG_CHECK(fb->backends[0] == fa->backends[0]); /* the same: kept */
        lg_fleet_unref(fb);
        lg_test_fleet_free(ca, fa);
    }
    __atomic_store_n(&b->inflight, 0, __ATOMIC_RELAXED);
    lg_fleet_unref(f1);
    lg_config_unref(c1);
    return 0;
}

static int
teardown(void)
{
    return lg_test_fleet_free(conf, fleet);
}

/* The engine model follows our requests there: it sees all of them or declines. */
static int
test_engine_model(void)
{
    struct lg_backend *b = fleet->backends[0];
    uint64_t t = lg_now_ns(), ms = LG_NS_PER_MS;
    unsigned joined = 99;
    int s[3];

    LG_CHECK(engine_model_ms(b, t, 2, 10, 0, 0.05, 0, &joined)
             == 10); /* idle: one step */
    LG_CHECK(joined == 0);
    s[0] = lg_backend_seq_add(b, t, 4000, 20, 0); /* 1000 tokens to prefill, 20 to come */
    s[1] = lg_backend_seq_add(b, t + 5 * ms, 400, 3, 0);
    LG_CHECK(s[0] >= 0 && s[1] >= 0 && s[0] != s[1]);
    __atomic_store_n(&b->inflight, 3, __ATOMIC_RELAXED);
    /* a third request in flight it has no word for: it cannot tell */
    LG_CHECK(engine_model_ms(b, t + 10 * ms, 2, 10, 0, 0.05, 0, NULL) == -1);
    s[2] = lg_backend_seq_add(b, t + 8 * ms, 40, 5, 0);
    LG_CHECK(s[2] >= 0);
    /*
     * two slots, three in line (oldest first): the first two came half a
     * step or more ago with slots free, so the step in progress is theirs
     * (the first's 50 ms of prefill: its token in 5 + 10 + 50 - 10 = 55
     * ms); the second (3 tokens) leaves two steps after it, letting the
     * third in (10 tokens: 0.5 ms), which leaves after 5 more: the new one
     * starts then.
     */
    LG_CHECK(fabs(engine_model_ms(b, t + 10 * ms, 2, 10, 0, 0.05, 0, NULL)
                  - (55 + 2 * 10 + 10.5 + 4 * 10 + 10))
             < 1e-6);
    /* the first two have their first tokens, 2 and 1 to come, 3 ms ago
     * (so the step in progress began then, before the third was sent: 7 ms
     * left of it, and the third is not in it): the second
     * leaves with it, the third takes its slot, the first leaves after
     * that step and the new one follows */
    lg_backend_seq_left(b, s[0], 2, t + 7 * ms);
    lg_backend_seq_left(b, s[1], 1, t + 7 * ms);
    LG_CHECK(fabs(engine_model_ms(b, t + 10 * ms, 2, 10, 0, 0.05, 0, &joined)
                  - (7 + 10.5 + 10))
             < 1e-6);
    LG_CHECK(joined == 0); /* the third went in a step before */
    /* three slots: the third is admitted with the new one (so the new
     * one's prefill holds up its first token) */
    LG_CHECK(
        fabs(engine_model_ms(b, t + 10 * ms, 3, 10, 0, 0.05, 0, &joined) - (7 + 10.5))
        < 1e-6);
    LG_CHECK(joined == 1);
    /* no token for longer than a plain step: where the step stands is unknown
     * (half of it left, on average) */
    LG_CHECK(fabs(engine_model_ms(b, t + 30 * ms, 2, 10, 0, 0.05, 0, &joined)
                  - (5 + 10.5 + 10))
             < 1e-6);
    /* a token that came a moment later than the caller's clock: a step just
     * began, and the third, sent before it, is in it (10.5 ms with its
     * prefill); the new one follows */
    lg_backend_seq_left(b, s[1], 1, t + 12 * ms);
    LG_CHECK(
        fabs(engine_model_ms(b, t + 11 * ms, 3, 10, 0, 0.05, 0, &joined) - (10.5 + 10))
        < 1e-6);
    LG_CHECK(joined == 0);
    for (int i = 0; i < 3; i++) {
        lg_backend_seq_del(b, s[i]);
    }
    __atomic_store_n(&b->inflight, 0, __ATOMIC_RELAXED);
    LG_CHECK(engine_model_ms(b, t, 2, 10, 0, 0.05, 0, NULL) == 10);
    LG_CHECK(engine_model_ms(b, t, 2, 0, 0, 0.05, 0, NULL) == -1); /* no step known */
    return 0;
}

/* Before its own prefills are seen, a replica's prefill is the fleet's
 * prefill per ms of decode step times its own step; its own samples then
 * take over. */
static int
test_prefill_prior_scales_with_step(void)
{
    struct lg_backend *b = fleet->backends[0];
    struct lg_est_prior prior = {
        .fixed_ms = 40, .ms_per_kib = 10, .itl_ms = 20, .hold_ms = 2000, .prefill_per_step = 1.0
    };
    struct lg_backend_view v;
    struct lg_engine_model_view m;
    uint64_t t = lg_now_ns() + 3 * LG_NS_PER_S; /* past the pace the tests before left */

    lg_backend_note_pace(b, t, 48, lg_backend_started(b, t)); /* four times a 12 ms fleet */
    lg_backend_view_fill(b, t, &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(m.step_ms == 48 && fabs(m.prefill_ms_per_kib - 48) < 1e-9);
    prior.prefill_per_step = 0; /* no replica has prefilled enough: the TTFT fit's slope */
    lg_backend_view_fill(b, t, &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(fabs(m.prefill_ms_per_kib - 48) > 1
             && m.prefill_ms_per_kib <= v.ttft_ms_per_kib + 1e-9);
    prior.prefill_per_step = 1.0;
    for (int i = 0; i < 40; i++) {
        /* 2 KiB prefilled in 40 ms beyond the model's 10 ms wait: 20 ms per KiB */
        note_first(b, &prior, 2048, 50, 0, 10, -1);
    }
    lg_backend_view_fill(b, lg_now_ns(), &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(m.prefill_ms_per_kib > 19.5 && m.prefill_ms_per_kib < 22);
    return 0;
}

/* The engine model's bias there, from its first tokens against what it
 * predicted; a step timed by a stream only while one moves. */
static int
test_engine_model_scale(void)
{
    struct lg_backend *b = fleet->backends[0];
    struct lg_est_prior prior = { .fixed_ms = 40, .ms_per_kib = 10, .itl_ms = 20, .hold_ms = 2000 };
    struct lg_backend_view v;
    struct lg_engine_model_view m;
    uint64_t t;

    t = lg_now_ns();
    lg_backend_view_fill(b, t, &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(m.scale == 1); /* nothing seen: unbiased */
    LG_CHECK(m.flags & LG_MODEL_F_STEP_GUESS);
    LG_CHECK(m.step_ms == v.itl_ms);
    /* twice what it predicted, as the picks used it calibrated (no later
     * than used: no lateness) */
    note_scale = 2;
    for (int i = 0; i < 30; i++) {
        note_first(b, NULL, 0, 100, -1, -1, 50);
    }
    note_first(b, NULL, 0, -1, -1, -1, 50); /* no first token: not a sample */
    note_first(b, NULL, 0, 100, -1, -1, 0);
    t = lg_now_ns();
    lg_backend_view_fill(b, t, &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(m.scale > 1.8 && m.scale <= 2.0 + 1e-9); /* 4 prior pseudo-samples at 1 */
    /* a first token 100x late is a stall: the calibration counts it as 8x,
     * no more; used at 8x it still came 12.5x later: lateness, at most 4x */
    note_scale = 8;
    for (int i = 0; i < 200; i++) {
        note_first(b, NULL, 0, 1000, -1, -1, 10);
    }
    note_scale = 1;
    lg_backend_view_fill(b, lg_now_ns(), &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(m.scale > 6.0 * LG_EST_LATE_MAX && m.scale <= 8.0 * LG_EST_LATE_MAX + 1e-9);
    /* lateness fades within seconds (LG_EST_LATE_HALF_LIFE_S), the calibration in tens */
    lg_backend_view_fill(b, lg_now_ns() + 30 * LG_NS_PER_S, &prior, 250 * LG_NS_PER_MS, 0, &v,
                         &m);
    LG_CHECK(m.scale > 1.5 && m.scale < 8.0 * 1.1);
    /* it fades back to 1 */
    lg_backend_view_fill(b, lg_now_ns() + 300 * LG_NS_PER_S, &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(fabs(m.scale - 1) < 0.01);
    /* a stream's gaps time the step while they come */
    t = lg_now_ns();
    lg_backend_note_pace(b, t, 33, lg_backend_started(b, t));
    lg_backend_view_fill(b, t + LG_NS_PER_S, &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(!(m.flags & LG_MODEL_F_STEP_GUESS) && m.step_ms == 33);
    lg_backend_view_fill(b, t + 3 * LG_NS_PER_S, &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK((m.flags & LG_MODEL_F_STEP_GUESS) && m.step_ms == v.itl_ms);
    return 0;
}

/*
 * Estimates that know when they are wrong: on a replica where the engine
 * model's predictions scatter (it assumes 16 slots, the engine has 4: right
 * at a low load, far too soon at a high one) while the replica's own first
 * tokens by load predict them, the model is judged off there and the view
 * says so; once the model predicts well again, it is trusted again.
 */
static int
test_model_misses(void)
{
    struct lg_backend *b = lg_backend_new(lg_backend_conf(fleet->backends[0]), 1);
    struct lg_est_prior prior = { .fixed_ms = 40, .ms_per_kib = 10, .itl_ms = 20, .hold_ms = 2000 };
    struct lg_backend_view v;
    struct lg_engine_model_view m;
    struct lg_backend_first f = {
        .prompt_bytes = 1024, .wait_ms = -1, .model_ms = -1, .prefill_ms = 10
    };

    lg_backend_view_fill(b, lg_now_ns(), &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(m.measured_ms == -1 && m.err == 0 && m.measured_err == 0);
    LG_CHECK(!(m.flags & LG_MODEL_F_MISSES));
    /* the first tokens build the curve: 50 ms into up to 3 requests there,
     * 600 ms into 4 or more (a queue for a slot) */
    for (int i = 0; i < 40; i++) {
        double load = i % 8;

        f.load = load;
        f.ttft_ms = load < 4 ? 50 : 600;
        f.pred_ms = 50; /* the model: a slot free at every load */
        f.meas_pred_ms = -1;
        lg_backend_note_first_token(b, &prior, &f);
    }
    /* the measured terms there now: 40 ms (less the 10 ms prefill) at a
     * load of 2, 590 at 5 */
    __atomic_store_n(&b->inflight, 5, __ATOMIC_RELAXED);
    lg_backend_view_fill(b, lg_now_ns(), &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(fabs(m.measured_ms - 590) < 1e-6);
    /* the model's errors spread (12x late half the time, counted as 8x:
     * log 8 / 2 about their mean), the measured terms' not yet seen: no
     * judgement without both */
    LG_CHECK(m.err > 1.0 && m.measured_err == 0);
    LG_CHECK(!(m.flags & LG_MODEL_F_MISSES));
    for (int i = 0; i < 10; i++) {
        double load = i % 8;

        f.load = load;
        f.ttft_ms = load < 4 ? 50 : 600;
        f.pred_ms = 50;
        f.meas_pred_ms = load < 4 ? 52 : 580;
        lg_backend_note_first_token(b, &prior, &f);
    }
    lg_backend_view_fill(b, lg_now_ns(), &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(m.measured_err < 0.1 && m.err > 1.0);
    LG_CHECK(m.flags & LG_MODEL_F_MISSES);
    /* the engine changes back (or the model learns): its predictions hit,
     * the measured terms' scatter; the model decides again */
    for (int i = 0; i < 200; i++) {
        f.load = i % 8;
        f.ttft_ms = 60;
        f.pred_ms = 60;
        f.meas_pred_ms = (i & 1) ? 30 : 120;
        lg_backend_note_first_token(b, &prior, &f);
    }
    lg_backend_view_fill(b, lg_now_ns(), &prior, 250 * LG_NS_PER_MS, 0, &v, &m);
    LG_CHECK(m.err < m.measured_err);
    LG_CHECK(!(m.flags & LG_MODEL_F_MISSES));
    __atomic_store_n(&b->inflight, 0, __ATOMIC_RELAXED);
    lg_backend_unref(b);
    return 0;
}

/* The step's growth with the batch, from the streams' pace at each batch
 * size (our started streams there): 5 ms alone, 6.5 ms more a sequence, as
 * llama.cpp on a CPU. */
static int
test_step_per_seq(void)
{
    struct lg_backend *b = lg_backend_new(lg_backend_conf(fleet->backends[0]), 1);
    uint64_t t = lg_now_ns();

    LG_CHECK(lg_backend_step_per_seq(b, t) == 0);
    __atomic_store_n(&b->inflight, 1, __ATOMIC_RELAXED);
    lg_backend_note_pace(b, t, 5, lg_backend_started(b, t));
    __atomic_store_n(&b->inflight, 2, __ATOMIC_RELAXED);
    lg_backend_note_pace(b, t, 11.5, lg_backend_started(b, t));
    LG_CHECK(lg_backend_step_per_seq(b, t) == 0); /* sizes one apart: not yet */
    __atomic_store_n(&b->inflight, 4, __ATOMIC_RELAXED);
    lg_backend_note_pace(b, t, 24.5, lg_backend_started(b, t));
    LG_CHECK(fabs(lg_backend_step_per_seq(b, t) - 6.5) < 1e-9);
    /* one of the four still awaits its first token: a batch of three */
    LG_CHECK(lg_backend_ages_add(b, LG_BACKEND_AGES_PENDING, t));
    LG_CHECK(lg_backend_started(b, t) == 3);
    lg_backend_note_pace(b, t, 18, lg_backend_started(b, t));
    LG_CHECK(fabs(lg_backend_step_per_seq(b, t) - 6.5) < 1e-9);
    lg_backend_ages_del(b, LG_BACKEND_AGES_PENDING, t);
    /* the sizes timed long ago are forgotten */
    LG_CHECK(lg_backend_step_per_seq(b, t + (LG_BACKEND_PACE_FRESH_S + 1) * LG_NS_PER_S) == 0);
    __atomic_store_n(&b->inflight, 0, __ATOMIC_RELAXED);
    lg_backend_unref(b);
    return 0;
}

/* What lg_backend_view_get() reuses: the view this thread filled, while
 * nothing it reads changed and less than LG_VIEW_REUSE_NS passed; any change
 * of the backend's state, the prior or the time past that is seen at once. */
static bool
same_view(const struct lg_backend_view *a, const struct lg_engine_model_view *am,
          const struct lg_backend_view *b, const struct lg_engine_model_view *bm)
{
    return a->inflight == b->inflight && a->pending == b->pending
           && a->engine_waiting == b->engine_waiting && a->ttft_fixed_ms == b->ttft_fixed_ms
           && a->itl_ms == b->itl_ms && a->load == b->load && a->ramp == b->ramp
           && a->pending_age_ms == b->pending_age_ms && a->flags == b->flags
           && am->step_ms == bm->step_ms && am->wait_ms == bm->wait_ms
           && am->prefill_ms_per_kib == bm->prefill_ms_per_kib;
}

static int
test_view_reuse(void)
{
    struct lg_backend *b = lg_backend_new(lg_backend_conf(fleet->backends[0]), 1);
    struct lg_est_prior prior = { .fixed_ms = 30, .ms_per_kib = 10, .itl_ms = 15, .hold_ms = 500 };
    struct lg_backend_engine eng = { .waiting = 0, .running = 0, .kv_usage = 0.1 };
    struct lg_backend_view v, w;
    struct lg_engine_model_view m, n;
    uint64_t t = lg_now_ns(), half = LG_VIEW_REUSE_NS / 2, slow = 10 * LG_NS_PER_S;

#define GET(at) lg_backend_view_get(b, (at), &prior, 250 * LG_NS_PER_MS, slow, &v, &m)
#define FILL(at) lg_backend_view_fill(b, (at), &prior, 250 * LG_NS_PER_MS, slow, &w, &n)
    eng.t_ns = t;
    lg_backend_publish_engine(b, &eng);
    GET(t);
    FILL(t);
    LG_CHECK(same_view(&v, &m, &w, &n) && v.inflight == 0 && v.engine_waiting == 0);
    /* an idle backend's view, read again within the reuse: the same */
    GET(t + half);
    LG_CHECK(same_view(&v, &m, &w, &n));
    /* each change is seen at once, within the reuse */
    lg_backend_inflight_add(b, 1);
    GET(t + half);
    LG_CHECK(v.inflight == 1);
    LG_CHECK(lg_backend_ages_add(b, LG_BACKEND_AGES_PENDING, t));
    GET(t + half);
    LG_CHECK(v.pending == 1);
    eng.waiting = 3;
    lg_backend_publish_engine(b, &eng);
    GET(t + half);
    LG_CHECK(v.engine_waiting == 3);
    note_first(b, &prior, 1024, 400, 0, -1, -1); /* the estimates: 400 ms first tokens */
    GET(t + half);
    FILL(t + half);
    LG_CHECK(same_view(&v, &m, &w, &n) && v.ttft_fixed_ms > 30);
    __atomic_store_n(&b->up_since_ns, t, __ATOMIC_RELAXED); /* slow start from t */
    GET(t + half);
    LG_CHECK(v.ramp < 1.0 && (v.flags & LG_VIEW_F_RAMPING));
    prior.itl_ms = 25;
    GET(t + half);
    FILL(t + half);
    LG_CHECK(same_view(&v, &m, &w, &n));
    /* past the reuse, the view of that time */
    GET(t + 3 * LG_VIEW_REUSE_NS);
    FILL(t + 3 * LG_VIEW_REUSE_NS);
    LG_CHECK(same_view(&v, &m, &w, &n) && v.pending_age_ms >= 2);
    /* an earlier time than the one filled is never served from it */
    GET(t);
    FILL(t);
    LG_CHECK(same_view(&v, &m, &w, &n));
#undef GET
#undef FILL
    lg_backend_ages_del(b, LG_BACKEND_AGES_PENDING, t);
    lg_backend_inflight_add(b, -1);
    lg_backend_unref(b);
    return 0;
}

/*
 * An ejection that began with a refused connection ends its back-off as
 * soon as something answers HTTP there again (a scrape, a check): the
 * backend is half-open, and the probe's success closes it; one for failing
 * answers keeps its back-off (such an engine answers its metrics all along).
 * Last: it leaves the backend ejected.
 */
static int
test_listening_ends_refused_ejection(void)
{
    struct lg_backend *b = fleet->backends[0];
    const struct lg_health_conf *hc = &conf->health;

    lg_backend_note_result(b, hc, 0, 0, LG_BACKEND_R_REFUSED);
    LG_CHECK(__atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED) > lg_now_ns());
    LG_CHECK(!lg_backend_is_half_open(b, lg_now_ns()));
    lg_backend_note_listening(b, lg_now_ns());
    LG_CHECK(lg_backend_is_half_open(b, lg_now_ns()));
    /* the probe answers: closed, slow start begins */
    lg_backend_note_result(b, hc, 200, 0, 0);
    LG_CHECK(__atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED) == 0);
    LG_CHECK(__atomic_load_n(&b->up_since_ns, __ATOMIC_RELAXED) != 0);
    /* failing answers in a row: ejected, and answering says nothing new */
    for (uint32_t i = 0; i < hc->eject_consecutive; i++) {
        lg_backend_note_result(b, hc, 503, 0, 0);
    }
    LG_CHECK(__atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED) > lg_now_ns());
    lg_backend_note_listening(b, lg_now_ns());
    LG_CHECK(!lg_backend_is_half_open(b, lg_now_ns()));
    LG_CHECK(__atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED) > lg_now_ns());
    return 0;
}

LG_TEST_MAIN(setup, test_model_misses, test_step_per_seq, test_gone_since, test_slot_ends,
             test_by_class, test_sent_this_step, test_whole_answer_teaches_only_without_streams,
             test_engine_model, test_engine_model_scale, test_work_ahead_per_request,
             test_idle_slow_replica_fades_faster, test_guessed_capacity_is_not_queued,
             test_prefill_prior_scales_with_step, test_view_reuse,
             test_kept_backend_takes_new_settings, test_listening_ends_refused_ejection, teardown)
