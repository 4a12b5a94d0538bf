/*
 * sse.c: incremental SSE scanner and JSON key probe (see sse.h).
 *
 * Owns nothing; all state lives in the caller's struct. Every byte is looked
 * at once, in one pass, whatever the read boundaries: a unit test feeds
 * streams split at every offset and compares the results.
 */
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "http/sse.h"

/* ---- JSON probe --------------------------------------------------------- */

enum {
    PROBE_OUT = 0,     /* between tokens */
    PROBE_STR,         /* in a string that may be a key */
    PROBE_STR_ESC,     /* after a backslash in such a string */
    PROBE_VAL_FIRST,   /* just inside a content string value */
    PROBE_VAL,         /* in a string value we skip */
    PROBE_VAL_ESC,     /* after a backslash in it */
    PROBE_NUM,         /* in a token count */
    PROBE_TYPE,        /* in an event type's string value */
};

enum {
    PENDING_NONE = 0,
    PENDING_COLON, /* a string just ended: a ':' makes it a key */
    PENDING_VALUE, /* a key we watch was read: the next token is its value */
};

enum {
    WANT_NONE = 0,
    WANT_CONTENT,    /* non-empty string value */
    WANT_TOOL_CALLS, /* array value */
    WANT_COMPLETION_TOKENS,
    WANT_PROMPT_TOKENS,
    WANT_FINISH, /* a string value (not null) ends generation */
    WANT_STOP,   /* true ends generation (llama.cpp's native "stop") */
    WANT_ERROR,  /* an object or string value reports an error */
    WANT_TYPE,   /* a string value may be an event type (Responses, Messages) */
};

/* What an event's type says (lg_json_probe.kind). */
enum {
    KIND_NONE = 0, /* no type of these APIs: the keys alone say what the event is */
    KIND_DELTA,    /* response.*.delta, content_block_delta: content */
    KIND_OTHER,    /* another event of theirs: no content, whatever text it repeats */
    KIND_END,      /* response.completed, .incomplete, .failed, message_stop: the end */
    KIND_ERROR,    /* "error": either API's error event */
};

/*
 * The keys we watch, by length: a string is looked up once, at its closing
 * quote, and most strings of a chunk ("id", "object", "index", values) fail
 * on their length alone. Where each engine writes them: sse.h.
 */
static uint8_t
probe_lookup(const char *k, size_t n)
{
    switch (n) {
    case 4:
        if (memcmp(k, "text", 4) == 0) {
            return WANT_CONTENT;
        }
        if (memcmp(k, "type", 4) == 0) {
            return WANT_TYPE;
        }
        return memcmp(k, "stop", 4) == 0 ? WANT_STOP : WANT_NONE;
    case 5:
        return memcmp(k, "error", 5) == 0 ? WANT_ERROR : WANT_NONE;
    case 7:
        return memcmp(k, "content", 7) == 0 ? WANT_CONTENT : WANT_NONE;
    case 9:
        return memcmp(k, "reasoning", 9) == 0 ? WANT_CONTENT : WANT_NONE;
    case 10:
        return memcmp(k, "tool_calls", 10) == 0 ? WANT_TOOL_CALLS : WANT_NONE;
    case 12:
        if (memcmp(k, "input_tokens", 12) == 0) {
            return WANT_PROMPT_TOKENS;
        }
        return memcmp(k, "input_length", 12) == 0 ? WANT_PROMPT_TOKENS : WANT_NONE;
    case 13:
        if (memcmp(k, "prompt_tokens", 13) == 0) {
            return WANT_PROMPT_TOKENS;
        }
        if (memcmp(k, "output_tokens", 13) == 0) {
            return WANT_COMPLETION_TOKENS;
        }
        return memcmp(k, "finish_reason", 13) == 0 ? WANT_FINISH : WANT_NONE;
    case 14:
        return memcmp(k, "generated_text", 14) == 0 ? WANT_FINISH : WANT_NONE;
    case 16:
        if (memcmp(k, "generated_tokens", 16) == 0 || memcmp(k, "tokens_predicted", 16) == 0) {
            return WANT_COMPLETION_TOKENS;
        }
        return memcmp(k, "tokens_evaluated", 16) == 0 ? WANT_PROMPT_TOKENS : WANT_NONE;
    case 17:
        if (memcmp(k, "reasoning_content", 17) == 0) {
            return WANT_CONTENT;
        }
        return memcmp(k, "completion_tokens", 17) == 0 ? WANT_COMPLETION_TOKENS : WANT_NONE;
    default:
        return WANT_NONE;
    }
}

/* What an event type says: one of the Responses API's or Anthropic's, or KIND_NONE. */
static uint8_t
probe_kind(const char *t, size_t n)
{
    static const char resp[] = "response.", delta[] = ".delta";
    static const struct {
        const char *name;
        uint8_t kind;
    } msgs[] = {
        { "content_block_delta", KIND_DELTA }, { "message_stop", KIND_END },
        { "message_start", KIND_OTHER },       { "message_delta", KIND_OTHER },
        { "content_block_start", KIND_OTHER }, { "content_block_stop", KIND_OTHER },
        { "ping", KIND_OTHER },                { "error", KIND_ERROR },
        { "response.completed", KIND_END },    { "response.incomplete", KIND_END },
        { "response.failed", KIND_END },
    };

    for (size_t i = 0; i < LG_ARRAY_SIZE(msgs); i++) {
        if (strlen(msgs[i].name) == n && memcmp(t, msgs[i].name, n) == 0) {
            return msgs[i].kind;
        }
    }
    if (n > sizeof(resp) - 1 && memcmp(t, resp, sizeof(resp) - 1) == 0) {
        return n > sizeof(resp) - 1 + sizeof(delta) - 1
                       && memcmp(t + n - (sizeof(delta) - 1), delta, sizeof(delta) - 1) == 0
                   ? KIND_DELTA
                   : KIND_OTHER;
    }
    return KIND_NONE;
}

/* The event's flags, from what its keys said and what its type says. */
static void
probe_settle(struct lg_json_probe *p)
{
    switch (p->kind) {
    case KIND_NONE:
        p->content = p->raw_content;
        break;
    case KIND_DELTA:
        p->content = true;
        break;
    default:
        p->content = false;
        break;
    }
    p->finished = p->raw_finished || p->kind == KIND_END;
    p->error = p->raw_error || p->kind == KIND_ERROR;
    p->whole = p->kind == KIND_END && p->raw_content;
}

/* A type value ended: the first of these APIs' types is the event's. */
static void
probe_end_type(struct lg_json_probe *p)
{
    p->state = PROBE_OUT;
    if (p->kind == KIND_NONE && !p->type_over) {
        p->kind = probe_kind(p->type, p->type_len);
        probe_settle(p);
    }
}

void
lg_json_probe_init(struct lg_json_probe *p)
{
    memset(p, 0, sizeof(*p));
    p->completion_tokens = -1;
    p->prompt_tokens = -1;
}

void
lg_json_probe_reset(struct lg_json_probe *p)
{
    int64_t ct = p->completion_tokens, pt = p->prompt_tokens;

    lg_json_probe_init(p);
    p->completion_tokens = ct;
    p->prompt_tokens = pt;
}

static void
probe_end_number(struct lg_json_probe *p)
{
    if (p->want == WANT_COMPLETION_TOKENS) {
        p->completion_tokens = p->num;
    } else if (p->want == WANT_PROMPT_TOKENS) {
        p->prompt_tokens = p->num;
    }
    p->want = WANT_NONE;
    p->state = PROBE_OUT;
}

/* One byte between tokens. */
static inline void
probe_out(struct lg_json_probe *p, char c)
{
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        return;
    }
    if (p->pending == PENDING_VALUE) {
        p->pending = PENDING_NONE;
        if (c == '"' && p->want == WANT_CONTENT) {
            p->state = PROBE_VAL_FIRST;
            return;
        }
        if (c == '"' && p->want == WANT_TYPE) {
            p->want = WANT_NONE;
            p->state = PROBE_TYPE;
            p->type_len = 0;
            p->type_over = false;
            return;
        }
        if (c == '[' && p->want == WANT_TOOL_CALLS) {
            p->raw_content = true;
            probe_settle(p);
        } else if ((c == '"' && p->want == WANT_FINISH) || (c == 't' && p->want == WANT_STOP)) {
            p->raw_finished = true;
            probe_settle(p);
        } else if ((c == '{' || c == '"') && p->want == WANT_ERROR) {
            p->raw_error = true;
            probe_settle(p);
        } else if (c >= '0' && c <= '9'
                   && (p->want == WANT_COMPLETION_TOKENS || p->want == WANT_PROMPT_TOKENS)) {
            p->num = c - '0';
            p->state = PROBE_NUM;
            return;
        }
        p->want = WANT_NONE;
        if (c != '"') {
            return;
        }
        /* a string value we do not watch: read it like any string */
    }
    if (c == '"') {
        p->state = PROBE_STR;
        p->key_len = 0;
        p->key_overflow = false;
        p->pending = PENDING_NONE;
        return;
    }
    if (c == ':' && p->pending == PENDING_COLON) {
        p->want = p->key_want;
        p->pending = p->want != WANT_NONE ? PENDING_VALUE : PENDING_NONE;
        return;
    }
    p->pending = PENDING_NONE;
}

/*
 * Index of the first byte equal to a or b in data[i, len), or len: sixteen
 * (SSE2) or eight (any 64-bit word) bytes at a time, as most of a body is the
 * inside of strings that only their closing quote (or a backslash) ends.
 */
static inline size_t
sse_find2(const char *data, size_t i, size_t len, char a, char b)
{
#ifdef __SSE2__
    const __m128i va = _mm_set1_epi8(a), vb = _mm_set1_epi8(b);

    while (len - i >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(data + i));
        unsigned m = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(x, va), _mm_cmpeq_epi8(x, vb)));

        if (m != 0) {
            return i + (size_t)__builtin_ctz(m);
        }
        i += 16;
    }
#endif
    while (len - i >= 8) {
        uint64_t x, m;

        memcpy(&x, data + i, 8);
        m = lg_swar_eq(x, (unsigned char)a) | lg_swar_eq(x, (unsigned char)b);
        if (m != 0) {
            return i + lg_swar_first(m);
        }
        i += 8;
    }
    while (i < len && data[i] != a && data[i] != b) {
        i++;
    }
    return i;
}

/*
 * A string ended at data[j] (its closing quote) with what it means as a key.
 * The byte after it, when it is in this read and the usual one, is taken at
 * once: a ':' makes the string a key, a ',', '}' or ']' ends a value.
 */
static inline size_t
probe_string_end(struct lg_json_probe *p, const char *data, size_t j, size_t len, uint8_t want)
{
    p->state = PROBE_OUT;
    if (j + 1 < len) {
        char c = data[j + 1];

        if (c == ':') {
            p->want = want;
            p->pending = want != WANT_NONE ? PENDING_VALUE : PENDING_NONE;
            return j + 2;
        }
        if (c == ',' || c == '}' || c == ']') {
            p->pending = PENDING_NONE;
            return j + 2;
        }
    }
    p->key_want = want;
    p->pending = PENDING_COLON;
    return j + 1;
}

/*
 * A string (key or not) runs on from data[i]. A string that ends in this read
 * is looked up where it lies; one split across reads keeps its first bytes in
 * p->key (a key of ours is short). Returns where to go on.
 */
static inline size_t
probe_string(struct lg_json_probe *p, const char *data, size_t i, size_t len)
{
    size_t j = sse_find2(data, i, len, '"', '\\');

    if (!p->key_overflow && j > i) {
        if (p->key_len == 0 && j < len && data[j] == '"') {
            /* whole, in place */
            return probe_string_end(p, data, j, len, probe_lookup(data + i, j - i));
        }
        size_t k = LG_MIN(j - i, (size_t)(LG_JSON_KEY_MAX - p->key_len));

        memcpy(p->key + p->key_len, data + i, k);
        p->key_len = (uint8_t)(p->key_len + k);
        p->key_overflow = k < j - i;
    }
    if (j == len) {
        return len;
    }
    if (data[j] == '\\') {
        p->state = PROBE_STR_ESC;
        p->key_overflow = true; /* none of our keys has escapes */
        return j + 1;
    }
    return probe_string_end(p, data, j, len,
                            p->key_overflow ? WANT_NONE : probe_lookup(p->key, p->key_len));
}

void
lg_json_probe_feed(struct lg_json_probe *p, const char *data, size_t len)
{
    size_t i = 0;

    while (i < len) {
        char c;

        switch (p->state) {
        case PROBE_OUT:
            if (p->pending == PENDING_NONE) {
                /* between tokens with nothing pending only a quote matters */
                i = sse_find2(data, i, len, '"', '"');
                if (i == len) {
                    return;
                }
            }
            probe_out(p, data[i++]);
            break;
        case PROBE_STR:
            i = probe_string(p, data, i, len);
            break;
        case PROBE_STR_ESC:
            p->state = PROBE_STR;
            i++;
            break;
        case PROBE_VAL_FIRST:
            c = data[i++];
            p->want = WANT_NONE;
            if (c == '"') {
                p->state = PROBE_OUT; /* "" carries nothing */
            } else {
                p->raw_content = true;
                probe_settle(p);
                p->state = c == '\\' ? PROBE_VAL_ESC : PROBE_VAL;
            }
            break;
        case PROBE_TYPE: {
            /* an event type: captured whole (none of ours has an escape) */
            size_t j = sse_find2(data, i, len, '"', '\\');
            size_t k = LG_MIN(j - i, sizeof(p->type) - p->type_len);

            memcpy(p->type + p->type_len, data + i, k);
            p->type_len = (uint8_t)(p->type_len + k);
            p->type_over |= k < j - i;
            if (j == len) {
                return;
            }
            if (data[j] == '\\') {
                p->type_over = true;
                p->state = PROBE_VAL_ESC; /* the rest of it is skipped */
            } else {
                probe_end_type(p);
            }
            i = j + 1;
            break;
        }
        case PROBE_VAL:
            /* a value we only skip: jump to its end or next escape */
            i = sse_find2(data, i, len, '"', '\\');
            if (i == len) {
                return;
            }
            p->state = data[i++] == '"' ? PROBE_OUT : PROBE_VAL_ESC;
            break;
        case PROBE_VAL_ESC:
            p->state = PROBE_VAL;
            i++;
            break;
        case PROBE_NUM:
            c = data[i];
            if (c >= '0' && c <= '9') {
                if (p->num < (INT64_MAX - 9) / 10) {
                    p->num = p->num * 10 + (c - '0');
                }
                i++;
            } else {
                probe_end_number(p); /* and c is read between tokens */
            }
            break;
        default:
            p->state = PROBE_OUT;
            break;
        }
    }
}

/* ---- SSE scanner -------------------------------------------------------- */

enum {
    LINE_START = 0, /* first byte of a line */
    LINE_FIELD,     /* reading the field name */
    LINE_VALUE,     /* in a data value */
    LINE_SKIP,      /* in a line we ignore */
};

static const char sse_done[] = "[DONE]";
#define SSE_DONE_LEN  6
#define SSE_NO_MATCH  0xff

void
lg_sse_init(struct lg_sse *s)
{
    memset(s, 0, sizeof(*s));
    lg_json_probe_init(&s->probe);
}

/*
 * An `error:` field line: llama.cpp's server framed a failure after the
 * status line that way (`error: {"code":500,...}`) before it moved to
 * `data: {"error": ...}`. Event-stream parsers ignore the unknown field, so
 * the event carries no data, but it is the engine's error all the same.
 */
static bool
sse_field_is_error(const struct lg_sse *s)
{
    return s->field_len == 5 && memcmp(s->field, "error", 5) == 0;
}

/* Bytes of the current event's data: to the probe, and to the tap. */
static inline void
sse_data(struct lg_sse *s, const char *p, size_t n)
{
    lg_json_probe_feed(&s->probe, p, n);
    if (s->tap != NULL) {
        s->tap->data(s->tap, p, n);
    }
}

/* The per-event state, back to the start of an event. */
static void
sse_event_reset(struct lg_sse *s)
{
    s->ev_data = false;
    s->ev_done = false;
    s->ev_error = false;
    lg_json_probe_reset(&s->probe);
}

/*
 * A line ended at data[end - 1]. Returns 1 if it was the blank line that
 * ends an event with content.
 */
static unsigned
sse_end_line(struct lg_sse *s, size_t end)
{
    unsigned got = 0, what = 0;

    switch (s->line_state) {
    case LINE_START: /* blank line: dispatch the event */
        if (s->ev_data) {
            bool error = s->probe.error;

            s->events++;
            what |= LG_SSE_EV_DATA;
            if ((s->probe.content || (s->probe.whole && s->content_events == 0)) && !s->ev_done
                && !error) {
                s->content_events++;
                got = 1;
                what |= LG_SSE_EV_CONTENT;
            }
            if (s->ev_done) {
                s->done = true;
                what |= LG_SSE_EV_DONE;
            }
            if (s->probe.finished) {
                s->finished = true;
                what |= LG_SSE_EV_FINISHED;
            }
            s->ev_error |= error;
        }
        if (s->ev_error) {
            s->error_events++;
            what |= LG_SSE_EV_ERROR;
        }
        sse_event_reset(s);
        if (s->tap != NULL) {
            s->tap->event(s->tap, end, what);
        }
        break;
    case LINE_FIELD: /* a field with no colon: "data" alone is an empty data line */
        if (s->field_len == 4 && memcmp(s->field, "data", 4) == 0) {
            if (s->ev_data) {
                sse_data(s, "\n", 1);
            }
            s->ev_data = true;
        } else if (sse_field_is_error(s)) {
            s->ev_error = true;
        }
        break;
    case LINE_VALUE:
        if (s->done_match == SSE_DONE_LEN) {
            s->ev_done = true;
        }
        break;
    default:
        break;
    }
    s->line_state = LINE_START;
    s->field_len = 0;
    return got;
}

static void
sse_start_value(struct lg_sse *s)
{
    if (s->ev_data) {
        sse_data(s, "\n", 1); /* data lines join with LF */
    }
    s->ev_data = true;
    s->done_match = 0;
    s->value_started = false;
    s->line_state = LINE_VALUE;
}

unsigned
lg_sse_feed(struct lg_sse *s, const char *data, size_t len)
{
    unsigned got = 0;
    size_t i = 0;

    while (i < len) {
        char c = data[i];

        if (s->after_cr) {
            s->after_cr = false;
            if (c == '\n') {
                i++;
                continue;
            }
        }
        if (c == '\r' || c == '\n') {
            s->after_cr = c == '\r';
            got += sse_end_line(s, i + 1);
            i++;
            continue;
        }
        switch (s->line_state) {
        case LINE_START:
            if (c == ':') {
                s->line_state = LINE_SKIP; /* comment */
                i++;
                break;
            }
            s->line_state = LINE_FIELD;
            s->field_len = 0;
            break; /* reprocess c as a field byte */
        case LINE_FIELD:
            if (c == ':') {
                if (s->field_len == 4 && memcmp(s->field, "data", 4) == 0) {
                    sse_start_value(s);
                } else {
                    s->ev_error |= sse_field_is_error(s);
                    s->line_state = LINE_SKIP;
                }
            } else if (s->field_len < sizeof(s->field)) {
                s->field[s->field_len++] = c;
            } else {
                s->line_state = LINE_SKIP;
            }
            i++;
            break;
        case LINE_VALUE: {
            /* The value runs to the end of the line or of this read. */
            size_t j = sse_find2(data, i, len, '\r', '\n');

            if (!s->value_started && data[i] == ' ') {
                i++; /* one leading space is not part of the value (may come in a later read) */
            }
            s->value_started = true;
            for (size_t k = i; k < j && s->done_match != SSE_NO_MATCH; k++) {
                if (s->done_match < SSE_DONE_LEN && data[k] == sse_done[s->done_match]) {
                    s->done_match++;
                } else {
                    s->done_match = SSE_NO_MATCH;
                }
            }
            sse_data(s, data + i, j - i);
            i = j;
            break;
        }
        default: /* LINE_SKIP */
            i++;
            break;
        }
    }
    return got;
}

void
lg_sse_event_drop(struct lg_sse *s)
{
    s->line_state = LINE_START;
    s->after_cr = false;
    s->field_len = 0;
    sse_event_reset(s);
}
