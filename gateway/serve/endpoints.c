/*
 * endpoints.c: what the gateway answers itself: GET /v1/models (the union
 * of the fleet's models), GET /v1/models/{id}, GET /healthz (503 while
 * draining). Each ends its request in the client's exit.
 *
 * Owns nothing: the answer's body is moved into the client's output.
 */
#include "serve/endpoints.h"

#include <string.h>

#include <event2/buffer.h>

#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "http/openai.h"
#include "serve/client.h"
#include "serve/worker.h"

void
lg_endpoints_models(struct lg_client *c)
{
    const struct lg_fleet *f = c->w->fleet;
    struct evbuffer *body = evbuffer_new();
    uint64_t created = (uint64_t)(lg_wall_ns() / LG_NS_PER_S);

    /* f->models is sorted by name: the union of every backend's models */
    evbuffer_add_printf(body, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < f->nmodels; i++) {
        evbuffer_add_printf(body, "%s{\"id\":", i ? "," : "");
        lg_json_append_string(body, f->models[i].model, strlen(f->models[i].model));
        evbuffer_add_printf(body,
                            ",\"object\":\"model\",\"created\":%" PRIu64
                            ",\"owned_by\":\"llmgate\",\"backends\":%zu}",
                            created, f->models[i].n);
    }
    evbuffer_add_printf(body, "]}\n");
    lg_client_respond(c, 200, body, NULL);
    evbuffer_free(body);
    lg_client_finish(c);
}

void
lg_endpoints_model(struct lg_client *c, const char *id)
{
    const struct lg_model_route *m = lg_fleet_find_model(c->w->fleet, id);
    struct evbuffer *body;

    if (m == NULL) {
        lg_client_fail(c, 404, "model_not_found", "the model \"%s\" does not exist", id);
        return;
    }
    body = evbuffer_new();
    evbuffer_add_printf(body, "{\"id\":");
    lg_json_append_string(body, m->model, strlen(m->model));
    evbuffer_add_printf(body,
                        ",\"object\":\"model\",\"created\":%" PRIu64 ",\"owned_by\":\"llmgate\"}\n",
                        (uint64_t)(lg_wall_ns() / LG_NS_PER_S));
    lg_client_respond(c, 200, body, NULL);
    evbuffer_free(body);
    lg_client_finish(c);
}

void
lg_endpoints_healthz(struct lg_client *c)
{
    struct evbuffer *body = evbuffer_new();
    int status = c->w->draining ? 503 : 200;

    evbuffer_add_printf(body, "{\"status\":\"%s\"}\n", c->w->draining ? "draining" : "ok");
    lg_client_respond(c, status, body, NULL);
    evbuffer_free(body);
    lg_client_finish(c);
}
