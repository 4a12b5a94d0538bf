/*
 * httpreq.h: llmsim's incremental HTTP/1.1 request reader (llhttp glue).
 *
 * Feed it bytes as they arrive; it stops at the end of each request (llhttp
 * paused) and holds the method, path, the few headers llmsim acts on (Expect,
 * vLLM's endpoint-load-metrics-format) and
 * the body, within the limits it was given. Bad input ends in an HTTP status
 * to answer (400, 413, 414, 431) and a reason.
 */
#ifndef LG_SIM_HTTPREQ_H
#define LG_SIM_HTTPREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>

struct evbuffer;

#define LG_SIM_HTTPREQ_URL_MAX 8192

enum lg_sim_httpreq_rc {
    LG_SIM_HTTPREQ_MORE = 0, /* everything was consumed; the request is not complete */
    LG_SIM_HTTPREQ_DONE,     /* a request is complete; bytes after it were not consumed */
    LG_SIM_HTTPREQ_ERROR,    /* answer r->error_status and close */
};

struct lg_sim_httpreq {
    llhttp_t parser;
    size_t max_header_bytes; /* request line + header fields */
    size_t max_body_bytes;
    size_t header_bytes; /* counted so far for this request */
    char url[LG_SIM_HTTPREQ_URL_MAX];
    size_t url_len;
    uint8_t method;        /* llhttp_method_t */
    struct evbuffer *body; /* owned */
    char field[32];        /* current header name, lowercased, truncated */
    size_t field_len;
    bool field_expect;    /* current field is Expect */
    bool field_load;      /* current field is endpoint-load-metrics-format (vLLM's ORCA) */
    char load_value[12];  /* the first such field's value, truncated; valid once DONE */
    size_t load_value_len; /* its whole length (0: none) */
    bool load_seen;        /* the first such field was read: later ones are ignored */
    bool expect_continue; /* the client waits for 100 Continue */
    bool continue_sent;   /* set by the caller once it answered 100 Continue */
    bool keep_alive;      /* valid once DONE */
    bool in_body;         /* headers complete */
    bool complete;
    int error_status;
    const char *error_reason; /* static */
};

/* LG_ENOMEM if the body buffer cannot be allocated. */
int lg_sim_httpreq_init(struct lg_sim_httpreq *r, size_t max_header_bytes, size_t max_body_bytes);
void lg_sim_httpreq_free(struct lg_sim_httpreq *r);

/*
 * Parses up to len bytes; *consumed says how many were used (all of them
 * unless DONE or ERROR). After DONE, call lg_sim_httpreq_next() before
 * feeding the bytes of the next request.
 */
enum lg_sim_httpreq_rc lg_sim_httpreq_feed(struct lg_sim_httpreq *r, const char *data, size_t len,
                                           size_t *consumed);

/* Forgets the completed request (body included) and resumes parsing. */
void lg_sim_httpreq_next(struct lg_sim_httpreq *r);

/* The path without its query string, as a counted string. */
const char *lg_sim_httpreq_path(const struct lg_sim_httpreq *r, size_t *len);

/* The query string after '?' (without it), as a counted string; "" if none. */
const char *lg_sim_httpreq_query(const struct lg_sim_httpreq *r, size_t *len);

#endif /* LG_SIM_HTTPREQ_H */
