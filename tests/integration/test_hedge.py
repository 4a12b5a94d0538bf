"""Hedged first tokens (routing.hedge): a streamed completion with no first
token by its deadline gets a duplicate on the router's next choice; the first
to produce a content event wins, the other is closed at once (its engine
aborts), and the client gets one attempt's bytes, untouched.

The fleet: r1 (weight 1000, so round robin picks it first) and r2 (weight 1,
the next choice), llmsim replicas whose stall-first fault holds first tokens;
a tiny Python backend where a replica must send a head and a role-only event
before it stalls. One worker, so that the budget is one bucket.
"""

import json
import os
import re
import sys
import time
import unittest

import harness
from harness import Harness, metric, read_access_log, scrape, sim_state, wait_until

# llmsim: fast steps, the same seed everywhere (the same tokens and ids for the
# same rank of request on a replica)
FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10",
        "--seed", "7"]
STALL = ["--fault", "stall-first:1:30"]  # every first token held 30 s
CHAT = "/v1/chat/completions"

# A replica that sends its head and a role-only event at once, then nothing
# (a stall after the head, as an engine sends it), and says when the gateway
# closes the connection. GET answers 200 (health checks).
ROLE_THEN_STALL = r"""
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(64)
print("tiny ready %d" % s.getsockname()[1], flush=True)
ROLE = (b'data: {"id":"tiny","object":"chat.completion.chunk","model":"m","choices":'
        b'[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n')
def serve(c):
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return
        buf += d
    if buf.startswith(b"GET"):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        c.close()
        return
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
              b"Transfer-Encoding: chunked\r\nX-Llmsim-Replica: tiny\r\n\r\n"
              + b"%x\r\n" % len(ROLE) + ROLE + b"\r\n")
    print("tiny sent the role", flush=True)
    while c.recv(65536):
        pass
    print("tiny closed", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def crash(port):
    """Makes an llmsim replica exit at once (it dies before it answers)."""
    try:
        harness.post_json(port, "/sim/control", {"fault": "crash@0"})
    except OSError:
        pass


def coarse_tick_ms():
    """The resolution of CLOCK_MONOTONIC_COARSE (Linux's clock id 6), which
    libevent times its timers by unless asked for precise ones."""
    return time.clock_getres(getattr(time, "CLOCK_MONOTONIC_COARSE", 6)) * 1000.0


def chat(content="hello", max_tokens=6, stream=True, **extra):
    return harness.chat_body(content=content, max_tokens=max_tokens, stream=stream, **extra)


def events_modulo_ids(stream):
    """The stream's events with what the engine chose per response (id, created) left out."""
    out = []
    for _, data in stream.events:
        if data == "[DONE]":
            out.append(data)
            continue
        ev = json.loads(data)
        ev.pop("id", None)
        ev.pop("created", None)
        out.append(ev)
    return out


class Hedge(Harness):

    def gateway(self, r1_port, r2_port, hedge=None, retry=None, r3_port=None):
        """Round robin over r1 (weight 1000), r2 (100) and r3 (1): r1 first, then r2."""
        h = {"enabled": True, "min": "300ms", "budget_ratio": 1, "budget_min": 0}
        h.update(hedge or {})
        backends = [{"name": "r1", "url": "http://127.0.0.1:%d" % r1_port, "models": ["m"],
                     "weight": 1000},
                    {"name": "r2", "url": "http://127.0.0.1:%d" % r2_port, "models": ["m"],
                     "weight": 100}]
        if r3_port:
            backends.append({"name": "r3", "url": "http://127.0.0.1:%d" % r3_port,
                             "models": ["m"], "weight": 1})
        routing = {"policy": "round_robin", "hedge": h}
        if retry:
            routing["retry"] = retry
        conf = self.base_config(backends, workers=1, admin="127.0.0.1:0", routing=routing,
                                access_log={"path": self.path("access.log"), "flush": "10ms"})
        proc, port = self.start_gateway(conf)
        self.admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return port

    def hedges(self):
        m = scrape(self.admin)
        return {k: metric(m, "llmgate_hedges_%s_total" % k) for k in ("sent", "won", "wasted")}

    def skipped(self, reason):
        return metric(scrape(self.admin), "llmgate_hedges_skipped_total", reason=reason)

    def test_stalled_replica_the_hedge_wins_with_an_untouched_stream(self):
        _, p1 = self.start_llmsim("r1", args=FAST + STALL)
        _, p2 = self.start_llmsim("r2", args=FAST)
        _, p3 = self.start_llmsim("r3", args=FAST)  # the undisturbed reference
        port = self.gateway(p1, p2)
        s = self.stream(port, "POST", CHAT, chat("same prompt", 6)).read_all(10 * harness.SLOW)
        ref = self.stream(p3, "POST", CHAT, chat("same prompt", 6)).read_all(10)
        self.assertEqual((s.status, s.ended), (200, "complete"))
        self.assertEqual(s.headers["x-llmsim-replica"], "r2")  # the winner's head
        self.assertEqual(s.headers["content-type"], ref.headers["content-type"])
        self.assertEqual(events_modulo_ids(s), events_modulo_ids(ref))
        # byte for byte, but for the second each response was created in
        self.assertEqual(re.sub(rb'"created":\d+', b"", s.body),
                         re.sub(rb'"created":\d+', b"", ref.body))
        self.assertEqual(len({json.loads(d)["id"] for _, d in s.events if d != "[DONE]"}), 1)
        self.assertLess(s.events[0][0] - s.t_sent, 5 * harness.SLOW,
                        "the hedge's first token, not the 30 s stall")
        # the loser's engine aborted its sequence, which never produced a token
        st1 = wait_until(lambda: (lambda x: x if x["aborted"] == 1 else None)(sim_state(p1)),
                         5, what="r1 to abort the losing sequence")
        self.assertEqual((st1["requests"], st1["parked"], st1["generation_tokens"]), (1, 1, 0))
        st2 = sim_state(p2)
        self.assertEqual((st2["requests"], st2["completed"], st2["aborted"]), (1, 1, 0))
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["status"], e["backend"], e["attempt_count"]), (200, "r2", 2))
        self.assertEqual((e["hedged"], e["hedge_winner"], e["error"]), (True, "hedge", None))
        self.assertEqual(e["hedge_after"], 300.0)  # the floor: nothing predicts 100 ms here
        self.assertEqual(e["tokens"], 6)
        # the winner's first token came after the deadline, give or take one
        # tick of the clock libevent times its timers by (CLOCK_MONOTONIC_COARSE:
        # a deadline fires up to a tick early by the gateway's own clock; 4 ms
        # here, where 299.9 ms was read)
        self.assertGreaterEqual(e["ttft"], 300.0 - coarse_tick_ms())
        self.assertGreaterEqual(e["ttfb"], e["queue"])  # the winner's timings
        self.assertEqual(self.hedges(), {"sent": 1, "won": 1, "wasted": 0})

    def test_first_token_in_time_no_hedge_and_the_head_waits_for_it(self):
        # r1's first tokens come after 0.6 s, within the deadline (2 s): the
        # engine's head is held until then; with hedging off it comes at once
        _, p1 = self.start_llmsim("r1", args=FAST + ["--fault", "stall-first:1:0.6"])
        _, p2 = self.start_llmsim("r2", args=FAST)
        port = self.gateway(p1, p2, {"min": "2s"})
        s = self.stream(port, "POST", CHAT, chat())
        self.assertEqual(s.read_head(10), 200)
        head_s = s.t_head - s.t_sent
        s.read_all(10)
        self.assertGreater(head_s, 0.5, "the head was held until the first token")
        self.assertLess(s.events[0][0] - s.t_head, 0.2, "and came with it")
        self.assertEqual(s.headers["x-llmsim-replica"], "r1")
        self.assertEqual(sim_state(p2)["requests"], 0)
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["hedged"], e["hedge_winner"], e["hedge_after"]), (False, None, 2000.0))
        self.assertEqual(self.hedges(), {"sent": 0, "won": 0, "wasted": 0})
        # the same without hedging: the head at once
        port2 = self.gateway(p1, p2, {"enabled": False})
        s = self.stream(port2, "POST", CHAT, chat())
        self.assertEqual(s.read_head(10), 200)
        self.assertLess(s.t_head - s.t_sent, 0.4)
        s.read_all(10)

    def test_a_role_event_before_the_stall_never_reaches_the_client(self):
        tiny = self.start([sys.executable, "-c", ROLE_THEN_STALL], name="tiny")
        p1 = int(tiny.wait_for(r"tiny ready (\d+)").group(1))
        _, p2 = self.start_llmsim("r2", args=FAST)
        port = self.gateway(p1, p2)
        s = self.stream(port, "POST", CHAT, chat()).read_all(10 * harness.SLOW)
        tiny.wait_for(r"tiny sent the role")
        self.assertEqual((s.status, s.ended), (200, "complete"))
        self.assertEqual(s.headers["x-llmsim-replica"], "r2")
        self.assertNotIn("tiny", s.body.decode())
        first = json.loads(s.events[0][1])["choices"][0]["delta"]
        self.assertEqual(first["role"], "assistant")
        self.assertTrue(first["content"])  # r2's first event, with content
        tiny.wait_for(r"tiny closed")       # the loser's connection closed at once
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["backend"], e["hedge_winner"]), ("r2", "hedge"))

    def test_budget_spent_no_hedge(self):
        # half a token a request, none a second: the first request's deadline
        # finds half a token (no duplicate), the second's one
        _, p1 = self.start_llmsim("r1", args=FAST + ["--fault", "stall-first:1:1.5"])
        _, p2 = self.start_llmsim("r2", args=FAST)
        port = self.gateway(p1, p2, {"budget_ratio": 0.5})
        a = self.stream(port, "POST", CHAT, chat("a")).read_all(10 * harness.SLOW)
        b = self.stream(port, "POST", CHAT, chat("b")).read_all(10 * harness.SLOW)
        self.assertEqual((a.status, b.status), (200, 200))
        self.assertEqual((a.headers["x-llmsim-replica"], b.headers["x-llmsim-replica"]),
                         ("r1", "r2"))
        self.assertGreater(a.events[0][0] - a.t_sent, 1.4)  # waited out the stall
        ea, eb = read_access_log(self.path("access.log"), 2)
        self.assertEqual((ea["hedged"], eb["hedged"]), (False, True))
        self.assertEqual(self.skipped("budget"), 1)
        self.assertEqual(self.hedges()["sent"], 1)
        self.assertEqual(sim_state(p2)["requests"], 1)

    def test_requests_that_are_not_eligible_are_never_hedged(self):
        _, p1 = self.start_llmsim("r1", args=FAST + ["--fault", "stall-first:1:1"])
        _, p2 = self.start_llmsim("r2", args=FAST)
        # at most 300 ms: the five stalled first tokens below raise r1's
        # prediction, and 3x that would wait past the stall
        port = self.gateway(p1, p2, {"min": "100ms", "max": "300ms"})
        cases = [("/v1/chat/completions", chat(stream=False)),                # not streamed
                 ("/v1/chat/completions", chat(n=2)),                         # two choices
                 ("/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 2,
                                      "stream": True, "best_of": 3}),
                 ("/v1/chat/completions", chat(store=True)),                  # stored
                 ("/v1/embeddings", {"model": "m", "input": "x"})]
        streams = [self.stream(port, "POST", path, body) for path, body in cases]
        harness.read_concurrently(streams, 10 * harness.SLOW)
        for s in streams:
            self.assertEqual(s.status, 200)
            self.assertEqual(s.headers["x-llmsim-replica"], "r1")
        for e in read_access_log(self.path("access.log"), len(cases)):
            self.assertEqual((e["hedged"], e["hedge_after"], e["attempt_count"]), (False, None, 1))
        self.assertEqual(sim_state(p2)["requests"], 0)
        self.assertEqual(self.hedges()["sent"], 0)
        # and an eligible one is, on the same fleet
        s = self.stream(port, "POST", CHAT, chat()).read_all(10 * harness.SLOW)
        self.assertEqual(s.headers["x-llmsim-replica"], "r2")
        (e,) = read_access_log(self.path("access.log"), len(cases) + 1)[-1:]
        self.assertEqual((e["backend"], e["hedged"], e["hedge_winner"]), ("r2", True, "hedge"))

    def test_client_leaving_during_a_hedge_closes_both_upstreams(self):
        _, p1 = self.start_llmsim("r1", args=FAST + STALL)
        _, p2 = self.start_llmsim("r2", args=FAST + STALL)
        port = self.gateway(p1, p2)
        s = self.stream(port, "POST", CHAT, chat())
        wait_until(lambda: sim_state(p2)["parked_now"] == 1, 5 * harness.SLOW,
                   what="the duplicate to reach r2")
        self.assertEqual(sim_state(p1)["parked_now"], 1)
        s.close()
        for p in (p1, p2):
            st = wait_until(lambda: (lambda x: x if x["aborted"] == 1 else None)(sim_state(p)),
                            5 * harness.SLOW, what="both engines to abort")
            self.assertEqual(st["parked_now"], 0)
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["status"], e["hedged"], e["hedge_winner"], e["error"]),
                         (499, True, None, "client_closed"))
        self.assertEqual(self.hedges(), {"sent": 1, "won": 0, "wasted": 1})

    def test_the_duplicate_fails_and_the_first_goes_on(self):
        # r2 answers 503: the duplicate leaves the race; r1's stream goes on
        # alone, still held until its first token, and ends well
        _, p1 = self.start_llmsim("r1", args=FAST + ["--fault", "stall-first:1:1.5"])
        _, p2 = self.start_llmsim("r2", args=FAST + ["--fault", "status@0:503:600"])
        port = self.gateway(p1, p2, {"min": "200ms"})
        s = self.stream(port, "POST", CHAT, chat()).read_all(10 * harness.SLOW)
        self.assertEqual((s.status, s.ended, s.headers["x-llmsim-replica"]),
                         (200, "complete", "r1"))
        self.assertGreater(s.t_head - s.t_sent, 1.4, "held until the first token")
        self.assertEqual(sim_state(p2)["fault_responses"], 1)
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["backend"], e["hedged"], e["hedge_winner"], e["attempt_count"]),
                         ("r1", True, "first", 2))
        self.assertEqual(self.hedges(), {"sent": 1, "won": 0, "wasted": 1})

    def test_the_first_fails_and_the_duplicate_goes_on(self):
        proc1, p1 = self.start_llmsim("r1", args=FAST + STALL)
        _, p2 = self.start_llmsim("r2", args=FAST + ["--fault", "stall-first:1:1.5"])
        port = self.gateway(p1, p2, {"min": "200ms"})
        s = self.stream(port, "POST", CHAT, chat())
        wait_until(lambda: sim_state(p2)["parked_now"] == 1, 5 * harness.SLOW,
                   what="the duplicate to reach r2")
        crash(p1)
        proc1.wait(5)
        s.read_all(10 * harness.SLOW)
        self.assertEqual((s.status, s.ended, s.headers["x-llmsim-replica"]),
                         (200, "complete", "r2"))
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["status"], e["backend"], e["hedge_winner"]), (200, "r2", "hedge"))
        self.assertEqual(self.hedges(), {"sent": 1, "won": 1, "wasted": 0})

    def test_both_fail_before_any_byte_the_retry_path_takes_over(self):
        # the duplicate on r2 fails at once (503), then r1 crashes: a retry
        # (attempts 3) goes to r3, and the client sees none of it
        proc1, p1 = self.start_llmsim("r1", args=FAST + STALL)
        _, p2 = self.start_llmsim("r2", args=FAST + ["--fault", "status@0:503:600"])
        _, p3 = self.start_llmsim("r3", args=FAST)
        port = self.gateway(p1, p2, {"min": "200ms"}, retry={"attempts": 3}, r3_port=p3)
        s = self.stream(port, "POST", CHAT, chat())
        wait_until(lambda: sim_state(p2)["fault_responses"] == 1, 5 * harness.SLOW,
                   what="the duplicate to fail")
        crash(p1)
        proc1.wait(5)
        s.read_all(10 * harness.SLOW)
        self.assertEqual((s.status, s.ended), (200, "complete"))
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["status"], e["attempt_count"], e["hedged"], e["hedge_winner"]),
                         (200, 3, True, "first"))
        self.assertEqual(e["backend"], "r3")
        self.assertEqual(sim_state(p3)["completed"], 1)


if __name__ == "__main__":
    harness.main()
