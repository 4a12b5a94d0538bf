/*
 * listener.c: listening sockets and accept.
 *
 * Owns: the listening sockets until each is wrapped in a worker's
 * evconnlistener (LEV_OPT_CLOSE_ON_FREE: the listener owns it from then on).
 * Accept failures from fd or memory exhaustion pause that worker's accepting
 * for a moment instead of spinning; existing connections keep being served.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "http/tls.h"
#include "serve/client.h"
#include "serve/connlimit.h"
#include "serve/listener.h"
#include "serve/proxy.h"
#include "serve/worker.h"

#define LISTENER_BACKLOG       4096
#define LISTENER_RETRY_MS      100

static int
listener_socket(const struct sockaddr_storage *addr, socklen_t len)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;

    if (fd < 0) {
        return -1;
    }
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0
        || setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0
        || bind(fd, (const struct sockaddr *)addr, len) != 0
        || listen(fd, LISTENER_BACKLOG) != 0) {
        int saved = errno;

        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int
lg_listener_open(struct lg_gateway *gw, struct sockaddr_storage *bound)
{
    const struct lg_config *conf = gw->conf;

    gw->nlisten = conf->nlisten;
    gw->listen_fds = lg_xcalloc(conf->nlisten * gw->nworkers, sizeof(int));
    for (size_t i = 0; i < conf->nlisten * gw->nworkers; i++) {
        gw->listen_fds[i] = -1;
    }
    for (size_t i = 0; i < conf->nlisten; i++) {
        struct sockaddr_storage addr = conf->listen[i].addr;
        socklen_t len = conf->listen[i].addrlen;

        for (unsigned k = 0; k < gw->nworkers; k++) {
            int fd = listener_socket(&addr, len);

            if (fd < 0) {
                char hint[256];
                int err = errno;

                LG_ERROR("cannot listen on %s: %s; %s", conf->listen[i].address, strerror(err),
                         lg_errno_hint(err, "\"listen\"", hint, sizeof(hint)));
                return LG_EIO;
            }
            if (k == 0) {
                /* port 0: the others must join the port the kernel chose */
                socklen_t alen = sizeof(addr);

                getsockname(fd, (struct sockaddr *)&addr, &alen);
                len = alen;
                bound[i] = addr;
            }
            gw->listen_fds[i * gw->nworkers + k] = fd;
        }
    }
    return LG_OK;
}

/* Fixed answers to connections we cannot take (sent before reading anything). */
static const char listener_msg_full[] =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    "Content-Length: 125\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    "{\"error\":{\"message\":\"the gateway is at its connection limit\","
    "\"type\":\"api_error\",\"param\":null,\"code\":\"too_many_connections\"}}\n";
static const char listener_msg_per_ip[] =
    "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
    "Content-Length: 145\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    "{\"error\":{\"message\":\"too many connections from this address\","
    "\"type\":\"rate_limit_error\",\"param\":null,"
    "\"code\":\"too_many_connections_from_address\"}}\n";

/* Sends a fixed refusal to a connection we cannot take, then closes it. */
static void
listener_refuse(int fd, const char *msg, size_t len)
{
    if (send(fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* best effort: the connection is going away either way */
    }
    close(fd);
}

static void
listener_on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                   void *arg)
{
    struct lg_worker *w = arg;
    const struct lg_config *conf = w->fleet->conf;
    struct ssl_st *ssl;
    bool tls_failed;
    size_t i;

    if (w->draining) {
        close(fd);
        return;
    }
    if (__atomic_load_n(&w->gw->nconnections, __ATOMIC_RELAXED) >= conf->limits.max_connections) {
        static uint64_t last;

        __atomic_fetch_add(&w->stats.refused, 1, __ATOMIC_RELAXED);
        if (lg_log_ratelimit(&last, 5 * LG_NS_PER_S)) {
            LG_WARN("connection limit (%u) reached: refusing new clients with 503 (raise "
                    "limits.max_connections if they are legitimate; llmgate_connections shows "
                    "how many are open)",
                    conf->limits.max_connections);
        }
        listener_refuse(fd, listener_msg_full, sizeof(listener_msg_full) - 1);
        return;
    }
    if (!lg_connlimit_acquire(w->gw->connlimit, sa, conf->limits.max_connections_per_ip)) {
        static uint64_t last_ip;

        __atomic_fetch_add(&w->stats.refused, 1, __ATOMIC_RELAXED);
        if (lg_log_ratelimit(&last_ip, 5 * LG_NS_PER_S)) {
            LG_WARN("per-address connection limit (%u) reached: refusing a client with 429 "
                    "(raise limits.max_connections_per_ip if many clients share an address, "
                    "e.g. behind a NAT or another proxy)",
                    conf->limits.max_connections_per_ip);
        }
        listener_refuse(fd, listener_msg_per_ip, sizeof(listener_msg_per_ip) - 1);
        return;
    }
    for (i = 0; i < w->nlisteners && w->listeners[i] != l; i++) {
    }
    ssl = lg_tls_accept_ssl(w->gw->tls, i, &tls_failed);
    if (tls_failed) {
        LG_WARN("cannot allocate a TLS session: dropping a client");
        lg_connlimit_release(w->gw->connlimit, sa);
        close(fd);
        return;
    }
    if (lg_client_new(w, fd, sa, salen, ssl, &lg_proxy_client_ops) != LG_OK) {
        lg_connlimit_release(w->gw->connlimit, sa);
    }
}

static void
listener_on_retry(evutil_socket_t fd, short what, void *arg)
{
    struct lg_worker *w = arg;

    (void)fd;
    (void)what;
    for (size_t i = 0; i < w->nlisteners; i++) {
        if (w->listeners[i] != NULL) {
            evconnlistener_enable(w->listeners[i]);
        }
    }
}

static void
listener_on_error(struct evconnlistener *l, void *arg)
{
    struct lg_worker *w = arg;
    int err = errno;
    static uint64_t last;
    struct timeval tv = { 0, LISTENER_RETRY_MS * 1000 };

    (void)l;
    if (lg_log_ratelimit(&last, 5 * LG_NS_PER_S)) {
        char hint[256];

        LG_WARN("accept failed: %s; pausing accepts for %d ms (open connections are served); %s",
                strerror(err), LISTENER_RETRY_MS,
                lg_errno_hint(err, "\"listen\"", hint, sizeof(hint)));
    }
    /* EMFILE, ENFILE, ENOBUFS, ENOMEM: keep serving, try again shortly */
    for (size_t i = 0; i < w->nlisteners; i++) {
        if (w->listeners[i] != NULL) {
            evconnlistener_disable(w->listeners[i]);
        }
    }
    evtimer_add(w->accept_retry, &tv);
}

int
lg_listener_attach(struct lg_worker *w)
{
    struct lg_gateway *gw = w->gw;

    w->nlisteners = gw->nlisten;
    w->listeners = lg_xcalloc(gw->nlisten ? gw->nlisten : 1, sizeof(*w->listeners));
    w->accept_retry = evtimer_new(w->base, listener_on_retry, w);
    for (size_t i = 0; i < gw->nlisten; i++) {
        int *fdp = &gw->listen_fds[i * gw->nworkers + w->id];

        w->listeners[i] = evconnlistener_new(w->base, listener_on_accept, w,
                                             LEV_OPT_CLOSE_ON_FREE, 0, *fdp);
        if (w->listeners[i] == NULL) {
            LG_ERROR("worker %u: cannot create a listener", w->id);
            return LG_ENOMEM;
        }
        *fdp = -1; /* the evconnlistener owns it now */
        evconnlistener_set_error_cb(w->listeners[i], listener_on_error);
    }
    return LG_OK;
}

void
lg_listener_close(struct lg_worker *w)
{
    for (size_t i = 0; i < w->nlisteners; i++) {
        if (w->listeners[i] != NULL) {
            evconnlistener_free(w->listeners[i]);
            w->listeners[i] = NULL;
        }
    }
    if (w->accept_retry != NULL) {
        evtimer_del(w->accept_retry);
    }
}
