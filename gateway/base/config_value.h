/*
 * config_value.h: the syntax of configuration values (config_value.c), for
 * the configuration's tables and setters (config.c, config_table.c) and the
 * getters of a policy's options (route/options.c), which take the same
 * durations and sizes. Each check returns false with the reason in why.
 */
#ifndef LG_CONFIG_VALUE_H
#define LG_CONFIG_VALUE_H

#include <sys/socket.h>

#include "base/lg_core.h"

struct lg_backend_conf;

#define CONF_QUOTE_MAX 64 /* bytes of a value echoed in a message */
#define CONF_QBUF      (CONF_QUOTE_MAX * 4 + 8)
#define CONF_NAME_MAX  64  /* backend names */
#define CONF_XNAME_MAX 128 /* backend names in an expanded document (NAME@[v6]:port) */

/* Writes s into dst for a message: control characters escaped, cut after
 * max bytes (on a character boundary), in double quotes if quote. */
const char *lg_conf_escape(char *dst, size_t size, const char *s, size_t max, bool quote);
/* The same, quoted and cut at CONF_QUOTE_MAX (dst: CONF_QBUF bytes). */
const char *lg_conf_quote(char *dst, size_t size, const char *s);
/* A duration (ms) or a size (bytes) as the config writes it: "1.5s", "16KiB". */
const char *lg_conf_fmt_duration(char *dst, size_t size, uint64_t ms);
const char *lg_conf_fmt_size(char *dst, size_t size, uint64_t n);

/* Strings: printable; a backend name; an expanded one (NAME@host:port); a
 * DNS name; an HTTP header name; a TLS server name; a URL path. */
bool lg_conf_check_printable(const char *s, char *why, size_t whysz);
bool lg_conf_check_name(const char *s, char *why, size_t whysz);
bool lg_conf_check_expanded_name(const char *s, char *why, size_t whysz);
bool lg_conf_check_dns_name(const char *s, char *why, size_t whysz);
bool lg_conf_check_header_name(const char *s, char *why, size_t whysz);
bool lg_conf_check_server_name(const char *s, char *why, size_t whysz);
bool lg_conf_check_path(const char *s, char *why, size_t whysz);

/* Units of durations (ms) and sizes (bytes), NULL-terminated. */
struct lg_conf_unit {
    const char *name;
    uint64_t mult;
};
extern const struct lg_conf_unit lg_conf_duration_units[];
extern const struct lg_conf_unit lg_conf_size_units[];

/*
 * Parses "<digits>[.<digits>]<unit>" into *out = number * unit. Returns 0, or
 * -1 (not that shape or unknown unit), -2 (not a whole number of the base
 * unit), -3 (overflow).
 */
int lg_conf_parse_scaled(const char *s, const struct lg_conf_unit *units, uint64_t *out);

/*
 * Resolves host (numeric first, then by name unless LG_CONFIG_F_NO_RESOLVE,
 * NULL = IPv4 any) with port into ss. Returns 0 or -1 with why set.
 */
int lg_conf_resolve(const char *host, uint16_t port, unsigned flags, struct sockaddr_storage *ss,
                    socklen_t *len, char *why, size_t whysz);

/* "host:port", "[v6]:port", ":port" or "*:port" (IPv4 any); port 0 allowed
 * (flags: LG_CONFIG_F_*). */
int lg_conf_address_parse(const char *s, unsigned flags, struct sockaddr_storage *ss,
                          socklen_t *len, char *why, size_t whysz);

/* scheme://host[:port][/prefix] into b's url fields; lg_conf_url_free()
 * frees what it set. */
int lg_conf_url_parse(const char *s, struct lg_backend_conf *b, char *why, size_t whysz);
void lg_conf_url_free(struct lg_backend_conf *b);

#endif /* LG_CONFIG_VALUE_H */
