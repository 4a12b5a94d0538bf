/*
 * fastsse.c: llmload-fastsse, a minimal OpenAI-style streaming endpoint used
 * only to benchmark llmload itself: it answers every POST with an SSE stream
 * of --tokens content chunks, the first after --ttft-ms, the rest --itl-ms
 * apart (all at once when both are 0), then usage and [DONE].
 * Owns: the evhttp server and one small state per stream in progress.
 * On SIGINT/SIGTERM it prints how late its first chunks were against
 * --ttft-ms (server-side, from the request's arrival to the first chunk being
 * queued), which bounds the part of a client's TTFT error the server causes.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "base/lg_core.h"

#define FAST_MAX_SAMPLES 2000000

static const char fast_role[] =
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n";
static const char fast_tok[] =
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"content\":\"tok \"}}]}\n\n";
static const char fast_done[] = "data: [DONE]\n\n";

struct fast_server {
    struct event_base *base;
    unsigned tokens;
    uint64_t ttft_ns;
    uint64_t itl_ns;
    const char *replica;
    char usage[160];
    uint64_t requests;
    int64_t *late_ns; /* owned: first-chunk delay minus ttft, per request */
    size_t n_late;
};

struct fast_stream {
    struct fast_server *srv;
    struct evhttp_request *req; /* borrowed from evhttp until the reply ends */
    struct event *timer;        /* owned */
    uint64_t t_recv;
    unsigned sent;
};

static void
fast_stream_free(struct fast_stream *st)
{
    event_free(st->timer);
    free(st);
}

static void
fast_on_close(struct evhttp_connection *conn, void *arg)
{
    fast_stream_free(arg);
}

static void
fast_send(struct fast_stream *st, const char *p, size_t n)
{
    struct evbuffer *b = evbuffer_new();

    evbuffer_add_reference(b, p, n, NULL, NULL);
    evhttp_send_reply_chunk(st->req, b);
    evbuffer_free(b);
}

static void
fast_note_first(struct fast_stream *st)
{
    struct fast_server *srv = st->srv;

    if (srv->n_late < FAST_MAX_SAMPLES) {
        srv->late_ns[srv->n_late++] = (int64_t)(lg_now_ns() - st->t_recv) - (int64_t)srv->ttft_ns;
    }
}

static void
fast_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct fast_stream *st = arg;
    struct fast_server *srv = st->srv;
    struct timeval tv;

    if (st->sent == 0) {
        fast_note_first(st);
    }
    fast_send(st, fast_tok, sizeof(fast_tok) - 1);
    if (++st->sent < srv->tokens) {
        tv.tv_sec = (time_t)(srv->itl_ns / LG_NS_PER_S);
        tv.tv_usec = (suseconds_t)(srv->itl_ns % LG_NS_PER_S / 1000);
        evtimer_add(st->timer, &tv);
        return;
    }
    fast_send(st, srv->usage, strlen(srv->usage));
    fast_send(st, fast_done, sizeof(fast_done) - 1);
    evhttp_connection_set_closecb(evhttp_request_get_connection(st->req), NULL, NULL);
    evhttp_send_reply_end(st->req);
    fast_stream_free(st);
}

static void
fast_on_request(struct evhttp_request *req, void *arg)
{
    struct fast_server *srv = arg;
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    struct fast_stream *st;
    struct timeval tv;

    srv->requests++;
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "X-Llmsim-Replica", srv->replica);
    evhttp_send_reply_start(req, 200, "OK");
    if (srv->ttft_ns == 0 && srv->itl_ns == 0) {
        struct evbuffer *b = evbuffer_new();

        evbuffer_add_reference(b, fast_role, sizeof(fast_role) - 1, NULL, NULL);
        for (unsigned i = 0; i < srv->tokens; i++) {
            evbuffer_add_reference(b, fast_tok, sizeof(fast_tok) - 1, NULL, NULL);
        }
        evbuffer_add(b, srv->usage, strlen(srv->usage));
        evbuffer_add_reference(b, fast_done, sizeof(fast_done) - 1, NULL, NULL);
        evhttp_send_reply_chunk(req, b);
        evbuffer_free(b);
        evhttp_send_reply_end(req);
        return;
    }
    st = lg_xcalloc(1, sizeof(*st));
    st->srv = srv;
    st->req = req;
    st->t_recv = lg_now_ns();
    st->timer = evtimer_new(srv->base, fast_on_timer, st);
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), fast_on_close, st);
    fast_send(st, fast_role, sizeof(fast_role) - 1);
    tv.tv_sec = (time_t)(srv->ttft_ns / LG_NS_PER_S);
    tv.tv_usec = (suseconds_t)(srv->ttft_ns % LG_NS_PER_S / 1000);
    evtimer_add(st->timer, &tv);
}

static void
fast_on_signal(evutil_socket_t sig, short what, void *arg)
{
    event_base_loopbreak(arg);
}

static int
fast_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

static void
fast_report(struct fast_server *srv)
{
    size_t n = srv->n_late;

    printf("llmload-fastsse: %" PRIu64 " requests", srv->requests);
    if (n > 0) {
        qsort(srv->late_ns, n, sizeof(int64_t), fast_cmp);
        printf("; first chunk late by p50 %.1f us, p99 %.1f us, max %.1f us (n=%zu)",
               (double)srv->late_ns[(n - 1) / 2] / 1e3,
               (double)srv->late_ns[(size_t)((double)(n - 1) * 0.99)] / 1e3,
               (double)srv->late_ns[n - 1] / 1e3, n);
    }
    printf("\n");
    fflush(stdout);
}

static void
fast_usage(void)
{
    fprintf(stderr, "usage: llmload-fastsse [--listen HOST:PORT] [--tokens N] [--ttft-ms D] "
                    "[--itl-ms G] [--replica NAME]\n");
}

int
main(int argc, char **argv)
{
    struct fast_server srv = { .tokens = 8, .replica = "fast" };
    const char *listen = "127.0.0.1:0";
    char host[256];
    const char *colon;
    struct event_config *cfg;
    struct evhttp *http;
    struct evhttp_bound_socket *sock;
    struct event *sig_int, *sig_term;
    struct sockaddr_storage ss;
    ev_socklen_t sl = sizeof(ss);
    int port, one = 1;

    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (v == NULL) {
            fast_usage();
            return 2;
        }
        if (strcmp(argv[i], "--listen") == 0) {
            listen = v;
        } else if (strcmp(argv[i], "--tokens") == 0) {
            srv.tokens = (unsigned)strtoul(v, NULL, 10);
        } else if (strcmp(argv[i], "--ttft-ms") == 0) {
            srv.ttft_ns = (uint64_t)(strtod(v, NULL) * 1e6);
        } else if (strcmp(argv[i], "--itl-ms") == 0) {
            srv.itl_ns = (uint64_t)(strtod(v, NULL) * 1e6);
        } else if (strcmp(argv[i], "--replica") == 0) {
            srv.replica = v;
        } else {
            fast_usage();
            return 2;
        }
    }
    if (srv.tokens == 0) {
        srv.tokens = 1;
    }
    colon = strrchr(listen, ':');
    if (colon == NULL || (size_t)(colon - listen) >= sizeof(host)) {
        fast_usage();
        return 2;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    port = atoi(colon + 1);
    snprintf(srv.usage, sizeof(srv.usage),
             "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,"
             "\"completion_tokens\":%u}}\n\n",
             srv.tokens);
    srv.late_ns = lg_xmalloc(FAST_MAX_SAMPLES * sizeof(int64_t));
    signal(SIGPIPE, SIG_IGN);

    cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    srv.base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    http = evhttp_new(srv.base);
    evhttp_set_gencb(http, fast_on_request, &srv);
    sock = evhttp_bind_socket_with_handle(http, host, (ev_uint16_t)port);
    if (sock == NULL) {
        fprintf(stderr, "llmload-fastsse: cannot listen on %s\n", listen);
        return 1;
    }
    /* Linux copies TCP_NODELAY from the listener to accepted sockets:
     * without it Nagle holds each small chunk for the client's delayed ACK. */
    setsockopt(evhttp_bound_socket_get_fd(sock), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl);
    port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    printf("llmload-fastsse ready listen=%s:%d tokens=%u ttft_ms=%.3f itl_ms=%.3f\n", host, port,
           srv.tokens, (double)srv.ttft_ns / 1e6, (double)srv.itl_ns / 1e6);
    fflush(stdout);
    sig_int = evsignal_new(srv.base, SIGINT, fast_on_signal, srv.base);
    sig_term = evsignal_new(srv.base, SIGTERM, fast_on_signal, srv.base);
    evsignal_add(sig_int, NULL);
    evsignal_add(sig_term, NULL);
    event_base_dispatch(srv.base);
    fast_report(&srv);
    event_free(sig_int);
    event_free(sig_term);
    evhttp_free(http);
    event_base_free(srv.base);
    free(srv.late_ns);
    return 0;
}
