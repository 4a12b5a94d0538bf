/*
 * router.h: picks a backend for a request from live per-backend state.
 *
 * The router is the seam between the proxy and routing policies: the proxy
 * describes the request (struct lg_route_req); the router filters the
 * model's backends down to candidates (available, under max in-flight, not
 * tried already, slow start), builds a read-only view of each, and runs the
 * configured pipeline of policies (include/llmgate/plugin.h): every stage's
 * filter, then every stage's costs summed with the stages' weights, then the
 * lowest total. It explains the decision for the access log.
 */
#ifndef LG_ROUTER_H
#define LG_ROUTER_H

#include "base/lg_core.h"

struct lg_backend;
struct lg_config;
struct lg_fleet;
struct lg_model_route;
struct lg_tried;

struct lg_route_req {
    const char *model;
    const char *path;
    bool stream;
    uint64_t prompt_bytes; /* bytes of prompt text */
    uint32_t max_tokens;   /* 0 = not given */
    uint64_t prefix_hash;  /* hash of the first prefix_bytes of the prompt; 0 = none */
    uint64_t session_hash; /* hash of the session header's value; 0 = none */
    uint8_t cls;           /* its priority class (enum lg_prio_class; 0, the lowest, counts
                              every request there ahead of it) */
};

/* Bytes of the access log's "candidates" array (longer ones end in {"more":N}). */
#define LG_ROUTE_EXPLAIN_BYTES 2560
/* Stages of a pipeline. */
#define LG_ROUTER_MAX_STAGES 8

struct lg_route_result {
    struct lg_backend *backend; /* borrowed from the fleet */
    const char *policy;         /* owned by the router: "ttft", "prefix_affinity+ttft" */
    const char *reason;         /* static string */
    double wait_ms;             /* queueing predicted for the winner (for learning) */
    double ahead_ms;            /* first-token work of the requests there before it: the
                                   policy adds it to the learnt service, so the samples
                                   that teach that service leave it out */
    double service_ms;          /* its predicted service TTFT for this request */
    double itl_ms;              /* its gap between tokens (to predict the request's end) */
    double model_ms;            /* the engine model's wait there with a slot free, or -1:
                                   its first token less this teaches the prefill */
    double model_pred_ms;       /* the engine model's prediction there (its wait and this
                                   prompt's prefill), or -1 */
    double model_scale;         /* the calibration of the engine model there (by load) */
    double meas_pred_ms;        /* the measured terms' prediction there, or -1 */
    double prefill_ms;          /* this prompt's share of it (which their curve leaves out) */
    double load;                /* requests there when it was picked (ours and others') */
    bool queued;                /* the winner was (about) full: its TTFT measures
                                   its queue more than its speed */
    uint32_t retry_after_ms;    /* on LG_EBUSY: when a backend may be back */
    bool full;                  /* on LG_EBUSY: the backends left are up, at max_inflight */
    bool probe;                 /* the winner is half-open: this is its probe */
    char *explain;              /* owned: JSON array of candidate score inputs, NULL when
                                   none; freed by the next pick and lg_route_result_clear() */
    size_t explain_len;         /* its bytes (without the NUL) */
    bool explain_kept;          /* explain is one of the thread's reused buffers
                                   (LG_ROUTE_EXPLAIN_BYTES): clearing gives it back */
    size_t explain_max;         /* set by the caller: bytes the explanation may take; 0: the
                                   access log's LG_ROUTE_EXPLAIN_BYTES (the admin API's dry
                                   runs ask for every candidate of a big fleet) */
    bool no_explain;            /* set by the caller: nobody reads an explanation (the access
                                   log is off), so none is built; explain stays NULL */
};

/* Frees what a pick left in res (its explanation: the access log's size goes back to the
 * calling thread's few kept for the next picks); res stays usable. */
void lg_route_result_clear(struct lg_route_result *res);

struct lg_router;

/*
 * Creates the router for conf: loads routing.plugins, builds the pipeline
 * (routing.pipeline, or routing.policy alone, default "ttft"; a
 * session_affinity stage goes first when routing.session_header is set and
 * the pipeline has none) and creates each stage with its options. Errors
 * are logged with the JSON pointer of the offending setting.
 */
int lg_router_new(const struct lg_config *conf, struct lg_router **out);
void lg_router_free(struct lg_router *r);

/*
 * Builds conf's fleet with its router (lg_router_new(), then
 * lg_fleet_new() of fleet/fleet.h, which owns it): how the gateway, reloads
 * and tests make a fleet. Returns what either returns.
 */
int lg_router_fleet_new(struct lg_config *conf, unsigned nworkers, const struct lg_fleet *prev,
                        struct lg_fleet **out);

/*
 * Picks one of route->backends, skipping those `tried` holds (route/tried.h;
 * NULL: none), among every candidate however long the route. Returns LG_OK
 * with out filled,
 * or LG_EBUSY when no candidate is available (out->reason says why,
 * out->retry_after_ms when one may be). When out->probe is set the caller
 * holds the backend's half-open probe slot and must end the attempt with
 * lg_backend_note_result() or lg_backend_release_probe().
 */
int lg_router_pick(struct lg_router *r, const struct lg_model_route *route,
                   const struct lg_route_req *req, const struct lg_tried *tried,
                   struct lg_route_result *out);

/* Is any backend of route still a candidate (available, not tried, under
 * its max_inflight for a request of class cls: lg_backend_inflight_from())? */
bool lg_router_has_candidate(const struct lg_model_route *route, const struct lg_tried *tried,
                             unsigned cls);

/*
 * Tells the stages that have on_result how an attempt on b ended (status 0:
 * no response; ttft_ns/total_ns 0 when not reached).
 */
void lg_router_note_result(struct lg_router *r, const struct lg_model_route *route,
                           const struct lg_route_req *req, struct lg_backend *b, int status,
                           uint64_t ttft_ns, uint64_t total_ns);

/*
 * The prompt bytes to hash for lg_route_req.prefix_hash: routing.prefix_bytes
 * where a stage of the pipeline may read the hash or its length
 * (prefix_affinity, session_affinity, a loaded plugin), else 0: a request
 * does not hash what no stage reads.
 */
size_t lg_router_prefix_bytes(const struct lg_router *r);

/*
 * Whether a stage of the pipeline may read lg_route_req.session_hash
 * (session_affinity, a loaded plugin): a request does not look for session
 * headers that no stage reads.
 */
bool lg_router_reads_session(const struct lg_router *r);

/* The policy label ("prefix_affinity+ttft"). */
const char *lg_router_policy(const struct lg_router *r);

#endif /* LG_ROUTER_H */
