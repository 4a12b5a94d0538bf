/*
 * fail.h: how an attempt on a backend, or a request, ends when it does not
 * end well (fail.c): one enum and one table. The table gives each failure
 * its name (the access log's, and what routing.retry.on lists), the status
 * a client gets when it ends the request before any response byte, whether
 * another backend may be tried after it, and whether it counts against the
 * backend it happened on.
 */
#ifndef LG_FAIL_H
#define LG_FAIL_H

#include "base/lg_core.h"

enum lg_fail {
    LG_FAIL_NONE = 0, /* ended well (or not ended yet) */
    /* before the response: the backend's, retried where routing.retry.on says */
    LG_FAIL_CONNECT,            /* no socket could be made for it */
    LG_FAIL_CONNECT_REFUSED,    /* nothing listens there */
    LG_FAIL_CONNECT_TIMEOUT,    /* the connection was not made in time */
    LG_FAIL_TLS,                /* the TLS handshake failed */
    LG_FAIL_FIRST_BYTE_TIMEOUT, /* no response head in time: no first byte, or a head begun
                                   that did not end (timeouts.first_byte, relay.c) */
    LG_FAIL_CLOSED,             /* closed or reset before its response head */
    LG_FAIL_PROTOCOL,           /* a response that is not HTTP (before or after its head) */
    LG_FAIL_HTTP_429,           /* answered 429 */
    LG_FAIL_HTTP_500,           /* answered 500 */
    LG_FAIL_HTTP_502,           /* answered 502 */
    LG_FAIL_HTTP_503,           /* answered 503 */
    LG_FAIL_HTTP_504,           /* answered 504 */
    LG_FAIL_HTTP_STATUS,        /* answered another error status while racing a hedge */
    LG_FAIL_RESUME_REFUSED,     /* a continuation's answer is no stream to go on with */
    /* after the response started: cut, or continued elsewhere (routing.resume) */
    LG_FAIL_CLOSED_MIDWAY, /* closed in the middle of its response */
    LG_FAIL_RESET,         /* reset in the middle of its response */
    LG_FAIL_STREAM_IDLE,   /* silent between two reads of its response for too long */
    LG_FAIL_ENGINE_ERROR,  /* the engine reported a failure inside its 200 stream */
    LG_FAIL_NO_BACKEND,    /* no backend left to continue the stream on */
    /* the request ended it */
    LG_FAIL_POOL_RACE,      /* a pooled connection closed as the request went out: sent again */
    LG_FAIL_HEDGE_LOST,     /* the other attempt of a hedged request won */
    LG_FAIL_CLIENT_CLOSED,  /* the client went away */
    LG_FAIL_CLIENT_STALLED, /* the client stopped reading */
    LG_FAIL_TOTAL_TIMEOUT,  /* timeouts.total passed */
    LG_FAIL_ABORTED,        /* the request ended otherwise (refused, shut down) */
    LG_FAIL_COUNT,
};

/* A failure's bit in a mask (routing.retry.on). */
#define LG_FAIL_BIT(f) (1u << (f))

struct lg_fail_info {
    const char *name; /* the access log's, and routing.retry.on's */
    uint16_t status;  /* what the client gets when it ends a request before any
                         response byte; 0: it never does */
    bool retryable;   /* another backend may be tried after it (routing.retry.on) */
    bool counts;      /* a failure of the backend: told to its health and the router
                         when the attempt ends (a status is told with its head) */
    bool refused;     /* told as a refused connection (held off at once) */
};

/* Indexed by enum lg_fail. */
extern const struct lg_fail_info lg_fail_table[LG_FAIL_COUNT];

/* routing.retry.on's default: every failure that may be retried. */
#define LG_FAIL_RETRY_DEFAULT                                                                 \
    (LG_FAIL_BIT(LG_FAIL_CONNECT) | LG_FAIL_BIT(LG_FAIL_CONNECT_REFUSED)                      \
     | LG_FAIL_BIT(LG_FAIL_CONNECT_TIMEOUT) | LG_FAIL_BIT(LG_FAIL_TLS)                        \
     | LG_FAIL_BIT(LG_FAIL_FIRST_BYTE_TIMEOUT) | LG_FAIL_BIT(LG_FAIL_CLOSED)                  \
     | LG_FAIL_BIT(LG_FAIL_PROTOCOL) | LG_FAIL_BIT(LG_FAIL_HTTP_429)                          \
     | LG_FAIL_BIT(LG_FAIL_HTTP_500) | LG_FAIL_BIT(LG_FAIL_HTTP_502)                          \
     | LG_FAIL_BIT(LG_FAIL_HTTP_503) | LG_FAIL_BIT(LG_FAIL_HTTP_504))

static inline const char *
lg_fail_name(enum lg_fail f)
{
    return lg_fail_table[f].name;
}

static inline int
lg_fail_status(enum lg_fail f)
{
    return lg_fail_table[f].status;
}

/* The failure of a retryable status (429, 500, 502, 503, 504), else LG_FAIL_NONE. */
static inline enum lg_fail
lg_fail_of_status(int status)
{
    switch (status) {
    case 429:
        return LG_FAIL_HTTP_429;
    case 500:
        return LG_FAIL_HTTP_500;
    case 502:
        return LG_FAIL_HTTP_502;
    case 503:
        return LG_FAIL_HTTP_503;
    case 504:
        return LG_FAIL_HTTP_504;
    default:
        return LG_FAIL_NONE;
    }
}

/*
 * routing.retry.on's names: the bit of a failure that may be retried, or -1
 * with why (an unknown name, with the names that are allowed, or a failure
 * that is never retried).
 */
int lg_fail_retry_bit(const char *name, char *why, size_t whysz);

#endif /* LG_FAIL_H */
