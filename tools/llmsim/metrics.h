/*
 * metrics.h: llmsim's /metrics exposition, in the vocabulary of the engine
 * it stands for (--flavor), plus flavor-neutral llmsim_* series.
 */
#ifndef LG_SIM_METRICS_H
#define LG_SIM_METRICS_H

struct evbuffer;
struct lg_sim;

/* Appends the Prometheus text exposition (format 0.0.4) to out. */
int lg_sim_metrics_render(const struct lg_sim *sim, struct evbuffer *out);

/* "vllm", "sglang"... */
const char *lg_sim_flavor_name(int flavor);

#endif /* LG_SIM_METRICS_H */
