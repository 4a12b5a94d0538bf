#!/usr/bin/env python3
"""Offline model of a simulated fleet: replays a benchmark trace through
llmsim's continuous-batching schedule under simple placement policies.

A full benchmark round takes half a minute per contender and its rounds
spread by 10-15%; this model replays the same trace in a fraction of a second
per policy, with no noise, so a placement idea can be judged before it is
built (bench/routing/NOTES.md 41 found the `ttft` pick's tolerance this way).

The schedule is llmsim's (tools/llmsim/README.md, "Timing model"), each of
its schedules (fcfs, prefill-first, chunked): with the default, each step
admits waiting sequences into free slots (FIFO), lasts (prefill_us_per_token x
prompt tokens admitted + decode_ms + decode_ms_per_seq x running) / speed and
ends with one token for every running sequence; a sequence's first token ends
the step that prefilled it, and it leaves after max_tokens tokens. A fixed
prefill cost per step and a batch exponent are modelled too. Prompt tokens
are prompt bytes / 4. Not modelled: the prefix cache (scenarios 6 and 6r),
faults, jitter, and the network and gateway (about a millisecond).
saturated_rps() is a replica's capacity under any of them (the mismatch
family's loads).

Policies:
  greedy      the soonest exact first token (what the benchmark's oracle does)
  least_conn  the fewest requests in flight, ties in turn (nginx least_conn)
  tolerant    of those within --tolerance-ms of the soonest, the one with the
              fewest requests (--tolerance-count 1; 0: the smallest share of its
              slots taken), under --tolerance-load of its slots taken, whose
              answer takes at most --tolerance-decode-ms longer (the `ttft`
              policy's pick, gateway/route/policies.c ttft_tolerate())
  e2e[:K=V...] end to end: of those whose exact first token is within
              `window` ms (100) of the soonest, the least first token +
              `decode` (1) x max_tokens x the decode step with it there +
              `interference` (1) x its prefill there x the answers generating
              there + `batch` (1) x what one more sequence adds to their
              steps x their tokens left (up to max_tokens); then the
              tolerant pick among those within --tolerance-ms of that cost
              (`tolerance` 0: none); answers of fewer than `long` (0)
              max_tokens are placed by the tolerant pick instead. What an
              end-to-end objective could do with exact state
              (bench/routing/NOTES.md 53, 55)
  replay:DIR  where a real run sent each request (DIR/requests.jsonl, the
              benchmark's per-request log): the model's TTFT against the one
              measured, request by request

  bench/routing/fleetmodel.py bench/out/RUN/1a/trace.jsonl --scenario 1a
  bench/routing/fleetmodel.py --scenario 1b --traces 16 --policy greedy,tolerant
  bench/routing/fleetmodel.py TRACE --scenario 1b --policy tolerant \\
      --noise 6,6,12,25 --seeds 8
  bench/routing/fleetmodel.py TRACE --scenario 1a --policy replay:bench/out/RUN/1a/ttft/round1
  bench/routing/fleetmodel.py --scenario 7 --traces 16 --policy tolerant --gateways 2 \
      --peer-interval 100
  bench/routing/fleetmodel.py OUT/m3-90/trace.jsonl --scenario m3-90 \
      --policy greedy,least_conn,replay:OUT/m3-90/ttft/round1
  bench/routing/fleetmodel.py --family OUT --policy least_conn,tolerant,e2e:window=50

--family OUT: the mismatch family's draws (OUT from run.py --scenario
mismatch, one trace.jsonl per draw and load, round 1's), each policy pooled
over the draws at each load as mismatch.py pools them (p99 TTFT and e2e
p99 over every request of the draws), with the ratios to the first policy
and the draws where a policy's p99 TTFT exceeds the first policy's.
"""

import argparse
import collections
import json
import os
import random
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import scenarios  # noqa: E402


class Request:
    __slots__ = ("i", "t", "prompt_bytes", "tokens", "max_tokens", "replica", "first", "done")

    def __init__(self, i, t_ms, prompt_bytes, max_tokens):
        self.i = i
        self.t = t_ms
        self.prompt_bytes = prompt_bytes
        self.tokens = max(1, prompt_bytes // 4)
        self.max_tokens = max(1, max_tokens)
        self.replica = None
        self.first = None
        self.done = None


class Replica:
    """One llmsim replica; times in ms. Its schedule, step shape and timing
    are sim's (scenarios.SIM keys; llmsim's defaults where absent): the same
    steps as tools/llmsim/engine.c, without jitter."""

    def __init__(self, name, speed, sim):
        self.name = name
        self.speed = speed
        self.slots = sim["slots"]
        self.pre = sim["prefill_us_per_token"] / 1000.0
        self.fixed = sim.get("prefill_fixed_ms", 0.0)
        self.base = sim["decode_ms"]
        self.per = sim["decode_ms_per_seq"]
        self.exp = sim.get("decode_batch_exp", 1.0)
        self.schedule = sim.get("schedule", "fcfs")
        self.budget = sim.get("step_tokens") or (2048 if self.schedule == "chunked" else 0)
        if self.schedule not in SCHEDULES:
            raise ValueError("unknown schedule %r" % self.schedule)
        self.running = []            # [tokens left, prefill left, request], in admission order
        self.waiting = collections.deque()
        self.step_end = None         # end of the step in progress; None = idle
        self.batch = []              # entries of running that emit a token at its end

    def step_ms(self, prefill_tokens, batch):
        b = batch if self.exp == 1.0 else batch ** self.exp
        return ((self.fixed if prefill_tokens > 0 else 0.0) + self.pre * prefill_tokens
                + self.base + self.per * b) / self.speed

    def _admit(self):
        r = self.waiting.popleft()
        e = [r.max_tokens, r.tokens, r]
        self.running.append(e)
        return e

    def _schedule(self):
        """The batch of the step starting now: (prefill tokens, batch size, emitting entries)."""
        prefill = 0
        if self.schedule == "prefill-first" and self.waiting and len(self.running) < self.slots:
            emit = []
            while len(self.running) < self.slots and self.waiting:
                e = self._admit()
                prefill += e[1]
                e[1] = 0
                emit.append(e)
            return prefill, len(emit), emit
        if self.schedule != "chunked":
            while len(self.running) < self.slots and self.waiting:
                e = self._admit()
                prefill += e[1]
                e[1] = 0
            return prefill, len(self.running), list(self.running)
        emit = [e for e in self.running if e[1] == 0]
        batch = len(emit)
        room = self.budget - batch

        def chunk(e):
            # as much of e's prompt as the budget has left; emits if that finishes it
            c = min(e[1], room)
            e[1] -= c
            if e[1] == 0:
                emit.append(e)
            return c
        for e in list(self.running):
            if e[1] > 0 and room > 0:
                c = chunk(e)
                room, prefill, batch = room - c, prefill + c, batch + 1
        while len(self.running) < self.slots and self.waiting and room > 0:
            c = chunk(self._admit())
            room, prefill, batch = room - c, prefill + c, batch + 1
        return prefill, batch, emit

    def _start(self, t):
        prefill, batch, self.batch = self._schedule()
        self.step_end = t + self.step_ms(prefill, batch) if self.running else None

    def advance(self, t):
        """Ends every step that ends by t."""
        while self.step_end is not None and self.step_end <= t:
            end = self.step_end
            for e in self.batch:
                r = e[2]
                if r.first is None:
                    r.first = end
                e[0] -= 1
                if e[0] == 0:
                    r.done = end
            self.running = [e for e in self.running if e[0] > 0]
            self.step_end = None
            if self.running or self.waiting:
                self._start(end)

    def submit(self, r, t):
        r.replica = self.name
        self.waiting.append(r)
        if self.step_end is None:
            self._start(t)

    def in_flight(self, hide=None):
        if not hide:
            return len(self.running) + len(self.waiting)
        return (sum(1 for e in self.running if e[2].i not in hide)
                + sum(1 for r in self.waiting if r.i not in hide))

    def predict(self, t, tokens, hide=None):
        """Exact TTFT of one more request of `tokens` prompt tokens arriving
        at t, if nothing else arrives (llmsim_shm_predict_ttft_ns(), the same
        passes); the requests in `hide` left out (a peer gateway's, not yet
        heard of)."""
        hide = hide or ()
        # every sequence as it will be when the step in progress ends
        seqs = []
        for e in self.running:
            if e[2].i in hide:
                continue
            left = e[0] - (1 if any(e is b for b in self.batch) else 0)
            if left > 0:
                seqs.append([left, e[1]])
        queue = collections.deque((r.tokens, r.max_tokens) for r in self.waiting
                                  if r.i not in hide)
        now = self.step_end if self.step_end is not None else t
        new_left = None  # chunked: the new request's prefill still to do, once admitted

        def emit(first, m):
            for i, x in enumerate(seqs):
                if i >= first and x[1] == 0:
                    x[0] -= m
            seqs[:] = [x for x in seqs if x[0] > 0]

        def min_left():
            return min((x[0] for x in seqs if x[1] == 0), default=None)

        while True:
            if self.schedule == "fcfs" or (self.schedule == "prefill-first"
                                           and len(seqs) < self.slots):
                first = 0 if self.schedule == "fcfs" else len(seqs)
                prefill = 0
                while len(seqs) < self.slots:
                    if not queue:
                        return now + self.step_ms(prefill + tokens, len(seqs) - first + 1) - t
                    n, m = queue.popleft()
                    prefill += n
                    seqs.append([m, 0])
                if self.schedule == "fcfs":
                    m = min_left()
                    now += self.step_ms(prefill, len(seqs)) + (m - 1) * self.step_ms(0, len(seqs))
                    emit(0, m)
                else:
                    now += self.step_ms(prefill, len(seqs) - first)
                    emit(first, 1)
                continue
            if self.schedule == "prefill-first":
                m = min_left()
                now += m * self.step_ms(0, len(seqs))
                emit(0, m)
                continue
            decoding = sum(1 for x in seqs if x[1] == 0)
            room = self.budget - decoding
            part = next((x for x in seqs if x[1] > 0), None)
            left = new_left if new_left is not None else (part[1] if part else 0)
            if left > room > 0:
                # steps that carry one long prefill on, the batch unchanged
                n = (left - 1) // room
                m = min_left()
                n = min(n, m) if m is not None else n
                now += n * self.step_ms(room, decoding + 1)
                if new_left is not None:
                    new_left -= n * room
                else:
                    part[1] -= n * room
                emit(0, n)
                continue
            if left == 0 and len(seqs) == self.slots:
                m = min_left()
                now += m * self.step_ms(0, len(seqs))
                emit(0, m)
                continue
            prefill, batch = 0, decoding
            if left > 0:
                c = min(left, room)
                room -= c
                prefill += c
                batch += 1
                if new_left is not None:
                    new_left -= c
                    if new_left == 0:
                        return now + self.step_ms(prefill, batch) - t
                else:
                    part[1] -= c
            while new_left is None and len(seqs) < self.slots and room > 0:
                if not queue:
                    c = min(tokens, room)
                    prefill += c
                    batch += 1
                    if c == tokens:
                        return now + self.step_ms(prefill, batch) - t
                    new_left = tokens - c
                    break
                n, m = queue.popleft()
                c = min(n, room)
                room -= c
                prefill += c
                batch += 1
                seqs.append([m, n - c])
            now += self.step_ms(prefill, batch)
            emit(0, 1)


SCHEDULES = ("fcfs", "prefill-first", "chunked")


def saturated_rps(sim, speed, prompt_bytes, max_tokens, n=2000, seed=1):
    """Requests per second one replica completes while its queue never
    empties: n requests of the mix (llmload's SPECs), all queued at once;
    completions counted from the 10th to the 90th percentile of their ends
    (the start and the drain, with a batch not yet or no longer full, left
    out). The schedule's own costs (prefill steps that hold decode, chunks)
    are in it; no closed form needed."""
    rng = random.Random(seed)
    x = Replica("r", speed, sim)
    reqs = [Request(i, 0.0, spec_sample(prompt_bytes, rng), spec_sample(max_tokens, rng))
            for i in range(n)]
    for r in reqs:
        x.submit(r, 0.0)
    x.advance(float("inf"))
    ends = sorted(r.done for r in reqs)
    lo, hi = ends[n // 10], ends[n * 9 // 10]
    return (n * 9 // 10 - n // 10) * 1000.0 / (hi - lo)


def spec_sample(spec, rng):
    """One value of an llmload SPEC: N, A-B (uniform integers) or mix:P1%V1,P2%V2,..."""
    spec = str(spec)
    if spec.startswith("mix:"):
        u = rng.random() * 100.0
        parts = spec[4:].split(",")
        for part in parts:
            pct, val = part.split("%", 1)
            u -= float(pct)
            if u < 0:
                return spec_sample(val, rng)
        return spec_sample(parts[-1].split("%", 1)[1], rng)
    if "-" in spec:
        a, b = spec.split("-", 1)
        return rng.randint(int(a), int(b))
    return int(spec)


def fleet_for(scen, speeds=None):
    """The scenario's replicas: each its own timing model where the scenario
    has one per replica ("sims", the mismatch family), else the shared one."""
    speeds = speeds or scen["speeds"]
    sims = scen.get("sims") or [scen["sim"]] * len(speeds)
    return [Replica("r%d" % (i + 1), s, sims[i]) for i, s in enumerate(speeds)]


def load_trace(path):
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            e = json.loads(line)
            out.append(Request(i, e["t_us"] / 1000.0, e["prompt_bytes"], e["max_tokens"]))
    return out


def pick_least_conn(fleet, state):
    least = min(x.in_flight() for x in fleet)
    n = len(fleet)
    for k in range(n):
        x = fleet[(state["next"] + k) % n]
        if x.in_flight() == least:
            state["next"] = (fleet.index(x) + 1) % n
            return x


def pick_by_prediction(fleet, r, args, rng, hide=None, tolerant=None):
    """The least predicted first token (greedy), or the tolerant pick
    (`tolerant`, by default where the policy is); with --noise where rng is
    given."""
    pred = [x.predict(r.t, r.tokens, hide) for x in fleet]
    if args.noise and rng is not None:
        pred = [p + rng.gauss(0, sd) for p, sd in zip(pred, args.noise)]
    best = min(range(len(fleet)), key=lambda i: pred[i])
    if not (args.policy == "tolerant" if tolerant is None else tolerant):
        return fleet[best]
    return tolerant_pick(fleet, pred, best,
                         max(args.tolerance_ms, args.tolerance_frac * pred[best]), r, args, hide)


def tolerant_pick(xs, cost, best, tol, r, args, hide=None):
    """The `ttft` pick's tolerance (gateway/route/policies.c ttft_tolerate())
    over replicas xs costing cost, xs[best] the cheapest: of those within tol
    of it, the one with the fewest requests over the most slots among them
    (--tolerance-count 1) or the smallest share of its slots taken (0), or a
    blend, each other than the cheapest under --tolerance-load of its slots
    taken and its answer at most --tolerance-decode-ms longer there."""
    def itl(x):
        return x.step_ms(0, min(x.slots, x.in_flight(hide) + 1))

    def share(x):
        return min(1.0, x.in_flight(hide) / x.slots)

    most = max([1] + [x.slots for x in xs])

    def taken(x):
        return ((1 - args.tolerance_count) * share(x)
                + args.tolerance_count * min(1.0, x.in_flight(hide) / most))

    ok = []
    for i, x in enumerate(xs):
        slower = max(0.0, itl(x) - itl(xs[best]))
        if cost[i] > cost[best] + tol:
            continue
        if i == best or (share(x) < args.tolerance_load
                         and r.max_tokens * slower <= args.tolerance_decode_ms):
            ok.append(i)
    return xs[min(ok, key=lambda i: (taken(xs[i]), cost[i]))]


def policy_options(spec, defaults):
    """NAME:K=V:K=V -> defaults updated with the K=V (floats)."""
    out = dict(defaults)
    for kv in spec.split(":")[1:]:
        k, _, v = kv.partition("=")
        if k not in out:
            raise ValueError("policy %s: unknown option %r (%s)" % (
                spec.split(":")[0], k, ", ".join(sorted(out))))
        out[k] = float(v)
    return out


E2E = {"window": 100.0, "decode": 1.0, "interference": 1.0, "batch": 1.0, "tolerance": 1.0,
       "long": 0.0}


PLACEMENTS = ("greedy", "least_conn", "tolerant", "e2e")  # what run() places by itself


def set_policy(args, policy):
    """args.policy (and args.policy_opts for e2e) from NAME[:K=V...]; the name."""
    args.policy = policy.split(":", 1)[0]
    if args.policy == "e2e":
        args.policy_opts = policy_options(policy, E2E)
    return args.policy


def pick_e2e(fleet, r, args, opts):
    """The e2e policy (module doc): exact state, no noise."""
    if r.max_tokens < opts["long"]:
        return pick_by_prediction(fleet, r, args, None, tolerant=True)
    cands = []
    for x in fleet:
        first = x.predict(r.t, r.tokens)
        decoders = [e for e in x.running if e[1] == 0]
        n = len(decoders)
        prefill = (x.fixed + x.pre * r.tokens) / x.speed
        grow = x.per * ((n + 1) ** x.exp - n ** x.exp) / x.speed
        cost = (first
                + opts["decode"] * r.max_tokens * x.step_ms(0, min(x.slots, x.in_flight() + 1))
                + opts["interference"] * prefill * n
                + opts["batch"] * grow * sum(min(e[0], r.max_tokens) for e in decoders))
        cands.append((cost, first, x))
    soonest = min(c[1] for c in cands)
    ok = [c for c in cands if c[1] <= soonest + opts["window"]]
    best = min(range(len(ok)), key=lambda i: ok[i][0])
    if opts["tolerance"] <= 0:
        return ok[best][2]
    return tolerant_pick([c[2] for c in ok], [c[0] for c in ok], best, args.tolerance_ms, r, args)


def run(scen, trace, args, seed=0, placement=None):
    """Replays the trace (its requests are left as they are, so a trace serves
    every run); returns fresh requests with their times."""
    fleet = fleet_for(scen, args.speed_list)
    by_name = {x.name: x for x in fleet}
    rng = random.Random(seed)
    state = {"next": 0}
    reqs = [Request(r.i, r.t, r.prompt_bytes, r.max_tokens) for r in trace]
    # --gateways 2: each request goes to one of two gateways at random
    # (seeded, as run.py splits the trace); a gateway hears of its peer's
    # requests at its --peer-interval answers (a random phase), so those sent
    # since the last answer are hidden from its picks
    split = random.Random(1000 + seed)
    gw = [split.random() < 0.5 for _ in reqs] if args.gateways == 2 else None
    phase = split.random() * args.peer_interval if gw else 0
    sent = [[], []]  # per gateway: (time, request id) in order
    for k, r in enumerate(reqs):
        hide = None
        for x in fleet:
            x.advance(r.t)
        if gw is not None and args.peer_interval > 0:
            heard = phase + args.peer_interval * ((r.t - phase) // args.peer_interval)
            other = sent[1 - gw[k]]
            hide = set()
            for t_sent, i in reversed(other):
                if t_sent <= heard:
                    break
                hide.add(i)
        if placement is not None:
            x = by_name.get(placement.get(r.i))
            if x is None:
                continue  # failed or unplaced in the real run
        elif args.policy == "least_conn":
            x = pick_least_conn(fleet, state)
        elif args.policy == "e2e":
            x = pick_e2e(fleet, r, args, args.policy_opts)
        else:
            x = pick_by_prediction(fleet, r, args, rng, hide)
        x.submit(r, r.t)
        if gw is not None:
            sent[gw[k]].append((r.t, r.i))
    for x in fleet:
        x.advance(float("inf"))
    return [r for r in reqs if r.replica is not None]


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))]


def summary(reqs, names):
    ttft = [r.first - r.t for r in reqs]
    e2e = [r.done - r.t for r in reqs]
    share = collections.Counter(r.replica for r in reqs)
    return {"n": len(reqs), "p50": pct(ttft, 50), "p99": pct(ttft, 99),
            "e2e_p99": pct(e2e, 99),
            "share": [100.0 * share[n] / max(1, len(reqs)) for n in names]}


def load_placement(folder):
    placement, measured = {}, {}
    with open(os.path.join(folder, "requests.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e.get("status") == 200 and e.get("replica") and e.get("ttft_ms") is not None:
                placement[e["i"]] = e["replica"]
                measured[e["i"]] = e["ttft_ms"]
    return placement, measured


def make_traces(scen, args, folder):
    """--traces N: the scenario's own trace with seeds 1..N (llmload --dry-run)."""
    import run as bench  # noqa: E402 (the benchmark's own trace maker)

    if scen.get("fleet"):
        import mismatch  # noqa: E402 (imports this module)
        cap = mismatch.capacity(scen["fleet"], scen["prompt_bytes"], scen["max_tokens"])
    else:
        cap = scenarios.capacity_rps(scen["sim"], scen["speeds"], scen["prompt_bytes"],
                                     scen["max_tokens"], scen["prefix_bytes"])
    paths = []
    for seed in range(1, args.traces + 1):
        path = os.path.join(folder, "trace%d.jsonl" % seed)
        bench.make_trace(args.build, dict(scen, seed=seed), cap * scen["load"],
                         args.duration or scen["duration"], path)
        paths.append(path)
    return paths


def evaluate(scen, traces, policy, args, names):
    """One row: medians over the traces (loaded, load_trace()) and noise seeds."""
    set_policy(args, policy)
    if args.policy == "replay":
        placement, measured = load_placement(policy.split(":", 1)[1])
        reqs = run(scen, traces[0], args, placement=placement)
        row = summary(reqs, names)
        err = [r.first - r.t - measured[r.i] for r in reqs]
        row["measured_p50"] = pct(list(measured.values()), 50)
        row["measured_p99"] = pct(list(measured.values()), 99)
        row["error_p10"], row["error_p50"], row["error_p90"] = (
            pct(err, 10), pct(err, 50), pct(err, 90))
    elif args.policy in PLACEMENTS:
        seeds = args.seeds if args.noise and args.policy in ("greedy", "tolerant") else 1
        rows = [summary(run(scen, t, args, seed=s), names)
                for t in traces for s in range(seeds)]
        row = {k: pct([x[k] for x in rows], 50) for k in ("n", "p50", "p99", "e2e_p99")}
        row["p99_min"] = min(x["p99"] for x in rows)
        row["p99_max"] = max(x["p99"] for x in rows)
        row["share"] = [pct([x["share"][i] for x in rows], 50) for i in range(len(names))]
    else:
        raise ValueError("unknown policy %r" % policy)
    row["policy"] = policy
    return row


def family(args, policies):
    """--family OUT: each policy over the draws' traces, pooled per load."""
    import mismatch  # noqa: E402 (imports this module)

    if any(p.startswith("replay") for p in policies):
        raise ValueError("--family: replay:DIR replays one run")
    sids = sorted((d for d in os.listdir(args.family) if re.match(r"m\d+-\d+$", d)
                   and os.path.exists(os.path.join(args.family, d, "trace.jsonl"))),
                  key=lambda d: (int(d.split("-")[1]), int(d[1:].split("-")[0])))
    if not sids:
        raise ValueError("--family: no OUT/mK-LOAD/trace.jsonl in %s" % args.family)
    for load in sorted(set(d.split("-")[1] for d in sids), key=int):
        pooled = {p: ([], []) for p in policies}
        per = {p: {} for p in policies}
        for sid in (d for d in sids if d.endswith("-" + load)):
            k = int(sid[1:].split("-")[0])
            scen = mismatch.make_scenarios(k, args.draw_seed, only=sid)[0]
            trace = load_trace(os.path.join(args.family, sid, "trace.jsonl"))
            for policy in policies:
                if set_policy(args, policy) not in PLACEMENTS:
                    raise ValueError("unknown policy %r" % policy)
                reqs = run(scen, trace, args)
                ttft = [r.first - r.t for r in reqs]
                pooled[policy][0].extend(ttft)
                pooled[policy][1].extend(r.done - r.t for r in reqs)
                per[policy][sid] = pct(ttft, 99)
        base = pooled[policies[0]]
        bt, be = pct(base[0], 99), pct(base[1], 99)
        print("%d%% load, %d draws, pooled (ratios: to %s)" % (int(load), len(per[policies[0]]),
                                                              policies[0]))
        print("  %-40s %8s %6s %10s %6s  %s" % ("policy", "p99 ms", "ratio", "e2e p99 s", "ratio",
                                               "draws whose p99 TTFT is over the first's"))
        for policy in policies:
            t, e = pct(pooled[policy][0], 99), pct(pooled[policy][1], 99)
            over = [sid for sid, v in per[policy].items() if v > per[policies[0]][sid]]
            print("  %-40s %8.0f %6.2f %10.2f %6.2f  %s" % (policy[-40:], t, t / bt, e / 1000.0,
                                                          e / be, " ".join(over) or "-"))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("trace", nargs="?", help="the benchmark's trace.jsonl (llmload --trace-out)")
    ap.add_argument("--scenario", default="1a",
                    help="whose fleet (speeds, timing): 1a, 1b, ..., or a mismatch draw at a "
                    "load (m3-90: run.py --scenario mismatch's, with --draw-seed)")
    ap.add_argument("--draw-seed", type=int, default=1, help="mismatch: the draws' seed")
    ap.add_argument("--speeds", help="comma list overriding the scenario's speeds")
    ap.add_argument("--traces", type=int, default=0,
                    help="instead of TRACE: the scenario's trace with seeds 1..N; medians "
                    "over them (needs llmload: --build)")
    ap.add_argument("--duration", type=float, help="seconds of arrivals of --traces")
    ap.add_argument("--build", default=os.path.join(SRC, "build"),
                    help="CMake build folder with llmload (default: build/)")
    ap.add_argument("--policy", default="greedy,least_conn,tolerant",
                    help="comma list: greedy, least_conn, tolerant, e2e[:K=V...], replay:DIR")
    ap.add_argument("--family", metavar="OUT",
                    help="instead of TRACE: the mismatch family's traces in OUT (run.py "
                    "--scenario mismatch), pooled per load")
    ap.add_argument("--tolerance-ms", type=float, default=20.0)
    ap.add_argument("--tolerance-frac", type=float, default=0.0,
                    help="tolerant: the tolerance is at least this fraction of the soonest "
                    "first token (0: --tolerance-ms alone; tried in the gateway and not kept, "
                    "NOTES.md 53)")
    ap.add_argument("--tolerance-load", type=float, default=0.75)
    ap.add_argument("--tolerance-count", type=float, default=1.0,
                    help="tolerant: rank by requests (1, the gateway's default) or by share "
                    "of slots taken (0), or a blend")
    ap.add_argument("--tolerance-decode-ms", type=float, default=2500.0)
    ap.add_argument("--noise", help="comma list: standard deviation (ms) of the prediction's "
                    "error on each replica (greedy, tolerant)")
    ap.add_argument("--seeds", type=int, default=1, help="noise seeds; medians reported")
    ap.add_argument("--gateways", type=int, choices=(1, 2), default=1,
                    help="2: two gateways split the trace at random, each hearing of "
                    "the other's requests every --peer-interval (scenario 7 with peers)")
    ap.add_argument("--peer-interval", type=float, default=100.0,
                    help="ms between a gateway's answers to its peer (0: at once)")
    ap.add_argument("--json", action="store_true", help="one JSON object per policy")
    args = ap.parse_args(argv)
    if args.family:
        if args.trace or args.traces:
            ap.error("--family replaces TRACE and --traces")
        args.speed_list = None
        args.noise = None
        try:
            return family(args, args.policy.split(","))
        except ValueError as e:
            ap.error(str(e))

    scen = scenarios.by_id().get(args.scenario)
    if scen is None and args.scenario.startswith("m"):
        import mismatch  # noqa: E402 (imports this module)
        try:
            found = mismatch.make_scenarios(int(args.scenario[1:].split("-")[0]),
                                            args.draw_seed, only=args.scenario)
        except ValueError:
            found = []
        scen = found[0] if found else None
    if scen is None:
        ap.error("unknown scenario %r" % args.scenario)
    if (args.trace is None) == (args.traces == 0):
        ap.error("give a TRACE or --traces N")
    args.speed_list = [float(s) for s in args.speeds.split(",")] if args.speeds else None
    args.noise = [float(s) for s in args.noise.split(",")] if args.noise else None
    names = [x.name for x in fleet_for(scen, args.speed_list)]
    if args.noise and len(args.noise) != len(names):
        ap.error("--noise needs one value per replica (%d)" % len(names))
    policies = args.policy.split(",")
    if args.traces and any(p.startswith("replay") for p in policies):
        ap.error("replay:DIR replays the TRACE its run used")

    with tempfile.TemporaryDirectory(prefix="fleetmodel-") as tmp:
        paths = make_traces(scen, args, tmp) if args.traces else [args.trace]
        traces = [load_trace(path) for path in paths]
        if not args.json:
            print("%-28s %5s %8s %8s %10s  %s" % ("policy", "n", "p50 ms", "p99 ms", "e2e p99 s",
                                                   "share % " + "/".join(names)))
        for policy in policies:
            try:
                row = evaluate(scen, traces, policy, args, names)
            except ValueError as e:
                ap.error(str(e))
            if args.json:
                print(json.dumps(row))
                continue
            print("%-28s %5d %8.1f %8.1f %10.2f  %s%s" % (
                policy[-28:], row["n"], row["p50"], row["p99"], row["e2e_p99"] / 1000.0,
                "/".join("%.0f" % s for s in row["share"]),
                "  (p99 %.0f-%.0f over %d runs)" % (row["p99_min"], row["p99_max"],
                                                  len(traces) * (args.seeds if args.noise else 1))
                if len(traces) > 1 or args.noise else ""))
            if "measured_p99" in row:
                print("%-28s %5s %8.1f %8.1f %10s  model - measured per request: p10 %.1f, "
                      "p50 %.1f, p90 %.1f ms" % ("  measured", "", row["measured_p50"],
                                                 row["measured_p99"], "", row["error_p10"],
                                                 row["error_p50"], row["error_p90"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
