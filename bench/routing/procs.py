"""Processes of one benchmark run: the llmsim fleet, the contender in front of
it (llmgate with a policy, nginx or HAProxy), and llmload.

Everything is started in its own session with its output in a log file of the
run's folder, and stopped by its own pid (never by name). Ports: llmsim and
llmgate bind port 0 and report the port they got; nginx and HAProxy cannot, so
they get a port that was free a moment before (and are retried once on a
clash).
"""

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request


class Unavailable(Exception):
    """The contender cannot run on this build or machine (the reason says why)."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    """n distinct free ports (held together while chosen, so none repeats)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tail(path, lines=6):
    try:
        with open(path, "rb") as f:
            data = f.read()[-4096:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.strip().splitlines()[-lines:])


# Niceness of the fleet and the proxies (run.py --nice): on a machine shared
# with other work, a negative value keeps that work from starving them.
NICE = 0


class Proc:
    """A child process with its output in a file; reaped by a thread as soon as it exits."""

    def __init__(self, argv, log_path, cpus=None, env=None, cwd=None, nice=None):
        nice = NICE if nice is None else nice
        self.name = os.path.basename(argv[0])
        if cpus:
            argv = ["taskset", "-c", cpus] + list(argv)
        if nice:
            argv = ["nice", "-n", str(nice)] + list(argv)
        self.argv = argv
        self.log_path = log_path
        self.log = open(log_path, "ab")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                  start_new_session=True)
        self.exited = threading.Event()
        self.exit_wall_ns = None
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self):
        self.p.wait()
        self.exit_wall_ns = time.time_ns()
        self.exited.set()

    @property
    def pid(self):
        return self.p.pid

    def alive(self):
        return not self.exited.is_set()

    def stop(self, timeout=10.0):
        if self.alive():
            try:
                os.kill(self.p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            if not self.exited.wait(timeout):
                try:
                    os.kill(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.exited.wait(5.0)
        self.log.close()
        return self.p.returncode

    def wait_file(self, path, timeout=10.0, what="ready file"):
        """Waits until `path` holds a complete line; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(path) as f:
                    line = f.readline()
                if line.endswith("\n"):
                    return line.strip()
            except OSError:
                pass
            if self.exited.wait(0.01):
                raise Unavailable("%s exited (status %s): %s" % (
                    self.name, self.p.returncode, tail(self.log_path)))
        raise Unavailable("no %s after %.0f s: %s" % (what, timeout, tail(self.log_path)))

    def wait_port(self, port, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise Unavailable("exited (status %s): %s" % (self.p.returncode,
                                                               tail(self.log_path)))
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return
            except OSError:
                self.exited.wait(0.02)
        raise Unavailable("port %d not listening after %.0f s: %s" % (
            port, timeout, tail(self.log_path)))


def http_json(port, method, path, body=None, timeout=5.0):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode())


# ---- the fleet ---------------------------------------------------------------

# llmsim's engine shape: a sim key -> (flag, llmsim's default)
ENGINE_SHAPE = {
    "schedule": ("--schedule", "fcfs"),
    "step_tokens": ("--step-tokens", 0),
    "prefill_fixed_ms": ("--prefill-fixed-ms", 0.0),
    "decode_batch_exp": ("--decode-batch-exp", 1.0),
    "jitter": ("--jitter", 0.0),
    "gauge_lag_ms": ("--gauge-lag-ms", 0.0),
}

# run.py --load-reports: the load reports each replica answers (llmsim's flags;
# tools/llmsim/README.md). "engine": what its engine software answers (vLLM the
# endpoint-load-metrics header on answers not streamed and GET /load, SGLang
# GET /v1/loads, TGI and llama.cpp none); "all": every report, the header in
# streams' heads too.
LOAD_REPORTS = {
    "engine": {"vllm": ["--endpoint-load-metrics", "vllm", "--enable-server-load-tracking"],
               "sglang": ["--v1-loads"], "tgi": [], "llamacpp": []},
    "all": ["--endpoint-load-metrics", "all", "--enable-server-load-tracking", "--v1-loads"],
}


def load_report_args(mode, flavor):
    """llmsim's flags for run.py --load-reports MODE on a replica of flavor."""
    if not mode:
        return []
    reports = LOAD_REPORTS[mode]
    return list(reports[flavor] if isinstance(reports, dict) else reports)


class Fleet:
    """llmsim replicas r1..rN with the scenario's speeds and timing model."""

    def __init__(self, build, rundir, shm_dir, scen, cpus=None):
        self.build = build
        self.rundir = rundir
        self.shm_dir = shm_dir
        self.scen = scen
        self.cpus = cpus
        self.names = ["r%d" % (i + 1) for i in range(len(scen["speeds"]))]
        self.ports = [0] * len(self.names)
        self.procs = [None] * len(self.names)
        self.events = []  # (wall_ns, what)

    def replica_args(self, i):
        """llmsim flags of replica i: its models, timing model and speed."""
        sim = (self.scen.get("sims") or [self.scen["sim"]] * len(self.names))[i]
        argv = ["--model", "m",
                "--slots", str(sim["slots"]), "--speed", str(self.scen["speeds"][i]),
                "--seed", str(100 + i), "--flavor", sim["flavor"],
                "--prefill-us-per-token", str(sim["prefill_us_per_token"]),
                "--decode-ms", str(sim["decode_ms"]),
                "--decode-ms-per-seq", str(sim["decode_ms_per_seq"]),
                "--prefix-block-tokens", str(sim["prefix_block_tokens"]),
                "--prefix-cache-blocks", str(sim["prefix_cache_blocks"])]
        # the engine's shape, where it is not llmsim's default (the mismatch family)
        for key, (flag, default) in ENGINE_SHAPE.items():
            if sim.get(key, default) != default:
                argv += [flag, str(sim[key])]
        if sim.get("text"):
            argv += ["--text", sim["text"]]
        if sim.get("role_chunk"):
            argv.append("--role-chunk")
        argv += load_report_args(self.scen.get("load_reports"), sim["flavor"])
        return argv

    def _start(self, i, port=0):
        name = self.names[i]
        shm = os.path.join(self.shm_dir, name + ".state")
        ready = os.path.join(self.rundir, name + ".ready")
        for path in (shm, ready):
            try:
                os.unlink(path)  # a restart gets a new state file (the oracle remaps by inode)
            except FileNotFoundError:
                pass
        argv = ([os.path.join(self.build, "llmsim"), "--listen", "127.0.0.1:%d" % port,
                 "--name", name, "--quiet"] + self.replica_args(i)
                + ["--state-shm", shm, "--ready-file", ready])
        p = Proc(argv, os.path.join(self.rundir, name + ".log"), cpus=self.cpus)
        line = p.wait_file(ready, what="llmsim ready line")
        self.procs[i] = p
        self.ports[i] = int(line.rsplit(":", 1)[1])

    def start(self):
        for i in range(len(self.names)):
            self._start(i)

    def restart(self, i):
        """Starts replica i again on its old port (after a crash)."""
        if self.procs[i] is not None and self.procs[i].alive():
            self.procs[i].stop()
        last = None
        for _ in range(50):  # the port may linger briefly
            try:
                self._start(i, self.ports[i])
                self.events.append((time.time_ns(), "restart %s" % self.names[i]))
                return
            except Unavailable as e:
                last = e
                time.sleep(0.1)
        raise last

    def control(self, i, body):
        wall = time.time_ns()
        try:
            http_json(self.ports[i], "POST", "/sim/control", body)
        except OSError:
            pass  # a crash fault kills the replica before it answers
        self.events.append((wall, "control %s %s" % (self.names[i], json.dumps(body))))
        return wall

    def backends(self, load_reports=False):
        """The fleet as llmgate's `backends` list. load_reports: each backend
        asks for the load reports its replica answers (run.py --load-reports;
        the gateway's load_header and load_path, which a build before them
        refuses)."""
        # the mismatch family hides the engines' vocabulary: "auto" detects it
        flavor = self.scen.get("gateway_flavor", "vllm")
        out = [{"name": n, "url": "http://127.0.0.1:%d" % p, "models": ["m"], "flavor": flavor}
               for n, p in zip(self.names, self.ports)]
        mode = self.scen.get("load_reports") if load_reports else None
        for i, b in enumerate(out if mode else []):
            sim = (self.scen.get("sims") or [self.scen.get("sim") or {}] * len(self.names))[i]
            engine = sim.get("flavor", "vllm")
            if mode == "all":
                b.update(load_header="text", load_path="/v1/loads")
            elif engine == "vllm":
                b.update(load_header="text", load_path="/load")
            elif engine == "sglang":
                b["load_path"] = "/v1/loads"
        return out

    def addrs(self):
        """HOST:PORT of each replica, for nginx's and HAProxy's server lines."""
        return ["127.0.0.1:%d" % p for p in self.ports]

    def state(self, port):
        return http_json(port, "GET", "/sim/state")

    def states(self):
        out = {}
        for name, port, p in zip(self.names, self.ports, self.procs):
            if p is None or not p.alive():
                continue
            try:
                out[name] = self.state(port)
            except OSError:
                pass
        return out

    def stop(self):
        for p in self.procs:
            if p is not None:
                p.stop()


# ---- a real fleet --------------------------------------------------------------

REALENGINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                          "realengine")


def cpu_list(spec):
    """CPUs of a taskset list ("0", "2-3", "0,2-5"), in order."""
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def realengine_missing():
    """Why tools/realengine cannot run here, or None."""
    if not which("node"):
        return "node is not installed"
    if not os.path.isdir(os.path.join(REALENGINE, "node_modules", "node-llama-cpp")):
        return ("node-llama-cpp is not installed in tools/realengine "
                "(npm ci --omit=optional --ignore-scripts there; tools/realengine/README.md)")
    return None


class RealFleet(Fleet):
    """Real llama.cpp replicas (tools/realengine, one CPU thread each), r1..rN
    with the scenario's per-replica arguments, each pinned to its own CPU
    (replica i on the i-th CPU of the fleet's list, or of the machine's), a
    step log each (rN.steps.jsonl) and X-Llmsim-Replica on every answer,
    so shares are counted as for llmsim. No faults: control() is refused."""

    flavor = "llamacpp"

    def __init__(self, build, rundir, shm_dir, scen, cpus=None):
        super().__init__(build, rundir, shm_dir, scen)
        self.names = ["r%d" % (i + 1) for i in range(len(scen["replicas"]))]
        self.ports = [0] * len(self.names)
        self.procs = [None] * len(self.names)
        self.cpus = cpu_list(cpus) if cpus else sorted(os.sched_getaffinity(0))

    def _start(self, i, port=0):
        name = self.names[i]
        ready = os.path.join(self.rundir, name + ".ready")
        if os.path.exists(ready):
            os.unlink(ready)
        argv = [which("node"), os.path.join(REALENGINE, "server.mjs"),
                "--listen", "127.0.0.1:%d" % port, "--name", name, "--quiet",
                "--model-dir", os.path.join(self.build, "realengine-models"),
                "--step-log", os.path.join(self.rundir, name + ".steps.jsonl"),
                "--ready-file", ready, "--replica-header", "X-Llmsim-Replica",
                ] + list(self.scen["replicas"][i])
        p = Proc(argv, os.path.join(self.rundir, name + ".log"),
                 cpus=str(self.cpus[i % len(self.cpus)]))
        line = p.wait_file(ready, timeout=60.0, what="realengine ready line")
        self.procs[i] = p
        self.ports[i] = int(line.split("listen=", 1)[1].split()[0].rsplit(":", 1)[1])

    def start(self):
        why = realengine_missing()
        if why:
            raise Unavailable(why)
        super().start()

    def control(self, i, body):
        raise Unavailable("a real engine takes no faults")

    def backends(self, load_reports=False):
        """Each replica's backend entry, with the tokens a step of it carries
        (the scenario's prefill_chunks: its engine's batch) where given, for
        this build's gateway (load_reports: an @ref build may refuse the key)."""
        chunks = self.scen.get("prefill_chunks") if load_reports else None
        out = [dict(b, flavor=self.flavor) for b in super().backends()]
        for b, chunk in zip(out, chunks or []):
            if chunk:
                b["prefill_chunk"] = chunk
        return out

    def state(self, port):
        """The replica's llamacpp:* samples."""
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5.0) as r:
            text = r.read().decode()
        return {ln.split()[0].split(":", 1)[1]: float(ln.split()[1])
                for ln in text.splitlines() if ln.startswith("llamacpp:")}


# ---- contenders --------------------------------------------------------------

class Llmgate:
    """One or more llmgate instances with the same config. `base`: a config
    whose other sections (timeouts, health, limits...) the instances keep;
    listen, workers, logs, routing and backends are the run's."""

    def __init__(self, build, rundir, fleet, routing, workers, instances=1, cpus=None,
                 peers=True, peer_interval_ms=None, base=None, load_reports=False):
        self.build = build
        self.load_reports = load_reports
        self.base = base or {}
        self.rundir = rundir
        self.fleet = fleet
        self.routing = routing
        self.workers = workers
        self.instances = instances
        self.cpus = cpus
        self.procs = []
        self.ports = []
        self.access_logs = []
        # several instances: each an admin listener, and one peers list for all
        self.admin_ports = free_ports(instances) if instances > 1 and peers else []
        self.peer_interval_ms = peer_interval_ms

    def config(self, k):
        access = os.path.join(self.rundir, "access%s.log" % ("" if k == 0 else k))
        conf = dict(self.base)
        conf.update({
            "listen": "127.0.0.1:0",
            "workers": self.workers,
            "log_level": "warn",
            "access_log": {"path": access, "flush": "1s"},
            "routing": self.routing,
            "backends": self.fleet.backends(self.load_reports),
        })
        if self.admin_ports:
            conf["admin"] = "127.0.0.1:%d" % self.admin_ports[k]
            conf["peers"] = ["127.0.0.1:%d" % p for p in self.admin_ports]
            if self.peer_interval_ms:
                conf["health"] = {"peer_interval": "%dms" % self.peer_interval_ms}
        return conf, access

    def start(self):
        for k in range(self.instances):
            conf, access = self.config(k)
            path = os.path.join(self.rundir, "llmgate%s.json" % ("" if k == 0 else k))
            with open(path, "w") as f:
                json.dump(conf, f, indent=2)
            ready = os.path.join(self.rundir, "llmgate%s.ready" % ("" if k == 0 else k))
            if os.path.exists(ready):
                os.unlink(ready)
            p = Proc([os.path.join(self.build, "llmgate"), "-c", path, "--ready-file", ready],
                     os.path.join(self.rundir, "llmgate%s.log" % ("" if k == 0 else k)),
                     cpus=self.cpus)
            self.procs.append(p)
            line = p.wait_file(ready, what="llmgate ready line")
            addr = line.split("listen=", 1)[1].split()[0].split(",")[0]
            self.ports.append(int(addr.rsplit(":", 1)[1]))
            self.access_logs.append(access)

    def stop(self):
        for p in self.procs:
            p.stop(timeout=40.0)


NGINX_CONF = """\
# nginx as an LLM streaming proxy: least_conn over the fleet, no response
# buffering, HTTP/1.1 keep-alive to the replicas, long read timeouts.
worker_processes {workers};
error_log {prefix}/error.log warn;
pid {prefix}/nginx.pid;
events {{ worker_connections 16384; }}
http {{
    log_format bench escape=json '{{"end":$msec,"rt":$request_time,"status":$status,'
                                  '"upstream":"$upstream_addr","ustatus":"$upstream_status"}}';
    access_log {prefix}/access.log bench buffer=64k flush=1s;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    keepalive_timeout 75s;
    keepalive_requests 100000;
    upstream fleet {{
        least_conn;
{servers}
        keepalive 64;
        keepalive_requests 100000;
        keepalive_timeout 60s;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        client_max_body_size 16m;
        client_body_buffer_size 1m;
        location / {{
            proxy_pass http://fleet;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_cache off;
            proxy_connect_timeout 3s;
            proxy_read_timeout 300s;
            proxy_send_timeout 300s;
            proxy_next_upstream error timeout non_idempotent;
            proxy_next_upstream_tries 2;
        }}
    }}
}}
"""

HAPROXY_CONF = """\
# HAProxy as an LLM streaming proxy: leastconn, connection reuse, keep-alive on
# both sides (no http-server-close), long server timeout, active health checks
# and slow start. http-no-delay: forward each SSE chunk at once (without it,
# HAProxy sends with MSG_MORE while a chunked body is unfinished, and small
# token events wait ~200 ms for the kernel to flush them).
global
    nbthread {workers}
    maxconn 8000
    log stdout format raw local0
defaults
    mode http
    log global
    log-format '{{"ts":%Ts.%ms,"server":"%s","status":%ST,"retries":"%rc","tt":%Tt}}'
    timeout connect 3s
    timeout client 300s
    timeout server 300s
    timeout http-keep-alive 75s
    timeout http-request 10s
    http-reuse always
    option http-no-delay
    retries 2
    option redispatch 1
frontend fe
    bind 127.0.0.1:{port}
    default_backend fleet
backend fleet
    balance leastconn
    option httpchk GET /health
    default-server check inter 1s fall 2 rise 2 slowstart 10s
{servers}
"""


class Nginx:
    def __init__(self, rundir, fleet, workers, cpus=None):
        self.rundir = rundir
        self.fleet = fleet
        self.workers = workers
        self.cpus = cpus
        self.procs = []
        self.ports = []
        self.prefix = os.path.join(rundir, "nginx")
        self.access_logs = [os.path.join(self.prefix, "access.log")]

    def start(self):
        os.makedirs(os.path.join(self.prefix, "tmp"), exist_ok=True)
        os.chmod(self.prefix, 0o777)  # workers drop to an unprivileged user when run as root
        os.chmod(os.path.join(self.prefix, "tmp"), 0o777)
        servers = "\n".join("        server %s max_fails=1 fail_timeout=10s;" % a
                            for a in self.fleet.addrs())
        last = None
        for _ in range(3):
            port = free_port()
            conf = os.path.join(self.prefix, "nginx.conf")
            with open(conf, "w") as f:
                f.write(NGINX_CONF.format(workers=self.workers, prefix=self.prefix,
                                          servers=servers, port=port))
            p = Proc([which("nginx"), "-p", self.prefix, "-c", conf, "-g", "daemon off;"],
                     os.path.join(self.rundir, "nginx.log"), cpus=self.cpus)
            try:
                p.wait_port(port)
                self.procs, self.ports = [p], [port]
                return
            except Unavailable as e:
                last = e
                p.stop()
        raise last

    def stop(self):
        for p in self.procs:
            p.stop()


class Haproxy:
    def __init__(self, rundir, fleet, workers, cpus=None):
        self.rundir = rundir
        self.fleet = fleet
        self.workers = workers
        self.cpus = cpus
        self.procs = []
        self.ports = []
        self.access_logs = [os.path.join(rundir, "haproxy.log")]

    def start(self):
        servers = "\n".join("    server %s %s" % (n, a)
                            for n, a in zip(self.fleet.names, self.fleet.addrs()))
        last = None
        for _ in range(3):
            port = free_port()
            conf = os.path.join(self.rundir, "haproxy.cfg")
            with open(conf, "w") as f:
                f.write(HAPROXY_CONF.format(workers=self.workers, servers=servers, port=port))
            p = Proc([which("haproxy"), "-f", conf, "-db"], self.access_logs[0], cpus=self.cpus)
            try:
                p.wait_port(port)
                self.procs, self.ports = [p], [port]
                return
            except Unavailable as e:
                last = e
                p.stop()
        raise last

    def stop(self):
        for p in self.procs:
            p.stop()


def which(binary):
    """Path of an executable on PATH or in the sbin folders; None if absent."""
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(":") + ["/usr/sbin", "/sbin"]:
        path = os.path.join(d, binary)
        if d and os.access(path, os.X_OK):
            return path
    return None
