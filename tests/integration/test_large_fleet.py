"""A model served by 200 replicas: more than a 64-bit mask or a 64-slot
candidate list can hold.

The fleet is 200 llmsim processes, started once for the class; each test
starts its own gateway over them (its own weights, drains and faults).

- Every replica takes traffic under round robin, and the status page's data
  (GET /admin/backends) lists all 200 with a score each: none is left out of
  the candidates.
- Retries skip every backend tried, wherever it sits in the route: nine
  replicas past index 63 that answer 503 and weigh 1000 each (round robin
  would pick them again and again) are each tried exactly once per request,
  and the tenth attempt reaches a healthy one.
- A hedge's duplicate goes to another replica than the stalled original,
  past index 63 too.
"""

import json
import threading
import urllib.parse

import harness
from harness import Harness, Proc, binary, chat_body, http_request, post_json, read_access_log

N = 200
FAST = ["--decode-ms", "1", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "1"]
CHAT = "/v1/chat/completions"


def name(i):
    return "r%03d" % i


class LargeFleet(Harness):

    @classmethod
    def setUpClass(cls):
        cls.sims = []
        cls.ports = []
        try:
            # all of them at once, then their ready lines
            for i in range(N):
                cls.sims.append(Proc([binary("llmsim"), "--listen", "127.0.0.1:0", "--name",
                                      name(i), "--model", "m"] + FAST, name="llmsim-" + name(i)))
            for p in cls.sims:
                m = p.wait_for(r"llmsim ready .*listen=[^ ]*:(\d+)", timeout=60)
                cls.ports.append(int(m.group(1)))
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for p in cls.sims:
            p.kill()

    def setUp(self):
        super().setUp()
        self.faulted = []
        self.addCleanup(self.clear_faults)

    def clear_faults(self):
        for i in self.faulted:
            post_json(self.ports[i], "/sim/control", {"clear_faults": True})

    def fault(self, i, spec):
        status, _, _, _ = post_json(self.ports[i], "/sim/control", {"fault": spec})
        self.assertEqual(status, 200)
        self.faulted.append(i)

    def requests_served(self):
        """Each replica's inference requests so far (its /sim/state)."""
        return [harness.sim_state(p)["requests"] for p in self.ports]

    def gateway(self, weights=None, routing=None):
        backends = [{"name": name(i), "url": "http://127.0.0.1:%d" % self.ports[i],
                     "models": ["m"], "weight": (weights or {}).get(i, 1)} for i in range(N)]
        r = {"policy": "round_robin",
             "retry": {"attempts": 10, "budget_ratio": 1, "budget_min": 1000000}}
        r.update(routing or {})
        conf = self.base_config(backends, workers=2, admin="127.0.0.1:0", routing=r,
                                health={"slow_start": 0, "eject_consecutive": 0,
                                        "scrape_interval": "1s"},
                                access_log={"path": self.path("access.log"), "flush": "10ms"})
        proc, port = self.start_gateway(conf)
        self.admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return port

    def drain(self, indices):
        for i in indices:
            status, _, _, _ = post_json(self.admin, "/admin/backends/%s/drain"
                                        % urllib.parse.quote(name(i), safe=""), {})
            self.assertEqual(status, 200)

    def test_every_replica_takes_traffic_and_the_status_page_lists_all(self):
        port = self.gateway()
        before = self.requests_served()
        errors = []
        todo = list(range(2 * N))
        lock = threading.Lock()

        def client():
            while True:
                with lock:
                    if not todo:
                        return
                    todo.pop()
                status, _, _, raw = post_json(port, CHAT, chat_body(max_tokens=1))
                if status != 200:
                    errors.append((status, raw[:200]))

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        served = [a - b for a, b in zip(self.requests_served(), before)]
        idle = [name(i) for i in range(N) if served[i] == 0]
        self.assertEqual(idle, [], "replicas round robin never picked")
        self.assertEqual(sum(served), 2 * N)
        # the status page's data: every backend, up, each with a score
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        self.assertEqual(status, 200)
        doc = json.loads(data)
        self.assertEqual(sorted(b["name"] for b in doc["backends"]),
                         [name(i) for i in range(N)])
        self.assertTrue(all(b["health"] == "up" for b in doc["backends"]))
        (route,) = doc["routing"]
        scored = [c for c in route["candidates"] if "score" in c]
        self.assertEqual(sorted(c["backend"] for c in scored), [name(i) for i in range(N)])
        self.assertFalse([c for c in route["candidates"] if "more" in c])
        status, headers, page = http_request(self.admin, "GET", "/")
        self.assertEqual((status, headers["content-type"].split(";")[0]), (200, "text/html"))

    def test_retries_skip_every_replica_tried_past_index_63(self):
        """Replicas 100..108 answer 503 (no Retry-After hold) and weigh 1000
        each, 109..199 weigh 1 and answer; 0..99 are drained. Round robin
        starts every request on a heavy one; each retry must leave out all
        those tried, so the tenth attempt, the last allowed, is a healthy one."""
        failing = list(range(100, 109))
        port = self.gateway(weights={i: 1000 for i in failing})
        self.drain(range(100))
        for i in failing:
            self.fault(i, "status@0:503:600:0")
        before = self.requests_served()
        n = 12
        for k in range(n):
            status, h, _, raw = post_json(port, CHAT, chat_body(max_tokens=1))
            self.assertEqual(status, 200, "request %d: %r" % (k, raw[:300]))
            self.assertGreaterEqual(int(h["x-llmsim-replica"][1:]), 109)
        served = [a - b for a, b in zip(self.requests_served(), before)]
        self.assertEqual({name(i): served[i] for i in failing}, {name(i): n for i in failing},
                         "each failing replica tried exactly once per request")
        self.assertEqual(sum(served[:100]), 0, "drained replicas got requests")
        self.assertEqual(sum(served[109:]), n)
        log = read_access_log(self.path("access.log"), n)
        self.assertEqual([e["attempt_count"] for e in log], [10] * n)

    def test_hedge_goes_to_another_replica_than_the_stalled_one(self):
        """Replica 120 weighs 1000 and holds every first token 30 s; 0..119 are
        drained. The duplicate must not go to 120 again."""
        port = self.gateway(weights={120: 1000},
                            routing={"hedge": {"enabled": True, "min": "200ms", "max": "200ms",
                                               "budget_ratio": 1, "budget_min": 100}})
        self.drain(range(120))
        self.fault(120, "stall-first:1:30")
        before = self.requests_served()
        for k in range(3):
            s = self.stream(port, "POST", CHAT, chat_body(max_tokens=3, stream=True))
            s.read_all(10 * harness.SLOW)
            self.assertEqual((s.status, s.ended), (200, "complete"))
            self.assertNotEqual(s.headers["x-llmsim-replica"], name(120))
            self.assertLess(s.events[0][0] - s.t_sent, 5 * harness.SLOW,
                            "the duplicate's first token, not the 30 s stall")
        served = [a - b for a, b in zip(self.requests_served(), before)]
        self.assertEqual(served[120], 3, "the stalled replica got a duplicate of its own")
        self.assertEqual(sum(served[121:]), 3)
        log = read_access_log(self.path("access.log"), 3)
        self.assertEqual([(e["hedged"], e["hedge_winner"]) for e in log], [(True, "hedge")] * 3)


if __name__ == "__main__":
    harness.main()
