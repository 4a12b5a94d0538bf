"""Agent clients: the Responses API (previous_response_id follows the replica
that made the answer), Anthropic's Messages API and count_tokens, through
their official npm clients; sessions named by headers stay on their replica
unless it is overloaded."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import unittest

import harness
from harness import Harness, post_json, read_access_log, scrape

NODE_DIR = os.path.join(harness.SRC, "tests", "node")
FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


class AgentApisTest(Harness):

    def fleet(self, n=3, args=FAST):
        self.ports = {}
        for i in range(n):
            _, port = self.start_llmsim("r%d" % (i + 1), args=args)
            self.ports["r%d" % (i + 1)] = port
        return [{"name": name, "url": "http://127.0.0.1:%d" % port, "models": ["m"]}
                for name, port in self.ports.items()]

    def gateway(self, backends, routing=None, **extra):
        # round robin: without the follow-up rule every turn would land elsewhere
        conf = self.base_config(backends, admin="127.0.0.1:0",
                                access_log={"path": self.path("access.log"), "flush": 0},
                                health={"interval": "1h", "scrape_interval": 0,
                                        "slow_start": 0},
                                routing=routing or {"policy": "round_robin"}, **extra)
        self.conf = conf
        self.gw, self.port = self.start_gateway(conf)
        self.admin = int(self.gw.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))

    def log(self, n=None):
        return read_access_log(self.path("access.log"), n)

    def respond(self, prev=None, stream=False):
        body = {"model": "m", "input": "hello", "max_output_tokens": 3}
        if prev:
            body["previous_response_id"] = prev
        return post_json(self.port, "/v1/responses", body)

    @unittest.skipUnless(shutil.which("node"), "node is not installed")
    def test_official_clients(self):
        self.gateway(self.fleet())
        if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")):
            self.fail("the openai npm package is missing: run `npm install` in tests/node")
        turns = 6
        out = subprocess.run(["node", os.path.join(NODE_DIR, "agent_apis.mjs"),
                              "http://127.0.0.1:%d" % self.port, "m", str(turns)],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        chain = res["chain"]
        self.assertEqual([t["ok"] for t in chain], [True] * turns, chain)
        for i, t in enumerate(chain):
            self.assertTrue(t["text"], t)
            self.assertTrue(t["id"].startswith("resp_"), t)
            self.assertEqual(t["usage"]["output_tokens"], 4 + i, t)
            if t["stream"]:
                self.assertEqual(t["created_id"], t["id"])
                self.assertEqual(t["deltas"], 4 + i)
        # the engine's own answer to an id the gateway never saw (routed as usual)
        self.assertEqual(res["unknown"], {"ok": False, "status": 404})

        # every request's line (two workers: sorted by their start)
        every = sorted(self.log(turns + 1 + (3 if res["anthropic"] else 0)),
                       key=lambda r: r["ts"])
        recs = [r for r in every if r["path"] == "/v1/responses"]
        self.assertEqual(len(recs), turns + 1)
        chain_recs = recs[:turns]
        # every turn where the first was made, though the policy is round robin
        self.assertEqual(len({r["backend"] for r in chain_recs}), 1, chain_recs)
        self.assertEqual([r["reason"] for r in chain_recs],
                         ["next_in_turn"] + ["previous_response_owner"] * (turns - 1))
        for i, r in enumerate(chain_recs):
            self.assertEqual(r["status"], 200)
            self.assertEqual(r["tokens"], 4 + i, r)
            self.assertEqual(r["stream"], i % 2 == 1)
            self.assertIsNotNone(r["ttft"])
        self.assertEqual(recs[turns]["status"], 404)

        samples = scrape(self.admin)
        self.assertEqual(harness.metric(samples, "llmgate_requests_total", route="responses",
                                        code="200"), turns)

        a = res["anthropic"]
        if a is None:
            return  # test_anthropic_sdk_installed says so
        self.assertTrue(a["plain"]["text"])
        self.assertEqual(a["plain"]["usage"]["output_tokens"], 5)
        self.assertEqual(a["plain"]["stop_reason"], "max_tokens")
        self.assertEqual((a["stream"]["deltas"], a["stream"]["output_tokens"]), (7, 7))
        self.assertTrue(a["stream"]["stopped"])
        self.assertEqual(a["count"], len("count these words please") // 4)
        msgs = [r for r in every if r["path"].startswith("/v1/messages")]
        self.assertEqual([r["path"] for r in msgs],
                         ["/v1/messages", "/v1/messages", "/v1/messages/count_tokens"])
        self.assertEqual([r["status"] for r in msgs], [200, 200, 200])
        self.assertEqual(msgs[1]["tokens"], 7)      # message_delta's usage.output_tokens
        self.assertTrue(msgs[1]["stream"])
        self.assertIsNotNone(msgs[1]["ttft"])
        self.assertLess(msgs[1]["ttft"], msgs[1]["total"])  # the first delta, not the end
        self.assertEqual(harness.metric(samples, "llmgate_requests_total", route="messages",
                                        code="200"), 3)

    def test_anthropic_sdk_installed(self):
        # test_official_clients drives Anthropic's SDK only where it is installed
        if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "@anthropic-ai", "sdk")):
            self.skipTest("@anthropic-ai/sdk is not installed in tests/node (npm install there): "
                          "the Messages API went untested by its official client")

    def test_follow_up_when_its_replica_is_gone(self):
        backends = self.fleet()
        self.gateway(backends)
        status, hdrs, obj, _ = self.respond()
        self.assertEqual(status, 200)
        rid, home = obj["id"], hdrs["x-llmsim-replica"]
        for _ in range(3):
            status, hdrs, _, _ = self.respond(rid)
            self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, home))

        # drained: a clear 409, never another replica (which would not know the answer)
        status, _, _, _ = post_json(self.admin, "/admin/backends/%s/drain" % home, {})
        self.assertEqual(status, 200)
        status, _, obj, _ = self.respond(rid)
        self.assertEqual(status, 409, obj)
        self.assertEqual(obj["error"]["code"], "previous_response_backend_unavailable")
        self.assertEqual(obj["error"]["param"], "previous_response_id")
        self.assertIn(home, obj["error"]["message"])
        # a new conversation still goes elsewhere
        status, hdrs, _, _ = self.respond()
        self.assertEqual(status, 200)
        self.assertNotEqual(hdrs["x-llmsim-replica"], home)
        post_json(self.admin, "/admin/backends/%s/undrain" % home, {})
        status, hdrs, _, _ = self.respond(rid)
        self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, home))

        # removed by a reload: 404
        self.conf["backends"] = [b for b in backends if b["name"] != home]
        self.write_config(self.conf, "llmgate.json")
        mark = len(self.gw.lines)
        self.gw.signal(signal.SIGHUP)
        self.gw.wait_for(r"configuration reloaded", start=mark)
        status, _, obj, _ = self.respond(rid)
        self.assertEqual(status, 404, obj)
        self.assertEqual(obj["error"]["code"], "previous_response_not_found")

        # a streamed answer's id is learnt from its response.created event
        s = self.stream(self.port, "POST", "/v1/responses",
                        json.dumps({"model": "m", "input": "hi", "stream": True,
                                    "max_output_tokens": 3}).encode())
        s.read_all(30)
        created = json.loads(s.events[0][1])
        self.assertEqual(created["type"], "response.created")
        shome = s.headers["x-llmsim-replica"]
        for _ in range(3):
            status, hdrs, _, _ = self.respond(created["response"]["id"])
            self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, shome))

    def test_follow_up_waits_for_its_replica(self):
        # one request at a time per replica: a follow-up whose replica is busy waits in the
        # admission queue for that one, though the others are free
        backends = self.fleet(3)
        for b in backends:
            b["max_inflight"] = 1
        self.gateway(backends)
        status, hdrs, obj, _ = self.respond()
        self.assertEqual(status, 200)
        rid, home = obj["id"], hdrs["x-llmsim-replica"]
        long = self.stream(self.port, "POST", "/v1/responses",
                           json.dumps({"model": "m", "input": "go on", "stream": True,
                                       "max_output_tokens": 150,
                                       "previous_response_id": rid}).encode())
        self.assertEqual(long.read_head(10), 200)
        self.assertEqual(long.headers["x-llmsim-replica"], home)
        status, hdrs, _, _ = self.respond(rid)
        self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, home))
        long.read_all(30)
        self.assertEqual(long.ended, "complete")
        recs = sorted(self.log(3), key=lambda r: r["ts"])
        self.assertEqual([r["reason"] for r in recs[1:]], ["previous_response_owner"] * 2)
        # it waited for the stream's end: its queueing shows it
        self.assertGreater(recs[2]["queue"], 100)

    def test_anthropic_key_header(self):
        # Anthropic's clients present their key as x-api-key: KEY
        key = "sk-agent-key"
        keys = self.path("keys.json")
        with open(keys, "w") as f:
            json.dump({"keys": [{"name": "agents", "models": "*",
                                 "sha256": hashlib.sha256(key.encode()).hexdigest()}]}, f)
        self.gateway(self.fleet(1), auth={"keys_file": keys})
        body = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
        status, _, obj, _ = post_json(self.port, "/v1/messages", body,
                                      headers={"x-api-key": key})
        self.assertEqual(status, 200, obj)
        self.assertEqual(obj["usage"]["output_tokens"], 3)
        status, _, obj, _ = post_json(self.port, "/v1/messages", body,
                                      headers={"x-api-key": key + "x"})
        self.assertEqual((status, obj["error"]["code"]), (401, "invalid_api_key"))
        status, _, obj, _ = post_json(self.port, "/v1/messages", body)
        self.assertEqual(status, 401)
        self.assertIn("x-api-key", obj["error"]["message"])
        # (two workers: their lines may come in either order)
        self.assertEqual([r["key"] for r in self.log(3) if r["status"] == 200], ["agents"])

    def test_session_headers(self):
        self.gateway(self.fleet(), routing={
            "policy": "least_request",
            "session_headers": ["x-session-affinity", "session-id"],
            "options": {"session_affinity": {"slots": 1, "slack": 0, "bound": 1}}})
        where = {}
        names = ["x-session-affinity", "session-id"]
        for turn in range(4):
            for s in range(8):
                status, hdrs, _, _ = post_json(
                    self.port, "/v1/chat/completions", harness.chat_body(max_tokens=2),
                    headers={names[s % 2]: "session-%d" % s})
                self.assertEqual(status, 200)
                where.setdefault(s, set()).add(hdrs["x-llmsim-replica"])
        for s, replicas in where.items():
            self.assertEqual(len(replicas), 1, "session %d moved: %s" % (s, replicas))
        self.assertGreaterEqual(len(set().union(*where.values())), 2)
        recs = sorted(self.log(32), key=lambda r: r["ts"])
        self.assertEqual(recs[-1]["policy"], "session_affinity+least_request")
        self.assertEqual({r["reason"] for r in recs}, {"session_owner"})

        # one session's burst: its replica is over the bound, the rest go elsewhere
        home = where[0].pop()
        body = json.dumps(harness.chat_body(stream=True, max_tokens=150)).encode()
        streams = [self.stream(self.port, "POST", "/v1/chat/completions", body,
                               headers={"x-session-affinity": "session-0"}) for _ in range(6)]
        for s in streams:
            self.assertEqual(s.read_head(10), 200)
        got = [s.headers["x-llmsim-replica"] for s in streams]
        harness.read_concurrently(streams, 60)
        self.assertGreaterEqual(len(set(got)), 2, got)
        self.assertIn(home, got)
        reasons = {r["reason"] for r in sorted(self.log(38), key=lambda r: r["ts"])[32:]}
        self.assertIn("session_owner_overflow", reasons)
        # the burst over, its turns are back home
        status, hdrs, _, _ = post_json(self.port, "/v1/chat/completions",
                                       harness.chat_body(max_tokens=2),
                                       headers={"x-session-affinity": "session-0"})
        self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, home))


if __name__ == "__main__":
    harness.main()
