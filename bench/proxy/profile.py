#!/usr/bin/env python3
"""Profiles llmgate under the proxy benchmark's load (perf or callgrind).

Usage:
  python3 bench/proxy/profile.py perf      [--conns 64] [--seconds 10] [--sse] [--no-log]
  python3 bench/proxy/profile.py callgrind [--conns 64] [--requests 5000] [--sse] [--no-log]
                                           [--body-bytes N] [--top N]

Starts the pbench backend and llmgate (1 worker, pinned as in run.py), puts
load on it (wrk with small POSTs, or --sse: pbench sse with 200 streams),
and prints the top of the profile; the raw data stays in the output folder
(bench/out/profile-<ts>/). perf samples cpu-clock with DWARF call graphs
(hardware counters are not available in most VMs); callgrind counts
instructions exactly, so before/after comparisons of one change are stable
even on a noisy machine.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (the benchmark's process helpers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tool", choices=("perf", "callgrind"))
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--sse", action="store_true")
    ap.add_argument("--no-log", action="store_true")
    ap.add_argument("--body-bytes", type=int, default=300)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--build", default=os.path.join(run.SRC, "build"))
    ap.add_argument("--out")
    a = ap.parse_args()
    run.BUILD = os.path.abspath(a.build)
    run.OUT = os.path.abspath(a.out or os.path.join(
        run.SRC, "bench", "out", "profile-%s" % time.strftime("%Y%m%d-%H%M%S")))
    os.makedirs(run.OUT, exist_ok=True)
    run.ARGS = argparse.Namespace(sched="other", load_cpus="0", proxy_cpus="1")
    if a.sse:
        be = run.start_pbench_backend("backend", sse=True, events=64, gap_us=10000)
    else:
        be = run.start_pbench_backend("backend")
    gw = None
    vg = None
    try:
        if a.tool == "callgrind":
            # llmgate under valgrind with the benchmark's config; instrumentation
            # starts after a warm-up, so the profile holds exactly a.requests
            c = run.start_contender("llmgate", 1, be.port, log_on=not a.no_log)
            conf = os.path.join(run.OUT, "run", "llmgate-w1", "llmgate.json")
            c.stop()
            out = os.path.join(run.OUT, "callgrind.out")
            vg = run.Proc(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                           "--callgrind-out-file=" + out,
                           os.path.join(run.BUILD, "llmgate"), "-c", conf], "valgrind",
                          cpus="1", pipe=True)
            port = int(vg.readline(timeout=120, pattern=r"llmgate ready .*listen=[^ ,]*:(\d+)")
                       .group(1))
            load(a, port, callgrind=True, count=max(200, a.requests // 10))
            subprocess.run(["callgrind_control", "-i", "on", str(vg.pid)],
                           stdout=subprocess.DEVNULL)
            done = load(a, port, callgrind=True, count=a.requests) or a.requests
            subprocess.run(["callgrind_control", "-i", "off", str(vg.pid)],
                           stdout=subprocess.DEVNULL)
            vg.stop(timeout=60)
            vg = None
            dump = out
            ann = subprocess.run(["callgrind_annotate", "--inclusive=no", dump],
                                 stdout=subprocess.PIPE).stdout.decode()
            m = re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", ann)
            total = int(m.group(1).replace(",", "")) if m else 0
            unit = "event" if a.sse else "request"
            print("instructions per %s: %.0f (%d %ss)" % (unit, total / done, done, unit))
            body = ann[ann.find("file:function"):]
            print("\n".join(body.splitlines()[:a.top + 2]))
            return
        gw = run.start_contender("llmgate", 1, be.port, log_on=not a.no_log)
        load(a, gw.port, warm_only=True)
        data = os.path.join(run.OUT, "perf.data")
        perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "--call-graph",
                                 "dwarf,16384", "-o", data, "-p", str(gw.pids[0])],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        load(a, gw.port)
        perf.send_signal(2)
        perf.wait(60)
        rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--stdio",
                              "--sort", "dso,symbol", "-g", "none", "--percent-limit", "0.7"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.decode()
        print("\n".join(ln for ln in rep.splitlines() if ln and not ln.startswith("#")))
    finally:
        if vg:
            vg.stop()
        if gw:
            gw.stop()
        be.stop()


def load(a, port, warm_only=False, callgrind=False, count=0):
    pb = os.path.join(run.BUILD, "pbench")
    if a.sse and callgrind:
        # 20 streams x 100 events/s (slow enough for llmgate under valgrind);
        # returns how many events the client received
        out = subprocess.run(["taskset", "-c", "0", pb, "sse", "--target", "127.0.0.1:%d" % port,
                              "--streams", "20", "--duration", str(count / 2000), "--warmup",
                              "0", "--spread-us", "10000"], stdout=subprocess.PIPE).stdout
        line = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
        return json.loads(line[-1])["events"] if line else count
    if a.sse:
        secs = 1 if warm_only else a.seconds
        subprocess.run(["taskset", "-c", "0", pb, "sse", "--target", "127.0.0.1:%d" % port,
                        "--streams", "200", "--duration", str(secs), "--warmup", "0.5",
                        "--spread-us", "10000"], stdout=subprocess.DEVNULL)
        return
    if callgrind:
        # a fixed amount of work: instruction counts are then comparable
        subprocess.run(["taskset", "-c", "0", pb, "load", "--target", "127.0.0.1:%d" % port,
                        "--rate", "1000", "--conns", str(a.conns), "--warmup", "0",
                        "--duration", str(count / 1000), "--body-bytes", str(a.body_bytes)],
                       stdout=subprocess.DEVNULL)
        return
    secs = 1 if warm_only else a.seconds
    out = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c%d" % a.conns, "-d%gs" % secs,
                          "-s", run.wrk_script(a.body_bytes),
                          "http://127.0.0.1:%d/v1/chat/completions" % port],
                         stdout=subprocess.PIPE).stdout.decode()
    if not warm_only:
        print([ln for ln in out.splitlines() if "Requests/sec" in ln])


if __name__ == "__main__":
    main()
