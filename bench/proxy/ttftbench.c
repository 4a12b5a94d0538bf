/*
 * ttftbench.c: how fast the router decides, against the number of
 * candidates. For each fleet size it builds a real fleet (the configuration
 * loader, lg_router_fleet_new()) of N backends of one model with live state
 * as a busy fleet has it (an engine scrape each, learnt TTFT and gaps, a
 * pace, requests of ours in flight with their first tokens due, ends and
 * engine-model sequences, the model's prior) and times:
 *
 *   pick    lg_router_pick(): candidates, each one's view, the policy's
 *           score, the winner, the access log's explanation; what a request
 *           pays (every backend of the model is a candidate). A view whose
 *           backend did not change is reused for up to 1 ms (backend_view.c);
 *           with --changed K, K backends (all: every one) change before each
 *           pick, so their views are filled afresh
 *   views   lg_backend_view_fill() for every backend
 *   score   the policy's score() alone over views filled beforehand, all N
 *
 * Each figure is the median (and the fastest) of --batches batches, a batch
 * being as many calls as take about --batch-ms. Nothing is sent anywhere:
 * the fleet's health thread is stopped before the state is set.
 * With --count K every measurement is one batch of exactly K calls, for
 * valgrind --tool=callgrind --toggle-collect=bench_call (instructions per
 * call, repeatable; --only picks one measurement; bench/proxy/profile.py
 * ttft runs it so).
 *
 *   ttftbench [--backends 1,4,16,64,256] [--policy ttft] [--batches 15]
 *             [--batch-ms 10] [--count K] [--prompt-bytes 2048]
 *             [--max-tokens 256] [--no-stream] [--only pick|views|score]
 *             [--changed K|all] [--json FILE]
 */
#include <getopt.h>
#include <llmgate/plugin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/backend_view.h"
#include "fleet/enginemetrics.h"
#include "fleet/fleet.h"
#include "route/options.h"
#include "route/plugin.h"
#include "route/router.h"

#define BENCH_MAX_BACKENDS 4096

enum bench_what { BENCH_PICK, BENCH_VIEWS, BENCH_SCORE };

struct bench_opts {
    size_t sizes[16];
    size_t nsizes;
    const char *policy;
    unsigned batches;
    double batch_ms;
    uint64_t count; /* fixed calls per measurement; 0 = timed batches */
    uint64_t prompt_bytes;
    uint32_t max_tokens;
    bool stream;
    int only; /* -1: every measurement, else enum bench_what */
    size_t changed; /* backends that change before each pick; SIZE_MAX: all */
    const char *json;
};

struct bench_figure {
    double median_ns, best_ns; /* per call */
};

struct bench_row {
    size_t backends, candidates;
    struct bench_figure pick, views, score;
};

/* ---- a fleet with live state ------------------------------------------- */

static uint64_t bench_rng = 0x9e3779b97f4a7c15ull;

static double
bench_uniform(void)
{
    bench_rng ^= bench_rng << 13;
    bench_rng ^= bench_rng >> 7;
    bench_rng ^= bench_rng << 17;
    return (double)(bench_rng >> 11) / 9007199254740992.0;
}

static struct lg_fleet *
bench_fleet(const struct bench_opts *o, size_t n, struct lg_config **conf)
{
    struct lg_config_errors errs;
    struct lg_fleet *fleet = NULL;
    size_t cap = 512 + n * 96, off;
    char *text = lg_xmalloc(cap);

    off = (size_t)snprintf(text, cap,
                           "{\"listen\": \"127.0.0.1:0\", \"routing\": {\"policy\": \"%s\"},\n"
                           " \"health\": {\"interval\": \"1h\"},\n \"backends\": [",
                           o->policy);
    for (size_t i = 0; i < n; i++) {
        off += (size_t)snprintf(text + off, cap - off,
                                "%s{\"name\": \"b%zu\", \"url\": \"http://127.0.0.1:%zu\", "
                                "\"models\": [\"m\"], \"flavor\": \"vllm\"}\n",
                                i ? "," : "", i, 40000 + i);
    }
    snprintf(text + off, cap - off, "]}");
    memset(&errs, 0, sizeof(errs));
    if (lg_config_load_buffer_flags(text, strlen(text), "ttftbench.json", LG_CONFIG_F_NO_RESOLVE,
                                    conf, &errs)
        != LG_OK) {
        lg_config_errors_print(&errs, stderr);
        exit(2);
    }
    lg_config_errors_free(&errs);
    free(text);
    if (lg_router_fleet_new(*conf, 1, NULL, &fleet) != LG_OK) {
        fprintf(stderr, "ttftbench: cannot build the fleet (policy %s)\n", o->policy);
        exit(2);
    }
    /* no health checks or scrapes from now on (the state set below stays),
     * and whatever a first check of these closed ports did is undone */
    lg_fleet_retire(fleet);
    for (size_t i = 0; i < fleet->nbackends; i++) {
        struct lg_backend *b = fleet->backends[i];

        __atomic_store_n(&b->health, LG_BACKEND_UP, __ATOMIC_RELAXED);
        __atomic_store_n(&b->eject_until_ns, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&b->up_since_ns, 0, __ATOMIC_RELAXED);
    }
    return fleet;
}

/* An engine scrape of b at t_ns (as health.c folds one). */
static void
bench_scrape(struct lg_backend *b, size_t i, uint64_t t_ns)
{
    uint32_t ours = lg_backend_inflight(b);
    struct lg_backend_engine e = {
        .waiting = i % 5 == 0 ? 2 : 0,
        .running = (int32_t)(ours + 2 + i % 7),
        .kv_usage = 0.2 + 0.05 * (double)(i % 10),
        .t_ns = t_ns,
        .inflight_at_scrape = ours,
        .flavor = LG_ENGINE_VLLM,
        .capacity = 16,
        .capacity_confirmed = 1,
        .confirmed_t_ns = t_ns,
        .run_max = 16,
        .run_max_t_ns = t_ns,
        .others = 1,
    };

    lg_backend_publish_engine(b, &e);
}

/*
 * What a few minutes of traffic leave on b: TTFT samples (prompt sizes
 * 0.5..8 KiB, a replica i% slower than the first), finished responses'
 * gaps and hold times, a stream's pace, and requests in flight (some
 * awaiting their first token).
 */
static void
bench_state(struct lg_backend *b, size_t i, const struct lg_est_prior *prior, uint64_t now)
{
    double speed = 1.0 + 0.01 * (double)(i % 50);
    unsigned inflight = (unsigned)(i % 9);

    for (int k = 0; k < 60; k++) {
        uint64_t bytes = 512 + (uint64_t)(bench_uniform() * 7680);
        double kib = (double)bytes / 1024.0;
        double ttft = speed * (60 + 25 * kib) * (0.9 + 0.2 * bench_uniform());
        struct lg_backend_first f = { .prompt_bytes = bytes,
                                      .ttft_ms = ttft,
                                      .wait_ms = 5 * bench_uniform(),
                                      .model_ms = 20,
                                      .pred_ms = ttft * (0.9 + 0.2 * bench_uniform()),
                                      .model_scale = 1,
                                      .meas_pred_ms = ttft * (0.9 + 0.2 * bench_uniform()),
                                      .load = (double)(k % 12),
                                      .prefill_ms = speed * 25 * kib };

        lg_backend_note_first_token(b, prior, &f);
        lg_backend_note_done(b, NULL, bytes, ttft, f.wait_ms, speed * 20, 2000 + 1000 * kib);
    }
    for (unsigned batch = 1; batch <= 8; batch++) {
        lg_backend_note_pace(b, now, speed * (19 + 0.25 * batch), batch);
    }
    for (unsigned k = 0; k < inflight; k++) {
        uint64_t t = now - (uint64_t)(k + 1) * 150 * LG_NS_PER_MS;
        uint64_t bytes = 1024 + 512 * (uint64_t)k;

        lg_backend_inflight_add(b, 1);
        if (k % 3 == 0 && lg_backend_ages_add(b, LG_BACKEND_AGES_PENDING, t)) {
            (void)lg_backend_due_add(b, t, speed * 150, 0, (uint32_t)(t >> 10));
        }
        (void)lg_backend_ages_add(b, LG_BACKEND_AGES_INFLIGHT, t);
        (void)lg_backend_end_add(b, now + (uint64_t)(k + 1) * 700 * LG_NS_PER_MS, 0,
                                 (uint32_t)(t >> 10));
        (void)lg_backend_seq_add(b, t, bytes, 200 + 40 * k, (uint32_t)(t >> 10));
    }
}

/* ---- timing ---------------------------------------------------------------- */

struct bench_ctx {
    struct lg_fleet *fleet;
    const struct lg_model_route *route;
    struct lg_route_req req;
    struct lg_route_info info;
    struct lg_route_result res;
    struct lg_est_prior prior;
    const struct lg_plugin *policy;
    void *policy_state;
    struct lg_backend_view *views;
    struct lg_engine_model_view *models; /* lent through views[i].model where the policy asks */
    const struct lg_backend_view **vp;
    double *cost;
    size_t n;
    size_t changed, next; /* --changed; the next backend to change */
    uint64_t sink;
};

static void
bench_call(struct bench_ctx *c, enum bench_what what)
{
    uint64_t now;
    const char *why = NULL;

    switch (what) {
    case BENCH_PICK:
        for (size_t k = 0; k < c->changed && k < c->n; k++) {
            /* what a change of its state does (a request's start or end there) */
            lg_backend_touch(c->route->backends[c->next++ % c->n]);
        }
        if (lg_router_pick(c->fleet->router, c->route, &c->req, NULL, &c->res) != LG_OK) {
            fprintf(stderr, "ttftbench: no pick (%s)\n", c->res.reason);
            exit(1);
        }
        c->sink += c->res.backend->index;
        break;
    case BENCH_VIEWS:
        now = lg_now_ns();
        for (size_t i = 0; i < c->n; i++) {
            lg_backend_view_fill(c->route->backends[i], now, &c->prior, 250 * LG_NS_PER_MS, 0,
                                 &c->views[i], &c->models[i]);
            c->views[i].model = c->policy->lends_model ? &c->models[i] : NULL;
        }
        c->sink += c->views[c->n - 1].inflight;
        break;
    case BENCH_SCORE:
        for (size_t i = 0; i < c->n; i++) {
            c->cost[i] = 0;
        }
        c->policy->ops->score(c->policy_state, &c->info, c->vp, c->n, c->cost, &why);
        c->sink += (uint64_t)c->cost[0];
        break;
    }
}

static double
bench_seconds(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The scrape is kept as fresh as a 250 ms scrape interval keeps it. */
static void
bench_refresh(struct bench_ctx *c)
{
    uint64_t t = lg_now_ns() - 100 * LG_NS_PER_MS;

    for (size_t i = 0; i < c->n; i++) {
        bench_scrape(c->route->backends[i], i, t);
    }
}

static struct bench_figure
bench_measure(struct bench_ctx *c, const struct bench_opts *o, enum bench_what what)
{
    struct bench_figure fig = { NAN, NAN };
    double per[64], t0;
    uint64_t k = 1;
    unsigned nb = LG_MIN(o->batches, (unsigned)LG_ARRAY_SIZE(per));

    if (o->only >= 0 && o->only != (int)what) {
        return fig;
    }
    bench_refresh(c);
    if (o->count > 0) {
        t0 = bench_seconds();
        for (uint64_t i = 0; i < o->count; i++) {
            bench_call(c, what);
        }
        fig.median_ns = fig.best_ns = (bench_seconds() - t0) * 1e9 / (double)o->count;
        return fig;
    }
    /* calls per batch: doubled until a batch takes batch_ms */
    for (;;) {
        t0 = bench_seconds();
        for (uint64_t i = 0; i < k; i++) {
            bench_call(c, what);
        }
        if ((bench_seconds() - t0) * 1e3 >= o->batch_ms || k >= (1ull << 30)) {
            break;
        }
        k *= 2;
    }
    for (unsigned b = 0; b < nb; b++) {
        bench_refresh(c);
        t0 = bench_seconds();
        for (uint64_t i = 0; i < k; i++) {
            bench_call(c, what);
        }
        per[b] = (bench_seconds() - t0) * 1e9 / (double)k;
    }
    qsort(per, nb, sizeof(per[0]), bench_cmp);
    fig.median_ns = nb % 2 ? per[nb / 2] : (per[nb / 2 - 1] + per[nb / 2]) / 2;
    fig.best_ns = per[0];
    return fig;
}

static void
bench_size(const struct bench_opts *o, size_t n, struct bench_row *row)
{
    struct lg_config *conf = NULL;
    struct bench_ctx c;
    int rc = -1;
    struct lg_est_prior prior = { .fixed_ms = 60,
                                  .ms_per_kib = 25,
                                  .itl_ms = 20,
                                  .hold_ms = 3000,
                                  .slots = 16,
                                  .prefill_per_step = 1.2 };
    char err[256] = "";
    uint64_t now;

    memset(&c, 0, sizeof(c));
    c.fleet = bench_fleet(o, n, &conf);
    c.route = lg_fleet_find_model(c.fleet, "m");
    if (c.route == NULL || c.route->n != n) {
        fprintf(stderr, "ttftbench: the fleet has no route of %zu backends\n", n);
        exit(1);
    }
    c.n = n;
    c.changed = o->changed;
    for (size_t i = 0; i < c.fleet->nmodels; i++) {
        if (&c.fleet->models[i] == c.route) {
            lg_route_publish_prior(&c.fleet->models[i], &prior); /* as health.c does */
        }
    }
    lg_route_read_prior(c.route, &c.prior);
    now = lg_now_ns();
    for (size_t i = 0; i < n; i++) {
        bench_state(c.route->backends[i], i, &c.prior, now);
    }
    c.req = (struct lg_route_req){ .model = "m",
                                   .path = "/v1/chat/completions",
                                   .stream = o->stream,
                                   .prompt_bytes = o->prompt_bytes,
                                   .max_tokens = o->max_tokens,
                                   .prefix_hash = 0x5eed1234abcdull };
    c.info = (struct lg_route_info){ .size = sizeof(c.info),
                                     .model = "m",
                                     .path = c.req.path,
                                     .stream = o->stream,
                                     .prompt_bytes = o->prompt_bytes,
                                     .max_tokens = o->max_tokens,
                                     .prefix_hash = c.req.prefix_hash,
                                     .attempt = 1,
                                     .prefix_len = LG_MIN(o->prompt_bytes, 1024) };
    c.views = lg_xcalloc(n, sizeof(*c.views));
    c.models = lg_xcalloc(n, sizeof(*c.models));
    c.vp = lg_xcalloc(n, sizeof(*c.vp));
    c.cost = lg_xcalloc(n, sizeof(*c.cost));
    c.policy = lg_plugin_find(o->policy);
    if (c.policy != NULL) {
        struct lg_options opts;

        lg_options_init(&opts, NULL, err, sizeof(err));
        rc = lg_options_finish(&opts, c.policy->ops->create(lg_plugin_host(), &opts,
                                                             &c.policy_state, err, sizeof(err)));
    }
    if (c.policy == NULL || rc != 0) {
        fprintf(stderr, "ttftbench: policy %s: %s\n", o->policy, err);
        exit(2);
    }
    bench_call(&c, BENCH_VIEWS);
    for (size_t i = 0; i < n; i++) {
        c.vp[i] = &c.views[i];
    }

    row->backends = n;
    row->candidates = n;
    row->pick = bench_measure(&c, o, BENCH_PICK);
    row->views = bench_measure(&c, o, BENCH_VIEWS);
    bench_call(&c, BENCH_VIEWS); /* fresh views for the score */
    row->score = bench_measure(&c, o, BENCH_SCORE);

    c.policy->ops->destroy(c.policy_state);
    lg_route_result_clear(&c.res);
    free(c.views);
    free(c.models);
    free(c.vp);
    free(c.cost);
    if (c.sink == 42) {
        fputc('\n', stderr); /* keeps the calls' results alive */
    }
    lg_fleet_unref(c.fleet);
    lg_config_unref(conf);
}

/* ---- output ---------------------------------------------------------------- */

static void
bench_print(const struct bench_opts *o, const struct bench_row *rows, size_t n)
{
    printf("%s decisions: a %s request, %" PRIu64 "-byte prompt, max_tokens %u; %s\n", o->policy,
           o->stream ? "streamed" : "whole", o->prompt_bytes, o->max_tokens,
           o->count ? "one batch of fixed calls" : "median (fastest) of the batches");
    if (o->changed == SIZE_MAX) {
        printf("every backend changes before each pick (no view reused)\n");
    } else if (o->changed > 0) {
        printf("%zu backends change before each pick\n", o->changed);
    }
    printf("%8s %10s %16s %10s %11s %16s %16s %12s\n", "backends", "candidates", "pick ns",
           "ns/cand", "picks/s", "views ns (all N)", "score ns (all N)", "score ns/cand");
    for (size_t i = 0; i < n; i++) {
        const struct bench_row *r = &rows[i];
        char pick[32], views[32], score[32];

        snprintf(pick, sizeof(pick), "%.0f (%.0f)", r->pick.median_ns, r->pick.best_ns);
        snprintf(views, sizeof(views), "%.0f (%.0f)", r->views.median_ns, r->views.best_ns);
        snprintf(score, sizeof(score), "%.0f (%.0f)", r->score.median_ns, r->score.best_ns);
        printf("%8zu %10zu %16s %10.0f %11.0f %16s %16s %12.0f\n", r->backends, r->candidates, pick,
               r->pick.median_ns / (double)r->candidates, 1e9 / r->pick.median_ns, views, score,
               r->score.median_ns / (double)r->backends);
    }
    for (size_t i = 0; i < n && !isnan(rows[0].pick.median_ns); i++) {
        if (rows[i].backends == 4) {
            printf("target: pick at 4 backends under 500 ns per candidate: %.0f ns (%s)\n",
                   rows[i].pick.median_ns / 4, rows[i].pick.median_ns / 4 < 500 ? "met" : "missed");
        }
        if (rows[i].backends == 256) {
            printf("target: pick at 256 backends under 20 us: %.1f us (%s)\n",
                   rows[i].pick.median_ns / 1e3, rows[i].pick.median_ns < 20000 ? "met" : "missed");
        }
    }
}

/* A figure in JSON: null when it was not measured (--only). */
static void
bench_json_num(FILE *f, const char *key, double v)
{
    if (isnan(v)) {
        fprintf(f, ",\"%s\":null", key);
    } else {
        fprintf(f, ",\"%s\":%.1f", key, v);
    }
}

static void
bench_json(const struct bench_opts *o, const struct bench_row *rows, size_t n)
{
    FILE *f = fopen(o->json, "w");

    if (f == NULL) {
        perror(o->json);
        exit(1);
    }
    fprintf(f,
            "{\"policy\":\"%s\",\"stream\":%s,\"prompt_bytes\":%" PRIu64
            ",\"max_tokens\":%u,\"rows\":[",
            o->policy, o->stream ? "true" : "false", o->prompt_bytes, o->max_tokens);
    for (size_t i = 0; i < n; i++) {
        const struct bench_row *r = &rows[i];

        fprintf(f, "%s{\"backends\":%zu,\"candidates\":%zu", i ? "," : "", r->backends,
                r->candidates);
        bench_json_num(f, "pick_ns", r->pick.median_ns);
        bench_json_num(f, "pick_best_ns", r->pick.best_ns);
        bench_json_num(f, "views_ns", r->views.median_ns);
        bench_json_num(f, "views_best_ns", r->views.best_ns);
        bench_json_num(f, "score_ns", r->score.median_ns);
        bench_json_num(f, "score_best_ns", r->score.best_ns);
        fputc('}', f);
    }
    fprintf(f, "]}\n");
    fclose(f);
}

static void
bench_usage(FILE *f)
{
    fprintf(f, "usage: ttftbench [--backends 1,4,16,64,256] [--policy ttft] [--batches 15]\n"
               "                 [--batch-ms 10] [--count K] [--prompt-bytes 2048]\n"
               "                 [--max-tokens 256] [--no-stream] [--only pick|views|score]\n"
               "                 [--changed K|all] [--json FILE]\n");
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "backends", required_argument, NULL, 'b' },
        { "policy", required_argument, NULL, 'p' },
        { "batches", required_argument, NULL, 'n' },
        { "batch-ms", required_argument, NULL, 'm' },
        { "count", required_argument, NULL, 'k' },
        { "prompt-bytes", required_argument, NULL, 'B' },
        { "max-tokens", required_argument, NULL, 't' },
        { "no-stream", no_argument, NULL, 's' },
        { "json", required_argument, NULL, 'j' },
        { "only", required_argument, NULL, 'o' },
        { "changed", required_argument, NULL, 'c' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct bench_opts o = { .sizes = { 1, 4, 16, 64, 256 },
                            .nsizes = 5,
                            .policy = "ttft",
                            .batches = 15,
                            .batch_ms = 10,
                            .prompt_bytes = 2048,
                            .max_tokens = 256,
                            .stream = true,
                            .only = -1 };
    struct bench_row rows[16];
    char *end, *tok, *save = NULL;
    int opt;

    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            o.nsizes = 0;
            for (tok = strtok_r(optarg, ",", &save); tok != NULL && o.nsizes < 16;
                 tok = strtok_r(NULL, ",", &save)) {
                unsigned long v = strtoul(tok, &end, 10);

                if (*end != '\0' || v == 0 || v > BENCH_MAX_BACKENDS) {
                    fprintf(stderr, "ttftbench: --backends: 1..%d each (got %s)\n",
                            BENCH_MAX_BACKENDS, tok);
                    return 2;
                }
                o.sizes[o.nsizes++] = v;
            }
            break;
        case 'p':
            o.policy = optarg;
            break;
        case 'n':
            o.batches = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'm':
            o.batch_ms = strtod(optarg, NULL);
            break;
        case 'k':
            o.count = strtoull(optarg, NULL, 10);
            break;
        case 'B':
            o.prompt_bytes = strtoull(optarg, NULL, 10);
            break;
        case 't':
            o.max_tokens = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 's':
            o.stream = false;
            break;
        case 'j':
            o.json = optarg;
            break;
        case 'c':
            o.changed = strcmp(optarg, "all") == 0 ? SIZE_MAX : strtoull(optarg, NULL, 10);
            break;
        case 'o':
            o.only = strcmp(optarg, "pick") == 0    ? BENCH_PICK
                     : strcmp(optarg, "views") == 0 ? BENCH_VIEWS
                     : strcmp(optarg, "score") == 0 ? BENCH_SCORE
                                                    : -2;
            if (o.only == -2) {
                fprintf(stderr, "ttftbench: --only: pick, views or score (got %s)\n", optarg);
                return 2;
            }
            break;
        case 'h':
            bench_usage(stdout);
            return 0;
        default:
            bench_usage(stderr);
            return 2;
        }
    }
    if (optind != argc || o.nsizes == 0 || o.batches == 0 || !(o.batch_ms > 0)) {
        bench_usage(stderr);
        return 2;
    }
    lg_log_threshold = LG_LOG_ERROR; /* the first scrape of the closed ports, before it stops */
    for (size_t i = 0; i < o.nsizes; i++) {
        bench_size(&o, o.sizes[i], &rows[i]);
    }
    bench_print(&o, rows, o.nsizes);
    if (o.json != NULL) {
        bench_json(&o, rows, o.nsizes);
    }
    return 0;
}
