/*
 * health_peers.c: what the other gateways in front of the fleet have on
 * each backend (health_peers.h): each peer's GET /admin/peers, held there
 * until it has news (?since=), parsed (peers.c), merged across peers and
 * published into each backend, where the engine model reads their requests
 * as its own. A peer that fails is asked again after a second; what it said
 * no longer holds meanwhile (its requests count as unknown load).
 *
 * Owns: the peers' connections, timers and last answers (struct
 * lg_health_peer, in the health thread's table). Runs on the fleet's health
 * thread.
 */
#include "fleet/health_peers.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "base/config.h"
#include "fleet/health_http.h"

/* A held request comes back within LG_PEERS_WAIT_MS (news or not); one that
 * has not after this long failed. */
#define HEALTH_PEER_TIMEOUT_MS (LG_PEERS_WAIT_MS + 1000)
/* A peer that failed is asked again after this long. */
#define HEALTH_PEER_RETRY_MS 1000

static uint64_t
health_peer_ttl_ns(void)
{
    /* an answer holds until the next one, which comes within the timeout
     * (a failure withdraws it at once, health_on_peer_done) */
    return (uint64_t)HEALTH_PEER_TIMEOUT_MS * LG_NS_PER_MS;
}

/* Merges every peer's last answer into each backend. */
static void
health_peers_publish(struct lg_health *h, uint64_t now)
{
    const struct lg_peer_state *states[64];
    uint64_t recv[64];
    struct lg_backend_peers bp; /* 2 KiB: this thread's stack holds it */
    size_t n = 0;

    for (size_t i = 0; i < h->npeers && n < LG_ARRAY_SIZE(states); i++) {
        if (!h->peers[i].self && h->peers[i].recv_ns != 0) {
            states[n] = &h->peers[i].st;
            recv[n++] = h->peers[i].recv_ns;
        }
    }
    for (size_t i = 0; i < h->f.nbackends; i++) {
        lg_peers_merge(states, recv, n, h->keys[i], now, health_peer_ttl_ns(), &bp);
        lg_backend_publish_peers(h->f.backends[i], &bp);
    }
}

static void
health_peer_next(struct lg_health_peer *p, uint64_t ms)
{
    struct timeval tv = lg_health_tv(ms);

    event_add(p->ev, &tv);
}

static void
health_on_peer_done(struct evhttp_request *req, void *arg)
{
    struct lg_health_peer *p = arg;
    struct lg_peer_state st;
    struct evbuffer *body;
    char err[256];
    size_t len;
    int code = req ? evhttp_request_get_response_code(req) : 0;
    int rc = LG_EIO;

    p->fetching = false;
    if (code == 200) {
        body = evhttp_request_get_input_buffer(req);
        len = evbuffer_get_length(body);
        rc = lg_peers_parse(len ? (const char *)evbuffer_pullup(body, -1) : "", len, &st, err,
                            sizeof(err));
        if (rc != LG_OK && lg_log_ratelimit(&p->warn_ns, 30 * LG_NS_PER_S)) {
            LG_WARN("peer %s: bad /admin/peers answer: %s", p->admin, err);
        }
    } else if (lg_log_ratelimit(&p->warn_ns, 30 * LG_NS_PER_S)) {
        LG_WARN("peer %s: /admin/peers failed (%s %d); its requests count as unknown load",
                p->admin, code ? "status" : "no response", code);
    }
    if (rc != LG_OK) {
        if (p->recv_ns != 0) {
            /* what it said no longer holds: its requests are unknown load */
            p->recv_ns = 0;
            health_peers_publish(p->h, lg_now_ns());
        }
        health_peer_next(p, HEALTH_PEER_RETRY_MS);
        return;
    }
    if (strcmp(st.id, lg_peers_self_id()) == 0) {
        p->self = true; /* one peers list for every gateway: this is us */
        LG_INFO("peer %s is this gateway: not fetched", p->admin);
        lg_peers_clear(&st);
        return;
    }
    lg_peers_clear(&p->st);
    p->st = st;
    p->recv_ns = lg_now_ns();
    health_peers_publish(p->h, p->recv_ns);
    health_peer_next(p, p->h->f.conf->health.peer_interval_ms);
}

/* Asks the peer for news since its last answer (held there until some). */
static void
health_on_peer_timer(evutil_socket_t fd, short what, void *arg)
{
    struct lg_health_peer *p = arg;
    struct evhttp_request *req;
    char target[96];

    (void)fd;
    (void)what;
    if (p->fetching) {
        return;
    }
    req = evhttp_request_new(health_on_peer_done, p);
    if (req == NULL) {
        health_peer_next(p, HEALTH_PEER_RETRY_MS);
        return;
    }
    lg_health_headers(req, p->admin, "llmgate-peer", p->h->f.conf->admin.token);
    if (p->recv_ns != 0) {
        snprintf(target, sizeof(target), "/admin/peers?since=%llu&wait=%u",
                 (unsigned long long)p->st.changes, (unsigned)LG_PEERS_WAIT_MS);
    } else {
        snprintf(target, sizeof(target), "/admin/peers");
    }
    p->fetching = evhttp_make_request(p->conn, req, EVHTTP_REQ_GET, target) == 0;
    if (!p->fetching) {
        health_peer_next(p, HEALTH_PEER_RETRY_MS); /* evhttp freed req */
    }
}

bool
lg_health_peers_start(struct lg_health *h)
{
    const struct lg_config *c = h->f.conf;

    if (c->npeers == 0) {
        return false;
    }
    h->peers = lg_xcalloc(c->npeers, sizeof(*h->peers));
    h->npeers = c->npeers;
    h->keys = lg_xcalloc(h->f.nbackends ? h->f.nbackends : 1, sizeof(*h->keys));
    for (size_t i = 0; i < h->f.nbackends; i++) {
        lg_peers_key(&c->backends[i], h->keys[i], sizeof(h->keys[i]));
    }
    for (size_t i = 0; i < c->npeers; i++) {
        struct lg_health_peer *p = &h->peers[i];
        char host[NI_MAXHOST], port[NI_MAXSERV];
        struct timeval to = lg_health_tv(HEALTH_PEER_TIMEOUT_MS);

        p->h = h;
        p->admin = c->peers[i].admin;
        if (getnameinfo((const struct sockaddr *)&c->peers[i].addr, c->peers[i].addrlen, host,
                        sizeof(host), port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV)
            != 0) {
            LG_WARN("peer %s: cannot read its address; not fetched", p->admin);
            continue;
        }
        p->conn = evhttp_connection_base_new(h->base, NULL, host, (uint16_t)atoi(port));
        p->ev = event_new(h->base, -1, 0, health_on_peer_timer, p);
        if (p->conn == NULL || p->ev == NULL) {
            LG_WARN("peer %s: cannot set up a connection; not fetched", p->admin);
            continue;
        }
        evhttp_connection_set_timeout_tv(p->conn, &to);
        evhttp_connection_set_retries(p->conn, 0);
        evhttp_connection_set_max_body_size(p->conn, LG_PEERS_MAX_BYTES);
        event_active(p->ev, EV_TIMEOUT, 0);
    }
    return true;
}

void
lg_health_peers_stop(struct lg_health *h)
{
    for (size_t i = 0; i < h->npeers; i++) {
        if (h->peers[i].ev != NULL) {
            event_free(h->peers[i].ev);
        }
        if (h->peers[i].conn != NULL) {
            evhttp_connection_free(h->peers[i].conn); /* cancels a request out */
        }
        lg_peers_clear(&h->peers[i].st);
    }
    free(h->peers);
    free(h->keys);
    h->peers = NULL;
    h->keys = NULL;
    h->npeers = 0;
}
