/*
 * least_kv.c: a routing-policy plugin that steers away from replicas whose
 * KV cache is filling up (engines stall admissions, then preempt, when it is
 * full). Built as a shared object against the public ABI only; an example
 * for third-party policies, and composable with the built-ins:
 *
 *   "pipeline": [{"policy": "ttft"}, {"policy": "least_kv", "weight": 1}],
 *   "plugins": ["/usr/lib/llmgate/plugins/least_kv.so"]
 *
 * Cost: ms_per_full * usage^2 (a half-full cache costs a quarter, a full
 * one ms_per_full), 0 when the engine does not report usage or its sample
 * is stale. Options: {"ms_per_full": 1000}.
 * Owns: its state (one double), freed by destroy.
 */
#include <llmgate/plugin.h>
#include <stdio.h>
#include <stdlib.h>

struct least_kv {
    double ms_per_full;
};

/* Options: {} or {"ms_per_full": N}, N >= 0, read with the host's getter
 * (which refuses anything else at its place in the config). */
static int
least_kv_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
                size_t errlen)
{
    struct least_kv *s;
    double v;

    if (host->opt_number(opts, "ms_per_full", 1000, 0, 1e12, &v) != 0) {
        return -1;
    }
    s = malloc(sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->ms_per_full = v;
    *state = s;
    return 0;
}

static void
least_kv_destroy(void *state)
{
    free(state);
}

static void
least_kv_score(void *state, const struct lg_route_info *req,
               const struct lg_backend_view *const *cands, size_t n, double *cost, const char **why)
{
    const struct least_kv *s = state;

    (void)req;
    for (size_t i = 0; i < n; i++) {
        const struct lg_backend_view *v = cands[i];
        double u = v->engine_kv_usage;

        cost[i] = (u >= 0 && !(v->flags & LG_VIEW_F_STALE)) ? s->ms_per_full * u * u : 0;
    }
    *why = "least_kv_usage";
}

static const struct lg_policy_ops least_kv_ops = {
    .size = sizeof(struct lg_policy_ops),
    .create = least_kv_create,
    .destroy = least_kv_destroy,
    .score = least_kv_score,
};

static const struct lg_plugin_desc least_kv_desc = {
    .abi_major = LG_PLUGIN_ABI_MAJOR,
    .abi_minor = LG_PLUGIN_ABI_MINOR,
    .kind = LG_PLUGIN_POLICY,
    .name = "least_kv",
    .version = "1.0",
    .ops = &least_kv_ops,
};

LG_PLUGIN_EXPORT const struct lg_plugin_desc *
lg_plugin_describe(void)
{
    return &least_kv_desc;
}
