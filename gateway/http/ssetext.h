/*
 * ssetext.h: the text an OpenAI stream has delivered, from its events' JSON
 * as they pass: `choices[0].delta.content` (chat) or `choices[0].text`
 * (completions), unescaped and appended to a bounded buffer. The events'
 * data (SSE data lines joined by LF, as the scanner of sse.h sees them) is
 * fed in any split; the text of an event counts once the event ended, so a
 * stream cut inside an event leaves the text of the events before it.
 *
 * Also says what cannot be continued from text alone: a stream that
 * generated reasoning (`reasoning_content`, `reasoning`), tool calls
 * (`tool_calls`, `function_call`) or a choice other than index 0; an escape
 * that decodes to no text (a lone surrogate); structure that is no JSON; a
 * text past the bound.
 */
#ifndef LG_SSETEXT_H
#define LG_SSETEXT_H

#include "base/lg_core.h"

#define LG_SSETEXT_DEPTH   8  /* containers whose kind is kept; deeper ones are "other" */
#define LG_SSETEXT_KEY_MAX 18 /* the longest key read ("reasoning_content") + 1 */

/* Why a stream's text is not all it delivered (lg_ssetext.flags). */
#define LG_SSETEXT_F_OTHER 1u /* reasoning, tool calls, another choice */
#define LG_SSETEXT_F_BAD   2u /* an undecodable escape, or no JSON structure */
#define LG_SSETEXT_F_FULL  4u /* the text outgrew max */

struct lg_ssetext {
    /* the lexer, over the current event's data (ssetext.c) */
    uint8_t state;
    uint8_t str;              /* what the string being read is */
    uint8_t key;              /* the current object member's key, once read */
    uint8_t key_len;
    char key_buf[LG_SSETEXT_KEY_MAX];
    bool key_over;            /* the key is longer than any we read */
    bool expect_key;          /* in an object, the next string is a key */
    uint8_t esc_n;            /* hex digits of \uXXXX read */
    uint32_t esc_cp;          /* its value so far */
    uint32_t high;            /* a high surrogate waiting for its low half; 0 = none */
    uint32_t depth;           /* containers open */
    uint8_t kind[LG_SSETEXT_DEPTH]; /* per open container, what it is */
    uint8_t scalar;           /* the bare value being read (choice index) */
    bool choice_seen;         /* the "choices" array open has an element */

    /* the text */
    char *buf;                /* owned; NULL until the first byte */
    size_t len;               /* bytes, the current event's included */
    size_t committed;         /* bytes of the events that ended */
    size_t cap;
    size_t max;               /* bound on len */
    unsigned flags;           /* LG_SSETEXT_F_* */
    uint64_t events;          /* ended events that added text */
};

void lg_ssetext_init(struct lg_ssetext *t, size_t max);
void lg_ssetext_free(struct lg_ssetext *t);

/* Bytes of the current event's data, in any split. */
void lg_ssetext_feed(struct lg_ssetext *t, const char *data, size_t len);

/*
 * The event ended: its text is delivered text from now on. Returns the
 * bytes it added (0 for an event without text).
 */
size_t lg_ssetext_event_end(struct lg_ssetext *t);

/* The current event will not end (its stream was cut): its text is dropped. */
void lg_ssetext_event_drop(struct lg_ssetext *t);

/* The delivered text: complete events only. */
static inline const char *
lg_ssetext_text(const struct lg_ssetext *t, size_t *len)
{
    *len = t->committed;
    return t->buf != NULL ? t->buf : "";
}

#endif /* LG_SSETEXT_H */
