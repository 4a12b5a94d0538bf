/*
 * endpoint.c: the gateway's HTTP API, one table (endpoint.h).
 *
 * Owns nothing: static data. Invariant: exact paths come before prefixes,
 * and a longer prefix before a shorter one it starts with (the first match
 * wins).
 */
#include "base/endpoint.h"

#include <string.h>

#include <llhttp.h>

#define EXACT(p)  .path = (p), .path_len = sizeof(p) - 1, .prefix = false
#define PREFIX(p) .path = (p), .path_len = sizeof(p) - 1, .prefix = true
#define GET       .method = HTTP_GET, .method_name = "GET"
#define POST      .method = HTTP_POST, .method_name = "POST"

static const struct lg_endpoint endpoints[] = {
    { EXACT("/v1/chat/completions"), POST, LG_ENDPOINT_CHAT, LG_STATS_ROUTE_CHAT },
    { EXACT("/v1/completions"), POST, LG_ENDPOINT_COMPLETIONS, LG_STATS_ROUTE_COMPLETIONS },
    { EXACT("/v1/embeddings"), POST, LG_ENDPOINT_EMBEDDINGS, LG_STATS_ROUTE_EMBEDDINGS },
    { EXACT("/v1/responses"), POST, LG_ENDPOINT_RESPONSES, LG_STATS_ROUTE_RESPONSES },
    { EXACT("/v1/messages"), POST, LG_ENDPOINT_MESSAGES, LG_STATS_ROUTE_MESSAGES },
    { EXACT("/v1/messages/count_tokens"), POST, LG_ENDPOINT_COUNT_TOKENS, LG_STATS_ROUTE_MESSAGES },
    { EXACT("/v1/models"), GET, LG_ENDPOINT_MODELS, LG_STATS_ROUTE_MODELS },
    { EXACT("/healthz"), GET, LG_ENDPOINT_HEALTHZ, LG_STATS_ROUTE_HEALTHZ },
    { PREFIX("/v1/models/"), GET, LG_ENDPOINT_MODEL, LG_STATS_ROUTE_MODELS },
    { PREFIX("/v1/"), POST, LG_ENDPOINT_OTHER_V1, LG_STATS_ROUTE_OTHER },
};

/* No path of the table holds a '?': an exact one matches the target up to
 * its end or its query, a prefix whatever follows it. */
const struct lg_endpoint *
lg_endpoint_find(const char *path, size_t len)
{
    for (size_t i = 0; i < LG_ARRAY_SIZE(endpoints); i++) {
        const struct lg_endpoint *e = &endpoints[i];
        size_t n = e->path_len;

        if (len >= n && (e->prefix || len == n || path[n] == '?')
            && memcmp(path, e->path, n) == 0) {
            return e;
        }
    }
    return NULL;
}

enum lg_stats_route
lg_endpoint_route(const char *path, size_t len)
{
    const struct lg_endpoint *e = lg_endpoint_find(path, len);

    return e != NULL ? e->route : LG_STATS_ROUTE_OTHER;
}
