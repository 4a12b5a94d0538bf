"""TLS termination and TLS to backends, with certificates made by the test
(openssl CLI, in the test's temp folder): curl, Python's ssl module and the
openai npm client over HTTPS; protocol and ALPN limits; certificate reload on
SIGHUP; https backends verified against a CA (right CA, wrong CA, wrong name,
client certificate), for requests and for active health checks and /metrics
scrapes alike.

An https backend is a second llmgate listening with TLS in front of llmsim,
or (for client certificates) a small Python TLS relay.
"""

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import unittest

import harness
from harness import Harness, RecordingProxy, chat_body, metric, sse_events, wait_until

FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]
NODE_DIR = os.path.join(harness.SRC, "tests", "node")

# The start of a TLS server script that requires a client certificate signed by
# the CA: argv CERT KEY CA ARG (ARG, an integer, is the script's own).
MTLS_SERVER = r"""
import socket, ssl, sys, threading
cert, key, ca, arg = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
ctx.load_verify_locations(ca)
ctx.verify_mode = ssl.CERT_REQUIRED

def handshake(c, who):
    try:
        return ctx.wrap_socket(c, server_side=True)
    except (ssl.SSLError, OSError) as e:
        print("%s handshake failed: %s" % (who, e), flush=True)
        c.close()
        return None
"""

# A TLS relay to one TCP port (ARG) that requires a client certificate.
MTLS_RELAY = MTLS_SERVER + r"""
target = arg
ctx.sni_callback = lambda sock, name, c: print("relay sni %s" % name, flush=True)
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print("relay ready %d" % s.getsockname()[1], flush=True)

def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    for x in (a, b):
        try:
            x.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

def serve(c):
    t = handshake(c, "relay")
    if t is None:
        return
    print("relay client %s" % t.getpeercert()["subject"], flush=True)
    u = socket.create_connection(("127.0.0.1", target))
    threading.Thread(target=pump, args=(t, u), daemon=True).start()
    pump(u, t)

while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


# An https engine stand-in for health checks and /metrics scrapes: requires a
# client certificate signed by the CA, answers one request per connection
# (so every check makes the gateway reconnect and handshake again), /health
# 503 for the first FAIL_FIRST checks then 200, /metrics in vLLM's names.
# ARG is FAIL_FIRST. Prints each request with its SNI and client.
TLS_ENGINE = MTLS_SERVER + r"""
fail_first = arg
def on_sni(sock, name, c):
    sock.sni = name
ctx.sni_callback = on_sni
METRICS = (b"vllm:num_requests_waiting 3\nvllm:num_requests_running 5\n"
           b"vllm:kv_cache_usage_perc 0.25\n")
lock = threading.Lock()
state = {"health": 0, "conns": 0}
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
print("engine ready %d" % s.getsockname()[1], flush=True)

def serve(c):
    t = handshake(c, "engine")
    if t is None:
        return
    with lock:
        state["conns"] += 1
        conn = state["conns"]
    client = dict(x[0] for x in t.getpeercert()["subject"])["commonName"]
    req = b""
    while b"\r\n\r\n" not in req:
        d = t.recv(65536)
        if not d:
            t.close()
            return
        req += d
    method, path = req.split(b" ")[:2]
    path = path.decode()
    if path == "/health":
        with lock:
            state["health"] += 1
            status = 503 if state["health"] <= fail_first else 200
        body = b"ok"
    elif path == "/metrics":
        status, body = 200, METRICS
    else:
        status, body = 404, b"no"
    print("engine %s %s %d sni=%s client=%s conn=%d" % (method.decode(), path, status,
          getattr(t, "sni", None), client, conn), flush=True)
    t.sendall(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
              % (status, len(body)) + body)
    t.close()

while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", name + ".key", "-out", name + ".pem", "-days", "2",
            "-subj", "/CN=%s" % name, cwd=d)
    return os.path.join(d, name + ".pem")


def make_cert(d, ca, name, cn, san, usage="serverAuth"):
    """A leaf certificate signed by CA `ca`; returns (cert path, key path)."""
    with open(os.path.join(d, name + ".ext"), "w") as f:
        f.write("subjectAltName=%s\nextendedKeyUsage=%s\n" % (san, usage))
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=%s" % cn, cwd=d)
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".pem", "-days", "2",
            "-extfile", name + ".ext", cwd=d)
    return os.path.join(d, name + ".pem"), os.path.join(d, name + ".key")


def peer_cn(port, cafile, server_hostname="localhost"):
    ctx = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_hostname) as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            return subject["commonName"], s.version(), s.selected_alpn_protocol()


def https_request(port, cafile, method, path, body=None, headers=None, sock=None):
    """One request over TLS (or over `sock`, an open TLS socket kept alive);
    returns (status, headers, body, sock)."""
    if sock is None:
        ctx = ssl.create_default_context(cafile=cafile)
        ctx.set_alpn_protocols(["http/1.1"])
        raw = socket.create_connection(("127.0.0.1", port), timeout=15)
        sock = ctx.wrap_socket(raw, server_hostname="localhost")
    data = json.dumps(body).encode() if body is not None else b""
    head = "%s %s HTTP/1.1\r\nHost: localhost\r\nContent-Length: %d\r\n" % (method, path,
                                                                             len(data))
    head += "".join("%s: %s\r\n" % kv for kv in (headers or {}).items()) + "\r\n"
    sock.sendall(head.encode() + data)
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(65536)
    h, _, rest = buf.partition(b"\r\n\r\n")
    lines = h.decode().split("\r\n")
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    n = int(hdrs.get("content-length", "0"))
    while len(rest) < n:
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), hdrs, rest, sock


class TlsTest(Harness):
    quiet_backends = True  # RecordingProxy in front of the backends

    def setUp(self):
        super().setUp()
        d = self.tmp
        self.ca = make_ca(d, "ca")
        self.wrong_ca = make_ca(d, "wrongca")
        self.cert, self.key = make_cert(d, "ca", "srv", "localhost", "DNS:localhost,IP:127.0.0.1")
        self.cert2, self.key2 = make_cert(d, "ca", "srv2", "localhost-2",
                                          "DNS:localhost,IP:127.0.0.1")
        self.ccert, self.ckey = make_cert(d, "ca", "client", "llmgate-client", "DNS:llmgate",
                                          usage="clientAuth")
        # the gateway reads these paths; the reload test overwrites them
        self.live_cert = os.path.join(d, "live.pem")
        self.live_key = os.path.join(d, "live.key")
        shutil.copy(self.cert, self.live_cert)
        shutil.copy(self.key, self.live_key)

    def tls_gateway(self, backends, name="llmgate", **extra):
        conf = self.base_config(backends, access_log=self.path(name + "-access.log"), **extra)
        conf["listen"] = [{"address": "127.0.0.1:0",
                           "tls": {"cert": self.live_cert, "key": self.live_key}}]
        return self.start_gateway(conf, name=name)

    def sim_backend(self, port, name="r1"):
        return [{"name": name, "url": "http://127.0.0.1:%d" % port, "models": ["m"]}]

    # ---- termination ------------------------------------------------------

    @unittest.skipUnless(shutil.which("curl"), "curl is not installed")
    def test_curl_over_https(self):
        _, sim = self.start_llmsim("r1", args=FAST)
        rec = RecordingProxy(sim)
        self.addCleanup(rec.close)
        _, gw = self.tls_gateway(self.sim_backend(rec.port))
        url = "https://localhost:%d/v1/chat/completions" % gw
        body = json.dumps(chat_body(stream=True, max_tokens=5))
        # curl offers h2 and http/1.1; the gateway picks http/1.1
        out = subprocess.run(["curl", "-sS", "-N", "--fail", "--http2", "--cacert", self.ca,
                              "--resolve", "localhost:%d:127.0.0.1" % gw,
                              "-H", "Content-Type: application/json", "-d", body,
                              "-w", "\n%{http_version} %{ssl_verify_result}", url],
                             capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        text, _, tail = out.stdout.rpartition(b"\n")
        self.assertEqual(tail, b"1.1 0")
        self.assertEqual(sse_events(text)[-1], "[DONE]")
        # the backend is told the client came over HTTPS
        self.assertIn(b"X-Forwarded-Proto: https\r\n", bytes(rec.downstream[0]))
        # a client that trusts another CA refuses the gateway
        out = subprocess.run(["curl", "-sS", "--cacert", self.wrong_ca, "--resolve",
                              "localhost:%d:127.0.0.1" % gw, url, "-d", body],
                             capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 60, out.stderr)  # peer certificate cannot be verified

    def test_protocol_versions_and_alpn(self):
        _, sim = self.start_llmsim("r1", args=FAST)
        _, gw = self.tls_gateway(self.sim_backend(sim))
        cn, version, alpn = peer_cn(gw, self.ca)
        self.assertEqual(cn, "localhost")
        self.assertIn(version, ("TLSv1.2", "TLSv1.3"))
        # TLS 1.2 is enough, with an intermediate cipher
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", gw), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                self.assertEqual(s.version(), "TLSv1.2")
                self.assertEqual(s.selected_alpn_protocol(), "http/1.1")
                self.assertIn("GCM", s.cipher()[0] + "CHACHA20" * ("CHACHA" in s.cipher()[0]))
        # TLS 1.1 is refused, even by a client willing to speak it
        out = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % gw, "-tls1_1",
                              "-cipher", "DEFAULT:@SECLEVEL=0"],
                             input=b"", capture_output=True, timeout=20)
        self.assertNotEqual(out.returncode, 0, out.stdout)
        # a client that only speaks h2 gets a no_application_protocol alert
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", gw), timeout=10) as raw:
            with self.assertRaises(ssl.SSLError) as cm:
                ctx.wrap_socket(raw, server_hostname="localhost")
        self.assertIn("no application protocol", str(cm.exception).lower())
        # plain HTTP on the TLS port gets nowhere, and the gateway goes on
        try:
            out = harness.raw_exchange(gw, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
                                       timeout=5)
        except ConnectionResetError:
            out = b""
        self.assertNotIn(b"HTTP/1.1 200", out)
        status, _, _, s = https_request(gw, self.ca, "GET", "/healthz")
        s.close()
        self.assertEqual(status, 200)

    @unittest.skipUnless(shutil.which("node"), "node is not installed")
    def test_openai_npm_client_over_https(self):
        if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")):
            self.fail("the openai npm package is missing: run `npm ci` in tests/node")
        _, sim = self.start_llmsim("r1", args=FAST)
        _, gw = self.tls_gateway(self.sim_backend(sim))
        env = dict(os.environ, NODE_EXTRA_CA_CERTS=self.ca)
        out = subprocess.run(["node", os.path.join(NODE_DIR, "openai_client.mjs"),
                              "https://localhost:%d/v1" % gw, "m"],
                             capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(out.returncode, 0, out.stderr)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertEqual(res["plain"]["completion_tokens"], 6)
        self.assertEqual(res["stream"]["completion_tokens"], 8)
        self.assertEqual(res["error"]["status"], 404)

    def test_certificates_reload_on_sighup(self):
        _, sim = self.start_llmsim("r1", args=FAST)
        gwp, gw = self.tls_gateway(self.sim_backend(sim))
        self.assertEqual(peer_cn(gw, self.ca)[0], "localhost")
        # a keep-alive connection made before the reload
        status, _, _, old = https_request(gw, self.ca, "POST", "/v1/chat/completions",
                                          chat_body(max_tokens=2))
        self.assertEqual(status, 200)
        # a broken file: the reload fails and the certificate in use stays
        with open(self.live_cert, "w") as f:
            f.write("-----BEGIN CERTIFICATE-----\nnot a certificate\n")
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"TLS reload failed: keeping the certificates in use", start=n)
        self.assertEqual(peer_cn(gw, self.ca)[0], "localhost")
        # the new pair: new connections get it
        shutil.copy(self.cert2, self.live_cert)
        shutil.copy(self.key2, self.live_key)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"TLS: reloaded the certificates of 1 listen address", start=n)
        self.assertEqual(peer_cn(gw, self.ca)[0], "localhost-2")
        # and the connection from before still works
        status, _, _, old = https_request(gw, self.ca, "POST", "/v1/chat/completions",
                                          chat_body(max_tokens=2), sock=old)
        self.assertEqual(status, 200)
        old.close()

    # ---- https backends ---------------------------------------------------

    def https_backend(self):
        """A TLS llmgate in front of llmsim (via a recorder); returns (port, recorder)."""
        _, sim = self.start_llmsim("r1", args=FAST)
        rec = RecordingProxy(sim)
        self.addCleanup(rec.close)
        _, port = self.tls_gateway(self.sim_backend(rec.port), name="front")
        return port, rec

    def edge_gateway(self, port, tls, host="127.0.0.1"):
        conf = self.base_config([{"name": "tlsb", "url": "https://%s:%d" % (host, port),
                                  "models": ["m"], "tls": tls, "api_key": "backend-secret"}],
                                access_log=self.path("edge-access.log"))
        return self.start_gateway(conf, name="edge")

    def test_https_backend_verified_against_the_ca(self):
        port, rec = self.https_backend()
        # the URL's host is an address: verified against the certificate's IP SAN
        _, gw = self.edge_gateway(port, {"ca_file": self.ca})
        status, hdrs, obj, _ = harness.post_json(gw, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 200, obj)
        # streamed, through both TLS hops
        status, _, data = harness.http_request(gw, "POST", "/v1/chat/completions",
                                               chat_body(stream=True, max_tokens=6))
        self.assertEqual(status, 200)
        self.assertEqual(sse_events(data)[-1], "[DONE]")
        sent = bytes(rec.downstream[0])
        self.assertIn(b"X-Forwarded-Proto: https\r\n", sent)  # the front saw a TLS client
        self.assertIn(b"Authorization: Bearer backend-secret\r\n", sent)

    def test_https_backend_by_name(self):
        port, _ = self.https_backend()
        _, gw = self.edge_gateway(port, {"ca_file": self.ca, "server_name": "localhost"})
        status, _, obj, _ = harness.post_json(gw, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 200, obj)

    def test_https_backend_with_a_wrong_ca_is_refused(self):
        port, rec = self.https_backend()
        edge, gw = self.edge_gateway(port, {"ca_file": self.wrong_ca})
        status, _, obj, _ = harness.post_json(gw, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 502, obj)
        self.assertEqual(obj["error"]["code"], "upstream_tls_error")
        edge.wait_for(r"backend tlsb \(https://127\.0\.0\.1:\d+\): certificate verification "
                      r"failed: unable to get local issuer certificate")
        self.assertEqual(rec.connections, 0, "a request went through an unverified backend")

    def test_https_backend_with_a_wrong_name_is_refused(self):
        port, rec = self.https_backend()
        edge, gw = self.edge_gateway(port, {"ca_file": self.ca, "server_name": "other.example"})
        status, _, obj, _ = harness.post_json(gw, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 502, obj)
        edge.wait_for(r"certificate verification failed: hostname mismatch")
        self.assertEqual(rec.connections, 0)

    def test_https_backend_client_certificate(self):
        _, sim = self.start_llmsim("r1", args=FAST)
        relay = self.start([harness.PYTHON, "-c", MTLS_RELAY, self.cert, self.key, self.ca,
                            str(sim)], name="relay")
        port = int(relay.wait_for(r"relay ready (\d+)").group(1))
        _, gw = self.edge_gateway(port, {"ca_file": self.ca, "cert": self.ccert,
                                         "key": self.ckey, "server_name": "localhost"})
        status, _, obj, _ = harness.post_json(gw, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 200, obj)
        relay.wait_for(r"relay sni localhost")  # SNI: the configured name
        relay.wait_for(r"relay client .*llmgate-client")
        # without the certificate the relay refuses the handshake
        _, gw2 = self.start_gateway(self.base_config(
            [{"name": "nocert", "url": "https://127.0.0.1:%d" % port, "models": ["m"],
              "tls": {"ca_file": self.ca}}]), name="nocert")
        n = len(relay.lines)
        status, _, obj, _ = harness.post_json(gw2, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 502, obj)
        relay.wait_for(r"relay sni None", start=n)  # an IP in the URL: no SNI (RFC 6066)

    # ---- health checks and /metrics scrapes of https backends ---------------

    def checked_backend(self, tls, fail_first=3):
        """The TLS engine stand-in and an edge gateway checking (100 ms, fall and rise 1)
        and scraping it; returns (engine proc, gateway proc, admin port)."""
        engine = self.start([harness.PYTHON, "-c", TLS_ENGINE, self.cert, self.key, self.ca,
                             str(fail_first)], name="engine")
        port = int(engine.wait_for(r"engine ready (\d+)").group(1))
        conf = self.base_config(
            [{"name": "tlsb", "url": "https://127.0.0.1:%d" % port, "models": ["m"],
              "tls": tls}],
            admin="127.0.0.1:0",
            health={"interval": "100ms", "timeout": "2s", "fall": 1, "rise": 1,
                    "scrape_interval": "100ms"})
        gwp, _ = self.start_gateway(conf, name="edge")
        admin = int(gwp.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return engine, gwp, admin

    def test_https_backend_checked_and_scraped_with_its_tls_settings(self):
        """Active checks and /metrics scrapes of an https backend use the requests' TLS:
        the CA, SNI (server_name) and the client certificate, on every reconnection."""
        engine, gwp, admin = self.checked_backend(
            {"ca_file": self.ca, "server_name": "localhost", "cert": self.ccert,
             "key": self.ckey})
        # three 503s mark it down, the 200s after them up again: both read over TLS
        gwp.wait_for(r"backend tlsb is down \(1 checks failed, last: status 503")
        gwp.wait_for(r"backend tlsb is up")
        # the engine's own figures, from its /metrics over TLS
        wait_until(lambda: metric(harness.scrape(admin),
                                  "llmgate_backend_engine_requests_waiting", backend="tlsb") == 3,
                   what="the engine's queue, scraped over TLS")
        samples = harness.scrape(admin)
        self.assertEqual(metric(samples, "llmgate_backend_engine_requests_running",
                                backend="tlsb"), 5)
        self.assertEqual(metric(samples, "llmgate_backend_engine_kv_cache_usage_ratio",
                                backend="tlsb"), 0.25)
        gwp.wait_for(r"backend tlsb: engine metrics look like vllm")
        # each request came on a connection of its own: SNI and the client certificate
        # on every handshake, not only the first
        engine.wait_for(r"engine GET /health 200 .* conn=(\d+)")
        lines = [ln for ln in engine.lines if ln.startswith("engine GET")]
        self.assertGreaterEqual(len(lines), 6, lines)
        for ln in lines:
            self.assertRegex(ln, r"sni=localhost client=llmgate-client conn=\d+$")
        self.assertIn("/metrics", " ".join(lines))
        self.assertFalse([ln for ln in engine.lines if "handshake failed" in ln], engine.output())

    def test_https_backend_with_a_wrong_ca_fails_its_checks(self):
        """A CA the backend's certificate does not chain to: every check fails on the
        certificate (so the backend is down, the log says why), nothing is scraped."""
        engine, gwp, admin = self.checked_backend(
            {"ca_file": self.wrong_ca, "server_name": "localhost", "cert": self.ccert,
             "key": self.ckey}, fail_first=0)
        gwp.wait_for(r"backend tlsb is down \(1 checks failed, last: certificate "
                     r"verification failed: .*; check the backend's tls settings")
        gwp.wait_for(r"backend tlsb: scraping /metrics failed \(certificate verification failed")
        engine.wait_for(r"engine handshake failed")
        samples = harness.scrape(admin)
        self.assertEqual(metric(samples, "llmgate_backend_state", backend="tlsb", state="down"), 1)
        self.assertIsNone(metric(samples, "llmgate_backend_engine_requests_waiting",
                                 backend="tlsb"))
        self.assertFalse([ln for ln in engine.lines if ln.startswith("engine GET")],
                         engine.output())
        # a client certificate missing: the engine refuses the handshake, the check fails
        # (with TLS 1.3 the refusal comes after the client's side of the handshake, as a
        # read error or an alert: the reason logged may be either)
        engine2, gwp2, _ = self.checked_backend({"ca_file": self.ca, "server_name": "localhost"},
                                                fail_first=0)
        gwp2.wait_for(r"backend tlsb is down \(1 checks failed, last: ")
        engine2.wait_for(r"engine handshake failed: .*certificate")
        self.assertFalse([ln for ln in engine2.lines if ln.startswith("engine GET")],
                         engine2.output())

    def test_bad_tls_files_stop_the_start(self):
        conf = self.base_config(self.sim_backend(1))
        conf["listen"] = [{"address": "127.0.0.1:0",
                           "tls": {"cert": self.cert, "key": self.key2}}]
        p = self.start([harness.binary("llmgate"), "-c", self.write_config(conf)])
        self.assertEqual(p.wait(30), 2)
        self.assertIn("cannot use the private key %s" % self.key2, p.output())
        self.assertIn("key values mismatch", p.output())


if __name__ == "__main__":
    harness.main()
