#!/usr/bin/env python3
"""Proxy benchmark: llmgate against a direct connection, nginx and HAProxy.

Usage:
  python3 bench/proxy/run.py [--quick] [--rounds N] [--workers 1,2]
                             [--only rps,stream,memory,large,log,bodymem] [--out DIR]
                             [--build DIR] [--contenders direct,nginx,haproxy,llmgate]
                           [--ref-build DIR] [--sched fifo|other]

Every contender is started fresh for every trial, and trials are interleaved
(direct nginx haproxy llmgate, direct nginx haproxy llmgate, ...) over the
rounds; tables show medians over the rounds and ratios measured within the
same run. Absolute numbers are loopback numbers on whatever machine runs it:
compare the ratios. See bench/proxy/README.md for what each measure does.

Measures:
  rps     small requests (~300-byte chat body, ~500-byte JSON answer) over
          keep-alive: wrk at 64 and 512 connections (requests/s, proxy CPU per
          request), then an open-loop run at half the slowest proxy's rate
          for the latency each proxy adds over direct (p50, p99)
  stream  SSE relay: per-event delay (backend stamp to kernel receive time at
          the client) p50/p99, and proxy CPU seconds per 100k events
  memory  proxy RSS per idle keep-alive connection (10,000) and per active
          stream (5,000, from llmsim), both held at once
  large   100 KiB and 1 MiB request bodies: requests/s and added latency
  log     the access log's cost: requests/s with it off and on
  defaults  what a user gets: llmgate with its defaults (ttft, access log to a
          file, workers auto) against nginx and HAProxy with their access logs
          on (a JSON line of the same fields), beside the three without logs
          (llmgate "access_log": false): requests/s, CPU per request (utime +
          stime), p99 (wrk) at 64 and 512 connections, and the streaming
          relay's per-event delay
  bodymem peak RSS while 1, then 64 clients send a 16 MiB body each at once, a
          body of numbers nobody reads ({"model":"m","x":[0,0,...]}); nginx
          holds bodies in memory (client_body_buffer_size 16m)

Needs: a build (cmake --build build), nginx, haproxy and wrk
(tools/install-deps.sh --bench); root, or a hard RLIMIT_NOFILE of 40,000+,
for the memory measure. Standard library only; it stops every process it
starts by PID (each runs in its own process group).
"""

import argparse
import json
import os
import platform
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROXIES = ["nginx", "haproxy", "llmgate"]
# relay: pbench's TCP pass-through (read, write, no HTTP): the floor of a proxy
ALL_CONTENDERS = ["direct", "relay"] + PROXIES
ALL_MEASURES = ["rps", "stream", "memory", "large", "log", "defaults", "bodymem"]
# File descriptors a process may open: raised to 2^17 where allowed (root with
# CAP_SYS_RESOURCE), else the hard limit we were given.
NOFILE = 1 << 17
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
except (ValueError, OSError):
    NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
# HAProxy reserves two descriptors per connection (client and server side)
HAPROXY_MAXCONN = min(100000, (NOFILE - 100) // 2)
ARGS = None
BUILD = None
OUT = None


# ---- processes ----------------------------------------------------------------

def _preexec():
    os.setsid()
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


class Proc:
    """A child in its own process group; output to a file in OUT (or a pipe)."""

    def __init__(self, argv, name, cpus=None, pipe=False, stdin=False, stdout_path=None):
        argv = pin(argv, cpus)
        self.name = name
        self.log_path = os.path.join(OUT, "logs", "%s.log" % name)
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log.write(("$ %s\n" % " ".join(argv)).encode())
        self._log.flush()
        self._out = open(stdout_path, "wb") if stdout_path else None
        self.p = subprocess.Popen(
            argv, stdout=subprocess.PIPE if pipe else (self._out or self._log),
            stderr=self._log, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            preexec_fn=_preexec, cwd=OUT)
        self.pid = self.p.pid

    def readline(self, timeout=30.0, pattern=None):
        """Next stdout line (pipe mode) matching pattern; raises on timeout or exit."""
        import select
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern) if pattern else None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("%s: timed out waiting for /%s/" % (self.name, pattern))
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if not r:
                continue
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("%s exited (%s); see %s" % (
                    self.name, self.p.poll(), self.log_path))
            line = line.decode("utf-8", "replace").rstrip("\n")
            self._log.write((line + "\n").encode())
            if rx is None:
                return line
            m = rx.search(line)
            if m:
                return m

    def send(self, line):
        self.p.stdin.write((line + "\n").encode())
        self.p.stdin.flush()

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        if self.p.poll() is None:
            try:
                os.killpg(self.pid, sig)
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.p.wait(5)
            except ProcessLookupError:
                pass
        if self.p.stdout:
            self.p.stdout.close()
        if self.p.stdin:
            try:
                self.p.stdin.close()
            except BrokenPipeError:
                pass
        self._log.close()
        if self._out:
            self._out.close()


def pin(argv, cpus):
    """taskset to cpus, and SCHED_FIFO unless --sched other."""
    if cpus is not None:
        argv = ["taskset", "-c", cpus] + argv
    if ARGS.sched == "fifo":
        argv = ["chrt", "-f", "1"] + argv
    return argv


def run_cmd(argv, cpus=None, timeout=600):
    argv = pin(argv, cpus)
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, preexec_fn=_preexec, cwd=OUT)
    return r.stdout.decode("utf-8", "replace")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.p.poll() is not None:
            raise RuntimeError("%s exited (%s); see %s" % (proc.name, proc.p.returncode,
                                                           proc.log_path))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("%s did not listen on %d" % (proc.name, port))


def tree_pids(pid):
    """pid and its descendants (nginx: master and workers)."""
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def thread_stats(pids, name):
    """The text of /proc/PID/task/TID/<name> for every thread of pids (threads
    gone meanwhile are skipped)."""
    for pid in pids:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/%s" % (pid, tid, name)) as f:
                    yield f.read()
            except OSError:
                pass


def cpu_ns(pids):
    """On-CPU time of every thread of pids (ns, from schedstat)."""
    return sum(int(text.split()[0]) for text in thread_stats(pids, "schedstat"))


def user_ns(pids):
    """User-mode time of every thread of pids (ns, from stat's utime: clock
    ticks, 10 ms each; over a measured run of 3 s and 100k+ requests that is
    0.1 us per request or finer)."""
    tick = os.sysconf("SC_CLK_TCK")
    return sum(int(text[text.rfind(")") + 2:].split()[11]) * 1000000000 // tick
               for text in thread_stats(pids, "stat"))


def ticks_ns(pids):
    """utime + stime of each process of pids (ns; /proc/PID/stat, every thread
    of the process, those that ended included): clock ticks of 10 ms, so over
    a run of 2 s and 50k+ requests 0.2 us per request or finer."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                st = f.read()
        except OSError:
            continue
        fields = st[st.rfind(")") + 2:].split()
        total += (int(fields[11]) + int(fields[12])) * 1000000000 // tick
    return total


def rss_kib(pids, field="VmRSS"):
    """The sum of a /proc/PID/status field over pids (VmHWM: each one's peak)."""
    total = 0
    for pid in pids:
        try:
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith(field + ":"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


# ---- CPU layout ------------------------------------------------------------------

def layout(workers):
    """(load CPUs, proxy CPUs, text): load generator and backend keep CPU 0;
    the proxy gets the next `workers` CPUs, or all of them when there are not
    enough (then its extra workers share CPU 0 with the load)."""
    n = os.cpu_count() or 1
    if n == 1:
        return "0", "0", "everything on CPU 0 (one CPU)"
    if workers + 1 <= n:
        proxy = "1" if workers == 1 else "1-%d" % workers
        text = "proxy on CPU %s; load generator and backend on CPU 0" % proxy
    else:
        proxy = "0-%d" % (n - 1)
        text = ("proxy on CPUs %s (its second worker shares CPU 0); load generator and "
                "backend on CPU 0" % proxy)
    return "0", proxy, text


# ---- backends ----------------------------------------------------------------------

def start_pbench_backend(name, sse=False, events=64, gap_us=10000, json_bytes=None):
    argv = [os.path.join(BUILD, "pbench"), "backend", "--listen", "127.0.0.1:0"]
    if json_bytes:
        argv += ["--json-bytes", str(json_bytes)]
    if sse:
        argv += ["--sse", "--events", str(events), "--gap-us", str(gap_us)]
    p = Proc(argv, name, cpus=ARGS.load_cpus, pipe=True)
    m = p.readline(pattern=r"listen=[^ ]*:(\d+)")
    p.port = int(m.group(1))
    return p


TRACE_SINK = None


def trace_sink_port():
    """A collector for llmgate-traced's spans: a pbench backend on the load's CPUs,
    which reads each export's body and answers 200 (started once, stopped at exit)."""
    global TRACE_SINK
    if TRACE_SINK is None:
        import atexit
        TRACE_SINK = start_pbench_backend("trace-sink")
        atexit.register(TRACE_SINK.stop)
    return TRACE_SINK.port


def start_llmsim(name, slots):
    argv = [os.path.join(BUILD, "llmsim"), "--listen", "127.0.0.1:0", "--name", "sim",
            "--model", "m", "--slots", str(slots), "--decode-ms", "1000",
            "--decode-ms-per-seq", "0", "--prefill-us-per-token", "0", "--speed", "50",
            "--quiet"]
    p = Proc(argv, name, cpus=ARGS.load_cpus, pipe=True)
    m = p.readline(pattern=r"llmsim ready .*listen=[^ ]*:(\d+)")
    p.port = int(m.group(1))
    return p


def llmsim_speed(port, speed):
    req = urllib.request.Request("http://127.0.0.1:%d/sim/control" % port,
                                 data=json.dumps({"speed": speed}).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


# ---- contenders --------------------------------------------------------------------

# HAProxy's access log: a JSON line of the same fields as NGINX_LOG's (times in ms)
HAPROXY_LOG = ("'{\"ts\":\"%[date,utime(%Y-%m-%dT%H:%M:%S%z)]\",\"id\":\"%ID\",\"client\":\"%ci\","
               "\"method\":\"%HM\",\"path\":\"%{+E}HU\",\"status\":%ST,\"backend\":\"%si:%sp\","
               "\"bytes_in\":%U,\"bytes_out\":%B,\"connect\":%Tc,\"ttfb\":%Tr,\"total\":%Ta}'")
NGINX_LOG = ("'{\"ts\":\"$time_iso8601\",\"id\":\"$request_id\",\"client\":\"$remote_addr\","
             "\"method\":\"$request_method\",\"path\":\"$request_uri\",\"status\":$status,"
             "\"backend\":\"$upstream_addr\",\"bytes_in\":$request_length,"
             "\"bytes_out\":$bytes_sent,\"connect\":\"$upstream_connect_time\","
             "\"ttfb\":\"$upstream_header_time\",\"total\":$request_time}'")


class Contender:
    def __init__(self, kind, port, procs, pids, log_path=None, ready=None):
        self.kind = kind
        self.port = port
        self.procs = procs
        self.pids = pids
        self.log_path = log_path
        self.ready = ready  # llmgate's ready line

    def stop(self):
        for p in self.procs:
            p.stop()
        if self.log_path and os.path.exists(self.log_path):
            os.unlink(self.log_path)  # access logs grow fast; only their cost matters

    def cpu(self):
        return cpu_ns(self.pids)

    def user(self):
        return user_ns(self.pids)

    def ticks(self):
        return ticks_ns(self.pids)

    def rss(self):
        return rss_kib(self.pids)

    def peak_rss(self):
        return rss_kib(self.pids, "VmHWM")


def log_writer_priority(pid):
    """Under SCHED_FIFO a thread runs until it blocks, so llmgate's access-log
    writer (a thread of its own) would wait for an idle moment of a saturated
    worker and the log would drop lines. Give it the next priority up: it
    still costs the same CPU, taken when it wakes, as the normal scheduler
    would give it. (nginx and HAProxy write their logs from the worker.)"""
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                if f.read().strip() == "llmgate-log":
                    subprocess.run(["chrt", "-f", "-p", "2", tid], check=True,
                                   stdout=subprocess.DEVNULL)
        except OSError:
            pass


def start_contender(kind, workers, backend_port, log_on=True, tag="", nginx_body_buffer="2m",
                    upstream_connect=None):
    name = "%s-w%d%s" % (kind, workers, tag)
    d = os.path.join(OUT, "run", name)
    os.makedirs(d, exist_ok=True)
    access = os.path.join(d, "access.log")
    if kind == "direct":
        return Contender(kind, backend_port, [], [])
    if kind == "relay":
        p = Proc([os.path.join(BUILD, "pbench"), "relay", "--target",
                  "127.0.0.1:%d" % backend_port], name, cpus=ARGS.proxy_cpus, pipe=True)
        m = p.readline(pattern=r"listen=[^ ]*:(\d+)")
        return Contender(kind, int(m.group(1)), [p], [p.pid])
    if kind == "nginx":
        port = free_port()
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            os.makedirs(os.path.join(d, "tmp", sub), exist_ok=True)
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write("""
daemon off;
master_process on;
user root;
worker_processes %(w)d;
worker_rlimit_nofile %(nofile)d;
pid %(d)s/nginx.pid;
error_log %(d)s/error.log warn;
events { worker_connections %(nofile)d; use epoll; }
http {
    log_format lg escape=json %(fmt)s;
    access_log %(log)s;
    client_body_temp_path %(d)s/tmp/body;
    proxy_temp_path %(d)s/tmp/proxy;
    fastcgi_temp_path %(d)s/tmp/fastcgi;
    uwsgi_temp_path %(d)s/tmp/uwsgi;
    scgi_temp_path %(d)s/tmp/scgi;
    client_max_body_size 16m;
    client_body_buffer_size %(bodybuf)s;
    keepalive_timeout 75s;
    keepalive_requests 1000000;
    upstream be {
        server 127.0.0.1:%(bport)d;
        keepalive 256;
        keepalive_requests 1000000;
        keepalive_timeout 60s;
    }
    server {
        listen 127.0.0.1:%(port)d backlog=4096 reuseport;
        location / {
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }
    }
}
""" % {"w": workers, "nofile": NOFILE, "d": d, "fmt": NGINX_LOG, "bport": backend_port,
       "port": port, "log": ("%s lg buffer=64k flush=1s" % access) if log_on else "off",
       "bodybuf": nginx_body_buffer})
        p = Proc(["nginx", "-e", os.path.join(d, "error.log"), "-p", d, "-c", conf], name,
                 cpus=ARGS.proxy_cpus)
        wait_port(port, p)
        time.sleep(0.1)
        return Contender(kind, port, [p], tree_pids(p.pid), access)
    if kind == "haproxy":
        port = free_port()
        conf = os.path.join(d, "haproxy.cfg")
        with open(conf, "w") as f:
            f.write("""
global
    nbthread %(w)d
    maxconn %(maxconn)d
    %(glog)s
defaults
    mode http
    %(dlog)s
    option http-keep-alive
    option http-no-delay
    http-reuse always
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    timeout http-request 10s
    timeout http-keep-alive 75s
    maxconn %(maxconn)d
frontend fe
    bind 127.0.0.1:%(port)d
    default_backend be
backend be
    server b1 127.0.0.1:%(bport)d
""" % {"w": workers, "port": port, "bport": backend_port, "maxconn": HAPROXY_MAXCONN,
       "glog": "log stdout format raw local0" if log_on else "",
       "dlog": ("log global\n    log-format %s\n    unique-id-format %%{+X}o%%pid%%Ts%%rt"
                % HAPROXY_LOG) if log_on else ""})
        # "log stdout": the access log is HAProxy's standard output
        p = Proc(["haproxy", "-db", "-f", conf], name, cpus=ARGS.proxy_cpus,
                 stdout_path=access)
        wait_port(port, p)
        return Contender(kind, port, [p], [p.pid], access)
    if kind in ("llmgate-defaults", "llmgate-bare", "llmgate-ref-defaults", "llmgate-ref-bare"):
        # what a user gets: the defaults (ttft, health checks and /metrics
        # scrapes, whose answers pbench gives as vLLM does), the access log
        # to a file, the workers left to "auto"; -bare: the same without the
        # access log and with the layout's workers (the ready line says what
        # auto chose)
        conf = os.path.join(d, "llmgate.json")
        binary = os.path.join(ARGS.ref_build if kind.startswith("llmgate-ref") else BUILD,
                              "llmgate")
        gw = {"listen": "127.0.0.1:0",
              "backends": [{"name": "b1", "url": "http://127.0.0.1:%d" % backend_port,
                            "models": ["m"]}]}
        if kind in ("llmgate-bare", "llmgate-ref-bare"):
            gw["access_log"] = False
            gw["workers"] = workers
        else:
            gw["access_log"] = access
        with open(conf, "w") as f:
            json.dump(gw, f, indent=1)
        p = Proc([binary, "-c", conf], name, cpus=ARGS.proxy_cpus, pipe=True)
        m = p.readline(pattern=r"llmgate ready .*listen=[^ ,]*:(\d+)")
        if ARGS.sched == "fifo":
            log_writer_priority(p.pid)
        return Contender(kind, int(m.group(1)), [p], [p.pid], access, ready=m.string)
    if kind in ("llmgate", "llmgate-ref", "llmgate-traced"):
        conf = os.path.join(d, "llmgate.json")
        binary = os.path.join(ARGS.ref_build if kind == "llmgate-ref" else BUILD, "llmgate")
        gw = {
            "listen": "127.0.0.1:0", "workers": workers, "log_level": "warn",
            # off is false (the default is standard output); a build from before
            # that default refuses false, and had no log by default
            "access_log": {"path": access, "flush": "1s", "buffer": "64KiB"}
            if log_on else False,
            "timeouts": {"client_idle": "75s", "stream_idle": "300s"},
            "limits": {"max_connections": 100000, "max_body_bytes": "16MiB",
                       "upstream_keepalive": 256},
            "routing": {"policy": "round_robin", "retry": {"attempts": 1}},
            "backends": [{"name": "b1", "url": "http://127.0.0.1:%d" % backend_port,
                          "models": ["m"], "flavor": "none"}],
        }
        if upstream_connect:
            gw["timeouts"]["upstream_connect"] = upstream_connect
        if kind == "llmgate-traced":
            # every request traced (100% sampling), its spans exported to a sink
            gw["tracing"] = {"endpoint": "http://127.0.0.1:%d/v1/traces" % trace_sink_port(),
                             "sample_ratio": 1}
        with open(conf, "w") as f:
            json.dump(gw, f, indent=1)
        if not log_on and subprocess.run([binary, "--check-config", conf],
                                         stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL).returncode != 0:
            del gw["access_log"]
            with open(conf, "w") as f:
                json.dump(gw, f, indent=1)
        p = Proc([binary, "-c", conf], name, cpus=ARGS.proxy_cpus, pipe=True)
        m = p.readline(pattern=r"llmgate ready .*listen=[^ ,]*:(\d+)")
        if ARGS.sched == "fifo":
            log_writer_priority(p.pid)
        return Contender(kind, int(m.group(1)), [p], [p.pid], access)
    raise ValueError(kind)


# ---- load tools ------------------------------------------------------------------

def body_file(nbytes):
    """A chat body of about nbytes in a file (for wrk's Lua script)."""
    path = os.path.join(OUT, "run", "body-%d.json" % nbytes)
    if not os.path.exists(path):
        head = ('{"model":"m","messages":[{"role":"system","content":"You are a helpful '
                'assistant."},{"role":"user","content":"')
        tail = '"}],"max_tokens":64,"temperature":0.7,"stream":false}'
        words = "the quick brown fox jumps over the lazy dog and keeps running "
        pad = max(8, nbytes - len(head) - len(tail))
        text = (words * (pad // len(words) + 1))[:pad]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(head + text + tail)
    return path


def wrk_script(nbytes):
    path = os.path.join(OUT, "run", "post-%d.lua" % nbytes)
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write('local f = io.open("%s", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
                    'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                    % body_file(nbytes))
    return path


def wrk_ms(text):
    """wrk's latency ("812.00us", "1.53ms", "2.01s") in ms."""
    m = re.match(r"([\d.]+)(us|ms|s)$", text)
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]


def wrk(port, conns, seconds, nbytes):
    out = run_cmd(["wrk", "-t1", "-c%d" % conns, "-d%gs" % seconds, "--timeout", "10s",
                   "--latency", "-s", wrk_script(nbytes),
                   "http://127.0.0.1:%d/v1/chat/completions" % port],
                  cpus=ARGS.load_cpus, timeout=seconds + 60)
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m:
        raise RuntimeError("wrk failed:\n" + out)
    errs = 0
    m2 = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m2:
        errs += int(m2.group(1))
    m3 = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m3:
        errs += sum(int(x) for x in m3.groups())
    m4 = re.search(r"(\d+) requests in", out)
    pcts = {q: wrk_ms(v) for q, v in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)$", out, re.M)}
    return {"rps": float(m.group(1)), "errors": errs,
            "requests": int(m4.group(1)) if m4 else 0,
            "p50_ms": pcts.get("50"), "p99_ms": pcts.get("99")}


# With a pair port, every PAIR_EVERY-th request also goes straight to that port
# (the proxy's own backend) at the same moment: "paired added" is the
# distribution of the differences, which a host stall spanning both requests
# leaves out (bench/proxy/README.md, measure 1; bench/NOTES.md 40).
PAIR_EVERY = 4


def pbench_load(port, rate, conns, seconds, nbytes, warmup=1.0, pair_port=None):
    argv = [os.path.join(BUILD, "pbench"), "load", "--target", "127.0.0.1:%d" % port,
            "--rate", "%.1f" % rate, "--conns", str(conns), "--duration", str(seconds),
            "--warmup", str(warmup), "--body-bytes", str(nbytes)]
    if pair_port:
        argv += ["--pair", "127.0.0.1:%d" % pair_port, "--pair-every", str(PAIR_EVERY)]
    out = run_cmd(argv, cpus=ARGS.load_cpus, timeout=seconds + warmup + 60)
    line = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not line:
        raise RuntimeError("pbench load failed:\n" + out)
    return json.loads(line[-1])


# ---- statistics and tables -----------------------------------------------------------

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float) and abs(v) < 10 and unit != "x":
        return "%.2f%s" % (v, unit)
    if unit == "x":
        return "%.2fx" % v
    return "%.0f%s" % (v, unit) if abs(v) >= 100 else "%.1f%s" % (v, unit)


def ratio(a, b):
    return a / b if a is not None and b else None


def table(title, header, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    lines = ["", title, "  ".join(str(h).rjust(w) if i else str(h).ljust(w)
                                  for i, (h, w) in enumerate(zip(header, widths)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))))
    text = "\n".join(lines)
    print(text, flush=True)
    with open(os.path.join(OUT, "tables.txt"), "a") as f:
        f.write(text + "\n")


def progress(msg):
    print("  .. %s" % msg, file=sys.stderr, flush=True)


def contenders_for(measure):
    cs = ARGS.contenders
    if measure in ("memory", "log", "bodymem"):
        cs = [c for c in cs if c not in ("direct", "relay")]
    return cs


# ---- measure 1 and 4: requests/s and added latency ---------------------------------

def measure_rps(workers, nbytes, wrk_conns, lat_conns, label, answer_bytes=None):
    res = {"trials": {c: [] for c in ARGS.contenders}, "latency": {c: [] for c in ARGS.contenders}}
    dur = ARGS.duration
    for rnd in range(ARGS.rounds):
        for kind in ARGS.contenders:
            be = start_pbench_backend("backend-%s" % label, json_bytes=answer_bytes)
            c = start_contender(kind, workers, be.port)
            try:
                wrk(c.port, wrk_conns[0], 1, nbytes)  # warm: pools, caches
                trial = {}
                for conns in wrk_conns:
                    cpu0, user0 = c.cpu(), c.user()
                    r = wrk(c.port, conns, dur, nbytes)
                    cpu, user = c.cpu() - cpu0, c.user() - user0
                    ok = c.pids and r["requests"]
                    r["cpu_us_per_req"] = cpu / 1000 / r["requests"] if ok else None
                    r["user_us_per_req"] = user / 1000 / r["requests"] if ok else None
                    trial[conns] = r
                res["trials"][kind].append(trial)
                progress("%s w%d round %d %s: %s" % (label, workers, rnd + 1, kind, ", ".join(
                    "c%d %.0f rps" % (k, v["rps"]) for k, v in trial.items())))
            finally:
                c.stop()
                be.stop()
    # the same offered rate for everyone: half of the slowest proxy's maximum
    maxes = [med([t[wrk_conns[0]]["rps"] for t in res["trials"][k]])
             for k in ARGS.contenders if k not in ("direct", "relay")]
    maxes = [m for m in maxes if m]
    if not maxes:
        maxes = [med([t[wrk_conns[0]]["rps"] for t in res["trials"]["direct"]])]
    rate = 0.5 * min(maxes)
    res["latency_rate"] = rate
    for rnd in range(ARGS.rounds):
        for kind in ARGS.contenders:
            be = start_pbench_backend("backend-%s" % label, json_bytes=answer_bytes)
            c = start_contender(kind, workers, be.port)
            try:
                r = pbench_load(c.port, rate, lat_conns, dur, nbytes,
                                pair_port=be.port if kind != "direct" else None)
                res["latency"][kind].append(r)
                progress("%s w%d round %d %s latency at %.0f/s: p50 %.0f us p99 %.0f us" % (
                    label, workers, rnd + 1, kind, rate, r["latency_us"]["p50"],
                    r["latency_us"]["p99"]))
            finally:
                c.stop()
                be.stop()
    return res


def report_rps(res, workers, wrk_conns, lat_conns, title):
    med_rps = {}
    for k in ARGS.contenders:
        for conns in wrk_conns:
            med_rps[(k, conns)] = med([t[conns]["rps"] for t in res["trials"][k]])
    header = ["contender"]
    for conns in wrk_conns:
        header += ["rps c=%d" % conns, "/direct", "/nginx", "/haproxy", "us CPU/req", "user"]
    header += ["errors"]
    rows = []
    for k in ARGS.contenders:
        row = [k]
        for conns in wrk_conns:
            v = med_rps[(k, conns)]
            row += [fmt(v), fmt(ratio(v, med_rps.get(("direct", conns))), "x"),
                    fmt(ratio(v, med_rps.get(("nginx", conns))), "x"),
                    fmt(ratio(v, med_rps.get(("haproxy", conns))), "x"),
                    fmt(med([t[conns]["cpu_us_per_req"] for t in res["trials"][k]])),
                    fmt(med([t[conns].get("user_us_per_req") for t in res["trials"][k]]))]
        row.append(sum(t[c]["errors"] for t in res["trials"][k] for c in wrk_conns))
        rows.append(row)
    table("%s, workers=%d: requests/s (wrk, medians of %d rounds)" % (title, workers, ARGS.rounds),
          header, rows)
    rate = res["latency_rate"]
    header = ["contender", "p50 us", "p99 us", "added p50", "added p99", "paired added p50",
              "p90", "p99", "achieved/s", "errors"]
    rows = []
    for k in ARGS.contenders:
        lat = res["latency"][k]
        paired = [r["added_us"] for r in lat if "added_us" in r]
        p50 = med([r["latency_us"]["p50"] for r in lat])
        p99 = med([r["latency_us"]["p99"] for r in lat])
        add50 = add99 = None
        if k != "direct" and res["latency"].get("direct"):
            d = res["latency"]["direct"]
            add50 = med([a["latency_us"]["p50"] - b["latency_us"]["p50"] for a, b in zip(lat, d)])
            add99 = med([a["latency_us"]["p99"] - b["latency_us"]["p99"] for a, b in zip(lat, d)])
        rows.append([k, fmt(p50), fmt(p99), fmt(add50), fmt(add99)]
                    + [fmt(med([a[q] for a in paired])) for q in ("p50", "p90", "p99")]
                    + [fmt(med([r["achieved_rps"] for r in lat])),
                       sum(r["errors"] + r["dropped"] + r.get("pair", {}).get("errors", 0)
                           for r in lat)])
    table("%s, workers=%d: latency at %.0f requests/s (half the slowest proxy's maximum), "
          "%d connections, open loop; added = each round's percentile minus direct's in the "
          "same round; paired added = percentiles of (through the proxy - straight to its "
          "backend) for every %dth request, both sent at once" % (
              title, workers, rate, lat_conns, PAIR_EVERY), header, rows)
    return {"rps": {"%s@%d" % k: v for k, v in med_rps.items()}, "latency_rate": rate}


# ---- measure 2: streaming ---------------------------------------------------------

def stream_run(c, streams, gap_us):
    """pbench sse through contender c (its backend a --sse pbench): the
    per-event delays and the contender's CPU over the measured window, as
    seconds per 100k events (on-CPU time from schedstat, and utime + stime)."""
    cl = Proc([os.path.join(BUILD, "pbench"), "sse", "--target", "127.0.0.1:%d" % c.port,
               "--streams", str(streams), "--duration", str(ARGS.duration), "--warmup", "1",
               "--spread-us", str(gap_us)], "sse-client", cpus=ARGS.load_cpus, pipe=True)
    try:
        cl.readline(timeout=30, pattern="window start")
        cpu0, ticks0 = c.cpu(), c.ticks()
        cl.readline(timeout=ARGS.duration + 30, pattern="window end")
        cpu, ticks = c.cpu() - cpu0, c.ticks() - ticks0
        r = json.loads(cl.readline(timeout=30, pattern=r"^\{").string)
    finally:
        cl.stop()
    ok = c.pids and r["events"]
    r["cpu_s_per_100k"] = cpu / 1e9 / r["events"] * 1e5 if ok else None
    r["ticks_s_per_100k"] = ticks / 1e9 / r["events"] * 1e5 if ok else None
    return r


def measure_stream(workers):
    streams = ARGS.sse_streams
    gap_us = 10000
    res = {k: [] for k in ARGS.contenders}
    for rnd in range(ARGS.rounds):
        for kind in ARGS.contenders:
            be = start_pbench_backend("backend-sse", sse=True, events=64, gap_us=gap_us)
            c = start_contender(kind, workers, be.port)
            try:
                r = stream_run(c, streams, gap_us)
                res[kind].append(r)
                progress("stream w%d round %d %s: %.0f ev/s, delay p50 %.1f p99 %.1f us, "
                         "%s CPU s/100k ev" % (workers, rnd + 1, kind, r["events_per_s"],
                                               r["delay_us"]["p50"], r["delay_us"]["p99"],
                                               fmt(r["cpu_s_per_100k"])))
            finally:
                c.stop()
                be.stop()
    header = ["contender", "events/s", "delay p50 us", "p99 us", "added p50", "added p99",
              "CPU s/100k ev", "errors"]
    rows = []
    for k in ARGS.contenders:
        rs = res[k]
        add50 = add99 = None
        if k != "direct" and res.get("direct"):
            add50 = med([a["delay_us"]["p50"] - b["delay_us"]["p50"]
                         for a, b in zip(rs, res["direct"])])
            add99 = med([a["delay_us"]["p99"] - b["delay_us"]["p99"]
                         for a, b in zip(rs, res["direct"])])
        rows.append([k, fmt(med([r["events_per_s"] for r in rs])),
                     fmt(med([r["delay_us"]["p50"] for r in rs])),
                     fmt(med([r["delay_us"]["p99"] for r in rs])), fmt(add50), fmt(add99),
                     fmt(med([r["cpu_s_per_100k"] for r in rs])),
                     sum(r["errors"] for r in rs)])
    table("Streaming, workers=%d: %d streams, one event per stream every %d ms; delay = kernel "
          "receive time at the client - backend send stamp" % (workers, streams, gap_us // 1000),
          header, rows)
    return res


# ---- measure 3: memory -----------------------------------------------------------------

def capacity(kind, workers):
    """Client sockets a contender can hold within NOFILE (a stream costs a
    client and a backend socket). llmgate and HAProxy hold every socket in one
    process (threads), and HAProxy refuses more than its maxconn clients;
    nginx has a limit per worker process (the kernel spreads connections over
    them with reuseport)."""
    reserve = 64
    if kind == "haproxy":
        return HAPROXY_MAXCONN - reserve
    if kind == "nginx":
        return (NOFILE - reserve) * workers
    return NOFILE - reserve


def hold_session(kind, workers, n_idle, n_streams, label):
    """Fresh contender and llmsim; opens n_idle idle connections, then
    n_streams streams; returns RSS at each step and the client's counts."""
    sim = start_llmsim("llmsim-mem", n_streams + 256)
    c = start_contender(kind, workers, sim.port)
    hold = None
    r = {"idle": n_idle, "streams": n_streams}
    try:
        time.sleep(0.5)
        r["base_kib"] = c.rss()
        hold = Proc([os.path.join(BUILD, "pbench"), "hold", "--target",
                     "127.0.0.1:%d" % c.port], "hold", cpus=ARGS.load_cpus, pipe=True, stdin=True)
        hold.readline(pattern="ready")
        if n_idle:
            hold.send("idle %d 256" % n_idle)
            m = hold.readline(timeout=300, pattern=r"idle done ok=(\d+) errors=(\d+)")
            r["idle_ok"], r["idle_err"] = int(m.group(1)), int(m.group(2))
            time.sleep(1.0)
        r["idle_kib"] = c.rss()
        if n_streams:
            llmsim_speed(sim.port, 1.0)  # one token a second per stream from now on
            hold.send("streams %d 2500" % n_streams)
            m = hold.readline(timeout=300, pattern=r"streams done ok=(\d+) errors=(\d+)")
            r["stream_ok"], r["stream_err"] = int(m.group(1)), int(m.group(2))
            time.sleep(2.0)
        r["streams_kib"] = c.rss()
        hold.send("check")
        chk = hold.readline(timeout=30, pattern=r"^check (.*)").group(1)
        r["check"] = {k: int(v) for k, v in (kv.split("=") for kv in chk.split())}
        ck = r["check"]
        r["errors"] = (ck["idle_err"] + ck["stream_err"] + ck["idle_closed"] + ck["stream_cut"]
                       + ck["stream_ended"] + (n_idle - ck["idle_open"])
                       + (n_streams - ck["streams_open"]))
        progress("memory %s w%d %s: idle %d streams %d: RSS %d -> %d -> %d KiB, errors %d" % (
            label, workers, kind, n_idle, n_streams, r["base_kib"], r["idle_kib"],
            r["streams_kib"], r["errors"]))
        hold.send("quit")
    finally:
        if hold:
            hold.stop()
        c.stop()
        sim.stop()
    return r


def measure_memory(workers):
    """Three sessions per contender and round: idle connections alone, streams
    alone, then both at once (as many streams as the descriptor limit leaves)."""
    n_idle, n_streams = ARGS.idle_conns, ARGS.streams
    res = {k: [] for k in contenders_for("memory")}
    for rnd in range(ARGS.rounds):
        for kind in contenders_for("memory"):
            cap = capacity(kind, workers)
            idle = min(n_idle, cap)
            streams = min(n_streams, cap // 2)
            a = hold_session(kind, workers, idle, 0, "idle")
            b = hold_session(kind, workers, 0, streams, "streams")
            both_streams = max(0, min(n_streams, (cap - idle) // 2))
            t = hold_session(kind, workers, idle, both_streams, "together")
            res[kind].append({
                "idle": a, "streams": b, "together": t,
                "per_idle_bytes": (a["idle_kib"] - a["base_kib"]) * 1024 / max(1, idle),
                "per_stream_bytes": (b["streams_kib"] - b["base_kib"]) * 1024 / max(1, streams)})
    header = ["contender", "RSS base MiB", "idle conns", "B/idle conn", "streams", "B/stream",
              "together: idle+streams", "errors"]
    rows = []
    for k in contenders_for("memory"):
        rs = res[k]
        rows.append([k, fmt(med([r["idle"]["base_kib"] / 1024 for r in rs])),
                     rs[0]["idle"]["idle"], fmt(med([r["per_idle_bytes"] for r in rs])),
                     rs[0]["streams"]["streams"], fmt(med([r["per_stream_bytes"] for r in rs])),
                     "%d+%d" % (rs[0]["together"]["idle"], rs[0]["together"]["streams"]),
                     sum(r[x]["errors"] for r in rs for x in ("idle", "streams", "together"))])
    table("Memory, workers=%d: proxy RSS growth (all its processes) per idle keep-alive "
          "connection and per llmsim stream; descriptor limit %d per process" % (
              workers, NOFILE), header, rows)
    return res


# ---- measure 6: memory while bodies arrive ------------------------------------------------

BODYMEM_CLIENTS = (1, 64)  # one body alone, then 64 at once
BODYMEM_BYTES = 16 * 1024 * 1024  # the default max_body_bytes, nginx's client_max_body_size


def numbers_body(nbytes):
    """{"model":"m","x":[0,0,...]} of nbytes: a member of values no proxy reads."""
    head = b'{"model":"m","x":['
    return head + b"0," * ((nbytes - len(head) - 3) // 2) + b"0]}"


def send_bodies(port, body, n):
    """n clients, each on its own connection, start sending body at once (a
    barrier) and read the answer to its end; returns (seconds, statuses)."""
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n"
            "Content-Type: application/json\r\nContent-Length: %d\r\n"
            "Connection: close\r\n\r\n" % len(body)).encode()
    statuses = [None] * n
    barrier = threading.Barrier(n + 1)

    def client(i):
        s = None
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=120)
            barrier.wait()
            s.sendall(head)
            s.sendall(body)
            data = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
            if data.startswith(b"HTTP/1."):
                statuses[i] = int(data.split(b" ", 2)[1])
        except (OSError, threading.BrokenBarrierError, ValueError):
            barrier.abort()
        finally:
            if s is not None:
                s.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.monotonic()
    for t in threads:
        t.join()
    return time.monotonic() - t0, statuses


def measure_bodymem(workers):
    """Per contender, client count and round, fresh: RSS at start, then n
    clients send a 16 MiB body each at once; the peak is each process's
    VmHWM (summed over nginx's master and workers). nginx keeps bodies in
    memory here (client_body_buffer_size as large as the body); HAProxy
    streams them. llmgate's upstream_connect is nginx's proxy_connect_timeout
    (60 s): its worker checks each body whole (8 million values, about 0.2 s)
    before it routes, and a burst of them holds connection events back past
    the default 3 s."""
    body = numbers_body(BODYMEM_BYTES)
    kinds = contenders_for("bodymem")
    res = {"%s/%d" % (k, n): [] for k in kinds for n in BODYMEM_CLIENTS}
    for rnd in range(ARGS.rounds):
        for kind in kinds:
            for n in BODYMEM_CLIENTS:
                be = start_pbench_backend("backend-bodymem")
                c = start_contender(kind, workers, be.port, nginx_body_buffer="16m",
                                    upstream_connect="60s")
                try:
                    time.sleep(0.3)
                    base = c.rss()
                    secs, statuses = send_bodies(c.port, body, n)
                    peak = c.peak_rss()
                    r = {"base_kib": base, "peak_kib": peak, "seconds": secs,
                         "ok": statuses.count(200), "errors": n - statuses.count(200),
                         "statuses": sorted(set(str(x) for x in statuses))}
                    res["%s/%d" % (kind, n)].append(r)
                    progress("bodymem w%d round %d %s, %d bodies: RSS %d KiB, peak %d KiB "
                             "(+%.0f MiB), %.1f s, %d errors %s" % (
                                 workers, rnd + 1, kind, n, base, peak, (peak - base) / 1024,
                                 secs, r["errors"], r["statuses"]))
                finally:
                    c.stop()
                    be.stop()
    header = ["contender", "bodies", "RSS start MiB", "peak RSS MiB", "peak - start MiB",
              "per body MiB", "peak / nginx's", "seconds", "errors"]
    rows = []
    for n in BODYMEM_CLIENTS:
        nginx_peak = med([r["peak_kib"] for r in res.get("nginx/%d" % n, [])])
        for k in kinds:
            rs = res["%s/%d" % (k, n)]
            peak = med([r["peak_kib"] for r in rs])
            grown = med([(r["peak_kib"] - r["base_kib"]) / 1024 for r in rs])
            rows.append([k, n, fmt(med([r["base_kib"] / 1024 for r in rs])), fmt(peak / 1024),
                         fmt(grown), fmt(grown / n if grown is not None else None),
                         fmt(ratio(peak, nginx_peak), "x"),
                         fmt(med([r["seconds"] for r in rs])), sum(r["errors"] for r in rs)])
    table("Bodies in memory, workers=%d: 1, then 64 clients send a %d MiB body each at once, "
          "{\"model\":\"m\",\"x\":[0,0,...]}; peak RSS = VmHWM (all the contender's "
          "processes), medians of %d rounds" % (workers, BODYMEM_BYTES >> 20, ARGS.rounds),
          header, rows)
    return res


# ---- measure 5: access log ---------------------------------------------------------------

def measure_log(workers):
    res = {(k, on): [] for k in contenders_for("log") for on in (False, True)}
    for rnd in range(ARGS.rounds):
        for kind in contenders_for("log"):
            for on in (False, True):
                be = start_pbench_backend("backend-log")
                c = start_contender(kind, workers, be.port, log_on=on,
                                    tag="-log" if on else "-nolog")
                try:
                    wrk(c.port, 64, 1, 300)
                    cpu0 = c.cpu()
                    r = wrk(c.port, 64, ARGS.duration, 300)
                    r["cpu_us_per_req"] = (c.cpu() - cpu0) / 1000 / max(1, r["requests"])
                    res[(kind, on)].append(r)
                    progress("log w%d round %d %s log=%s: %.0f rps" % (
                        workers, rnd + 1, kind, "on" if on else "off", r["rps"]))
                finally:
                    c.stop()
                    be.stop()
    header = ["contender", "rps log off", "rps log on", "on/off", "us CPU/req off", "on",
              "errors"]
    rows = []
    for k in contenders_for("log"):
        off = med([r["rps"] for r in res[(k, False)]])
        on = med([r["rps"] for r in res[(k, True)]])
        rows.append([k, fmt(off), fmt(on), fmt(ratio(on, off), "x"),
                     fmt(med([r["cpu_us_per_req"] for r in res[(k, False)]])),
                     fmt(med([r["cpu_us_per_req"] for r in res[(k, True)]])),
                     sum(r["errors"] for v in (True, False) for r in res[(k, v)])])
    table("Access log, workers=%d: wrk, 64 connections, small requests" % workers, header, rows)
    return {"%s-%s" % (k, "on" if on else "off"): v for (k, on), v in res.items()}


# ---- measure 6: what a user gets -------------------------------------------------------

# (row, contender kind, access log on): the bare rows, then the logged ones
DEFAULTS_ROWS = [
    ("nginx", "nginx", False),
    ("haproxy", "haproxy", False),
    ("llmgate bare", "llmgate-bare", False),
    ("nginx + log", "nginx", True),
    ("haproxy + log", "haproxy", True),
    ("llmgate defaults", "llmgate-defaults", True),
]
DEFAULTS_CONNS = [64, 512]


def defaults_rows():
    rows = [r for r in DEFAULTS_ROWS if r[1].split("-")[0] in ARGS.contenders]
    if ARGS.ref_build:
        # the other build's bare path beside its defaults (a change to the
        # request's path shows there without the log's share)
        rows.insert(rows.index(("llmgate bare", "llmgate-bare", False)) + 1
                    if ("llmgate bare", "llmgate-bare", False) in rows else len(rows),
                    ("llmgate-ref bare", "llmgate-ref-bare", False))
        rows.append(("llmgate-ref defaults", "llmgate-ref-defaults", True))
    return rows


def defaults_trial(workers, kind, log_on):
    """One contender afresh: wrk at each connection count (requests/s, p99,
    utime + stime per request), then afresh again behind an SSE backend."""
    tag = "-log" if log_on else "-nolog"
    r = {}
    be = start_pbench_backend("backend-defaults")
    c = start_contender(kind, workers, be.port, log_on=log_on, tag=tag)
    try:
        if c.ready:
            r["ready"] = c.ready
        wrk(c.port, DEFAULTS_CONNS[0], 1, 300)  # warm: pools, caches, the first scrapes
        for conns in DEFAULTS_CONNS:
            t0, cpu0 = c.ticks(), c.cpu()
            w = wrk(c.port, conns, ARGS.duration, 300)
            ticks, cpu = c.ticks() - t0, c.cpu() - cpu0
            ok = c.pids and w["requests"]
            w["cpu_us_per_req"] = ticks / 1000 / w["requests"] if ok else None
            w["oncpu_us_per_req"] = cpu / 1000 / w["requests"] if ok else None
            r[conns] = w
    finally:
        c.stop()
        be.stop()
    be = start_pbench_backend("backend-defaults-sse", sse=True, events=64, gap_us=10000)
    c = start_contender(kind, workers, be.port, log_on=log_on, tag=tag)
    try:
        r["stream"] = stream_run(c, ARGS.sse_streams, 10000)
    finally:
        c.stop()
        be.stop()
    return r


def measure_defaults(workers):
    rows = defaults_rows()
    res = {label: [] for label, _, _ in rows}
    for rnd in range(ARGS.rounds):
        for label, kind, log_on in rows:
            r = defaults_trial(workers, kind, log_on)
            res[label].append(r)
            progress("defaults w%d round %d %s: %s; stream p50 %.1f p99 %.1f us%s" % (
                workers, rnd + 1, label, ", ".join(
                    "c%d %.0f rps %s us CPU p99 %s ms" % (
                        k, r[k]["rps"], fmt(r[k]["cpu_us_per_req"]), fmt(r[k]["p99_ms"]))
                    for k in DEFAULTS_CONNS),
                r["stream"]["delay_us"]["p50"], r["stream"]["delay_us"]["p99"],
                "; " + r["ready"].split(" workers=", 1)[1].split(" backends=")[0]
                if r.get("ready") else ""))
    m = {}
    for label, _, _ in rows:
        rs = res[label]
        for k in DEFAULTS_CONNS:
            for q in ("rps", "cpu_us_per_req", "oncpu_us_per_req", "p99_ms"):
                m[(label, k, q)] = med([t[k][q] for t in rs])
        for q in ("p50", "p99"):
            m[(label, "stream", q)] = med([t["stream"]["delay_us"][q] for t in rs])
        m[(label, "stream", "cpu")] = med([t["stream"]["ticks_s_per_100k"] for t in rs])

    def peer(label, base):
        """The peer with the same access-log setting."""
        return base + (" + log" if label.endswith(("+ log", "defaults")) else "")

    header = ["contender"]
    for k in DEFAULTS_CONNS:
        header += ["rps c=%d" % k, "/nginx", "/haproxy", "us CPU/req", "p99 ms"]
    header += ["stream p50 us", "p99 us", "CPU s/100k ev", "errors"]
    out = []
    for label, _, _ in rows:
        row = [label]
        for k in DEFAULTS_CONNS:
            v = m[(label, k, "rps")]
            row += [fmt(v), fmt(ratio(v, m.get((peer(label, "nginx"), k, "rps"))), "x"),
                    fmt(ratio(v, m.get((peer(label, "haproxy"), k, "rps"))), "x"),
                    fmt(m[(label, k, "cpu_us_per_req")]), fmt(m[(label, k, "p99_ms")])]
        row += [fmt(m[(label, "stream", "p50")]), fmt(m[(label, "stream", "p99")]),
                fmt(m[(label, "stream", "cpu")]),
                sum(t[k]["errors"] for t in res[label] for k in DEFAULTS_CONNS)
                + sum(t["stream"]["errors"] for t in res[label])]
        out.append(row)
    chosen = sorted({t["ready"].split(" workers=", 1)[1].split(" backends=")[0]
                     for t in res.get("llmgate defaults", []) if t.get("ready")})
    table("What a user gets, workers=%d: llmgate's defaults (ttft, access log to a file, workers "
          "auto: %s) against nginx and HAProxy with their JSON access logs; bare: no access "
          "log (llmgate \"access_log\": false, workers %d); ratios against the peer with the "
          "same log setting; CPU = utime + stime per request; p99 = wrk's (closed loop); "
          "stream = per-event delay of %d streams (medians of %d rounds)" % (
              workers, ", ".join(chosen) or "-", workers, ARGS.sse_streams, ARGS.rounds),
          header, out)
    d = "llmgate defaults"
    if d in res:
        lines = []
        for k in DEFAULTS_CONNS:
            for base in ("nginx", "haproxy"):
                p = base + " + log"
                if p not in res:
                    continue
                rr = ratio(m[(d, k, "rps")], m[(p, k, "rps")])
                cc = ratio(m[(d, k, "cpu_us_per_req")], m[(p, k, "cpu_us_per_req")])
                pp = ratio(m[(d, k, "p99_ms")], m[(p, k, "p99_ms")])
                lines.append("  c=%d vs %s: requests/s %s (>= 1.0x: %s), CPU/request %s (<= 1.0x: "
                             "%s), p99 %s (<= 1.1x: %s)" % (
                                 k, p, fmt(rr, "x"), "met" if rr and rr >= 1.0 else "missed",
                                 fmt(cc, "x"), "met" if cc and cc <= 1.0 else "missed",
                                 fmt(pp, "x"), "met" if pp and pp <= 1.1 else "missed"))
        text = "\nTargets (llmgate defaults against each peer with its access log):\n" + \
            "\n".join(lines)
        print(text, flush=True)
        with open(os.path.join(OUT, "tables.txt"), "a") as f:
            f.write(text + "\n")
    return {"raw": res, "summary": {"%s@%s@%s" % key: v for key, v in m.items()}}


# ---- main ----------------------------------------------------------------------------

def machine():
    info = {"cpus": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            info["cpu_model"] = m.group(1) if m else "?"
        with open("/proc/meminfo") as f:
            info["mem_kib"] = int(f.readline().split()[1])
    except OSError:
        pass
    info["loadavg"] = open("/proc/loadavg").read().split()[:3]
    for name, argv in (("nginx", ["nginx", "-v"]), ("haproxy", ["haproxy", "-v"]),
                       ("wrk", ["wrk", "-v"])):
        try:
            out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 timeout=10).stdout.decode()
            info[name] = out.strip().splitlines()[0] if out.strip() else "?"
        except OSError:
            info[name] = "missing"
    try:
        info["llmgate"] = subprocess.run(["git", "-C", SRC, "describe", "--always", "--dirty"],
                                         stdout=subprocess.PIPE, timeout=10).stdout.decode().strip()
    except OSError:
        info["llmgate"] = "?"
    return info


def _on_term(signum, frame):
    raise KeyboardInterrupt  # unwinds through the finally blocks that stop every process


def main():
    global ARGS, BUILD, OUT
    signal.signal(signal.SIGTERM, _on_term)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round, short runs, fewer connections")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--only", default=",".join(ALL_MEASURES))
    ap.add_argument("--contenders", default=",".join(ALL_CONTENDERS))
    ap.add_argument("--out")
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--duration", type=float, help="seconds per measured run")
    ap.add_argument("--idle-conns", type=int)
    ap.add_argument("--streams", type=int)
    ap.add_argument("--sse-streams", type=int, default=200)
    ap.add_argument("--ref-build", metavar="DIR",
                    help="also run the llmgate of another build as contender llmgate-ref "
                         "(before/after comparisons in one run)")
    ap.add_argument("--traced", action="store_true",
                    help="also run llmgate with tracing on at 100%% sampling (spans exported "
                         "to a sink on the load's CPUs) as contender llmgate-traced")
    ap.add_argument("--sched", choices=("fifo", "other"),
                    default="fifo" if os.geteuid() == 0 else "other",
                    help="run every benchmark process under SCHED_FIFO priority 1 (default "
                         "as root), so that other work on a shared machine cannot delay them")
    ARGS = ap.parse_args()
    ARGS.rounds = ARGS.rounds or (1 if ARGS.quick else 3)
    ARGS.duration = ARGS.duration or (2.0 if ARGS.quick else 5.0)
    ARGS.idle_conns = ARGS.idle_conns or (2000 if ARGS.quick else 10000)
    ARGS.streams = ARGS.streams or (1000 if ARGS.quick else 5000)
    ARGS.contenders = [c for c in ARGS.contenders.split(",") if c]
    if ARGS.traced and "llmgate-traced" not in ARGS.contenders:
        ARGS.contenders.append("llmgate-traced")
    if ARGS.ref_build:
        ARGS.ref_build = os.path.abspath(ARGS.ref_build)
        if "llmgate-ref" not in ARGS.contenders:
            ARGS.contenders.append("llmgate-ref")
    measures = [m for m in ARGS.only.split(",") if m]
    for m in measures:
        if m not in ALL_MEASURES:
            ap.error("unknown measure %s" % m)
    BUILD = os.path.abspath(ARGS.build)
    for tool in ("llmgate", "pbench", "llmsim"):
        if not os.path.exists(os.path.join(BUILD, tool)):
            sys.exit("%s/%s is missing: build first (cmake --build %s)" % (BUILD, tool, BUILD))
    for tool in ("nginx", "haproxy", "wrk", "taskset"):
        if subprocess.run(["sh", "-c", "command -v %s" % tool],
                          stdout=subprocess.DEVNULL).returncode != 0:
            sys.exit("%s is missing: tools/install-deps.sh --bench" % tool)
    OUT = os.path.abspath(ARGS.out or os.path.join(
        SRC, "bench", "out", "proxy-%s" % time.strftime("%Y%m%d-%H%M%S")))
    os.makedirs(OUT, exist_ok=True)
    results = {"machine": machine(), "args": vars(ARGS).copy(), "measures": {}}
    print("proxy benchmark -> %s" % OUT)
    print("machine: %s, %s CPUs, Linux %s, load %s" % (
        results["machine"].get("cpu_model"), results["machine"]["cpus"],
        results["machine"]["kernel"], " ".join(results["machine"]["loadavg"])))
    t_start = time.time()
    for w in [int(x) for x in ARGS.workers.split(",")]:
        ARGS.load_cpus, ARGS.proxy_cpus, text = layout(w)
        if ARGS.sched == "fifo":
            text += "; all under SCHED_FIFO 1 (chrt)"
        os.sched_setaffinity(0, {int(x) for x in ARGS.load_cpus.split(",")})
        print("\n== workers=%d: %s (taskset) ==" % (w, text), flush=True)
        r = results["measures"].setdefault("w%d" % w, {"layout": text})
        if "rps" in measures:
            raw = measure_rps(w, 300, [64, 512], 64, "small")
            r["rps"] = {"raw": raw, "summary": report_rps(raw, w, [64, 512], 64,
                                                           "Small requests")}
        if "stream" in measures:
            r["stream"] = measure_stream(w)
        if "memory" in measures:
            r["memory"] = measure_memory(w)
        if "large" in measures:
            for nbytes, label in ((100 * 1024, "100KiB"), (1024 * 1024, "1MiB")):
                raw = measure_rps(w, nbytes, [16], 16, "large-" + label)
                r["large-" + label] = {"raw": raw, "summary": report_rps(
                    raw, w, [16], 16, "Large bodies (%s)" % label)}
            # an embeddings-sized answer to a small request
            raw = measure_rps(w, 300, [16], 16, "answer-1MiB", answer_bytes=1024 * 1024)
            r["answer-1MiB"] = {"raw": raw, "summary": report_rps(
                raw, w, [16], 16, "Large answers (1MiB to a 300-byte request)")}
        if "log" in measures:
            r["log"] = measure_log(w)
        if "defaults" in measures:
            r["defaults"] = measure_defaults(w)
        if "bodymem" in measures:
            r["bodymem"] = measure_bodymem(w)
    results["machine"]["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
    results["elapsed_s"] = time.time() - t_start
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=str)
    print("\nload average at the end: %s; results: %s/results.json, tables: %s/tables.txt" % (
        " ".join(results["machine"]["loadavg_end"]), OUT, OUT))


if __name__ == "__main__":
    main()
