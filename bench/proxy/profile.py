#!/usr/bin/env python3
"""Profiles llmgate under the proxy benchmark's load (perf or callgrind).

Usage:
  python3 bench/proxy/profile.py perf      [--conns 64] [--seconds 10] [--sse] [--no-log]
  python3 bench/proxy/profile.py callgrind [--conns 64] [--requests 5000] [--sse] [--no-log]
                                           [--body-bytes N] [--top N] [--defaults] [--stages]
  python3 bench/proxy/profile.py ttft [--backends 1,4,16,64,256] [--requests 2000]
  python3 bench/proxy/profile.py syscalls [--conns 64] [--seconds 5]
                                          [--contenders nginx,haproxy,llmgate-defaults]

Starts the pbench backend and llmgate (1 worker, pinned as in run.py), puts
load on it (wrk with small POSTs, or --sse: pbench sse with 200 streams),
and prints the top of the profile; the raw data stays in the output folder
(bench/out/profile-<ts>/). perf samples cpu-clock with DWARF call graphs
(hardware counters are not available in most VMs); callgrind counts
instructions exactly, so before/after comparisons of one change are stable
even on a noisy machine. --stages splits a request's instructions by stage
(parse, scan, route, record, log, relay...). `ttft` counts the instructions
of the router's decisions with ttftbench (build/ttftbench) under callgrind:
per pick (every candidate changed since the last: no view reused), per view
of every backend, per policy score over them all. `syscalls` counts each
contender's system calls per request (perf stat on the syscalls tracepoints,
every thread and process of it) under wrk at saturation, each with its access
log on as in run.py's `defaults` measure.
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
    ap.add_argument("tool", choices=("perf", "callgrind", "ttft", "syscalls"))
    ap.add_argument("--contenders", default="nginx,haproxy,llmgate-defaults")
    ap.add_argument("--backends", default="1,4,16,64,256")
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--sse", action="store_true")
    ap.add_argument("--no-log", action="store_true")
    ap.add_argument("--defaults", action="store_true",
                    help="llmgate as a user gets it (run.py's llmgate-defaults: ttft, health "
                         "checks and scrapes, access log to a file, workers auto) instead of "
                         "the benchmark's round-robin configuration")
    ap.add_argument("--tracing", action="store_true",
                    help="llmgate with tracing on at 100%% sampling, its spans exported to a "
                         "sink (run.py's llmgate-traced)")
    ap.add_argument("--body-bytes", type=int, default=300)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--stages", action="store_true",
                    help="callgrind: instructions per request by stage (parse, scan, route, "
                         "record, relay, log...): each call chain's own instructions go to the "
                         "nearest stage entry on it (valgrind --separate-callers)")
    ap.add_argument("--build", default=os.path.join(run.SRC, "build"))
    ap.add_argument("--out")
    a = ap.parse_args()
    run.BUILD = os.path.abspath(a.build)
    run.OUT = os.path.abspath(a.out or os.path.join(
        run.SRC, "bench", "out", "profile-%s" % time.strftime("%Y%m%d-%H%M%S")))
    os.makedirs(run.OUT, exist_ok=True)
    run.ARGS = argparse.Namespace(sched="other", load_cpus="0", proxy_cpus="1")
    if a.tool == "ttft":
        ttft_instructions(a)
        return
    if a.tool == "syscalls":
        syscalls(a)
        return
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
            kind = ("llmgate-bare" if a.no_log else "llmgate-defaults") if a.defaults \
                else "llmgate-traced" if a.tracing else "llmgate"
            c = run.start_contender(kind, 1, be.port, log_on=not a.no_log)
            conf = os.path.join(run.OUT, "run", "%s-w1" % kind, "llmgate.json")
            c.stop()
            out = os.path.join(run.OUT, "callgrind.out")
            vg = run.Proc(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                           "--callgrind-out-file=" + out]
                          + (["--separate-callers=%d" % STAGE_DEPTH] if a.stages else [])
                          + [os.path.join(run.BUILD, "llmgate"), "-c", conf], "valgrind",
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
            if a.stages:
                print_stages(dump, done, unit)
                return
            body = ann[ann.find("file:function"):]
            print("\n".join(body.splitlines()[:a.top + 2]))
            return
        kind = ("llmgate-bare" if a.no_log else "llmgate-defaults") if a.defaults \
            else "llmgate-traced" if a.tracing else "llmgate"
        gw = run.start_contender(kind, 1, be.port, log_on=not a.no_log)
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


# ---- the router's decisions ----------------------------------------------------

def ttft_instructions(a):
    """Instructions per call of each ttftbench measurement, by fleet size."""
    count = a.requests
    print("instructions per call (callgrind, %d calls each; ttftbench: %s)" % (
        count, os.path.join(run.BUILD, "ttftbench")))
    print("%8s %10s %12s %10s %16s %16s %14s" % (
        "backends", "candidates", "pick", "per cand", "views (all N)", "score (all N)",
        "score per cand"))
    rows = []
    for n in [int(x) for x in a.backends.split(",")]:
        got = {}
        for what in ("pick", "views", "score"):
            out = os.path.join(run.OUT, "ttft-%d-%s.out" % (n, what))
            subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                            "--toggle-collect=bench_call", os.path.join(run.BUILD, "ttftbench"),
                            "--backends", str(n), "--count", str(count), "--only", what]
                           # every view filled afresh: the instructions of a pick
                           # whose candidates all changed (what the 1 ms reuse of an
                           # unchanged view saves depends on the clock, slowed here)
                           + (["--changed", "all"] if what == "pick" else []),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            ann = subprocess.run(["callgrind_annotate", "--auto=no", out],
                                 stdout=subprocess.PIPE).stdout.decode()
            m = re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", ann)
            got[what] = int(m.group(1).replace(",", "")) / count if m else float("nan")
        cand = n  # every backend of the route is a candidate
        rows.append({"backends": n, "candidates": cand, **got})
        print("%8d %10d %12.0f %10.0f %16.0f %16.0f %14.0f" % (
            n, cand, got["pick"], got["pick"] / cand, got["views"], got["score"],
            got["score"] / n), flush=True)
    with open(os.path.join(run.OUT, "ttft.json"), "w") as f:
        json.dump(rows, f, indent=1)


# ---- system calls per request ---------------------------------------------------

def switches(pids):
    """Context switches (voluntary and not) of every thread of pids."""
    n = 0
    for text in run.thread_stats(pids, "status"):
        n += sum(int(v) for v in re.findall(r"ctxt_switches:\s+(\d+)", text))
    return n


def syscalls(a):
    """System calls per request of each contender under wrk (a.conns, saturation)."""
    rows = {}
    for kind in a.contenders.split(","):
        be = run.start_pbench_backend("backend-" + kind)
        c = None
        try:
            c = run.start_contender(kind, 1, be.port, log_on=True)
            load(a, c.port, warm_only=True)
            pids = run.tree_pids(c.pids[0]) if kind == "nginx" else c.pids
            data = os.path.join(run.OUT, "syscalls-%s.txt" % kind)
            perf = subprocess.Popen(["perf", "stat", "-x", ",", "-o", data, "-e",
                                     "syscalls:sys_enter_*", "-p", ",".join(map(str, pids))],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.3)
            cpu0, user0, cs0 = run.cpu_ns(pids), run.user_ns(pids), switches(pids)
            out = subprocess.run(["taskset", "-c", "0", "wrk", "-t1", "-c%d" % a.conns,
                                  "-d%gs" % a.seconds, "-s", run.wrk_script(a.body_bytes),
                                  "http://127.0.0.1:%d/v1/chat/completions" % c.port],
                                 stdout=subprocess.PIPE).stdout.decode()
            cpu, user = run.cpu_ns(pids) - cpu0, run.user_ns(pids) - user0
            cs = switches(pids) - cs0
            perf.send_signal(2)
            perf.wait(60)
            n = int(re.search(r"(\d+) requests in", out).group(1))
            counts = {}
            with open(data) as f:
                for ln in f:
                    parts = ln.strip().split(",")
                    if len(parts) > 2 and parts[2].startswith("syscalls:sys_enter_") \
                            and parts[0].isdigit() and int(parts[0]) > 0:
                        counts[parts[2][len("syscalls:sys_enter_"):]] = int(parts[0])
            rows[kind] = {"requests": n, "per_request": {k: v / n for k, v in counts.items()},
                          "cpu_us": cpu / n / 1e3, "user_us": user / n / 1e3,
                          "switches": cs / n}
            print("%s: %d requests; per request %.2f system calls, %.3f context switches, "
                  "CPU %.1f us (user %.1f)" % (kind, n, sum(counts.values()) / n, cs / n,
                                              cpu / n / 1e3, user / n / 1e3), flush=True)
        finally:
            if c:
                c.stop()
            be.stop()
    names = sorted({k for r in rows.values() for k in r["per_request"]},
                   key=lambda k: -max(r["per_request"].get(k, 0) for r in rows.values()))
    kinds = list(rows)
    print("\n%-18s" % "per request" + "".join("%18s" % k for k in kinds))
    for k in names:
        vals = [rows[x]["per_request"].get(k, 0) for x in kinds]
        if max(vals) >= 0.005:
            print("%-18s" % k + "".join("%18.3f" % v for v in vals))
    print("%-18s" % "total" + "".join("%18.3f" % sum(rows[x]["per_request"].values())
                                      for x in kinds))
    with open(os.path.join(run.OUT, "syscalls.json"), "w") as f:
        json.dump(rows, f, indent=1)


# ---- stages -------------------------------------------------------------------

# Frames of a call chain kept apart (valgrind --separate-callers): deep enough
# for the request's path from the event loop down to libc. (A chain starts at
# the frame its thread was in when the instrumentation was turned on: the
# workers' event_base_loop, the log writer's alog_writer.)
STAGE_DEPTH = 40

# The stages of a request and their entry functions. A call chain's own
# instructions go to the stage of the innermost entry on the chain: memcpy
# under record_line (formatting the access-log line) is "log", under
# lg_record_request elsewhere "record", under lg_relay_read "relay" unless a
# stage nearer to it (a request finishing inside the relay's read: "record").
STAGES = [
    ("parse", "the request through llhttp (serve/reader.c), the head's checks",
     {"lg_reader_run", "lg_reader_init", "client_on_head"}),
    ("scan", "the body's JSON: model, stream, sizes, prefix hash (http/openai.c)",
     {"lg_openai_inspect", "lg_openai_inspect_mem"}),
    ("route", "candidates, views, the policy, the explanation (route/router.c)",
     {"lg_router_pick", "lg_router_note_result", "lg_router_has_candidate"}),
    ("record", "counters, metrics, backend statistics (serve/record.c)",
     {"lg_record_request"}),
    ("log", "the access-log line (record.c's record_line) and its writer thread",
     {"record_line", "lg_accesslog_append", "alog_writer"}),
    ("probe", "the response's JSON or SSE read for its first token and usage (http/sse.c)",
     {"lg_json_probe_feed", "lg_sse_feed"}),
    ("relay", "the request out, the response's head and body (serve/relay.c)",
     {"lg_relay_start", "lg_relay_send_request", "lg_relay_write_head", "lg_relay_read",
      "lg_relay_end", "lg_relay_resume"}),
    ("attempt", "an attempt's place on its backend and what it teaches; hedging, resumption",
     ("lg_attempt_", "lg_hedge_", "lg_resume_")),
    ("upstream", "backend connections and their pool (serve/upstream.c)", ("lg_upstream_",)),
    ("health", "the fleet's thread: health checks and /metrics scrapes (fleet/health.c)",
     ("health_", "lg_health_")),
    ("admin", "the admin thread", ("admin_", "lg_admin_")),
]
# No stage on the chain: the connection and request code between the stages,
# or (none of ours either) the event loop, socket I/O and what libc does there.
GLUE = ("proxy_", "lg_proxy_", "client_", "lg_client_", "auth_", "lg_auth_", "lg_admission_",
        "admission_", "lg_endpoints_", "endpoints_", "listener_", "lg_listener_", "reader_",
        "gateway_", "lg_gateway_")


def stage_of(frames):
    """The stage of a call chain (innermost frame first)."""
    for fn in frames:
        for name, _, entries in STAGES:
            if (fn in entries) if isinstance(entries, set) else fn.startswith(entries):
                return name
    for fn in frames:
        if fn.startswith(GLUE):
            return "glue"
    return "loop"


def print_stages(dump, done, unit):
    """Instructions per request by stage, from a --separate-callers profile."""
    ann = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no",
                          dump], stdout=subprocess.PIPE).stdout.decode()
    cost = {}
    total = 0
    rx = re.compile(r"^\s*([\d,]+) \([ \d.]+%\)\s+(\S.*?)(?: \[[^\]]*\])?$")
    for line in ann[ann.find("file:function"):].splitlines()[2:]:
        m = rx.match(line)
        if not m:
            if line.strip():
                continue
            break  # the end of the function table
        ir = int(m.group(1).replace(",", ""))
        name = m.group(2)
        name = name.split(":", 1)[1] if ":" in name.split("'", 1)[0] else name
        # fn'caller'caller..., where a bare number marks a recursion depth
        frames = [f for f in name.split("'") if f and not f.isdigit()]
        st = stage_of(frames)
        cost[st] = cost.get(st, 0) + ir
        total += ir
    names = [(s[0], s[1]) for s in STAGES] + [
        ("glue", "the connection and request code between the stages (client.c, proxy.c...)"),
        ("loop", "the event loop, socket reads and writes (libevent, libc; the kernel's "
                 "work is not counted)")]
    print("\nstage      instructions/%s  share  what" % unit)
    for name, what in names:
        ir = cost.get(name, 0)
        print("%-9s %19.0f %5.1f%%  %s" % (name, ir / done, 100.0 * ir / max(1, total), what))
    print("%-9s %19.0f %5.1f%%" % ("total", total / done, 100.0))
    with open(os.path.join(run.OUT, "stages.json"), "w") as f:
        json.dump({"per_%s" % unit: {k: v / done for k, v in cost.items()},
                   "total_per_%s" % unit: total / done, "n": done}, f, indent=1)


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
