/*
 * fuzz_input.h: a fuzz input's bytes after its first (the selector) in a
 * buffer of exactly their length, never NUL-terminated, so that
 * AddressSanitizer sees a parser's read past them. NULL for an empty input
 * or when memory runs out; the caller frees it.
 */
#ifndef LG_FUZZ_INPUT_H
#define LG_FUZZ_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline char *
fuzz_input_rest(const uint8_t *data, size_t size, size_t *len)
{
    char *text;

    if (size == 0) {
        return NULL;
    }
    *len = size - 1;
    text = malloc(*len ? *len : 1);
    if (text != NULL) {
        memcpy(text, data + 1, *len);
    }
    return text;
}

#endif
