/*
 * peers.h: what gateways in front of one fleet tell each other. Each
 * gateway's admin listener answers GET /admin/peers with its requests on
 * every backend, one by one (lg_peers_render); each gateway's health thread
 * fetches its peers' answers (config "peers") and merges them into each
 * backend's lg_backend_peers (lg_peers_merge). The engine model then sees
 * the whole batch and line of a replica that several gateways feed, where
 * the engine's /metrics gives only counts.
 *
 * GET /admin/peers?since=N&wait=MS holds the request up to MS ms (at most
 * LG_PEERS_WAIT_MS) while the gateway's `changes` is still N, so a peer
 * hears of a request as soon as it is dispatched, gets its first token
 * or ends, without polling for it.
 *
 * The answer (format 1), backends keyed by the host:port they are reached at:
 *   {"format": 1, "id": "<16 hex digits, this process>", "changes": N,
 *    "backends": [{"key": "10.0.0.5:8000", "inflight": 3, "complete": true,
 *                  "seqs": [[started 0|1, tokens left, prompt tokens, age ms], ...]}]}
 * `age`: since the request was sent for one in line; 0 for a started one
 * (its tokens left are as of the answer). `complete`: every request of that
 * gateway there has a sequence (known length, streamed).
 */
#ifndef LG_PEERS_H
#define LG_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/lg_core.h"

struct lg_backend;
struct lg_backend_conf;
struct lg_backend_peers;
struct lg_seq_info;

#define LG_PEERS_FORMAT    1
#define LG_PEERS_MAX_BYTES (4u << 20) /* largest answer read */
#define LG_PEERS_KEY_MAX   300        /* "host:port", host up to 255 bytes */
#define LG_PEERS_WAIT_MS   1000       /* longest a peer holds a request for news */

struct lg_peer_backend {
    char key[LG_PEERS_KEY_MAX];
    uint32_t inflight;
    bool complete;
    size_t nseqs;
    struct lg_seq_info *seqs; /* owned [nseqs] */
};

/* One peer's answer, parsed. Backends sorted by key. */
struct lg_peer_state {
    char id[17];
    uint64_t changes; /* its lg_backend_changes() as of the answer */
    size_t n;
    struct lg_peer_backend *backends; /* owned [n] */
};

/* This process's id in its answers (random, fixed for its life): a gateway
 * that finds itself among its peers skips that entry. */
const char *lg_peers_self_id(void);

/* "host:port" of a backend, as peers match them. */
void lg_peers_key(const struct lg_backend_conf *bc, char *out, size_t size);

/* This gateway's answer for the fleet's backends[n] (a new reference). */
json_t *lg_peers_render(struct lg_backend *const *backends, size_t n, uint64_t now_ns);

/*
 * Parses an answer into *out (cleared first; lg_peers_clear() frees it).
 * Returns LG_OK, or LG_EINVAL with a message in err ("line:column: what" for
 * bad JSON, "/json/pointer: what" for a bad field). Sequences beyond
 * LG_BACKEND_PEER_SEQS per backend are dropped and the entry marked not
 * complete.
 */
int lg_peers_parse(const char *text, size_t len, struct lg_peer_state *out, char *err,
                   size_t errsize);
void lg_peers_clear(struct lg_peer_state *s);

/* The entry for key, or NULL. */
const struct lg_peer_backend *lg_peers_find(const struct lg_peer_state *s, const char *key);

/*
 * Merges the answers states[0..n) (received at recv_ns[i]; answers older
 * than ttl_ns are left out) for the backend at key into *out, as of now_ns.
 */
void lg_peers_merge(const struct lg_peer_state *const *states, const uint64_t *recv_ns, size_t n,
                    const char *key, uint64_t now_ns, uint64_t ttl_ns,
                    struct lg_backend_peers *out);

#endif /* LG_PEERS_H */
