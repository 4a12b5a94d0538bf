"""Hostile engines: backends that break HTTP, SSE, /metrics, /props and TLS
(tests/integration/hostile_engine.py, a scripted engine on real sockets).

For each: what the client gets (a clear error, or a cut that never looks
complete: no last chunk, no [DONE] the engine did not send), that the
gateway's memory stays bounded (VmHWM from /proc, a high-water mark, so a
burst between two reads counts), and that a client streaming from a healthy
replica meanwhile is not disturbed (every stream whole, no long gap).
"""

import contextlib
import datetime
import json
import os
import re
import socket
import subprocess
import threading
import time

import harness
from harness import Harness, chat_body, http_request, post_json, read_access_log, wait_until

HOSTILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_engine.py")
FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]
CHAT = "/v1/chat/completions"
MIB = 1 << 20

# How far the gateway's peak RSS may rise over an attack. Sanitizers keep
# freed memory aside (ASan's quarantine, bounded below for the gateway);
# under valgrind the figures mean nothing.
if harness.VALGRIND:
    RISE_KIB = None
elif harness.SANITIZED:
    RISE_KIB = 160 * 1024
else:
    RISE_KIB = 32 * 1024


class Raw:
    """One request on its own socket, the response read with little Python
    work per byte (a chunked decoder over a bytearray), so that hundreds of
    MiB pass in a second or two. on_data sees the body's bytes (decoded)."""

    def __init__(self, port, body, timeout=30.0):
        payload = json.dumps(body).encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.sendall(b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % (CHAT.encode(), len(payload)) + payload)
        self.buf = bytearray()
        self.pos = 0
        self.status = None
        self.headers = {}
        self.ended = None          # "complete", "eof" or "reset"
        self.last_chunk = False    # the zero-size chunk came

    def _more(self):
        if self.pos > MIB:
            del self.buf[:self.pos]
            self.pos = 0
        try:
            d = self.sock.recv(1 << 18)
        except (ConnectionResetError, BrokenPipeError):
            self.ended = "reset"
            return False
        if not d:
            self.ended = "eof"
            return False
        self.buf += d
        return True

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n", self.pos)
            if i >= 0:
                line = bytes(self.buf[self.pos:i])
                self.pos = i + 2
                return line
            if not self._more():
                return None

    def head(self):
        line = self._line()
        if line is None:
            raise AssertionError("closed (%s) before the response head" % self.ended)
        self.status = int(line.split()[1])
        while True:
            line = self._line()
            if not line:
                break
            k, _, v = line.decode("latin-1").partition(":")
            self.headers[k.strip().lower()] = v.strip()
        return self.status

    def body(self, on_data):
        """Reads the body to its end or the connection's; returns self."""
        if self.status is None:
            self.head()
        if "chunked" not in self.headers.get("transfer-encoding", ""):
            left = int(self.headers.get("content-length", "0"))
            while left > 0:
                if self.pos == len(self.buf) and not self._more():
                    return self
                take = min(left, len(self.buf) - self.pos)
                on_data(memoryview(self.buf)[self.pos:self.pos + take])
                self.pos += take
                left -= take
            self.ended = "complete"
            return self
        while self.ended is None:
            line = self._line()
            if line is None:
                return self
            size = int(line.split(b";")[0], 16)
            if size == 0:
                self.last_chunk = True
                if self._line() is not None:  # the empty trailer
                    self.ended = "complete"
                return self
            while len(self.buf) - self.pos < size + 2:
                if not self._more():
                    on_data(memoryview(self.buf)[self.pos:])
                    return self
            on_data(memoryview(self.buf)[self.pos:self.pos + size])
            if self.buf[self.pos + size:self.pos + size + 2] != b"\r\n":
                raise AssertionError("bad chunk framing")
            self.pos += size + 2
        return self

    def collect(self):
        out = bytearray()
        self.body(out.extend)
        return bytes(out)

    def close(self):
        self.sock.close()


class Bystander:
    """A client streaming from the healthy replica ("ok") over and over
    while an attack runs; check() asserts every stream came whole and in
    time."""

    def __init__(self, port, max_tokens=20):
        self.port = port
        self.max_tokens = max_tokens
        self.results = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                s = harness.HttpStream(self.port, "POST", CHAT,
                                       chat_body(model="ok", stream=True,
                                                 max_tokens=self.max_tokens), timeout=20)
                s.read_all(20)
                times = [s.t_sent] + [t for t, _ in s.events]
                gap = max(b - a for a, b in zip(times, times[1:]))
                self.results.append((s.status, s.ended, [d for _, d in s.events], gap))
                s.close()
            except Exception as e:  # noqa: BLE001 - reported by check()
                self.results.append(("error", repr(e), [], 0))

    def check(self, test):
        self.stop.set()
        self.t.join(30)
        test.assertFalse(self.t.is_alive(), "the bystander's stream never ended")
        test.assertGreater(len(self.results), 0)
        for status, ended, events, gap in self.results:
            test.assertEqual((status, ended), (200, "complete"), events[-3:])
            test.assertEqual(events[-1], "[DONE]")
            content = [e for e in events if '"content"' in e]
            test.assertEqual(len(content), self.max_tokens)
            test.assertLess(gap, 1.0 * harness.SLOW, "the bystander's stream stalled")
        test.gaps = [gap for _, _, _, gap in self.results]


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def utc(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y%m%d%H%M%SZ")


def short_lived_cert(d, seconds):
    """A CA and a certificate for 127.0.0.1 that expires `seconds` from now
    (openssl ca: x509 -req takes only whole days); returns (ca, cert, key, end)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=hostile-ca", cwd=d)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=localhost", cwd=d)
    with open(os.path.join(d, "ca.cnf"), "w") as f:
        f.write("[ca]\ndefault_ca = ca0\n[ca0]\ndatabase = index.txt\nnew_certs_dir = .\n"
                "serial = serial\ndefault_md = sha256\npolicy = any\nunique_subject = no\n"
                "[any]\ncommonName = supplied\n")
    with open(os.path.join(d, "srv.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    open(os.path.join(d, "index.txt"), "w").close()
    with open(os.path.join(d, "serial"), "w") as f:
        f.write("01\n")
    end = int(time.time()) + seconds
    openssl("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
            "-in", "srv.csr", "-out", "srv.pem", "-notext", "-extfile", "srv.ext",
            "-startdate", utc(time.time() - 3600), "-enddate", utc(end), cwd=d)
    return (os.path.join(d, "ca.pem"), os.path.join(d, "srv.pem"), os.path.join(d, "srv.key"),
            end)


class HostileEngines(Harness):

    def fleet(self, modes, tls=None, routing=None, health=None):
        """The hostile engine serving `modes` (one model each, named after the
        mode), llmsim "healthy" (models ok and shared) and the gateway; returns
        its port. With tls (cert, key, ca) the engine speaks TLS, and its
        backends serve "shared" too."""
        argv = [harness.PYTHON, HOSTILE] + list(modes)
        if tls:
            argv += ["--tls", tls[0], tls[1]]
        self.engine = self.start(argv, name="hostile")
        ready = self.engine.wait_for(r"hostile ready (.*)").group(1)
        self.hports = {k: int(v) for k, v in (kv.split("=") for kv in ready.split())}
        _, self.okp = self.start_llmsim("healthy", models=("ok", "shared"), args=FAST)
        backends = [{"name": "healthy", "url": "http://127.0.0.1:%d" % self.okp,
                     "models": ["ok", "shared"]}]
        for mode, port in self.hports.items():
            b = {"name": mode, "url": "%s://127.0.0.1:%d" % ("https" if tls else "http", port),
                 "models": [mode]}
            if mode == "props":
                b["flavor"] = "llamacpp"
            if tls:
                b["tls"] = {"ca_file": tls[2]}
                b["models"].append("shared")
                b["weight"] = 1000  # round robin's pick for "shared", but 1 in 1001
            backends.append(b)
        r = {"policy": "round_robin", "retry": {"budget_ratio": 1, "budget_min": 1000}}
        r.update(routing or {})
        hc = {"interval": "200ms", "fall": 1, "rise": 1, "scrape_interval": "100ms",
              "eject_consecutive": 0}
        hc.update(health or {})
        conf = self.base_config(backends, admin="127.0.0.1:0", workers=2, routing=r, health=hc,
                                timeouts={"first_byte": "1s", "stream_idle": "2s"},
                                access_log={"path": self.path("access.log"), "flush": "10ms"})
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=16").lstrip(":")
        self.gw, port = self.start_gateway(conf, env=env)
        self.admin = int(self.gw.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return port

    def mem_kib(self):
        got = {}
        with open("/proc/%d/status" % self.gw.pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    got[k] = int(v.split()[0])
        return got

    @contextlib.contextmanager
    def attack(self, port):
        """Runs the block with a bystander streaming from the healthy replica;
        then checks it, and the gateway's peak RSS against its value before."""
        before = self.mem_kib()
        by = Bystander(port)
        try:
            yield
        finally:
            by.check(self)
        after = self.mem_kib()
        print("%s: the gateway's VmHWM %d -> %d KiB" % (self._testMethodName, before["VmHWM"],
                                                        after["VmHWM"]))
        if RISE_KIB is not None:
            self.assertLess(after["VmHWM"] - before["VmHWM"], RISE_KIB,
                            "peak RSS rose from %s to %s" % (before, after))
        self.assertEqual(self.gw.p.poll(), None, "the gateway died")

    def backend(self, name):
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        self.assertEqual(status, 200)

        def no_nan(s):
            raise AssertionError("%s in the admin API's JSON" % s)

        doc = json.loads(data, parse_constant=no_nan)
        return {b["name"]: b for b in doc["backends"]}[name]

    def error_of(self, raw):
        return json.loads(raw)["error"]

    # ---- HTTP framing ----------------------------------------------------------

    def test_a_200_then_garbage_is_cut_and_a_garbled_head_is_a_502(self):
        port = self.fleet(["garbage", "garbage_head"])
        with self.attack(port):
            r = Raw(port, chat_body(model="garbage", stream=True))
            body = r.collect()
            r.close()
            self.assertEqual(r.status, 200)
            self.assertIn(r.ended, ("eof", "reset"))
            self.assertFalse(r.last_chunk, "a cut stream got the last chunk")
            self.assertEqual(body.count(b"data: "), 1)  # the one good event, nothing added
            self.assertNotIn(b"[DONE]", body)
            self.engine.wait_for(r"hostile garbage closed")  # the gateway let it go
            status, _, _, raw = post_json(port, CHAT, chat_body(model="garbage_head"))
            self.assertEqual(status, 502)
            self.assertEqual(self.error_of(raw)["code"], "upstream_protocol_error")
            self.engine.wait_for(r"hostile garbage_head closed")
        log = read_access_log(self.path("access.log"))
        self.assertIn({"status": 200, "error": "upstream_protocol_error"},
                      [{"status": e["status"], "error": e["error"]} for e in log
                       if e["backend"] == "garbage"])

    def test_a_head_that_never_ends(self):
        """Header lines as fast as the socket takes them: refused at the head's
        size limit. One line every 100 ms, or a 100 Continue every 100 ms:
        refused when timeouts.first_byte (1 s here) has passed since the head
        began, not after 100 lines, or never."""
        port = self.fleet(["endless_head", "slow_head:100", "info_flood:100"])
        with self.attack(port):
            t0 = time.monotonic()
            status, _, _, raw = post_json(port, CHAT, chat_body(model="endless_head"))
            self.assertEqual(status, 502)
            self.assertEqual(self.error_of(raw)["code"], "upstream_protocol_error")
            sent = int(self.engine.wait_for(r"hostile endless_head closed after (\d+)").group(1))
            self.assertLess(sent, 16 * MIB, "the gateway kept reading an endless head")
            self.assertLess(time.monotonic() - t0, 3 * harness.SLOW)
            t0 = time.monotonic()
            status, _, _, raw = post_json(port, CHAT, chat_body(model="slow_head"))
            took = time.monotonic() - t0
            self.assertEqual(status, 504, raw)
            self.assertEqual(self.error_of(raw)["code"], "first_byte_timeout")
            self.assertGreater(took, 0.9)
            self.assertLess(took, 3 * harness.SLOW, "a trickled head held the request")
            self.engine.wait_for(r"hostile slow_head closed after \d+ lines")
            t0 = time.monotonic()
            status, _, _, raw = post_json(port, CHAT, chat_body(model="info_flood"))
            took = time.monotonic() - t0
            self.assertEqual(status, 504, raw)
            self.assertLess(took, 3 * harness.SLOW, "interim heads held the request")
            self.engine.wait_for(r"hostile info_flood closed after \d+ interim heads")

    def test_content_length_and_chunked_together_is_a_502(self):
        """RFC 9112 6.3: such a response may be a smuggling attempt; the
        gateway refuses it before any byte reaches the client, and the
        connection is not used again."""
        port = self.fleet(["cl_chunked"])
        with self.attack(port):
            for k in range(2):
                r = Raw(port, chat_body(model="cl_chunked", stream=True))
                body = r.collect()
                r.close()
                self.assertEqual(r.status, 502)
                self.assertNotIn("transfer-encoding", r.headers)
                self.assertEqual(self.error_of(body)["code"], "upstream_protocol_error")
                # the gateway closed the connection: never used again
                wait_until(lambda: self.engine.output().count("hostile cl_chunked closed") > k,
                           5, what="the gateway to close the connection")
            self.assertEqual(self.engine.output().count("hostile cl_chunked sent"), 2)

    # ---- SSE ---------------------------------------------------------------------

    def test_an_sse_line_of_100_mib(self):
        """100 MiB of one `data:` line, no newline, then the engine closes: the
        bytes pass through (the relay holds no line), the client sees the cut;
        on a model whose streams may be resumed (relayed event by event) the
        event outgrows what may be held and is sent on as it comes."""
        port = self.fleet(["long_line:100"],
                          routing={"resume": {"models": {"long_line": "greedy"}}})
        with self.attack(port):
            for temperature in (1.0, 0.0):  # not resumable, then resumable
                got = [0, 0]

                def take(d):
                    got[0] += len(d)
                    got[1] += bytes(d).count(b"\n")

                t0 = time.monotonic()
                r = Raw(port, chat_body(model="long_line", stream=True, temperature=temperature))
                r.body(take)
                r.close()
                self.assertEqual(r.status, 200)
                self.assertIn(r.ended, ("eof", "reset"))
                self.assertFalse(r.last_chunk)
                self.assertEqual(got, [len(b"data: ") + 100 * MIB, 0],
                                 "not the line as sent (temperature %s)" % temperature)
                self.assertLess(time.monotonic() - t0, 30 * harness.SLOW)

    def test_events_every_microsecond(self):
        """1000 events per millisecond for 3 s (a minute, shortened): every
        event reaches the client, in about the time they were sent, and the
        stream ends complete."""
        port = self.fleet(["flood:3"])
        with self.attack(port):
            count = [0, False]

            def take(d):
                b = bytes(d)
                count[0] += b.count(b"\n\n") + (count[1] and b[:1] == b"\n")
                count[1] = b[-1:] == b"\n"

            t0 = time.monotonic()
            r = Raw(port, chat_body(model="flood", stream=True))
            r.body(take)
            r.close()
            took = time.monotonic() - t0
            m = self.engine.wait_for(r"hostile flood sent (\d+) events in ([\d.]+) s")
            sent, secs = int(m.group(1)), float(m.group(2))
            self.assertEqual((r.status, r.ended, r.last_chunk), (200, "complete", True))
            self.assertEqual(count[0], sent + 2)  # and the finish event and [DONE]
            self.assertLess(took, secs + 2.0 * harness.SLOW, "the relay fell behind")
            # the pace the engine kept while the gateway took everything it sent
            self.assertGreater(sent / secs, 200000 / harness.SLOW,
                               "%d events in %.2f s" % (sent, secs))
        print("flood: %d events in %.2f s (%.0f/s), client done after %.2f s; the bystander's "
              "longest gap %.0f ms over %d streams"
              % (sent, secs, sent / secs, took, max(self.gaps) * 1000, len(self.gaps)))

    # ---- /metrics and /props -------------------------------------------------------

    def test_a_metrics_page_of_a_gigabyte(self):
        """1 GiB of valid exposition, chunked and with a Content-Length: the
        scraper stops at its limit each time, asks less and less often, and the
        backend still serves requests."""
        port = self.fleet(["metrics_huge:1024", "metrics_huge_cl:1024"])
        with self.attack(port):
            t0 = time.monotonic()
            time.sleep(3.0)  # the span over which scrapes are counted
            out = self.engine.output()
            took = [int(n) for n in re.findall(r"metrics: the gateway took (\d+) of", out)]
            self.assertGreater(len(took), 0)
            self.assertLess(max(took), 24 * MIB, "a scrape read on past its limit")
            # 100 ms apart without a back-off: about 60 in 3 s; backing off (200 ms,
            # 400 ms, 800 ms...) 5 for each
            self.assertLessEqual(len(took), 16, "scrapes of an oversized page never back off")
            print("oversized /metrics: %d scrapes in 3 s, at most %d bytes read by one"
                  % (len(took), max(took)))
            for mode in ("metrics_huge", "metrics_huge_cl"):
                status, _, _, raw = post_json(port, CHAT, chat_body(model=mode))
                self.assertEqual(status, 200, raw)
            self.gw.wait_for(r"backend metrics_huge: scraping /metrics failed \(answer larger "
                             r"than 4 MiB, not read further; check the engine there, or the "
                             r"backend's metrics_path")
            self.assertLess(time.monotonic() - t0, 10)

    def test_metrics_with_nan_negative_and_huge_gauges(self):
        port = self.fleet(["metrics_bad"])
        with self.attack(port):
            self.gw.wait_for(r"backend metrics_bad: /metrics has no vllm queue metrics")
            eng = self.backend("metrics_bad")["engine"]
            # nothing made of NaN, negative or 1e308 counts: unknown, as if not
            # exported; a KV use above 1 reads as full (enginemetrics.c)
            self.assertEqual((eng["waiting"], eng["running"]), (None, None), eng)
            self.assertIn(eng["kv_usage"], (None, 1.0), eng)
            status, _, data = http_request(self.admin, "GET", "/metrics")
            self.assertEqual(status, 200)
            samples = harness.parse_prometheus(data.decode())
            bad = {k: v for k, v in samples.items()
                   if ("backend", "metrics_bad") in k[1] and (v != v or abs(v) > 1e15)}
            self.assertEqual(bad, {})
            status, _, _, raw = post_json(port, CHAT, chat_body(model="metrics_bad"))
            self.assertEqual(status, 200, raw)

    def test_props_that_lies_about_slots(self):
        """llama.cpp's /props says 1 slot while its /metrics show 6 requests
        processing and 2 deferred: the engine's word loses to what it does."""
        port = self.fleet(["props:1"])
        with self.attack(port):
            self.engine.wait_for(r"hostile props props asked")
            self.gw.wait_for(r"backend props: /props says total_slots 1 but 6 requests run there "
                             r"at once; its slot count is learnt from its load instead")
            # the next scrape publishes what it saw, the engine's word left out
            eng = wait_until(lambda: (lambda e: e if e["age_ms"] is not None and e["age_ms"] < 100
                                      else None)(self.backend("props")["engine"]), 5,
                             what="a fresh scrape")
            self.assertEqual((eng["running"], eng["waiting"]), (6, 2), eng)
            self.assertNotEqual(eng["capacity_from"], "engine", eng)
            self.assertGreaterEqual(eng["capacity"] or 0, 6, eng)
            status, _, _, raw = post_json(port, CHAT, chat_body(model="props"))
            self.assertEqual(status, 200, raw)

    # ---- TLS -----------------------------------------------------------------------

    def test_tls_certificate_expiring_mid_run(self):
        """An https backend whose certificate expires 3 s after it is made (the
        first choice for model "shared", whose other replica is llmsim's):
        served while it is valid; then every new connection is refused at the
        handshake with the reason logged, and its requests are retried on the
        other replica of the model. Health checks are off here, so that the
        requests meet the expired certificate themselves."""
        ca, cert, key, end = short_lived_cert(self.tmp, 3)
        port = self.fleet(["served"], tls=(cert, key, ca),
                          health={"interval": "1h", "scrape_interval": 0})
        with self.attack(port):
            # valid: round robin over the two replicas of "shared" goes there
            for _ in range(4):
                status, h, _, raw = post_json(port, CHAT, chat_body(model="shared"))
                self.assertEqual(status, 200, raw)
            self.assertLess(time.time(), end, "the certificate expired before the check")
            self.assertGreaterEqual(self.engine.output().count("hostile served POST"), 3)
            time.sleep(max(0.0, end + 1.0 - time.time()))  # the certificate's end
            n = len(self.engine.lines)
            for _ in range(6):
                status, h, _, raw = post_json(port, CHAT, chat_body(model="shared"))
                self.assertEqual(status, 200, raw)
                self.assertEqual(h["x-llmsim-replica"], "healthy")
            self.gw.wait_for(r"backend served \(https://127\.0\.0\.1:\d+\): certificate "
                             r"verification failed: certificate has expired")
            self.engine.wait_for(r"hostile served handshake failed: .*certificate expired",
                                 start=n)
            self.assertFalse([ln for ln in self.engine.lines[n:] if "POST" in ln],
                             "a request reached the backend after its certificate expired")
        shared = wait_until(lambda: (lambda got: got if len(got) == 10 else None)(
            [e for e in read_access_log(self.path("access.log")) if e["model"] == "shared"]), 5,
            what="the access log")
        # after the end: retried from the expired backend to the other replica
        retried = [(e["status"], e["attempt_count"], e["backend"], e["error"]) for e in shared[4:]
                   if e["attempt_count"] > 1]
        self.assertGreaterEqual(len(retried), 4)
        self.assertEqual(set(retried), {(200, 2, "healthy", "upstream_tls_error")})


if __name__ == "__main__":
    harness.main()
