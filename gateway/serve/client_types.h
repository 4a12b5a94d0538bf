/*
 * client_types.h: a client connection and the state of the request it
 * serves, from its first byte to its access-log line (types only: client.h
 * has the connection's functions). A connection holds one request at a
 * time; the modules a request passes through (reader, proxy, attempt,
 * hedge, relay, admission, record) read and write the parts the comments
 * give them.
 */
#ifndef LG_CLIENT_TYPES_H
#define LG_CLIENT_TYPES_H

#include <sys/queue.h>
#include <sys/socket.h>

#include <llhttp.h>

#include "base/fail.h"
#include "base/lg_core.h"
#include "http/headcheck.h"
#include "http/httphdr.h"
#include "http/openai.h"
#include "http/respid.h"
#include "http/sse.h"
#include "route/router.h"
#include "route/tried.h"
#include "serve/attempt_types.h"
#include "serve/keys.h"
#include "serve/quota_types.h"
#include "serve/tenant.h"
#include "serve/worker.h"

struct bufferevent;
struct evbuffer;
struct event;
struct lg_admission_waiter;
struct lg_backend;
struct lg_client;
struct lg_fleet;
struct lg_hedge;
struct lg_trace;
struct lg_model_route;
struct lg_upconn;

/* What hedging did for a request (hedge.c), for its record. */
enum lg_req_hedge {
    LG_REQ_HEDGE_NONE = 0, /* no duplicate sent */
    LG_REQ_HEDGE_RACING,   /* a duplicate runs; no winner yet */
    LG_REQ_HEDGE_FIRST,    /* the first attempt went on, the duplicate was closed */
    LG_REQ_HEDGE_DUP,      /* the duplicate went on, the first attempt was closed */
    LG_REQ_HEDGE_NEITHER,  /* the request ended while they raced */
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
#define LG_REQ_F_RELAY_TMO   (1u << 16) /* relay timeouts still to set (proxy_on_up_read) */
#define LG_REQ_F_EVENTS      (1u << 19) /* body relayed event by event (resume.c): a stream
                                           that may go on on another backend */
#define LG_REQ_F_RESPID      (1u << 20) /* a Responses API answer: its id is learnt (relay.c) */
#define LG_REQ_F_FOLLOW_UP   (1u << 21) /* its previous_response_id pins it to one backend */

/* How a parser callback refused the request (reader.c): answered once llhttp stops. */
struct lg_req_reject {
    int status;       /* 0: not refused */
    const char *code; /* static: the error body's code */
    const char *why;  /* static: the error body's message */
};

/* What a request's attempts did, for its retries and its record. */
struct lg_req_tries {
    uint32_t n;                  /* attempts begun (a pooled connection's race not counted) */
    enum lg_fail fail : 8;       /* the last failure before a response: answered when no
                                    retry is left */
    enum lg_req_hedge hedge : 8; /* what hedging did (hedge.c) */
    uint8_t resume_fail;         /* why a stream it could continue was cut (enum lg_stats_resume) */
    float hedge_after_ms;        /* the first token's deadline (hedge.c); 0: none */
    uint32_t resumed;            /* continuations begun (resume.c) */
    struct lg_tried tried;       /* their backends, which the next pick skips (route/tried.h;
                                    what it allocates is freed at the request's release) */
    struct lg_attempt_log *log;  /* owned: the ended ones no longer current, while the
                                    access log is on (attempt.c); NULL: none */
    struct lg_trace *trace;      /* owned by trace.c: the trace its attempts carry on, and
                                    its spans' context; NULL: tracing off or not traced */
    uint64_t resume_pause_ns;    /* the pauses the client saw, last token to first after */
    uint64_t resume_events;      /* content events relayed before the last continuation */
};

/* What a request's response body is read for, as it passes (relay.c). */
struct lg_req_scan {
    struct lg_sse sse;            /* a stream's events */
    struct lg_json_probe probe;   /* non-streaming bodies */
    struct lg_respid respid;      /* the Responses API: the answer's id (LG_REQ_F_RESPID) */
    struct lg_sse_tap tap;        /* feeds respid a stream's events (when resume.c does not
                                     listen: it never does on that route) */
    bool learned;                 /* the id is in the gateway's respmap */
};

struct lg_request {
    uint32_t flags;
    uint8_t method;               /* llhttp_method_t */
    uint8_t http_minor;
    char id[72];                  /* X-Request-Id (client's if sane, else generated) */
    struct lg_hdrs hdrs;          /* request head */
    struct evbuffer *body;        /* owned; request body as received */
    uint64_t body_bytes;
    uint64_t head_bytes;          /* the head and the body's framing, as received */
    uint64_t frame_bytes;         /* a chunked body's framing: size lines, extensions, trailers */
    uint64_t meta_bytes;          /* of which chunk extensions and trailer fields */
    uint64_t t_body;              /* the head's end: the body's deadline counts from here (reader.c) */
    struct lg_req_reject reject;  /* set by a parser callback that refuses the request */
    struct lg_openai_req info;    /* from the body */
    struct lg_route_req route;
    struct lg_headcheck headcheck; /* raw-head checks across reads (headcheck.c) */
    struct lg_key_hold auth;      /* the API key it counts against (keys.c) */
    struct lg_quota *quota;       /* owned by quota.c: its tokens reserved in the key's
                                     budget, the key's limits for the x-ratelimit headers;
                                     NULL: a key with neither (or no key) */
    struct lg_req_sched sched;    /* its tenant, class, TTFT target, queue wait (tenant.c,
                                     admission.c) */

    /* the exchange with the backend (proxy.c, attempt.c, hedge.c, relay.c) */
    struct lg_fleet *fleet;       /* one reference while dispatched */
    const struct lg_model_route *models; /* the fleet's backends of its model (proxy_start) */
    struct lg_attempt *att;       /* the attempt the response comes from: running, or the
                                     last one (its pick: the last routing decision); NULL
                                     before the first pick */
    struct lg_attempt own;        /* where its attempts run, but a hedge's duplicate (hedge.c) */
    struct lg_req_tries tries;
    struct event *timer;          /* owned: total deadline */
    struct lg_req_scan scan;      /* what its response's body says */
    struct lg_resume *resume;     /* owned by resume.c: a stream it may continue; NULL: none */
    struct lg_hedge *hedge;       /* owned by hedge.c while hedging may act; NULL otherwise */

    /* outcome */
    int status;                   /* status sent to the client (0: none) */
    uint32_t retry_after_ms;      /* Retry-After of a 429 or 503 it is refused with */
    const char *error;            /* static: why it failed, for the log */
    uint64_t bytes_out;           /* response bytes queued to the client */

    /* monotonic timestamps, ns; 0 = did not happen (an attempt's own: struct lg_attempt) */
    uint64_t t_start;             /* first byte of the request */
    uint64_t t_read;              /* whole request read */
    uint64_t t_first_token;       /* first content event (or whole response) */
    uint64_t t_last_token;
    uint64_t t_end;
    uint64_t t_now;               /* time of the read being processed */
    uint64_t wall_start;          /* wall clock at t_start, for the log */
    uint64_t content_events;
};


/*
 * What the connection calls in the layer above it, on its request's behalf
 * (proxy.c's lg_proxy_client_ops, which the listener hands to every client).
 */
struct lg_client_ops {
    /* The request is read whole (head and body, within the limits): answer it. */
    void (*dispatch)(struct lg_client *c);
    /* End what the request runs now, for `why`: its upstream connection
     * closes (the engine stops), its backend is released. Safe when
     * nothing runs. */
    void (*abort)(struct lg_client *c, enum lg_fail why);
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
    TAILQ_ENTRY(lg_client) link;    /* worker's clients list */
    TAILQ_ENTRY(lg_client) idle_link; /* worker's idle list, while `idle` */
    uint64_t idle_since;            /* between requests since (ns), while `idle` */
    struct lg_reap reap;            /* the worker frees it (lg_client_close), or parks it */
    bool idle;                      /* on the worker's idle list: parked in a while */
    bool park_queued;               /* reap is queued to park it now */
    bool parked;                    /* between requests: the allocation ends here, no `req` */
    /* last: an idle keep-alive connection gives it back (client.c, client_park) */
    struct lg_request req;
};

#define LG_CONN_LOG(level, c, fmt, ...)                                             \
    LG_LOG(level, "conn=%" PRIu64 " while %s: " fmt, (c)->id, (c)->action, ##__VA_ARGS__)

#endif /* LG_CLIENT_TYPES_H */
