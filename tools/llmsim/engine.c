/*
 * engine.c: llmsim's simulated continuous-batching engine (model in engine.h).
 *
 * Owns: the step timer, the parking timer, the prefix cache, the free-slot
 * stack. Borrows: sequences, from submit until they complete, are aborted or
 * are dropped; the shared state mapping, for the engine's lifetime.
 * One step at a time: KICKED (start at the top of the loop, so requests that
 * arrive together are admitted together) -> STEP (timer armed for its end)
 * -> the next step or IDLE. A stall turns the end of a step into BLOCKED.
 * Every change is published to the shared state inside one seqlock section.
 */
#include "engine.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "base/lg_core.h"
#include "shm.h"

const double lg_sim_ttft_buckets[LG_SIM_TTFT_BUCKETS] = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
};

static void engine_on_step(evutil_socket_t fd, short what, void *arg);

double
lg_sim_gen_bucket(size_t b)
{
    return 2048 / 100.0 * (double)(b + 1);
}

/* ---- shared state ---------------------------------------------------------- */

static void
engine_shm_begin(struct lg_sim_engine *e)
{
    if (e->shm != NULL) {
        lg_sim_shm_begin(e->shm);
    }
}

static void
engine_shm_end(struct lg_sim_engine *e)
{
    struct llmsim_shm *m;

    if (e->shm == NULL || e->shm->map == NULL) {
        return;
    }
    m = e->shm->map;
    if (e->shm->depth == 1) {
        uint32_t flags = 0;

        if (e->phase == LG_SIM_ENGINE_ST_STEP || e->phase == LG_SIM_ENGINE_ST_BLOCKED) {
            flags |= LLMSIM_SHM_F_STEP;
        }
        flags |= e->stalled ? LLMSIM_SHM_F_STALLED : 0;
        flags |= e->failing ? LLMSIM_SHM_F_FAILING : 0;
        m->slots = e->conf.slots;
        m->schedule = e->conf.schedule;
        m->step_tokens = e->conf.step_tokens;
        m->prefill_fixed_ms = e->conf.prefill_fixed_ms;
        m->decode_batch_exp = e->conf.decode_batch_exp;
        m->jitter = e->conf.jitter;
        m->running = e->nrunning;
        m->waiting = e->nwaiting;
        m->speed = e->conf.speed;
        m->prefill_us_per_token = e->conf.prefill_us_per_token;
        m->decode_ms = e->conf.decode_ms;
        m->decode_ms_per_seq = e->conf.decode_ms_per_seq;
        m->queued_prefill_tokens = e->queued_prefill_tokens;
        m->remaining_decode_tokens = e->remaining_decode_tokens;
        m->busy_until_ns_hint = (flags & LLMSIM_SHM_F_STEP) ? e->step_end_ns : 0;
        m->flags = flags;
        m->updated_ns = lg_now_ns();
        m->steps_done = e->stats.steps;
        m->step_start_ns = (flags & LLMSIM_SHM_F_STEP) ? e->step_start_ns : 0;
        m->step_prefill_tokens = e->step_prefill_tokens;
        m->completed = e->stats.completed;
        m->aborted = e->stats.aborted;
        m->prefix_hits = e->stats.prefix_hits;
        m->prefix_queries = e->stats.prefix_queries;
    }
    lg_sim_shm_end(e->shm);
}

static bool
engine_ring_on(const struct lg_sim_engine *e)
{
    return e->shm != NULL && e->shm->map != NULL;
}

/* Publishes waiters without a ring entry while the ring has room. */
static void
engine_ring_fill(struct lg_sim_engine *e)
{
    struct llmsim_shm *m = e->shm->map;

    while (e->wait_unpublished != NULL && m->wait_tail - m->wait_head < LG_SIM_SHM_WAIT_CAP) {
        struct lg_sim_seq *seq = e->wait_unpublished;
        struct llmsim_shm_waiter *w = &e->shm->ring[m->wait_tail & (LG_SIM_SHM_WAIT_CAP - 1)];

        w->uncached_tokens = seq->uncached_tokens;
        w->max_tokens = seq->max_tokens;
        seq->wait_pos = m->wait_tail++;
        seq->wait_published = true;
        e->wait_unpublished = TAILQ_NEXT(seq, link);
    }
}

/* seq leaves the waiting list: its ring entry becomes a hole. Call before removal. */
static void
engine_ring_leave(struct lg_sim_engine *e, struct lg_sim_seq *seq)
{
    struct llmsim_shm *m;

    if (!engine_ring_on(e)) {
        return;
    }
    m = e->shm->map;
    if (e->wait_unpublished == seq) {
        e->wait_unpublished = TAILQ_NEXT(seq, link);
    }
    if (seq->wait_published) {
        e->shm->ring[seq->wait_pos & (LG_SIM_SHM_WAIT_CAP - 1)].max_tokens = 0;
        seq->wait_published = false;
    }
    while (m->wait_head < m->wait_tail
           && e->shm->ring[m->wait_head & (LG_SIM_SHM_WAIT_CAP - 1)].max_tokens == 0) {
        m->wait_head++;
    }
}

/* ---- step log (--step-log) --------------------------------------------------- */

/* A monotonic time as wall-clock milliseconds, the log's unit. */
static double
engine_log_ms(const struct lg_sim_engine *e, uint64_t mono_ns)
{
    return (double)(mono_ns + e->step_log_wall) / 1e6;
}

/* seq was admitted into the step starting now: its prefill, of which recomputed tokens. */
static void
engine_log_admit(struct lg_sim_engine *e, const struct lg_sim_seq *seq)
{
    fprintf(e->step_log,
            "{\"a\":%" PRIu64 ",\"s\":%" PRIu64 ",\"prio\":%" PRId32 ",\"prefill\":%" PRIu32
            ",\"re\":%" PRIu32 "}\n",
            seq->id, e->stats.steps, seq->priority, seq->prefill_left, seq->generated);
}

static void
engine_log_step(struct lg_sim_engine *e, uint32_t batch)
{
    fprintf(e->step_log,
            "{\"s\":%" PRIu64 ",\"start\":%.3f,\"end\":%.3f,\"batch\":%" PRIu32
            ",\"running\":%" PRIu32 ",\"waiting\":%" PRIu32 ",\"prefill\":%" PRIu64 "}\n",
            e->stats.steps, engine_log_ms(e, e->step_start_ns), engine_log_ms(e, e->step_end_ns),
            batch, e->nrunning, e->nwaiting, e->step_prefill_tokens);
}

/* ---- steps ----------------------------------------------------------------- */

uint32_t
lg_sim_engine_gauge_running(const struct lg_sim_engine *e, uint64_t now_ns)
{
    uint64_t lag = (uint64_t)(e->conf.gauge_lag_ms * 1e6);
    uint32_t n = e->nrunning;

    for (size_t i = 0; lag > 0 && i < LG_SIM_ENGINE_GONE; i++) {
        n += e->gone_ns[i] != 0 && e->gone_ns[i] + lag > now_ns;
    }
    return n;
}

static void
engine_kick(struct lg_sim_engine *e)
{
    if (e->phase != LG_SIM_ENGINE_ST_IDLE || e->stalled) {
        return;
    }
    if (e->nwaiting == 0 && e->nrunning == 0) {
        return;
    }
    e->phase = LG_SIM_ENGINE_ST_KICKED;
    event_active(e->step_ev, EV_TIMEOUT, 1);
}

static void
engine_release(struct lg_sim_engine *e, struct lg_sim_seq *seq)
{
    TAILQ_REMOVE(&e->running, seq, link);
    e->nrunning--;
    if (e->conf.gauge_lag_ms > 0) {
        e->gone_ns[e->gone_next++ % LG_SIM_ENGINE_GONE] = lg_now_ns();
    }
    e->free_slots[e->nfree++] = seq->slot;
    if (engine_ring_on(e)) {
        e->shm->slot[seq->slot] = (struct llmsim_shm_slot){ 0, 0 };
    }
    e->remaining_decode_tokens -= seq->max_tokens - seq->generated;
    e->queued_prefill_tokens -= seq->prefill_left; /* aborted before its prefill was done */
    seq->prefill_left = 0;
    seq->state = LG_SIM_SEQ_ST_IDLE;
}

/* seq takes a free slot; its prefill is done by engine_prefill(). */
static void
engine_admit(struct lg_sim_engine *e, struct lg_sim_seq *seq)
{
    uint32_t block = e->conf.prefix_block_tokens;
    uint32_t hits = lg_sim_prefix_lookup(&e->prefix, seq->block_keys, seq->nblocks);
    uint64_t cached = (uint64_t)hits * block;

    engine_ring_leave(e, seq);
    TAILQ_REMOVE(&e->waiting, seq, link);
    e->nwaiting--;
    e->queued_prefill_tokens -= seq->uncached_tokens;
    /* the last prompt token is always computed: it yields the first token */
    cached = LG_MIN(cached, (uint64_t)seq->prompt_tokens - 1);
    seq->cached_tokens = (uint32_t)cached;
    seq->uncached_tokens = seq->prompt_tokens - seq->cached_tokens;
    e->stats.prefix_queries += seq->prompt_tokens;
    e->stats.prefix_hits += cached;
    if (seq->generated == 0) {
        e->stats.prompt_tokens += seq->prompt_tokens; /* a preempted one counted once */
    }
    e->stats.prefilled_tokens += seq->uncached_tokens;
    e->queued_prefill_tokens += seq->uncached_tokens;
    /* a preempted sequence computes again what it had generated (vLLM's recompute) */
    seq->prefill_left = seq->uncached_tokens + seq->generated;
    e->stats.prefilled_tokens += seq->generated;
    e->queued_prefill_tokens += seq->generated;
    seq->emits = false;
    seq->slot = e->free_slots[--e->nfree];
    seq->state = LG_SIM_SEQ_ST_RUNNING;
    TAILQ_INSERT_TAIL(&e->running, seq, link);
    e->nrunning++;
    if (e->step_log != NULL) {
        engine_log_admit(e, seq);
    }
}

/* The step starting now prefills `tokens` more of seq's prompt. */
static void
engine_prefill(struct lg_sim_engine *e, struct lg_sim_seq *seq, uint32_t tokens)
{
    seq->prefill_left -= tokens;
    e->step_prefill_tokens += tokens;
    seq->emits = seq->prefill_left == 0;
}

/*
 * The waiting sequence served next: the first (fcfs), or the one of the
 * lowest priority value, then the earliest arrival (priority: vLLM's order;
 * a linear scan, the queue an engine holds being short).
 */
static struct lg_sim_seq *
engine_next_waiter(const struct lg_sim_engine *e)
{
    struct lg_sim_seq *best = TAILQ_FIRST(&e->waiting);
    struct lg_sim_seq *seq;

    if (e->conf.policy != LG_SIM_POLICY_PRIORITY || best == NULL) {
        return best;
    }
    TAILQ_FOREACH (seq, &e->waiting, link) {
        if (seq->priority < best->priority
            || (seq->priority == best->priority && seq->arrival_ns < best->arrival_ns)) {
            best = seq;
        }
    }
    return best;
}

/* The running sequence preempted first: the largest priority value, then the latest arrival. */
static struct lg_sim_seq *
engine_victim(const struct lg_sim_engine *e)
{
    struct lg_sim_seq *worst = TAILQ_FIRST(&e->running);
    struct lg_sim_seq *seq;

    TAILQ_FOREACH (seq, &e->running, link) {
        if (seq->priority > worst->priority
            || (seq->priority == worst->priority && seq->arrival_ns > worst->arrival_ns)) {
            worst = seq;
        }
    }
    return worst;
}

static void engine_wait(struct lg_sim_engine *e, struct lg_sim_seq *seq);

/*
 * Priority with a preemption threshold (SGLang's priority preemption): while
 * the waiters whose priority beats the lowest running one's by more than the
 * threshold outnumber the free slots, that running sequence goes back to
 * wait, keeping its tokens (recomputed when it is admitted again).
 */
static void
engine_preempt(struct lg_sim_engine *e)
{
    if (e->conf.policy != LG_SIM_POLICY_PRIORITY || e->conf.preempt_threshold < 0) {
        return;
    }
    while (e->nwaiting > 0 && e->nrunning > 0) {
        struct lg_sim_seq *victim = engine_victim(e);
        struct lg_sim_seq *seq;
        uint32_t better = 0;

        TAILQ_FOREACH (seq, &e->waiting, link) {
            better += (int64_t)victim->priority - seq->priority > e->conf.preempt_threshold;
        }
        if (better <= e->conf.slots - e->nrunning) {
            return;
        }
        if (e->step_log != NULL) {
            fprintf(e->step_log,
                    "{\"p\":%" PRIu64 ",\"s\":%" PRIu64 ",\"prio\":%" PRId32 ",\"gen\":%" PRIu32
                    "}\n",
                    victim->id, e->stats.steps, victim->priority, victim->generated);
        }
        engine_release(e, victim);
        e->stats.preempted++;
        engine_wait(e, victim);
    }
}

/* Admits the waiting sequence served next and prefills all of its prompt. */
static void
engine_admit_whole(struct lg_sim_engine *e)
{
    struct lg_sim_seq *seq = engine_next_waiter(e);

    engine_admit(e, seq);
    engine_prefill(e, seq, seq->prefill_left);
}

/* Decides the batch of the step starting now (the schedule); returns its size. */
static uint32_t
engine_schedule(struct lg_sim_engine *e)
{
    struct lg_sim_seq *seq;
    uint32_t batch = 0;
    uint32_t room;

    engine_preempt(e);
    switch (e->conf.schedule) {
    case LLMSIM_SHM_SCHED_PREFILL_FIRST:
        if (e->nwaiting > 0 && e->nrunning < e->conf.slots) {
            /* a prefill step: the sequences it admits are its whole batch */
            TAILQ_FOREACH (seq, &e->running, link) {
                seq->emits = false;
            }
            while (e->nrunning < e->conf.slots && !TAILQ_EMPTY(&e->waiting)) {
                engine_admit_whole(e);
                batch++;
            }
            return batch;
        }
        /* nothing to admit: every running sequence decodes, as first come first served */
        /* fall through */
    case LLMSIM_SHM_SCHED_FCFS:
    default:
        while (e->nrunning < e->conf.slots && !TAILQ_EMPTY(&e->waiting)) {
            engine_admit_whole(e);
        }
        TAILQ_FOREACH (seq, &e->running, link) {
            seq->emits = true;
        }
        return e->nrunning;
    case LLMSIM_SHM_SCHED_CHUNKED:
        /* one token for each decoding sequence (step_tokens >= slots: all of them) */
        TAILQ_FOREACH (seq, &e->running, link) {
            seq->emits = seq->prefill_left == 0;
            batch += seq->emits;
        }
        room = e->conf.step_tokens - batch;
        /* then the unfinished prefill (the last admitted), then new admissions */
        TAILQ_FOREACH (seq, &e->running, link) {
            if (seq->prefill_left > 0 && room > 0) {
                uint32_t chunk = LG_MIN(seq->prefill_left, room);

                engine_prefill(e, seq, chunk);
                room -= chunk;
                batch++;
            }
        }
        while (e->nrunning < e->conf.slots && !TAILQ_EMPTY(&e->waiting) && room > 0) {
            uint32_t chunk;

            seq = engine_next_waiter(e);
            engine_admit(e, seq);
            chunk = LG_MIN(seq->prefill_left, room);
            engine_prefill(e, seq, chunk);
            room -= chunk;
            batch++;
        }
        return batch;
    }
}

/* The step's random factor: lognormal, mean 1 (1 exactly without jitter). */
static double
engine_jitter(struct lg_sim_engine *e)
{
    double sigma = e->conf.jitter;
    double u1, u2, z;

    if (!(sigma > 0)) {
        return 1.0;
    }
    e->rng += 0x9e3779b97f4a7c15ull;
    u1 = ((double)(lg_mix64(e->rng) >> 11) + 1.0) / 9007199254740992.0; /* (0, 1] */
    e->rng += 0x9e3779b97f4a7c15ull;
    u2 = (double)(lg_mix64(e->rng) >> 11) / 9007199254740992.0;
    z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    return exp(sigma * z - sigma * sigma / 2.0);
}

/* Publishes every slot as it will be at the end of the step starting now. */
static void
engine_publish_slots(struct lg_sim_engine *e)
{
    struct lg_sim_seq *seq;

    TAILQ_FOREACH (seq, &e->running, link) {
        e->shm->slot[seq->slot] = (struct llmsim_shm_slot){
            .tokens_left = seq->max_tokens - seq->generated - (seq->emits ? 1 : 0),
            .prefill_left = seq->prefill_left,
        };
    }
}

static void
engine_arm(struct lg_sim_engine *e)
{
    uint64_t now;
    uint64_t delay;
    struct timeval tv;

    /* libevent adds the delay to the time the loop iteration began: refresh
     * it, or a step armed late in a busy iteration would end early */
    event_base_update_cache_time(event_get_base(e->step_ev));
    now = lg_now_ns();
    delay = e->step_end_ns > now ? e->step_end_ns - now + 999 : 0;
    tv.tv_sec = (time_t)(delay / LG_NS_PER_S);
    tv.tv_usec = (suseconds_t)((delay % LG_NS_PER_S) / 1000);
    evtimer_add(e->step_ev, &tv);
}

/* Admits what the schedule takes and starts a step at `start`, or goes idle. */
static void
engine_start_step(struct lg_sim_engine *e, uint64_t start)
{
    const struct lg_sim_engine_conf *c = &e->conf;
    double prefill_ns;
    double decode_ns;
    double scale;
    uint32_t batch;

    engine_shm_begin(e);
    e->step_prefill_tokens = 0;
    batch = engine_schedule(e);
    if (engine_ring_on(e)) {
        engine_ring_fill(e);
    }
    if (e->nrunning == 0) {
        e->phase = LG_SIM_ENGINE_ST_IDLE;
        engine_shm_end(e);
        return;
    }
    prefill_ns = llmsim_shm_prefill_ns(c->prefill_us_per_token, c->prefill_fixed_ms,
                                       e->step_prefill_tokens, c->speed);
    decode_ns =
        llmsim_shm_decode_ns(c->decode_ms, c->decode_ms_per_seq, c->decode_batch_exp, batch, c->speed);
    scale = engine_jitter(e);
    prefill_ns *= scale;
    decode_ns *= scale;
    e->stats.prefill_ns += (uint64_t)prefill_ns;
    e->stats.decode_ns += (uint64_t)decode_ns;
    e->step_start_ns = start;
    e->step_end_ns = start + (uint64_t)llround(prefill_ns + decode_ns);
    e->phase = LG_SIM_ENGINE_ST_STEP;
    if (e->step_log != NULL) {
        engine_log_step(e, batch);
    }
    if (engine_ring_on(e)) {
        engine_publish_slots(e);
    }
    engine_arm(e);
    engine_shm_end(e);
}

static void
engine_note_first_token(struct lg_sim_engine *e, struct lg_sim_seq *seq, uint64_t now)
{
    double ttft = (double)(now - seq->arrival_ns) / 1e9;
    size_t b = 0;

    seq->first_token_ns = now;
    while (b < LG_SIM_TTFT_BUCKETS && ttft > lg_sim_ttft_buckets[b]) {
        b++;
    }
    e->stats.ttft_counts[b]++;
    e->stats.ttft_sum_s += ttft;
    if (e->step_log != NULL) {
        fprintf(e->step_log,
                "{\"f\":%" PRIu64 ",\"prio\":%" PRId32 ",\"arrival\":%.3f,\"at\":%.3f"
                ",\"prompt\":%" PRIu32 ",\"max\":%" PRIu32 "}\n",
                seq->id, seq->priority, engine_log_ms(e, seq->arrival_ns), engine_log_ms(e, now),
                seq->prompt_tokens, seq->max_tokens);
    }
    /* its prompt is now in the KV cache: later prompts can reuse it */
    lg_sim_prefix_insert(&e->prefix, seq->block_keys, seq->nblocks);
}

/* A running sequence leaves mid-step; an engine left with nothing to compute
 * ends the step at once, so the waiting sequences need not wait for it. */
static void
engine_leave_running(struct lg_sim_engine *e, struct lg_sim_seq *seq)
{
    engine_release(e, seq);
    if (e->nrunning == 0 && e->phase == LG_SIM_ENGINE_ST_STEP) {
        evtimer_del(e->step_ev);
        e->queued_prefill_tokens -= e->step_prefill_tokens;
        e->step_prefill_tokens = 0;
        e->phase = LG_SIM_ENGINE_ST_IDLE;
        engine_kick(e);
    }
}

/*
 * The end of a step: one token for every running sequence, then the next
 * step. The tokens go to their owners after the shared state is published:
 * sending them writes to sockets, and a reader of the state (the benchmark's
 * oracle, in the gateway that those writes wake) must not find it mid-update
 * for that long.
 */
static void
engine_end_step(struct lg_sim_engine *e)
{
    uint64_t now = lg_now_ns();
    struct lg_sim_seq *seq;
    struct lg_sim_seq *next;
    uint32_t n = 0;

    engine_shm_begin(e);
    e->stats.steps++;
    e->queued_prefill_tokens -= e->step_prefill_tokens;
    e->step_prefill_tokens = 0;
    for (seq = TAILQ_FIRST(&e->running); seq != NULL; seq = next) {
        uint32_t index;
        bool last;

        next = TAILQ_NEXT(seq, link);
        if (!seq->emits) {
            continue; /* out of this step's batch, or its prefill is unfinished */
        }
        index = seq->generated++;
        last = seq->generated == seq->max_tokens;
        e->remaining_decode_tokens--;
        e->stats.generation_tokens++;
        if (index == 0) {
            engine_note_first_token(e, seq, now);
        }
        if (last) {
            size_t b = 0;

            while (b < LG_SIM_GEN_BUCKETS && seq->generated > lg_sim_gen_bucket(b)) {
                b++;
            }
            e->stats.gen_counts[b]++;
            e->stats.completed_tokens += seq->generated;
            engine_release(e, seq);
            e->stats.completed++;
        }
        e->emit[n++] = (struct lg_sim_token){ seq, index, last };
    }
    e->phase = LG_SIM_ENGINE_ST_IDLE;
    e->emit_step_end_ns = e->step_end_ns;
    if (!e->stalled && (e->nrunning > 0 || e->nwaiting > 0)) {
        engine_start_step(e, now <= e->step_end_ns + LLMSIM_SHM_CATCH_UP_NS ? e->step_end_ns : now);
    }
    engine_shm_end(e);
    for (uint32_t i = 0; i < n; i++) {
        struct lg_sim_token *t = &e->emit[i];

        if (!e->ops->on_token(t->seq, t->index, t->last) && !t->last
            && t->seq->state == LG_SIM_SEQ_ST_RUNNING) {
            engine_shm_begin(e);
            engine_leave_running(e, t->seq);
            e->stats.dropped++;
            engine_shm_end(e);
        }
    }
}

static void
engine_on_step(evutil_socket_t fd, short what, void *arg)
{
    struct lg_sim_engine *e = arg;

    switch (e->phase) {
    case LG_SIM_ENGINE_ST_KICKED:
        if (e->stalled) {
            e->phase = LG_SIM_ENGINE_ST_IDLE;
            break;
        }
        engine_start_step(e, lg_now_ns());
        break;
    case LG_SIM_ENGINE_ST_STEP:
        if (lg_now_ns() < e->step_end_ns) {
            engine_arm(e); /* woken early: tokens never leave before their time */
            break;
        }
        if (e->stalled) {
            engine_shm_begin(e);
            e->phase = LG_SIM_ENGINE_ST_BLOCKED;
            engine_shm_end(e);
            break;
        }
        engine_end_step(e);
        break;
    case LG_SIM_ENGINE_ST_IDLE:
    case LG_SIM_ENGINE_ST_BLOCKED:
        break;
    }
}

/* ---- queue and parked sequences (stall-first) ------------------------------ */

/* seq joins the waiting queue (its arrival time set already; a preempted
 * one with the tokens it generated, computed again once admitted). */
static void
engine_wait(struct lg_sim_engine *e, struct lg_sim_seq *seq)
{
    uint32_t hits = lg_sim_prefix_match(&e->prefix, seq->block_keys, seq->nblocks);
    uint64_t cached =
        LG_MIN((uint64_t)hits * e->conf.prefix_block_tokens, (uint64_t)seq->prompt_tokens - 1);

    seq->uncached_tokens = seq->prompt_tokens - (uint32_t)cached; /* estimate until admitted */
    seq->wait_published = false;
    seq->state = LG_SIM_SEQ_ST_WAITING;
    TAILQ_INSERT_TAIL(&e->waiting, seq, link);
    e->nwaiting++;
    e->queued_prefill_tokens += seq->uncached_tokens;
    e->remaining_decode_tokens += seq->max_tokens - seq->generated;
    if (engine_ring_on(e)) {
        if (e->wait_unpublished == NULL) {
            e->wait_unpublished = seq;
        }
        engine_ring_fill(e);
    }
}

static void
engine_enqueue(struct lg_sim_engine *e, struct lg_sim_seq *seq)
{
    engine_shm_begin(e);
    engine_wait(e, seq);
    engine_kick(e);
    engine_shm_end(e);
}

static void
engine_park_arm(struct lg_sim_engine *e)
{
    struct lg_sim_seq *first = TAILQ_FIRST(&e->parked);
    uint64_t now, delay;
    struct timeval tv;

    evtimer_del(e->park_ev);
    if (first == NULL) {
        return;
    }
    now = lg_now_ns();
    delay = first->park_until_ns > now ? first->park_until_ns - now + 999 : 0;
    tv.tv_sec = (time_t)(delay / LG_NS_PER_S);
    tv.tv_usec = (suseconds_t)((delay % LG_NS_PER_S) / 1000);
    evtimer_add(e->park_ev, &tv);
}

/* Holds seq outside the engine until its park_until_ns, in time order. */
static void
engine_park(struct lg_sim_engine *e, struct lg_sim_seq *seq)
{
    struct lg_sim_seq *after;

    seq->state = LG_SIM_SEQ_ST_PARKED;
    TAILQ_FOREACH_REVERSE (after, &e->parked, lg_sim_seq_list, link) {
        if (after->park_until_ns <= seq->park_until_ns) {
            break;
        }
    }
    if (after != NULL) {
        TAILQ_INSERT_AFTER(&e->parked, after, seq, link);
    } else {
        TAILQ_INSERT_HEAD(&e->parked, seq, link);
    }
    e->nparked++;
    e->stats.parked++;
    if (TAILQ_FIRST(&e->parked) == seq) {
        engine_park_arm(e);
    }
}

static void
engine_on_park(evutil_socket_t fd, short what, void *arg)
{
    struct lg_sim_engine *e = arg;
    struct lg_sim_seq *seq;
    uint64_t now = lg_now_ns();

    while ((seq = TAILQ_FIRST(&e->parked)) != NULL && seq->park_until_ns <= now) {
        TAILQ_REMOVE(&e->parked, seq, link);
        e->nparked--;
        engine_enqueue(e, seq);
    }
    engine_park_arm(e);
}

/* ---- API ------------------------------------------------------------------- */

/* A value's name in a table of names indexed by value, "?" past its end. */
static const char *
engine_name_of(const char *const *names, size_t n, uint32_t v)
{
    return v < n ? names[v] : "?";
}

/* The index of name s in names[0 .. n) into *out; LG_EINVAL if absent. */
static int
engine_name_parse(const char *const *names, size_t n, const char *s, uint32_t *out)
{
    for (uint32_t i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return LG_OK;
        }
    }
    return LG_EINVAL;
}

static const char *const engine_schedules[] = { "fcfs", "prefill-first", "chunked" };

const char *
lg_sim_schedule_name(uint32_t schedule)
{
    return engine_name_of(engine_schedules, LG_ARRAY_SIZE(engine_schedules), schedule);
}

int
lg_sim_schedule_parse(const char *s, uint32_t *out)
{
    return engine_name_parse(engine_schedules, LG_ARRAY_SIZE(engine_schedules), s, out);
}

static const char *const engine_policies[] = { "fcfs", "priority" };

const char *
lg_sim_policy_name(uint32_t policy)
{
    return engine_name_of(engine_policies, LG_ARRAY_SIZE(engine_policies), policy);
}

int
lg_sim_policy_parse(const char *s, uint32_t *out)
{
    return engine_name_parse(engine_policies, LG_ARRAY_SIZE(engine_policies), s, out);
}

int
lg_sim_engine_init(struct lg_sim_engine *e, struct event_base *base,
                   const struct lg_sim_engine_conf *conf, const struct lg_sim_engine_ops *ops,
                   struct lg_sim_shm *shm)
{
    bool shared = shm != NULL && shm->map != NULL;

    memset(e, 0, sizeof(*e));
    e->conf = *conf;
    e->ops = ops;
    e->rng = lg_mix64(conf->seed ^ 0x6a09e667f3bcc908ull); /* apart from the token texts' */
    e->shm = shared ? shm : NULL;
    TAILQ_INIT(&e->waiting);
    TAILQ_INIT(&e->running);
    TAILQ_INIT(&e->parked);
    e->step_ev = evtimer_new(base, engine_on_step, e);
    e->park_ev = evtimer_new(base, engine_on_park, e);
    if (e->step_ev == NULL || e->park_ev == NULL) {
        return LG_ENOMEM;
    }
    e->free_slots = lg_xmalloc((size_t)conf->slots * sizeof(*e->free_slots));
    e->emit = lg_xmalloc((size_t)conf->slots * sizeof(*e->emit));
    for (uint32_t i = 0; i < conf->slots; i++) {
        e->free_slots[i] = conf->slots - 1 - i; /* slot 0 is taken first */
    }
    e->nfree = conf->slots;
    if (conf->step_log != NULL) {
        e->step_log = fopen(conf->step_log, "w");
        if (e->step_log == NULL) {
            LG_ERROR("--step-log %s: %s", conf->step_log, strerror(errno));
            return LG_EINVAL;
        }
        setvbuf(e->step_log, NULL, _IOLBF, 0);
        e->step_log_wall = lg_wall_ns() - lg_now_ns();
    }
    lg_sim_prefix_init(&e->prefix, conf->prefix_block_tokens ? conf->prefix_cache_blocks : 0,
                       shared ? shm->blocks : NULL, shared ? shm->table : NULL);
    engine_shm_begin(e);
    engine_shm_end(e);
    return LG_OK;
}

void
lg_sim_engine_free(struct lg_sim_engine *e)
{
    if (e->step_ev != NULL) {
        event_free(e->step_ev);
        e->step_ev = NULL;
    }
    if (e->park_ev != NULL) {
        event_free(e->park_ev);
        e->park_ev = NULL;
    }
    free(e->free_slots);
    e->free_slots = NULL;
    free(e->emit);
    e->emit = NULL;
    if (e->step_log != NULL) {
        fclose(e->step_log);
        e->step_log = NULL;
    }
    lg_sim_prefix_free(&e->prefix);
}

void
lg_sim_engine_submit(struct lg_sim_engine *e, struct lg_sim_seq *seq)
{
    seq->generated = 0;
    seq->cached_tokens = 0;
    seq->prefill_left = 0;
    seq->emits = false;
    seq->first_token_ns = 0;
    seq->arrival_ns = lg_now_ns();
    seq->id = e->next_id++;
    e->stats.submitted++;
    if (seq->park_until_ns > seq->arrival_ns) {
        engine_park(e, seq);
        return;
    }
    engine_enqueue(e, seq);
}

void
lg_sim_engine_abort(struct lg_sim_engine *e, struct lg_sim_seq *seq)
{
    if (seq->state == LG_SIM_SEQ_ST_IDLE) {
        return;
    }
    engine_shm_begin(e);
    if (seq->state == LG_SIM_SEQ_ST_PARKED) {
        bool first = TAILQ_FIRST(&e->parked) == seq;

        TAILQ_REMOVE(&e->parked, seq, link);
        e->nparked--;
        seq->state = LG_SIM_SEQ_ST_IDLE;
        if (first) {
            engine_park_arm(e);
        }
    } else if (seq->state == LG_SIM_SEQ_ST_WAITING) {
        engine_ring_leave(e, seq);
        TAILQ_REMOVE(&e->waiting, seq, link);
        e->nwaiting--;
        e->queued_prefill_tokens -= seq->uncached_tokens;
        e->remaining_decode_tokens -= seq->max_tokens - seq->generated;
        seq->state = LG_SIM_SEQ_ST_IDLE;
        if (engine_ring_on(e)) {
            engine_ring_fill(e);
        }
    } else {
        engine_leave_running(e, seq);
    }
    e->stats.aborted++;
    e->stats.last_abort_wall_ns = lg_wall_ns();
    engine_shm_end(e);
}

void
lg_sim_engine_set_speed(struct lg_sim_engine *e, double speed)
{
    engine_shm_begin(e);
    e->conf.speed = speed;
    engine_shm_end(e);
}

void
lg_sim_engine_set_failing(struct lg_sim_engine *e, bool failing)
{
    engine_shm_begin(e);
    e->failing = failing;
    engine_shm_end(e);
}

void
lg_sim_engine_set_stalled(struct lg_sim_engine *e, bool stalled)
{
    if (e->stalled == stalled) {
        return;
    }
    engine_shm_begin(e);
    e->stalled = stalled;
    if (!stalled) {
        if (e->phase == LG_SIM_ENGINE_ST_BLOCKED) {
            /* the held step ends now: its tokens go out at the top of the loop */
            e->phase = LG_SIM_ENGINE_ST_STEP;
            e->step_end_ns = lg_now_ns();
            event_active(e->step_ev, EV_TIMEOUT, 1);
        } else {
            engine_kick(e);
        }
    }
    engine_shm_end(e);
}

uint64_t
lg_sim_engine_kv_tokens(const struct lg_sim_engine *e)
{
    const struct lg_sim_seq *seq;
    uint64_t tokens = 0;

    TAILQ_FOREACH (seq, &e->running, link) {
        tokens += (uint64_t)seq->prompt_tokens + seq->generated;
    }
    return tokens;
}

double
lg_sim_engine_kv_usage(const struct lg_sim_engine *e)
{
    const struct lg_sim_seq *seq;
    uint64_t block = e->conf.prefix_block_tokens;
    uint64_t blocks = 0;

    if (block == 0 || e->conf.prefix_cache_blocks == 0) {
        return e->conf.slots ? (double)e->nrunning / e->conf.slots : 0;
    }
    TAILQ_FOREACH (seq, &e->running, link) {
        blocks += ((uint64_t)seq->prompt_tokens + seq->generated + block - 1) / block;
    }
    return LG_MIN(1.0, (double)blocks / e->conf.prefix_cache_blocks);
}
