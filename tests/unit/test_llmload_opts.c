/*
 * test_llmload_opts.c: llmload's command line: modes, URL and path rules,
 * defaults, and the errors that must exit with status 2.
 */
#include "../../tools/llmload/opts.c"
#include "../../tools/llmload/spec.c"
#include "lg_test.h"

#define ARGV(...) ((char *[]){ "llmload", __VA_ARGS__, NULL })
#define ARGC(...) ((int)(sizeof((char *[]){ "llmload", __VA_ARGS__ }) / sizeof(char *)))
#define PARSE(o, err, ...) \
    lg_ld_opts_parse((o), ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), (err), sizeof(err))

static int
test_defaults_and_modes(void)
{
    struct lg_ld_opts o;
    char err[256];

    LG_CHECK(PARSE(&o, err, "--url", "http://127.0.0.1:8080", "--model", "m", "--rate", "5",
                   "--duration", "2")
             == LG_OK);
    LG_CHECK(o.mode == LG_LD_MODE_OPEN && o.rate == 5 && o.duration_s == 2);
    LG_CHECK_STR(o.host, "127.0.0.1");
    LG_CHECK_STR(o.port, "8080");
    LG_CHECK_STR(o.path, "/v1/chat/completions");
    LG_CHECK(o.stream && o.reuse && o.progress && o.seed == 1 && o.timeout_s == 60);
    LG_CHECK(!o.realtime && !o.dry_run && !o.include_usage && o.max_conns == 8192);
    LG_CHECK(lg_ld_spec_max(&o.prompt_bytes) == 256 && lg_ld_spec_max(&o.max_tokens) == 64);
    LG_CHECK_STR(o.replica_header, "X-Llmsim-Replica");
    lg_ld_opts_free(&o);

    LG_CHECK(PARSE(&o, err, "--url", "http://h/v1/", "--model", "m", "--concurrency", "8",
                   "--requests", "100", "--api", "completions", "--no-stream", "--quiet",
                   "--no-connections-reuse")
             == LG_OK);
    LG_CHECK(o.mode == LG_LD_MODE_CLOSED && o.concurrency == 8 && o.requests == 100);
    LG_CHECK(o.max_conns == 8 && !o.stream && !o.progress && !o.reuse);
    LG_CHECK_STR(o.port, "80");
    LG_CHECK_STR(o.path, "/v1/completions");
    lg_ld_opts_free(&o);

    LG_CHECK(PARSE(&o, err, "--url", "http://[::1]:9/openai/v1", "--model", "m", "--trace-in",
                   "t.jsonl", "--api", "embeddings", "--stream")
             == LG_OK);
    LG_CHECK(o.mode == LG_LD_MODE_REPLAY && !o.stream); /* embeddings never stream */
    LG_CHECK_STR(o.host, "::1");
    LG_CHECK_STR(o.path, "/openai/v1/embeddings");
    lg_ld_opts_free(&o);

    LG_CHECK(PARSE(&o, err, "--url", "http://h:1", "--model", "m", "--rate", "1", "--requests", "3",
                   "--path", "/custom", "--extra-body", "{\"a\":1,\"b\":[true]}")
             == LG_OK);
    LG_CHECK_STR(o.path, "/custom");
    LG_CHECK_STR(o.extra_body, "\"a\":1,\"b\":[true]");
    lg_ld_opts_free(&o);

    LG_CHECK(PARSE(&o, err, "--dry-run", "--rate", "1", "--duration", "1") == LG_OK);
    lg_ld_opts_free(&o);
    LG_CHECK(PARSE(&o, err, "--help") == LG_LD_OPTS_HELP);
    lg_ld_opts_free(&o);
    LG_CHECK(PARSE(&o, err, "--version") == LG_LD_OPTS_VERSION);
    lg_ld_opts_free(&o);
    return 0;
}

static int
expect_usage_error(int argc, char **argv, const char *needle)
{
    struct lg_ld_opts o;
    char err[256];
    int rc = lg_ld_opts_parse(&o, argc, argv, err, sizeof(err));

    lg_ld_opts_free(&o);
    if (rc != LG_EINVAL || strstr(err, needle) == NULL) {
        fprintf(stderr, "rc %d, message '%s', wanted '%s'\n", rc, err, needle);
        return 1;
    }
    return 0;
}

#define BAD(needle, ...) \
    LG_CHECK(expect_usage_error(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), needle) == 0)

static int
test_usage_errors(void)
{
    BAD("one of --rate", "--url", "http://h:1", "--model", "m");
    BAD("exclude", "--url", "http://h:1", "--model", "m", "--rate", "1", "--concurrency", "1",
        "--requests", "1");
    BAD("needs --duration", "--url", "http://h:1", "--model", "m", "--rate", "1");
    BAD("--model is required", "--url", "http://h:1", "--rate", "1", "--requests", "1");
    BAD("--url is required", "--model", "m", "--rate", "1", "--requests", "1");
    BAD("only http://", "--url", "https://h:1", "--model", "m", "--rate", "1", "--requests", "1");
    BAD("bad port", "--url", "http://h:99999", "--model", "m", "--rate", "1", "--requests", "1");
    BAD("expected http://HOST", "--url", "http://:1", "--model", "m", "--rate", "1", "--requests",
        "1");
    BAD("--rate", "--rate", "0");
    BAD("--rate", "--rate", "abc");
    BAD("--concurrency", "--concurrency", "0");
    BAD("--duration", "--duration", "-2");
    BAD("not N or A-B", "--max-tokens", "x");
    BAD("add up", "--prompt-bytes", "mix:10%1");
    BAD("exceeds", "--prompt-bytes", "999999999");
    BAD("go together", "--url", "http://h:1", "--model", "m", "--rate", "1", "--requests", "1",
        "--prefix-groups", "4");
    BAD("--burst needs --rate", "--url", "http://h:1", "--model", "m", "--concurrency", "1",
        "--requests", "1", "--burst", "2:1:1");
    BAD("FACTOR*ON_S", "--burst", "3:1:1");
    BAD("--header", "--header", "Bad Name: v");
    BAD("--header", "--header", "novalue");
    BAD("--replica-header", "--replica-header", "a:b");
    BAD("--extra-body", "--extra-body", "[1]");
    BAD("--extra-body", "--extra-body", "{");
    BAD("--api", "--api", "images");
    BAD("--prefix-dist", "--prefix-dist", "pareto");
    BAD("unknown option", "--nope");
    BAD("needs a value", "--rate");
    BAD("unexpected argument", "stray");
    BAD("--path", "--url", "http://h:1", "--model", "m", "--rate", "1", "--requests", "1", "--path",
        "nopath");
    return 0;
}

LG_TEST_MAIN(test_defaults_and_modes, test_usage_errors)
