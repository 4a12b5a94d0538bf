/*
 * backend_inflight.c: this gateway's requests on each backend, one by one:
 * how many and how old, when each should have its first token and its end,
 * the sequences the engine model runs (ours, and the peers' that health.c
 * publishes), the pace of its streams, and the model itself; the same by
 * class where the engine preempts for priority; and the count of changes
 * that peers waiting for news compare.
 *
 * Owns nothing: the slots are fields of struct lg_backend (backend.h).
 * Invariant: every slot is a relaxed atomic word, claimed with a
 * compare-and-swap from 0 and written afterwards only by the request that
 * holds it; readers (routing, peers' answers) take each word once.
 */
#include "fleet/backend_inflight.h"

#include <math.h>
#include <stdlib.h>

#include <event2/event.h>

#include "fleet/backend.h"
#include "fleet/estimate.h"

/* ---- request counts with ages -------------------------------------------- */

/*
 * One 64-bit word holds the count (low 14 bits) and the sum of the dispatch
 * times (ms since the process's first use, the other 50 bits), so a reader
 * gets both consistently from one load: 16383 requests of a process up for
 * two years fit.
 */
#define PENDING_COUNT_BITS 14
#define PENDING_COUNT_MAX  ((1u << PENDING_COUNT_BITS) - 1)

static uint64_t pending_epoch_ns;

static uint64_t
pending_ms(uint64_t t_ns)
{
    uint64_t epoch = __atomic_load_n(&pending_epoch_ns, __ATOMIC_RELAXED);

    if (epoch == 0) {
        uint64_t want = t_ns > LG_NS_PER_S ? t_ns - LG_NS_PER_S : 1;

        if (!__atomic_compare_exchange_n(&pending_epoch_ns, &epoch, want, false, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED)) {
            /* epoch now holds the winner's value */
        } else {
            epoch = want;
        }
    }
    return t_ns > epoch ? (t_ns - epoch) / LG_NS_PER_MS : 0;
}

bool
lg_backend_ages_add(struct lg_backend *b, enum lg_backend_ages which, uint64_t t_ns)
{
    uint64_t add = (pending_ms(t_ns) << PENDING_COUNT_BITS) + 1;
    uint64_t w = __atomic_load_n(&b->ages[which], __ATOMIC_RELAXED);

    do {
        if ((w & PENDING_COUNT_MAX) == PENDING_COUNT_MAX) {
            return false;
        }
    } while (!__atomic_compare_exchange_n(&b->ages[which], &w, w + add, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    lg_backend_touch(b);
    return true;
}

void
lg_backend_ages_del(struct lg_backend *b, enum lg_backend_ages which, uint64_t t_ns)
{
    __atomic_fetch_sub(&b->ages[which], (pending_ms(t_ns) << PENDING_COUNT_BITS) + 1,
                       __ATOMIC_RELAXED);
    lg_backend_touch(b);
}

uint32_t
lg_backend_ages(const struct lg_backend *b, enum lg_backend_ages which, uint64_t now_ns,
                double *mean_age_ms)
{
    uint64_t w = __atomic_load_n(&b->ages[which], __ATOMIC_RELAXED);
    uint32_t n = (uint32_t)(w & PENDING_COUNT_MAX);
    double mean, now = (double)pending_ms(now_ns);

    if (n == 0) {
        *mean_age_ms = 0;
        return 0;
    }
    mean = (double)(w >> PENDING_COUNT_BITS) / n;
    *mean_age_ms = now > mean ? now - mean : 0;
    return n;
}

uint32_t
lg_backend_started(const struct lg_backend *b, uint64_t now_ns)
{
    double age;
    uint32_t ours = lg_backend_inflight(b);

    return ours - LG_MIN(ours, lg_backend_ages(b, LG_BACKEND_AGES_PENDING, now_ns, &age));
}

/* ---- first-token work ahead, request by request ---------------------------- */

/*
 * A slot holds (cls << SLOT_CLS_SHIFT) | (due << DUE_SERVICE_BITS) |
 * service: cls the request's class (enum lg_prio_class), due when its
 * predicted service TTFT ends (ms on the ages clock, + 1 so a taken slot is
 * never 0; 42 bits), service that prediction in ms (capped). An end's slot
 * holds its class the same way above its time.
 */
#define DUE_SERVICE_BITS 20
#define DUE_SERVICE_MAX  ((1u << DUE_SERVICE_BITS) - 1)
#define DUE_OVERDUE_DIV  4 /* an overdue request has age / 4 left */
#define SLOT_CLS_SHIFT   62
#define SLOT_MS_MASK     ((1ull << SLOT_CLS_SHIFT) - 1)
#define DUE_MS_MASK      ((1ull << (SLOT_CLS_SHIFT - DUE_SERVICE_BITS)) - 1)

_Static_assert(LG_NCLASSES <= 4, "a class fits the slots' top two bits");

static uint64_t
slot_cls_bits(unsigned cls)
{
    return (uint64_t)LG_MIN(cls, 3u) << SLOT_CLS_SHIFT;
}

static unsigned
slot_cls(uint64_t w)
{
    return (unsigned)(w >> SLOT_CLS_SHIFT);
}

/*
 * Claims a free slot of slots[n] for word, the first from hint on: its bit
 * in used[] (one per slot) is set, then the word written; -1 if none. The
 * bit is the claim: a slot freed (backend_slot_free: word 0, then the bit
 * cleared) is claimed again only after, so a word and its bit never
 * disagree for long, and a scan walks the bits set (BACKEND_SLOTS_EACH)
 * instead of every slot, skipping a slot whose word is still 0.
 */
static int
backend_slot_claim(uint64_t *slots, uint64_t *used, unsigned n, uint64_t word, uint32_t hint)
{
    for (unsigned k = 0; k < n; k++) {
        unsigned i = (hint + k) % n;
        uint64_t bit = 1ull << (i % 64);
        uint64_t m = __atomic_load_n(&used[i / 64], __ATOMIC_RELAXED);

        while (!(m & bit)) {
            if (__atomic_compare_exchange_n(&used[i / 64], &m, m | bit, true, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED)) {
                __atomic_store_n(&slots[i], word, __ATOMIC_RELAXED);
                return (int)i;
            }
        }
    }
    return -1;
}

static void
backend_slot_free(uint64_t *slots, uint64_t *used, int i)
{
    __atomic_store_n(&slots[i], 0, __ATOMIC_RELAXED);
    __atomic_fetch_and(&used[i / 64], ~(1ull << (i % 64)), __ATOMIC_RELEASE);
}

/*
 * For each taken slot of slots[n] (used: their bits), in the order of the
 * slots, with its word in w (not 0): the scans of the views, which read a
 * few requests' words out of 64 or 128 slots.
 */
#define BACKEND_SLOTS_EACH(slots, used, n, i, w)                                              \
    for (unsigned i##_k = 0, i = 0; i##_k < (n) / 64; i##_k++)                                 \
        for (uint64_t i##_m = __atomic_load_n(&(used)[i##_k], __ATOMIC_ACQUIRE), w = 0;        \
             i##_m != 0 && (i = i##_k * 64 + (unsigned)__builtin_ctzll(i##_m), i##_m &= i##_m - 1, \
                            w = __atomic_load_n(&(slots)[i], __ATOMIC_RELAXED), 1);             \
             )                                                                                 \
            if (w != 0)

int
lg_backend_due_add(struct lg_backend *b, uint64_t t_ns, double service_ms, unsigned cls,
                   uint32_t hint)
{
    uint64_t service = service_ms > 0 ? (uint64_t)LG_MIN(service_ms, (double)DUE_SERVICE_MAX) : 0;
    uint64_t due = (pending_ms(t_ns) + service + 1) & DUE_MS_MASK;
    int slot = backend_slot_claim(b->due, b->due_used, LG_BACKEND_DUE_SLOTS,
                                  slot_cls_bits(cls) | (due << DUE_SERVICE_BITS) | service, hint);

    lg_backend_touch(b);
    return slot;
}

void
lg_backend_due_del(struct lg_backend *b, int slot)
{
    if (slot >= 0 && slot < LG_BACKEND_DUE_SLOTS) {
        backend_slot_free(b->due, b->due_used, slot);
        lg_backend_touch(b);
    }
}

/* What is left of a due word's prediction at now (ms on the ages clock),
 * and its age (lg_backend_work_ahead_ms(), lg_backend_class_read()). */
static uint64_t
due_left(uint64_t w, uint64_t now, uint64_t *service_out, uint64_t *age_out)
{
    uint64_t due = (w >> DUE_SERVICE_BITS) & DUE_MS_MASK;
    uint64_t service = w & DUE_SERVICE_MAX;
    uint64_t start = due - 1 - service;
    uint64_t age = now > start ? now - start : 0;

    *service_out = service;
    *age_out = age;
    /* what is left of its prediction; once nearly used up, a share of the
     * time it has taken: a request past its prediction is behind something
     * the model did not see, and the longer it has waited the longer it is
     * likely to wait still */
    return LG_MAX(service > age ? service - age : 0, age / DUE_OVERDUE_DIV);
}

double
lg_backend_work_ahead_ms(const struct lg_backend *b, uint64_t now_ns, double *longest_ms,
                         double *late_ms)
{
    uint64_t now = pending_ms(now_ns), sum = 0, longest = 0, late = 0;

    if (longest_ms == NULL && late_ms == NULL) {
        /* the sum alone (a routing view's, at every pick): the same terms */
        BACKEND_SLOTS_EACH(b->due, b->due_used, LG_BACKEND_DUE_SLOTS, i, w) {
            uint64_t service, age;

            sum += due_left(w, now, &service, &age);
        }
        return (double)sum;
    }
    BACKEND_SLOTS_EACH(b->due, b->due_used, LG_BACKEND_DUE_SLOTS, i, w) {
        uint64_t service, age;

        sum += due_left(w, now, &service, &age);
        longest = LG_MAX(longest, service);
        late = LG_MAX(late, age > service ? age - service : 0);
    }
    if (longest_ms != NULL) {
        *longest_ms = (double)longest;
    }
    if (late_ms != NULL) {
        *late_ms = (double)late;
    }
    return (double)sum;
}

int
lg_backend_end_add(struct lg_backend *b, uint64_t end_ns, unsigned cls, uint32_t hint)
{
    int slot = backend_slot_claim(b->ends, b->ends_used, LG_BACKEND_END_SLOTS,
                                  slot_cls_bits(cls) | ((pending_ms(end_ns) + 1) & SLOT_MS_MASK),
                                  hint);

    lg_backend_touch(b);
    return slot;
}

void
lg_backend_end_move(struct lg_backend *b, int slot, uint64_t end_ns)
{
    if (slot >= 0 && slot < LG_BACKEND_END_SLOTS) {
        /* the request's owner is the only writer of its slot: its class stays */
        uint64_t cls = __atomic_load_n(&b->ends[slot], __ATOMIC_RELAXED) & ~SLOT_MS_MASK;

        __atomic_store_n(&b->ends[slot], cls | ((pending_ms(end_ns) + 1) & SLOT_MS_MASK),
                         __ATOMIC_RELAXED);
        lg_backend_touch(b);
    }
}

void
lg_backend_end_del(struct lg_backend *b, int slot)
{
    if (slot >= 0 && slot < LG_BACKEND_END_SLOTS) {
        backend_slot_free(b->ends, b->ends_used, slot);
        lg_backend_touch(b);
    }
}

/* lg_backend_end_wait_ms() over the ends of class min_cls and above. */
static double
backend_end_wait(const struct lg_backend *b, uint64_t now_ns, unsigned k, double gap_ms,
                 unsigned min_cls)
{
    uint64_t now = pending_ms(now_ns) + 1, gap = gap_ms > 1 ? (uint64_t)gap_ms : 1;
    uint64_t best[8];
    unsigned n = 0;

    if (k == 0 || k > LG_ARRAY_SIZE(best)) {
        return -1;
    }
    /* the k soonest, kept sorted in best[0..n) */
    BACKEND_SLOTS_EACH(b->ends, b->ends_used, LG_BACKEND_END_SLOTS, i, w) {
        uint64_t left, t = w & SLOT_MS_MASK;
        unsigned j;

        if (slot_cls(w) < min_cls) {
            continue;
        }
        left = t > now ? LG_MAX(t - now, gap) : gap;
        if (n == k && left >= best[k - 1]) {
            continue;
        }
        j = n < k ? n++ : k - 1;
        while (j > 0 && best[j - 1] > left) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = left;
    }
    return n == k ? (double)best[k - 1] : -1;
}

double
lg_backend_end_wait_ms(const struct lg_backend *b, uint64_t now_ns, unsigned k, double gap_ms)
{
    return backend_end_wait(b, now_ns, k, gap_ms, 0);
}

/* ---- by class: an engine that preempts for priority ----------------------- */

void
lg_backend_class_add(struct lg_backend *b, unsigned cls, int delta)
{
    uint32_t *n = &b->inflight_cls[LG_MIN((size_t)cls, LG_ARRAY_SIZE(b->inflight_cls) - 1)];

    if (delta > 0) {
        __atomic_fetch_add(n, (uint32_t)delta, __ATOMIC_RELAXED);
    } else {
        __atomic_fetch_sub(n, (uint32_t)-delta, __ATOMIC_RELAXED);
    }
    lg_backend_touch(b);
}

/* Our requests on b of class cls and above. */
static uint32_t
class_inflight(const struct lg_backend *b, unsigned cls)
{
    uint32_t n = 0;

    for (size_t k = LG_MIN((size_t)cls, LG_ARRAY_SIZE(b->inflight_cls) - 1);
         k < LG_ARRAY_SIZE(b->inflight_cls); k++) {
        n += __atomic_load_n(&b->inflight_cls[k], __ATOMIC_RELAXED);
    }
    return n;
}

uint32_t
lg_backend_inflight_from(const struct lg_backend *b, unsigned cls)
{
    if (cls == 0 || lg_backend_conf(b)->engine_priority != LG_ENGINE_PRIORITY_PREEMPT) {
        return lg_backend_inflight(b);
    }
    return class_inflight(b, cls);
}

void
lg_backend_class_read(const struct lg_backend *b, uint64_t now_ns, unsigned cls, double capacity,
                      double gap_ms, struct lg_backend_by_class *out)
{
    uint64_t now = pending_ms(now_ns), sum = 0, ages = 0, lower = 0;
    uint32_t inflight = class_inflight(b, cls), pending = 0;

    BACKEND_SLOTS_EACH(b->due, b->due_used, LG_BACKEND_DUE_SLOTS, i, w) {
        uint64_t service, age;

        if (slot_cls(w) < cls) {
            if (w != 0) {
                due_left(w, now, &service, &age);
                lower = LG_MAX(lower, service > age ? service - age : 0);
            }
            continue;
        }
        sum += due_left(w, now, &service, &age);
        ages += age;
        pending++;
    }
    out->inflight = inflight;
    out->pending = LG_MIN(pending, inflight);
    out->pending_age_ms = pending > 0 ? (double)ages / pending : 0;
    out->work_ahead_ms = (double)sum;
    out->lower_prefill_ms = (double)lower;
    out->slot_wait_ms = 0;
    if (capacity > 0 && inflight + 1 > capacity) {
        out->slot_wait_ms = LG_MAX(
            backend_end_wait(b, now_ns, (unsigned)ceil(inflight + 1 - capacity), gap_ms, cls), 0.0);
    }
}

uint32_t
lg_backend_pending_above(const struct lg_backend *b, unsigned cls)
{
    uint32_t n = 0;

    BACKEND_SLOTS_EACH(b->due, b->due_used, LG_BACKEND_DUE_SLOTS, i, w) {
        n += w != 0 && slot_cls(w) > cls;
    }
    return n;
}

uint32_t
lg_backend_sent_this_step(const struct lg_backend *b, uint64_t now_ns, unsigned cls)
{
    uint64_t t = __atomic_load_n(&b->token_t_ns, __ATOMIC_RELAXED), step, now;
    uint32_t n = 0;

    if (t == 0 || (now_ns > t && now_ns - t >= LG_NS_PER_S)) {
        return 0;
    }
    step = pending_ms(t);
    now = pending_ms(now_ns);
    BACKEND_SLOTS_EACH(b->due, b->due_used, LG_BACKEND_DUE_SLOTS, i, w) {
        uint64_t service, age;

        if (slot_cls(w) > cls) {
            continue;
        }
        due_left(w, now, &service, &age);
        /* sent at now - age, on the same clock as the step's start */
        n += now >= age && now - age >= step;
    }
    return n;
}

/* ---- sequences: the engine model's view of our requests ------------------- */

/*
 * A word: bit 63 set once the first token came; bits 42-62 the tokens still
 * to come (max_tokens before); bits 22-41 prompt tokens to prefill (bytes /
 * 4, as engines count about 4 bytes a token); bits 0-21 the dispatch time
 * in ms on the ages clock, modulo 2^22 (70 minutes: orders the line).
 */
#define SEQ_STARTED    (1ull << 63)
#define SEQ_LEFT_SHIFT 42
#define SEQ_LEFT_MAX   ((1ull << 21) - 1)
#define SEQ_TOK_SHIFT  22
#define SEQ_TOK_MAX    ((1ull << 20) - 1)
#define SEQ_T_MASK     ((1ull << 22) - 1)

static uint64_t backend_changes;
static struct event *backend_news_ev; /* atomic; NULL: nobody waits */
static int backend_news_pending;      /* atomic: ev activated, not yet taken */

static void
backend_changed(void)
{
    struct event *ev;

    __atomic_fetch_add(&backend_changes, 1, __ATOMIC_RELEASE);
    ev = __atomic_load_n(&backend_news_ev, __ATOMIC_ACQUIRE);
    /* one activation until the admin thread takes it: a burst of changes
     * costs one wakeup, not one lock and eventfd write each */
    if (ev != NULL && !__atomic_exchange_n(&backend_news_pending, 1, __ATOMIC_ACQ_REL)) {
        event_active(ev, EV_TIMEOUT, 0); /* its base is locked: any thread */
    }
}

void
lg_backend_news_event(struct event *ev)
{
    __atomic_store_n(&backend_news_pending, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&backend_news_ev, ev, __ATOMIC_RELEASE);
}

void
lg_backend_news_taken(void)
{
    __atomic_store_n(&backend_news_pending, 0, __ATOMIC_RELEASE);
}

uint64_t
lg_backend_changes(void)
{
    return __atomic_load_n(&backend_changes, __ATOMIC_RELAXED) & INT64_MAX;
}

void
lg_backend_inflight_add(struct lg_backend *b, int delta)
{
    if (delta > 0) {
        __atomic_fetch_add(&b->inflight, (uint32_t)delta, __ATOMIC_RELAXED);
    } else {
        __atomic_fetch_sub(&b->inflight, (uint32_t)-delta, __ATOMIC_RELAXED);
    }
    lg_backend_touch(b);
    backend_changed();
}

void
lg_backend_inflight_end(struct lg_backend *b, uint64_t now_ns)
{
    uint32_t at = __atomic_fetch_add(&b->gone_next, 1, __ATOMIC_RELAXED);

    __atomic_store_n(&b->gone[at % LG_BACKEND_GONE_SLOTS], now_ns, __ATOMIC_RELAXED);
    lg_backend_inflight_add(b, -1);
}

unsigned
lg_backend_gone_since(const struct lg_backend *b, uint64_t since_ns)
{
    unsigned n = 0;

    for (size_t i = 0; i < LG_BACKEND_GONE_SLOTS; i++) {
        uint64_t t = __atomic_load_n(&b->gone[i], __ATOMIC_RELAXED);

        n += t != 0 && t >= since_ns;
    }
    return n;
}

static int
backend_gone_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? 1 : x > y ? -1 : 0; /* latest first */
}

uint64_t
lg_backend_gone_nth(const struct lg_backend *b, unsigned k)
{
    uint64_t t[LG_BACKEND_GONE_SLOTS];

    if (k == 0 || k > LG_BACKEND_GONE_SLOTS) {
        return 0;
    }
    for (size_t i = 0; i < LG_BACKEND_GONE_SLOTS; i++) {
        t[i] = __atomic_load_n(&b->gone[i], __ATOMIC_RELAXED);
    }
    qsort(t, LG_BACKEND_GONE_SLOTS, sizeof(t[0]), backend_gone_cmp);
    return t[k - 1]; /* 0 (never written) sorts last */
}

uint32_t
lg_backend_ended(const struct lg_backend *b)
{
    return __atomic_load_n(&b->gone_next, __ATOMIC_RELAXED);
}

int
lg_backend_seq_add(struct lg_backend *b, uint64_t t_ns, uint64_t prompt_bytes, uint32_t max_tokens,
                   uint32_t hint)
{
    uint64_t tok = LG_MIN(prompt_bytes / 4, SEQ_TOK_MAX);
    uint64_t left = LG_MIN(LG_MAX(max_tokens, 1u), SEQ_LEFT_MAX);

    int slot = backend_slot_claim(
        b->seqs, b->seqs_used, LG_BACKEND_END_SLOTS,
        left << SEQ_LEFT_SHIFT | tok << SEQ_TOK_SHIFT | (pending_ms(t_ns) & SEQ_T_MASK), hint);

    lg_backend_touch(b);
    backend_changed(); /* after the word is there: a peer's answer has it */
    return slot;
}

void
lg_backend_seq_left(struct lg_backend *b, int slot, uint64_t left, uint64_t now_ns)
{
    uint64_t w;
    bool first;

    if (slot < 0 || slot >= LG_BACKEND_END_SLOTS) {
        return;
    }
    /* the request's owner is the only writer of its slot */
    w = __atomic_load_n(&b->seqs[slot], __ATOMIC_RELAXED);
    first = !(w & SEQ_STARTED);
    w &= ~(SEQ_LEFT_MAX << SEQ_LEFT_SHIFT);
    w |= SEQ_STARTED | LG_MIN(left, SEQ_LEFT_MAX) << SEQ_LEFT_SHIFT;
    __atomic_store_n(&b->seqs[slot], w, __ATOMIC_RELAXED);
    __atomic_store_n(&b->token_t_ns, now_ns, __ATOMIC_RELAXED);
    lg_backend_touch(b);
    if (first) {
        backend_changed(); /* it left the line */
    }
}

void
lg_backend_seq_del(struct lg_backend *b, int slot)
{
    if (slot >= 0 && slot < LG_BACKEND_END_SLOTS) {
        backend_slot_free(b->seqs, b->seqs_used, slot);
        lg_backend_touch(b);
        backend_changed();
    }
}

size_t
lg_backend_seqs_read(const struct lg_backend *b, uint64_t now_ns, struct lg_seq_info *out,
                     size_t max, bool *complete)
{
    uint64_t now = pending_ms(now_ns) & SEQ_T_MASK;
    uint32_t inflight = lg_backend_inflight(b);
    size_t n = 0;
    bool all = true;

    BACKEND_SLOTS_EACH(b->seqs, b->seqs_used, LG_BACKEND_END_SLOTS, i, w) {
        if (n == max) {
            all = false;
            break;
        }
        out[n].started = (w & SEQ_STARTED) != 0;
        out[n].left = (uint32_t)(w >> SEQ_LEFT_SHIFT & SEQ_LEFT_MAX);
        out[n].prompt_tokens = (uint32_t)(w >> SEQ_TOK_SHIFT & SEQ_TOK_MAX);
        out[n].age_ms = out[n].started ? 0 : (uint32_t)((now - (w & SEQ_T_MASK)) & SEQ_T_MASK);
        n++;
    }
    *complete = all && n == inflight;
    return n;
}

uint64_t
lg_backend_seq_word(const struct lg_seq_info *s, uint64_t now_ns)
{
    uint64_t t = (pending_ms(now_ns) - LG_MIN(s->age_ms, (uint32_t)SEQ_T_MASK)) & SEQ_T_MASK;

    return (s->started ? SEQ_STARTED : 0)
           | (uint64_t)LG_MIN(LG_MAX(s->left, 1u), SEQ_LEFT_MAX) << SEQ_LEFT_SHIFT
           | (uint64_t)LG_MIN(s->prompt_tokens, SEQ_TOK_MAX) << SEQ_TOK_SHIFT | t;
}

/*
 * When the engine step in progress began, ms ago, or -1 when unknown. Every
 * running sequence gets a token at a step's end, so the last token a stream
 * of ours got there marks the start of the next one. Older than a second,
 * it tells nothing (no stream of ours runs there).
 */
static double
backend_step_begun_ms(const struct lg_backend *b, uint64_t now_ns)
{
    uint64_t t = __atomic_load_n(&b->token_t_ns, __ATOMIC_RELAXED);

    if (t == 0) {
        return -1;
    }
    if (now_ns <= t) {
        return 0; /* a token of this very moment (another worker's clock) */
    }
    return now_ns - t < LG_NS_PER_S ? (double)(now_ns - t) / 1e6 : -1;
}

/* Adds a sequence to the model's batch (left) or line (queue, oldest first). */
static void
backend_model_add(uint64_t w, uint64_t now, double step_ms, bool peer, uint32_t *left,
                  size_t *nleft, struct lg_est_queued *queue, size_t *nqueue)
{
    uint32_t n = (uint32_t)(w >> SEQ_LEFT_SHIFT & SEQ_LEFT_MAX);
    double a = (double)((now - (w & SEQ_T_MASK)) & SEQ_T_MASK);
    size_t j;

    if (w & SEQ_STARTED) {
        if (peer) {
            /* a peer's count as of its snapshot (the word's time): a token
             * a step since; one that has run out has ended */
            double done = floor(a / step_ms);

            if (done >= n) {
                return;
            }
            n -= (uint32_t)done;
        }
        left[(*nleft)++] = n;
        return;
    }
    for (j = *nqueue; j > 0 && queue[j - 1].age_ms < a; j--) {
        queue[j] = queue[j - 1];
    }
    queue[j].prompt_tokens = (uint32_t)(w >> SEQ_TOK_SHIFT & SEQ_TOK_MAX);
    queue[j].max_tokens = n;
    queue[j].age_ms = a;
    (*nqueue)++;
}

double
lg_backend_engine_model_ms(const struct lg_backend *b, uint64_t now_ns,
                           const struct lg_est_steps *how, unsigned *joined)
{
    double step_ms = how->step_ms, prefill_fixed_ms = how->prefill_fixed_ms;
    enum { MAX_SEQS = LG_BACKEND_END_SLOTS + LG_BACKEND_PEER_SEQS };
    uint32_t left[MAX_SEQS];
    struct lg_est_queued queue[MAX_SEQS];
    struct lg_est_batch batch;
    struct lg_est_steps steps;
    struct lg_backend_peers peers;
    uint64_t now = pending_ms(now_ns) & SEQ_T_MASK;
    uint32_t inflight = lg_backend_inflight(b);
    size_t nleft = 0, nqueue = 0, ours;
    bool with_peers;

    if (joined != NULL) {
        *joined = 0;
    }
    if (how->slots < 1 || !(step_ms > 0)) {
        return -1;
    }
    /* the peers' words are copied only where peers have requests */
    with_peers = lg_backend_peer_inflight(b, now_ns) > 0;
    if (with_peers) {
        lg_backend_read_peers(b, &peers);
        with_peers = lg_backend_peers_fresh(peers.t_ns, peers.ttl_ns, now_ns) && peers.inflight > 0;
    }
    if (with_peers && !peers.complete) {
        return -1; /* a peer's request of unknown length: the line would be wrong */
    }
    if (inflight == 0 && !with_peers) {
        /* idle: it starts a step for the new one at once */
        return step_ms + (prefill_fixed_ms > 0 ? prefill_fixed_ms : 0);
    }
    BACKEND_SLOTS_EACH(b->seqs, b->seqs_used, LG_BACKEND_END_SLOTS, i, w) {
        backend_model_add(w, now, step_ms, false, left, &nleft, queue, &nqueue);
    }
    /* a request of ours it does not see (no known length, not streamed, or
     * between its dispatch and its word): the line would be wrong */
    ours = nleft + nqueue;
    if (ours != inflight) {
        return -1;
    }
    for (uint32_t i = 0; with_peers && i < peers.n && i < LG_BACKEND_PEER_SEQS; i++) {
        backend_model_add(peers.words[i], now, step_ms, true, left, &nleft, queue, &nqueue);
    }
    if (nleft + nqueue == 0) {
        return step_ms + (prefill_fixed_ms > 0 ? prefill_fixed_ms : 0);
    }
    batch = (struct lg_est_batch){ .left = left, .nleft = nleft, .queue = queue, .nqueue = nqueue };
    steps = (struct lg_est_steps){
        .slots = how->slots,
        .step_ms = step_ms,
        .step_per_seq = how->step_per_seq,
        .prefill_ms = how->prefill_ms > 0 ? how->prefill_ms : 0,
        .prefill_fixed_ms = prefill_fixed_ms > 0 ? prefill_fixed_ms : 0,
        .resid_ms = step_ms / 2,
        .begun_ms = backend_step_begun_ms(b, now_ns),
        .chunk = how->chunk,
    };
    return lg_est_engine_run(&batch, &steps, joined);
}
