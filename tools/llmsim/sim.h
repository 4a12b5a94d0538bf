/*
 * sim.h: one llmsim replica: its configuration, the listener, the engine,
 * the fault schedule and the open connections.
 */
#ifndef LG_SIM_SIM_H
#define LG_SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "engine.h"
#include "fault.h"
#include "shm.h"

struct event_base;
struct event;
struct evconnlistener;
struct lg_sim_conn;

enum lg_sim_flavor {
    LG_SIM_FLAVOR_VLLM = 0,
    LG_SIM_FLAVOR_SGLANG,
    LG_SIM_FLAVOR_TGI,
    LG_SIM_FLAVOR_LLAMACPP,
};

struct lg_sim_model {
    char *name;  /* as given */
    char *json;  /* escaped for a JSON string */
    char *label; /* escaped for a Prometheus label value */
};

struct lg_sim_conf {
    const char *listen;          /* HOST:PORT */
    const char *name;            /* replica name (X-Llmsim-Replica) */
    struct lg_sim_model *models; /* at least one */
    size_t nmodels;
    uint32_t slots;
    double speed; /* 1 = baseline, 0.5 = half as fast, 2 = twice as fast */
    uint64_t seed;
    enum lg_sim_flavor flavor;
    double prefill_us_per_token;
    double prefill_fixed_ms;
    double decode_ms;
    double decode_ms_per_seq;
    double decode_batch_exp;
    double jitter;
    double gauge_lag_ms;  /* an ended sequence stays in /metrics' running count this long */
    uint32_t schedule;    /* LLMSIM_SHM_SCHED_* */
    uint32_t step_tokens; /* chunked: budget of a step */
    uint32_t max_tokens_default;
    bool text_context; /* --text context: each token a function of the text before it */
    bool role_chunk;   /* --role-chunk: a role-only first chat chunk, as vLLM and SGLang */
    uint32_t prefix_block_tokens;
    uint32_t prefix_cache_blocks;
    uint32_t embedding_dim;
    size_t max_body_bytes;
    size_t max_header_bytes;
    const char *state_shm;  /* NULL = none */
    const char *ready_file; /* NULL = none */
    bool quiet;
    const char **faults; /* SPECs from --fault, scheduled from process start */
    size_t nfaults;
};

struct lg_sim_counters {
    uint64_t http_requests;   /* every request read */
    uint64_t requests;        /* inference requests (chat, completions, embeddings) */
    uint64_t requests_ok;     /* inference requests answered 200 */
    uint64_t fault_responses; /* answered with a status fault's code */
    uint64_t client_errors;   /* 4xx for bad requests */
    uint64_t closed_by_fault; /* generations cut by close-after-tokens */
    uint64_t abandoned;       /* held by a stall, their client left before it ended */
    uint64_t stalls;          /* stalls begun (stall@, stall-random) */
    uint64_t embeddings;
};

struct lg_sim {
    const struct lg_sim_conf *conf; /* borrowed from main */
    struct event_base *base;        /* owned */
    struct evconnlistener *listener;
    struct event *sigterm_ev;
    struct event *sigint_ev;
    struct event *fault_ev; /* fires at the next fault edge */
    struct event *reap_ev;  /* frees closed connections */
    struct lg_sim_shm shm;
    struct lg_sim_engine engine;
    struct lg_sim_faults faults;
    uint64_t start_ns; /* CLOCK_MONOTONIC at startup: --fault origin */
    double base_speed; /* --speed or the last control request */
    double speed;      /* effective: base_speed / slowdowns in effect */
    bool stalled;
    bool failing;
    TAILQ_HEAD(, lg_sim_conn) conns; /* open connections */
    TAILQ_HEAD(, lg_sim_conn) held;  /* requests read during a stall */
    TAILQ_HEAD(, lg_sim_conn) reap;  /* closed, freed at the top of the loop */
    uint32_t nconns;
    uint64_t next_conn_id;
    uint64_t next_response_id;
    uint64_t faults_added; /* seeds each random fault: --seed and its rank */
    struct lg_sim_counters counters;
    char listen_addr[80]; /* bound address, "127.0.0.1:PORT" */
    int exit_code;
};

/* Builds the replica: shared state, engine, listener, signals, --fault schedule. */
int lg_sim_init(struct lg_sim *sim, const struct lg_sim_conf *conf);

/* Prints the ready line (and writes --ready-file), then runs until SIGTERM/SIGINT. */
int lg_sim_run(struct lg_sim *sim);

void lg_sim_free(struct lg_sim *sim);

/* Re-evaluates the faults in effect now: speed, stall, status; arms the next edge. */
void lg_sim_faults_apply(struct lg_sim *sim);

/* Adds a fault whose times count from now. */
int lg_sim_fault_add_now(struct lg_sim *sim, const struct lg_sim_fault *f);

/* Requests held by the stall in effect. */
size_t lg_sim_held_count(const struct lg_sim *sim);

/* Chunk ids: deterministic from the seed and the response's rank. */
uint64_t lg_sim_next_id(struct lg_sim *sim);

#endif /* LG_SIM_SIM_H */
