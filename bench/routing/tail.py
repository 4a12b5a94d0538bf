#!/usr/bin/env python3
"""What a contender's TTFT tail is made of, from a run's per-request logs.

For each contender of a scenario's output folder (OUT/SCENARIO, as run.py
writes it: CONTENDER/roundN/requests.jsonl, and for llmgate's contenders
access.log with each pick's candidates), pooled over its rounds:

  - TTFT p50 / p90 / p99, and how many requests took longer than a
    threshold (--over, ms; by default half the first contender's p99:
    what a 0.5x bar asks), with 1% of the requests beside it (a p99 under
    the threshold needs fewer than that over it);
  - those over it by replica and by what was in flight on that replica when
    the request was sent (from the requests' own send and end times: the
    benchmark's view, the same for every contender), by the pick's reason
    (llmgate's access log) and by prompt size;
  - every request's TTFT by replica and in-flight count (p50, p90, over);
  - where the access log has the engine model's prediction for the chosen
    replica (`model_ms` x `model_scale`) and the formula's service time
    (`ttft_ms`): the measured TTFT over each, p10 / p50 / p90, by replica,
    idle (nothing of ours there) or not;
  - with --list, the slowest requests of each round (--top, a share) one
    line each: when, where, prompt, in flight, prefilling there, and the
    candidates' costs as logged (after the tolerance and the guards).

  bench/routing/tail.py OUT/real
  bench/routing/tail.py OUT/real --over 122 --list --top 0.02 ttft nginx
"""
import argparse
import collections
import json
import os
import sys


def load_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def q(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")


def rounds(folder):
    out = []
    for name in sorted(os.listdir(folder)):
        if name.startswith("round") and name[5:].isdigit():
            out.append((int(name[5:]), os.path.join(folder, name)))
    return sorted(out)


def load_round(path):
    """The requests of a round in arrival order, each with what was in
    flight on its replica when it was sent and the access log's pick."""
    req = load_jsonl(os.path.join(path, "requests.jsonl"))
    req.sort(key=lambda r: r["i"])
    acc = load_jsonl(os.path.join(path, "access.log"))
    acc.sort(key=lambda a: a["ts"])
    if acc and (len(acc) != len(req) or any(
            a.get("prompt_bytes") != r.get("prompt_bytes") for a, r in zip(acc, req))):
        acc = []  # not one line per request in arrival order: leave it out
    for i, r in enumerate(req):
        if r.get("ttft_ms") is None or r.get("replica") is None:
            continue
        s = r["t_send_ms"]
        there = [x for x in req if x is not r and x.get("replica") == r["replica"]
                 and x.get("e2e_ms") is not None and x["t_send_ms"] < s
                 and x["t_send_ms"] + x["e2e_ms"] > s]
        r["_inflight"] = len(there)
        pre = [x for x in there if x.get("ttft_send_ms") is not None
               and x["t_send_ms"] + x["ttft_send_ms"] > s]
        r["_prefilling"] = len(pre)
        r["_prefilling_bytes"] = sum(x["prompt_bytes"] for x in pre)
        if acc:
            a = acc[i]
            r["_reason"] = a.get("reason")
            r["_cands"] = {c["backend"]: c for c in a.get("candidates") or []}
    return [r for r in req if r.get("ttft_ms") is not None and r.get("replica") is not None]


def report(name, by_round, over, top, listing):
    allr = [r for _, rr in by_round for r in rr]
    n = len(allr)
    if n == 0:
        return
    tt = [r["ttft_ms"] for r in allr]
    hi = [r for r in allr if r["ttft_ms"] > over]
    print("== %s: %d requests, TTFT p50 %.0f p90 %.0f p99 %.0f ms; over %.0f ms: %d (1%%: %.0f)"
          % (name, n, q(tt, .5), q(tt, .9), q(tt, .99), over, len(hi), n / 100.0))
    for rep in sorted(set(r["replica"] for r in allr)):
        t = [r["ttft_ms"] for r in allr if r["replica"] == rep]
        print("  %s: %d (%.0f%%), p50 %.0f p90 %.0f p99 %.0f, over %d"
              % (rep, len(t), 100.0 * len(t) / n, q(t, .5), q(t, .9), q(t, .99),
                 sum(x > over for x in t)))
    cnt = collections.Counter((r["replica"], r["_inflight"]) for r in hi)
    print("  over, by replica and in flight there at the send:",
          ", ".join("%s/%d: %d" % (k[0], k[1], v) for k, v in sorted(cnt.items())))
    if any("_reason" in r for r in hi):
        cnt = collections.Counter((r["replica"], r.get("_reason")) for r in hi)
        print("  over, by replica and the pick's reason:",
              ", ".join("%s %s: %d" % (k[0], k[1], v) for k, v in cnt.most_common()))
    cnt = collections.Counter((r["replica"], r["prompt_bytes"] // 128 * 128) for r in hi)
    print("  over, by replica and prompt bytes (from):",
          ", ".join("%s/%d: %d" % (k[0], k[1], v) for k, v in sorted(cnt.items())))
    groups = collections.defaultdict(list)
    for r in allr:
        groups[(r["replica"], min(r["_inflight"], 6))].append(r["ttft_ms"])
    print("  TTFT by replica and in flight there at the send (6: 6 or more):")
    for k in sorted(groups):
        v = groups[k]
        print("    %s/%d: %4d  p50 %4.0f  p90 %4.0f  over %d"
              % (k[0], k[1], len(v), q(v, .5), q(v, .9), sum(x > over for x in v)))
    err = collections.defaultdict(list)
    for r in allr:
        c = r.get("_cands", {}).get(r["replica"])
        if not c or "model_ms" not in c or not c.get("ttft_ms"):
            continue
        model = c["model_ms"] * c.get("model_scale", 1)
        if model > 0:
            idle = "idle" if c.get("inflight", 0) == 0 else "busy"
            err[(r["replica"], idle)].append((r["ttft_ms"] / model, r["ttft_ms"] / c["ttft_ms"]))
    if err:
        print("  measured over predicted for the chosen replica (p10 / p50 / p90):")
        for k in sorted(err):
            v = err[k]
            m = [x[0] for x in v]
            f = [x[1] for x in v]
            print("    %s %s: %4d  engine model %.2f / %.2f / %.2f  formula's service %.2f / %.2f / %.2f"
                  % (k[0], k[1], len(v), q(m, .1), q(m, .5), q(m, .9), q(f, .1), q(f, .5), q(f, .9)))
    if not listing:
        return
    for rnd, rr in by_round:
        k = max(1, round(len(rr) * top))
        t = [r["ttft_ms"] for r in rr]
        print("  round %d: p99 %.0f ms; its slowest %d:" % (rnd, q(t, .99), k))
        for r in sorted(sorted(rr, key=lambda r: -r["ttft_ms"])[:k], key=lambda r: r["i"]):
            line = ("    #%d at %.2f s: %s %.0f ms, prompt %d B, max_tokens %d, in flight %d, "
                    "prefilling %d (%d B)" % (r["i"], r["t_send_ms"] / 1000.0, r["replica"],
                                              r["ttft_ms"], r["prompt_bytes"], r["max_tokens"],
                                              r["_inflight"], r["_prefilling"],
                                              r["_prefilling_bytes"]))
            if "_cands" in r:
                line += "; %s; " % r.get("_reason")
                line += ", ".join("%s cost %.0f (in flight %d%s)" % (
                    b, c["score"][0] if c.get("score") else float("nan"), c.get("inflight", 0),
                    ", model %.0f" % (c["model_ms"] * c.get("model_scale", 1))
                    if "model_ms" in c else "") for b, c in sorted(r["_cands"].items()))
            print(line)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("out", help="a scenario's output folder (OUT/SCENARIO)")
    ap.add_argument("contenders", nargs="*", help="contenders (default: every one there)")
    ap.add_argument("--over", type=float, help="threshold, ms (default: half the first's p99)")
    ap.add_argument("--list", action="store_true", help="list each round's slowest requests")
    ap.add_argument("--top", type=float, default=0.02, help="share listed per round (0.02)")
    a = ap.parse_intermixed_args(argv)
    names = a.contenders or sorted(
        d for d in os.listdir(a.out)
        if os.path.isdir(os.path.join(a.out, d)) and rounds(os.path.join(a.out, d)))
    data = {}
    for name in names:
        folder = os.path.join(a.out, name)
        if not os.path.isdir(folder):
            sys.exit("%s: no such contender folder" % folder)
        data[name] = [(n, load_round(p)) for n, p in rounds(folder)]
    over = a.over
    if over is None:
        first = [r["ttft_ms"] for _, rr in data[names[0]] for r in rr]
        over = q(first, .99) / 2 if first else 0
    for name in names:
        report(name, data[name], over, a.top, a.list)


if __name__ == "__main__":
    main(sys.argv[1:])
