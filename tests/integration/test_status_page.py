"""The admin listener's status page in a real, headless Chromium.

Starts llmsim replicas and the gateway with an admin listener, then runs
tests/node/status_page.mjs (playwright-core driving Debian's /usr/bin/chromium):
the table fills with the backends, they show as up, numbers move once traffic
flows, a drain button drains and undrains, and a screenshot is taken into the
test's temporary folder.
"""

import json
import os
import shutil
import subprocess
import unittest

import harness
from harness import Harness

NODE_DIR = os.path.join(harness.SRC, "tests", "node")
SCRIPT = os.path.join(NODE_DIR, "status_page.mjs")
HAVE_BROWSER = os.path.exists("/usr/bin/chromium") and shutil.which("node") is not None
HAVE_PLAYWRIGHT = os.path.isdir(os.path.join(NODE_DIR, "node_modules", "playwright-core"))
FAST = ["--decode-ms", "3", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


class StatusPageTest(Harness):

    def test_status_page_in_chromium(self):
        if not HAVE_BROWSER:
            self.skipTest("no /usr/bin/chromium or node (tools/install-deps.sh installs chromium)")
        if not HAVE_PLAYWRIGHT:
            self.fail("playwright-core is missing: run `npm ci` in tests/node (tests/run.sh does)")
        names = ["r1", "r2", "r3"]
        backends = []
        for n in names:
            _, port = self.start_llmsim(n, args=FAST)
            backends.append({"name": n, "url": "http://127.0.0.1:%d" % port, "models": ["m"]})
        conf = self.base_config(backends, admin={"listen": "127.0.0.1:0"})
        proc, port = self.start_gateway(conf)
        admin = int(proc.wait_for(r"llmgate ready .* admin=[^ ]*:(\d+)").group(1))
        shot = self.path("status.png")
        p = subprocess.run(["node", SCRIPT, "http://127.0.0.1:%d" % admin,
                            "http://127.0.0.1:%d" % port, "m", ",".join(names), shot,
                            self.path("chromium-profile")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                           cwd=NODE_DIR)
        out, err = p.stdout.decode(), p.stderr.decode()
        self.assertEqual(p.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (out, err[-4000:]))
        seen = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(sorted(seen["rows"]), names)
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


if __name__ == "__main__":
    harness.main()
