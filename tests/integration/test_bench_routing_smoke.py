"""Smoke test of the routing benchmark (bench/routing/run.py): a few seconds of
scenario 1a with llmgate's round robin (also as the --ref-build contender,
round_robin@ref) and nginx, checking that the run completes and leaves its
table, results and per-request logs behind; a few seconds of one mismatch
draw (bench/routing/mismatch.py: a drawn fleet the gateway is not told
about) with its per-draw and pooled verdicts; a few seconds of one draw
whose biggest replica crashes (connections reset) and comes back
(bench/routing/shapes.py, load that moves); and the families' draws,
shapes and noise intervals offline. It proves the tool works, not what it
measures: the benchmark itself is run by hand (bench/routing/README.md)."""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import BUILD, SRC  # noqa: E402

RUN = os.path.join(SRC, "bench", "routing", "run.py")
sys.path.insert(0, os.path.join(SRC, "bench", "routing"))
import mismatch  # noqa: E402
import procs  # noqa: E402
import scenarios as S  # noqa: E402
import shapes  # noqa: E402


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

    def test_tenants(self):
        """bench/routing/tenants.py: a few seconds of the tenants scenario with classes,
        two rounds pooled."""
        with tempfile.TemporaryDirectory(prefix="lgbench-tenants-") as tmp:
            argv = [sys.executable, os.path.join(os.path.dirname(RUN), "tenants.py"),
                    "--duration", "3", "--runs", "classes,prio", "--rounds", "2",
                    "--build", BUILD, "--out", tmp]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            with open(os.path.join(tmp, "report.json")) as f:
                both = json.load(f)
            self.assertEqual(len(both["rounds"]), 2)
            report = both["rounds"][1]
            # pooled: each run's requests of both rounds together
            for run in ("classes", "prio"):
                for t in ("interactive", "agent", "batch"):
                    self.assertEqual(both["pooled"][run][t]["sent"],
                                     sum(rd[run][t]["sent"] for rd in both["rounds"]))
            self.assertIn("pooled over 2 rounds", r.stdout)
            self.assertIn("prio: batch answered", r.stdout)
            for run in ("classes", "prio"):
                rep = report[run]
                for t in ("interactive", "agent", "batch"):
                    self.assertGreater(rep[t]["sent"], 0, rep)
                    # every request answered: a 200 or (batch, sheddable) a 429, nothing else
                    self.assertEqual(rep[t]["failed_other"], 0, rep)
                self.assertEqual(rep["interactive"]["refused_429"], 0, rep)
            self.assertEqual(report["classes"]["preempted"], 0, report)
            # prio: batch fills the engines' slots, the higher classes take them back
            self.assertGreater(report["prio"]["preempted"], 0, report)
            self.assertIn("llmsim figures", r.stdout)
            with open(os.path.join(tmp, "round2", "prio", "llmgate.json")) as f:
                conf = json.load(f)
            self.assertEqual({(b["max_inflight"], b["priority_field"], b["engine_priority"])
                              for b in conf["backends"]}, {(24, "vllm", "preempt")})
            # the ttft policy counted by class there: what the access log shows of it
            with open(os.path.join(tmp, "round2", "prio", "access.log")) as f:
                recs = [json.loads(line) for line in f if line.startswith("{")]
            inter = [c for rec in recs if rec.get("class") == "interactive"
                     for c in rec.get("candidates") or []]
            self.assertTrue(inter and all("class_inflight" in c for c in inter), inter[:2])
            # classes: engines that do not preempt, nothing counted by class
            with open(os.path.join(tmp, "round2", "classes", "access.log")) as f:
                recs = [json.loads(line) for line in f if line.startswith("{")]
            self.assertFalse(any("class_inflight" in c for rec in recs
                                 for c in rec.get("candidates") or []))

    def test_tenants_step_log(self):
        """tenants.py --step-log: the run "both" (batch's yield_prefill, the ttft
        policy's lower_prefill_weight) with each replica's step log, which
        steplog.py matches to every interactive request and splits."""
        with tempfile.TemporaryDirectory(prefix="lgbench-steplog-") as tmp:
            argv = [sys.executable, os.path.join(os.path.dirname(RUN), "tenants.py"),
                    "--duration", "3", "--runs", "both", "--step-log", "--build", BUILD,
                    "--out", tmp]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            run = os.path.join(tmp, "both")
            with open(os.path.join(run, "llmgate.json")) as f:
                conf = json.load(f)
            self.assertTrue(conf["scheduling"]["batch"]["yield_prefill"])
            self.assertEqual(conf["routing"]["options"]["ttft"]["lower_prefill_weight"], 1)
            kinds = set()
            for name in ("r1", "r2"):
                with open(os.path.join(run, name + ".steps.jsonl")) as f:
                    for line in f:
                        kinds |= {k for k in ("s", "a", "p", "f") if k in json.loads(line)}
            self.assertTrue({"s", "a", "f"} <= kinds, kinds)  # steps, admissions, first tokens
            with open(os.path.join(tmp, "report.json")) as f:
                sent = json.load(f)["both"]["interactive"]["ok"]
            r = subprocess.run([sys.executable, os.path.join(os.path.dirname(RUN), "steplog.py"),
                                run, "--top", "5"], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            self.assertIn("interactive: %d of %d requests matched" % (sent, sent), r.stdout)
            self.assertIn("slowest 1%", r.stdout)

    @unittest.skipIf(procs.realengine_missing(), procs.realengine_missing() or "")
    def test_tenants_real(self):
        """tenants.py --real: a few seconds of classes on the real llama.cpp fleet."""
        with tempfile.TemporaryDirectory(prefix="lgbench-tenants-real-") as tmp:
            argv = [sys.executable, os.path.join(os.path.dirname(RUN), "tenants.py"), "--real",
                    "--duration", "3", "--runs", "classes,prio", "--build", BUILD, "--out", tmp]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            with open(os.path.join(tmp, "report.json")) as f:
                report = json.load(f)
            self.assertEqual(list(report), ["classes"])  # prio: llama.cpp has no priority
            self.assertIn("prio: not run", r.stderr)
            rep = report["classes"]
            for t in ("interactive", "agent", "batch"):
                self.assertGreater(rep[t]["sent"], 0, rep)
                self.assertEqual(rep[t]["failed_other"], 0, rep)
            self.assertGreater(rep["interactive"]["ok"], 0, rep)
            self.assertIn("real llama.cpp fleet", r.stdout)
            with open(os.path.join(tmp, "classes", "llmgate.json")) as f:
                conf = json.load(f)
            self.assertEqual({(b["max_inflight"], b["flavor"]) for b in conf["backends"]},
                             {(4, "llamacpp")})

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
            # realengine.py --paired: each round's p99 TTFT, as its requests give it
            r = subprocess.run([sys.executable, os.path.join(os.path.dirname(RUN), "realengine.py"),
                                "--paired", "round_robin", os.path.join(out, "1a")],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for rnd in (1, 2):
                log = os.path.join(out, "1a", "round_robin", "round%d" % rnd, "requests.jsonl")
                with open(log) as f:
                    ttft = sorted(e["ttft_ms"] for e in map(json.loads, f)
                                  if e["status"] == 200 and e["ttft_ms"] is not None)
                p99 = ttft[max(1, -(-99 * len(ttft) // 100)) - 1]  # nearest rank
                self.assertRegex(r.stdout, r"round%d\s+round_robin\s+%.0f\s" % (rnd, p99))
            # tail.py: every request of both rounds over a threshold of 0 ms,
            # split by replica; each round's slowest listed
            r = subprocess.run([sys.executable, os.path.join(os.path.dirname(RUN), "tail.py"),
                                os.path.join(out, "1a"), "--over", "0", "--list", "round_robin"],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            n = c["requests"]
            self.assertRegex(r.stdout, r"== round_robin: %d requests, .* over 0 ms: %d " % (n, n))
            per = [int(x) for x in re.findall(r"^  r\d+: (\d+) \(", r.stdout, re.M)]
            self.assertEqual(sum(per), n, r.stdout)
            self.assertIn("round 1: p99", r.stdout)
            self.assertIn("round 2: p99", r.stdout)


class MismatchSmoke(unittest.TestCase):
    def test_one_draw(self):
        """m1 at 70%: the drawn engines run, hidden from the gateway, and the
        family's tables come out with their noise intervals."""
        if not which("nginx"):
            self.skipTest("nginx is not installed (tools/install-deps.sh --bench)")
        fleet = mismatch.draw_fleet(1, 1)
        with tempfile.TemporaryDirectory(prefix="lgbench-smoke-") as tmp:
            out = os.path.join(tmp, "run")
            argv = [sys.executable, RUN, "--quick", "--scenario", "m1-70", "--rounds", "1",
                    "--duration", "4", "--block-s", "1",
                    "--contenders", "ttft,nginx,least_request,oracle",
                    "--no-realtime", "--no-plots", "--build", BUILD, "--out", out]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            self.assertIn("== Scenario m1-70", r.stdout)
            self.assertIn("== Mismatch family: per draw", r.stdout)
            self.assertRegex(r.stdout, r"mismatch family: (PASS|FAIL) 70% load, 1 draws")
            with open(os.path.join(out, "results.json")) as f:
                res = json.load(f)
            trace_lines = count_lines(os.path.join(out, "m1-70", "trace.jsonl"))
            self.assertGreater(trace_lines, 20)
            sc = res["scenarios"]["m1-70"]
            for name in ("ttft", "nginx", "least_request", "oracle"):
                c = sc["contenders"][name]
                self.assertNotIn("unavailable", c, c)
                self.assertEqual(c["requests"], trace_lines, name)
                # every replica ran the drawn engine, not llmsim's defaults
                for i, st in enumerate(sorted(c["fleet_state"][0].items())):
                    sim = fleet["sims"][i]
                    self.assertEqual(st[1]["schedule"], sim["schedule"], name)
                    self.assertEqual(st[1]["slots"], sim["slots"], name)
                    self.assertAlmostEqual(st[1]["jitter"], sim["jitter"], places=6)
                    self.assertAlmostEqual(st[1]["prefill_fixed_ms"], sim["prefill_fixed_ms"],
                                           places=6)
                    self.assertEqual(st[1]["flavor"], fleet["flavor"])
            # the gateway is told the replicas' addresses, not their engines
            with open(os.path.join(out, "m1-70", "ttft", "round1", "llmgate.json")) as f:
                conf = json.load(f)
            self.assertEqual({b["flavor"] for b in conf["backends"]}, {"auto"})
            draw = res["mismatch"]["draws"][0]
            self.assertEqual((draw["draw"], draw["load"]), (1, 0.7))
            lo, hi = draw["vs_best_interval"]
            self.assertTrue(0 < lo <= hi, draw)
            self.assertIn(draw["best_peer"], ("nginx", "least_request"))
            self.assertIsNotNone(draw["pass"])
            pooled = res["mismatch"]["pooled"]["0.7"]
            self.assertEqual(pooled["draws"], 1)
            self.assertGreater(pooled["vs_nginx"], 0)
            self.assertIsNotNone(pooled["e2e_vs_nginx_interval"])
            with open(os.path.join(out, "results.md")) as f:
                self.assertIn("### Mismatch family: pooled", f.read())
            # the tables again from the folder: the same numbers
            mismatch.BLOCK_S = 1.0
            try:
                again = mismatch.reanalyze(out)[2]
            finally:
                mismatch.BLOCK_S = 3.0
            self.assertEqual(again["draws"][0]["vs_best"], draw["vs_best"])
            self.assertEqual(list(again["draws"][0]["vs_best_interval"]), [lo, hi])
            self.assertEqual(again["pooled"]["0.7"]["vs_nginx"], pooled["vs_nginx"])


class MovingSmoke(unittest.TestCase):
    def test_crash_back(self):
        """m1 under crash-back: its biggest replica (r3) crashes with its
        connections reset at a third of the run and is restarted on its port
        at two thirds; the moving-load tables come out, with how many
        requests each p99 rests on."""
        if not which("nginx"):
            self.skipTest("nginx is not installed (tools/install-deps.sh --bench)")
        with tempfile.TemporaryDirectory(prefix="lgbench-smoke-") as tmp:
            out = os.path.join(tmp, "run")
            argv = [sys.executable, RUN, "--quick", "--scenario", "m1-back", "--rounds", "1",
                    "--duration", "4", "--block-s", "1", "--contenders", "ttft,nginx",
                    "--load-reports", "engine", "--no-realtime", "--no-plots",
                    "--build", BUILD, "--out", out]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            self.assertIn("== Moving load: per draw and shape", r.stdout)
            self.assertRegex(r.stdout, r"moving load: (PASS|FAIL|n/a ) crash-back, 1 draws")
            with open(os.path.join(out, "results.json")) as f:
                res = json.load(f)
            d = res["scenarios"]["m1-back"]["definition"]
            self.assertEqual(d["crash"], {"replica": 2, "at": 1.333, "reset": True,
                                          "restart_after": 1.333})
            trace_lines = count_lines(os.path.join(out, "m1-back", "trace.jsonl"))
            for name in ("ttft", "nginx"):
                rundir = os.path.join(out, "m1-back", name, "round1")
                with open(os.path.join(rundir, "r3.log")) as f:
                    self.assertIn("connections reset", f.read())
                self.assertEqual(count_lines(os.path.join(rundir, "requests.jsonl")), trace_lines)
            row = res["moving"]["draws"][0]
            self.assertEqual((row["draw"], row["shape"]), (1, "crash-back"))
            self.assertEqual(row["best_peer"], "nginx")
            self.assertEqual(set(row["tails"]), {"ttft", "nginx"})
            self.assertTrue(all(t >= 1 for t in row["tails"].values()), row["tails"])
            self.assertIn("crash-back", res["moving"]["pooled"])
            again = shapes.reanalyze(out)[2]
            self.assertEqual(again["draws"][0]["vs_best"], row["vs_best"])


class MovingShapes(unittest.TestCase):
    def test_plans(self):
        """Each shape on every draw: loads that leave the replicas left at 90%
        at most, durations that put the p99 on --tail-min requests, events at
        their fractions of the run."""
        scens = shapes.make_scenarios(4, 1)  # every schedule and vocabulary
        self.assertEqual(len(scens), 5 * len(shapes.SHAPES))
        self.assertEqual([s["id"] for s in scens[:9]],
                         ["m0-s70", "m0-s90", "m0-b100", "m0-b120", "m0-crash", "m0-back",
                          "m0-speed", "m0-slow", "m0-ramp"])
        self.assertEqual(shapes.parse_id("m3-crash"), (3, "crash"))
        self.assertIsNone(shapes.parse_id("m3-90"))  # the mismatch family's
        self.assertIsNone(shapes.parse_id("m3-90x"))
        caps = {}
        for s in scens:
            k = s["fleet"]["k"]
            if k not in caps:  # the fleet model, once a draw
                caps[k] = (shapes.shares(s["fleet"]),
                           mismatch.capacity(s["fleet"], s["prompt_bytes"], s["max_tokens"]))
            plan, (sh, cap) = s["plan"], caps[k]
            if plan["shape"] in ("crash", "crash-back", "speed"):
                big = plan["replica"]
                self.assertEqual(sh[big], max(sh))
                left = 1 - sh[big] + (sh[big] / plan["factor"] if plan["factor"] else 0)
                self.assertLessEqual(s["load"], 0.7)
                self.assertLessEqual(s["load"] / left, 0.9, s["id"])
            for rounds in (1, 2):
                d = shapes.duration_s(s, cap * s["load"], rounds)
                self.assertGreaterEqual(d, s["duration"])
                self.assertTrue(d == shapes.MAX_DURATION_S
                                or d * cap * s["load"] * rounds >= 100 * shapes.TAIL_MIN - 1e-6,
                                (s["id"], d))
                if s["burst"]:
                    self.assertEqual(d % 10, 0)
            ev = shapes.place_events(s, 60.0)
            if plan["shape"] == "crash":
                self.assertEqual(ev["crash"], {"replica": plan["replica"], "at": 20.0,
                                               "reset": True, "restart_after": None})
            if plan["shape"] == "speed":
                self.assertEqual((ev["slowdown"]["at"], ev["slowdown"]["for"]), (20.0, 20.0))
            if plan["shape"] == "fleet-slow":
                self.assertTrue(1.2 <= plan["factor"] <= 1.3)
                self.assertEqual(len(ev["faults"]), 4)
                self.assertEqual(shapes.place_events(s, 100.0)["window"], (20.0, 80.0))
        self.assertEqual(scens[2]["burst"], "2:5:5")  # 5 s at twice the mean, 5 s idle
        self.assertEqual(procs.load_report_args("engine", "sglang"), ["--v1-loads"])
        self.assertEqual(procs.load_report_args("engine", "tgi"), [])
        self.assertIn("all", procs.load_report_args("all", "tgi"))

    def test_ramp_trace(self):
        """A trace drawn at the peak, thinned: the rate rises from 20% to 95%."""
        import random
        rng = random.Random(5)
        with tempfile.TemporaryDirectory(prefix="lgbench-smoke-") as tmp:
            path = os.path.join(tmp, "t.jsonl")
            t, n = 0.0, 0
            with open(path, "w") as f:
                while t < 300:
                    t += rng.expovariate(100.0)
                    f.write(json.dumps({"t_us": int(t * 1e6), "prompt_bytes": 1,
                                        "max_tokens": 1, "group": -1}) + "\n")
                    n += 1
            kept = shapes.ramp_trace(path, (0.2, 0.95), 300.0, 1)
            with open(path) as f:
                ts = [json.loads(ln)["t_us"] / 1e6 for ln in f]
            self.assertEqual(len(ts), kept)
            self.assertAlmostEqual(kept / n, (0.2 + 0.95) / 2 / 0.95, delta=0.02)
            first = sum(1 for x in ts if x < 30) / 30.0       # rate ~ 100 * 0.25 / 0.95
            last = sum(1 for x in ts if x >= 270) / 30.0      # ~ 100 * 0.91 / 0.95
            self.assertAlmostEqual(first, 100 * (0.2 + 0.75 * 0.05) / 0.95, delta=5)
            self.assertAlmostEqual(last, 100 * (0.2 + 0.75 * 0.95) / 0.95, delta=8)


class MismatchDraws(unittest.TestCase):
    def test_draws(self):
        """Seeded and within the documented ranges; schedules and engine
        vocabularies cycle so that eight draws meet them all."""
        fleets = [mismatch.draw_fleet(1, k) for k in range(1, 9)]
        self.assertEqual(fleets[2], mismatch.draw_fleet(1, 3))
        self.assertNotEqual(fleets[2]["sims"], mismatch.draw_fleet(2, 3)["sims"])
        self.assertEqual({f["schedule"] for f in fleets}, set(mismatch.SCHEDULES))
        self.assertEqual({f["flavor"] for f in fleets}, set(mismatch.FLAVORS))
        for f in fleets:
            for sim, speed in zip(f["sims"], f["speeds"]):
                self.assertTrue(4 <= sim["slots"] <= 32, sim)
                self.assertTrue(20 <= sim["prefill_us_per_token"] <= 200, sim)
                self.assertTrue(0 <= sim["prefill_fixed_ms"] <= 25, sim)
                self.assertTrue(1.0 <= sim["decode_batch_exp"] <= 1.5, sim)
                self.assertTrue(0 <= sim["jitter"] <= 0.3, sim)
                self.assertTrue(0.25 <= speed <= 1.0, f["speeds"])
                self.assertLessEqual(mismatch.full_step_ms(sim, speed),
                                     mismatch.MAX_FULL_STEP_MS)
                self.assertEqual(sim["step_tokens"] > 0, f["schedule"] == "chunked")
        scens = mismatch.make_scenarios(2, 1)
        self.assertEqual([s["id"] for s in scens],
                         ["m0-70", "m0-90", "m1-70", "m1-90", "m2-70", "m2-90"])
        # m0: the issue's fleet, whatever the seed
        issue = mismatch.draw_fleet(1, 0)
        self.assertEqual(issue, mismatch.draw_fleet(7, 0))
        self.assertEqual(issue["speeds"], [1.0, 1.0, 0.5, 0.25])
        self.assertEqual([s["slots"] for s in issue["sims"]], [8, 8, 8, 8])
        self.assertEqual(issue["flavor"], "vllm")
        self.assertGreaterEqual(mismatch.capacity(issue, S.PROMPT, S.MAX_TOKENS),
                                mismatch.MIN_CAPACITY)
        self.assertEqual(mismatch.make_scenarios(2, 1, only="m2-90")[0]["load"], 0.9)
        # --gauge-lags: each engine software's lag, in its replica's one-sequence steps
        lagged = mismatch.with_gauge_lags(fleets[0])
        steps = mismatch.GAUGE_LAG_STEPS[fleets[0]["flavor"]]
        self.assertEqual([s["gauge_lag_ms"] for s in lagged["sims"]],
                         [round(steps * s["decode_ms"] / sp, 1)
                          for s, sp in zip(fleets[0]["sims"], fleets[0]["speeds"])])
        self.assertNotIn("gauge_lag_ms", fleets[0]["sims"][0])
        self.assertIn("gauge lag", mismatch.describe(lagged))
        self.assertEqual(procs.ENGINE_SHAPE["gauge_lag_ms"][0], "--gauge-lag-ms")

    def test_noise_interval(self):
        """The same requests for two contenders: the ratio's interval is 1;
        one twice as slow on every request: 2; a noisy copy: around 1."""
        import random
        rng = random.Random(3)
        recs = [{"_round": 1, "t_sched_ms": i * 20.0, "ttft_ms": rng.expovariate(1 / 50.0)}
                for i in range(1000)]
        same = {"a": mismatch.cells(recs), "b": mismatch.cells(recs)}
        self.assertEqual(mismatch.noise_interval([same], mismatch.p99_ratio("a", ["b"])),
                         (1.0, 1.0))
        slow = [dict(r, ttft_ms=2 * r["ttft_ms"]) for r in recs]
        self.assertIsNone(mismatch.noise_interval([{"a": mismatch.cells(recs[:100]),
                                                    "b": mismatch.cells(recs[:100])}],
                                                  mismatch.p99_ratio("a", ["b"])))  # 1 block
        self.assertEqual(mismatch.noise_interval([{"a": mismatch.cells(slow), "b": same["b"]}],
                                                 mismatch.p99_ratio("a", ["b"])), (2.0, 2.0))
        noisy = [dict(r, ttft_ms=r["ttft_ms"] * rng.uniform(0.7, 1.3)) for r in recs]
        lo, hi = mismatch.noise_interval([{"a": mismatch.cells(noisy), "b": same["b"]}],
                                         mismatch.p99_ratio("a", ["b"]))
        self.assertTrue(lo < 1.05 and hi > 0.95 and hi - lo > 0.05, (lo, hi))
        # "the better of": the smaller p99 of the two references
        self.assertEqual(mismatch.noise_interval([{"a": same["a"], "b": mismatch.cells(slow),
                                                   "c": same["b"]}],
                                                 mismatch.p99_ratio("a", ["b", "c"])), (1.0, 1.0))


if __name__ == "__main__":
    unittest.main()
