/*
 * health_scrape.c: engine /metrics scrapes of one backend (health_scrape.h):
 * a GET of its metrics_path every health.scrape_interval (backing off where
 * there are no metrics), parsed in the backend's vocabulary
 * (enginemetrics.h), read against this gateway's requests there (what is
 * ours and our peers' is no foreign load; gaugelag.c says how long the
 * gauges hold ours after their end, and whether anyone else is served),
 * folded into the engine state (capacity from lasting queues) and
 * published for the router; llama.cpp's slots from GET /props.
 *
 * Owns: the target's scrape timer. Runs on the fleet's health thread;
 * writes the backend's engine sample, which workers only read.
 */
#include "fleet/health_scrape.h"

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "base/config.h"
#include "fleet/backend_inflight.h"
#include "fleet/health_http.h"

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
health_slots_believable(struct lg_health_target *t, double slots)
{
    if (slots >= t->eng.run_max) {
        return true;
    }
    if (lg_log_ratelimit(&t->scrape.slots_warn_ns, 60 * LG_NS_PER_S)) {
        LG_WARN("backend %s: %s says total_slots %.0f but %d requests run there at once; "
                "its slot count is learnt from its load instead",
                t->b->name, LG_ENGINE_PROPS_PATH, slots, t->eng.run_max);
    }
    return false;
}

static void
health_on_props_done(struct evhttp_request *req, void *arg)
{
    struct lg_health_target *t = arg;
    struct evbuffer *body;
    size_t len;
    double slots;

    t->scrape.asking_props = false;
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
health_ask_props(struct lg_health_target *t, uint64_t now)
{
    if (t->scrape.flavor != LG_ENGINE_LLAMACPP || t->scrape.asking_props
        || (t->scrape.props_t_ns != 0
            && now - t->scrape.props_t_ns < HEALTH_PROPS_S * LG_NS_PER_S)) {
        return;
    }
    t->scrape.props_t_ns = now;
    t->scrape.asking_props = true;
    if (lg_health_get(t, LG_ENGINE_PROPS_PATH, health_on_props_done) != LG_OK) {
        t->scrape.asking_props = false;
    }
}

static void
health_on_scrape_done(struct evhttp_request *req, void *arg)
{
    struct lg_health_target *t = arg;
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

    t->scrape.out = false;
    if (code != 0) {
        lg_backend_note_listening(b, lg_now_ns()); /* a refused engine is back */
    }
    if (code != 200) {
        char why[256];

        /* an answer, but not metrics: nothing to scrape there (no answer at
         * all is the health checks' business, and retried at full rate); an
         * answer too large to read is one, read up to the limit each time:
         * asked less and less often too */
        t->scrape.failures += code != 0 || t->why_too_large;
        lg_health_outcome(t, code, "metrics_path (or \"flavor\": \"none\" not to scrape it)", why,
                          sizeof(why));
        if (lg_log_ratelimit(&t->scrape.warn_ns, 30 * LG_NS_PER_S)) {
            LG_WARN("backend %s: scraping %s failed (%s); its engine load is not counted", b->name,
                    t->conf->metrics_path, why);
        }
        return;
    }
    body = evhttp_request_get_input_buffer(req);
    len = evbuffer_get_length(body);
    text = len ? (const char *)evbuffer_pullup(body, -1) : "";
    rc = lg_engine_metrics_parse(text, len, t->scrape.flavor, &s);
    t->scrape.failures = rc == LG_OK ? 0 : t->scrape.failures + 1;
    if (rc != LG_OK && lg_log_ratelimit(&t->scrape.warn_ns, 30 * LG_NS_PER_S)) {
        /* the vocabulary it was read in: detected by this very scrape, maybe */
        LG_WARN("backend %s: %s has no %s queue metrics; its engine load is not counted", b->name,
                t->conf->metrics_path,
                s.flavor != LG_ENGINE_AUTO ? lg_engine_flavor_name(s.flavor) : "known engine's");
    }
    detected = t->scrape.flavor == LG_ENGINE_AUTO && s.flavor != LG_ENGINE_AUTO;
    if (detected) {
        t->scrape.flavor = s.flavor;
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
    lg_gaugelag_fold_finished(&t->lag, &t->eng, b, s.finished, mine, now);
    lg_gaugelag_learn(&t->lag, &t->eng, b, excess, t->scrape.sent_ns, now);
    /* ... and requests of ours that ended, still in its running count, are
     * neither running nor anyone else's: left in, a lag of SGLang's kind
     * read 20 slots on a replica of 5 (bench/routing/NOTES.md 55) */
    lagged = LG_MIN(
        (double)lg_gaugelag_counted(&t->eng, b, t->scrape.sent_ns, step_ms, t->eng.others == 0),
        excess);
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
    struct lg_health_target *t = arg;
    uint64_t ms = t->h->f.conf->health.scrape_interval_ms;
    struct timeval tv;

    (void)fd;
    (void)what;
    /* a backend without engine metrics is asked less and less often (up to
     * every 30 s), so a plain HTTP server is not hammered four times a second */
    for (uint32_t i = 0; i < t->scrape.failures && i < 8 && ms < 30000; i++) {
        ms *= 2;
    }
    tv = lg_health_tv(LG_MAX(LG_MIN(ms, 30000), t->h->f.conf->health.scrape_interval_ms));
    event_add(t->scrape.ev, &tv);
    if (t->scrape.out) {
        return;
    }
    t->scrape.out = true;
    t->scrape.sent_ns = lg_now_ns();
    if (lg_health_get(t, t->conf->metrics_path, health_on_scrape_done) != LG_OK) {
        t->scrape.out = false;
    }
}

/* A GET of load_path answered (loadreport.h): the report, with its time. */
static void
health_on_load_done(struct evhttp_request *req, void *arg)
{
    struct lg_health_target *t = arg;
    struct lg_backend_report rep = { .source = LG_LOAD_SRC_POLL };
    struct evbuffer *body;
    size_t len;

    t->scrape.load_out = false;
    if (req == NULL || evhttp_request_get_response_code(req) != 200) {
        return;
    }
    body = evhttp_request_get_input_buffer(req);
    len = evbuffer_get_length(body);
    if (lg_load_report_body_parse(len ? (const char *)evbuffer_pullup(body, -1) : "", len, &rep.r)
        != LG_OK) {
        if (lg_log_ratelimit(&t->scrape.load_warn_ns, 60 * LG_NS_PER_S)) {
            LG_WARN("backend %s: %s is no load report this gateway reads (vLLM's /load, "
                    "SGLang's /v1/loads)",
                    t->b->name, t->conf->load_path);
        }
        return;
    }
    /* the engine counted its load when it answered, half a round trip ago
     * at most: the time it was asked is never later than that */
    rep.t_ns = t->scrape.load_sent_ns;
    rep.inflight_at = lg_backend_inflight(t->b);
    lg_backend_publish_report(t->b, &rep);
}

/* Polls load_path every health.load_interval. */
static void
health_on_load_timer(evutil_socket_t fd, short what, void *arg)
{
    struct lg_health_target *t = arg;
    struct timeval tv = lg_health_tv(t->h->f.conf->health.load_interval_ms);

    (void)fd;
    (void)what;
    event_add(t->scrape.load_ev, &tv);
    if (t->scrape.load_out) {
        return;
    }
    t->scrape.load_out = true;
    t->scrape.load_sent_ns = lg_now_ns();
    if (lg_health_get(t, t->conf->load_path, health_on_load_done) != LG_OK) {
        t->scrape.load_out = false;
    }
}

void
lg_health_scrape_start(struct lg_health_target *t)
{
    t->scrape.ev = event_new(t->h->base, -1, 0, health_on_scrape_timer, t);
    event_active(t->scrape.ev, EV_TIMEOUT, 0); /* the first sample now; it re-arms */
    if (t->conf->load_path != NULL && t->conf->load_path[0]) {
        t->scrape.load_ev = event_new(t->h->base, -1, 0, health_on_load_timer, t);
        event_active(t->scrape.load_ev, EV_TIMEOUT, 0);
    }
}

void
lg_health_scrape_stop(struct lg_health_target *t)
{
    if (t->scrape.ev != NULL) {
        event_free(t->scrape.ev);
        t->scrape.ev = NULL;
    }
    if (t->scrape.load_ev != NULL) {
        event_free(t->scrape.load_ev);
        t->scrape.load_ev = NULL;
    }
}
