/*
 * conn.c: llmsim's client connections: HTTP/1.1 keep-alive, routing, the
 * OpenAI endpoints, the control plane, and token streaming.
 *
 * Owns: each connection's bufferevent (and fd), timer, request reader,
 * parsed request and sequence. The engine borrows the sequence from submit
 * until it completes, is aborted or dropped.
 * Lifecycle: READ -> (route) -> answer at once | HELD (stall) | GENERATE |
 * DELAY -> READ again (keep-alive) or FLUSH -> LINGER -> CLOSED. Closing is deferred:
 * lg_sim_conn_close() detaches the callbacks and queues the connection for
 * the reap event, so nothing is freed under a callback. A client that goes
 * away while its sequence is in the engine aborts the sequence at once.
 */
#include "conn.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <jansson.h>

#include "base/lg_core.h"
#include "http/httphdr.h"
#include "control.h"
#include "load.h"
#include "metrics.h"
#include "sim.h"

/* Bytes a client may pipeline behind a request that is being served. */
#define CONN_MAX_PIPELINED ((size_t)1 << 20)

/* How long a closing connection keeps reading what the client still sends. */
#define CONN_LINGER_S 2

static void conn_parse(struct lg_sim_conn *c);

/* ---- responses ------------------------------------------------------------- */

/*
 * Writes a response head. content_length < 0 means a chunked body.
 * `extra` holds more header lines, each ending in CRLF, or is NULL.
 */
static void
conn_head(struct lg_sim_conn *c, int status, const char *ctype, long long content_length,
          const char *extra)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    char length[64];

    if (content_length >= 0) {
        snprintf(length, sizeof(length), "Content-Length: %lld\r\n", content_length);
    } else {
        snprintf(length, sizeof(length), "Transfer-Encoding: chunked\r\n");
    }
    evbuffer_add_printf(out,
                        "HTTP/1.1 %d %s\r\n"
                        "Server: llmsim\r\n"
                        "X-Llmsim-Replica: %s\r\n"
                        "Content-Type: %s\r\n"
                        "%s%s%s"
                        "\r\n",
                        status, lg_http_reason(status), c->sim->conf->name, ctype, length,
                        c->keep_alive ? "" : "Connection: close\r\n", extra ? extra : "");
}

/*
 * Sends what the output holds now. Writing is direct: EV_WRITE stays off
 * while the socket takes everything, so a token costs one writev and no
 * epoll_ctl; only a socket that pushes back gets the bufferevent's write
 * event until the backlog drains (conn_on_write turns it off again).
 */
static void
conn_flush(struct lg_sim_conn *c)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);

    if (c->writing || evbuffer_get_length(out) == 0) {
        return;
    }
    /* an error is left to the bufferevent: it reports it (deferred) on its next write */
    evbuffer_write(out, bufferevent_getfd(c->bev));
    if (evbuffer_get_length(out) > 0) {
        c->writing = true;
        bufferevent_enable(c->bev, EV_WRITE);
    }
}

static void
conn_flush_close(struct lg_sim_conn *c)
{
    c->state = LG_SIM_CONN_ST_FLUSH;
    conn_flush(c);
    /* deferred: never closes under the caller, even with nothing left to write */
    bufferevent_trigger(c->bev, EV_WRITE, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/* An inference request leaves the replica's server_load (its response ended or its
 * connection closed). */
static void
conn_unload(struct lg_sim_conn *c)
{
    if (c->in_load) {
        c->in_load = false;
        c->sim->server_load--;
    }
}

/* The response is complete: read the next request or close. */
static void
conn_end_response(struct lg_sim_conn *c)
{
    conn_unload(c);
    conn_flush(c);
    lg_sim_request_free(&c->api);
    c->model = NULL;
    c->embed_ready = false;
    if (!c->keep_alive) {
        conn_flush_close(c);
        return;
    }
    c->state = LG_SIM_CONN_ST_READ;
    lg_sim_httpreq_next(&c->req);
    if (evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) {
        bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
    }
}

/* A whole response; moves body's bytes to the output. */
static void
conn_respond(struct lg_sim_conn *c, int status, const char *ctype, struct evbuffer *body,
             const char *extra)
{
    conn_head(c, status, ctype, body ? (long long)evbuffer_get_length(body) : 0, extra);
    if (body != NULL) {
        evbuffer_add_buffer(bufferevent_get_output(c->bev), body);
    }
    conn_end_response(c);
}

static void
conn_respond_error(struct lg_sim_conn *c, int status, const char *type, const char *param,
                   const char *message, const char *extra)
{
    struct evbuffer *body = evbuffer_new();

    if (body == NULL) {
        lg_sim_conn_close(c);
        return;
    }
    lg_sim_api_body_error(body, status, type, param, message);
    conn_respond(c, status, "application/json", body, extra);
    evbuffer_free(body);
}

static void
conn_respond_json(struct lg_sim_conn *c, json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT);
    struct evbuffer *body = evbuffer_new();

    json_decref(doc);
    if (text == NULL || body == NULL) {
        free(text);
        if (body != NULL) {
            evbuffer_free(body);
        }
        lg_sim_conn_close(c);
        return;
    }
    evbuffer_add(body, text, strlen(text));
    free(text);
    conn_respond(c, 200, "application/json", body, NULL);
    evbuffer_free(body);
}

/* ---- inference endpoints ---------------------------------------------------- */

/* A status fault in effect answers instead of the engine; true if it did. */
static bool
conn_status_fault(struct lg_sim_conn *c)
{
    struct lg_sim *sim = c->sim;
    uint32_t retry_after;
    char extra[64];
    char msg[128];
    int status;

    if (!lg_sim_faults_status(&sim->faults, lg_now_ns(), &status, &retry_after)) {
        return false;
    }
    sim->counters.fault_responses++;
    snprintf(extra, sizeof(extra), "Retry-After: %u\r\n", retry_after);
    snprintf(msg, sizeof(msg), "replica %s is unavailable (simulated %d)", sim->conf->name, status);
    conn_respond_error(c, status, status == 429 ? "rate_limit_error" : "server_error", NULL, msg,
                       extra);
    return true;
}

static const struct lg_sim_model *
conn_find_model(const struct lg_sim *sim, const char *name)
{
    if (name == NULL) {
        return &sim->conf->models[0];
    }
    for (size_t i = 0; i < sim->conf->nmodels; i++) {
        if (strcmp(sim->conf->models[i].name, name) == 0) {
            return &sim->conf->models[i];
        }
    }
    return NULL;
}

/* Parses the body and resolves the model; false if an error was answered. */
static bool
conn_parse_api(struct lg_sim_conn *c, enum lg_sim_api_kind kind)
{
    struct lg_sim *sim = c->sim;
    struct lg_sim_api_error err;
    char msg[LG_SIM_API_MODEL_MAX + 64];

    if (lg_sim_api_parse_buffer(kind, c->req.body, sim->conf->prefix_block_tokens, &c->api, &err)
        != LG_OK) {
        sim->counters.client_errors++;
        conn_respond_error(c, err.status, err.type, err.param, err.message, NULL);
        return false;
    }
    c->model = conn_find_model(sim, c->api.model);
    if (c->model == NULL) {
        sim->counters.client_errors++;
        snprintf(msg, sizeof(msg), "The model `%s` does not exist.", c->api.model);
        conn_respond_error(c, 404, "NotFoundError", "model", msg, NULL);
        return false;
    }
    return true;
}

/* ---- the Responses API's stored answers --------------------------------------- */

static bool
conn_resp_known(const struct lg_sim *sim, const char *id)
{
    uint64_t v;
    char *end;

    if (strncmp(id, "resp_", 5) != 0 || strlen(id) != 5 + 16) {
        return false;
    }
    v = strtoull(id + 5, &end, 16);
    if (*end != '\0') {
        return false;
    }
    for (size_t i = 0; i < LG_ARRAY_SIZE(sim->resp_store); i++) {
        if (sim->resp_store[i] == v && v != 0) {
            return true;
        }
    }
    return false;
}

static void
conn_resp_store(struct lg_sim *sim, uint64_t id)
{
    sim->resp_store[sim->resp_stored++ % LG_ARRAY_SIZE(sim->resp_store)] = id;
}

/* A previous_response_id this replica did not make: vLLM's 404. */
static bool
conn_resp_unknown(struct lg_sim_conn *c)
{
    char msg[320];

    if (c->api.kind != LG_SIM_API_RESPONSES || c->api.previous_response_id == NULL
        || conn_resp_known(c->sim, c->api.previous_response_id)) {
        return false;
    }
    c->sim->counters.client_errors++;
    snprintf(msg, sizeof(msg), "Response with id '%s' not found.", c->api.previous_response_id);
    conn_respond_error(c, 404, "invalid_request_error", "previous_response_id", msg, NULL);
    return true;
}

/* POST /v1/messages/count_tokens: answered at once. */
static void
conn_count_tokens(struct lg_sim_conn *c)
{
    struct evbuffer *body;

    if (conn_status_fault(c) || !conn_parse_api(c, LG_SIM_API_COUNT_TOKENS)) {
        return;
    }
    body = evbuffer_new();
    if (body == NULL) {
        lg_sim_conn_close(c);
        return;
    }
    lg_sim_api_body_count_tokens(body, &c->api);
    conn_respond(c, 200, "application/json", body, NULL);
    evbuffer_free(body);
}

static void
conn_generate(struct lg_sim_conn *c, enum lg_sim_api_kind kind)
{
    struct lg_sim *sim = c->sim;
    uint64_t now = lg_now_ns(), hold;
    uint32_t max_tokens, tokens;

    sim->counters.requests++;
    c->in_load = true;
    sim->server_load++;
    c->load_format = (uint8_t)lg_sim_load_format_of(&c->req);
    if (conn_status_fault(c) || !conn_parse_api(c, kind) || conn_resp_unknown(c)) {
        return;
    }
    max_tokens = c->api.max_tokens ? c->api.max_tokens : sim->conf->max_tokens_default;
    tokens = max_tokens;
    if (c->api.sim_tokens != 0) { /* as an engine stops at its end of sequence */
        tokens =
            c->api.max_tokens ? LG_MIN(c->api.sim_tokens, c->api.max_tokens) : c->api.sim_tokens;
    }
    c->stream = c->api.stream;
    c->include_usage = c->api.stream && c->api.include_usage;
    c->resp = (struct lg_sim_api_resp){
        .kind = kind,
        .id = lg_sim_next_id(sim),
        .created = (int64_t)time(NULL),
        .model_json = c->model->json,
        .prompt_tokens = c->api.prompt_tokens,
        .completion_tokens = tokens,
        .seed = sim->conf->seed,
        .stopped = c->api.sim_tokens != 0 && (c->api.max_tokens == 0 || tokens < max_tokens),
        .role_chunk = sim->conf->role_chunk,
        .context = sim->conf->text_context,
        .ctx = c->api.context,
    };
    /* unique to this replica: its name is in it */
    c->resp.resp_id =
        lg_mix64(c->resp.id ^ lg_hash64(sim->conf->name, strlen(sim->conf->name), LG_HASH64_INIT));
    if (c->resp.context) {
        /* the same model answers the same text on every replica */
        c->resp.seed = lg_sim_api_context_seed(c->model->name, &c->api);
    }
    memset(&c->seq, 0, sizeof(c->seq));
    c->seq.owner = c;
    c->seq.prompt_tokens = c->api.prompt_tokens;
    c->seq.max_tokens = tokens;
    c->seq.block_keys = c->api.block_keys;
    c->seq.nblocks = c->api.nblocks;
    c->seq.priority = c->api.priority;
    hold = lg_sim_faults_first_hold(&sim->faults, now, sim->counters.requests);
    c->seq.park_until_ns = hold > 0 ? now + hold : 0;
    c->state = LG_SIM_CONN_ST_GENERATE;
    if (c->stream) {
        char extra[256];

        /* as engines do: the head goes out at once, tokens follow as produced; the load
         * header (--endpoint-load-metrics all) says the engine's state before this one joins */
        snprintf(extra, sizeof(extra), "Cache-Control: no-cache\r\n");
        if (sim->conf->load_header == LG_SIM_LOAD_HEADER_ALL) {
            lg_sim_load_header(sim, (enum lg_sim_load_format)c->load_format, extra + strlen(extra),
                               sizeof(extra) - strlen(extra));
        }
        conn_head(c, 200, "text/event-stream", -1, extra);
        if (kind == LG_SIM_API_RESPONSES || kind == LG_SIM_API_MESSAGES) {
            lg_sim_api_events_start(bufferevent_get_output(c->bev), &c->resp);
        }
        conn_flush(c);
    }
    lg_sim_engine_submit(&sim->engine, &c->seq);
}

static bool
conn_on_token(struct lg_sim_seq *seq, uint32_t index, bool last)
{
    struct lg_sim_conn *c = seq->owner;
    struct lg_sim *sim = c->sim;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    uint32_t cut;

    if (c->stream) {
        lg_sim_api_chunk_token(out, &c->resp, index);
    }
    if (last) {
        sim->counters.requests_ok++;
        if (c->resp.kind == LG_SIM_API_RESPONSES) {
            conn_resp_store(sim, c->resp.resp_id);
        }
        if (c->stream
            && (c->resp.kind == LG_SIM_API_RESPONSES || c->resp.kind == LG_SIM_API_MESSAGES)) {
            lg_sim_api_events_end(out, &c->resp);
            conn_end_response(c);
        } else if (c->stream) {
            lg_sim_api_chunk_finish(out, &c->resp);
            if (c->include_usage) {
                lg_sim_api_chunk_usage(out, &c->resp);
            }
            lg_sim_api_chunk_done(out);
            conn_end_response(c);
        } else {
            struct evbuffer *body = evbuffer_new();

            if (body == NULL) {
                lg_sim_conn_close(c);
                return true;
            }
            char extra[256] = "";

            /* vLLM adds the load header to an answer that is not streamed, when it is done */
            if (sim->conf->load_header != LG_SIM_LOAD_HEADER_OFF) {
                lg_sim_load_header(sim, (enum lg_sim_load_format)c->load_format, extra,
                                   sizeof(extra));
            }
            lg_sim_api_body_completion(body, &c->resp);
            conn_respond(c, 200, "application/json", body, extra[0] ? extra : NULL);
            evbuffer_free(body);
        }
        return true;
    }
    conn_flush(c);
    cut = lg_sim_faults_close_after(&sim->faults, lg_now_ns());
    if (cut != 0 && index + 1 >= cut) {
        /* mid-stream, without the final chunk: the engine drops the sequence */
        sim->counters.closed_by_fault++;
        conn_flush_close(c);
        return false;
    }
    return true;
}

const struct lg_sim_engine_ops lg_sim_conn_engine_ops = {
    .on_token = conn_on_token,
};

static void
conn_embed_respond(struct lg_sim_conn *c)
{
    struct lg_sim *sim = c->sim;
    struct evbuffer *body = evbuffer_new();

    if (body == NULL) {
        lg_sim_conn_close(c);
        return;
    }
    sim->counters.requests_ok++;
    sim->counters.embeddings++;
    lg_sim_api_body_embeddings(body, &c->api, c->model->json, sim->conf->seed,
                               sim->conf->embedding_dim);
    conn_respond(c, 200, "application/json", body, NULL);
    evbuffer_free(body);
}

static void
conn_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct lg_sim_conn *c = arg;
    struct lg_sim *sim = c->sim;

    if (c->state == LG_SIM_CONN_ST_LINGER) {
        lg_sim_conn_close(c);
        return;
    }
    if (c->state != LG_SIM_CONN_ST_DELAY) {
        return;
    }
    if (sim->stalled) {
        c->embed_ready = true;
        c->state = LG_SIM_CONN_ST_HELD;
        TAILQ_INSERT_TAIL(&sim->held, c, held_link);
        return;
    }
    conn_embed_respond(c);
}

static void
conn_embed(struct lg_sim_conn *c)
{
    struct lg_sim *sim = c->sim;
    double delay_ns;
    struct timeval tv;

    sim->counters.requests++;
    c->in_load = true;
    sim->server_load++;
    if (conn_status_fault(c) || !conn_parse_api(c, LG_SIM_API_EMBEDDING)) {
        return;
    }
    if (c->timer == NULL) {
        c->timer = evtimer_new(sim->base, conn_on_timer, c);
        if (c->timer == NULL) {
            lg_sim_conn_close(c);
            return;
        }
    }
    /* a prefill of the inputs, outside the generation slots */
    delay_ns = sim->conf->prefill_us_per_token * 1e3 * c->api.prompt_tokens / sim->speed;
    delay_ns = LG_MIN(delay_ns, 3600e9);
    tv.tv_sec = (time_t)(delay_ns / 1e9);
    tv.tv_usec = (suseconds_t)((uint64_t)delay_ns % LG_NS_PER_S / 1000);
    c->state = LG_SIM_CONN_ST_DELAY;
    evtimer_add(c->timer, &tv);
}

/* ---- other endpoints -------------------------------------------------------- */

static void
conn_models(struct lg_sim_conn *c)
{
    const struct lg_sim_conf *conf = c->sim->conf;
    json_t *data = json_array();

    for (size_t i = 0; i < conf->nmodels; i++) {
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", conf->models[i].name,
                                              "object", "model", "created", (json_int_t)time(NULL),
                                              "owned_by", "llmsim", "root", conf->models[0].name));
    }
    conn_respond_json(c, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

/* llama.cpp's GET /props: its slots (total_slots), which its /metrics does
 * not say; the other engines have no such route. */
static void
conn_props(struct lg_sim_conn *c)
{
    const struct lg_sim_conf *conf = c->sim->conf;

    if (conf->flavor != LG_SIM_FLAVOR_LLAMACPP) {
        c->sim->counters.client_errors++;
        conn_respond_error(c, 404, "NotFoundError", NULL, "no such endpoint", NULL);
        return;
    }
    conn_respond_json(c, json_pack("{s:{s:i},s:I,s:s,s:s}", "default_generation_settings", "n_ctx",
                                   0, "total_slots", (json_int_t)conf->slots, "model_path",
                                   conf->models[0].name, "build_info", "llmsim"));
}

/* vLLM's GET /load (--enable-server-load-tracking), SGLang's GET /v1/loads. */
static void
conn_load(struct lg_sim_conn *c)
{
    struct evbuffer *body;

    if (!c->sim->conf->server_load_tracking) {
        c->sim->counters.client_errors++;
        conn_respond_error(c, 404, "NotFoundError", NULL, "no such endpoint", NULL);
        return;
    }
    body = evbuffer_new();
    if (body == NULL) {
        lg_sim_conn_close(c);
        return;
    }
    lg_sim_load_vllm(c->sim, body);
    conn_respond(c, 200, "application/json", body, NULL);
    evbuffer_free(body);
}

static void
conn_loads(struct lg_sim_conn *c)
{
    struct evbuffer *body;
    const char *query;
    size_t qlen;
    int status;

    if (!c->sim->conf->v1_loads) {
        c->sim->counters.client_errors++;
        conn_respond_error(c, 404, "NotFoundError", NULL, "no such endpoint", NULL);
        return;
    }
    body = evbuffer_new();
    if (body == NULL) {
        lg_sim_conn_close(c);
        return;
    }
    query = lg_sim_httpreq_query(&c->req, &qlen);
    status = lg_sim_load_sglang(c->sim, query, qlen, body);
    if (status != 200) {
        c->sim->counters.client_errors++;
    }
    conn_respond(c, status, "application/json", body, NULL);
    evbuffer_free(body);
}

static void
conn_health(struct lg_sim_conn *c)
{
    struct evbuffer *body;

    if (c->sim->conf->flavor != LG_SIM_FLAVOR_LLAMACPP) {
        conn_respond(c, 200, "application/json", NULL, NULL);
        return;
    }
    body = evbuffer_new();
    if (body == NULL) {
        lg_sim_conn_close(c);
        return;
    }
    evbuffer_add_printf(body, "{\"status\":\"ok\"}");
    conn_respond(c, 200, "application/json", body, NULL);
    evbuffer_free(body);
}

static void
conn_metrics(struct lg_sim_conn *c)
{
    struct evbuffer *body = evbuffer_new();

    if (body == NULL) {
        lg_sim_conn_close(c);
        return;
    }
    lg_sim_metrics_render(c->sim, body);
    conn_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", body, NULL);
    evbuffer_free(body);
}

static void
conn_state(struct lg_sim_conn *c)
{
    struct evbuffer *body = evbuffer_new();

    if (body == NULL) {
        lg_sim_conn_close(c);
        return;
    }
    lg_sim_control_state(c->sim, body);
    conn_respond(c, 200, "application/json", body, NULL);
    evbuffer_free(body);
}

static void
conn_control(struct lg_sim_conn *c)
{
    struct evbuffer *body = c->req.body;
    struct lg_sim_control ctl;
    char err[256];
    size_t len = evbuffer_get_length(body);
    const char *text = (const char *)evbuffer_pullup(body, (ssize_t)len);

    /* a small control document, not a relayed body: linearising it is fine */
    if (lg_sim_control_parse(text ? text : "", len, &ctl, err, sizeof(err)) != LG_OK) {
        conn_respond_error(c, 400, "invalid_request_error", NULL, err, NULL);
        return;
    }
    if (lg_sim_control_apply(c->sim, &ctl) != LG_OK) {
        conn_respond_error(c, 409, "invalid_request_error", "fault",
                           "too many faults scheduled (clear them first)", NULL);
        return;
    }
    conn_state(c);
}

/* ---- routing ---------------------------------------------------------------- */

static bool
conn_path_is(const char *path, size_t len, const char *lit)
{
    return strlen(lit) == len && memcmp(path, lit, len) == 0;
}

static void
conn_not_allowed(struct lg_sim_conn *c, const char *allow)
{
    char extra[64];

    snprintf(extra, sizeof(extra), "Allow: %s\r\n", allow);
    c->sim->counters.client_errors++;
    conn_respond_error(c, 405, "invalid_request_error", NULL, "method not allowed", extra);
}

/* The /sim/ control plane is served even during a stall. */
static bool
conn_route_sim(struct lg_sim_conn *c, const char *path, size_t len)
{
    bool post = c->req.method == HTTP_POST, get = c->req.method == HTTP_GET;

    if (conn_path_is(path, len, "/sim/state")) {
        if (get) {
            conn_state(c);
        } else {
            conn_not_allowed(c, "GET");
        }
        return true;
    }
    if (conn_path_is(path, len, "/sim/control")) {
        if (post) {
            conn_control(c);
        } else {
            conn_not_allowed(c, "POST");
        }
        return true;
    }
    return false;
}

static void
conn_route(struct lg_sim_conn *c)
{
    static const struct {
        const char *path;
        int kind; /* enum lg_sim_api_kind, or -1 for a GET endpoint */
        void (*get)(struct lg_sim_conn *c);
    } routes[] = {
        { "/v1/chat/completions", LG_SIM_API_CHAT, NULL },
        { "/v1/completions", LG_SIM_API_COMPLETION, NULL },
        { "/v1/embeddings", LG_SIM_API_EMBEDDING, NULL },
        { "/v1/responses", LG_SIM_API_RESPONSES, NULL },
        { "/v1/messages", LG_SIM_API_MESSAGES, NULL },
        { "/v1/messages/count_tokens", LG_SIM_API_COUNT_TOKENS, NULL },
        { "/v1/models", -1, conn_models },
        { "/health", -1, conn_health },
        { "/metrics", -1, conn_metrics },
        { "/props", -1, conn_props },
        { "/load", -1, conn_load },
        { "/v1/loads", -1, conn_loads },
    };
    size_t len;
    const char *path = lg_sim_httpreq_path(&c->req, &len);

    for (size_t i = 0; i < LG_ARRAY_SIZE(routes); i++) {
        if (!conn_path_is(path, len, routes[i].path)) {
            continue;
        }
        if (routes[i].kind < 0) {
            if (c->req.method == HTTP_GET) {
                routes[i].get(c);
            } else {
                conn_not_allowed(c, "GET");
            }
        } else if (c->req.method != HTTP_POST) {
            conn_not_allowed(c, "POST");
        } else if (routes[i].kind == LG_SIM_API_EMBEDDING) {
            conn_embed(c);
        } else if (routes[i].kind == LG_SIM_API_COUNT_TOKENS) {
            conn_count_tokens(c);
        } else {
            conn_generate(c, (enum lg_sim_api_kind)routes[i].kind);
        }
        return;
    }
    c->sim->counters.client_errors++;
    conn_respond_error(c, 404, "NotFoundError", NULL, "no such endpoint", NULL);
}

static void
conn_dispatch(struct lg_sim_conn *c)
{
    struct lg_sim *sim = c->sim;
    size_t len;
    const char *path = lg_sim_httpreq_path(&c->req, &len);

    sim->counters.http_requests++;
    c->keep_alive = c->req.keep_alive;
    if (conn_route_sim(c, path, len)) {
        return;
    }
    if (sim->stalled) {
        c->state = LG_SIM_CONN_ST_HELD;
        TAILQ_INSERT_TAIL(&sim->held, c, held_link);
        return;
    }
    conn_route(c);
}

void
lg_sim_conn_release_held(struct lg_sim *sim)
{
    struct lg_sim_conn *c;

    while (!sim->stalled && (c = TAILQ_FIRST(&sim->held)) != NULL) {
        TAILQ_REMOVE(&sim->held, c, held_link);
        if (c->embed_ready) {
            conn_embed_respond(c);
        } else {
            conn_route(c);
        }
    }
}

/* ---- socket events ----------------------------------------------------------- */

static void
conn_fail_request(struct lg_sim_conn *c)
{
    char msg[128];

    snprintf(msg, sizeof(msg), "%s", c->req.error_reason ? c->req.error_reason : "bad request");
    c->keep_alive = false;
    c->sim->counters.client_errors++;
    conn_respond_error(c, c->req.error_status, "invalid_request_error", NULL, msg, NULL);
}

/* Reads requests from the input until one is being served or bytes run out. */
static void
conn_parse(struct lg_sim_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);

    while (c->state == LG_SIM_CONN_ST_READ) {
        struct evbuffer_iovec vec[8];
        enum lg_sim_httpreq_rc rc = LG_SIM_HTTPREQ_MORE;
        size_t used = 0;
        int n = evbuffer_peek(in, -1, NULL, vec, (int)LG_ARRAY_SIZE(vec));
        int i;

        if (n <= 0) {
            break;
        }
        for (i = 0; i < n && i < (int)LG_ARRAY_SIZE(vec); i++) {
            size_t k;

            rc = lg_sim_httpreq_feed(&c->req, vec[i].iov_base, vec[i].iov_len, &k);
            used += k;
            if (rc != LG_SIM_HTTPREQ_MORE) {
                break;
            }
        }
        evbuffer_drain(in, used);
        if (rc == LG_SIM_HTTPREQ_ERROR) {
            conn_fail_request(c);
            return;
        }
        if (rc == LG_SIM_HTTPREQ_DONE) {
            conn_dispatch(c);
            continue;
        }
        if (c->req.expect_continue && !c->req.continue_sent) {
            c->req.continue_sent = true;
            evbuffer_add_printf(bufferevent_get_output(c->bev), "HTTP/1.1 100 Continue\r\n\r\n");
            conn_flush(c);
        }
        if (n <= (int)LG_ARRAY_SIZE(vec)) {
            break;
        }
    }
}

static void
conn_on_read(struct bufferevent *bev, void *arg)
{
    struct lg_sim_conn *c = arg;

    if (c->state == LG_SIM_CONN_ST_READ) {
        conn_parse(c);
        return;
    }
    if (c->state == LG_SIM_CONN_ST_FLUSH || c->state == LG_SIM_CONN_ST_LINGER) {
        evbuffer_drain(bufferevent_get_input(bev), evbuffer_get_length(bufferevent_get_input(bev)));
        return;
    }
    if (evbuffer_get_length(bufferevent_get_input(bev)) > CONN_MAX_PIPELINED) {
        LG_DEBUG("conn=%" PRIu64 " pipelined more than %zu bytes: closing", c->id,
                 CONN_MAX_PIPELINED);
        lg_sim_conn_close(c);
    }
}

/*
 * Everything is sent: send FIN but keep reading (and discarding) for a
 * while, so that a client still sending (a refused body, a pipelined request)
 * reads our answer instead of a reset (RFC 9112, section 9.6).
 */
static void
conn_linger(struct lg_sim_conn *c)
{
    struct timeval tv = { .tv_sec = CONN_LINGER_S, .tv_usec = 0 };

    if (c->timer == NULL) {
        c->timer = evtimer_new(c->sim->base, conn_on_timer, c);
    }
    if (c->timer == NULL || shutdown(bufferevent_getfd(c->bev), SHUT_WR) != 0) {
        lg_sim_conn_close(c);
        return;
    }
    c->state = LG_SIM_CONN_ST_LINGER;
    evbuffer_drain(bufferevent_get_input(c->bev),
                   evbuffer_get_length(bufferevent_get_input(c->bev)));
    bufferevent_enable(c->bev, EV_READ);
    evtimer_add(c->timer, &tv);
}

static void
conn_on_write(struct bufferevent *bev, void *arg)
{
    struct lg_sim_conn *c = arg;

    if (evbuffer_get_length(bufferevent_get_output(bev)) > 0) {
        return;
    }
    if (c->writing) {
        c->writing = false;
        bufferevent_disable(bev, EV_WRITE);
    }
    if (c->state == LG_SIM_CONN_ST_FLUSH) {
        conn_linger(c);
    }
}

static void
conn_on_event(struct bufferevent *bev, short what, void *arg)
{
    struct lg_sim_conn *c = arg;

    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (c->state == LG_SIM_CONN_ST_GENERATE) {
            LG_DEBUG("conn=%" PRIu64 " client went away: aborting its sequence", c->id);
        }
        lg_sim_conn_close(c);
    }
}

int
lg_sim_conn_accept(struct lg_sim *sim, evutil_socket_t fd)
{
    struct lg_sim_conn *c;
    int one = 1;

    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
        LG_DEBUG("TCP_NODELAY: %s", strerror(errno));
    }
    c = lg_xcalloc(1, sizeof(*c));
    c->sim = sim;
    c->id = ++sim->next_conn_id;
    c->bev = bufferevent_socket_new(sim->base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
    if (c->bev == NULL) {
        evutil_closesocket(fd);
        free(c);
        return LG_ENOMEM;
    }
    if (lg_sim_httpreq_init(&c->req, sim->conf->max_header_bytes, sim->conf->max_body_bytes)
        != LG_OK) {
        bufferevent_free(c->bev);
        free(c);
        return LG_ENOMEM;
    }
    bufferevent_setcb(c->bev, conn_on_read, conn_on_write, conn_on_event, c);
    bufferevent_enable(c->bev, EV_READ);
    TAILQ_INSERT_TAIL(&sim->conns, c, link);
    sim->nconns++;
    return LG_OK;
}

void
lg_sim_conn_close(struct lg_sim_conn *c)
{
    struct lg_sim *sim = c->sim;

    if (c->state == LG_SIM_CONN_ST_CLOSED) {
        return;
    }
    conn_unload(c);
    if (c->seq.state != LG_SIM_SEQ_ST_IDLE) {
        lg_sim_engine_abort(&sim->engine, &c->seq);
    }
    if (c->state == LG_SIM_CONN_ST_HELD) {
        TAILQ_REMOVE(&sim->held, c, held_link);
        sim->counters.abandoned++;
    }
    if (c->timer != NULL) {
        evtimer_del(c->timer);
    }
    bufferevent_setcb(c->bev, NULL, NULL, NULL, NULL);
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    c->state = LG_SIM_CONN_ST_CLOSED;
    TAILQ_REMOVE(&sim->conns, c, link);
    sim->nconns--;
    TAILQ_INSERT_TAIL(&sim->reap, c, link);
    event_active(sim->reap_ev, EV_TIMEOUT, 1);
}

void
lg_sim_conn_reap(struct lg_sim *sim)
{
    struct lg_sim_conn *c;

    while ((c = TAILQ_FIRST(&sim->reap)) != NULL) {
        TAILQ_REMOVE(&sim->reap, c, link);
        bufferevent_free(c->bev);
        if (c->timer != NULL) {
            event_free(c->timer);
        }
        lg_sim_httpreq_free(&c->req);
        lg_sim_request_free(&c->api);
        free(c);
    }
}
