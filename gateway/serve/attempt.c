/*
 * attempt.c: one attempt of a request on a backend: its storage and its
 * phases (one function moves them and asserts the move), what it holds
 * there while it runs (a reference, the in-flight count, the half-open
 * probe, its place among the requests awaiting a first token, the
 * predicted ends and the engine model's sequences), what its response
 * teaches the backend (first token, pace, end: the estimators; how it
 * failed: ejection), and the list of ended attempts the access log shows.
 *
 * Owns, per attempt: the backend reference and in-flight count from
 * lg_attempt_begin() to lg_attempt_end(), its slots there; per request:
 * the list of ended attempts. Borrows: the client (which owns the request
 * and its own attempt storage; hedge.c owns a duplicate's) and the upstream
 * connection (given back with lg_upstream_release(), never freed here).
 * Invariants: a->backend != NULL exactly while a counts in the backend's
 * in-flight; each LG_ATTEMPT_H_* bit is set exactly while its slot is held;
 * an ended attempt goes to the list once, when it stops being current (or
 * ends not being it).
 */
#include "serve/attempt.h"

#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "fleet/backend.h"
#include "fleet/backend_inflight.h"
#include "fleet/fleet.h"
#include "route/router.h"
#include "route/tried.h"
#include "serve/admission.h"
#include "serve/client.h"
#include "serve/trace.h"
#include "serve/upstream.h"

const struct lg_model_route *
lg_attempt_route(const struct lg_client *c)
{
    return c->req.models;
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
            lg_tried_add(&c->req.tries.tried, i, route->n);
        } else {
            lg_tried_del(&c->req.tries.tried, i);
        }
    }
}

uint64_t
lg_attempt_first_byte_ms(const struct lg_timeouts_conf *to, const struct lg_attempt *a)
{
    if (a->kind == LG_ATTEMPT_CONTINUATION) {
        return LG_MIN(to->first_byte_ms, to->stream_idle_ms);
    }
    return to->first_byte_ms;
}

/* ---- storage and phases ----------------------------------------------------- */

/* An attempt keeps its slots' indices in a byte. */
_Static_assert(LG_BACKEND_DUE_SLOTS <= 128 && LG_BACKEND_END_SLOTS <= 128,
               "struct lg_attempt's slots are int8_t");

#define PH(p) (1u << (p))

/* Where each phase may go (attempt_types.h draws it). */
static const uint8_t attempt_moves[LG_ATTEMPT_NPHASES] = {
    [LG_ATTEMPT_PH_IDLE] =
        PH(LG_ATTEMPT_PH_CONNECT) | PH(LG_ATTEMPT_PH_WAIT_HEAD) | PH(LG_ATTEMPT_PH_DONE),
    [LG_ATTEMPT_PH_CONNECT] = PH(LG_ATTEMPT_PH_WAIT_HEAD) | PH(LG_ATTEMPT_PH_DONE),
    [LG_ATTEMPT_PH_WAIT_HEAD] = PH(LG_ATTEMPT_PH_RELAY) | PH(LG_ATTEMPT_PH_DONE),
    [LG_ATTEMPT_PH_RELAY] = PH(LG_ATTEMPT_PH_DONE),
    [LG_ATTEMPT_PH_DONE] = PH(LG_ATTEMPT_PH_IDLE),
};

static const char *const attempt_phase_names[LG_ATTEMPT_NPHASES] = {
    [LG_ATTEMPT_PH_IDLE] = "idle",           [LG_ATTEMPT_PH_CONNECT] = "connect",
    [LG_ATTEMPT_PH_WAIT_HEAD] = "wait_head", [LG_ATTEMPT_PH_RELAY] = "relay",
    [LG_ATTEMPT_PH_DONE] = "done",
};

/* The client's state while its current attempt is in each phase (0: unchanged). */
static const enum lg_client_state attempt_client_state[LG_ATTEMPT_NPHASES] = {
    [LG_ATTEMPT_PH_CONNECT] = LG_CLIENT_ST_CONNECT,
    [LG_ATTEMPT_PH_WAIT_HEAD] = LG_CLIENT_ST_WAIT_HEAD,
    [LG_ATTEMPT_PH_RELAY] = LG_CLIENT_ST_RELAY,
};

bool
lg_attempt_can_move(enum lg_attempt_phase from, enum lg_attempt_phase to)
{
    return from < LG_ATTEMPT_NPHASES && to < LG_ATTEMPT_NPHASES
           && (attempt_moves[from] & PH(to)) != 0;
}

void
lg_attempt_set_phase(struct lg_client *c, struct lg_attempt *a, enum lg_attempt_phase to)
{
    LG_BUG_ON(!(attempt_moves[a->phase] & PH(to)));
    LG_DEBUG("conn=%" PRIu64 " attempt %s: %s -> %s", c->id,
             a->pick.backend != NULL ? a->pick.backend->name : "-", attempt_phase_names[a->phase],
             attempt_phase_names[to]);
    a->phase = to;
    if (a == c->req.att && attempt_client_state[to] != 0) {
        lg_client_set_state(c, attempt_client_state[to]);
    }
}

/* An ended attempt stops being the request's current one (or ended not
 * being it): the access log's list keeps it, when the log is on. */
static void
attempt_retire(struct lg_client *c, const struct lg_attempt *a)
{
    struct lg_req_tries *t = &c->req.tries;
    struct lg_attempt_rec *r;

    if (c->w->alog == NULL || a->phase != LG_ATTEMPT_PH_DONE) {
        return;
    }
    if (t->log == NULL) {
        t->log = lg_xcalloc(1, sizeof(*t->log));
    }
    if (t->log->n == LG_ATTEMPT_LOG_MAX) {
        return; /* the count says how many more there were */
    }
    r = &t->log->rec[t->log->n++];
    r->backend = a->pick.backend;
    r->kind = a->kind;
    r->fail = a->fail;
    r->status = a->status;
    r->t_dispatch = a->t_dispatch;
    r->t_connect = a->t_connect;
    r->t_first_byte = a->t_first_byte;
    r->t_first_token = a->t_first_token;
    r->t_end = a->t_end;
}

void
lg_attempt_init(struct lg_attempt *a, enum lg_attempt_kind kind)
{
    memset(a, 0, offsetof(struct lg_attempt, pick)); /* the pick: the router's to clear */
    a->kind = kind;
}

struct lg_attempt *
lg_attempt_next(struct lg_client *c, enum lg_attempt_kind kind)
{
    struct lg_request *req = &c->req;
    struct lg_attempt *a = &req->own;

    LG_BUG_ON(a->backend != NULL);
    if (req->att != NULL) {
        attempt_retire(c, req->att); /* the current one, when it ended */
    }
    lg_attempt_init(a, kind);
    req->att = a;
    return a;
}

void
lg_attempt_make_current(struct lg_client *c, struct lg_attempt *a)
{
    struct lg_request *req = &c->req;
    struct lg_attempt *old = req->att;

    LG_BUG_ON(old != NULL && old->backend != NULL);
    req->att = a;
    if (old != NULL && old != a) {
        attempt_retire(c, old);
    }
    if (attempt_client_state[a->phase] != 0) {
        lg_client_set_state(c, attempt_client_state[a->phase]);
    }
}

/* ---- what it holds on its backend ------------------------------------------- */

/* The attempt no longer awaits a first token (it came, or the attempt ended). */
static void
attempt_token_wait_end(struct lg_attempt *a)
{
    if (a->holds & LG_ATTEMPT_H_TOKEN_WAIT) {
        a->holds &= ~LG_ATTEMPT_H_TOKEN_WAIT;
        lg_backend_ages_del(a->backend, LG_BACKEND_AGES_PENDING, a->t_dispatch);
        lg_backend_due_del(a->backend, a->due_slot);
    }
}

/* The attempt no longer holds a predicted end on its backend. */
static void
attempt_end_slot_clear(struct lg_attempt *a)
{
    if (a->holds & LG_ATTEMPT_H_END_SLOT) {
        a->holds &= ~LG_ATTEMPT_H_END_SLOT;
        lg_backend_end_del(a->backend, a->end_slot);
    }
}

/* The attempt no longer holds a sequence in its backend's engine model. */
static void
attempt_seq_clear(struct lg_attempt *a)
{
    if (a->holds & LG_ATTEMPT_H_SEQ) {
        a->holds &= ~LG_ATTEMPT_H_SEQ;
        lg_backend_seq_del(a->backend, a->seq_slot);
    }
}

/* (Re)sets when the attempt should end, from the request's output length:
 * after `ms` more (lg_backend_end_add; a slot it holds is moved in place).
 * Nothing without max_tokens. */
static void
attempt_end_slot_set(const struct lg_request *req, struct lg_attempt *a, uint64_t from_ns,
                     double ms)
{
    uint64_t end_ns;

    if (!(ms >= 0) || req->info.max_tokens <= 0) {
        attempt_end_slot_clear(a);
        return; /* (NaN included) */
    }
    ms = LG_MIN(ms, 86400e3); /* a day: later than any slot frees */
    end_ns = from_ns + (uint64_t)(ms * 1e6);
    if (a->holds & LG_ATTEMPT_H_END_SLOT) {
        lg_backend_end_move(a->backend, a->end_slot, end_ns);
        return;
    }
    a->end_slot = (int8_t)lg_backend_end_add(a->backend, end_ns, req->sched.cls,
                                             (uint32_t)(from_ns >> 10));
    if (a->end_slot >= 0) {
        a->holds |= LG_ATTEMPT_H_END_SLOT;
    }
}

/* What the pick predicted before the request's own first-token work: a
 * slot, then the first tokens of the requests there before it. */
static double
attempt_pick_wait_ms(const struct lg_attempt *a)
{
    return a->pick.wait_ms + a->pick.ahead_ms;
}

void
lg_attempt_begin(struct lg_client *c, struct lg_attempt *a)
{
    struct lg_request *req = &c->req;
    struct lg_backend *b = a->pick.backend;

    req->tries.n++;
    a->backend = lg_backend_ref(b);
    lg_backend_inflight_add(b, 1);
    LG_STAT_ADD(b, requests, 1);
    if (a->kind == LG_ATTEMPT_RETRY || a->kind == LG_ATTEMPT_CONTINUATION) {
        LG_STAT_ADD(b, retries, 1);
    }
    req->flags |= LG_REQ_F_PROXIED;
    a->t_dispatch = lg_now_ns();
    if (a->pick.probe) {
        a->holds |= LG_ATTEMPT_H_PROBE;
    }
    if (lg_backend_ages_add(b, LG_BACKEND_AGES_PENDING, a->t_dispatch)) {
        a->holds |= LG_ATTEMPT_H_TOKEN_WAIT;
        a->due_slot = (int8_t)lg_backend_due_add(b, a->t_dispatch, a->pick.service_ms,
                                                 req->sched.cls, (uint32_t)(a->t_dispatch >> 10));
    }
    if (lg_backend_conf(b)->engine_priority != LG_ENGINE_PRIORITY_NONE) {
        lg_backend_class_add(b, req->sched.cls, 1);
        a->holds |= LG_ATTEMPT_H_CLASS;
    }
    if (lg_backend_ages_add(b, LG_BACKEND_AGES_INFLIGHT, a->t_dispatch)) {
        a->holds |= LG_ATTEMPT_H_AGED;
    }
    attempt_end_slot_set(req, a, a->t_dispatch,
                         attempt_pick_wait_ms(a) + a->pick.service_ms
                             + (double)req->info.max_tokens * a->pick.itl_ms);
    if (req->info.stream && req->info.max_tokens > 0) {
        /* a stream's tokens tell the engine model how far it is */
        a->seq_slot = (int8_t)lg_backend_seq_add(b, a->t_dispatch, req->info.prompt_bytes,
                                                 (uint32_t)LG_MIN(req->info.max_tokens, UINT32_MAX),
                                                 (uint32_t)(a->t_dispatch >> 10));
        if (a->seq_slot >= 0) {
            a->holds |= LG_ATTEMPT_H_SEQ;
        }
    }
}

/* ---- what its response teaches ---------------------------------------------- */

/* Whether this response's first token teaches its backend anything (a
 * success there): then *prior is its route's, which the samples blend in. */
static bool
attempt_sample_prior(struct lg_client *c, const struct lg_attempt *a, struct lg_est_prior *prior)
{
    const struct lg_model_route *route = lg_attempt_route(c);

    if (a->backend == NULL || route == NULL || c->req.status < 200 || c->req.status >= 300) {
        return false;
    }
    lg_route_read_prior(route, prior);
    return true;
}

/* The time from dispatch to the first token: the gateway queues nothing
 * before it. */
static double
attempt_ttft_ms(const struct lg_request *req, const struct lg_attempt *a)
{
    return (double)(req->t_first_token - a->t_dispatch) / 1e6;
}

/*
 * Whether the first token of this response teaches the backend's TTFT model:
 * then *prior and *ttft_ms are set.
 */
static bool
attempt_ttft_sample(struct lg_client *c, const struct lg_attempt *a, struct lg_est_prior *prior,
                    double *ttft_ms)
{
    if (a->pick.queued || !attempt_sample_prior(c, a, prior)) {
        return false; /* queued: it waited for a slot, which says how busy, not how fast */
    }
    *ttft_ms = attempt_ttft_ms(&c->req, a);
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
attempt_gap_step(const struct lg_attempt *a)
{
    float g[LG_ARRAY_SIZE(a->gaps)];
    size_t n = LG_MIN(a->ngaps, LG_ARRAY_SIZE(g));

    memcpy(g, a->gaps, n * sizeof(g[0]));
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
attempt_end_refresh(const struct lg_request *req, struct lg_attempt *a)
{
    uint64_t n = req->content_events - a->pace_events;
    double gap_ms, left;

    if (n == 0 || req->t_now <= a->t_pace) {
        return;
    }
    gap_ms = (double)(req->t_now - a->t_pace) / 1e6 / (double)n;
    left = (double)req->info.max_tokens - (double)req->content_events;
    attempt_end_slot_set(req, a, req->t_now, (left > 0 ? left : 0) * gap_ms);
    if (a->ngaps >= 4) {
        lg_backend_note_pace(a->backend, req->t_now, attempt_gap_step(a),
                             lg_backend_started(a->backend, req->t_now));
    }
    a->t_pace = req->t_now;
    a->pace_events = req->content_events;
}

/*
 * Whether a request's first token on b may free a class held in the
 * admission queue: b's engine preempts for priority and a class below the
 * request's, not sheddable, yields there (yield_prefill), or a class that
 * is not sheddable counts its prompts per step (prompts_per_step).
 */
static bool
attempt_yielded_to(const struct lg_request *req, const struct lg_backend *b)
{
    const struct lg_scheduling_conf *sc = &req->fleet->conf->scheduling;

    if (!sc->fair || lg_backend_conf(b)->engine_priority != LG_ENGINE_PRIORITY_PREEMPT) {
        return false;
    }
    for (unsigned k = 0; k < LG_NCLASSES; k++) {
        if (!sc->classes[k].sheddable
            && ((k < req->sched.cls && sc->classes[k].yield_prefill)
                || sc->classes[k].prompts_per_step > 0)) {
            return true; /* a first token also ends an engine step */
        }
    }
    return false;
}

/* The first content event of the request's response: the TTFT sample, at once. */
static void
attempt_first_token(struct lg_client *c, struct lg_attempt *a)
{
    struct lg_request *req = &c->req;
    struct lg_est_prior prior;

    attempt_token_wait_end(a);
    if ((a->holds & LG_ATTEMPT_H_CLASS) && attempt_yielded_to(req, a->backend)) {
        /* a lower class held for this first token may go now (its yield_prefill) */
        lg_admission_kick(c->w->gw->admission, c->w->id);
    }
    if (a->holds & LG_ATTEMPT_H_END_SLOT) {
        attempt_end_slot_set(req, a, req->t_first_token,
                             (double)(req->info.max_tokens - 1) * a->pick.itl_ms);
    }
    if (attempt_sample_prior(c, a, &prior)) {
        /* the engine model's samples where it could tell, the measured
         * terms', and the TTFT fit's unless it queued (as
         * attempt_ttft_sample()) */
        struct lg_backend_first f = {
            .prompt_bytes = req->info.prompt_bytes,
            .ttft_ms = attempt_ttft_ms(req, a),
            .wait_ms = a->pick.queued ? -1 : attempt_pick_wait_ms(a),
            .model_ms = a->pick.model_ms,
            .pred_ms = a->pick.model_pred_ms,
            .model_scale = a->pick.model_scale,
            .meas_pred_ms = a->pick.meas_pred_ms,
            .load = a->pick.load,
            .prefill_ms = a->pick.prefill_ms,
        };

        lg_backend_note_first_token(a->backend, &prior, &f);
    }
}

void
lg_attempt_learn_done(struct lg_client *c, bool whole)
{
    struct lg_request *req = &c->req;
    struct lg_attempt *a = req->att;
    struct lg_backend *b = a->backend;
    struct lg_est_prior prior;
    double itl = -1, hold, ttft = 0;
    bool learn_ttft = false;

    if (whole) {
        attempt_token_wait_end(a);
        learn_ttft = attempt_ttft_sample(c, a, &prior, &ttft);
    }
    if (b == NULL || req->status < 200 || req->status >= 300) {
        return;
    }
    if ((req->flags & LG_REQ_F_SSE) && req->content_events > 1 && req->tries.resumed == 0) {
        /* (a continuation's stream began on another backend, with a pause in it) */
        itl = (double)(req->t_last_token - req->t_first_token) / 1e6
              / (double)(req->content_events - 1);
    }
    /* less the wait for a slot only: behind others' prefill it holds one */
    hold = (double)(req->t_end - a->t_dispatch) / 1e6 - a->pick.wait_ms;
    lg_backend_note_done(b, learn_ttft ? &prior : NULL, req->info.prompt_bytes, ttft,
                         attempt_pick_wait_ms(a), itl, hold > 0 ? hold : 0);
    lg_router_note_result(req->fleet->router, lg_attempt_route(c), &req->route, b, req->status,
                          req->t_first_token > a->t_dispatch ? req->t_first_token - a->t_dispatch
                                                             : 0, /* a continuation's: none */
                          req->t_end - a->t_dispatch);
}

void
lg_attempt_tokens(struct lg_client *c, unsigned got)
{
    struct lg_request *req = &c->req;
    struct lg_attempt *a = req->att;
    uint64_t before = req->content_events;

    if (a->t_first_token != 0) {
        a->gaps[a->ngaps++ % LG_ARRAY_SIZE(a->gaps)] =
            (float)((double)(req->t_now - req->t_last_token) / 1e6 / got);
    }
    req->t_last_token = req->t_now;
    req->content_events += got;
    if (a->holds & LG_ATTEMPT_H_SEQ) {
        lg_backend_seq_left(a->backend, a->seq_slot,
                            (uint64_t)req->info.max_tokens > req->content_events
                                ? (uint64_t)req->info.max_tokens - req->content_events
                                : 0,
                            req->t_now);
    }
    if (a->t_first_token == 0) {
        a->t_first_token = req->t_now;
        a->t_pace = req->t_now;
        a->pace_events = req->content_events;
        if (req->t_first_token == 0) {
            req->t_first_token = req->t_now;
            attempt_first_token(c, a);
        } else {
            /* a continuation's first token (resume.c): its wait is over; the
             * stream's first token was another attempt's, so no TTFT sample */
            attempt_token_wait_end(a);
        }
    } else if ((a->holds & LG_ATTEMPT_H_END_SLOT)
               && before / ATTEMPT_END_EVERY != req->content_events / ATTEMPT_END_EVERY) {
        attempt_end_refresh(req, a);
    }
}

/* The engine's load, as its response's endpoint-load-metrics header says. */
static void
attempt_note_load(struct lg_backend *b, const struct lg_hdrs *hs, uint64_t now_ns)
{
    const struct lg_hdr *h = lg_hdrs_find(hs, "endpoint-load-metrics");
    struct lg_backend_report rep = { .source = LG_LOAD_SRC_HEADER };

    if (h == NULL
        || lg_load_report_header_parse(lg_hdrs_value(hs, h), h->value_len, &rep.r) != LG_OK) {
        return;
    }
    rep.t_ns = now_ns ? now_ns : lg_now_ns();
    rep.inflight_at = lg_backend_inflight(b);
    lg_backend_publish_report(b, &rep);
}

void
lg_attempt_note_head(struct lg_client *c, struct lg_attempt *a, int status, uint64_t retry_after_ns)
{
    struct lg_request *req = &c->req;

    a->status = (uint16_t)status;
    lg_backend_note_result(a->backend, &req->fleet->conf->health, status, retry_after_ns, 0);
    if (lg_backend_conf(a->backend)->load_header != LG_LOAD_HEADER_OFF && a->up != NULL) {
        attempt_note_load(a->backend, &a->up->hdrs, req->t_now);
    }
    if (lg_fail_of_status(status) != LG_FAIL_NONE) {
        lg_router_note_result(req->fleet->router, lg_attempt_route(c), &req->route, a->backend,
                              status, 0, 0);
    }
}

/* ---- the end ----------------------------------------------------------------- */

void
lg_attempt_end(struct lg_client *c, struct lg_attempt *a, enum lg_fail why, bool keep)
{
    struct lg_request *req = &c->req;
    struct lg_backend *b = a->backend;
    uint64_t t_end;

    if (b == NULL) {
        return; /* never launched, or ended already */
    }
    if (lg_fail_table[why].counts) {
        /* a failure of the backend's; after its head (counted with it) a failure midway */
        lg_backend_note_result(b, &req->fleet->conf->health, 0, 0,
                               (lg_fail_table[why].refused ? LG_BACKEND_R_REFUSED : 0)
                                   | (a->status != 0 ? LG_BACKEND_R_MIDWAY : 0));
        lg_router_note_result(req->fleet->router, lg_attempt_route(c), &req->route, b, 0, 0, 0);
    }
    if (a->up != NULL) {
        lg_upstream_release(a->up, keep);
        a->up = NULL;
    }
    if (a->phase == LG_ATTEMPT_PH_RELAY) {
        LG_STAT_ADD(b, bytes_in, a->up_bytes); /* its response's, relayed */
    }
    attempt_token_wait_end(a);
    attempt_end_slot_clear(a);
    attempt_seq_clear(a);
    if (a->holds & LG_ATTEMPT_H_AGED) {
        a->holds &= ~LG_ATTEMPT_H_AGED;
        lg_backend_ages_del(b, LG_BACKEND_AGES_INFLIGHT, a->t_dispatch);
    }
    if (a->holds & LG_ATTEMPT_H_CLASS) {
        a->holds &= ~LG_ATTEMPT_H_CLASS;
        lg_backend_class_add(b, req->sched.cls, -1); /* set before its dispatch, kept */
    }
    if (a->holds & LG_ATTEMPT_H_PROBE) {
        a->holds &= ~LG_ATTEMPT_H_PROBE;
        lg_backend_release_probe(b);
    }
    a->t_end = t_end = lg_now_ns();
    lg_backend_inflight_end(b, a->t_end);
    lg_backend_unref(b);
    a->backend = NULL;
    a->fail = why;
    if (req->tries.trace != NULL) {
        lg_trace_attempt_end(c, a);
    }
    lg_attempt_set_phase(c, a, LG_ATTEMPT_PH_DONE);
    if (a != req->att) {
        attempt_retire(c, a);
    }
    lg_admission_released(c->w->gw->admission, c->w->id, req->info.model, t_end);
}
