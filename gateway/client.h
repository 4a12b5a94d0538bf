/*
 * client.h: one client connection and the request it is serving.
 *
 * HTTP/1.1 with keep-alive, one request at a time (pipelined requests wait
 * in the input buffer). The request's life, from first byte to access-log
 * line, is the state machine below; proxy.c drives the states that involve
 * a backend.
 */
#ifndef LG_CLIENT_H
#define LG_CLIENT_H

#include <sys/queue.h>
#include <sys/socket.h>

#include <llhttp.h>

#include "headcheck.h"
#include "httphdr.h"
#include "keys.h"
#include "lg_core.h"
#include "openai.h"
#include "router.h"
#include "sse.h"

struct bufferevent;
struct evbuffer;
struct event;
struct lg_worker;
struct lg_upconn;
struct lg_fleet;
struct ssl_st;
struct lg_admission_waiter;

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

/* Request flags */
#define LG_REQ_F_KEEPALIVE   (1u << 0) /* client allows keep-alive */
#define LG_REQ_F_CHUNKED     (1u << 1) /* request body is chunked */
#define LG_REQ_F_COMPLETE    (1u << 2) /* whole request read */
#define LG_REQ_F_STARTED     (1u << 3) /* response bytes reached the client output */
#define LG_REQ_F_SSE         (1u << 4) /* response is text/event-stream */
#define LG_REQ_F_UP_CHUNKED  (1u << 5) /* upstream response is chunked */
#define LG_REQ_F_UP_EOF      (1u << 6) /* upstream response ends at close */
#define LG_REQ_F_CLOSE       (1u << 7) /* close the client after this response */
#define LG_REQ_F_LOGGED      (1u << 8) /* access-log line written */
#define LG_REQ_F_PROXIED     (1u << 9) /* dispatched to a backend at least once */
#define LG_REQ_F_PAUSED_UP   (1u << 10) /* upstream reading paused: client output full */
#define LG_REQ_F_DECHUNK     (1u << 11) /* HTTP/1.0 client: relay decoded body bytes */
#define LG_REQ_F_ENCHUNK     (1u << 12) /* close-delimited upstream body re-framed as chunks */
#define LG_REQ_F_TOKEN_WAIT  (1u << 13) /* counted in the backend's awaiting-first-token */
#define LG_REQ_F_PROBE       (1u << 14) /* the attempt holds the backend's half-open probe */
#define LG_REQ_F_AGED        (1u << 15) /* counted in the backend's in-flight ages */
#define LG_REQ_F_RELAY_TMO   (1u << 16) /* relay timeouts still to set (proxy_on_up_read) */
#define LG_REQ_F_END_SLOT    (1u << 17) /* its predicted end is in the backend's ends[] */
#define LG_REQ_F_SEQ         (1u << 18) /* followed in the backend's seqs[] (engine model) */

struct lg_request {
    uint32_t flags;
    uint8_t method;               /* llhttp_method_t */
    uint8_t http_minor;
    char id[72];                  /* X-Request-Id (client's if sane, else generated) */
    struct lg_hdrs hdrs;          /* request head */
    struct evbuffer *body;        /* owned; request body as received */
    uint64_t body_bytes;
    uint64_t head_bytes;
    int reject_status;            /* set by a parser callback that refuses the request */
    const char *reject_code;
    struct lg_openai_req info;    /* from the body */
    struct lg_route_req route;
    struct lg_route_result pick;  /* last routing decision */
    struct lg_headcheck headcheck; /* raw-head checks across reads (headcheck.c) */
    struct lg_key_hold auth;      /* the API key it counts against (keys.c) */
    struct lg_admission_waiter *waiter; /* owned by admission.c while queued */

    /* the exchange with the backend (proxy.c) */
    struct lg_fleet *fleet;       /* one reference while dispatched */
    struct lg_backend *backend;   /* one reference while an attempt runs */
    struct lg_upconn *up;         /* borrowed from the pool while attached */
    uint32_t attempts;
    uint64_t tried_mask;
    bool up_reused;               /* attempt runs on a pooled connection */
    uint64_t up_body_left;        /* upstream Content-Length bytes still to relay */
    struct event *timer;          /* owned: total deadline */
    struct lg_sse sse;
    struct lg_json_probe probe;   /* non-streaming bodies */

    /* outcome */
    int status;                   /* status sent to the client (0: none) */
    const char *error;            /* static: why it failed, for the log */
    int fail_status;              /* what to answer if no retry is left (502/504) */
    uint64_t bytes_out;           /* response bytes queued to the client */
    uint64_t up_bytes;            /* response bytes received from the backend */

    /* monotonic timestamps, ns; 0 = did not happen */
    uint64_t t_start;             /* first byte of the request */
    uint64_t t_read;              /* whole request read */
    uint64_t t_dispatch;          /* backend picked (last attempt) */
    int due_slot;                 /* its slot in the backend's due[] (LG_REQ_F_TOKEN_WAIT) */
    int end_slot;                 /* its slot in the backend's ends[] (LG_REQ_F_END_SLOT) */
    int seq_slot;                 /* its slot in the backend's seqs[] (LG_REQ_F_SEQ) */
    uint64_t t_connect;           /* connection ready (last attempt) */
    uint64_t t_first_byte;        /* first response byte from the backend */
    uint64_t t_first_token;       /* first content event (or whole response) */
    uint64_t t_last_token;
    uint64_t t_end;
    uint64_t t_now;               /* time of the read being processed */
    uint64_t wall_start;          /* wall clock at t_start, for the log */
    uint64_t content_events;
    uint64_t t_pace;              /* a stream's pace is measured from here (proxy.c) */
    uint64_t pace_events;         /* content_events at t_pace */
    float gaps[8];                /* a stream's last gaps between content events, ms (a ring) */
    uint32_t ngaps;               /* gaps taken (gaps[ngaps % 8] is the next) */
};

struct lg_client {
    uint64_t id;
    struct lg_worker *w;            /* borrowed: the owning worker */
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
    TAILQ_ENTRY(lg_client) reap_link;
};

#define LG_CONN_LOG(level, c, fmt, ...)                                             \
    LG_LOG(level, "conn=%" PRIu64 " while %s: " fmt, (c)->id, (c)->action, ##__VA_ARGS__)

/*
 * Accepts fd on worker w (takes ownership of fd, and of ssl: when not NULL
 * the connection speaks TLS and its handshake starts now).
 */
int lg_client_new(struct lg_worker *w, int fd, const struct sockaddr *sa, int salen,
                  struct ssl_st *ssl);

/* Frees a client queued by lg_client_close() (the worker's reaper only). */
void lg_client_free(struct lg_client *c);

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
