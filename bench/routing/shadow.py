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

    python3 bench/routing/shadow.py OUT/1a/ttft_oracle_shadow [OUT/1b/...]

Standard library only; bench/routing/NOTES.md 24 is what it found first.
"""
import glob
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


def report(folder):
    rows = load(folder)
    if not rows:
        print("%s: no requests with a shadow oracle stage" % folder)
        return
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


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for folder in sys.argv[1:]:
        report(folder.rstrip("/"))


if __name__ == "__main__":
    main()
