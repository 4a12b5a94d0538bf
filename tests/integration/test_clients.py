"""Real clients through the gateway: the openai npm package and curl."""

import json
import os
import shutil
import subprocess
import unittest

import harness
from harness import Harness, sse_events

NODE_DIR = os.path.join(harness.SRC, "tests", "node")
FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]


class ClientsTest(Harness):

    def setUp(self):
        super().setUp()
        _, p1 = self.start_llmsim("r1", args=FAST)
        _, p2 = self.start_llmsim("r2", args=FAST)
        conf = self.base_config([
            {"name": "r1", "url": "http://127.0.0.1:%d" % p1, "models": ["m"]},
            {"name": "r2", "url": "http://127.0.0.1:%d" % p2, "models": ["m"]}])
        _, self.gw = self.start_gateway(conf)

    @unittest.skipUnless(shutil.which("node"), "node is not installed")
    def test_openai_npm_client(self):
        if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "openai")):
            self.fail("the openai npm package is missing: run `npm install` in tests/node "
                      "(tests/run.sh does it)")
        out = subprocess.run(["node", os.path.join(NODE_DIR, "openai_client.mjs"),
                              "http://127.0.0.1:%d/v1" % self.gw, "m"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        self.assertTrue(res["plain"]["content"])
        self.assertEqual(res["plain"]["completion_tokens"], 6)
        self.assertTrue(res["stream"]["content"])
        self.assertEqual(res["stream"]["completion_tokens"], 8)
        self.assertIsNotNone(res["stream"]["finish_reason"])
        self.assertEqual(res["error"]["status"], 404)
        self.assertEqual(res["error"]["code"], "model_not_found")

    @unittest.skipUnless(shutil.which("curl"), "curl is not installed")
    def test_curl(self):
        url = "http://127.0.0.1:%d/v1/chat/completions" % self.gw
        body = json.dumps({"model": "m", "stream": True, "max_tokens": 5,
                           "messages": [{"role": "user", "content": "hi"}]})
        out = subprocess.run(["curl", "-sS", "-N", "--fail", "-H",
                              "Content-Type: application/json", "-d", body, url],
                             capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        events = sse_events(out.stdout)
        self.assertEqual(events[-1], "[DONE]")
        self.assertGreaterEqual(len(events), 6)
        # a large body goes through curl's Expect: 100-continue path
        big = json.dumps({"model": "m", "max_tokens": 2,
                          "messages": [{"role": "user", "content": "x" * 300000}]})
        path = self.path("big.json")
        with open(path, "w") as f:
            f.write(big)
        out = subprocess.run(["curl", "-sS", "--fail", "-H", "Content-Type: application/json",
                              "--data-binary", "@" + path, "-w", "\n%{time_total}", url],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.strip().splitlines()
        self.assertEqual(json.loads(lines[0])["usage"]["completion_tokens"], 2)
        self.assertLess(float(lines[-1]), 0.9, "curl waited for 100 Continue")


if __name__ == "__main__":
    harness.main()
