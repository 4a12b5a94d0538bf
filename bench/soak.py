#!/usr/bin/env python3
"""Soak test: llmgate in front of a 4-replica llmsim fleet, driven by llmload at
~70% of the fleet's measured capacity for a long time, with faults injected on
a schedule (a slowdown, a 503 window, a crash and restart, a stall, streams
closed mid-way, a 429 window). Reports requests sent, ok, lost, cut and
retried, and the gateway's RSS at the start, every minute and at the end.

Not a CI test: see bench/SOAK.md. Standard library only.

  bench/soak.py --minutes 30              # the full run
  bench/soak.py --minutes 2 --build build # a quick check of the script
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def log(msg):
    print("[soak %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Proc:
    def __init__(self, argv, name, out_dir):
        self.name = name
        self.out = open(os.path.join(out_dir, name + ".log"), "w")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        self.ready = threading.Event()
        self.ready_line = None
        self.ready_re = None
        self.t = threading.Thread(target=self._pump, daemon=True)

    def wait_ready(self, pattern, timeout=30):
        self.ready_re = re.compile(pattern)
        self.t.start()
        if not self.ready.wait(timeout):
            raise SystemExit("%s did not start; see its log" % self.name)
        return self.ready_line

    def _pump(self):
        for raw in self.p.stdout:
            line = raw.decode("utf-8", "replace")
            self.out.write(line)
            self.out.flush()
            if not self.ready.is_set() and self.ready_re.search(line):
                self.ready_line = self.ready_re.search(line)
                self.ready.set()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
                self.p.wait(timeout)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.p.wait(5)
        return self.p.returncode


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def sim_control(port, obj):
    req = urllib.request.Request("http://127.0.0.1:%d/sim/control" % port,
                                 data=json.dumps(obj).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        r.read()


class Fleet:
    def __init__(self, args, out_dir):
        self.args = args
        self.out_dir = out_dir
        self.sims = {}
        self.ports = {}
        self.restarts = 0

    def sim_argv(self, name, port):
        a = self.args
        return [os.path.join(a.build, "llmsim"), "--listen", "127.0.0.1:%d" % port,
                "--name", name, "--model", "m", "--slots", str(a.slots),
                "--decode-ms", str(a.decode_ms), "--seed", str(hash(name) & 0xffff), "--quiet"]

    def start(self, name, port=0):
        if name in self.sims:
            self.sims[name].out.close()
        p = Proc(self.sim_argv(name, port), "%s-%d" % (name, self.restarts), self.out_dir)
        m = p.wait_ready(r"llmsim ready .*listen=[^ ]*:(\d+)")
        self.sims[name] = p
        self.ports[name] = int(m.group(1))
        return self.ports[name]

    def stop(self):
        for p in self.sims.values():
            p.stop()


def llmload(args, out_dir, gw, name, extra):
    argv = [os.path.join(args.build, "llmload"), "--url", "http://127.0.0.1:%d" % gw,
            "--model", "m", "--max-tokens", str(args.max_tokens),
            "--prompt-bytes", str(args.prompt_bytes), "--timeout", "120", "--quiet",
            "--replica-header", "X-Llmsim-Replica",
            "--json", os.path.join(out_dir, name + ".json"),
            "--log", os.path.join(out_dir, name + "-requests.jsonl")] + extra
    with open(os.path.join(out_dir, name + ".stderr"), "w") as err:
        rc = subprocess.run(argv, stdout=err, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise SystemExit("llmload %s exited %d; see %s.stderr" % (name, rc, name))
    with open(os.path.join(out_dir, name + ".json")) as f:
        return json.load(f)


def schedule(minutes):
    """(offset s, replica, action, argument, what) in order; windows scale with the run."""
    t = minutes * 60.0
    w = max(10.0, 0.05 * t)  # length of a fault window
    return [
        (0.10 * t, "r1", "fault", "slow@0:4:%g" % (2 * w), "r1 4x slower for %gs" % (2 * w)),
        (0.25 * t, "r2", "fault", "status@0:503:%g:5" % w, "r2 answers 503 for %gs" % w),
        (0.40 * t, "r3", "crash", None, "r3 crashes (restarted after %gs)" % (w / 2)),
        (0.40 * t + w / 2, "r3", "restart", None, "r3 restarted"),
        (0.55 * t, "r4", "fault", "stall@0:20", "r4 stalls for 20s"),
        (0.70 * t, "r1", "fault", "close-after-tokens:10", "r1 closes streams after 10 tokens"),
        (0.70 * t + w, "r1", "clear", None, "r1 back to normal"),
        (0.85 * t, "r2", "fault", "status@0:429:%g:2" % w, "r2 answers 429 for %gs" % w),
    ]


def run_faults(fleet, minutes, t0, stop, events):
    for at, name, action, arg, what in schedule(minutes):
        while time.monotonic() - t0 < at:
            if stop.wait(0.2):
                return
        try:
            if action == "fault":
                sim_control(fleet.ports[name], {"fault": arg})
            elif action == "clear":
                sim_control(fleet.ports[name], {"clear_faults": True})
            elif action == "crash":
                try:
                    sim_control(fleet.ports[name], {"fault": "crash@0"})
                except OSError:
                    pass  # it died before answering: that is the point
                fleet.sims[name].p.wait(10)
            elif action == "restart":
                fleet.restarts += 1
                fleet.start(name, fleet.ports[name])
            events.append({"t_s": round(time.monotonic() - t0, 1), "event": what})
            log("fault: " + what)
        except (OSError, subprocess.TimeoutExpired, SystemExit) as e:
            events.append({"t_s": round(time.monotonic() - t0, 1), "event": what,
                           "failed": str(e)})
            log("fault %s failed: %s" % (what, e))


def read_access_log(path, skip_lines):
    out = []
    with open(path) as f:
        for i, line in enumerate(f):
            if i >= skip_lines and line.strip():
                out.append(json.loads(line))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--out", default=None, help="output folder (default: soak-<time> in /tmp)")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--decode-ms", type=float, default=15.0)
    ap.add_argument("--max-tokens", default="16-96")
    ap.add_argument("--prompt-bytes", default="256")
    ap.add_argument("--load", type=float, default=0.7, help="share of measured capacity")
    ap.add_argument("--calibrate", type=float, default=20.0, help="seconds of closed-loop load")
    ap.add_argument("--rate", type=float, default=None, help="skip calibration: requests/s")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    out_dir = args.out or "/tmp/soak-%s" % time.strftime("%Y%m%d-%H%M%S")
    os.makedirs(out_dir, exist_ok=True)
    log("output in %s" % out_dir)

    fleet = Fleet(args, out_dir)
    gwp = None
    try:
        for i in range(args.replicas):
            fleet.start("r%d" % (i + 1))
        conf = {
            "listen": "127.0.0.1:0", "workers": args.workers, "log_level": "warn",
            "access_log": {"path": os.path.join(out_dir, "access.log"), "flush": "500ms"},
            "timeouts": {"upstream_connect": "1s", "first_byte": "30s", "stream_idle": "10s",
                         "queue": "20s"},
            "limits": {"queue_length": 4096},
            "routing": {"retry": {"attempts": 2}},
            "backends": [{"name": n, "url": "http://127.0.0.1:%d" % p, "models": ["m"],
                          "max_inflight": 2 * args.slots}
                         for n, p in sorted(fleet.ports.items())],
        }
        conf_path = os.path.join(out_dir, "llmgate.json")
        with open(conf_path, "w") as f:
            json.dump(conf, f, indent=2)
        gwp = Proc([os.path.join(args.build, "llmgate"), "-c", conf_path], "llmgate", out_dir)
        gw = int(gwp.wait_ready(r"llmgate ready .*listen=[^ ,]*:(\d+)").group(1))
        log("gateway pid %d on port %d, replicas %s" % (gwp.p.pid, gw, fleet.ports))

        rate = args.rate
        calib = None
        if rate is None:
            log("calibrating: %d streams at once for %gs" % (args.replicas * args.slots,
                                                               args.calibrate))
            calib = llmload(args, out_dir, gw, "calibrate",
                            ["--concurrency", str(args.replicas * args.slots),
                             "--duration", str(args.calibrate)])
            rate = round(args.load * calib["ok_rps"], 2)
            log("capacity %.1f req/s; soak at %.1f req/s" % (calib["ok_rps"], rate))
        time.sleep(1.5)  # the calibration's log lines are flushed
        skip = sum(1 for _ in open(os.path.join(out_dir, "access.log")))

        rss = [{"t_s": 0, "rss_kib": rss_kib(gwp.p.pid)}]
        load0 = os.getloadavg()
        stop = threading.Event()
        events = []
        t0 = time.monotonic()

        def sample():
            while not stop.wait(60):
                rss.append({"t_s": round(time.monotonic() - t0), "rss_kib": rss_kib(gwp.p.pid)})
                log("minute %d: gateway RSS %s KiB" % (len(rss) - 1, rss[-1]["rss_kib"]))
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        faults = threading.Thread(target=run_faults,
                                  args=(fleet, args.minutes, t0, stop, events), daemon=True)
        faults.start()
        log("soak: %g minutes at %.1f req/s" % (args.minutes, rate))
        res = llmload(args, out_dir, gw, "soak",
                      ["--rate", str(rate), "--duration", "%ds" % int(args.minutes * 60)])
        stop.set()
        faults.join(30)
        time.sleep(1.5)
        rss.append({"t_s": round(time.monotonic() - t0), "rss_kib": rss_kib(gwp.p.pid)})
        load1 = os.getloadavg()

        lines = read_access_log(os.path.join(out_dir, "access.log"), skip)
        statuses = {}
        errors = {}
        for r in lines:
            statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
            if r["error"]:
                errors[r["error"]] = errors.get(r["error"], 0) + 1
        retried = [r for r in lines if r["attempt_count"] > 1]
        # a response that started and did not end cleanly (a retried request
        # that ended well keeps the reason of its failed attempt in "error")
        cut_reasons = {"upstream_closed_mid_response", "upstream_reset", "stream_idle_timeout",
                       "upstream_protocol_error", "total_timeout", "client_stalled"}
        cut_by_gw = [r for r in lines if 200 <= r["status"] < 300 and r["error"] in cut_reasons]
        e = res["errors"]
        summary = {
            "minutes": args.minutes,
            "rate_rps": rate,
            "capacity_rps": calib["ok_rps"] if calib else None,
            "client": {
                "sent": res["requests"],
                "ok": res["ok"],
                "lost": e.get("connect", 0) + e.get("timeout", 0),
                "cut": e.get("cut", 0),
                "http_errors": e.get("status", 0),
                "invalid": e.get("invalid", 0),
                "status_codes": res["status_codes"],
                "ttft_ms": res.get("ttft_ms"),
            },
            "gateway": {
                "requests_logged": len(lines),
                "retried_requests": len(retried),
                "extra_attempts": sum(r["attempt_count"] - 1 for r in retried),
                "retried_ok": sum(1 for r in retried if r["status"] == 200),
                "cut_streams": len(cut_by_gw),
                "statuses": statuses,
                "errors": errors,
            },
            "rss_kib": rss,
            "rss_start_kib": rss[0]["rss_kib"],
            "rss_end_kib": rss[-1]["rss_kib"],
            "faults": events,
            "loadavg_start": load0,
            "loadavg_end": load1,
            "replica_restarts": fleet.restarts,
        }
        with open(os.path.join(out_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        c, g = summary["client"], summary["gateway"]
        print("\nsoak: %g min at %.1f req/s (capacity %s req/s), load average %.2f -> %.2f"
              % (args.minutes, rate, summary["capacity_rps"], load0[0], load1[0]))
        print("client: sent %d, ok %d, lost %d, cut %d, http errors %d %s"
              % (c["sent"], c["ok"], c["lost"], c["cut"], c["http_errors"], c["status_codes"]))
        print("gateway: %d logged, %d retried (%d extra attempts, %d then ok), %d cut; errors %s"
              % (g["requests_logged"], g["retried_requests"], g["extra_attempts"],
                 g["retried_ok"], g["cut_streams"], g["errors"]))
        print("gateway RSS: %s KiB at start, %s KiB at the end; per minute: %s"
              % (summary["rss_start_kib"], summary["rss_end_kib"],
                 [s["rss_kib"] for s in rss]))
        print("summary: %s" % os.path.join(out_dir, "summary.json"))
    finally:
        if gwp is not None:
            rc = gwp.stop()
            if rc != 0:
                log("gateway exit status %s" % rc)
        fleet.stop()


if __name__ == "__main__":
    sys.exit(main())
