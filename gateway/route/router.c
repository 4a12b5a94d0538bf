/*
 * router.c: candidate filtering, the policy pipeline and the explanation of
 * each decision (see router.h).
 *
 * Owns: struct lg_router (one per fleet) and each stage's policy state.
 * Borrows: backends of the fleet for the duration of lg_router_pick(); the
 * registered policies (plugin.c keeps them loaded).
 * Hot path: no allocation and no lock: views, costs and candidate lists live
 * in arrays of the calling thread, allocated once and grown only when a
 * route longer than any before comes (every candidate of any route is
 * considered: a pick is never capped); backend state is read through
 * lock-free snapshots (backend.c).
 */
#include "route/router.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <jansson.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/backend_view.h"
#include "fleet/fleet.h"
#include "route/plugin.h"
#include "route/tried.h"

struct router_stage {
    const struct lg_plugin *plugin; /* borrowed from the registry */
    void *state;                    /* owned through plugin->ops->destroy */
    double weight;
    bool shadow; /* weight 0: scored and logged as is, never decides (filters included) */
    bool has_filter, has_on_result;
};

struct lg_router {
    char *policy; /* owned label */
    struct router_stage stages[LG_ROUTER_MAX_STAGES];
    size_t nstages;
    uint64_t rr_next; /* atomic: tie-break rotation shared by the workers */
    uint64_t scrape_interval_ns;
    uint64_t slow_start_ns;
    uint64_t down_retry_ns; /* Retry-After hint for a down backend */
    size_t prefix_bytes;
    bool reads_prefix; /* a stage may read the prompt prefix's hash (lg_router_prefix_bytes) */
    bool reads_session; /* a stage may read the session's hash (lg_router_reads_session) */
};

/* ---- construction ------------------------------------------------------- */

/* Logs "FILE:LINE:COL: error: POINTER: what", as the config's loader would. */
static void __attribute__((format(printf, 4, 5)))
router_conf_error(const struct lg_config *conf, const char *pointer, bool at_key, const char *fmt,
                  ...)
{
    char pos[320];
    char what[640];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    lg_config_position(conf, pointer, at_key, pos, sizeof(pos));
    LG_ERROR("%s: error: %s: %s", pos, pointer, what);
}

/*
 * A policy refused its options (at options_ptr): err is "/NAME: why" (a
 * pointer relative to its options) or a bare message.
 */
static void
router_options_error(const struct lg_config *conf, const char *options_ptr, const char *err,
                     bool at_key)
{
    char ptr[512];
    const char *sep = err[0] == '/' ? strstr(err, ": ") : NULL;

    if (sep == NULL) {
        router_conf_error(conf, options_ptr, false, "%s", err[0] ? err : "refused");
        return;
    }
    snprintf(ptr, sizeof(ptr), "%s%.*s", options_ptr, (int)(sep - err), err);
    router_conf_error(conf, ptr, at_key, "%s", sep + 2);
}

/* A stage of `policy`; its options (NULL: none) sit at options_ptr, the stage at where. */
static int
router_add_stage(struct lg_router *r, const struct lg_config *conf, const char *policy,
                 double weight, json_t *options, const char *options_ptr, const char *where)
{
    const struct lg_plugin *p = lg_plugin_find(policy);
    struct router_stage *s;
    char err[512] = "", names[512];
    bool at_key = false;

    if (p == NULL) {
        lg_plugin_names(names, sizeof(names));
        router_conf_error(conf, where, false, "policy \"%s\" is not known (known: %s)", policy,
                          names);
        return LG_EINVAL;
    }
    if (r->nstages >= LG_ROUTER_MAX_STAGES) {
        router_conf_error(conf, where, false, "at most %d pipeline stages", LG_ROUTER_MAX_STAGES);
        return LG_EINVAL;
    }
    s = &r->stages[r->nstages];
    if (lg_plugin_create(p, options, &s->state, err, sizeof(err), &at_key) != LG_OK) {
        router_options_error(conf, options_ptr, err, at_key);
        return LG_EINVAL;
    }
    s->plugin = p;
    s->weight = weight;
    s->shadow = weight == 0;
    s->has_filter = LG_POLICY_HAS(p->ops, filter);
    s->has_on_result = LG_POLICY_HAS(p->ops, on_result);
    r->nstages++;
    return LG_OK;
}

/*
 * The options of a stage: its own (at own_ptr), else routing.options[policy];
 * their JSON pointer into ptr. LG_EINVAL (logged) when routing.options
 * gives the policy something other than an object.
 */
static int
router_options(const struct lg_config *conf, const char *policy, json_t *own, const char *own_ptr,
               json_t **out, char *ptr, size_t len)
{
    const struct lg_routing_conf *rc = &conf->routing;
    json_t *o;

    *out = own;
    snprintf(ptr, len, "%s", own_ptr);
    if (own != NULL) {
        return LG_OK;
    }
    o = rc->policy_options ? json_object_get(rc->policy_options, policy) : NULL;
    if (o == NULL) {
        return LG_OK;
    }
    snprintf(ptr, len, "/routing/options/%s", policy);
    if (!json_is_object(o)) {
        router_conf_error(conf, ptr, false, "a policy's options must be an object");
        return LG_EINVAL;
    }
    *out = o;
    return LG_OK;
}

/* A stage from the config (its own options at where/options, if any). */
static int
router_add_conf_stage(struct lg_router *r, const struct lg_config *conf, const char *policy,
                      double weight, json_t *own, const char *where)
{
    char own_ptr[96];
    char ptr[160];
    json_t *options;

    snprintf(own_ptr, sizeof(own_ptr), "%s/options", where);
    if (router_options(conf, policy, own, own_ptr, &options, ptr, sizeof(ptr)) != LG_OK) {
        return LG_EINVAL;
    }
    return router_add_stage(r, conf, policy, weight, options, ptr, where);
}

int
lg_router_new(const struct lg_config *conf, struct lg_router **out)
{
    const struct lg_routing_conf *rc = &conf->routing;
    struct lg_router *r = lg_xcalloc(1, sizeof(*r));
    bool want_session = rc->session_header != NULL || rc->nsession_headers > 0;
    bool has_session = false;
    char where[96], label[256] = "";
    size_t off = 0;
    int ret = LG_OK;

    for (size_t i = 0; i < rc->nplugins && ret == LG_OK; i++) {
        char err[512];

        if (lg_plugin_load(rc->plugins[i], err, sizeof(err)) != LG_OK) {
            snprintf(where, sizeof(where), "/routing/plugins/%zu", i);
            router_conf_error(conf, where, false, "%s", err);
            ret = LG_EINVAL;
        }
    }
    for (size_t i = 0; i < rc->npipeline; i++) {
        has_session |= strcmp(rc->pipeline[i].policy, "session_affinity") == 0;
    }
    if (rc->npipeline == 0 && rc->policy != NULL) {
        has_session |= strcmp(rc->policy, "session_affinity") == 0;
    }
    if (ret == LG_OK && want_session && !has_session) {
        /* the header is set: keep its sessions where their KV cache is */
        ret = router_add_conf_stage(r, conf, "session_affinity", 1.0, NULL,
                                    "/routing/session_header");
    }
    for (size_t i = 0; i < rc->npipeline && ret == LG_OK; i++) {
        const struct lg_route_stage_conf *sc = &rc->pipeline[i];

        snprintf(where, sizeof(where), "/routing/pipeline/%zu", i);
        ret = router_add_conf_stage(r, conf, sc->policy, sc->weight, sc->options, where);
    }
    if (ret == LG_OK && rc->npipeline == 0) {
        const char *policy = rc->policy ? rc->policy : "ttft";

        ret = router_add_conf_stage(r, conf, policy, 1.0, NULL, "/routing/policy");
    }
    if (ret != LG_OK) {
        lg_router_free(r);
        return ret;
    }
    for (size_t i = 0; i < r->nstages && off < sizeof(label); i++) {
        off += (size_t)snprintf(label + off, sizeof(label) - off, "%s%s%s", i ? "+" : "",
                                r->stages[i].plugin->desc->name,
                                r->stages[i].shadow ? "(shadow)" : "");
    }
    r->policy = lg_xstrdup(label);
    r->scrape_interval_ns = conf->health.scrape_interval_ms * LG_NS_PER_MS;
    r->slow_start_ns = conf->health.slow_start_ms * LG_NS_PER_MS;
    r->down_retry_ns = LG_MAX(conf->health.interval_ms, 1000) * LG_NS_PER_MS;
    r->prefix_bytes = rc->prefix_bytes;
    for (size_t i = 0; i < r->nstages; i++) {
        const char *name = r->stages[i].plugin->desc->name;

        /* of the built-ins the affinities read it (session_affinity its
         * prefix_len, the share of a prompt it counts as cached); a loaded
         * plugin may */
        r->reads_prefix |= r->stages[i].plugin->path != NULL
                           || strcmp(name, "prefix_affinity") == 0
                           || strcmp(name, "session_affinity") == 0;
        r->reads_session |= r->stages[i].plugin->path != NULL
                            || strcmp(name, "session_affinity") == 0;
    }
    *out = r;
    return LG_OK;
}

void
lg_router_free(struct lg_router *r)
{
    if (r == NULL) {
        return;
    }
    for (size_t i = 0; i < r->nstages; i++) {
        r->stages[i].plugin->ops->destroy(r->stages[i].state);
    }
    free(r->policy);
    free(r);
}

int
lg_router_fleet_new(struct lg_config *conf, unsigned nworkers, const struct lg_fleet *prev,
                    struct lg_fleet **out)
{
    struct lg_router *r;
    int rc = lg_router_new(conf, &r);

    if (rc != LG_OK) {
        return rc;
    }
    return lg_fleet_new(conf, nworkers, prev, r, lg_router_free, out);
}

const char *
lg_router_policy(const struct lg_router *r)
{
    return r->policy;
}

size_t
lg_router_prefix_bytes(const struct lg_router *r)
{
    return r->reads_prefix ? r->prefix_bytes : 0;
}

bool
lg_router_reads_session(const struct lg_router *r)
{
    return r->reads_session;
}

/* ---- candidates --------------------------------------------------------- */

static bool
router_is_candidate(const struct lg_backend *b, size_t i, const struct lg_tried *tried,
                    uint64_t now, unsigned cls)
{
    if (lg_tried_has(tried, i)) {
        return false;
    }
    if (!lg_backend_is_available(b, now)) {
        return false;
    }
    uint32_t max = lg_backend_conf(b)->max_inflight;

    return max == 0 || lg_backend_inflight_from(b, cls) < max;
}

bool
lg_router_has_candidate(const struct lg_model_route *route, const struct lg_tried *tried,
                        unsigned cls)
{
    uint64_t now = lg_now_ns();

    if (route == NULL) {
        return false;
    }
    for (size_t i = 0; i < route->n; i++) {
        if (router_is_candidate(route->backends[i], i, tried, now, cls)) {
            return true;
        }
    }
    return false;
}

static void
router_info(const struct lg_router *r, const struct lg_route_req *req, const struct lg_tried *tried,
            struct lg_route_info *info)
{
    memset(info, 0, sizeof(*info));
    info->size = sizeof(*info);
    info->model = req->model;
    info->path = req->path;
    info->stream = req->stream;
    info->prompt_bytes = req->prompt_bytes;
    info->max_tokens = req->max_tokens;
    info->prefix_hash = req->prefix_hash;
    info->session_hash = req->session_hash;
    info->attempt = lg_tried_count(tried) + 1;
    info->prefix_len = req->prefix_hash ? LG_MIN(req->prompt_bytes, r->prefix_bytes) : 0;
}

/* One decision's candidates, their views and costs (on the picker's stack). */
/*
 * A pick's candidates and what the stages made of them, in arrays of `cap`
 * entries: one set per thread (router_pick_arrays()), as long as the
 * longest route picked from there.
 */
struct router_pick {
    size_t n, cap; /* candidates; room */
    struct lg_backend **b;
    struct lg_backend_view *v;
    struct lg_engine_model_view *m; /* lent through v[i].model */
    const struct lg_backend_view **vp;
    const char **dropped; /* by which stage; NULL: scored */
    double *cost;         /* stage s's of candidate i at [s * cap + i]: weighted; a shadow's
                             as is */
    double *total;
    const char *why[LG_ROUTER_MAX_STAGES];
    /* the stages' working room */
    size_t *idx;
    const struct lg_backend_view **vs;
    unsigned char *keep;
    double *c;
};

/* ---- the explanation ---------------------------------------------------- */

struct router_buf {
    char *p;
    size_t len, cap;
    bool full;
};

/*
 * The explanation is written on every routed request, so it is formatted by
 * hand: printf's floating-point path cost about 15% of a small request's
 * instructions (callgrind, bench/NOTES.md step 13). The copies are inline so
 * that one of known length (the literals and keys) is a few moves, not a
 * call to memcpy.
 */
static inline void
router_raw(struct router_buf *o, const char *s, size_t n)
{
    if (o->full || n >= o->cap - o->len) {
        o->full = true;
        return;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static inline void
router_str(struct router_buf *o, const char *s)
{
    router_raw(o, s, strlen(s));
}

static void
router_u64(struct router_buf *o, uint64_t v)
{
    char b[LG_U64_DIGITS];
    char *q = lg_u64_digits(b, v);

    router_raw(o, q, (size_t)(b + LG_U64_DIGITS - q));
}

/*
 * round() (halves away from zero), inline: libm's call was a tenth of an
 * explanation's instructions. Exact: below 2^52 the fraction x - trunc(x) is
 * exact; at and above it, every double is an integer already (NaN and the
 * infinities fail the test and come back as they are, as from round()).
 */
static inline double
router_round(double x)
{
    double t, d;

    if (!(fabs(x) < 4503599627370496.0)) {
        return x;
    }
    t = (double)(int64_t)x;
    d = x - t;
    if (d >= 0.5) {
        t += 1;
    } else if (d <= -0.5) {
        t -= 1;
    }
    return copysign(t, x); /* round(-0.2) is -0.0 */
}

/* "00".."99": two digits a step (a division by 100 where two by 10 were). */
static const char router_digits2[201] =
    "0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849"
    "5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

static inline void
router_put2(char *p, unsigned v)
{
    memcpy(p, router_digits2 + 2 * v, 2);
}

/*
 * Writes v (0 <= v < 1e18, three decimals in milli) at p: the integer part,
 * then ".ddd" with its trailing zeros dropped; returns the end. Digits go
 * straight into the buffer, two at a time from the lowest, the length
 * counted first (no copy through a scratch array).
 */
static inline char *
router_int_put(char *p, uint64_t whole)
{
    uint64_t t;
    size_t nd;
    char *e;

    if (whole < 10) {
        nd = 1;
    } else if (whole < 100) {
        nd = 2;
    } else if (whole < 1000) {
        nd = 3;
    } else {
        for (nd = 4, t = whole / 10000; t != 0; t /= 10) {
            nd++;
        }
    }
    e = p + nd;
    while (whole >= 100) {
        e -= 2;
        router_put2(e, (unsigned)(whole % 100));
        whole /= 100;
    }
    if (whole >= 10) {
        router_put2(e - 2, (unsigned)whole);
    } else {
        e[-1] = (char)('0' + whole);
    }
    return p + nd;
}

static inline char *
router_dec_put(char *p, uint64_t milli)
{
    unsigned frac = (unsigned)(milli % 1000);

    p = router_int_put(p, milli / 1000);
    if (frac != 0) {
        p[0] = '.';
        router_put2(p + 1, frac / 10);
        p[3] = (char)('0' + frac % 10);
        p += p[3] != '0' ? 4 : p[2] != '0' ? 3 : 2;
    }
    return p;
}

/* Writes '-' (neg) and milli / 1000 with its three decimals (router_dec_put). */
static void
router_dec_milli(struct router_buf *o, bool neg, uint64_t milli)
{
    /* '-', 16 digits (below 1e15 + 1), '.', 3 decimals: 21 bytes at most */
    char tmp[32], *p, *start;
    bool direct = !o->full && o->cap - o->len > sizeof(tmp);

    start = p = direct ? o->p + o->len : tmp;
    if (neg) {
        *p++ = '-';
    }
    p = router_dec_put(p, milli);
    if (direct) {
        o->len += (size_t)(p - start);
    } else {
        router_raw(o, tmp, (size_t)(p - tmp));
    }
}

/* A JSON number with at most three decimals (trailing zeros dropped); null if not finite. */
static void
router_dec(struct router_buf *o, double v)
{
    uint64_t milli;
    bool neg;
    double x;

    if (!isfinite(v)) {
        router_raw(o, "null", 4);
        return;
    }
    neg = v < 0;
    if (neg) {
        v = -v;
    }
    if (v >= 1e15) {
        v = 1e15; /* a cost this large only says "huge" */
    }
    /* llround(v * 1000) for 0 <= v <= 1e15 (below 2^63), as router_round() */
    x = v * 1000.0;
    milli = (uint64_t)x;
    milli += x - (double)milli >= 0.5;
    router_dec_milli(o, neg, milli);
}

/*
 * router_dec(o, router_round(v * scale) / scale), scale 1, 10, 100 or 1000
 * (per: 1000 / scale): the same text, without the division and the second
 * rounding. Below 1e12 the rounded t / scale * 1000 is within 0.01 of t *
 * per, so router_dec's rounding gives t * per exactly; beyond, or not
 * finite, router_dec writes it.
 */
static void
router_dec_round(struct router_buf *o, double v, double scale, uint64_t per)
{
    double t = router_round(v * scale);

    if (!(fabs(t) < 1e12)) {
        router_dec(o, t / scale);
        return;
    }
    router_dec_milli(o, t < 0, (uint64_t)fabs(t) * per);
}


/*
 * ,"key":v rounded to 1 / scale (1, 10, 100 or 1000: a constant where
 * inlined), the same text as router_raw and router_dec_round: t, the
 * rounded v * scale, is written as t / scale and, unless zero, "." and
 * t % scale's digits without their trailing zeros. The key and the number
 * go in place under one bound check; what could not fit (or |t| >= 1e12,
 * or not finite) takes router_dec_round's way.
 */
static inline __attribute__((always_inline)) void
router_put_round(struct router_buf *o, const char *key, size_t klen, double v, unsigned scale)
{
    double t = router_round(v * scale);
    uint64_t u;
    unsigned f;
    char *p;

    if (o->full || o->cap - o->len <= klen + 32 || !(fabs(t) < 1e12)) {
        router_raw(o, key, klen);
        router_dec_round(o, v, scale, 1000 / scale);
        return;
    }
    p = o->p + o->len;
    memcpy(p, key, klen);
    p += klen;
    if (t < 0) {
        *p++ = '-';
    }
    u = (uint64_t)fabs(t);
    p = router_int_put(p, u / scale);
    f = (unsigned)(u % scale);
    if (f != 0) {
        *p++ = '.';
        if (scale == 10) {
            *p++ = (char)('0' + f);
        } else if (scale == 100) {
            router_put2(p, f);
            p += p[1] != '0' ? 2 : 1;
        } else if (scale == 1000) {
            router_put2(p, f / 10);
            p[2] = (char)('0' + f % 10);
            p += p[2] != '0' ? 3 : p[1] != '0' ? 2 : 1;
        }
    }
    o->len = (size_t)(p - o->p);
}

static inline void
router_put_num_pre(struct router_buf *o, const char *pre, size_t n, double v)
{
    if (v >= 0 && v < 1e9 && v == (double)(uint32_t)v && !o->full && o->cap - o->len > n + 32) {
        /* a count (waiting, running, an age in whole ms): its digits alone, the same text */
        char *p = o->p + o->len;

        memcpy(p, pre, n);
        o->len = (size_t)(router_int_put(p + n, (uint32_t)v) - o->p);
        return;
    }
    if (v >= 0 && v < 1e9) { /* router_dec's text (which writes -0 for a tiny negative) */
        router_put_round(o, pre, n, v, 1000);
        return;
    }
    router_raw(o, pre, n);
    router_dec(o, v);
}

/* ,"key":v with key a literal: its prefix is one copy of known length */
#define ROUTER_PUT_NUM(o, key, v) \
    router_put_num_pre((o), ",\"" key "\":", sizeof(",\"" key "\":") - 1, (v))

/* ,"key":v rounded to 1 / scale (router_put_round) */
#define ROUTER_PUT_ROUND(o, key, v, scale) \
    router_put_round((o), ",\"" key "\":", sizeof(",\"" key "\":") - 1, (v), (scale))

/* A request's TTFT there by the engine model (wait_ms >= 0): the wait for
 * a step to admit it, and its own prefill. */
static double
router_model_ms(const struct lg_engine_model_view *m, double kib)
{
    return m->wait_ms + m->prefill_ms_per_kib * kib
           + lg_est_chunks_ms(m->prefill_chunk, m->decoding, m->step_ms, m->prefill_fixed_ms, kib);
}

/* The estimators' part of a candidate's explanation. */
static void
router_explain_model(struct router_buf *o, const struct lg_backend_view *v,
                     const struct lg_engine_model_view *m, double kib)
{
    if (m->wait_ms >= 0) {
        ROUTER_PUT_ROUND(o, "model_ms", router_model_ms(m, kib), 10);
        ROUTER_PUT_ROUND(o, "step_ms", m->step_ms, 10);
        if (m->slots != v->capacity) {
            ROUTER_PUT_ROUND(o, "model_slots", m->slots, 10);
        }
        ROUTER_PUT_ROUND(o, "prefill_ms", m->prefill_fixed_ms + m->prefill_ms_per_kib * kib, 10);
        if (fabs(m->scale - 1) >= 0.005) {
            ROUTER_PUT_ROUND(o, "model_scale", m->scale, 100);
        }
        if (m->joined > 0) {
            ROUTER_PUT_NUM(o, "model_joined", m->joined);
        }
    }
    if (m->measured_ms >= 0) {
        ROUTER_PUT_ROUND(o, "measured_ms", m->measured_ms + m->measured_ms_per_kib * kib, 10);
    }
    if (m->err > 0 || m->measured_err > 0) {
        /* how far each has been off there lately (rms of the log ratio) */
        ROUTER_PUT_ROUND(o, "model_err", m->err, 100);
        ROUTER_PUT_ROUND(o, "measured_err", m->measured_err, 100);
    }
    if (m->flags & LG_MODEL_F_MISSES) {
        router_str(o, ",\"est\":\"measured\"");
    }
    if (m->flags & LG_MODEL_F_BY_CLASS) {
        /* what a request of its class waits for there (router_by_class) */
        ROUTER_PUT_NUM(o, "class_inflight", m->class_inflight);
        if (m->class_slot_wait_ms > 0) {
            ROUTER_PUT_ROUND(o, "class_slot_wait_ms", m->class_slot_wait_ms, 1);
        }
        if (m->class_work_ahead_ms >= 1) {
            ROUTER_PUT_ROUND(o, "class_work_ahead_ms", m->class_work_ahead_ms, 1);
        }
        if (m->class_lower_prefill_ms >= 1) {
            ROUTER_PUT_ROUND(o, "class_lower_prefill_ms", m->class_lower_prefill_ms, 1);
        }
    }
}

/* Names are config-validated ([A-Za-z0-9._-]), so they need no escaping. */
static void
router_explain_one(struct router_buf *o, const struct lg_router *r, const struct router_pick *pk,
                   size_t i, double kib)
{
    const struct lg_backend_view *v = &pk->v[i];

    router_str(o, o->len > 1 ? ",{\"backend\":\"" : "{\"backend\":\"");
    router_str(o, v->name);
    router_put_num_pre(o, "\",\"inflight\":", 13, v->inflight); /* an integer: its digits */
    ROUTER_PUT_ROUND(o, "foreign", v->foreign, 100);
    if (!(v->flags & LG_VIEW_F_STALE)) {
        ROUTER_PUT_NUM(o, "waiting", v->engine_waiting);
        ROUTER_PUT_NUM(o, "running", v->engine_running);
        ROUTER_PUT_NUM(o, "scrape_age_ms", (double)(v->engine_age_ns / LG_NS_PER_MS));
        if (v->flags & LG_VIEW_F_REPORTED) {
            router_str(o, ",\"load_from\":\"report\"");
        }
        if (v->engine_kv_usage >= 0) {
            ROUTER_PUT_ROUND(o, "kv", v->engine_kv_usage, 1000);
        }
    } else {
        router_str(o, ",\"scrape\":\"stale\"");
    }
    if (v->capacity > 0) {
        ROUTER_PUT_ROUND(o, "slots", v->capacity, 10);
        if (v->flags & LG_VIEW_F_CAP_GUESS) {
            router_str(o, ",\"slots_guessed\":true");
        }
    }
    ROUTER_PUT_ROUND(o, "ttft_ms", v->ttft_fixed_ms + v->ttft_ms_per_kib * kib, 10);
    ROUTER_PUT_ROUND(o, "itl_ms", v->itl_ms, 10);
    if (v->itl_own_ms >= 0 && fabs(v->itl_own_ms - v->itl_ms) >= 0.05 * v->itl_ms) {
        ROUTER_PUT_ROUND(o, "itl_own_ms", v->itl_own_ms, 10);
    }
    if (v->slot_wait_ms > 0) {
        ROUTER_PUT_ROUND(o, "slot_wait_ms", v->slot_wait_ms, 1);
    }
    router_explain_model(o, v, &pk->m[i], kib);
    if (v->pending > 0) {
        ROUTER_PUT_ROUND(o, "pending_age_ms", v->pending_age_ms, 1);
        if (v->work_ahead_ms >= 1) {
            ROUTER_PUT_ROUND(o, "work_ahead_ms", v->work_ahead_ms, 1);
        }
    }
    if (v->flags & LG_VIEW_F_HALF_OPEN) {
        router_str(o, ",\"half_open\":true");
    }
    if (v->flags & LG_VIEW_F_RAMPING) {
        ROUTER_PUT_ROUND(o, "ramp", v->ramp, 100);
    }
    if (pk->dropped[i] != NULL) {
        router_str(o, ",\"filtered\":\"");
        router_str(o, pk->dropped[i]);
        router_raw(o, "\"}", 2);
        return;
    }
    /* router_put_num_pre: router_dec's text, in place where it can */
    router_put_num_pre(o, ",\"score\":[", sizeof(",\"score\":[") - 1, pk->cost[i]);
    for (size_t s = 1; s < r->nstages; s++) {
        router_put_num_pre(o, ",", 1, pk->cost[s * pk->cap + i]);
    }
    router_raw(o, "]", 1);
    ROUTER_PUT_ROUND(o, "total", pk->total[i], 100);
    router_raw(o, "}", 1);
}

/* ---- picking ------------------------------------------------------------ */

/* What the estimators learn from the pick's first token: the model's and the
 * measured terms' predictions for it (attempt.c compares them). */
static void
router_learn(const struct lg_backend_view *v, const struct lg_engine_model_view *m, double kib,
             struct lg_route_result *out)
{
    out->model_scale = m->scale;
    out->prefill_ms = m->measured_ms_per_kib * kib;
    if (m->measured_ms >= 0) {
        out->meas_pred_ms = m->measured_ms + out->prefill_ms;
    }
    if (m->wait_ms >= 0) {
        out->model_pred_ms = router_model_ms(m, kib);
        if (v->load + 1 <= v->capacity) {
            /* its wait, the fixed part of its step's prefill left out, and
             * a chunked prefill's further steps: what the first token takes
             * beyond it is the prefill to learn */
            out->model_ms = LG_MAX(m->wait_ms - m->prefill_fixed_ms, 0.0)
                            + lg_est_chunks_ms(m->prefill_chunk, m->decoding, m->step_ms,
                                               m->prefill_fixed_ms, kib);
        }
    }
}

/*
 * A backend whose engine serves by class and preempts a lower class for a
 * higher one (engine_priority "preempt"): the model view says what delays a
 * request of class cls there, ours of its class and above
 * (lg_backend_class_read()); the engine model, which runs every request
 * there in arrival order, and the measured terms, learnt at the whole load,
 * step aside.
 */
static void
router_by_class(const struct lg_backend *b, uint64_t now_ns, unsigned cls,
                const struct lg_backend_view *v, struct lg_engine_model_view *m)
{
    struct lg_backend_by_class k;

    lg_backend_class_read(b, now_ns, cls, v->capacity, v->itl_ms, &k);
    m->flags = (m->flags & ~LG_MODEL_F_MISSES) | LG_MODEL_F_BY_CLASS;
    m->wait_ms = -1;
    m->joined = 0;
    m->class_inflight = k.inflight;
    m->class_pending = k.pending;
    m->class_pending_age_ms = k.pending_age_ms;
    m->class_work_ahead_ms = k.work_ahead_ms;
    m->class_slot_wait_ms = k.slot_wait_ms;
    m->class_lower_prefill_ms = k.lower_prefill_ms;
}

/*
 * Lends each candidate's engine model to a stage that asked for it
 * (lg_plugin.lends_model), and hides it from one that did not.
 */
static void
router_lend_model(struct router_pick *pk, bool lend)
{
    for (size_t i = 0; i < pk->n; i++) {
        pk->v[i].model = lend ? &pk->m[i] : NULL;
    }
}


static pthread_key_t router_arrays_key;
static pthread_once_t router_arrays_once = PTHREAD_ONCE_INIT;
static __thread struct router_pick *router_arrays_mine; /* owned through the key */

static void
router_arrays_free(void *p)
{
    free(p);
}

static void
router_arrays_key_new(void)
{
    /* a thread that ends frees its arrays */
    LG_BUG_ON(pthread_key_create(&router_arrays_key, router_arrays_free) != 0);
}

/*
 * Lays out the arrays for cap candidates after the struct at base (NULL:
 * only measures); returns the bytes the whole takes.
 */
static size_t
router_arrays_layout(struct router_pick *pk, char *base, size_t cap)
{
    size_t off = sizeof(*pk);

#define ROUTER_CARVE(field, count)                              \
    do {                                                        \
        pk->field = base != NULL ? (void *)(base + off) : NULL; \
        off += ((count) * sizeof(*pk->field) + 15) / 16 * 16;   \
    } while (0)
    pk->cap = cap;
    ROUTER_CARVE(v, cap);
    ROUTER_CARVE(m, cap);
    ROUTER_CARVE(cost, cap * LG_ROUTER_MAX_STAGES);
    ROUTER_CARVE(total, cap);
    ROUTER_CARVE(c, cap);
    ROUTER_CARVE(b, cap);
    ROUTER_CARVE(vp, cap);
    ROUTER_CARVE(dropped, cap);
    ROUTER_CARVE(idx, cap);
    ROUTER_CARVE(vs, cap);
    ROUTER_CARVE(keep, cap);
#undef ROUTER_CARVE
    return off;
}

/*
 * This thread's arrays, with room for a route of n backends: allocated the
 * first time (for at least 64), reallocated only for a route longer than
 * any before. Never re-entered: a pick calls no pick.
 */
static struct router_pick *
router_pick_arrays(size_t n)
{
    struct router_pick *pk = router_arrays_mine, measure;

    if (__builtin_expect(pk != NULL && pk->cap >= n, 1)) {
        return pk;
    }
    pthread_once(&router_arrays_once, router_arrays_key_new);
    free(pk);
    n = LG_MAX(n, (size_t)64);
    pk = lg_xmalloc(router_arrays_layout(&measure, NULL, n));
    router_arrays_layout(pk, (char *)pk, n);
    router_arrays_mine = pk;
    pthread_setspecific(router_arrays_key, pk);
    return pk;
}

static double
router_sane_cost(double c)
{
    if (isnan(c)) {
        return 1e12; /* a broken score must not win */
    }
    return c < 0 ? 0 : LG_MIN(c, 1e12);
}

/* Indices of still-scored candidates into idx; returns their count. */
static size_t
router_live(const struct router_pick *pk, size_t *idx)
{
    size_t m = 0;

    for (size_t i = 0; i < pk->n; i++) {
        if (pk->dropped[i] == NULL) {
            idx[m++] = i;
        }
    }
    return m;
}

/* Runs the filters; a filter that would drop every candidate is ignored. */
static void
router_filter(struct lg_router *r, const struct lg_route_info *info, struct router_pick *pk)
{
    for (size_t s = 0; s < r->nstages; s++) {
        struct router_stage *st = &r->stages[s];
        size_t *idx = pk->idx, m = router_live(pk, idx), kept = 0;
        const struct lg_backend_view **vs = pk->vs;
        unsigned char *keep = pk->keep;

        if (!st->has_filter || st->shadow || m <= 1) {
            continue;
        }
        for (size_t k = 0; k < m; k++) {
            vs[k] = pk->vp[idx[k]];
            keep[k] = 1;
        }
        router_lend_model(pk, st->plugin->lends_model);
        st->plugin->ops->filter(st->state, info, vs, m, keep);
        for (size_t k = 0; k < m; k++) {
            kept += keep[k] != 0;
        }
        if (kept == 0) {
            continue;
        }
        for (size_t k = 0; k < m; k++) {
            if (!keep[k]) {
                pk->dropped[idx[k]] = st->plugin->desc->name;
            }
        }
    }
}

static void
router_score(struct lg_router *r, const struct lg_route_info *info, struct router_pick *pk)
{
    size_t *idx = pk->idx, m = router_live(pk, idx);
    const struct lg_backend_view **vs = pk->vs;
    double *c = pk->c;

    for (size_t k = 0; k < m; k++) {
        vs[k] = pk->vp[idx[k]];
    }
    for (size_t i = 0; i < pk->n; i++) {
        pk->total[i] = 0;
        for (size_t s = 0; s < r->nstages; s++) {
            pk->cost[s * pk->cap + i] = NAN;
        }
    }
    for (size_t s = 0; s < r->nstages; s++) {
        struct router_stage *st = &r->stages[s];

        for (size_t k = 0; k < m; k++) {
            c[k] = 0;
        }
        pk->why[s] = NULL;
        router_lend_model(pk, st->plugin->lends_model);
        st->plugin->ops->score(st->state, info, vs, m, c, &pk->why[s]);
        for (size_t k = 0; k < m; k++) {
            if (st->shadow) {
                pk->cost[s * pk->cap + idx[k]] = router_sane_cost(c[k]); /* shown, not counted */
                continue;
            }
            pk->cost[s * pk->cap + idx[k]] = st->weight * router_sane_cost(c[k]);
            pk->total[idx[k]] += pk->cost[s * pk->cap + idx[k]];
        }
    }
}

/*
 * Slow start: a ramping backend takes a request with probability ramp, and
 * only while it has fewer in flight than ramp times what the others have per
 * unit of weight (at least one). The probability alone bounds its share of
 * all traffic, not of a fair share: where it wins most picks (idle, a cost
 * within another's tolerance) it would take ramp x all requests, several
 * times its fair share in a large fleet, with its cache cold. The in-flight
 * bound holds it near ramp x its fair share whatever the policy.
 * It sits the request out after the stages have seen and scored it, not
 * before: a stage that keeps state per backend must not take a backend
 * sitting out for one that is gone (prefix_affinity would hand its prefixes
 * to others, a cache miss each, and later take them back). If every other
 * candidate is filtered out, it stays.
 */
static void
router_thin(struct router_pick *pk)
{
    unsigned char *out = pk->keep; /* the filters are done with it */
    size_t left = 0;
    double inflight = 0, weight = 0;

    for (size_t i = 0; i < pk->n; i++) {
        if (pk->dropped[i] == NULL && pk->v[i].ramp >= 1.0) {
            inflight += pk->v[i].inflight;
            weight += pk->v[i].weight;
        }
    }
    for (size_t i = 0; i < pk->n; i++) {
        double u = (double)(lg_plugin_random() >> 11) / 9007199254740992.0;
        const struct lg_backend_view *v = &pk->v[i];
        double cap = weight > 0 ? v->ramp * v->weight * inflight / weight : 0;

        out[i] = pk->dropped[i] == NULL && v->ramp < 1.0
                 && (u >= v->ramp || (double)v->inflight >= LG_MAX(1.0, cap));
        left += pk->dropped[i] == NULL && !out[i];
    }
    for (size_t i = 0; i < pk->n && left > 0; i++) {
        if (out[i]) {
            pk->dropped[i] = "slow_start";
        }
    }
}

/* Lowest total; ties go to the lowest in-flight, then round robin. */
static ssize_t
router_best(struct lg_router *r, const struct router_pick *pk)
{
    size_t start = (size_t)__atomic_fetch_add(&r->rr_next, 1, __ATOMIC_RELAXED);
    ssize_t best = -1;

    for (size_t k = 0; k < pk->n; k++) {
        size_t i = (start + k) % pk->n;
        double eps;

        if (pk->dropped[i] != NULL) {
            continue;
        }
        if (best < 0) {
            best = (ssize_t)i;
            continue;
        }
        eps = 1e-9 * LG_MAX(1.0, fabs(pk->total[best]));
        if (pk->total[i] < pk->total[best] - eps
            || (pk->total[i] <= pk->total[best] + eps
                && pk->v[i].inflight < pk->v[(size_t)best].inflight)) {
            best = (ssize_t)i;
        }
    }
    return best;
}

/* The reason of the stage that separated the winner from the runner-up most. */
static const char *
router_reason(const struct lg_router *r, const struct router_pick *pk, size_t best)
{
    ssize_t second = -1;
    double spread = 0;
    const char *why = NULL;

    for (size_t i = 0; i < pk->n; i++) {
        if (i != best && pk->dropped[i] == NULL
            && (second < 0 || pk->total[i] < pk->total[(size_t)second])) {
            second = (ssize_t)i;
        }
    }
    if (second < 0) {
        return "only_candidate";
    }
    for (size_t s = 0; s < r->nstages; s++) {
        double d = pk->cost[s * pk->cap + (size_t)second] - pk->cost[s * pk->cap + best];

        if (r->stages[s].shadow) {
            continue;
        }
        if (d > spread) {
            spread = d;
            why = pk->why[s];
        }
    }
    if (why == NULL) {
        return pk->v[best].inflight < pk->v[(size_t)second].inflight ? "tie_least_inflight"
                                                                     : "tie_round_robin";
    }
    return why;
}

/*
 * The access log's explanations are written straight into a buffer of
 * LG_ROUTE_EXPLAIN_BYTES that the request keeps until its line; a thread
 * keeps up to ROUTER_EXPLAIN_KEEP of those given back (a worker's requests
 * in flight), so a pick neither allocates nor copies (a malloc, a free and a
 * copy a request before). Freed when the thread ends.
 */
#define ROUTER_EXPLAIN_KEEP 64

struct router_explain_pool {
    unsigned n;
    char *buf[ROUTER_EXPLAIN_KEEP]; /* owned */
};

static pthread_key_t router_explain_key;
static pthread_once_t router_explain_once = PTHREAD_ONCE_INIT;
static __thread struct router_explain_pool *router_explain_mine; /* owned through the key */

static void
router_explain_pool_free(void *arg)
{
    struct router_explain_pool *pool = arg;

    for (unsigned i = 0; i < pool->n; i++) {
        free(pool->buf[i]);
    }
    free(pool);
}

static void
router_explain_key_new(void)
{
    LG_BUG_ON(pthread_key_create(&router_explain_key, router_explain_pool_free) != 0);
}

static char *
router_explain_take(void)
{
    struct router_explain_pool *pool = router_explain_mine;

    if (pool != NULL && pool->n > 0) {
        return pool->buf[--pool->n];
    }
    return lg_xmalloc(LG_ROUTE_EXPLAIN_BYTES);
}

static void
router_explain_give(char *buf)
{
    struct router_explain_pool *pool = router_explain_mine;

    if (__builtin_expect(pool == NULL, 0)) {
        pthread_once(&router_explain_once, router_explain_key_new);
        pool = lg_xcalloc(1, sizeof(*pool));
        router_explain_mine = pool;
        pthread_setspecific(router_explain_key, pool);
    }
    if (pool->n < ROUTER_EXPLAIN_KEEP) {
        pool->buf[pool->n++] = buf;
    } else {
        free(buf);
    }
}

static void
router_explain(const struct lg_router *r, const struct router_pick *pk, double kib,
               struct lg_route_result *out)
{
    size_t size = LG_MAX(out->explain_max, (size_t)LG_ROUTE_EXPLAIN_BYTES);
    bool kept = size == LG_ROUTE_EXPLAIN_BYTES;
    char *buf = kept ? router_explain_take() : lg_xmalloc(size);
    struct router_buf o = { buf, 0, size - 16, false };
    size_t shown = 0;

    router_raw(&o, "[", 1);
    for (size_t i = 0; i < pk->n; i++) {
        size_t before = o.len;

        router_explain_one(&o, r, pk, i, kib);
        if (o.full) {
            o.len = before;
            break;
        }
        shown++;
    }
    /* the reserve of 16 bytes always fits what closes the list (a list
     * that filled the rest to its last byte lost its "]" here before);
     * the list ends before the buffer's last byte, the NUL's */
    o.cap += 16;
    o.full = false;
    if (shown < pk->n) {
        router_str(&o, shown ? ",{\"more\":" : "{\"more\":");
        router_u64(&o, pk->n - shown);
        router_raw(&o, "}", 1);
    }
    router_raw(&o, "]", 1);
    buf[o.len] = '\0';
    lg_route_result_clear(out);
    out->explain = buf;
    out->explain_len = o.len;
    out->explain_kept = kept;
}

void
lg_route_result_clear(struct lg_route_result *res)
{
    if (res->explain == NULL) {
        return; /* the access log is off: nothing was built */
    }
    if (res->explain_kept) {
        router_explain_give(res->explain);
    } else {
        free(res->explain);
    }
    res->explain = NULL;
    res->explain_len = 0;
    res->explain_kept = false;
}

int
lg_router_pick(struct lg_router *r, const struct lg_model_route *route,
               const struct lg_route_req *req, const struct lg_tried *tried,
               struct lg_route_result *out)
{
    uint64_t now = lg_now_ns(), soonest = UINT64_MAX;
    struct lg_est_prior prior;
    struct lg_route_info info;
    struct router_pick *pk = router_pick_arrays(route->n);
    size_t nramp = 0, nfull = 0;
    ssize_t best;

    out->backend = NULL;
    out->policy = r->policy;
    lg_route_result_clear(out);
    out->wait_ms = 0;
    out->ahead_ms = 0;
    out->service_ms = 0;
    out->model_ms = -1;
    out->model_pred_ms = -1;
    out->meas_pred_ms = -1;
    out->model_scale = 1;
    out->prefill_ms = 0;
    out->load = -1;
    out->queued = false;
    out->retry_after_ms = 0;
    out->probe = false;
    out->full = false;
    lg_route_read_prior(route, &prior);
    router_info(r, req, tried, &info);
    if (route->n > 1) {
        lg_backend_view_reserve(route->n);
    }

    pk->n = 0;
    for (size_t i = 0; i < route->n; i++) {
        struct lg_backend *b = route->backends[i];

        if (lg_tried_has(tried, i)) {
            continue;
        }
        if (!lg_backend_is_available(b, now)) {
            soonest = LG_MIN(soonest, lg_backend_available_at(b, now, r->down_retry_ns));
            continue;
        }
        uint32_t max = lg_backend_conf(b)->max_inflight;

        if (max != 0 && lg_backend_inflight_from(b, req->cls) >= max) {
            nfull++;
            continue;
        }
        pk->b[pk->n] = b;
        if (route->n > 1) {
            lg_backend_view_get(b, now, &prior, r->scrape_interval_ns, r->slow_start_ns,
                                &pk->v[pk->n], &pk->m[pk->n]);
        } else {
            /* the only backend: the previous pick's request started there
             * (a change), so its view is never reused; the cache's keys
             * would cost without a hit */
            lg_backend_view_fill(b, now, &prior, r->scrape_interval_ns, r->slow_start_ns,
                                 &pk->v[pk->n], &pk->m[pk->n]);
        }
        if (lg_backend_conf(b)->engine_priority == LG_ENGINE_PRIORITY_PREEMPT) {
            router_by_class(b, now, req->cls, &pk->v[pk->n], &pk->m[pk->n]);
        }
        pk->vp[pk->n] = &pk->v[pk->n];
        pk->dropped[pk->n] = NULL;
        nramp += pk->v[pk->n].ramp < 1.0;
        pk->n++;
    }
    if (pk->n == 0) {
        if (nfull > 0) {
            out->reason = "all_backends_at_max_inflight";
            out->retry_after_ms = 1000;
            out->full = true;
        } else if (lg_tried_count(tried) > 0 && soonest == UINT64_MAX) {
            out->reason = "all_backends_tried";
        } else {
            out->reason = "no_available_backend";
            out->retry_after_ms =
                soonest == UINT64_MAX
                    ? 1000
                    : (uint32_t)LG_MIN((soonest - now) / LG_NS_PER_MS, 3600 * 1000);
        }
        return LG_EBUSY;
    }

    router_filter(r, &info, pk);
    router_score(r, &info, pk);
    if (nramp > 0 && nramp < pk->n) {
        router_thin(pk);
    }
    for (;;) {
        best = router_best(r, pk);
        if (best < 0) {
            out->reason = "half_open_probe_busy";
            out->retry_after_ms = 1000;
            if (!out->no_explain) {
                router_explain(r, pk, (double)req->prompt_bytes / 1024.0, out);
            }
            return LG_EBUSY;
        }
        if (!(pk->v[best].flags & LG_VIEW_F_HALF_OPEN) || lg_backend_claim_probe(pk->b[best])) {
            break;
        }
        pk->dropped[best] = "probe_busy"; /* another request probes it: next best */
    }
    out->backend = pk->b[best];
    out->probe = (pk->v[best].flags & LG_VIEW_F_HALF_OPEN) != 0;
    out->reason = out->probe ? "half_open_probe" : router_reason(r, pk, (size_t)best);
    out->service_ms =
        pk->v[best].ttft_fixed_ms + pk->v[best].ttft_ms_per_kib * (double)req->prompt_bytes / 1024.0;
    out->itl_ms = pk->v[best].itl_ms;
    {
        const struct lg_backend_view *w = &pk->v[best];
        const struct lg_engine_model_view *k = &pk->m[best];
        bool by_class = (k->flags & LG_MODEL_F_BY_CLASS) != 0; /* router_by_class */
        double load = by_class ? k->class_inflight + w->foreign : w->load;

        /* only a capacity seen with a queue says a request will wait for a
         * slot: with a guess (the most it was seen running, which a replica
         * that gets few requests keeps low) every request to it would count
         * as queued, and its TTFT would never be learnt; by class, what waits
         * ahead of it is its class and above */
        if (w->capacity > 0 && !(w->flags & LG_VIEW_F_CAP_GUESS)) {
            out->wait_ms = lg_est_slot_wait_ms(by_class ? k->class_slot_wait_ms : w->slot_wait_ms,
                                               load, w->capacity, w->hold_ms,
                                               !by_class && w->inflight > 0 ? w->inflight_age_ms
                                                                            : -1);
            out->queued = load + 1 > w->capacity;
        }
        out->ahead_ms = by_class ? k->class_work_ahead_ms : w->work_ahead_ms;
    }
    out->load = pk->v[best].load;
    router_learn(&pk->v[best], &pk->m[best], (double)req->prompt_bytes / 1024.0, out);
    if (!out->no_explain) {
        router_explain(r, pk, (double)req->prompt_bytes / 1024.0, out);
    }
    return LG_OK;
}

void
lg_router_note_result(struct lg_router *r, const struct lg_model_route *route,
                      const struct lg_route_req *req, struct lg_backend *b, int status,
                      uint64_t ttft_ns, uint64_t total_ns)
{
    struct lg_backend_view v;
    struct lg_engine_model_view m;
    struct lg_est_prior prior;
    struct lg_route_info info;
    bool any = false;

    for (size_t s = 0; s < r->nstages; s++) {
        any |= r->stages[s].has_on_result;
    }
    if (!any || route == NULL) {
        return;
    }
    lg_route_read_prior(route, &prior);
    router_info(r, req, NULL, &info);
    lg_backend_view_fill(b, lg_now_ns(), &prior, r->scrape_interval_ns, r->slow_start_ns, &v, &m);
    for (size_t s = 0; s < r->nstages; s++) {
        const struct router_stage *st = &r->stages[s];

        if (st->has_on_result) {
            v.model = st->plugin->lends_model ? &m : NULL;
            st->plugin->ops->on_result(st->state, &info, &v, status, ttft_ns, total_ns);
        }
    }
}
