/*
 * auth.h: API-key checks of a client request (keys.c holds the keys).
 *
 * Two steps, both no-ops when auth is off (no auth.keys_file):
 * lg_auth_head() once the head is in, before any body byte is read (a
 * missing or unknown key gets 401 and the connection closes: the body is
 * never read); lg_auth_admit() once the body named the model (403 when the
 * key may not use it, 429 with Retry-After over the key's concurrency or
 * rate). Each failure ends the request through lg_client_fail().
 */
#ifndef LG_AUTH_H
#define LG_AUTH_H

#include "base/lg_core.h"

struct lg_client;

/* Returns LG_OK, or LG_EINVAL after failing the request (401). */
int lg_auth_head(struct lg_client *c);

/* Returns LG_OK, or LG_EINVAL after failing the request (403, 429). */
int lg_auth_admit(struct lg_client *c);

#endif /* LG_AUTH_H */
