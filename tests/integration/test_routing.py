"""Routing against real llmsim replicas: model-aware candidates, passive
ejection and its return with slow start, Retry-After, retries and the retry
budget, active health checks, engine scraping in each vocabulary (and ended
requests an engine's gauge still holds, not taken for others' load), the ttft
policy against a slow replica, a stream's predicted end following its pace,
the learnt service without the work ahead, prefix and session affinity, and
a policy plugin loaded from a shared object.

Each case states the fleet, what the clients send and what must happen;
routing decisions are read back from the access log ("candidates" explains
each one) and from the replicas' own counters (/sim/state).
"""

import collections
import json
import os
import re
import signal
import threading
import time

import harness
from harness import (Harness, StreamReader, chat_body, http_request, metric, post_json, scrape,
                     sse_events, wait_until)


def plugin_abi():
    """(major, minor) of the plugin ABI the build was compiled with, from the public header."""
    with open(os.path.join(harness.SRC, "gateway", "include", "llmgate", "plugin.h")) as f:
        text = f.read()
    return tuple(int(re.search(r"#define LG_PLUGIN_ABI_%s (\d+)" % part, text).group(1))
                 for part in ("MAJOR", "MINOR"))


FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


sim_state = harness.sim_state


read_log = harness.read_access_log


def chat(port, content="hello", max_tokens=4, headers=None, stream=False, timeout=30.0):
    status, hdrs, _, data = post_json(port, "/v1/chat/completions",
                                      chat_body(content=content, max_tokens=max_tokens,
                                                stream=stream), headers=headers,
                                      timeout=timeout)
    return status, hdrs, data


def run_concurrently(n_threads, fn, duration=None, count=None):
    """Runs fn(i) from n_threads threads until `duration` s or `count` calls."""
    lock = threading.Lock()
    state = {"next": 0}
    results = []
    deadline = time.monotonic() + duration if duration else None

    def worker():
        while True:
            with lock:
                i = state["next"]
                if (count is not None and i >= count) or (
                        deadline is not None and time.monotonic() > deadline):
                    return
                state["next"] += 1
            r = fn(i)
            with lock:
                results.append(r)

    ts = [threading.Thread(target=worker) for _ in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


class RoutingTest(Harness):

    # ---- fleet and gateway ----------------------------------------------------

    def fleet(self, specs):
        """specs: list of (name, llmsim args, models). Returns {name: port}."""
        ports = {}
        for name, args, models in specs:
            _, port = self.start_llmsim(name, models=models, args=list(args))
            ports[name] = port
        return ports

    def gateway(self, ports, routing=None, health=None, models=None, workers=2, extra=None):
        backends = []
        for name, port in ports.items():
            backends.append({"name": name, "url": "http://127.0.0.1:%d" % port,
                             "models": (models or {}).get(name, ["m"])})
        conf = self.base_config(backends, workers=workers, access_log={
            "path": self.path("access.log"), "flush": 0})
        conf["routing"] = routing or {"policy": "ttft"}
        conf["health"] = dict({"interval": "1h", "scrape_interval": "100ms"}, **(health or {}))
        conf.update(extra or {})
        return self.start_gateway(conf)

    def log(self, n=None):
        return read_log(self.path("access.log"), n)

    # ---- model-aware candidates -------------------------------------------------

    def test_model_aware_candidates_with_aliases(self):
        ports = self.fleet([("a", FAST, ["m", "m-alias"]), ("b", FAST, ["other"]),
                            ("c", FAST, ["m"])])
        _, gw = self.gateway(ports, models={"a": ["m", "m-alias"], "b": ["other"],
                                            "c": ["m"]})
        # llmsim answers for its first --model name whatever alias is asked
        for _ in range(6):
            self.assertEqual(chat(gw)[0], 200)
        for _ in range(4):
            status, hdrs, _ = chat_alias(gw, "m-alias")
            self.assertEqual(status, 200)
            self.assertEqual(hdrs["x-llmsim-replica"], "a")
        status, hdrs, _ = chat_alias(gw, "other")
        self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, "b"))
        self.assertEqual(chat_alias(gw, "nope")[0], 404)
        log = self.log(12)
        for rec in log:
            names = {c["backend"] for c in rec.get("candidates", [])}
            if rec["model"] == "m":
                self.assertEqual(names, {"a", "c"}, rec)
                self.assertIn(rec["backend"], ("a", "c"))
            elif rec["model"] == "m-alias":
                self.assertEqual(names, {"a"}, rec)
                self.assertEqual(rec["reason"], "only_candidate")
        self.assertEqual(sim_state(ports["b"])["requests"], 1)

    # ---- passive health ---------------------------------------------------------

    def test_passive_ejection_and_return_with_slow_start(self):
        ports = self.fleet([("r1", FAST, ["m"]), ("r2", FAST, ["m"])])
        gp, gw = self.gateway(ports, routing={"policy": "round_robin"}, health={
            "eject_consecutive": 3, "eject_base": "1s", "eject_max": "4s",
            "slow_start": "3s"}, workers=1)
        # r1 answers 503 (no Retry-After hold) for 2.5 s from now: armed once
        # the gateway is up, so a slow start (valgrind) does not eat into it
        self.assertEqual(post_json(ports["r1"], "/sim/control",
                                   {"fault": "status@0:503:2.5:0"})[0], 200)
        t0 = time.monotonic()
        sent = 0
        while time.monotonic() - t0 < 2.0:
            status, hdrs, _ = chat(gw)
            self.assertEqual(status, 200)  # retried on r2 when r1 fails
            self.assertEqual(hdrs["x-llmsim-replica"], "r2")
            sent += 1
        gp.wait_for(r"backend r1 ejected for 1000 ms \(ejection 1\)")
        # ejected for 1 s, then a half-open probe fails (still 503): 2 s more
        gp.wait_for(r"backend r1 ejected for 2000 ms \(ejection 2\)", timeout=10)
        r1_attempts = sim_state(ports["r1"])["requests"]
        # 3 failures eject, then one probe per back-off: nothing like one in two
        self.assertLessEqual(r1_attempts, 3 + 2, "r1 got %d of %d" % (r1_attempts, sent))
        # after the fault (2.5 s), the next probe (at 3 s) succeeds; probes ride
        # on traffic, so keep it coming
        while not any("backend r1 is back after ejection" in ln for ln in gp.lines):
            self.assertEqual(chat(gw)[0], 200)
            self.assertLess(time.monotonic() - t0, 10, "r1 never came back")
        # slow start over 3 s: r1's share of the next requests, by time since
        t1 = time.monotonic()
        where = run_concurrently(2, lambda i: (time.monotonic() - t1, chat(gw)[1][
            "x-llmsim-replica"]), duration=4.5)
        early = [r for t, r in where if t < 0.75]     # ramp 0.1 .. 0.33
        late = [r for t, r in where if t > 3.3]       # full share
        self.assertGreaterEqual(min(len(early), len(late)), 8, where)
        share_early = early.count("r1") / len(early)
        share_late = late.count("r1") / len(late)
        self.assertLess(share_early, 0.3, "slow start let r1 take %.2f at once" % share_early)
        self.assertGreater(share_late, 0.35, "r1 did not get its share back: %.2f" % share_late)
        ramps = [c["ramp"] for r in self.log() for c in r.get("candidates", [])
                 if c["backend"] == "r1" and "ramp" in c]
        self.assertTrue(ramps and min(ramps) < 0.5, "no slow start in the access log")

    def test_retry_after_is_honoured(self):
        ports = self.fleet([("r1", FAST, ["m"]), ("r2", FAST, ["m"])])
        _, gw = self.gateway(ports, routing={"policy": "round_robin"}, workers=1)
        # from now, r1 answers 429 with Retry-After: 2 for 1.5 s
        status, _, _ = http_request(ports["r1"], "POST", "/sim/control",
                                    {"fault": "status@0:429:1.5:2"})
        self.assertEqual(status, 200)
        for _ in range(2):
            self.assertEqual(chat(gw)[0], 200)
        t429 = time.monotonic()
        self.assertEqual(sim_state(ports["r1"])["requests"], 1)  # one 429 with Retry-After: 2
        while time.monotonic() - t429 < 1.7:
            status, hdrs, _ = chat(gw)
            self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, "r2"))
        self.assertEqual(sim_state(ports["r1"])["requests"], 1)
        # once the hold is over, r1 takes requests again
        while chat(gw)[1]["x-llmsim-replica"] != "r1":
            self.assertLess(time.monotonic() - t429, 5, "r1 never came back")
        self.assertGreater(time.monotonic() - t429, 1.7)
        rec = [r for r in self.log() if r["attempt_count"] == 2]
        self.assertEqual(len(rec), 1)
        self.assertEqual(rec[0]["backend"], "r2")

    # ---- retries ----------------------------------------------------------------

    def test_no_retry_after_the_first_byte(self):
        # r1 cuts every stream after 3 tokens; r2 is fine
        ports = self.fleet([("r1", FAST + ["--fault", "close-after-tokens:3"], ["m"]),
                            ("r2", FAST, ["m"])])
        _, gw = self.gateway(ports, routing={"policy": "round_robin"},
                             health={"eject_consecutive": 0}, workers=1)
        cut = 0
        for i in range(6):
            r = StreamReader(gw, chat_body(stream=True, max_tokens=20))
            raw = r.read_to_eof(timeout=10)
            r.close()
            if b"0\r\n\r\n" not in raw:
                cut += 1
                self.assertIn(b"data:", raw)  # the client got tokens, then the cut
        self.assertEqual(cut, 3)
        log = self.log(6)
        for rec in log:
            self.assertEqual(rec["attempt_count"], 1, rec)
            if rec["backend"] == "r1":
                self.assertEqual(rec["error"], "upstream_closed_mid_response")
        # no duplicate generation was started on r2
        self.assertEqual(sim_state(ports["r2"])["requests"], 3)

    def test_retry_budget_bounds_an_outage(self):
        always_503 = ["--fault", "status@0:503:3600:0"]
        ports = self.fleet([("r1", FAST + always_503, ["m"]), ("r2", FAST + always_503, ["m"]),
                            ("r3", FAST + always_503, ["m"])])
        # no ejection: the budget alone must bound the attempts
        _, gw = self.gateway(ports, routing={"policy": "round_robin", "retry": {
            "attempts": 3, "budget_ratio": 0.2, "budget_min": 0}},
            health={"eject_consecutive": 0}, workers=1)
        n = 60
        t0 = time.monotonic()
        for _ in range(n):
            s0 = time.monotonic()
            status = chat(gw)[0]
            self.assertIn(status, (502, 503))
            self.assertLess(time.monotonic() - s0, 1.0)
        total = sum(sim_state(p)["requests"] for p in ports.values())
        # without a budget: 3 attempts each = 180; with it: n + 10 to start + 20% of n
        self.assertLessEqual(total, n + 10 + 0.2 * n + 1)
        self.assertGreaterEqual(total, n + 10)
        self.assertLess(time.monotonic() - t0, 20)

    def test_outage_with_ejection_fails_fast_with_retry_after(self):
        always_503 = ["--fault", "status@0:503:3600:0"]
        ports = self.fleet([("r1", FAST + always_503, ["m"]), ("r2", FAST + always_503, ["m"])])
        gp, gw = self.gateway(ports, health={"eject_consecutive": 2, "eject_base": "5s"},
                              workers=1)
        for _ in range(6):
            chat(gw)
        gp.wait_for(r"backend r1 ejected")
        gp.wait_for(r"backend r2 ejected")
        before = sum(sim_state(p)["requests"] for p in ports.values())
        s0 = time.monotonic()
        status, hdrs, data = chat(gw)
        self.assertLess(time.monotonic() - s0, 0.5)
        self.assertEqual(status, 503)
        self.assertIn(b"no_backend_available", data)
        self.assertGreaterEqual(int(hdrs["retry-after"]), 2)  # the back-off left, rounded up
        self.assertLessEqual(int(hdrs["retry-after"]), 5)
        self.assertEqual(sum(sim_state(p)["requests"] for p in ports.values()), before)

    # ---- active health checks -----------------------------------------------------

    def test_health_checks_mark_a_stopped_replica_down_and_up(self):
        ports = self.fleet([("r1", FAST, ["m"]), ("r2", FAST, ["m"])])
        sim1 = self.procs[0]
        gp, gw = self.gateway(ports, routing={"policy": "round_robin"}, health={
            "interval": "100ms", "timeout": "150ms", "rise": 2, "fall": 2,
            "scrape_interval": 0, "eject_consecutive": 0, "slow_start": 0})
        os.kill(sim1.pid, signal.SIGSTOP)
        self.addCleanup(lambda: sim1.signal(signal.SIGCONT))
        gp.wait_for(r"backend r1 is down \(2 checks failed", timeout=10)
        for _ in range(4):
            status, hdrs, _ = chat(gw)
            self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, "r2"))
        os.kill(sim1.pid, signal.SIGCONT)
        gp.wait_for(r"backend r1 is up \(2 checks passed\)", timeout=10)
        seen = {chat(gw)[1]["x-llmsim-replica"] for _ in range(4)}
        self.assertEqual(seen, {"r1", "r2"})

    # ---- engine metrics -----------------------------------------------------------

    def test_scrapes_each_flavor(self):
        flavors = ["vllm", "sglang", "tgi", "llamacpp"]
        slow = ["--slots", "2", "--decode-ms", "50", "--decode-ms-per-seq", "0"]
        ports = self.fleet([(f, slow + ["--flavor", f], ["m"]) for f in flavors]
                           + [("idle", FAST, ["m"])])
        # other clients load each engine directly: 2 running, 3 waiting
        readers = []
        for f in flavors:
            for _ in range(5):
                readers.append(StreamReader(ports[f], chat_body(stream=True, max_tokens=400)))
        self.addCleanup(lambda: [r.close() for r in readers])
        for f in flavors:
            wait_until(lambda: (lambda s: s["running"] == 2 and s["waiting"] == 3)(
                sim_state(ports[f])), what="queue on " + f)
        # the gateway scrapes every backend as it starts (and says which
        # vocabulary it found), so its first request already sees the queues
        gp, gw = self.gateway(ports, routing={"policy": "ttft"})
        for f in flavors:
            gp.wait_for(r"backend %s: engine metrics look like %s" % (f, f))

        def routed_with_fresh_samples():
            # the gateway's own request goes to "idle" and explains what it saw
            status, hdrs, _ = chat(gw, max_tokens=1)
            self.assertEqual((status, hdrs["x-llmsim-replica"]), (200, "idle"))
            rec = self.log()[-1]
            cands = {c["backend"]: c for c in rec["candidates"]}
            fresh = all(cands.get(f, {}).get("waiting") == 3 for f in flavors)
            return cands if fresh else None

        cands = wait_until(routed_with_fresh_samples, timeout=10, interval=0.05,
                           what="the queues in the access log")
        self.assertEqual(set(cands), set(flavors) | {"idle"})
        for f in flavors:
            c = cands[f]
            self.assertEqual((c["running"], c["waiting"]), (2, 3), c)
            self.assertLess(c["scrape_age_ms"], 300)
            self.assertEqual(c["foreign"], 5, c)  # none of them is ours
            if f in ("vllm", "sglang", "llamacpp"):
                self.assertIn("kv", c)

    def test_ended_requests_the_engine_still_counts_are_not_foreign(self):
        # the engine keeps a request in its running gauge 12 ms after its
        # last byte (vLLM sets its gauges once a step; llama.cpp-style
        # servers free the slot after the response): a scrape in that window
        # counts one of ours that the gateway has closed. With one gateway
        # in front, that is no one else's load, and the engine model stays on
        lag = ["--decode-ms", "10", "--decode-ms-per-seq", "0", "--gauge-lag-ms", "12",
               "--flavor", "vllm"]
        ports = self.fleet([("r1", lag, ["m"])])
        gp, gw = self.gateway(ports, health={"scrape_interval": "10ms"})
        results = run_concurrently(3, lambda i: chat(gw, max_tokens=3, stream=True), duration=3.0)
        self.assertTrue(results and all(r[0] == 200 for r in results))
        views = [c for r in self.log() for c in r["candidates"]]
        phantom = [c for c in views if c.get("foreign", 0) > 0]
        print("\n  %d requests, %d views: %d with foreign load, %d without the engine model"
              % (len(results), len(views), len(phantom),
                 sum(1 for c in views if "model_ms" not in c)))
        self.assertGreater(len(views), 50)
        self.assertEqual(phantom, [], "requests of ours the engine still counted")
        self.assertEqual(gp.stop(), 0)

        def lingers():
            # a request straight to the engine: its gauge holds it after the answer
            status, _, _ = chat(ports["r1"], max_tokens=2)
            return status == 200 and metric(scrape(ports["r1"]),
                                            "vllm:num_requests_running") == 1.0
        wait_until(lingers, timeout=10, interval=0.05, what="the ended request in the gauge")

    def test_a_long_gauge_lag_is_learnt_where_no_one_else_is_served(self):
        # SGLang sets its gauges at a prefill or once every 40 decode steps:
        # here a request stays in them 300 ms (30 steps) after its last byte.
        # Until the engine's finished count has matched ours for a while,
        # such a request reads as someone else's; once it has, the lag is
        # measured and our ends within it are ours. A client straight to the
        # engine is others' again (its requests finish where ours do not).
        lag = ["--decode-ms", "10", "--decode-ms-per-seq", "0", "--gauge-lag-ms", "300",
               "--flavor", "sglang"]
        ports = self.fleet([("r1", lag, ["m"])])
        gp, gw = self.gateway(ports, health={"scrape_interval": "20ms"},
                              extra={"admin": "127.0.0.1:0"})
        admin = int(gp.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))

        def engine():
            status, _, data = http_request(admin, "GET", "/admin/backends?scores=0")
            self.assertEqual(status, 200)
            return json.loads(data)["backends"][0]["engine"]

        seen_lines = [0]

        def phantom_share(clients, seconds):
            n0 = seen_lines[0]
            results = run_concurrently(clients, lambda i: chat(gw, max_tokens=3, stream=True),
                                       duration=seconds)
            self.assertTrue(results and all(r[0] == 200 for r in results))
            records = self.log(n0 + len(results))
            seen_lines[0] = len(records)
            views = [c for r in records[n0:] for c in r["candidates"]]
            self.assertGreater(len(views), 30)
            return sum(1 for c in views if c.get("foreign", 0) > 0) / len(views), len(views)

        self.assertIsNone(engine()["others"])  # not read long enough
        before, n_before = phantom_share(3, 2.0)
        e = wait_until(lambda: engine()["others"] is False and engine(),
                       timeout=15, interval=0.1, what="the engine known to serve us alone")
        # the lag is learnt from the traffic that follows
        phantom_share(3, 1.0)
        alone, n_alone = phantom_share(3, 3.0)
        e = engine()
        print("\n  views with others' load: %.2f of %d before the counts matched, %.2f of %d "
              "after; gauge lag learnt %.0f ms" % (before, n_before, alone, n_alone,
                                                  e["gauge_lag_ms"]))
        self.assertGreater(before, 0.3, "the lag must read as others' load at first")
        self.assertLess(alone, 0.05)
        self.assertFalse(e["others"])
        self.assertGreater(e["gauge_lag_ms"], 200)
        self.assertLess(e["gauge_lag_ms"], 3000)

        # another client of the engine: its finishes outrun ours
        stop = threading.Event()

        def direct():
            while not stop.is_set():
                chat(ports["r1"], max_tokens=3)
        th = threading.Thread(target=direct)
        th.start()
        try:
            wait_until(lambda: engine()["others"] is True, timeout=10, interval=0.05,
                       what="others' requests seen finishing")
            seen, _ = phantom_share(2, 1.0)
        finally:
            stop.set()
            th.join()
        self.assertGreater(seen, 0.3, "another client's load must count")
        self.assertEqual(gp.stop(), 0)

    # ---- latency-aware routing ----------------------------------------------------

    def test_ttft_steers_away_from_a_slow_replica(self):
        base = ["--decode-ms", "5", "--decode-ms-per-seq", "0.5", "--prefill-us-per-token", "100"]
        ports = self.fleet([("f1", base, ["m"]), ("f2", base, ["m"]),
                            ("slow", base + ["--speed", "0.25"], ["m"])])

        def share_of_slow(policy, stream=False, **routing):
            gp, gw = self.gateway(ports, routing=dict(policy=policy, **routing))
            before = sim_state(ports["slow"])["requests"]
            before_all = sum(sim_state(p)["requests"] for p in ports.values())
            run_concurrently(6, lambda i: chat(gw, content="x" * 800, max_tokens=16,
                                               stream=stream), duration=4.0)
            slow = sim_state(ports["slow"])["requests"] - before
            total = sum(sim_state(p)["requests"] for p in ports.values()) - before_all
            self.assertEqual(gp.stop(), 0)  # (sanitizer and valgrind runs check the exit)
            return slow / total, total

        rr, n_rr = share_of_slow("round_robin")
        ttft, n_ttft = share_of_slow("ttft")
        seen = self.log()
        rec = seen[-1]
        # streamed with max_tokens, the engine model predicts where a stream
        # timed the step (the host's side of it runs with any policy)
        model, n_model = share_of_slow("ttft", stream=True,
                                       options={"ttft": {"engine_model": 1}})
        print("\n  slow replica's share: round_robin %.2f (%d requests), ttft %.2f (%d), "
              "ttft with the engine model %.2f (%d)" % (rr, n_rr, ttft, n_ttft, model, n_model))
        self.assertAlmostEqual(rr, 1 / 3, delta=0.05)
        self.assertLess(ttft, rr / 2, "slow share: ttft %.2f vs round robin %.2f" % (ttft, rr))
        self.assertGreater(n_ttft, n_rr)  # the same clients got more done
        self.assertEqual(rec["policy"], "ttft")
        self.assertTrue(all("ttft_ms" in c and "score" in c for c in rec["candidates"]))
        self.assertLess(model, rr / 2, "slow share: model %.2f vs round robin %.2f" % (model, rr))
        self.assertTrue(any("model_ms" in c and "step_ms" in c
                            for r in self.log()[len(seen):] for c in r["candidates"]))

    def test_predicted_end_follows_the_streams_pace(self):
        # One slot, 40 ms a token (twice the gateway's prior gap): stream A
        # holds the slot and B queues in the engine (a queue on two scrapes
        # confirms one slot). C's slot wait is when A will end: it must follow
        # A's pace so far, not the gap A's pick assumed (by which A would
        # have ended already).
        ports = self.fleet([("r1", ["--slots", "1", "--decode-ms", "40", "--decode-ms-per-seq",
                                    "0", "--prefill-us-per-token", "10"], ["m"])])
        gp, gw = self.gateway(ports, workers=1, extra={"admin": "127.0.0.1:0"})
        admin = int(gp.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))

        def queued_since():
            status, _, data = http_request(admin, "GET", "/admin/backends")
            self.assertEqual(status, 200)
            e = json.loads(data)["backends"][0]["engine"]
            return e["waiting"] and time.monotonic() * 1000 - e["age_ms"]

        a = StreamReader(gw, chat_body(content="a", max_tokens=60, stream=True))
        a.read_until(b"tok")
        b = threading.Thread(target=chat, args=(gw,), kwargs={"max_tokens": 1})
        b.start()
        # the queue on a scrape, then on a later one (taken 100 ms after)
        first = wait_until(queued_since, what="a scrape showing B queued")
        wait_until(lambda: (queued_since() or 0) > first + 50,
                   what="a second scrape showing B queued")
        while a.raw.count(b"data: {") < 24:
            self.assertFalse(a.eof, "A ended early")
            a.read_some()
        a.sock.settimeout(0.005)  # what has arrived meanwhile (events are 40 ms apart)
        while a.read_some():
            pass
        a.sock.settimeout(30)
        events = a.raw.count(b"data: {")
        expect_ms = (60 - events) * 40.0
        result = {}
        c = threading.Thread(target=lambda: result.update(c=chat(gw, max_tokens=1, timeout=60)))
        c.start()
        a.read_until(b"[DONE]")
        for t in (b, c):
            t.join(60)
        self.assertEqual(result["c"][0], 200)
        cand = max(self.log(3), key=lambda r: r["ts"])["candidates"][0]  # C's
        print("\n  A at %d of 60 events: C's slot wait %s ms, A's remaining ~%.0f ms"
              % (events, cand.get("slot_wait_ms"), expect_ms))
        self.assertEqual(cand.get("slots"), 1, cand)
        self.assertNotIn("slots_guessed", cand)  # B, late in the queue, proved it
        self.assertGreater(cand.get("slot_wait_ms", 0), 0.6 * expect_ms, cand)
        self.assertLess(cand["slot_wait_ms"], 1.6 * expect_ms, cand)

    def test_slot_wait_on_a_guessed_capacity(self):
        # Two slots, never seen with a queue: the capacity is a guess (the
        # most seen running, + 0.5). With both taken by streams of known
        # length, C's wait is when the sooner of them ends, as on an engine
        # whose slots a queue confirmed, not a formula of the mean hold time.
        ports = self.fleet([("r1", ["--slots", "2", "--decode-ms", "40", "--decode-ms-per-seq",
                                    "0", "--prefill-us-per-token", "10"], ["m"])])
        gp, gw = self.gateway(ports, workers=1, extra={"admin": "127.0.0.1:0"},
                              routing={"policy": "ttft", "options": {"ttft": {"slots": 2}}})
        admin = int(gp.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))

        def running():
            status, _, data = http_request(admin, "GET", "/admin/backends")
            self.assertEqual(status, 200)
            return json.loads(data)["backends"][0]["engine"]["running"] == 2

        a = StreamReader(gw, chat_body(content="a", max_tokens=30, stream=True))
        b = StreamReader(gw, chat_body(content="b", max_tokens=90, stream=True))
        a.read_until(b"tok")
        b.read_until(b"tok")
        wait_until(running, what="a scrape showing both streams running")
        while a.raw.count(b"data: {") < 10:
            self.assertFalse(a.eof, "A ended early")
            a.read_some()
        events = a.raw.count(b"data: {")
        expect_ms = (30 - events) * 40.0
        status = chat(gw, max_tokens=1, timeout=60)[0]
        self.assertEqual(status, 200)
        a.read_until(b"[DONE]")
        b.read_until(b"[DONE]")
        cand = max(self.log(3), key=lambda r: r["ts"])["candidates"][0]  # C's
        print("\n  A at %d of 30 events: C's slot wait %s ms on %s guessed slots, A's "
              "remaining ~%.0f ms" % (events, cand.get("slot_wait_ms"), cand.get("slots"),
                                      expect_ms))
        self.assertEqual(cand.get("slots"), 2.5, cand)  # a guess
        self.assertIs(cand.get("slots_guessed"), True, cand)
        self.assertGreater(cand.get("slot_wait_ms", 0), 0.5 * expect_ms, cand)
        self.assertLess(cand["slot_wait_ms"], 1.6 * expect_ms, cand)
        # the engine model ran with the 16 slots assumed of an engine never
        # seen full, not the 2 this policy is told: the formula decides
        self.assertEqual(cand.get("model_slots"), 16, cand)
        self.assertGreater(cand["score"][0], cand["slot_wait_ms"], cand)

    def test_measured_terms_where_the_model_misses(self):
        # Engines unlike the one the engine model mirrors: every step that
        # prefills costs 150 ms whatever the prompt (launch and scheduling
        # costs). The model's prefill line learns that fixed part only as
        # fast as its cap on each sample lets it (a first token beyond its
        # prediction counts at most 16x its prefill so far), so its first
        # tokens come later than predicted, short prompts most; the
        # replicas' own first tokens by prompt size (the TTFT fit: a fixed
        # part and a slope) and load predict them from the first samples.
        # The gateway sees its model miss there, says so in /admin/backends,
        # and picks by the measured terms (the access log's reason and
        # candidates).
        sim = ["--prefill-fixed-ms", "150", "--prefill-us-per-token", "20", "--decode-ms", "10",
               "--decode-ms-per-seq", "0"]
        ports = self.fleet([("r1", sim, ["m"]), ("r2", sim, ["m"])])
        gp, gw = self.gateway(ports, workers=1, extra={"admin": "127.0.0.1:0"})
        admin = int(gp.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))

        def one(i):
            # prompts of 0.2 to 8 KiB, short and long in turn
            content = "w" * (200 if i % 2 else 8000 - 150 * (i % 40))
            status, _, _ = chat(gw, content=content, max_tokens=4, stream=True, timeout=60)
            return status

        def backends():
            status, _, data = http_request(admin, "GET", "/admin/backends")
            self.assertEqual(status, 200)
            return json.loads(data)["backends"]

        before = backends()
        self.assertTrue(all(b["estimator"]["use"] == "model" for b in before))
        statuses = run_concurrently(2, one, count=120)
        self.assertEqual(statuses, [200] * 120)
        after = backends()
        for b in after:
            print("\n  %s: estimator %s" % (b["name"], b["estimator"]), end="")
        missed = [b for b in after if b["estimator"]["use"] == "measured"]
        self.assertTrue(missed, [b["estimator"] for b in after])
        for b in missed:
            self.assertGreater(b["estimator"]["model_err"], b["estimator"]["measured_err"])
        recs = self.log()
        late = recs[len(recs) // 2:]
        self.assertTrue(any(c.get("est") == "measured" for r in late for c in r["candidates"]))
        self.assertTrue(any(r["reason"] == "lowest_measured_ttft" for r in late),
                        collections.Counter(r["reason"] for r in late))
        self.assertTrue(all("measured_ms" in c for r in late for c in r["candidates"]))

    def test_learnt_service_leaves_out_the_work_ahead(self):
        # A 2 KB prompt's prefill takes ~256 ms (streams: the first token
        # is what is learnt). B follows A by 20 ms, so B
        # waits for A's prefill, then its own: ~2x A's TTFT. The policy adds
        # that wait (A's work ahead) to B's prediction itself; were it also
        # learnt from B's sample, the service estimate would settle near 1.5x
        # a lone request's TTFT and every busy replica would look slow.
        ports = self.fleet([("r1", ["--slots", "4", "--decode-ms", "5", "--decode-ms-per-seq",
                                    "0", "--prefill-us-per-token", "500",
                                    "--prefix-cache-blocks", "0"], ["m"])])
        _, gw = self.gateway(ports, workers=1)
        prompt = "x" * 2048
        for _ in range(4):
            self.assertEqual(chat(gw, content=prompt, max_tokens=2, stream=True)[0], 200)
        for _ in range(6):
            t = threading.Thread(target=chat, args=(gw,),
                                 kwargs={"content": prompt, "max_tokens": 2, "stream": True})
            t.start()
            time.sleep(0.02)  # (B must find A on its way, not arrive with it)
            self.assertEqual(chat(gw, content=prompt, max_tokens=2, stream=True)[0], 200)
            t.join()
        self.assertEqual(chat(gw, content=prompt, max_tokens=2, stream=True)[0], 200)
        recs = self.log(17)
        alone = sorted(r["ttft"] for r in recs[:4])[1]
        learnt = recs[-1]["candidates"][0]["ttft_ms"]
        ahead = [r["candidates"][0].get("work_ahead_ms", 0) for r in recs[4:16]]
        print("\n  2 KB prompt alone: TTFT %.0f ms; learnt after 6 pairs: %.0f ms; work ahead "
              "seen by the second of each pair: %s" % (alone, learnt, sorted(ahead)[-6:]))
        self.assertGreater(max(ahead), 0.5 * alone)  # (B did see A's prefill ahead)
        self.assertLess(learnt, 1.25 * alone)

    def test_prefix_affinity_with_bounded_load(self):
        ports = self.fleet([("r%d" % i, FAST + ["--decode-ms", "20"], ["m"]) for i in range(4)])
        _, gw = self.gateway(ports, routing={"pipeline": [{"policy": "prefix_affinity"},
                                                          {"policy": "ttft"}]})
        system = {g: ("You are assistant %d. " % g) * 200 for g in range(3)}  # ~4 KiB each

        def ask(i):
            g = i % 3
            status, hdrs, _ = chat(gw, content=system[g] + " question %d" % i, max_tokens=4)
            self.assertEqual(status, 200)
            return g, hdrs["x-llmsim-replica"]

        # a trickle: each prefix stays on one replica, where its cache is warm
        where = {}
        for g, replica in run_concurrently(2, ask, count=30):
            where.setdefault(g, []).append(replica)
        for g, replicas in where.items():
            top = max(set(replicas), key=replicas.count)
            self.assertGreaterEqual(replicas.count(top), len(replicas) - 1, where)
        hits = sum(sim_state(p)["prefix_hits"] for p in ports.values())
        lookups = sum(sim_state(p)["prefix_lookups"] for p in ports.values())
        self.assertGreater(hits / lookups, 0.6)
        self.assertIn("prefix_owner", {r["reason"] for r in self.log(30)})

        # a burst of one prefix: bounded load spreads it, no replica takes it all
        mark = len(self.log(30))
        got = run_concurrently(16, lambda i: chat(gw, content=system[0] + " burst %d" % i,
                                                  max_tokens=60)[1]["x-llmsim-replica"],
                               count=48)
        counts = {r: got.count(r) for r in set(got)}
        self.assertGreaterEqual(len(counts), 2, counts)
        self.assertLess(max(counts.values()), 0.75 * 48, counts)
        reasons = {r["reason"] for r in self.log(mark + 48)[mark:]}
        self.assertTrue(reasons & {"prefix_owner_overflow", "lowest_predicted_ttft",
                                   "least_loaded_near_lowest_ttft"}, reasons)

    def test_session_affinity(self):
        ports = self.fleet([("r%d" % i, FAST, ["m"]) for i in range(3)])
        _, gw = self.gateway(ports, routing={"policy": "least_request",
                                             "session_header": "X-Session-Id"})
        where = {}
        for turn in range(4):
            for s in range(8):
                status, hdrs, _ = chat(gw, headers={"X-Session-Id": "session-%d" % s})
                self.assertEqual(status, 200)
                where.setdefault(s, set()).add(hdrs["x-llmsim-replica"])
        for s, backends in where.items():
            self.assertEqual(len(backends), 1, "session %d moved: %s" % (s, backends))
        self.assertGreaterEqual(len(set().union(*where.values())), 2)
        rec = self.log(32)[-1]
        self.assertEqual(rec["policy"], "session_affinity+least_request")
        self.assertIn(rec["reason"], ("session_owner", "session_owner_overflow",
                                      "least_inflight"))

    def test_shadow_stage_is_logged_not_deciding(self):
        # prefix_affinity as a shadow beside round robin: one prompt, so
        # deciding it would send every request to its owner; as a shadow it
        # only shows its costs, and round robin alternates
        ports = self.fleet([("r1", FAST, ["m"]), ("r2", FAST, ["m"])])
        gp, gw = self.gateway(ports, routing={"pipeline": [
            "round_robin", {"policy": "prefix_affinity", "weight": 0}]})
        where = []
        for _ in range(8):
            status, hdrs, _ = chat(gw, content="the same long system prompt " * 40)
            self.assertEqual(status, 200)
            where.append(hdrs["x-llmsim-replica"])
        self.assertEqual(where.count("r1"), 4, where)
        recs = self.log(8)
        owners = set()
        for rec in recs:
            self.assertEqual(rec["policy"], "round_robin+prefix_affinity(shadow)")
            self.assertEqual(rec["reason"], "next_in_turn")
            costs = {c["backend"]: c["score"] for c in rec["candidates"]}
            self.assertTrue(all(len(v) == 2 for v in costs.values()), costs)
            # the shadow's own cost: 0 for the prefix's owner, more for the other
            owners |= {b for b, v in costs.items() if v[1] == 0}
            self.assertEqual(sorted(v[1] > 0 for v in costs.values()), [False, True], costs)
        self.assertEqual(len(owners), 1)
        self.assertEqual(gp.stop(), 0)  # (sanitizer and valgrind runs check the exit)

    # ---- plugins ----------------------------------------------------------------

    def test_plugin_from_shared_object(self):
        ports = self.fleet([("r1", FAST, ["m"]), ("r2", FAST, ["m"])])
        plugin = os.path.join(harness.BUILD, "plugins", "least_kv.so")
        gp, gw = self.gateway(ports, routing={
            "plugins": [plugin],
            "pipeline": ["ttft", {"policy": "least_kv", "weight": 2}],
            "options": {"least_kv": {"ms_per_full": 500}}})
        gp.wait_for(r"loaded policy plugin least_kv 1.0 from .*least_kv.so \(ABI %d\.%d\)"
                    % plugin_abi())
        for _ in range(4):
            self.assertEqual(chat(gw)[0], 200)
        rec = self.log(4)[-1]
        self.assertEqual(rec["policy"], "ttft+least_kv")
        for c in rec["candidates"]:
            self.assertEqual(len(c["score"]), 2)

    def test_bad_routing_config_is_refused(self):
        ports = self.fleet([("r1", FAST, ["m"])])
        for routing, want in [
                ({"policy": "nope"}, r"/routing/policy: policy \"nope\" is not known"),
                ({"pipeline": ["ttft", {"policy": "ttft", "options": {"slotz": 1}}]},
                 r"/routing/pipeline/1/options/slotz: unknown option"),
                ({"plugins": [os.path.join(harness.BUILD, "plugins",
                                           "lgtest_bad_major.so")]},
                 r"/routing/plugins/0: .*major differs")]:
            backends = [{"name": "r1", "url": "http://127.0.0.1:%d" % ports["r1"],
                         "models": ["m"]}]
            path = self.write_config(self.base_config(backends, routing=routing))
            p = self.start([harness.binary("llmgate"), "-c", path], name="llmgate-bad")
            p.wait_for(want)
            self.assertEqual(p.wait(), 2)


def chat_alias(port, model):
    status, hdrs, _, data = post_json(port, "/v1/chat/completions",
                                      chat_body(model=model, max_tokens=2))
    return status, hdrs, data


if __name__ == "__main__":
    harness.main()
