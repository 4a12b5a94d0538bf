"""Prometheus metrics on the admin listener, checked by parsing the exposition.

Real replicas, real gateway, real requests with known sizes; then /metrics is
parsed strictly (harness.parse_prometheus) and its numbers compared with what
was sent, and the text is checked against the format's rules (one HELP and
TYPE per family, before its samples, families not split; histogram buckets
cumulative, ending with +Inf equal to _count).
"""

import json
import os
import re
import signal

import harness
from harness import Harness, chat_body, http_request, metric, parse_prometheus, post_json

FAST = ["--decode-ms", "3", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


def check_format(test, text):
    """The text format's structure; returns {family: type}."""
    types = {}
    seen_done = set()
    current = None
    for line in text.splitlines():
        m = re.match(r"# (HELP|TYPE) (\S+) (.*)", line)
        if m:
            kind, name, rest = m.groups()
            if kind == "TYPE":
                test.assertNotIn(name, types, "family %s declared twice" % name)
                test.assertIn(rest, ("counter", "gauge", "histogram"), line)
                types[name] = rest
            if current is not None and name != current:
                seen_done.add(current)
            current = name
            test.assertNotIn(name, seen_done, "family %s split in two" % name)
            continue
        test.assertFalse(line.startswith("#"), line)
        sample = line.split("{")[0].split(" ")[0]
        family = sample
        if current is not None and types.get(current) == "histogram":
            family = re.sub(r"_(bucket|sum|count)$", "", sample)
        test.assertEqual(family, current, "sample %s outside its family's block" % sample)
        if types[current] == "counter":
            test.assertTrue(current.endswith("_total"), current)
    return types


class MetricsTest(Harness):

    def start_fleet(self, admin):
        self.sims = {}
        backends = []
        for n in ("r1", "r2"):
            _, port = self.start_llmsim(n, args=FAST)
            self.sims[n] = port
            backends.append({"name": n, "url": "http://127.0.0.1:%d" % port, "models": ["m"]})
        conf = self.base_config(backends, admin=admin)
        proc, port = self.start_gateway(conf)
        self.gw = proc
        self.admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return port

    def scrape(self, headers=None):
        status, h, data = http_request(self.admin, "GET", "/metrics", headers=headers)
        self.assertEqual(status, 200)
        self.assertTrue(h["content-type"].startswith("text/plain; version=0.0.4"))
        text = data.decode()
        return text, parse_prometheus(text)

    def test_numbers_match_the_traffic(self):
        port = self.start_fleet({"listen": "127.0.0.1:0"})
        streamed = [5, 7, 9, 11, 13, 15]
        for n in streamed:
            status, _, data = http_request(port, "POST", "/v1/chat/completions",
                                           chat_body(stream=True, max_tokens=n))
            self.assertEqual(status, 200)
        status, _, _, _ = post_json(port, "/v1/chat/completions", chat_body(max_tokens=4))
        self.assertEqual(status, 200)
        self.assertEqual(post_json(port, "/v1/chat/completions", chat_body(model="nope"))[0], 404)
        self.assertEqual(http_request(port, "GET", "/v1/models")[0], 200)

        text, s = self.scrape()
        types = check_format(self, text)
        for fam, typ in (("llmgate_requests_total", "counter"),
                         ("llmgate_backend_ttft_seconds", "histogram"),
                         ("llmgate_backend_inter_token_seconds", "histogram"),
                         ("llmgate_backend_request_duration_seconds", "histogram"),
                         ("llmgate_backend_in_flight", "gauge"),
                         ("llmgate_build_info", "gauge"),
                         ("llmgate_routing_decisions_total", "counter"),
                         ("llmgate_config_reloads_total", "counter")):
            self.assertEqual(types.get(fam), typ, fam)
        total = len(streamed) + 1
        self.assertEqual(metric(s, "llmgate_requests_total", route="chat_completions", code=200),
                         total)
        self.assertEqual(metric(s, "llmgate_requests_total", route="chat_completions", code=404),
                         1)
        self.assertEqual(metric(s, "llmgate_requests_total", route="models", code=200), 1)
        self.assertEqual(metric(s, "llmgate_backend_requests_total"), total)
        self.assertEqual(metric(s, "llmgate_backend_responses_total", **{"class": "2xx"}), total)
        self.assertEqual(metric(s, "llmgate_backend_responses_total", **{"class": "5xx"}), 0)
        self.assertEqual(metric(s, "llmgate_backend_completion_tokens_total"), sum(streamed) + 4)
        # round robin over two replicas: 7 requests split 4/3
        per = sorted(metric(s, "llmgate_backend_requests_total", backend=b) for b in ("r1", "r2"))
        self.assertEqual(per, [3, 4])
        self.assertEqual(metric(s, "llmgate_routing_decisions_total", policy="round_robin"), total)
        self.assertEqual(metric(s, "llmgate_build_info"), 1)
        self.assertEqual(metric(s, "llmgate_config_generation"), 1)
        self.assertEqual(metric(s, "llmgate_backends"), 2)
        self.assertEqual(metric(s, "llmgate_backend_state", state="up"), 2)
        self.assertEqual(metric(s, "llmgate_workers"), 2)
        self.assertGreater(metric(s, "llmgate_response_bytes_total"), 0)
        self.assertGreater(metric(s, "process_resident_memory_bytes"), 1e6)

        # histograms: cumulative buckets, +Inf = _count = requests; ITL only for streams
        for b in ("r1", "r2"):
            n = metric(s, "llmgate_backend_requests_total", backend=b)
            for fam in ("llmgate_backend_ttft_seconds", "llmgate_backend_request_duration_seconds",
                        "llmgate_backend_inter_token_seconds"):
                buckets = sorted(((float(dict(lb)["le"]), v) for (name, lb), v in s.items()
                                  if name == fam + "_bucket" and dict(lb)["backend"] == b))
                self.assertEqual(len(buckets), 15, fam)
                values = [v for _, v in buckets]
                self.assertEqual(values, sorted(values), fam)
                self.assertEqual(buckets[-1][0], float("inf"))
                count = metric(s, fam + "_count", backend=b)
                self.assertEqual(values[-1], count)
                self.assertGreater(metric(s, fam + "_sum", backend=b), 0)
                if fam == "llmgate_backend_inter_token_seconds":
                    self.assertLessEqual(count, n)
                else:
                    self.assertEqual(count, n, (fam, b))
            # TTFT from llmsim at these settings is well under a second
            self.assertEqual(metric(s, "llmgate_backend_ttft_seconds_bucket", backend=b, le="1"),
                             n)
        self.assertEqual(metric(s, "llmgate_backend_inter_token_seconds_count"), len(streamed))
        # SIGTERM: a clean exit (under ASan: no leak, no error)
        self.gw.signal(signal.SIGTERM)
        self.assertEqual(self.gw.wait(30), 0, self.gw.output()[-3000:])
        self.assertNotIn("Sanitizer", self.gw.output())

    def test_live_gauges_and_reload_counters(self):
        port = self.start_fleet({"listen": "127.0.0.1:0"})
        stream = self.stream(port, "POST", "/v1/chat/completions",
                             chat_body(stream=True, max_tokens=400))
        self.assertEqual(stream.read_head(10), 200)
        self.assertIsNotNone(stream.next_event(10))
        _, s = self.scrape()
        self.assertEqual(metric(s, "llmgate_backend_in_flight"), 1)
        self.assertGreaterEqual(metric(s, "llmgate_connections"), 1)
        self.assertEqual(metric(s, "llmgate_queue_waiting"), 0)  # no max_inflight: nothing waits
        stream.read_all(30)
        _, s = self.scrape()
        self.assertEqual(metric(s, "llmgate_backend_in_flight"), 0)

        # a good reload, then a refused one
        conf = json.load(open(self.path("llmgate.json")))
        conf["timeouts"] = {"first_byte": "200s"}
        with open(self.path("llmgate.json"), "w") as f:
            json.dump(conf, f)
        mark = len(self.gw.lines)
        self.gw.signal(signal.SIGHUP)
        self.gw.wait_for(r"configuration reloaded", start=mark)
        _, s = self.scrape()
        self.assertEqual(metric(s, "llmgate_config_reloads_total", result="success"), 1)
        self.assertEqual(metric(s, "llmgate_config_generation"), 2)
        self.assertEqual(metric(s, "llmgate_config_last_reload_success"), 1)
        with open(self.path("llmgate.json"), "w") as f:
            f.write("{")
        mark = len(self.gw.lines)
        self.gw.signal(signal.SIGHUP)
        self.gw.wait_for(r"configuration reload refused", start=mark)
        _, s = self.scrape()
        self.assertEqual(metric(s, "llmgate_config_reloads_total", result="failure"), 1)
        self.assertEqual(metric(s, "llmgate_config_last_reload_success"), 0)
        self.assertEqual(metric(s, "llmgate_config_generation"), 2)
        self.assertGreater(metric(s, "llmgate_config_last_reload_timestamp_seconds"), 1.6e9)

    def test_live_state_and_ejection(self):
        """The engines' scraped figures and the router's estimates appear per backend;
        a backend that keeps failing is ejected, and the metrics and the admin API say so."""
        self.sims = {}
        backends = []
        _, port = self.start_llmsim("r1", args=FAST)
        backends.append({"name": "r1", "url": "http://127.0.0.1:%d" % port, "models": ["m"]})
        # r2: nothing listens there, so every attempt is refused
        backends.append({"name": "r2", "url": "http://127.0.0.1:%d" % self.refusing_port(),
                         "models": ["m"], "flavor": "none"})
        conf = self.base_config(backends, admin="127.0.0.1:0",
                                health={"scrape_interval": "50ms", "eject_consecutive": 2,
                                        "eject_base": "30s"})
        conf["routing"] = {"policy": "round_robin", "retry": {"attempts": 2, "budget_min": 100}}
        proc, port = self.start_gateway(conf)
        self.gw = proc
        self.admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        for _ in range(6):  # r2's failures are retried on r1: every client gets its answer
            self.assertEqual(post_json(port, "/v1/chat/completions", chat_body())[0], 200)
        self.gw.wait_for(r"backend r2 ejected")
        harness.wait_until(lambda: metric(self.scrape()[1], "llmgate_backend_engine_requests_waiting",
                                          backend="r1") is not None, what="r1's engine figures")
        _, s = self.scrape()
        self.assertEqual(metric(s, "llmgate_backend_state", backend="r2", state="ejected"), 1)
        self.assertEqual(metric(s, "llmgate_backend_state", backend="r1", state="up"), 1)
        self.assertGreaterEqual(metric(s, "llmgate_backend_ejections_total", backend="r2"), 1)
        self.assertEqual(metric(s, "llmgate_backend_ejections_total", backend="r1"), 0)
        self.assertGreater(metric(s, "llmgate_backend_responses_total", backend="r2",
                                  **{"class": "none"}), 0)
        self.assertGreater(metric(s, "llmgate_backend_retries_total", backend="r1"), 0)
        self.assertGreaterEqual(metric(s, "llmgate_backend_engine_requests_running", backend="r1"), 0)
        self.assertLess(metric(s, "llmgate_backend_engine_scrape_age_seconds", backend="r1"), 5)
        self.assertGreater(metric(s, "llmgate_backend_ttft_estimate_seconds", backend="r1"), 0)
        self.assertGreater(metric(s, "llmgate_backend_error_ratio", backend="r2"), 0)
        self.assertEqual(metric(s, "llmgate_backend_slow_start_ratio", backend="r1"), 1)
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        obj = json.loads(data)
        b = {x["name"]: x for x in obj["backends"]}
        self.assertEqual((b["r1"]["health"], b["r2"]["health"]), ("up", "ejected"))
        self.assertEqual(b["r1"]["engine"]["flavor"], "vllm")
        self.assertEqual(b["r1"]["engine"]["waiting"], 0)
        self.assertGreater(b["r1"]["estimate"]["ttft_ms"], 0)
        # the routing scores: a dry run for the model, which picks the healthy one
        self.assertEqual(len(obj["routing"]), 1)
        r = obj["routing"][0]
        self.assertEqual((r["model"], r["policy"], r["pick"]), ("m", "round_robin", "r1"))
        self.assertEqual([c["backend"] for c in r["candidates"]], ["r1"])
        self.assertIsNone(json.loads(http_request(self.admin, "GET",
                                                  "/admin/backends?scores=0")[2])["routing"])

    def test_dashboard_uses_exposed_metrics(self):
        """Every metric the Grafana dashboard queries is one /metrics exposes."""
        self.start_fleet({"listen": "127.0.0.1:0"})
        text, _ = self.scrape()
        types = check_format(self, text)
        with open(os.path.join(harness.SRC, "docker", "grafana", "dashboards",
                               "llmgate.json")) as f:
            dash = json.load(f)
        exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
        self.assertGreater(len(exprs), 10)
        used = set()
        for e in exprs:
            for name in re.findall(r"\b(llmgate_[a-z_]+)", e):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                fam = base if base in types and types[base] == "histogram" else name
                used.add(fam)
                self.assertIn(fam, types, "the dashboard queries %s (%s)" % (name, e))
        for fam in ("llmgate_backend_ttft_seconds", "llmgate_backend_engine_requests_waiting",
                    "llmgate_backend_requests_total"):
            self.assertIn(fam, used)

    def test_token_protects_metrics_and_admin(self):
        port = self.start_fleet({"listen": "127.0.0.1:0", "token": "s3cret"})
        for path in ("/metrics", "/admin/backends"):
            status, h, _ = http_request(self.admin, "GET", path)
            self.assertEqual(status, 401, path)
            self.assertIn("bearer", h["www-authenticate"].lower())
            status, _, _ = http_request(self.admin, "GET", path,
                                        headers={"Authorization": "Bearer wrong"})
            self.assertEqual(status, 401, path)
        _, s = self.scrape(headers={"Authorization": "Bearer s3cret"})
        self.assertEqual(metric(s, "llmgate_backends"), 2)
        # the page itself holds no data: it asks for the token through the API
        status, h, body = http_request(self.admin, "GET", "/")
        self.assertEqual(status, 200)
        self.assertIn("text/html", h["content-type"])
        self.assertIn(b"/admin/backends", body)


if __name__ == "__main__":
    harness.main()
