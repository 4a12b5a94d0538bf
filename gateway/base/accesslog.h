/*
 * accesslog.h: one JSON object per line per request.
 *
 * Workers format the line on their loop (serve/record.c) into their own
 * buffer (a mutex that only the writer thread contends); a writer thread
 * flushes every buffer on a timer. A buffer that fills goes out early: to a
 * regular file, written by its worker at once (one writev into the page
 * cache, as nginx's `buffer`; not while the writer is writing); otherwise the
 * worker wakes the writer, so no event loop ever waits on standard output
 * (the default: "-") or on the writer. The writer
 * itself never blocks on a stream for long: it writes whole lines as its
 * reader makes room, so a stalled or closed stdout costs dropped lines, never
 * a stalled worker or a hung exit. SIGUSR1 reopens the file (logrotate). If
 * the disk or the reader cannot keep up, lines are dropped and counted rather
 * than letting memory grow.
 */
#ifndef LG_ACCESSLOG_H
#define LG_ACCESSLOG_H

#include "base/lg_core.h"

struct lg_accesslog;
struct lg_alog_buf;
struct lg_access_log_conf;

/* Opens the log and starts the writer; nworkers buffers. */
int lg_accesslog_open(const struct lg_access_log_conf *conf, unsigned nworkers,
                      struct lg_accesslog **out);
/* Flushes everything (giving a stalled reader a second), stops the writer, closes the file. */
void lg_accesslog_close(struct lg_accesslog *log);
/*
 * Applies a reloaded configuration: a new path is opened here (so a path
 * that cannot be opened fails now and changes nothing: LG_EIO, logged) and
 * the writer switches to it after writing out what the old file is owed;
 * flush interval and buffer size apply at once. One caller thread at a time.
 */
int lg_accesslog_update(struct lg_accesslog *log, const struct lg_access_log_conf *conf);

/* Asks the writer to reopen the file (async-signal-safe). */
void lg_accesslog_reopen(struct lg_accesslog *log);

struct lg_alog_buf *lg_accesslog_buffer(struct lg_accesslog *log, unsigned worker);

/*
 * Appends one line (n bytes, its newline included) to a worker's buffer,
 * or drops and counts it when the writer has fallen behind. The line is
 * formatted by its writer (serve/record.c: a request's line).
 */
void lg_accesslog_append(struct lg_alog_buf *buf, const char *line, size_t n);

/* Lines dropped because the disk or stdout's reader fell behind, or a write failed. */
uint64_t lg_accesslog_dropped(const struct lg_accesslog *log);

#endif /* LG_ACCESSLOG_H */
