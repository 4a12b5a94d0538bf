/*
 * attempt.h: one attempt of a request on a backend (attempt.c): what it
 * holds there while it runs, and what its response teaches the backend.
 * Worker thread of the request only.
 */
#ifndef LG_ATTEMPT_H
#define LG_ATTEMPT_H

#include "base/lg_core.h"

struct lg_backend;
struct lg_client;
struct lg_model_route;

/* The backends serving the request's model in the fleet it holds (NULL if none). */
const struct lg_model_route *lg_attempt_route(const struct lg_client *c);

/*
 * Marks backend b tried (or, tried false, not tried: an attempt that did not
 * count) in req->tried, by its index in the model's route; nothing if the
 * route does not hold it.
 */
void lg_attempt_set_tried(struct lg_client *c, const struct lg_backend *b, bool tried);

/*
 * The attempt starts on b, the router's pick (req->attempts counts it
 * already): a reference on b, its in-flight count, the half-open probe
 * when the pick holds it, and where there is room the request's place
 * among b's requests awaiting a first token, b's predicted ends and the
 * engine model's sequences. Stamps req->t_dispatch.
 */
void lg_attempt_begin(struct lg_client *c, struct lg_backend *b);

/*
 * The relay stamped content events (req->content_events grew from
 * `before` at req->t_now): the engine model's count of tokens to come, the
 * first token (the TTFT sample, at once) or every few events the
 * predicted end, moved to the stream's pace.
 */
void lg_attempt_tokens(struct lg_client *c, uint64_t before);

/*
 * A response ended well (req->t_end, req->t_first_token set): decode
 * speed, the slot's hold time, a success for the error rate, the policies'
 * on_result; for a whole (non-streamed) response also its TTFT sample.
 */
void lg_attempt_learn_done(struct lg_client *c, bool whole);

/* The backend failed after the response started (reset, silence, garbage). */
void lg_attempt_failed_midway(struct lg_client *c);

/*
 * The engine failed after its 200 and said so in the stream (an error
 * event): the attempt no longer awaits a first token, and it counts as a
 * failure for health and routing, as a cut stream does; nothing is learnt.
 */
void lg_attempt_failed_in_stream(struct lg_client *c);

/*
 * Ends the running attempt: gives the upstream connection back (keep: it
 * may carry another request; else it closes, which stops the engine),
 * releases the backend and what the attempt held there, and tells the
 * admission queue a slot is free. Safe when nothing runs.
 */
void lg_attempt_end(struct lg_client *c, bool keep);

#endif /* LG_ATTEMPT_H */
