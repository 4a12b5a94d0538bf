/*
 * health_http.h: the health thread's requests to a backend (health_http.c):
 * a GET on the target's keep-alive connection with the backend's headers,
 * and why one got no answer, said with what to check.
 */
#ifndef LG_HEALTH_HTTP_H
#define LG_HEALTH_HTTP_H

#include <sys/time.h>

#include "fleet/health_types.h"

struct evhttp_request;

/* ms as a struct timeval. */
struct timeval lg_health_tv(uint64_t ms);

/* Host, User-Agent and (with a token) a bearer Authorization. */
void lg_health_headers(struct evhttp_request *req, const char *host, const char *agent,
                       const char *token);

/*
 * GETs the backend's path prefix + path on t's connection; cb gets the
 * answer (NULL when none: t->why says why). LG_OK, or LG_ENOMEM / LG_EIO
 * when it could not be sent (cb is not called).
 */
int lg_health_get(struct lg_health_target *t, const char *path,
                  void (*cb)(struct evhttp_request *, void *));

/*
 * "status 503", or why there was no answer, then what to look at (path_key:
 * the backend's setting that names the path), into buf; clears t->why.
 */
const char *lg_health_outcome(struct lg_health_target *t, int code, const char *path_key, char *buf,
                              size_t len);

#endif /* LG_HEALTH_HTTP_H */
