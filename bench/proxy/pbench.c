/*
 * pbench.c: the proxy benchmark's own backend and clients, driven by
 * bench/proxy/run.py. One binary, four commands, raw epoll and no library,
 * so that they cost little CPU on the core they share:
 *   backend  answers every request with a ~500-byte JSON body over keep-alive,
 *            or (--sse) with a chunked SSE stream whose events carry their
 *            send time ("t": CLOCK_REALTIME ns, taken just before the write);
 *            a GET (a health check, a /metrics scrape) as an engine (vLLM)
 *   load     open-loop load at a fixed rate over C keep-alive connections;
 *            latency runs from each request's scheduled time to its last byte;
 *            --pair also sends every Nth request straight to a second target
 *            (the backend) at the same moment, for paired differences
 *   sse      streams from a --sse backend; per-event delay is the kernel
 *            receive time of the event (SO_TIMESTAMPNS) minus its stamp
 *   hold     opens idle keep-alive connections and long streams on command
 *            (stdin), for memory measurements
 *   relay    a TCP pass-through (read, write, no parsing): the floor
 * Owns: its sockets and buffers. Single-threaded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PB_BUF        65536
#define PB_MAX_EVENTS 256
#define PB_NS         1000000000ull

/* epoll tags for the fds that are not connections */
static char tag_listen, tag_timer, tag_stdin;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void
die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fprintf(stderr, "pbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static uint64_t
mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * PB_NS + (uint64_t)ts.tv_nsec;
}

static uint64_t
real_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * PB_NS + (uint64_t)ts.tv_nsec;
}

static void *
xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (p == NULL) {
        die("out of memory (%zu bytes)", n);
    }
    return p;
}

static void *
xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);

    if (p == NULL) {
        die("out of memory");
    }
    return p;
}

static void
raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static void
parse_addr(const char *s, struct sockaddr_in *sa)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    size_t hl = colon ? (size_t)(colon - s) : sizeof(host);

    if (hl >= sizeof(host)) {
        die("bad address %s (want IPv4:PORT)", s);
    }
    memcpy(host, s, hl);
    host[hl] = '\0';
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, hl ? host : "0.0.0.0", &sa->sin_addr) != 1) {
        die("bad address %s", s);
    }
}

static void
set_nodelay(int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* A non-blocking connect; completion shows up as EPOLLOUT. */
static int
connect_nb(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        return -1;
    }
    set_nodelay(fd);
    if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static void
ep_add(int ep, int fd, uint32_t events, void *ptr)
{
    struct epoll_event ev = { .events = events, .data.ptr = ptr };

    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        die("epoll_ctl add: %s", strerror(errno));
    }
}

static void
ep_mod(int ep, int fd, uint32_t events, void *ptr)
{
    struct epoll_event ev = { .events = events, .data.ptr = ptr };

    epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
}

static void
timer_arm(int tfd, uint64_t at_mono_ns)
{
    struct itimerspec its = { 0 };

    if (at_mono_ns == 0) {
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL); /* disarm */
        return;
    }
    its.it_value.tv_sec = (time_t)(at_mono_ns / PB_NS);
    its.it_value.tv_nsec = (long)(at_mono_ns % PB_NS);
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) {
        its.it_value.tv_nsec = 1;
    }
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void
timer_ack(int tfd)
{
    uint64_t n;

    if (read(tfd, &n, sizeof(n)) < 0) {
        /* EAGAIN: nothing expired */
    }
}

/* An OpenAI chat body of about `target` bytes (the user message is padded). */
static char *
chat_body(size_t target, bool stream, unsigned max_tokens, size_t *len)
{
    static const char words[] = "the quick brown fox jumps over the lazy dog and keeps running ";
    char head[] = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"You are a "
                  "helpful assistant.\"},{\"role\":\"user\",\"content\":\"";
    char tail[160];
    size_t hl = strlen(head), tl, pad, n;
    char *b;

    snprintf(tail, sizeof(tail), "\"}],\"max_tokens\":%u,\"temperature\":0.7,\"stream\":%s}",
             max_tokens, stream ? "true" : "false");
    tl = strlen(tail);
    pad = target > hl + tl + 8 ? target - hl - tl : 8;
    n = hl + pad + tl;
    b = xmalloc(n + 1);
    memcpy(b, head, hl);
    for (size_t i = 0; i < pad; i++) {
        b[hl + i] = words[i % (sizeof(words) - 1)];
    }
    memcpy(b + hl + pad, tail, tl + 1);
    *len = n;
    return b;
}

/* The whole request (head and body) as one buffer. */
static char *
build_request(const char *path, const char *hostport, const char *body, size_t blen, size_t *len)
{
    char head[512];
    int hl = snprintf(head, sizeof(head),
                      "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: pbench\r\n"
                      "Content-Type: application/json\r\nAccept: */*\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      path, hostport, blen);
    char *r = xmalloc((size_t)hl + blen);

    memcpy(r, head, (size_t)hl);
    memcpy(r + hl, body, blen);
    *len = (size_t)hl + blen;
    return r;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/*
 * Percentile of a sorted array, in microseconds. Entries hold nanoseconds plus
 * `bias`: PB_SIGNED keeps signed values in order as unsigned ones.
 */
#define PB_SIGNED (1ull << 63)

static double
pct_us(const uint64_t *v, size_t n, double p, uint64_t bias)
{
    size_t i;

    if (n == 0) {
        return -1;
    }
    i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
    return (double)(int64_t)(v[i < n ? i : n - 1] - bias) / 1000.0;
}

static void
print_pcts(const char *name, uint64_t *v, size_t n, uint64_t bias)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    printf("\"%s\":{\"n\":%zu,\"p1\":%.1f,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,"
           "\"p999\":%.1f,\"max\":%.1f}",
           name, n, pct_us(v, n, 1, bias), pct_us(v, n, 50, bias), pct_us(v, n, 90, bias),
           pct_us(v, n, 99, bias), pct_us(v, n, 99.9, bias), pct_us(v, n, 100, bias));
}

/* A growable array of u64 samples. */
struct samples {
    uint64_t *v;
    size_t n;
    size_t cap;
};

static void
samples_add(struct samples *s, uint64_t x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 65536;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (s->v == NULL) {
            die("out of memory");
        }
    }
    s->v[s->n++] = x;
}

/* ---- client-side response parser --------------------------------------- */

enum { RP_HEAD = 0, RP_BODY, RP_CSIZE, RP_CDATA, RP_CCRLF, RP_TRAILER, RP_DONE };

struct resp {
    int state;
    int status;
    bool chunked;
    bool close;
    uint64_t left;
    size_t hlen;
    char head[4096];
};

typedef void pb_body_fn(void *arg, const char *p, size_t n);

static void
resp_reset(struct resp *r)
{
    r->state = RP_HEAD;
    r->status = 0;
    r->chunked = false;
    r->close = false;
    r->left = 0;
    r->hlen = 0;
}

static bool
hdr_is(const char *line, size_t n, const char *name)
{
    size_t k = strlen(name);

    return n > k && line[k] == ':' && strncasecmp(line, name, k) == 0;
}

static int
resp_parse_head(struct resp *r)
{
    const char *p = r->head, *end = r->head + r->hlen;
    bool have_len = false;

    if (r->hlen < 12 || strncmp(p, "HTTP/1.", 7) != 0) {
        return -1;
    }
    r->status = atoi(p + 9);
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t n;
        const char *v;

        if (eol == NULL) {
            break;
        }
        n = (size_t)(eol - p);
        v = memchr(p, ':', n);
        v = v ? v + 1 : eol;
        while (v < eol && *v == ' ') {
            v++;
        }
        if (hdr_is(p, n, "content-length")) {
            r->left = strtoull(v, NULL, 10);
            have_len = true;
        } else if (hdr_is(p, n, "transfer-encoding") && strncasecmp(v, "chunked", 7) == 0) {
            r->chunked = true;
        } else if (hdr_is(p, n, "connection") && strncasecmp(v, "close", 5) == 0) {
            r->close = true;
        }
        p = eol + 1;
    }
    if (r->status >= 100 && r->status < 200) {
        r->hlen = 0;
        return 0; /* interim: the real head follows */
    }
    if (r->chunked) {
        r->state = RP_CSIZE;
        r->hlen = 0;
    } else if (have_len) {
        r->state = r->left ? RP_BODY : RP_DONE;
    } else {
        return -1; /* close-delimited: none of the contenders sends it */
    }
    return 0;
}

/*
 * Feeds n bytes; body bytes go to fn. Returns 1 when the message ended
 * (*used = bytes consumed), 0 when more is needed, -1 on a framing error.
 */
static int
resp_feed(struct resp *r, const char *p, size_t n, size_t *used, pb_body_fn *fn, void *arg)
{
    size_t i = 0;

    while (i < n && r->state != RP_DONE) {
        switch (r->state) {
        case RP_HEAD:
        case RP_CSIZE:
        case RP_TRAILER: {
            char c = p[i++];

            if (r->hlen >= sizeof(r->head) - 1) {
                return -1;
            }
            r->head[r->hlen++] = c;
            if (c != '\n') {
                break;
            }
            if (r->state == RP_HEAD) {
                if (r->hlen >= 4 && memcmp(r->head + r->hlen - 4, "\r\n\r\n", 4) == 0
                    && resp_parse_head(r) != 0) {
                    return -1;
                }
            } else if (r->state == RP_CSIZE) {
                r->head[r->hlen] = '\0';
                r->left = strtoull(r->head, NULL, 16);
                r->hlen = 0;
                r->state = r->left ? RP_CDATA : RP_TRAILER;
            } else {
                if (r->hlen == 2) {
                    r->state = RP_DONE; /* the empty line after the last chunk */
                }
                r->hlen = 0;
            }
            break;
        }
        case RP_BODY:
        case RP_CDATA: {
            size_t k = n - i < r->left ? n - i : (size_t)r->left;

            if (fn) {
                fn(arg, p + i, k);
            }
            i += k;
            r->left -= k;
            if (r->left == 0) {
                r->state = r->state == RP_BODY ? RP_DONE : RP_CCRLF;
                r->hlen = 0;
            }
            break;
        }
        case RP_CCRLF:
            if (p[i++] == '\n') {
                r->state = RP_CSIZE;
            }
            break;
        default:
            return -1;
        }
    }
    *used = i;
    return r->state == RP_DONE;
}

/* Finds `"t":<digits>` stamps in a byte stream split anywhere. */
struct stamp_scan {
    uint8_t m;
    bool in_num;
    uint64_t v;
};

static int
stamp_feed(struct stamp_scan *s, char c, uint64_t *out)
{
    static const char pat[] = "\"t\":";

    if (s->in_num) {
        if (c >= '0' && c <= '9') {
            s->v = s->v * 10 + (uint64_t)(c - '0');
            return 0;
        }
        s->in_num = false;
        s->m = 0;
        *out = s->v;
        return 1;
    }
    if (c == pat[s->m]) {
        if (++s->m == 4) {
            s->in_num = true;
            s->v = 0;
        }
    } else {
        s->m = c == pat[0];
    }
    return 0;
}

/* ---- backend ------------------------------------------------------------ */

struct bconn {
    int fd;
    int state; /* 0: reading a head, 1: skipping a body */
    size_t len;
    uint64_t body_left;
    bool close_after;
    bool streaming;
    bool get;     /* the request is a GET: a health check or a scrape */
    bool metrics; /* GET /metrics */
    unsigned sent;
    uint64_t due; /* next SSE event, monotonic ns */
    size_t heap_i;
    char *out; /* backlog when the socket was full */
    size_t out_len;
    size_t out_cap;
    struct bconn *next_dead;
    char buf[PB_BUF];
};

static struct {
    int ep;
    int tfd;
    bool sse;
    unsigned events;
    uint64_t gap_ns;
    char *json_resp;
    size_t json_resp_len;
    struct bconn *dead; /* closed during this epoll batch, freed after it */
    struct bconn **heap;
    size_t nheap;
    size_t cap_heap;
    uint64_t requests;
    uint64_t gets; /* health checks and scrapes, not in requests */
    uint64_t events_sent;
} be;

static void
heap_swap(size_t a, size_t b)
{
    struct bconn *t = be.heap[a];

    be.heap[a] = be.heap[b];
    be.heap[b] = t;
    be.heap[a]->heap_i = a;
    be.heap[b]->heap_i = b;
}

static void
heap_push(struct bconn *c)
{
    size_t i;

    if (be.nheap == be.cap_heap) {
        be.cap_heap = be.cap_heap ? be.cap_heap * 2 : 1024;
        be.heap = realloc(be.heap, be.cap_heap * sizeof(*be.heap));
        if (be.heap == NULL) {
            die("out of memory");
        }
    }
    i = be.nheap++;
    be.heap[i] = c;
    c->heap_i = i;
    while (i > 0 && be.heap[(i - 1) / 2]->due > be.heap[i]->due) {
        heap_swap(i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void
heap_remove(size_t i)
{
    be.nheap--;
    if (i != be.nheap) {
        heap_swap(i, be.nheap);
        for (;;) {
            size_t l = 2 * i + 1, r = l + 1, m = i;

            if (l < be.nheap && be.heap[l]->due < be.heap[m]->due) {
                m = l;
            }
            if (r < be.nheap && be.heap[r]->due < be.heap[m]->due) {
                m = r;
            }
            if (m == i) {
                break;
            }
            heap_swap(i, m);
            i = m;
        }
        while (i > 0 && be.heap[(i - 1) / 2]->due > be.heap[i]->due) {
            heap_swap(i, (i - 1) / 2);
            i = (i - 1) / 2;
        }
    }
}

static void
be_close(struct bconn *c)
{
    if (c->fd < 0) {
        return;
    }
    if (c->streaming) {
        heap_remove(c->heap_i);
        c->streaming = false;
    }
    close(c->fd);
    c->fd = -1;
    c->next_dead = be.dead;
    be.dead = c;
}

/* Writes or queues; returns -1 if the connection is dead. */
static int
be_send(struct bconn *c, const char *p, size_t n)
{
    if (c->out_len == 0) {
        ssize_t w = write(c->fd, p, n);

        if (w < 0 && errno != EAGAIN) {
            return -1;
        }
        if (w < 0) {
            w = 0;
        }
        p += w;
        n -= (size_t)w;
        if (n == 0) {
            return 0;
        }
        ep_mod(be.ep, c->fd, EPOLLIN | EPOLLOUT, c);
    }
    if (c->out_len + n > c->out_cap) {
        c->out_cap = (c->out_len + n) * 2;
        c->out = realloc(c->out, c->out_cap);
        if (c->out == NULL) {
            die("out of memory");
        }
    }
    memcpy(c->out + c->out_len, p, n);
    c->out_len += n;
    return 0;
}

static int
be_flush(struct bconn *c)
{
    ssize_t w = write(c->fd, c->out, c->out_len);

    if (w < 0) {
        return errno == EAGAIN ? 0 : -1;
    }
    memmove(c->out, c->out + w, c->out_len - (size_t)w);
    c->out_len -= (size_t)w;
    if (c->out_len == 0) {
        ep_mod(be.ep, c->fd, EPOLLIN, c);
    }
    return 0;
}

static void
be_rearm_timer(void)
{
    timer_arm(be.tfd, be.nheap ? be.heap[0]->due : 0);
}

static const char be_sse_head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                  "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";

/* One SSE event as one HTTP chunk, stamped just before the write. */
static int
be_send_event(struct bconn *c)
{
    char data[512], chunk[600];
    int dn, cn;

    if (c->sent < be.events) {
        dn = snprintf(data, sizeof(data),
                      "data: {\"id\":\"chatcmpl-pbench\",\"object\":\"chat.completion.chunk\","
                      "\"created\":1700000000,\"model\":\"m\",\"choices\":[{\"index\":0,"
                      "\"delta\":{\"content\":\" tok\"},\"finish_reason\":null}],"
                      "\"t\":%" PRIu64 "}\n\n",
                      real_ns());
        cn = snprintf(chunk, sizeof(chunk), "%x\r\n%s\r\n", dn, data);
        c->sent++;
        be.events_sent++;
        return be_send(c, chunk, (size_t)cn);
    }
    dn = snprintf(data, sizeof(data),
                  "data: {\"id\":\"chatcmpl-pbench\",\"object\":\"chat.completion.chunk\","
                  "\"created\":1700000000,\"model\":\"m\",\"choices\":[{\"index\":0,"
                  "\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":42,"
                  "\"completion_tokens\":%u,\"total_tokens\":%u}}\n\ndata: [DONE]\n\n",
                  be.events, be.events + 42);
    cn = snprintf(chunk, sizeof(chunk), "%x\r\n%s\r\n0\r\n\r\n", dn, data);
    c->streaming = false;
    return be_send(c, chunk, (size_t)cn);
}

static void
be_on_timer(void)
{
    uint64_t now = mono_ns();

    timer_ack(be.tfd);
    while (be.nheap > 0 && be.heap[0]->due <= now) {
        struct bconn *c = be.heap[0];

        heap_remove(0);
        if (be_send_event(c) != 0) {
            c->streaming = false; /* already out of the heap */
            be_close(c);
            continue;
        }
        if (c->streaming) {
            c->due += be.gap_ns;
            heap_push(c);
        } else if (c->close_after) {
            be_close(c);
        }
    }
    be_rearm_timer();
}

/*
 * A GET is a proxy's health check or engine scrape (llmgate's by default):
 * /metrics answers as vLLM does, with what runs now (the streams open; a
 * JSON answer leaves at once), anything else a small JSON 200.
 */
static int
be_respond_get(struct bconn *c)
{
    char body[512], out[700];
    int bn, on;

    be.gets++;
    if (c->metrics) {
        bn = snprintf(body, sizeof(body),
                      "# TYPE vllm:num_requests_running gauge\n"
                      "vllm:num_requests_running{model_name=\"m\"} %zu\n"
                      "# TYPE vllm:num_requests_waiting gauge\n"
                      "vllm:num_requests_waiting{model_name=\"m\"} 0\n"
                      "# TYPE vllm:gpu_cache_usage_perc gauge\n"
                      "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.05\n",
                      be.nheap);
    } else {
        bn = snprintf(body, sizeof(body), "{}");
    }
    on = snprintf(out, sizeof(out),
                  "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
                  c->metrics ? "text/plain; version=0.0.4" : "application/json", bn, body);
    if (be_send(c, out, (size_t)on) != 0) {
        return -1;
    }
    return c->close_after && c->out_len == 0 ? -1 : 0;
}

/* A whole request (head and body) was read. Returns -1 to close. */
static int
be_respond(struct bconn *c)
{
    if (c->get) {
        return be_respond_get(c);
    }
    be.requests++;
    if (!be.sse) {
        if (be_send(c, be.json_resp, be.json_resp_len) != 0) {
            return -1;
        }
        return c->close_after && c->out_len == 0 ? -1 : 0;
    }
    if (be_send(c, be_sse_head, sizeof(be_sse_head) - 1) != 0) {
        return -1;
    }
    c->streaming = true;
    c->sent = 0;
    c->due = mono_ns() + be.gap_ns;
    heap_push(c);
    be_rearm_timer();
    return 0;
}

/* Parses what is buffered: heads, skipped bodies, pipelined requests. */
static int
be_process(struct bconn *c)
{
    for (;;) {
        if (c->state == 1) {
            size_t k = c->len < c->body_left ? c->len : (size_t)c->body_left;

            memmove(c->buf, c->buf + k, c->len - k);
            c->len -= k;
            c->body_left -= k;
            if (c->body_left > 0) {
                return 0;
            }
            c->state = 0;
            if (be_respond(c) != 0) {
                return -1;
            }
            continue;
        }
        if (c->streaming) {
            return 0; /* the next request waits for this stream to end */
        }
        {
            char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
            char *p, *hend;

            if (end == NULL) {
                return c->len == sizeof(c->buf) ? -1 : 0;
            }
            hend = end + 4;
            c->body_left = 0;
            c->get = c->len >= 4 && memcmp(c->buf, "GET ", 4) == 0;
            c->metrics = c->get && c->len >= 13 && memcmp(c->buf + 4, "/metrics", 8) == 0
                         && (c->buf[12] == ' ' || c->buf[12] == '?');
            for (p = c->buf; p < end;) {
                char *eol = memchr(p, '\n', (size_t)(end + 2 - p));
                size_t n = eol ? (size_t)(eol - p) : 0;

                if (eol == NULL) {
                    break;
                }
                if (hdr_is(p, n, "content-length")) {
                    c->body_left = strtoull(p + 15, NULL, 10);
                } else if (hdr_is(p, n, "transfer-encoding")) {
                    return -1; /* every contender sends Content-Length */
                } else if (hdr_is(p, n, "connection") && memmem(p, n, "close", 5) != NULL) {
                    c->close_after = true;
                }
                p = eol + 1;
            }
            memmove(c->buf, hend, c->len - (size_t)(hend - c->buf));
            c->len -= (size_t)(hend - c->buf);
            c->state = 1;
        }
    }
}

static void
be_on_conn(struct bconn *c, uint32_t events)
{
    if (c->fd < 0) {
        return; /* closed earlier in this batch */
    }
    if (events & EPOLLOUT) {
        if (be_flush(c) != 0) {
            be_close(c);
            return;
        }
        if (c->out_len == 0 && c->close_after && !c->streaming) {
            be_close(c);
            return;
        }
    }
    if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        return;
    }
    for (;;) {
        ssize_t r;

        if (c->len == sizeof(c->buf)) {
            if (c->streaming) {
                return; /* a client sent more while streaming; leave it */
            }
            be_close(c);
            return;
        }
        r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
        if (r == 0 || (r < 0 && errno != EAGAIN)) {
            be_close(c);
            return;
        }
        if (r < 0) {
            return;
        }
        c->len += (size_t)r;
        if (be_process(c) != 0) {
            be_close(c);
            return;
        }
        if ((size_t)r < sizeof(c->buf) / 2) {
            return; /* drained, most likely: skip the EAGAIN read */
        }
    }
}

static volatile sig_atomic_t pb_stop;

static void
on_signal(int sig)
{
    (void)sig;
    pb_stop = 1;
}

static void
be_make_json(size_t target)
{
    static const char words[] = "Sure. Here is a short answer to your question, with some detail. ";
    const char *h = "{\"id\":\"chatcmpl-pbench-0001\",\"object\":\"chat.completion\","
                    "\"created\":1700000000,\"model\":\"m\",\"system_fingerprint\":\"fp_pb\","
                    "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                    "\"content\":\"";
    const char *t = "\"},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{"
                    "\"prompt_tokens\":42,\"completion_tokens\":64,\"total_tokens\":106}}";
    size_t hl = strlen(h), tl = strlen(t);
    size_t pad = target > hl + tl + 8 ? target - hl - tl : 8;
    size_t blen = hl + pad + tl;
    char head[200];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     blen);

    be.json_resp_len = (size_t)n + blen;
    be.json_resp = xmalloc(be.json_resp_len);
    memcpy(be.json_resp, head, (size_t)n);
    memcpy(be.json_resp + n, h, hl);
    for (size_t i = 0; i < pad; i++) {
        be.json_resp[(size_t)n + hl + i] = words[i % (sizeof(words) - 1)];
    }
    memcpy(be.json_resp + (size_t)n + hl + pad, t, tl);
}

static int
cmd_backend(int argc, char **argv)
{
    static const struct option opts[] = {
        { "listen", required_argument, NULL, 'l' },     { "sse", no_argument, NULL, 's' },
        { "events", required_argument, NULL, 'e' },     { "gap-us", required_argument, NULL, 'g' },
        { "json-bytes", required_argument, NULL, 'j' }, { NULL, 0, NULL, 0 },
    };
    const char *listen_at = "127.0.0.1:0";
    struct sockaddr_in sa;
    socklen_t slen = sizeof(sa);
    size_t json_bytes = 500;
    struct epoll_event evs[PB_MAX_EVENTS];
    int lfd, one = 1, o;

    be.events = 64;
    be.gap_ns = 10000000;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'l':
            listen_at = optarg;
            break;
        case 's':
            be.sse = true;
            break;
        case 'e':
            be.events = (unsigned)atoi(optarg);
            break;
        case 'g':
            be.gap_ns = strtoull(optarg, NULL, 10) * 1000;
            break;
        case 'j':
            json_bytes = strtoul(optarg, NULL, 10);
            break;
        default:
            return 2;
        }
    }
    be_make_json(json_bytes);
    parse_addr(listen_at, &sa);
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 4096) != 0) {
        die("cannot listen on %s: %s", listen_at, strerror(errno));
    }
    getsockname(lfd, (struct sockaddr *)&sa, &slen);
    be.ep = epoll_create1(EPOLL_CLOEXEC);
    be.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ep_add(be.ep, lfd, EPOLLIN, &tag_listen);
    ep_add(be.ep, be.tfd, EPOLLIN, &tag_timer);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    printf("pbench backend ready listen=127.0.0.1:%u mode=%s\n", ntohs(sa.sin_port),
           be.sse ? "sse" : "json");
    fflush(stdout);
    while (!pb_stop) {
        int n = epoll_wait(be.ep, evs, PB_MAX_EVENTS, -1);

        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;

            if (p == &tag_listen) {
                int fd;

                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    struct bconn *c = xcalloc(1, sizeof(*c));

                    c->fd = fd;
                    set_nodelay(fd);
                    ep_add(be.ep, fd, EPOLLIN, c);
                }
            } else if (p == &tag_timer) {
                be_on_timer();
            } else {
                be_on_conn(p, evs[i].events);
            }
        }
        while (be.dead != NULL) {
            struct bconn *c = be.dead;

            be.dead = c->next_dead;
            free(c->out);
            free(c);
        }
    }
    fprintf(stderr,
            "pbench backend: %" PRIu64 " requests, %" PRIu64 " events, %" PRIu64
            " health checks and scrapes\n",
            be.requests, be.events_sent, be.gets);
    return 0;
}

/* ---- load: open loop at a fixed rate ------------------------------------ */

/*
 * Requests are scheduled on one clock: tick k at t0 + k * interval. A pool
 * is one target's connections and the ticks waiting for one of them. With
 * --pair, every --pair-every'th tick also sends the same request to a second
 * target (the backend itself, for a proxy under test) at the same moment,
 * the two sent in alternating order; each tick answered by both gives one
 * paired difference. A host stall delays both requests of a pair, so the
 * differences show the latency the proxy adds without the machine's own
 * pauses, which on a shared VM decide the p99 of either taken alone.
 */
struct lpool;

struct lconn {
    struct lpool *pool;
    int fd;
    bool connected;
    bool busy;
    uint64_t tick;
    size_t woff;
    struct resp r;
};

struct lpool {
    struct sockaddr_in sa;
    struct lconn *conns;
    unsigned nconns;
    struct lconn **idle;
    unsigned nidle;
    uint64_t *pending; /* ring of ticks waiting for a connection */
    size_t pcap, phead, plen;
    unsigned nbusy;
    uint64_t ok, errors, dropped, late, sent, reconnects;
    struct samples lat;
    uint64_t *by_tick; /* with --pair: latency of tick k's answer, 0 = none */
};

static struct {
    int ep;
    int tfd;
    char *req;
    size_t req_len;
    uint64_t t0, interval, t_warm;
    uint64_t armed;
    struct lpool pool[2]; /* the target; the pair target */
    unsigned npools;
} ld;

static void
ld_write(struct lconn *c)
{
    while (c->woff < ld.req_len) {
        ssize_t w = write(c->fd, ld.req + c->woff, ld.req_len - c->woff);

        if (w < 0) {
            if (errno == EAGAIN) {
                ep_mod(ld.ep, c->fd, EPOLLIN | EPOLLOUT, c);
            }
            return;
        }
        c->woff += (size_t)w;
    }
    ep_mod(ld.ep, c->fd, EPOLLIN, c);
}

static void
ld_dispatch(struct lpool *p)
{
    while (p->plen > 0 && p->nidle > 0) {
        struct lconn *c = p->idle[--p->nidle];

        c->tick = p->pending[p->phead];
        p->phead = (p->phead + 1) % p->pcap;
        p->plen--;
        c->busy = true;
        p->nbusy++;
        c->woff = 0;
        resp_reset(&c->r);
        p->sent++;
        ld_write(c);
    }
}

static void
ld_enqueue(struct lpool *p, uint64_t k)
{
    if (p->plen == p->pcap) {
        p->dropped++;
    } else {
        p->pending[(p->phead + p->plen) % p->pcap] = k;
        p->plen++;
    }
    if (p->nidle == 0) {
        p->late++;
    }
}

static void
ld_reconnect(struct lconn *c)
{
    struct lpool *p = c->pool;

    if (c->fd >= 0) {
        close(c->fd);
    }
    if (c->busy) {
        p->nbusy--;
    }
    c->busy = false;
    c->connected = false;
    c->fd = connect_nb(&p->sa);
    p->reconnects++;
    if (c->fd < 0) {
        die("connect: %s", strerror(errno));
    }
    ep_add(ld.ep, c->fd, EPOLLOUT, c);
}

static void
ld_on_conn(struct lconn *c, uint32_t events)
{
    static char buf[PB_BUF];
    struct lpool *p = c->pool;

    if (!c->connected) {
        int err = 0;
        socklen_t l = sizeof(err);

        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err != 0) {
            die("connect: %s", strerror(err));
        }
        c->connected = true;
        ep_mod(ld.ep, c->fd, EPOLLIN, c);
        p->idle[p->nidle++] = c;
        ld_dispatch(p);
        return;
    }
    if ((events & EPOLLOUT) && c->busy) {
        ld_write(c);
    }
    if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        return;
    }
    for (;;) {
        ssize_t n = read(c->fd, buf, sizeof(buf));
        size_t used;
        int rc;

        if (n < 0 && errno == EAGAIN) {
            return;
        }
        if (n <= 0 || !c->busy) {
            if (c->busy) {
                p->errors++;
            }
            ld_reconnect(c);
            return;
        }
        rc = resp_feed(&c->r, buf, (size_t)n, &used, NULL, NULL);
        if (rc < 0 || (rc == 1 && used != (size_t)n)) {
            p->errors++;
            ld_reconnect(c);
            return;
        }
        if (rc == 1) {
            uint64_t sched = ld.t0 + c->tick * ld.interval;
            uint64_t lat = mono_ns() - sched;

            if (c->r.status == 200) {
                p->ok++;
                if (p->by_tick != NULL) {
                    p->by_tick[c->tick] = lat > 0 ? lat : 1;
                }
            } else {
                p->errors++;
            }
            if (sched >= ld.t_warm) {
                samples_add(&p->lat, lat);
            }
            c->busy = false;
            p->nbusy--;
            if (c->r.close) {
                ld_reconnect(c);
                return;
            }
            p->idle[p->nidle++] = c;
            ld_dispatch(p);
            return;
        }
    }
}

static void
ld_pool_open(struct lpool *p, const char *target, unsigned nconns, size_t ticks, bool by_tick)
{
    parse_addr(target, &p->sa);
    p->nconns = nconns;
    p->conns = xcalloc(nconns, sizeof(*p->conns));
    p->idle = xcalloc(nconns, sizeof(*p->idle));
    p->pcap = ticks;
    p->pending = xcalloc(ticks, sizeof(*p->pending));
    p->by_tick = by_tick ? xcalloc(ticks, sizeof(*p->by_tick)) : NULL;
    for (unsigned i = 0; i < nconns; i++) {
        p->conns[i].pool = p;
        p->conns[i].fd = -1;
        ld_reconnect(&p->conns[i]);
    }
    p->reconnects = 0;
}

static void
ld_pool_close(struct lpool *p)
{
    for (unsigned i = 0; i < p->nconns; i++) {
        close(p->conns[i].fd);
    }
    free(p->conns);
    free(p->idle);
    free(p->pending);
    free(p->by_tick);
    free(p->lat.v);
}

static void
ld_print_pool(const struct lpool *p, double duration)
{
    printf("\"sent\":%" PRIu64 ",\"ok\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"dropped\":%" PRIu64
           ",\"late\":%" PRIu64 ",\"reconnects\":%" PRIu64 ",\"achieved_rps\":%.1f,",
           p->sent, p->ok, p->errors, p->dropped, p->late, p->reconnects,
           (double)p->lat.n / duration);
    print_pcts("latency_us", p->lat.v, p->lat.n, 0);
}

/* Percentiles of the paired differences (target minus pair target) of the
 * ticks in [first, last) that both answered. */
static void
ld_print_added(uint64_t first, uint64_t last)
{
    uint64_t *d = xcalloc(last > first ? last - first : 1, sizeof(*d));
    size_t n = 0;

    for (uint64_t k = first; k < last; k++) {
        if (ld.pool[0].by_tick[k] != 0 && ld.pool[1].by_tick[k] != 0) {
            d[n++] = ld.pool[0].by_tick[k] - ld.pool[1].by_tick[k] + PB_SIGNED;
        }
    }
    print_pcts("added_us", d, n, PB_SIGNED);
    free(d);
}

static int
cmd_load(int argc, char **argv)
{
    static const struct option opts[] = {
        { "target", required_argument, NULL, 't' },
        { "path", required_argument, NULL, 'p' },
        { "body-bytes", required_argument, NULL, 'b' },
        { "conns", required_argument, NULL, 'c' },
        { "rate", required_argument, NULL, 'r' },
        { "duration", required_argument, NULL, 'd' },
        { "warmup", required_argument, NULL, 'w' },
        { "pair", required_argument, NULL, 'P' },
        { "pair-every", required_argument, NULL, 'E' },
        { NULL, 0, NULL, 0 },
    };
    const char *target = NULL, *pair = NULL, *path = "/v1/chat/completions";
    size_t body_bytes = 300, blen, ticks;
    double rate = 1000, duration = 5, warmup = 1;
    unsigned nconns = 64, every = 1;
    struct epoll_event evs[PB_MAX_EVENTS];
    uint64_t t_end, k = 0, k_warm;
    char *body;
    int o;

    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 't':
            target = optarg;
            break;
        case 'p':
            path = optarg;
            break;
        case 'b':
            body_bytes = strtoul(optarg, NULL, 10);
            break;
        case 'c':
            nconns = (unsigned)atoi(optarg);
            break;
        case 'r':
            rate = atof(optarg);
            break;
        case 'd':
            duration = atof(optarg);
            break;
        case 'w':
            warmup = atof(optarg);
            break;
        case 'P':
            pair = optarg;
            break;
        case 'E':
            every = (unsigned)atoi(optarg);
            break;
        default:
            return 2;
        }
    }
    if (target == NULL || rate <= 0 || nconns == 0 || every == 0) {
        die("load: --target and a positive --rate, --conns and --pair-every are required");
    }
    raise_nofile();
    signal(SIGPIPE, SIG_IGN);
    body = chat_body(body_bytes, false, 64, &blen);
    ld.req = build_request(path, target, body, blen, &ld.req_len);
    free(body);
    ld.ep = epoll_create1(EPOLL_CLOEXEC);
    ld.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ep_add(ld.ep, ld.tfd, EPOLLIN, &tag_timer);
    ticks = (size_t)(rate * (duration + warmup)) + 16;
    ld.npools = pair != NULL ? 2 : 1;
    ld_pool_open(&ld.pool[0], target, nconns, ticks, pair != NULL);
    if (pair != NULL) {
        ld_pool_open(&ld.pool[1], pair, nconns, ticks, true);
    }
    /* every connection up before the clock starts */
    for (unsigned i = 0; i < ld.npools; i++) {
        while (ld.pool[i].nidle < ld.pool[i].nconns) {
            int n = epoll_wait(ld.ep, evs, PB_MAX_EVENTS, 5000);

            if (n <= 0) {
                die("load: connections did not complete");
            }
            for (int j = 0; j < n; j++) {
                if (evs[j].data.ptr != &tag_timer) {
                    ld_on_conn(evs[j].data.ptr, evs[j].events);
                }
            }
        }
    }
    ld.interval = (uint64_t)(1e9 / rate);
    ld.t0 = mono_ns() + 1000000;
    ld.t_warm = ld.t0 + (uint64_t)(warmup * 1e9);
    t_end = ld.t_warm + (uint64_t)(duration * 1e9);
    k_warm = (ld.t_warm - ld.t0 + ld.interval - 1) / ld.interval;
    timer_arm(ld.tfd, ld.t0);
    for (;;) {
        uint64_t now = mono_ns(), next, at;
        unsigned busy = 0;
        int n;

        while ((next = ld.t0 + k * ld.interval) <= now && next < t_end && k < ticks) {
            bool paired = ld.npools == 2 && k % every == 0;
            unsigned first = paired && (k / every) % 2 == 1 ? 1 : 0;

            ld_enqueue(&ld.pool[0], k);
            if (paired) {
                ld_enqueue(&ld.pool[1], k);
                ld_dispatch(&ld.pool[first]);
                ld_dispatch(&ld.pool[1 - first]);
            } else {
                ld_dispatch(&ld.pool[0]);
            }
            k++;
        }
        for (unsigned i = 0; i < ld.npools; i++) {
            busy += ld.pool[i].nbusy + (unsigned)ld.pool[i].plen;
        }
        if ((next >= t_end || k >= ticks) && busy == 0) {
            break;
        }
        if (now > t_end + 10 * PB_NS) {
            for (unsigned i = 0; i < ld.npools; i++) {
                ld.pool[i].errors += (uint64_t)ld.pool[i].nbusy + ld.pool[i].plen; /* never answered */
            }
            break;
        }
        at = next < t_end ? next : now + 100000000;
        if (at != ld.armed) {
            timer_arm(ld.tfd, at);
            ld.armed = at;
        }
        n = epoll_wait(ld.ep, evs, PB_MAX_EVENTS, -1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &tag_timer) {
                timer_ack(ld.tfd);
                ld.armed = 0;
            } else {
                ld_on_conn(evs[i].data.ptr, evs[i].events);
            }
        }
    }
    printf("{\"rate\":%.1f,\"conns\":%u,\"request_bytes\":%zu,", rate, nconns, ld.req_len);
    ld_print_pool(&ld.pool[0], duration);
    if (pair != NULL) {
        printf(",\"pair\":{\"every\":%u,", every);
        ld_print_pool(&ld.pool[1], duration);
        printf("},");
        ld_print_added(k_warm, k);
    }
    printf("}\n");
    for (unsigned i = 0; i < ld.npools; i++) {
        ld_pool_close(&ld.pool[i]);
    }
    free(ld.req);
    return 0;
}

/* ---- sse: per-event delay ---------------------------------------------- */

struct sconn {
    int fd;
    bool connected;
    size_t woff;
    struct resp r;
    struct stamp_scan scan;
    uint64_t rx_real; /* kernel receive time of the current read */
};

static struct {
    int ep;
    struct sockaddr_in sa;
    char *req;
    size_t req_len;
    bool window;
    bool stopping;
    uint64_t events, responses, errors, no_ts;
    struct samples delay;
} sc;

static void
sc_on_body(void *arg, const char *p, size_t n)
{
    struct sconn *c = arg;

    for (size_t i = 0; i < n; i++) {
        uint64_t stamp;

        if (stamp_feed(&c->scan, p[i], &stamp) && sc.window) {
            sc.events++;
            samples_add(&sc.delay, c->rx_real > stamp ? c->rx_real - stamp : 0);
        }
    }
}

static void
sc_send(struct sconn *c)
{
    while (c->woff < sc.req_len) {
        ssize_t w = write(c->fd, sc.req + c->woff, sc.req_len - c->woff);

        if (w < 0) {
            return; /* the request is small: a full socket here means trouble */
        }
        c->woff += (size_t)w;
    }
}

static void
sc_open(struct sconn *c)
{
    int one = 1;

    c->fd = connect_nb(&sc.sa);
    if (c->fd < 0) {
        die("connect: %s", strerror(errno));
    }
    setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    c->connected = false;
    ep_add(sc.ep, c->fd, EPOLLOUT, c);
}

static void
sc_start(struct sconn *c)
{
    resp_reset(&c->r);
    memset(&c->scan, 0, sizeof(c->scan));
    c->woff = 0;
    sc_send(c);
}

static void
sc_on_conn(struct sconn *c, uint32_t events)
{
    char buf[PB_BUF];
    char ctl[256];

    if (!c->connected) {
        int err = 0;
        socklen_t l = sizeof(err);

        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err != 0) {
            die("connect: %s", strerror(err));
        }
        c->connected = true;
        ep_mod(sc.ep, c->fd, EPOLLIN, c);
        sc_start(c);
        return;
    }
    for (;;) {
        struct iovec iov = { buf, sizeof(buf) };
        struct msghdr mh = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)
        };
        ssize_t n = recvmsg(c->fd, &mh, 0);
        size_t off = 0;

        if (n < 0 && errno == EAGAIN) {
            return;
        }
        if (n <= 0) {
            if (!sc.stopping) {
                sc.errors++;
            }
            epoll_ctl(sc.ep, EPOLL_CTL_DEL, c->fd, NULL);
            close(c->fd);
            if (!sc.stopping) {
                sc_open(c);
            }
            return;
        }
        c->rx_real = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;

                memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
                c->rx_real = (uint64_t)ts.tv_sec * PB_NS + (uint64_t)ts.tv_nsec;
            }
        }
        if (c->rx_real == 0) {
            c->rx_real = real_ns();
            sc.no_ts++;
        }
        while (off < (size_t)n) {
            size_t used;
            int rc = resp_feed(&c->r, buf + off, (size_t)n - off, &used, sc_on_body, c);

            off += used;
            if (rc < 0 || (rc == 1 && c->r.status != 200)) {
                sc.errors++;
                epoll_ctl(sc.ep, EPOLL_CTL_DEL, c->fd, NULL);
                close(c->fd);
                sc_open(c);
                return;
            }
            if (rc == 1) {
                sc.responses++;
                if (off != (size_t)n) {
                    sc.errors++; /* bytes after the end of the response */
                }
                if (!sc.stopping) {
                    sc_start(c);
                }
                break;
            }
        }
    }
}

static int
cmd_sse(int argc, char **argv)
{
    static const struct option opts[] = {
        { "target", required_argument, NULL, 't' },
        { "path", required_argument, NULL, 'p' },
        { "streams", required_argument, NULL, 's' },
        { "duration", required_argument, NULL, 'd' },
        { "warmup", required_argument, NULL, 'w' },
        { "spread-us", required_argument, NULL, 'S' },
        { NULL, 0, NULL, 0 },
    };
    const char *target = NULL, *path = "/v1/chat/completions";
    uint64_t spread_ns = 0, t_open;
    unsigned streams = 100, opened = 0;
    double duration = 5, warmup = 1;
    struct epoll_event evs[PB_MAX_EVENTS];
    struct sconn *conns;
    uint64_t t_warm, t_end, t_win;
    size_t blen;
    char *body;
    int o, tfd;

    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 't':
            target = optarg;
            break;
        case 'p':
            path = optarg;
            break;
        case 's':
            streams = (unsigned)atoi(optarg);
            break;
        case 'd':
            duration = atof(optarg);
            break;
        case 'w':
            warmup = atof(optarg);
            break;
        case 'S':
            spread_ns = strtoull(optarg, NULL, 10) * 1000;
            break;
        default:
            return 2;
        }
    }
    if (target == NULL || streams == 0) {
        die("sse: --target and --streams are required");
    }
    raise_nofile();
    signal(SIGPIPE, SIG_IGN);
    parse_addr(target, &sc.sa);
    body = chat_body(300, true, 64, &blen);
    sc.req = build_request(path, target, body, blen, &sc.req_len);
    free(body);
    sc.ep = epoll_create1(EPOLL_CLOEXEC);
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ep_add(sc.ep, tfd, EPOLLIN, &tag_timer);
    conns = xcalloc(streams, sizeof(*conns));
    /*
     * Streams start spread evenly over --spread-us (one event gap), so that
     * their events reach the proxy evenly instead of in bursts; each stream
     * keeps its phase, as the next request follows the previous response.
     */
    t_open = mono_ns();
    t_warm = t_open + (uint64_t)(warmup * 1e9) + spread_ns;
    t_end = t_warm + (uint64_t)(duration * 1e9);
    t_win = 0;
    while (mono_ns() < t_end) {
        int n;

        while (opened < streams && mono_ns() >= t_open + spread_ns * opened / streams) {
            sc_open(&conns[opened++]);
        }
        timer_arm(tfd, opened < streams ? t_open + spread_ns * opened / streams
                       : sc.window      ? t_end
                                        : t_warm);
        n = epoll_wait(sc.ep, evs, PB_MAX_EVENTS, -1);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &tag_timer) {
                timer_ack(tfd);
                if (!sc.window && mono_ns() >= t_warm) {
                    sc.window = true;
                    t_win = mono_ns();
                    printf("pbench window start\n");
                    fflush(stdout);
                }
            } else {
                sc_on_conn(evs[i].data.ptr, evs[i].events);
            }
        }
    }
    sc.window = false;
    sc.stopping = true;
    printf("pbench window end\n");
    printf("{\"streams\":%u,\"window_s\":%.3f,\"events\":%" PRIu64 ",\"responses\":%" PRIu64
           ",\"errors\":%" PRIu64 ",\"no_kernel_ts\":%" PRIu64 ",\"events_per_s\":%.1f,",
           streams, (double)(mono_ns() - t_win) / 1e9, sc.events, sc.responses, sc.errors, sc.no_ts,
           (double)sc.events * 1e9 / (double)(mono_ns() - t_win));
    print_pcts("delay_us", sc.delay.v, sc.delay.n, 0);
    printf("}\n");
    fflush(stdout);
    for (unsigned i = 0; i < opened; i++) {
        close(conns[i].fd);
    }
    free(conns);
    free(sc.delay.v);
    free(sc.req);
    return 0;
}

/* ---- hold: idle connections and long streams ---------------------------- */

enum { HC_CONNECTING = 0, HC_REQUEST, HC_IDLE, HC_STREAM, HC_DEAD };

struct hconn {
    int fd;
    int state;
    bool stream;
    bool counted; /* setup finished (ok or failed) */
    size_t woff;
    uint64_t events;
    uint8_t m; /* "data:" matcher */
    struct resp r;
};

static struct {
    int ep;
    struct sockaddr_in sa;
    char *idle_req, *stream_req;
    size_t idle_len, stream_len;
    struct hconn **conns;
    size_t n, cap;
    unsigned inflight, max_inflight;
    size_t want_idle, want_streams; /* still to open */
    size_t idle_ok, idle_err, idle_closed;
    size_t stream_ok, stream_err, stream_cut, stream_ended;
    bool pending_idle, pending_streams;
} hd;

static void
hd_report(void)
{
    if (hd.pending_idle && hd.want_idle == 0 && hd.inflight == 0) {
        printf("idle done ok=%zu errors=%zu\n", hd.idle_ok, hd.idle_err);
        fflush(stdout);
        hd.pending_idle = false;
    }
    if (hd.pending_streams && hd.want_streams == 0 && hd.inflight == 0) {
        printf("streams done ok=%zu errors=%zu\n", hd.stream_ok, hd.stream_err);
        fflush(stdout);
        hd.pending_streams = false;
    }
}

static void
hd_setup_done(struct hconn *c, bool ok)
{
    if (c->counted) {
        return;
    }
    c->counted = true;
    hd.inflight--;
    if (c->stream) {
        ok ? hd.stream_ok++ : hd.stream_err++;
    } else {
        ok ? hd.idle_ok++ : hd.idle_err++;
    }
}

static void
hd_kill(struct hconn *c)
{
    if (c->state == HC_DEAD) {
        return;
    }
    if (!c->counted) {
        hd_setup_done(c, false);
    } else if (c->state == HC_IDLE) {
        hd.idle_closed++;
    } else if (c->state == HC_STREAM) {
        hd.stream_cut++;
    }
    c->state = HC_DEAD;
    epoll_ctl(hd.ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
}

static void
hd_open_more(void)
{
    while (hd.inflight < hd.max_inflight && (hd.want_idle > 0 || hd.want_streams > 0)) {
        struct hconn *c = xcalloc(1, sizeof(*c));

        c->stream = hd.want_idle == 0;
        c->stream ? hd.want_streams-- : hd.want_idle--;
        c->fd = connect_nb(&hd.sa);
        hd.inflight++;
        if (hd.n == hd.cap) {
            hd.cap = hd.cap ? hd.cap * 2 : 4096;
            hd.conns = realloc(hd.conns, hd.cap * sizeof(*hd.conns));
            if (hd.conns == NULL) {
                die("out of memory");
            }
        }
        hd.conns[hd.n++] = c;
        if (c->fd < 0) {
            c->counted = true;
            hd.inflight--;
            c->stream ? hd.stream_err++ : hd.idle_err++;
            c->state = HC_DEAD;
            continue;
        }
        ep_add(hd.ep, c->fd, EPOLLOUT, c);
    }
}

static void
hd_on_body(void *arg, const char *p, size_t n)
{
    struct hconn *c = arg;
    static const char pat[] = "data:";

    for (size_t i = 0; i < n; i++) {
        if (p[i] == pat[c->m]) {
            if (++c->m == 5) {
                c->events++;
                c->m = 0;
            }
        } else {
            c->m = p[i] == 'd';
        }
    }
}

static void
hd_on_conn(struct hconn *c, uint32_t events)
{
    char buf[PB_BUF];

    if (c->state == HC_CONNECTING) {
        int err = 0;
        socklen_t l = sizeof(err);

        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err != 0) {
            hd_kill(c);
            return;
        }
        c->state = HC_REQUEST;
        resp_reset(&c->r);
        ep_mod(hd.ep, c->fd, EPOLLIN, c);
        if (write(c->fd, c->stream ? hd.stream_req : hd.idle_req,
                  c->stream ? hd.stream_len : hd.idle_len)
            < 0) {
            hd_kill(c);
        }
        return;
    }
    for (;;) {
        ssize_t n = read(c->fd, buf, sizeof(buf));
        size_t used;
        int rc;

        if (n < 0 && errno == EAGAIN) {
            return;
        }
        if (n <= 0 || c->state == HC_IDLE) {
            hd_kill(c); /* an idle connection must stay silent and open */
            return;
        }
        rc = resp_feed(&c->r, buf, (size_t)n, &used, c->stream ? hd_on_body : NULL, c);
        if (rc < 0 || (rc == 1 && c->r.status != 200)) {
            hd_kill(c);
            return;
        }
        if (rc == 1) {
            if (c->stream) {
                hd.stream_ended++; /* a stream is not meant to end while held */
                c->state = HC_IDLE;
            } else {
                c->state = HC_IDLE;
                hd_setup_done(c, true);
            }
        } else if (c->stream && c->events > 0 && c->state == HC_REQUEST) {
            c->state = HC_STREAM;
            hd_setup_done(c, true);
        }
    }
}

static void
hd_command(char *line)
{
    size_t n = 0;
    unsigned cap = 0;

    /* "idle N [CAP]", "streams N [CAP]": CAP = setups in flight at once */
    if (sscanf(line, "idle %zu %u", &n, &cap) >= 1) {
        hd.want_idle += n;
        hd.pending_idle = true;
    } else if (sscanf(line, "streams %zu %u", &n, &cap) >= 1) {
        hd.want_streams += n;
        hd.pending_streams = true;
    } else if (strncmp(line, "check", 5) == 0) {
        size_t idle = 0, streams = 0;

        for (size_t i = 0; i < hd.n; i++) {
            idle += hd.conns[i]->state == HC_IDLE && !hd.conns[i]->stream;
            streams += hd.conns[i]->state == HC_STREAM;
        }
        printf("check idle_open=%zu streams_open=%zu idle_ok=%zu idle_err=%zu idle_closed=%zu "
               "stream_ok=%zu stream_err=%zu stream_cut=%zu stream_ended=%zu\n",
               idle, streams, hd.idle_ok, hd.idle_err, hd.idle_closed, hd.stream_ok, hd.stream_err,
               hd.stream_cut, hd.stream_ended);
        fflush(stdout);
    } else if (strncmp(line, "quit", 4) == 0) {
        pb_stop = 1;
    }
    if (cap > 0) {
        hd.max_inflight = cap;
    }
    hd_open_more();
    hd_report();
}

static int
cmd_hold(int argc, char **argv)
{
    static const struct option opts[] = {
        { "target", required_argument, NULL, 't' },
        { "path", required_argument, NULL, 'p' },
        { "max-inflight", required_argument, NULL, 'm' },
        { "stream-tokens", required_argument, NULL, 's' },
        { NULL, 0, NULL, 0 },
    };
    const char *target = NULL, *path = "/v1/chat/completions";
    unsigned stream_tokens = 100000;
    struct epoll_event evs[PB_MAX_EVENTS];
    char line[256];
    size_t llen = 0, blen;
    char *body;
    int o;

    hd.max_inflight = 256;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 't':
            target = optarg;
            break;
        case 'p':
            path = optarg;
            break;
        case 'm':
            hd.max_inflight = (unsigned)atoi(optarg);
            break;
        case 's':
            stream_tokens = (unsigned)atoi(optarg);
            break;
        default:
            return 2;
        }
    }
    if (target == NULL) {
        die("hold: --target is required");
    }
    raise_nofile();
    signal(SIGPIPE, SIG_IGN);
    parse_addr(target, &hd.sa);
    body = chat_body(300, false, 1, &blen);
    hd.idle_req = build_request(path, target, body, blen, &hd.idle_len);
    free(body);
    body = chat_body(300, true, stream_tokens, &blen);
    hd.stream_req = build_request(path, target, body, blen, &hd.stream_len);
    free(body);
    hd.ep = epoll_create1(EPOLL_CLOEXEC);
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    ep_add(hd.ep, 0, EPOLLIN, &tag_stdin);
    printf("pbench hold ready\n");
    fflush(stdout);
    while (!pb_stop) {
        int n = epoll_wait(hd.ep, evs, PB_MAX_EVENTS, -1);

        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &tag_stdin) {
                ssize_t r = read(0, line + llen, sizeof(line) - 1 - llen);
                char *nl;

                if (r == 0) {
                    pb_stop = 1;
                    break;
                }
                if (r < 0) {
                    continue;
                }
                llen += (size_t)r;
                line[llen] = '\0';
                while ((nl = strchr(line, '\n')) != NULL) {
                    *nl = '\0';
                    hd_command(line);
                    llen -= (size_t)(nl + 1 - line);
                    memmove(line, nl + 1, llen + 1);
                }
                if (llen == sizeof(line) - 1) {
                    llen = 0;
                }
            } else {
                hd_on_conn(evs[i].data.ptr, evs[i].events);
                hd_open_more();
                hd_report();
            }
        }
    }
    for (size_t i = 0; i < hd.n; i++) {
        if (hd.conns[i]->state != HC_DEAD) {
            close(hd.conns[i]->fd);
        }
        free(hd.conns[i]);
    }
    free(hd.conns);
    return 0;
}

/* ---- relay: the floor of a proxy ---------------------------------------- */

/*
 * A TCP pass-through: each accepted connection gets its own connection to
 * the target and bytes are copied both ways (read, write) with no parsing.
 * What no HTTP proxy can beat on this machine.
 */
struct rside {
    int fd;
    struct rside *peer;
    char *pend;       /* bytes the peer's socket did not take yet */
    size_t pend_len;
    size_t pend_off;
    bool dead;
};

static struct {
    int ep;
    struct sockaddr_in target;
    struct rside *dead;
} rl;

static void
rl_close(struct rside *a)
{
    struct rside *pair[2] = { a, a->peer };

    for (int i = 0; i < 2; i++) {
        if (pair[i] != NULL && !pair[i]->dead) {
            pair[i]->dead = true;
            close(pair[i]->fd);
        }
    }
}

/* Copies what a can read into its peer; stops reading while the peer is full. */
static void
rl_pump(struct rside *a)
{
    char buf[PB_BUF];
    struct rside *b = a->peer;

    while (b->pend_len == 0) {
        ssize_t n = read(a->fd, buf, sizeof(buf)), w;

        if (n < 0 && errno == EAGAIN) {
            return;
        }
        if (n <= 0) {
            rl_close(a);
            return;
        }
        w = write(b->fd, buf, (size_t)n);
        if (w < 0 && errno != EAGAIN) {
            rl_close(a);
            return;
        }
        if (w < 0) {
            w = 0;
        }
        if (w < n) {
            b->pend = xmalloc((size_t)(n - w));
            memcpy(b->pend, buf + w, (size_t)(n - w));
            b->pend_len = (size_t)(n - w);
            b->pend_off = 0;
            ep_mod(rl.ep, b->fd, EPOLLIN | EPOLLOUT, b);
            ep_mod(rl.ep, a->fd, 0, a);
            return;
        }
        if ((size_t)n < sizeof(buf)) {
            return;
        }
    }
}

static void
rl_on(struct rside *a, uint32_t events)
{
    if (a->dead) {
        return;
    }
    if ((events & EPOLLOUT) && a->pend_len > 0) {
        ssize_t w = write(a->fd, a->pend + a->pend_off, a->pend_len - a->pend_off);

        if (w < 0 && errno != EAGAIN) {
            rl_close(a);
            return;
        }
        a->pend_off += w > 0 ? (size_t)w : 0;
        if (a->pend_off == a->pend_len) {
            free(a->pend);
            a->pend = NULL;
            a->pend_len = 0;
            ep_mod(rl.ep, a->fd, EPOLLIN, a);
            ep_mod(rl.ep, a->peer->fd, EPOLLIN, a->peer);
            rl_pump(a->peer);
        }
    }
    if (!a->dead && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
        rl_pump(a);
    }
}

static int
cmd_relay(int argc, char **argv)
{
    static const struct option opts[] = {
        { "listen", required_argument, NULL, 'l' },
        { "target", required_argument, NULL, 't' },
        { NULL, 0, NULL, 0 },
    };
    const char *listen_at = "127.0.0.1:0", *target = NULL;
    struct epoll_event evs[PB_MAX_EVENTS];
    struct sockaddr_in sa;
    socklen_t slen = sizeof(sa);
    int lfd, one = 1, o;

    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'l':
            listen_at = optarg;
            break;
        case 't':
            target = optarg;
            break;
        default:
            return 2;
        }
    }
    if (target == NULL) {
        die("relay: --target is required");
    }
    raise_nofile();
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    parse_addr(target, &rl.target);
    parse_addr(listen_at, &sa);
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 4096) != 0) {
        die("cannot listen on %s: %s", listen_at, strerror(errno));
    }
    getsockname(lfd, (struct sockaddr *)&sa, &slen);
    rl.ep = epoll_create1(EPOLL_CLOEXEC);
    ep_add(rl.ep, lfd, EPOLLIN, &tag_listen);
    printf("pbench relay ready listen=127.0.0.1:%u\n", ntohs(sa.sin_port));
    fflush(stdout);
    while (!pb_stop) {
        int n = epoll_wait(rl.ep, evs, PB_MAX_EVENTS, -1);
        struct rside *freelist = NULL;

        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == &tag_listen) {
                int fd;

                while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    struct rside *a = xcalloc(2, sizeof(*a)), *b = a + 1;

                    set_nodelay(fd);
                    a->fd = fd;
                    /* a blocking connect on loopback: the floor counts no pool */
                    b->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                    if (b->fd < 0
                        || connect(b->fd, (struct sockaddr *)&rl.target, sizeof(rl.target)) != 0) {
                        close(fd);
                        if (b->fd >= 0) {
                            close(b->fd);
                        }
                        free(a);
                        continue;
                    }
                    fcntl(b->fd, F_SETFL, O_NONBLOCK);
                    set_nodelay(b->fd);
                    a->peer = b;
                    b->peer = a;
                    ep_add(rl.ep, a->fd, EPOLLIN, a);
                    ep_add(rl.ep, b->fd, EPOLLIN, b);
                }
            } else {
                rl_on(evs[i].data.ptr, evs[i].events);
            }
        }
        /* pairs closed in this batch: free both halves once neither can fire again */
        for (int i = 0; i < n; i++) {
            struct rside *a = evs[i].data.ptr;

            if (a != (void *)&tag_listen && a->dead && a->peer != NULL && a->peer->dead) {
                struct rside *first = a < a->peer ? a : a->peer;

                if (first->peer != NULL) {
                    first->peer->peer = NULL;
                    first->peer = NULL;
                    free(first->pend);
                    free(first[1].pend);
                    first->pend = (char *)freelist;
                    freelist = first;
                }
            }
        }
        while (freelist != NULL) {
            struct rside *next = (struct rside *)freelist->pend;

            free(freelist);
            freelist = next;
        }
    }
    return 0;
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr,
                "usage: pbench backend|load|sse|hold|relay [options] (see bench/proxy/README.md)\n");
        return 2;
    }
    if (strcmp(argv[1], "backend") == 0) {
        return cmd_backend(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "load") == 0) {
        return cmd_load(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "sse") == 0) {
        return cmd_sse(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "hold") == 0) {
        return cmd_hold(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "relay") == 0) {
        return cmd_relay(argc - 1, argv + 1);
    }
    fprintf(stderr, "pbench: unknown command %s\n", argv[1]);
    return 2;
}
