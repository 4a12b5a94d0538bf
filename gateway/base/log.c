/*
 * log.c: the error log. Text lines on stderr, one per event:
 *   2026-11-30T12:00:00.123Z warn  client.c:412: conn=7 while relaying: ...
 * Owns nothing but the threshold. Thread-safe: each line is formatted into a
 * stack buffer and written with one write(2), so lines never interleave.
 * A line that standard error has no room for (its reader stalled) is dropped
 * and counted rather than stalling the thread that logs it: an event loop.
 */
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/lg_core.h"

enum lg_log_level lg_log_threshold = LG_LOG_INFO;
static uint64_t log_dropped; /* atomic: lines stderr had no room for */

static const char *const log_level_names[] = { "error", "warn", "info", "debug" };

int
lg_log_level_parse(const char *s, enum lg_log_level *out)
{
    for (size_t i = 0; i < LG_ARRAY_SIZE(log_level_names); i++) {
        if (strcasecmp(s, log_level_names[i]) == 0) {
            *out = (enum lg_log_level)i;
            return LG_OK;
        }
    }
    return LG_EINVAL;
}

/* One line to stderr, unless its reader has left no room (a pipe at most PIPE_BUF
 * bytes from full: the line is shorter, so this write neither blocks nor splits). */
static void
log_write(const char *line, size_t n)
{
    struct pollfd p = { .fd = STDERR_FILENO, .events = POLLOUT };
    uint64_t dropped;

    if (poll(&p, 1, 0) == 0) {
        __atomic_fetch_add(&log_dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    dropped = __atomic_exchange_n(&log_dropped, 0, __ATOMIC_RELAXED);
    if (dropped > 0) {
        char note[160];
        int k = snprintf(note, sizeof(note),
                         "llmgate: %" PRIu64 " error-log lines were dropped: standard error had "
                         "no room (its reader stalled)\n",
                         dropped);

        if (write(STDERR_FILENO, note, (size_t)k) < 0) {
            /* nowhere left to report it */
        }
    }
    if (write(STDERR_FILENO, line, n) < 0) {
        /* nowhere left to report it */
    }
}

void
lg_log_emit(enum lg_log_level level, const char *file, int line, const char *fmt, ...)
{
    char buf[2048];
    uint64_t now = lg_wall_ns();
    time_t sec = (time_t)(now / LG_NS_PER_S);
    struct tm tm;
    const char *base = strrchr(file, '/');
    size_t n;
    va_list ap;
    int k;

    gmtime_r(&sec, &tm);
    n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
    k = snprintf(buf + n, sizeof(buf) - n, ".%03uZ %-5s %s:%d: ",
                 (unsigned)((now / LG_NS_PER_MS) % 1000), log_level_names[level],
                 base ? base + 1 : file, line);
    n += (k > 0) ? (size_t)k : 0;
    va_start(ap, fmt);
    k = vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
    va_end(ap);
    if (k > 0) {
        n += LG_MIN((size_t)k, sizeof(buf) - n - 1);
    }
    if (n >= sizeof(buf) - 1) {
        n = sizeof(buf) - 2;
    }
    buf[n++] = '\n';
    log_write(buf, n);
}

bool
lg_log_ratelimit(uint64_t *last_ns, uint64_t interval_ns)
{
    uint64_t now = lg_now_ns();
    uint64_t last = __atomic_load_n(last_ns, __ATOMIC_RELAXED);

    if (last != 0 && now - last < interval_ns) {
        return false;
    }
    return __atomic_compare_exchange_n(last_ns, &last, now, false, __ATOMIC_RELAXED,
                                       __ATOMIC_RELAXED);
}
