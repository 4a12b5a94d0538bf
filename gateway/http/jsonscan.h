/*
 * jsonscan.h: a validating JSON scanner that records, of a body, the values
 * a caller says it reads as a tape of tokens, and reads the tape back with
 * jansson's semantics (jsonscan.c). openai.c reads a request's fields with it.
 */
#ifndef LG_JSONSCAN_H
#define LG_JSONSCAN_H

#include <event2/buffer.h> /* struct evbuffer_iovec: a macro for struct iovec */

#include "base/lg_core.h"

#define LG_JSONSCAN_STACK_TOKS 128 /* tape entries a caller keeps on its stack */
/*
 * The most tokens a tape may hold (16 MiB of them): a body whose recorded
 * values would need more is refused (LG_ENOMEM with capped set), never read
 * into a tape of any size the body asks for.
 */
#define LG_JSONSCAN_MAX_TOKS (1u << 20)

/* Token types. */
enum {
    LG_JSONSCAN_OBJ = 1,
    LG_JSONSCAN_ARR,
    LG_JSONSCAN_STR,
    LG_JSONSCAN_INT,
    LG_JSONSCAN_REAL,
    LG_JSONSCAN_TRUE,
    LG_JSONSCAN_FALSE,
    LG_JSONSCAN_NULL
};
#define LG_JSONSCAN_M(type) (1u << (type)) /* a set of token types */
#define LG_JSONSCAN_M_ALL   0x1feu         /* every type */
#define LG_JSONSCAN_NO_KEY  0xff           /* tok.key of a value that is no member */

struct lg_jsonscan_tok {
    uint8_t type;
    bool esc;    /* string: has backslash escapes */
    uint8_t key; /* a member's value: its name's index in its object's want; else NO_KEY */
    union {
        uint32_t off; /* string: first byte after the quote; number: first byte */
        uint32_t ids; /* array: of its elements not recorded, the integers, plus the elements
                         of the arrays (what a prompt of token ids counts) */
    };
    uint32_t len; /* string, number: raw length; object, array: its members or elements, all */
    uint32_t aux; /* string: unescaped length; object, array: index after its last token */
};

/* A member name looked for, with its length (no NUL in it: \u0000 is refused). */
struct lg_jsonscan_key {
    const char *name;
    uint32_t len;
};

#define LG_JSONSCAN_KEY(lit)                \
    {                                       \
        .name = lit, .len = sizeof(lit) - 1 \
    }
#define LG_JSONSCAN_KEY_MAX 32 /* no name looked for is longer */

/*
 * What the scan records of a value whose token it records (a caller's static
 * table; NULL: the token alone). Of an object: its members named in keys,
 * each as its value's token tagged with the name's index (tok.key), then
 * what sub[k] (NULL: nothing) records inside it; a member named twice is
 * recorded twice. Of an array: its elements whose types are in elem_types,
 * each as elem records it; an object element that has none of elem's keys
 * leaves nothing (a reader looks for nothing else in it). Every other value
 * is checked as strictly and leaves nothing on the tape, so that the tape
 * grows with what the caller reads, not with the body.
 */
struct lg_jsonscan_want {
    const struct lg_jsonscan_key *keys;        /* object: the members recorded */
    const struct lg_jsonscan_want *const *sub; /* object: per key, what of its value; or NULL */
    uint32_t nkeys;                            /* fewer than LG_JSONSCAN_NO_KEY */
    uint32_t elem_types;                       /* array: LG_JSONSCAN_M() of the types recorded */
    const struct lg_jsonscan_want *elem;       /* array: what of each element recorded */
    /* object, optional: [n] the keys named by n bytes (bit k: keys[k]; at most
     * 32 keys), n up to LG_JSONSCAN_KEY_MAX: a name is compared with those
     * alone (LG_JSONSCAN_BY_LEN builds it); NULL: with every key */
    const uint32_t *by_len;
};

/*
 * A by_len table from an X-macro list of a want's keys, LIST(X, n) expanding
 * X(n, index, "name") for each: 33 entries of constant expressions, so that
 * the table cannot miss a key the list has.
 */
#define LG_JSONSCAN_LEN_IF(n, k, lit) (sizeof(lit) - 1 == (n) ? 1u << (k) : 0u) |
#define LG_JSONSCAN_LEN_ROW(LIST, n)  LIST(LG_JSONSCAN_LEN_IF, n) 0u
#define LG_JSONSCAN_BY_LEN(LIST)                                                                  \
    {                                                                                             \
        LG_JSONSCAN_LEN_ROW(LIST, 0), LG_JSONSCAN_LEN_ROW(LIST, 1), LG_JSONSCAN_LEN_ROW(LIST, 2), \
            LG_JSONSCAN_LEN_ROW(LIST, 3), LG_JSONSCAN_LEN_ROW(LIST, 4),                           \
            LG_JSONSCAN_LEN_ROW(LIST, 5), LG_JSONSCAN_LEN_ROW(LIST, 6),                           \
            LG_JSONSCAN_LEN_ROW(LIST, 7), LG_JSONSCAN_LEN_ROW(LIST, 8),                           \
            LG_JSONSCAN_LEN_ROW(LIST, 9), LG_JSONSCAN_LEN_ROW(LIST, 10),                          \
            LG_JSONSCAN_LEN_ROW(LIST, 11), LG_JSONSCAN_LEN_ROW(LIST, 12),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 13), LG_JSONSCAN_LEN_ROW(LIST, 14),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 15), LG_JSONSCAN_LEN_ROW(LIST, 16),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 17), LG_JSONSCAN_LEN_ROW(LIST, 18),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 19), LG_JSONSCAN_LEN_ROW(LIST, 20),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 21), LG_JSONSCAN_LEN_ROW(LIST, 22),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 23), LG_JSONSCAN_LEN_ROW(LIST, 24),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 25), LG_JSONSCAN_LEN_ROW(LIST, 26),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 27), LG_JSONSCAN_LEN_ROW(LIST, 28),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 29), LG_JSONSCAN_LEN_ROW(LIST, 30),                         \
            LG_JSONSCAN_LEN_ROW(LIST, 31), LG_JSONSCAN_LEN_ROW(LIST, 32)                          \
    }

struct lg_jsonscan {
    const struct evbuffer_iovec *vec;
    int nvec;
    int seg;                  /* segment being read */
    const unsigned char *p;   /* next byte */
    const unsigned char *end; /* end of the segment */
    uint32_t seg_off;         /* body offset of the segment's first byte */
    uintptr_t off_bias;       /* seg_off - the segment's address: p + off_bias = p's offset */
    uint32_t *starts;         /* body offset of each segment (random access) */
    struct lg_jsonscan_tok *tok;
    uint32_t ntok;
    uint32_t cap;
    const char *err; /* static: why the body was refused (LG_EINVAL) */
    uint32_t err_off;
    bool capped;                       /* LG_ENOMEM: the tape's bound, not an allocation */
    bool tok_heap;                     /* tok is ours (malloc), no longer the caller's */
    bool starts_heap;                  /* starts is ours (malloc) */
};

struct lg_jsonscan_copy {
    char *dst;
    size_t n;
    size_t cap;
};

/* Room a caller keeps on its stack for one scan: the tape's first tokens,
 * and the segment table of a body in up to LG_JSONSCAN_STACK_SEGS pieces. */
#define LG_JSONSCAN_STACK_SEGS 16
struct lg_jsonscan_stack {
    struct lg_jsonscan_tok tok[LG_JSONSCAN_STACK_TOKS];
    uint32_t starts[LG_JSONSCAN_STACK_SEGS];
};

/*
 * Scans the body in vec[nvec] (one object or array), recording of the top
 * value what want says (and its token, tok[0]). stack is the caller's (on
 * its stack, for as long as s is used): the tape moves to the heap when it
 * needs more tokens, the segment table when nvec > LG_JSONSCAN_STACK_SEGS.
 * Returns LG_OK; LG_EINVAL with "malformed JSON body at line L column C:
 * why" in err; or LG_ENOMEM with a message in err: the tape would pass
 * LG_JSONSCAN_MAX_TOKS (s->capped) or an allocation failed. Either way
 * lg_jsonscan_done() frees what it allocated.
 */
int lg_jsonscan_run(struct lg_jsonscan *s, const struct evbuffer_iovec *vec, int nvec,
                    const struct lg_jsonscan_want *want, struct lg_jsonscan_stack *stack,
                    char *err, size_t errlen);
void lg_jsonscan_done(struct lg_jsonscan *s);

/*
 * Tape references are "index + 1", so that 0 means absent, like the NULL
 * jansson returns.
 */
#define LG_JSONSCAN_T(s, r) (&(s)->tok[(r)-1])

static inline bool
lg_jsonscan_is_null(const struct lg_jsonscan *s, uint32_t r)
{
    return r == 0 || LG_JSONSCAN_T(s, r)->type == LG_JSONSCAN_NULL;
}

/* Index of the token after value i. */
uint32_t lg_jsonscan_skip(const struct lg_jsonscan *s, uint32_t i);

/*
 * One walk over the members recorded of object o (nothing found when o is
 * 0 or no object), tagged with the indexes of nkeys keys (its want's):
 * found[k] is set to the value of the last member named keys[k] (jansson:
 * the last duplicate wins), or to 0. With second, second[k] is set to the
 * value of the second member so named, or to 0 (tape order is body order).
 */
void lg_jsonscan_members(const struct lg_jsonscan *s, uint32_t o, uint32_t nkeys, uint32_t *found,
                         uint32_t *second);
/* The value of the last member of object o named by key index k, or 0. */
uint32_t lg_jsonscan_member(const struct lg_jsonscan *s, uint32_t o, uint32_t k);

/*
 * Calls fn on the first `limit` unescaped bytes of string token t (a cut
 * may fall inside a multi-byte character, as with any byte count).
 */
void lg_jsonscan_unescape(const struct lg_jsonscan *s, const struct lg_jsonscan_tok *t,
                          size_t limit, void (*fn)(void *arg, const char *p, size_t n), void *arg);

/* Up to cap raw bytes of a token into dst; returns how many. */
size_t lg_jsonscan_raw_copy(const struct lg_jsonscan *s, uint32_t off, uint32_t len, char *dst,
                            size_t cap);

/* An fn for lg_jsonscan_unescape(): appends to a struct lg_jsonscan_copy. */
void lg_jsonscan_copy_cb(void *arg, const char *p, size_t n);

#endif /* LG_JSONSCAN_H */
