"""Scale from zero: a request for a model with no replica ready is held
(scale_from_zero: bounded per model in count and time) instead of a 503; the
wake-up webhook is called once per cold period; llmgate_requests_held says
how many wait (what KEDA's Prometheus scaler reads); the held requests run
in arrival order once a replica is ready (its health check passes, or DNS
discovery adds it); past the hold, or with the hold full, 503 with
Retry-After and a reason. A client that leaves while held is forgotten.

The replicas start late: the gateway's backend is a loopback port where
nothing listens yet, and llmsim is started on that port after the requests
are held.
"""

import datetime
import http.server
import json
import os
import signal
import subprocess
import threading
import time
import unittest

import harness
import test_discovery
from harness import (Harness, chat_body, free_port, http_request, metric, post_json, scrape,
                     wait_until)

FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "1"]
NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "node")


class Webhook:
    """A small HTTP receiver that records the wake-up calls (path, JSON body)."""

    def __init__(self, status=200):
        calls = self.calls = []
        self.lock = threading.Lock()
        lock = self.lock

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                with lock:
                    calls.append((self.path, self.headers.get("Content-Type"),
                                  json.loads(body)))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def seen(self):
        with self.lock:
            return list(self.calls)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Async:
    """A request run in a thread; .result is (status, headers, body)."""

    def __init__(self, port, body, timeout=60, headers=None):
        self.result = None
        self.t = threading.Thread(target=self._run, args=(port, body, timeout, headers),
                                  daemon=True)
        self.t.start()

    def _run(self, port, body, timeout, headers):
        try:
            self.result = post_json(port, "/v1/chat/completions", body, headers=headers,
                                    timeout=timeout)[:3]
        except OSError as e:
            self.result = (None, {}, repr(e))

    def wait(self, timeout=60):
        self.t.join(timeout)
        assert self.result is not None, "request still running"
        return self.result


def held(admin, model="m"):
    return metric(scrape(admin), "llmgate_requests_held", model=model)


class ScaleFromZeroTest(Harness):

    def setUp(self):
        super().setUp()
        self.hook = Webhook()
        self.addCleanup(self.hook.close)

    def gateway(self, sfz, backends=None, max_inflight=0, **extra):
        """A gateway over one replica not started yet (self.sim_port); waits
        until its health check marked it down."""
        self.sim_port = free_port()
        if backends is None:
            backends = [{"name": "r1", "url": "http://127.0.0.1:%d" % self.sim_port,
                         "models": ["m"], "max_inflight": max_inflight}]
        extra.setdefault("health", {"interval": "100ms", "timeout": "500ms", "rise": 1,
                                    "fall": 1, "scrape_interval": 0, "slow_start": 0})
        conf = self.base_config(backends, admin="127.0.0.1:0", log_level="debug",
                                access_log=self.path("access.log"), **extra)
        if sfz is not None:
            sfz.setdefault("webhook", "http://127.0.0.1:%d/wake?fleet=a" % self.hook.port)
            conf["scale_from_zero"] = sfz
        self.gw, port = self.start_gateway(conf)
        self.admin = int(self.gw.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return port

    def await_down(self):
        self.gw.wait_for(r"backend r1 is down")

    def start_replica(self):
        p = self.start([harness.binary("llmsim"), "--listen", "127.0.0.1:%d" % self.sim_port,
                        "--name", "r1", "--model", "m"] + FAST, name="llmsim-r1")
        p.wait_for(r"llmsim ready")
        return p

    def test_off_by_default_503_at_once(self):
        port = self.gateway(None)
        self.await_down()
        t0 = time.monotonic()
        status, hdrs, obj, _ = post_json(port, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 503, obj)
        self.assertEqual(obj["error"]["code"], "no_backend_available")
        self.assertLess(time.monotonic() - t0, 1.0 * harness.SLOW)
        self.assertIsNone(metric(scrape(self.admin), "llmgate_requests_held", model="m"))
        self.assertEqual(self.hook.seen(), [])

    def test_held_then_released_in_order_when_the_replica_is_ready(self):
        # one at a time on the replica: the order they reach it is the order they leave the hold
        port = self.gateway({"enabled": True, "max_held": 10, "hold": "60s"}, max_inflight=1)
        self.await_down()
        # three held requests, in a known order (each after the gateway held the one before)
        reqs = []
        for i, content in enumerate(["a", "bb", "ccc"]):
            reqs.append(Async(port, chat_body(max_tokens=3, content=content)))
            self.gw.wait_for(r'held for model "m" behind %d' % i)
        # a fourth through the openai npm client, held behind them
        node = None
        if os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")):
            node = subprocess.Popen(["node", os.path.join(NODE_DIR, "openai_client.mjs"),
                                     "http://127.0.0.1:%d/v1" % port, "m"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.addCleanup(lambda: node.poll() is None and node.kill())
            self.gw.wait_for(r'held for model "m" behind 3')
        n = 4 if node else 3
        wait_until(lambda: held(self.admin) == n, what="%d requests held" % n)
        # the wake-up: exactly one call for the cold period, whatever the held count
        wait_until(lambda: len(self.hook.seen()) >= 1, what="the webhook called")
        time.sleep(0.3)  # a second call, were there one, would be on its way by now
        calls = self.hook.seen()
        self.assertEqual(len(calls), 1, calls)
        path, ctype, body = calls[0]
        self.assertEqual((path, ctype), ("/wake?fleet=a", "application/json"))
        self.assertEqual((body["model"], body["held"]), ("m", 1))
        m = scrape(self.admin)
        self.assertEqual(metric(m, "llmgate_wakeups_total", model="m"), 1)
        self.assertEqual(metric(m, "llmgate_queue_waiting"), n)
        # nothing answered yet
        self.assertTrue(all(r.result is None for r in reqs))
        # the replica comes up: its health check passes, the held requests run
        self.start_replica()
        self.gw.wait_for(r"backend r1 is up")
        results = [r.wait() for r in reqs]
        self.assertEqual([r[0] for r in results], [200, 200, 200], results)
        if node:
            out, err = node.communicate(timeout=60)
            self.assertEqual(node.returncode, 0, err)
            summary = json.loads(out)
            self.assertEqual(summary["plain"]["finish_reason"], "length", summary)
        wait_until(lambda: held(self.admin) == 0, what="nothing held")
        self.assertEqual(len(self.hook.seen()), 1)
        # the order they came in: dispatched (arrival + read + queue), told apart by prompt size
        log = [r for r in harness.read_access_log(self.path("access.log"), n + (1 if node else 0))
               if r["status"] == 200 and not r["stream"]]
        def dispatched(r):
            t = datetime.datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).timestamp()
            return t * 1000 + r["read"] + r["queue"]
        ours = sorted([r for r in log if r["queue"] > 100], key=dispatched)
        sizes = [r["prompt_bytes"] for r in ours]
        self.assertEqual(sizes, [1, 2, 3, 14] if node else [1, 2, 3], ours)
        # a replica is ready: a new request is not held
        status, _, _, _ = post_json(port, "/v1/chat/completions", chat_body())
        self.assertEqual(status, 200)
        self.gw.signal(signal.SIGTERM)
        self.assertEqual(self.gw.wait(30), 0)

    def test_held_requests_go_by_arrival_whatever_their_class(self):
        # the scheduler orders the waiters of a busy replica by class; requests held for a
        # replica go by arrival, a sheddable class's too (it is held, not refused)
        port = self.gateway({"enabled": True, "max_held": 10, "hold": "60s"}, max_inflight=1,
                            scheduling={"batch": {"sheddable": True}})
        self.await_down()
        reqs = []
        for i, (content, cls) in enumerate([("a", "batch"), ("bb", "interactive"),
                                            ("ccc", "default"), ("dddd", "batch")]):
            reqs.append(Async(port, chat_body(max_tokens=3, content=content),
                              headers={"x-llmgate-priority": cls}))
            self.gw.wait_for(r'held for model "m" behind %d' % i)
        wait_until(lambda: held(self.admin) == 4, what="4 requests held")
        q = json.loads(http_request(self.admin, "GET", "/admin/queues")[2])
        by = q["models"][0]["by_class"]
        self.assertEqual((by["batch"], by["default"], by["interactive"], by["system"]),
                         (2, 1, 1, 0), q)
        m = scrape(self.admin)
        self.assertEqual(metric(m, "llmgate_sched_queued", **{"class": "batch"}), 2)
        self.assertEqual(metric(m, "llmgate_sched_refused_total",
                                **{"class": "batch", "reason": "saturated"}), 0)
        self.start_replica()
        self.gw.wait_for(r"backend r1 is up")
        results = [r.wait() for r in reqs]
        self.assertEqual([r[0] for r in results], [200] * 4, results)
        wait_until(lambda: held(self.admin) == 0, what="nothing held")
        log = [r for r in harness.read_access_log(self.path("access.log"), 4)
               if r["status"] == 200]
        def dispatched(r):
            t = datetime.datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).timestamp()
            return t * 1000 + r["read"] + r["queue"]
        ours = sorted(log, key=dispatched)
        self.assertEqual([(r["prompt_bytes"], r["class"]) for r in ours],
                         [(1, "batch"), (2, "interactive"), (3, "default"), (4, "batch")], ours)
        self.assertTrue(all(r["queue_wait"] > 0 and r["shed"] is None for r in ours), ours)

    def test_hold_deadline_gives_503_with_retry_after(self):
        port = self.gateway({"enabled": True, "hold": "600ms", "retry_after": "7s"})
        self.await_down()
        t0 = time.monotonic()
        status, hdrs, obj, _ = post_json(port, "/v1/chat/completions", chat_body())
        waited = time.monotonic() - t0
        self.assertEqual(status, 503, obj)
        self.assertEqual(obj["error"]["code"], "no_replica_ready")
        self.assertEqual(hdrs["retry-after"], "7")
        self.assertGreater(waited, 0.55)
        self.assertLess(waited, 3.0 * harness.SLOW)
        m = scrape(self.admin)
        self.assertEqual(metric(m, "llmgate_held_refused_total", model="m", reason="deadline"), 1)
        self.assertEqual(metric(m, "llmgate_requests_held", model="m"), 0)
        wait_until(lambda: len(self.hook.seen()) == 1, what="the webhook called")

    def test_full_hold_503_at_once_and_a_client_that_leaves_is_forgotten(self):
        port = self.gateway({"enabled": True, "max_held": 1, "hold": "30s", "retry_after": "5s",
                             "models": [{"model": "other", "enabled": False}]})
        self.await_down()
        s = self.stream(port, "POST", "/v1/chat/completions", chat_body())
        wait_until(lambda: held(self.admin) == 1, what="one request held")
        t0 = time.monotonic()
        status, hdrs, obj, _ = post_json(port, "/v1/chat/completions", chat_body())
        self.assertLess(time.monotonic() - t0, 1.0 * harness.SLOW)
        self.assertEqual(status, 503, obj)
        self.assertEqual(obj["error"]["code"], "model_scaled_to_zero")
        self.assertEqual(hdrs["retry-after"], "5")
        self.assertEqual(metric(scrape(self.admin), "llmgate_held_refused_total", model="m",
                                reason="full"), 1)
        # the held client leaves: the gauge goes down, nothing stays behind
        s.close()
        wait_until(lambda: held(self.admin) == 0, what="the held request forgotten")
        self.assertEqual(metric(scrape(self.admin), "llmgate_queue_waiting"), 0)
        self.assertEqual(len(self.hook.seen()), 1)
        self.gw.signal(signal.SIGTERM)
        self.assertEqual(self.gw.wait(30), 0)

    def test_failing_webhook_is_logged_and_counted(self):
        port = self.gateway({"enabled": True, "hold": "500ms",
                             "webhook": "http://127.0.0.1:%d/wake" % self.refusing_port(),
                             "webhook_timeout": "300ms"})
        self.await_down()
        status, _, obj, _ = post_json(port, "/v1/chat/completions", chat_body())
        self.assertEqual((status, obj["error"]["code"]), (503, "no_replica_ready"))
        self.gw.wait_for(r"wake-up webhook .* for model \"m\" failed")
        wait_until(lambda: metric(scrape(self.admin), "llmgate_wakeup_failures_total") == 1,
                   what="the failure counted")


@unittest.skipIf(test_discovery.dnsmasq_binary() is None,
                 "dnsmasq is not installed (apt-get install dnsmasq-base; tools/install-deps.sh)")
class ScaleFromZeroDiscoveryTest(Harness):
    """No replica registered yet: DNS has no record for the template's name;
    the held request runs once discovery adds one."""

    def set_records(self, addrs):
        tmp = self.hosts + ".tmp"
        with open(tmp, "w") as f:
            for a in addrs:
                f.write("%s vllm.test\n" % a)
        os.replace(tmp, self.hosts)

    def test_held_until_discovery_adds_a_replica(self):
        self.hosts = self.path("hosts")
        self.set_records([])
        dns_port = test_discovery.free_udp_tcp_port()
        dns = self.start([test_discovery.dnsmasq_binary(), "--no-daemon", "--conf-file=/dev/null",
                          "--port=%d" % dns_port, "--listen-address=127.0.0.1",
                          "--bind-interfaces", "--no-resolv", "--no-hosts",
                          "--addn-hosts=" + self.hosts, "--local=/test/", "--user=root",
                          "--pid-file=", "--log-facility=-"], name="dnsmasq")
        dns.wait_for(r"read .*hosts - 0 names")
        sim = self.start([harness.binary("llmsim"), "--listen", "127.0.0.2:0", "--name", "r2",
                          "--model", "m"] + FAST, name="llmsim-r2")
        sim_port = int(sim.wait_for(r"llmsim ready .*listen=[^ ]*:(\d+)").group(1))
        hook = Webhook()
        self.addCleanup(hook.close)
        conf = self.base_config(
            [{"name": "vllm", "discover": {"dns": "vllm.test", "port": sim_port,
                                           "interval": "200ms"}, "models": ["m"]}],
            discovery={"nameserver": "127.0.0.1:%d" % dns_port, "timeout": "300ms"},
            health={"slow_start": 0}, admin="127.0.0.1:0", log_level="debug",
            scale_from_zero={"enabled": True, "hold": "30s",
                             "webhook": "http://127.0.0.1:%d/wake" % hook.port})
        gw, port = self.start_gateway(conf)
        admin = int(gw.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        gw.wait_for(r"discovery: vllm\.test port %d: 0 addresses" % sim_port)
        reqs = [Async(port, chat_body(max_tokens=2)) for _ in range(2)]
        wait_until(lambda: held(admin) == 2, what="two requests held")
        wait_until(lambda: len(hook.seen()) == 1, what="the webhook called")
        self.assertEqual(hook.seen()[0][2]["model"], "m")
        mark = len(gw.lines)
        self.set_records(["127.0.0.2"])
        dns.signal(signal.SIGHUP)
        gw.wait_for(r"fleet \(discovery\): 1 backend", start=mark)
        for r in reqs:
            status, hdrs, _ = r.wait()
            self.assertEqual((status, hdrs.get("x-llmsim-replica")), (200, "r2"))
        wait_until(lambda: held(admin) == 0, what="nothing held")
        self.assertEqual(len(hook.seen()), 1)
        gw.signal(signal.SIGTERM)
        self.assertEqual(gw.wait(30), 0)


if __name__ == "__main__":
    harness.main()
