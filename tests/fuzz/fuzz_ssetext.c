/*
 * fuzz_ssetext.c: the delivered-text reader (gateway/ssetext.c) on arbitrary
 * bytes.
 *
 * The first byte picks a split point and a bound; the rest is a list of
 * events' data separated by 0x1e. The reader runs over them three ways
 * (each event whole, the input split in two, byte by byte) and must give
 * the same text and flags each time, never more text than the bound. Where
 * every event is strict JSON (jansson, duplicate keys refused) and the
 * reader raised no flag, its text must be jansson's: the concatenation of
 * each event's choices[0].delta.content or choices[0].text.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "http/ssetext.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct text_run {
    char *text;
    size_t len;
    unsigned flags;
};

/* split: where the input is cut in two (SIZE_MAX: byte by byte; 0: whole events). */
static void
text_run(const char *p, size_t n, size_t split, size_t max, struct text_run *r)
{
    struct lg_ssetext t;
    size_t start = 0, added = 0, len;
    const char *s;

    lg_ssetext_init(&t, max);
    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '\x1e') {
            continue;
        }
        if (split == SIZE_MAX) {
            for (size_t k = start; k < i; k++) {
                lg_ssetext_feed(&t, p + k, 1);
            }
        } else if (split > start && split < i) {
            lg_ssetext_feed(&t, p + start, split - start);
            lg_ssetext_feed(&t, p + split, i - split);
        } else {
            lg_ssetext_feed(&t, p + start, i - start);
        }
        added += lg_ssetext_event_end(&t);
        start = i + 1;
    }
    s = lg_ssetext_text(&t, &len);
    if (len > max || (t.flags == 0 && added != len) || (t.flags != 0 && len != 0)) {
        abort();
    }
    r->text = malloc(len + 1);
    memcpy(r->text, s, len);
    r->len = len;
    r->flags = t.flags;
    lg_ssetext_free(&t);
}

/* jansson's text of one event; false when it is no strict JSON or has both fields. */
static bool
text_reference_event(const char *p, size_t n, char **out, size_t *len)
{
    json_t *root, *choice, *content, *text;
    bool ok = true;

    if (n == 6 && memcmp(p, "[DONE]", 6) == 0) {
        return true;
    }
    root = json_loadb(p, n, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, NULL);
    if (root == NULL) {
        return false;
    }
    choice = json_array_get(json_object_get(root, "choices"), 0);
    content = json_object_get(json_object_get(choice, "delta"), "content");
    text = json_object_get(choice, "text");
    if (json_is_string(content) && json_is_string(text)) {
        ok = false; /* both: the reader keeps them in document order, jansson cannot say it */
    } else if (json_is_string(content) || json_is_string(text)) {
        json_t *v = json_is_string(content) ? content : text;
        size_t k = json_string_length(v);

        *out = realloc(*out, *len + k + 1);
        memcpy(*out + *len, json_string_value(v), k);
        *len += k;
    }
    json_decref(root);
    return ok;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct text_run whole, two, bytes;
    const char *p = (const char *)data + 1;
    size_t n, split, max;

    if (size < 1) {
        return 0;
    }
    n = size - 1;
    split = n ? data[0] % (n + 1) : 0;
    max = data[0] & 0x80 ? 8 : 1u << 20;
    text_run(p, n, 0, max, &whole);
    text_run(p, n, split, max, &two);
    text_run(p, n, SIZE_MAX, max, &bytes);
    if (whole.flags != two.flags || whole.flags != bytes.flags || whole.len != two.len
        || whole.len != bytes.len || memcmp(whole.text, two.text, whole.len) != 0
        || memcmp(whole.text, bytes.text, whole.len) != 0) {
        abort();
    }
    if (whole.flags == 0) {
        char *ref = NULL;
        size_t ref_len = 0, start = 0;
        bool strict = true;

        for (size_t i = 0; i <= n && strict; i++) {
            if (i == n || p[i] == '\x1e') {
                strict = text_reference_event(p + start, i - start, &ref, &ref_len);
                start = i + 1;
            }
        }
        if (strict && (ref_len != whole.len || (ref_len && memcmp(ref, whole.text, ref_len) != 0))) {
            abort();
        }
        free(ref);
    }
    free(whole.text);
    free(two.text);
    free(bytes.text);
    return 0;
}
