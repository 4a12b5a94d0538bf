"""The replay tool (tools/replay/replay.py): an access log made by a real
gateway in front of llmsim replicas is replayed under two policies, and the
replaying gateways' own access logs must show the same requests (model, API,
stream flag, prompt size, max_tokens, answer length) arriving at the same
offsets; the side-by-side table must name both policies. A malformed log
line, a bad fleet file and a log from before prompt_bytes/max_tokens get a
clear answer without running anything."""

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402
from harness import (BUILD, SRC, Harness, binary, http_request,  # noqa: E402
                     read_access_log)

REPLAY = os.path.join(SRC, "tools", "replay", "replay.py")
FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "1"]
# the arrivals of the original, 40 ms apart, lie this close to their place in
# a replay: the median, and all but two of the 16 (llmload keeps its schedule
# within a fraction of a millisecond, the gateway stamps the first byte it
# reads; a busy machine stalls one now and then). Arrivals not replayed at
# their offsets would be off by tens to hundreds of ms.
ARRIVAL_P50_MS = 2.0 * harness.SLOW
ARRIVAL_MOST_MS = 8.0 * harness.SLOW


def replay(args, timeout=180):
    return subprocess.run([sys.executable, REPLAY] + list(args), capture_output=True,
                          text=True, timeout=timeout)


def requests_of(path):
    """A log's inference requests, by arrival."""
    with open(path) as f:
        log = [json.loads(ln) for ln in f if ln.strip()]
    log = [e for e in log if e["method"] == "POST" and e["status"] == 200]
    return sorted(log, key=lambda e: e["ts"])


def arrival_ms(log):
    def ms(ts):
        d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
        return d.replace(tzinfo=datetime.timezone.utc).timestamp() * 1e3
    return [ms(e["ts"]) for e in log]


def offset_errors(want, got):
    """|got - want| per request, after the median shift (when the replay
    started does not matter, only where each arrival lies against the others)."""
    d = sorted(g - w for w, g in zip(want, got))
    shift = d[len(d) // 2]
    return [abs(g - w - shift) for w, g in zip(want, got)]


class ReplayRoundTrip(Harness):
    def test_replay_reproduces_the_logged_requests(self):
        # the original: two replicas serving two models, round robin, every line flushed
        ports = [self.start_llmsim(n, models=("m", "x"), args=FAST)[1] for n in ("r1", "r2")]
        access = self.path("live.log")
        conf = self.base_config([{"name": n, "url": "http://127.0.0.1:%d" % p,
                                  "models": ["m", "x"]}
                                 for n, p in zip(("r1", "r2"), ports)],
                                access_log={"path": access, "flush": 0})
        gw, gw_port = self.start_gateway(conf)
        # requests that differ in everything the replay must keep: model,
        # API, stream flag, prompt size, max_tokens (or none) and answers
        # shorter than max_tokens (as an engine's that stopped early)
        trace = []
        for i in range(16):
            line = {"t_us": 40000 * i, "prompt_bytes": 100 + 137 * i,
                    "max_tokens": None if i % 5 == 4 else 4 + i, "group": -1,
                    "model": "x" if i % 3 == 0 else "m",
                    "api": "completions" if i % 4 == 1 else "chat",
                    "stream": i % 4 != 2}
            if i % 2 == 1:
                line["extra_body"] = {"sim_completion_tokens": 2 + i // 2}
            trace.append(line)
        with open(self.path("trace.jsonl"), "w") as f:
            f.write("".join(json.dumps(t) + "\n" for t in trace))
        lp = self.start([binary("llmload"), "--url", "http://127.0.0.1:%d" % gw_port,
                         "--model", "m", "--trace-in", self.path("trace.jsonl"), "--quiet"],
                        name="llmload")
        self.assertEqual(lp.wait(60), 0, lp.output())
        # not replayed: a listing and a request the gateway refused
        self.assertEqual(http_request(gw_port, "GET", "/v1/models")[0], 200)
        self.assertEqual(http_request(gw_port, "POST", "/v1/chat/completions", b"{nope")[0], 400)
        read_access_log(access, 18)  # every line is there
        live = requests_of(access)
        self.assertEqual(len(live), 16)
        # the log has what the replay needs, as the client sent it
        self.assertEqual(sorted(e["prompt_bytes"] for e in live),
                         sorted(t["prompt_bytes"] for t in trace))
        self.assertEqual(sorted(json.dumps(e["max_tokens"]) for e in live),
                         sorted(json.dumps(t["max_tokens"]) for t in trace))
        # llmsim stopped where it was told (sim_completion_tokens), short of max_tokens
        told = [t.get("extra_body", {}).get("sim_completion_tokens") or t["max_tokens"] or 16
                for t in trace]
        self.assertEqual(sorted(e["tokens"] for e in live), sorted(told))

        with open(self.path("fleet.json"), "w") as f:
            json.dump({"defaults": {"decode_ms": 2, "decode_ms_per_seq": 0,
                                    "prefill_us_per_token": 1, "slots": 8},
                       "replicas": [{"name": "r1"}, {"name": "r2", "speed": 0.5}]}, f)
        out = self.path("out")
        r = replay([access, "--fleet", self.path("fleet.json"), "--policies",
                    "round_robin,least_request", "--rounds", "1", "--no-realtime",
                    "--build", BUILD, "--out", out])
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertIn("skipped 1 not an inference API (GET /v1/models), "
                      "1 refused before routing (400)", r.stdout)
        # the table: the live row and both policies side by side
        self.assertRegex(r.stdout, r"\nlive \(round_robin\) +16 ")
        self.assertRegex(r.stdout, r"\nround_robin +16 +[\d.]+ ")
        self.assertRegex(r.stdout, r"\nleast_request +16 +[\d.]+ .* [\d.]+ +[\d.]+ *\n")
        self.assertIn("p99 / round_robin", r.stdout)

        want = arrival_ms(live)
        for policy in ("round_robin", "least_request"):
            got = requests_of(os.path.join(out, policy, "round1", "access.log"))
            self.assertEqual(len(got), 16, policy)
            for a, b in zip(live, got):
                for k in ("model", "path", "stream", "prompt_bytes", "max_tokens", "tokens"):
                    self.assertEqual(a[k], b[k], "%s: %s of %s" % (policy, k, a["id"]))
            self.assertEqual({e["policy"] for e in got}, {policy})
            err = sorted(offset_errors(want, arrival_ms(got)))
            self.assertLess(err[len(err) // 2], ARRIVAL_P50_MS, (policy, err))
            self.assertLess(err[-3], ARRIVAL_MOST_MS, (policy, err))
        with open(os.path.join(out, "replay.json")) as f:
            res = json.load(f)
        self.assertEqual([row["name"] for row in res["rows"]], ["round_robin", "least_request"])
        for row in res["rows"]:
            f = row["fidelity"][0]
            self.assertTrue(f["prompt_bytes_equal"] and f["tokens_equal"]
                            and f["max_tokens_equal"] and f["model_api_stream_equal"], f)


LINE = {"ts": "2026-12-04T15:24:56.904117Z", "id": "1", "client": "127.0.0.1", "key": None,
        "method": "POST", "path": "/v1/chat/completions", "model": "m", "stream": True,
        "prompt_bytes": 1317, "max_tokens": 9, "status": 200, "backend": "r1", "attempts": 1,
        "policy": "ttft", "reason": "x", "bytes_in": 1570, "bytes_out": 2283, "read": 0.017,
        "queue": 0.055, "connect": 0.146, "ttfb": 2.078, "ttft": 32.166, "total": 123.36,
        "tokens": 9, "itl": 11.398, "error": None}


class ReplayInput(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lgreplay-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def write(self, name, lines):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n"
                            for ln in lines))
        return path

    def dry(self, log, *extra):
        return replay([log, "--dry-run", "--trace-out", os.path.join(self.tmp, "t.jsonl")]
                      + list(extra), timeout=30)

    def test_malformed_line_names_its_line(self):
        later = dict(LINE, ts="2026-12-04T15:24:57.000000Z")
        cases = [
            ([LINE, "", '{"ts": "2026-12-04T15', LINE], ':3: not JSON'),
            ([LINE, dict(LINE, stream="yes")], ':2: "stream" has the wrong type ("yes")'),
            ([{k: v for k, v in LINE.items() if k != "ts"}], ':1: missing "ts"'),
            ([LINE, later, dict(LINE, ts="yesterday")], ':3: "ts" is not YYYY-MM-DD'),
            ([LINE, "[1, 2]"], ":2: not a JSON object"),
            ([LINE, dict(LINE, max_tokens="9")], ':2: "max_tokens" has the wrong type'),
        ]
        for lines, msg in cases:
            log = self.write("bad.log", lines)
            r = self.dry(log)
            self.assertEqual(r.returncode, 2, (msg, r.stdout, r.stderr))
            self.assertIn(log + msg, r.stderr)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)  # one line, no traceback
            self.assertFalse(os.path.exists(os.path.join(self.tmp, "t.jsonl")))

    def test_bad_fleet_is_refused(self):
        log = self.write("ok.log", [LINE])
        for fleet, msg in [
                ({"replicas": [{"name": "r1", "spead": 1}]}, 'replicas[0]: unknown key "spead"'),
                ({"replicas": [{"name": "a"}, {"name": "a"}]}, 'replicas[1]: "name" must be a '
                                                               'unique'),
                ({"replicas": [{"name": "a", "slots": "8"}]}, '"slots" must be a number'),
                ({"replicas": [{"name": "a", "models": ["y"]}]}, "no replica serves m"),
                ({"replicas": [{"name": "a", "url": "http://h:1", "speed": 2}]},
                 "a real replica (url) takes no llmsim settings (speed)"),
                ({"replicas": []}, 'expected {"defaults"')]:
            path = os.path.join(self.tmp, "fleet.json")
            with open(path, "w") as f:
                json.dump(fleet, f)
            r = self.dry(log, "--fleet", path)
            self.assertEqual(r.returncode, 2, (fleet, r.stdout, r.stderr))
            self.assertIn(msg, r.stderr)

    def test_old_log_gets_the_documented_estimates(self):
        old = [{k: v for k, v in dict(LINE, ts="2026-12-04T15:24:5%d.000000Z" % i,
                                      tokens=5 + i).items()
                if k not in ("prompt_bytes", "max_tokens")} for i in range(3)]
        r = self.dry(self.write("old.log", old), "--fleet", "bench:1a")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("estimated as bytes_in - 256", r.stdout)
        with open(os.path.join(self.tmp, "t.jsonl")) as f:
            items = [json.loads(ln) for ln in f]
        self.assertEqual([t["t_us"] for t in items], [0, 1000000, 2000000])
        self.assertEqual([t["prompt_bytes"] for t in items], [1570 - 256] * 3)
        self.assertEqual([t["max_tokens"] for t in items], [5, 6, 7])  # the answers' lengths
        self.assertFalse(any("extra_body" in t for t in items))


if __name__ == "__main__":
    unittest.main()
