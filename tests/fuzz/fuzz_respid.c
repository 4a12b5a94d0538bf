/*
 * fuzz_respid.c: the Responses API's answer-id reader (gateway/http/respid.c)
 * on arbitrary bytes.
 *
 * The first byte picks a split point; the rest is a list of events' data
 * separated by 0x1e (a whole answer is one event). The reader runs over them
 * three ways (each event whole, the input split in two, byte by byte) and
 * must find the same id each time. An id it finds appears in the input, in
 * quotes. Where every event is strict JSON (jansson, duplicate keys refused)
 * and the input has no backslash, the id must be jansson's: of the first
 * event whose top-level `id`, or else whose `response` object's `id`, is a
 * string of 1 to LG_RESPONSE_ID_MAX bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "http/respid.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* split: where the input is cut in two (SIZE_MAX: byte by byte; 0: whole events). */
static void
respid_run(const char *p, size_t n, size_t split, char *out)
{
    struct lg_respid r;
    size_t start = 0;
    const char *id;

    lg_respid_init(&r);
    for (size_t i = 0; i <= n; i++) {
        if (i < n && p[i] != '\x1e') {
            continue;
        }
        if (split == SIZE_MAX) {
            for (size_t k = start; k < i; k++) {
                lg_respid_feed(&r, p + k, 1);
            }
        } else if (split > start && split < i) {
            lg_respid_feed(&r, p + start, split - start);
            lg_respid_feed(&r, p + split, i - split);
        } else {
            lg_respid_feed(&r, p + start, i - start);
        }
        lg_respid_event_end(&r);
        start = i + 1;
    }
    id = lg_respid_get(&r);
    if (id != NULL && (strlen(id) == 0 || strlen(id) > LG_RESPONSE_ID_MAX)) {
        abort();
    }
    strcpy(out, id != NULL ? id : "");
}

/* A qualifying id of one event: 1 if found (into out), 0 if none, -1 if ambiguous. */
static int
respid_reference_event(json_t *root, char *out)
{
    json_t *top = json_object_get(root, "id");
    json_t *resp = json_object_get(root, "response");
    json_t *inner = json_is_object(resp) ? json_object_get(resp, "id") : NULL;
    json_t *v = json_is_string(top) ? top : inner;

    if (json_is_string(top) && json_is_string(inner)) {
        return -1; /* which comes first in the text decides */
    }
    if (!json_is_string(v) || json_string_length(v) == 0
        || json_string_length(v) > LG_RESPONSE_ID_MAX) {
        return json_is_string(v) ? -1 : 0;
    }
    strcpy(out, json_string_value(v));
    return 1;
}

static void
respid_reference(const char *p, size_t n, const char *got)
{
    char want[LG_RESPONSE_ID_MAX + 1] = "";
    size_t start = 0;

    if (memchr(p, '\\', n) != NULL) {
        return;
    }
    for (size_t i = 0; i <= n; i++) {
        json_t *root;
        int rc;

        if (i < n && p[i] != '\x1e') {
            continue;
        }
        root = json_loadb(p + start, i - start, JSON_REJECT_DUPLICATES, NULL);
        start = i + 1;
        if (root == NULL) {
            return; /* not strict JSON: no reference */
        }
        rc = json_is_object(root) ? respid_reference_event(root, want) : 0;
        json_decref(root);
        if (rc < 0) {
            return;
        }
        if (rc > 0) {
            break;
        }
    }
    if (strcmp(want, got) != 0) {
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char whole[LG_RESPONSE_ID_MAX + 1], split[LG_RESPONSE_ID_MAX + 1];
    char bytes[LG_RESPONSE_ID_MAX + 1];
    const char *p = (const char *)data + 1;
    size_t n;

    if (size < 1) {
        return 0;
    }
    n = size - 1;
    respid_run(p, n, 0, whole);
    respid_run(p, n, n > 0 ? data[0] % (n + 1) : 0, split);
    respid_run(p, n, SIZE_MAX, bytes);
    if (strcmp(whole, split) != 0 || strcmp(whole, bytes) != 0) {
        abort();
    }
    if (whole[0] != '\0') {
        size_t k = strlen(whole);
        bool seen = false;

        for (size_t i = 0; i + k + 2 <= n && !seen; i++) {
            seen = p[i] == '"' && memcmp(p + i + 1, whole, k) == 0 && p[i + k + 1] == '"';
        }
        if (!seen) {
            abort();
        }
    }
    respid_reference(p, n, whole);
    return 0;
}
