/*
 * stats.h: the counters and histograms behind /metrics.
 *
 * Recorded on the worker's loop once per request, when it ends
 * (serve/record.c, next to its access-log line), into counters the
 * request's worker or backend holds; ops/metrics.c only reads them. Every field
 * is a relaxed atomic: the admin thread reads while workers write.
 */
#ifndef LG_STATS_H
#define LG_STATS_H

#include "base/lg_core.h"

/* Histogram buckets, upper bounds in seconds. */
#define LG_HIST_NBUCKETS 14
extern const double lg_hist_latency_bounds[LG_HIST_NBUCKETS]; /* TTFT, end to end: 10ms..120s */
extern const double lg_hist_itl_bounds[LG_HIST_NBUCKETS];     /* inter-token gaps: 5ms..2.5s */

struct lg_hist {
    uint64_t buckets[LG_HIST_NBUCKETS + 1]; /* per bucket (not cumulative); last: above all */
    uint64_t count;
    uint64_t sum_us; /* sum of the observations, microseconds */
};

/* Per backend: what its requests looked like to clients. */
struct lg_backend_metrics {
    struct lg_hist ttft;        /* first content event, from the request's first byte */
    struct lg_hist itl;         /* mean gap between content events, per streamed response */
    struct lg_hist duration;    /* first request byte to last response byte */
    uint64_t prompt_tokens;     /* usage.prompt_tokens, when the response reports it */
    uint64_t completion_tokens; /* usage.completion_tokens, else content events */
    uint64_t prompt_bytes;      /* prompt text received (messages, prompt, input) */
    uint64_t requests;          /* requests that ended on this backend (last attempt) */
    uint64_t stream_errors;     /* streamed responses with an error event from the engine */
};

/* Routes the gateway counts requests by (base/endpoint.c maps paths to them). */
enum lg_stats_route {
    LG_STATS_ROUTE_CHAT = 0,    /* /v1/chat/completions */
    LG_STATS_ROUTE_COMPLETIONS, /* /v1/completions */
    LG_STATS_ROUTE_EMBEDDINGS,  /* /v1/embeddings */
    LG_STATS_ROUTE_MODELS,      /* /v1/models... */
    LG_STATS_ROUTE_HEALTHZ,     /* /healthz */
    LG_STATS_ROUTE_OTHER,       /* anything else */
    LG_STATS_ROUTE_RESPONSES,   /* /v1/responses */
    LG_STATS_ROUTE_MESSAGES,    /* /v1/messages, /v1/messages/count_tokens */
    LG_STATS_NROUTES,
};
extern const char *const lg_stats_route_names[LG_STATS_NROUTES];

#define LG_STATS_MIN_CODE      100
#define LG_STATS_NCODES        500 /* 100..599 */
#define LG_STATS_MAX_DECISIONS 64

/* One (policy, reason) pair of routing decisions. */
struct lg_stats_decision {
    char policy[64];    /* written once, before `n` publishes it */
    const char *reason; /* static */
    uint64_t count;
};

/* Why a stream the gateway could continue (routing.resume) was cut all the same. */
enum lg_stats_resume {
    LG_STATS_RESUME_NONE = 0,
    LG_STATS_RESUME_NO_BACKEND, /* no other backend serves its model */
    LG_STATS_RESUME_BUDGET,     /* the retry budget is spent */
    LG_STATS_RESUME_ATTEMPTS,   /* routing.resume.attempts continuations made already */
    LG_STATS_RESUME_TEXT_LIMIT, /* its text outgrew routing.resume.max_text */
    LG_STATS_RESUME_NOT_TEXT,   /* it generated what text cannot continue (reasoning, tool
                                   calls, another choice) */
    LG_STATS_RESUME_REQUEST,    /* its request cannot be continued (tools, a structured
                                   output, several prompts, echo...) */
    LG_STATS_RESUME_COMPLETE,   /* all of max_tokens was delivered: nothing left to ask for */
    LG_STATS_RESUME_EVENT,      /* an event outgrew the buffer: the client holds part of one */
    LG_STATS_NRESUME,
};
extern const char *const lg_stats_resume_names[LG_STATS_NRESUME];

/* What hedging did (serve/hedge.c): llmgate_hedges_*_total. */
enum lg_stats_hedge {
    LG_STATS_HEDGE_SENT = 0,   /* duplicates sent */
    LG_STATS_HEDGE_WON,        /* a duplicate's stream went on to the client */
    LG_STATS_HEDGE_WASTED,     /* a duplicate closed without: lost, failed, or nobody waited */
    LG_STATS_HEDGE_NO_BUDGET,  /* a deadline passed with the budget spent */
    LG_STATS_HEDGE_NO_BACKEND, /* a deadline passed with no other backend to take it */
    LG_STATS_NHEDGE,
};

/* Per worker: requests by route and status, continuations, routing decisions, hedges. */
struct lg_worker_metrics {
    uint64_t requests[LG_STATS_NROUTES][LG_STATS_NCODES];
    uint64_t resumed;                             /* continuations begun */
    uint64_t resume_failed[LG_STATS_NRESUME];     /* resumable streams cut, by why */
    struct lg_stats_decision decisions[LG_STATS_MAX_DECISIONS];
    uint32_t ndecisions;        /* atomic (release when a slot is filled) */
    uint64_t decisions_dropped; /* pairs beyond the table */
    uint64_t hedges[LG_STATS_NHEDGE];
};

/* Adds one observation of v seconds. */
void lg_hist_observe(struct lg_hist *h, const double *bounds, double v);

#endif /* LG_STATS_H */
