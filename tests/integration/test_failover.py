"""Mid-stream failover (routing.resume): a stream whose replica dies after
the first byte goes on on another replica, sent the original request with
the text already delivered (chat: an open assistant message with
continue_final_message; completions: the prompt continued) and max_tokens
less what was delivered. The client sees one stream: the text of an
uninterrupted run, byte for byte, with a pause where the failover was, one
finish_reason and one [DONE].

The replicas are llmsim with --text context: each token is a function of the
text before it, the same on every replica, so a continuation that got the
prompt, the delivered text or max_tokens wrong gives another text. A
request the gateway may not resume (resumption off, a sampled request, no
replica left, the attempts spent) is cut as before: never a clean end.
"""

import json
import os
import shutil
import socket
import subprocess
import time
import unittest

import harness
from harness import Harness, http_request, metric, scrape, wait_until

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
TEXT = ["--text", "context", "--role-chunk", "--decode-ms-per-seq", "0",
        "--prefill-us-per-token", "10"]

read_log = harness.read_access_log

# A replica that breaks a stream the ways llmsim cannot: it forwards the
# request to an llmsim replica and relays its events, chunk by chunk, until
# KEEP content events went by; then, by mode:
#   garbage  bytes that are no HTTP chunk (the gateway's parser fails)
#   error    the engines' error event and [DONE], as vLLM ends a failed stream
FAULTY = r"""
import json, socket, sys, threading
target, mode, keep = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(16)
print("faulty ready %d" % s.getsockname()[1], flush=True)
ERROR = b'data: {"error":{"message":"engine died","type":"internal_error","code":500}}\n\n'

def chunk(b):
    return b"%x\r\n%s\r\n" % (len(b), b)

def serve(c):
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += c.recv(65536)
    head, _, body = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"POST"):  # the gateway's health checks and scrapes
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        c.close()
        return
    n = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
         if l.lower().startswith(b"content-length:")][0]
    while len(body) < n:
        body += c.recv(65536)
    u = socket.create_connection(("127.0.0.1", target))
    u.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % n + body)
    data = b""
    while b"\r\n\r\n" not in data:
        data += u.recv(65536)
    data = data.partition(b"\r\n\r\n")[2]
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
              b"X-Llmsim-Replica: faulty\r\nTransfer-Encoding: chunked\r\n\r\n")
    seen = 0
    while True:
        d = u.recv(65536)
        if not d:
            break
        data += d
        while b"\r\n" in data:  # llmsim's chunks: size line, one event, CRLF
            size, _, rest = data.partition(b"\r\n")
            k = int(size, 16)
            if len(rest) < k + 2:
                break
            ev, data = rest[:k], rest[k + 2:]
            if k == 0:
                break
            if b'"content":"' in ev and b'"content":""' not in ev:
                seen += 1
            c.sendall(chunk(ev))
            if seen == keep:
                if mode == "garbage":
                    c.sendall(b"zz\r\nthis is no chunk\r\n")
                else:
                    c.sendall(chunk(ERROR) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
                print("faulty %s after %d" % (mode, seen), flush=True)
                c.close()
                u.close()
                return
    c.close()

while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def control(port, obj):
    status, _, data = http_request(port, "POST", "/sim/control", obj)
    assert status == 200, (status, data)
    return json.loads(data)


def chat(max_tokens, content="Tell me a story.", **extra):
    body = {"model": "m", "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "system", "content": "You are terse."},
                         {"role": "user", "content": content}]}
    body.update(extra)
    return body


def completion(max_tokens, **extra):
    body = {"model": "m", "stream": True, "max_tokens": max_tokens, "temperature": 0,
            "prompt": "Once upon a time"}
    body.update(extra)
    return body


def chunks(stream):
    """The JSON chunks of a stream's events ([DONE] left out)."""
    return [json.loads(d) for _, d in stream.events if d != "[DONE]"]


def text_of(stream):
    """The text the client assembles: every chunk's content (or text), in order."""
    out = []
    for ch in chunks(stream):
        for c in ch.get("choices", []):
            t = c.get("delta", {}).get("content") if "delta" in c else c.get("text")
            if t:
                out.append(t)
    return "".join(out)


def content_times(stream):
    """When each content event arrived (monotonic s)."""
    out = []
    for t, d in stream.events:
        if d == "[DONE]":
            continue
        for c in json.loads(d).get("choices", []):
            if (c.get("delta", {}).get("content") if "delta" in c else c.get("text")):
                out.append(t)
    return out


class FailoverTest(Harness):

    def fleet(self, n=3, decode_ms=10, args=(), names=None):
        """n llmsim replicas with the context text; returns {name: port}."""
        ports = {}
        for i in range(n):
            name = names[i] if names else "r%d" % (i + 1)
            _, ports[name] = self.start_llmsim(  # --seed: each its own chunk ids
                name, args=TEXT + ["--seed", str(i + 1), "--decode-ms", str(decode_ms)] + list(args))
        return ports

    def gateway(self, ports, resume={"models": {"m": "greedy"}}, policy="round_robin",
                **extra):
        backends = [{"name": n, "url": "http://127.0.0.1:%d" % p, "models": ["m"]}
                    for n, p in ports.items()]
        routing = {"policy": policy}
        if resume is not None:
            routing["resume"] = resume
        conf = self.base_config(backends, access_log={"path": self.path("access.log"),
                                                      "flush": 0},
                                routing=routing, admin="127.0.0.1:0", **extra)
        conf.setdefault("health", {}).update({"eject_consecutive": 0, "interval": "1h"})
        p, port = self.start_gateway(conf)
        self.admin = int(p.wait_for(r"admin=[^ ]*:(\d+)").group(1))
        return p, port

    def reference(self, port, body, path=CHAT):
        """The uninterrupted answer: its text and chunk count, straight from a replica."""
        s = self.stream(port, "POST", path, body).read_all(20)
        self.assertEqual(s.ended, "complete")
        return text_of(s)

    def assert_one_stream(self, s, want_text):
        """What a client must see after a failover: the whole text, one finish, one [DONE]."""
        self.assertEqual(s.ended, "complete")
        self.assertEqual(text_of(s), want_text)
        self.assertEqual([d for _, d in s.events].count("[DONE]"), 1)
        self.assertEqual(s.events[-1][1], "[DONE]")
        finishes = [c["finish_reason"] for ch in chunks(s) for c in ch.get("choices", [])
                    if c.get("finish_reason") is not None]
        self.assertEqual(finishes, ["length"])
        # the continuation's role-only chunk was dropped: one, at the start
        roles = [i for i, ch in enumerate(chunks(s)) for c in ch.get("choices", [])
                 if "role" in c.get("delta", {})]
        self.assertEqual(roles, [0])

    def crash_serving_replica(self, s, ports, after, fault="crash@0.02"):
        """Reads `after` content events, then applies `fault` to the replica serving s."""
        self.assertEqual(s.read_head(10), 200)
        name = s.headers["x-llmsim-replica"]
        seen = 0
        while seen < after:
            ev = s.next_event(10)
            self.assertIsNotNone(ev)
            if '"content":"' in ev[1] and '"content":""' not in ev[1]:
                seen += 1
        control(ports[name], {"fault": fault})
        return name

    # ---- a failure, resumed ---------------------------------------------------

    def test_chat_crash_mid_stream_resumed_with_the_same_text(self):
        ports = self.fleet(decode_ms=20)
        _, gw = self.gateway(ports)
        want = self.reference(ports["r1"], chat(40))
        self.assertGreater(len(want), 100)
        s = self.stream(gw, "POST", CHAT, chat(40))
        dead = self.crash_serving_replica(s, ports, 10)
        s.read_all(20)
        self.assert_one_stream(s, want)
        times = content_times(s)
        self.assertEqual(len(times), 40)
        gaps = [b - a for a, b in zip(times, times[1:])]
        pause = max(gaps)
        print("pause around the failover: %.1f ms (steady gaps %.1f ms median)"
              % (pause * 1000, sorted(gaps)[len(gaps) // 2] * 1000))
        self.assertLess(pause, 2.0 * harness.SLOW)
        rec = read_log(self.path("access.log"), 1)[-1]
        self.assertEqual((rec["status"], rec["error"], rec["resumed"]), (200, None, 1))
        self.assertNotEqual(rec["backend"], dead)
        self.assertEqual(rec["attempt_count"], 2)
        self.assertEqual(rec["tokens"], 40)
        self.assertGreater(rec["resume_pause"], 0)
        self.assertLess(rec["resume_pause"], pause * 1000 + 50)
        m = scrape(self.admin)
        self.assertEqual(metric(m, "llmgate_resumed_total"), 1)
        self.assertEqual(metric(m, "llmgate_backend_cut_streams_total", backend=dead), 1)

    def test_completions_close_after_tokens_resumed_twice(self):
        # every replica closes a generation after 8 tokens: 20 tokens take the
        # first attempt and two continuations (8 + 8 + 4), each on another
        ports = self.fleet(decode_ms=5)
        want = self.reference(ports["r1"], completion(20), COMP)
        for p in ports.values():
            control(p, {"fault": "close-after-tokens:8"})
        _, gw = self.gateway(ports)
        s = self.stream(gw, "POST", COMP, dict(completion(20),
                                               stream_options={"include_usage": True}))
        s.read_all(20)
        self.assertEqual(s.ended, "complete")
        self.assertEqual(text_of(s), want)
        self.assertEqual([d for _, d in s.events].count("[DONE]"), 1)
        usage = [ch["usage"] for ch in chunks(s) if ch.get("usage")]
        # one usage chunk, the last continuation's (its 4 tokens)
        self.assertEqual(len(usage), 1)
        self.assertEqual(usage[0]["completion_tokens"], 4)
        rec = read_log(self.path("access.log"), 1)[-1]
        self.assertEqual((rec["status"], rec["error"], rec["resumed"], rec["attempt_count"]),
                         (200, None, 2, 3))
        # 30 tokens need three continuations: the attempts (2) run out, the stream is cut
        s = self.stream(gw, "POST", COMP, completion(30)).read_all(20)
        self.assertIn(s.ended, ("eof", "reset"))
        self.assertNotIn("[DONE]", [d for _, d in s.events])
        self.assertEqual(len(content_times(s)), 24)
        self.assertTrue(text_of(s).startswith(want))  # 24 tokens: the 20 of want, then 4
        rec = read_log(self.path("access.log"), 2)[-1]
        self.assertEqual((rec["resumed"], rec["error"]), (2, "upstream_closed_mid_response"))
        m = scrape(self.admin)
        self.assertEqual(metric(m, "llmgate_resume_failed_total", reason="attempts"), 1)

    def test_token_counts_range_checked_and_each_lowered_when_resumed(self):
        # max_tokens was read only where max_completion_tokens is null, and
        # neither was range-checked, while a continuation lowers each (and
        # min_tokens) by what was delivered: INT64_MIN next to a valid
        # max_completion_tokens overflowed there (UBSan aborted the gateway,
        # release builds wrapped). Every token count is checked before
        # anything is sent: 400, with the field in `param`.
        ports = self.fleet(decode_ms=5)
        want = self.reference(ports["r1"], completion(20), COMP)
        for p in ports.values():
            control(p, {"fault": "close-after-tokens:8"})
        _, gw = self.gateway(ports)
        for field, value in (("max_tokens", -2**63), ("max_tokens", 2**31),
                             ("min_tokens", -2**63), ("max_completion_tokens", 2**63 - 1)):
            body = dict(completion(20), max_completion_tokens=20)
            body[field] = value
            status, _, data = http_request(gw, "POST", COMP, body)
            self.assertEqual(status, 400, (field, value, data))
            err = json.loads(data)["error"]
            self.assertEqual((err["param"], err["type"]), (field, "invalid_request_error"))
            self.assertIn('"%s" must be an integer from 0 to 2147483647' % field, err["message"])
        # in range, all three: 20 tokens in three attempts (8 + 8 + 4), each
        # continuation sent the counts less what was delivered
        s = self.stream(gw, "POST", COMP, dict(completion(20), max_completion_tokens=20,
                                               min_tokens=20))
        s.read_all(20)
        self.assertEqual(s.ended, "complete")
        self.assertEqual(text_of(s), want)
        log = read_log(self.path("access.log"), 5)
        self.assertEqual([r["status"] for r in log], [400] * 4 + [200])
        self.assertEqual((log[-1]["resumed"], log[-1]["attempt_count"], log[-1]["tokens"]), (2, 3, 20))

    def test_stall_mid_stream_resumed_after_stream_idle(self):
        ports = self.fleet(decode_ms=10)
        _, gw = self.gateway(ports, timeouts={"stream_idle": "400ms"})
        want = self.reference(ports["r2"], chat(30))
        s = self.stream(gw, "POST", CHAT, chat(30))
        self.crash_serving_replica(s, ports, 5, fault="stall@0:30")
        t0 = time.monotonic()
        s.read_all(20)
        self.assert_one_stream(s, want)
        self.assertGreater(time.monotonic() - t0, 0.3)
        rec = read_log(self.path("access.log"), 1)[-1]
        self.assertEqual((rec["resumed"], rec["error"]), (1, None))
        self.assertGreater(rec["resume_pause"], 350)

    def test_seeded_request_resumed_where_seeded_is_allowed(self):
        ports = self.fleet(decode_ms=20)
        _, gw = self.gateway(ports, resume={"models": {"*": "seeded"}})
        body = chat(30, temperature=0.8, seed=7)
        want = self.reference(ports["r3"], body)
        s = self.stream(gw, "POST", CHAT, body)
        self.crash_serving_replica(s, ports, 6)
        s.read_all(20)
        self.assert_one_stream(s, want)

    def faulty(self, target, mode, keep):
        p = self.start([harness.PYTHON, "-c", FAULTY, str(target), mode, str(keep)],
                       name="faulty-" + mode)
        return p, int(p.wait_for(r"faulty ready (\d+)").group(1))

    def through_faulty(self, gw, body, tries=4):
        """A stream through the gateway that its first attempt sent to `faulty`."""
        for _ in range(tries):
            s = self.stream(gw, "POST", CHAT, body)
            self.assertEqual(s.read_head(10), 200)
            if s.headers.get("x-llmsim-replica") == "faulty":
                return s
            s.read_all(20)
        self.fail("no request went to the faulty replica")

    def test_malformed_framing_mid_stream_resumed(self):
        ports = self.fleet(n=2, decode_ms=5)
        _, fport = self.faulty(ports["r1"], "garbage", 7)
        _, gw = self.gateway({"faulty": fport, "r2": ports["r2"]})
        want = self.reference(ports["r1"], chat(25))
        s = self.through_faulty(gw, chat(25)).read_all(20)
        self.assert_one_stream(s, want)
        rec = [r for r in read_log(self.path("access.log")) if r["resumed"]][-1]
        self.assertEqual((rec["backend"], rec["error"]), ("r2", None))

    def test_engine_error_event_mid_stream_resumed(self):
        # the engine reports its failure inside the stream (vLLM's EngineDeadError
        # is an error event, then [DONE]): held back, and the stream goes on
        ports = self.fleet(n=2, decode_ms=5)
        _, fport = self.faulty(ports["r1"], "error", 5)
        _, gw = self.gateway({"faulty": fport, "r2": ports["r2"]})
        want = self.reference(ports["r1"], chat(25))
        s = self.through_faulty(gw, chat(25)).read_all(20)
        self.assert_one_stream(s, want)
        self.assertFalse(any("engine died" in d for _, d in s.events))
        rec = [r for r in read_log(self.path("access.log")) if r["resumed"]][-1]
        self.assertEqual((rec["backend"], rec["error"]), ("r2", None))
        m = scrape(self.admin)
        self.assertEqual(metric(m, "llmgate_backend_stream_errors_total", backend="faulty"), 1)
        self.assertEqual(metric(m, "llmgate_backend_stream_errors_total", backend="r2"), 0)

    def test_engine_error_event_passed_on_where_not_resumed(self):
        # resumption off for the model: the client reads the engine's error, as before
        ports = self.fleet(n=2, decode_ms=5)
        _, fport = self.faulty(ports["r1"], "error", 5)
        _, gw = self.gateway({"faulty": fport, "r2": ports["r2"]},
                             resume={"models": {"other": "greedy"}})
        s = self.through_faulty(gw, chat(25)).read_all(20)
        self.assertEqual(s.ended, "complete")
        self.assertIn("engine died", s.events[-2][1])
        self.assertEqual(s.events[-1][1], "[DONE]")
        self.assertEqual(len(content_times(s)), 5)
        rec = [r for r in read_log(self.path("access.log")) if r["backend"] == "faulty"][-1]
        self.assertEqual((rec["resumed"], rec["error"]), (0, "engine_error_event"))

    def test_http10_client_and_openai_client_read_one_stream(self):
        # every replica closes after 8 tokens: 20 take two continuations
        ports = self.fleet(decode_ms=5)
        want = self.reference(ports["r1"], chat(20))
        for p in ports.values():
            control(p, {"fault": "close-after-tokens:8"})
        _, gw = self.gateway(ports)
        # HTTP/1.0: the body ends at the close, events as they are
        body = json.dumps(chat(20)).encode()
        raw = harness.raw_exchange(gw, b"POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\n"
                                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                   % len(body) + body, timeout=20)
        head, _, payload = raw.partition(b"\r\n\r\n")
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        self.assertNotIn(b"chunked", head.lower())
        events = harness.sse_events(payload)
        self.assertEqual(events.count("[DONE]"), 1)
        self.assertEqual("".join(c.get("delta", {}).get("content") or ""
                                 for e in events if e != "[DONE]"
                                 for c in json.loads(e)["choices"]), want)
        if shutil.which("node") is None or not os.path.isdir(
                os.path.join(harness.SRC, "tests", "node", "node_modules", "openai")):
            self.skipTest("node or the openai npm package is missing")
        out = subprocess.run(["node", os.path.join(harness.SRC, "tests", "node",
                                                    "openai_stream.mjs"),
                              "http://127.0.0.1:%d/v1" % gw, json.dumps(chat(20))],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(res["content"], want)
        self.assertEqual(res["finish_reason"], "length")
        self.assertEqual(res["ids"], 3)  # each backend's own chunk id, folded into one answer

    def test_hedged_stream_whose_winner_dies_resumed(self):
        # routing.hedge and routing.resume together: r1 holds every first
        # token, so the duplicate on r2 wins the race; r2 then dies mid-answer
        # and the stream goes on on r3 (r1 was tried: the race's loser)
        ports = {}
        for i, (name, fault) in enumerate((("r1", ["--fault", "stall-first:1:30"]),
                                           ("r2", []), ("r3", []))):
            _, ports[name] = self.start_llmsim(
                name, args=TEXT + ["--seed", str(i + 1), "--decode-ms", "20"] + fault)
        want = self.reference(ports["r3"], chat(40))
        backends = [{"name": n, "url": "http://127.0.0.1:%d" % ports[n], "models": ["m"],
                     "weight": w} for n, w in (("r1", 1000), ("r2", 100), ("r3", 1))]
        routing = {"policy": "round_robin", "resume": {"models": {"m": "greedy"}},
                   "hedge": {"enabled": True, "min": "300ms", "budget_ratio": 1,
                             "budget_min": 0}}
        conf = self.base_config(backends, workers=1, admin="127.0.0.1:0", routing=routing,
                                access_log={"path": self.path("access.log"), "flush": 0})
        conf.setdefault("health", {}).update({"eject_consecutive": 0, "interval": "1h"})
        p, gw = self.start_gateway(conf)
        self.admin = int(p.wait_for(r"admin=[^ ]*:(\d+)").group(1))
        s = self.stream(gw, "POST", CHAT, chat(40))
        dead = self.crash_serving_replica(s, ports, 10)
        self.assertEqual(dead, "r2")  # the duplicate's head: it won
        s.read_all(20 * harness.SLOW)
        self.assert_one_stream(s, want)
        rec = read_log(self.path("access.log"), 1)[-1]
        self.assertEqual((rec["status"], rec["error"], rec["hedged"], rec["hedge_winner"],
                          rec["resumed"], rec["backend"], rec["tokens"]),
                         (200, None, True, "hedge", 1, "r3", 40), rec)
        m = scrape(self.admin)
        self.assertEqual((metric(m, "llmgate_hedges_won_total"),
                          metric(m, "llmgate_resumed_total")), (1, 1))

    # ---- not resumed: cut as before -------------------------------------------

    def assert_cut(self, s):
        self.assertIn(s.ended, ("eof", "reset"))
        self.assertNotIn("[DONE]", [d for _, d in s.events])

    def test_not_resumable_requests_are_cut(self):
        # one replica per case: each is crashed under its stream, and stays down
        ports = self.fleet(n=5, decode_ms=20)
        _, gw = self.gateway(ports, resume={"models": {"m": "greedy", "*": "off"}})
        cases = [chat(30, temperature=0.7),            # sampled: greedy mode does not resume it
                 chat(30, temperature=0.7, seed=3),    # seeded: neither
                 chat(30, n=2),                        # several choices
                 chat(30, tools=[{"type": "function", "function": {"name": "f"}}])]
        for body in cases:
            s = self.stream(gw, "POST", CHAT, body)
            dead = self.crash_serving_replica(s, ports, 3)
            s.read_all(20)
            self.assert_cut(s)
            del ports[dead]
        log = read_log(self.path("access.log"), len(cases))
        self.assertTrue(all(r["resumed"] == 0 and r["error"] for r in log), log)

    def test_resumption_off_cuts(self):
        ports = self.fleet(n=2, decode_ms=20)
        _, gw = self.gateway(ports, resume=None)
        s = self.stream(gw, "POST", CHAT, chat(30))
        self.crash_serving_replica(s, ports, 4)
        s.read_all(20)
        self.assert_cut(s)
        rec = read_log(self.path("access.log"), 1)[-1]
        self.assertEqual(rec["resumed"], 0)
        self.assertIsNone(rec["resume_pause"])
        self.assertIn(rec["error"], ("upstream_closed_mid_response", "upstream_reset"))

    def test_no_replica_left_cuts(self):
        ports = self.fleet(n=1, decode_ms=20)
        _, gw = self.gateway(ports)
        s = self.stream(gw, "POST", CHAT, chat(30))
        self.crash_serving_replica(s, ports, 4)
        s.read_all(20)
        self.assert_cut(s)
        m = scrape(self.admin)
        self.assertEqual(metric(m, "llmgate_resume_failed_total", reason="no_backend"), 1)

    # ---- the client leaves while the continuation is on its way ----------------

    def test_client_leaving_during_resumption_stops_the_continuation(self):
        # the continuation's replica prefills slowly (2 s for the prompt and the
        # text): the client leaves meanwhile, and that replica aborts it
        ports = self.fleet(n=1, decode_ms=20, names=["fast"])
        _, slow = self.start_llmsim("slow", args=TEXT + ["--decode-ms", "20",
                                                         "--prefill-us-per-token", "50000"])
        _, gw = self.gateway(dict(ports, slow=slow), policy="least_request")
        s = self.stream(gw, "POST", CHAT, chat(60))
        self.assertEqual(s.read_head(10), 200)
        if s.headers["x-llmsim-replica"] != "fast":
            self.skipTest("the first attempt went to the slow replica")
        self.crash_serving_replica(s, {"fast": ports["fast"]}, 4)
        wait_until(lambda: harness.sim_state(slow)["running"] + harness.sim_state(slow)["waiting"]
                   >= 1, 10, what="the continuation on the slow replica")
        s.close()
        st = wait_until(lambda: (lambda st: st if st["aborted"] >= 1 else None)(
            harness.sim_state(slow)), 10, what="the continuation aborted")
        self.assertEqual(st["completed"], 0)
        rec = read_log(self.path("access.log"), 1)[-1]
        self.assertEqual((rec["status"], rec["error"], rec["resumed"]), (499, "client_closed", 1))
        self.assertIsNone(rec["resume_pause"])


if __name__ == "__main__":
    harness.main()
