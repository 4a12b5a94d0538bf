/*
 * backend_inflight.h: this gateway's requests on each backend, one by one
 * (backend_inflight.c): counts and ages, first tokens due, predicted ends,
 * the engine model's sequences and the model, and the changes peers follow.
 * Every function is lock-free and safe on any thread.
 */
#ifndef LG_BACKEND_INFLIGHT_H
#define LG_BACKEND_INFLIGHT_H

#include "base/lg_core.h"

struct lg_est_steps;

struct event;
struct lg_backend;

/*
 * Requests of this gateway on b and their mean age, lock-free: those
 * awaiting their first token (from dispatch to the first token or the end of
 * the attempt), and all in flight. lg_backend_ages_add() returns false (and
 * counts nothing) when the counter is full; pass the same t_ns to
 * lg_backend_ages_del().
 */
enum lg_backend_ages {
    LG_BACKEND_AGES_PENDING = 0,
    LG_BACKEND_AGES_INFLIGHT,
};
bool lg_backend_ages_add(struct lg_backend *b, enum lg_backend_ages which, uint64_t t_ns);
void lg_backend_ages_del(struct lg_backend *b, enum lg_backend_ages which, uint64_t t_ns);
uint32_t lg_backend_ages(const struct lg_backend *b, enum lg_backend_ages which, uint64_t now_ns,
                         double *mean_age_ms);
/* Requests of this gateway on b that have had their first token (in flight
 * less those awaiting one): the batch a stream's pace there is timed at
 * (lg_backend_note_pace(), backend.h). */
uint32_t lg_backend_started(const struct lg_backend *b, uint64_t now_ns);

/*
 * First-token work still ahead on b, request by request: each request
 * awaiting a first token holds a slot with the time its predicted service
 * TTFT ends (dispatch + service_ms). lg_backend_work_ahead_ms() sums what is
 * left of each, at least a quarter of its age (a sum of differences would let
 * an overdue request's negative remainder cancel another's work, where its
 * lateness says the engine is behind). lg_backend_due_add() returns
 * the slot to pass to lg_backend_due_del(), or -1 when all are taken (the
 * request is then not counted). Lock-free, any thread; ms resolution.
 */
int lg_backend_due_add(struct lg_backend *b, uint64_t t_ns, double service_ms, unsigned cls,
                       uint32_t hint);
void lg_backend_due_del(struct lg_backend *b, int slot);
/* ... and sets (each when not NULL) *longest_ms to the longest predicted
 * service among them, overdue or not: a long prefill may still hold the
 * engine; *late_ms to how long the most overdue has waited beyond its
 * predicted service (0 when none is). */
double lg_backend_work_ahead_ms(const struct lg_backend *b, uint64_t now_ns, double *longest_ms,
                                double *late_ms);
/*
 * Slot ends: each request of this gateway on b whose output length is known
 * (max_tokens) holds a slot with the time it should end: dispatch + service
 * TTFT + max_tokens gaps, re-set at its first token to first token +
 * (max_tokens - 1) gaps. An engine with every slot busy admits the next
 * request when one of them ends, so the k-th soonest end is when the k-th
 * request in line starts: lg_backend_end_wait_ms() returns the ms until then
 * (an end already past counts as one gap away: it is about to end), or -1
 * when fewer than k ends are known or k is 0 or above 8 (a queue that long
 * takes the hold-time formula). max_tokens bounds a generation, so with
 * early stops (EOS) the real wait is shorter, never longer. Same slot rules
 * as due[]: lock-free, any thread, ms resolution.
 */
int lg_backend_end_add(struct lg_backend *b, uint64_t end_ns, unsigned cls, uint32_t hint);
/* Moves the end held in a slot lg_backend_end_add() gave (no new claim). */
void lg_backend_end_move(struct lg_backend *b, int slot, uint64_t end_ns);
void lg_backend_end_del(struct lg_backend *b, int slot);
double lg_backend_end_wait_ms(const struct lg_backend *b, uint64_t now_ns, unsigned k,
                              double gap_ms);

/*
 * By class, for a backend whose engine serves by priority class and takes a
 * lower class's slot for a higher one (engine_priority "preempt"): there a
 * request waits only for the requests of its class and above. Each request
 * awaiting a first token (due) and each end carries its class (cls: enum
 * lg_prio_class, passed to lg_backend_due_add() and lg_backend_end_add());
 * lg_backend_class_add() counts ours in flight there by class (only where
 * the engine preempts: a pick elsewhere pays nothing for it).
 * lg_backend_class_read() returns, for a request of class cls, ours there of
 * cls and above: in flight, awaiting a first token (and their mean age),
 * their first-token work still ahead (as lg_backend_work_ahead_ms()), and,
 * when they fill the engine's capacity, the wait for the slot one of them
 * frees (as lg_backend_end_wait_ms(), from their ends; 0 when not full or
 * unknown); and the longest of what is left of the lower classes'
 * predicted first-token work (those not past their prediction only): the
 * prefill an engine may be running for them, in one step, which it
 * finishes before it serves the request (it preempts a slot, never a step
 * in progress).
 */
struct lg_backend_by_class {
    uint32_t inflight;
    uint32_t pending;
    double pending_age_ms;
    double work_ahead_ms;
    double slot_wait_ms;
    double lower_prefill_ms;
};
void lg_backend_class_add(struct lg_backend *b, unsigned cls, int delta);
/* What max_inflight bounds for a request of class cls: on a backend whose
 * engine preempts for priority, ours there of cls and above (a lower
 * class's give their slots up to it); elsewhere every request of ours. */
uint32_t lg_backend_inflight_from(const struct lg_backend *b, unsigned cls);
void lg_backend_class_read(const struct lg_backend *b, uint64_t now_ns, unsigned cls,
                           double capacity, double gap_ms, struct lg_backend_by_class *out);
/* Ours on b of a class above cls awaiting their first token (a whole answer
 * until it ends): a scan of the due slots, for a class's yield_prefill. */
uint32_t lg_backend_pending_above(const struct lg_backend *b, unsigned cls);
/*
 * Ours on b of class cls and below sent since the engine's step in progress
 * began (the last token a stream of ours got there), still awaiting a first
 * token (a whole answer: its end): the new prompts its next step will
 * prefill, for a class's prompts_per_step. 0 when no stream of ours got a
 * token there within the last second (the step is not known). A scan of the
 * due slots; ms resolution.
 */
uint32_t lg_backend_sent_this_step(const struct lg_backend *b, uint64_t now_ns, unsigned cls);

/*
 * Sequences: each streamed request of ours on b with a known output length
 * (max_tokens) holds a word for the engine model (lg_engine_model_view's
 * wait_ms): its prompt to prefill and its length while it awaits a
 * first token, then the tokens still to come (lg_backend_seq_left, by the
 * request's owner only, at each of its tokens; the last token's time there
 * marks the end of an engine step, which places the step in progress).
 * lg_backend_seq_add() returns the slot, or -1 when all are taken (the
 * model then declines: it must see every request). The model steps by the
 * replica's pace (lg_backend_note_pace(), backend.h). Same slot rules as
 * due[].
 */
int lg_backend_seq_add(struct lg_backend *b, uint64_t t_ns, uint64_t prompt_bytes,
                       uint32_t max_tokens, uint32_t hint);
void lg_backend_seq_left(struct lg_backend *b, int slot, uint64_t left, uint64_t now_ns);
void lg_backend_seq_del(struct lg_backend *b, int slot);

/* A request of ours dispatched to b (+1) or done there (-1). */
void lg_backend_inflight_add(struct lg_backend *b, int delta);
/* A request of ours done there at now_ns: lg_backend_inflight_add(b, -1),
 * and its end kept for lg_backend_gone_since(). */
void lg_backend_inflight_end(struct lg_backend *b, uint64_t now_ns);
/* Requests of ours that ended there at or after since_ns (at most
 * LG_BACKEND_GONE_SLOTS): an engine's count of its requests, taken a round
 * trip ago and updated a step or so after each ends, may still hold them. */
unsigned lg_backend_gone_since(const struct lg_backend *b, uint64_t since_ns);
/* When the k-th latest request of ours there ended (k >= 1): 0 when fewer
 * ended, or k > LG_BACKEND_GONE_SLOTS. */
uint64_t lg_backend_gone_nth(const struct lg_backend *b, unsigned k);
/* Requests of ours ended there so far (wraps: callers take differences). */
uint32_t lg_backend_ended(const struct lg_backend *b);
/* Moves with every request of ours dispatched, started (first token) or
 * done, on any backend: peers waiting for news (GET /admin/peers?since=)
 * compare it. Any thread; below 2^63 (a JSON integer). */
uint64_t lg_backend_changes(void);
/* Makes every change activate ev (on a base with locking, thread-safe
 * event_active()), until set to NULL; ev must outlive every worker thread
 * (the admin listener's, stopped after them). */
void lg_backend_news_event(struct event *ev);
/* ev's callback, before it reads lg_backend_changes(): the next change
 * activates ev again (until then changes only count). */
void lg_backend_news_taken(void);

/* One sequence as peers exchange it (peers.c): started or still in line,
 * tokens still to come (max_tokens before the first), prompt tokens, and
 * ms since it was sent (in line) or since the snapshot (started). */
struct lg_seq_info {
    uint32_t started;
    uint32_t left;
    uint32_t prompt_tokens;
    uint32_t age_ms;
};
/* Our sequences on b now, at most max; returns how many, and sets
 * *complete when every request of ours there has one. */
size_t lg_backend_seqs_read(const struct lg_backend *b, uint64_t now_ns, struct lg_seq_info *out,
                            size_t max, bool *complete);
/* The word lg_backend_engine_model_ms() reads for a peer's sequence, as of now_ns. */
uint64_t lg_backend_seq_word(const struct lg_seq_info *s, uint64_t now_ns);
/* The engine model's wait for a request with an empty prompt (ms), run
 * as `how` says (its slots, steps of step_ms at the batch now and
 * step_per_seq more for each sequence more, prefill_ms per prompt token,
 * prefilling steps prefill_fixed_ms more, its own too, and chunk; where the
 * step in progress stands is read here), or -1 when it cannot tell
 * (lg_engine_model_view.wait_ms); *joined (when not NULL): how many of
 * ours there would be admitted with it (lg_engine_model_view.joined). */
double lg_backend_engine_model_ms(const struct lg_backend *b, uint64_t now_ns,
                                  const struct lg_est_steps *how, unsigned *joined);

#endif /* LG_BACKEND_INFLIGHT_H */
