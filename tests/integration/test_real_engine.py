"""llmgate in front of a real inference engine: llama.cpp (node-llama-cpp's
prebuilt CPU binary) serving a tiny GGUF model with seeded random weights
through tools/realengine/server.mjs. Nothing of the engine's timing, SSE
framing or /metrics text was written to suit the gateway: prefill and decode
are real work on the CPU, several requests share one batched context.

Each case starts its replicas (one CPU thread each, pinned to separate CPUs
where there are two) and the gateway, and checks:

- the engine writes /metrics and chat streams as llama.cpp's server does
  (the fixtures taken from its source, tests/fixtures/engines/llamacpp);
- a greedy (temperature 0) answer through the gateway, streamed and not, and
  from the legacy completions endpoint, is byte for byte the replica's own
  answer to the same request sent directly (but for the id, the created
  time and the timings, new in every answer);
- the openai npm client works through the gateway against the engine;
- a client leaving mid-stream stops the generation on the engine: its own
  llama_decode() counter stops and its predicted-token counter grows by what
  was generated before the cut, not by max_tokens;
- mid-stream failover (routing.resume): the replica serving a greedy
  completion is killed mid-answer and the stream goes on on the other, one
  stream to the client whose text after the failure is the survivor's own
  answer to the prompt with the delivered text appended;
- the gateway reads the engine's /metrics (llama.cpp's vocabulary, detected)
  and sees its running and deferred requests;
- the ttft policy learns that a genuinely slower replica (the same weights
  unquantized, prefilling 8 tokens per step) is slower and sends it less
  (under 40% of requests sent one at a time, where a policy blind to speed
  sends half).

Skipped, saying why, where the engine cannot run: node older than 20, or the
node-llama-cpp package not installed in tools/realengine (tests/run.sh
installs it with npm; tools/realengine/README.md).
"""

import collections
import json
import os
import re
import shutil
import subprocess
import threading
import time
import unittest

import harness
from harness import (Harness, chat_body, http_request, read_access_log, scrape, metric,
                     wait_until)

ENGINE_DIR = os.path.join(harness.SRC, "tools", "realengine")
SERVER = os.path.join(ENGINE_DIR, "server.mjs")
NODE_DIR = os.path.join(harness.SRC, "tests", "node")
# generated models, kept with the build (make_gguf.py writes them atomically)
MODEL_DIR = os.path.join(harness.BUILD, "realengine-models")


def engine_unavailable():
    """Why the real engine cannot run here, or None."""
    if not shutil.which("node"):
        return "node is not installed"
    out = subprocess.run(["node", "-p", "process.versions.node"], capture_output=True, text=True)
    major = int(out.stdout.split(".")[0]) if out.returncode == 0 and out.stdout[:1].isdigit() else 0
    if major < 20:
        return "node-llama-cpp needs node 20 or later (this is %s)" % out.stdout.strip()
    mods = os.path.join(ENGINE_DIR, "node_modules")
    if not os.path.isdir(os.path.join(mods, "node-llama-cpp")):
        return ("the node-llama-cpp package is not installed in tools/realengine "
                "(tests/run.sh installs it: npm ci --omit=optional --ignore-scripts)")
    if not os.path.isdir(os.path.join(mods, "@node-llama-cpp", "linux-x64")):
        return "node-llama-cpp has no prebuilt binary for this platform (linux-x64 only here)"
    return None


UNAVAILABLE = engine_unavailable()
if UNAVAILABLE:
    print("test_real_engine: skipped: " + UNAVAILABLE)

_ID = re.compile(rb'"id":"[^"]*"')
_CREATED = re.compile(rb'"created":\d+')
_TIMINGS = re.compile(rb'"timings":\{[^}]*\}')


def normalized(body):
    """An answer with its id, created time and timings blanked: all that
    differs between two answers to one greedy request."""
    return _TIMINGS.sub(b'"timings":{}', _CREATED.sub(b'"created":0', _ID.sub(b'"id":""', body)))


FIXTURES = os.path.join(harness.SRC, "tests", "fixtures", "engines", "llamacpp")
# a value as C++'s `ostream << double` writes it: 6 significant digits
_CPP_DOUBLE = re.compile(r"^-?(0|[1-9]\d{0,5}|\d+\.\d{1,6}|\d(\.\d{1,5})?e[+-]\d{2,3})$")


@unittest.skipIf(UNAVAILABLE, UNAVAILABLE or "")
class RealEngineTest(Harness):

    # ---- replicas and the gateway -----------------------------------------------

    def engine(self, name, args=(), cpu=None):
        """Starts one engine replica; returns its port. cpu: pin it there (when
        the machine has that CPU), so that replicas do not take each other's."""
        argv = ["node", SERVER, "--listen", "127.0.0.1:0", "--name", name,
                "--model-dir", MODEL_DIR, "--threads", "1"] + list(args)
        pre = None
        if cpu is not None and cpu in os.sched_getaffinity(0):
            pre = lambda: os.sched_setaffinity(0, {cpu})  # noqa: E731
        p = self.start(argv, name="realengine-" + name, preexec_fn=pre)
        m = p.wait_for(r"realengine ready .*listen=[^ ]*:(\d+)", timeout=60)
        self.engines = dict(getattr(self, "engines", {}), **{name: p})
        return int(m.group(1))

    def gateway(self, ports, policy="round_robin", admin=False, resume=None):
        """Starts the gateway over the replicas; returns (proc, port[, admin port])."""
        backends = [{"name": n, "url": "http://127.0.0.1:%d" % p, "models": ["m"]}
                    for n, p in ports.items()]
        conf = self.base_config(backends, access_log={"path": self.path("access.log"),
                                                      "flush": 0})
        conf["routing"] = {"policy": policy}
        if resume is not None:
            conf["routing"]["resume"] = resume
        conf["health"] = {"interval": "1h", "scrape_interval": "100ms"}
        if admin:
            conf["admin"] = "127.0.0.1:0"
        gp, gw = self.start_gateway(conf)
        # the gateway scrapes each engine's /metrics and names its vocabulary
        for n in ports:
            gp.wait_for(r"backend %s: engine metrics look like llamacpp" % n,
                        timeout=15 * harness.SLOW)
        if admin:
            return gp, gw, int(gp.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return gp, gw

    def log(self, n=None):
        return read_access_log(self.path("access.log"), n, timeout=30 * harness.SLOW)

    # ---- llama.cpp's own wire format -------------------------------------------------

    def test_engine_writes_as_llamacpp(self):
        port = self.engine("r1")
        body = chat_body(content="Hello", max_tokens=3, temperature=0, stream=True,
                         stream_options={"include_usage": True})
        status, _, data = http_request(port, "POST", "/v1/chat/completions", body)
        self.assertEqual(status, 200)
        # its /metrics: line for line the HELP and TYPE lines, names and value
        # format of llama.cpp's server (the fixture from its source)
        with open(os.path.join(FIXTURES, "metrics_with_kv.prom")) as f:
            want = f.read().splitlines()
        status, hdrs, got = http_request(port, "GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertEqual(hdrs["content-type"], "text/plain; version=0.0.4")
        got = got.decode().splitlines()
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            if w.startswith("#"):
                self.assertEqual(g, w)
            else:
                self.assertEqual(g.split()[0], w.split()[0])
                self.assertRegex(g.split()[1], _CPP_DOUBLE, g)
        self.assertEqual(metric(harness.parse_prometheus("\n".join(got)),
                                "llamacpp:tokens_predicted_total"), 3)
        # its stream: each chunk's keys in the order llama.cpp writes them
        with open(os.path.join(FIXTURES, "chat_stream.sse"), "rb") as f:
            ref = [json.loads(e) for e in harness.sse_events(f.read())[:-1]]
        mine = [json.loads(e) for e in harness.sse_events(data)[:-1]]
        self.assertEqual(harness.sse_events(data)[-1], "[DONE]")
        for a, b in ((mine[0], ref[0]), (mine[1], ref[1]), (mine[-2], ref[-2]),
                     (mine[-1], ref[-1])):
            self.assertEqual(list(a), list(b))
            self.assertEqual([list(c) for c in a["choices"]], [list(c) for c in b["choices"]])
        self.assertEqual(list(mine[-1]["usage"]), list(ref[-1]["usage"]))
        self.assertEqual(list(mine[-1]["timings"]), list(ref[-1]["timings"]))
        self.assertRegex(mine[0]["id"], r"^chatcmpl-[A-Za-z0-9]{32}$")

    def test_vllm_load_reports(self):
        """--endpoint-load-metrics and --enable-server-load-tracking: vLLM's load
        header and GET /load as the fixtures from vLLM's source write them."""
        port = self.engine("r1", ["--sequences", "1", "--endpoint-load-metrics", "all",
                                  "--enable-server-load-tracking"])
        vllm = os.path.join(os.path.dirname(FIXTURES), "vllm")
        with open(os.path.join(vllm, "load_metrics_text.hdr")) as f:
            text_fx = f.read().rstrip("\r\n").partition(": ")[2]
        with open(os.path.join(vllm, "load_metrics_json.hdr")) as f:
            json_fx = f.read().rstrip("\r\n").partition(": ")[2]
        pyfloat = r"-?(?:\d+\.\d+(?:e[+-]\d{2,})?|\de[+-]\d{2,})"
        tmpl = lambda t: re.sub(pyfloat, "#", t)  # noqa: E731
        running = self.stream(port, "POST", "/v1/chat/completions",
                              chat_body(content="Hello", max_tokens=100000, stream=True))
        running.next_event(30)
        waiting = self.stream(port, "POST", "/v1/chat/completions",
                              chat_body(content="Hello", max_tokens=4, stream=True))
        waiting.read_head(30)
        s = self.stream(port, "POST", "/v1/chat/completions",
                        chat_body(content="Hello", max_tokens=4, stream=True),
                        headers={"endpoint-load-metrics-format": "text"})
        s.read_head(30)
        got = s.headers["endpoint-load-metrics"]
        self.assertEqual(tmpl(got), tmpl(text_fx), got)
        self.assertIn("num_requests_waiting=1.0,", got)  # the second one, behind the first
        status, _, data = http_request(port, "GET", "/load")
        self.assertEqual((status, data), (200, b'{"server_load":3}'))
        for x in (s, waiting, running):
            x.close()
        wait_until(lambda: http_request(port, "GET", "/load")[2] == b'{"server_load":0}', 30,
                   what="server_load back to 0")
        status, h, data = http_request(port, "POST", "/v1/chat/completions",
                                       chat_body(content="Hello", max_tokens=2),
                                       headers={"endpoint-load-metrics-format": "JSON"})
        self.assertEqual(status, 200, data)
        self.assertEqual(tmpl(h["endpoint-load-metrics"]), tmpl(json_fx))
        self.assertEqual(json.loads(h["endpoint-load-metrics"][5:])["named_metrics"]
                         ["num_requests_waiting"], 0.0)

    # ---- the same bytes as the engine's own ---------------------------------------

    def test_answers_identical_to_direct(self):
        ports = {"r1": self.engine("r1", cpu=0), "r2": self.engine("r2", cpu=1)}
        _, gw = self.gateway(ports)
        prompt = "Tell me about routing tokens through a gateway, in twelve words or so."
        cases = [
            ("/v1/chat/completions", chat_body(content=prompt, max_tokens=12, temperature=0,
                                               stream=True,
                                               stream_options={"include_usage": True})),
            ("/v1/chat/completions", chat_body(content=prompt, max_tokens=12, temperature=0)),
            ("/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": 7,
                                 "temperature": 0, "stream": True}),
        ]
        for path, body in cases:
            status, hdrs, direct = http_request(ports["r1"], "POST", path, body)
            self.assertEqual(status, 200, direct)
            # round robin: one through the gateway to each replica
            for _ in ports:
                s = self.stream(gw, "POST", path, body).read_all(60 * harness.SLOW)
                self.assertEqual((s.status, s.ended), (200, "complete"))
                self.assertEqual(s.headers["content-type"], hdrs["content-type"])
                self.assertEqual(normalized(s.body), normalized(direct), path)
            if not body.get("stream"):
                ans = json.loads(direct)
                self.assertEqual(ans["usage"]["completion_tokens"], 12)
                self.assertEqual(ans["choices"][0]["finish_reason"], "length")
                continue
            events = [json.loads(e) for e in harness.sse_events(direct)[:-1]]
            self.assertEqual(harness.sse_events(direct)[-1], "[DONE]")
            if path == "/v1/chat/completions":
                # OpenAI's chunks: the role first, a token per chunk, the
                # finish reason, then the usage asked for
                self.assertEqual(events[0]["choices"][0]["delta"],
                                 {"role": "assistant", "content": None})
                content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get(
                    "content")]
                self.assertEqual(len(content), 12)
                self.assertEqual(events[-2]["choices"][0]["finish_reason"], "length")
                self.assertEqual(events[-1]["choices"], [])
                self.assertEqual(events[-1]["usage"]["completion_tokens"], 12)
            else:
                self.assertEqual(len(events), 7 + 1)
        used = collections.Counter(r["backend"] for r in self.log(6))
        self.assertEqual(used, {"r1": 3, "r2": 3})

    # ---- a real client ------------------------------------------------------------

    def test_openai_npm_client(self):
        if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")):
            self.fail("the openai npm package is missing: run `npm ci` in tests/node "
                      "(tests/run.sh does it)")
        ports = {"r1": self.engine("r1", cpu=0), "r2": self.engine("r2", cpu=1)}
        _, gw = self.gateway(ports, policy="ttft")
        out = subprocess.run(["node", os.path.join(NODE_DIR, "openai_client.mjs"),
                              "http://127.0.0.1:%d/v1" % gw, "m"],
                             capture_output=True, text=True, timeout=120 * harness.SLOW)
        self.assertEqual(out.returncode, 0, out.stderr)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        # the engine samples (no temperature given): some text, max_tokens exactly
        self.assertTrue(res["plain"]["content"])
        self.assertEqual(res["plain"]["completion_tokens"], 6)
        self.assertEqual(res["plain"]["finish_reason"], "length")
        self.assertTrue(res["stream"]["content"])
        self.assertEqual(res["stream"]["completion_tokens"], 8)
        self.assertEqual(res["stream"]["finish_reason"], "length")
        self.assertEqual(res["error"]["status"], 404)
        self.assertEqual(res["error"]["code"], "model_not_found")

    # ---- cancel -------------------------------------------------------------------

    def test_client_leaving_stops_generation(self):
        port = self.engine("r1", cpu=0)
        _, gw = self.gateway({"r1": port})

        def counters():
            m = scrape(port)
            return (metric(m, "llamacpp:n_decode_total"),
                    metric(m, "llamacpp:tokens_predicted_total"),
                    metric(m, "llamacpp:requests_processing"))

        decodes0, predicted0, _ = counters()
        max_tokens = 2000  # ~6 s of decoding on one core, far more under load
        s = self.stream(gw, "POST", "/v1/chat/completions",
                        chat_body(content="Go on forever.", max_tokens=max_tokens,
                                  temperature=0, stream=True))
        for _ in range(6):  # the role chunk, then 5 tokens
            self.assertIsNotNone(s.next_event(60 * harness.SLOW))
        decodes1, _, running = counters()
        self.assertEqual(running, 1)
        self.assertGreaterEqual(decodes1 - decodes0, 5)
        s.close()
        # the engine sees the gateway's upstream connection close and stops at
        # its next token; its slot is free again
        wait_until(lambda: counters()[2] == 0, timeout=30 * harness.SLOW, interval=0.05,
                   what="the engine to stop generating")
        decodes2, predicted2, _ = counters()
        generated = predicted2 - predicted0
        self.assertGreaterEqual(generated, 5)
        self.assertLess(generated, max_tokens / 4,
                        "the engine generated %d of %d tokens" % (generated, max_tokens))
        # and nothing runs on: the decode counter stands still
        time.sleep(0.5)
        self.assertEqual(counters()[0], decodes2)
        rec = self.log(1)[0]
        self.assertEqual(rec["backend"], "r1")
        self.assertLess(rec["tokens"], max_tokens)

    # ---- mid-stream failover ---------------------------------------------------------

    def test_completion_resumed_after_its_replica_is_killed(self):
        # routing.resume on a real engine: the replica serving a greedy
        # completion is killed mid-answer (SIGKILL), and the stream goes on on
        # the other, given the prompt with the text delivered appended (the
        # engine takes no continue_final_message, so completions only)
        hdr = ["--replica-header", "x-replica"]
        ports = {"r1": self.engine("r1", hdr, cpu=0), "r2": self.engine("r2", hdr, cpu=1)}
        _, gw = self.gateway(ports, resume={"models": {"m": "greedy"}})
        # under valgrind the gateway relays slower than the engine decodes: a
        # longer answer keeps the engine generating when it is killed
        prompt, total = "Once upon a time there was", 240 if harness.VALGRIND else 40
        body = {"model": "m", "prompt": prompt, "max_tokens": total, "temperature": 0,
                "stream": True}
        s = self.stream(gw, "POST", "/v1/completions", body)
        self.assertEqual(s.read_head(60 * harness.SLOW), 200)
        dead = s.headers["x-replica"]
        alive = "r2" if dead == "r1" else "r1"
        for _ in range(8):
            self.assertIsNotNone(s.next_event(60 * harness.SLOW))
        self.engines[dead].kill()
        s.read_all(120 * harness.SLOW)
        self.assertEqual(s.ended, "complete")
        data = [d for _, d in s.events]
        self.assertEqual((data.count("[DONE]"), data[-1]), (1, "[DONE]"))
        chunks = [json.loads(d) for d in data[:-1]]
        pieces = [(c["id"], c["choices"][0]["text"]) for c in chunks
                  if c["choices"] and c["choices"][0].get("text")]
        self.assertEqual(len(pieces), total)
        self.assertEqual([c["choices"][0]["finish_reason"] for c in chunks
                          if c["choices"] and c["choices"][0].get("finish_reason")], ["length"])
        # the dead replica's tokens, then the survivor's (another completion id)
        ids = [i for i, _ in pieces]
        k = ids.index(ids[-1])
        self.assertGreaterEqual(k, 7)
        self.assertEqual(ids[:k], [ids[0]] * k)
        self.assertEqual(ids[k:], [ids[-1]] * (total - k))
        delivered = "".join(t for _, t in pieces[:k])
        rest = "".join(t for _, t in pieces[k:])

        def direct(prompt, max_tokens):
            status, _, out = http_request(ports[alive], "POST", "/v1/completions",
                                          dict(body, prompt=prompt, max_tokens=max_tokens,
                                               stream=False))
            self.assertEqual(status, 200)
            return json.loads(out)["choices"][0]["text"]

        # what the client read before the failure is the answer's start (same
        # weights, greedy), and after it the survivor's own answer to the
        # continuation: nothing lost, nothing repeated
        self.assertTrue(direct(prompt, total).startswith(delivered))
        self.assertEqual(direct(prompt + delivered, total - k), rest)
        rec = [r for r in self.log() if r["path"] == "/v1/completions"][0]
        self.assertEqual((rec["status"], rec["error"], rec["resumed"], rec["backend"]),
                         (200, None, 1, alive))
        self.assertEqual(rec["tokens"], total)

    # ---- the engine's own /metrics ----------------------------------------------------

    def test_gateway_reads_engine_metrics(self):
        busy = self.engine("busy", ["--sequences", "2"], cpu=0)
        idle = self.engine("idle", ["--sequences", "2"], cpu=1)
        # other clients load one engine directly: 2 running, 3 deferred
        readers = [self.stream(busy, "POST", "/v1/chat/completions",
                               chat_body(content="load %d" % i, max_tokens=1500,
                                         temperature=0, stream=True)) for i in range(5)]

        def engine_queue():
            m = scrape(busy)
            return (metric(m, "llamacpp:requests_processing"),
                    metric(m, "llamacpp:requests_deferred"),
                    metric(m, "llamacpp:kv_cache_usage_ratio") > 0)

        wait_until(lambda: engine_queue() == (2, 3, True), timeout=30,
                   what="the engine's queue")
        _, gw = self.gateway({"busy": busy, "idle": idle}, policy="ttft")

        def routed_with_fresh_samples():
            s = self.stream(gw, "POST", "/v1/chat/completions",
                            chat_body(content="hi", max_tokens=1, temperature=0))
            s.read_all(60 * harness.SLOW)
            self.assertEqual(s.status, 200)
            rec = self.log()[-1]
            cands = {c["backend"]: c for c in rec["candidates"]}
            if cands.get("busy", {}).get("waiting") != 3:
                return None
            return rec, cands

        rec, cands = wait_until(routed_with_fresh_samples, timeout=20 * harness.SLOW,
                                interval=0.05, what="the engine's queue in the access log")
        self.assertEqual(rec["backend"], "idle")
        c = cands["busy"]
        self.assertEqual((c["running"], c["waiting"]), (2, 3), c)
        # none of them is ours (less where the scrape has aged: slow under valgrind)
        self.assertLessEqual(c["foreign"], 5, c)
        self.assertGreater(c["foreign"], 0, c)
        self.assertGreater(c["kv"], 0, c)  # llamacpp:kv_cache_usage_ratio

    # ---- the ttft policy learns a slower replica -------------------------------------

    def test_ttft_sends_a_slower_replica_less(self):
        # the same weights unquantized (four times the bytes per decode step)
        # and prefilled 8 tokens per step: two to three times slower to a
        # first token than the Q8_0 replica
        ports = {"fast": self.engine("fast", cpu=0),
                 "slow": self.engine("slow", ["--weights", "f32", "--batch", "8"], cpu=1)}
        _, gw, admin = self.gateway(ports, policy="ttft", admin=True)
        words = ("the model answers a question about routing tokens while each replica "
                 "queues grow and shrink under load").split()

        def ask(i):
            text = " ".join(words[(i * 3 + j) % len(words)] for j in range(60))
            s = self.stream(gw, "POST", "/v1/chat/completions",
                            chat_body(content=text, max_tokens=16, temperature=0, stream=True),
                            timeout=60 * harness.SLOW).read_all()
            self.assertEqual((s.status, s.ended), (200, "complete"))
            s.close()

        # two at once first: each replica gets one (the gateway knows neither)
        first = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in first:
            t.start()
        for t in first:
            t.join()
        self.assertEqual({r["backend"] for r in self.log(2)}, set(ports))
        # then one request at a time: no load to balance, so a policy blind
        # to speed (round robin, least request) sends the slow replica half
        total = 40
        for i in range(total):
            ask(2 + i)
        log = sorted(self.log(2 + total), key=lambda r: r["ts"])
        # the first pair ran one on each replica at once: the slow replica's
        # first tokens are measured there even when none of the 40 went to it
        ttft = collections.defaultdict(list)
        for r in log:
            ttft[r["backend"]].append(r["ttft"])
        log = log[2:]
        med = {b: sorted(v)[len(v) // 2] for b, v in ttft.items()}
        n = {b: sum(1 for r in log if r["backend"] == b) for b in ports}
        status, _, data = http_request(admin, "GET", "/admin/backends")
        self.assertEqual(status, 200)
        learnt = {b["name"]: b["estimate"]["ttft_ms"] for b in json.loads(data)["backends"]}
        summary = "requests %s (in order: %s), median TTFT ms %s, learnt TTFT at 1 KiB ms %s" % (
            n, "".join(r["backend"][0] for r in log), med, learnt)
        print(summary)
        # the slow replica is slower (its own first tokens say so), the gateway
        # has learnt it, and sends it less (0-12 of 40 went there in runs on
        # the development machine: it may try it again as its estimate fades)
        self.assertGreater(med.get("slow", 0), 1.5 * med["fast"], summary)
        self.assertGreater(learnt["slow"], learnt["fast"], summary)
        self.assertLess(n["slow"], 0.4 * total, summary)

if __name__ == "__main__":
    harness.main()
