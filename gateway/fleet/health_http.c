/*
 * health_http.c: the health thread's requests to a backend (health_http.h):
 * checks, scrapes and llama.cpp's /props all go through lg_health_get() on
 * the target's keep-alive connection; a request that gets no answer leaves
 * why in the target, for the warning that says what to check.
 *
 * Owns nothing: the requests are evhttp's once made. Runs on the fleet's
 * health thread.
 */
#include "fleet/health_http.h"

#include <stdio.h>

#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "base/config.h"
#include "http/tls.h"

struct timeval
lg_health_tv(uint64_t ms)
{
    struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };

    return tv;
}

/* What a request that got no answer met, from evhttp's error and the connection. */
static void
health_on_error(enum evhttp_request_error err, void *arg)
{
    struct lg_health_target *t = arg;
    int e = EVUTIL_SOCKET_ERROR(); /* evhttp restores the connection's errno for us */
    const struct lg_health_conf *hc = &t->h->f.conf->health;

    t->why_tls =
        t->conf->tls
        && lg_tls_failed(evhttp_connection_get_bufferevent(t->conn), t->why, sizeof(t->why));
    if (t->why_tls) {
        return;
    }
    switch (err) {
    case EVREQ_HTTP_TIMEOUT:
        snprintf(t->why, sizeof(t->why), "no answer within health.timeout (%" PRIu64 " ms)",
                 hc->timeout_ms);
        break;
    case EVREQ_HTTP_EOF:
        snprintf(t->why, sizeof(t->why), "%s",
                 e != 0 ? evutil_socket_error_to_string(e) : "connection closed without an answer");
        break;
    case EVREQ_HTTP_INVALID_HEADER:
        snprintf(t->why, sizeof(t->why), "malformed HTTP answer");
        break;
    case EVREQ_HTTP_DATA_TOO_LONG:
        snprintf(t->why, sizeof(t->why), "answer larger than %u MiB, not read further",
                 LG_ENGINE_METRICS_MAX_BYTES >> 20);
        t->why_too_large = true;
        break;
    default:
        snprintf(t->why, sizeof(t->why), "%s",
                 e != 0 ? evutil_socket_error_to_string(e) : "connection failed");
        break;
    }
}

const char *
lg_health_outcome(struct lg_health_target *t, int code, const char *path_key, char *buf, size_t len)
{
    if (code != 0) {
        snprintf(buf, len, "status %d; check the engine there, or the backend's %s", code,
                 path_key);
    } else if (t->why_too_large) {
        snprintf(buf, len, "%s; check the engine there, or the backend's %s", t->why, path_key);
    } else if (t->why_tls) {
        snprintf(buf, len, "%s; check the backend's tls settings (ca_file, server_name, cert)",
                 t->why);
    } else {
        snprintf(buf, len, "%s; check that an engine listens at the backend's url",
                 t->why[0] ? t->why : "no answer");
    }
    t->why[0] = '\0';
    t->why_tls = false;
    t->why_too_large = false;
    return buf;
}

void
lg_health_headers(struct evhttp_request *req, const char *host, const char *agent,
                  const char *token)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);

    evhttp_add_header(h, "Host", host);
    evhttp_add_header(h, "User-Agent", agent);
    if (token != NULL) {
        char auth[512];

        snprintf(auth, sizeof(auth), "Bearer %s", token);
        evhttp_add_header(h, "Authorization", auth);
    }
}

int
lg_health_get(struct lg_health_target *t, const char *path,
              void (*cb)(struct evhttp_request *, void *))
{
    struct evhttp_request *req = evhttp_request_new(cb, t);
    char target[1024];

    if (req == NULL) {
        return LG_ENOMEM;
    }
    evhttp_request_set_error_cb(req, health_on_error);
    snprintf(target, sizeof(target), "%s%s", t->conf->path_prefix, path);
    lg_health_headers(req, t->conf->host_header, "llmgate-health", t->conf->api_key);
    if (evhttp_make_request(t->conn, req, EVHTTP_REQ_GET, target) != 0) {
        return LG_EIO; /* evhttp freed req */
    }
    return LG_OK;
}
