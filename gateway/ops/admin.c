/*
 * admin.c: the admin listener (see admin.h): an evhttp server on its own
 * thread and event base.
 *
 * Owns: struct lg_admin, its thread, event base, evhttp server and socket;
 * the status page's history (history.h) and the timer that samples it.
 * Borrows: the gateway; fleets and backends through references taken for
 * the length of one request (lg_gateway_fleet()).
 * Invariants: this thread only reads live state (atomics, published copies);
 * actions go through their owners' thread-safe entry points (a reload is
 * asked of the control thread and awaited).
 */
#include "ops/admin.h"

#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <openssl/crypto.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/fleet.h"
#include "fleet/peers.h"
#include "lg_version.h"
#include "ops/history.h"
#include "ops/livestate.h"
#include "ops/metrics.h"
#include "ops/reload.h"
#include "ops/statuspage.h"
#include "route/router.h"
#include "serve/budget.h"
#include "serve/admission.h"
#include "serve/budgetstore.h"
#include "serve/keys.h"
#include "serve/worker.h"

#define ADMIN_MAX_BODY    (64 * 1024)
#define ADMIN_MAX_HEADERS (16 * 1024)
#define ADMIN_TIMEOUT_S   30
#define ADMIN_RELOAD_WAIT 60000 /* ms an admin reload waits for its outcome */
#define ADMIN_MAX_MODELS  32    /* models whose routing /admin/backends explains */
#define ADMIN_EXPLAIN_BYTES 512   /* room per candidate in those explanations */

/* A peer's GET /admin/peers?since= held until there is news (peers.h). */
struct admin_waiter {
    struct lg_admin *a;             /* borrowed: owner */
    struct evhttp_request *req;     /* borrowed from evhttp until answered */
    struct evhttp_connection *conn; /* its connection (closecb: it went away) */
    uint64_t since;
    uint64_t until_ns;
    struct admin_waiter *next;
};

struct lg_admin {
    struct lg_gateway *gw;        /* borrowed */
    struct event_base *base;      /* owned */
    struct evhttp *http;          /* owned */
    struct admin_waiter *waiters; /* owned list */
    struct event *news_ev;        /* owned: a change (backend.c), while there are waiters */
    struct event *expiry_ev;      /* owned: answers the waiters whose wait is up */
    struct lg_history *history;   /* owned: the status page's history; NULL when off */
    struct event *history_ev;     /* owned: samples it every admin.history.resolution */
    pthread_t thread;
    uint64_t started_ns; /* monotonic, for uptime */
};

static const char *const admin_health_names[] = {
    [LG_BACKEND_UP] = "up",
    [LG_BACKEND_DOWN] = "down",
    [LG_BACKEND_EJECTED] = "ejected",
    [LG_BACKEND_DRAINING] = "draining",
};

/* ---- replies ------------------------------------------------------------------ */

static void
admin_reply(struct evhttp_request *req, int status, const char *reason, const char *type,
            struct evbuffer *body)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    evhttp_add_header(h, "Content-Type", type);
    evhttp_add_header(h, "Cache-Control", "no-store");
    evhttp_send_reply(req, status, reason, body);
}

/* Replies with json (stolen; NULL, as out of memory leaves it: a 500) as the body. */
static void
admin_reply_json(struct evhttp_request *req, int status, const char *reason, json_t *json)
{
    struct evbuffer *body = evbuffer_new();
    char *text = json != NULL ? json_dumps(json, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;

    json_decref(json);
    if (text == NULL) {
        /* out of memory building or writing it: not a 200 with an empty
         * object a peer or a dashboard would take for an answer */
        status = 500;
        reason = "Internal Server Error";
        evbuffer_add_printf(body, "{\"error\":{\"message\":\"out of memory\",\"status\":500}}\n");
    } else {
        evbuffer_add_printf(body, "%s\n", text);
        free(text);
    }
    admin_reply(req, status, reason, "application/json", body);
    evbuffer_free(body);
}

static void
admin_error(struct evhttp_request *req, int status, const char *reason, const char *message)
{
    admin_reply_json(req, status, reason,
                     json_pack("{s:{s:s, s:i}}", "error", "message", message, "status", status));
}

/* ---- authentication -------------------------------------------------------------- */

static bool
admin_authorized(struct lg_admin *a, struct evhttp_request *req)
{
    struct lg_fleet *f = lg_gateway_fleet(a->gw);
    const char *token = f->conf->admin.token;
    const char *got = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    bool ok = true;

    if (token != NULL) {
        size_t n = strlen(token);

        ok = got != NULL && strncmp(got, "Bearer ", 7) == 0 && strlen(got + 7) == n
             && CRYPTO_memcmp(got + 7, token, n) == 0;
    }
    lg_fleet_unref(f);
    if (!ok) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                          "Bearer realm=\"llmgate admin\"");
        admin_error(req, 401, "Unauthorized", "a bearer token is required (admin.token)");
    }
    return ok;
}

/* ---- /admin/backends ------------------------------------------------------------- */

/* A number, or null when it is not known (negative, or not finite). */
static json_t *
admin_num(double v, bool known)
{
    return known && isfinite(v) ? json_real(round(v * 1000) / 1000) : json_null();
}

/* The engine's last scrape and the router's estimates (what its policies see). */
static void
admin_live_json(json_t *o, const struct lg_live *lv)
{
    const struct lg_backend_view *v = &lv->view;
    const struct lg_engine_model_view *m = &lv->model;
    bool scraped = v->engine_age_ns != UINT64_MAX;

    json_object_set_new(
        o, "engine",
        json_pack("{s:o, s:o, s:o, s:o, s:o, s:b, s:b, s:s}", "waiting",
                  scraped && v->engine_waiting >= 0 ? json_integer(v->engine_waiting) : json_null(),
                  "running",
                  scraped && v->engine_running >= 0 ? json_integer(v->engine_running) : json_null(),
                  "kv_usage", admin_num(v->engine_kv_usage, scraped && v->engine_kv_usage >= 0),
                  "age_ms", admin_num((double)v->engine_age_ns / 1e6, scraped), "capacity",
                  admin_num(v->capacity, v->capacity > 0), "capacity_guessed",
                  (v->flags & LG_VIEW_F_CAP_GUESS) != 0, "stale", (v->flags & LG_VIEW_F_STALE) != 0,
                  "flavor", lg_live_flavor_name(lv->engine_flavor)));
    /* whether others are served there (its finished count against ours), and
     * how long its gauges hold a request of ours after its end */
    json_object_set_new(json_object_get(o, "engine"), "others",
                        lv->engine_others < 0 ? json_null() : json_boolean(lv->engine_others));
    json_object_set_new(json_object_get(o, "engine"), "gauge_lag_ms",
                        admin_num(lv->gauge_lag_ms, lv->engine_others == 0));
    /* where the counts come from: a load report newer than the scrape, or the scrape */
    json_object_set_new(json_object_get(o, "engine"), "load_from",
                        json_string((v->flags & LG_VIEW_F_REPORTED) ? "report" : "scrape"));
    /* where the slot count comes from: the engine's word, a queue of ours, a guess */
    json_object_set_new(json_object_get(o, "engine"), "capacity_from",
                        json_string(lv->slots_declared > 0    ? "engine"
                                    : lv->slots_confirmed > 0 ? "queue"
                                    : v->capacity > 0         ? "guess"
                                                              : "unknown"));
    json_object_set_new(
        o, "estimate",
        json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:o}", "ttft_ms",
                  admin_num(lv->ttft_1kib_ms, true), "ttft_fixed_ms",
                  admin_num(v->ttft_fixed_ms, true), "ttft_ms_per_kib",
                  admin_num(v->ttft_ms_per_kib, true), "itl_ms", admin_num(v->itl_ms, true),
                  "error_rate", admin_num(v->error_rate, true), "samples",
                  admin_num(v->samples, true), "load", admin_num(v->load, true), "foreign",
                  admin_num(v->foreign, true), "hold_ms", admin_num(v->hold_ms, true), "pending",
                  (json_int_t)v->pending, "work_ahead_ms", admin_num(v->work_ahead_ms, true)));
    json_object_set_new(
        o, "estimator",
        json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "use",
                  (m->flags & LG_MODEL_F_MISSES) ? "measured" : "model", "model_err",
                  admin_num(m->err, m->err > 0), "measured_err",
                  admin_num(m->measured_err, m->measured_err > 0), "model_scale",
                  admin_num(m->scale, true), "measured_ms",
                  admin_num(m->measured_ms, m->measured_ms >= 0), "step_ms",
                  admin_num(m->step_ms, m->step_ms > 0), "step_ms_per_seq",
                  admin_num(m->step_ms_per_seq, true), "prefill_ms_per_kib",
                  admin_num(m->prefill_ms_per_kib, true), "prefill_fixed_ms",
                  admin_num(m->prefill_fixed_ms, true)));
    json_object_set_new(o, "slow_start", admin_num(v->ramp, true));
}

/* What the peer gateways last said they have there (null: no fresh answer). */
static json_t *
admin_peers_json(const struct lg_backend *b, uint64_t now)
{
    struct lg_backend_peers p;

    lg_backend_read_peers(b, &p);
    if (!lg_backend_peers_fresh(p.t_ns, p.ttl_ns, now)) {
        return json_null();
    }
    return json_pack("{s:I, s:I, s:I, s:b, s:o}", "gateways", (json_int_t)p.gateways, "in_flight",
                     (json_int_t)p.inflight, "sequences", (json_int_t)p.n, "complete",
                     p.complete != 0, "age_ms", admin_num((double)(now - p.t_ns) / 1e6, true));
}

static json_t *
admin_backend_json(const struct lg_fleet *f, const struct lg_backend *b, uint64_t now)
{
    static const char *const classes[LG_BACKEND_NCLASS] = { "none", "1xx", "2xx",
                                                            "3xx",  "4xx", "5xx" };
    json_t *o = json_object();
    json_t *models = json_array();
    json_t *resp = json_object();
    const struct lg_backend_conf *bc = lg_backend_conf(b);
    struct lg_live lv;

    for (size_t i = 0; i < bc->nmodels; i++) {
        json_array_append_new(models, json_string(bc->models[i]));
    }
    for (int i = 0; i < LG_BACKEND_NCLASS; i++) {
        json_object_set_new(resp, classes[i],
                            json_integer((json_int_t)LG_STAT_GET(b, responses[i])));
    }
    json_object_set_new(o, "name", json_string(b->name));
    json_object_set_new(o, "url", json_string(bc->url));
    json_object_set_new(o, "models", models);
    lg_live_read(f, b, now, &lv);
    json_object_set_new(o, "health", json_string(lg_live_state_names[lv.state]));
    json_object_set_new(o, "in_flight", json_integer(lg_backend_inflight(b)));
    json_object_set_new(o, "peers", admin_peers_json(b, now));
    json_object_set_new(o, "attempts", json_integer((json_int_t)LG_STAT_GET(b, requests)));
    json_object_set_new(
        o, "requests",
        json_integer((json_int_t)__atomic_load_n(&b->metrics.requests, __ATOMIC_RELAXED)));
    json_object_set_new(o, "responses", resp);
    json_object_set_new(
        o, "ttft_count",
        json_integer((json_int_t)__atomic_load_n(&b->metrics.ttft.count, __ATOMIC_RELAXED)));
    json_object_set_new(
        o, "ttft_sum_s",
        json_real((double)__atomic_load_n(&b->metrics.ttft.sum_us, __ATOMIC_RELAXED) / 1e6));
    json_object_set_new(
        o, "completion_tokens",
        json_integer((json_int_t)__atomic_load_n(&b->metrics.completion_tokens, __ATOMIC_RELAXED)));
    json_object_set_new(o, "retries", json_integer((json_int_t)LG_STAT_GET(b, retries)));
    json_object_set_new(o, "connect_failures",
                        json_integer((json_int_t)LG_STAT_GET(b, connect_failures)));
    json_object_set_new(o, "timeouts", json_integer((json_int_t)LG_STAT_GET(b, timeouts)));
    json_object_set_new(o, "cut_streams", json_integer((json_int_t)LG_STAT_GET(b, cut_streams)));
    json_object_set_new(o, "weight", json_integer(bc->weight));
    json_object_set_new(o, "max_inflight", json_integer(bc->max_inflight));
    json_object_set_new(
        o, "ejections",
        json_integer((json_int_t)__atomic_load_n(&b->ejections_total, __ATOMIC_RELAXED)));
    admin_live_json(o, &lv);
    return o;
}

/*
 * The current routing scores: for each model (the first ADMIN_MAX_MODELS),
 * the pick the router would make now for a typical request (a 1 KiB streamed
 * chat prompt asking 128 tokens), with every candidate's score inputs. A dry
 * run: nothing is sent, and a half-open probe slot it wins is given back.
 */
static json_t *
admin_routing(const struct lg_fleet *f)
{
    json_t *list = json_array();

    for (size_t i = 0; i < f->nmodels && i < ADMIN_MAX_MODELS; i++) {
        const struct lg_model_route *m = &f->models[i];
        struct lg_route_req rq = { .model = m->model,
                                   .path = "/v1/chat/completions",
                                   .stream = true,
                                   .prompt_bytes = 1024,
                                   .max_tokens = 128 };
        struct lg_route_result *res = lg_xcalloc(1, sizeof(*res));
        int rc;

        /* every candidate, however many (the status page's Score column) */
        res->explain_max = LG_MAX(m->n, (size_t)1) * ADMIN_EXPLAIN_BYTES;
        rc = lg_router_pick(f->router, m, &rq, NULL, res);
        json_t *cands;

        cands = json_loads(res->explain ? res->explain : "[]", 0, NULL);
        if (rc == LG_OK && res->probe) {
            lg_backend_release_probe(res->backend);
        }
        json_array_append_new(list,
                              json_pack("{s:s, s:s, s:o, s:s, s:o}", "model", m->model, "policy",
                                        res->policy ? res->policy : "", "pick",
                                        rc == LG_OK ? json_string(res->backend->name) : json_null(),
                                        "reason", res->reason ? res->reason : "", "candidates",
                                        cands != NULL ? cands : json_array()));
        lg_route_result_clear(res);
        free(res);
    }
    return list;
}

static void
admin_backends(struct lg_admin *a, struct evhttp_request *req)
{
    struct lg_fleet *f = lg_gateway_fleet(a->gw);
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    bool scores = query == NULL || strstr(query, "scores=0") == NULL;
    uint64_t now = lg_now_ns();
    struct lg_reload_stats rs;
    json_t *list = json_array();
    json_t *routing;

    lg_reload_read_stats(a->gw, &rs);
    for (size_t i = 0; i < f->nbackends; i++) {
        json_array_append_new(list, admin_backend_json(f, f->backends[i], now));
    }
    routing = scores ? admin_routing(f) : json_null();
    lg_fleet_unref(f);
    admin_reply_json(req, 200, "OK",
                     json_pack("{s:s, s:I, s:i, s:i, s:b, s:I, s:o, s:o}", "version", LG_VERSION,
                               "generation", (json_int_t)rs.generation, "workers",
                               (int)a->gw->nworkers, "connections", (int)lg_gateway_clients(a->gw),
                               "draining", __atomic_load_n(&a->gw->draining, __ATOMIC_RELAXED),
                               "uptime_s",
                               (json_int_t)((lg_now_ns() - a->started_ns) / LG_NS_PER_S),
                               "backends", list, "routing", routing));
}

/* ---- /admin/backends/NAME/drain, /undrain ------------------------------------------------ */

/*
 * Draining takes a backend out of routing (no new requests; running ones
 * finish) until undrained; it lasts across reloads that keep the backend.
 * The health checker moves only between up and down, so it leaves a drained
 * backend alone; undraining puts it up and lets the checks judge again.
 */
static void
admin_drain(struct lg_admin *a, struct evhttp_request *req, const char *name, bool drain)
{
    struct lg_fleet *f = lg_gateway_fleet(a->gw);
    struct lg_backend *b = NULL;
    int h;

    for (size_t i = 0; i < f->nbackends && b == NULL; i++) {
        if (strcmp(f->backends[i]->name, name) == 0) {
            b = f->backends[i];
        }
    }
    if (b == NULL) {
        lg_fleet_unref(f);
        admin_error(req, 404, "Not Found", "no backend of that name in the fleet in force");
        return;
    }
    h = __atomic_load_n(&b->health, __ATOMIC_RELAXED);
    if (drain) {
        while (h != LG_BACKEND_DRAINING
               && !__atomic_compare_exchange_n(&b->health, &h, LG_BACKEND_DRAINING, false,
                                               __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    } else if (h == LG_BACKEND_DRAINING
               && __atomic_compare_exchange_n(&b->health, &h, LG_BACKEND_UP, false,
                                              __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        /* back in: ramp its share up like any backend that joins (slow start) */
        __atomic_store_n(&b->up_since_ns, lg_now_ns(), __ATOMIC_RELAXED);
    }
    LG_INFO("admin: backend %s %s (%u requests in flight)", b->name,
            drain ? "drained" : "undrained", lg_backend_inflight(b));
    h = __atomic_load_n(&b->health, __ATOMIC_RELAXED);
    admin_reply_json(req, 200, "OK",
                     json_pack("{s:s, s:s, s:i}", "name", b->name, "health", admin_health_names[h],
                               "in_flight", lg_backend_inflight(b)));
    lg_fleet_unref(f);
}

/* "/admin/backends/NAME/ACTION": NAME is percent-decoded. */
static bool
admin_backend_action(struct lg_admin *a, struct evhttp_request *req, const char *path)
{
    const char *rest = path + strlen("/admin/backends/");
    const char *slash = strrchr(rest, '/');
    char *enc;
    char *name;
    bool drain;

    if (slash == NULL || slash == rest) {
        return false;
    }
    if (strcmp(slash, "/drain") == 0) {
        drain = true;
    } else if (strcmp(slash, "/undrain") == 0) {
        drain = false;
    } else {
        return false;
    }
    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
        admin_error(req, 405, "Method Not Allowed", "use POST");
        return true;
    }
    enc = lg_xstrndup(rest, (size_t)(slash - rest));
    name = evhttp_uridecode(enc, 0, NULL);
    admin_drain(a, req, name != NULL ? name : enc, drain);
    free(name);
    free(enc);
    return true;
}

/* ---- /admin/reload ------------------------------------------------------------------ */

static void
admin_reload(struct lg_admin *a, struct evhttp_request *req)
{
    struct lg_reload_result res;
    json_t *errors = json_array();
    int rc = lg_reload_request(a->gw, ADMIN_RELOAD_WAIT, &res);
    char *save = NULL;

    if (rc == LG_EBUSY) {
        json_decref(errors);
        admin_error(req, 503, "Service Unavailable", "the gateway is shutting down");
        return;
    }
    if (rc != LG_OK) {
        json_decref(errors);
        admin_error(req, 504, "Gateway Timeout", "the reload did not finish in time");
        return;
    }
    for (char *line = res.errors ? strtok_r(res.errors, "\n", &save) : NULL; line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        json_array_append_new(errors, json_string(line));
    }
    admin_reply_json(req, res.ok ? 200 : 422, res.ok ? "OK" : "Unprocessable Entity",
                     json_pack("{s:b, s:I, s:I, s:o}", "ok", res.ok, "generation",
                               (json_int_t)res.generation, "backends", (json_int_t)res.nbackends,
                               "errors", errors));
    lg_reload_result_free(&res);
}

/* ---- /metrics ---------------------------------------------------------------------------- */

static void
admin_metrics(struct lg_admin *a, struct evhttp_request *req)
{
    struct evbuffer *body = evbuffer_new();

    lg_metrics_render(a->gw, body);
    admin_reply(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
    evbuffer_free(body);
}

/* ---- /admin/peers: our requests, for the other gateways of the fleet ---------- */

static void
admin_peers_reply(struct lg_admin *a, struct evhttp_request *req)
{
    struct lg_fleet *f = lg_gateway_fleet(a->gw);

    admin_reply_json(req, 200, "OK", lg_peers_render(f->backends, f->nbackends, lg_now_ns()));
    lg_fleet_unref(f);
}

/* How often held requests are checked for their wait's end. */
#define ADMIN_EXPIRY_MS 100

static void
admin_waiter_unlink(struct admin_waiter *w)
{
    struct admin_waiter **pp = &w->a->waiters;

    while (*pp != w) {
        pp = &(*pp)->next;
    }
    *pp = w->next;
    if (w->a->waiters == NULL) {
        lg_backend_news_event(NULL);
        event_del(w->a->expiry_ev);
    }
}

/* Its connection closed while held: evhttp frees the request. */
static void
admin_on_waiter_close(struct evhttp_connection *conn, void *arg)
{
    struct admin_waiter *w = arg;

    (void)conn;
    admin_waiter_unlink(w);
    free(w);
}

/* Answers the waiters with news, and those whose wait is up. */
static void
admin_on_news(evutil_socket_t fd, short what, void *arg)
{
    struct lg_admin *a = arg;
    uint64_t changes, now = lg_now_ns();
    struct admin_waiter *w = a->waiters, *next;

    (void)fd;
    (void)what;
    lg_backend_news_taken();
    changes = lg_backend_changes();
    for (; w != NULL; w = next) {
        next = w->next;
        if (w->since == changes && now < w->until_ns) {
            continue;
        }
        admin_waiter_unlink(w);
        evhttp_connection_set_closecb(w->conn, NULL, NULL);
        admin_peers_reply(a, w->req);
        free(w);
    }
}

/* Query parameter `name` as a decimal count: 1 when there, 0 when not, -1
 * when it is not a count. */
static int
admin_query_count(const struct evkeyvalq *q, const char *name, uint64_t *out)
{
    const char *s = evhttp_find_header(q, name);
    char *end;

    if (s == NULL) {
        return 0;
    }
    if (*s < '0' || *s > '9') {
        return -1;
    }
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0' ? 1 : -1;
}

/* GET /admin/peers[?since=N&wait=MS]: at once, or once there is news. */
static void
admin_peers(struct lg_admin *a, struct evhttp_request *req)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq params;
    uint64_t since = 0, wait_ms = LG_PEERS_WAIT_MS;
    struct admin_waiter *w;
    struct timeval tv = { 0, ADMIN_EXPIRY_MS * 1000 };
    int has_since, has_wait;

    memset(&params, 0, sizeof(params)); /* empty: what evhttp_parse_query_str() starts from */
    if (query != NULL && evhttp_parse_query_str(query, &params) != 0) {
        evhttp_clear_headers(&params);
        admin_error(req, 400, "Bad Request", "malformed query");
        return;
    }
    has_since = admin_query_count(&params, "since", &since);
    has_wait = admin_query_count(&params, "wait", &wait_ms);
    evhttp_clear_headers(&params);
    if (has_since < 0 || has_wait < 0) {
        admin_error(req, 400, "Bad Request",
                    has_since < 0 ? "since: not a count" : "wait: not a number of ms");
        return;
    }
    wait_ms = LG_MIN(wait_ms, (uint64_t)LG_PEERS_WAIT_MS);
    if (!has_since || since != lg_backend_changes() || wait_ms == 0) {
        admin_peers_reply(a, req);
        return;
    }
    w = lg_xcalloc(1, sizeof(*w));
    w->a = a;
    w->req = req;
    w->conn = evhttp_request_get_connection(req);
    w->since = since;
    w->until_ns = lg_now_ns() + wait_ms * LG_NS_PER_MS;
    w->next = a->waiters;
    if (a->waiters == NULL) {
        event_add(a->expiry_ev, &tv);
        lg_backend_news_event(a->news_ev);
    }
    a->waiters = w;
    evhttp_connection_set_closecb(w->conn, admin_on_waiter_close, w);
    if (lg_backend_changes() != since) {
        event_active(a->news_ev, EV_TIMEOUT, 0); /* a change before it was registered */
    }
}

/* ---- /admin/history: the last minutes ---------------------------------------------- */

/* The sampling timer: one point of the history (history.h). */
static void
admin_on_history_tick(evutil_socket_t fd, short what, void *arg)
{
    struct lg_admin *a = arg;

    (void)fd;
    (void)what;
    lg_history_sample(a->history, a->gw);
}

/* GET /admin/history[?since=N]: the points from N on (N: a reply's "next"). */
static void
admin_history(struct lg_admin *a, struct evhttp_request *req)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req));
    struct evkeyvalq params;
    uint64_t since = 0;
    int has_since;

    if (a->history == NULL) {
        admin_error(req, 404, "Not Found", "the history is off (admin.history.window is 0)");
        return;
    }
    memset(&params, 0, sizeof(params));
    if (query != NULL && evhttp_parse_query_str(query, &params) != 0) {
        evhttp_clear_headers(&params);
        admin_error(req, 400, "Bad Request", "malformed query");
        return;
    }
    has_since = admin_query_count(&params, "since", &since);
    evhttp_clear_headers(&params);
    if (has_since < 0) {
        admin_error(req, 400, "Bad Request", "since: not a count");
        return;
    }
    admin_reply_json(req, 200, "OK", lg_history_json(a->history, since));
}

/* ---- /admin/budgets: the keys' token budgets ------------------------------------------ */

static void
admin_budget_key(const char *name, const struct lg_budget_limits *lim, struct lg_budget *account,
                 void *arg)
{
    static const char *const periods[LG_BUDGET_NPERIODS] = { "minute", "day" };
    json_t *keys = arg;
    json_t *o = json_object();
    struct lg_budget_state st;

    lg_budget_read(account, lg_wall_ns() / LG_NS_PER_MS, &st);
    json_object_set_new(o, "key", json_string(name));
    json_object_set_new(o, "account", json_string(lg_budget_name(account)));
    json_object_set_new(o, "reserved", json_integer((json_int_t)st.reserved));
    for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
        json_t *w = json_object();
        uint64_t limit = lim->tokens[p];
        uint64_t counted = st.used[p] + st.others[p] + st.reserved;

        json_object_set_new(w, "limit", limit ? json_integer((json_int_t)limit) : json_null());
        json_object_set_new(w, "used", json_integer((json_int_t)st.used[p]));
        json_object_set_new(w, "others", json_integer((json_int_t)st.others[p]));
        json_object_set_new(w, "remaining",
                            limit
                                ? json_integer((json_int_t)(counted >= limit ? 0 : limit - counted))
                                : json_null());
        json_object_set_new(w, "reset_ms", json_integer((json_int_t)st.reset_ms[p]));
        json_object_set_new(o, periods[p], w);
    }
    json_object_set_new(o, "charged_total", json_integer((json_int_t)st.charged_total));
    json_object_set_new(o, "refused_total", json_integer((json_int_t)st.refused_total));
    json_array_append_new(keys, o);
}

/* GET /admin/budgets: each key's budget (this gateway's counts, the others' as last learned)
 * and the shared store's state. */
static void
admin_budgets(struct lg_admin *a, struct evhttp_request *req)
{
    json_t *root = json_object();
    json_t *keys = json_array();

    if (a->gw->keys != NULL) {
        lg_keys_foreach_budget(a->gw->keys, admin_budget_key, keys);
    }
    json_object_set_new(root, "keys", keys);
    json_object_set_new(root, "store",
                        a->gw->budgetstore != NULL ? lg_budgetstore_describe(a->gw->budgetstore)
                                                   : json_null());
    admin_reply_json(req, 200, "OK", root);
}

/* ---- /admin/queues: the admission queue by model, class and tenant ------------------- */

static void
admin_queue_model(const char *model, const uint32_t *queued, double head_wait_ms, void *arg)
{
    json_t *models = arg;
    json_t *o = json_object();
    json_t *by = json_object();
    uint32_t total = 0;

    for (int c = LG_NCLASSES - 1; c >= 0; c--) {
        json_object_set_new(by, lg_class_name(c), json_integer(queued[c]));
        total += queued[c];
    }
    json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "queued", json_integer(total));
    json_object_set_new(o, "by_class", by);
    json_object_set_new(o, "head_wait_ms", json_real(round(head_wait_ms * 10) / 10));
    json_array_append_new(models, o);
}

/* GET /admin/queues: the classes (configuration, waiting, refused), the models'
 * queues and the tenants (most tokens first). */
static void
admin_queues(struct lg_admin *a, struct evhttp_request *req)
{
    const struct lg_config *conf = a->gw->conf;
    struct lg_admission_class_view cv[LG_NCLASSES];
    struct lg_tenant_view *v;
    size_t n;
    json_t *root = json_object();
    json_t *classes = json_array();
    json_t *models = json_array();
    json_t *tenants = json_array();

    lg_admission_classes(a->gw->admission, cv);
    for (int c = LG_NCLASSES - 1; c >= 0; c--) {
        const struct lg_class_conf *cc = &conf->scheduling.classes[c];
        json_t *o = json_object();
        json_t *refused = json_object();

        json_object_set_new(o, "class", json_string(lg_class_name(c)));
        json_object_set_new(o, "queue_deadline_ms",
                            json_integer((json_int_t)(cc->queue_deadline_ms
                                                          ? cc->queue_deadline_ms
                                                          : conf->timeouts.queue_ms)));
        json_object_set_new(o, "sheddable", json_boolean(cc->sheddable));
        json_object_set_new(o, "ttft_target_ms",
                            cc->ttft_target_ms ? json_integer((json_int_t)cc->ttft_target_ms)
                                               : json_null());
        json_object_set_new(o, "queued", json_integer(cv[c].queued));
        for (int r = 1; r < LG_SHED_NREASONS; r++) {
            json_object_set_new(refused, lg_shed_name((enum lg_shed)r),
                                json_integer((json_int_t)cv[c].refused[r]));
        }
        json_object_set_new(o, "refused", refused);
        json_array_append_new(classes, o);
    }
    lg_admission_foreach_model(a->gw->admission, admin_queue_model, models);
    n = lg_admission_tenant_views(a->gw->admission, &v);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_object();
        uint64_t adm = 0, shed = 0, tok = 0, wait = 0;
        uint32_t q = 0;

        for (int c = 0; c < LG_NCLASSES; c++) {
            adm += v[i].admitted[c];
            shed += v[i].shed[c];
            tok += v[i].tokens[c];
            wait += v[i].wait_ms[c];
            q += v[i].queued[c];
        }
        json_object_set_new(o, "tenant", json_string(v[i].name));
        json_object_set_new(o, "service", json_real(round(v[i].service)));
        json_object_set_new(o, "queued", json_integer(q));
        json_object_set_new(o, "admitted", json_integer((json_int_t)adm));
        json_object_set_new(o, "shed", json_integer((json_int_t)shed));
        json_object_set_new(o, "tokens", json_integer((json_int_t)tok));
        json_object_set_new(o, "queue_wait_ms_total", json_integer((json_int_t)wait));
        json_array_append_new(tenants, o);
    }
    free(v);
    json_object_set_new(root, "fair", json_boolean(conf->scheduling.fair));
    json_object_set_new(root, "waiting", json_integer(lg_admission_waiting(a->gw->admission)));
    json_object_set_new(root, "classes", classes);
    json_object_set_new(root, "models", models);
    json_object_set_new(root, "tenants", tenants);
    admin_reply_json(req, 200, "OK", root);
}

/* ---- dispatch ------------------------------------------------------------------------- */

static void
admin_on_request(struct evhttp_request *req, void *arg)
{
    struct lg_admin *a = arg;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    bool get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;

    if (path == NULL) {
        admin_error(req, 400, "Bad Request", "no path");
        return;
    }
    if ((strncmp(path, "/admin/", 7) == 0 || strcmp(path, "/metrics") == 0)
        && !admin_authorized(a, req)) {
        return;
    }
    if (strcmp(path, "/admin/backends") == 0) {
        if (!get) {
            admin_error(req, 405, "Method Not Allowed", "use GET");
            return;
        }
        admin_backends(a, req);
    } else if (strcmp(path, "/admin/peers") == 0) {
        if (!get) {
            admin_error(req, 405, "Method Not Allowed", "use GET");
            return;
        }
        admin_peers(a, req);
    } else if (strcmp(path, "/admin/history") == 0) {
        if (!get) {
            admin_error(req, 405, "Method Not Allowed", "use GET");
            return;
        }
        admin_history(a, req);
    } else if (strcmp(path, "/admin/queues") == 0) {
        if (!get) {
            admin_error(req, 405, "Method Not Allowed", "use GET");
            return;
        }
        admin_queues(a, req);
    } else if (strcmp(path, "/admin/budgets") == 0) {
        if (!get) {
            admin_error(req, 405, "Method Not Allowed", "use GET");
            return;
        }
        admin_budgets(a, req);
    } else if (strcmp(path, "/") == 0 || strcmp(path, "/status") == 0) {
        struct evbuffer *body = evbuffer_new();

        evbuffer_add_reference(body, lg_status_page, strlen(lg_status_page), NULL, NULL);
        admin_reply(req, 200, "OK", "text/html; charset=utf-8", body);
        evbuffer_free(body);
    } else if (strcmp(path, "/metrics") == 0) {
        if (!get) {
            admin_error(req, 405, "Method Not Allowed", "use GET");
            return;
        }
        admin_metrics(a, req);
    } else if (strcmp(path, "/admin/reload") == 0) {
        if (cmd != EVHTTP_REQ_POST) {
            admin_error(req, 405, "Method Not Allowed", "use POST");
            return;
        }
        admin_reload(a, req);
    } else if (strncmp(path, "/admin/backends/", 16) != 0 || !admin_backend_action(a, req, path)) {
        admin_error(req, 404, "Not Found", "no such admin endpoint");
    }
}

/* ---- the thread --------------------------------------------------------------------------- */

static void *
admin_main(void *arg)
{
    struct lg_admin *a = arg;

    event_base_dispatch(a->base);
    return NULL;
}

static int
admin_socket(const struct lg_admin_conf *ac, struct sockaddr_storage *bound)
{
    int fd = socket(ac->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    socklen_t len = sizeof(*bound);

    if (fd < 0) {
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0
        || bind(fd, (const struct sockaddr *)&ac->addr, ac->addrlen) != 0 || listen(fd, 128) != 0
        || getsockname(fd, (struct sockaddr *)bound, &len) != 0) {
        int saved = errno;

        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int
lg_admin_start(struct lg_gateway *gw, struct sockaddr_storage *bound, struct lg_admin **out)
{
    const struct lg_admin_conf *ac = &gw->conf->admin;
    struct lg_admin *a;
    int fd;

    *out = NULL;
    if (ac->listen == NULL) {
        return LG_OK;
    }
    fd = admin_socket(ac, bound);
    if (fd < 0) {
        char hint[256];
        int err = errno;

        LG_ERROR("admin: cannot listen on %s: %s; %s", ac->listen, strerror(err),
                 lg_errno_hint(err, "\"admin\"", hint, sizeof(hint)));
        return LG_EIO;
    }
    a = lg_xcalloc(1, sizeof(*a));
    a->gw = gw;
    a->started_ns = lg_now_ns();
    a->base = event_base_new();
    a->http = a->base != NULL ? evhttp_new(a->base) : NULL;
    if (a->http == NULL || evhttp_accept_socket_with_handle(a->http, fd) == NULL) {
        LG_ERROR("admin: cannot set up the HTTP server");
        close(fd);
        lg_admin_stop(a);
        return LG_ERR;
    }
    evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
    evhttp_set_max_body_size(a->http, ADMIN_MAX_BODY);
    evhttp_set_max_headers_size(a->http, ADMIN_MAX_HEADERS);
    evhttp_set_timeout(a->http, ADMIN_TIMEOUT_S);
    evhttp_set_gencb(a->http, admin_on_request, a);
    a->news_ev = event_new(a->base, -1, 0, admin_on_news, a);
    a->expiry_ev = event_new(a->base, -1, EV_PERSIST, admin_on_news, a);
    if (a->news_ev == NULL || a->expiry_ev == NULL) {
        LG_ERROR("admin: cannot set up its timer");
        lg_admin_stop(a);
        return LG_ERR;
    }
    a->history = lg_history_new(&ac->history);
    if (a->history != NULL) {
        struct timeval tv = { (time_t)(ac->history.resolution_ms / 1000),
                              (suseconds_t)(ac->history.resolution_ms % 1000 * 1000) };

        a->history_ev = event_new(a->base, -1, EV_PERSIST, admin_on_history_tick, a);
        if (a->history_ev == NULL || event_add(a->history_ev, &tv) != 0) {
            LG_ERROR("admin: cannot set up the history's timer");
            lg_admin_stop(a);
            return LG_ERR;
        }
        lg_history_sample(a->history, gw); /* the baseline (the thread is not running yet) */
    }
    if (pthread_create(&a->thread, NULL, admin_main, a) != 0) {
        LG_ERROR("admin: cannot start its thread");
        lg_admin_stop(a);
        return LG_ERR;
    }
    *out = a;
    return LG_OK;
}

void
lg_admin_stop(struct lg_admin *a)
{
    if (a == NULL) {
        return;
    }
    if (a->thread) {
        event_base_loopbreak(a->base);
        pthread_join(a->thread, NULL);
    }
    /* held requests go with their connections; the waiters are ours */
    lg_backend_news_event(NULL);
    while (a->waiters != NULL) {
        struct admin_waiter *w = a->waiters;

        a->waiters = w->next;
        evhttp_connection_set_closecb(w->conn, NULL, NULL);
        free(w);
    }
    if (a->http != NULL) {
        evhttp_free(a->http);
    }
    if (a->news_ev != NULL) {
        event_free(a->news_ev);
    }
    if (a->expiry_ev != NULL) {
        event_free(a->expiry_ev);
    }
    if (a->history_ev != NULL) {
        event_free(a->history_ev);
    }
    lg_history_free(a->history);
    if (a->base != NULL) {
        event_base_free(a->base);
    }
    free(a);
}
