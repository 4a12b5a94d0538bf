"""Every try of a request in its access-log line (`attempts`: backend, kind,
status, times, failure; `attempt_count`), and the failures routing.retry.on
retries.

The replicas are llmsim; round robin over weighted backends makes the
order of picks known (the heaviest first, then the next among those left).
One worker, so that the pick order and the hedge budget are one.
"""

import http.client
import json
import time

import harness
from harness import Harness, post_json, read_access_log, sim_state

CHAT = "/v1/chat/completions"
FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


def backend(name, port, weight):
    return {"name": name, "url": "http://127.0.0.1:%d" % port, "models": ["m"], "weight": weight}


class Attempts(Harness):

    def gateway(self, backends, **routing):
        routing = dict({"policy": "round_robin"}, **routing)
        conf = self.base_config(backends, workers=1, routing=routing,
                                access_log={"path": self.path("access.log"), "flush": "10ms"})
        conf["health"] = {"interval": "1h", "eject_consecutive": 0}
        _, port = self.start_gateway(conf)
        return port

    def assert_times_in_order(self, a):
        """A try's times count from the request's first byte, in the order they happen."""
        times = [a[k] for k in ("dispatch", "connect", "first_byte", "end") if a[k] is not None]
        self.assertEqual(times, sorted(times), a)
        self.assertIsNotNone(a["dispatch"])
        self.assertIsNotNone(a["end"])

    def test_a_status_retried_elsewhere_shows_both_tries(self):
        _, p1 = self.start_llmsim("r1", args=FAST + ["--fault", "status@0:503:600"])
        _, p2 = self.start_llmsim("r2", args=FAST)
        port = self.gateway([backend("r1", p1, 1000), backend("r2", p2, 1)])
        status = post_json(port, CHAT, harness.chat_body())[0]
        self.assertEqual(status, 200)
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["status"], e["backend"], e["attempt_count"], e["error"]),
                         (200, "r2", 2, "http_503"))
        first, retry = e["attempts"]
        self.assertEqual((first["backend"], first["kind"], first["status"], first["failure"]),
                         ("r1", "first", 503, "http_503"))
        self.assertEqual((retry["backend"], retry["kind"], retry["status"], retry["failure"]),
                         ("r2", "retry", 200, None))
        for a in e["attempts"]:
            self.assert_times_in_order(a)
        self.assertIsNone(first["first_token"])
        self.assertLessEqual(first["end"], retry["dispatch"])
        # the request's own times are its last try's
        self.assertEqual(e["ttfb"], retry["first_byte"])
        self.assertLessEqual(retry["first_token"], e["total"])

    def test_retry_on_lists_the_failures_retried(self):
        # a refused connection is retried; a 503 is not in the list: the client gets it
        _, p1 = self.start_llmsim("r1", args=FAST + ["--fault", "status@0:503:600"])
        _, p2 = self.start_llmsim("r2", args=FAST)
        port = self.gateway([backend("gone", self.refusing_port(), 1000), backend("r1", p1, 100),
                             backend("r2", p2, 1)],
                            retry={"attempts": 3, "on": ["connect_refused"]})
        status, _, _, body = post_json(port, CHAT, harness.chat_body())
        self.assertEqual(status, 503, body)
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["status"], e["backend"], e["attempt_count"]), (503, "r1", 2))
        self.assertEqual([(a["backend"], a["kind"], a["status"], a["failure"])
                          for a in e["attempts"]],
                         [("gone", "first", None, "connect_refused"),
                          ("r1", "retry", 503, None)])
        self.assertIsNone(e["attempts"][0]["first_byte"])
        self.assertEqual(sim_state(p2)["requests"], 0)

    def test_a_hedge_shows_the_loser_and_the_winner(self):
        _, p1 = self.start_llmsim("r1", args=FAST + ["--fault", "stall-first:1:30"])
        _, p2 = self.start_llmsim("r2", args=FAST)
        port = self.gateway([backend("r1", p1, 1000), backend("r2", p2, 1)],
                            hedge={"enabled": True, "min": "200ms", "budget_ratio": 1,
                                   "budget_min": 0})
        s = self.stream(port, "POST", CHAT, harness.chat_body(stream=True)).read_all(10)
        self.assertEqual((s.status, s.ended), (200, "complete"))
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["backend"], e["hedge_winner"], e["attempt_count"]), ("r2", "hedge", 2))
        first, hedge = e["attempts"]
        self.assertEqual((first["backend"], first["kind"], first["failure"], first["first_token"]),
                         ("r1", "first", "hedge_lost", None))
        self.assertEqual((hedge["backend"], hedge["kind"], hedge["failure"]),
                         ("r2", "hedge", None))
        self.assertGreaterEqual(hedge["dispatch"], first["dispatch"] + 150)  # at the deadline
        self.assertIsNotNone(hedge["first_token"])
        self.assertLessEqual(first["end"], hedge["end"])

    def test_a_parked_connection_keeps_no_attempt(self):
        """An idle keep-alive connection is parked without its request's
        memory (at once after its first request, after a second idle after
        later ones): what the request's attempts held (the duplicate that won,
        which hedge.c owns, the list of ended tries, the tried set, the picks'
        explanations) was released before, and each request on the connection
        has tries of its own (under a sanitizer: nothing leaks or dangles)."""
        _, p1 = self.start_llmsim("r1", args=FAST + ["--fault", "stall-first:1:30"])
        _, p2 = self.start_llmsim("r2", args=FAST)
        port = self.gateway([backend("r1", p1, 1000), backend("r2", p2, 1)],
                            hedge={"enabled": True, "min": "200ms", "budget_ratio": 1,
                                   "budget_min": 0})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.addCleanup(conn.close)
        body = json.dumps(harness.chat_body(stream=True))
        where = None
        for i in range(3):
            if i == 2:
                time.sleep(1.5)  # the idleness under test, not a wait for an event
            conn.request("POST", CHAT, body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            self.assertEqual(r.status, 200, data)
            self.assertIn(b"[DONE]", data)
            self.assertIn(r.getheader("x-llmsim-replica"), ("r2", None))
            if where is None:
                where = conn.sock.getsockname()
            self.assertEqual(conn.sock.getsockname(), where, "a new connection")
        log = read_access_log(self.path("access.log"), 3)
        for e in log:
            self.assertEqual((e["status"], e["backend"], e["hedge_winner"], e["attempt_count"]),
                             (200, "r2", "hedge", 2), e)
            self.assertEqual([(a["backend"], a["kind"], a["failure"]) for a in e["attempts"]],
                             [("r1", "first", "hedge_lost"), ("r2", "hedge", None)])
            # the explanation is the winner's pick's, which skipped the tried r1
            self.assertEqual([c["backend"] for c in e["candidates"]], ["r2"])

    def test_a_continuation_is_a_try_of_its_own(self):
        text = ["--text", "context", "--role-chunk", "--decode-ms", "5"]
        _, p1 = self.start_llmsim("r1", args=text + ["--fault", "close-after-tokens:3"])
        _, p2 = self.start_llmsim("r2", args=text)
        port = self.gateway([backend("r1", p1, 1000), backend("r2", p2, 1)],
                            resume={"models": {"m": "greedy"}})
        body = harness.chat_body(stream=True, max_tokens=8, temperature=0)
        s = self.stream(port, "POST", CHAT, body).read_all(10)
        self.assertEqual((s.status, s.ended), (200, "complete"))
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["resumed"], e["attempt_count"], e["error"]), (1, 2, None))
        first, cont = e["attempts"]
        self.assertEqual((first["backend"], first["kind"], first["status"], first["failure"]),
                         ("r1", "first", 200, "upstream_closed_mid_response"))
        self.assertEqual((cont["backend"], cont["kind"], cont["status"], cont["failure"]),
                         ("r2", "continuation", 200, None))
        # the client's first byte and token were the first try's
        self.assertEqual(e["ttfb"], first["first_byte"])
        self.assertEqual(e["ttft"], first["first_token"])
        self.assertGreater(cont["first_token"], first["end"])

    def test_a_request_without_a_backend_has_no_try(self):
        port = self.gateway([backend("gone", self.refusing_port(), 1)])
        status = post_json(port, CHAT, harness.chat_body(model="other"))[0]
        self.assertEqual(status, 404)
        (e,) = read_access_log(self.path("access.log"), 1)
        self.assertEqual((e["attempt_count"], e["attempts"]), (0, []))


if __name__ == "__main__":
    harness.main()
