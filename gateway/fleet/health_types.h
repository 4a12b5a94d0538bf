/*
 * health_types.h: the fleet's health thread and what it keeps per backend
 * and per peer gateway (types only), shared by its parts: the thread
 * (health.c), the requests to a backend (health_http.c), active checks
 * (health_check.c), engine scrapes (health_scrape.c) and peers
 * (health_peers.c).
 */
#ifndef LG_HEALTH_TYPES_H
#define LG_HEALTH_TYPES_H

#include <pthread.h>

#include "fleet/backend.h"
#include "fleet/enginemetrics.h"
#include "fleet/gaugelag.h"
#include "fleet/peers.h"

struct event;
struct event_base;
struct evhttp_connection;
struct lg_config;
struct lg_model_route;

/*
 * What a checker thread borrows from its fleet (fleet.c), which stops the
 * thread before it frees any of it.
 */
struct lg_health_fleet {
    const struct lg_config *conf;       /* conf->backends[i]: backends[i]'s settings here */
    struct lg_backend *const *backends; /* checked, scraped; peers' requests published */
    size_t nbackends;
    struct lg_model_route *models; /* each model's prior is written here */
    size_t nmodels;
};

/* Active checks of one backend (health_check.c). */
struct lg_health_check {
    struct event *ev;          /* owned; NULL: no active checks */
    bool out;                  /* a check is in flight */
    uint32_t ok_run, fail_run; /* consecutive results */
};

/* Scrapes of one backend's engine metrics (health_scrape.c). */
struct lg_health_scrape {
    struct event *ev;             /* owned; NULL: no scraping */
    bool out;                     /* a scrape is in flight */
    uint64_t sent_ns;             /* when it was sent */
    enum lg_engine_flavor flavor; /* configured, or detected by the first scrape */
    bool asking_props;            /* GET /props is in flight (llama.cpp) */
    uint64_t props_t_ns;          /* when /props was last asked; 0 = never */
    uint32_t failures;            /* answers without metrics in a row: scrapes back off */
    uint64_t warn_ns;             /* rate limit for scrape warnings */
    uint64_t slots_warn_ns;       /* rate limit for warnings about its slot count */
    struct event *load_ev;        /* owned: the load_path poll (every
                                     health.load_interval); NULL: none */
    bool load_out;                /* a poll is in flight */
    uint64_t load_sent_ns;        /* when it was sent */
    uint64_t load_warn_ns;        /* rate limit for poll warnings */
};

/* One checked or scraped backend. */
struct lg_health_target {
    struct lg_health *h;            /* borrowed: owner */
    struct lg_backend *b;           /* borrowed from the fleet */
    /* borrowed from the fleet's config: b's settings in this fleet (a
     * reload that keeps b puts the next fleet's in force on b only as that
     * fleet takes over, after its thread began) */
    const struct lg_backend_conf *conf;
    struct evhttp_connection *conn; /* owned; keep-alive, for checks and scrapes */
    struct lg_backend_engine eng;   /* last published engine state */
    char why[192];                  /* why the last check or scrape got no answer */
    bool why_tls;                   /* ... and it was TLS */
    bool why_too_large;             /* ... or an answer past the connection's body limit */
    struct lg_health_check check;
    struct lg_health_scrape scrape;
    struct lg_gaugelag lag; /* whether others are served there, its gauges' lag */
};

/* Another gateway in front of the fleet (config "peers"), health_peers.c. */
struct lg_health_peer {
    struct lg_health *h;            /* borrowed: owner */
    const char *admin;              /* borrowed from the config: as written */
    struct evhttp_connection *conn; /* owned */
    struct event *ev;               /* owned: the next request */
    bool fetching;                  /* a request is out */
    bool self;                      /* it answered with our id: this gateway */
    struct lg_peer_state st;        /* owned: its last answer */
    uint64_t recv_ns;               /* when st came; 0 = none yet */
    uint64_t warn_ns;               /* rate limit for warnings */
};

struct lg_health {
    struct lg_health_fleet f;         /* borrowed: what the fleet lends */
    struct event_base *base;          /* owned */
    struct event *prior_ev;           /* owned */
    struct event *stop_ev;            /* owned; activated by lg_health_stop() */
    struct lg_health_target *targets; /* owned [n] */
    size_t n;
    struct lg_health_peer *peers; /* owned [npeers] */
    size_t npeers;
    char (*keys)[LG_PEERS_KEY_MAX]; /* owned [n]: each backend's key among peers */
    pthread_t thread;
};

#endif /* LG_HEALTH_TYPES_H */
