"""The gateway's proxy path against real llmsim replicas on loopback.

Each case starts its own replicas and gateway (port 0, ready lines), sends
real HTTP, and checks what the client got, what the replica saw, and what
the access log says.
"""

import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

import harness
from harness import (Harness, RecordingProxy, StreamReader, chat_body, dechunk, http_request,
                     metric, post_json, split_http_response, sse_events, wait_until)

FLOOD_EVENTS = 400000
FLOOD_EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % (b"x" * 100)
FLOOD_BODY_BYTES = (len(b"%x\r\n" % (len(FLOOD_EVENT) * 1000)) + len(FLOOD_EVENT) * 1000 + 2) * (
    FLOOD_EVENTS // 1000) + len(b"%x\r\ndata: [DONE]\n\n\r\n0\r\n\r\n" % 14)

# Serves one connection at a time: reads one POST (its Content-Length body too),
# calls answer(c), closes; argv[1] sizes the answer.
POST_SERVER = r"""
import socket, sys
n = int(sys.argv[1])
def serve(name, answer):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
    print("%s ready %d" % (name, s.getsockname()[1]), flush=True)
    while True:
        c, _ = s.accept()
        req = b""
        while b"\r\n\r\n" not in req:
            req += c.recv(65536)
        head, _, body = req.partition(b"\r\n\r\n")
        length = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
        while len(body) < length:
            body += c.recv(65536)
        answer(c)
        c.close()
"""

# One POST, answered with FLOOD_EVENTS SSE events in chunks of 1000, as fast as possible.
FLOOD_SERVER = POST_SERVER + r"""
ev = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % (b"x" * 100)
chunk = b"%x\r\n" % (len(ev) * 1000) + ev * 1000 + b"\r\n"
def flood(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(n // 1000):
        c.sendall(chunk)
    c.sendall(b"%x\r\ndata: [DONE]\n\n\r\n0\r\n\r\n" % 14)
serve("flood", flood)
"""

# One POST at a time, answered with a JSON body of argv[1] bytes under a Content-Length
# (an embeddings-sized answer), sent as fast as loopback takes it.
LENGTH_SERVER = POST_SERVER + r"""
head, tail = b'{"object":"list","data":"', b'"}'
def length(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % n)
    c.sendall(head)
    left = n - len(head) - len(tail)
    while left > 0:
        k = min(left, 1 << 20)
        c.sendall(b"x" * k)
        left -= k
    c.sendall(tail)
serve("length", length)
"""

FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


sim_state = harness.sim_state


read_log = harness.read_access_log


def established_to(port):
    """Established TCP connections to 127.0.0.1:port (the gateway's to a replica)."""
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and int(fields[2].split(":")[1], 16) == port:
                n += 1
    return n


class ProxyTest(Harness):

    def fleet(self, n=2, args=FAST, models=("m",)):
        ports = []
        for i in range(n):
            _, port = self.start_llmsim("r%d" % (i + 1), models=models, args=list(args))
            ports.append(port)
        return ports

    def gateway(self, ports, **extra):
        backends = [{"name": "r%d" % (i + 1), "url": "http://127.0.0.1:%d" % p, "models": ["m"]}
                    for i, p in enumerate(ports)]
        # no scrapes or health checks: these cases count what reaches the replica
        extra.setdefault("health", {"scrape_interval": 0, "interval": "1h"})
        conf = self.base_config(backends, access_log=self.path("access.log"), **extra)
        proc, port = self.start_gateway(conf)
        return proc, port

    # ---- basic exchanges ---------------------------------------------------

    def test_non_stream_and_stream(self):
        ports = self.fleet(2)
        _, gw = self.gateway(ports)
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=5))
        self.assertEqual(status, 200)
        self.assertEqual(obj["usage"]["completion_tokens"], 5)
        self.assertIn("x-request-id", hdrs)
        self.assertIn(hdrs.get("x-llmsim-replica"), ("r1", "r2"))

        status, hdrs, data = http_request(gw, "POST", "/v1/chat/completions",
                                          chat_body(stream=True, max_tokens=4,
                                                    stream_options={"include_usage": True}))
        self.assertEqual(status, 200)
        self.assertTrue(hdrs["content-type"].startswith("text/event-stream"))
        events = sse_events(data)
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content") or ""
                       for c in chunks if c["choices"])
        self.assertTrue(text)
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 4)

        log = read_log(self.path("access.log"), 2)
        self.assertEqual([r["status"] for r in log], [200, 200])
        # workers flush their own buffers: lines are not in global order
        s = [r for r in log if r["stream"]][0]
        self.assertIn(s["backend"], ("r1", "r2"))
        self.assertEqual(s["tokens"], 4)
        self.assertEqual(s["attempt_count"], 1)
        for k in ("queue", "connect", "ttfb", "ttft", "total", "itl"):
            self.assertIsNotNone(s[k], k)
        self.assertLessEqual(s["ttfb"], s["ttft"])
        self.assertLessEqual(s["ttft"], s["total"])
        # round robin: the two requests went to different replicas
        self.assertNotEqual(log[0]["backend"], log[1]["backend"])

    def test_stream_bytes_identical_to_what_the_replica_sent(self):
        (port,) = self.fleet(1)
        rec = RecordingProxy(port)
        self.addCleanup(rec.close)
        _, gw = self.gateway([rec.port])
        body = chat_body(stream=True, max_tokens=30, stream_options={"include_usage": True})
        r = StreamReader(gw, body)
        raw = r.read_until(b"0\r\n\r\n")
        r.close()
        _, client_body = split_http_response(raw)
        wait_until(lambda: b"0\r\n\r\n" in bytes(rec.upstream[0]), what="recorded upstream end")
        _, up_body = split_http_response(bytes(rec.upstream[0]))
        # the chunked framing and every byte inside it, exactly as sent
        self.assertEqual(client_body, up_body)
        data, complete = dechunk(client_body)
        self.assertTrue(complete)
        self.assertEqual(sse_events(data)[-1], "[DONE]")
        # and the same request sent directly gives the same shape of stream
        status, _, direct = http_request(port, "POST", "/v1/chat/completions", body)
        self.assertEqual(status, 200)
        self.assertEqual(len(sse_events(direct)), len(sse_events(data)))
        # what went upstream: our headers, the body byte for byte
        sent = bytes(rec.downstream[0])
        head, fwd_body = split_http_response(sent)
        self.assertIn(b"X-Forwarded-For: 127.0.0.1\r\n", head)
        self.assertIn(b"X-Request-Id: ", head)
        self.assertEqual(json.loads(fwd_body), body)

    def test_keepalive_reused_on_both_sides(self):
        (port,) = self.fleet(1)
        rec = RecordingProxy(port)
        self.addCleanup(rec.close)
        _, gw = self.gateway([rec.port], workers=1)
        conn = __import__("http.client").client.HTTPConnection("127.0.0.1", gw, timeout=10)
        for _ in range(10):
            conn.request("POST", "/v1/chat/completions", json.dumps(chat_body(max_tokens=2)),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
            self.assertNotEqual(r.getheader("connection"), "close")
        conn.close()
        self.assertEqual(rec.connections, 1, "the gateway opened more than one upstream conn")

    def burst_pool(self, purge):
        """One replica, 1 worker, upstream_keepalive 1: three bursts of 6
        overlapping requests; returns the connections the gateway opened
        after each, and the gateway's admin port and the replica's port."""
        (port,) = self.fleet(1, args=["--decode-ms", "20", "--decode-ms-per-seq", "0"])
        _, gw = self.gateway([port], workers=1, admin={"listen": "127.0.0.1:0"},
                             limits={"upstream_keepalive": 1},
                             timeouts={"upstream_purge": purge})
        admin = int(self.procs[-1].wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))

        def burst():
            results = []

            def one():
                st, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=10))
                results.append(st)
            threads = [threading.Thread(target=one) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(results, [200] * 6)
            return metric(harness.scrape(admin), "llmgate_backend_connections_opened_total")
        return burst, port

    def test_pool_keeps_a_burst_and_purges_it_gradually(self):
        burst, port = self.burst_pool("1s")
        self.assertEqual(burst(), 6)
        # the second burst finds the first one's connections pooled
        self.assertEqual(burst(), 6)
        # unused, they go, half of those above the kept one per period
        wait_until(lambda: established_to(port) == 1, 15, what="the pool back to 1 connection")
        self.assertEqual(burst(), 11)

    def test_pool_without_purge_closes_above_keepalive_at_once(self):
        burst, port = self.burst_pool(0)
        self.assertEqual(burst(), 6)
        wait_until(lambda: established_to(port) == 1, 5, what="5 of 6 connections closed")
        self.assertEqual(burst(), 11)

    def test_v1_models_and_healthz(self):
        _, p1 = self.start_llmsim("a", models=["m", "x"], args=FAST)
        _, p2 = self.start_llmsim("b", models=["m", "y"], args=FAST)
        conf = self.base_config([
            {"name": "a", "url": "http://127.0.0.1:%d" % p1, "models": ["m", "x"]},
            {"name": "b", "url": "http://127.0.0.1:%d" % p2, "models": ["m", "y"]}])
        _, gw = self.start_gateway(conf)
        status, _, data = http_request(gw, "GET", "/v1/models")
        self.assertEqual(status, 200)
        obj = json.loads(data)
        self.assertEqual(obj["object"], "list")
        self.assertEqual(sorted(m["id"] for m in obj["data"]), ["m", "x", "y"])
        status, _, data = http_request(gw, "GET", "/healthz")
        self.assertEqual((status, json.loads(data)["status"]), (200, "ok"))
        # a model only b serves always goes to b
        for _ in range(4):
            status, hdrs, _, _ = post_json(gw, "/v1/chat/completions", chat_body(model="y"))
            self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, "b"))

    # ---- errors ----------------------------------------------------------

    def test_client_errors(self):
        ports = self.fleet(1)
        _, gw = self.gateway(ports, limits={"max_body_bytes": 4096,
                                            "max_header_bytes": 2048})
        cases = [
            (lambda: post_json(gw, "/v1/chat/completions", None), 400, "invalid_json"),
            (lambda: http_request(gw, "POST", "/v1/chat/completions", b"{nope"), 400,
             "invalid_json"),
            (lambda: post_json(gw, "/v1/chat/completions", {"messages": []}), 400,
             "missing_model"),
            (lambda: post_json(gw, "/v1/chat/completions", chat_body(model="nope")), 404,
             "model_not_found"),
            (lambda: http_request(gw, "GET", "/v1/chat/completions"), 405,
             "method_not_allowed"),
            (lambda: http_request(gw, "GET", "/nowhere"), 404, "not_found"),
            (lambda: post_json(gw, "/v1/chat/completions", chat_body(content="x" * 8000)), 413,
             "body_too_large"),
            (lambda: http_request(gw, "GET", "/healthz", headers={"X-Big": "y" * 4000}), 431,
             "headers_too_large"),
        ]
        for fn, want, code in cases:
            res = fn()
            status, data = res[0], res[-1]
            self.assertEqual(status, want, data)
            err = json.loads(data)["error"]
            self.assertEqual(err["code"], code)
            self.assertTrue(err["message"])
            self.assertIn("type", err)

    def test_access_log_escapes_what_it_logs(self):
        """Model names with bytes JSON must escape, at every offset of the log's 8-byte scan."""
        ports = self.fleet(1)
        _, gw = self.gateway(ports)
        specials = ['"', "\\", "\x01", "\x1f", "\x7f", "\u00e9", "\u20ac", "\n"]
        names = []
        for k, ch in enumerate(specials):
            for off in range(0, 17, 3 + k % 2):
                names.append("a" * off + ch + "b" * (k + 5))
        for name in names:
            status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(model=name))
            self.assertEqual(status, 404, obj)
        # a path longer than a log line holds: the line is cut, still one JSON object
        long_path = "/nowhere/" + "x%22" * 1500
        status, _, _ = http_request(gw, "GET", long_path)
        self.assertEqual(status, 404)
        log = read_log(self.path("access.log"), len(names) + 1)
        paths = [r["path"] for r in log if r["model"] is None]
        self.assertEqual(len(paths), 1)
        self.assertTrue(paths[0].endswith("..."), paths[0][-20:])
        self.assertTrue(long_path.startswith(paths[0][:-3]))
        self.assertGreater(len(paths[0]), 1000)
        log = [r for r in log if r["model"] is not None]
        # two workers: each keeps its own lines in order, not the two together
        self.assertEqual(sorted(r["model"] for r in log), sorted(names))
        # DEL is legal JSON as it is; the log writes it escaped, as jq -a would
        with open(self.path("access.log"), "rb") as f:
            raw = f.read()
        self.assertEqual(raw.count(b"\x7f"), 0)
        self.assertEqual(raw.count(b"\\u007f"), sum("\x7f" in n for n in names))

    def test_backend_down(self):
        dead = self.refusing_port()
        conf = self.base_config([{"name": "dead", "url": "http://127.0.0.1:%d" % dead,
                                  "models": ["m"]}])
        _, gw = self.start_gateway(conf)
        t0 = time.monotonic()
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body())
        self.assertIn(status, (502, 503))
        self.assertLess(time.monotonic() - t0, 2.0)
        self.assertIn("error", obj)

    def test_one_backend_down_is_retried(self):
        (port,) = self.fleet(1)
        dead = self.refusing_port()
        conf = self.base_config([
            {"name": "dead", "url": "http://127.0.0.1:%d" % dead, "models": ["m"]},
            {"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            access_log=self.path("access.log"))
        _, gw = self.start_gateway(conf)
        for _ in range(6):
            status, hdrs, _, _ = post_json(gw, "/v1/chat/completions", chat_body())
            self.assertEqual(status, 200)
            self.assertEqual(hdrs["x-llmsim-replica"], "r1")
        log = read_log(self.path("access.log"), 6)
        self.assertTrue(any(r["attempt_count"] == 2 for r in log), log)

    # ---- cancellation and backpressure --------------------------------------

    def _abort_latency(self, stream):
        (port,) = self.fleet(1, args=["--decode-ms", "20", "--decode-ms-per-seq", "0",
                                      "--prefill-us-per-token", "10"])
        _, gw = self.gateway([port])
        before = sim_state(port)["aborted"]
        r = StreamReader(gw, chat_body(stream=stream, max_tokens=2000))
        if stream:
            r.read_until(b"data: ")
        else:
            wait_until(lambda: sim_state(port)["running"] == 1, what="sequence running")
        t_close = time.time_ns()
        r.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        r.close()
        st = wait_until(lambda: (lambda s: s if s["aborted"] > before else None)(sim_state(port)),
                        timeout=5, what="the replica to see the abort")
        return (st["last_abort_wall_ns"] - t_close) / 1e6

    def test_client_disconnect_mid_stream_aborts_upstream(self):
        ms = self._abort_latency(stream=True)
        self.assertLess(ms, 100.0, "upstream closed %.1f ms after the client left" % ms)

    def test_client_disconnect_non_stream_aborts_upstream(self):
        ms = self._abort_latency(stream=False)
        self.assertLess(ms, 100.0, "upstream closed %.1f ms after the client left" % ms)

    def test_slow_reader_memory_is_bounded(self):
        # A replica that dumps a 64 MiB stream as fast as loopback allows.
        flood = self.start([harness.PYTHON, "-c", FLOOD_SERVER, str(FLOOD_EVENTS)],
                           name="flood")
        fport = int(flood.wait_for(r"flood ready (\d+)").group(1))
        (port,) = self.fleet(1)
        conf = self.base_config([
            {"name": "flood", "url": "http://127.0.0.1:%d" % fport, "models": ["big"]},
            {"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            limits={"stream_buffer_bytes": 65536}, timeouts={"client_stall": "30s"},
            health={"scrape_interval": 0, "interval": "1h"})  # the flood server answers any GET
        gwp, gw = self.start_gateway(conf)
        rss0 = gwp.rss_kib()
        r = StreamReader(gw, chat_body(model="big", stream=True))
        r.read_until(b"data: ")
        # the client stops reading while the replica keeps sending
        time.sleep(2.0)
        grown = gwp.rss_kib() - rss0
        self.assertLess(grown, 16 * 1024, "gateway grew %d KiB holding a stalled stream" % grown)
        # another client is not slowed down meanwhile
        t0 = time.monotonic()
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=5))
        self.assertEqual(status, 200)
        self.assertLess(time.monotonic() - t0, 2.0)
        # once the reader reads, every byte arrives, in order, complete
        total = len(r.raw)
        r.sock.settimeout(30)
        tail = b""
        while True:
            chunk = r.sock.recv(1 << 20)
            if not chunk:
                break
            total += len(chunk)
            tail = (tail + chunk)[-64:]
            if tail.endswith(b"0\r\n\r\n"):
                break
        r.close()
        self.assertTrue(tail.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), tail)
        head_len = r.raw.find(b"\r\n\r\n") + 4
        self.assertEqual(total - head_len, FLOOD_BODY_BYTES)

    def test_large_answer_whole_and_bounded(self):
        """A 48 MiB Content-Length answer (read in large reads, not per read
        event): a client that stops reading holds the gateway's memory down,
        then gets every byte."""
        n = 48 << 20
        srv = self.start([harness.PYTHON, "-c", LENGTH_SERVER, str(n)], name="length")
        sport = int(srv.wait_for(r"length ready (\d+)").group(1))
        conf = self.base_config(
            [{"name": "big", "url": "http://127.0.0.1:%d" % sport, "models": ["big"]}],
            limits={"stream_buffer_bytes": 65536}, timeouts={"client_stall": "30s"},
            health={"scrape_interval": 0, "interval": "1h"})
        gwp, gw = self.start_gateway(conf)
        rss0 = gwp.rss_kib()
        r = StreamReader(gw, chat_body(model="big"))
        r.read_until(b"xxxx")
        time.sleep(1.5)  # the client stalls while the backend keeps sending
        grown = gwp.rss_kib() - rss0
        self.assertLess(grown, 16 * 1024, "gateway grew %d KiB holding a stalled answer" % grown)
        head_len = r.raw.find(b"\r\n\r\n") + 4
        self.assertIn(b"content-length: %d" % n, r.raw[:head_len].lower())
        got = len(r.raw) - head_len
        digest = hashlib.sha256(r.raw[head_len:])
        r.sock.settimeout(30)
        while got < n:
            chunk = r.sock.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
            digest.update(chunk)
        r.close()
        self.assertEqual(got, n)
        head, tail = b'{"object":"list","data":"', b'"}'
        want, left = hashlib.sha256(head), n - len(head) - len(tail)
        while left > 0:
            want.update(b"x" * min(left, 1 << 20))
            left -= min(left, 1 << 20)
        want.update(tail)
        self.assertEqual(digest.hexdigest(), want.hexdigest())
        entry = read_log(self.path("access.log")) if os.path.exists(self.path("access.log")) else []
        self.assertTrue(all(e.get("status") == 200 for e in entry), entry)

    # ---- timeouts and the access log ----------------------------------------

    def first_byte_504(self, gw):
        """A request the replica stalls on: 504 first_byte_timeout; returns how long it took."""
        t0 = time.monotonic()
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body())
        took = time.monotonic() - t0
        self.assertEqual(status, 504)
        self.assertEqual(obj["error"]["code"], "first_byte_timeout")
        return took

    def test_first_byte_timeout_is_504(self):
        (port,) = self.fleet(1, args=FAST + ["--fault", "stall@0"])
        _, gw = self.gateway([port], timeouts={"first_byte": "1s"},
                             routing={"policy": "round_robin", "retry": {"attempts": 1}})
        took = self.first_byte_504(gw)
        self.assertTrue(0.9 < took < 5.0, took)

    def test_pooled_connection_timeouts(self):
        """A reused connection's first-byte timeout counts from the dispatch, not
        from its last read; an unused pooled one goes after upstream_idle."""
        (port,) = self.fleet(1)
        _, gw = self.gateway([port], workers=1, timeouts={"first_byte": "2s", "upstream_idle": "2s"},
                             routing={"policy": "round_robin", "retry": {"attempts": 1}})
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2))
        self.assertEqual(status, 200)
        self.assertEqual(established_to(port), 1)
        time.sleep(1.0)  # pooled, its read armed a second ago with the same duration
        status, _, _ = http_request(port, "POST", "/sim/control", {"fault": "stall@0"})
        self.assertEqual(status, 200)
        took = self.first_byte_504(gw)
        self.assertTrue(1.8 < took < 3.5, took)

        (port,) = self.fleet(1)
        _, gw = self.gateway([port], workers=1, timeouts={"upstream_idle": "300ms"})
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2))
        self.assertEqual(status, 200)
        t0 = time.monotonic()
        self.assertEqual(established_to(port), 1)
        wait_until(lambda: established_to(port) == 0, 5, what="the idle pooled connection closed")
        self.assertGreater(time.monotonic() - t0, 0.2)

    def test_stream_idle_timeout_cuts_the_stream(self):
        (port,) = self.fleet(1, args=["--decode-ms", "20", "--decode-ms-per-seq", "0"])
        _, gw = self.gateway([port], timeouts={"stream_idle": "1s"})
        r = StreamReader(gw, chat_body(stream=True, max_tokens=500))
        r.read_until(b"data: ")
        status, _, _ = http_request(port, "POST", "/sim/control", {"fault": "stall@0"})
        self.assertEqual(status, 200)
        t0 = time.monotonic()
        raw = r.read_to_eof(timeout=10)
        took = time.monotonic() - t0
        r.close()
        self.assertTrue(r.eof)
        self.assertLess(took, 5.0)
        _, body = split_http_response(raw)
        data, complete = dechunk(body)
        self.assertFalse(complete, "a cut stream must not end with the last chunk")
        self.assertNotIn("[DONE]", sse_events(data))
        log = read_log(self.path("access.log"), 1)
        self.assertEqual(log[0]["error"], "stream_idle_timeout")

    def test_access_log_reopens_on_sigusr1(self):
        ports = self.fleet(1)
        gwp, gw = self.gateway(ports)
        path = self.path("access.log")
        self.assertEqual(post_json(gw, "/v1/chat/completions", chat_body())[0], 200)
        read_log(path, 1)
        os.rename(path, path + ".1")
        gwp.signal(signal.SIGUSR1)
        gwp.wait_for(r"access log .* reopened")
        self.assertEqual(post_json(gw, "/v1/chat/completions", chat_body())[0], 200)
        self.assertEqual(len(read_log(path, 1)), 1)
        self.assertEqual(len(read_log(path + ".1", 1)), 1)

    def test_access_log_full_buffers_go_out_before_the_timer_the_rest_at_exit(self):
        """A file: a worker's full buffer (4 KiB, a few ~900-byte lines) is written at once,
        long before the flush timer (1 min); what the buffers still hold at SIGTERM is
        written on the way out; every line once, in its worker's order."""
        ports = self.fleet(1)
        path = self.path("access.log")
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % ports[0], "models": ["m"]}],
            access_log={"path": path, "buffer": "4KiB", "flush": "1m"},
            health={"scrape_interval": 0, "interval": "1h"})
        gwp, gw = self.start_gateway(conf)
        ids = ["full-%03d" % i for i in range(61)]
        for rid in ids:
            status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(),
                                        headers={"X-Request-Id": rid})
            self.assertEqual(status, 200)
        early = read_log(path, 20, timeout=20 * harness.SLOW)
        self.assertLess(len(early), len(ids) + 1)
        gwp.signal(signal.SIGTERM)
        self.assertEqual(gwp.wait(30 * harness.SLOW), 0)
        got = [rec["id"] for rec in read_log(path, len(ids), timeout=1)]
        self.assertEqual(sorted(got), ids)  # each once
        self.assertEqual(got[:len(early)], [rec["id"] for rec in early])

    def test_access_log_on_stdout_by_default_and_off_with_false(self):
        (port,) = self.fleet(1)
        backends = [{"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}]
        gwp, gw = self.start_gateway(self.base_config(backends))  # no access_log: stdout
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(),
                                    headers={"X-Request-Id": "stdout-default-1"})
        self.assertEqual(status, 200)
        line = gwp.wait_for(r'^\{"ts":.*"id":"stdout-default-1"').string
        rec = json.loads(line)
        self.assertEqual((rec["status"], rec["backend"], rec["model"]), (200, "r1", "m"))
        self.assertIsNotNone(rec["ttft"])
        # "access_log": false: nothing on stdout but the ready line
        offp, off = self.start_gateway(self.base_config(backends, access_log=False), name="off")
        status, _, _, _ = post_json(off, "/v1/chat/completions", chat_body(),
                                    headers={"X-Request-Id": "stdout-off-1"})
        self.assertEqual(status, 200)
        offp.signal(signal.SIGTERM)
        self.assertEqual(offp.wait(30 * harness.SLOW), 0)
        self.assertFalse([ln for ln in offp.lines if ln.startswith("{")], offp.output())

    def piped_gateway(self, conf, stderr_path, shared=False):
        """llmgate with its standard output on a pipe that nothing reads until the test
        says so (and its standard error there too when shared, else in a file); returns
        (popen, port, admin port, read end of the pipe)."""
        path = self.write_config(conf)
        ready = self.path("ready")
        r, w = os.pipe()
        err = open(stderr_path or os.devnull, "wb")
        self.addCleanup(err.close)
        p = subprocess.Popen(harness.gateway_prefix() + [harness.binary("llmgate"), "-c", path,
                                                         "--ready-file", ready],
                             stdin=subprocess.DEVNULL, stdout=w,
                             stderr=w if shared else err, start_new_session=True)
        os.close(w)
        self.addCleanup(lambda: p.poll() is None and p.kill())
        def ready_line():
            if os.path.exists(ready):
                with open(ready) as f:
                    return f.read().strip()
            return None
        line = wait_until(ready_line, timeout=60 * harness.SLOW, what="the ready file")
        ports = re.findall(r":(\d+)", line)
        return p, int(ports[0]), int(ports[1]), r

    def fill_and_check(self, gw, admin, n, model="m"):
        """n requests, each answered (none waits on the stalled log); returns the slowest."""
        slowest = 0.0
        for i in range(n):
            t = time.monotonic()
            status, _, _, _ = post_json(gw, "/v1/chat/completions",
                                        chat_body(model=model, max_tokens=1),
                                        headers={"X-Request-Id": "fill-%04d" % i})
            slowest = max(slowest, time.monotonic() - t)
            self.assertEqual(status, 200)
        return slowest

    def test_stalled_stdout_costs_lines_not_requests_nor_exit(self):
        """stdout's reader stalls: requests go on at full speed, the lines the pipe and the
        buffers cannot hold are dropped and counted, SIGTERM still exits at once."""
        (port,) = self.fleet(1)
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            access_log={"path": "-", "buffer": "4KiB", "flush": "10ms"},
            admin="127.0.0.1:0", health={"scrape_interval": 0, "interval": "1h"})
        p, gw, admin, r = self.piped_gateway(conf, self.path("stderr"))
        self.addCleanup(os.close, r)
        # the pipe (64 KiB), the writer's backlog and each worker's buffer (64 KiB each
        # at a 4 KiB buffer) hold a few hundred lines of ~900 bytes (how many depends on
        # when the writer runs): 1,000 overflow them
        slowest = self.fill_and_check(gw, admin, 1000)
        self.assertLess(slowest, 2.0 * harness.SLOW)
        dropped = wait_until(lambda: metric(harness.scrape(admin),
                                            "llmgate_access_log_dropped_total") or None,
                             what="dropped lines counted")
        self.assertGreater(dropped, 50)
        t = time.monotonic()
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(30 * harness.SLOW), 0)
        self.assertLess(time.monotonic() - t, 10 * harness.SLOW)
        # what did get through is whole lines, in order per worker
        data = b""
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
        lines = data.decode().splitlines()
        self.assertTrue(lines[0].startswith("llmgate ready"), lines[0])
        recs = [json.loads(ln) for ln in lines[1:]]
        # a pipe holds 16 pages; each write of a few ~950-byte lines takes a page of
        # its own once the last one cannot take it whole: 16 writes, 48 lines or more
        self.assertGreaterEqual(len(recs), 16)
        self.assertLessEqual(len(recs) + dropped, 1000)
        # the lines still buffered at exit waited a second for the reader, then were dropped
        with open(self.path("stderr")) as f:
            self.assertRegex(f.read(), r"access log -: the reader took nothing for a second "
                                       r"while llmgate stopped; \d+ lines dropped")

    def test_closed_stdout_and_stderr_cost_lines_not_requests(self):
        """stdout and stderr share a pipe: once its reader is gone, the access log's writes
        fail (counted), and a worker's warning finds no reader either: nothing stalls."""
        (port,) = self.fleet(1)
        dead = self.refusing_port()
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]},
             {"name": "dead", "url": "http://127.0.0.1:%d" % dead, "models": ["x"]}],
            admin="127.0.0.1:0", health={"scrape_interval": 0, "interval": "1h"},
            routing={"policy": "round_robin", "retry": {"attempts": 1}})
        p, gw, admin, r = self.piped_gateway(conf, None, shared=True)
        # a stalled shared pipe: the access log fills it, then a worker warns
        self.fill_and_check(gw, admin, 400)
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(model="x"))
        self.assertIn(status, (502, 503), obj)
        self.fill_and_check(gw, admin, 20)
        # the reader goes away: writes fail, lines are counted as dropped
        os.close(r)
        before = metric(harness.scrape(admin), "llmgate_access_log_dropped_total") or 0
        self.fill_and_check(gw, admin, 50)
        wait_until(lambda: (metric(harness.scrape(admin), "llmgate_access_log_dropped_total")
                            or 0) >= before + 50,
                   what="lines written to a closed pipe counted as dropped")
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(30 * harness.SLOW), 0)

    # ---- shutdown ----------------------------------------------------------

    def test_sigterm_drains_running_stream(self):
        (port,) = self.fleet(1, args=["--decode-ms", "20", "--decode-ms-per-seq", "0"])
        gwp, gw = self.gateway([port], timeouts={"drain": "20s"})
        r = StreamReader(gw, chat_body(stream=True, max_tokens=60))
        r.read_until(b"data: ")
        gwp.signal(signal.SIGTERM)
        gwp.wait_for(r"draining", timeout=5)
        # new connections are refused while draining
        def refused():
            try:
                socket.create_connection(("127.0.0.1", gw), timeout=1).close()
                return False
            except OSError:
                return True
        wait_until(refused, timeout=5, what="the listener to close")
        raw = r.read_to_eof(timeout=20)
        _, body = split_http_response(raw)
        data, complete = dechunk(body)
        self.assertTrue(complete, "the running stream was cut by the drain")
        self.assertEqual(sse_events(data)[-1], "[DONE]")
        self.assertEqual(gwp.wait(10), 0)


if __name__ == "__main__":
    harness.main()
