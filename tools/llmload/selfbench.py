#!/usr/bin/env python3
"""Self-benchmark of llmload: throughput and timing error.

Usage: python3 tools/llmload/selfbench.py [BUILD_DIR] [--no-pcap] [--realtime]

1. Throughput: llmload against llmload-fastsse (a C endpoint that streams
   8 chunks per request at once), closed loop (64 slots) and open loop at
   2,000 and 5,000 requests/s. Prints achieved requests/s and how late
   llmload started requests against their schedule (sched_lag).
2. Timing error: llmload against llmload-fastsse --ttft-ms 5 while tcpdump
   records loopback with nanosecond stamps. For every request, the wire TTFT
   is the time from the request's last client->server segment to the first
   server->client segment holding content ("content":"tok); requests are
   matched by the "Request N." text llmload puts at the start of each prompt.
   The error is llmload's ttft_send minus the wire TTFT (p50, p99, max), at a
   light load and at 2,000 requests/s. Needs root and tcpdump (apt-get install
   tcpdump); --no-pcap skips it. --realtime passes llmload --realtime (SCHED_FIFO),
   which shows how much of the error is the CPU being taken by others.
Standard library only; every process it starts is stopped by PID.
"""

import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time


EXTRA = []    # ["--realtime"] with --realtime


def start_fastsse(build, *args):
    p = subprocess.Popen([os.path.join(build, "llmload-fastsse")] + list(args),
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.search(r"listen=[^ ]*:(\d+)", line)
    if not m:
        p.kill()
        raise SystemExit("llmload-fastsse did not start: %r" % line)
    return p, int(m.group(1))


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        out = p.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        p.kill()
        out = p.communicate()[0]
    return out.strip()


def llmload(build, port, tmp, *args):
    js = os.path.join(tmp, "s.json")
    argv = [os.path.join(build, "llmload"), "--url", "http://127.0.0.1:%d" % port,
            "--model", "m", "--quiet", "--json", js] + EXTRA + [str(a) for a in args]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    with open(js) as f:
        return json.load(f)


def throughput(build, tmp):
    p, port = start_fastsse(build, "--tokens", "8")
    try:
        print("== throughput against llmload-fastsse (8 chunks per stream, no delay)")
        s = llmload(build, port, tmp, "--concurrency", 64, "--requests", 100000)
        print("closed loop, 64 slots: %d requests, %d ok, %.0f req/s, %.0f tokens/s" % (
            s["requests"], s["ok"], s["rps"], s["tokens_per_s"]))
        for rate in (2000, 5000):
            s = llmload(build, port, tmp, "--rate", rate, "--duration", 5)
            lag = s["sched_lag_ms"]
            print("open loop %d/s for 5 s: %d requests, %d ok, achieved %.0f req/s; "
                  "sched_lag p50 %.3f ms p99 %.3f ms max %.3f ms; ttft_send p50 %.3f ms "
                  "p99 %.3f ms" % (rate, s["requests"], s["ok"], s["rps"], lag["p50"],
                                   lag["p99"], lag["max"], s["ttft_send_ms"]["p50"],
                                   s["ttft_send_ms"]["p99"]))
    finally:
        print("server:", stop(p))


def read_pcap(path):
    """Yields (t_ns, sport, dport, payload) for TCP segments with payload."""
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    nano = magic == 0xa1b23c4d
    linktype = struct.unpack("<I", data[20:24])[0]
    skip = {1: 14, 113: 16, 276: 20, 0: 4}.get(linktype)
    if skip is None:
        raise SystemExit("unsupported pcap link type %d" % linktype)
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        pkt = data[off + 16:off + 16 + incl]
        off += 16 + incl
        ip = pkt[skip:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack("!H", ip[2:4])[0]
        tcp = ip[ihl:]
        sport, dport = struct.unpack("!HH", tcp[:4])
        doff = (tcp[12] >> 4) * 4
        plen = tot - ihl - doff
        if plen <= 0:
            continue
        t = sec * 1_000_000_000 + (frac if nano else frac * 1000)
        yield t, sport, dport, tcp[doff:]


def wire_ttft(pcap, port):
    """Yields (request index, wire time of its last byte, wire time of its
    first content), CLOCK_REALTIME ns, from the capture."""
    flows = {}
    for t, sport, dport, payload in read_pcap(pcap):
        if dport == port:
            st = flows.setdefault(sport, {"req": None, "t_req": None, "done": True})
            m = re.search(rb"Request (\d+)\. ", payload)
            if m:
                st.update(req=int(m.group(1)), t_req=t, done=False)
            elif not st["done"]:
                st["t_req"] = t      # a later segment of the same request
        elif sport == port:
            st = flows.get(dport)
            if st and not st["done"] and b'"content":"tok' in payload:
                st["done"] = True
                yield st["req"], (st["t_req"], t)


def timing_error(build, tmp):
    """A gap of 1 ms is the hard case: if llmload is off the CPU for longer,
    the kernel merges the waiting segments and keeps only the newest receive
    time, so the first token looks late. Engines' gaps are tens of ms."""
    for itl in ("1", "20"):
        timing_run(build, tmp, itl)


def timing_run(build, tmp, itl):
    print("== timing error: llmload ttft_send minus the wire TTFT seen by tcpdump "
          "(first token after 5 ms, then %s ms apart)" % itl)
    p, port = start_fastsse(build, "--tokens", "4", "--ttft-ms", "5", "--itl-ms", itl)
    try:
        for rate, dur in ((100, 5), (2000, 5)):
            pcap = os.path.join(tmp, "lo.pcap")
            log = os.path.join(tmp, "req.jsonl")
            td = subprocess.Popen(["tcpdump", "-i", "lo", "-s", "600", "-w", pcap, "-U",
                                   "--time-stamp-precision=nano", "-B", "65536",
                                   "tcp port %d" % port],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(1.0)
            s = llmload(build, port, tmp, "--rate", rate, "--duration", dur, "--log", log)
            time.sleep(0.5)
            td.send_signal(signal.SIGINT)
            err = td.communicate(timeout=10)[1].decode()
            dropped = re.search(r"(\d+) packets dropped by kernel", err)
            wire = dict(wire_ttft(pcap, port))
            t0 = s["start_unix_ns"]
            total, send, read = [], [], []
            with open(log) as f:
                for ln in f:
                    r = json.loads(ln)
                    if r["i"] not in wire or r["ttft_send_ms"] is None:
                        continue
                    w_req, w_first = wire[r["i"]]
                    total.append(r["ttft_send_ms"] - (w_first - w_req) / 1e6)
                    # llmload's stamps on the wall clock (t0 + offsets) against
                    # the capture: how late each stamp was taken.
                    t_send = t0 + r["t_send_ms"] * 1e6
                    send.append((t_send - w_req) / 1e6)
                    read.append((t_send + r["ttft_send_ms"] * 1e6 - w_first) / 1e6)
            if not total:
                print("rate %d: no request matched in the capture" % rate)
                continue
            print("rate %d/s: %d of %d requests matched (%s packets dropped by tcpdump), "
                  "llmload ttft_send p50 %.3f ms" % (
                      rate, len(total), s["requests"], dropped.group(1) if dropped else "?",
                      s["ttft_send_ms"]["p50"]))
            for name, v in (("ttft_send error", total), ("  send stamp late by", send),
                            ("  read stamp late by", read)):
                v.sort()
                q = lambda x: v[min(len(v) - 1, int(x * len(v)))]  # noqa: E731
                print("  %-22s ms: min %7.3f  p50 %7.3f  p90 %7.3f  p99 %7.3f  max %7.3f" % (
                    name, v[0], q(0.5), q(0.9), q(0.99), v[-1]))
    finally:
        print("server:", stop(p))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--realtime" in sys.argv:
        EXTRA.append("--realtime")
    build = args[0] if args else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")
    with tempfile.TemporaryDirectory(prefix="llmload-bench-") as tmp:
        throughput(build, tmp)
        if "--no-pcap" not in sys.argv:
            timing_error(build, tmp)


if __name__ == "__main__":
    main()
