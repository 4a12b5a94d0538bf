/*
 * estimate.c: TTFT fit, Peak-EWMA factor, decayed means and the load and
 * queueing formulas (see estimate.h for the model).
 *
 * Owns nothing: every function works on structs its caller owns and
 * serialises. Readers never modify a struct: decay is applied on the fly to
 * a copy, so a published estimate can be read by any thread at any time.
 */
#include "fleet/estimate.h"

#include <math.h>
#include <sys/types.h>

/*
 * 2^x for x <= 0, to about 1e-10 relative: 2^i exactly from the exponent
 * bits, 2^f (f in [0, 1)) as sqrt(2) * e^(ln2 (f - 1/2)) by its Taylor
 * series to the 8th power. A request reads and updates about ten decayed
 * estimates; libm's exp() cost them 650 instructions of a request.
 */
static double
est_exp2_neg(double x)
{
    union {
        uint64_t u;
        double d;
    } scale;
    double f, y, p;
    int i;

    if (!(x > -1022.0)) {
        return 0; /* and NaN */
    }
    i = (int)x; /* toward zero: one above floor for a negative fraction */
    if ((double)i > x) {
        i--;
    }
    f = x - (double)i;
    y = M_LN2 * (f - 0.5);
    p = 1.0 + y * (1.0 + y * (1.0 / 2 + y * (1.0 / 6 + y * (1.0 / 24 + y * (1.0 / 120
        + y * (1.0 / 720 + y * (1.0 / 5040 + y * (1.0 / 40320))))))));
    scale.u = (uint64_t)(i + 1023) << 52;
    return M_SQRT2 * p * scale.d;
}

double
lg_est_decay(uint64_t dt_ns, double half_life_s)
{
    if (half_life_s <= 0) {
        return 0;
    }
    if (dt_ns == 0) {
        return 1;
    }
    return est_exp2_neg(-(double)dt_ns / 1e9 / half_life_s);
}

static double
est_decay_since(uint64_t t_ns, uint64_t now_ns, double half_life_s)
{
    return now_ns > t_ns ? lg_est_decay(now_ns - t_ns, half_life_s) : 1.0;
}

void
lg_est_ttft_init(struct lg_est_ttft *e)
{
    *e = (struct lg_est_ttft){ .peak = 1.0 };
}

static double
est_prior_line(const struct lg_est_prior *p, double kib)
{
    return p->fixed_ms + p->ms_per_kib * kib;
}

/* A fitted line (*a fixed, *b slope; sums W, Y, XX, XY) kept to what a
 * time can be: a falling slope becomes flat at the mean, a negative fixed
 * part a line through the origin (slope origin_slope where no x was seen). */
static void
est_line_clamp(double W, double Y, double XX, double XY, double origin_slope, double *a,
               double *b)
{
    if (*b < 0) {
        *b = 0;
        *a = Y / W;
    }
    if (*a < 0) {
        *a = 0;
        *b = XX > 0 ? XY / XX : origin_slope;
    }
}

/* Solves the fit at now_ns (peak not applied). */
static void
est_ttft_fit(const struct lg_est_ttft *e, uint64_t now_ns, const struct lg_est_prior *p,
             double *fixed, double *slope, double *weight)
{
    const double k = LG_EST_PRIOR_WEIGHT, h = k / 2, xp = LG_EST_PRIOR_X_KIB;
    double d = est_decay_since(e->t_ns, now_ns, LG_EST_HALF_LIFE_S);
    double fref = est_prior_line(p, 1.0);
    /* this backend's slowness relative to the prior line, itself pulled to 1 */
    double s = (d * e->sy + k * fref) / (d * e->sf + k * fref);
    double y0, y1, W, X, Y, XX, XY, det, a, b;

    if (!(s > 0) || !isfinite(s)) {
        s = 1.0;
    }
    y0 = s * p->fixed_ms;
    y1 = s * est_prior_line(p, xp);
    W = d * e->w + k;
    X = d * e->sx + h * xp;
    Y = d * e->sy + h * y0 + h * y1;
    XX = d * e->sxx + h * xp * xp;
    XY = d * e->sxy + h * xp * y1;
    det = W * XX - X * X;
    if (det > 1e-9 * W * XX) {
        b = (W * XY - X * Y) / det;
        a = (Y - b * X) / W;
    } else {
        b = s * p->ms_per_kib;
        a = (Y - b * X) / W;
    }
    est_line_clamp(W, Y, XX, XY, 0, &a, &b);
    *fixed = a;
    *slope = b;
    *weight = d * e->w;
}

static double
est_peak_at(const struct lg_est_ttft *e, uint64_t now_ns)
{
    double d = est_decay_since(e->peak_t_ns, now_ns, LG_EST_PEAK_HALF_LIFE_S);

    return 1.0 + (e->peak - 1.0) * d;
}

void
lg_est_ttft_read(const struct lg_est_ttft *e, uint64_t now_ns, const struct lg_est_prior *p,
                 struct lg_est_value *out)
{
    double a, b, w, peak = est_peak_at(e, now_ns);

    est_ttft_fit(e, now_ns, p, &a, &b, &w);
    out->fixed_ms = a * peak;
    out->ms_per_kib = b * peak;
    out->peak = peak;
    out->samples = w;
}

double
lg_est_ttft_predict(const struct lg_est_value *v, double kib)
{
    return v->fixed_ms + v->ms_per_kib * (kib > 0 ? kib : 0);
}

void
lg_est_ttft_add(struct lg_est_ttft *e, uint64_t now_ns, const struct lg_est_prior *p, double kib,
                double ms)
{
    double a, b, w, pred, ratio, peak, d, forget;

    if (!(kib >= 0) || !isfinite(kib)) {
        kib = 0;
    }
    if (!(ms >= 0) || !isfinite(ms)) {
        return;
    }
    est_ttft_fit(e, now_ns, p, &a, &b, &w);
    pred = a + b * kib;
    ratio = ms / (pred > 0.1 ? pred : 0.1);
    /* far faster than the fit: the replica changed (it recovered); what
     * it did before counts half as much from now on */
    forget = ratio < LG_EST_FORGET_BELOW && e->w > 0 ? 0.5 : 1.0;
    if (ratio > LG_EST_PEAK_MAX) {
        ratio = LG_EST_PEAK_MAX;
    }
    /*
     * A surprise on a long prompt is more likely a slope the fit has not
     * learnt yet than a slower replica: the peak only takes the share of the
     * surprise that falls on the fixed part, which short requests pin down.
     * The fit learns the rest.
     */
    if (pred > 0.1) {
        ratio = 1.0 + (ratio - 1.0) * (a / pred);
    }
    peak = est_peak_at(e, now_ns);
    if (ratio > peak) {
        peak += LG_EST_PEAK_UP * (ratio - peak); /* fast up */
    } else {
        peak += 0.1 * (ratio - peak); /* slow down, on top of the decay */
    }
    e->peak = peak < 1.0 || forget < 1.0 ? 1.0 : peak;
    e->peak_t_ns = now_ns;

    /*
     * The fit takes a sample at most LG_EST_FIT_MAX times its prediction:
     * a lasting change still moves it that much per sample (and the peak
     * covers it meanwhile), but one request that got stuck behind
     * something the model does not see (another's long prefill in the same
     * engine step) cannot make an idle replica look 30x slower for a fit
     * half-life.
     */
    if (ms > LG_EST_FIT_MAX * pred + 1.0) {
        ms = LG_EST_FIT_MAX * pred + 1.0;
    }

    d = forget * est_decay_since(e->t_ns, now_ns, LG_EST_HALF_LIFE_S);
    e->w = e->w * d + 1;
    e->sx = e->sx * d + kib;
    e->sy = e->sy * d + ms;
    e->sxx = e->sxx * d + kib * kib;
    e->sxy = e->sxy * d + kib * ms;
    e->sf = e->sf * d + est_prior_line(p, kib);
    if (now_ns > e->t_ns) {
        e->t_ns = now_ns;
    }
}

void
lg_est_mean_init(struct lg_est_mean *m)
{
    *m = (struct lg_est_mean){ 0 };
}

double
lg_est_mean_weight(const struct lg_est_mean *m, uint64_t now_ns, double half_life_s)
{
    return m->w * est_decay_since(m->t_ns, now_ns, half_life_s);
}

double
lg_est_mean_read(const struct lg_est_mean *m, uint64_t now_ns, double prior, double half_life_s)
{
    double d = est_decay_since(m->t_ns, now_ns, half_life_s);
    const double k = LG_EST_MEAN_PRIOR_WEIGHT;

    return (d * m->sy + k * prior) / (d * m->w + k);
}

double
lg_est_mean_own(const struct lg_est_mean *m)
{
    return m->w > 0 ? m->sy / m->w : -1; /* the decay since cancels out */
}

void
lg_est_mean_add(struct lg_est_mean *m, uint64_t now_ns, double v, double half_life_s)
{
    double d = est_decay_since(m->t_ns, now_ns, half_life_s);

    if (!isfinite(v)) {
        return;
    }
    m->w = m->w * d + 1;
    m->sy = m->sy * d + v;
    if (now_ns > m->t_ns) {
        m->t_ns = now_ns;
    }
}

void
lg_est_line_add(struct lg_est_line *l, uint64_t now_ns, double x, double y, double half_life_s)
{
    double d = est_decay_since(l->t_ns, now_ns, half_life_s);

    if (!(x >= 0) || !isfinite(x) || !isfinite(y)) {
        return;
    }
    l->n = l->n * d + 1;
    l->sx = l->sx * d + x;
    l->sy = l->sy * d + y;
    l->sxx = l->sxx * d + x * x;
    l->sxy = l->sxy * d + x * y;
    if (now_ns > l->t_ns) {
        l->t_ns = now_ns;
    }
}

double
lg_est_line_weight(const struct lg_est_line *l, uint64_t now_ns, double half_life_s)
{
    return est_decay_since(l->t_ns, now_ns, half_life_s) * l->n;
}

double
lg_est_line_slope(const struct lg_est_line *l)
{
    double det = l->n * l->sxx - l->sx * l->sx;

    return l->n > 0 && det > 1e-9 * l->n * l->sxx ? (l->n * l->sxy - l->sx * l->sy) / det : 0;
}

void
lg_est_line_read(const struct lg_est_line *l, uint64_t now_ns, double prior_fixed,
                 double prior_slope, double half_life_s, double *fixed, double *slope)
{
    double d = est_decay_since(l->t_ns, now_ns, half_life_s);
    const double k = LG_EST_MEAN_PRIOR_WEIGHT, dx = LG_EST_LINE_PRIOR_SPREAD_KIB;
    double xm = l->n > 0 ? l->sx / l->n : 1.0; /* the pseudo-samples' mean x */
    double ym = prior_fixed + prior_slope * xm;
    /* half of them at xm - dx, half at xm + dx, on the prior line */
    double W = d * l->n + k, X = d * l->sx + k * xm, Y = d * l->sy + k * ym;
    double XX = d * l->sxx + k * (xm * xm + dx * dx);
    double XY = d * l->sxy + k * (xm * ym + dx * dx * prior_slope);
    double det = W * XX - X * X, a, b;

    if (det > 1e-6 * W * XX) {
        b = (W * XY - X * Y) / det;
    } else {
        b = prior_slope; /* one prompt size seen: no slope to tell */
    }
    a = (Y - b * X) / W;
    est_line_clamp(W, Y, XX, XY, prior_slope, &a, &b);
    *fixed = a;
    *slope = b;
}

void
lg_est_err_add(struct lg_est_err *e, uint64_t now_ns, double observed_ms, double predicted_ms,
               double half_life_s)
{
    double d = est_decay_since(e->t_ns, now_ns, half_life_s), x;

    if (!(observed_ms > 0) || !(predicted_ms > 0) || !isfinite(observed_ms)
        || !isfinite(predicted_ms)) {
        return;
    }
    x = LG_MAX(-log(LG_EST_ERR_MAX), LG_MIN(log(observed_ms / predicted_ms), log(LG_EST_ERR_MAX)));
    e->w = e->w * d + 1;
    e->s = e->s * d + x;
    e->ss = e->ss * d + x * x;
    if (now_ns > e->t_ns) {
        e->t_ns = now_ns;
    }
}

void
lg_est_err_read(const struct lg_est_err *e, uint64_t now_ns, double half_life_s,
                struct lg_est_err_value *out)
{
    double d = est_decay_since(e->t_ns, now_ns, half_life_s), var;

    out->weight = d * e->w;
    out->bias = d * e->s / (d * e->w + LG_EST_MEAN_PRIOR_WEIGHT);
    if (!(e->w > 0)) {
        out->spread = 0;
        return;
    }
    /* decay cancels out of the moments */
    var = e->ss / e->w - (e->s / e->w) * (e->s / e->w);
    out->spread = var > 0 ? sqrt(var) : 0;
}

double
lg_est_err_rms(const struct lg_est_err_value *v)
{
    return sqrt(v->spread * v->spread + v->bias * v->bias);
}

static size_t
est_curve_bin(double load)
{
    if (!(load > 0)) {
        return 0;
    }
    return load >= LG_EST_CURVE_BINS - 1 ? LG_EST_CURVE_BINS - 1 : (size_t)(load + 0.5);
}

/* One sample v into the bin of load: the bins' weights w and sums s decayed
 * since *t_ns first (the curve's and the bias's shared shape). */
static void
est_bins_add(double *w, double *s, uint64_t *t_ns, uint64_t now_ns, double half_life_s,
             double load, double v)
{
    double d = est_decay_since(*t_ns, now_ns, half_life_s);
    size_t k = est_curve_bin(load);

    if (d < 1) {
        for (size_t i = 0; i < LG_EST_CURVE_BINS; i++) {
            w[i] *= d;
            s[i] *= d;
        }
    }
    w[k] += 1;
    s[k] += v;
    if (now_ns > *t_ns) {
        *t_ns = now_ns;
    }
}

void
lg_est_curve_add(struct lg_est_curve *c, uint64_t now_ns, double load, double ms)
{
    if (!(ms >= 0) || !isfinite(ms)) {
        return;
    }
    est_bins_add(c->w, c->sy, &c->t_ns, now_ns, LG_EST_CURVE_HALF_LIFE_S, load, ms);
}

double
lg_est_curve_read(const struct lg_est_curve *c, uint64_t now_ns, double load, double *beyond)
{
    double d = est_decay_since(c->t_ns, now_ns, LG_EST_CURVE_HALF_LIFE_S);
    double x = load > 0 ? LG_MIN(load, LG_EST_CURVE_BINS - 1.0) : 0, run = 0;
    double lo_v = -1, hi_v = -1, prev_v = -1;
    ssize_t lo = -1, hi = -1, prev = -1;

    if (beyond != NULL) {
        *beyond = 0;
    }
    /* the bins seen, made non-decreasing as they go: the bin at or below x
     * (lo) and the first above it (hi); the last two seen for the slope */
    for (size_t i = 0; i < LG_EST_CURVE_BINS; i++) {
        double v;

        if (!(d * c->w[i] >= LG_EST_CURVE_MIN_W)) {
            continue;
        }
        v = LG_MAX(c->sy[i] / c->w[i], run);
        run = v;
        if ((double)i <= x) {
            prev = lo;
            prev_v = lo_v;
            lo = (ssize_t)i;
            lo_v = v;
        } else {
            hi = (ssize_t)i; /* the bins after it change nothing read */
            hi_v = v;
            break;
        }
    }
    if (lo < 0 && hi < 0) {
        return -1;
    }
    if (lo < 0) {
        return hi_v; /* below the lowest seen: flat */
    }
    if (hi >= 0) {
        return lo_v + (hi_v - lo_v) * (x - (double)lo) / (double)(hi - lo);
    }
    /* above the highest seen */
    if (beyond != NULL) {
        *beyond = x - (double)lo;
    }
    if (prev >= 0) {
        return lo_v + (lo_v - prev_v) / (double)(lo - prev) * (x - (double)lo);
    }
    return lo_v;
}

void
lg_est_bias_add(struct lg_est_bias *b, uint64_t now_ns, double load, double observed_ms,
                double predicted_ms, double half_life_s)
{
    if (!(observed_ms > 0) || !(predicted_ms > 0) || !isfinite(observed_ms)
        || !isfinite(predicted_ms) || !(load >= 0)) {
        return;
    }
    est_bins_add(b->w, b->s, &b->t_ns, now_ns, half_life_s, load,
                 LG_MAX(-log(LG_EST_ERR_MAX),
                        LG_MIN(log(observed_ms / predicted_ms), log(LG_EST_ERR_MAX))));
}

double
lg_est_bias_read(const struct lg_est_bias *b, uint64_t now_ns, double load, double overall,
                 double half_life_s)
{
    double d = est_decay_since(b->t_ns, now_ns, half_life_s);
    size_t k = est_curve_bin(load);

    return (d * b->s[k] + LG_EST_BIAS_PRIOR * overall) / (d * b->w[k] + LG_EST_BIAS_PRIOR);
}

void
lg_est_late_add(struct lg_est_late *l, uint64_t now_ns, double observed_ms, double used_ms)
{
    double r;

    if (!(observed_ms > 0) || !(used_ms > 0) || !isfinite(observed_ms) || !isfinite(used_ms)) {
        return;
    }
    r = LG_MAX(-log(LG_EST_ERR_MAX), LG_MIN(log(observed_ms / used_ms), log(LG_EST_ERR_MAX)));
    l->v = LG_MIN(LG_MAX(lg_est_late_read(l, now_ns) + LG_EST_LATE_GAIN * r, 0.0),
                  log(LG_EST_LATE_MAX));
    l->t_ns = now_ns;
}

double
lg_est_late_read(const struct lg_est_late *l, uint64_t now_ns)
{
    return l->t_ns == 0 ? 0.0 : l->v * est_decay_since(l->t_ns, now_ns, LG_EST_LATE_HALF_LIFE_S);
}

double
lg_est_chunks_ms(double chunk, double decoding, double step_ms, double prefill_fixed_ms, double kib)
{
    double room, steps;

    if (!(chunk >= 1) || !(kib > 0) || !(step_ms >= 0)) {
        return 0;
    }
    room = LG_MAX(chunk - LG_MAX(decoding, 0.0), 1.0);
    steps = ceil(kib * LG_EST_TOKENS_PER_KIB / room);
    return steps > 1 ? (steps - 1) * (step_ms + LG_MAX(prefill_fixed_ms, 0.0)) : 0;
}

double
lg_est_foreign_load(int32_t waiting, int32_t running, uint32_t inflight_at_scrape, uint64_t age_ns,
                    uint64_t interval_ns)
{
    double total = 0, trust;

    if (interval_ns == 0 || age_ns == UINT64_MAX || (waiting < 0 && running < 0)) {
        return 0;
    }
    if (age_ns <= 2 * interval_ns) {
        trust = 1.0;
    } else if (age_ns >= 4 * interval_ns) {
        return 0;
    } else {
        trust = (double)(4 * interval_ns - age_ns) / (double)(2 * interval_ns);
    }
    total += waiting > 0 ? waiting : 0;
    total += running > 0 ? running : 0;
    total -= inflight_at_scrape;
    return total > 0 ? total * trust : 0;
}

double
lg_est_queue_wait_ms(double load, double capacity, double hold_ms, double mean_age_ms)
{
    double excess, first;

    if (capacity < 1) {
        capacity = 1;
    }
    excess = load + 1 - capacity;
    if (excess <= 0 || hold_ms <= 0) {
        return 0;
    }
    first = hold_ms / (capacity + 1);
    if (mean_age_ms >= 0 && mean_age_ms < hold_ms / 2) {
        first += hold_ms / 2 - mean_age_ms;
    }
    if (excess < 1) {
        first *= excess; /* a fraction of a request ahead (foreign load) */
    }
    return first + (excess > 1 ? (excess - 1) * hold_ms / capacity : 0);
}

double
lg_est_slot_wait_ms(double known_ms, double load, double capacity, double hold_ms,
                    double mean_age_ms)
{
    return known_ms > 0 ? known_ms : lg_est_queue_wait_ms(load, capacity, hold_ms, mean_age_ms);
}

/* A step of `batch` sequences, from one of `batch0` that lasted step_ms and
 * what each sequence adds; at least a quarter of step_ms. */
static double
est_step_at(double step_ms, double per_seq, size_t batch, size_t batch0)
{
    return LG_MAX(step_ms + per_seq * ((double)batch - (double)batch0), 0.25 * step_ms);
}

/* A chunked prefill's further steps for `tokens` admitted together beside
 * `decoding` sequences (lg_est_chunks_ms(); 0 unchunked). */
static double
est_chunks_tokens_ms(const struct lg_est_steps *steps, double decoding, double tokens)
{
    return lg_est_chunks_ms(steps->chunk, decoding, steps->step_ms, steps->prefill_fixed_ms,
                            tokens / LG_EST_TOKENS_PER_KIB);
}

double
lg_est_engine_run(const struct lg_est_batch *batch, const struct lg_est_steps *steps,
                  unsigned *joined)
{
    const uint32_t *left = batch->left;
    const struct lg_est_queued *queue = batch->queue;
    size_t nleft = batch->nleft, nqueue = batch->nqueue;
    unsigned slots = steps->slots;
    double step_ms = steps->step_ms, step_per_seq = steps->step_per_seq;
    double prefill_ms = steps->prefill_ms, prefill_fixed_ms = steps->prefill_fixed_ms;
    double resid_ms = steps->resid_ms, begun_ms = steps->begun_ms;
    /* ends[]: the step after whose end each running sequence has left,
     * counting from the end of the step in progress (0) */
    uint64_t ends[LG_EST_ENGINE_MAX];
    uint64_t k = 0; /* steps done after the one in progress */
    size_t r = 0, q = 0, held = nleft;
    bool placed = false; /* the step in progress placed from begun_ms */
    double t = resid_ms > 0 ? resid_ms : 0;
    double started = 0; /* ms since the step in progress began (the head's) */

    if (slots < 1) {
        slots = 1;
    }
    if (joined != NULL) {
        *joined = 0;
    }
    /* the step in progress yields one of the tokens still to come */
    for (size_t i = 0; i < nleft && r < LG_EST_ENGINE_MAX; i++) {
        if (left[i] > 1) {
            ends[r++] = left[i] - 1;
        }
    }
    /*
     * Where the step in progress began is known (a token came at its start):
     * those of the line sent before then found the slots free, if any were,
     * and are in it; it ends after their prefill. A step running past that
     * carries work not seen here: fall through to the guess below.
     */
    if (begun_ms >= 0) {
        double prefill = 0, fixed = 0;
        size_t r0 = r;

        for (; q < nqueue && held < slots && queue[q].age_ms >= begun_ms; q++, held++) {
            prefill += queue[q].prompt_tokens;
            fixed = prefill_fixed_ms;
            if (queue[q].max_tokens > 1 && r < LG_EST_ENGINE_MAX) {
                ends[r++] = queue[q].max_tokens - 1;
            }
        }
        /* chunked: the prompts it took run on for further steps */
        fixed += est_chunks_tokens_ms(steps, (double)nleft, prefill);
        placed = step_ms + fixed + prefill_ms * prefill > begun_ms;
        if (placed) {
            t = step_ms + fixed + prefill_ms * prefill - begun_ms;
        } else {
            r = r0; /* undone: the guess below places them */
            q = 0;
            held = nleft;
        }
    }
    /*
     * The head of the line found a slot free: it was admitted at the first
     * step after it arrived (half a step on average) and that step, its
     * prefill included, is the one in progress, unless it arrived under
     * half a step ago (then it goes with the next, as the new one does).
     * Those behind it that came before that step began are in it too; one
     * that came during it (a long prefill's step lasts) waits for the next.
     */
    while (!placed && q < nqueue && held < slots && queue[q].age_ms >= step_ms / 2
           && (q == 0 || queue[q].age_ms >= started)) {
        double own = step_ms / 2 + step_ms + prefill_fixed_ms
                     + prefill_ms * queue[q].prompt_tokens
                     + est_chunks_tokens_ms(steps, (double)nleft, queue[q].prompt_tokens);
        double first = own - queue[q].age_ms;

        /*
         * Overdue: it did not find a slot free when it came (it was let in
         * when one freed, some time since), or its prefill runs longer than
         * the slope says. Admitted at an unknown moment of the last `own`,
         * it has half of that left.
         */
        if (first <= 0) {
            first = own / 2;
        }
        if (q == 0) {
            started = own - step_ms / 2 - first;
        }

        t = LG_MAX(t, first);
        if (queue[q].max_tokens > 1 && r < LG_EST_ENGINE_MAX) {
            ends[r++] = queue[q].max_tokens - 1;
        }
        held++;
        q++;
    }
    for (;;) {
        double prefill = 0;
        uint64_t first = UINT64_MAX, m;
        size_t kept = 0, q0 = q, r0 = r;

        /* the step starting now admits the line while slots are free */
        while (r < slots) {
            if (q == nqueue) {
                /* the new one is admitted, with q - q0 of the line: they
                 * wait for its prefill as it waits for theirs (chunked: the
                 * line's chunks go first) */
                if (joined != NULL) {
                    *joined = (unsigned)(q - q0);
                }
                return t + est_step_at(step_ms, step_per_seq, r + 1, nleft) + prefill_fixed_ms
                       + prefill_ms * prefill + est_chunks_tokens_ms(steps, (double)r0, prefill);
            }
            prefill += queue[q].prompt_tokens;
            ends[r++] = k + LG_MAX(queue[q].max_tokens, 1u);
            q++;
        }
        /* full: run to the step where the first of them ends (the first
         * step carrying the prefill just admitted) */
        for (size_t i = 0; i < r; i++) {
            first = LG_MIN(first, ends[i]);
        }
        m = first > k ? first - k : 1;
        t += (double)m * est_step_at(step_ms, step_per_seq, r, nleft)
             + (q > q0 ? prefill_fixed_ms : 0) + prefill_ms * prefill
             + est_chunks_tokens_ms(steps, (double)r0, prefill);
        k += m;
        for (size_t i = 0; i < r; i++) {
            if (ends[i] > k) {
                ends[kept++] = ends[i];
            }
        }
        r = kept;
    }
}
