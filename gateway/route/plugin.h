/*
 * plugin.h: the policy registry: built-in policies and shared objects
 * loaded with dlopen(), both described by the public ABI
 * (include/llmgate/plugin.h), and the host API lent to them.
 */
#ifndef LG_PLUGIN_H
#define LG_PLUGIN_H

#include <llmgate/plugin.h>
#include <stddef.h>

#include <jansson.h>

#include "base/lg_core.h"

/* Most policies registered at once (built-ins included). */
#define LG_PLUGIN_MAX 64

/* A registered policy. Lives until lg_plugin_unload_all(). */
struct lg_plugin {
    const struct lg_plugin_desc *desc; /* borrowed from the plugin (static there) */
    const struct lg_policy_ops *ops;   /* borrowed, = desc->ops */
    char *path;                        /* owned; NULL for built-ins */
    void *dl;                          /* dlopen() handle; NULL for built-ins */
    bool lends_model;                  /* its views carry the engine model: it asked for it,
                                          at this gateway's LG_ENGINE_MODEL_VERSION */
};

/* An op the host may call: inside the table the plugin built, and set. */
#define LG_POLICY_HAS(ops, op) \
    ((ops)->size >= offsetof(struct lg_policy_ops, op) + sizeof((ops)->op) && (ops)->op != NULL)

/*
 * Checks a descriptor against this gateway's ABI: same major, not a newer
 * minor, a policy, a sane name, an ops table that covers the required ops,
 * none of them NULL. On refusal returns LG_EINVAL with the reason in err.
 */
int lg_plugin_check(const struct lg_plugin_desc *d, char *err, size_t errlen);

/*
 * Loads the shared object at path (dlopen RTLD_NOW | RTLD_LOCAL), checks its
 * descriptor and registers it. Loading the same object again is a no-op;
 * another object with a name already taken is refused. On refusal returns
 * LG_EINVAL with "PATH: reason" in err.
 */
int lg_plugin_load(const char *path, char *err, size_t errlen);

/* The registered policy called name (built-ins always are); NULL if none. */
const struct lg_plugin *lg_plugin_find(const char *name);

/* Comma-separated names of the registered policies, for error messages. */
void lg_plugin_names(char *buf, size_t len);

/* The services lent to every plugin. */
const struct lg_host_api *lg_plugin_host(void);

/*
 * Creates p's state from its options (a JSON object, borrowed; NULL = none)
 * through its create op and the host's option getters. Returns LG_OK, or
 * LG_EINVAL with "/NAME: why" (a JSON pointer relative to the options) in
 * err; *at_key (when not NULL) tells an unknown option (the key is at
 * fault) from a refused value.
 */
int lg_plugin_create(const struct lg_plugin *p, json_t *options, void **state, char *err,
                     size_t errlen, bool *at_key);
/* The same from JSON text (tests, tools). */
int lg_plugin_create_text(const struct lg_plugin *p, const char *options, void **state, char *err,
                          size_t errlen);

/* Fast per-thread pseudo-random numbers (the host API's random). */
uint64_t lg_plugin_random(void);

/* Unregisters and dlclose()s every loaded plugin (tests, exit). */
void lg_plugin_unload_all(void);

/* The built-in policies (policies.c). */
extern const struct lg_plugin_desc *const lg_builtin_policies[];
extern const size_t lg_builtin_npolicies;

#endif /* LG_PLUGIN_H */
