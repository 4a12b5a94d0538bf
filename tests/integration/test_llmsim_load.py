"""llmsim stays cheap: 1,000 concurrent streams on one replica use a small
fraction of a core (CPU time read from /proc/PID/stat over a window)."""

import json
import os
import selectors
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from harness import http_request, wait_until  # noqa: E402

STREAMS = 1000


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def state(port):
    return json.loads(http_request(port, "GET", "/sim/state")[2])


class LlmsimLoad(harness.Harness):

    def measure(self, name, args, window=3.0):
        """Opens STREAMS streams, waits until all run, then returns (llmsim CPU
        share of one core, client-side bytes per second) over `window`."""
        proc, port = self.start_llmsim(name, args=["--slots", str(STREAMS), "--quiet"] + args)
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 200}],
                           "max_tokens": 100000, "stream": True}).encode()
        req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
        sel = selectors.DefaultSelector()
        socks = []
        try:
            for _ in range(STREAMS):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(req)
                s.setblocking(False)
                sel.register(s, selectors.EVENT_READ)
                socks.append(s)
            wait_until(lambda: state(port)["running"] == STREAMS, 30, interval=0.1,
                       what="%d running streams" % STREAMS)
            received = 0
            c0, t0 = cpu_seconds(proc.pid), time.monotonic()
            while time.monotonic() - t0 < window:
                # drain in batches, as a client reading many streams would
                for key, _ in sel.select(0.1):
                    try:
                        received += len(key.fileobj.recv(1 << 16))
                    except BlockingIOError:
                        pass
                time.sleep(0.05)
            c1, t1 = cpu_seconds(proc.pid), time.monotonic()
        finally:
            for s in socks:
                sel.unregister(s)
                s.close()
            sel.close()
        wait_until(lambda: state(port)["aborted"] == STREAMS, 30, interval=0.1,
                   what="every stream aborted")
        return (c1 - c0) / (t1 - t0), received / (t1 - t0)

    def test_thousand_streams_are_cheap(self):
        # default model with 1,000 running: 515 ms steps, about 2,000 tokens/s in all
        share, rate = self.measure("default", [])
        print("\n1000 streams, default timing: llmsim %.1f%% of a core, %.0f KB/s to clients"
              % (share * 100, rate / 1e3))
        self.assertLess(share, 0.15)
        # 100 ms steps: about 10,000 tokens/s in all, 10 per stream per second
        share, rate = self.measure("fast", ["--decode-ms", "15", "--decode-ms-per-seq", "0.085"])
        print("1000 streams, 100 ms steps: llmsim %.1f%% of a core, %.0f KB/s to clients"
              % (share * 100, rate / 1e3))
        self.assertLess(share, 0.5)


if __name__ == "__main__":
    harness.main()
