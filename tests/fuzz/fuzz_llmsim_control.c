/*
 * fuzz_llmsim_control.c: llmsim's POST /sim/control body parser.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/llmsim/control.c"
#include "../../tools/llmsim/fault.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* control.c's apply/state side needs the replica; the parser does not. */
int
lg_sim_fault_add_now(struct lg_sim *sim, const struct lg_sim_fault *f)
{
    return LG_OK;
}

void
lg_sim_faults_apply(struct lg_sim *sim)
{
}

size_t
lg_sim_held_count(const struct lg_sim *sim)
{
    return 0;
}

const char *
lg_sim_flavor_name(int flavor)
{
    return "vllm";
}

const char *
lg_sim_schedule_name(uint32_t schedule)
{
    return "fcfs";
}

const char *
lg_sim_policy_name(uint32_t policy)
{
    return "fcfs";
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_sim_control ctl;
    char err[256];

    err[0] = '\0';
    if (lg_sim_control_parse((const char *)data, size, &ctl, err, sizeof(err)) != LG_OK) {
        LG_BUG_ON(err[0] == '\0');
        return 0;
    }
    LG_BUG_ON(ctl.nfaults > LG_SIM_CONTROL_MAX_FAULTS);
    LG_BUG_ON(ctl.has_speed && !(ctl.speed > 0));
    return 0;
}
