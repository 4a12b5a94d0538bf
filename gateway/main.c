/*
 * main.c: argv, signals, startup and shutdown order, exit codes.
 *
 * Startup: config -> fleet (reload.c: discovery's first answers) -> access
 * log -> listening sockets -> workers -> "ready" line. SIGHUP reloads the
 * configuration (reload.c). Shutdown on SIGTERM/SIGINT: workers stop
 * accepting and finish their requests; after timeouts.drain whatever still
 * runs is cut.
 * Exit codes: 0 clean, 1 runtime failure, 2 bad usage or bad config.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "base/accesslog.h"
#include "base/config.h"
#include "base/cpus.h"
#include "base/evmem.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "http/tls.h"
#include "lg_version.h"
#include "ops/admin.h"
#include "ops/probe.h"
#include "ops/reload.h"
#include "serve/admission.h"
#include "serve/respmap.h"
#include "serve/budgetstore.h"
#include "base/otlp.h"
#include "serve/connlimit.h"
#include "serve/gateway.h"
#include "serve/keys.h"
#include "serve/listener.h"
#include "serve/wakeup.h"
#include "serve/worker.h"

struct main_state {
    struct lg_gateway *gw;
    struct event_base *base;
    struct event *drain_timer;
    struct event *reaper;       /* polls for workers that finished */
    bool stopping;
};

static void
main_usage(FILE *f)
{
    fprintf(f,
            "usage: llmgate -c FILE [--ready-file FILE]\n"
            "       llmgate --check-config FILE\n"
            "       llmgate --probe -c FILE | --probe=URL\n"
            "       printf %%s KEY | llmgate --hash-key\n"
            "       llmgate --version | --help\n"
            "\n"
            "  -c, --config FILE        run with this JSON configuration\n"
            "  -t, --check-config FILE  validate FILE, print every error as\n"
            "                           FILE:LINE:COL: error: /pointer: message; exit 0 or 2\n"
            "                           (risky settings: FILE:LINE:COL: warning: ...; exit 0)\n"
            "      --ready-file FILE    once listening, write the bound addresses there\n"
            "      --probe[=URL]        health check (containers): GET URL, or /healthz on\n"
            "                           FILE's first plain listen address; exit 0 on 2xx\n"
            "      --hash-key           print the SHA-256 of the API key read from standard\n"
            "                           input, for the keys file (auth.keys_file)\n"
            "  -v, --version            print the version\n"
            "  -h, --help               this text\n"
            "\n"
            "Signals: SIGTERM/SIGINT drain and exit 0; SIGHUP reloads the configuration,\n"
            "the TLS certificates and the API keys; SIGUSR1 reopens the access log.\n"
            "Configuration reference: conf/README.md\n");
}

/* The API keys file, when auth is on; errors printed like the config's. */
static int
main_keys_load(const struct lg_config *conf, struct lg_keys **out)
{
    struct lg_config_errors errs = { 0 };

    *out = NULL;
    if (conf->auth.keys_file == NULL) {
        return LG_OK;
    }
    if (lg_keys_load(conf->auth.keys_file, out, &errs) != LG_OK) {
        lg_config_errors_print(&errs, stderr);
        lg_config_errors_free(&errs);
        return LG_EINVAL;
    }
    return LG_OK;
}

static int
main_check_config(const char *path)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *conf = NULL;

    if (lg_config_load(path, &conf, &errs) != LG_OK) {
        lg_config_errors_print(&errs, stderr);
        lg_config_errors_free(&errs);
        return 2;
    }
    if (conf->auth.keys_file != NULL) {
        struct lg_keys *keys;

        if (main_keys_load(conf, &keys) != LG_OK) {
            lg_config_unref(conf);
            return 2;
        }
        printf("%s: %zu API keys\n", conf->auth.keys_file, lg_keys_count(keys));
        lg_keys_free(keys);
    }
    for (size_t i = 0; i < conf->nwarnings; i++) {
        fprintf(stderr, "%s\n", conf->warnings[i]);
    }
    printf("%s: configuration is valid (%zu backends, %zu discovered through DNS, %zu listen "
           "addresses%s%zu warning%s)\n",
           path, conf->nbackends, conf->ntemplates, conf->nlisten, ", ", conf->nwarnings,
           conf->nwarnings == 1 ? "" : "s");
    lg_config_unref(conf);
    return 0;
}

/*
 * glibc gives freed memory back to the kernel: a block of 128 KiB or more is
 * unmapped, and a heap's free top beyond 128 KiB is trimmed (a thread
 * arena's with madvise); the next request's body faults those pages in
 * again, zeroed: with 100 KiB bodies up to 10 page faults per request and a
 * sixth of the proxy's CPU (bench/NOTES.md 37). Body chains up to 4 MiB
 * come from the heap and an arena keeps up to 32 MiB free at its top
 * instead (glibc's own adaptive thresholds reach 32 and 64 MiB).
 * GLIBC_TUNABLES naming malloc settings wins over this.
 */
static void
main_tune_malloc(void)
{
#ifdef __GLIBC__
    const char *t = getenv("GLIBC_TUNABLES");

    if (t != NULL && strstr(t, "glibc.malloc.") != NULL) {
        return;
    }
    mallopt(M_MMAP_THRESHOLD, 4 * 1024 * 1024);
    mallopt(M_TRIM_THRESHOLD, 32 * 1024 * 1024);
#endif
}

/*
 * Opens /dev/null where standard input, output or error is closed, so that no
 * file or socket opened later takes their numbers and receives the access
 * log or the error log. Returns a mask of the closed ones (1 << fd).
 */
static unsigned
main_open_std_fds(void)
{
    unsigned closed = 0;

    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int nul = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);

            closed |= 1u << fd;
            if (nul >= 0 && nul != fd) {
                dup2(nul, fd);
                close(nul);
            }
        }
    }
    return closed;
}

static void
main_raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void
main_on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct main_state *ms = arg;

    (void)fd;
    (void)what;
    LG_WARN("drain timeout: cutting %u remaining connections", lg_gateway_clients(ms->gw));
    for (unsigned i = 0; i < ms->gw->nworkers; i++) {
        lg_worker_post(&ms->gw->workers[i], LG_WORKER_CMD_STOP);
    }
}

static void
main_on_reaper(evutil_socket_t fd, short what, void *arg)
{
    struct main_state *ms = arg;
    unsigned running = 0;

    (void)fd;
    (void)what;
    for (unsigned i = 0; i < ms->gw->nworkers; i++) {
        if (ms->gw->workers[i].thread == 0) {
            continue;
        }
        if (pthread_tryjoin_np(ms->gw->workers[i].thread, NULL) == EBUSY) {
            running++;
        } else {
            ms->gw->workers[i].thread = 0;
        }
    }
    if (running == 0) {
        event_base_loopexit(ms->base, NULL);
    }
}

/* --hash-key: the SHA-256 of the key on stdin (one trailing newline ignored). */
static int
main_hash_key(void)
{
    char buf[4097], hex[65];
    size_t n = fread(buf, 1, sizeof(buf), stdin);

    if (n == sizeof(buf)) {
        fprintf(stderr, "llmgate: --hash-key: a key is at most %zu bytes\n", sizeof(buf) - 1);
        return 2;
    }
    if (n > 0 && buf[n - 1] == '\n') {
        n--;
    }
    if (n > 0 && buf[n - 1] == '\r') {
        n--;
    }
    if (n == 0) {
        fprintf(stderr, "llmgate: --hash-key: no key on standard input\n");
        return 2;
    }
    lg_keys_hash_hex(buf, n, hex);
    printf("%s\n", hex);
    return 0;
}

/* TLS contexts: every listener's, and every https backend's (to fail early). */
static int
main_tls_setup(struct lg_gateway *gw)
{
    if (lg_tls_new(gw->conf, &gw->tls) != LG_OK) {
        return LG_EINVAL;
    }
    for (size_t i = 0; i < gw->fleet->nbackends; i++) {
        struct lg_backend *b = gw->fleet->backends[i];

        if (lg_tls_client_prepare(lg_backend_conf(b), &b->tls_ctx) != LG_OK) {
            return LG_EINVAL;
        }
    }
    return LG_OK;
}

static void
main_on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct main_state *ms = arg;
    struct timeval tv, poll = { 0, 20000 };
    uint64_t ms_drain = ms->gw->conf->timeouts.drain_ms;

    (void)what;
    if (sig == SIGUSR1) {
        lg_accesslog_reopen(ms->gw->alog);
        return;
    }
    if (sig == SIGHUP) {
        if (!ms->stopping) {
            lg_reload_schedule(ms->gw, "SIGHUP");
        }
        return;
    }
    if (ms->stopping) {
        LG_WARN("second signal: stopping now");
        main_on_drain_timeout(-1, 0, ms);
        return;
    }
    ms->stopping = true;
    __atomic_store_n(&ms->gw->draining, true, __ATOMIC_RELAXED);
    lg_reload_stop(ms->gw);
    LG_INFO("%s: draining %u connections (up to %" PRIu64 " ms)", strsignal((int)sig),
            lg_gateway_clients(ms->gw), ms_drain);
    for (unsigned i = 0; i < ms->gw->nworkers; i++) {
        lg_worker_post(&ms->gw->workers[i], LG_WORKER_CMD_DRAIN);
    }
    tv.tv_sec = (time_t)(ms_drain / 1000);
    tv.tv_usec = (suseconds_t)((ms_drain % 1000) * 1000);
    evtimer_add(ms->drain_timer, &tv);
    event_add(ms->reaper, &poll);
}

static int
main_write_ready(const char *ready_file, const char *line)
{
    FILE *f;

    printf("%s\n", line);
    fflush(stdout);
    if (ready_file == NULL) {
        return LG_OK;
    }
    f = fopen(ready_file, "w");
    if (f == NULL) {
        LG_ERROR("cannot write the ready file %s: %s; check that its folder exists and is "
                 "writable",
                 ready_file, strerror(errno));
        return LG_EIO;
    }
    fprintf(f, "%s\n", line);
    fclose(f);
    return LG_OK;
}

/*
 * The worker count: the configuration's, or with "auto" (0) the CPUs the
 * process may use now (its affinity mask, bounded by its cgroup's CPU
 * quota); why says which, for the ready line.
 */
static void
main_workers(const struct lg_config *conf, unsigned *n, char *why, size_t whysz)
{
    struct lg_cpus_choice ch;

    if (conf->workers != 0) {
        *n = conf->workers;
        snprintf(why, whysz, "configured");
        return;
    }
    lg_cpus_choose(LG_CONFIG_MAX_WORKERS, &ch);
    *n = ch.workers;
    snprintf(why, whysz, "%s", ch.why);
}

static int
main_run(const char *path, const char *ready_file, unsigned closed_fds)
{
    struct lg_config_errors errs = { 0 };
    struct lg_gateway gw;
    struct main_state ms = { .gw = &gw };
    struct sockaddr_storage *bound;
    struct sockaddr_storage admin_bound;
    struct event *sigs[4];
    static const int signums[4] = { SIGTERM, SIGINT, SIGUSR1, SIGHUP };
    char line[1024], workers_why[sizeof(((struct lg_cpus_choice *)0)->why)];
    size_t off;
    int rc = 1;

    memset(&gw, 0, sizeof(gw));
    if (lg_config_load(path, &gw.conf, &errs) != LG_OK) {
        lg_config_errors_print(&errs, stderr);
        lg_config_errors_free(&errs);
        return 2;
    }
    __atomic_store_n(&lg_log_threshold, gw.conf->log_level, __ATOMIC_RELAXED);
    for (size_t i = 0; i < gw.conf->nwarnings; i++) {
        LG_WARN("%s", gw.conf->warnings[i]);
    }
    gw.config_path = lg_xstrdup(path);
    main_workers(gw.conf, &gw.nworkers, workers_why, sizeof(workers_why));
    gw.ops = &lg_gateway_worker_ops;
    pthread_mutex_init(&gw.fleet_lock, NULL);
    gw.connlimit = lg_connlimit_new();
    ms.base = event_base_new();
    gw.wakeup = lg_wakeup_new(ms.base);
    if (lg_reload_init(&gw, ms.base) != LG_OK) {
        rc = 2;
        goto out_fleet;
    }
    if (main_tls_setup(&gw) != LG_OK || main_keys_load(gw.conf, &gw.keys) != LG_OK) {
        rc = 2;
        goto out_fleet;
    }
    if (gw.conf->budgets.redis.address != NULL
        && lg_budgetstore_start(&gw.conf->budgets.redis, &gw.budget_refuses, &gw.budgetstore)
               != LG_OK) {
        goto out_fleet;
    }
    if (gw.conf->access_log.path != NULL
        && lg_accesslog_open(&gw.conf->access_log, gw.nworkers, &gw.alog) != LG_OK) {
        goto out_fleet;
    }
    if (gw.conf->tracing.endpoint != NULL
        && lg_otlp_start(&gw.conf->tracing, &gw.tracer) != LG_OK) {
        goto out_fleet;
    }
    if ((closed_fds & (1u << STDOUT_FILENO)) && gw.conf->access_log.path != NULL
        && strcmp(gw.conf->access_log.path, "-") == 0) {
        LG_WARN("standard output was closed: the access log (\"access_log\": \"-\", the "
                "default) goes nowhere; set \"access_log\" to a file, or to false");
    }
    bound = lg_xcalloc(gw.conf->nlisten, sizeof(*bound));
    if (lg_listener_open(&gw, bound) != LG_OK) {
        goto out_listen;
    }
    gw.workers = lg_xcalloc(gw.nworkers, sizeof(*gw.workers));
    for (unsigned i = 0; i < gw.nworkers; i++) {
        if (lg_worker_init(&gw, &gw.workers[i], i) != LG_OK) {
            goto out_workers;
        }
    }
    gw.admission = lg_admission_new(&gw);
    gw.respmap = lg_respmap_new(gw.conf->routing.responses.table,
                                gw.conf->routing.responses.ttl_ms * 1000000ull);
    ms.drain_timer = evtimer_new(ms.base, main_on_drain_timeout, &ms);
    ms.reaper = event_new(ms.base, -1, EV_PERSIST, main_on_reaper, &ms);
    for (size_t i = 0; i < LG_ARRAY_SIZE(sigs); i++) {
        sigs[i] = evsignal_new(ms.base, signums[i], main_on_signal, &ms);
        event_add(sigs[i], NULL);
    }
    if (lg_workers_start(&gw) != LG_OK || lg_admin_start(&gw, &admin_bound, &gw.admin) != LG_OK) {
        goto out_base;
    }
    off = (size_t)snprintf(line, sizeof(line), "llmgate ready listen=");
    for (size_t i = 0; i < gw.conf->nlisten && off < sizeof(line) - 80; i++) {
        off += (size_t)snprintf(line + off, sizeof(line) - off, "%s", i ? "," : "");
        lg_sockaddr_format(&bound[i], line + off, sizeof(line) - off);
        off = strlen(line);
    }
    if (gw.admin != NULL) {
        off += (size_t)snprintf(line + off, sizeof(line) - off, " admin=");
        lg_sockaddr_format(&admin_bound, line + off, sizeof(line) - off);
        off = strlen(line);
    }
    snprintf(line + off, sizeof(line) - off, " workers=%u (%s) backends=%zu pid=%d version=%s",
             gw.nworkers, workers_why, gw.fleet->nbackends, (int)getpid(), LG_VERSION);
    main_write_ready(ready_file, line);
    LG_INFO("%s", line);

    event_base_dispatch(ms.base);
    LG_INFO("all workers stopped; exiting");
    rc = 0;

out_base:
    lg_reload_stop(&gw); /* wakes an admin request waiting for a reload */
    lg_admin_stop(gw.admin);
    gw.admin = NULL;
    if (rc != 0) {
        for (unsigned i = 0; i < gw.nworkers; i++) {
            if (gw.workers[i].thread) {
                lg_worker_post(&gw.workers[i], LG_WORKER_CMD_STOP);
            }
        }
        for (unsigned i = 0; i < gw.nworkers; i++) {
            if (gw.workers[i].thread) {
                pthread_join(gw.workers[i].thread, NULL);
            }
        }
    }
    for (size_t i = 0; i < LG_ARRAY_SIZE(sigs); i++) {
        event_free(sigs[i]);
    }
    event_free(ms.drain_timer);
    event_free(ms.reaper);
out_workers:
    lg_admission_free(gw.admission); /* before the event bases it has events on */
    lg_respmap_free(gw.respmap);
    for (unsigned i = 0; i < gw.nworkers; i++) {
        lg_worker_destroy(&gw.workers[i]);
    }
    free(gw.workers);
out_listen:
    for (size_t i = 0; gw.listen_fds != NULL && i < gw.nlisten * gw.nworkers; i++) {
        if (gw.listen_fds[i] >= 0) {
            close(gw.listen_fds[i]);
        }
    }
    free(gw.listen_fds);
    free(bound);
    lg_accesslog_close(gw.alog);
out_fleet:
    lg_otlp_stop(gw.tracer); /* the workers are gone: nothing submits */
    lg_reload_free(&gw);
    lg_budgetstore_stop(gw.budgetstore);
    lg_keys_free(gw.keys);
    lg_tls_free(gw.tls);
    lg_fleet_unref(gw.fleet);
    lg_wakeup_free(gw.wakeup);
    event_base_free(ms.base);
    pthread_mutex_destroy(&gw.fleet_lock);
    lg_connlimit_free(gw.connlimit);
    free(gw.config_path);
    lg_config_unref(gw.conf);
    return rc;
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "check-config", required_argument, NULL, 't' },
        { "ready-file", required_argument, NULL, 'r' },
        { "probe", optional_argument, NULL, 'p' },
        { "hash-key", no_argument, NULL, 'k' },
        { "version", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *config = NULL, *check = NULL, *ready = NULL, *probe_url = NULL;
    unsigned closed_fds = main_open_std_fds();
    bool probe = false;
    int ch;

    while ((ch = getopt_long(argc, argv, "c:t:vh", opts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            config = optarg;
            break;
        case 't':
            check = optarg;
            break;
        case 'r':
            ready = optarg;
            break;
        case 'p':
            probe = true;
            probe_url = optarg;
            break;
        case 'k':
            return main_hash_key();
        case 'v':
            printf("llmgate %s (%s)\n", LG_VERSION, LG_GIT_REV);
            return 0;
        case 'h':
            main_usage(stdout);
            return 0;
        default:
            main_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "llmgate: unexpected argument \"%s\"\n", argv[optind]);
        main_usage(stderr);
        return 2;
    }
    if (check != NULL) {
        return main_check_config(check);
    }
    if (probe && probe_url != NULL) {
        return lg_probe_url(probe_url, 3000) == LG_OK ? 0 : 1;
    }
    if (probe && config != NULL) {
        return lg_probe_config_file(config, 3000) == LG_OK ? 0 : 1;
    }
    if (config == NULL) {
        main_usage(stderr);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    main_raise_nofile();
    main_tune_malloc();
    lg_evmem_install(); /* before libevent allocates anything */
    if (evthread_use_pthreads() != 0) {
        fprintf(stderr, "llmgate: libevent has no pthreads support\n");
        return 1;
    }
    return main_run(config, ready, closed_fds);
}
