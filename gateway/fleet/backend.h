/*
 * backend.h: replicas and their live state; a model's backends (the fleet's
 * index, fleet.h).
 *
 * A struct lg_backend is shared by every worker thread. Its live counters are
 * atomics updated with relaxed ordering (they are statistics and routing
 * hints, not synchronisation); the estimates that need several fields updated
 * together sit behind `lock`. The per-worker pool slots hang off the
 * backend but each is touched only by its own worker.
 */
#ifndef LG_BACKEND_H
#define LG_BACKEND_H

#include <pthread.h>
#include <sys/queue.h>

#include "base/config.h"
#include "base/lg_core.h"
#include "base/stats.h"
#include "fleet/estimate.h"
#include "fleet/loadreport.h"

struct lg_upconn;
struct lg_health;
struct ssl_ctx_st;
struct lg_backend_conf_old;

TAILQ_HEAD(lg_upconn_tailq, lg_upconn);

/*
 * A worker's idle connections to one backend: the slot the backend keeps
 * for each worker. serve/upstream.c fills and empties it, on that worker's
 * thread only; the workers have emptied theirs before the backend's last
 * reference goes.
 */
struct lg_backend_pool {
    struct lg_upconn_tailq idle; /* most recently used first */
    uint32_t nidle;
    uint32_t idle_low; /* fewest idle since the last purge: these were not needed */
};

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
    struct lg_est_ttft ttft;       /* service TTFT fit and peak */
    struct lg_est_mean itl;        /* inter-token gap, ms */
    struct lg_est_mean hold;       /* time a request holds an engine slot, ms */
    struct lg_est_mean err;        /* failed attempts: 1, others 0 */
    struct lg_est_line prefill;    /* the engine model's prefill: ms a step, ms per KiB */
    struct lg_est_err model_err;   /* first tokens against the engine model's predictions */
    struct lg_est_bias model_bias; /* ... by the load they were sent into */
    struct lg_est_err model_used;  /* ... against them as used (calibrated by load) */
    struct lg_est_err meas_err;    /* ... against the measured terms' (the curve below) */
    struct lg_est_curve curve;     /* first tokens less their prefill, by the load sent into */
    struct lg_est_late late;       /* first tokens later than predicted as used, lately */
    double measured;               /* 1 while the engine model misses here (its errors spread
                                     wider than the measured terms'), else 0 */
};

/* The engine model misses on a replica (lg_backend_est.measured) once both
 * estimators have LG_EST_MISS_SAMPLES samples there and the model's errors
 * as used (calibrated by load) are more than LG_EST_MISS_RATIO times the
 * measured terms' plus LG_EST_MISS_MARGIN (rms of the log errors); it is
 * trusted again when they are less than the measured terms' (a gap between
 * the two thresholds, so a replica does not flip at every sample). */
#define LG_EST_MISS_SAMPLES    8.0
#define LG_EST_MISS_RATIO      1.25
#define LG_EST_MISS_MARGIN     0.05
#define LG_EST_ERR_HALF_LIFE_S (2 * LG_EST_MEAN_HALF_LIFE_S)

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
    double capacity_confirmed;   /* 1 once seen with a queue (exact), else 0 */
    uint64_t confirmed_t_ns;     /* last queue that confirmed it */
    int32_t run_max;             /* the most seen running at once (recently) */
    uint64_t run_max_t_ns;       /* last scrape that saw it run that many (or one less) */
    double slots_declared;       /* the slots the engine says it has (llama.cpp's GET
                                     /props total_slots, SGLang's max_running_requests);
                                     0 = not said */
    int32_t others;              /* others' requests finished there lately: 1; none
                                     (its finished counter against ours): 0; -1 unknown */
    double gauge_lag_ms;         /* how long its gauges hold a request of ours after its
                                     end, measured while alone there; 0 = not seen */
};
/* The most seen running is forgotten after this long without running that many. */
#define LG_ENGINE_RUN_MAX_TTL_S 60
/* KV-cache usage at which an engine stops admitting for lack of cache. */
#define LG_ENGINE_KV_FULL 0.9

/*
 * The engine's latest load report (loadreport.h): per response (vLLM's
 * endpoint-load-metrics header, any worker) or polled (GET /load,
 * /v1/loads, the health thread). Newer than the last scrape, it stands in
 * for the scrape's counts (lg_load_report_fold).
 */
enum lg_load_source {
    LG_LOAD_SRC_SCRAPE = 0, /* the /metrics scrape (no report, or an older one) */
    LG_LOAD_SRC_HEADER,     /* an endpoint-load-metrics response header */
    LG_LOAD_SRC_POLL,       /* GET load_path */
};
struct lg_backend_report {
    struct lg_load_report r;
    uint64_t t_ns;        /* when it arrived (monotonic); 0 = never */
    uint32_t inflight_at; /* this gateway's in-flight there then */
    int32_t source;       /* enum lg_load_source */
};

/*
 * Peer gateways' requests on a backend (peers.c fetches them, the fleet's
 * health thread publishes them): their in-flight count and their sequences
 * as lg_backend_seq_word() words, so the engine model sees the whole batch
 * and line when several gateways share a fleet. `complete`: each peer knew
 * every one of its requests' lengths there. Valid until t_ns + ttl_ns.
 */
#define LG_BACKEND_PEER_SEQS 256 /* peers' sequences per backend, all peers together */
struct lg_backend_peers {
    uint64_t t_ns; /* oldest answer merged; 0 = none */
    uint64_t ttl_ns;
    uint32_t inflight;
    uint32_t n; /* words used */
    uint32_t complete;
    uint32_t gateways; /* peers merged */
    uint64_t words[LG_BACKEND_PEER_SEQS];
};

/* Response classes counted per backend: 1xx..5xx, and "no response". */
#define LG_BACKEND_NCLASS       6
#define LG_BACKEND_DUE_SLOTS    64  /* requests awaiting a first token counted one by one */
#define LG_BACKEND_END_SLOTS    128 /* requests whose end is predicted, counted one by one */
#define LG_BACKEND_PACE_BATCHES 16  /* batch sizes the pace is kept for */
#define LG_BACKEND_GONE_SLOTS   64  /* latest ends of requests of ours kept (scrapes) */
_Static_assert(LG_BACKEND_DUE_SLOTS % 64 == 0 && LG_BACKEND_END_SLOTS % 64 == 0,
               "slots are tracked 64 to a word");

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
    const char *name; /* its settings' name: the same in every one (reuse is by name) */
    /* atomic (read it with lg_backend_conf()): the settings in force, a deep
     * copy that outlives the config it came from. A reload that keeps the
     * backend puts its new settings in force (lg_backend_reconf) */
    struct lg_backend_conf *conf;
    struct lg_backend_conf_old *old_confs; /* owned: settings replaced, freed with the
                                              backend (a reader may still hold one) */
    uint32_t index;              /* position in the fleet that created it */
    uint32_t id;                 /* unique for the process: survives reloads */
    int refcnt;                  /* atomic: fleets and in-flight requests */

    uint32_t inflight;                 /* atomic: requests dispatched and not finished */
    uint32_t inflight_cls[LG_NCLASSES]; /* atomic: of them, by class, where the engine preempts
                                          for priority (lg_backend_class_add) */
    uint64_t ages[2];                  /* atomic: LG_BACKEND_AGES_* request counts and ages,
                                      packed (see backend_inflight.c) */
    int health;                        /* atomic enum lg_backend_health (UP/DOWN: health.c) */
    int retired;                       /* atomic: no fleet in force lists it (reload.c); its
                                      connections close once their request ends */
    uint64_t retry_after_until_ns;     /* atomic: honour Retry-After until then */
    uint64_t eject_until_ns;           /* atomic: passive ejection; 0 = not ejected; once
                                       past, the backend is half-open */
    uint32_t probe_busy;               /* atomic: the half-open probe is in flight */
    uint32_t eject_refused;            /* atomic: the ejection in force began with a
                                      refused connection (lg_backend_note_listening()) */
    uint64_t up_since_ns;              /* atomic: slow start began then; 0 = full share */
    uint64_t ejections_total;          /* atomic: passive ejections since it joined (metrics) */
    uint64_t warn_ratelimit_ns;        /* for lg_log_ratelimit() */
    struct lg_backend_stats stats;     /* atomic fields */
    struct lg_backend_metrics metrics; /* atomic: histograms and tokens (serve/record.c) */

    uint32_t est_seq;              /* atomic: odd while est_pub is being written */
    struct lg_backend_est est_pub; /* published copy, read with lg_backend_read_est() */
    uint32_t eng_seq;              /* atomic: odd while eng_pub is being written */
    struct lg_backend_engine eng_pub;

    pthread_mutex_t lock;          /* guards what follows, and writes of est_pub */
    struct lg_backend_est est;     /* the writers' copy */
    uint32_t consecutive_failures; /* written under lock, read without (atomic) */
    uint32_t ejections;            /* back-off doubles with each; reset after eject_max up */
    uint64_t last_eject_end_ns;
    pthread_mutex_t eng_lock; /* serialises writers of eng_pub (scrapers) and peers_pub */

    struct lg_backend_pool *pools; /* [nworkers], each touched by its worker only */
    unsigned npools;
    struct ssl_ctx_st *tls_ctx; /* owned (tls.c): https client context, set once (atomic) */

    /* atomic: when each request awaiting a first token here should have it,
     * 0 = free (lg_backend_due_add) */
    uint64_t due[LG_BACKEND_DUE_SLOTS];
    /* atomic: when each request of ours there should end (and free its
     * engine slot), 0 = free (lg_backend_end_add) */
    uint64_t ends[LG_BACKEND_END_SLOTS];
    /* atomic: what the engine still has to do for each streamed request of
     * ours there, 0 = free (lg_backend_seq_add) */
    uint64_t seqs[LG_BACKEND_END_SLOTS];
    /* atomic: which slots of due, ends and seqs are taken, a bit each: a
     * slot is claimed by setting its bit (then its word is written) and
     * freed by clearing its word, then its bit; the scans walk the bits
     * set, not every slot (backend_inflight.c) */
    uint64_t due_used[LG_BACKEND_DUE_SLOTS / 64];
    uint64_t ends_used[LG_BACKEND_END_SLOTS / 64];
    uint64_t seqs_used[LG_BACKEND_END_SLOTS / 64];
    /* atomic: bumped (release) after each change of what a view reads
     * (backend_view.c) that has no sequence counter of its own: the in-flight
     * count, ages, due, ends, seqs, token_t_ns, the pace. A view cached under
     * one value is the view of that state (lg_backend_view_get) */
    uint64_t view_ver;
    uint64_t pace;      /* atomic: a double, the recent gap between a stream's tokens (ms) */
    uint64_t pace_t_ns; /* atomic: when it was last moved */
    /* atomic: the pace by the batch it was timed at (our streams there then,
     * 1..LG_BACKEND_PACE_BATCHES), doubles, and when each was last moved */
    uint64_t pace_batch[LG_BACKEND_PACE_BATCHES];
    uint64_t pace_batch_t_ns[LG_BACKEND_PACE_BATCHES];
    uint64_t token_t_ns;               /* atomic: when a stream of ours there last got a token */
    /* atomic: when the latest requests of ours there ended, a ring written
     * at gone_next (lg_backend_inflight_end): an engine's count can hold
     * them a while after (lg_backend_gone_since) */
    uint64_t gone[LG_BACKEND_GONE_SLOTS];
    uint32_t gone_next;
    uint32_t rep_seq;                  /* atomic: odd while rep_pub is being written */
    struct lg_backend_report rep_pub;  /* the latest load report (writers: eng_lock) */
    uint32_t peers_seq;                /* atomic: odd while peers_pub is being written */
    struct lg_backend_peers peers_pub; /* peer gateways' requests there (health.c) */
};

/* One model name and the backends serving it (borrowed from the fleet). */
struct lg_model_route {
    const char *model;            /* borrowed from the fleet's config */
    struct lg_backend **backends; /* owned array of borrowed pointers */
    size_t n;
    uint32_t prior_seq;        /* atomic: odd while prior is being written */
    struct lg_est_prior prior; /* fleet medians for the model (health.c writes it) */
};

/*
 * A new backend for bc (deep-copied), with a pool slot for each of nworkers
 * workers and one reference (the caller's).
 */
struct lg_backend *lg_backend_new(const struct lg_backend_conf *bc, unsigned nworkers);
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

/* The settings in force (any thread): valid while the caller holds b. */
static inline const struct lg_backend_conf *
lg_backend_conf(const struct lg_backend *b)
{
    return __atomic_load_n(&b->conf, __ATOMIC_ACQUIRE);
}

/*
 * A reload keeps b (same name and URL, lg_fleet_new) and puts the new
 * fleet in force (control thread): b takes bc's settings (deep-copied),
 * every one of them, while its live state (in-flight requests, estimates,
 * health, counters, pools) carries over. Nothing happens when they are the
 * same. The settings replaced stay allocated until b goes: a worker may be
 * reading them.
 */
void lg_backend_reconf(struct lg_backend *b, const struct lg_backend_conf *bc);
/* Whether a and b connect the same way over TLS (what a kept backend's
 * client context was made from, set once: a change makes a new backend). */
bool lg_backend_conf_same_tls(const struct lg_backend_conf *a, const struct lg_backend_conf *b);

/* Counter helpers (relaxed atomics). */
#define LG_STAT_ADD(b, field, n) __atomic_fetch_add(&(b)->stats.field, (n), __ATOMIC_RELAXED)
#define LG_STAT_GET(b, field)    __atomic_load_n(&(b)->stats.field, __ATOMIC_RELAXED)

/* After a change a view reads (see view_ver). */
static inline void
lg_backend_touch(struct lg_backend *b)
{
    __atomic_fetch_add(&b->view_ver, 1, __ATOMIC_RELEASE);
}

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
 * Something answers HTTP on b again (an engine scrape or an active check got
 * a response). An ejection that began with a refused connection (nothing
 * listened: an engine that crashed or was stopped) ends its back-off now: b
 * is half-open, its next request the probe, which closes the ejection and
 * starts slow start, or ejects it again. An engine restarted on its port is
 * back within a scrape, not when a back-off that doubled with each refused
 * probe runs out. An ejection for failing answers keeps its back-off (such
 * an engine answers its metrics all along).
 */
void lg_backend_note_listening(struct lg_backend *b, uint64_t now_ns);

/*
 * A connection to b was reset (RST) before or during a response: its engine
 * process most likely died (a crash resets every connection it held, and
 * then refuses new ones). b is held off for LG_BACKEND_RESET_HOLD_MS, as if
 * it had said Retry-After, so no new request pays a connect to it; the
 * first one after (one connect) is refused and ejects it, or finds it well.
 */
#define LG_BACKEND_RESET_HOLD_MS 1000
void lg_backend_note_reset(struct lg_backend *b, uint64_t now_ns);

/* The fleets' health threads (serialised by eng_lock). */
void lg_backend_publish_peers(struct lg_backend *b, const struct lg_backend_peers *p);
void lg_backend_read_peers(const struct lg_backend *b, struct lg_backend_peers *out);
/* Whether peers' words published at t_ns are still good at now_ns. */
bool lg_backend_peers_fresh(uint64_t t_ns, uint64_t ttl_ns, uint64_t now_ns);
/* Peers' in-flight count there, 0 when no answer is fresh. */
uint32_t lg_backend_peer_inflight(const struct lg_backend *b, uint64_t now_ns);

/*
 * Learning (any worker thread). A first token `ttft_ms` after dispatch for
 * a prompt of prompt_bytes teaches, under one lock (each sample blends the
 * route's `prior`; none without it):
 * - where the engine model predicted `model_ms` (>= 0) for an empty prompt
 *   with a free slot, its step's fixed prefill left out: the rest is the
 *   prompt's prefill, the model's line (a fixed part, ms per KiB; its cap
 *   reads the TTFT fit before this response's sample);
 * - where it predicted `pred_ms` (> 0) with this prompt's prefill (no prior
 *   needed): the model's errors there, whose bias the engine model
 *   view's scale reads; where the measured terms predicted
 *   meas_pred_ms, theirs; then whether the model misses there
 *   (lg_backend_est.measured);
 * - where the load it was sent into is known: the measured terms' curve,
 *   its first token less prefill_ms;
 * - unless wait_ms < 0 (it queued for a slot: that says how busy, not how
 *   fast), the TTFT fit, `wait_ms` of it predicted waiting (for a slot, and
 *   for the first tokens of the requests there before it).
 * Then, at the end of a 2xx response, the gap between tokens (itl_ms < 0:
 * unknown), the time the request held its slot and a success for the error
 * rate, with the TTFT sample when prior is not NULL (a whole response: one
 * lock instead of two), unless streams there were timed lately
 * (LG_EST_WHOLE_STREAMS: then their first tokens teach the fit).
 */
struct lg_backend_first {
    uint64_t prompt_bytes;
    double ttft_ms;      /* after dispatch */
    double wait_ms;      /* predicted waiting; < 0: it queued for a slot */
    double model_ms;     /* the engine model's wait with a slot free (>= 0), or -1 */
    double pred_ms;      /* the engine model's prediction with its prefill (> 0), or -1 */
    double model_scale;  /* the calibration the pick applied to it (> 0) */
    double meas_pred_ms; /* the measured terms' prediction with its prefill (> 0), or -1 */
    double load;         /* requests there when it was sent (ours, others'); < 0 unknown */
    double prefill_ms;   /* its prompt's share of the measured terms' prediction */
};
void lg_backend_note_first_token(struct lg_backend *b, const struct lg_est_prior *prior,
                                 const struct lg_backend_first *f);
void lg_backend_note_done(struct lg_backend *b, const struct lg_est_prior *prior,
                          uint64_t prompt_bytes, double ttft_ms, double wait_ms, double itl_ms,
                          double hold_ms);

/* Copies the published estimators / engine sample (any thread, no lock). */
void lg_backend_read_est(const struct lg_backend *b, struct lg_backend_est *out);
void lg_backend_read_engine(const struct lg_backend *b, struct lg_backend_engine *out);
void lg_backend_publish_engine(struct lg_backend *b, const struct lg_backend_engine *e);

/* The latest load report: read (any thread, no lock), and published (any
 * thread: workers for headers, the health thread for polls; a report older
 * than the one published is dropped). */
void lg_backend_read_report(const struct lg_backend *b, struct lg_backend_report *out);
void lg_backend_publish_report(struct lg_backend *b, const struct lg_backend_report *r);

/*
 * The engine state routing reads: the scrape e, or where the report r is
 * newer, e with the report's counts and time (source says which): waiting
 * and running where said; a total alone (vLLM's /load) split at the slots
 * known (else at the scrape's waiting); waiting alone (vLLM's header) with
 * the scrape's running moved by our requests dispatched or ended since
 * (inflight_now: ours at the report), at most the slots known. Returns
 * the source used.
 */
enum lg_load_source lg_load_report_fold(struct lg_backend_engine *e,
                                        const struct lg_backend_report *r);

/* The route's prior (any thread, no lock) and its update (health.c). */
void lg_route_read_prior(const struct lg_model_route *r, struct lg_est_prior *out);
void lg_route_publish_prior(struct lg_model_route *r, const struct lg_est_prior *p);

/*
 * Whether e's slot count is known: said by the engine, or confirmed by a
 * queue of ours there. A confirmed count stays known: it only grows with a
 * larger running count after (lg_health_fold_sample), and a new confirming
 * queue sets it again; it never falls back to a guess (which was at least
 * LG_EST_ASSUMED_SLOTS: a 4-slot replica taken for 16 between queues got
 * requests that waited for a slot, bench/routing/NOTES.md 46). *slots (when
 * not NULL) is the count.
 */
bool lg_backend_engine_slots(const struct lg_backend_engine *e, double *slots);

/*
 * The replica's recent gap between a stream's tokens (the lower quartile of
 * a stream's last 8 gaps, measured by the relay), which the engine model
 * steps by: lg_backend_note_pace() moves it (any worker; batch: the
 * sequences it was timed at, lg_backend_started()), and
 * lg_backend_pace_ms() reads it, false when no stream moved it lately (*ms
 * is then fallback_ms). lg_backend_step_ms(): the engine's decode step
 * there, ms: that pace, else itl_ms (the mean gap of finished responses).
 */
void lg_backend_note_pace(struct lg_backend *b, uint64_t now_ns, double gap_ms, uint32_t batch);
bool lg_backend_pace_ms(const struct lg_backend *b, uint64_t now_ns, double fallback_ms,
                        double *ms);
double lg_backend_step_ms(const struct lg_backend *b, uint64_t now_ns, double itl_ms);
/*
 * What one more sequence adds to the step there (ms): the slope of the
 * pace against the batch it was timed at (our streams there, started),
 * over the batch sizes timed lately (LG_BACKEND_PACE_FRESH_S); 0 until two
 * sizes at least two apart are. llmsim's default adds 0.25 ms to a 10 ms
 * step; llama.cpp on a CPU about a whole one-sequence step.
 */
#define LG_BACKEND_PACE_FRESH_S 10
double lg_backend_step_per_seq(const struct lg_backend *b, uint64_t now_ns);

/*
 * The engine model's prefill, ms per KiB of prompt, and (*fixed_ms, when
 * not NULL) the fixed part of a step that prefills: the replica's own line
 * once it has samples, before that no fixed part and the fleet's prefill
 * per ms of decode step (the prior) times its step_ms, else the TTFT fit's
 * slope.
 */
double lg_backend_prefill(const struct lg_backend_est *est, uint64_t now_ns,
                          const struct lg_est_value *fit, const struct lg_est_prior *prior,
                          double step_ms, double *fixed_ms);

#endif /* LG_BACKEND_H */
