"""llmsim's load reports in the engines' own formats, against the fixtures
taken from the engines' sources (tests/fixtures/engines/, SOURCES.md):
vLLM's endpoint-load-metrics response header (TEXT and JSON, asked for with
endpoint-load-metrics-format), vLLM's GET /load and SGLang's GET /v1/loads.

A replica with one slot and slow steps holds one stream running and one
waiting, so the reports have a known load to say: each format as the
fixture writes it (the same text around the numbers, numbers as Python
writes them, members in the same order and of the same types), the values
the replica's own state holds, and nothing of the kind unless asked."""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import http_request, metric, post_json, scrape, wait_until  # noqa: E402

CHAT = "/v1/chat/completions"
FIXTURES = os.path.join(harness.SRC, "tests", "fixtures", "engines")
# a number as Python's repr() writes a float: 3.0, 0.4375, 1.5e-05
PYFLOAT = r"-?(?:\d+\.\d+(?:e[+-]\d{2,})?|\de[+-]\d{2,})"


def fixture(path):
    with open(os.path.join(FIXTURES, path)) as f:
        return f.read()


def template(text):
    """The text with every Python float replaced by '#': what must match."""
    return re.sub(PYFLOAT, "#", text)


def chat(max_tokens, stream=True):
    return harness.chat_body(content="x" * 64, max_tokens=max_tokens, stream=stream)


def state(port):
    status, _, data = http_request(port, "GET", "/sim/state")
    assert status == 200, status
    return json.loads(data)


def shape(v):
    """The members, their order and their types, recursively (values left out)."""
    if isinstance(v, dict):
        return [(k, shape(x)) for k, x in v.items()]
    if isinstance(v, list):
        return [shape(x) for x in v]
    return type(v).__name__


class LlmsimLoadReports(harness.Harness):

    def busy_replica(self, args):
        """One slot, 20 ms steps: a stream running and one waiting behind it."""
        _, port = self.start_llmsim("r1", args=["--slots", "1", "--decode-ms", "20",
                                                "--decode-ms-per-seq", "0"] + args)
        running = self.stream(port, "POST", CHAT, chat(100000))
        running.next_event(10)
        waiting = self.stream(port, "POST", CHAT, chat(100000))
        waiting.read_head(10)
        wait_until(lambda: state(port)["waiting"] == 1, 10, what="a request waiting")
        return port, (running, waiting)

    def kv_usage(self, port):
        return metric(scrape(port), "vllm:kv_cache_usage_perc")

    def test_endpoint_load_metrics_header(self):
        port, busy = self.busy_replica(["--endpoint-load-metrics", "all"])
        text_fx = fixture("vllm/load_metrics_text.hdr").rstrip("\r\n")
        json_fx = fixture("vllm/load_metrics_json.hdr").rstrip("\r\n")
        name, _, text_value = text_fx.partition(": ")
        self.assertEqual(name, "endpoint-load-metrics")

        # TEXT, in a stream's head: the engine's state before this request joins
        kv0 = self.kv_usage(port)
        s = self.stream(port, "POST", CHAT, chat(2),
                        headers={"endpoint-load-metrics-format": "TEXT"})
        s.read_head(10)
        kv1 = self.kv_usage(port)
        got = s.headers["endpoint-load-metrics"]
        self.assertEqual(template(got), template(text_fx.partition(": ")[2]), got)
        m = re.fullmatch(r"TEXT named_metrics\.num_requests_waiting=(%s), "
                         r"named_metrics\.kv_cache_usage_perc=(%s)" % (PYFLOAT, PYFLOAT), got)
        self.assertIsNotNone(m, got)
        self.assertEqual(m.group(1), "1.0")
        self.assertTrue(0 < kv0 <= float(m.group(2)) <= kv1 <= 1, (kv0, got, kv1))
        s.close()  # it waits behind the other two; leaving aborts it
        wait_until(lambda: state(port)["waiting"] == 1, 10, what="the third request gone")

        # JSON, any case, blanks around it: as the fixture, with json.dumps' spaces
        s = self.stream(port, "POST", CHAT, chat(2),
                        headers={"Endpoint-Load-Metrics-Format": " json "})
        s.read_head(10)
        got = s.headers["endpoint-load-metrics"]
        self.assertEqual(template(got), template(json_fx.partition(": ")[2]), got)
        self.assertTrue(got.startswith("JSON "))
        doc = json.loads(got[5:])
        fx = json.loads(json_fx.partition(": ")[2][5:])
        self.assertEqual(shape(doc), shape(fx))
        self.assertEqual(doc["named_metrics"]["num_requests_waiting"], 1.0)
        s.close()
        for b in busy:
            b.close()
        wait_until(lambda: state(port)["running"] + state(port)["waiting"] == 0, 10,
                   what="the replica idle")

        # an answer that is not streamed: the state when it is done (it has left the batch)
        status, h, body, raw = post_json(port, CHAT, chat(2, stream=False),
                                         headers={"endpoint-load-metrics-format": "TEXT"})
        self.assertEqual(status, 200, raw)
        self.assertEqual(h["endpoint-load-metrics"],
                         "TEXT named_metrics.num_requests_waiting=0.0, "
                         "named_metrics.kv_cache_usage_perc=0.0")
        # a format vLLM does not write, or none asked: no header
        for hdrs in ({"endpoint-load-metrics-format": "XML"},
                     {"endpoint-load-metrics-format": "textual"}, {}):
            status, h, _, raw = post_json(port, CHAT, chat(1, stream=False), headers=hdrs)
            self.assertEqual(status, 200, raw)
            self.assertNotIn("endpoint-load-metrics", h, hdrs)

    def test_header_only_where_asked(self):
        # --endpoint-load-metrics vllm: as vLLM's server, answers that are not streamed only
        _, port = self.start_llmsim("r1", args=["--endpoint-load-metrics", "vllm"])
        ask = {"endpoint-load-metrics-format": "TEXT"}
        s = self.stream(port, "POST", CHAT, chat(2), headers=ask).read_all(10)
        self.assertEqual(s.status, 200)
        self.assertNotIn("endpoint-load-metrics", s.headers)
        status, h, _, _ = post_json(port, CHAT, chat(2, stream=False), headers=ask)
        self.assertEqual(h["endpoint-load-metrics"],
                         "TEXT named_metrics.num_requests_waiting=0.0, "
                         "named_metrics.kv_cache_usage_perc=0.0")
        # the default: no header, no /load, no /v1/loads
        _, port = self.start_llmsim("r2")
        s = self.stream(port, "POST", CHAT, chat(2), headers=ask).read_all(10)
        self.assertNotIn("endpoint-load-metrics", s.headers)
        status, h, _, _ = post_json(port, CHAT, chat(2, stream=False), headers=ask)
        self.assertNotIn("endpoint-load-metrics", h)
        for path in ("/load", "/v1/loads"):
            self.assertEqual(http_request(port, "GET", path)[0], 404, path)
        p = self.start([harness.binary("llmsim"), "--endpoint-load-metrics", "some"], name="bad")
        self.assertEqual(p.wait(5), 2)

    def test_vllm_load(self):
        port, streams = self.busy_replica(["--enable-server-load-tracking"])
        status, h, data = http_request(port, "GET", "/load")
        self.assertEqual(status, 200)
        self.assertEqual(h["content-type"], "application/json")
        fx = fixture("vllm/load.json")
        self.assertEqual(re.sub(r"\d+", "N", data.decode()), re.sub(r"\d+", "N", fx))
        self.assertEqual(json.loads(data), {"server_load": 2})  # one running, one waiting
        for s in streams:
            s.close()
        wait_until(lambda: json.loads(http_request(port, "GET", "/load")[2])["server_load"] == 0,
                   10, what="the aborted requests leave server_load")
        self.assertEqual(post_json(port, CHAT, chat(1, stream=False))[0], 200)
        self.assertEqual(json.loads(http_request(port, "GET", "/load")[2]), {"server_load": 0})

    def test_sglang_v1_loads(self):
        port, _ = self.busy_replica(["--v1-loads", "--prefix-block-tokens", "16",
                                     "--prefix-cache-blocks", "512"])
        status, h, data = http_request(port, "GET", "/v1/loads")
        self.assertEqual(status, 200, data)
        self.assertEqual(h["content-type"], "application/json")
        raw = data.decode()
        self.assertNotIn(": ", raw)  # FastAPI's compact separators, as the fixture
        doc = json.loads(raw)
        fx = json.loads(fixture("sglang/v1_loads.json"))
        self.assertEqual(shape({k: v for k, v in doc.items() if k != "loads"}),
                         shape({k: v for k, v in fx.items() if k != "loads"}))
        self.assertEqual(doc["dp_rank_count"], 1)
        load, fl = doc["loads"][0], fx["loads"][0]
        # the engine's members in its order; the GPU's memory section is not llmsim's
        self.assertEqual(shape(load), shape({k: v for k, v in fl.items() if k != "memory"}))
        self.assertRegex(doc["timestamp"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?\+00:00$")
        self.assertEqual((load["num_running_reqs"], load["num_waiting_reqs"],
                          load["num_total_reqs"], load["max_running_requests"]), (1, 1, 2, 1))
        self.assertEqual(load["queues"]["waiting"], 1)
        self.assertEqual(load["disaggregation"]["mode"], "null")
        self.assertEqual(load["max_total_num_tokens"], 512 * 16)
        self.assertGreater(load["num_used_tokens"], 16)  # the running prompt and its answer
        self.assertEqual(load["token_usage"],
                         round(load["num_used_tokens"] / load["max_total_num_tokens"], 4))
        agg = doc["aggregate"]
        self.assertEqual((agg["total_running_reqs"], agg["total_waiting_reqs"], agg["total_reqs"]),
                         (1, 1, 2))
        self.assertEqual(agg["avg_token_usage"], load["token_usage"])
        self.assertEqual(agg["avg_throughput"], load["gen_throughput"])
        # generated tokens a second since the previous answer: one stream at 20 ms a step
        wait_until(lambda: state(port)["generation_tokens"] > 60, 10, what="tokens")
        thr = json.loads(http_request(port, "GET", "/v1/loads?include=core")[2])
        self.assertTrue(10 < thr["loads"][0]["gen_throughput"] < 60, thr)
        self.assertEqual(shape(thr), shape(json.loads(fixture("sglang/v1_loads_core.json"))))
        self.assertEqual(json.loads(http_request(port, "GET",
                                                 "/v1/loads?include=queues%2Cdisagg")[2])
                         ["loads"][0]["queues"]["waiting"], 1)
        # a rank that is not there: no load, the aggregate of none
        none = json.loads(http_request(port, "GET", "/v1/loads?dp_rank=1")[2])
        self.assertEqual((none["dp_rank_count"], none["loads"], none["aggregate"]["total_reqs"]),
                         (0, [], 0))
        status, _, data = http_request(port, "GET", "/v1/loads?include=core,bogus")
        self.assertEqual(status, 400)
        self.assertIn("Invalid include sections: {'bogus'}", json.loads(data)["detail"])
        status, _, data = http_request(port, "GET", "/v1/loads?dp_rank=x")
        self.assertEqual(status, 422)
        self.assertEqual(json.loads(data)["detail"][0]["loc"], ["query", "dp_rank"])
        self.assertEqual(http_request(port, "POST", "/v1/loads", {})[0], 405)


if __name__ == "__main__":
    harness.main()
