/*
 * attempt.c: one attempt of a request on a backend: what it holds there
 * while it runs (a reference, the in-flight count, the half-open probe, its
 * place among the requests awaiting a first token, the predicted ends and
 * the engine model's sequences) and what its response teaches the backend
 * (first token, pace, end: the estimators; how it failed: ejection).
 *
 * Owns, per request: the backend reference and the backend's in-flight
 * count for the running attempt, and its slots there. Borrows: the client
 * (which owns the request) and the upstream connection (given back with
 * lg_upstream_release(), never freed here).
 * Invariant: req->backend != NULL exactly while an attempt counts in the
 * backend's in-flight; each LG_REQ_F_* slot flag is set exactly while its
 * slot is held.
 */
#include "serve/attempt.h"

#include <string.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/fleet.h"
#include "route/router.h"
#include "route/tried.h"
#include "serve/admission.h"
#include "serve/client.h"
#include "serve/upstream.h"

const struct lg_model_route *
lg_attempt_route(const struct lg_client *c)
{
    return lg_fleet_find_model(c->req.fleet, c->req.info.model);
}

void
lg_attempt_set_tried(struct lg_client *c, const struct lg_backend *b, bool tried)
{
    const struct lg_model_route *route = lg_attempt_route(c);

    for (size_t i = 0; route != NULL && i < route->n; i++) {
        if (route->backends[i] != b) {
            continue;
        }
        if (tried) {
            lg_tried_add(&c->req.tried, i, route->n);
        } else {
            lg_tried_del(&c->req.tried, i);
        }
    }
}

/* The attempt no longer awaits a first token (it came, or the attempt ended). */
static void
attempt_token_wait_end(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (req->flags & LG_REQ_F_TOKEN_WAIT) {
        req->flags &= ~LG_REQ_F_TOKEN_WAIT;
        lg_backend_ages_del(req->backend, LG_BACKEND_AGES_PENDING, req->t_dispatch);
        lg_backend_due_del(req->backend, req->due_slot);
    }
}

/* The attempt no longer holds a predicted end on its backend. */
static void
attempt_end_slot_clear(struct lg_request *req)
{
    if (req->flags & LG_REQ_F_END_SLOT) {
        req->flags &= ~LG_REQ_F_END_SLOT;
        lg_backend_end_del(req->backend, req->end_slot);
    }
}

/* The attempt no longer holds a sequence in its backend's engine model. */
static void
attempt_seq_clear(struct lg_request *req)
{
    if (req->flags & LG_REQ_F_SEQ) {
        req->flags &= ~LG_REQ_F_SEQ;
        lg_backend_seq_del(req->backend, req->seq_slot);
    }
}

/* (Re)sets when the attempt should end, from its output length: after
 * `ms` more (lg_backend_end_add; a slot it holds is moved in place).
 * Nothing without max_tokens. */
static void
attempt_end_slot_set(struct lg_request *req, uint64_t from_ns, double ms)
{
    uint64_t end_ns;

    if (!(ms >= 0) || req->info.max_tokens <= 0) {
        attempt_end_slot_clear(req);
        return; /* (NaN included) */
    }
    ms = LG_MIN(ms, 86400e3); /* a day: later than any slot frees */
    end_ns = from_ns + (uint64_t)(ms * 1e6);
    if (req->flags & LG_REQ_F_END_SLOT) {
        lg_backend_end_move(req->backend, req->end_slot, end_ns);
        return;
    }
    req->end_slot = lg_backend_end_add(req->backend, end_ns, (uint32_t)(from_ns >> 10));
    if (req->end_slot >= 0) {
        req->flags |= LG_REQ_F_END_SLOT;
    }
}

/* Whether this response's first token teaches its backend anything (a
 * success there): then *prior is its route's, which the samples blend in. */
static bool
attempt_sample_prior(struct lg_client *c, struct lg_est_prior *prior)
{
    struct lg_request *req = &c->req;
    const struct lg_model_route *route = lg_attempt_route(c);

    if (req->backend == NULL || route == NULL || req->status < 200 || req->status >= 300) {
        return false;
    }
    lg_route_read_prior(route, prior);
    return true;
}

/* The time from dispatch to the first token: the gateway queues nothing
 * before it. */
static double
attempt_ttft_ms(const struct lg_request *req)
{
    return (double)(req->t_first_token - req->t_dispatch) / 1e6;
}

/*
 * Whether the first token of this response teaches the backend's TTFT model:
 * then *prior and *ttft_ms are set.
 */
static bool
attempt_ttft_sample(struct lg_client *c, struct lg_est_prior *prior, double *ttft_ms)
{
    if (c->req.pick.queued || !attempt_sample_prior(c, prior)) {
        return false; /* queued: it waited for a slot, which says how busy, not how fast */
    }
    *ttft_ms = attempt_ttft_ms(&c->req);
    return true;
}

/*
 * Every ATTEMPT_END_EVERY content events of a stream its predicted end is
 * moved to what the stream's recent pace says: the events still to come
 * (max_tokens less those seen) at its mean gap since the last move. The gap
 * the pick assumed was the replica's before this request joined its batch;
 * as the batch grows (or the replica slows), streams there run longer than
 * that, and a slot they were thought to free soon stays taken.
 */
#define ATTEMPT_END_EVERY 8
/*
 * The engine's step, from a stream: the lower quartile of its last gaps. A
 * step that admits a prompt lasts its prefill longer; the engine model adds
 * the prefills it knows of, so it steps by the plain ones (the mean, or a
 * median when most steps admit one, would count prefills twice).
 */
static double
attempt_gap_step(const struct lg_request *req)
{
    float g[LG_ARRAY_SIZE(req->gaps)];
    size_t n = LG_MIN(req->ngaps, LG_ARRAY_SIZE(g));

    memcpy(g, req->gaps, n * sizeof(g[0]));
    for (size_t i = 1; i < n; i++) {
        float x = g[i];
        size_t j = i;

        for (; j > 0 && g[j - 1] > x; j--) {
            g[j] = g[j - 1];
        }
        g[j] = x;
    }
    return n >= 8 ? ((double)g[n / 4 - 1] + (double)g[n / 4]) / 2 : (double)g[n / 4];
}

static void
attempt_end_refresh(struct lg_request *req)
{
    uint64_t n = req->content_events - req->pace_events;
    double gap_ms, left;

    if (n == 0 || req->t_now <= req->t_pace) {
        return;
    }
    gap_ms = (double)(req->t_now - req->t_pace) / 1e6 / (double)n;
    left = (double)req->info.max_tokens - (double)req->content_events;
    attempt_end_slot_set(req, req->t_now, (left > 0 ? left : 0) * gap_ms);
    if (req->ngaps >= 4) {
        lg_backend_note_pace(req->backend, req->t_now, attempt_gap_step(req),
                             lg_backend_started(req->backend, req->t_now));
    }
    req->t_pace = req->t_now;
    req->pace_events = req->content_events;
}

/* What the pick predicted before the request's own first-token work: a
 * slot, then the first tokens of the requests there before it. */
static double
attempt_pick_wait_ms(const struct lg_request *req)
{
    return req->pick.wait_ms + req->pick.ahead_ms;
}

/* The first content event of a stream: the TTFT sample, at once. */
static void
attempt_first_token(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    struct lg_est_prior prior;

    attempt_token_wait_end(c);
    if (req->flags & LG_REQ_F_END_SLOT) {
        attempt_end_slot_set(req, req->t_first_token,
                             (double)(req->info.max_tokens - 1) * req->pick.itl_ms);
    }
    if (attempt_sample_prior(c, &prior)) {
        /* the engine model's samples where it could tell, the measured
         * terms', and the TTFT fit's unless it queued (as
         * attempt_ttft_sample()) */
        struct lg_backend_first f = {
            .prompt_bytes = req->info.prompt_bytes,
            .ttft_ms = attempt_ttft_ms(req),
            .wait_ms = req->pick.queued ? -1 : attempt_pick_wait_ms(req),
            .model_ms = req->pick.model_ms,
            .pred_ms = req->pick.model_pred_ms,
            .model_scale = req->pick.model_scale,
            .meas_pred_ms = req->pick.meas_pred_ms,
            .load = req->pick.load,
            .prefill_ms = req->pick.prefill_ms,
        };

        lg_backend_note_first_token(req->backend, &prior, &f);
    }
}

/*
 * A response ended well: decode speed, slot hold time, a success for the
 * error rate, policies' on_result; for a whole (non-streamed) response also
 * its TTFT sample, all under one lock.
 */
void
lg_attempt_learn_done(struct lg_client *c, bool whole)
{
    struct lg_request *req = &c->req;
    struct lg_backend *b = req->backend;
    struct lg_est_prior prior;
    double itl = -1, hold, ttft = 0;
    bool learn_ttft = false;

    if (whole) {
        attempt_token_wait_end(c);
        learn_ttft = attempt_ttft_sample(c, &prior, &ttft);
    }
    if (b == NULL || req->status < 200 || req->status >= 300) {
        return;
    }
    if ((req->flags & LG_REQ_F_SSE) && req->content_events > 1 && req->resumed == 0) {
        /* (a continuation's stream began on another backend, with a pause in it) */
        itl = (double)(req->t_last_token - req->t_first_token) / 1e6
              / (double)(req->content_events - 1);
    }
    /* less the wait for a slot only: behind others' prefill it holds one */
    hold = (double)(req->t_end - req->t_dispatch) / 1e6 - req->pick.wait_ms;
    lg_backend_note_done(b, learn_ttft ? &prior : NULL, req->info.prompt_bytes, ttft,
                         attempt_pick_wait_ms(req), itl, hold > 0 ? hold : 0);
    lg_router_note_result(req->fleet->router, lg_attempt_route(c), &req->route, b, req->status,
                          req->t_first_token > req->t_dispatch ? req->t_first_token - req->t_dispatch
                                                               : 0, /* a continuation's: none */
                          req->t_end - req->t_dispatch);
}

/* The backend failed after the response started (reset, silence, garbage). */
void
lg_attempt_failed_midway(struct lg_client *c)
{
    struct lg_request *req = &c->req;

    if (req->backend != NULL) {
        lg_backend_note_result(req->backend, &req->fleet->conf->health, 0, 0, LG_BACKEND_R_MIDWAY);
        lg_router_note_result(req->fleet->router, lg_attempt_route(c), &req->route, req->backend, 0,
                              0, 0);
    }
}

/* The engine failed inside a 200 stream and said so (an error event). */
void
lg_attempt_failed_in_stream(struct lg_client *c)
{
    attempt_token_wait_end(c);
    lg_attempt_failed_midway(c);
}

/* The attempt starts on b (req->pick.backend, counted in req->attempts):
 * it holds b and its in-flight count, and, where there is room, its place
 * among b's requests awaiting a first token, b's predicted ends and the
 * engine model's sequences. */
void
lg_attempt_begin(struct lg_client *c, struct lg_backend *b)
{
    struct lg_request *req = &c->req;

    req->backend = lg_backend_ref(b);
    lg_backend_inflight_add(b, 1);
    LG_STAT_ADD(b, requests, 1);
    if (req->attempts > 1) {
        LG_STAT_ADD(b, retries, 1);
    }
    req->flags |= LG_REQ_F_PROXIED;
    req->t_dispatch = lg_now_ns();
    if (req->pick.probe) {
        req->flags |= LG_REQ_F_PROBE;
    }
    if (lg_backend_ages_add(b, LG_BACKEND_AGES_PENDING, req->t_dispatch)) {
        req->flags |= LG_REQ_F_TOKEN_WAIT;
        req->due_slot = lg_backend_due_add(b, req->t_dispatch, req->pick.service_ms,
                                           (uint32_t)(req->t_dispatch >> 10));
    }
    if (lg_backend_ages_add(b, LG_BACKEND_AGES_INFLIGHT, req->t_dispatch)) {
        req->flags |= LG_REQ_F_AGED;
    }
    attempt_end_slot_set(req, req->t_dispatch,
                         attempt_pick_wait_ms(req) + req->pick.service_ms
                             + (double)req->info.max_tokens * req->pick.itl_ms);
    if (req->info.stream && req->info.max_tokens > 0) {
        /* a stream's tokens tell the engine model how far it is */
        req->seq_slot = lg_backend_seq_add(b, req->t_dispatch, req->info.prompt_bytes,
                                           (uint32_t)LG_MIN(req->info.max_tokens, UINT32_MAX),
                                           (uint32_t)(req->t_dispatch >> 10));
        if (req->seq_slot >= 0) {
            req->flags |= LG_REQ_F_SEQ;
        }
    }
}

/* Content events came (req->content_events grew from `before`, stamped by
 * the relay): the engine model's word, the first token, the predicted end. */
void
lg_attempt_tokens(struct lg_client *c, uint64_t before)
{
    struct lg_request *req = &c->req;

    if (req->flags & LG_REQ_F_SEQ) {
        lg_backend_seq_left(req->backend, req->seq_slot,
                            (uint64_t)req->info.max_tokens > req->content_events
                                ? (uint64_t)req->info.max_tokens - req->content_events
                                : 0,
                            req->t_now);
    }
    if (req->t_first_token == 0) {
        req->t_first_token = req->t_now;
        req->t_pace = req->t_now;
        req->pace_events = req->content_events;
        attempt_first_token(c);
    } else if (req->flags & LG_REQ_F_TOKEN_WAIT) {
        /* a continuation's first token (resume.c): its wait is over; the
         * stream's first token was another attempt's, so no TTFT sample */
        attempt_token_wait_end(c);
        req->t_pace = req->t_now;
        req->pace_events = req->content_events;
    } else if ((req->flags & LG_REQ_F_END_SLOT)
               && before / ATTEMPT_END_EVERY != req->content_events / ATTEMPT_END_EVERY) {
        attempt_end_refresh(req);
    }
}

/* Ends the running attempt: gives the connection back, releases the backend. */
void
lg_attempt_end(struct lg_client *c, bool keep)
{
    struct lg_request *req = &c->req;

    if (req->up != NULL) {
        lg_upstream_release(req->up, keep);
        req->up = NULL;
    }
    if (req->backend != NULL) {
        attempt_token_wait_end(c);
        attempt_end_slot_clear(req);
        attempt_seq_clear(req);
        if (req->flags & LG_REQ_F_AGED) {
            req->flags &= ~LG_REQ_F_AGED;
            lg_backend_ages_del(req->backend, LG_BACKEND_AGES_INFLIGHT, req->t_dispatch);
        }
        if (req->flags & LG_REQ_F_PROBE) {
            req->flags &= ~LG_REQ_F_PROBE;
            lg_backend_release_probe(req->backend);
        }
        lg_backend_inflight_end(req->backend, lg_now_ns());
        lg_backend_unref(req->backend);
        req->backend = NULL;
        lg_admission_released(c->w->gw->admission, c->w->id, req->info.model);
    }
}
