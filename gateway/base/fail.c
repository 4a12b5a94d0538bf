/*
 * fail.c: the failures' table (fail.h): names, statuses, which may be
 * retried, which count against their backend.
 *
 * Owns nothing: static data. Invariants: every name is unique;
 * LG_FAIL_RETRY_DEFAULT holds exactly the retryable ones (a unit test
 * checks both).
 */
#include "base/fail.h"

#include <stdio.h>
#include <string.h>

#define FAIL_BEFORE(n, st)  { .name = (n), .status = (st), .retryable = true, .counts = true }
#define FAIL_STATUS(n)      { .name = (n), .status = 502, .retryable = true }
#define FAIL_MIDWAY(n)      { .name = (n), .counts = true }
#define FAIL_REQUEST(n, st) { .name = (n), .status = (st) }

const struct lg_fail_info lg_fail_table[LG_FAIL_COUNT] = {
    [LG_FAIL_NONE] = { .name = NULL },
    [LG_FAIL_CONNECT] = FAIL_BEFORE("connect_failed", 503),
    [LG_FAIL_CONNECT_REFUSED] = { .name = "connect_refused", .status = 503, .retryable = true,
                                  .counts = true, .refused = true },
    [LG_FAIL_CONNECT_TIMEOUT] = FAIL_BEFORE("connect_timeout", 504),
    [LG_FAIL_TLS] = FAIL_BEFORE("upstream_tls_error", 502),
    [LG_FAIL_FIRST_BYTE_TIMEOUT] = FAIL_BEFORE("first_byte_timeout", 504),
    [LG_FAIL_CLOSED] = FAIL_BEFORE("upstream_closed", 502),
    [LG_FAIL_PROTOCOL] = FAIL_BEFORE("upstream_protocol_error", 502),
    [LG_FAIL_HTTP_429] = FAIL_STATUS("http_429"),
    [LG_FAIL_HTTP_500] = FAIL_STATUS("http_500"),
    [LG_FAIL_HTTP_502] = FAIL_STATUS("http_502"),
    [LG_FAIL_HTTP_503] = FAIL_STATUS("http_503"),
    [LG_FAIL_HTTP_504] = FAIL_STATUS("http_504"),
    [LG_FAIL_HTTP_STATUS] = FAIL_REQUEST("http_error", 502),
    [LG_FAIL_RESUME_REFUSED] = { .name = "resume_refused", .status = 502, .counts = true },
    [LG_FAIL_CLOSED_MIDWAY] = FAIL_MIDWAY("upstream_closed_mid_response"),
    [LG_FAIL_RESET] = FAIL_MIDWAY("upstream_reset"),
    [LG_FAIL_STREAM_IDLE] = FAIL_MIDWAY("stream_idle_timeout"),
    [LG_FAIL_ENGINE_ERROR] = FAIL_MIDWAY("engine_error_event"),
    [LG_FAIL_NO_BACKEND] = FAIL_REQUEST("no_backend_to_resume", 0),
    [LG_FAIL_POOL_RACE] = FAIL_REQUEST("pooled_connection_closed", 0),
    [LG_FAIL_HEDGE_LOST] = FAIL_REQUEST("hedge_lost", 0),
    [LG_FAIL_CLIENT_CLOSED] = FAIL_REQUEST("client_closed", 499),
    [LG_FAIL_CLIENT_STALLED] = FAIL_REQUEST("client_stalled", 0),
    [LG_FAIL_TOTAL_TIMEOUT] = FAIL_REQUEST("total_timeout", 504),
    [LG_FAIL_ABORTED] = FAIL_REQUEST("aborted", 0),
};

_Static_assert(LG_FAIL_COUNT <= 32, "routing.retry.on is a 32-bit mask");

int
lg_fail_retry_bit(const char *name, char *why, size_t whysz)
{
    size_t n = 0;

    for (int f = LG_FAIL_NONE + 1; f < LG_FAIL_COUNT; f++) {
        if (strcmp(name, lg_fail_table[f].name) != 0) {
            continue;
        }
        if (!lg_fail_table[f].retryable) {
            snprintf(why, whysz, "\"%s\" is never retried on another backend", name);
            return -1;
        }
        return f;
    }
    n = (size_t)snprintf(why, whysz, "unknown failure \"%s\"; expected one of", name);
    for (int f = LG_FAIL_NONE + 1; f < LG_FAIL_COUNT && n < whysz; f++) {
        if (lg_fail_table[f].retryable) {
            n += (size_t)snprintf(why + n, whysz - n, " %s", lg_fail_table[f].name);
        }
    }
    return -1;
}
