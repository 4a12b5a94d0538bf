/*
 * respid.c: the id of a Responses API answer (respid.h).
 *
 * Owns nothing; all state lives in the caller's struct. Only the kinds of
 * the two outer levels are kept: a key at depth 1 (`id`, `response`) or at
 * depth 2 inside `response` (`id`) is all that is looked for, and deeper
 * strings are skipped whatever they are.
 */
#include "http/respid.h"

#include <string.h>

enum { RID_OUT = 0, RID_STR, RID_ESC, RID_DONE };
enum { RID_S_OTHER = 0, RID_S_KEY, RID_S_ID };
enum { RID_P_NONE = 0, RID_P_ID, RID_P_RESPONSE };
enum { RID_K_OBJ = 1, RID_K_ARR };

void
lg_respid_init(struct lg_respid *r)
{
    memset(r, 0, sizeof(*r));
}

void
lg_respid_event_end(struct lg_respid *r)
{
    if (!r->found) {
        lg_respid_init(r); /* once found, the lexer stays done */
    }
}

/* A key ended: what its value will be. */
static void
respid_key_end(struct lg_respid *r)
{
    r->pending = RID_P_NONE;
    if (r->key_over) {
        return;
    }
    if (r->key_len == 2 && memcmp(r->key, "id", 2) == 0
        && (r->depth == 1 || (r->depth == 2 && r->in_response))) {
        r->pending = RID_P_ID;
    } else if (r->key_len == 8 && memcmp(r->key, "response", 8) == 0 && r->depth == 1) {
        r->pending = RID_P_RESPONSE;
    }
}

static void
respid_open(struct lg_respid *r, uint8_t kind)
{
    r->depth++;
    if (r->depth <= 2) {
        r->kind[r->depth - 1] = kind;
    }
    if (r->depth == 2) {
        r->in_response = kind == RID_K_OBJ && r->pending == RID_P_RESPONSE;
    }
    r->expect_key = kind == RID_K_OBJ;
    r->pending = RID_P_NONE;
}

static void
respid_close(struct lg_respid *r)
{
    if (r->depth > 0) {
        r->depth--;
    }
    if (r->depth < 2) {
        r->in_response = false;
    }
    r->expect_key = false;
    r->pending = RID_P_NONE;
}

/* One byte between tokens. */
static void
respid_out(struct lg_respid *r, char c)
{
    switch (c) {
    case '{':
        respid_open(r, RID_K_OBJ);
        break;
    case '[':
        respid_open(r, RID_K_ARR);
        break;
    case '}':
    case ']':
        respid_close(r);
        break;
    case ',':
        r->expect_key = r->depth >= 1 && r->depth <= 2 && r->kind[r->depth - 1] == RID_K_OBJ;
        r->pending = RID_P_NONE;
        break;
    case ':':
        break; /* pending stays for the value */
    case '"':
        r->state = RID_STR;
        if (r->expect_key && r->depth <= 2) {
            r->str = RID_S_KEY;
            r->key_len = 0;
            r->key_over = false;
        } else if (r->pending == RID_P_ID) {
            r->str = RID_S_ID;
            r->id_len = 0;
            r->id_over = false;
        } else {
            r->str = RID_S_OTHER;
        }
        r->expect_key = false;
        if (r->str != RID_S_KEY) {
            r->pending = RID_P_NONE;
        }
        break;
    case ' ':
    case '\t':
    case '\n':
    case '\r':
        break;
    default:
        r->pending = RID_P_NONE; /* a number or literal value */
        break;
    }
}

/* A string ended at its closing quote. */
static void
respid_str_end(struct lg_respid *r)
{
    r->state = RID_OUT;
    if (r->str == RID_S_KEY) {
        respid_key_end(r);
    } else if (r->str == RID_S_ID && !r->id_over && r->id_len > 0) {
        r->id[r->id_len] = '\0';
        r->found = true;
        r->state = RID_DONE;
    }
}

void
lg_respid_feed(struct lg_respid *r, const char *data, size_t len)
{
    for (size_t i = 0; i < len && r->state != RID_DONE; i++) {
        char c = data[i];

        switch (r->state) {
        case RID_OUT:
            respid_out(r, c);
            break;
        case RID_STR:
            if (c == '"') {
                respid_str_end(r);
            } else if (c == '\\') {
                r->state = RID_ESC;
                r->key_over = true; /* ours have no escapes */
                r->id_over = true;
            } else if (r->str == RID_S_KEY) {
                if (r->key_len < sizeof(r->key)) {
                    r->key[r->key_len++] = c;
                } else {
                    r->key_over = true;
                }
            } else if (r->str == RID_S_ID) {
                if (r->id_len < LG_RESPONSE_ID_MAX && (unsigned char)c >= 0x20) {
                    r->id[r->id_len++] = c;
                } else {
                    r->id_over = true;
                }
            }
            break;
        case RID_ESC:
            r->state = RID_STR;
            break;
        default:
            break;
        }
    }
}
