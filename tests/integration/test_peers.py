"""Gateways in front of one fleet telling each other their requests
(config "peers", GET /admin/peers): a held request is answered at the
first news, one gateway's streams reach the other's engine model request by
request, a gateway skips itself in a shared peers list, a silent peer counts
as unknown load again, and a peer address without a host is refused at load
time.

One llmsim replica with slow steps keeps streams running; gateway A carries
them, gateway B (A as its peer) and gateway C (no peers) each route one
request and explain what they saw in their access logs.
"""

import json
import threading
import time

import harness
from harness import (Harness, StreamReader, chat_body, free_port, http_request, post_json,
                     sim_state, wait_until)

SLOW = ["--slots", "8", "--decode-ms", "50", "--decode-ms-per-seq", "0"]


class PeersTest(Harness):

    def gateway(self, name, port, admin=None, peers=None):
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            workers=2, routing={"policy": "ttft"},
            access_log={"path": self.path(name + ".log"), "flush": 0},
            health={"interval": "1h", "scrape_interval": "100ms", "peer_interval": "50ms"})
        if admin:
            conf["admin"] = "127.0.0.1:%d" % admin
        if peers:
            conf["peers"] = ["127.0.0.1:%d" % p for p in peers]
        return self.start_gateway(conf, name=name)

    def admin_json(self, port, path):
        status, _, body = http_request(port, "GET", path)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def routed_candidate(self, gw, name):
        """Routes one request through gw; the access log's candidate r1."""
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1))
        self.assertEqual(status, 200)
        rec = harness.read_access_log(self.path(name + ".log"))[-1]
        return rec["candidates"][0]

    def test_peers_share_their_requests(self):
        _, r1 = self.start_llmsim("r1", args=SLOW)
        a_admin, b_admin = free_port(), free_port()
        # one peers list for both, as an operator would write it
        pa, ga = self.gateway("gw-a", r1, a_admin, [a_admin, b_admin])
        pb, gb = self.gateway("gw-b", r1, b_admin, [a_admin, b_admin])
        _, gc = self.gateway("gw-c", r1)
        pa.wait_for(r"peer 127\.0\.0\.1:%d is this gateway" % a_admin)
        pb.wait_for(r"peer 127\.0\.0\.1:%d is this gateway" % b_admin)

        # a request held for news is answered when A sends one, not at its 1 s limit
        quiet = self.admin_json(a_admin, "/admin/peers")
        held = {}

        def hold():
            t0 = time.monotonic()
            held["answer"] = self.admin_json(
                a_admin, "/admin/peers?since=%d&wait=1000" % quiet["changes"])
            held["s"] = time.monotonic() - t0
        waiter = threading.Thread(target=hold)
        waiter.start()
        time.sleep(0.2)  # the request is held by now (a sleep only makes a late send)
        self.assertNotIn("answer", held)
        # three streams through A, each past its first token
        streams = [StreamReader(ga, chat_body(stream=True, max_tokens=400)) for _ in range(3)]
        waiter.join()
        self.assertLess(held["s"], 0.9, held)
        self.assertGreater(held["answer"]["changes"], quiet["changes"])
        self.assertGreaterEqual(held["answer"]["backends"][0]["inflight"], 1)
        for bad in ("since=x", "since=-1", "since=1&wait=+5"):
            status, _, body = http_request(a_admin, "GET", "/admin/peers?" + bad)
            self.assertEqual(status, 400, (bad, body))
        self.addCleanup(lambda: [s.close() for s in streams])
        for s in streams:
            s.read_until(b"data: ")
        wait_until(lambda: sim_state(r1)["running"] == 3, what="three streams on r1")

        # A's answer: every request on r1, started, with its tokens to come
        ans = self.admin_json(a_admin, "/admin/peers")
        self.assertEqual((ans["format"], len(ans["id"])), (1, 16))
        (be,) = ans["backends"]
        self.assertEqual(be["key"], "127.0.0.1:%d" % r1)
        self.assertEqual((be["inflight"], be["complete"], len(be["seqs"])), (3, True, 3), be)
        for started, left, prompt, age in be["seqs"]:
            self.assertEqual((started, age), (1, 0))
            self.assertTrue(0 < left < 400 and prompt > 0, be)

        # B hears of them; its engine model takes them in, request by request
        def b_knows():
            (b,) = self.admin_json(b_admin, "/admin/backends?scores=0")["backends"]
            p = b["peers"]
            return p if p and p["in_flight"] == 3 and p["sequences"] == 3 else None
        p = wait_until(b_knows, what="A's streams in B's /admin/backends")
        self.assertEqual((p["gateways"], p["complete"]), (1, True))
        self.assertLess(p["age_ms"], 2000)  # a quiet peer answers once a second
        # (a scrape folded before B heard of A's last stream counts that one
        # as unknown until the next scrape: slow machines, valgrind)
        cand = wait_until(lambda: (lambda c: c if c.get("running") == 3 and c["foreign"] == 3
                                   and "model_ms" in c else None)(
            self.routed_candidate(gb, "gw-b")), interval=0.3,
            what="the engine model over A's streams, in B")
        self.assertGreater(cand["model_ms"], 0)

        # C, without peers, sees the same three only as counts: the model declines
        # (a scrape that caught C's own short request counts four: polls a
        # few scrapes apart leave the engine with A's three alone in between)
        cand = wait_until(lambda: (lambda c: c if c.get("running") == 3 and c.get("waiting") == 0
                                   else None)(self.routed_candidate(gc, "gw-c")),
                          interval=0.3, what="a scrape with A's streams, through C")
        self.assertEqual(cand["foreign"], 3, cand)
        self.assertNotIn("model_ms", cand)

        # the streams end: B hears of it
        for s in streams:
            s.close()
        wait_until(lambda: self.admin_json(b_admin, "/admin/backends?scores=0")
                   ["backends"][0]["peers"]["in_flight"] == 0, what="A's streams gone, in B")

        # A stops: B's held request fails, and A's requests are unknown load
        # again at once (a clean stop: sanitizers and valgrind check A's exit)
        self.assertEqual(pa.stop(), 0)
        wait_until(lambda: self.admin_json(b_admin, "/admin/backends?scores=0")
                   ["backends"][0]["peers"] is None, timeout=5, what="A's answer gone stale")
        pb.wait_for(r"peer 127\.0\.0\.1:%d: /admin/peers failed" % a_admin)
        status, _, _, _ = post_json(gb, "/v1/chat/completions", chat_body(max_tokens=1))
        self.assertEqual(status, 200)

    def test_bad_peer_address_is_refused(self):
        for peers, want in [(["0.0.0.0:9000"], r"/peers/0/admin: a peer's admin address needs a "
                                                r"host to connect to"),
                            ([{"admin": "127.0.0.1:0"}], r"/peers/0/admin: .*needs its port"),
                            ([{"addr": "127.0.0.1:1"}], r"/peers/0")]:
            conf = self.base_config([{"name": "r1", "url": "http://127.0.0.1:1",
                                      "models": ["m"]}], peers=peers)
            path = self.write_config(conf)
            p = self.start([harness.binary("llmgate"), "-c", path], name="llmgate-bad")
            p.wait_for(r"llmgate\.json:\d+:\d+: error: " + want)
            self.assertEqual(p.wait(), 2)


if __name__ == "__main__":
    harness.main()
