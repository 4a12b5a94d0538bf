/*
 * oracle.c: a benchmark-only routing policy that knows the truth. Each
 * candidate is an llmsim replica started with --state-shm; the oracle maps
 * that file and scores the candidate with the exact TTFT one more request
 * would get there now (llmsim_shm_predict_ttft_ns(): the replica's true queue,
 * slots, step in progress and speed, read with no delay), so the benchmark has
 * a lower bound for what any real policy (which sees stale, partial signals)
 * can reach.
 *
 *   "routing": {"plugins": ["build/plugins/oracle.so"],
 *               "pipeline": [{"policy": "oracle",
 *                             "options": {"shm": "/dev/shm/bench/%s.state"}}]}
 *
 * Options (read with the host's getters; keys starting with '#' are comments):
 *   shm           path of a candidate's state file, "%s" standing for its
 *                 backend name (default: $LLMGATE_ORACLE_SHM)
 *   shared_bytes  bytes (roles included) of the prompt prefix that requests
 *                 with the same prefix hash share; 0 = only what the hash
 *                 covers (a size: default 0)
 *   prefix_bytes  routing.prefix_bytes, for a route info too short to carry
 *                 prefix_len (a size: default 2048)
 *
 * Prefix cache: the host hashes the prompt's first prefix_len bytes (roles and
 * contents) with lg_hstream (llmgate/hstream.h), then splitmix64, then sets
 * bit 0. llmsim keys its cache blocks with the same hash of all text up to
 * each block's end, so when prefix_len is a whole number of blocks, inverting
 * splitmix64 gives the key of the block that ends the hashed prefix (two
 * candidates, for the lost bit) and the oracle looks it up in the replica's
 * own table: when present, the
 * shared prefix is cached there (its blocks are touched together, so LRU
 * evicts them together). Otherwise the whole prompt counts as uncached.
 *
 * Replicas that die or restart: every RECHECK_NS the state file is stat()ed
 * (a new inode is remapped; old mappings stay until destroy, since another
 * thread may still read them) and the publishing pid probed with kill(pid, 0);
 * a dead or stalled replica costs DEAD_MS. A restarted replica must get a new
 * file (remove the old one first): llmsim truncates an existing file, which
 * would fault a reader of the old mapping.
 *
 * Requests in transit: the replica only counts a request once it has read
 * it, but this gateway may route several in one turn of its event loop (a
 * burst). The view's `inflight` (this gateway's requests open there) beyond
 * the replica's running + waiting are queued ahead of the new request in the
 * prediction, with its own size; without that the oracle herds every request
 * of a burst onto the replica that looked best before the first of them
 * arrived. (With other gateways in front of the same replicas, their share of
 * running + waiting hides some of ours: the oracle is meant for one gateway.)
 *
 * Owns: its state (per-backend mappings, created lazily on first sight of a
 * backend name), freed by destroy. Threads: ops run on several event loops;
 * the backend table is append-only under a mutex, mappings are published
 * with atomic stores.
 */
#include <errno.h>
#include <fcntl.h>
#include <llmgate/plugin.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llmsim_shm.h"

#define ORACLE_MAX_BACKENDS 256
#define ORACLE_PATH_MAX     512
#define ORACLE_RETIRED_MAX  64
#define RECHECK_NS          20000000ull /* stat and pid probe at most every 20 ms */
#define DEAD_MS             1e9         /* cost of a replica that cannot answer */
#define SCRATCH_SLOTS       4096
#define DEFAULT_MAX_TOKENS  16 /* llmsim's --max-tokens-default */

struct oracle_map {
    const struct llmsim_shm *shm; /* NULL: not mapped (yet) */
    size_t size;
    ino_t ino;
};

struct oracle_backend {
    char name[72];
    char path[ORACLE_PATH_MAX];
    struct oracle_map *map; /* atomic: the current mapping, or NULL */
    uint64_t next_check_ns; /* atomic */
    int alive;              /* atomic: the publishing process exists */
    pthread_mutex_t lock;   /* held while remapping */
};

struct oracle {
    const struct lg_host_api *host;
    char shm_template[ORACLE_PATH_MAX];
    uint64_t shared_bytes;
    uint64_t prefix_bytes;
    pthread_mutex_t lock; /* appends to backends and retired */
    struct oracle_backend *backends[ORACLE_MAX_BACKENDS];
    size_t nbackends; /* atomic: readers scan [0, nbackends) without the lock */
    struct oracle_map *retired[ORACLE_RETIRED_MAX];
    size_t nretired;
};

/* ---- options ------------------------------------------------------------- */

/* Reads the options through the host's getters (the host refuses unknown ones). */
static int
oracle_options(struct oracle *o, const struct lg_host_api *host, struct lg_options *opts, char *err,
               size_t errlen)
{
    const char *env = getenv("LLMGATE_ORACLE_SHM");
    const char *shm = NULL;
    const char *at;
    int rc = host->opt_string(opts, "shm", env, &shm);

    rc |= host->opt_size(opts, "shared_bytes", 0, 0, 1ull << 40, &o->shared_bytes);
    rc |= host->opt_size(opts, "prefix_bytes", 2048, 0, 1ull << 40, &o->prefix_bytes);
    if (rc != 0) {
        return -1;
    }
    if (shm == NULL || (at = strstr(shm, "%s")) == NULL) {
        snprintf(err, errlen,
                 "/shm: required (a state-file path with \"%%s\" for the backend name), "
                 "or set LLMGATE_ORACLE_SHM");
        return -1;
    }
    if (strlen(shm) >= sizeof(o->shm_template) || strchr(shm, '%') != at
        || strchr(at + 2, '%') != NULL) {
        snprintf(err, errlen, "/shm: must be a path with one \"%%s\" (the backend name)");
        return -1;
    }
    snprintf(o->shm_template, sizeof(o->shm_template), "%s", shm);
    return 0;
}

/* ---- mappings ------------------------------------------------------------ */

static struct oracle_map *
oracle_map_open(const char *path, ino_t *ino)
{
    struct oracle_map *m;
    struct stat st;
    void *p;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        return NULL;
    }
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct llmsim_shm)) {
        close(fd);
        return NULL;
    }
    p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        return NULL;
    }
    if (!llmsim_shm_valid(p, (size_t)st.st_size)) {
        munmap(p, (size_t)st.st_size);
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        munmap(p, (size_t)st.st_size);
        return NULL;
    }
    m->shm = p;
    m->size = (size_t)st.st_size;
    m->ino = st.st_ino;
    *ino = st.st_ino;
    return m;
}

static void
oracle_map_free(struct oracle_map *m)
{
    if (m == NULL) {
        return;
    }
    munmap((void *)(uintptr_t)m->shm, m->size);
    free(m);
}

/* Keeps a replaced mapping alive until destroy (another thread may still read it). */
static void
oracle_retire(struct oracle *o, struct oracle_map *m)
{
    if (m == NULL) {
        return;
    }
    pthread_mutex_lock(&o->lock);
    if (o->nretired < ORACLE_RETIRED_MAX) {
        o->retired[o->nretired++] = m;
        m = NULL;
    }
    pthread_mutex_unlock(&o->lock);
    /* m != NULL: dozens of restarts filled the list; leaking beats unmapping under a reader */
}

/* Re-reads the file's identity and the publisher's liveness (rate-limited). */
static void
oracle_refresh(struct oracle *o, struct oracle_backend *b, uint64_t now)
{
    struct oracle_map *cur;
    struct stat st;
    bool alive = false;

    if (now < __atomic_load_n(&b->next_check_ns, __ATOMIC_RELAXED)
        || pthread_mutex_trylock(&b->lock) != 0) {
        return;
    }
    __atomic_store_n(&b->next_check_ns, now + RECHECK_NS, __ATOMIC_RELAXED);
    cur = __atomic_load_n(&b->map, __ATOMIC_ACQUIRE);
    if (stat(b->path, &st) == 0 && (cur == NULL || st.st_ino != cur->ino)) {
        ino_t ino;
        struct oracle_map *fresh = oracle_map_open(b->path, &ino);

        if (fresh != NULL) {
            __atomic_store_n(&b->map, fresh, __ATOMIC_RELEASE);
            oracle_retire(o, cur);
            cur = fresh;
        }
    }
    if (cur != NULL) {
        pid_t pid = (pid_t)__atomic_load_n(&cur->shm->pid, __ATOMIC_RELAXED);

        alive = pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
    }
    __atomic_store_n(&b->alive, alive, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&b->lock);
}

static struct oracle_backend *
oracle_backend_get(struct oracle *o, const char *name)
{
    size_t n = __atomic_load_n(&o->nbackends, __ATOMIC_ACQUIRE);
    struct oracle_backend *b;

    for (size_t i = 0; i < n; i++) {
        if (strcmp(o->backends[i]->name, name) == 0) {
            return o->backends[i];
        }
    }
    if (strlen(name) >= sizeof(b->name)) {
        return NULL;
    }
    pthread_mutex_lock(&o->lock);
    n = o->nbackends;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(o->backends[i]->name, name) == 0) {
            pthread_mutex_unlock(&o->lock);
            return o->backends[i];
        }
    }
    b = NULL;
    if (n < ORACLE_MAX_BACKENDS) {
        b = calloc(1, sizeof(*b));
    }
    if (b != NULL) {
        const char *at = strstr(o->shm_template, "%s");

        snprintf(b->name, sizeof(b->name), "%s", name);
        snprintf(b->path, sizeof(b->path), "%.*s%s%s", (int)(at - o->shm_template), o->shm_template,
                 name, at + 2);
        pthread_mutex_init(&b->lock, NULL);
        o->backends[n] = b;
        __atomic_store_n(&o->nbackends, n + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&o->lock);
    return b;
}

/* ---- prefix cache -------------------------------------------------------- */

/* Multiplicative inverse of an odd 64-bit number (Newton's iteration). */
static uint64_t
oracle_inverse(uint64_t a)
{
    uint64_t x = a; /* correct to 3 bits; each step doubles that */

    for (int i = 0; i < 5; i++) {
        x *= 2 - a * x;
    }
    return x;
}

static uint64_t
oracle_unxorshift(uint64_t y, int s)
{
    uint64_t x = y;

    for (int k = s; k < 64; k += s) {
        x = y ^ (x >> s);
    }
    return x;
}

/* The inverse of llmsim_shm_mix() (splitmix64's finaliser). */
static uint64_t
oracle_unmix(uint64_t y)
{
    y = oracle_unxorshift(y, 31);
    y *= oracle_inverse(0x94d049bb133111ebull);
    y = oracle_unxorshift(y, 27);
    y *= oracle_inverse(0xbf58476d1ce4e5b9ull);
    y = oracle_unxorshift(y, 30);
    return y - 0x9e3779b97f4a7c15ull;
}

static bool
oracle_has_key(const struct llmsim_shm *s, uint64_t key)
{
    const struct llmsim_shm_block *blocks;
    const uint32_t *table;
    uint32_t mask = s->prefix_table_mask;
    uint32_t cap = s->prefix_cache_blocks;
    uint32_t i;

    if (cap == 0 || s->block_off == 0 || s->table_off == 0
        || (uint64_t)s->table_off + ((uint64_t)mask + 1) * 4 > s->size
        || (uint64_t)s->block_off + (uint64_t)cap * sizeof(*blocks) > s->size) {
        return false;
    }
    blocks = (const struct llmsim_shm_block *)((const char *)s + s->block_off);
    table = (const uint32_t *)((const char *)s + s->table_off);
    i = (uint32_t)llmsim_shm_mix(key) & mask;
    for (uint32_t probes = 0; probes <= mask; probes++, i = (i + 1) & mask) {
        uint32_t e = table[i];

        if (e == 0) {
            return false;
        }
        if (e <= cap && blocks[e - 1].key == key) {
            return true;
        }
    }
    return false;
}

/* Prompt tokens the replica has cached for this request (seqlocked read). */
static uint32_t
oracle_cached_tokens(const struct oracle *o, const struct llmsim_shm *s,
                     const struct lg_route_info *req)
{
    uint64_t len = o->prefix_bytes;
    uint64_t block_bytes = (uint64_t)s->prefix_block_tokens * 4;
    uint64_t shared;
    uint64_t h0;
    uint64_t h1;

    if (req->size >= offsetof(struct lg_route_info, prefix_len) + sizeof(req->prefix_len)) {
        len = req->prefix_len;
    }
    if (req->prefix_hash == 0 || block_bytes == 0 || len == 0 || len % block_bytes != 0) {
        return 0;
    }
    h0 = llmsim_shm_key(oracle_unmix(req->prefix_hash));
    h1 = llmsim_shm_key(oracle_unmix(req->prefix_hash ^ 1));
    for (int attempt = 0; attempt < LLMSIM_SHM_READ_ATTEMPTS; attempt++) {
        uint32_t seq;
        bool hit;

        llmsim_shm_read_pause(attempt);
        seq = llmsim_shm_read_begin(s);
        hit = oracle_has_key(s, h0) || oracle_has_key(s, h1);

        if (!llmsim_shm_read_retry(s, seq)) {
            if (!hit) {
                return 0;
            }
            shared = o->shared_bytes > len ? o->shared_bytes : len;
            return (uint32_t)(shared / block_bytes * s->prefix_block_tokens);
        }
    }
    return 0;
}

/* ---- ops ----------------------------------------------------------------- */

static int
oracle_create(const struct lg_host_api *host, struct lg_options *opts, void **state, char *err,
              size_t errlen)
{
    struct oracle *o = calloc(1, sizeof(*o));

    if (o == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    o->host = host;
    if (oracle_options(o, host, opts, err, errlen) != 0) {
        free(o);
        return -1;
    }
    pthread_mutex_init(&o->lock, NULL);
    *state = o;
    return 0;
}

static void
oracle_destroy(void *state)
{
    struct oracle *o = state;

    for (size_t i = 0; i < o->nbackends; i++) {
        oracle_map_free(o->backends[i]->map);
        pthread_mutex_destroy(&o->backends[i]->lock);
        free(o->backends[i]);
    }
    for (size_t i = 0; i < o->nretired; i++) {
        oracle_map_free(o->retired[i]);
    }
    pthread_mutex_destroy(&o->lock);
    free(o);
}

static double
oracle_predict_ms(struct oracle *o, const struct lg_route_info *req,
                  const struct lg_backend_view *v, uint64_t now)
{
    static __thread uint64_t scratch[SCRATCH_SLOTS];
    struct oracle_backend *b = oracle_backend_get(o, v->name);
    const struct oracle_map *m;
    uint64_t tokens = req->prompt_bytes / 4;
    uint32_t max_tokens = req->max_tokens ? req->max_tokens : DEFAULT_MAX_TOKENS;
    uint32_t cached;

    if (b == NULL) {
        return DEAD_MS;
    }
    oracle_refresh(o, b, now);
    m = __atomic_load_n(&b->map, __ATOMIC_ACQUIRE);
    if (m == NULL || !__atomic_load_n(&b->alive, __ATOMIC_ACQUIRE)) {
        return DEAD_MS;
    }
    cached = oracle_cached_tokens(o, m->shm, req);
    tokens = tokens > cached ? tokens - cached : 0;
    if (tokens < 1) {
        tokens = 1;
    }
    if (tokens > UINT32_MAX) {
        tokens = UINT32_MAX;
    }
    for (int attempt = 0; attempt < LLMSIM_SHM_READ_ATTEMPTS; attempt++) {
        const struct llmsim_shm *s = m->shm;
        uint32_t seq, known, extra;
        uint64_t ttft = 0;
        int rc;

        llmsim_shm_read_pause(attempt);
        seq = llmsim_shm_read_begin(s);
        known = s->running + s->waiting;
        extra = v->inflight > known ? v->inflight - known : 0;
        rc = llmsim_shm_predict_queued_unlocked(s, now, (uint32_t)tokens, extra, (uint32_t)tokens,
                                                max_tokens, scratch, SCRATCH_SLOTS, &ttft);

        if (!llmsim_shm_read_retry(s, seq)) {
            return rc != LLMSIM_SHM_OK || ttft == UINT64_MAX ? DEAD_MS : (double)ttft / 1e6;
        }
    }
    return DEAD_MS;
}

static void
oracle_score(void *state, const struct lg_route_info *req,
             const struct lg_backend_view *const *cands, size_t n, double *cost, const char **why)
{
    struct oracle *o = state;
    uint64_t now = o->host->now_ns();

    for (size_t i = 0; i < n; i++) {
        cost[i] = oracle_predict_ms(o, req, cands[i], now);
    }
    *why = "true_ttft";
}

static const struct lg_policy_ops oracle_ops = {
    .size = sizeof(struct lg_policy_ops),
    .create = oracle_create,
    .destroy = oracle_destroy,
    .score = oracle_score,
};

static const struct lg_plugin_desc oracle_desc = {
    .abi_major = LG_PLUGIN_ABI_MAJOR,
    .abi_minor = LG_PLUGIN_ABI_MINOR,
    .kind = LG_PLUGIN_POLICY,
    .name = "oracle",
    .version = "1.0",
    .ops = &oracle_ops,
};

LG_PLUGIN_EXPORT const struct lg_plugin_desc *
lg_plugin_describe(void)
{
    return &oracle_desc;
}
