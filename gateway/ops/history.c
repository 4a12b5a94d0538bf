/*
 * history.c: the status page's history (see history.h).
 *
 * Owns: struct lg_history, its rings, its series (one per backend seen, by
 * id, with its name copied) and its routing-reason rows.
 * Borrows: the gateway and its fleet in force, for one sample.
 * Invariants: one thread (the admin thread) adds and reads; point `seq` lives
 * in slot seq % cap of every ring; a series or reason row holds a point for
 * every sequence number since it was made (empty ones included).
 */
#include "ops/history.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "ops/livestate.h"
#include "ops/metrics.h"
#include "serve/admission.h"
#include "serve/worker.h"

#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)

/* Routing (policy, reason) pairs the history follows; more are not plotted. */
#define HISTORY_MAX_REASONS LG_STATS_MAX_DECISIONS
#define HISTORY_NO_STATE    (-1)

/* One interval of one backend (or of the fleet: state and share unused). */
struct history_point {
    float rps;    /* requests ended per second; NaN = no counters to compare */
    float errors; /* failed attempts per second (fleet: 5xx answers per second) */
    float share;  /* its part of the router's picks, 0..1; NaN = no pick at all */
    float p50_ms; /* TTFT quantiles from the histogram's buckets; NaN = no first token */
    float p99_ms;
    float mean_ms; /* TTFT mean (exact: sum / count) */
    int32_t queue; /* the engine's waiting at the sample; -1 = unknown */
    uint32_t inflight;
    int8_t state; /* enum lg_live_state; HISTORY_NO_STATE: not in the fleet then */
};

struct history_series {
    uint32_t id;
    char *name;                          /* owned */
    size_t absent;                       /* empty points in a row, newest last */
    bool have_prev;                      /* prev holds the last sample's counters */
    struct lg_history_backend_snap prev; /* name unused */
    struct history_point *ring;          /* owned: [cap] */
};

struct history_reason {
    char policy[64];
    char reason[64];
    uint64_t prev;  /* its count at the last sample */
    uint32_t *ring; /* owned: [cap], picks in each interval */
};

struct lg_history {
    uint64_t resolution_ms;
    uint64_t window_ms;
    size_t cap;     /* points per ring */
    uint64_t seq;   /* points added so far: the next one's number */
    bool have_prev; /* a baseline was taken */
    uint64_t prev_t_ns;
    uint64_t prev_requests;
    uint64_t prev_errors;
    uint64_t sample_ns;             /* what the last lg_history_sample() took */
    uint64_t *t_ms;                 /* owned: [cap], each point's end (wall clock) */
    struct history_point *fleet;    /* owned: [cap] */
    uint32_t *held;                 /* owned: [cap] */
    struct history_series **series; /* owned: [nseries], in the order first seen */
    size_t nseries;
    struct history_reason *reasons[HISTORY_MAX_REASONS]; /* owned */
    size_t nreasons;
};

static const struct history_point history_empty = {
    .rps = NAN,
    .errors = NAN,
    .share = NAN,
    .p50_ms = NAN,
    .p99_ms = NAN,
    .mean_ms = NAN,
    .queue = -1,
    .inflight = 0,
    .state = HISTORY_NO_STATE,
};

struct lg_history *
lg_history_new(const struct lg_history_conf *hc)
{
    struct lg_history *h;

    if (hc->window_ms == 0 || hc->resolution_ms == 0) {
        return NULL;
    }
    h = lg_xcalloc(1, sizeof(*h));
    h->resolution_ms = hc->resolution_ms;
    h->window_ms = hc->window_ms;
    h->cap = (size_t)LG_MIN(hc->window_ms / hc->resolution_ms, (uint64_t)LG_HISTORY_MAX_POINTS);
    h->cap = LG_MAX(h->cap, (size_t)2);
    h->t_ms = lg_xcalloc(h->cap, sizeof(*h->t_ms));
    h->fleet = lg_xcalloc(h->cap, sizeof(*h->fleet));
    h->held = lg_xcalloc(h->cap, sizeof(*h->held));
    return h;
}

static void
history_series_free(struct history_series *s)
{
    free(s->name);
    free(s->ring);
    free(s);
}

void
lg_history_free(struct lg_history *h)
{
    if (h == NULL) {
        return;
    }
    for (size_t i = 0; i < h->nseries; i++) {
        history_series_free(h->series[i]);
    }
    for (size_t i = 0; i < h->nreasons; i++) {
        free(h->reasons[i]->ring);
        free(h->reasons[i]);
    }
    free(h->series);
    free(h->t_ms);
    free(h->fleet);
    free(h->held);
    free(h);
}

/* ---- one point from two samples ------------------------------------------ */

/* How much a cumulative counter grew (0 if it went back: never for ours). */
static uint64_t
history_delta(uint64_t now, uint64_t before)
{
    return now >= before ? now - before : 0;
}

/*
 * The q quantile (0..1) of n observations counted per bucket in d, in ms:
 * linear within the bucket it falls in, as Prometheus' histogram_quantile();
 * the last bucket (above every bound) answers the highest bound.
 */
static double
history_quantile(const uint64_t *d, uint64_t n, double q)
{
    double rank = q * (double)n;
    uint64_t cum = 0;

    for (size_t i = 0; i <= LG_HIST_NBUCKETS; i++) {
        if (d[i] == 0 || (double)(cum + d[i]) < rank) {
            cum += d[i];
            continue;
        }
        if (i == LG_HIST_NBUCKETS) {
            break;
        }
        double lo = i == 0 ? 0 : lg_hist_latency_bounds[i - 1];
        double hi = lg_hist_latency_bounds[i];

        return 1000 * (lo + (hi - lo) * (rank - (double)cum) / (double)d[i]);
    }
    return 1000 * lg_hist_latency_bounds[LG_HIST_NBUCKETS - 1];
}

/*
 * TTFT quantiles and mean of an interval's histogram: d per bucket, n first
 * tokens and their sum. The quantiles rank within the buckets' own total: a
 * sample can read a bucket before an observation and the count after it.
 */
static void
history_ttft(struct history_point *p, const uint64_t *d, uint64_t n, uint64_t sum_us)
{
    uint64_t in_buckets = 0;

    for (size_t k = 0; k <= LG_HIST_NBUCKETS; k++) {
        in_buckets += d[k];
    }
    if (in_buckets > 0) {
        p->p50_ms = (float)history_quantile(d, in_buckets, 0.5);
        p->p99_ms = (float)history_quantile(d, in_buckets, 0.99);
    }
    if (n > 0) {
        p->mean_ms = (float)((double)sum_us / 1000.0 / (double)n);
    }
}

static struct history_series *
history_series_find(struct lg_history *h, size_t hint, uint32_t id)
{
    if (hint < h->nseries && h->series[hint]->id == id) {
        return h->series[hint]; /* the fleet's order, as last time */
    }
    for (size_t i = 0; i < h->nseries; i++) {
        if (h->series[i]->id == id) {
            return h->series[i];
        }
    }
    return NULL;
}

static struct history_series *
history_series_new(struct lg_history *h, const struct lg_history_backend_snap *b)
{
    struct history_series *s = lg_xcalloc(1, sizeof(*s));

    s->id = b->id;
    s->name = lg_xstrdup(b->name);
    s->ring = lg_xcalloc(h->cap, sizeof(*s->ring));
    for (size_t i = 0; i < h->cap; i++) {
        s->ring[i] = history_empty;
    }
    h->series = lg_xrealloc(h->series, (h->nseries + 1) * sizeof(*h->series));
    h->series[h->nseries++] = s;
    return s;
}

/* The routing reasons' picks in the interval, each in its row. */
static void
history_add_reasons(struct lg_history *h, const struct lg_history_snap *s, size_t slot)
{
    for (size_t r = 0; r < h->nreasons; r++) {
        h->reasons[r]->ring[slot] = 0;
    }
    for (size_t i = 0; i < s->ndecisions; i++) {
        const struct lg_stats_decision *d = &s->decisions[i];
        struct history_reason *row = NULL;

        for (size_t r = 0; r < h->nreasons && row == NULL; r++) {
            if (strcmp(h->reasons[r]->reason, d->reason) == 0
                && strcmp(h->reasons[r]->policy, d->policy) == 0) {
                row = h->reasons[r];
            }
        }
        if (row == NULL) {
            if (h->nreasons == HISTORY_MAX_REASONS) {
                continue;
            }
            row = lg_xcalloc(1, sizeof(*row));
            row->ring = lg_xcalloc(h->cap, sizeof(*row->ring));
            snprintf(row->policy, sizeof(row->policy), "%s", d->policy);
            snprintf(row->reason, sizeof(row->reason), "%s", d->reason);
            /* at the baseline its count so far is history; after, it is new */
            row->prev = h->have_prev ? 0 : d->count;
            h->reasons[h->nreasons++] = row;
        }
        if (h->have_prev) {
            uint64_t n = history_delta(d->count, row->prev);

            row->ring[slot] = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        }
        row->prev = d->count;
    }
}

/* Drops the series that hold nothing but empty points now. */
static void
history_prune(struct lg_history *h)
{
    size_t k = 0;

    for (size_t i = 0; i < h->nseries; i++) {
        if (h->series[i]->absent >= h->cap) {
            history_series_free(h->series[i]);
        } else {
            h->series[k++] = h->series[i];
        }
    }
    h->nseries = k;
}

void
lg_history_add(struct lg_history *h, const struct lg_history_snap *s)
{
    size_t slot = (size_t)(h->seq % h->cap);
    double dt = h->have_prev ? (double)(s->t_ns - h->prev_t_ns) / 1e9 : 0;
    struct history_point *fp = &h->fleet[slot];
    uint64_t ttft[LG_HIST_NBUCKETS + 1] = { 0 };
    uint64_t ttft_n = 0, ttft_sum = 0, picks = 0;
    bool queue_known = false;
    bool point = h->have_prev && dt > 0;

    /* every series' slot is written below, present or not */
    for (size_t i = 0; i < h->nseries; i++) {
        h->series[i]->ring[slot] = history_empty;
    }
    *fp = history_empty;
    fp->queue = 0;
    for (size_t i = 0; i < s->nbackends; i++) {
        const struct lg_history_backend_snap *b = &s->backends[i];
        struct history_series *se = history_series_find(h, i, b->id);

        if (se == NULL) {
            se = history_series_new(h, b);
        }
        if (se->have_prev) {
            picks += history_delta(b->attempts, se->prev.attempts);
        }
    }
    for (size_t i = 0; i < s->nbackends; i++) {
        const struct lg_history_backend_snap *b = &s->backends[i];
        struct history_series *se = history_series_find(h, i, b->id);
        struct history_point *p = &se->ring[slot];

        p->state = (int8_t)b->state;
        p->queue = b->queue;
        p->inflight = b->inflight;
        fp->inflight += b->inflight;
        if (b->queue >= 0) {
            fp->queue += b->queue;
            queue_known = true;
        }
        if (point && se->have_prev) {
            uint64_t d[LG_HIST_NBUCKETS + 1];
            uint64_t n = history_delta(b->ttft_count, se->prev.ttft_count);
            uint64_t sum = history_delta(b->ttft_sum_us, se->prev.ttft_sum_us);

            for (size_t k = 0; k <= LG_HIST_NBUCKETS; k++) {
                d[k] = history_delta(b->ttft[k], se->prev.ttft[k]);
                ttft[k] += d[k];
            }
            ttft_n += n;
            ttft_sum += sum;
            history_ttft(p, d, n, sum);
            p->rps = (float)((double)history_delta(b->requests, se->prev.requests) / dt);
            p->errors = (float)((double)history_delta(b->errors, se->prev.errors) / dt);
            if (picks > 0) {
                p->share =
                    (float)((double)history_delta(b->attempts, se->prev.attempts) / (double)picks);
            }
        }
        se->prev = *b;
        se->prev.name = NULL;
        se->have_prev = true;
        se->absent = 0;
    }
    for (size_t i = 0; i < h->nseries; i++) {
        if (h->series[i]->ring[slot].state == HISTORY_NO_STATE) {
            h->series[i]->absent++;
            h->series[i]->have_prev = false; /* back in the fleet: a fresh baseline */
        }
    }
    if (!queue_known) {
        fp->queue = -1;
    }
    fp->state = 0;
    if (point) {
        fp->rps = (float)((double)history_delta(s->requests, h->prev_requests) / dt);
        fp->errors = (float)((double)history_delta(s->errors, h->prev_errors) / dt);
        history_ttft(fp, ttft, ttft_n, ttft_sum);
    }
    h->held[slot] = s->held;
    h->t_ms[slot] = s->wall_ms;
    history_add_reasons(h, s, slot);
    h->have_prev = true;
    h->prev_t_ns = s->t_ns;
    h->prev_requests = s->requests;
    h->prev_errors = s->errors;
    h->seq++;
    history_prune(h);
}

/* ---- sampling the gateway -------------------------------------------------- */

static void
history_read_backend(const struct lg_fleet *f, const struct lg_backend *b, uint64_t now,
                     struct lg_history_backend_snap *o)
{
    struct lg_live lv;
    const struct lg_backend_view *v = &lv.view;

    lg_live_read(f, b, now, &lv);
    o->id = b->id;
    o->name = b->name;
    o->state = (int)lv.state;
    o->queue =
        v->engine_age_ns != UINT64_MAX && v->engine_waiting >= 0 ? (int32_t)v->engine_waiting : -1;
    o->inflight = lg_backend_inflight(b);
    o->requests = LOAD(&b->metrics.requests);
    o->attempts = LG_STAT_GET(b, requests);
    o->errors = LG_STAT_GET(b, responses[0]) + LG_STAT_GET(b, responses[5]);
    for (size_t k = 0; k <= LG_HIST_NBUCKETS; k++) {
        o->ttft[k] = LOAD(&b->metrics.ttft.buckets[k]);
    }
    o->ttft_count = LOAD(&b->metrics.ttft.count);
    o->ttft_sum_us = LOAD(&b->metrics.ttft.sum_us);
}

/* Inference requests answered, and those with a 5xx (not /v1/models, /healthz). */
static void
history_read_requests(const struct lg_gateway *gw, uint64_t *all, uint64_t *errors)
{
    *all = 0;
    *errors = 0;
    for (unsigned i = 0; i < gw->nworkers; i++) {
        const struct lg_worker_metrics *m = &gw->workers[i].metrics;

        for (int r = 0; r < LG_STATS_NROUTES; r++) {
            if (r == LG_STATS_ROUTE_MODELS || r == LG_STATS_ROUTE_HEALTHZ) {
                continue;
            }
            for (int c = 0; c < LG_STATS_NCODES; c++) {
                uint64_t n = LOAD(&m->requests[r][c]);

                *all += n;
                *errors += c + LG_STATS_MIN_CODE >= 500 ? n : 0;
            }
        }
    }
}

void
lg_history_sample(struct lg_history *h, struct lg_gateway *gw)
{
    uint64_t t0 = lg_now_ns();
    struct lg_fleet *f = lg_gateway_fleet(gw);
    struct lg_history_backend_snap *bs = lg_xcalloc(LG_MAX(f->nbackends, (size_t)1), sizeof(*bs));
    struct lg_stats_decision decisions[HISTORY_MAX_REASONS];
    uint64_t dropped;
    struct lg_history_snap s = { .t_ns = t0, .wall_ms = lg_wall_ns() / LG_NS_PER_MS };

    for (size_t i = 0; i < f->nbackends; i++) {
        history_read_backend(f, f->backends[i], t0, &bs[i]);
    }
    s.backends = bs;
    s.nbackends = f->nbackends;
    history_read_requests(gw, &s.requests, &s.errors);
    s.held = gw->admission != NULL ? lg_admission_waiting(gw->admission) : 0;
    s.decisions = decisions;
    s.ndecisions = lg_metrics_decisions(gw, decisions, HISTORY_MAX_REASONS, &dropped);
    lg_history_add(h, &s);
    lg_fleet_unref(f);
    free(bs);
    h->sample_ns = lg_now_ns() - t0;
}

/* ---- JSON ------------------------------------------------------------------- */

/* v rounded to `step`, or null when it is not a number. */
static json_t *
history_num(float v, double step)
{
    return isfinite(v) ? json_real(round((double)v / step) * step) : json_null();
}

/* Which points a reply holds: [first, h->seq). */
static uint64_t
history_first(const struct lg_history *h, uint64_t since)
{
    uint64_t oldest = h->seq > h->cap ? h->seq - h->cap : 0;

    return LG_MIN(LG_MAX(since, oldest), h->seq);
}

/* The arrays of one series of points (a backend's, or the fleet's), into o. */
static json_t *
history_points_json(json_t *o, const struct lg_history *h, const struct history_point *ring,
                    uint64_t first, bool backend)
{
    json_t *rps = json_array(), *err = json_array(), *p50 = json_array(), *p99 = json_array();
    json_t *mean = json_array(), *queue = json_array(), *inflight = json_array();
    json_t *share = backend ? json_array() : NULL, *state = backend ? json_array() : NULL;

    for (uint64_t q = first; q < h->seq; q++) {
        const struct history_point *p = &ring[q % h->cap];
        bool there = !backend || p->state != HISTORY_NO_STATE;

        json_array_append_new(rps, history_num(p->rps, 0.01));
        json_array_append_new(err, history_num(p->errors, 0.01));
        json_array_append_new(p50, history_num(p->p50_ms, 0.1));
        json_array_append_new(p99, history_num(p->p99_ms, 0.1));
        json_array_append_new(mean, history_num(p->mean_ms, 0.1));
        json_array_append_new(queue, there && p->queue >= 0 ? json_integer(p->queue) : json_null());
        json_array_append_new(inflight, there ? json_integer(p->inflight) : json_null());
        if (backend) {
            json_array_append_new(share, history_num(p->share, 0.001));
            json_array_append_new(state,
                                  there ? json_string(lg_live_state_names[p->state]) : json_null());
        }
    }
    json_object_set_new(o, "requests_per_s", rps);
    if (backend) {
        json_object_set_new(o, "share", share);
        json_object_set_new(o, "health", state);
    }
    json_object_set_new(o, "ttft_p50_ms", p50);
    json_object_set_new(o, "ttft_p99_ms", p99);
    json_object_set_new(o, "ttft_mean_ms", mean);
    json_object_set_new(o, "queue", queue);
    json_object_set_new(o, "in_flight", inflight);
    json_object_set_new(o, "errors_per_s", err);
    return o;
}

json_t *
lg_history_json(const struct lg_history *h, uint64_t since)
{
    uint64_t first = history_first(h, since);
    json_t *t = json_array(), *held = json_array(), *backends = json_array();
    json_t *reasons = json_array();
    json_t *fleet = history_points_json(json_object(), h, h->fleet, first, false);

    for (uint64_t q = first; q < h->seq; q++) {
        json_array_append_new(t, json_integer((json_int_t)h->t_ms[q % h->cap]));
        json_array_append_new(held, json_integer(h->held[q % h->cap]));
    }
    json_object_set_new(fleet, "held", held);
    for (size_t i = 0; i < h->nseries; i++) {
        json_t *o = json_pack("{s:s}", "name", h->series[i]->name);

        json_array_append_new(backends, history_points_json(o, h, h->series[i]->ring, first, true));
    }
    for (size_t i = 0; i < h->nreasons; i++) {
        const struct history_reason *r = h->reasons[i];
        json_t *counts = json_array();

        for (uint64_t q = first; q < h->seq; q++) {
            json_array_append_new(counts, json_integer(r->ring[q % h->cap]));
        }
        json_array_append_new(reasons, json_pack("{s:s, s:s, s:o}", "policy", r->policy, "reason",
                                                 r->reason, "counts", counts));
    }
    return json_pack("{s:f, s:f, s:I, s:I, s:I, s:f, s:o, s:o, s:o, s:o}", "resolution_s",
                     (double)h->resolution_ms / 1000.0, "window_s", (double)h->window_ms / 1000.0,
                     "capacity", (json_int_t)h->cap, "first", (json_int_t)first, "next",
                     (json_int_t)h->seq, "sample_ms", round((double)h->sample_ns / 1e3) / 1e3,
                     "t_ms", t, "fleet", fleet, "reasons", reasons, "backends", backends);
}
