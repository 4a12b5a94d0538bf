"""llmsim, the simulated engine replica: wire format, queueing, metrics in
every flavor, faults, aborts, prefix cache and the shared state file.

Timing assertions compare against a baseline measured in the same run, with
wide bands, so that a loaded machine slows both sides alike."""

import json
import os
import re
import signal
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import http_request, metric, post_json, scrape, wait_until  # noqa: E402

CHAT = "/v1/chat/completions"
TOKEN = re.compile(r"^ tok\d+$")

# Every flavor's names for running and waiting sequences.
FLAVORS = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
    "tgi": ("tgi_batch_current_size", "tgi_queue_size"),
    "llamacpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
}


def chat(content="hello", max_tokens=4, stream=True, **extra):
    return harness.chat_body(content=content, max_tokens=max_tokens, stream=stream, **extra)


def state(port):
    status, _, data = http_request(port, "GET", "/sim/state")
    assert status == 200, status
    return json.loads(data)


def control(port, **doc):
    status, _, body, raw = post_json(port, "/sim/control", doc)
    assert status == 200, (status, raw)
    return body


def token_events(events):
    """The JSON chunks of an event list that carry a token."""
    out = []
    for _, data in events:
        if data == "[DONE]":
            continue
        chunk = json.loads(data)
        for choice in chunk.get("choices", []):
            text = choice.get("delta", {}).get("content", choice.get("text"))
            if text:
                out.append(text)
    return out


def ttft(stream):
    """Seconds from the request to its first SSE event."""
    ev = stream.next_event()
    assert ev is not None, "no event"
    return ev[0] - stream.t_sent


class LlmsimFormat(harness.Harness):

    def test_stream_chat_and_completions_format(self):
        _, port = self.start_llmsim("r1", args=["--seed", "7", "--decode-ms", "2"])
        content = "x" * 40
        s = self.stream(port, "POST", CHAT, chat(content, 5, stream_options={"include_usage": True}))
        s.read_all(10)
        self.assertEqual(s.status, 200)
        self.assertEqual(s.ended, "complete")
        self.assertEqual(s.headers["x-llmsim-replica"], "r1")
        self.assertTrue(s.headers["content-type"].startswith("text/event-stream"))
        datas = [d for _, d in s.events]
        self.assertEqual(datas[-1], "[DONE]")
        self.assertNotIn("[DONE]", datas[:-1])
        chunks = [json.loads(d) for d in datas[:-1]]  # every event but [DONE] is JSON
        self.assertEqual(len(chunks), 5 + 2)           # tokens, finish, usage
        self.assertEqual({c["id"] for c in chunks}, {chunks[0]["id"]})
        self.assertTrue(chunks[0]["id"].startswith("chatcmpl-"))
        for c in chunks:
            self.assertEqual(c["object"], "chat.completion.chunk")
            self.assertEqual(c["model"], "m")
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        tokens = [c["choices"][0]["delta"]["content"] for c in chunks[:5]]
        self.assertTrue(all(TOKEN.match(t) for t in tokens), tokens)
        for c in chunks[:5]:
            self.assertIsNone(c["choices"][0]["finish_reason"])
        self.assertEqual(chunks[5]["choices"][0]["finish_reason"], "length")
        self.assertEqual(chunks[5]["choices"][0]["delta"], {})
        self.assertEqual(chunks[6]["choices"], [])
        self.assertEqual(chunks[6]["usage"], {"prompt_tokens": 10, "completion_tokens": 5,
                                              "total_tokens": 15})

        # no include_usage: no usage chunk
        s = self.stream(port, "POST", CHAT, chat(content, 3)).read_all(10)
        self.assertEqual(len(s.events), 3 + 2)
        self.assertFalse(any("usage" in d for _, d in s.events))
        self.assertEqual(token_events(s.events), tokens[:3])  # same seed, same positions

        # completions: text chunks
        body = {"model": "m", "prompt": ["abcd" * 3, "efgh"], "max_tokens": 4, "stream": True}
        s = self.stream(port, "POST", "/v1/completions", body).read_all(10)
        chunks = [json.loads(d) for _, d in s.events[:-1]]
        self.assertEqual(s.events[-1][1], "[DONE]")
        self.assertEqual([c["choices"][0]["text"] for c in chunks[:4]], tokens[:4])
        self.assertTrue(all(c["object"] == "text_completion" for c in chunks))
        self.assertTrue(chunks[0]["id"].startswith("cmpl-"))
        self.assertEqual(chunks[4]["choices"][0]["finish_reason"], "length")

        # the token text depends on the seed only
        _, port2 = self.start_llmsim("r2", args=["--seed", "7", "--decode-ms", "2"])
        _, port3 = self.start_llmsim("r3", args=["--seed", "8", "--decode-ms", "2"])
        same = token_events(self.stream(port2, "POST", CHAT, chat("other", 5)).read_all(10).events)
        other = token_events(self.stream(port3, "POST", CHAT, chat(content, 5)).read_all(10).events)
        self.assertEqual(same, tokens)
        self.assertNotEqual(other, tokens)

    def test_text_context_mode_continues_exactly(self):
        # --text context: the text is the request's (model, prompt, seed), the
        # same on every replica, and a continuation goes on where it stopped
        args = ["--text", "context", "--decode-ms", "2"]
        _, p1 = self.start_llmsim("r1", args=args + ["--seed", "1"])
        _, p2 = self.start_llmsim("r2", args=args + ["--seed", "2", "--role-chunk"])

        def text(port, body):
            events = self.stream(port, "POST", body.pop("path", CHAT), body).read_all(10).events
            self.assertEqual(events[-1][1], "[DONE]")
            return token_events(events)

        msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
        full = text(p1, {"model": "m", "messages": msgs, "max_tokens": 12, "stream": True})
        self.assertEqual(len(full), 12)
        self.assertTrue(all(TOKEN.match(t) for t in full), full)
        self.assertGreater(len(set(full)), 3)  # not one word repeated
        # another replica (another --seed) answers the same text
        self.assertEqual(text(p2, {"model": "m", "messages": msgs, "max_tokens": 12,
                                   "stream": True}), full)
        # another prompt, another request seed: another text
        other = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "ho"}]
        self.assertNotEqual(text(p1, {"model": "m", "messages": other, "max_tokens": 12,
                                      "stream": True}), full)
        self.assertNotEqual(text(p1, {"model": "m", "messages": msgs, "max_tokens": 12,
                                      "stream": True, "seed": 3}), full)
        # the chat continuation: the answer so far as an open assistant message
        for k in (1, 5, 11):
            cont = {"model": "m", "stream": True, "max_tokens": 12 - k,
                    "messages": msgs + [{"role": "assistant", "content": "".join(full[:k])}],
                    "continue_final_message": True, "add_generation_prompt": False}
            self.assertEqual(text(p2, dict(cont)), full[k:], k)
            # without continue_final_message the message is closed: another text
            closed = dict(cont, continue_final_message=False)
            self.assertNotEqual(text(p2, closed), full[k:], k)
        # as vLLM: add_generation_prompt is true unless given, and not with continue
        status, _, body, raw = post_json(p1, CHAT, {"model": "m", "messages": msgs,
                                                    "continue_final_message": True})
        self.assertEqual(status, 400, raw)
        self.assertIn("continue_final_message", body["error"]["message"])
        self.assertEqual(post_json(p1, CHAT, {"model": "m", "messages": msgs, "seed": "x"})[0],
                         400)
        # the role-only first chunk of --role-chunk: no content, then the tokens
        events = self.stream(p2, "POST", CHAT, {"model": "m", "messages": msgs, "max_tokens": 2,
                                                "stream": True}).read_all(10).events
        first = json.loads(events[0][1])["choices"][0]["delta"]
        self.assertEqual(first, {"role": "assistant", "content": ""})
        self.assertNotIn("role", json.loads(events[1][1])["choices"][0]["delta"])
        # completions: the prompt continued; a whole answer is the streamed one
        comp = {"path": "/v1/completions", "model": "m", "prompt": "Once", "max_tokens": 9,
                "stream": True}
        whole = text(p1, dict(comp))
        self.assertEqual(text(p2, dict(comp, prompt="Once" + "".join(whole[:4]), max_tokens=5)),
                         whole[4:])
        del comp["path"]
        status, _, body, raw = post_json(p2, "/v1/completions", dict(comp, stream=False))
        self.assertEqual(body["choices"][0]["text"], "".join(whole), raw)

    def test_nonstream_format(self):
        _, port = self.start_llmsim("r1", args=["--seed", "7", "--decode-ms", "2",
                                                "--max-tokens-default", "3"])
        streamed = token_events(self.stream(port, "POST", CHAT, chat("y", 6)).read_all(10).events)
        status, h, body, raw = post_json(port, CHAT, chat("z" * 100, 6, stream=False))
        self.assertEqual(status, 200, raw)
        self.assertEqual(h["x-llmsim-replica"], "r1")
        self.assertEqual(int(h["content-length"]), len(raw))
        self.assertEqual(body["object"], "chat.completion")
        choice = body["choices"][0]
        self.assertEqual(choice["message"]["role"], "assistant")
        self.assertEqual(choice["message"]["content"], "".join(streamed))
        self.assertEqual(choice["finish_reason"], "length")
        self.assertEqual(body["usage"], {"prompt_tokens": 25, "completion_tokens": 6,
                                         "total_tokens": 31})
        # completions, default max_tokens, max_completion_tokens wins over max_tokens
        status, _, body, raw = post_json(port, "/v1/completions", {"prompt": "hi"})
        self.assertEqual(status, 200, raw)
        self.assertEqual(body["object"], "text_completion")
        self.assertEqual(body["usage"]["completion_tokens"], 3)
        self.assertEqual(body["usage"]["prompt_tokens"], 1)
        status, _, body, _ = post_json(port, CHAT, chat("q", stream=False, max_tokens=9,
                                                        max_completion_tokens=2))
        self.assertEqual(body["usage"]["completion_tokens"], 2)
        # sim_completion_tokens: the answer stops early (a replayed length), at
        # most max_tokens, or past the default when the body has no max_tokens
        for extra, n, why in (({"max_tokens": 9, "sim_completion_tokens": 4}, 4, "stop"),
                              ({"max_tokens": 3, "sim_completion_tokens": 4}, 3, "length"),
                              ({"sim_completion_tokens": 5}, 5, "stop")):
            body = dict({"messages": [{"role": "user", "content": "q"}], "stream": False}, **extra)
            status, _, body, raw = post_json(port, CHAT, body)
            self.assertEqual(status, 200, raw)
            self.assertEqual(body["usage"]["completion_tokens"], n, extra)
            self.assertEqual(body["choices"][0]["finish_reason"], why, extra)
        events = self.stream(port, "POST", CHAT, dict(chat("y", 6), sim_completion_tokens=2)
                             ).read_all(10).events
        self.assertEqual(len(token_events(events)), 2)
        self.assertIn('"finish_reason":"stop"', "".join(d for _, d in events))

    def test_embeddings_models_health(self):
        _, port = self.start_llmsim("r1", models=("a", "b"), args=["--flavor", "llamacpp"])
        status, _, body, raw = post_json(port, "/v1/embeddings",
                                         {"model": "b", "input": ["one", "two", "one"]})
        self.assertEqual(status, 200, raw)
        vecs = [d["embedding"] for d in body["data"]]
        self.assertEqual(len(vecs), 3)
        self.assertTrue(all(len(v) == 8 for v in vecs))
        self.assertEqual(vecs[0], vecs[2])
        self.assertNotEqual(vecs[0], vecs[1])
        self.assertEqual([d["index"] for d in body["data"]], [0, 1, 2])
        status, _, body, _ = post_json(port, "/v1/embeddings", {"model": "a", "input": "one"})
        self.assertEqual(body["data"][0]["embedding"], vecs[0])
        status, h, data = http_request(port, "GET", "/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual([m["id"] for m in json.loads(data)["data"]], ["a", "b"])
        status, h, data = http_request(port, "GET", "/health")
        self.assertEqual((status, json.loads(data)), (200, {"status": "ok"}))
        self.assertEqual(h["x-llmsim-replica"], "r1")
        # llama.cpp's /props says its slots (8 here, the harness's)
        status, h, data = http_request(port, "GET", "/props")
        self.assertEqual((status, json.loads(data)["total_slots"]), (200, 8))
        _, port2 = self.start_llmsim("r2", args=["--flavor", "vllm"])
        status, h, data = http_request(port2, "GET", "/props")
        self.assertEqual(status, 404)

    def test_errors_and_limits(self):
        _, port = self.start_llmsim("r1", args=["--max-body-bytes", "2000",
                                                "--max-header-bytes", "1024"])

        def error(status, body, param=None):
            err = json.loads(body)["error"]
            self.assertEqual(err["code"], status)
            self.assertIsInstance(err["message"], str)
            if param:
                self.assertEqual(err["param"], param)

        status, h, body, raw = post_json(port, CHAT, chat(model="nope"))
        self.assertEqual(status, 404)
        self.assertEqual(h["x-llmsim-replica"], "r1")
        error(404, raw, "model")
        status, _, raw = http_request(port, "POST", CHAT, b"{not json")
        self.assertEqual(status, 400)
        error(400, raw)
        status, _, _, raw = post_json(port, CHAT, {"model": "m"})
        self.assertEqual(status, 400)
        error(400, raw, "messages")
        status, _, _, raw = post_json(port, CHAT, chat(max_tokens=0))
        self.assertEqual(status, 400)
        status, _, _, raw = post_json(port, CHAT, chat(stream="yes"))
        self.assertEqual(status, 400)
        self.assertEqual(http_request(port, "GET", "/nope")[0], 404)
        status, h, _ = http_request(port, "GET", CHAT)
        self.assertEqual((status, h.get("allow")), (405, "POST"))
        status, _, raw = http_request(port, "POST", CHAT, b"x" * 3000)
        self.assertEqual(status, 413)
        error(413, raw)
        out = harness.raw_exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: "
                                   + b"a" * 2000 + b"\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 431 "), out[:60])
        out = harness.raw_exchange(port, b"GET /health HTTP/1.1\r\nHost x\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400 "), out[:60])
        # pipelined keep-alive requests are answered in order on one connection
        out = harness.raw_exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                                   b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                                   b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertEqual(re.findall(rb"HTTP/1.1 (\d+)", out), [b"200", b"200", b"404"])
        # Expect: 100-continue gets its interim answer
        s = self.stream(port, "POST", CHAT, chat(stream=False), headers={"Expect": "100-continue"})
        self.assertEqual(s.read_head(5), 200)


class LlmsimEngine(harness.Harness):

    def test_queueing_second_request_waits_for_a_slot(self):
        # prefill dominates: 1000 tokens at 100 us = 100 ms, a decode step 2 ms
        _, port = self.start_llmsim("r1", args=["--slots", "1", "--prefill-us-per-token", "100",
                                                "--decode-ms", "2", "--decode-ms-per-seq", "0",
                                                "--prefix-cache-blocks", "0"])
        a = self.stream(port, "POST", CHAT, chat("a" * 4000, 1))
        b = self.stream(port, "POST", CHAT, chat("b" * 4000, 1))
        harness.read_concurrently([a, b], 10)
        t1 = a.events[0][0] - a.t_sent
        t2 = b.events[0][0] - b.t_sent
        self.assertGreater(t1, 0.09)
        ratio = t2 / t1
        self.assertTrue(1.6 <= ratio <= 2.6, "TTFT %.3f then %.3f (ratio %.2f)" % (t1, t2, ratio))
        st = state(port)
        self.assertEqual((st["completed"], st["running"], st["waiting"]), (2, 0, 0))

    def test_decode_slows_with_batch_and_speed_scales(self):
        # step = 4 ms + 2 ms per running sequence
        _, port = self.start_llmsim("r1", args=["--slots", "16", "--decode-ms", "4",
                                                "--decode-ms-per-seq", "2",
                                                "--prefill-us-per-token", "0"])

        def itl(n):
            streams = [self.stream(port, "POST", CHAT, chat("s%d" % i, 20)) for i in range(n)]
            harness.read_concurrently(streams, 20)
            s = streams[0]
            times = [t for t, _ in s.events[:20]]
            return (times[-1] - times[0]) / 19

        one, many = itl(1), itl(12)  # 6 ms vs 28 ms per token
        self.assertGreater(many / one, 2.5, "ITL %.4f alone, %.4f with 12" % (one, many))
        control(port, speed=0.5)
        half = itl(1)
        self.assertGreater(half / one, 1.5, "ITL %.4f at speed 1, %.4f at 0.5" % (one, half))

    def test_prefix_cache_skips_cached_prefill(self):
        # 2000 tokens at 100 us: 200 ms of prefill unless cached
        _, port = self.start_llmsim("r1", args=["--prefill-us-per-token", "100",
                                                "--decode-ms", "3", "--decode-ms-per-seq", "0"])
        prompt = "".join("w%05d " % i for i in range(1143))[:8000]
        first = ttft(self.stream(port, "POST", CHAT, chat(prompt, 1)))
        second = ttft(self.stream(port, "POST", CHAT, chat(prompt, 1)))
        self.assertLess(second, first * 0.3, "TTFT %.3f then %.3f" % (first, second))
        half = ttft(self.stream(port, "POST", CHAT, chat(prompt[:4000] + "Z" * 4000, 1)))
        self.assertTrue(second < half < first, (first, half, second))
        m = scrape(port)
        hits = metric(m, "llmsim_prefix_cache_hits_total")
        self.assertEqual(metric(m, "llmsim_prefix_cache_queries_total"), 6000)
        self.assertGreater(hits, 2900)  # 1999 of the second, about 1000 of the third
        self.assertEqual(metric(m, "vllm:prefix_cache_hits_total", model_name="m"), hits)
        st = state(port)
        self.assertEqual((st["prefix_hits"], st["prefix_lookups"]), (hits, 6000))

    def test_abort_frees_the_slot(self):
        _, port = self.start_llmsim("r1", args=["--slots", "1", "--decode-ms", "20",
                                                "--decode-ms-per-seq", "0"])
        a = self.stream(port, "POST", CHAT, chat("a", 100000))
        a.next_event(5)
        b = self.stream(port, "POST", CHAT, chat("b", 2))
        c = self.stream(port, "POST", CHAT, chat("c", 100000))
        wait_until(lambda: state(port)["waiting"] == 2, 5, what="two waiting")
        c.close()  # a queued sequence leaves the queue
        wait_until(lambda: state(port)["waiting"] == 1, 5, what="c aborted")
        t_close = time.time_ns()
        t0 = time.monotonic()
        a.close()  # a running one frees its slot at once
        first = b.next_event(5)
        self.assertLess(first[0] - t0, 0.5, "the next request waited %.3f s" % (first[0] - t0))
        b.read_all(5)
        self.assertEqual(len(token_events(b.events)), 2)
        st = wait_until(lambda: (lambda s: s if s["completed"] == 1 else None)(state(port)), 5,
                        what="b completed")
        self.assertEqual((st["aborted"], st["running"], st["waiting"]), (2, 0, 0))
        self.assertLess(abs(st["last_abort_wall_ns"] - t_close), 1e9)
        self.assertEqual(metric(scrape(port), "llmsim_aborted_total"), 2)

    def test_priority_policy_orders_the_queue_and_may_preempt(self):
        # one slot, 20 ms a token: a long answer holds it
        args = ["--slots", "1", "--decode-ms", "20", "--decode-ms-per-seq", "0",
                "--prefill-us-per-token", "0", "--scheduling-policy", "priority"]

        def first(s):
            return s.events[0][0]

        def last(s):
            return s.events[-1][0]

        # vLLM's priority policy: the queue by priority, then arrival; nothing preempted
        _, port = self.start_llmsim("r1", args=args)
        a = self.stream(port, "POST", CHAT, chat("a", 30, priority=1))
        a.next_event(5)
        low = self.stream(port, "POST", CHAT, chat("low", 2, priority=5))
        wait_until(lambda: state(port)["waiting"] == 1, 5, what="low waiting")
        high = self.stream(port, "POST", CHAT, chat("high", 2, priority=-1))
        wait_until(lambda: state(port)["waiting"] == 2, 5, what="high waiting")
        harness.read_concurrently([a, low, high], 20)
        self.assertEqual([len(token_events(x.events)) for x in (a, low, high)], [30, 2, 2])
        self.assertLess(last(a), first(high))  # it waited for the slot
        self.assertLess(last(high), first(low))  # and went first
        st = state(port)
        self.assertEqual((st["scheduling_policy"], st["preempted"], st["completed"]),
                         ("priority", 0, 3))

        # with a preemption threshold (SGLang's): a waiter better by more takes the slot
        _, port = self.start_llmsim("r2", args=args + ["--priority-preemption-threshold", "0"])
        a = self.stream(port, "POST", CHAT, chat("a", 30, priority=0))
        a.next_event(5)
        same = self.stream(port, "POST", CHAT, chat("same", 2, priority=0))
        wait_until(lambda: state(port)["waiting"] == 1, 5, what="same waiting")  # no better
        high = self.stream(port, "POST", CHAT, chat("high", 2, priority=-1))
        harness.read_concurrently([a, same, high], 20)
        self.assertEqual([len(token_events(x.events)) for x in (a, same, high)], [30, 2, 2])
        self.assertLess(first(high), last(a))  # a was preempted, then ended whole
        self.assertLess(last(a), first(same))  # a, back in the queue, kept its arrival
        st = state(port)
        self.assertEqual((st["preempted"], st["completed"]), (1, 3))
        self.assertEqual(metric(scrape(port), "vllm:num_preemptions_total", model_name="m"), 1)
        status, _, body, _ = post_json(port, CHAT, chat("x", 2, stream=False, priority="high"))
        self.assertEqual((status, body["error"]["param"]), (400, "priority"), body)

    def test_metrics_under_load_every_flavor(self):
        for flavor, (running, waiting) in FLAVORS.items():
            with self.subTest(flavor=flavor):
                _, port = self.start_llmsim("r-" + flavor, models=("mod\"el",),
                                            args=["--flavor", flavor, "--slots", "2",
                                                  "--decode-ms", "20"])
                streams = [self.stream(port, "POST", CHAT,
                                      chat("load %d" % i, 100000, model="mod\"el"))
                           for i in range(5)]

                def loaded():
                    m = scrape(port)
                    ok = (metric(m, running) == 2 and metric(m, waiting) == 3
                          and metric(m, "llmsim_running") == 2
                          and metric(m, "llmsim_waiting") == 3)
                    return m if ok else None

                m = wait_until(loaded, 10, what="2 running, 3 waiting in %s" % flavor)
                text = http_request(port, "GET", "/metrics")[2].decode()
                for name in (running, waiting, "llmsim_running", "llmsim_aborted_total"):
                    self.assertIn("# HELP %s " % name, text)
                    self.assertRegex(text, r"# TYPE %s (gauge|counter)\n" % re.escape(name))
                labels = [dict(lbls) for (n, lbls) in m if n == running]
                if flavor in ("vllm", "sglang"):
                    # parse_prometheus keeps label values as escaped in the exposition
                    self.assertEqual(labels[0]["model_name"], 'mod\\"el')
                else:
                    self.assertEqual(labels, [{}])
                self.assertEqual(metric(m, "llmsim_requests_total"), 5)
                for s in streams:
                    s.close()
                wait_until(lambda: metric(scrape(port), "llmsim_aborted_total") == 5, 10,
                           what="5 aborted in %s" % flavor)
                m = scrape(port)
                self.assertEqual((metric(m, running), metric(m, waiting)), (0, 0))

    def test_shm_state_file(self):
        path = self.path("r1.state")
        _, port = self.start_llmsim("r1", args=["--slots", "1", "--decode-ms", "20",
                                                "--prefill-fixed-ms", "3", "--jitter", "0.125",
                                                "--decode-batch-exp", "1.5",
                                                "--state-shm", path])
        fmt = "<IIIIII dddd QQQ QII QQQQQQQQ III I QQ IIII 64s II ddd"
        size = struct.calcsize(fmt)
        self.assertEqual(size, 304)

        def read():
            """The header, read until it is not torn (seqlock: even and unchanged)."""
            deadline = time.monotonic() + 5
            with open(path, "rb", buffering=0) as f:  # unbuffered: every read sees the file
                while time.monotonic() < deadline:
                    f.seek(0)
                    v = struct.unpack(fmt, f.read(size))
                    f.seek(8)
                    if v[2] % 2 == 0 and struct.unpack("<I", f.read(4))[0] == v[2]:
                        return v
                    time.sleep(0.001)  # the writer may be descheduled mid-update
            raise AssertionError("the state file stays torn (seq %d)" % v[2])

        v = read()
        self.assertEqual(v[0], 0x4c4d5331)
        self.assertEqual(v[1], 3)                           # version: slots, schedules
        self.assertEqual(v[3], 1)                           # slots
        self.assertEqual(v[34].rstrip(b"\0"), b"r1")
        self.assertEqual(v[35:], (0, 0, 3.0, 1.5, 0.125))  # fcfs, no budget, fixed, exp, jitter
        self.assertEqual(v[13], os.path.getsize(path))      # size
        streams = [self.stream(port, "POST", CHAT, chat("p%d" % i * 100, 1000)) for i in range(3)]
        v = wait_until(lambda: (lambda v: v if (v[4], v[5]) == (1, 2) else None)(read()), 10,
                       what="running 1, waiting 2 in the state file")
        self.assertEqual(v[6], 1.0)                         # speed
        self.assertGreater(v[11], 2000)                     # remaining decode tokens
        self.assertGreater(v[12], 0)                        # busy until (a step is running)
        self.assertTrue(v[15] & 1)                          # LLMSIM_SHM_F_STEP
        control(port, fault="slow@0:4")
        wait_until(lambda: read()[6] == 0.25, 5, what="speed 0.25 in the state file")
        for s in streams:
            s.close()
        v = wait_until(lambda: (lambda v: v if (v[4], v[5]) == (0, 0) else None)(read()), 10,
                       what="idle in the state file")
        self.assertEqual(v[21], 3)                          # aborted


class LlmsimFaults(harness.Harness):

    def test_slow(self):
        _, port = self.start_llmsim("r1", args=["--decode-ms", "25", "--decode-ms-per-seq", "0",
                                                "--prefill-us-per-token", "0"])

        def itl():
            s = self.stream(port, "POST", CHAT, chat("s", 6)).read_all(10)
            times = [t for t, _ in s.events[:6]]
            return (times[0] - s.t_sent), (times[-1] - times[0]) / 5

        base_ttft, base_itl = itl()
        control(port, fault="slow@0:4")
        self.assertEqual(state(port)["speed"], 0.25)
        slow_ttft, slow_itl = itl()
        # 4 times slower; the bands leave room for scheduling noise on the baseline
        self.assertGreater(slow_ttft / base_ttft, 2.2, (base_ttft, slow_ttft))
        self.assertGreater(slow_itl / base_itl, 2.5, (base_itl, slow_itl))
        control(port, clear_faults=True)
        self.assertEqual(state(port)["speed"], 1.0)
        # a scheduled window ends by itself
        _, port2 = self.start_llmsim("r2", args=["--fault", "slow@0:3:0.5"])
        self.assertAlmostEqual(state(port2)["speed"], 1 / 3)
        wait_until(lambda: state(port2)["speed"] == 1.0, 5, what="the slow window to end")

    def test_stall(self):
        _, port = self.start_llmsim("r1", args=["--decode-ms", "10", "--decode-ms-per-seq", "0"])
        running = self.stream(port, "POST", CHAT, chat("r", 100000))
        running.next_event(5)
        control(port, fault="stall@0")
        s = self.stream(port, "POST", CHAT, chat("held", 2, stream=False))
        with self.assertRaises(socket.timeout):
            s.read_head(0.5)                    # no answer, and the connection stays open
        seen = len(running.events)
        with self.assertRaises(socket.timeout):
            while True:
                running.next_event(0.4)         # the stream in flight froze too
        self.assertLessEqual(len(running.events) - seen, 1)
        st = state(port)                        # the control plane still answers
        self.assertTrue(st["stalled"])
        self.assertEqual(st["held"], 1)
        self.assertEqual(http_request(port, "GET", "/sim/state")[0], 200)
        gone = self.stream(port, "POST", CHAT, chat("gone", 2))
        wait_until(lambda: state(port)["held"] == 2, 5, what="a second request held")
        gone.close()                            # its client leaves during the stall
        st = wait_until(lambda: (lambda x: x if x["held"] == 1 else None)(state(port)), 5,
                        what="the abandoned request dropped")
        self.assertEqual((st["abandoned"], st["aborted"]), (1, 0))
        control(port, clear_faults=True)
        self.assertEqual(s.read_head(5), 200)   # the held request is served
        s.read_all(5)
        self.assertEqual(s.json()["usage"]["completion_tokens"], 2)
        running.next_event(5)                   # and the stream resumes

    def test_status_with_retry_after_then_recovery(self):
        _, port = self.start_llmsim("r1", args=["--fault", "status@0:503:1:7"])
        status, h, body, raw = post_json(port, CHAT, chat(stream=False))
        self.assertEqual(status, 503, raw)
        self.assertEqual(h["retry-after"], "7")
        self.assertEqual(h["x-llmsim-replica"], "r1")
        self.assertEqual(body["error"]["code"], 503)
        self.assertEqual(http_request(port, "GET", "/health")[0], 200)
        t0 = time.monotonic()
        wait_until(lambda: post_json(port, CHAT, chat(stream=False))[0] == 200, 5,
                   interval=0.05, what="recovery from 503")
        self.assertLess(time.monotonic() - t0, 3)
        control(port, fault="status@0:429:0.6")
        s = self.stream(port, "POST", CHAT, chat()).read_all(5)
        self.assertEqual(s.status, 429)
        self.assertEqual(s.headers["retry-after"], "1")
        self.assertEqual(s.json()["error"]["type"], "rate_limit_error")
        wait_until(lambda: post_json(port, CHAT, chat(stream=False))[0] == 200, 5,
                   interval=0.05, what="recovery from 429")
        self.assertGreaterEqual(metric(scrape(port), "llmsim_fault_responses_total"), 2)

    def test_crash_mid_stream(self):
        proc, port = self.start_llmsim("r1", args=["--decode-ms", "10"])
        s = self.stream(port, "POST", CHAT, chat("c", 100000))
        s.next_event(5)
        s.next_event(5)
        control(port, fault="crash@0.2")
        s.read_all(10)
        self.assertIn(s.ended, ("eof", "reset"))
        self.assertNotIn("[DONE]", [d for _, d in s.events])
        self.assertEqual(proc.wait(5), 1)

    def test_crash_reset_mid_stream(self):
        # crash@T:reset: the streams in flight read a reset, never a clean end, and the port
        # refuses until the replica is started again
        proc, port = self.start_llmsim("r1", args=["--decode-ms", "10"])
        s = self.stream(port, "POST", CHAT, chat("c", 100000))
        s.next_event(5)
        s.next_event(5)
        control(port, fault="crash@0.2:reset")
        s.read_all(10)
        self.assertEqual(s.ended, "reset")
        self.assertEqual(proc.wait(5), 1)
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()

    def test_close_after_tokens(self):
        _, port = self.start_llmsim("r1", args=["--decode-ms", "2",
                                                "--fault", "close-after-tokens:3"])
        s = self.stream(port, "POST", CHAT, chat("c", 10)).read_all(10)
        self.assertEqual(s.ended, "eof")
        self.assertEqual(len(s.events), 3)
        self.assertEqual(len(token_events(s.events)), 3)
        self.assertTrue(all(json.loads(d)["choices"][0]["finish_reason"] is None
                            for _, d in s.events))
        s = self.stream(port, "POST", CHAT, chat("c", 10, stream=False))
        with self.assertRaises(AssertionError):
            s.read_head(5)                      # closed without a response
        s = self.stream(port, "POST", CHAT, chat("c", 3)).read_all(10)
        self.assertEqual(s.ended, "complete")   # short enough to finish
        st = wait_until(lambda: (lambda s: s if s["running"] == 0 else None)(state(port)), 5,
                        what="slots freed")
        self.assertEqual((st["dropped"], st["completed"], st["aborted"]), (2, 1, 0))


    def test_stall_first_holds_first_tokens_and_counts_aborts(self):
        _, port = self.start_llmsim("r1", args=["--decode-ms", "5", "--decode-ms-per-seq", "0",
                                                "--fault", "stall-first:1:0.6"])
        base = self.stream(port, "POST", "/v1/completions",
                           {"model": "m", "prompt": "x", "max_tokens": 1, "stream": True})
        held = ttft(base)
        self.assertGreater(held, 0.55, "stall-first:1 held the first token %.3f s" % held)
        base.read_all(5)
        self.assertEqual(state(port)["parked"], 1)
        control(port, clear_faults=True)
        control(port, fault="stall-first:1:30")
        s = self.stream(port, "POST", CHAT, chat("p", 4))
        self.assertEqual(s.read_head(5), 200)    # the head at once, as engines send it
        st = wait_until(lambda: (lambda x: x if x["parked_now"] == 1 else None)(state(port)), 5,
                        what="the sequence held")
        self.assertEqual((st["running"], st["waiting"]), (0, 0))
        s.close()                                # its client leaves: the engine aborts it
        st = wait_until(lambda: (lambda x: x if x["aborted"] == 1 else None)(state(port)), 5,
                        what="the held sequence aborted")
        self.assertEqual((st["parked_now"], st["parked"], st["generation_tokens"]), (0, 2, 1))
        self.assertEqual(metric(scrape(port), "llmsim_parked_total"), 2)
        # P 0 holds none
        control(port, clear_faults=True)
        control(port, fault="stall-first:0:30")
        self.assertLess(ttft(self.stream(port, "POST", CHAT, chat("q", 1))), 0.5)

    def test_stall_random_pauses_at_random(self):
        # stalls of 0.3 s, 0.25 s apart on average: several within two seconds
        _, port = self.start_llmsim("r1", args=["--decode-ms", "5", "--seed", "3",
                                                "--fault", "stall-random:4:0.3"])
        self.assertEqual(state(port)["faults"], ["stall-random:4:0.3"])
        seen = set()
        deadline = time.monotonic() + 10
        while len(seen) < 2 and time.monotonic() < deadline:
            seen.add(state(port)["stalled"])
            time.sleep(0.02)
        self.assertEqual(seen, {True, False}, "stalls begin and end")
        self.assertGreaterEqual(state(port)["stalls"], 1)
        # every request is served in the end
        for i in range(3):
            status, _, body, raw = post_json(port, CHAT, chat("r%d" % i, 2, stream=False))
            self.assertEqual(status, 200, raw)


class LlmsimProcess(harness.Harness):

    def test_ready_file_help_and_sigterm(self):
        ready = self.path("ready")
        proc, port = self.start_llmsim("r9", args=["--ready-file", ready])
        with open(ready) as f:
            self.assertEqual(f.read().strip(), "llmsim ready name=r9 listen=127.0.0.1:%d" % port)
        s = self.stream(port, "POST", CHAT, chat("t", 100000))
        s.next_event(5)
        t0 = time.monotonic()
        proc.signal(signal.SIGTERM)
        self.assertEqual(proc.wait(5), 0)
        self.assertLess(time.monotonic() - t0, 2)

        p = self.start([harness.binary("llmsim"), "--help"], name="help")
        self.assertEqual(p.wait(5), 0)
        out = p.output()
        for flag in ("--listen", "--name", "--model", "--slots", "--speed", "--seed", "--flavor",
                     "--prefill-us-per-token", "--decode-ms", "--decode-ms-per-seq",
                     "--max-tokens-default", "--prefix-block-tokens", "--prefix-cache-blocks",
                     "--fault", "--state-shm", "--ready-file", "--quiet", "slow@T:F[:D]",
                     "stall@T[:D]", "status@T:CODE:D", "crash@T", "close-after-tokens:N",
                     "--schedule", "--step-tokens", "--prefill-fixed-ms", "--decode-batch-exp",
                     "--jitter", "--gauge-lag-ms", "prefill-first", "chunked",
                     "--endpoint-load-metrics", "--enable-server-load-tracking", "--v1-loads",
                     "crash@T[:reset]", "--scheduling-policy",
                     "--priority-preemption-threshold"):
            self.assertIn(flag, out)
        for bad in (["--slots", "0"], ["--fault", "slow@x"], ["--flavor", "foo"], ["--bogus"],
                    ["--schedule", "lifo"], ["--step-tokens", "512"],  # without chunked
                    ["--schedule", "chunked", "--slots", "16", "--step-tokens", "8"],
                    ["--jitter", "-0.1"], ["--decode-batch-exp", "5"], ["--gauge-lag-ms", "-1"],
                    ["--prefill-fixed-ms", "x"], ["--scheduling-policy", "lottery"],
                    ["--priority-preemption-threshold", "0"]):  # without priority
            p = self.start([harness.binary("llmsim")] + bad, name="bad")
            self.assertEqual(p.wait(5), 2, bad)

    def test_control_rejects_bad_documents(self):
        _, port = self.start_llmsim("r1")
        for doc in ({"speed": 0}, {"fault": "nope@1"}, {"bogus": 1}, [1], {"fault": 3}):
            status, _, body, raw = post_json(port, "/sim/control", doc)
            self.assertEqual(status, 400, (doc, raw))
            self.assertIn("message", body["error"])
        st = control(port, speed=2, fault=["slow@0:2", "close-after-tokens:5"])
        self.assertEqual(st["speed"], 1.0)
        self.assertEqual(st["base_speed"], 2.0)
        self.assertEqual(st["faults"][1], "close-after-tokens:5")
        for key in ("name", "speed", "slots", "running", "waiting", "completed", "aborted",
                    "prefix_hits", "prefix_lookups", "connections", "last_abort_wall_ns"):
            self.assertIn(key, st)
        self.assertEqual((st["schedule"], st["step_tokens"], st["prefill_fixed_ms"],
                          st["decode_batch_exp"], st["jitter"]), ("fcfs", 0, 0.0, 1.0, 0.0))


if __name__ == "__main__":
    harness.main()
