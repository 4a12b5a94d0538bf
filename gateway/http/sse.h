/*
 * sse.h: an incremental Server-Sent Events scanner and a JSON probe.
 *
 * The scanner watches a response body go by (any split into reads, no
 * buffering, no allocation) and reports the events the gateway times: events
 * that carry generated content (the first one is TTFT; the gaps between them
 * are inter-token latency), the final `data: [DONE]`, the token counts, the
 * end of generation and the engines' error events. It never changes or holds
 * the bytes; the relay moves them on.
 *
 * The JSON probe is a tiny lexer that recognises a handful of keys without
 * parsing the document, in the shapes the engines write (see
 * tests/fixtures/engines/):
 *   content       `content`, `text`, `reasoning`, `reasoning_content` (a
 *                 non-empty string), `tool_calls` (an array)
 *   tokens        OpenAI `usage.completion_tokens` / `prompt_tokens`; TGI's
 *                 `details.generated_tokens` / `input_length`; llama.cpp's
 *                 native `tokens_predicted` / `tokens_evaluated`; the
 *                 Responses and Messages APIs' `output_tokens` / `input_tokens`
 *   finished      `finish_reason` or TGI's `generated_text` with a string
 *                 value; llama.cpp's native `"stop": true`
 *   error         `error` with an object or string value (vLLM, SGLang,
 *                 llama.cpp, TGI and OpenAI all frame a failure after the
 *                 status line as `data: {"error": ...}`)
 *   type          the event type of the Responses API (`"type":
 *                 "response.output_text.delta"`...) and of Anthropic's
 *                 Messages API (`"content_block_delta"`...), wherever it
 *                 comes in the object: a `*.delta` or `content_block_delta`
 *                 carries content; their other events carry none, whatever
 *                 text they repeat (`response.output_text.done`,
 *                 `response.completed` hold the whole answer again);
 *                 `response.completed`, `response.incomplete`,
 *                 `response.failed` and `message_stop` end generation; a
 *                 `"type": "error"` (either API's error event) is an error.
 *                 The first such type of an event is its type: nested ones
 *                 (`"type": "message"`, `"output_text"`) are neither. An
 *                 ending event with text counts as content when it is the
 *                 stream's first (SGLang streams a plain model's Responses
 *                 answer as response.created, .in_progress and .completed).
 * It is used for each SSE data value and for whole non-streaming JSON bodies.
 */
#ifndef LG_SSE_H
#define LG_SSE_H

#include "base/lg_core.h"

#define LG_JSON_KEY_MAX 24

struct lg_json_probe {
    uint8_t state;               /* lexer state (sse.c) */
    uint8_t pending;             /* what the next token means */
    uint8_t want;                /* the key whose value comes next */
    uint8_t key_want;            /* what the last string means as a key */
    uint8_t key_len;             /* bytes of the current string captured */
    bool key_overflow;           /* string longer than any key we match */
    char key[LG_JSON_KEY_MAX];   /* start of the current string */
    int64_t num;                 /* number being read */
    bool content;                /* the event carries content: a non-empty content value
                                    was seen (and no event type says otherwise), or its
                                    type is a delta */
    bool finished;               /* a finish_reason (or the like) was seen, or an ending type */
    bool error;                  /* an "error" object or string was seen, or an error type */
    bool raw_content;            /* a non-empty content value was seen */
    bool raw_finished;           /* a finish_reason (or the like) was seen */
    bool raw_error;              /* an "error" object or string was seen */
    bool whole;                  /* an ending event that carries the answer's text
                                    (response.completed): content when no delta came
                                    before it (SGLang streams only that one) */
    uint8_t kind;                /* what the event's type says (sse.c); 0: no type */
    uint8_t type_len;            /* bytes of a type value captured */
    bool type_over;              /* the type value is longer than any we match */
    char type[40];               /* the type value being read */
    int64_t completion_tokens;   /* -1 until seen */
    int64_t prompt_tokens;       /* -1 until seen */
};

void lg_json_probe_init(struct lg_json_probe *p);
/* Resets the per-event flags and the lexer, keeps the token counts. */
void lg_json_probe_reset(struct lg_json_probe *p);
void lg_json_probe_feed(struct lg_json_probe *p, const char *data, size_t len);

/* What an event was, as a tap hears it at its end (lg_sse_tap.event). */
#define LG_SSE_EV_DATA     1u  /* it had data */
#define LG_SSE_EV_CONTENT  2u  /* generated content (counted in content_events) */
#define LG_SSE_EV_DONE     4u  /* data: [DONE] */
#define LG_SSE_EV_FINISHED 8u  /* generation ended (finish_reason...) */
#define LG_SSE_EV_ERROR    16u /* the engine's error */

/*
 * Another reader of the stream, fed as the scanner reads it (lg_sse.tap;
 * NULL: none): each event's data, lines joined by LF, one leading space cut
 * (what the probe reads), and each event's end: the blank line's first byte
 * is data[end - 1] of the bytes being fed, `what` says what it was
 * (LG_SSE_EV_*; 0 for a blank line or comments alone). serve/resume.c
 * listens to the streams it may continue.
 */
struct lg_sse_tap {
    void (*data)(struct lg_sse_tap *t, const char *p, size_t n);
    void (*event)(struct lg_sse_tap *t, size_t end, unsigned what);
};

struct lg_sse {
    uint8_t line_state;          /* where in a line we are */
    bool after_cr;               /* the previous byte was CR: a LF now is part of it */
    uint8_t field_len;
    char field[8];               /* field name so far ("data", "event"...) */
    uint8_t done_match;          /* bytes of "[DONE]" matched in this data value */
    bool value_started;          /* a data value byte was seen on this line */
    bool ev_data;                /* current event has a data field */
    bool ev_done;                /* current event is data: [DONE] */
    bool ev_error;               /* current event has an `error:` field line */
    struct lg_json_probe probe;  /* over the current event's data */
    struct lg_sse_tap *tap;      /* NULL, or who else hears the events */

    uint64_t events;             /* dispatched events with data */
    uint64_t content_events;     /* of which carried generated content */
    uint32_t error_events;       /* events that reported an error (data or field) */
    bool done;                   /* saw data: [DONE] */
    bool finished;               /* an event said generation ended (finish_reason...) */
};

void lg_sse_init(struct lg_sse *s);

/*
 * Scans `len` bytes of event-stream body. Returns how many events that carry
 * content completed inside these bytes (0 or more).
 */
unsigned lg_sse_feed(struct lg_sse *s, const char *data, size_t len);

/*
 * The event being read will never end (its stream was cut inside it): the
 * next bytes start a new one. The counts stay.
 */
void lg_sse_event_drop(struct lg_sse *s);

/*
 * The stream said it is complete: `data: [DONE]` (OpenAI routes) or a
 * finishing event (TGI's /generate_stream and llama.cpp's /completion send no
 * [DONE]). A stream cut short says neither; an error event may say either
 * (vLLM and SGLang still send [DONE] after one).
 */
static inline bool
lg_sse_complete(const struct lg_sse *s)
{
    return s->done || s->finished;
}

/* Token counts from a usage object, or -1. */
static inline int64_t
lg_sse_completion_tokens(const struct lg_sse *s)
{
    return s->probe.completion_tokens;
}

#endif /* LG_SSE_H */
