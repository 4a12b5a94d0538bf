/*
 * router.c: candidate filtering, the policy pipeline and the explanation of
 * each decision (see router.h).
 *
 * Owns: struct lg_router (one per fleet) and each stage's policy state.
 * Borrows: backends of the fleet for the duration of lg_router_pick(); the
 * registered policies (plugin.c keeps them loaded).
 * Hot path: no allocation and no lock: views, costs and candidate lists live
 * on the stack, bounded by LG_ROUTER_MAX_CANDIDATES; backend state is read
 * through lock-free snapshots (backend.c).
 */
#include "route/router.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <jansson.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_view.h"
#include "fleet/fleet.h"
#include "route/plugin.h"

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
};

/* ---- construction ------------------------------------------------------- */

static int
router_add_stage(struct lg_router *r, const char *policy, double weight, json_t *options,
                 const char *where)
{
    const struct lg_plugin *p = lg_plugin_find(policy);
    struct router_stage *s;
    char err[512] = "", names[512];
    char *text;
    int rc;

    if (p == NULL) {
        lg_plugin_names(names, sizeof(names));
        LG_ERROR("%s: policy \"%s\" is not known (known: %s)", where, policy, names);
        return LG_EINVAL;
    }
    if (r->nstages >= LG_ROUTER_MAX_STAGES) {
        LG_ERROR("%s: at most %d pipeline stages", where, LG_ROUTER_MAX_STAGES);
        return LG_EINVAL;
    }
    text = options ? json_dumps(options, JSON_COMPACT) : NULL;
    s = &r->stages[r->nstages];
    rc = p->ops->create(lg_plugin_host(), text ? text : "{}", &s->state, err, sizeof(err));
    free(text);
    if (rc != 0) {
        LG_ERROR("%s/options%s%s", where, err[0] == '/' ? "" : ": ",
                 err[0] ? err : "the policy refused its options");
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

/* The options of a stage: its own, else routing.options[policy]. */
static json_t *
router_options(const struct lg_routing_conf *rc, const char *policy, json_t *own)
{
    json_t *o;

    if (own != NULL) {
        return own;
    }
    o = rc->policy_options ? json_object_get(rc->policy_options, policy) : NULL;
    return json_is_object(o) ? o : NULL;
}

int
lg_router_new(const struct lg_config *conf, struct lg_router **out)
{
    const struct lg_routing_conf *rc = &conf->routing;
    struct lg_router *r = lg_xcalloc(1, sizeof(*r));
    bool want_session = rc->session_header != NULL, has_session = false;
    char where[96], label[256] = "";
    size_t off = 0;
    int ret = LG_OK;

    for (size_t i = 0; i < rc->nplugins && ret == LG_OK; i++) {
        char err[512];

        if (lg_plugin_load(rc->plugins[i], err, sizeof(err)) != LG_OK) {
            LG_ERROR("/routing/plugins/%zu: %s", i, err);
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
        ret = router_add_stage(r, "session_affinity", 1.0,
                               router_options(rc, "session_affinity", NULL),
                               "/routing/session_header");
    }
    for (size_t i = 0; i < rc->npipeline && ret == LG_OK; i++) {
        const struct lg_route_stage_conf *sc = &rc->pipeline[i];

        snprintf(where, sizeof(where), "/routing/pipeline/%zu", i);
        ret = router_add_stage(r, sc->policy, sc->weight,
                               router_options(rc, sc->policy, sc->options), where);
    }
    if (ret == LG_OK && rc->npipeline == 0) {
        const char *policy = rc->policy ? rc->policy : "ttft";

        ret = router_add_stage(r, policy, 1.0, router_options(rc, policy, NULL), "/routing/policy");
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

/* ---- candidates --------------------------------------------------------- */

static bool
router_is_candidate(const struct lg_backend *b, size_t i, uint64_t tried_mask, uint64_t now)
{
    if (i < 64 && (tried_mask & (1ull << i))) {
        return false;
    }
    if (!lg_backend_is_available(b, now)) {
        return false;
    }
    return b->conf.max_inflight == 0 || lg_backend_inflight(b) < b->conf.max_inflight;
}

bool
lg_router_has_candidate(const struct lg_model_route *route, uint64_t tried_mask)
{
    uint64_t now = lg_now_ns();

    if (route == NULL) {
        return false;
    }
    for (size_t i = 0; i < route->n; i++) {
        if (router_is_candidate(route->backends[i], i, tried_mask, now)) {
            return true;
        }
    }
    return false;
}

static void
router_info(const struct lg_router *r, const struct lg_route_req *req, uint64_t tried_mask,
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
    info->attempt = (uint32_t)__builtin_popcountll(tried_mask) + 1;
    info->prefix_len = req->prefix_hash ? LG_MIN(req->prompt_bytes, r->prefix_bytes) : 0;
}

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

/* A JSON number with at most three decimals (trailing zeros dropped); null if not finite. */
static void
router_dec(struct router_buf *o, double v)
{
    char frac[4];
    uint64_t whole, milli;
    int n = 3;

    if (!isfinite(v)) {
        router_raw(o, "null", 4);
        return;
    }
    if (v < 0) {
        router_raw(o, "-", 1);
        v = -v;
    }
    if (v >= 1e15) {
        router_u64(o, UINT64_C(1000000000000000)); /* a cost this large only says "huge" */
        return;
    }
    milli = (uint64_t)llround(v * 1000.0);
    whole = milli / 1000;
    milli %= 1000;
    router_u64(o, whole);
    if (milli == 0) {
        return;
    }
    frac[0] = '.';
    frac[1] = (char)('0' + milli / 100);
    frac[2] = (char)('0' + milli / 10 % 10);
    frac[3] = (char)('0' + milli % 10);
    while (frac[n] == '0') {
        n--;
    }
    router_raw(o, frac, (size_t)n + 1);
}

static inline void
router_put_num(struct router_buf *o, const char *key, double v)
{
    router_raw(o, ",\"", 2);
    router_str(o, key);
    router_raw(o, "\":", 2);
    router_dec(o, v);
}

/* A request's TTFT there by the engine model (engine_model_ms >= 0): the
 * wait for a step to admit it, and its own prefill. */
static double
router_model_ms(const struct lg_backend_view *v, double kib)
{
    return v->engine_model_ms + v->prefill_ms_per_kib * kib;
}

/* Names are config-validated ([A-Za-z0-9._-]), so they need no escaping. */
static void
router_explain_one(struct router_buf *o, const struct lg_backend_view *v, double kib,
                   const char *dropped_by, const double *costs, size_t nstages, size_t stride,
                   double total)
{
    router_str(o, o->len > 1 ? ",{\"backend\":\"" : "{\"backend\":\"");
    router_str(o, v->name);
    router_raw(o, "\",\"inflight\":", 13);
    router_u64(o, v->inflight);
    router_put_num(o, "foreign", round(v->foreign * 100) / 100);
    if (!(v->flags & LG_VIEW_F_STALE)) {
        router_put_num(o, "waiting", v->engine_waiting);
        router_put_num(o, "running", v->engine_running);
        router_put_num(o, "scrape_age_ms", (double)(v->engine_age_ns / LG_NS_PER_MS));
        if (v->engine_kv_usage >= 0) {
            router_put_num(o, "kv", round(v->engine_kv_usage * 1000) / 1000);
        }
    } else {
        router_str(o, ",\"scrape\":\"stale\"");
    }
    if (v->capacity > 0) {
        router_put_num(o, "slots", round(v->capacity * 10) / 10);
        if (v->flags & LG_VIEW_F_CAP_GUESS) {
            router_str(o, ",\"slots_guessed\":true");
        }
    }
    router_put_num(o, "ttft_ms", round((v->ttft_fixed_ms + v->ttft_ms_per_kib * kib) * 10) / 10);
    router_put_num(o, "itl_ms", round(v->itl_ms * 10) / 10);
    if (v->itl_own_ms >= 0 && fabs(v->itl_own_ms - v->itl_ms) >= 0.05 * v->itl_ms) {
        router_put_num(o, "itl_own_ms", round(v->itl_own_ms * 10) / 10);
    }
    if (v->slot_wait_ms > 0) {
        router_put_num(o, "slot_wait_ms", round(v->slot_wait_ms));
    }
    if (v->engine_model_ms >= 0) {
        router_put_num(o, "model_ms", round(router_model_ms(v, kib) * 10) / 10);
        router_put_num(o, "step_ms", round(v->step_ms * 10) / 10);
        if (v->engine_model_slots != v->capacity) {
            router_put_num(o, "model_slots", round(v->engine_model_slots * 10) / 10);
        }
        router_put_num(o, "prefill_ms",
                       round((v->prefill_fixed_ms + v->prefill_ms_per_kib * kib) * 10) / 10);
        if (fabs(v->engine_model_scale - 1) >= 0.005) {
            router_put_num(o, "model_scale", round(v->engine_model_scale * 100) / 100);
        }
        if (v->engine_model_joined > 0) {
            router_put_num(o, "model_joined", v->engine_model_joined);
        }
    }
    if (v->measured_ms >= 0) {
        router_put_num(o, "measured_ms",
                       round((v->measured_ms + v->measured_ms_per_kib * kib) * 10) / 10);
    }
    if (v->engine_model_err > 0 || v->measured_err > 0) {
        /* how far each has been off there lately (rms of the log ratio) */
        router_put_num(o, "model_err", round(v->engine_model_err * 100) / 100);
        router_put_num(o, "measured_err", round(v->measured_err * 100) / 100);
    }
    if (v->flags & LG_VIEW_F_MODEL_MISSES) {
        router_str(o, ",\"est\":\"measured\"");
    }
    if (v->pending > 0) {
        router_put_num(o, "pending_age_ms", round(v->pending_age_ms));
        if (v->work_ahead_ms >= 1) {
            router_put_num(o, "work_ahead_ms", round(v->work_ahead_ms));
        }
    }
    if (v->flags & LG_VIEW_F_HALF_OPEN) {
        router_str(o, ",\"half_open\":true");
    }
    if (v->flags & LG_VIEW_F_RAMPING) {
        router_put_num(o, "ramp", round(v->ramp * 100) / 100);
    }
    if (dropped_by != NULL) {
        router_str(o, ",\"filtered\":\"");
        router_str(o, dropped_by);
        router_raw(o, "\"}", 2);
        return;
    }
    router_str(o, ",\"score\":[");
    for (size_t s = 0; s < nstages; s++) {
        if (s > 0) {
            router_raw(o, ",", 1);
        }
        router_dec(o, costs[s * stride]);
    }
    router_raw(o, "]", 1);
    router_put_num(o, "total", round(total * 100) / 100);
    router_raw(o, "}", 1);
}

/* ---- picking ------------------------------------------------------------ */

struct router_pick {
    size_t n; /* candidates */
    struct lg_backend *b[LG_ROUTER_MAX_CANDIDATES];
    struct lg_backend_view v[LG_ROUTER_MAX_CANDIDATES];
    const struct lg_backend_view *vp[LG_ROUTER_MAX_CANDIDATES];
    const char *dropped[LG_ROUTER_MAX_CANDIDATES];               /* by which stage; NULL: scored */
    double cost[LG_ROUTER_MAX_STAGES][LG_ROUTER_MAX_CANDIDATES]; /* weighted; a shadow's as is */
    double total[LG_ROUTER_MAX_CANDIDATES];
    const char *why[LG_ROUTER_MAX_STAGES];
};

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
        size_t idx[LG_ROUTER_MAX_CANDIDATES], m = router_live(pk, idx), kept = 0;
        const struct lg_backend_view *vs[LG_ROUTER_MAX_CANDIDATES];
        unsigned char keep[LG_ROUTER_MAX_CANDIDATES];

        if (!st->has_filter || st->shadow || m <= 1) {
            continue;
        }
        for (size_t k = 0; k < m; k++) {
            vs[k] = pk->vp[idx[k]];
            keep[k] = 1;
        }
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
    size_t idx[LG_ROUTER_MAX_CANDIDATES], m = router_live(pk, idx);
    const struct lg_backend_view *vs[LG_ROUTER_MAX_CANDIDATES];
    double c[LG_ROUTER_MAX_CANDIDATES];

    for (size_t k = 0; k < m; k++) {
        vs[k] = pk->vp[idx[k]];
    }
    for (size_t i = 0; i < pk->n; i++) {
        pk->total[i] = 0;
        for (size_t s = 0; s < r->nstages; s++) {
            pk->cost[s][i] = NAN;
        }
    }
    for (size_t s = 0; s < r->nstages; s++) {
        struct router_stage *st = &r->stages[s];

        for (size_t k = 0; k < m; k++) {
            c[k] = 0;
        }
        pk->why[s] = NULL;
        st->plugin->ops->score(st->state, info, vs, m, c, &pk->why[s]);
        for (size_t k = 0; k < m; k++) {
            if (st->shadow) {
                pk->cost[s][idx[k]] = router_sane_cost(c[k]); /* shown, not counted */
                continue;
            }
            pk->cost[s][idx[k]] = st->weight * router_sane_cost(c[k]);
            pk->total[idx[k]] += pk->cost[s][idx[k]];
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
    bool out[LG_ROUTER_MAX_CANDIDATES];
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
        double d = pk->cost[s][(size_t)second] - pk->cost[s][best];

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

static void
router_explain(const struct lg_router *r, const struct router_pick *pk, double kib,
               struct lg_route_result *out)
{
    char stack[LG_ROUTE_EXPLAIN_BYTES];
    size_t size = out->explain_max > sizeof(stack) ? out->explain_max : sizeof(stack);
    char *buf = size > sizeof(stack) ? lg_xmalloc(size) : stack;
    struct router_buf o = { buf, 0, size - 16, false };
    size_t shown = 0;

    router_raw(&o, "[", 1);
    for (size_t i = 0; i < pk->n; i++) {
        size_t before = o.len;

        router_explain_one(&o, &pk->v[i], kib, pk->dropped[i], &pk->cost[0][i], r->nstages,
                           LG_ROUTER_MAX_CANDIDATES, pk->total[i]);
        if (o.full) {
            o.len = before;
            break;
        }
        shown++;
    }
    /* the reserve of 16 bytes always fits what closes the list (a list
     * that filled the rest to its last byte lost its "]" here before) */
    o.cap += 16;
    o.full = false;
    if (shown < pk->n) {
        router_str(&o, shown ? ",{\"more\":" : "{\"more\":");
        router_u64(&o, pk->n - shown);
        router_raw(&o, "}", 1);
    }
    router_raw(&o, "]", 1);
    /* an exact-size copy: requests keep it until their log line, idle connections nothing */
    free(out->explain);
    out->explain = lg_xmalloc(o.len + 1);
    memcpy(out->explain, buf, o.len);
    out->explain[o.len] = '\0';
    if (buf != stack) {
        free(buf);
    }
}

void
lg_route_result_clear(struct lg_route_result *res)
{
    free(res->explain);
    res->explain = NULL;
}

int
lg_router_pick(struct lg_router *r, const struct lg_model_route *route,
               const struct lg_route_req *req, uint64_t tried_mask, struct lg_route_result *out)
{
    uint64_t now = lg_now_ns(), soonest = UINT64_MAX;
    struct lg_est_prior prior;
    struct lg_route_info info;
    struct router_pick pk;
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
    router_info(r, req, tried_mask, &info);

    pk.n = 0;
    for (size_t i = 0; i < route->n && pk.n < LG_ROUTER_MAX_CANDIDATES; i++) {
        struct lg_backend *b = route->backends[i];

        if (i < 64 && (tried_mask & (1ull << i))) {
            continue;
        }
        if (!lg_backend_is_available(b, now)) {
            soonest = LG_MIN(soonest, lg_backend_available_at(b, now, r->down_retry_ns));
            continue;
        }
        if (b->conf.max_inflight != 0 && lg_backend_inflight(b) >= b->conf.max_inflight) {
            nfull++;
            continue;
        }
        pk.b[pk.n] = b;
        lg_backend_view_fill(b, now, &prior, r->scrape_interval_ns, r->slow_start_ns, &pk.v[pk.n]);
        pk.vp[pk.n] = &pk.v[pk.n];
        pk.dropped[pk.n] = NULL;
        nramp += pk.v[pk.n].ramp < 1.0;
        pk.n++;
    }
    if (pk.n == 0) {
        if (nfull > 0) {
            out->reason = "all_backends_at_max_inflight";
            out->retry_after_ms = 1000;
            out->full = true;
        } else if (tried_mask != 0 && soonest == UINT64_MAX) {
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

    router_filter(r, &info, &pk);
    router_score(r, &info, &pk);
    if (nramp > 0 && nramp < pk.n) {
        router_thin(&pk);
    }
    for (;;) {
        best = router_best(r, &pk);
        if (best < 0) {
            out->reason = "half_open_probe_busy";
            out->retry_after_ms = 1000;
            router_explain(r, &pk, (double)req->prompt_bytes / 1024.0, out);
            return LG_EBUSY;
        }
        if (!(pk.v[best].flags & LG_VIEW_F_HALF_OPEN) || lg_backend_claim_probe(pk.b[best])) {
            break;
        }
        pk.dropped[best] = "probe_busy"; /* another request probes it: next best */
    }
    out->backend = pk.b[best];
    out->probe = (pk.v[best].flags & LG_VIEW_F_HALF_OPEN) != 0;
    out->reason = out->probe ? "half_open_probe" : router_reason(r, &pk, (size_t)best);
    out->service_ms =
        pk.v[best].ttft_fixed_ms + pk.v[best].ttft_ms_per_kib * (double)req->prompt_bytes / 1024.0;
    out->itl_ms = pk.v[best].itl_ms;
    if (pk.v[best].capacity > 0 && !(pk.v[best].flags & LG_VIEW_F_CAP_GUESS)) {
        const struct lg_backend_view *w = &pk.v[best];

        /* only a capacity seen with a queue says a request will wait for a
         * slot: with a guess (the most it was seen running, which a replica
         * that gets few requests keeps low) every request to it would count
         * as queued, and its TTFT would never be learnt */
        out->wait_ms = lg_est_slot_wait_ms(w->slot_wait_ms, w->load, w->capacity, w->hold_ms,
                                           w->inflight > 0 ? w->inflight_age_ms : -1);
        out->queued = w->load + 1 > w->capacity;
    }
    out->ahead_ms = pk.v[best].work_ahead_ms;
    out->load = pk.v[best].load;
    out->model_scale = pk.v[best].engine_model_scale;
    out->prefill_ms = pk.v[best].measured_ms_per_kib * (double)req->prompt_bytes / 1024.0;
    if (pk.v[best].measured_ms >= 0) {
        out->meas_pred_ms = pk.v[best].measured_ms + out->prefill_ms;
    }
    if (pk.v[best].engine_model_ms >= 0) {
        out->model_pred_ms = router_model_ms(&pk.v[best], (double)req->prompt_bytes / 1024.0);
        if (pk.v[best].load + 1 <= pk.v[best].capacity) {
            /* its wait, the fixed part of its step's prefill left out: what
             * the first token takes beyond it is the prefill to learn */
            out->model_ms = LG_MAX(pk.v[best].engine_model_ms - pk.v[best].prefill_fixed_ms, 0.0);
        }
    }
    router_explain(r, &pk, (double)req->prompt_bytes / 1024.0, out);
    return LG_OK;
}

void
lg_router_note_result(struct lg_router *r, const struct lg_model_route *route,
                      const struct lg_route_req *req, struct lg_backend *b, int status,
                      uint64_t ttft_ns, uint64_t total_ns)
{
    struct lg_backend_view v;
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
    router_info(r, req, 0, &info);
    lg_backend_view_fill(b, lg_now_ns(), &prior, r->scrape_interval_ns, r->slow_start_ns, &v);
    for (size_t s = 0; s < r->nstages; s++) {
        const struct router_stage *st = &r->stages[s];

        if (st->has_on_result) {
            st->plugin->ops->on_result(st->state, &info, &v, status, ttft_ns, total_ns);
        }
    }
}
