/*
 * wakeup.c: the scale-from-zero wake-up webhook (see wakeup.h).
 *
 * Owns: the list of calls asked for and not yet sent (under `lock`), the
 * calls in flight with their connections, and the two events on the
 * control base (one sends what was asked, one frees what ended).
 * Borrows: the control thread's event base.
 * Invariants: `asked` is touched under `lock` from any thread; everything
 * else only on the base's thread. A call is freed by the reap event, never
 * inside evhttp's callback for its own request.
 */
#include "serve/wakeup.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>

struct wakeup_call {
    struct lg_wakeup *w;
    char *url;
    char *model;
    uint32_t held;
    uint64_t timeout_ms;
    struct evhttp_connection *conn; /* owned once sent */
    bool done;
    TAILQ_ENTRY(wakeup_call) link;
};
TAILQ_HEAD(wakeup_list, wakeup_call);

struct lg_wakeup {
    struct event_base *base;  /* borrowed */
    pthread_mutex_t lock;     /* guards asked */
    struct wakeup_list asked; /* asked for, not sent yet */
    struct wakeup_list out;   /* sent: in flight, or done and waiting to be freed */
    struct event *send_ev;    /* owned: sends what was asked */
    struct event *reap_ev;    /* owned: frees the calls that ended */
    uint64_t failures;        /* atomic */
};

static void
wakeup_call_free(struct wakeup_call *c)
{
    if (c->conn != NULL) {
        evhttp_connection_free(c->conn);
    }
    free(c->url);
    free(c->model);
    free(c);
}

static void
wakeup_failed(struct wakeup_call *c, const char *why)
{
    __atomic_fetch_add(&c->w->failures, 1, __ATOMIC_RELAXED);
    LG_WARN("scale_from_zero: the wake-up webhook %s for model \"%s\" failed: %s", c->url, c->model,
            why);
}

static void
wakeup_on_done(struct evhttp_request *req, void *arg)
{
    struct wakeup_call *c = arg;
    int code = req != NULL ? evhttp_request_get_response_code(req) : 0;
    char why[64];

    if (code >= 200 && code < 300) {
        LG_INFO("scale_from_zero: woke model \"%s\" (%s answered %d, %u held)", c->model, c->url,
                code, c->held);
    } else {
        if (code != 0) {
            snprintf(why, sizeof(why), "status %d", code);
        } else {
            snprintf(why, sizeof(why), "no answer within %" PRIu64 " ms", c->timeout_ms);
        }
        wakeup_failed(c, why);
    }
    c->done = true;
    event_active(c->w->reap_ev, EV_TIMEOUT, 0);
}

/* Sends one call; false when it could not even start (it is then done). */
static bool
wakeup_send(struct wakeup_call *c)
{
    struct evhttp_uri *u = evhttp_uri_parse(c->url);
    const char *host = u != NULL ? evhttp_uri_get_host(u) : NULL;
    const char *path = u != NULL ? evhttp_uri_get_path(u) : NULL;
    const char *query = u != NULL ? evhttp_uri_get_query(u) : NULL;
    int port = u != NULL ? evhttp_uri_get_port(u) : -1;
    struct evhttp_request *req = NULL;
    json_t *body = NULL;
    char *text = NULL;
    char target[2048];
    char hosthdr[300];
    bool ok = false;

    if (host == NULL) {
        wakeup_failed(c, "not a URL");
        goto out;
    }
    port = port > 0 ? port : 80;
    snprintf(target, sizeof(target), "%s%s%s", path != NULL && path[0] != '\0' ? path : "/",
             query != NULL ? "?" : "", query != NULL ? query : "");
    snprintf(hosthdr, sizeof(hosthdr), port == 80 ? "%s" : "%s:%d", host, port);
    c->conn = evhttp_connection_base_new(c->w->base, NULL, host, (unsigned short)port);
    req = evhttp_request_new(wakeup_on_done, c);
    body = json_pack("{s:s, s:I, s:s}", "model", c->model, "held", (json_int_t)c->held, "reason",
                     "model_scaled_to_zero");
    text = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
    if (c->conn == NULL || req == NULL || text == NULL) {
        if (req != NULL) {
            evhttp_request_free(req);
        }
        wakeup_failed(c, "out of memory");
        goto out;
    }
    evhttp_connection_set_timeout_tv(
        c->conn, &(struct timeval){ (time_t)(c->timeout_ms / 1000),
                                    (suseconds_t)(c->timeout_ms % 1000) * 1000 });
    evhttp_connection_set_retries(c->conn, 0);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Host", hosthdr);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    evbuffer_add(evhttp_request_get_output_buffer(req), text, strlen(text));
    /* evhttp_make_request frees req when it fails */
    if (evhttp_make_request(c->conn, req, EVHTTP_REQ_POST, target) != 0) {
        wakeup_failed(c, "cannot send the request");
        goto out;
    }
    ok = true;
out:
    free(text);
    json_decref(body);
    if (u != NULL) {
        evhttp_uri_free(u);
    }
    return ok;
}

static void
wakeup_on_send(evutil_socket_t fd, short what, void *arg)
{
    struct lg_wakeup *w = arg;
    struct wakeup_list todo;
    struct wakeup_call *c;

    (void)fd;
    (void)what;
    TAILQ_INIT(&todo);
    pthread_mutex_lock(&w->lock);
    TAILQ_CONCAT(&todo, &w->asked, link);
    pthread_mutex_unlock(&w->lock);
    while ((c = TAILQ_FIRST(&todo)) != NULL) {
        TAILQ_REMOVE(&todo, c, link);
        TAILQ_INSERT_TAIL(&w->out, c, link);
        if (!wakeup_send(c)) {
            c->done = true;
            event_active(w->reap_ev, EV_TIMEOUT, 0);
        }
    }
}

static void
wakeup_on_reap(evutil_socket_t fd, short what, void *arg)
{
    struct lg_wakeup *w = arg;
    struct wakeup_call *c, *next;

    (void)fd;
    (void)what;
    for (c = TAILQ_FIRST(&w->out); c != NULL; c = next) {
        next = TAILQ_NEXT(c, link);
        if (c->done) {
            TAILQ_REMOVE(&w->out, c, link);
            wakeup_call_free(c);
        }
    }
}

struct lg_wakeup *
lg_wakeup_new(struct event_base *base)
{
    struct lg_wakeup *w = lg_xcalloc(1, sizeof(*w));

    w->base = base;
    pthread_mutex_init(&w->lock, NULL);
    TAILQ_INIT(&w->asked);
    TAILQ_INIT(&w->out);
    w->send_ev = event_new(base, -1, 0, wakeup_on_send, w);
    w->reap_ev = event_new(base, -1, 0, wakeup_on_reap, w);
    return w;
}

void
lg_wakeup_free(struct lg_wakeup *w)
{
    struct wakeup_call *c;

    if (w == NULL) {
        return;
    }
    event_free(w->send_ev);
    event_free(w->reap_ev);
    TAILQ_CONCAT(&w->out, &w->asked, link);
    while ((c = TAILQ_FIRST(&w->out)) != NULL) {
        TAILQ_REMOVE(&w->out, c, link);
        wakeup_call_free(c);
    }
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void
lg_wakeup_call(struct lg_wakeup *w, const char *url, uint64_t timeout_ms, const char *model,
               uint32_t held)
{
    struct wakeup_call *c;

    if (w == NULL || url == NULL) {
        return;
    }
    c = lg_xcalloc(1, sizeof(*c));
    c->w = w;
    c->url = lg_xstrdup(url);
    c->model = lg_xstrdup(model);
    c->held = held;
    c->timeout_ms = timeout_ms;
    pthread_mutex_lock(&w->lock);
    TAILQ_INSERT_TAIL(&w->asked, c, link);
    pthread_mutex_unlock(&w->lock);
    event_active(w->send_ev, EV_TIMEOUT, 0); /* the base is thread-safe (evthread) */
}

uint64_t
lg_wakeup_failures(const struct lg_wakeup *w)
{
    return w != NULL ? __atomic_load_n(&w->failures, __ATOMIC_RELAXED) : 0;
}
