#!/usr/bin/env python3
"""Summarises realengine step logs (server.mjs --step-log FILE): how long a
llama_decode() call takes by what it holds.

  tools/realengine/steps.py FILE [FILE...]

Prints the median, p10 and p90 duration of the decode steps that held only
one token per sequence (pure decode), by the number of sequences in the
step, then of the steps that prefilled (held a prompt chunk), by prompt
tokens in the step, with the fitted cost per prompt token. Each FILE is one
replica's log; lines are JSON objects {t, ms, tokens, seqs, parts, busy,
queued}. Standard library only.
"""

import collections
import json
import sys


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summarize(rows):
    decode = collections.defaultdict(list)
    prefill = collections.defaultdict(list)
    pts = []
    for r in rows:
        prompt = sum(p for p in r["parts"] if p > 1)
        if prompt == 0:
            decode[r["seqs"]].append(r["ms"])
        else:
            bucket = 1 << max(0, (prompt - 1).bit_length())  # next power of two
            prefill[bucket].append(r["ms"])
            pts.append((prompt, r["ms"], r["seqs"]))
    out = ["decode steps (one token per sequence):",
           "  seqs   steps   p10 ms  median ms   p90 ms"]
    for k in sorted(decode):
        v = decode[k]
        out.append("  %4d  %6d  %7.2f  %9.2f  %7.2f" % (k, len(v), pct(v, 0.1), pct(v, 0.5),
                                                        pct(v, 0.9)))
    if pts:
        out += ["steps with a prompt chunk, by prompt tokens in the step (up to):",
                "  tokens  steps  median ms  median ms/token"]
        for k in sorted(prefill):
            v = prefill[k]
            per = [ms / p for p, ms, _ in pts if 1 << max(0, (p - 1).bit_length()) == k]
            out.append("  %6d  %5d  %9.2f  %15.3f" % (k, len(v), pct(v, 0.5), pct(per, 0.5)))
        # least squares: ms = a + b x prompt tokens
        n = len(pts)
        sx = sum(p for p, _, _ in pts)
        sy = sum(ms for _, ms, _ in pts)
        sxx = sum(p * p for p, _, _ in pts)
        sxy = sum(p * ms for p, ms, _ in pts)
        den = n * sxx - sx * sx
        if n > 1 and den:
            b = (n * sxy - sx * sy) / den
            a = (sy - b * sx) / n
            out.append("  fit: %.2f ms + %.3f ms per prompt token (%d steps)" % (a, b, n))
    return "\n".join(out)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    for path in argv:
        print("== %s" % path)
        print(summarize(load(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
