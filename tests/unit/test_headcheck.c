/*
 * test_headcheck.c: the request-head checks beyond llhttp: obs-fold, bare
 * LF and empty field names in the raw head (also across evbuffer chains),
 * field names, the Host rules, the request target, the transfer coding and
 * the version.
 */
#include <event2/buffer.h>
#include <llhttp.h>

#include "http/headcheck.h"
#include "http/httphdr.h"
#include "lg_test.h"

/*
 * Feeds s to the scanner as the client code does: piece by piece (each read
 * a chain of its own), each piece scanned, then drained.
 */
static const char *
raw(const char *s, size_t piece)
{
    struct lg_headcheck h = { 0 };
    struct evbuffer *in = evbuffer_new();
    size_t n = strlen(s);
    const char *why = NULL;

    for (size_t i = 0; i < n && why == NULL; i += piece) {
        struct evbuffer *chunk = evbuffer_new();
        size_t k = LG_MIN(piece, n - i);

        evbuffer_add(chunk, s + i, k);
        evbuffer_add_buffer(in, chunk);
        evbuffer_free(chunk);
        evbuffer_add(in, "\n ignored", 10); /* what comes after is not looked at */
        why = lg_headcheck_feed(&h, in, k);
        evbuffer_drain(in, evbuffer_get_length(in));
    }
    evbuffer_free(in);
    return why;
}

/* The whole head at once, in a buffer of many small chains. */
static const char *
raw_chains(const char *s)
{
    struct lg_headcheck h = { 0 };
    struct evbuffer *in = evbuffer_new();
    const char *why;

    for (size_t i = 0; s[i] != '\0'; i++) {
        struct evbuffer *chunk = evbuffer_new();

        evbuffer_add(chunk, s + i, 1);
        evbuffer_add_buffer(in, chunk);
        evbuffer_free(chunk);
    }
    why = lg_headcheck_feed(&h, in, strlen(s));
    evbuffer_free(in);
    return why;
}

static int
test_raw(void)
{
    const char *ok = "POST /v1/x HTTP/1.1\r\nHost: a\r\nX: b\r\n\r\n";

    for (size_t piece = 1; piece <= 8; piece++) {
        LG_CHECK(raw(ok, piece) == NULL);
        LG_CHECK_STR(raw("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", piece),
                     "obsolete line folding in a header");
        LG_CHECK_STR(raw("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n\tb\r\n\r\n", piece),
                     "obsolete line folding in a header");
        LG_CHECK_STR(raw("GET / HTTP/1.1\nHost: a\r\n\r\n", piece),
                     "a line of the request head ends in a bare LF");
        LG_CHECK_STR(raw("GET / HTTP/1.1\r\nHost: a\r\n\n", piece),
                     "a line of the request head ends in a bare LF");
        LG_CHECK_STR(raw("GET / HTTP/1.1\r\n: x\r\nHost: a\r\n\r\n", piece),
                     "a header field with an empty name");
        LG_CHECK_STR(raw("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n:\r\n\r\n", piece),
                     "a header field with an empty name");
    }
    /* a colon inside a value or a name's end is fine */
    LG_CHECK(raw("GET / HTTP/1.1\r\nHost: a:1\r\nX: :b:\r\n\r\n", 2) == NULL);
    /* a space inside a value is fine */
    LG_CHECK(raw("GET / HTTP/1.1\r\nHost: a\r\nX: a b\r\n\r\n", 3) == NULL);
    /* more chains than one peek returns */
    LG_CHECK(raw_chains(ok) == NULL);
    LG_CHECK_STR(raw_chains("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n\r\nY: b\n\r\n"),
                 "a line of the request head ends in a bare LF");
    return 0;
}

/* The rule byte by byte, as the scanner once ran it: the reference for test_random. */
static const char *
raw_reference(const char *s, size_t n)
{
    bool line_end = false;
    char prev = 0;

    for (size_t j = 0; j < n; j++) {
        if (line_end && (s[j] == ' ' || s[j] == '\t')) {
            return "obsolete line folding in a header";
        }
        if (line_end && s[j] == ':') {
            return "a header field with an empty name";
        }
        if (s[j] == '\n' && prev != '\r') {
            return "a line of the request head ends in a bare LF";
        }
        line_end = s[j] == '\n';
        prev = s[j];
    }
    return NULL;
}

/* Heads made of the bytes that matter, in random pieces: the same verdict as the reference. */
static int
test_random(void)
{
    static const char alphabet[] = "\r\n \ta:";
    uint64_t seed = 0x9e3779b97f4a7c15ull;

    for (int round = 0; round < 20000; round++) {
        char s[24];
        size_t n = 1 + (size_t)(lg_mix64(seed++) % (sizeof(s) - 1));
        const char *want, *got;

        for (size_t i = 0; i < n; i++) {
            s[i] = alphabet[lg_mix64(seed++) % (sizeof(alphabet) - 1)];
        }
        s[n] = '\0';
        want = raw_reference(s, n);
        got = raw(s, 1 + (size_t)(lg_mix64(seed++) % 6));
        LG_CHECK(want == got || (want != NULL && got != NULL && strcmp(want, got) == 0));
        got = raw_chains(s);
        LG_CHECK(want == got || (want != NULL && got != NULL && strcmp(want, got) == 0));
    }
    return 0;
}

static const char *
fields(unsigned minor, const char *const *hdrs)
{
    static struct lg_hdrs hs;

    lg_hdrs_release(&hs);
    lg_hdrs_init(&hs, 4096, 32);
    lg_hdrs_on_url(&hs, "/", 1);
    for (size_t i = 0; hdrs[i] != NULL; i += 2) {
        /* an empty name: llhttp 8 reports a span of 0 bytes */
        lg_hdrs_on_field(&hs, hdrs[i], strlen(hdrs[i]));
        lg_hdrs_on_value(&hs, hdrs[i + 1], strlen(hdrs[i + 1]));
    }
    return lg_headcheck_fields(&hs, minor);
}

static int
test_host(void)
{
    const char *one[] = { "Host", "gw.example:8080", "X", "y", NULL };
    const char *v6[] = { "host", "[::1]:80", NULL };
    const char *empty[] = { "Host", "", NULL };
    const char *none[] = { "X", "y", NULL };
    const char *two[] = { "Host", "a", "HOST", "a", NULL };
    const char *bad[] = { "Host", "a b", NULL };
    const char *slash[] = { "Host", "a/b", NULL };

    LG_CHECK(fields(1, one) == NULL);
    LG_CHECK(fields(1, v6) == NULL);
    LG_CHECK(fields(1, empty) == NULL);
    LG_CHECK(fields(0, none) == NULL); /* HTTP/1.0 needs none */
    LG_CHECK_STR(fields(1, none), "an HTTP/1.1 request needs a Host header");
    LG_CHECK_STR(fields(0, two), "more than one Host header");
    LG_CHECK_STR(fields(1, bad), "invalid Host header");
    LG_CHECK_STR(fields(1, slash), "invalid Host header");

    /* every byte: allowed exactly when RFC 3986 lets it into a host and port */
    for (int b = 1; b < 256; b++) {
        char v[2] = { (char)b, '\0' };
        const char *h[] = { "Host", v, NULL };
        bool ok = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
                  || strchr("-._~%!$&'()*+,;=:[]", b) != NULL;

        LG_CHECK((fields(1, h) == NULL) == ok);
    }
    return 0;
}

/* Header names compare without case, for ASCII letters only. */
static int
test_name_case(void)
{
    const char *mixed[] = { "hOsT", "a", NULL };
    const char *near[] = { "Hos\x54", "a", "H\x4fST", "b", NULL };

    LG_CHECK(lg_str_ieq("Content-Length", 14, "content-length"));
    LG_CHECK(lg_str_ieq("content-length", 14, "CONTENT-LENGTH"));
    LG_CHECK(!lg_str_ieq("content-lengthx", 14, "content-length!"));
    LG_CHECK(!lg_str_ieq("host", 4, "hos"));
    /* bytes 0x20 apart that are not letters: '@' '`', '[' '{', '^' '~', '-' '\r' */
    LG_CHECK(!lg_str_ieq("@", 1, "`"));
    LG_CHECK(!lg_str_ieq("[", 1, "{"));
    LG_CHECK(!lg_str_ieq("^", 1, "~"));
    LG_CHECK(!lg_str_ieq("\r", 1, "-"));
    LG_CHECK(!lg_str_ieq("\xc1", 1, "\xe1"));
    LG_CHECK(lg_mem_ieq("A-Z@[", "a-z@[", 5));
    LG_CHECK(fields(1, mixed) == NULL);
    LG_CHECK_STR(fields(1, near), "more than one Host header");
    return 0;
}

/* Field names: an empty one is refused (llhttp refuses the other non-tokens). */
static int
test_field_names(void)
{
    const char *empty[] = { "Host", "a", "", "x", NULL };
    const char *first[] = { "", "x", "Host", "a", NULL };
    const char *tokens[] = { "Host", "a", "X-!#$%&'*+-.^_`|~09az", "v", NULL };
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                                "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    static llhttp_settings_t settings;
    llhttp_t p;
    char head[64];

    LG_CHECK_STR(fields(1, empty), "a header field with an empty name");
    LG_CHECK_STR(fields(1, first), "a header field with an empty name");
    LG_CHECK(fields(1, tokens) == NULL);
    /* every other byte in a name: llhttp (strict) refuses it, so only the
     * empty name is left to the gateway */
    llhttp_settings_init(&settings);
    for (int b = 1; b < 256; b++) {
        llhttp_errno_t err;

        if (b == ':' || strchr(tchar, b) != NULL) {
            continue;
        }
        snprintf(head, sizeof(head), "GET / HTTP/1.1\r\nHost: a\r\nX%cY: v\r\n\r\n", b);
        llhttp_init(&p, HTTP_REQUEST, &settings);
        err = llhttp_execute(&p, head, strlen(head));
        LG_CHECK(err != HPE_OK);
    }
    return 0;
}

/* The request target: an absolute path, no fragment. */
static int
test_target(void)
{
    LG_CHECK(lg_headcheck_target("/v1/chat/completions?x=1", 24) == NULL);
    LG_CHECK(lg_headcheck_target("/", 1) == NULL);
    LG_CHECK_STR(lg_headcheck_target("", 0), "the request target must be an absolute path");
    LG_CHECK_STR(lg_headcheck_target("http://a/", 9),
                 "the request target must be an absolute path");
    LG_CHECK_STR(lg_headcheck_target("*", 1), "the request target must be an absolute path");
    LG_CHECK_STR(lg_headcheck_target("/v1/chat#frag", 13),
                 "the request target has a fragment (#): a client never sends one");
    LG_CHECK_STR(lg_headcheck_target("/v1?q=#", 7),
                 "the request target has a fragment (#): a client never sends one");
    /* the length given is the target: a '#' after it is not looked at */
    LG_CHECK(lg_headcheck_target("/v1#", 3) == NULL);
    return 0;
}

/* Transfer-Encoding: chunked alone; 400 for a malformed list or one that does not
 * end in a single chunked; 501 for codings before it. */
static int
test_transfer_coding(void)
{
    static const struct {
        const char *value;
        int status;
        const char *why;
    } cases[] = {
        { "chunked", 0, NULL },
        { "CHUNKED", 0, NULL },
        { " \tChunked\t ", 0, NULL },
        { "gzip, chunked", 501, "transfer codings other than chunked are not supported" },
        { "x-custom ,chunked", 501, "transfer codings other than chunked are not supported" },
        { "identity,gzip,chunked", 501, "transfer codings other than chunked are not supported" },
        { "gzip", 400, "the last transfer coding is not chunked: the body's length is unknown" },
        { "chunked, gzip", 400,
          "the last transfer coding is not chunked: the body's length is unknown" },
        { "chunked, chunked", 400, "chunked more than once in Transfer-Encoding" },
        { "gzip, chunked, chunked", 400, "chunked more than once in Transfer-Encoding" },
        { "", 400, "an empty element in Transfer-Encoding" },
        { ", chunked", 400, "an empty element in Transfer-Encoding" },
        { "chunked,", 400, "an empty element in Transfer-Encoding" },
        { "gzip,,chunked", 400, "an empty element in Transfer-Encoding" },
        { "chunked;q=1", 400, "a transfer coding that is not a token, or has parameters" },
        { "gzip;level=1, chunked", 400,
          "a transfer coding that is not a token, or has parameters" },
        { "chun ked", 400, "a transfer coding that is not a token, or has parameters" },
        { "\"chunked\"", 400, "a transfer coding that is not a token, or has parameters" },
        { ";chunked", 400, "a transfer coding that is not a token, or has parameters" },
    };

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        const char *why = NULL;
        int got = lg_headcheck_transfer_coding(cases[i].value, strlen(cases[i].value), &why);

        if (got != cases[i].status) {
            fprintf(stderr, "%s: got %d, want %d\n", cases[i].value, got, cases[i].status);
        }
        LG_CHECK(got == cases[i].status);
        if (cases[i].why != NULL) {
            LG_CHECK_STR(why, cases[i].why);
        }
    }
    return 0;
}

static int
version_parse(const char *line, llhttp_t *p)
{
    static llhttp_settings_t settings;

    llhttp_settings_init(&settings);
    llhttp_init(p, HTTP_REQUEST, &settings);
    return llhttp_execute(p, line, strlen(line));
}

/* A version llhttp does not know: 505 when well formed, 400 otherwise. */
static int
test_version(void)
{
    static const char *const unsupported[] = { "HTTP/1.2", "HTTP/3.0", "HTTP/1.9", "HTTP/9.9" };
    static const char *const malformed[] = { "HTTP/1.x", "HTTP/x.1", "HTTP/11", "HTTP/1.",
                                             "HTXP/1.1" };
    llhttp_t p;
    char line[64];

    for (size_t i = 0; i < LG_ARRAY_SIZE(unsupported); i++) {
        snprintf(line, sizeof(line), "GET / %s\r\nHost: a\r\n\r\n", unsupported[i]);
        LG_CHECK(version_parse(line, &p) == HPE_INVALID_VERSION);
        LG_CHECK(lg_headcheck_version_unsupported(&p));
    }
    for (size_t i = 0; i < LG_ARRAY_SIZE(malformed); i++) {
        snprintf(line, sizeof(line), "GET / %s\r\nHost: a\r\n\r\n", malformed[i]);
        LG_CHECK(version_parse(line, &p) != HPE_OK);
        LG_CHECK(!lg_headcheck_version_unsupported(&p));
    }
    /* the versions llhttp takes: the gateway decides (1.x served, 2.0 505, 0.9 400) */
    LG_CHECK(version_parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n", &p) == HPE_OK);
    LG_CHECK(version_parse("GET / HTTP/2.0\r\nHost: a\r\n\r\n", &p) == HPE_OK && p.http_major == 2);
    return 0;
}

static int
test_cleanup(void)
{
    const char *none[] = { NULL };

    (void)fields(1, none);
    return 0;
}

/* The chunked coding's size line (relay.c, resume.c). */
static int
test_chunk_head(void)
{
    static const struct {
        uint64_t n;
        const char *line;
    } cases[] = {
        { 0, "0\r\n" },
        { 9, "9\r\n" },
        { 26, "1a\r\n" },
        { 4096, "1000\r\n" },
        { UINT64_MAX, "ffffffffffffffff\r\n" },
    };
    char buf[LG_HTTP_CHUNK_HEAD_MAX];

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        size_t k = lg_http_chunk_head(buf, cases[i].n);

        LG_CHECK(k == strlen(cases[i].line) && memcmp(buf, cases[i].line, k) == 0);
    }
    return 0;
}

LG_TEST_MAIN(test_raw, test_random, test_host, test_name_case, test_field_names, test_target,
             test_transfer_coding, test_version, test_cleanup, test_chunk_head)
