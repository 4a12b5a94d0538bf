"""The routing benchmark's offline fleet model (bench/routing/fleetmodel.py).

Its schedule is checked against llmsim's timing model in closed form, its
exact prediction against its own replay, two gateways hearing of each other
at once against one, and its replay of a real run
(llmsim replicas behind llmgate, driven by llmload through the benchmark's
own runner) against the TTFTs measured there, request by request."""

import io
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest
import unittest.mock
from contextlib import redirect_stdout

sys.path.insert(0, os.path.dirname(__file__))
from harness import BUILD, SANITIZED, SRC, VALGRIND  # noqa: E402

sys.path.insert(0, os.path.join(SRC, "bench", "routing"))
import fleetmodel  # noqa: E402
import scenarios  # noqa: E402

SIM = scenarios.SIM
RUN = os.path.join(SRC, "bench", "routing", "run.py")


def write_trace(path, reqs):
    with open(path, "w") as f:
        for t_ms, prompt_bytes, max_tokens in reqs:
            f.write(json.dumps({"t_us": int(t_ms * 1000), "prompt_bytes": prompt_bytes,
                                "max_tokens": max_tokens, "group": -1}) + "\n")


def mixed_trace(path, seed):
    """20 s of Poisson arrivals at 70% of scenario 1a's capacity, the
    benchmark's request mix; written to path, returned as rows."""
    rng = random.Random(seed)
    t, rows = 0.0, []
    rate = 0.7 * scenarios.capacity_rps(SIM, scenarios.HETERO, scenarios.PROMPT,
                                         scenarios.MAX_TOKENS)
    while t < 20000:
        t += rng.expovariate(rate / 1000.0)
        rows.append((t, rng.randint(256, 2048),
                     rng.randint(16, 64) if rng.random() < 0.8 else rng.randint(128, 256)))
    write_trace(path, rows)
    return rows


def model_json(argv):
    out = io.StringIO()
    with redirect_stdout(out):
        fleetmodel.main(argv + ["--json"])
    return [json.loads(ln) for ln in out.getvalue().splitlines()]


class FleetModelSchedule(unittest.TestCase):
    def step(self, prefill_tokens, running, speed=1.0):
        return (SIM["prefill_us_per_token"] / 1000.0 * prefill_tokens + SIM["decode_ms"]
                + SIM["decode_ms_per_seq"] * running) / speed

    def test_llmsim_timing(self):
        r = fleetmodel.Replica("r1", 0.5, SIM)
        a = fleetmodel.Request(0, 0.0, 400, 3)      # 100 prompt tokens
        b = fleetmodel.Request(1, 1.0, 800, 2)      # arrives during a's first step
        r.submit(a, a.t)
        r.advance(b.t)
        r.submit(b, b.t)
        r.advance(float("inf"))
        s1 = self.step(100, 1, 0.5)                 # a alone, prefilled
        s2 = self.step(200, 2, 0.5)                 # b admitted at the next step
        s3 = self.step(0, 2, 0.5)
        self.assertAlmostEqual(a.first, s1)
        self.assertAlmostEqual(b.first, s1 + s2)
        self.assertAlmostEqual(a.done, s1 + s2 + s3)  # 3 tokens: steps 1, 2, 3
        self.assertAlmostEqual(b.done, s1 + s2 + s3)  # 2 tokens: steps 2, 3

    def test_full_slots_wait_for_an_end(self):
        # the first arrival starts a step alone; 16 more arrive during it
        r = fleetmodel.Replica("r1", 1.0, SIM)
        slots = SIM["slots"]
        reqs = [fleetmodel.Request(0, 0.0, 4, 3)]
        reqs += [fleetmodel.Request(i, 1.0, 4, 5) for i in range(1, slots + 1)]
        for q in reqs:
            r.advance(q.t)
            r.submit(q, q.t)
        r.advance(float("inf"))
        s1 = self.step(1, 1)
        s2 = self.step(slots - 1, slots)            # 15 admitted, the 16th of them waits
        self.assertAlmostEqual(reqs[slots - 1].first, s1 + s2)
        # the first ends after 3 tokens; the one left waiting takes its slot
        self.assertAlmostEqual(reqs[0].done, s1 + s2 + self.step(0, slots))
        self.assertAlmostEqual(reqs[slots].first, reqs[0].done + self.step(1, slots))

    def test_schedules_closed_form(self):
        # tests/unit/test_llmsim_engine.c's case: three slots, 10 us a prompt
        # token, 4 ms a prefilling step, 2 ms + 1 ms x batch^2; A (100 tokens,
        # 4 out) alone, B (200 tokens, 2 out) 2 ms into A's first step (8 ms)
        sim = dict(SIM, slots=3, prefill_us_per_token=10.0, prefill_fixed_ms=4.0, decode_ms=2.0,
                   decode_ms_per_seq=1.0, decode_batch_exp=2.0)
        want = {  # A first, A done, B first, B done
            "fcfs": (8, 29, 20, 26),
            "prefill-first": (8, 29, 17, 23),   # B's prefill step holds A
            "chunked": (8, 36, 30, 36),         # 120 a step: B's 200 in two chunks
        }
        for schedule, times in want.items():
            r = fleetmodel.Replica("r1", 1.0, dict(sim, schedule=schedule, step_tokens=120
                                                   if schedule == "chunked" else 0))
            a = fleetmodel.Request(0, 0.0, 400, 4)
            b = fleetmodel.Request(1, 2.0, 800, 2)
            r.submit(a, a.t)
            r.advance(b.t)
            r.submit(b, b.t)
            r.advance(float("inf"))
            got = (a.first, a.done, b.first, b.done)
            for g, w in zip(got, times):
                self.assertAlmostEqual(g, w, places=6, msg="%s: %s" % (schedule, got))

    def test_prediction_every_schedule(self):
        # the predictor's passes against the replica's steps, on every
        # schedule: a request no later one overtook (arrived before its first
        # token) gets exactly the predicted TTFT, the others never less
        for schedule, budget in (("fcfs", 0), ("prefill-first", 0), ("chunked", 256),
                                 ("chunked", 40)):
            rng = random.Random(9)
            sim = dict(SIM, slots=6, prefill_fixed_ms=3.0, decode_batch_exp=1.3,
                       schedule=schedule, step_tokens=budget)
            x = fleetmodel.Replica("r1", 1.0, sim)
            t, pairs = 0.0, []
            for i in range(400):  # about 70% of its capacity
                t += rng.expovariate(1 / 140.0)
                q = fleetmodel.Request(i, t, rng.randint(4, 1200), rng.choice([1, 16, 40, 90]))
                x.advance(t)
                pairs.append((q, x.predict(t, q.tokens)))
                x.submit(q, t)
            x.advance(float("inf"))
            clean = queued = 0
            for k, (q, p) in enumerate(pairs):
                d = q.first - q.t - p
                self.assertGreaterEqual(d, -1e-6, (schedule, k))
                queued += p > 1.5 * x.step_ms(q.tokens, sim["slots"])
                if k + 1 == len(pairs) or pairs[k + 1][0].t >= q.first:
                    clean += 1
                    self.assertAlmostEqual(d, 0.0, places=6, msg=(schedule, k))
            self.assertGreater(clean, 100, schedule)
            self.assertGreater(queued, 50, schedule)  # some predictions ran a queue forward

    def test_saturated_capacity(self):
        # the default fleet's closed form (scenarios.request_cost_ms) against a
        # replica that never runs dry: the closed form counts every step full
        def sat(sim, speed=1.0):
            return fleetmodel.saturated_rps(sim, speed, scenarios.PROMPT, scenarios.MAX_TOKENS)

        for speed in (1.0, 0.25):
            closed = scenarios.capacity_rps(SIM, [speed], scenarios.PROMPT, scenarios.MAX_TOKENS)
            self.assertLess(abs(sat(SIM, speed) / closed - 1), 0.06, (speed, closed))
        base = sat(SIM)
        # a prefill step of its own (with its decode cost) for each admission
        self.assertLess(sat(dict(SIM, schedule="prefill-first")), 0.97 * base)
        # a fixed cost per prefilling step: about one a request at these sizes
        self.assertLess(sat(dict(SIM, prefill_fixed_ms=20.0)), 0.85 * base)

    def test_prediction_is_the_replayed_outcome(self):
        # a request's prediction is exact unless one that came after it joins
        # its step (its prefill lengthens that step): never above, and equal
        # for nearly all of a moderately loaded fleet's requests
        rng = random.Random(5)
        fleet = fleetmodel.fleet_for(scenarios.by_id()["1a"])
        t, pairs = 0.0, []
        for i in range(600):
            t += rng.expovariate(1 / 40.0)
            q = fleetmodel.Request(i, t, rng.randint(256, 2048), rng.choice([16, 40, 200]))
            for x in fleet:
                x.advance(t)
            x = fleet[rng.randrange(len(fleet))]
            pairs.append((q, x.predict(t, q.tokens)))
            x.submit(q, t)
        for x in fleet:
            x.advance(float("inf"))
        diffs = [q.first - q.t - p for q, p in pairs]
        self.assertGreaterEqual(min(diffs), -1e-6)
        exact = sum(1 for d in diffs if d < 1e-6)
        self.assertGreater(exact / len(diffs), 0.7, "exact %d of %d" % (exact, len(diffs)))

    def test_policies_on_a_trace(self):
        # 70% of a mixed fleet's capacity: placing by the exact first token
        # beats least connections, and both place every request
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "trace.jsonl")
            rows = mixed_trace(trace, 11)
            out = {r["policy"]: r for r in model_json([trace, "--scenario", "1a"])}
            for name in ("greedy", "least_conn", "tolerant"):
                self.assertEqual(out[name]["n"], len(rows))
                self.assertAlmostEqual(sum(out[name]["share"]), 100.0, places=6)
            self.assertLess(out["greedy"]["p99"], out["least_conn"]["p99"])
            # the slowest replica gets a smaller share from the TTFT pick
            self.assertLess(out["greedy"]["share"][3], out["least_conn"]["share"][3])
            # two gateways that hear of each other's requests at once place
            # as one; hearing every 250 ms they do worse (both send to the
            # same free slot in between)
            two = {iv: model_json([trace, "--scenario", "1b", "--policy", "greedy",
                                   "--gateways", "2", "--peer-interval", iv])[0]
                   for iv in ("0", "250")}
            one = model_json([trace, "--scenario", "1b", "--policy", "greedy"])[0]
            self.assertEqual(two["0"]["p99"], one["p99"])
            self.assertEqual(two["0"]["share"], one["share"])
            self.assertGreater(two["250"]["p99"], one["p99"])


    def test_end_to_end_policy_and_family(self):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "trace.jsonl")
            rows = mixed_trace(trace, 12)
            # with no window, charges or tolerance it is the greedy pick
            bare = "e2e:window=0:decode=0:interference=0:batch=0:tolerance=0"
            out = {r["policy"]: r for r in model_json(
                [trace, "--scenario", "1a", "--policy", "greedy,tolerant,e2e," + bare])}
            self.assertEqual(out[bare]["p99"], out["greedy"]["p99"])
            self.assertEqual(out[bare]["share"], out["greedy"]["share"])
            # charged for its decode and the answers it holds up, long answers
            # end sooner than under the first-token pick
            self.assertEqual(out["e2e"]["n"], len(rows))
            self.assertLess(out["e2e"]["e2e_p99"], out["tolerant"]["e2e_p99"])
            # long: answers shorter than it are placed by the tolerant pick
            out = {r["policy"]: r for r in model_json(
                [trace, "--scenario", "1a", "--policy", "tolerant,e2e:long=100000"])}
            self.assertEqual(out["e2e:long=100000"]["share"], out["tolerant"]["share"])
            self.assertEqual(out["e2e:long=100000"]["p99"], out["tolerant"]["p99"])
            with self.assertRaises(SystemExit), redirect_stdout(io.StringIO()), \
                    unittest.mock.patch("sys.stderr", io.StringIO()):
                fleetmodel.main([trace, "--policy", "e2e:wndow=5"])
            # --family pools the draws it finds (m0: the fleet)
            os.makedirs(os.path.join(tmp, "fam", "m0-70"))
            os.rename(trace, os.path.join(tmp, "fam", "m0-70", "trace.jsonl"))
            buf = io.StringIO()
            with redirect_stdout(buf):
                fleetmodel.main(["--family", os.path.join(tmp, "fam"),
                                 "--policy", "least_conn,tolerant"])
            lines = buf.getvalue().splitlines()
            self.assertTrue(lines[0].startswith("70% load, 1 draws"), lines)
            first = lines[2].split()
            self.assertEqual((first[0], first[2], first[4]), ("least_conn", "1.00", "1.00"))
            self.assertEqual(lines[3].split()[0], "tolerant")


class FleetModelAgainstLlmsim(unittest.TestCase):
    def test_replay_matches_a_real_run(self):
        if VALGRIND or SANITIZED:
            self.skipTest("timing comparison: needs the plain build")
        with tempfile.TemporaryDirectory(prefix="lgfleetmodel-") as tmp:
            out = os.path.join(tmp, "run")
            argv = [sys.executable, RUN, "--quick", "--scenario", "1a", "--rounds", "1",
                    "--duration", "4", "--contenders", "round_robin", "--no-realtime",
                    "--no-plots", "--build", BUILD, "--out", out]
            r = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
            run_dir = os.path.join(out, "1a", "round_robin", "round1")
            rows = model_json([os.path.join(out, "1a", "trace.jsonl"), "--scenario", "1a",
                               "--policy", "replay:" + run_dir])
            self.assertEqual(len(rows), 1)
            row = rows[0]
            self.assertGreater(row["n"], 50)
            # the model leaves out the network and the gateway (about a
            # millisecond): per request it reads a little low, never far off
            self.assertLess(abs(row["error_p50"]), 5.0, row)
            self.assertGreater(row["error_p10"], -15.0, row)
            self.assertLess(row["error_p90"], 5.0, row)


if __name__ == "__main__":
    unittest.main()
