/*
 * config.h: the validated, immutable gateway configuration.
 *
 * lg_config_load() reads a JSON file, checks every field against the tables
 * in config.c and returns a struct lg_config (config_types.h) that nothing
 * modifies afterwards.
 * A reload builds a new one; whoever holds the old one keeps it alive through
 * lg_config_ref()/lg_config_unref().
 */
#ifndef LG_CONFIG_H
#define LG_CONFIG_H

#include <sys/socket.h>

#include "base/config_types.h"
#include "base/lg_core.h"

/*
 * Loads and validates `path`. On success stores a config with one reference
 * in *out and returns LG_OK. On failure returns LG_EINVAL (or LG_EIO when the
 * file cannot be read) with every error found in errs; *out is untouched.
 * Resolves listen and backend addresses (numeric or via getaddrinfo).
 * errs may be NULL; otherwise it starts zeroed (or freshly freed with
 * lg_config_errors_free()) and errors are appended to it. I/O errors read
 *   FILE: error: cannot read: REASON
 * since they have no position.
 */
int lg_config_load(const char *path, struct lg_config **out, struct lg_config_errors *errs);

/* Same, from memory; `name` stands for the file name in messages. */
int lg_config_load_buffer(const char *text, size_t len, const char *name, struct lg_config **out,
                          struct lg_config_errors *errs);

/* Same as lg_config_load_buffer() with LG_CONFIG_F_* flags (fuzzing, tools). */
int lg_config_load_buffer_flags(const char *text, size_t len, const char *name, unsigned flags,
                                struct lg_config **out, struct lg_config_errors *errs);

struct lg_config *lg_config_ref(struct lg_config *conf);
void lg_config_unref(struct lg_config *conf);

/* Prints each error on its own line to `f` (stderr for --check-config). */
void lg_config_errors_print(const struct lg_config_errors *errs, void *file);
void lg_config_errors_free(struct lg_config_errors *errs);

/*
 * Writes "FILE:LINE:COL" of the value at the JSON pointer in conf's text (of
 * its key, when at_key: where an unknown key belongs; the deepest value
 * that resolves, when the pointer does not), for an error found after the
 * load (a policy refusing its options) to read like the loader's own.
 */
void lg_config_position(const struct lg_config *conf, const char *pointer, bool at_key, char *buf,
                        size_t len);

/* Finds a backend's configuration by name; NULL if absent. */
/*
 * Scale from zero for `model` (scale_from_zero and its models' entries):
 * true when its requests are held while no replica is ready, with the bounds
 * that apply to it.
 */
bool lg_config_sfz(const struct lg_config *conf, const char *model, uint32_t *max_held,
                   uint64_t *hold_ms);

const struct lg_backend_conf *lg_config_backend(const struct lg_config *conf, const char *name);

/* Parses "host:port", "[v6]:port" or ":port" into addr; LG_EINVAL on error. */
int lg_config_parse_address(const char *s, struct sockaddr_storage *addr, socklen_t *len);

#endif /* LG_CONFIG_H */
