/*
 * config_table.c: walks a JSON document against a table of fields
 * (config_table.h): one setter per type checks and stores each value,
 * unknown keys get a "did you mean", defaults fill what is absent, and
 * every error is collected with its FILE:LINE:COL and JSON pointer
 * (config_loc.c) rather than stopping at the first.
 *
 * Owns nothing: it fills the caller's structs (and frees what it put there,
 * lg_conf_free_fields()); the context's errors belong to the caller.
 * Invariant: the same tables apply defaults, parse and free, so a field
 * added to a table cannot leak.
 */
#include "base/config_table.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/config_types.h"
#include "base/config_loc.h"
#include "base/config_value.h"

#define CONF_PTR_MAX 512 /* bytes of a JSON pointer echoed in a message */
#define CONF_KEY_MAX 64  /* longer keys get no "did you mean" */
#define CONF_MSG_MAX 1024

typedef void (*conf_set_fn)(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v,
                            void *base);

static void conf_set_field(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v,
                           void *base);

/* ---- messages ----------------------------------------------------------- */

static const char *
conf_json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* The value as written, for "(got ...)". */
static const char *
conf_got(char *dst, size_t size, const json_t *v)
{
    if (json_is_string(v)) {
        return lg_conf_quote(dst, size, json_string_value(v));
    }
    if (json_is_integer(v)) {
        snprintf(dst, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    } else if (json_is_real(v)) {
        snprintf(dst, size, "%g", json_real_value(v));
    } else {
        snprintf(dst, size, "%s", conf_json_kind(v));
    }
    return dst;
}

void __attribute__((format(printf, 2, 3)))
lg_conf_errors_add(struct lg_config_errors *errs, const char *fmt, ...)
{
    va_list ap;
    char *msg;

    if (errs == NULL) {
        return;
    }
    if (errs->n >= LG_CONFIG_MAX_ERRORS) {
        errs->dropped++;
        return;
    }
    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0) {
        msg = lg_xstrdup("out of memory formatting a config error");
    }
    va_end(ap);
    errs->msgs[errs->n++] = msg;
}

/* Records an error about the value at ctx->ptr (its key when at_key). */
void __attribute__((format(printf, 3, 0)))
lg_conf_verror(struct lg_conf_ctx *ctx, bool at_key, const char *fmt, va_list ap)
{
    char what[CONF_MSG_MAX];
    char where[CONF_PTR_MAX * 4 + 8];
    int line;
    int col;

    ctx->nerrors++;
    if (ctx->errs == NULL) {
        return;
    }
    if (ctx->errs->n >= LG_CONFIG_MAX_ERRORS) {
        ctx->errs->dropped++; /* and spare the walk through the text */
        return;
    }
    vsnprintf(what, sizeof(what), fmt, ap);
    if (at_key) {
        lg_config_loc_find_key(ctx->text, ctx->len, ctx->ptr, &line, &col);
    } else {
        lg_config_loc_find(ctx->text, ctx->len, ctx->ptr, &line, &col);
    }
    lg_conf_errors_add(ctx->errs, "%s:%d:%d: error: %s: %s", ctx->name, line, col,
                       ctx->ptr_len > 0
                           ? lg_conf_escape(where, sizeof(where), ctx->ptr, CONF_PTR_MAX, false)
                           : "/",
                       what);
}

static void __attribute__((format(printf, 2, 3)))
conf_error(struct lg_conf_ctx *ctx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    lg_conf_verror(ctx, false, fmt, ap);
    va_end(ap);
}

static void __attribute__((format(printf, 2, 3)))
conf_error_key(struct lg_conf_ctx *ctx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    lg_conf_verror(ctx, true, fmt, ap);
    va_end(ap);
}

/* ---- the JSON pointer of the value being checked ------------------------ */

void
lg_conf_ptr_add(struct lg_conf_ctx *ctx, const char *s, size_t n)
{
    if (ctx->ptr_len + n + 1 > ctx->ptr_cap) {
        ctx->ptr_cap = LG_MAX(ctx->ptr_cap * 2, ctx->ptr_len + n + 64);
        ctx->ptr = lg_xrealloc(ctx->ptr, ctx->ptr_cap);
    }
    memcpy(ctx->ptr + ctx->ptr_len, s, n);
    ctx->ptr_len += n;
    ctx->ptr[ctx->ptr_len] = '\0';
}

/* Appends "/key" with '~' and '/' escaped (RFC 6901 section 3); returns the
 * mark for lg_conf_ptr_pop(). */
static size_t
conf_ptr_push_key(struct lg_conf_ctx *ctx, const char *key)
{
    size_t mark = ctx->ptr_len;

    lg_conf_ptr_add(ctx, "/", 1);
    for (const char *p = key; *p != '\0'; p++) {
        if (*p == '~') {
            lg_conf_ptr_add(ctx, "~0", 2);
        } else if (*p == '/') {
            lg_conf_ptr_add(ctx, "~1", 2);
        } else {
            lg_conf_ptr_add(ctx, p, 1);
        }
    }
    return mark;
}

static size_t
conf_ptr_push_index(struct lg_conf_ctx *ctx, size_t i)
{
    size_t mark = ctx->ptr_len;
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "/%zu", i);

    lg_conf_ptr_add(ctx, buf, (size_t)n);
    return mark;
}

void
lg_conf_ptr_pop(struct lg_conf_ctx *ctx, size_t mark)
{
    ctx->ptr_len = mark;
    if (ctx->ptr != NULL) {
        ctx->ptr[mark] = '\0';
    }
}

/* Range check shared by integers, durations and sizes. */
static bool
conf_in_range(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, double x,
              const char *(*fmt)(char *, size_t, uint64_t))
{
    char lo[32];
    char hi[32];
    char got[CONF_QBUF];

    if (x >= f->min && x <= f->max) {
        return true;
    }
    if (fmt != NULL) {
        fmt(lo, sizeof(lo), (uint64_t)f->min);
        fmt(hi, sizeof(hi), (uint64_t)f->max);
    } else {
        snprintf(lo, sizeof(lo), "%g", f->min);
        snprintf(hi, sizeof(hi), "%g", f->max);
    }
    conf_error(ctx, "must be between %s and %s (got %s)", lo, hi, conf_got(got, sizeof(got), v));
    return false;
}

void
lg_conf_warn_at(struct lg_conf_ctx *ctx, const char *suffix, const char *fmt, ...)
{
    char what[CONF_MSG_MAX];
    char where[CONF_PTR_MAX * 4 + 8];
    size_t mark = ctx->ptr_len;
    char *msg;
    int line;
    int col;
    va_list ap;

    if (ctx->nwarnings >= LG_CONFIG_MAX_ERRORS) {
        return;
    }
    lg_conf_ptr_add(ctx, suffix, strlen(suffix));
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    lg_config_loc_find(ctx->text, ctx->len, ctx->ptr, &line, &col);
    if (asprintf(&msg, "%s:%d:%d: warning: %s: %s", ctx->name, line, col,
                 lg_conf_escape(where, sizeof(where), ctx->ptr, CONF_PTR_MAX, false), what)
        >= 0) {
        ctx->warnings = lg_xrealloc(ctx->warnings, (ctx->nwarnings + 1) * sizeof(*ctx->warnings));
        ctx->warnings[ctx->nwarnings++] = msg;
    }
    lg_conf_ptr_pop(ctx, mark);
}

/* ---- setters, one per type ---------------------------------------------- */

static void *
conf_at(void *base, size_t offset)
{
    return (char *)base + offset;
}

static void
conf_type_error(struct lg_conf_ctx *ctx, const char *expected, const json_t *v)
{
    conf_error(ctx, "expected %s, got %s", expected, conf_json_kind(v));
}

/* The value of a string field once checked; NULL (and reported) otherwise. */
static const char *
conf_string(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v)
{
    char why[CONF_MSG_MAX];
    lg_conf_check_fn check = f->check;
    const char *s;

    if (check == lg_conf_check_name && (ctx->flags & LG_CONFIG_F_EXPANDED)) {
        check = lg_conf_check_expanded_name;
    }
    if (!json_is_string(v)) {
        conf_type_error(ctx, "a string", v);
        return NULL;
    }
    s = json_string_value(v);
    if (s[0] == '\0') {
        conf_error(ctx, "must not be empty");
        return NULL;
    }
    if (!lg_conf_check_printable(s, why, sizeof(why))
        || (check != NULL && !check(s, why, sizeof(why)))) {
        conf_error(ctx, "%s", why);
        return NULL;
    }
    return s;
}

static void
conf_set_str(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char **dst = conf_at(base, f->offset);
    const char *s = conf_string(ctx, f, v);

    if (s != NULL) {
        free(*dst);
        *dst = lg_xstrdup(s);
    }
}

static void
conf_set_file(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char **dst = conf_at(base, f->offset);
    const char *s = conf_string(ctx, f, v);
    char q[CONF_QBUF];
    struct stat st;
    int fd;

    if (s == NULL) {
        return;
    }
    /* O_NONBLOCK: a FIFO given by mistake must not hang the load */
    fd = open(s, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        conf_error(ctx, "cannot read %s: %s", lg_conf_quote(q, sizeof(q), s),
                   fd < 0 ? strerror(errno) : "not a regular file");
    } else {
        free(*dst);
        *dst = lg_xstrdup(s);
    }
    if (fd >= 0) {
        close(fd);
    }
}

static void
conf_set_bool(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    if (!json_is_boolean(v)) {
        conf_type_error(ctx, "a boolean", v);
        return;
    }
    *(bool *)conf_at(base, f->offset) = json_is_true(v);
}

static void
conf_set_uint(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char expected[48];

    if (f->zero_word != NULL && json_is_string(v)
        && strcasecmp(json_string_value(v), f->zero_word) == 0) {
        *(uint32_t *)conf_at(base, f->offset) = 0;
        return;
    }
    if (!json_is_integer(v)) {
        if (f->zero_word != NULL) {
            snprintf(expected, sizeof(expected), "an integer or \"%s\"", f->zero_word);
        }
        conf_type_error(ctx, f->zero_word != NULL ? expected : "an integer", v);
        return;
    }
    if (conf_in_range(ctx, f, v, (double)json_integer_value(v), NULL)) {
        *(uint32_t *)conf_at(base, f->offset) = (uint32_t)json_integer_value(v);
    }
}

static void
conf_set_double(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    if (!json_is_number(v)) {
        conf_type_error(ctx, "a number", v);
        return;
    }
    if (conf_in_range(ctx, f, v, json_number_value(v), NULL)) {
        *(double *)conf_at(base, f->offset) = json_number_value(v);
    }
}

static void
conf_set_duration(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char q[CONF_QBUF];
    uint64_t ms = 0;
    int rc;

    if (json_is_number(v) && !(json_is_integer(v) && json_integer_value(v) == 0)) {
        conf_error(ctx, "durations need a unit, e.g. \"30s\" (got %s)", conf_got(q, sizeof(q), v));
        return;
    }
    if (json_is_string(v)) {
        rc = lg_conf_parse_scaled(json_string_value(v), lg_conf_duration_units, &ms);
        if (rc == -2) {
            conf_error(ctx, "%s is not a whole number of milliseconds", conf_got(q, sizeof(q), v));
            return;
        }
        if (rc != 0) {
            conf_error(ctx,
                       "invalid duration %s; use a number and a unit: ms, s, m or h (e.g. "
                       "\"30s\", \"1.5s\", \"250ms\")",
                       conf_got(q, sizeof(q), v));
            return;
        }
    } else if (!json_is_integer(v)) {
        conf_type_error(ctx, "a duration such as \"30s\"", v);
        return;
    }
    if (conf_in_range(ctx, f, v, (double)ms, lg_conf_fmt_duration)) {
        *(uint64_t *)conf_at(base, f->offset) = ms;
        if (f->warn_above > 0 && (double)ms > f->warn_above) {
            char d[32];

            lg_conf_warn_at(ctx, "", "%s is practically no timeout: %s; the default is %s",
                            lg_conf_fmt_duration(q, sizeof(q), ms), f->warn,
                            lg_conf_fmt_duration(d, sizeof(d), (uint64_t)f->def));
        }
    }
}

static void
conf_set_size(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char q[CONF_QBUF];
    uint64_t n = 0;
    int rc;

    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0) {
            conf_in_range(ctx, f, v, (double)json_integer_value(v), lg_conf_fmt_size);
            return;
        }
        n = (uint64_t)json_integer_value(v);
    } else if (json_is_string(v)) {
        rc = lg_conf_parse_scaled(json_string_value(v), lg_conf_size_units, &n);
        if (rc == -2) {
            conf_error(ctx, "%s is not a whole number of bytes", conf_got(q, sizeof(q), v));
            return;
        }
        if (rc != 0) {
            conf_error(ctx,
                       "invalid size %s; use bytes or a number and a unit: B, KiB, MiB, GiB "
                       "(1024-based) or kB, MB, GB (1000-based), e.g. \"16KiB\"",
                       conf_got(q, sizeof(q), v));
            return;
        }
    } else {
        conf_type_error(ctx, "a size (bytes, or a string such as \"16KiB\")", v);
        return;
    }
    if (conf_in_range(ctx, f, v, (double)n, lg_conf_fmt_size)) {
        *(size_t *)conf_at(base, f->offset) = (size_t)n;
    }
}

static void
conf_set_enum(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char list[256];
    char q[CONF_QBUF];
    size_t n = 0;

    if (!json_is_string(v)) {
        conf_type_error(ctx, "a string", v);
        return;
    }
    for (int i = 0; f->names[i] != NULL; i++) {
        if (strcasecmp(json_string_value(v), f->names[i]) == 0) {
            *(int *)conf_at(base, f->offset) = i;
            return;
        }
        n += (size_t)snprintf(list + n, sizeof(list) - n, "%s\"%s\"", i > 0 ? ", " : "",
                              f->names[i]);
        n = LG_MIN(n, sizeof(list) - 1);
    }
    conf_error(ctx, "must be one of %s (got %s)", list, conf_got(q, sizeof(q), v));
}

static void
conf_set_address(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char **dst = conf_at(base, f->offset);
    char why[CONF_MSG_MAX];

    if (!json_is_string(v)) {
        conf_type_error(ctx, "an address string such as \"127.0.0.1:8080\"", v);
        return;
    }
    if (lg_conf_address_parse(json_string_value(v), ctx->flags, conf_at(base, f->aux_offset),
                              conf_at(base, f->aux2_offset), why, sizeof(why))
        != 0) {
        conf_error(ctx, "%s", why);
        return;
    }
    free(*dst);
    *dst = lg_xstrdup(json_string_value(v));
}

static void
conf_set_url(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    struct lg_backend_conf *b = base;
    char why[CONF_MSG_MAX];

    if (!json_is_string(v)) {
        conf_type_error(ctx, "a URL string such as \"http://127.0.0.1:8000\"", v);
        return;
    }
    lg_conf_url_free(b);
    if (lg_conf_url_parse(json_string_value(v), b, why, sizeof(why)) != 0
        || lg_conf_resolve(b->host, b->port, ctx->flags, &b->addr, &b->addrlen, why, sizeof(why))
               != 0) {
        conf_error(ctx, "%s", why);
    }
}

static void
conf_strv_free(char **v)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++) {
        free(v[i]);
    }
    free(v);
}

/* Checks an array's type and length; on success returns true. */
static bool
conf_array_ok(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, const char *what)
{
    size_t n;

    if (!json_is_array(v)) {
        conf_type_error(ctx, what, v);
        return false;
    }
    n = json_array_size(v);
    if ((double)n < f->min) {
        if (f->min == 1) {
            conf_error(ctx, "must not be empty");
        } else {
            conf_error(ctx, "must have at least %.0f entries (got %zu)", f->min, n);
        }
        return false;
    }
    if ((double)n > f->max) {
        conf_error(ctx, "must have at most %.0f entries (got %zu)", f->max, n);
        return false;
    }
    return true;
}

/* An array of names, each once: their bits (f->bit) in a uint32_t. */
static void
conf_set_mask(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    uint32_t mask = 0;
    size_t i;
    char why[CONF_MSG_MAX];
    char q[CONF_QBUF];
    json_t *e;

    if (!conf_array_ok(ctx, f, v, "an array of strings")) {
        return;
    }
    json_array_foreach (v, i, e) {
        size_t mark = conf_ptr_push_index(ctx, i);
        const char *s = json_string_value(e);
        int bit = s != NULL ? f->bit(s, why, sizeof(why)) : -1;

        if (s == NULL) {
            conf_type_error(ctx, "a string", e);
        } else if (bit < 0) {
            conf_error(ctx, "%s", why);
        } else if (mask & (1u << bit)) {
            conf_error(ctx, "duplicate entry %s", lg_conf_quote(q, sizeof(q), s));
        } else {
            mask |= 1u << bit;
        }
        lg_conf_ptr_pop(ctx, mark);
    }
    *(uint32_t *)conf_at(base, f->offset) = mask;
}

static void
conf_set_strarray(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char ***dst = conf_at(base, f->offset);
    size_t *count = conf_at(base, f->aux_offset);
    size_t k = 0;
    size_t i;
    char why[CONF_MSG_MAX];
    char q[CONF_QBUF];
    char **out;
    json_t *e;

    if (!conf_array_ok(ctx, f, v, "an array of strings")) {
        return;
    }
    out = lg_xcalloc(json_array_size(v) + 1, sizeof(*out));
    json_array_foreach (v, i, e) {
        size_t mark = conf_ptr_push_index(ctx, i);
        size_t j;
        const char *s = json_string_value(e);

        if (s == NULL) {
            conf_type_error(ctx, "a string", e);
        } else if (s[0] == '\0') {
            conf_error(ctx, "must not be empty");
        } else if (!lg_conf_check_printable(s, why, sizeof(why))) {
            conf_error(ctx, "%s", why);
        } else if (f->check != NULL && !f->check(s, why, sizeof(why))) {
            conf_error(ctx, "%s", why);
        } else {
            for (j = 0; f->unique && j < i; j++) {
                if (json_equal(e, json_array_get(v, j))) {
                    conf_error(ctx, "duplicate entry %s (first at index %zu)",
                               lg_conf_quote(q, sizeof(q), s), j);
                    break;
                }
            }
            if (!f->unique || j == i) {
                out[k++] = lg_xstrdup(s);
            }
        }
        lg_conf_ptr_pop(ctx, mark);
    }
    conf_strv_free(*dst);
    *dst = out;
    *count = k;
}

static const struct lg_conf_field *
conf_field_find(const struct lg_conf_table *t, const char *name)
{
    for (const struct lg_conf_field *f = t->fields; f->name != NULL; f++) {
        if (strcmp(f->name, name) == 0) {
            return f;
        }
    }
    return NULL;
}

void
lg_conf_defaults(const struct lg_conf_table *t, void *base)
{
    for (const struct lg_conf_field *f = t->fields; f->name != NULL; f++) {
        void *p = conf_at(base, f->offset);

        switch (f->type) {
        case LG_CONF_STR:
        case LG_CONF_FILE:
            *(char **)p = f->def_str != NULL ? lg_xstrdup(f->def_str) : NULL;
            break;
        case LG_CONF_BOOL:
            *(bool *)p = f->def != 0;
            break;
        case LG_CONF_UINT:
            *(uint32_t *)p = (uint32_t)f->def;
            break;
        case LG_CONF_DOUBLE:
            *(double *)p = f->def;
            break;
        case LG_CONF_DURATION:
            *(uint64_t *)p = (uint64_t)f->def;
            break;
        case LG_CONF_SIZE:
            *(size_t *)p = (size_t)f->def;
            break;
        case LG_CONF_ENUM:
            *(int *)p = (int)f->def;
            break;
        case LG_CONF_MASK:
            *(uint32_t *)p = (uint32_t)f->def;
            break;
        case LG_CONF_OBJECT:
            lg_conf_defaults(f->sub, p);
            break;
        default:
            break; /* NULL / empty, from the zeroed allocation */
        }
    }
}

/* An object, or a string standing for {f->shorthand: s}. */
static void
conf_set_object(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    void *sub = conf_at(base, f->offset);
    size_t before = ctx->nerrors;

    if (f->shorthand != NULL && json_is_string(v)) {
        conf_set_field(ctx, conf_field_find(f->sub, f->shorthand), v, sub);
        if (f->sub->check != NULL) {
            f->sub->check(ctx, sub, ctx->nerrors == before);
        }
        return;
    }
    if (f->off_false && json_is_boolean(v)) {
        if (json_is_false(v)) {
            lg_conf_free_fields(f->sub, sub); /* off: every string NULL */
        }
        return;
    }
    if (!json_is_object(v)) {
        conf_type_error(ctx,
                        f->off_false   ? "a string, an object or false"
                        : f->shorthand ? "a string or an object"
                                       : "an object",
                        v);
        return;
    }
    lg_conf_object(ctx, f->sub, v, sub);
}

static void
conf_set_objarray(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    const struct lg_conf_table *t = f->sub;
    struct lg_conf_field elem = {
        .name = f->name, .type = LG_CONF_OBJECT, .sub = t, .shorthand = f->shorthand
    };
    char **dst = conf_at(base, f->offset);
    size_t *count = conf_at(base, f->aux_offset);
    size_t n;
    size_t i;
    json_t *e;

    if (f->shorthand != NULL && (json_is_string(v) || json_is_object(v))) {
        n = 1; /* a single element stands for a one-element array */
    } else if (!conf_array_ok(ctx, f, v,
                              f->shorthand != NULL ? "a string, an object or an array"
                                                   : "an array")) {
        return;
    } else {
        n = json_array_size(v);
    }
    LG_BUG_ON(*dst != NULL);
    *dst = lg_xcalloc(n, t->size);
    *count = n;
    for (i = 0; i < n; i++) {
        lg_conf_defaults(t, *dst + i * t->size);
    }
    if (!json_is_array(v)) {
        conf_set_object(ctx, &elem, v, *dst);
        return;
    }
    json_array_foreach (v, i, e) {
        size_t mark = conf_ptr_push_index(ctx, i);

        conf_set_object(ctx, &elem, e, *dst + i * t->size);
        lg_conf_ptr_pop(ctx, mark);
    }
}

static void
conf_set_json(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    if (!json_is_object(v)) {
        conf_type_error(ctx, "an object", v);
        return;
    }
    *(json_t **)conf_at(base, f->offset) = v; /* borrowed: the root keeps it alive */
}

static const conf_set_fn conf_setters[] = {
    [LG_CONF_STR] = conf_set_str,           [LG_CONF_FILE] = conf_set_file,
    [LG_CONF_BOOL] = conf_set_bool,         [LG_CONF_UINT] = conf_set_uint,
    [LG_CONF_DOUBLE] = conf_set_double,     [LG_CONF_DURATION] = conf_set_duration,
    [LG_CONF_SIZE] = conf_set_size,         [LG_CONF_ENUM] = conf_set_enum,
    [LG_CONF_ADDRESS] = conf_set_address,   [LG_CONF_URL] = conf_set_url,
    [LG_CONF_STRARRAY] = conf_set_strarray, [LG_CONF_OBJECT] = conf_set_object,
    [LG_CONF_OBJARRAY] = conf_set_objarray, [LG_CONF_JSON] = conf_set_json,
    [LG_CONF_MASK] = conf_set_mask,
};

static void
conf_set_field(struct lg_conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    conf_setters[f->type](ctx, f, v, base);
}

/* ---- objects ------------------------------------------------------------ */

/* Optimal string alignment distance (Damerau-Levenshtein without repeated
 * edits of a substring); both strings at most CONF_KEY_MAX bytes. */
static size_t
conf_distance(const char *a, const char *b)
{
    size_t la = strlen(a);
    size_t lb = strlen(b);
    size_t rows[3][CONF_KEY_MAX + 1];
    size_t *pp = rows[0];
    size_t *p = rows[1];
    size_t *c = rows[2];

    for (size_t j = 0; j <= lb; j++) {
        p[j] = j;
    }
    for (size_t i = 1; i <= la; i++) {
        size_t *t;

        c[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1];

            c[j] = LG_MIN(LG_MIN(p[j] + 1, c[j - 1] + 1), p[j - 1] + cost);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
                c[j] = LG_MIN(c[j], pp[j - 2] + 1);
            }
        }
        t = pp;
        pp = p;
        p = c;
        c = t;
    }
    return p[lb];
}

/* The key the author most likely meant: edit distance <= 2, else a prefix
 * either way (of at least 3 characters); NULL if none. */
static const char *
conf_suggest(const struct lg_conf_table *t, const char *key)
{
    const char *best = NULL;
    size_t best_d = 3;
    size_t lk = strlen(key);

    if (lk > CONF_KEY_MAX) {
        return NULL;
    }
    for (const struct lg_conf_field *f = t->fields; f->name != NULL; f++) {
        size_t d = conf_distance(key, f->name);

        if (d < best_d && d < lk) {
            best = f->name;
            best_d = d;
        }
    }
    for (const struct lg_conf_field *f = t->fields; best == NULL && f->name != NULL; f++) {
        size_t lf = strlen(f->name);

        if ((lk >= 3 && lk < lf && strncmp(f->name, key, lk) == 0)
            || (lf >= 3 && lf < lk && strncmp(key, f->name, lf) == 0)) {
            best = f->name;
        }
    }
    return best;
}

void
lg_conf_object(struct lg_conf_ctx *ctx, const struct lg_conf_table *t, json_t *obj, void *base)
{
    size_t before = ctx->nerrors;
    const char *key;
    const char *hint;
    char q[CONF_QBUF];
    char q2[CONF_QBUF];
    json_t *v;

    if (!json_is_object(obj)) {
        conf_type_error(ctx, "an object", obj);
        return;
    }
    json_object_foreach (obj, key, v) {
        const struct lg_conf_field *f;
        size_t mark;

        if (key[0] == '#') {
            continue; /* a comment */
        }
        mark = conf_ptr_push_key(ctx, key);
        f = conf_field_find(t, key);
        if (f == NULL) {
            hint = conf_suggest(t, key);
            if (hint != NULL) {
                conf_error_key(ctx, "unknown key %s; did you mean %s?",
                               lg_conf_quote(q, sizeof(q), key),
                               lg_conf_quote(q2, sizeof(q2), hint));
            } else {
                conf_error_key(ctx, "unknown key %s", lg_conf_quote(q, sizeof(q), key));
            }
        } else if (!json_is_null(v) || f->required) {
            conf_set_field(ctx, f, v, base);
        }
        lg_conf_ptr_pop(ctx, mark);
    }
    for (const struct lg_conf_field *f = t->fields; f->name != NULL; f++) {
        if (f->required && json_object_get(obj, f->name) == NULL
            && (f->unless == NULL || json_object_get(obj, f->unless) == NULL)) {
            conf_error(ctx, "missing required key %s", lg_conf_quote(q, sizeof(q), f->name));
        }
    }
    if (t->check != NULL) {
        t->check(ctx, base, ctx->nerrors == before);
    }
}

void
lg_conf_free_fields(const struct lg_conf_table *t, void *base)
{
    for (const struct lg_conf_field *f = t->fields; f->name != NULL; f++) {
        void *p = conf_at(base, f->offset);

        switch (f->type) {
        case LG_CONF_STR:
        case LG_CONF_FILE:
        case LG_CONF_ADDRESS:
            free(*(char **)p);
            *(char **)p = NULL;
            break;
        case LG_CONF_URL:
            lg_conf_url_free(base);
            break;
        case LG_CONF_STRARRAY:
            conf_strv_free(*(char ***)p);
            *(char ***)p = NULL;
            *(size_t *)conf_at(base, f->aux_offset) = 0;
            break;
        case LG_CONF_OBJECT:
            lg_conf_free_fields(f->sub, p);
            break;
        case LG_CONF_OBJARRAY: {
            char *arr = *(char **)p;
            size_t *count = conf_at(base, f->aux_offset);

            for (size_t i = 0; arr != NULL && i < *count; i++) {
                lg_conf_free_fields(f->sub, arr + i * f->sub->size);
            }
            free(arr);
            *(char **)p = NULL;
            *count = 0;
            break;
        }
        default:
            break;
        }
    }
}
