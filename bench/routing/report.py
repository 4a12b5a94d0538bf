"""Analysis of the routing benchmark: percentiles, shares, the scenarios'
criteria, tables (text and Markdown) and the data files gnuplot draws.

Input per contender and round (see run.py): the per-request records of
llmload's --log, its JSON summary, the times of injected faults, the proxy's
access log, and each replica's /sim/state at the end. Rounds of one contender
replay the same trace, so their records are pooled for percentiles and for
the per-second shares (the bins line up).
"""

import datetime
import json
import math
import os
import subprocess

import mismatch as M
import scenarios as S
import shapes as SH


# ---- basic statistics ---------------------------------------------------------

def pct(values, p):
    """Nearest-rank percentile (always a value that was observed); None if empty."""
    if not values:
        return None
    v = sorted(values)
    k = max(1, int(math.ceil(p / 100.0 * len(v))))
    return v[min(k, len(v)) - 1]


def fmt_ms(v):
    if v is None:
        return "-"
    if v >= 10000:
        return "%.1fs" % (v / 1000.0)
    if v >= 100:
        return "%.0f" % v
    return "%.1f" % v


def fmt_ratio(v):
    return "-" if v is None else "%.2f" % v


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def load_jsonl(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


# ---- access logs: who got what, when -------------------------------------------

def _iso_to_unix(ts):
    # "2026-11-30T12:27:26.123456Z"
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ")
    return d.replace(tzinfo=datetime.timezone.utc).timestamp()


def _attempt_count(e):
    """How many backends a request tried: attempt_count (its attempts array's
    length when every try fits), or the count older logs called attempts."""
    n = e.get("attempt_count")
    if n is None and not isinstance(e.get("attempts"), list):
        n = e.get("attempts")
    return n or 1


def parse_access(kind, paths, port_names):
    """Unified access entries: {"t": unix start, "backend": name|None, "tried": [names],
    "retried": bool}."""
    out = []
    for path in paths:
        for e in load_jsonl(path):
            try:
                if kind == "llmgate":
                    out.append({"t": _iso_to_unix(e["ts"]), "backend": e.get("backend"),
                                "tried": [e["backend"]] if e.get("backend") else [],
                                "retried": _attempt_count(e)
                                > (e.get("resumed") or 0) + (2 if e.get("hedged") else 1),
                                "resumed": e.get("resumed") or 0,
                                "resume_pause": e.get("resume_pause"),
                                "hedged": bool(e.get("hedged")),
                                "hedge_winner": e.get("hedge_winner")})
                elif kind == "nginx":
                    ups = [u.strip() for u in (e.get("upstream") or "").split(",") if u.strip()]
                    names = [port_names.get(u.rsplit(":", 1)[-1], u) for u in ups]
                    out.append({"t": float(e["end"]) - float(e["rt"]),
                                "backend": names[-1] if names else None,
                                "tried": names, "retried": len(names) > 1})
                elif kind == "haproxy":
                    rc = str(e.get("retries", "0"))
                    out.append({"t": float(e["ts"]), "backend": e.get("server"),
                                "tried": [e.get("server")],
                                "retried": rc.lstrip("+") not in ("", "0") or rc.startswith("+")})
            except (KeyError, ValueError, TypeError):
                continue
    return out


def intake_lag(records, start_ns, access):
    """How late the proxy took requests in, against when llmload sent them: the
    k-th send against the k-th arrival in the proxy's access log (both sorted),
    in ms. Large values mean the proxy (or the machine) stalled. None when the
    counts differ."""
    sends = sorted(start_ns / 1e9 + r["t_send_ms"] / 1000.0 for r in records
                   if r.get("t_send_ms") is not None)
    arrivals = sorted(a["t"] for a in access)
    if not sends or len(sends) != len(arrivals):
        return None
    d = [max(0.0, (a - s) * 1000.0) for s, a in zip(sends, arrivals)]
    return {"p99": pct(d, 99), "max": max(d)}


# ---- per-contender pooled view ------------------------------------------------------

class Pooled:
    """All rounds of one contender in one scenario."""

    def __init__(self, name, runs, replicas):
        self.name = name
        self.runs = [r for r in runs if r.get("status") == "ok"]
        self.unavailable = next((r.get("reason") for r in runs if r.get("status") != "ok"), None)
        self.replicas = replicas
        self.records = []
        for r in self.runs:
            for rec in r["records"]:
                rec = dict(rec)
                rec["_round"] = r["round"]
                self.records.append(rec)

    @property
    def ok(self):
        return bool(self.runs)

    def ttfts(self, pred=None):
        return [r["ttft_ms"] for r in self.records
                if r.get("ttft_ms") is not None and (pred is None or pred(r))]

    def e2es(self):
        return [r["e2e_ms"] for r in self.records
                if r.get("e2e_ms") is not None and r.get("error") is None]

    def errors(self):
        kinds = {}
        for r in self.records:
            if r.get("error"):
                kinds[r["error"]] = kinds.get(r["error"], 0) + 1
        return kinds

    def shares(self, pred=None):
        counts = {n: 0 for n in self.replicas}
        for r in self.records:
            if r.get("replica") in counts and (pred is None or pred(r)):
                counts[r["replica"]] += 1
        total = sum(counts.values())
        return {n: (c / total if total else 0.0) for n, c in counts.items()}

    def round_p99(self):
        out = []
        for run in self.runs:
            out.append(pct([r["ttft_ms"] for r in run["records"] if r.get("ttft_ms") is not None],
                           99))
        return out

    def bins(self, width=1.0, end=None):
        """Per-bin replica counts of requests by scheduled time: list of {name: count}."""
        end = end or max([r["t_sched_ms"] / 1000.0 for r in self.records] + [0]) + width
        nb = int(math.ceil(end / width))
        out = [{n: 0 for n in self.replicas} for _ in range(nb)]
        for r in self.records:
            b = int(r["t_sched_ms"] / 1000.0 / width)
            if 0 <= b < nb and r.get("replica") in out[b]:
                out[b][r["replica"]] += 1
        return out

    def event_t(self, what):
        """Mean time (s, from the load's start) of an event recorded in every round."""
        ts = [e["t"] for run in self.runs for e in run.get("events", []) if e["what"] == what]
        return sum(ts) / len(ts) if ts else None

    def basic(self):
        t = self.ttfts()
        return {
            "requests": len(self.records),
            "ttft_p50": pct(t, 50), "ttft_p90": pct(t, 90), "ttft_p99": pct(t, 99),
            "e2e_p99": pct(self.e2es(), 99),
            "errors": self.errors(),
            "shares": self.shares(),
            "ttft_p99_by_round": self.round_p99(),
        }


def share_window(bins, name, lo, hi):
    """Share of `name` among requests with a replica in bins [lo, hi)."""
    mine = total = 0
    for b in bins[max(lo, 0):max(hi, 0)]:
        mine += b.get(name, 0)
        total += sum(b.values())
    return (mine / total) if total else None


# ---- scenario analyses -----------------------------------------------------------------
# Each returns (extra column headers, {contender: [values]}, {contender: (pass, detail)})
# where pass is True/False for the contenders the criterion applies to (llmgate's
# policies; the peers and the oracle are references) and None otherwise.

def _judged(name):
    return name not in S.PEERS and name != "oracle"


def analyze_hetero(scen, pools, ctx):
    ng = pools.get("nginx")
    ha = pools.get("haproxy")
    orc = pools.get("oracle")
    ref = {k: (p.basic() if p and p.ok else None) for k, p in
           (("nginx", ng), ("haproxy", ha), ("oracle", orc))}
    cols = ["vs nginx", "vs haproxy", "e2e vs nginx"]
    vals, verdicts = {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        b = p.basic()
        rn = ratio(b["ttft_p99"], ref["nginx"]["ttft_p99"]) if ref["nginx"] else None
        rh = ratio(b["ttft_p99"], ref["haproxy"]["ttft_p99"]) if ref["haproxy"] else None
        ro = ratio(b["ttft_p99"], ref["oracle"]["ttft_p99"]) if ref["oracle"] else None
        re2e = ratio(b["e2e_p99"], ref["nginx"]["e2e_p99"]) if ref["nginx"] else None
        vals[name] = [fmt_ratio(rn), fmt_ratio(rh), fmt_ratio(re2e)]
        if not _judged(name):
            verdicts[name] = (None, "")
            continue
        checks = [("p99 TTFT <= 0.5x nginx", rn, 0.5), ("p99 TTFT <= 0.5x haproxy", rh, 0.5),
                  ("p99 TTFT <= 1.3x oracle", ro, 1.3), ("p99 e2e <= 0.7x nginx", re2e, 0.7)]
        verdicts[name] = _checks(checks)
    return cols, vals, verdicts


def analyze_real(scen, pools, ctx):
    """Real engines: scenario 1's bar (p99 TTFT <= 0.5x nginx's and HAProxy's,
    p99 end-to-end <= 0.7x nginx's); no oracle can read a real engine."""
    ref = {k: (pools[k].basic() if k in pools and pools[k].ok else None)
           for k in ("nginx", "haproxy")}
    cols = ["vs nginx", "vs haproxy", "e2e vs nginx", "e2e vs haproxy"]
    vals, verdicts = {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        b = p.basic()
        r = {k: (ratio(b["ttft_p99"], ref[k]["ttft_p99"]) if ref[k] else None,
                 ratio(b["e2e_p99"], ref[k]["e2e_p99"]) if ref[k] else None) for k in ref}
        vals[name] = [fmt_ratio(r["nginx"][0]), fmt_ratio(r["haproxy"][0]),
                      fmt_ratio(r["nginx"][1]), fmt_ratio(r["haproxy"][1])]
        verdicts[name] = (None, "") if not _judged(name) else _checks([
            ("p99 TTFT <= 0.5x nginx", r["nginx"][0], 0.5),
            ("p99 TTFT <= 0.5x haproxy", r["haproxy"][0], 0.5),
            ("p99 e2e <= 0.7x nginx", r["nginx"][1], 0.7)])
    return cols, vals, verdicts


def _checks(checks):
    """[(label, value, limit)] -> (all pass or None if one is unknown, detail)."""
    parts, ok, unknown = [], True, False
    for label, v, limit in checks:
        if v is None:
            parts.append("%s: n/a" % label)
            unknown = True
        else:
            good = v <= limit
            ok = ok and good
            parts.append("%s: %.2f %s" % (label, v, "ok" if good else "MISSED"))
    if not ok:
        return False, "; ".join(parts)
    return (None if unknown else True), "; ".join(parts)


def analyze_degrade(scen, pools, ctx):
    sd = ctx["slowdown"]
    slow_name = "r%d" % (sd["replica"] + 1)
    n = len(scen["speeds"])
    speeds = list(scen["speeds"])
    speeds[sd["replica"]] = speeds[sd["replica"]] / sd["factor"]
    cap_share = speeds[sd["replica"]] / sum(speeds)
    fair = scen["speeds"][sd["replica"]] / sum(scen["speeds"])
    cols = ["shed s", "recover s", "spike x"]
    vals, verdicts, series = {}, {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        t0 = p.event_t("slow") or sd["at"]
        t1 = t0 + sd["for"]
        end = ctx["duration"]
        bins = p.bins(1.0, end)
        series[name] = bins
        shed = recover = None
        for b in range(int(t0), int(t1)):
            s = share_window(bins, slow_name, b, b + 3)
            if s is not None and s <= cap_share:
                shed = max(0.0, b - t0)
                break
        for b in range(int(math.ceil(t1)), int(end) - 2):
            s = share_window(bins, slow_name, b, b + 3)
            if s is not None and s >= 0.8 * fair:
                recover = max(0.0, b - t1)
                break
        steady = pct(p.ttfts(lambda r: 3000 <= r["t_sched_ms"] < t0 * 1000), 99)
        worst = None
        w = t0 + 10
        while w + 5 <= end + 0.01:
            v = pct(p.ttfts(lambda r, a=w: a * 1000 <= r["t_sched_ms"] < (a + 5) * 1000), 99)
            if v is not None and steady:
                worst = max(worst or 0, v / steady)
            w += 5
        vals[name] = ["%.0f" % shed if shed is not None else ">%.0f" % (t1 - t0),
                      "%.0f" % recover if recover is not None else ">%.0f" % (end - 3 - t1),
                      fmt_ratio(worst)]
        if not _judged(name):
            verdicts[name] = (None, "")
            continue
        checks = [("time to shed (s) <= 5", shed if shed is not None else float("inf"), 5.0),
                  ("time to recover (s) <= 30",
                   recover if recover is not None else float("inf"), 30.0),
                  ("worst 5 s p99 after +10 s / steady p99 <= 2", worst, 2.0)]
        verdicts[name] = _checks(checks)
    ctx["share_series"] = series
    ctx["share_marks"] = [sd["at"], sd["at"] + sd["for"]]
    ctx["notes"].append(
        "r%d slows %gx at t=%gs for %gs: its capacity share falls from %.0f%% to %.1f%%. "
        "shed: from the slowdown to the first 3 s window whose share of %s is at most that; "
        "recover: from the recovery to the first 3 s window back at >= 80%% of %.0f%%; "
        "spike: worst p99 TTFT over 5 s windows from slowdown+10 s to the end, over the p99 "
        "of t=3 s..slowdown." % (sd["replica"] + 1, sd["factor"], sd["at"], sd["for"],
                                 100 * fair, 100 * cap_share, slow_name, 100 * fair))
    return cols, vals, verdicts


def analyze_crash(scen, pools, ctx):
    cr = ctx["crash"]
    dead = "r%d" % (cr["replica"] + 1)
    fair = 1.0 / len(scen["speeds"])
    cols = ["in flight", "cut", "other err", "to dead", "rejoin s", "rejoin share"]
    vals, verdicts, series = {}, {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        tc = p.event_t("crash") or cr["at"]
        tr = p.event_t("restart") or (tc + cr["restart_after"])
        inflight = expected = unexpected = clean = 0
        kinds = {}
        for r in p.records:
            on_dead_before = (r.get("replica") == dead and r.get("t_send_ms") is not None
                              and r["t_send_ms"] / 1000.0 < tc)
            ended = (r["t_sched_ms"] + (r.get("e2e_ms") or 0)) / 1000.0
            if on_dead_before and (r.get("error") or ended >= tc):
                inflight += 1
            if r.get("error"):
                if on_dead_before:
                    expected += 1
                    kinds[r["error"]] = kinds.get(r["error"], 0) + 1
                else:
                    unexpected += 1
            elif r.get("tokens") is not None and r.get("max_tokens") and \
                    r["tokens"] < r["max_tokens"]:
                clean += 1
        # routed to the dead replica more than 1 s after the crash, before the restart
        to_dead = 0
        retried = 0
        for run in p.runs:
            t_unix0 = run["start_unix_ns"] / 1e9
            tc_run = next((e["t"] for e in run["events"] if e["what"] == "crash"), tc)
            tr_run = next((e["t"] for e in run["events"] if e["what"] == "restart"), tr)
            for a in run.get("access", []):
                t = a["t"] - t_unix0
                if tc_run + 1.0 < t < tr_run:
                    if dead in a["tried"]:
                        to_dead += 1
                    elif a["retried"]:
                        retried += 1
        bins = p.bins(1.0, ctx["duration"])
        series[name] = bins
        rejoin = None
        for r in sorted(p.records, key=lambda r: r["t_sched_ms"]):
            if r.get("replica") == dead and r["t_sched_ms"] / 1000.0 >= tr:
                rejoin = r["t_sched_ms"] / 1000.0 - tr
                break
        rshare = None
        if rejoin is not None:
            lo = tr + rejoin
            sel = [r for r in p.records if lo <= r["t_sched_ms"] / 1000.0 < lo + 2.0
                   and r.get("replica")]
            if sel:
                rshare = sum(1 for r in sel if r["replica"] == dead) / len(sel)
        kinds_s = ",".join("%s %d" % kv for kv in sorted(kinds.items()))
        vals[name] = ["%d" % inflight, "%d%s" % (expected, (" (%s)" % kinds_s) if kinds_s else ""),
                      "%d" % (unexpected + clean),
                      "%d%s" % (to_dead, (" +%d retried" % retried) if retried else ""),
                      "%.1f" % rejoin if rejoin is not None else "never",
                      "%.0f%%" % (100 * rshare) if rshare is not None else "-"]
        if not _judged(name):
            verdicts[name] = (None, "")
            continue
        explicit = all(k in ("cut", "invalid") for k in kinds)
        checks = [("failures beyond the dead replica's streams", unexpected, 0),
                  ("streams ended cleanly but short", clean, 0),
                  ("in-flight streams not failed explicitly", 0 if explicit else 1, 0),
                  ("requests to it 1 s after the crash (+retries)", to_dead + retried, 0),
                  ("rejoin (s after restart) <= 15",
                   rejoin if rejoin is not None else float("inf"), 15.0),
                  ("share in its first 2 s back / fair <= 0.75",
                   (rshare / fair) if rshare is not None else None, 0.75)]
        verdicts[name] = _checks(checks)
    ctx["share_series"] = series
    ctx["share_marks"] = [cr["at"], cr["at"] + cr["restart_after"]]
    ctx["notes"].append(
        "r%d exits at t=%gs and restarts at t=%gs. in flight: streams on it at the crash; "
        "cut: those that failed (by kind); other err: any other failure, or a stream that ended "
        "cleanly but short; to dead: requests the proxy sent to it from crash+1 s until the "
        "restart (+ requests retried in that window); rejoin: first request it served after "
        "the restart, and its share of the next 2 s (fair: %.0f%%)."
        % (cr["replica"] + 1, cr["at"], cr["at"] + cr["restart_after"], 100 * fair))
    return cols, vals, verdicts


def _crash_inflight(p, dead, tc):
    """Records of the streams the dead replica had answered before the crash at tc
    (s) and that were still running then: those that failed, or ended after it."""
    out = []
    for r in p.records:
        on_dead_before = (r.get("replica") == dead and r.get("t_send_ms") is not None
                          and r["t_send_ms"] / 1000.0 < tc)
        ended = (r["t_sched_ms"] + (r.get("e2e_ms") or 0)) / 1000.0
        if on_dead_before and (r.get("error") or ended >= tc):
            out.append(r)
    return out


def analyze_failover(scen, pools, ctx):
    """Scenario 3f: the streams in flight on the replica that crashes, resumed on
    another (mid-stream failover) or cut; the pause a resumed stream saw is its
    largest gap between two content events (llmload's itl_max_ms), and the
    gateway's own measure of it from its access log (resume_pause)."""
    cr = ctx["crash"]
    dead = "r%d" % (cr["replica"] + 1)
    cols = ["in flight", "resumed", "cut", "pause p50", "pause p99", "others' gap p50/p99",
            "log: resumed", "log: pause p50/p99", "short", "other err"]
    vals, verdicts = {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        tc = p.event_t("crash") or cr["at"]
        inflight = _crash_inflight(p, dead, tc)
        ids = set(id(r) for r in inflight)
        resumed = [r for r in inflight if not r.get("error")]
        cut = [r for r in inflight if r.get("error")]
        pauses = [r["itl_max_ms"] for r in resumed if r.get("itl_max_ms") is not None]
        # the same measure on the streams the crash did not touch: the gaps a stream sees anyway
        others = [r["itl_max_ms"] for r in p.records if id(r) not in ids and not r.get("error")
                  and r.get("itl_max_ms") is not None]
        short = sum(1 for r in p.records if not r.get("error") and r.get("tokens") is not None
                    and r.get("max_tokens") and r["tokens"] < r["max_tokens"])
        other = sum(1 for r in p.records if r.get("error") and id(r) not in ids)
        logged = [a for run in p.runs for a in run.get("access", []) if a.get("resumed")]
        log_pauses = [a["resume_pause"] for a in logged if a.get("resume_pause") is not None]
        vals[name] = ["%d" % len(inflight), "%d" % len(resumed), "%d" % len(cut),
                      fmt_ms(pct(pauses, 50)), fmt_ms(pct(pauses, 99)),
                      "%s/%s" % (fmt_ms(pct(others, 50)), fmt_ms(pct(others, 99))),
                      "%d" % len(logged),
                      "%s/%s" % (fmt_ms(pct(log_pauses, 50)), fmt_ms(pct(log_pauses, 99))),
                      "%d" % short, "%d" % other]
        if name != (scen.get("subject") or S.SUBJECT):
            verdicts[name] = (None, "")
            continue
        checks = [("in-flight streams cut", len(cut) if inflight else None, 0),
                  ("resumed streams the gateway did not log as resumed",
                   max(0, len(resumed) - len(logged)), 0),
                  ("streams ended cleanly but short", short, 0),
                  ("failures beyond the dead replica's streams", other, 0),
                  ("p99 pause (ms) <= 500", pct(pauses, 99), 500.0)]
        verdicts[name] = _checks(checks)
    ctx["notes"].append(
        "r%d exits at t=%gs and restarts at t=%gs. in flight: streams on it at the crash; "
        "resumed: those that ended well (continued on another replica), cut: those that "
        "failed; pause: a resumed stream's largest gap between content events as the client "
        "saw it (llmload's itl_max_ms), and the same measure on the other streams (the largest "
        "gap a stream sees anyway); log: requests the gateway's access log shows resumed, "
        "and the pause it measured (resume_pause); short: streams that ended well with fewer "
        "tokens than max_tokens (a continuation that lost or repeated none would show here); "
        "other err: failures of streams not on it."
        % (cr["replica"] + 1, cr["at"], cr["at"] + cr["restart_after"]))
    return cols, vals, verdicts


def analyze_burst(scen, pools, ctx):
    f, on, off = (float(x) for x in scen["burst"].split(":"))
    period = on + off
    n = len(scen["speeds"])
    fair = 1.0 / n
    cols = ["worst burst share x fair"]
    vals, verdicts = {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        worst = 0.0
        k = 0
        while k * period < ctx["duration"]:
            lo, hi = k * period * 1000, (k * period + on) * 1000
            for run in p.runs:  # per burst and round: that is what herds
                sel = [r for r in run["records"] if lo <= r["t_sched_ms"] < hi and r.get("replica")]
                if len(sel) >= 4 * n:
                    for rep in p.replicas:
                        s = sum(1 for r in sel if r["replica"] == rep) / len(sel)
                        worst = max(worst, s / fair)
            k += 1
        vals[name] = [fmt_ratio(worst)]
        verdicts[name] = (None, "") if not _judged(name) else \
            _checks([("worst replica share of a burst / fair share <= 1.5", worst, 1.5)])
    ctx["notes"].append("bursts: %gx the mean rate for %g s every %g s; for each burst and round, "
                        "each replica's share of the requests scheduled in it, over the fair "
                        "share (%.0f%%)." % (f, on, period, 100 * fair))
    return cols, vals, verdicts


def analyze_longshort(scen, pools, ctx):
    lim = scen["short_max_bytes"]
    base = ctx["results"].get("1a")
    cols = ["short p99", "long p99", "short p99 / 1a p99"]
    vals, verdicts = {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        sp = pct(p.ttfts(lambda r: r["prompt_bytes"] <= lim), 99)
        lp = pct(p.ttfts(lambda r: r["prompt_bytes"] > lim), 99)
        b1 = None
        if base and name in base["contenders"] and base["contenders"][name].get("ttft_p99"):
            b1 = base["contenders"][name]["ttft_p99"]
        r1 = ratio(sp, b1)
        vals[name] = [fmt_ms(sp), fmt_ms(lp), fmt_ratio(r1)]
        verdicts[name] = (None, "") if not _judged(name) else \
            _checks([("short requests' p99 TTFT / scenario 1a's p99 <= 2", r1, 2.0)])
    ctx["notes"].append("short: prompts of at most %d bytes; the comparison is with the same "
                        "contender's p99 in scenario 1a of this run (n/a if 1a was not run)."
                        % lim)
    return cols, vals, verdicts


def analyze_prefix(scen, pools, ctx):
    load_alone = pools.get(S.SUBJECT)
    base = pct(load_alone.ttfts(), 90) if load_alone and load_alone.ok else None
    fair = 1.0 / len(scen["speeds"])
    cols = ["p90", "cache hits", "max share x fair", "p90 gain vs ttft"]
    vals, verdicts = {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        p90 = pct(p.ttfts(), 90)
        hits = lookups = 0
        for run in p.runs:
            for st in run.get("fleet_state", {}).values():
                hits += st.get("prefix_hits", 0)
                lookups += st.get("prefix_lookups", 0)
        mshare = max(p.shares().values() or [0]) / fair
        gain = ratio(base, p90)
        vals[name] = [fmt_ms(p90), "%.0f%%" % (100.0 * hits / lookups) if lookups else "-",
                      fmt_ratio(mshare), fmt_ratio(gain)]
        if name == "prefix_affinity":
            verdicts[name] = _checks([
                ("p90 TTFT of ttft alone / this >= 3 (as <= 1/3)",
                 (1.0 / gain) if gain else None, 1.0 / 3.0),
                ("busiest replica / fair share <= 1.5", mshare, 1.5)])
        else:
            verdicts[name] = (None, "")
    ctx["notes"].append("cache hits: prompt tokens served from the replicas' prefix caches. "
                        "The criterion applies to prefix_affinity (its pipeline: "
                        "prefix_affinity + ttft) against ttft alone (load only).")
    return cols, vals, verdicts


def analyze_rejoin(scen, pools, ctx):
    cr = ctx["crash"]
    back = "r%d" % (cr["replica"] + 1)
    fair = 1.0 / len(scen["speeds"])
    settle = scen.get("settle_s", 12.0)
    cols = ["p90 before", "p90 late", "late / before", "its share late x fair",
            "its cache hits"]
    vals, verdicts = {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        tc = p.event_t("crash") or cr["at"]
        lo = (p.event_t("restart") or (tc + cr["restart_after"])) + settle

        def before(r):
            return 2.0 <= r["t_sched_ms"] / 1000.0 < tc

        def late(r):
            return r["t_sched_ms"] / 1000.0 >= lo
        p90b = pct(p.ttfts(before), 90)
        p90l = pct(p.ttfts(late), 90)
        grow = ratio(p90l, p90b)
        share = p.shares(late).get(back)
        hits = lookups = 0
        for run in p.runs:
            st = run.get("fleet_state", {}).get(back, {})  # its process since the restart
            hits += st.get("prefix_hits", 0)
            lookups += st.get("prefix_lookups", 0)
        vals[name] = [fmt_ms(p90b), fmt_ms(p90l), fmt_ratio(grow),
                      fmt_ratio(share / fair if share is not None else None),
                      "%.0f%%" % (100.0 * hits / lookups) if lookups else "-"]
        if name == "prefix_affinity":
            verdicts[name] = _checks([
                ("p90 TTFT late / before the crash <= 1.5", grow, 1.5),
                ("its share late / fair >= 0.75 (as fair / share <= 1.33)",
                 None if share is None else (fair / share) if share > 0 else float("inf"),
                 1.0 / 0.75)])
        else:
            verdicts[name] = (None, "")
    ctx["notes"].append(
        "%s exits at t=%gs and restarts at t=%gs with an empty cache. before: requests "
        "scheduled from 2 s to the crash; late: from %g s after the restart (slow start "
        "done) to the end; its cache hits: its prompt tokens served from cache since the "
        "restart. The criterion applies to prefix_affinity (+ ttft)."
        % (back, cr["at"], cr["at"] + cr["restart_after"], settle))
    return cols, vals, verdicts


def analyze_dual(scen, pools, ctx):
    cols = ["p99 / single ttft"]
    single = pools.get(S.SUBJECT)
    sp = pct(single.ttfts(), 99) if single and single.ok else None
    vals, verdicts = {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        r = ratio(pct(p.ttfts(), 99), sp)
        vals[name] = [fmt_ratio(r)]
        if name.endswith(S.DUAL_SUFFIX) and name[:-len(S.DUAL_SUFFIX)] == S.SUBJECT:
            verdicts[name] = _checks([("p99 TTFT / one instance's <= 1.3", r, 1.3)])
        else:
            verdicts[name] = (None, "")
    ctx["notes"].append("X%s: two llmgate instances with the same config, each replaying half "
                        "of the trace (a seeded random split); their logs are merged."
                        % S.DUAL_SUFFIX)
    return cols, vals, verdicts


def engine_work(run):
    """What the fleet did for one run, from llmsim's own counters (/sim/state at the end):
    requests it received (those a stall held and whose client left included), tokens it
    generated (for aborted sequences too) and prompt tokens it prefilled; against what the
    client asked for and got (llmload's records)."""
    got = sent = tokens = 0
    gen = prefill = aborted = stalls = parked = 0
    for st in (run.get("fleet_state") or {}).values():
        stalls += st.get("stalls", 0)
        parked += st.get("parked", 0)
        got += st.get("requests", 0) + st.get("abandoned", 0)
        gen += st.get("generation_tokens", 0)
        prefill += st.get("prefilled_tokens", 0)
        aborted += st.get("aborted", 0)
    for r in run["records"]:
        sent += 1
        tokens += r.get("tokens") or 0
    return {"sent": sent, "received": got, "tokens": tokens, "generated": gen,
            "prefilled": prefill, "aborted": aborted, "stalls": stalls, "parked": parked}


def analyze_hedge(scen, pools, ctx):
    """Scenario 8: hedged first tokens against the same policy without them, and what the
    duplicates cost the engines."""
    on, off = pools.get(S.HEDGE_ON), pools.get(S.HEDGE_OFF)
    p99_off = pct(off.ttfts(), 99) if off and off.ok else None
    prefill_off = None
    if off and off.ok:
        w = [engine_work(r) for r in off.runs]
        prefill_off = sum(x["prefilled"] for x in w) / max(1, sum(x["sent"] for x in w))
    calm = bool(scen.get("calm"))
    cols = ["stalls, held / round", "p99 / hedge=0", "hedged %", "won by hedge %",
            "extra engine requests %", "tokens beyond delivered %", "prefill / hedge=0"]
    vals, verdicts = {}, {}
    for name, p in pools.items():
        if not p.ok:
            continue
        w = [engine_work(r) for r in p.runs]
        sent = sum(x["sent"] for x in w)
        extra_req = ratio(sum(x["received"] for x in w) - sent, sent)
        delivered = sum(x["tokens"] for x in w)
        extra_tok = ratio(sum(x["generated"] for x in w) - delivered, delivered)
        prefill = ratio(sum(x["prefilled"] for x in w) / max(1, sent), prefill_off)
        acc = [a for run in p.runs for a in run.get("access", [])]
        hedged = sum(1 for a in acc if a.get("hedged"))
        won = sum(1 for a in acc if a.get("hedge_winner") == "hedge")
        r99 = ratio(pct(p.ttfts(), 99), p99_off)
        vals[name] = ["%.1f, %.1f" % (sum(x["stalls"] for x in w) / len(w),
                                      sum(x["parked"] for x in w) / len(w)),
                      fmt_ratio(r99),
                      "%.1f" % (100.0 * hedged / len(acc)) if acc and hedged else
                      ("0" if acc else "-"),
                      "%.0f" % (100.0 * won / hedged) if hedged else "-",
                      "%.1f" % (100 * extra_req) if extra_req is not None else "-",
                      "%.1f" % (100 * extra_tok) if extra_tok is not None else "-",
                      fmt_ratio(prefill)]
        if name != S.HEDGE_ON:
            verdicts[name] = (None, "")
            continue
        if calm:
            checks = [("p99 TTFT / without hedging <= 1.1", r99, 1.1),
                      ("extra engine requests <= 5%", extra_req, 0.05)]
        else:
            checks = [("p99 TTFT / without hedging <= 0.5", r99, 0.5),
                      ("extra engine requests <= 10%", extra_req, 0.10)]
        verdicts[name] = _checks(checks)
    ctx["notes"].append(
        "hedged: requests the gateway sent a duplicate for (its access log); won by hedge: "
        "of those, where the duplicate's stream reached the client. extra engine requests: "
        "requests the replicas received (llmsim's requests + abandoned) beyond those the client "
        "sent; tokens beyond delivered: tokens the replicas generated (llmsim's "
        "generation_tokens, aborted sequences included) beyond those the client received; "
        "prefill / hedge=0: prompt tokens prefilled per request against %s's; stalls, held: "
        "replica stalls begun and first tokens held (llmsim's stalls and parked) per round. "
        "llmsim only: the stalls are its faults." % S.HEDGE_OFF)
    return cols, vals, verdicts


def analyze_mismatch(scen, pools, ctx):
    """A drawn fleet (mismatch.py): ttft against the better of nginx
    least_conn and least_request, with the noise interval of that ratio."""
    ok = {n: p for n, p in pools.items() if p.ok}
    b = {n: p.basic() for n, p in ok.items()}
    peers = [n for n in ("nginx", "least_request") if n in b and b[n]["ttft_p99"]]
    vs_best = M.p99_ratio(S.SUBJECT, peers)

    def col(name, ref, key="ttft_p99"):
        return ratio(b[name][key], b[ref][key]) if ref in b else None
    cols = ["vs nginx", "vs haproxy", "vs least_req", "vs oracle", "e2e vs nginx"]
    vals, verdicts = {}, {}
    for name in ok:
        vals[name] = [fmt_ratio(col(name, "nginx")), fmt_ratio(col(name, "haproxy")),
                      fmt_ratio(col(name, "least_request")), fmt_ratio(col(name, "oracle")),
                      fmt_ratio(col(name, "nginx", "e2e_p99"))]
        verdicts[name] = (None, "")
    fam = {"draw": scen["fleet"]["k"], "load": scen["load"], "fleet": M.describe(scen["fleet"]),
           "peers": peers, "contenders": {}}
    for name in ok:
        fam["contenders"][name] = {k: b[name][k] for k in ("ttft_p50", "ttft_p90", "ttft_p99",
                                                            "e2e_p99", "errors", "requests",
                                                            "ttft_p99_by_round", "shares")}
    if S.SUBJECT in b and peers:
        r = ratio(b[S.SUBJECT]["ttft_p99"], min(b[n]["ttft_p99"] for n in peers))
        iv = M.noise_interval([{n: M.cells(ok[n].records) for n in [S.SUBJECT] + peers}],
                              vs_best)
        best = min(peers, key=lambda n: b[n]["ttft_p99"])
        fam.update(vs_best=r, vs_best_interval=iv, best_peer=best)
        if iv is None:
            verdicts[S.SUBJECT] = (None, "p99 TTFT / the better of nginx and least_request "
                                   "(%s): %s; too few blocks of arrivals for a noise interval"
                                   % (best, fmt_ratio(r)))
        if r is not None and iv is not None:
            fam["pass"] = iv[0] <= 1.0
            verdicts[S.SUBJECT] = (fam["pass"], "p99 TTFT / the better of nginx and least_request "
                                   "(%s): %.2f, 90%% interval %.2f-%.2f: %s" % (
                                       best, r, iv[0], iv[1],
                                       "not worse beyond noise" if fam["pass"] else
                                       "WORSE beyond noise"))
    ctx["mismatch"] = fam
    ctx["notes"].append(
        "Engines hidden from the gateway: %s. The verdict: ttft's p99 TTFT over the better of "
        "nginx least_conn and least_request, with the 90%% interval of a paired block "
        "bootstrap (blocks of %g s of scheduled arrivals per round, the same blocks for every "
        "contender, %d resamples); it fails when the interval lies wholly above 1."
        % (fam["fleet"], M.BLOCK_S, M.RESAMPLES))
    return cols, vals, verdicts


ANALYZERS = {
    "mismatch": analyze_mismatch,
    "hetero": analyze_hetero,
    "degrade": analyze_degrade,
    "crash": analyze_crash,
    "failover": analyze_failover,
    "burst": analyze_burst,
    "longshort": analyze_longshort,
    "prefix": analyze_prefix,
    "rejoin": analyze_rejoin,
    "dual": analyze_dual,
    "hedge": analyze_hedge,
}
ANALYZERS["real"] = analyze_real
ANALYZERS["moving"] = SH.analyze


# ---- one scenario's result -------------------------------------------------------------

def analyze(scen, runs_by_contender, ctx):
    """Builds the scenario's result dict (for results.json) and its tables."""
    replicas = ["r%d" % (i + 1) for i in range(len(scen["speeds"]))]
    pools = {name: Pooled(name, runs, replicas) for name, runs in runs_by_contender.items()}
    ctx.setdefault("notes", [])
    cols, extra, verdicts = ANALYZERS[scen["criteria"]](scen, pools, ctx)
    rr = pools.get("round_robin")
    orc = pools.get("oracle")
    rr_b = rr.basic() if rr and rr.ok else None
    orc_b = orc.basic() if orc and orc.ok else None
    out = {"id": scen["id"], "title": scen["title"], "what": scen["what"],
           "rate_rps": ctx["rate"], "capacity_rps": ctx["capacity"], "duration_s": ctx["duration"],
           "contenders": {}, "notes": ctx["notes"], "extra_columns": cols}
    for name, p in pools.items():
        if not p.ok:
            out["contenders"][name] = {"unavailable": p.unavailable}
            continue
        b = p.basic()
        b["ttft_p99_vs_rr"] = ratio(b["ttft_p99"], rr_b["ttft_p99"]) if rr_b else None
        b["e2e_p99_vs_rr"] = ratio(b["e2e_p99"], rr_b["e2e_p99"]) if rr_b else None
        b["ttft_p99_vs_oracle"] = ratio(b["ttft_p99"], orc_b["ttft_p99"]) if orc_b else None
        b["extra"] = dict(zip(cols, extra.get(name, [])))
        v = verdicts.get(name, (None, ""))
        b["criterion"] = {"pass": v[0], "detail": v[1]}
        b["loadavg"] = [run.get("loadavg") for run in p.runs]
        b["intake_lag_ms"] = [run.get("intake_lag_ms") for run in p.runs]
        b["foreign_rt_s"] = [run.get("foreign_rt_s") for run in p.runs]
        b["sched_lag_max_ms"] = [
            max((s.get("sched_lag_ms") or {}).get("max") or 0 for s in
                (run["summary"] if isinstance(run["summary"], list) else [run["summary"]]))
            for run in p.runs]
        b["fleet_state"] = [run.get("fleet_state") for run in p.runs]
        out["contenders"][name] = b
    subject = scen.get("subject") or {
        "prefix": "prefix_affinity", "rejoin": "prefix_affinity",
        "dual": S.SUBJECT + S.DUAL_SUFFIX, "hedge": S.HEDGE_ON}.get(scen["criteria"], S.SUBJECT)
    sv = out["contenders"].get(subject, {})
    out["subject_verdict"] = sv.get("criterion", {"pass": None, "detail": "not run"})
    for name, p in pools.items():
        for run in p.runs:
            if run.get("foreign_rt_s"):
                ctx["notes"].append(
                    "%s round %d: other real-time processes ran during the run (%s; seconds "
                    "seen), taking CPU from the fleet and the proxy." % (
                        name, run["round"], ", ".join("%s %d" % kv for kv in
                                                      sorted(run["foreign_rt_s"].items()))))
            lag = (run.get("intake_lag_ms") or {}).get("max") or 0
            if lag > 100:
                ctx["notes"].append(
                    "%s round %d: the proxy took requests in up to %.0f ms after llmload sent "
                    "them (a stalled proxy or a busy machine; load average %s)."
                    % (name, run["round"], lag, run.get("loadavg")))
    if "mismatch" in ctx:
        out["mismatch"] = ctx["mismatch"]
    if "moving" in ctx:
        out["moving"] = ctx["moving"]
    out["_pools"] = pools
    return out


def _share_str(shares, replicas):
    return "/".join("%.0f" % (100 * shares.get(n, 0)) for n in replicas)


def table_rows(res, replicas):
    head = ["contender", "n", "TTFT p50", "p90", "p99", "p99 by round", "e2e p99", "errors",
            "share % " + "/".join(replicas), "p99/rr", "p99/oracle"] + res["extra_columns"] + \
        ["criterion"]
    rows = []
    for name, c in res["contenders"].items():
        if "unavailable" in c:
            rows.append([name, "-", "n/a"] + [""] * (len(head) - 3))
            continue
        errs = c["errors"]
        nerr = sum(errs.values())
        err_s = "0" if not nerr else "%d (%s)" % (nerr, ",".join("%s %d" % kv for kv in
                                                                   sorted(errs.items())))
        crit = c["criterion"]["pass"]
        rows.append([name, str(c["requests"]), fmt_ms(c["ttft_p50"]), fmt_ms(c["ttft_p90"]),
                     fmt_ms(c["ttft_p99"]),
                     "|".join(fmt_ms(v) for v in c["ttft_p99_by_round"]),
                     fmt_ms(c["e2e_p99"]), err_s, _share_str(c["shares"], replicas),
                     fmt_ratio(c["ttft_p99_vs_rr"]), fmt_ratio(c["ttft_p99_vs_oracle"])] +
                    [c["extra"].get(k, "") for k in res["extra_columns"]] +
                    ["-" if crit is None else ("pass" if crit else "FAIL")])
    return head, rows


def text_table(head, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else \
        [len(h) for h in head]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(head, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    return "\n".join(lines)


def md_table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |")
    return "\n".join(lines)


def verdict_lines(res):
    out = []
    for name, c in res["contenders"].items():
        if "unavailable" in c:
            out.append("n/a  %s: not run: %s" % (name, (c["unavailable"] or "")[:200]))
            continue
        crit = c.get("criterion")
        if not crit or crit["pass"] is None and not crit["detail"]:
            continue
        mark = "n/a " if crit["pass"] is None else ("PASS" if crit["pass"] else "FAIL")
        out.append("%s %s: %s" % (mark, name, crit["detail"]))
    return out


def render(res, replicas, markdown=False):
    head, rows = table_rows(res, replicas)
    title = "Scenario %s: %s" % (res["id"], res["title"])
    sub = "%s. Rate %.1f req/s = %.0f%% of capacity %.1f req/s; %g s of arrivals." % (
        res["what"], res["rate_rps"], 100 * res["rate_rps"] / res["capacity_rps"],
        res["capacity_rps"], res["duration_s"])
    body = (md_table if markdown else text_table)(head, rows)
    lines = verdict_lines(res)
    if markdown:
        parts = ["### " + title, "", sub, "", body, ""]
        parts += ["- " + l for l in lines]
        parts += [""] + ["_%s_" % n for n in res["notes"]] + [""]
        return "\n".join(parts)
    parts = ["", "== " + title, sub, "", body, ""] + lines + [""] + res["notes"]
    return "\n".join(parts)


# ---- plot data and gnuplot ------------------------------------------------------------

def write_cdf(outdir, res):
    d = os.path.join(outdir, "plots", "data")
    os.makedirs(d, exist_ok=True)
    names = []
    for name, p in res["_pools"].items():
        if not p.ok:
            continue
        t = sorted(p.ttfts())
        if not t:
            continue
        path = os.path.join(d, "cdf_%s_%s.dat" % (res["id"], name))
        step = max(1, len(t) // 2000)
        with open(path, "w") as f:
            f.write("# ttft_ms cumulative_fraction (%d requests, all rounds)\n" % len(t))
            for i in range(0, len(t), step):
                f.write("%.3f %.5f\n" % (t[i], (i + 1) / len(t)))
            f.write("%.3f 1.0\n" % t[-1])
        names.append(name)
    return names


def write_shares(outdir, res, series, replicas):
    d = os.path.join(outdir, "plots", "data")
    os.makedirs(d, exist_ok=True)
    names = []
    for name, bins in series.items():
        path = os.path.join(d, "share_%s_%s.dat" % (res["id"], name))
        with open(path, "w") as f:
            f.write("t " + " ".join(replicas) + "\n")
            for i, b in enumerate(bins):
                tot = sum(b.values())
                if tot == 0:
                    continue
                f.write("%.1f " % (i + 0.5) + " ".join("%.4f" % (b[n] / tot) for n in replicas)
                        + "\n")
        names.append(name)
    return names


def gnuplot(script, outdir, mode, sid, names, title, extra=""):
    """Renders plots/<mode>_<sid>.svg and .png; returns the paths made (or [] on failure)."""
    made = []
    for term in ("svg", "png"):
        out = os.path.join(outdir, "plots", "%s_%s.%s" % (mode, sid, term))
        args = ["gnuplot", "-c", script, mode, term, out, os.path.join(outdir, "plots", "data"),
                sid, " ".join(names), title, extra]
        try:
            r = subprocess.run(args, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return made
        if r.returncode == 0 and os.path.exists(out):
            made.append(out)
        else:
            print("gnuplot failed for %s: %s" % (out, r.stderr.decode()[-400:]))
    return made


# ---- the mismatch family over its draws -----------------------------------------------

def mismatch_summary(results, pools_by_id):
    """Per-draw ratios and the pooled verdict of the mismatch family.

    results: the scenarios' results (with "mismatch"); pools_by_id: each
    scenario's pools (report.analyze()'s _pools). Returns (text, markdown,
    data). Pooled: every draw's requests of a contender together, per load;
    its interval resamples blocks within each draw (stratified)."""
    data = {"draws": [], "pooled": {}, "block_s": M.BLOCK_S, "resamples": M.RESAMPLES}
    names = ["ttft", "nginx", "haproxy", "least_request", "oracle"]
    for sid, res in results.items():
        fam = res.get("mismatch")
        if not fam:
            continue
        c = fam["contenders"]
        ng = (c.get("nginx") or {}).get("ttft_p99")
        ng_e = (c.get("nginx") or {}).get("e2e_p99")
        t = c.get(S.SUBJECT) or {}
        iv = fam.get("vs_best_interval")
        row = {"id": sid, "draw": fam["draw"], "load": fam["load"], "fleet": fam["fleet"],
               "requests": t.get("requests"),
               "ttft_p99": {n: (c.get(n) or {}).get("ttft_p99") for n in names},
               "vs_nginx": {n: ratio((c.get(n) or {}).get("ttft_p99"), ng) for n in names},
               "e2e_vs_nginx": ratio(t.get("e2e_p99"), ng_e), "vs_best": fam.get("vs_best"),
               "vs_best_interval": iv, "best_peer": fam.get("best_peer"),
               "pass": fam.get("pass")}
        data["draws"].append(row)
    loads = sorted({r["load"] for r in data["draws"]})
    for load in loads + ["all"]:
        ids = [r["id"] for r in data["draws"] if load == "all" or r["load"] == load]
        pools = [pools_by_id[i] for i in ids if i in pools_by_id]
        if not pools:
            continue

        def strata(field):
            return [{n: M.cells(ps[n].records, field) for n in (S.SUBJECT, "nginx")
                     if n in ps and ps[n].ok} for ps in pools]
        ttft_strata, e2e_strata = strata("ttft_ms"), strata("e2e_ms")
        out = {"draws": len(ids), "contenders": {}}
        for n in names:
            recs = [rec for ps in pools if n in ps and ps[n].ok for rec in ps[n].records]
            if not recs:
                continue
            t = [r["ttft_ms"] for r in recs if r.get("ttft_ms") is not None]
            out["contenders"][n] = {"requests": len(recs), "ttft_p50": M._pct(t, 50),
                                    "ttft_p90": M._pct(t, 90), "ttft_p99": M._pct(t, 99),
                                    "e2e_p99": M._pct([r["e2e_ms"] for r in recs
                                                       if r.get("e2e_ms") is not None
                                                       and r.get("error") is None], 99)}
        c = out["contenders"]
        ttft_r = ratio((c.get(S.SUBJECT) or {}).get("ttft_p99"), (c.get("nginx") or {}).get("ttft_p99"))
        e2e_r = ratio((c.get(S.SUBJECT) or {}).get("e2e_p99"), (c.get("nginx") or {}).get("e2e_p99"))
        stat = M.p99_ratio(S.SUBJECT, ["nginx"])
        # the yardstick: what exact knowledge reaches on these fleets (end to
        # end, equal speeds leave a router nothing to gain)
        out["oracle_vs_nginx"] = ratio((c.get("oracle") or {}).get("ttft_p99"),
                                       (c.get("nginx") or {}).get("ttft_p99"))
        out["oracle_e2e_vs_nginx"] = ratio((c.get("oracle") or {}).get("e2e_p99"),
                                           (c.get("nginx") or {}).get("e2e_p99"))
        out.update(vs_nginx=ttft_r, e2e_vs_nginx=e2e_r,
                   vs_nginx_interval=M.noise_interval(ttft_strata, stat),
                   e2e_vs_nginx_interval=M.noise_interval(e2e_strata, stat))
        per = [r for r in data["draws"] if r["id"] in ids]
        gm = [r["vs_nginx"].get(S.SUBJECT) for r in per]
        gm = [v for v in gm if v]
        out["geomean_vs_nginx"] = math.exp(sum(math.log(v) for v in gm) / len(gm)) if gm else None
        # end to end alike: each draw weighs the same, where the pooled p99 is
        # the slowest fleets' tail (NOTES.md 50: one draw holds more answers
        # over 0.7x nginx's pooled p99 than the pooled p99 allows)
        ge = [v for v in (r["e2e_vs_nginx"] for r in per) if v]
        out["geomean_e2e_vs_nginx"] = (math.exp(sum(math.log(v) for v in ge) / len(ge))
                                       if ge else None)
        judged = [r["pass"] for r in per if r["pass"] is not None]
        out["floor_held"] = sum(1 for v in judged if v)
        out["floor_judged"] = len(judged)
        out["pass"] = (None if ttft_r is None or e2e_r is None or not judged else
                       ttft_r <= 0.5 and e2e_r <= 0.7 and all(judged))
        data["pooled"][str(load)] = out
    return _mismatch_tables(data, names, False), _mismatch_tables(data, names, True), data


def _iv(iv):
    return "-" if not iv else "%.2f-%.2f" % (iv[0], iv[1])


def _mismatch_tables(data, names, markdown):
    head = ["draw", "load", "n"] + ["p99 %s" % n for n in names] + \
        ["ttft / nginx", "haproxy / nginx", "least_req / nginx", "oracle / nginx",
         "ttft / best", "90% interval", "e2e ttft / nginx", "floor"]
    rows = []
    for r in sorted(data["draws"], key=lambda r: (r["draw"], r["load"])):
        v = r["vs_nginx"]
        rows.append(["m%d" % r["draw"], "%d%%" % round(100 * r["load"]), str(r["requests"] or "-")] +
                    [fmt_ms(r["ttft_p99"].get(n)) for n in names] +
                    [fmt_ratio(v.get("ttft")), fmt_ratio(v.get("haproxy")),
                     fmt_ratio(v.get("least_request")), fmt_ratio(v.get("oracle")),
                     "%s (%s)" % (fmt_ratio(r["vs_best"]), r["best_peer"] or "-"),
                     _iv(r["vs_best_interval"]), fmt_ratio(r["e2e_vs_nginx"]),
                     "-" if r["pass"] is None else ("held" if r["pass"] else "LOST")])
    phead = ["pooled", "draws", "contender", "n", "TTFT p50", "p90", "p99", "e2e p99"]
    prow = []
    for load, p in data["pooled"].items():
        label = "all" if load == "all" else "%d%%" % round(100 * float(load))
        for n, c in p["contenders"].items():
            prow.append([label, str(p["draws"]), n, str(c["requests"]), fmt_ms(c["ttft_p50"]),
                         fmt_ms(c["ttft_p90"]), fmt_ms(c["ttft_p99"]), fmt_ms(c["e2e_p99"])])
    verdicts = []
    for load, p in data["pooled"].items():
        label = "both loads" if load == "all" else "%d%% load" % round(100 * float(load))
        mark = "n/a " if p["pass"] is None else ("PASS" if p["pass"] else "FAIL")
        verdicts.append(
            "%s %s, %d draws: ttft p99 TTFT %s x nginx (90%% interval %s; geometric mean of the "
            "draws' ratios %s), e2e p99 %s x nginx (%s; geometric mean %s); floor (not worse "
            "than the better of nginx and least_request beyond noise) held on %d of %d; the "
            "oracle: %s x, e2e %s x"
            % (mark, label, p["draws"], fmt_ratio(p["vs_nginx"]), _iv(p["vs_nginx_interval"]),
               fmt_ratio(p["geomean_vs_nginx"]), fmt_ratio(p["e2e_vs_nginx"]),
               _iv(p["e2e_vs_nginx_interval"]), fmt_ratio(p.get("geomean_e2e_vs_nginx")),
               p["floor_held"], p["floor_judged"],
               fmt_ratio(p.get("oracle_vs_nginx")), fmt_ratio(p.get("oracle_e2e_vs_nginx"))))
    fleets = ["m%d: %s" % (r["draw"], r["fleet"]) for r in
              sorted({r["draw"]: r for r in data["draws"]}.values(), key=lambda r: r["draw"])]
    note = ("Criteria: on every draw, ttft's p99 TTFT not worse than the better of nginx "
            "least_conn and least_request beyond noise (floor: held when the 90%% interval of "
            "that ratio reaches 1 or below); pooled per load, ttft's p99 TTFT <= 0.5x nginx's "
            "and its e2e p99 <= 0.7x nginx's. Intervals: paired block bootstrap, blocks of %g s "
            "of scheduled arrivals per round (stratified by draw when pooled), %d resamples."
            % (data["block_s"], data["resamples"]))
    if markdown:
        parts = ["### Mismatch family: per draw", "", md_table(head, rows), "",
                 "### Mismatch family: pooled", "", md_table(phead, prow), ""]
        parts += ["- " + v for v in verdicts] + ["", "Fleets (hidden from the gateway):", ""]
        parts += ["- " + f for f in fleets] + ["", "_%s_" % note, ""]
        return "\n".join(parts)
    parts = ["", "== Mismatch family: per draw", "", text_table(head, rows), "",
             "== Mismatch family: pooled", "", text_table(phead, prow), ""]
    return "\n".join(parts + verdicts + ["", "Fleets:"] + fleets + ["", note])
