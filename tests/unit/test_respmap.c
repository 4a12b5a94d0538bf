/*
 * test_respmap.c: where Responses API answers were made (serve/respmap.c):
 * found until their ttl, bounded (a full set gives up its oldest), and the
 * session key read from the configured headers (serve/session.c).
 */
#include <stdio.h>
#include <string.h>

#include "base/config_types.h"
#include "http/httphdr.h"
#include "serve/respmap.h"
#include "serve/session.h"
#include "lg_test.h"

#define S(ns) ((uint64_t)(ns) * 1000000000ull)

static int
test_found_until_ttl(void)
{
    struct lg_respmap *m = lg_respmap_new(64, S(10));
    uint32_t b = 0;

    lg_respmap_put(m, "resp_a", 6, 7, S(100));
    lg_respmap_put(m, "resp_b", 6, 8, S(101));
    LG_CHECK(lg_respmap_get(m, "resp_a", 6, S(105), &b) == LG_OK && b == 7);
    LG_CHECK(lg_respmap_get(m, "resp_b", 6, S(111), &b) == LG_OK && b == 8);
    LG_CHECK(lg_respmap_get(m, "resp_c", 6, S(105), &b) == LG_EDECLINED);
    LG_CHECK(lg_respmap_get(m, "resp_", 5, S(105), &b) == LG_EDECLINED); /* not a prefix match */
    /* past its ttl: gone (and its slot free) */
    LG_CHECK(lg_respmap_get(m, "resp_a", 6, S(111), &b) == LG_EDECLINED);
    LG_CHECK(lg_respmap_count(m) == 1);
    /* written again: the new backend, a new ttl */
    lg_respmap_put(m, "resp_b", 6, 9, S(120));
    LG_CHECK(lg_respmap_get(m, "resp_b", 6, S(125), &b) == LG_OK && b == 9);
    LG_CHECK(lg_respmap_get(NULL, "resp_b", 6, S(125), &b) == LG_EDECLINED);
    lg_respmap_put(NULL, "resp_b", 6, 9, S(120)); /* no table: nothing */
    lg_respmap_free(m);
    return 0;
}

static int
test_bounded(void)
{
    struct lg_respmap *m = lg_respmap_new(16, S(3600));
    char id[32];
    uint32_t b, found = 0;

    for (uint32_t i = 0; i < 1000; i++) {
        snprintf(id, sizeof(id), "resp_%u", i);
        lg_respmap_put(m, id, strlen(id), i, S(1) + i);
    }
    LG_CHECK(lg_respmap_count(m) == 16);
    /* the newest of each set stays: the last one written is found */
    LG_CHECK(lg_respmap_get(m, "resp_999", 8, S(2000), &b) == LG_OK && b == 999);
    for (uint32_t i = 0; i < 1000; i++) {
        snprintf(id, sizeof(id), "resp_%u", i);
        if (lg_respmap_get(m, id, strlen(id), S(2000), &b) == LG_OK) {
            LG_CHECK(b == i);
            found++;
        }
    }
    LG_CHECK(found == 16);
    lg_respmap_free(m);
    return 0;
}

/* The session key of a head with these (name, value) pairs, as "header=value" ("-=": none). */
static int
session_of(struct lg_routing_conf *rc, const char *const *hdrs, char *out, size_t cap)
{
    struct lg_hdrs h;
    const char *v, *name = NULL;
    size_t n;

    memset(&h, 0, sizeof(h));
    lg_hdrs_init(&h, 4096, 32);
    lg_hdrs_on_url(&h, "/", 1);
    for (size_t i = 0; hdrs[i] != NULL; i += 2) {
        lg_hdrs_on_field(&h, hdrs[i], strlen(hdrs[i]));
        lg_hdrs_on_value(&h, hdrs[i + 1], strlen(hdrs[i + 1]));
    }
    v = lg_session_key(rc, &h, &n, &name);
    snprintf(out, cap, "%s=%.*s", v != NULL ? name : "-", (int)n, v != NULL ? v : "");
    LG_CHECK((v != NULL) == (lg_session_hash(rc, &h) != 0));
    lg_hdrs_release(&h);
    return 0;
}

static int
test_session_key(void)
{
    struct lg_routing_conf rc;
    char *names[] = { "x-agent-session", "session-id", NULL };
    char got[128];

    memset(&rc, 0, sizeof(rc));
    /* nothing configured: the default headers */
    LG_CHECK(session_of(&rc, (const char *[]){ "Session-Id", "s1", NULL }, got, sizeof(got))
             == 0);
    LG_CHECK_STR(got, "session-id=s1");
    LG_CHECK(session_of(&rc,
                        (const char *[]){ "x-session-id", "s2", "x-session-affinity", "s3",
                                          NULL },
                        got, sizeof(got))
             == 0);
    LG_CHECK_STR(got, "x-session-affinity=s3"); /* the list's order, not the request's */
    LG_CHECK(session_of(&rc, (const char *[]){ "x-other", "s", "session-id", "", NULL }, got,
                        sizeof(got))
             == 0);
    LG_CHECK_STR(got, "-="); /* empty: none */
    /* configured: only those, session_header first */
    rc.session_headers = names;
    rc.nsession_headers = 2;
    LG_CHECK(session_of(&rc,
                        (const char *[]){ "x-session-affinity", "a", "session-id", "b", NULL },
                        got, sizeof(got))
             == 0);
    LG_CHECK_STR(got, "session-id=b");
    rc.session_header = "x-tenant";
    LG_CHECK(session_of(&rc, (const char *[]){ "x-tenant", "t", "x-agent-session", "c", NULL },
                        got, sizeof(got))
             == 0);
    LG_CHECK_STR(got, "x-tenant=t");
    /* session_header alone (as before session_headers): that header only */
    rc.session_headers = NULL;
    rc.nsession_headers = 0;
    LG_CHECK(session_of(&rc, (const char *[]){ "session-id", "b", NULL }, got, sizeof(got)) == 0);
    LG_CHECK_STR(got, "-=");
    return 0;
}

LG_TEST_MAIN(test_found_until_ttl, test_bounded, test_session_key)
