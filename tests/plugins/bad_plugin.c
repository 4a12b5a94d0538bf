/*
 * bad_plugin.c: plugins the loader must refuse, one per BAD_* definition
 * (plugins/CMakeLists.txt builds each as lgtest_bad_<what>.so):
 *   BAD_MAJOR      another ABI major
 *   BAD_MINOR      a newer ABI minor than the gateway's
 *   BAD_SMALL_OPS  an ops table too small to hold score
 *   BAD_MISSING_OP score is NULL
 *   BAD_DUP        the name of a built-in policy
 *   BAD_NO_SYMBOL  no lg_plugin_describe at all
 * and one it must load, without lending it the engine model:
 *   MODEL_NEXT     asks for an engine model view newer than the gateway's
 *                  (lgtest_model_next.so, policy "model_next")
 */
#include <llmgate/plugin.h>
#include <stddef.h>

static int
bad_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
           size_t errlen)
{
    (void)host;
    (void)opts;
    (void)err;
    (void)errlen;
    *state = NULL;
    return 0;
}

static void
bad_destroy(void *state)
{
    (void)state;
}

__attribute__((unused)) static void
bad_score(void *state, const struct lg_route_info *req, const struct lg_backend_view *const *c,
          size_t n, double *cost, const char **why)
{
    (void)state;
    (void)req;
    (void)c;
    for (size_t i = 0; i < n; i++) {
        cost[i] = 0;
    }
    *why = "bad";
}

static const struct lg_policy_ops bad_ops = {
#ifdef BAD_SMALL_OPS
    .size = offsetof(struct lg_policy_ops, score),
#else
    .size = sizeof(struct lg_policy_ops),
#endif
#ifdef MODEL_NEXT
    .wants = LG_POLICY_WANTS_MODEL,
    .model_version = LG_ENGINE_MODEL_VERSION + 1,
#endif
    .create = bad_create,
    .destroy = bad_destroy,
#ifndef BAD_MISSING_OP
    .score = bad_score,
#endif
};

static const struct lg_plugin_desc bad_desc = {
#ifdef BAD_MAJOR
    .abi_major = LG_PLUGIN_ABI_MAJOR + 1,
#else
    .abi_major = LG_PLUGIN_ABI_MAJOR,
#endif
#ifdef BAD_MINOR
    .abi_minor = LG_PLUGIN_ABI_MINOR + 1,
#else
    .abi_minor = LG_PLUGIN_ABI_MINOR,
#endif
    .kind = LG_PLUGIN_POLICY,
#ifdef BAD_DUP
    .name = "ttft",
#elif defined(MODEL_NEXT)
    .name = "model_next",
#else
    .name = "bad",
#endif
    .version = "0",
    .ops = &bad_ops,
};

#ifndef BAD_NO_SYMBOL
LG_PLUGIN_EXPORT const struct lg_plugin_desc *
lg_plugin_describe(void)
{
    return &bad_desc;
}
#else
LG_PLUGIN_EXPORT const struct lg_plugin_desc *lg_plugin_describe_typo(void);

LG_PLUGIN_EXPORT const struct lg_plugin_desc *
lg_plugin_describe_typo(void)
{
    return &bad_desc;
}
#endif
