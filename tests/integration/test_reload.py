"""Configuration reloads under load: SIGHUP and the admin API.

Real llmsim replicas, the real gateway and llmload on loopback. The gateway's
configuration file is rewritten (atomically, as a ConfigMap update or an
editor's rename would) and the gateway told to reload; the tests check what
clients saw (no failed or cut request, streams that outlive their backend's
removal) and what the gateway said (every error of a bad file, with its
position).
"""

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import harness
from harness import Harness, HttpStream, chat_body, http_request, post_json, wait_until

FAST = ["--decode-ms", "4", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]

# Backend sets of the ten reloads: every replica is added and removed more than once.
RELOAD_SETS = [
    ["r2", "r3"], ["r3", "r4"], ["r1", "r4"], ["r1", "r2", "r3"], ["r4"],
    ["r1", "r2"], ["r2", "r3", "r4"], ["r1", "r3"], ["r2", "r4"], ["r1", "r2", "r3", "r4"],
]


sim_state = harness.sim_state


class FakePeer:
    """Another gateway's admin listener as far as GET /admin/peers goes: answers
    every request at once with no requests of its own, and counts the requests
    each connection brought and which connections are open."""

    ANSWER = json.dumps({"format": 1, "id": "00000000feedf00d", "changes": 1, "backends": []})

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.requests = []   # per accepted connection: requests answered
        self.open = set()    # indexes of connections not closed
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                k = len(self.requests)
                self.requests.append(0)
                self.open.add(k)
            threading.Thread(target=self._serve, args=(c, k), daemon=True).start()

    def _serve(self, c, k):
        buf = b""
        body = self.ANSWER.encode()
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = c.recv(4096)
                    if not data:
                        return
                    buf += data
                _, buf = buf.split(b"\r\n\r\n", 1)  # GET: no body
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                with self.lock:
                    self.requests[k] += 1
        except OSError:
            pass
        finally:
            c.close()
            with self.lock:
                self.open.discard(k)

    def snapshot(self):
        with self.lock:
            return list(self.requests), set(self.open)

    def close(self):
        self.sock.close()


class ReloadTest(Harness):

    def setUp(self):
        super().setUp()
        self.sims = {}
        for name in ("r1", "r2", "r3", "r4"):
            _, port = self.start_llmsim(name, args=FAST)
            self.sims[name] = port

    def conf(self, names, slow_start=0, **extra):
        """A backend that joins takes its full share at once (slow_start 0) unless said:
        the tests check which replicas serve right after a reload."""
        backends = [{"name": n, "url": "http://127.0.0.1:%d" % self.sims[n], "models": ["m"]}
                    for n in names]
        conf = self.base_config(backends, access_log=self.path("access.log"),
                                admin={"listen": "127.0.0.1:0"})
        if slow_start is not None:
            conf["health"] = {"slow_start": slow_start}
        conf.update(extra)
        return conf

    def write(self, conf, raw=None):
        """Replaces the config file atomically (a reader never sees half a file)."""
        path = self.path("llmgate.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(raw if raw is not None else json.dumps(conf, indent=2))
        os.replace(tmp, path)

    def gateway(self, names, **kw):
        proc, port = self.start_gateway(self.conf(names, **kw))
        m = proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)")
        self.gw = proc
        self.admin = int(m.group(1))
        return proc, port

    def reload(self, conf=None, raw=None, expect="reloaded"):
        """Writes the file, sends SIGHUP, waits for the outcome line."""
        if conf is not None or raw is not None:
            self.write(conf, raw)
        mark = len(self.gw.lines)
        self.gw.signal(signal.SIGHUP)
        if expect == "reloaded":
            return self.gw.wait_for(r"configuration reloaded .*generation (\d+)", start=mark)
        return self.gw.wait_for(r"configuration reload refused", start=mark)

    def stop_gateway(self):
        """SIGTERM: the gateway drains and exits 0 (under ASan: no leak either)."""
        self.gw.signal(signal.SIGTERM)
        rc = self.gw.wait(30)
        self.assertEqual(rc, 0, self.gw.output()[-3000:])
        self.assertNotIn("Sanitizer", self.gw.output())

    def replicas_of(self, port, n=12):
        got = set()
        for _ in range(n):
            status, h, _, _ = post_json(port, "/v1/chat/completions", chat_body(max_tokens=2))
            self.assertEqual(status, 200)
            got.add(h["x-llmsim-replica"])
        return got

    # ---- the tests ---------------------------------------------------------------

    def test_ten_reloads_under_streaming_load(self):
        """llmload streams at a steady rate through ten reloads that add and
        remove backends: not one request fails or is cut."""
        # joining backends ramp up as configured by default (slow start)
        _, port = self.gateway(["r1", "r2"], slow_start=None)
        out = self.path("load.json")
        load = subprocess.Popen(
            [harness.binary("llmload"), "--url", "http://127.0.0.1:%d" % port, "--model", "m",
             "--rate", "40", "--duration", "13", "--max-tokens", "16-96", "--prompt-bytes",
             "64-512", "--seed", "5", "--json", out, "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(lambda: load.poll() is None and load.kill())
        time.sleep(1.0)
        gens = []
        inflight_at_reload = []
        for names in RELOAD_SETS:
            removed = [n for n in self.sims if n not in names]
            before = {n: sim_state(self.sims[n])["running"] for n in removed}
            inflight_at_reload.append(sum(before.values()))
            m = self.reload(self.conf(names, slow_start=None))
            gens.append(int(m.group(1)))
            time.sleep(1.0)
        rc = load.wait(60)
        stdout, stderr = load.communicate()
        self.assertEqual(rc, 0, stderr.decode())
        with open(out) as f:
            summary = json.load(f)
        self.assertEqual(gens, list(range(2, 12)))
        self.assertEqual(summary["errors"], {"connect": 0, "status": 0, "cut": 0, "timeout": 0,
                                             "invalid": 0}, summary)
        self.assertEqual(summary["ok"], summary["requests"])
        self.assertGreater(summary["requests"], 350)
        # every replica served traffic, so every add and remove was exercised
        self.assertEqual(set(summary["replicas"]), {"r1", "r2", "r3", "r4"}, summary["replicas"])
        # streams were running on backends when they were removed (they drained)
        self.assertGreater(sum(inflight_at_reload), 0, inflight_at_reload)
        # the access log agrees: no request ended with an error
        def logged():
            with open(self.path("access.log")) as f:
                got = [json.loads(ln) for ln in f if ln.strip()]
            return got if len(got) >= summary["requests"] else None
        log = wait_until(logged, timeout=10, what="every request in the access log")
        self.assertEqual(len(log), summary["requests"])
        self.assertEqual([r for r in log if r["status"] != 200 or r["error"]], [])
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(data)["generation"], 11)
        self.stop_gateway()


    def test_running_stream_finishes_on_its_removed_backend(self):
        _, port = self.gateway(["r1", "r2"])
        s = self.stream(port, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=250))
        self.assertEqual(s.read_head(10), 200)
        first = s.next_event(10)
        self.assertIsNotNone(first)
        served_by = s.headers["x-llmsim-replica"]
        keep = "r2" if served_by == "r1" else "r1"
        self.reload(self.conf([keep, "r3"]))
        self.gw.wait_for(r"backend %s removed: its 1 request in flight" % served_by)
        # new requests no longer go to the removed backend ...
        self.assertEqual(self.replicas_of(port), {keep, "r3"})
        # ... while the stream that started there goes on to its end
        self.assertIsNone(s.ended)
        s.read_all(30)
        self.assertEqual(s.ended, "complete")
        self.assertEqual(s.events[-1][1], "[DONE]")
        self.assertGreaterEqual(len(s.events), 250)
        # once it finished, the retired backend's connection closed (nothing pooled);
        # the one left is the /sim/state request itself
        wait_until(lambda: sim_state(self.sims[served_by])["connections"] == 1, timeout=10,
                   what="the removed backend's connections to close")
        self.stop_gateway()

    def test_a_kept_backend_takes_its_new_settings_and_keeps_its_state(self):
        """A backend kept by a reload (same name and URL) serves with the new
        file's settings (max_inflight, weight) while its live state (the
        request in flight there, its counters) carries over."""
        def conf(**b):
            c = self.conf(["r1"], limits={"queue_length": 0})
            c["backends"][0].update(b)
            return c

        def backend():
            status, _, data = http_request(self.admin, "GET", "/admin/backends")
            self.assertEqual(status, 200)
            (b,) = [b for b in json.loads(data)["backends"] if b["name"] == "r1"]
            return b

        proc, port = self.start_gateway(conf())
        m = proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)")
        self.gw, self.admin = proc, int(m.group(1))
        s = self.stream(port, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=1500))
        self.assertEqual(s.read_head(10), 200)
        self.assertIsNotNone(s.next_event(10))
        # unlimited: a second request is served beside the stream
        self.assertEqual(post_json(port, "/v1/chat/completions", chat_body(max_tokens=2))[0], 200)
        before = backend()
        self.assertEqual((before["max_inflight"], before["weight"]), (0, 1))
        self.reload(conf(max_inflight=1, weight=7))
        after = backend()
        self.assertEqual((after["max_inflight"], after["weight"]), (1, 7))
        # the live state carried over: the stream still counts there, the counters too
        self.assertEqual(after["in_flight"], 1)
        self.assertGreaterEqual(after["attempts"], before["attempts"])
        self.assertEqual(after["ttft_count"], before["ttft_count"])
        # the new limit holds: the stream fills r1, no queue: 429 at once
        status, _, body, _ = post_json(port, "/v1/chat/completions", chat_body(max_tokens=2))
        self.assertEqual(status, 429, body)
        # and a limit raised again is followed too
        self.reload(conf(max_inflight=2))
        self.assertEqual(backend()["max_inflight"], 2)
        self.assertEqual(post_json(port, "/v1/chat/completions", chat_body(max_tokens=2))[0], 200)
        self.assertIsNone(s.ended)
        s.read_all(30)
        self.assertEqual(s.ended, "complete")
        self.stop_gateway()

    def test_a_replaced_fleet_stops_asking_its_peers(self):
        """A reload replaces the fleet while a stream still holds the old one:
        only the new fleet's thread goes on asking the peer (the old one would
        write the same backends' state twice, and a dropped peer's requests over
        the new fleet's)."""
        peer = FakePeer()
        self.addCleanup(peer.close)
        health = {"slow_start": 0, "peer_interval": "50ms"}
        _, port = self.gateway(["r1"], peers=["127.0.0.1:%d" % peer.port], health=health)
        wait_until(lambda: sum(peer.snapshot()[0]) >= 3, what="the gateway to ask its peer")
        s = self.stream(port, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=1500))
        self.assertEqual(s.read_head(10), 200)
        self.assertIsNotNone(s.next_event(10))
        before = len(peer.snapshot()[0])
        self.reload(self.conf(["r1"], peers=["127.0.0.1:%d" % peer.port], health=health))
        # the new fleet asks on a connection of its own; the old one's closes
        wait_until(lambda: len(peer.snapshot()[0]) > before and len(peer.snapshot()[1]) == 1,
                   timeout=5, what="one connection to the peer: the new fleet's")
        counts, live = peer.snapshot()
        self.assertIsNone(s.ended, "the stream (holding the old fleet) ended too soon to tell")
        s.read_all(30)
        self.assertEqual(s.ended, "complete")
        after, live_after = peer.snapshot()
        # through the stream: one connection open, asking; no other came
        self.assertEqual(live_after, live)
        self.assertEqual(len(after), len(counts))
        (k,) = live
        self.assertGreater(after[k], counts[k])
        self.stop_gateway()

    def test_bad_file_is_refused_and_the_old_config_serves(self):
        _, port = self.gateway(["r1", "r2"])
        good = self.conf(["r1", "r2"])
        # a syntax error: jansson's position
        m = self.reload(raw='{"listen": "127.0.0.1:0",\n  "backends": [\n', expect="refused")
        self.gw.wait_for(r"llmgate\.json:3:\d+: error: /: ", start=0)
        # semantic errors: every one, each at its line and column
        bad = json.dumps(good, indent=2).replace('"models"', '"modles"', 1)
        bad = bad.replace('"http://127.0.0.1', '"tcp://127.0.0.1', 1)
        lines = bad.split("\n")
        url_line = next(i for i, ln in enumerate(lines) if "tcp://" in ln) + 1
        key_line = next(i for i, ln in enumerate(lines) if "modles" in ln) + 1
        mark = len(self.gw.lines)
        self.reload(raw=bad, expect="refused")
        self.gw.wait_for(r"llmgate\.json:%d:\d+: error: /backends/0/url: scheme must be http or "
                         r"https" % url_line, start=mark)
        self.gw.wait_for(r"llmgate\.json:%d:\d+: error: /backends/0/modles: unknown key "
                         r"\"modles\"; did you mean \"models\"\?" % key_line, start=mark)
        # the old configuration still serves, with both its backends
        self.assertEqual(self.replicas_of(port), {"r1", "r2"})
        # the admin API reports the same errors and leaves the generation alone
        status, _, obj, _ = post_json(self.admin, "/admin/reload", {})
        self.assertEqual(status, 422)
        self.assertFalse(obj["ok"])
        self.assertEqual(obj["generation"], 1)
        self.assertTrue(any(re.match(r".*llmgate\.json:%d:\d+: error: /backends/0/url" % url_line,
                                     e) for e in obj["errors"]), obj["errors"])
        # and a good file through the admin API applies
        self.write(self.conf(["r3"]))
        status, _, obj, _ = post_json(self.admin, "/admin/reload", {})
        self.assertEqual((status, obj["ok"], obj["generation"], obj["backends"]), (200, True, 2, 1))
        self.assertEqual(self.replicas_of(port), {"r3"})
        self.stop_gateway()


    def test_what_cannot_change_is_refused(self):
        _, port = self.gateway(["r1"])
        conf = self.conf(["r1", "r2"])
        conf["listen"] = ["127.0.0.1:0", "127.0.0.1:0"]
        conf["workers"] = 3
        mark = len(self.gw.lines)
        self.reload(conf, expect="refused")
        self.gw.wait_for(r"error: /listen: listen addresses .* cannot change on reload", start=mark)
        self.gw.wait_for(r"error: /workers: the worker count cannot change on reload \(2 in "
                         r"force, 3 in the file\)", start=mark)
        # nothing of that file applied: r2 did not join
        self.assertEqual(self.replicas_of(port, 6), {"r1"})
        self.stop_gateway()


    def idle_close_after(self, port):
        """Seconds from a response to the gateway's close of the idle keep-alive connection."""
        body = json.dumps(chat_body()).encode()
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                  + body)
        got = b""
        while b'"usage"' not in got:
            chunk = s.recv(65536)
            self.assertTrue(chunk, got)
            got += chunk
        t0 = time.monotonic()
        rest = s.recv(65536)  # blocks until the gateway closes the idle connection
        idle = time.monotonic() - t0
        s.close()
        self.assertEqual(rest, b"")
        return idle

    def test_log_level_access_log_path_and_timeouts_follow_the_file(self):
        _, port = self.gateway(["r1"], timeouts={"client_idle": "30s"})
        self.assertEqual(post_json(port, "/v1/chat/completions", chat_body())[0], 200)
        conf = self.conf(["r1"], log_level="debug", timeouts={"client_idle": "500ms"})
        conf["access_log"] = self.path("access2.log")
        self.reload(conf)
        mark = len(self.gw.lines)
        self.assertEqual(post_json(port, "/v1/chat/completions", chat_body())[0], 200)
        self.gw.wait_for(r" debug ", start=mark)
        self.gw.wait_for(r"access log now goes to .*access2\.log")
        lines = wait_until(lambda: os.path.exists(self.path("access2.log"))
                           and open(self.path("access2.log")).read().splitlines(),
                           what="a line in the new access log")
        self.assertEqual(len(lines), 1)
        with open(self.path("access.log")) as f:
            self.assertEqual(len(f.read().splitlines()), 1)
        # the new idle timeout applies, on workers that timed 30 s before too
        for _ in range(2):  # two workers: likely a connection on each
            idle = self.idle_close_after(port)
            self.assertGreater(idle, 0.3)
            self.assertLess(idle, 5.0)
        # a path that cannot be opened refuses the reload
        conf["access_log"] = os.path.join(self.tmp, "no", "such", "dir.log")
        mark = len(self.gw.lines)
        self.reload(conf, expect="refused")
        self.gw.wait_for(r"error: /access_log/path: cannot open", start=mark)
        self.stop_gateway()


if __name__ == "__main__":
    harness.main()
