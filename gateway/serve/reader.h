/*
 * reader.h: reading a request off a client connection (reader.c).
 */
#ifndef LG_READER_H
#define LG_READER_H

#include "base/lg_core.h"

struct lg_client;

/* What lg_reader_run() stopped at. */
enum lg_reader_rc {
    LG_READER_MORE = 0, /* all that was there is parsed: wait for more */
    LG_READER_HEAD,     /* the head is in, no body byte read: check it, then run again */
    LG_READER_DONE,     /* the request is complete (pipelined bytes stay in the input) */
    LG_READER_ERROR,    /* malformed, or over a limit (HPE_USER: req.reject says how) */
};

/* Sets up c's request parser (llhttp with the reader's callbacks). */
void lg_reader_init(struct lg_client *c);

/*
 * Parses what c's input holds while c reads a request (LG_CLIENT_ST_READ_HEAD
 * or _READ_BODY): head bytes are consumed into req.hdrs, body bytes moved
 * into req.body. On an error its llhttp errno is in *err (HPE_USER: a limit
 * or a check refused it: req.reject says how). While
 * the request is not all in, sets c->read_tmo_want to what is left of its
 * time: the head's, or the body's idle time within its deadline.
 */
int lg_reader_run(struct lg_client *c, int *err);

/*
 * Is c's body past its whole-body deadline at `now` (timeouts.client_body_grace
 * plus a second per client_body_min_rate bytes received)? While c reads one.
 */
bool lg_reader_is_late(const struct lg_client *c, uint64_t now);

#endif /* LG_READER_H */
