/*
 * test_cpus.c: the CPUs the process may use (base/cpus.c): cpu.max and
 * cpu.cfs_quota_us parsed and rounded up, the cgroup path and mount found
 * in /proc/self/cgroup and mountinfo (a cgroup v2 host, a hybrid host, a
 * podman container on each), the tightest quota read from a folder shaped
 * like those machines, and the choice with its reason.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cpus.h"
#include "lg_test.h"

static int
parse_max(const char *s, uint64_t quota, uint64_t period)
{
    struct lg_cpus_quota q = { 7, 7 };

    LG_CHECK(lg_cpus_parse_cpu_max(s, strlen(s), &q) == LG_OK);
    LG_CHECK(q.quota_us == quota && q.period_us == period);
    return 0;
}

static int
bad_max(const char *s)
{
    struct lg_cpus_quota q = { 7, 7 };

    LG_CHECK(lg_cpus_parse_cpu_max(s, strlen(s), &q) == LG_EINVAL);
    LG_CHECK(q.quota_us == 7 && q.period_us == 7); /* untouched */
    return 0;
}

static int
test_cpu_max(void)
{
    struct lg_cpus_quota q;

    LG_CHECK(parse_max("max 100000\n", 0, 100000) == 0);
    LG_CHECK(parse_max("150000 100000\n", 150000, 100000) == 0);
    LG_CHECK(parse_max("50000 100000", 50000, 100000) == 0);
    LG_CHECK(parse_max("200000  50000 \n", 200000, 50000) == 0);
    LG_CHECK(bad_max("") == 0);
    LG_CHECK(bad_max("max") == 0);
    LG_CHECK(bad_max("max\n") == 0);
    LG_CHECK(bad_max("maxx 100000") == 0);
    LG_CHECK(bad_max("150000") == 0);
    LG_CHECK(bad_max("150000 0") == 0);
    LG_CHECK(bad_max("0 100000") == 0);
    LG_CHECK(bad_max("-1 100000") == 0);
    LG_CHECK(bad_max("150000 100000 7") == 0);
    LG_CHECK(bad_max("99999999999999999999 100000") == 0); /* 20 digits */
    /* not NUL-terminated: only len bytes count */
    LG_CHECK(lg_cpus_parse_cpu_max("150000 1000009", 13, &q) == LG_OK && q.period_us == 100000);
    return 0;
}

static int
test_cfs(void)
{
    struct lg_cpus_quota q;

    LG_CHECK(lg_cpus_parse_cfs("-1\n", 3, "100000\n", 7, &q) == LG_OK);
    LG_CHECK(q.quota_us == 0 && q.period_us == 100000);
    LG_CHECK(lg_cpus_parse_cfs("150000\n", 7, "100000\n", 7, &q) == LG_OK);
    LG_CHECK(q.quota_us == 150000 && q.period_us == 100000);
    LG_CHECK(lg_cpus_parse_cfs("-2\n", 3, "100000\n", 7, &q) == LG_EINVAL);
    LG_CHECK(lg_cpus_parse_cfs("-1x", 3, "100000\n", 7, &q) == LG_EINVAL);
    LG_CHECK(lg_cpus_parse_cfs("0\n", 2, "100000\n", 7, &q) == LG_EINVAL);
    LG_CHECK(lg_cpus_parse_cfs("1000\n", 5, "0\n", 2, &q) == LG_EINVAL);
    LG_CHECK(lg_cpus_parse_cfs("1000\n", 5, "", 0, &q) == LG_EINVAL);
    return 0;
}

static int
test_quota_cpus(void)
{
    static const struct {
        uint64_t quota, period;
        unsigned cpus;
    } cases[] = {
        { 0, 100000, 0 },       /* no limit */
        { 100000, 100000, 1 },  /* --cpus=1 */
        { 150000, 100000, 2 },  /* 1.5 rounds up */
        { 50000, 100000, 1 },   /* half a CPU: one worker */
        { 1000, 100000, 1 },    /* a hundredth */
        { 400000, 100000, 4 },  /* exact */
        { 400001, 100000, 5 },  /* just over */
        { 6400000, 100000, 64 } /* a 64-CPU quota */
    };

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        struct lg_cpus_quota q = { cases[i].quota, cases[i].period };

        LG_CHECK(lg_cpus_quota_cpus(&q) == cases[i].cpus);
    }
    return 0;
}

/* This machine's shape: the cpu controller on v1, the unified tree bare. */
static const char hybrid_cgroup[] = "9:name=systemd:/\n"
                                    "4:memory:/process_api/40e3\n"
                                    "3:cpuset:/\n"
                                    "2:cpuacct:/\n"
                                    "1:cpu:/\n"
                                    "0::/\n";
static const char hybrid_mounts[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
/* A podman container there (--cpus=1): its own cgroup is the mount's root. */
static const char podman_v1_cgroup[] = "2:cpuacct:/libpod_parent/libpod-b71a\n"
                                       "1:cpu:/libpod_parent/libpod-b71a\n"
                                       "0::/libpod_parent/libpod-b71a\n";
static const char podman_v1_mounts[] =
    "88 81 0:48 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755\n"
    "89 88 0:29 /libpod_parent/libpod-b71a /sys/fs/cgroup/cpu ro,nosuid,nodev master:9 - "
    "cgroup cgroup rw,cpu\n"
    "90 88 0:30 /libpod_parent/libpod-b71a /sys/fs/cgroup/cpuacct ro,nosuid - cgroup "
    "cgroup rw,cpuacct\n";
/* A cgroup v2 host (systemd), and a container with its own cgroup namespace. */
static const char v2_cgroup[] = "0::/system.slice/llmgate.service\n";
static const char v2_mounts[] = "25 1 0:22 / / rw - ext4 /dev/vda1 rw\n"
                                "35 25 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 "
                                "cgroup2 rw,nsdelegate,memory_recursiveprot\n";

static int
test_cgroup_path(void)
{
    char p[256];

    LG_CHECK(lg_cpus_cgroup_path(hybrid_cgroup, strlen(hybrid_cgroup), false, p, sizeof(p))
             == LG_OK);
    LG_CHECK_STR(p, "/");
    LG_CHECK(lg_cpus_cgroup_path(podman_v1_cgroup, strlen(podman_v1_cgroup), true, p, sizeof(p))
             == LG_OK);
    LG_CHECK_STR(p, "/libpod_parent/libpod-b71a"); /* "cpu", not "cpuacct" */
    LG_CHECK(lg_cpus_cgroup_path("5:cpu,cpuacct:/a/b", 18, true, p, sizeof(p)) == LG_OK);
    LG_CHECK_STR(p, "/a/b");
    LG_CHECK(lg_cpus_cgroup_path(v2_cgroup, strlen(v2_cgroup), false, p, sizeof(p)) == LG_OK);
    LG_CHECK_STR(p, "/system.slice/llmgate.service");
    LG_CHECK(lg_cpus_cgroup_path(v2_cgroup, strlen(v2_cgroup), true, p, sizeof(p)) == LG_EDECLINED);
    LG_CHECK(lg_cpus_cgroup_path("2:cpuacct:/x\n", 13, true, p, sizeof(p)) == LG_EDECLINED);
    LG_CHECK(lg_cpus_cgroup_path("", 0, false, p, sizeof(p)) == LG_EDECLINED);
    LG_CHECK(lg_cpus_cgroup_path("0::/a/long/path\n", 16, false, p, 8) == LG_EINVAL);
    return 0;
}

static int
test_cgroup_mount(void)
{
    char root[256], mnt[256];

    LG_CHECK(lg_cpus_cgroup_mount(hybrid_mounts, strlen(hybrid_mounts), true, root, sizeof(root),
                                  mnt, sizeof(mnt))
             == LG_OK);
    LG_CHECK_STR(root, "/");
    LG_CHECK_STR(mnt, "/sys/fs/cgroup/cpu");
    LG_CHECK(lg_cpus_cgroup_mount(hybrid_mounts, strlen(hybrid_mounts), false, root, sizeof(root),
                                  mnt, sizeof(mnt))
             == LG_OK);
    LG_CHECK_STR(mnt, "/sys/fs/cgroup/unified");
    LG_CHECK(lg_cpus_cgroup_mount(podman_v1_mounts, strlen(podman_v1_mounts), true, root,
                                  sizeof(root), mnt, sizeof(mnt))
             == LG_OK);
    LG_CHECK_STR(root, "/libpod_parent/libpod-b71a");
    LG_CHECK_STR(mnt, "/sys/fs/cgroup/cpu");
    LG_CHECK(lg_cpus_cgroup_mount(podman_v1_mounts, strlen(podman_v1_mounts), false, root,
                                  sizeof(root), mnt, sizeof(mnt))
             == LG_EDECLINED);
    LG_CHECK(lg_cpus_cgroup_mount(v2_mounts, strlen(v2_mounts), false, root, sizeof(root), mnt,
                                  sizeof(mnt))
             == LG_OK);
    LG_CHECK_STR(mnt, "/sys/fs/cgroup");
    /* an escaped blank in the mount point */
    LG_CHECK(lg_cpus_cgroup_mount("1 2 0:1 / /c\\040g rw - cgroup2 none rw", 38, false, root,
                                  sizeof(root), mnt, sizeof(mnt))
             == LG_OK);
    LG_CHECK_STR(mnt, "/c g");
    LG_CHECK(lg_cpus_cgroup_mount("1 2 0:1 / /cg rw - cgroup2", 26, false, root, sizeof(root), mnt,
                                  sizeof(mnt))
             == LG_EDECLINED); /* no source and options: a cut line */
    return 0;
}

/* ---- a machine in a folder ---------------------------------------------- */

static char tree[64];

static int
put(const char *rel, const char *text)
{
    char path[512], *slash;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", tree, rel);
    for (slash = strchr(path + strlen(tree) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        LG_CHECK(mkdir(path, 0755) == 0 || errno == EEXIST);
        *slash = '/';
    }
    f = fopen(path, "w");
    LG_CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
    return 0;
}

static int
fresh_tree(void)
{
    char cmd[128];

    if (tree[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
        LG_CHECK(system(cmd) == 0);
    }
    snprintf(tree, sizeof(tree), "/tmp/lgcpus-XXXXXX");
    LG_CHECK(mkdtemp(tree) != NULL);
    return 0;
}

static int
test_read_v2_tree(void)
{
    struct lg_cpus_quota q;
    bool v1 = true;

    LG_CHECK(fresh_tree() == 0);
    LG_CHECK(put("proc/self/cgroup", v2_cgroup) == 0);
    LG_CHECK(put("proc/self/mountinfo", v2_mounts) == 0);
    /* no cpu.max at the top */
    LG_CHECK(put("sys/fs/cgroup/cgroup.controllers", "cpu memory\n") == 0);
    LG_CHECK(put("sys/fs/cgroup/system.slice/llmgate.service/cpu.max", "max 100000\n") == 0);
    LG_CHECK(!lg_cpus_quota_read(tree, &q, &v1)); /* no limit anywhere */
    /* the parent's quota binds its children: 1.5 CPUs */
    LG_CHECK(put("sys/fs/cgroup/system.slice/cpu.max", "150000 100000\n") == 0);
    LG_CHECK(lg_cpus_quota_read(tree, &q, &v1) && !v1);
    LG_CHECK(q.quota_us == 150000 && q.period_us == 100000 && lg_cpus_quota_cpus(&q) == 2);
    /* a tighter one on the service itself wins, whatever its period */
    LG_CHECK(put("sys/fs/cgroup/system.slice/llmgate.service/cpu.max", "25000 50000\n") == 0);
    LG_CHECK(lg_cpus_quota_read(tree, &q, &v1));
    LG_CHECK(q.quota_us == 25000 && q.period_us == 50000 && lg_cpus_quota_cpus(&q) == 1);
    /* a garbled file is no quota, not an error */
    LG_CHECK(put("sys/fs/cgroup/system.slice/llmgate.service/cpu.max", "garbage\n") == 0);
    LG_CHECK(lg_cpus_quota_read(tree, &q, &v1) && q.quota_us == 150000);
    return 0;
}

static int
test_read_container_trees(void)
{
    struct lg_cpus_quota q;
    bool v1 = false;

    /* podman --cpus=1 on this hybrid machine: the container's cgroup at the mount's top */
    LG_CHECK(fresh_tree() == 0);
    LG_CHECK(put("proc/self/cgroup", podman_v1_cgroup) == 0);
    LG_CHECK(put("proc/self/mountinfo", podman_v1_mounts) == 0);
    LG_CHECK(put("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "100000\n") == 0);
    LG_CHECK(put("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n") == 0);
    LG_CHECK(lg_cpus_quota_read(tree, &q, &v1) && v1);
    LG_CHECK(q.quota_us == 100000 && lg_cpus_quota_cpus(&q) == 1);
    LG_CHECK(put("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n") == 0);
    LG_CHECK(!lg_cpus_quota_read(tree, &q, &v1));

    /* a v2 container with its own cgroup namespace: "0::/", its quota at the top */
    LG_CHECK(fresh_tree() == 0);
    LG_CHECK(put("proc/self/cgroup", "0::/\n") == 0);
    LG_CHECK(put("proc/self/mountinfo", "700 600 0:30 / /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n")
             == 0);
    LG_CHECK(put("sys/fs/cgroup/cpu.max", "250000 100000\n") == 0);
    LG_CHECK(lg_cpus_quota_read(tree, &q, &v1) && !v1 && lg_cpus_quota_cpus(&q) == 3);

    /* the hybrid host itself: v1's cpu hierarchy, nothing set */
    LG_CHECK(fresh_tree() == 0);
    LG_CHECK(put("proc/self/cgroup", hybrid_cgroup) == 0);
    LG_CHECK(put("proc/self/mountinfo", hybrid_mounts) == 0);
    LG_CHECK(put("sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n") == 0);
    LG_CHECK(put("sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n") == 0);
    LG_CHECK(!lg_cpus_quota_read(tree, &q, &v1));
    /* nothing there at all */
    LG_CHECK(fresh_tree() == 0);
    LG_CHECK(!lg_cpus_quota_read(tree, &q, &v1));
    return 0;
}

static int
test_choice(void)
{
    struct lg_cpus_choice ch;
    struct lg_cpus_quota q15 = { 150000, 100000 }, q1 = { 100000, 100000 };

    lg_cpus_choose_from(1, 2, NULL, false, 256, &ch);
    LG_CHECK(ch.workers == 1);
    LG_CHECK_STR(ch.why, "affinity 1 of 2 CPUs");
    lg_cpus_choose_from(4, 64, &q15, false, 256, &ch);
    LG_CHECK(ch.workers == 2 && ch.quota_cpus == 2);
    LG_CHECK_STR(ch.why, "cgroup cpu.max 150000/100000 -> 2; affinity 4 of 64 CPUs");
    lg_cpus_choose_from(1, 2, &q15, false, 256, &ch);
    LG_CHECK(ch.workers == 1);
    LG_CHECK_STR(ch.why, "affinity 1 of 2 CPUs; cgroup cpu.max 150000/100000 -> 2");
    lg_cpus_choose_from(2, 2, &q1, true, 256, &ch);
    LG_CHECK(ch.workers == 1);
    LG_CHECK_STR(ch.why, "cgroup cpu.cfs_quota_us 100000/100000 -> 1; affinity 2 of 2 CPUs");
    lg_cpus_choose_from(512, 512, NULL, false, 256, &ch);
    LG_CHECK(ch.workers == 256);
    LG_CHECK_STR(ch.why, "affinity 512 of 512 CPUs; at most 256");
    lg_cpus_choose_from(0, 8, NULL, false, 256, &ch); /* the mask unreadable */
    LG_CHECK(ch.workers == 8);
    LG_CHECK_STR(ch.why, "8 online CPUs");
    return 0;
}

/* This process: no more than its affinity mask, at least one. */
static int
test_choose_here(void)
{
    struct lg_cpus_choice ch;
    cpu_set_t set;
    unsigned mine;

    LG_CHECK(sched_getaffinity(0, sizeof(set), &set) == 0);
    mine = (unsigned)CPU_COUNT(&set);
    lg_cpus_choose(256, &ch);
    LG_CHECK(ch.affinity == mine);
    LG_CHECK(ch.workers >= 1 && ch.workers <= mine);
    LG_CHECK(ch.quota_cpus == 0 || ch.workers == LG_MIN(mine, ch.quota_cpus));
    /* one CPU in the mask: one worker, whatever the machine has */
    CPU_ZERO(&set);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &set);
    LG_CHECK(sched_setaffinity(0, sizeof(set), &set) == 0);
    lg_cpus_choose(256, &ch);
    LG_CHECK(ch.affinity == 1 && ch.workers == 1);
    LG_CHECK(strstr(ch.why, "affinity 1 of ") != NULL);
    return 0;
}

static int
cleanup(void)
{
    char cmd[128];

    if (tree[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tree);
        LG_CHECK(system(cmd) == 0);
    }
    return 0;
}

LG_TEST_MAIN(test_cpu_max, test_cfs, test_quota_cpus, test_cgroup_path, test_cgroup_mount,
             test_read_v2_tree, test_read_container_trees, test_choice, test_choose_here, cleanup)
