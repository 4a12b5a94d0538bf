/*
 * attempt.h: one attempt of a request on a backend (attempt.c): its
 * storage and phases, what it holds on its backend while it runs, what its
 * response teaches the backend, how it ends. The types are in
 * attempt_types.h. Worker thread of the request only.
 */
#ifndef LG_ATTEMPT_H
#define LG_ATTEMPT_H

#include "base/fail.h"
#include "base/lg_core.h"
#include "serve/attempt_types.h"

struct lg_backend;
struct lg_client;
struct lg_model_route;
struct lg_timeouts_conf;

/* The backends serving the request's model in the fleet it holds (NULL if
 * none), as proxy_start() found them once. */
const struct lg_model_route *lg_attempt_route(const struct lg_client *c);

/*
 * Marks backend b tried (or, tried false, not tried: an attempt that did not
 * count) in req->tries.tried, by its index in the model's route; nothing if the
 * route does not hold it.
 */
void lg_attempt_set_tried(struct lg_client *c, const struct lg_backend *b, bool tried);

/*
 * The request's next attempt, of `kind` (a hedge's duplicate excepted:
 * hedge.c has its own): the request's own storage, made the current attempt
 * (req->att) and cleared but for its pick, which the router's next pick
 * overwrites. An ended attempt that was current goes to the request's
 * list of ended ones first (while the access log is on). The own storage
 * must not run.
 */
struct lg_attempt *lg_attempt_next(struct lg_client *c, enum lg_attempt_kind kind);

/* Clears storage for a new attempt of `kind` that is not the request's
 * current one (a hedge's duplicate); its pick as lg_attempt_next(). */
void lg_attempt_init(struct lg_attempt *a, enum lg_attempt_kind kind);

/*
 * Moves a to phase `to`, asserting the move is legal (attempt_types.h);
 * the client's state follows its current attempt's phase (CONNECT,
 * WAIT_HEAD, RELAY).
 */
void lg_attempt_set_phase(struct lg_client *c, struct lg_attempt *a, enum lg_attempt_phase to);

/*
 * The attempt a is launched on its pick's backend: counted in the
 * request's tries, it holds a reference on the backend, its in-flight
 * count, the half-open probe when the pick holds it, and where there is
 * room its place among the backend's requests awaiting a first token, its
 * predicted ends and the engine model's sequences. Stamps a->t_dispatch.
 */
void lg_attempt_begin(struct lg_client *c, struct lg_attempt *a);

/*
 * a (a hedge's duplicate) becomes the request's current attempt: the one
 * it replaces, ended, goes to the list of ended ones; the client's state
 * follows a's phase.
 */
void lg_attempt_make_current(struct lg_client *c, struct lg_attempt *a);

/*
 * a's response head says `status` (retry_after_ns: its Retry-After): told
 * to its backend's health, and to the router when it is a retryable
 * failure (429, 5xx).
 */
void lg_attempt_note_head(struct lg_client *c, struct lg_attempt *a, int status,
                          uint64_t retry_after_ns);

/*
 * The relay stamped `got` content events of the current attempt's stream
 * at req->t_now: the request's count and gaps, the engine model's count of
 * tokens to come, the attempt's first token (the TTFT sample, at once) or
 * every few events its predicted end, moved to the stream's pace.
 */
void lg_attempt_tokens(struct lg_client *c, unsigned got);

/*
 * The current attempt's response ended well (req->t_end, req->t_first_token
 * set): decode speed, the slot's hold time, a success for the error rate,
 * the policies' on_result; for a whole (non-streamed) response also its
 * TTFT sample.
 */
void lg_attempt_learn_done(struct lg_client *c, bool whole);

/*
 * Ends a, for `why` (LG_FAIL_NONE: it ended well): when why counts
 * against the backend, its health and the router are told (after its head:
 * as a failure midway); it gives its upstream connection back (keep: it
 * may carry another request; else it closes, which stops the engine),
 * releases the backend and what it held there, tells the admission queue
 * a slot is free, and is DONE. An attempt that is not the current one
 * goes to the list of ended ones. Safe when a holds nothing.
 */
void lg_attempt_end(struct lg_client *c, struct lg_attempt *a, enum lg_fail why, bool keep);

/*
 * How long a's response head may take (timeouts.first_byte): from the
 * request's sending to its first byte, and from its first byte to its end
 * (relay.c). A continuation's no longer than stream_idle either: its
 * client is waiting mid-stream.
 */
uint64_t lg_attempt_first_byte_ms(const struct lg_timeouts_conf *to, const struct lg_attempt *a);

/* Whether the phase machine allows from -> to (lg_attempt_set_phase() asserts it). */
bool lg_attempt_can_move(enum lg_attempt_phase from, enum lg_attempt_phase to);

#endif /* LG_ATTEMPT_H */
