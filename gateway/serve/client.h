/*
 * client.h: one client connection and the request it is serving.
 *
 * HTTP/1.1 with keep-alive, one request at a time (pipelined requests wait
 * in the input buffer). The request's life, from first byte to access-log
 * line, is the state machine below; the exchange (proxy.c) drives the
 * states that involve a backend, through struct lg_client_ops. Every
 * request ends in the one exit here: lg_client_fail(), lg_client_finish()
 * or lg_client_cut() (or the connection closing).
 */
#ifndef LG_CLIENT_H
#define LG_CLIENT_H

#include <sys/socket.h>

#include <event2/util.h>

#include "base/lg_core.h"
#include "serve/client_types.h"

struct evbuffer;
struct lg_config;
struct lg_worker;
struct ssl_st;

/*
 * Accepts fd on worker w (takes ownership of fd, and of ssl: when not NULL
 * the connection speaks TLS and its handshake starts now); its requests go
 * to ops.
 */
int lg_client_new(struct lg_worker *w, int fd, const struct sockaddr *sa, int salen,
                  struct ssl_st *ssl, const struct lg_client_ops *ops);

/* The configuration the request runs under: its fleet's, else the worker's. */
const struct lg_config *lg_client_conf(const struct lg_client *c);

/*
 * Writes a complete response of the gateway's own with a JSON body (moved
 * from `body`); extra_headers: whole lines, or NULL. The request still
 * ends in lg_client_finish() (or _fail()).
 */
void lg_client_respond(struct lg_client *c, int status, struct evbuffer *body,
                       const char *extra_headers);

/*
 * The one exit for a request that fails before any response byte reached the
 * client: writes the status with an OpenAI-style error body, logs the request
 * and moves on (keep-alive or close). `code` is a short machine-readable code.
 */
void lg_client_fail(struct lg_client *c, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The same, naming the request-body field at fault in the error's "param" (static string). */
void lg_client_fail_param(struct lg_client *c, int status, const char *code, const char *param,
                          const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The response was relayed completely: log, then serve the next request or close. */
void lg_client_finish(struct lg_client *c);

/* The write timeout (ms, 0 = none) while a stream is relayed; the read timeout stays. */
void lg_client_set_write_timeout(struct lg_client *c, uint64_t ms);

/*
 * A failure after response bytes reached the client: the connection is closed
 * without a clean end of message so the client sees a cut, and the log says why.
 */
void lg_client_cut(struct lg_client *c, enum lg_fail why);

/* Closes the connection at once (deferred free). */
void lg_client_close(struct lg_client *c, const char *why);

void lg_client_set_state(struct lg_client *c, enum lg_client_state to);

/* The worker is draining: close if idle, else close after the current response. */
void lg_client_drain(struct lg_client *c);

/*
 * The worker's park timer (w->park_ev, arg w): keep-alive clients idle for a
 * while give back their request's memory until their next request.
 */
void lg_client_on_park(evutil_socket_t fd, short what, void *arg);

/*
 * Has client_on_write() run when the client's output drains (a paused
 * relay resumes; a flushing connection closes). Entering FLUSH does it; a
 * connection has no write callback otherwise.
 */
void lg_client_watch_drain(struct lg_client *c);

/* Queues bytes on the client connection, counting them as response bytes. */
void lg_client_write_buffer(struct lg_client *c, struct evbuffer *src, size_t n);

#endif /* LG_CLIENT_H */
