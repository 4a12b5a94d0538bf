/*
 * sched.c: the admission queue's order (see sched.h).
 *
 * Owns: each queue's flows (a flow: one tenant's waiters of one class, in
 * one model's queue), from its first waiter to its last; the heaps.
 * Borrows: the items (the admission's waiters) and the tenants (a waiter
 * holds a reference to its tenant, so a tenant outlives its flows).
 * Invariants: a flow is in its class's heap exactly while it has waiters,
 * and in its tenant's list of flows for as long; v[i]'s hidx is i.
 */
#include "serve/sched.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct lg_sched_flow {
    struct lg_sched *s;
    struct lg_tenant *tenant; /* borrowed; NULL: the anonymous flow */
    uint8_t cls;
    uint32_t hidx; /* in s->classes[cls] */
    struct lg_sched_heap items;
    struct lg_sched_flow *tnext, **tprev; /* its tenant's flows */
};

/* ---- heaps -------------------------------------------------------------- */

typedef bool (*heap_less_fn)(const void *a, const void *b);
typedef void (*heap_set_fn)(void *x, uint32_t i);

static void
heap_put(struct lg_sched_heap *h, uint32_t i, void *x, heap_set_fn set)
{
    h->v[i] = x;
    set(x, i);
}

static void
heap_up(struct lg_sched_heap *h, uint32_t i, heap_less_fn less, heap_set_fn set)
{
    void *x = h->v[i];

    while (i > 0) {
        uint32_t p = (i - 1) / 2;

        if (!less(x, h->v[p])) {
            break;
        }
        heap_put(h, i, h->v[p], set);
        i = p;
    }
    heap_put(h, i, x, set);
}

static void
heap_down(struct lg_sched_heap *h, uint32_t i, heap_less_fn less, heap_set_fn set)
{
    void *x = h->v[i];

    for (;;) {
        uint32_t l = 2 * i + 1, m;

        if (l >= h->n) {
            break;
        }
        m = l + 1 < h->n && less(h->v[l + 1], h->v[l]) ? l + 1 : l;
        if (!less(h->v[m], x)) {
            break;
        }
        heap_put(h, i, h->v[m], set);
        i = m;
    }
    heap_put(h, i, x, set);
}

/* x at i changed: to its place, up or down. */
static void
heap_fix(struct lg_sched_heap *h, uint32_t i, heap_less_fn less, heap_set_fn set)
{
    if (i > 0 && less(h->v[i], h->v[(i - 1) / 2])) {
        heap_up(h, i, less, set);
    } else {
        heap_down(h, i, less, set);
    }
}

static void
heap_push(struct lg_sched_heap *h, void *x, heap_less_fn less, heap_set_fn set)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 8;
        h->v = lg_xrealloc(h->v, h->cap * sizeof(*h->v));
    }
    h->v[h->n++] = x;
    heap_up(h, h->n - 1, less, set);
}

static void
heap_remove(struct lg_sched_heap *h, uint32_t i, heap_less_fn less, heap_set_fn set)
{
    void *last = h->v[--h->n];

    if (i == h->n) {
        return;
    }
    h->v[i] = last;
    set(last, i);
    heap_fix(h, i, less, set);
}

/* ---- items and flows ---------------------------------------------------- */

static uint64_t
item_deadline(const struct lg_sched_item *it)
{
    return it->deadline_ns != 0 ? it->deadline_ns : UINT64_MAX;
}

static bool
item_less(const void *a, const void *b)
{
    const struct lg_sched_item *x = a, *y = b;
    uint64_t dx = item_deadline(x), dy = item_deadline(y);

    return dx != dy ? dx < dy : x->seq < y->seq;
}

static void
item_set(void *x, uint32_t i)
{
    ((struct lg_sched_item *)x)->hidx = i;
}

static double
flow_key(const struct lg_sched_flow *f)
{
    return f->tenant != NULL ? f->tenant->key : -INFINITY;
}

static uint64_t
flow_head_seq(const struct lg_sched_flow *f)
{
    return ((const struct lg_sched_item *)f->items.v[0])->seq;
}

/* Least attained service first; between equals, the flow whose head came first. */
static bool
flow_less(const void *a, const void *b)
{
    const struct lg_sched_flow *x = a, *y = b;
    double kx = flow_key(x), ky = flow_key(y);

    if (kx != ky) {
        return kx < ky;
    }
    return flow_head_seq(x) < flow_head_seq(y);
}

static void
flow_set(void *x, uint32_t i)
{
    ((struct lg_sched_flow *)x)->hidx = i;
}

void
lg_sched_init(struct lg_sched *s)
{
    memset(s, 0, sizeof(*s));
}

void
lg_sched_destroy(struct lg_sched *s)
{
    for (int c = 0; c < LG_NCLASSES; c++) {
        LG_BUG_ON(s->classes[c].n != 0);
        free(s->classes[c].v);
    }
    memset(s, 0, sizeof(*s));
}

/* The flow of (tenant, cls) in s, created (with no waiter yet) when there is none. */
static struct lg_sched_flow *
sched_flow(struct lg_sched *s, struct lg_tenant *tenant, int cls)
{
    struct lg_sched_flow *f;

    if (tenant == NULL && s->anon[cls] != NULL) {
        return s->anon[cls];
    }
    for (f = tenant != NULL ? tenant->flows : NULL; f != NULL; f = f->tnext) {
        if (f->s == s && f->cls == cls) {
            return f;
        }
    }
    f = lg_xcalloc(1, sizeof(*f));
    f->s = s;
    f->tenant = tenant;
    f->cls = (uint8_t)cls;
    if (tenant != NULL) {
        lg_sched_key(tenant); /* its first flow: a heap reads the key from now on */
        f->tnext = tenant->flows;
        if (f->tnext != NULL) {
            f->tnext->tprev = &f->tnext;
        }
        tenant->flows = f;
        f->tprev = &tenant->flows;
    } else {
        s->anon[cls] = f;
    }
    return f;
}

static void
sched_flow_free(struct lg_sched_flow *f)
{
    if (f->tenant != NULL) {
        *f->tprev = f->tnext;
        if (f->tnext != NULL) {
            f->tnext->tprev = f->tprev;
        }
    } else {
        f->s->anon[f->cls] = NULL;
    }
    free(f->items.v);
    free(f);
}

void
lg_sched_push(struct lg_sched *s, struct lg_sched_item *it, struct lg_tenant *tenant, bool fair)
{
    int cls = fair ? it->cls : LG_CLASS_DEFAULT;
    struct lg_sched_flow *f = sched_flow(s, fair ? tenant : NULL, cls);
    bool was_empty = f->items.n == 0;

    if (!fair) {
        it->deadline_ns = 0; /* arrival order only */
    }
    it->seq = ++s->seq;
    it->flow = f;
    heap_push(&f->items, it, item_less, item_set);
    s->queued[it->cls]++;
    if (was_empty) {
        heap_push(&s->classes[cls], f, flow_less, flow_set);
    } else if (it->hidx == 0) {
        heap_fix(&s->classes[cls], f->hidx, flow_less, flow_set); /* a new head */
    }
}

void
lg_sched_remove(struct lg_sched *s, struct lg_sched_item *it)
{
    struct lg_sched_flow *f = it->flow;
    struct lg_sched_heap *ch = &s->classes[f->cls];
    bool was_head = it->hidx == 0;

    LG_BUG_ON(f == NULL || f->s != s);
    heap_remove(&f->items, it->hidx, item_less, item_set);
    it->flow = NULL;
    s->queued[it->cls]--;
    if (f->items.n == 0) {
        heap_remove(ch, f->hidx, flow_less, flow_set);
        sched_flow_free(f);
    } else if (was_head) {
        heap_fix(ch, f->hidx, flow_less, flow_set);
    }
}

struct lg_sched_item *
lg_sched_head(const struct lg_sched *s)
{
    for (int c = LG_NCLASSES - 1; c >= 0; c--) {
        if (s->classes[c].n > 0) {
            const struct lg_sched_flow *f = s->classes[c].v[0];

            return f->items.v[0];
        }
    }
    return NULL;
}

uint32_t
lg_sched_count(const struct lg_sched *s)
{
    uint32_t n = 0;

    for (int c = 0; c < LG_NCLASSES; c++) {
        n += s->queued[c];
    }
    return n;
}

uint32_t
lg_sched_above(const struct lg_sched *s, int cls)
{
    uint32_t n = 0;

    for (int c = cls + 1; c < LG_NCLASSES; c++) {
        n += s->queued[c];
    }
    return n;
}

/* ---- attained service --------------------------------------------------- */

double
lg_sched_service(const struct lg_tenant *tn, double now_s, double half_life_s)
{
    if (tn->service <= 0) {
        return 0;
    }
    return tn->service * exp2(-(now_s - tn->service_t) / half_life_s);
}

double
lg_sched_key(struct lg_tenant *tn)
{
    if (tn->key_h > 0) { /* as lg_sched_charge would have: the same operands */
        tn->key = log2(tn->service) + tn->service_t / tn->key_h;
        tn->key_h = 0;
    }
    return tn->key;
}

void
lg_sched_charge(struct lg_tenant *tn, double tokens, double now_s, double half_life_s)
{
    if (!(tokens > 0) || !(half_life_s > 0)) {
        return;
    }
    tn->service = lg_sched_service(tn, now_s, half_life_s) + tokens;
    tn->service_t = now_s;
    if (tn->flows == NULL) {
        tn->key_h = half_life_s; /* nothing orders it now: its first flow computes it */
        return;
    }
    tn->key_h = 0;
    /* every tenant decays alike: log2(service) + t / half-life orders them for good */
    tn->key = log2(tn->service) + now_s / half_life_s;
    for (struct lg_sched_flow *f = tn->flows; f != NULL; f = f->tnext) {
        heap_fix(&f->s->classes[f->cls], f->hidx, flow_less, flow_set);
    }
}
