/*
 * openai.c: request-body inspection and OpenAI-style error bodies. The body
 * is scanned once into a tape of tokens (jsonscan.c) that holds only the
 * values read here (openai_want_body: a body's size does not grow it); the
 * fields are then read from the tape with jansson's semantics, in one walk
 * of each object for all the names read from it. No string is copied except
 * the model name; the hashed prompt prefix is unescaped on the fly.
 *
 * Owns nothing past a call: the token tape lives only inside
 * lg_openai_inspect() (on the stack for ordinary bodies, at most
 * LG_JSONSCAN_MAX_TOKS). Bodies are bounded by the caller (max_body_bytes,
 * at most 1 GiB: offsets fit in 32 bits) before they reach here.
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

/*
 * The top-level members read, found in one walk of the body's object. Those
 * before OPENAI_F_ONCE may not come twice: the gateway reads the last of
 * duplicates (as jansson does) and an engine may read the first, so a key
 * authorised for one model could be served another (and a stream taken for
 * a plain answer). `user` is not read but attributes the request at the
 * engine: it is refused twice too. The others may repeat (the last read).
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
    OPENAI_F_MAX_OUTPUT_TOKENS,
    OPENAI_F_PREVIOUS_RESPONSE_ID,
    OPENAI_F_ONCE,
    OPENAI_F_MIN_TOKENS = OPENAI_F_ONCE, /* serve/resume.c lowers it on a continuation */
    OPENAI_F_TEMPERATURE,
    OPENAI_F_SEED,
    OPENAI_F_N,
    OPENAI_F_BEST_OF,
    OPENAI_F_STORE,
    OPENAI_F_INSTRUCTIONS, /* the Responses API's system prompt */
    OPENAI_F_SYSTEM,       /* the Messages API's */
    OPENAI_F_COUNT
};
/* The members' names, as X(a, index, "name") for each (LG_JSONSCAN_BY_LEN). */
#define OPENAI_FIELD_LIST(X, a)                                   \
    X(a, OPENAI_F_MODEL, "model")                                 \
    X(a, OPENAI_F_MESSAGES, "messages")                           \
    X(a, OPENAI_F_MAX_TOKENS, "max_tokens")                       \
    X(a, OPENAI_F_STREAM, "stream")                               \
    X(a, OPENAI_F_STREAM_OPTIONS, "stream_options")               \
    X(a, OPENAI_F_MAX_COMPLETION_TOKENS, "max_completion_tokens") \
    X(a, OPENAI_F_PROMPT, "prompt")                               \
    X(a, OPENAI_F_INPUT, "input")                                 \
    X(a, OPENAI_F_USER, "user")                                   \
    X(a, OPENAI_F_MAX_OUTPUT_TOKENS, "max_output_tokens")         \
    X(a, OPENAI_F_PREVIOUS_RESPONSE_ID, "previous_response_id")   \
    X(a, OPENAI_F_MIN_TOKENS, "min_tokens")                       \
    X(a, OPENAI_F_TEMPERATURE, "temperature")                     \
    X(a, OPENAI_F_SEED, "seed")                                   \
    X(a, OPENAI_F_N, "n")                                         \
    X(a, OPENAI_F_BEST_OF, "best_of")                             \
    X(a, OPENAI_F_STORE, "store")                                 \
    X(a, OPENAI_F_INSTRUCTIONS, "instructions")                   \
    X(a, OPENAI_F_SYSTEM, "system")
#define OPENAI_FIELD_KEY(a, k, lit) [k] = LG_JSONSCAN_KEY(lit),
static const struct lg_jsonscan_key openai_fields[OPENAI_F_COUNT] = { OPENAI_FIELD_LIST(
    OPENAI_FIELD_KEY, 0) };
_Static_assert(OPENAI_F_COUNT <= 32, "by_len holds a key per bit");
static const uint32_t openai_fields_by_len[LG_JSONSCAN_KEY_MAX + 1] =
    LG_JSONSCAN_BY_LEN(OPENAI_FIELD_LIST);

/* The members of a message, in the order they are hashed. */
enum { OPENAI_MSG_ROLE = 0, OPENAI_MSG_CONTENT, OPENAI_MSG_N };
static const struct lg_jsonscan_key openai_msg_keys[OPENAI_MSG_N] = {
    [OPENAI_MSG_ROLE] = LG_JSONSCAN_KEY("role"),
    [OPENAI_MSG_CONTENT] = LG_JSONSCAN_KEY("content"),
};
static const struct lg_jsonscan_key openai_text_key[1] = { LG_JSONSCAN_KEY("text") };
static const struct lg_jsonscan_key openai_usage_key[1] = { LG_JSONSCAN_KEY("include_usage") };

/*
 * What the scan records (jsonscan.h), all that openai_read_fields() reads:
 * the members above; of `messages`, its objects' role and content; of
 * stream_options, include_usage; of a text (content, prompt, input: a
 * string or an array of parts), its strings and its objects' `text`, a text
 * again, while its token ids (integers, arrays of them) are only counted.
 * Nothing else of a body is kept, whatever its size.
 */
static const struct lg_jsonscan_want openai_want_text;
static const struct lg_jsonscan_want *const openai_part_sub[1] = { &openai_want_text };
static const struct lg_jsonscan_want openai_want_part = {
    .keys = openai_text_key,
    .sub = openai_part_sub,
    .nkeys = 1,
};
static const struct lg_jsonscan_want openai_want_text = {
    .elem_types = LG_JSONSCAN_M(LG_JSONSCAN_STR) | LG_JSONSCAN_M(LG_JSONSCAN_OBJ),
    .elem = &openai_want_part,
};
static const struct lg_jsonscan_want *const openai_msg_sub[OPENAI_MSG_N] = {
    [OPENAI_MSG_CONTENT] = &openai_want_text,
};
static const struct lg_jsonscan_want openai_want_msg = {
    .keys = openai_msg_keys,
    .sub = openai_msg_sub,
    .nkeys = OPENAI_MSG_N,
};
static const struct lg_jsonscan_want openai_want_msgs = {
    .elem_types = LG_JSONSCAN_M(LG_JSONSCAN_OBJ),
    .elem = &openai_want_msg,
};
static const struct lg_jsonscan_want openai_want_usage = { .keys = openai_usage_key, .nkeys = 1 };

/* An input's objects: a text part (`text`), or a message of the Responses API
 * (`role`, `content`), hashed in that order. */
enum { OPENAI_ITEM_TEXT = 0, OPENAI_ITEM_ROLE, OPENAI_ITEM_CONTENT, OPENAI_ITEM_N };
static const struct lg_jsonscan_key openai_item_keys[OPENAI_ITEM_N] = {
    [OPENAI_ITEM_TEXT] = LG_JSONSCAN_KEY("text"),
    [OPENAI_ITEM_ROLE] = LG_JSONSCAN_KEY("role"),
    [OPENAI_ITEM_CONTENT] = LG_JSONSCAN_KEY("content"),
};
static const struct lg_jsonscan_want *const openai_item_sub[OPENAI_ITEM_N] = {
    [OPENAI_ITEM_TEXT] = &openai_want_text,
    [OPENAI_ITEM_CONTENT] = &openai_want_text,
};
static const struct lg_jsonscan_want openai_want_item = {
    .keys = openai_item_keys,
    .sub = openai_item_sub,
    .nkeys = OPENAI_ITEM_N,
};
static const struct lg_jsonscan_want openai_want_input = {
    .elem_types = LG_JSONSCAN_M(LG_JSONSCAN_STR) | LG_JSONSCAN_M(LG_JSONSCAN_OBJ),
    .elem = &openai_want_item,
};
static const struct lg_jsonscan_want *const openai_body_sub[OPENAI_F_COUNT] = {
    [OPENAI_F_MESSAGES] = &openai_want_msgs,
    [OPENAI_F_STREAM_OPTIONS] = &openai_want_usage,
    [OPENAI_F_PROMPT] = &openai_want_text,
    [OPENAI_F_INPUT] = &openai_want_input,
    [OPENAI_F_INSTRUCTIONS] = &openai_want_text,
    [OPENAI_F_SYSTEM] = &openai_want_text,
};
static const struct lg_jsonscan_want openai_want_body = {
    .keys = openai_fields,
    .sub = openai_body_sub,
    .nkeys = OPENAI_F_COUNT,
    .by_len = openai_fields_by_len,
};

/* Adds a text value (string or array of parts) to the size and prefix. */
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
    /* token ids: about four bytes of text each (integers, and arrays' elements) */
    out->prompt_bytes += 4 * (uint64_t)t->ids;
    for (uint32_t i = r; i < t->aux; i = lg_jsonscan_skip(s, i)) {
        const struct lg_jsonscan_tok *part = &s->tok[i];

        if (part->type == LG_JSONSCAN_STR) {
            openai_add_text(s, i + 1, out, pre);
        } else if (part->type == LG_JSONSCAN_OBJ) {
            openai_add_text(s, lg_jsonscan_member(s, i + 1, 0), out, pre);
        }
    }
}

/*
 * An `input` (or `prompt`): a text as above, or an array whose objects may
 * also be the Responses API's messages ({"role", "content"}): role, text,
 * content, as a chat message is hashed.
 */
static void
openai_add_input(const struct lg_jsonscan *s, uint32_t r, struct lg_openai_req *out,
                 struct openai_prefix *pre)
{
    const struct lg_jsonscan_tok *t;

    if (r == 0) {
        return;
    }
    t = LG_JSONSCAN_T(s, r);
    if (t->type != LG_JSONSCAN_ARR) {
        openai_add_text(s, r, out, pre);
        return;
    }
    out->prompt_bytes += 4 * (uint64_t)t->ids;
    for (uint32_t i = r; i < t->aux; i = lg_jsonscan_skip(s, i)) {
        const struct lg_jsonscan_tok *part = &s->tok[i];
        uint32_t m[OPENAI_ITEM_N];

        if (part->type == LG_JSONSCAN_STR) {
            openai_add_text(s, i + 1, out, pre);
        } else if (part->type == LG_JSONSCAN_OBJ) {
            lg_jsonscan_members(s, i + 1, OPENAI_ITEM_N, m, NULL);
            if (m[OPENAI_ITEM_ROLE] != 0
                && LG_JSONSCAN_T(s, m[OPENAI_ITEM_ROLE])->type == LG_JSONSCAN_STR) {
                openai_prefix_add(s, pre, m[OPENAI_ITEM_ROLE]);
            }
            openai_add_text(s, m[OPENAI_ITEM_TEXT], out, pre);
            openai_add_text(s, m[OPENAI_ITEM_CONTENT], out, pre);
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

/* The value of integer token r (the scanner checked it fits int64). */
static int64_t
openai_int_tok(const struct lg_jsonscan *s, uint32_t r)
{
    const struct lg_jsonscan_tok *t = LG_JSONSCAN_T(s, r);
    char num[32];

    /* an integer within int64 has at most 20 bytes, the sign included */
    return openai_int(num, lg_jsonscan_raw_copy(s, t->off, t->len, num, sizeof(num)));
}

/* Choices `n` or `best_of` asks for: 1 when absent or null, 2 for anything
 * but a positive integer (never an error: the engine judges it). */
static uint32_t
openai_choices(const struct lg_jsonscan *s, uint32_t v)
{
    int64_t n;

    if (lg_jsonscan_is_null(s, v)) {
        return 1;
    }
    if (LG_JSONSCAN_T(s, v)->type != LG_JSONSCAN_INT) {
        return 2;
    }
    n = openai_int_tok(s, v);
    return n < 1 ? 2 : (uint32_t)LG_MIN(n, (int64_t)UINT32_MAX);
}

/*
 * Whether a JSON number (the scanner checked its grammar) is zero, as
 * strtod(num) == 0.0: without an exponent, when its digits are all '0' (no
 * strtod call: a tenth of the scan's instructions went there); with one,
 * strtod decides (1e-400 is 0.0 to it).
 */
static bool
openai_num_is_zero(const char *num)
{
    bool zero = true;

    for (const char *c = num; *c != '\0'; c++) {
        if (*c == 'e' || *c == 'E') {
            return strtod(num, NULL) == 0.0;
        }
        zero &= *c < '1' || *c > '9';
    }
    return zero;
}

/*
 * What says whether the answer repeats (serve/resume.c): temperature 0, a
 * seed, one choice. Never refused (duplicates included, the last read as
 * jansson does): the engine judges the values, and a wrong guess here only
 * makes a continuation less faithful.
 */
static void
openai_read_sampling(const struct lg_jsonscan *s, const uint32_t *f, struct lg_openai_req *out)
{
    uint32_t v = f[OPENAI_F_TEMPERATURE];
    char num[32];

    if (v != 0
        && (LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_INT
            || LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_REAL)) {
        const struct lg_jsonscan_tok *t = LG_JSONSCAN_T(s, v);

        num[lg_jsonscan_raw_copy(s, t->off, t->len, num, sizeof(num) - 1)] = '\0';
        out->greedy = t->len < sizeof(num) && openai_num_is_zero(num);
    }
    v = f[OPENAI_F_SEED];
    out->seeded = v != 0 && LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_INT;
    v = f[OPENAI_F_N];
    if (v != 0 && LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_INT) {
        out->n = openai_int_tok(s, v);
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
 * A token count (max_tokens, max_completion_tokens, min_tokens): absent or
 * null leaves *n alone; else an integer within 0..LG_OPENAI_TOKENS_MAX, or
 * the body is refused naming field k. Unchecked, a count near INT64_MIN
 * would overflow where a continuation subtracts what was delivered.
 */
static int
openai_read_tokens(const struct lg_jsonscan *s, const uint32_t *f, size_t k, int64_t *n,
                   struct lg_openai_req *out, char *err, size_t errlen)
{
    uint32_t v = f[k];
    int64_t x;

    if (lg_jsonscan_is_null(s, v)) {
        return LG_OK;
    }
    if (LG_JSONSCAN_T(s, v)->type != LG_JSONSCAN_INT || (x = openai_int_tok(s, v)) < 0
        || x > LG_OPENAI_TOKENS_MAX) {
        return openai_refuse(out, openai_fields[k].name, err, errlen,
                             "\"%s\" must be an integer from 0 to %d", openai_fields[k].name,
                             LG_OPENAI_TOKENS_MAX);
    }
    *n = x;
    return LG_OK;
}

/*
 * What a duplicate would cost (serve/hedge.c): the choices asked for and
 * whether the completion is stored. A body naming one twice is not refused
 * (the gateway does not route on them): it is taken at its costliest
 * instead, as an engine may read either.
 */
static void
openai_read_cost(const struct lg_jsonscan *s, const uint32_t *f, const uint32_t *second,
                 struct lg_openai_req *out)
{
    if (second[OPENAI_F_N] != 0 || second[OPENAI_F_BEST_OF] != 0 || second[OPENAI_F_STORE] != 0) {
        out->choices = 2;
        out->store = true;
        return;
    }
    out->choices = LG_MAX(openai_choices(s, f[OPENAI_F_N]), openai_choices(s, f[OPENAI_F_BEST_OF]));
    out->store =
        f[OPENAI_F_STORE] != 0 && LG_JSONSCAN_T(s, f[OPENAI_F_STORE])->type == LG_JSONSCAN_TRUE;
}

static int
openai_read_fields(const struct lg_jsonscan *s, size_t prefix_bytes, struct lg_openai_req *out,
                   char *err, size_t errlen)
{
    struct openai_prefix pre = { .left = prefix_bytes };
    uint32_t f[OPENAI_F_COUNT], second[OPENAI_F_COUNT], v, dup = 0;
    int64_t max_tokens = -1, max_completion_tokens = -1, max_output_tokens = -1, min_tokens = 0;
    size_t k;

    lg_hstream_init(&pre.hash);
    if (s->tok[0].type != LG_JSONSCAN_OBJ) {
        return openai_refuse(out, NULL, err, errlen, "the request body must be a JSON object");
    }
    lg_jsonscan_members(s, 1, OPENAI_F_COUNT, f, second);
    /* the first of them to come a second time */
    for (k = 0; k < OPENAI_F_ONCE; k++) {
        if (second[k] != 0 && (dup == 0 || second[k] < second[dup - 1])) {
            dup = (uint32_t)k + 1;
        }
    }
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
        uint32_t iu = lg_jsonscan_member(s, v, 0);

        out->include_usage = iu != 0 && LG_JSONSCAN_T(s, iu)->type == LG_JSONSCAN_TRUE;
    }
    /* each checked, though max_completion_tokens (when not null) is the one read: a
     * continuation lowers them all (serve/resume.c) */
    if (openai_read_tokens(s, f, OPENAI_F_MAX_TOKENS, &max_tokens, out, err, errlen) != LG_OK
        || openai_read_tokens(s, f, OPENAI_F_MAX_COMPLETION_TOKENS, &max_completion_tokens, out,
                              err, errlen)
               != LG_OK
        || openai_read_tokens(s, f, OPENAI_F_MAX_OUTPUT_TOKENS, &max_output_tokens, out, err,
                              errlen)
               != LG_OK
        || openai_read_tokens(s, f, OPENAI_F_MIN_TOKENS, &min_tokens, out, err, errlen) != LG_OK) {
        return LG_EINVAL;
    }
    out->max_tokens = max_completion_tokens >= 0 ? max_completion_tokens
                      : max_output_tokens >= 0   ? max_output_tokens
                                                 : max_tokens;
    v = f[OPENAI_F_PREVIOUS_RESPONSE_ID];
    if (!lg_jsonscan_is_null(s, v)) {
        const struct lg_jsonscan_tok *t = LG_JSONSCAN_T(s, v);
        struct lg_jsonscan_copy c = { out->previous_response_id, 0, LG_RESPONSE_ID_MAX };

        if (t->type != LG_JSONSCAN_STR || t->aux == 0 || t->aux > LG_RESPONSE_ID_MAX) {
            return openai_refuse(out, "previous_response_id", err, errlen,
                                 "\"previous_response_id\" must be a string of 1 to %d bytes",
                                 LG_RESPONSE_ID_MAX);
        }
        lg_jsonscan_unescape(s, t, LG_RESPONSE_ID_MAX, lg_jsonscan_copy_cb, &c);
        out->previous_response_id[c.n] = '\0';
    }
    openai_read_sampling(s, f, out);

    /* a system prompt given apart (Responses' instructions, Messages' system) comes first */
    openai_add_text(s, f[OPENAI_F_INSTRUCTIONS], out, &pre);
    openai_add_text(s, f[OPENAI_F_SYSTEM], out, &pre);
    v = f[OPENAI_F_MESSAGES];
    if (v != 0 && LG_JSONSCAN_T(s, v)->type == LG_JSONSCAN_ARR) {
        for (uint32_t i = v; i < LG_JSONSCAN_T(s, v)->aux; i = lg_jsonscan_skip(s, i)) {
            uint32_t m[OPENAI_MSG_N];

            lg_jsonscan_members(s, i + 1, OPENAI_MSG_N, m, NULL);
            if (m[OPENAI_MSG_ROLE] != 0
                && LG_JSONSCAN_T(s, m[OPENAI_MSG_ROLE])->type == LG_JSONSCAN_STR) {
                openai_prefix_add(s, &pre, m[OPENAI_MSG_ROLE]);
            }
            openai_add_text(s, m[OPENAI_MSG_CONTENT], out, &pre);
        }
    } else {
        uint32_t prompt = f[OPENAI_F_PROMPT];

        openai_add_input(s, prompt != 0 ? prompt : f[OPENAI_F_INPUT], out, &pre);
    }
    out->prefix_hash = pre.any ? lg_mix64(lg_hstream_value(&pre.hash)) | 1 : 0;
    openai_read_cost(s, f, second, out);
    return LG_OK;
}

static void
openai_init(struct lg_openai_req *out)
{
    memset(out, 0, sizeof(*out));
    out->max_tokens = -1;
    out->n = 1;
    out->status = 400;
}


static int
openai_inspect_vec(const struct evbuffer_iovec *vec, int nvec, size_t prefix_bytes,
                   struct lg_openai_req *out, char *err, size_t errlen)
{
    struct lg_jsonscan_stack stack;
    struct lg_jsonscan s;
    int rc;

    openai_init(out);
    rc = lg_jsonscan_run(&s, vec, nvec, &openai_want_body, &stack, err, errlen);
    if (rc == LG_OK) {
        rc = openai_read_fields(&s, prefix_bytes, out, err, errlen);
    }
    if (rc == LG_ENOMEM) {
        out->status = s.capped ? 413 : 503;
        out->code = s.capped ? "too_many_values" : "out_of_memory";
    } else if (rc != LG_OK && out->code == NULL) {
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

    /* one peek where the body's extents fit the stack's (a small body's);
     * a length, not -1, so that the count is every extent's when more */
    n = evbuffer_peek(body, (ev_ssize_t)evbuffer_get_length(body), NULL, stackvec,
                      (int)LG_ARRAY_SIZE(stackvec));
    if (n > (int)LG_ARRAY_SIZE(stackvec)) {
        if ((vec = calloc((size_t)n, sizeof(*vec))) == NULL) {
            openai_init(out);
            out->status = 503;
            out->code = "out_of_memory";
            snprintf(err, errlen, "no memory to read the request body");
            return LG_ENOMEM;
        }
        n = evbuffer_peek(body, (ev_ssize_t)evbuffer_get_length(body), NULL, vec, n);
    }
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
