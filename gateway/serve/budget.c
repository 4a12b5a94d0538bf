/*
 * budget.c: token budgets' accounts: reserve, settle, windows that roll
 * over, and the shares a store syncs (see budget.h).
 *
 * Owns: every struct lg_budget (refcounted: its key, in each keys table
 * that names it) and the process's list of them (`budget_list`, under
 * `budget_list_lock`; an account is listed from its creation to its last
 * reference).
 * Invariants: an account's counters change only under its own lock; lock
 * order is the list's, then an account's; a window's counters are those of
 * window `id` only (rolled over lazily, at the first use in a later one).
 */
#include "serve/budget.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#define BUDGET_MINUTE_MS 60000ull
#define BUDGET_DAY_MS    86400000ull
#define BUDGET_UNSENT    UINT64_MAX /* `sent`: not known to the store */

struct budget_window {
    uint64_t id;     /* window number since the epoch */
    uint64_t used;   /* charged by this gateway in it */
    uint64_t others; /* the other gateways' share, as last learned */
    uint64_t sent;   /* our share as last written to the store (BUDGET_UNSENT: unknown) */
};

struct lg_budget {
    int refcnt; /* guarded by budget_list_lock */
    pthread_mutex_t lock;
    char name[LG_BUDGET_NAME_MAX + 1];
    uint64_t reserved; /* by requests running here, in every window */
    struct budget_window win[LG_BUDGET_NPERIODS];
    uint64_t touched_ms;    /* last reservation (wall clock) */
    uint64_t charged_total; /* since creation */
    uint64_t refused_total;
    TAILQ_ENTRY(lg_budget) link; /* budget_list */
};

static TAILQ_HEAD(, lg_budget) budget_list = TAILQ_HEAD_INITIALIZER(budget_list);
static pthread_mutex_t budget_list_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t budget_nlisted;

static const uint64_t budget_len_ms[LG_BUDGET_NPERIODS] = {
    [LG_BUDGET_MINUTE] = BUDGET_MINUTE_MS,
    [LG_BUDGET_DAY] = BUDGET_DAY_MS,
};

uint64_t
lg_budget_window(enum lg_budget_period p, uint64_t now_ms, uint64_t *end_ms)
{
    uint64_t id = now_ms / budget_len_ms[p];

    if (end_ms != NULL) {
        *end_ms = (id + 1) * budget_len_ms[p];
    }
    return id;
}

struct lg_budget *
lg_budget_new(const char *name)
{
    struct lg_budget *b = lg_xcalloc(1, sizeof(*b));

    b->refcnt = 1;
    pthread_mutex_init(&b->lock, NULL);
    snprintf(b->name, sizeof(b->name), "%s", name);
    for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
        b->win[p].sent = BUDGET_UNSENT;
    }
    pthread_mutex_lock(&budget_list_lock);
    TAILQ_INSERT_TAIL(&budget_list, b, link);
    budget_nlisted++;
    pthread_mutex_unlock(&budget_list_lock);
    return b;
}

struct lg_budget *
lg_budget_ref(struct lg_budget *b)
{
    pthread_mutex_lock(&budget_list_lock);
    b->refcnt++;
    pthread_mutex_unlock(&budget_list_lock);
    return b;
}

/* The list's lock guards the count, so that collecting (which takes
 * references under it) never meets an account on its way out. */
void
lg_budget_unref(struct lg_budget *b)
{
    bool last;

    if (b == NULL) {
        return;
    }
    pthread_mutex_lock(&budget_list_lock);
    last = --b->refcnt == 0;
    if (last) {
        TAILQ_REMOVE(&budget_list, b, link);
        budget_nlisted--;
    }
    pthread_mutex_unlock(&budget_list_lock);
    if (last) {
        pthread_mutex_destroy(&b->lock);
        free(b);
    }
}

const char *
lg_budget_name(const struct lg_budget *b)
{
    return b->name;
}

size_t
lg_budget_count(void)
{
    size_t n;

    pthread_mutex_lock(&budget_list_lock);
    n = budget_nlisted;
    pthread_mutex_unlock(&budget_list_lock);
    return n;
}

/* Windows that ended start again empty (under b->lock). */
static void
budget_roll(struct lg_budget *b, uint64_t now_ms)
{
    for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
        uint64_t id = lg_budget_window((enum lg_budget_period)p, now_ms, NULL);

        if (b->win[p].id != id) {
            b->win[p].id = id;
            b->win[p].used = 0;
            b->win[p].others = 0;
            b->win[p].sent = BUDGET_UNSENT;
        }
    }
}

static uint64_t
budget_sat_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

/* Period p's view of a reservation of `tokens` (under b->lock, windows rolled). */
static void
budget_view(const struct lg_budget *b, int p, uint64_t limit, uint64_t tokens, uint64_t now_ms,
            struct lg_budget_view *v)
{
    uint64_t end, settled, have;

    lg_budget_window((enum lg_budget_period)p, now_ms, &end);
    settled = budget_sat_add(b->win[p].used, b->win[p].others);
    have = budget_sat_add(settled, b->reserved);
    *v = (struct lg_budget_view){
        .period = (uint8_t)p,
        .limit = limit,
        .used = have,
        .requested = tokens,
        .reset_ms = end - now_ms,
    };
    if (have <= limit && tokens <= limit - have) {
        v->remaining = limit - have - tokens;
    } else if (settled <= limit && tokens <= limit - settled) {
        /* only running requests hold the room: some comes back when they end */
        v->retry_ms = LG_MIN(UINT64_C(1000), end - now_ms);
    } else {
        v->retry_ms = end - now_ms;
    }
}

int
lg_budget_reserve(struct lg_budget *b, const struct lg_budget_limits *lim, uint64_t tokens,
                  uint64_t now_ms, struct lg_budget_view *v)
{
    struct lg_budget_view one;
    int rc = LG_OK;
    bool any = false;

    memset(v, 0, sizeof(*v));
    pthread_mutex_lock(&b->lock);
    budget_roll(b, now_ms);
    for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
        if (lim->tokens[p] == 0) {
            continue;
        }
        budget_view(b, p, lim->tokens[p], tokens, now_ms, &one);
        if (tokens > lim->tokens[p]) {
            *v = one; /* never fits: says so whatever the other period says */
            rc = LG_EINVAL;
            break;
        }
        if (one.retry_ms > 0) {
            if (rc == LG_OK || one.retry_ms > v->retry_ms) {
                *v = one; /* both must have room: the later one is the answer */
            }
            rc = LG_EBUSY;
        } else if (rc == LG_OK && (!any || one.remaining < v->remaining)) {
            *v = one;
        }
        any = true;
    }
    if (rc == LG_OK) {
        b->reserved += tokens;
        b->touched_ms = now_ms;
    } else {
        b->refused_total++;
    }
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void
lg_budget_settle(struct lg_budget *b, uint64_t reserved, uint64_t used, uint64_t now_ms)
{
    pthread_mutex_lock(&b->lock);
    budget_roll(b, now_ms);
    b->reserved -= LG_MIN(reserved, b->reserved);
    for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
        b->win[p].used = budget_sat_add(b->win[p].used, used);
    }
    b->charged_total = budget_sat_add(b->charged_total, used);
    pthread_mutex_unlock(&b->lock);
}

void
lg_budget_read(struct lg_budget *b, uint64_t now_ms, struct lg_budget_state *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&b->lock);
    budget_roll(b, now_ms);
    out->reserved = b->reserved;
    for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
        uint64_t end;

        lg_budget_window((enum lg_budget_period)p, now_ms, &end);
        out->used[p] = b->win[p].used;
        out->others[p] = b->win[p].others;
        out->reset_ms[p] = end - now_ms;
    }
    out->charged_total = b->charged_total;
    out->refused_total = b->refused_total;
    pthread_mutex_unlock(&b->lock);
}

/* ---- sharing through a store ------------------------------------------------------------ */

size_t
lg_budget_collect(uint64_t now_ms, uint64_t active_ms, struct lg_budget_share **out)
{
    struct lg_budget_share *s = NULL;
    struct lg_budget *b;
    size_t n = 0, cap = 0;

    pthread_mutex_lock(&budget_list_lock);
    TAILQ_FOREACH (b, &budget_list, link) {
        struct lg_budget_share one = { .b = b };
        bool want;

        pthread_mutex_lock(&b->lock);
        budget_roll(b, now_ms);
        want = b->touched_ms + active_ms >= now_ms;
        for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
            one.window[p] = lg_budget_window((enum lg_budget_period)p, now_ms, &one.end_ms[p]);
            one.mine[p] = budget_sat_add(b->win[p].used, b->reserved);
            want = want || b->win[p].sent != one.mine[p];
        }
        if (want) {
            for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
                b->win[p].sent = one.mine[p]; /* lg_budget_unsent() if it fails */
            }
        }
        pthread_mutex_unlock(&b->lock);
        if (!want) {
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            s = lg_xrealloc(s, cap * sizeof(*s));
        }
        b->refcnt++; /* under the list's lock */
        s[n++] = one;
    }
    pthread_mutex_unlock(&budget_list_lock);
    *out = s;
    return n;
}

void
lg_budget_learn(const struct lg_budget_share *s, const uint64_t total[LG_BUDGET_NPERIODS])
{
    struct lg_budget *b = s->b;

    pthread_mutex_lock(&b->lock);
    for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
        if (b->win[p].id == s->window[p]) {
            b->win[p].others = total[p] > s->mine[p] ? total[p] - s->mine[p] : 0;
        }
    }
    pthread_mutex_unlock(&b->lock);
}

void
lg_budget_unsent(const struct lg_budget_share *s)
{
    struct lg_budget *b = s->b;

    pthread_mutex_lock(&b->lock);
    for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
        if (b->win[p].id == s->window[p]) {
            b->win[p].sent = BUDGET_UNSENT;
        }
    }
    pthread_mutex_unlock(&b->lock);
}

void
lg_budget_unsent_all(void)
{
    struct lg_budget *b;

    pthread_mutex_lock(&budget_list_lock);
    TAILQ_FOREACH (b, &budget_list, link) {
        pthread_mutex_lock(&b->lock);
        for (int p = 0; p < LG_BUDGET_NPERIODS; p++) {
            b->win[p].sent = BUDGET_UNSENT;
        }
        pthread_mutex_unlock(&b->lock);
    }
    pthread_mutex_unlock(&budget_list_lock);
}

void
lg_budget_shares_free(struct lg_budget_share *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        lg_budget_unref(s[i].b);
    }
    free(s);
}
