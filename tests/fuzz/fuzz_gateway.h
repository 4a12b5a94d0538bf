/*
 * fuzz_gateway.h: a one-worker gateway inside a fuzz target, driven without
 * threads: the real client, proxy and upstream code on a real event base,
 * a client connected through a socketpair, and a fake backend on a loopback
 * listener the target owns. Shared by fuzz_request.c and fuzz_response.c.
 *
 * Owns (static, for the life of the process): the configuration, the fleet,
 * the gateway and its worker, the backend's listening socket. Per input the
 * target opens a client, feeds it, and fg_finish() closes everything it made
 * and runs the worker's reaper, so that nothing is left for the next input
 * (and LeakSanitizer sees any leak).
 */
#ifndef LG_FUZZ_GATEWAY_H
#define LG_FUZZ_GATEWAY_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "route/router.h"
#include "serve/admission.h"
#include "serve/respmap.h"
#include "serve/client.h"
#include "serve/gateway.h"
#include "serve/keys.h"
#include "serve/proxy.h"
#include "serve/upstream.h"
#include "serve/worker.h"

#define FG_MAX_UP 8 /* backend connections per input */

/*
 * A target may add to the configuration (defined before including this):
 * FG_ROUTING, members of "routing" (each with a leading comma); FG_TWO_BACKENDS,
 * a second backend "b2" on the same fake listener.
 */
#ifndef FG_ROUTING
#define FG_ROUTING ""
#endif

struct fg {
    struct lg_gateway gw;
    struct lg_worker w;
    int listen_fd;        /* the fake backend */
    int client_fd;        /* our end of the client's socketpair; -1: closed */
    int up_fd[FG_MAX_UP]; /* accepted backend connections; -1: closed */
    size_t nup;
    char up_in[FG_MAX_UP][8192]; /* what the gateway sent each one (truncated) */
    size_t up_in_len[FG_MAX_UP];
    char out[65536]; /* what the client received (truncated) */
    size_t out_len;
};

static struct fg fg_state;

/* The gateway, once: one worker, one backend (the fake one), small limits. */
static struct fg *
fg_setup(void)
{
    static bool ready;
    struct fg *f = &fg_state;
    struct lg_config_errors errs = { 0 };
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(sin);
    char conf[2048], second[160] = "";
    int n;

    if (ready) {
        return f;
    }
    signal(SIGPIPE, SIG_IGN);
    lg_log_threshold = LG_LOG_ERROR;
    f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (f->listen_fd < 0 || bind(f->listen_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0
        || listen(f->listen_fd, 64) != 0
        || getsockname(f->listen_fd, (struct sockaddr *)&sin, &len) != 0) {
        perror("fuzz backend");
        abort();
    }
#ifdef FG_TWO_BACKENDS
    snprintf(second, sizeof(second),
             ",\n  {\"name\": \"b2\", \"url\": \"http://127.0.0.1:%u\", \"models\": [\"m\"]}",
             ntohs(sin.sin_port));
#endif
    n = snprintf(conf, sizeof(conf),
                 "{\"listen\": \"127.0.0.1:0\", \"workers\": 1, \"log_level\": \"error\",\n"
                 " \"limits\": {\"max_header_bytes\": 2048, \"max_headers\": 24,\n"
                 "   \"max_body_bytes\": 4096, \"stream_buffer_bytes\": 1024,\n"
                 "   \"queue_length\": 2},\n"
                 " \"routing\": {\"retry\": {\"attempts\": 2, \"budget_min\": 1000000}"
                 FG_ROUTING "},\n"
                 /* no checker traffic to the fake backend, no state carried
                  * from one input to the next (ejections, slow start) */
                 " \"health\": {\"interval\": \"1h\", \"scrape_interval\": 0,\n"
                 "   \"eject_consecutive\": 0, \"slow_start\": 0},\n"
                 " \"backends\": [{\"name\": \"b\", \"url\": \"http://127.0.0.1:%u\",\n"
                 "   \"models\": [\"m\"], \"max_inflight\": 4, \"api_key\": \"up\"}%s]}",
                 ntohs(sin.sin_port), second);
    if (lg_config_load_buffer(conf, (size_t)n, "fuzz.json", &f->gw.conf, &errs) != LG_OK) {
        lg_config_errors_print(&errs, stderr);
        abort();
    }
    f->gw.nworkers = 1;
    f->gw.ops = &lg_gateway_worker_ops;
    f->gw.workers = &f->w;
    pthread_mutex_init(&f->gw.fleet_lock, NULL);
    if (lg_router_fleet_new(f->gw.conf, 1, NULL, &f->gw.fleet) != LG_OK
        || lg_worker_init(&f->gw, &f->w, 0) != LG_OK) {
        abort();
    }
    f->gw.admission = lg_admission_new(&f->gw);
    f->gw.respmap = lg_respmap_new(64, 60ull * 1000000000ull);
    f->client_fd = -1;
    ready = true;
    return f;
}

/* Reads what is there on a non-blocking fd into buf (keeps the first cap bytes). */
static bool
fg_drain(int fd, char *buf, size_t cap, size_t *len, bool *eof)
{
    bool any = false;

    for (;;) {
        char tmp[16384];
        ssize_t r = recv(fd, tmp, sizeof(tmp), MSG_DONTWAIT);

        if (r > 0) {
            size_t keep = LG_MIN((size_t)r, cap - *len);

            memcpy(buf + *len, tmp, keep);
            *len += keep;
            any = true;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            *eof = true;
        }
        return any;
    }
}

/* What the fake backend does with a connection's bytes: `respond` decides. */
typedef void (*fg_backend_fn)(struct fg *f, size_t i, void *arg);

/*
 * Runs the worker's loop until nothing moves for a few rounds: accepts the
 * gateway's backend connections, reads what they and the client received,
 * and lets `backend` answer.
 */
static void
fg_spin(struct fg *f, fg_backend_fn backend, void *arg)
{
    int quiet = 0;

    for (int round = 0; round < 200 && quiet < 4; round++) {
        bool moved = false, eof = false;
        int fd;

        event_base_loop(f->w.base, EVLOOP_NONBLOCK);
        while (f->nup < FG_MAX_UP && (fd = accept4(f->listen_fd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
            f->up_fd[f->nup] = fd;
            f->up_in_len[f->nup] = 0;
            f->nup++;
            moved = true;
        }
        for (size_t i = 0; i < f->nup; i++) {
            if (f->up_fd[i] < 0) {
                continue;
            }
            eof = false;
            if (fg_drain(f->up_fd[i], f->up_in[i], sizeof(f->up_in[i]), &f->up_in_len[i], &eof)) {
                moved = true;
                if (backend != NULL) {
                    backend(f, i, arg);
                }
            }
            if (eof && f->up_fd[i] >= 0) {
                close(f->up_fd[i]);
                f->up_fd[i] = -1;
                moved = true;
            }
        }
        if (f->client_fd >= 0) {
            eof = false;
            moved |= fg_drain(f->client_fd, f->out, sizeof(f->out), &f->out_len, &eof);
        }
        quiet = moved ? 0 : quiet + 1;
    }
}

/* A new client connection; its bytes are what the target sends with fg_send(). */
static void
fg_open_client(struct fg *f)
{
    struct sockaddr_in peer = { .sin_family = AF_INET,
                                .sin_port = htons(40000),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int sv[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        abort();
    }
    f->client_fd = sv[0];
    f->out_len = 0;
    f->nup = 0;
    /* an inet address, so that the per-address and X-Forwarded-For paths run */
    if (lg_client_new(&f->w, sv[1], (struct sockaddr *)&peer, sizeof(peer), NULL,
                      &lg_proxy_client_ops)
        != LG_OK) {
        abort();
    }
}

static void
fg_send(struct fg *f, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0 && f->client_fd >= 0) {
        ssize_t w = send(f->client_fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (w > 0) {
            p += w;
            len -= (size_t)w;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            fg_spin(f, NULL, NULL); /* the gateway reads, room comes back */
        } else {
            return; /* the gateway closed: the rest does not matter */
        }
    }
}

/* Ends the input: closes our ends, lets the gateway notice, frees what is left. */
static void
fg_finish(struct fg *f, fg_backend_fn backend, void *arg)
{
    struct lg_client *c;

    if (f->client_fd >= 0) {
        shutdown(f->client_fd, SHUT_WR);
        fg_spin(f, backend, arg);
        close(f->client_fd);
        f->client_fd = -1;
    }
    for (size_t i = 0; i < f->nup; i++) {
        if (f->up_fd[i] >= 0) {
            close(f->up_fd[i]);
            f->up_fd[i] = -1;
        }
    }
    fg_spin(f, NULL, NULL);
    while ((c = TAILQ_FIRST(&f->w.clients)) != NULL) {
        lg_client_close(c, "fuzz");
    }
    for (size_t i = 0; i < f->w.fleet->nbackends; i++) {
        lg_upstream_pool_flush(&f->w, f->w.fleet->backends[i]);
    }
    fg_spin(f, NULL, NULL);
    if (f->w.nclients != 0) {
        abort(); /* a client outlived its connection */
    }
}

#endif /* LG_FUZZ_GATEWAY_H */
