/*
 * llmgate/plugin.h: the routing-policy plugin ABI. The only header a plugin
 * includes; it links against nothing of the gateway.
 *
 * A plugin is a shared object exporting one symbol, lg_plugin_describe(),
 * which returns a static descriptor. Built-in policies use the same
 * descriptor through a static table, so they follow the same rules.
 *
 * Versioning (Varnish VRT style): appending a member to a struct or an op to
 * an ops table bumps LG_PLUGIN_ABI_MINOR; removing, reordering or retyping
 * anything bumps LG_PLUGIN_ABI_MAJOR. Every struct starts with `size`
 * (sizeof as the producer built it): read a member only if `size` covers it.
 * The gateway refuses a plugin with another major, a newer minor, an ops
 * table too small for the ops it calls, a duplicate name, or a NULL
 * required op, and says which and why. The view holds what any policy
 * reads; one policy's estimator inputs do not belong there: the host's
 * engine model is a struct of its own, lent on request and versioned apart
 * (struct lg_engine_model_view), so that estimator changes leave this ABI
 * alone.
 *
 * Threading: ops run on the gateway's event-loop threads, several at once.
 * A plugin's state is shared by all of them: keep it read-mostly, or use
 * atomics. Ops must not block, do I/O, keep pointers to views after
 * returning, or free anything the host gave them.
 *
 * Routing runs as a pipeline, per request:
 *   candidates (model served, healthy, under max in-flight, not tried yet)
 *   -> each stage's filter() may drop candidates (never all of them)
 *   -> each stage's score() gives every remaining candidate a cost in
 *      milliseconds of expected time to first token (lower is better);
 *      the costs of all stages are summed with the stages' weights
 *   -> the candidate with the lowest total wins (ties: lowest in-flight,
 *      then round robin).
 * Expressing every score in expected milliseconds is what lets stages
 * compose: a prefix-affinity stage scores the prefill time a warm cache
 * saves, a load stage scores queueing, and their sum is comparable.
 */
#ifndef LLMGATE_PLUGIN_H
#define LLMGATE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LG_PLUGIN_ABI_MAJOR 2 /* bump on removal, reorder or retype */
#define LG_PLUGIN_ABI_MINOR 1 /* bump when appending members or ops */

/*
 * History:
 *   1.0-1.7  the view grew to 39 members, most of them the ttft policy's
 *        estimator outputs (1.3-1.7: the engine model, its calibration and
 *        errors, the measured terms): every estimator change was an ABI
 *        change, and every plugin saw members only one policy reads.
 *   2.0  the view keeps what any policy reads (counts and load, the
 *        engine's queue and KV cache, slots, observed TTFT and gaps between
 *        tokens, health and slow start); the engine model's and the
 *        measured terms' outputs moved to struct lg_engine_model_view,
 *        versioned on its own (LG_ENGINE_MODEL_VERSION) and lent only to a
 *        policy that asks for it (lg_policy_ops.wants, .model_version), so
 *        the estimator changes without touching this ABI. The flags
 *        LG_VIEW_F_STEP_GUESS and LG_VIEW_F_MODEL_MISSES became
 *        LG_MODEL_F_STEP_GUESS and LG_MODEL_F_MISSES. Options reach
 *        create() as a struct lg_options read with the host's typed getters
 *        (numbers with bounds, booleans, durations, sizes, enums, strings);
 *        the host refuses options no getter asked for. A 1.x plugin is
 *        refused (major differs): rebuild it against this header
 *        (plugins/README.md says what moved).
 *   2.1  the view's token work there and the replica's token rate
 *        (work_tokens, tokens_per_s: what the least_load policy weighs),
 *        and LG_VIEW_F_REPORTED (the engine's counts from its load report).
 */

enum lg_plugin_kind {
    LG_PLUGIN_POLICY = 1,
};

/* Log levels for lg_host_api.log (same order as the gateway's). */
enum lg_plugin_log_level {
    LG_PLUGIN_LOG_ERROR = 0,
    LG_PLUGIN_LOG_WARN,
    LG_PLUGIN_LOG_INFO,
    LG_PLUGIN_LOG_DEBUG,
};

/* The request being routed. Read-only, valid during the call only. */
struct lg_route_info {
    size_t size;
    const char *model;       /* as the client named it */
    const char *path;        /* request target, e.g. "/v1/chat/completions" */
    int stream;              /* 1 if the client asked for a stream */
    uint64_t prompt_bytes;   /* bytes of prompt text (tokens are about bytes/4) */
    uint32_t max_tokens;     /* requested output tokens; 0 = not given */
    uint64_t prefix_hash;    /* hash of the prompt's first routing.prefix_bytes (llmgate/hstream.h); 0 = none */
    uint64_t session_hash;   /* hash of the session header's value; 0 = none */
    uint32_t attempt;        /* 1 for the first try, 2 for the first retry... */
    uint64_t prefix_len;     /* prompt bytes prefix_hash covers (<= routing.prefix_bytes) */
};

struct lg_engine_model_view;

/*
 * One candidate backend and its live state. Read-only, valid during the call
 * only. Unknown values are negative (or UINT64_MAX for ages).
 */
struct lg_backend_view {
    size_t size;
    const char *name;
    uint32_t id;               /* stable for the backend's life (survives reloads) */
    uint32_t weight;           /* configured relative share, 1..1000 */
    double ramp;               /* slow start: 0..1, the share it may take now */
    uint32_t flags;            /* LG_VIEW_F_* */
    uint32_t inflight;         /* requests this gateway has open on it now */
    uint32_t max_inflight;     /* configured cap; 0 = none */

    /* engine-reported, from its /metrics; include other clients' load */
    int32_t engine_waiting;    /* queued requests; -1 = unknown */
    int32_t engine_running;    /* running requests; -1 = unknown */
    double engine_kv_usage;    /* 0..1; -1 = unknown */
    uint64_t engine_age_ns;    /* age of that sample; UINT64_MAX = never scraped */
    uint32_t inflight_at_scrape; /* this gateway's in-flight when it was taken */

    /* the host's blend of the above, so every policy counts load alike */
    double load;               /* requests on the engine now: inflight + foreign */
    double foreign;            /* other clients' requests there (scrape, faded with age) */
    double capacity;           /* requests it runs at once (engine slots); 0 = unknown */
    double hold_ms;            /* mean time a request holds a slot (TTFT + decode) */
    double slot_wait_ms;       /* when the engine is full: ms until a slot frees for one more
                                  request, from the predicted ends of this gateway's requests
                                  there (max_tokens gaps after their first token); 0 = not
                                  full, or unknown (use load, capacity and hold_ms). Full means
                                  load + 1 > capacity, also when capacity is a guess
                                  (LG_VIEW_F_CAP_GUESS): a policy that assumes more slots than
                                  that guess must leave it aside */

    /* this gateway's requests there */
    uint32_t pending;          /* still awaiting a first token */
    double pending_age_ms;     /* their mean age */
    double inflight_age_ms;    /* mean age of all of them */
    double work_ahead_ms;      /* first-token work still ahead there: the predicted service
                                  TTFT of each request awaiting a first token, minus its age,
                                  at least 0 (a long prompt being prefilled delays everyone
                                  behind) */

    /* observed, from responses (decaying estimates) */
    double ttft_fixed_ms;      /* TTFT with an empty prompt and no queue */
    double ttft_ms_per_kib;    /* added TTFT per KiB of uncached prompt */
    double itl_ms;             /* gap between tokens (leans back to the fleet's as its
                                  samples age) */
    double itl_own_ms;         /* the gap between tokens of this replica's own answers, the
                                  recent ones weighing more, however long since the last;
                                  -1 = none */
    double samples;            /* effective sample weight behind the estimates */
    double error_rate;         /* recent share of failed attempts, 0..1 */

    /* the host's engine model there, for a policy that asked for it
     * (LG_POLICY_WANTS_MODEL with this gateway's LG_ENGINE_MODEL_VERSION);
     * NULL for every other policy */
    const struct lg_engine_model_view *model;

    /* token work (2.1): no model of slots or steps */
    double work_tokens;        /* tokens still to process there: this gateway's streamed
                                  requests with max_tokens one by one (a prompt not yet
                                  prefilled, about bytes / 4, and the tokens still to come),
                                  every other request there (other clients', ours it cannot
                                  follow) at the mean of those, or of hold_ms / itl_ms */
    double tokens_per_s;       /* tokens it generates a second with one more request there:
                                  min(load + 1, capacity) streams at its gap between tokens
                                  (itl_ms); the capacity unknown, load + 1 */
};

#define LG_VIEW_F_HALF_OPEN (1u << 0) /* ejected, back-off over: this would be its probe */
#define LG_VIEW_F_RAMPING   (1u << 1) /* in slow start (ramp < 1) */
#define LG_VIEW_F_STALE     (1u << 2) /* engine_* are too old to count (or never scraped) */
#define LG_VIEW_F_REPORTED  (1u << 4) /* engine_* come from the engine's load report (a
                                          response header, GET /load, /v1/loads) newer than
                                          its last /metrics scrape; engine_age_ns is its age */
#define LG_VIEW_F_CAP_GUESS (1u << 3) /* capacity is inferred (not seen full lately with a
                                          request of this gateway held in its queue), not
                                          measured */

/*
 * The host's estimators of one candidate's next first token, lent to a
 * policy that asks for them: the engine model (the replica's continuous
 * batching run forward over this gateway's requests there) and the
 * measured terms (the replica's own first tokens lately by load). They
 * are outputs of the host's estimator and change with it: this struct has
 * its own version, and a policy built against another version gets no
 * model (view->model NULL) rather than members it would misread. Read-only,
 * valid during the call only, like the view. Members the host cannot tell
 * are -1 where they say so.
 */
#define LG_ENGINE_MODEL_VERSION 1

struct lg_engine_model_view {
    size_t size;
    uint32_t version;          /* LG_ENGINE_MODEL_VERSION as the host built it */
    uint32_t flags;            /* LG_MODEL_F_* */

    /* the engine model */
    double wait_ms;            /* the engine's steps run forward over this gateway's requests
                                  there (their prompts still to prefill, their tokens still
                                  to come, `slots` slots, steps at the replica's recent
                                  pace): ms until one more request would get its first token,
                                  its own prefill left out (add prefill_ms_per_kib per KiB
                                  of its prompt); -1 = unknown: others' load there, or a
                                  request of ours it cannot follow (not streamed, no
                                  max_tokens) */
    double slots;              /* the capacity it ran with: the view's, or where that is a
                                  guess (LG_VIEW_F_CAP_GUESS) at least 16; a policy that
                                  assumes other slots must leave the model aside */
    double joined;             /* requests of ours there, awaiting a first token, that it
                                  admits into the same step as one more (its prefill holds up
                                  theirs); 0 where wait_ms is -1 */
    double scale;              /* its first tokens lately over its predictions for them (a
                                  decaying geometric mean at this load; 1 = none, or
                                  unbiased): what it misses there */
    double err;                /* how far its predictions there have been off lately,
                                  calibrated by scale: the rms of log(first token /
                                  prediction) about its mean; 0 = none yet */
    double step_ms;            /* the engine's step now: the recent gap between a stream's
                                  tokens there (the view's itl_ms when no stream is running:
                                  LG_MODEL_F_STEP_GUESS) */
    double step_ms_per_seq;    /* what one more sequence adds to the step there (learnt from
                                  the streams' pace at the batch sizes seen; 0 = none seen) */
    double prefill_ms_per_kib; /* what a KiB of prompt adds to the step that admits it
                                  (learnt from first tokens beyond the model's wait; before
                                  any, the TTFT fit's slope without its peak) */
    double prefill_fixed_ms;   /* what a step that prefills costs beyond its tokens (learnt
                                  with prefill_ms_per_kib); wait_ms holds it for the new
                                  request's own step */

    /* the measured terms */
    double measured_ms;        /* the first tokens this replica gave lately to requests sent
                                  into about `load` requests there, less their prompts' share
                                  (a curve over the loads seen, continued above them): ms
                                  until one more request would get its first token, its
                                  prompt's share left out (add measured_ms_per_kib per KiB);
                                  no model of slots or steps; -1 = none seen lately */
    double measured_ms_per_kib; /* what a KiB of prompt adds to its first token there: the
                                   slope of its TTFT against prompt size (ttft_ms_per_kib
                                   without its peak), whose fixed part the curve holds */
    double measured_err;       /* how far measured_ms has been off there (as err, uncalibrated) */

    /* chunked prefill (appended: read them only where size covers them) */
    double prefill_chunk;      /* tokens a step there carries at most, one for each sequence
                                  decoding first, the prompts the rest (the backend's
                                  prefill_chunk); 0 = a prompt is prefilled in one step */
    double decoding;           /* sequences generating there now (past their first token, at
                                  most its slots): each takes a token of every chunk */

    /* by class (appended; read them only where size covers them and
     * LG_MODEL_F_BY_CLASS is set): the backend's engine serves by priority
     * class and gives a higher class a lower one's slot (the backend's
     * engine_priority "preempt"), so only this gateway's requests there of
     * the routed request's class and above delay its first token; the
     * view's counts hold every class (the batch its steps run). The
     * engine model does not follow preemption: wait_ms is -1 there */
    double class_inflight;     /* ours there of its class and above */
    double class_pending;      /* of them, awaiting a first token */
    double class_pending_age_ms; /* their mean age */
    double class_work_ahead_ms;  /* their first-token work still ahead (as work_ahead_ms) */
    double class_slot_wait_ms;   /* where they fill its slots: ms until one of them ends
                                    (as slot_wait_ms); 0 = not full, or unknown */
    double class_lower_prefill_ms; /* (appended) the longest of what is left of the
                                      predicted first-token work of ours there of lower
                                      classes, those not past it: a prefill the engine may
                                      be running, which it ends before it serves the
                                      request */
};

#define LG_MODEL_F_STEP_GUESS (1u << 0) /* step_ms is the view's itl_ms: no stream there moved
                                            lately */
#define LG_MODEL_F_BY_CLASS   (1u << 2) /* the class_* members hold (engine_priority
                                            "preempt") */
#define LG_MODEL_F_MISSES     (1u << 1) /* the engine model misses there lately: its errors,
                                            calibrated, spread wider than the measured terms'
                                            (err against measured_err); a policy leans on
                                            measured_ms instead */

/*
 * A policy's options (its "options" object in the config), read in create()
 * through the host's getters below; opaque, valid during create() only.
 */
struct lg_options;

/*
 * Services the host lends to plugins.
 *
 * Option getters: each reads the option `name` into *out, or def when the
 * options do not give it, and returns 0. A value of the wrong type or out
 * of bounds writes "/NAME: why" into create()'s err and returns -1 (and the
 * host refuses the options whatever create() returns), so a plugin may ask
 * for every option, then check once. Once create() returns, any option no
 * getter asked for is refused as unknown (keys starting with '#' are
 * comments). The gateway reports every such error at the option's
 * FILE:LINE:COL in the config. Numbers are JSON numbers; booleans true or
 * false (or 1 and 0); durations a string with a unit ("250ms", "1.5s",
 * "2m", "1h") or 0, in ms; sizes bytes as an integer or a string with a
 * unit ("16KiB", "8MiB", "1GB"); an enum one of `names` (a NULL-terminated
 * list, matched without case), *out its index; a string borrowed from the
 * options (copy it to keep it).
 */
struct lg_host_api {
    size_t size;
    void (*log)(int level, const char *plugin, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    uint64_t (*now_ns)(void); /* monotonic clock */
    uint64_t (*random)(void); /* fast per-thread pseudo-random numbers */

    int (*opt_number)(struct lg_options *opts, const char *name, double def, double min,
                      double max, double *out);
    int (*opt_bool)(struct lg_options *opts, const char *name, int def, int *out);
    int (*opt_duration_ms)(struct lg_options *opts, const char *name, uint64_t def,
                           uint64_t min, uint64_t max, uint64_t *out);
    int (*opt_size)(struct lg_options *opts, const char *name, uint64_t def, uint64_t min,
                    uint64_t max, uint64_t *out);
    int (*opt_enum)(struct lg_options *opts, const char *name, const char *const *names,
                    int def, int *out);
    int (*opt_string)(struct lg_options *opts, const char *name, const char *def,
                      const char **out);
};

/* Optional inputs a policy asks the host for (lg_policy_ops.wants). */
#define LG_POLICY_WANTS_MODEL (1u << 0) /* lg_backend_view.model, at .model_version */

struct lg_policy_ops {
    size_t size;
    uint32_t wants;         /* LG_POLICY_WANTS_* */
    uint32_t model_version; /* with LG_POLICY_WANTS_MODEL: the LG_ENGINE_MODEL_VERSION it
                               was built against; the host lends the model only when that
                               is its own */

    /*
     * Creates the policy's state from its options (read with the host's
     * getters). On error, returns non-zero; a getter has written the
     * message to err, or the policy writes one that starts with a JSON
     * pointer relative to the options object ("/vnodes: must be at least
     * 1"). Required.
     */
    int (*create)(const struct lg_host_api *host, struct lg_options *opts, void **state,
                  char *err, size_t errlen);
    void (*destroy)(void *state); /* required */

    /*
     * Optional: clears keep[i] for candidates this stage rules out. The host
     * ignores a filter that would remove every candidate.
     */
    void (*filter)(void *state, const struct lg_route_info *req,
                   const struct lg_backend_view *const *cands, size_t n, unsigned char *keep);

    /*
     * Writes cost[i] >= 0, in expected milliseconds (lower is better), for
     * each of the n candidates. May write a short human-readable reason for
     * the decision it favours into `why` (a static string is fine). Required.
     */
    void (*score)(void *state, const struct lg_route_info *req,
                  const struct lg_backend_view *const *cands, size_t n, double *cost,
                  const char **why);

    /*
     * Optional: told how an attempt ended. status 0 = no response (connect
     * failure, reset, timeout); ttft_ns/total_ns 0 when not reached.
     */
    void (*on_result)(void *state, const struct lg_route_info *req,
                      const struct lg_backend_view *backend, int status, uint64_t ttft_ns,
                      uint64_t total_ns);
};

struct lg_plugin_desc {
    uint32_t abi_major;
    uint32_t abi_minor;
    enum lg_plugin_kind kind;
    const char *name;    /* what configs refer to; unique per process */
    const char *version;
    const void *ops;     /* struct lg_policy_ops * for LG_PLUGIN_POLICY */
};

/* The one symbol a plugin exports. */
const struct lg_plugin_desc *lg_plugin_describe(void);

#define LG_PLUGIN_EXPORT __attribute__((visibility("default")))

#ifdef __cplusplus
}
#endif

#endif /* LLMGATE_PLUGIN_H */
