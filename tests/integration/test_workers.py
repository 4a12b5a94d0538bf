"""Worker count: "auto" (the default) sizes the workers from the CPUs the
process may use, not the machine's.

The gateway is started pinned to CPUs as taskset does (the child's affinity
mask set before exec): pinned to one CPU it runs one worker and its ready
line says why; "auto" in the file means the same; a number is used as
given. A reload keeps the count chosen at start, and refuses another number.
The containers' CPU quota (cgroup cpu.max / cpu.cfs_quota_us) is tested in
test_container.py; its parsing in tests/unit/test_cpus.c.
"""

import json
import os
import re
import signal

import harness
from harness import Harness, http_request, metric, parse_prometheus

ONLINE = os.sysconf("SC_NPROCESSORS_ONLN")


def pinned(cpus):
    """preexec_fn: the child's affinity mask is cpus (as taskset -c)."""
    return lambda: os.sched_setaffinity(0, cpus)


class WorkersTest(Harness):

    def setUp(self):
        super().setUp()
        self.mine = sorted(os.sched_getaffinity(0))
        _, self.sim = self.start_llmsim("r1")

    def conf(self, **extra):
        conf = self.base_config([{"name": "r1", "url": "http://127.0.0.1:%d" % self.sim,
                                  "models": ["m"]}], admin={"listen": "127.0.0.1:0"})
        del conf["workers"]  # the default: auto
        conf.update(extra)
        return conf

    def gateway(self, conf, cpus):
        p, port = self.start_gateway(conf, preexec_fn=pinned(cpus))
        m = p.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+) workers=(\d+) \(([^)]*)\) backends=1 ")
        return p, port, int(m.group(1)), int(m.group(2)), m.group(3)

    def workers_metric(self, admin):
        status, _, data = http_request(admin, "GET", "/metrics")
        self.assertEqual(status, 200)
        return metric(parse_prometheus(data.decode()), "llmgate_workers")

    def test_pinned_to_one_cpu(self):
        cpu = self.mine[-1]
        p, port, admin, n, why = self.gateway(self.conf(), {cpu})
        self.assertEqual(n, 1, p.output())
        # the affinity decides, unless a cgroup quota of this machine is tighter (never below 1)
        self.assertRegex(why, r"(^|; )affinity 1 of %d CPUs($|;)" % ONLINE)
        self.assertEqual(self.workers_metric(admin), 1)
        status, _, _ = http_request(port, "POST", "/v1/chat/completions",
                                    harness.chat_body(max_tokens=2))
        self.assertEqual(status, 200)

        # a reload keeps the count chosen at start: "auto" and that number pass, another does not
        path = self.path("llmgate.json")
        for workers, outcome in (("auto", "reloaded"), (1, "reloaded"), (2, "refused")):
            conf = self.conf(workers=workers)
            with open(path + ".tmp", "w") as f:
                f.write(json.dumps(conf))
            os.replace(path + ".tmp", path)
            mark = len(p.lines)
            p.signal(signal.SIGHUP)
            p.wait_for(r"configuration reload%s" % (
                "ed" if outcome == "reloaded" else " refused"), start=mark)
        p.wait_for(r"error: /workers: the worker count cannot change on reload \(1 in force, 2 in "
                   r"the file\)")

    def test_auto_word_and_a_number(self):
        if len(self.mine) < 2:
            self.skipTest("needs two CPUs in this process's affinity mask")
        two = set(self.mine[:2])
        _, _, _, n, why = self.gateway(self.conf(workers="AUTO"), two)
        quota = re.search(r"cgroup \S+ \d+/\d+ -> (\d+)", why)
        self.assertEqual(n, min(2, int(quota.group(1))) if quota else 2, why)
        self.assertIn("affinity 2 of %d CPUs" % ONLINE, why)
        # a number is what the file says, whatever the CPUs
        _, _, admin, n, why = self.gateway(self.conf(workers=3), {self.mine[0]})
        self.assertEqual((n, why), (3, "configured"))
        self.assertEqual(self.workers_metric(admin), 3)


if __name__ == "__main__":
    harness.main()
