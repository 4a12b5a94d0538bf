/*
 * control.c: llmsim's test control plane. POST /sim/control changes the
 * replica at run time ({"clear_faults": true}, {"speed": F}, {"fault": SPEC}
 * or a list of SPECs, applied from now); GET /sim/state reports what tests
 * assert on. Owns nothing: parses into a caller's struct, renders into a
 * caller's buffer.
 */
#include "control.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "base/lg_core.h"
#include "metrics.h"
#include "sim.h"

static int
control_fault(json_t *v, struct lg_sim_control *ctl, char *err, size_t errlen)
{
    char why[192];

    if (!json_is_string(v)) {
        snprintf(err, errlen, "'fault' must be a SPEC string or an array of them");
        return LG_EINVAL;
    }
    if (ctl->nfaults >= LG_SIM_CONTROL_MAX_FAULTS) {
        snprintf(err, errlen, "at most %d faults per request", LG_SIM_CONTROL_MAX_FAULTS);
        return LG_EINVAL;
    }
    if (lg_sim_fault_parse(json_string_value(v), &ctl->faults[ctl->nfaults], why, sizeof(why))
        != LG_OK) {
        snprintf(err, errlen, "fault: %s", why);
        return LG_EINVAL;
    }
    ctl->nfaults++;
    return LG_OK;
}

static int
control_fill(json_t *root, struct lg_sim_control *ctl, char *err, size_t errlen)
{
    const char *key;
    json_t *v;

    if (!json_is_object(root)) {
        snprintf(err, errlen, "the control body must be a JSON object");
        return LG_EINVAL;
    }
    json_object_foreach (root, key, v) {
        if (strcmp(key, "clear_faults") == 0) {
            if (!json_is_boolean(v)) {
                snprintf(err, errlen, "'clear_faults' must be a boolean");
                return LG_EINVAL;
            }
            ctl->clear_faults = json_is_true(v);
        } else if (strcmp(key, "speed") == 0) {
            if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1e6) {
                snprintf(err, errlen, "'speed' must be a number > 0 and <= 1000000");
                return LG_EINVAL;
            }
            ctl->has_speed = true;
            ctl->speed = json_number_value(v);
        } else if (strcmp(key, "fault") == 0) {
            size_t i;
            json_t *f;

            if (!json_is_array(v)) {
                if (control_fault(v, ctl, err, errlen) != LG_OK) {
                    return LG_EINVAL;
                }
                continue;
            }
            json_array_foreach (v, i, f) {
                if (control_fault(f, ctl, err, errlen) != LG_OK) {
                    return LG_EINVAL;
                }
            }
        } else {
            snprintf(err, errlen,
                     "unknown key (expected \"speed\", \"fault\" or \"clear_faults\")");
            return LG_EINVAL;
        }
    }
    return LG_OK;
}

int
lg_sim_control_parse(const char *body, size_t len, struct lg_sim_control *ctl, char *err,
                     size_t errlen)
{
    json_error_t jerr;
    json_t *root;
    int rc;

    memset(ctl, 0, sizeof(*ctl));
    root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        snprintf(err, errlen, "invalid JSON: %s", jerr.text);
        return LG_EINVAL;
    }
    rc = control_fill(root, ctl, err, errlen);
    json_decref(root);
    return rc;
}

int
lg_sim_control_apply(struct lg_sim *sim, const struct lg_sim_control *ctl)
{
    int rc = LG_OK;

    if (ctl->clear_faults) {
        lg_sim_faults_clear(&sim->faults);
    }
    if (ctl->has_speed) {
        sim->base_speed = ctl->speed;
    }
    for (size_t i = 0; i < ctl->nfaults && rc == LG_OK; i++) {
        rc = lg_sim_fault_add_now(sim, &ctl->faults[i]);
    }
    lg_sim_faults_apply(sim);
    return rc;
}

int
lg_sim_control_state(const struct lg_sim *sim, struct evbuffer *out)
{
    const struct lg_sim_engine *e = &sim->engine;
    const struct lg_sim_engine_stats *st = &e->stats;
    uint64_t now = lg_now_ns();
    json_t *faults = json_array();
    json_t *models = json_array();
    json_t *doc;
    char *text;
    int rc;

    for (size_t i = 0; i < sim->faults.n; i++) {
        char spec[128];

        /* as a SPEC that would reproduce it from the start of the process */
        lg_sim_fault_format(&sim->faults.list[i], sim->start_ns, spec, sizeof(spec));
        json_array_append_new(faults, json_string(spec));
    }
    for (size_t i = 0; i < sim->conf->nmodels; i++) {
        json_array_append_new(models, json_string(sim->conf->models[i].name));
    }
    doc = json_pack("{s:s,s:I,s:s,s:o,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "name",
                    sim->conf->name, "pid", (json_int_t)getpid(), "flavor",
                    lg_sim_flavor_name(sim->conf->flavor), "models", models, "speed", sim->speed,
                    "base_speed", sim->base_speed, "slots", (json_int_t)e->conf.slots, "running",
                    (json_int_t)e->nrunning, "waiting", (json_int_t)e->nwaiting, "completed",
                    (json_int_t)st->completed, "aborted", (json_int_t)st->aborted, "dropped",
                    (json_int_t)st->dropped, "requests", (json_int_t)sim->counters.requests,
                    "prefix_hits", (json_int_t)st->prefix_hits, "prefix_lookups",
                    (json_int_t)st->prefix_queries, "connections", (json_int_t)sim->nconns,
                    "last_abort_wall_ns", (json_int_t)st->last_abort_wall_ns);
    if (doc == NULL) {
        json_decref(faults);
        return LG_ENOMEM;
    }
    json_object_set_new(doc, "stalled", json_boolean(sim->stalled));
    json_object_set_new(doc, "failing", json_boolean(sim->failing));
    json_object_set_new(doc, "faults", faults);
    json_object_set_new(doc, "held", json_integer((json_int_t)lg_sim_held_count(sim)));
    json_object_set_new(doc, "steps", json_integer((json_int_t)st->steps));
    json_object_set_new(doc, "schedule", json_string(lg_sim_schedule_name(e->conf.schedule)));
    json_object_set_new(doc, "step_tokens", json_integer((json_int_t)e->conf.step_tokens));
    json_object_set_new(doc, "scheduling_policy", json_string(lg_sim_policy_name(e->conf.policy)));
    json_object_set_new(doc, "preempted", json_integer((json_int_t)e->stats.preempted));
    json_object_set_new(doc, "prefill_us_per_token", json_real(e->conf.prefill_us_per_token));
    json_object_set_new(doc, "prefill_fixed_ms", json_real(e->conf.prefill_fixed_ms));
    json_object_set_new(doc, "decode_ms", json_real(e->conf.decode_ms));
    json_object_set_new(doc, "decode_ms_per_seq", json_real(e->conf.decode_ms_per_seq));
    json_object_set_new(doc, "decode_batch_exp", json_real(e->conf.decode_batch_exp));
    json_object_set_new(doc, "jitter", json_real(e->conf.jitter));
    json_object_set_new(doc, "gauge_lag_ms", json_real(e->conf.gauge_lag_ms));
    json_object_set_new(doc, "generation_tokens", json_integer((json_int_t)st->generation_tokens));
    json_object_set_new(doc, "closed_by_fault",
                        json_integer((json_int_t)sim->counters.closed_by_fault));
    json_object_set_new(doc, "fault_responses",
                        json_integer((json_int_t)sim->counters.fault_responses));
    json_object_set_new(doc, "parked", json_integer((json_int_t)st->parked));
    json_object_set_new(doc, "parked_now", json_integer((json_int_t)e->nparked));
    json_object_set_new(doc, "abandoned", json_integer((json_int_t)sim->counters.abandoned));
    json_object_set_new(doc, "stalls", json_integer((json_int_t)sim->counters.stalls));
    json_object_set_new(doc, "prefilled_tokens", json_integer((json_int_t)st->prefilled_tokens));
    json_object_set_new(doc, "uptime_s", json_real((double)(now - sim->start_ns) / 1e9));
    text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (text == NULL) {
        return LG_ENOMEM;
    }
    rc = evbuffer_add(out, text, strlen(text)) == 0 ? LG_OK : LG_ENOMEM;
    free(text);
    return rc;
}
