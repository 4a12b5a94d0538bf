"""Backends discovered through DNS, against a real DNS server on loopback.

dnsmasq (Debian's dnsmasq-base) serves A records for vllm.test from a hosts
file the test rewrites (then SIGHUP makes dnsmasq re-read it), the way a
Kubernetes headless Service's records follow its ready pods. The llmsim
replicas listen on distinct loopback addresses (127.0.0.2, .3, .4: Linux
routes all of 127/8 to lo) with the same port, so only DNS tells them apart.
The gateway's resolver is pointed at dnsmasq (discovery.nameserver).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest
import urllib.parse

import harness
from harness import Harness, chat_body, http_request, post_json, wait_until

FAST = ["--decode-ms", "4", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]
ADDRS = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]


def dnsmasq_binary():
    for cand in (shutil.which("dnsmasq"), "/usr/sbin/dnsmasq"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def free_udp_tcp_port():
    """A port free for both UDP and TCP on 127.0.0.1 (dnsmasq binds both)."""
    for _ in range(50):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", 0))
        port = u.getsockname()[1]
        t = socket.socket()
        try:
            t.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            t.close()
            u.close()
    raise AssertionError("no free port for dnsmasq")


@unittest.skipIf(dnsmasq_binary() is None,
                 "dnsmasq is not installed (apt-get install dnsmasq-base; tools/install-deps.sh)")
class DiscoveryTest(Harness):

    def setUp(self):
        super().setUp()
        self.hosts = self.path("hosts")
        self.set_records(ADDRS[:2])
        self.dns_port = free_udp_tcp_port()
        # --local=/test/: names under .test come from the hosts file or are NXDOMAIN
        self.dns = self.start([dnsmasq_binary(), "--no-daemon", "--conf-file=/dev/null",
                               "--port=%d" % self.dns_port, "--listen-address=127.0.0.1",
                               "--bind-interfaces", "--no-resolv", "--no-hosts",
                               "--addn-hosts=" + self.hosts, "--local=/test/", "--user=root",
                               "--pid-file=", "--log-facility=-", "--log-queries"],
                              name="dnsmasq")
        self.dns.wait_for(r"read .*hosts - 2 names")
        self.sims, self.sim_port = self.start_fleet()

    def start_fleet(self):
        """One llmsim per address, all on the same port (retried if taken)."""
        for _ in range(5):
            first, port = self.start_llmsim_at(ADDRS[0], 0, "r2")
            sims = {ADDRS[0]: first}
            for i, addr in enumerate(ADDRS[1:]):
                p, _ = self.start_llmsim_at(addr, port, "r%d" % (i + 3), must=False)
                if p is None:
                    break
                sims[addr] = p
            if len(sims) == len(ADDRS):
                return sims, port
            for p in sims.values():
                p.kill()
        raise AssertionError("could not start llmsim on one port for every address")

    def start_llmsim_at(self, addr, port, name, must=True):
        p = self.start([harness.binary("llmsim"), "--listen", "%s:%d" % (addr, port), "--name",
                        name, "--model", "m"] + FAST, name="llmsim-" + name)
        try:
            m = p.wait_for(r"llmsim ready .*listen=[^ ]*:(\d+)", timeout=10)
        except AssertionError:
            if must:
                raise
            return None, None
        return p, int(m.group(1))

    def set_records(self, addrs, reload=False):
        tmp = self.hosts + ".tmp"
        with open(tmp, "w") as f:
            for a in addrs:
                f.write("%s vllm.test\n" % a)
        os.replace(tmp, self.hosts)
        if reload:
            mark = len(self.dns.lines)
            self.dns.signal(signal.SIGHUP)
            self.dns.wait_for(r"read .*hosts - %d names" % len(addrs), start=mark)

    def gateway(self, interval="200ms"):
        conf = self.base_config(
            [{"name": "vllm", "discover": {"dns": "vllm.test", "port": self.sim_port,
                                           "interval": interval},
              "models": ["m"]}],
            discovery={"nameserver": "127.0.0.1:%d" % self.dns_port, "timeout": "300ms"},
            health={"slow_start": 0},
            admin={"listen": "127.0.0.1:0"}, access_log=self.path("access.log"))
        proc, port = self.start_gateway(conf)
        m = proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+) .*backends=(\d+)")
        self.gw = proc
        self.admin = int(m.group(1))
        return proc, port, int(m.group(2))

    def stop_gateway(self):
        """SIGTERM: the gateway drains and exits 0 (under ASan: no leak either)."""
        self.gw.signal(signal.SIGTERM)
        rc = self.gw.wait(30)
        self.assertEqual(rc, 0, self.gw.output()[-3000:])
        self.assertNotIn("Sanitizer", self.gw.output())

    def backend_names(self):
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        self.assertEqual(status, 200)
        return sorted(b["name"] for b in json.loads(data)["backends"])

    def names(self, addrs):
        return sorted("vllm@%s:%d" % (a, self.sim_port) for a in addrs)

    def wait_fleet(self, addrs, mark):
        """Waits for the gateway to put exactly these addresses in force."""
        self.gw.wait_for(r"discovery: vllm\.test port %d: %d address" % (self.sim_port, len(addrs)),
                         start=mark)
        self.gw.wait_for(r"fleet \(discovery\): %d backend" % len(addrs), start=mark)
        self.assertEqual(self.backend_names(), self.names(addrs))

    # ---- the tests ----------------------------------------------------------------

    def test_records_follow_dns_under_load(self):
        _, port, nbackends = self.gateway()
        # the gateway waited for the first answer before it was ready
        self.assertEqual(nbackends, 2)
        self.assertEqual(self.backend_names(), self.names(ADDRS[:2]))
        out = self.path("load.json")
        load = subprocess.Popen(
            [harness.binary("llmload"), "--url", "http://127.0.0.1:%d" % port, "--model", "m",
             "--rate", "30", "--duration", "9", "--max-tokens", "16-96", "--seed", "3",
             "--json", out, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(lambda: load.poll() is None and load.kill())
        time.sleep(1.5)
        # a pod goes, another comes: .2 drains, .4 joins
        mark = len(self.gw.lines)
        self.set_records(ADDRS[1:], reload=True)
        self.wait_fleet(ADDRS[1:], mark)
        time.sleep(1.5)
        # scale up: all three
        mark = len(self.gw.lines)
        self.set_records(ADDRS, reload=True)
        self.wait_fleet(ADDRS, mark)
        time.sleep(1.5)
        # the DNS server stops answering: the last addresses stay in force
        mark = len(self.gw.lines)
        self.dns.signal(signal.SIGSTOP)
        try:
            self.gw.wait_for(r"discovery: vllm\.test: lookup failed: .*; keeping 3 addresses",
                             start=mark, timeout=10)
            time.sleep(1.0)
        finally:
            self.dns.signal(signal.SIGCONT)
        self.assertEqual(self.backend_names(), self.names(ADDRS))
        rc = load.wait(60)
        _, stderr = load.communicate()
        self.assertEqual(rc, 0, stderr.decode())
        with open(out) as f:
            summary = json.load(f)
        self.assertEqual(summary["errors"], {"connect": 0, "status": 0, "cut": 0, "timeout": 0,
                                             "invalid": 0}, summary)
        self.assertGreater(summary["requests"], 200)
        self.assertEqual(set(summary["replicas"]), {"r2", "r3", "r4"}, summary["replicas"])
        self.stop_gateway()


    def test_no_record_answers_503_until_one_returns(self):
        _, port, _ = self.gateway()
        mark = len(self.gw.lines)
        self.set_records([], reload=True)  # NXDOMAIN: a definite "no address"
        self.gw.wait_for(r"discovery: vllm\.test port %d: 0 addresses" % self.sim_port, start=mark)
        self.gw.wait_for(r"fleet \(discovery\): 0 backends", start=mark)
        status, h, obj, _ = post_json(port, "/v1/chat/completions", chat_body())
        # the model still exists (its template names it): unavailable, not unknown
        self.assertEqual(status, 503, obj)
        self.assertEqual(obj["error"]["code"], "no_backend_available")
        self.assertIn("retry-after", h)
        status, _, data = http_request(port, "GET", "/v1/models")
        self.assertEqual([m["id"] for m in json.loads(data)["data"]], ["m"])
        mark = len(self.gw.lines)
        self.set_records(ADDRS[2:], reload=True)
        self.wait_fleet(ADDRS[2:], mark)
        status, h, _, _ = post_json(port, "/v1/chat/completions", chat_body())
        self.assertEqual((status, h["x-llmsim-replica"]), (200, "r4"))
        # the admin API takes discovered names, percent-encoded
        name = urllib.parse.quote("vllm@127.0.0.4:%d" % self.sim_port, safe="")
        status, _, obj, _ = post_json(self.admin, "/admin/backends/%s/drain" % name, {})
        self.assertEqual((status, obj["health"]), (200, "draining"))
        self.assertEqual(post_json(port, "/v1/chat/completions", chat_body())[0], 503)
        self.stop_gateway()


    def test_reload_keeps_discovered_backends_and_their_state(self):
        _, port, _ = self.gateway()
        for _ in range(4):
            self.assertEqual(post_json(port, "/v1/chat/completions", chat_body())[0], 200)
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        before = {b["name"]: b["requests"] for b in json.loads(data)["backends"]}
        self.assertEqual(sum(before.values()), 4)
        # a reload that adds a static backend keeps the discovered ones (same name and URL)
        conf = json.load(open(self.path("llmgate.json")))
        conf["backends"].append({"name": "static", "url": "http://127.0.0.4:%d" % self.sim_port,
                                 "models": ["m"]})
        tmp = self.path("llmgate.json.tmp")
        with open(tmp, "w") as f:
            json.dump(conf, f)
        os.replace(tmp, self.path("llmgate.json"))
        mark = len(self.gw.lines)
        self.gw.signal(signal.SIGHUP)
        self.gw.wait_for(r"configuration reloaded .*backends=3 discovered_names=1", start=mark)
        status, _, data = http_request(self.admin, "GET", "/admin/backends")
        after = {b["name"]: b["requests"] for b in json.loads(data)["backends"]}
        self.assertEqual(sorted(after), sorted(self.names(ADDRS[:2]) + ["static"]))
        for name, n in before.items():
            self.assertEqual(after[name], n, name)
        self.stop_gateway()


if __name__ == "__main__":
    harness.main()
