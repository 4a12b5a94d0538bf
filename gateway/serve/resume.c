/*
 * resume.c: mid-stream failover. When the backend of a stream dies after
 * the response started (closed, reset, silent past stream_idle, garbled),
 * the stream goes on on another backend: the original request is sent again
 * with the text already delivered (chat: an assistant message left open,
 * `continue_final_message: true`, `add_generation_prompt: false`, as vLLM
 * and SGLang take them; a completion: its prompt continued) and max_tokens
 * less the tokens delivered, and what the new backend sends is relayed from
 * its first event with content on: its head and role-only first chunk, which
 * the client has, are dropped. The client sees one stream, with a pause.
 *
 * Which streams: those routing.resume allows for their model ("greedy":
 * temperature 0; "seeded": that or a seed), chat or completions, streamed,
 * one choice, framed so that more can follow (chunked or to the close).
 * Such a stream is relayed event by event (LG_REQ_F_EVENTS): its body
 * bytes are held until the SSE scanner says their event ended, then sent
 * whole, as one chunk of the gateway's own; so at any failure the client
 * holds whole events only, and a continuation's events can follow them.
 * The events' JSON is never rewritten: a continuation's chunks carry its
 * backend's `id` and `created`, its usage chunk counts its own tokens.
 * The delivered text is read from the content deltas as they pass
 * (http/ssetext.c), bounded by routing.resume.max_text.
 *
 * Owns, per resumable request: its struct lg_resume (the text, the events
 * being held, the continuation's body). Borrows the client, its request and
 * the SSE scanner (whose tap it is).
 */
#include "serve/resume.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <jansson.h>

#include "base/config.h"
#include "base/endpoint.h"
#include "base/stats.h"
#include "fleet/backend.h"
#include "fleet/fleet.h"
#include "http/httphdr.h"
#include "http/ssetext.h"
#include "route/router.h"
#include "serve/client.h"
#include "serve/upstream.h"

/* An event longer than this is sent as it comes; the stream can then not go on. */
#define RESUME_EVENT_MAX ((size_t)256 * 1024)

/* Events up to this size (and their chunk's framing) are put together on the stack. */
#define RESUME_SMALL 4096

struct lg_resume {
    struct lg_sse_tap tap;       /* first: the scanner hands it back */
    struct lg_client *c;
    struct lg_ssetext text;      /* what the client has of the answer */
    struct evbuffer *stage;      /* bytes of an event not ended, from earlier reads */
    struct evbuffer *outq;       /* a chunk put together from the stage and a read */
    const char *at;              /* the bytes being scanned (a read of the body) */
    uint64_t span;               /* their stream offset */
    uint64_t front;              /* stream offset of the first byte not yet sent or dropped */
    struct evbuffer *body;       /* the continuation's request body; NULL before one */
    struct evbuffer *old_body;   /* the one before, until its attempt is surely gone */
    uint64_t t_cut;              /* the last content event before the failure */
    bool chat;                   /* else a completion */
    bool chunked;                /* the client's body is chunked (else it ends at the close) */
    bool dropping;               /* a continuation's first events, its head again: dropped */
    bool lost;                   /* an event outgrew the stage: the client has part of one */
    bool failing;                /* the engine reported a failure: the rest of it is dropped */
    uint8_t shape;               /* whether text alone continues the request (RESUME_SHAPE_*) */
    uint32_t errors_before;      /* the stream's error events before the one held back */
};

enum { RESUME_SHAPE_UNKNOWN = 0, RESUME_SHAPE_OK, RESUME_SHAPE_NO };

static int resume_check(struct lg_client *c, struct lg_resume *r);

/* ---- which streams ---------------------------------------------------------- */

/* What routing.resume allows for a model's streams (its rules, read at load). */
static enum lg_resume_mode
resume_mode(const struct lg_resume_conf *rc, const char *model)
{
    for (size_t i = 0; i < rc->nrules; i++) {
        if (strcmp(rc->rules[i].model, model) == 0) {
            return rc->rules[i].mode;
        }
    }
    return rc->others;
}

/* The route of the request (chat or completions are the ones to continue). */
static enum lg_stats_route
resume_route(const struct lg_request *req)
{
    return lg_endpoint_route(req->hdrs.buf + req->hdrs.url_off, req->hdrs.url_len);
}

/*
 * A stream that may go on elsewhere: allowed for its model, an answer that
 * repeats (temperature 0, or a seed where "seeded"), chat or completions,
 * one choice, and a body framed so that more can follow what was sent.
 */
static bool
resume_allowed(const struct lg_client *c)
{
    const struct lg_request *req = &c->req;
    enum lg_stats_route route = resume_route(req);

    if (!(req->flags & LG_REQ_F_SSE) || !req->info.stream || req->status != 200
        || req->info.n != 1 || !(req->flags & (LG_REQ_F_UP_CHUNKED | LG_REQ_F_UP_EOF))
        || (route != LG_STATS_ROUTE_CHAT && route != LG_STATS_ROUTE_COMPLETIONS)) {
        return false;
    }
    switch (resume_mode(&req->fleet->conf->routing.resume, req->info.model)) {
    case LG_RESUME_GREEDY:
        return req->info.greedy;
    case LG_RESUME_SEEDED:
        return req->info.greedy || req->info.seeded;
    default:
        return false;
    }
}

/* ---- the events, one by one -------------------------------------------------- */

/*
 * The next n bytes of the stream (those from r->front on: the stage's, then
 * the read's) go to the client, as one chunk when its body is chunked; one
 * add to the client's output, as each runs its callbacks.
 */
static void
resume_send(struct lg_resume *r, size_t n)
{
    struct lg_request *req = &r->c->req;
    struct evbuffer *out = bufferevent_get_output(r->c->bev);
    size_t staged = LG_MIN(evbuffer_get_length(r->stage), n);
    /* the rest, in the read (none: NULL + 0 is undefined) */
    const char *p = r->at != NULL ? r->at + (r->front + staged - r->span) : NULL;
    char small[RESUME_SMALL + LG_HTTP_CHUNK_HEAD_MAX + 2];
    size_t k = 0;

    if (n == 0) {
        return;
    }
    if (staged == 0 && n <= RESUME_SMALL) {
        /* the usual event: whole in one read */
        if (r->chunked) {
            k = lg_http_chunk_head(small, n);
        }
        memcpy(small + k, p, n);
        k += n;
        if (r->chunked) {
            memcpy(small + k, "\r\n", 2);
            k += 2;
        }
        evbuffer_add(out, small, k);
    } else {
        if (r->chunked) {
            k = lg_http_chunk_head(small, n);
            evbuffer_add(r->outq, small, k);
        }
        evbuffer_remove_buffer(r->stage, r->outq, staged);
        if (n > staged) {
            evbuffer_add(r->outq, p, n - staged);
        }
        if (r->chunked) {
            evbuffer_add(r->outq, "\r\n", 2);
        }
        k = evbuffer_get_length(r->outq);
        evbuffer_add_buffer(out, r->outq);
    }
    r->front += n;
    req->bytes_out += k;
}

/* The next n bytes of the stream (as resume_send) are dropped. */
static void
resume_drop(struct lg_resume *r, size_t n)
{
    evbuffer_drain(r->stage, LG_MIN(evbuffer_get_length(r->stage), n));
    r->front += n;
}

static void
resume_on_data(struct lg_sse_tap *t, const char *p, size_t n)
{
    struct lg_resume *r = (struct lg_resume *)t;

    lg_ssetext_feed(&r->text, p, n);
}

/*
 * An event ended at byte `end` of the bytes being scanned: it goes to the
 * client, unless it opens a continuation and carries nothing the client
 * lacks (the role-only chunk, comments): up to the first event with
 * content, an end or an error, a continuation's events are dropped.
 */
static void
resume_on_event(struct lg_sse_tap *t, size_t end, unsigned what)
{
    struct lg_resume *r = (struct lg_resume *)t;
    struct lg_request *req = &r->c->req;
    uint64_t at = r->span + end;
    size_t n = at > r->front ? (size_t)(at - r->front) : 0; /* 0: sent already (lost) */

    lg_ssetext_event_end(&r->text);
    if (r->failing) {
        resume_drop(r, n); /* what the failed engine sent after its error */
        return;
    }
    if ((what & LG_SSE_EV_ERROR) && resume_check(r->c, r) == LG_STATS_RESUME_NONE) {
        /*
         * The engine failed mid-answer and said so (vLLM's EngineDeadError, an
         * out-of-memory abort...): the event is held back and the stream goes
         * on elsewhere once this attempt ends (lg_resume_failing()).
         */
        r->failing = true;
        r->errors_before = req->scan.sse.error_events - 1;
        resume_drop(r, n);
        return;
    }
    if (r->dropping) {
        if (!(what & (LG_SSE_EV_CONTENT | LG_SSE_EV_DONE | LG_SSE_EV_FINISHED | LG_SSE_EV_ERROR))) {
            resume_drop(r, n);
            return;
        }
        r->dropping = false;
        if (req->t_now > r->t_cut) {
            req->tries.resume_pause_ns += req->t_now - r->t_cut;
        }
    }
    resume_send(r, n);
}

void
lg_resume_watch(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    struct lg_resume *r;

    (void)u;
    if (req->fleet->conf->routing.resume.models == NULL || !resume_allowed(c)) {
        return;
    }
    r = lg_xcalloc(1, sizeof(*r));
    r->stage = evbuffer_new();
    r->outq = evbuffer_new();
    if (r->stage == NULL || r->outq == NULL) {
        if (r->stage != NULL) {
            evbuffer_free(r->stage);
        }
        free(r);
        return; /* out of memory: relayed as any stream */
    }
    r->tap.data = resume_on_data;
    r->tap.event = resume_on_event;
    r->c = c;
    r->chat = resume_route(req) == LG_STATS_ROUTE_CHAT;
    r->chunked = req->http_minor != 0; /* relay.c chunks every stream for HTTP/1.1 */
    lg_ssetext_init(&r->text, req->fleet->conf->routing.resume.max_text);
    req->resume = r;
    req->scan.sse.tap = &r->tap;
    /* from now on the body's bytes come through lg_resume_feed(), framed here;
     * lg_relay_end() writes the last chunk */
    req->flags = (req->flags & ~LG_REQ_F_DECHUNK) | LG_REQ_F_EVENTS
                 | (r->chunked ? LG_REQ_F_ENCHUNK : 0);
}

unsigned
lg_resume_feed(struct lg_client *c, const char *at, size_t n)
{
    struct lg_resume *r = c->req.resume;
    uint64_t from;
    unsigned got;

    r->at = at;
    r->span = r->front + evbuffer_get_length(r->stage);
    got = lg_sse_feed(&c->req.scan.sse, at, n); /* its tap sends the events that end here */
    /* what follows the last of them waits for its event's end */
    from = LG_MAX(r->front, r->span) - r->span;
    if (from < n) {
        evbuffer_add(r->stage, at + from, n - (size_t)from);
    }
    if (r->lost || evbuffer_get_length(r->stage) > RESUME_EVENT_MAX) {
        /* no event is this long: send it as it comes, and give up its bounds
         * (from then on every byte goes as it comes: the stream cannot go on
         * elsewhere, and a cut must not drop what the engine sent) */
        r->lost = true;
        r->span = r->front + evbuffer_get_length(r->stage); /* all of it staged */
        resume_send(r, evbuffer_get_length(r->stage));
    }
    return got;
}

void
lg_resume_end(struct lg_client *c)
{
    struct lg_resume *r = c->req.resume;

    if (r != NULL) {
        /* a last event with no blank line */
        r->span = r->front + evbuffer_get_length(r->stage);
        resume_send(r, evbuffer_get_length(r->stage));
    }
}

/* ---- going on elsewhere ------------------------------------------------------- */

/* jansson reads the client's body where it lies, leaving it whole. */
struct resume_reader {
    struct evbuffer *b;
    struct evbuffer_ptr pos;
};

static size_t
resume_read(void *buf, size_t len, void *arg)
{
    struct resume_reader *rd = arg;
    ev_ssize_t n = evbuffer_copyout_from(rd->b, &rd->pos, buf, len);

    if (n <= 0) {
        return 0;
    }
    evbuffer_ptr_set(rd->b, &rd->pos, (size_t)n, EVBUFFER_PTR_ADD);
    return (size_t)n;
}

static int
resume_dump(const char *buf, size_t size, void *data)
{
    return evbuffer_add(data, buf, size);
}

/* A member that is there and means something (not null, false, "" or empty). */
static bool
resume_set(const json_t *root, const char *key)
{
    const json_t *v = json_object_get(root, key);

    return v != NULL && !json_is_null(v) && !json_is_false(v)
           && !(json_is_string(v) && json_string_length(v) == 0)
           && !(json_is_array(v) && json_array_size(v) == 0)
           && !(json_is_object(v) && json_object_size(v) == 0);
}

/*
 * Whether text alone continues the request's answer: no tools to call, no
 * output held to a schema or grammar (its state would start over), no
 * prompt echoed, no final message the client continues itself, the
 * generation prompt the template adds.
 */
static bool
resume_request_ok(const json_t *root)
{
    static const char *const constrained[] = {
        "tools", "functions", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
        "structured_outputs", "regex", "ebnf", "json_schema", "echo", "continue_final_message",
    };
    const json_t *rf = json_object_get(root, "response_format");
    const json_t *agp = json_object_get(root, "add_generation_prompt");

    for (size_t i = 0; i < LG_ARRAY_SIZE(constrained); i++) {
        if (resume_set(root, constrained[i])) {
            return false;
        }
    }
    if (json_is_object(rf)) {
        const json_t *type = json_object_get(rf, "type");

        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0) {
            return false; /* a JSON object or schema to follow */
        }
    }
    return agp == NULL || json_is_null(agp) || json_is_true(agp);
}

/*
 * A token count of the body less what was delivered (at least `floor`),
 * without overflow whatever the count (openai.c bounds them already).
 */
static void
resume_less(json_t *root, const char *key, uint64_t delivered, json_int_t floor)
{
    json_t *v = json_object_get(root, key);
    json_int_t have;

    if (!json_is_integer(v)) {
        return;
    }
    have = json_integer_value(v);
    json_object_set_new(root, key,
                        json_integer(have > floor && (uint64_t)(have - floor) > delivered
                                         ? have - (json_int_t)delivered
                                         : floor));
}

/* The client's body, parsed (NULL when it is no JSON). */
static json_t *
resume_load(struct lg_client *c)
{
    struct resume_reader rd = { .b = c->req.body };

    evbuffer_ptr_set(c->req.body, &rd.pos, 0, EVBUFFER_PTR_SET);
    return json_load_callback(resume_read, &rd, 0, NULL);
}

/* Whether text alone continues the request (its body read once, when first asked). */
static bool
resume_continuable(struct lg_client *c, struct lg_resume *r)
{
    if (r->shape == RESUME_SHAPE_UNKNOWN) {
        json_t *root = resume_load(c);
        json_t *v = json_object_get(root, r->chat ? "messages" : "prompt");

        if (!r->chat && json_is_array(v) && json_array_size(v) == 1) {
            v = json_array_get(v, 0); /* one prompt in a list */
        }
        r->shape = json_is_object(root) && resume_request_ok(root)
                           && (r->chat ? json_is_array(v) : json_is_string(v))
                       ? RESUME_SHAPE_OK
                       : RESUME_SHAPE_NO;
        json_decref(root);
    }
    return r->shape == RESUME_SHAPE_OK;
}

/*
 * The continuation's body: the client's, with the text delivered appended
 * (chat: a final assistant message left open; completions: the prompt
 * continued) and max_tokens less what was delivered. Returns a reason not
 * to go on (enum lg_stats_resume), or LG_STATS_RESUME_NONE.
 */
static int
resume_build(struct lg_client *c, struct lg_resume *r)
{
    struct lg_request *req = &c->req;
    size_t len;
    const char *s = lg_ssetext_text(&r->text, &len);
    json_t *root, *text, *v;
    struct evbuffer *body;
    int rc = LG_STATS_RESUME_NONE;

    if (len == 0 && req->content_events == 0) {
        return LG_STATS_RESUME_NONE; /* nothing delivered: the request as it came */
    }
    root = resume_load(c);
    text = json_stringn(s, len);
    if (text == NULL) {
        json_decref(root);
        return LG_STATS_RESUME_NOT_TEXT; /* not UTF-8: no text to send */
    }
    if (!json_is_object(root) || !resume_request_ok(root)) {
        rc = LG_STATS_RESUME_REQUEST;
    } else if (r->chat) {
        v = json_object_get(root, "messages");
        if (!json_is_array(v)
            || json_array_append_new(v, json_pack("{s:s,s:O}", "role", "assistant", "content",
                                                  text))
                   != 0) {
            rc = LG_STATS_RESUME_REQUEST;
        }
        json_object_set_new(root, "continue_final_message", json_true());
        json_object_set_new(root, "add_generation_prompt", json_false());
    } else {
        v = json_object_get(root, "prompt");
        if (json_is_array(v) && json_array_size(v) == 1) {
            v = json_array_get(v, 0); /* one prompt in a list */
        }
        if (!json_is_string(v)) {
            rc = LG_STATS_RESUME_REQUEST; /* token ids, or several prompts */
        } else {
            size_t n = json_string_length(v);
            char *p = lg_xmalloc(n + len + 1);

            memcpy(p, json_string_value(v), n);
            memcpy(p + n, s, len);
            if (json_string_setn(v, p, n + len) != 0) {
                rc = LG_STATS_RESUME_NOT_TEXT;
            }
            free(p);
        }
    }
    json_decref(text);
    if (rc == LG_STATS_RESUME_NONE) {
        resume_less(root, "max_tokens", req->content_events, 1);
        resume_less(root, "max_completion_tokens", req->content_events, 1);
        resume_less(root, "min_tokens", req->content_events, 0);
        body = evbuffer_new();
        if (body == NULL || json_dump_callback(root, resume_dump, body, JSON_COMPACT) != 0) {
            if (body != NULL) {
                evbuffer_free(body);
            }
            rc = LG_STATS_RESUME_REQUEST;
        } else {
            if (r->old_body != NULL) {
                evbuffer_free(r->old_body);
            }
            r->old_body = r->body;
            r->body = body;
        }
    }
    json_decref(root);
    return rc;
}

/* Why the stream cannot go on now, or LG_STATS_RESUME_NONE. */
static int
resume_check(struct lg_client *c, struct lg_resume *r)
{
    const struct lg_request *req = &c->req;

    if (r->lost) {
        return LG_STATS_RESUME_EVENT;
    }
    if (r->text.flags & LG_SSETEXT_F_FULL) {
        return LG_STATS_RESUME_TEXT_LIMIT;
    }
    if (r->text.flags != 0) {
        return LG_STATS_RESUME_NOT_TEXT;
    }
    if (req->tries.resumed >= req->fleet->conf->routing.resume.attempts) {
        return LG_STATS_RESUME_ATTEMPTS;
    }
    if (req->info.max_tokens > 0 && req->content_events >= (uint64_t)req->info.max_tokens) {
        return LG_STATS_RESUME_COMPLETE;
    }
    if (!lg_router_has_candidate(req->models, &req->tries.tried, req->sched.cls)) {
        return LG_STATS_RESUME_NO_BACKEND;
    }
    if (!resume_continuable(c, r)) {
        return LG_STATS_RESUME_REQUEST;
    }
    return LG_STATS_RESUME_NONE;
}

bool
lg_resume_begin(struct lg_client *c, enum lg_fail why, bool (*take_budget)(struct lg_client *c))
{
    struct lg_request *req = &c->req;
    struct lg_resume *r = req->resume;
    struct lg_backend *b = req->att != NULL ? req->att->backend : NULL; /* the failed one's */
    int fail;

    if (r == NULL) {
        return false;
    }
    if (r->failing) {
        /* the engine's error, and what followed it, never reached the client:
         * its backend counts a stream error (record.c counts the last backend's) */
        r->failing = false;
        req->scan.sse.error_events = r->errors_before;
        req->scan.sse.done = false;
        req->scan.sse.finished = false;
        if (b != NULL) {
            __atomic_fetch_add(&b->metrics.stream_errors, 1, __ATOMIC_RELAXED);
        }
    }
    /* an event cut short never reaches the client: the next starts clean */
    lg_sse_event_drop(&req->scan.sse);
    lg_ssetext_event_drop(&r->text);
    resume_drop(r, evbuffer_get_length(r->stage));
    fail = resume_check(c, r);
    if (fail == LG_STATS_RESUME_NONE) {
        fail = resume_build(c, r);
    }
    if (fail == LG_STATS_RESUME_NONE && !take_budget(c)) {
        fail = LG_STATS_RESUME_BUDGET;
    }
    if (fail != LG_STATS_RESUME_NONE) {
        req->tries.resume_fail = (uint8_t)fail;
        return false;
    }
    if (b != NULL) {
        LG_STAT_ADD(b, cut_streams, 1);
        if (lg_log_ratelimit(&b->warn_ratelimit_ns, LG_NS_PER_S)) {
            LG_CONN_LOG(LG_LOG_WARN, c, "response from %s cut: %s; going on elsewhere", b->name,
                        lg_fail_name(why));
        }
    }
    req->tries.resumed++;
    req->tries.resume_events = req->content_events;
    r->t_cut = req->t_last_token != 0 ? req->t_last_token : req->t_now;
    r->dropping = true;
    /* the continuation's prompt is longer, its answer shorter */
    req->route.prompt_bytes = req->info.prompt_bytes + r->text.committed;
    if (req->info.max_tokens > 0) {
        req->route.max_tokens = (uint32_t)LG_MIN((uint64_t)req->info.max_tokens - req->content_events,
                                                 UINT32_MAX);
    }
    return true;
}

bool
lg_resume_failing(const struct lg_client *c)
{
    return c->req.resume != NULL && c->req.resume->failing;
}

int
lg_resume_head(struct lg_client *c, struct lg_upconn *u)
{
    struct lg_request *req = &c->req;
    const struct lg_hdr *ct = lg_hdrs_find(&u->hdrs, "content-type");

    if (req->resume == NULL || u->parser.status_code != 200 || ct == NULL
        || !lg_mem_ieq(lg_hdrs_value(&u->hdrs, ct), "text/event-stream", 17)) {
        return LG_EINVAL;
    }
    /* what ends this body: its own framing */
    req->flags &= ~(LG_REQ_F_UP_CHUNKED | LG_REQ_F_UP_EOF);
    if (u->parser.flags & F_CHUNKED) {
        req->flags |= LG_REQ_F_UP_CHUNKED;
    } else if (!(u->parser.flags & F_CONTENT_LENGTH) && llhttp_message_needs_eof(&u->parser)) {
        req->flags |= LG_REQ_F_UP_EOF;
    }
    return LG_OK;
}

void
lg_resume_request_body(struct lg_client *c, struct evbuffer **body, uint64_t *len)
{
    struct lg_resume *r = c->req.resume;

    if (r != NULL && r->body != NULL) {
        *body = r->body;
        *len = evbuffer_get_length(r->body);
    }
}

void
lg_resume_release(struct lg_client *c)
{
    struct lg_request *req = &c->req;
    struct lg_resume *r = req->resume;

    if (r == NULL) {
        return;
    }
    req->scan.sse.tap = NULL;
    req->resume = NULL;
    lg_ssetext_free(&r->text);
    evbuffer_free(r->stage);
    evbuffer_free(r->outq);
    if (r->body != NULL) {
        evbuffer_free(r->body);
    }
    if (r->old_body != NULL) {
        evbuffer_free(r->old_body);
    }
    free(r);
}
