#!/usr/bin/env python3
"""The `tenants` scenario: a shared fleet, three tenants, FIFO against classes.

On an llmsim fleet (the routing benchmark's timing model, scenarios.SIM),
three tenants send at once, each with its own API key and llmload:

  interactive  40% of capacity, streamed, class "interactive", TTFT target 500 ms
  agent        20% of capacity in bursts (3x for 2 s, then quieter), class "default"
  batch       150% of capacity, class "batch", sheddable

against llmgate as it is without classes ("fifo": scheduling.fair false, one
first-come-first-served admission queue) and with them ("classes"); the
interactive tenant alone through "classes" (its yardstick); "reserve":
"classes" with batch's reserve (--reserve, 0.25: batch is refused where a
backend has less than that share of its max_inflight free, left to the
higher classes); and, with
--runs, nginx ("nginx": least_conn, limit_req per key: batch held to the 40%
of capacity the others leave, agent to its burst rate; over it 429) and
HAProxy ("haproxy": leastconn, each server at maxconn = its slots so that
HAProxy queues, http-request set-priority-class per key: interactive first,
batch last; timeout queue 30s); and "prio": "classes" on engines that
schedule and preempt by priority (llmsim --scheduling-policy priority
--priority-preemption-threshold 0, SGLang's behaviour), the class forwarded
(priority_field "vllm"), each backend at max_inflight = slots + --headroom
(8) and batch's reserve the headroom's share of it, so that batch fills the
slots and a higher class goes past them to the engine, which preempts a
batch request for it (recomputed later). Every other backend has
max_inflight = its engine's slots, so that the gateway, not the engine, holds
what waits. Per tenant it prints p50 / p99 TTFT (llmload's, from the scheduled
arrival), goodput (answered 200 within the target, of all sent; without a
target: answered 200), tokens served and refusals (429) and other failures,
and writes report.json in the run's folder. These are llmsim figures: the
engines are simulated. With --real the fleet is the routing benchmark's real
llama.cpp one instead (scenario "real": tools/realengine, r1 Q8_0 and r2 F32,
4 sequences each, every backend at max_inflight 4), its capacity the 2.5
requests/s measured there, its prompts and answers that scenario's
(prio is not run: llama.cpp does not schedule by priority).

With --rounds N the whole list runs N times (each round in roundK/ of the
output folder), and a pooled table follows the rounds': each run's requests
of all rounds together, so that the interactive p99 rests on ~1000
requests, with its ratio to alone's pooled p99 and batch's answers over
what the others leave (the capacity less interactive's and the agent's
rates, for the rounds' arrivals). In prio the backends get
engine_priority --engine-priority ("preempt": the router counts ahead of a
request only ours of its class and above there; "none": every request), and
--batch-slots (default: all of an engine's slots) is how many of them batch
may fill, its reserve leaving the rest and the headroom to the others.
"yield", "aware" and "both" are "prio" with batch's yield_prefill (not sent
where a higher class's request awaits its first token), with the ttft
policy's lower_prefill_weight (--lower-prefill-weight, 1: a lower class's
prefill that the engine may be running counts ahead of a higher class's
request), and with both; "hold" is "both" with the agent's class
(default) yielding too: not sheddable, it waits in the admission queue
where every replica has an interactive request awaiting its first token;
"step" is "hold" with batch's prompts_per_step (--prompts-per-step, 1: at
most that many of batch's new prompts sent to a replica per engine step).
--step-log has each llmsim replica log its steps (rN.steps.jsonl in the
run's folder), which bench/routing/steplog.py reads.

  bench/routing/tenants.py [--build build] [--duration 40] [--replicas 2]
                           [--runs alone,fifo,classes,reserve,prio,nginx,haproxy]
                           [--rounds 1] [--reserve 0.25] [--headroom 8] [--policy ttft]
                           [--engine-priority preempt] [--batch-slots 16] [--real]
                           [--lower-prefill-weight 1] [--prompts-per-step 1] [--step-log]
                           [--out DIR]
"""

import argparse
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import procs as P  # noqa: E402
import scenarios as S  # noqa: E402

TENANTS = [
    # name, share of capacity, class, TTFT target (ms), burst, stream
    ("interactive", 0.40, "interactive", 500, None, True),
    ("agent", 0.20, "default", None, "3:2:4", True),
    ("batch", 1.50, "batch", None, None, False),
]


class RealFleet(P.RealFleet):
    """The routing benchmark's real llama.cpp fleet (scenario "real":
    tools/realengine, r1 Q8_0 and r2 F32 prefilling 8 tokens a step, 4
    sequences each, one CPU each); each backend at most its sequences at once."""

    def backends(self, load_reports=False):
        out = super().backends()
        for b in out:
            b["max_inflight"] = REAL_SEQUENCES
        return out


REAL_SEQUENCES = 4


def reserve_of(args, name, fleet):
    """Batch's reserve: --reserve in "reserve"; in "prio" the headroom's share
    of a backend's max_inflight (slots + headroom), which holds batch to the
    engine's slots while the higher classes may go above them."""
    if name == "reserve":
        return args.reserve
    if name in PRIO_RUNS:
        slots = fleet.scen["sim"]["slots"]
        held = slots if args.batch_slots is None else args.batch_slots
        return max(0.0, (slots + args.headroom - held) / float(slots + args.headroom) - 1e-9)
    return 0.0


# runs on engines that preempt for priority: "yield" is "prio" with batch's
# yield_prefill (not sent where a higher class's request awaits its first
# token); "aware", "prio" with the ttft policy's lower_prefill_weight 1 (the
# lower classes' prefill in progress counted ahead of a higher class's
# request); "both", the two; "hold", both and the agent's class (default,
# not sheddable) held in the admission queue by its own yield_prefill;
# "step", hold and batch's prompts_per_step
PRIO_RUNS = ("prio", "yield", "aware", "both", "hold", "step")


def key_of(name):
    return "sk-bench-%s-0123456789" % name


class Fleet(P.Fleet):
    """The routing benchmark's llmsim fleet; each backend at most its slots at once.
    With `prio`: the engines schedule by the body's "priority" and preempt for
    it (llmsim --scheduling-policy priority --priority-preemption-threshold 0),
    the gateway forwards the class (priority_field "vllm") and lets a backend
    hold `headroom` more than its slots, so that a higher class reaches an
    engine whose slots are all taken and takes one."""

    def __init__(self, *a, prio=False, headroom=0, engine_priority="preempt", step_log=False,
                 **kw):
        super().__init__(*a, **kw)
        self.prio = prio
        self.headroom = headroom if prio else 0
        self.engine_priority = engine_priority
        self.step_log = step_log

    def replica_args(self, i):
        argv = super().replica_args(i)
        if self.step_log:
            argv += ["--step-log", os.path.join(self.rundir, self.names[i] + ".steps.jsonl")]
        if self.prio:
            argv += ["--scheduling-policy", "priority", "--priority-preemption-threshold", "0"]
        return argv

    def backends(self, load_reports=False):
        out = super().backends()
        for b in out:
            b["max_inflight"] = self.scen["sim"]["slots"] + self.headroom
            if self.prio:
                b["priority_field"] = "vllm"
                b["engine_priority"] = self.engine_priority
        return out


def gateway_base(rundir, fair, reserve=0.0, yield_prefill=False, hold=False, per_step=0):
    keys = {"keys": [{"name": n, "sha256": hashlib.sha256(key_of(n).encode()).hexdigest(),
                      "models": "*", "class": cls}
                     for n, _, cls, _, _, _ in TENANTS]}
    path = os.path.join(rundir, "keys.json")
    with open(path, "w") as f:
        json.dump(keys, f, indent=2)
    return {
        "auth": {"keys_file": path},
        "limits": {"queue_length": 4096},
        "timeouts": {"queue": "30s"},
        "scheduling": {"fair": fair,
                       "interactive": {"ttft_target": "500ms"},
                       "default": {"yield_prefill": hold},
                       "batch": {"sheddable": True, "reserve": reserve,
                                 "yield_prefill": yield_prefill,
                                 "prompts_per_step": per_step}},
    }


NGINX_TENANTS_CONF = """\
worker_processes 1;
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    map $http_authorization $batch_key {{ "Bearer {batch}" $http_authorization; default ""; }}
    map $http_authorization $agent_key {{ "Bearer {agent}" $http_authorization; default ""; }}
    limit_req_zone $batch_key zone=batch:1m rate={batch_rate}r/s;
    limit_req_zone $agent_key zone=agent:1m rate={agent_rate}r/s;
    limit_req_status 429;
    upstream fleet {{
        least_conn;
{servers}
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            limit_req zone=batch burst=20 nodelay;
            limit_req zone=agent burst=20 nodelay;
            proxy_pass http://fleet;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""

HAPROXY_TENANTS_CONF = """\
global
    maxconn 8000
defaults
    mode http
    timeout connect 3s
    timeout client 300s
    timeout server 300s
    timeout queue 30s
    timeout http-keep-alive 75s
    timeout http-request 10s
    http-reuse always
    option http-no-delay
frontend fe
    bind 127.0.0.1:{port}
    default_backend fleet
backend fleet
    balance leastconn
    http-request set-priority-class int(-10) if {{ req.hdr(authorization) -m str "Bearer {inter}" }}
    http-request set-priority-class int(0) if {{ req.hdr(authorization) -m str "Bearer {agent}" }}
    http-request set-priority-class int(10) if {{ req.hdr(authorization) -m str "Bearer {batch}" }}
{servers}
"""


class Proxy:
    """nginx or HAProxy with the tenants' settings, on a port free a moment before."""

    def __init__(self, kind, rundir, fleet, cap):
        self.kind, self.rundir, self.fleet, self.cap = kind, rundir, fleet, cap
        self.procs, self.ports = [], []

    def start(self):
        port = P.free_port()
        slots = (REAL_SEQUENCES if isinstance(self.fleet, RealFleet)
                 else self.fleet.scen["sim"]["slots"])
        keys = {"inter": key_of("interactive"), "agent": key_of("agent"),
                "batch": key_of("batch")}
        if self.kind == "nginx":
            prefix = os.path.join(self.rundir, "nginx")
            os.makedirs(os.path.join(prefix, "tmp"), exist_ok=True)
            conf = os.path.join(prefix, "nginx.conf")
            servers = "\n".join("        server %s;" % a for a in self.fleet.addrs())
            with open(conf, "w") as f:
                f.write(NGINX_TENANTS_CONF.format(
                    prefix=prefix, port=port, servers=servers,
                    batch_rate=max(1, int(0.40 * self.cap)), agent_rate=max(1, int(0.60 * self.cap)),
                    **keys))
            argv = [P.which("nginx"), "-p", prefix, "-c", conf, "-g", "daemon off;"]
        else:
            conf = os.path.join(self.rundir, "haproxy.cfg")
            servers = "\n".join("    server %s %s maxconn %d" % (n, a, slots)
                                 for n, a in zip(self.fleet.names, self.fleet.addrs()))
            with open(conf, "w") as f:
                f.write(HAPROXY_TENANTS_CONF.format(port=port, servers=servers, **keys))
            argv = [P.which("haproxy"), "-f", conf, "-db"]
        p = P.Proc(argv, os.path.join(self.rundir, self.kind + ".log"))
        p.wait_port(port)
        self.procs, self.ports = [p], [port]

    def stop(self):
        for p in self.procs:
            p.stop()


def run_one(args, name, tenants, fair, out_dir):
    rundir = os.path.join(out_dir, name)
    os.makedirs(rundir, exist_ok=True)
    if args.real:
        if name in PRIO_RUNS:
            raise P.Unavailable("%s: llama.cpp does not schedule by priority" % name)
        scen = {"sim": dict(S.SIM), "replicas": S.REAL_REPLICAS, "speeds": [1.0, 0.4]}
        cap, prompt, max_tokens = S.REAL_CAPACITY_RPS, S.REAL_PROMPT, S.REAL_MAX_TOKENS
        fleet = RealFleet(args.build, rundir, rundir, scen)
    else:
        scen = {"sim": dict(S.SIM), "speeds": [1.0] * args.replicas}
        prompt, max_tokens = S.PROMPT, S.MAX_TOKENS
        cap = S.capacity_rps(scen["sim"], scen["speeds"], prompt, max_tokens)
        fleet = Fleet(args.build, rundir, rundir, scen, prio=name in PRIO_RUNS,
                      headroom=args.headroom, engine_priority=args.engine_priority,
                      step_log=args.step_log)
    fleet.start()
    if name in ("nginx", "haproxy"):
        gw = Proxy(name, rundir, fleet, cap)
    else:
        routing = {"policy": args.policy}
        if name in ("aware", "both", "hold", "step"):
            routing["options"] = {args.policy: {"lower_prefill_weight": args.lower_prefill_weight}}
        gw = P.Llmgate(args.build, rundir, fleet, routing, workers=1,
                       base=gateway_base(rundir, fair, reserve_of(args, name, fleet),
                                         yield_prefill=name in ("yield", "both", "hold", "step"),
                                         hold=name in ("hold", "step"),
                                         per_step=args.prompts_per_step if name == "step" else 0))
    loads = []
    try:
        gw.start()
        time.sleep(1.0)  # a first scrape of the engines
        for n, share, _, _, burst, stream in tenants:
            argv = [os.path.join(args.build, "llmload"), "--url",
                    "http://127.0.0.1:%d" % gw.ports[0], "--model", "m",
                    "--rate", "%.3f" % (share * cap), "--duration", str(args.duration),
                    "--prompt-bytes", prompt, "--max-tokens", max_tokens,
                    "--seed", str(7 + len(loads)), "--timeout", "60", "--quiet",
                    "--header", "Authorization: Bearer " + key_of(n),
                    "--log", os.path.join(rundir, n + ".jsonl"),
                    "--json", os.path.join(rundir, n + ".json")]
            argv.append("--stream" if stream else "--no-stream")
            if burst:
                argv += ["--burst", burst]
            loads.append(P.Proc(argv, os.path.join(rundir, n + ".out")))
        for p in loads:
            p.p.wait(timeout=args.duration + 120)
        engines = [] if args.real else [fleet.state(port) for port in fleet.ports]
    finally:
        for p in loads:
            p.stop()
        gw.stop()
        fleet.stop()
    out = {"capacity_rps": cap,
           "preempted": sum(e.get("preempted", 0) for e in engines),
           "engine_completed": sum(e.get("completed", 0) for e in engines)}
    for n, share, _, target, _, _ in tenants:
        out[n] = summarize([os.path.join(rundir, n + ".jsonl")], target)
        out[n]["rate_rps"] = share * cap
        out[n]["log"] = os.path.join(rundir, n + ".jsonl")
    return out


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarize(paths, target):
    recs = [json.loads(line) for path in paths for line in open(path)]
    ok = [r for r in recs if r["status"] == 200 and r["error"] is None]
    ttft = [r["ttft_ms"] for r in ok if r["ttft_ms"] is not None]
    good = [r for r in ok if target is None or (r["ttft_ms"] is not None and r["ttft_ms"] <= target)]
    return {
        "sent": len(recs),
        "ok": len(ok),
        "refused_429": sum(1 for r in recs if r["status"] == 429),
        "failed_other": len(recs) - len(ok) - sum(1 for r in recs if r["status"] == 429),
        "ttft_p50_ms": pct(ttft, 0.50),
        "ttft_p99_ms": pct(ttft, 0.99),
        "goodput": len(good) / len(recs) if recs else None,
        "tokens": sum(r["tokens"] for r in ok),
    }


def fmt(v, d=0):
    return "-" if v is None else ("%.*f" % (d, v))


def print_table(report):
    print("%-8s %-12s %7s %6s %6s %7s %9s %9s %8s %9s" % (
        "run", "tenant", "rate/s", "sent", "ok", "not ok", "p50 ttft", "p99 ttft", "goodput",
        "tokens"))
    for run, r in report.items():
        for n, *_ in TENANTS:
            if n not in r:
                continue
            t = r[n]
            print("%-8s %-12s %7.1f %6d %6d %7d %9s %9s %7s%% %9d" % (
                run, n, t["rate_rps"], t["sent"], t["ok"], t["refused_429"] + t["failed_other"],
                fmt(t["ttft_p50_ms"]), fmt(t["ttft_p99_ms"]),
                fmt(None if t["goodput"] is None else 100 * t["goodput"], 1), t["tokens"]))
    for run, r in report.items():
        if r.get("preempted"):
            print("%s: the engines preempted %d times (%d answers completed)" % (
                run, r["preempted"], r["engine_completed"]))


def pooled(rounds):
    """Per run and tenant, the rounds' requests together: p50 / p99 over all of
    them (a p99 over ~1000 interactive requests instead of ~300), and the
    interactive p99 over alone's pooled p99."""
    out = {}
    for run in rounds[0]:
        runs = [r[run] for r in rounds if run in r]
        out[run] = {"rounds": len(runs),
                    "preempted": sum(r.get("preempted", 0) for r in runs),
                    "engine_completed": sum(r.get("engine_completed", 0) for r in runs)}
        for n, share, _, target, _, _ in TENANTS:
            if n not in runs[0]:
                continue
            t = summarize([r[n]["log"] for r in runs], target)
            t["rate_rps"] = runs[0][n]["rate_rps"]
            out[run][n] = t
    alone = out.get("alone", {}).get("interactive", {}).get("ttft_p99_ms")
    for run, r in out.items():
        if "interactive" in r and alone:
            r["interactive"]["p99_over_alone"] = r["interactive"]["ttft_p99_ms"] / alone
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--duration", type=int, default=40)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--runs", default="alone,fifo,classes")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the whole list this many times, and pool each run's requests")
    ap.add_argument("--reserve", type=float, default=0.25)
    ap.add_argument("--policy", default="ttft", help="llmgate's routing policy")
    ap.add_argument("--real", action="store_true",
                    help="the real llama.cpp fleet of the routing benchmark's scenario "
                         "\"real\" (tools/realengine) instead of llmsim")
    ap.add_argument("--headroom", type=int, default=8,
                    help="prio: requests a backend may hold above its engine's slots")
    ap.add_argument("--batch-slots", type=int, default=None,
                    help="prio: how many of an engine's slots batch may fill (its reserve "
                         "leaves the rest and the headroom to the higher classes); "
                         "default all of them")
    ap.add_argument("--engine-priority", default="preempt", choices=("none", "preempt"),
                    help="prio: the backends' engine_priority (what the router counts ahead)")
    ap.add_argument("--lower-prefill-weight", type=float, default=1.0,
                    help="aware, both: the ttft policy's lower_prefill_weight")
    ap.add_argument("--prompts-per-step", type=int, default=1,
                    help="step: batch's prompts_per_step")
    ap.add_argument("--step-log", action="store_true",
                    help="llmsim: each replica logs its steps (rN.steps.jsonl in the run's "
                         "folder; bench/routing/steplog.py reads them)")
    ap.add_argument("--out", default=os.path.join("bench", "out",
                                                  "tenants-%d" % int(time.time())))
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    os.makedirs(args.out, exist_ok=True)
    rounds = []
    for k in range(args.rounds):
        out_dir = args.out if args.rounds == 1 else os.path.join(args.out, "round%d" % (k + 1))
        report = {}
        for run in args.runs.split(","):
            tenants = TENANTS[:1] if run == "alone" else TENANTS
            try:
                report[run] = run_one(args, run, tenants, fair=run != "fifo", out_dir=out_dir)
            except P.Unavailable as e:
                print("%s: not run (%s)" % (run, e), file=sys.stderr)
        rounds.append(report)
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(rounds[0] if args.rounds == 1 else {"rounds": rounds, "pooled": pooled(rounds)},
                  f, indent=1)
    if args.real:
        print("real llama.cpp fleet (tools/realengine: r1 Q8_0, r2 F32, 4 sequences each), "
              "capacity %.1f req/s as measured for scenario real; %d s of arrivals per run"
              % (S.REAL_CAPACITY_RPS, args.duration))
    else:
        print("llmsim fleet: %d replicas, capacity %.1f req/s; %d s of arrivals per run "
              "(llmsim figures, simulated engines); routing %s%s" % (
                  args.replicas, next(iter(rounds[0].values()))["capacity_rps"], args.duration,
                  args.policy,
                  ", prio's engine_priority %s" % args.engine_priority
                  if set(PRIO_RUNS) & set(args.runs.split(",")) else ""))
    for k, report in enumerate(rounds):
        if args.rounds > 1:
            print("round %d" % (k + 1))
        print_table(report)
    if args.rounds > 1:
        pool = pooled(rounds)
        print("pooled over %d rounds (p50 / p99 over every round's requests)" % args.rounds)
        print_table(pool)
        for run, r in pool.items():
            t = r.get("interactive", {})
            if "p99_over_alone" in t:
                print("%s: interactive p99 %s ms, %.2fx alone's pooled p99; %.1f%% within target"
                      % (run, fmt(t["ttft_p99_ms"]), t["p99_over_alone"], 100 * t["goodput"]))
            b = r.get("batch")
            if b:
                left = (b["rate_rps"] / TENANTS[2][1]) * (1 - TENANTS[0][1] - TENANTS[1][1])
                print("%s: batch answered %d, %.0f%% of the %.0f the others leave"
                      % (run, b["ok"], 100 * b["ok"] / (left * args.duration * r["rounds"]),
                         left * args.duration * r["rounds"]))


if __name__ == "__main__":
    main()
