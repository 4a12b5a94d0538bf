/*
 * discovery.c: DNS discovery of backends (see discovery.h for the design).
 *
 * Owns: the evdns base, one struct disc_target per (dns, port) followed, with
 * its timer, its lookups in flight and its addresses; the event that
 * coalesces changes into one callback. Borrows: the control event base.
 * Invariants: everything here runs on the control base's thread; a target's
 * `addrs` is sorted and replaced only by a complete round (A and AAAA both
 * answered), never by a failed one.
 */
#include "fleet/discovery.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <jansson.h>

#include "base/config.h"

#define DISC_ATTEMPTS 2 /* tries per query before a round counts as failed */

struct disc_target;

/*
 * One lookup in flight. evdns may run its callback after a cancel or after
 * the resolver is freed, so a query outlives its target: the target lets go
 * (t = NULL) and the callback frees it.
 */
struct disc_query {
    struct lg_discovery *d; /* borrowed: the owner, which outlives every callback */
    struct disc_target *t;  /* borrowed: the target asking; NULL once orphaned */
    struct evdns_request *req;
    TAILQ_ENTRY(disc_query) link; /* the owner's list of queries in flight */
};
TAILQ_HEAD(disc_query_list, disc_query);

struct disc_target {
    struct lg_discovery *d; /* borrowed: the owner */
    char *dns;              /* owned */
    uint32_t port;
    uint64_t interval_ms;
    struct sockaddr_storage *addrs; /* owned, sorted: the addresses in force */
    size_t n;
    size_t capaddrs;
    bool answered;                 /* a first round ended (answer or failure) */
    bool rounding;                 /* a round is in progress */
    struct disc_query *q[2];       /* A, AAAA in flight; NULL when answered */
    struct sockaddr_storage *next; /* owned: addresses gathered by this round */
    size_t nnext;
    size_t capnext;
    int fail;            /* first DNS_ERR_* that fails this round; 0 = none */
    struct event *timer; /* owned: starts the next round */
    uint64_t warn_ns;    /* rate limit of the failure warning */
};

struct lg_discovery {
    struct event_base *base; /* borrowed */
    struct evdns_base *dns;  /* owned; NULL until configured */
    char *nameserver;        /* owned copy of discovery.nameserver (NULL: resolv.conf) */
    uint64_t timeout_ms;
    struct disc_target **targets; /* owned */
    size_t ntargets;
    struct disc_query_list queries; /* owned: every query whose callback is still due */
    struct event *changed_ev;       /* owned: runs `changed` once for many changes */
    struct event *wait_ev;          /* owned: deadline of lg_discovery_wait() */
    lg_discovery_changed_fn changed;
    void *arg;
};

/* ---- addresses ------------------------------------------------------------ */

/* Orders IPv4 before IPv6, then by address bytes (ports are all equal). */
static int
disc_addr_cmp(const void *pa, const void *pb)
{
    const struct sockaddr_storage *a = pa;
    const struct sockaddr_storage *b = pb;

    if (a->ss_family != b->ss_family) {
        return a->ss_family == AF_INET ? -1 : 1;
    }
    if (a->ss_family == AF_INET) {
        return memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                      &((const struct sockaddr_in *)b)->sin_addr, sizeof(struct in_addr));
    }
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
}

static bool
disc_contains(const struct sockaddr_storage *v, size_t n, const struct sockaddr_storage *a)
{
    return n > 0 && bsearch(a, v, n, sizeof(*v), disc_addr_cmp) != NULL;
}

/* ---- expansion -------------------------------------------------------------- */

/* One concrete entry: the template's keys, then a name and a URL of its own. */
static json_t *
disc_entry(json_t *tmpl, const char *name, const struct sockaddr_storage *ss)
{
    json_t *e = json_copy(tmpl);
    char addr[INET6_ADDRSTRLEN + 16];
    char buf[256];

    lg_sockaddr_format(ss, addr, sizeof(addr));
    json_object_del(e, "discover");
    snprintf(buf, sizeof(buf), "%s@%s", name, addr);
    json_object_set_new(e, "name", json_string(buf));
    snprintf(buf, sizeof(buf), "http://%s", addr);
    json_object_set_new(e, "url", json_string(buf));
    return e;
}

static const struct lg_discovery_set *
disc_find_set(const struct lg_discovery_set *sets, size_t nsets, const char *dns, uint32_t port)
{
    for (size_t i = 0; i < nsets; i++) {
        if (sets[i].port == port && strcmp(sets[i].dns, dns) == 0) {
            return &sets[i];
        }
    }
    return NULL;
}

/* The expanded document was loaded without resolving names; copy what base
 * resolved (the same entries, by name or position). */
static void
disc_copy_resolved(const struct lg_config *base, struct lg_config *c)
{
    for (size_t i = 0; i < c->nbackends; i++) {
        const struct lg_backend_conf *bc = lg_config_backend(base, c->backends[i].name);

        if (c->backends[i].addrlen == 0 && bc != NULL) {
            c->backends[i].addr = bc->addr;
            c->backends[i].addrlen = bc->addrlen;
        }
    }
    for (size_t i = 0; i < c->nlisten && i < base->nlisten; i++) {
        if (c->listen[i].addrlen == 0) {
            c->listen[i].addr = base->listen[i].addr;
            c->listen[i].addrlen = base->listen[i].addrlen;
        }
    }
    if (c->admin.listen != NULL && c->admin.addrlen == 0) {
        c->admin.addr = base->admin.addr;
        c->admin.addrlen = base->admin.addrlen;
    }
    if (c->discovery.nameserver != NULL && c->discovery.addrlen == 0) {
        c->discovery.addr = base->discovery.addr;
        c->discovery.addrlen = base->discovery.addrlen;
    }
}

int
lg_discovery_expand_with(struct lg_config *base, const struct lg_discovery_set *sets, size_t nsets,
                         struct lg_config **out, struct lg_config_errors *errs)
{
    json_t *root;
    json_t *in;
    json_t *list;
    json_t *e;
    size_t i;
    char *text;
    int rc;

    if (base->ntemplates == 0) {
        *out = lg_config_ref(base);
        return LG_OK;
    }
    root = json_copy(base->root);
    in = json_object_get(base->root, "backends");
    list = json_array();
    json_array_foreach (in, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const struct lg_discovery_set *set = NULL;

        json_array_append(list, e);
        for (size_t k = 0; name != NULL && k < base->ntemplates; k++) {
            if (strcmp(base->templates[k].name, name) == 0) {
                set = disc_find_set(sets, nsets, base->templates[k].discover.dns,
                                    base->templates[k].discover.port);
                break;
            }
        }
        for (size_t k = 0; set != NULL && k < set->n; k++) {
            json_array_append_new(list, disc_entry(e, name, &set->addrs[k]));
        }
    }
    json_object_set_new(root, "backends", list);
    text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (text == NULL) {
        return LG_ENOMEM;
    }
    rc = lg_config_load_buffer_flags(text, strlen(text), base->path,
                                     LG_CONFIG_F_NO_RESOLVE | LG_CONFIG_F_EXPANDED, out, errs);
    free(text);
    if (rc == LG_OK) {
        disc_copy_resolved(base, *out);
        /* errors found later are the operator's file's, not this expansion's */
        free((*out)->text);
        (*out)->text = base->text != NULL ? lg_xstrdup(base->text) : NULL;
        (*out)->text_len = base->text_len;
    }
    return rc;
}

int
lg_discovery_expand(const struct lg_discovery *d, struct lg_config *base, struct lg_config **out)
{
    struct lg_discovery_set *sets = lg_xcalloc(d->ntargets ? d->ntargets : 1, sizeof(*sets));
    struct lg_config_errors errs = { 0 };
    int rc;

    for (size_t i = 0; i < d->ntargets; i++) {
        sets[i] = (struct lg_discovery_set){ .dns = d->targets[i]->dns,
                                             .port = d->targets[i]->port,
                                             .addrs = d->targets[i]->addrs,
                                             .n = d->targets[i]->n };
    }
    rc = lg_discovery_expand_with(base, sets, d->ntargets, out, &errs);
    if (rc != LG_OK) {
        for (size_t i = 0; i < errs.n; i++) {
            LG_ERROR("discovery: expanding the configuration: %s", errs.msgs[i]);
        }
        lg_config_errors_free(&errs);
    }
    free(sets);
    return rc;
}

/* ---- lookups ---------------------------------------------------------------- */

static void disc_round(struct disc_target *t);

static void
disc_signal_change(struct lg_discovery *d)
{
    event_active(d->changed_ev, EV_TIMEOUT, 1);
}

static void
disc_on_changed(evutil_socket_t fd, short what, void *arg)
{
    struct lg_discovery *d = arg;

    (void)fd;
    (void)what;
    if (d->changed != NULL) {
        d->changed(d->arg);
    }
}

static void
disc_log_diff(const struct disc_target *t)
{
    char line[1024];
    char a[INET6_ADDRSTRLEN + 16];
    size_t off = 0;

    line[0] = '\0';
    for (size_t i = 0; i < t->nnext && off < sizeof(line) - 64; i++) {
        if (!disc_contains(t->addrs, t->n, &t->next[i])) {
            lg_sockaddr_format(&t->next[i], a, sizeof(a));
            off += (size_t)snprintf(line + off, sizeof(line) - off, " +%s", a);
        }
    }
    for (size_t i = 0; i < t->n && off < sizeof(line) - 64; i++) {
        if (!disc_contains(t->next, t->nnext, &t->addrs[i])) {
            lg_sockaddr_format(&t->addrs[i], a, sizeof(a));
            off += (size_t)snprintf(line + off, sizeof(line) - off, " -%s", a);
        }
    }
    LG_INFO("discovery: %s port %u: %zu address%s:%s", t->dns, t->port, t->nnext,
            t->nnext == 1 ? "" : "es", line);
}

static void
disc_round_done(struct disc_target *t)
{
    struct lg_discovery *d = t->d;
    struct timeval tv = { (time_t)(t->interval_ms / 1000),
                          (suseconds_t)((t->interval_ms % 1000) * 1000) };
    bool first = !t->answered;
    bool same;

    t->rounding = false;
    t->answered = true;
    if (t->fail != 0) {
        if (first || lg_log_ratelimit(&t->warn_ns, 30 * LG_NS_PER_S)) {
            /* evdns has no TCP fallback: a UDP answer holds about 30 A (17 AAAA) records */
            LG_WARN("discovery: %s: lookup failed: %s%s; keeping %zu address%s", t->dns,
                    evdns_err_to_string(t->fail),
                    t->fail == DNS_ERR_TRUNCATED ? " (more records than one UDP answer holds: "
                                                   "split the name)"
                                                 : "",
                    t->n, t->n == 1 ? "" : "es");
        }
    } else {
        if (t->nnext > 1) {
            qsort(t->next, t->nnext, sizeof(*t->next), disc_addr_cmp);
        }
        for (size_t i = 1; i < t->nnext; i++) {
            if (disc_addr_cmp(&t->next[i - 1], &t->next[i]) == 0) {
                memmove(&t->next[i], &t->next[i + 1], (t->nnext - i - 1) * sizeof(*t->next));
                t->nnext--;
                i--;
            }
        }
        same = t->nnext == t->n;
        for (size_t i = 0; same && i < t->n; i++) {
            same = disc_addr_cmp(&t->next[i], &t->addrs[i]) == 0;
        }
        if (!same || first) {
            disc_log_diff(t);
        }
        if (!same) {
            struct sockaddr_storage *old = t->addrs;
            size_t cap = t->capaddrs;

            t->addrs = t->next; /* the two arrays trade places */
            t->capaddrs = t->capnext;
            t->n = t->nnext;
            t->next = old;
            t->capnext = cap;
        }
        if (!same || first) {
            disc_signal_change(d);
        }
    }
    if (first && t->fail != 0) {
        disc_signal_change(d); /* a waiting reload goes on without this name */
    }
    t->nnext = 0;
    evtimer_add(t->timer, &tv);
}

static void
disc_add_next(struct disc_target *t, int family, const void *addr)
{
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)t->port);
        memcpy(&s4->sin_addr, addr, sizeof(s4->sin_addr));
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)t->port);
        memcpy(&s6->sin6_addr, addr, sizeof(s6->sin6_addr));
    }
    if (t->nnext == t->capnext) {
        t->capnext = t->capnext ? t->capnext * 2 : 8;
        t->next = lg_xrealloc(t->next, t->capnext * sizeof(*t->next));
    }
    t->next[t->nnext++] = ss;
}

static void
disc_on_answer(int result, char type, int count, int ttl, void *addresses, void *arg)
{
    struct disc_query *q = arg;
    struct disc_target *t;

    (void)ttl;
    t = q->t; /* libevent 2.1 calls once per query (2.2 adds a DNS_CNAME call after) */
    if (t != NULL) {
        t->q[t->q[0] == q ? 0 : 1] = NULL;
    }
    TAILQ_REMOVE(&q->d->queries, q, link);
    free(q);
    if (t == NULL || result == DNS_ERR_SHUTDOWN || result == DNS_ERR_CANCEL) {
        return; /* orphaned: the target or the resolver went away */
    }
    if (result == DNS_ERR_NONE) {
        for (int i = 0; i < count; i++) {
            if (type == DNS_IPv4_A) {
                disc_add_next(t, AF_INET, (const char *)addresses + 4 * i);
            } else if (type == DNS_IPv6_AAAA) {
                disc_add_next(t, AF_INET6, (const char *)addresses + 16 * i);
            }
        }
    } else if (result != DNS_ERR_NOTEXIST && result != DNS_ERR_NODATA && t->fail == 0) {
        t->fail = result; /* NXDOMAIN and no data are answers: no address */
    }
    if (t->q[0] == NULL && t->q[1] == NULL && t->rounding) {
        disc_round_done(t);
    }
}

static struct disc_query *
disc_query_start(struct disc_target *t, int family)
{
    struct lg_discovery *d = t->d;
    struct disc_query *q = lg_xcalloc(1, sizeof(*q));

    q->d = d;
    q->t = t;
    TAILQ_INSERT_TAIL(&d->queries, q, link);
    /* evdns runs callbacks from the loop (deferred), never inside this call */
    if (family == AF_INET) {
        q->req = evdns_base_resolve_ipv4(d->dns, t->dns, 0, disc_on_answer, q);
    } else {
        q->req = evdns_base_resolve_ipv6(d->dns, t->dns, 0, disc_on_answer, q);
    }
    if (q->req == NULL) {
        TAILQ_REMOVE(&d->queries, q, link);
        free(q);
        return NULL;
    }
    return q;
}

/* Lets go of a query: its callback, when it comes, frees it. */
static void
disc_query_orphan(struct lg_discovery *d, struct disc_query *q)
{
    q->t = NULL;
    if (d->dns != NULL) {
        evdns_cancel_request(d->dns, q->req);
    }
}

static void
disc_round(struct disc_target *t)
{
    struct lg_discovery *d = t->d;

    if (t->rounding || d->dns == NULL) {
        return;
    }
    evtimer_del(t->timer);
    t->rounding = true;
    t->fail = 0;
    t->nnext = 0;
    t->q[0] = disc_query_start(t, AF_INET);
    t->q[1] = disc_query_start(t, AF_INET6);
    if (t->q[0] == NULL || t->q[1] == NULL) {
        t->fail = DNS_ERR_UNKNOWN;
    }
    if (t->q[0] == NULL && t->q[1] == NULL) {
        disc_round_done(t);
    }
}

static void
disc_on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    disc_round(arg);
}

/* ---- targets and the resolver ------------------------------------------------ */

static void
disc_target_free(struct disc_target *t)
{
    for (int i = 0; i < 2; i++) {
        if (t->q[i] != NULL) {
            disc_query_orphan(t->d, t->q[i]);
            t->q[i] = NULL;
        }
    }
    event_free(t->timer);
    free(t->dns);
    free(t->addrs);
    free(t->next);
    free(t);
}

static struct disc_target *
disc_find(const struct lg_discovery *d, const char *dns, uint32_t port)
{
    for (size_t i = 0; i < d->ntargets; i++) {
        if (d->targets[i]->port == port && strcmp(d->targets[i]->dns, dns) == 0) {
            return d->targets[i];
        }
    }
    return NULL;
}

/* Cancels every lookup in flight (their rounds restart on the new resolver). */
static void
disc_drop_resolver(struct lg_discovery *d)
{
    for (size_t i = 0; i < d->ntargets; i++) {
        struct disc_target *t = d->targets[i];

        for (int k = 0; k < 2; k++) {
            if (t->q[k] != NULL) {
                disc_query_orphan(d, t->q[k]);
                t->q[k] = NULL;
            }
        }
        t->rounding = false;
    }
    if (d->dns != NULL) {
        /* pending callbacks run with DNS_ERR_SHUTDOWN and free their queries */
        evdns_base_free(d->dns, 1);
        d->dns = NULL;
    }
}

static int
disc_make_resolver(struct lg_discovery *d, const struct lg_discovery_conf *dc)
{
    char buf[32];

    d->dns = evdns_base_new(d->base, 0);
    if (d->dns == NULL) {
        LG_ERROR("discovery: cannot create a DNS resolver");
        return LG_ENOMEM;
    }
    if (dc->nameserver != NULL) {
        if (evdns_base_nameserver_sockaddr_add(d->dns, (const struct sockaddr *)&dc->addr,
                                               dc->addrlen, 0)
            != 0) {
            LG_ERROR("discovery: cannot use nameserver %s", dc->nameserver);
            return LG_EINVAL;
        }
    } else {
        /* search domains and nameservers as the system has them; not /etc/hosts */
        int rc = evdns_base_resolv_conf_parse(
            d->dns, DNS_OPTION_SEARCH | DNS_OPTION_NAMESERVERS | DNS_OPTION_MISC,
            "/etc/resolv.conf");

        if (rc != 0 || evdns_base_count_nameservers(d->dns) == 0) {
            LG_WARN("discovery: /etc/resolv.conf names no usable nameserver (error %d); set "
                    "discovery.nameserver",
                    rc);
        }
    }
    snprintf(buf, sizeof(buf), "%.3f", (double)dc->timeout_ms / 1000.0);
    evdns_base_set_option(d->dns, "timeout:", buf);
    snprintf(buf, sizeof(buf), "%d", DISC_ATTEMPTS);
    evdns_base_set_option(d->dns, "attempts:", buf);
    /* a request that cannot be sent at once waits rather than failing */
    evdns_base_set_option(d->dns, "max-inflight:", "256");
    return LG_OK;
}

int
lg_discovery_new(struct event_base *base, lg_discovery_changed_fn changed, void *arg,
                 struct lg_discovery **out)
{
    struct lg_discovery *d = lg_xcalloc(1, sizeof(*d));

    d->base = base;
    d->changed = changed;
    d->arg = arg;
    TAILQ_INIT(&d->queries);
    d->changed_ev = event_new(base, -1, 0, disc_on_changed, d);
    d->wait_ev = evtimer_new(base, disc_on_timer, NULL);
    *out = d;
    return LG_OK;
}

static bool
disc_same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

int
lg_discovery_configure(struct lg_discovery *d, const struct lg_config *conf)
{
    const struct lg_discovery_conf *dc = &conf->discovery;
    int rc;

    if (conf->ntemplates == 0 && d->ntargets == 0) {
        return LG_OK; /* nothing to resolve: no resolver, no socket */
    }
    if (d->dns == NULL || !disc_same_str(d->nameserver, dc->nameserver)
        || d->timeout_ms != dc->timeout_ms) {
        disc_drop_resolver(d);
        rc = disc_make_resolver(d, dc);
        if (rc != LG_OK) {
            disc_drop_resolver(d);
            return rc;
        }
        free(d->nameserver);
        d->nameserver = dc->nameserver ? lg_xstrdup(dc->nameserver) : NULL;
        d->timeout_ms = dc->timeout_ms;
        for (size_t i = 0; i < d->ntargets; i++) {
            disc_round(d->targets[i]); /* a new server may answer differently */
        }
    }
    for (size_t i = 0; i < conf->ntemplates; i++) {
        const struct lg_discover_conf *dv = &conf->templates[i].discover;
        struct disc_target *t = disc_find(d, dv->dns, dv->port);

        if (t != NULL) {
            t->interval_ms = LG_MIN(t->interval_ms, dv->interval_ms);
            continue;
        }
        t = lg_xcalloc(1, sizeof(*t));
        t->d = d;
        t->dns = lg_xstrdup(dv->dns);
        t->port = dv->port;
        t->interval_ms = dv->interval_ms;
        t->timer = evtimer_new(d->base, disc_on_timer, t);
        d->targets = lg_xrealloc(d->targets, (d->ntargets + 1) * sizeof(*d->targets));
        d->targets[d->ntargets++] = t;
        disc_round(t);
    }
    /* intervals follow the file: the shortest among the templates naming a target */
    for (size_t i = 0; i < d->ntargets; i++) {
        uint64_t iv = 0;

        for (size_t k = 0; k < conf->ntemplates; k++) {
            const struct lg_discover_conf *dv = &conf->templates[k].discover;

            if (dv->port == d->targets[i]->port && strcmp(dv->dns, d->targets[i]->dns) == 0) {
                iv = iv ? LG_MIN(iv, dv->interval_ms) : dv->interval_ms;
            }
        }
        if (iv != 0) {
            d->targets[i]->interval_ms = iv;
        }
    }
    return LG_OK;
}

void
lg_discovery_prune(struct lg_discovery *d, const struct lg_config *conf)
{
    size_t k = 0;

    for (size_t i = 0; i < d->ntargets; i++) {
        struct disc_target *t = d->targets[i];
        bool named = false;

        for (size_t j = 0; j < conf->ntemplates && !named; j++) {
            named = conf->templates[j].discover.port == t->port
                    && strcmp(conf->templates[j].discover.dns, t->dns) == 0;
        }
        if (named) {
            d->targets[k++] = t;
        } else {
            disc_target_free(t);
        }
    }
    d->ntargets = k;
    if (k == 0) {
        disc_drop_resolver(d);
        free(d->nameserver);
        d->nameserver = NULL;
    }
}

bool
lg_discovery_answered(const struct lg_discovery *d)
{
    for (size_t i = 0; i < d->ntargets; i++) {
        if (!d->targets[i]->answered) {
            return false;
        }
    }
    return true;
}

void
lg_discovery_wait(struct lg_discovery *d, uint64_t timeout_ms)
{
    uint64_t deadline = lg_now_ns() + timeout_ms * LG_NS_PER_MS;
    struct timeval tv = { (time_t)(timeout_ms / 1000), (suseconds_t)((timeout_ms % 1000) * 1000) };

    evtimer_add(d->wait_ev, &tv); /* wakes the loop at the deadline */
    while (!lg_discovery_answered(d) && lg_now_ns() < deadline) {
        event_base_loop(d->base, EVLOOP_ONCE);
    }
    evtimer_del(d->wait_ev);
    for (size_t i = 0; i < d->ntargets; i++) {
        if (!d->targets[i]->answered) {
            LG_WARN("discovery: %s: no answer within %" PRIu64 " ms; starting without it",
                    d->targets[i]->dns, timeout_ms);
        }
    }
}

void
lg_discovery_free(struct lg_discovery *d)
{
    struct disc_query *q;

    if (d == NULL) {
        return;
    }
    for (size_t i = 0; i < d->ntargets; i++) {
        disc_target_free(d->targets[i]);
    }
    d->ntargets = 0;
    disc_drop_resolver(d);
    /* the callbacks of cancelled lookups are deferred: let them run and free their queries */
    event_base_loop(d->base, EVLOOP_NONBLOCK);
    while ((q = TAILQ_FIRST(&d->queries)) != NULL) {
        TAILQ_REMOVE(&d->queries, q, link);
        free(q);
    }
    free(d->targets);
    free(d->nameserver);
    event_free(d->changed_ev);
    event_free(d->wait_ev);
    free(d);
}
