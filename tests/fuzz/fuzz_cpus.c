/*
 * fuzz_cpus.c: the cgroup files' parsers (gateway/base/cpus.c) on arbitrary
 * bytes, the input never NUL-terminated: cpu.max, cpu.cfs_quota_us with
 * cpu.cfs_period_us (split at the first newline), /proc/self/cgroup (v2 and
 * v1) and mountinfo (v2 and v1). A parsed quota has a period and rounds to
 * at least one CPU; a path found starts with "/" and fits its buffer; what
 * failed left the outputs as they were.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "base/cpus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fuzz_quota(const struct lg_cpus_quota *q)
{
    if (q->period_us == 0 || (q->quota_us != 0 && lg_cpus_quota_cpus(q) == 0)) {
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_cpus_quota q = { 0, 0 };
    char *text, a[64] = "", b[32] = "";
    const char *nl;
    size_t len;
    int rc;

    text = fuzz_input_rest(data, size, &len);
    if (text == NULL) {
        return 0;
    }
    switch (data[0] % 5) {
    case 0:
        if (lg_cpus_parse_cpu_max(text, len, &q) == LG_OK) {
            fuzz_quota(&q);
        } else if (q.period_us != 0) {
            abort();
        }
        break;
    case 1:
        nl = memchr(text, '\n', len);
        if (nl != NULL
            && lg_cpus_parse_cfs(text, (size_t)(nl - text) + 1, nl + 1,
                                 len - (size_t)(nl - text) - 1, &q)
                   == LG_OK) {
            fuzz_quota(&q);
        }
        break;
    case 2:
    case 3:
        rc = lg_cpus_cgroup_path(text, len, data[0] % 5 == 3, a, sizeof(a));
        if (rc == LG_OK ? (a[0] != '/' || strlen(a) >= sizeof(a)) : a[0] != '\0') {
            abort();
        }
        break;
    default:
        rc = lg_cpus_cgroup_mount(text, len, data[0] & 0x80, a, sizeof(a), b, sizeof(b));
        if (rc == LG_OK && (strlen(a) >= sizeof(a) || strlen(b) >= sizeof(b))) {
            abort();
        }
        if (rc == LG_EDECLINED && (a[0] != '\0' || b[0] != '\0')) {
            abort();
        }
        break;
    }
    free(text);
    return 0;
}
