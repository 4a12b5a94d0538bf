/*
 * fuzz_sse.c: the SSE scanner (gateway/http/sse.c) on arbitrary bytes.
 *
 * The first byte picks a split point; the rest is the event stream. The
 * scanner runs over it three ways (whole, in two pieces, byte by byte) and
 * must report the same thing each time; the event framing is also checked
 * against a straightforward reference that splits the whole input into lines
 * (CRLF, LF or CR, per the HTML event-stream grammar) and events, and runs
 * the JSON probe over each event's joined data. A tap rides along: the data
 * it hears and where it hears events end (with what they were) must be the
 * reference's too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <llmgate/hstream.h>

#include "http/sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct sse_run {
    uint64_t reported; /* sum of lg_sse_feed() results */
    uint64_t events;
    uint64_t content_events;
    uint64_t error_events;
    bool done;
    bool finished;
    int64_t completion_tokens;
    struct lg_hstream tap_data; /* the bytes the tap heard */
    struct lg_hstream tap_ends; /* each event's end (stream offset) and what it was */
    uint64_t tap_events;
    uint64_t tap_content;
};

/* The tap: each run feeds it, and the offset of the bytes being fed. */
struct sse_tap {
    struct lg_sse_tap tap; /* first */
    struct sse_run *r;
    uint64_t fed;
};

static void
sse_tap_data(struct lg_sse_tap *t, const char *p, size_t n)
{
    lg_hstream_feed(&((struct sse_tap *)t)->r->tap_data, p, n);
}

static void
sse_tap_end(struct sse_run *r, uint64_t at, unsigned what)
{
    uint64_t rec[2] = { at, what };

    lg_hstream_feed(&r->tap_ends, rec, sizeof(rec));
    r->tap_events++;
    r->tap_content += (what & LG_SSE_EV_CONTENT) != 0;
}

static void
sse_tap_event(struct lg_sse_tap *t, size_t end, unsigned what)
{
    struct sse_tap *st = (struct sse_tap *)t;

    sse_tap_end(st->r, st->fed + end, what);
}

static void
sse_run_init(struct sse_run *r, struct lg_sse *s, struct sse_tap *tap)
{
    memset(r, 0, sizeof(*r));
    lg_hstream_init(&r->tap_data);
    lg_hstream_init(&r->tap_ends);
    lg_sse_init(s);
    *tap = (struct sse_tap){ .tap = { sse_tap_data, sse_tap_event }, .r = r };
    s->tap = &tap->tap;
}

static unsigned
sse_run_feed(struct lg_sse *s, struct sse_tap *tap, const char *p, size_t n)
{
    unsigned got = lg_sse_feed(s, p, n);

    tap->fed += n;
    return got;
}

static void
sse_finish(struct sse_run *r, const struct lg_sse *s)
{
    r->events = s->events;
    r->content_events = s->content_events;
    r->error_events = s->error_events;
    r->done = s->done;
    r->finished = s->finished;
    r->completion_tokens = lg_sse_completion_tokens(s);
    if (r->reported != r->content_events || r->tap_content != r->content_events) {
        abort(); /* what feed returns (and the tap hears) must add up to the counter */
    }
}

static void
sse_run_split(const char *p, size_t n, size_t split, struct sse_run *r)
{
    struct lg_sse s;
    struct sse_tap tap;

    sse_run_init(r, &s, &tap);
    r->reported += sse_run_feed(&s, &tap, p, split);
    r->reported += sse_run_feed(&s, &tap, p + split, n - split);
    sse_finish(r, &s);
}

static void
sse_run_bytes(const char *p, size_t n, struct sse_run *r)
{
    struct lg_sse s;
    struct sse_tap tap;

    sse_run_init(r, &s, &tap);
    for (size_t i = 0; i < n; i++) {
        r->reported += sse_run_feed(&s, &tap, p + i, 1);
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
    lg_hstream_init(&r->tap_data);
    lg_hstream_init(&r->tap_ends);
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
            /* an unterminated line is never acted on; but a data value's
             * bytes are heard as they come */
            for (colon = i; colon < end && p[colon] != ':'; colon++) {
            }
            if (colon < end && colon - i == 4 && memcmp(p + i, "data", 4) == 0) {
                v = p + colon + 1;
                vn = (size_t)(p + end - v);
                if (vn > 0 && v[0] == ' ') {
                    v++;
                    vn--;
                }
                if (has_data) {
                    lg_hstream_feed(&r->tap_data, "\n", 1);
                }
                lg_hstream_feed(&r->tap_data, v, vn);
            }
            break;
        }
        if (end == i) { /* blank line: dispatch */
            unsigned what = 0;

            if (has_data) {
                r->events++;
                what |= LG_SSE_EV_DATA;
                if ((probe.content || (probe.whole && r->content_events == 0)) && !ev_done
                    && !probe.error) {
                    r->content_events++;
                    what |= LG_SSE_EV_CONTENT;
                }
                if (ev_done) {
                    r->done = true;
                    what |= LG_SSE_EV_DONE;
                }
                r->finished |= probe.finished;
                what |= probe.finished ? LG_SSE_EV_FINISHED : 0;
                ev_error |= probe.error;
            }
            r->error_events += ev_error;
            what |= ev_error ? LG_SSE_EV_ERROR : 0;
            sse_tap_end(r, i + 1, what);
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
                    lg_hstream_feed(&r->tap_data, "\n", 1);
                }
                has_data = true;
                if (colon < end) {
                    lg_json_probe_feed(&probe, v, vn);
                    lg_hstream_feed(&r->tap_data, v, vn);
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
           && a->tap_events == b->tap_events
           && lg_hstream_value(&a->tap_data) == lg_hstream_value(&b->tap_data)
           && lg_hstream_value(&a->tap_ends) == lg_hstream_value(&b->tap_ends)
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
        || whole.finished != ref.finished || whole.tap_events != ref.tap_events
        || lg_hstream_value(&whole.tap_data) != lg_hstream_value(&ref.tap_data)
        || lg_hstream_value(&whole.tap_ends) != lg_hstream_value(&ref.tap_ends)) {
        abort(); /* framing (or what the tap hears) differs from the reference */
    }
    return 0;
}
