/*
 * cpus.c: the CPUs this process may use (see cpus.h): its affinity mask and
 * its cgroup's CPU quota, read once at start for `"workers": "auto"`.
 *
 * Owns nothing. The parsers read (text, len) without assuming a NUL and
 * never write past the sizes they are given (tests/fuzz/fuzz_cpus.c).
 */
#include "base/cpus.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A host with many mounts (a node running containers) has a long mountinfo;
 * the cgroup mounts come early in it, and what does not fit is not read. */
#define CPUS_MOUNTINFO_MAX (1u << 20)

/* ---- parsers ------------------------------------------------------------ */

/* Digits at *p (at most 19: no overflow); advances *p. */
static bool
cpus_u64(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;

    while (s < end && *s >= '0' && *s <= '9' && s - *p < 19) {
        v = v * 10 + (uint64_t)(*s - '0');
        s++;
    }
    if (s == *p || (s < end && *s >= '0' && *s <= '9')) {
        return false;
    }
    *p = s;
    *out = v;
    return true;
}

static const char *
cpus_skip_blank(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t')) {
        p++;
    }
    return p;
}

/* Nothing but white space (a newline included) up to end. */
static bool
cpus_rest_blank(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
        p++;
    }
    return p == end;
}

int
lg_cpus_parse_cpu_max(const char *text, size_t len, struct lg_cpus_quota *out)
{
    const char *p = text, *end = text + len;
    uint64_t quota = 0, period;

    if (len >= 3 && memcmp(p, "max", 3) == 0) {
        p += 3;
    } else if (!cpus_u64(&p, end, &quota) || quota == 0) {
        return LG_EINVAL;
    }
    if (p == end || (*p != ' ' && *p != '\t')) {
        return LG_EINVAL;
    }
    p = cpus_skip_blank(p, end);
    if (!cpus_u64(&p, end, &period) || period == 0 || !cpus_rest_blank(p, end)) {
        return LG_EINVAL;
    }
    out->quota_us = quota;
    out->period_us = period;
    return LG_OK;
}

int
lg_cpus_parse_cfs(const char *quota, size_t qlen, const char *period, size_t plen,
                  struct lg_cpus_quota *out)
{
    const char *q = quota, *qend = quota + qlen, *p = period, *pend = period + plen;
    uint64_t qv = 0, pv;

    if (qlen >= 2 && q[0] == '-' && q[1] == '1') {
        q += 2; /* no limit */
    } else if (!cpus_u64(&q, qend, &qv) || qv == 0) {
        return LG_EINVAL;
    }
    if (!cpus_rest_blank(q, qend) || !cpus_u64(&p, pend, &pv) || pv == 0
        || !cpus_rest_blank(p, pend)) {
        return LG_EINVAL;
    }
    out->quota_us = qv;
    out->period_us = pv;
    return LG_OK;
}

unsigned
lg_cpus_quota_cpus(const struct lg_cpus_quota *q)
{
    uint64_t n;

    if (q->quota_us == 0 || q->period_us == 0) {
        return 0;
    }
    n = q->quota_us / q->period_us + (q->quota_us % q->period_us != 0);
    return n == 0 ? 1 : (unsigned)LG_MIN(n, (uint64_t)UINT_MAX);
}

/* The line at *p up to its newline (or end); advances *p past it. */
static size_t
cpus_line(const char **p, const char *end, const char **line)
{
    const char *s = *p, *nl = memchr(s, '\n', (size_t)(end - s));
    const char *e = nl ? nl : end;

    *line = s;
    *p = nl ? nl + 1 : end;
    return (size_t)(e - s);
}

/* Whether the comma-separated list [s, s + n) holds the token tok. */
static bool
cpus_has_token(const char *s, size_t n, const char *tok)
{
    size_t tl = strlen(tok);
    const char *end = s + n;

    while (s < end) {
        const char *c = memchr(s, ',', (size_t)(end - s));
        const char *e = c ? c : end;

        if ((size_t)(e - s) == tl && memcmp(s, tok, tl) == 0) {
            return true;
        }
        s = c ? c + 1 : end;
    }
    return false;
}

int
lg_cpus_cgroup_path(const char *text, size_t len, bool v1, char *out, size_t outsz)
{
    const char *p = text, *end = text + len;

    while (p < end) {
        const char *line, *c1, *c2, *path;
        size_t n = cpus_line(&p, end, &line), plen;

        c1 = memchr(line, ':', n);
        c2 = c1 ? memchr(c1 + 1, ':', (size_t)(line + n - c1 - 1)) : NULL;
        if (c2 == NULL) {
            continue;
        }
        if (v1 ? !cpus_has_token(c1 + 1, (size_t)(c2 - c1 - 1), "cpu")
               : !(c1 - line == 1 && line[0] == '0' && c2 == c1 + 1)) {
            continue;
        }
        path = c2 + 1;
        plen = (size_t)(line + n - path);
        if (plen == 0 || path[0] != '/') {
            continue;
        }
        if (plen >= outsz) {
            return LG_EINVAL;
        }
        memcpy(out, path, plen);
        out[plen] = '\0';
        return LG_OK;
    }
    return LG_EDECLINED;
}

/* A mountinfo field into out, its octal escapes (\040) decoded. */
static bool
cpus_unescape(const char *s, size_t n, char *out, size_t outsz)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        char ch = s[i];

        if (ch == '\\' && i + 3 < n && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0'
            && s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
            ch = (char)((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        }
        if (o + 1 >= outsz) {
            return false;
        }
        out[o++] = ch;
    }
    out[o] = '\0';
    return true;
}

/* Splits [s, s + n) at blanks into at most max fields; returns their count. */
static size_t
cpus_fields(const char *s, size_t n, const char **f, size_t *fl, size_t max)
{
    const char *end = s + n;
    size_t k = 0;

    while (s < end && k < max) {
        const char *e;

        s = cpus_skip_blank(s, end);
        if (s == end) {
            break;
        }
        e = s;
        while (e < end && *e != ' ' && *e != '\t') {
            e++;
        }
        f[k] = s;
        fl[k++] = (size_t)(e - s);
        s = e;
    }
    return k;
}

int
lg_cpus_cgroup_mount(const char *text, size_t len, bool v1, char *root, size_t rootsz, char *mnt,
                     size_t mntsz)
{
    const char *p = text, *end = text + len;

    while (p < end) {
        const char *line, *f[32];
        size_t n = cpus_line(&p, end, &line), fl[32], k, dash;

        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER */
        k = cpus_fields(line, n, f, fl, LG_ARRAY_SIZE(f));
        for (dash = 6; dash < k && !(fl[dash] == 1 && f[dash][0] == '-'); dash++) {
        }
        if (dash + 3 >= k) {
            continue;
        }
        if (v1 ? !(fl[dash + 1] == 6 && memcmp(f[dash + 1], "cgroup", 6) == 0
                   && cpus_has_token(f[dash + 3], fl[dash + 3], "cpu"))
               : !(fl[dash + 1] == 7 && memcmp(f[dash + 1], "cgroup2", 7) == 0)) {
            continue;
        }
        if (!cpus_unescape(f[3], fl[3], root, rootsz) || !cpus_unescape(f[4], fl[4], mnt, mntsz)) {
            return LG_EINVAL;
        }
        return LG_OK;
    }
    return LG_EDECLINED;
}

/* ---- reading the cgroup files ------------------------------------------- */

/* A small file into buf (NUL-terminated); its length, or -1. */
static ssize_t
cpus_read(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t n = 0;

    if (fd < 0) {
        return -1;
    }
    while (n + 1 < size) {
        ssize_t r = read(fd, buf + n, size - 1 - n);

        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}

/* Is a/b tighter than c/d (fewer CPUs)? */
static bool
cpus_tighter(const struct lg_cpus_quota *a, const struct lg_cpus_quota *c)
{
    return (unsigned __int128)a->quota_us * c->period_us
           < (unsigned __int128)c->quota_us * a->period_us;
}

/* The quota set in the cgroup folder dir (v1 or v2 files), if any. */
static bool
cpus_quota_at(const char *dir, bool v1, struct lg_cpus_quota *q)
{
    char path[PATH_MAX + 32], a[64], b[64];
    ssize_t na, nb;

    if (!v1) {
        snprintf(path, sizeof(path), "%s/cpu.max", dir);
        na = cpus_read(path, a, sizeof(a));
        return na > 0 && lg_cpus_parse_cpu_max(a, (size_t)na, q) == LG_OK && q->quota_us != 0;
    }
    snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
    na = cpus_read(path, a, sizeof(a));
    snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
    nb = cpus_read(path, b, sizeof(b));
    return na > 0 && nb > 0 && lg_cpus_parse_cfs(a, (size_t)na, b, (size_t)nb, q) == LG_OK
           && q->quota_us != 0;
}

/*
 * The tightest quota of one hierarchy: from the process's cgroup folder up
 * to the mount point. The cgroup path is relative to the hierarchy's root,
 * the mount shows the hierarchy from `root` down (a container sees its own
 * cgroup as the mount's top): the folder is the mount point plus what the
 * path has beyond root. A path outside root (or with "..") leaves the mount
 * point alone.
 */
static bool
cpus_quota_tree(const char *fsroot, const char *cgroup, size_t clen, const char *mountinfo,
                size_t mlen, bool v1, struct lg_cpus_quota *out)
{
    char path[PATH_MAX], root[PATH_MAX], mnt[PATH_MAX], dir[PATH_MAX + PATH_MAX];
    const char *rel = "";
    size_t rl, top;
    bool found = false;

    if (lg_cpus_cgroup_path(cgroup, clen, v1, path, sizeof(path)) != LG_OK
        || lg_cpus_cgroup_mount(mountinfo, mlen, v1, root, sizeof(root), mnt, sizeof(mnt))
               != LG_OK) {
        return false;
    }
    rl = strlen(root);
    while (rl > 0 && root[rl - 1] == '/') {
        rl--; /* "/" is the whole hierarchy */
    }
    if (strncmp(path, root, rl) == 0 && (path[rl] == '/' || path[rl] == '\0')
        && strstr(path + rl, "/..") == NULL) {
        rel = path + rl;
    }
    snprintf(dir, sizeof(dir), "%s%s", fsroot, mnt);
    top = strlen(dir);
    while (top > 0 && dir[top - 1] == '/') {
        dir[--top] = '\0';
    }
    snprintf(dir + top, sizeof(dir) - top, "%s", strcmp(rel, "/") == 0 ? "" : rel);
    for (;;) {
        struct lg_cpus_quota q;
        char *slash;
        size_t n = strlen(dir);

        while (n > top && dir[n - 1] == '/') {
            dir[--n] = '\0';
        }
        if (cpus_quota_at(dir, v1, &q) && (!found || cpus_tighter(&q, out))) {
            *out = q;
            found = true;
        }
        if (n <= top) {
            break;
        }
        slash = strrchr(dir, '/');
        if (slash == NULL || (size_t)(slash - dir) < top) {
            break;
        }
        *slash = '\0';
    }
    return found;
}

bool
lg_cpus_quota_read(const char *fsroot, struct lg_cpus_quota *out, bool *v1)
{
    char path[PATH_MAX], cgroup[8192];
    char *mountinfo = lg_xmalloc(CPUS_MOUNTINFO_MAX);
    struct lg_cpus_quota q2, q1;
    ssize_t clen, mlen;
    bool has2 = false, has1 = false;

    snprintf(path, sizeof(path), "%s/proc/self/cgroup", fsroot);
    clen = cpus_read(path, cgroup, sizeof(cgroup));
    snprintf(path, sizeof(path), "%s/proc/self/mountinfo", fsroot);
    mlen = cpus_read(path, mountinfo, CPUS_MOUNTINFO_MAX);
    if (clen > 0 && mlen > 0) {
        has2 = cpus_quota_tree(fsroot, cgroup, (size_t)clen, mountinfo, (size_t)mlen, false, &q2);
        has1 = cpus_quota_tree(fsroot, cgroup, (size_t)clen, mountinfo, (size_t)mlen, true, &q1);
    }
    free(mountinfo);
    if (!has2 && !has1) {
        return false;
    }
    *v1 = !has2 || (has1 && cpus_tighter(&q1, &q2));
    *out = *v1 ? q1 : q2;
    return true;
}

/* ---- the choice ---------------------------------------------------------- */

void
lg_cpus_choose_from(unsigned affinity, unsigned online, const struct lg_cpus_quota *q, bool v1,
                    unsigned max, struct lg_cpus_choice *out)
{
    char base[64], quota[96] = "";
    unsigned n = affinity ? affinity : (online ? online : 1);

    memset(out, 0, sizeof(*out));
    out->affinity = affinity;
    out->online = online;
    if (q != NULL) {
        out->quota = *q;
        out->quota_v1 = v1;
        out->quota_cpus = lg_cpus_quota_cpus(q);
    }
    if (affinity) {
        snprintf(base, sizeof(base), "affinity %u of %u CPUs", affinity, online);
    } else {
        snprintf(base, sizeof(base), "%u online CPUs", online);
    }
    if (out->quota_cpus) {
        snprintf(quota, sizeof(quota), "cgroup %s %" PRIu64 "/%" PRIu64 " -> %u",
                 v1 ? "cpu.cfs_quota_us" : "cpu.max", q->quota_us, q->period_us, out->quota_cpus);
    }
    if (out->quota_cpus && out->quota_cpus < n) {
        n = out->quota_cpus;
        snprintf(out->why, sizeof(out->why), "%s; %s", quota, base);
    } else if (out->quota_cpus) {
        snprintf(out->why, sizeof(out->why), "%s; %s", base, quota);
    } else {
        snprintf(out->why, sizeof(out->why), "%s", base);
    }
    if (max >= 1 && n > max) {
        size_t len = strlen(out->why);

        n = max;
        snprintf(out->why + len, sizeof(out->why) - len, "; at most %u", max);
    }
    out->workers = n ? n : 1;
}

/* CPUs in this process's affinity mask; 0 when it cannot be read. */
static unsigned
cpus_affinity(void)
{
    for (size_t ncpu = 1024; ncpu <= (1u << 20); ncpu *= 2) {
        cpu_set_t *set = CPU_ALLOC(ncpu);
        size_t size = CPU_ALLOC_SIZE(ncpu);
        int count;

        if (set == NULL) {
            return 0;
        }
        CPU_ZERO_S(size, set);
        if (sched_getaffinity(0, size, set) == 0) {
            count = CPU_COUNT_S(size, set);
            CPU_FREE(set);
            return count > 0 ? (unsigned)count : 0;
        }
        CPU_FREE(set);
        if (errno != EINVAL) {
            return 0;
        }
    }
    return 0;
}

void
lg_cpus_choose(unsigned max, struct lg_cpus_choice *out)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    struct lg_cpus_quota q;
    bool v1 = false;
    bool has = lg_cpus_quota_read("", &q, &v1);

    lg_cpus_choose_from(cpus_affinity(), online > 0 ? (unsigned)online : 1, has ? &q : NULL, v1,
                        max, out);
}
