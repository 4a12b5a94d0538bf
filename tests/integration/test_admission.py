"""Admission control: with every backend at max_inflight, requests wait in a
queue bounded in length (limits.queue_length, per model) and time
(timeouts.queue); past either bound they get 429 or 503 with a Retry-After
from the observed drain rate. Never an unbounded pile-up.
"""

import datetime
import json
import os
import socket
import threading
import time

import harness
from harness import Harness, chat_body, http_request, metric, post_json, scrape, wait_until

SLOW = ["--slots", "1", "--decode-ms", "20", "--decode-ms-per-seq", "0",
        "--prefill-us-per-token", "10"]
FAST = ["--slots", "1", "--decode-ms", "1", "--decode-ms-per-seq", "0",
        "--prefill-us-per-token", "1"]


sim_state = harness.sim_state


read_log = harness.read_access_log


class Async:
    """A request run in a thread; .result is (status, headers, body, t_done)."""

    def __init__(self, port, body, timeout=60):
        self.result = None
        self.t = threading.Thread(target=self._run, args=(port, body, timeout), daemon=True)
        self.t.start()

    def _run(self, port, body, timeout):
        try:
            status, hdrs, data = http_request(port, "POST", "/v1/chat/completions", body,
                                              timeout=timeout)
            self.result = (status, hdrs, data, time.monotonic())
        except OSError as e:
            self.result = (None, {}, repr(e).encode(), time.monotonic())

    def wait(self, timeout=60):
        self.t.join(timeout)
        assert self.result is not None, "request still running"
        return self.result


class AdmissionTest(Harness):

    def gateway(self, sims, queue_length=2, queue="10s", workers=2, max_inflight=1, **extra):
        backends = [{"name": "r%d" % i, "url": "http://127.0.0.1:%d" % p, "models": ["m"],
                     "max_inflight": max_inflight} for i, p in enumerate(sims)]
        conf = self.base_config(backends, workers=workers, access_log=self.path("access.log"),
                                limits={"queue_length": queue_length},
                                timeouts={"queue": queue}, admin="127.0.0.1:0", **extra)
        proc, port = self.start_gateway(conf)
        self.admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return proc, port

    def await_queued(self, n):
        """Until the gateway's queue holds n requests (its llmgate_queue_waiting gauge)."""
        wait_until(lambda: metric(scrape(self.admin), "llmgate_queue_waiting") == n,
                   what="%d requests queued" % n)

    def hold_slot(self, gw, tokens=100):
        """A stream that keeps the only slot busy until it is read to the end."""
        s = self.stream(gw, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=tokens))
        self.assertEqual(s.read_head(), 200)
        return s

    def test_requests_wait_then_run_in_order(self):
        _, sim = self.start_llmsim("r1", args=SLOW)
        gwp, gw = self.gateway([sim], queue_length=2, log_level="debug")
        hold = self.hold_slot(gw, tokens=40)
        # the second is sent once the gateway has queued the first (its debug line)
        a = Async(gw, chat_body(max_tokens=2, content="first"))
        gwp.wait_for(r'queued for model "m" behind 0')
        b = Async(gw, chat_body(max_tokens=2, content="second"))
        gwp.wait_for(r'queued for model "m" behind 1')
        # the queue (2) is full: the next one is refused at once
        t0 = time.monotonic()
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 429, obj)
        self.assertEqual(obj["error"]["code"], "queue_full")
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        self.assertLess(time.monotonic() - t0, 1.0 * harness.SLOW)
        # the replica only ever had one request at a time
        self.assertEqual(sim_state(sim)["running"] + sim_state(sim)["waiting"], 1)
        hold.read_all()
        ra, rb = a.wait(), b.wait()
        self.assertEqual((ra[0], rb[0]), (200, 200))
        log = read_log(self.path("access.log"), 4)
        queued = [r for r in log if r["status"] == 200 and not r["stream"]]
        self.assertEqual(len(queued), 2)
        self.assertTrue(all(r["queue"] > 100 for r in queued), queued)
        # the gateway dispatched them in the order they came (arrival + read +
        # queue), told apart by prompt size ("first" is a byte shorter than
        # "second"). The clients' own clocks could not say: a busy machine
        # may wake the first waiter's thread after the second's answer came.
        def dispatched(r):
            t = datetime.datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).timestamp()
            return t * 1000 + r["read"] + r["queue"]
        order = [r["prompt_bytes"] for r in sorted(queued, key=dispatched)]
        self.assertLess(order[0], order[1], "the second waiter ran before the first: %s" % queued)

    def test_deadline_gives_503_with_retry_after(self):
        _, sim = self.start_llmsim("r1", args=SLOW)
        _, gw = self.gateway([sim], queue_length=4, queue="500ms")
        self.hold_slot(gw, tokens=200)
        t0 = time.monotonic()
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body())
        waited = time.monotonic() - t0
        self.assertEqual(status, 503, obj)
        self.assertEqual(obj["error"]["code"], "queue_timeout")
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        self.assertGreater(waited, 0.45)
        self.assertLess(waited, 3.0 * harness.SLOW)
        self.assertEqual(sim_state(sim)["requests"], 1)

    def test_retry_after_follows_the_drain_rate(self):
        _, sim = self.start_llmsim("r1", args=FAST)
        _, gw = self.gateway([sim], queue_length=3, queue="30s", workers=1)
        # nothing drained yet: the full queue advises the whole queue timeout
        hold = self.hold_slot(gw, tokens=20000)
        waiters = [Async(gw, chat_body(max_tokens=1)) for _ in range(3)]
        self.await_queued(3)
        status, hdrs, _, _ = post_json(gw, "/v1/chat/completions", chat_body())
        self.assertEqual((status, hdrs["retry-after"]), (429, "30"))
        hold.close()
        for w in waiters:
            self.assertEqual(w.wait()[0], 200)
        # now drain short requests through the single slot for a few seconds...
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < 3.2:
            status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1))
            self.assertEqual(status, 200)
            n += 1
        rate = n / (time.monotonic() - t0)
        self.assertGreater(rate, 2.0)
        hold = self.hold_slot(gw, tokens=20000)
        waiters = [Async(gw, chat_body(max_tokens=1)) for _ in range(3)]
        self.await_queued(3)
        status, hdrs, _, _ = post_json(gw, "/v1/chat/completions", chat_body())
        # ... so the 4 requests ahead drain in about 4 / rate seconds, not 30
        self.assertEqual(status, 429)
        self.assertLessEqual(int(hdrs["retry-after"]), max(2, int(4 / rate) + 2))
        hold.close()
        for w in waiters:
            self.assertEqual(w.wait()[0], 200)

    def test_client_leaving_the_queue_frees_its_place(self):
        _, sim = self.start_llmsim("r1", args=SLOW)
        _, gw = self.gateway([sim], queue_length=1, workers=1)
        hold = self.hold_slot(gw, tokens=60)
        payload = json.dumps(chat_body(max_tokens=2)).encode()
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", gw), timeout=5)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
            self.await_queued(1)
            s.close()  # and gone
            self.await_queued(0)
        # the place is free again: this one waits instead of getting 429
        w = Async(gw, chat_body(max_tokens=2))
        hold.read_all()
        self.assertEqual(w.wait()[0], 200)
        self.assertEqual(sim_state(sim)["requests"], 2)  # the leavers never reached it

    def test_retry_waits_for_a_full_backend(self):
        # "busy" answers 429 to everything (no Retry-After), "good" has one
        # slot, taken. The request goes to busy (the only one with room),
        # and its retry waits in the queue for good instead of failing.
        _, busy = self.start_llmsim("busy", args=SLOW + ["--fault", "status@0:429:600:0"])
        _, good = self.start_llmsim("good", args=SLOW)
        backends = [{"name": "busy", "url": "http://127.0.0.1:%d" % busy, "models": ["m"]},
                    {"name": "good", "url": "http://127.0.0.1:%d" % good, "models": ["m"],
                     "max_inflight": 1}]
        conf = self.base_config(backends, workers=1, access_log=self.path("access.log"),
                                health={"eject_consecutive": 0}, admin="127.0.0.1:0")
        gwp, gw = self.start_gateway(conf)
        self.admin = int(gwp.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        hold = None
        while hold is None:  # round robin: the hold must land on good
            s = self.stream(gw, "POST", "/v1/chat/completions",
                            chat_body(stream=True, max_tokens=30))
            if s.read_head() == 200:
                hold = s
            else:
                s.read_all()
        w = Async(gw, chat_body(max_tokens=2))
        self.await_queued(1)  # its retry waits for good
        hold.read_all()
        status, hdrs, _, _ = w.wait()
        self.assertEqual((status, hdrs.get("x-llmsim-replica")), (200, "good"))
        log = read_log(self.path("access.log"), 2)
        last = [r for r in log if not r["stream"]][0]
        self.assertEqual(last["attempt_count"], 2)
        self.assertGreater(last["queue"], 100)

    def test_flood_is_bounded(self):
        sims = []
        for i in range(2):
            _, p = self.start_llmsim("r%d" % i, args=SLOW)
            sims.append(p)
        _, gw = self.gateway(sims, queue_length=3)
        reqs = [Async(gw, chat_body(max_tokens=10)) for _ in range(30)]
        peak = 0
        t_end = time.monotonic() + 1.0
        while time.monotonic() < t_end:
            peak = max(peak, sum(sim_state(p)["running"] + sim_state(p)["waiting"]
                                 for p in sims))
        results = [r.wait()[0] for r in reqs]
        # max_inflight 1 on each of 2 (a replica may still count a sequence
        # whose last bytes the gateway has just relayed: allow one each)
        self.assertLessEqual(peak, 4)
        ok, refused = results.count(200), results.count(429)
        self.assertEqual(ok + refused, 30, results)
        self.assertGreaterEqual(ok, 2 + 3)   # those in flight and those queued
        self.assertGreater(refused, 10)     # the rest refused at once, not piled up


if __name__ == "__main__":
    harness.main()
