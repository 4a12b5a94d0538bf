/*
 * resume.h: mid-stream failover (resume.c). A stream whose backend fails
 * after the response started goes on on another backend, sent the request
 * with the text already delivered (chat: an open assistant message; a
 * completion: its prompt continued), and the client sees one stream with a
 * pause in it. Worker thread of the request only.
 */
#ifndef LG_RESUME_H
#define LG_RESUME_H

#include "base/fail.h"
#include "base/lg_core.h"

struct evbuffer;
struct lg_client;
struct lg_upconn;

/*
 * The response head went to the client (lg_relay_write_head): when
 * routing.resume allows it for the request, its stream is relayed event by
 * event from now on (LG_REQ_F_EVENTS) and the text it delivers kept.
 */
void lg_resume_watch(struct lg_client *c, struct lg_upconn *u);

/*
 * Body bytes of the response (HTTP framing removed), for a stream relayed
 * event by event: scanned (lg_sse_feed(), whose count it returns), each
 * event sent whole when it ends (or, opening a continuation, dropped while
 * it repeats what the client has: its role-only chunk), the bytes of an
 * event not ended yet held for the next read.
 */
unsigned lg_resume_feed(struct lg_client *c, const char *at, size_t n);

/* The response is complete: what is left of an unfinished last event goes out. */
void lg_resume_end(struct lg_client *c);

/*
 * The backend failed after the response started (why: as the log says it):
 * returns true when the stream can go on (the retry budget paid with
 * take_budget, the continuation's request ready for the next attempt),
 * false when it is to be cut (the reason counted when the request was one
 * to resume). The failed attempt is the caller's to end.
 */
bool lg_resume_begin(struct lg_client *c, enum lg_fail why,
                     bool (*take_budget)(struct lg_client *c));

/*
 * The engine said, inside the stream, that it failed (an error event after
 * the response started): resume.c held that back for a stream it can
 * continue; when the response ends the attempt is to be taken as failed
 * (lg_resume_begin()), not as complete.
 */
bool lg_resume_failing(const struct lg_client *c);

/*
 * A continuation's head (the client has the stream's already): LG_OK when
 * it is a stream to go on with, else LG_EINVAL (the attempt failed).
 */
int lg_resume_head(struct lg_client *c, struct lg_upconn *u);

/* The body an attempt sends: the continuation's once one began, else the client's. */
void lg_resume_request_body(struct lg_client *c, struct evbuffer **body, uint64_t *len);

/* The request is over: what it held here is freed. */
void lg_resume_release(struct lg_client *c);

#endif /* LG_RESUME_H */
