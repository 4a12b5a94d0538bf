"""Engines' load reports folded into the gateway's load state
(fleet/loadreport.h): a backend with "load_header" asks each request for
vLLM's endpoint-load-metrics header (TEXT or JSON), one with "load_path"
polls vLLM's GET /load or SGLang's GET /v1/loads. A report newer than the
last /metrics scrape stands in for it: with scrapes an hour apart, the
gateway still sees a queue that formed after its only scrape, and says
where its counts came from (/admin/backends: engine.load_from).
"""

import json

import harness
from harness import Harness, StreamReader, chat_body, http_request, wait_until

SLOW = ["--slots", "2", "--decode-ms", "50", "--decode-ms-per-seq", "0"]


class LoadReportsTest(Harness):

    def gateway(self, backends):
        conf = self.base_config(backends, admin="127.0.0.1:0", workers=1,
                                health={"interval": "1h", "scrape_interval": "1h",
                                        "slow_start": 0})
        self.gw, port = self.start_gateway(conf)
        self.admin = int(self.gw.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return port

    def engines(self):
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        self.assertEqual(status, 200)
        return {b["name"]: b["engine"] for b in json.loads(data)["backends"]}

    def load_directly(self, port):
        """Other clients' load on the replica: 2 running, 3 waiting."""
        readers = [StreamReader(port, chat_body(stream=True, max_tokens=400)) for _ in range(5)]
        self.addCleanup(lambda: [r.close() for r in readers])
        wait_until(lambda: (lambda s: s["running"] == 2 and s["waiting"] == 3)(
            harness.sim_state(port)), what="the queue")

    def test_response_header_text_and_json(self):
        ports = {}
        for name in ("text", "json"):
            _, ports[name] = self.start_llmsim(name, args=SLOW + [
                "--flavor", "vllm", "--endpoint-load-metrics", "all"])
        port = self.gateway([{"name": n, "url": "http://127.0.0.1:%d" % p, "models": ["m"],
                              "load_header": n} for n, p in ports.items()])
        # the only scrape, at the start: nothing there
        wait_until(lambda: all(e["waiting"] == 0 and e["load_from"] == "scrape"
                               for e in self.engines().values()), what="the first scrapes")
        for p in ports.values():
            self.load_directly(p)
        # one stream of ours on each: its head brings the engine's load
        streams = []
        for _ in ports:
            s = StreamReader(port, chat_body(stream=True, max_tokens=2))
            self.addCleanup(s.close)
            s.read_until(b"\r\n\r\n")
            self.assertIn(b"endpoint-load-metrics:", bytes(s.raw).lower())
            streams.append(s)

        def reported():
            e = self.engines()
            return e if all(x["load_from"] == "report" for x in e.values()) else None

        engines = wait_until(reported, what="the reports folded in")
        for name, e in engines.items():
            self.assertEqual(e["waiting"], 3, (name, e))  # the scrape an hour old said 0
            # vLLM's header has no running count: the scrape's (0) moved by ours since
            self.assertEqual(e["running"], 1, (name, e))
            self.assertLess(e["age_ms"], 5000, e)

    def test_polled_v1_loads(self):
        _, sp = self.start_llmsim("sglang", args=SLOW + ["--flavor", "sglang", "--v1-loads"])
        _, vp = self.start_llmsim("vllm", args=SLOW + ["--flavor", "vllm",
                                                        "--enable-server-load-tracking"])
        self.gateway([{"name": "sglang", "url": "http://127.0.0.1:%d" % sp, "models": ["m"],
                       "load_path": "/v1/loads"},
                      {"name": "vllm", "url": "http://127.0.0.1:%d" % vp, "models": ["m"],
                       "load_path": "/load"}])
        wait_until(lambda: self.engines()["sglang"]["waiting"] is not None, what="a scrape")
        self.load_directly(sp)
        self.load_directly(vp)
        seen = []

        def polled():
            e = self.engines()
            seen[:] = [e]
            s, v = e["sglang"], e["vllm"]
            return e if (s["load_from"] == v["load_from"] == "report"
                         and (s["running"], s["waiting"]) == (2, 3)
                         and v["running"] + v["waiting"] == 5) else None

        try:
            engines = wait_until(polled, what="the polls folded in")
        except AssertionError:
            raise AssertionError("the polls not folded in: %r" % seen)
        # SGLang says its slots (max_running_requests); vLLM's /load only the
        # total, split at the slots known (none here: all running)
        self.assertEqual(engines["sglang"]["capacity"], 2, engines)
        self.assertLess(engines["vllm"]["age_ms"], 5000, engines)

if __name__ == "__main__":
    harness.main()
