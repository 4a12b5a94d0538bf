/*
 * sim.c: one llmsim replica: event base, listener, signals, shared state,
 * engine, fault schedule, and the ready line.
 *
 * Owns: the event base and every event on it, the listener, the shared state
 * mapping, the engine, the fault list and (through the reap list) the
 * connections. Borrows: the configuration, for the replica's lifetime.
 * Faults are evaluated at their edges only: one timer fires at the next
 * start or end, and lg_sim_faults_apply() moves the replica to what is in
 * effect then (speed, stall, status, crash).
 */
#include "sim.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "base/lg_core.h"
#include "conn.h"

static void
sim_on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
              void *arg)
{
    struct lg_sim *sim = arg;

    if (lg_sim_conn_accept(sim, fd) != LG_OK) {
        LG_WARN("cannot take a new connection: out of memory");
    }
}

static void
sim_on_accept_error(struct evconnlistener *l, void *arg)
{
    static uint64_t last;
    int err = EVUTIL_SOCKET_ERROR();

    if (lg_log_ratelimit(&last, LG_NS_PER_S)) {
        LG_WARN("accept: %s", evutil_socket_error_to_string(err));
    }
}

static void
sim_on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct lg_sim *sim = arg;

    LG_INFO("%s: exiting", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    sim->exit_code = 0;
    event_base_loopbreak(sim->base);
}

static void
sim_on_reap(evutil_socket_t fd, short what, void *arg)
{
    lg_sim_conn_reap(arg);
}

static void
sim_on_fault(evutil_socket_t fd, short what, void *arg)
{
    lg_sim_faults_apply(arg);
}

uint64_t
lg_sim_next_id(struct lg_sim *sim)
{
    return lg_mix64(sim->conf->seed ^ lg_mix64(++sim->next_response_id));
}

size_t
lg_sim_held_count(const struct lg_sim *sim)
{
    const struct lg_sim_conn *c;
    size_t n = 0;

    TAILQ_FOREACH (c, &sim->held, held_link) {
        n++;
    }
    return n;
}

/* A random fault's draws: from the replica's seed and the fault's rank, so a run repeats. */
static void
sim_fault_seed(struct lg_sim *sim, struct lg_sim_fault *f)
{
    f->seed = lg_mix64(sim->conf->seed ^ lg_mix64(0x5eed0000u + ++sim->faults_added));
}

int
lg_sim_fault_add_now(struct lg_sim *sim, const struct lg_sim_fault *spec)
{
    struct lg_sim_fault f = *spec;
    int rc;

    sim_fault_seed(sim, &f);
    rc = lg_sim_faults_add(&sim->faults, &f, lg_now_ns());

    if (rc != LG_OK) {
        LG_WARN("fault schedule full (%d faults): clear it first", LG_SIM_FAULTS_MAX);
    }
    return rc;
}

/* Makes the kernel answer every open connection with RST when the process exits
 * (SO_LINGER on with a zero timeout), as a crash that takes the host's sockets
 * down with it does: the peer reads ECONNRESET, never a clean end. */
static void
sim_reset_conns(struct lg_sim *sim)
{
    const struct linger lin = { .l_onoff = 1, .l_linger = 0 };
    struct lg_sim_conn *c;

    TAILQ_FOREACH (c, &sim->conns, link) {
        evutil_socket_t fd = bufferevent_getfd(c->bev);

        if (fd >= 0) {
            (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lin, sizeof(lin));
        }
    }
}

void
lg_sim_faults_apply(struct lg_sim *sim)
{
    uint64_t now = lg_now_ns();
    uint64_t next;
    double speed;
    bool stalled, failing;
    int status;
    uint32_t retry;
    bool reset;

    if (lg_sim_faults_crash_due(&sim->faults, now, &reset)) {
        /* abrupt on purpose: no flush, no cleanup; the kernel closes the sockets (FIN,
         * or RST where a client's bytes lie unread), or with reset sends RST on each */
        if (reset) {
            sim_reset_conns(sim);
        }
        LG_ERROR("crash fault: exiting with status 1%s", reset ? ", connections reset" : "");
        _exit(1);
    }
    lg_sim_faults_prune(&sim->faults, now);
    speed = sim->base_speed / lg_sim_faults_slowdown(&sim->faults, now);
    if (speed != sim->speed) {
        LG_INFO("speed %.6g -> %.6g", sim->speed, speed);
        sim->speed = speed;
        lg_sim_engine_set_speed(&sim->engine, speed);
    }
    failing = lg_sim_faults_status(&sim->faults, now, &status, &retry);
    if (failing != sim->failing) {
        LG_INFO("status fault %s", failing ? "in effect" : "over");
        sim->failing = failing;
        lg_sim_engine_set_failing(&sim->engine, failing);
    }
    stalled = lg_sim_faults_stalled(&sim->faults, now);
    if (stalled != sim->stalled) {
        LG_INFO("stall %s", stalled ? "begins" : "ends");
        sim->stalled = stalled;
        sim->counters.stalls += stalled;
        lg_sim_engine_set_stalled(&sim->engine, stalled);
        if (!stalled) {
            lg_sim_conn_release_held(sim);
        }
    }
    evtimer_del(sim->fault_ev);
    next = lg_sim_faults_next_edge(&sim->faults, now);
    if (next != LG_SIM_FAULT_FOREVER) {
        uint64_t delay = next - now;
        struct timeval tv = {
            .tv_sec = (time_t)(delay / LG_NS_PER_S),
            .tv_usec = (suseconds_t)((delay % LG_NS_PER_S + 999) / 1000),
        };

        evtimer_add(sim->fault_ev, &tv);
    }
}

/* Parses "HOST:PORT" or "[V6]:PORT". */
static int
sim_resolve(const char *listen, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    const char *h = listen;
    const char *port;
    size_t hlen;
    struct addrinfo hints = { .ai_family = AF_UNSPEC,
                              .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res = NULL;
    int rc;

    if (colon == NULL || colon[1] == '\0') {
        LG_ERROR("--listen %s: expected HOST:PORT", listen);
        return LG_EINVAL;
    }
    port = colon + 1;
    hlen = (size_t)(colon - listen);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (hlen >= sizeof(host)) {
        LG_ERROR("--listen %s: host too long", listen);
        return LG_EINVAL;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    rc = getaddrinfo(hlen ? host : NULL, port, &hints, &res);
    if (rc != 0 || res == NULL) {
        LG_ERROR("--listen %s: %s", listen, gai_strerror(rc));
        return LG_EINVAL;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return LG_OK;
}

static void
sim_format_bound(struct lg_sim *sim)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char ip[INET6_ADDRSTRLEN];
    evutil_socket_t fd = evconnlistener_get_fd(sim->listener);

    memset(&ss, 0, sizeof(ss));
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        snprintf(sim->listen_addr, sizeof(sim->listen_addr), "%s", sim->conf->listen);
        return;
    }
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;

        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        snprintf(sim->listen_addr, sizeof(sim->listen_addr), "[%s]:%u", ip, ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;

        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
        snprintf(sim->listen_addr, sizeof(sim->listen_addr), "%s:%u", ip, ntohs(s4->sin_port));
    }
}

/* Many concurrent streams need many descriptors: take what the hard limit allows. */
static void
sim_raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            LG_DEBUG("setrlimit(NOFILE): %s", strerror(errno));
        }
    }
}

static int
sim_schedule_cli_faults(struct lg_sim *sim)
{
    for (size_t i = 0; i < sim->conf->nfaults; i++) {
        struct lg_sim_fault f;
        char err[192];

        if (lg_sim_fault_parse(sim->conf->faults[i], &f, err, sizeof(err)) != LG_OK) {
            LG_ERROR("--fault %s: %s", sim->conf->faults[i], err);
            return LG_EINVAL;
        }
        sim_fault_seed(sim, &f);
        if (lg_sim_faults_add(&sim->faults, &f, sim->start_ns) != LG_OK) {
            LG_ERROR("--fault: at most %d faults", LG_SIM_FAULTS_MAX);
            return LG_EINVAL;
        }
    }
    return LG_OK;
}

int
lg_sim_init(struct lg_sim *sim, const struct lg_sim_conf *conf)
{
    struct lg_sim_engine_conf ec = {
        .slots = conf->slots,
        .schedule = conf->schedule,
        .step_tokens = conf->step_tokens,
        .policy = conf->policy,
        .preempt_threshold = conf->preempt_threshold,
        .prefill_us_per_token = conf->prefill_us_per_token,
        .prefill_fixed_ms = conf->prefill_fixed_ms,
        .decode_ms = conf->decode_ms,
        .decode_ms_per_seq = conf->decode_ms_per_seq,
        .decode_batch_exp = conf->decode_batch_exp,
        .jitter = conf->jitter,
        .gauge_lag_ms = conf->gauge_lag_ms,
        .seed = conf->seed,
        .speed = conf->speed,
        .prefix_block_tokens = conf->prefix_block_tokens,
        .prefix_cache_blocks = conf->prefix_cache_blocks,
        .step_log = conf->step_log,
    };
    struct event_config *cfg;
    struct sockaddr_storage ss;
    socklen_t sslen = 0;

    memset(sim, 0, sizeof(*sim));
    sim->conf = conf;
    sim->start_ns = lg_now_ns();
    sim->loads_prev_ns = sim->start_ns;
    sim->base_speed = sim->speed = conf->speed;
    sim->exit_code = 1;
    TAILQ_INIT(&sim->conns);
    TAILQ_INIT(&sim->held);
    TAILQ_INIT(&sim->reap);
    signal(SIGPIPE, SIG_IGN);
    sim_raise_nofile();
    if (sim_schedule_cli_faults(sim) != LG_OK || sim_resolve(conf->listen, &ss, &sslen) != LG_OK) {
        return LG_EINVAL;
    }
    cfg = event_config_new();
    if (cfg == NULL) {
        return LG_ENOMEM;
    }
    /* step timers need better than the millisecond rounding of epoll_wait */
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    sim->base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (sim->base == NULL) {
        LG_ERROR("cannot create the event base");
        return LG_ERR;
    }
    if (conf->state_shm != NULL
        && lg_sim_shm_open(&sim->shm, conf->state_shm, conf->name, conf->slots,
                           conf->prefix_block_tokens ? conf->prefix_cache_blocks : 0,
                           conf->prefix_block_tokens)
               != LG_OK) {
        return LG_ERR;
    }
    if (lg_sim_engine_init(&sim->engine, sim->base, &ec, &lg_sim_conn_engine_ops, &sim->shm)
        != LG_OK) {
        return LG_ENOMEM;
    }
    sim->sigterm_ev = evsignal_new(sim->base, SIGTERM, sim_on_signal, sim);
    sim->sigint_ev = evsignal_new(sim->base, SIGINT, sim_on_signal, sim);
    sim->fault_ev = evtimer_new(sim->base, sim_on_fault, sim);
    sim->reap_ev = event_new(sim->base, -1, 0, sim_on_reap, sim);
    if (sim->sigterm_ev == NULL || sim->sigint_ev == NULL || sim->fault_ev == NULL
        || sim->reap_ev == NULL) {
        return LG_ENOMEM;
    }
    event_add(sim->sigterm_ev, NULL);
    event_add(sim->sigint_ev, NULL);
    sim->listener =
        evconnlistener_new_bind(sim->base, sim_on_accept, sim,
                                LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
                                4096, (struct sockaddr *)&ss, (int)sslen);
    if (sim->listener == NULL) {
        LG_ERROR("--listen %s: %s", conf->listen, strerror(errno));
        return LG_ERR;
    }
    evconnlistener_set_error_cb(sim->listener, sim_on_accept_error);
    sim_format_bound(sim);
    lg_sim_faults_apply(sim);
    return LG_OK;
}

static int
sim_write_ready_file(const char *path, const char *line)
{
    char tmp[4096];
    FILE *f;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
        LG_ERROR("--ready-file %s: path too long", path);
        return LG_ERR;
    }
    f = fopen(tmp, "w");
    if (f == NULL) {
        LG_ERROR("--ready-file %s: %s", tmp, strerror(errno));
        return LG_ERR;
    }
    fprintf(f, "%s\n", line);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        LG_ERROR("--ready-file %s: %s", path, strerror(errno));
        return LG_ERR;
    }
    return LG_OK;
}

int
lg_sim_run(struct lg_sim *sim)
{
    char line[256];

    snprintf(line, sizeof(line), "llmsim ready name=%s listen=%s", sim->conf->name,
             sim->listen_addr);
    lg_sim_shm_publish_ready(&sim->shm);
    if (sim->conf->ready_file != NULL && sim_write_ready_file(sim->conf->ready_file, line) != 0) {
        return 1;
    }
    printf("%s\n", line);
    fflush(stdout);
    event_base_dispatch(sim->base);
    return sim->exit_code;
}

void
lg_sim_free(struct lg_sim *sim)
{
    struct lg_sim_conn *c;

    while ((c = TAILQ_FIRST(&sim->conns)) != NULL) {
        lg_sim_conn_close(c);
    }
    lg_sim_conn_reap(sim);
    if (sim->listener != NULL) {
        evconnlistener_free(sim->listener);
    }
    if (sim->sigterm_ev != NULL) {
        event_free(sim->sigterm_ev);
    }
    if (sim->sigint_ev != NULL) {
        event_free(sim->sigint_ev);
    }
    if (sim->fault_ev != NULL) {
        event_free(sim->fault_ev);
    }
    if (sim->reap_ev != NULL) {
        event_free(sim->reap_ev);
    }
    lg_sim_engine_free(&sim->engine);
    lg_sim_shm_close(&sim->shm);
    if (sim->base != NULL) {
        event_base_free(sim->base);
    }
    memset(sim, 0, sizeof(*sim));
}
