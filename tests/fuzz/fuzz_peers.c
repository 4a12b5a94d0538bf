/*
 * fuzz_peers.c: the parser of a peer gateway's /admin/peers answer. Checks
 * that an accepted answer's entries are in range, sorted and unique, and
 * that merging it stays within a backend's bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/peers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct lg_peer_state st;
    struct lg_backend_peers *merged;
    const struct lg_peer_state *states[1];
    uint64_t recv[1] = { 1000 * LG_NS_PER_MS };
    char err[256];
    char *text = malloc(size ? size : 1); /* exact size: ASan sees reads past the end */

    if (text == NULL) {
        return 0;
    }
    memcpy(text, data, size);
    if (lg_peers_parse(text, size, &st, err, sizeof(err)) != LG_OK) {
        if (err[0] == '\0' || st.n != 0 || st.backends != NULL) {
            abort();
        }
        free(text);
        return 0;
    }
    merged = calloc(1, sizeof(*merged));
    states[0] = &st;
    for (size_t i = 0; i < st.n; i++) {
        const struct lg_peer_backend *pb = &st.backends[i];

        if (pb->key[0] == '\0' || pb->nseqs > LG_BACKEND_PEER_SEQS
            || (i > 0 && strcmp(st.backends[i - 1].key, pb->key) >= 0)
            || lg_peers_find(&st, pb->key) != pb) {
            abort();
        }
        for (size_t k = 0; k < pb->nseqs; k++) {
            if (pb->seqs[k].started > 1) {
                abort();
            }
        }
        if (merged != NULL) {
            lg_peers_merge(states, recv, 1, pb->key, recv[0] + 50 * LG_NS_PER_MS,
                           300 * LG_NS_PER_MS, merged);
            if (merged->n > LG_BACKEND_PEER_SEQS || merged->n != pb->nseqs
                || merged->inflight != pb->inflight) {
                abort();
            }
        }
    }
    free(merged);
    lg_peers_clear(&st);
    free(text);
    return 0;
}
