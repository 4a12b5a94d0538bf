/*
 * otlp.c: the span exporter (otlp.h): a bounded queue that workers copy
 * spans into, and a thread of its own that sends them, in batches, as
 * OTLP/HTTP protobuf or JSON (an ExportTraceServiceRequest, written by
 * otlp_pb.c or otlp_json.c) to the collector.
 * Owns: the queue's slots, the thread, the batch's body.
 * The thread runs at a lower priority than the workers (otlp_yield_to_workers).
 * Invariants: a worker holds the queue's lock only to copy one span in;
 * the exporter reads the slots it took (head .. head+n) outside the lock,
 * and no worker writes them until it gives them back. Nothing it does
 * waits on a worker, and no worker waits on the network.
 */
#include "base/otlp.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "lg_version.h"

struct lg_otlp {
    /* copied from the configuration at start */
    char host[256];
    char port[8];
    char path[512];
    char *extra;           /* owned: the configured headers, "Name: value\r\n" each */
    char *service;         /* owned */
    double sample_ratio;
    uint32_t batch;
    uint64_t interval_ms;
    uint64_t timeout_ms;
    enum lg_otlp_encoding encoding;

    pthread_t thread;
    pthread_mutex_t lock;  /* guards head, count, stop */
    pthread_cond_t wake;   /* a batch is full, or stop */
    struct lg_span *slots; /* owned: cap of them */
    uint32_t cap, head, count;
    bool stop;
    uint64_t stop_deadline_ms; /* atomic: at stop, exports end by then (monotonic ms) */

    /* atomic counters */
    uint64_t submitted, dropped, exported, failed, exports;
};

void
lg_otlp_encode(const struct lg_span *spans, size_t n, const char *service,
               enum lg_otlp_encoding enc, char **out, size_t *outlen)
{
    if (enc == LG_OTLP_JSON) {
        lg_otlp_encode_json(spans, n, service, out, outlen);
    } else {
        lg_otlp_encode_pb(spans, n, service, out, outlen);
    }
}

/* ---- the collector's URL ------------------------------------------------- */

bool
lg_otlp_parse_url(const char *url, char *host, size_t hostsz, char *port, size_t portsz,
                  char *path, size_t pathsz, char *why, size_t whysz)
{
    const char *h, *end, *colon, *slash;
    size_t hn;

    if (strncmp(url, "http://", 7) != 0) {
        snprintf(why, whysz, "%s",
                 strncmp(url, "https://", 8) == 0
                     ? "https is not supported: export to a collector on plain http (a local "
                       "one, which may forward over TLS)"
                     : "must be an http:// URL");
        return false;
    }
    h = url + 7;
    slash = strchr(h, '/');
    end = slash != NULL ? slash : h + strlen(h);
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));

        if (rb == NULL) {
            snprintf(why, whysz, "an IPv6 host needs its closing ']'");
            return false;
        }
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
        if (rb + 1 != end && colon == NULL) {
            snprintf(why, whysz, "unexpected text after the IPv6 host");
            return false;
        }
        hn = (size_t)(rb - h - 1);
        h++;
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        hn = (size_t)((colon != NULL ? colon : end) - h);
    }
    if (hn == 0 || hn >= 256 || (host != NULL && hn >= hostsz)) {
        snprintf(why, whysz, "needs a host (at most 255 bytes)");
        return false;
    }
    if (colon != NULL) {
        size_t pn = (size_t)(end - colon - 1);
        unsigned long v = 0;

        if (pn == 0 || pn > 5) {
            snprintf(why, whysz, "the port must be 1..65535");
            return false;
        }
        for (size_t i = 0; i < pn; i++) {
            if (colon[1 + i] < '0' || colon[1 + i] > '9') {
                snprintf(why, whysz, "the port must be 1..65535");
                return false;
            }
            v = v * 10 + (unsigned long)(colon[1 + i] - '0');
        }
        if (v == 0 || v > 65535) {
            snprintf(why, whysz, "the port must be 1..65535");
            return false;
        }
    }
    for (const char *p = url; *p; p++) {
        if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
            snprintf(why, whysz, "spaces and control characters are not allowed");
            return false;
        }
    }
    if (slash != NULL && strlen(slash) >= 512) {
        snprintf(why, whysz, "the path is longer than 511 bytes");
        return false;
    }
    if (host != NULL) {
        memcpy(host, h, hn);
        host[hn] = '\0';
        snprintf(port, portsz, "%.*s", colon != NULL ? (int)(end - colon - 1) : 2,
                 colon != NULL ? colon + 1 : "80");
        snprintf(path, pathsz, "%s",
                 slash != NULL && slash[1] != '\0' ? slash : "/v1/traces");
    }
    return true;
}

bool
lg_otlp_check_url(const char *url, char *why, size_t whysz)
{
    return lg_otlp_parse_url(url, NULL, 0, NULL, 0, NULL, 0, why, whysz);
}

/* ---- the queue ----------------------------------------------------------- */

void
lg_otlp_submit(struct lg_otlp *o, const struct lg_span *s)
{
    /* the text's unused tail is not copied */
    size_t n = offsetof(struct lg_span, text) + s->text_len;

    pthread_mutex_lock(&o->lock);
    if (o->count == o->cap || o->stop) {
        pthread_mutex_unlock(&o->lock);
        __atomic_fetch_add(&o->dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    memcpy(&o->slots[(o->head + o->count) % o->cap], s, n);
    if (++o->count == o->batch) {
        pthread_cond_signal(&o->wake);
    }
    pthread_mutex_unlock(&o->lock);
    __atomic_fetch_add(&o->submitted, 1, __ATOMIC_RELAXED);
}

double
lg_otlp_sample_ratio(const struct lg_otlp *o)
{
    return o->sample_ratio;
}

void
lg_otlp_get_stats(struct lg_otlp *o, struct lg_otlp_stats *st)
{
    st->submitted = __atomic_load_n(&o->submitted, __ATOMIC_RELAXED);
    st->dropped = __atomic_load_n(&o->dropped, __ATOMIC_RELAXED);
    st->exported = __atomic_load_n(&o->exported, __ATOMIC_RELAXED);
    st->failed = __atomic_load_n(&o->failed, __ATOMIC_RELAXED);
    st->exports = __atomic_load_n(&o->exports, __ATOMIC_RELAXED);
    pthread_mutex_lock(&o->lock);
    st->queued = o->count;
    pthread_mutex_unlock(&o->lock);
}

/* ---- the export: one POST, Connection: close ----------------------------- */

static uint64_t
otlp_mono_ms(void)
{
    return lg_now_ns() / 1000000;
}

/* At stop, an export in flight gets this long at most (the process is exiting). */
#define OTLP_STOP_GRACE_MS 500

/*
 * Waits for fd to be ready for `events` until deadline (ms, monotonic), or
 * the stop's deadline: polled in slices, so that a stop cuts a wait on a
 * collector that does not answer.
 */
static bool
otlp_wait(struct lg_otlp *o, int fd, short events, uint64_t deadline)
{
    for (;;) {
        struct pollfd p = { .fd = fd, .events = events };
        uint64_t now = otlp_mono_ms();
        uint64_t stop = __atomic_load_n(&o->stop_deadline_ms, __ATOMIC_RELAXED);
        uint64_t end = stop != 0 ? LG_MIN(deadline, stop) : deadline;
        int rc;

        if (now >= end) {
            return false;
        }
        rc = poll(&p, 1, (int)LG_MIN(end - now, 100));
        if (rc == 0) {
            continue;
        }
        if (rc > 0) {
            return true;
        }
        if (errno != EINTR) {
            return false;
        }
    }
}

static int
otlp_connect(struct lg_otlp *o, uint64_t deadline)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC };
    struct addrinfo *res = NULL;
    int fd = -1;

    if (getaddrinfo(o->host, o->port, &hints, &res) != 0) {
        return -1;
    }
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        int err = 0;
        socklen_t elen = sizeof(err);
        int one = 1;

        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0
            && (errno != EINPROGRESS || !otlp_wait(o, fd, POLLOUT, deadline)
                || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0)) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/*
 * At most this much a send: over loopback the sender's CPU also runs the
 * receiver's TCP work, in one stretch the scheduler cannot break, and this
 * thread shares its CPU with the workers: a batch's 200 KiB in one call held
 * a worker off for hundreds of microseconds.
 */
#define OTLP_SEND_STEP (16 * 1024)

static bool
otlp_send_all(struct lg_otlp *o, int fd, const char *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, LG_MIN(n, (size_t)OTLP_SEND_STEP), MSG_NOSIGNAL);

        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && errno == EAGAIN) {
            if (!otlp_wait(o, fd, POLLOUT, deadline)) {
                return false;
            }
        } else {
            return false;
        }
    }
    return true;
}

/* POSTs body; the answer's status (0: none in time). */
static int
otlp_post(struct lg_otlp *o, const char *body, size_t len)
{
    uint64_t deadline = otlp_mono_ms() + o->timeout_ms;
    char head[2048];
    char resp[512];
    size_t got = 0;
    int fd = otlp_connect(o, deadline);
    int hn, status = 0;

    if (fd < 0) {
        return 0;
    }
    hn = snprintf(head, sizeof(head),
                  "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: %s\r\n"
                  "Content-Length: %zu\r\nConnection: close\r\nUser-Agent: llmgate/" LG_VERSION
                  "\r\n%s\r\n",
                  o->path, o->host, o->port,
                  o->encoding == LG_OTLP_JSON ? "application/json" : "application/x-protobuf", len,
                  o->extra != NULL ? o->extra : "");
    if (hn <= 0 || (size_t)hn >= sizeof(head) || !otlp_send_all(o, fd, head, (size_t)hn, deadline)
        || !otlp_send_all(o, fd, body, len, deadline)) {
        close(fd);
        return 0;
    }
    /* the status line is all we read */
    while (got < sizeof(resp) - 1 && memchr(resp, '\n', got) == NULL) {
        ssize_t r;

        if (!otlp_wait(o, fd, POLLIN, deadline)) {
            break;
        }
        r = recv(fd, resp + got, sizeof(resp) - 1 - got, 0);
        if (r <= 0) {
            if (r < 0 && (errno == EINTR || errno == EAGAIN)) {
                continue;
            }
            break;
        }
        got += (size_t)r;
    }
    resp[got] = '\0';
    if (got > 12 && strncmp(resp, "HTTP/1.", 7) == 0) {
        status = atoi(resp + 9);
    }
    close(fd);
    return status;
}

/* Sends the n spans at the queue's head (the exporter owns them until it returns). */
static void
otlp_export(struct lg_otlp *o, uint32_t head, uint32_t n)
{
    struct lg_span *tmp = NULL;
    const struct lg_span *spans = &o->slots[head];
    char *body;
    size_t len;
    int status;

    if (head + n > o->cap) { /* wrapped: into one run */
        uint32_t first = o->cap - head;

        tmp = lg_xmalloc((size_t)n * sizeof(*tmp));
        memcpy(tmp, &o->slots[head], first * sizeof(*tmp));
        memcpy(tmp + first, o->slots, (n - first) * sizeof(*tmp));
        spans = tmp;
    }
    lg_otlp_encode(spans, n, o->service, o->encoding, &body, &len);
    free(tmp);
    __atomic_fetch_add(&o->exports, 1, __ATOMIC_RELAXED);
    status = otlp_post(o, body, len);
    free(body);
    if (status >= 200 && status < 300) {
        __atomic_fetch_add(&o->exported, n, __ATOMIC_RELAXED);
    } else {
        static uint64_t last;

        __atomic_fetch_add(&o->failed, n, __ATOMIC_RELAXED);
        if (lg_log_ratelimit(&last, 60 * LG_NS_PER_S)) {
            if (status == 0) {
                LG_WARN("tracing: no answer from the collector at http://%s:%s%s within %llu ms; "
                        "%u spans dropped",
                        o->host, o->port, o->path, (unsigned long long)o->timeout_ms, n);
            } else {
                LG_WARN("tracing: the collector at http://%s:%s%s answered %d; %u spans dropped",
                        o->host, o->port, o->path, status, n);
            }
        }
    }
}

/*
 * The exporter yields to the workers: the normal scheduler (not a real-time
 * policy the process may run under) at a nice value 10 above theirs. A
 * machine with no CPU to spare then drops spans (counted), not requests'
 * time.
 */
static void
otlp_yield_to_workers(void)
{
    struct sched_param sp = { .sched_priority = 0 };
    pid_t tid = (pid_t)syscall(SYS_gettid);
    int nice_now;

    pthread_setname_np(pthread_self(), "llmgate-otlp");
    pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp);
    errno = 0;
    nice_now = getpriority(PRIO_PROCESS, (id_t)tid);
    if (errno == 0) {
        setpriority(PRIO_PROCESS, (id_t)tid, LG_MIN(nice_now + 10, 19));
    }
}

static void *
otlp_main(void *arg)
{
    struct lg_otlp *o = arg;

    otlp_yield_to_workers();
    pthread_mutex_lock(&o->lock);
    for (;;) {
        uint32_t n, head;
        bool stopping;

        if (o->count < o->batch && !o->stop) {
            struct timespec ts;

            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += (time_t)(o->interval_ms / 1000);
            ts.tv_nsec += (long)(o->interval_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&o->wake, &o->lock, &ts);
        }
        if (o->count == 0) {
            if (o->stop) {
                break;
            }
            continue;
        }
        n = LG_MIN(o->count, o->batch);
        head = o->head;
        stopping = o->stop;
        pthread_mutex_unlock(&o->lock);
        otlp_export(o, head, n);
        pthread_mutex_lock(&o->lock);
        o->head = (o->head + n) % o->cap;
        o->count -= n;
        if (stopping) {
            /* at exit one batch more, within the stop's grace; the rest is dropped */
            __atomic_fetch_add(&o->dropped, o->count, __ATOMIC_RELAXED);
            o->count = 0;
            break;
        }
    }
    pthread_mutex_unlock(&o->lock);
    return NULL;
}

/* what lg_otlp_start() made, the thread gone or never started */
static void
otlp_free(struct lg_otlp *o)
{
    pthread_mutex_destroy(&o->lock);
    pthread_cond_destroy(&o->wake);
    free(o->slots);
    free(o->service);
    free(o->extra);
    free(o);
}

int
lg_otlp_start(const struct lg_tracing_conf *conf, struct lg_otlp **out)
{
    struct lg_otlp *o = lg_xcalloc(1, sizeof(*o));
    pthread_condattr_t ca;
    char why[256];
    const char *name;
    json_t *v;
    size_t elen = 0;

    if (!lg_otlp_parse_url(conf->endpoint, o->host, sizeof(o->host), o->port, sizeof(o->port),
                           o->path, sizeof(o->path), why, sizeof(why))) {
        LG_ERROR("tracing.endpoint: %s", why);
        free(o);
        return LG_ERR;
    }
    json_object_foreach(conf->headers, name, v) {
        size_t add = strlen(name) + strlen(json_string_value(v)) + 4;

        o->extra = lg_xrealloc(o->extra, elen + add + 1);
        snprintf(o->extra + elen, add + 1, "%s: %s\r\n", name, json_string_value(v));
        elen += add;
    }
    o->service = lg_xstrdup(conf->service_name);
    o->sample_ratio = conf->sample_ratio;
    o->cap = conf->queue;
    o->batch = LG_MIN(conf->batch, conf->queue);
    o->interval_ms = conf->interval_ms;
    o->timeout_ms = conf->timeout_ms;
    o->encoding = conf->encoding;
    o->slots = lg_xcalloc(o->cap, sizeof(*o->slots));
    pthread_mutex_init(&o->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&o->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&o->thread, NULL, otlp_main, o) != 0) {
        LG_ERROR("tracing: cannot start the exporter's thread");
        otlp_free(o);
        return LG_ERR;
    }
    *out = o;
    return LG_OK;
}

void
lg_otlp_stop(struct lg_otlp *o)
{
    if (o == NULL) {
        return;
    }
    pthread_mutex_lock(&o->lock);
    o->stop = true;
    __atomic_store_n(&o->stop_deadline_ms, otlp_mono_ms() + OTLP_STOP_GRACE_MS, __ATOMIC_RELAXED);
    pthread_cond_signal(&o->wake);
    pthread_mutex_unlock(&o->lock);
    pthread_join(o->thread, NULL);
    otlp_free(o);
}
