/*
 * lg_test.h: the unit-test harness. LG_CHECK(cond) prints file:line and
 * fails the current test; LG_TEST_MAIN(t1, t2, ...) runs each test function
 * (int fn(void), 0 = pass) and exits non-zero if any failed.
 */
#ifndef LG_TEST_H
#define LG_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LG_CHECK(cond)                                                        \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            return 1;                                                         \
        }                                                                     \
    } while (0)

#define LG_CHECK_STR(a, b)                                                    \
    do {                                                                      \
        const char *lg_a_ = (a), *lg_b_ = (b);                                \
        if (lg_a_ == NULL || lg_b_ == NULL || strcmp(lg_a_, lg_b_) != 0) {    \
            fprintf(stderr, "%s:%d: check failed: %s == %s\n  got:      %s\n  expected: %s\n", \
                    __FILE__, __LINE__, #a, #b, lg_a_ ? lg_a_ : "(null)",     \
                    lg_b_ ? lg_b_ : "(null)");                                \
            return 1;                                                         \
        }                                                                     \
    } while (0)

/*
 * Reads a file of the source tree ($LG_SRC, else the current folder), e.g.
 * "tests/fixtures/engines/tgi/metrics.prom", into buf, NUL-terminated.
 * Returns its length, or -1 (and says why) when it cannot be read.
 */
static inline long
lg_test_read_src(const char *rel, char *buf, size_t size)
{
    char path[1024];
    const char *src = getenv("LG_SRC");
    FILE *fp;
    size_t n;

    snprintf(path, sizeof(path), "%s/%s", src ? src : ".", rel);
    fp = fopen(path, "rb");
    if (fp == NULL || size == 0) {
        fprintf(stderr, "cannot open %s\n", path);
        if (fp != NULL) {
            fclose(fp);
        }
        return -1;
    }
    n = fread(buf, 1, size - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return (long)n;
}

typedef int (*lg_test_fn)(void);

static inline int
lg_test_run(const char *names, lg_test_fn *fns, size_t n)
{
    int failed = 0;
    char buf[4096];
    char *save = NULL, *name;

    snprintf(buf, sizeof(buf), "%s", names);
    name = strtok_r(buf, ", ", &save);
    for (size_t i = 0; i < n; i++) {
        int rc = fns[i]();

        printf("%s %s\n", rc == 0 ? "ok  " : "FAIL", name ? name : "?");
        failed += rc != 0;
        name = strtok_r(NULL, ", ", &save);
    }
    printf("%zu tests, %d failed\n", n, failed);
    return failed ? 1 : 0;
}

#define LG_TEST_MAIN(...)                                           \
    int main(void)                                                  \
    {                                                               \
        lg_test_fn fns[] = { __VA_ARGS__ };                         \
        return lg_test_run(#__VA_ARGS__, fns, sizeof(fns) / sizeof(fns[0])); \
    }

#endif /* LG_TEST_H */
