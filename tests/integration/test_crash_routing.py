"""A replica that crashes (every connection reset, new ones refused) and
comes back, under the ttft policy with passive detection only (no active
checks): the reset holds it off at once and the first connect after is
refused and ejects it, so no request pays more than one connect attempt on
it before going elsewhere, and the fleet pays one or two in all; restarted
on its port, it is back after its ejection's back-off and takes a share
that ramps up over health.slow_start; where the back-off is long, it is
back as soon as its metrics answer again (a scrape), not when the back-off
runs out.
"""

import socket
import threading
import time

import harness
from harness import Harness, StreamReader, chat_body, post_json, wait_until

FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


def chat(port, max_tokens=4):
    status, hdrs, _, _ = post_json(port, "/v1/chat/completions",
                                   chat_body(max_tokens=max_tokens))
    return status, hdrs.get("x-llmsim-replica")


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return False
    except ConnectionRefusedError:
        return True


class CrashRoutingTest(Harness):

    def test_crash_one_connect_then_slow_start_on_return(self):
        ports = {}
        for n in ("r1", "r2", "r3"):
            _, ports[n] = self.start_llmsim(n, args=FAST)
        conf = self.base_config(
            [{"name": n, "url": "http://127.0.0.1:%d" % p, "models": ["m"]}
             for n, p in ports.items()],
            workers=2, routing={"policy": "ttft"},
            access_log={"path": self.path("access.log"), "flush": 0},
            health={"interval": "1h", "scrape_interval": "100ms", "eject_base": "1s",
                    "eject_max": "1s", "slow_start": "3s"})
        gp, gw = self.start_gateway(conf)
        for _ in range(30):
            self.assertEqual(chat(gw)[0], 200)
        # streams on every replica, then r1 crashes under its own
        streams = [StreamReader(gw, chat_body(stream=True, max_tokens=2000)) for _ in range(6)]
        self.addCleanup(lambda: [s.close() for s in streams])
        for s in streams:
            s.read_until(b"data:")
        self.assertEqual(post_json(ports["r1"], "/sim/control",
                                   {"fault": "crash@0.05:reset"})[0], 200)

        wait_until(lambda: refused(ports["r1"]), what="r1's crash")
        t_crash = time.monotonic()
        before = len(harness.read_access_log(self.path("access.log")))
        # traffic through the crash, from two clients
        results = []

        def client():
            while time.monotonic() - t_crash < 2.0:
                results.append(chat(gw))

        ts = [threading.Thread(target=client) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertTrue(results and all(st == 200 for st, _ in results), results)
        self.assertNotIn("r1", [r for _, r in results])
        log = harness.read_access_log(self.path("access.log"))[before:]
        on_r1 = [[a for a in e["attempts"] if a["backend"] == "r1"] for e in log
                 if e["path"] == "/v1/chat/completions" and not e["stream"]]
        self.assertTrue(all(len(a) <= 1 for a in on_r1), on_r1)
        connects = sum(len(a) for a in on_r1)
        self.assertLessEqual(connects, 2, "requests tried the dead replica %d times" % connects)
        # back on its port: the half-open probe succeeds after the back-off,
        # then a slow start
        self.start_llmsim("r1", args=FAST + ["--listen", "127.0.0.1:%d" % ports["r1"]])
        t0 = time.monotonic()
        while not any("backend r1 is back after ejection" in ln for ln in gp.lines):
            self.assertEqual(chat(gw)[0], 200)
            self.assertLess(time.monotonic() - t0, 15, "r1 never came back")
        t1 = time.monotonic()
        where = []

        def client2():
            while time.monotonic() - t1 < 4.0:
                where.append((time.monotonic() - t1, chat(gw)[1]))

        ts = [threading.Thread(target=client2) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        early = [r for t, r in where if t < 0.75]
        late = [r for t, r in where if t > 3.2]
        self.assertGreaterEqual(min(len(early), len(late)), 6, where)
        self.assertLess(early.count("r1") / len(early), 0.3, where)
        self.assertGreater(late.count("r1"), 0, where)
        ramps = [c["ramp"] for e in harness.read_access_log(self.path("access.log"))
                 for c in e.get("candidates", []) if c["backend"] == "r1" and "ramp" in c]
        self.assertTrue(ramps and min(ramps) < 0.5, "no slow start in the access log")

    def test_back_when_it_answers_not_when_the_back_off_ends(self):
        self.back_when_it_answers({"policy": "ttft"})

    def test_back_when_idle_replicas_are_predicted_alike(self):
        """With model_floor both idle replicas cost the engine model's guess
        alike; the returning one's slow start must not make it lose every
        pick: within the tolerance its half-open probe ties with the soonest."""
        self.back_when_it_answers({"policy": "ttft", "options": {"ttft": {"model_floor": 1}}})

    def back_when_it_answers(self, routing):
        ports = {}
        for n in ("r1", "r2"):
            _, ports[n] = self.start_llmsim(n, args=FAST)
        conf = self.base_config(
            [{"name": n, "url": "http://127.0.0.1:%d" % p, "models": ["m"]}
             for n, p in ports.items()],
            workers=1, routing=routing,
            health={"interval": "1h", "scrape_interval": "100ms", "eject_base": "60s",
                    "eject_max": "60s", "slow_start": "1s"})
        gp, gw = self.start_gateway(conf)
        for _ in range(10):
            self.assertEqual(chat(gw)[0], 200)
        self.assertEqual(post_json(ports["r1"], "/sim/control",
                                   {"fault": "crash@0.05:reset"})[0], 200)
        wait_until(lambda: refused(ports["r1"]), what="r1's crash")
        t0 = time.monotonic()
        while not any("backend r1 ejected" in ln for ln in gp.lines):
            self.assertEqual(chat(gw)[0], 200)
            self.assertLess(time.monotonic() - t0, 10, "r1 never ejected")
        self.start_llmsim("r1", args=FAST + ["--listen", "127.0.0.1:%d" % ports["r1"]])
        t1 = time.monotonic()
        while not any("backend r1 is back after ejection" in ln for ln in gp.lines):
            self.assertEqual(chat(gw)[0], 200)
            self.assertLess(time.monotonic() - t1, 10, "r1 not back within 10 s of 60")
        self.assertTrue(any("backend r1 answers again" in ln for ln in gp.lines))


if __name__ == "__main__":
    harness.main()
