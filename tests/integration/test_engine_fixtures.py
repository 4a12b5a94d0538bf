"""The engines' own /metrics and SSE transcripts (tests/fixtures/engines/, each
with the source it was taken from) played by a small HTTP server in front of
which llmgate runs, as it would run in front of vLLM, SGLang, TGI or a
llama.cpp server.

Asserted: every engine's exposition is read in its own vocabulary, old names
included (the admin API's engine figures); every transcript reaches the
client byte for byte; a stream's token count comes from the engine's usage
chunk; an error event after the 200 is counted
(llmgate_backend_stream_errors_total), logged (access log "error":
"engine_error_event") and taken as a failure of the backend, while clean
streams count none."""

import http.server
import json
import os
import socketserver
import threading

import harness
from harness import Harness, http_request, metric, parse_prometheus, read_access_log, wait_until

FIXTURES = os.path.join(harness.SRC, "tests", "fixtures", "engines")


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


def sse_events(data):
    """A transcript split after each blank line: what the engine writes at a time."""
    parts, start = [], 0
    while True:
        i = data.find(b"\n\n", start)
        if i < 0:
            break
        parts.append(data[start:i + 2])
        start = i + 2
    if start < len(data):
        parts.append(data[start:])
    return parts


class FixtureEngine:
    """An engine that answers /metrics with an exposition and every POST with a
    transcript (as a chunked text/event-stream, one chunk per event)."""

    def __init__(self, metrics, stream=None):
        engine = self
        self.metrics = metrics
        self.stream = stream
        self.posts = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                body = engine.metrics if self.path == "/metrics" else b'{"status":"ok"}'
                ctype = "text/plain; version=0.0.4" if self.path == "/metrics" else "application/json"
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                engine.posts += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for part in sse_events(engine.stream):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass  # the gateway closes a connection it no longer trusts: not news here

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# (exposition, flavor detected, waiting, running, KV usage or None)
EXPOSITIONS = [
    ("vllm/metrics_v0.prom", "vllm", 2, 4, 0.3125),
    ("vllm/metrics_v1_0.8.prom", "vllm", 0, 6, 0.21484375),
    ("vllm/metrics_v1_0.10_dp2.prom", "vllm", 1, 8, 0.6875),
    ("vllm/metrics_v1.prom", "vllm", 3, 7, 0.4134),
    ("sglang/metrics.prom", "sglang", 3, 10, 0.57),
    ("sglang/metrics_v0.3.prom", "sglang", 4, 9, 0.62),
    ("tgi/metrics.prom", "tgi", 3, 8, None),
    ("llamacpp/metrics_with_kv.prom", "llamacpp", 1, 2, 0.190002),
    ("llamacpp/metrics.prom", "llamacpp", 2, 3, None),
]

# (transcript, its engine's exposition, completion tokens counted, error event)
STREAMS = [
    ("vllm/chat_stream.sse", "vllm/metrics_v1.prom", 5, False),
    ("vllm/chat_stream_error.sse", "vllm/metrics_v1.prom", 2, True),
    ("sglang/chat_stream.sse", "sglang/metrics.prom", 6, False),
    ("sglang/chat_stream_error.sse", "sglang/metrics.prom", 1, True),
    ("tgi/chat_stream.sse", "tgi/metrics.prom", 6, False),
    ("tgi/chat_stream_error.sse", "tgi/metrics.prom", 1, True),
    ("llamacpp/chat_stream.sse", "llamacpp/metrics.prom", 5, False),
    ("llamacpp/chat_stream_error.sse", "llamacpp/metrics.prom", 2, True),
    ("llamacpp/chat_stream_error_legacy.sse", "llamacpp/metrics_with_kv.prom", 1, True),
]


class EngineFixturesTest(Harness):

    def start_engines(self, engines, log):
        """llmgate over FixtureEngines (one backend each, model "m"); returns its port."""
        backends = [{"name": "e%d" % i, "url": "http://127.0.0.1:%d" % e.port, "models": ["m"]}
                    for i, e in enumerate(engines)]
        for e in engines:
            self.addCleanup(e.close)
        conf = self.base_config(backends, admin={"listen": "127.0.0.1:0"},
                                access_log=self.path(log),
                                health={"interval": "1h", "scrape_interval": "50ms"})
        proc, port = self.start_gateway(conf)
        self.admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return port

    def backends(self):
        status, _, data = http_request(self.admin, "GET", "/admin/backends?scores=0")
        self.assertEqual(status, 200)
        return {b["name"]: b for b in json.loads(data)["backends"]}

    def test_every_exposition_is_read(self):
        engines = [FixtureEngine(fixture(name)) for name, *_ in EXPOSITIONS]
        self.start_engines(engines, "access.log")

        def scraped():
            b = self.backends()
            return all(b["e%d" % i]["engine"] is not None
                       and b["e%d" % i]["engine"].get("flavor") == EXPOSITIONS[i][1]
                       for i in range(len(EXPOSITIONS)))
        wait_until(scraped, timeout=15, what="every exposition scraped")
        b = self.backends()
        for i, (name, flavor, waiting, running, kv) in enumerate(EXPOSITIONS):
            with self.subTest(fixture=name):
                e = b["e%d" % i]["engine"]
                self.assertEqual((e["flavor"], e["waiting"], e["running"]), (flavor, waiting, running))
                if kv is None:
                    self.assertIsNone(e["kv_usage"])
                else:
                    self.assertAlmostEqual(e["kv_usage"], kv, delta=0.0006)  # rounded to 3 places

    def test_streams_pass_whole_and_errors_count(self):
        body = {"model": "m", "stream": True, "max_tokens": 5,
                "stream_options": {"include_usage": True},
                "messages": [{"role": "user", "content": "hi"}]}
        for i, (name, expo, tokens, error) in enumerate(STREAMS):
            with self.subTest(fixture=name):
                engine = FixtureEngine(fixture(expo), fixture(name))
                log = "access-%d.log" % i
                port = self.start_engines([engine], log)
                status, h, data = http_request(port, "POST", "/v1/chat/completions", body)
                self.assertEqual(status, 200)
                self.assertTrue(h["content-type"].startswith("text/event-stream"))
                self.assertEqual(data, fixture(name), "the transcript changed on its way")
                rec = read_access_log(self.path(log), 1)[-1]
                self.assertEqual(rec["status"], 200)
                self.assertEqual(rec["tokens"], tokens)
                self.assertEqual(rec["error"], "engine_error_event" if error else None)
                _, _, mdata = http_request(self.admin, "GET", "/metrics")
                m = parse_prometheus(mdata.decode())
                self.assertEqual(metric(m, "llmgate_backend_stream_errors_total", backend="e0"),
                                 1 if error else 0)
                self.assertEqual(metric(m, "llmgate_backend_completion_tokens_total", backend="e0"),
                                 tokens)
                self.assertEqual(engine.posts, 1)


if __name__ == "__main__":
    harness.main()
