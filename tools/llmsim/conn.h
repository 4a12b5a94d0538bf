/*
 * conn.h: one client connection to an llmsim replica: reads requests,
 * routes them, streams the engine's tokens back.
 */
#ifndef LG_SIM_CONN_H
#define LG_SIM_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include <event2/util.h>

#include "api.h"
#include "engine.h"
#include "httpreq.h"

struct bufferevent;
struct event;
struct lg_sim;
struct lg_sim_model;

enum lg_sim_conn_state {
    LG_SIM_CONN_ST_READ = 0, /* reading a request */
    LG_SIM_CONN_ST_HELD,     /* read during a stall; served when the stall ends */
    LG_SIM_CONN_ST_GENERATE, /* its sequence is in the engine */
    LG_SIM_CONN_ST_DELAY,    /* embeddings: answered when the timer fires */
    LG_SIM_CONN_ST_FLUSH,    /* last bytes queued; shut down once written */
    LG_SIM_CONN_ST_LINGER,   /* shut down for writing; input discarded until EOF or timeout */
    LG_SIM_CONN_ST_CLOSED,   /* on the reap list, callbacks detached */
};

struct lg_sim_conn {
    TAILQ_ENTRY(lg_sim_conn) link;      /* sim->conns, then sim->reap */
    TAILQ_ENTRY(lg_sim_conn) held_link; /* sim->held while HELD */
    struct lg_sim *sim;                 /* borrowed */
    struct bufferevent *bev;            /* owned (and its fd) */
    struct event *timer;                /* owned, made on first use */
    enum lg_sim_conn_state state;
    uint64_t id;
    struct lg_sim_httpreq req; /* owned */
    struct lg_sim_request api; /* the inference request being served */
    struct lg_sim_seq seq;     /* its sequence; the engine borrows it */
    struct lg_sim_api_resp resp;
    const struct lg_sim_model *model; /* borrowed from the configuration */
    bool stream;
    bool include_usage;
    bool keep_alive;
    bool embed_ready; /* embeddings computed, held by a stall */
    bool writing;     /* EV_WRITE on: the socket pushed back */
    bool in_load;     /* counted in the replica's server_load until the response ends */
    uint8_t load_format; /* enum lg_sim_load_format the request asked for */
};

/* Takes ownership of an accepted socket. */
int lg_sim_conn_accept(struct lg_sim *sim, evutil_socket_t fd);

/* Closes c (deferred free); a sequence still in the engine is aborted. */
void lg_sim_conn_close(struct lg_sim_conn *c);

/* Frees the connections closed since the last call. */
void lg_sim_conn_reap(struct lg_sim *sim);

/* Serves the requests held by a stall that just ended, in arrival order. */
void lg_sim_conn_release_held(struct lg_sim *sim);

extern const struct lg_sim_engine_ops lg_sim_conn_engine_ops;

#endif /* LG_SIM_CONN_H */
