/*
 * fault.c: parses fault SPECs and answers "what is in effect at time t" for
 * llmsim's fault schedule (grammar in fault.h).
 *
 * Owns: nothing beyond the caller's struct lg_sim_faults.
 * Numbers are parsed strictly (digits, optional fraction; no sign, exponent,
 * spaces or hex) and bounded, so a SPEC from a test or a control request
 * cannot produce NaN, infinity or an overflowing time.
 */
#include "fault.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/lg_core.h"

static int fault_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
fault_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return LG_EINVAL;
}

/* Parses digits[.digits] at *p into *out, advancing *p; false if malformed. */
static bool
fault_decimal(const char **p, double *out)
{
    const char *s = *p;
    double v = 0;
    double scale = 0.1;
    int digits = 0;

    while (*s >= '0' && *s <= '9') {
        if (v < 1e12) {
            v = v * 10 + (*s - '0');
        } else {
            v = 1e13; /* saturate: rejected by every bound below */
        }
        s++;
        digits++;
    }
    if (digits == 0) {
        return false;
    }
    if (*s == '.') {
        s++;
        digits = 0;
        while (*s >= '0' && *s <= '9') {
            if (digits < 9) {
                v += (*s - '0') * scale;
                scale /= 10;
            }
            s++;
            digits++;
        }
        if (digits == 0) {
            return false;
        }
    }
    *out = v;
    *p = s;
    return true;
}

static bool
fault_integer(const char **p, uint64_t max, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;

    if (*s < '0' || *s > '9') {
        return false;
    }
    while (*s >= '0' && *s <= '9') {
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max) {
            return false;
        }
        s++;
    }
    *out = v;
    *p = s;
    return true;
}

static uint64_t
fault_seconds_ns(double s)
{
    return (uint64_t)llround(s * 1e9);
}

/* Parses a time in seconds followed by `:` or the end; bounded by LG_SIM_FAULT_MAX_S. */
static bool
fault_time(const char **p, uint64_t *ns)
{
    double v;

    if (!fault_decimal(p, &v) || v > LG_SIM_FAULT_MAX_S) {
        return false;
    }
    *ns = fault_seconds_ns(v);
    return true;
}

static bool
fault_sep(const char **p)
{
    if (**p != ':') {
        return false;
    }
    (*p)++;
    return true;
}

static int
fault_parse_slow(const char *s, struct lg_sim_fault *f, char *err, size_t errlen)
{
    uint64_t d;

    if (!fault_time(&s, &f->start_ns) || !fault_sep(&s) || !fault_decimal(&s, &f->factor)) {
        return fault_fail(err, errlen, "expected slow@T:F[:D]");
    }
    if (!(f->factor > 0) || f->factor > 1e6) {
        return fault_fail(err, errlen, "slow factor must be > 0 and <= 1000000");
    }
    if (*s == ':') {
        s++;
        if (!fault_time(&s, &d)) {
            return fault_fail(err, errlen, "expected slow@T:F[:D]");
        }
        f->end_ns = f->start_ns + d;
    }
    if (*s != '\0') {
        return fault_fail(err, errlen, "trailing characters after slow@T:F[:D]");
    }
    return LG_OK;
}

static int
fault_parse_stall(const char *s, struct lg_sim_fault *f, char *err, size_t errlen)
{
    uint64_t d;

    if (!fault_time(&s, &f->start_ns)) {
        return fault_fail(err, errlen, "expected stall@T[:D]");
    }
    if (*s == ':') {
        s++;
        if (!fault_time(&s, &d)) {
            return fault_fail(err, errlen, "expected stall@T[:D]");
        }
        f->end_ns = f->start_ns + d;
    }
    if (*s != '\0') {
        return fault_fail(err, errlen, "trailing characters after stall@T[:D]");
    }
    return LG_OK;
}

static int
fault_parse_status(const char *s, struct lg_sim_fault *f, char *err, size_t errlen)
{
    uint64_t code;
    uint64_t d;
    uint64_t retry;

    if (!fault_time(&s, &f->start_ns) || !fault_sep(&s) || !fault_integer(&s, 999, &code)
        || !fault_sep(&s) || !fault_time(&s, &d)) {
        return fault_fail(err, errlen, "expected status@T:CODE:D[:RETRY_AFTER_S]");
    }
    if (code < 400 || code > 599) {
        return fault_fail(err, errlen, "status CODE must be within 400..599 (got %u)",
                          (unsigned)code);
    }
    f->status = (int)code;
    f->end_ns = f->start_ns + d;
    if (*s == ':') {
        s++;
        if (!fault_integer(&s, 86400, &retry)) {
            return fault_fail(err, errlen, "RETRY_AFTER_S must be an integer within 0..86400");
        }
        f->retry_after_s = (int)retry;
    }
    if (*s != '\0') {
        return fault_fail(err, errlen, "trailing characters after status@T:CODE:D[:RETRY_AFTER_S]");
    }
    return LG_OK;
}

/* RATE:D of stall-random, P:D of stall-first (the same shape: a number, a duration). */
static int
fault_parse_random(const char *s, struct lg_sim_fault *f, char *err, size_t errlen)
{
    const char *form = f->kind == LG_SIM_FAULT_STALL_RANDOM ? "stall-random:RATE:D"
                                                              : "stall-first:P:D";
    double x;

    if (!fault_decimal(&s, &x) || !fault_sep(&s) || !fault_time(&s, &f->hold_ns)
        || *s != '\0') {
        return fault_fail(err, errlen, "expected %s", form);
    }
    if (f->hold_ns == 0) {
        return fault_fail(err, errlen, "%s: D must be > 0", form);
    }
    if (f->kind == LG_SIM_FAULT_STALL_RANDOM) {
        if (!(x > 0) || x > 1000) {
            return fault_fail(err, errlen, "stall-random RATE must be > 0 and <= 1000 a second");
        }
        f->rate = x;
    } else {
        if (x > 1) {
            return fault_fail(err, errlen, "stall-first P must be within 0..1");
        }
        f->prob = x;
    }
    return LG_OK;
}

int
lg_sim_fault_parse(const char *spec, struct lg_sim_fault *out, char *err, size_t errlen)
{
    static const char close_kw[] = "close-after-tokens:";
    static const char random_kw[] = "stall-random:";
    static const char first_kw[] = "stall-first:";
    struct lg_sim_fault f = {
        .end_ns = LG_SIM_FAULT_FOREVER,
        .factor = 1.0,
        .retry_after_s = -1,
    };
    const char *s = spec;
    uint64_t n;
    int rc;

    if (errlen > 0) {
        err[0] = '\0';
    }
    if (strncmp(s, "slow@", 5) == 0) {
        f.kind = LG_SIM_FAULT_SLOW;
        rc = fault_parse_slow(s + 5, &f, err, errlen);
    } else if (strncmp(s, "stall@", 6) == 0) {
        f.kind = LG_SIM_FAULT_STALL;
        rc = fault_parse_stall(s + 6, &f, err, errlen);
    } else if (strncmp(s, "status@", 7) == 0) {
        f.kind = LG_SIM_FAULT_STATUS;
        rc = fault_parse_status(s + 7, &f, err, errlen);
    } else if (strncmp(s, "crash@", 6) == 0) {
        f.kind = LG_SIM_FAULT_CRASH;
        s += 6;
        if (!fault_time(&s, &f.start_ns)) {
            rc = fault_fail(err, errlen, "expected crash@T[:reset]");
        } else if (strcmp(s, ":reset") == 0) {
            f.reset = true;
            rc = LG_OK;
        } else {
            rc = *s == '\0' ? LG_OK : fault_fail(err, errlen, "expected crash@T[:reset]");
        }
    } else if (strncmp(s, close_kw, sizeof(close_kw) - 1) == 0) {
        f.kind = LG_SIM_FAULT_CLOSE_AFTER_TOKENS;
        s += sizeof(close_kw) - 1;
        if (!fault_integer(&s, 1000000, &n) || n == 0 || *s != '\0') {
            rc = fault_fail(err, errlen, "expected close-after-tokens:N with N in 1..1000000");
        } else {
            f.tokens = (uint32_t)n;
            rc = LG_OK;
        }
    } else if (strncmp(s, random_kw, sizeof(random_kw) - 1) == 0) {
        f.kind = LG_SIM_FAULT_STALL_RANDOM;
        rc = fault_parse_random(s + sizeof(random_kw) - 1, &f, err, errlen);
    } else if (strncmp(s, first_kw, sizeof(first_kw) - 1) == 0) {
        f.kind = LG_SIM_FAULT_STALL_FIRST;
        rc = fault_parse_random(s + sizeof(first_kw) - 1, &f, err, errlen);
    } else {
        rc = fault_fail(err, errlen,
                        "unknown fault (expected slow@, stall@, status@, crash@, "
                        "close-after-tokens:, stall-random: or stall-first:)");
    }
    if (rc == LG_OK) {
        *out = f;
    }
    return rc;
}

/* A decimal the parser reads back: fixed point, at most 9 decimals, no exponent. */
static void
fault_format_decimal(char *buf, size_t len, double v)
{
    int n = snprintf(buf, len, "%.9f", v);

    if (n <= 0 || (size_t)n >= len) {
        return;
    }
    while (n > 1 && buf[n - 1] == '0') {
        buf[--n] = '\0';
    }
    if (buf[n - 1] == '.') {
        buf[n - 1] = '\0';
    }
}

static void
fault_format_time(char *buf, size_t len, uint64_t ns)
{
    fault_format_decimal(buf, len, (double)ns / 1e9);
}

void
lg_sim_fault_format(const struct lg_sim_fault *f, uint64_t origin_ns, char *buf, size_t len)
{
    char t[32];
    char d[40] = "";
    char factor[32];
    uint64_t start = f->start_ns > origin_ns ? f->start_ns - origin_ns : 0;

    fault_format_time(t, sizeof(t), start);
    if (f->end_ns != LG_SIM_FAULT_FOREVER) {
        d[0] = ':';
        fault_format_time(d + 1, sizeof(d) - 1, f->end_ns - f->start_ns);
    }
    switch (f->kind) {
    case LG_SIM_FAULT_SLOW:
        fault_format_decimal(factor, sizeof(factor), f->factor);
        snprintf(buf, len, "slow@%s:%s%s", t, factor, d);
        break;
    case LG_SIM_FAULT_STALL:
        snprintf(buf, len, "stall@%s%s", t, d);
        break;
    case LG_SIM_FAULT_STATUS:
        if (f->retry_after_s >= 0) {
            snprintf(buf, len, "status@%s:%d%s:%d", t, f->status, d, f->retry_after_s);
        } else {
            snprintf(buf, len, "status@%s:%d%s", t, f->status, d);
        }
        break;
    case LG_SIM_FAULT_CRASH:
        snprintf(buf, len, "crash@%s%s", t, f->reset ? ":reset" : "");
        break;
    case LG_SIM_FAULT_CLOSE_AFTER_TOKENS:
        snprintf(buf, len, "close-after-tokens:%u", f->tokens);
        break;
    case LG_SIM_FAULT_STALL_RANDOM:
    case LG_SIM_FAULT_STALL_FIRST:
        fault_format_decimal(factor, sizeof(factor),
                             f->kind == LG_SIM_FAULT_STALL_RANDOM ? f->rate : f->prob);
        fault_format_time(t, sizeof(t), f->hold_ns);
        snprintf(buf, len, "%s:%s:%s",
                 f->kind == LG_SIM_FAULT_STALL_RANDOM ? "stall-random" : "stall-first", factor, t);
        break;
    }
}

/* A uniform draw in [0, 1) from a seed and a counter. */
static double
fault_unit(uint64_t seed, uint64_t n)
{
    return (double)(lg_mix64(seed ^ lg_mix64(n)) >> 11) * 0x1.0p-53;
}

/* stall-random: the stall after `from`, an exponential gap of mean 1/rate later. */
static void
fault_next_stall(struct lg_sim_fault *f, uint64_t from)
{
    double gap_s = -log1p(-fault_unit(f->seed, ++f->rng)) / f->rate;

    f->win_start_ns = from + fault_seconds_ns(LG_MIN(gap_s, LG_SIM_FAULT_MAX_S));
    f->win_end_ns = f->win_start_ns + f->hold_ns;
}

int
lg_sim_faults_add(struct lg_sim_faults *fs, const struct lg_sim_fault *f, uint64_t origin_ns)
{
    struct lg_sim_fault *dst;

    if (fs->n >= LG_SIM_FAULTS_MAX) {
        return LG_EBUSY;
    }
    dst = &fs->list[fs->n++];
    *dst = *f;
    dst->start_ns = origin_ns + f->start_ns;
    if (f->end_ns != LG_SIM_FAULT_FOREVER) {
        dst->end_ns = origin_ns + f->end_ns;
    }
    if (f->kind == LG_SIM_FAULT_STALL_RANDOM) {
        dst->rng = 0;
        fault_next_stall(dst, dst->start_ns);
    }
    return LG_OK;
}

void
lg_sim_faults_clear(struct lg_sim_faults *fs)
{
    fs->n = 0;
}

static bool
fault_active(const struct lg_sim_fault *f, uint64_t now)
{
    return now >= f->start_ns && now < f->end_ns;
}

void
lg_sim_faults_prune(struct lg_sim_faults *fs, uint64_t now)
{
    size_t kept = 0;

    for (size_t i = 0; i < fs->n; i++) {
        struct lg_sim_fault *f = &fs->list[i];

        while (f->kind == LG_SIM_FAULT_STALL_RANDOM && f->win_end_ns <= now) {
            fault_next_stall(f, f->win_end_ns);
        }
        if (f->end_ns > now) {
            fs->list[kept++] = *f;
        }
    }
    fs->n = kept;
}

double
lg_sim_faults_slowdown(const struct lg_sim_faults *fs, uint64_t now)
{
    double f = 1.0;

    for (size_t i = 0; i < fs->n; i++) {
        if (fs->list[i].kind == LG_SIM_FAULT_SLOW && fault_active(&fs->list[i], now)) {
            f *= fs->list[i].factor;
        }
    }
    return LG_MIN(f, 1e12);
}

bool
lg_sim_faults_stalled(const struct lg_sim_faults *fs, uint64_t now)
{
    for (size_t i = 0; i < fs->n; i++) {
        const struct lg_sim_fault *f = &fs->list[i];

        if (f->kind == LG_SIM_FAULT_STALL && fault_active(f, now)) {
            return true;
        }
        if (f->kind == LG_SIM_FAULT_STALL_RANDOM && now >= f->win_start_ns
            && now < f->win_end_ns) {
            return true;
        }
    }
    return false;
}

uint64_t
lg_sim_faults_first_hold(const struct lg_sim_faults *fs, uint64_t now, uint64_t draw)
{
    uint64_t hold = 0;

    for (size_t i = 0; i < fs->n; i++) {
        const struct lg_sim_fault *f = &fs->list[i];

        if (f->kind == LG_SIM_FAULT_STALL_FIRST && fault_active(f, now)
            && fault_unit(f->seed, draw) < f->prob && f->hold_ns > hold) {
            hold = f->hold_ns;
        }
    }
    return hold;
}

bool
lg_sim_faults_status(const struct lg_sim_faults *fs, uint64_t now, int *status,
                     uint32_t *retry_after_s)
{
    for (size_t i = fs->n; i-- > 0;) {
        const struct lg_sim_fault *f = &fs->list[i];

        if (f->kind != LG_SIM_FAULT_STATUS || !fault_active(f, now)) {
            continue;
        }
        *status = f->status;
        if (f->retry_after_s >= 0) {
            *retry_after_s = (uint32_t)f->retry_after_s;
        } else {
            /* the rest of the window, rounded up, at least a second */
            uint64_t left = f->end_ns - now;

            *retry_after_s = (uint32_t)LG_MAX(1, (left + LG_NS_PER_S - 1) / LG_NS_PER_S);
        }
        return true;
    }
    return false;
}

bool
lg_sim_faults_crash_due(const struct lg_sim_faults *fs, uint64_t now, bool *reset)
{
    bool due = false;

    *reset = false;
    for (size_t i = 0; i < fs->n; i++) {
        if (fs->list[i].kind == LG_SIM_FAULT_CRASH && now >= fs->list[i].start_ns) {
            due = true;
            *reset = *reset || fs->list[i].reset;
        }
    }
    return due;
}

uint32_t
lg_sim_faults_close_after(const struct lg_sim_faults *fs, uint64_t now)
{
    uint32_t n = 0;

    for (size_t i = 0; i < fs->n; i++) {
        const struct lg_sim_fault *f = &fs->list[i];

        if (f->kind == LG_SIM_FAULT_CLOSE_AFTER_TOKENS && fault_active(f, now)
            && (n == 0 || f->tokens < n)) {
            n = f->tokens;
        }
    }
    return n;
}

uint64_t
lg_sim_faults_next_edge(const struct lg_sim_faults *fs, uint64_t now)
{
    uint64_t next = LG_SIM_FAULT_FOREVER;

    for (size_t i = 0; i < fs->n; i++) {
        const struct lg_sim_fault *f = &fs->list[i];

        if (f->start_ns > now && f->start_ns < next) {
            next = f->start_ns;
        }
        if (f->end_ns > now && f->end_ns < next) {
            next = f->end_ns;
        }
        if (f->kind != LG_SIM_FAULT_STALL_RANDOM) {
            continue;
        }
        if (f->win_start_ns > now && f->win_start_ns < next) {
            next = f->win_start_ns;
        }
        if (f->win_end_ns > now && f->win_end_ns < next) {
            next = f->win_end_ns;
        }
    }
    return next;
}
