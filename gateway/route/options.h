/*
 * options.h: a policy's options as its create() reads them, through the
 * typed getters of the host API (llmgate/plugin.h: opt_number, opt_bool,
 * opt_duration_ms, opt_size, opt_enum, opt_string), so no policy parses
 * JSON by hand.
 */
#ifndef LG_OPTIONS_H
#define LG_OPTIONS_H

#include <llmgate/plugin.h>

#include <jansson.h>

#include "base/lg_core.h"

#define LG_OPTIONS_MAX      64 /* options one policy may ask for */
#define LG_OPTIONS_NAME_MAX 48 /* bytes of an option's name kept for messages */

/*
 * One create() call's options. The getters record each name asked (for
 * the "unknown option" check after create() and its "known:" list) and the
 * first error, written as "/NAME: why" into err.
 */
struct lg_options {
    json_t *obj; /* borrowed: the options object; NULL = none given */
    char *err;   /* borrowed: create()'s err */
    size_t errlen;
    bool failed;     /* a getter refused a value (err holds the first) */
    bool err_at_key; /* the error is about a key (unknown), not its value */
    size_t nasked;
    char asked[LG_OPTIONS_MAX][LG_OPTIONS_NAME_MAX];
};

/* Starts reading obj (a JSON object or NULL) for one create() into err. */
void lg_options_init(struct lg_options *o, json_t *obj, char *err, size_t errlen);

/*
 * After create() returned rc: refuses options no getter asked for
 * ("/NAME: unknown option (known: a, b)"; keys starting with '#' are
 * comments). Returns LG_OK, or LG_EINVAL with the first error in err (a
 * getter's, create()'s own when rc != 0, or the unknown option's).
 */
int lg_options_finish(struct lg_options *o, int rc);

/* The getters, as the host API lends them (plugin.c puts them in the table). */
int lg_options_number(struct lg_options *o, const char *name, double def, double min, double max,
                      double *out);
int lg_options_bool(struct lg_options *o, const char *name, int def, int *out);
int lg_options_duration_ms(struct lg_options *o, const char *name, uint64_t def, uint64_t min,
                           uint64_t max, uint64_t *out);
int lg_options_size(struct lg_options *o, const char *name, uint64_t def, uint64_t min,
                    uint64_t max, uint64_t *out);
int lg_options_enum(struct lg_options *o, const char *name, const char *const *names, int def,
                    int *out);
int lg_options_string(struct lg_options *o, const char *name, const char *def, const char **out);

#endif /* LG_OPTIONS_H */
