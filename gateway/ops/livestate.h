/*
 * livestate.h: one backend's live state as the admin API, the status page and
 * /metrics show it, read without locks from any thread: its state (up, down,
 * ejected, half-open, held, draining), slow start, the engine's last scrape and the
 * router's estimates (the view policies see, fleet/backend_view.c).
 */
#ifndef LG_LIVESTATE_H
#define LG_LIVESTATE_H

#include <llmgate/plugin.h>

#include "base/lg_core.h"

struct lg_backend;
struct lg_fleet;

enum lg_live_state {
    LG_LIVE_UP = 0,
    LG_LIVE_DOWN,      /* failed active checks */
    LG_LIVE_EJECTED,   /* passive: failures in a row; back-off running */
    LG_LIVE_HALF_OPEN, /* back-off over: one probe at a time */
    LG_LIVE_HELD,      /* honouring the backend's Retry-After */
    LG_LIVE_DRAINING,  /* admin: no new requests */
    LG_LIVE_NSTATES,
};
extern const char *const lg_live_state_names[LG_LIVE_NSTATES];

struct lg_live {
    enum lg_live_state state;
    int engine_flavor;           /* enum lg_engine_flavor seen (or configured) */
    struct lg_backend_view view; /* name borrowed from the backend; view.model NULL */
    struct lg_engine_model_view model; /* the engine model's outputs there */
    double ttft_1kib_ms;         /* predicted service TTFT of a 1 KiB prompt, no queue */
    double slots_declared;       /* the slots the engine says it has; 0 = not said */
    double slots_confirmed;      /* 1: its slots were seen full with ours queued */
    int engine_others;           /* others served there: 1, none: 0, unknown: -1 */
    double gauge_lag_ms;         /* its gauges' lag behind our ends (alone there); 0 = none */
};

/* Reads b's live state now; f is a fleet listing b (for its model's prior and
 * the health settings). */
void lg_live_read(const struct lg_fleet *f, const struct lg_backend *b, uint64_t now_ns,
                  struct lg_live *out);

/* "vllm", "sglang"...; "unknown" until detected. */
const char *lg_live_flavor_name(int flavor);

#endif /* LG_LIVESTATE_H */
