#!/usr/bin/env python3
"""Replay an llmgate access log against other routing policies.

    tools/replay/replay.py access.log --fleet fleet.json --policies ttft,least_request
    tools/replay/replay.py access.log --fleet bench:1b --policies ttft,least_request,nginx
    tools/replay/replay.py access.log --fleet fleet.json --dry-run --trace-out trace.jsonl

Reads the log's requests (arrival times from `ts`, model, API, stream flag,
prompt size, max_tokens and the tokens each answer had), turns them into an
llmload trace, and for each round and each policy (interleaved: A B A B)
starts a fresh fleet (llmsim replicas as the fleet file describes them, or
real replicas by URL), the policy in front of it (llmgate with that routing,
or nginx / HAProxy as the routing benchmark runs them), and replays the trace
through it with llmload. Prints the TTFT table of every policy side by side,
with the live log's own numbers, and writes replay.md and replay.json under
--out. Python 3 standard library only; see tools/replay/README.md.
"""

import argparse
import calendar
import datetime
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
BENCH = os.path.join(SRC, "bench", "routing")
sys.path.insert(0, BENCH)

import procs as P  # noqa: E402
import report as R  # noqa: E402
import run as BR  # noqa: E402
import scenarios as S  # noqa: E402

# What a log line without `prompt_bytes` (a log older than the field) is
# given: bytes_in less this many bytes, the request head and the JSON around
# the prompt (llmload's requests: 252..254 bytes; an SDK that sends more
# headers makes the estimate that much too large). Without `max_tokens` a
# request asks for the length its answer had.
OLD_LOG_OVERHEAD = 256

# The APIs replayed, by the end of the request path.
APIS = (("/chat/completions", "chat"), ("/completions", "completions"),
        ("/embeddings", "embeddings"))

# Replica keys of a fleet file that become llmsim flags.
SIM_FLAGS = {
    "speed": "--speed", "slots": "--slots", "decode_ms": "--decode-ms",
    "decode_ms_per_seq": "--decode-ms-per-seq", "prefill_us_per_token": "--prefill-us-per-token",
    "prefix_block_tokens": "--prefix-block-tokens", "prefix_cache_blocks": "--prefix-cache-blocks",
    "max_tokens_default": "--max-tokens-default", "seed": "--seed",
}
REPLICA_KEYS = set(SIM_FLAGS) | {"name", "url", "models", "flavor", "args"}
FLAVORS = ("vllm", "sglang", "tgi", "llamacpp")

# Sections of a --config that belong to the live deployment, not to the
# replay: its addresses, other gateways, key checks (the replay sends no
# key) and its fleet (the replay's fleet replaces it).
CONFIG_DROPPED = ("listen", "admin", "peers", "discovery", "auth", "backends", "access_log")


class ReplayError(Exception):
    """Bad input (a log line, the fleet file, an option): the message says where."""


# ---- the access log ------------------------------------------------------------

def parse_ts(s):
    """'2026-11-30T12:27:26.123456Z' -> integer microseconds since the epoch."""
    d = datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ")
    return calendar.timegm(d.timetuple()) * 1000000 + d.microsecond


def api_of(path):
    path = path.split("?", 1)[0].rstrip("/")
    for suffix, api in APIS:
        if path.endswith(suffix):
            return api
    return None


def json_of(text, where):
    try:
        return json.loads(text)
    except ValueError as e:
        raise ReplayError("%s: not JSON (%s)" % (where, e))


def _want(line_ref, e, key, types, optional=False, nullable=False):
    if key not in e:
        if optional:
            return None
        raise ReplayError('%s: missing "%s"' % (line_ref, key))
    v = e[key]
    if v is None and nullable:
        return None
    if not isinstance(v, types) or isinstance(v, bool) and bool not in types:
        raise ReplayError('%s: "%s" has the wrong type (%s)' % (line_ref, key, json.dumps(v)))
    return v


def read_log(paths):
    """Every request line of the logs, checked, sorted by arrival. Returns
    (entries, skipped {why: count}). Raises ReplayError (FILE:LINE: what) on
    a line that is not one of llmgate's."""
    entries = []
    for path in paths:
        try:
            f = open(path, encoding="utf-8", errors="replace")
        except OSError as e:
            raise ReplayError("%s: %s" % (path, e.strerror))
        with f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                ref = "%s:%d" % (path, lineno)
                e = json_of(line, ref)
                if not isinstance(e, dict):
                    raise ReplayError("%s: not a JSON object" % ref)
                ts = _want(ref, e, "ts", (str,))
                try:
                    e["_us"] = parse_ts(ts)
                except ValueError:
                    raise ReplayError('%s: "ts" is not YYYY-MM-DDTHH:MM:SS.uuuuuuZ (%s)'
                                      % (ref, json.dumps(ts)))
                _want(ref, e, "path", (str,))
                _want(ref, e, "method", (str,), nullable=True)
                _want(ref, e, "status", (int,))
                _want(ref, e, "model", (str,), nullable=True)
                _want(ref, e, "stream", (bool,))
                _want(ref, e, "bytes_in", (int,))
                _want(ref, e, "tokens", (int,))
                _want(ref, e, "backend", (str,), nullable=True)
                _want(ref, e, "prompt_bytes", (int,), optional=True)
                _want(ref, e, "max_tokens", (int,), optional=True, nullable=True)
                for k in ("ttft", "total"):
                    _want(ref, e, k, (int, float), optional=True, nullable=True)
                e["_ref"] = ref
                entries.append(e)
    entries.sort(key=lambda e: e["_us"])
    kept, skipped = [], {}
    for e in entries:
        why = skip_reason(e)
        if why:
            skipped[why] = skipped.get(why, 0) + 1
        else:
            kept.append(e)
    return kept, skipped


def skip_reason(e):
    """Why a logged request is not replayed (None: it is). Requests the gateway
    refused before routing (bad body, unknown path or model, a key check) say
    nothing about routing; those that failed for want of capacity (429, 5xx)
    or that the client left (499) are replayed."""
    if (e.get("method") or "POST") != "POST" or api_of(e["path"]) is None:
        return "not an inference API (%s %s)" % (e.get("method"), e["path"].split("?")[0])
    st = e["status"]
    if 400 <= st < 500 and st not in (429, 499):
        return "refused before routing (%d)" % st
    if not e.get("model"):
        return "no model"
    return None


def window(entries, start_s, duration_s):
    if not entries:
        return entries
    t0 = entries[0]["_us"] + int((start_s or 0) * 1e6)
    t1 = t0 + int(duration_s * 1e6) if duration_s else None
    return [e for e in entries if e["_us"] >= t0 and (t1 is None or e["_us"] < t1)]


def answered(e):
    """The request got its whole answer (an embedding has no tokens)."""
    return e["status"] == 200 and e.get("error") is None and (
        e["tokens"] > 0 or api_of(e["path"]) == "embeddings")


def output_tokens(e, typical):
    """Tokens the replayed answer gets: what it had live; for a request that
    failed or was cut, its max_tokens, else the model's median answer."""
    if answered(e):
        return e["tokens"]
    if e.get("max_tokens"):
        return e["max_tokens"]
    return typical.get(e["model"], 16)


def make_trace(entries, real):
    """llmload trace lines (dicts) for the entries. real: the fleet has real
    engines, which stop where they like: max_tokens is the live answer's length
    (with ignore_eos). Otherwise (llmsim) the client's max_tokens goes as it
    was and llmsim is told the length (sim_completion_tokens)."""
    typical = {}
    for m in {e["model"] for e in entries}:
        ok = sorted(e["tokens"] for e in entries if e["model"] == m and answered(e))
        typical[m] = ok[len(ok) // 2] if ok else 16
    out = []
    t0 = entries[0]["_us"] if entries else 0
    for e in entries:
        api = api_of(e["path"])
        prompt = e.get("prompt_bytes")
        if prompt is None:  # a log from before the field
            prompt = max(1, e["bytes_in"] - OLD_LOG_OVERHEAD)
        item = {"t_us": e["_us"] - t0, "prompt_bytes": prompt, "group": -1,
                "model": e["model"], "api": api, "stream": e["stream"]}
        if api == "embeddings":
            item["max_tokens"] = 0
            out.append(item)
            continue
        n = output_tokens(e, typical)
        asked = e["max_tokens"] if "max_tokens" in e else n  # an old log: the length
        if real:
            item["max_tokens"] = n
        else:
            item["max_tokens"] = asked  # None (no max_tokens in the body) stays null
            if asked is None or n < asked:
                item["extra_body"] = {"sim_completion_tokens": n}
        out.append(item)
    return out


def write_trace(path, items):
    with open(path, "w") as f:
        for it in items:
            f.write(json.dumps(it, separators=(",", ":")) + "\n")


# ---- the fleet -------------------------------------------------------------------

def read_json(path, what):
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ReplayError("%s %s: %s" % (what, path, e.strerror))
    return json_of(text, "%s %s" % (what, path))


def load_fleet(spec, log_models):
    """Replica dicts from a fleet file or bench:ID (a routing benchmark
    scenario's fleet). A replica without `models` serves every model of the log."""
    if spec.startswith("bench:"):
        sid = spec[len("bench:"):]
        scen = S.by_id().get(sid)
        if scen is None:
            raise ReplayError("--fleet %s: no such scenario (known: %s)"
                              % (spec, ", ".join(S.by_id())))
        sim = scen["sim"]
        reps = [{"name": "r%d" % (i + 1), "speed": sp, "slots": sim["slots"],
                 "decode_ms": sim["decode_ms"], "decode_ms_per_seq": sim["decode_ms_per_seq"],
                 "prefill_us_per_token": sim["prefill_us_per_token"],
                 "prefix_block_tokens": sim["prefix_block_tokens"],
                 "prefix_cache_blocks": sim["prefix_cache_blocks"], "flavor": sim["flavor"],
                 "seed": 100 + i}
                for i, sp in enumerate(scen["speeds"])]
        doc = {"replicas": reps}
    else:
        doc = read_json(spec, "--fleet")
    if not isinstance(doc, dict) or not isinstance(doc.get("replicas"), list) \
            or not doc["replicas"]:
        raise ReplayError('%s: expected {"defaults": {...}, "replicas": [{...}, ...]}' % spec)
    defaults = doc.get("defaults", {})
    for k in doc:
        if k not in ("defaults", "replicas") and not k.startswith("#"):
            raise ReplayError('%s: unknown key "%s" (defaults, replicas)' % (spec, k))
    out, names = [], set()
    for i, r in enumerate(doc["replicas"]):
        where = "%s: replicas[%d]" % (spec, i)
        if not isinstance(r, dict) or not isinstance(defaults, dict):
            raise ReplayError("%s: expected an object" % where)
        r = dict(defaults, **r)
        for k, v in r.items():
            if k.startswith("#"):
                continue
            if k not in REPLICA_KEYS:
                raise ReplayError('%s: unknown key "%s" (known: %s)'
                                  % (where, k, ", ".join(sorted(REPLICA_KEYS))))
            if k in SIM_FLAGS and (not isinstance(v, (int, float)) or isinstance(v, bool)
                                   or v < 0):
                raise ReplayError('%s: "%s" must be a number >= 0' % (where, k))
        name = r.get("name")
        if not isinstance(name, str) or not name or name in names:
            raise ReplayError('%s: "name" must be a unique non-empty string' % where)
        names.add(name)
        models = r.get("models", sorted(log_models))
        if not isinstance(models, list) or not models or \
                not all(isinstance(m, str) and m for m in models):
            raise ReplayError('%s: "models" must be a list of model names' % where)
        if r.get("flavor", "vllm") not in FLAVORS:
            raise ReplayError('%s: "flavor" must be one of %s' % (where, ", ".join(FLAVORS)))
        args = r.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ReplayError('%s: "args" must be a list of llmsim flags' % where)
        url = r.get("url")
        if url is not None:
            u = urllib.parse.urlsplit(url) if isinstance(url, str) else None
            if u is None or u.scheme not in ("http", "https") or not u.hostname:
                raise ReplayError('%s: "url" must be http(s)://HOST[:PORT]' % where)
            extra = sorted(set(r) & (set(SIM_FLAGS) | {"args"}))
            if extra:
                raise ReplayError("%s: a real replica (url) takes no llmsim settings (%s)"
                                  % (where, ", ".join(extra)))
        r["models"] = models
        out.append(r)
    return out


class ReplayFleet(P.Fleet):
    """The routing benchmark's fleet with each replica as the fleet file says:
    llmsim processes (fresh for every run) and real replicas (left as they are)."""

    def __init__(self, build, rundir, shm_dir, replicas, cpus=None):
        super().__init__(build, rundir, shm_dir, {"speeds": [1.0] * len(replicas)}, cpus)
        self.replicas = replicas
        self.names = [r["name"] for r in replicas]
        for i, r in enumerate(replicas):
            if r.get("url"):
                u = urllib.parse.urlsplit(r["url"])
                self.ports[i] = u.port or (443 if u.scheme == "https" else 80)

    def replica_args(self, i):
        r = self.replicas[i]
        out = []
        for m in r["models"]:
            out += ["--model", m]
        out += ["--flavor", r.get("flavor", "vllm"), "--seed", str(int(r.get("seed", 100 + i)))]
        for k, flag in SIM_FLAGS.items():
            if k in r and k != "seed":
                v = r[k]
                out += [flag, str(int(v)) if k in ("slots", "prefix_block_tokens",
                                                   "prefix_cache_blocks",
                                                   "max_tokens_default") else "%g" % v]
        return out + list(r.get("args", []))

    def start(self):
        for i, r in enumerate(self.replicas):
            if not r.get("url"):
                self._start(i)

    def urls(self):
        return [r.get("url") or "http://127.0.0.1:%d" % p
                for r, p in zip(self.replicas, self.ports)]

    def backends(self, load_reports=False):
        return [{"name": r["name"], "url": u, "models": r["models"],
                 "flavor": r.get("flavor", "vllm")}
                for r, u in zip(self.replicas, self.urls())]

    def addrs(self):
        out = []
        for u in self.urls():
            s = urllib.parse.urlsplit(u)
            if s.scheme != "http":
                raise P.Unavailable("nginx and HAProxy run here with http replicas only")
            out.append(s.netloc)
        return out


# ---- contenders ------------------------------------------------------------------

def contender_routing(name, ctx):
    """(kind, routing section or None) of a contender name."""
    base = ctx["base_routing"]
    if name in ctx["routings"]:
        routing = dict(base)
        routing.pop("policy", None)
        routing.pop("pipeline", None)
        routing.update(ctx["routings"][name])
        return "llmgate", routing
    try:
        kind, instances = BR.contender_kind(name)
    except SystemExit as e:  # the benchmark's own message: the names it knows
        raise ReplayError("%s, a --routing name, or config (with --config)" % e)
    if instances != 1 or BR.split_ref(name)[1]:
        raise ReplayError("contender %r: one gateway of this build only" % name)
    if kind != "llmgate":
        return kind, None
    if BR.split_options(name)[0] == "oracle" and ctx["real"]:
        raise ReplayError("contender oracle: needs an llmsim-only fleet (it reads their state)")
    routing = dict(base)
    routing.pop("policy", None)
    routing.pop("pipeline", None)
    routing.update(BR.routing_for(name, {"prefix_groups": 0}, ctx["build"], ctx["shm_dir"]))
    return "llmgate", routing


def make_contender(name, ctx, rundir, fleet):
    kind, routing = contender_routing(name, ctx)
    if kind == "nginx":
        if not P.which("nginx"):
            raise P.Unavailable("nginx is not installed (tools/install-deps.sh --bench)")
        return kind, P.Nginx(rundir, fleet, ctx["workers"])
    if kind == "haproxy":
        if not P.which("haproxy"):
            raise P.Unavailable("haproxy is not installed (tools/install-deps.sh --bench)")
        return kind, P.Haproxy(rundir, fleet, ctx["workers"])
    return kind, P.Llmgate(ctx["build"], rundir, fleet, routing, ctx["workers"],
                           base=ctx["base_config"])


# ---- one run ---------------------------------------------------------------------

def fidelity(trace, access_entries):
    """How faithfully a replay through llmgate reproduced the trace, from the
    replaying gateway's own access log: counts, prompt sizes, max_tokens,
    answer lengths (multisets) and arrival offsets (k-th against k-th, ms)."""
    got = sorted(access_entries, key=lambda e: e["_us"])
    out = {"sent": len(trace), "logged": len(got)}
    if not got or not trace:
        return out
    want_prompt = sorted(t["prompt_bytes"] for t in trace)
    out["prompt_bytes_equal"] = want_prompt == sorted(e.get("prompt_bytes", -1) for e in got)
    want_mt = sorted(json.dumps(t.get("max_tokens")) for t in trace if t["api"] != "embeddings")
    out["max_tokens_equal"] = want_mt == sorted(json.dumps(e.get("max_tokens")) for e in got
                                                if api_of(e["path"]) != "embeddings")
    want_tok = sorted((t.get("extra_body") or {}).get("sim_completion_tokens", t["max_tokens"])
                      for t in trace if t["api"] != "embeddings")
    ok_tok = sorted(e["tokens"] for e in got if api_of(e["path"]) != "embeddings")
    out["tokens_equal"] = want_tok == ok_tok
    want_kind = sorted((t["model"], t["api"], t["stream"]) for t in trace)
    out["model_api_stream_equal"] = want_kind == sorted(
        (e["model"], api_of(e["path"]), e["stream"]) for e in got)
    if len(got) == len(trace):
        # k-th arrival against the k-th of the trace, less the median shift
        # (when the replay began does not matter, only where each arrival lies)
        d = [(e["_us"] - got[0]["_us"] - t["t_us"]) / 1000.0 for e, t in zip(got, trace)]
        shift = sorted(d)[len(d) // 2]
        d = sorted(abs(x - shift) for x in d)
        out["arrival_err_ms"] = {"p50": R.pct(d, 50), "p99": R.pct(d, 99), "max": d[-1]}
    return out


def run_one(args, ctx, name, rnd):
    rundir = os.path.join(ctx["out"], name, "round%d" % rnd)
    shutil.rmtree(rundir, ignore_errors=True)
    os.makedirs(rundir)
    fleet = ReplayFleet(args.build, rundir, ctx["shm_dir"], ctx["fleet"])
    cont = load = None
    result = {"round": rnd, "status": "ok"}
    t_start = time.monotonic()
    try:
        fleet.start()
        kind, cont = make_contender(name, ctx, rundir, fleet)
        cont.start()
        jpath, lpath = os.path.join(rundir, "llmload.json"), os.path.join(rundir, "requests.jsonl")
        argv = [os.path.join(args.build, "llmload"), "--url", "http://127.0.0.1:%d" % cont.ports[0],
                "--model", ctx["models"][0], "--trace-in", ctx["trace"], "--quiet",
                "--json", jpath, "--log", lpath, "--timeout", "%g" % args.timeout]
        if ctx["real"]:
            argv += ["--extra-body", '{"ignore_eos":true}']
        if args.realtime:
            argv.append("--realtime")
        load = P.Proc(argv, os.path.join(rundir, "llmload.out"))
        if not load.exited.wait(ctx["span_s"] + args.timeout + 30):
            os.kill(load.pid, signal.SIGINT)
            load.exited.wait(10.0)
        if load.p.returncode != 0:
            raise P.Unavailable("llmload failed (status %s): %s"
                                % (load.p.returncode, P.tail(load.log_path)))
        with open(jpath) as f:
            result["summary"] = json.load(f)
        result["records"] = R.load_jsonl(lpath)
        result["start_unix_ns"] = result["summary"]["start_unix_ns"]
        cont.stop()  # flushes the access log
        port_names = {str(p): n for n, p in zip(fleet.names, fleet.ports)}
        result["access"] = R.parse_access(kind, cont.access_logs, port_names)
        if kind == "llmgate":
            logged, _ = read_log(cont.access_logs)
            result["fidelity"] = fidelity(ctx["trace_items"], logged)
    except P.Unavailable as e:
        result["status"] = "unavailable"
        result["reason"] = str(e).replace("\n", " | ")
    finally:
        if load is not None:
            load.stop()
        if cont is not None:
            cont.stop()
        fleet.stop()
    result["wall_s"] = time.monotonic() - t_start
    return result


# ---- the report --------------------------------------------------------------------

def shares(run, replicas):
    """Each replica's share of a run's requests: by the replica header llmsim
    sends, else (real replicas) by the proxy's access log."""
    counts = {n: 0 for n in replicas}
    named = [r.get("replica") for r in run["records"] if r.get("replica") in counts]
    if not named:
        named = [a["backend"] for a in run.get("access", []) if a.get("backend") in counts]
    for n in named:
        counts[n] += 1
    return counts


def contender_row(name, runs, replicas):
    ok = [r for r in runs if r["status"] == "ok"]
    if not ok:
        reason = next((r.get("reason") for r in runs), "not run")
        return {"name": name, "unavailable": reason}
    pool = R.Pooled(name, ok, replicas)
    b = pool.basic()
    counts = {n: 0 for n in replicas}
    for r in ok:
        for n, c in shares(r, replicas).items():
            counts[n] += c
    total = sum(counts.values())
    b["shares"] = {n: (c / total if total else 0.0) for n, c in counts.items()}
    b["name"] = name
    b["fidelity"] = [r.get("fidelity") for r in ok]
    b["sched_lag_max_ms"] = [(r["summary"].get("sched_lag_ms") or {}).get("max") for r in ok]
    return b


def live_row(entries, replicas):
    """The log's own numbers: TTFT and total as the live gateway measured them
    (from each request's first byte), errors, and shares by backend."""
    t = [e["ttft"] for e in entries if e.get("ttft") is not None]
    e2e = [e["total"] for e in entries if answered(e) and e.get("total") is not None]
    errs = {}
    for e in entries:
        if not answered(e):
            k = e.get("error") or "status %d" % e["status"]
            errs[k] = errs.get(k, 0) + 1
    counts = {}
    for e in entries:
        if e.get("backend"):
            counts[e["backend"]] = counts.get(e["backend"], 0) + 1
    total = sum(counts.values())
    policies = {}
    for e in entries:
        if e.get("policy"):
            policies[e["policy"]] = policies.get(e["policy"], 0) + 1
    pol = max(policies, key=policies.get) if policies else "?"
    return {"name": "live (%s)" % pol, "requests": len(entries), "ttft_p50": R.pct(t, 50),
            "ttft_p90": R.pct(t, 90), "ttft_p99": R.pct(t, 99), "e2e_p99": R.pct(e2e, 99),
            "errors": errs, "ttft_p99_by_round": [],
            "shares": {n: counts.get(n, 0) / total if total else 0.0 for n in replicas},
            "other_backends": sorted(set(counts) - set(replicas))}


def ratios(rows):
    """p99 TTFT of each contender over the first's: pooled and per round."""
    first = rows[0] if rows else None
    out = {}
    if not first or "unavailable" in first:
        return out
    for row in rows:
        if "unavailable" in row:
            continue
        per_round = []
        for a, b in zip(row["ttft_p99_by_round"], first["ttft_p99_by_round"]):
            per_round.append(R.ratio(a, b))
        out[row["name"]] = {"pooled": R.ratio(row["ttft_p99"], first["ttft_p99"]),
                            "by_round": per_round}
    return out


def table(rows, live, rat, replicas, markdown=False):
    first = rows[0]["name"] if rows else "-"
    head = ["policy", "n", "TTFT p50", "p90", "p99", "p99 by round", "e2e p99", "errors",
            "share % " + "/".join(replicas), "p99 / %s" % first, "by round"]
    body = []
    for r in ([live] if live else []) + rows:
        if "unavailable" in r:
            body.append([r["name"], "-", "n/a"] + [""] * (len(head) - 3))
            continue
        nerr = sum(r["errors"].values())
        err_s = "0" if not nerr else "%d (%s)" % (nerr, ", ".join(
            "%s %d" % kv for kv in sorted(r["errors"].items())))
        q = rat.get(r["name"], {})
        body.append([r["name"], str(r["requests"]), R.fmt_ms(r["ttft_p50"]),
                     R.fmt_ms(r["ttft_p90"]), R.fmt_ms(r["ttft_p99"]),
                     "|".join(R.fmt_ms(v) for v in r["ttft_p99_by_round"]) or "-",
                     R.fmt_ms(r["e2e_p99"]), err_s,
                     "/".join("%.0f" % (100 * r["shares"].get(n, 0)) for n in replicas),
                     R.fmt_ratio(q.get("pooled")),
                     "|".join(R.fmt_ratio(v) for v in q.get("by_round", [])) or "-"])
    return (R.md_table if markdown else R.text_table)(head, body)


FIDELITY = (("prompt_bytes_equal", "prompt_bytes"), ("max_tokens_equal", "max_tokens"),
            ("tokens_equal", "tokens"), ("model_api_stream_equal", "model/API/stream"))


def fidelity_lines(rows):
    out = []
    for r in rows:
        for k, f in enumerate(r.get("fidelity") or []):
            if not f:
                continue
            same = [label for key, label in FIDELITY if f.get(key)]
            diff = [label for key, label in FIDELITY if key in f and not f[key]]
            a = f.get("arrival_err_ms") or {}
            out.append("%s round %d: %d sent, %d in its access log; same %s%s; arrival "
                       "offsets off by p50 %s, p99 %s, max %s ms" % (
                           r["name"], k + 1, f["sent"], f["logged"],
                           ", ".join(same) or "nothing",
                           ("; DIFFERENT " + ", ".join(diff)) if diff else "",
                           R.fmt_ms(a.get("p50")), R.fmt_ms(a.get("p99")),
                           R.fmt_ms(a.get("max"))))
    return out


# ---- main ---------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", metavar="LOG",
                    help="llmgate access log(s); several (one per gateway) are merged by time")
    ap.add_argument("--fleet", help="fleet file (JSON, see the README) or bench:ID, the fleet "
                    "of a routing benchmark scenario (bench:1b)")
    ap.add_argument("--policies", default="round_robin,least_request,ttft",
                    help="comma list: llmgate policies (round_robin, least_request, p2c, ttft, "
                         "prefix_affinity, oracle; NAME+OPTION=VALUE for a policy option), "
                         "names given by --routing, 'config' (--config's own routing), "
                         "nginx, haproxy (default round_robin,least_request,ttft)")
    ap.add_argument("--routing", action="append", default=[], metavar="NAME=JSON",
                    help="a contender NAME with this routing section (JSON, or @FILE), e.g. "
                         "'aff={\"pipeline\":[\"prefix_affinity\",\"ttft\"]}'; repeatable")
    ap.add_argument("--config", help="the live gateway's config: every contender llmgate keeps "
                    "its timeouts, limits, health and routing options (not its addresses, "
                    "peers, discovery, auth, backends or access log)")
    ap.add_argument("--rounds", type=int, default=2, help="runs per policy, interleaved "
                    "(default 2)")
    ap.add_argument("--start", type=float, default=0.0,
                    help="replay from S seconds after the log's first request")
    ap.add_argument("--duration", type=float, default=None,
                    help="replay S seconds of the log (default all)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="per-request timeout of the replay, seconds (default 300)")
    ap.add_argument("--workers", type=int, default=None,
                    help="threads of every proxy (default: --config's workers, else 1)")
    ap.add_argument("--out", help="output folder (default bench/out/replay-<timestamp>/)")
    ap.add_argument("--build", default=os.environ.get("LG_BUILD") or os.path.join(SRC, "build"),
                    help="build folder with llmgate, llmsim, llmload")
    ap.add_argument("--nice", type=int, default=0,
                    help="niceness of the fleet and the proxies (e.g. -10 on a shared machine)")
    ap.add_argument("--realtime", dest="realtime", action="store_true", default=None,
                    help="run llmload under SCHED_FIFO (default: when root)")
    ap.add_argument("--no-realtime", dest="realtime", action="store_false")
    ap.add_argument("--trace-out", help="also write the llmload trace here")
    ap.add_argument("--dry-run", action="store_true",
                    help="read the log and the fleet, write the trace, run nothing")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not args.fleet and not args.dry_run:
        ap.error("--fleet is required (a fleet file or bench:ID)")
    if args.realtime is None:
        args.realtime = os.geteuid() == 0
    return args


def parse_routings(specs):
    out = {}
    for spec in specs:
        name, eq, text = spec.partition("=")
        if not eq or not name or "," in name or "+" in name:
            raise ReplayError("--routing %r: expected NAME=JSON or NAME=@FILE" % spec)
        if text.startswith("@"):
            routing = read_json(text[1:], "--routing %s:" % name)
        else:
            routing = json_of(text, "--routing %s" % name)
        if not isinstance(routing, dict):
            raise ReplayError("--routing %s: expected a routing object" % name)
        out[name] = routing
    return out


def load_config(path):
    if not path:
        return {}
    conf = read_json(path, "--config")
    if not isinstance(conf, dict):
        raise ReplayError("--config %s: not a JSON object" % path)
    return {k: v for k, v in conf.items() if k not in CONFIG_DROPPED}


def _terminate(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


def main(argv=None):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    args.build = os.path.abspath(args.build)
    entries, skipped = read_log(args.logs)
    entries = window(entries, args.start, args.duration)
    if not entries:
        raise ReplayError("%s: no request to replay (skipped: %s)" % (
            ", ".join(args.logs), json.dumps(skipped)))
    models = []
    for e in entries:
        if e["model"] not in models:
            models.append(e["model"])
    fleet = load_fleet(args.fleet, models) if args.fleet else []
    real = any(r.get("url") for r in fleet)
    items = make_trace(entries, real)
    span = items[-1]["t_us"] / 1e6
    served = {m for r in fleet for m in r["models"]}
    missing = [m for m in models if fleet and m not in served]
    if missing:
        raise ReplayError("--fleet: no replica serves %s (a replica without \"models\" serves "
                          "every model of the log)" % ", ".join(missing))
    print("replay: %d requests over %.1f s from %s (%s); %s" % (
        len(items), span, ", ".join(args.logs),
        ", ".join("%s %d" % (m, sum(1 for e in entries if e["model"] == m)) for m in models),
        "skipped " + ", ".join("%d %s" % (v, k) for k, v in sorted(skipped.items()))
        if skipped else "nothing skipped"))
    if "prompt_bytes" not in entries[0]:
        print("replay: the log has no prompt_bytes: estimated as bytes_in - %d; no max_tokens: "
              "the answer's length" % OLD_LOG_OVERHEAD)
    if args.trace_out:
        write_trace(args.trace_out, items)
    if args.dry_run:
        return 0
    for b in ("llmgate", "llmsim", "llmload"):
        if not os.access(os.path.join(args.build, b), os.X_OK):
            raise ReplayError("%s/%s not found: build first (cmake --build build)"
                              % (args.build, b))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = os.path.abspath(args.out or os.path.join(SRC, "bench", "out", "replay-" + stamp))
    os.makedirs(out, exist_ok=True)
    trace = os.path.join(out, "trace.jsonl")
    write_trace(trace, items)
    base = load_config(args.config)
    routings = parse_routings(args.routing)
    if args.config:
        routings.setdefault("config", base.get("routing") or {})
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    shm_dir = tempfile.mkdtemp(prefix="lgreplay-",
                               dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    ctx = {"out": out, "fleet": fleet, "real": real, "models": models, "trace": trace,
           "trace_items": items, "span_s": span, "build": args.build, "shm_dir": shm_dir,
           "routings": routings, "base_config": {k: v for k, v in base.items() if k != "routing"},
           "base_routing": base.get("routing") or {},
           "workers": args.workers or base.get("workers") or 1}
    for n in names:
        try:
            contender_routing(n, ctx)  # unknown names fail before anything runs
        except P.Unavailable:
            pass  # (oracle.so not built): reported by its run
    P.NICE = args.nice
    replicas = [r["name"] for r in fleet]
    runs = {n: [] for n in names}
    total, done = len(names) * args.rounds, 0
    try:
        for rnd in range(1, args.rounds + 1):
            for n in names:
                done += 1
                if runs[n] and runs[n][-1]["status"] != "ok":
                    continue
                r = run_one(args, ctx, n, rnd)
                runs[n].append(r)
                if r["status"] != "ok":
                    print("  [%d/%d] %-16s round %d: unavailable: %s" % (
                        done, total, n, rnd, r["reason"][:200]), flush=True)
                    continue
                t = [x["ttft_ms"] for x in r["records"] if x.get("ttft_ms") is not None]
                print("  [%d/%d] %-16s round %d: %5.1f s, TTFT p50 %s p99 %s ms, %d errors"
                      % (done, total, n, rnd, r["wall_s"], R.fmt_ms(R.pct(t, 50)),
                         R.fmt_ms(R.pct(t, 99)),
                         sum(1 for x in r["records"] if x.get("error"))), flush=True)
    finally:
        shutil.rmtree(shm_dir, ignore_errors=True)
    rows = [contender_row(n, runs[n], replicas) for n in names]
    live = live_row(entries, replicas)
    rat = ratios(rows)
    head = ("Replay of %s (%d requests over %.1f s) on %s, %d round(s) interleaved."
            % (", ".join(args.logs), len(items), span, args.fleet, args.rounds))
    notes = ["TTFT and e2e in ms: replayed runs from each request's scheduled arrival (llmload), "
             "the live row from the request's first byte at the gateway (its access log).",
             "p99 / %s: each policy's pooled p99 TTFT over the first's; by round: the same per "
             "round, whose spread is the noise of the comparison." % (names[0] if names else "-")]
    notes += ["%s: not run: %s" % (r["name"], r["unavailable"]) for r in rows
              if "unavailable" in r]
    notes += fidelity_lines(rows)
    if live.get("other_backends"):
        notes.append("the live log also names backends not in this fleet: %s"
                     % ", ".join(live["other_backends"]))
    print("\n" + head + "\n")
    print(table(rows, live, rat, replicas))
    print("\n" + "\n".join(notes))
    with open(os.path.join(out, "replay.md"), "w") as f:
        f.write("\n".join(["# Replay", "", "Command: `tools/replay/replay.py %s`" % " ".join(
            sys.argv[1:] if argv is None else argv), "", head, "",
            table(rows, live, rat, replicas, markdown=True), ""] + ["- " + n for n in notes])
            + "\n")
    with open(os.path.join(out, "replay.json"), "w") as f:
        json.dump({"logs": args.logs, "fleet": fleet, "policies": names, "rounds": args.rounds,
                   "skipped": skipped, "requests": len(items), "span_s": span,
                   "live": live, "rows": rows, "ratios": rat}, f, indent=1, default=str)
    print("\nresults: %s/replay.md, %s/replay.json" % (out, out))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ReplayError as e:
        print("replay: %s" % e, file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:
        print("\ninterrupted (%s)" % (e or "SIGINT"), file=sys.stderr)
        sys.exit(130)
