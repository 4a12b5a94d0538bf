/*
 * fuzz_config_loc.c: lg_config_loc_find() on arbitrary text and pointers.
 * The first byte selects the mode:
 *   < 0x80: text is the rest of the input; if it holds a NUL, the pointer is
 *           what follows the NUL, else one of a fixed list picked by the byte.
 *           Checks only that the call is safe and the position is sane.
 *  >= 0x80: differential: when jansson accepts the text (without NUL bytes,
 *           which jansson skips and the loader rejects), every value it
 *           parsed (up to a budget) must be found, at a character that can
 *           start a value of that type, and every member key at a quote.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/config_loc.h"
#include "base/lg_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const pointers[] = {
    "",    "/",         "/a",  "/0", "/0/0", "/backends/0/url", "/a~1b",     "/~0", "/~01", "/~",
    "/~2", "/listen/1", "/01", "/-", "//",   "/a/b/c/d/e/f",    "/\xc3\xa9", "x",
};

struct walk {
    const char *text;
    size_t len;
    int budget;
    char ptr[4096];
};

/* Byte offset of line:col, counting as config_loc does; SIZE_MAX if none. */
static size_t
offset_of(const char *text, size_t len, int line, int col)
{
    int l = 1, c = 1;

    for (size_t i = 0; i < len; i++) {
        if (l == line && c == col && ((unsigned char)text[i] & 0xc0) != 0x80) {
            return i;
        }
        if (text[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)text[i] & 0xc0) != 0x80) {
            c++;
        }
    }
    return SIZE_MAX;
}

static bool
starts_value(json_t *v, char ch)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return ch == '{';
    case JSON_ARRAY:
        return ch == '[';
    case JSON_STRING:
        return ch == '"';
    case JSON_TRUE:
        return ch == 't';
    case JSON_FALSE:
        return ch == 'f';
    case JSON_NULL:
        return ch == 'n';
    default:
        return ch == '-' || (ch >= '0' && ch <= '9');
    }
}

static void
check_at(struct walk *w, json_t *v, bool member)
{
    int line, col;
    size_t off;

    if (lg_config_loc_find(w->text, w->len, w->ptr, &line, &col) != LG_OK) {
        abort();
    }
    off = offset_of(w->text, w->len, line, col);
    if (off == SIZE_MAX || !starts_value(v, w->text[off])) {
        abort();
    }
    if (lg_config_loc_find_key(w->text, w->len, w->ptr, &line, &col) != LG_OK) {
        abort();
    }
    off = offset_of(w->text, w->len, line, col);
    if (off == SIZE_MAX || (member ? w->text[off] != '"' : !starts_value(v, w->text[off]))) {
        abort();
    }
}

static void
walk(struct walk *w, json_t *v, bool member)
{
    size_t mark = strlen(w->ptr), i;
    const char *key;
    json_t *e;

    if (w->budget-- <= 0) {
        return;
    }
    check_at(w, v, member);
    if (json_is_object(v)) {
        json_object_foreach (v, key, e) {
            size_t n = mark;

            if (n + 2 * strlen(key) + 2 >= sizeof(w->ptr)) {
                continue;
            }
            w->ptr[n++] = '/';
            for (const char *p = key; *p != '\0'; p++) {
                if (*p == '~' || *p == '/') {
                    w->ptr[n++] = '~';
                    w->ptr[n++] = *p == '~' ? '0' : '1';
                } else {
                    w->ptr[n++] = *p;
                }
            }
            w->ptr[n] = '\0';
            walk(w, e, true);
            w->ptr[mark] = '\0';
        }
    } else if (json_is_array(v)) {
        json_array_foreach (v, i, e) {
            if (mark + 24 >= sizeof(w->ptr)) {
                break;
            }
            snprintf(w->ptr + mark, sizeof(w->ptr) - mark, "/%zu", i);
            walk(w, e, false);
            w->ptr[mark] = '\0';
        }
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data + 1;
    size_t len = size > 0 ? size - 1 : 0;
    int line = 0, col = 0;

    if (size == 0) {
        return 0;
    }
    if (data[0] < 0x80) {
        const char *nul = memchr(text, '\0', len);

        if (nul != NULL) {
            size_t plen = len - (size_t)(nul + 1 - text);
            char *ptr = malloc(plen + 1);

            memcpy(ptr, nul + 1, plen);
            ptr[plen] = '\0';
            lg_config_loc_find(text, (size_t)(nul - text), ptr, &line, &col);
            lg_config_loc_find_key(text, (size_t)(nul - text), ptr, &line, &col);
            free(ptr);
        } else {
            const char *ptr = pointers[data[0] % LG_ARRAY_SIZE(pointers)];

            lg_config_loc_find(text, len, ptr, &line, &col);
            lg_config_loc_find_key(text, len, ptr, &line, &col);
        }
        if (line < 1 || col < 1 || (size_t)line > len + 1 || (size_t)col > len + 1) {
            abort();
        }
    } else {
        json_t *root;
        struct walk *w;

        /* jansson skips raw NUL bytes (the loader rejects them), so the
         * texts would differ */
        if (memchr(text, '\0', len) != NULL) {
            return 0;
        }
        root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, NULL);
        if (root == NULL) {
            return 0;
        }
        w = calloc(1, sizeof(*w));
        w->text = text;
        w->len = len;
        w->budget = 512;
        walk(w, root, false);
        free(w);
        json_decref(root);
    }
    return 0;
}
