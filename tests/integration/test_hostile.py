"""Hostile clients: request smuggling and desync attempts, malformed heads,
slow peers, connection floods, file-descriptor exhaustion.

Every malformed request goes to a gateway whose only backend sits behind a
RecordingProxy: besides the status and the closed connection, each case
checks that not one byte reached the backend. A well-formed request at the
end proves the recorder would have seen it.
"""

import json
import os
import resource
import socket
import threading
import time

import harness
from harness import (Harness, RecordingProxy, StreamReader, chat_body, http_request, post_json,
                     wait_until)

FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]
BODY = json.dumps(chat_body(max_tokens=2)).encode()

# A backend that answers one POST with an endless SSE stream, as fast as the
# socket takes it, and reports when the gateway closes it.
FLOOD_SERVER = r"""
import socket, sys
ev = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n' % (b"x" * 200)
chunk = b"%x\r\n" % (len(ev) * 100) + ev * 100 + b"\r\n"
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print("flood ready %d" % s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    req = b""
    while b"\r\n\r\n" not in req:
        req += c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    sent = 0
    try:
        while True:
            c.sendall(chunk)
            sent += len(chunk)
    except OSError as e:
        print("flood aborted after %d bytes: %s" % (sent, e.__class__.__name__), flush=True)
    c.close()
"""


def exchange(port, data, timeout=5.0, chunks=None, delay=0.0):
    """Sends data (or a list of chunks with a delay between them); returns
    (bytes received, closed) where closed means the gateway closed the
    connection (EOF or reset) within the timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # pieces stay pieces
    out = b""
    closed = False
    try:
        for piece in (chunks or [data]):
            s.sendall(piece)
            if delay:
                time.sleep(delay)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s.settimeout(max(0.05, deadline - time.monotonic()))
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            out += chunk
    except socket.timeout:
        pass
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    s.close()
    return out, closed


def status_of(raw):
    if not raw.startswith(b"HTTP/1."):
        return None
    return int(raw.split(b" ", 2)[1])


def req(head, body=b""):
    return head.replace(b"\n", b"\r\n") + body


def post_head(extra):
    return b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + extra


# (name, raw request, expected status). Each must be refused, the connection
# closed, and nothing forwarded.
SMUGGLING = [
    ("two different content-lengths",
     post_head(b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n" % len(BODY)) + BODY, 400),
    ("duplicated content-length",
     post_head(b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (len(BODY), len(BODY)))
     + BODY, 400),
    ("content-length list",
     post_head(b"Content-Length: %d, %d\r\n\r\n" % (len(BODY), len(BODY))) + BODY, 400),
    ("signed content-length", post_head(b"Content-Length: +%d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("content-length with transfer-encoding",
     post_head(b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n")
     + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n", 400),
    ("transfer-encoding with content-length",
     post_head(b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n")
     + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n", 400),
    ("transfer-encoding not ending in chunked",
     post_head(b"Transfer-Encoding: chunked, identity\r\n\r\n") + BODY, 400),
    ("unknown transfer-encoding", post_head(b"Transfer-Encoding: gzip\r\n\r\n") + BODY, 400),
    # chunked last, after a coding the gateway does not decode: 501
    ("gzip then chunked",
     post_head(b"Transfer-Encoding: gzip, chunked\r\n\r\n")
     + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n", 501),
    ("unknown coding then chunked",
     post_head(b"Transfer-Encoding: x-custom ,chunked\r\n\r\n")
     + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n", 501),
    ("empty element before chunked",
     post_head(b"Transfer-Encoding: , chunked\r\n\r\n")
     + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n", 400),
    ("transfer-encoding twice",
     post_head(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n")
     + b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n", 400),
    ("transfer-encoding with space before colon",
     post_head(b"Transfer-Encoding : chunked\r\nContent-Length: 4\r\n\r\n") + b"0\r\n\r\n", 400),
    ("malformed chunk size", post_head(b"Transfer-Encoding: chunked\r\n\r\n") + b"zz\r\n", 400),
    ("negative chunk size",
     post_head(b"Transfer-Encoding: chunked\r\n\r\n") + b"-5\r\nhello\r\n0\r\n\r\n", 400),
    ("overflowing chunk size",
     post_head(b"Transfer-Encoding: chunked\r\n\r\n") + b"1ffffffffffffffff\r\nx\r\n", 400),
    ("chunk data without CRLF",
     post_head(b"Transfer-Encoding: chunked\r\n\r\n") + b"2\r\n{}XX0\r\n\r\n", 400),
    ("chunk size with a space",
     post_head(b"Transfer-Encoding: chunked\r\n\r\n") + b"2 \r\n{}\r\n0\r\n\r\n", 400),
    ("obs-fold", post_head(b"X-Folded: a\r\n b\r\nContent-Length: %d\r\n\r\n" % len(BODY))
     + BODY, 400),
    ("obs-fold with a tab", post_head(b"X-Folded: a\r\n\tb\r\nContent-Length: %d\r\n\r\n"
                                      % len(BODY)) + BODY, 400),
    ("bare CR in a header value",
     post_head(b"X-A: a\rb\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("bare CR ending a header line",
     post_head(b"X-A: a\rContent-Length: %d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("bare LF line endings",
     b"POST /v1/chat/completions HTTP/1.1\nHost: gw\nContent-Length: %d\n\n" % len(BODY)
     + BODY, 400),
    ("bare LF after the request line",
     b"POST /v1/chat/completions HTTP/1.1\nHost: gw\r\nContent-Length: %d\r\n\r\n" % len(BODY)
     + BODY, 400),
    ("NUL in a header value",
     post_head(b"X-A: a\x00b\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("NUL in a header name",
     post_head(b"X-\x00A: a\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("NUL in the target",
     b"POST /v1/chat/completions\x00 HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n"
     % len(BODY) + BODY, 400),
    ("space in a header name",
     post_head(b"X A: a\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("space before the colon",
     post_head(b"Content-Length : %d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("header line without colon",
     post_head(b"Junk\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY, 400),
    # an empty name, which llhttp 8 takes (the class of HAProxy's CVE-2023-25725)
    ("empty header name",
     post_head(b": x\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("empty header name after a field",
     post_head(b"X-A: 1\r\n: x\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("invalid method", b"P0ST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n", 400),
    ("lower-case method", b"post /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n\r\n", 400),
    ("CONNECT", b"CONNECT backend:80 HTTP/1.1\r\nHost: backend:80\r\n\r\n", 400),
    # a well-formed version the gateway does not speak: 505 (a malformed one: 400)
    ("HTTP/2.0", post_head(b"").replace(b"HTTP/1.1", b"HTTP/2.0")
     + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY, 505),
    ("HTTP/1.2", post_head(b"").replace(b"HTTP/1.1", b"HTTP/1.2")
     + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY, 505),
    ("HTTP/3.0", post_head(b"").replace(b"HTTP/1.1", b"HTTP/3.0")
     + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY, 505),
    ("HTTP/0.9 request", b"GET /v1/models\r\n\r\n", 400),
    ("garbage version", post_head(b"").replace(b"HTTP/1.1", b"HTXP/1.1")
     + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY, 400),
    ("absolute-form target",
     b"POST http://backend/v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: %d"
     b"\r\n\r\n" % len(BODY) + BODY, 400),
    ("fragment in the target",
     b"POST /v1/chat/completions#frag HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n"
     % len(BODY) + BODY, 400),
    ("two Host headers",
     post_head(b"Host: other\r\nContent-Length: %d\r\n\r\n" % len(BODY)) + BODY, 400),
    ("no Host in HTTP/1.1",
     b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY,
     400),
    ("invalid Host", post_head(b"").replace(b"Host: gw", b"Host: a b/c")
     + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY, 400),
    ("oversized request line",
     b"GET /v1/models?" + b"a" * 20000 + b" HTTP/1.1\r\nHost: gw\r\n\r\n", 414),
    ("too many headers",
     b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n"
     + b"".join(b"X-H%d: v\r\n" % i for i in range(120)) + b"\r\n", 431),
    ("oversized header",
     b"GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n", 431),
    ("oversized body",
     post_head(b"Content-Length: 200000\r\n\r\n") + b"{" * 1000, 413),
    ("oversized chunked body",
     post_head(b"Transfer-Encoding: chunked\r\n\r\n") + (b"4000\r\n" + b" " * 0x4000 + b"\r\n")
     * 8, 413),
    # framing is counted: extensions and trailers against max_header_bytes (besides the
    # head's), every framing byte with the data against max_body_bytes
    ("chunk extension flood",
     post_head(b"Transfer-Encoding: chunked\r\n\r\n") + b"1;" + b"a" * 200000, 413),
    ("chunk extensions over many chunks",
     post_head(b"Transfer-Encoding: chunked\r\n\r\n") + b"1;e=" + b"v" * 900 + b"\r\n \r\n"
     + (b"1;e=" + b"v" * 900 + b"\r\n \r\n") * 12, 413),
    ("trailer flood",
     post_head(b"Transfer-Encoding: chunked\r\n\r\n") + b"%x\r\n" % len(BODY) + BODY
     + b"\r\n0\r\nX-Pad: " + b"a" * 200000, 431),
    ("chunk size line flood",
     post_head(b"Transfer-Encoding: chunked\r\n\r\n") + b"0" * 100000 + b"1\r\n \r\n0\r\n\r\n", 413),
]


class HostileTest(Harness):
    quiet_backends = True  # RecordingProxy in front of the backends

    def gateway(self, backend_port, **extra):
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % backend_port, "models": ["m"]}],
            access_log=self.path("access.log"), **extra)
        conf.setdefault("limits", {}).update({"max_header_bytes": 8192, "max_headers": 100,
                                              "max_body_bytes": 65536})
        return self.start_gateway(conf)

    def recorded_backend(self):
        _, port = self.start_llmsim("r1", args=FAST)
        rec = RecordingProxy(port)
        self.addCleanup(rec.close)
        return rec

    def test_malformed_requests_are_refused_and_never_forwarded(self):
        rec = self.recorded_backend()
        _, gw = self.gateway(rec.port)
        for name, raw, want in SMUGGLING:
            with self.subTest(name):
                out, closed = exchange(gw, raw)
                self.assertEqual(status_of(out), want, "%s: got %r" % (name, out[:200]))
                self.assertTrue(closed, "%s: the connection stayed open" % name)
                body = out.split(b"\r\n\r\n", 1)[1]
                self.assertIn(b'"error"', body)
                self.assertIn(b"Connection: close\r\n", out)
        # a request smuggled behind a refused one is never read
        out, closed = exchange(gw, SMUGGLING[0][1] + post_head(b"Content-Length: %d\r\n\r\n"
                                                               % len(BODY)) + BODY)
        self.assertEqual(out.count(b"HTTP/1.1 "), 1, out)
        self.assertTrue(closed)
        time.sleep(0.3)  # let a stray forward (if any) reach the recorder
        self.assertEqual(rec.connections, 0, "bytes reached the backend: %r"
                         % [bytes(d[:300]) for d in rec.downstream])
        # control: a well-formed request does reach it, through the same recorder
        out, _ = exchange(gw, post_head(b"Content-Length: %d\r\nConnection: close\r\n\r\n"
                                        % len(BODY)) + BODY)
        self.assertEqual(status_of(out), 200, out[:300])
        self.assertEqual(rec.connections, 1)

    def test_checks_hold_when_the_head_arrives_in_pieces(self):
        # A head trickled in small reads is checked as a whole: a fold or a
        # bare LF in an early piece is found too.
        rec = self.recorded_backend()
        _, gw = self.gateway(rec.port)
        names = ("obs-fold", "obs-fold with a tab", "bare LF after the request line",
                 "empty header name after a field", "fragment in the target",
                 "bare CR in a header value", "two different content-lengths",
                 "content-length with transfer-encoding", "two Host headers")
        for name, raw, want in [c for c in SMUGGLING if c[0] in names]:
            with self.subTest(name):
                head_end = raw.index(b"\r\n\r\n") if b"\r\n\r\n" in raw else len(raw)
                pieces = [raw[i:i + 3] for i in range(0, head_end, 3)] + [raw[head_end:]]
                out, closed = exchange(gw, None, chunks=pieces, delay=0.005)
                self.assertEqual(status_of(out), want, "%s: got %r" % (name, out[:200]))
                self.assertTrue(closed)
        time.sleep(0.3)
        self.assertEqual(rec.connections, 0)

    def test_split_and_pipelined_valid_requests_still_work(self):
        # The same checks must not refuse legitimate framing: a chunked body,
        # a head split across reads, two pipelined requests.
        rec = self.recorded_backend()
        _, gw = self.gateway(rec.port)
        chunked = post_head(b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n") + \
            b"%x;ext=1\r\n" % len(BODY) + BODY + b"\r\n0\r\nX-Trailer: t\r\n\r\n"
        out, closed = exchange(gw, None, chunks=[chunked[:7], chunked[7:60], chunked[60:]],
                               delay=0.05)
        self.assertEqual(status_of(out), 200, out[:300])
        self.assertTrue(closed)
        one = post_head(b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY
        last = post_head(b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY)) + BODY
        out, closed = exchange(gw, one + last)
        self.assertEqual(out.count(b"HTTP/1.1 200 OK"), 2, out[:400])
        self.assertTrue(closed)
        # an upgrade offer is ignored (RFC 9110 section 7.8): answered, not switched
        h2c = post_head(b"Connection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\n"
                        b"HTTP2-Settings: AAMA\r\nX-Forwarded-Proto: https\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY
        out, closed = exchange(gw, h2c)
        self.assertEqual(status_of(out), 200, out[:300])
        # what went upstream is one request per client request, each with one
        # Content-Length, no Transfer-Encoding, no trailer, no hop-by-hop field
        wait_until(lambda: sum(d.count(b"POST ") for d in rec.downstream) == 4,
                   what="four forwarded requests")
        for d in rec.downstream:
            for head in [p.split(b"\r\n\r\n")[0] for p in bytes(d).split(b"POST ")[1:]]:
                low = head.lower()
                self.assertEqual(low.count(b"content-length:"), 1, head)
                self.assertEqual(low.count(b"host:"), 1, head)
                # the scheme is the gateway's to say, never the client's
                self.assertEqual(low.count(b"x-forwarded-proto:"), 1, head)
                self.assertIn(b"x-forwarded-proto: http\r\n", low)
                for name in (b"transfer-encoding", b"x-trailer", b"upgrade", b"http2-settings",
                             b"connection"):
                    self.assertNotIn(name, low)

    def test_pipelined_flood_is_bounded_then_all_answered(self):
        # A client pipelines 16 MB of requests behind one that takes a second.
        # The gateway reads at most max_header_bytes + 64 KiB ahead (what it
        # has not read stays in the kernel and the client's send blocks), and
        # once the first answer is out it reads on and answers every request,
        # in order.
        _, port = self.start_llmsim("r1", args=FAST)
        _, gw = self.gateway(port)
        pad = json.dumps(chat_body(max_tokens=2, pad="x" * 60000)).encode()
        slow = json.dumps(chat_body(max_tokens=500)).encode()
        reqs = [post_head(b"Content-Length: %d\r\n\r\n" % len(slow)) + slow]
        reqs += [post_head(b"Content-Length: %d\r\n\r\n" % len(pad)) + pad] * 290
        reqs.append(post_head(b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY))
                    + BODY)
        data = b"".join(reqs)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 256 * 1024)
        s.connect(("127.0.0.1", gw))
        sent = [0]

        def send():
            view = memoryview(data)
            try:
                while sent[0] < len(data):
                    sent[0] += s.send(view[sent[0]:sent[0] + 65536])
            except OSError:
                pass
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        out = b""
        s.settimeout(30)
        while b"HTTP/1.1 200" not in out:  # the slow answer's head
            chunk = s.recv(65536)
            self.assertTrue(chunk, "closed before the first answer")
            out += chunk
        ahead = sent[0]
        self.assertGreater(len(data), 16 * 2**20)
        self.assertLess(ahead, 8 * 2**20, "the gateway read %d bytes ahead" % ahead)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        sender.join(10)
        s.close()
        self.assertEqual(sent[0], len(data))
        self.assertEqual(out.count(b"HTTP/1.1 200 OK"), len(reqs), out[-300:])
        self.assertNotIn(b"HTTP/1.1 4", out)
        self.assertNotIn(b"HTTP/1.1 5", out)

    # ---- slow peers --------------------------------------------------------

    def test_slowloris_head_is_cut_at_the_header_deadline(self):
        rec = self.recorded_backend()
        _, gw = self.gateway(rec.port, timeouts={"client_header": "1s"})
        head = post_head(b"Content-Length: %d\r\n" % len(BODY))
        s = socket.create_connection(("127.0.0.1", gw), timeout=10)
        t0 = time.monotonic()
        out = b""
        closed_at = None
        # one byte every 100 ms: each read is recent, but the head as a whole
        # is late after 1 s, and must be refused then, not when the bytes stop
        s.settimeout(0.1)
        for i in range(80):
            try:
                s.sendall(head[i:i + 1] if i < len(head) else b"X")
                chunk = s.recv(4096)
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed_at = time.monotonic()
                break
            out += chunk
            if not chunk:
                closed_at = time.monotonic()
                break
        s.close()
        self.assertEqual(status_of(out), 408, out)
        self.assertIsNotNone(closed_at, "still open after 8 s of trickling")
        self.assertLess(closed_at - t0, 3.0 * harness.SLOW)
        self.assertEqual(rec.connections, 0)

    def test_slow_body_is_cut_after_the_body_timeout(self):
        rec = self.recorded_backend()
        _, gw = self.gateway(rec.port, timeouts={"client_body": "500ms"})
        t0 = time.monotonic()
        out, closed = exchange(gw, post_head(b"Content-Length: %d\r\n\r\n" % len(BODY))
                               + BODY[:10], timeout=5)
        self.assertEqual(status_of(out), 408, out)
        self.assertTrue(closed)
        self.assertLess(time.monotonic() - t0, 4.0)
        self.assertEqual(rec.connections, 0)

    def test_idle_keepalive_connection_is_closed(self):
        _, port = self.start_llmsim("r1", args=FAST)
        _, gw = self.gateway(port, timeouts={"client_idle": "500ms"})
        s = socket.create_connection(("127.0.0.1", gw), timeout=10)
        s.sendall(post_head(b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY)
        got = b""
        while b'"usage"' not in got:
            got += s.recv(65536)
        t0 = time.monotonic()
        s.settimeout(10)
        rest = s.recv(65536)  # blocks until the gateway closes the idle connection
        idle = time.monotonic() - t0
        s.close()
        self.assertEqual(rest, b"", "the gateway sent bytes on an idle connection")
        self.assertGreater(idle, 0.3)
        self.assertLess(idle, 5.0)

    def test_requests_longer_than_the_client_timeouts_complete(self):
        """The client's header and idle timeouts stay armed while a response is on
        its way and must not cut it; the idle time counts again once it is out."""
        _, port = self.start_llmsim("r1", args=["--decode-ms", "100", "--decode-ms-per-seq", "0"])
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            timeouts={"client_header": "400ms", "client_idle": "400ms"},
            access_log=self.path("access.log"))
        _, gw = self.start_gateway(conf)
        s = socket.create_connection(("127.0.0.1", gw), timeout=10)
        got = b""

        def recv():
            data = s.recv(65536)
            self.assertTrue(data, "the gateway closed the connection mid-response")
            return data

        def response():
            nonlocal got
            while b"\r\n\r\n" not in got:
                got += recv()
            head, _, rest = got.partition(b"\r\n\r\n")
            if b"transfer-encoding: chunked" in head.lower():
                while not rest.endswith(b"0\r\n\r\n"):
                    rest += recv()
                got = b""
                return head, harness.dechunk(rest)[0]
            n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(rest) < n:
                rest += recv()
            got = rest[n:]
            return head, rest[:n]

        for stream in (False, True):
            body = json.dumps(chat_body(stream=stream, max_tokens=12)).encode()
            t0 = time.monotonic()
            s.sendall(post_head(b"Content-Length: %d\r\n\r\n" % len(body)) + body)
            head, data = response()
            took = time.monotonic() - t0
            self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
            self.assertGreater(took, 1.0)  # longer than either client timeout, twice over
            if stream:
                self.assertEqual(harness.sse_events(data)[-1], "[DONE]")
            else:
                self.assertEqual(json.loads(data)["usage"]["completion_tokens"], 12)
        t0 = time.monotonic()
        self.assertEqual(s.recv(65536), b"")  # the idle close, counted from the answer
        idle = time.monotonic() - t0
        s.close()
        self.assertGreater(idle, 0.25)
        self.assertLess(idle, 5.0)
        log = harness.read_access_log(self.path("access.log"), 2)
        self.assertEqual([(r["status"], r["error"]) for r in log], [(200, None), (200, None)])

    def test_stalled_reader_is_cut_and_its_upstream_aborted(self):
        flood = self.start([harness.PYTHON, "-c", FLOOD_SERVER], name="flood")
        fport = int(flood.wait_for(r"flood ready (\d+)").group(1))
        _, port = self.start_llmsim("r1", args=FAST)
        conf = self.base_config([
            {"name": "flood", "url": "http://127.0.0.1:%d" % fport, "models": ["big"]},
            {"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            limits={"stream_buffer_bytes": 65536}, timeouts={"client_stall": "1s"},
            access_log=self.path("access.log"))
        gwp, gw = self.start_gateway(conf)
        rss0 = gwp.rss_kib()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", gw))
        payload = json.dumps(chat_body(model="big", stream=True)).encode()
        s.sendall(post_head(b"Content-Length: %d\r\n\r\n" % len(payload)) + payload)
        s.settimeout(10)
        self.assertTrue(s.recv(1024).startswith(b"HTTP/1.1 200"))
        t0 = time.monotonic()
        # stop reading: the gateway must give up on us and stop the backend
        flood.wait_for(r"flood aborted after \d+ bytes", timeout=15)
        waited = time.monotonic() - t0
        self.assertLess(waited, 10.0)
        self.assertLess(gwp.rss_kib() - rss0, 16 * 1024)
        log = wait_until(lambda: [json.loads(ln) for ln in open(self.path("access.log"))
                                  if ln.strip()] if os.path.exists(self.path("access.log"))
                         else None, what="the access-log line")
        self.assertEqual(log[0]["error"], "client_stalled")
        # the stalled connection is closed
        s.settimeout(5)
        try:
            while s.recv(1 << 20):
                pass
        except (ConnectionResetError, socket.timeout):
            pass
        s.close()
        # and others are served meanwhile
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=3))
        self.assertEqual(status, 200)

    # ---- connection limits -------------------------------------------------

    def held_connection(self, gw):
        """A keep-alive connection the gateway has accepted (one answered request proves it)."""
        s = socket.create_connection(("127.0.0.1", gw), timeout=10 * harness.SLOW)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        got = b""
        while b'{"status":"ok"}' not in got:
            chunk = s.recv(4096)
            self.assertTrue(chunk, "closed before answering")
            got += chunk
        return s

    def test_global_connection_cap_refuses_cleanly(self):
        _, port = self.start_llmsim("r1", args=FAST)
        _, gw = self.gateway(port, limits={"max_connections": 4})
        held = [self.held_connection(gw) for _ in range(4)]
        self.addCleanup(lambda: [h.close() for h in held])
        out, closed = exchange(gw, b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        self.assertEqual(status_of(out), 503, out)
        self.assertIn(b"Retry-After: ", out)
        self.assertIn(b"too_many_connections", out)
        self.assertTrue(closed)
        # a held one still works, and once it closes there is room again
        held[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        self.assertTrue(held[0].recv(4096).startswith(b"HTTP/1.1 200"))
        held[0].close()
        held[1].close()

        def served():
            out, _ = exchange(gw, b"GET /healthz HTTP/1.1\r\nHost: gw\r\n"
                              b"Connection: close\r\n\r\n", timeout=2)
            return status_of(out) == 200
        wait_until(served, timeout=5, what="a free connection slot")

    def test_per_address_connection_cap(self):
        _, port = self.start_llmsim("r1", args=FAST)
        _, gw = self.gateway(port, limits={"max_connections_per_ip": 3},
                             listen="0.0.0.0:0")
        held = [self.held_connection(gw) for _ in range(3)]
        self.addCleanup(lambda: [h.close() for h in held])
        out, closed = exchange(gw, b"GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
        self.assertEqual(status_of(out), 429, out)
        self.assertIn(b"Retry-After: ", out)
        self.assertIn(b"too_many_connections_from_address", out)
        self.assertTrue(closed)
        # another source address is not affected
        other = socket.socket()
        other.bind(("127.0.0.2", 0))
        other.settimeout(5)
        other.connect(("127.0.0.1", gw))
        other.sendall(b"GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
        self.assertTrue(other.recv(4096).startswith(b"HTTP/1.1 200"))
        other.close()
        # closing one frees its slot
        held.pop().close()

        def served():
            out, _ = exchange(gw, b"GET /healthz HTTP/1.1\r\nHost: gw\r\n"
                              b"Connection: close\r\n\r\n", timeout=2)
            return status_of(out) == 200
        wait_until(served, timeout=5, what="a free per-address slot")

    def test_fd_exhaustion_keeps_serving_and_recovers(self):
        _, port = self.start_llmsim("r1", args=FAST)
        conf = self.base_config(
            [{"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]}],
            workers=1, timeouts={"client_header": "60s"})

        def limit_fds():
            resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        gwp, gw = self.start_gateway(conf, preexec_fn=limit_fds)
        # a keep-alive client with its pooled upstream connection, before the flood
        s = socket.create_connection(("127.0.0.1", gw), timeout=10)
        keep = post_head(b"Content-Length: %d\r\n\r\n" % len(BODY)) + BODY

        def ask(sock):
            sock.sendall(keep)
            got = b""
            while b'"usage"' not in got:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                got += chunk
            return got
        self.assertTrue(ask(s).startswith(b"HTTP/1.1 200"))
        flood = []
        for _ in range(100):
            flood.append(socket.create_connection(("127.0.0.1", gw), timeout=5))
        self.addCleanup(lambda: [f.close() for f in flood])
        gwp.wait_for(r"accept failed: .*(Too many open files)", timeout=10)
        # the existing connection keeps working meanwhile
        for _ in range(3):
            self.assertTrue(ask(s).startswith(b"HTTP/1.1 200"))
        # and once the flood goes, new clients are served again
        for f in flood:
            f.close()
        flood.clear()

        def served():
            try:
                status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                            timeout=2)
            except OSError:
                return False
            return status == 200
        wait_until(served, timeout=20, what="accepting again after EMFILE")
        s.close()
        self.assertIsNone(gwp.p.poll(), "the gateway died")


if __name__ == "__main__":
    harness.main()
