/*
 * schedbench.c: what the admission queue's scheduler (serve/sched.c) costs
 * a request, against how many wait and how many tenants they belong to.
 *
 * For each (queued, tenants) it fills one model's queue with `queued`
 * waiters spread over the four classes and the tenants (random deadlines:
 * half with a TTFT target), then times a request's whole way through the
 * scheduler in the steady state, each step under an (uncontended) mutex as
 * the admission queue takes it:
 *
 *   push      a new waiter joins (its tenant's flow found or made)
 *   head      the next one is found (the wake's look at the queue)
 *   remove    the head leaves for a backend
 *   charge x2 its tenant's attained service: the prompt at dispatch, the
 *             rest at the end (re-orders each of the tenant's flows)
 *
 * so the queue stays at `queued`. The figure is ns per request, the median
 * (and the fastest) of --batches batches of --ops requests.
 *
 *   schedbench [--queued 100,1000,10000] [--tenants 1,10,100,1000,10000]
 *              [--batches 15] [--ops 20000] [--json FILE]
 */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/sched.h"
#include "serve/tenant.h"

struct bench_item {
    struct lg_sched_item it;
    struct lg_tenant *tenant;
};

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint64_t
rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static size_t
parse_list(const char *s, size_t *out, size_t cap)
{
    size_t n = 0;

    while (*s != '\0' && n < cap) {
        char *end;

        out[n++] = strtoul(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *end != '\0') {
            break;
        }
    }
    return n;
}

/* Fills it for a random class, tenant and deadline at time t. */
static void
bench_fill(struct bench_item *b, struct lg_tenant *tenants, size_t ntenants, double t)
{
    uint64_t r = rnd();

    memset(&b->it, 0, sizeof(b->it));
    b->it.cls = (uint8_t)(r % LG_NCLASSES);
    b->it.deadline_ns = (r >> 8) & 1 ? (uint64_t)(t * 1e9) + ((r >> 16) % 2000) * 1000000ull
                                     : (uint64_t)(t * 1e9) + 30000000000ull;
    b->tenant = &tenants[(r >> 32) % ntenants];
}

int
main(int argc, char **argv)
{
    size_t queued[8] = { 100, 1000, 10000 }, nq = 3;
    size_t tenants_n[8] = { 1, 10, 100, 1000, 10000 }, nt = 5;
    unsigned batches = 15;
    size_t ops = 20000;
    const char *json_path = NULL;
    static const struct option lo[] = { { "queued", 1, NULL, 'q' },  { "tenants", 1, NULL, 't' },
                                        { "batches", 1, NULL, 'b' }, { "ops", 1, NULL, 'o' },
                                        { "json", 1, NULL, 'j' },    { NULL, 0, NULL, 0 } };
    int ch;
    FILE *json = NULL;
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'q':
            nq = parse_list(optarg, queued, 8);
            break;
        case 't':
            nt = parse_list(optarg, tenants_n, 8);
            break;
        case 'b':
            batches = (unsigned)atoi(optarg);
            break;
        case 'o':
            ops = strtoul(optarg, NULL, 10);
            break;
        case 'j':
            json_path = optarg;
            break;
        default:
            fprintf(stderr, "usage: schedbench [--queued 100,1000,10000] [--tenants 1,10,100] "
                            "[--batches 15] [--ops 20000] [--json FILE]\n");
            return 2;
        }
    }
    if (batches == 0 || ops == 0) {
        return 2;
    }
    if (json_path != NULL && (json = fopen(json_path, "w")) == NULL) {
        perror(json_path);
        return 1;
    }
    if (json) {
        fprintf(json, "[");
    }
    printf("%8s %8s %14s %14s\n", "queued", "tenants", "ns/request", "fastest");
    for (size_t qi = 0; qi < nq; qi++) {
        for (size_t ti = 0; ti < nt; ti++) {
            size_t n = queued[qi], ntn = tenants_n[ti];
            struct lg_tenant *tenants = calloc(ntn, sizeof(*tenants));
            struct bench_item *items = calloc(n + 1, sizeof(*items));
            struct bench_item **free_list = calloc(n + 1, sizeof(*free_list));
            double *per = calloc(batches, sizeof(*per));
            struct lg_sched s;
            double t = 1000.0;
            size_t nfree = 0;

            if (tenants == NULL || items == NULL || free_list == NULL || per == NULL) {
                return 1;
            }
            for (size_t i = 0; i < ntn; i++) {
                snprintf(tenants[i].name, sizeof(tenants[i].name), "t%zu", i);
                tenants[i].key = -INFINITY;
            }
            lg_sched_init(&s);
            for (size_t i = 0; i < n; i++) {
                bench_fill(&items[i], tenants, ntn, t);
                lg_sched_push(&s, &items[i].it, items[i].tenant, true);
            }
            free_list[nfree++] = &items[n];
            for (unsigned b = 0; b < batches; b++) {
                double t0 = now_s();

                for (size_t k = 0; k < ops; k++) {
                    struct bench_item *x = free_list[--nfree];
                    struct lg_sched_item *h;
                    struct bench_item *hb;

                    t += 0.0001;
                    bench_fill(x, tenants, ntn, t);
                    pthread_mutex_lock(&lock);
                    lg_sched_push(&s, &x->it, x->tenant, true);
                    pthread_mutex_unlock(&lock);
                    pthread_mutex_lock(&lock);
                    h = lg_sched_head(&s);
                    pthread_mutex_unlock(&lock);
                    hb = (struct bench_item *)(void *)h;
                    pthread_mutex_lock(&lock);
                    lg_sched_remove(&s, h);
                    pthread_mutex_unlock(&lock);
                    pthread_mutex_lock(&lock);
                    lg_sched_charge(hb->tenant, 100 + (double)(rnd() % 400), t, 60);
                    pthread_mutex_unlock(&lock);
                    pthread_mutex_lock(&lock);
                    lg_sched_charge(hb->tenant, 2.0 * (double)(rnd() % 300), t, 60);
                    pthread_mutex_unlock(&lock);
                    free_list[nfree++] = hb;
                }
                per[b] = (now_s() - t0) / (double)ops * 1e9;
            }
            qsort(per, batches, sizeof(*per), cmp_double);
            printf("%8zu %8zu %14.0f %14.0f\n", n, ntn, per[batches / 2], per[0]);
            if (json) {
                fprintf(json,
                        "%s{\"queued\":%zu,\"tenants\":%zu,\"ns_per_request\":%.1f,"
                        "\"fastest_ns\":%.1f}",
                        qi + ti ? "," : "", n, ntn, per[batches / 2], per[0]);
            }
            for (size_t i = 0; i <= n; i++) {
                if (items[i].it.flow != NULL) {
                    lg_sched_remove(&s, &items[i].it);
                }
            }
            lg_sched_destroy(&s);
            free(tenants);
            free(items);
            free(free_list);
            free(per);
        }
    }
    if (json) {
        fprintf(json, "]\n");
        fclose(json);
    }
    return 0;
}
