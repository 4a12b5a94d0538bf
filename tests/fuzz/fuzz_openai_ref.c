/*
 * fuzz_openai_ref.c: request-body inspection against jansson. lg_openai_inspect()
 * reads bodies with its own scanner; on every input it must agree with the
 * jansson document reading below (the gateway's earlier implementation, kept
 * here as the reference): accept exactly the same bodies and extract the same
 * model, stream flags, max_tokens, prompt size and prefix hash. The body is
 * also fed split into several evbuffer chains at points drawn from the first
 * input byte, and with three prefix lengths.
 * One deliberate difference: jansson's stream reader drops a NUL byte that
 * follows a token it had to push back ("1\0," reads as "1,"); the scanner
 * refuses every raw NUL, as RFC 8259 does. Bodies with one must be refused
 * (the reference is not asked about them).
 * Duplicate top-level keys the gateway reads are refused by both, naming the
 * same key: the reference finds them by reading the object's members one at
 * a time with jansson (ref_duplicate), not from the scanner's tape.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "http/openai.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the reference: jansson, as the gateway used it before ---------------- */

/* `n`, `best_of`: 1 when absent or null, 2 for anything but a positive integer. */
static uint32_t
ref_choices(const json_t *v)
{
    json_int_t n;

    if (v == NULL || json_is_null(v)) {
        return 1;
    }
    if (!json_is_integer(v)) {
        return 2;
    }
    n = json_integer_value(v);
    return n < 1 ? 2 : (uint32_t)LG_MIN(n, (json_int_t)UINT32_MAX);
}

struct ref_prefix {
    struct lg_hstream hash;
    size_t left;
    bool any;
};

static void
ref_prefix_add(struct ref_prefix *p, const char *s, size_t n)
{
    size_t k = LG_MIN(n, p->left);

    if (k == 0) {
        return;
    }
    lg_hstream_feed(&p->hash, s, k);
    p->left -= k;
    p->any = true;
}

static void
ref_add_text(json_t *v, struct lg_openai_req *out, struct ref_prefix *pre)
{
    size_t i;
    json_t *part;

    if (json_is_string(v)) {
        out->prompt_bytes += json_string_length(v);
        ref_prefix_add(pre, json_string_value(v), json_string_length(v));
        return;
    }
    if (!json_is_array(v)) {
        return;
    }
    json_array_foreach (v, i, part) {
        if (json_is_string(part)) {
            ref_add_text(part, out, pre);
        } else if (json_is_object(part)) {
            ref_add_text(json_object_get(part, "text"), out, pre);
        } else if (json_is_integer(part)) {
            out->prompt_bytes += 4;
        } else if (json_is_array(part)) {
            out->prompt_bytes += 4 * json_array_size(part);
        }
    }
}

/* An input: a text, or an array whose objects may be messages (role, text, content). */
static void
ref_add_input(json_t *v, struct lg_openai_req *out, struct ref_prefix *pre)
{
    size_t i;
    json_t *part;

    if (!json_is_array(v)) {
        ref_add_text(v, out, pre);
        return;
    }
    json_array_foreach (v, i, part) {
        if (json_is_object(part)) {
            json_t *role = json_object_get(part, "role");

            if (json_is_string(role)) {
                ref_prefix_add(pre, json_string_value(role), json_string_length(role));
            }
            ref_add_text(json_object_get(part, "text"), out, pre);
            ref_add_text(json_object_get(part, "content"), out, pre);
        } else if (json_is_string(part)) {
            ref_add_text(part, out, pre);
        } else if (json_is_integer(part)) {
            out->prompt_bytes += 4;
        } else if (json_is_array(part)) {
            out->prompt_bytes += 4 * json_array_size(part);
        }
    }
}

/* The top-level keys the gateway reads, which may not come twice. */
static const char *const ref_watched[] = {
    "model",  "messages", "max_tokens", "stream", "stream_options", "max_completion_tokens",
    "prompt", "input",    "user", "max_output_tokens", "previous_response_id",
};

/* The keys of what a duplicate would cost: twice, and the costliest is taken. */
static const char *const ref_cost[] = { "n", "best_of", "store" };

static size_t
ref_ws(const char *data, size_t len, size_t pos)
{
    while (pos < len && strchr(" \t\n\r", data[pos]) != NULL && data[pos] != '\0') {
        pos++;
    }
    return pos;
}

/* One JSON value at data[*pos] (jansson, which reports how far it read); its
 * type, and in *str the one of keys[nkeys] it is (a string), or NULL. */
static json_type
ref_next(const char *data, size_t len, size_t *pos, const char *const *keys, size_t nkeys,
         const char **str)
{
    json_error_t e;
    json_t *v = json_loadb(data + *pos, len - *pos, JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, &e);
    json_type type;

    if (v == NULL) {
        fprintf(stderr, "reference: a member of a valid object does not load at %zu: %s\n", *pos,
                e.text);
        abort();
    }
    type = json_typeof(v);
    if (str != NULL) {
        *str = NULL;
        for (size_t k = 0; type == JSON_STRING && k < nkeys; k++) {
            if (strcmp(json_string_value(v), keys[k]) == 0) {
                *str = keys[k];
            }
        }
    }
    json_decref(v);
    *pos += (size_t)e.position;
    return type;
}

/*
 * The first of keys[nkeys] (at most 16) to come a second time in the object
 * data (valid JSON), or NULL: its members read one by one, each key and
 * value by jansson.
 */
static const char *
ref_duplicate(const char *data, size_t len, const char *const *keys, size_t nkeys)
{
    bool seen[16] = { false };
    size_t pos = ref_ws(data, len, 0) + 1; /* after '{' */

    pos = ref_ws(data, len, pos);
    if (data[pos] == '}') {
        return NULL;
    }
    for (;;) {
        const char *key;

        if (ref_next(data, len, &pos, keys, nkeys, &key) != JSON_STRING) {
            abort();
        }
        for (size_t k = 0; key != NULL && k < nkeys; k++) {
            if (key == keys[k]) {
                if (seen[k]) {
                    return key;
                }
                seen[k] = true;
            }
        }
        pos = ref_ws(data, len, pos);
        if (data[pos] != ':') {
            abort();
        }
        pos = ref_ws(data, len, pos + 1);
        ref_next(data, len, &pos, NULL, 0, NULL);
        pos = ref_ws(data, len, pos);
        if (data[pos] == '}') {
            return NULL;
        }
        if (data[pos] != ',') {
            abort();
        }
        pos = ref_ws(data, len, pos + 1);
    }
}

static int
ref_inspect(const char *data, size_t len, size_t prefix_bytes, struct lg_openai_req *out)
{
    struct ref_prefix pre = { .left = prefix_bytes };
    json_error_t jerr;
    json_t *root, *v;
    static const char *const counts[] = { "max_tokens", "max_completion_tokens",
                                          "max_output_tokens", "min_tokens" };
    const char *mt = "max_completion_tokens";
    int rc = LG_EINVAL;

    lg_hstream_init(&pre.hash);
    memset(out, 0, sizeof(*out));
    out->max_tokens = -1;
    out->code = "invalid_json";
    root = json_loadb(data, len, 0, &jerr);
    if (root == NULL) {
        return LG_EINVAL;
    }
    if (!json_is_object(root)) {
        goto out;
    }
    out->param = ref_duplicate(data, len, ref_watched, LG_ARRAY_SIZE(ref_watched));
    if (out->param != NULL) {
        out->code = "duplicate_key";
        goto out;
    }
    v = json_object_get(root, "model");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_string(v) || json_string_length(v) > LG_MODEL_MAX) {
            out->param = "model";
            goto out;
        }
        memcpy(out->model, json_string_value(v), json_string_length(v) + 1);
    }
    v = json_object_get(root, "stream");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            out->param = "stream";
            goto out;
        }
        out->stream = json_is_true(v);
    }
    v = json_object_get(root, "stream_options");
    if (json_is_object(v)) {
        out->include_usage = json_is_true(json_object_get(v, "include_usage"));
    }
    /* every token count in 0..LG_OPENAI_TOKENS_MAX, in this order; the one
     * read: max_completion_tokens unless it is null */
    for (size_t k = 0; k < LG_ARRAY_SIZE(counts); k++) {
        v = json_object_get(root, counts[k]);
        if (v != NULL && !json_is_null(v)
            && (!json_is_integer(v) || json_integer_value(v) < 0
                || json_integer_value(v) > LG_OPENAI_TOKENS_MAX)) {
            out->param = counts[k];
            goto out;
        }
    }
    v = json_object_get(root, mt);
    if (v == NULL || json_is_null(v)) {
        v = json_object_get(root, "max_output_tokens");
    }
    if (v == NULL || json_is_null(v)) {
        v = json_object_get(root, "max_tokens");
    }
    if (v != NULL && !json_is_null(v)) {
        out->max_tokens = json_integer_value(v);
    }
    v = json_object_get(root, "previous_response_id");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_string(v) || json_string_length(v) == 0
            || json_string_length(v) > LG_RESPONSE_ID_MAX) {
            out->param = "previous_response_id";
            goto out;
        }
        memcpy(out->previous_response_id, json_string_value(v), json_string_length(v) + 1);
    }
    v = json_object_get(root, "temperature");
    out->greedy = json_is_number(v) && json_number_value(v) == 0.0;
    out->seeded = json_is_integer(json_object_get(root, "seed"));
    v = json_object_get(root, "n");
    out->n = json_is_integer(v) ? json_integer_value(v) : 1;
    ref_add_text(json_object_get(root, "instructions"), out, &pre);
    ref_add_text(json_object_get(root, "system"), out, &pre);
    v = json_object_get(root, "messages");
    if (json_is_array(v)) {
        size_t i;
        json_t *msg;

        json_array_foreach (v, i, msg) {
            json_t *role = json_object_get(msg, "role");

            if (json_is_string(role)) {
                ref_prefix_add(&pre, json_string_value(role), json_string_length(role));
            }
            ref_add_text(json_object_get(msg, "content"), out, &pre);
        }
    } else {
        json_t *prompt = json_object_get(root, "prompt");

        ref_add_input(prompt ? prompt : json_object_get(root, "input"), out, &pre);
    }
    out->prefix_hash = pre.any ? lg_mix64(lg_hstream_value(&pre.hash)) | 1 : 0;
    out->code = NULL;
    out->choices = LG_MAX(ref_choices(json_object_get(root, "n")),
                          ref_choices(json_object_get(root, "best_of")));
    out->store = json_is_true(json_object_get(root, "store"));
    if (ref_duplicate(data, len, ref_cost, LG_ARRAY_SIZE(ref_cost)) != NULL) {
        out->choices = 2;
        out->store = true;
    }
    rc = LG_OK;
out:
    json_decref(root);
    return rc;
}

/* ---- the comparison --------------------------------------------------------- */

static void
check_same(const struct lg_openai_req *a, int rca, const struct lg_openai_req *b, int rcb,
           const char *how, size_t prefix, const char *err, bool has_nul)
{
    if (has_nul) {
        if (rca == LG_OK) {
            fprintf(stderr, "%s: a body with a NUL byte was accepted\n", how);
            abort();
        }
        return;
    }
    if ((rca == LG_OK) != (rcb == LG_OK)) {
        fprintf(stderr, "%s, prefix %zu: scanner says %s, jansson says %s (%s)\n", how, prefix,
                rca == LG_OK ? "ok" : "invalid", rcb == LG_OK ? "ok" : "invalid", err);
        abort();
    }
    if (rca != LG_OK) {
        if (strncmp(err, "malformed JSON body at line ", 28) != 0 && strstr(err, "must be") == NULL
            && strstr(err, "longer than") == NULL && strstr(err, "more than once") == NULL) {
            fprintf(stderr, "unexpected message: %s\n", err);
            abort();
        }
        /* the same code, naming the same field (null for malformed JSON) */
        if (a->code == NULL || b->code == NULL || strcmp(a->code, b->code) != 0
            || (a->param == NULL) != (b->param == NULL)
            || (a->param != NULL && strcmp(a->param, b->param) != 0)) {
            fprintf(stderr, "%s, prefix %zu: scanner refuses with %s/%s, jansson with %s/%s (%s)\n",
                    how, prefix, a->code ? a->code : "null", a->param ? a->param : "null",
                    b->code ? b->code : "null", b->param ? b->param : "null", err);
            abort();
        }
        return;
    }
    if (strcmp(a->model, b->model) != 0 || a->stream != b->stream
        || a->include_usage != b->include_usage || a->max_tokens != b->max_tokens
        || a->greedy != b->greedy || a->seeded != b->seeded || a->n != b->n
        || a->prompt_bytes != b->prompt_bytes || a->prefix_hash != b->prefix_hash
        || a->choices != b->choices || a->store != b->store
        || strcmp(a->previous_response_id, b->previous_response_id) != 0) {
        fprintf(stderr,
                "%s, prefix %zu: fields differ: model %s/%s stream %d/%d usage %d/%d "
                "max_tokens %lld/%lld prompt_bytes %llu/%llu hash %llx/%llx choices %u/%u "
                "store %d/%d\n",
                how, prefix, a->model, b->model, a->stream, b->stream, a->include_usage,
                b->include_usage, (long long)a->max_tokens, (long long)b->max_tokens,
                (unsigned long long)a->prompt_bytes, (unsigned long long)b->prompt_bytes,
                (unsigned long long)a->prefix_hash, (unsigned long long)b->prefix_hash, a->choices,
                b->choices, a->store, b->store);
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t prefixes[] = { 0, 7, 2048 };
    struct lg_openai_req got, want;
    const char *body;
    size_t len;
    unsigned seed;
    bool has_nul;
    char err[256];

    if (size < 1) {
        return 0;
    }
    seed = data[0];
    body = (const char *)data + 1;
    len = size - 1;
    has_nul = memchr(body, '\0', len) != NULL;
    for (size_t k = 0; k < LG_ARRAY_SIZE(prefixes); k++) {
        struct evbuffer *b = evbuffer_new();
        size_t off = 0, step = 1 + seed % 13;
        int rca, rcb;

        /* with a NUL, jansson may accept what its member-by-member reading
         * (ref_duplicate) then cannot: the scanner must refuse it, no more */
        rcb = has_nul ? LG_EINVAL : ref_inspect(body, len, prefixes[k], &want);
        rca = lg_openai_inspect_mem(body, len, prefixes[k], &got, err, sizeof(err));
        check_same(&got, rca, &want, rcb, "contiguous", prefixes[k], err, has_nul);
        /* chains of step, 2*step, 3*step... bytes (evbuffer_add_reference keeps them apart) */
        while (off < len) {
            size_t n = LG_MIN(step, len - off);

            evbuffer_add_reference(b, body + off, n, NULL, NULL);
            off += n;
            step += 1 + seed % 7;
        }
        rca = lg_openai_inspect(b, prefixes[k], &got, err, sizeof(err));
        check_same(&got, rca, &want, rcb, "split", prefixes[k], err, has_nul);
        evbuffer_free(b);
    }
    return 0;
}
