/*
 * tenant.h: who a request counts for, and at which priority.
 *
 * A tenant is what fairness shares the fleet between (sched.c): the first
 * of tenants.headers present on the request names it (a team, a project,
 * an agent's session), else the request's API key's name; a request with
 * neither counts for the tenant "anonymous". The table of tenants is
 * bounded (tenants.max): an idle tenant is forgotten after
 * tenants.idle_expiry, and while the table is full of live ones the next
 * names share the tenant "other".
 *
 * A request's priority class (enum lg_prio_class) comes from its key's
 * `class` (default "default"), or from the priority header, up to its key's
 * `max_class` (without a key: up to "interactive"); a header asking for more
 * is clamped to max_class (logged) or refused 403, as
 * scheduling.over_max_class says. Its TTFT target comes from the header
 * (scheduling.ttft_header), else its key's ttft_target_ms, else its class's.
 */
#ifndef LG_TENANT_H
#define LG_TENANT_H

#include <pthread.h>

#include "base/config_types.h"
#include "base/lg_core.h"

struct lg_admission_waiter;
struct lg_budget;
struct lg_budget_limits;
struct lg_hdrs;
struct lg_sched_flow;

#define LG_TENANT_NAME_MAX 64

/* Why a request was refused by the scheduler (the access log's "shed"). */
enum lg_shed {
    LG_SHED_NONE = 0,
    LG_SHED_SATURATED,      /* a sheddable class, and no backend had room */
    LG_SHED_QUEUE_DEADLINE, /* waited past its class's queue deadline */
    LG_SHED_TTFT_TARGET,    /* a sheddable class, and no backend is predicted to meet its target */
    LG_SHED_NREASONS
};

/* The log's name of a reason ("saturated"); NULL for LG_SHED_NONE. */
const char *lg_shed_name(enum lg_shed why);

/* A tenant; its counters are atomic, `key` and `flows` the scheduler's (under its lock). */
struct lg_tenant {
    char name[LG_TENANT_NAME_MAX + 1];
    uint32_t refcnt;        /* atomic; taken under the table's lock, given back without
                               it; the table does not count */
    uint64_t last_ns;       /* last request (under the table's lock) */
    struct lg_tenant *next; /* hash chain */
    /* the scheduler's (sched.c), under the admission queue's lock */
    double service;              /* attained service in tokens, as of service_t */
    double service_t;            /* when (seconds), for the half-life */
    double key;                  /* log2(service) + service_t / half-life: what orders
                                    tenants (their decay does not change its order) */
    double key_h;                /* > 0: key is not computed yet, for this half-life
                                    (lg_sched_key: only a tenant with flows needs it) */
    struct lg_sched_flow *flows; /* its flows with waiters */
    struct lg_budget *account;   /* its token budget's (tenants.budget), made on first use
                                    under the table's lock; NULL: none yet */
    /* counters, atomic, by class */
    uint64_t admitted[LG_NCLASSES];
    uint64_t shed[LG_NCLASSES];
    uint64_t tokens[LG_NCLASSES];
    uint64_t wait_ms[LG_NCLASSES]; /* queue wait, summed over admitted requests */
    uint32_t queued[LG_NCLASSES];
};

struct lg_tenants;

/* A table for conf (conf read again by lg_tenants_configure() on a reload). */
struct lg_tenants *lg_tenants_new(const struct lg_tenants_conf *conf);
void lg_tenants_configure(struct lg_tenants *t, const struct lg_tenants_conf *conf);
/* After every reference is given back. NULL is fine. */
void lg_tenants_free(struct lg_tenants *t);

/*
 * One reference to the tenant of that name (created; "other" when the table
 * is full); now_ns (monotonic, a moment ago will do) stamps its last use
 * and dates the sweep of idle ones (one used after it is not idle).
 */
struct lg_tenant *lg_tenants_get(struct lg_tenants *t, const char *name, size_t len,
                                 uint64_t now_ns);
/* Gives back a reference; NULL is fine. */
void lg_tenants_put(struct lg_tenants *t, struct lg_tenant *tn);
/*
 * The token budget of a tenant named by a header (tenants.budget, the same
 * limits for each): its account, with a reference for the caller, and the
 * limits in *lim; NULL when tenants.budget sets none.
 */
struct lg_budget *lg_tenants_budget(struct lg_tenants *t, struct lg_tenant *tn,
                                    struct lg_budget_limits *lim);

/* Tenants remembered now (the shared "other" not counted). */
size_t lg_tenants_count(struct lg_tenants *t);

typedef void (*lg_tenants_fn)(struct lg_tenant *tn, void *arg);
/* Calls fn for each tenant, "other" last (under the table's lock: fn must not call in). */
void lg_tenants_foreach(struct lg_tenants *t, lg_tenants_fn fn, void *arg);

/* What a key says of scheduling (keys file: class, max_class, ttft_target_ms). */
struct lg_key_sched {
    uint8_t cls;             /* enum lg_prio_class */
    uint8_t max_class;       /* the highest a header may ask for */
    uint32_t ttft_target_ms; /* 0: its class's */
};

/* A request's scheduling state (struct lg_request.sched). */
struct lg_req_sched {
    struct lg_admission_waiter *waiter; /* owned by admission.c while queued */
    struct lg_tenant *tenant;           /* one reference; NULL: no tenant */
    uint8_t cls;                        /* enum lg_prio_class */
    uint8_t shed;                       /* enum lg_shed: why it was refused */
    int8_t asked;                       /* the class its header asked for above its key's
                                           max_class (clamped to it), else -1 */
    bool charged;                       /* its prompt counts in its tenant's service */
    bool by_header;                     /* its tenant was named by a tenants.headers header */
    uint32_t ttft_target_ms;            /* 0: none */
    uint64_t deadline_ns;               /* monotonic: the first token's target (0: none) */
    uint64_t queue_ns;                  /* time spent in the admission queue */
    uint64_t prompt_tokens;             /* the estimate charged at dispatch */
};

/*
 * Parses a class name ("batch", "default", "interactive", "system", any
 * case); returns the class, or -1.
 */
int lg_class_parse(const char *s, size_t len);
/* The class's name. */
const char *lg_class_name(int cls);

/*
 * Parses a TTFT target header value: a whole number of milliseconds, 1 to
 * 3600000, optional spaces around. Returns the number, or 0 when invalid.
 */
uint32_t lg_tenant_parse_ms(const char *s, size_t len);

/*
 * Is s[0..len) a tenant name (1 to LG_TENANT_NAME_MAX letters, digits or
 * ".-_:@/+=")?
 */
bool lg_tenant_name_ok(const char *s, size_t len);

/* Why lg_tenant_resolve() refused a request. */
struct lg_tenant_refusal {
    int status;        /* 400 or 403 */
    const char *code;  /* static */
    const char *param; /* static: the header at fault */
    char message[256];
};

/*
 * Fills *out from the request's head, its key (key_name NULL: none; ks its
 * scheduling fields) and the configuration: its tenant (a reference from t),
 * its class, its TTFT target and deadline (from t_start). Returns LG_OK, or
 * LG_EINVAL with *no filled: a header that is not valid (400) or a class
 * above max_class under "refuse" (403).
 */
int lg_tenant_resolve(struct lg_tenants *t, const struct lg_config *conf,
                      const struct lg_hdrs *hdrs, const char *key_name,
                      const struct lg_key_sched *ks, uint64_t t_start, struct lg_req_sched *out,
                      struct lg_tenant_refusal *no);

/* Gives back what *s holds (its tenant's reference); idempotent. */
void lg_tenant_release(struct lg_tenants *t, struct lg_req_sched *s);

#endif /* LG_TENANT_H */
