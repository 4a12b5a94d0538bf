/*
 * engine.h: llmsim's simulated inference engine: continuous batching over a
 * fixed number of slots, a FIFO of waiting sequences, a prefix cache, and
 * one libevent timer that paces the steps.
 *
 * Timing model (all durations divided by the effective speed; the whole
 * model, with the schedules, is at the top of llmsim_shm.h):
 *   step = (prefill_fixed_ms if it prefills anything)
 *          + prefill_us_per_token * (prompt tokens it prefills)
 *          + decode_ms + decode_ms_per_seq * batch^decode_batch_exp
 *   times a seeded lognormal factor of mean 1 when jitter > 0.
 * The schedule decides each step's batch when it starts: FCFS admits and
 * prefills whole, and every running sequence computes; prefill-first runs
 * the admitted prompts alone while any waits for a free slot; chunked shares
 * a budget of step_tokens between one token per decoding sequence and
 * prefill chunks. Every sequence of the batch whose prompt is all prefilled
 * emits one token at the step's end (the first ends the step that finished
 * its prefill).
 */
#ifndef LG_SIM_ENGINE_H
#define LG_SIM_ENGINE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "prefix.h"

struct event_base;
struct event;
struct lg_sim_shm;

enum lg_sim_seq_state {
    LG_SIM_SEQ_ST_IDLE = 0, /* not in the engine */
    LG_SIM_SEQ_ST_WAITING,  /* queued for a slot */
    LG_SIM_SEQ_ST_RUNNING,  /* holds a slot */
};

/* One generation; embedded in its owner (the connection), borrowed by the engine. */
struct lg_sim_seq {
    TAILQ_ENTRY(lg_sim_seq) link; /* waiting or running list */
    enum lg_sim_seq_state state;
    void *owner; /* passed back to the callbacks */
    uint32_t prompt_tokens;
    uint32_t max_tokens;
    uint32_t generated;         /* tokens emitted so far */
    uint32_t uncached_tokens;   /* estimate while waiting, actual once admitted */
    uint32_t cached_tokens;     /* once admitted */
    const uint64_t *block_keys; /* borrowed from the owner's request */
    uint32_t nblocks;
    uint32_t prefill_left; /* prompt tokens still to prefill, once admitted (chunked) */
    bool emits;            /* computes in the step in progress and emits a token at its end */
    uint32_t slot;       /* slot index while running */
    uint64_t wait_pos;   /* position in the shared waiting ring */
    bool wait_published; /* has a ring entry */
    uint64_t arrival_ns;
    uint64_t first_token_ns;
};

/*
 * Callbacks into the owner. on_token runs for every token emitted, in the
 * engine's step handler, once the step's results and the next step are in
 * the engine's state (emit_step_end_ns is then the end of the step that
 * produced the token); `last` is true for the max_tokens-th, in which case
 * the sequence has already left the engine (the owner may reuse it). A
 * non-last call returning false makes the engine drop the sequence (the
 * owner cut it): counted as dropped, never touched again.
 */
struct lg_sim_engine_ops {
    bool (*on_token)(struct lg_sim_seq *seq, uint32_t index, bool last);
};

/* TTFT histogram buckets (seconds), vLLM's. */
#define LG_SIM_TTFT_BUCKETS 22
extern const double lg_sim_ttft_buckets[LG_SIM_TTFT_BUCKETS];

struct lg_sim_engine_stats {
    uint64_t submitted;
    uint64_t completed;
    uint64_t aborted;          /* cancelled by their client */
    uint64_t dropped;          /* cut by the owner (close-after-tokens) */
    uint64_t prompt_tokens;    /* of admitted sequences */
    uint64_t prefilled_tokens; /* uncached tokens actually prefilled */
    uint64_t generation_tokens;
    uint64_t prefix_hits;    /* tokens */
    uint64_t prefix_queries; /* tokens */
    uint64_t steps;
    uint64_t prefill_ns; /* model time spent prefilling */
    uint64_t decode_ns;  /* model time spent decoding */
    uint64_t last_abort_wall_ns;
    uint64_t ttft_counts[LG_SIM_TTFT_BUCKETS + 1]; /* last: +Inf */
    double ttft_sum_s;
};

struct lg_sim_engine_conf {
    uint32_t slots;
    uint32_t schedule;    /* LLMSIM_SHM_SCHED_* (0: first come first served) */
    uint32_t step_tokens; /* chunked: tokens a step computes at most, >= slots */
    double prefill_us_per_token;
    double prefill_fixed_ms; /* added to a step that prefills anything */
    double decode_ms;
    double decode_ms_per_seq;
    double decode_batch_exp; /* 1: the decode cost grows linearly with the batch */
    double jitter;           /* sigma of the step's lognormal factor; 0 = none */
    uint64_t seed;           /* of the jitter */
    double speed; /* effective, faults included */
    uint32_t prefix_block_tokens;
    uint32_t prefix_cache_blocks;
};

enum lg_sim_engine_phase {
    LG_SIM_ENGINE_ST_IDLE = 0, /* no step; nothing runs */
    LG_SIM_ENGINE_ST_KICKED,   /* a step will start at the top of the loop */
    LG_SIM_ENGINE_ST_STEP,     /* a step is in progress until step_end_ns */
    LG_SIM_ENGINE_ST_BLOCKED,  /* a step ended while stalled: its tokens wait */
};

/* A token a step produced, handed to the owner once the step's state is out. */
struct lg_sim_token {
    struct lg_sim_seq *seq;
    uint32_t index;
    bool last;
};

struct lg_sim_engine {
    struct lg_sim_engine_conf conf;
    const struct lg_sim_engine_ops *ops;
    struct event *step_ev;       /* owned */
    struct lg_sim_shm *shm;      /* borrowed; NULL = no shared state */
    struct lg_sim_prefix prefix; /* owned (its memory may be the shm's) */
    TAILQ_HEAD(, lg_sim_seq) waiting;
    TAILQ_HEAD(, lg_sim_seq) running;
    uint32_t nwaiting;
    uint32_t nrunning;
    uint32_t *free_slots; /* stack of free slot indices */
    uint32_t nfree;
    enum lg_sim_engine_phase phase;
    bool stalled;
    bool failing; /* published only: a status fault is in effect */
    uint64_t step_start_ns;
    uint64_t step_end_ns;
    uint64_t step_prefill_tokens;
    uint64_t queued_prefill_tokens; /* waiting estimates + prefills unfinished (this step's too) */
    uint64_t rng;                   /* jitter draws */
    uint64_t remaining_decode_tokens;
    struct lg_sim_seq *wait_unpublished; /* first waiter without a ring entry */
    struct lg_sim_token *emit;           /* a step's tokens, sent after its state is published */
    uint64_t emit_step_end_ns;           /* the end of the step whose tokens are being sent */
    struct lg_sim_engine_stats stats;
};

int lg_sim_engine_init(struct lg_sim_engine *e, struct event_base *base,
                       const struct lg_sim_engine_conf *conf, const struct lg_sim_engine_ops *ops,
                       struct lg_sim_shm *shm);
void lg_sim_engine_free(struct lg_sim_engine *e);

/* Queues seq (prompt_tokens, max_tokens, keys and owner set by the caller). */
void lg_sim_engine_submit(struct lg_sim_engine *e, struct lg_sim_seq *seq);

/* The client went away: the sequence leaves at once, freeing its slot. */
void lg_sim_engine_abort(struct lg_sim_engine *e, struct lg_sim_seq *seq);

/* New effective speed, used from the next step on. */
void lg_sim_engine_set_speed(struct lg_sim_engine *e, double speed);

/* Published in the shared state: the replica answers errors (a status fault). */
void lg_sim_engine_set_failing(struct lg_sim_engine *e, bool failing);

/* A stalled engine finishes no step (tokens are held) until unstalled. */
void lg_sim_engine_set_stalled(struct lg_sim_engine *e, bool stalled);

/* The schedule's name (llmsim --schedule): fcfs, prefill-first, chunked. */
const char *lg_sim_schedule_name(uint32_t schedule);

/* Parses a schedule's name into LLMSIM_SHM_SCHED_*; LG_EINVAL if unknown. */
int lg_sim_schedule_parse(const char *s, uint32_t *out);

/* KV-cache use in [0, 1]: blocks held by running sequences over the capacity. */
double lg_sim_engine_kv_usage(const struct lg_sim_engine *e);

/* Tokens held in the KV cache by running sequences. */
uint64_t lg_sim_engine_kv_tokens(const struct lg_sim_engine *e);

#endif /* LG_SIM_ENGINE_H */
