#!/usr/bin/env python3
"""How long a slow or never-ending request body holds a gateway connection.

Usage:
  python3 bench/slow_clients.py [--build build] [--ref-build DIR] [--cap 90]

Starts llmsim and llmgate (the default timeouts and limits: nothing in the
config about the body phase), then runs each trigger on its own connection,
all at once: a head with Expect: 100-continue, then the body as the trigger
sends it. It prints, per trigger, the status the gateway answered and how
long the connection was held from the gateway's 100 Continue to its close,
or "open" when it was still open at --cap seconds. With --ref-build the same
runs against another build's llmgate (before/after in one run).

Triggers: a declared 16 MiB body, then a byte every 25 s; a chunked body's
last chunk, then a trailer field a byte a second, or 200 KB of it at once;
a chunk extension a byte a second, or 200 KB of it at once.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 2}).encode()
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"

# name: (head, first bytes, then one byte every N seconds (0: none), that byte)
TRIGGERS = {
    "Content-Length 16 MiB, a byte every 25 s": (
        HEAD + b"Content-Length: 16777216\r\n\r\n", b"", 25.0, b" "),
    "trailer, a byte a second": (
        CHUNKED, b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\nX-Pad: ", 1.0, b"a"),
    "trailer, 200 KB at once": (
        CHUNKED, b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\nX-Pad: " + b"a" * 200000, 0, b""),
    "chunk extension, a byte a second": (CHUNKED, b"1;", 1.0, b"a"),
    "chunk extension, 200 KB at once": (CHUNKED, b"1;" + b"a" * 200000, 0, b""),
}


def start(argv, pattern):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in p.stdout:
        m = re.search(pattern, line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, int(m.group(1))
    raise RuntimeError("%s exited: %s" % (argv[0], p.wait()))


def trigger(port, spec, cap, out, name):
    head, first, every, byte = spec
    s = socket.create_connection(("127.0.0.1", port), timeout=cap + 10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(head)
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(4096)
    t0 = time.monotonic()
    stop = threading.Event()

    def send():
        try:
            s.sendall(first)
            while every and not stop.wait(every):
                s.sendall(byte)
        except OSError:
            pass
    threading.Thread(target=send, daemon=True).start()
    got = b""
    closed = False
    try:
        while time.monotonic() - t0 < cap:
            s.settimeout(max(0.05, cap - (time.monotonic() - t0)))
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            got += chunk
    except socket.timeout:
        pass
    except OSError:
        closed = True
    held = time.monotonic() - t0
    stop.set()
    s.close()
    m = re.match(rb"HTTP/1\.1 (\d+)", got)
    out[name] = (m.group(1).decode() if m else "-", "%.2f s" % held if closed else "open")


def run(build, cap):
    sim, sport = start([os.path.join(build, "llmsim"), "--listen", "127.0.0.1:0", "--quiet"],
                       r"llmsim ready .*listen=[^ ]*:(\d+)")
    conf = "/tmp/slow_clients_%d.json" % os.getpid()
    with open(conf, "w") as f:
        json.dump({"listen": "127.0.0.1:0", "workers": 1, "log_level": "error",
                   "access_log": False,
                   "backends": [{"name": "r1", "url": "http://127.0.0.1:%d" % sport,
                                 "models": ["m"]}]}, f)
    gw, gport = start([os.path.join(build, "llmgate"), "-c", conf],
                      r"llmgate ready .*listen=[^ ,]*:(\d+)")
    out = {}
    try:
        threads = [threading.Thread(target=trigger, args=(gport, spec, cap, out, name))
                   for name, spec in TRIGGERS.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gw.kill()
        sim.kill()
        os.unlink(conf)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--ref-build")
    ap.add_argument("--cap", type=float, default=90.0)
    a = ap.parse_args()
    builds = [("build", a.build)] + ([("ref-build", a.ref_build)] if a.ref_build else [])
    results = {label: run(path, a.cap) for label, path in builds}
    print("%-42s" % "trigger" + "".join("%-24s" % label for label, _ in builds))
    for name in TRIGGERS:
        print("%-42s" % name + "".join("%-24s" % ("%s after %s" % results[lb][name]
                                                    if results[lb][name][1] != "open"
                                                    else "open at %.0f s" % a.cap)
                                       for lb, _ in builds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
