/*
 * peers.c: the answer gateways exchange about their requests on a shared
 * fleet (see peers.h): rendering ours, parsing a peer's, merging peers'.
 *
 * Owns: nothing beyond the parsed states its callers hold. Reads live state
 * (atomics) only; the health thread fetches and publishes (health.c).
 */
#include "fleet/peers.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"

/* ---- identity ------------------------------------------------------------ */

static char peers_id[17];
static pthread_once_t peers_id_once = PTHREAD_ONCE_INIT;

static void
peers_id_init(void)
{
    uint64_t r = 0;

    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r)) {
        r = lg_mix64((uint64_t)getpid() ^ lg_now_ns() ^ (uint64_t)time(NULL));
    }
    snprintf(peers_id, sizeof(peers_id), "%016llx", (unsigned long long)r);
}

const char *
lg_peers_self_id(void)
{
    pthread_once(&peers_id_once, peers_id_init);
    return peers_id;
}

void
lg_peers_key(const struct lg_backend_conf *bc, char *out, size_t size)
{
    snprintf(out, size, strchr(bc->host, ':') ? "[%s]:%u" : "%s:%u", bc->host, (unsigned)bc->port);
}

/* ---- our answer ------------------------------------------------------------ */

json_t *
lg_peers_render(struct lg_backend *const *backends, size_t nbackends, uint64_t now_ns)
{
    struct lg_seq_info seqs[LG_BACKEND_END_SLOTS];
    uint64_t changes = lg_backend_changes(); /* before: a change while rendering is news */
    json_t *list = json_array();

    for (size_t i = 0; i < nbackends; i++) {
        const struct lg_backend *b = backends[i];
        char key[LG_PEERS_KEY_MAX];
        bool complete;
        size_t n = lg_backend_seqs_read(b, now_ns, seqs, LG_ARRAY_SIZE(seqs), &complete);
        json_t *arr = json_array();

        for (size_t k = 0; k < n; k++) {
            json_array_append_new(
                arr, json_pack("[i, I, I, I]", (int)seqs[k].started, (json_int_t)seqs[k].left,
                               (json_int_t)seqs[k].prompt_tokens, (json_int_t)seqs[k].age_ms));
        }
        lg_peers_key(lg_backend_conf(b), key, sizeof(key));
        json_array_append_new(list, json_pack("{s:s, s:I, s:b, s:o}", "key", key, "inflight",
                                              (json_int_t)lg_backend_inflight(b), "complete",
                                              complete, "seqs", arr));
    }
    return json_pack("{s:i, s:s, s:I, s:o}", "format", LG_PEERS_FORMAT, "id", lg_peers_self_id(),
                     "changes", (json_int_t)changes, "backends", list);
}

/* ---- a peer's answer ---------------------------------------------------------- */

static int peers_fail(char *err, size_t errsize, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
peers_fail(char *err, size_t errsize, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errsize, fmt, ap);
    va_end(ap);
    return LG_EINVAL;
}

/* A JSON integer in [0, max] into *out. */
static bool
peers_uint(const json_t *v, uint64_t max, uint32_t *out)
{
    json_int_t x;

    if (!json_is_integer(v)) {
        return false;
    }
    x = json_integer_value(v);
    if (x < 0 || (uint64_t)x > max) {
        return false;
    }
    *out = (uint32_t)x;
    return true;
}

static int
peers_key_cmp(const void *a, const void *b)
{
    return strcmp(((const struct lg_peer_backend *)a)->key,
                  ((const struct lg_peer_backend *)b)->key);
}

static int
peers_parse_backend(const json_t *o, size_t i, struct lg_peer_backend *pb, char *err,
                    size_t errsize)
{
    const json_t *key = json_object_get(o, "key");
    const json_t *complete = json_object_get(o, "complete");
    const json_t *seqs = json_object_get(o, "seqs");
    size_t n;

    if (!json_is_object(o)) {
        return peers_fail(err, errsize, "/backends/%zu: not an object", i);
    }
    if (!json_is_string(key) || json_string_length(key) == 0
        || json_string_length(key) >= sizeof(pb->key)
        || strlen(json_string_value(key)) != json_string_length(key)) {
        return peers_fail(err, errsize, "/backends/%zu/key: not a host:port string", i);
    }
    memcpy(pb->key, json_string_value(key), json_string_length(key) + 1);
    if (!peers_uint(json_object_get(o, "inflight"), UINT32_MAX, &pb->inflight)) {
        return peers_fail(err, errsize, "/backends/%zu/inflight: not a count", i);
    }
    if (!json_is_boolean(complete)) {
        return peers_fail(err, errsize, "/backends/%zu/complete: not true or false", i);
    }
    pb->complete = json_is_true(complete);
    if (!json_is_array(seqs)) {
        return peers_fail(err, errsize, "/backends/%zu/seqs: not an array", i);
    }
    n = json_array_size(seqs);
    if (n > LG_BACKEND_PEER_SEQS) {
        n = LG_BACKEND_PEER_SEQS; /* more than the model takes: it declines */
        pb->complete = false;
    }
    pb->seqs = n ? lg_xcalloc(n, sizeof(*pb->seqs)) : NULL;
    for (size_t k = 0; k < n; k++) {
        const json_t *s = json_array_get(seqs, k);
        struct lg_seq_info *q = &pb->seqs[k];

        if (!json_is_array(s) || json_array_size(s) != 4
            || !peers_uint(json_array_get(s, 0), 1, &q->started)
            || !peers_uint(json_array_get(s, 1), UINT32_MAX, &q->left)
            || !peers_uint(json_array_get(s, 2), UINT32_MAX, &q->prompt_tokens)
            || !peers_uint(json_array_get(s, 3), UINT32_MAX, &q->age_ms)) {
            return peers_fail(err, errsize,
                              "/backends/%zu/seqs/%zu: not [started, left, prompt, age]", i, k);
        }
        pb->nseqs++;
    }
    return LG_OK;
}

int
lg_peers_parse(const char *text, size_t len, struct lg_peer_state *out, char *err, size_t errsize)
{
    json_error_t je;
    json_t *root, *list;
    const json_t *id, *format, *changes;
    size_t n;
    int rc = LG_OK;

    memset(out, 0, sizeof(*out));
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) {
        return peers_fail(err, errsize, "%d:%d: %s", je.line, je.column, je.text);
    }
    format = json_object_get(root, "format");
    changes = json_object_get(root, "changes");
    id = json_object_get(root, "id");
    list = json_object_get(root, "backends");
    if (!json_is_object(root)) {
        rc = peers_fail(err, errsize, "not a JSON object");
    } else if (!json_is_integer(format) || json_integer_value(format) != LG_PEERS_FORMAT) {
        rc = peers_fail(err, errsize, "/format: not %d (a gateway of another version?)",
                        LG_PEERS_FORMAT);
    } else if (!json_is_string(id) || json_string_length(id) != sizeof(out->id) - 1
               || strspn(json_string_value(id), "0123456789abcdef") != sizeof(out->id) - 1) {
        rc = peers_fail(err, errsize, "/id: not 16 hex digits");
    } else if (!json_is_array(list)) {
        rc = peers_fail(err, errsize, "/backends: not an array");
    } else if (!json_is_integer(changes) || json_integer_value(changes) < 0) {
        rc = peers_fail(err, errsize, "/changes: not a count");
    }
    if (rc != LG_OK) {
        json_decref(root);
        return rc;
    }
    memcpy(out->id, json_string_value(id), sizeof(out->id));
    out->changes = (uint64_t)json_integer_value(changes);
    n = json_array_size(list);
    out->backends = n ? lg_xcalloc(n, sizeof(*out->backends)) : NULL;
    for (size_t i = 0; i < n && rc == LG_OK; i++) {
        rc = peers_parse_backend(json_array_get(list, i), i, &out->backends[i], err, errsize);
        out->n++; /* the failed one too: cleared with the rest */
    }
    json_decref(root);
    if (rc != LG_OK) {
        lg_peers_clear(out);
        return rc;
    }
    if (out->n > 1) {
        qsort(out->backends, out->n, sizeof(*out->backends), peers_key_cmp);
    }
    for (size_t i = 1; i < out->n; i++) {
        if (strcmp(out->backends[i - 1].key, out->backends[i].key) == 0) {
            rc = peers_fail(err, errsize, "/backends: %s twice", out->backends[i].key);
            lg_peers_clear(out);
            return rc;
        }
    }
    return LG_OK;
}

void
lg_peers_clear(struct lg_peer_state *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->backends[i].seqs);
    }
    free(s->backends);
    memset(s, 0, sizeof(*s));
}

const struct lg_peer_backend *
lg_peers_find(const struct lg_peer_state *s, const char *key)
{
    struct lg_peer_backend probe;

    if (s->n == 0 || strlen(key) >= sizeof(probe.key)) {
        return NULL;
    }
    strcpy(probe.key, key);
    return bsearch(&probe, s->backends, s->n, sizeof(*s->backends), peers_key_cmp);
}

/* ---- merging ------------------------------------------------------------------ */

void
lg_peers_merge(const struct lg_peer_state *const *states, const uint64_t *recv_ns, size_t n,
               const char *key, uint64_t now_ns, uint64_t ttl_ns, struct lg_backend_peers *out)
{
    memset(out, 0, sizeof(*out));
    out->ttl_ns = ttl_ns;
    out->complete = 1;
    for (size_t i = 0; i < n; i++) {
        const struct lg_peer_backend *pb;
        uint32_t since;

        if (recv_ns[i] == 0 || now_ns < recv_ns[i] || now_ns - recv_ns[i] >= ttl_ns) {
            continue; /* none yet, or stale: what it sends counts as unknown load */
        }
        out->gateways++;
        out->t_ns = out->t_ns == 0 ? recv_ns[i] : LG_MIN(out->t_ns, recv_ns[i]);
        pb = lg_peers_find(states[i], key);
        if (pb == NULL) {
            continue; /* that gateway does not route to it */
        }
        out->inflight += pb->inflight;
        out->complete &= pb->complete;
        since = (uint32_t)((now_ns - recv_ns[i]) / LG_NS_PER_MS);
        for (size_t k = 0; k < pb->nseqs; k++) {
            struct lg_seq_info s = pb->seqs[k];

            if (out->n == LG_BACKEND_PEER_SEQS) {
                out->complete = 0;
                break;
            }
            s.age_ms = s.age_ms > UINT32_MAX - since ? UINT32_MAX : s.age_ms + since;
            out->words[out->n++] = lg_backend_seq_word(&s, now_ns);
        }
    }
}
