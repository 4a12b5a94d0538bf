/*
 * spec.c: seeded random streams and the small grammars of llmload's flags:
 * size specs ("N", "A-B", "mix:P%V,..."), --burst FACTOR:ON_S:OFF_S and
 * durations. Owns nothing; every parser is bounded and reports errors in text.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmload.h"

void
lg_ld_rng_init(struct lg_ld_rng *r, uint64_t seed, uint64_t stream)
{
    r->s = lg_mix64(seed ^ lg_mix64(stream * 0x2545f4914f6cdd1dull));
}

uint64_t
lg_ld_rng_next(struct lg_ld_rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    return lg_mix64(r->s);
}

double
lg_ld_rng_unit(struct lg_ld_rng *r)
{
    return (double)((lg_ld_rng_next(r) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

uint64_t
lg_ld_rng_range(struct lg_ld_rng *r, uint64_t lo, uint64_t hi)
{
    uint64_t span = hi - lo + 1;

    if (hi <= lo) {
        return lo;
    }
    if (span == 0) { /* the whole 64-bit range */
        return lg_ld_rng_next(r);
    }
    /* Lemire's multiply-shift: no modulo bias worth speaking of. */
    return lo + (uint64_t)(((unsigned __int128)lg_ld_rng_next(r) * span) >> 64);
}

/* Parses a decimal integer in [0, max] from [*pp, end); advances *pp. */
static int
spec_uint(const char **pp, const char *end, uint64_t max, uint64_t *out)
{
    const char *p = *pp;
    uint64_t v = 0;

    if (p >= end || *p < '0' || *p > '9') {
        return LG_EINVAL;
    }
    while (p < end && *p >= '0' && *p <= '9') {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > max) {
            return LG_ERR;
        }
        p++;
    }
    *pp = p;
    *out = v;
    return LG_OK;
}

/* "N" or "A-B" filling exactly [p, end). */
static int
spec_range(const char *p, const char *end, uint64_t max, uint64_t *lo, uint64_t *hi, char *err,
           size_t errlen)
{
    const char *start = p;
    int rc = spec_uint(&p, end, max, lo);

    if (rc == LG_OK && p < end && *p == '-') {
        p++;
        rc = spec_uint(&p, end, max, hi);
    } else {
        *hi = *lo;
    }
    if (rc == LG_ERR) {
        snprintf(err, errlen, "value in '%.*s' exceeds %" PRIu64, (int)(end - start), start, max);
        return LG_EINVAL;
    }
    if (rc != LG_OK || p != end) {
        snprintf(err, errlen, "'%.*s' is not N or A-B", (int)(end - start), start);
        return LG_EINVAL;
    }
    if (*hi < *lo) {
        snprintf(err, errlen, "range '%.*s' has A > B", (int)(end - start), start);
        return LG_EINVAL;
    }
    return LG_OK;
}

int
lg_ld_spec_parse(struct lg_ld_spec *spec, const char *s, uint64_t max, char *err, size_t errlen)
{
    const char *p, *end;
    double total = 0;

    memset(spec, 0, sizeof(*spec));
    if (strncmp(s, "mix:", 4) != 0) {
        spec->n = 1;
        spec->cum[0] = 1.0;
        return spec_range(s, s + strlen(s), max, &spec->lo[0], &spec->hi[0], err, errlen);
    }
    p = s + 4;
    end = p + strlen(p);
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *item_end = comma ? comma : end;
        const char *pct = memchr(p, '%', (size_t)(item_end - p));
        char num[32], *num_end;
        double w;

        if (spec->n == LG_LD_SPEC_MAX_PARTS) {
            snprintf(err, errlen, "mix has more than %d parts", LG_LD_SPEC_MAX_PARTS);
            return LG_EINVAL;
        }
        if (pct == NULL || pct == p || (size_t)(pct - p) >= sizeof(num)) {
            snprintf(err, errlen, "mix part '%.*s' is not P%%V", (int)(item_end - p), p);
            return LG_EINVAL;
        }
        memcpy(num, p, (size_t)(pct - p));
        num[pct - p] = '\0';
        errno = 0;
        w = strtod(num, &num_end);
        if (errno != 0 || *num_end != '\0' || num[0] == '-' || num[0] == '+' || !isfinite(w)
            || w <= 0 || w > 100) {
            snprintf(err, errlen, "mix weight '%s' is not a percentage in (0, 100]", num);
            return LG_EINVAL;
        }
        if (spec_range(pct + 1, item_end, max, &spec->lo[spec->n], &spec->hi[spec->n], err, errlen)
            != LG_OK) {
            return LG_EINVAL;
        }
        total += w;
        spec->cum[spec->n++] = total;
        if (comma == NULL) {
            break;
        }
        p = comma + 1;
        if (p == end) {
            snprintf(err, errlen, "mix ends with ','");
            return LG_EINVAL;
        }
    }
    if (spec->n == 0) {
        snprintf(err, errlen, "mix has no parts");
        return LG_EINVAL;
    }
    if (fabs(total - 100.0) > 1e-6) {
        snprintf(err, errlen, "mix weights add up to %g%%, not 100%%", total);
        return LG_EINVAL;
    }
    for (size_t i = 0; i < spec->n; i++) {
        spec->cum[i] /= total;
    }
    spec->cum[spec->n - 1] = 1.0;
    return LG_OK;
}

uint64_t
lg_ld_spec_sample(const struct lg_ld_spec *spec, struct lg_ld_rng *r)
{
    size_t i = 0;

    if (spec->n > 1) {
        double u = lg_ld_rng_unit(r);

        while (i + 1 < spec->n && u > spec->cum[i]) {
            i++;
        }
    }
    return lg_ld_rng_range(r, spec->lo[i], spec->hi[i]);
}

uint64_t
lg_ld_spec_max(const struct lg_ld_spec *spec)
{
    uint64_t m = 0;

    for (size_t i = 0; i < spec->n; i++) {
        m = LG_MAX(m, spec->hi[i]);
    }
    return m;
}

double
lg_ld_spec_mean(const struct lg_ld_spec *spec)
{
    double mean = 0, prev = 0;

    for (size_t i = 0; i < spec->n; i++) {
        mean += (spec->cum[i] - prev) * ((double)spec->lo[i] + (double)spec->hi[i]) / 2.0;
        prev = spec->cum[i];
    }
    return mean;
}

/* A positive, finite decimal filling the whole of s. */
static int
spec_double(const char *s, double *out)
{
    char *end;

    errno = 0;
    *out = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(*out) || s[0] == '-' || s[0] == '+') {
        return LG_EINVAL;
    }
    return LG_OK;
}

int
lg_ld_burst_parse(struct lg_ld_burst *b, const char *s, char *err, size_t errlen)
{
    char buf[128], *f[3], *save = NULL;
    size_t n = 0;

    memset(b, 0, sizeof(*b));
    if (strlen(s) >= sizeof(buf)) {
        snprintf(err, errlen, "--burst: too long");
        return LG_EINVAL;
    }
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *t = strtok_r(buf, ":", &save); t != NULL; t = strtok_r(NULL, ":", &save)) {
        if (n == 3) {
            n++;
            break;
        }
        f[n++] = t;
    }
    if (n != 3 || spec_double(f[0], &b->factor) != LG_OK
        || lg_ld_parse_seconds(f[1], &b->on_s) != LG_OK
        || lg_ld_parse_seconds(f[2], &b->off_s) != LG_OK) {
        snprintf(err, errlen, "--burst '%s': expected FACTOR:ON_S:OFF_S, e.g. 4:1:3", s);
        return LG_EINVAL;
    }
    if (b->factor < 1 || b->on_s <= 0 || b->off_s <= 0) {
        snprintf(err, errlen, "--burst '%s': FACTOR must be >= 1 and both windows > 0", s);
        return LG_EINVAL;
    }
    if (b->factor * b->on_s > b->on_s + b->off_s + 1e-9) {
        snprintf(err, errlen,
                 "--burst '%s': FACTOR*ON_S must not exceed ON_S+OFF_S, or no OFF rate can "
                 "keep the mean at --rate",
                 s);
        return LG_EINVAL;
    }
    b->enabled = true;
    return LG_OK;
}

double
lg_ld_burst_off_factor(const struct lg_ld_burst *b)
{
    double f = (b->on_s + b->off_s - b->factor * b->on_s) / b->off_s;

    return f < 0 ? 0 : f;
}

int
lg_ld_parse_seconds(const char *s, double *out)
{
    char buf[64];
    size_t n = strlen(s);
    double scale = 1;

    if (n == 0 || n >= sizeof(buf)) {
        return LG_EINVAL;
    }
    memcpy(buf, s, n + 1);
    if (n > 2 && strcmp(buf + n - 2, "ms") == 0) {
        scale = 1e-3;
        buf[n - 2] = '\0';
    } else if (buf[n - 1] == 's') {
        buf[n - 1] = '\0';
    } else if (buf[n - 1] == 'm') {
        scale = 60;
        buf[n - 1] = '\0';
    }
    if (spec_double(buf, out) != LG_OK || *out > 1e9) {
        return LG_EINVAL;
    }
    *out *= scale;
    return LG_OK;
}
