"""Integration-test harness: start real processes on loopback and talk HTTP.

Standard library only. Processes listen on port 0 and announce the ports they
bound on a "ready" line (or a ready file); the harness waits for that line
instead of sleeping. Everything started through a Harness is killed at
tearDown, and its output is kept for failure messages.

Environment:
  LG_BUILD     the CMake build folder (default: <repo>/build)
  LG_SRC       the repository root (default: two folders up from this file)
  LG_VALGRIND  when set (1), start_gateway() runs llmgate under valgrind
               (memcheck, definite leaks are errors); at the end of the test
               the gateway is stopped with SIGTERM and must exit without a
               valgrind error (exit status 99 fails the test). In a sanitizer
               build (LG_SANITIZE in the CMake cache) gateways are stopped the
               same way, so that LeakSanitizer's report fails the test.
  LG_TEST_KEEP a folder: a failed test's files (configs, access logs) are
               copied to FOLDER/<test id> before they are removed
  LG_TEST_VERBOSE  when set, every process's output is printed, not only
               a failed test's
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SRC = os.environ.get("LG_SRC") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("LG_BUILD") or os.path.join(SRC, "build")
PYTHON = sys.executable
VALGRIND = os.environ.get("LG_VALGRIND", "") not in ("", "0")


def _sanitized():
    try:
        with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
            return any(ln.startswith("LG_SANITIZE:") and ln.strip().split("=", 1)[1]
                       for ln in f)
    except OSError:
        return False


# A sanitizer build reports leaks at exit: such gateways are stopped with
# SIGTERM too, and must exit 0.
SANITIZED = _sanitized()
# A ThreadSanitizer build: what is not the gateway's race (tests/tsan.supp).
if "suppressions=" not in os.environ.get("TSAN_OPTIONS", ""):
    os.environ["TSAN_OPTIONS"] = (os.environ.get("TSAN_OPTIONS", "") + " suppressions="
                                  + os.path.join(SRC, "tests", "tsan.supp")).strip()
# Timing bounds of tests scale with this (valgrind slows the gateway ~20x).
SLOW = 10.0 if VALGRIND else 1.0


def gateway_prefix():
    """argv prefix for llmgate: valgrind's, under LG_VALGRIND."""
    if not VALGRIND:
        return []
    return ["valgrind", "--quiet", "--error-exitcode=99", "--leak-check=full",
            "--errors-for-leak-kinds=definite", "--show-leak-kinds=definite",
            "--track-fds=no", "--num-callers=30"]


def binary(name):
    """Path of a built executable (llmgate, llmsim, llmload...)."""
    for cand in (os.path.join(BUILD, name), os.path.join(BUILD, "tools", name)):
        if os.path.exists(cand):
            return cand
    raise FileNotFoundError("%s not built under %s" % (name, BUILD))


class Proc:
    """A child process whose combined stdout/stderr is collected by a thread.

    wait_for(regex) blocks until a line matches (returns the match) or the
    deadline passes (raises with the output so far)."""

    def __init__(self, argv, name=None, env=None, cwd=None, preexec_fn=None):
        self.argv = argv
        self.name = name or os.path.basename(argv[0])
        self.lines = []
        self.graceful = False     # stop with SIGTERM (and check the exit) instead of SIGKILL
        self._cond = threading.Condition()
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                  start_new_session=True, preexec_fn=preexec_fn)
        self._t = threading.Thread(target=self._reader, daemon=True)
        self._t.start()

    def _reader(self):
        for raw in self.p.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def output(self):
        with self._cond:
            return "\n".join(self.lines)

    def wait_for(self, pattern, timeout=15.0, start=0):
        """Waits for a line (from index `start`) matching `pattern`."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        i = start
        with self._cond:
            while True:
                while i < len(self.lines):
                    m = rx.search(self.lines[i])
                    i += 1
                    if m:
                        return m
                if self.p.poll() is not None and not self._t.is_alive():
                    raise AssertionError("%s exited (%s) before printing /%s/:\n%s" % (
                        self.name, self.p.returncode, pattern, "\n".join(self.lines)))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for /%s/ from %s:\n%s" % (
                        pattern, self.name, "\n".join(self.lines[-60:])))
                self._cond.wait(min(left, 0.2))

    def signal(self, sig):
        if self.p.poll() is None:
            self.p.send_signal(sig)

    def wait(self, timeout=15.0):
        rc = self.p.wait(timeout)
        self._t.join(2)
        return rc

    def stop(self, timeout=120.0):
        """SIGTERM, then a second SIGTERM (stop without draining) after a
        moment; returns the exit status (SIGKILL after timeout: None)."""
        if self.p.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.p.wait(2)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGTERM)
                try:
                    self.p.wait(timeout)
                except subprocess.TimeoutExpired:
                    return None
        self._t.join(5)
        return self.p.returncode

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait(5)
        self._t.join(2)
        if not self._t.is_alive() and self.p.stdout:
            self.p.stdout.close()

    @property
    def pid(self):
        return self.p.pid

    def rss_kib(self):
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Harness(unittest.TestCase):
    """TestCase base: self.start(...) processes, self.tmp folder, cleanup."""

    def setUp(self):
        self.procs = []
        self._tmpdir = tempfile.TemporaryDirectory(prefix="lgtest-")
        self.tmp = self._tmpdir.name

    def refusing_port(self):
        """A loopback port where a connection is refused, for a backend that is
        down: bound for the test's duration without listening (a port from
        free_port() could be taken by a test running beside this one, and a
        request meant to be refused would reach that test's server)."""
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.addCleanup(s.close)
        return s.getsockname()[1]

    def run(self, result=None):
        self._result = result
        self._bad_before = len(result.failures) + len(result.errors) if result else 0
        return super().run(result)

    def _failed(self):
        res = getattr(self, "_result", None)
        if res is None:
            return False
        return len(res.failures) + len(res.errors) > self._bad_before

    def tearDown(self):
        # tearDown runs before the failure is recorded: check in a cleanup instead
        self.addCleanup(self._dump_and_kill)

    def _dump_and_kill(self):
        failed = self._failed()
        bad = []
        for p in reversed(self.procs):
            if p.graceful:
                rc = p.stop()
                if rc != 0:
                    bad.append("%s exited with %s (99: valgrind found errors; 23: leaks; "
                               "see its output)" % (p.name, rc))
                    failed = True
            p.kill()
            if failed or os.environ.get("LG_TEST_VERBOSE"):
                print("----- output of %s -----\n%s" % (p.name, p.output()[-20000:]))
        if failed and os.environ.get("LG_TEST_KEEP"):
            shutil.copytree(self.tmp, os.path.join(os.environ["LG_TEST_KEEP"], self.id()),
                            dirs_exist_ok=True)
        self._tmpdir.cleanup()
        if bad:
            raise AssertionError("; ".join(bad))

    def start(self, argv, name=None, env=None, preexec_fn=None):
        p = Proc(argv, name=name, env=env, preexec_fn=preexec_fn)
        self.procs.append(p)
        return p

    def path(self, name):
        return os.path.join(self.tmp, name)

    def stream(self, port, method, path, body=None, **kw):
        """An HttpStream (see below) closed at the end of the test."""
        s = HttpStream(port, method, path, body, **kw)
        self.addCleanup(s.close)
        return s

    # ---- simulated replicas and the gateway --------------------------------

    def start_llmsim(self, name="r1", models=("m",), args=()):
        """Starts one llmsim replica on a free port; returns (proc, port)."""
        argv = [binary("llmsim"), "--listen", "127.0.0.1:0", "--name", name]
        for m in models:
            argv += ["--model", m]
        argv += list(args)
        p = self.start(argv, name="llmsim-" + name)
        m = p.wait_for(r"llmsim ready .*listen=[^ ]*:(\d+)")
        return p, int(m.group(1))

    def write_config(self, conf, name="llmgate.json"):
        path = self.path(name)
        with open(path, "w") as f:
            json.dump(conf, f, indent=2)
        return path

    def start_gateway(self, conf, args=(), env=None, name="llmgate", preexec_fn=None):
        """Writes conf (a dict) and starts llmgate; returns (proc, port).

        The gateway prints "llmgate ready listen=ADDR:PORT[,...] ..." once
        every listener is bound; the first listener's port is returned.
        Under LG_VALGRIND the gateway runs in valgrind (see the top)."""
        path = self.write_config(conf, name + ".json")
        argv = gateway_prefix() + [binary("llmgate"), "-c", path] + list(args)
        p = self.start(argv, name=name, env=env, preexec_fn=preexec_fn)
        p.graceful = VALGRIND or SANITIZED
        m = p.wait_for(r"llmgate ready .*listen=[^ ,]*:(\d+)", timeout=60 if VALGRIND else 15)
        return p, int(m.group(1))

    def base_config(self, backends, **extra):
        """A gateway config over backends; extra keys replace the defaults.
        A class whose backends sit behind a RecordingProxy sets
        quiet_backends = True: no active checks or /metrics scrapes, so the
        recorder sees only what the gateway forwards."""
        if getattr(self, "quiet_backends", False):
            extra.setdefault("health", {"interval": "1h", "scrape_interval": 0})
        conf = {"listen": "127.0.0.1:0", "workers": 2, "log_level": "info",
                "routing": {"policy": "round_robin"},
                "backends": backends}
        conf.update(extra)
        return conf


# ---- HTTP helpers ------------------------------------------------------------

def read_access_log(path, n=None, timeout=15.0):
    """Access-log records, parsed; waits until at least n are there (any, when n is None)."""
    def lines():
        if not os.path.exists(path):
            return None
        with open(path) as f:
            got = [json.loads(ln) for ln in f if ln.strip()]
        return got if n is None or len(got) >= n else None
    return wait_until(lines, timeout=timeout, what="%s access-log lines" % n)


def sim_state(port):
    """An llmsim replica's /sim/state."""
    status, _, data = http_request(port, "GET", "/sim/state")
    assert status == 200, status
    return json.loads(data)


def http_request(port, method, path, body=None, headers=None, timeout=30.0, host="127.0.0.1"):
    """One request on a fresh connection; returns (status, headers dict, body bytes)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    hdrs = {"Content-Type": "application/json"} if body is not None else {}
    if headers:
        hdrs.update(headers)
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    conn.request(method, path, body=body, headers=hdrs)
    r = conn.getresponse()
    data = r.read()
    h = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    return r.status, h, data


def post_json(port, path, obj, headers=None, timeout=30.0):
    status, h, data = http_request(port, "POST", path, obj, headers, timeout)
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        parsed = None
    return status, h, parsed, data


def chat_body(model="m", stream=False, max_tokens=8, content="hello", **extra):
    body = {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "stream": stream}
    body.update(extra)
    return body


def raw_exchange(port, data, timeout=10.0, read_until_close=True):
    """Sends raw bytes, returns every byte received until close or timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
            if not read_until_close:
                break
    except socket.timeout:
        pass
    s.close()
    return out


def sse_events(body):
    """Splits an SSE body into its data payloads (strings)."""
    events = []
    for block in body.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
        data = [ln[5:].lstrip(" ") for ln in block.split("\n") if ln.startswith("data:")]
        if data:
            events.append("\n".join(data))
    return events


class HttpStream:
    """One HTTP/1.1 request on its own connection, its response read as it
    arrives: the head, then the body (Content-Length or chunked), then the
    SSE events in it, each stamped with time.monotonic() at the read that
    completed it.

    `ended` says how the body ended: "complete" (the last chunk or the whole
    Content-Length arrived), "eof" (the peer closed before that) or "reset".
    Reads raise socket.timeout when nothing arrives within `timeout`."""

    def __init__(self, port, method, path, body=None, headers=None, timeout=30.0,
                 host="127.0.0.1"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        hdrs = {"Host": "%s:%d" % (host, port)}
        if body is not None:
            hdrs["Content-Type"] = "application/json"
            hdrs["Content-Length"] = str(len(body))
        hdrs.update(headers or {})
        req = "%s %s HTTP/1.1\r\n" % (method, path)
        req += "".join("%s: %s\r\n" % kv for kv in hdrs.items()) + "\r\n"
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.t_sent = time.monotonic()
        self.sock.sendall(req.encode() + (body or b""))
        self.status = None
        self.headers = {}
        self.t_head = None
        self.body = b""
        self.events = []          # (t, data) of every event read so far
        self.ended = None
        self._buf = b""
        self._chunked = False
        self._left = None         # bytes left in the current chunk / the body
        self._state = "size"      # chunked decoder: size, data, crlf, trailer
        self._sse = b""
        self._pending = []

    def _end(self, how):
        if self.ended is None:
            self.ended = how
        self.close()

    def _recv(self, timeout=None):
        if self.ended is not None:
            return False
        if timeout is not None:
            self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            self._end("reset")
            return False
        if not data:
            self._end("eof")
            return False
        self._buf += data
        return True

    def read_head(self, timeout=None):
        """Reads the status line and headers (skipping 1xx); returns the status."""
        while self.status is None:
            while b"\r\n\r\n" not in self._buf:
                if not self._recv(timeout):
                    raise AssertionError("connection closed (%s) before the response head"
                                         % self.ended)
            head, self._buf = self._buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            if 100 <= status < 200:
                continue
            self.status = status
            self.t_head = time.monotonic()
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                self.headers[k.strip().lower()] = v.strip()
            self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
            if not self._chunked:
                self._left = int(self.headers.get("content-length", "0"))
                if self._left == 0:
                    self._end("complete")
        return self.status

    def _decode(self):
        out = b""
        while self._buf and self.ended is None:
            if not self._chunked:
                take = self._buf[:self._left]
                self._buf = self._buf[len(take):]
                self._left -= len(take)
                out += take
                if self._left == 0:
                    self._end("complete")
            elif self._state == "size":
                if b"\r\n" not in self._buf:
                    break
                line, self._buf = self._buf.split(b"\r\n", 1)
                self._left = int(line.split(b";")[0], 16)
                self._state = "data" if self._left else "trailer"
            elif self._state == "data":
                take = self._buf[:self._left]
                self._buf = self._buf[len(take):]
                self._left -= len(take)
                out += take
                if self._left == 0:
                    self._state = "crlf"
            elif self._state == "crlf":
                if len(self._buf) < 2:
                    break
                if self._buf[:2] != b"\r\n":
                    raise AssertionError("bad chunk framing: %r" % self._buf[:20])
                self._buf = self._buf[2:]
                self._state = "size"
            else:  # trailer: ends with an empty line
                if b"\r\n" not in self._buf:
                    break
                line, self._buf = self._buf.split(b"\r\n", 1)
                if not line:
                    self._end("complete")
        return out

    def _collect(self, data, t):
        self.body += data
        self._sse += data.replace(b"\r\n", b"\n")
        while b"\n\n" in self._sse:
            block, self._sse = self._sse.split(b"\n\n", 1)
            lines = [ln[5:].lstrip(b" ") for ln in block.split(b"\n") if ln.startswith(b"data:")]
            if lines:
                ev = (t, b"\n".join(lines).decode("utf-8", "replace"))
                self.events.append(ev)
                self._pending.append(ev)

    def next_event(self, timeout=None):
        """The next SSE event as (t, data), or None once the body has ended."""
        if self.status is None:
            self.read_head(timeout)
        while not self._pending:
            self._collect(self._decode(), time.monotonic())
            if self._pending or self.ended is not None:
                break
            self._recv(timeout)
        return self._pending.pop(0) if self._pending else None

    def read_all(self, timeout=None):
        """Reads until the body ends (or the connection does); returns self."""
        while self.next_event(timeout) is not None:
            pass
        return self

    def json(self):
        return json.loads(self.body)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def read_concurrently(streams, timeout=30.0):
    """read_all() on each stream in its own thread, so that every event is
    stamped when it arrives; re-raises the first failure."""
    errors = []

    def run(s):
        try:
            s.read_all(timeout)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    if errors:
        raise errors[0]
    return streams


def scrape(port, path="/metrics"):
    """GETs a Prometheus exposition and parses it into {(name, labels): value}."""
    status, _, data = http_request(port, "GET", path)
    if status != 200:
        raise AssertionError("GET %s: %d" % (path, status))
    return parse_prometheus(data.decode())


_PROM_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$')
_PROM_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')


def parse_prometheus(text):
    """Parses the Prometheus text format strictly; raises on a malformed line."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _PROM_LINE.match(line)
        if not m:
            raise AssertionError("malformed exposition line: %r" % line)
        labels = ()
        if m.group(3):
            pairs = _PROM_LABEL.findall(m.group(3))
            labels = tuple(sorted(pairs))
        v = m.group(4)
        out[(m.group(1), labels)] = float("inf") if v == "+Inf" else float(v)
    return out


def metric(samples, name, **labels):
    """Sum of the samples named `name` whose labels include `labels`."""
    total = None
    for (n, lbls), v in samples.items():
        if n != name:
            continue
        d = dict(lbls)
        if all(d.get(k) == str(val) for k, val in labels.items()):
            total = (total or 0.0) + v
    return total


def wait_until(pred, timeout=10.0, interval=0.02, what="condition"):
    """Polls pred() until it returns a truthy value; returns it or raises."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(interval)


def main():
    unittest.main(verbosity=2)


class RecordingProxy:
    """A TCP relay on loopback that records every byte in each direction.

    Put it between the gateway and a replica to see exactly what the
    gateway sent upstream and what the replica answered."""

    def __init__(self, target_port):
        self.target = target_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.upstream = []    # bytes from the replica, per connection
        self.downstream = []  # bytes to the replica, per connection
        self.connections = 0
        self._lock = threading.Lock()
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._closing:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                idx = self.connections
                self.connections += 1
                self.upstream.append(bytearray())
                self.downstream.append(bytearray())
            threading.Thread(target=self._pump, args=(c, u, self.downstream[idx]),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, self.upstream[idx]),
                             daemon=True).start()

    def _pump(self, src, dst, record):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    record.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self._closing = True
        self.sock.close()


def split_http_response(raw):
    """Returns (head bytes, body bytes) of one raw HTTP response."""
    i = raw.find(b"\r\n\r\n")
    if i < 0:
        raise AssertionError("no end of head in %r" % raw[:200])
    return raw[:i + 4], raw[i + 4:]


def dechunk(body):
    """Decodes a chunked body; returns (data, complete) where complete means
    the terminating zero-size chunk was present."""
    out = bytearray()
    i = 0
    while True:
        j = body.find(b"\r\n", i)
        if j < 0:
            return bytes(out), False
        size = int(body[i:j].split(b";")[0], 16)
        if size == 0:
            return bytes(out), True
        if j + 2 + size > len(body):
            out += body[j + 2:]
            return bytes(out), False
        out += body[j + 2:j + 2 + size]
        i = j + 2 + size + 2


class StreamReader:
    """Reads a streamed HTTP response incrementally from a raw socket."""

    def __init__(self, port, body, path="/v1/chat/completions", headers=None, timeout=30.0):
        payload = json.dumps(body).encode()
        hdrs = {"Host": "127.0.0.1", "Content-Type": "application/json",
                "Content-Length": str(len(payload))}
        if headers:
            hdrs.update(headers)
        req = ("POST %s HTTP/1.1\r\n" % path).encode() + b"".join(
            ("%s: %s\r\n" % kv).encode() for kv in hdrs.items()) + b"\r\n" + payload
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(req)
        self.raw = bytearray()
        self.eof = False

    def read_some(self, n=65536):
        try:
            data = self.sock.recv(n)
        except socket.timeout:
            return b""
        if not data:
            self.eof = True
        self.raw.extend(data)
        return data

    def read_until(self, needle, timeout=30.0):
        deadline = time.monotonic() + timeout
        while needle not in self.raw:
            if self.eof:
                raise AssertionError("EOF before %r; got %r" % (needle, bytes(self.raw[-300:])))
            if time.monotonic() > deadline:
                raise AssertionError("timed out waiting for %r" % needle)
            self.read_some()
        return bytes(self.raw)

    def read_to_eof(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.5)
        while not self.eof and time.monotonic() < deadline:
            self.read_some()
        return bytes(self.raw)

    def close(self):
        self.sock.close()
