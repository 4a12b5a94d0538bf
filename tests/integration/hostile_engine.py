"""A scripted hostile inference engine (standard library only, real sockets).

    python3 hostile_engine.py MODE[:ARG] [MODE[:ARG]...] [--tls CERT KEY]

opens one listening socket per MODE on 127.0.0.1, prints
"hostile ready MODE=PORT MODE=PORT ..." and serves each connection in a
thread. GET /health answers 200; GET /metrics a small vLLM exposition
unless the mode replaces it; POST (an inference request) is where most
modes misbehave. What it did is printed as "hostile MODE ..." lines, which
the tests wait for.

Modes (POST unless said):
  garbage         a 200 head (chunked SSE), one good event, then bytes that
                  are no chunk framing; the connection stays open
  garbage_head    the status line, then binary garbage where headers belong
  endless_head    the status line, then header lines as fast as the socket
                  takes them, for ever
  slow_head:MS    the status line, then one header line every MS ms, for ever
  info_flood:MS   an interim "100 Continue" head every MS ms, for ever
  cl_chunked      a head with both Content-Length and Transfer-Encoding:
                  chunked, then a chunked SSE stream that ends cleanly
  long_line:MIB   a 200 SSE head, then "data: " and MIB MiB of 'x' without a
                  newline, streamed, then the connection closes
  flood:SECONDS   a 200 SSE stream of tiny events, 1000 per millisecond
                  (one every microsecond) for SECONDS, then [DONE] and the
                  end; prints how many events it sent
  metrics_huge:MIB  GET /metrics streams MIB MiB of valid exposition lines
                  (chunked, generated as sent, never held); prints how many
                  bytes the gateway took before it closed
  metrics_huge_cl:MIB  the same with a Content-Length of MIB MiB
  metrics_bad     GET /metrics with NaN, +Inf, negative and 1e308 gauges
  props:SLOTS     llama.cpp: GET /metrics in llama.cpp's names (6 processing,
                  2 deferred) and GET /props with total_slots SLOTS (a lie)
  (any other)     a well-behaved engine (a short SSE stream)
With --tls CERT KEY every socket speaks TLS with that certificate, and
every response closes its connection (each request is a new handshake).
"""

import socket
import ssl
import sys
import threading
import time

EVENT = (b'data: {"id":"h","object":"chat.completion.chunk","model":"m","choices":'
         b'[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}\n\n')
LAST = (b'data: {"id":"h","object":"chat.completion.chunk","model":"m","choices":'
        b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
METRICS = (b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
           b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n")
BAD_METRICS = (b"# TYPE vllm:num_requests_waiting gauge\n"
               b'vllm:num_requests_waiting{model_name="m"} NaN\n'
               b'vllm:num_requests_waiting{model_name="n"} +Inf\n'
               b"# TYPE vllm:num_requests_running gauge\n"
               b'vllm:num_requests_running{model_name="m"} -5\n'
               b'vllm:num_requests_running{model_name="n"} 1e308\n'
               b"# TYPE vllm:kv_cache_usage_perc gauge\n"
               b"vllm:kv_cache_usage_perc 1e308\n"
               b"vllm:kv_cache_usage_perc -Inf\n"
               b"# TYPE vllm:request_success_total counter\n"
               b"vllm:request_success_total NaN\n"
               b"vllm:request_success_total -1e308\n")
LLAMA_METRICS = (b"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 6\n"
                 b"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n")

lock = threading.Lock()


def say(*words):
    with lock:
        print("hostile " + " ".join(str(w) for w in words), flush=True)


def chunk(data):
    return b"%x\r\n" % len(data) + data + b"\r\n"


def read_request(c):
    """The request's head and body (Content-Length only); None at EOF."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = c.recv(65536)
        if not d:
            return None
        buf += d
    head, _, body = buf.partition(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    while len(body) < n:
        d = c.recv(65536)
        if not d:
            return None
        body += d
    method, path = head.split(b" ")[:2]
    return method.decode(), path.decode()


def plain(c, status, body, ctype=b"text/plain", close=False):
    c.sendall(b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n"
              % (status, ctype, len(body), b"Connection: close\r\n" if close else b"") + body)


def hold_open(c):
    """Reads until the gateway closes the connection."""
    try:
        while c.recv(65536):
            pass
    except OSError:
        pass


def send_counting(c, gen):
    """Sends what gen yields until the peer goes; returns the bytes it took."""
    sent = 0
    try:
        for data in gen:
            c.sendall(data)
            sent += len(data)
    except OSError:
        pass
    return sent


def metrics_lines(mib):
    line = b"vllm:num_requests_running{engine=\"0\",model_name=\"m\",pad=\"%s\"} 1\n" % (b"p" * 40)
    block = line * (65536 // len(line))
    n = (mib << 20) // len(block)
    for _ in range(n):
        yield block


# modes whose answer to a POST leaves the connection unusable
BAD_POST = ("garbage", "garbage_head", "endless_head", "slow_head", "info_flood", "cl_chunked",
            "long_line", "flood")


def post(mode, arg, c, tls):
    if mode == "garbage":
        c.sendall(SSE_HEAD + chunk(EVENT) + b"\x00\xff\x13garbage\r\n\xfe\xfe" * 64)
        say(mode, "sent garbage")
        hold_open(c)
        say(mode, "closed")
    elif mode == "garbage_head":
        c.sendall(b"HTTP/1.1 200 OK\r\n\x00\x01\x02\xff\xfe: \x80\x81\r\n\r\n" + EVENT)
        say(mode, "sent garbage")
        hold_open(c)
        say(mode, "closed")
    elif mode == "endless_head":
        line = b"X-Pad: " + b"a" * 1000 + b"\r\n"
        sent = send_counting(c, iter(lambda: line * 16, None))
        say(mode, "closed after %d bytes" % sent)
    elif mode == "slow_head":
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
        n = 0
        try:
            while True:
                time.sleep(int(arg) / 1000.0)
                c.sendall(b"X-Slow-%d: a\r\n" % n)
                n += 1
        except OSError:
            pass
        say(mode, "closed after %d lines" % n)
    elif mode == "info_flood":
        n = 0
        try:
            while True:
                c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                n += 1
                time.sleep(int(arg) / 1000.0)
        except OSError:
            pass
        say(mode, "closed after %d interim heads" % n)
    elif mode == "cl_chunked":
        body = chunk(EVENT) + chunk(LAST) + b"0\r\n\r\n"
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 5\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + body)
        say(mode, "sent")
        hold_open(c)
        say(mode, "closed")
    elif mode == "long_line":
        piece = b"x" * (1 << 20)
        c.sendall(SSE_HEAD + chunk(b"data: "))
        sent = send_counting(c, (chunk(piece) for _ in range(int(arg))))
        say(mode, "sent %d bytes of one line" % sent)
        c.close()
    elif mode == "flood":
        batch = EVENT * 1000  # one millisecond's events
        framed = chunk(batch)
        c.sendall(SSE_HEAD)
        t0 = time.monotonic()
        end = t0 + float(arg)
        sent = 0
        next_t = t0
        try:
            while time.monotonic() < end:
                c.sendall(framed)
                sent += 1000
                next_t += 0.001
                ahead = next_t - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            c.sendall(chunk(LAST) + b"0\r\n\r\n")
        except OSError as e:
            say(mode, "cut after %d events: %s" % (sent, e.__class__.__name__))
            return
        say(mode, "sent %d events in %.3f s" % (sent, time.monotonic() - t0))
        hold_open(c)
    else:  # a good answer
        head = SSE_HEAD.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n") if tls else SSE_HEAD
        c.sendall(head + chunk(EVENT * 3) + chunk(LAST) + b"0\r\n\r\n")


def get(mode, arg, c, path, tls):
    if path == "/metrics" and mode in ("metrics_huge", "metrics_huge_cl"):
        size = int(arg) << 20
        if mode == "metrics_huge":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            sent = send_counting(c, (chunk(b) for b in metrics_lines(int(arg))))
        else:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
                      % size)
            sent = send_counting(c, metrics_lines(int(arg)))
        say(mode, "metrics: the gateway took %d of %d bytes" % (sent, size))
        return False
    if path == "/metrics":
        body = {"metrics_bad": BAD_METRICS, "props": LLAMA_METRICS}.get(mode, METRICS)
        plain(c, 200, body, close=tls)
        return not tls
    if path == "/props" and mode == "props":
        say(mode, "props asked")
        plain(c, 200, b'{"total_slots":%d,"default_generation_settings":{"n_ctx":4096}}'
              % int(arg), b"application/json", close=tls)
        return not tls
    plain(c, 200, b"ok", close=tls)
    return not tls


def serve(mode, arg, c, tls):
    try:
        while True:
            r = read_request(c)
            if r is None:
                return
            method, path = r
            if method == "GET":
                if not get(mode, arg, c, path, tls):
                    return
                continue
            say(mode, "POST", path)
            post(mode, arg, c, tls)
            if tls or mode in BAD_POST:
                return
    except OSError:
        pass
    finally:
        try:
            c.close()
        except OSError:
            pass


def accept(mode, arg, s, ctx):
    while True:
        c, _ = s.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ctx is not None:
            try:
                c = ctx.wrap_socket(c, server_side=True)
            except (ssl.SSLError, OSError) as e:
                say(mode, "handshake failed: %s" % e)
                c.close()
                continue
        threading.Thread(target=serve, args=(mode, arg, c, ctx is not None), daemon=True).start()


def main():
    argv = sys.argv[1:]
    ctx = None
    if "--tls" in argv:
        i = argv.index("--tls")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(argv[i + 1], argv[i + 2])
        del argv[i:i + 3]
    ports = []
    for spec in argv:
        mode, _, arg = spec.partition(":")
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        ports.append("%s=%d" % (mode, s.getsockname()[1]))
        threading.Thread(target=accept, args=(mode, arg, s, ctx), daemon=True).start()
    say("ready", " ".join(ports))
    threading.Event().wait()


if __name__ == "__main__":
    main()
