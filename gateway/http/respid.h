/*
 * respid.h: the id of a Responses API answer, read as it passes: the
 * top-level `id` of a whole answer (`{"id": "resp_...", "object":
 * "response", ...}`) or, in a stream, the `response.id` of its events
 * (`{"type": "response.created", "response": {"id": ...}}`, the first event
 * of a stream). Nested ids (an output item's `"id": "msg_..."`) are not it.
 *
 * A small JSON lexer over any split of the bytes, no allocation; a stream's
 * events are fed one by one (lg_respid_event_end() between them). It keeps
 * the first id it finds and then reads nothing more. Bytes that are no JSON
 * find nothing (or, at worst, a string that stands where an id would):
 * what is found only says where a follow-up should go.
 */
#ifndef LG_RESPID_H
#define LG_RESPID_H

#include "base/lg_core.h"
#include "http/openai.h"

struct lg_respid {
    uint8_t state;       /* lexer state (respid.c) */
    uint8_t pending;     /* what the value after the current key is */
    uint8_t kind[2];     /* containers at depth 1 and 2: object or array */
    uint32_t depth;      /* containers open */
    bool expect_key;     /* in an object, the next string is a key */
    bool in_response;    /* the depth-2 object is a "response" member */
    uint8_t str;         /* what the string being read is */
    uint8_t key_len;
    bool key_over;
    char key[8];         /* the key being read ("id", "response") */
    uint8_t id_len;
    bool id_over;
    bool found;          /* id holds the answer's id */
    char id[LG_RESPONSE_ID_MAX + 1];
};

void lg_respid_init(struct lg_respid *r);

/* Bytes of the body (or of the current event's data), in any split. */
void lg_respid_feed(struct lg_respid *r, const char *data, size_t len);

/* The current event ended: the next bytes are a new JSON document (found stays). */
void lg_respid_event_end(struct lg_respid *r);

/* The id found, NUL-terminated, or NULL. */
static inline const char *
lg_respid_get(const struct lg_respid *r)
{
    return r->found ? r->id : NULL;
}

#endif /* LG_RESPID_H */
