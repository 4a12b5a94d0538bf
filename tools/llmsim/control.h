/*
 * control.h: llmsim's test control plane: POST /sim/control bodies and the
 * GET /sim/state document.
 */
#ifndef LG_SIM_CONTROL_H
#define LG_SIM_CONTROL_H

#include <stdbool.h>
#include <stddef.h>

#include "fault.h"

struct evbuffer;
struct lg_sim;

#define LG_SIM_CONTROL_MAX_FAULTS 16

/* A parsed control request: {"clear_faults": true, "speed": F, "fault": SPEC | [SPEC...]} */
struct lg_sim_control {
    bool clear_faults;
    bool has_speed;
    double speed;
    struct lg_sim_fault faults[LG_SIM_CONTROL_MAX_FAULTS]; /* times relative to the request */
    size_t nfaults;
};

/* LG_EINVAL with a reason in err for anything but the documented keys and types. */
int lg_sim_control_parse(const char *body, size_t len, struct lg_sim_control *ctl, char *err,
                         size_t errlen);

/* Applies ctl in order: clear, speed, faults. */
int lg_sim_control_apply(struct lg_sim *sim, const struct lg_sim_control *ctl);

/* The /sim/state JSON document. */
int lg_sim_control_state(const struct lg_sim *sim, struct evbuffer *out);

#endif /* LG_SIM_CONTROL_H */
