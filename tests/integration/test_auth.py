"""API keys: Authorization: Bearer KEY checked against a keys file of SHA-256
hashes; 401/403/429; the key's name (never the key) in the access log; the
client's Authorization never forwarded (a backend's own key is sent
instead); keys re-read on SIGHUP, from a new path when the file names one.
"""

import hashlib
import json
import os
import signal
import socket
import subprocess
import time

import harness
from harness import Harness, RecordingProxy, chat_body, http_request, post_json, wait_until

FAST = ["--decode-ms", "2", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]
SLOW = ["--decode-ms", "20", "--decode-ms-per-seq", "0", "--prefill-us-per-token", "10"]

KEY_A = "sk-team-a-0123456789"
KEY_B = "sk-team-b-abcdefghij"
KEY_ALL = "sk-all-zyxwvutsrq"
KEY_NEW = "sk-new-key-5555"


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


def bearer(key):
    return {"Authorization": "Bearer " + key}


KEYS = {"keys": [
    {"name": "team-a", "sha256": sha(KEY_A), "models": ["m"], "max_concurrency": 1},
    {"name": "team-b", "sha256": sha(KEY_B), "models": "*",
     "rate": {"requests_per_second": 1, "burst": 2}},
    {"name": "all", "sha256": sha(KEY_ALL).upper(), "models": "*"},
]}


read_log = harness.read_access_log


class AuthTest(Harness):
    quiet_backends = True  # RecordingProxy in front of the backends

    def setUp(self):
        super().setUp()
        self.keys_path = self.path("keys.json")
        self.write_keys(KEYS)

    def write_keys(self, obj):
        with open(self.keys_path + ".tmp", "w") as f:
            json.dump(obj, f, indent=2)
        os.rename(self.keys_path + ".tmp", self.keys_path)

    def gateway(self, args=SLOW, api_key=None):
        _, sim = self.start_llmsim("r1", models=["m", "x"], args=args)
        self.rec = RecordingProxy(sim)
        self.addCleanup(self.rec.close)
        backend = {"name": "r1", "url": "http://127.0.0.1:%d" % self.rec.port, "models": ["m", "x"]}
        if api_key:
            backend["api_key"] = api_key
        conf = self.base_config([backend], access_log=self.path("access.log"),
                                auth={"keys_file": self.keys_path})
        return self.start_gateway(conf)

    def test_unknown_or_missing_key_is_401_and_nothing_is_forwarded(self):
        _, gw = self.gateway()
        for headers in ({}, bearer("sk-wrong"), {"Authorization": "Basic dXNlcjpwYXNz"},
                        {"Authorization": "Bearer"}, {"Authorization": "Bearer " + KEY_A + "x"}):
            status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(),
                                             headers=headers)
            self.assertEqual(status, 401, headers)
            self.assertEqual(obj["error"]["code"], "invalid_api_key")
            self.assertEqual(obj["error"]["type"], "authentication_error")
            self.assertEqual(hdrs["www-authenticate"], 'Bearer realm="llmgate"')
        status, _, _ = http_request(gw, "GET", "/v1/models")
        self.assertEqual(status, 401)
        # probes need no key
        status, _, _ = http_request(gw, "GET", "/healthz")
        self.assertEqual(status, 200)
        self.assertEqual(self.rec.connections, 0)
        # the scheme is case-insensitive, an upper-case hash in the file is fine
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                    headers={"Authorization": "bearer " + KEY_ALL})
        self.assertEqual(status, 200)
        status, _, _ = http_request(gw, "GET", "/v1/models", headers=bearer(KEY_ALL))
        self.assertEqual(status, 200)

    def test_model_not_allowed_is_403(self):
        _, gw = self.gateway()
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(model="x"),
                                      headers=bearer(KEY_A))
        self.assertEqual(status, 403)
        self.assertEqual(obj["error"]["code"], "model_not_allowed")
        self.assertEqual(obj["error"]["type"], "permission_error")
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(model="x", max_tokens=2),
                                    headers=bearer(KEY_B))
        self.assertEqual(status, 200)

    def test_a_duplicate_model_key_cannot_reach_another_model(self):
        """A key allowed model m only sends "model" twice (an engine may read the first,
        the gateway the last): refused with 400 naming the key, whatever the order or
        escape, and nothing reaches the backend."""
        _, gw = self.gateway(args=FAST)
        head = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, '
        bodies = [
            head + '"model": "m", "stream": false, "model": "x"}',
            head + '"model": "x", "stream": false, "model": "m"}',
            head + '"model": "x", "mod\\u0065l": "m"}',
            '{"model": "m", "stream": false, "messages": [], "stream": true}',
        ]
        for i, body in enumerate(bodies):
            status, _, data = http_request(gw, "POST", "/v1/chat/completions", body.encode(),
                                           headers=dict(bearer(KEY_A),
                                                        **{"Content-Type": "application/json",
                                                           "X-Request-Id": "dup-%d" % i}))
            self.assertEqual(status, 400, body)
            err = json.loads(data)["error"]
            self.assertEqual((err["code"], err["type"], err["param"]),
                             ("duplicate_key", "invalid_request_error",
                              "stream" if i == 3 else "model"), body)
            self.assertIn("more than once", err["message"])
        self.assertEqual(self.rec.connections, 0, "a body with a duplicate key was forwarded")
        # the key still works, and is still refused model x when it asks plainly
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(model="x"),
                                      headers=bearer(KEY_A))
        self.assertEqual(status, 403, obj)
        status, _, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                      headers=bearer(KEY_A))
        self.assertEqual(status, 200, obj)
        log = {r["id"]: r for r in read_log(self.path("access.log"), 6)}
        self.assertEqual((log["dup-1"]["status"], log["dup-1"]["error"], log["dup-1"]["key"]),
                         (400, "duplicate_key", "team-a"))

    def test_concurrency_limit(self):
        _, gw = self.gateway()
        s = self.stream(gw, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=40), headers=bearer(KEY_A))
        self.assertEqual(s.read_head(), 200)
        status, hdrs, obj, _ = post_json(gw, "/v1/chat/completions", chat_body(),
                                         headers=bearer(KEY_A))
        self.assertEqual(status, 429)
        self.assertEqual(obj["error"]["code"], "key_limit_reached")
        self.assertGreaterEqual(int(hdrs["retry-after"]), 1)
        # another key is not affected
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                    headers=bearer(KEY_ALL))
        self.assertEqual(status, 200)
        s.read_all()
        self.assertEqual(s.ended, "complete")
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                    headers=bearer(KEY_A))
        self.assertEqual(status, 200)
        # a client that leaves mid-stream gives its slot back
        s = self.stream(gw, "POST", "/v1/chat/completions",
                        chat_body(stream=True, max_tokens=200), headers=bearer(KEY_A))
        s.next_event()
        s.close()

        def free():
            st, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                    headers=bearer(KEY_A))
            return st == 200
        wait_until(free, timeout=5, what="the slot to come back")

    def test_rate_limit(self):
        _, gw = self.gateway(args=FAST)
        got = []
        for _ in range(3):
            status, hdrs, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                           headers=bearer(KEY_B))
            got.append((status, hdrs.get("retry-after")))
        # burst 2, then 1 per second
        self.assertEqual([g[0] for g in got[:2]], [200, 200])
        self.assertEqual(got[2][0], 429)
        self.assertEqual(got[2][1], "1")
        time.sleep(1.05)
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                    headers=bearer(KEY_B))
        self.assertEqual(status, 200)

    def test_authorization_is_not_forwarded_and_the_log_has_the_name(self):
        _, gw = self.gateway(args=FAST, api_key="backend-secret")
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                    headers=bearer(KEY_A))
        self.assertEqual(status, 200)
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                    headers=bearer("nope"))
        self.assertEqual(status, 401)
        sent = b"".join(bytes(d) for d in self.rec.downstream)
        self.assertNotIn(KEY_A.encode(), sent)
        self.assertEqual(sent.lower().count(b"authorization:"), 1)
        self.assertIn(b"Authorization: Bearer backend-secret\r\n", sent)
        log = read_log(self.path("access.log"), 2)
        self.assertEqual(sorted(str(r["key"]) for r in log), ["None", "team-a"])
        with open(self.path("access.log")) as f:
            text = f.read()
        self.assertNotIn(KEY_A, text)
        self.assertNotIn("nope", text)

    def test_authorization_is_not_forwarded_without_a_backend_key(self):
        _, gw = self.gateway(args=FAST)
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=2),
                                    headers=bearer(KEY_A))
        self.assertEqual(status, 200)
        sent = b"".join(bytes(d) for d in self.rec.downstream)
        self.assertNotIn(b"authorization:", sent.lower())

    def test_keys_reload_on_sighup(self):
        gwp, gw = self.gateway(args=FAST)
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(), headers=bearer(KEY_NEW))
        self.assertEqual(status, 401)
        keys = json.loads(json.dumps(KEYS))
        keys["keys"] = keys["keys"][1:] + [{"name": "new", "sha256": sha(KEY_NEW), "models": "*"}]
        self.write_keys(keys)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"keys: 3 keys loaded from", start=n)
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                    headers=bearer(KEY_NEW))
        self.assertEqual(status, 200)
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(), headers=bearer(KEY_A))
        self.assertEqual(status, 401)
        # a broken file keeps the keys in force and says where it is broken
        with open(self.keys_path, "w") as f:
            f.write('{"keys": [{"name": "x", "sha256": "abc", "models": "*"}]}')
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"keys\.json:1:35: error: /keys/0/sha256: must be 64 hexadecimal digits",
                     start=n)
        gwp.wait_for(r"keys reload failed: keeping the 3 keys in force", start=n)
        status, _, _, _ = post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                                    headers=bearer(KEY_NEW))
        self.assertEqual(status, 200)

    def test_keys_file_path_changes_on_sighup(self):
        gwp, gw = self.gateway(args=FAST)
        with open(self.path("llmgate.json")) as f:
            conf = json.load(f)
        other = self.path("keys-2.json")
        with open(other, "w") as f:
            json.dump({"keys": [{"name": "new", "sha256": sha(KEY_NEW), "models": "*"}]}, f)
        conf["auth"] = {"keys_file": other}
        self.write_config(conf)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"keys: 1 keys loaded from .*keys-2\.json \(a new keys file\)", start=n)
        gwp.wait_for(r"configuration reloaded", start=n)

        def status_of(key):
            return post_json(gw, "/v1/chat/completions", chat_body(max_tokens=1),
                             headers=bearer(key))[0]
        self.assertEqual((status_of(KEY_NEW), status_of(KEY_A)), (200, 401))
        # a file naming a third keys file, refused for another reason: the keys stay
        third = self.path("keys-3.json")
        with open(third, "w") as f:
            json.dump({"keys": [{"name": "a", "sha256": sha(KEY_A), "models": "*"}]}, f)
        refused = dict(conf, auth={"keys_file": third}, workers=3)
        self.write_config(refused)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"configuration reload refused", start=n)
        self.assertEqual((status_of(KEY_NEW), status_of(KEY_A)), (200, 401))
        # and it is keys-2.json that the next reload re-reads
        with open(other, "w") as f:
            json.dump({"keys": [{"name": "new", "sha256": sha(KEY_NEW), "models": "*"},
                                {"name": "b", "sha256": sha(KEY_B), "models": "*"}]}, f)
        self.write_config(conf)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"keys: 2 keys loaded from .*keys-2\.json$", start=n)
        self.assertEqual(status_of(KEY_B), 200)
        # auth cannot be turned off by a reload: it says so, and what to do
        del conf["auth"]
        self.write_config(conf)
        n = len(gwp.lines)
        gwp.signal(signal.SIGHUP)
        gwp.wait_for(r"error: /auth: API keys cannot be turned off on reload .*restart llmgate",
                     start=n)
        self.assertEqual(status_of(KEY_A), 401)

    def test_bad_keys_file_stops_the_start_with_positions(self):
        with open(self.keys_path, "w") as f:
            f.write('{"keys": [\n  {"name": "a", "sha256": "%s", "models": "*",\n'
                    '   "rate": {"requests_per_hour": 5}},\n'
                    '  {"name": "a", "sha256": "%s", "models": []}\n]}\n' % (sha("1"), sha("2")))
        conf = self.base_config([{"name": "r1", "url": "http://127.0.0.1:1", "models": ["m"]}],
                                auth=self.keys_path)
        path = self.write_config(conf)
        out = subprocess.run([harness.binary("llmgate"), "--check-config", path],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 2, out)
        errs = out.stderr.strip().splitlines()
        kp = self.keys_path
        self.assertEqual(errs, [
            kp + ':3:13: error: /keys/0/rate/requests_per_hour: unknown key "requests_per_hour"',
            kp + ':3:12: error: /keys/0/rate: give one of requests_per_second and '
            'requests_per_minute',
            kp + ':4:105: error: /keys/1/models: expected "*" or a list of 1 to 1024 model names',
        ])

    def test_hash_key_command(self):
        out = subprocess.run([harness.binary("llmgate"), "--hash-key"], input=KEY_A + "\n",
                             capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 0)
        self.assertEqual(out.stdout.strip(), sha(KEY_A))


if __name__ == "__main__":
    harness.main()
