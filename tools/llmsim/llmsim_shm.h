/*
 * llmsim_shm.h: the live state of one llmsim replica, published in a shared
 * mapping (llmsim --state-shm PATH) for a zero-delay "oracle" routing policy
 * used in benchmarks. Plain C99; its one dependency is llmgate's public
 * <llmgate/hstream.h> (gateway/include): a plugin includes this file, opens
 * PATH read-only and mmaps it MAP_SHARED.
 *
 * Layout: struct llmsim_shm at offset 0, then three arrays at the byte offsets
 * it names (slot_off, wait_off, block_off, table_off). Every field is written
 * by the replica's single event-loop thread under a seqlock: `seq` is odd while
 * a change is in progress. A reader copies or computes what it needs, then
 * checks that `seq` did not change (llmsim_shm_read_begin/_retry below). The
 * replica writes `magic` last at startup, so a reader that sees the right magic
 * and version sees an initialised mapping. Times are CLOCK_MONOTONIC ns, the
 * same clock as the gateway's lg_now_ns(), valid on the same host only.
 *
 * The engine model the fields describe (see tools/llmsim/README.md):
 *   - at most `slots` sequences hold a slot at once; the others wait in a FIFO;
 *   - the engine works in steps. A step computes a batch of B sequences,
 *     P of whose prompt tokens it prefills, and lasts
 *         llmsim_shm_step_ns(s, P, B) = ((P > 0 ? prefill_fixed_ms * 1e6 : 0)
 *             + prefill_us_per_token * 1e3 * P
 *             + (decode_ms + decode_ms_per_seq * B^decode_batch_exp) * 1e6) / speed  ns
 *     times a random factor of mean 1 when `jitter` > 0 (a lognormal, drawn
 *     per step: no prediction knows it before the step starts);
 *   - at the end of a step every sequence of its batch whose prompt is all
 *     prefilled emits one token (the first one ends the step that finished
 *     its prefill); after max_tokens tokens it frees its slot;
 *   - `schedule` says what a step's batch is (decided when it starts):
 *     LLMSIM_SHM_SCHED_FCFS: waiting sequences are admitted into free slots
 *       (FIFO) and prefilled whole; the batch is every sequence holding a slot;
 *     LLMSIM_SHM_SCHED_PREFILL_FIRST: while a sequence waits and a slot is
 *       free, the step is a prefill step: it admits what fits, prefills it
 *       whole, and its batch is those alone (the others emit nothing);
 *       otherwise the batch is every sequence holding a slot;
 *     LLMSIM_SHM_SCHED_CHUNKED: a step computes at most step_tokens tokens:
 *       one for each sequence whose prefill is done (all of them: step_tokens
 *       >= slots), then the rest of the budget goes to the prefill of the
 *       sequence admitted last if it is unfinished, then to waiting sequences,
 *       admitted (FIFO) while a slot is free and budget is left, each
 *       prefilling as much of its prompt as the budget allows. At most one
 *       sequence is partly prefilled at a step's end.
 *
 * Predicting "TTFT if one more request of U uncached prompt tokens arrives now"
 * is running that model forward from the published state; it is what
 * llmsim_shm_predict_ttft_ns() does:
 *   t := busy_until_ns_hint (end of the step in progress, even if a little in
 *        the past: see LLMSIM_SHM_CATCH_UP_NS; `now` when idle)
 *   sequences := slots[] as they will be when the step in progress ends
 *   queue := the published waiters (FIFO), then the new request
 *   repeat the schedule step by step, jumping over runs of steps whose batch
 *   stays the same, until the new request's prefill is done: TTFT = the end
 *   of that step - now.
 * With FCFS, a free slot and an empty queue this reduces to
 *   TTFT = (busy_until_ns_hint - now, or 0 when idle) + llmsim_shm_step_ns(U, running + 1)
 * Under jitter the prediction is the mean over the steps ahead, so exact in
 * expectation only. A stalled replica (LLMSIM_SHM_F_STALLED) never answers:
 * the predictor returns UINT64_MAX. A replica answering errors
 * (LLMSIM_SHM_F_FAILING) is reported by the flag only. Uncached tokens:
 * prompt tokens minus the cached prefix (llmsim_shm_cached_blocks() *
 * prefix_block_tokens), at least 1.
 *
 * Prefix-cache keys: the prompt text (chat: for each message in order, its
 * role then its content, no separator; completions: the prompt strings) is cut
 * in blocks of prefix_block_tokens * 4 bytes; block i's key is the
 * lg_hstream hash (llmgate/hstream.h) of all bytes up to the end of block i
 * (0 maps to 1); only whole blocks are keyed. The table is open addressing with linear probing over
 * llmsim_shm_mix(key) & prefix_table_mask; a slot holds the index + 1 of a
 * block entry (0 = empty).
 *
 * Compatibility: version 3 (version 2 published a finishing step per slot
 * and had no schedules, fixed prefill cost, batch exponent or jitter;
 * version 1 keyed blocks with FNV-1a). Fields are only ever appended; a
 * reader checks `version` and `size`.
 */
#ifndef LLMSIM_SHM_H
#define LLMSIM_SHM_H

#include <llmgate/hstream.h>
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define LLMSIM_SHM_MAGIC   0x4c4d5331u /* "LMS1" */
#define LLMSIM_SHM_VERSION 3u

#define LLMSIM_SHM_F_STEP    (1u << 0) /* a step is in progress, ends at busy_until_ns_hint */
#define LLMSIM_SHM_F_STALLED (1u << 1) /* a stall fault is active: nothing is answered */
#define LLMSIM_SHM_F_FAILING (1u << 2) /* a status fault is active: requests get errors */

/*
 * A step whose end is handled late (a busy loop) still starts the next one at
 * its scheduled end, if no later than this: lateness does not accumulate.
 */
#define LLMSIM_SHM_CATCH_UP_NS 20000000ull

/* Schedules (llmsim --schedule): what one step computes; see the top of this file. */
#define LLMSIM_SHM_SCHED_FCFS          0u /* admit and prefill whole, decode everyone */
#define LLMSIM_SHM_SCHED_PREFILL_FIRST 1u /* a waiting prompt's prefill step holds decode */
#define LLMSIM_SHM_SCHED_CHUNKED       2u /* a token budget shared by decode and prefill */

/* Return values of the reader helpers. */
#define LLMSIM_SHM_OK     0
#define LLMSIM_SHM_EBUSY  (-1) /* the writer kept changing the state: try again later */
#define LLMSIM_SHM_EINVAL (-2) /* not an llmsim mapping, or the scratch array is too small */

/* One prefix-cache entry (the LRU links are the writer's business). */
struct llmsim_shm_block {
    uint64_t key;  /* 0 = unused entry */
    uint32_t prev; /* LRU neighbours, index + 1; 0 = none */
    uint32_t next;
};

/*
 * One slot, as it will be when the step in progress ends (when none is in
 * progress: now). Both 0: free, or freed by the end of that step.
 */
struct llmsim_shm_slot {
    uint32_t tokens_left;  /* tokens its sequence will still emit */
    uint32_t prefill_left; /* prompt tokens still to prefill (chunked prefill only) */
};

/* One waiting sequence, in FIFO order in a ring of wait_cap entries. */
struct llmsim_shm_waiter {
    uint32_t uncached_tokens; /* prompt tokens to prefill, estimated when it was queued */
    uint32_t max_tokens;      /* tokens it will generate; 0 = it left the queue (aborted) */
};

struct llmsim_shm {
    uint32_t magic;   /* LLMSIM_SHM_MAGIC once initialised */
    uint32_t version; /* LLMSIM_SHM_VERSION */
    uint32_t seq;     /* seqlock: odd while the replica writes */
    uint32_t slots;   /* sequences that can run at once */
    uint32_t running; /* sequences holding a slot */
    uint32_t waiting; /* sequences queued for a slot */
    double speed;     /* effective speed, faults included: 1 = baseline, 0.5 = half as fast */
    double prefill_us_per_token;
    double decode_ms;
    double decode_ms_per_seq;
    uint64_t queued_prefill_tokens;   /* uncached prompt tokens of waiting sequences and of
                                         those whose prefill step is in progress */
    uint64_t remaining_decode_tokens; /* tokens still to generate, running + waiting */
    uint64_t busy_until_ns_hint;      /* end of the step in progress (a new request is
                                         admitted no earlier); 0 when idle */
    /* ---- beyond the minimum: what the predictor needs ---- */
    uint64_t size;                /* bytes of the whole mapping */
    uint32_t pid;                 /* the replica's process id */
    uint32_t flags;               /* LLMSIM_SHM_F_* */
    uint64_t updated_ns;          /* when the state last changed */
    uint64_t steps_done;          /* steps completed since start */
    uint64_t step_start_ns;       /* start of the step in progress */
    uint64_t step_prefill_tokens; /* uncached tokens prefilled by the step in progress */
    uint64_t completed;           /* sequences that generated all their tokens */
    uint64_t aborted;             /* sequences cancelled by their client */
    uint64_t prefix_hits;         /* prompt tokens served from the prefix cache */
    uint64_t prefix_queries;      /* prompt tokens looked up in the prefix cache */
    uint32_t prefix_block_tokens; /* tokens per cache block (x4 bytes of text) */
    uint32_t prefix_cache_blocks; /* capacity of the cache, in blocks; 0 = no cache */
    uint32_t prefix_table_mask;   /* table entries - 1 */
    uint32_t wait_cap;            /* ring entries (a power of two) */
    uint64_t wait_head;           /* ring position of the oldest published waiter */
    uint64_t wait_tail;           /* one past the newest published waiter */
    uint32_t slot_off;  /* struct llmsim_shm_slot slot[slots] */
    uint32_t wait_off;  /* struct llmsim_shm_waiter ring[wait_cap], position p at p % wait_cap */
    uint32_t block_off; /* struct llmsim_shm_block blocks[prefix_cache_blocks] */
    uint32_t table_off; /* uint32_t table[prefix_table_mask + 1] */
    char name[64];      /* the replica's --name, NUL-terminated */
    /* ---- version 3: the step's shape ---- */
    uint32_t schedule;         /* LLMSIM_SHM_SCHED_* */
    uint32_t step_tokens;      /* chunked: tokens one step computes at most (>= slots) */
    double prefill_fixed_ms;   /* added to a step that prefills anything */
    double decode_batch_exp;   /* the batch's exponent in the decode cost (1: linear) */
    double jitter;             /* sigma of the step's lognormal factor (mean 1); 0 = none */
};

_Static_assert(offsetof(struct llmsim_shm, speed) == 24, "llmsim_shm layout");
_Static_assert(offsetof(struct llmsim_shm, busy_until_ns_hint) == 72, "llmsim_shm layout");
_Static_assert(offsetof(struct llmsim_shm, wait_head) == 176, "llmsim_shm layout");
_Static_assert(offsetof(struct llmsim_shm, name) == 208, "llmsim_shm layout");
_Static_assert(offsetof(struct llmsim_shm, schedule) == 272, "llmsim_shm layout");
_Static_assert(sizeof(struct llmsim_shm) == 304, "llmsim_shm layout");
_Static_assert(sizeof(struct llmsim_shm_slot) == 8, "llmsim_shm layout");

/* ---- the step's duration, shared by the replica and its readers ------------ */

/* Prefill part of a step that prefills `tokens` tokens, in ns. */
static inline double
llmsim_shm_prefill_ns(double us_per_token, double fixed_ms, uint64_t tokens, double speed)
{
    double ns = us_per_token * 1e3 * (double)tokens / speed;

    if (tokens > 0 && fixed_ms > 0) {
        ns += fixed_ms * 1e6 / speed;
    }
    return ns;
}

/* Decode part of a step whose batch is `batch` sequences, in ns. */
static inline double
llmsim_shm_decode_ns(double base_ms, double per_seq_ms, double batch_exp, uint32_t batch,
                     double speed)
{
    double b = batch_exp == 1.0 ? (double)batch : pow((double)batch, batch_exp);

    return (base_ms + per_seq_ms * b) * 1e6 / speed;
}

/* A step of the mapping's replica (without jitter), in ns. */
static inline double
llmsim_shm_step_ns(const struct llmsim_shm *s, uint64_t prefill, uint32_t batch)
{
    return llmsim_shm_prefill_ns(s->prefill_us_per_token, s->prefill_fixed_ms, prefill, s->speed)
           + llmsim_shm_decode_ns(s->decode_ms, s->decode_ms_per_seq, s->decode_batch_exp, batch,
                                  s->speed);
}

/* ---- hashing shared by the replica and its readers ------------------------- */

/* The cache key of a block whose text prefix hashes to h. */
static inline uint64_t
llmsim_shm_key(uint64_t h)
{
    return h ? h : 1;
}

/* splitmix64 finaliser: spreads a key over the table. */
static inline uint64_t
llmsim_shm_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- readers --------------------------------------------------------------- */

/*
 * Starts a read: returns the sequence number to pass to _retry. It does not
 * wait for a writer (which may be descheduled, or dead mid-update): an odd
 * number makes _retry fail, and the caller tries again a bounded number of
 * times.
 */
static inline uint32_t
llmsim_shm_read_begin(const struct llmsim_shm *s)
{
    return __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
}

/* Attempts a reader makes before it reports LLMSIM_SHM_EBUSY. */
#define LLMSIM_SHM_READ_ATTEMPTS 256

/*
 * What a reader does before its next attempt. A writer that runs finishes an
 * update in well under a microsecond, so the first attempts follow at once;
 * one still writing after that was descheduled mid-update (two CPUs, a
 * fleet, a load generator and a gateway on them), so the reader gives it the
 * CPU, then sleeps in short steps: about 4 ms in all before it gives up. A
 * reader that gave up after a few microseconds read a live replica as dead.
 */
static inline void
llmsim_shm_read_pause(int attempt)
{
    if (attempt >= 64) {
        struct timespec ts = { 0, 20000 };

        nanosleep(&ts, NULL);
    } else if (attempt >= 16) {
        sched_yield();
    }
}

/* True when what was read since llmsim_shm_read_begin() may be torn. */
static inline int
llmsim_shm_read_retry(const struct llmsim_shm *s, uint32_t seq)
{
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return (seq & 1u) || __atomic_load_n(&s->seq, __ATOMIC_RELAXED) != seq;
}

/* True when the mapping of `size` bytes looks like an initialised llmsim state. */
static inline int
llmsim_shm_valid(const struct llmsim_shm *s, size_t size)
{
    return size >= sizeof(*s) && __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) == LLMSIM_SHM_MAGIC
           && s->version == LLMSIM_SHM_VERSION && s->size <= size;
}

/*
 * Counts the leading blocks of `text` that the replica's prefix cache holds
 * right now (a block hits only if every block before it hit). Call inside a
 * read_begin/read_retry pair. Bounded work even on a torn read.
 */
static inline uint32_t
llmsim_shm_cached_blocks(const struct llmsim_shm *s, const char *text, size_t len)
{
    const struct llmsim_shm_block *blocks;
    const uint32_t *table;
    size_t block_bytes = (size_t)s->prefix_block_tokens * 4;
    uint32_t mask = s->prefix_table_mask;
    uint32_t cap = s->prefix_cache_blocks;
    uint32_t hits = 0;
    struct lg_hstream st;

    if (block_bytes == 0 || cap == 0 || s->block_off == 0 || s->table_off == 0
        || (uint64_t)s->table_off + ((uint64_t)mask + 1) * 4 > s->size
        || (uint64_t)s->block_off + (uint64_t)cap * sizeof(*blocks) > s->size) {
        return 0;
    }
    blocks = (const struct llmsim_shm_block *)((const char *)s + s->block_off);
    table = (const uint32_t *)((const char *)s + s->table_off);
    lg_hstream_init(&st);
    for (size_t off = 0; off + block_bytes <= len; off += block_bytes) {
        uint64_t key;
        uint32_t i;
        uint32_t probes;
        int found = 0;

        lg_hstream_feed(&st, text + off, block_bytes);
        key = llmsim_shm_key(lg_hstream_value(&st));
        i = (uint32_t)llmsim_shm_mix(key) & mask;
        for (probes = 0; probes <= mask; probes++, i = (i + 1) & mask) {
            uint32_t e = table[i];

            if (e == 0) {
                break;
            }
            if (e <= cap && blocks[e - 1].key == key) {
                found = 1;
                break;
            }
        }
        if (!found) {
            break;
        }
        hits++;
    }
    return hits;
}

/* ---- the predictor ------------------------------------------------------------ */

/* A sequence in the predictor's scratch: tokens left (low half), prefill left (high). */
#define LLMSIM_SHM_SEQ(tokens, prefill) (((uint64_t)(prefill) << 32) | (uint32_t)(tokens))
#define LLMSIM_SHM_SEQ_TOKENS(x)        ((uint32_t)(x))
#define LLMSIM_SHM_SEQ_PREFILL(x)       ((uint32_t)((x) >> 32))

/* The queue ahead of the new request: the published waiters, then `extra` more. */
struct llmsim_shm_queue {
    const struct llmsim_shm_waiter *ring;
    uint64_t pos;
    uint64_t tail;
    uint32_t mask;
    uint32_t extra;
    uint32_t extra_tokens;
    uint32_t extra_max;
};

/* The next sequence ahead of the new request: 1 with its sizes, 0 when the new one is next. */
static inline int
llmsim_shm_queue_next(struct llmsim_shm_queue *q, uint32_t *tokens, uint32_t *max_tokens)
{
    while (q->pos != q->tail) {
        const struct llmsim_shm_waiter *w = &q->ring[q->pos++ & q->mask];

        if (w->max_tokens != 0) {
            *tokens = w->uncached_tokens;
            *max_tokens = w->max_tokens;
            return 1;
        }
    }
    if (q->extra > 0) {
        q->extra--;
        *tokens = q->extra_tokens;
        *max_tokens = q->extra_max;
        return 1;
    }
    return 0;
}

/* The fewest tokens left among the sequences whose prefill is done; UINT32_MAX if none. */
static inline uint32_t
llmsim_shm_min_left(const uint64_t *seqs, uint32_t n)
{
    uint32_t m = UINT32_MAX;

    for (uint32_t i = 0; i < n; i++) {
        if (LLMSIM_SHM_SEQ_PREFILL(seqs[i]) == 0 && LLMSIM_SHM_SEQ_TOKENS(seqs[i]) < m) {
            m = LLMSIM_SHM_SEQ_TOKENS(seqs[i]);
        }
    }
    return m;
}

/*
 * `m` tokens from each sequence whose prefill is done (at most its tokens
 * left) and, with `first` <= i, only from seqs[first..]; those with none left
 * leave. Returns how many remain.
 */
static inline uint32_t
llmsim_shm_emit(uint64_t *seqs, uint32_t n, uint32_t first, uint32_t m)
{
    uint32_t kept = 0;

    for (uint32_t i = 0; i < n; i++) {
        uint64_t x = seqs[i];

        if (i >= first && LLMSIM_SHM_SEQ_PREFILL(x) == 0) {
            uint32_t left = LLMSIM_SHM_SEQ_TOKENS(x);

            x = LLMSIM_SHM_SEQ(left > m ? left - m : 0, 0);
        }
        if (LLMSIM_SHM_SEQ_TOKENS(x) > 0) {
            seqs[kept++] = x;
        }
    }
    return kept;
}

/* t + ns, saturating (a torn read may yield any duration). */
static inline uint64_t
llmsim_shm_after(uint64_t t, double ns)
{
    return ns < 1e18 && ns >= 0 ? t + (uint64_t)ns : t + 1000000000000000000ull;
}

/*
 * llmsim_shm_predict_ttft_ns() without the seqlock, with `extra` more
 * requests (of `extra_tokens` uncached prompt tokens and `extra_max` output
 * tokens each) queued behind the published waiters and ahead of the new one:
 * requests sent to the replica that it has not read yet (0 for none).
 */
static inline int
llmsim_shm_predict_queued_unlocked(const struct llmsim_shm *s, uint64_t now_ns,
                                   uint32_t uncached_tokens, uint32_t extra, uint32_t extra_tokens,
                                   uint32_t extra_max, uint64_t *scratch, size_t scratch_len,
                                   uint64_t *ttft_ns)
{
    const struct llmsim_shm_slot *slot;
    struct llmsim_shm_queue q;
    uint32_t slots = s->slots;
    uint32_t wait_cap = s->wait_cap;
    uint32_t sched = s->schedule;
    uint32_t budget = s->step_tokens;
    uint32_t new_left = 0; /* chunked: the new request's prefill still to do, once admitted */
    int new_in = 0;
    uint32_t r = 0;
    uint64_t t;
    uint64_t guard;

    if (!(s->speed > 0) || slots == 0 || slots > scratch_len || wait_cap == 0
        || (wait_cap & (wait_cap - 1)) != 0
        || (uint64_t)s->slot_off + (uint64_t)slots * sizeof(*slot) > s->size
        || (uint64_t)s->wait_off + (uint64_t)wait_cap * sizeof(*q.ring) > s->size
        || sched > LLMSIM_SHM_SCHED_CHUNKED
        || (sched == LLMSIM_SHM_SCHED_CHUNKED && budget < slots)) {
        return LLMSIM_SHM_EINVAL;
    }
    if (s->flags & LLMSIM_SHM_F_STALLED) {
        *ttft_ns = UINT64_MAX;
        return LLMSIM_SHM_OK;
    }
    slot = (const struct llmsim_shm_slot *)((const char *)s + s->slot_off);
    q.ring = (const struct llmsim_shm_waiter *)((const char *)s + s->wait_off);
    q.pos = s->wait_head;
    q.tail = s->wait_tail;
    q.mask = wait_cap - 1;
    q.extra = extra;
    q.extra_tokens = extra_tokens;
    q.extra_max = extra_max;
    if (q.tail - q.pos > wait_cap) {
        return LLMSIM_SHM_EINVAL; /* torn: the caller retries */
    }
    t = now_ns;
    if ((s->flags & LLMSIM_SHM_F_STEP) && s->busy_until_ns_hint + LLMSIM_SHM_CATCH_UP_NS >= t) {
        /* the next step starts at the scheduled end of this one, even a little in the past */
        t = s->busy_until_ns_hint;
    }
    for (uint32_t i = 0; i < slots; i++) {
        if (slot[i].tokens_left > 0) {
            scratch[r++] = LLMSIM_SHM_SEQ(slot[i].tokens_left, slot[i].prefill_left);
        }
    }
    /* each pass admits, finishes a sequence or a prefill, or runs out of the queue */
    guard = 4 * ((uint64_t)slots + (q.tail - q.pos) + extra) + 16;
    while (guard-- > 0) {
        uint64_t prefill = 0;
        uint32_t batch = 0;
        uint32_t tokens = 0;
        uint32_t max_tokens = 0;
        uint32_t m;

        if (sched == LLMSIM_SHM_SCHED_FCFS) {
            /* admit while a slot is free; then run to the next sequence's end */
            while (r < slots) {
                if (!llmsim_shm_queue_next(&q, &tokens, &max_tokens)) {
                    *ttft_ns = llmsim_shm_after(
                        t, llmsim_shm_step_ns(s, prefill + uncached_tokens, r + 1)) - now_ns;
                    return LLMSIM_SHM_OK;
                }
                prefill += tokens;
                scratch[r++] = LLMSIM_SHM_SEQ(max_tokens, 0);
            }
            m = llmsim_shm_min_left(scratch, r);
            t = llmsim_shm_after(t, llmsim_shm_step_ns(s, prefill, r)
                                        + (double)(m - 1) * llmsim_shm_step_ns(s, 0, r));
            r = llmsim_shm_emit(scratch, r, 0, m);
            continue;
        }
        if (sched == LLMSIM_SHM_SCHED_PREFILL_FIRST) {
            uint32_t first = r;

            if (r == slots) {
                m = llmsim_shm_min_left(scratch, r);
                t = llmsim_shm_after(t, (double)m * llmsim_shm_step_ns(s, 0, r));
                r = llmsim_shm_emit(scratch, r, 0, m);
                continue;
            }
            /* a prefill step: what fits is admitted and is its whole batch */
            while (r < slots) {
                if (!llmsim_shm_queue_next(&q, &tokens, &max_tokens)) {
                    *ttft_ns = llmsim_shm_after(t, llmsim_shm_step_ns(s, prefill + uncached_tokens,
                                                                      r - first + 1))
                               - now_ns;
                    return LLMSIM_SHM_OK;
                }
                prefill += tokens;
                scratch[r++] = LLMSIM_SHM_SEQ(max_tokens, 0);
            }
            t = llmsim_shm_after(t, llmsim_shm_step_ns(s, prefill, r - first));
            r = llmsim_shm_emit(scratch, r, first, 1);
            continue;
        }
        /* chunked prefill: every decoding sequence takes one token of the budget */
        {
            uint32_t decoding = 0;
            uint32_t part = UINT32_MAX;
            uint32_t left;
            uint32_t room;

            for (uint32_t i = 0; i < r; i++) {
                if (LLMSIM_SHM_SEQ_PREFILL(scratch[i]) == 0) {
                    decoding++;
                } else {
                    part = i;
                }
            }
            room = budget > decoding ? budget - decoding : 0;
            left = new_in ? new_left : part != UINT32_MAX ? LLMSIM_SHM_SEQ_PREFILL(scratch[part]) : 0;
            if (left > room && room > 0) {
                /* steps that carry one long prefill on, the batch unchanged: jump */
                uint32_t n = (left - 1) / room;

                m = llmsim_shm_min_left(scratch, r);
                n = m < n ? m : n;
                t = llmsim_shm_after(t, (double)n * llmsim_shm_step_ns(s, room, decoding + 1));
                left -= n * room;
                if (new_in) {
                    new_left = left;
                } else {
                    scratch[part] = LLMSIM_SHM_SEQ(LLMSIM_SHM_SEQ_TOKENS(scratch[part]), left);
                }
                r = llmsim_shm_emit(scratch, r, 0, n);
                continue;
            }
            if (left == 0 && r == slots) {
                /* no prefill to do or room to admit: decode to the next end */
                m = llmsim_shm_min_left(scratch, r);
                t = llmsim_shm_after(t, (double)m * llmsim_shm_step_ns(s, 0, r));
                r = llmsim_shm_emit(scratch, r, 0, m);
                continue;
            }
            batch = decoding;
            if (left > 0) {
                uint32_t c = left < room ? left : room;

                room -= c;
                prefill += c;
                batch++;
                if (new_in) {
                    new_left -= c;
                    if (new_left == 0) {
                        *ttft_ns = llmsim_shm_after(t, llmsim_shm_step_ns(s, prefill, batch))
                                   - now_ns;
                        return LLMSIM_SHM_OK;
                    }
                } else {
                    scratch[part] = LLMSIM_SHM_SEQ(LLMSIM_SHM_SEQ_TOKENS(scratch[part]), left - c);
                }
            }
            while (!new_in && r < slots && room > 0) {
                uint32_t c;

                if (!llmsim_shm_queue_next(&q, &tokens, &max_tokens)) {
                    c = uncached_tokens < room ? uncached_tokens : room;
                    prefill += c;
                    batch++;
                    if (c == uncached_tokens) {
                        *ttft_ns = llmsim_shm_after(t, llmsim_shm_step_ns(s, prefill, batch))
                                   - now_ns;
                        return LLMSIM_SHM_OK;
                    }
                    new_left = uncached_tokens - c;
                    new_in = 1;
                    break;
                }
                c = tokens < room ? tokens : room;
                room -= c;
                prefill += c;
                batch++;
                scratch[r++] = LLMSIM_SHM_SEQ(max_tokens, tokens - c);
            }
            t = llmsim_shm_after(t, llmsim_shm_step_ns(s, prefill, batch));
            /* who has all its prompt prefilled computed in this step: one token each */
            r = llmsim_shm_emit(scratch, r, 0, 1);
        }
    }
    return LLMSIM_SHM_EINVAL;
}

/* The prediction of llmsim_shm_predict_ttft_ns() without the seqlock. */
static inline int
llmsim_shm_predict_unlocked(const struct llmsim_shm *s, uint64_t now_ns, uint32_t uncached_tokens,
                            uint64_t *scratch, size_t scratch_len, uint64_t *ttft_ns)
{
    return llmsim_shm_predict_queued_unlocked(s, now_ns, uncached_tokens, 0, 0, 0, scratch,
                                              scratch_len, ttft_ns);
}

/*
 * Predicts the time to first token of a request of `uncached_tokens` prompt
 * tokens to prefill, sent now (`now_ns`, CLOCK_MONOTONIC), by running the
 * engine model forward (see the top of this file). `scratch` must hold at
 * least s->slots entries; it is overwritten. On LLMSIM_SHM_OK stores the
 * prediction in *ttft_ns (UINT64_MAX when the replica is stalled). Waiters
 * beyond the ring's capacity are not seen (the prediction is then optimistic).
 * Cost: O((running + waiting) * slots) in the worst case.
 */
static inline int
llmsim_shm_predict_ttft_ns(const struct llmsim_shm *s, uint64_t now_ns, uint32_t uncached_tokens,
                           uint64_t *scratch, size_t scratch_len, uint64_t *ttft_ns)
{
    for (int attempt = 0; attempt < LLMSIM_SHM_READ_ATTEMPTS; attempt++) {
        uint32_t seq;
        uint64_t out = 0;
        int rc;

        llmsim_shm_read_pause(attempt);
        seq = llmsim_shm_read_begin(s);
        rc = llmsim_shm_predict_unlocked(s, now_ns, uncached_tokens, scratch, scratch_len, &out);
        if (!llmsim_shm_read_retry(s, seq)) {
            if (rc == LLMSIM_SHM_OK) {
                *ttft_ns = out;
            }
            return rc;
        }
    }
    return LLMSIM_SHM_EBUSY;
}

#endif /* LLMSIM_SHM_H */
