"""Hostile clients that hold a connection instead of breaking it: a body
that trickles in under the minimum rate, chunk framing (a trailer, a chunk
extension) that never ends, a key holder reading many bodies at once, a
reader with a zero window, a client that leaves in the middle of a stream,
thousands of idle keep-alive connections (what each costs).

Each slow trigger runs against a gateway with one connection slot
(limits.max_connections 1) and short deadlines: while the trigger holds the
slot a second client is refused (503), and the slot must come back with the
right status within the deadline; a client above the minimum rate is served
however long its body takes.
"""

import json
import resource
import socket
import threading
import time
import urllib.request

import harness
from harness import Harness, RecordingProxy, chat_body, post_json, wait_until

FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]
BODY = json.dumps(chat_body(max_tokens=2)).encode()
GRACE = 1.0       # timeouts.client_body_grace below, seconds
TRICKLE = 0.4     # seconds between two bytes of a trigger


def status_of(raw):
    if not raw.startswith(b"HTTP/1."):
        return None
    return int(raw.split(b" ", 2)[1])


def post_head(extra):
    return b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + extra


def final_response(raw):
    """The response after any 100 Continue."""
    while raw.startswith(b"HTTP/1.1 100 "):
        raw = raw.split(b"\r\n\r\n", 1)[1]
    return raw


class Trickle:
    """A client that sends `head` (with Expect: 100-continue, so that the
    gateway's 100 says the body phase began), then `prefix`, then one byte of
    `pad` every TRICKLE seconds, until the gateway answers and closes."""

    def __init__(self, port, head, prefix=b"", pad=b"a"):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.sendall(head + b"Expect: 100-continue\r\n\r\n")
        self.got = b""
        while b"\r\n\r\n" not in self.got:
            chunk = self.s.recv(4096)
            if not chunk:
                break
            self.got += chunk
        self.t_body = time.monotonic()  # the head was accepted
        self.stop = threading.Event()
        self.prefix, self.pad = prefix, pad
        self.sender = threading.Thread(target=self._send, daemon=True)
        self.sender.start()

    def _send(self):
        try:
            self.s.sendall(self.prefix)
            while not self.stop.wait(TRICKLE):
                self.s.sendall(self.pad)
        except OSError:
            pass

    def wait_end(self, limit):
        """Reads until the gateway closes, `limit` seconds at most; returns
        (the final response, seconds the body phase held the connection, closed)."""
        closed = False
        deadline = self.t_body + limit
        try:
            while time.monotonic() < deadline:
                self.s.settimeout(max(0.05, deadline - time.monotonic()))
                try:
                    chunk = self.s.recv(65536)
                except socket.timeout:
                    break
                if not chunk:
                    closed = True
                    break
                self.got += chunk
        except (ConnectionResetError, BrokenPipeError):
            closed = True
        held = time.monotonic() - self.t_body
        self.stop.set()
        self.s.close()
        self.sender.join(5)
        return final_response(self.got), held, closed


class BodyPhaseTest(Harness):
    quiet_backends = True  # RecordingProxy in front of the backend

    def setUp(self):
        super().setUp()
        _, port = self.start_llmsim("r1", args=FAST)
        self.rec = RecordingProxy(port)
        self.addCleanup(self.rec.close)
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % self.rec.port, "models": ["m"]}],
            access_log=self.path("access.log"),
            timeouts={"client_body": "30s", "client_body_grace": "%dms" % (GRACE * 1000),
                      "client_body_min_rate": "1KiB"},
            limits={"max_connections": 1, "max_body_bytes": "16MiB", "max_header_bytes": 8192})
        self.gwp, self.gw = self.start_gateway(conf)

    def held_then_freed(self, trickle, want_status):
        """While `trickle` holds the only slot, another client gets 503; the
        trickle gets want_status within the deadline, and the slot comes back."""
        self.assertTrue(trickle.got.startswith(b"HTTP/1.1 100 Continue\r\n"), trickle.got)
        s = socket.create_connection(("127.0.0.1", self.gw), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        refused = s.recv(4096)
        s.close()
        self.assertEqual(status_of(refused), 503, refused)
        self.assertIn(b"too_many_connections", refused)
        out, held, closed = trickle.wait_end(6 * GRACE * harness.SLOW)
        self.assertTrue(closed, "still open after %.1f s: %r" % (held, out[:200]))
        self.assertEqual(status_of(out), want_status, out[:300])
        self.assertIn(b"Connection: close\r\n", out)
        self.assertIn(b'"error"', out)
        self.assertLess(held, (GRACE + 1.5) * harness.SLOW, "held %.2f s" % held)
        print("  %s: held %.2f s, then %d" % (self.id().rsplit(".", 1)[1], held, want_status))
        self.assertEqual(self.rec.connections, 0, "a refused body reached the backend")

        def served():
            try:
                status, _, _, _ = post_json(self.gw, "/v1/chat/completions",
                                            chat_body(max_tokens=2), timeout=2)
            except OSError:
                return False
            return status == 200
        wait_until(served, timeout=5, what="the slot to come back")
        return out, held

    def test_declared_body_trickled_under_the_minimum_rate_is_cut(self):
        # Content-Length 16 MiB, then one byte every TRICKLE seconds: each read
        # is recent (client_body, the idle time, is 30 s), but the body as a
        # whole falls behind 1 KiB/s once the grace is over
        t = Trickle(self.gw, post_head(b"Content-Length: 16777216\r\n"), pad=b" ")
        out, held = self.held_then_freed(t, 408)
        self.assertIn(b"request_timeout", out)
        self.assertIn(b"slower than", out)
        self.assertGreater(held, GRACE * 0.9)
        log = harness.read_access_log(self.path("access.log"), 2)  # (workers log apart)
        self.assertIn((408, "request_timeout"), [(r["status"], r["error"]) for r in log])

    def test_trailer_that_never_ends_is_cut(self):
        # the last chunk, then a trailer field trickled for ever
        t = Trickle(self.gw, post_head(b"Transfer-Encoding: chunked\r\n"),
                    prefix=b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\nX-Pad: ")
        self.held_then_freed(t, 408)

    def test_chunk_extension_that_never_ends_is_cut(self):
        t = Trickle(self.gw, post_head(b"Transfer-Encoding: chunked\r\n"), prefix=b"1;")
        self.held_then_freed(t, 408)

    def test_body_above_the_minimum_rate_is_served_however_long_it_takes(self):
        # 3.6 KiB at about 2.4 KiB/s: 1.5 s, longer than the grace, never
        # behind the deadline (grace + one second per KiB received)
        pad = json.dumps(chat_body(max_tokens=2, pad="x" * 3600)).encode()
        s = socket.create_connection(("127.0.0.1", self.gw), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(post_head(b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(pad)))
        t0 = time.monotonic()
        for i in range(0, len(pad), 240):
            s.sendall(pad[i:i + 240])
            time.sleep(0.1)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        s.close()
        self.assertGreater(time.monotonic() - t0, GRACE * 1.2)
        self.assertEqual(status_of(got), 200, got[:300])


class KeySlotAtHeadTest(Harness):
    """A key's max_concurrency is taken when its head is authenticated: a
    holder of the key cannot hold more body phases than its limit."""

    quiet_backends = True

    def test_a_second_body_phase_of_a_key_at_its_limit_is_refused_at_the_head(self):
        import hashlib
        key = "sk-slow-0123456789"
        keys = self.path("keys.json")
        with open(keys, "w") as f:
            json.dump({"keys": [{"name": "slow", "sha256": hashlib.sha256(key.encode())
                                 .hexdigest(), "models": "*", "max_concurrency": 1}]}, f)
        _, port = self.start_llmsim("r1", args=FAST)
        rec = RecordingProxy(port)
        self.addCleanup(rec.close)
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % rec.port, "models": ["m"]}],
            access_log=self.path("access.log"), auth={"keys_file": keys})
        _, gw = self.start_gateway(conf)
        auth = b"Authorization: Bearer " + key.encode() + b"\r\n"
        head = post_head(auth + b"Content-Length: %d\r\n" % len(BODY))
        first = Trickle(gw, head, pad=b"")  # its body waits
        self.assertTrue(first.got.startswith(b"HTTP/1.1 100 Continue"), first.got)
        # the second head gets 429 at once, before any body byte is sent
        s = socket.create_connection(("127.0.0.1", gw), timeout=5)
        s.sendall(head + b"Expect: 100-continue\r\n\r\n")
        got = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except socket.timeout:
            pass  # (a gateway that let the head through waits for the body)
        s.close()
        self.assertEqual(status_of(got), 429, got)
        self.assertIn(b"key_limit_reached", got)
        self.assertIn(b"Retry-After: ", got)
        self.assertIn(b"Connection: close\r\n", got)
        # the first one completes, then the key is free again
        first.stop.set()
        first.s.sendall(BODY)
        rest = b""
        first.s.settimeout(10)
        while b'"usage"' not in rest:
            chunk = first.s.recv(65536)
            self.assertTrue(chunk, "closed before the answer")
            rest += chunk
        first.s.close()
        self.assertEqual(status_of(rest), 200, rest[:300])
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                    headers={"Authorization": "Bearer " + key})
        self.assertEqual(status, 200)
        self.assertEqual(sum(bytes(d).count(b"POST ") for d in rec.downstream), 2)


class StreamClientTest(Harness):
    """Clients of a stream: one that reads nothing, one that leaves."""

    def sim_running(self, port):
        with urllib.request.urlopen("http://127.0.0.1:%d/sim/state" % port, timeout=5) as r:
            return json.loads(r.read())["running"]

    def test_zero_window_reader_is_cut_at_the_stall_deadline_and_the_engine_stopped(self):
        # an engine that streams steadily (about 50 KB/s), a client that reads
        # nothing: the kernel's send buffer (megabytes on loopback) must not
        # hide the stall from client_stall
        _, port = self.start_llmsim("r1", args=FAST)
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            timeouts={"client_stall": "1s"}, limits={"stream_buffer_bytes": "16KiB"},
            access_log=self.path("access.log"))
        gwp, gw = self.start_gateway(conf)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", gw))
        payload = json.dumps(chat_body(stream=True, max_tokens=100000)).encode()
        s.sendall(post_head(b"Content-Length: %d\r\n\r\n" % len(payload)) + payload)
        s.settimeout(10)
        self.assertTrue(s.recv(256).startswith(b"HTTP/1.1 200"))
        t0 = time.monotonic()
        self.assertEqual(self.sim_running(port), 1)
        log = harness.read_access_log(self.path("access.log"), 1, timeout=10 * harness.SLOW)
        cut = time.monotonic() - t0
        self.assertEqual((log[0]["status"], log[0]["error"]), (200, "client_stalled"))
        gwp.wait_for(r"response from r1 cut: client_stalled")
        # the engine stopped generating for nobody
        wait_until(lambda: self.sim_running(port) == 0, timeout=5, what="the engine to stop")
        print("  zero-window reader cut %.2f s after its first byte" % cut)
        self.assertLess(cut, 8.0 * harness.SLOW)
        s.close()
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=3))
        self.assertEqual(status, 200)

    def test_client_that_leaves_mid_stream_is_logged_499_with_the_tokens_relayed(self):
        _, port = self.start_llmsim("r1", args=["--decode-ms", "20", "--decode-ms-per-seq", "0"])
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            access_log=self.path("access.log"))
        _, gw = self.start_gateway(conf)
        s = self.stream(gw, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=500))
        self.assertEqual(s.read_head(), 200)
        for _ in range(5):
            s.next_event()
        s.close()
        log = harness.read_access_log(self.path("access.log"), 1)
        r = log[0]
        self.assertEqual((r["status"], r["error"]), (499, "client_closed"))
        self.assertGreaterEqual(r["tokens"], 4)  # the role chunk may be one of the five
        self.assertLess(r["tokens"], 500)
        self.assertIsNotNone(r["ttft"])
        wait_until(lambda: self.sim_running(port) == 0, timeout=5, what="the engine to stop")



class IdleConnectionMemoryTest(Harness):
    """An idle keep-alive connection holds no request: it costs the gateway at
    most 2 KiB (its connection state and its bufferevent; the request's state
    is given back until the next request)."""

    N = 3000

    def test_an_idle_keepalive_connection_costs_at_most_2_kib(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard < self.N + 256:
            self.skipTest("needs %d descriptors" % (self.N + 256))
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, self.N + 256), hard))
        _, port = self.start_llmsim("r1", args=FAST + ["--slots", "64"])
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            workers=1, access_log=self.path("access.log"), timeouts={"client_idle": "300s"},
            admin="127.0.0.1:0")
        gwp, gw = self.start_gateway(conf)
        admin = int(gwp.wait_for(r"admin=[^ ]*:(\d+)").group(1))
        body = json.dumps(chat_body(max_tokens=1)).encode()
        request = post_head(b"Content-Length: %d\r\n\r\n" % len(body)) + body

        def answered(s):
            s.sendall(request)
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = s.recv(65536)
                self.assertTrue(chunk, "closed before the answer")
                got += chunk
            head, _, rest = got.partition(b"\r\n\r\n")
            n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(rest) < n:
                rest += s.recv(65536)
            return status_of(head)

        def open_idle(count, out):
            for _ in range(count):
                s = socket.create_connection(("127.0.0.1", gw), timeout=10)
                out.append(s)
                self.assertEqual(answered(s), 200)

        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        open_idle(200, socks)  # the pools and buffers a first request brings
        for s in socks:
            s.close()
        socks.clear()
        wait_until(lambda: harness.metric(harness.scrape(admin), "llmgate_connections") == 0,
                   what="the warm-up connections closed")
        rss0 = gwp.rss_kib()
        lists = [[] for _ in range(10)]
        threads = [threading.Thread(target=open_idle, args=(self.N // 10, lst)) for lst in lists]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for lst in lists:
            socks.extend(lst)
        self.assertEqual(len(socks), self.N)

        def per_conn():
            return (gwp.rss_kib() - rss0) * 1024 / self.N
        # (a sanitizer's or valgrind's memory is theirs: there the parking is
        # checked for what it must not break, below, not for its bytes)
        measured = not (harness.SANITIZED or harness.VALGRIND)
        try:
            wait_until(lambda: not measured or per_conn() < 2048, timeout=5, interval=0.2,
                       what="2 KiB or less per idle connection")
        except AssertionError:
            pass
        per = per_conn()
        print("  %d idle keep-alive connections: %.0f bytes each" % (self.N, per))
        if measured:
            self.assertLess(per, 2048)
        # idle ones still serve their next request (parked after their first
        # one), then, idle for more than a second after it (parked by the
        # worker's timer), the one after; and they leave cleanly
        for s in socks[-50:]:
            self.assertEqual(answered(s), 200)
        time.sleep(1.5)  # the idleness under test, not a wait for an event
        for s in socks[-50:]:
            self.assertEqual(answered(s), 200)
        for s in socks[:100]:
            s.close()
        wait_until(lambda: post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1))[0]
                   == 200, what="a fresh request")


if __name__ == "__main__":
    harness.main()
