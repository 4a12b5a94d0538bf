/*
 * config.c: JSON config file -> validated, immutable struct lg_config.
 * Every key is declared once in the tables below (type, offset, default,
 * bounds); generic setters walk the document against them, collect every
 * error with FILE:LINE:COL (config_loc.c) and never stop at the first.
 * Owns: each struct lg_config it builds (strings, arrays, the parsed json_t)
 * until its last lg_config_unref(). Borrows: text and name during a load.
 * Invariant: the same tables apply defaults, parse and free, so a field
 * added to a table cannot leak.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "config_loc.h"

#define CONF_MAX_WORKERS 256
#define CONF_QUOTE_MAX   64 /* bytes of a value echoed in a message */
#define CONF_QBUF        (CONF_QUOTE_MAX * 4 + 8)
#define CONF_PTR_MAX     512 /* bytes of a JSON pointer echoed in a message */
#define CONF_KEY_MAX     64  /* longer keys get no "did you mean" */
#define CONF_NAME_MAX    64  /* backend names */
#define CONF_XNAME_MAX   128 /* backend names in an expanded document (NAME@[v6]:port) */
#define CONF_MSG_MAX     1024

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
};

struct conf_ctx;
struct lg_conf_table;

/* Extra check for a string; on failure writes the reason into why. */
typedef bool (*conf_check_fn)(const char *s, char *why, size_t whysz);

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
    uint32_t aux_offset;             /* see enum lg_conf_type */
    uint32_t aux2_offset;
    conf_check_fn check; /* STR */
};

struct lg_conf_table {
    size_t size; /* of the struct the offsets refer to */
    const struct lg_conf_field *fields;
    /* Cross-field checks once the fields are set; clean: no error below this object. */
    void (*check)(struct conf_ctx *ctx, void *base, bool clean);
};

struct conf_ctx {
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

typedef void (*conf_set_fn)(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v,
                            void *base);

static void conf_object(struct conf_ctx *ctx, const struct lg_conf_table *t, json_t *obj,
                        void *base);
static void conf_set_field(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v,
                           void *base);
static void conf_free_fields(const struct lg_conf_table *t, void *base);

/* ---- messages ----------------------------------------------------------- */

/* Writes s into dst for a message: control characters escaped, cut after
 * max bytes (on a character boundary), in double quotes if quote. */
static const char *
conf_escape(char *dst, size_t size, const char *s, size_t max, bool quote)
{
    size_t n = 0;
    size_t i;

    if (quote) {
        dst[n++] = '"';
    }
    for (i = 0; s[i] != '\0' && n + 8 < size; i++) {
        unsigned char c = (unsigned char)s[i];

        if (i >= max && (c & 0xc0) != 0x80) {
            n += (size_t)snprintf(dst + n, size - n, "...");
            break;
        }
        if (c == '\n') {
            n += (size_t)snprintf(dst + n, size - n, "\\n");
        } else if (c == '\t') {
            n += (size_t)snprintf(dst + n, size - n, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            n += (size_t)snprintf(dst + n, size - n, "\\x%02x", c);
        } else if (quote && (c == '"' || c == '\\')) {
            n += (size_t)snprintf(dst + n, size - n, "\\%c", c);
        } else {
            dst[n++] = (char)c;
        }
    }
    if (quote) {
        dst[n++] = '"';
    }
    dst[n] = '\0';
    return dst;
}

static const char *
conf_quote(char *dst, size_t size, const char *s)
{
    return conf_escape(dst, size, s, CONF_QUOTE_MAX, true);
}

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
        return conf_quote(dst, size, json_string_value(v));
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

static const char *
conf_fmt_duration(char *dst, size_t size, uint64_t ms)
{
    if (ms == 0) {
        snprintf(dst, size, "0");
    } else if (ms % 3600000 == 0) {
        snprintf(dst, size, "%" PRIu64 "h", ms / 3600000);
    } else if (ms % 60000 == 0) {
        snprintf(dst, size, "%" PRIu64 "m", ms / 60000);
    } else if (ms % 1000 == 0) {
        snprintf(dst, size, "%" PRIu64 "s", ms / 1000);
    } else {
        snprintf(dst, size, "%" PRIu64 "ms", ms);
    }
    return dst;
}

static const char *
conf_fmt_size(char *dst, size_t size, uint64_t n)
{
    if (n >= (1u << 30) && n % (1u << 30) == 0) {
        snprintf(dst, size, "%" PRIu64 "GiB", n >> 30);
    } else if (n >= (1u << 20) && n % (1u << 20) == 0) {
        snprintf(dst, size, "%" PRIu64 "MiB", n >> 20);
    } else if (n >= (1u << 10) && n % (1u << 10) == 0) {
        snprintf(dst, size, "%" PRIu64 "KiB", n >> 10);
    } else {
        snprintf(dst, size, "%" PRIu64, n);
    }
    return dst;
}

static void __attribute__((format(printf, 2, 3)))
conf_errors_add(struct lg_config_errors *errs, const char *fmt, ...)
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
static void __attribute__((format(printf, 3, 0)))
conf_verror(struct conf_ctx *ctx, bool at_key, const char *fmt, va_list ap)
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
    conf_errors_add(
        ctx->errs, "%s:%d:%d: error: %s: %s", ctx->name, line, col,
        ctx->ptr_len > 0 ? conf_escape(where, sizeof(where), ctx->ptr, CONF_PTR_MAX, false) : "/",
        what);
}

static void __attribute__((format(printf, 2, 3)))
conf_error(struct conf_ctx *ctx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    conf_verror(ctx, false, fmt, ap);
    va_end(ap);
}

static void __attribute__((format(printf, 2, 3)))
conf_error_key(struct conf_ctx *ctx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    conf_verror(ctx, true, fmt, ap);
    va_end(ap);
}

/* ---- the JSON pointer of the value being checked ------------------------ */

static void
conf_ptr_add(struct conf_ctx *ctx, const char *s, size_t n)
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
 * mark for conf_ptr_pop(). */
static size_t
conf_ptr_push_key(struct conf_ctx *ctx, const char *key)
{
    size_t mark = ctx->ptr_len;

    conf_ptr_add(ctx, "/", 1);
    for (const char *p = key; *p != '\0'; p++) {
        if (*p == '~') {
            conf_ptr_add(ctx, "~0", 2);
        } else if (*p == '/') {
            conf_ptr_add(ctx, "~1", 2);
        } else {
            conf_ptr_add(ctx, p, 1);
        }
    }
    return mark;
}

static size_t
conf_ptr_push_index(struct conf_ctx *ctx, size_t i)
{
    size_t mark = ctx->ptr_len;
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "/%zu", i);

    conf_ptr_add(ctx, buf, (size_t)n);
    return mark;
}

static void
conf_ptr_pop(struct conf_ctx *ctx, size_t mark)
{
    ctx->ptr_len = mark;
    if (ctx->ptr != NULL) {
        ctx->ptr[mark] = '\0';
    }
}

/* Records a warning about the value at ctx->ptr + suffix: a risky setting, not an error. */
static void __attribute__((format(printf, 3, 4)))
conf_warn_at(struct conf_ctx *ctx, const char *suffix, const char *fmt, ...)
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
    conf_ptr_add(ctx, suffix, strlen(suffix));
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    lg_config_loc_find(ctx->text, ctx->len, ctx->ptr, &line, &col);
    if (asprintf(&msg, "%s:%d:%d: warning: %s: %s", ctx->name, line, col,
                 conf_escape(where, sizeof(where), ctx->ptr, CONF_PTR_MAX, false), what)
        >= 0) {
        ctx->warnings = lg_xrealloc(ctx->warnings, (ctx->nwarnings + 1) * sizeof(*ctx->warnings));
        ctx->warnings[ctx->nwarnings++] = msg;
    }
    conf_ptr_pop(ctx, mark);
}

/* ---- string checks ------------------------------------------------------ */

static bool
conf_check_printable(const char *s, char *why, size_t whysz)
{
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            snprintf(why, whysz, "control characters are not allowed");
            return false;
        }
    }
    return true;
}

static bool
conf_check_name(const char *s, char *why, size_t whysz)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-");
    char q[CONF_QBUF];

    if (s[n] != '\0' || n > CONF_NAME_MAX) {
        snprintf(why, whysz,
                 "names are 1 to %d letters, digits, \".\", \"_\", \":\" or \"-\" (got %s)",
                 CONF_NAME_MAX, conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

/* Names discovery.c gives the backends it expands: NAME@ADDR:PORT. */
static bool
conf_check_expanded_name(const char *s, char *why, size_t whysz)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-@[]");
    char q[CONF_QBUF];

    if (s[n] != '\0' || n > CONF_XNAME_MAX) {
        snprintf(why, whysz, "not a discovered backend name (got %s)", conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

static bool conf_is_hostname(const char *s, size_t n);

static bool
conf_check_dns_name(const char *s, char *why, size_t whysz)
{
    char q[CONF_QBUF];

    if (!conf_is_hostname(s, strlen(s)) || s[0] == '.' || s[0] == '-') {
        snprintf(why, whysz, "expected a DNS name such as \"vllm.ns.svc.cluster.local\" (got %s)",
                 conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

/* RFC 9110 section 5.6.2: a header name is a token. */
static bool
conf_check_header_name(const char *s, char *why, size_t whysz)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                         "!#$%&'*+-.^_`|~");
    char q[CONF_QBUF];

    if (s[n] != '\0') {
        snprintf(why, whysz, "not a valid HTTP header name (got %s)", conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

/* A TLS server name: a DNS name or an IP literal, as the certificate names it. */
static bool
conf_check_server_name(const char *s, char *why, size_t whysz)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:");
    char q[CONF_QBUF];

    if (s[n] != '\0' || n > 253) {
        snprintf(why, whysz, "not a host name (got %s)", conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

static bool
conf_check_path(const char *s, char *why, size_t whysz)
{
    char q[CONF_QBUF];

    if (s[0] != '/' || strchr(s, ' ') != NULL) {
        snprintf(why, whysz, "must be a path starting with \"/\" without spaces (got %s)",
                 conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

/* ---- numbers with units ------------------------------------------------- */

struct conf_unit {
    const char *name;
    uint64_t mult;
};

static const struct conf_unit conf_duration_units[] = {
    { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { NULL, 0 },
};

static const struct conf_unit conf_size_units[] = {
    { "B", 1 },     { "KiB", 1ull << 10 }, { "MiB", 1ull << 20 }, { "GiB", 1ull << 30 },
    { "kB", 1000 }, { "MB", 1000000 },     { "GB", 1000000000 },  { NULL, 0 },
};

/*
 * Parses "<digits>[.<digits>]<unit>" into *out = number * unit. Returns 0, or
 * -1 (not that shape or unknown unit), -2 (not a whole number of the base
 * unit), -3 (overflow).
 */
static int
conf_parse_scaled(const char *s, const struct conf_unit *units, uint64_t *out)
{
    uint64_t ip = 0;
    uint64_t fp = 0;
    uint64_t scale = 1;
    uint64_t v;
    const char *p = s;
    const struct conf_unit *u;

    if (*p < '0' || *p > '9') {
        return -1;
    }
    for (; *p >= '0' && *p <= '9'; p++) {
        if (ip > UINT64_MAX / 100) {
            return -3;
        }
        ip = ip * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9') {
            return -1;
        }
        for (; *p >= '0' && *p <= '9'; p++) {
            if (scale >= 1000000000) {
                return -2; /* more than nine decimals: finer than any base unit */
            }
            fp = fp * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
    }
    for (u = units; u->name != NULL && strcmp(p, u->name) != 0; u++) {
    }
    if (u->name == NULL) {
        return -1;
    }
    if (__builtin_mul_overflow(ip, u->mult, &v)) {
        return -3;
    }
    /* fp < 1e9 and mult < 2^31 here or below, so fp * mult cannot overflow */
    if ((fp * u->mult) % scale != 0) {
        return -2;
    }
    if (__builtin_add_overflow(v, fp * u->mult / scale, &v)) {
        return -3;
    }
    *out = v;
    return 0;
}

/* Range check shared by integers, durations and sizes. */
static bool
conf_in_range(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, double x,
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

/* ---- addresses and URLs ------------------------------------------------- */

/*
 * Resolves host (numeric first, then by name unless LG_CONFIG_F_NO_RESOLVE,
 * NULL = IPv4 any) with port into ss. Returns 0 or -1 with why set.
 */
static int
conf_resolve(const char *host, uint16_t port, unsigned flags, struct sockaddr_storage *ss,
             socklen_t *len, char *why, size_t whysz)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST };
    struct addrinfo *res = NULL;
    char q[CONF_QBUF];
    char serv[8];
    struct in_addr a4;
    int rc;

    memset(ss, 0, sizeof(*ss));
    if (host == NULL) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;

        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
        *len = sizeof(*sin);
        return 0;
    }
    if (host[strspn(host, "0123456789.")] == '\0' && inet_pton(AF_INET, host, &a4) != 1) {
        /* getaddrinfo() would take "10.1" as 10.0.0.1 (inet_aton): a typo, surely */
        snprintf(why, whysz, "invalid IPv4 address %s", conf_quote(q, sizeof(q), host));
        return -1;
    }
    snprintf(serv, sizeof(serv), "%u", port);
    hints.ai_flags |= AI_NUMERICSERV;
    rc = getaddrinfo(host, serv, &hints, &res);
    if (rc == EAI_NONAME && (flags & LG_CONFIG_F_NO_RESOLVE)) {
        *len = 0;
        return 0;
    }
    if (rc == EAI_NONAME) {
        hints.ai_flags &= ~AI_NUMERICHOST;
        rc = getaddrinfo(host, serv, &hints, &res);
    }
    if (rc != 0 || res == NULL || res->ai_addrlen > sizeof(*ss)) {
        snprintf(why, whysz, "cannot resolve %s: %s", conf_quote(q, sizeof(q), host),
                 rc != 0 ? gai_strerror(rc) : "no address");
        if (res != NULL) {
            freeaddrinfo(res);
        }
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* Host names and IPv4 literals: letters, digits, '.', '-', '_'. */
static bool
conf_is_hostname(const char *s, size_t n)
{
    return n > 0 && n <= 253
           && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") >= n;
}

/* Parses 1-5 digits into a port in [min, 65535]; -1 otherwise. */
static int
conf_parse_port(const char *s, size_t n, unsigned min)
{
    unsigned v = 0;

    if (n == 0 || n > 5) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    return v >= min && v <= 65535 ? (int)v : -1;
}

/* "host:port", "[v6]:port", ":port" or "*:port" (IPv4 any); port 0 allowed. */
static int
conf_address_parse(const char *s, unsigned flags, struct sockaddr_storage *ss, socklen_t *len,
                   char *why, size_t whysz)
{
    const char *colon;
    const char *hs = s;
    size_t hn;
    char q[CONF_QBUF];
    char *host = NULL;
    int port;
    int rc;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');

        if (close == NULL || close[1] != ':') {
            goto fail_shape;
        }
        hs = s + 1;
        hn = (size_t)(close - hs);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL) {
            goto fail_shape;
        }
        hn = (size_t)(colon - s);
        if (memchr(s, ':', hn) != NULL) {
            snprintf(why, whysz, "IPv6 addresses need brackets, e.g. \"[::1]:8080\" (got %s)",
                     conf_quote(q, sizeof(q), s));
            return -1;
        }
    }
    port = conf_parse_port(colon + 1, strlen(colon + 1), 0);
    if (port < 0) {
        snprintf(why, whysz, "port must be between 0 and 65535 (got %s)",
                 conf_quote(q, sizeof(q), colon + 1));
        return -1;
    }
    if (s[0] == '[') {
        struct in6_addr a6;

        host = lg_xstrndup(hs, hn);
        if (strchr(host, '%') == NULL && inet_pton(AF_INET6, host, &a6) != 1) {
            snprintf(why, whysz, "invalid IPv6 address %s", conf_quote(q, sizeof(q), host));
            free(host);
            return -1;
        }
    } else if (hn > 0 && !(hn == 1 && s[0] == '*')) {
        if (!conf_is_hostname(s, hn)) {
            goto fail_shape;
        }
        host = lg_xstrndup(s, hn);
    }
    rc = conf_resolve(host, (uint16_t)port, flags, ss, len, why, whysz);
    free(host);
    return rc;

fail_shape:
    snprintf(why, whysz, "expected \"host:port\", \"[v6]:port\" or \":port\" (got %s)",
             conf_quote(q, sizeof(q), s));
    return -1;
}

int
lg_config_parse_address(const char *s, struct sockaddr_storage *addr, socklen_t *len)
{
    char why[CONF_MSG_MAX];

    return conf_address_parse(s, 0, addr, len, why, sizeof(why)) == 0 ? LG_OK : LG_EINVAL;
}

static void
conf_url_free(struct lg_backend_conf *b)
{
    free(b->url);
    free(b->host);
    free(b->host_header);
    free(b->path_prefix);
    b->url = b->host = b->host_header = b->path_prefix = NULL;
}

/*
 * scheme://host[:port][/prefix] (RFC 3986 section 3) into b. No userinfo
 * (credentials go in api_key), no query or fragment: the prefix is joined
 * with every request path.
 */
static int
conf_url_parse(const char *s, struct lg_backend_conf *b, char *why, size_t whysz)
{
    const char *sep = strstr(s, "://");
    const char *auth;
    const char *auth_end;
    const char *hs;
    const char *pe;
    const char *path;
    char q[CONF_QBUF];
    char q2[CONF_QBUF];
    size_t hn;
    size_t plen;
    int port;
    bool v6 = false;

    if (sep == NULL) {
        snprintf(why, whysz, "expected a URL like \"http://host:port\" (got %s)",
                 conf_quote(q, sizeof(q), s));
        return -1;
    }
    if ((size_t)(sep - s) == 4 && strncasecmp(s, "http", 4) == 0) {
        b->tls = false;
    } else if ((size_t)(sep - s) == 5 && strncasecmp(s, "https", 5) == 0) {
        b->tls = true;
    } else {
        char *scheme = lg_xstrndup(s, (size_t)(sep - s));

        snprintf(why, whysz, "scheme must be http or https (got %s)",
                 conf_quote(q, sizeof(q), scheme));
        free(scheme);
        return -1;
    }
    auth = sep + 3;
    auth_end = auth + strcspn(auth, "/?#");
    if (memchr(auth, '@', (size_t)(auth_end - auth)) != NULL) {
        snprintf(why, whysz, "credentials in the URL are not supported; use \"api_key\"");
        return -1;
    }
    if (auth[0] == '[') {
        const char *close = memchr(auth, ']', (size_t)(auth_end - auth));
        struct in6_addr a6;
        char *h;

        if (close == NULL) {
            snprintf(why, whysz, "unterminated IPv6 address in %s", conf_quote(q, sizeof(q), s));
            return -1;
        }
        hs = auth + 1;
        hn = (size_t)(close - hs);
        pe = close + 1;
        h = lg_xstrndup(hs, hn);
        v6 = inet_pton(AF_INET6, h, &a6) == 1;
        free(h);
        if (!v6 || (pe < auth_end && *pe != ':')) {
            snprintf(why, whysz, "invalid IPv6 address in %s", conf_quote(q, sizeof(q), s));
            return -1;
        }
    } else {
        hs = auth;
        pe = memchr(auth, ':', (size_t)(auth_end - auth));
        pe = pe != NULL ? pe : auth_end;
        hn = (size_t)(pe - hs);
        if (hn == 0) {
            snprintf(why, whysz, "missing host in %s", conf_quote(q, sizeof(q), s));
            return -1;
        }
        if (!conf_is_hostname(hs, hn)) {
            char *h = lg_xstrndup(hs, hn);

            snprintf(why, whysz, "invalid host %s in %s", conf_quote(q, sizeof(q), h),
                     conf_quote(q2, sizeof(q2), s));
            free(h);
            return -1;
        }
    }
    if (pe < auth_end) {
        char *ps = lg_xstrndup(pe + 1, (size_t)(auth_end - pe - 1));

        port = conf_parse_port(ps, strlen(ps), 1);
        if (port < 0) {
            snprintf(why, whysz, "port must be between 1 and 65535 (got %s)",
                     conf_quote(q, sizeof(q), ps));
        }
        free(ps);
        if (port < 0) {
            return -1;
        }
    } else {
        port = b->tls ? 443 : 80;
    }
    path = auth_end;
    if (strpbrk(path, "?#") != NULL) {
        snprintf(why, whysz, "a backend URL takes no query or fragment (got %s)",
                 conf_quote(q, sizeof(q), s));
        return -1;
    }
    if (strchr(path, ' ') != NULL) {
        snprintf(why, whysz, "spaces are not allowed in a URL (got %s)",
                 conf_quote(q, sizeof(q), s));
        return -1;
    }
    for (plen = strlen(path); plen > 0 && path[plen - 1] == '/'; plen--) {
    }
    b->url = lg_xstrdup(s);
    b->host = lg_xstrndup(hs, hn);
    b->port = (uint16_t)port;
    b->path_prefix = lg_xstrndup(path, plen);
    if (port == (b->tls ? 443 : 80)) {
        b->host_header = lg_xmalloc(hn + 3);
        snprintf(b->host_header, hn + 3, v6 ? "[%s]" : "%s", b->host);
    } else {
        b->host_header = lg_xmalloc(hn + 9);
        snprintf(b->host_header, hn + 9, v6 ? "[%s]:%d" : "%s:%d", b->host, port);
    }
    return 0;
}

/* ---- setters, one per type ---------------------------------------------- */

static void *
conf_at(void *base, size_t offset)
{
    return (char *)base + offset;
}

static void
conf_type_error(struct conf_ctx *ctx, const char *expected, const json_t *v)
{
    conf_error(ctx, "expected %s, got %s", expected, conf_json_kind(v));
}

/* The value of a string field once checked; NULL (and reported) otherwise. */
static const char *
conf_string(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v)
{
    char why[CONF_MSG_MAX];
    conf_check_fn check = f->check;
    const char *s;

    if (check == conf_check_name && (ctx->flags & LG_CONFIG_F_EXPANDED)) {
        check = conf_check_expanded_name;
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
    if (!conf_check_printable(s, why, sizeof(why))
        || (check != NULL && !check(s, why, sizeof(why)))) {
        conf_error(ctx, "%s", why);
        return NULL;
    }
    return s;
}

static void
conf_set_str(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char **dst = conf_at(base, f->offset);
    const char *s = conf_string(ctx, f, v);

    if (s != NULL) {
        free(*dst);
        *dst = lg_xstrdup(s);
    }
}

static void
conf_set_file(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
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
        conf_error(ctx, "cannot read %s: %s", conf_quote(q, sizeof(q), s),
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
conf_set_bool(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    if (!json_is_boolean(v)) {
        conf_type_error(ctx, "a boolean", v);
        return;
    }
    *(bool *)conf_at(base, f->offset) = json_is_true(v);
}

static void
conf_set_uint(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    if (!json_is_integer(v)) {
        conf_type_error(ctx, "an integer", v);
        return;
    }
    if (conf_in_range(ctx, f, v, (double)json_integer_value(v), NULL)) {
        *(uint32_t *)conf_at(base, f->offset) = (uint32_t)json_integer_value(v);
    }
}

static void
conf_set_double(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
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
conf_set_duration(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char q[CONF_QBUF];
    uint64_t ms = 0;
    int rc;

    if (json_is_number(v) && !(json_is_integer(v) && json_integer_value(v) == 0)) {
        conf_error(ctx, "durations need a unit, e.g. \"30s\" (got %s)", conf_got(q, sizeof(q), v));
        return;
    }
    if (json_is_string(v)) {
        rc = conf_parse_scaled(json_string_value(v), conf_duration_units, &ms);
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
    if (conf_in_range(ctx, f, v, (double)ms, conf_fmt_duration)) {
        *(uint64_t *)conf_at(base, f->offset) = ms;
        if (f->warn_above > 0 && (double)ms > f->warn_above) {
            char d[32];

            conf_warn_at(ctx, "", "%s is practically no timeout: %s; the default is %s",
                         conf_fmt_duration(q, sizeof(q), ms), f->warn,
                         conf_fmt_duration(d, sizeof(d), (uint64_t)f->def));
        }
    }
}

static void
conf_set_size(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char q[CONF_QBUF];
    uint64_t n = 0;
    int rc;

    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0) {
            conf_in_range(ctx, f, v, (double)json_integer_value(v), conf_fmt_size);
            return;
        }
        n = (uint64_t)json_integer_value(v);
    } else if (json_is_string(v)) {
        rc = conf_parse_scaled(json_string_value(v), conf_size_units, &n);
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
    if (conf_in_range(ctx, f, v, (double)n, conf_fmt_size)) {
        *(size_t *)conf_at(base, f->offset) = (size_t)n;
    }
}

static void
conf_set_enum(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
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
conf_set_address(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    char **dst = conf_at(base, f->offset);
    char why[CONF_MSG_MAX];

    if (!json_is_string(v)) {
        conf_type_error(ctx, "an address string such as \"127.0.0.1:8080\"", v);
        return;
    }
    if (conf_address_parse(json_string_value(v), ctx->flags, conf_at(base, f->aux_offset),
                           conf_at(base, f->aux2_offset), why, sizeof(why))
        != 0) {
        conf_error(ctx, "%s", why);
        return;
    }
    free(*dst);
    *dst = lg_xstrdup(json_string_value(v));
}

static void
conf_set_url(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
{
    struct lg_backend_conf *b = base;
    char why[CONF_MSG_MAX];

    if (!json_is_string(v)) {
        conf_type_error(ctx, "a URL string such as \"http://127.0.0.1:8000\"", v);
        return;
    }
    conf_url_free(b);
    if (conf_url_parse(json_string_value(v), b, why, sizeof(why)) != 0
        || conf_resolve(b->host, b->port, ctx->flags, &b->addr, &b->addrlen, why, sizeof(why))
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
conf_array_ok(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, const char *what)
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

static void
conf_set_strarray(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
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
        } else if (!conf_check_printable(s, why, sizeof(why))) {
            conf_error(ctx, "%s", why);
        } else {
            for (j = 0; f->unique && j < i; j++) {
                if (json_equal(e, json_array_get(v, j))) {
                    conf_error(ctx, "duplicate entry %s (first at index %zu)",
                               conf_quote(q, sizeof(q), s), j);
                    break;
                }
            }
            if (!f->unique || j == i) {
                out[k++] = lg_xstrdup(s);
            }
        }
        conf_ptr_pop(ctx, mark);
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

static void
conf_defaults(const struct lg_conf_table *t, void *base)
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
        case LG_CONF_OBJECT:
            conf_defaults(f->sub, p);
            break;
        default:
            break; /* NULL / empty, from the zeroed allocation */
        }
    }
}

/* An object, or a string standing for {f->shorthand: s}. */
static void
conf_set_object(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
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
            conf_free_fields(f->sub, sub); /* off: every string NULL */
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
    conf_object(ctx, f->sub, v, sub);
}

static void
conf_set_objarray(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
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
        conf_defaults(t, *dst + i * t->size);
    }
    if (!json_is_array(v)) {
        conf_set_object(ctx, &elem, v, *dst);
        return;
    }
    json_array_foreach (v, i, e) {
        size_t mark = conf_ptr_push_index(ctx, i);

        conf_set_object(ctx, &elem, e, *dst + i * t->size);
        conf_ptr_pop(ctx, mark);
    }
}

static void
conf_set_json(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
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
};

static void
conf_set_field(struct conf_ctx *ctx, const struct lg_conf_field *f, json_t *v, void *base)
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

static void
conf_object(struct conf_ctx *ctx, const struct lg_conf_table *t, json_t *obj, void *base)
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
                               conf_quote(q, sizeof(q), key), conf_quote(q2, sizeof(q2), hint));
            } else {
                conf_error_key(ctx, "unknown key %s", conf_quote(q, sizeof(q), key));
            }
        } else if (!json_is_null(v) || f->required) {
            conf_set_field(ctx, f, v, base);
        }
        conf_ptr_pop(ctx, mark);
    }
    for (const struct lg_conf_field *f = t->fields; f->name != NULL; f++) {
        if (f->required && json_object_get(obj, f->name) == NULL
            && (f->unless == NULL || json_object_get(obj, f->unless) == NULL)) {
            conf_error(ctx, "missing required key %s", conf_quote(q, sizeof(q), f->name));
        }
    }
    if (t->check != NULL) {
        t->check(ctx, base, ctx->nerrors == before);
    }
}

static void
conf_free_fields(const struct lg_conf_table *t, void *base)
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
            conf_url_free(base);
            break;
        case LG_CONF_STRARRAY:
            conf_strv_free(*(char ***)p);
            *(char ***)p = NULL;
            *(size_t *)conf_at(base, f->aux_offset) = 0;
            break;
        case LG_CONF_OBJECT:
            conf_free_fields(f->sub, p);
            break;
        case LG_CONF_OBJARRAY: {
            char *arr = *(char **)p;
            size_t *count = conf_at(base, f->aux_offset);

            for (size_t i = 0; arr != NULL && i < *count; i++) {
                conf_free_fields(f->sub, arr + i * f->sub->size);
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

/* ---- cross-field checks ------------------------------------------------- */

static void __attribute__((format(printf, 3, 4)))
conf_error_at(struct conf_ctx *ctx, const char *suffix, const char *fmt, ...)
{
    size_t mark = ctx->ptr_len;
    va_list ap;

    conf_ptr_add(ctx, suffix, strlen(suffix));
    va_start(ap, fmt);
    conf_verror(ctx, false, fmt, ap);
    va_end(ap);
    conf_ptr_pop(ctx, mark);
}

static void
conf_check_health(struct conf_ctx *ctx, void *base, bool clean)
{
    struct lg_health_conf *h = base;
    char a[32];
    char b[32];

    if (clean && h->eject_base_ms > h->eject_max_ms) {
        conf_error_at(ctx, "/eject_base", "must not exceed eject_max (%s > %s)",
                      conf_fmt_duration(a, sizeof(a), h->eject_base_ms),
                      conf_fmt_duration(b, sizeof(b), h->eject_max_ms));
    }
}

static bool
conf_same_addr(const struct sockaddr_storage *a, socklen_t alen, const struct sockaddr_storage *b,
               socklen_t blen)
{
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)a;

    if (alen == 0 || alen != blen || a->ss_family != b->ss_family || a4->sin_port == 0) {
        return false; /* port 0 binds a fresh port each time: never a clash */
    }
    return memcmp(a, b, alen) == 0;
}

static bool
conf_is_loopback(const struct sockaddr_storage *ss, socklen_t len)
{
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)ss;
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;

    if (len == 0) {
        return true; /* not resolved (LG_CONFIG_F_NO_RESOLVE): nothing to say */
    }
    if (ss->ss_family == AF_INET) {
        return (ntohl(a4->sin_addr.s_addr) >> 24) == 127;
    }
    return ss->ss_family == AF_INET6
           && (IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr)
               || (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr) && a6->sin6_addr.s6_addr[12] == 127));
}

/* Two backends at one URL: scheme, host (any case), port and path prefix. */
static bool
conf_same_url(const struct lg_backend_conf *a, const struct lg_backend_conf *b)
{
    return a->url != NULL && b->url != NULL && a->tls == b->tls && a->port == b->port
           && strcasecmp(a->host, b->host) == 0 && strcmp(a->path_prefix, b->path_prefix) == 0;
}

/*
 * Risky settings that are valid: warnings (`--check-config` prints them and
 * exits 0; the gateway logs them at start and on reload). The timeouts warn
 * as they are set (warn_above in their table).
 */
static void
conf_warn_root(struct conf_ctx *ctx, const struct lg_config *c)
{
    char sfx[64];
    char q[CONF_QBUF];

    if (c->admin.listen != NULL && c->admin.token == NULL
        && !conf_is_loopback(&c->admin.addr, c->admin.addrlen)) {
        conf_warn_at(ctx,
                     json_is_string(json_object_get(c->root, "admin")) ? "/admin" : "/admin/listen",
                     "the admin listener is on %s, not loopback, without a token: whoever reaches "
                     "it can drain backends, reload and read the fleet; set admin.token (then "
                     "/admin/ and /metrics need it) or listen on 127.0.0.1",
                     conf_quote(q, sizeof(q), c->admin.listen));
    }
    for (size_t i = 0; i < c->nbackends; i++) {
        for (size_t j = 0; c->backends[i].enabled && j < i; j++) {
            if (c->backends[j].enabled && conf_same_url(&c->backends[i], &c->backends[j])) {
                snprintf(sfx, sizeof(sfx), "/backends/%zu/url", i);
                conf_warn_at(ctx, sfx,
                             "the same URL as /backends/%zu (%s): one engine counted as two "
                             "backends gets twice its share, and neither sees its whole load; "
                             "list it once (\"weight\" gives it a larger share)",
                             j, conf_quote(q, sizeof(q), c->backends[j].name));
                break;
            }
        }
    }
}

static void
conf_check_root(struct conf_ctx *ctx, void *base, bool clean)
{
    struct lg_config *c = base;
    char sfx[64];
    char q[CONF_QBUF];
    size_t enabled = 0;

    if (c->workers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);

        c->workers = n < 1 ? 1 : (uint32_t)LG_MIN(n, CONF_MAX_WORKERS);
    }
    for (size_t i = 0; i < c->nlisten; i++) {
        for (size_t j = 0; j < i; j++) {
            if (conf_same_addr(&c->listen[i].addr, c->listen[i].addrlen, &c->listen[j].addr,
                               c->listen[j].addrlen)) {
                snprintf(sfx, sizeof(sfx), "/listen/%zu", i);
                conf_error_at(ctx, sfx, "duplicate listen address %s (first at /listen/%zu)",
                              conf_quote(q, sizeof(q), c->listen[i].address), j);
                break;
            }
        }
    }
    for (size_t i = 0; c->admin.listen != NULL && i < c->nlisten; i++) {
        if (conf_same_addr(&c->admin.addr, c->admin.addrlen, &c->listen[i].addr,
                           c->listen[i].addrlen)) {
            /* "admin": "host:port" has no /admin/listen in the text */
            conf_error_at(
                ctx, json_is_string(json_object_get(c->root, "admin")) ? "/admin" : "/admin/listen",
                "same address as /listen/%zu", i);
        }
    }
    for (size_t i = 0; i < c->nbackends; i++) {
        const char *name = c->backends[i].name;

        enabled += c->backends[i].enabled;
        for (size_t j = 0; name != NULL && j < i; j++) {
            if (c->backends[j].name != NULL && strcmp(name, c->backends[j].name) == 0) {
                snprintf(sfx, sizeof(sfx), "/backends/%zu/name", i);
                conf_error_at(ctx, sfx, "duplicate backend name %s (first at /backends/%zu)",
                              conf_quote(q, sizeof(q), name), j);
                break;
            }
        }
    }
    if (c->nbackends > 0 && enabled == 0) {
        conf_error_at(ctx, "/backends", "every backend is disabled; enable at least one");
    }
    if (clean) {
        conf_warn_root(ctx, c);
    }
}

/* ---- the tables --------------------------------------------------------- */

static const char *const conf_log_levels[] = { "error", "warn", "info", "debug", NULL };
static const char *const conf_flavors[] = { "auto",     "vllm", "sglang", "tgi",
                                            "llamacpp", "none", NULL };

_Static_assert(LG_LOG_DEBUG == 3, "conf_log_levels follows enum lg_log_level");
_Static_assert(LG_ENGINE_NONE == 5, "conf_flavors follows enum lg_engine_flavor");
_Static_assert(sizeof(enum lg_log_level) == sizeof(int), "LG_CONF_ENUM stores an int");
_Static_assert(sizeof(enum lg_engine_flavor) == sizeof(int), "LG_CONF_ENUM stores an int");

#define TLS(f) offsetof(struct lg_listen_conf, f)
static const struct lg_conf_field conf_tls_fields[] = {
    { "cert", LG_CONF_FILE, TLS(tls_cert), .required = true },
    { "key", LG_CONF_FILE, TLS(tls_key), .required = true },
    { .name = NULL },
};
/* tls fields live in struct lg_listen_conf itself: the "tls" field has offset 0 */
static const struct lg_conf_table conf_tls_table = { sizeof(struct lg_listen_conf), conf_tls_fields,
                                                     NULL };

static const struct lg_conf_field conf_listen_fields[] = {
    { "address", LG_CONF_ADDRESS, TLS(address), .required = true, .aux_offset = TLS(addr),
      .aux2_offset = TLS(addrlen) },
    { "tls", LG_CONF_OBJECT, 0, .sub = &conf_tls_table },
    { .name = NULL },
};
#undef TLS
static const struct lg_conf_table conf_listen_table = { sizeof(struct lg_listen_conf),
                                                        conf_listen_fields, NULL };

#define TO(f) offsetof(struct lg_timeouts_conf, f)
static const struct lg_conf_field conf_timeouts_fields[] = {
    { "client_header", LG_CONF_DURATION, TO(client_header_ms), .def = CONF_S(10), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(1),
      .warn = "a client may hold a connection that long before its request is complete "
              "(slowloris)" },
    { "client_body", LG_CONF_DURATION, TO(client_body_ms), .def = CONF_S(30), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(5),
      .warn = "a client may hold a connection that long between two pieces of its body" },
    { "client_idle", LG_CONF_DURATION, TO(client_idle_ms), .def = CONF_S(75), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(10),
      .warn = "idle keep-alive connections stay open that long, each counted against "
              "limits.max_connections" },
    { "upstream_connect", LG_CONF_DURATION, TO(upstream_connect_ms), .def = CONF_S(3), .min = 1,
      .max = CONF_M(5), .warn_above = CONF_M(1),
      .warn = "a backend that does not answer holds each request that long before a retry" },
    { "first_byte", LG_CONF_DURATION, TO(first_byte_ms), .def = CONF_S(300), .min = 1,
      .max = CONF_H(1) },
    { "stream_idle", LG_CONF_DURATION, TO(stream_idle_ms), .def = CONF_S(120), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(10),
      .warn = "a stalled engine keeps each of its streams, and the client, that long" },
    { "total", LG_CONF_DURATION, TO(total_ms), .def = 0, .min = 0, .max = CONF_H(24) },
    { "drain", LG_CONF_DURATION, TO(drain_ms), .def = CONF_S(30), .min = 0, .max = CONF_H(1) },
    { "upstream_idle", LG_CONF_DURATION, TO(upstream_idle_ms), .def = CONF_S(60), .min = 1,
      .max = CONF_H(1) },
    { "upstream_purge", LG_CONF_DURATION, TO(upstream_purge_ms), .def = CONF_S(1), .min = 0,
      .max = CONF_H(1) },
    { "client_stall", LG_CONF_DURATION, TO(client_stall_ms), .def = CONF_S(60), .min = 1,
      .max = CONF_H(1), .warn_above = CONF_M(10),
      .warn = "a client that reads nothing keeps its stream, and a slot of the engine, that "
              "long" },
    { "queue", LG_CONF_DURATION, TO(queue_ms), .def = CONF_S(30), .min = 1, .max = CONF_H(1) },
    { .name = NULL },
};
#undef TO
static const struct lg_conf_table conf_timeouts_table = { sizeof(struct lg_timeouts_conf),
                                                          conf_timeouts_fields, NULL };

#define LI(f) offsetof(struct lg_limits_conf, f)
static const struct lg_conf_field conf_limits_fields[] = {
    { "max_header_bytes", LG_CONF_SIZE, LI(max_header_bytes), .def = CONF_KIB(16), .min = 256,
      .max = CONF_MIB(1) },
    { "max_headers", LG_CONF_UINT, LI(max_headers), .def = 100, .min = 1, .max = 10000 },
    { "max_body_bytes", LG_CONF_SIZE, LI(max_body_bytes), .def = CONF_MIB(16), .min = 1,
      .max = CONF_GIB(1) },
    { "max_connections", LG_CONF_UINT, LI(max_connections), .def = 20000, .min = 1,
      .max = 1000000 },
    { "max_connections_per_ip", LG_CONF_UINT, LI(max_connections_per_ip), .def = 0, .min = 0,
      .max = 1000000 },
    { "stream_buffer_bytes", LG_CONF_SIZE, LI(stream_buffer_bytes), .def = CONF_KIB(64),
      .min = CONF_KIB(1), .max = CONF_MIB(64) },
    { "upstream_keepalive", LG_CONF_UINT, LI(upstream_keepalive), .def = 64, .min = 0,
      .max = 10000 },
    { "queue_length", LG_CONF_UINT, LI(queue_length), .def = 1024, .min = 0, .max = 1000000 },
    { .name = NULL },
};
#undef LI
static const struct lg_conf_table conf_limits_table = { sizeof(struct lg_limits_conf),
                                                        conf_limits_fields, NULL };

#define RE(f) offsetof(struct lg_retry_conf, f)
static const struct lg_conf_field conf_retry_fields[] = {
    { "attempts", LG_CONF_UINT, RE(attempts), .def = 2, .min = 1, .max = 10 },
    { "budget_ratio", LG_CONF_DOUBLE, RE(budget_ratio), .def = 0.2, .min = 0, .max = 1 },
    { "budget_min", LG_CONF_UINT, RE(budget_min), .def = 10, .min = 0, .max = 1000000 },
    { .name = NULL },
};
#undef RE
static const struct lg_conf_table conf_retry_table = { sizeof(struct lg_retry_conf),
                                                       conf_retry_fields, NULL };

#define ST(f) offsetof(struct lg_route_stage_conf, f)
static const struct lg_conf_field conf_stage_fields[] = {
    { "policy", LG_CONF_STR, ST(policy), .required = true },
    { "weight", LG_CONF_DOUBLE, ST(weight), .def = 1, .min = 0, .max = 1000000 },
    { "options", LG_CONF_JSON, ST(options), .required = false },
    { .name = NULL },
};
#undef ST
static const struct lg_conf_table conf_stage_table = { sizeof(struct lg_route_stage_conf),
                                                       conf_stage_fields, NULL };

/* A pipeline replaces the one-stage `policy` (whose default is then "ttft"); a
 * stage of weight 0 is a shadow, so one at least must weigh something. */
static void
conf_check_routing(struct conf_ctx *ctx, void *base, bool clean)
{
    struct lg_routing_conf *r = base;
    size_t deciding = 0;

    if (clean && r->policy != NULL && r->npipeline > 0) {
        conf_error_at(ctx, "/policy", "give either policy or pipeline, not both");
    }
    for (size_t i = 0; i < r->npipeline; i++) {
        deciding += r->pipeline[i].weight > 0;
    }
    if (clean && r->npipeline > 0 && deciding == 0) {
        conf_error_at(ctx, "/pipeline",
                      "every stage has weight 0 (a shadow: scored and logged, never deciding); "
                      "at least one must decide");
    }
}

#define RO(f) offsetof(struct lg_routing_conf, f)
static const struct lg_conf_field conf_routing_fields[] = {
    { "policy", LG_CONF_STR, RO(policy), .required = false },
    { "pipeline", LG_CONF_OBJARRAY, RO(pipeline), .min = 1, .max = 8, .sub = &conf_stage_table,
      .shorthand = "policy", .aux_offset = RO(npipeline) },
    { "plugins", LG_CONF_STRARRAY, RO(plugins), .min = 0, .max = 64, .aux_offset = RO(nplugins) },
    { "options", LG_CONF_JSON, RO(policy_options), .required = false },
    { "retry", LG_CONF_OBJECT, RO(retry), .sub = &conf_retry_table },
    { "session_header", LG_CONF_STR, RO(session_header), .check = conf_check_header_name },
    { "prefix_bytes", LG_CONF_SIZE, RO(prefix_bytes), .def = 2048, .min = 0, .max = CONF_MIB(1) },
    { .name = NULL },
};
#undef RO
static const struct lg_conf_table conf_routing_table = { sizeof(struct lg_routing_conf),
                                                         conf_routing_fields, conf_check_routing };

#define AL(f) offsetof(struct lg_access_log_conf, f)
static const struct lg_conf_field conf_access_log_fields[] = {
    { "path", LG_CONF_STR, AL(path), .def_str = "-" },
    { "flush", LG_CONF_DURATION, AL(flush_ms), .def = CONF_S(1), .min = 0, .max = CONF_M(1) },
    { "buffer", LG_CONF_SIZE, AL(buffer_bytes), .def = CONF_KIB(64), .min = CONF_KIB(4),
      .max = CONF_MIB(64) },
    { .name = NULL },
};
#undef AL
static const struct lg_conf_table conf_access_log_table = { sizeof(struct lg_access_log_conf),
                                                            conf_access_log_fields, NULL };

#define HE(f) offsetof(struct lg_health_conf, f)
static const struct lg_conf_field conf_health_fields[] = {
    { "interval", LG_CONF_DURATION, HE(interval_ms), .def = CONF_S(5), .min = 10,
      .max = CONF_H(1) },
    { "timeout", LG_CONF_DURATION, HE(timeout_ms), .def = CONF_S(2), .min = 1, .max = CONF_M(5) },
    { "rise", LG_CONF_UINT, HE(rise), .def = 2, .min = 1, .max = 100 },
    { "fall", LG_CONF_UINT, HE(fall), .def = 3, .min = 1, .max = 100 },
    { "scrape_interval", LG_CONF_DURATION, HE(scrape_interval_ms), .def = CONF_MS(250), .min = 0,
      .max = CONF_H(1) },
    { "eject_consecutive", LG_CONF_UINT, HE(eject_consecutive), .def = 5, .min = 0, .max = 1000 },
    { "eject_base", LG_CONF_DURATION, HE(eject_base_ms), .def = CONF_S(5), .min = 1,
      .max = CONF_H(1) },
    { "eject_max", LG_CONF_DURATION, HE(eject_max_ms), .def = CONF_S(60), .min = 1,
      .max = CONF_H(24) },
    { "slow_start", LG_CONF_DURATION, HE(slow_start_ms), .def = CONF_S(10), .min = 0,
      .max = CONF_H(1) },
    { "peer_interval", LG_CONF_DURATION, HE(peer_interval_ms), .def = CONF_MS(2), .min = 0,
      .max = CONF_M(1) },
    { .name = NULL },
};
#undef HE
static const struct lg_conf_table conf_health_table = { sizeof(struct lg_health_conf),
                                                        conf_health_fields, conf_check_health };

#define AD(f) offsetof(struct lg_admin_conf, f)
static const struct lg_conf_field conf_admin_fields[] = {
    { "listen", LG_CONF_ADDRESS, AD(listen), .required = true, .aux_offset = AD(addr),
      .aux2_offset = AD(addrlen) },
    { "token", LG_CONF_STR, AD(token), .required = false },
    { .name = NULL },
};
#undef AD
static const struct lg_conf_table conf_admin_table = { sizeof(struct lg_admin_conf),
                                                       conf_admin_fields, NULL };

/* A peer is reached at its address: a port and a host to connect to. */
static void
conf_check_peer(struct conf_ctx *ctx, void *base, bool clean)
{
    const struct lg_peer_conf *p = base;
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&p->addr;
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&p->addr;

    if (!clean || p->addrlen == 0) {
        return;
    }
    if (a4->sin_port == 0) {
        conf_error_at(ctx, "/admin", "a peer's admin address needs its port");
    } else if ((p->addr.ss_family == AF_INET && a4->sin_addr.s_addr == htonl(INADDR_ANY))
               || (p->addr.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr))) {
        conf_error_at(ctx, "/admin", "a peer's admin address needs a host to connect to");
    }
}

#define PE(f) offsetof(struct lg_peer_conf, f)
static const struct lg_conf_field conf_peer_fields[] = {
    { "admin", LG_CONF_ADDRESS, PE(admin), .required = true, .aux_offset = PE(addr),
      .aux2_offset = PE(addrlen) },
    { .name = NULL },
};
#undef PE
static const struct lg_conf_table conf_peer_table = { sizeof(struct lg_peer_conf), conf_peer_fields,
                                                      conf_check_peer };

#define DI(f) offsetof(struct lg_discover_conf, f)
static const struct lg_conf_field conf_discover_fields[] = {
    { "dns", LG_CONF_STR, DI(dns), .required = true, .check = conf_check_dns_name },
    { "port", LG_CONF_UINT, DI(port), .required = true, .min = 1, .max = 65535 },
    { "interval", LG_CONF_DURATION, DI(interval_ms), .def = CONF_S(5), .min = 100,
      .max = CONF_H(1) },
    { .name = NULL },
};
#undef DI
static const struct lg_conf_table conf_discover_table = { sizeof(struct lg_discover_conf),
                                                          conf_discover_fields, NULL };

/*
 * Cross checks of a backend: url or discover, TLS settings need https (or a
 * discovered backend), a client key needs its certificate.
 */
static void
conf_check_backend(struct conf_ctx *ctx, void *base, bool clean)
{
    struct lg_backend_conf *b = base;

    if (!clean) {
        return;
    }
    if (b->url != NULL && b->discover.dns != NULL) {
        conf_error_at(ctx, "/discover", "give either url or discover, not both");
    } else if (!b->tls && (b->tls_ca_file || b->tls_server_name || b->tls_cert || b->tls_key
                           || b->tls_insecure)) {
        conf_error_at(ctx, "/tls", "TLS settings need an https:// URL");
    } else if ((b->tls_cert == NULL) != (b->tls_key == NULL)) {
        conf_error_at(ctx, b->tls_cert ? "/tls/cert" : "/tls/key",
                      "a client certificate needs both cert and key");
    } else if (b->tls_insecure && b->tls_ca_file != NULL) {
        conf_error_at(ctx, "/tls/insecure_skip_verify", "contradicts ca_file: choose one");
    }
}

#define BT(f) offsetof(struct lg_backend_conf, f)
static const struct lg_conf_field conf_backend_tls_fields[] = {
    { "ca_file", LG_CONF_FILE, BT(tls_ca_file), .required = false },
    { "server_name", LG_CONF_STR, BT(tls_server_name), .check = conf_check_server_name },
    { "cert", LG_CONF_FILE, BT(tls_cert), .required = false },
    { "key", LG_CONF_FILE, BT(tls_key), .required = false },
    { "insecure_skip_verify", LG_CONF_BOOL, BT(tls_insecure), .def = 0 },
    { .name = NULL },
};
#undef BT
/* like listen's: the fields live in struct lg_backend_conf, the "tls" field has offset 0 */
static const struct lg_conf_table conf_backend_tls_table = { sizeof(struct lg_backend_conf),
                                                             conf_backend_tls_fields, NULL };

#define BE(f) offsetof(struct lg_backend_conf, f)
static const struct lg_conf_field conf_backend_fields[] = {
    { "name", LG_CONF_STR, BE(name), .required = true, .check = conf_check_name },
    { "url", LG_CONF_URL, BE(url), .required = true, .unless = "discover" },
    { "discover", LG_CONF_OBJECT, BE(discover), .sub = &conf_discover_table },
    { "models", LG_CONF_STRARRAY, BE(models), .required = true, .unique = true, .min = 1,
      .max = 1024, .aux_offset = BE(nmodels) },
    { "weight", LG_CONF_UINT, BE(weight), .def = 1, .min = 1, .max = 1000 },
    { "max_inflight", LG_CONF_UINT, BE(max_inflight), .def = 0, .min = 0, .max = 1000000 },
    { "flavor", LG_CONF_ENUM, BE(flavor), .def = LG_ENGINE_AUTO, .names = conf_flavors },
    { "metrics_path", LG_CONF_STR, BE(metrics_path), .def_str = "/metrics",
      .check = conf_check_path },
    { "health_path", LG_CONF_STR, BE(health_path), .def_str = "/health", .check = conf_check_path },
    { "api_key", LG_CONF_STR, BE(api_key), .required = false },
    { "enabled", LG_CONF_BOOL, BE(enabled), .def = 1 },
    { "tls", LG_CONF_OBJECT, 0, .sub = &conf_backend_tls_table },
    { .name = NULL },
};
#undef BE
static const struct lg_conf_table conf_backend_table = { sizeof(struct lg_backend_conf),
                                                         conf_backend_fields, conf_check_backend };

#define DS(f) offsetof(struct lg_discovery_conf, f)
static const struct lg_conf_field conf_discovery_fields[] = {
    { "nameserver", LG_CONF_ADDRESS, DS(nameserver), .aux_offset = DS(addr),
      .aux2_offset = DS(addrlen) },
    { "timeout", LG_CONF_DURATION, DS(timeout_ms), .def = CONF_S(2), .min = 10, .max = CONF_M(1) },
    { .name = NULL },
};
#undef DS
static const struct lg_conf_table conf_discovery_table = { sizeof(struct lg_discovery_conf),
                                                           conf_discovery_fields, NULL };

#define AU(f) offsetof(struct lg_auth_conf, f)
static const struct lg_conf_field conf_auth_fields[] = {
    { "keys_file", LG_CONF_FILE, AU(keys_file), .required = true },
    { .name = NULL },
};
#undef AU
static const struct lg_conf_table conf_auth_table = { sizeof(struct lg_auth_conf),
                                                      conf_auth_fields, NULL };

#define CF(f) offsetof(struct lg_config, f)
static const struct lg_conf_field conf_root_fields[] = {
    { "listen", LG_CONF_OBJARRAY, CF(listen), .required = true, .min = 1, .max = 64,
      .sub = &conf_listen_table, .shorthand = "address", .aux_offset = CF(nlisten) },
    { "workers", LG_CONF_UINT, CF(workers), .def = 0, .min = 0, .max = CONF_MAX_WORKERS },
    { "log_level", LG_CONF_ENUM, CF(log_level), .def = LG_LOG_INFO, .names = conf_log_levels },
    { "access_log", LG_CONF_OBJECT, CF(access_log), .sub = &conf_access_log_table,
      .shorthand = "path", .off_false = true },
    { "timeouts", LG_CONF_OBJECT, CF(timeouts), .sub = &conf_timeouts_table },
    { "limits", LG_CONF_OBJECT, CF(limits), .sub = &conf_limits_table },
    { "routing", LG_CONF_OBJECT, CF(routing), .sub = &conf_routing_table },
    { "health", LG_CONF_OBJECT, CF(health), .sub = &conf_health_table },
    { "admin", LG_CONF_OBJECT, CF(admin), .sub = &conf_admin_table, .shorthand = "listen" },
    { "peers", LG_CONF_OBJARRAY, CF(peers), .min = 0, .max = 64, .sub = &conf_peer_table,
      .shorthand = "admin", .aux_offset = CF(npeers) },
    { "discovery", LG_CONF_OBJECT, CF(discovery), .sub = &conf_discovery_table },
    { "auth", LG_CONF_OBJECT, CF(auth), .sub = &conf_auth_table, .shorthand = "keys_file" },
    { "backends", LG_CONF_OBJARRAY, CF(backends), .required = true, .min = 1, .max = 4096,
      .sub = &conf_backend_table, .aux_offset = CF(nbackends) },
    { .name = NULL },
};
#undef CF
static const struct lg_conf_table conf_root_table = { sizeof(struct lg_config), conf_root_fields,
                                                      conf_check_root };

/* ---- loading ------------------------------------------------------------ */

static void
conf_free(struct lg_config *c)
{
    for (size_t i = 0; i < c->ntemplates; i++) {
        conf_free_fields(&conf_backend_table, &c->templates[i]);
    }
    free(c->templates);
    conf_free_fields(&conf_root_table, c);
    json_decref(c->root);
    for (size_t i = 0; i < c->nwarnings; i++) {
        free(c->warnings[i]);
    }
    free(c->warnings);
    free(c->path);
    free(c);
}

/* Backends with "enabled": false were validated like the others; drop them.
 * Templates ("discover") move to templates[]: discovery.c expands them. */
static void
conf_drop_disabled(struct lg_config *c)
{
    size_t k = 0;

    c->templates = lg_xcalloc(c->nbackends ? c->nbackends : 1, sizeof(*c->templates));
    for (size_t i = 0; i < c->nbackends; i++) {
        if (!c->backends[i].enabled) {
            conf_free_fields(&conf_backend_table, &c->backends[i]);
        } else if (c->backends[i].discover.dns != NULL) {
            c->templates[c->ntemplates++] = c->backends[i];
        } else {
            c->backends[k++] = c->backends[i];
        }
    }
    c->nbackends = k;
}

/* 1-based line and column (in UTF-8 characters, as jansson counts) of text[pos]. */
static void
conf_line_col(const char *text, size_t pos, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') {
            ++*line;
            *col = 1;
        } else if (((unsigned char)text[i] & 0xc0) != 0x80) {
            ++*col;
        }
    }
}

int
lg_config_load_buffer_flags(const char *text, size_t len, const char *name, unsigned flags,
                            struct lg_config **out, struct lg_config_errors *errs)
{
    struct conf_ctx ctx = { .name = name, .text = text, .len = len, .flags = flags, .errs = errs };
    json_error_t jerr;
    struct lg_config *c;
    const char *nul;
    json_t *root;

    if (len > LG_CONFIG_MAX_BYTES) {
        conf_errors_add(errs, "%s:1:1: error: /: the file is larger than %u MiB", name,
                        LG_CONFIG_MAX_BYTES >> 20);
        return LG_EINVAL;
    }
    nul = memchr(text, '\0', len);
    if (nul != NULL) {
        /* jansson's buffered reader skips NUL bytes, so positions would drift */
        int line;
        int col;

        conf_line_col(text, (size_t)(nul - text), &line, &col);
        conf_errors_add(errs, "%s:%d:%d: error: /: NUL byte in the file", name, line, col);
        return LG_EINVAL;
    }
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        conf_errors_add(errs, "%s:%d:%d: error: /: %s", name, LG_MAX(jerr.line, 1),
                        LG_MAX(jerr.column, 1), jerr.text);
        return LG_EINVAL;
    }
    c = lg_xcalloc(1, sizeof(*c));
    c->path = lg_xstrdup(name);
    c->root = root;
    c->refcnt = 1;
    conf_defaults(&conf_root_table, c);
    conf_object(&ctx, &conf_root_table, root, c);
    free(ctx.ptr);
    c->warnings = ctx.warnings; /* freed with c */
    c->nwarnings = ctx.nwarnings;
    if (ctx.nerrors > 0) {
        conf_free(c);
        return LG_EINVAL;
    }
    conf_drop_disabled(c);
    *out = c;
    return LG_OK;
}

int
lg_config_load_buffer(const char *text, size_t len, const char *name, struct lg_config **out,
                      struct lg_config_errors *errs)
{
    return lg_config_load_buffer_flags(text, len, name, 0, out, errs);
}

int
lg_config_load(const char *path, struct lg_config **out, struct lg_config_errors *errs)
{
    size_t len = 0;
    size_t cap = (size_t)64 * 1024;
    char *text = NULL;
    FILE *f;
    int rc;

    f = fopen(path, "rb");
    if (f == NULL) {
        conf_errors_add(errs, "%s: error: cannot read: %s", path, strerror(errno));
        return LG_EIO;
    }
    text = lg_xmalloc(cap);
    for (;;) {
        size_t n = fread(text + len, 1, cap - len, f);

        len += n;
        if (n == 0 || len > LG_CONFIG_MAX_BYTES) {
            break;
        }
        if (len == cap) {
            cap *= 2;
            text = lg_xrealloc(text, cap);
        }
    }
    if (ferror(f)) {
        conf_errors_add(errs, "%s: error: cannot read: %s", path, strerror(errno));
        rc = LG_EIO;
    } else {
        rc = lg_config_load_buffer(text, len, path, out, errs);
    }
    fclose(f);
    free(text);
    return rc;
}

struct lg_config *
lg_config_ref(struct lg_config *conf)
{
    __atomic_add_fetch(&conf->refcnt, 1, __ATOMIC_RELAXED);
    return conf;
}

void
lg_config_unref(struct lg_config *conf)
{
    if (conf != NULL && __atomic_sub_fetch(&conf->refcnt, 1, __ATOMIC_ACQ_REL) == 0) {
        conf_free(conf);
    }
}

void
lg_config_errors_print(const struct lg_config_errors *errs, void *file)
{
    FILE *f = file != NULL ? file : stderr;

    for (size_t i = 0; i < errs->n; i++) {
        fprintf(f, "%s\n", errs->msgs[i]);
    }
    if (errs->dropped > 0) {
        fprintf(f, "(%zu more error%s not shown)\n", errs->dropped, errs->dropped > 1 ? "s" : "");
    }
}

void
lg_config_errors_free(struct lg_config_errors *errs)
{
    for (size_t i = 0; i < errs->n; i++) {
        free(errs->msgs[i]);
    }
    memset(errs, 0, sizeof(*errs));
}

const struct lg_backend_conf *
lg_config_backend(const struct lg_config *conf, const char *name)
{
    for (size_t i = 0; i < conf->nbackends; i++) {
        if (strcmp(conf->backends[i].name, name) == 0) {
            return &conf->backends[i];
        }
    }
    return NULL;
}
