/*
 * tls.h: TLS with OpenSSL 3, both ways.
 *
 * Server side: one SSL_CTX per listen entry with "tls" (TLS 1.2 or newer,
 * Mozilla "intermediate" ciphers, ALPN http/1.1 only, no session tickets),
 * rebuilt from its files by lg_tls_reload() (SIGHUP): new connections get
 * the new certificate, running ones keep the context they started with (each
 * SSL holds a reference on its SSL_CTX).
 *
 * Client side: one SSL_CTX per https backend, made on first use: the peer is
 * verified against tls.ca_file (or the system CAs) and its name (SNI and
 * verification: tls.server_name, else the URL's host); an optional client
 * certificate.
 *
 * Ownership: an SSL handed to bufferevent_openssl_socket_new() with
 * BEV_OPT_CLOSE_ON_FREE belongs to the bufferevent from then on, even when
 * that call fails: nothing here frees it afterwards.
 */
#ifndef LG_TLS_H
#define LG_TLS_H

#include "base/lg_core.h"

struct bufferevent;
struct event_base;
struct lg_backend_conf;
struct lg_config;
struct lg_tls;
struct ssl_ctx_st;
struct ssl_st;

/*
 * Builds the server contexts for every listen entry of conf that has "tls".
 * Errors (unreadable or mismatched certificate and key) are logged with the
 * file name and OpenSSL's reason; returns LG_EINVAL then.
 */
int lg_tls_new(const struct lg_config *conf, struct lg_tls **out);
void lg_tls_free(struct lg_tls *t);

/*
 * Rebuilds every server context from conf's files (the same listen entries):
 * all or nothing; on any error the old contexts stay and LG_EINVAL is
 * returned (logged). Any thread.
 */
int lg_tls_reload(struct lg_tls *t, const struct lg_config *conf);

/*
 * A new server-side SSL for a connection accepted on listen entry i, or NULL
 * when that entry is plain TCP (or on allocation failure: *failed set).
 * Any thread.
 */
struct ssl_st *lg_tls_accept_ssl(struct lg_tls *t, size_t i, bool *failed);

/*
 * Wraps an accepted socket and its SSL in a bufferevent (server handshake
 * pending). Takes ownership of ssl (and, through it, of fd) whatever happens.
 */
struct bufferevent *lg_tls_accept_bev(struct event_base *base, int fd, struct ssl_st *ssl,
                                      int options);

/*
 * Prepares the client context of backend bc in *ctx, the backend's slot
 * (struct lg_backend's tls_ctx), if it has none yet (https only): read and
 * set atomically, so that workers may race to make it (one wins). Returns
 * LG_OK, or LG_EINVAL (logged) when its files cannot be used. Any thread.
 */
int lg_tls_client_prepare(const struct lg_backend_conf *bc, struct ssl_ctx_st **ctx);

/* Frees what lg_tls_client_prepare() made in *ctx (with the backend). */
void lg_tls_client_release(struct ssl_ctx_st **ctx);

/*
 * A bufferevent for a new TLS connection to backend bc (client context in
 * *ctx, prepared here if need be), not yet connected
 * (bufferevent_socket_connect() starts TCP, then the handshake runs;
 * BEV_EVENT_CONNECTED means both are done). NULL on failure (logged).
 */
struct bufferevent *lg_tls_connect_bev(struct event_base *base, const struct lg_backend_conf *bc,
                                       struct ssl_ctx_st **ctx, int options);

/*
 * After a connection to backend b failed: if TLS was the reason (bad
 * certificate, wrong name, protocol error), writes a human reason into why
 * and returns true. Clears OpenSSL's error queue of this thread.
 */
bool lg_tls_failed(struct bufferevent *bev, char *why, size_t whylen);

#endif /* LG_TLS_H */
