/*
 * cpus.h: how many CPUs this process may use, for `"workers": "auto"`: the
 * CPUs of its affinity mask (taskset, cpusets), bounded by its cgroup's CPU
 * quota (v2 cpu.max, v1 cpu.cfs_quota_us over cpu.cfs_period_us; a
 * container's --cpus), rounded up. The parsers are pure functions over the
 * files' text, so tests and the fuzz target feed them directly.
 */
#ifndef LG_CPUS_H
#define LG_CPUS_H

#include "base/lg_core.h"

/* A CPU quota: quota_us of CPU time per period_us; quota_us 0 = no limit. */
struct lg_cpus_quota {
    uint64_t quota_us;
    uint64_t period_us;
};

/*
 * cgroup v2 cpu.max: "max PERIOD" (no limit) or "QUOTA PERIOD" (a trailing
 * newline allowed). LG_OK with out set, or LG_EINVAL when it is neither.
 */
int lg_cpus_parse_cpu_max(const char *text, size_t len, struct lg_cpus_quota *out);

/*
 * cgroup v1 cpu.cfs_quota_us ("-1": no limit, or microseconds) and
 * cpu.cfs_period_us. LG_OK with out set, or LG_EINVAL.
 */
int lg_cpus_parse_cfs(const char *quota, size_t qlen, const char *period, size_t plen,
                      struct lg_cpus_quota *out);

/* The CPUs a quota allows, rounded up (a quota of 1.5 CPUs: 2); 0 = no limit. */
unsigned lg_cpus_quota_cpus(const struct lg_cpus_quota *q);

/*
 * /proc/self/cgroup: the path of this process's cgroup in the v2 hierarchy
 * ("0::PATH"), or with v1, in the v1 hierarchy that has the cpu controller
 * ("N:cpu,cpuacct:PATH"). LG_OK with the path in out, LG_EDECLINED when
 * there is none, LG_EINVAL when it does not fit.
 */
int lg_cpus_cgroup_path(const char *text, size_t len, bool v1, char *out, size_t outsz);

/*
 * /proc/self/mountinfo: the root (the hierarchy's folder mounted) and mount
 * point of the cgroup2 mount, or with v1, of the v1 cgroup mount with the
 * cpu controller; the first such mount. Octal escapes (\040) are decoded.
 * LG_OK, LG_EDECLINED when there is none, LG_EINVAL when a path does not fit.
 */
int lg_cpus_cgroup_mount(const char *text, size_t len, bool v1, char *root, size_t rootsz,
                         char *mnt, size_t mntsz);

/*
 * The tightest CPU quota on this process's cgroup and its ancestors up to
 * the mount point, v2 and v1 (a hybrid host has the cpu controller on v1),
 * with every file read under fsroot ("" = this machine; tests give a
 * folder holding proc/self/cgroup, proc/self/mountinfo and the mounts).
 * *v1 says where it was found. Returns true when one was found.
 */
bool lg_cpus_quota_read(const char *fsroot, struct lg_cpus_quota *out, bool *v1);

/* What auto chose, and why. */
struct lg_cpus_choice {
    unsigned workers;           /* 1..max */
    unsigned affinity;          /* CPUs in the affinity mask; 0 = unknown */
    unsigned online;            /* online CPUs */
    unsigned quota_cpus;        /* the quota, rounded up; 0 = none */
    struct lg_cpus_quota quota; /* the tightest quota found */
    bool quota_v1;
    char why[160]; /* "affinity 1 of 2 CPUs", "cgroup cpu.max 150000/100000 -> 2; ..." */
};

/*
 * The choice from what was found (pure): the affinity count (else the online
 * count), bounded by the quota's CPUs, then by max; at least 1.
 */
void lg_cpus_choose_from(unsigned affinity, unsigned online, const struct lg_cpus_quota *q, bool v1,
                         unsigned max, struct lg_cpus_choice *out);

/* The choice for this process now: its affinity mask and its cgroups. */
void lg_cpus_choose(unsigned max, struct lg_cpus_choice *out);

#endif /* LG_CPUS_H */
