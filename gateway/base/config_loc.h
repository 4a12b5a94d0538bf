/*
 * config_loc.h: finds where a JSON pointer (RFC 6901) points in raw JSON text,
 * so that semantic config errors carry FILE:LINE:COL like syntax errors do.
 */
#ifndef LG_CONFIG_LOC_H
#define LG_CONFIG_LOC_H

#include <stddef.h>

/*
 * Walks `text` (len bytes, need not be NUL-terminated) along `pointer`
 * ("" is the whole document, "/backends/2/url", "~0" = '~', "~1" = '/') and
 * stores the 1-based line and column of the first character of the value it
 * names. Lines are counted at '\n' and columns in UTF-8 characters, as
 * jansson counts them in json_error_t.
 *
 * Returns LG_OK when the whole pointer resolved. Otherwise returns LG_EINVAL
 * and stores the position of the deepest value that did resolve (for a
 * missing member: the enclosing object). line and col are always set (>= 1).
 * Never reads outside text; any input is safe, valid JSON or not.
 */
int lg_config_loc_find(const char *text, size_t len, const char *pointer, int *line, int *col);

/*
 * Same, but when the last token names an object member, stores the position
 * of the member's key (its opening quote) rather than of its value: this is
 * where an "unknown key" error belongs. For an array element it is the same
 * as lg_config_loc_find().
 */
int lg_config_loc_find_key(const char *text, size_t len, const char *pointer, int *line, int *col);

#endif /* LG_CONFIG_LOC_H */
