"""`llmgate --probe`: the containers' health check, against a real gateway."""

import subprocess

import harness
from harness import Harness, free_port


def probe(*args):
    p = subprocess.run([harness.binary("llmgate")] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=20)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


class ProbeTest(Harness):

    def test_probe(self):
        _, sim = self.start_llmsim("r1")
        conf = self.base_config([{"name": "r1", "url": "http://127.0.0.1:%d" % sim,
                                  "models": ["m"]}])
        conf["listen"] = "0.0.0.0:%d" % free_port()  # a wildcard: probed through loopback
        proc, port = self.start_gateway(conf)
        rc, out, err = probe("--probe", "-c", self.path("llmgate.json"))
        self.assertEqual(rc, 0, err)
        self.assertIn("/healthz: 200", out)
        rc, out, err = probe("--probe=http://127.0.0.1:%d/healthz" % port)
        self.assertEqual((rc, out.strip()), (0, "http://127.0.0.1:%d/healthz: 200" % port))
        rc, _, err = probe("--probe=http://127.0.0.1:%d/nope" % port)
        self.assertEqual(rc, 1)
        self.assertIn("status 404", err)
        self.assertEqual(proc.stop(), 0)  # (sanitizer and valgrind runs check the exit too)
        rc, _, err = probe("--probe", "-c", self.path("llmgate.json"))
        self.assertEqual(rc, 1)
        self.assertIn("Connection refused", err)
        rc, _, err = probe("--probe=ftp://x")
        self.assertEqual(rc, 1)
        self.assertIn("expected http://", err)


if __name__ == "__main__":
    harness.main()
