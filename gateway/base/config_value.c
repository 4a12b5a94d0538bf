/*
 * config_value.c: the syntax of configuration values: names, header names,
 * paths, durations and sizes with their units, listen addresses and
 * backend URLs (resolved), and values quoted or formatted for messages.
 *
 * Owns nothing: parses into the caller's fields (a URL's parts are strings
 * the backend configuration owns, freed by lg_conf_url_free()).
 */
#include "base/config_value.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config_types.h"

/* ---- values in messages ------------------------------------------------- */

/* Writes s into dst for a message: control characters escaped, cut after
 * max bytes (on a character boundary), in double quotes if quote. */
const char *
lg_conf_escape(char *dst, size_t size, const char *s, size_t max, bool quote)
{
    size_t n = 0;
    size_t i;

    if (quote) {
        dst[n++] = '"';
    }
    for (i = 0; s[i] != '\0' && n + 8 < size; i++) {
        unsigned char c = (unsigned char)s[i];

        if (i >= max && (c & 0xc0) != 0x80) {
            n += (size_t)snprintf(dst + n, size - n, "...");
            break;
        }
        if (c == '\n') {
            n += (size_t)snprintf(dst + n, size - n, "\\n");
        } else if (c == '\t') {
            n += (size_t)snprintf(dst + n, size - n, "\\t");
        } else if (c < 0x20 || c == 0x7f) {
            n += (size_t)snprintf(dst + n, size - n, "\\x%02x", c);
        } else if (quote && (c == '"' || c == '\\')) {
            n += (size_t)snprintf(dst + n, size - n, "\\%c", c);
        } else {
            dst[n++] = (char)c;
        }
    }
    if (quote) {
        dst[n++] = '"';
    }
    dst[n] = '\0';
    return dst;
}

const char *
lg_conf_quote(char *dst, size_t size, const char *s)
{
    return lg_conf_escape(dst, size, s, CONF_QUOTE_MAX, true);
}

const char *
lg_conf_fmt_duration(char *dst, size_t size, uint64_t ms)
{
    if (ms == 0) {
        snprintf(dst, size, "0");
    } else if (ms % 3600000 == 0) {
        snprintf(dst, size, "%" PRIu64 "h", ms / 3600000);
    } else if (ms % 60000 == 0) {
        snprintf(dst, size, "%" PRIu64 "m", ms / 60000);
    } else if (ms % 1000 == 0) {
        snprintf(dst, size, "%" PRIu64 "s", ms / 1000);
    } else {
        snprintf(dst, size, "%" PRIu64 "ms", ms);
    }
    return dst;
}

const char *
lg_conf_fmt_size(char *dst, size_t size, uint64_t n)
{
    if (n >= (1u << 30) && n % (1u << 30) == 0) {
        snprintf(dst, size, "%" PRIu64 "GiB", n >> 30);
    } else if (n >= (1u << 20) && n % (1u << 20) == 0) {
        snprintf(dst, size, "%" PRIu64 "MiB", n >> 20);
    } else if (n >= (1u << 10) && n % (1u << 10) == 0) {
        snprintf(dst, size, "%" PRIu64 "KiB", n >> 10);
    } else {
        snprintf(dst, size, "%" PRIu64, n);
    }
    return dst;
}

/* ---- string checks ------------------------------------------------------ */

bool
lg_conf_check_printable(const char *s, char *why, size_t whysz)
{
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p < 0x20 || *p == 0x7f) {
            snprintf(why, whysz, "control characters are not allowed");
            return false;
        }
    }
    return true;
}

bool
lg_conf_check_name(const char *s, char *why, size_t whysz)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-");
    char q[CONF_QBUF];

    if (s[n] != '\0' || n > CONF_NAME_MAX) {
        snprintf(why, whysz,
                 "names are 1 to %d letters, digits, \".\", \"_\", \":\" or \"-\" (got %s)",
                 CONF_NAME_MAX, lg_conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

/* Names discovery.c gives the backends it expands: NAME@ADDR:PORT. */
bool
lg_conf_check_expanded_name(const char *s, char *why, size_t whysz)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-@[]");
    char q[CONF_QBUF];

    if (s[n] != '\0' || n > CONF_XNAME_MAX) {
        snprintf(why, whysz, "not a discovered backend name (got %s)",
                 lg_conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

static bool conf_is_hostname(const char *s, size_t n);

bool
lg_conf_check_dns_name(const char *s, char *why, size_t whysz)
{
    char q[CONF_QBUF];

    if (!conf_is_hostname(s, strlen(s)) || s[0] == '.' || s[0] == '-') {
        snprintf(why, whysz, "expected a DNS name such as \"vllm.ns.svc.cluster.local\" (got %s)",
                 lg_conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

/* RFC 9110 section 5.6.2: a header name is a token. */
bool
lg_conf_check_header_name(const char *s, char *why, size_t whysz)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                         "!#$%&'*+-.^_`|~");
    char q[CONF_QBUF];

    if (s[n] != '\0') {
        snprintf(why, whysz, "not a valid HTTP header name (got %s)",
                 lg_conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

/* A TLS server name: a DNS name or an IP literal, as the certificate names it. */
bool
lg_conf_check_server_name(const char *s, char *why, size_t whysz)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:");
    char q[CONF_QBUF];

    if (s[n] != '\0' || n > 253) {
        snprintf(why, whysz, "not a host name (got %s)", lg_conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

bool
lg_conf_check_path(const char *s, char *why, size_t whysz)
{
    char q[CONF_QBUF];

    if (s[0] != '/' || strchr(s, ' ') != NULL) {
        snprintf(why, whysz, "must be a path starting with \"/\" without spaces (got %s)",
                 lg_conf_quote(q, sizeof(q), s));
        return false;
    }
    return true;
}

/* ---- numbers with units ------------------------------------------------- */

const struct lg_conf_unit lg_conf_duration_units[] = {
    { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 }, { NULL, 0 },
};

const struct lg_conf_unit lg_conf_size_units[] = {
    { "B", 1 },     { "KiB", 1ull << 10 }, { "MiB", 1ull << 20 }, { "GiB", 1ull << 30 },
    { "kB", 1000 }, { "MB", 1000000 },     { "GB", 1000000000 },  { NULL, 0 },
};

/*
 * Parses "<digits>[.<digits>]<unit>" into *out = number * unit. Returns 0, or
 * -1 (not that shape or unknown unit), -2 (not a whole number of the base
 * unit), -3 (overflow).
 */
int
lg_conf_parse_scaled(const char *s, const struct lg_conf_unit *units, uint64_t *out)
{
    uint64_t ip = 0;
    uint64_t fp = 0;
    uint64_t scale = 1;
    uint64_t v;
    const char *p = s;
    const struct lg_conf_unit *u;

    if (*p < '0' || *p > '9') {
        return -1;
    }
    for (; *p >= '0' && *p <= '9'; p++) {
        if (ip > UINT64_MAX / 100) {
            return -3;
        }
        ip = ip * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9') {
            return -1;
        }
        for (; *p >= '0' && *p <= '9'; p++) {
            if (scale >= 1000000000) {
                return -2; /* more than nine decimals: finer than any base unit */
            }
            fp = fp * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
    }
    for (u = units; u->name != NULL && strcmp(p, u->name) != 0; u++) {
    }
    if (u->name == NULL) {
        return -1;
    }
    if (__builtin_mul_overflow(ip, u->mult, &v)) {
        return -3;
    }
    /* fp < 1e9 and mult < 2^31 here or below, so fp * mult cannot overflow */
    if ((fp * u->mult) % scale != 0) {
        return -2;
    }
    if (__builtin_add_overflow(v, fp * u->mult / scale, &v)) {
        return -3;
    }
    *out = v;
    return 0;
}

/* ---- addresses and URLs ------------------------------------------------- */

/*
 * Resolves host (numeric first, then by name unless LG_CONFIG_F_NO_RESOLVE,
 * NULL = IPv4 any) with port into ss. Returns 0 or -1 with why set.
 */
int
lg_conf_resolve(const char *host, uint16_t port, unsigned flags, struct sockaddr_storage *ss,
                socklen_t *len, char *why, size_t whysz)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST };
    struct addrinfo *res = NULL;
    char q[CONF_QBUF];
    char serv[8];
    struct in_addr a4;
    int rc;

    memset(ss, 0, sizeof(*ss));
    if (host == NULL) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;

        sin->sin_family = AF_INET;
        sin->sin_port = htons(port);
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
        *len = sizeof(*sin);
        return 0;
    }
    if (host[strspn(host, "0123456789.")] == '\0' && inet_pton(AF_INET, host, &a4) != 1) {
        /* getaddrinfo() would take "10.1" as 10.0.0.1 (inet_aton): a typo, surely */
        snprintf(why, whysz, "invalid IPv4 address %s", lg_conf_quote(q, sizeof(q), host));
        return -1;
    }
    snprintf(serv, sizeof(serv), "%u", port);
    hints.ai_flags |= AI_NUMERICSERV;
    rc = getaddrinfo(host, serv, &hints, &res);
    if (rc == EAI_NONAME && (flags & LG_CONFIG_F_NO_RESOLVE)) {
        *len = 0;
        return 0;
    }
    if (rc == EAI_NONAME) {
        hints.ai_flags &= ~AI_NUMERICHOST;
        rc = getaddrinfo(host, serv, &hints, &res);
    }
    if (rc != 0 || res == NULL || res->ai_addrlen > sizeof(*ss)) {
        snprintf(why, whysz, "cannot resolve %s: %s", lg_conf_quote(q, sizeof(q), host),
                 rc != 0 ? gai_strerror(rc) : "no address");
        if (res != NULL) {
            freeaddrinfo(res);
        }
        return -1;
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* Host names and IPv4 literals: letters, digits, '.', '-', '_'. */
static bool
conf_is_hostname(const char *s, size_t n)
{
    return n > 0 && n <= 253
           && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") >= n;
}

/* Parses 1-5 digits into a port in [min, 65535]; -1 otherwise. */
static int
conf_parse_port(const char *s, size_t n, unsigned min)
{
    unsigned v = 0;

    if (n == 0 || n > 5) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    return v >= min && v <= 65535 ? (int)v : -1;
}

/* "host:port", "[v6]:port", ":port" or "*:port" (IPv4 any); port 0 allowed. */
int
lg_conf_address_parse(const char *s, unsigned flags, struct sockaddr_storage *ss, socklen_t *len,
                      char *why, size_t whysz)
{
    const char *colon;
    const char *hs = s;
    size_t hn;
    char q[CONF_QBUF];
    char *host = NULL;
    int port;
    int rc;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');

        if (close == NULL || close[1] != ':') {
            goto fail_shape;
        }
        hs = s + 1;
        hn = (size_t)(close - hs);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (colon == NULL) {
            goto fail_shape;
        }
        hn = (size_t)(colon - s);
        if (memchr(s, ':', hn) != NULL) {
            snprintf(why, whysz, "IPv6 addresses need brackets, e.g. \"[::1]:8080\" (got %s)",
                     lg_conf_quote(q, sizeof(q), s));
            return -1;
        }
    }
    port = conf_parse_port(colon + 1, strlen(colon + 1), 0);
    if (port < 0) {
        snprintf(why, whysz, "port must be between 0 and 65535 (got %s)",
                 lg_conf_quote(q, sizeof(q), colon + 1));
        return -1;
    }
    if (s[0] == '[') {
        struct in6_addr a6;

        host = lg_xstrndup(hs, hn);
        if (strchr(host, '%') == NULL && inet_pton(AF_INET6, host, &a6) != 1) {
            snprintf(why, whysz, "invalid IPv6 address %s", lg_conf_quote(q, sizeof(q), host));
            free(host);
            return -1;
        }
    } else if (hn > 0 && !(hn == 1 && s[0] == '*')) {
        if (!conf_is_hostname(s, hn)) {
            goto fail_shape;
        }
        host = lg_xstrndup(s, hn);
    }
    rc = lg_conf_resolve(host, (uint16_t)port, flags, ss, len, why, whysz);
    free(host);
    return rc;

fail_shape:
    snprintf(why, whysz, "expected \"host:port\", \"[v6]:port\" or \":port\" (got %s)",
             lg_conf_quote(q, sizeof(q), s));
    return -1;
}

void
lg_conf_url_free(struct lg_backend_conf *b)
{
    free(b->url);
    free(b->host);
    free(b->host_header);
    free(b->path_prefix);
    b->url = b->host = b->host_header = b->path_prefix = NULL;
}

/*
 * scheme://host[:port][/prefix] (RFC 3986 section 3) into b. No userinfo
 * (credentials go in api_key), no query or fragment: the prefix is joined
 * with every request path.
 */
int
lg_conf_url_parse(const char *s, struct lg_backend_conf *b, char *why, size_t whysz)
{
    const char *sep = strstr(s, "://");
    const char *auth;
    const char *auth_end;
    const char *hs;
    const char *pe;
    const char *path;
    char q[CONF_QBUF];
    char q2[CONF_QBUF];
    size_t hn;
    size_t plen;
    int port;
    bool v6 = false;

    if (sep == NULL) {
        snprintf(why, whysz, "expected a URL like \"http://host:port\" (got %s)",
                 lg_conf_quote(q, sizeof(q), s));
        return -1;
    }
    if ((size_t)(sep - s) == 4 && strncasecmp(s, "http", 4) == 0) {
        b->tls = false;
    } else if ((size_t)(sep - s) == 5 && strncasecmp(s, "https", 5) == 0) {
        b->tls = true;
    } else {
        char *scheme = lg_xstrndup(s, (size_t)(sep - s));

        snprintf(why, whysz, "scheme must be http or https (got %s)",
                 lg_conf_quote(q, sizeof(q), scheme));
        free(scheme);
        return -1;
    }
    auth = sep + 3;
    auth_end = auth + strcspn(auth, "/?#");
    if (memchr(auth, '@', (size_t)(auth_end - auth)) != NULL) {
        snprintf(why, whysz, "credentials in the URL are not supported; use \"api_key\"");
        return -1;
    }
    if (auth[0] == '[') {
        const char *close = memchr(auth, ']', (size_t)(auth_end - auth));
        struct in6_addr a6;
        char *h;

        if (close == NULL) {
            snprintf(why, whysz, "unterminated IPv6 address in %s", lg_conf_quote(q, sizeof(q), s));
            return -1;
        }
        hs = auth + 1;
        hn = (size_t)(close - hs);
        pe = close + 1;
        h = lg_xstrndup(hs, hn);
        v6 = inet_pton(AF_INET6, h, &a6) == 1;
        free(h);
        if (!v6 || (pe < auth_end && *pe != ':')) {
            snprintf(why, whysz, "invalid IPv6 address in %s", lg_conf_quote(q, sizeof(q), s));
            return -1;
        }
    } else {
        hs = auth;
        pe = memchr(auth, ':', (size_t)(auth_end - auth));
        pe = pe != NULL ? pe : auth_end;
        hn = (size_t)(pe - hs);
        if (hn == 0) {
            snprintf(why, whysz, "missing host in %s", lg_conf_quote(q, sizeof(q), s));
            return -1;
        }
        if (!conf_is_hostname(hs, hn)) {
            char *h = lg_xstrndup(hs, hn);

            snprintf(why, whysz, "invalid host %s in %s", lg_conf_quote(q, sizeof(q), h),
                     lg_conf_quote(q2, sizeof(q2), s));
            free(h);
            return -1;
        }
    }
    if (pe < auth_end) {
        char *ps = lg_xstrndup(pe + 1, (size_t)(auth_end - pe - 1));

        port = conf_parse_port(ps, strlen(ps), 1);
        if (port < 0) {
            snprintf(why, whysz, "port must be between 1 and 65535 (got %s)",
                     lg_conf_quote(q, sizeof(q), ps));
        }
        free(ps);
        if (port < 0) {
            return -1;
        }
    } else {
        port = b->tls ? 443 : 80;
    }
    path = auth_end;
    if (strpbrk(path, "?#") != NULL) {
        snprintf(why, whysz, "a backend URL takes no query or fragment (got %s)",
                 lg_conf_quote(q, sizeof(q), s));
        return -1;
    }
    if (strchr(path, ' ') != NULL) {
        snprintf(why, whysz, "spaces are not allowed in a URL (got %s)",
                 lg_conf_quote(q, sizeof(q), s));
        return -1;
    }
    for (plen = strlen(path); plen > 0 && path[plen - 1] == '/'; plen--) {
    }
    b->url = lg_xstrdup(s);
    b->host = lg_xstrndup(hs, hn);
    b->port = (uint16_t)port;
    b->path_prefix = lg_xstrndup(path, plen);
    if (port == (b->tls ? 443 : 80)) {
        b->host_header = lg_xmalloc(hn + 3);
        snprintf(b->host_header, hn + 3, v6 ? "[%s]" : "%s", b->host);
    } else {
        b->host_header = lg_xmalloc(hn + 9);
        snprintf(b->host_header, hn + 9, v6 ? "[%s]:%d" : "%s:%d", b->host, port);
    }
    return 0;
}
