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
 *   - at most `slots` sequences run at once; the others wait in a FIFO;
 *   - the engine works in steps; a step starts by admitting waiting sequences
 *     into free slots (in FIFO order) and lasts
 *         (prefill_us_per_token * 1e3 * P + (decode_ms + decode_ms_per_seq * B) * 1e6) / speed  ns
 *     where P is the sum of the uncached prompt tokens of the sequences
 *     admitted at its start and B the number of running sequences (admitted
 *     ones included);
 *   - at the end of a step every running sequence emits one token; a sequence
 *     admitted at the start of step k emits its first token at the end of step
 *     k and its last (max_tokens-th) at the end of step k + max_tokens - 1,
 *     then frees its slot.
 *
 * Predicting "TTFT if one more request of U uncached prompt tokens arrives now"
 * is running that model forward from the published state; it is what
 * llmsim_shm_predict_ttft_ns() does:
 *   t := busy_until_ns_hint (end of the step in progress, even if a little in
 *        the past: see LLMSIM_SHM_CATCH_UP_NS; `now` when idle)
 *   running set := slots[] finishing after the step in progress
 *   queue := the published waiters (FIFO), then the new request
 *   repeat: at step start t, admit from the queue while a slot is free; if the
 *     new request is admitted, TTFT = t + step duration - now; otherwise jump
 *     to the next completion: m = (earliest finish step - current step) steps,
 *     the first with the admitted prefill, the m-1 others pure decode with the
 *     same batch.
 * With a free slot and an empty queue this reduces to
 *   TTFT = (busy_until_ns_hint - now, or 0 when idle)
 *        + (prefill_us_per_token*1e3*U + (decode_ms + decode_ms_per_seq*(running+1))*1e6) / speed
 * A stalled replica (LLMSIM_SHM_F_STALLED) never answers: the predictor
 * returns UINT64_MAX. A replica answering errors (LLMSIM_SHM_F_FAILING) is
 * reported by the flag only. Uncached tokens: prompt tokens minus the cached
 * prefix (llmsim_shm_cached_blocks() * prefix_block_tokens), at least 1.
 *
 * Prefix-cache keys: the prompt text (chat: for each message in order, its
 * role then its content, no separator; completions: the prompt strings) is cut
 * in blocks of prefix_block_tokens * 4 bytes; block i's key is the
 * lg_hstream hash (llmgate/hstream.h) of all bytes up to the end of block i
 * (0 maps to 1); only whole blocks are keyed. The table is open addressing with linear probing over
 * llmsim_shm_mix(key) & prefix_table_mask; a slot holds the index + 1 of a
 * block entry (0 = empty).
 *
 * Compatibility: version 2 (version 1 keyed blocks with FNV-1a). Fields are
 * only ever appended; a reader checks `version` and `size`.
 */
#ifndef LLMSIM_SHM_H
#define LLMSIM_SHM_H

#include <llmgate/hstream.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define LLMSIM_SHM_MAGIC   0x4c4d5331u /* "LMS1" */
#define LLMSIM_SHM_VERSION 2u

#define LLMSIM_SHM_F_STEP    (1u << 0) /* a step is in progress, ends at busy_until_ns_hint */
#define LLMSIM_SHM_F_STALLED (1u << 1) /* a stall fault is active: nothing is answered */
#define LLMSIM_SHM_F_FAILING (1u << 2) /* a status fault is active: requests get errors */

/*
 * A step whose end is handled late (a busy loop) still starts the next one at
 * its scheduled end, if no later than this: lateness does not accumulate.
 */
#define LLMSIM_SHM_CATCH_UP_NS 20000000ull

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
    uint32_t slot_off;  /* uint64_t finish_step[slots]: step whose end emits the last token
                           of the sequence in that slot; 0 = free slot */
    uint32_t wait_off;  /* struct llmsim_shm_waiter ring[wait_cap], position p at p % wait_cap */
    uint32_t block_off; /* struct llmsim_shm_block blocks[prefix_cache_blocks] */
    uint32_t table_off; /* uint32_t table[prefix_table_mask + 1] */
    char name[64];      /* the replica's --name, NUL-terminated */
};

_Static_assert(offsetof(struct llmsim_shm, speed) == 24, "llmsim_shm layout");
_Static_assert(offsetof(struct llmsim_shm, busy_until_ns_hint) == 72, "llmsim_shm layout");
_Static_assert(offsetof(struct llmsim_shm, wait_head) == 176, "llmsim_shm layout");
_Static_assert(offsetof(struct llmsim_shm, name) == 208, "llmsim_shm layout");
_Static_assert(sizeof(struct llmsim_shm) == 272, "llmsim_shm layout");

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

/* The prediction of llmsim_shm_predict_ttft_ns() without the seqlock. */
static inline int
llmsim_shm_predict_unlocked(const struct llmsim_shm *s, uint64_t now_ns, uint32_t uncached_tokens,
                            uint64_t *scratch, size_t scratch_len, uint64_t *ttft_ns)
{
    const uint64_t *finish;
    const struct llmsim_shm_waiter *ring;
    double speed = s->speed;
    double pre_ns = s->prefill_us_per_token * 1e3;
    double base_ns = s->decode_ms * 1e6;
    double per_ns = s->decode_ms_per_seq * 1e6;
    uint32_t slots = s->slots;
    uint32_t wait_cap = s->wait_cap;
    uint32_t r = 0;
    uint64_t k = s->steps_done;
    uint64_t pos = s->wait_head;
    uint64_t tail = s->wait_tail;
    uint64_t t;
    uint64_t guard = (uint64_t)slots + wait_cap + 2;

    if (!(speed > 0) || slots == 0 || slots > scratch_len || wait_cap == 0
        || (wait_cap & (wait_cap - 1)) != 0 || (uint64_t)s->slot_off + (uint64_t)slots * 8 > s->size
        || (uint64_t)s->wait_off + (uint64_t)wait_cap * sizeof(*ring) > s->size) {
        return LLMSIM_SHM_EINVAL;
    }
    if (s->flags & LLMSIM_SHM_F_STALLED) {
        *ttft_ns = UINT64_MAX;
        return LLMSIM_SHM_OK;
    }
    finish = (const uint64_t *)((const char *)s + s->slot_off);
    ring = (const struct llmsim_shm_waiter *)((const char *)s + s->wait_off);
    t = now_ns;
    if (s->flags & LLMSIM_SHM_F_STEP) {
        /* the step in progress is step k+1: who finishes with it leaves; the
         * next one starts at its scheduled end, even a little in the past */
        k++;
        if (s->busy_until_ns_hint + LLMSIM_SHM_CATCH_UP_NS >= t) {
            t = s->busy_until_ns_hint;
        }
    }
    for (uint32_t i = 0; i < slots; i++) {
        if (finish[i] > k) {
            scratch[r++] = finish[i];
        }
    }
    if (tail - pos > wait_cap) {
        return LLMSIM_SHM_EINVAL; /* torn: the caller retries */
    }
    while (guard-- > 0) {
        uint64_t prefill = 0;
        uint64_t fmin = UINT64_MAX;
        uint64_t m;
        double step_ns;
        uint32_t kept = 0;

        while (r < slots) {
            const struct llmsim_shm_waiter *w;

            if (pos == tail) {
                step_ns = (pre_ns * (double)(prefill + uncached_tokens) + base_ns
                           + per_ns * (double)(r + 1))
                          / speed;
                *ttft_ns = t + (uint64_t)step_ns - now_ns;
                return LLMSIM_SHM_OK;
            }
            w = &ring[pos++ & (wait_cap - 1)];
            if (w->max_tokens == 0) {
                continue;
            }
            prefill += w->uncached_tokens;
            scratch[r++] = k + w->max_tokens;
        }
        for (uint32_t i = 0; i < r; i++) {
            fmin = scratch[i] < fmin ? scratch[i] : fmin;
        }
        m = fmin > k ? fmin - k : 1;
        step_ns = (pre_ns * (double)prefill + base_ns + per_ns * (double)r) / speed
                  + (double)(m - 1) * (base_ns + per_ns * (double)r) / speed;
        t += (uint64_t)step_ns;
        k += m;
        for (uint32_t i = 0; i < r; i++) {
            if (scratch[i] > k) {
                scratch[kept++] = scratch[i];
            }
        }
        r = kept;
    }
    return LLMSIM_SHM_EINVAL;
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
