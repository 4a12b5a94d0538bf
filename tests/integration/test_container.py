"""The container images and the CPU-only compose file, with podman.

Builds docker/Dockerfile's two images (the gateway, and the tools image with
llmsim and llmload), starts docker/compose.cpu.yaml with podman-compose (three
llmsim replicas and the gateway, reaching each other by service name on the
project's network), and checks what a user would: a streamed answer through
the published port, containerised llmload through the gateway, the image's
HEALTHCHECK, the unprivileged user, and a SIGTERM that lets a running stream
finish before the container exits 0. Then the gateway's default worker count
in containers given a CPU limit (podman run --cpus, --cpuset-cpus).

Needs root and podman. On a machine without podman the test runs
../shared/tools/container-base.sh --compose (installs podman, podman-compose
and a local debian:bookworm-slim base image from the apt mirror), and skips
with the reason if that cannot work. Layers are cached between runs; the
images are kept, the containers and the network are removed.
"""

import json
import os
import re
import shutil
import subprocess
import threading
import time
import unittest

import harness
from harness import Harness, HttpStream, chat_body, free_port, http_request, wait_until

MODEL = "qwen2.5-1.5b-instruct"
BASE_IMAGE = "docker.io/library/debian:bookworm-slim"
TIMINGS = {}


def run(argv, timeout=900, check=True, env=None, **kw):
    t0 = time.monotonic()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       env=env, **kw)
    out = p.stdout.decode("utf-8", "replace")
    if check and p.returncode != 0:
        raise AssertionError("%s: exit %d\n%s" % (" ".join(argv), p.returncode, out[-6000:]))
    return p.returncode, out, time.monotonic() - t0


def setup_podman():
    """Returns None when podman, podman-compose and the base image are usable
    (setting them up if needed), else the reason to skip."""
    if os.geteuid() != 0:
        return "needs root (rootful podman)"
    # ../shared beside the checkout (CI), or further up (a worktree); LG_CONTAINER_BASE wins
    script = os.environ.get("LG_CONTAINER_BASE") or next(
        (c for c in (os.path.join(harness.SRC, *([".."] * up), "shared", "tools",
                                  "container-base.sh") for up in (1, 2, 3)) if os.path.exists(c)),
        os.path.join(harness.SRC, "..", "shared", "tools", "container-base.sh"))
    ready = (shutil.which("podman") and shutil.which("podman-compose")
             and subprocess.run(["podman", "image", "exists", BASE_IMAGE]).returncode == 0)
    if not ready:
        if not os.path.exists(script):
            return "podman is not set up and %s is missing" % script
        t0 = time.monotonic()
        p = subprocess.run([script, "--compose"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=900)
        TIMINGS["container_base_s"] = time.monotonic() - t0
        if p.returncode != 0:
            return "container-base.sh --compose failed:\n" + p.stdout.decode()[-2000:]
    # service names resolve on a podman (CNI) network only with the dnsname plugin
    backend = subprocess.run(["podman", "info", "--format", "{{.Host.NetworkBackend}}"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.strip()
    if backend == b"cni" and not os.path.exists("/usr/lib/cni/dnsname"):
        p = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends",
                            "golang-github-containernetworking-plugin-dnsname"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if p.returncode != 0:
            return "cannot install the CNI dnsname plugin:\n" + p.stdout.decode()[-2000:]
    return None


SKIP = setup_podman() if os.environ.get("LG_SKIP_CONTAINER") is None else "LG_SKIP_CONTAINER set"
BUILT = set()


def build_image(target, tag):
    """Builds docker/Dockerfile's target as tag, once per run of this file."""
    if tag in BUILT:
        return
    # --format docker keeps HEALTHCHECK (OCI images have none); --network=host:
    # the build's apt-get reaches the mirror the way the host does
    _, _, dt = run(["podman", "build", "--pull=never", "--network=host", "--format", "docker",
                    "-f", "docker/Dockerfile", "--target", target, "-t", tag, "."],
                   cwd=harness.SRC)
    TIMINGS["build_%s_s" % target] = dt
    BUILT.add(tag)


@unittest.skipIf(SKIP is not None, "container test skipped: %s" % SKIP)
class ContainerTest(Harness):

    @classmethod
    def setUpClass(cls):
        cls.t0 = time.monotonic()
        build_image("tools", "llmgate-tools:latest")
        build_image("llmgate", "llmgate:latest")

    def setUp(self):
        super().setUp()
        self.project = "lgct%d" % os.getpid()
        self.port = free_port()
        self.admin = free_port()
        self.env = dict(os.environ, LLMGATE_PORT=str(self.port), LLMGATE_ADMIN_PORT=str(self.admin))
        self.compose = ["podman-compose", "-p", self.project, "-f",
                        os.path.join(harness.SRC, "docker", "compose.cpu.yaml")]
        self.addCleanup(self.down)
        t0 = time.monotonic()
        # the services by name: podman-compose 1.0 would start the optional profiles too
        run(self.compose + ["up", "-d", "--no-build", "sim-1", "sim-2", "sim-3", "llmgate"],
            env=self.env, timeout=300)
        self.gw = "%s_llmgate_1" % self.project
        # the gateway answers through the published port once it loaded its config
        wait_until(self.healthy, timeout=60, interval=0.25, what="the containerised gateway")
        TIMINGS["compose_up_s"] = time.monotonic() - t0

    def healthy(self):
        try:
            return http_request(self.port, "GET", "/healthz", timeout=2)[0] == 200
        except OSError:
            return False

    def down(self):
        if os.environ.get("LG_TEST_VERBOSE") or self._failed():
            print(run(["podman", "logs", self.gw], check=False)[1][-5000:])
        run(self.compose + ["down", "-t", "2"], env=self.env, check=False, timeout=120)
        # whatever podman-compose left (it stops at the first error)
        ids = run(["podman", "ps", "-aq", "--filter", "label=io.podman.compose.project=%s"
                   % self.project], check=False)[1].split()
        if ids:
            run(["podman", "rm", "-f", "-t", "1"] + ids, check=False)
        run(["podman", "network", "rm", "-f", "%s_default" % self.project], check=False)

    def exec(self, *argv):
        return run(["podman", "exec", self.gw] + list(argv), check=False)

    def test_fleet_in_containers(self):
        # a streamed answer through the published port, from one of the replicas
        s = HttpStream(self.port, "POST", "/v1/chat/completions",
                       chat_body(model=MODEL, stream=True, max_tokens=12), timeout=30)
        self.addCleanup(s.close)
        self.assertEqual(s.read_head(30), 200)
        s.read_all(30)
        self.assertEqual(s.ended, "complete")
        self.assertEqual(s.events[-1][1], "[DONE]")
        self.assertGreaterEqual(len(s.events), 12)
        self.assertIn(s.headers["x-llmsim-replica"], ("sim-1", "sim-2", "sim-3"))

        # llmload in a container on the project's network, by service name
        rc, out, _ = run(["podman", "run", "--rm", "--network", "%s_default" % self.project,
                          "--entrypoint", "llmload", "llmgate-tools:latest", "--url",
                          "http://llmgate:8080", "--model", MODEL, "--rate", "20", "--requests",
                          "60", "--max-tokens", "8-32", "--json", "/dev/stdout", "--quiet"],
                         timeout=120)
        summary = json.loads(out[out.index("{"):])
        self.assertEqual(summary["ok"], 60, summary)
        self.assertEqual(set(summary["replicas"]), {"sim-1", "sim-2", "sim-3"}, summary)

        # metrics through the published admin port, with the compose file's token
        status, _, data = http_request(self.admin, "GET", "/metrics",
                                       headers={"Authorization": "Bearer llmgate-demo-token"})
        self.assertEqual(status, 200)
        s = harness.parse_prometheus(data.decode())
        self.assertEqual(harness.metric(s, "llmgate_backends"), 3)
        self.assertEqual(harness.metric(s, "llmgate_backend_requests_total"), 61)
        self.assertEqual(harness.metric(s, "llmgate_backend_state", state="up"), 3)

        # the image's HEALTHCHECK (llmgate --probe with the mounted config), the user
        rc, out, _ = run(["podman", "healthcheck", "run", self.gw], check=False)
        self.assertEqual(rc, 0, out)
        rc, out, _ = self.exec("id", "-u")
        self.assertEqual(out.strip(), "10001")

        # SIGTERM: the stream in flight finishes, then the container exits 0
        s = HttpStream(self.port, "POST", "/v1/chat/completions",
                       chat_body(model=MODEL, stream=True, max_tokens=150), timeout=60)
        self.addCleanup(s.close)
        self.assertEqual(s.read_head(30), 200)
        self.assertIsNotNone(s.next_event(30))
        stopper = threading.Thread(target=run, args=(["podman", "stop", "-t", "40", self.gw],),
                                   kwargs={"check": False})
        stopper.start()
        s.read_all(60)
        stopper.join(60)
        self.assertEqual(s.ended, "complete")
        self.assertEqual(s.events[-1][1], "[DONE]")
        rc, out, _ = run(["podman", "inspect", "--format", "{{.State.ExitCode}}", self.gw])
        self.assertEqual(out.strip(), "0")
        rc, logs, _ = run(["podman", "logs", self.gw], check=False)
        self.assertRegex(logs, r"Terminated: draining")
        self.assertRegex(logs, r"all workers stopped; exiting")
        TIMINGS["test_s"] = time.monotonic() - self.t0
        print("container timings: %s" % json.dumps({k: round(v, 1) for k, v in TIMINGS.items()}))


@unittest.skipIf(SKIP is not None, "container test skipped: %s" % SKIP)
class ContainerCpusTest(Harness):
    """The image's gateway with "workers" left to its default ("auto") in a
    container given a CPU limit: the quota podman sets (cgroup v2 cpu.max, or
    v1 cpu.cfs_quota_us on a hybrid host) bounds the workers, rounded up, and
    a cpuset bounds them through the affinity mask; the ready line says which."""

    @classmethod
    def setUpClass(cls):
        build_image("llmgate", "llmgate:latest")

    def gateway(self, *limits):
        """Runs the image with limits; returns (workers, why) from its ready line."""
        conf = {"listen": "127.0.0.1:8080", "access_log": False,
                "backends": [{"name": "b", "url": "http://127.0.0.1:9", "models": ["m"]}]}
        path = self.write_config(conf, "llmgate-%d.json" % len(self.procs))
        os.chmod(path, 0o644)  # the image's user (10001) reads it
        name = "lgcpus%d-%d" % (os.getpid(), len(self.procs))
        self.addCleanup(run, ["podman", "rm", "-f", "-t", "0", name], check=False)
        p = self.start(["podman", "run", "--rm", "--name", name, "--network", "none"]
                       + list(limits)
                       + ["-v", "%s:/etc/llmgate/llmgate.json:ro" % path, "llmgate:latest"],
                       name=name)
        m = p.wait_for(r"llmgate ready .* workers=(\d+) \(([^)]*)\) backends=1 ", timeout=60)
        return int(m.group(1)), m.group(2)

    def test_cpu_limit_bounds_the_workers(self):
        quota = r"cgroup cpu\.(max|cfs_quota_us) %d/100000 -> %d"
        # one CPU of quota: one worker, whatever the host has
        n, why = self.gateway("--cpus=1")
        self.assertEqual(n, 1, why)
        self.assertRegex(why, quota % (100000, 1))
        # 1.5 CPUs round up to 2 (fewer only if the container has fewer CPUs)
        n, why = self.gateway("--cpus=1.5")
        self.assertRegex(why, quota % (150000, 2))
        cpus = int(re.search(r"affinity (\d+) of", why).group(1))
        self.assertEqual(n, min(2, cpus), why)
        # a cpuset: the affinity mask decides
        n, why = self.gateway("--cpuset-cpus=0")
        self.assertEqual(n, 1, why)
        self.assertRegex(why, r"^affinity 1 of \d+ CPUs$")


if __name__ == "__main__":
    harness.main()
