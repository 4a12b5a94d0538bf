/*
 * attempt_types.h: one attempt of a request on a backend (types only:
 * attempt.h has its functions). The request owns its attempts
 * (client_types.h): the current one, a hedge's duplicate while it races
 * (hedge.c), and, while the access log is on, a short list of those that
 * ended, for its line.
 */
#ifndef LG_ATTEMPT_TYPES_H
#define LG_ATTEMPT_TYPES_H

#include "base/fail.h"
#include "base/lg_core.h"
#include "route/router.h"

struct lg_backend;
struct lg_upconn;

/* Why an attempt was made. */
enum lg_attempt_kind {
    LG_ATTEMPT_FIRST = 0,    /* the request's first */
    LG_ATTEMPT_RETRY,        /* after a failure before any response byte reached the client */
    LG_ATTEMPT_HEDGE,        /* a duplicate racing the request's attempt to a first token */
    LG_ATTEMPT_CONTINUATION, /* a stream going on after its backend failed mid-answer */
    LG_ATTEMPT_NKINDS,
};

/* "first", "retry", "hedge" or "continuation" (the access log's). */
static inline const char *
lg_attempt_kind_name(enum lg_attempt_kind kind)
{
    static const char *const names[LG_ATTEMPT_NKINDS] = {
        [LG_ATTEMPT_FIRST] = "first",
        [LG_ATTEMPT_RETRY] = "retry",
        [LG_ATTEMPT_HEDGE] = "hedge",
        [LG_ATTEMPT_CONTINUATION] = "continuation",
    };

    return kind < LG_ATTEMPT_NKINDS ? names[kind] : "?";
}

/*
 * Where an attempt is (lg_attempt_set_phase() moves it, and asserts the
 * move is one of these):
 *   IDLE -> CONNECT | WAIT_HEAD (launched on a new or a pooled connection)
 *        -> DONE (no connection could be made)
 *   CONNECT -> WAIT_HEAD (connected) | DONE
 *   WAIT_HEAD -> RELAY (its head is in) | DONE
 *   RELAY -> DONE
 *   DONE -> IDLE (its storage carries the request's next attempt)
 */
enum lg_attempt_phase {
    LG_ATTEMPT_PH_IDLE = 0,  /* not launched: holds nothing (a pick, maybe) */
    LG_ATTEMPT_PH_CONNECT,   /* its connection is being made */
    LG_ATTEMPT_PH_WAIT_HEAD, /* the request goes out; its response head is awaited */
    LG_ATTEMPT_PH_RELAY,     /* its response is relayed (its head was taken) */
    LG_ATTEMPT_PH_DONE,      /* ended, as `fail` says: holds nothing on the backend */
    LG_ATTEMPT_NPHASES,
};

/* What an attempt holds on its backend besides its in-flight count; each
 * bit is set exactly while the slot is held (attempt.c). */
#define LG_ATTEMPT_H_TOKEN_WAIT (1u << 0) /* counted awaiting a first token (due[], ages) */
#define LG_ATTEMPT_H_PROBE      (1u << 1) /* the backend's half-open probe */
#define LG_ATTEMPT_H_AGED       (1u << 2) /* counted in the backend's in-flight ages */
#define LG_ATTEMPT_H_END_SLOT   (1u << 3) /* its predicted end is in the backend's ends[] */
#define LG_ATTEMPT_H_SEQ        (1u << 4) /* followed in the backend's seqs[] (engine model) */
#define LG_ATTEMPT_H_CLASS      (1u << 5) /* counted by class there (engine_priority) */

struct lg_attempt {
    enum lg_attempt_kind kind : 8;
    enum lg_attempt_phase phase : 8; /* lg_attempt_set_phase() moves it */
    enum lg_fail fail : 8;      /* how it ended; LG_FAIL_NONE: well, or not yet */
    uint8_t holds;              /* LG_ATTEMPT_H_* */
    uint16_t status;            /* its response's status; 0 before (or without) a head */
    bool up_reused;             /* it runs on a pooled connection */
    int8_t due_slot;            /* its slot in the backend's due[] (H_TOKEN_WAIT) */
    int8_t end_slot;            /* its slot in the backend's ends[] (H_END_SLOT) */
    int8_t seq_slot;            /* its slot in the backend's seqs[] (H_SEQ) */
    uint32_t ngaps;             /* gaps taken (gaps[ngaps % 8] is the next) */
    uint64_t span_id;           /* its span in the request's trace (trace.c); 0: none */
    struct lg_backend *backend; /* one reference from launch to end; NULL otherwise */
    struct lg_upconn *up;       /* lent by the pool from launch to end */
    /* monotonic timestamps, ns; 0 = did not happen */
    uint64_t t_dispatch;        /* launched */
    uint64_t t_connect;         /* its connection ready (t_dispatch on a pooled one) */
    uint64_t t_first_byte;      /* its first response byte */
    uint64_t t_first_token;     /* its first content event (or its whole response) */
    uint64_t t_end;             /* ended */
    uint64_t up_bytes;          /* response bytes received from the backend */
    /* the pace of its stream there (attempt.c) */
    uint64_t t_pace;            /* measured from here */
    uint64_t pace_events;       /* the request's content events at t_pace */
    float gaps[8];              /* its last gaps between content events, ms (a ring) */
    /* last: a new attempt in the same storage leaves it to its pick, which
     * frees the explanation before it writes its own */
    struct lg_route_result pick; /* the router's choice (its backend borrowed from the
                                    fleet the request holds) and explanation (owned) */
};

/* An attempt that ended, as the access log shows it. */
struct lg_attempt_rec {
    const struct lg_backend *backend; /* borrowed from the fleet the request holds */
    enum lg_attempt_kind kind : 8;
    enum lg_fail fail : 8;
    uint16_t status;
    uint64_t t_dispatch, t_connect, t_first_byte, t_first_token, t_end;
};

/* Ended attempts that are no longer the request's current one, kept while
 * the access log is on; the first LG_ATTEMPT_LOG_MAX of them. */
#define LG_ATTEMPT_LOG_MAX 8
struct lg_attempt_log {
    uint32_t n;
    struct lg_attempt_rec rec[LG_ATTEMPT_LOG_MAX];
};

#endif /* LG_ATTEMPT_TYPES_H */
