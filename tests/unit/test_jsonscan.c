/*
 * test_jsonscan.c: the validating scanner's tape (gateway/http/jsonscan.c):
 * it records what a want names (members tagged with their key's index,
 * chosen array elements, token ids counted) and nothing else, whatever the
 * body's size; what it leaves out is checked as strictly; names match
 * unescaped and across chain splits; the tape stops at LG_JSONSCAN_MAX_TOKS
 * (capped), and an allocation that fails fails the scan, not the process.
 */
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "http/jsonscan.h"
#include "lg_test.h"

/* {"a": ..., "b": {"c": ...}, "t": a text} where a text is a string or an
 * array of strings and {"x": text} objects, as openai.c reads prompts */
enum { K_A = 0, K_B, K_T, K_N };
static const struct lg_jsonscan_key keys[K_N] = {
    [K_A] = LG_JSONSCAN_KEY("a"),
    [K_B] = LG_JSONSCAN_KEY("b"),
    [K_T] = LG_JSONSCAN_KEY("t"),
};
static const struct lg_jsonscan_key key_c[1] = { LG_JSONSCAN_KEY("c") };
static const struct lg_jsonscan_key key_x[1] = { LG_JSONSCAN_KEY("x") };
static const struct lg_jsonscan_want want_b = { .keys = key_c, .nkeys = 1 };
static const struct lg_jsonscan_want want_text;
static const struct lg_jsonscan_want *const part_sub[1] = { &want_text };
static const struct lg_jsonscan_want want_part = { .keys = key_x, .sub = part_sub, .nkeys = 1 };
static const struct lg_jsonscan_want want_text = {
    .elem_types = LG_JSONSCAN_M(LG_JSONSCAN_STR) | LG_JSONSCAN_M(LG_JSONSCAN_OBJ),
    .elem = &want_part,
};
static const struct lg_jsonscan_want *const root_sub[K_N] = {
    [K_B] = &want_b,
    [K_T] = &want_text,
};
static const struct lg_jsonscan_want want_root = { .keys = keys, .sub = root_sub, .nkeys = K_N };

struct scan {
    struct lg_jsonscan s;
    struct evbuffer_iovec vec[64]; /* the body's extents: the tape reads them */
    struct lg_jsonscan_stack stack; /* a body in more than LG_JSONSCAN_STACK_SEGS extents
                                       moves its segment table to the heap */
    char err[256];
    int rc;
};

/* Scans body in chains of `step` bytes (0: one extent). */
static void
scan(struct scan *sc, const char *body, size_t len, size_t step)
{
    struct evbuffer_iovec *vec = sc->vec;
    int n = 0;

    for (size_t off = 0; off < len && n < 64; n++) {
        size_t k = step == 0 || n == 63 ? len - off : LG_MIN(step, len - off);

        vec[n].iov_base = (void *)(uintptr_t)(body + off);
        vec[n].iov_len = k;
        off += k;
    }
    sc->rc = lg_jsonscan_run(&sc->s, vec, n, &want_root, &sc->stack, sc->err, sizeof(sc->err));
}

/* The unescaped text of string token r. */
static const char *
text_of(struct scan *sc, uint32_t r, char *buf, size_t cap)
{
    struct lg_jsonscan_copy c = { buf, 0, cap - 1 };

    lg_jsonscan_unescape(&sc->s, LG_JSONSCAN_T(&sc->s, r), cap - 1, lg_jsonscan_copy_cb, &c);
    buf[c.n] = '\0';
    return buf;
}

/*
 * What is recorded: members named in the want (the last of duplicates
 * found, the second one too), a sub-want's members, a text's strings and
 * objects while its integers and arrays are counted as ids; an object
 * element without a wanted member leaves nothing. Whole, and split in
 * chains of 1, 2, 3 and 7 bytes (names cut across chains, escaped names).
 */
static int
test_records_what_is_wanted(void)
{
    static const char body[] =
        "{\"z\":{\"a\":1,\"t\":\"nested\"},\"\\u0061\":\"first\",\"b\":{\"c\":true,\"d\":[1,2]},"
        "\"t\":[\"s\",7,[1,2,3],{\"x\":\"in\",\"y\":1},{\"y\":2},1.5,null,{\"x\":[5,6]}],"
        "\"a\":\"last\",\"zz\":[[{\"a\":1}]]}";
    static const size_t steps[] = { 0, 1, 2, 3, 7 };

    for (size_t k = 0; k < LG_ARRAY_SIZE(steps); k++) {
        struct scan sc;
        uint32_t f[K_N], second[K_N], t, c, part, x;
        const struct lg_jsonscan_tok *arr;
        char buf[64];
        int parts = 0;

        scan(&sc, body, sizeof(body) - 1, steps[k]);
        LG_CHECK(sc.rc == LG_OK);
        lg_jsonscan_members(&sc.s, 1, K_N, f, second);
        /* two of a: the second is the last */
        LG_CHECK(f[K_A] != 0 && second[K_A] == f[K_A]);
        LG_CHECK_STR(text_of(&sc, f[K_A], buf, sizeof(buf)), "last");
        LG_CHECK(LG_JSONSCAN_T(&sc.s, 2)->key == K_A);
        LG_CHECK_STR(text_of(&sc, 2, buf, sizeof(buf)), "first");
        LG_CHECK(second[K_B] == 0 && second[K_T] == 0);
        c = lg_jsonscan_member(&sc.s, f[K_B], 0);
        LG_CHECK(c != 0 && LG_JSONSCAN_T(&sc.s, c)->type == LG_JSONSCAN_TRUE);
        /* "d" is not wanted: b holds c alone, though it counts both members */
        LG_CHECK(LG_JSONSCAN_T(&sc.s, f[K_B])->len == 2);
        LG_CHECK(LG_JSONSCAN_T(&sc.s, f[K_B])->aux == f[K_B] + 1);
        t = f[K_T];
        arr = LG_JSONSCAN_T(&sc.s, t);
        LG_CHECK(arr->type == LG_JSONSCAN_ARR && arr->len == 8);
        LG_CHECK(arr->ids == 1 + 3); /* 7, and [1,2,3] */
        for (uint32_t i = t; i < arr->aux; i = lg_jsonscan_skip(&sc.s, i)) {
            part = i + 1;
            parts++;
            if (parts == 1) {
                LG_CHECK(LG_JSONSCAN_T(&sc.s, part)->type == LG_JSONSCAN_STR);
                LG_CHECK(LG_JSONSCAN_T(&sc.s, part)->key == LG_JSONSCAN_NO_KEY);
                continue;
            }
            LG_CHECK(LG_JSONSCAN_T(&sc.s, part)->type == LG_JSONSCAN_OBJ);
            x = lg_jsonscan_member(&sc.s, part, 0);
            LG_CHECK(x != 0);
            if (parts == 2) {
                LG_CHECK_STR(text_of(&sc, x, buf, sizeof(buf)), "in");
            } else {
                LG_CHECK(LG_JSONSCAN_T(&sc.s, x)->type == LG_JSONSCAN_ARR);
                LG_CHECK(LG_JSONSCAN_T(&sc.s, x)->ids == 2);
            }
        }
        /* "s", {"x":"in"}, {"x":[5,6]}: {"y":2}, 1.5 and null leave nothing */
        LG_CHECK(parts == 3);
        /* root, first, b, c, t, "s", {x}, "in", {x}, [5,6], last: nothing of z or zz */
        LG_CHECK(sc.s.ntok == 11);
        LG_CHECK(!sc.s.tok_heap);
        lg_jsonscan_done(&sc.s);
    }
    return 0;
}

/*
 * A body's unread values cost no tape: a megabyte of numbers, strings or
 * objects in a member nobody reads leaves the root and the wanted members,
 * on the caller's stack.
 */
static int
test_unread_values_cost_nothing(void)
{
    static const char *const items[] = { "0", "\"\"", "{}", "[0]", "{\"a\":1}", "1e5" };
    size_t cap = (1u << 20) + 64;
    char *body = malloc(cap);

    LG_CHECK(body != NULL);
    for (size_t k = 0; k < LG_ARRAY_SIZE(items); k++) {
        struct scan sc;
        size_t n = (size_t)snprintf(body, cap, "{\"a\":\"m\",\"x\":[");
        size_t il = strlen(items[k]);

        while (n + il + 16 < cap) {
            memcpy(body + n, items[k], il);
            n += il;
            body[n++] = ',';
        }
        memcpy(body + n, "0]}", 3);
        n += 3;
        scan(&sc, body, n, 0);
        LG_CHECK(sc.rc == LG_OK);
        LG_CHECK(sc.s.ntok == 2 && !sc.s.tok_heap);
        lg_jsonscan_done(&sc.s);
        scan(&sc, body, n, 4096);
        LG_CHECK(sc.rc == LG_OK && sc.s.ntok == 2 && !sc.s.tok_heap);
        lg_jsonscan_done(&sc.s);
    }
    free(body);
    return 0;
}

/* What leaves nothing is checked as strictly as what is recorded, at its position. */
static int
test_unread_values_checked(void)
{
    static const struct {
        const char *body;
        const char *msg;
    } cases[] = {
        { "{\"x\":[1,2,tru]}", "invalid token" },
        { "{\"x\":{\"y\":\"\\u0000\"}}", "\\u0000 is not allowed" },
        { "{\"x\":[\"\xc0\xaf\"]}", "invalid UTF-8" },
        { "{\"x\":[9223372036854775808]}", "integer out of range" },
        { "{\"x\":\n[1e400]}", "line 2 column 2: real number out of range" },
        { "{\"x\":{\"y\" 1}}", "':' expected" },
        { "{\"x\":[1,]}", "invalid token" },
        { "{\"t\":[{\"y\":[1 2]}]}", "',' or ']' expected" },
    };

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        for (size_t step = 0; step < 3; step++) {
            struct scan sc;

            scan(&sc, cases[i].body, strlen(cases[i].body), step);
            if (sc.rc != LG_EINVAL || strstr(sc.err, cases[i].msg) == NULL) {
                fprintf(stderr, "body %s: rc %d \"%s\", want \"%s\"\n", cases[i].body, sc.rc,
                        sc.err, cases[i].msg);
                return 1;
            }
            lg_jsonscan_done(&sc.s);
        }
    }
    return 0;
}

/* A body of `n` wanted values: {"t":["","",...]} (n - 2 strings: root and t count). */
static char *
many_values(uint32_t n, size_t *len)
{
    size_t cap = 16 + 3 * (size_t)n;
    char *body = malloc(cap);
    size_t k = 0;

    if (body == NULL) {
        return NULL;
    }
    k += (size_t)snprintf(body, cap, "{\"t\":[");
    for (uint32_t i = 0; i + 2 < n; i++) {
        memcpy(body + k, i ? ",\"\"" : "\"\"", i ? 3 : 2);
        k += i ? 3 : 2;
    }
    memcpy(body + k, "]}", 2);
    *len = k + 2;
    return body;
}

/*
 * The tape grows to LG_JSONSCAN_MAX_TOKS values and not one more: past it
 * the scan stops with LG_ENOMEM, capped, and says why.
 */
static int
test_tape_bound(void)
{
    struct scan sc;
    size_t len;
    char *body = many_values(LG_JSONSCAN_MAX_TOKS, &len);

    LG_CHECK(body != NULL);
    scan(&sc, body, len, 0);
    LG_CHECK(sc.rc == LG_OK && sc.s.ntok == LG_JSONSCAN_MAX_TOKS);
    LG_CHECK(sc.s.cap == LG_JSONSCAN_MAX_TOKS);
    lg_jsonscan_done(&sc.s);
    free(body);
    body = many_values(LG_JSONSCAN_MAX_TOKS + 1, &len);
    LG_CHECK(body != NULL);
    scan(&sc, body, len, 0);
    LG_CHECK(sc.rc == LG_ENOMEM && sc.s.capped);
    LG_CHECK(strstr(sc.err, "more than 1048576 values") != NULL);
    lg_jsonscan_done(&sc.s);
    free(body);
    return 0;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif

/*
 * An allocation that fails fails the scan (LG_ENOMEM, not capped), and the
 * process goes on: in a child whose address space is held a few MiB above
 * what it uses, a tape of 16 MiB cannot be had. (Sanitizers and valgrind
 * reserve their own address space: under them the child is not run.)
 */
static int
test_allocation_failure(void)
{
#ifdef SANITIZED
    fprintf(stderr, "skipped under a sanitizer\n");
    return 0;
#else
    size_t len;
    char *body = many_values(LG_JSONSCAN_MAX_TOKS - 1000, &len);
    pid_t pid;
    int status;

    LG_CHECK(body != NULL);
    if (getenv("LD_PRELOAD") != NULL && strstr(getenv("LD_PRELOAD"), "vgpreload") != NULL) {
        free(body); /* valgrind: its own allocator, its own address space */
        return 0;
    }
    pid = fork();
    LG_CHECK(pid >= 0);
    if (pid == 0) {
        struct rlimit rl;
        struct scan sc;
        unsigned long pages = 0;
        FILE *fp = fopen("/proc/self/statm", "r");

        if (fp == NULL || fscanf(fp, "%lu", &pages) != 1) {
            _exit(3);
        }
        fclose(fp);
        rl.rlim_cur = rl.rlim_max = pages * (rlim_t)sysconf(_SC_PAGESIZE) + (4u << 20);
        if (setrlimit(RLIMIT_AS, &rl) != 0) {
            _exit(3);
        }
        scan(&sc, body, len, 0);
        lg_jsonscan_done(&sc.s);
        if (sc.rc != LG_ENOMEM || sc.s.capped
            || strcmp(sc.err, "no memory to read the request body") != 0) {
            fprintf(stderr, "child: rc %d capped %d: %s\n", sc.rc, sc.s.capped, sc.err);
            _exit(1);
        }
        _exit(0);
    }
    free(body);
    LG_CHECK(waitpid(pid, &status, 0) == pid);
    LG_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return 0;
#endif
}

/*
 * A want's by_len table (LG_JSONSCAN_BY_LEN) finds the keys the plain walk
 * over every key finds: the same tape, key for key, for names of every
 * length (none, one of the keys', two keys of one length, longer than any),
 * escaped or cut across chains.
 */
#define LEN_KEYS(X, a)                                                                    \
    X(a, 0, "ab")                                                                         \
    X(a, 1, "cd") X(a, 2, "xyz") X(a, 3, "e") X(a, 4, "abcdefghijklmnopqrstuvwxyz012345") \
        X(a, 5, "cd")
#define LEN_KEY(a, k, lit) [k] = LG_JSONSCAN_KEY(lit),
static const struct lg_jsonscan_key len_keys[6] = { LEN_KEYS(LEN_KEY, 0) };
static const uint32_t len_by_len[LG_JSONSCAN_KEY_MAX + 1] = LG_JSONSCAN_BY_LEN(LEN_KEYS);

static int
test_by_len(void)
{
    static const char body[] =
        "{\"\":1,\"e\":2,\"ab\":3,\"cd\":4,\"c\\u0064\":5,\"xy\":6,\"xyz\":7,\"xyzw\":8,"
        "\"abcdefghijklmnopqrstuvwxyz012345\":9,\"abcdefghijklmnopqrstuvwxyz0123456\":10,"
        "\"abcdefghijklmnopqrstuvwxyz01234\\u0035\":11,\"E\":12,\"ba\":13}";
    static const size_t steps[] = { 0, 1, 2, 5 };
    const struct lg_jsonscan_want plain = { .keys = len_keys, .nkeys = 6 };
    const struct lg_jsonscan_want indexed = { .keys = len_keys, .nkeys = 6, .by_len = len_by_len };

    LG_CHECK(len_by_len[2] == (1u << 0 | 1u << 1 | 1u << 5) && len_by_len[1] == 1u << 3);
    LG_CHECK(len_by_len[3] == 1u << 2 && len_by_len[32] == 1u << 4 && len_by_len[4] == 0);
    for (size_t k = 0; k < LG_ARRAY_SIZE(steps); k++) {
        struct scan a, b;
        uint32_t f[6], second[6];

        for (int w = 0; w < 2; w++) {
            struct scan *sc = w == 0 ? &a : &b;
            struct evbuffer_iovec *vec = sc->vec;
            int n = 0;

            for (size_t off = 0; off < sizeof(body) - 1 && n < 64; n++) {
                size_t len = sizeof(body) - 1 - off;
                size_t m = steps[k] == 0 || n == 63 ? len : LG_MIN(steps[k], len);

                vec[n].iov_base = (void *)(uintptr_t)(body + off);
                vec[n].iov_len = m;
                off += m;
            }
            sc->rc = lg_jsonscan_run(&sc->s, vec, n, w == 0 ? &plain : &indexed, &sc->stack,
                                     sc->err, sizeof(sc->err));
            LG_CHECK(sc->rc == LG_OK);
        }
        /* the root, 3 (ab), 4 and 5 (cd, the first of the two), 7, 2 (e), 9 and 11 */
        LG_CHECK(a.s.ntok == 8 && b.s.ntok == a.s.ntok);
        for (uint32_t i = 0; i < a.s.ntok; i++) {
            LG_CHECK(a.s.tok[i].key == b.s.tok[i].key);
            LG_CHECK(a.s.tok[i].off == b.s.tok[i].off && a.s.tok[i].type == b.s.tok[i].type);
        }
        lg_jsonscan_members(&b.s, 1, 6, f, second);
        LG_CHECK(f[0] != 0 && f[1] != 0 && f[2] != 0 && f[3] != 0 && f[4] != 0 && f[5] == 0);
        lg_jsonscan_done(&a.s);
        lg_jsonscan_done(&b.s);
    }
    return 0;
}

/* test_allocation_failure first: before any test frees a large block that
 * the allocator would keep, and the child could use without asking */
LG_TEST_MAIN(test_allocation_failure, test_records_what_is_wanted, test_unread_values_cost_nothing,
             test_unread_values_checked, test_tape_bound, test_by_len)
