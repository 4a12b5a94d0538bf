"""Faults from backends, injected with llmsim's fault modes (and, for the
cases llmsim has no knob for, tiny Python backends).

Before the first response byte reaches the client, a failure is retried on
another backend within the retry budget and the client never sees it; after
it, the client sees a cut stream (never a clean end) within stream_idle, and
no other stream is disturbed. All backends down: a fast 503. Large bodies
reach the backend whole however they arrive, and cost no fresh pages per
request once the gateway is warm.
"""

import hashlib
import json
import os
import socket
import threading
import time
import unittest

import harness
from harness import Harness, chat_body, http_request, post_json, wait_until

FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]
SLOWER = ["--decode-ms", "20", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]

# A backend for the faults llmsim has no knob for. Modes:
#   race     answers the first request of each connection (keep-alive), then
#            reads the next request and closes without answering: the gateway
#            reused a pooled connection the backend was closing.
#   garbage  answers every request with a response no parser may accept.
#   hash     answers with the SHA-256 of the request body as the content.
#   cut      as hash for the first request of each connection; of the next
#            one it reads 64 KiB and closes (unread bytes: a reset).
#   conncl   names its framing in Connection, on a keep-alive connection:
#            Content-Length (its only framing) on odd answers, Transfer-Encoding
#            and Content-Length on a chunked one on even answers; the content
#            says which answer of its connection it was.
#   bodiless answers its odd requests (counted over all its connections) with
#            a 204 that says Transfer-Encoding: chunked, and in a chunk a whole
#            response of its own ("smuggled"); its even ones as hash does.
TINY_BACKEND = r"""
import hashlib, socket, sys, threading
mode = sys.argv[1]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(64)
print("tiny ready %d" % s.getsockname()[1], flush=True)
BODY = (b'{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}')

def read_request(c, buf):
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return None, b""
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    while len(rest) < n:
        d = c.recv(65536)
        if not d:
            return None, b""
        rest += d
    LAST[0] = rest[:n]
    return head, rest[n:]
LAST = [b""]
ANSWERED = [0]

def cut(c, buf):
    while b"\r\n\r\n" not in buf or len(buf.partition(b"\r\n\r\n")[2]) < 65536:
        d = c.recv(65536)
        if not d:
            break
        buf += d
    print("tiny cut a body after %d bytes: %r" % (len(buf), buf[:5]), flush=True)
    c.close()
def answer(c, content):
    body = BODY.replace(b'"content":"ok"', b'"content":"%s"' % content)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
def serve(c):
    buf = b""
    served = 0
    while True:
        if mode == "cut" and served == 1:
            return cut(c, buf)
        if mode == "bodiless":
            head, buf = read_request(c, buf)
            if head is None:
                break
            ANSWERED[0] += 1
            if ANSWERED[0] % 2:
                fake = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(BODY)
                        + BODY.replace(b'"content":"ok"', b'"content":"smuggled"'))
                c.sendall(b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"%x\r\n%s\r\n0\r\n\r\n" % (len(fake), fake))
            else:
                answer(c, hashlib.sha256(LAST[0]).hexdigest().encode())
            continue
        if mode == "conncl":
            head, buf = read_request(c, buf)
            if head is None:
                break
            served += 1
            body = BODY.replace(b'"content":"ok"', b'"content":"answer %d"' % served)
            if served % 2:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          b"Connection: Content-Length\r\nContent-Length: %d\r\n\r\n"
                          % len(body) + body)
            else:
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          b"Connection: transfer-encoding, CONTENT-LENGTH\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                          % (len(body), body))
            continue
        if mode in ("hash", "cut"):
            head, buf = read_request(c, buf)
            if head is None:
                break
            answer(c, hashlib.sha256(LAST[0]).hexdigest().encode())
            served += 1
            continue
        head, buf = read_request(c, buf)
        if head is None:
            break
        if mode == "garbage":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok")
            print("tiny garbage", flush=True)
            break
        if served == 1:
            print("tiny closed a reused connection", flush=True)
            break
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)
        served += 1
        print("tiny served", flush=True)
    c.close()

while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


sim_state = harness.sim_state


def sim_control(port, obj):
    status, _, data = http_request(port, "POST", "/sim/control", obj)
    assert status == 200, (status, data)
    return json.loads(data)


read_log = harness.read_access_log


class FaultsTest(Harness):

    def replicas(self, specs):
        """specs: list of (name, models, extra args); returns {name: port}."""
        ports = {}
        for name, models, args in specs:
            _, ports[name] = self.start_llmsim(name, models=models, args=list(args))
        return ports

    def gateway(self, ports, models=None, **extra):
        backends = [{"name": n, "url": "http://127.0.0.1:%d" % p,
                     "models": (models or {}).get(n, ["m"])} for n, p in ports.items()]
        conf = self.base_config(backends, access_log=self.path("access.log"), **extra)
        conf.setdefault("health", {}).update({"eject_consecutive": 0})
        return self.start_gateway(conf)

    def tiny(self, mode):
        p = self.start([harness.PYTHON, "-c", TINY_BACKEND, mode], name="tiny-" + mode)
        return p, int(p.wait_for(r"tiny ready (\d+)").group(1))

    # ---- before the first byte: retried, invisible to the client ----------

    def test_refused_connections_are_retried_elsewhere(self):
        ports = self.replicas([("good", ["m"], FAST)])
        ports = {"dead": self.refusing_port(), **ports}
        _, gw = self.gateway(ports)
        t0 = time.monotonic()
        for _ in range(8):
            status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body())
            self.assertEqual(status, 200)
            self.assertEqual(hdrs["x-llmsim-replica"], "good")
        elapsed = time.monotonic() - t0
        log = read_log(self.path("access.log"), 8)
        self.assertTrue(all(r["status"] == 200 for r in log))
        retried = sum(r["attempt_count"] == 2 for r in log)
        self.assertGreater(retried, 0, log)
        # a refused backend is left alone for a second: not one retry per request
        self.assertLessEqual(retried, 1 + int(elapsed), log)

    def test_stall_before_first_byte_is_retried_elsewhere(self):
        ports = self.replicas([("stuck", ["m"], FAST + ["--fault", "stall@0"]),
                               ("good", ["m"], FAST)])
        _, gw = self.gateway(ports, timeouts={"first_byte": "500ms"})
        for _ in range(4):
            t0 = time.monotonic()
            status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(stream=False))
            self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, "good"))
            self.assertLess(time.monotonic() - t0, 3.0 * harness.SLOW)
        log = read_log(self.path("access.log"), 4)
        retried = [r for r in log if r["attempt_count"] == 2]
        self.assertTrue(retried, log)
        self.assertTrue(all(r["error"] == "first_byte_timeout" for r in retried), retried)

    def test_429_and_503_are_retried_and_retry_after_honoured(self):
        for code in (429, 503):
            with self.subTest(code=code):
                ports = self.replicas([("busy%d" % code, ["m"],
                                        FAST + ["--fault", "status@0:%d:600:3" % code]),
                                       ("good%d" % code, ["m"], FAST)])
                _, gw = self.gateway(ports)
                t0 = time.monotonic()
                replicas = set()
                while time.monotonic() - t0 < 1.5:
                    status, hdrs, _, _ = post_json(gw, "/v1/chat/completions", chat_body())
                    self.assertEqual(status, 200)
                    replicas.add(hdrs["x-llmsim-replica"])
                self.assertEqual(replicas, {"good%d" % code})
                # Retry-After: 3 s: the busy replica saw one request, not one per turn
                self.assertEqual(sim_state(ports["busy%d" % code])["requests"], 1)
                for p in list(self.procs):
                    p.kill()
                self.procs.clear()

    def test_pooled_connection_closed_on_reuse_is_retried(self):
        tiny, port = self.tiny("race")
        conf = self.base_config([{"name": "t", "url": "http://127.0.0.1:%d" % port,
                                  "models": ["m"]}], workers=1,
                                access_log=self.path("access.log"))
        _, gw = self.start_gateway(conf)
        for i in range(4):
            status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body())
            self.assertEqual(status, 200, obj)
        tiny.wait_for(r"tiny closed a reused connection")
        log = read_log(self.path("access.log"), 4)
        self.assertTrue(all(r["status"] == 200 and r["error"] is None for r in log), log)

    def test_long_prompt_cut_on_a_pooled_connection_is_sent_again_whole(self):
        # A 1 MiB prompt on a pooled connection goes straight to its socket,
        # more than the socket takes at once; the backend reads 64 KiB of it
        # and closes. Sent again (a keep-alive race: not counted as an
        # attempt), the body must arrive whole, every byte once and in
        # order: each backend answers the SHA-256 of the body it read.
        cutter, cport = self.tiny("cut")
        _, hport = self.tiny("hash")
        conf = self.base_config([{"name": "cut", "url": "http://127.0.0.1:%d" % cport,
                                  "models": ["m"]},
                                 {"name": "hash", "url": "http://127.0.0.1:%d" % hport,
                                  "models": ["m"]}], workers=1,
                                access_log=self.path("access.log"),
                                # no checks or scrapes: the tiny backends see requests only
                                health={"interval": "1h", "scrape_interval": 0,
                                        "eject_consecutive": 0})
        _, gw = self.start_gateway(conf)
        prompt = "".join("%07d " % i for i in range(2**17))  # 1 MiB, no two pieces alike
        body = chat_body(content=prompt)
        want = hashlib.sha256(json.dumps(body).encode()).hexdigest()
        # the rotation (weighted while the backends ramp up) decides which
        # request lands on cut's pooled connection: go on until one did
        sent = 0
        while sent < 40 and "tiny cut a body" not in cutter.output():
            status, _, obj, _ = post_json(gw, "/v1/chat/completions", body)
            self.assertEqual(status, 200, obj)
            self.assertEqual(obj["choices"][0]["message"]["content"], want)
            sent += 1
        m = cutter.wait_for(r"tiny cut a body after (\d+) bytes: b'POST '")
        self.assertGreater(int(m.group(1)), 65536)
        log = read_log(self.path("access.log"), sent)
        self.assertEqual({(r["status"], r["error"]) for r in log}, {(200, None)}, log)

    def hash_gateway(self):
        _, hport = self.tiny("hash")
        conf = self.base_config([{"name": "hash", "url": "http://127.0.0.1:%d" % hport,
                                  "models": ["m"]}], workers=1,
                                health={"interval": "1h", "scrape_interval": 0,
                                        "eject_consecutive": 0})
        return self.start_gateway(conf)

    def test_large_body_arriving_in_pieces_is_forwarded_whole(self):
        # The gateway reads the rest of a declared body in one read and
        # stops at a short one; pieces of every size, each sent after the
        # gateway has had time to read the one before, must arrive whole
        # and in order (the backend answers the SHA-256 of what it read).
        gwp, gw = self.hash_gateway()
        body = json.dumps(chat_body(content="".join("%07d " % i for i in range(40000))))
        data = body.encode()
        want = hashlib.sha256(data).hexdigest()
        head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data))
        s = socket.create_connection(("127.0.0.1", gw), timeout=15)
        s.sendall(head.encode() + data[:1])
        off = 1
        for n in (4000, 1, 70000, 131072, 60000):
            time.sleep(0.02)  # the gap that makes the gateway's reads short
            s.sendall(data[off:off + n])
            off += n
        s.sendall(data[off:])
        raw = b""
        while b'"finish_reason"' not in raw:
            chunk = s.recv(65536)
            self.assertTrue(chunk, raw)
            raw += chunk
        s.close()
        self.assertIn(b"HTTP/1.1 200", raw)
        self.assertIn(want.encode(), raw)
        self.assertIsNone(gwp.p.poll())

    @unittest.skipIf(harness.VALGRIND or harness.SANITIZED,
                     "valgrind and the sanitizers bring their own allocator")
    def test_large_bodies_fault_no_pages_in_once_warm(self):
        # glibc gives freed blocks of 128 KiB and more back to the kernel by
        # default, and a 100 KiB body read in one piece needs one: each
        # request then faulted fresh pages in (0.8-10 per request with 8
        # connections, and a sixth of the CPU per request). The gateway
        # keeps them. Once warm, a burst may still touch new heap when more
        # bodies are in flight at once than ever before (a first touch, not
        # a return), so the quietest of three bursts is what is judged.
        gwp, gw = self.hash_gateway()
        body = chat_body(content="x" * 100 * 1024)
        want = hashlib.sha256(json.dumps(body).encode()).hexdigest()

        def minflt():
            with open("/proc/%d/stat" % gwp.pid) as f:
                return int(f.read().rsplit(")", 1)[1].split()[7])

        def client(n, errors):
            for _ in range(n):
                status, _, obj, _ = post_json(gw, "/v1/chat/completions", body)
                if status != 200 or obj["choices"][0]["message"]["content"] != want:
                    errors.append((status, obj))

        def burst(n):
            errors = []
            threads = [threading.Thread(target=client, args=(n, errors)) for _ in range(8)]
            before = minflt()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            return minflt() - before

        burst(10)  # warm: pools, the heap's high-water mark
        faults = [burst(20) for _ in range(3)]
        self.assertLess(min(faults), 0.25 * 8 * 20, "page faults in bursts of 160 requests: %s"
                        % faults)

    def test_a_body_of_values_nobody_reads_costs_only_itself(self):
        # {"model":"m","x":[0,0,...]} at the 16 MiB limit: a tape of every
        # value (16 bytes each) took 128 MiB for it, and a failed allocation
        # aborted the gateway. The scan keeps what the gateway reads: the
        # peak grows by about the body held (not measured under valgrind or
        # a sanitizer: their allocators), and the body still reaches the
        # backend whole.
        gwp, gw = self.hash_gateway()

        def hwm_kib():
            with open("/proc/%d/status" % gwp.pid) as f:
                return int(next(ln for ln in f if ln.startswith("VmHWM:")).split()[1])

        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 200)
        before = hwm_kib()
        head = b'{"model":"m","x":['
        data = head + b"0," * ((16 * 1024 * 1024 - len(head) - 3) // 2) + b"0]}"
        status, _, raw = http_request(gw, "POST", "/v1/chat/completions", data)
        self.assertEqual(status, 200, raw[:300])
        self.assertIn(hashlib.sha256(data).hexdigest().encode(), raw)
        grown = hwm_kib() - before
        print("peak RSS grew by %.1f MiB for a %.1f MiB body" % (grown / 1024, len(data) / 2**20))
        if not (harness.VALGRIND or harness.SANITIZED):
            self.assertLess(grown, 64 * 1024)
        # past what the scan may keep (2^20 values read: prompts here): 413,
        # that request alone
        data = b'{"model":"m","prompt":[' + b'"",' * (1 << 20) + b'""]}'
        status, _, raw = http_request(gw, "POST", "/v1/completions", data)
        self.assertEqual(status, 413, raw[:300])
        obj = json.loads(raw)
        self.assertEqual(obj["error"]["code"], "too_many_values")
        self.assertEqual(obj["error"]["type"], "invalid_request_error")
        self.assertIn("more than 1048576 values the gateway reads", obj["error"]["message"])
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 200)
        self.assertIsNone(gwp.p.poll())

    def test_framing_named_in_connection_still_frames_the_response(self):
        # A backend's Connection header named Content-Length, its answer's
        # only framing: dropped as hop-by-hop, the client got a keep-alive 200
        # with no length and hung (or read its next answer as this body).
        # Framing is never a connection option: the answer keeps its
        # Content-Length (a chunked one is chunked again), and the client's
        # connection serves the next request.
        _, port = self.tiny("conncl")
        conf = self.base_config([{"name": "t", "url": "http://127.0.0.1:%d" % port,
                                  "models": ["m"]}], workers=1,
                                health={"interval": "1h", "scrape_interval": 0,
                                        "eject_consecutive": 0})
        gwp, gw = self.start_gateway(conf)
        data = json.dumps(chat_body()).encode()
        req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(data)
               + data)
        s = socket.create_connection(("127.0.0.1", gw), timeout=10)
        f = s.makefile("rb")
        for i in range(1, 5):
            s.sendall(req)
            status = f.readline()
            self.assertTrue(status.startswith(b"HTTP/1.1 200"), status)
            hdrs = {}
            while True:
                line = f.readline()
                self.assertTrue(line, "connection closed in the head of answer %d" % i)
                if line == b"\r\n":
                    break
                k, _, v = line.decode().partition(":")
                hdrs[k.strip().lower()] = v.strip()
            self.assertNotIn("connection", hdrs)  # keep-alive: the client's to reuse
            if i % 2:
                self.assertNotIn("transfer-encoding", hdrs)
                body = f.read(int(hdrs["content-length"]))
            else:
                self.assertEqual(hdrs.get("transfer-encoding"), "chunked")
                self.assertNotIn("content-length", hdrs)
                body = b""
                while True:
                    n = int(f.readline().split(b";")[0], 16)
                    chunk = f.read(n + 2)
                    if n == 0:
                        break
                    body += chunk[:-2]
            obj = json.loads(body)
            self.assertEqual(obj["choices"][0]["message"]["content"], "answer %d" % i)
        s.close()
        self.assertIsNone(gwp.p.poll())

    def test_no_body_after_a_204_whatever_its_head_says(self):
        # A 204 (like a 304 or a 1xx) ends at its empty line (RFC 9112 6.3);
        # llhttp read a body after it when its head said chunked, and the
        # gateway relayed that body after a head that has none: an HTTP/1.0
        # client got a whole response of the backend's making as the answer
        # to its next request. The 204 goes out without framing, the bytes
        # after it are not relayed (that backend connection is closed), and
        # the next request gets its own answer; for HTTP/1.1 clients too.
        _, port = self.tiny("bodiless")
        conf = self.base_config([{"name": "t", "url": "http://127.0.0.1:%d" % port,
                                  "models": ["m"]}], workers=1,
                                health={"interval": "1h", "scrape_interval": 0,
                                        "eject_consecutive": 0})
        gwp, gw = self.start_gateway(conf)
        data = json.dumps(chat_body()).encode()
        for version in (b"1.0", b"1.1"):
            req = (b"POST /v1/chat/completions HTTP/%s\r\nHost: x\r\nConnection: keep-alive\r\n"
                   b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                   % (version, len(data)) + data)
            s = socket.create_connection(("127.0.0.1", gw), timeout=10)
            f = s.makefile("rb")
            for want in (204, 200):
                s.sendall(req)
                status = f.readline()
                hdrs = {}
                while True:
                    line = f.readline()
                    self.assertTrue(line, "connection closed in a head")
                    if line == b"\r\n":
                        break
                    k, _, v = line.decode().partition(":")
                    hdrs[k.strip().lower()] = v.strip()
                self.assertTrue(status.startswith(b"HTTP/1.1 %d" % want), (version, status))
                if want == 204:
                    self.assertNotIn("transfer-encoding", hdrs)
                    self.assertNotIn("content-length", hdrs)
                    continue
                obj = json.loads(f.read(int(hdrs["content-length"])))
                self.assertEqual(obj["choices"][0]["message"]["content"],
                                 hashlib.sha256(data).hexdigest(), version)
            s.close()
        self.assertIsNone(gwp.p.poll())

    def test_malformed_response_is_retried_elsewhere(self):
        _, bad = self.tiny("garbage")
        ports = self.replicas([("good", ["m"], FAST)])
        _, gw = self.gateway({"bad": bad, **ports})
        for _ in range(4):
            status, hdrs, _, _ = post_json(gw, "/v1/chat/completions", chat_body())
            self.assertEqual((status, hdrs.get("x-llmsim-replica")), (200, "good"))

    def test_retry_budget_prevents_a_retry_storm(self):
        # One replica fails every request it gets (no Retry-After); each of its
        # failures wants a retry. The budget caps retries at 10 + ratio x requests.
        ports = self.replicas([("bad", ["m"], FAST + ["--fault", "status@0:503:600:0"]),
                               ("good", ["m"], FAST)])
        _, gw = self.gateway(ports, routing={"policy": "round_robin",
                                             "retry": {"attempts": 2, "budget_ratio": 0.1,
                                                       "budget_min": 0}},
                             workers=1)
        n = 80
        statuses = []
        for _ in range(n):
            status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body())
            statuses.append(status)
        log = read_log(self.path("access.log"), n)
        retries = sum(r["attempt_count"] - 1 for r in log)
        first_bad = sim_state(ports["bad"])["requests"]
        self.assertGreater(first_bad, 30)              # round robin sent it half the requests
        self.assertLessEqual(retries, 10 + 0.1 * n + 1)  # but they were not all retried
        self.assertGreater(statuses.count(503), 0)      # the rest got the backend's answer
        self.assertEqual(statuses.count(200) + statuses.count(503), n)

    def test_all_backends_down_is_a_fast_503(self):
        ports = {"d1": self.refusing_port(), "d2": self.refusing_port()}
        _, gw = self.gateway(ports)
        for stream in (False, True):
            t0 = time.monotonic()
            status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(stream=stream))
            self.assertEqual(status, 503, obj)
            self.assertIn("retry-after", hdrs)
            self.assertLess(time.monotonic() - t0, 1.0 * harness.SLOW)

    # ---- after the first byte: a cut, and nobody else notices -------------

    def _two_streams(self, fault_args=(), control=None, stream_idle="1s"):
        """A stream on replica `bad` (model a) and one on `good` (model m) at
        once; the fault hits `bad` mid-stream. Returns (bad stream, good
        stream, seconds from the fault to the end of the bad stream)."""
        ports = self.replicas([("bad", ["a"], SLOWER + list(fault_args)),
                               ("good", ["m"], SLOWER)])
        _, gw = self.gateway(ports, models={"bad": ["a"], "good": ["m"]},
                             timeouts={"stream_idle": stream_idle})
        sa = self.stream(gw, "POST", "/v1/chat/completions",
                         chat_body(model="a", stream=True, max_tokens=200))
        sb = self.stream(gw, "POST", "/v1/chat/completions",
                         chat_body(model="m", stream=True, max_tokens=60))
        self.assertEqual(sa.read_head(), 200)
        self.assertEqual(sb.read_head(), 200)
        sa.next_event()
        sb.next_event()
        t_fault = time.monotonic()
        if control is not None:
            sim_control(ports["bad"], control)
        harness.read_concurrently([sa, sb], timeout=15)
        return sa, sb, time.monotonic() - t_fault

    def assert_cut(self, s):
        self.assertIn(s.ended, ("eof", "reset"), "the stream ended %s" % s.ended)
        self.assertNotEqual(s.events[-1][1] if s.events else None, "[DONE]")

    def assert_clean(self, s, tokens):
        self.assertEqual(s.ended, "complete")
        self.assertEqual(s.events[-1][1], "[DONE]")
        # the tokens, then a last chunk with finish_reason (and no content)
        self.assertEqual(len([e for e in s.events if '"content"' in e[1]]), tokens)

    def test_crash_mid_stream_cuts_only_that_stream(self):
        sa, sb, took = self._two_streams(control={"fault": "crash@0.1"})
        self.assert_cut(sa)
        self.assertLess(took, 3.0 * harness.SLOW)
        self.assert_clean(sb, 60)
        log = read_log(self.path("access.log"), 2)
        cut = [r for r in log if r["model"] == "a"][0]
        self.assertIn(cut["error"], ("upstream_closed_mid_response", "upstream_reset"))

    def test_connection_closed_mid_stream_cuts_only_that_stream(self):
        sa, sb, _ = self._two_streams(fault_args=["--fault", "close-after-tokens:5"])
        self.assert_cut(sa)
        self.assertLessEqual(len(sa.events), 5)
        self.assert_clean(sb, 60)

    def test_stall_mid_stream_is_cut_after_stream_idle(self):
        sa, sb, took = self._two_streams(control={"fault": "stall@0:30"}, stream_idle="1s")
        self.assert_cut(sa)
        self.assertGreater(took, 0.8)
        self.assertLess(took, 4.0 * harness.SLOW)
        self.assert_clean(sb, 60)
        log = read_log(self.path("access.log"), 2)
        cut = [r for r in log if r["model"] == "a"][0]
        self.assertEqual(cut["error"], "stream_idle_timeout")


if __name__ == "__main__":
    harness.main()
