#!/usr/bin/env python3
"""How far a policy's picks are from the oracle's, pick by pick.

Reads the access logs of a routing benchmark run whose contender carried the
oracle as a shadow stage (`ttft_oracle_shadow`, or any pipeline with
`{"policy": "oracle", "weight": 0}`): for every request the log then holds the
oracle's exact TTFT on every candidate at the moment of the pick, beside the
costs that decided. The `oracle` contender's own folder works too (regret 0:
its states are the yardstick). Prints per contender folder:

  regret      the oracle's TTFT on the chosen replica less its TTFT on the
              best one, ms (what a perfect pick would have saved this request)
  exact       share of picks that were the oracle's own
  best avail  the oracle's TTFT on its best candidate: how good the state
              the fleet was in was, whatever the pick
  worst 1%    the slowest 1% of first tokens: how many had a candidate the
              oracle put under 0.8x the p99 (avoidable by the pick alone)
              and how many met a fleet where every candidate was slow
              (a state earlier picks led to)
  per replica the `ttft` policy's engine model (its `model_ms` on every
              candidate it ran the model for) against the oracle's TTFT
              there: the error (model - truth) at p1 / p10 / p50 / p90 / p99,
              how often the model was off by more than half the truth, the
              slots it assumed (`model_slots`, median and range) and its step
              (`step_ms`, median): what an estimator that knows when it is
              wrong has to find (a negative error draws requests the replica
              then serves late)

A folder without a shadow oracle (a `ttft` run) gets the same per-replica
lines against what happened instead: for the picks that went to a replica,
its model's prediction against the TTFT measured there (`model - measured`),
with the replica's true slots when the run's results.json knows them.

    python3 bench/routing/shadow.py OUT/1a/ttft_oracle_shadow [OUT/1b/...]
    python3 bench/routing/shadow.py OUT/m3-90/oracle OUT/m3-90/ttft

Standard library only; bench/routing/NOTES.md 24 is what it found first.
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import load_jsonl, pct  # noqa: E402  (the run's own percentiles: nearest rank)


def load(folder):
    """(entry, {backend: oracle ms}) for every request with a shadow oracle."""
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "round*", "access.log"))):
        for e in load_jsonl(path):
            stages = (e.get("policy") or "").split("+")
            names = [n for n in ("oracle(shadow)", "oracle") if n in stages]
            if not names or e.get("ttft") is None:
                continue
            i = stages.index(names[0])
            o = {c["backend"]: c["score"][i] for c in e.get("candidates") or []
                 if "score" in c and c["score"][i] is not None}
            # a candidate the oracle scores as dead (1e9: a stalled replica, or a
            # state it could not read within its wait) has no truth: skip the pick
            if e.get("backend") not in o or max(o.values()) >= 1e8:
                continue
            rows.append((e, o))
    return rows


def true_slots(folder):
    """{replica: slots} from the run's results.json (OUT/SID/CONTENDER), if any."""
    out_dir, sid = os.path.dirname(os.path.dirname(folder)), os.path.basename(os.path.dirname(folder))
    try:
        with open(os.path.join(out_dir, "results.json")) as f:
            d = json.load(f)["scenarios"][sid]["definition"]
    except (OSError, KeyError, ValueError):
        return {}
    sims = d.get("sims") or [d["sim"]] * len(d["speeds"])
    return {"r%d" % (i + 1): sim["slots"] for i, sim in enumerate(sims)}


def picks(folder):
    """Without an oracle: each replica's model against the TTFT measured on the picks it got."""
    per = {}
    n = 0
    for path in sorted(glob.glob(os.path.join(folder, "round*", "access.log"))):
        for e in load_jsonl(path):
            if e.get("ttft") is None:
                continue
            n += 1
            c = next((c for c in e.get("candidates") or [] if c.get("backend") == e["backend"]),
                     None)
            if c is None or c.get("model_ms") is None:
                continue
            d = per.setdefault(e["backend"], {"err": [], "ttft": [], "slots": [], "guessed": 0})
            d["err"].append(c["model_ms"] - e["ttft"])
            d["ttft"].append(e["ttft"])
            d["slots"].append(c.get("model_slots", c.get("slots")))
            d["guessed"] += bool(c.get("slots_guessed"))
    if not per:
        print("%s: no picks with the engine model" % folder)
        return None
    truth = true_slots(folder)
    allt = sorted(t for d in per.values() for t in d["ttft"])
    p99 = pct(allt, 99)
    print("%s: %d requests; picks by the engine model, model - measured TTFT, ms" % (folder, n))
    print("    replica  picks   p1 / p10 / p50 / p90 / p99;  slots it assumed (median, range; "
          "guessed);  true slots;  of the slowest 1%")
    for b, d in sorted(per.items()):
        err, slots = d["err"], [x for x in d["slots"] if x is not None]
        print("    %-6s %6d  %7.1f / %6.1f / %6.1f / %6.1f / %7.1f;  %s, %.0f%% guessed;  %s;  %d" % (
            b, len(err), pct(err, 1), pct(err, 10), pct(err, 50), pct(err, 90), pct(err, 99),
            "%g (%g-%g)" % (pct(slots, 50), min(slots), max(slots)) if slots else "-",
            100.0 * d["guessed"] / len(err), truth.get(b, "?"),
            sum(1 for t in d["ttft"] if t > p99)))
    if not truth:
        return None
    # picks, and the slowest 1%, that went where the model assumed more slots than there are
    over = [(t, s is not None and s > truth[b] + 0.5)
            for b, d in per.items() for t, s in zip(d["ttft"], d["slots"])]
    tail = [o for t, o in over if t > p99]
    return len(over), sum(1 for _, o in over if o), len(tail), sum(tail)


def report(folder):
    rows = load(folder)
    if not rows:
        return picks(folder)
    ttft = [e["ttft"] for e, _ in rows]
    regret = [o[e["backend"]] - min(o.values()) for e, o in rows]
    best = [min(o.values()) for _, o in rows]
    share = {}
    for e, _ in rows:
        share[e["backend"]] = share.get(e["backend"], 0) + 1
    p99 = pct(ttft, 99)
    worst = sorted(rows, key=lambda r: -r[0]["ttft"])[:max(1, len(rows) // 100)]
    avoidable = sum(1 for _, o in worst if min(o.values()) < 0.8 * p99)
    n = len(rows)
    print("%s: %d requests" % (folder, n))
    print("  TTFT p50 / p90 / p99         %6.1f / %6.1f / %6.1f ms" %
          (pct(ttft, 50), pct(ttft, 90), p99))
    print("  regret mean / p90 / p99      %6.1f / %6.1f / %6.1f ms; exact %.0f%%" %
          (sum(regret) / n, pct(regret, 90), pct(regret, 99),
           100.0 * sum(1 for r in regret if r < 0.5) / n))
    print("  best avail p50 / p90 / p99   %6.1f / %6.1f / %6.1f ms" %
          (pct(best, 50), pct(best, 90), pct(best, 99)))
    print("  worst 1%%: %d; avoidable by the pick %d, every candidate slow %d" %
          (len(worst), avoidable, len(worst) - avoidable))
    print("  share " + ", ".join("%s %.0f%%" % (b, 100.0 * k / n) for b, k in sorted(share.items())))
    errors(rows)


def errors(rows):
    """The engine model's error against the oracle, per replica (all picks' candidates)."""
    per = {}
    for e, o in rows:
        for c in e.get("candidates") or []:
            b = c.get("backend")
            if b in o and c.get("model_ms") is not None:
                d = per.setdefault(b, {"err": [], "off": 0, "slots": [], "step": []})
                d["err"].append(c["model_ms"] - o[b])
                d["off"] += abs(c["model_ms"] - o[b]) > 0.5 * o[b]
                if c.get("model_slots") is not None:
                    d["slots"].append(c["model_slots"])
                if c.get("step_ms") is not None:
                    d["step"].append(c["step_ms"])
    if not per:
        return
    print("  engine model - oracle, ms:    p1 / p10 / p50 / p90 / p99;  off by > half;  "
          "slots assumed;  step ms")
    for b, d in sorted(per.items()):
        err = d["err"]
        slots = d["slots"]
        print("    %-6s %6d  %7.1f / %6.1f / %6.1f / %6.1f / %7.1f;  %5.1f%%;  %s;  %s" % (
            b, len(err), pct(err, 1), pct(err, 10), pct(err, 50), pct(err, 90), pct(err, 99),
            100.0 * d["off"] / len(err),
            "%g (%g-%g)" % (pct(slots, 50), min(slots), max(slots)) if slots else "-",
            "%.1f" % pct(d["step"], 50) if d["step"] else "-"))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    totals = [0, 0, 0, 0]
    for folder in sys.argv[1:]:
        counts = report(folder.rstrip("/"))
        for i, v in enumerate(counts or ()):
            totals[i] += v
    if totals[0] and len(sys.argv) > 2:
        print("all: %d picks by the engine model, %.0f%% to a replica it assumed more slots of "
              "than it has; of the slowest 1%% in each folder, %d of %d" % (
                  totals[0], 100.0 * totals[1] / totals[0], totals[3], totals[2]))


if __name__ == "__main__":
    main()
