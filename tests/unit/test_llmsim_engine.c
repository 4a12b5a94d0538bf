/*
 * test_llmsim_engine.c: llmsim's engine on a real event loop, and the TTFT
 * predictor of llmsim_shm.h checked against it: for each request, the
 * prediction made from the shared state just before submitting it must match
 * the step at whose end the engine emitted its first token, under every
 * schedule (first come first served, prefill-first, chunked prefill), with a
 * fixed prefill cost and a batch exponent; each schedule's step times in
 * closed form; and the jitter's factor (seeded, mean 1).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "../../tools/llmsim/engine.c"
#include "../../tools/llmsim/prefix.c"
#include "../../tools/llmsim/shm.c"
#include "lg_test.h"

#define NREQ     12
#define MAX_REQS 24
#define TOK_KEPT 64

struct req {
    struct lg_sim_seq seq;
    uint64_t submit_ns;
    uint64_t predicted_ns; /* absolute first-token time predicted at submission */
    uint64_t first_ns;     /* end of the step that emitted the first token */
    uint64_t tok_ns[TOK_KEPT]; /* ends of the steps that emitted its tokens */
    uint32_t tokens;
    bool done;
};

static struct lg_sim_engine engine;
static struct event_base *base;
static int finished;
static int expected; /* the loop stops once this many have finished */
static struct req *break_req; /* and once this one has its first token, where set */

static bool
on_token(struct lg_sim_seq *seq, uint32_t index, bool last)
{
    struct req *r = seq->owner;

    if (index == 0) {
        r->first_ns = engine.emit_step_end_ns; /* the model's time, not the timer's lateness */
    }
    if (index < TOK_KEPT) {
        r->tok_ns[index] = engine.emit_step_end_ns;
    }
    r->tokens++;
    if (r == break_req && r->tokens == 1) {
        event_base_loopbreak(base);
    }
    if (last) {
        r->done = true;
        if (++finished == expected) {
            event_base_loopbreak(base);
        }
    }
    return true;
}

static const struct lg_sim_engine_ops ops = { .on_token = on_token };

struct plan {
    uint32_t prompt_tokens;
    uint32_t max_tokens;
    uint32_t delay_ms; /* after the previous submission */
};

static struct req reqs[MAX_REQS];
static const struct plan *plans;
static int nplans;
static const struct plan fcfs_plans[NREQ] = {
    { 400, 6, 0 }, { 100, 3, 0 }, { 800, 4, 0 }, { 50, 8, 1 },   { 300, 2, 0 }, { 10, 5, 7 },
    { 600, 3, 3 }, { 20, 9, 0 },  { 250, 2, 5 }, { 1000, 2, 0 }, { 5, 1, 12 },  { 70, 4, 0 },
};
static struct event *submit_ev;
static int submitted;
static uint32_t delay_scale = 1; /* stretches the plan's delays */
static uint64_t scratch[4];

static void
submit_next(evutil_socket_t fd, short what, void *arg)
{
    struct lg_sim_shm *shm = arg;

    while (submitted < nplans) {
        struct req *r = &reqs[submitted];
        const struct plan *p = &plans[submitted];
        uint64_t now = lg_now_ns();
        uint64_t ttft = 0;
        struct timeval tv;

        if (submitted > 0 && p->delay_ms > 0 && what != EV_TIMEOUT) {
            tv.tv_sec = 0;
            tv.tv_usec = (suseconds_t)(p->delay_ms * delay_scale) * 1000;
            evtimer_add(submit_ev, &tv);
            return;
        }
        what = 0;
        if (llmsim_shm_predict_ttft_ns(shm->map, now, p->prompt_tokens, scratch,
                                       LG_ARRAY_SIZE(scratch), &ttft)
            != LLMSIM_SHM_OK) {
            fprintf(stderr, "prediction failed for request %d\n", submitted);
            exit(1);
        }
        r->predicted_ns = now + ttft;
        r->submit_ns = lg_now_ns();
        r->seq.owner = r;
        r->seq.prompt_tokens = p->prompt_tokens;
        r->seq.max_tokens = p->max_tokens;
        lg_sim_engine_submit(&engine, &r->seq);
        submitted++;
    }
}

/* Runs a plan on an engine with shared state (path: a mkstemp template) until every request ends. */
static int
run_plan(const struct lg_sim_engine_conf *conf, const struct plan *p, int n, uint32_t scale,
         char *path, struct lg_sim_shm *shm)
{
    int fd = mkstemp(path);

    LG_CHECK(fd >= 0);
    close(fd);
    memset(reqs, 0, sizeof(reqs));
    plans = p;
    nplans = expected = n;
    finished = submitted = 0;
    delay_scale = scale;
    base = event_base_new();
    LG_CHECK(base != NULL);
    LG_CHECK(lg_sim_shm_open(shm, path, "t", conf->slots, 64, 16) == LG_OK);
    LG_CHECK(lg_sim_engine_init(&engine, base, conf, &ops, shm) == LG_OK);
    lg_sim_shm_publish_ready(shm);
    LG_CHECK(llmsim_shm_valid(shm->map, shm->size));
    submit_ev = evtimer_new(base, submit_next, shm);
    event_active(submit_ev, 0, 1);
    event_base_dispatch(base);
    delay_scale = 1;
    LG_CHECK(finished == n);
    return 0;
}

static void
end_plan(const char *path, struct lg_sim_shm *shm)
{
    event_free(submit_ev);
    lg_sim_engine_free(&engine);
    lg_sim_shm_close(shm);
    event_base_free(base);
    unlink(path);
}

static int
test_engine_matches_predictor(void)
{
    struct lg_sim_engine_conf conf = {
        .slots = 3,
        .prefill_us_per_token = 10, /* 1000 tokens: 10 ms */
        .decode_ms = 2,
        .decode_ms_per_seq = 1,
        .speed = 1.0,
        .prefix_block_tokens = 16,
        .prefix_cache_blocks = 64,
    };
    char path[] = "/tmp/llmsim-engine-test-XXXXXX";
    struct lg_sim_shm shm;
    int late = 0;
    int checked = 0;

    LG_CHECK(run_plan(&conf, fcfs_plans, NREQ, 1, path, &shm) == 0);
    for (int i = 0; i < NREQ; i++) {
        int64_t err = (int64_t)(reqs[i].first_ns - reqs[i].predicted_ns);
        bool joined = false;

        LG_CHECK(reqs[i].tokens == plans[i].max_tokens);
        /* a request that arrived later but was admitted in the same step lengthened
         * it (its prefill): no prediction made before it arrived could know */
        for (int j = i + 1; j < NREQ; j++) {
            joined |= reqs[j].first_ns == reqs[i].first_ns;
        }
        if (joined) {
            continue;
        }
        checked++;
        /* the model runs on a virtual schedule; only a step that started after a
         * pause of the whole process (a loaded machine) may drift from it */
        if (err > 300000 || err < -300000) {
            fprintf(stderr, "request %d: first token %+.3f ms off the prediction\n", i,
                    (double)err / 1e6);
            late++;
        }
    }
    LG_CHECK(checked >= 6);
    LG_CHECK(late <= 2);
    LG_CHECK(engine.nrunning == 0 && engine.nwaiting == 0);
    LG_CHECK(engine.stats.completed == NREQ && engine.remaining_decode_tokens == 0);
    LG_CHECK(engine.queued_prefill_tokens == 0);
    LG_CHECK(shm.map->running == 0 && shm.map->waiting == 0 && (shm.map->seq & 1) == 0);
    LG_CHECK(shm.map->wait_head == shm.map->wait_tail && shm.map->wait_tail == NREQ);
    end_plan(path, &shm);
    return 0;
}

/* Abort of a waiting and of a running sequence; a stall holds tokens. */
static int
test_abort_and_stall(void)
{
    struct lg_sim_engine_conf conf = {
        .slots = 1,
        .prefill_us_per_token = 0,
        .decode_ms = 1,
        .speed = 1.0,
    };
    struct req a = { 0 };
    struct req b = { 0 };
    struct req c = { 0 };
    struct timeval tv = { 0, 20000 };

    base = event_base_new();
    finished = 0;
    expected = 1; /* the loop stops once b finishes */
    LG_CHECK(lg_sim_engine_init(&engine, base, &conf, &ops, NULL) == LG_OK);
    a.seq = (struct lg_sim_seq){ .owner = &a, .prompt_tokens = 1, .max_tokens = 1000000 };
    b.seq = (struct lg_sim_seq){ .owner = &b, .prompt_tokens = 1, .max_tokens = 3 };
    c.seq = (struct lg_sim_seq){ .owner = &c, .prompt_tokens = 1, .max_tokens = 3 };
    lg_sim_engine_submit(&engine, &a.seq);
    lg_sim_engine_submit(&engine, &b.seq);
    lg_sim_engine_submit(&engine, &c.seq);
    LG_CHECK(engine.nwaiting == 3 && engine.remaining_decode_tokens == 1000006);
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    LG_CHECK(a.tokens > 3 && engine.nrunning == 1 && engine.nwaiting == 2);
    lg_sim_engine_abort(&engine, &c.seq); /* waiting */
    LG_CHECK(engine.nwaiting == 1 && c.seq.state == LG_SIM_SEQ_ST_IDLE);
    lg_sim_engine_set_stalled(&engine, true);
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    {
        uint32_t held = a.tokens;

        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
        LG_CHECK(a.tokens == held); /* nothing while stalled */
    }
    lg_sim_engine_abort(&engine, &a.seq); /* running: b gets the slot */
    LG_CHECK(engine.stats.aborted == 2 && engine.stats.last_abort_wall_ns > 0);
    LG_CHECK(engine.nrunning == 0);
    lg_sim_engine_set_stalled(&engine, false);
    event_base_dispatch(base); /* until b finishes */
    LG_CHECK(b.done && b.tokens == 3 && c.tokens == 0);
    LG_CHECK(engine.remaining_decode_tokens == 0 && engine.nrunning == 0);
    lg_sim_engine_free(&engine);
    event_base_free(base);
    return 0;
}

/* Bursts, then arrivals one at a time while earlier ones decode or prefill. */
static const struct plan sched_plans[] = {
    { 400, 6, 0 },    { 100, 3, 0 },  { 800, 4, 0 },  { 50, 8, 0 },     { 2000, 30, 90 },
    { 300, 25, 0 },   { 600, 3, 60 }, { 1200, 2, 45 }, { 100, 2, 70 },  { 100, 2, 0 },
    { 100, 2, 0 },    { 1500, 3, 0 }, { 20, 1, 140 },  { 900, 12, 60 }, { 30, 4, 80 },
};

/*
 * Every schedule against the predictor. A request is checked when no later
 * one was submitted before its first token (a later one may join its steps:
 * no prediction made before it arrived could know); in each burst that is
 * the last one, with a queue ahead of it.
 */
static int
run_predictor_check(const struct lg_sim_engine_conf *conf, uint32_t scale, const char *what)
{
    char path[] = "/tmp/llmsim-engine-test-XXXXXX";
    struct lg_sim_shm shm;
    int late = 0;
    int checked = 0;
    int n = (int)LG_ARRAY_SIZE(sched_plans);

    LG_CHECK(run_plan(conf, sched_plans, n, scale, path, &shm) == 0);
    for (int i = 0; i < n; i++) {
        int64_t err = (int64_t)(reqs[i].first_ns - reqs[i].predicted_ns);
        bool overtaken = false;

        LG_CHECK(reqs[i].tokens == sched_plans[i].max_tokens);
        for (int j = i + 1; j < n; j++) {
            overtaken |= reqs[j].submit_ns < reqs[i].first_ns;
        }
        if (getenv("LG_TEST_VERBOSE")) {
            fprintf(stderr, "%s: %2d at %7.2f ms, first token %7.2f ms, error %+.3f%s\n", what, i,
                    (double)(reqs[i].submit_ns - reqs[0].submit_ns) / 1e6,
                    (double)(reqs[i].first_ns - reqs[0].submit_ns) / 1e6, (double)err / 1e6,
                    overtaken ? " (overtaken)" : "");
        }
        if (overtaken) {
            continue;
        }
        checked++;
        if (err > 300000 || err < -300000) {
            fprintf(stderr, "%s: request %d: first token %+.3f ms off the prediction\n", what, i,
                    (double)err / 1e6);
            late++;
        }
    }
    if (checked < 6 || late > 2 || getenv("LG_TEST_VERBOSE")) {
        fprintf(stderr, "%s: %d checked, %d off\n", what, checked, late);
    }
    LG_CHECK(checked >= 6);
    LG_CHECK(late <= 2);
    LG_CHECK(engine.nrunning == 0 && engine.nwaiting == 0);
    LG_CHECK(engine.remaining_decode_tokens == 0 && engine.queued_prefill_tokens == 0);
    for (uint32_t i = 0; i < conf->slots; i++) {
        LG_CHECK(shm.slot[i].tokens_left == 0 && shm.slot[i].prefill_left == 0);
    }
    end_plan(path, &shm);
    return 0;
}

static const struct lg_sim_engine_conf sched_base = {
    .slots = 3,
    .prefill_us_per_token = 10, /* 1000 tokens: 10 ms */
    .decode_ms = 2,
    .decode_ms_per_seq = 1,
    .decode_batch_exp = 1,
    .speed = 1.0,
    .prefix_block_tokens = 16,
    .prefix_cache_blocks = 64,
};

static int
test_predictor_every_schedule(void)
{
    struct lg_sim_engine_conf c = sched_base;

    c.prefill_fixed_ms = 3;
    c.decode_batch_exp = 1.5;
    c.speed = 0.8;
    if (run_predictor_check(&c, 1, "fcfs, fixed prefill, exponent 1.5") != 0) {
        return 1;
    }
    c.schedule = LLMSIM_SHM_SCHED_PREFILL_FIRST;
    if (run_predictor_check(&c, 1, "prefill-first") != 0) {
        return 1;
    }
    /* prompts take several steps: the arrivals are spread out, so that most
     * come after the first token of the one before */
    c.schedule = LLMSIM_SHM_SCHED_CHUNKED;
    c.step_tokens = 256; /* the 2,000-token prompt takes 8 steps */
    c.speed = 2;
    if (run_predictor_check(&c, 2, "chunked") != 0) {
        return 1;
    }
    c.step_tokens = 64; /* a prefill gets what two or three decoders leave */
    return run_predictor_check(&c, 3, "chunked, a small budget");
}

/*
 * Each schedule's step times in closed form. Three slots; 10 us per prompt
 * token, 4 ms per prefilling step, 2 ms + 1 ms x batch^2 per step, all ten
 * times slower (speed 0.1). A (100 tokens, 4 out) arrives alone; B (200
 * tokens, 2 out) 2 ms into A's first step. Times in ms at speed 1 from the
 * end of that step (A's first token).
 */
static int
run_closed_form(uint32_t schedule, uint32_t step_tokens, const double *want_a,
                const double *want_b)
{
    struct lg_sim_engine_conf c = sched_base;
    struct req *a = &reqs[0];
    struct req *b = &reqs[1];
    struct timeval tv = { 0, 2000 };

    c.schedule = schedule;
    c.step_tokens = step_tokens;
    c.prefill_fixed_ms = 4;
    c.decode_batch_exp = 2;
    c.speed = 0.1;
    memset(reqs, 0, sizeof(reqs));
    finished = 0;
    expected = 2;
    base = event_base_new();
    LG_CHECK(lg_sim_engine_init(&engine, base, &c, &ops, NULL) == LG_OK);
    a->seq = (struct lg_sim_seq){ .owner = a, .prompt_tokens = 100, .max_tokens = 4 };
    b->seq = (struct lg_sim_seq){ .owner = b, .prompt_tokens = 200, .max_tokens = 2 };
    lg_sim_engine_submit(&engine, &a->seq);
    event_base_loopexit(base, &tv);
    event_base_dispatch(base); /* A's first step is under way */
    LG_CHECK(engine.phase == LG_SIM_ENGINE_ST_STEP && a->tokens == 0);
    lg_sim_engine_submit(&engine, &b->seq);
    event_base_dispatch(base);
    LG_CHECK(a->done && b->done);
    for (int i = 0; i < 4; i++) {
        double got = (double)(a->tok_ns[i] - a->tok_ns[0]) / 1e6 * c.speed;

        if (got < want_a[i] - 0.001 || got > want_a[i] + 0.001) {
            fprintf(stderr, "schedule %u: A's token %d at %.4f ms, want %.4f\n", schedule, i, got,
                    want_a[i]);
            return 1;
        }
    }
    for (int i = 0; i < 2; i++) {
        double got = (double)(b->tok_ns[i] - a->tok_ns[0]) / 1e6 * c.speed;

        if (got < want_b[i] - 0.001 || got > want_b[i] + 0.001) {
            fprintf(stderr, "schedule %u: B's token %d at %.4f ms, want %.4f\n", schedule, i, got,
                    want_b[i]);
            return 1;
        }
    }
    lg_sim_engine_free(&engine);
    event_base_free(base);
    return 0;
}

static int
test_schedules_closed_form(void)
{
    /* A's first step: 4 + 1 (prefill) + 2 + 1 = 8 ms, then everything from its end.
     * fcfs: B admitted next with A: 4 + 2 + 2 + 4 = 12; then 2 + 4 = 6; A alone 2 + 1 = 3 */
    static const double fcfs_a[] = { 0, 12, 18, 21 }, fcfs_b[] = { 12, 18 };
    /* prefill-first: B alone first, A waits: 4 + 2 + 2 + 1 = 9; both 6; A 3, 3 */
    static const double pf_a[] = { 0, 15, 18, 21 }, pf_b[] = { 9, 15 };
    /* chunked, 120 tokens a step: A decodes (1), B gets 119: 4 + 1.19 + 2 + 4 = 11.19;
     * then B's last 81: 4 + 0.81 + 6 = 10.81 (its first token); both 6 */
    static const double ch_a[] = { 0, 11.19, 22, 28 }, ch_b[] = { 22, 28 };

    if (run_closed_form(LLMSIM_SHM_SCHED_FCFS, 0, fcfs_a, fcfs_b) != 0
        || run_closed_form(LLMSIM_SHM_SCHED_PREFILL_FIRST, 0, pf_a, pf_b) != 0) {
        return 1;
    }
    return run_closed_form(LLMSIM_SHM_SCHED_CHUNKED, 120, ch_a, ch_b);
}

/* Decode steps of one sequence under jitter: seeded, mean 1, sigma as asked. */
static int
run_jitter(uint64_t seed, double *durs, int n)
{
    struct lg_sim_engine_conf c = sched_base;
    struct req *a = &reqs[0];

    c.decode_ms = 0.2;
    c.decode_ms_per_seq = 0;
    c.prefill_us_per_token = 0;
    c.jitter = 0.25;
    c.seed = seed;
    memset(reqs, 0, sizeof(reqs));
    finished = 0;
    expected = 1;
    base = event_base_new();
    LG_CHECK(lg_sim_engine_init(&engine, base, &c, &ops, NULL) == LG_OK);
    a->seq = (struct lg_sim_seq){ .owner = a, .prompt_tokens = 1, .max_tokens = (uint32_t)n + 1 };
    lg_sim_engine_submit(&engine, &a->seq);
    event_base_dispatch(base);
    LG_CHECK(a->done);
    for (int i = 0; i < n; i++) {
        durs[i] = (double)(a->tok_ns[i + 1] - a->tok_ns[i]) / 1e6;
    }
    lg_sim_engine_free(&engine);
    event_base_free(base);
    return 0;
}

static int
test_jitter(void)
{
    enum { N = TOK_KEPT - 1 };
    double x[N], y[N], z[N];
    double mean = 0, lmean = 0, lvar = 0;
    bool differ = false;

    LG_CHECK(run_jitter(7, x, N) == 0 && run_jitter(7, y, N) == 0 && run_jitter(8, z, N) == 0);
    for (int i = 0; i < N; i++) {
        LG_CHECK(fabs(x[i] - y[i]) < 1e-5); /* the same seed: the same steps */
        differ |= fabs(x[i] - z[i]) > 1e-3;
        mean += x[i] / N;
        lmean += log(x[i] / 0.2) / N;
    }
    for (int i = 0; i < N; i++) {
        lvar += (log(x[i] / 0.2) - lmean) * (log(x[i] / 0.2) - lmean) / (N - 1);
    }
    LG_CHECK(differ);
    /* 63 draws of a lognormal (sigma 0.25, mean 1): generous bands, deterministic seed */
    LG_CHECK(mean > 0.2 * 0.9 && mean < 0.2 * 1.1);
    LG_CHECK(sqrt(lvar) > 0.15 && sqrt(lvar) < 0.35);
    return 0;
}

/* Counts the step log's lines of each kind into n[4] (steps, admissions,
 * preemptions, first tokens), and the admissions that recompute tokens. */
static void
step_log_count(const char *path, unsigned n[4], unsigned *recomputes, uint64_t *preempted_id)
{
    char line[512];
    FILE *f = fopen(path, "r");

    memset(n, 0, 4 * sizeof(*n));
    *recomputes = 0;
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long id, s;
        unsigned re;
        int prio;

        if (sscanf(line, "{\"a\":%llu,\"s\":%llu,\"prio\":%d,\"prefill\":%*u,\"re\":%u}", &id,
                   &s, &prio, &re)
            == 4) {
            n[1]++;
            *recomputes += re > 0 && id == *preempted_id;
        } else if (sscanf(line, "{\"p\":%llu,\"s\":%llu,\"prio\":%d", &id, &s, &prio) == 3) {
            n[2]++;
            *preempted_id = prio == 1 ? id : UINT64_MAX;
        } else if (strncmp(line, "{\"f\":", 5) == 0) {
            n[3]++;
        } else if (strncmp(line, "{\"s\":", 5) == 0 && strstr(line, "\"batch\":") != NULL) {
            n[0]++;
        }
    }
    fclose(f);
}

/*
 * Priority with a preemption threshold, under every schedule and with the
 * shared state: a better waiter takes a running sequence's slot at once, the
 * one of the same priority waits, the preempted one ends whole later (its
 * tokens computed again), and the engine's counts come back to zero; and
 * the step log (--step-log) tells each step, admission, preemption and
 * first token.
 */
static int
test_priority_preemption(void)
{
    for (uint32_t sch = 0; sch < 3; sch++) {
        struct lg_sim_engine_conf conf = sched_base;
        char path[] = "/tmp/llmsim-engine-test-XXXXXX";
        char logp[] = "/tmp/llmsim-engine-steps-XXXXXX";
        struct lg_sim_shm shm;
        struct req lo[3];
        struct req hi;
        int fd = mkstemp(path);
        int lfd = mkstemp(logp);
        unsigned n[4], recomputes;
        uint64_t preempted_id = UINT64_MAX, steps;

        LG_CHECK(fd >= 0 && lfd >= 0);
        close(fd);
        close(lfd);
        conf.step_log = sch == LLMSIM_SHM_SCHED_FCFS ? logp : NULL;
        conf.slots = 2;
        conf.schedule = sch;
        conf.step_tokens = sch == LLMSIM_SHM_SCHED_CHUNKED ? 64 : 0;
        conf.policy = LG_SIM_POLICY_PRIORITY;
        conf.preempt_threshold = 0;
        memset(lo, 0, sizeof(lo));
        memset(&hi, 0, sizeof(hi));
        base = event_base_new();
        finished = 0;
        expected = 4;
        LG_CHECK(lg_sim_shm_open(&shm, path, "t", conf.slots, 64, 16) == LG_OK);
        LG_CHECK(lg_sim_engine_init(&engine, base, &conf, &ops, &shm) == LG_OK);
        lg_sim_shm_publish_ready(&shm);
        for (int i = 0; i < 3; i++) {
            lo[i].seq = (struct lg_sim_seq){ .owner = &lo[i], .prompt_tokens = 100,
                                             .max_tokens = 20, .priority = 1 };
            lg_sim_engine_submit(&engine, &lo[i].seq);
        }
        /* until the second holds its slot and has begun (a timer would race the machine) */
        break_req = &lo[1];
        event_base_dispatch(base);
        break_req = NULL;
        LG_CHECK(lo[0].tokens > 0 && lo[1].tokens > 0 && lo[1].tokens < 20 && lo[2].tokens == 0);
        hi.seq = (struct lg_sim_seq){ .owner = &hi, .prompt_tokens = 50, .max_tokens = 2,
                                      .priority = -1 };
        lg_sim_engine_submit(&engine, &hi.seq);
        event_base_dispatch(base); /* until all four end */
        LG_CHECK(hi.done && hi.tokens == 2);
        for (int i = 0; i < 3; i++) {
            LG_CHECK(lo[i].done && lo[i].tokens == 20);
        }
        LG_CHECK(hi.first_ns < lo[1].tok_ns[19] && hi.first_ns < lo[2].first_ns);
        LG_CHECK(engine.stats.preempted == 1);
        /* the prompts, and what the preempted one had generated, computed again */
        LG_CHECK(engine.stats.prefilled_tokens > 3 * 100 + 50);
        LG_CHECK(engine.stats.prompt_tokens == 3 * 100 + 50); /* each prompt counted once */
        LG_CHECK(engine.nrunning == 0 && engine.nwaiting == 0);
        LG_CHECK(engine.remaining_decode_tokens == 0 && engine.queued_prefill_tokens == 0);
        LG_CHECK(shm.map->wait_head == shm.map->wait_tail);
        steps = engine.stats.steps;
        lg_sim_engine_free(&engine); /* closes the log */
        step_log_count(logp, n, &recomputes, &preempted_id);
        if (sch == LLMSIM_SHM_SCHED_FCFS) {
            /* every step; 4 first admissions and the preempted one's return,
             * recomputing; one preemption of a batch-priority sequence; 4 first tokens */
            LG_CHECK(n[0] == steps && n[1] == 5 && n[2] == 1 && n[3] == 4);
            LG_CHECK(preempted_id != UINT64_MAX && recomputes == 1);
        } else {
            LG_CHECK(n[0] + n[1] + n[2] + n[3] == 0); /* no log: nothing written */
        }
        lg_sim_shm_close(&shm);
        event_base_free(base);
        unlink(path);
        unlink(logp);
    }
    return 0;
}

/* The schedules' and policies' names (--schedule, --scheduling-policy) both ways. */
static int
test_names(void)
{
    uint32_t v = 99;

    LG_CHECK(lg_sim_schedule_parse("chunked", &v) == LG_OK && v == LLMSIM_SHM_SCHED_CHUNKED);
    LG_CHECK(lg_sim_schedule_parse("fcfs", &v) == LG_OK && v == LLMSIM_SHM_SCHED_FCFS);
    LG_CHECK_STR(lg_sim_schedule_name(LLMSIM_SHM_SCHED_PREFILL_FIRST), "prefill-first");
    LG_CHECK_STR(lg_sim_schedule_name(3), "?");
    v = 99;
    LG_CHECK(lg_sim_schedule_parse("priority", &v) == LG_EINVAL && v == 99);
    LG_CHECK(lg_sim_policy_parse("priority", &v) == LG_OK && v == LG_SIM_POLICY_PRIORITY);
    LG_CHECK_STR(lg_sim_policy_name(LG_SIM_POLICY_FCFS), "fcfs");
    LG_CHECK_STR(lg_sim_policy_name(2), "?");
    LG_CHECK(lg_sim_policy_parse("chunked", &v) == LG_EINVAL);
    LG_CHECK(lg_sim_policy_parse("", &v) == LG_EINVAL);
    return 0;
}

LG_TEST_MAIN(test_engine_matches_predictor, test_abort_and_stall, test_predictor_every_schedule,
             test_schedules_closed_form, test_jitter, test_priority_preemption, test_names)
