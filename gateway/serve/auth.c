/*
 * auth.c: API-key checks of a client request (see auth.h).
 *
 * Owns nothing: the request's key hold lives in struct lg_request and is
 * released with the request (client.c). Refuses by filling a struct
 * lg_auth_refusal; the caller ends the request with it.
 */
#include "serve/auth.h"

#include <stdio.h>
#include <string.h>

#include <llhttp.h>

#include "serve/client_types.h"
#include "serve/keys.h"

/* Paths that need a key: the OpenAI API; /healthz stays open for probes. */
static bool
auth_needed(const struct lg_request *req)
{
    return req->hdrs.url_len >= 4 && strncmp(req->hdrs.buf + req->hdrs.url_off, "/v1/", 4) == 0;
}

static int
auth_refuse(struct lg_auth_refusal *no, int status, const char *code)
{
    no->status = status;
    no->code = code;
    return LG_EINVAL;
}

int
lg_auth_head(struct lg_keys *keys, struct lg_request *req, bool has_body,
             struct lg_auth_refusal *no)
{
    const struct lg_hdr *h;
    uint32_t retry_ms;
    bool ok = false;

    if (keys == NULL || !auth_needed(req)) {
        return LG_OK;
    }
    /* OpenAI's clients send Authorization: Bearer KEY, Anthropic's x-api-key: KEY */
    h = lg_hdrs_find(&req->hdrs, "authorization");
    if (h != NULL) {
        ok = lg_keys_authenticate(keys, lg_hdrs_value(&req->hdrs, h), h->value_len, &req->auth);
    } else if ((h = lg_hdrs_find(&req->hdrs, "x-api-key")) != NULL) {
        ok = lg_keys_authenticate_raw(keys, lg_hdrs_value(&req->hdrs, h), h->value_len,
                                      &req->auth);
    }
    if (!ok) {
        req->flags |= LG_REQ_F_CLOSE; /* the body stays unread */
        snprintf(no->message, sizeof(no->message), "%s",
                 h == NULL ? "no API key: send Authorization: Bearer YOUR_KEY (or x-api-key: "
                             "YOUR_KEY)"
                           : "the API key is not valid");
        return auth_refuse(no, 401, "invalid_api_key");
    }
    /*
     * A request that brings a body (a POST, or any that declares one) counts
     * against the key now, before its body is read: a key's holder cannot
     * hold more connections reading bodies than the key's max_concurrency.
     * A GET of the model list costs nothing.
     */
    if ((has_body || req->method == HTTP_POST)
        && lg_keys_admit(&req->auth, lg_now_ns(), &retry_ms) != LG_OK) {
        req->flags |= LG_REQ_F_CLOSE;
        req->retry_after_ms = retry_ms;
        snprintf(no->message, sizeof(no->message),
                 "the key \"%s\" is over its concurrency or rate limit", lg_keys_name(&req->auth));
        return auth_refuse(no, 429, "key_limit_reached");
    }
    return LG_OK;
}

int
lg_auth_admit(struct lg_request *req, struct lg_auth_refusal *no)
{
    if (req->auth.key == NULL) {
        return LG_OK;
    }
    if (!lg_keys_model_allowed(&req->auth, req->info.model)) {
        snprintf(no->message, sizeof(no->message), "the key \"%s\" may not use the model \"%s\"",
                 lg_keys_name(&req->auth), req->info.model);
        return auth_refuse(no, 403, "model_not_allowed");
    }
    return LG_OK;
}
