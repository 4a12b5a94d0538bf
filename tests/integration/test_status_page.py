"""The admin listener's status page in a real, headless Chromium.

Starts llmsim replicas and the gateway with an admin listener, then runs
tests/node/status_page.mjs (playwright-core driving Debian's /usr/bin/chromium):
the table fills with the backends, they show as up, numbers move once traffic
flows, a drain button drains and undrains, and a screenshot is taken into the
test's temporary folder; with 3 backends, and with a fleet of 50. Then the history
(tests/node/status_history.mjs): under load, one replica slowed tenfold mid-run through
llmsim's control API; its TTFT plot rises and its share of the picks goes to the others
(build/test-artifacts/status-history.png is the screenshot).
"""

import json
import os
import re
import shutil
import struct
import subprocess
import unittest

import harness
from harness import Harness

NODE_DIR = os.path.join(harness.SRC, "tests", "node")
SCRIPT = os.path.join(NODE_DIR, "status_page.mjs")
HISTORY_SCRIPT = os.path.join(NODE_DIR, "status_history.mjs")
ARTIFACTS = os.path.join(harness.BUILD, "test-artifacts")
HAVE_BROWSER = os.path.exists("/usr/bin/chromium") and shutil.which("node") is not None
HAVE_PLAYWRIGHT = os.path.isdir(os.path.join(NODE_DIR, "node_modules", "playwright-core"))
FAST = ["--decode-ms", "3", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


class StatusPageTest(Harness):

    def page(self, names, sim_args=lambda i: FAST, viewport="1400x500", **conf_extra):
        """The fleet (one llmsim per name), the gateway with an admin listener, and the
        page driven by status_page.mjs; returns what the script saw and the screenshot."""
        if not HAVE_BROWSER:
            self.skipTest("no /usr/bin/chromium or node (tools/install-deps.sh installs chromium)")
        if not HAVE_PLAYWRIGHT:
            self.fail("playwright-core is missing: run `npm ci` in tests/node (tests/run.sh does)")
        backends = []
        for i, n in enumerate(names):
            _, port = self.start_llmsim(n, args=sim_args(i))
            backends.append({"name": n, "url": "http://127.0.0.1:%d" % port, "models": ["m"]})
        conf = self.base_config(backends, admin={"listen": "127.0.0.1:0"}, **conf_extra)
        proc, port = self.start_gateway(conf)
        admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        shot = self.path("status.png")
        p = subprocess.run(["node", SCRIPT, "http://127.0.0.1:%d" % admin,
                            "http://127.0.0.1:%d" % port, "m", ",".join(names), shot,
                            self.path("chromium-profile"), viewport],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=180,
                           cwd=NODE_DIR)
        out, err = p.stdout.decode(), p.stderr.decode()
        self.assertEqual(p.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (out, err[-4000:]))
        seen = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(sorted(seen["rows"]), sorted(names))
        self.assertEqual((seen["drained"].lower(), seen["undrained"].lower()), ("draining", "up"))
        self.assertGreaterEqual(sum(seen["after"].values()), 1)
        self.assertTrue(any("%" in s for s in seen["shares"]), seen["shares"])
        self.assertIn("config generation 1", seen["header"])
        self.assertGreater(seen["updates"], 2)
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(shot), 5000)
        if os.environ.get("LG_KEEP_SCREENSHOT"):
            shutil.copy(shot, os.environ["LG_KEEP_SCREENSHOT"])
        return seen, shot

    def test_status_page_in_chromium(self):
        self.page(["r1", "r2", "r3"])

    def test_status_page_with_50_backends(self):
        """A fleet of 50 (of mixed speeds): every row there and up, every backend's count
        moves with traffic, the page keeps refreshing, and the whole table is drawn (the
        full-page screenshot is as tall as 50 rows). docker/status-page.png is this test's
        screenshot (LG_KEEP_SCREENSHOT=docker/status-page.png)."""
        names = ["gpu-%02d" % (i + 1) for i in range(50)]
        speeds = [1, 1, 0.5, 1, 0.25]
        seen, shot = self.page(
            names, sim_args=lambda i: FAST + ["--speed", str(speeds[i % len(speeds)])],
            viewport="1500x900", health={"scrape_interval": "1s"})
        self.assertEqual(len(seen["rows"]), 50)
        self.assertTrue(all(v >= 1 for v in seen["after"].values()), seen["after"])
        # a score on every row the router may pick (the drained one says why not)
        unscored = {n: v for n, v in seen["scores"].items()
                    if n != names[0] and not re.match(r"^\d+(\.\d+)?", v)}
        self.assertFalse(unscored, seen["scores"])
        with open(shot, "rb") as f:
            head = f.read(24)
        width, height = struct.unpack(">II", head[16:24])
        self.assertEqual(width, 1500)
        self.assertGreater(height, 50 * 20)  # every row drawn, not only the first screen

    def test_history_shows_a_slowed_replica(self):
        """Three replicas under a closed loop of streams, the history at one point a
        second; r2 slowed tenfold mid-run. From the history the page drew: r2's TTFT p50
        rises and its share of the router's picks falls while the others' grows; as
        drawn: r2's TTFT line climbs in its plot. The screenshot is kept under the build
        folder (test-artifacts/status-history.png)."""
        if not HAVE_BROWSER:
            self.skipTest("no /usr/bin/chromium or node (tools/install-deps.sh installs chromium)")
        if not HAVE_PLAYWRIGHT:
            self.fail("playwright-core is missing: run `npm ci` in tests/node (tests/run.sh does)")
        names = ["r1", "r2", "r3"]
        backends, ports = [], {}
        sim = ["--decode-ms", "5", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]
        for n in names:
            _, ports[n] = self.start_llmsim(n, args=sim)
            backends.append({"name": n, "url": "http://127.0.0.1:%d" % ports[n],
                             "models": ["m"]})
        conf = self.base_config(
            backends, routing={"policy": "least_request"}, health={"scrape_interval": "250ms"},
            admin={"listen": "127.0.0.1:0", "history": {"resolution": "1s", "window": "20s"}})
        proc, port = self.start_gateway(conf)
        admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, "status-history.png")
        if os.path.exists(shot):
            os.unlink(shot)
        p = subprocess.run(["node", HISTORY_SCRIPT, "http://127.0.0.1:%d" % admin,
                            "http://127.0.0.1:%d" % port, "m", ",".join(names),
                            "http://127.0.0.1:%d" % ports["r2"], shot,
                            self.path("chromium-profile")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=180,
                           cwd=NODE_DIR)
        out, err = p.stdout.decode(), p.stderr.decode()
        self.assertEqual(p.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (out, err[-4000:]))
        seen = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(seen["rows"], [""] + names)  # the fleet's row first
        self.assertEqual(seen["plots"], 5 * (len(names) + 1))
        self.assertEqual(seen["elsewhere"], [])  # nothing loaded from elsewhere: works offline
        # the page's copy, merged from replies with ?since=, is the gateway's history
        self.assertGreaterEqual(seen["merged"]["common"], 8, seen["merged"])
        self.assertEqual(seen["merged"]["mismatch"], 0, seen["merged"])
        self.assertGreaterEqual(seen["points"]["before"], 3, seen)
        self.assertGreaterEqual(seen["points"]["after"], 5, seen)
        self.assertGreater(seen["fleet_rps"], 5, seen)
        self.assertTrue(any(r.startswith("least_request:") for r in seen["reasons"]), seen["reasons"])
        self.assertIn("least_request:", seen["legend"])
        b = seen["backends"]
        slow = b["r2"]
        # its TTFT rises (tenfold slower: at least three times its median before)...
        self.assertIsNotNone(slow["ttft_p50_after"], seen)
        self.assertGreater(slow["ttft_p50_after"], 3 * slow["ttft_p50_before"], seen)
        # ...and the router moves its share to the others
        self.assertLess(slow["share_after"], 0.6 * slow["share_before"], seen)
        for n in ("r1", "r3"):
            self.assertGreater(b[n]["share_after"], b[n]["share_before"], (n, seen))
            self.assertLess(b[n]["ttft_p50_after"], slow["ttft_p50_after"], (n, seen))
        self.assertEqual({v["health"] for v in b.values()}, {"up"})
        # as drawn: the line climbs (a smaller y is higher up) past where it was
        ys = seen["slow"]
        self.assertEqual(ys["name"], "r2")
        self.assertTrue(ys["y_before"] and ys["y_after"], ys)
        self.assertLess(min(ys["y_after"]), min(ys["y_before"]) - 5, ys)
        with open(shot, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    harness.main()
