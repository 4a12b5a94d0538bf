/*
 * test_openai.c: request-body inspection: the fields read (with jansson's
 * rules: keys compare unescaped, the last duplicate wins inside a message or
 * stream_options, while a top-level field the gateway reads may not come
 * twice), the prompt size and prefix hash, bodies split across evbuffer
 * chains, and the bodies refused with their messages, codes and params.
 */
#include <event2/buffer.h>

#include "http/jsonscan.h" /* LG_JSONSCAN_MAX_TOKS */
#include "http/openai.h"
#include "lg_test.h"

/* 200 plain bytes: every printable ASCII byte but '"' and '\\', over and over. */
#define ALPHABET                                                                                   \
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !#$%&'()*+,-./:;<=>?@[]^_`{|}~" \
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 !#$%&'()*+,-./:;<=>?@[]^_`{|}~" \
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ01"

static int
inspect(const char *body, size_t prefix, struct lg_openai_req *r, char *err)
{
    return lg_openai_inspect_mem(body, strlen(body), prefix, r, err, 256);
}

/* The same body in chains of 1, 2, 3... bytes. */
static int
inspect_split(const char *body, size_t prefix, struct lg_openai_req *r, char *err)
{
    struct evbuffer *b = evbuffer_new();
    size_t len = strlen(body), off = 0, step = 1;
    int rc;

    while (off < len) {
        size_t n = LG_MIN(step, len - off);

        evbuffer_add_reference(b, body + off, n, NULL, NULL);
        off += n;
        step++;
    }
    rc = lg_openai_inspect(b, prefix, r, err, 256);
    evbuffer_free(b);
    return rc;
}

static uint64_t
prefix_of(const char *bytes, size_t n)
{
    struct lg_hstream h;

    lg_hstream_init(&h);
    lg_hstream_feed(&h, bytes, n);
    return lg_mix64(lg_hstream_value(&h)) | 1;
}

static int
test_chat_fields(void)
{
    struct lg_openai_req r;
    char err[256];
    const char *body = "{\"model\":\"llama-8b\",\"stream\":true,\"stream_options\":"
                       "{\"include_usage\":true},\"max_tokens\":64,\"messages\":["
                       "{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":\"hello\"}]}";

    LG_CHECK(inspect(body, 2048, &r, err) == LG_OK);
    LG_CHECK_STR(r.model, "llama-8b");
    LG_CHECK(r.stream && r.include_usage);
    LG_CHECK(r.max_tokens == 64);
    LG_CHECK(r.prompt_bytes == 14);
    LG_CHECK(r.prefix_hash == prefix_of("systemBe brief.userhello", 24));
    LG_CHECK(inspect(body, 8, &r, err) == LG_OK);
    LG_CHECK(r.prefix_hash == prefix_of("systemBe", 8));
    LG_CHECK(inspect(body, 0, &r, err) == LG_OK);
    LG_CHECK(r.prefix_hash == 0);
    LG_CHECK(inspect_split(body, 2048, &r, err) == LG_OK);
    LG_CHECK_STR(r.model, "llama-8b");
    LG_CHECK(r.prefix_hash == prefix_of("systemBe brief.userhello", 24));
    return 0;
}

/* What says whether an answer repeats: temperature 0, a seed, one choice. */
static int
test_sampling_fields(void)
{
    struct lg_openai_req r;
    char err[256];

    LG_CHECK(inspect("{\"model\":\"m\"}", 2048, &r, err) == LG_OK);
    LG_CHECK(!r.greedy && !r.seeded && r.n == 1);
    LG_CHECK(inspect("{\"temperature\":0,\"seed\":42,\"n\":1}", 2048, &r, err) == LG_OK);
    LG_CHECK(r.greedy && r.seeded && r.n == 1);
    LG_CHECK(inspect("{\"temperature\":-0.0e3,\"seed\":null,\"n\":3}", 2048, &r, err) == LG_OK);
    LG_CHECK(r.greedy && !r.seeded && r.n == 3);
    /* read, never refused: the engine judges odd values */
    LG_CHECK(inspect("{\"temperature\":0.7,\"seed\":\"7\",\"n\":\"2\"}", 2048, &r, err) == LG_OK);
    LG_CHECK(!r.greedy && !r.seeded && r.n == 1);
    LG_CHECK(inspect("{\"temperature\":\"0\",\"seed\":1.5}", 2048, &r, err) == LG_OK);
    LG_CHECK(!r.greedy && !r.seeded);
    /* twice: not refused (model, stream... are), the last read, as jansson reads it */
    LG_CHECK(inspect("{\"temperature\":1,\"n\":2,\"temperature\":0,\"n\":1}", 2048, &r, err)
             == LG_OK);
    LG_CHECK(r.greedy && r.n == 1);
    /* zero as strtod reads it: every digit 0, or an exponent that underflows */
    static const struct {
        const char *t;
        bool greedy;
    } zeros[] = {
        { "0.000", true },  { "-0", true },     { "0e-7", true },
        { "1e-400", true }, { "0.001", false }, { "10", false },
        { "-0.5", false },  { "2E-3", false },  { "0.0000000000000000000000000000001", false },
    };
    for (size_t i = 0; i < sizeof(zeros) / sizeof(zeros[0]); i++) {
        char body[96];

        snprintf(body, sizeof(body), "{\"temperature\":%s}", zeros[i].t);
        LG_CHECK(inspect(body, 2048, &r, err) == LG_OK);
        LG_CHECK(r.greedy == zeros[i].greedy);
    }
    return 0;
}

static int
test_jansson_rules(void)
{
    struct lg_openai_req r;
    char err[256];

    /* an escaped key is the same key; in a message the last duplicate wins; role hashes
     * before content; a null max_completion_tokens gives way to max_tokens */
    LG_CHECK(inspect("{\"mod\\u0065l\":\"b\",\"max_completion_tokens\":null,\"max_tokens\":2,"
                     "\"messages\":[{\"content\":\"x\\ny\",\"role\":\"u\",\"role\":\"v\"}]}",
                     2048, &r, err)
             == LG_OK);
    LG_CHECK_STR(r.model, "b");
    LG_CHECK(r.max_tokens == 2);
    LG_CHECK(r.prompt_bytes == 3);
    LG_CHECK(r.prefix_hash == prefix_of("vx\ny", 4));
    /* parts: strings, objects' text, token ids; a messages that is no array gives way to prompt */
    LG_CHECK(
        inspect("{\"messages\":{},\"input\":\"no\",\"prompt\":[\"ab\",{\"text\":\"c\"},7,[1,2],"
                "1.5,{\"type\":\"image\"}]}",
                2048, &r, err)
        == LG_OK);
    LG_CHECK(r.model[0] == '\0');
    LG_CHECK(r.max_tokens == -1);
    LG_CHECK(r.prompt_bytes == 2 + 1 + 4 + 8);
    LG_CHECK(r.prefix_hash == prefix_of("abc", 3));
    /* a present prompt (even null) hides input */
    LG_CHECK(inspect("{\"prompt\":null,\"input\":\"x\"}", 2048, &r, err) == LG_OK);
    LG_CHECK(r.prompt_bytes == 0 && r.prefix_hash == 0);
    /* escapes unescape before hashing and counting; UTF-8 passes as is */
    LG_CHECK(inspect_split("{\"prompt\":\"\\u00e9\\ud83d\\ude00\\\"\xc3\xa9\"}", 2048, &r, err)
             == LG_OK);
    LG_CHECK(r.prompt_bytes == 2 + 4 + 1 + 2);
    LG_CHECK(r.prefix_hash == prefix_of("\xc3\xa9\xf0\x9f\x98\x80\"\xc3\xa9", 9));
    return 0;
}

/*
 * The top-level members are found in one walk of the object, a message's in
 * another: each field is found whatever comes between (members of nested
 * objects, other fields, escaped names, chain splits), and inside a message
 * or stream_options the last duplicate still wins.
 */
static int
test_members_in_one_walk(void)
{
    static const char *body = "{\"x\":{\"model\":\"nested\",\"stream\":false,\"messages\":[]},"
                              "\"str\\u0065am\":false,\"prompt\":\"ignored: messages is an array\","
                              "\"model\":\"second\",\"max_tokens\":4,"
                              "\"stream_options\":{\"include_usage\":false,\"include_usage\":true},"
                              "\"messages\":[{\"content\":[\"p\",{\"text\":\"q\",\"text\":\"r\"}],"
                              "\"role\":\"u\",\"x\":{\"role\":\"nested\"},\"content\":\"yz\"}],"
                              "\"max_completion_tokens\":5,\"x\":1,\"x\":2}";
    struct lg_openai_req r;
    char err[256];

    LG_CHECK(inspect(body, 2048, &r, err) == LG_OK);
    LG_CHECK_STR(r.model, "second");
    LG_CHECK(!r.stream && r.include_usage);
    LG_CHECK(r.max_tokens == 5);
    LG_CHECK(r.prompt_bytes == 2);
    LG_CHECK(r.prefix_hash == prefix_of("uyz", 3));
    LG_CHECK(inspect_split(body, 2048, &r, err) == LG_OK);
    LG_CHECK_STR(r.model, "second");
    LG_CHECK(!r.stream && r.include_usage && r.max_tokens == 5 && r.prompt_bytes == 2);
    LG_CHECK(r.prefix_hash == prefix_of("uyz", 3));
    LG_CHECK(inspect("{\"prompt\":[{\"text\":\"abc\",\"text\":7}]}", 2048, &r, err) == LG_OK);
    LG_CHECK(r.prompt_bytes == 0 && r.prefix_hash == 0);
    return 0;
}

/*
 * A top-level field the gateway reads, given twice, is refused whatever the
 * values (the same twice, null, another type, escaped names, far apart):
 * param names it, the first to come a second time when several do. Keys the
 * gateway does not read may repeat, as may fields of nested objects.
 */
static int
test_duplicate_keys(void)
{
    static const struct {
        const char *body;
        const char *param;
    } cases[] = {
        { "{\"model\":\"a\",\"messages\":[],\"model\":\"b\"}", "model" },
        { "{\"model\":\"b\",\"model\":\"a\"}", "model" },
        { "{\"model\":\"a\",\"model\":\"a\"}", "model" },
        { "{\"model\":\"a\",\"model\":null}", "model" },
        { "{\"model\":\"a\",\"model\":1}", "model" },
        { "{\"model\":\"a\",\"mod\\u0065l\":\"b\"}", "model" },
        { "{\"\\u006dodel\":\"a\",\"x\":{\"y\":[1,{\"model\":2}]},\"model\":\"b\"}", "model" },
        { "{\"model\":\"m\",\"stream\":false,\"stream\":true}", "stream" },
        { "{\"model\":\"m\",\"stream_options\":{},\"stream_options\":null}", "stream_options" },
        { "{\"model\":\"m\",\"max_tokens\":1,\"max_tokens\":100000}", "max_tokens" },
        { "{\"model\":\"m\",\"max_completion_tokens\":1,\"max_completion_tokens\":2}",
          "max_completion_tokens" },
        { "{\"model\":\"m\",\"messages\":[],\"messages\":[]}", "messages" },
        { "{\"model\":\"m\",\"prompt\":\"a\",\"prompt\":\"b\"}", "prompt" },
        { "{\"model\":\"m\",\"input\":\"a\",\"input\":\"b\"}", "input" },
        { "{\"model\":\"m\",\"user\":\"alice\",\"user\":\"bob\"}", "user" },
        /* several: the one whose second comes first; type errors come after */
        { "{\"stream\":1,\"model\":\"a\",\"user\":1,\"user\":2,\"model\":\"b\",\"stream\":2}",
          "user" },
    };
    static const char *const fine[] = {
        "{\"model\":\"m\",\"temperature\":1,\"temperature\":2,\"n\":1,\"n\":1}",
        ("{\"model\":\"m\",\"messages\":[{\"role\":\"a\",\"role\":\"b\"}],"
         "\"stream_options\":{\"include_usage\":true,\"include_usage\":false}}"),
        "{\"model\":\"m\",\"tools\":[{\"model\":1,\"model\":2}],\"models\":1,\"mode\":2}",
    };
    struct lg_openai_req r;
    char err[256];

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        for (int split = 0; split < 2; split++) {
            int rc = split ? inspect_split(cases[i].body, 2048, &r, err)
                           : inspect(cases[i].body, 2048, &r, err);

            if (rc != LG_EINVAL || r.param == NULL || strcmp(r.param, cases[i].param) != 0
                || r.code == NULL || strcmp(r.code, "duplicate_key") != 0
                || strstr(err, "more than once") == NULL) {
                fprintf(stderr, "body %s: rc %d param %s code %s (%s), want %s\n", cases[i].body,
                        rc, r.param ? r.param : "null", r.code ? r.code : "null", err,
                        cases[i].param);
                return 1;
            }
        }
    }
    LG_CHECK(inspect(cases[0].body, 2048, &r, err) == LG_EINVAL);
    LG_CHECK_STR(err, "the request body has the key \"model\" more than once (engines read "
                      "either one): send it once");
    for (size_t i = 0; i < LG_ARRAY_SIZE(fine); i++) {
        LG_CHECK(inspect(fine[i], 2048, &r, err) == LG_OK);
        LG_CHECK(inspect_split(fine[i], 2048, &r, err) == LG_OK);
        LG_CHECK(r.param == NULL && r.code == NULL);
    }
    return 0;
}

/* Token counts: 0 to 2^31 - 1 pass; max_completion_tokens, when not null, is the one read. */
static int
test_token_counts(void)
{
    struct lg_openai_req r;
    char err[256];

    LG_CHECK(inspect("{\"max_tokens\":2147483647,\"min_tokens\":2147483647}", 0, &r, err)
             == LG_OK);
    LG_CHECK(r.max_tokens == 2147483647);
    LG_CHECK(inspect("{\"max_tokens\":0,\"min_tokens\":0}", 0, &r, err) == LG_OK);
    LG_CHECK(r.max_tokens == 0);
    LG_CHECK(inspect("{\"max_tokens\":7,\"max_completion_tokens\":64}", 0, &r, err) == LG_OK);
    LG_CHECK(r.max_tokens == 64);
    LG_CHECK(inspect("{\"max_tokens\":7,\"max_completion_tokens\":null,\"min_tokens\":null}", 0,
                     &r, err)
             == LG_OK);
    LG_CHECK(r.max_tokens == 7);
    /* min_tokens may repeat (the last read, as jansson and the continuation read it) */
    LG_CHECK(inspect("{\"min_tokens\":-1,\"min_tokens\":2}", 0, &r, err) == LG_OK);
    return 0;
}

static int
test_refused(void)
{
    static const struct {
        const char *body;
        const char *msg;
        const char *param; /* NULL: none */
    } cases[] = {
        { "", "'{' or '[' expected", NULL },
        { "\"str\"", "'{' or '[' expected", NULL },
        { "[1]", "must be a JSON object", NULL },
        { "{\"model\":\"m\"} x", "end of input expected", NULL },
        { "{\"model\":\"m\",}", "string or '}' expected", NULL },
        { "{\"model\":\"m\"\n,\"a\":tru}", "line 2 column", NULL },
        { "{\"a\":\"\\u0000\"}", "\\u0000 is not allowed", NULL },
        { "{\"a\":\"\\ud800x\"}", "high surrogate", NULL },
        { "{\"a\":\"\\udc00\"}", "lone low surrogate", NULL },
        { "{\"a\":\"\xed\xa0\x80\"}", "invalid UTF-8", NULL },
        { "{\"a\":\"\xc0\xaf\"}", "invalid UTF-8", NULL },
        { "{\"a\":\"tab\there\"}", "control character", NULL },
        { "{\"a\":01}", "invalid number", NULL },
        { "{\"a\":9223372036854775808}", "integer out of range", NULL },
        { "{\"a\":1e400}", "real number out of range", NULL },
        { "{\"model\":7}", "\"model\" must be a string", "model" },
        { "{\"stream\":\"yes\"}", "\"stream\" must be a boolean", "stream" },
        { "{\"max_tokens\":-1}", "\"max_tokens\" must be an integer from 0 to 2147483647",
          "max_tokens" },
        { "{\"max_tokens\":1.0}", "must be an integer from 0", "max_tokens" },
        { "{\"max_tokens\":1,\"max_completion_tokens\":\"2\"}",
          "\"max_completion_tokens\" must be an integer from 0 to 2147483647",
          "max_completion_tokens" },
        /* each token count is checked, the one read or not: a continuation
         * subtracts what was delivered from each */
        { "{\"max_completion_tokens\":64,\"max_tokens\":-9223372036854775808}",
          "\"max_tokens\" must be an integer from 0", "max_tokens" },
        { "{\"max_tokens\":64,\"max_completion_tokens\":2147483648}",
          "\"max_completion_tokens\" must be an integer from 0", "max_completion_tokens" },
        { "{\"max_tokens\":9223372036854775807}", "must be an integer from 0", "max_tokens" },
        { "{\"max_tokens\":64,\"min_tokens\":-9223372036854775808}",
          "\"min_tokens\" must be an integer from 0 to 2147483647", "min_tokens" },
        { "{\"min_tokens\":\"1\"}", "\"min_tokens\" must be an integer", "min_tokens" },
        { "{\"min_tokens\":3,\"min_tokens\":2147483648}", "\"min_tokens\" must be", "min_tokens" },
    };
    struct lg_openai_req r;
    char err[256];

    for (size_t i = 0; i < LG_ARRAY_SIZE(cases); i++) {
        if (inspect(cases[i].body, 2048, &r, err) != LG_EINVAL || strstr(err, cases[i].msg) == NULL
            || r.status != 400 || r.code == NULL || strcmp(r.code, "invalid_json") != 0
            || (r.param == NULL) != (cases[i].param == NULL)
            || (r.param != NULL && strcmp(r.param, cases[i].param) != 0)) {
            fprintf(stderr, "body %s: got \"%s\" (param %s), want \"%s\" (param %s)\n",
                    cases[i].body, err, r.param ? r.param : "null", cases[i].msg,
                    cases[i].param ? cases[i].param : "null");
            return 1;
        }
    }
    return 0;
}

static int
test_limits(void)
{
    struct lg_openai_req r;
    char err[256], body[8192], model[300];
    size_t n;

    /* nesting: 2048 levels pass, a value below them does not */
    n = 0;
    for (int i = 0; i < 2048; i++) {
        body[n++] = '[';
    }
    for (int i = 0; i < 2048; i++) {
        body[n++] = ']';
    }
    LG_CHECK(lg_openai_inspect_mem(body, n, 0, &r, err, sizeof(err)) != LG_OK);
    LG_CHECK(strstr(err, "must be a JSON object") != NULL);
    memmove(body + 2049, body + 2048, n - 2048);
    body[2048] = '1';
    LG_CHECK(lg_openai_inspect_mem(body, n + 1, 0, &r, err, sizeof(err)) != LG_OK);
    LG_CHECK(strstr(err, "maximum nesting depth") != NULL);
    /* a model name of exactly LG_MODEL_MAX bytes fits, one more does not */
    memset(model, 'm', LG_MODEL_MAX);
    model[LG_MODEL_MAX] = '\0';
    snprintf(body, sizeof(body), "{\"model\":\"%s\"}", model);
    LG_CHECK(inspect(body, 0, &r, err) == LG_OK);
    LG_CHECK(strlen(r.model) == LG_MODEL_MAX);
    snprintf(body, sizeof(body), "{\"model\":\"%sm\"}", model);
    LG_CHECK(inspect(body, 0, &r, err) != LG_OK);
    LG_CHECK(strstr(err, "longer than") != NULL);
    /* reals: only those that may reach 1e308 go through strtod; the first out of range is named */
    LG_CHECK(inspect("{\"a\":[9e307,99.9e306,1.7976931348623157e308,-17976931348623157e292,"
                     "1e-99999999,0.001e310]}",
                     0, &r, err)
             == LG_OK);
    LG_CHECK(inspect("{\"a\":[1e308,\n1.7976931348623159e308,1e400]}", 0, &r, err) == LG_EINVAL);
    LG_CHECK(strstr(err, "line 2 column 1: real number out of range") != NULL);
    /* many tokens: the tape leaves the stack */
    n = (size_t)snprintf(body, sizeof(body), "{\"x\":[");
    for (int i = 0; i < 1000; i++) {
        n += (size_t)snprintf(body + n, sizeof(body) - n, "%s%d", i ? "," : "", i);
    }
    snprintf(body + n, sizeof(body) - n, "],\"model\":\"m\",\"prompt\":[1,2,3]}");
    LG_CHECK(inspect_split(body, 16, &r, err) == LG_OK);
    LG_CHECK_STR(r.model, "m");
    LG_CHECK(r.prompt_bytes == 12);
    return 0;
}

/*
 * The tape holds what is read, not the body: a 16 MiB member nobody reads
 * (numbers, as a client's flood would send) is checked and costs nothing;
 * prompts of token ids are counted, not recorded. Past LG_JSONSCAN_MAX_TOKS
 * values read (here a batch of empty prompts) the body is refused with 413.
 */
static int
test_tape_bound(void)
{
    size_t cap = (16u << 20) + 64, n;
    char *body = malloc(cap), err[256];
    struct lg_openai_req r;

    LG_CHECK(body != NULL);
    n = (size_t)snprintf(body, cap, "{\"model\":\"m\",\"x\":[");
    while (n + 8 < cap) {
        memcpy(body + n, "0,", 2);
        n += 2;
    }
    memcpy(body + n, "0]}", 3);
    n += 3;
    LG_CHECK(lg_openai_inspect_mem(body, n, 16, &r, err, sizeof(err)) == LG_OK);
    LG_CHECK_STR(r.model, "m");
    body[n - 3] = 'x'; /* still checked: the last number broken */
    LG_CHECK(lg_openai_inspect_mem(body, n, 16, &r, err, sizeof(err)) == LG_EINVAL);
    LG_CHECK(r.status == 400 && strstr(err, "invalid token") != NULL);
    /* token ids: four bytes each, whole or in arrays */
    n = (size_t)snprintf(body, cap, "{\"model\":\"m\",\"prompt\":[");
    for (int i = 0; i < 2000000; i++) {
        memcpy(body + n, "7,", 2);
        n += 2;
    }
    n += (size_t)snprintf(body + n, cap - n, "[1,2,3]]}");
    LG_CHECK(lg_openai_inspect_mem(body, n, 16, &r, err, sizeof(err)) == LG_OK);
    LG_CHECK(r.prompt_bytes == 4 * (2000000 + 3));
    /* one value read too many: the body (root, prompt, its strings) */
    n = (size_t)snprintf(body, cap, "{\"prompt\":[\"\"");
    for (uint32_t i = 1; i + 2 < LG_JSONSCAN_MAX_TOKS + 1; i++) {
        memcpy(body + n, ",\"\"", 3);
        n += 3;
    }
    memcpy(body + n, "]}", 2);
    n += 2;
    LG_CHECK(lg_openai_inspect_mem(body, n, 16, &r, err, sizeof(err)) == LG_ENOMEM);
    LG_CHECK(r.status == 413);
    LG_CHECK_STR(r.code, "too_many_values");
    LG_CHECK(r.param == NULL);
    LG_CHECK(strstr(err, "more than 1048576 values the gateway reads") != NULL);
    /* one fewer fits */
    memmove(body + n - 5, body + n - 2, 2);
    n -= 3;
    LG_CHECK(lg_openai_inspect_mem(body, n, 16, &r, err, sizeof(err)) == LG_OK);
    LG_CHECK(r.prompt_bytes == 0);
    free(body);
    return 0;
}

/*
 * Long prompts are skipped many bytes at a time (64 with AVX2, 16 with SSE2,
 * 8 otherwise): a byte that needs a look is found at every offset of a run,
 * whole or split across chains.
 */
static int
test_long_strings(void)
{
    static const struct {
        const char *bytes; /* what goes at the offset */
        size_t decoded;    /* prompt bytes it stands for; 0: refused */
        const char *msg;
    } stops[] = {
        { "\\n", 1, NULL },         { "\\u00e9", 2, NULL },   { "\xc3\xa9", 2, NULL },
        { "\xe2\x82\xac", 3, NULL }, { "\x01", 0, "control character" },
        { "\xff", 0, "invalid UTF-8" }, { "\x7f", 1, NULL },
    };
    struct lg_openai_req r;
    char err[256], body[512];

    for (size_t k = 0; k < LG_ARRAY_SIZE(stops); k++) {
        for (size_t len = 0; len <= 200; len += (len < 140 ? 1 : 13)) {
            for (size_t at = 0; at <= len; at += (len < 80 ? 1 : 7)) {
                int n = snprintf(body, sizeof(body), "{\"model\":\"m\",\"prompt\":\"%.*s%s%.*s\"}",
                                 (int)at, ALPHABET, stops[k].bytes, (int)(len - at), ALPHABET);
                int rc = inspect(body, 0, &r, err);

                LG_CHECK(n > 0 && (size_t)n < sizeof(body));
                if (stops[k].decoded == 0) {
                    LG_CHECK(rc == LG_EINVAL && strstr(err, stops[k].msg) != NULL);
                    continue;
                }
                LG_CHECK(rc == LG_OK);
                LG_CHECK(r.prompt_bytes == len + stops[k].decoded);
                if (len % 3 == 0) {
                    LG_CHECK(inspect_split(body, 0, &r, err) == LG_OK);
                    LG_CHECK(r.prompt_bytes == len + stops[k].decoded);
                }
            }
        }
    }
    /* every byte value at every offset of runs around the 32- and 64-byte
     * steps: printable ASCII but '"' and '\\' passes, control bytes and
     * bytes >= 0x80 alone are refused, '"' ends the string early */
    static const size_t lens[] = { 31, 32, 33, 63, 64, 65, 95, 127, 128, 129, 200 };

    for (size_t li = 0; li < LG_ARRAY_SIZE(lens); li++) {
        size_t len = lens[li];

        for (size_t at = 0; at <= len; at++) {
            int n = snprintf(body, sizeof(body), "{\"prompt\":\"%.*s@%.*s\"}", (int)at, ALPHABET,
                             (int)(len - at), ALPHABET);

            LG_CHECK(n > 0 && (size_t)n < sizeof(body));
            for (int b = 0; b < 256; b++) {
                int rc;

                if (b == '\\') {
                    continue; /* an escape: the stops above */
                }
                body[11 + at] = (char)b; /* the '@' */
                rc = lg_openai_inspect_mem(body, (size_t)n, 0, &r, err, 256);
                if (b >= 0x20 && b < 0x80 && b != '"') {
                    LG_CHECK(rc == LG_OK && r.prompt_bytes == len + 1);
                } else {
                    LG_CHECK(rc == LG_EINVAL);
                    LG_CHECK(b == '"' || strstr(err, b < 0x20 ? "control character"
                                                              : "invalid UTF-8") != NULL);
                }
            }
        }
    }
    /* a run that ends the body's string with no stop inside */
    for (size_t len = 60; len <= 200; len++) {
        snprintf(body, sizeof(body), "{\"prompt\":\"%.*s\"}", (int)len, ALPHABET);
        LG_CHECK(inspect(body, 0, &r, err) == LG_OK && r.prompt_bytes == len);
    }
    return 0;
}

LG_TEST_MAIN(test_chat_fields, test_jansson_rules, test_members_in_one_walk, test_duplicate_keys,
             test_refused, test_limits, test_long_strings, test_sampling_fields, test_tape_bound,
             test_token_counts)
