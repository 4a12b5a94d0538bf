/*
 * metrics.h: llmsim's /metrics exposition, in the vocabulary of the engine
 * it stands for (--flavor), plus flavor-neutral llmsim_* series.
 */
#ifndef LG_SIM_METRICS_H
#define LG_SIM_METRICS_H

#include <stddef.h>

struct evbuffer;
struct lg_sim;

/* Appends the Prometheus text exposition (format 0.0.4) to out. */
int lg_sim_metrics_render(const struct lg_sim *sim, struct evbuffer *out);

/* Python's repr() of a float: the fewest digits that read back, "7.0", "0.25",
 * "1e-05", "1e+16" (an exponent below 1e-4 and from 1e16 on). */
void lg_sim_py_repr(char *buf, size_t len, double v);

/* "vllm", "sglang"... */
const char *lg_sim_flavor_name(int flavor);

#endif /* LG_SIM_METRICS_H */
