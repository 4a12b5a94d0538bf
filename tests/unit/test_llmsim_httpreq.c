/*
 * test_llmsim_httpreq.c: llmsim's incremental request reader: requests split
 * at every byte, pipelining, Expect: 100-continue, and the size limits.
 */
#include <string.h>

#include <event2/buffer.h>

#include "../../tools/llmsim/httpreq.c"
#include "lg_test.h"

/*
 * Feeds `in` in pieces of `piece` bytes; writes a trace of the requests seen,
 * one "METHOD path body-bytes keep-alive|close expect?" line each, or
 * "error STATUS" and stops.
 */
static void
trace(const char *in, size_t piece, size_t max_head, size_t max_body, char *out, size_t outlen)
{
    struct lg_sim_httpreq r;
    size_t len = strlen(in);
    size_t off = 0;
    size_t used = 0;

    out[0] = '\0';
    lg_sim_httpreq_init(&r, max_head, max_body);
    while (off < len) {
        size_t k;
        size_t n = LG_MIN(piece, len - off);
        enum lg_sim_httpreq_rc rc = lg_sim_httpreq_feed(&r, in + off, n, &k);

        off += k;
        if (rc == LG_SIM_HTTPREQ_ERROR) {
            used += (size_t)snprintf(out + used, outlen - used, "error %d\n", r.error_status);
            break;
        }
        if (rc == LG_SIM_HTTPREQ_DONE) {
            size_t plen;
            const char *path = lg_sim_httpreq_path(&r, &plen);

            used +=
                (size_t)snprintf(out + used, outlen - used, "%s %.*s %zu %s%s\n",
                                 llhttp_method_name((llhttp_method_t)r.method), (int)plen, path,
                                 evbuffer_get_length(r.body), r.keep_alive ? "keep-alive" : "close",
                                 r.expect_continue ? " expect" : "");
            lg_sim_httpreq_next(&r);
        }
    }
    lg_sim_httpreq_free(&r);
}

static int
test_pipelined_at_every_split(void)
{
    const char *in = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\n"
                     "Content-Length: 5\r\n\r\nhello"
                     "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
                     "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
                     "Expect: 100-Continue\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
                     "GET /metrics HTTP/1.0\r\n\r\n";
    const char *expect = "POST /v1/chat/completions 5 keep-alive\n"
                         "GET /health 0 keep-alive\n"
                         "POST /v1/completions 5 keep-alive expect\n"
                         "GET /metrics 0 close\n";
    char out[1024];

    for (size_t piece = 1; piece <= strlen(in); piece++) {
        trace(in, piece, 4096, 4096, out, sizeof(out));
        if (strcmp(out, expect) != 0) {
            fprintf(stderr, "piece %zu:\n%s", piece, out);
            return 1;
        }
    }
    return 0;
}

static int
test_limits(void)
{
    char out[256];
    char in[12000];

    /* Content-Length over the limit: refused before any body byte */
    trace("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", 7, 4096, 100, out, sizeof(out));
    LG_CHECK_STR(out, "error 413\n");
    trace("POST / HTTP/1.1\r\nContent-Length: 100\r\n\r\n", 7, 4096, 100, out, sizeof(out));
    LG_CHECK_STR(out, ""); /* fine, waits for the body */
    /* chunked body over the limit */
    trace("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n"
          "0123456789012345678901234567890123456789012345678901234567890123\r\n"
          "40\r\n0123456789012345678901234567890123456789012345678901234567890123\r\n0\r\n\r\n",
          5, 4096, 100, out, sizeof(out));
    LG_CHECK_STR(out, "error 413\n");
    /* header bytes over the limit, whether in one field or many */
    snprintf(in, sizeof(in), "GET / HTTP/1.1\r\nX: %0300d\r\n\r\n", 0);
    trace(in, 1, 256, 100, out, sizeof(out));
    LG_CHECK_STR(out, "error 431\n");
    trace(in, 1, 1024, 100, out, sizeof(out));
    LG_CHECK_STR(out, "GET / 0 keep-alive\n");
    snprintf(in, sizeof(in), "GET / HTTP/1.1\r\n%s\r\n",
             "A: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\nG: 7\r\nH: 8\r\nI: 9\r\nJ: 0\r\n");
    trace(in, 3, 40, 100, out, sizeof(out)); /* 10 lines of 6 counted bytes */
    LG_CHECK_STR(out, "error 431\n");
    /* the target has its own bound */
    snprintf(in, sizeof(in), "GET /%09000d HTTP/1.1\r\n\r\n", 0);
    trace(in, 100, 1 << 20, 100, out, sizeof(out));
    LG_CHECK_STR(out, "error 414\n");
    /* malformed input */
    trace("GET / HTTP/1.1\r\nHost a\r\n\r\n", 4, 4096, 100, out, sizeof(out));
    LG_CHECK_STR(out, "error 400\n");
    trace("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 4, 4096, 100, out,
          sizeof(out));
    LG_CHECK_STR(out, "error 400\n");
    trace(
        "GET / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nGET / HTTP/1.1\r\n\r\n",
        200, 4096, 100, out, sizeof(out));
    LG_CHECK(strncmp(out, "GET / 0", 7) == 0);
    return 0;
}

LG_TEST_MAIN(test_pipelined_at_every_split, test_limits)
