"""The mismatch family: fleets whose engines the gateway was not tuned on.

Each draw is a fleet of four llmsim replicas whose engine parameters are
drawn from wide ranges (RANGES below) and hidden from the gateway (its
config names the replicas' URLs only; the /metrics vocabulary is detected).
Every draw runs at two loads (70% and 90% of the drawn fleet's capacity,
capacity() below) against the same contenders, rounds interleaved; each
round replays its own seeded trace, the same for every contender.

What is judged (issue: "Routing that holds on engines it was not tuned on"):
on every draw and load, ttft's p99 TTFT is not worse than the better of
nginx least_conn and llmgate least_request by more than noise; pooled over
the draws, ttft's p99 TTFT is at most 0.5x nginx's and its end-to-end p99
at most 0.7x nginx's. Noise: noise_interval() below.

The family's tables again, from a finished run's folder (its results.json
and per-request logs), with this code's statistics:

    bench/routing/mismatch.py OUT [--markdown] [--block-s S]

Python 3 standard library only. See bench/routing/README.md, "Mismatch".
"""

import argparse
import json
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleetmodel  # noqa: E402
import scenarios as S  # noqa: E402

SCHEDULES = ("fcfs", "prefill-first", "chunked")
FLAVORS = ("vllm", "sglang", "tgi", "llamacpp")
CONTENDERS = ["ttft", "nginx", "haproxy", "least_request", "oracle"]
LOADS = (0.7, 0.9)

# Ranges of a draw. "log" draws uniformly on a log scale. Engine software and
# model are the fleet's (one draw per fleet); slots and speed are each
# replica's (GPUs and their memory differ).
RANGES = {
    "slots": ("log", 4, 32),                    # per replica, rounded
    "prefill_us_per_token": ("log", 20.0, 200.0),
    "prefill_fixed_ms": ("uniform", 0.0, 25.0),  # per step that prefills anything
    "decode_ms": ("log", 4.0, 15.0),            # a step of one sequence
    # the batch's cost at 16 sequences, as a fraction of decode_ms:
    # decode_ms_per_seq = growth x decode_ms / 16^decode_batch_exp
    "growth_at_16": ("log", 0.1, 1.0),
    "decode_batch_exp": ("uniform", 1.0, 1.5),
    "jitter": ("uniform", 0.0, 0.3),             # sigma of each step's lognormal factor
    "step_tokens": ("choice", 256, 512, 1024, 2048),  # chunked prefill's budget
}
# Speeds: the issue's fleet, equal replicas, or drawn (one at 1, three
# log-uniform in 0.25..1), a third of draws each.
SPEED_SETS = ("hetero", "equal", "drawn")
# A draw is redrawn when its slowest replica would take longer than this per
# step with every slot busy (a 256-token answer there: 15 s; rounds must stay
# short enough to run 160 of them in an hour and a half) or when its
# capacity is under MIN_CAPACITY (a round would hold too few requests for a
# p99).
MAX_FULL_STEP_MS = 60.0
MIN_CAPACITY = 15.0
TIMEOUT_S = 60


def _pick(rng, spec):
    kind = spec[0]
    if kind == "log":
        return math.exp(rng.uniform(math.log(spec[1]), math.log(spec[2])))
    if kind == "uniform":
        return rng.uniform(spec[1], spec[2])
    return rng.choice(spec[1:])


def full_step_ms(sim, speed):
    """A replica's decode step with every slot busy, in ms (no prefill)."""
    return (sim["decode_ms"] + sim["decode_ms_per_seq"] * sim["slots"] ** sim["decode_batch_exp"]) \
        / speed


# Draw 0, the same whatever the seed: the fleet of the issue that started the
# family ("Routing that holds on engines it was not tuned on"), where ttft
# lost to nginx's least_conn: 4 replicas at speeds 1, 1, 0.5, 0.25, 8 slots
# each, a decode step that grows with the batch, a fixed prefill cost plus a
# cost per prompt token, vLLM's /metrics names. What the issue did not give
# is set here: first come first served, 15 ms per prefilling step, 50 us a
# prompt token (llmsim's default), a 10 ms step growing as B^1.2 (+50% at
# 16 sequences), jitter 0.1.
ISSUE_FLEET = {"schedule": "fcfs", "flavor": "vllm", "slots": 8, "prefill_us_per_token": 50.0,
               "prefill_fixed_ms": 15.0, "decode_ms": 10.0, "growth_at_16": 0.5,
               "decode_batch_exp": 1.2, "jitter": 0.1}


def issue_fleet():
    """Draw 0: ISSUE_FLEET on the issue's speeds."""
    f = ISSUE_FLEET
    base = {
        "prefix_block_tokens": S.SIM["prefix_block_tokens"],
        "prefix_cache_blocks": S.SIM["prefix_cache_blocks"],
        "flavor": f["flavor"], "schedule": f["schedule"],
        "prefill_us_per_token": f["prefill_us_per_token"],
        "prefill_fixed_ms": f["prefill_fixed_ms"], "decode_ms": f["decode_ms"],
        "decode_batch_exp": f["decode_batch_exp"], "jitter": f["jitter"], "step_tokens": 0,
        "decode_ms_per_seq": round(f["growth_at_16"] * f["decode_ms"]
                                   / 16 ** f["decode_batch_exp"], 4),
    }
    speeds = list(S.HETERO)
    sims = [dict(base, slots=f["slots"]) for _ in speeds]
    return {"k": 0, "sims": sims, "speeds": speeds, "speed_set": "issue", "flavor": f["flavor"],
            "schedule": f["schedule"], "growth_at_16": f["growth_at_16"],
            "full_step_ms": [round(full_step_ms(sim, sp), 1) for sim, sp in zip(sims, speeds)],
            "redrawn": 0}


def draw_fleet(draw_seed, k):
    """Draw k (1-based) of the family seeded draw_seed: {"sims", "speeds", ...}.
    The schedule and the /metrics vocabulary cycle over the draws (every one
    is met within three and four draws); everything else is drawn. Draw 0 is
    the issue's fleet (issue_fleet()), not drawn."""
    if k == 0:
        return issue_fleet()
    rng = random.Random("mismatch %d %d" % (draw_seed, k))
    schedule = SCHEDULES[(k - 1 + draw_seed) % len(SCHEDULES)]
    flavor = FLAVORS[(k - 1 + draw_seed) % len(FLAVORS)]
    for attempt in range(1000):
        kind = SPEED_SETS[rng.randrange(len(SPEED_SETS))]
        if kind == "hetero":
            speeds = list(S.HETERO)
        elif kind == "equal":
            speeds = list(S.HOMOG)
        else:
            speeds = [1.0] + [round(_pick(rng, ("log", 0.25, 1.0)), 2) for _ in range(3)]
            rng.shuffle(speeds)
        base = {
            "prefix_block_tokens": S.SIM["prefix_block_tokens"],
            "prefix_cache_blocks": S.SIM["prefix_cache_blocks"],
            "flavor": flavor,
            "schedule": schedule,
            "prefill_us_per_token": round(_pick(rng, RANGES["prefill_us_per_token"]), 1),
            "prefill_fixed_ms": round(_pick(rng, RANGES["prefill_fixed_ms"]), 2),
            "decode_ms": round(_pick(rng, RANGES["decode_ms"]), 2),
            "decode_batch_exp": round(_pick(rng, RANGES["decode_batch_exp"]), 2),
            "jitter": round(_pick(rng, RANGES["jitter"]), 3),
        }
        growth = _pick(rng, RANGES["growth_at_16"])
        base["decode_ms_per_seq"] = round(growth * base["decode_ms"]
                                          / 16 ** base["decode_batch_exp"], 4)
        base["step_tokens"] = _pick(rng, RANGES["step_tokens"]) if schedule == "chunked" else 0
        sims = [dict(base, slots=int(round(_pick(rng, RANGES["slots"])))) for _ in speeds]
        worst = max(full_step_ms(sim, sp) for sim, sp in zip(sims, speeds))
        fleet = {"k": k, "sims": sims, "speeds": speeds, "speed_set": kind, "flavor": flavor,
                 "schedule": schedule, "growth_at_16": round(growth, 3),
                 "full_step_ms": [round(full_step_ms(sim, sp), 1)
                                  for sim, sp in zip(sims, speeds)],
                 "redrawn": attempt}
        if worst <= MAX_FULL_STEP_MS and capacity(fleet, S.PROMPT, S.MAX_TOKENS) >= MIN_CAPACITY:
            return fleet
    raise RuntimeError("no admissible draw")


def capacity(fleet, prompt_bytes, max_tokens):
    """Requests per second the drawn fleet completes when saturated: the sum
    over its replicas of fleetmodel.saturated_rps() (llmsim's schedule run
    offline with every replica's queue never empty, over 2,000 requests of
    the mix; jitter, of mean 1, left out). No closed form: prefill-first's
    prefill steps hold decode, chunked prefill splits prompts, the fixed
    prefill cost depends on how many admissions share a step."""
    return sum(fleetmodel.saturated_rps(sim, sp, prompt_bytes, max_tokens)
               for sim, sp in zip(fleet["sims"], fleet["speeds"]))


def describe(fleet):
    """One line: what the gateway is not told."""
    sims = fleet["sims"]
    b = sims[0]
    sched = b["schedule"] + (" %d" % b["step_tokens"] if b["schedule"] == "chunked" else "")
    return ("%s, %s; slots %s; speeds %s; prefill %.0f us/token + %.1f ms/step; "
            "decode %.1f ms + %.3f x B^%.2f; jitter %.2f"
            % (sched, b["flavor"], "/".join(str(s["slots"]) for s in sims),
               "/".join("%g" % sp for sp in fleet["speeds"]), b["prefill_us_per_token"],
               b["prefill_fixed_ms"], b["decode_ms"], b["decode_ms_per_seq"],
               b["decode_batch_exp"], b["jitter"])
            + ("; gauge lag %s ms" % "/".join("%g" % s["gauge_lag_ms"] for s in sims)
               if "gauge_lag_ms" in b else ""))


def scenario_id(k, load):
    return "m%d-%d" % (k, round(load * 100))


# run.py --gauge-lags: how long, in one-sequence steps of its replica, each
# engine software keeps a finished request in its running gauge. vLLM sets its
# gauges once a step; SGLang at a prefill or once every 40 decode steps
# (decode_log_interval; 20: a prefill comes about halfway at these loads);
# TGI's batch gauge and llama.cpp's, read when scraped, do not lag. Off by
# default (make_scenarios): the family's results before it had none.
GAUGE_LAG_STEPS = {"vllm": 1, "sglang": 20, "tgi": 0, "llamacpp": 0}


def with_gauge_lags(fleet):
    """The fleet with each replica's gauge lag (GAUGE_LAG_STEPS) in its sims."""
    steps = GAUGE_LAG_STEPS[fleet["flavor"]]
    sims = [dict(sim, gauge_lag_ms=round(steps * sim["decode_ms"] / sp, 1))
            for sim, sp in zip(fleet["sims"], fleet["speeds"])]
    return dict(fleet, sims=sims)


def make_scenarios(draws, draw_seed=1, loads=LOADS, only=None, gauge_lags=False):
    """The family's scenarios: the issue's fleet (m0) and draws 1..draws,
    each at every load; `only` ("m3" or "m3-90") keeps one draw or one
    scenario; `gauge_lags`: with each engine's gauge lag (with_gauge_lags)."""
    out = []
    for k in range(0, draws + 1):
        fleet = draw_fleet(draw_seed, k)
        if gauge_lags:
            fleet = with_gauge_lags(fleet)
        for load in loads:
            sid = scenario_id(k, load)
            if only and only not in (sid, "m%d" % k):
                continue
            out.append(dict(
                S.scenario(id=sid, scenario="mismatch", title="Mismatch %s at %d%% of capacity"
                           % ("m0, the issue's fleet," if k == 0 else "draw %d" % k,
                              round(load * 100)),
                           speeds=fleet["speeds"], load=load, duration=20, quick=4,
                           contenders=list(CONTENDERS), criteria="mismatch",
                           what="%s: %s" % ("the issue's fleet" if k == 0 else "draw %d" % k,
                                            describe(fleet)),
                           sim=fleet["sims"][0], sims=fleet["sims"], gateway_flavor="auto",
                           timeout_s=TIMEOUT_S, seed=1000 * draw_seed + 10 * k),
                fleet=fleet))
    return out


# ---- statistics ----------------------------------------------------------------

BLOCK_S = 3.0      # run.py --block-s
RESAMPLES = 1000
MIN_BLOCKS = 4     # fewer in a stratum: no interval (one block resampled is no spread)


def cells(records, field="ttft_ms", block_s=None):
    """{(round, block): [values of field]}: a contender's requests by round
    and by the block of block_s seconds their scheduled arrival falls in
    (TTFT: those with a first token; e2e: those that succeeded)."""
    out = {}
    block_s = block_s or BLOCK_S
    for r in records:
        v = r.get(field)
        if v is None or (field == "e2e_ms" and r.get("error") is not None):
            continue
        out.setdefault((r["_round"], int(r["t_sched_ms"] / 1000.0 / block_s)), []).append(v)
    return out


def _pct(values, p):
    """Nearest-rank percentile, as report.pct."""
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v), max(1, int(math.ceil(p / 100.0 * len(v))))) - 1]


def p99_ratio(a, b):
    """stat for noise_interval(): p99 of contender a over p99 of the better of b (a list)."""
    def stat(values):
        best = [v for v in (_pct(values.get(n, []), 99) for n in b) if v]
        mine = _pct(values.get(a, []), 99)
        return mine / min(best) if best and mine else None
    return stat


def noise_interval(strata, stat, resamples=RESAMPLES, seed=1, level=0.90):
    """A paired, stratified block bootstrap of stat.

    strata: a list (one per draw) of {contender: {(round, block): values}}
    (cells()); every contender replayed the same traces, so a block holds the
    same arrivals for all of them. Each resample draws, within every stratum,
    as many blocks as it has, with replacement, the same blocks for every
    contender, and computes stat({contender: values}). Returns the (lo, hi)
    interval holding `level` of the resampled values; None where stat is,
    or where a stratum has fewer than MIN_BLOCKS blocks.
    Blocks rather than requests: a clump of arrivals delays the requests
    after it for seconds, so neighbouring requests are not independent.
    """
    rng = random.Random(seed)
    names = sorted({n for st in strata for n in st})
    keys = [sorted({k for n in names for k in st.get(n, {})}) for st in strata]
    if not keys or min(len(ks) for ks in keys) < MIN_BLOCKS:
        return None
    values = []
    for _ in range(resamples):
        pooled = {n: [] for n in names}
        for st, ks in zip(strata, keys):
            for _ in range(len(ks)):
                key = ks[rng.randrange(len(ks))]
                for n in names:
                    pooled[n].extend(st.get(n, {}).get(key, ()))
        v = stat(pooled)
        if v is not None:
            values.append(v)
    if len(values) < resamples // 2:
        return None
    values.sort()
    a = (1.0 - level) / 2.0
    return values[int(a * len(values))], values[min(len(values) - 1, int((1 - a) * len(values)))]


# ---- the tables again, from a run's folder -------------------------------------------

def reanalyze(outdir):
    """(text, markdown, data) of report.mismatch_summary() over the mismatch
    scenarios of the run in outdir, from their per-request logs."""
    import report as R  # imports this module

    with open(os.path.join(outdir, "results.json")) as f:
        res = json.load(f)
    results, pools_by_id = {}, {}
    for sid, sc in res["scenarios"].items():
        d = sc.get("definition") or {}
        if d.get("criteria") != "mismatch":
            continue
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
        R.analyze_mismatch(d, pools, ctx)
        results[sid] = {"mismatch": ctx["mismatch"]}
        pools_by_id[sid] = pools
    return R.mismatch_summary(results, pools_by_id)


def main(argv=None):
    global BLOCK_S
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="a run's folder (bench/routing/run.py --out)")
    ap.add_argument("--markdown", action="store_true", help="print the Markdown tables")
    ap.add_argument("--json", action="store_true", help="print the data as JSON")
    ap.add_argument("--block-s", type=float, default=BLOCK_S,
                    help="seconds of arrivals per bootstrap block (default %g)" % BLOCK_S)
    args = ap.parse_args(argv)
    BLOCK_S = args.block_s
    text, md, data = reanalyze(args.out)
    print(json.dumps(data, indent=1) if args.json else md if args.markdown else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
