/*
 * auth.h: API-key checks of a client request (keys.c holds the keys).
 *
 * Two steps, both no-ops when auth is off (no auth.keys_file):
 * lg_auth_head() once the head is in, before any body byte is read (a
 * missing or unknown key gets 401, a request over the key's concurrency or
 * rate 429 with Retry-After, and the connection closes: the body is never
 * read); lg_auth_admit() once the body named the model (403 when the key
 * may not use it). A refusal is described in struct lg_auth_refusal; the
 * caller ends the request with it (lg_client_fail()).
 */
#ifndef LG_AUTH_H
#define LG_AUTH_H

#include "base/lg_core.h"

struct lg_keys;
struct lg_request;

struct lg_auth_refusal {
    int status;        /* 401, 403 or 429 */
    const char *code;  /* static: the error body's code */
    char message[512]; /* for the error body */
};

/*
 * Returns LG_OK (the request holds its key in req->auth, and when it is a
 * POST or `has_body`, one of the key's concurrency slots and a request of
 * its rate), or LG_EINVAL with *no filled (401, or 429 with
 * req->retry_after_ms set; the request is marked to close the
 * connection).
 */
int lg_auth_head(struct lg_keys *keys, struct lg_request *req, bool has_body,
                 struct lg_auth_refusal *no);

/* Returns LG_OK, or LG_EINVAL with *no filled (403). */
int lg_auth_admit(struct lg_request *req, struct lg_auth_refusal *no);

#endif /* LG_AUTH_H */
