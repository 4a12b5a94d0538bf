/*
 * fuzz_sse.c: the SSE scanner (gateway/sse.c) on arbitrary bytes.
 *
 * The first byte picks a split point; the rest is the event stream. The
 * scanner runs over it three ways (whole, in two pieces, byte by byte) and
 * must report the same thing each time; the event framing is also checked
 * against a straightforward reference that splits the whole input into lines
 * (CRLF, LF or CR, per the HTML event-stream grammar) and events, and runs
 * the JSON probe over each event's joined data.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct sse_run {
    uint64_t reported; /* sum of lg_sse_feed() results */
    uint64_t events;
    uint64_t content_events;
    uint64_t error_events;
    bool done;
    bool finished;
    int64_t completion_tokens;
};

static void
sse_finish(struct sse_run *r, const struct lg_sse *s)
{
    r->events = s->events;
    r->content_events = s->content_events;
    r->error_events = s->error_events;
    r->done = s->done;
    r->finished = s->finished;
    r->completion_tokens = lg_sse_completion_tokens(s);
    if (r->reported != r->content_events) {
        abort(); /* what feed returns must add up to the counter */
    }
}

static void
sse_run_split(const char *p, size_t n, size_t split, struct sse_run *r)
{
    struct lg_sse s;

    memset(r, 0, sizeof(*r));
    lg_sse_init(&s);
    r->reported += lg_sse_feed(&s, p, split);
    r->reported += lg_sse_feed(&s, p + split, n - split);
    sse_finish(r, &s);
}

static void
sse_run_bytes(const char *p, size_t n, struct sse_run *r)
{
    struct lg_sse s;

    memset(r, 0, sizeof(*r));
    lg_sse_init(&s);
    for (size_t i = 0; i < n; i++) {
        r->reported += lg_sse_feed(&s, p + i, 1);
    }
    sse_finish(r, &s);
}

/* The reference: whole input, one complete line at a time. */
static void
sse_reference(const char *p, size_t n, struct sse_run *r)
{
    struct lg_json_probe probe;
    bool has_data = false, ev_done = false, ev_error = false;
    size_t i = 0;

    memset(r, 0, sizeof(*r));
    lg_json_probe_init(&probe);
    while (i < n) {
        size_t end = i;
        size_t colon;
        const char *v;
        size_t vn;

        while (end < n && p[end] != '\r' && p[end] != '\n') {
            end++;
        }
        if (end == n) {
            break; /* an unterminated line is never acted on */
        }
        if (end == i) { /* blank line: dispatch */
            if (has_data) {
                r->events++;
                if (probe.content && !ev_done && !probe.error) {
                    r->content_events++;
                }
                if (ev_done) {
                    r->done = true;
                }
                r->finished |= probe.finished;
                ev_error |= probe.error;
            }
            r->error_events += ev_error;
            has_data = false;
            ev_done = false;
            ev_error = false;
            lg_json_probe_reset(&probe);
        } else if (p[i] != ':') {
            for (colon = i; colon < end && p[colon] != ':'; colon++) {
            }
            if (colon - i == 4 && memcmp(p + i, "data", 4) == 0) {
                v = colon < end ? p + colon + 1 : p + end;
                vn = (size_t)(p + end - v);
                if (vn > 0 && v[0] == ' ') {
                    v++;
                    vn--;
                }
                if (has_data) {
                    lg_json_probe_feed(&probe, "\n", 1);
                }
                has_data = true;
                if (colon < end) {
                    lg_json_probe_feed(&probe, v, vn);
                    if (vn == 6 && memcmp(v, "[DONE]", 6) == 0) {
                        ev_done = true;
                    }
                }
            } else if (colon - i == 5 && memcmp(p + i, "error", 5) == 0) {
                ev_error = true; /* an `error:` field line (old llama.cpp) */
            }
        }
        i = end + 1;
        if (p[end] == '\r' && i < n && p[i] == '\n') {
            i++;
        }
    }
}

static bool
sse_same(const struct sse_run *a, const struct sse_run *b)
{
    return a->reported == b->reported && a->events == b->events
           && a->content_events == b->content_events && a->error_events == b->error_events
           && a->done == b->done && a->finished == b->finished
           && a->completion_tokens == b->completion_tokens;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sse_run whole, split, bytes, ref;
    const char *p;
    size_t n;

    if (size < 1) {
        return 0;
    }
    p = (const char *)data + 1;
    n = size - 1;
    sse_run_split(p, n, n, &whole);
    sse_run_split(p, n, n ? data[0] % (n + 1) : 0, &split);
    sse_run_bytes(p, n, &bytes);
    sse_reference(p, n, &ref);
    if (!sse_same(&whole, &split) || !sse_same(&whole, &bytes)) {
        abort(); /* read boundaries changed the result */
    }
    if (whole.events != ref.events || whole.content_events != ref.content_events
        || whole.error_events != ref.error_events || whole.done != ref.done
        || whole.finished != ref.finished) {
        abort(); /* framing differs from the reference */
    }
    return 0;
}
