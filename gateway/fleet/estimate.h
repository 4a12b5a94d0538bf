/*
 * estimate.h: the per-backend estimators behind latency-aware routing, as
 * pure functions on plain structs (no clocks, no locks, no backends), so the
 * math is unit-tested on its own. backend.c owns the instances, serialises
 * the writers and publishes copies to the readers.
 *
 * TTFT model. For one backend, the time from dispatch to first token when
 * nothing is queued ahead of the request ("service TTFT") is
 *
 *     ttft(x) = peak * (fixed + slope * x)          x = prompt KiB
 *
 * - fixed and slope come from a time-decayed weighted least-squares fit of
 *   the observed service TTFTs against x (half-life LG_EST_HALF_LIFE_S).
 *   Fitting both parts is what keeps a long prompt from making a healthy
 *   replica look slow: its long TTFT lands on the slope, not on the fixed
 *   part that short requests pay.
 * - The fit is regularised by LG_EST_PRIOR_WEIGHT pseudo-samples of a prior
 *   line (the fleet's median fixed and slope for the model), scaled by this
 *   backend's own slowness relative to that line. When samples stop, their
 *   weight decays and the estimate drifts back to the prior: a replica that
 *   was slow once is tried again (faster once it sits idle: backend_view.c,
 *   LG_EST_IDLE_S). A sample under LG_EST_FORGET_BELOW of the fit's
 *   prediction halves the old samples' weight (it recovered). The scaling keeps a
 *   replica that is 4x slower on short prompts from being assumed fast on
 *   long ones before it has seen one.
 * - peak >= 1 is a Peak-EWMA on the ratio observed / predicted: it jumps
 *   half-way up at once when a sample is slower than predicted and decays
 *   back to 1 with half-life LG_EST_PEAK_HALF_LIFE_S. A replica that
 *   suddenly slows down loses its share after one or two samples instead of
 *   a fit half-life; the fit then takes over and the peak fades.
 *
 * Decayed means (inter-token gap, slot hold time, error rate) use the same
 * decayed sums with a prior, read at any time without a writer.
 */
#ifndef LG_ESTIMATE_H
#define LG_ESTIMATE_H

#include "base/lg_core.h"

/* Half-life of TTFT samples in the fit: long enough to average the noise of
 * queueing, short enough that a recovered replica is re-learnt in < 30 s. */
#define LG_EST_HALF_LIFE_S 5.0
/* Weight of the prior line, in samples (split between x = 0 and x = LG_EST_PRIOR_X_KIB). */
#define LG_EST_PRIOR_WEIGHT 4.0
#define LG_EST_PRIOR_X_KIB  8.0
/* Peak-EWMA on the ratio: share of an upward step taken at once, half-life of its decay. */
#define LG_EST_PEAK_UP          0.5
#define LG_EST_PEAK_HALF_LIFE_S 5.0
#define LG_EST_PEAK_MAX         3.0 /* a ratio above counts as this much */
/* A replica idle (nothing in flight) without a sample for this long sees its
 * estimate fade this many times faster (backend_view.c: it gets tried again). */
#define LG_EST_IDLE_S       3
#define LG_EST_IDLE_SPEEDUP 5
/* A sample under this share of the fit's prediction halves the old samples' weight. */
#define LG_EST_FORGET_BELOW 0.5
/* Largest sample the fit takes, as a multiple of its prediction (a robust fit). */
#define LG_EST_FIT_MAX 4.0
/* A whole (not streamed) response's time teaches the TTFT fit only where
 * the decayed count of streams timed there lately (their gaps between
 * tokens) is under this: else streams' first tokens teach it (backend.c). */
#define LG_EST_WHOLE_STREAMS 1.0
/* Decayed means (inter-token gap, hold time, errors). */
#define LG_EST_MEAN_HALF_LIFE_S  5.0
#define LG_EST_MEAN_PRIOR_WEIGHT 4.0

/* The prior line for a model's backends (fleet medians), and fallbacks. */
struct lg_est_prior {
    double fixed_ms;   /* TTFT of an empty prompt */
    double ms_per_kib; /* added per KiB of prompt */
    double itl_ms;     /* inter-token gap */
    double hold_ms;    /* time a request holds an engine slot */
    double slots;      /* engine slots, where confirmed by a queue; 0 = none known */
    double prefill_per_step; /* prefill ms per KiB per ms of decode step, from the
                                backends that have prefilled enough; 0 = none yet */
    double late;       /* the fleet's lateness (lg_est_late): the least of its backends'
                          where two or more had first tokens lately and all came late;
                          else 0 */
};

/* Defaults before any backend of the model has answered. */
#define LG_EST_DEFAULT_FIXED_MS   50.0
#define LG_EST_DEFAULT_MS_PER_KIB 10.0
#define LG_EST_DEFAULT_ITL_MS     20.0
#define LG_EST_DEFAULT_HOLD_MS    1000.0

/*
 * TTFT fit state: decayed sums as of t_ns, and the peak factor as of
 * peak_t_ns. Plain doubles, copied whole to publish (backend.c).
 */
struct lg_est_ttft {
    double w;      /* sum of sample weights */
    double sx, sy; /* weighted sums of x (KiB) and y (ms) */
    double sxx, sxy;
    double sf;          /* weighted sum of the prior line at each sample's x */
    double peak;        /* >= 1 */
    uint64_t t_ns;      /* time the sums were last decayed to */
    uint64_t peak_t_ns; /* time peak was last set */
};

/* A decayed mean with a prior: value = (d*sy + k*prior) / (d*w + k). */
struct lg_est_mean {
    double w, sy;
    uint64_t t_ns;
};

/* How far either side of the samples' mean size the line's prior
 * pseudo-samples sit (below). */
#define LG_EST_LINE_PRIOR_SPREAD_KIB 1.0

/*
 * A decaying line, y = fixed + slope * x: the engine model's prefill (ms
 * for a prompt of x KiB, from first tokens less the model's wait), a fixed
 * part for the step that prefills (launch and scheduling costs, whatever the
 * prompt: 0 to 25 ms a step on the mismatch fleets) and a part per KiB.
 * Pulled toward a prior line by LG_EST_MEAN_PRIOR_WEIGHT pseudo-samples
 * centred on the samples' own mean x (they weigh as many samples whatever
 * the prompts' sizes: with pseudo-samples at 1 KiB, prompts of a quarter KiB
 * needed 60 samples to outweigh them, and a real engine's prefill, 170-1,340
 * ms per KiB against a prior of 10, was still far under after a run:
 * bench/routing/NOTES.md 47), half of them LG_EST_LINE_PRIOR_SPREAD_KIB
 * below it and half above: the level is the samples', the slope leans on
 * the prior's until the prompts seen spread over more than that. Prompts of
 * a narrow range tell their slope badly, and the slope is what carries a
 * prompt far longer than any seen: a replica that had seen a few prompts of
 * about 1 KiB read a noisy falling slope, kept flat, and took 32 KB prompts
 * for 45 ms of prefill (1.6 s on it), four in a row (bench/routing/NOTES.md
 * 51). Where the prompts seen do not vary, the prior's slope.
 */
struct lg_est_line {
    double n; /* decayed count of samples */
    double sx, sy, sxx, sxy;
    uint64_t t_ns;
};
void lg_est_line_add(struct lg_est_line *l, uint64_t now_ns, double x, double y,
                     double half_life_s);
/* Effective weight (decayed count) of the samples behind the line. */
double lg_est_line_weight(const struct lg_est_line *l, uint64_t now_ns, double half_life_s);
/* The line at now_ns, pulled toward prior_fixed + prior_slope * x; both
 * parts at least 0. */
void lg_est_line_read(const struct lg_est_line *l, uint64_t now_ns, double prior_fixed,
                      double prior_slope, double half_life_s, double *fixed, double *slope);
/* The samples' own slope, no prior (decay cancels out); 0 without two sizes. */
double lg_est_line_slope(const struct lg_est_line *l);

/*
 * An estimator's errors on one replica: decayed moments of e = log(observed
 * / predicted) first-token times, e clipped to +-log(LG_EST_ERR_MAX). The
 * bias (mean e, pulled toward 0 by LG_EST_MEAN_PRIOR_WEIGHT pseudo-samples)
 * calibrates the estimator there; the spread (rms of e about its mean) says
 * how far off it is even calibrated: where the engine model assumes what the
 * engine does not do (more slots than it has, a step that does not grow
 * with the batch), its errors spread wide while a cruder estimate from the
 * replica's own first tokens stays close.
 */
#define LG_EST_ERR_MAX 8.0
struct lg_est_err {
    double w, s, ss;
    uint64_t t_ns;
};
struct lg_est_err_value {
    double bias;   /* mean log error, shrunk toward 0 */
    double spread; /* rms of the log errors about their mean (0 without samples) */
    double weight; /* effective samples */
};
void lg_est_err_add(struct lg_est_err *e, uint64_t now_ns, double observed_ms, double predicted_ms,
                    double half_life_s);
void lg_est_err_read(const struct lg_est_err *e, uint64_t now_ns, double half_life_s,
                     struct lg_est_err_value *out);
/* The rms of the log errors (bias and spread together: how far off as it is). */
double lg_est_err_rms(const struct lg_est_err_value *v);

/*
 * The measured terms: a replica's first tokens by the load they were sent
 * into (requests there then, ours and others', in bins of one request up
 * to LG_EST_CURVE_BINS - 1), each less its prompt's prefill: decayed means
 * per bin. Read at a load, a curve through the bins seen (non-decreasing:
 * more requests there never make a first token sooner), linear between
 * them, flat below the lowest, and above the highest continued at the
 * slope of its last two bins (0 with one). No model of slots or steps:
 * the queueing an engine adds at each load, as it did lately.
 */
#define LG_EST_CURVE_BINS      24
#define LG_EST_CURVE_MIN_W     0.5 /* a bin with less (decayed) weight is not seen */
#define LG_EST_CURVE_HALF_LIFE_S 20.0
struct lg_est_curve {
    double w[LG_EST_CURVE_BINS];
    double sy[LG_EST_CURVE_BINS];
    uint64_t t_ns;
};
void lg_est_curve_add(struct lg_est_curve *c, uint64_t now_ns, double load, double ms);
/* The curve at load (ms), or -1 without a bin seen; *beyond (when not
 * NULL): how far load lies above the highest bin seen (0 within). */
double lg_est_curve_read(const struct lg_est_curve *c, uint64_t now_ns, double load,
                         double *beyond);

/*
 * An estimator's bias by the load its requests were sent into: the mean log
 * error per bin of one request (as the curve's bins), each read shrunk
 * toward the estimator's overall bias by LG_EST_BIAS_PRIOR pseudo-samples.
 * The engine model is calibrated by it at the load of each pick: a model
 * that assumes more slots than the engine has is right at low loads and
 * far too soon beyond the real slots, where one overall factor is neither.
 */
#define LG_EST_BIAS_PRIOR 2.0
struct lg_est_bias {
    double w[LG_EST_CURVE_BINS];
    double s[LG_EST_CURVE_BINS];
    uint64_t t_ns;
};
void lg_est_bias_add(struct lg_est_bias *b, uint64_t now_ns, double load, double observed_ms,
                     double predicted_ms, double half_life_s);
double lg_est_bias_read(const struct lg_est_bias *b, uint64_t now_ns, double load, double overall,
                        double half_life_s);

/*
 * Lateness: how much later than predicted (as used, calibration included)
 * a replica's first tokens come lately, as a log factor >= 0 that the
 * pick's calibration multiplies in. The calibration by load learns over
 * tens of seconds (LG_EST_CURVE_HALF_LIFE_S), which a fleet that turns
 * slower than the router learnt pays in queues; this integrates each first
 * token's log(observed / used) with gain LG_EST_LATE_GAIN (a dozen late
 * first tokens raise it within a second), never below 0 nor above
 * log(LG_EST_LATE_MAX), and fades with half-life LG_EST_LATE_HALF_LIFE_S as
 * the slow calibration catches up (then first tokens come sooner than used,
 * and each one lowers it).
 */
#define LG_EST_LATE_GAIN        0.3
#define LG_EST_LATE_MAX         4.0
#define LG_EST_LATE_HALF_LIFE_S 5.0
struct lg_est_late {
    double v; /* log factor as of t_ns */
    uint64_t t_ns;
};
void lg_est_late_add(struct lg_est_late *l, uint64_t now_ns, double observed_ms, double used_ms);
double lg_est_late_read(const struct lg_est_late *l, uint64_t now_ns);

/* The TTFT model read at a given time. */
struct lg_est_value {
    double fixed_ms;   /* peak included */
    double ms_per_kib; /* peak included */
    double peak;
    double samples; /* effective weight of real samples behind the fit */
};

void lg_est_ttft_init(struct lg_est_ttft *e);

/* Reads the model at now_ns, with the sums decayed toward the prior. */
void lg_est_ttft_read(const struct lg_est_ttft *e, uint64_t now_ns, const struct lg_est_prior *p,
                      struct lg_est_value *out);

/* Predicted service TTFT (ms) for a prompt of x KiB. */
double lg_est_ttft_predict(const struct lg_est_value *v, double kib);

/*
 * Adds one observation: a prompt of `kib` KiB got its first token `ms`
 * after dispatch, queueing excluded. Updates the peak from the ratio to the
 * prediction before the sample, then the fit.
 */
void lg_est_ttft_add(struct lg_est_ttft *e, uint64_t now_ns, const struct lg_est_prior *p,
                     double kib, double ms);

void lg_est_mean_init(struct lg_est_mean *m);
double lg_est_mean_read(const struct lg_est_mean *m, uint64_t now_ns, double prior,
                        double half_life_s);
/* Effective weight of the samples behind the mean at now_ns. */
double lg_est_mean_weight(const struct lg_est_mean *m, uint64_t now_ns, double half_life_s);
void lg_est_mean_add(struct lg_est_mean *m, uint64_t now_ns, double v, double half_life_s);
/* The samples' own mean, the recent ones weighing more, however old the
 * last (lg_est_mean_read() leans back to its prior as they age); -1 when
 * there are none. */
double lg_est_mean_own(const struct lg_est_mean *m);

/* exp(-dt * ln2 / half_life): the weight left after dt_ns. */
double lg_est_decay(uint64_t dt_ns, double half_life_s);

/*
 * Engine load blending. A scrape of the engine's queue says how many
 * requests it held (running + waiting) `age_ns` ago, of which
 * `inflight_at_scrape` were ours. Other clients' share is trusted fully up
 * to 2 scrape intervals old, then faded linearly to nothing at 4 intervals:
 * a stale sample never keeps steering traffic away (fail open), and a
 * missing one counts as no foreign load. Our own in-flight count is exact
 * and immediate, so picks made since the scrape are never forgotten.
 */
double lg_est_foreign_load(int32_t waiting, int32_t running, uint32_t inflight_at_scrape,
                           uint64_t age_ns, uint64_t interval_ns);

/*
 * Expected queueing before a new request starts on an engine that runs
 * `capacity` requests at once, each holding its slot `hold_ms` on average,
 * with `load` requests already there: the new one waits for
 * load + 1 - capacity departures. Departures come hold/capacity apart; the
 * first one comes hold/(capacity+1) after an arbitrary moment when the
 * requests running are of all ages, later when they are younger than that:
 * `mean_age_ms` (< 0: unknown) is the mean age of the requests there, and
 * each millisecond it falls short of hold/2 (a batch refilled at once after
 * a burst) delays the first departure by as much.
 */
double lg_est_queue_wait_ms(double load, double capacity, double hold_ms, double mean_age_ms);
/* The same wait, when known from the requests' predicted ends (known_ms > 0:
 * lg_backend_view.slot_wait_ms) taken as is, else the formula above. */
double lg_est_slot_wait_ms(double known_ms, double load, double capacity, double hold_ms,
                           double mean_age_ms);

/*
 * The engine model run forward (continuous batching, as vLLM, SGLang and
 * llmsim schedule): each step yields one token to every running sequence
 * and lasts step_ms, plus prefill_ms per prompt token admitted into it; at
 * each step's start the line is admitted in order while fewer than `slots`
 * run; a sequence leaves after its last token. From `left` (tokens still to
 * come of each running sequence, one of them from the step in progress,
 * which has resid_ms left) and `queue` (awaiting a first token, oldest
 * first: the head that found a slot free is taken as admitted into the step
 * in progress, and one past due for its first token as having half its own
 * step and prefill left; where begun_ms >= 0, the step in progress began
 * that long ago, so it admitted those of the line sent before then while
 * slots were free, and lasts step_ms plus their prefill, unless it has
 * already run past that: then where it stands is unknown, as when begun_ms
 * < 0), returns the ms until a request joining the end of the line
 * would get its first token, its own prefill left out (add prefill_ms * its
 * tokens). *joined (when not NULL) is how many of the line are admitted into
 * the same step as the new one: its prefill delays their first tokens.
 * Sequences beyond LG_EST_ENGINE_MAX are not seen. step_ms is the step of
 * the batch now (the nleft running); a step of more sequences lasts
 * step_per_seq more for each (of fewer, less), as an engine's step grows
 * with its batch (llama.cpp on a CPU: about a one-sequence step for each).
 * A step that prefills anything costs prefill_fixed_ms more, however many
 * prompts it takes (launch and scheduling costs); the new one's step always
 * does, so the ms returned hold that part of its own prefill. Where
 * `chunk` >= 1 (chunked prefill), the prompts a step admits are prefilled
 * over as many steps as lg_est_chunks_ms() counts for their tokens together
 * beside the sequences decoding there, and each step after the first delays
 * what comes after them (the new one's own further steps are the caller's:
 * lg_est_chunks_ms() for its prompt).
 */
#define LG_EST_ENGINE_MAX 256
/* The engine slots assumed where a replica was never seen full (vLLM's and
 * SGLang's batch limits are larger; 16 is what a small GPU runs at once):
 * ttft's `slots` default, and the engine model's least guess. */
#define LG_EST_ASSUMED_SLOTS 16
/* Prompt tokens in a KiB of prompt text (about 4 bytes a token). */
#define LG_EST_TOKENS_PER_KIB 256.0

/*
 * Chunked prefill: an engine whose step carries at most `chunk` tokens,
 * one for each of the `decoding` sequences first, prefills a prompt of
 * `kib` over ceil(tokens / (chunk - decoding)) steps (at least a token a
 * step). What the steps after the first cost: each a step of the batch
 * (step_ms) and the fixed part of a step that prefills (its tokens are in
 * the prefill per KiB already). 0 where chunk < 1 (a prompt in one step).
 */
double lg_est_chunks_ms(double chunk, double decoding, double step_ms, double prefill_fixed_ms,
                        double kib);
struct lg_est_queued {
    uint32_t prompt_tokens; /* to prefill */
    uint32_t max_tokens;    /* tokens it will generate (at least 1) */
    double age_ms;          /* since it was sent */
};
/* What the engine holds: the running sequences and the line (borrowed). */
struct lg_est_batch {
    const uint32_t *left; /* tokens still to come of each running sequence */
    size_t nleft;
    const struct lg_est_queued *queue; /* awaiting a first token, oldest first */
    size_t nqueue;
};
/* How the engine runs it, and where its step in progress stands. */
struct lg_est_steps {
    unsigned slots;          /* sequences it runs at once */
    double step_ms;          /* a step of the batch now (nleft running) */
    double step_per_seq;     /* what a sequence more adds to a step (less: fewer) */
    double prefill_ms;       /* per prompt token admitted into a step */
    double prefill_fixed_ms; /* per step that prefills anything */
    double resid_ms;         /* left of the step in progress */
    double begun_ms;         /* since the step in progress began; < 0: unknown */
    double chunk;            /* tokens a step carries at most, a token for each
                              * sequence decoding first (lg_est_chunks_ms());
                              * 0: a step admits any prompt whole */
};
double lg_est_engine_run(const struct lg_est_batch *batch, const struct lg_est_steps *steps,
                         unsigned *joined);

#endif /* LG_ESTIMATE_H */
