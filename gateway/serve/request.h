/*
 * request.h: the state of one request, from its first byte to its
 * access-log line (types only). The client connection (client.h) holds
 * one at a time; the modules a request passes through (exchange, attempt,
 * relay, admission, record) read and write the parts the comments give
 * them.
 */
#ifndef LG_REQUEST_H
#define LG_REQUEST_H

#include "base/lg_core.h"
#include "http/headcheck.h"
#include "http/httphdr.h"
#include "http/openai.h"
#include "http/sse.h"
#include "route/router.h"
#include "serve/keys.h"

struct evbuffer;
struct event;
struct lg_admission_waiter;
struct lg_backend;
struct lg_fleet;
struct lg_upconn;

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

#endif /* LG_REQUEST_H */
