/*
 * openai.c: request-body inspection and OpenAI-style error bodies. The body
 * is scanned once into a tape of tokens (jsonscan.c); the fields are then
 * read from the tape with jansson's semantics, in one walk of each object
 * for all the names read from it. No string is copied except the model
 * name; the hashed prompt prefix is unescaped on the fly.
 *
 * Owns nothing past a call: the token tape lives only inside
 * lg_openai_inspect() (on the stack for ordinary bodies). Bodies are bounded
 * by the caller (max_body_bytes, at most 1 GiB: offsets fit in 32 bits)
 * before they reach here.
 */
#include "http/openai.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "http/jsonscan.h"

/* ---- reading the fields (jansson semantics on the tape) ------------------ */

struct openai_prefix {
    struct lg_hstream hash;
    size_t left; /* prefix bytes still to hash */
    bool any;
};

static void
openai_prefix_cb(void *arg, const char *p, size_t n)
{
    struct openai_prefix *pre = arg;
    size_t k = LG_MIN(n, pre->left);

    if (k == 0) {
        return;
    }
    lg_hstream_feed(&pre->hash, p, k);
    pre->left -= k;
    pre->any = true;
}

static void
openai_prefix_add(const struct lg_jsonscan *s, struct openai_prefix *pre, uint32_t r)
{
    if (pre->left > 0) {
        lg_jsonscan_unescape(s, LG_JSONSCAN_T(s, r), pre->left, openai_prefix_cb, pre);
    }
}

static const struct lg_jsonscan_key openai_key_text = LG_JSONSCAN_KEY("text");
static const struct lg_jsonscan_key openai_key_include_usage = LG_JSONSCAN_KEY("include_usage");

/* The members of a message, in the order they are hashed. */
enum { OPENAI_MSG_ROLE = 0, OPENAI_MSG_CONTENT, OPENAI_MSG_N };
static const struct lg_jsonscan_key openai_msg_keys[OPENAI_MSG_N] = {
    [OPENAI_MSG_ROLE] = LG_JSONSCAN_KEY("role"),
    [OPENAI_MSG_CONTENT] = LG_JSONSCAN_KEY("content"),
};

/*
 * The top-level members read, found in one walk of the body's object. None
 * may come twice: the gateway reads the last of duplicates (as jansson does)
 * and an engine may read the first, so a key authorised for one model could
 * be served another (and a stream taken for a plain answer). `user` is not
 * read but attributes the request at the engine: it is refused twice too.
 */
enum {
    OPENAI_F_MODEL = 0,
    OPENAI_F_MESSAGES,
    OPENAI_F_MAX_TOKENS,
    OPENAI_F_STREAM,
    OPENAI_F_STREAM_OPTIONS,
    OPENAI_F_MAX_COMPLETION_TOKENS,
    OPENAI_F_PROMPT,
    OPENAI_F_INPUT,
    OPENAI_F_USER,
    OPENAI_F_N
};
static const struct lg_jsonscan_key openai_fields[OPENAI_F_N] = {
    [OPENAI_F_MODEL] = LG_JSONSCAN_KEY("model"),
    [OPENAI_F_MESSAGES] = LG_JSONSCAN_KEY("messages"),
    [OPENAI_F_MAX_TOKENS] = LG_JSONSCAN_KEY("max_tokens"),
    [OPENAI_F_STREAM] = LG_JSONSCAN_KEY("stream"),
    [OPENAI_F_STREAM_OPTIONS] = LG_JSONSCAN_KEY("stream_options"),
    [OPENAI_F_MAX_COMPLETION_TOKENS] = LG_JSONSCAN_KEY("max_completion_tokens"),
    [OPENAI_F_PROMPT] = LG_JSONSCAN_KEY("prompt"),
    [OPENAI_F_INPUT] = LG_JSONSCAN_KEY("input"),
    [OPENAI_F_USER] = LG_JSONSCAN_KEY("user"),
};

/* Adds a content value (string or array of parts) to the size and prefix. */
static void
openai_add_text(const struct lg_jsonscan *s, uint32_t r, struct lg_openai_req *out,
                struct openai_prefix *pre)
{
    const struct lg_jsonscan_tok *t;

    if (r == 0) {
        return;
    }
    t = LG_JSONSCAN_T(s, r);
    if (t->type == LG_JSONSCAN_STR) {
        out->prompt_bytes += t->aux;
        openai_prefix_add(s, pre, r);
        return;
    }
    if (t->type != LG_JSONSCAN_ARR) {
        return;
    }
    for (uint32_t i = r; i < t->aux; i = lg_jsonscan_skip(s, i)) {
        const struct lg_jsonscan_tok *part = &s->tok[i];

        if (part->type == LG_JSONSCAN_STR) {
            openai_add_text(s, i + 1, out, pre);
        } else if (part->type == LG_JSONSCAN_OBJ) {
            openai_add_text(s, lg_jsonscan_member(s, i + 1, &openai_key_text), out, pre);
        } else if (part->type == LG_JSONSCAN_INT) {
            out->prompt_bytes += 4; /* a token id: about four bytes of text */
        } else if (part->type == LG_JSONSCAN_ARR) {
            out->prompt_bytes += 4 * (uint64_t)part->len;
        }
    }
}

/* The value of an integer token's n bytes (the scanner checked it fits int64). */
static int64_t
openai_int(const char *num, size_t n)
{
    bool neg = n > 0 && num[0] == '-';
    uint64_t v = 0;

    for (size_t i = neg; i < n; i++) {
        v = v * 10 + (uint64_t)(num[i] - '0');
    }
    return neg && v > 0 ? -(int64_t)(v - 1) - 1 : (int64_t)v;
}

/* Choices `n` or `best_of` asks for: 1 when absent or null, 2 for anything
 * but a positive integer (never an error: the engine judges it). */
static uint32_t
openai_choices(const struct lg_jsonscan *s, uint32_t v)
{
    const struct lg_jsonscan_tok *t;
    char num[32];
    int64_t n;

    if (lg_jsonscan_is_null(s, v)) {
        return 1;
    }
    t = LG_JSONSCAN_T(s, v);
    if (t->type != LG_JSONSCAN_INT || t->len >= sizeof(num)) {
        return 2;
    }
    n = openai_int(num, lg_jsonscan_raw_copy(s, t->off, t->len, num, sizeof(num)));
    return n < 1 ? 2 : (uint32_t)LG_MIN(n, (int64_t)UINT32_MAX);
}

/*
 * What says whether the answer repeats (serve/resume.c): temperature 0, a
 * seed, one choice. Read in a walk of their own, never refused (duplicates
 * included, the last read as jansson does): the engine judges the values,
 * and a wrong guess here only makes a continuation less faithful.
 */
enum { OPENAI_S_TEMPERATURE = 0, OPENAI_S_SEED, OPENAI_S_CHOICES, OPENAI_S_N };
static const struct lg_jsonscan_key openai_sampling_keys[OPENAI_S_N] = {
    [OPENAI_S_TEMPERATURE] = LG_JSONSCAN_KEY("temperature"),
    [OPENAI_S_SEED] = LG_JSONSCAN_KEY("seed"),
    [OPENAI_S_CHOICES] = LG_JSONSCAN_KEY("n"),
};

static void
openai_read_sampling(const struct lg_jsonscan *s, struct lg_openai_req *out)
{
    uint32_t f[OPENAI_S_N], v;
    char num[32];

    lg_jsonscan_members(s, 1, openai_sampling_keys, OPENAI_S_N, f, NULL);
    v = f[OPENAI_S_TEMPERATURE];
    if (v != 0 && (LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_INT
                   || LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_REAL)) {
        const struct lg_jsonscan_tok *t = LG_JSONSCAN_T(s, v);

        num[lg_jsonscan_raw_copy(s, t->off, t->len, num, sizeof(num) - 1)] = '\0';
        out->greedy = t->len < sizeof(num) && strtod(num, NULL) == 0.0;
    }
    v = f[OPENAI_S_SEED];
    out->seeded = v != 0 && LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_INT;
    v = f[OPENAI_S_CHOICES];
    if (v != 0 && LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_INT
        && LG_JSONSCAN_T(s, v)->len < sizeof(num)) {
        const struct lg_jsonscan_tok *t = LG_JSONSCAN_T(s, v);

        out->n = openai_int(num, lg_jsonscan_raw_copy(s, t->off, t->len, num, sizeof(num)));
    }
}

/* Refuses the body because of field `param` (its name; NULL: the body as a whole). */
static int __attribute__((format(printf, 5, 6)))
openai_refuse(struct lg_openai_req *out, const char *param, char *err, size_t errlen,
              const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    out->param = param;
    return LG_EINVAL;
}

/*
 * What a duplicate would cost (serve/hedge.c): the choices asked for and
 * whether the completion is stored. Read in a walk of their own, so that a
 * body naming one twice is not refused (the gateway does not route on
 * them): it is taken at its costliest instead, as an engine may read either.
 */
enum { OPENAI_C_N = 0, OPENAI_C_BEST_OF, OPENAI_C_STORE, OPENAI_C_COUNT };
static const struct lg_jsonscan_key openai_cost_keys[OPENAI_C_COUNT] = {
    [OPENAI_C_N] = LG_JSONSCAN_KEY("n"),
    [OPENAI_C_BEST_OF] = LG_JSONSCAN_KEY("best_of"),
    [OPENAI_C_STORE] = LG_JSONSCAN_KEY("store"),
};

static void
openai_read_cost(const struct lg_jsonscan *s, struct lg_openai_req *out)
{
    uint32_t f[OPENAI_C_COUNT], dup;

    lg_jsonscan_members(s, 1, openai_cost_keys, OPENAI_C_COUNT, f, &dup);
    if (dup != 0) {
        out->choices = 2;
        out->store = true;
        return;
    }
    out->choices = LG_MAX(openai_choices(s, f[OPENAI_C_N]), openai_choices(s, f[OPENAI_C_BEST_OF]));
    out->store =
        f[OPENAI_C_STORE] != 0 && LG_JSONSCAN_T(s, f[OPENAI_C_STORE])->type == LG_JSONSCAN_TRUE;
}

static int
openai_read_fields(const struct lg_jsonscan *s, size_t prefix_bytes, struct lg_openai_req *out,
                   char *err, size_t errlen)
{
    struct openai_prefix pre = { .left = prefix_bytes };
    uint32_t f[OPENAI_F_N], v, dup;
    size_t k;

    lg_hstream_init(&pre.hash);
    if (s->tok[0].type != LG_JSONSCAN_OBJ) {
        return openai_refuse(out, NULL, err, errlen, "the request body must be a JSON object");
    }
    lg_jsonscan_members(s, 1, openai_fields, OPENAI_F_N, f, &dup);
    if (dup != 0) {
        out->code = "duplicate_key";
        return openai_refuse(out, openai_fields[dup - 1].name, err, errlen,
                             "the request body has the key \"%s\" more than once (engines read "
                             "either one): send it once",
                             openai_fields[dup - 1].name);
    }
    v = f[OPENAI_F_MODEL];
    if (!lg_jsonscan_is_null(s, v)) {
        const struct lg_jsonscan_tok *t = LG_JSONSCAN_T(s, v);
        struct lg_jsonscan_copy c = { out->model, 0, LG_MODEL_MAX };

        if (t->type != LG_JSONSCAN_STR) {
            return openai_refuse(out, "model", err, errlen, "\"model\" must be a string");
        }
        if (t->aux > LG_MODEL_MAX) {
            return openai_refuse(out, "model", err, errlen, "\"model\" is longer than %d bytes",
                                 LG_MODEL_MAX);
        }
        lg_jsonscan_unescape(s, t, LG_MODEL_MAX, lg_jsonscan_copy_cb, &c);
        out->model[c.n] = '\0';
    }
    v = f[OPENAI_F_STREAM];
    if (!lg_jsonscan_is_null(s, v)) {
        if (LG_JSONSCAN_T(s, v)->type != LG_JSONSCAN_TRUE
            && LG_JSONSCAN_T(s, v)->type != LG_JSONSCAN_FALSE) {
            return openai_refuse(out, "stream", err, errlen, "\"stream\" must be a boolean");
        }
        out->stream = LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_TRUE;
    }
    v = f[OPENAI_F_STREAM_OPTIONS];
    if (v != 0 && LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_OBJ) {
        uint32_t iu = lg_jsonscan_member(s, v, &openai_key_include_usage);

        out->include_usage = iu != 0 && LG_JSONSCAN_T(s, iu)->type == LG_JSONSCAN_TRUE;
    }
    v = f[OPENAI_F_MAX_COMPLETION_TOKENS];
    k = OPENAI_F_MAX_COMPLETION_TOKENS;
    if (lg_jsonscan_is_null(s, v)) {
        v = f[OPENAI_F_MAX_TOKENS];
        k = OPENAI_F_MAX_TOKENS;
    }
    if (!lg_jsonscan_is_null(s, v)) {
        const struct lg_jsonscan_tok *t = LG_JSONSCAN_T(s, v);
        char num[32];

        if (t->type == LG_JSONSCAN_INT && t->len < sizeof(num)) {
            out->max_tokens =
                openai_int(num, lg_jsonscan_raw_copy(s, t->off, t->len, num, sizeof(num)));
        }
        if (t->type != LG_JSONSCAN_INT || t->len >= sizeof(num) || out->max_tokens < 0) {
            out->max_tokens = -1;
            return openai_refuse(out, openai_fields[k].name, err, errlen,
                                 "\"%s\" must be a non-negative integer", openai_fields[k].name);
        }
    }
    openai_read_sampling(s, out);

    v = f[OPENAI_F_MESSAGES];
    if (v != 0 && LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_ARR) {
        for (uint32_t i = v; i < LG_JSONSCAN_T(s, v)->aux; i = lg_jsonscan_skip(s, i)) {
            uint32_t m[OPENAI_MSG_N];

            lg_jsonscan_members(s, i + 1, openai_msg_keys, OPENAI_MSG_N, m, NULL);
            if (m[OPENAI_MSG_ROLE] != 0
                && LG_JSONSCAN_T(s, m[OPENAI_MSG_ROLE])->type == LG_JSONSCAN_STR) {
                openai_prefix_add(s, &pre, m[OPENAI_MSG_ROLE]);
            }
            openai_add_text(s, m[OPENAI_MSG_CONTENT], out, &pre);
        }
    } else {
        uint32_t prompt = f[OPENAI_F_PROMPT];

        openai_add_text(s, prompt != 0 ? prompt : f[OPENAI_F_INPUT], out, &pre);
    }
    out->prefix_hash = pre.any ? lg_mix64(lg_hstream_value(&pre.hash)) | 1 : 0;
    openai_read_cost(s, out);
    return LG_OK;
}

static void
openai_init(struct lg_openai_req *out)
{
    memset(out, 0, sizeof(*out));
    out->max_tokens = -1;
    out->n = 1;
}


static int
openai_inspect_vec(const struct evbuffer_iovec *vec, int nvec, size_t prefix_bytes,
                   struct lg_openai_req *out, char *err, size_t errlen)
{
    struct lg_jsonscan_stack stack;
    struct lg_jsonscan s;
    int rc;

    openai_init(out);
    rc = lg_jsonscan_run(&s, vec, nvec, &stack, err, errlen);
    if (rc == LG_OK) {
        rc = openai_read_fields(&s, prefix_bytes, out, err, errlen);
    }
    if (rc != LG_OK && out->code == NULL) {
        out->code = "invalid_json";
    }
    lg_jsonscan_done(&s);
    return rc;
}

int
lg_openai_inspect(struct evbuffer *body, size_t prefix_bytes, struct lg_openai_req *out, char *err,
                  size_t errlen)
{
    struct evbuffer_iovec stackvec[16], *vec = stackvec;
    int n, rc;

    n = evbuffer_peek(body, -1, NULL, NULL, 0);
    if (n > (int)LG_ARRAY_SIZE(stackvec)) {
        vec = lg_xcalloc((size_t)n, sizeof(*vec));
    }
    n = evbuffer_peek(body, -1, NULL, vec, n);
    rc = openai_inspect_vec(vec, n, prefix_bytes, out, err, errlen);
    if (vec != stackvec) {
        free(vec);
    }
    return rc;
}

int
lg_openai_inspect_mem(const char *data, size_t len, size_t prefix_bytes, struct lg_openai_req *out,
                      char *err, size_t errlen)
{
    struct evbuffer_iovec v = { (void *)(uintptr_t)data, len };

    return openai_inspect_vec(&v, len > 0 ? 1 : 0, prefix_bytes, out, err, errlen);
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
lg_openai_error_body(struct evbuffer *out, const char *message, const char *type, const char *param,
                     const char *code)
{
    size_t before = evbuffer_get_length(out);

    evbuffer_add(out, "{\"error\":{\"message\":", 20);
    lg_json_append_string(out, message, strlen(message));
    evbuffer_add(out, ",\"type\":", 8);
    lg_json_append_string(out, type, strlen(type));
    evbuffer_add(out, ",\"param\":", 9);
    if (param != NULL) {
        lg_json_append_string(out, param, strlen(param));
    } else {
        evbuffer_add(out, "null", 4);
    }
    evbuffer_add(out, ",\"code\":", 8);
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
    case 501: /* a transfer coding, */
    case 505: /* or an HTTP version, the client should not have sent */
        return "invalid_request_error";
    default:
        return status >= 500 ? "api_error" : "invalid_request_error";
    }
}
