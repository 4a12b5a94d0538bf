/*
 * fuzz_request.c: client request handling through the real client and proxy
 * code (fuzz_gateway.h): the input is what a client sends, in two pieces.
 *
 * First byte: bits 0-5 pick the split point, bit 6 turns API keys on (the
 * key "k" is valid), bit 7 makes the fake backend answer with an SSE stream
 * instead of a JSON body. The rest is sent on a fresh connection, then the
 * client half-closes.
 *
 * Checks: no crash, no leak; whatever the client gets starts as an HTTP/1.1
 * response; and everything the backend received is a sequence of requests
 * that strict llhttp parses, each with exactly one Content-Length, no
 * Transfer-Encoding, one Host, only the gateway's Authorization, no field
 * with an empty name and no fragment in its target: what the gateway
 * forwards is never ambiguous.
 */
#include <stdint.h>

#include <llhttp.h>

#include "fuzz_gateway.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fr_json[] =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
static const char fr_sse[] =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    "2a\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n\r\n"
    "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n";

struct fr_backend {
    bool sse;
    unsigned answered[FG_MAX_UP]; /* responses sent on each connection */
};

/* Requests forwarded on a connection so far: the gateway adds one X-Request-Id to each. */
static unsigned
fr_requests(const char *buf, size_t len)
{
    unsigned n = 0;
    const char *p = buf, *end = buf + len, *hit;

    while ((hit = memmem(p, (size_t)(end - p), "\r\nX-Request-Id: ", 16)) != NULL
           && memmem(hit, (size_t)(end - hit), "\r\n\r\n", 4) != NULL) {
        n++;
        p = hit + 16;
    }
    return n;
}

/* Answers every request forwarded (keep-alive reuse sends more than one). */
static void
fr_answer(struct fg *f, size_t i, void *arg)
{
    struct fr_backend *b = arg;
    const char *resp = b->sse ? fr_sse : fr_json;
    size_t n = b->sse ? sizeof(fr_sse) - 1 : sizeof(fr_json) - 1;

    while (b->answered[i] < fr_requests(f->up_in[i], f->up_in_len[i])) {
        b->answered[i]++;
        if (send(f->up_fd[i], resp, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            return; /* the gateway went away: nothing to answer */
        }
    }
}

struct fr_msg {
    unsigned cl, te, host, auth;
    bool auth_ok;
    char field[32]; /* the current header's name (truncated: then `over`) */
    size_t field_len;
    bool over;
    char value[32];
    size_t value_len;
};

static int
fr_on_field(llhttp_t *p, const char *at, size_t n)
{
    struct fr_msg *m = p->data;

    if (m->field_len + n < sizeof(m->field)) {
        memcpy(m->field + m->field_len, at, n);
        m->field_len += n;
    } else {
        m->over = true;
    }
    return 0;
}

static int
fr_on_value(llhttp_t *p, const char *at, size_t n)
{
    struct fr_msg *m = p->data;
    size_t k = LG_MIN(n, sizeof(m->value) - 1 - m->value_len);

    memcpy(m->value + m->value_len, at, k);
    m->value_len += k;
    m->value[m->value_len] = '\0';
    return 0;
}

static int
fr_on_url(llhttp_t *p, const char *at, size_t n)
{
    (void)p;
    if (memchr(at, '#', n) != NULL) {
        abort(); /* a fragment went to the backend */
    }
    return 0;
}

static int
fr_on_value_complete(llhttp_t *p)
{
    struct fr_msg *m = p->data;

    if (m->field_len == 0 && !m->over) {
        abort(); /* a field with an empty name (": x") went to the backend */
    }
    if (!m->over) {
        m->cl += lg_str_ieq(m->field, m->field_len, "content-length");
        m->te += lg_str_ieq(m->field, m->field_len, "transfer-encoding");
        m->host += lg_str_ieq(m->field, m->field_len, "host");
        if (lg_str_ieq(m->field, m->field_len, "authorization")) {
            m->auth++;
            m->auth_ok = strcmp(m->value, "Bearer up") == 0;
        }
    }
    m->field_len = 0;
    m->value_len = 0;
    m->value[0] = '\0';
    m->over = false;
    return 0;
}

static int
fr_on_headers_complete(llhttp_t *p)
{
    struct fr_msg *m = p->data;

    if (m->cl != 1 || m->te != 0 || m->host != 1 || m->auth != 1 || !m->auth_ok) {
        abort(); /* an ambiguous or unexpected head went to the backend */
    }
    memset(m, 0, sizeof(*m));
    return 0;
}

static const llhttp_settings_t fr_settings = {
    .on_url = fr_on_url,
    .on_header_field = fr_on_field,
    .on_header_value = fr_on_value,
    .on_header_value_complete = fr_on_value_complete,
    .on_headers_complete = fr_on_headers_complete,
};

/* Everything one backend connection received must parse as clean requests. */
static void
fr_check_forwarded(const char *buf, size_t len)
{
    struct fr_msg m = { 0 };
    llhttp_t p;
    llhttp_errno_t err;

    if (len == 0) {
        return;
    }
    llhttp_init(&p, HTTP_REQUEST, &fr_settings);
    p.data = &m;
    err = llhttp_execute(&p, buf, len);
    if (err != HPE_OK) {
        fprintf(stderr, "forwarded bytes do not parse: %s (%s)\n", llhttp_errno_name(err),
                llhttp_get_error_reason(&p));
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct lg_keys *keys;
    struct fg *f = fg_setup();
    struct fr_backend b = { 0 };
    size_t split, n;
    const uint8_t *p;

    if (size < 1) {
        return 0;
    }
    if (keys == NULL) {
        static const char doc[] =
            "{\"keys\": [{\"name\": \"kk\", \"sha256\": "
            "\"8254c329a92850f6d539dd376f4816ee2764517da5e0235514af433164480d7a\","
            " \"models\": [\"m\"], \"max_concurrency\": 1}]}";

        if (lg_keys_load_buffer(doc, sizeof(doc) - 1, "keys", &keys, NULL) != LG_OK) {
            abort();
        }
    }
    f->gw.keys = (data[0] & 0x40) ? keys : NULL;
    b.sse = (data[0] & 0x80) != 0;
    p = data + 1;
    n = size - 1;
    split = n * (data[0] & 0x3f) / 63;

    fg_open_client(f);
    fg_send(f, p, split);
    fg_spin(f, fr_answer, &b);
    fg_send(f, p + split, n - split);
    fg_spin(f, fr_answer, &b);
    fg_finish(f, fr_answer, &b);

    if (getenv("FG_DEBUG") != NULL) {
        fprintf(stderr, "client got %zu bytes (%.40s), %zu backend connections, first sent %zu\n",
                f->out_len, f->out, f->nup, f->nup ? f->up_in_len[0] : 0);
    }
    if (f->out_len > 0 && (f->out_len < 9 || memcmp(f->out, "HTTP/1.1 ", 9) != 0)) {
        abort(); /* the client got something that is not a response */
    }
    for (size_t i = 0; i < f->nup; i++) {
        fr_check_forwarded(f->up_in[i], f->up_in_len[i]);
    }
    return 0;
}
