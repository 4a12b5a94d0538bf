/*
 * test_config_loc.c: JSON pointer -> line:column on tricky texts. Each case
 * lists text, pointer and the expected result; a failure prints the case.
 */
#include <stdbool.h>
#include <stdint.h>

#include "base/config_loc.h"
#include "base/lg_core.h"
#include "lg_test.h"

struct loc_case {
    const char *text;
    const char *pointer;
    bool key; /* lg_config_loc_find_key() */
    int rc;   /* LG_OK or LG_EINVAL */
    int line, col;
};

static int
loc_run(const struct loc_case *cases, size_t n)
{
    int failed = 0;

    for (size_t i = 0; i < n; i++) {
        const struct loc_case *c = &cases[i];
        int line = -1, col = -1, rc;

        rc = (c->key ? lg_config_loc_find_key : lg_config_loc_find)(c->text, strlen(c->text),
                                                                    c->pointer, &line, &col);
        if (rc != c->rc || line != c->line || col != c->col) {
            fprintf(stderr,
                    "case %zu: text %s pointer \"%s\"%s: got rc=%d %d:%d, want rc=%d %d:%d\n", i,
                    c->text, c->pointer, c->key ? " (key)" : "", rc, line, col, c->rc, c->line,
                    c->col);
            failed = 1;
        }
    }
    return failed;
}

static int
test_basic_paths(void)
{
    static const char doc[] = "{\n"
                              "  \"listen\": \"127.0.0.1:8080\",\n"
                              "  \"backends\": [\n"
                              "    {\"name\": \"a\", \"url\": \"http://x\"},\n"
                              "    {\"name\": \"b\",\n"
                              "     \"url\": \"tcp://y\"}\n"
                              "  ]\n"
                              "}\n";
    static const struct loc_case cases[] = {
        { doc, "", false, LG_OK, 1, 1 },
        { doc, "/listen", false, LG_OK, 2, 13 },
        { doc, "/listen", true, LG_OK, 2, 3 },
        { doc, "/backends", false, LG_OK, 3, 15 },
        { doc, "/backends/0", false, LG_OK, 4, 5 },
        { doc, "/backends/0", true, LG_OK, 4, 5 }, /* array element: no key */
        { doc, "/backends/0/url", false, LG_OK, 4, 26 },
        { doc, "/backends/1/url", false, LG_OK, 6, 13 },
        { doc, "/backends/1/url", true, LG_OK, 6, 6 },
        /* missing: the deepest value that exists */
        { doc, "/backends/1/models", false, LG_EINVAL, 5, 5 },
        { doc, "/backends/2", false, LG_EINVAL, 3, 15 },
        { doc, "/backends/2/url", false, LG_EINVAL, 3, 15 },
        { doc, "/nope", true, LG_EINVAL, 1, 1 },
        { doc, "/listen/0", false, LG_EINVAL, 2, 13 }, /* into a string */
        /* bad pointers */
        { doc, "listen", false, LG_EINVAL, 1, 1 },
        { doc, "/backends/01", false, LG_EINVAL, 3, 15 },
        { doc, "/backends/-", false, LG_EINVAL, 3, 15 },
        { doc, "/backends/", false, LG_EINVAL, 3, 15 },
        { doc, "/backends/99999999999999", false, LG_EINVAL, 3, 15 },
    };

    return loc_run(cases, LG_ARRAY_SIZE(cases));
}

static int
test_strings_with_escapes(void)
{
    /* quotes, backslashes and brackets inside strings must not end or open anything */
    static const char doc[] = "{\"a\\\"b\": \"x\\\"}]y\\\\\", \"c\": \"{\\\"d\\\": 1}\", "
                              "\"d\": [\"]\", \"\\\\\"], \"e\": 5}";
    static const struct loc_case cases[] = {
        { doc, "/a\"b", false, LG_OK, 1, 10 },    { doc, "/c", false, LG_OK, 1, 27 },
        { doc, "/d", false, LG_OK, 1, 46 },       { doc, "/d/1", false, LG_OK, 1, 52 },
        { doc, "/e", false, LG_OK, 1, 64 },       { doc, "/e", true, LG_OK, 1, 59 },
        { doc, "/d~1x", false, LG_EINVAL, 1, 1 },
    };

    return loc_run(cases, LG_ARRAY_SIZE(cases));
}

static int
test_unicode(void)
{
    /* keys spelled with \u escapes match their UTF-8 pointer; columns count
     * characters, as jansson's json_error_t does */
    static const char doc[] =
        "{\"\\u00e9t\\u00E9\": 1, \"\\ud83d\\ude00\": 2, \"\xc3\xa9\xc3\xa9\": "
        "3,\n\"\xe2\x82\xac\": [\"\xe2\x82\xac\xe2\x82\xac\", 4]}";
    static const struct loc_case cases[] = {
        { doc, "/\xc3\xa9t\xc3\xa9", false, LG_OK, 1, 19 },
        { doc, "/\xf0\x9f\x98\x80", false, LG_OK, 1, 38 },
        { doc, "/\xc3\xa9\xc3\xa9", false, LG_OK, 1, 47 },
        { doc, "/\xe2\x82\xac", false, LG_OK, 2, 6 },
        { doc, "/\xe2\x82\xac/1", false, LG_OK, 2, 13 },
        { doc, "/\xc3\xa9", false, LG_EINVAL, 1, 1 },
    };

    return loc_run(cases, LG_ARRAY_SIZE(cases));
}

static int
test_nested_arrays(void)
{
    static const char doc[] = "[[1, [2, 3]], {\"a\": [4, {\"b\": [[], {}, [5]]}]}, \"x\"]";
    static const struct loc_case cases[] = {
        { doc, "/0", false, LG_OK, 1, 2 },
        { doc, "/0/1/1", false, LG_OK, 1, 10 },
        { doc, "/1/a/1/b", false, LG_OK, 1, 31 },
        { doc, "/1/a/1/b/2/0", false, LG_OK, 1, 41 },
        { doc, "/1/a/1/b/0/0", false, LG_EINVAL, 1, 32 }, /* empty array */
        { doc, "/1/a/1/b/1/x", false, LG_EINVAL, 1, 36 }, /* empty object */
        { doc, "/2", false, LG_OK, 1, 49 },
        { doc, "/3", false, LG_EINVAL, 1, 1 },
    };

    return loc_run(cases, LG_ARRAY_SIZE(cases));
}

static int
test_pointer_escapes(void)
{
    /* RFC 6901: ~1 is '/', ~0 is '~', and "~01" is "~1", not "/" */
    static const char doc[] = "{\"a/b\": 1, \"~\": 2, \"~1\": 3, \"/\": 4, \"\": 5}";
    static const struct loc_case cases[] = {
        { doc, "/a~1b", false, LG_OK, 1, 9 },   { doc, "/~0", false, LG_OK, 1, 17 },
        { doc, "/~01", false, LG_OK, 1, 26 },   { doc, "/~1", false, LG_OK, 1, 34 },
        { doc, "/", false, LG_OK, 1, 41 },      { doc, "/a/b", false, LG_EINVAL, 1, 1 },
        { doc, "/~2", false, LG_EINVAL, 1, 1 }, { doc, "/~", false, LG_EINVAL, 1, 1 },
    };

    return loc_run(cases, LG_ARRAY_SIZE(cases));
}

static int
test_prefix_keys(void)
{
    /* a key that is a prefix (or an extension) of another must not match it */
    static const char doc[] = "{\"timeout\": 1, \"time\": 2, \"timeouts\": {\"t\": 3}, \"t\": 4}";
    static const struct loc_case cases[] = {
        { doc, "/time", false, LG_OK, 1, 24 },       { doc, "/timeout", false, LG_OK, 1, 13 },
        { doc, "/timeouts/t", false, LG_OK, 1, 45 }, { doc, "/t", false, LG_OK, 1, 54 },
        { doc, "/tim", false, LG_EINVAL, 1, 1 },     { doc, "/timeoutss", false, LG_EINVAL, 1, 1 },
    };

    return loc_run(cases, LG_ARRAY_SIZE(cases));
}

static int
test_whitespace_and_scalars(void)
{
    static const char doc[] = "\r\n\t {\t\"a\"\r\n:\n\n   -1.5e3 ,\"b\":true,\"c\" : null , \"d\":"
                              "false}  ";
    static const struct loc_case cases[] = {
        { doc, "", false, LG_OK, 2, 3 },    { doc, "/a", false, LG_OK, 5, 4 },
        { doc, "/a", true, LG_OK, 2, 5 },   { doc, "/b", false, LG_OK, 5, 16 },
        { doc, "/c", false, LG_OK, 5, 27 }, { doc, "/d", false, LG_OK, 5, 38 },
    };

    return loc_run(cases, LG_ARRAY_SIZE(cases));
}

static int
test_broken_text(void)
{
    /* not JSON: finds what it can, never reads past len, always terminates */
    static const struct loc_case cases[] = {
        { "", "", false, LG_OK, 1, 1 },
        { "", "/a", false, LG_EINVAL, 1, 1 },
        { "   ", "/a", false, LG_EINVAL, 1, 4 },
        { "{\"a\": 1, \"b\"", "/b", false, LG_EINVAL, 1, 1 },
        { "{\"a\": 1, \"b\":", "/b", false, LG_EINVAL, 1, 1 },
        { "{\"a\": [1, 2", "/a/1", false, LG_OK, 1, 11 },
        { "{\"a\": [1, 2", "/a/2", false, LG_EINVAL, 1, 7 },
        { "{\"a\" 1, \"b\": 2}", "/b", false, LG_EINVAL, 1, 1 },
        { "{\"a\": 1,, \"b\": 2}", "/b", false, LG_EINVAL, 1, 1 },
        { "[1,,2]", "/2", false, LG_EINVAL, 1, 1 },
        { "{\"a\": {\"x\": ]}, \"b\": 2}", "/b", false, LG_EINVAL, 1, 1 },
        { "{\"\\u12", "/x", false, LG_EINVAL, 1, 1 },
        { "{\"\\", "/x", false, LG_EINVAL, 1, 1 },
        { "[[[[[[[[[[", "/0/0/0/0/0/0/0/0/0/0/0", false, LG_EINVAL, 1, 10 },
    };

    return loc_run(cases, LG_ARRAY_SIZE(cases));
}

static int
test_not_nul_terminated(void)
{
    /* len is honoured: the member after the cut does not exist */
    static const char doc[] = "{\"a\": 1, \"b\": 2}";
    int line, col;

    LG_CHECK(lg_config_loc_find(doc, 8, "/a", &line, &col) == LG_OK);
    LG_CHECK(line == 1 && col == 7);
    LG_CHECK(lg_config_loc_find(doc, 12, "/b", &line, &col) == LG_EINVAL);
    LG_CHECK(lg_config_loc_find(NULL, 0, "/b", &line, &col) == LG_EINVAL);
    LG_CHECK(line == 1 && col == 1);
    LG_CHECK(lg_config_loc_find(doc, sizeof(doc) - 1, NULL, &line, &col) == LG_OK);
    LG_CHECK(line == 1 && col == 1);
    return 0;
}

LG_TEST_MAIN(test_basic_paths, test_strings_with_escapes, test_unicode, test_nested_arrays,
             test_pointer_escapes, test_prefix_keys, test_whitespace_and_scalars, test_broken_text,
             test_not_nul_terminated)
