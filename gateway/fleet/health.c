/*
 * health.c: the fleet's checker thread: active health checks, engine
 * /metrics scrapes and the per-model priors (see health.h).
 *
 * Owns: struct lg_health, its thread and event base, one evhttp connection
 * per checked backend (keep-alive, reused for checks and scrapes) and per
 * peer gateway, the peers' last answers, and the timers. Borrows: the fleet
 * and its backends (the fleet stops this thread before it frees them).
 * Writes, in backends: health (UP/DOWN), up_since_ns, the engine sample,
 * the peers' requests; in routes: the prior. Workers only read those.
 */
#include "fleet/health.h"

#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/enginemetrics.h"
#include "fleet/peers.h"
#include "http/tls.h"

struct health_target {
    struct lg_health *h;            /* borrowed: owner */
    struct lg_backend *b;           /* borrowed from the fleet */
    struct evhttp_connection *conn; /* owned */
    struct event *check_ev;         /* owned; NULL: no active checks */
    struct event *scrape_ev;        /* owned; NULL: no scraping */
    enum lg_engine_flavor flavor;   /* configured, or detected by the first scrape */
    bool checking;                  /* a check is in flight */
    bool scraping;                  /* a scrape is in flight */
    uint64_t scrape_sent_ns;        /* when it was sent */
    bool asking_props;              /* GET /props is in flight (llama.cpp) */
    uint64_t props_t_ns;            /* when /props was last asked; 0 = never */
    uint32_t scrape_failures;       /* answers without metrics in a row: scrapes back off */
    uint32_t ok_run, fail_run;      /* consecutive check results */
    struct lg_backend_engine eng;   /* last published engine state */
    uint64_t warn_ns;               /* rate limit for scrape warnings */
    uint64_t slots_warn_ns;         /* rate limit for warnings about its slot count */
    char why[192];                  /* why the last check or scrape got no answer */
    bool why_tls;                   /* ... and it was TLS */
    bool why_too_large;             /* ... or an answer past the connection's body limit */
    /* whether others are served there (health_fold_finished()) */
    uint64_t fin_t_ns;              /* the engine's finished count last read; 0 = never */
    double fin_prev;                /* ... that count */
    uint32_t ended_prev;            /* ... and ours ended there then */
    double fin_excess;              /* its finishes over ours since the first read */
    double fin_min_cur, fin_min_prev; /* ... the least in this HEALTH_ALONE_S and the last */
    uint64_t fin_bucket_ns;         /* when this one began */
    uint64_t fin_since_ns;          /* counted from (first read, engine restart) */
    uint64_t others_ns;             /* its finishes last outran ours; 0 = not since */
    uint64_t lag_t_ns;              /* eng.gauge_lag_ms last decayed */
};

/* Another gateway in front of the fleet (config "peers"). */
struct health_peer {
    struct lg_health *h;            /* borrowed: owner */
    const char *admin;              /* borrowed from the config: as written */
    struct evhttp_connection *conn; /* owned */
    struct event *ev;               /* owned: the next request */
    bool fetching;                  /* a request is out */
    bool self;                      /* it answered with our id: this gateway */
    struct lg_peer_state st;        /* owned: its last answer */
    uint64_t recv_ns;               /* when st came; 0 = none yet */
    uint64_t warn_ns;               /* rate limit for warnings */
};

struct lg_health {
    struct lg_health_fleet f;      /* borrowed: what the fleet lends (health.h) */
    struct event_base *base;       /* owned */
    struct event *prior_ev;        /* owned */
    struct event *stop_ev;         /* owned; activated by lg_health_stop() */
    struct health_target *targets; /* owned [n] */
    size_t n;
    struct health_peer *peers; /* owned [npeers] */
    size_t npeers;
    char (*keys)[LG_PEERS_KEY_MAX]; /* owned [n]: each backend's key among peers */
    pthread_t thread;
};

static struct timeval
health_tv(uint64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };

    return tv;
}

/* ---- active checks ------------------------------------------------------ */

/* What a request that got no answer met, from evhttp's error and the connection. */
static void
health_on_error(enum evhttp_request_error err, void *arg)
{
    struct health_target *t = arg;
    int e = EVUTIL_SOCKET_ERROR(); /* evhttp restores the connection's errno for us */
    const struct lg_health_conf *hc = &t->h->f.conf->health;

    t->why_tls =
        t->b->conf.tls
        && lg_tls_failed(evhttp_connection_get_bufferevent(t->conn), t->why, sizeof(t->why));
    if (t->why_tls) {
        return;
    }
    switch (err) {
    case EVREQ_HTTP_TIMEOUT:
        snprintf(t->why, sizeof(t->why), "no answer within health.timeout (%" PRIu64 " ms)",
                 hc->timeout_ms);
        break;
    case EVREQ_HTTP_EOF:
        snprintf(t->why, sizeof(t->why), "%s",
                 e != 0 ? evutil_socket_error_to_string(e) : "connection closed without an answer");
        break;
    case EVREQ_HTTP_INVALID_HEADER:
        snprintf(t->why, sizeof(t->why), "malformed HTTP answer");
        break;
    case EVREQ_HTTP_DATA_TOO_LONG:
        snprintf(t->why, sizeof(t->why), "answer larger than %u MiB, not read further",
                 LG_ENGINE_METRICS_MAX_BYTES >> 20);
        t->why_too_large = true;
        break;
    default:
        snprintf(t->why, sizeof(t->why), "%s",
                 e != 0 ? evutil_socket_error_to_string(e) : "connection failed");
        break;
    }
}

/* "status 503", or why there was no answer; then what to look at (a config key). */
static const char *
health_outcome(struct health_target *t, int code, const char *path_key, char *buf, size_t len)
{
    if (code != 0) {
        snprintf(buf, len, "status %d; check the engine there, or the backend's %s", code,
                 path_key);
    } else if (t->why_too_large) {
        snprintf(buf, len, "%s; check the engine there, or the backend's %s", t->why, path_key);
    } else if (t->why_tls) {
        snprintf(buf, len, "%s; check the backend's tls settings (ca_file, server_name, cert)",
                 t->why);
    } else {
        snprintf(buf, len, "%s; check that an engine listens at the backend's url",
                 t->why[0] ? t->why : "no answer");
    }
    t->why[0] = '\0';
    t->why_tls = false;
    t->why_too_large = false;
    return buf;
}

static void
health_check_result(struct health_target *t, bool ok, int code)
{
    const struct lg_health_conf *hc = &t->h->f.conf->health;
    struct lg_backend *b = t->b;
    int state = __atomic_load_n(&b->health, __ATOMIC_RELAXED);

    if (ok) {
        t->fail_run = 0;
        t->ok_run++;
        if (state == LG_BACKEND_DOWN && t->ok_run >= hc->rise) {
            __atomic_store_n(&b->up_since_ns, lg_now_ns(), __ATOMIC_RELAXED);
            __atomic_store_n(&b->health, LG_BACKEND_UP, __ATOMIC_RELAXED);
            LG_INFO("backend %s is up (%u checks passed)", b->name, t->ok_run);
        }
        return;
    }
    t->ok_run = 0;
    t->fail_run++;
    if (state == LG_BACKEND_UP && t->fail_run >= hc->fall) {
        char why[256];

        __atomic_store_n(&b->health, LG_BACKEND_DOWN, __ATOMIC_RELAXED);
        LG_WARN("backend %s is down (%u checks failed, last: %s)", b->name, t->fail_run,
                health_outcome(t, code, "health_path", why, sizeof(why)));
    }
    t->why[0] = '\0';
    t->why_tls = false;
    t->why_too_large = false;
}

static void
health_on_check_done(struct evhttp_request *req, void *arg)
{
    struct health_target *t = arg;
    int code = req ? evhttp_request_get_response_code(req) : 0;

    t->checking = false;
    health_check_result(t, code >= 200 && code < 300, code);
}

/* Host, User-Agent and (with a token) a bearer Authorization. */
static void
health_headers(struct evhttp_request *req, const char *host, const char *agent, const char *token)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    evhttp_add_header(h, "Host", host);
    evhttp_add_header(h, "User-Agent", agent);
    if (token != NULL) {
        char auth[512];

        snprintf(auth, sizeof(auth), "Bearer %s", token);
        evhttp_add_header(h, "Authorization", auth);
    }
}

static int
health_get(struct health_target *t, const char *path, void (*cb)(struct evhttp_request *, void *))
{
    struct evhttp_request *req = evhttp_request_new(cb, t);
    char target[1024];

    if (req == NULL) {
        return LG_ENOMEM;
    }
    evhttp_request_set_error_cb(req, health_on_error);
    snprintf(target, sizeof(target), "%s%s", t->b->conf.path_prefix, path);
    health_headers(req, t->b->conf.host_header, "llmgate-health", t->b->conf.api_key);
    if (evhttp_make_request(t->conn, req, EVHTTP_REQ_GET, target) != 0) {
        return LG_EIO; /* evhttp freed req */
    }
    return LG_OK;
}

static void
health_on_check_timer(evutil_socket_t fd, short what, void *arg)
{
    struct health_target *t = arg;

    const struct lg_health_conf *hc = &t->h->f.conf->health;
    struct timeval tv = health_tv(hc->interval_ms);

    (void)fd;
    (void)what;
    event_add(t->check_ev, &tv);
    if (t->checking) {
        return; /* the previous one is still out: its timeout will count */
    }
    t->checking = true;
    if (health_get(t, t->b->conf.health_path, health_on_check_done) != LG_OK) {
        t->checking = false;
        health_check_result(t, false, 0);
    }
}

/* ---- scrapes ------------------------------------------------------------ */

bool
lg_health_ours_queued(double late_ms, double step_ms, double work_ms, double longest_ms,
                      uint64_t interval_ns)
{
    double interval_ms = (double)interval_ns / 1e6;

    /* a long prefill of ours in progress holds arrivals in the queue
     * whatever the free slots (a long prompt still awaiting its first token
     * may be in it, even past its predicted time: the slope of a new fleet
     * is learnt from such prompts) */
    if (work_ms > 2.0 * interval_ms || longest_ms >= interval_ms) {
        return false;
    }
    /* waiting for the next step takes at most a step, and the prompts
     * admitted with it at most the longest one pending */
    return late_ms > LG_MAX(2.0 * step_ms, longest_ms);
}

void
lg_health_fold_sample(struct lg_backend_engine *e, const struct lg_engine_sample *s,
                      uint64_t now_ns, uint32_t inflight, uint64_t interval_ns, bool ours_queued)
{
    /*
     * A request waits a moment for the engine's next step even when a slot
     * is free, so one scrape with a queue proves nothing; a queue on two
     * scrapes in a row, with a request of ours held there longer than a
     * step boundary explains (ours_queued), means the engine is full at the
     * count running. Two scrapes alone are no proof on a slow replica: its
     * steps are long, and a request that arrived during the last one is in
     * the queue at every scrape that lands in a clump of arrivals
     * (bench/routing/NOTES.md 28). Unless
     * it ran more than that at once before with its KV cache not full: then
     * a long step (a long prompt's prefill, ours or another client's) holds
     * arrivals until it ends, or a request that just finished has not been
     * replaced yet, and the queue says nothing about slots. One fewer than
     * the most seen is no exception: a busy engine shows it at every step
     * boundary, and a capacity one short makes a full replica look fuller
     * than it is (bench/routing/NOTES.md 17).
     */
    bool at_max = s->running >= e->run_max || s->kv_usage >= LG_ENGINE_KV_FULL;
    bool queued = s->running > 0 && s->waiting > 0 && e->running > 0 && e->waiting > 0
                  && e->t_ns != 0 && now_ns - e->t_ns <= 2 * interval_ns && ours_queued && at_max;

    if (e->run_max_t_ns != 0 && now_ns - e->run_max_t_ns > LG_ENGINE_RUN_MAX_TTL_S * LG_NS_PER_S) {
        e->run_max = s->running; /* engines restart with other settings */
    }
    if (s->running + 1 >= e->run_max) {
        e->run_max = LG_MAX(e->run_max, s->running);
        e->run_max_t_ns = now_ns;
    }
    if (queued) {
        double full = s->running; /* the previous scrape's count may be a step boundary */

        e->capacity = e->capacity_confirmed > 0 ? 0.5 * e->capacity + 0.5 * full : full;
        e->capacity_confirmed = 1;
        e->confirmed_t_ns = now_ns;
    }
    if (s->running > e->capacity) {
        e->capacity = s->running; /* at least this many run at once */
    }
    e->waiting = s->waiting;
    e->running = s->running;
    e->kv_usage = s->kv_usage;
    e->t_ns = now_ns;
    e->inflight_at_scrape = inflight;
    if (s->flavor != LG_ENGINE_AUTO) {
        e->flavor = (int32_t)s->flavor;
    }
}

/* llama.cpp's slot count, from GET /props (enginemetrics.h): asked once its
 * metrics say llama.cpp, then every HEALTH_PROPS_S (a restart with another
 * --parallel); a server without /props (an older one) is asked as rarely. */
#define HEALTH_PROPS_S 30

/*
 * A slot count the engine states that its own gauges contradict (more
 * requests running at once than it has slots) is not its word: it is not
 * taken, and its capacity is learnt from its load as for an engine that
 * states none. Taken, a count that is too low made every request there look
 * queued behind the others.
 */
static bool
health_slots_believable(struct health_target *t, double slots)
{
    if (slots >= t->eng.run_max) {
        return true;
    }
    if (lg_log_ratelimit(&t->slots_warn_ns, 60 * LG_NS_PER_S)) {
        LG_WARN("backend %s: %s says total_slots %.0f but %d requests run there at once; "
                "its slot count is learnt from its load instead",
                t->b->name, LG_ENGINE_PROPS_PATH, slots, t->eng.run_max);
    }
    return false;
}

static void
health_on_props_done(struct evhttp_request *req, void *arg)
{
    struct health_target *t = arg;
    struct evbuffer *body;
    size_t len;
    double slots;

    t->asking_props = false;
    if (req == NULL || evhttp_request_get_response_code(req) != 200) {
        return;
    }
    body = evhttp_request_get_input_buffer(req);
    len = evbuffer_get_length(body);
    if (lg_engine_props_parse(len ? (const char *)evbuffer_pullup(body, -1) : "", len, &slots)
        != LG_OK) {
        return;
    }
    if (!health_slots_believable(t, slots)) {
        slots = 0;
    }
    if (slots > 0 && slots != t->eng.slots_declared) {
        LG_INFO("backend %s: the engine runs %.0f requests at once (%s)", t->b->name, slots,
                LG_ENGINE_PROPS_PATH);
    }
    t->eng.slots_declared = slots;
    lg_backend_publish_engine(t->b, &t->eng);
}

static void
health_ask_props(struct health_target *t, uint64_t now)
{
    if (t->flavor != LG_ENGINE_LLAMACPP || t->asking_props
        || (t->props_t_ns != 0 && now - t->props_t_ns < HEALTH_PROPS_S * LG_NS_PER_S)) {
        return;
    }
    t->props_t_ns = now;
    t->asking_props = true;
    if (health_get(t, LG_ENGINE_PROPS_PATH, health_on_props_done) != LG_OK) {
        t->asking_props = false;
    }
}

/*
 * Whether anyone else is served there. Some engines hold a request in their
 * gauges much longer than two steps after its end: SGLang sets them at a
 * prefill or once every 40 decode steps (its decode_log_interval), 0.4-2 s.
 * Where the engine also counts the requests it has finished
 * (enginemetrics.h: vLLM, SGLang, TGI), that count set against ours says
 * whether it serves others at all: each scrape adds its finishes less ours
 * since the last, and a rise over the least of the last 5-10 s by more than
 * our requests in flight (one the engine has finished and the gateway not
 * yet is among them: a slow gateway's lag) plus HEALTH_OTHERS_MIN is
 * others'. While none has been seen for HEALTH_ALONE_S, the gauges' excess
 * over ours is their lag:
 * measured as the age, when the scrape was sent, of the latest end of ours
 * that explains it (a decaying maximum, up to HEALTH_LAG_MAX_MS), and our
 * ends within it count as ours (health_gone_counted()). Another client that
 * has just come still shows beyond what our latest ends explain, and is
 * seen for good once a few of its requests finish.
 */
#define HEALTH_OTHERS_MIN      3
#define HEALTH_ALONE_S         5
#define HEALTH_LAG_MAX_MS      3000
#define HEALTH_LAG_HALF_LIFE_S 60
#define HEALTH_LAG_SPARE       1.25

/*
 * Requests of ours the engine may still count though they have ended: those
 * that ended while the scrape was out (the engine counted at some moment
 * before it answered) or up to two of its steps before it was sent (an
 * engine may drop a request from its gauges a step after its last byte:
 * vLLM sets them once a step). Taken for another client's load, each such
 * count turned the engine model off there with one gateway in front: 132 of
 * 225 picks in integration.routing's case, a gauge 12 ms behind 10 ms steps
 * (bench/routing/NOTES.md 54). A longer lag counts only where the engine is
 * known to serve no one else (below).
 */
static unsigned
health_gone_counted(const struct health_target *t, double step_ms, bool alone)
{
    double ms = LG_MAX(2 * step_ms, alone ? HEALTH_LAG_SPARE * t->eng.gauge_lag_ms : 0);
    uint64_t lag = (uint64_t)(ms * (double)LG_NS_PER_MS);

    return lg_backend_gone_since(t->b, t->scrape_sent_ns > lag ? t->scrape_sent_ns - lag : 1);
}

/* The engine's finished count (-1: none) set against ours (above). */
static void
health_fold_finished(struct health_target *t, double finished, uint32_t inflight, uint64_t now)
{
    uint32_t ended = lg_backend_ended(t->b);

    if (finished < 0) {
        t->fin_t_ns = 0;
        t->eng.others = -1;
        return;
    }
    if (t->fin_t_ns == 0 || finished < t->fin_prev) {
        /* the first read, or the engine restarted */
        t->fin_excess = t->fin_min_cur = t->fin_min_prev = 0;
        t->fin_since_ns = t->fin_bucket_ns = now;
        t->others_ns = 0;
    } else {
        t->fin_excess += finished - t->fin_prev - (double)(uint32_t)(ended - t->ended_prev);
        if (now - t->fin_bucket_ns >= HEALTH_ALONE_S * LG_NS_PER_S) {
            t->fin_min_prev = t->fin_min_cur;
            t->fin_min_cur = t->fin_excess;
            t->fin_bucket_ns = now;
        }
        t->fin_min_cur = LG_MIN(t->fin_min_cur, t->fin_excess);
        if (t->fin_excess - LG_MIN(t->fin_min_cur, t->fin_min_prev)
            >= HEALTH_OTHERS_MIN + (double)inflight) {
            t->others_ns = now;
        }
    }
    t->fin_prev = finished;
    t->ended_prev = ended;
    t->fin_t_ns = now;
    if (now - LG_MAX(t->fin_since_ns, t->others_ns) >= HEALTH_ALONE_S * LG_NS_PER_S) {
        if (t->eng.others != 0 && t->eng.capacity_confirmed == 0) {
            /* the most seen running so far may count ended requests its
             * gauges held longer than two steps: read it again from here
             * (a count a queue confirmed is blended at every queue) */
            t->eng.capacity = 0;
            t->eng.run_max = 0;
        }
        t->eng.others = 0;
    } else {
        t->eng.others = t->others_ns != 0 ? 1 : -1; /* seen lately; or not long enough read */
    }
}

/* The gauges' lag behind our ends, learnt while alone there (above) from
 * their excess over what is ours in flight. */
static void
health_learn_lag(struct health_target *t, double excess, uint64_t now)
{
    uint64_t end;

    if (t->lag_t_ns != 0) {
        t->eng.gauge_lag_ms *= lg_est_decay(now - t->lag_t_ns, HEALTH_LAG_HALF_LIFE_S);
    }
    t->lag_t_ns = now;
    if (t->eng.others != 0 || excess < 1) {
        return;
    }
    end = lg_backend_gone_nth(t->b, (unsigned)LG_MIN(excess, LG_BACKEND_GONE_SLOTS + 1.0));
    if (end != 0) {
        double ms = end < t->scrape_sent_ns ? (double)(t->scrape_sent_ns - end) / 1e6 : 0;

        if (ms <= HEALTH_LAG_MAX_MS) {
            t->eng.gauge_lag_ms = LG_MAX(t->eng.gauge_lag_ms, ms);
        }
    }
}

static void
health_on_scrape_done(struct evhttp_request *req, void *arg)
{
    struct health_target *t = arg;
    struct lg_backend *b = t->b;
    struct lg_engine_sample s;
    struct evbuffer *body;
    const char *text;
    size_t len;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    uint64_t now, interval;
    double work_ms, longest_ms, late_ms, step_ms, excess, lagged;
    uint32_t mine, ours;
    bool queued, detected;
    struct lg_backend_est est;
    int rc;

    t->scraping = false;
    if (code != 200) {
        char why[256];

        /* an answer, but not metrics: nothing to scrape there (no answer at
         * all is the health checks' business, and retried at full rate); an
         * answer too large to read is one, read up to the limit each time:
         * asked less and less often too */
        t->scrape_failures += code != 0 || t->why_too_large;
        health_outcome(t, code, "metrics_path (or \"flavor\": \"none\" not to scrape it)", why,
                       sizeof(why));
        if (lg_log_ratelimit(&t->warn_ns, 30 * LG_NS_PER_S)) {
            LG_WARN("backend %s: scraping %s failed (%s); its engine load is not counted", b->name,
                    b->conf.metrics_path, why);
        }
        return;
    }
    body = evhttp_request_get_input_buffer(req);
    len = evbuffer_get_length(body);
    text = len ? (const char *)evbuffer_pullup(body, -1) : "";
    rc = lg_engine_metrics_parse(text, len, t->flavor, &s);
    t->scrape_failures = rc == LG_OK ? 0 : t->scrape_failures + 1;
    if (rc != LG_OK && lg_log_ratelimit(&t->warn_ns, 30 * LG_NS_PER_S)) {
        /* the vocabulary it was read in: detected by this very scrape, maybe */
        LG_WARN("backend %s: %s has no %s queue metrics; its engine load is not counted", b->name,
                b->conf.metrics_path,
                s.flavor != LG_ENGINE_AUTO ? lg_engine_flavor_name(s.flavor) : "known engine's");
    }
    detected = t->flavor == LG_ENGINE_AUTO && s.flavor != LG_ENGINE_AUTO;
    if (detected) {
        t->flavor = s.flavor;
    }
    now = lg_now_ns();
    interval = t->h->f.conf->health.scrape_interval_ms * LG_NS_PER_MS;
    /* 0, 0, 0 with none pending */
    work_ms = lg_backend_work_ahead_ms(b, now, &longest_ms, &late_ms);
    lg_backend_read_est(b, &est);
    step_ms = lg_est_mean_read(&est.itl, now, LG_EST_DEFAULT_ITL_MS, LG_EST_MEAN_HALF_LIFE_S);
    queued = lg_health_ours_queued(late_ms, step_ms, work_ms, longest_ms, interval);
    /* what the engine holds of ours and our peers' is no foreign load */
    mine = lg_backend_inflight(b);
    ours = mine + lg_backend_peer_inflight(b, now);
    excess = LG_MAX(s.running, 0) + LG_MAX(s.waiting, 0) - (double)ours;
    health_fold_finished(t, s.finished, mine, now);
    health_learn_lag(t, excess, now);
    /* ... and requests of ours that ended, still in its running count, are
     * neither running nor anyone else's: left in, a lag of SGLang's kind
     * read 20 slots on a replica of 5 (bench/routing/NOTES.md 55) */
    lagged = LG_MIN((double)health_gone_counted(t, step_ms, t->eng.others == 0), excess);
    if (lagged >= 1 && s.running > 0) {
        s.running -= (int32_t)LG_MIN(lagged, s.running);
    }
    lg_health_fold_sample(&t->eng, &s, now, ours, interval, queued);
    if (t->eng.slots_declared > 0 && !health_slots_believable(t, t->eng.slots_declared)) {
        t->eng.slots_declared = 0;
    }
    lg_backend_publish_engine(b, &t->eng);
    if (detected) {
        /* after publishing: whoever reads this line can count on the sample */
        LG_INFO("backend %s: engine metrics look like %s", b->name,
                lg_engine_flavor_name(s.flavor));
    }
    health_ask_props(t, now);
}

static void
health_on_scrape_timer(evutil_socket_t fd, short what, void *arg)
{
    struct health_target *t = arg;

    uint64_t ms = t->h->f.conf->health.scrape_interval_ms;
    struct timeval tv;

    (void)fd;
    (void)what;
    /* a backend without engine metrics is asked less and less often (up to
     * every 30 s), so a plain HTTP server is not hammered four times a second */
    for (uint32_t i = 0; i < t->scrape_failures && i < 8 && ms < 30000; i++) {
        ms *= 2;
    }
    tv = health_tv(LG_MAX(LG_MIN(ms, 30000), t->h->f.conf->health.scrape_interval_ms));
    event_add(t->scrape_ev, &tv);
    if (t->scraping) {
        return;
    }
    t->scraping = true;
    t->scrape_sent_ns = lg_now_ns();
    if (health_get(t, t->b->conf.metrics_path, health_on_scrape_done) != LG_OK) {
        t->scraping = false;
    }
}

/* ---- peers --------------------------------------------------------------- */

/* A held request comes back within LG_PEERS_WAIT_MS (news or not); one that
 * has not after this long failed. */
#define HEALTH_PEER_TIMEOUT_MS (LG_PEERS_WAIT_MS + 1000)
/* A peer that failed is asked again after this long. */
#define HEALTH_PEER_RETRY_MS 1000

static uint64_t
health_peer_ttl_ns(void)
{
    /* an answer holds until the next one, which comes within the timeout
     * (a failure withdraws it at once, health_on_peer_done) */
    return (uint64_t)HEALTH_PEER_TIMEOUT_MS * LG_NS_PER_MS;
}

/* Merges every peer's last answer into each backend. */
static void
health_peers_publish(struct lg_health *h, uint64_t now)
{
    const struct lg_peer_state *states[64];
    uint64_t recv[64];
    struct lg_backend_peers bp; /* 2 KiB: this thread's stack holds it */
    size_t n = 0;

    for (size_t i = 0; i < h->npeers && n < LG_ARRAY_SIZE(states); i++) {
        if (!h->peers[i].self && h->peers[i].recv_ns != 0) {
            states[n] = &h->peers[i].st;
            recv[n++] = h->peers[i].recv_ns;
        }
    }
    for (size_t i = 0; i < h->f.nbackends; i++) {
        lg_peers_merge(states, recv, n, h->keys[i], now, health_peer_ttl_ns(), &bp);
        lg_backend_publish_peers(h->f.backends[i], &bp);
    }
}

static void
health_peer_next(struct health_peer *p, uint64_t ms)
{
    struct timeval tv = health_tv(ms);

    event_add(p->ev, &tv);
}

static void
health_on_peer_done(struct evhttp_request *req, void *arg)
{
    struct health_peer *p = arg;
    struct lg_peer_state st;
    struct evbuffer *body;
    char err[256];
    size_t len;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    int rc = LG_EIO;

    p->fetching = false;
    if (code == 200) {
        body = evhttp_request_get_input_buffer(req);
        len = evbuffer_get_length(body);
        rc = lg_peers_parse(len ? (const char *)evbuffer_pullup(body, -1) : "", len, &st, err,
                            sizeof(err));
        if (rc != LG_OK && lg_log_ratelimit(&p->warn_ns, 30 * LG_NS_PER_S)) {
            LG_WARN("peer %s: bad /admin/peers answer: %s", p->admin, err);
        }
    } else if (lg_log_ratelimit(&p->warn_ns, 30 * LG_NS_PER_S)) {
        LG_WARN("peer %s: /admin/peers failed (%s %d); its requests count as unknown load",
                p->admin, code ? "status" : "no response", code);
    }
    if (rc != LG_OK) {
        if (p->recv_ns != 0) {
            /* what it said no longer holds: its requests are unknown load */
            p->recv_ns = 0;
            health_peers_publish(p->h, lg_now_ns());
        }
        health_peer_next(p, HEALTH_PEER_RETRY_MS);
        return;
    }
    if (strcmp(st.id, lg_peers_self_id()) == 0) {
        p->self = true; /* one peers list for every gateway: this is us */
        LG_INFO("peer %s is this gateway: not fetched", p->admin);
        lg_peers_clear(&st);
        return;
    }
    lg_peers_clear(&p->st);
    p->st = st;
    p->recv_ns = lg_now_ns();
    health_peers_publish(p->h, p->recv_ns);
    health_peer_next(p, p->h->f.conf->health.peer_interval_ms);
}

/* Asks the peer for news since its last answer (held there until some). */
static void
health_on_peer_timer(evutil_socket_t fd, short what, void *arg)
{
    struct health_peer *p = arg;
    struct evhttp_request *req;
    char target[96];

    (void)fd;
    (void)what;
    if (p->fetching) {
        return;
    }
    req = evhttp_request_new(health_on_peer_done, p);
    if (req == NULL) {
        health_peer_next(p, HEALTH_PEER_RETRY_MS);
        return;
    }
    health_headers(req, p->admin, "llmgate-peer", p->h->f.conf->admin.token);
    if (p->recv_ns != 0) {
        snprintf(target, sizeof(target), "/admin/peers?since=%llu&wait=%u",
                 (unsigned long long)p->st.changes, (unsigned)LG_PEERS_WAIT_MS);
    } else {
        snprintf(target, sizeof(target), "/admin/peers");
    }
    p->fetching = evhttp_make_request(p->conn, req, EVHTTP_REQ_GET, target) == 0;
    if (!p->fetching) {
        health_peer_next(p, HEALTH_PEER_RETRY_MS); /* evhttp freed req */
    }
}

/* Connections to the configured peers, each asked at once; false if none. */
static bool
health_peers_init(struct lg_health *h)
{
    const struct lg_config *c = h->f.conf;

    if (c->npeers == 0) {
        return false;
    }
    h->peers = lg_xcalloc(c->npeers, sizeof(*h->peers));
    h->npeers = c->npeers;
    h->keys = lg_xcalloc(h->f.nbackends ? h->f.nbackends : 1, sizeof(*h->keys));
    for (size_t i = 0; i < h->f.nbackends; i++) {
        lg_peers_key(&h->f.backends[i]->conf, h->keys[i], sizeof(h->keys[i]));
    }
    for (size_t i = 0; i < c->npeers; i++) {
        struct health_peer *p = &h->peers[i];
        char host[NI_MAXHOST], port[NI_MAXSERV];
        struct timeval to = health_tv(HEALTH_PEER_TIMEOUT_MS);

        p->h = h;
        p->admin = c->peers[i].admin;
        if (getnameinfo((const struct sockaddr *)&c->peers[i].addr, c->peers[i].addrlen, host,
                        sizeof(host), port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV)
            != 0) {
            LG_WARN("peer %s: cannot read its address; not fetched", p->admin);
            continue;
        }
        p->conn = evhttp_connection_base_new(h->base, NULL, host, (uint16_t)atoi(port));
        p->ev = event_new(h->base, -1, 0, health_on_peer_timer, p);
        if (p->conn == NULL || p->ev == NULL) {
            LG_WARN("peer %s: cannot set up a connection; not fetched", p->admin);
            continue;
        }
        evhttp_connection_set_timeout_tv(p->conn, &to);
        evhttp_connection_set_retries(p->conn, 0);
        evhttp_connection_set_max_body_size(p->conn, LG_PEERS_MAX_BYTES);
        event_active(p->ev, EV_TIMEOUT, 0);
    }
    return true;
}

/* ---- priors ------------------------------------------------------------- */

static double
health_median(double *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        double x = v[i];
        size_t j = i;

        while (j > 0 && v[j - 1] > x) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The prior of each model: medians of its backends' own estimates. A
 * backend's prefill counts once its own samples outweigh the prior, as ms
 * per KiB per ms of its decode step (the speed-free part: a slow replica's
 * prior is this times its own step). */
static void
health_update_priors(const struct lg_health_fleet *f, uint64_t now)
{
    for (size_t m = 0; m < f->nmodels; m++) {
        struct lg_model_route *r = &f->models[m];
        struct lg_est_prior p;
        double fixed[64], slope[64], itl[64], hold[64], slots[64], prefill[64];
        size_t nf = 0, ni = 0, nh = 0, ns = 0, np = 0;

        lg_route_read_prior(r, &p);
        for (size_t i = 0; i < r->n && i < 64; i++) {
            struct lg_backend_est est;
            struct lg_backend_engine eng;
            struct lg_est_value v;
            double itl_ms;

            lg_backend_read_engine(r->backends[i], &eng);
            if (lg_backend_engine_slots(&eng, &slots[ns])) {
                ns++;
            }
            lg_backend_read_est(r->backends[i], &est);
            lg_est_ttft_read(&est.ttft, now, &p, &v);
            if (v.samples >= 1) {
                fixed[nf] = v.fixed_ms / v.peak;
                slope[nf++] = v.ms_per_kib / v.peak;
            }
            itl_ms = lg_est_mean_read(&est.itl, now, p.itl_ms, LG_EST_MEAN_HALF_LIFE_S);
            if (lg_est_mean_weight(&est.itl, now, LG_EST_MEAN_HALF_LIFE_S) >= 1) {
                itl[ni++] = itl_ms;
            }
            if (lg_est_mean_weight(&est.hold, now, LG_EST_MEAN_HALF_LIFE_S) >= 1) {
                hold[nh++] = lg_est_mean_read(&est.hold, now, p.hold_ms, LG_EST_MEAN_HALF_LIFE_S);
            }
            if (lg_est_line_weight(&est.prefill, now, LG_EST_MEAN_HALF_LIFE_S)
                >= LG_EST_MEAN_PRIOR_WEIGHT) {
                double step = lg_backend_step_ms(r->backends[i], now, itl_ms);
                double per_kib = lg_est_line_slope(&est.prefill);

                if (step > 0 && per_kib > 0) {
                    prefill[np++] = per_kib / step;
                }
            }
        }
        if (nf > 0) {
            p.fixed_ms = health_median(fixed, nf);
            p.ms_per_kib = health_median(slope, nf);
        }
        if (ni > 0) {
            p.itl_ms = health_median(itl, ni);
        }
        if (nh > 0) {
            p.hold_ms = health_median(hold, nh);
        }
        if (ns > 0) {
            p.slots = health_median(slots, ns);
        }
        if (np > 0) {
            p.prefill_per_step = health_median(prefill, np);
        }
        lg_route_publish_prior(r, &p);
    }
}

static void
health_on_prior_timer(evutil_socket_t fd, short what, void *arg)
{
    struct lg_health *h = arg;

    (void)fd;
    (void)what;
    health_update_priors(&h->f, lg_now_ns());
}

/* ---- thread ------------------------------------------------------------- */

static void
health_on_stop(evutil_socket_t fd, short what, void *arg)
{
    struct lg_health *h = arg;

    (void)fd;
    (void)what;
    event_base_loopbreak(h->base);
}

static void *
health_main(void *arg)
{
    struct lg_health *h = arg;

    event_base_dispatch(h->base);
    return NULL;
}

static void
health_free(struct lg_health *h)
{
    for (size_t i = 0; i < h->n; i++) {
        struct health_target *t = &h->targets[i];

        if (t->check_ev != NULL) {
            event_free(t->check_ev);
        }
        if (t->scrape_ev != NULL) {
            event_free(t->scrape_ev);
        }
        if (t->conn != NULL) {
            evhttp_connection_free(t->conn); /* cancels requests in flight */
        }
    }
    free(h->targets);
    for (size_t i = 0; i < h->npeers; i++) {
        if (h->peers[i].ev != NULL) {
            event_free(h->peers[i].ev);
        }
        if (h->peers[i].conn != NULL) {
            evhttp_connection_free(h->peers[i].conn); /* cancels a request out */
        }
        lg_peers_clear(&h->peers[i].st);
    }
    free(h->peers);
    free(h->keys);
    if (h->prior_ev != NULL) {
        event_free(h->prior_ev);
    }
    if (h->stop_ev != NULL) {
        event_free(h->stop_ev);
    }
    if (h->base != NULL) {
        event_base_free(h->base);
    }
    free(h);
}

/* Sets up checks and scrapes for one backend; false if it gets neither. */
static bool
health_target_init(struct lg_health *h, struct health_target *t, struct lg_backend *b)
{
    const struct lg_health_conf *hc = &h->f.conf->health;
    bool check = hc->interval_ms > 0 && b->conf.health_path && b->conf.health_path[0];
    bool scrape = hc->scrape_interval_ms > 0 && b->conf.flavor != LG_ENGINE_NONE
                  && b->conf.metrics_path && b->conf.metrics_path[0];
    struct timeval tv;

    t->h = h;
    t->b = b;
    t->flavor = b->conf.flavor;
    lg_backend_read_engine(b, &t->eng);
    if (!check && !scrape) {
        return false;
    }
    if (b->conf.tls) {
        /* the requests' verification: CA, name (SNI), client certificate (tls.c); evhttp
         * reconnects through the same bufferevent, its SSL cleared for a new handshake.
         * No deferred callbacks (evhttp's own bufferevents have none): one still queued
         * when the thread stops would keep the bufferevent, and its SSL, alive for good */
        struct bufferevent *bev =
            lg_tls_connect_bev(h->base, &b->conf, &b->tls_ctx, BEV_OPT_CLOSE_ON_FREE);

        t->conn = bev != NULL ? evhttp_connection_base_bufferevent_new(h->base, NULL, bev,
                                                                       b->conf.host, b->conf.port)
                              : NULL;
    } else {
        t->conn = evhttp_connection_base_new(h->base, NULL, b->conf.host, b->conf.port);
    }
    if (t->conn == NULL) {
        LG_WARN("backend %s: cannot set up health checks and engine scrapes; it is judged by its "
                "requests alone",
                b->name);
        return false;
    }
    tv = health_tv(hc->timeout_ms ? hc->timeout_ms : 1000);
    evhttp_connection_set_timeout_tv(t->conn, &tv);
    evhttp_connection_set_retries(t->conn, 0);
    evhttp_connection_set_max_headers_size(t->conn, 64 * 1024);
    evhttp_connection_set_max_body_size(t->conn, LG_ENGINE_METRICS_MAX_BYTES);
    if (check) {
        /* spread the first checks so a big fleet is not probed in one burst */
        t->check_ev = event_new(h->base, -1, 0, health_on_check_timer, t);
        tv = health_tv(lg_mix64(b->id) % (hc->interval_ms + 1));
        event_add(t->check_ev, &tv);
    }
    if (scrape) {
        t->scrape_ev = event_new(h->base, -1, 0, health_on_scrape_timer, t);
        event_active(t->scrape_ev, EV_TIMEOUT, 0); /* the first sample now; it re-arms */
    }
    return true;
}

int
lg_health_start(const struct lg_health_fleet *f, struct lg_health **out)
{
    struct lg_health *h;
    struct timeval tv;
    size_t active = 0;

    *out = NULL;
    if (f->nbackends == 0) {
        return LG_OK;
    }
    h = lg_xcalloc(1, sizeof(*h));
    h->f = *f;
    h->base = event_base_new();
    if (h->base == NULL) {
        LG_ERROR("health checks: cannot create an event base");
        free(h);
        return LG_ERR;
    }
    h->targets = lg_xcalloc(f->nbackends, sizeof(*h->targets));
    h->n = f->nbackends;
    for (size_t i = 0; i < f->nbackends; i++) {
        active += health_target_init(h, &h->targets[i], f->backends[i]);
    }
    active += health_peers_init(h);
    h->prior_ev = event_new(h->base, -1, EV_PERSIST, health_on_prior_timer, h);
    tv = health_tv(500);
    event_add(h->prior_ev, &tv);
    h->stop_ev = event_new(h->base, -1, 0, health_on_stop, h);
    event_add(h->stop_ev, NULL);
    if (pthread_create(&h->thread, NULL, health_main, h) != 0) {
        LG_ERROR("health checks: cannot start the thread");
        health_free(h);
        return LG_ERR;
    }
    pthread_setname_np(h->thread, "lg-health");
    LG_DEBUG("health: %zu of %zu backends checked or scraped", active, f->nbackends);
    *out = h;
    return LG_OK;
}

void
lg_health_stop(struct lg_health *h)
{
    if (h == NULL) {
        return;
    }
    event_active(h->stop_ev, EV_READ, 0);
    pthread_join(h->thread, NULL);
    health_free(h);
}
