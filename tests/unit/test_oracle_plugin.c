/*
 * test_oracle_plugin.c: the benchmark's oracle policy (plugins/oracle), loaded
 * with dlopen() as the gateway would, scoring hand-made views against live
 * llmsim replicas started here with --state-shm: its costs must be the
 * replicas' true TTFTs (idle, busy, slower), it must see a cached prefix
 * through the gateway's prefix hash, and it must shun a dead replica and pick
 * up a restarted one.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <llmgate/plugin.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../tools/llmsim/llmsim_shm.h"
#include "base/lg_core.h"
#include "lg_test.h"
#include "route/options.h"

static char g_bindir[PATH_MAX];
static char g_tmpdir[64];
static const struct lg_policy_ops *g_ops;

struct replica {
    pid_t pid;
    int port;
    char name[16];
};

static uint64_t
test_now_ns(void)
{
    return lg_now_ns();
}

static uint64_t
test_random(void)
{
    return 4; /* chosen by a fair dice roll */
}

static void test_log(int level, const char *plugin, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
test_log(int level, const char *plugin, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "[%d] %s: ", level, plugin);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const struct lg_host_api g_host = {
    .size = sizeof(struct lg_host_api),
    .log = test_log,
    .now_ns = test_now_ns,
    .random = test_random,
    .opt_number = lg_options_number,
    .opt_bool = lg_options_bool,
    .opt_duration_ms = lg_options_duration_ms,
    .opt_size = lg_options_size,
    .opt_enum = lg_options_enum,
    .opt_string = lg_options_string,
};

/* The oracle's create op on options given as JSON text, as the gateway
 * calls it: the host's getters, then unknown options refused. */
static int
oracle_create(const char *text, void **state, char *err, size_t errlen)
{
    json_t *obj = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
    struct lg_options o;
    int rc;

    if (!json_is_object(obj)) {
        snprintf(err, errlen, ": options must be a JSON object");
        json_decref(obj);
        return -1;
    }
    lg_options_init(&o, obj, err, errlen);
    *state = NULL;
    rc = g_ops->create(&g_host, &o, state, err, errlen);
    if (lg_options_finish(&o, rc) != LG_OK) {
        if (rc == 0) {
            g_ops->destroy(*state);
        }
        rc = -1;
    }
    json_decref(obj);
    return rc;
}

static void
sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    nanosleep(&ts, NULL);
}

/* Starts llmsim NAME with EXTRA flags and the state file; waits for its ready file. */
static int
replica_start(struct replica *r, const char *name, const char *speed)
{
    char bin[PATH_MAX + 16], shm[128], ready[128], line[256];
    pid_t pid;

    snprintf(bin, sizeof(bin), "%s/../llmsim", g_bindir);
    snprintf(shm, sizeof(shm), "%s/%s.state", g_tmpdir, name);
    snprintf(ready, sizeof(ready), "%s/%s.ready", g_tmpdir, name);
    unlink(ready);
    unlink(shm); /* a restart gets a new file: the oracle remaps by inode */
    pid = fork();
    if (pid < 0) {
        return -1;
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);

        dup2(devnull, 1);
        execl(bin, bin, "--listen", "127.0.0.1:0", "--name", name, "--model", "m", "--slots", "1",
              "--speed", speed, "--decode-ms", "20", "--decode-ms-per-seq", "0.5",
              "--prefill-us-per-token", "100", "--prefix-block-tokens", "16", "--quiet",
              "--state-shm", shm, "--ready-file", ready, (char *)NULL);
        _exit(127);
    }
    r->pid = pid;
    snprintf(r->name, sizeof(r->name), "%s", name);
    for (int i = 0; i < 500; i++) {
        FILE *f = fopen(ready, "r");
        char *colon;

        if (f != NULL) {
            if (fgets(line, sizeof(line), f) != NULL && strchr(line, '\n') != NULL) {
                fclose(f);
                colon = strrchr(line, ':');
                r->port = colon ? atoi(colon + 1) : 0;
                return r->port > 0 ? 0 : -1;
            }
            fclose(f);
        }
        sleep_ms(10);
    }
    fprintf(stderr, "llmsim %s did not get ready\n", name);
    return -1;
}

static void
replica_kill(struct replica *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

/* Sends a chat request; returns the connected socket (the caller reads or closes it). */
static int
send_chat(const struct replica *r, const char *system, const char *user, int max_tokens, int stream)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)r->port) };
    static char body[16384], req[17000];
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int blen, rlen;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    blen = snprintf(body, sizeof(body),
                    "{\"model\":\"m\",\"stream\":%s,\"max_tokens\":%d,\"messages\":["
                    "{\"role\":\"system\",\"content\":\"%s\"},"
                    "{\"role\":\"user\",\"content\":\"%s\"}]}",
                    stream ? "true" : "false", max_tokens, system, user);
    rlen = snprintf(req, sizeof(req),
                    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                    blen, body);
    if (write(fd, req, (size_t)rlen) != rlen) {
        close(fd);
        return -1;
    }
    return fd;
}

static void
read_to_eof(int fd)
{
    char buf[4096];

    while (read(fd, buf, sizeof(buf)) > 0) {
    }
    close(fd);
}

/* The gateway's prefix hash (gateway/http/openai.c): roles and contents, first `len` bytes. */
static uint64_t
gateway_prefix_hash(const char *system, const char *user, size_t len)
{
    const char *parts[] = { "system", system, "user", user };
    struct lg_hstream h;

    lg_hstream_init(&h);
    for (size_t i = 0; i < 4 && len > 0; i++) {
        size_t n = LG_MIN(strlen(parts[i]), len);

        lg_hstream_feed(&h, parts[i], n);
        len -= n;
    }
    return lg_mix64(lg_hstream_value(&h)) | 1;
}

static uint32_t g_inflight_a; /* this gateway's requests open on a, as the host would say */

/* Scores views named a and b (in that order) for a request; returns 0 on success. */
static int
score2(void *state, const struct lg_route_info *req, double cost[2])
{
    struct lg_backend_view va = {
        .size = sizeof(va), .name = "a", .id = 1, .weight = 1, .inflight = g_inflight_a
    };
    struct lg_backend_view vb = { .size = sizeof(vb), .name = "b", .id = 2, .weight = 1 };
    const struct lg_backend_view *cands[2] = { &va, &vb };
    const char *why = NULL;

    cost[0] = cost[1] = -1;
    g_ops->score(state, req, cands, 2, cost, &why);
    return why != NULL && cost[0] >= 0 && cost[1] >= 0 ? 0 : -1;
}

static int
test_options(void)
{
    void *st = NULL;
    char err[256];

    LG_CHECK(oracle_create("{}", &st, err, sizeof(err)) != 0);
    LG_CHECK(strncmp(err, "/shm:", 5) == 0);
    LG_CHECK(oracle_create("{\"shm\": \"/x/state\"}", &st, err, sizeof(err)) != 0);
    LG_CHECK(strncmp(err, "/shm:", 5) == 0);
    LG_CHECK(oracle_create("{\"shm\": \"/x/%s%d\"}", &st, err, sizeof(err)) != 0);
    LG_CHECK(oracle_create("{\"shm\": \"/x/%s\", \"bound\": 1}", &st, err, sizeof(err)) != 0);
    LG_CHECK_STR(err, "/bound: unknown option (known: shm, shared_bytes, prefix_bytes)");
    LG_CHECK(oracle_create("{\"shm\": \"/x/%s\", \"shared_bytes\": -1}", &st, err, sizeof(err))
             != 0);
    LG_CHECK(strncmp(err, "/shared_bytes:", 14) == 0);
    LG_CHECK(oracle_create("{\"shm\": \"/x/%s\"} x", &st, err, sizeof(err)) != 0);
    LG_CHECK(oracle_create("{\"#\": \"why\", \"shm\": \"/x/%s.state\", \"shared_bytes\": 8006,"
                           " \"prefix_bytes\": 2048}",
                           &st, err, sizeof(err))
             == 0);
    g_ops->destroy(st);
    return 0;
}

static int
test_live(void)
{
    struct replica a = { 0 }, b = { 0 };
    struct lg_route_info req = { .size = sizeof(req),
                                 .model = "m",
                                 .path = "/v1/chat/completions",
                                 .stream = 1,
                                 .prompt_bytes = 400,
                                 .max_tokens = 16,
                                 .attempt = 1 };
    char opts[256], err[256], system[2100], user[64], shm[128];
    double cost[2];
    void *st = NULL;
    int busy = -1, rc = 1;

    /* 2042 bytes: with the role, exactly 32 blocks of 64 bytes, as routing.prefix_bytes 2048 */
    memset(system, 'q', 2042);
    system[2042] = '\0';
    for (int i = 0; i < 2042; i += 7) {
        system[i] = ' ';
    }
    snprintf(user, sizeof(user), "Request 1. hello");
    snprintf(opts, sizeof(opts), "{\"shm\": \"%s/%%s.state\", \"shared_bytes\": 2048}", g_tmpdir);
    if (replica_start(&a, "a", "1") != 0 || replica_start(&b, "b", "0.5") != 0
        || oracle_create(opts, &st, err, sizeof(err)) != 0) {
        fprintf(stderr, "setup failed: %s\n", err);
        goto out;
    }

    /* idle: one step of 100 prompt tokens, (100 x 0.1 + 20 + 0.5) / speed */
    LG_CHECK(score2(st, &req, cost) == 0);
    if (cost[0] < 30.0 || cost[0] > 31.0 || cost[1] < 60.5 || cost[1] > 61.5) {
        fprintf(stderr, "idle costs %.3f %.3f, expected 30.5 and 61\n", cost[0], cost[1]);
        goto out;
    }

    /*
     * three requests sent to a that it has not seen yet (in transit) queue
     * ahead: each 100 prompt tokens, 16 output tokens on the only slot, so
     * 3 x (30.5 + 15 x 20.5) ms, then ours
     */
    g_inflight_a = 3;
    LG_CHECK(score2(st, &req, cost) == 0);
    g_inflight_a = 0;
    if (cost[0] < 3 * 338.0 + 30.0 || cost[0] > 3 * 338.0 + 31.0) {
        fprintf(stderr, "in transit: %.3f, expected 1044.5\n", cost[0]);
        goto out;
    }

    /* a busy with a 60-token generation on its only slot: about 60 x 20.5 ms ahead */
    busy = send_chat(&a, "s", "busy", 60, 1);
    LG_CHECK(busy >= 0);
    snprintf(shm, sizeof(shm), "%s/a.state", g_tmpdir);
    {
        int fd = open(shm, O_RDONLY);
        struct stat sbuf;
        const struct llmsim_shm *s;
        uint64_t direct = 0, scratch[4];

        LG_CHECK(fd >= 0 && fstat(fd, &sbuf) == 0);
        s = mmap(NULL, (size_t)sbuf.st_size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        LG_CHECK(s != MAP_FAILED);
        for (int i = 0; i < 200 && __atomic_load_n(&s->running, __ATOMIC_ACQUIRE) == 0; i++) {
            sleep_ms(5);
        }
        LG_CHECK(s->running == 1);
        g_inflight_a = 1; /* the request above, which a has seen: nothing in transit */
        LG_CHECK(score2(st, &req, cost) == 0);
        g_inflight_a = 0;
        LG_CHECK(llmsim_shm_predict_ttft_ns(s, lg_now_ns(), 100, scratch, 4, &direct)
                 == LLMSIM_SHM_OK);
        munmap((void *)(uintptr_t)s, (size_t)sbuf.st_size);
        if (cost[0] < 900 || cost[0] > 1300 || cost[0] < (double)direct / 1e6 - 10
            || cost[0] > (double)direct / 1e6 + 10 || cost[1] > 62) {
            fprintf(stderr, "busy costs %.3f %.3f, predictor %.3f\n", cost[0], cost[1],
                    (double)direct / 1e6);
            goto out;
        }
    }

    /* prefix cache: after b served a prompt with this system message, its 32 blocks hit */
    req.prompt_bytes = 2042 + strlen(user);
    req.prefix_hash = gateway_prefix_hash(system, user, 2048);
    req.prefix_len = 2048;
    {
        double cold[2], warm[2];
        int fd;

        LG_CHECK(score2(st, &req, cold) == 0);
        fd = send_chat(&b, system, user, 1, 0);
        LG_CHECK(fd >= 0);
        read_to_eof(fd);
        LG_CHECK(score2(st, &req, warm) == 0);
        /* 512 cached tokens x 0.1 ms at speed 0.5 */
        if (cold[1] - warm[1] < 100 || cold[1] - warm[1] > 105) {
            fprintf(stderr, "prefix: cold %.3f warm %.3f on b\n", cold[1], warm[1]);
            goto out;
        }
        /* another prefix hash misses */
        req.prefix_hash = gateway_prefix_hash("other", user, 2048);
        LG_CHECK(score2(st, &req, warm) == 0);
        LG_CHECK(warm[1] > cold[1] - 1);
    }

    /* a dead replica costs "never"; a restarted one (new file) is seen again */
    req.prefix_hash = 0;
    req.prompt_bytes = 400;
    close(busy);
    busy = -1;
    replica_kill(&a);
    sleep_ms(30);
    LG_CHECK(score2(st, &req, cost) == 0);
    if (cost[0] < 1e8 || cost[1] > 62) {
        fprintf(stderr, "after the kill: %.3f %.3f\n", cost[0], cost[1]);
        goto out;
    }
    LG_CHECK(replica_start(&a, "a", "2") == 0);
    sleep_ms(30);
    LG_CHECK(score2(st, &req, cost) == 0);
    if (cost[0] < 15.0 || cost[0] > 15.5) {
        fprintf(stderr, "after the restart at speed 2: %.3f (expected 15.25)\n", cost[0]);
        goto out;
    }
    rc = 0;
out:
    if (busy >= 0) {
        close(busy);
    }
    if (st != NULL) {
        g_ops->destroy(st);
    }
    replica_kill(&a);
    replica_kill(&b);
    return rc;
}

static int
run_all(void)
{
    char so[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", g_bindir, sizeof(g_bindir) - 1);
    const struct lg_plugin_desc *(*describe)(void);
    const struct lg_plugin_desc *d;
    void *h;
    int failed = 0;

    LG_CHECK(n > 0);
    g_bindir[n] = '\0';
    *strrchr(g_bindir, '/') = '\0';
    snprintf(so, sizeof(so), "%s/../plugins/oracle.so", g_bindir);
    h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    *(void **)&describe = dlsym(h, "lg_plugin_describe");
    LG_CHECK(describe != NULL);
    d = describe();
    LG_CHECK(d->abi_major == LG_PLUGIN_ABI_MAJOR && d->kind == LG_PLUGIN_POLICY);
    LG_CHECK_STR(d->name, "oracle");
    g_ops = d->ops;
    LG_CHECK(g_ops->size >= sizeof(struct lg_policy_ops) && g_ops->create && g_ops->score
             && g_ops->destroy);

    snprintf(g_tmpdir, sizeof(g_tmpdir), "/dev/shm/lgtest-oracle-XXXXXX");
    LG_CHECK(mkdtemp(g_tmpdir) != NULL);
    signal(SIGPIPE, SIG_IGN);
    failed |= test_options();
    printf("%s options\n", failed ? "FAIL" : "ok  ");
    if (!failed) {
        failed |= test_live();
        printf("%s live\n", failed ? "FAIL" : "ok  ");
    }
    {
        const char *files[] = { "a.state", "b.state", "a.ready", "b.ready" };
        char p[128];

        for (size_t i = 0; i < 4; i++) {
            snprintf(p, sizeof(p), "%s/%s", g_tmpdir, files[i]);
            unlink(p);
        }
        rmdir(g_tmpdir);
    }
    dlclose(h);
    return failed;
}

LG_TEST_MAIN(run_all)
