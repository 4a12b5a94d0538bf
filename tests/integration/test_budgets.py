"""Token budgets per key: a request reserves its prompt's estimate and its
max_tokens at admission, settles on the engine's usage (or the content events
of a stream that did not ask for usage), gives back the rest when it ends,
fails, or its client leaves; refusals are 429 rate_limit_exceeded with
Retry-After and the x-ratelimit-* headers (also on answers); budgets hold
across the workers and through a reload, and across two gateways through a
real redis-server; Redis down or stopped never delays a request (failing open
or closed, as configured, and the log says which).
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import unittest

import harness
from harness import Harness, chat_body, free_port, http_request, post_json, sse_events, wait_until

FAST = ["--decode-ms", "1", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "1"]
SLOW = ["--decode-ms", "25", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "1"]

KEY_A = "sk-budget-a-0123456789"
KEY_B = "sk-budget-b-abcdefghij"
KEY_FREE = "sk-free-zyxwvutsrq"
PROMPT = "x" * 400          # 100 tokens as the gateway estimates (4 bytes each), and llmsim
PROMPT_TOKENS = 100


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


def bearer(key):
    return {"Authorization": "Bearer " + key}


def keys_doc(day_a=100000, minute_a=None, day_b=None):
    a = {"name": "team-a", "sha256": sha(KEY_A), "models": "*",
         "rate": {"requests_per_second": 1000, "burst": 50},
         "budget": {"tokens_per_day": day_a}}
    if minute_a:
        a["budget"]["tokens_per_minute"] = minute_a
    keys = [a, {"name": "free", "sha256": sha(KEY_FREE), "models": "*"}]
    if day_b:
        keys.append({"name": "team-b", "sha256": sha(KEY_B), "models": "*",
                     "budget": {"tokens_per_day": day_b}})
    return {"keys": keys}


def budget_of(admin, key="team-a"):
    status, _, data = http_request(admin, "GET", "/admin/budgets")
    assert status == 200, (status, data)
    doc = json.loads(data)
    for k in doc["keys"]:
        if k["key"] == key:
            k["store"] = doc["store"]
            return k
    raise AssertionError("no budget for %s in %s" % (key, doc))


def content_events(body):
    n = 0
    for ev in sse_events(body):
        if ev == "[DONE]":
            continue
        choices = json.loads(ev).get("choices") or []
        if choices and (choices[0].get("delta") or {}).get("content"):
            n += 1
    return n


def seconds_left_in_window(length):
    return length - time.time() % length


def away_from_day_end():
    """The day's window (UTC) must not end during a test that counts in it."""
    left = seconds_left_in_window(86400)
    if left < 120:
        time.sleep(left + 0.5)  # a wall-clock boundary, not a synchronization


class RedisServer:
    """A real redis-server on a loopback port, ready once it says so."""

    def __init__(self, test, port=None):
        self.test = test
        for _ in range(5):
            self.port = port or free_port()
            d = test.path("redis-%d" % self.port)
            os.makedirs(d, exist_ok=True)
            self.proc = test.start(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                    "--save", "", "--appendonly", "no", "--dir", d,
                                    "--loglevel", "notice"], name="redis-%d" % self.port)
            try:
                self.proc.wait_for(r"Ready to accept connections", timeout=15)
                return
            except AssertionError:
                if port is not None:
                    raise
                self.proc.kill()  # the port was taken meanwhile: another one

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port)] + list(args),
                              capture_output=True, text=True, timeout=10).stdout.strip()

    def stop(self):
        self.proc.kill()


@unittest.skipUnless(shutil.which("redis-server") and shutil.which("redis-cli"),
                     "redis-server is not installed (tools/install-deps.sh)")
class BudgetTest(Harness):

    def setUp(self):
        super().setUp()
        away_from_day_end()
        self.keys_path = self.path("keys.json")
        self.write_keys(keys_doc())

    def write_keys(self, obj):
        with open(self.keys_path + ".tmp", "w") as f:
            json.dump(obj, f, indent=2)
        os.rename(self.keys_path + ".tmp", self.keys_path)

    def gateway(self, args=FAST, redis=None, backends=None, name="llmgate", **extra):
        if backends is None:
            _, sim = self.start_llmsim("r-" + name, models=["m"], args=args)
            backends = [{"name": "r1", "url": "http://127.0.0.1:%d" % sim, "models": ["m"]}]
        budgets = extra.pop("budgets", {})
        if redis is not None:
            budgets["redis"] = dict({"address": "127.0.0.1:%d" % redis, "sync_interval": "50ms",
                                     "timeout": "300ms"}, **budgets.get("redis", {}))
        conf = self.base_config(backends, admin="127.0.0.1:0", auth={"keys_file": self.keys_path},
                                access_log=self.path(name + ".log"), budgets=budgets, **extra)
        p, port = self.start_gateway(conf, name=name)
        admin = int(p.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        return p, port, admin

    def post(self, port, key=KEY_A, **kw):
        kw.setdefault("content", PROMPT)
        return post_json(port, "/v1/chat/completions", chat_body(**kw), headers=bearer(key))

    # ---- one gateway -------------------------------------------------------------------

    def test_reserve_then_settle_on_usage_and_the_headers(self):
        _, port, admin = self.gateway()
        before = budget_of(admin)
        self.assertEqual((before["day"]["limit"], before["day"]["used"], before["reserved"]),
                         (100000, 0, 0))
        status, hdrs, obj, _ = self.post(port, max_tokens=50)
        self.assertEqual(status, 200, obj)
        # the answer says what was left once its estimate was reserved
        self.assertEqual(hdrs["x-ratelimit-limit-tokens"], "100000")
        self.assertEqual(int(hdrs["x-ratelimit-remaining-tokens"]), 100000 - PROMPT_TOKENS - 50)
        self.assertRegex(hdrs["x-ratelimit-reset-tokens"], r"^(\d+h)?(\d+m)?\d+(\.\d+)?s$")
        self.assertEqual(hdrs["x-ratelimit-limit-requests"], "50")
        self.assertEqual(hdrs["x-ratelimit-remaining-requests"], "49")
        self.assertRegex(hdrs["x-ratelimit-reset-requests"], r"^\d+ms$")
        used = obj["usage"]["prompt_tokens"] + obj["usage"]["completion_tokens"]
        self.assertEqual(obj["usage"]["prompt_tokens"], PROMPT_TOKENS)
        after = budget_of(admin)
        # charged what the engine said it used; the reservation came back
        self.assertEqual((after["day"]["used"], after["reserved"]), (used, 0))
        # a key without limits gets no x-ratelimit headers
        status, hdrs, _, _ = self.post(port, key=KEY_FREE, max_tokens=5)
        self.assertEqual(status, 200)
        self.assertFalse([h for h in hdrs if h.startswith("x-ratelimit")], hdrs)

    def test_streams_settle_on_usage_or_on_their_events(self):
        _, port, admin = self.gateway()
        # a stream that asked for usage: charged it
        s = self.stream(port, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=30, content=PROMPT,
                                  stream_options={"include_usage": True}),
                        headers=bearer(KEY_A)).read_all()
        self.assertEqual(s.status, 200)
        self.assertEqual(int(s.headers["x-ratelimit-remaining-tokens"]), 100000 - PROMPT_TOKENS - 30)
        usage = [json.loads(e)["usage"] for e in sse_events(s.body)
                 if e != "[DONE]" and json.loads(e).get("usage")][-1]
        wait_until(lambda: budget_of(admin)["reserved"] == 0, what="the stream to settle")
        first = budget_of(admin)["day"]["used"]
        self.assertEqual(first, usage["total_tokens"])
        # a stream that did not: charged its prompt's estimate and its content events, and the
        # client saw no usage added to its stream
        s = self.stream(port, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=20, content=PROMPT),
                        headers=bearer(KEY_A)).read_all()
        self.assertEqual(s.status, 200)
        self.assertNotIn(b'"usage"', s.body)
        events = content_events(s.body)
        self.assertEqual(events, 20)
        wait_until(lambda: budget_of(admin)["reserved"] == 0, what="the stream to settle")
        self.assertEqual(budget_of(admin)["day"]["used"] - first, PROMPT_TOKENS + events)

    def test_a_client_that_leaves_and_a_failure_give_back_what_was_not_used(self):
        _, port, admin = self.gateway(args=SLOW)
        s = self.stream(port, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=2000, content=PROMPT),
                        headers=bearer(KEY_A))
        self.assertEqual(s.read_head(), 200)
        got = 0
        while got < 3:
            ev = s.next_event()
            if ev and ev[1] != "[DONE]" and (json.loads(ev[1])["choices"][0].get("delta") or {}).get(
                    "content"):
                got += 1
        self.assertEqual(budget_of(admin)["reserved"], PROMPT_TOKENS + 2000)
        s.close()
        wait_until(lambda: budget_of(admin)["reserved"] == 0, what="the reservation to come back")
        used = budget_of(admin)["day"]["used"]
        # the prompt and the events relayed before it left (a few more may have been on their way)
        self.assertGreaterEqual(used, PROMPT_TOKENS + 3)
        self.assertLess(used, PROMPT_TOKENS + 200)
        # a request that fails before any answer is charged nothing
        down = self.refusing_port()
        _, port2, admin2 = self.gateway(name="gw-down", backends=[
            {"name": "down", "url": "http://127.0.0.1:%d" % down, "models": ["m"]}],
            routing={"policy": "round_robin", "retry": {"attempts": 1}})
        status, hdrs, obj, _ = self.post(port2, max_tokens=100)
        self.assertGreaterEqual(status, 500, obj)
        b = budget_of(admin2)
        self.assertEqual((b["reserved"], b["day"]["used"]), (0, 0))

    def test_refusals_say_when_and_how_much(self):
        self.write_keys(keys_doc(day_a=1000))
        _, port, admin = self.gateway(args=SLOW)
        # 100 + 400 reserved while the stream runs (10 s); 150 more fit and are used; 500 more
        # do not fit now, but will once the stream gives back what it does not use
        s = self.stream(port, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=400, content=PROMPT),
                        headers=bearer(KEY_A))
        self.assertEqual(s.read_head(), 200)
        status, _, _, _ = self.post(port, max_tokens=50)
        self.assertEqual(status, 200)
        status, hdrs, obj, _ = self.post(port, max_tokens=400)
        self.assertEqual(status, 429, obj)
        self.assertEqual(obj["error"]["code"], "rate_limit_exceeded")
        self.assertEqual(obj["error"]["type"], "rate_limit_error")
        self.assertIn("Limit 1000", obj["error"]["message"])
        self.assertIn("tokens per day (TPD)", obj["error"]["message"])
        # only the running stream's reservation holds the room: try again in a second
        self.assertEqual(hdrs["retry-after"], "1")
        self.assertEqual(hdrs["x-ratelimit-limit-tokens"], "1000")
        self.assertEqual(hdrs["x-ratelimit-remaining-tokens"], "350")
        self.assertIn("Used 650, Requested 500", obj["error"]["message"])
        self.assertNotIn("x-should-retry", hdrs)
        # larger than the whole limit: refused for good, and the client is told not to retry
        status, hdrs, obj, _ = self.post(port, max_tokens=5000)
        self.assertEqual(status, 429)
        self.assertEqual(hdrs["x-should-retry"], "false")
        self.assertIn("Request too large", obj["error"]["message"])
        s.close()
        wait_until(lambda: budget_of(admin)["reserved"] == 0, what="the stream to settle")
        self.assertEqual(budget_of(admin)["refused_total"], 2)
        # another key is not affected
        status, _, _, _ = self.post(port, key=KEY_FREE, max_tokens=5)
        self.assertEqual(status, 200)

    def test_minute_windows_and_the_reset_header(self):
        if seconds_left_in_window(60) < 25:
            time.sleep(seconds_left_in_window(60) + 0.2)  # a wall-clock boundary
        self.write_keys(keys_doc(minute_a=300))
        _, port, admin = self.gateway()
        status, hdrs, obj, _ = self.post(port, max_tokens=150)
        self.assertEqual(status, 200, obj)
        status, hdrs, obj, _ = self.post(port, max_tokens=150)
        self.assertEqual(status, 429, obj)
        self.assertIn("tokens per min (TPM)", obj["error"]["message"])
        left = seconds_left_in_window(60)
        # the minute's charged tokens hold the room until the minute ends
        self.assertAlmostEqual(int(hdrs["retry-after"]), left, delta=2)
        reset = hdrs["x-ratelimit-reset-tokens"]
        self.assertRegex(reset, r"^\d+(\.\d+)?s$")
        self.assertAlmostEqual(float(reset[:-1]), left, delta=2)
        b = budget_of(admin)
        self.assertEqual(b["minute"]["limit"], 300)
        self.assertEqual(b["minute"]["used"], b["day"]["used"])

    def test_workers_share_one_budget(self):
        """Concurrent requests on two workers: exactly as many as the budget holds get in."""
        self.write_keys(keys_doc(day_a=1050))
        _, port, admin = self.gateway(args=SLOW)
        streams = [self.stream(port, "POST", "/v1/chat/completions",
                               chat_body(stream=True, max_tokens=100, content=PROMPT),
                               headers=bearer(KEY_A)) for _ in range(12)]
        statuses = [s.read_head() for s in streams]
        # each reserves 200: 5 fit in 1050
        self.assertEqual(sorted(statuses), [200] * 5 + [429] * 7)
        self.assertEqual(budget_of(admin)["reserved"], 1000)
        for s in streams:
            if s.status == 200:
                s.read_all()
        wait_until(lambda: budget_of(admin)["reserved"] == 0, what="the streams to settle")
        self.assertEqual(budget_of(admin)["day"]["used"], 5 * (PROMPT_TOKENS + 100))

    def test_a_reload_keeps_what_was_counted(self):
        self.write_keys(keys_doc(day_a=1000))
        gwp, port, admin = self.gateway()
        status, _, obj, _ = self.post(port, max_tokens=300)
        self.assertEqual(status, 200, obj)
        used = budget_of(admin)["day"]["used"]
        self.assertEqual(used, PROMPT_TOKENS + 300)
        # a new limit, the same key: what it used still counts
        self.write_keys(keys_doc(day_a=700))
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"configuration reloaded", start=n)
        b = budget_of(admin)
        self.assertEqual((b["day"]["limit"], b["day"]["used"]), (700, used))
        status, hdrs, obj, _ = self.post(port, max_tokens=300)
        self.assertEqual(status, 429, obj)
        self.assertEqual(hdrs["x-ratelimit-remaining-tokens"], str(700 - used))
        status, _, _, _ = self.post(port, max_tokens=700 - used - PROMPT_TOKENS)
        self.assertEqual(status, 200)

    # ---- the openai npm client --------------------------------------------------------

    @unittest.skipUnless(shutil.which("node"), "node is not installed")
    def test_openai_npm_client_reads_the_429_and_the_headers(self):
        node_dir = os.path.join(harness.SRC, "tests", "node")
        if not os.path.isdir(os.path.join(node_dir, "node_modules", "openai")):
            self.fail("the openai npm package is missing: run `npm install` in tests/node")
        key_retry, key_small = "sk-node-retry-0001", "sk-node-small-0002"
        self.write_keys({"keys": [
            {"name": "retry", "sha256": sha(key_retry), "models": "*",
             "rate": {"requests_per_second": 100, "burst": 20},
             "budget": {"tokens_per_day": 2500}},
            {"name": "small", "sha256": sha(key_small), "models": "*",
             "budget": {"tokens_per_day": 300}}]})
        _, port, admin = self.gateway(args=["--decode-ms", "5", "--decode-ms-per-seq", "0",
                                            "--prefill-us-per-token", "1"])
        env = dict(os.environ, KEY_RETRY=key_retry, KEY_SMALL=key_small)
        run = subprocess.run(["node", os.path.join(node_dir, "openai_budgets.mjs"),
                              "http://127.0.0.1:%d/v1" % port, "m"],
                             capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(run.returncode, 0, run.stderr)
        out = json.loads(run.stdout.strip().splitlines()[-1])
        if os.environ.get("LG_TEST_VERBOSE"):
            print(json.dumps(out, indent=1))
        # an answer: the headers the client reads, from the reservation (100 + 10)
        self.assertEqual(out["first"]["status"], 200)
        self.assertEqual(out["first"]["headers"]["limit-tokens"], "2500")
        self.assertEqual(out["first"]["headers"]["remaining-tokens"], "2390")
        self.assertEqual(out["first"]["headers"]["limit-requests"], "20")
        self.assertEqual(out["first"]["headers"]["remaining-requests"], "19")
        # refused while the stream held the room, told to wait a second; the client did, and
        # got in once the cancelled stream gave back what it had not used
        self.assertEqual(out["retry"]["status"], 200, out["retry"])
        self.assertGreaterEqual(out["retry"]["elapsed_ms"], 1000)
        self.assertLess(out["retry"]["elapsed_ms"], 5000)
        self.assertEqual(budget_of(admin, "retry")["refused_total"], 1)
        # larger than the whole budget: a RateLimitError at once, not retried
        large = out["large"]
        self.assertEqual((large["status"], large["code"], large["name"]),
                         (429, "rate_limit_exceeded", "RateLimitError"), large)
        self.assertEqual(large["headers"]["x-should-retry"], "false")
        self.assertLess(large["elapsed_ms"], 1000)
        self.assertIn("Request too large", large["message"])
        # what is left (50) is too little until the day ends: the client sees when
        self.assertEqual(out["fits"]["status"], 200)
        self.assertEqual(out["fits"]["headers"]["remaining-tokens"], "50")
        over = out["over"]
        self.assertEqual((over["status"], over["code"], over["type"]),
                         (429, "rate_limit_exceeded", "rate_limit_error"), over)
        self.assertEqual(over["headers"]["remaining-tokens"], "50")
        self.assertEqual(over["headers"]["limit-tokens"], "300")
        self.assertAlmostEqual(int(over["headers"]["retry-after"]), seconds_left_in_window(86400),
                               delta=5)
        self.assertRegex(over["headers"]["reset-tokens"], r"^(\d+h)?(\d+m)?\d+(\.\d+)?s$")
        self.assertNotIn("x-should-retry", over["headers"])
        small = budget_of(admin, "small")
        self.assertEqual((small["refused_total"], small["day"]["used"]), (2, 250))

    # ---- through Redis -----------------------------------------------------------------

    def test_two_gateways_share_one_budget_through_redis(self):
        redis = RedisServer(self)
        self.write_keys(keys_doc(day_a=1000))
        ga, port_a, admin_a = self.gateway(redis=redis.port, name="gw-a")
        gb, port_b, admin_b = self.gateway(redis=redis.port, name="gw-b")
        for g in (ga, gb):
            g.wait_for(r"budgets: shared through redis 127\.0\.0\.1:%d .*if it fails: open"
                       % redis.port)
        status, _, obj, _ = self.post(port_a, max_tokens=500)
        self.assertEqual(status, 200, obj)
        used = obj["usage"]["total_tokens"]
        self.assertEqual(used, 600)
        # B learns A's share at its next sync
        wait_until(lambda: budget_of(admin_b)["day"]["others"] == used, timeout=10,
                   what="gateway B to learn A's tokens")
        status, hdrs, obj, _ = self.post(port_b, max_tokens=350)
        self.assertEqual(status, 429, obj)
        self.assertIn("Used 600", obj["error"]["message"])
        status, hdrs, obj, _ = self.post(port_b, max_tokens=300)
        self.assertEqual(status, 200, obj)
        self.assertEqual(hdrs["x-ratelimit-remaining-tokens"], "0")
        wait_until(lambda: budget_of(admin_a)["day"]["others"] == 400, timeout=10,
                   what="gateway A to learn B's tokens")
        status, _, obj, _ = self.post(port_a, max_tokens=1)
        self.assertEqual(status, 429, obj)
        # the store: one hash per window and account, a field per gateway, expiring
        keys = redis.cli("--scan", "--pattern", "llmgate:budget:key:team-a:*").split()
        self.assertEqual(sorted(k.split(":")[-2] for k in keys), ["d", "m"])
        day = [k for k in keys if k.split(":")[-2] == "d"][0]
        fields = redis.cli("HGETALL", day).split()
        self.assertEqual(len(fields), 4)  # two gateways, each its own share
        self.assertEqual(sorted(int(v) for v in fields[1::2]), [400, 600])
        self.assertGreater(int(redis.cli("PTTL", day)), 0)
        for admin in (admin_a, admin_b):
            store = budget_of(admin)["store"]
            self.assertEqual((store["state"], store["on_failure"], store["refusing"]),
                             ("up", "open", False))
            self.assertGreater(store["syncs"], 0)

    def test_a_reload_moves_the_store(self):
        """A reload that names another Redis server: the store connects to it and
        writes every share there; turning Redis off by a reload is refused."""
        r1, r2 = RedisServer(self), RedisServer(self)
        gwp, gw, admin = self.gateway(redis=r1.port)
        gwp.wait_for(r"budgets: shared through redis 127\.0\.0\.1:%d" % r1.port)
        status, _, obj, _ = self.post(gw, max_tokens=20)
        self.assertEqual(status, 200, obj)
        used = obj["usage"]["total_tokens"]

        def share(r):
            day = r.cli("--scan", "--pattern", "llmgate:budget:key:team-a:d:*")
            return r.cli("HVALS", day) if day else ""
        wait_until(lambda: share(r1) == str(used), what="the share in the first server")
        path = self.path("llmgate.json")
        with open(path) as f:
            conf = json.load(f)
        conf["budgets"]["redis"]["address"] = "127.0.0.1:%d" % r2.port
        self.write_config(conf)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"configuration reloaded", start=n)
        gwp.wait_for(r"budgets: shared through redis 127\.0\.0\.1:%d" % r2.port, start=n)
        # nothing changed since: the share is written to the new server all the same
        wait_until(lambda: share(r2) == str(used), what="the share in the second server")
        self.assertEqual(budget_of(admin)["store"]["redis"], "127.0.0.1:%d" % r2.port)
        del conf["budgets"]["redis"]
        self.write_config(conf)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"/budgets/redis: sharing token budgets through Redis cannot be turned off "
                     r"on reload", start=n)
        self.assertEqual(budget_of(admin)["store"]["state"], "up")

    def test_redis_down_fails_open_then_comes_back(self):
        port = free_port()
        gwp, gw, admin = self.gateway(redis=port)
        gwp.wait_for(r"budgets: redis 127\.0\.0\.1:%d: cannot connect.*failing open" % port)
        self.assertEqual(budget_of(admin)["store"]["state"], "down")
        t0 = time.monotonic()
        status, _, obj, _ = self.post(gw, max_tokens=10)
        self.assertEqual(status, 200, obj)
        self.assertLess(time.monotonic() - t0, 1.0)
        RedisServer(self, port=port)
        gwp.wait_for(r"budgets: back on redis 127\.0\.0\.1:%d" % port)
        wait_until(lambda: budget_of(admin)["store"]["syncs"] > 0, what="a sync")

    def test_redis_down_fails_closed(self):
        port = free_port()
        gwp, gw, admin = self.gateway(redis=port, budgets={"redis": {"on_failure": "closed"}})
        gwp.wait_for(r"budgets: redis 127\.0\.0\.1:%d: cannot connect.*failing closed: requests "
                     r"of keys with token budgets are refused \(503\)" % port)
        status, hdrs, obj, _ = self.post(gw, max_tokens=10)
        self.assertEqual(status, 503, obj)
        self.assertEqual(obj["error"]["code"], "budget_store_unavailable")
        self.assertEqual(hdrs["retry-after"], "1")
        # a key without a budget does not depend on the store
        status, _, _, _ = self.post(gw, key=KEY_FREE, max_tokens=10)
        self.assertEqual(status, 200)
        RedisServer(self, port=port)
        wait_until(lambda: budget_of(admin)["store"]["state"] == "up", timeout=10,
                   what="the store to be back")
        status, _, obj, _ = self.post(gw, max_tokens=10)
        self.assertEqual(status, 200, obj)

    def test_a_stopped_redis_does_not_delay_requests(self):
        """SIGSTOP on redis-server: the connection stands, nothing answers. The
        requests' times do not change; the store times out and says so."""
        redis = RedisServer(self)
        gwp, gw, admin = self.gateway(redis=redis.port)
        gwp.wait_for(r"budgets: shared through redis")
        # the requests' time with Redis answering
        t0 = time.monotonic()
        for _ in range(5):
            status, _, _, _ = self.post(gw, max_tokens=5)
            self.assertEqual(status, 200)
        base = (time.monotonic() - t0) / 5
        n = len(gwp.lines)
        redis.proc.signal(signal.SIGSTOP)
        self.addCleanup(redis.proc.signal, signal.SIGCONT)
        worst = 0.0
        deadline = time.monotonic() + 1.5  # past the store's timeout (300 ms), several syncs
        count = 0
        while time.monotonic() < deadline or count < 10:
            t = time.monotonic()
            status, _, obj, _ = self.post(gw, max_tokens=5)
            worst = max(worst, time.monotonic() - t)
            self.assertEqual(status, 200, obj)
            count += 1
        gwp.wait_for(r"budgets: redis .*no answer within 300 ms: failing open", start=n)
        self.assertEqual(budget_of(admin)["store"]["state"] in ("down", "connecting"), True)
        # no request waited for the store (its timeout is 300 ms)
        self.assertLess(worst, max(0.25, 10 * base), (worst, base))
        redis.proc.signal(signal.SIGCONT)
        gwp.wait_for(r"budgets: back on redis", start=n, timeout=15)
        # what was counted meanwhile reaches the store
        used = budget_of(admin)["day"]["used"]
        day = redis.cli("--scan", "--pattern", "llmgate:budget:key:team-a:d:*")
        wait_until(lambda: redis.cli("HVALS", day) == str(used), timeout=10,
                   what="the share to be written")

    def test_a_stopped_redis_failing_closed_refuses_at_once(self):
        redis = RedisServer(self)
        gwp, gw, admin = self.gateway(redis=redis.port, budgets={"redis": {"on_failure": "closed"}})
        gwp.wait_for(r"budgets: shared through redis")
        status, _, _, _ = self.post(gw, max_tokens=5)
        self.assertEqual(status, 200)
        redis.proc.signal(signal.SIGSTOP)
        self.addCleanup(redis.proc.signal, signal.SIGCONT)
        gwp.wait_for(r"failing closed")
        t = time.monotonic()
        status, _, obj, _ = self.post(gw, max_tokens=5)
        self.assertEqual(status, 503, obj)
        self.assertLess(time.monotonic() - t, 0.25)
        redis.proc.signal(signal.SIGCONT)
        wait_until(lambda: budget_of(admin)["store"]["state"] == "up", timeout=15,
                   what="the store to be back")
        status, _, _, _ = self.post(gw, max_tokens=5)
        self.assertEqual(status, 200)


if __name__ == "__main__":
    harness.main()
