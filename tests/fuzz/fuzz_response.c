/*
 * fuzz_response.c: upstream response handling through the real proxy code
 * (fuzz_gateway.h): the input is what the backend answers, in two pieces.
 *
 * First byte: bits 0-4 pick the split point, bit 5 makes the client speak
 * HTTP/1.0 (de-chunked relay), bit 6 asks for a stream, bit 7 sends two
 * requests on one keep-alive connection: the backend answers the first with a
 * clean response and the second (on the same, pooled, connection) with the
 * input. After the input the backend closes its connection.
 *
 * A stream with bit 0 set is greedy ("temperature": 0), one that mid-stream
 * failover (routing.resume, serve/resume.c) may continue on the second
 * backend: the first connection gets the input up to the split point and is
 * closed, the continuation's connection (if one comes) all of it, then
 * closed.
 *
 * Checks: no crash, no leak, no client left behind; whatever the client gets
 * starts as an HTTP response of its version, and parses as responses
 * (llhttp, strict; it may be cut anywhere, but nothing may follow a point
 * where it stops parsing) each of which is framed (Content-Length, chunked)
 * or says Connection: close: a keep-alive response without framing leaves the client
 * waiting for an end that never comes, or reading its next answer as this
 * body (as when a backend's Connection header named Content-Length).
 * fuzz/response.dict holds what such hostile heads are made of.
 *
 * An input holding "resp" (and not a greedy stream) is answered to a
 * request on /v1/responses: the Responses API's answer id is read as it
 * passes and kept (serve/respmap.c).
 */
#include <stdint.h>

#include <llhttp.h>

#define FG_ROUTING ", \"resume\": {\"models\": {\"m\": \"greedy\"}}"
#define FG_TWO_BACKENDS
#include "fuzz_gateway.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fs_clean[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";

/* A response the client got that is framed by nothing but its connection's close. */
static int
fs_on_headers_complete(llhttp_t *p)
{
    if (llhttp_message_needs_eof(p) && !(p->flags & F_CONNECTION_CLOSE)) {
        fprintf(stderr, "the client got a keep-alive %d response without framing\n",
                p->status_code);
        abort();
    }
    return 0;
}

/*
 * Parses what the client got. It may end anywhere, a cut, even inside a
 * chunk-size line the backend broke (relayed as far as it was read, then
 * the connection closed: never complete); but no byte may follow a point
 * where it stops parsing (bytes after a message's end, a body after a head
 * that has none: the client would read them as its next answer).
 */
static void
fs_check_client_stream(const char *out, size_t len, bool truncated)
{
    llhttp_settings_t settings;
    llhttp_t p;
    llhttp_errno_t err;
    const char *pos;

    llhttp_settings_init(&settings);
    settings.on_headers_complete = fs_on_headers_complete;
    llhttp_init(&p, HTTP_RESPONSE, &settings);
    err = llhttp_execute(&p, out, len);
    if (err == HPE_OK || err == HPE_PAUSED_UPGRADE || truncated) {
        return;
    }
    pos = llhttp_get_error_pos(&p);
    if (pos == NULL || pos < out || pos + 1 < out + len) {
        fprintf(stderr, "the client's stream does not parse at byte %zd of %zu: %s (%s)\n",
                pos != NULL ? pos - out : (ssize_t)-1, len, llhttp_errno_name(err),
                llhttp_get_error_reason(&p));
        abort();
    }
}

/* Waits (spinning the loop) until the backend connection got n requests. */
static bool
fs_wait_requests(struct fg *f, unsigned n)
{
    for (int i = 0; i < 20; i++) {
        unsigned got = 0;
        const char *p;

        if (f->nup > 0) {
            for (p = f->up_in[0];
                 (p = memmem(p, (size_t)(f->up_in[0] + f->up_in_len[0] - p), "X-Request-Id: ", 14))
                 != NULL;
                 p += 14) {
                got++;
            }
        }
        if (got >= n) {
            return true;
        }
        fg_spin(f, NULL, NULL);
    }
    return false;
}

/* What backend connection i answers. */
static void
fs_backend_send(struct fg *f, size_t i, const void *data, size_t len)
{
    if (f->nup > i && f->up_fd[i] >= 0 && len > 0
        && send(f->up_fd[i], data, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the gateway closed it already */
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fg *f = fg_setup();
    bool http10, stream, two, greedy, responses;
    char req[512];
    char body[160];
    size_t split, n, blen;
    const uint8_t *p;
    int rlen;

    if (size < 1) {
        return 0;
    }
    f->gw.keys = NULL;
    http10 = (data[0] & 0x20) != 0;
    stream = (data[0] & 0x40) != 0;
    two = (data[0] & 0x80) != 0;
    greedy = stream && (data[0] & 0x01) != 0;
    p = data + 1;
    n = size - 1;
    split = n * (data[0] & 0x1f) / 31;
    /* an answer that looks like the Responses API's is asked for on its route, where
     * its id is read as it passes (http/respid.c, serve/respmap.c) */
    responses = !greedy && memmem(p, n, "resp", 4) != NULL;
    blen = (size_t)snprintf(body, sizeof(body),
                            "{\"model\":\"m\",\"stream\":%s,%s\"messages\":[{\"role\":\"user\","
                            "\"content\":\"hi\"}]}",
                            stream ? "true" : "false", greedy ? "\"temperature\":0," : "");
    rlen = snprintf(req, sizeof(req),
                    "POST %s HTTP/1.%d\r\nHost: gw\r\n%sContent-Length: %zu"
                    "\r\n\r\n%s",
                    responses ? "/v1/responses" : "/v1/chat/completions", http10 ? 0 : 1, http10 ? "Connection: keep-alive\r\n" : "", blen, body);

    fg_open_client(f);
    fg_send(f, req, (size_t)rlen);
    if (two) {
        fg_send(f, req, (size_t)rlen);
    }
    if (fs_wait_requests(f, 1)) {
        if (two) {
            fs_backend_send(f, 0, fs_clean, sizeof(fs_clean) - 1);
            fs_wait_requests(f, 2);
        }
        fs_backend_send(f, 0, p, split);
        fg_spin(f, NULL, NULL);
        if (!greedy) {
            fs_backend_send(f, 0, p + split, n - split);
            fg_spin(f, NULL, NULL);
        }
        if (f->nup > 0 && f->up_fd[0] >= 0) {
            close(f->up_fd[0]); /* EOF: ends a close-delimited body, cuts anything else */
            f->up_fd[0] = -1;
        }
        fg_spin(f, NULL, NULL);
        if (greedy && f->nup > 1 && f->up_fd[1] >= 0) {
            /* a continuation (or a retry): all of the input, then the close */
            fs_backend_send(f, 1, p, n);
            fg_spin(f, NULL, NULL);
            close(f->up_fd[1]);
            f->up_fd[1] = -1;
            fg_spin(f, NULL, NULL);
        }
    }
    fg_finish(f, NULL, NULL);

    if (getenv("FG_DEBUG") != NULL) {
        fprintf(stderr, "client got %zu bytes:\n%.*s\n", f->out_len, (int)f->out_len, f->out);
    }
    if (f->out_len > 0 && (f->out_len < 9 || memcmp(f->out, "HTTP/1.1 ", 9) != 0)) {
        abort(); /* the client got something that is not a response */
    }
    fs_check_client_stream(f->out, f->out_len, f->out_len == sizeof(f->out));
    return 0;
}
