"""Load that moves: the mismatch family's drawn fleets under bursts, crashes,
a speed change, a fleet slower than the router learnt, and a ramp.

The mismatch family (mismatch.py) runs every drawn fleet at a steady 70% and
90% of its capacity. The moving-load family runs the same fleets (m0, the
issue's, and draws 1..N, engines hidden from the gateway) under the shapes
below, each a scenario of its own (`mK-SHAPE`), with the same contenders
(ttft, nginx least_conn, HAProxy leastconn, least_request, the oracle),
interleaved, each round its own trace:

    steady-70, steady-90   Poisson at 70% / 90% of capacity            mK-s70, mK-s90
    burst-100, burst-120   on/off: 5 s at 100% / 120%, then 5 s idle    mK-b100, mK-b120
    crash                  the replica with the most capacity crashes   mK-crash
                           at 1/3 of the run, every connection reset
                           (llmsim crash@T:reset), and stays down
    crash-back             the same, restarted on its port at 2/3       mK-back
    speed                  the replica with the most capacity runs 5x   mK-speed
                           slower from 1/3 to 2/3 of the run
    fleet-slow             every replica's steps 20-30% longer (drawn   mK-slow
                           per fleet) for a minute in the middle
    ramp                   arrivals from 20% to 95% of capacity,        mK-ramp
                           rising linearly over the run

Where a shape takes capacity away (crash, crash-back, speed) its load is 70%
of the whole fleet or less, so that the replicas left run at 90% of theirs
at most (a queue that grows without end says nothing about routing). Every
run is long enough that each contender's p99 TTFT rests on TAIL_MIN requests
or more, pooled over the rounds (the p99 is the TAIL_MIN-th slowest when a
contender has 100 x TAIL_MIN requests or more): durations follow from the
fleet's capacity, the shape's mean rate and --rounds, never shorter than the
shape's own minimum; a shape's events sit at fractions of the duration.

What is judged (per draw and shape, and pooled): see summary() below; the
tables again from a finished run's folder:

    bench/routing/shapes.py OUT [OUT2 ...] [--markdown] [--json] [--block-s S]

Python 3 standard library only. See bench/routing/README.md, "Load that moves".
"""

import argparse
import json
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleetmodel  # noqa: E402
import mismatch as M  # noqa: E402
import scenarios as S  # noqa: E402

CONTENDERS = ["ttft", "nginx", "haproxy", "least_request", "oracle"]
PEERS = ("nginx", "haproxy")   # the judged references: the better of the two
TAIL_MIN = 10                  # requests at or above each contender's p99 (run.py --tail-min)
MAX_DURATION_S = 240           # a draw of low capacity at 1 round stops here
BURST_ON_S = 5.0
BURST_OFF_S = 5.0
SPEED_FACTOR = 5.0             # speed: the replica's steps this many times longer
FLEET_SLOW = (1.2, 1.3)        # fleet-slow: every step this much longer (uniform, per fleet)
FLEET_SLOW_S = 60.0            # for this long (or 60% of a shorter run)
RAMP = (0.2, 0.95)             # ramp: from, to (fractions of capacity)
LOAD = 0.7                     # the load of the shapes with events
MAX_LEFT_LOAD = 0.9            # what the replicas left may run at, at most

# shape -> (scenario id suffix, minimum duration in s, what)
SHAPES = {
    # s70, s90: not the mismatch family's mK-70, mK-90 (20 s, whatever the tail)
    "steady-70": ("s70", 20, "Poisson arrivals at 70% of capacity"),
    "steady-90": ("s90", 20, "Poisson arrivals at 90% of capacity"),
    "burst-100": ("b100", 40, "on/off bursts: 5 s at 100% of capacity, then 5 s without "
                              "arrivals (mean 50%)"),
    "burst-120": ("b120", 40, "on/off bursts: 5 s at 120% of capacity, then 5 s without "
                              "arrivals (mean 60%)"),
    "crash": ("crash", 45, "the replica with the most capacity crashes at 1/3 of the run "
                           "(every connection reset) and stays down"),
    "crash-back": ("back", 45, "the replica with the most capacity crashes at 1/3 of the run "
                               "(every connection reset) and is restarted on its port at 2/3"),
    "speed": ("speed", 45, "the replica with the most capacity runs %gx slower from 1/3 to "
                           "2/3 of the run" % SPEED_FACTOR),
    "fleet-slow": ("slow", 100, "every replica's steps longer for a minute in the middle of the "
                                "run (a busy host, a thermal limit)"),
    "ramp": ("ramp", 60, "arrivals rising linearly from %d%% to %d%% of capacity"
                         % (100 * RAMP[0], 100 * RAMP[1])),
}
SHAPE_BY_SUFFIX = {v[0]: k for k, v in SHAPES.items()}


def scenario_id(k, shape):
    return "m%d-%s" % (k, SHAPES[shape][0])


def parse_id(sid):
    """'m3-crash' -> (3, 'crash'); None if sid names no moving-load scenario."""
    if not sid.startswith("m") or "-" not in sid:
        return None
    k, _, suffix = sid[1:].partition("-")
    if not k.isdigit() or suffix not in SHAPE_BY_SUFFIX:
        return None
    return int(k), SHAPE_BY_SUFFIX[suffix]


def shares(fleet, prompt_bytes=S.PROMPT, max_tokens=S.MAX_TOKENS):
    """Each replica's share of the fleet's capacity (fleetmodel.saturated_rps())."""
    caps = [fleetmodel.saturated_rps(sim, sp, prompt_bytes, max_tokens)
            for sim, sp in zip(fleet["sims"], fleet["speeds"])]
    total = sum(caps)
    return [c / total for c in caps]


def fleet_slow_factor(draw_seed, k):
    """fleet-slow's factor for draw k: each step this many times longer, drawn per fleet."""
    rng = random.Random("moving fleet-slow %d %d" % (draw_seed, k))
    return round(rng.uniform(*FLEET_SLOW), 3)


def _floor3(x):
    return math.floor(x * 1000.0) / 1000.0


def shape_plan(fleet, shape, draw_seed=1, sh=None):
    """What shape does to a fleet: the load (mean fraction of capacity), the
    trace's own load and burst or ramp, the replica it strikes and how.
    sh: the fleet's shares() when known (they take the fleet model a while)."""
    sh = sh or shares(fleet)
    big = max(range(len(sh)), key=lambda i: sh[i])
    plan = {"shape": shape, "load": None, "trace_load": None, "burst": None, "ramp": None,
            "replica": None, "factor": None}
    if shape == "steady-70":
        plan["load"] = 0.7
    elif shape == "steady-90":
        plan["load"] = 0.9
    elif shape in ("burst-100", "burst-120"):
        peak = 1.0 if shape == "burst-100" else 1.2
        period = BURST_ON_S + BURST_OFF_S
        plan["load"] = peak * BURST_ON_S / period
        # llmload --burst F:ON:OFF keeps the mean rate: F x mean in ON, the rest in OFF (none)
        plan["burst"] = "%g:%g:%g" % (period / BURST_ON_S, BURST_ON_S, BURST_OFF_S)
        plan["peak"] = peak
    elif shape in ("crash", "crash-back"):
        plan["replica"] = big
        plan["load"] = _floor3(min(LOAD, MAX_LEFT_LOAD * (1.0 - sh[big])))
    elif shape == "speed":
        plan["replica"] = big
        plan["factor"] = SPEED_FACTOR
        left = 1.0 - sh[big] + sh[big] / SPEED_FACTOR
        plan["load"] = _floor3(min(LOAD, MAX_LEFT_LOAD * left))
    elif shape == "fleet-slow":
        plan["factor"] = fleet_slow_factor(draw_seed, fleet["k"])
        plan["load"] = LOAD
    elif shape == "ramp":
        plan["ramp"] = RAMP
        plan["load"] = (RAMP[0] + RAMP[1]) / 2.0
        plan["trace_load"] = RAMP[1]  # drawn at the peak, thinned (ramp_trace())
    else:
        raise ValueError("unknown shape %r (known: %s)" % (shape, ", ".join(SHAPES)))
    plan["trace_load"] = plan["trace_load"] or plan["load"]
    plan["shares"] = [round(x, 3) for x in sh]
    return plan


def describe_plan(plan):
    """One line: the shape as run on this fleet."""
    s = plan["shape"]
    r = "r%d" % (plan["replica"] + 1) if plan["replica"] is not None else None
    if s.startswith("steady"):
        return "steady, %d%% of capacity" % round(100 * plan["load"])
    if s.startswith("burst"):
        return ("on/off %g s / %g s at %d%% of capacity (mean %d%%)"
                % (BURST_ON_S, BURST_OFF_S, round(100 * plan["peak"]), round(100 * plan["load"])))
    if s == "crash":
        return "%s (%d%% of capacity) crashes at 1/3, stays down; %d%% load" % (
            r, round(100 * plan["shares"][plan["replica"]]), round(100 * plan["load"]))
    if s == "crash-back":
        return "%s (%d%% of capacity) crashes at 1/3, back at 2/3; %d%% load" % (
            r, round(100 * plan["shares"][plan["replica"]]), round(100 * plan["load"]))
    if s == "speed":
        return "%s (%d%% of capacity) %gx slower from 1/3 to 2/3; %d%% load" % (
            r, round(100 * plan["shares"][plan["replica"]]), plan["factor"],
            round(100 * plan["load"]))
    if s == "fleet-slow":
        return "every step %.0f%% longer for a minute; %d%% load" % (
            100 * (plan["factor"] - 1), round(100 * plan["load"]))
    return "ramp %d%% -> %d%% of capacity" % (round(100 * RAMP[0]), round(100 * RAMP[1]))


def make_scenarios(draws, draw_seed=1, shapes=None, only=None, gauge_lags=False):
    """The family's scenarios: m0 and draws 1..draws under each shape (all of
    SHAPES unless `shapes` names some); `only` ("m3" or "m3-crash") keeps one
    draw or one scenario."""
    shapes = list(shapes or SHAPES)
    for s in shapes:
        if s not in SHAPES:
            raise ValueError("unknown shape %r (known: %s)" % (s, ", ".join(SHAPES)))
    out = []
    for k in range(0, draws + 1):
        if only and only.partition("-")[0] != "m%d" % k:
            continue
        fleet = M.draw_fleet(draw_seed, k)
        if gauge_lags:
            fleet = M.with_gauge_lags(fleet)
        sh = shares(fleet)
        for shape in shapes:
            sid = scenario_id(k, shape)
            if only and only not in (sid, "m%d" % k):
                continue
            plan = shape_plan(fleet, shape, draw_seed, sh)
            suffix, min_s, what = SHAPES[shape]
            out.append(dict(
                S.scenario(id=sid, scenario="moving",
                           title="Moving load: %s, %s" % (
                               "m0 (the issue's fleet)" if k == 0 else "draw %d" % k, shape),
                           speeds=fleet["speeds"], load=plan["load"], duration=min_s, quick=8,
                           contenders=list(CONTENDERS), criteria="moving",
                           what="%s: %s. %s" % ("the issue's fleet" if k == 0 else "draw %d" % k,
                                                M.describe(fleet), describe_plan(plan)),
                           sim=fleet["sims"][0], sims=fleet["sims"], gateway_flavor="auto",
                           timeout_s=M.TIMEOUT_S, seed=1000 * draw_seed + 10 * k + 7919,
                           burst=plan["burst"]),
                fleet=fleet, shape=shape, plan=plan, trace_load=plan["trace_load"],
                ramp=plan["ramp"]))
    return out


def duration_s(scen, rate, rounds, tail_min=TAIL_MIN):
    """Seconds of arrivals: long enough that a contender's requests over the
    rounds put tail_min of them at or above its p99 (100 x tail_min requests),
    at least the shape's minimum, at most MAX_DURATION_S; bursts whole periods."""
    need = 100.0 * tail_min / max(rate * rounds, 1e-9)
    d = min(MAX_DURATION_S, max(float(scen["duration"]), math.ceil(need)))
    if scen.get("burst"):
        period = BURST_ON_S + BURST_OFF_S
        d = period * math.ceil(d / period)
    return d


def place_events(scen, duration):
    """The shape's events at their times for a run of `duration` seconds:
    {"crash": ..., "slowdown": ..., "faults": [...]} in run.py's terms."""
    plan = scen["plan"]
    out = {"crash": None, "slowdown": None, "faults": []}
    third = duration / 3.0
    if plan["shape"] in ("crash", "crash-back"):
        out["crash"] = {"replica": plan["replica"], "at": round(third, 3), "reset": True,
                        "restart_after": round(third, 3) if plan["shape"] == "crash-back"
                        else None}
    elif plan["shape"] == "speed":
        out["slowdown"] = {"replica": plan["replica"], "factor": plan["factor"],
                           "at": round(third, 3), "for": round(third, 3)}
    elif plan["shape"] == "fleet-slow":
        length = min(FLEET_SLOW_S, 0.6 * duration)
        start = (duration - length) / 2.0
        out["faults"] = [(i, "slow@0:%g:%g" % (plan["factor"], round(length, 3)), round(start, 3))
                         for i in range(len(scen["speeds"]))]
        out["window"] = (round(start, 3), round(start + length, 3))
    return out


def ramp_trace(path, ramp, duration, seed):
    """Thins a trace drawn at ramp[1] x capacity into one whose rate rises
    linearly from ramp[0] to ramp[1] over `duration` (an arrival at t is kept
    with probability rate(t) / rate(peak), seeded: the result is again a
    Poisson process, now inhomogeneous, and the sizes keep their mix).
    Rewrites the file; returns the number of requests kept."""
    lo, hi = ramp
    rng = random.Random("moving ramp %d" % seed)
    kept = []
    with open(path) as f:
        for line in f:
            t = json.loads(line)["t_us"] / 1e6
            frac = lo + (hi - lo) * min(1.0, t / duration)
            if rng.random() < frac / hi:
                kept.append(line)
    with open(path, "w") as f:
        f.writelines(kept)
    return len(kept)


# ---- what is judged -------------------------------------------------------------

def tail_count(n):
    """Requests at or above the nearest-rank p99 of n values."""
    return n - max(1, int(math.ceil(0.99 * n))) + 1 if n else 0


def analyze(scen, pools, ctx):
    """One draw under one shape: ttft against the better of nginx and HAProxy
    (by p99 TTFT), with the noise interval of that ratio; its p50 against that
    peer's; its e2e p99 against nginx's; the oracle's ratio beside it; how
    many requests each contender's p99 rests on."""
    ok = {n: p for n, p in pools.items() if p.ok}
    b = {n: p.basic() for n, p in ok.items()}
    peers = [n for n in PEERS if n in b and b[n]["ttft_p99"]]
    cols = ["p99 on", "vs nginx", "vs haproxy", "vs least_req", "vs oracle", "e2e vs nginx"]

    def r(name, ref, key="ttft_p99"):
        if name not in b or ref not in b or not b[ref][key] or b[name][key] is None:
            return None
        return b[name][key] / b[ref][key]
    vals, verdicts, tails = {}, {}, {}
    for name, p in ok.items():
        tails[name] = tail_count(len(p.ttfts()))
        vals[name] = [str(tails[name])] + [M_fmt(r(name, ref)) for ref in
                                           ("nginx", "haproxy", "least_request", "oracle")] + \
            [M_fmt(r(name, "nginx", "e2e_p99"))]
        verdicts[name] = (None, "")
    fam = {"draw": scen["fleet"]["k"], "shape": scen["shape"], "load": scen["load"],
           "plan": describe_plan(scen["plan"]), "fleet": M.describe(scen["fleet"]),
           "tails": tails, "contenders": {}}
    for name in ok:
        fam["contenders"][name] = {k: b[name][k] for k in (
            "ttft_p50", "ttft_p90", "ttft_p99", "e2e_p99", "errors", "requests",
            "ttft_p99_by_round", "shares")}
    subj = S.SUBJECT
    if subj in b and peers:
        best = min(peers, key=lambda n: b[n]["ttft_p99"])
        strata = [{n: M.cells(ok[n].records) for n in [subj, "oracle"] + peers if n in ok}]
        iv = M.noise_interval(strata, M.p99_ratio(subj, peers))
        oiv = (M.noise_interval(strata, M.p99_ratio(subj, ["oracle"])) if "oracle" in ok
               else None)
        p50 = r(subj, best, "ttft_p50")
        e2e = r(subj, "nginx", "e2e_p99")
        fam.update(best_peer=best, vs_best=r(subj, best), vs_best_interval=iv,
                   p50_vs_best=p50, e2e_vs_nginx=e2e, vs_oracle=r(subj, "oracle"),
                   vs_oracle_interval=oiv, oracle_vs_best=r("oracle", best),
                   oracle_e2e_vs_nginx=r("oracle", "nginx", "e2e_p99"),
                   least_request_vs_best=r("least_request", best))
        checks = []
        if iv is not None:
            checks.append(iv[0] <= 1.0)
        if p50 is not None:
            checks.append(p50 <= 1.1)
        if e2e is not None:
            checks.append(e2e <= 1.05)
        fam["floor"] = None if iv is None else iv[0] <= 1.0
        fam["pass"] = None if iv is None or p50 is None or e2e is None else all(checks)
        detail = ("p99 TTFT / the better of nginx and HAProxy (%s): %s, 90%% interval %s: %s; "
                  "p50 / its p50: %s (<= 1.1 %s); e2e p99 / nginx's: %s (<= 1.05 %s); "
                  "p99 rests on %d requests" % (
                      best, M_fmt(fam["vs_best"]), _iv(iv),
                      "no interval" if iv is None else
                      "not worse beyond noise" if iv[0] <= 1.0 else "WORSE beyond noise",
                      M_fmt(p50), "ok" if p50 is not None and p50 <= 1.1 else "MISSED",
                      M_fmt(e2e), "ok" if e2e is not None and e2e <= 1.05 else "MISSED",
                      tails.get(subj, 0)))
        verdicts[subj] = (fam["pass"], detail)
    ctx["moving"] = fam
    ctx["notes"].append(
        "Moving load, engines hidden from the gateway: %s; %s. Judged: ttft's p99 TTFT over the "
        "better of nginx least_conn and HAProxy leastconn (90%% interval of a paired block "
        "bootstrap, blocks of %g s of scheduled arrivals per round, %d resamples: worse beyond "
        "noise when it lies wholly above 1), its p50 over that peer's (<= 1.1), its e2e p99 over "
        "nginx's (<= 1.05). \"p99 on\": requests at or above each contender's p99."
        % (fam["fleet"], fam["plan"], M.BLOCK_S, M.RESAMPLES))
    return cols, vals, verdicts


def M_fmt(v):
    return "-" if v is None else "%.2f" % v


def _iv(iv):
    return "-" if not iv else "%.2f-%.2f" % (iv[0], iv[1])


def _pct(values, p):
    return M._pct(values, p)


def summary(results, pools_by_id):
    """Per draw and shape, and pooled per shape and over every shape:

    - per draw: ttft's p99 TTFT not worse than the better of nginx and HAProxy
      beyond its interval, its p50 at most 1.1x that peer's, its e2e p99 at
      most 1.05x nginx's;
    - pooled (every draw's requests of a contender together; the better peer
      the one with the lower pooled p99): ttft's p99 TTFT at most 0.5x the
      better peer's where the oracle's is 0.4x or less, otherwise at most 1.2x
      the oracle's; its e2e p99 over nginx's within 0.05 of the oracle's ratio
      (at most the oracle's + 0.05).

    Returns (text, markdown, data)."""
    data = {"draws": [], "pooled": {}, "block_s": M.BLOCK_S, "resamples": M.RESAMPLES,
            "tail_min": TAIL_MIN}
    for sid, res in results.items():
        fam = res.get("moving")
        if not fam:
            continue
        c = fam["contenders"]
        row = dict(fam, id=sid, contenders=None,
                   ttft_p99={n: (c.get(n) or {}).get("ttft_p99") for n in CONTENDERS},
                   ttft_p50={n: (c.get(n) or {}).get("ttft_p50") for n in CONTENDERS},
                   e2e_p99={n: (c.get(n) or {}).get("e2e_p99") for n in CONTENDERS},
                   requests={n: (c.get(n) or {}).get("requests") for n in CONTENDERS},
                   errors={n: sum(((c.get(n) or {}).get("errors") or {}).values())
                           for n in CONTENDERS if n in c})
        del row["contenders"]
        data["draws"].append(row)
    shapes = [s for s in SHAPES if any(r["shape"] == s for r in data["draws"])]
    for shape in shapes + ["all"]:
        ids = [r["id"] for r in data["draws"] if shape == "all" or r["shape"] == shape]
        pools = [pools_by_id[i] for i in ids if i in pools_by_id]
        if not pools:
            continue
        out = {"draws": len(ids), "contenders": {}}
        for n in CONTENDERS:
            recs = [rec for ps in pools if n in ps and ps[n].ok for rec in ps[n].records]
            if not recs:
                continue
            t = [x["ttft_ms"] for x in recs if x.get("ttft_ms") is not None]
            out["contenders"][n] = {
                "requests": len(recs), "tail": tail_count(len(t)),
                "ttft_p50": _pct(t, 50), "ttft_p90": _pct(t, 90), "ttft_p99": _pct(t, 99),
                "e2e_p99": _pct([x["e2e_ms"] for x in recs if x.get("e2e_ms") is not None
                                 and x.get("error") is None], 99)}
        c = out["contenders"]

        def ratio(a, b, key="ttft_p99"):
            va, vb = (c.get(a) or {}).get(key), (c.get(b) or {}).get(key)
            return va / vb if va is not None and vb else None
        peers = [n for n in PEERS if (c.get(n) or {}).get("ttft_p99")]
        if S.SUBJECT in c and peers:
            best = min(peers, key=lambda n: c[n]["ttft_p99"])
            strata = [{n: M.cells(ps[n].records) for n in [S.SUBJECT, "oracle", "nginx"] + peers
                       if n in ps and ps[n].ok} for ps in pools]
            e2e_strata = [{n: M.cells(ps[n].records, "e2e_ms") for n in (S.SUBJECT, "nginx")
                           if n in ps and ps[n].ok} for ps in pools]
            vs_best = ratio(S.SUBJECT, best)
            orc = ratio("oracle", best)
            e2e, oe2e = ratio(S.SUBJECT, "nginx", "e2e_p99"), ratio("oracle", "nginx", "e2e_p99")
            if orc is not None and orc <= 0.4:
                bar, bar_text = 0.5, "0.5x the better peer (the oracle reaches %.2f)" % orc
                meets_ttft = vs_best is not None and vs_best <= 0.5
            elif orc is not None:
                vs_o = ratio(S.SUBJECT, "oracle")
                bar, bar_text = 1.2 * orc, "1.2x the oracle's p99 (the oracle: %.2f)" % orc
                meets_ttft = vs_o is not None and vs_o <= 1.2
            else:
                bar, bar_text, meets_ttft = None, "no oracle", None
            meets_e2e = None if e2e is None or oe2e is None else e2e <= oe2e + 0.05
            per = [r for r in data["draws"] if r["id"] in ids]
            judged = [r["pass"] for r in per if r.get("pass") is not None]
            floors = [r["floor"] for r in per if r.get("floor") is not None]
            gm = [r["vs_best"] for r in per if r.get("vs_best")]
            out.update(
                best_peer=best, vs_best=vs_best,
                vs_best_interval=M.noise_interval(strata, M.p99_ratio(S.SUBJECT, peers)),
                oracle_vs_best=orc, bar=bar, bar_text=bar_text,
                vs_oracle=ratio(S.SUBJECT, "oracle"),
                least_request_vs_best=ratio("least_request", best),
                e2e_vs_nginx=e2e, oracle_e2e_vs_nginx=oe2e,
                e2e_vs_nginx_interval=M.noise_interval(e2e_strata,
                                                       M.p99_ratio(S.SUBJECT, ["nginx"])),
                geomean_vs_best=(math.exp(sum(math.log(v) for v in gm) / len(gm))
                                 if gm else None),
                draws_passed=sum(1 for v in judged if v), draws_judged=len(judged),
                floor_held=sum(1 for v in floors if v), floor_judged=len(floors),
                meets_ttft=meets_ttft, meets_e2e=meets_e2e,
                p50_vs_best=ratio(S.SUBJECT, best, "ttft_p50"))
            out["pass"] = (None if meets_ttft is None or meets_e2e is None or not judged else
                           meets_ttft and meets_e2e and all(judged))
        data["pooled"][shape] = out
    return _tables(data, False), _tables(data, True), data


def _ms(v):
    if v is None:
        return "-"
    return "%.1fs" % (v / 1000.0) if v >= 10000 else ("%.0f" % v if v >= 100 else "%.1f" % v)


def _tables(data, markdown):
    import report as R  # tables as the rest of the benchmark draws them
    head = ["draw", "shape", "load", "n", "p99 on"] + ["p99 %s" % n for n in CONTENDERS] + \
        ["ttft / better peer", "90% interval", "p50 / peer's", "least_req / peer",
         "oracle / peer", "e2e / nginx", "oracle e2e / nginx", "errors ttft|peer", "verdict"]
    rows = []
    order = {s: i for i, s in enumerate(SHAPES)}
    for r in sorted(data["draws"], key=lambda r: (r["draw"], order.get(r["shape"], 99))):
        tail = min(r["tails"].values()) if r["tails"] else 0
        peer = r.get("best_peer")
        rows.append(["m%d" % r["draw"], r["shape"], "%d%%" % round(100 * r["load"]),
                     str(r["requests"].get(S.SUBJECT) or "-"),
                     ("%d" % tail) + ("" if tail >= data["tail_min"] else " (<%d)"
                                      % data["tail_min"])] +
                    [_ms(r["ttft_p99"].get(n)) for n in CONTENDERS] +
                    ["%s (%s)" % (M_fmt(r.get("vs_best")), peer or "-"),
                     _iv(r.get("vs_best_interval")), M_fmt(r.get("p50_vs_best")),
                     M_fmt(r.get("least_request_vs_best")), M_fmt(r.get("oracle_vs_best")),
                     M_fmt(r.get("e2e_vs_nginx")), M_fmt(r.get("oracle_e2e_vs_nginx")),
                     "%s|%s" % (r["errors"].get(S.SUBJECT, "-"),
                                r["errors"].get(peer, "-") if peer else "-"),
                     "-" if r.get("pass") is None else ("pass" if r["pass"] else "FAIL")])
    phead = ["pooled", "draws", "n ttft", "p99 on", "p99 ttft", "better peer", "ttft / peer",
             "90% interval", "oracle / peer", "least_req / peer", "bar", "p50 / peer's",
             "e2e / nginx (interval)", "oracle e2e", "draws passed", "verdict"]
    prows, verdicts = [], []
    for shape, p in data["pooled"].items():
        c = p["contenders"]
        t = c.get(S.SUBJECT) or {}
        tail = min((x["tail"] for x in c.values()), default=0)
        prows.append([shape, str(p["draws"]), str(t.get("requests", "-")), str(tail),
                      _ms(t.get("ttft_p99")), p.get("best_peer", "-"),
                      M_fmt(p.get("vs_best")), _iv(p.get("vs_best_interval")),
                      M_fmt(p.get("oracle_vs_best")), M_fmt(p.get("least_request_vs_best")),
                      M_fmt(p.get("bar")), M_fmt(p.get("p50_vs_best")),
                      "%s (%s)" % (M_fmt(p.get("e2e_vs_nginx")),
                                   _iv(p.get("e2e_vs_nginx_interval"))),
                      M_fmt(p.get("oracle_e2e_vs_nginx")),
                      "%s of %s" % (p.get("draws_passed", "-"), p.get("draws_judged", "-")),
                      "-" if p.get("pass") is None else ("PASS" if p["pass"] else "FAIL")])
        if "vs_best" in p:
            mark = "n/a " if p["pass"] is None else ("PASS" if p["pass"] else "FAIL")
            def met(v):
                return "n/a" if v is None else "met" if v else "MISSED"
            verdicts.append(
                "%s %s, %d draws: ttft p99 TTFT %s x the better peer's (%s; 90%% interval %s; "
                "bar: %s: %s), e2e p99 %s x nginx's against the oracle's %s (%s); draws passed "
                "%s of %s (p99 floor held on %s of %s)"
                % (mark, "every shape" if shape == "all" else shape, p["draws"],
                   M_fmt(p["vs_best"]), p["best_peer"], _iv(p["vs_best_interval"]),
                   p["bar_text"], met(p["meets_ttft"]), M_fmt(p["e2e_vs_nginx"]),
                   M_fmt(p["oracle_e2e_vs_nginx"]), met(p["meets_e2e"]),
                   p["draws_passed"], p["draws_judged"], p["floor_held"], p["floor_judged"]))
    note = ("Per draw: ttft's p99 TTFT over the better of nginx least_conn and HAProxy leastconn "
            "(by p99) with the 90%% interval of a paired block bootstrap (blocks of %g s of "
            "scheduled arrivals, %d resamples; stratified by draw when pooled), not worse beyond "
            "noise; its p50 <= 1.1x that peer's; its e2e p99 <= 1.05x nginx's. Pooled: p99 TTFT "
            "<= 0.5x the better peer's where the oracle reaches 0.4x or less, else <= 1.2x the "
            "oracle's; e2e p99 over nginx's within 0.05 of the oracle's. \"p99 on\": requests at "
            "or above a contender's p99 (the least over the contenders; wanted: %d or more)."
            % (data["block_s"], data["resamples"], data["tail_min"]))
    plans = sorted({(r["draw"], r["shape"], r["plan"]) for r in data["draws"]},
                   key=lambda x: (x[0], order.get(x[1], 99)))
    fleets = sorted({(r["draw"], r["fleet"]) for r in data["draws"]})
    if markdown:
        parts = ["### Moving load: per draw and shape", "", R.md_table(head, rows), "",
                 "### Moving load: pooled", "", R.md_table(phead, prows), ""]
        parts += ["- " + v for v in verdicts] + ["", "Fleets (hidden from the gateway):", ""]
        parts += ["- m%d: %s" % f for f in fleets]
        parts += ["", "Shapes as run:", ""] + ["- m%d %s: %s" % p for p in plans]
        parts += ["", "_%s_" % note, ""]
        return "\n".join(parts)
    parts = ["", "== Moving load: per draw and shape", "", R.text_table(head, rows), "",
             "== Moving load: pooled", "", R.text_table(phead, prows), ""]
    return "\n".join(parts + verdicts + ["", "Fleets:"] + ["m%d: %s" % f for f in fleets]
                     + ["", note])


# ---- the tables again, from a run's folder -------------------------------------------

def reanalyze(outdirs):
    """(text, markdown, data) of summary() over the runs in outdirs (one
    folder, or a list: a family run in parts, each scenario in one of them),
    from their per-request logs."""
    import report as R

    results, pools_by_id = {}, {}
    for outdir in [outdirs] if isinstance(outdirs, str) else outdirs:
        with open(os.path.join(outdir, "results.json")) as f:
            res = json.load(f)
        _reanalyze_run(R, outdir, res, results, pools_by_id)
    return summary(results, pools_by_id)


def _reanalyze_run(R, outdir, res, results, pools_by_id):
    for sid, sc in res["scenarios"].items():
        d = sc.get("definition") or {}
        if d.get("criteria") != "moving":
            continue
        if sid in results:
            raise SystemExit("%s: scenario %s is in two of the folders" % (outdir, sid))
        replicas = ["r%d" % (i + 1) for i in range(len(d["speeds"]))]
        pools = {}
        for name in d["contenders"]:
            runs = []
            for rnd in range(1, res["rounds"] + 1):
                path = os.path.join(outdir, sid, name, "round%d" % rnd, "requests.jsonl")
                if os.path.exists(path):
                    runs.append({"status": "ok", "round": rnd, "records": R.load_jsonl(path)})
            pools[name] = R.Pooled(name, runs, replicas)
        ctx = {"notes": []}
        analyze(d, pools, ctx)
        results[sid] = {"moving": ctx["moving"]}
        pools_by_id[sid] = pools


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="+",
                    help="a run's folder (bench/routing/run.py --out), or several: a family "
                         "run in parts (each scenario in one)")
    ap.add_argument("--markdown", action="store_true", help="print the Markdown tables")
    ap.add_argument("--json", action="store_true", help="print the data as JSON")
    ap.add_argument("--block-s", type=float, default=M.BLOCK_S,
                    help="seconds of arrivals per bootstrap block (default %g)" % M.BLOCK_S)
    args = ap.parse_args(argv)
    M.BLOCK_S = args.block_s
    text, md, data = reanalyze(args.out)
    print(json.dumps(data, indent=1, default=str) if args.json else md if args.markdown else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
