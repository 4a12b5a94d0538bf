/*
 * backend.c: backend objects: availability (health, ejection, the half-open
 * probe, slow start), what they learn from responses (estimators), their
 * published state (estimates, engine sample, peers' requests, the routes'
 * priors) and the plugin view of one. Requests in flight there, one by
 * one: backend_inflight.c.
 *
 * Owns: struct lg_backend (refcounted: each fleet listing it and each request
 * dispatched to it hold a reference).
 * Invariant: a backend's pools are freed only when its last reference goes,
 * which happens on a worker-free path (see upstream.c: pools are emptied by
 * their workers before the final unref at shutdown or after a reload).
 */
#include "fleet/backend.h"

#include <llmgate/plugin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "http/tls.h"

/* ---- lock-free publication (sequence counters) -------------------------- */

/*
 * A published struct is copied between two reads of its sequence counter; a
 * writer makes the counter odd while it copies. Readers never block writers
 * and retry only on a torn copy. The copy is a plain memcpy (a few vector
 * moves, where the word-by-word atomic copy of the 1.2 KiB estimates took
 * about 900 instructions a read, one per routing candidate): what a torn
 * copy read is thrown away unread, as in any sequence lock. Under
 * ThreadSanitizer the words are copied with relaxed atomics instead, so that
 * the copies are not reported as the races they are by design. The words are
 * accessed through a may_alias type so the copies are no aliasing violation.
 */
typedef uint64_t __attribute__((may_alias)) backend_word;

#if defined(__SANITIZE_THREAD__)
#define BACKEND_SEQ_ATOMIC_COPY 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BACKEND_SEQ_ATOMIC_COPY 1
#endif
#endif

static inline void
backend_seq_copy(void *dst, const void *src, size_t n)
{
#ifdef BACKEND_SEQ_ATOMIC_COPY
    backend_word *d = dst;
    const backend_word *s = src;

    for (size_t i = 0; i < n / sizeof(*d); i++) {
        __atomic_store_n(&d[i], __atomic_load_n(&s[i], __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    }
#else
    memcpy(dst, src, n);
#endif
}

static void
backend_seq_publish(uint32_t *seq, void *dst, const void *src, size_t n)
{
    uint32_t v = __atomic_load_n(seq, __ATOMIC_RELAXED);

    __atomic_store_n(seq, v + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    backend_seq_copy(dst, src, n);
    __atomic_store_n(seq, v + 2, __ATOMIC_RELEASE);
}

static void
backend_seq_read(const uint32_t *seq, void *dst, const void *src, size_t n)
{
    uint32_t v1, v2;

    do {
        v1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        backend_seq_copy(dst, src, n);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        v2 = __atomic_load_n(seq, __ATOMIC_RELAXED);
    } while ((v1 & 1) || v1 != v2);
}

_Static_assert(sizeof(struct lg_backend_est) % sizeof(uint64_t) == 0, "published by words");
_Static_assert(sizeof(struct lg_backend_engine) % sizeof(uint64_t) == 0, "published by words");
_Static_assert(sizeof(struct lg_est_prior) % sizeof(uint64_t) == 0, "published by words");

static void
backend_conf_copy(struct lg_backend_conf *dst, const struct lg_backend_conf *src)
{
    *dst = *src;
    dst->name = lg_xstrdup(src->name);
    dst->url = lg_xstrdup(src->url);
    dst->host = lg_xstrdup(src->host);
    dst->host_header = lg_xstrdup(src->host_header);
    dst->path_prefix = lg_xstrdup(src->path_prefix ? src->path_prefix : "");
    dst->metrics_path = src->metrics_path ? lg_xstrdup(src->metrics_path) : NULL;
    dst->health_path = src->health_path ? lg_xstrdup(src->health_path) : NULL;
    dst->load_path = src->load_path ? lg_xstrdup(src->load_path) : NULL;
    dst->api_key = src->api_key ? lg_xstrdup(src->api_key) : NULL;
    dst->tls_ca_file = src->tls_ca_file ? lg_xstrdup(src->tls_ca_file) : NULL;
    dst->tls_server_name = src->tls_server_name ? lg_xstrdup(src->tls_server_name) : NULL;
    dst->tls_cert = src->tls_cert ? lg_xstrdup(src->tls_cert) : NULL;
    dst->tls_key = src->tls_key ? lg_xstrdup(src->tls_key) : NULL;
    dst->models = lg_xcalloc(src->nmodels + 1, sizeof(char *));
    for (size_t i = 0; i < src->nmodels; i++) {
        dst->models[i] = lg_xstrdup(src->models[i]);
    }
}

static void
backend_conf_free(struct lg_backend_conf *c)
{
    free(c->name);
    free(c->url);
    free(c->host);
    free(c->host_header);
    free(c->path_prefix);
    free(c->metrics_path);
    free(c->health_path);
    free(c->load_path);
    free(c->api_key);
    free(c->tls_ca_file);
    free(c->tls_server_name);
    free(c->tls_cert);
    free(c->tls_key);
    for (size_t i = 0; i < c->nmodels; i++) {
        free(c->models[i]);
    }
    free(c->models);
    memset(c, 0, sizeof(*c));
}

/* A backend's settings a reload replaced (lg_backend_reconf). */
struct lg_backend_conf_old {
    struct lg_backend_conf *conf;
    struct lg_backend_conf_old *next;
};

static bool
backend_str_same(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool
lg_backend_conf_same_tls(const struct lg_backend_conf *a, const struct lg_backend_conf *b)
{
    return a->tls == b->tls && a->tls_insecure == b->tls_insecure
           && backend_str_same(a->tls_ca_file, b->tls_ca_file)
           && backend_str_same(a->tls_server_name, b->tls_server_name)
           && backend_str_same(a->tls_cert, b->tls_cert)
           && backend_str_same(a->tls_key, b->tls_key);
}

/* Every setting alike (the template a discovered backend came from aside:
 * a backend's own fields hold all it is served with). */
static bool
backend_conf_same(const struct lg_backend_conf *a, const struct lg_backend_conf *b)
{
    if (!backend_str_same(a->name, b->name) || !backend_str_same(a->url, b->url)
        || !backend_str_same(a->host, b->host) || a->port != b->port
        || !backend_str_same(a->host_header, b->host_header)
        || !backend_str_same(a->path_prefix ? a->path_prefix : "",
                             b->path_prefix ? b->path_prefix : "")
        || a->nmodels != b->nmodels || a->weight != b->weight
        || a->max_inflight != b->max_inflight || a->flavor != b->flavor
        || !backend_str_same(a->metrics_path, b->metrics_path)
        || !backend_str_same(a->health_path, b->health_path)
        || !backend_str_same(a->api_key, b->api_key) || !lg_backend_conf_same_tls(a, b)
        || a->addrlen != b->addrlen || memcmp(&a->addr, &b->addr, a->addrlen) != 0
        || a->enabled != b->enabled || a->prefill_chunk != b->prefill_chunk
        || a->priority_field != b->priority_field || a->engine_priority != b->engine_priority) {
        return false;
    }
    for (size_t i = 0; i < a->nmodels; i++) {
        if (strcmp(a->models[i], b->models[i]) != 0) {
            return false;
        }
    }
    return true;
}

void
lg_backend_reconf(struct lg_backend *b, const struct lg_backend_conf *bc)
{
    struct lg_backend_conf *cur = b->conf; /* only this thread writes it */
    struct lg_backend_conf *next;
    struct lg_backend_conf_old *old;

    if (backend_conf_same(cur, bc)) {
        return;
    }
    next = lg_xcalloc(1, sizeof(*next));
    backend_conf_copy(next, bc);
    old = lg_xcalloc(1, sizeof(*old));
    old->conf = cur;
    old->next = b->old_confs;
    b->old_confs = old;
    __atomic_store_n(&b->conf, next, __ATOMIC_RELEASE);
    if (next->flavor != cur->flavor) {
        /* a configured engine: its scrapes parse that; auto: the next detects */
        struct lg_backend_engine e;

        pthread_mutex_lock(&b->eng_lock);
        lg_backend_read_engine(b, &e);
        e.flavor = (int32_t)next->flavor;
        backend_seq_publish(&b->eng_seq, &b->eng_pub, &e, sizeof(e));
        pthread_mutex_unlock(&b->eng_lock);
    }
    lg_backend_touch(b); /* views read the weight and the limit */
}

static uint32_t backend_next_id;

struct lg_backend *
lg_backend_new(const struct lg_backend_conf *bc, unsigned nworkers)
{
    struct lg_backend *b = lg_xcalloc(1, sizeof(*b));

    b->conf = lg_xcalloc(1, sizeof(*b->conf));
    backend_conf_copy(b->conf, bc);
    b->name = b->conf->name;
    b->id = __atomic_add_fetch(&backend_next_id, 1, __ATOMIC_RELAXED);
    b->refcnt = 1;
    pthread_mutex_init(&b->lock, NULL);
    pthread_mutex_init(&b->eng_lock, NULL);
    lg_est_ttft_init(&b->est.ttft);
    lg_est_mean_init(&b->est.itl);
    lg_est_mean_init(&b->est.hold);
    lg_est_mean_init(&b->est.err);
    b->est_pub = b->est;
    b->eng_pub = (struct lg_backend_engine){
        .waiting = -1, .running = -1, .kv_usage = -1, .flavor = (int32_t)bc->flavor, .others = -1
    };
    b->npools = nworkers;
    b->pools = lg_xcalloc(nworkers ? nworkers : 1, sizeof(*b->pools));
    for (unsigned i = 0; i < nworkers; i++) {
        TAILQ_INIT(&b->pools[i].idle);
    }
    return b;
}

struct lg_backend *
lg_backend_ref(struct lg_backend *b)
{
    __atomic_fetch_add(&b->refcnt, 1, __ATOMIC_RELAXED);
    return b;
}

void
lg_backend_unref(struct lg_backend *b)
{
    if (b == NULL || __atomic_sub_fetch(&b->refcnt, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    lg_tls_client_release(&b->tls_ctx);
    /* Workers flush their pools before the last backend reference goes. */
    for (unsigned i = 0; i < b->npools; i++) {
        LG_BUG_ON(!TAILQ_EMPTY(&b->pools[i].idle));
    }
    free(b->pools);
    pthread_mutex_destroy(&b->lock);
    pthread_mutex_destroy(&b->eng_lock);
    while (b->old_confs != NULL) {
        struct lg_backend_conf_old *old = b->old_confs;

        b->old_confs = old->next;
        backend_conf_free(old->conf);
        free(old->conf);
        free(old);
    }
    backend_conf_free(b->conf);
    free(b->conf);
    free(b);
}

bool
lg_backend_is_half_open(const struct lg_backend *b, uint64_t now_ns)
{
    uint64_t until = __atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED);

    return until != 0 && now_ns >= until;
}

bool
lg_backend_is_available(const struct lg_backend *b, uint64_t now_ns)
{
    int h = __atomic_load_n(&b->health, __ATOMIC_RELAXED);
    uint64_t until = __atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED);

    if (h != LG_BACKEND_UP) {
        return false;
    }
    /* no fleet in force lists it: a worker that has not adopted the new
     * fleet yet (its next loop turn) must not send it a new request */
    if (__atomic_load_n(&b->retired, __ATOMIC_RELAXED)) {
        return false;
    }
    if (__atomic_load_n(&b->retry_after_until_ns, __ATOMIC_RELAXED) > now_ns) {
        return false;
    }
    if (until == 0) {
        return true;
    }
    return now_ns >= until && __atomic_load_n(&b->probe_busy, __ATOMIC_RELAXED) == 0;
}

bool
lg_backend_claim_probe(struct lg_backend *b)
{
    uint32_t zero = 0;

    return __atomic_compare_exchange_n(&b->probe_busy, &zero, 1, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_RELAXED);
}

void
lg_backend_release_probe(struct lg_backend *b)
{
    __atomic_store_n(&b->probe_busy, 0, __ATOMIC_RELEASE);
}

double
lg_backend_ramp(const struct lg_backend *b, uint64_t now_ns, uint64_t slow_start_ns)
{
    uint64_t since = __atomic_load_n(&b->up_since_ns, __ATOMIC_RELAXED);
    double r;

    if (since == 0 || slow_start_ns == 0 || now_ns >= since + slow_start_ns) {
        return 1.0;
    }
    r = now_ns > since ? (double)(now_ns - since) / (double)slow_start_ns : 0;
    return 0.1 + 0.9 * r;
}

uint64_t
lg_backend_available_at(const struct lg_backend *b, uint64_t now_ns, uint64_t down_retry_ns)
{
    uint64_t at = now_ns, t;

    if (__atomic_load_n(&b->health, __ATOMIC_RELAXED) != LG_BACKEND_UP) {
        at = now_ns + down_retry_ns;
    }
    t = __atomic_load_n(&b->retry_after_until_ns, __ATOMIC_RELAXED);
    at = LG_MAX(at, t);
    t = __atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED);
    return LG_MAX(at, t);
}

/* Starts (or extends) an ejection, `refused` when a refused connection
 * began it; b->lock held. */
static void
backend_eject(struct lg_backend *b, const struct lg_health_conf *hc, uint64_t now, bool refused)
{
    uint64_t len_ms = hc->eject_base_ms;

    if (b->last_eject_end_ns != 0 && now - b->last_eject_end_ns > hc->eject_max_ms * LG_NS_PER_MS) {
        b->ejections = 0; /* up long enough since the last one: forgive */
    }
    for (uint32_t i = 0; i < b->ejections && len_ms < hc->eject_max_ms; i++) {
        len_ms *= 2;
    }
    len_ms = LG_MIN(len_ms, hc->eject_max_ms);
    b->ejections++;
    __atomic_fetch_add(&b->ejections_total, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&b->consecutive_failures, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&b->eject_refused, refused ? 1u : 0u, __ATOMIC_RELAXED);
    __atomic_store_n(&b->eject_until_ns, now + len_ms * LG_NS_PER_MS, __ATOMIC_RELAXED);
    __atomic_store_n(&b->up_since_ns, 0, __ATOMIC_RELAXED);
    LG_WARN("backend %s ejected for %" PRIu64 " ms (ejection %u)", b->name, len_ms, b->ejections);
}

void
lg_backend_note_result(struct lg_backend *b, const struct lg_health_conf *hc, int status,
                       uint64_t retry_after_ns, unsigned flags)
{
    int cls = (status >= 100 && status < 600) ? status / 100 : 0;
    bool failed = cls == 0 || cls == 5 || status == 429;
    uint64_t now, until;

    if (!(flags & LG_BACKEND_R_MIDWAY)) {
        LG_STAT_ADD(b, responses[cls], 1); /* a cut after the head was counted with it */
    }
    if (retry_after_ns == 0 && (flags & LG_BACKEND_R_REFUSED)) {
        /* Nothing listens there: besides the ejection below, hold it off for a
         * second as if it had said Retry-After: 1, so that a queue waiting for
         * room does not pour into it and burn the retry budget when ejection
         * is off. */
        retry_after_ns = LG_NS_PER_S;
    }
    if (retry_after_ns > 0) {
        __atomic_store_n(&b->retry_after_until_ns, lg_now_ns() + retry_after_ns,
                         __ATOMIC_RELAXED);
    }
    if (cls == 2 && !(flags & LG_BACKEND_R_MIDWAY)
        && __atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED) == 0
        && __atomic_load_n(&b->consecutive_failures, __ATOMIC_RELAXED) == 0) {
        /* the common case, nothing to reset: the success is counted in the
         * error rate with the rest of the response's learning when it ends
         * (lg_backend_note_done), one lock per response instead of two (and
         * no clock read) */
        return;
    }
    now = lg_now_ns();
    pthread_mutex_lock(&b->lock);
    lg_est_mean_add(&b->est.err, now, failed ? 1.0 : 0.0, 2 * LG_EST_MEAN_HALF_LIFE_S);
    backend_seq_publish(&b->est_seq, &b->est_pub, &b->est, sizeof(b->est));
    until = __atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED);
    if (!failed) {
        __atomic_store_n(&b->consecutive_failures, 0, __ATOMIC_RELAXED);
        if (until != 0 && now >= until) {
            /* the half-open probe (or a straggler) succeeded: close */
            __atomic_store_n(&b->eject_until_ns, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&b->up_since_ns, now, __ATOMIC_RELAXED);
            b->last_eject_end_ns = now;
            LG_INFO("backend %s is back after ejection %u", b->name, b->ejections);
        }
    } else if (until != 0 && now < until) {
        /* ejected already: a failure of a request sent before says nothing new */
    } else if (hc->eject_consecutive > 0) {
        __atomic_store_n(&b->consecutive_failures,
                         b->consecutive_failures
                             + ((flags & LG_BACKEND_R_REFUSED) ? hc->eject_consecutive : 1),
                         __ATOMIC_RELAXED);
        if (until != 0 || b->consecutive_failures >= hc->eject_consecutive) {
            backend_eject(b, hc, now, (flags & LG_BACKEND_R_REFUSED) != 0);
        }
    }
    pthread_mutex_unlock(&b->lock);
}

void
lg_backend_note_listening(struct lg_backend *b, uint64_t now_ns)
{
    uint64_t until;

    if (__atomic_load_n(&b->eject_refused, __ATOMIC_RELAXED) == 0) {
        return; /* the common case: not ejected, or not for a refusal */
    }
    pthread_mutex_lock(&b->lock);
    until = __atomic_load_n(&b->eject_until_ns, __ATOMIC_RELAXED);
    if (until != 0 && now_ns < until && __atomic_load_n(&b->eject_refused, __ATOMIC_RELAXED)) {
        __atomic_store_n(&b->eject_until_ns, LG_MAX(now_ns, 1), __ATOMIC_RELAXED);
        LG_INFO("backend %s answers again: half-open now, %" PRIu64 " ms before ejection %u ends",
                b->name, (uint64_t)((until - now_ns) / LG_NS_PER_MS), b->ejections);
    }
    __atomic_store_n(&b->eject_refused, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&b->lock);
}

void
lg_backend_note_reset(struct lg_backend *b, uint64_t now_ns)
{
    uint64_t until = now_ns + LG_BACKEND_RESET_HOLD_MS * LG_NS_PER_MS;
    uint64_t was = __atomic_load_n(&b->retry_after_until_ns, __ATOMIC_RELAXED);

    while (was < until && !__atomic_compare_exchange_n(&b->retry_after_until_ns, &was, until,
                                                       true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

void
lg_backend_publish_peers(struct lg_backend *b, const struct lg_backend_peers *p)
{
    /* fleets' health threads overlap across a reload: one writer at a time */
    pthread_mutex_lock(&b->eng_lock);
    backend_seq_publish(&b->peers_seq, &b->peers_pub, p, sizeof(*p));
    pthread_mutex_unlock(&b->eng_lock);
}

void
lg_backend_read_peers(const struct lg_backend *b, struct lg_backend_peers *out)
{
    backend_seq_read(&b->peers_seq, out, &b->peers_pub, sizeof(*out));
}

bool
lg_backend_peers_fresh(uint64_t t_ns, uint64_t ttl_ns, uint64_t now_ns)
{
    return t_ns != 0 && now_ns >= t_ns && now_ns - t_ns < ttl_ns;
}

uint32_t
lg_backend_peer_inflight(const struct lg_backend *b, uint64_t now_ns)
{
    /* three words, not the whole copy: this runs for every candidate */
    if (!lg_backend_peers_fresh(__atomic_load_n(&b->peers_pub.t_ns, __ATOMIC_RELAXED),
                                __atomic_load_n(&b->peers_pub.ttl_ns, __ATOMIC_RELAXED), now_ns)) {
        return 0;
    }
    return __atomic_load_n(&b->peers_pub.inflight, __ATOMIC_RELAXED);
}

/* ---- stream pace -------------------------------------------------------- */

/* A pace not moved for this long has no stream behind it: the mean gap of
 * finished responses (itl_ms) speaks instead. */
#define PACE_FRESH_NS (2 * LG_NS_PER_S)

/* b->pace holds a double's bits (atomics take integers) */
union backend_pace {
    uint64_t u;
    double d;
};

/* Moves the pace held in *word (timed at *t_ns) toward gap_ms, or sets it
 * when older than fresh_ns. Streams on several workers move it: a lost
 * update loses one sample. */
static void
backend_pace_move(uint64_t *word, uint64_t *t_ns, uint64_t now_ns, double gap_ms, uint64_t fresh_ns)
{
    union backend_pace p = { .u = __atomic_load_n(word, __ATOMIC_RELAXED) };
    uint64_t t = __atomic_load_n(t_ns, __ATOMIC_RELAXED);

    p.d = t != 0 && now_ns - t < fresh_ns ? p.d + 0.25 * (gap_ms - p.d) : gap_ms;
    __atomic_store_n(word, p.u, __ATOMIC_RELAXED);
    __atomic_store_n(t_ns, now_ns, __ATOMIC_RELAXED);
}

void
lg_backend_note_pace(struct lg_backend *b, uint64_t now_ns, double gap_ms, uint32_t batch)
{
    if (!(gap_ms >= 0) || !isfinite(gap_ms)) {
        return;
    }
    backend_pace_move(&b->pace, &b->pace_t_ns, now_ns, gap_ms, PACE_FRESH_NS);
    batch = LG_MAX(batch, 1u);
    if (batch <= LG_BACKEND_PACE_BATCHES) {
        backend_pace_move(&b->pace_batch[batch - 1], &b->pace_batch_t_ns[batch - 1], now_ns, gap_ms,
                          (uint64_t)LG_BACKEND_PACE_FRESH_S * LG_NS_PER_S);
    }
    lg_backend_touch(b);
}

double
lg_backend_step_per_seq(const struct lg_backend *b, uint64_t now_ns)
{
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, lo = 1e9, hi = 0, slope;

    for (uint32_t i = 0; i < LG_BACKEND_PACE_BATCHES; i++) {
        union backend_pace p = { .u = __atomic_load_n(&b->pace_batch[i], __ATOMIC_RELAXED) };
        uint64_t t = __atomic_load_n(&b->pace_batch_t_ns[i], __ATOMIC_RELAXED);
        double x = (double)(i + 1);

        if (t == 0 || now_ns < t || now_ns - t >= (uint64_t)LG_BACKEND_PACE_FRESH_S * LG_NS_PER_S
            || !(p.d > 0)) {
            continue;
        }
        n += 1;
        sx += x;
        sy += p.d;
        sxx += x * x;
        sxy += x * p.d;
        lo = LG_MIN(lo, x);
        hi = LG_MAX(hi, x);
    }
    if (hi - lo < 2 || n * sxx - sx * sx <= 0) {
        return 0;
    }
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    return slope > 0 && isfinite(slope) ? slope : 0;
}

/* The recent gap between a stream's tokens there; false where no stream
 * moved lately (*ms is then fallback_ms). */
bool
lg_backend_pace_ms(const struct lg_backend *b, uint64_t now_ns, double fallback_ms, double *ms)
{
    union backend_pace p = { .u = __atomic_load_n(&b->pace, __ATOMIC_RELAXED) };
    uint64_t t = __atomic_load_n(&b->pace_t_ns, __ATOMIC_RELAXED);

    *ms = fallback_ms;
    if (t == 0 || now_ns < t || now_ns - t >= PACE_FRESH_NS || !(p.d > 0)) {
        return false;
    }
    *ms = p.d;
    return true;
}

double
lg_backend_step_ms(const struct lg_backend *b, uint64_t now_ns, double itl_ms)
{
    double ms;

    lg_backend_pace_ms(b, now_ns, itl_ms, &ms);
    return ms;
}

/* ---- estimators --------------------------------------------------------- */

/* The waiting the model predicted (queueing, others' first-token work) is
 * not the replica's speed; if the prediction overshot, keep at least a
 * quarter of what was observed. */
static double
backend_ttft_sample(double ttft_ms, double wait_ms)
{
    return LG_MAX(ttft_ms - (wait_ms > 0 ? wait_ms : 0), 0.25 * ttft_ms);
}

/* The engine model's prefill: a fixed part per step that prefills and ms
 * per KiB. Before its own prefills are seen, no fixed part and the fleet's
 * prefill per ms of decode step times this replica's step: a replica four
 * times slower to decode is taken to be four times slower to prefill, so a
 * quarter-speed replica that gets few requests is not handed long prompts
 * at the fleet's speed (bench/routing/NOTES.md 44). Before any replica has
 * prefilled enough, the TTFT fit's slope (the fleet's, scaled by this
 * replica's slowness on short prompts; its peak left out). */
double
lg_backend_prefill(const struct lg_backend_est *est, uint64_t now_ns,
                   const struct lg_est_value *fit, const struct lg_est_prior *prior, double step_ms,
                   double *fixed_ms)
{
    double fallback = prior->prefill_per_step > 0 && step_ms > 0
                          ? prior->prefill_per_step * step_ms
                          : fit->ms_per_kib / LG_MAX(fit->peak, 1.0);
    double fixed, slope;

    lg_est_line_read(&est->prefill, now_ns, 0, fallback, LG_EST_MEAN_HALF_LIFE_S, &fixed, &slope);
    if (fixed_ms != NULL) {
        *fixed_ms = fixed;
    }
    return slope;
}

/* Whether the engine model misses there, from both estimators' errors (the
 * thresholds in backend.h); b->lock held. */
static void
backend_judge_model(struct lg_backend_est *est, uint64_t now)
{
    struct lg_est_err_value m, x;
    double xrms;

    double mrms;

    lg_est_err_read(&est->model_used, now, LG_EST_ERR_HALF_LIFE_S, &m);
    lg_est_err_read(&est->meas_err, now, LG_EST_ERR_HALF_LIFE_S, &x);
    if (m.weight < LG_EST_MISS_SAMPLES || x.weight < LG_EST_MISS_SAMPLES) {
        est->measured = 0;
        return;
    }
    mrms = lg_est_err_rms(&m);
    xrms = lg_est_err_rms(&x);
    if (mrms > LG_EST_MISS_RATIO * xrms + LG_EST_MISS_MARGIN) {
        est->measured = 1;
    } else if (mrms < xrms) {
        est->measured = 0;
    }
}

void
lg_backend_note_first_token(struct lg_backend *b, const struct lg_est_prior *prior,
                            const struct lg_backend_first *f)
{
    uint64_t now = lg_now_ns();
    double ttft_ms = f->ttft_ms, model_ms = f->model_ms, pred_ms = f->pred_ms;
    double kib = (double)f->prompt_bytes / 1024.0;
    bool prefill = prior != NULL && kib > 0 && model_ms >= 0;
    bool scale = pred_ms > 0 && isfinite(pred_ms) && ttft_ms > 0;
    bool meas = f->meas_pred_ms > 0 && isfinite(f->meas_pred_ms) && ttft_ms > 0;
    bool curve = f->load >= 0 && isfinite(f->load) && ttft_ms >= 0;
    bool ttft = prior != NULL && f->wait_ms >= 0;

    if (!isfinite(ttft_ms) || (!prefill && !scale && !meas && !curve && !ttft)) {
        return;
    }
    pthread_mutex_lock(&b->lock);
    if (prefill) {
        /* a first token held up by what the model did not see (a stall, a
         * step that ran long) is not the prompt's prefill: at most four
         * times the prefill so far, as the TTFT fit takes (LG_EST_FIT_MAX);
         * until the replica's own samples outweigh the prior, which may be
         * far off (a fleet's prior on an engine unlike it), sixteen */
        struct lg_est_value fit;
        double itl = lg_est_mean_read(&b->est.itl, now, prior->itl_ms, LG_EST_MEAN_HALF_LIFE_S);
        double slope, fixed, y, cap;

        lg_est_ttft_read(&b->est.ttft, now, prior, &fit);
        slope =
            lg_backend_prefill(&b->est, now, &fit, prior, lg_backend_step_ms(b, now, itl), &fixed);
        cap = lg_est_line_weight(&b->est.prefill, now, LG_EST_MEAN_HALF_LIFE_S)
                      >= LG_EST_MEAN_PRIOR_WEIGHT
                  ? LG_EST_FIT_MAX
                  : 4 * LG_EST_FIT_MAX;
        y = LG_MIN(LG_MAX(ttft_ms - model_ms, 0.0), cap * (fixed + slope * kib) + 1.0);
        lg_est_line_add(&b->est.prefill, now, kib, y, LG_EST_MEAN_HALF_LIFE_S);
    }
    if (scale) {
        lg_est_err_add(&b->est.model_err, now, ttft_ms, pred_ms, LG_EST_ERR_HALF_LIFE_S);
        lg_est_bias_add(&b->est.model_bias, now, f->load, ttft_ms, pred_ms,
                        LG_EST_CURVE_HALF_LIFE_S);
        lg_est_err_add(&b->est.model_used, now, ttft_ms,
                       pred_ms * (f->model_scale > 0 ? f->model_scale : 1.0),
                       LG_EST_ERR_HALF_LIFE_S);
        lg_est_late_add(&b->est.late, now, ttft_ms,
                        pred_ms * (f->model_scale > 0 ? f->model_scale : 1.0));
    }
    if (meas) {
        lg_est_err_add(&b->est.meas_err, now, ttft_ms, f->meas_pred_ms, LG_EST_ERR_HALF_LIFE_S);
    }
    if (scale || meas) {
        backend_judge_model(&b->est, now);
    }
    if (curve) {
        lg_est_curve_add(&b->est.curve, now, f->load,
                         LG_MAX(ttft_ms - (f->prefill_ms > 0 ? f->prefill_ms : 0), 0.0));
    }
    if (ttft) {
        lg_est_ttft_add(&b->est.ttft, now, prior, kib, backend_ttft_sample(ttft_ms, f->wait_ms));
    }
    backend_seq_publish(&b->est_seq, &b->est_pub, &b->est, sizeof(b->est));
    pthread_mutex_unlock(&b->lock);
}

void
lg_backend_note_done(struct lg_backend *b, const struct lg_est_prior *prior, uint64_t prompt_bytes,
                     double ttft_ms, double wait_ms, double itl_ms, double hold_ms)
{
    uint64_t now = lg_now_ns();

    pthread_mutex_lock(&b->lock);
    /*
     * A whole response's time is its first token only where nothing better
     * times them: where streams ran there lately (their gaps between tokens
     * are what they leave), their first tokens teach the fit, and whole
     * answers, a first token and every token after it, would read as a
     * replica many times slower than it is, by the share of such answers it
     * happened to get.
     */
    if (prior != NULL
        && lg_est_mean_weight(&b->est.itl, now, LG_EST_MEAN_HALF_LIFE_S) < LG_EST_WHOLE_STREAMS) {
        lg_est_ttft_add(&b->est.ttft, now, prior, (double)prompt_bytes / 1024.0,
                        backend_ttft_sample(ttft_ms, wait_ms));
    }
    if (itl_ms >= 0) {
        lg_est_mean_add(&b->est.itl, now, itl_ms, LG_EST_MEAN_HALF_LIFE_S);
    }
    if (hold_ms >= 0) {
        lg_est_mean_add(&b->est.hold, now, hold_ms, LG_EST_MEAN_HALF_LIFE_S);
    }
    /* the success lg_backend_note_result() left to the end of the response */
    lg_est_mean_add(&b->est.err, now, 0.0, 2 * LG_EST_MEAN_HALF_LIFE_S);
    backend_seq_publish(&b->est_seq, &b->est_pub, &b->est, sizeof(b->est));
    pthread_mutex_unlock(&b->lock);
}

void
lg_backend_read_est(const struct lg_backend *b, struct lg_backend_est *out)
{
    backend_seq_read(&b->est_seq, out, &b->est_pub, sizeof(*out));
}

void
lg_backend_read_engine(const struct lg_backend *b, struct lg_backend_engine *out)
{
    backend_seq_read(&b->eng_seq, out, &b->eng_pub, sizeof(*out));
}

void
lg_backend_publish_engine(struct lg_backend *b, const struct lg_backend_engine *e)
{
    pthread_mutex_lock(&b->eng_lock);
    backend_seq_publish(&b->eng_seq, &b->eng_pub, e, sizeof(*e));
    pthread_mutex_unlock(&b->eng_lock);
}

void
lg_backend_read_report(const struct lg_backend *b, struct lg_backend_report *out)
{
    backend_seq_read(&b->rep_seq, out, &b->rep_pub, sizeof(*out));
}

void
lg_backend_publish_report(struct lg_backend *b, const struct lg_backend_report *r)
{
    pthread_mutex_lock(&b->eng_lock);
    if (r->t_ns >= b->rep_pub.t_ns) {
        backend_seq_publish(&b->rep_seq, &b->rep_pub, r, sizeof(*r));
    }
    pthread_mutex_unlock(&b->eng_lock);
}

enum lg_load_source
lg_load_report_fold(struct lg_backend_engine *e, const struct lg_backend_report *rep)
{
    const struct lg_load_report *r = &rep->r;
    double slots = 0, waiting, running;

    if (rep->t_ns == 0 || rep->t_ns <= e->t_ns) {
        return LG_LOAD_SRC_SCRAPE;
    }
    lg_backend_engine_slots(e, &slots);
    if (r->waiting >= 0 && r->running >= 0) {
        waiting = r->waiting;
        running = r->running;
    } else if (r->total >= 0) {
        if (slots > 0) {
            running = LG_MIN(r->total, slots);
        } else {
            running = r->total - LG_MIN(LG_MAX(e->waiting, 0), r->total);
        }
        waiting = r->total - running;
    } else if (r->waiting >= 0 && e->t_ns != 0 && e->running >= 0) {
        waiting = r->waiting;
        running = LG_MAX((double)e->running + (double)rep->inflight_at
                             - (double)e->inflight_at_scrape,
                         0.0);
        if (slots > 0) {
            /* a queue means every slot is taken */
            running = waiting > 0 ? slots : LG_MIN(running, slots);
        }
    } else {
        return LG_LOAD_SRC_SCRAPE; /* nothing to count requests by */
    }
    e->waiting = (int32_t)LG_MIN(waiting, 1e7);
    e->running = (int32_t)LG_MIN(running, 1e7);
    if (r->kv_usage >= 0) {
        e->kv_usage = r->kv_usage;
    }
    if (r->slots > 0 && e->slots_declared <= 0) {
        e->slots_declared = r->slots;
    }
    e->t_ns = rep->t_ns;
    e->inflight_at_scrape = rep->inflight_at;
    return (enum lg_load_source)rep->source;
}

void
lg_route_read_prior(const struct lg_model_route *r, struct lg_est_prior *out)
{
    backend_seq_read(&r->prior_seq, out, &r->prior, sizeof(*out));
}

void
lg_route_publish_prior(struct lg_model_route *r, const struct lg_est_prior *p)
{
    /* one writer: the fleet's health thread */
    backend_seq_publish(&r->prior_seq, &r->prior, p, sizeof(*p));
}

bool
lg_backend_engine_slots(const struct lg_backend_engine *e, double *slots)
{
    double n = e->slots_declared > 0       ? e->slots_declared
               : e->capacity_confirmed > 0 ? e->capacity
                                           : 0;

    if (slots != NULL) {
        *slots = n;
    }
    return n > 0;
}
