"""Routing benchmark scenarios: fleets, workloads, faults and what must hold.

Every number a scenario uses is here, so a reader can check what was run.
Rates are fractions of the fleet's capacity, computed from llmsim's timing
model (capacity_rps below; bench/routing/README.md explains it).
"""

# llmsim timing model shared by every replica (see tools/llmsim/README.md):
# a step lasts (prefill_us_per_token x admitted prompt tokens + decode_ms +
# decode_ms_per_seq x running) / speed and yields one token per running
# sequence. These values look like a small model on a fast GPU: 10 ms per
# decode step plus 0.25 ms per sequence in the batch, 20k prompt tokens/s.
SIM = {
    "slots": 16,
    "decode_ms": 10.0,
    "decode_ms_per_seq": 0.25,
    "prefill_us_per_token": 50.0,
    "prefix_block_tokens": 16,
    "prefix_cache_blocks": 8192,
    "flavor": "vllm",
}

# The default request mix: prompts of 256..2048 bytes (64..512 tokens); most
# answers short, a fifth long (the long ones are what a slow replica makes
# slow end to end).
PROMPT = "256-2048"
MAX_TOKENS = "mix:80%16-64,20%128-256"
# --quick (a smoke run) also shortens answers, so that draining the slowest
# replica does not dominate a few seconds of arrivals.
QUICK_MAX_TOKENS = "mix:80%8-32,20%32-64"

HETERO = [1.0, 1.0, 0.5, 0.25]
HOMOG = [1.0, 1.0, 1.0, 1.0]

# llmgate contenders: name -> routing section (the gateway's defaults for
# everything else). "prefix_affinity" is the affinity stage combined with the
# load stage, as the policy is meant to be deployed.
LLMGATE_ROUTING = {
    "round_robin": {"policy": "round_robin"},
    "least_request": {"policy": "least_request"},
    "p2c": {"policy": "p2c"},
    "least_load": {"policy": "least_load"},
    "ttft": {"policy": "ttft"},
    "prefix_affinity": {"pipeline": ["prefix_affinity", "ttft"]},
    "oracle": {"pipeline": [{"policy": "oracle", "options": {}}]},  # options filled per run
    # ttft with mid-stream failover (routing.resume): a stream whose replica
    # dies goes on on another one (scenario 3f); the requests are greedy
    "ttft_resume": {"policy": "ttft", "resume": {"models": {"m": "greedy"}}},
    # diagnosis, not a contender of the full run: ttft decides, the oracle's
    # exact TTFT for every candidate is logged before it (a shadow stage; the
    # contender's +NAME=VALUE options go to ttft, the last stage)
    "ttft_oracle_shadow": {"pipeline": [{"policy": "oracle", "weight": 0, "options": {}},
                                        "ttft"]},
}
PEERS = ("nginx", "haproxy")
# Scenario 7: the same policy in two gateway instances sharing the fleet.
DUAL_SUFFIX = "_x2"

ALL_SINGLE = ["round_robin", "least_request", "p2c", "ttft", "nginx", "haproxy", "oracle"]

# What the benchmark judges: the gateway's default policy.
SUBJECT = "ttft"


def spec_mean(spec):
    """Mean of an llmload SPEC: N, A-B or mix:P1%V1,P2%V2,..."""
    spec = str(spec)
    if spec.startswith("mix:"):
        total = 0.0
        for part in spec[4:].split(","):
            pct, val = part.split("%", 1)
            total += float(pct) / 100.0 * spec_mean(val)
        return total
    if "-" in spec:
        a, b = spec.split("-", 1)
        return (float(a) + float(b)) / 2.0
    return float(spec)


def request_cost_ms(sim, prompt_bytes, max_tokens, prefix_bytes=0):
    """Engine time one average request consumes at full batch, speed 1.

    At capacity every slot is busy, so each step lasts decode_ms +
    decode_ms_per_seq x slots (plus the prefill of what it admits) and
    serves `slots` sequences: a request of M tokens uses M/slots of the
    steps, and its own prefill on top.
    """
    slots = sim["slots"]
    step_ms = sim["decode_ms"] + sim["decode_ms_per_seq"] * slots
    prompt_tokens = (spec_mean(prompt_bytes) + prefix_bytes) / 4.0
    return spec_mean(max_tokens) * step_ms / slots + prompt_tokens * sim["prefill_us_per_token"] / 1000.0


def capacity_rps(sim, speeds, prompt_bytes, max_tokens, prefix_bytes=0):
    """Requests per second the fleet completes when saturated (no cache hits)."""
    return sum(speeds) * 1000.0 / request_cost_ms(sim, prompt_bytes, max_tokens, prefix_bytes)


def _s(**kw):
    base = {
        "sim": dict(SIM),
        "prompt_bytes": PROMPT,
        "max_tokens": MAX_TOKENS,
        "prefix_groups": 0,
        "prefix_bytes": 0,
        "burst": None,
        "faults": [],          # (replica index, llmsim fault SPEC, seconds after the load starts;
                               # run.py injects them through POST /sim/control)
        "crash": None,          # {"replica": i, "at": s, "restart_after": s}
        "gateways": 1,
        "extra_body": None,     # members added to every request body (llmload --extra-body)
        "subject": None,        # the contender the verdict is about (None: SUBJECT)
        "timeout_s": 30,
        "seed": 11,
    }
    base.update(kw)
    return base


scenario = _s  # for the families generated elsewhere (mismatch.py)


SCENARIOS = [
    # 30 s of arrivals: p99 over about 760 (1a) or 940 (1b) requests a round;
    # with 15 s it was the 4th or 5th worst, and one arrival clump decided it
    # (NOTES.md, "Method" and 12)
    _s(id="1a", scenario=1, title="Heterogeneous fleet at 70% of capacity",
       speeds=HETERO, load=0.7, duration=30, quick=6, contenders=ALL_SINGLE,
       what="speeds 1, 1, 0.5, 0.25; Poisson arrivals at 70% of the fleet's capacity",
       criteria="hetero"),
    _s(id="1b", scenario=1, title="Heterogeneous fleet at 90% of capacity",
       speeds=HETERO, load=0.9, duration=30, quick=6, contenders=ALL_SINGLE,
       what="as 1a at 90% of capacity", criteria="hetero"),
    _s(id="2", scenario=2, title="One replica slows 5x mid-run, then recovers",
       speeds=HOMOG, load=0.7, duration=50, quick=24,
       slowdown={"replica": 3, "factor": 5.0, "at": 8.0, "for": 12.0},
       quick_slowdown={"replica": 3, "factor": 5.0, "at": 6.0, "for": 8.0},
       contenders=["round_robin", "least_request", "ttft", "nginx", "oracle"],
       what="4 equal replicas at 70% load; r4 runs 5x slower from t=8 s to t=20 s",
       criteria="degrade"),
    _s(id="3", scenario=3, title="A replica crashes with streams in flight",
       speeds=HOMOG, load=0.5, duration=24, quick=14,
       crash={"replica": 3, "at": 8.0, "restart_after": 4.0},
       quick_crash={"replica": 3, "at": 4.0, "restart_after": 3.0},
       contenders=["round_robin", "least_request", "ttft", "nginx", "haproxy"],
       what="4 equal replicas at 50% load; r4 exits at t=8 s (llmsim crash@) and is "
            "restarted on the same port 4 s later",
       criteria="crash"),
    # 3 with mid-stream failover: the same crash, greedy requests (temperature
    # 0) and replicas whose text is a function of the request (llmsim --text
    # context, with vLLM's role-only first chunk), so that a stream cut on r4
    # can go on on another replica; ttft alone cuts them, as in 3
    _s(id="3f", scenario=3, title="A replica crashes with streams in flight: failover",
       speeds=HOMOG, load=0.5, duration=24, quick=14,
       sim=dict(SIM, text="context", role_chunk=True),
       extra_body={"temperature": 0},
       crash={"replica": 3, "at": 8.0, "restart_after": 4.0},
       quick_crash={"replica": 3, "at": 4.0, "restart_after": 3.0},
       contenders=["ttft", "ttft_resume"], subject="ttft_resume",
       what="scenario 3 (4 equal replicas at 50% load, r4 exits at t=8 s, restarted 4 s "
            "later) with greedy requests; ttft_resume continues a cut stream on another "
            "replica (routing.resume), ttft cuts it",
       criteria="failover"),
    _s(id="4", scenario=4, title="Bursty arrivals",
       speeds=HOMOG, load=0.5, duration=20, quick=10, burst="10:0.5:4.5",
       contenders=["round_robin", "least_request", "p2c", "ttft", "nginx", "oracle"],
       what="4 equal replicas, mean 50% load, all of it in 0.5 s bursts every 5 s "
            "(10x the mean rate)",
       criteria="burst"),
    _s(id="5", scenario=5, title="90% short, 10% very long prompts",
       speeds=HETERO, load=0.7, duration=15, quick=6,
       prompt_bytes="mix:90%256-2048,10%32000",
       contenders=["round_robin", "least_request", "ttft", "nginx", "oracle"],
       what="fleet of 1a, prompts 256..2048 bytes with 10% of 32,000 bytes (8k tokens); "
            "70% load",
       criteria="longshort", short_max_bytes=2048),
    _s(id="6", scenario=6, title="Shared system prompts (prefix cache)",
       speeds=HOMOG, load=0.6, duration=20, quick=8,
       prompt_bytes="128-512", max_tokens="16-64", prefix_groups=16, prefix_bytes=8000,
       sim=dict(SIM, prefix_cache_blocks=640),
       contenders=["round_robin", "ttft", "prefix_affinity", "oracle"],
       what="4 equal replicas, each with a 640-block (10k-token) prefix cache; 16 groups "
            "of an 8,000-byte system prompt (125 blocks each: 3x one cache); 60% of the "
            "capacity without cache hits",
       criteria="prefix"),
    # 6 with a restart: keys are assigned once, so the restarted replica must be
    # handed some of the prompts back (NOTES.md 23)
    _s(id="6r", scenario=6, title="Shared system prompts, a replica restarts",
       speeds=HOMOG, load=0.6, duration=40, quick=26,
       prompt_bytes="128-512", max_tokens="16-64", prefix_groups=16, prefix_bytes=8000,
       sim=dict(SIM, prefix_cache_blocks=640),
       crash={"replica": 3, "at": 8.0, "restart_after": 3.0},
       quick_crash={"replica": 3, "at": 4.0, "restart_after": 2.0},
       settle_s=12.0,
       contenders=["ttft", "prefix_affinity"],
       what="scenario 6's fleet and load; r4 exits at t=8 s and is restarted (cache empty) "
            "3 s later",
       criteria="rejoin"),
    _s(id="7", scenario=7, title="Two gateways in front of the same fleet",
       speeds=HETERO, load=0.9, duration=15, quick=6,
       contenders=["round_robin", "ttft", "ttft" + DUAL_SUFFIX,
                   "least_request" + DUAL_SUFFIX],
       what="fleet and load of 1b; X_x2 = two llmgate instances, each replaying half of "
            "the trace",
       criteria="dual"),
]


# Scenario 8: replicas that stall at random, with and without hedged first
# tokens (routing.hedge). "+hedge=1" / "+hedge=0" set routing.hedge.enabled
# (run.py), so both are named whatever the gateway's default is. llmsim only:
# its stalls are its faults (stall-random, stall-first; tools/llmsim).
HEDGE_ON = SUBJECT + "+hedge=1"
HEDGE_OFF = SUBJECT + "+hedge=0"
HEDGE_CONTENDERS = [HEDGE_OFF, HEDGE_ON, "nginx", "oracle"]
HEDGE_SCENARIOS = [
    _s(id="8a", scenario=8, title="Replicas pause at random (GC pauses)",
       speeds=HOMOG, load=0.6, duration=40, quick=10,
       faults=[(1, "stall-random:0.15:1.5", 0.0), (3, "stall-random:0.15:1.5", 0.0)],
       contenders=HEDGE_CONTENDERS,
       what="4 equal replicas at 60% load; r2 and r4 each stall (answer nothing, streams "
            "freeze) for 1.5 s at random, 6.7 s apart on average (llmsim "
            "stall-random:0.15:1.5)",
       criteria="hedge"),
    _s(id="8b", scenario=8, title="Requests preempted at random (first tokens held)",
       speeds=HOMOG, load=0.6, duration=40, quick=10,
       faults=[(i, "stall-first:0.02:2", 0.0) for i in range(4)],
       contenders=HEDGE_CONTENDERS,
       what="4 equal replicas at 60% load; on every replica 2% of the requests wait 2 s "
            "outside the batch before their first token (llmsim stall-first:0.02:2)",
       criteria="hedge"),
    _s(id="8n", scenario=8, title="No stalls: what hedging costs where it cannot help",
       speeds=HETERO, load=0.8, duration=40, quick=10,
       contenders=[HEDGE_OFF, HEDGE_ON],
       what="the fleet of 1a (speeds 1, 1, 0.5, 0.25) at 80% load, no faults",
       criteria="hedge", calm=True),
]
SCENARIOS += HEDGE_SCENARIOS

# ---- real engines ---------------------------------------------------------------
# Replicas of a real engine (tools/realengine: llama.cpp on the CPU, one thread
# each, each on its own CPU) instead of llmsim: real prefill and decode steps,
# real batching, llama.cpp's /metrics. Each replica is its server's arguments.
# The slower one serves the same weights unquantized (F32: twice the decode
# step) and prefills 8 tokens a step (--batch 8: about 4x the prefill time),
# so a first token there takes 2-4x as long; on 2 cores no replica can have
# more threads than another (llama.cpp's spinning threads collapse when they
# share cores). Capacity is measured, not modelled: the rate at which the
# fleet saturated under `ttft` on the development machine (2-core EPYC VM
# shared with other work, load average 9) with this mix: 2.2 req/s with 4
# clients in a closed loop, 2.5 with 8 (bench/routing/README.md, "Real
# engines"). The mix is lighter than llmsim's: on a CPU a prompt token costs
# a fifth of a decode step (a hundredth on a GPU), and scenario 1's prompts
# (256..2048 bytes, 370 tokens on average here) made the fleet's capacity
# under 1 request/s.
REAL_CAPACITY_RPS = 2.5
REAL_PROMPT = "64-512"
REAL_MAX_TOKENS = "mix:80%16-64,20%64-128"
REAL_REPLICAS = [
    ["--weights", "q8_0", "--sequences", "4"],
    ["--weights", "f32", "--batch", "8", "--sequences", "4"],
]

SCENARIOS.append(
    _s(id="real", scenario="real", title="Real llama.cpp replicas, one slower",
       engine="real", replicas=REAL_REPLICAS, speeds=[1.0, 0.4],
       # the tokens a llama_decode() step carries at most (the step logs:
       # r1 up to 435 of its 512, r2 16: node-llama-cpp's batch is at least 16)
       prefill_chunks=[512, 16],
       capacity_rps=REAL_CAPACITY_RPS, prompt_bytes=REAL_PROMPT, max_tokens=REAL_MAX_TOKENS,
       load=0.7, duration=60, quick=10,
       contenders=["round_robin", "ttft", "nginx", "haproxy"],
       what="2 real llama.cpp replicas (tools/realengine, one CPU each): r1 Q8_0, r2 the "
            "same weights in F32 prefilling 8 tokens a step; prompts of 64..512 bytes, "
            "max_tokens 16..64 (80%) or 64..128; Poisson arrivals at 70% of the measured "
            "capacity",
       criteria="real", timeout_s=60))

def by_id():
    return {s["id"]: s for s in SCENARIOS}


def select(arg):
    """Scenarios for --scenario: 'all', '1' (both variants), '1b', '6' (not 6r), '8' (8a, 8b,
    8n), or a comma list."""
    if arg in (None, "", "all"):
        return list(SCENARIOS)
    out = []
    for part in str(arg).split(","):
        part = part.strip()
        # an id ("6") names that scenario alone, a number with no such id ("1") its variants
        hits = ([s for s in SCENARIOS if s["id"] == part]
                or [s for s in SCENARIOS if str(s["scenario"]) == part])
        if not hits:
            raise ValueError("unknown scenario %r (known: %s)" % (
                part, ", ".join(s["id"] for s in SCENARIOS)))
        out.extend(h for h in hits if h not in out)
    return out
