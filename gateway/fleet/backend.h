/*
 * backend.h: replicas and their live state, and the fleet (the set of
 * backends a configuration names, indexed by model).
 *
 * A struct lg_backend is shared by every worker thread. Its live counters are
 * atomics updated with relaxed ordering (they are statistics and routing
 * hints, not synchronisation); the estimates that need several fields updated
 * together sit behind `lock`. The per-worker upstream pools hang off the
 * backend but each is touched only by its own worker.
 */
#ifndef LG_BACKEND_H
#define LG_BACKEND_H

#include <pthread.h>

#include "base/config.h"
#include "base/lg_core.h"
#include "base/stats.h"
#include "fleet/estimate.h"

struct lg_upstream_pool;
struct lg_backend_view;
struct lg_health;
struct ssl_ctx_st;

enum lg_backend_health {
    LG_BACKEND_UP = 0,   /* takes traffic */
    LG_BACKEND_DOWN,     /* failed active checks */
    LG_BACKEND_EJECTED,  /* passive: too many consecutive failures; back-off running */
    LG_BACKEND_DRAINING, /* admin or reload: no new requests, running ones finish */
};

/*
 * The estimators (estimate.h) of one backend. Workers update them under
 * `lock` and publish a copy through a sequence counter, so readers (every
 * routing decision) copy it without taking a lock.
 */
struct lg_backend_est {
    struct lg_est_ttft ttft; /* service TTFT fit and peak */
    struct lg_est_mean itl;  /* inter-token gap, ms */
    struct lg_est_mean hold; /* time a request holds an engine slot, ms */
    struct lg_est_mean err;  /* failed attempts: 1, others 0 */
    struct lg_est_slope prefill; /* the engine model's prefill, ms per KiB of prompt */
    struct lg_est_mean model_err; /* log(first token / the engine model's prediction) */
};

/* The engine's own view of its load, from its /metrics (health.c writes it). */
struct lg_backend_engine {
    int32_t waiting;             /* -1 = unknown */
    int32_t running;             /* -1 = unknown */
    double kv_usage;             /* -1 = unknown */
    uint64_t t_ns;               /* when scraped (monotonic); 0 = never */
    uint32_t inflight_at_scrape; /* this gateway's in-flight then */
    int32_t flavor;              /* enum lg_engine_flavor detected or configured */
    double capacity;             /* slots: running seen while a queue lasted; else the
                                     most seen running; 0 = unknown */
    double capacity_confirmed;   /* 1 when seen with a queue (exact), else 0 */
    uint64_t confirmed_t_ns;     /* last queue that confirmed it (LG_ENGINE_CONFIRM_TTL_S) */
    int32_t run_max;             /* the most seen running at once (recently) */
    uint64_t run_max_t_ns;       /* last scrape that saw it run that many (or one less) */
};

/* A queue-confirmed capacity holds this long without another confirming queue. */
#define LG_ENGINE_CONFIRM_TTL_S 10
/* The most seen running is forgotten after this long without running that many. */
#define LG_ENGINE_RUN_MAX_TTL_S 60
/* KV-cache usage at which an engine stops admitting for lack of cache. */
#define LG_ENGINE_KV_FULL 0.9

/*
 * Peer gateways' requests on a backend (peers.c fetches them, the fleet's
 * health thread publishes them): their in-flight count and their sequences
 * as lg_backend_seq_word() words, so the engine model sees the whole batch
 * and line when several gateways share a fleet. `complete`: each peer knew
 * every one of its requests' lengths there. Valid until t_ns + ttl_ns.
 */
#define LG_BACKEND_PEER_SEQS 256 /* peers' sequences per backend, all peers together */
struct lg_backend_peers {
    uint64_t t_ns;      /* oldest answer merged; 0 = none */
    uint64_t ttl_ns;
    uint32_t inflight;
    uint32_t n;         /* words used */
    uint32_t complete;
    uint32_t gateways;  /* peers merged */
    uint64_t words[LG_BACKEND_PEER_SEQS];
};

/* Response classes counted per backend: 1xx..5xx, and "no response". */
#define LG_BACKEND_NCLASS 6
#define LG_BACKEND_DUE_SLOTS 64 /* requests awaiting a first token counted one by one */
#define LG_BACKEND_END_SLOTS 128 /* requests whose end is predicted, counted one by one */

struct lg_backend_stats {
    uint64_t requests;                     /* dispatched attempts */
    uint64_t responses[LG_BACKEND_NCLASS]; /* [0] = failed before a status, [k] = kxx */
    uint64_t retries;                      /* attempts that were retries */
    uint64_t connect_failures;
    uint64_t timeouts;
    uint64_t cut_streams;   /* failed after bytes reached the client */
    uint64_t client_aborts; /* client left; upstream closed at once */
    uint64_t connects;      /* new upstream connections */
    uint64_t reuses;        /* requests sent on a pooled connection */
    uint64_t bytes_in;      /* response bytes relayed */
    uint64_t bytes_out;     /* request bytes sent */
};

struct lg_backend {
    char *name;                  /* owned */
    struct lg_backend_conf conf; /* owned deep copy: outlives the config it came from */
    uint32_t index;              /* position in the fleet that created it */
    uint32_t id;                 /* unique for the process: survives reloads */
    int refcnt;                  /* atomic: fleets and in-flight requests */

    uint32_t inflight;             /* atomic: requests dispatched and not finished */
    uint64_t ages[2];              /* atomic: LG_BACKEND_AGES_* request counts and ages,
                                      packed (see backend.c, ages_*) */
    int health;                    /* atomic enum lg_backend_health (UP/DOWN: health.c) */
    int retired;                   /* atomic: no fleet in force lists it (reload.c); its
                                      connections close once their request ends */
    uint64_t retry_after_until_ns; /* atomic: honour Retry-After until then */
    uint64_t eject_until_ns;       /* atomic: passive ejection; 0 = not ejected; once
                                       past, the backend is half-open */
    uint32_t probe_busy;           /* atomic: the half-open probe is in flight */
    uint64_t up_since_ns;          /* atomic: slow start began then; 0 = full share */
    uint64_t ejections_total;      /* atomic: passive ejections since it joined (metrics) */
    uint64_t warn_ratelimit_ns;    /* for lg_log_ratelimit() */
    struct lg_backend_stats stats; /* atomic fields */
    struct lg_backend_metrics metrics; /* atomic: histograms and tokens (stats.c) */

    uint32_t est_seq;              /* atomic: odd while est_pub is being written */
    struct lg_backend_est est_pub; /* published copy, read with lg_backend_read_est() */
    uint32_t eng_seq;              /* atomic: odd while eng_pub is being written */
    struct lg_backend_engine eng_pub;

    pthread_mutex_t lock;      /* guards what follows, and writes of est_pub */
    struct lg_backend_est est; /* the writers' copy */
    uint32_t consecutive_failures; /* written under lock, read without (atomic) */
    uint32_t ejections; /* back-off doubles with each; reset after eject_max up */
    uint64_t last_eject_end_ns;
    pthread_mutex_t eng_lock; /* serialises writers of eng_pub (scrapers) and peers_pub */

    struct lg_upstream_pool *pools; /* [nworkers], each owned by its worker */
    unsigned npools;
    struct ssl_ctx_st *tls_ctx;     /* owned (tls.c): https client context, set once (atomic) */

    /* atomic: when each request awaiting a first token here should have it,
     * 0 = free (lg_backend_due_add) */
    uint64_t due[LG_BACKEND_DUE_SLOTS];
    /* atomic: when each request of ours there should end (and free its
     * engine slot), 0 = free (lg_backend_end_add) */
    uint64_t ends[LG_BACKEND_END_SLOTS];
    /* atomic: what the engine still has to do for each streamed request of
     * ours there, 0 = free (lg_backend_seq_add) */
    uint64_t seqs[LG_BACKEND_END_SLOTS];
    uint64_t pace; /* atomic: a double, the recent gap between a stream's tokens (ms) */
    uint64_t pace_t_ns; /* atomic: when it was last moved */
    uint64_t token_t_ns; /* atomic: when a stream of ours there last got a token */
    uint32_t peers_seq;               /* atomic: odd while peers_pub is being written */
    struct lg_backend_peers peers_pub; /* peer gateways' requests there (health.c) */
};

/* One model name and the backends serving it (borrowed from the fleet). */
struct lg_model_route {
    const char *model;            /* borrowed from a backend's conf */
    struct lg_backend **backends; /* owned array of borrowed pointers */
    size_t n;
    uint32_t prior_seq;        /* atomic: odd while prior is being written */
    struct lg_est_prior prior; /* fleet medians for the model (health.c writes it) */
};

/*
 * The fleet: every backend of one configuration and a model index. Refcounted
 * and immutable once built; workers hold the current one, requests hold the
 * one they started with.
 */
struct lg_fleet {
    int refcnt;                   /* atomic */
    struct lg_config *conf;       /* one reference, released with the fleet */
    struct lg_backend **backends; /* owned references */
    size_t nbackends;
    struct lg_model_route *models; /* sorted by name */
    size_t nmodels;
    struct lg_router *router; /* owned */
    struct lg_health *health; /* owned: active checks and scrapes; NULL when off */
};

/*
 * Builds a fleet for conf with `nworkers` upstream pools per backend. Backends
 * of `prev` (may be NULL) with the same name and URL are reused with their
 * live state, so a reload keeps statistics and pooled connections.
 */
int lg_fleet_new(struct lg_config *conf, unsigned nworkers, const struct lg_fleet *prev,
                 struct lg_fleet **out);
struct lg_fleet *lg_fleet_ref(struct lg_fleet *f);
/* f is no longer in force (a reload replaced it; control thread, f still
 * referenced): stops its health thread, whose checks, scrapes and peer fetches
 * the new fleet's thread now makes for the backends they share. Requests that
 * hold f finish on it; its priors stay as they were. */
void lg_fleet_retire(struct lg_fleet *f);
void lg_fleet_unref(struct lg_fleet *f);

/* The backends serving `model` (NULL if none). */
const struct lg_model_route *lg_fleet_find_model(const struct lg_fleet *f, const char *model);

struct lg_backend *lg_backend_ref(struct lg_backend *b);
void lg_backend_unref(struct lg_backend *b);

/*
 * May b take a new request now? Up, not held off by Retry-After, not ejected
 * (or half-open with its probe slot free).
 */
bool lg_backend_is_available(const struct lg_backend *b, uint64_t now_ns);

/* Is b half-open (ejection back-off over, no success since)? */
bool lg_backend_is_half_open(const struct lg_backend *b, uint64_t now_ns);

/* Claims the half-open probe slot; false if another request has it. */
bool lg_backend_claim_probe(struct lg_backend *b);
void lg_backend_release_probe(struct lg_backend *b);

/* Slow start: the share b may take now, 0.1..1 over slow_start_ns. */
double lg_backend_ramp(const struct lg_backend *b, uint64_t now_ns, uint64_t slow_start_ns);

/* Earliest time b may take requests again (now if available). */
uint64_t lg_backend_available_at(const struct lg_backend *b, uint64_t now_ns,
                                 uint64_t down_retry_ns);

/* Counter helpers (relaxed atomics). */
#define LG_STAT_ADD(b, field, n) __atomic_fetch_add(&(b)->stats.field, (n), __ATOMIC_RELAXED)
#define LG_STAT_GET(b, field)    __atomic_load_n(&(b)->stats.field, __ATOMIC_RELAXED)

static inline uint32_t
lg_backend_inflight(const struct lg_backend *b)
{
    return __atomic_load_n(&b->inflight, __ATOMIC_RELAXED);
}

/* Outcome flags for lg_backend_note_result(). */
#define LG_BACKEND_R_REFUSED 1u /* the connection was refused: nothing listens there */
#define LG_BACKEND_R_MIDWAY  2u /* failed after its response head (already counted) */

/*
 * Records the outcome of one attempt: status 0 = no response (connect
 * failure, reset, timeout). Failures (no response, 5xx, 429) in a row eject
 * the backend for eject_base * 2^k (at most eject_max); a refused connection
 * counts as eject_consecutive failures at once. Once the back-off is over
 * the backend is half-open: one probe at a time; a success closes it (and
 * starts slow start), a failure re-ejects it for longer. retry_after_ns > 0
 * holds the backend off for that long (Retry-After).
 */
void lg_backend_note_result(struct lg_backend *b, const struct lg_health_conf *hc, int status,
                            uint64_t retry_after_ns, unsigned flags);

/*
 * Requests of this gateway on b and their mean age, lock-free: those
 * awaiting their first token (from dispatch to the first token or the end of
 * the attempt), and all in flight. lg_backend_ages_add() returns false (and
 * counts nothing) when the counter is full; pass the same t_ns to
 * lg_backend_ages_del().
 */
enum lg_backend_ages {
    LG_BACKEND_AGES_PENDING = 0,
    LG_BACKEND_AGES_INFLIGHT,
};
bool lg_backend_ages_add(struct lg_backend *b, enum lg_backend_ages which, uint64_t t_ns);
void lg_backend_ages_del(struct lg_backend *b, enum lg_backend_ages which, uint64_t t_ns);
uint32_t lg_backend_ages(const struct lg_backend *b, enum lg_backend_ages which, uint64_t now_ns,
                         double *mean_age_ms);

/*
 * First-token work still ahead on b, request by request: each request
 * awaiting a first token holds a slot with the time its predicted service
 * TTFT ends (dispatch + service_ms). lg_backend_work_ahead_ms() sums what is
 * left of each, at least a quarter of its age (a sum of differences would let
 * an overdue request's negative remainder cancel another's work, where its
 * lateness says the engine is behind). lg_backend_due_add() returns
 * the slot to pass to lg_backend_due_del(), or -1 when all are taken (the
 * request is then not counted). Lock-free, any thread; ms resolution.
 */
int lg_backend_due_add(struct lg_backend *b, uint64_t t_ns, double service_ms, uint32_t hint);
void lg_backend_due_del(struct lg_backend *b, int slot);
/*
 * Slot ends: each request of this gateway on b whose output length is known
 * (max_tokens) holds a slot with the time it should end: dispatch + service
 * TTFT + max_tokens gaps, re-set at its first token to first token +
 * (max_tokens - 1) gaps. An engine with every slot busy admits the next
 * request when one of them ends, so the k-th soonest end is when the k-th
 * request in line starts: lg_backend_end_wait_ms() returns the ms until then
 * (an end already past counts as one gap away: it is about to end), or -1
 * when fewer than k ends are known or k is 0 or above 8 (a queue that long
 * takes the hold-time formula). max_tokens bounds a generation, so with
 * early stops (EOS) the real wait is shorter, never longer. Same slot rules
 * as due[]: lock-free, any thread, ms resolution.
 */
int lg_backend_end_add(struct lg_backend *b, uint64_t end_ns, uint32_t hint);
/* Moves the end held in a slot lg_backend_end_add() gave (no new claim). */
void lg_backend_end_move(struct lg_backend *b, int slot, uint64_t end_ns);
void lg_backend_end_del(struct lg_backend *b, int slot);
double lg_backend_end_wait_ms(const struct lg_backend *b, uint64_t now_ns, unsigned k,
                              double gap_ms);

/*
 * Sequences: each streamed request of ours on b with a known output length
 * (max_tokens) holds a word for the engine model (lg_backend_view's
 * engine_model_ms): its prompt to prefill and its length while it awaits a
 * first token, then the tokens still to come (lg_backend_seq_left, by the
 * request's owner only, at each of its tokens; the last token's time there
 * marks the end of an engine step, which places the step in progress).
 * lg_backend_seq_add() returns the slot, or -1 when all are taken (the
 * model then declines: it must see every request).
 * lg_backend_note_pace() moves the replica's recent gap between a stream's
 * tokens (the lower quartile of a stream's last 8 gaps, proxy.c), which the
 * model steps by. Same slot rules as due[].
 */
int lg_backend_seq_add(struct lg_backend *b, uint64_t t_ns, uint64_t prompt_bytes,
                       uint32_t max_tokens, uint32_t hint);
void lg_backend_seq_left(struct lg_backend *b, int slot, uint64_t left, uint64_t now_ns);
void lg_backend_seq_del(struct lg_backend *b, int slot);
void lg_backend_note_pace(struct lg_backend *b, uint64_t now_ns, double gap_ms);

/* A request of ours dispatched to b (+1) or done there (-1). */
void lg_backend_inflight_add(struct lg_backend *b, int delta);
/* Moves with every request of ours dispatched, started (first token) or
 * done, on any backend: peers waiting for news (GET /admin/peers?since=)
 * compare it. Any thread; below 2^63 (a JSON integer). */
uint64_t lg_backend_changes(void);
/* Makes every change activate ev (on a base with locking, thread-safe
 * event_active()), until set to NULL; ev must outlive every worker thread
 * (the admin listener's, stopped after them). */
struct event;
void lg_backend_news_event(struct event *ev);
/* ev's callback, before it reads lg_backend_changes(): the next change
 * activates ev again (until then changes only count). */
void lg_backend_news_taken(void);

/* One sequence as peers exchange it (peers.c): started or still in line,
 * tokens still to come (max_tokens before the first), prompt tokens, and
 * ms since it was sent (in line) or since the snapshot (started). */
struct lg_seq_info {
    uint32_t started;
    uint32_t left;
    uint32_t prompt_tokens;
    uint32_t age_ms;
};
/* Our sequences on b now, at most max; returns how many, and sets
 * *complete when every request of ours there has one. */
size_t lg_backend_seqs_read(const struct lg_backend *b, uint64_t now_ns, struct lg_seq_info *out,
                            size_t max, bool *complete);
/* The word lg_backend_engine_model_ms() reads for a peer's sequence, as of now_ns. */
uint64_t lg_backend_seq_word(const struct lg_seq_info *s, uint64_t now_ns);
/* The fleets' health threads (serialised by eng_lock). */
void lg_backend_publish_peers(struct lg_backend *b, const struct lg_backend_peers *p);
void lg_backend_read_peers(const struct lg_backend *b, struct lg_backend_peers *out);
/* Whether peers' words published at t_ns are still good at now_ns. */
bool lg_backend_peers_fresh(uint64_t t_ns, uint64_t ttl_ns, uint64_t now_ns);
/* The engine's decode step there, ms: the recent gap between a stream's
 * tokens, else itl_ms (the mean gap of finished responses). */
double lg_backend_step_ms(const struct lg_backend *b, uint64_t now_ns, double itl_ms);
/* Peers' in-flight count there, 0 when no answer is fresh. */
uint32_t lg_backend_peer_inflight(const struct lg_backend *b, uint64_t now_ns);
/* The engine model's wait for a request with an empty prompt (ms), steps
 * of step_ms, or -1 when it cannot tell (lg_backend_view.engine_model_ms);
 * *joined (when not NULL): how many of ours there would be admitted with it
 * (lg_backend_view.engine_model_joined). */
double lg_backend_engine_model_ms(const struct lg_backend *b, uint64_t now_ns, double capacity,
                                  double step_ms, double prefill_ms_per_token, unsigned *joined);

/* ... and sets (each when not NULL) *longest_ms to the longest predicted
 * service among them, overdue or not: a long prefill may still hold the
 * engine; *late_ms to how long the most overdue has waited beyond its
 * predicted service (0 when none is). */
double lg_backend_work_ahead_ms(const struct lg_backend *b, uint64_t now_ns, double *longest_ms,
                                double *late_ms);

/*
 * Learning (any worker thread). A first token `ttft_ms` after dispatch for
 * a prompt of prompt_bytes teaches, under one lock (each sample blends the
 * route's `prior`; none without it):
 * - where the engine model predicted `model_ms` (>= 0) for an empty prompt
 *   with a free slot: the rest is the prompt's prefill, the model's ms per
 *   KiB (its cap reads the TTFT fit before this response's sample);
 * - where it predicted `pred_ms` (> 0) with this prompt's prefill (no prior
 *   needed): the replica's bias, which the view's engine_model_scale reads;
 * - unless wait_ms < 0 (it queued for a slot: that says how busy, not how
 *   fast), the TTFT fit, `wait_ms` of it predicted waiting (for a slot, and
 *   for the first tokens of the requests there before it).
 * Then, at the end of a 2xx response, the gap between tokens (itl_ms < 0:
 * unknown), the time the request held its slot and a success for the error
 * rate, with the TTFT sample when prior is not NULL (a whole response: one
 * lock instead of two).
 */
void lg_backend_note_first_token(struct lg_backend *b, const struct lg_est_prior *prior,
                                 uint64_t prompt_bytes, double ttft_ms, double wait_ms,
                                 double model_ms, double pred_ms);
void lg_backend_note_done(struct lg_backend *b, const struct lg_est_prior *prior,
                          uint64_t prompt_bytes, double ttft_ms, double wait_ms, double itl_ms,
                          double hold_ms);

/* Copies the published estimators / engine sample (any thread, no lock). */
void lg_backend_read_est(const struct lg_backend *b, struct lg_backend_est *out);
void lg_backend_read_engine(const struct lg_backend *b, struct lg_backend_engine *out);
void lg_backend_publish_engine(struct lg_backend *b, const struct lg_backend_engine *e);

/* The route's prior (any thread, no lock) and its update (health.c). */
void lg_route_read_prior(const struct lg_model_route *r, struct lg_est_prior *out);
void lg_route_publish_prior(struct lg_model_route *r, const struct lg_est_prior *p);

/* Whether e's capacity was confirmed by a queue lately (LG_ENGINE_CONFIRM_TTL_S). */
bool lg_backend_engine_confirmed(const struct lg_backend_engine *e, uint64_t now_ns);

/*
 * Fills a plugin view of b at now_ns: live counts, engine sample blended
 * with in-flight (scrape_interval_ns tells how old is stale), estimates read
 * against the route's prior. The view borrows b's name.
 */
void lg_backend_view_fill(const struct lg_backend *b, uint64_t now_ns,
                          const struct lg_est_prior *prior, uint64_t scrape_interval_ns,
                          uint64_t slow_start_ns, struct lg_backend_view *v);

#endif /* LG_BACKEND_H */
