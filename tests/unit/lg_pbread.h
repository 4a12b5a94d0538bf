/*
 * lg_pbread.h: a small protobuf wire reader for tests and fuzzers that read
 * back what the OTLP encoder (gateway/base/otlp_pb.c) wrote. Written apart
 * from the encoder, as a reference: varints, fixed64 and length-delimited
 * fields; groups and fixed32 are not used by OTLP's span messages and read as
 * malformed.
 */
#ifndef LG_PBREAD_H
#define LG_PBREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lg_pbf {
    unsigned field;   /* its number */
    unsigned wt;      /* wire type: 0 varint, 1 fixed64, 2 length-delimited */
    uint64_t v;       /* varint or fixed64 */
    const uint8_t *p; /* length-delimited: its bytes */
    size_t n;
};

static inline bool
lg_pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;

        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            return true;
        }
    }
    return false;
}

/* The field at *p (advanced past it); false when malformed or cut. */
static inline bool
lg_pb_next(const uint8_t **p, const uint8_t *end, struct lg_pbf *f)
{
    uint64_t tag, len;

    if (!lg_pb_varint(p, end, &tag)) {
        return false;
    }
    f->field = (unsigned)(tag >> 3);
    f->wt = (unsigned)(tag & 7);
    switch (f->wt) {
    case 0:
        return lg_pb_varint(p, end, &f->v);
    case 1:
        if (end - *p < 8) {
            return false;
        }
        f->v = 0;
        for (int i = 0; i < 8; i++) {
            f->v |= (uint64_t)(*p)[i] << (8 * i);
        }
        *p += 8;
        return true;
    case 2:
        if (!lg_pb_varint(p, end, &len) || len > (uint64_t)(end - *p)) {
            return false;
        }
        f->p = *p;
        f->n = (size_t)len;
        *p += len;
        return true;
    default:
        return false;
    }
}

/* The nth occurrence of field in the message m[0..n); false when absent or
 * when the message is malformed before it. */
static inline bool
lg_pb_get(const uint8_t *m, size_t n, unsigned field, unsigned nth, struct lg_pbf *f)
{
    const uint8_t *p = m, *end = m + n;

    while (p < end) {
        if (!lg_pb_next(&p, end, f)) {
            return false;
        }
        if (f->field == field && nth-- == 0) {
            return true;
        }
    }
    return false;
}

#endif
