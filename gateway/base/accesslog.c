/*
 * accesslog.c: the access log (see accesslog.h for the design).
 *
 * Owns: the log file descriptor, one struct lg_alog_buf per worker (each an
 * evbuffer guarded by its own mutex), and the writer thread.
 * Invariant: workers only append under their buffer's lock; the descriptor is
 * written under the log's wlock alone: by the writer thread, and by a worker
 * whose full buffer goes to a regular file (alog_direct: one writev of its
 * buffer, as nginx's `buffer=64k`, no wake-up of the writer). The writer never
 * waits on a stream (pipe, socket, terminal) for longer than ALOG_STALL_MS at
 * a time; a worker never writes to a stream, nor waits for the wlock.
 * Lock order: wlock, then a buffer's lock (a worker holding its buffer's lock
 * only tries the wlock).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "base/accesslog.h"
#include "base/config_types.h"

/* Longest one write waits for a stream's reader to make room; then the lines stay buffered
 * (and workers drop theirs once their buffers are full) until the next flush. */
#define ALOG_STALL_MS 1000
/* Writer's backlog, in per-worker buffer sizes, past which it stops taking the workers'. */
#define ALOG_BACKLOG 16
/* A worker's buffer grows by chains of this size (at most its `buffer`): lines share them. */
#define ALOG_CHAIN (16 * 1024)

struct lg_alog_buf {
    pthread_mutex_t lock;
    struct evbuffer *buf;          /* owned: lines not yet written */
    size_t room;                   /* bytes free for certain at buf's end (0: unknown) */
    bool signalled;                /* the writer was woken for this buffer and has not taken it */
    struct lg_accesslog *log;      /* borrowed */
};

struct lg_accesslog {
    char *path;                    /* "-" = stdout; the writer's: the file in use */
    int fd;                        /* under wlock */
    bool stream;                   /* under wlock: fd is no regular file (see alog_write) */
    bool direct;                   /* atomic: workers may write their full buffers to fd */
    pthread_mutex_t wlock;         /* guards fd, stream and writes to fd */
    uint64_t flush_ms;             /* atomic; 0: a flush after every line */
    size_t buffer_bytes;           /* atomic */
    char *asked_path;              /* the path last asked for (lg_accesslog_update's caller) */
    int next_fd;                   /* under lock: a file to switch to; -1 = none */
    bool next_stream;
    char *next_path;               /* under lock: its path */
    unsigned nbufs;
    struct lg_alog_buf *bufs;      /* owned [nbufs] */
    pthread_t thread;
    pthread_mutex_t lock;          /* guards stop, kick and the condition */
    pthread_cond_t cond;
    bool stop;
    bool kick;                     /* a worker asked for a flush before the timer's */
    int reopen;                    /* atomic: set by SIGUSR1 */
    uint64_t dropped;              /* atomic: lines */
    uint64_t warn_ns;              /* the writer's: rate limit of its error messages */
};

/* Opens path ("-": a descriptor of its own on standard output); *stream: not a regular file. */
static int
alog_open_fd(const char *path, bool *stream)
{
    struct stat st;
    int fd;

    if (strcmp(path, "-") == 0) {
        fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
    } else {
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    }
    *stream = fd >= 0 && fstat(fd, &st) == 0 && !S_ISREG(st.st_mode);
    return fd;
}

static uint64_t
alog_count_lines(struct evbuffer *b)
{
    struct evbuffer_ptr pos;
    uint64_t n = 0;

    evbuffer_ptr_set(b, &pos, 0, EVBUFFER_PTR_SET);
    while ((pos = evbuffer_search(b, "\n", 1, &pos)).pos >= 0) {
        n++;
        evbuffer_ptr_set(b, &pos, 1, EVBUFFER_PTR_ADD);
    }
    return n;
}

/* Drops the lines tmp holds, counted, saying why (at most every 30 s). */
static void
alog_drop(struct lg_accesslog *log, struct evbuffer *tmp, const char *why)
{
    uint64_t n = alog_count_lines(tmp);

    __atomic_fetch_add(&log->dropped, n, __ATOMIC_RELAXED);
    evbuffer_drain(tmp, evbuffer_get_length(tmp));
    if (lg_log_ratelimit(&log->warn_ns, 30 * LG_NS_PER_S)) {
        LG_ERROR("access log %s: %s; %" PRIu64 " lines dropped (llmgate_access_log_dropped_total "
                 "counts them all); %s",
                 log->path, why, n,
                 strcmp(log->path, "-") == 0
                     ? "check what reads llmgate's standard output, or set \"access_log\" to a "
                       "file or false"
                     : "check the file's disk and permissions");
    }
}

/* Bytes of tmp's head to write to a stream at once: whole lines, at most PIPE_BUF (a line
 * longer than that goes in pieces). */
static size_t
alog_stream_chunk(struct evbuffer *tmp)
{
    size_t len = evbuffer_get_length(tmp);
    const char *p, *nl;

    if (len <= PIPE_BUF) {
        return len;
    }
    p = (const char *)evbuffer_pullup(tmp, PIPE_BUF);
    nl = memrchr(p, '\n', PIPE_BUF);
    return nl != NULL ? (size_t)(nl - p) + 1 : PIPE_BUF;
}

/*
 * Writes tmp out. A regular file takes it whole, as the disk allows. A stream
 * (stdout: a pipe, a socket, a terminal) takes whole lines of at most PIPE_BUF
 * bytes per write, each once poll() says there is room: such a write is atomic
 * on a pipe, so lines never interleave with the error log's when both go to
 * one pipe, and it cannot block. When the reader makes no room for wait_ms,
 * what is left stays in tmp for the next flush. A failed write drops tmp.
 */
static void
alog_write(struct lg_accesslog *log, struct evbuffer *tmp, int wait_ms)
{
    while (evbuffer_get_length(tmp) > 0) {
        size_t n = evbuffer_get_length(tmp);
        int k;

        if (log->stream) {
            struct pollfd pfd = { .fd = log->fd, .events = POLLOUT };
            int r = poll(&pfd, 1, wait_ms);

            if (r < 0 && errno == EINTR) {
                continue;
            }
            if (r == 0) {
                return; /* the reader is stalled: later */
            }
            n = alog_stream_chunk(tmp);
        }
        k = evbuffer_write_atmost(tmp, log->fd, (ev_ssize_t)n);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) {
            continue;
        }
        if (k <= 0) {
            char why[128];

            snprintf(why, sizeof(why), "write failed: %s", k < 0 ? strerror(errno) : "no progress");
            alog_drop(log, tmp, why);
            return;
        }
    }
}

/*
 * Moves the workers' lines into tmp (while its backlog allows) and writes them
 * out; the caller holds wlock. Workers write their full buffers themselves
 * only while tmp is empty after a flush and fd is a regular file: a line never
 * overtakes an older one of its worker still in tmp.
 */
static void
alog_flush_locked(struct lg_accesslog *log, struct evbuffer *tmp, int wait_ms)
{
    size_t backlog = ALOG_BACKLOG * __atomic_load_n(&log->buffer_bytes, __ATOMIC_RELAXED);

    for (unsigned i = 0; i < log->nbufs && evbuffer_get_length(tmp) < backlog; i++) {
        struct lg_alog_buf *b = &log->bufs[i];

        pthread_mutex_lock(&b->lock);
        evbuffer_add_buffer(tmp, b->buf);
        b->room = 0; /* its chains went with the lines */
        b->signalled = false;
        pthread_mutex_unlock(&b->lock);
    }
    alog_write(log, tmp, wait_ms);
    __atomic_store_n(&log->direct, !log->stream && evbuffer_get_length(tmp) == 0,
                     __ATOMIC_RELAXED);
}

static void
alog_flush(struct lg_accesslog *log, struct evbuffer *tmp, int wait_ms)
{
    pthread_mutex_lock(&log->wlock);
    alog_flush_locked(log, tmp, wait_ms);
    pthread_mutex_unlock(&log->wlock);
}

/* At exit: writes what is left, waiting for a stalled reader once; drops the rest. */
static void
alog_flush_last(struct lg_accesslog *log, struct evbuffer *tmp)
{
    for (;;) {
        bool more = false;

        alog_flush(log, tmp, ALOG_STALL_MS); /* the workers have stopped: no direct writes */
        for (unsigned i = 0; i < log->nbufs; i++) {
            more |= evbuffer_get_length(log->bufs[i].buf) > 0; /* the workers have stopped */
        }
        if (evbuffer_get_length(tmp) > 0) {
            for (unsigned i = 0; i < log->nbufs; i++) {
                evbuffer_add_buffer(tmp, log->bufs[i].buf);
                log->bufs[i].room = 0;
            }
            alog_drop(log, tmp, "the reader took nothing for a second while llmgate stopped");
            return;
        }
        if (!more) {
            return;
        }
    }
}

/* Puts fd in force, after writing out what the old one is owed. */
static void
alog_switch(struct lg_accesslog *log, struct evbuffer *tmp, int fd, bool stream)
{
    pthread_mutex_lock(&log->wlock);
    alog_flush_locked(log, tmp, ALOG_STALL_MS); /* lines so far belong to the old file */
    close(log->fd);
    log->fd = fd;
    log->stream = stream;
    __atomic_store_n(&log->direct, !stream && evbuffer_get_length(tmp) == 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&log->wlock);
}

static void *
alog_writer(void *arg)
{
    struct lg_accesslog *log = arg;
    struct evbuffer *tmp = evbuffer_new();
    bool stop = false;

    pthread_setname_np(pthread_self(), "llmgate-log");
    while (!stop) {
        struct timespec ts;
        uint64_t flush_ms = __atomic_load_n(&log->flush_ms, __ATOMIC_RELAXED);
        int next_fd;
        bool next_stream;
        char *next_path;

        if (flush_ms == 0) {
            flush_ms = 100; /* each line is written or wakes the writer; the backstop */
        }
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)((flush_ms % 1000) * 1000000);
        ts.tv_sec += (time_t)(flush_ms / 1000) + ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_mutex_lock(&log->lock);
        if (!log->stop && log->next_fd < 0 && !log->kick) {
            pthread_cond_timedwait(&log->cond, &log->lock, &ts);
        }
        log->kick = false;
        stop = log->stop;
        next_fd = log->next_fd;
        next_stream = log->next_stream;
        next_path = log->next_path;
        log->next_fd = -1;
        log->next_path = NULL;
        pthread_mutex_unlock(&log->lock);
        if (next_fd >= 0) {
            alog_switch(log, tmp, next_fd, next_stream);
            free(log->path);
            log->path = next_path;
            LG_INFO("access log now goes to %s", log->path);
        }
        if (__atomic_exchange_n(&log->reopen, 0, __ATOMIC_ACQ_REL)) {
            bool stream;
            int fd = alog_open_fd(log->path, &stream);

            if (fd < 0) {
                LG_ERROR("access log %s: cannot reopen: %s; keeping the old file (check the "
                         "folder's permissions)",
                         log->path, strerror(errno));
            } else {
                alog_switch(log, tmp, fd, stream);
                LG_INFO("access log %s reopened", log->path);
            }
        }
        if (stop) {
            alog_flush_last(log, tmp);
        } else {
            alog_flush(log, tmp, ALOG_STALL_MS);
        }
    }
    evbuffer_free(tmp);
    return NULL;
}

static int
alog_open_error(const char *path)
{
    if (strcmp(path, "-") == 0) {
        LG_ERROR("access log: cannot use standard output: %s; set \"access_log\" to a file, or "
                 "to false to turn it off",
                 strerror(errno));
    } else {
        LG_ERROR("access log %s: cannot open: %s; check that its folder exists and is writable "
                 "by llmgate, or set \"access_log\" to another file",
                 path, strerror(errno));
    }
    return LG_EIO;
}

int
lg_accesslog_open(const struct lg_access_log_conf *conf, unsigned nworkers,
                  struct lg_accesslog **out)
{
    struct lg_accesslog *log = lg_xcalloc(1, sizeof(*log));

    log->path = lg_xstrdup(conf->path);
    log->asked_path = lg_xstrdup(conf->path);
    log->next_fd = -1;
    log->fd = alog_open_fd(log->path, &log->stream);
    if (log->fd < 0) {
        alog_open_error(log->path);
        free(log->path);
        free(log->asked_path);
        free(log);
        return LG_EIO;
    }
    log->flush_ms = conf->flush_ms;
    log->buffer_bytes = conf->buffer_bytes ? conf->buffer_bytes : 64 * 1024;
    log->nbufs = nworkers;
    log->bufs = lg_xcalloc(nworkers, sizeof(*log->bufs));
    for (unsigned i = 0; i < nworkers; i++) {
        pthread_mutex_init(&log->bufs[i].lock, NULL);
        log->bufs[i].buf = evbuffer_new();
        log->bufs[i].log = log;
    }
    log->direct = !log->stream;
    pthread_mutex_init(&log->wlock, NULL);
    pthread_mutex_init(&log->lock, NULL);
    pthread_cond_init(&log->cond, NULL);
    if (pthread_create(&log->thread, NULL, alog_writer, log) != 0) {
        LG_ERROR("access log: cannot start the writer thread");
        lg_accesslog_close(log);
        return LG_ERR;
    }
    *out = log;
    return LG_OK;
}

void
lg_accesslog_close(struct lg_accesslog *log)
{
    if (log == NULL) {
        return;
    }
    pthread_mutex_lock(&log->lock);
    log->stop = true;
    pthread_cond_signal(&log->cond);
    pthread_mutex_unlock(&log->lock);
    if (log->thread) {
        pthread_join(log->thread, NULL);
    }
    for (unsigned i = 0; i < log->nbufs; i++) {
        evbuffer_free(log->bufs[i].buf);
        pthread_mutex_destroy(&log->bufs[i].lock);
    }
    free(log->bufs);
    close(log->fd);
    if (log->next_fd >= 0) {
        close(log->next_fd);
    }
    free(log->next_path);
    free(log->asked_path);
    pthread_cond_destroy(&log->cond);
    pthread_mutex_destroy(&log->lock);
    pthread_mutex_destroy(&log->wlock);
    free(log->path);
    free(log);
}

int
lg_accesslog_update(struct lg_accesslog *log, const struct lg_access_log_conf *conf)
{
    int fd = -1;
    bool stream = false;

    if (strcmp(conf->path, log->asked_path) != 0) {
        fd = alog_open_fd(conf->path, &stream);
        if (fd < 0) {
            return alog_open_error(conf->path);
        }
        free(log->asked_path);
        log->asked_path = lg_xstrdup(conf->path);
    }
    __atomic_store_n(&log->flush_ms, conf->flush_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&log->buffer_bytes, conf->buffer_bytes ? conf->buffer_bytes : 64 * 1024,
                     __ATOMIC_RELAXED);
    pthread_mutex_lock(&log->lock);
    if (fd >= 0) {
        if (log->next_fd >= 0) {
            close(log->next_fd); /* a switch the writer has not made yet */
        }
        free(log->next_path);
        log->next_fd = fd;
        log->next_stream = stream;
        log->next_path = lg_xstrdup(conf->path);
    }
    pthread_cond_signal(&log->cond);
    pthread_mutex_unlock(&log->lock);
    return LG_OK;
}

void
lg_accesslog_reopen(struct lg_accesslog *log)
{
    if (log != NULL) {
        __atomic_store_n(&log->reopen, 1, __ATOMIC_RELEASE);
    }
}

struct lg_alog_buf *
lg_accesslog_buffer(struct lg_accesslog *log, unsigned worker)
{
    return log != NULL && worker < log->nbufs ? &log->bufs[worker] : NULL;
}

uint64_t
lg_accesslog_dropped(const struct lg_accesslog *log)
{
    return log ? __atomic_load_n(&log->dropped, __ATOMIC_RELAXED) : 0;
}

/*
 * Appends a line to a worker's buffer. libevent sizes a chain to what is
 * added (the next power of two): a line of 1 to 2 KiB would take a chain,
 * a malloc and a free of its own. Instead, when the room known to be free
 * at the buffer's end is short of the line, a chain of ALOG_CHAIN bytes (at
 * most the buffer's size) is made ready first, and lines share it.
 */
static void
alog_add(struct lg_alog_buf *buf, const char *line, size_t n, size_t limit)
{
    size_t grow = LG_MIN(limit, (size_t)ALOG_CHAIN);

    if (buf->room < n && grow > n && evbuffer_expand(buf->buf, grow) == 0) {
        buf->room = grow;
    }
    evbuffer_add(buf->buf, line, n);
    buf->room = buf->room >= n ? buf->room - n : 0;
}

/*
 * A worker's full buffer written by the worker itself, to a regular file:
 * one writev of its chains (a page-cache copy), where waking the writer
 * would cost two context switches and a futex or more (the writer and the
 * worker often share a CPU). Only when the writer is not writing (the wlock
 * is free) and fd allows it (alog_flush_locked); what a write leaves (a full
 * disk, an error) stays for the writer, whose errors are the log's. Caller
 * holds buf's lock. True: the buffer was emptied.
 */
static bool
alog_direct(struct lg_alog_buf *buf)
{
    struct lg_accesslog *log = buf->log;
    bool done = false;

    if (!__atomic_load_n(&log->direct, __ATOMIC_RELAXED)
        || pthread_mutex_trylock(&log->wlock) != 0) {
        return false;
    }
    if (__atomic_load_n(&log->direct, __ATOMIC_RELAXED)) {
        while (evbuffer_get_length(buf->buf) > 0) {
            int k = evbuffer_write(buf->buf, log->fd);

            if (k <= 0 && !(k < 0 && errno == EINTR)) {
                break;
            }
        }
        done = evbuffer_get_length(buf->buf) == 0;
        buf->room = 0; /* its chains went with the lines */
    }
    pthread_mutex_unlock(&log->wlock);
    return done;
}

void
lg_accesslog_append(struct lg_alog_buf *buf, const char *line, size_t n)
{
    size_t limit;
    bool wake = false;

    pthread_mutex_lock(&buf->lock);
    limit = __atomic_load_n(&buf->log->buffer_bytes, __ATOMIC_RELAXED);
    if (evbuffer_get_length(buf->buf) < ALOG_BACKLOG * limit) {
        alog_add(buf, line, n, limit);
    } else {
        __atomic_fetch_add(&buf->log->dropped, 1, __ATOMIC_RELAXED);
    }
    if ((evbuffer_get_length(buf->buf) >= limit
         || __atomic_load_n(&buf->log->flush_ms, __ATOMIC_RELAXED) == 0)
        && !alog_direct(buf) && !buf->signalled) {
        buf->signalled = true; /* once until the writer takes the buffer */
        wake = true;
    }
    pthread_mutex_unlock(&buf->lock);
    if (wake) {
        /* outside the buffer's lock: the writer, woken on this CPU, would wait for it */
        pthread_mutex_lock(&buf->log->lock);
        buf->log->kick = true;
        pthread_cond_signal(&buf->log->cond); /* flush early */
        pthread_mutex_unlock(&buf->log->lock);
    }
}
