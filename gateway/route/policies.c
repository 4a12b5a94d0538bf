/*
 * policies.c: the built-in routing policies, written against the public
 * plugin ABI exactly as a shared-object plugin would be (they only see
 * lg_route_info and lg_backend_view, and ttft the engine model it asks
 * for), and registered through lg_builtin_policies[].
 *
 *   round_robin       rotation, weighted by backend weight
 *   least_request     fewest requests in flight from this gateway
 *   p2c               power of two choices: two random candidates, then the
 *                     one with fewer in flight
 *   least_load        least expected wait by token work over token rate (no
 *                     engine model)
 *   ttft              predicted time to first token (the default)
 *   prefix_affinity   rendezvous hashing of the prompt prefix, bounded load
 *   session_affinity  the same on the session header's value
 *
 * Every score is in expected milliseconds of TTFT, so the stages compose
 * (plugin.h). Owns: each policy's state (created and destroyed through its
 * ops). Options are read through the host API's typed getters, which
 * refuse what is out of bounds or unknown.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "base/ttltable.h"
#include "fleet/estimate.h"
#include "route/plugin.h"

/* ---- options ------------------------------------------------------------ */

/* A numeric option: its name, where it goes in the policy's state, its bounds. */
struct policy_num {
    const char *name;
    size_t offset; /* of a double */
    double min, max;
};

/*
 * Reads each number of t[n] into base through the host's getter (the value
 * already there is the default). Returns 0, or -1 once a getter refused one
 * (its message is in create()'s err).
 */
static int
policy_numbers(const struct lg_host_api *host, struct lg_options *opts, void *base,
               const struct policy_num *t, size_t n)
{
    int rc = 0;

    for (size_t i = 0; i < n; i++) {
        double *dst = (double *)(void *)((char *)base + t[i].offset);

        rc |= host->opt_number(opts, t[i].name, *dst, t[i].min, t[i].max, dst);
    }
    return rc;
}

static void
policy_free(void *state)
{
    free(state);
}

static double
policy_weight(const struct lg_backend_view *v)
{
    return v->weight > 0 ? (double)v->weight : 1.0;
}

/*
 * Requests the candidate runs at once: what its engine showed while a queue
 * lasted; a guess (never seen full: the most it ran) counts as at least
 * `assumed`, the operator's word for its engines' slots, since running 6
 * without a queue says nothing against a 7th; unknown is `assumed`.
 */
static double
policy_slots(const struct lg_backend_view *v, double assumed)
{
    if (v->capacity <= 0) {
        return assumed;
    }
    return (v->flags & LG_VIEW_F_CAP_GUESS) ? LG_MAX(v->capacity, assumed) : v->capacity;
}

/* ---- round_robin -------------------------------------------------------- */

struct rr_state {
    uint64_t next; /* atomic */
};

static int
rr_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
          size_t errlen)
{
    (void)host;
    (void)opts; /* none: the host refuses any given */
    (void)err;
    (void)errlen;
    *state = lg_xcalloc(1, sizeof(struct rr_state));
    return 0;
}

/* The candidate whose turn it is costs 0, the next 1 us, and so on. */
static void
rr_score(void *state, const struct lg_route_info *req, const struct lg_backend_view *const *c,
         size_t n, double *cost, const char **why)
{
    struct rr_state *s = state;
    uint64_t turn = __atomic_fetch_add(&s->next, 1, __ATOMIC_RELAXED);
    double total = 0, at;
    size_t owner = 0;

    (void)req;
    for (size_t i = 0; i < n; i++) {
        total += policy_weight(c[i]);
    }
    at = fmod((double)turn, total);
    for (size_t i = 0; i < n; i++) {
        at -= policy_weight(c[i]);
        if (at < 0) {
            owner = i;
            break;
        }
    }
    for (size_t k = 0; k < n; k++) {
        cost[(owner + k) % n] = (double)k * 0.001;
    }
    *why = "next_in_turn";
}

static const struct lg_policy_ops rr_ops = {
    .size = sizeof(struct lg_policy_ops),
    .create = rr_create,
    .destroy = policy_free,
    .score = rr_score,
};

static const struct lg_plugin_desc rr_desc = {
    LG_PLUGIN_ABI_MAJOR, LG_PLUGIN_ABI_MINOR, LG_PLUGIN_POLICY, "round_robin", "1", &rr_ops,
};

/* ---- least_request and p2c ---------------------------------------------- */

struct lr_state {
    const struct lg_host_api *host;
    double ms_per_request; /* what one request in flight costs, to compose with TTFT stages */
    double choices;        /* p2c: candidates sampled */
};

static const struct policy_num lr_options[] = {
    { "ms_per_request", offsetof(struct lr_state, ms_per_request), 0, 1e6 },
    { "choices", offsetof(struct lr_state, choices), 1, 64 }, /* p2c's */
};

static int
lr_create_common(const struct lg_host_api *host, struct lg_options *opts, void **state, bool p2c)
{
    struct lr_state s = { .host = host, .ms_per_request = 100, .choices = 2 };

    if (policy_numbers(host, opts, &s, lr_options, p2c ? 2 : 1) != 0) {
        return -1;
    }
    *state = lg_xmalloc(sizeof(s));
    memcpy(*state, &s, sizeof(s));
    return 0;
}

static int
lr_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
          size_t errlen)
{
    (void)err;
    (void)errlen;
    return lr_create_common(host, opts, state, false);
}

static int
p2c_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
           size_t errlen)
{
    (void)err;
    (void)errlen;
    return lr_create_common(host, opts, state, true);
}

static void
lr_score(void *state, const struct lg_route_info *req, const struct lg_backend_view *const *c,
         size_t n, double *cost, const char **why)
{
    const struct lr_state *s = state;

    (void)req;
    for (size_t i = 0; i < n; i++) {
        cost[i] = (double)c[i]->inflight * s->ms_per_request / policy_weight(c[i]);
    }
    *why = "least_inflight";
}

/* Keeps `choices` candidates drawn at random (without replacement). */
static void
p2c_filter(void *state, const struct lg_route_info *req, const struct lg_backend_view *const *c,
           size_t n, unsigned char *keep)
{
    const struct lr_state *s = state;
    size_t want = (size_t)s->choices, order[64];

    (void)req;
    (void)c;
    if (n <= want) {
        return;
    }
    for (size_t i = 0; i < n; i++) {
        keep[i] = 0;
    }
    if (n > LG_ARRAY_SIZE(order)) {
        /* a large fleet: Floyd's sampling, keep[] the only room it needs */
        for (size_t j = n - want; j < n; j++) {
            size_t t = (size_t)(s->host->random() % (j + 1));

            keep[keep[t] ? j : t] = 1;
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        order[i] = i;
    }
    for (size_t k = 0; k < want; k++) {
        size_t j = k + (size_t)(s->host->random() % (n - k));
        size_t t = order[k];

        order[k] = order[j];
        order[j] = t;
        keep[order[k]] = 1;
    }
}

static void
p2c_score(void *state, const struct lg_route_info *req, const struct lg_backend_view *const *c,
          size_t n, double *cost, const char **why)
{
    lr_score(state, req, c, n, cost, why);
    *why = "p2c_least_inflight";
}

static const struct lg_policy_ops lr_ops = {
    .size = sizeof(struct lg_policy_ops),
    .create = lr_create,
    .destroy = policy_free,
    .score = lr_score,
};

static const struct lg_plugin_desc lr_desc = {
    LG_PLUGIN_ABI_MAJOR, LG_PLUGIN_ABI_MINOR, LG_PLUGIN_POLICY, "least_request", "1", &lr_ops,
};

static const struct lg_policy_ops p2c_ops = {
    .size = sizeof(struct lg_policy_ops),
    .create = p2c_create,
    .destroy = policy_free,
    .filter = p2c_filter,
    .score = p2c_score,
};

static const struct lg_plugin_desc p2c_desc = {
    LG_PLUGIN_ABI_MAJOR, LG_PLUGIN_ABI_MINOR, LG_PLUGIN_POLICY, "p2c", "1", &p2c_ops,
};

/* ---- least_load ---------------------------------------------------------- */

/*
 * Model-free expected wait, the form of SGLang's gateway least_load: the
 * tokens queued and in flight there (the view's work_tokens) plus this
 * request's own (its prompt, bytes / 4, times prompt_weight, and its
 * expected output: max_tokens, else output_tokens), over the replica's
 * measured token rate (tokens_per_s: its gap between tokens at the batch
 * it would run), plus kv_ms * k / (1 - k) for a KV cache k full (k at most
 * 0.95; unknown: 0). No slots, steps or queues modelled: a floor that needs
 * no engine model at all.
 */
struct ll_state {
    double prompt_weight; /* a prompt token's work, in output tokens (1: SGLang's) */
    double output_tokens; /* expected output where max_tokens is not given */
    double kv_ms;         /* the KV cache's pressure at half full */
};

static const struct policy_num ll_options[] = {
    { "prompt_weight", offsetof(struct ll_state, prompt_weight), 0, 100 },
    { "output_tokens", offsetof(struct ll_state, output_tokens), 1, 1e6 },
    { "kv_ms", offsetof(struct ll_state, kv_ms), 0, 1e6 },
};

static int
ll_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
          size_t errlen)
{
    struct ll_state s = { .prompt_weight = 1, .output_tokens = 128, .kv_ms = 150 };

    (void)err;
    (void)errlen;
    if (policy_numbers(host, opts, &s, ll_options, LG_ARRAY_SIZE(ll_options)) != 0) {
        return -1;
    }
    *state = lg_xmalloc(sizeof(s));
    memcpy(*state, &s, sizeof(s));
    return 0;
}

static void
ll_score(void *state, const struct lg_route_info *req, const struct lg_backend_view *const *c,
         size_t n, double *cost, const char **why)
{
    const struct ll_state *s = state;
    double own = s->prompt_weight * (double)req->prompt_bytes / 4.0
                 + (req->max_tokens > 0 ? (double)req->max_tokens : s->output_tokens);

    for (size_t i = 0; i < n; i++) {
        const struct lg_backend_view *v = c[i];
        /* a view from a host before 2.1 has no token work: the requests there */
        bool has = v->size >= offsetof(struct lg_backend_view, tokens_per_s) + sizeof(double)
                   && v->tokens_per_s > 0;
        double k = LG_MIN(LG_MAX(v->engine_kv_usage, 0.0), 0.95);

        cost[i] = has ? 1000.0 * (LG_MAX(v->work_tokens, 0.0) + own) / v->tokens_per_s
                      : (double)v->inflight * 100.0;
        if (!(v->flags & LG_VIEW_F_STALE)) {
            cost[i] += s->kv_ms * k / (1 - k);
        }
        cost[i] /= policy_weight(v);
    }
    *why = "least_expected_load";
}

static const struct lg_policy_ops ll_ops = {
    .size = sizeof(struct lg_policy_ops),
    .create = ll_create,
    .destroy = policy_free,
    .score = ll_score,
};

static const struct lg_plugin_desc ll_desc = {
    LG_PLUGIN_ABI_MAJOR, LG_PLUGIN_ABI_MINOR, LG_PLUGIN_POLICY, "least_load", "1", &ll_ops,
};

/* ---- ttft --------------------------------------------------------------- */

/*
 * Predicted time to first token of this request on each candidate, by one
 * of three estimators (ttft_choose()): the engine model, the measured terms
 * where the model misses, else the formula; then what its prefill costs the
 * requests there and its answer's pace; then a pick among those predicted
 * about as soon (ttft_tolerate()). Why each term, and the runs behind the
 * defaults: bench/routing/DESIGN.md.
 */
struct ttft_state {
    double slots;     /* capacity assumed when the engine does not say */
    bool slots_given; /* `slots` set in the options */
    double batch_weight;
    double decode_weight;
    double error_penalty;
    double foreign_margin;
    double prefill_share;
    double wait_weight;
    double ahead_weight;
    double decode_slack;
    double model_decode_weight;
    double model_prefill_share;
    double model_ahead_weight;
    double tolerance_ms;
    double tolerance_load;
    double tolerance_decode_ms;
    double tolerance_count;
    double e2e_slack;
    double e2e_slack_ms;
    double e2e_slack_load;
    double interference;
    double queue_guard;
    double queue_reserve; /* a replica's last slots count as a queue for the guard */
    double lower_prefill_weight; /* by class: the lower classes' prefill in progress, as work ahead */
    int engine_model;     /* predict by the engine model where it runs */
    int model_needs_pace; /* ... only where a stream timed its step lately */
    int model_floor;      /* where only the pace keeps it out: never sooner than it */
    int model_calibrate;  /* ... scaled by what it missed there lately */
    int measured;         /* the measured terms where the model misses */
};

static const struct policy_num ttft_options[] = {
    { "slots", offsetof(struct ttft_state, slots), 1, 1e6 },
    { "batch_weight", offsetof(struct ttft_state, batch_weight), 0, 100 },
    { "decode_weight", offsetof(struct ttft_state, decode_weight), 0, 10 },
    { "error_penalty", offsetof(struct ttft_state, error_penalty), 0, 1000 },
    { "foreign_margin", offsetof(struct ttft_state, foreign_margin), 0, 100 },
    { "prefill_share", offsetof(struct ttft_state, prefill_share), 0, 100 },
    { "wait_weight", offsetof(struct ttft_state, wait_weight), 0, 100 },
    { "ahead_weight", offsetof(struct ttft_state, ahead_weight), 0, 100 },
    { "decode_slack", offsetof(struct ttft_state, decode_slack), 0, 100 },
    { "model_decode_weight", offsetof(struct ttft_state, model_decode_weight), 0, 10 },
    { "model_prefill_share", offsetof(struct ttft_state, model_prefill_share), 0, 100 },
    { "model_ahead_weight", offsetof(struct ttft_state, model_ahead_weight), 0, 100 },
    { "tolerance_ms", offsetof(struct ttft_state, tolerance_ms), 0, 1e6 },
    { "tolerance_load", offsetof(struct ttft_state, tolerance_load), 0, 1 },
    { "tolerance_decode_ms", offsetof(struct ttft_state, tolerance_decode_ms), 0, 1e7 },
    { "tolerance_count", offsetof(struct ttft_state, tolerance_count), 0, 1 },
    { "e2e_slack", offsetof(struct ttft_state, e2e_slack), 0, 1000 },
    { "e2e_slack_ms", offsetof(struct ttft_state, e2e_slack_ms), 0, 1e7 },
    { "e2e_slack_load", offsetof(struct ttft_state, e2e_slack_load), 0, 1 },
    { "interference", offsetof(struct ttft_state, interference), 0, 100 },
    { "queue_guard", offsetof(struct ttft_state, queue_guard), 0, 1000 },
    { "queue_reserve", offsetof(struct ttft_state, queue_reserve), 0, 1e6 },
    { "lower_prefill_weight", offsetof(struct ttft_state, lower_prefill_weight), 0, 100 },
};

static int
ttft_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
            size_t errlen)
{
    struct ttft_state s = { .slots = LG_EST_ASSUMED_SLOTS,
                            .batch_weight = 1.0,
                            .decode_weight = 0.05,
                            .error_penalty = 2,
                            .foreign_margin = 1,
                            .prefill_share = 1,
                            .wait_weight = 1.6,
                            .ahead_weight = 2,
                            .decode_slack = 1.75,
                            .model_decode_weight = 0,
                            .model_prefill_share = 1,
                            .model_ahead_weight = 0,
                            .tolerance_ms = 20,
                            .tolerance_load = 0.75,
                            .tolerance_decode_ms = 2500,
                            .tolerance_count = 1,
                            .e2e_slack = 0,
                            .e2e_slack_ms = 1000,
                            .e2e_slack_load = 0,
                            .interference = 0,
                            .queue_guard = 2,
                            .queue_reserve = 0,
                            .lower_prefill_weight = 0,
                            .engine_model = 1,
                            .model_needs_pace = 1,
                            .model_floor = 0,
                            .model_calibrate = 1,
                            .measured = 1 };
    int rc = policy_numbers(host, opts, &s, ttft_options, LG_ARRAY_SIZE(ttft_options));

    (void)err;
    (void)errlen;
    rc |= host->opt_bool(opts, "engine_model", s.engine_model, &s.engine_model);
    rc |= host->opt_bool(opts, "model_needs_pace", s.model_needs_pace, &s.model_needs_pace);
    rc |= host->opt_bool(opts, "model_floor", s.model_floor, &s.model_floor);
    rc |= host->opt_bool(opts, "model_calibrate", s.model_calibrate, &s.model_calibrate);
    rc |= host->opt_bool(opts, "measured", s.measured, &s.measured);
    if (rc != 0) {
        return -1;
    }
    s.slots_given = s.slots != LG_EST_ASSUMED_SLOTS;
    *state = lg_xmalloc(sizeof(s));
    memcpy(*state, &s, sizeof(s));
    return 0;
}

/* What a candidate's prediction rests on (ttft_choose()). */
enum ttft_est {
    TTFT_EST_FORMULA = 0,
    TTFT_EST_MODEL,
    TTFT_EST_MEASURED,
};

/*
 * Whether the engine model predicts there: it could run (it sees every
 * request there), with the slots assumed here (or `slots` not set: the
 * host's guess stands), at a step a stream timed lately.
 */
static bool
ttft_model_runs(const struct ttft_state *s, const struct lg_backend_view *v)
{
    const struct lg_engine_model_view *m = v->model;

    return s->engine_model && m != NULL && m->wait_ms >= 0
           && (!s->slots_given || (unsigned)m->slots == (unsigned)policy_slots(v, s->slots))
           && !(s->model_needs_pace && (m->flags & LG_MODEL_F_STEP_GUESS));
}

/*
 * Whether the engine model would run there but for the pace: no stream
 * timed its step lately (model_needs_pace), all else as ttft_model_runs()
 * asks, and nothing there (no request of ours or anyone's). On a replica
 * that seldom streams the model's step is a guess, but on an idle one its
 * prediction is the prompt's prefill (learnt from that replica's own first
 * tokens, calibrated), which the guess enters only through a chunked
 * prefill's further steps: where it predicts later than the formula or the
 * measured terms, those read the replica too fast (a slower replica's long
 * prompt, prefilled a few tokens a step, took 2-3x the formula's
 * prediction there: bench/routing/NOTES.md 61), so with model_floor it is
 * their floor. Where requests are there the wait behind them runs at the
 * guessed step, and the floor raised a seldom-streaming slow replica with
 * work there past the formula that reads it better (llmsim's m1 at 90%:
 * p99 TTFT 1.27x over three rounds).
 */
static bool
ttft_model_floors(const struct ttft_state *s, const struct lg_backend_view *v)
{
    const struct lg_engine_model_view *m = v->model;

    return s->model_floor && s->model_needs_pace && s->engine_model && m != NULL
           && m->wait_ms >= 0 && (m->flags & LG_MODEL_F_STEP_GUESS) && v->load < 0.5
           && (!s->slots_given || (unsigned)m->slots == (unsigned)policy_slots(v, s->slots));
}

/*
 * The chooser: the measured terms where the host judges the model off
 * (LG_MODEL_F_MISSES) and they have seen first tokens lately, else the model
 * where it runs, else the formula.
 */
static enum ttft_est
ttft_choose(const struct ttft_state *s, const struct lg_backend_view *v, bool runs)
{
    const struct lg_engine_model_view *m = v->model;

    if (s->measured && s->engine_model && m != NULL && (m->flags & LG_MODEL_F_MISSES)
        && m->measured_ms >= 0) {
        return TTFT_EST_MEASURED;
    }
    return runs ? TTFT_EST_MODEL : TTFT_EST_FORMULA;
}

/* Chunked prefill's further steps for this prompt there (lg_est_chunks_ms();
 * 0 from a model view without them). */
static double
ttft_chunks_ms(const struct lg_engine_model_view *m, double kib)
{
    if (m->size < offsetof(struct lg_engine_model_view, decoding) + sizeof(m->decoding)) {
        return 0;
    }
    return lg_est_chunks_ms(m->prefill_chunk, m->decoding, m->step_ms, m->prefill_fixed_ms, kib);
}

/*
 * The engine model: (wait_ms + prefill_ms_per_kib * kib + the further
 * steps of a chunked prefill) * scale. No margin: it ran the replica forward
 * over everything there; the scale is what it missed there lately
 * (model_calibrate).
 */
static double
ttft_model(const struct ttft_state *s, const struct lg_engine_model_view *m, double kib)
{
    double pred = m->wait_ms + m->prefill_ms_per_kib * kib + ttft_chunks_ms(m, kib);

    if (s->model_calibrate && m->scale > 0) {
        pred *= m->scale;
    }
    return pred;
}

/*
 * The measured terms: measured_ms + measured_ms_per_kib * kib, never sooner
 * than the model where it runs (its misses are first tokens too soon, and a
 * queue of ours it sees is there whatever loads the curve has seen).
 */
static double
ttft_measured(const struct ttft_state *s, const struct lg_engine_model_view *m, double kib,
              bool runs)
{
    double pred = m->measured_ms + m->measured_ms_per_kib * kib;

    return runs ? LG_MAX(pred, ttft_model(s, m, kib)) : pred;
}

/* What the formula or the measured terms predict there, raised to the
 * engine model's prediction where only the pace keeps it out
 * (ttft_model_floors()). */
static double
ttft_floored(const struct ttft_state *s, const struct lg_backend_view *v, double kib, double pred)
{
    return ttft_model_floors(s, v) ? LG_MAX(pred, ttft_model(s, v->model, kib)) : pred;
}

/*
 * The formula: service + wait + batch + ahead, with
 *   service = ttft_fixed_ms + ttft_ms_per_kib * kib
 *   wait    = wait_weight * the wait for a slot (lg_est_slot_wait_ms()),
 *             at load plus foreign_margin deviations of others' load since
 *             the scrape (a queue's length varies more than a service time)
 *   batch   = batch_weight * itl * min(load, slots) / slots (steps grow
 *             with the batch: every request there, whatever the class
 *             counted ahead of it, step_load)
 *   ahead   = ahead_weight * work_ahead_ms (a prefill ahead that runs long
 *             is the tail)
 */
static double
ttft_formula(const struct ttft_state *s, const struct lg_backend_view *v, double kib,
             double step_load)
{
    double slots = policy_slots(v, s->slots);
    double service = v->ttft_fixed_ms + v->ttft_ms_per_kib * kib;
    double age_ms = (v->flags & LG_VIEW_F_STALE) ? 0 : (double)v->engine_age_ns / 1e6;
    /* others' load changes since the scrape: its spread grows as the square
     * root of the sample's age */
    double load =
        v->load + s->foreign_margin * sqrt(2.0 * v->foreign * age_ms / LG_MAX(v->hold_ms, 1.0));
    /* the ends count the line from the view's capacity, not from a guess
     * under the slots assumed here */
    bool guessed_low = (v->flags & LG_VIEW_F_CAP_GUESS) && slots > v->capacity;
    double known = guessed_low ? 0 : v->slot_wait_ms;
    double wait = s->wait_weight
                  * lg_est_slot_wait_ms(known, load, slots, v->hold_ms,
                                        v->inflight > 0 ? v->inflight_age_ms : -1);
    /* (step_load with the same margin for others' load as load) */
    double batch = s->batch_weight * v->itl_ms * LG_MIN(step_load + load - v->load, slots) / slots;

    return service + wait + batch + s->ahead_weight * v->work_ahead_ms;
}

/*
 * What every estimator's prediction takes from the replica's own record:
 * at least the age of its overdue first tokens (a stall shows before any
 * sample does), times 1 + error_penalty * error_rate.
 */
static double
ttft_observed(const struct ttft_state *s, const struct lg_backend_view *v, double pred)
{
    if (v->pending > 0 && v->work_ahead_ms <= 0 && v->pending_age_ms > pred) {
        pred = v->pending_age_ms;
    }
    return pred * (1.0 + s->error_penalty * LG_MAX(0.0, LG_MIN(1.0, v->error_rate)));
}

/*
 * The time its prefill takes from the answers generating there (the
 * `interference` option): interference * prefill * decoders, decoders the
 * load there (at most its slots) less ours awaiting a first token.
 */
static double
ttft_interference_ms(const struct ttft_state *s, const struct lg_backend_view *v, double kib,
                     bool model)
{
    double decoders = LG_MAX(0.0, LG_MIN(v->load, policy_slots(v, s->slots)) - v->pending);
    double prefill = model ? v->model->prefill_fixed_ms + v->model->prefill_ms_per_kib * kib
                           : v->ttft_ms_per_kib * kib;

    return LG_MAX(0.0, prefill) * decoders;
}

/*
 * What its prefill costs the requests there still awaiting a first token:
 * prefill_share * ttft_ms_per_kib * kib * pending by the formula; by the
 * model (its estimators), model_prefill_share * prefill_ms_per_kib * kib *
 * joined (those it admits into the same step) + model_ahead_weight *
 * work_ahead_ms; with either, the answers generating there (interference).
 */
static double
ttft_company(const struct ttft_state *s, const struct lg_backend_view *v, double kib, bool model,
             double pred)
{
    if (!model) {
        pred += s->prefill_share * v->ttft_ms_per_kib * kib * v->pending;
    } else {
        pred += s->model_prefill_share * v->model->prefill_ms_per_kib * kib * v->model->joined;
        pred += s->model_ahead_weight * v->work_ahead_ms;
    }
    if (s->interference > 0) {
        pred += s->interference * ttft_interference_ms(s, v, kib, model);
    }
    return pred;
}

/*
 * Its answer's pace: decode_weight (model_decode_weight by the model) *
 * max_tokens * the gap between tokens beyond decode_slack times the
 * candidates' least (only a much slower decoder is charged).
 */
static double
ttft_decode(const struct ttft_state *s, const struct lg_route_info *req,
            const struct lg_backend_view *v, double min_itl, bool model)
{
    return (model ? s->model_decode_weight : s->decode_weight) * (double)req->max_tokens
           * LG_MAX(0.0, v->itl_ms - s->decode_slack * min_itl);
}

static double
ttft_predict(const struct ttft_state *s, const struct lg_route_info *req,
             const struct lg_backend_view *v, double min_itl, double step_load,
             enum ttft_est *used)
{
    double kib = (double)req->prompt_bytes / 1024.0;
    bool runs = ttft_model_runs(s, v);
    double pred;

    *used = ttft_choose(s, v, runs);
    switch (*used) {
    case TTFT_EST_MEASURED:
        pred = ttft_measured(s, v->model, kib, runs);
        pred = runs ? pred : ttft_floored(s, v, kib, pred);
        break;
    case TTFT_EST_MODEL:
        pred = ttft_model(s, v->model, kib);
        break;
    default:
        pred = ttft_floored(s, v, kib, ttft_formula(s, v, kib, step_load));
        break;
    }
    pred = ttft_observed(s, v, pred);
    pred = ttft_company(s, v, kib, *used != TTFT_EST_FORMULA, pred);
    return pred + ttft_decode(s, req, v, min_itl, *used != TTFT_EST_FORMULA);
}

/*
 * tolerance_ms: of the candidates predicted within tolerance_ms of the
 * soonest first token, the one with the fewest requests there wins
 * (tolerance_count 1; at 0, the smallest share of its slots taken; the
 * prediction breaks ties); besides the soonest, only those with
 * under tolerance_load of their slots taken qualify, and where the answer
 * would take at most tolerance_decode_ms longer (max_tokens x the
 * difference in gaps between tokens). Greedy placement fills the fast
 * replicas' slots while a slower one idles, and the next long prompt waits
 * for a slot. Costs stay in ms: qualifying candidates map into [best, best +
 * tolerance] by load, the others keep their prediction (raised above best +
 * tolerance when they do not qualify). True when another than the cheapest
 * now costs least (the pick's reason says so).
 */
static bool
ttft_tolerate(const struct ttft_state *s, const struct lg_route_info *req,
              const struct lg_backend_view *const *c, size_t n, double *cost)
{
    double best = cost[0], most = 1;
    size_t at = 0;
    bool moved = false;

    for (size_t i = 0; i < n; i++) {
        if (cost[i] < best) {
            best = cost[i];
            at = i;
        }
        most = LG_MAX(most, policy_slots(c[i], s->slots));
    }
    for (size_t i = 0; i < n; i++) {
        double share = LG_MIN(1.0, c[i]->load / policy_slots(c[i], s->slots));
        /* what ranks them: the share of its slots taken, or with
         * tolerance_count its requests (over the most slots, to stay in
         * 0..1): where every replica runs at one pace, each prompt a
         * replica admits stalls every answer generating there, so equal
         * counts keep the answers' pace even */
        double taken =
            (1 - s->tolerance_count) * share + s->tolerance_count * LG_MIN(1.0, c[i]->load / most);
        /* its answer there takes at most tolerance_decode_ms longer than
         * at the cheapest (an unknown length: no slower at all) */
        double slower = LG_MAX(0.0, c[i]->itl_ms - c[at]->itl_ms);
        bool decodes = req->max_tokens > 0
                           ? (double)req->max_tokens * slower <= s->tolerance_decode_ms
                           : slower <= 0;

        if (cost[i] > best + s->tolerance_ms) {
            continue;
        }
        if (i != at && (share >= s->tolerance_load || !decodes)) {
            cost[i] = LG_MAX(cost[i], best + s->tolerance_ms * 1.001);
            continue;
        }
        if (c[i]->flags & LG_VIEW_F_HALF_OPEN) {
            /* a replica back from an ejection needs one request to come
             * back: within the tolerance it ties with the soonest (the
             * router's rotation breaks the tie), or two idle replicas
             * predicted alike would leave it to a hair of slow start's */
            cost[i] = best;
            continue;
        }
        cost[i] = best + s->tolerance_ms * (0.999 * taken + 0.001 * (cost[i] - best)
                                                            / s->tolerance_ms);
    }
    for (size_t i = 0; i < n; i++) {
        moved = moved || cost[i] < cost[at];
    }
    return moved; /* another than the cheapest now leads */
}

/* A replica's gap between tokens for the end of an answer: its own answers'
 * however long ago (itl_own_ms: a slow replica seldom used keeps its pace;
 * itl_ms leans back to the fleet's as the samples age), else itl_ms (the
 * fleet's, before any answer there). */
static double
ttft_pace(const struct lg_backend_view *v)
{
    return v->itl_own_ms > 0 ? v->itl_own_ms : v->itl_ms;
}

/* When an answer of max_tokens started at `cost` there would end. */
static double
ttft_end(const struct lg_route_info *req, const struct lg_backend_view *v, double cost)
{
    return cost + (double)req->max_tokens * ttft_pace(v);
}

/*
 * e2e_slack (0: off): a request that gives max_tokens never goes where its
 * answer would end later than the soonest end x (1 + e2e_slack) +
 * e2e_slack_ms, an end being its cost (the first token) + max_tokens x the
 * replica's own gap between tokens (ttft_pace()); such candidates are
 * raised above every other, by their excess. A long answer stays off a
 * replica that starts it first but generates it at a fraction of another's
 * pace. e2e_slack_load (0: off): the soonest end counts only among the
 * candidates that would then have at most that share of their slots taken
 * (none: no guard). True when the cheapest was raised.
 */
static bool
ttft_finish_guard(const struct ttft_state *s, const struct lg_route_info *req,
                  const struct lg_backend_view *const *c, size_t n, double *cost)
{
    double soonest = 0, limit, worst = 0;
    size_t at = 0;
    bool raised = false, any = false;

    if (s->e2e_slack <= 0 || req->max_tokens == 0 || n < 2) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        double end = ttft_end(req, c[i], cost[i]);
        /* with it, at most e2e_slack_load of its slots taken (0: any) */
        bool room = s->e2e_slack_load <= 0
                    || c[i]->load + 1 <= s->e2e_slack_load * policy_slots(c[i], s->slots);

        if (room && (!any || end < soonest)) {
            soonest = end;
            any = true;
        }
        if (cost[i] < cost[at]) {
            at = i;
        }
    }
    if (!any) {
        return false;
    }
    limit = soonest * (1.0 + s->e2e_slack) + s->e2e_slack_ms;
    for (size_t i = 0; i < n; i++) {
        if (ttft_end(req, c[i], cost[i]) <= limit) {
            worst = LG_MAX(worst, cost[i]);
        }
    }
    for (size_t i = 0; i < n; i++) {
        double end = ttft_end(req, c[i], cost[i]);

        if (end > limit) {
            raised = raised || i == at;
            /* above tolerance_ms too: ttft_tolerate() moves nothing there */
            cost[i] = LG_MAX(cost[i], worst) + s->tolerance_ms * 1.001 + (end - limit);
        }
    }
    return raised;
}

/* Whether the answer at candidate j takes at most tolerance_decode_ms
 * longer than at i (max_tokens x the difference in gaps between tokens; an
 * unknown length: no slower at all), as ttft_tolerate() asks. */
static bool
ttft_decodes_near(const struct ttft_state *s, const struct lg_route_info *req,
                  const struct lg_backend_view *j, const struct lg_backend_view *i)
{
    double slower = LG_MAX(0.0, j->itl_ms - i->itl_ms);

    return req->max_tokens > 0 ? (double)req->max_tokens * slower <= s->tolerance_decode_ms
                               : slower <= 0;
}

/*
 * One pass of the queue guard (ttft_queue_guard()): a candidate whose
 * capacity is known and where the request would leave fewer than `keep`
 * slots free (keep 0: it would wait for a slot; with keep > 0, only one that
 * would not wait) loses to the cheapest that would still have `keep` free,
 * where that is predicted at most queue_guard times as late and its answer
 * near enough (ttft_decodes_near()). True when the cheapest was raised.
 */
static bool
ttft_guard_pass(const struct ttft_state *s, const struct lg_route_info *req,
                const struct lg_backend_view *const *c, size_t n, double *cost, double keep)
{
    size_t at = 0, cheapest = n;
    bool raised = false;

    for (size_t i = 0; i < n; i++) {
        if (cost[i] < cost[at]) {
            at = i;
        }
        if (policy_slots(c[i], s->slots) - (c[i]->load + 1) >= keep
            && (cheapest == n || cost[i] < cost[cheapest])) {
            cheapest = i;
        }
    }
    if (cheapest == n) {
        return false; /* no room anywhere: nothing to move toward */
    }
    for (size_t i = 0; i < n; i++) {
        bool full = c[i]->capacity > 0 && !(c[i]->flags & LG_VIEW_F_CAP_GUESS)
                    && c[i]->load + 1 > c[i]->capacity - keep
                    && (keep <= 0 || c[i]->load + 1 <= c[i]->capacity);
        double free_best = 0;
        bool any = false;

        /* the cheapest with room, where its answer is near enough, is the
         * least of them all (those with room are never raised in this
         * pass): one test instead of a pass over every candidate for each
         * full one */
        if (full && cheapest != i && ttft_decodes_near(s, req, c[cheapest], c[i])) {
            free_best = cost[cheapest];
            any = true;
            full = false;
        }
        for (size_t j = 0; full && j < n; j++) {
            if (j != i && policy_slots(c[j], s->slots) - (c[j]->load + 1) >= keep
                && ttft_decodes_near(s, req, c[j], c[i]) && (!any || cost[j] < free_best)) {
                free_best = cost[j];
                any = true;
            }
        }
        if (any && free_best <= s->queue_guard * cost[i]
            && cost[i] < free_best + s->tolerance_ms * 1.001 + 0.001) {
            raised = raised || i == at;
            cost[i] = free_best + s->tolerance_ms * 1.001 + 0.001;
        }
    }
    return raised;
}

/*
 * queue_guard (0: off): a candidate whose slots are all taken, one more
 * request there waiting for a slot (its capacity said by the engine or
 * seen with a queue, not guessed), loses to one with a slot free whose
 * prediction is at most queue_guard times its own and whose answer takes
 * at most tolerance_decode_ms longer (ttft_decodes_near()): raised above
 * that one (and above tolerance_ms, so the tolerance moves nothing back).
 * A wait for a slot is the prediction that misses most (it rests on how
 * soon the answers there end, at a pace a busier machine slows), and a
 * fast replica the router keeps full tips into a queue that the others
 * would have drained (bench/routing/NOTES.md 59). queue_reserve (0: off):
 * a request that would take one of a candidate's last queue_reserve slots
 * (its capacity known as above) is guarded the same way, toward one that
 * would still have queue_reserve slots free after it: a replica kept full
 * to its last slot meets a burst with none, and a burst's first tokens
 * then queue behind answers that hold their slots to the end
 * (bench/routing/NOTES.md 63). True when the cheapest was raised.
 */
static bool
ttft_queue_guard(const struct ttft_state *s, const struct lg_route_info *req,
                 const struct lg_backend_view *const *c, size_t n, double *cost)
{
    bool raised = false;

    if (s->queue_guard <= 0 || n < 2) {
        return false;
    }
    /* the queues first, then the last slots toward the replicas with room
     * (a queue's pick is as without a reserve; a reserve only passes a pick
     * on to a replica that keeps one) */
    for (int k = 0; k < (s->queue_reserve > 0 ? 2 : 1); k++) {
        raised = ttft_guard_pass(s, req, c, n, cost, k ? s->queue_reserve : 0) || raised;
    }
    return raised;
}

/* Whether the host counted v's requests by class (LG_MODEL_F_BY_CLASS). */
static bool
ttft_by_class(const struct lg_backend_view *v)
{
    const struct lg_engine_model_view *m = v->model;

    return m != NULL
           && m->size >= offsetof(struct lg_engine_model_view, class_slot_wait_ms)
                             + sizeof(m->class_slot_wait_ms)
           && (m->flags & LG_MODEL_F_BY_CLASS);
}

/*
 * v as the request sees it where the engine serves by class and preempts:
 * ours there of its class and above are the load, the requests awaiting a
 * first token, the work ahead and the slot wait; a lower class's give way
 * to it (the steps still run them all: ttft_formula()'s step_load).
 */
static void
ttft_class_view(const struct ttft_state *s, const struct lg_backend_view *v,
                struct lg_backend_view *out)
{
    const struct lg_engine_model_view *m = v->model;

    *out = *v;
    out->inflight = (uint32_t)m->class_inflight;
    out->load = m->class_inflight + v->foreign;
    out->pending = (uint32_t)m->class_pending;
    out->pending_age_ms = m->class_pending_age_ms;
    out->work_ahead_ms = m->class_work_ahead_ms;
    out->slot_wait_ms = m->class_slot_wait_ms;
    if (s->lower_prefill_weight > 0
        && m->size >= offsetof(struct lg_engine_model_view, class_lower_prefill_ms)
                          + sizeof(m->class_lower_prefill_ms)) {
        /* a step in progress is not preempted: the lower classes' prefill
         * the engine may be running comes first */
        out->work_ahead_ms += s->lower_prefill_weight * m->class_lower_prefill_ms;
    }
}

#define TTFT_CLASS_STACK 16 /* candidates whose class views fit on the stack */

static void
ttft_score_views(const struct ttft_state *s, const struct lg_route_info *req,
                 const struct lg_backend_view *const *c, const double *step_load, size_t n,
                 double *cost, const char **why);

static void
ttft_score(void *state, const struct lg_route_info *req, const struct lg_backend_view *const *c,
           size_t n, double *cost, const char **why)
{
    const struct ttft_state *s = state;
    struct lg_backend_view stack[TTFT_CLASS_STACK], *cv;
    const struct lg_backend_view *stackp[TTFT_CLASS_STACK], **cp;
    double stack_load[TTFT_CLASS_STACK], *load;
    bool any = false;

    for (size_t i = 0; i < n && !any; i++) {
        any = ttft_by_class(c[i]);
    }
    if (!any) {
        /* no engine here preempts: nothing to copy (the common pick) */
        ttft_score_views(s, req, c, NULL, n, cost, why);
        return;
    }
    cv = n <= TTFT_CLASS_STACK ? stack : lg_xmalloc(n * sizeof(*cv));
    cp = n <= TTFT_CLASS_STACK ? stackp : lg_xmalloc(n * sizeof(*cp));
    load = n <= TTFT_CLASS_STACK ? stack_load : lg_xmalloc(n * sizeof(*load));
    for (size_t i = 0; i < n; i++) {
        load[i] = c[i]->load;
        if (ttft_by_class(c[i])) {
            ttft_class_view(s, c[i], &cv[i]);
            cp[i] = &cv[i];
        } else {
            cp[i] = c[i];
        }
    }
    ttft_score_views(s, req, cp, load, n, cost, why);
    if (n > TTFT_CLASS_STACK) {
        free(cv);
        free(cp);
        free(load);
    }
}

/* ttft_score() on the candidates as the request sees them; step_load[i]:
 * every request at c[i] (NULL: c[i]->load). */
static void
ttft_score_views(const struct ttft_state *s, const struct lg_route_info *req,
                 const struct lg_backend_view *const *c, const double *step_load, size_t n,
                 double *cost, const char **why)
{
    double min_itl = n > 0 ? c[0]->itl_ms : 0;
    enum ttft_est used, best_used = TTFT_EST_FORMULA;
    size_t best = 0;

    for (size_t i = 1; i < n; i++) {
        min_itl = LG_MIN(min_itl, c[i]->itl_ms);
    }
    for (size_t i = 0; i < n; i++) {
        cost[i] = ttft_predict(s, req, c[i], min_itl, step_load ? step_load[i] : c[i]->load,
                               &used);
        if (i == 0 || cost[i] < cost[best]) {
            best = i;
            best_used = used;
        }
    }
    /* the soonest first token by the replica's own measured terms: the
     * engine model has missed there lately (its candidate says so) */
    *why = best_used == TTFT_EST_MEASURED ? "lowest_measured_ttft" : "lowest_predicted_ttft";
    if (ttft_finish_guard(s, req, c, n, cost)) {
        *why = "lowest_ttft_ending_in_time";
    }
    if (ttft_queue_guard(s, req, c, n, cost)) {
        *why = "free_slot_over_queue";
    }
    if (s->tolerance_ms > 0 && n > 1 && ttft_tolerate(s, req, c, n, cost)) {
        *why = "least_loaded_near_lowest_ttft";
    }
}

static const struct lg_policy_ops ttft_ops = {
    .size = sizeof(struct lg_policy_ops),
    .wants = LG_POLICY_WANTS_MODEL,
    .model_version = LG_ENGINE_MODEL_VERSION,
    .create = ttft_create,
    .destroy = policy_free,
    .score = ttft_score,
};

static const struct lg_plugin_desc ttft_desc = {
    LG_PLUGIN_ABI_MAJOR, LG_PLUGIN_ABI_MINOR, LG_PLUGIN_POLICY, "ttft", "1", &ttft_ops,
};

/* ---- prefix_affinity and session_affinity -------------------------------- */

/*
 * Rendezvous (highest random weight) hashing: each candidate draws
 * -weight / ln(U(key, backend id)) and the highest owns the key, so adding
 * or removing a backend moves only its own share of keys. Bounded load
 * (consistent hashing with bounded loads, Mirrokni et al.): a candidate
 * whose load would exceed ceil(bound * its weighted fair share) + slack is
 * passed over for the next in hash order, so one hot prefix cannot pile
 * onto one replica.
 *
 * prefix_affinity also balances the keys themselves. Shared system prompts
 * are few (a dozen, not thousands), and hashing a dozen keys onto four
 * replicas gives some three and others six: the replica with six cannot
 * hold them all, and an LRU cache cycling through more prefixes than it
 * holds misses every time (measured: 63% hits where a partition that fits
 * gives over 90%). So the first request of a prefix assigns it an owner
 * (moved later only to level the counts: aff_rebalance): the first
 * candidate in hash order that owns fewer than ceil(key_bound * keys *
 * weight / total weight) of the live keys, keys counting the new one.
 * The assignment is kept in a small table (base/ttltable.h: `keys` entries, 4-way sets,
 * least recently seen evicted; a key unseen for `key_ttl_s` stops
 * counting) under a mutex taken once per request. A key whose owner is no
 * longer a candidate (removed, ejected) is reassigned on a first attempt.
 * A candidate in slow start (its ramp below another candidate's) is given
 * only the keys it is the hash's first for, and no overflow: it owns few
 * keys (none after a crash, its keys reassigned), so balancing would hand
 * it every new key, and the router's slow start (which thins its requests
 * after the stages, router_thin) would pass it all of their requests that
 * the ramp lets through: a flood the ramp cannot thin. So it gets the
 * hash's share of new keys and the ramp's share of their requests, then
 * catches up on keys within the load bound (and takes keys from owners
 * holding too many). With balance_keys 0 the owner is the hash's alone, which
 * several gateway replicas agree on without talking (with the table each
 * gateway balances the keys it sees, in the order it sees them; they agree
 * on most keys, not all). session_affinity keeps the plain hash: sessions
 * are many, and many keys spread evenly by hashing alone.
 *
 * Cost: 0 for the owner, and for every other candidate the prefill a warm
 * cache would have saved: the shared part of the prompt times the prefill
 * speed (learnt; the slowest candidate's, since the owner's own slope is
 * already lowered by its cache hits), times miss_factor. A miss costs more
 * than the request's own wait: the engine spends that prefill time on it
 * while the requests behind wait, and it evicts some other prefix, whose
 * next request misses in turn; without the factor, a loaded fleet drifts
 * into thrashing caches (measured: p90 TTFT 4.6x worse at factor 1 than 3
 * with 12 shared 20 KB prompts on 4 replicas). Composed with ttft, a
 * request leaves its warm replica only when the queue there costs more than
 * that. The default, 6, is 3 counted as ttft counts the work ahead (its
 * ahead_weight, 2): the prefill a miss adds is work ahead of the requests
 * behind it like any other; with 3, the doubled work ahead of the misses
 * that warm the caches at first sent requests away from their owners, whose
 * prefixes then evicted others (16 shared 8 KB prompts: p90 TTFT 118 ms
 * against 27 ms at 6 and at 4.5).
 */
#define AFF_MAX_CANDS  64
#define AFF_MAX_OWNERS 128

struct aff_owner {
    uint32_t id;
    uint32_t keys;
};

struct aff_table {
    pthread_mutex_t lock;
    struct lg_ttltable keys; /* value: the owner's backend id */
    uint64_t swept_ns;
    uint32_t live; /* keys seen within ttl (as of the last sweep, plus new ones) */
    size_t nowners;
    struct aff_owner owner[AFF_MAX_OWNERS];
};

struct aff_state {
    const struct lg_host_api *host;
    bool session;
    double bound;          /* load bound, as a multiple of the fair share */
    double ms_per_kib;     /* prefill speed; 0 = learnt */
    double min_ms_per_kib; /* floor of the learnt one */
    double shared;         /* share of the prompt assumed cached (prefix) */
    double min_ms;         /* least affinity cost (session) */
    double miss_factor;    /* a miss costs this many times the prefill it redoes */
    double slack;          /* requests over the bound always allowed (small loads) */
    int balance_keys;      /* 1 = balanced key table (prefix), 0 = hash only */
    double key_bound;      /* keys per candidate, as a multiple of the fair share */
    double keys;           /* table entries */
    double key_ttl_s;      /* a key unseen this long stops counting */
    double slots;          /* requests an engine runs at once, unless it showed otherwise */
    struct aff_table *table;
};

static void
aff_destroy(void *state)
{
    struct aff_state *s = state;

    if (s->table != NULL) {
        pthread_mutex_destroy(&s->table->lock);
        lg_ttltable_fini(&s->table->keys);
        free(s->table);
    }
    free(s);
}

/* The key table's options (the last four) are prefix_affinity's alone. */
static const struct policy_num aff_options[] = {
    { "bound", offsetof(struct aff_state, bound), 1, 100 },
    { "ms_per_kib", offsetof(struct aff_state, ms_per_kib), 0, 1e6 },
    { "min_ms_per_kib", offsetof(struct aff_state, min_ms_per_kib), 0, 1e6 },
    { "shared", offsetof(struct aff_state, shared), 0, 1 },
    { "min_ms", offsetof(struct aff_state, min_ms), 0, 1e7 },
    { "miss_factor", offsetof(struct aff_state, miss_factor), 0, 1000 },
    { "slack", offsetof(struct aff_state, slack), 0, 1e6 },
    { "slots", offsetof(struct aff_state, slots), 1, 1e6 },
    { "key_bound", offsetof(struct aff_state, key_bound), 1, 100 },
    { "keys", offsetof(struct aff_state, keys), 64, 1 << 20 },
    { "key_ttl_s", offsetof(struct aff_state, key_ttl_s), 1, 86400 },
};

static int
aff_create_common(const struct lg_host_api *host, struct lg_options *opts, void **state,
                  bool session)
{
    struct aff_state s = { .host = host,
                           .session = session,
                           .bound = 1.5,
                           .ms_per_kib = 0,
                           .min_ms_per_kib = 10,
                           .shared = session ? 1.0 : 0.75,
                           .min_ms = session ? 100 : 0,
                           .miss_factor = 6,
                           .slack = 2,
                           .balance_keys = session ? 0 : 1,
                           .key_bound = 1,
                           .keys = 4096,
                           .key_ttl_s = 120,
                           .slots = 16 };
    struct aff_state *out;
    int rc =
        policy_numbers(host, opts, &s, aff_options, LG_ARRAY_SIZE(aff_options) - (session ? 3 : 0));

    if (!session) {
        rc |= host->opt_bool(opts, "balance_keys", s.balance_keys, &s.balance_keys);
    }
    if (rc != 0) {
        return -1;
    }
    out = lg_xmalloc(sizeof(*out));
    *out = s;
    if (s.balance_keys) {
        struct aff_table *t = lg_xcalloc(1, sizeof(*t));

        lg_ttltable_init(&t->keys, (size_t)s.keys, (uint64_t)(s.key_ttl_s * 1e9));
        pthread_mutex_init(&t->lock, NULL);
        out->table = t;
    }
    *state = out;
    return 0;
}

static int
prefix_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
              size_t errlen)
{
    (void)err;
    (void)errlen;
    return aff_create_common(host, opts, state, false);
}

static int
session_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
               size_t errlen)
{
    (void)err;
    (void)errlen;
    return aff_create_common(host, opts, state, true);
}

static double
aff_hrw(uint64_t key, const struct lg_backend_view *v)
{
    uint64_t h = lg_mix64(key ^ lg_mix64((uint64_t)v->id * 0x9e3779b97f4a7c15ull));
    double u = ((double)(h >> 11) + 0.5) / 9007199254740992.0; /* (0, 1) */

    return -policy_weight(v) / log(u);
}

static struct aff_owner *
aff_owner_of(struct aff_table *t, uint32_t id, bool add)
{
    for (size_t i = 0; i < t->nowners; i++) {
        if (t->owner[i].id == id) {
            return &t->owner[i];
        }
    }
    if (!add || t->nowners == AFF_MAX_OWNERS) {
        return NULL;
    }
    t->owner[t->nowners] = (struct aff_owner){ .id = id, .keys = 0 };
    return &t->owner[t->nowners++];
}

static void
aff_count(struct aff_table *t, uint32_t id, int delta)
{
    struct aff_owner *o = aff_owner_of(t, id, delta > 0);

    if (o != NULL && (delta > 0 || o->keys > 0)) {
        o->keys += (uint32_t)delta;
        t->live += (uint32_t)delta;
    }
}

/* Once a second: drops keys past their ttl and recounts the live ones. */
static void
aff_sweep(struct aff_table *t, uint64_t now)
{
    if (now - t->swept_ns < 1000000000ull && t->swept_ns != 0) {
        return;
    }
    t->swept_ns = now;
    t->nowners = 0;
    t->live = 0;
    for (size_t i = 0; i < lg_ttltable_size(&t->keys); i++) {
        struct lg_ttl_entry *e = &t->keys.slot[i];

        if (lg_ttltable_expired(&t->keys, e, now)) {
            e->key = 0;
        }
        if (e->key != 0) {
            aff_count(t, e->value, +1);
        }
    }
}

static double
aff_have(struct aff_table *t, uint32_t id)
{
    const struct aff_owner *o = aff_owner_of(t, id, false);

    return o != NULL ? o->keys : 0;
}

/* A candidate's share of total keys: key_bound x its weighted fair share. */
static double
aff_share(const struct aff_state *s, const struct lg_backend_view *v, double total, double weights)
{
    return ceil(s->key_bound * total * policy_weight(v) / weights);
}

/*
 * Where a known key moves to, or -1. Keys are assigned once, so a replica
 * that joins (or comes back, its keys reassigned while it was out) would get
 * only new keys: a few shared prompts, all seen again and again, stay on the
 * others for good (16 on 3 of 4 replicas: 6, 6, 4, 0; more than a cache that
 * holds 5). So a key whose owner holds more than its share moves, at its next
 * request, to the first candidate in hash order that is under its share
 * with the key and at least 2 + share / 16 (rounded down) keys below the
 * owner: one key per request (one cache miss each) until the counts are
 * level within one, and no moves for the small drift of a large table. One
 * in slow start only as the hash's first, as for new keys.
 */
static ssize_t
aff_rebalance(const struct aff_state *s, struct aff_table *t,
              const struct lg_backend_view *const *c, size_t n, const size_t *order, double weights,
              double top_ramp, ssize_t owner)
{
    double live = t->live, have = aff_have(t, c[owner]->id);
    double share = aff_share(s, c[owner], live, weights);

    if (have <= share) {
        return -1;
    }
    for (size_t k = 0; k < n; k++) {
        ssize_t i = (ssize_t)order[k];
        double h;

        if (i == owner || (k > 0 && c[i]->ramp < top_ramp)) {
            continue;
        }
        h = aff_have(t, c[i]->id);
        if (h + 1 <= aff_share(s, c[i], live, weights) && have - h >= 2 + floor(share / 16)) {
            return i;
        }
    }
    return -1;
}

/*
 * The table's owner of key among the candidates (its index), assigning one
 * if the key is new or its owner is gone, moving it if its owner holds too
 * many (aff_rebalance). order[] is the hash order.
 */
static ssize_t
aff_table_owner(const struct aff_state *s, const struct lg_route_info *req,
                const struct lg_backend_view *const *c, size_t n, const size_t *order,
                double weights, double top_ramp)
{
    struct aff_table *t = s->table;
    uint64_t now = s->host->now_ns(), key = req->prefix_hash;
    struct lg_ttl_entry *e, *victim;
    ssize_t owner = -1;
    double total;

    pthread_mutex_lock(&t->lock);
    aff_sweep(t, now);
    e = lg_ttltable_find(&t->keys, key, &victim);
    if (e != NULL) {
        for (size_t i = 0; i < n && owner < 0; i++) {
            if (c[i]->id == e->value) {
                owner = (ssize_t)i;
            }
        }
        if (owner >= 0 || req->attempt > 1) {
            e->seen_ns = now;
            if (owner < 0) {
                owner = (ssize_t)order[0]; /* a retry does not move a key */
            } else if (req->attempt == 1) {
                ssize_t to = aff_rebalance(s, t, c, n, order, weights, top_ramp, owner);

                if (to >= 0) {
                    aff_count(t, e->value, -1);
                    e->value = c[to]->id;
                    aff_count(t, e->value, +1);
                    owner = to;
                }
            }
            goto unlock;
        }
        aff_count(t, e->value, -1); /* its owner is gone: reassign */
    }
    /* the first in hash order under its share of the keys, this one counted;
     * one in slow start only as the hash's first (below) */
    total = (double)t->live + 1;
    for (size_t k = 0; k < n && owner < 0; k++) {
        if (k > 0 && c[order[k]]->ramp < top_ramp) {
            continue;
        }
        if (aff_have(t, c[order[k]]->id) + 1 <= aff_share(s, c[order[k]], total, weights)) {
            owner = (ssize_t)order[k];
        }
    }
    if (owner < 0) {
        owner = (ssize_t)order[0];
    }
    if (e == NULL) {
        e = victim;
        if (e->key != 0) {
            aff_count(t, e->value, -1); /* every entry counts until evicted or swept */
        }
        e->key = key;
    }
    e->value = c[owner]->id;
    e->seen_ns = now;
    aff_count(t, e->value, +1);
unlock:
    pthread_mutex_unlock(&t->lock);
    return owner;
}

static void
aff_score(void *state, const struct lg_route_info *req, const struct lg_backend_view *const *c,
          size_t n, double *cost, const char **why)
{
    const struct aff_state *s = state;
    uint64_t key = s->session ? req->session_hash : req->prefix_hash;
    double h[AFF_MAX_CANDS], load = 1, weights = 0, slope = s->ms_per_kib, kib, saved;
    double top_ramp = 0; /* a candidate below it is in slow start beside fuller ones */
    size_t order[AFF_MAX_CANDS];
    ssize_t owner = -1, home;

    if (key == 0 || n == 0 || n > AFF_MAX_CANDS) {
        return; /* no key: no opinion (all costs stay 0) */
    }
    for (size_t i = 0; i < n; i++) {
        h[i] = aff_hrw(key, c[i]);
        load += c[i]->load;
        weights += policy_weight(c[i]);
        top_ramp = LG_MAX(top_ramp, c[i]->ramp);
        if (s->ms_per_kib <= 0) {
            slope = LG_MAX(slope, c[i]->ttft_ms_per_kib);
        }
        /* insertion sort into hash order, highest first */
        size_t k = i;
        while (k > 0 && h[order[k - 1]] < h[i]) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
    }
    home = s->table != NULL ? aff_table_owner(s, req, c, n, order, weights, top_ramp)
                            : (ssize_t)order[0];
    /* the home candidate, then the others in hash order, until one is under
     * its load bound; the slack keeps a lone request (or a scrape that still
     * counts a finished one) from moving a key when the fleet is nearly idle,
     * and a candidate with a free slot is never over: nothing waits there,
     * and moving would trade a queue that does not exist for a cache miss
     * (and an eviction) that does */
    for (size_t k = 0; k <= n && owner < 0; k++) {
        ssize_t i = k == 0 ? home : (ssize_t)order[k - 1];

        if (k > 0 && (i == home || c[i]->ramp < top_ramp)) {
            continue;
        }
        if (c[i]->load + 1 <= ceil(s->bound * load * policy_weight(c[i]) / weights) + s->slack
            || c[i]->load + 1 <= policy_slots(c[i], s->slots)) {
            owner = i;
        }
    }
    if (owner < 0) {
        owner = home; /* everyone is over: stay where the cache is */
    }
    if (s->ms_per_kib <= 0) {
        slope = LG_MAX(slope, s->min_ms_per_kib);
    }
    kib = LG_MAX((double)req->prefix_len, (double)req->prompt_bytes * s->shared) / 1024.0;
    saved = LG_MAX(s->min_ms, s->miss_factor * slope * kib);
    for (size_t i = 0; i < n; i++) {
        cost[i] = (ssize_t)i == owner ? 0 : saved;
    }
    if (s->session) {
        *why = owner == home ? "session_owner" : "session_owner_overflow";
    } else {
        *why = owner == home ? "prefix_owner" : "prefix_owner_overflow";
    }
}

static const struct lg_policy_ops prefix_ops = {
    .size = sizeof(struct lg_policy_ops),
    .create = prefix_create,
    .destroy = aff_destroy,
    .score = aff_score,
};

static const struct lg_plugin_desc prefix_desc = {
    LG_PLUGIN_ABI_MAJOR, LG_PLUGIN_ABI_MINOR, LG_PLUGIN_POLICY, "prefix_affinity", "1", &prefix_ops,
};

static const struct lg_policy_ops session_ops = {
    .size = sizeof(struct lg_policy_ops),
    .create = session_create,
    .destroy = aff_destroy,
    .score = aff_score,
};

static const struct lg_plugin_desc session_desc = {
    LG_PLUGIN_ABI_MAJOR, LG_PLUGIN_ABI_MINOR, LG_PLUGIN_POLICY, "session_affinity", "1",
    &session_ops,
};

/* ---- the table ---------------------------------------------------------- */

const struct lg_plugin_desc *const lg_builtin_policies[] = {
    &ttft_desc, &rr_desc, &lr_desc, &p2c_desc, &ll_desc, &prefix_desc, &session_desc,
};
const size_t lg_builtin_npolicies = LG_ARRAY_SIZE(lg_builtin_policies);
