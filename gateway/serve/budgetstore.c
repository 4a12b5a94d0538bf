/*
 * budgetstore.c: token budgets shared through Redis (see budgetstore.h):
 * the store's thread, its connection (hiredis's async API on the thread's
 * own libevent base), the sync batches and the store's state.
 *
 * Owns: struct lg_budgetstore, its thread and event base, the Redis
 * connection (hiredis frees it when the server closes it; we do when we
 * give up on it), and each batch (refcounted: the store while it waits for
 * it, and each command sent for it until hiredis calls back, with a reply
 * or with NULL as the connection goes).
 * Borrows: the refuses flag (the gateway's); the accounts (budget.c; a
 * batch holds a reference to each of its own).
 * Invariants: everything but the flag, the counters and the description
 * (under `lock`) is the thread's; requests never touch the store; replies
 * come in the order the commands went.
 */
#include "serve/budgetstore.h"

#include <arpa/inet.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "base/config_types.h"
#include "serve/budget.h"

#define STORE_RECONNECT_MS 1000  /* after a failure, the next try at the earliest */
#define STORE_EXPIRE_MS    60000 /* a window's hash outlives the window by this */

/*
 * KEYS: the minute's hash, the day's; ARGV: this gateway's id, its share of
 * each, each hash's expiry (ms since the epoch). Returns both sums over
 * every gateway. Each gateway writes an absolute value, so a write that is
 * repeated (an answer lost with the connection) counts once.
 */
static const char store_script[] =
    "local function put(k, v, at)\n"
    "  redis.call('HSET', k, ARGV[1], v)\n"
    "  redis.call('PEXPIREAT', k, at)\n"
    "  local s = 0\n"
    "  for _, x in ipairs(redis.call('HVALS', k)) do s = s + (tonumber(x) or 0) end\n"
    "  return s\n"
    "end\n"
    "return {put(KEYS[1], ARGV[2], ARGV[4]), put(KEYS[2], ARGV[3], ARGV[5])}\n";

enum store_state {
    STORE_ST_DOWN = 0,   /* no connection; the next try at retry_at_ms */
    STORE_ST_CONNECTING, /* connecting, authenticating, loading the script */
    STORE_ST_UP,         /* syncing */
};

static const char *const store_state_names[] = {
    [STORE_ST_DOWN] = "down",
    [STORE_ST_CONNECTING] = "connecting",
    [STORE_ST_UP] = "up",
};

struct store_batch {
    int refcnt;
    struct lg_budget_share *shares; /* [n], one account reference each */
    size_t n;
    size_t next; /* the share the next reply is for */
    struct lg_budgetstore *s;
};

struct lg_budgetstore {
    /* the configuration, copied */
    char *address;
    char host[INET6_ADDRSTRLEN];
    int port;
    char *password;
    uint32_t db;
    char *key_prefix;
    uint64_t sync_interval_ms;
    uint64_t timeout_ms;
    int on_failure; /* enum lg_budget_failure */

    bool *refuses; /* borrowed: the gateway's flag */
    char id[33];   /* this gateway's field in the hashes */
    char sha[41];  /* the script's SHA-1 (EVALSHA) */
    pthread_t thread;
    bool started;
    struct event_base *base;
    struct event *tick;
    struct event *stop_ev;

    /* the thread's */
    redisAsyncContext *ac;
    enum store_state state;
    uint64_t since_ms;         /* CONNECTING: since when */
    uint64_t retry_at_ms;      /* DOWN: the next connection at the earliest */
    struct store_batch *batch; /* waited for; NULL: none */
    uint64_t batch_sent_ms;
    bool announced_down; /* the failure was logged (once until it is back) */

    /* a reload's settings, under lock, taken by the thread at its next tick */
    struct lg_budgetstore *pending;

    /* for /admin/budgets, under lock */
    pthread_mutex_t lock;
    enum store_state shown_state;
    uint64_t syncs;           /* batches answered */
    uint64_t accounts_synced; /* shares answered */
    uint64_t failures;
    uint64_t last_ok_ms; /* wall clock of the last answered batch */
    char last_error[160];
};

static void store_fail(struct lg_budgetstore *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Wall clock: the windows' (budget.c), and what /admin/budgets shows. */
static uint64_t
store_wall_ms(void)
{
    return lg_wall_ns() / LG_NS_PER_MS;
}

/* Monotonic: timeouts and retries. */
static uint64_t
store_now_ms(void)
{
    return lg_now_ns() / LG_NS_PER_MS;
}

static const char *
store_failure_name(const struct lg_budgetstore *s)
{
    return s->on_failure == LG_BUDGET_FAIL_CLOSED ? "closed" : "open";
}

static void
store_set_state(struct lg_budgetstore *s, enum store_state to)
{
    s->state = to;
    __atomic_store_n(s->refuses, to != STORE_ST_UP && s->on_failure == LG_BUDGET_FAIL_CLOSED,
                     __ATOMIC_RELAXED);
    pthread_mutex_lock(&s->lock);
    s->shown_state = to;
    pthread_mutex_unlock(&s->lock);
}

/* ---- batches ------------------------------------------------------------------------------ */

static void
batch_unref(struct store_batch *b)
{
    if (b == NULL || --b->refcnt > 0) {
        return;
    }
    /* shares never answered are written again next time */
    for (size_t i = b->next; i < b->n; i++) {
        lg_budget_unsent(&b->shares[i]);
    }
    lg_budget_shares_free(b->shares, b->n);
    free(b);
}

/*
 * An error reply's text for the log: at most 120 bytes, anything but
 * printable ASCII as '?' (it is the server's, and goes into log lines).
 */
static void
store_error_text(const redisReply *r, char *out, size_t cap)
{
    size_t n = 0;

    for (size_t i = 0; r->str != NULL && i < r->len && i < 120 && n + 1 < cap; i++) {
        unsigned char ch = (unsigned char)r->str[i];

        out[n++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    if (n == 0) {
        snprintf(out, cap, "an error without a message");
        return;
    }
    out[n] = '\0';
}

int
lg_budgetstore_read_sums(const void *reply, uint64_t sums[2], char *why, size_t whylen)
{
    const redisReply *r = reply;

    if (r == NULL) {
        snprintf(why, whylen, "no reply");
        return LG_EPROTO;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        store_error_text(r, why, whylen);
        return LG_EPROTO;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        snprintf(why, whylen, "expected an array of 2 integers (reply type %d)", r->type);
        return LG_EPROTO;
    }
    for (size_t i = 0; i < 2; i++) {
        const redisReply *e = r->element[i];

        if (e == NULL || e->type != REDIS_REPLY_INTEGER || e->integer < 0) {
            snprintf(why, whylen, "expected an array of 2 non-negative integers");
            return LG_EPROTO;
        }
        sums[i] = (uint64_t)e->integer;
    }
    return LG_OK;
}

static void
store_on_sums(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct store_batch *b = privdata;
    struct lg_budgetstore *s = b->s;
    const struct lg_budget_share *sh = &b->shares[b->next];
    uint64_t sums[2];
    char why[160];

    (void)ac;
    if (reply == NULL) {
        batch_unref(b); /* the connection went: the rest is written again */
        return;
    }
    b->next++;
    if (lg_budgetstore_read_sums(reply, sums, why, sizeof(why)) != LG_OK) {
        lg_budget_unsent(sh);
        if (s->batch == b) {
            if (strncmp(why, "NOSCRIPT", 8) == 0) {
                /* the server forgot the script (SCRIPT FLUSH, a failover): connect again */
                store_fail(s, "the script is gone from the server (%s)", why);
            } else {
                store_fail(s, "a sync failed: %s", why);
            }
        }
        batch_unref(b);
        return;
    }
    lg_budget_learn(sh, sums);
    if (b->next == b->n && s->batch == b) {
        uint64_t now = store_wall_ms();

        s->batch = NULL;
        pthread_mutex_lock(&s->lock);
        s->syncs++;
        s->accounts_synced += b->n;
        s->last_ok_ms = now;
        pthread_mutex_unlock(&s->lock);
        batch_unref(b); /* the store's reference */
    }
    batch_unref(b);
}

/* Writes every share that changed, and reads the sums of accounts in use. */
static void
store_sync(struct lg_budgetstore *s, uint64_t now)
{
    struct lg_budget_share *shares;
    struct store_batch *b;
    uint64_t wall = store_wall_ms();
    /* an account in use learns the others' part at every sync for a minute after its last use */
    size_t n = lg_budget_collect(wall, 60000, &shares);

    if (n == 0) {
        pthread_mutex_lock(&s->lock);
        s->last_ok_ms = wall; /* nothing to say, and the connection stands */
        pthread_mutex_unlock(&s->lock);
        return;
    }
    b = lg_xcalloc(1, sizeof(*b));
    b->refcnt = 1; /* the store's, while it waits */
    b->shares = shares;
    b->n = n;
    b->s = s;
    s->batch = b;
    s->batch_sent_ms = now;
    for (size_t i = 0; i < n; i++) {
        const struct lg_budget_share *sh = &shares[i];
        char km[256], kd[256], mine_m[24], mine_d[24], exp_m[24], exp_d[24];
        const char *argv[10];
        size_t lens[10];

        snprintf(km, sizeof(km), "%s:%s:m:%" PRIu64, s->key_prefix, lg_budget_name(sh->b),
                 sh->window[LG_BUDGET_MINUTE]);
        snprintf(kd, sizeof(kd), "%s:%s:d:%" PRIu64, s->key_prefix, lg_budget_name(sh->b),
                 sh->window[LG_BUDGET_DAY]);
        snprintf(mine_m, sizeof(mine_m), "%" PRIu64, sh->mine[LG_BUDGET_MINUTE]);
        snprintf(mine_d, sizeof(mine_d), "%" PRIu64, sh->mine[LG_BUDGET_DAY]);
        snprintf(exp_m, sizeof(exp_m), "%" PRIu64, sh->end_ms[LG_BUDGET_MINUTE] + STORE_EXPIRE_MS);
        snprintf(exp_d, sizeof(exp_d), "%" PRIu64, sh->end_ms[LG_BUDGET_DAY] + STORE_EXPIRE_MS);
        argv[0] = "EVALSHA";
        argv[1] = s->sha;
        argv[2] = "2";
        argv[3] = km;
        argv[4] = kd;
        argv[5] = s->id;
        argv[6] = mine_m;
        argv[7] = mine_d;
        argv[8] = exp_m;
        argv[9] = exp_d;
        for (size_t k = 0; k < 10; k++) {
            lens[k] = strlen(argv[k]);
        }
        b->refcnt++;
        if (redisAsyncCommandArgv(s->ac, store_on_sums, b, 10, argv, lens) != REDIS_OK) {
            b->refcnt--;
            /* not sent: this one and the rest are written again (batch_unref) */
            store_fail(s, "cannot queue a command: %s", s->ac != NULL ? s->ac->errstr : "gone");
            break;
        }
    }
}

/* ---- the connection ----------------------------------------------------------------------- */

/*
 * Gives up on the connection: logged once per outage, with what requests
 * do meanwhile; a batch in flight is dropped (its shares go again).
 */
static void
store_fail(struct lg_budgetstore *s, const char *fmt, ...)
{
    redisAsyncContext *ac = s->ac;
    struct store_batch *b = s->batch;
    char why[160];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    s->ac = NULL;
    s->batch = NULL;
    store_set_state(s, STORE_ST_DOWN);
    s->retry_at_ms = store_now_ms() + LG_MAX(STORE_RECONNECT_MS, s->sync_interval_ms);
    pthread_mutex_lock(&s->lock);
    s->failures++;
    snprintf(s->last_error, sizeof(s->last_error), "%s", why);
    pthread_mutex_unlock(&s->lock);
    if (!s->announced_down) {
        s->announced_down = true;
        if (s->on_failure == LG_BUDGET_FAIL_CLOSED) {
            LG_ERROR("budgets: redis %s: %s: failing closed: requests of keys with token budgets "
                     "are refused (503) until it answers again",
                     s->address, why);
        } else {
            LG_WARN("budgets: redis %s: %s: failing open: each gateway decides on its own counts "
                    "(and the others' last known) until it answers again",
                    s->address, why);
        }
    } else {
        LG_DEBUG("budgets: redis %s: %s", s->address, why);
    }
    batch_unref(b);
    if (ac != NULL) {
        redisAsyncFree(ac); /* deferred by hiredis when called from one of its callbacks */
    }
}

static void
store_on_ready(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct lg_budgetstore *s = privdata;
    const redisReply *r = reply;

    if (r == NULL || ac != s->ac) {
        return; /* the connection went (store_fail, or the server closed it) */
    }
    if (r->type == REDIS_REPLY_ERROR) {
        char why[128];

        store_error_text(r, why, sizeof(why));
        store_fail(s, "%s", why);
        return;
    }
    if (r->type != REDIS_REPLY_STRING || r->len != 40 || memcmp(r->str, s->sha, 40) != 0) {
        store_fail(s, "SCRIPT LOAD answered something else than the script's SHA-1");
        return;
    }
    store_set_state(s, STORE_ST_UP);
    lg_budget_unsent_all(); /* this server may have none of them (another one, or restarted) */
    LG_INFO("budgets: %s redis %s (db %u): shares synced every %" PRIu64 " ms; if it fails: %s",
            s->announced_down ? "back on" : "shared through", s->address, s->db,
            s->sync_interval_ms, store_failure_name(s));
    s->announced_down = false;
}

/* AUTH and SELECT: an error fails the connection; their success says nothing yet. */
static void
store_on_setup(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct lg_budgetstore *s = privdata;
    const redisReply *r = reply;

    if (r != NULL && ac == s->ac && r->type == REDIS_REPLY_ERROR) {
        char why[128];

        store_error_text(r, why, sizeof(why));
        store_fail(s, "%s", why);
    }
}

static void
store_on_connect(const redisAsyncContext *ac, int status)
{
    struct lg_budgetstore *s = ac->data;

    if (status != REDIS_OK && ac == s->ac) {
        s->ac = NULL; /* hiredis frees it */
        store_fail(s, "cannot connect: %s", ac->errstr);
    }
}

static void
store_on_disconnect(const redisAsyncContext *ac, int status)
{
    struct lg_budgetstore *s = ac->data;

    if (ac == s->ac) {
        s->ac = NULL; /* hiredis frees it */
        store_fail(s, "the connection closed%s%s", status != REDIS_OK ? ": " : "",
                   status != REDIS_OK ? ac->errstr : "");
    }
}

static void
store_connect(struct lg_budgetstore *s, uint64_t now)
{
    char db[16];
    redisAsyncContext *ac = redisAsyncConnect(s->host, s->port);

    if (ac == NULL || ac->err != 0) {
        s->ac = NULL;
        store_fail(s, "cannot connect: %s", ac != NULL ? ac->errstr : "out of memory");
        if (ac != NULL) {
            redisAsyncFree(ac);
        }
        return;
    }
    ac->data = s;
    if (redisLibeventAttach(ac, s->base) != REDIS_OK) {
        redisAsyncFree(ac);
        store_fail(s, "cannot attach the connection to the event loop");
        return;
    }
    s->ac = ac;
    store_set_state(s, STORE_ST_CONNECTING);
    s->since_ms = now;
    redisAsyncSetConnectCallback(ac, store_on_connect);
    redisAsyncSetDisconnectCallback(ac, store_on_disconnect);
    /* queued now, written once connected; answered in this order */
    if (s->password != NULL) {
        redisAsyncCommand(ac, store_on_setup, s, "AUTH %s", s->password);
    }
    if (s->db != 0) {
        snprintf(db, sizeof(db), "%u", s->db);
        redisAsyncCommand(ac, store_on_setup, s, "SELECT %s", db);
    }
    redisAsyncCommand(ac, store_on_ready, s, "SCRIPT LOAD %s", store_script);
}

/* ---- settings ---------------------------------------------------------------------------- */

/* The settings of conf, copied into s (whose strings are free or NULL). */
static void
store_settings(struct lg_budgetstore *s, const struct lg_budget_redis_conf *conf)
{
    const struct sockaddr_in *a4 = (const struct sockaddr_in *)&conf->addr;
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)&conf->addr;

    s->address = lg_xstrdup(conf->address);
    s->password = conf->password != NULL ? lg_xstrdup(conf->password) : NULL;
    s->db = conf->db;
    s->key_prefix = lg_xstrdup(conf->key_prefix);
    s->sync_interval_ms = conf->sync_interval_ms;
    s->timeout_ms = conf->timeout_ms;
    s->on_failure = conf->on_failure;
    if (conf->addr.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &a6->sin6_addr, s->host, sizeof(s->host));
        s->port = ntohs(a6->sin6_port);
    } else {
        inet_ntop(AF_INET, &a4->sin_addr, s->host, sizeof(s->host));
        s->port = ntohs(a4->sin_port);
    }
}

static void
store_settings_free(struct lg_budgetstore *s)
{
    free(s->address);
    free(s->password);
    free(s->key_prefix);
    s->address = s->password = s->key_prefix = NULL;
}

/* The thread takes a reload's settings: the connection starts again with them. */
static void
store_take_settings(struct lg_budgetstore *s)
{
    struct lg_budgetstore *next;
    struct timeval tv;

    pthread_mutex_lock(&s->lock);
    next = s->pending;
    s->pending = NULL;
    pthread_mutex_unlock(&s->lock);
    if (next == NULL) {
        return;
    }
    if (s->ac != NULL || s->batch != NULL) {
        redisAsyncContext *ac = s->ac;

        s->ac = NULL;
        batch_unref(s->batch);
        s->batch = NULL;
        if (ac != NULL) {
            redisAsyncFree(ac);
        }
    }
    pthread_mutex_lock(&s->lock); /* describe() reads the strings */
    store_settings_free(s);
    s->address = next->address;
    s->password = next->password;
    s->key_prefix = next->key_prefix;
    memcpy(s->host, next->host, sizeof(s->host));
    s->port = next->port;
    s->db = next->db;
    s->sync_interval_ms = next->sync_interval_ms;
    s->timeout_ms = next->timeout_ms;
    s->on_failure = next->on_failure;
    pthread_mutex_unlock(&s->lock);
    free(next);
    s->retry_at_ms = 0;
    s->announced_down = false;
    store_set_state(s, STORE_ST_DOWN);
    event_del(s->tick);
    event_add(s->tick, lg_timeval_ms(s->sync_interval_ms, &tv));
}

/* Every sync_interval: connect, time out, or sync. */
static void
store_on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct lg_budgetstore *s = arg;
    uint64_t now;

    (void)fd;
    (void)what;
    store_take_settings(s);
    now = store_now_ms();
    switch (s->state) {
    case STORE_ST_DOWN:
        if (now >= s->retry_at_ms) {
            store_connect(s, now);
        }
        break;
    case STORE_ST_CONNECTING:
        if (now - s->since_ms >= s->timeout_ms) {
            store_fail(s, "no answer within %" PRIu64 " ms of connecting", s->timeout_ms);
        }
        break;
    case STORE_ST_UP:
        if (s->batch != NULL) {
            if (now - s->batch_sent_ms >= s->timeout_ms) {
                store_fail(s, "no answer within %" PRIu64 " ms", s->timeout_ms);
            }
            break; /* one batch at a time */
        }
        store_sync(s, now);
        break;
    }
}

static void
store_on_stop(evutil_socket_t fd, short what, void *arg)
{
    struct lg_budgetstore *s = arg;

    (void)fd;
    (void)what;
    event_base_loopbreak(s->base);
}

static void *
store_main(void *arg)
{
    struct lg_budgetstore *s = arg;
    redisAsyncContext *ac;

    event_base_dispatch(s->base);
    ac = s->ac;
    s->ac = NULL;
    batch_unref(s->batch);
    s->batch = NULL;
    if (ac != NULL) {
        redisAsyncFree(ac); /* its callbacks see NULL replies and drop their batch references */
    }
    return NULL;
}

/* ---- life ------------------------------------------------------------------------------- */

static void
store_free(struct lg_budgetstore *s)
{
    if (s->tick != NULL) {
        event_free(s->tick);
    }
    if (s->stop_ev != NULL) {
        event_free(s->stop_ev);
    }
    if (s->base != NULL) {
        event_base_free(s->base);
    }
    pthread_mutex_destroy(&s->lock);
    if (s->pending != NULL) {
        store_settings_free(s->pending);
        free(s->pending);
    }
    store_settings_free(s);
    free(s);
}

int
lg_budgetstore_start(const struct lg_budget_redis_conf *conf, bool *refuses,
                     struct lg_budgetstore **out)
{
    struct lg_budgetstore *s = lg_xcalloc(1, sizeof(*s));
    uint8_t rnd[16], digest[SHA_DIGEST_LENGTH];
    struct timeval tv;

    pthread_mutex_init(&s->lock, NULL);
    store_settings(s, conf);
    s->refuses = refuses;
    if (RAND_bytes(rnd, sizeof(rnd)) != 1) {
        for (size_t i = 0; i < sizeof(rnd); i++) {
            rnd[i] = (uint8_t)(lg_mix64(lg_wall_ns() + i) >> 24);
        }
    }
    for (size_t i = 0; i < sizeof(rnd); i++) {
        snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);
    }
    SHA1((const unsigned char *)store_script, sizeof(store_script) - 1, digest);
    for (size_t i = 0; i < SHA_DIGEST_LENGTH; i++) {
        snprintf(s->sha + 2 * i, 3, "%02x", digest[i]);
    }
    store_set_state(s, STORE_ST_DOWN); /* until the first connection is ready */
    s->base = event_base_new();
    if (s->base == NULL) {
        LG_ERROR("budgets: cannot make the store's event base");
        store_free(s);
        return LG_ERR;
    }
    s->tick = event_new(s->base, -1, EV_PERSIST, store_on_tick, s);
    s->stop_ev = event_new(s->base, -1, 0, store_on_stop, s);
    event_add(s->tick, lg_timeval_ms(s->sync_interval_ms, &tv));
    event_add(s->stop_ev, NULL);
    event_active(s->tick, EV_TIMEOUT, 0); /* connect at once */
    if (pthread_create(&s->thread, NULL, store_main, s) != 0) {
        LG_ERROR("budgets: cannot start the store's thread");
        store_free(s);
        return LG_ERR;
    }
    pthread_setname_np(s->thread, "lg-budgets");
    s->started = true;
    *out = s;
    return LG_OK;
}

void
lg_budgetstore_stop(struct lg_budgetstore *s)
{
    if (s == NULL) {
        return;
    }
    if (s->started) {
        event_active(s->stop_ev, EV_READ, 0);
        pthread_join(s->thread, NULL);
    }
    store_free(s);
}

static bool
store_same_str(const char *a, const char *b)
{
    return (a == NULL) == (b == NULL) && (a == NULL || strcmp(a, b) == 0);
}

/* Does conf differ from the settings in s? */
static bool
store_differs(const struct lg_budgetstore *s, const struct lg_budget_redis_conf *conf)
{
    return !store_same_str(s->address, conf->address)
           || !store_same_str(s->password, conf->password) || s->db != conf->db
           || !store_same_str(s->key_prefix, conf->key_prefix)
           || s->sync_interval_ms != conf->sync_interval_ms || s->timeout_ms != conf->timeout_ms
           || s->on_failure != conf->on_failure;
}

void
lg_budgetstore_reconfigure(struct lg_budgetstore *s, const struct lg_budget_redis_conf *conf)
{
    struct lg_budgetstore *next, *old;

    pthread_mutex_lock(&s->lock);
    /* the settings in force, or those a reload left for the thread already */
    if (!store_differs(s->pending != NULL ? s->pending : s, conf)) {
        pthread_mutex_unlock(&s->lock);
        return;
    }
    pthread_mutex_unlock(&s->lock);
    next = lg_xcalloc(1, sizeof(*next));
    store_settings(next, conf);
    pthread_mutex_lock(&s->lock);
    old = s->pending;
    s->pending = next;
    pthread_mutex_unlock(&s->lock);
    if (old != NULL) {
        store_settings_free(old);
        free(old);
    }
    LG_INFO("budgets: the store's settings changed (redis %s, on failure: %s): the store "
            "connects again with them",
            conf->address, conf->on_failure == LG_BUDGET_FAIL_CLOSED ? "closed" : "open");
}

json_t *
lg_budgetstore_describe(struct lg_budgetstore *s)
{
    json_t *o = json_object();
    uint64_t now = store_wall_ms();

    pthread_mutex_lock(&s->lock);
    json_object_set_new(o, "redis", json_string(s->address));
    json_object_set_new(o, "db", json_integer(s->db));
    json_object_set_new(o, "key_prefix", json_string(s->key_prefix));
    json_object_set_new(o, "gateway_id", json_string(s->id));
    json_object_set_new(o, "on_failure", json_string(store_failure_name(s)));
    json_object_set_new(o, "sync_interval_ms", json_integer((json_int_t)s->sync_interval_ms));
    json_object_set_new(o, "timeout_ms", json_integer((json_int_t)s->timeout_ms));
    json_object_set_new(o, "refusing", json_boolean(lg_budgetstore_refuses(s->refuses)));
    json_object_set_new(o, "state", json_string(store_state_names[s->shown_state]));
    json_object_set_new(o, "syncs", json_integer((json_int_t)s->syncs));
    json_object_set_new(o, "accounts_synced", json_integer((json_int_t)s->accounts_synced));
    json_object_set_new(o, "failures", json_integer((json_int_t)s->failures));
    json_object_set_new(o, "last_ok_ms_ago",
                        s->last_ok_ms != 0 && now >= s->last_ok_ms
                            ? json_integer((json_int_t)(now - s->last_ok_ms))
                            : json_null());
    json_object_set_new(o, "last_error",
                        s->last_error[0] ? json_string(s->last_error) : json_null());
    pthread_mutex_unlock(&s->lock);
    return o;
}
