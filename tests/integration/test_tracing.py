"""Traces through the gateway: an inbound W3C traceparent continued (or a
trace started, sampled by tracing.sample_ratio), each attempt's own span id
sent on to the engine as its parent, and the spans of the request, its
picks and its attempts exported over OTLP/HTTP to a collector, checked
against OTLP's schema (otlp_receiver.py), in both encodings: protobuf (the
default; class Tracing) and JSON (class TracingJSON, the same export cases). A collector that is down or never
answers costs the requests nothing: the spans are counted failed or dropped.

The replicas are llmsim, each behind a RecordingProxy that keeps what the
gateway sent it (the engine's traceparent)."""

import json
import re
import socket
import threading
import time

import harness
from harness import Harness, RecordingProxy, metric, post_json, scrape, wait_until
from otlp_receiver import Receiver, attrs

CHAT = "/v1/chat/completions"
FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TP_RE = re.compile(rb"\r\ntraceparent: (00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2}))\r\n",
                   re.I)

SERVER, CLIENT, INTERNAL = 2, 3, 1


class TracingBase(Harness):
    quiet_backends = True
    encoding = None  # tracing.encoding set in the config; None: the default (protobuf)

    def replica(self, name, args=()):
        _, port = self.start_llmsim(name, args=FAST + list(args))
        rec = RecordingProxy(port)
        self.addCleanup(rec.close)
        return rec

    def gateway(self, recs, tracing, weights=None, **extra):
        backends = [{"name": "r%d" % (i + 1), "url": "http://127.0.0.1:%d" % r.port,
                     "models": ["m"], "weight": (weights or [1] * len(recs))[i],
                     "max_inflight": 1 if "limits" in extra else 0}
                    for i, r in enumerate(recs)]
        if self.encoding is not None and isinstance(tracing, dict):
            tracing = dict(tracing, encoding=self.encoding)
        conf = self.base_config(backends, workers=1, tracing=tracing, admin="127.0.0.1:0")
        conf.update(extra)
        conf["health"] = {"interval": "1h", "scrape_interval": 0, "eject_consecutive": 0}
        proc, port = self.start_gateway(conf)
        admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return port, admin

    def collector(self, **kw):
        # the receiver refuses the other encoding: the default must be protobuf
        r = Receiver(encoding=self.encoding or "protobuf", **kw)
        self.addCleanup(r.close)
        return r

    def sent_traceparents(self, rec):
        """The traceparent headers the gateway sent a replica, in order."""
        out = []
        for raw in list(rec.downstream):
            for m in TP_RE.finditer(bytes(raw)):
                out.append(m.groups())
        return out

    def wait_trace(self, col, trace_id, n):
        return wait_until(lambda: (col.trace(trace_id) if len(col.trace(trace_id)) >= n else None),
                          timeout=15, what="%d spans of trace %s" % (n, trace_id))

    def by_kind(self, spans, kind):
        return [s for s in spans if s["kind"] == kind]


class ExportCases:
    """What the collector gets, run once per encoding."""

    def test_inbound_traceparent_continued_to_the_engine(self):
        col = self.collector()
        rec = self.replica("r1")
        port, _ = self.gateway([rec], {"endpoint": "http://127.0.0.1:%d" % col.port,
                                       "interval": "20ms", "sample_ratio": 0,
                                       "headers": {"x-collector-key": "k1"}})
        # (tracestate first: the order of the two headers does not matter)
        status, _, body, _ = post_json(port, CHAT, harness.chat_body(stream=False), headers={
            "tracestate": "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
            "traceparent": "00-%s-%s-01" % (TRACE, PARENT)})
        self.assertEqual(status, 200, body)
        spans = self.wait_trace(col, TRACE, 3)
        self.assertEqual(col.errors, [])
        self.assertEqual(col.posts[0].get("x-collector-key"), "k1")
        self.assertEqual(set(col.content_types), {"application/json" if self.encoding == "json"
                                                  else "application/x-protobuf"})
        (server,) = self.by_kind(spans, SERVER)
        (attempt,) = self.by_kind(spans, CLIENT)
        (pick,) = [s for s in spans if s["name"] == "pick"]
        # the client's span is the request's parent; the request, its phases'
        self.assertEqual(server["parentSpanId"], PARENT)
        self.assertEqual(server["traceState"], "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        self.assertEqual(attempt["parentSpanId"], server["spanId"])
        self.assertEqual(pick["parentSpanId"], server["spanId"])
        # the engine got the trace, with the attempt's span as its parent, and the tracestate
        ((tp, tid, sid, flags),) = self.sent_traceparents(rec)
        self.assertEqual((tid.decode(), sid.decode(), flags), (TRACE, attempt["spanId"], b"01"))
        self.assertIn(b"\r\ntracestate: rojo=00f067aa0ba902b7,congo=t61rcWkgMzE\r\n",
                      bytes(rec.downstream[0]))
        self.assertNotIn(PARENT.encode(), tp)
        # times nest: the pick and the attempt inside the request
        st, en = int(server["startTimeUnixNano"]), int(server["endTimeUnixNano"])
        for child in (pick, attempt):
            self.assertLessEqual(st, int(child["startTimeUnixNano"]))
            self.assertLessEqual(int(child["endTimeUnixNano"]), en)
        self.assertLessEqual(int(pick["endTimeUnixNano"]), int(attempt["startTimeUnixNano"]))
        # GenAI and HTTP attribute names
        sa, aa, pa = attrs(server), attrs(attempt), attrs(pick)
        self.assertEqual(server["name"], "POST /v1/chat/completions")
        self.assertEqual(attempt["name"], "chat m")
        self.assertEqual((sa["gen_ai.operation.name"], sa["gen_ai.request.model"],
                          sa["http.response.status_code"], sa["gen_ai.usage.output_tokens"]),
                         ("chat", "m", 200, body["usage"]["completion_tokens"]))
        self.assertEqual(sa["gen_ai.usage.input_tokens"], body["usage"]["prompt_tokens"])
        self.assertGreater(sa["gen_ai.server.time_to_first_token"], 0)
        self.assertEqual((sa["llmgate.backend"], sa["llmgate.attempts"]), ("r1", 1))
        self.assertEqual((aa["llmgate.backend"], aa["llmgate.attempt.kind"],
                          aa["http.response.status_code"], aa["server.address"]),
                         ("r1", "first", 200, "127.0.0.1"))
        self.assertEqual([e["name"] for e in attempt["events"]],
                         ["connected", "first_byte", "first_token"])
        self.assertEqual((pa["llmgate.backend"], pa["llmgate.route.policy"]), ("r1", "round_robin"))
        self.assertIn("llmgate.route.reason", pa)

    def test_a_retry_shows_two_attempt_spans(self):
        col = self.collector()
        r1 = self.replica("r1", ["--fault", "status@0:503:600"])
        r2 = self.replica("r2")
        port, _ = self.gateway([r1, r2], {"endpoint": "http://127.0.0.1:%d/v1/traces" % col.port,
                                          "interval": "20ms"}, weights=[1000, 1])
        status = post_json(port, CHAT, harness.chat_body(stream=True))[0]
        self.assertEqual(status, 200)
        ((_, tid1, sid1, _),) = self.sent_traceparents(r1)
        ((_, tid2, sid2, _),) = self.sent_traceparents(r2)
        self.assertEqual(tid1, tid2)  # one trace, started here
        self.assertNotEqual(sid1, sid2)  # each attempt a span of its own
        spans = self.wait_trace(col, tid1.decode(), 5)
        self.assertEqual(col.errors, [])
        (server,) = self.by_kind(spans, SERVER)
        self.assertNotIn("parentSpanId", server)  # the trace's root
        attempts = sorted(self.by_kind(spans, CLIENT), key=lambda s: int(s["startTimeUnixNano"]))
        self.assertEqual([(attrs(a)["llmgate.backend"], attrs(a)["llmgate.attempt.kind"],
                           a["spanId"]) for a in attempts],
                         [("r1", "first", sid1.decode()), ("r2", "retry", sid2.decode())])
        self.assertEqual((attempts[0]["status"].get("code"), attrs(attempts[0])["error.type"]),
                         (2, "http_503"))
        self.assertNotEqual(attempts[1]["status"].get("code"), 2)
        self.assertLessEqual(int(attempts[0]["endTimeUnixNano"]),
                             int(attempts[1]["startTimeUnixNano"]))
        self.assertEqual(len([s for s in spans if s["name"] == "pick"]), 2)
        self.assertEqual(attrs(server)["llmgate.attempts"], 2)
        # a stream's first token, on the attempt that gave it
        self.assertIn("first_token", [e["name"] for e in attempts[1].get("events", [])])

    def test_a_hedge_is_an_attempt_span_of_its_own(self):
        # r1 holds every first token 30 s: past the hedge's deadline a duplicate goes to r2
        col = self.collector()
        r1 = self.replica("r1", ["--fault", "stall-first:1:30"])
        r2 = self.replica("r2")
        port, _ = self.gateway([r1, r2], {"endpoint": "http://127.0.0.1:%d" % col.port,
                                          "interval": "20ms"}, weights=[1000, 1],
                               routing={"policy": "round_robin", "hedge": {
                                   "enabled": True, "min": "300ms", "budget_ratio": 1,
                                   "budget_min": 0}})
        status = post_json(port, CHAT, harness.chat_body(stream=True, max_tokens=4))[0]
        self.assertEqual(status, 200)
        ((_, tid, sid1, _),) = self.sent_traceparents(r1)
        ((_, tid2, sid2, _),) = self.sent_traceparents(r2)
        self.assertEqual(tid, tid2)
        spans = self.wait_trace(col, tid.decode(), 5)
        attempts = {attrs(a)["llmgate.attempt.kind"]: a for a in self.by_kind(spans, CLIENT)}
        self.assertEqual(set(attempts), {"first", "hedge"})
        self.assertEqual((attempts["first"]["spanId"], attempts["hedge"]["spanId"]),
                         (sid1.decode(), sid2.decode()))
        self.assertEqual(attrs(attempts["first"])["error.type"], "hedge_lost")
        self.assertIn("first_token", [e["name"] for e in attempts["hedge"]["events"]])
        picks = [attrs(s)["llmgate.attempt.kind"] for s in spans if s["name"] == "pick"]
        self.assertEqual(sorted(picks), ["first", "hedge"])

    def test_a_wait_in_the_admission_queue_is_a_span(self):
        # one slot: a stream holds it; the traced request waits for it in the queue
        col = self.collector()
        rec = self.replica("r1", ["--slots", "1", "--decode-ms", "20"])
        port, admin = self.gateway([rec], {"endpoint": "http://127.0.0.1:%d" % col.port,
                                           "interval": "20ms", "sample_ratio": 0},
                                   limits={"queue_length": 2}, timeouts={"queue": "10s"})
        hold = self.stream(port, "POST", CHAT, harness.chat_body(stream=True, max_tokens=30))
        self.assertEqual(hold.read_head(), 200)
        result = {}

        def waiting():
            result["status"] = post_json(port, CHAT, harness.chat_body(max_tokens=2), headers={
                "traceparent": "00-%s-%s-01" % (TRACE, PARENT)})[0]
        t = threading.Thread(target=waiting, daemon=True)
        t.start()
        wait_until(lambda: metric(scrape(admin), "llmgate_queue_waiting") == 1, what="queued")
        hold.read_all()
        t.join(30)
        self.assertEqual(result.get("status"), 200)
        spans = self.wait_trace(col, TRACE, 5)
        (server,) = self.by_kind(spans, SERVER)
        (queue,) = [s for s in spans if s["name"] == "queue"]
        picks = sorted([s for s in spans if s["name"] == "pick"],
                       key=lambda s: int(s["startTimeUnixNano"]))
        (attempt,) = self.by_kind(spans, CLIENT)
        self.assertEqual(queue["parentSpanId"], server["spanId"])
        self.assertNotEqual(queue["status"].get("code"), 2)
        self.assertEqual([(p["status"].get("code"), attrs(p).get("error.type")) for p in picks],
                         [(2, "busy"), (0, None)])
        self.assertLessEqual(int(picks[0]["endTimeUnixNano"]), int(queue["startTimeUnixNano"]))
        self.assertLessEqual(int(queue["endTimeUnixNano"]), int(attempt["startTimeUnixNano"]))
        # it waited about as long as the stream held the slot
        self.assertGreater(int(queue["endTimeUnixNano"]) - int(queue["startTimeUnixNano"]),
                           100 * 1000 * 1000)

    def test_a_character_cut_at_the_span_limit_is_sent_as_valid_utf8(self):
        # a span's text holds 1 KiB: the request's name (method and path, 256 bytes
        # of it), its tracestate (512), url.path and then the model, here cut 3 bytes
        # in, inside its second character. A protobuf string must be UTF-8 (the
        # receiver refuses the whole export otherwise); JSON gets the same text
        model = "\u00e9" * 128  # 256 bytes, the most a request's model may have
        col = self.collector()
        rec = self.replica("r1")
        backends = [{"name": "r1", "url": "http://127.0.0.1:%d" % rec.port, "models": [model]}]
        tracing = {"endpoint": "http://127.0.0.1:%d" % col.port, "interval": "20ms"}
        if self.encoding is not None:
            tracing["encoding"] = self.encoding
        conf = self.base_config(backends, workers=1, tracing=tracing)
        _, port = self.start_gateway(conf)
        state = "a0=" + "v" * 250 + ",a1=" + "v" * 255  # 512 bytes, the most kept
        post_json(port, "/v1/" + "x" * 246, harness.chat_body(model=model), headers={
            "traceparent": "00-%s-%s-01" % (TRACE, PARENT), "tracestate": state})
        spans = self.wait_trace(col, TRACE, 2)
        self.assertEqual(col.errors, [])
        (server,) = self.by_kind(spans, SERVER)
        self.assertEqual(server["traceState"], state)
        cut = attrs(server)["gen_ai.request.model"]
        self.assertEqual(cut, "\u00e9?")  # the character cut short sent as '?'
        (attempt,) = self.by_kind(spans, CLIENT)
        self.assertEqual(attrs(attempt)["gen_ai.request.model"], model)  # whole, as it came


class Tracing(ExportCases, TracingBase):
    """The export cases in the default encoding (protobuf), and the rest."""

    def test_sampling_ratio_zero_exports_nothing(self):
        col = self.collector()
        rec = self.replica("r1")
        port, admin = self.gateway([rec], {"endpoint": "http://127.0.0.1:%d" % col.port,
                                           "interval": "20ms", "sample_ratio": 0})
        for _ in range(5):
            self.assertEqual(post_json(port, CHAT, harness.chat_body())[0], 200)
        # an inbound trace not sampled goes on to the engine, unsampled, and is not exported;
        # a malformed traceparent (uppercase) is not continued
        # (with a malformed tracestate: an uppercase key; dropped, not forwarded)
        for tp in ("00-%s-%s-00" % (TRACE, PARENT), "00-%s-%s-01" % (TRACE.upper(), PARENT)):
            self.assertEqual(post_json(port, CHAT, harness.chat_body(),
                                       headers={"traceparent": tp, "tracestate": "Rojo=1"})[0],
                             200)
        self.assertNotIn(b"ojo=1", b"".join(bytes(d) for d in rec.downstream))
        (_, t1, _, f1), (_, t2, _, f2) = self.sent_traceparents(rec)
        self.assertEqual((t1.decode(), f1), (TRACE, b"00"))
        self.assertEqual(f2, b"00")  # the malformed one replaced by a trace of the gateway's
        self.assertNotIn(t2.decode(), (TRACE, TRACE.upper()))
        self.assertNotIn(TRACE.upper().encode(), b"".join(bytes(d) for d in rec.downstream))
        samples = scrape(admin)
        self.assertEqual(metric(samples, "llmgate_trace_spans_total", outcome="queued"), 0)
        self.assertEqual(metric(samples, "llmgate_trace_exports_total"), 0)
        self.assertEqual(col.spans, [])

    def test_collector_down_or_silent_does_not_touch_requests(self):
        # a collector that accepts connections and never answers, and a queue of 16 spans
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        self.addCleanup(silent.close)
        rec = self.replica("r1")
        port, admin = self.gateway([rec], {"endpoint": "http://127.0.0.1:%d" %
                                           silent.getsockname()[1], "interval": "10ms",
                                           "timeout": "5s", "queue": 16, "batch": 4})
        t0 = time.monotonic()
        for _ in range(30):
            self.assertEqual(post_json(port, CHAT, harness.chat_body(max_tokens=2))[0], 200)
        took = time.monotonic() - t0
        self.assertLess(took, 5.0)  # no request waited for the 5 s export timeout
        samples = scrape(admin)
        self.assertGreater(metric(samples, "llmgate_trace_spans_total", outcome="dropped"), 0)
        self.assertEqual(len(self.sent_traceparents(rec)), 30)

    def test_collector_refusing_counts_failed_exports(self):
        rec = self.replica("r1")
        port, admin = self.gateway([rec], {"endpoint": "http://127.0.0.1:%d" %
                                           self.refusing_port(), "interval": "10ms"})
        for _ in range(3):
            self.assertEqual(post_json(port, CHAT, harness.chat_body(max_tokens=2))[0], 200)
        wait_until(lambda: metric(scrape(admin), "llmgate_trace_spans_total",
                                  outcome="failed") >= 9, what="9 spans failed")

    def test_a_reload_keeps_the_tracing_in_force(self):
        col = self.collector()
        rec = self.replica("r1")
        port, admin = self.gateway([rec], {"endpoint": "http://127.0.0.1:%d" % col.port})
        with open(self.path("llmgate.json")) as f:
            conf = json.load(f)
        conf["tracing"]["sample_ratio"] = 0.5
        self.write_config(conf)
        status, _, obj, _ = post_json(admin, "/admin/reload", {})
        self.assertEqual((status, obj["ok"]), (422, False))
        self.assertTrue(any("error: /tracing: tracing is set up at start" in e
                            for e in obj["errors"]), obj["errors"])
        # the same section (the rest changed) reloads
        conf["tracing"]["sample_ratio"] = 1
        conf["backends"][0]["weight"] = 2
        self.write_config(conf)
        status, _, obj, _ = post_json(admin, "/admin/reload", {})
        self.assertEqual((status, obj["ok"]), (200, True), obj)

    def test_config_errors_point_at_the_key(self):
        conf = self.base_config([{"name": "r1", "url": "http://127.0.0.1:1", "models": ["m"]}],
                                tracing={"endpoint": "https://c:4318", "sample_ratio": 2,
                                         "headers": {"bad name": "v"}, "encoding": "xml"})
        path = self.write_config(conf)
        p = self.start([harness.binary("llmgate"), "--check-config", path], name="check")
        self.assertEqual(p.wait(), 2)
        out = p.output()
        for what in ("/tracing/endpoint: https is not supported", "/tracing/sample_ratio",
                     "/tracing/headers/bad name", "/tracing/encoding"):
            self.assertRegex(out, r"llmgate\.json:\d+:\d+: error: " + re.escape(what))


class TracingJSON(ExportCases, TracingBase):
    """The export cases with tracing.encoding "json"."""
    encoding = "json"


if __name__ == "__main__":
    harness.main()
