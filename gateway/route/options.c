/*
 * options.c: the host API's typed option getters (options.h): a policy asks
 * for each option by name, type, default and bounds; a refusal is written
 * as "/NAME: why" into create()'s err, which the router places at the
 * option's FILE:LINE:COL; what nobody asked for is an unknown option.
 *
 * Owns nothing: the options object is borrowed from the configuration,
 * names are copied (bounded) so that the check after create() does not
 * rely on the plugin's strings.
 */
#include "route/options.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/config_value.h"

void
lg_options_init(struct lg_options *o, json_t *obj, char *err, size_t errlen)
{
    o->obj = json_is_object(obj) ? obj : NULL;
    o->err = err;
    o->errlen = errlen;
    o->failed = false;
    o->err_at_key = false;
    o->nasked = 0;
    if (errlen > 0) {
        err[0] = '\0';
    }
}

static bool
options_was_asked(const struct lg_options *o, const char *name)
{
    for (size_t i = 0; i < o->nasked; i++) {
        if (strcmp(o->asked[i], name) == 0) {
            return true;
        }
    }
    return false;
}

/* Records that name was asked for; its value, or NULL when not given. */
static json_t *
options_get(struct lg_options *o, const char *name)
{
    if (!options_was_asked(o, name) && o->nasked < LG_OPTIONS_MAX) {
        snprintf(o->asked[o->nasked++], LG_OPTIONS_NAME_MAX, "%s", name);
    }
    return o->obj != NULL ? json_object_get(o->obj, name) : NULL;
}

/* The value as a message shows it: "got 3", "got \"x\"", "got an array". */
static const char *
options_got(char *dst, size_t size, const json_t *v)
{
    char q[CONF_QBUF];

    if (json_is_string(v)) {
        snprintf(dst, size, "%s", lg_conf_quote(q, sizeof(q), json_string_value(v)));
    } else if (json_is_integer(v)) {
        snprintf(dst, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_real(v)) {
        snprintf(dst, size, "%g", json_real_value(v));
    } else {
        snprintf(dst, size, "%s",
                 json_is_object(v)  ? "an object"
                 : json_is_array(v) ? "an array"
                 : json_is_null(v)  ? "null"
                                    : "a boolean");
    }
    return dst;
}

static int __attribute__((format(printf, 3, 4)))
options_fail(struct lg_options *o, const char *name, const char *fmt, ...)
{
    va_list ap;
    size_t off;

    if (o->failed || o->errlen == 0) {
        o->failed = true;
        return -1; /* the first error stands */
    }
    o->failed = true;
    off = (size_t)snprintf(o->err, o->errlen, "/%s: ", name);
    if (off < o->errlen) {
        va_start(ap, fmt);
        vsnprintf(o->err + off, o->errlen - off, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int
lg_options_number(struct lg_options *o, const char *name, double def, double min, double max,
                  double *out)
{
    json_t *v = options_get(o, name);

    *out = def;
    if (v == NULL) {
        return 0;
    }
    if (!json_is_number(v) || json_number_value(v) < min || json_number_value(v) > max) {
        return options_fail(o, name, "must be a number from %g to %g", min, max);
    }
    *out = json_number_value(v);
    return 0;
}

int
lg_options_bool(struct lg_options *o, const char *name, int def, int *out)
{
    json_t *v = options_get(o, name);
    char got[CONF_QBUF];

    *out = def;
    if (v == NULL) {
        return 0;
    }
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    /* 1 and 0, as these flags were written when options were all numbers */
    if (json_is_number(v) && (json_number_value(v) == 0 || json_number_value(v) == 1)) {
        *out = json_number_value(v) == 1;
        return 0;
    }
    return options_fail(o, name, "must be true or false (got %s)",
                        options_got(got, sizeof(got), v));
}

/* A duration or a size: an integer (a duration only 0) or a string with a unit. */
static int
options_scaled(struct lg_options *o, const char *name, bool duration, uint64_t def, uint64_t min,
               uint64_t max, uint64_t *out)
{
    json_t *v = options_get(o, name);
    const char *(*fmt)(char *, size_t, uint64_t) =
        duration ? lg_conf_fmt_duration : lg_conf_fmt_size;
    char got[CONF_QBUF];
    char lo[32];
    char hi[32];
    uint64_t n = 0;

    *out = def;
    if (v == NULL) {
        return 0;
    }
    if (json_is_string(v)) {
        int rc = lg_conf_parse_scaled(json_string_value(v),
                                      duration ? lg_conf_duration_units : lg_conf_size_units, &n);

        if (rc != 0) {
            return options_fail(o, name,
                                duration ? "must be a duration such as \"30s\", \"1.5s\" or "
                                           "\"250ms\" (units ms, s, m, h; got %s)"
                                         : "must be a size such as \"16KiB\" or a number of bytes "
                                           "(units B, KiB, MiB, GiB, kB, MB, GB; got %s)",
                                options_got(got, sizeof(got), v));
        }
    } else if (json_is_integer(v) && json_integer_value(v) >= 0
               && (!duration || json_integer_value(v) == 0)) {
        n = (uint64_t)json_integer_value(v);
    } else {
        return options_fail(o, name,
                            duration ? "must be a duration with a unit, e.g. \"30s\" (got %s)"
                                     : "must be a size, bytes or e.g. \"16KiB\" (got %s)",
                            options_got(got, sizeof(got), v));
    }
    if (n < min || n > max) {
        return options_fail(o, name, "must be between %s and %s (got %s)", fmt(lo, sizeof(lo), min),
                            fmt(hi, sizeof(hi), max), options_got(got, sizeof(got), v));
    }
    *out = n;
    return 0;
}

int
lg_options_duration_ms(struct lg_options *o, const char *name, uint64_t def, uint64_t min,
                       uint64_t max, uint64_t *out)
{
    return options_scaled(o, name, true, def, min, max, out);
}

int
lg_options_size(struct lg_options *o, const char *name, uint64_t def, uint64_t min, uint64_t max,
                uint64_t *out)
{
    return options_scaled(o, name, false, def, min, max, out);
}

int
lg_options_enum(struct lg_options *o, const char *name, const char *const *names, int def, int *out)
{
    json_t *v = options_get(o, name);
    char list[256];
    char got[CONF_QBUF];
    size_t n = 0;

    *out = def;
    if (v == NULL) {
        return 0;
    }
    for (int i = 0; names[i] != NULL; i++) {
        if (json_is_string(v) && strcasecmp(json_string_value(v), names[i]) == 0) {
            *out = i;
            return 0;
        }
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s\"%s\"", i > 0 ? ", " : "", names[i]);
        n = LG_MIN(n, sizeof(list) - 1);
    }
    return options_fail(o, name, "must be one of %s (got %s)", list,
                        options_got(got, sizeof(got), v));
}

int
lg_options_string(struct lg_options *o, const char *name, const char *def, const char **out)
{
    json_t *v = options_get(o, name);
    char got[CONF_QBUF];
    char why[128];

    *out = def;
    if (v == NULL) {
        return 0;
    }
    if (!json_is_string(v)) {
        return options_fail(o, name, "must be a string (got %s)", options_got(got, sizeof(got), v));
    }
    if (!lg_conf_check_printable(json_string_value(v), why, sizeof(why))) {
        return options_fail(o, name, "%s", why);
    }
    *out = json_string_value(v);
    return 0;
}

int
lg_options_finish(struct lg_options *o, int rc)
{
    const char *key;
    json_t *v;

    if (o->failed) {
        return LG_EINVAL;
    }
    if (rc != 0) {
        if (o->errlen > 0 && o->err[0] == '\0') {
            snprintf(o->err, o->errlen, "the policy refused its options");
        }
        return LG_EINVAL;
    }
    if (o->obj == NULL) {
        return LG_OK;
    }
    json_object_foreach (o->obj, key, v) {
        size_t off;

        if (key[0] == '#' || options_was_asked(o, key)) {
            continue; /* a comment, as everywhere in the config; or known */
        }
        o->err_at_key = true;
        off = (size_t)snprintf(o->err, o->errlen, "/%s: unknown option (%s", key,
                               o->nasked ? "known: " : "this policy takes none");
        for (size_t i = 0; i < o->nasked && off < o->errlen; i++) {
            off +=
                (size_t)snprintf(o->err + off, o->errlen - off, "%s%s", i ? ", " : "", o->asked[i]);
        }
        if (off < o->errlen) {
            snprintf(o->err + off, o->errlen - off, ")");
        }
        return LG_EINVAL;
    }
    return LG_OK;
}
