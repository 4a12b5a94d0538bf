/*
 * openai.c: request-body inspection and OpenAI-style error bodies.
 *
 * Owns nothing past a call: the jansson document lives only inside
 * lg_openai_inspect(). Bodies are bounded by the caller (max_body_bytes)
 * before they reach here.
 */
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "openai.h"

struct openai_reader {
    struct evbuffer_iovec *vec;
    int nvec;
    int i;
    size_t off;
};

static size_t
openai_read_cb(void *buffer, size_t buflen, void *data)
{
    struct openai_reader *r = data;
    size_t done = 0;

    while (done < buflen && r->i < r->nvec) {
        struct evbuffer_iovec *v = &r->vec[r->i];
        size_t n = LG_MIN(buflen - done, v->iov_len - r->off);

        memcpy((char *)buffer + done, (char *)v->iov_base + r->off, n);
        done += n;
        r->off += n;
        if (r->off == v->iov_len) {
            r->i++;
            r->off = 0;
        }
    }
    return done;
}

struct openai_prefix {
    uint64_t hash;
    size_t left; /* prefix bytes still to hash */
    bool any;
};

static void
openai_prefix_add(struct openai_prefix *p, const char *s, size_t n)
{
    size_t k = LG_MIN(n, p->left);

    if (k == 0) {
        return;
    }
    p->hash = lg_hash64(s, k, p->hash);
    p->left -= k;
    p->any = true;
}

/* Adds a content value (string or array of parts) to the size and prefix. */
static void
openai_add_text(json_t *v, struct lg_openai_req *out, struct openai_prefix *pre)
{
    size_t i;
    json_t *part;

    if (json_is_string(v)) {
        out->prompt_bytes += json_string_length(v);
        openai_prefix_add(pre, json_string_value(v), json_string_length(v));
        return;
    }
    if (!json_is_array(v)) {
        return;
    }
    json_array_foreach(v, i, part) {
        if (json_is_string(part)) {
            openai_add_text(part, out, pre);
        } else if (json_is_object(part)) {
            openai_add_text(json_object_get(part, "text"), out, pre);
        } else if (json_is_integer(part)) {
            out->prompt_bytes += 4; /* a token id: about four bytes of text */
        } else if (json_is_array(part)) {
            out->prompt_bytes += 4 * json_array_size(part);
        }
    }
}

static int
openai_read_fields(json_t *root, size_t prefix_bytes, struct lg_openai_req *out, char *err,
                   size_t errlen)
{
    struct openai_prefix pre = { .hash = LG_HASH64_INIT, .left = prefix_bytes };
    json_t *v;

    if (!json_is_object(root)) {
        snprintf(err, errlen, "the request body must be a JSON object");
        return LG_EINVAL;
    }
    v = json_object_get(root, "model");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_string(v)) {
            snprintf(err, errlen, "\"model\" must be a string");
            return LG_EINVAL;
        }
        if (json_string_length(v) > LG_MODEL_MAX) {
            snprintf(err, errlen, "\"model\" is longer than %d bytes", LG_MODEL_MAX);
            return LG_EINVAL;
        }
        memcpy(out->model, json_string_value(v), json_string_length(v) + 1);
    }
    v = json_object_get(root, "stream");
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            snprintf(err, errlen, "\"stream\" must be a boolean");
            return LG_EINVAL;
        }
        out->stream = json_is_true(v);
    }
    v = json_object_get(root, "stream_options");
    if (json_is_object(v)) {
        out->include_usage = json_is_true(json_object_get(v, "include_usage"));
    }
    v = json_object_get(root, "max_completion_tokens");
    if (v == NULL || json_is_null(v)) {
        v = json_object_get(root, "max_tokens");
    }
    if (v != NULL && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            snprintf(err, errlen, "\"max_tokens\" must be a non-negative integer");
            return LG_EINVAL;
        }
        out->max_tokens = json_integer_value(v);
    }

    v = json_object_get(root, "messages");
    if (json_is_array(v)) {
        size_t i;
        json_t *msg;

        json_array_foreach(v, i, msg) {
            json_t *role = json_object_get(msg, "role");

            if (json_is_string(role)) {
                openai_prefix_add(&pre, json_string_value(role), json_string_length(role));
            }
            openai_add_text(json_object_get(msg, "content"), out, &pre);
        }
    } else {
        json_t *prompt = json_object_get(root, "prompt");

        openai_add_text(prompt ? prompt : json_object_get(root, "input"), out, &pre);
    }
    out->prefix_hash = pre.any ? lg_mix64(pre.hash) | 1 : 0;
    return LG_OK;
}

static void
openai_init(struct lg_openai_req *out)
{
    memset(out, 0, sizeof(*out));
    out->max_tokens = -1;
}

int
lg_openai_inspect(struct evbuffer *body, size_t prefix_bytes, struct lg_openai_req *out,
                  char *err, size_t errlen)
{
    struct evbuffer_iovec stackvec[16], *vec = stackvec;
    struct openai_reader r = { 0 };
    json_error_t jerr;
    json_t *root;
    int n, rc;

    openai_init(out);
    n = evbuffer_peek(body, -1, NULL, NULL, 0);
    if (n > (int)LG_ARRAY_SIZE(stackvec)) {
        vec = lg_xcalloc((size_t)n, sizeof(*vec));
    }
    r.nvec = evbuffer_peek(body, -1, NULL, vec, n);
    r.vec = vec;
    root = json_load_callback(openai_read_cb, &r, 0, &jerr);
    if (vec != stackvec) {
        free(vec);
    }
    if (root == NULL) {
        snprintf(err, errlen, "malformed JSON body at line %d column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        return LG_EINVAL;
    }
    rc = openai_read_fields(root, prefix_bytes, out, err, errlen);
    json_decref(root);
    return rc;
}

int
lg_openai_inspect_mem(const char *data, size_t len, size_t prefix_bytes,
                      struct lg_openai_req *out, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root;
    int rc;

    openai_init(out);
    root = json_loadb(data, len, 0, &jerr);
    if (root == NULL) {
        snprintf(err, errlen, "malformed JSON body at line %d column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        return LG_EINVAL;
    }
    rc = openai_read_fields(root, prefix_bytes, out, err, errlen);
    json_decref(root);
    return rc;
}

void
lg_json_append_string(struct evbuffer *out, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;

    evbuffer_add(out, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6];

        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        evbuffer_add(out, s + i - run, run);
        run = 0;
        esc[0] = '\\';
        switch (c) {
        case '"':
        case '\\':
            esc[1] = (char)c;
            evbuffer_add(out, esc, 2);
            break;
        case '\n':
            evbuffer_add(out, "\\n", 2);
            break;
        case '\r':
            evbuffer_add(out, "\\r", 2);
            break;
        case '\t':
            evbuffer_add(out, "\\t", 2);
            break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            evbuffer_add(out, esc, 6);
            break;
        }
    }
    evbuffer_add(out, s + n - run, run);
    evbuffer_add(out, "\"", 1);
}

size_t
lg_openai_error_body(struct evbuffer *out, const char *message, const char *type,
                     const char *code)
{
    size_t before = evbuffer_get_length(out);

    evbuffer_add(out, "{\"error\":{\"message\":", 20);
    lg_json_append_string(out, message, strlen(message));
    evbuffer_add(out, ",\"type\":", 8);
    lg_json_append_string(out, type, strlen(type));
    evbuffer_add(out, ",\"param\":null,\"code\":", 21);
    if (code != NULL) {
        lg_json_append_string(out, code, strlen(code));
    } else {
        evbuffer_add(out, "null", 4);
    }
    evbuffer_add(out, "}}\n", 3);
    return evbuffer_get_length(out) - before;
}

const char *
lg_openai_error_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 403:
        return "permission_error";
    case 429:
        return "rate_limit_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}
