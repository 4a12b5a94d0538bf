#!/usr/bin/env python3
"""What a tenant's slowest first tokens are made of, from llmsim's step logs.

Reads a tenants.py run folder (or several: rounds are pooled) written with
--step-log: llmload's per-request log of the tenant (TENANT.jsonl, with its
start time in TENANT.json) and each replica's rN.steps.jsonl (llmsim
--step-log). Each of the tenant's answered requests is matched to the
engine's sequence (same replica, same max_tokens, the first arrival after
it was sent), and its TTFT split into:

  gw      from the send to the engine's arrival (the gateway: its queue,
          its pick, the hop)
  inflt   from the arrival to the end of the step that was running then
  queued  further steps it waited in the engine (no slot, or behind others)
  own     the step that prefilled it and made its first token
  out     from that step's end to the client's first byte

and, for the step that carried its prefill (own) and the one it waited for
(inflt): the sequences in the step (batch), the prompt tokens prefilled in
it by class (its own, others of its priority or better, a lower priority's
new prompts, a lower priority's recomputed ones after a preemption) and the
preemptions at its start.

  bench/routing/steplog.py RUN_DIR [RUN_DIR...] [--tenant interactive] [--top 20]
"""

import argparse
import bisect
import json
import os
import sys


def load_steps(path):
    steps, admits, firsts, preempts = {}, {}, {}, {}
    for line in open(path):
        r = json.loads(line)
        if "a" in r:
            admits.setdefault(r["s"], []).append(r)
        elif "p" in r:
            preempts.setdefault(r["s"], []).append(r)
        elif "f" in r:
            firsts[r["f"]] = r
        else:
            steps[r["s"]] = r
    first_admit = {}
    for s in sorted(admits):
        for a in admits[s]:
            first_admit.setdefault(a["a"], a)  # its first admission (a preempted one comes back)
    last_admit = {}
    for s in sorted(admits):
        for a in admits[s]:
            last_admit[a["a"]] = a
    order = sorted(steps)
    starts = [steps[s]["start"] for s in order]
    return {"steps": steps, "admits": admits, "firsts": firsts, "preempts": preempts,
            "first_admit": first_admit, "last_admit": last_admit, "order": order,
            "starts": starts}


def step_at(eng, t):
    """The step running at wall time t (ms), or None."""
    i = bisect.bisect_right(eng["starts"], t) - 1
    if i < 0:
        return None
    st = eng["steps"][eng["order"][i]]
    return st if st["end"] > t else None


def compose(eng, s, me_prio, me_id):
    """A step's prefill tokens by kind, from me's point of view."""
    out = {"own": 0, "peer": 0, "low_new": 0, "low_re": 0, "n_low_new": 0, "n_low_re": 0}
    for a in eng["admits"].get(s, []):
        if a["a"] == me_id:
            out["own"] += a["prefill"]
        elif a["prio"] <= me_prio:
            out["peer"] += a["prefill"]
        elif a["re"] > 0:
            out["low_re"] += a["prefill"]
            out["n_low_re"] += 1
        else:
            out["low_new"] += a["prefill"]
            out["n_low_new"] += 1
    out["preempted"] = len(eng["preempts"].get(s, []))
    return out


def analyse(run_dir, tenant):
    meta = json.load(open(os.path.join(run_dir, tenant + ".json")))
    start_ms = meta["start_unix_ns"] / 1e6
    recs = [json.loads(x) for x in open(os.path.join(run_dir, tenant + ".jsonl"))]
    engines = {}
    for name in sorted(os.listdir(run_dir)):
        if name.endswith(".steps.jsonl"):
            engines[name.split(".")[0]] = load_steps(os.path.join(run_dir, name))
    # the engine's first tokens by replica and max_tokens, in arrival order
    by_key = {}
    for rep, eng in engines.items():
        for f in eng["firsts"].values():
            by_key.setdefault((rep, f["max"]), []).append(f)
    for v in by_key.values():
        v.sort(key=lambda f: f["arrival"])
    used = set()
    rows = []
    for r in recs:
        if r["status"] != 200 or r["ttft_ms"] is None or r.get("replica") is None:
            continue
        send = start_ms + r["t_send_ms"]
        sched = start_ms + r["t_sched_ms"]
        cands = by_key.get((r["replica"], r["max_tokens"]), [])
        i = bisect.bisect_left([f["arrival"] for f in cands], send - 1.0)
        f = None
        while i < len(cands):
            c = cands[i]
            if (r["replica"], c["f"]) not in used:
                f = c
                break
            i += 1
        if f is None or f["arrival"] - send > 2000:
            continue
        used.add((r["replica"], f["f"]))
        eng = engines[r["replica"]]
        adm = eng["last_admit"][f["f"]]
        own = eng["steps"][adm["s"]]
        infl = step_at(eng, f["arrival"])
        if infl is not None and infl["s"] >= adm["s"]:
            # admitted into the step "running" at its arrival: a step starts
            # at its predecessor's planned end, a moment before its timer
            # fires, and admits what arrived meanwhile
            infl = None
        infl_end = infl["end"] if infl else f["arrival"]
        row = {
            "id": f["f"], "arrival": f["arrival"], "own_step": adm["s"],
            "infl_step": infl["s"] if infl else None,
            "ttft": r["ttft_ms"], "replica": r["replica"],
            "gw": f["arrival"] - sched,
            "inflt": infl_end - f["arrival"],
            "queued": own["start"] - infl_end,
            "own": own["end"] - own["start"],
            "out": sched + r["ttft_ms"] - own["end"],
            "batch": own["batch"], "prefill": own["prefill"],
            "comp": compose(eng, adm["s"], f["prio"], f["f"]),
            "infl_batch": infl["batch"] if infl else 0,
            "infl_prefill": infl["prefill"] if infl else 0,
            "infl_comp": compose(eng, infl["s"], f["prio"], f["f"]) if infl else None,
        }
        rows.append(row)
    return rows, len(recs)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--tenant", default="interactive")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    rows, sent = [], 0
    for d in args.runs:
        r, n = analyse(d, args.tenant)
        rows += r
        sent += n
    if not rows:
        print("no matched requests (were the replicas run with --step-log?)", file=sys.stderr)
        return 1
    print("%s: %d of %d requests matched to the engines' sequences" % (args.tenant, len(rows), sent))
    keys = ["ttft", "gw", "inflt", "queued", "own", "out", "batch", "prefill"]
    print("%-8s" % "" + "".join("%9s" % k for k in keys))
    for q in (0.5, 0.9, 0.99):
        print("%-8s" % ("p%d" % int(q * 100)) + "".join("%9.1f" % pct([x[k] for x in rows], q)
                                                       for k in keys))
    print("%-8s" % "mean" + "".join("%9.1f" % (sum(x[k] for x in rows) / len(rows)) for k in keys))
    top = sorted(rows, key=lambda x: -x["ttft"])[:args.top]
    print("\nthe slowest %d (ms; own step's prefill tokens: own / peers / lower new (n) / lower "
          "recomputed (n), preemptions; in-flight step's likewise)" % len(top))
    print("%7s %3s %6s %6s %6s %6s %6s %5s %5s  %-34s %5s %5s  %s" % (
        "ttft", "rep", "gw", "inflt", "queue", "own", "out", "batch", "pfill",
        "own step: own/peer/new(n)/re(n) pre", "ibat", "ipfil", "in-flight step"))
    for x in top:
        c, ic = x["comp"], x["infl_comp"] or {}
        print("%7.1f %3s %6.1f %6.1f %6.1f %6.1f %6.1f %5d %5d  %-34s %5d %5d  %s" % (
            x["ttft"], x["replica"], x["gw"], x["inflt"], x["queued"], x["own"], x["out"],
            x["batch"], x["prefill"],
            "%d/%d/%d(%d)/%d(%d) %d" % (c["own"], c["peer"], c["low_new"], c["n_low_new"],
                                        c["low_re"], c["n_low_re"], c["preempted"]),
            x["infl_batch"], x["infl_prefill"],
            "%d/%d(%d)/%d(%d) %d" % (ic.get("peer", 0), ic.get("low_new", 0),
                                     ic.get("n_low_new", 0), ic.get("low_re", 0),
                                     ic.get("n_low_re", 0), ic.get("preempted", 0))
            if ic else "-"))
    # what the slowest 1% share, against all
    n1 = max(1, len(rows) // 100)
    slow = top[:n1] if n1 <= len(top) else sorted(rows, key=lambda x: -x["ttft"])[:n1]

    def mean(xs, f):
        return sum(f(x) for x in xs) / len(xs)

    print("\nslowest 1%% (%d) against all (%d), means:" % (len(slow), len(rows)))
    for label, f in [("gw", lambda x: x["gw"]), ("in-flight", lambda x: x["inflt"]),
                     ("queued", lambda x: x["queued"]), ("own step", lambda x: x["own"]),
                     ("out", lambda x: x["out"]), ("own batch", lambda x: x["batch"]),
                     ("own step prefill", lambda x: x["prefill"]),
                     ("  its own prompt", lambda x: x["comp"]["own"]),
                     ("  peers'", lambda x: x["comp"]["peer"]),
                     ("  lower new", lambda x: x["comp"]["low_new"]),
                     ("  lower recomputed", lambda x: x["comp"]["low_re"]),
                     ("in-flight step prefill", lambda x: x["infl_prefill"]),
                     ("  lower recomputed", lambda x: (x["infl_comp"] or {}).get("low_re", 0)),
                     ("  lower new", lambda x: (x["infl_comp"] or {}).get("low_new", 0))]:
        print("  %-24s %8.1f %8.1f" % (label, mean(slow, f), mean(rows, f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
