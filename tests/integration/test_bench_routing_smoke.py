"""Smoke test of the routing benchmark (bench/routing/run.py): a few seconds of
scenario 1a with llmgate's round robin (also as the --ref-build contender,
round_robin@ref) and nginx, checking that the run completes and leaves its
table, results and per-request logs behind. It proves the tool works, not
what it measures: the benchmark itself is run by hand
(bench/routing/README.md)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BUILD, SRC  # noqa: E402

RUN = os.path.join(SRC, "bench", "routing", "run.py")


def count_lines(path):
    with open(path) as f:
        return sum(1 for _ in f)


def which(name):
    for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/sbin"]:
        if d and os.access(os.path.join(d, name), os.X_OK):
            return True
    return False


class BenchRoutingSmoke(unittest.TestCase):
    def test_quick_run(self):
        if not which("nginx"):
            self.skipTest("nginx is not installed (tools/install-deps.sh --bench)")
        with tempfile.TemporaryDirectory(prefix="lgbench-smoke-") as tmp:
            out = os.path.join(tmp, "run")
            # the reference build: the same llmgate behind a script that says it ran
            ref = os.path.join(tmp, "ref")
            os.makedirs(ref)
            ran = os.path.join(ref, "ran")
            with open(os.path.join(ref, "llmgate"), "w") as f:
                f.write('#!/bin/sh\necho started >> "%s"\nexec "%s" "$@"\n'
                        % (ran, os.path.join(BUILD, "llmgate")))
            os.chmod(os.path.join(ref, "llmgate"), 0o755)
            argv = [sys.executable, RUN, "--quick", "--scenario", "1a", "--rounds", "1",
                    "--duration", "4", "--contenders", "round_robin,round_robin@ref,nginx",
                    "--no-realtime", "--build", BUILD, "--ref-build", ref, "--out", out]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            # round_robin@ref, and only it, ran the reference build's llmgate
            self.assertTrue(os.path.exists(ran), "round_robin@ref did not run " + ref)
            self.assertEqual(count_lines(ran), 1)
            self.assertIn("== Scenario 1a", r.stdout)
            self.assertRegex(r.stdout, r"\nround_robin +\d+ ")
            self.assertRegex(r.stdout, r"\nnginx +\d+ ")

            with open(os.path.join(out, "results.json")) as f:
                res = json.load(f)
            s1 = res["scenarios"]["1a"]
            trace_lines = count_lines(os.path.join(out, "1a", "trace.jsonl"))
            self.assertGreater(trace_lines, 20)
            for name in ("round_robin", "round_robin@ref", "nginx"):
                c = s1["contenders"][name]
                self.assertNotIn("unavailable", c, c)
                self.assertEqual(c["requests"], trace_lines, name)
                self.assertGreater(c["ttft_p99"], 0)
                self.assertAlmostEqual(sum(c["shares"].values()), 1.0, places=3)
                log = os.path.join(out, "1a", name, "round1", "requests.jsonl")
                self.assertEqual(count_lines(log), trace_lines)
            # the same trace: both saw every request; round robin splits it evenly
            rr = s1["contenders"]["round_robin"]["shares"]
            self.assertLess(max(rr.values()) - min(rr.values()), 0.1)
            self.assertEqual(s1["contenders"]["round_robin"]["ttft_p99_vs_rr"], 1.0)
            with open(os.path.join(out, "results.md")) as f:
                md = f.read()
            self.assertIn("| contender | n | TTFT p50", md)
            if which("gnuplot"):
                self.assertTrue(os.path.getsize(os.path.join(out, "plots", "cdf_1a.svg")) > 1000)

    def test_fresh_traces(self):
        """--fresh-traces: round 2 replays its own trace (another seed), pooled with round 1."""
        with tempfile.TemporaryDirectory(prefix="lgbench-smoke-") as tmp:
            out = os.path.join(tmp, "run")
            argv = [sys.executable, RUN, "--quick", "--scenario", "1a", "--rounds", "2",
                    "--duration", "3", "--contenders", "round_robin", "--fresh-traces",
                    "--no-realtime", "--no-plots", "--build", BUILD, "--out", out]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            t1, t2 = (os.path.join(out, "1a", n) for n in ("trace.jsonl", "trace-r2.jsonl"))
            with open(t1) as f1, open(t2) as f2:
                self.assertNotEqual(f1.read(), f2.read())
            for rnd, t in ((1, t1), (2, t2)):
                log = os.path.join(out, "1a", "round_robin", "round%d" % rnd, "requests.jsonl")
                self.assertEqual(count_lines(log), count_lines(t), rnd)
            with open(os.path.join(out, "results.json")) as f:
                res = json.load(f)
            self.assertTrue(res["fresh_traces"])
            c = res["scenarios"]["1a"]["contenders"]["round_robin"]
            self.assertEqual(c["requests"], count_lines(t1) + count_lines(t2))


if __name__ == "__main__":
    unittest.main()
