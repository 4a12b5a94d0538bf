"""Shared fleets: priority classes (from the key and a header up to the key's
max_class), fairness between tenants by attained service in tokens, deadlines
(TTFT targets), sheddable classes refused at once with 429 + Retry-After, a
class's queue deadline answered 429, what operators see (access log,
/admin/queues, /metrics), the openai npm client reading the 429, and a reload
that changes classes while requests wait (none lost).
"""

import datetime
import hashlib
import json
import os
import signal
import subprocess
import threading
import time

import harness
from harness import (Harness, chat_body, http_request, metric, post_json, scrape, sim_state,
                     wait_until)

SLOW = ["--slots", "1", "--decode-ms", "20", "--decode-ms-per-seq", "0",
        "--prefill-us-per-token", "10"]

KEYS = {"batch": "sk-sched-batch-000001", "inter": "sk-sched-inter-000002",
        "plain": "sk-sched-plain-000003", "sys": "sk-sched-system-000004"}


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


def bearer(name):
    return {"Authorization": "Bearer " + KEYS[name]}


def keys_doc(batch_class="batch"):
    return {"keys": [
        {"name": "batch-team", "sha256": sha(KEYS["batch"]), "models": "*", "class": batch_class},
        {"name": "chat-team", "sha256": sha(KEYS["inter"]), "models": "*",
         "class": "interactive", "ttft_target_ms": 2000},
        {"name": "plain", "sha256": sha(KEYS["plain"]), "models": "*"},
        {"name": "ops", "sha256": sha(KEYS["sys"]), "models": "*", "class": "default",
         "max_class": "system"},
    ]}


class Async:
    """A request run in a thread; .result is (status, headers, body)."""

    def __init__(self, port, body, headers=None, timeout=60):
        self.result = None
        self.t = threading.Thread(target=self._run, args=(port, body, headers, timeout),
                                  daemon=True)
        self.t.start()

    def _run(self, port, body, headers, timeout):
        try:
            self.result = http_request(port, "POST", "/v1/chat/completions", body,
                                       headers=headers, timeout=timeout)
        except OSError as e:
            self.result = (None, {}, repr(e).encode())

    def wait(self, timeout=60):
        self.t.join(timeout)
        assert self.result is not None, "request still running"
        return self.result


def dispatched(r):
    """When the gateway sent a request (from its access-log line)."""
    t = datetime.datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).timestamp()
    return t * 1000 + r["read"] + r["queue"]


class SchedTest(Harness):

    def setUp(self):
        super().setUp()
        self.keys_path = self.path("keys.json")
        self.write_keys(keys_doc())

    def write_keys(self, obj):
        with open(self.keys_path + ".tmp", "w") as f:
            json.dump(obj, f, indent=2)
        os.rename(self.keys_path + ".tmp", self.keys_path)

    def gateway(self, scheduling=None, tenants=None, queue_length=16, workers=2, sims=1,
                sim_args=SLOW, max_inflight=1, weights=None, backend_extra=None, **extra):
        ports = [self.start_llmsim("r%d" % i, args=sim_args)[1] for i in range(sims)]
        backends = [dict({"name": "r%d" % i, "url": "http://127.0.0.1:%d" % p, "models": ["m"],
                          "max_inflight": max_inflight}, **(backend_extra or {}))
                    for i, p in enumerate(ports)]
        for b, w in zip(backends, weights or []):
            b["weight"] = w
        conf = self.base_config(backends, workers=workers, access_log=self.path("access.log"),
                                limits={"queue_length": queue_length},
                                timeouts={"queue": "20s"}, admin="127.0.0.1:0",
                                auth={"keys_file": self.keys_path}, log_level="debug", **extra)
        if scheduling is not None:
            conf["scheduling"] = scheduling
        if tenants is not None:
            conf["tenants"] = tenants
        self.conf = conf
        proc, port = self.start_gateway(conf)
        self.admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        self.sims = ports
        return proc, port

    def hold_slot(self, gw, tokens=60):
        """A stream of the "plain" key that keeps the only slot busy until read."""
        s = self.stream(gw, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=tokens), headers=bearer("plain"))
        self.assertEqual(s.read_head(), 200)
        return s

    def queue(self, gwp, gw, key, content, extra_headers=None, n_before=0):
        """Sends a request and waits until the gateway queued it."""
        h = dict(bearer(key), **(extra_headers or {}))
        n = len(gwp.lines)
        a = Async(gw, chat_body(max_tokens=2, content=content), headers=h)
        gwp.wait_for(r'queued for model "m" behind %d' % n_before, start=n)
        return a

    def log(self, n):
        return harness.read_access_log(self.path("access.log"), n)

    # ---- classes ---------------------------------------------------------------------

    def test_a_higher_class_goes_first(self):
        gwp, gw = self.gateway()
        hold = self.hold_slot(gw)
        b1 = self.queue(gwp, gw, "batch", "batch-1", n_before=0)
        b2 = self.queue(gwp, gw, "batch", "batch-2", n_before=1)
        d1 = self.queue(gwp, gw, "plain", "default-1", n_before=2)
        i1 = self.queue(gwp, gw, "inter", "interactive-1", n_before=3)
        # a header asks for "system", above this key's default: allowed up to max_class
        s1 = self.queue(gwp, gw, "sys", "system-1", {"x-llmgate-priority": "system"}, n_before=4)
        q = json.loads(http_request(self.admin, "GET", "/admin/queues")[2])
        by = q["models"][0]["by_class"]
        self.assertEqual((by["batch"], by["default"], by["interactive"], by["system"]),
                         (2, 1, 1, 1), q)
        hold.read_all()
        for a in (b1, b2, d1, i1, s1):
            self.assertEqual(a.wait()[0], 200)
        log = [r for r in self.log(6) if not r["stream"]]
        order = [r["class"] for r in sorted(log, key=dispatched)]
        self.assertEqual(order, ["system", "interactive", "default", "batch", "batch"], log)
        by_class = {r["class"]: r for r in log}
        self.assertEqual(by_class["interactive"]["tenant"], "chat-team")
        self.assertEqual(by_class["interactive"]["ttft_target"], 2000)
        self.assertGreater(by_class["batch"]["queue_wait"], 50)
        self.assertIsNone(by_class["system"]["shed"])

    def test_a_preempting_engine_takes_a_higher_class_past_max_inflight(self):
        """engine_priority "preempt": there max_inflight bounds a class and those above
        it, so a higher class goes past a lower one's requests at once, and the engine
        (llmsim preempting for priority) gives it their slot; the lowest class still
        counts every request."""
        prio = SLOW + ["--scheduling-policy", "priority", "--priority-preemption-threshold", "0"]
        gwp, gw = self.gateway(sim_args=prio, backend_extra={"priority_field": "vllm",
                                                             "engine_priority": "preempt"})
        # batch holds the only slot: 100 tokens of 20 ms
        b1 = Async(gw, chat_body(max_tokens=100, content="batch-long"), headers=bearer("batch"))
        wait_until(lambda: sim_state(self.sims[0])["running"] == 1, what="batch running")
        # another batch request waits for it in the gateway's queue
        b2 = self.queue(gwp, gw, "batch", "batch-2", n_before=0)
        t0 = time.monotonic()
        status, _, obj, _ = post_json(gw, "/v1/chat/completions",
                                      chat_body(max_tokens=2, content="interactive"),
                                      headers=bearer("inter"))
        took = time.monotonic() - t0
        self.assertEqual(status, 200, obj)
        self.assertLess(took, 1.0)  # batch's answer alone takes 2 s
        self.assertEqual(b1.wait()[0], 200)
        self.assertEqual(b2.wait()[0], 200)
        self.assertGreaterEqual(sim_state(self.sims[0])["preempted"], 1)
        log = self.log(3)
        inter = [r for r in log if r["class"] == "interactive"][0]
        # it found room at once: at most a pass through the queue (batch-2 waits
        # there, and a higher class goes first)
        self.assertLess(inter["queue_wait"] or 0, 100, inter)
        batch = [r for r in log if r["class"] == "batch"]
        self.assertTrue(any(r["queue_wait"] is not None for r in batch), batch)

    def test_a_header_above_max_class_is_clamped_or_refused(self):
        gwp, gw = self.gateway()
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                   headers=dict(bearer("batch"),
                                                **{"x-llmgate-priority": "system"}))
        self.assertEqual(status, 200, obj)
        gwp.wait_for(r'key "batch-team" asked for class system, above its max_class: batch')
        self.assertEqual(self.log(1)[0]["class"], "batch")
        # not a class: 400 naming the header
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                   headers=dict(bearer("plain"), **{"x-llmgate-priority": "vip"}))
        self.assertEqual((status, obj["error"]["code"], obj["error"]["param"]),
                         (400, "invalid_priority", "x-llmgate-priority"), obj)
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                   headers=dict(bearer("plain"),
                                                **{"x-llmgate-ttft-target-ms": "fast"}))
        self.assertEqual((status, obj["error"]["code"]), (400, "invalid_ttft_target"), obj)
        # refused instead, as configured
        self.conf["scheduling"] = {"over_max_class": "refuse"}
        self.write_config(self.conf)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"configuration reloaded", start=n)
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                   headers=dict(bearer("batch"),
                                                **{"x-llmgate-priority": "interactive"}))
        self.assertEqual((status, obj["error"]["code"], obj["error"]["type"]),
                         (403, "priority_not_allowed", "permission_error"), obj)
        # a lower class than the key's is always fine
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                 headers=dict(bearer("inter"), **{"x-llmgate-priority": "batch"}))
        self.assertEqual(status, 200)

    # ---- refusals ----------------------------------------------------------------------

    def test_a_sheddable_class_is_refused_at_once_when_saturated(self):
        gwp, gw = self.gateway(scheduling={"batch": {"sheddable": True}})
        hold = self.hold_slot(gw)
        t0 = time.monotonic()
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                      headers=bearer("batch"))
        self.assertEqual(status, 429, obj)
        self.assertLess(time.monotonic() - t0, 1.0 * harness.SLOW)
        self.assertEqual((obj["error"]["code"], obj["error"]["type"]),
                         ("rate_limit_exceeded", "rate_limit_error"), obj)
        self.assertIn("does not wait", obj["error"]["message"])
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        # a class that waits still waits, and is served
        w = self.queue(gwp, gw, "inter", "waits")
        hold.read_all()
        self.assertEqual(w.wait()[0], 200)
        shed = [r for r in self.log(3) if r["status"] == 429]
        self.assertEqual(len(shed), 1)
        self.assertEqual((shed[0]["shed"], shed[0]["class"], shed[0]["tenant"],
                          shed[0]["error"], shed[0]["backend"]),
                         ("saturated", "batch", "batch-team", "rate_limit_exceeded", None))
        m = scrape(self.admin)
        self.assertEqual(metric(m, "llmgate_sched_refused_total", **{"class": "batch",
                                                                     "reason": "saturated"}), 1)
        self.assertEqual(metric(m, "llmgate_tenant_shed_total", tenant="batch-team",
                                **{"class": "batch"}), 1)
        self.assertEqual(metric(m, "llmgate_tenant_admitted_total", tenant="chat-team",
                                **{"class": "interactive"}), 1)
        q = json.loads(http_request(self.admin, "GET", "/admin/queues")[2])
        batch = [c for c in q["classes"] if c["class"] == "batch"][0]
        self.assertEqual((batch["sheddable"], batch["refused"]["saturated"]), (True, 1), q)

    def test_a_sheddable_class_leaves_its_reserve_to_higher_classes(self):
        args = ["--slots", "4", "--decode-ms", "20", "--decode-ms-per-seq", "0"]
        gwp, gw = self.gateway(scheduling={"batch": {"sheddable": True, "reserve": 0.5}},
                               sim_args=args, max_inflight=4)
        holds = [self.hold_slot(gw) for _ in range(2)]  # 2 of 4 taken: the reserve is left
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                         headers=bearer("batch"))
        self.assertEqual((status, obj["error"]["code"]), (429, "rate_limit_exceeded"), obj)
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        # the reserve is for the higher classes
        for k in ("plain", "inter"):
            status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                        headers=bearer(k))
            self.assertEqual(status, 200)
        for h in holds:
            h.read_all()
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                    headers=bearer("batch"))
        self.assertEqual(status, 200)  # below the reserve again
        shed = [r for r in self.log(None) if r["status"] == 429]
        self.assertEqual([(r["shed"], r["class"]) for r in shed], [("saturated", "batch")])

    def test_a_sheddable_class_goes_where_its_reserve_leaves_it_room(self):
        # least_request, r0 weighted 100: r0 is the first pick while it holds
        # fewer than 100 times r1's requests (share for batch: 4 of 8 each)
        args = ["--slots", "8", "--decode-ms", "20", "--decode-ms-per-seq", "0"]
        gwp, gw = self.gateway(scheduling={"batch": {"sheddable": True, "reserve": 0.5}},
                               sim_args=args, max_inflight=8, sims=2, weights=[100, 1],
                               routing={"policy": "least_request"})
        holds = [self.hold_slot(gw, tokens=400) for _ in range(5)]  # r0 4 (its share), r1 1
        for _ in range(2):
            status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                          headers=bearer("batch"))
            self.assertEqual(status, 200, obj)  # on r1, which has room under the share
        holds += [self.hold_slot(gw, tokens=400) for _ in range(7)]  # r0 full (8), r1 4
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                         headers=bearer("batch"))
        self.assertEqual((status, obj["error"]["code"]), (429, "rate_limit_exceeded"), obj)
        for h in holds:
            h.close()
        batch = [r for r in self.log(None) if r["class"] == "batch"]
        self.assertEqual(sorted((r["status"], r["backend"] or "", r["shed"] or "") for r in batch),
                         [(200, "r1", ""), (200, "r1", ""), (429, "", "saturated")])
        plain = [r["backend"] for r in self.log(None) if r["key"] == "plain"]
        self.assertEqual((plain.count("r0"), plain.count("r1")), (8, 4))

    YIELD_SIM = ["--slots", "4", "--decode-ms", "20", "--decode-ms-per-seq", "0",
                 "--prefill-us-per-token", "3000", "--scheduling-policy", "priority",
                 "--priority-preemption-threshold", "0"]

    def yield_gateway(self, sims):
        return self.gateway(scheduling={"batch": {"sheddable": True, "yield_prefill": True}},
                            sim_args=self.YIELD_SIM, max_inflight=4, sims=sims,
                            weights=[100, 1][:sims], routing={"policy": "least_request"},
                            backend_extra={"priority_field": "vllm",
                                           "engine_priority": "preempt"})

    def long_prefill(self, gw, sim):
        """An interactive stream whose first token takes 1.5 s (some 500 prompt
        tokens of 3 ms), once its prefill runs on the replica at port sim."""
        n = sim_state(sim)["running"]
        s = self.stream(gw, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=4, content="i" * 2000),
                        headers=bearer("inter"))
        self.assertEqual(s.read_head(), 200)
        wait_until(lambda: sim_state(sim)["running"] == n + 1, what="the prefill")
        return s

    def batch(self, gw):
        return post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2, content="b"),
                         headers=bearer("batch"))

    def test_a_yielding_class_stays_off_a_replica_whose_higher_class_awaits_a_first_token(self):
        """yield_prefill on engines that preempt for priority: while an interactive
        request on r0 awaits its first token (a long prompt's prefill), batch goes
        to r1 although r0 is the router's first pick (its prompt would share that
        prefill's step on r0); once the token came, to r0 again."""
        gwp, gw = self.yield_gateway(sims=2)
        # least_request, r0 weighted 100: one stream each, then r0 is the first pick
        holds = [self.hold_slot(gw, tokens=400) for _ in range(2)]
        for h in holds:  # their first tokens came: r1 has nothing of a higher class due
            h.next_event()
        inter = self.long_prefill(gw, self.sims[0])
        self.assertEqual(self.batch(gw)[0], 200)  # r1
        inter.read_all()
        self.assertEqual(self.batch(gw)[0], 200)  # r0
        for h in holds:
            h.close()
        log = self.log(5)
        self.assertEqual(sorted(r["backend"] for r in log if r["key"] == "plain"), ["r0", "r1"])
        self.assertEqual([r["backend"] for r in log if r["class"] == "interactive"], ["r0"])
        self.assertEqual([(r["status"], r["backend"]) for r in log if r["class"] == "batch"],
                         [(200, "r1"), (200, "r0")])

    def test_a_yielding_class_is_refused_where_every_replica_has_a_first_token_due(self):
        gwp, gw = self.yield_gateway(sims=1)
        inter = self.long_prefill(gw, self.sims[0])
        t0 = time.monotonic()
        status, hdrs, obj, _ = self.batch(gw)
        self.assertEqual((status, obj["error"]["code"]), (429, "rate_limit_exceeded"), obj)
        self.assertLess(time.monotonic() - t0, 1.0 * harness.SLOW)  # at once, not after it
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        inter.read_all()
        self.assertEqual(self.batch(gw)[0], 200)
        got = [(r["status"], r["shed"]) for r in self.log(3) if r["class"] == "batch"]
        self.assertEqual(got, [(429, "saturated"), (200, None)])

    def hold_gateway(self, sims, default=None):
        """yield_prefill on the default class (not sheddable): held, not refused."""
        sched = {"batch": {"sheddable": True, "yield_prefill": True},
                 "default": dict({"yield_prefill": True}, **(default or {}))}
        return self.gateway(scheduling=sched, sim_args=self.YIELD_SIM, max_inflight=4,
                            sims=sims, weights=[100, 1][:sims],
                            routing={"policy": "least_request"},
                            backend_extra={"priority_field": "vllm",
                                           "engine_priority": "preempt"})

    def test_a_yielding_class_that_is_not_sheddable_waits_for_the_first_token(self):
        """yield_prefill on a class that is not sheddable: where every replica has an
        interactive request awaiting its first token, a default-class request waits
        in the admission queue (not refused, not sent), and goes as soon as that
        first token came, long before the interactive answer ends."""
        gwp, gw = self.hold_gateway(sims=1)
        n = sim_state(self.sims[0])["requests"]
        inter = self.stream(gw, "POST", "/v1/chat/completions",
                            chat_body(stream=True, max_tokens=200, content="i" * 2000),
                            headers=bearer("inter"))
        self.assertEqual(inter.read_head(), 200)
        wait_until(lambda: sim_state(self.sims[0])["running"] == 1, what="the prefill")
        plain = self.queue(gwp, gw, "plain", "default-1")
        self.assertEqual(sim_state(self.sims[0])["requests"], n + 1)  # held, not sent
        q = json.loads(http_request(self.admin, "GET", "/admin/queues")[2])
        self.assertEqual(q["models"][0]["by_class"]["default"], 1, q)
        inter.next_event()  # its first token: the default request goes now
        status, _, body = plain.wait()
        self.assertEqual(status, 200, body)
        # the interactive answer (200 tokens of 20 ms) still runs
        self.assertEqual(sim_state(self.sims[0])["running"], 1)
        inter.close()
        r = [r for r in self.log(2) if r["class"] == "default"][0]
        self.assertEqual((r["status"], r["shed"], r["backend"]), (200, None, "r0"))
        self.assertGreater(r["queue_wait"], 500)  # the 1.5 s prefill, most of it

    def test_a_yielding_class_that_is_not_sheddable_is_bounded_by_its_queue_deadline(self):
        gwp, gw = self.hold_gateway(sims=1, default={"queue_deadline": "300ms"})
        inter = self.long_prefill(gw, self.sims[0])
        t0 = time.monotonic()
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                         headers=bearer("plain"))
        waited = time.monotonic() - t0
        self.assertEqual((status, obj["error"]["code"]), (429, "rate_limit_exceeded"), obj)
        self.assertIn("queue deadline", obj["error"]["message"])
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        self.assertGreater(waited, 0.25)
        inter.read_all()
        r = [r for r in self.log(2) if r["class"] == "default"][0]
        self.assertEqual((r["shed"], r["backend"]), ("queue_deadline", None))

    def test_a_class_sends_at_most_prompts_per_step_new_prompts_for_an_engine_step(self):
        """prompts_per_step 1 on batch: once a batch request went to the replica since
        its step in progress began (a stream's token marks it: steps of 800 ms here),
        the next is refused (sheddable, one replica) until the engine's next step."""
        args = ["--slots", "4", "--decode-ms", "800", "--decode-ms-per-seq", "0",
                "--prefill-us-per-token", "10", "--scheduling-policy", "priority",
                "--priority-preemption-threshold", "0"]
        gwp, gw = self.gateway(scheduling={"batch": {"sheddable": True, "prompts_per_step": 1}},
                               sim_args=args, max_inflight=4, sims=1,
                               backend_extra={"priority_field": "vllm",
                                              "engine_priority": "preempt"})
        sim = self.sims[0]
        inter = self.stream(gw, "POST", "/v1/chat/completions",
                            chat_body(stream=True, max_tokens=40), headers=bearer("inter"))
        self.assertEqual(inter.read_head(), 200)
        firsts, second = [], None
        for _ in range(5):
            inter.next_event()  # a token: the engine's next step began
            t0 = time.monotonic()
            n = sim_state(sim)["requests"]
            firsts.append(Async(gw, chat_body(max_tokens=3, content="b"), headers=bearer("batch")))
            wait_until(lambda: sim_state(sim)["requests"] == n + 1, what="the first batch sent")
            second = self.batch(gw)
            if time.monotonic() - t0 < 0.6:  # within that step (else try the next one)
                break
        status, hdrs, obj, _ = second
        self.assertEqual((status, obj["error"]["code"]), (429, "rate_limit_exceeded"), obj)
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        for f in firsts:
            self.assertEqual(f.wait()[0], 200)
        inter.next_event()  # a step later: nothing of batch sent since it began
        self.assertEqual(self.batch(gw)[0], 200)
        inter.close()
        shed = [r["shed"] for r in self.log(None) if r["class"] == "batch" and r["status"] == 429]
        self.assertTrue(shed)
        self.assertEqual(set(shed), {"saturated"})

    def test_past_its_class_queue_deadline_a_request_gets_429(self):
        gwp, gw = self.gateway(scheduling={"batch": {"queue_deadline": "400ms"}})
        hold = self.hold_slot(gw, tokens=200)
        t0 = time.monotonic()
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                      headers=bearer("batch"))
        waited = time.monotonic() - t0
        self.assertEqual((status, obj["error"]["code"]), (429, "rate_limit_exceeded"), obj)
        self.assertIn("queue deadline", obj["error"]["message"])
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        self.assertGreater(waited, 0.35)
        self.assertLess(waited, 3.0 * harness.SLOW)
        hold.close()
        r = [r for r in self.log(2) if r["status"] == 429][0]
        self.assertEqual((r["shed"], r["class"]), ("queue_deadline", "batch"))
        self.assertGreater(r["queue_wait"], 350)
        self.assertEqual(sim_state(self.sims[0])["requests"], 1)

    def test_a_sheddable_request_no_replica_can_serve_in_time_is_refused(self):
        # prefill of 40 ms per 1000 tokens: a long prompt's first token is far beyond 20 ms
        args = ["--slots", "4", "--decode-ms", "2", "--decode-ms-per-seq", "0",
                "--prefill-us-per-token", "200"]
        gwp, gw = self.gateway(scheduling={"batch": {"sheddable": True}}, sim_args=args,
                               routing={"policy": "ttft"})
        long_prompt = "lorem ipsum " * 400
        # the router learns the replica's TTFT from answers
        for _ in range(8):
            status, _, _, _ = post_json(gw, "/v1/chat/completions",
                                     chat_body(max_tokens=2, content=long_prompt),
                                     headers=bearer("plain"))
            self.assertEqual(status, 200)

        def refused():
            status, hdrs, obj, _ = post_json(
                gw, "/v1/chat/completions", chat_body(max_tokens=2, content=long_prompt),
                headers=dict(bearer("batch"), **{"x-llmgate-ttft-target-ms": "5"}))
            self.last = (status, hdrs, obj)
            return status == 429
        wait_until(refused, timeout=10, interval=0.1, what="a refusal for the TTFT target")
        status, hdrs, obj = self.last
        self.assertIn("target of 5 ms", obj["error"]["message"])
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        r = [r for r in self.log(None) if r["status"] == 429][-1]
        self.assertEqual((r["shed"], r["ttft_target"], r["backend"]), ("ttft_target", 5, None))
        # a class that is not sheddable goes on, even with a target it will miss
        status, _, _, _ = post_json(gw, "/v1/chat/completions",
                                 chat_body(max_tokens=2, content=long_prompt),
                                 headers=dict(bearer("plain"), **{"x-llmgate-ttft-target-ms": "5"}))
        self.assertEqual(status, 200)

    # ---- fairness ----------------------------------------------------------------------

    def test_a_tenants_flood_does_not_starve_anothers_trickle(self):
        gwp, gw = self.gateway(tenants={"headers": ["x-tenant"]})
        flood = {"x-tenant": "flood"}
        # the flood has been served already: it has attained service
        for _ in range(3):
            status, _, _, _ = post_json(gw, "/v1/chat/completions",
                                     chat_body(max_tokens=4, content="f" * 2000),
                                     headers=dict(bearer("plain"), **flood))
            self.assertEqual(status, 200)
        hold = self.hold_slot(gw)
        waiters = [self.queue(gwp, gw, "plain", "flood-%d" % i, flood, n_before=i)
                   for i in range(4)]
        waiters += [self.queue(gwp, gw, "plain", "trickle-%d" % i, {"x-tenant": "trickle"},
                               n_before=4 + i) for i in range(2)]
        hold.read_all()
        for w in waiters:
            self.assertEqual(w.wait()[0], 200)
        log = [r for r in self.log(10) if not r["stream"] and r["queue_wait"] is not None]
        order = [r["tenant"] for r in sorted(log, key=dispatched)]
        self.assertEqual(order[:2], ["trickle", "trickle"], log)
        q = json.loads(http_request(self.admin, "GET", "/admin/queues")[2])
        t = {x["tenant"]: x for x in q["tenants"]}
        self.assertEqual((t["flood"]["admitted"], t["trickle"]["admitted"]), (7, 2), q)
        self.assertGreater(t["flood"]["service"], t["trickle"]["service"])
        self.assertGreater(t["flood"]["tokens"], 1500)

    def test_first_come_first_served_when_not_fair(self):
        gwp, gw = self.gateway(scheduling={"fair": False, "batch": {"sheddable": True}})
        hold = self.hold_slot(gw)
        b = self.queue(gwp, gw, "batch", "batch-1", n_before=0)  # not shed: classes are off
        i = self.queue(gwp, gw, "inter", "interactive-1", n_before=1)
        hold.read_all()
        self.assertEqual((b.wait()[0], i.wait()[0]), (200, 200))
        log = [r for r in self.log(3) if not r["stream"]]
        self.assertEqual([r["class"] for r in sorted(log, key=dispatched)],
                         ["batch", "interactive"])

    # ---- reload and clients ------------------------------------------------------------

    def test_a_reload_that_changes_classes_loses_no_waiter(self):
        gwp, gw = self.gateway()
        hold = self.hold_slot(gw, tokens=80)
        waiters = []
        for i, k in enumerate(["batch", "plain", "inter", "batch", "plain", "inter"]):
            waiters.append(self.queue(gwp, gw, k, "w-%d" % i, n_before=i))
        # batch-team becomes interactive, batch gets a short queue deadline and turns
        # sheddable: those already waiting keep their place and their class
        self.write_keys(keys_doc(batch_class="interactive"))
        self.conf["scheduling"] = {"batch": {"sheddable": True, "queue_deadline": "15s"},
                                   "interactive": {"ttft_target": "3s"}}
        self.write_config(self.conf)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"configuration reloaded", start=n)
        late = self.queue(gwp, gw, "batch", "late", n_before=6)
        hold.read_all()
        results = [w.wait()[0] for w in waiters] + [late.wait()[0]]
        self.assertEqual(results, [200] * 7)
        log = {r["prompt_bytes"]: r for r in self.log(8) if not r["stream"]}
        late_r = [r for r in self.log(8) if r["status"] == 200 and r["class"] == "interactive"
                  and r["tenant"] == "batch-team"]
        self.assertEqual(len(late_r), 1, log)
        self.assertEqual(late_r[0]["ttft_target"], 3000)

    def test_openai_npm_client_reads_the_429(self):
        node_dir = os.path.join(harness.SRC, "tests", "node")
        if not os.path.isdir(os.path.join(node_dir, "node_modules", "openai")):
            self.fail("the openai npm package is missing: run `npm install` in tests/node")
        self.write_keys({"keys": [
            {"name": "batch-team", "sha256": sha(KEYS["batch"]), "models": "*",
             "class": "batch", "rate": {"requests_per_second": 100, "burst": 10}},
            {"name": "plain", "sha256": sha(KEYS["plain"]), "models": "*"}]})
        gwp, gw = self.gateway(scheduling={"batch": {"sheddable": True}})
        hold = self.hold_slot(gw, tokens=400)
        run = subprocess.run(["node", os.path.join(node_dir, "openai_sched.mjs"),
                              "http://127.0.0.1:%d/v1" % gw, "m"],
                             capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, KEY_BATCH=KEYS["batch"]))
        hold.close()
        self.assertEqual(run.returncode, 0, run.stderr)
        out = json.loads(run.stdout.strip().splitlines()[-1])
        shed = out["shed"]
        self.assertEqual((shed["status"], shed["code"], shed["type"], shed["name"]),
                         (429, "rate_limit_exceeded", "rate_limit_error", "RateLimitError"), shed)
        self.assertGreaterEqual(int(shed["headers"]["retry-after"]), 1)
        self.assertEqual(shed["headers"]["limit-requests"], "10")
        # refused at once (the client's own clock counts its first request's start-up too)
        refused = [r for r in self.log(None) if r["status"] == 429]
        self.assertEqual(refused[0]["shed"], "saturated")
        self.assertLess(refused[0]["total"], 500)
        # with retries, the client waits as told and gets in once the slot is free
        self.assertEqual(out["retried"]["status"], 200, out)

    # ---- token budgets per tenant ------------------------------------------------------

    def test_a_tenant_named_by_a_header_has_its_own_token_budget(self):
        gwp, gw = self.gateway(tenants={"headers": ["x-tenant"],
                                        "budget": {"tokens_per_day": 300}},
                               sim_args=["--decode-ms", "1", "--decode-ms-per-seq", "0"])
        prompt = "x" * 400  # 100 tokens as the gateway estimates them
        a = dict(bearer("plain"), **{"x-tenant": "agent-1"})
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions",
                                         chat_body(max_tokens=50, content=prompt), headers=a)
        self.assertEqual(status, 200, obj)
        # reserved 150 of 300 (the key has no budget: the tenant's is the one told)
        self.assertEqual(hdrs["x-ratelimit-limit-tokens"], "300")
        self.assertEqual(hdrs["x-ratelimit-remaining-tokens"], "150")
        used = obj["usage"]["prompt_tokens"] + obj["usage"]["completion_tokens"]
        # what is left cannot hold 100 + 250: refused, until the day ends
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions",
                                         chat_body(max_tokens=250, content=prompt), headers=a)
        self.assertEqual((status, obj["error"]["code"]), (429, "rate_limit_exceeded"), obj)
        self.assertIn('for tenant "agent-1"', obj["error"]["message"])
        self.assertEqual(hdrs["x-ratelimit-remaining-tokens"], str(300 - used))
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        # another tenant of the same key has its own budget; the key alone has none
        status, _, _, _ = post_json(gw, "/v1/chat/completions",
                                    chat_body(max_tokens=150, content=prompt),
                                    headers=dict(bearer("plain"), **{"x-tenant": "agent-2"}))
        self.assertEqual(status, 200)
        status, hdrs, _, _ = post_json(gw, "/v1/chat/completions",
                                       chat_body(max_tokens=500, content=prompt),
                                       headers=bearer("plain"))
        self.assertEqual(status, 200)
        self.assertNotIn("x-ratelimit-limit-tokens", hdrs)


class PriorityFieldTest(Harness):
    """A backend with priority_field "vllm" gets the class in the body's "priority"."""

    quiet_backends = True

    def proxied(self, scheduling=None, name="r1"):
        """One replica behind a RecordingProxy, one gateway with keys: (the proxy, its port)."""
        _, sim = self.start_llmsim(name)
        rec = harness.RecordingProxy(sim)
        self.addCleanup(rec.close)
        keys = self.path("keys.json")
        with open(keys, "w") as f:
            json.dump(keys_doc(), f)
        conf = self.base_config([{"name": name, "url": "http://127.0.0.1:%d" % rec.port,
                                  "models": ["m"], "priority_field": "vllm"}],
                                workers=1, auth={"keys_file": keys})
        if scheduling is not None:
            conf["scheduling"] = scheduling
        _, gw = self.start_gateway(conf, name="llmgate-" + name)
        return rec, gw

    def test_the_class_goes_to_the_engine_as_vllm_priority(self):
        rec, gw = self.proxied()
        sent = []
        for key, hdr in (("inter", None), ("batch", None), ("plain", None),
                         ("sys", "system")):
            h = dict(bearer(key), **({"x-llmgate-priority": hdr} if hdr else {}))
            body = chat_body(max_tokens=1)
            body["priority"] = 7 if key == "plain" else None
            if key != "plain":
                del body["priority"]
            status, _, obj, _ = post_json(gw, "/v1/chat/completions", body, headers=h)
            self.assertEqual(status, 200, obj)
            sent.append(key)
        raw = b"".join(bytes(d) for d in rec.downstream)
        bodies = []
        for part in raw.split(b"POST /v1/chat/completions HTTP/1.1\r\n")[1:]:
            head, _, rest = part.partition(b"\r\n\r\n")
            length = int([l for l in head.split(b"\r\n")
                          if l.lower().startswith(b"content-length:")][0].split(b":")[1])
            bodies.append(json.loads(rest[:length]))  # the length covers the new field
        self.assertEqual(len(bodies), 4, raw)
        self.assertEqual([b["priority"] for b in bodies], [-1, 1, 7, -2])
        self.assertTrue(all(b["model"] == "m" for b in bodies))

    def one_request_upstream(self, scheduling, name, headers):
        """The head (lower-cased) and body a replica got for one request with these headers."""
        rec, gw = self.proxied(scheduling, name)
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                      headers=dict(bearer("sys"), **headers))
        self.assertEqual(status, 200, obj)
        raw = b"".join(bytes(d) for d in rec.downstream)
        head, _, rest = raw.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n"), raw)
        return head.lower().decode() + "\r\n", json.loads(rest)

    def test_the_scheduling_headers_stay_in_the_gateway(self):
        """The class and TTFT target headers steer the gateway's queue; no engine gets them."""
        for name, sched, prio, ttft in (
                ("r1", None, "X-LLMGate-Priority", "x-llmgate-ttft-target-ms"),
                ("r2", {"priority_header": "x-tier", "ttft_header": "X-Ttft"}, "X-Tier", "x-ttft")):
            # other names of the same lengths go on
            others = {"x-llmgate-priorit0": "1", "x-llmgate-ttft-target-m0": "2",
                      "x-tie0": "3", "x-ttf0": "4"}
            head, body = self.one_request_upstream(sched, name,
                                                   dict({prio: "system", ttft: "5000"}, **others))
            self.assertNotIn("\r\n%s:" % prio.lower(), head)
            self.assertNotIn("\r\n%s:" % ttft.lower(), head)
            for name, value in others.items():
                self.assertIn("\r\n%s: %s\r\n" % (name, value), head)
            # read all the same: the class reached the engine as vllm's priority
            self.assertEqual(body["priority"], -2)


if __name__ == "__main__":
    harness.main()
