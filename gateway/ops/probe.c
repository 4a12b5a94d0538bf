/*
 * probe.c: `llmgate --probe` (see probe.h). A short-lived process: blocking
 * sockets with deadlines, messages on stderr.
 * Owns: one socket for the length of a call.
 */
#include "ops/probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/config.h"

#define PROBE_MAX_URL 2048

/* Waits until fd is ready for `events` or the deadline passed. */
static bool
probe_wait(int fd, short events, uint64_t deadline_ns)
{
    struct pollfd p = { .fd = fd, .events = events };
    uint64_t now = lg_now_ns();

    if (now >= deadline_ns) {
        return false;
    }
    return poll(&p, 1, (int)((deadline_ns - now) / LG_NS_PER_MS) + 1) == 1;
}

/* One GET of `path` at addr; returns the status, or -1 (reported). */
static int
probe_get(const struct sockaddr_storage *addr, socklen_t len, const char *host, const char *path,
          uint64_t timeout_ms)
{
    uint64_t deadline = lg_now_ns() + timeout_ms * LG_NS_PER_MS;
    char buf[512];
    size_t got = 0;
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int n;
    int status = -1;
    int err = 0;
    socklen_t elen = sizeof(err);

    if (fd < 0) {
        fprintf(stderr, "llmgate --probe: socket: %s\n", strerror(errno));
        return -1;
    }
    if (connect(fd, (const struct sockaddr *)addr, len) != 0 && errno != EINPROGRESS) {
        err = errno;
    } else if (!probe_wait(fd, POLLOUT, deadline)) {
        err = ETIMEDOUT;
    } else {
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
    }
    if (err != 0) {
        fprintf(stderr, "llmgate --probe: connect to %s: %s\n", host, strerror(err));
        goto out_close;
    }
    n = snprintf(buf, sizeof(buf),
                 "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: llmgate-probe\r\n"
                 "Connection: close\r\n\r\n",
                 path, host);
    if (n < 0 || (size_t)n >= sizeof(buf) || send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n) {
        fprintf(stderr, "llmgate --probe: cannot send the request to %s\n", host);
        goto out_close;
    }
    /* the status line is all we need */
    while (got < sizeof(buf) - 1 && memchr(buf, '\n', got) == NULL) {
        ssize_t r;

        if (!probe_wait(fd, POLLIN, deadline)) {
            fprintf(stderr, "llmgate --probe: %s: no answer within %" PRIu64 " ms\n", host,
                    timeout_ms);
            goto out_close;
        }
        r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (r <= 0) {
            break;
        }
        got += (size_t)r;
    }
    buf[got] = '\0';
    if (sscanf(buf, "HTTP/1.%*1d %3d", &status) != 1) {
        fprintf(stderr, "llmgate --probe: %s: not an HTTP answer\n", host);
        status = -1;
    }

out_close:
    close(fd);
    return status;
}

static int
probe_report(const char *what, int status)
{
    if (status >= 200 && status < 300) {
        printf("%s: %d\n", what, status);
        return LG_OK;
    }
    if (status > 0) {
        fprintf(stderr, "llmgate --probe: %s: status %d\n", what, status);
    }
    return LG_ERR;
}

int
lg_probe_url(const char *url, uint64_t timeout_ms)
{
    struct sockaddr_storage addr;
    socklen_t len;
    char hostport[PROBE_MAX_URL];
    const char *auth;
    const char *path;
    size_t n;

    if (strncasecmp(url, "http://", 7) != 0 || strlen(url) >= PROBE_MAX_URL) {
        fprintf(stderr, "llmgate --probe: expected http://HOST:PORT/PATH (got \"%s\")\n", url);
        return LG_EINVAL;
    }
    auth = url + 7;
    path = strchr(auth, '/');
    n = path != NULL ? (size_t)(path - auth) : strlen(auth);
    memcpy(hostport, auth, n);
    hostport[n] = '\0';
    if (strchr(hostport, ':') == NULL || hostport[n - 1] == ']') {
        snprintf(hostport + n, sizeof(hostport) - n, ":80");
    }
    if (lg_config_parse_address(hostport, &addr, &len) != LG_OK) {
        fprintf(stderr, "llmgate --probe: cannot resolve \"%s\"\n", hostport);
        return LG_EINVAL;
    }
    return probe_report(url, probe_get(&addr, len, hostport, path ? path : "/", timeout_ms));
}

/* A wildcard address is reached through the loopback of its family. */
static void
probe_loopback(struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

        if (s4->sin_addr.s_addr == htonl(INADDR_ANY)) {
            s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        }
    } else if (ss->ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

        if (IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr)) {
            s6->sin6_addr = in6addr_loopback;
        }
    }
}

int
lg_probe_config(const struct lg_config *conf, uint64_t timeout_ms)
{
    for (size_t i = 0; i < conf->nlisten; i++) {
        const struct lg_listen_conf *l = &conf->listen[i];
        struct sockaddr_storage addr = l->addr;
        char what[300];

        if (l->tls_cert != NULL || l->addrlen == 0) {
            continue;
        }
        probe_loopback(&addr);
        snprintf(what, sizeof(what), "http://%s/healthz", l->address);
        return probe_report(what, probe_get(&addr, l->addrlen, l->address, "/healthz", timeout_ms));
    }
    fprintf(stderr, "llmgate --probe: %s has no plain-HTTP listen address; use --probe=URL\n",
            conf->path);
    return LG_EINVAL;
}

int
lg_probe_config_file(const char *path, uint64_t timeout_ms)
{
    struct lg_config_errors errs = { 0 };
    struct lg_config *conf = NULL;
    char *text = lg_xmalloc(LG_CONFIG_MAX_BYTES + 1);
    FILE *f = fopen(path, "rb");
    size_t n = 0;
    int rc;

    if (f == NULL) {
        fprintf(stderr, "llmgate --probe: cannot read %s: %s\n", path, strerror(errno));
        free(text);
        return LG_EIO;
    }
    n = fread(text, 1, LG_CONFIG_MAX_BYTES + 1, f);
    fclose(f);
    /* the probe needs the listen addresses only: backend names are not looked up */
    rc = lg_config_load_buffer_flags(text, n, path, LG_CONFIG_F_NO_RESOLVE, &conf, &errs);
    free(text);
    if (rc != LG_OK) {
        lg_config_errors_print(&errs, stderr);
        lg_config_errors_free(&errs);
        return rc;
    }
    rc = lg_probe_config(conf, timeout_ms);
    lg_config_unref(conf);
    return rc;
}
