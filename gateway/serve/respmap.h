/*
 * respmap.h: where each Responses API answer was made, so that a follow-up
 * naming it (`previous_response_id`) goes to the replica that holds it
 * (engines keep stored responses in the process that made them).
 *
 * A bounded table shared by the workers: response id (hashed, 64 bits) ->
 * backend id (fleet/backend.h, unique for the process, kept across
 * reloads), with expiry. 4-way sets, the least recently written of a full
 * set replaced; an entry older than the ttl is gone. One mutex, taken once
 * when an answer's id is learnt and once per follow-up.
 */
#ifndef LG_RESPMAP_H
#define LG_RESPMAP_H

#include "base/lg_core.h"

struct lg_respmap;

/* A table of at least `entries` entries (rounded up to a power of two), each kept ttl_ns. */
struct lg_respmap *lg_respmap_new(size_t entries, uint64_t ttl_ns);
void lg_respmap_free(struct lg_respmap *m);

/* Response `id` (n bytes) was made on backend `backend_id` at now_ns. m NULL: nothing. */
void lg_respmap_put(struct lg_respmap *m, const char *id, size_t n, uint32_t backend_id,
                    uint64_t now_ns);

/*
 * The backend that made response `id`: LG_OK with *backend_id, or
 * LG_EDECLINED when the table does not know it (never seen, evicted,
 * expired; m NULL).
 */
int lg_respmap_get(struct lg_respmap *m, const char *id, size_t n, uint64_t now_ns,
                   uint32_t *backend_id);

/* Entries in use, counting expired ones not yet replaced (tests, metrics). */
size_t lg_respmap_count(struct lg_respmap *m);

#endif /* LG_RESPMAP_H */
