/* test_endpoint.c: the API's table (base/endpoint.c). */
#include <string.h>

#include <llhttp.h>

#include "base/endpoint.h"
#include "lg_test.h"

static const struct lg_endpoint *
find(const char *path)
{
    return lg_endpoint_find(path, strlen(path));
}

static int
test_find(void)
{
    static const struct {
        const char *path;
        int id; /* -1: none */
        int method;
    } cases[] = {
        { "/v1/chat/completions", LG_ENDPOINT_CHAT, HTTP_POST },
        { "/v1/chat/completions?api-version=1", LG_ENDPOINT_CHAT, HTTP_POST },
        { "/v1/completions", LG_ENDPOINT_COMPLETIONS, HTTP_POST },
        { "/v1/embeddings", LG_ENDPOINT_EMBEDDINGS, HTTP_POST },
        { "/v1/models", LG_ENDPOINT_MODELS, HTTP_GET },
        { "/v1/models?x", LG_ENDPOINT_MODELS, HTTP_GET },
        { "/v1/models/m", LG_ENDPOINT_MODEL, HTTP_GET },
        { "/v1/models/", LG_ENDPOINT_MODEL, HTTP_GET },
        { "/healthz", LG_ENDPOINT_HEALTHZ, HTTP_GET },
        { "/v1/responses", LG_ENDPOINT_RESPONSES, HTTP_POST },
        { "/v1/responses?x=1", LG_ENDPOINT_RESPONSES, HTTP_POST },
        { "/v1/responses/resp_1/cancel", LG_ENDPOINT_OTHER_V1, HTTP_POST },
        { "/v1/messages", LG_ENDPOINT_MESSAGES, HTTP_POST },
        { "/v1/messages/count_tokens", LG_ENDPOINT_COUNT_TOKENS, HTTP_POST },
        { "/v1/messages/batches", LG_ENDPOINT_OTHER_V1, HTTP_POST },
        { "/v1/chat/completionsX", LG_ENDPOINT_OTHER_V1, HTTP_POST },
        { "/v1/modelsX", LG_ENDPOINT_OTHER_V1, HTTP_POST },
        { "/v1/", LG_ENDPOINT_OTHER_V1, HTTP_POST },
        { "/v1", -1, 0 },
        { "/healthzz", -1, 0 },
        { "/metrics", -1, 0 },
        { "/", -1, 0 },
        { "", -1, 0 },
    };

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        const struct lg_endpoint *e = find(cases[i].path);

        if (cases[i].id < 0) {
            LG_CHECK(e == NULL);
            continue;
        }
        LG_CHECK(e != NULL && (int)e->id == cases[i].id && e->method == cases[i].method);
        LG_CHECK_STR(e->method_name, llhttp_method_name((llhttp_method_t)e->method));
    }
    return 0;
}

/* The routes /metrics counts by come from the same table. */
static int
test_routes(void)
{
    LG_CHECK(lg_endpoint_route("/v1/chat/completions?x", 22) == LG_STATS_ROUTE_CHAT);
    LG_CHECK(lg_endpoint_route("/v1/completions", 15) == LG_STATS_ROUTE_COMPLETIONS);
    LG_CHECK(lg_endpoint_route("/v1/embeddings", 14) == LG_STATS_ROUTE_EMBEDDINGS);
    LG_CHECK(lg_endpoint_route("/v1/models/m", 12) == LG_STATS_ROUTE_MODELS);
    LG_CHECK(lg_endpoint_route("/healthz", 8) == LG_STATS_ROUTE_HEALTHZ);
    LG_CHECK(lg_endpoint_route("/v1/responses", 13) == LG_STATS_ROUTE_RESPONSES);
    LG_CHECK(lg_endpoint_route("/v1/messages/count_tokens", 25) == LG_STATS_ROUTE_MESSAGES);
    LG_CHECK(lg_endpoint_route("/v1/files", 9) == LG_STATS_ROUTE_OTHER);
    LG_CHECK(lg_endpoint_route("/nope", 5) == LG_STATS_ROUTE_OTHER);
    /* a length short of the string: only those bytes count */
    LG_CHECK(lg_endpoint_route("/healthzXYZ", 8) == LG_STATS_ROUTE_HEALTHZ);
    return 0;
}

LG_TEST_MAIN(test_find, test_routes)
