/*
 * fuzz_llmsim_fault.c: llmsim's fault SPEC parser. Any input must be parsed
 * or rejected with a reason; an accepted SPEC must survive a format/parse
 * round trip unchanged (within the printed precision).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/llmsim/fault.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char spec[256];
    char again[256];
    char err[192];
    struct lg_sim_fault f;
    struct lg_sim_fault g;
    struct lg_sim_faults fs = { .n = 0 };

    if (size >= sizeof(spec)) {
        return 0;
    }
    memcpy(spec, data, size);
    spec[size] = '\0';
    err[0] = '\0';
    if (lg_sim_fault_parse(spec, &f, err, sizeof(err)) != LG_OK) {
        LG_BUG_ON(err[0] == '\0');
        return 0;
    }
    LG_BUG_ON(lg_sim_faults_add(&fs, &f, 1000) != LG_OK);
    lg_sim_fault_format(&fs.list[0], 1000, again, sizeof(again));
    LG_BUG_ON(lg_sim_fault_parse(again, &g, err, sizeof(err)) != LG_OK);
    LG_BUG_ON(g.kind != f.kind || g.status != f.status || g.tokens != f.tokens);
    LG_BUG_ON(g.retry_after_s != f.retry_after_s || g.reset != f.reset);
    LG_BUG_ON((g.end_ns == LG_SIM_FAULT_FOREVER) != (f.end_ns == LG_SIM_FAULT_FOREVER));
    /* within the printed precision: 9 decimals */
    LG_BUG_ON(g.hold_ns + 1 < f.hold_ns || g.hold_ns > f.hold_ns + 1);
    LG_BUG_ON(fabs(g.rate - f.rate) > 1e-9 * (1 + f.rate) || fabs(g.prob - f.prob) > 1e-9);
    /* the queries are total functions of the schedule */
    (void)lg_sim_faults_slowdown(&fs, 1000 + f.start_ns);
    (void)lg_sim_faults_next_edge(&fs, 0);
    (void)lg_sim_faults_first_hold(&fs, 1000, size);
    lg_sim_faults_prune(&fs, 1000 + f.start_ns + f.hold_ns);
    return 0;
}
