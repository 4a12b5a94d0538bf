/*
 * config_table.h: configuration fields declared in tables, and the walk of
 * a JSON document against them (config_table.c). For the configuration's
 * schema (config.c) only: each key is one struct lg_conf_field (type,
 * offset, default, bounds), each object a struct lg_conf_table.
 */
#ifndef LG_CONFIG_TABLE_H
#define LG_CONFIG_TABLE_H

#include <stdarg.h>

#include <jansson.h>

#include "base/lg_core.h"

struct lg_config_errors;

/* Units for durations (stored in ms) and sizes (stored in bytes). */
#define CONF_MS(x)  ((double)(x))
#define CONF_S(x)   ((double)(x)*1000.0)
#define CONF_M(x)   ((double)(x)*60000.0)
#define CONF_H(x)   ((double)(x)*3600000.0)
#define CONF_KIB(x) ((double)(x)*1024.0)
#define CONF_MIB(x) ((double)(x)*1048576.0)
#define CONF_GIB(x) ((double)(x)*1073741824.0)

enum lg_conf_type {
    LG_CONF_STR,      /* char *: non-empty, no control characters, then .check */
    LG_CONF_FILE,     /* char *: a file readable at load time */
    LG_CONF_BOOL,     /* bool */
    LG_CONF_UINT,     /* uint32_t: an integer in [min, max] */
    LG_CONF_DOUBLE,   /* double: a number in [min, max] */
    LG_CONF_DURATION, /* uint64_t ms: "250ms", "1.5s", "5m", "1h" (or 0) in [min, max] */
    LG_CONF_SIZE,     /* size_t bytes: an integer or "16KiB", "8MiB", "1GB" in [min, max] */
    LG_CONF_ENUM,     /* int: index into .names, matched without case */
    LG_CONF_ADDRESS,  /* char * + sockaddr_storage at .aux_offset + socklen_t at .aux2_offset */
    LG_CONF_URL,      /* backend URL: fills the url fields of struct lg_backend_conf */
    LG_CONF_STRARRAY, /* char ** NULL-terminated + size_t count at .aux_offset; [min, max] */
    LG_CONF_OBJECT,   /* struct at offset described by .sub */
    LG_CONF_OBJARRAY, /* array of .sub->size structs + size_t count at .aux_offset; [min, max] */
    LG_CONF_JSON,     /* json_t * object, borrowed from the root */
    LG_CONF_MASK,     /* uint32_t: an array of names, each once, a bit each (.bit); .def when
                         absent */
};

struct lg_conf_ctx;
struct lg_conf_table;

/* Extra check for a string; on failure writes the reason into why. */
typedef bool (*lg_conf_check_fn)(const char *s, char *why, size_t whysz);

/* A MASK entry's bit (0..31), or -1 with the reason in why. */
typedef int (*lg_conf_bit_fn)(const char *name, char *why, size_t whysz);

struct lg_conf_field {
    const char *name;
    enum lg_conf_type type;
    uint32_t offset; /* offsetof() into the table's struct */
    bool required;
    bool unique;                     /* STRARRAY: no repeated entry */
    double min, max;                 /* value bounds, or entry counts for arrays */
    double def;                      /* numeric default (ms, bytes, enum index) */
    const char *def_str;             /* STR default */
    const char *const *names;        /* ENUM values */
    const struct lg_conf_table *sub; /* OBJECT, OBJARRAY */
    const char *shorthand;           /* OBJECT, OBJARRAY: a string stands for {shorthand: s} */
    bool off_false;                  /* OBJECT: false turns it off (its strings NULL), true
                                        means its defaults */
    double warn_above;               /* DURATION: above this (ms) it is practically none: a
                                        warning says what that exposes (.warn); 0: never */
    const char *warn;
    const char *unless;              /* required, unless this sibling key is present */
    const char *zero_word;           /* UINT: this string (any case) stands for 0 */
    uint32_t aux_offset;             /* see enum lg_conf_type */
    uint32_t aux2_offset;
    lg_conf_check_fn check; /* STR, and each string of a STRARRAY */
    lg_conf_bit_fn bit;     /* MASK */
};

struct lg_conf_table {
    size_t size; /* of the struct the offsets refer to */
    const struct lg_conf_field *fields;
    /* Cross-field checks once the fields are set; clean: no error below this object. */
    void (*check)(struct lg_conf_ctx *ctx, void *base, bool clean);
};

struct lg_conf_ctx {
    const char *name; /* file name in messages */
    const char *text; /* raw document, for config_loc */
    size_t len;
    unsigned flags; /* LG_CONFIG_F_* */
    struct lg_config_errors *errs;
    size_t nerrors; /* every error, kept or dropped */
    char *ptr;      /* JSON pointer of the value being checked ("" = root) */
    size_t ptr_len, ptr_cap;
    char **warnings; /* owned until they move to the config: FILE:LINE:COL: warning: ... */
    size_t nwarnings;
};

/* Adds a message to errs (the first LG_CONFIG_MAX_ERRORS are kept). */
void lg_conf_errors_add(struct lg_config_errors *errs, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Records an error about the value at ctx->ptr (its key when at_key), with
 * its FILE:LINE:COL. */
void lg_conf_verror(struct lg_conf_ctx *ctx, bool at_key, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Records a warning about the value at ctx->ptr + suffix: a risky setting, not an error. */
void lg_conf_warn_at(struct lg_conf_ctx *ctx, const char *suffix, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The JSON pointer of the value being checked: append n bytes of s (an
 * already escaped segment); pop back to a length taken before. */
void lg_conf_ptr_add(struct lg_conf_ctx *ctx, const char *s, size_t n);
void lg_conf_ptr_pop(struct lg_conf_ctx *ctx, size_t mark);

/* Sets every field of t in base to its default (before a document is read). */
void lg_conf_defaults(const struct lg_conf_table *t, void *base);
/* Reads obj into base against t: every key checked and set, unknown keys
 * refused (with a suggestion), then t's cross-field check. */
void lg_conf_object(struct lg_conf_ctx *ctx, const struct lg_conf_table *t, json_t *obj,
                    void *base);
/* Frees what the fields of t own in base. */
void lg_conf_free_fields(const struct lg_conf_table *t, void *base);

#endif /* LG_CONFIG_TABLE_H */
