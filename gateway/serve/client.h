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

#include <sys/queue.h>
#include <sys/socket.h>

#include <llhttp.h>

#include "base/lg_core.h"
#include "serve/request.h"
#include "serve/worker.h"

struct bufferevent;
struct evbuffer;
struct lg_client;
struct lg_config;
struct lg_worker;
struct ssl_st;

/*
 * What the connection calls in the layer above it, on its request's behalf
 * (proxy.c's lg_proxy_client_ops, which the listener hands to every client).
 */
struct lg_client_ops {
    /* The request is read whole (head and body, within the limits): answer it. */
    void (*dispatch)(struct lg_client *c);
    /* End what the request runs now: its upstream connection closes (the
     * engine stops), its backend is released. Safe when nothing runs. */
    void (*abort)(struct lg_client *c, const char *why);
    /* The request is over (its log line written): free what it holds above. */
    void (*release)(struct lg_client *c);
    /* The output fell below the low watermark while a response is relayed. */
    void (*drained)(struct lg_client *c);
};

enum lg_client_state {
    LG_CLIENT_ST_READ_HEAD = 0, /* idle keep-alive or reading a request head */
    LG_CLIENT_ST_READ_BODY,     /* reading the request body */
    LG_CLIENT_ST_CONNECT,       /* waiting for an upstream connection */
    LG_CLIENT_ST_WAIT_HEAD,     /* request going upstream; waiting for the response head */
    LG_CLIENT_ST_RELAY,         /* response streaming to the client */
    LG_CLIENT_ST_FLUSH,         /* last response being written, then close */
    LG_CLIENT_ST_LINGER,        /* response out, write side shut: dropping input, then close */
    LG_CLIENT_ST_CLOSING,       /* queued for reaping; callbacks detached */
};

struct lg_client {
    uint64_t id;
    struct lg_worker *w;            /* borrowed: the owning worker */
    const struct lg_client_ops *ops; /* static: the exchange above */
    struct bufferevent *bev;        /* owned */
    enum lg_client_state state;
    const char *action;             /* for LG_CONN_LOG */
    llhttp_t parser;
    struct sockaddr_storage addr;
    char addr_str[64];              /* client IP as text */
    bool tls;                       /* the connection is HTTPS */
    bool linger;                    /* unread request bytes may follow the last response */
    uint64_t linger_until_ns;       /* LINGER: closed at this time at the latest */
    uint32_t requests;              /* requests served on this connection */
    uint64_t pass_body;             /* body bytes seen by on_body in the current parse pass */
    uint64_t read_tmo_want;         /* client_parse(): read timeout once it stops (ms) */
    uint64_t read_tmo_ms;           /* the read timeout set on bev (ms, 0 = none) */
    uint64_t write_tmo_ms;          /* the write timeout set on bev */
    uint64_t read_armed_ns;         /* when the read timeout was last armed by us */
    struct lg_request req;
    TAILQ_ENTRY(lg_client) link;    /* worker's clients list */
    struct lg_reap reap;            /* the worker frees it (lg_client_close) */
};

#define LG_CONN_LOG(level, c, fmt, ...)                                             \
    LG_LOG(level, "conn=%" PRIu64 " while %s: " fmt, (c)->id, (c)->action, ##__VA_ARGS__)

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

/* The response was relayed completely: log, then serve the next request or close. */
void lg_client_finish(struct lg_client *c);

/* The write timeout (ms, 0 = none) while a stream is relayed; the read timeout stays. */
void lg_client_set_write_timeout(struct lg_client *c, uint64_t ms);

/*
 * A failure after response bytes reached the client: the connection is closed
 * without a clean end of message so the client sees a cut, and the log says why.
 */
void lg_client_cut(struct lg_client *c, const char *why);

/* Closes the connection at once (deferred free). */
void lg_client_close(struct lg_client *c, const char *why);

void lg_client_set_state(struct lg_client *c, enum lg_client_state to);

/* The worker is draining: close if idle, else close after the current response. */
void lg_client_drain(struct lg_client *c);

/*
 * Has client_on_write() run when the client's output drains (a paused
 * relay resumes; a flushing connection closes). Entering FLUSH does it; a
 * connection has no write callback otherwise.
 */
void lg_client_watch_drain(struct lg_client *c);

/* Queues bytes on the client connection, counting them as response bytes. */
void lg_client_write_buffer(struct lg_client *c, struct evbuffer *src, size_t n);

#endif /* LG_CLIENT_H */
