#!/usr/bin/env python3
"""llmgate demo: a local simulated fleet, the gateway in front, real traffic.

Starts four llmsim replicas of mixed speeds (1x, 1x, 0.5x, 0.25x: a fleet
where one GPU is older and one is shared), puts llmgate in front of them, and
drives it with llmload at about 70% of the fleet's capacity, first with
round robin and then with llmgate's default latency-aware policy, on the same
seeded arrival trace. Prints each policy's TTFT and every replica's share,
and one request's access-log line as llmgate wrote it on its standard output
(each policy's lines are kept in access-POLICY.log).

  tools/demo.py [--build DIR] [--seconds N] [--load FRACTION] [--policies a,b]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FLEET = [("fast-1", 1.0), ("fast-2", 1.0), ("half", 0.5), ("quarter", 0.25)]
SLOTS = 8
PROMPT_BYTES = "400-1200"
MAX_TOKENS = "32-96"


def fleet_capacity():
    """Requests/s the fleet sustains, from llmsim's default timing model:
    a step costs 15 ms + 0.5 ms per running sequence (divided by speed);
    with SLOTS sequences running, each generates one token per step; a
    request is ~200 prompt tokens (prefill 100 us/token) and ~64 tokens."""
    step_ms = 15 + 0.5 * SLOTS
    service_s = (64 * step_ms + 200 * 0.1) / 1000.0
    return sum(SLOTS * speed / service_s for _, speed in FLEET)


class Procs:
    def __init__(self):
        self.procs = []

    def start(self, argv, ready_rx, log_path, timeout=10.0, stdout_path=None):
        """Starts argv and waits for its ready line; the rest of its standard output
        goes to stdout_path when given (llmgate's access log), else nowhere."""
        log = open(log_path, "w")
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True)
        self.procs.append(p)
        deadline = time.monotonic() + timeout
        for line in p.stdout:
            m = re.search(ready_rx, line)
            if m:
                if stdout_path:
                    threading.Thread(target=self._copy, args=(p.stdout, stdout_path),
                                     daemon=True).start()
                return p, m
            if time.monotonic() > deadline:
                break
        raise SystemExit("%s did not start; see %s" % (argv[0], log_path))

    @staticmethod
    def _copy(src, path):
        with open(path, "w") as out:
            for line in src:
                out.write(line)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = []


def run_policy(build, work, policy, trace, seconds):
    procs = Procs()
    try:
        backends = []
        for i, (name, speed) in enumerate(FLEET):
            _, m = procs.start([os.path.join(build, "llmsim"), "--listen", "127.0.0.1:0",
                                "--name", name, "--model", "demo-model", "--speed", str(speed),
                                "--slots", str(SLOTS), "--seed", str(100 + i), "--quiet"],
                               r"listen=[^ ]*:(\d+)", os.path.join(work, name + ".log"))
            backends.append({"name": name, "url": "http://127.0.0.1:%s" % m.group(1),
                             "models": ["demo-model"]})
        # no "access_log": one JSON line per request on standard output (the default)
        conf = {"listen": "127.0.0.1:0", "workers": 2, "log_level": "warn",
                "routing": {"policy": policy}, "backends": backends}
        path = os.path.join(work, "llmgate-%s.json" % policy)
        with open(path, "w") as f:
            json.dump(conf, f, indent=2)
        _, m = procs.start([os.path.join(build, "llmgate"), "-c", path],
                           r"listen=[^ ,]*:(\d+)", os.path.join(work, "llmgate-%s.log" % policy),
                           stdout_path=os.path.join(work, "access-%s.log" % policy))
        out = os.path.join(work, "summary-%s.json" % policy)
        subprocess.run([os.path.join(build, "llmload"), "--url", "http://127.0.0.1:" + m.group(1),
                        "--model", "demo-model", "--trace-in", trace, "--stream",
                        "--timeout", "60", "--json", out, "--quiet"],
                       check=True, stdout=subprocess.DEVNULL, timeout=seconds + 120)
        with open(out) as f:
            return json.load(f)
    finally:
        procs.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--load", type=float, default=0.7, help="fraction of fleet capacity")
    ap.add_argument("--policies", default="round_robin,ttft")
    args = ap.parse_args()

    for tool in ("llmgate", "llmsim", "llmload"):
        if not os.path.exists(os.path.join(args.build, tool)):
            raise SystemExit("%s is not built in %s (run tools/demo.sh)" % (tool, args.build))
    work = tempfile.mkdtemp(prefix="llmgate-demo-")
    rate = fleet_capacity() * args.load
    trace = os.path.join(work, "trace.jsonl")
    subprocess.run([os.path.join(args.build, "llmload"), "--url", "http://127.0.0.1:1",
                    "--model", "demo-model", "--rate", "%.2f" % rate, "--duration",
                    str(args.seconds), "--seed", "7", "--prompt-bytes", PROMPT_BYTES,
                    "--max-tokens", MAX_TOKENS, "--trace-out", trace, "--dry-run", "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)

    print("llmgate demo: 4 simulated replicas (speeds %s), %.1f req/s (%.0f%% of capacity), "
          "%.0f s per policy, same trace\n" % (", ".join("%gx" % s for _, s in FLEET), rate,
                                               100 * args.load, args.seconds))
    results = {}
    for policy in args.policies.split(","):
        print("  running %s ..." % policy, flush=True)
        results[policy] = run_policy(args.build, work, policy, trace, args.seconds)

    names = [n for n, _ in FLEET]
    hdr = "%-12s %8s %9s %9s %9s %9s %7s  " % ("policy", "requests", "TTFT p50", "TTFT p90",
                                               "TTFT p99", "e2e p99", "errors") + " ".join(
        "%8s" % n for n in names)
    print("\n" + hdr + "\n" + "-" * len(hdr))
    for policy, s in results.items():
        total = max(1, s["requests"])
        share = " ".join("%7.0f%%" % (100.0 * s["replicas"].get(n, 0) / total) for n in names)
        errors = sum(s["errors"].values())
        print("%-12s %8d %7.0fms %7.0fms %7.0fms %7.0fms %7d  %s" % (
            policy, s["requests"], s["ttft_ms"]["p50"], s["ttft_ms"]["p90"], s["ttft_ms"]["p99"],
            s["e2e_ms"]["p99"], errors, share))
    print("\nfair share by capacity: " + " ".join(
        "%s %.0f%%" % (n, 100 * sp / sum(x for _, x in FLEET)) for n, sp in FLEET))
    n = min(s["requests"] for s in results.values())
    print("(%d requests per policy: p99 rests on the slowest %d of them, p90 on %d)"
          % (n, max(1, n // 100), max(1, n // 10)))
    last = args.policies.split(",")[-1]
    with open(os.path.join(work, "access-%s.log" % last)) as f:
        lines = [ln for ln in f if ln.startswith("{")]
    if lines:
        print("\none request of the %s run, as llmgate logged it on its standard output "
              "(times in ms):\n%s" % (last, lines[len(lines) // 2].rstrip()))
    print("logs, configs and per-request data: %s" % work)


if __name__ == "__main__":
    main()
