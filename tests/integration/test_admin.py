"""The admin API: listing backends, draining and undraining one.

Drained: no new request goes to it, the stream running on it finishes,
and it stays drained across a reload that keeps it; undrained: it takes
traffic again. And the warnings an operator gets about risky settings
(an admin listener open without a token among them), from --check-config
and at start. And GET /admin/history, the status page's history: its
token, its points as requests pass, `since`, a reload that would change it,
and turned off.
"""

import json
import re
import signal
import socket
import subprocess
import urllib.parse

import harness
from harness import Harness, chat_body, http_request, post_json, wait_until

FAST = ["--decode-ms", "3", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


class AdminTest(Harness):

    def setUp(self):
        super().setUp()
        backends = []
        for n in ("r1", "r2"):
            _, port = self.start_llmsim(n, args=FAST)
            backends.append({"name": n, "url": "http://127.0.0.1:%d" % port, "models": ["m"]})
        conf = self.base_config(backends, admin="127.0.0.1:0", health={"slow_start": 0})
        self.gw, self.port = self.start_gateway(conf)
        self.admin = int(self.gw.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))

    def backends(self):
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        self.assertEqual(status, 200)
        return {b["name"]: b for b in json.loads(data)["backends"]}

    def action(self, name, what):
        status, _, obj, _ = post_json(self.admin, "/admin/backends/%s/%s"
                                      % (urllib.parse.quote(name, safe=""), what), {})
        return status, obj

    def replicas(self, n=8):
        got = set()
        for _ in range(n):
            status, h, _, _ = post_json(self.port, "/v1/chat/completions", chat_body(max_tokens=2))
            self.assertEqual(status, 200)
            got.add(h["x-llmsim-replica"])
        return got

    def test_list(self):
        b = self.backends()
        self.assertEqual(sorted(b), ["r1", "r2"])
        self.assertEqual(b["r1"]["health"], "up")
        self.assertEqual(b["r1"]["models"], ["m"])
        self.assertEqual(b["r1"]["in_flight"], 0)
        self.replicas(4)
        b = self.backends()
        self.assertEqual(b["r1"]["requests"] + b["r2"]["requests"], 4)
        self.assertEqual(b["r1"]["responses"]["2xx"] + b["r2"]["responses"]["2xx"], 4)

    def test_drain_and_undrain(self):
        stream = self.stream(self.port, "POST", "/v1/chat/completions",
                             chat_body(stream=True, max_tokens=300))
        self.assertEqual(stream.read_head(10), 200)
        self.assertIsNotNone(stream.next_event(10))
        victim = stream.headers["x-llmsim-replica"]
        other = "r2" if victim == "r1" else "r1"
        status, obj = self.action(victim, "drain")
        self.assertEqual((status, obj["health"], obj["in_flight"]), (200, "draining", 1))
        self.assertEqual(self.replicas(), {other})
        stream.read_all(30)
        self.assertEqual(stream.ended, "complete")
        self.assertEqual(stream.events[-1][1], "[DONE]")
        # a reload keeps the backend, and its drained state
        mark = len(self.gw.lines)
        self.gw.signal(signal.SIGHUP)
        self.gw.wait_for(r"configuration reloaded", start=mark)
        self.assertEqual(self.backends()[victim]["health"], "draining")
        self.assertEqual(self.replicas(), {other})
        status, obj = self.action(victim, "undrain")
        self.assertEqual((status, obj["health"]), (200, "up"))
        self.assertEqual(self.replicas(), {"r1", "r2"})
        # draining every backend: 503, not a failure upstream
        self.action("r1", "drain")
        self.action("r2", "drain")
        status, _, obj, _ = post_json(self.port, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 503)
        self.assertEqual(obj["error"]["code"], "no_backend_available")
        # SIGTERM: a clean exit (under ASan: no leak, no error)
        self.gw.signal(signal.SIGTERM)
        self.assertEqual(self.gw.wait(30), 0, self.gw.output()[-3000:])
        self.assertNotIn("Sanitizer", self.gw.output())

    def test_errors(self):
        self.assertEqual(self.action("nope", "drain")[0], 404)
        self.assertEqual(http_request(self.admin, "GET", "/admin/backends/r1/drain")[0], 405)
        self.assertEqual(http_request(self.admin, "GET", "/admin/reload")[0], 405)
        self.assertEqual(http_request(self.admin, "POST", "/admin/backends", body=b"{}")[0], 405)
        self.assertEqual(http_request(self.admin, "GET", "/admin/nothing")[0], 404)
        self.assertEqual(self.action("r1", "explode")[0], 404)
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        self.assertEqual(json.loads(data)["backends"][0]["health"], "up")


class HistoryApiTest(Harness):

    def gateway(self, history, token=None):
        backends = []
        for n in ("r1", "r2"):
            _, port = self.start_llmsim(n, args=FAST)
            backends.append({"name": n, "url": "http://127.0.0.1:%d" % port, "models": ["m"]})
        admin = {"listen": "127.0.0.1:0", "history": history}
        if token:
            admin["token"] = token
        conf = self.base_config(backends, admin=admin)
        gw, port = self.start_gateway(conf)
        return conf, gw, port, int(gw.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))

    def test_points_since_and_token(self):
        conf, gw, port, admin = self.gateway({"resolution": "1s", "window": "10s"}, token="s3cret")
        auth = {"Authorization": "Bearer s3cret"}

        def history(query=""):
            status, _, data = http_request(admin, "GET", "/admin/history" + query, headers=auth)
            self.assertEqual(status, 200, data)
            return json.loads(data)

        self.assertEqual(http_request(admin, "GET", "/admin/history")[0], 401)
        h = history()
        self.assertEqual((h["resolution_s"], h["window_s"], h["capacity"]), (1, 10, 10))
        self.assertEqual([b["name"] for b in h["backends"]], ["r1", "r2"])
        for _ in range(6):
            self.assertEqual(post_json(port, "/v1/chat/completions", chat_body(max_tokens=2))[0],
                             200)
        start = h["next"]
        # the point that covers them, and one more: every request counted once
        h = wait_until(lambda: (lambda x: x if x["next"] >= start + 2 else None)(history()),
                       timeout=10, what="two more points")
        pts = range(len(h["t_ms"]))
        dt = [(h["t_ms"][i] - h["t_ms"][i - 1]) / 1000 if i else None for i in pts]
        ended = sum(b["requests_per_s"][i] * dt[i] for b in h["backends"] for i in pts
                    if b["requests_per_s"][i] is not None)
        self.assertAlmostEqual(ended, 6, delta=0.2)
        self.assertAlmostEqual(sum(h["fleet"]["requests_per_s"][i] * dt[i] for i in pts
                                   if dt[i] is not None), 6, delta=0.2)
        picks = sum(sum(r["counts"]) for r in h["reasons"])
        self.assertEqual(picks, 6, h["reasons"])
        self.assertEqual({r["policy"] for r in h["reasons"]}, {"round_robin"})
        busy = [i for i in pts if h["fleet"]["requests_per_s"][i]]
        for i in busy:
            self.assertAlmostEqual(sum(b["share"][i] for b in h["backends"]), 1, delta=0.01)
            self.assertIsNotNone(h["fleet"]["ttft_p50_ms"][i])
        self.assertEqual(h["backends"][0]["health"][-1], "up")
        self.assertEqual(h["fleet"]["held"][-1], 0)
        self.assertGreaterEqual(h["sample_ms"], 0)
        # since: only what is new (nothing, right after); a count or a 400
        later = history("?since=%d" % h["next"])
        self.assertEqual(later["first"], h["next"])
        self.assertLessEqual(len(later["t_ms"]), 1)
        self.assertEqual(len(later["backends"][0]["requests_per_s"]), len(later["t_ms"]))
        whole = history("?since=0")
        self.assertEqual(whole["first"], max(0, whole["next"] - whole["capacity"]))
        status, _, data = http_request(admin, "GET", "/admin/history?since=x", headers=auth)
        self.assertEqual(status, 400, data)
        self.assertEqual(http_request(admin, "POST", "/admin/history", body=b"{}",
                                      headers=auth)[0], 405)
        # a reload cannot change it (its rings are set up at start)
        conf["admin"]["history"]["window"] = "20s"
        self.write_config(conf)
        status, _, obj, _ = post_json(admin, "/admin/reload", {}, headers=auth)
        self.assertEqual(status, 422, obj)
        self.assertTrue(any("/admin/history: the status page's history cannot change" in e
                            for e in obj["errors"]), obj)

    def test_off(self):
        _, _, _, admin = self.gateway({"window": 0})
        status, _, data = http_request(admin, "GET", "/admin/history")
        self.assertEqual(status, 404)
        self.assertIn("admin.history.window is 0", json.loads(data)["error"]["message"])
        self.assertEqual(http_request(admin, "GET", "/")[0], 200)


class OperatorMessagesTest(Harness):

    def test_risky_settings_warn_in_check_config_and_at_start(self):
        _, port = self.start_llmsim("r1", args=FAST)
        url = "http://127.0.0.1:%d" % port
        conf = self.base_config([{"name": "r1", "url": url, "models": ["m"]},
                                 {"name": "twin", "url": url + "/", "models": ["m"]}],
                                admin="0.0.0.0:0", timeouts={"client_header": "2m"})
        path = self.write_config(conf)
        out = subprocess.run([harness.binary("llmgate"), "--check-config", path],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("configuration is valid (2 backends, 0 discovered through DNS, 1 listen "
                      "addresses, 3 warnings)", out.stdout)
        warnings = out.stderr.splitlines()
        self.assertEqual(len(warnings), 3, out.stderr)
        for w in warnings:
            self.assertRegex(w, r"^%s:\d+:\d+: warning: /" % re.escape(path))
        self.assertRegex(out.stderr, r"warning: /timeouts/client_header: 2m is practically no "
                                     r"timeout: .*slowloris.*; the default is 10s")
        self.assertRegex(out.stderr, r"warning: /admin: the admin listener is on \"0\.0\.0\.0:0\", "
                                     r"not loopback, without a token: .*set admin\.token")
        self.assertRegex(out.stderr, r"warning: /backends/1/url: the same URL as /backends/0 "
                                     r"\(\"r1\"\)")
        # the gateway starts, and says the same in its log
        gwp, gw = self.start_gateway(conf)
        gwp.wait_for(r" warn .*warning: /admin: the admin listener is on")
        self.assertEqual(post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1))[0], 200)
        # the same file made safe: a token, one backend per URL, the default timeouts
        conf["admin"] = {"listen": "0.0.0.0:0", "token": "s3cret"}
        del conf["backends"][1]
        del conf["timeouts"]
        self.write_config(conf)
        out = subprocess.run([harness.binary("llmgate"), "--check-config", path],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual((out.returncode, out.stderr), (0, ""))
        self.assertIn("0 warnings)", out.stdout)

    def test_a_taken_port_says_what_to_do(self):
        """A port another process holds (without SO_REUSEPORT): the start fails (exit 1)
        with the reason and what to do, for the listen address and the admin one."""
        held = socket.socket()
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        self.addCleanup(held.close)
        port = held.getsockname()[1]
        for key, conf in (("\"listen\"", self.base_config([], listen="127.0.0.1:%d" % port)),
                          ("\"admin\"", self.base_config([], admin="127.0.0.1:%d" % port))):
            conf["backends"] = [{"name": "r1", "url": "http://127.0.0.1:1", "models": ["m"]}]
            p = self.start([harness.binary("llmgate"), "-c", self.write_config(conf)])
            self.assertEqual(p.wait(30), 1, p.output())
            self.assertRegex(p.output(), r"cannot listen on 127\.0\.0\.1:%d: Address already in "
                                         r"use; another process listens there: stop it, or "
                                         r"choose another port in %s" % (port, re.escape(key)))


if __name__ == "__main__":
    harness.main()
