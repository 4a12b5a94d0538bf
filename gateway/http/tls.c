/*
 * tls.c: OpenSSL contexts for clients (server side) and backends (client
 * side); see tls.h.
 *
 * Owns: struct lg_tls and its server SSL_CTXs (one reference each; every SSL
 * made from one holds another), each https backend's client SSL_CTX (stored
 * in the backend's slot, freed with it). Borrows: the configuration while building.
 * Invariant: srv[i].ctx is only read or swapped under t->lock.
 */
#include "http/tls.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "base/config.h"

/* Mozilla "intermediate" (TLS 1.2 suites; TLS 1.3 keeps OpenSSL's defaults). */
#define TLS_CIPHERS                                                                            \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:" \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"   \
    "DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305"
#define TLS_GROUPS "X25519:P-256:P-384"

static const unsigned char tls_alpn_h11[] = "\x08http/1.1";

struct tls_server {
    SSL_CTX *ctx; /* one reference; NULL: plain TCP */
};

struct lg_tls {
    pthread_mutex_t lock;
    size_t n;
    struct tls_server *srv; /* [n]: one per listen entry */
};

/* Appends OpenSSL's queued errors (and empties the queue) to buf. */
static const char *
tls_errstr(char *buf, size_t len)
{
    unsigned long e;
    size_t off = 0;

    buf[0] = '\0';
    while ((e = ERR_get_error()) != 0) {
        char one[256];

        ERR_error_string_n(e, one, sizeof(one));
        if (off + 3 < len) {
            off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? "; " : "", one);
        }
    }
    if (off == 0) {
        snprintf(buf, len, "unknown OpenSSL error");
    }
    return buf;
}

static bool
tls_common(SSL_CTX *ctx)
{
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    /* idle connections keep no read/write buffers */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1
           && SSL_CTX_set_cipher_list(ctx, TLS_CIPHERS) == 1
           && SSL_CTX_set1_groups_list(ctx, TLS_GROUPS) == 1;
}

/* ALPN: only HTTP/1.1 is spoken; a client that offers only h2 is refused (RFC 7301 3.2). */
static int
tls_alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                unsigned int inlen, void *arg)
{
    unsigned char *sel = NULL;

    (void)ssl;
    (void)arg;
    if (SSL_select_next_proto(&sel, outlen, tls_alpn_h11, sizeof(tls_alpn_h11) - 1, in, inlen)
        != OPENSSL_NPN_NEGOTIATED) {
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static SSL_CTX *
tls_server_ctx(const struct lg_listen_conf *lc)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    char err[1024];

    if (ctx == NULL) {
        LG_ERROR("listen %s: cannot create a TLS context: %s", lc->address,
                 tls_errstr(err, sizeof(err)));
        return NULL;
    }
    if (!tls_common(ctx)) {
        LG_ERROR("listen %s: cannot set TLS versions or ciphers: %s", lc->address,
                 tls_errstr(err, sizeof(err)));
        goto fail_free_ctx;
    }
    /* no session tickets: no ticket key to rotate; TLS 1.2 sessions resume by id */
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_dh_auto(ctx, 1);
    SSL_CTX_set_alpn_select_cb(ctx, tls_alpn_select, NULL);
    if (SSL_CTX_use_certificate_chain_file(ctx, lc->tls_cert) != 1) {
        LG_ERROR("listen %s: cannot use the certificate %s: %s; tls.cert must be a PEM "
                 "certificate chain, the server's certificate first",
                 lc->address, lc->tls_cert, tls_errstr(err, sizeof(err)));
        goto fail_free_ctx;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, lc->tls_key, SSL_FILETYPE_PEM) != 1) {
        LG_ERROR("listen %s: cannot use the private key %s: %s; tls.key must be an unencrypted "
                 "PEM private key",
                 lc->address, lc->tls_key, tls_errstr(err, sizeof(err)));
        goto fail_free_ctx;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        LG_ERROR("listen %s: the key %s does not match the certificate %s: %s; give the key "
                 "the certificate was made for",
                 lc->address, lc->tls_key, lc->tls_cert, tls_errstr(err, sizeof(err)));
        goto fail_free_ctx;
    }
    return ctx;

fail_free_ctx:
    SSL_CTX_free(ctx);
    return NULL;
}

/* Builds a context for each TLS listen entry into srv[]; all or nothing. */
static int
tls_build(const struct lg_config *conf, struct tls_server *srv)
{
    for (size_t i = 0; i < conf->nlisten; i++) {
        srv[i].ctx = NULL;
        if (conf->listen[i].tls_cert == NULL) {
            continue;
        }
        srv[i].ctx = tls_server_ctx(&conf->listen[i]);
        if (srv[i].ctx == NULL) {
            for (size_t k = 0; k < i; k++) {
                SSL_CTX_free(srv[k].ctx);
                srv[k].ctx = NULL;
            }
            return LG_EINVAL;
        }
    }
    return LG_OK;
}

int
lg_tls_new(const struct lg_config *conf, struct lg_tls **out)
{
    struct lg_tls *t = lg_xcalloc(1, sizeof(*t));

    t->n = conf->nlisten;
    t->srv = lg_xcalloc(t->n ? t->n : 1, sizeof(*t->srv));
    if (tls_build(conf, t->srv) != LG_OK) {
        free(t->srv);
        free(t);
        return LG_EINVAL;
    }
    pthread_mutex_init(&t->lock, NULL);
    *out = t;
    return LG_OK;
}

void
lg_tls_free(struct lg_tls *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        SSL_CTX_free(t->srv[i].ctx);
    }
    pthread_mutex_destroy(&t->lock);
    free(t->srv);
    free(t);
}

int
lg_tls_reload(struct lg_tls *t, const struct lg_config *conf)
{
    struct tls_server *fresh;
    size_t reloaded = 0;

    if (conf->nlisten != t->n) {
        LG_ERROR("TLS reload: the listen addresses changed; restart to apply");
        return LG_EINVAL;
    }
    fresh = lg_xcalloc(t->n ? t->n : 1, sizeof(*fresh));
    if (tls_build(conf, fresh) != LG_OK) {
        free(fresh);
        LG_ERROR("TLS reload failed: keeping the certificates in use; fix the files named "
                 "above and reload again");
        return LG_EINVAL;
    }
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        SSL_CTX *old = t->srv[i].ctx;

        t->srv[i].ctx = fresh[i].ctx;
        fresh[i].ctx = old; /* freed below, outside the lock */
        reloaded += t->srv[i].ctx != NULL;
    }
    pthread_mutex_unlock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        SSL_CTX_free(fresh[i].ctx); /* connections using it keep their own reference */
    }
    free(fresh);
    LG_INFO("TLS: reloaded the certificates of %zu listen address%s", reloaded,
            reloaded == 1 ? "" : "es");
    return LG_OK;
}

struct ssl_st *
lg_tls_accept_ssl(struct lg_tls *t, size_t i, bool *failed)
{
    SSL *ssl = NULL;

    *failed = false;
    if (t == NULL || i >= t->n) {
        return NULL;
    }
    pthread_mutex_lock(&t->lock);
    if (t->srv[i].ctx != NULL) {
        ssl = SSL_new(t->srv[i].ctx);
        *failed = ssl == NULL;
    }
    pthread_mutex_unlock(&t->lock);
    if (*failed) {
        ERR_clear_error();
    }
    return ssl;
}

struct bufferevent *
lg_tls_accept_bev(struct event_base *base, int fd, struct ssl_st *ssl, int options)
{
    return bufferevent_openssl_socket_new(base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, options);
}

/* ---- backends ----------------------------------------------------------- */

static SSL_CTX *
tls_client_ctx(const struct lg_backend_conf *bc)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    char err[1024];

    if (ctx == NULL) {
        LG_ERROR("backend %s: cannot create a TLS context: %s", bc->name,
                 tls_errstr(err, sizeof(err)));
        return NULL;
    }
    if (!tls_common(ctx)
        || SSL_CTX_set_alpn_protos(ctx, tls_alpn_h11, sizeof(tls_alpn_h11) - 1) != 0) {
        LG_ERROR("backend %s: cannot set TLS versions, ciphers or ALPN: %s", bc->name,
                 tls_errstr(err, sizeof(err)));
        goto fail_free_ctx;
    }
    if (bc->tls_insecure) {
        LG_WARN("backend %s: tls.insecure_skip_verify: its certificate is not checked", bc->name);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        if (bc->tls_ca_file != NULL ? SSL_CTX_load_verify_locations(ctx, bc->tls_ca_file, NULL) != 1
                                    : SSL_CTX_set_default_verify_paths(ctx) != 1) {
            LG_ERROR("backend %s: cannot load the CA certificates %s: %s; tls.ca_file must hold "
                     "PEM certificates (or install the ca-certificates package for the system's)",
                     bc->name, bc->tls_ca_file ? bc->tls_ca_file : "(system default)",
                     tls_errstr(err, sizeof(err)));
            goto fail_free_ctx;
        }
    }
    if (bc->tls_cert != NULL
        && (SSL_CTX_use_certificate_chain_file(ctx, bc->tls_cert) != 1
            || SSL_CTX_use_PrivateKey_file(ctx, bc->tls_key, SSL_FILETYPE_PEM) != 1
            || SSL_CTX_check_private_key(ctx) != 1)) {
        LG_ERROR("backend %s: cannot use the client certificate %s with key %s: %s; tls.cert "
                 "and tls.key must be a PEM chain and the unencrypted PEM key made for it",
                 bc->name, bc->tls_cert, bc->tls_key, tls_errstr(err, sizeof(err)));
        goto fail_free_ctx;
    }
    return ctx;

fail_free_ctx:
    SSL_CTX_free(ctx);
    return NULL;
}

int
lg_tls_client_prepare(const struct lg_backend_conf *bc, SSL_CTX **slot)
{
    SSL_CTX *ctx, *none = NULL;

    if (!bc->tls || __atomic_load_n(slot, __ATOMIC_ACQUIRE) != NULL) {
        return LG_OK;
    }
    ctx = tls_client_ctx(bc);
    if (ctx == NULL) {
        return LG_EINVAL;
    }
    if (!__atomic_compare_exchange_n(slot, &none, ctx, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        SSL_CTX_free(ctx); /* another worker was first */
    }
    return LG_OK;
}

void
lg_tls_client_release(SSL_CTX **slot)
{
    SSL_CTX_free(*slot);
    *slot = NULL;
}

static bool
tls_is_ip(const char *s)
{
    unsigned char buf[16];

    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

struct bufferevent *
lg_tls_connect_bev(struct event_base *base, const struct lg_backend_conf *bc, SSL_CTX **slot,
                   int options)
{
    const char *name = bc->tls_server_name ? bc->tls_server_name : bc->host;
    SSL_CTX *ctx;
    SSL *ssl;
    bool ok = true;
    char err[512];

    if (lg_tls_client_prepare(bc, slot) != LG_OK) {
        return NULL;
    }
    ctx = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    ssl = SSL_new(ctx);
    if (ssl == NULL) {
        LG_WARN("backend %s: SSL_new: %s", bc->name, tls_errstr(err, sizeof(err)));
        return NULL;
    }
    if (tls_is_ip(name)) {
        /* RFC 6066 section 3: no SNI for an address; verify the address instead */
        ok = bc->tls_insecure || X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
    } else {
        char sni[256]; /* the macro takes a non-const pointer */

        snprintf(sni, sizeof(sni), "%s", name);
        ok = SSL_set_tlsext_host_name(ssl, sni) == 1;
        if (ok && !bc->tls_insecure) {
            SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
            ok = SSL_set1_host(ssl, name) == 1;
        }
    }
    if (!ok) {
        LG_WARN("backend %s: cannot set the TLS name %s: %s", bc->name, name,
                tls_errstr(err, sizeof(err)));
        SSL_free(ssl);
        return NULL;
    }
    /* ssl belongs to the bufferevent from here on, even if this fails */
    return bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, options);
}

bool
lg_tls_failed(struct bufferevent *bev, char *why, size_t whylen)
{
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    unsigned long e, first = 0;
    long verify;

    if (ssl == NULL) {
        return false;
    }
    while ((e = bufferevent_get_openssl_error(bev)) != 0) {
        if (first == 0) {
            first = e;
        }
    }
    ERR_clear_error();
    verify = SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
        snprintf(why, whylen, "certificate verification failed: %s",
                 X509_verify_cert_error_string(verify));
        return true;
    }
    if (first != 0) {
        char one[256];

        ERR_error_string_n(first, one, sizeof(one));
        snprintf(why, whylen, "TLS handshake failed: %s", one);
        return true;
    }
    return false;
}
