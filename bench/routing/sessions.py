#!/usr/bin/env python3
"""Agent sessions on llmsim: session affinity against prefix affinity and
least_request.

The shape of a coding agent's traffic: T tenants, each with its own system
prompt, S sessions per tenant, each a conversation of K turns in a closed
loop (a turn is sent when the previous answer ended, after a think time).
Every turn resends the whole conversation (the system prompt, every earlier
user message and answer, then a new user message), so its prompt grows by
each turn and the replica that served the last turn holds most of it in its
prefix cache. Each session names itself in `x-session-affinity`.

For each contender a fresh fleet of llmsim replicas (prefix cache on) and a
fresh llmgate are started, the same sessions are run (same seeds), and the
script prints TTFT p50/p99 over all turns (measured by the client, at the
first content event of each stream), the turns after the first alone, and
the fleet's prefix-cache hit rate (llmsim's /sim/state: prefix tokens found
cached over those looked up). These are llmsim figures: its prefill and
decode costs and its LRU block cache, not a real engine's.

    bench/routing/sessions.py                       # defaults below, 1 round
    bench/routing/sessions.py --rounds 2 --sessions 6 --tenants 8

Python 3 standard library only.
"""

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))

CONTENDERS = {
    "least_request": {"policy": "least_request"},
    "prefix_affinity": {"pipeline": ["prefix_affinity", "ttft"]},
    "session_affinity": {"session_headers": ["x-session-affinity"]},  # + ttft (default)
}


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


def text(seed, n):
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "file", "patch", "test", "error", "build",
             "function", "return", "value", "line", "change", "review", "commit"]
    out = []
    size = 0
    while size < n:
        w = rng.choice(words)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


class Proc:
    def __init__(self, argv, log, ready_re=None):
        self.log = open(log, "w")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.port = None
        for line in self.p.stdout:
            if " ready " in line or line.startswith("llmsim ready") or "llmgate ready" in line:
                self.port = int(line.split("listen=")[1].split()[0].split(",")[0]
                                .rsplit(":", 1)[1])
                break
        if self.port is None:
            raise RuntimeError("%s did not start (see %s)" % (argv[0], log))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for _ in self.p.stdout:
            pass

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def sim_state(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/sim/state")
    return json.loads(c.getresponse().read())


def turn(port, session, messages, max_tokens):
    """One streamed turn: (ttft seconds, answer text)."""
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens,
                       "stream": True}).encode()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", body=body,
              headers={"Content-Type": "application/json", "x-session-affinity": session})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("status %d: %s" % (r.status, r.read()[:200]))
    ttft = None
    answer = []
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        ev = json.loads(line[5:])
        for ch in ev.get("choices", []):
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.monotonic() - t0
                answer.append(piece)
    c.close()
    return ttft, "".join(answer)


def run_sessions(port, args, seed):
    results = []  # (turn index, ttft)
    lock = threading.Lock()
    errors = []

    def session(t, s):
        rng = random.Random(seed * 1000 + t * 100 + s)
        name = "tenant%d-session%d" % (t, s)
        messages = [{"role": "system", "content": text(7000 + t, args.system_bytes)}]
        time.sleep(rng.uniform(0, args.think_s * 2))  # staggered starts
        for k in range(args.turns):
            messages.append({"role": "user",
                             "content": text(seed * 7919 + t * 131 + s * 17 + k,
                                             args.turn_bytes)})
            try:
                ttft, answer = turn(port, name, messages, args.max_tokens)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
                return
            messages.append({"role": "assistant", "content": answer})
            with lock:
                results.append((k, ttft))
            time.sleep(rng.expovariate(1.0 / args.think_s))

    threads = [threading.Thread(target=session, args=(t, s))
               for t in range(args.tenants) for s in range(args.sessions)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results, errors


def run_contender(name, routing, args, rnd, build, out):
    sims = []
    rundir = os.path.join(out, "%s-r%d" % (name, rnd))
    os.makedirs(rundir, exist_ok=True)
    for i in range(args.replicas):
        sims.append(Proc([os.path.join(build, "llmsim"), "--listen", "127.0.0.1:0",
                          "--name", "r%d" % (i + 1), "--model", "m", "--quiet",
                          "--seed", str(100 + i), "--slots", str(args.slots),
                          "--decode-ms", "10", "--decode-ms-per-seq", "0.25",
                          "--prefill-us-per-token", "50", "--prefix-block-tokens", "16",
                          "--prefix-cache-blocks", str(args.cache_blocks)],
                         os.path.join(rundir, "r%d.log" % (i + 1))))
    conf = {"listen": "127.0.0.1:0", "workers": 1, "access_log": False,
            "routing": routing,
            "backends": [{"name": "r%d" % (i + 1), "url": "http://127.0.0.1:%d" % p.port,
                          "models": ["m"]} for i, p in enumerate(sims)]}
    path = os.path.join(rundir, "llmgate.json")
    with open(path, "w") as f:
        json.dump(conf, f, indent=2)
    gw = Proc([os.path.join(build, "llmgate"), "-c", path], os.path.join(rundir, "llmgate.log"))
    try:
        results, errors = run_sessions(gw.port, args, seed=11 + rnd)
        hits = lookups = 0
        for p in sims:
            st = sim_state(p.port)
            hits += st["prefix_hits"]
            lookups += st["prefix_lookups"]
    finally:
        gw.stop()
        for p in sims:
            p.stop()
    return results, errors, hits, lookups


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--cache-blocks", type=int, default=640,
                    help="prefix-cache blocks of 16 tokens per replica (default 640: 10k tokens)")
    ap.add_argument("--tenants", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=6, help="sessions per tenant")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--system-bytes", type=int, default=4000)
    ap.add_argument("--turn-bytes", type=int, default=600, help="each user message")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--think-s", type=float, default=0.5)
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="sessions-")
    names = args.contenders.split(",")
    pooled = {n: ([], 0, 0) for n in names}
    for rnd in range(args.rounds):
        for n in names:  # interleaved: A B C, A B C
            res, errors, hits, lookups = run_contender(n, CONTENDERS[n], args, rnd, args.build,
                                                       out)
            if errors:
                print("%s round %d: %d sessions failed: %s" % (n, rnd, len(errors), errors[0]),
                      file=sys.stderr)
            r, h, lk = pooled[n]
            pooled[n] = (r + res, h + hits, lk + lookups)
    print("llmsim, %d replicas x %d slots, %d-block prefix caches; %d tenants x %d sessions x "
          "%d turns (system %d B, +%d B a turn, %d tokens an answer, think %.1f s); %d round(s)"
          % (args.replicas, args.slots, args.cache_blocks, args.tenants, args.sessions,
             args.turns, args.system_bytes, args.turn_bytes, args.max_tokens, args.think_s,
             args.rounds))
    print("%-18s %6s %9s %9s %13s %13s %9s" % ("contender", "turns", "p50 ms", "p99 ms",
                                               "p50 ms (k>0)", "p99 ms (k>0)", "cache hit"))
    for n in names:
        res, hits, lookups = pooled[n]
        all_ttft = [t * 1000 for _, t in res if t is not None]
        later = [t * 1000 for k, t in res if k > 0 and t is not None]
        print("%-18s %6d %9.1f %9.1f %13.1f %13.1f %8.1f%%"
              % (n, len(res), pct(all_ttft, 50), pct(all_ttft, 99), pct(later, 50),
                 pct(later, 99), 100.0 * hits / lookups if lookups else float("nan")))
    print("runs in", out)


if __name__ == "__main__":
    main()
