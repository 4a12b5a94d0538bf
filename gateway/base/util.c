/*
 * util.c: allocation wrappers that abort on failure, rc names, address
 * formatting, what to do about common errno values (the small string
 * helpers are inline in lg_core.h). Owns nothing.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/lg_core.h"

const char *
lg_rc_str(int rc)
{
    switch (rc) {
    case LG_OK:
        return "OK";
    case LG_ERR:
        return "ERR";
    case LG_ENOMEM:
        return "ENOMEM";
    case LG_EINVAL:
        return "EINVAL";
    case LG_EPROTO:
        return "EPROTO";
    case LG_EIO:
        return "EIO";
    case LG_ETIMEDOUT:
        return "ETIMEDOUT";
    case LG_EBUSY:
        return "EBUSY";
    case LG_EAGAIN:
        return "EAGAIN";
    case LG_EDECLINED:
        return "EDECLINED";
    default:
        return "?";
    }
}

static void
util_oom(size_t n)
{
    lg_log_emit(LG_LOG_ERROR, __FILE__, __LINE__, "out of memory allocating %zu bytes", n);
    abort();
}

void *
lg_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL) {
        util_oom(n);
    }
    return p;
}

void *
lg_xcalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);

    if (p == NULL) {
        util_oom(nmemb * size);
    }
    return p;
}

void *
lg_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);

    if (q == NULL) {
        util_oom(n);
    }
    return q;
}

char *
lg_xstrdup(const char *s)
{
    return lg_xstrndup(s, strlen(s));
}

char *
lg_xstrndup(const char *s, size_t n)
{
    char *p = lg_xmalloc(n + 1);

    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void
lg_sockaddr_format(const struct sockaddr_storage *ss, char *out, size_t outlen)
{
    char ip[INET6_ADDRSTRLEN];

    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        snprintf(out, outlen, "[%s]:%u", ip, ntohs(s6->sin6_port));
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
        snprintf(out, outlen, "%s:%u", ip, ntohs(s4->sin_port));
    }
}

const char *
lg_errno_hint(int err, const char *key, char *buf, size_t len)
{
    switch (err) {
    case EADDRINUSE:
        snprintf(buf, len, "another process listens there: stop it, or choose another port in %s",
                 key);
        break;
    case EACCES:
    case EPERM:
        snprintf(buf, len,
                 "ports below 1024 need root or CAP_NET_BIND_SERVICE: grant it, or choose a "
                 "port of 1024 or more in %s",
                 key);
        break;
    case EADDRNOTAVAIL:
        snprintf(buf, len,
                 "this machine has no such address: use one of its addresses in %s, or "
                 "\"*:PORT\" for all of them",
                 key);
        break;
    case EMFILE:
    case ENFILE:
        snprintf(buf, len,
                 "out of file descriptors: raise the limit (ulimit -n, systemd's LimitNOFILE, "
                 "docker's --ulimit nofile) or lower limits.max_connections");
        break;
    default:
        snprintf(buf, len, "check %s", key);
        break;
    }
    return buf;
}
