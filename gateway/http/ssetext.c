/*
 * ssetext.c: the text an OpenAI stream delivered, from its events' JSON
 * (see ssetext.h).
 *
 * A lexer that keeps what it needs of the structure and nothing else: a
 * stack of the containers open, each one's kind (the root object, its
 * "choices" array, a choice, a choice's "delta", a delta's "tool_calls", or
 * any other), whether an object expects a key, and the key of the member
 * being read. A string is what its place makes it: text to keep (a delta's
 * "content", a choice's "text"), something that ends resumption (a
 * reasoning string), a key, or something to skip. It does not validate JSON
 * beyond what it needs: the engine's JSON passes to the client unchanged,
 * and what the client could not read is no text it received.
 *
 * Owns: the text buffer, grown by doubling up to max, freed (and the text
 * dropped) as soon as a flag says the stream cannot be continued from it.
 * Every byte is looked at once, whatever the split: a unit test and the fuzz
 * target feed every split and compare.
 */
#include "http/ssetext.h"

#include <stdlib.h>
#include <string.h>

enum {
    ST_VALUE = 0, /* between tokens */
    ST_STR,       /* in a string */
    ST_ESC,       /* after a backslash in it */
    ST_UHEX,      /* in the four digits of \uXXXX */
    ST_SCALAR,    /* in a number, true, false or null */
    ST_BAD,       /* no JSON: the rest of the event is ignored */
};

/* What a string is. */
enum {
    STR_SKIP = 0,
    STR_KEY,
    STR_TEXT, /* delivered text */
    STR_FLAG, /* not empty: the stream generated something that is not text */
};

/* What a container is. */
enum {
    K_OBJ = 0, /* any other object */
    K_ARR,     /* any other array */
    K_ROOT,    /* the event's object */
    K_CHOICES, /* its "choices" */
    K_CHOICE,  /* one of them */
    K_DELTA,   /* a choice's "delta" */
    K_TOOLS,   /* a delta's "tool_calls" */
};

/* The keys read. */
enum {
    KEY_NONE = 0,
    KEY_CHOICES,
    KEY_DELTA,
    KEY_TEXT,
    KEY_CONTENT,
    KEY_INDEX,
    KEY_REASONING, /* "reasoning" and "reasoning_content" */
    KEY_TOOL_CALLS,
    KEY_FUNCTION_CALL,
};

/* Scalar being read. */
enum {
    SCALAR_SKIP = 0,
    SCALAR_INDEX, /* a choice's index: anything but 0 is another choice */
};

#define SSETEXT_MIN_CAP 256

static bool
kind_is_object(uint8_t k)
{
    return k == K_OBJ || k == K_ROOT || k == K_CHOICE || k == K_DELTA;
}

static uint8_t
ssetext_key(const char *k, size_t n)
{
    switch (n) {
    case 4:
        return memcmp(k, "text", 4) == 0 ? KEY_TEXT : KEY_NONE;
    case 5:
        if (memcmp(k, "delta", 5) == 0) {
            return KEY_DELTA;
        }
        return memcmp(k, "index", 5) == 0 ? KEY_INDEX : KEY_NONE;
    case 7:
        if (memcmp(k, "choices", 7) == 0) {
            return KEY_CHOICES;
        }
        return memcmp(k, "content", 7) == 0 ? KEY_CONTENT : KEY_NONE;
    case 9:
        return memcmp(k, "reasoning", 9) == 0 ? KEY_REASONING : KEY_NONE;
    case 10:
        return memcmp(k, "tool_calls", 10) == 0 ? KEY_TOOL_CALLS : KEY_NONE;
    case 13:
        return memcmp(k, "function_call", 13) == 0 ? KEY_FUNCTION_CALL : KEY_NONE;
    case 17:
        return memcmp(k, "reasoning_content", 17) == 0 ? KEY_REASONING : KEY_NONE;
    default:
        return KEY_NONE;
    }
}

void
lg_ssetext_init(struct lg_ssetext *t, size_t max)
{
    memset(t, 0, sizeof(*t));
    t->max = max;
}

void
lg_ssetext_free(struct lg_ssetext *t)
{
    free(t->buf);
    t->buf = NULL;
    t->len = t->committed = t->cap = 0;
}

/* The text cannot be continued from: it is dropped, and nothing more is read. */
static void
ssetext_flag(struct lg_ssetext *t, unsigned flag)
{
    t->flags |= flag;
    lg_ssetext_free(t);
    t->state = ST_BAD;
}

static void
ssetext_append(struct lg_ssetext *t, const char *p, size_t n)
{
    if (n > t->max - t->len) {
        ssetext_flag(t, LG_SSETEXT_F_FULL);
        return;
    }
    if (t->len + n > t->cap) {
        size_t cap = t->cap ? t->cap : SSETEXT_MIN_CAP;

        while (cap < t->len + n) {
            cap *= 2;
        }
        cap = LG_MIN(cap, LG_MAX(t->max, (size_t)1));
        t->buf = lg_xrealloc(t->buf, cap);
        t->cap = cap;
    }
    memcpy(t->buf + t->len, p, n);
    t->len += n;
}

/* A code point from \uXXXX (a pair joined) as UTF-8. */
static void
ssetext_code_point(struct lg_ssetext *t, uint32_t cp)
{
    char u[4];
    size_t n;

    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    ssetext_append(t, u, n);
}

/* The four digits of \uXXXX are read: a character, a pair's half, or no text. */
static void
ssetext_escape_done(struct lg_ssetext *t)
{
    uint32_t cp = t->esc_cp;

    if (t->high != 0) {
        if (cp < 0xdc00 || cp > 0xdfff) {
            ssetext_flag(t, LG_SSETEXT_F_BAD); /* a high surrogate alone */
            return;
        }
        cp = 0x10000 + ((t->high - 0xd800) << 10) + (cp - 0xdc00);
        t->high = 0;
    } else if (cp >= 0xd800 && cp <= 0xdbff) {
        t->high = cp; /* its low half must follow at once */
        return;
    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
        ssetext_flag(t, LG_SSETEXT_F_BAD); /* a low surrogate alone */
        return;
    }
    ssetext_code_point(t, cp);
}

static size_t ssetext_scalar(struct lg_ssetext *t, const char *data, size_t i, size_t len);

static uint8_t
ssetext_parent(const struct lg_ssetext *t)
{
    return t->depth == 0 ? K_ARR : t->kind[t->depth - 1];
}

/* A value begins with c in the current container: what it is. */
static inline void
ssetext_value_start(struct lg_ssetext *t, char c)
{
    uint8_t p = ssetext_parent(t);
    uint8_t k = kind_is_object(p) ? t->key : KEY_NONE;

    if (p == K_TOOLS || (p == K_DELTA && k == KEY_FUNCTION_CALL && c == '{')) {
        ssetext_flag(t, LG_SSETEXT_F_OTHER); /* a tool call */
        return;
    }
    if (p == K_CHOICES) {
        if (t->choice_seen) {
            ssetext_flag(t, LG_SSETEXT_F_OTHER); /* more than one choice */
            return;
        }
        t->choice_seen = true;
    }
    if (c == '{' || c == '[') {
        uint8_t kind = c == '{' ? K_OBJ : K_ARR;

        if (t->depth >= LG_SSETEXT_DEPTH) {
            ssetext_flag(t, LG_SSETEXT_F_BAD);
            return;
        }
        if (c == '{' && t->depth == 0) {
            kind = K_ROOT;
        } else if (c == '[' && p == K_ROOT && k == KEY_CHOICES) {
            kind = K_CHOICES;
        } else if (c == '{' && p == K_CHOICES) {
            kind = K_CHOICE;
        } else if (c == '{' && p == K_CHOICE && k == KEY_DELTA) {
            kind = K_DELTA;
        } else if (c == '[' && p == K_DELTA && k == KEY_TOOL_CALLS) {
            kind = K_TOOLS;
        }
        if (kind == K_CHOICES) {
            t->choice_seen = false;
        }
        t->kind[t->depth++] = kind;
        t->expect_key = c == '{';
        t->key = KEY_NONE;
        return;
    }
    if (c == '"') {
        t->state = ST_STR;
        t->str = STR_SKIP;
        if ((p == K_CHOICE && k == KEY_TEXT) || (p == K_DELTA && k == KEY_CONTENT)) {
            t->str = STR_TEXT;
        } else if (p == K_DELTA && k == KEY_REASONING) {
            t->str = STR_FLAG;
        }
        return;
    }
    t->state = ST_SCALAR;
    t->scalar = p == K_CHOICE && k == KEY_INDEX ? SCALAR_INDEX : SCALAR_SKIP;
    ssetext_scalar(t, &c, 0, 1); /* its first byte */
}

/* One byte between tokens. */
static inline void
ssetext_structure(struct lg_ssetext *t, char c)
{
    switch (c) {
    case ' ':
    case '\t':
    case '\n':
    case '\r':
        return;
    case '}':
    case ']':
        if (t->depth == 0 || kind_is_object(t->kind[t->depth - 1]) != (c == '}')) {
            ssetext_flag(t, LG_SSETEXT_F_BAD);
            return;
        }
        t->depth--;
        t->expect_key = false;
        return;
    case ',':
        t->expect_key = t->depth > 0 && kind_is_object(t->kind[t->depth - 1]);
        t->key = KEY_NONE;
        return;
    case ':':
        t->expect_key = false;
        return;
    case '"':
        if (t->expect_key) {
            t->state = ST_STR;
            t->str = STR_KEY;
            t->key_len = 0;
            t->key_over = false;
            return;
        }
        ssetext_value_start(t, c);
        return;
    default:
        ssetext_value_start(t, c);
        return;
    }
}

/* Index of the first '"' or '\\' in data[i, len), or len: eight bytes at a time. */
static size_t
ssetext_find_quote(const char *data, size_t i, size_t len)
{
    while (len - i >= 8) {
        uint64_t x, m;

        memcpy(&x, data + i, 8);
        m = lg_swar_eq(x, '"') | lg_swar_eq(x, '\\');
        if (m != 0) {
            return i + lg_swar_first(m);
        }
        i += 8;
    }
    while (i < len && data[i] != '"' && data[i] != '\\') {
        i++;
    }
    return i;
}

/* A string's bytes from data[i]: returns where to go on. */
static size_t
ssetext_string(struct lg_ssetext *t, const char *data, size_t i, size_t len)
{
    size_t j;

    if (t->high != 0 && data[i] != '\\') {
        ssetext_flag(t, LG_SSETEXT_F_BAD); /* a high surrogate alone */
        return len;
    }
    j = ssetext_find_quote(data, i, len);
    if (t->str == STR_KEY && t->key_len == 0 && !t->key_over && j < len && data[j] == '"') {
        /* a key whole in these bytes: looked up where it lies */
        t->key = ssetext_key(data + i, j - i);
        t->expect_key = false;
        t->state = ST_VALUE;
        return j + 1;
    }
    if (j > i) {
        if (t->str == STR_TEXT) {
            ssetext_append(t, data + i, j - i);
        } else if (t->str == STR_FLAG) {
            ssetext_flag(t, LG_SSETEXT_F_OTHER); /* reasoning: no text to continue */
            return len;
        } else if (t->str == STR_KEY && !t->key_over) {
            size_t k = LG_MIN(j - i, (size_t)(LG_SSETEXT_KEY_MAX - t->key_len));

            memcpy(t->key_buf + t->key_len, data + i, k);
            t->key_len = (uint8_t)(t->key_len + k);
            t->key_over = t->key_len == LG_SSETEXT_KEY_MAX;
        }
    }
    if (j == len || t->state == ST_BAD) {
        return len;
    }
    if (data[j] == '\\') {
        t->state = ST_ESC;
        if (t->str == STR_KEY) {
            t->key_over = true; /* none of our keys has escapes */
        }
        return j + 1;
    }
    if (t->str == STR_KEY) {
        t->key = t->key_over ? KEY_NONE : ssetext_key(t->key_buf, t->key_len);
        t->expect_key = false;
    }
    t->state = ST_VALUE;
    return j + 1;
}

/* The byte after a backslash. */
static void
ssetext_escape(struct lg_ssetext *t, char c)
{
    static const char from[] = "\"\\/bfnrt";
    static const char to[] = "\"\\/\b\f\n\r\t";
    const char *e;

    t->state = ST_STR;
    if (c == 'u') {
        t->state = ST_UHEX;
        t->esc_n = 0;
        t->esc_cp = 0;
        return;
    }
    if (t->high != 0) {
        ssetext_flag(t, LG_SSETEXT_F_BAD); /* a high surrogate alone */
        return;
    }
    if (t->str == STR_FLAG) {
        ssetext_flag(t, LG_SSETEXT_F_OTHER);
        return;
    }
    if (t->str != STR_TEXT) {
        return;
    }
    e = c != '\0' ? strchr(from, c) : NULL;
    if (e == NULL) {
        ssetext_flag(t, LG_SSETEXT_F_BAD);
        return;
    }
    ssetext_append(t, &to[e - from], 1);
}

static void
ssetext_hex(struct lg_ssetext *t, char c)
{
    uint32_t v;

    if (c >= '0' && c <= '9') {
        v = (uint32_t)(c - '0');
    } else if (c >= 'a' && c <= 'f') {
        v = (uint32_t)(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
        v = (uint32_t)(c - 'A' + 10);
    } else {
        ssetext_flag(t, LG_SSETEXT_F_BAD);
        return;
    }
    t->esc_cp = t->esc_cp << 4 | v;
    if (++t->esc_n < 4) {
        return;
    }
    t->state = ST_STR;
    if (t->str == STR_TEXT) {
        ssetext_escape_done(t);
    } else if (t->str == STR_FLAG) {
        ssetext_flag(t, LG_SSETEXT_F_OTHER);
    }
}

/* The bytes that end a number, true, false or null. */
static const bool ssetext_delim[256] = {
    [' '] = true, ['\t'] = true, ['\n'] = true, ['\r'] = true, [','] = true, ['}'] = true,
    [']'] = true, [':'] = true,  ['"'] = true,  ['{'] = true,  ['['] = true,
};

/*
 * A scalar's bytes from data[i]: returns where it ends (that byte is read
 * between tokens) or len. A choice's index must be 0.
 */
static size_t
ssetext_scalar(struct lg_ssetext *t, const char *data, size_t i, size_t len)
{
    for (; i < len; i++) {
        if (ssetext_delim[(unsigned char)data[i]]) {
            t->state = ST_VALUE;
            return i;
        }
        if (t->scalar == SCALAR_INDEX && data[i] != '0') {
            ssetext_flag(t, LG_SSETEXT_F_OTHER); /* a second choice: n > 1 */
            return len;
        }
    }
    return len;
}

void
lg_ssetext_feed(struct lg_ssetext *t, const char *data, size_t len)
{
    size_t i = 0;

    while (i < len && t->state != ST_BAD) {
        switch (t->state) {
        case ST_VALUE:
            do { /* between tokens: the structure, byte by byte */
                ssetext_structure(t, data[i++]);
            } while (i < len && t->state == ST_VALUE);
            break;
        case ST_STR:
            i = ssetext_string(t, data, i, len);
            break;
        case ST_ESC:
            ssetext_escape(t, data[i++]);
            break;
        case ST_UHEX:
            ssetext_hex(t, data[i++]);
            break;
        default: /* ST_SCALAR */
            i = ssetext_scalar(t, data, i, len);
            break;
        }
    }
}

static void
ssetext_reset(struct lg_ssetext *t)
{
    if (t->flags == 0) {
        t->state = ST_VALUE;
    }
    t->depth = 0;
    t->key = KEY_NONE;
    t->expect_key = false;
    t->high = 0;
}

size_t
lg_ssetext_event_end(struct lg_ssetext *t)
{
    size_t added;

    if (t->flags == 0 && (t->depth != 0 || (t->state != ST_VALUE && t->state != ST_SCALAR))) {
        ssetext_flag(t, LG_SSETEXT_F_BAD); /* a JSON value cut short: the client could not read it */
    }
    added = t->len - t->committed;
    t->committed = t->len;
    if (added > 0) {
        t->events++;
    }
    ssetext_reset(t);
    return added;
}

void
lg_ssetext_event_drop(struct lg_ssetext *t)
{
    t->len = t->committed;
    ssetext_reset(t);
}
