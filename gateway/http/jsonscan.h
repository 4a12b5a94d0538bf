/*
 * jsonscan.h: a validating JSON scanner that records a body as a tape of
 * tokens, and reads the tape back with jansson's semantics (jsonscan.c).
 * openai.c reads a request's fields with it.
 */
#ifndef LG_JSONSCAN_H
#define LG_JSONSCAN_H

#include <event2/buffer.h> /* struct evbuffer_iovec: a macro for struct iovec */

#include "base/lg_core.h"

#define LG_JSONSCAN_STACK_TOKS 128 /* tape entries a caller keeps on its stack */

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

struct lg_jsonscan_tok {
    uint8_t type;
    bool esc;     /* string: has backslash escapes */
    bool big;     /* real: may be out of a double's range (strtod decides) */
    uint32_t off; /* string: first byte after the quote; number: first byte */
    uint32_t len; /* string, number: raw length; array: element count */
    uint32_t aux; /* string: unescaped length; object, array: index after its last token */
};

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
    const char *err; /* static: why the body was refused */
    uint32_t err_off;
    uint32_t first_big;                /* index + 1 of the first real marked big; 0 = none */
    struct lg_jsonscan_tok *stack_tok; /* the caller's: tok, until it grows */
    uint32_t *stack_starts;            /* the caller's: starts, unless too short */
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
 * Scans the body in vec[nvec] (one object or array). stack is the caller's
 * (on its stack, for as long as s is used): the tape moves to the heap when
 * it needs more tokens, the segment table when nvec > LG_JSONSCAN_STACK_SEGS.
 * Returns LG_OK, or LG_EINVAL with "malformed JSON body at line L column
 * C: why" in err. Either way lg_jsonscan_done() frees what it allocated.
 */
int lg_jsonscan_run(struct lg_jsonscan *s, const struct evbuffer_iovec *vec, int nvec,
                    struct lg_jsonscan_stack *stack, char *err, size_t errlen);
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
 * One walk over the members of object o (nothing found when o is 0 or no
 * object): found[k] is set to the value of the last member named keys[k]
 * (jansson: the last duplicate wins), or to 0. Names compare unescaped.
 * With dup, *dup is set to k + 1 for the first of keys that comes a second
 * time (in the order of those second times; 0: none).
 */
void lg_jsonscan_members(const struct lg_jsonscan *s, uint32_t o,
                         const struct lg_jsonscan_key *keys, size_t nkeys, uint32_t *found,
                         uint32_t *dup);
/* The value of the last member named key of object o, or 0. */
uint32_t lg_jsonscan_member(const struct lg_jsonscan *s, uint32_t o,
                            const struct lg_jsonscan_key *key);

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
