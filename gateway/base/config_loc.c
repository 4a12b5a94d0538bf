/*
 * config_loc.c: JSON pointer -> line:column in raw JSON text. jansson values
 * carry no source position, so semantic config errors find theirs here.
 * Owns nothing; borrows the text and the pointer for the duration of a call.
 * Invariants: never recurses (containers are skipped by counting brackets)
 * and never reads at or past len; on text that is not JSON it finds less,
 * but always terminates (each loop step consumes a byte or gives up).
 */
#include "base/config_loc.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/lg_core.h"

struct loc_scan {
    const char *text;
    size_t len;
    size_t pos;
};

static bool
loc_at(const struct loc_scan *s, char c)
{
    return s->pos < s->len && s->text[s->pos] == c;
}

static bool
loc_is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Characters a JSON value can start with (RFC 8259 section 3). */
static bool
loc_at_value(const struct loc_scan *s)
{
    char c;

    if (s->pos >= s->len) {
        return false;
    }
    c = s->text[s->pos];
    return c == '{' || c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't'
           || c == 'f' || c == 'n';
}

static void
loc_skip_ws(struct loc_scan *s)
{
    while (s->pos < s->len && loc_is_ws(s->text[s->pos])) {
        s->pos++;
    }
}

/* At an opening quote: moves past the closing one (or to the end of text). */
static void
loc_skip_string(struct loc_scan *s)
{
    s->pos++;
    while (s->pos < s->len) {
        char c = s->text[s->pos++];

        if (c == '"') {
            return;
        }
        if (c == '\\' && s->pos < s->len) {
            s->pos++;
        }
    }
}

/* At the first character of a value: moves past it, never past the end of
 * the container that holds it. */
static void
loc_skip_value(struct loc_scan *s)
{
    size_t depth = 0;

    do {
        if (s->pos >= s->len) {
            return;
        }
        switch (s->text[s->pos]) {
        case '"':
            loc_skip_string(s);
            break;
        case '{':
        case '[':
            depth++;
            s->pos++;
            break;
        case '}':
        case ']':
            if (depth == 0) {
                return;
            }
            depth--;
            s->pos++;
            break;
        default:
            if (depth > 0) {
                s->pos++;
                break;
            }
            /* a scalar: runs to the next delimiter */
            while (s->pos < s->len && !loc_is_ws(s->text[s->pos])
                   && strchr(",:[]{}\"", s->text[s->pos]) == NULL) {
                s->pos++;
            }
            return;
        }
    } while (depth > 0);
}

static int
loc_hex4(const struct loc_scan *s, size_t at, unsigned *out)
{
    unsigned v = 0;

    if (at > s->len || s->len - at < 4) {
        return -1;
    }
    for (size_t i = 0; i < 4; i++) {
        char c = s->text[at + i];

        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= (unsigned)(c - '0');
        } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
            v |= (unsigned)((c | 0x20) - 'a' + 10);
        } else {
            return -1;
        }
    }
    *out = v;
    return 0;
}

static int
loc_utf8(unsigned cp, unsigned char out[4])
{
    if (cp < 0x80) {
        out[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (unsigned char)(0xc0 | (cp >> 6));
        out[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | (cp >> 12));
        out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | (cp >> 18));
    out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Inside a string: decodes the next character into out. Returns its length
 * in bytes, 0 at the closing quote, -1 at the end of text or a bad \u. */
static int
loc_str_next(struct loc_scan *s, unsigned char out[4])
{
    static const char esc_in[] = "bfnrt";
    static const char esc_out[] = "\b\f\n\r\t";
    unsigned cp;
    unsigned lo;
    const char *e;
    char c;

    if (s->pos >= s->len) {
        return -1;
    }
    c = s->text[s->pos++];
    if (c == '"') {
        return 0;
    }
    if (c != '\\') {
        out[0] = (unsigned char)c;
        return 1;
    }
    if (s->pos >= s->len) {
        return -1;
    }
    c = s->text[s->pos++];
    if (c != 'u') {
        e = c != '\0' ? strchr(esc_in, c) : NULL;
        out[0] = (unsigned char)(e != NULL ? esc_out[e - esc_in] : c); /* \" \\ \/ */
        return 1;
    }
    if (loc_hex4(s, s->pos, &cp) != 0) {
        return -1;
    }
    s->pos += 4;
    /* RFC 8259 section 7: a character outside the BMP is a surrogate pair */
    if (cp >= 0xd800 && cp < 0xdc00 && s->len - s->pos >= 6 && s->text[s->pos] == '\\'
        && s->text[s->pos + 1] == 'u' && loc_hex4(s, s->pos + 2, &lo) == 0 && lo >= 0xdc00
        && lo < 0xe000) {
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        s->pos += 6;
    }
    return loc_utf8(cp, out);
}

/* Next byte of a pointer token with ~0 and ~1 undone (RFC 6901 section 4);
 * -1 at its end, -2 on a bad escape (which then matches nothing). */
static int
loc_tok_next(const char *tok, size_t toklen, size_t *i)
{
    char c;

    if (*i >= toklen) {
        return -1;
    }
    c = tok[(*i)++];
    if (c != '~') {
        return (unsigned char)c;
    }
    c = *i < toklen ? tok[(*i)++] : '\0';
    return c == '0' ? '~' : c == '1' ? '/' : -2;
}

/* At a key's opening quote: compares the decoded key with the token, then
 * moves past the key whatever the result. */
static bool
loc_key_equals(struct loc_scan *s, const char *tok, size_t toklen)
{
    size_t start = s->pos;
    size_t i = 0;
    unsigned char buf[4];
    bool eq = true;
    int n;

    s->pos++;
    while (eq && (n = loc_str_next(s, buf)) > 0) {
        for (int k = 0; k < n && eq; k++) {
            eq = loc_tok_next(tok, toklen, &i) == buf[k];
        }
    }
    eq = eq && n == 0 && loc_tok_next(tok, toklen, &i) == -1;
    s->pos = start;
    loc_skip_string(s);
    return eq;
}

/* At '{': on success leaves pos at the member's value and *key_pos at its key. */
static bool
loc_find_member(struct loc_scan *s, const char *tok, size_t toklen, size_t *key_pos)
{
    s->pos++;
    for (;;) {
        bool match;

        loc_skip_ws(s);
        if (!loc_at(s, '"')) {
            return false;
        }
        *key_pos = s->pos;
        match = loc_key_equals(s, tok, toklen);
        loc_skip_ws(s);
        if (!loc_at(s, ':')) {
            return false;
        }
        s->pos++;
        loc_skip_ws(s);
        if (match) {
            return loc_at_value(s);
        }
        loc_skip_value(s);
        loc_skip_ws(s);
        if (!loc_at(s, ',')) {
            return false;
        }
        s->pos++;
    }
}

/* Array index token: "0" or digits without a leading zero (RFC 6901 section 4). */
static bool
loc_parse_index(const char *tok, size_t toklen, size_t *out)
{
    size_t v = 0;

    if (toklen == 0 || toklen > 9 || (tok[0] == '0' && toklen > 1)) {
        return false;
    }
    for (size_t i = 0; i < toklen; i++) {
        if (tok[i] < '0' || tok[i] > '9') {
            return false;
        }
        v = v * 10 + (size_t)(tok[i] - '0');
    }
    *out = v;
    return true;
}

/* At '[': on success leaves pos at element `index`. */
static bool
loc_find_element(struct loc_scan *s, size_t index)
{
    s->pos++;
    for (size_t i = 0;; i++) {
        loc_skip_ws(s);
        if (!loc_at_value(s)) {
            return false;
        }
        if (i == index) {
            return true;
        }
        loc_skip_value(s);
        loc_skip_ws(s);
        if (!loc_at(s, ',')) {
            return false;
        }
        s->pos++;
    }
}

static void
loc_line_col(const char *text, size_t pos, int *line, int *col)
{
    int l = 1;
    int c = 1;

    for (size_t i = 0; i < pos; i++) {
        unsigned char b = (unsigned char)text[i];

        if (b == '\n') {
            l += l < INT_MAX;
            c = 1;
        } else if ((b & 0xc0) != 0x80) {
            c += c < INT_MAX; /* count characters, not UTF-8 continuation bytes */
        }
    }
    *line = l;
    *col = c;
}

static int
loc_walk(const char *text, size_t len, const char *pointer, bool want_key, int *line, int *col)
{
    struct loc_scan s = { .text = text, .len = text != NULL ? len : 0, .pos = 0 };
    const char *p = pointer != NULL ? pointer : "";
    size_t at;
    size_t key_at = SIZE_MAX;
    int rc = *p == '\0' || *p == '/' ? LG_OK : LG_EINVAL;

    loc_skip_ws(&s);
    at = s.pos;
    while (rc == LG_OK && *p == '/') {
        const char *tok = p + 1;
        size_t toklen = strcspn(tok, "/");
        size_t index;
        bool ok;

        p = tok + toklen;
        key_at = SIZE_MAX;
        if (loc_at(&s, '{')) {
            ok = loc_find_member(&s, tok, toklen, &key_at);
        } else if (loc_at(&s, '[')) {
            ok = loc_parse_index(tok, toklen, &index) && loc_find_element(&s, index);
            key_at = SIZE_MAX;
        } else {
            ok = false;
        }
        if (!ok) {
            rc = LG_EINVAL;
            break;
        }
        at = s.pos;
    }
    if (rc == LG_OK && want_key && key_at != SIZE_MAX) {
        at = key_at;
    }
    loc_line_col(s.text != NULL ? s.text : "", at, line, col); /* at is 0 without text */
    return rc;
}

int
lg_config_loc_find(const char *text, size_t len, const char *pointer, int *line, int *col)
{
    return loc_walk(text, len, pointer, false, line, col);
}

int
lg_config_loc_find_key(const char *text, size_t len, const char *pointer, int *line, int *col)
{
    return loc_walk(text, len, pointer, true, line, col);
}
