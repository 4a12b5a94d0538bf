/*
 * backend_view.c: what a routing policy sees of a backend (struct
 * lg_backend_view, <llmgate/plugin.h>): live counts, the engine's sample
 * blended with our requests since, estimates read against the route's
 * prior, the wait for a slot, flags; and the engine model's outputs (struct
 * lg_engine_model_view), lent to the policies that ask for them.
 *
 * Owns: each thread's cache of the views it filled (lg_backend_view_get).
 * Reads the backend's published state (backend.c) and our requests there
 * (backend_inflight.c), lock-free, on any thread.
 */
#include "fleet/backend_view.h"

#include <llmgate/plugin.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/estimate.h"

/*
 * The time to read b's TTFT estimate at. A replica that was slow gets fewer
 * requests, so fewer samples tell when it is fast again: with nothing of
 * ours in flight there and no sample for LG_EST_IDLE_S, its estimate fades
 * toward the prior LG_EST_IDLE_SPEEDUP times faster from then on. One
 * request then goes there; while it is in flight the estimate reads as
 * before (no herd), and its sample settles the question.
 */
static uint64_t
backend_est_read_ns(const struct lg_est_ttft *e, uint64_t now_ns, uint32_t inflight)
{
    uint64_t idle_ns = (uint64_t)LG_EST_IDLE_S * LG_NS_PER_S;

    if (inflight > 0 || e->t_ns == 0 || now_ns < e->t_ns + idle_ns) {
        return now_ns;
    }
    return now_ns + (LG_EST_IDLE_SPEEDUP - 1) * (now_ns - e->t_ns - idle_ns);
}

/*
 * The tokens still to process on b (lg_backend_view.work_tokens): ours one
 * by one where the engine model follows them, every other request there at
 * their mean (else at the tokens a request's hold lasts).
 */
static double
backend_work_tokens(const struct lg_backend *b, uint64_t now_ns, const struct lg_backend_view *v)
{
    struct lg_seq_info seqs[LG_BACKEND_END_SLOTS];
    bool complete;
    size_t n = lg_backend_seqs_read(b, now_ns, seqs, LG_ARRAY_SIZE(seqs), &complete);
    double sum = 0, mean, others;

    for (size_t i = 0; i < n; i++) {
        sum += (double)seqs[i].left + (seqs[i].started ? 0.0 : (double)seqs[i].prompt_tokens);
    }
    mean = n > 0 ? sum / (double)n : v->hold_ms / LG_MAX(v->itl_ms, 0.1);
    others = LG_MAX((double)v->inflight - (double)n, 0.0) + LG_MAX(v->foreign, 0.0);
    return sum + others * mean;
}

void
lg_backend_view_fill(const struct lg_backend *b, uint64_t now_ns, const struct lg_est_prior *prior,
                     uint64_t scrape_interval_ns, uint64_t slow_start_ns, struct lg_backend_view *v,
                     struct lg_engine_model_view *m)
{
    const struct lg_backend_conf *bc = lg_backend_conf(b);
    struct lg_backend_est est;
    struct lg_backend_engine eng;
    struct lg_backend_report rep;
    enum lg_load_source source;
    struct lg_est_value tv;
    struct lg_est_err_value me, ue, xe;
    uint64_t age;
    double residual;

    lg_backend_read_est(b, &est);
    lg_backend_read_engine(b, &eng);
    lg_backend_read_report(b, &rep);
    source = lg_load_report_fold(&eng, &rep);
    lg_est_ttft_read(&est.ttft, backend_est_read_ns(&est.ttft, now_ns, lg_backend_inflight(b)),
                     prior, &tv);
    age = eng.t_ns != 0 && now_ns >= eng.t_ns ? now_ns - eng.t_ns : (eng.t_ns ? 0 : UINT64_MAX);

    memset(v, 0, sizeof(*v));
    memset(m, 0, sizeof(*m));
    v->size = sizeof(*v);
    m->size = sizeof(*m);
    m->version = LG_ENGINE_MODEL_VERSION;
    v->name = b->name;
    v->id = b->id;
    v->weight = bc->weight ? bc->weight : 1;
    v->ramp = lg_backend_ramp(b, now_ns, slow_start_ns);
    v->inflight = lg_backend_inflight(b);
    v->max_inflight = bc->max_inflight;
    v->engine_waiting = eng.waiting;
    v->engine_running = eng.running;
    v->engine_kv_usage = eng.kv_usage;
    v->engine_age_ns = age;
    v->inflight_at_scrape = eng.inflight_at_scrape;
    v->ttft_fixed_ms = tv.fixed_ms;
    v->ttft_ms_per_kib = tv.ms_per_kib;
    v->itl_ms = lg_est_mean_read(&est.itl, now_ns, prior->itl_ms, LG_EST_MEAN_HALF_LIFE_S);
    v->itl_own_ms = lg_est_mean_own(&est.itl);
    v->samples = tv.samples;
    v->error_rate = lg_est_mean_read(&est.err, now_ns, 0, 2 * LG_EST_MEAN_HALF_LIFE_S);
    /* the scrape's count less ours and our peers' then (health.c) is what no
     * gateway of the fleet knows request by request; peers' own count now
     * is fresher than the scrape's */
    residual = lg_est_foreign_load(eng.waiting, eng.running, eng.inflight_at_scrape, age,
                                   scrape_interval_ns);
    v->foreign = residual + lg_backend_peer_inflight(b, now_ns);
    v->load = v->inflight + v->foreign;
    if (lg_backend_engine_slots(&eng, &v->capacity)) {
        /* said by the engine, or seen full with ours queued */
    } else if (prior->slots > 0) {
        v->flags |= LG_VIEW_F_CAP_GUESS;
        /* not seen full lately: assume the slots its siblings have (replicas
         * of a model usually run the same engine settings) */
        v->capacity = LG_MAX(eng.run_max, prior->slots);
    } else if (eng.run_max > 0) {
        v->flags |= LG_VIEW_F_CAP_GUESS;
        /* it ran that many without a queue: one more slot may exist */
        v->capacity = eng.run_max + 0.5;
    }
    v->hold_ms = lg_est_mean_read(&est.hold, now_ns, prior->hold_ms, LG_EST_MEAN_HALF_LIFE_S);
    v->pending = lg_backend_ages(b, LG_BACKEND_AGES_PENDING, now_ns, &v->pending_age_ms);
    lg_backend_ages(b, LG_BACKEND_AGES_INFLIGHT, now_ns, &v->inflight_age_ms);
    if (v->pending > 0) {
        v->work_ahead_ms = lg_backend_work_ahead_ms(b, now_ns, NULL, NULL);
    }
    if (v->capacity > 0 && v->foreign < 0.5 && v->load + 1 > v->capacity) {
        /* only our requests there: the k-th to end lets the k-th in line in
         * (a guessed capacity too: at the most it has been seen running,
         * the ends say more than the hold-time formula; the router learns
         * from confirmed ones only, lg_router_pick) */
        v->slot_wait_ms = LG_MAX(
            lg_backend_end_wait_ms(b, now_ns, (unsigned)ceil(v->load + 1 - v->capacity), v->itl_ms),
            0.0);
    }
    v->work_tokens = backend_work_tokens(b, now_ns, v);
    v->tokens_per_s = (v->capacity > 0 ? LG_MIN(v->load + 1, v->capacity) : v->load + 1) * 1000.0
                      / LG_MAX(v->itl_ms, 0.1);
    if (!lg_backend_pace_ms(b, now_ns, v->itl_ms, &m->step_ms)) {
        m->flags |= LG_MODEL_F_STEP_GUESS;
    }
    m->prefill_ms_per_kib =
        lg_backend_prefill(&est, now_ns, &tv, prior, m->step_ms, &m->prefill_fixed_ms);
    m->step_ms_per_seq = lg_backend_step_per_seq(b, now_ns);
    m->wait_ms = -1;
    m->joined = 0;
    lg_est_err_read(&est.model_err, now_ns, LG_EST_ERR_HALF_LIFE_S, &me);
    lg_est_err_read(&est.model_used, now_ns, LG_EST_ERR_HALF_LIFE_S, &ue);
    lg_est_err_read(&est.meas_err, now_ns, LG_EST_ERR_HALF_LIFE_S, &xe);
    /* the model's bias at this load, shrunk toward its bias at every load */
    m->scale =
        exp(lg_est_bias_read(&est.model_bias, now_ns, v->load, me.bias, LG_EST_CURVE_HALF_LIFE_S));
    /* ... times how much later than that its first tokens came lately, or
     * the whole fleet's (lg_est_late): a fleet slower than it was learnt
     * is noticed within seconds, not the calibration's tens */
    m->scale *= exp(LG_MAX(lg_est_late_read(&est.late, now_ns), prior->late));
    m->err = ue.weight > 0 ? lg_est_err_rms(&ue) : 0;
    m->measured_err = xe.weight > 0 ? lg_est_err_rms(&xe) : 0;
    m->measured_ms = lg_est_curve_read(&est.curve, now_ns, v->load, NULL);
    m->measured_ms_per_kib = tv.ms_per_kib / LG_MAX(tv.peak, 1.0);
    if (est.measured > 0 && m->measured_ms >= 0) {
        m->flags |= LG_MODEL_F_MISSES;
    }
    /* a capacity never confirmed by a queue is at least what is assumed of
     * an engine (the most it ran says nothing against one more), unless its
     * siblings' slots are known: replicas of a model mostly run alike, and
     * an 8-slot replica taken for 16 was sent a 9th and 10th request that
     * waited for slots (bench/routing/NOTES.md 47) */
    if (v->capacity > 0 && (!(v->flags & LG_VIEW_F_CAP_GUESS) || prior->slots > 0)) {
        m->slots = v->capacity;
    } else {
        m->slots = LG_MAX(v->capacity, LG_EST_ASSUMED_SLOTS);
    }
    m->prefill_chunk = bc->prefill_chunk;
    m->decoding = LG_MAX(0.0, LG_MIN(v->load, m->slots) - (double)v->pending);
    if (residual < 0.5) {
        /* only our requests and our peers' there: the model sees the whole
         * batch and line */
        unsigned joined;

        struct lg_est_steps how = {
            .slots = m->slots >= 1 ? (unsigned)m->slots : 0,
            .step_ms = m->step_ms,
            .step_per_seq = m->step_ms_per_seq,
            .prefill_ms = m->prefill_ms_per_kib / LG_EST_TOKENS_PER_KIB,
            .prefill_fixed_ms = m->prefill_fixed_ms,
            .chunk = m->prefill_chunk,
        };

        m->wait_ms = lg_backend_engine_model_ms(b, now_ns, &how, &joined);
        m->joined = joined;
    }
    if (lg_backend_is_half_open(b, now_ns)) {
        v->flags |= LG_VIEW_F_HALF_OPEN;
    }
    if (v->ramp < 1.0) {
        v->flags |= LG_VIEW_F_RAMPING;
    }
    if (source != LG_LOAD_SRC_SCRAPE) {
        v->flags |= LG_VIEW_F_REPORTED;
    }
    if (scrape_interval_ns == 0 || age >= 4 * scrape_interval_ns) {
        v->flags |= LG_VIEW_F_STALE;
    }
}

/* ---- the views a thread filled ------------------------------------------ */

/*
 * A view is a function of its backend's state, the route's prior, the two
 * settings and the time. What it reads of the state has a version: the
 * estimates', the engine sample's and the peers' sequence counters, the
 * backend's view_ver (the rest: in-flight count, ages, due, ends, seqs, the
 * pace), and two words read as they are (up_since_ns, eject_until_ns); the
 * prior is compared whole. A view filled under the same versions less than
 * LG_VIEW_REUSE_NS ago is that view: only time moved, by less than the
 * ages' own resolution (whole ms), and the estimates' decays (half-lives of
 * seconds) by less than 0.1 %. In a big fleet most candidates of a pick have
 * not changed since the last one, and a pick costs a copy per candidate
 * instead of its estimators' reads (bench/proxy/README.md, ttftbench).
 */
struct view_key {
    const struct lg_backend *b;
    uint32_t id; /* with b: a backend freed and another at its address differ */
    uint32_t est_seq, eng_seq, peers_seq;
    uint64_t view_ver, up_since_ns, eject_until_ns;
    uint64_t scrape_interval_ns, slow_start_ns;
    struct lg_est_prior prior;
};

struct view_slot {
    struct view_key key;
    uint64_t t_ns; /* filled then; 0: empty */
    struct lg_backend_view v;
    struct lg_engine_model_view m;
};

struct view_cache {
    size_t mask;
    struct view_slot slot[];
};

static pthread_key_t view_cache_key;
static pthread_once_t view_cache_once = PTHREAD_ONCE_INIT;
static __thread struct view_cache *view_cache_mine; /* owned through the key */

static void
view_cache_key_new(void)
{
    /* a thread that ends frees its cache */
    LG_BUG_ON(pthread_key_create(&view_cache_key, free) != 0);
}

void
lg_backend_view_reserve(size_t n)
{
    struct view_cache *vc = view_cache_mine;
    size_t cap = 64;

    while (cap < 2 * n) {
        cap *= 2;
    }
    if (__builtin_expect(vc != NULL && vc->mask + 1 >= cap, 1)) {
        return;
    }
    pthread_once(&view_cache_once, view_cache_key_new);
    free(vc);
    vc = lg_xcalloc(1, sizeof(*vc) + cap * sizeof(vc->slot[0]));
    vc->mask = cap - 1;
    view_cache_mine = vc;
    pthread_setspecific(view_cache_key, vc);
}

static void
view_key_read(const struct lg_backend *b, const struct lg_est_prior *prior,
              uint64_t scrape_interval_ns, uint64_t slow_start_ns, struct view_key *k)
{
    memset(k, 0, sizeof(*k)); /* padding too: keys are compared whole */
    k->b = b;
    k->id = b->id;
    /* before the state they version: a change after this read leaves a
     * newer view under an older key, which the next read finds stale */
    k->est_seq = __atomic_load_n(&b->est_seq, __ATOMIC_ACQUIRE);
    k->eng_seq = __atomic_load_n(&b->eng_seq, __ATOMIC_ACQUIRE);
    k->peers_seq = __atomic_load_n(&b->peers_seq, __ATOMIC_ACQUIRE);
    k->view_ver = __atomic_load_n(&b->view_ver, __ATOMIC_ACQUIRE);
    k->up_since_ns = __atomic_load_n(&b->up_since_ns, __ATOMIC_RELAXED);
    k->eject_until_ns = __atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED);
    k->scrape_interval_ns = scrape_interval_ns;
    k->slow_start_ns = slow_start_ns;
    k->prior = *prior;
}

void
lg_backend_view_get(const struct lg_backend *b, uint64_t now_ns, const struct lg_est_prior *prior,
                    uint64_t scrape_interval_ns, uint64_t slow_start_ns, struct lg_backend_view *v,
                    struct lg_engine_model_view *m)
{
    struct view_cache *vc = view_cache_mine;
    struct view_slot *s;
    struct view_key k;

    if (vc == NULL) {
        lg_backend_view_reserve(1);
        vc = view_cache_mine;
    }
    view_key_read(b, prior, scrape_interval_ns, slow_start_ns, &k);
    s = &vc->slot[b->id & vc->mask];
    if (s->t_ns != 0 && now_ns >= s->t_ns && now_ns - s->t_ns < LG_VIEW_REUSE_NS
        && memcmp(&s->key, &k, sizeof(k)) == 0) {
        *v = s->v;
        *m = s->m;
        return;
    }
    lg_backend_view_fill(b, now_ns, prior, scrape_interval_ns, slow_start_ns, v, m);
    s->key = k;
    s->t_ns = now_ns != 0 ? now_ns : 1;
    s->v = *v;
    s->m = *m;
}
