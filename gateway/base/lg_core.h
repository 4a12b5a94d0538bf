/*
 * lg_core.h: return codes, logging macros, clocks and the few helpers every
 * module shares. Owns nothing. Keep it small: a type that belongs to one
 * module lives in that module's header.
 */
#ifndef LG_CORE_H
#define LG_CORE_H

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include <llmgate/hstream.h> /* the prefix hash (lg_hstream) */

enum lg_rc {
    LG_OK = 0,
    LG_ERR = -1,       /* failed, already logged by the callee */
    LG_ENOMEM = -2,
    LG_EINVAL = -3,    /* bad input from a client or the config */
    LG_EPROTO = -4,    /* a peer broke HTTP or SSE framing */
    LG_EIO = -5,
    LG_ETIMEDOUT = -6,
    LG_EBUSY = -7,     /* no capacity now: queue full, no healthy replica */
    LG_EAGAIN = -8,    /* not a failure: would block, call again on the next event */
    LG_EDECLINED = -9, /* not a failure: not mine, try the next candidate */
};

/* A static string naming rc ("ENOMEM"...). */
const char *lg_rc_str(int rc);

/* ---- logging (log.c) ---------------------------------------------------- */

enum lg_log_level { LG_LOG_ERROR = 0, LG_LOG_WARN, LG_LOG_INFO, LG_LOG_DEBUG };
/* atomic: a reload sets it on the main thread while workers log */
extern enum lg_log_level lg_log_threshold;

void lg_log_emit(enum lg_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Parses "error|warn|info|debug"; returns LG_EINVAL for anything else. */
int lg_log_level_parse(const char *s, enum lg_log_level *out);

#define LG_LOG(level, ...)                                                               \
    do {                                                                                 \
        if ((int)(level) <= (int)__atomic_load_n(&lg_log_threshold, __ATOMIC_RELAXED)) { \
            lg_log_emit((level), __FILE__, __LINE__, __VA_ARGS__);                       \
        }                                                                                \
    } while (0)
#define LG_ERROR(...) LG_LOG(LG_LOG_ERROR, __VA_ARGS__)
#define LG_WARN(...)  LG_LOG(LG_LOG_WARN, __VA_ARGS__)
#define LG_INFO(...)  LG_LOG(LG_LOG_INFO, __VA_ARGS__)
#define LG_DEBUG(...) LG_LOG(LG_LOG_DEBUG, __VA_ARGS__)

/*
 * Rate limiting for repeated warnings: returns true at most once per
 * interval_ns for the given state word (a static uint64_t per call site, or a
 * field per backend). Thread-safe.
 */
bool lg_log_ratelimit(uint64_t *last_ns, uint64_t interval_ns);

#define LG_BUG_ON(cond)                                                   \
    do {                                                                  \
        if (__builtin_expect(!!(cond), 0)) {                              \
            lg_log_emit(LG_LOG_ERROR, __FILE__, __LINE__, "BUG: %s", #cond); \
            abort();                                                      \
        }                                                                 \
    } while (0)

/* ---- clocks ------------------------------------------------------------- */

#define LG_NS_PER_MS 1000000ull
#define LG_NS_PER_S  1000000000ull

/* Monotonic nanoseconds (CLOCK_MONOTONIC). */
static inline uint64_t
lg_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * LG_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* Wall-clock nanoseconds since the epoch (CLOCK_REALTIME), for log stamps. */
static inline uint64_t
lg_wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * LG_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* ---- memory ------------------------------------------------------------- */

/* Allocation of small, fixed-size objects: log and abort on failure. */
void *lg_xmalloc(size_t n);
void *lg_xcalloc(size_t nmemb, size_t size);
void *lg_xrealloc(void *p, size_t n);
char *lg_xstrdup(const char *s);
char *lg_xstrndup(const char *s, size_t n);

struct sockaddr_storage;
/* Formats an address as "1.2.3.4:80" or "[::1]:80" (util.c). */
void lg_sockaddr_format(const struct sockaddr_storage *ss, char *out, size_t outlen);

/*
 * What an operator can do when a listening socket cannot be opened (errno of
 * socket/bind/listen) or a descriptor cannot be had: a static sentence, e.g.
 * for EADDRINUSE "another process listens there: stop it, or choose another
 * port", naming `key` (the config key of the address).
 */
const char *lg_errno_hint(int err, const char *key, char *buf, size_t len);

/* ---- small helpers ------------------------------------------------------ */

#define LG_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
/* The `type` whose field `member` ptr points at. */
#define LG_CONTAINER_OF(ptr, type, member) \
    ((type *)(void *)((char *)(ptr)-offsetof(type, member)))
#define LG_MIN(a, b)     ((a) < (b) ? (a) : (b))
#define LG_MAX(a, b)     ((a) > (b) ? (a) : (b))

/*
 * ASCII case-insensitive equality of n bytes (HTTP names and tokens are
 * ASCII): inline, for the short names of a request's headers, where
 * strncasecmp's call and locale table cost more than the compare.
 */
static inline bool
lg_mem_ieq(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];

        if (x != y) {
            x = (unsigned char)((unsigned)(x - 'A') < 26u ? x + 32 : x);
            y = (unsigned char)((unsigned)(y - 'A') < 26u ? y + 32 : y);
            if (x != y) {
                return false;
            }
        }
    }
    return true;
}

/*
 * Eight bytes at once, in a word loaded (memcpy) from memory: a high bit in
 * each byte equal to c (lg_swar_eq), or below c for c <= 0x80 (lg_swar_lt;
 * bytes >= 0x80 never count as below). Borrows only run upwards, so the
 * lowest byte flagged is a true one, in each mask and in an OR of them;
 * bytes above it may be flagged falsely. lg_swar_first gives its index.
 */
#define LG_SWAR_ONES 0x0101010101010101ull
#define LG_SWAR_HIGH 0x8080808080808080ull

static inline uint64_t
lg_swar_eq(uint64_t x, unsigned char c)
{
    uint64_t y = x ^ (LG_SWAR_ONES * c);

    return (y - LG_SWAR_ONES) & ~y & LG_SWAR_HIGH;
}

static inline uint64_t
lg_swar_lt(uint64_t x, unsigned char c)
{
    return (x - LG_SWAR_ONES * c) & ~x & LG_SWAR_HIGH;
}

static inline size_t
lg_swar_first(uint64_t m)
{
    return (size_t)__builtin_ctzll(m) >> 3;
}

/*
 * Case-insensitive comparison of a counted string with a C string. Inline:
 * with a literal the length test is a constant and most calls end there.
 */
static inline bool
lg_str_ieq(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && lg_mem_ieq(s, lit, n);
}

/*
 * Decimal digits of v, right-aligned in b[LG_U64_DIGITS]; returns where they
 * start (hot paths format numbers without printf).
 */
#define LG_U64_DIGITS 20
static inline char *
lg_u64_digits(char b[LG_U64_DIGITS], uint64_t v)
{
    char *p = b + LG_U64_DIGITS;

    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    return p;
}

/* 64-bit FNV-1a, for short keys (names, addresses, header values). */
static inline uint64_t
lg_hash64(const void *data, size_t n, uint64_t h)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define LG_HASH64_INIT 0xcbf29ce484222325ull

/* splitmix64: mixes a 64-bit value (hash finaliser, seeded RNG step). */
static inline uint64_t
lg_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/*
 * A timeout of ms milliseconds for event_add() or bufferevent_set_timeouts():
 * tv filled in, or NULL when ms is 0 (no timeout).
 */
static inline const struct timeval *
lg_timeval_ms(uint64_t ms, struct timeval *tv)
{
    if (ms == 0) {
        return NULL;
    }
    tv->tv_sec = (time_t)(ms / 1000);
    tv->tv_usec = (suseconds_t)((ms % 1000) * 1000);
    return tv;
}

#endif /* LG_CORE_H */
