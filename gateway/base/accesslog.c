/*
 * accesslog.c: the access log (see accesslog.h for the design).
 *
 * Owns: the log file descriptor, one struct lg_alog_buf per worker (each an
 * evbuffer guarded by its own mutex), and the writer thread.
 * Invariant: workers only append under their buffer's lock; only the writer
 * thread touches the file descriptor.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>

#include "base/accesslog.h"
#include "base/config_types.h"

struct lg_alog_buf {
    pthread_mutex_t lock;
    struct evbuffer *buf;          /* owned: lines not yet written */
    struct lg_accesslog *log;      /* borrowed */
};

struct lg_accesslog {
    char *path;                    /* "-" = stdout; the writer's: the file in use */
    int fd;
    uint64_t flush_ms;             /* atomic */
    size_t buffer_bytes;           /* atomic */
    char *asked_path;              /* the path last asked for (lg_accesslog_update's caller) */
    int next_fd;                   /* under lock: a file to switch to; -1 = none */
    char *next_path;               /* under lock: its path */
    unsigned nbufs;
    struct lg_alog_buf *bufs;      /* owned [nbufs] */
    pthread_t thread;
    pthread_mutex_t lock;          /* guards stop and the condition */
    pthread_cond_t cond;
    bool stop;
    int reopen;                    /* atomic: set by SIGUSR1 */
    uint64_t dropped;              /* atomic */
};

static int
alog_open_fd(const char *path)
{
    if (strcmp(path, "-") == 0) {
        return dup(STDOUT_FILENO);
    }
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

static void
alog_flush(struct lg_accesslog *log, struct evbuffer *tmp)
{
    for (unsigned i = 0; i < log->nbufs; i++) {
        struct lg_alog_buf *b = &log->bufs[i];

        pthread_mutex_lock(&b->lock);
        evbuffer_add_buffer(tmp, b->buf);
        pthread_mutex_unlock(&b->lock);
    }
    while (evbuffer_get_length(tmp) > 0) {
        int n = evbuffer_write(tmp, log->fd);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            LG_ERROR("access log %s: write failed: %s; %zu bytes lost", log->path,
                     strerror(errno), evbuffer_get_length(tmp));
            evbuffer_drain(tmp, evbuffer_get_length(tmp));
        }
    }
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
        char *next_path;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)((flush_ms % 1000) * 1000000);
        ts.tv_sec += (time_t)(flush_ms / 1000) + ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_mutex_lock(&log->lock);
        if (!log->stop && log->next_fd < 0) {
            pthread_cond_timedwait(&log->cond, &log->lock, &ts);
        }
        stop = log->stop;
        next_fd = log->next_fd;
        next_path = log->next_path;
        log->next_fd = -1;
        log->next_path = NULL;
        pthread_mutex_unlock(&log->lock);
        if (next_fd >= 0) {
            alog_flush(log, tmp); /* lines so far belong to the old file */
            close(log->fd);
            log->fd = next_fd;
            free(log->path);
            log->path = next_path;
            LG_INFO("access log now goes to %s", log->path);
        }
        if (__atomic_exchange_n(&log->reopen, 0, __ATOMIC_ACQ_REL)) {
            int fd = alog_open_fd(log->path);

            if (fd < 0) {
                LG_ERROR("access log %s: cannot reopen: %s; keeping the old file", log->path,
                         strerror(errno));
            } else {
                alog_flush(log, tmp); /* lines so far belong to the old file */
                close(log->fd);
                log->fd = fd;
                LG_INFO("access log %s reopened", log->path);
            }
        }
        alog_flush(log, tmp);
    }
    evbuffer_free(tmp);
    return NULL;
}

int
lg_accesslog_open(const struct lg_access_log_conf *conf, unsigned nworkers,
                  struct lg_accesslog **out)
{
    struct lg_accesslog *log = lg_xcalloc(1, sizeof(*log));

    log->path = lg_xstrdup(conf->path);
    log->asked_path = lg_xstrdup(conf->path);
    log->next_fd = -1;
    log->fd = alog_open_fd(log->path);
    if (log->fd < 0) {
        LG_ERROR("access log %s: cannot open: %s", log->path, strerror(errno));
        free(log->path);
        free(log->asked_path);
        free(log);
        return LG_EIO;
    }
    log->flush_ms = conf->flush_ms ? conf->flush_ms : 100;
    log->buffer_bytes = conf->buffer_bytes ? conf->buffer_bytes : 64 * 1024;
    log->nbufs = nworkers;
    log->bufs = lg_xcalloc(nworkers, sizeof(*log->bufs));
    for (unsigned i = 0; i < nworkers; i++) {
        pthread_mutex_init(&log->bufs[i].lock, NULL);
        log->bufs[i].buf = evbuffer_new();
        log->bufs[i].log = log;
    }
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
    free(log->path);
    free(log);
}

int
lg_accesslog_update(struct lg_accesslog *log, const struct lg_access_log_conf *conf)
{
    int fd = -1;

    if (strcmp(conf->path, log->asked_path) != 0) {
        fd = alog_open_fd(conf->path);
        if (fd < 0) {
            LG_ERROR("access log %s: cannot open: %s", conf->path, strerror(errno));
            return LG_EIO;
        }
        free(log->asked_path);
        log->asked_path = lg_xstrdup(conf->path);
    }
    __atomic_store_n(&log->flush_ms, conf->flush_ms ? conf->flush_ms : 100, __ATOMIC_RELAXED);
    __atomic_store_n(&log->buffer_bytes, conf->buffer_bytes ? conf->buffer_bytes : 64 * 1024,
                     __ATOMIC_RELAXED);
    pthread_mutex_lock(&log->lock);
    if (fd >= 0) {
        if (log->next_fd >= 0) {
            close(log->next_fd); /* a switch the writer has not made yet */
        }
        free(log->next_path);
        log->next_fd = fd;
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

void
lg_accesslog_append(struct lg_alog_buf *buf, const char *line, size_t n)
{
    size_t limit;

    pthread_mutex_lock(&buf->lock);
    limit = __atomic_load_n(&buf->log->buffer_bytes, __ATOMIC_RELAXED);
    if (evbuffer_get_length(buf->buf) < 16 * limit) {
        evbuffer_add(buf->buf, line, n);
    } else {
        __atomic_fetch_add(&buf->log->dropped, 1, __ATOMIC_RELAXED);
    }
    if (evbuffer_get_length(buf->buf) >= limit) {
        pthread_cond_signal(&buf->log->cond); /* flush early */
    }
    pthread_mutex_unlock(&buf->lock);
}
