/*
 * sse.c: incremental SSE scanner and JSON key probe (see sse.h).
 *
 * Owns nothing; all state lives in the caller's struct. Every byte is looked
 * at once, in one pass, whatever the read boundaries: a unit test feeds
 * streams split at every offset and compares the results.
 */
#include <string.h>

#include "sse.h"

/* ---- JSON probe --------------------------------------------------------- */

enum {
    PROBE_OUT = 0,     /* between tokens */
    PROBE_STR,         /* in a string that may be a key */
    PROBE_STR_ESC,     /* after a backslash in such a string */
    PROBE_VAL_FIRST,   /* just inside a content string value */
    PROBE_VAL,         /* in a string value we skip */
    PROBE_VAL_ESC,     /* after a backslash in it */
    PROBE_NUM,         /* in a token count */
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
};

#define PROBE_KEY(k, w) { k, sizeof(k) - 1, w }

static const struct {
    const char *key;
    uint8_t len;
    uint8_t want;
} probe_keys[] = {
    PROBE_KEY("content", WANT_CONTENT),
    PROBE_KEY("text", WANT_CONTENT),
    PROBE_KEY("reasoning_content", WANT_CONTENT),
    PROBE_KEY("reasoning", WANT_CONTENT),
    PROBE_KEY("tool_calls", WANT_TOOL_CALLS),
    PROBE_KEY("completion_tokens", WANT_COMPLETION_TOKENS),
    PROBE_KEY("prompt_tokens", WANT_PROMPT_TOKENS),
};

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

static uint8_t
probe_lookup(const struct lg_json_probe *p)
{
    if (p->key_overflow) {
        return WANT_NONE;
    }
    for (size_t i = 0; i < LG_ARRAY_SIZE(probe_keys); i++) {
        if (probe_keys[i].len == p->key_len
            && memcmp(probe_keys[i].key, p->key, p->key_len) == 0) {
            return probe_keys[i].want;
        }
    }
    return WANT_NONE;
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
static void
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
        if (c == '[' && p->want == WANT_TOOL_CALLS) {
            p->content = true;
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
        p->want = probe_lookup(p);
        p->pending = p->want != WANT_NONE ? PENDING_VALUE : PENDING_NONE;
        return;
    }
    p->pending = PENDING_NONE;
}

/*
 * Index of the first byte equal to a or b in data[i, len), or len: eight
 * bytes at a time, as most of a body is the inside of string values that
 * only their closing quote (or a backslash) ends.
 */
static inline size_t
sse_find2(const char *data, size_t i, size_t len, char a, char b)
{
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    const uint64_t ma = ones * (unsigned char)a, mb = ones * (unsigned char)b;

    while (len - i >= 8) {
        uint64_t x, xa, xb, m;

        memcpy(&x, data + i, 8);
        xa = x ^ ma;
        xb = x ^ mb;
        /* the lowest flagged byte is a true match (borrows only run upwards) */
        m = (((xa - ones) & ~xa) | ((xb - ones) & ~xb)) & high;
        if (m != 0) {
            return i + ((size_t)__builtin_ctzll(m) >> 3);
        }
        i += 8;
    }
    while (i < len && data[i] != a && data[i] != b) {
        i++;
    }
    return i;
}

void
lg_json_probe_feed(struct lg_json_probe *p, const char *data, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c;

        if (p->state == PROBE_VAL || p->state == PROBE_STR) {
            /* inside a string: jump to the next quote or escape, keeping
             * what a key needs of the bytes passed over */
            size_t j = sse_find2(data, i, len, '"', '\\');

            if (p->state == PROBE_STR && !p->key_overflow && j > i) {
                size_t k = LG_MIN(j - i, (size_t)(LG_JSON_KEY_MAX - p->key_len));

                memcpy(p->key + p->key_len, data + i, k);
                p->key_len = (uint8_t)(p->key_len + k);
                p->key_overflow = k < j - i;
            }
            i = j;
            if (i == len) {
                break;
            }
        } else if (p->state == PROBE_OUT && p->pending == PENDING_NONE) {
            /* between tokens with nothing pending only a quote matters */
            i = sse_find2(data, i, len, '"', '"');
            if (i == len) {
                break;
            }
        }
        c = data[i];
        switch (p->state) {
        case PROBE_OUT:
            probe_out(p, c);
            break;
        case PROBE_STR:
            if (c == '"') {
                p->state = PROBE_OUT;
                p->pending = PENDING_COLON;
            } else if (c == '\\') {
                p->state = PROBE_STR_ESC;
                p->key_overflow = true; /* none of our keys has escapes */
            } else if (p->key_len < LG_JSON_KEY_MAX) {
                p->key[p->key_len++] = c;
            } else {
                p->key_overflow = true;
            }
            break;
        case PROBE_STR_ESC:
            p->state = PROBE_STR;
            break;
        case PROBE_VAL_FIRST:
            p->want = WANT_NONE;
            if (c == '"') {
                p->state = PROBE_OUT; /* "" carries nothing */
            } else {
                p->content = true;
                p->state = c == '\\' ? PROBE_VAL_ESC : PROBE_VAL;
            }
            break;
        case PROBE_VAL:
            if (c == '"') {
                p->state = PROBE_OUT;
            } else if (c == '\\') {
                p->state = PROBE_VAL_ESC;
            }
            break;
        case PROBE_VAL_ESC:
            p->state = PROBE_VAL;
            break;
        case PROBE_NUM:
            if (c >= '0' && c <= '9') {
                if (p->num < (INT64_MAX - 9) / 10) {
                    p->num = p->num * 10 + (c - '0');
                }
            } else {
                probe_end_number(p);
                probe_out(p, c);
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

/* A line ended. Returns 1 if it was the blank line that ends an event with content. */
static unsigned
sse_end_line(struct lg_sse *s)
{
    unsigned got = 0;

    switch (s->line_state) {
    case LINE_START: /* blank line: dispatch the event */
        if (s->ev_data) {
            s->events++;
            if (s->probe.content && !s->ev_done) {
                s->content_events++;
                got = 1;
            }
            if (s->ev_done) {
                s->done = true;
            }
        }
        s->ev_data = false;
        s->ev_done = false;
        lg_json_probe_reset(&s->probe);
        break;
    case LINE_FIELD: /* a field with no colon: "data" alone is an empty data line */
        if (s->field_len == 4 && memcmp(s->field, "data", 4) == 0) {
            if (s->ev_data) {
                lg_json_probe_feed(&s->probe, "\n", 1);
            }
            s->ev_data = true;
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
        lg_json_probe_feed(&s->probe, "\n", 1); /* data lines join with LF */
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
            got += sse_end_line(s);
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
            lg_json_probe_feed(&s->probe, data + i, j - i);
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
