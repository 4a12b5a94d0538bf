#!/usr/bin/env python3
"""Does the ttft policy's model of an engine hold on a real one? Reads the
runs of a routing benchmark scenario and prints, per contender and round:

- prediction: for each request llmgate routed, the policy's predicted cost of
  the replica it chose (the ttft stage's score: its predicted first token
  plus what it charges for delaying others, as the access log's candidates
  show it) and, where the engine model ran, the model's own prediction
  (model_ms x model_scale), against the TTFT the gateway measured for that
  request: the median ratio (measured / predicted: above 1 = predicted too
  low), the median and p90 absolute error (ms), the share within 25%;
- the engine (real-engine runs, from each replica's step log): what a
  llama_decode() step costs: the median one-token step by the sequences in
  it, and one least-squares fit over every step of ms = a + b x prompt
  tokens + c x decoding sequences (the engine model's step, prefill and
  per-sequence cost), its R^2 and residuals;
- on an idle replica, the TTFT formula's learnt service time against the
  measured TTFT, and what the first token costs against the prompt's size (the
  TTFT formula's "fixed + slope x KiB", fitted to requests that found their
  replica with nothing in flight and its engine's last scrape empty).

  bench/routing/realengine.py OUT/real [OUT/1a ...]
  bench/routing/realengine.py --paired nginx OUT/real [OUT2/real ...]

--paired BASE: instead, one line per round of each run (every contender
replays the round's trace, one after another): each contender's p99 TTFT
and its ratio to BASE's in that round, and the pace the engines kept while
it ran (each replica's median one-token step with one sequence decoding,
and with three: the machine's speed at the time, which moves a round's tail
more than any policy on a shared machine); then per contender over every
round: the rounds it beat BASE in, the median and geometric mean of the
per-round ratios, and the p99 over every request of the rounds pooled.

Works on any scenario's folder (an llmsim run gives the same prediction
figures, for comparison); the step-log part needs realengine's logs.
Standard library only.
"""

import glob
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import load_jsonl, pct  # noqa: E402


def fit(points):
    """Least squares y = a + b x over (x, y); returns (a, b, r2) or None."""
    n = len(points)
    if n < 3:
        return None
    sx = sum(x for x, _ in points)
    sy = sum(y for _, y in points)
    sxx = sum(x * x for x, _ in points)
    sxy = sum(x * y for x, y in points)
    den = n * sxx - sx * sx
    if den == 0:
        return None
    b = (n * sxy - sx * sy) / den
    a = (sy - b * sx) / n
    my = sy / n
    tot = sum((y - my) ** 2 for _, y in points)
    res = sum((y - a - b * x) ** 2 for x, y in points)
    return a, b, (1 - res / tot) if tot else 1.0


def err_stats(pairs):
    """pairs: (measured, predicted) -> summary dict."""
    pairs = [(m, p) for m, p in pairs if p and p > 0]
    if not pairs:
        return None
    ratios = [m / p for m, p in pairs]
    errs = [abs(m - p) for m, p in pairs]
    return {"n": len(pairs), "ratio_p50": statistics.median(ratios),
            "ratio_p10": pct(ratios, 10), "ratio_p90": pct(ratios, 90),
            "abs_p50": statistics.median(errs), "abs_p90": pct(errs, 90),
            "within25": sum(1 for r in ratios if 0.75 <= r <= 1.25) / len(ratios)}


def fmt_err(s):
    if not s:
        return "-"
    return ("n %d, measured/predicted p10 %.2f p50 %.2f p90 %.2f, |error| p50 %.0f ms "
            "p90 %.0f ms, within 25%%: %.0f%%" % (
                s["n"], s["ratio_p10"], s["ratio_p50"], s["ratio_p90"], s["abs_p50"],
                s["abs_p90"], 100 * s["within25"]))


def predictions(access):
    """Prediction errors of the ttft stage on the chosen replica, overall and
    per replica; and where the engine model ran."""
    cost, model = [], []
    by = {}
    for r in access:
        if r.get("ttft") is None or r.get("status") != 200 or not r.get("candidates"):
            continue
        c = next((c for c in r["candidates"] if c["backend"] == r["backend"]), None)
        if c is None or not c.get("score"):
            continue
        pred = c["score"][-1]
        cost.append((r["ttft"], pred))
        by.setdefault(r["backend"], []).append((r["ttft"], pred))
        if "model_ms" in c:
            model.append((r["ttft"], c["model_ms"] * c.get("model_scale", 1.0)))
    return err_stats(cost), {b: err_stats(v) for b, v in sorted(by.items())}, err_stats(model)


def idle_picks(access):
    """(record, chosen candidate) of the requests that found their replica
    idle: nothing of ours in flight, the engine's last scrape empty."""
    for r in access:
        if r.get("ttft") is None or r.get("status") != 200:
            continue
        c = next((c for c in r.get("candidates") or [] if c["backend"] == r["backend"]), None)
        if c is not None and not (c.get("inflight") or c.get("running") or c.get("waiting")):
            yield r, c


def idle_service(access):
    """The TTFT formula's learnt service time (fixed + slope x KiB, the
    candidate's ttft_ms) against the measured TTFT, for requests that found
    their replica idle: what the formula would have predicted there."""
    return err_stats([(r["ttft"], c.get("ttft_ms")) for r, c in idle_picks(access)])


def idle_fit(access):
    """TTFT of requests that found their replica idle against the request's
    KiB (its body less the JSON around the prompt: bytes_in - 130), per
    replica: the formula's fixed + slope x KiB, fitted afresh."""
    pts = {}
    for r, _ in idle_picks(access):
        kib = max(0, r["bytes_in"] - 130) / 1024.0
        pts.setdefault(r["backend"], []).append((kib, r["ttft"]))
    out = {}
    for b, p in sorted(pts.items()):
        f = fit(p)
        if f:
            resid = [abs(y - f[0] - f[1] * x) for x, y in p]
            out[b] = {"n": len(p), "fixed_ms": f[0], "ms_per_kib": f[1], "r2": f[2],
                      "resid_p50": statistics.median(resid), "resid_p90": pct(resid, 90)}
    return out


def fit2(rows):
    """Least squares y = a + b x1 + c x2 over (x1, x2, y); (a, b, c, r2) or None."""
    if len(rows) < 4:
        return None
    # normal equations, 3x3, by Gaussian elimination
    m = [[0.0] * 4 for _ in range(3)]
    for x1, x2, y in rows:
        v = (1.0, x1, x2)
        for i in range(3):
            for j in range(3):
                m[i][j] += v[i] * v[j]
            m[i][3] += v[i] * y
    for i in range(3):
        piv = max(range(i, 3), key=lambda r: abs(m[r][i]))
        if abs(m[piv][i]) < 1e-12:
            return None
        m[i], m[piv] = m[piv], m[i]
        for r in range(3):
            if r != i:
                f = m[r][i] / m[i][i]
                m[r] = [a - f * b for a, b in zip(m[r], m[i])]
    a, b, c = (m[i][3] / m[i][i] for i in range(3))
    my = sum(y for _, _, y in rows) / len(rows)
    tot = sum((y - my) ** 2 for _, _, y in rows)
    res = sum((y - a - b * x1 - c * x2) ** 2 for x1, x2, y in rows)
    return a, b, c, (1 - res / tot) if tot else 1.0


def steps(path):
    """A replica's llama_decode() steps: pure decode steps by sequences, and
    one fit over every step of ms = a + b x prompt tokens + c x decoding
    sequences (the engine model's prefill, step and per-sequence cost)."""
    rows = load_jsonl(path)
    by_seqs = {}
    joint = []
    for r in rows:
        prompt = sum(p for p in r["parts"] if p > 1)
        decoding = sum(1 for p in r["parts"] if p == 1)
        joint.append((prompt, decoding, r["ms"]))
        if prompt == 0:
            by_seqs.setdefault(decoding, []).append(r["ms"])
    f = fit2(joint)
    resid = [abs(y - f[0] - f[1] * x1 - f[2] * x2) for x1, x2, y in joint] if f else []
    return {"steps": len(rows), "fit": f,
            "resid_p50": statistics.median(resid) if resid else None,
            "resid_p90": pct(resid, 90),
            "decode_median": {k: statistics.median(v) for k, v in sorted(by_seqs.items())}}


def report_run(rundir):
    out = []
    access = load_jsonl(os.path.join(rundir, "access.log"))
    if access and any(r.get("candidates") for r in access):
        total, per, model = predictions(access)
        out.append("  predicted cost of the chosen replica: " + fmt_err(total))
        for b, s in per.items():
            out.append("    %s: %s" % (b, fmt_err(s)))
        out.append("  the engine model's own prediction, where it ran: " + fmt_err(model))
        out.append("  the TTFT formula's service time, on an idle replica: "
                   + fmt_err(idle_service(access)))
        for b, f in idle_fit(access).items():
            out.append("  idle %s: TTFT = %.0f ms + %.0f ms/KiB (R^2 %.2f, |residual| p50 %.0f "
                       "p90 %.0f ms, n %d)" % (b, f["fixed_ms"], f["ms_per_kib"], f["r2"],
                                              f["resid_p50"], f["resid_p90"], f["n"]))
    for path in sorted(glob.glob(os.path.join(rundir, "r*.steps.jsonl"))):
        s = steps(path)
        name = os.path.basename(path).split(".")[0]
        line = "  %s engine: %d steps; one-token steps by sequences (median ms) %s" % (
            name, s["steps"], ", ".join("%d: %.1f" % kv for kv in s["decode_median"].items()))
        if s["fit"]:
            a, b, c, r2 = s["fit"]
            line += ("; step = %.1f ms + %.2f ms x prompt tokens + %.1f ms x decoding sequences "
                     "(R^2 %.2f, |residual| p50 %.1f p90 %.1f ms)" % (
                         a, b, c, r2, s["resid_p50"], s["resid_p90"]))
        out.append(line)
    return out


def round_pace(rundir):
    """Each replica's median one-token step (ms) with 1 and 3 sequences
    decoding while this round ran: 'r1 1.0/3.5'."""
    out = []
    for path in sorted(glob.glob(os.path.join(rundir, "r*.steps.jsonl"))):
        d = steps(path)["decode_median"]
        out.append("%s %s/%s" % (os.path.basename(path).split(".")[0],
                                 "%.1f" % d[1] if 1 in d else "-",
                                 "%.1f" % d[3] if 3 in d else "-"))
    return " ".join(out)


def paired(base, runs):
    """--paired BASE (module doc): rounds of the same trace side by side."""
    rows = {}    # contender -> its per-round p99 over BASE's (None: BASE not in that round)
    pooled = {}  # contender -> every TTFT of its rounds
    print("%-28s %-7s %-24s %9s %7s  %s" % ("run", "round", "contender", "p99 ms", "/ " + base,
                                            "pace: one-token step ms, 1/3 sequences"))
    for scen in runs:
        rounds = sorted({os.path.basename(d) for d in glob.glob(os.path.join(scen, "*", "round*"))},
                        key=lambda r: int(r[5:]) if r[5:].isdigit() else 0)
        for rnd in rounds:
            p99 = {}
            for rundir in sorted(glob.glob(os.path.join(scen, "*", rnd))):
                who = os.path.basename(os.path.dirname(rundir))
                ttft = [r["ttft_ms"] for r in load_jsonl(os.path.join(rundir, "requests.jsonl"))
                        if r.get("status") == 200 and r.get("ttft_ms") is not None]
                if ttft:
                    p99[who] = (pct(ttft, 99), round_pace(rundir))
                    pooled.setdefault(who, []).extend(ttft)
            for who, (v, pace) in sorted(p99.items(), key=lambda kv: kv[0] != base):
                ratio = v / p99[base][0] if base in p99 and who != base else None
                if who != base:
                    rows.setdefault(who, []).append(ratio)
                print("%-28s %-7s %-24s %9.0f %7s  %s" % (
                    os.path.relpath(scen, os.path.dirname(os.path.dirname(scen.rstrip("/"))))[-28:],
                    rnd, who[:24], v, "%.2f" % ratio if ratio else "-", pace))
    if base not in pooled:
        print("no rounds of %s" % base)
        return 1
    print()
    print("%-24s %7s %12s %12s %12s %14s" % ("contender", "rounds", "beat " + base, "median ratio",
                                             "geomean", "pooled p99 ms"))
    print("%-24s %7s %12s %12s %12s %14.0f" % (base[:24], "", "", "", "", pct(pooled[base], 99)))
    for who, ratios in sorted(rows.items()):
        r = [x for x in ratios if x]
        if not r:
            continue
        geo = math.exp(sum(math.log(x) for x in r) / len(r))
        print("%-24s %7d %12s %12.2f %12.2f %14.0f" % (
            who[:24], len(r), "%d of %d" % (sum(1 for x in r if x < 1), len(r)),
            statistics.median(r), geo, pct(pooled[who], 99)))
    return 0


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    if argv[0] == "--paired":
        if len(argv) < 3:
            print("usage: realengine.py --paired BASE OUT/real [OUT2/real ...]", file=sys.stderr)
            return 2
        return paired(argv[1], argv[2:])
    for scen in argv:
        for rundir in sorted(glob.glob(os.path.join(scen, "*", "round*"))):
            lines = report_run(rundir)
            if lines:
                print("== %s" % os.path.relpath(rundir, os.path.dirname(scen.rstrip("/"))))
                print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
