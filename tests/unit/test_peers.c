/*
 * test_peers.c: what gateways sharing a fleet tell each other (peers.c):
 * our answer parses back to our requests, bad answers are refused with a
 * position, and a peer's requests merged into a backend give the engine
 * model the same prediction as had they been our own.
 */
#include <math.h>
#include <string.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/peers.h"
#include "lg_test.h"
#include "lg_test_fleet.h"

static const char text[] =
    "{\"listen\": \"127.0.0.1:8080\", \"backends\": ["
    "{\"name\": \"r1\", \"url\": \"http://127.0.0.1:9001\", \"models\": [\"m\"]},"
    "{\"name\": \"r2\", \"url\": \"http://[::1]:9002\", \"models\": [\"m\"]}]}";

static struct lg_config *conf;
static struct lg_fleet *fleet;

static int
setup(void)
{
    return lg_test_fleet_load(text, &conf, &fleet);
}

static int
teardown(void)
{
    return lg_test_fleet_free(conf, fleet);
}

/* Our answer, parsed back: keys, counts and each sequence. */
static int
test_render_parses_back(void)
{
    struct lg_backend *b = fleet->backends[0];
    uint64_t t = lg_now_ns(), ms = LG_NS_PER_MS;
    struct lg_peer_state st;
    const struct lg_peer_backend *pb;
    char err[128] = "";
    size_t len;
    json_t *doc;
    char *json;
    int s[2];

    s[0] = lg_backend_seq_add(b, t, 4000, 20, 0);
    s[1] = lg_backend_seq_add(b, t + 5 * ms, 400, 3, 0);
    lg_backend_seq_left(b, s[0], 7, t + 20 * ms);
    __atomic_store_n(&b->inflight, 3, __ATOMIC_RELAXED); /* one without a word */
    doc = lg_peers_render(fleet->backends, fleet->nbackends, t + 30 * ms);
    json = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    LG_CHECK(json != NULL);
    len = strlen(json);
    LG_CHECK(lg_peers_parse(json, len, &st, err, sizeof(err)) == LG_OK);
    free(json);
    LG_CHECK_STR(st.id, lg_peers_self_id());
    LG_CHECK(st.n == 2);
    LG_CHECK(lg_peers_find(&st, "127.0.0.1:9002") == NULL);
    pb = lg_peers_find(&st, "[::1]:9002");
    LG_CHECK(pb != NULL && pb->inflight == 0 && pb->complete && pb->nseqs == 0);
    pb = lg_peers_find(&st, "127.0.0.1:9001");
    LG_CHECK(pb != NULL && pb->inflight == 3 && !pb->complete && pb->nseqs == 2);
    for (size_t i = 0; i < 2; i++) {
        const struct lg_seq_info *q = &pb->seqs[i];

        if (q->started) {
            LG_CHECK(q->left == 7 && q->prompt_tokens == 1000 && q->age_ms == 0);
        } else {
            LG_CHECK(q->left == 3 && q->prompt_tokens == 100 && q->age_ms == 25);
        }
    }
    LG_CHECK(pb->seqs[0].started != pb->seqs[1].started);
    lg_peers_clear(&st);
    lg_backend_seq_del(b, s[0]);
    lg_backend_seq_del(b, s[1]);
    __atomic_store_n(&b->inflight, 0, __ATOMIC_RELAXED);
    return 0;
}

static int
refused(const char *json, const char *want)
{
    struct lg_peer_state st;
    char err[256] = "";

    if (lg_peers_parse(json, strlen(json), &st, err, sizeof(err)) != LG_EINVAL
        || strstr(err, want) == NULL || st.n != 0 || st.backends != NULL) {
        fprintf(stderr, "  %s -> %s (wanted %s)\n", json, err, want);
        return 1;
    }
    return 0;
}

#define ID "\"id\": \"0123456789abcdef\", \"changes\": 1"

static int
test_bad_answers(void)
{
    LG_CHECK(refused("{\"format\": 1,\n \"id\": }", "2:") == 0); /* line:column */
    LG_CHECK(refused("[]", "not a JSON object") == 0);
    LG_CHECK(refused("{\"format\": 2, " ID ", \"backends\": []}", "/format") == 0);
    LG_CHECK(refused("{\"format\": 1, \"id\": \"x\", \"backends\": []}", "/id") == 0);
    LG_CHECK(refused("{\"format\": 1, " ID "}", "/backends") == 0);
    LG_CHECK(refused("{\"format\": 1, \"id\": \"0123456789abcdef\", \"changes\": -1, "
                     "\"backends\": []}",
                     "/changes")
             == 0);
    LG_CHECK(refused("{\"format\": 1, " ID ", \"backends\": [{\"key\": \"a:1\", \"inflight\": -1, "
                     "\"complete\": true, \"seqs\": []}]}",
                     "/backends/0/inflight")
             == 0);
    LG_CHECK(refused("{\"format\": 1, " ID ", \"backends\": [{\"key\": \"a:1\", \"inflight\": 1, "
                     "\"complete\": true, \"seqs\": [[1, 2, 3]]}]}",
                     "/backends/0/seqs/0")
             == 0);
    LG_CHECK(refused("{\"format\": 1, " ID ", \"backends\": [{\"key\": \"a:1\", \"inflight\": 1, "
                     "\"complete\": true, \"seqs\": [[2, 2, 3, 4]]}]}",
                     "/backends/0/seqs/0")
             == 0);
    LG_CHECK(refused("{\"format\": 1, " ID ", \"backends\": ["
                     "{\"key\": \"a:1\", \"inflight\": 0, \"complete\": true, \"seqs\": []},"
                     "{\"key\": \"a:1\", \"inflight\": 0, \"complete\": true, \"seqs\": []}]}",
                     "a:1 twice")
             == 0);
    LG_CHECK(refused("{\"format\": 1, \"format\": 1, " ID ", \"backends\": []}", "duplicate") == 0);
    return 0;
}

/* A peer's requests on r2 give the prediction our own would on r1; a stale
 * answer, or one with a request of unknown length, leaves the model to us. */
static int
test_merged_peer_is_as_our_own(void)
{
    struct lg_backend *ours = fleet->backends[0], *theirs = fleet->backends[1];
    uint64_t t = lg_now_ns(), ms = LG_NS_PER_MS, ttl = 300 * ms;
    struct lg_seq_info seqs[4];
    struct lg_peer_backend pb = { .key = "[::1]:9002", .inflight = 3, .complete = true };
    struct lg_peer_state st = { .id = "0123456789abcdef", .n = 1, .backends = &pb };
    const struct lg_peer_state *states[] = { &st };
    struct lg_backend_peers merged;
    uint64_t recv[] = { t + 5 * ms };
    bool complete;
    double own_ms, peer_ms;
    int s[3];

    s[0] = lg_backend_seq_add(ours, t, 4000, 20, 0);
    s[1] = lg_backend_seq_add(ours, t + 5 * ms, 400, 3, 0);
    s[2] = lg_backend_seq_add(ours, t + 8 * ms, 40, 5, 0);
    lg_backend_seq_left(ours, s[0], 12, t + 6 * ms);
    __atomic_store_n(&ours->inflight, 3, __ATOMIC_RELAXED);
    /* what a peer would have answered at t + 9 ms, received at t + 9 */
    pb.nseqs = lg_backend_seqs_read(ours, t + 9 * ms, seqs, LG_ARRAY_SIZE(seqs), &complete);
    pb.seqs = seqs;
    LG_CHECK(pb.nseqs == 3 && complete);
    recv[0] = t + 9 * ms;
    lg_peers_merge(states, recv, 1, "[::1]:9002", t + 9 * ms, ttl, &merged);
    LG_CHECK(merged.inflight == 3 && merged.n == 3 && merged.complete && merged.gateways == 1);
    lg_backend_publish_peers(theirs, &merged);
    LG_CHECK(lg_backend_peer_inflight(theirs, t + 10 * ms) == 3);
    /* the step in progress: place it the same on both (a token of ours
     * on r2 at the same moment as r1's last) */
    __atomic_store_n(&theirs->token_t_ns, t + 6 * ms, __ATOMIC_RELAXED);
    own_ms = engine_model_ms(ours, t + 10 * ms, 2, 10, 0, 0.05, 0, NULL);
    peer_ms = engine_model_ms(theirs, t + 10 * ms, 2, 10, 0, 0.05, 0, NULL);
    LG_CHECK(own_ms > 10 && fabs(own_ms - peer_ms) < 1.5); /* ms clock resolution */
    /* a step later, the started one has a token fewer by the peer's count */
    LG_CHECK(engine_model_ms(theirs, t + 30 * ms, 2, 10, 0, 0.05, 0, NULL) > 0);
    /* stale: the peer's requests are unknown, so r2 looks idle to the model
     * (the view's residual from the scrape then keeps the model off) */
    LG_CHECK(lg_backend_peer_inflight(theirs, t + 9 * ms + ttl) == 0);
    LG_CHECK(engine_model_ms(theirs, t + 9 * ms + ttl, 2, 10, 0, 0.05, 0, NULL) == 10);
    /* a peer request without a length: the model declines */
    pb.complete = false;
    lg_peers_merge(states, recv, 1, "[::1]:9002", t + 9 * ms, ttl, &merged);
    lg_backend_publish_peers(theirs, &merged);
    LG_CHECK(engine_model_ms(theirs, t + 10 * ms, 2, 10, 0, 0.05, 0, NULL) == -1);
    /* a peer without that backend, and one not heard from: nothing merged */
    lg_peers_merge(states, recv, 1, "127.0.0.1:1", t + 9 * ms, ttl, &merged);
    LG_CHECK(merged.inflight == 0 && merged.n == 0 && merged.gateways == 1);
    recv[0] = 0;
    lg_peers_merge(states, recv, 1, "[::1]:9002", t + 9 * ms, ttl, &merged);
    LG_CHECK(merged.t_ns == 0 && merged.gateways == 0);
    lg_backend_publish_peers(theirs, &merged);
    for (int i = 0; i < 3; i++) {
        lg_backend_seq_del(ours, s[i]);
    }
    __atomic_store_n(&ours->inflight, 0, __ATOMIC_RELAXED);
    return 0;
}

LG_TEST_MAIN(setup, test_render_parses_back, test_bad_answers, test_merged_peer_is_as_our_own,
             teardown)
