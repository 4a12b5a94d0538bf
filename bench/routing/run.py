#!/usr/bin/env python3
"""Routing benchmark: llmgate's policies against nginx, HAProxy and an oracle
on simulated fleets (llmsim) under the same seeded traffic (llmload).

    bench/routing/run.py                         # every scenario, 2 rounds
    bench/routing/run.py --quick --scenario 1    # a short smoke run
    bench/routing/run.py --scenario 2,6 --contenders round_robin,ttft,oracle
    bench/routing/run.py --scenario mismatch --draws 8 --fresh-traces --nice -10
    bench/routing/run.py --scenario moving --draws 8 --fresh-traces --nice -10

For each scenario: one arrival trace (llmload --dry-run --trace-out), replayed
against every contender; a fresh fleet (new llmsim processes, same seeds) for
every contender and round; contenders interleaved across rounds (A B C A B C).
Prints a table per scenario and writes, under --out: results.json, results.md,
each run's logs (per-request JSONL, access logs, configs), the plot data and
the SVG/PNG plots. Python 3 standard library only. See bench/routing/README.md.
"""

import argparse
import datetime
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import mismatch as M  # noqa: E402
import procs as P  # noqa: E402
import report as R  # noqa: E402
import scenarios as S  # noqa: E402
import shapes as SH  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="all",
                    help="'all', a scenario number (1..8), a variant (1a, 1b, 6r, 8b), 'mismatch' "
                         "(the family of drawn fleets), one of its draws (m3) or scenarios "
                         "(m3-90), 'moving' (the drawn fleets under load that moves: "
                         "shapes.py), one of its draws (moving:m3) or scenarios (m3-crash), "
                         "or a comma list")
    ap.add_argument("--draws", type=int, default=8,
                    help="mismatch: how many fleets to draw (default 8)")
    ap.add_argument("--draw-seed", type=int, default=1,
                    help="mismatch: the seed of the draws (default 1)")
    ap.add_argument("--block-s", type=float, default=M.BLOCK_S,
                    help="mismatch: seconds of arrivals per block of the noise intervals' "
                         "bootstrap (default %g)" % M.BLOCK_S)
    ap.add_argument("--gauge-lags", action="store_true",
                    help="mismatch: each engine software's lag of its running gauge behind a "
                         "request's end (mismatch.GAUGE_LAG_STEPS: vLLM a step, SGLang 20)")
    ap.add_argument("--shapes", default=None,
                    help="moving: the shapes to run, a comma list (default all: %s)"
                         % ",".join(SH.SHAPES))
    ap.add_argument("--tail-min", type=int, default=SH.TAIL_MIN,
                    help="moving: each contender's p99 TTFT rests on at least this many "
                         "requests over the rounds (the runs are made that long; default %d)"
                         % SH.TAIL_MIN)
    ap.add_argument("--load-reports", choices=sorted(P.LOAD_REPORTS), default=None,
                    help="llmsim replicas answer the engines' load reports: 'engine' as their "
                         "engine software does (vLLM's endpoint-load-metrics header on answers "
                         "not streamed and GET /load, SGLang's GET /v1/loads), 'all' every "
                         "report, the header in streams' heads too (default: none)")
    ap.add_argument("--rounds", type=int, default=2, help="runs per contender (default 2)")
    ap.add_argument("--fresh-traces", action="store_true",
                    help="round N replays its own trace, drawn with the scenario's seed + N - 1 "
                         "(the same for every contender), so that pooled percentiles average "
                         "over traces as well as runs (default: one trace for every round)")
    ap.add_argument("--quick", action="store_true",
                    help="short durations and answers, for a smoke run")
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of arrivals for every scenario, overriding its own (fault "
                         "times are not moved)")
    ap.add_argument("--contenders", default=None,
                    help="comma list replacing each scenario's own (e.g. round_robin,ttft,nginx)")
    ap.add_argument("--out", default=None,
                    help="output folder (default bench/out/routing-<timestamp>/)")
    ap.add_argument("--build", default=os.environ.get("LG_BUILD") or os.path.join(SRC, "build"),
                    help="CMake build folder with llmgate, llmsim, llmload, plugins/oracle.so")
    ap.add_argument("--ref-build", default=None, metavar="DIR",
                    help="a second build: a contender named X@ref runs that build's llmgate "
                         "(before/after comparisons in one interleaved run)")
    ap.add_argument("--workers", type=int, default=1,
                    help="event-loop threads / worker processes of every proxy (default 1)")
    ap.add_argument("--pin", default="auto",
                    help="CPU pinning: auto (only with 4+ CPUs), off, or LOAD:PROXY:FLEET "
                         "taskset lists, e.g. 0:1:2-3")
    ap.add_argument("--realtime", dest="realtime", action="store_true", default=None,
                    help="run llmload under SCHED_FIFO (default: when root)")
    ap.add_argument("--no-realtime", dest="realtime", action="store_false")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness of the fleet and the proxies, e.g. -10 on a machine shared "
                         "with other work (default 0)")
    ap.add_argument("--real-capacity", type=float, default=None, metavar="RPS",
                    help="scenario real: the fleet's capacity measured on this machine "
                         "(README, \"Real engines\": llmload --concurrency 8 through ttft), "
                         "in place of the development machine's %g req/s" % S.REAL_CAPACITY_RPS)
    ap.add_argument("--no-plots", action="store_true", help="skip gnuplot")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.real_capacity is not None and not args.real_capacity > 0:
        ap.error("--real-capacity must be positive")
    if args.draws < 1:
        ap.error("--draws must be at least 1")
    if not args.block_s > 0:
        ap.error("--block-s must be positive")
    if args.tail_min < 1:
        ap.error("--tail-min must be at least 1")
    if args.shapes:
        args.shapes = [x.strip() for x in args.shapes.split(",") if x.strip()]
        bad = [x for x in args.shapes if x not in SH.SHAPES]
        if bad or not args.shapes:
            ap.error("--shapes: unknown %s (known: %s)" % (",".join(bad) or "(none)",
                                                            ",".join(SH.SHAPES)))
    if args.realtime is None:
        args.realtime = os.geteuid() == 0
    return args


def pinning(spec):
    if spec == "off" or (spec == "auto" and (os.cpu_count() or 1) < 4):
        return {"load": None, "proxy": None, "fleet": None}
    if spec == "auto":
        n = os.cpu_count()
        return {"load": "0", "proxy": "1", "fleet": "2-%d" % (n - 1)}
    parts = spec.split(":")
    if len(parts) != 3:
        raise SystemExit("--pin: expected auto, off or LOAD:PROXY:FLEET")
    return {"load": parts[0] or None, "proxy": parts[1] or None, "fleet": parts[2] or None}


def foreign_rt(own):
    """Names of user-space processes outside this benchmark running under a
    real-time policy: they take the CPUs from the fleet and the proxy."""
    names = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in own:
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                stat = f.read()
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if not f.read(1):
                    continue  # a kernel thread
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if len(fields) > 38 and fields[38] in ("1", "2"):  # SCHED_FIFO, SCHED_RR
            names.add(comm)
    return names


class RtWatch(threading.Thread):
    """Samples foreign real-time processes once a second during a run."""

    def __init__(self, own):
        super().__init__(daemon=True)
        self.own = own
        self.seen = {}
        self.stop = threading.Event()

    def run(self):
        while True:
            for name in foreign_rt(self.own()):
                self.seen[name] = self.seen.get(name, 0) + 1
            if self.stop.wait(1.0):
                return


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def machine_info(args):
    def cmd(argv):
        try:
            r = subprocess.run(argv, capture_output=True, timeout=10)
            return (r.stdout + r.stderr).decode().strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return None
    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), None)
    except OSError:
        pass
    nginx, haproxy = P.which("nginx"), P.which("haproxy")
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(), "cpu_model": cpu, "kernel": os.uname().release,
        "loadavg_start": loadavg(),
        "git": cmd(["git", "-C", SRC, "describe", "--always", "--dirty"]),
        "nginx": cmd([nginx, "-v"]) if nginx else None,
        "haproxy": cmd([haproxy, "-v"]) if haproxy else None,
        "argv": sys.argv[1:], "workers": args.workers, "realtime": args.realtime,
        "nice": args.nice,
        "pinning": pinning(args.pin),
    }


# ---- traces ------------------------------------------------------------------

def load_flags(scen):
    out = []
    if scen["prefix_groups"]:
        out += ["--prefix-groups", str(scen["prefix_groups"]),
                "--prefix-bytes", str(scen["prefix_bytes"])]
    return out


def make_trace(build, scen, rate, duration, path, seed=None):
    """Draws the trace at `rate` (a ramp's peak: shapes.ramp_trace() thins it
    into the ramp); returns its number of requests."""
    seed = scen["seed"] if seed is None else seed
    argv = [os.path.join(build, "llmload"), "--dry-run", "--quiet",
            "--rate", "%.4f" % rate, "--duration", "%g" % duration, "--seed", str(seed),
            "--prompt-bytes", scen["prompt_bytes"], "--max-tokens", scen["max_tokens"],
            "--trace-out", path] + load_flags(scen)
    if scen["burst"]:
        argv += ["--burst", scen["burst"]]
    r = subprocess.run(argv, capture_output=True)
    if r.returncode != 0:
        raise SystemExit("llmload --dry-run failed: %s" % r.stderr.decode())
    if scen.get("ramp"):
        return SH.ramp_trace(path, scen["ramp"], duration, seed)
    with open(path) as f:
        return sum(1 for _ in f)


def split_trace(path, a, b, seed):
    """Splits a trace in two at random (seeded): each half stays a Poisson stream."""
    rng = random.Random(seed)
    with open(path) as f, open(a, "w") as fa, open(b, "w") as fb:
        for line in f:
            (fa if rng.random() < 0.5 else fb).write(line)


# ---- contenders ------------------------------------------------------------------

REF_SUFFIX = "@ref"


def split_ref(name):
    """'ttft+decode_weight=0@ref' -> ('ttft+decode_weight=0', True): the
    contender runs the llmgate of --ref-build."""
    if name.endswith(REF_SUFFIX):
        return name[:-len(REF_SUFFIX)], True
    return name, False


def split_options(name):
    """'ttft+decode_weight=0+slots=32' -> ('ttft', {'decode_weight': 0, 'slots': 32}):
    an llmgate policy with options, for trying a policy's settings side by side."""
    base, *opts = name.split("+")
    out = {}
    for o in opts:
        k, eq, v = o.partition("=")
        if not eq or not k:
            raise SystemExit("contender %r: options are +NAME=NUMBER" % name)
        try:
            out[k] = float(v)
        except ValueError:
            raise SystemExit("contender %r: %r is not a number" % (name, v))
    return base, out


def contender_kind(name):
    name, ref = split_ref(name)
    name, opts = split_options(name)
    if (opts or ref) and (name in S.PEERS or name == "oracle"):
        raise SystemExit("contender %r: options and %s apply to llmgate's own policies"
                         % (name, REF_SUFFIX))
    if name in S.PEERS:
        return name, 1
    if name.endswith(S.DUAL_SUFFIX) and name[:-len(S.DUAL_SUFFIX)] in S.LLMGATE_ROUTING:
        return "llmgate", 2
    if name in S.LLMGATE_ROUTING:
        return "llmgate", 1
    raise SystemExit("unknown contender %r (known: %s, X%s)" % (
        name, ", ".join(list(S.LLMGATE_ROUTING) + list(S.PEERS)), S.DUAL_SUFFIX))


# Contender options that set routing.hedge instead of a policy's options:
# +hedge=0|1 (enabled), +hedge_factor=F, +hedge_min_ms=MS, +hedge_max_ms=MS,
# +hedge_budget=R (budget_ratio).
HEDGE_OPTIONS = {
    "hedge": ("enabled", lambda v: v != 0),
    "hedge_factor": ("factor", float),
    "hedge_min_ms": ("min", lambda v: "%gms" % v),
    "hedge_max_ms": ("max", lambda v: "%gms" % v),
    "hedge_budget": ("budget_ratio", float),
}


def hedge_for(popts):
    """Pops the hedge options out of a contender's options: routing.hedge, or None."""
    hedge = {}
    for k, (key, conv) in HEDGE_OPTIONS.items():
        if k in popts:
            hedge[key] = conv(popts.pop(k))
    return hedge or None


def routing_for(name, scen, build, shm_dir):
    name, popts = split_options(split_ref(name)[0])
    for k in ("peers", "peer_interval"):
        popts.pop(k, None)  # not policy options: see make_contender
    hedge = hedge_for(popts)
    base = name[:-len(S.DUAL_SUFFIX)] if name.endswith(S.DUAL_SUFFIX) else name
    routing = json.loads(json.dumps(S.LLMGATE_ROUTING[base]))
    if popts:
        # the options go to the last stage of the pipeline (the load policy)
        pipe = routing.get("pipeline") or [routing.pop("policy")]
        last = pipe[-1] if isinstance(pipe[-1], dict) else {"policy": pipe[-1]}
        last.setdefault("options", {}).update(popts)
        routing["pipeline"] = pipe[:-1] + [last]
    stages = [st for st in routing.get("pipeline", [])
              if isinstance(st, dict) and st.get("policy") == "oracle"]
    if stages:
        so = os.path.join(build, "plugins", "oracle.so")
        if not os.path.exists(so):
            raise P.Unavailable("%s not built" % so)
        opts = {"shm": os.path.join(shm_dir, "%s.state")}
        if scen["prefix_groups"]:
            opts["shared_bytes"] = len("system") + scen["prefix_bytes"]
        routing["plugins"] = [so]
        for st in stages:
            st["options"] = opts
    if hedge is not None:
        routing["hedge"] = hedge
    return routing


def make_contender(name, scen, args, rundir, fleet, shm_dir, pins):
    kind, instances = contender_kind(name)
    if kind == "nginx":
        if not P.which("nginx"):
            raise P.Unavailable("nginx is not installed (tools/install-deps.sh --bench)")
        return "nginx", P.Nginx(rundir, fleet, args.workers, cpus=pins["proxy"])
    if kind == "haproxy":
        if not P.which("haproxy"):
            raise P.Unavailable("haproxy is not installed (tools/install-deps.sh --bench)")
        return "haproxy", P.Haproxy(rundir, fleet, args.workers, cpus=pins["proxy"])
    build = args.ref_build if split_ref(name)[1] else args.build
    # several instances tell each other their requests (config "peers"), as
    # an operator sets them up; +peers=0 leaves them strangers, and
    # +peer_interval=MS sets how often they ask each other
    gopts = split_options(split_ref(name)[0])[1]
    peers = gopts.get("peers", 1) != 0
    return "llmgate", P.Llmgate(build, rundir, fleet, routing_for(name, scen, args.build,
                                                                  shm_dir),
                                args.workers, instances=instances, cpus=pins["proxy"],
                                peers=peers, peer_interval_ms=gopts.get("peer_interval"),
                                load_reports=not split_ref(name)[1])


# ---- one run -------------------------------------------------------------------------

def schedule_faults(fleet, ctx, t0_wall, stop, events):
    """Starts the threads that inject the scenario's faults relative to t0_wall (s)."""
    threads = []

    def at(t):
        delay = t0_wall + t - time.time()
        return delay <= 0 or not stop.wait(delay)

    sd = ctx.get("slowdown")
    if sd:
        def slow():
            if at(sd["at"]):
                w = fleet.control(sd["replica"], {"fault": "slow@0:%g:%g" % (sd["factor"],
                                                                              sd["for"])})
                events.append((w, "slow"))
        threads.append(threading.Thread(target=slow, daemon=True))
    for i, spec, t in ctx.get("faults") or ():
        def inject(i=i, spec=spec, t=t):
            if at(t):
                w = fleet.control(i, {"fault": spec})
                events.append((w, "fault r%d %s" % (i + 1, spec)))
        threads.append(threading.Thread(target=inject, daemon=True))
    cr = ctx.get("crash")
    if cr:
        def crash():
            if not at(cr["at"]):
                return
            i = cr["replica"]
            proc = fleet.procs[i]
            fleet.control(i, {"fault": "crash@0:reset" if cr.get("reset") else "crash@0"})
            proc.exited.wait(5.0)
            events.append((proc.exit_wall_ns or time.time_ns(), "crash"))
            # no restart_after: the replica stays down for the rest of the run
            if cr.get("restart_after") is not None and at(cr["at"] + cr["restart_after"]):
                fleet.restart(i)
                events.append((time.time_ns(), "restart"))
        threads.append(threading.Thread(target=crash, daemon=True))
    for t in threads:
        t.start()
    return threads


def run_llmload(args, url_port, trace, scen, json_path, log_path, pins, rundir, tag=""):
    argv = [os.path.join(args.build, "llmload"), "--url", "http://127.0.0.1:%d" % url_port,
            "--model", "m", "--trace-in", trace, "--quiet", "--json", json_path,
            "--log", log_path, "--timeout", str(scen["timeout_s"])] + load_flags(scen)
    if scen.get("extra_body"):
        argv += ["--extra-body", json.dumps(scen["extra_body"])]
    if args.realtime:
        argv.append("--realtime")
    return P.Proc(argv, os.path.join(rundir, "llmload%s.out" % tag), cpus=pins["load"])


def run_one(args, scen, ctx, name, rnd, outdir, shm_dir, pins):
    rundir = os.path.join(outdir, scen["id"], name, "round%d" % rnd)
    shutil.rmtree(rundir, ignore_errors=True)  # a reused --out: no stale ready files or logs
    os.makedirs(rundir)
    fleet = (P.RealFleet if scen.get("engine") == "real" else P.Fleet)(
        args.build, rundir, shm_dir, scen, cpus=pins["fleet"])
    cont = None
    loads = []
    stop = threading.Event()
    threads = []
    result = {"round": rnd, "status": "ok", "loadavg": [loadavg()]}
    t_start = time.monotonic()

    def own():
        pids = {os.getpid()}
        for p in list(fleet.procs) + (cont.procs if cont else []) + [x[0] for x in loads]:
            if p is not None:
                pids.add(p.pid)
        return pids
    watch = RtWatch(own)
    watch.start()
    try:
        fleet.start()
        kind, cont = make_contender(name, scen, args, rundir, fleet, shm_dir, pins)
        cont.start()
        trace, seed = ctx["rounds"][rnd - 1]
        result["trace"] = os.path.relpath(trace, outdir)
        traces = [trace]
        if len(cont.ports) == 2:
            traces = [os.path.join(rundir, "trace_a.jsonl"), os.path.join(rundir, "trace_b.jsonl")]
            split_trace(trace, traces[0], traces[1], seed)
        events = []
        t0 = time.time()
        for k, (port, trace) in enumerate(zip(cont.ports, traces)):
            tag = "" if k == 0 else str(k)
            loads.append((run_llmload(args, port, trace, scen,
                                      os.path.join(rundir, "llmload%s.json" % tag),
                                      os.path.join(rundir, "requests%s.jsonl" % tag), pins,
                                      rundir, tag),
                          os.path.join(rundir, "llmload%s.json" % tag),
                          os.path.join(rundir, "requests%s.jsonl" % tag)))
        threads = schedule_faults(fleet, ctx, t0, stop, events)
        limit = ctx["duration"] + scen["timeout_s"] + 30
        for proc, _, _ in loads:
            if not proc.exited.wait(max(1.0, t0 + limit - time.time())):
                os.kill(proc.pid, signal.SIGINT)
                proc.exited.wait(10.0)
        stop.set()
        for t in threads:
            t.join(timeout=30.0)
        result["fleet_state"] = fleet.states()
        summaries, records = [], []
        for proc, jpath, lpath in loads:
            if proc.p.returncode != 0:
                raise P.Unavailable("llmload failed (status %s): %s" % (
                    proc.p.returncode, P.tail(proc.log_path)))
            with open(jpath) as f:
                summaries.append(json.load(f))
            records.extend(R.load_jsonl(lpath))
        start_ns = min(s["start_unix_ns"] for s in summaries)
        result["start_unix_ns"] = start_ns
        result["summary"] = summaries[0] if len(summaries) == 1 else summaries
        result["records"] = records
        result["events"] = [{"t": (w - start_ns) / 1e9, "what": what}
                            for w, what in sorted(events)]
        cont.stop()
        port_names = {str(p): n for n, p in zip(fleet.names, fleet.ports)}
        result["access"] = R.parse_access(kind, cont.access_logs, port_names)
        if kind in ("llmgate", "nginx"):
            result["intake_lag_ms"] = R.intake_lag(records, start_ns, result["access"])
    except P.Unavailable as e:
        result["status"] = "unavailable"
        result["reason"] = str(e).replace("\n", " | ")
    finally:
        stop.set()
        watch.stop.set()
        for proc, _, _ in loads:
            proc.stop()
        if cont is not None:
            cont.stop()
        fleet.stop()
    result["loadavg"].append(loadavg())
    result["foreign_rt_s"] = dict(watch.seen)
    result["wall_s"] = time.monotonic() - t_start
    return result


# ---- main ---------------------------------------------------------------------------

def scenario_ctx(scen, args, outdir, results):
    duration = args.duration or (scen["quick"] if args.quick else scen["duration"])
    if args.quick and scen["max_tokens"] == S.MAX_TOKENS:
        scen = dict(scen, max_tokens=S.QUICK_MAX_TOKENS)
    if scen.get("capacity_rps"):
        # a real fleet's capacity is measured (scenarios.py), not computed from llmsim's model
        cap = scen["capacity_rps"]
        if scen["id"] == "real" and args.real_capacity:
            cap = args.real_capacity
    elif scen.get("fleet"):
        # a drawn fleet (mismatch): its replicas run saturated offline, under its schedule
        cap = M.capacity(scen["fleet"], scen["prompt_bytes"], scen["max_tokens"])
    else:
        cap = S.capacity_rps(scen["sim"], scen["speeds"], scen["prompt_bytes"],
                             scen["max_tokens"], scen["prefix_bytes"])
    ctx = {"duration": duration, "capacity": cap, "rate": cap * scen["load"], "results": results,
           "slowdown": scen.get("quick_slowdown" if args.quick else "slowdown"),
           "crash": scen.get("quick_crash" if args.quick else "crash"),
           "faults": scen.get("faults") or []}
    if scen.get("shape"):
        # load that moves (shapes.py): long enough for the p99 to rest on --tail-min requests,
        # the shape's events at fractions of that
        if not (args.duration or args.quick):
            duration = ctx["duration"] = SH.duration_s(scen, ctx["rate"], args.rounds,
                                                       args.tail_min)
        ctx.update(SH.place_events(scen, duration))
    # a ramp's trace is drawn at its peak and thinned (shapes.ramp_trace())
    trace_rate = cap * scen.get("trace_load", scen["load"])
    d = os.path.join(outdir, scen["id"])
    os.makedirs(d, exist_ok=True)
    ctx["trace"] = os.path.join(d, "trace.jsonl")
    ctx["requests"] = make_trace(args.build, scen, trace_rate, duration, ctx["trace"])
    # (trace, seed) of each round: with --fresh-traces round N has its own, seed + N - 1
    ctx["rounds"] = [(ctx["trace"], scen["seed"])] * args.rounds
    for rnd in range(2, args.rounds + 1) if args.fresh_traces else ():
        seed = scen["seed"] + rnd - 1
        path = os.path.join(d, "trace-r%d.jsonl" % rnd)
        make_trace(args.build, scen, trace_rate, duration, path, seed)
        ctx["rounds"][rnd - 1] = (path, seed)
    if args.load_reports:
        scen = dict(scen, load_reports=args.load_reports)
    ctx["scen"] = scen
    return ctx


def plots(args, outdir, res, ctx, replicas):
    if args.no_plots or not P.which("gnuplot"):
        return []
    script = os.path.join(HERE, "plots.gp")
    made = []
    names = R.write_cdf(outdir, res)
    if names:
        made += R.gnuplot(script, outdir, "cdf", res["id"], names,
                          "Scenario %s: %s - TTFT distribution" % (res["id"], res["title"]))
    series = ctx.get("share_series")
    if series:
        names = R.write_shares(outdir, res, series, replicas)
        made += R.gnuplot(script, outdir, "share", res["id"], names,
                          "Scenario %s: each replica's share of requests per second"
                          % res["id"], " ".join("%g" % m for m in ctx["share_marks"]))
    return [os.path.relpath(m, outdir) for m in made]


def verdict_summary(results):
    out = []
    for k, v in results.items():
        crit = v["subject_verdict"]
        mark = "n/a " if crit["pass"] is None else ("PASS" if crit["pass"] else "FAIL")
        out.append("%s scenario %s (%s): %s" % (mark, k, v["title"], crit["detail"] or "not run"))
    return out


def select(args):
    """--scenario: the fixed scenarios (scenarios.select) and the mismatch
    family ('mismatch', a draw 'm3' or a scenario 'm3-90')."""
    out = []
    for part in str(args.scenario).split(","):
        part = part.strip()
        moving = part == "moving" or part.startswith("moving:") or SH.parse_id(part)
        if moving:
            only = None if part == "moving" else part.split(":", 1)[-1]
            if only and not re.fullmatch(r"m\d+(-[a-z0-9]+)?", only):
                raise ValueError("moving:%s: expected a draw, moving:m3" % only)
            if only and int(re.match(r"m(\d+)", only).group(1)) > args.draws:
                raise ValueError("%s: only %d draws (--draws)" % (only, args.draws))
            found = SH.make_scenarios(args.draws, args.draw_seed, shapes=args.shapes, only=only,
                                      gauge_lags=args.gauge_lags)
            if not found:
                raise ValueError("unknown moving-load scenario %r" % part)
        elif part == "mismatch" or re.fullmatch(r"m\d+(-\d+)?", part):
            only = None if part == "mismatch" else part
            if only and int(re.match(r"m(\d+)", only).group(1)) > args.draws:
                raise ValueError("%s: only %d draws (--draws)" % (part, args.draws))
            found = M.make_scenarios(args.draws, args.draw_seed, only=only,
                                     gauge_lags=args.gauge_lags)
            if not found:
                raise ValueError("unknown mismatch scenario %r (m0-70 .. m%d-90)"
                                 % (part, args.draws))
        else:
            found = S.select(part)
        out.extend(s for s in found if s not in out)
    return out


def _terminate(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


def main(argv=None):
    args = parse_args(argv)
    # stop cleanly (every process of the run in progress) on SIGTERM, and on
    # SIGINT even when started in the background with SIGINT ignored
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    args.build = os.path.abspath(args.build)
    if args.ref_build:
        args.ref_build = os.path.abspath(args.ref_build)
        if not os.access(os.path.join(args.ref_build, "llmgate"), os.X_OK):
            raise SystemExit("%s/llmgate not found" % args.ref_build)
    for b in ("llmgate", "llmsim", "llmload"):
        if not os.access(os.path.join(args.build, b), os.X_OK):
            raise SystemExit("%s/%s not found: build first (cmake --build build)" % (args.build, b))
    try:
        scens = select(args)
    except ValueError as e:
        raise SystemExit(str(e))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    outdir = os.path.abspath(args.out or os.path.join(SRC, "bench", "out", "routing-" + stamp))
    os.makedirs(outdir, exist_ok=True)
    pins = pinning(args.pin)
    P.NICE = args.nice
    M.BLOCK_S = args.block_s
    info = machine_info(args)
    shm_dir = tempfile.mkdtemp(prefix="lgbench-", dir="/dev/shm" if os.path.isdir("/dev/shm")
                               else None)
    results = {}
    md = ["# Routing benchmark results", "",
          "Command: `bench/routing/run.py %s`" % " ".join(sys.argv[1:] if argv is None else argv),
          "", "Machine: %s CPUs (%s), kernel %s; load average at start %s; %s; %s; llmgate %s."
          % (info["cpus"], info["cpu_model"], info["kernel"], info["loadavg_start"],
             info["nginx"], info["haproxy"], info["git"]), ""]
    head_len = len(md)
    plan = []
    for scen in scens:
        names = args.contenders.split(",") if args.contenders else list(scen["contenders"])
        for n in names:
            contender_kind(n)
            if split_ref(n)[1] and not args.ref_build:
                raise SystemExit("contender %r: no --ref-build given" % n)
        plan.append((scen, names))
    total = sum(len(n) * args.rounds for _, n in plan)
    done = 0
    family_pools = {}
    moving_pools = {}
    print("routing benchmark: %d scenario(s), %d runs, output in %s" % (len(plan), total, outdir))
    try:
        for scen, names in plan:
            ctx = scenario_ctx(scen, args, outdir, results)
            scen = ctx["scen"]
            print("\nscenario %s (%s): %.1f req/s (%.0f%% of %.1f), %d requests in %g s%s"
                  % (scen["id"], scen["title"], ctx["rate"], 100 * scen["load"], ctx["capacity"],
                     ctx["requests"], ctx["duration"],
                     "; round N replays its own trace, seed %d + N - 1" % scen["seed"]
                     if args.fresh_traces and args.rounds > 1 else ""), flush=True)
            runs = {n: [] for n in names}
            skip = set()
            for rnd in range(1, args.rounds + 1):
                for n in names:
                    done += 1
                    if n in skip:
                        continue
                    r = run_one(args, scen, ctx, n, rnd, outdir, shm_dir, pins)
                    runs[n].append(r)
                    if r["status"] != "ok":
                        skip.add(n)
                        print("  [%d/%d] %-18s round %d: unavailable: %s" % (
                            done, total, n, rnd, r["reason"][:150]), flush=True)
                        continue
                    t = [x["ttft_ms"] for x in r["records"] if x.get("ttft_ms") is not None]
                    nerr = sum(1 for x in r["records"] if x.get("error"))
                    lag = r.get("intake_lag_ms") or {}
                    print("  [%d/%d] %-18s round %d: %5.1f s, TTFT p50 %s p99 %s ms, %d errors, "
                          "load avg %.1f%s" % (
                              done, total, n, rnd, r["wall_s"], R.fmt_ms(R.pct(t, 50)),
                              R.fmt_ms(R.pct(t, 99)), nerr, (r["loadavg"][-1] or [0])[0],
                              ", proxy intake lagged up to %.0f ms" % lag["max"]
                              if (lag.get("max") or 0) > 100 else "") +
                          (", other real-time work: %s" % ", ".join(
                              "%s %d s" % kv for kv in sorted(r["foreign_rt_s"].items()))
                           if r.get("foreign_rt_s") else ""), flush=True)
            res = R.analyze(scen, runs, ctx)
            res["definition"] = dict(scen, duration=ctx["duration"], slowdown=ctx["slowdown"],
                                     crash=ctx["crash"], faults=ctx["faults"], contenders=names)
            replicas = ["r%d" % (i + 1) for i in range(len(scen["speeds"]))]
            res["plots"] = plots(args, outdir, res, ctx, replicas)
            print(R.render(res, replicas), flush=True)
            md.append(R.render(res, replicas, markdown=True))
            for p in res["plots"]:
                if p.endswith(".svg"):
                    md.append("![%s](%s)\n" % (os.path.basename(p), p))
            pools = res.pop("_pools", None)
            if res.get("mismatch"):
                family_pools[scen["id"]] = pools  # for the pooled verdict over the draws
            if res.get("moving"):
                moving_pools[scen["id"]] = pools
            results[scen["id"]] = res
    finally:
        shutil.rmtree(shm_dir, ignore_errors=True)
        info["loadavg_end"] = loadavg()
        summary = verdict_summary(results)
        family = R.mismatch_summary(results, family_pools) if family_pools else None
        if family:
            summary += ["mismatch family: " + line.strip() for line in family[0].splitlines()
                        if line.startswith(("PASS", "FAIL", "n/a"))]
        moving = SH.summary(results, moving_pools) if moving_pools else None
        if moving:
            summary += ["moving load: " + line.strip() for line in moving[0].splitlines()
                        if line.startswith(("PASS", "FAIL", "n/a"))]
        with open(os.path.join(outdir, "results.json"), "w") as f:
            json.dump({"machine": info, "quick": args.quick, "rounds": args.rounds,
                       "fresh_traces": args.fresh_traces,
                       "scenarios": results, "mismatch": family[2] if family else None,
                       "moving": moving[2] if moving else None},
                      f, indent=1, default=str)
        with open(os.path.join(outdir, "results.md"), "w") as f:
            f.write("\n".join(md[:head_len] + ["Load average at the end: %s." % info["loadavg_end"],
                                               "", "### Verdicts for the default policy (%s)"
                                               % S.SUBJECT, ""]
                              + ["- " + line for line in summary] + [""]
                              + ([family[1]] if family else [])
                              + ([moving[1]] if moving else []) + md[head_len:]) + "\n")
    if family:
        print(family[0])
    if moving:
        print(moving[0])
    print("\nVerdicts for llmgate's default policy (%s):" % S.SUBJECT)
    for line in summary:
        print("  " + line)
    print("\nresults: %s/results.json, %s/results.md" % (outdir, outdir))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as e:
        print("\ninterrupted (%s): partial results were written" % (e or "SIGINT"),
              file=sys.stderr)
        sys.exit(130)
