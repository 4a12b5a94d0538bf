/*
 * endpoint.h: the gateway's HTTP API, one table (endpoint.c): each path,
 * the method it takes, who answers it (the gateway itself, or a backend)
 * and the route /metrics counts it under. The proxy dispatches by it, a
 * 405's Allow header comes from it, and so do the routes of the metrics.
 */
#ifndef LG_ENDPOINT_H
#define LG_ENDPOINT_H

#include "base/lg_core.h"
#include "base/stats.h"

enum lg_endpoint_id {
    LG_ENDPOINT_CHAT = 0,    /* POST /v1/chat/completions: proxied */
    LG_ENDPOINT_COMPLETIONS, /* POST /v1/completions: proxied */
    LG_ENDPOINT_EMBEDDINGS,  /* POST /v1/embeddings: proxied */
    LG_ENDPOINT_MODELS,      /* GET /v1/models: answered here */
    LG_ENDPOINT_MODEL,       /* GET /v1/models/{id}: answered here */
    LG_ENDPOINT_HEALTHZ,     /* GET /healthz: answered here */
    LG_ENDPOINT_OTHER_V1,    /* POST /v1/...: proxied */
    LG_ENDPOINT_RESPONSES,   /* POST /v1/responses (OpenAI's Responses API): proxied, its
                                previous_response_id sent where that response was made */
    LG_ENDPOINT_MESSAGES,    /* POST /v1/messages (Anthropic's Messages API): proxied */
    LG_ENDPOINT_COUNT_TOKENS, /* POST /v1/messages/count_tokens: proxied */
};

struct lg_endpoint {
    const char *path;          /* the path, or its prefix when `prefix` */
    uint8_t path_len;
    bool prefix;               /* matches every path that starts with `path` */
    uint8_t method;            /* the one method it takes (llhttp_method_t) */
    const char *method_name;   /* its name: the Allow header of a 405 */
    enum lg_endpoint_id id;
    enum lg_stats_route route; /* what /metrics counts it as */
};

/*
 * The endpoint of a request target (path, len; a query is ignored): the
 * exact paths first, then the longest prefix. NULL when none (a 404).
 */
const struct lg_endpoint *lg_endpoint_find(const char *path, size_t len);

/* The route /metrics counts a request target under (LG_STATS_ROUTE_OTHER: no endpoint). */
enum lg_stats_route lg_endpoint_route(const char *path, size_t len);

#endif /* LG_ENDPOINT_H */
