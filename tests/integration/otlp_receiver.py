"""An OTLP/HTTP JSON trace receiver for the tests: POST /v1/traces, each
body checked against OTLP's ExportTraceServiceRequest (opentelemetry-proto's
trace.proto and common.proto, in their JSON mapping: lowerCamelCase field
names, trace and span ids as hex of 32 and 16 digits, 64-bit integers as
decimal strings, enums as integers) before its spans are kept. A body that
breaks the schema is answered 400 and kept in `errors`.

No OpenTelemetry package on the registries this project reaches receives
OTLP (the JavaScript SDK has exporters and a serializer, no receiver), so
the schema is checked here, field by field."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")
UINT64 = re.compile(r"^[0-9]{1,20}$")
INT64 = re.compile(r"^-?[0-9]{1,19}$")

REQUEST_KEYS = {"resourceSpans"}
RESOURCE_SPANS_KEYS = {"resource", "scopeSpans", "schemaUrl"}
RESOURCE_KEYS = {"attributes", "droppedAttributesCount"}
SCOPE_SPANS_KEYS = {"scope", "spans", "schemaUrl"}
SCOPE_KEYS = {"name", "version", "attributes", "droppedAttributesCount"}
SPAN_KEYS = {"traceId", "spanId", "traceState", "parentSpanId", "flags", "name", "kind",
             "startTimeUnixNano", "endTimeUnixNano", "attributes", "droppedAttributesCount",
             "events", "droppedEventsCount", "links", "droppedLinksCount", "status"}
EVENT_KEYS = {"timeUnixNano", "name", "attributes", "droppedAttributesCount"}
STATUS_KEYS = {"message", "code"}
VALUE_KEYS = {"stringValue", "boolValue", "intValue", "doubleValue", "arrayValue",
              "kvlistValue", "bytesValue"}


class SchemaError(Exception):
    pass


def _need(cond, what):
    if not cond:
        raise SchemaError(what)


def _keys(obj, allowed, where):
    _need(isinstance(obj, dict), "%s: not an object" % where)
    extra = set(obj) - allowed
    _need(not extra, "%s: unknown fields %s" % (where, sorted(extra)))


def _attributes(attrs, where):
    _need(isinstance(attrs, list), "%s.attributes: not a list" % where)
    seen = set()
    for kv in attrs:
        _keys(kv, {"key", "value"}, where + ".attributes[]")
        _need(isinstance(kv.get("key"), str) and kv["key"], "%s: attribute key" % where)
        _need(kv["key"] not in seen, "%s: attribute %s twice" % (where, kv["key"]))
        seen.add(kv["key"])
        v = kv.get("value")
        _keys(v, VALUE_KEYS, "%s.%s" % (where, kv["key"]))
        _need(len(v) == 1, "%s.%s: one value" % (where, kv["key"]))
        (t, x), = v.items()
        ok = {"stringValue": lambda: isinstance(x, str),
              "boolValue": lambda: isinstance(x, bool),
              "intValue": lambda: isinstance(x, str) and INT64.match(x) is not None,
              "doubleValue": lambda: isinstance(x, (int, float)) and not isinstance(x, bool)}
        _need(t in ok and ok[t](), "%s.%s: bad %s %r" % (where, kv["key"], t, x))


def _nanos(v, where):
    _need(isinstance(v, str) and UINT64.match(v) is not None, "%s: not a uint64 string" % where)
    return int(v)


def validate(doc):
    """Checks an ExportTraceServiceRequest; returns its spans (dicts)."""
    spans = []
    _keys(doc, REQUEST_KEYS, "request")
    _need(isinstance(doc.get("resourceSpans"), list), "resourceSpans")
    for rs in doc["resourceSpans"]:
        _keys(rs, RESOURCE_SPANS_KEYS, "resourceSpans[]")
        _keys(rs.get("resource", {}), RESOURCE_KEYS, "resource")
        _attributes(rs["resource"].get("attributes", []), "resource")
        for ss in rs.get("scopeSpans", []):
            _keys(ss, SCOPE_SPANS_KEYS, "scopeSpans[]")
            _keys(ss.get("scope", {}), SCOPE_KEYS, "scope")
            for s in ss.get("spans", []):
                _keys(s, SPAN_KEYS, "span")
                _need(HEX32.match(s.get("traceId", "")) and s["traceId"] != "0" * 32, "traceId")
                _need(HEX16.match(s.get("spanId", "")) and s["spanId"] != "0" * 16, "spanId")
                if "parentSpanId" in s:
                    _need(HEX16.match(s["parentSpanId"]) is not None, "parentSpanId")
                _need(isinstance(s.get("name"), str) and s["name"], "name")
                _need(s.get("kind") in (0, 1, 2, 3, 4, 5), "kind %r" % s.get("kind"))
                start = _nanos(s.get("startTimeUnixNano"), "startTimeUnixNano")
                end = _nanos(s.get("endTimeUnixNano"), "endTimeUnixNano")
                _need(start > 0 and end >= start, "span %s ends before it starts" % s["name"])
                _attributes(s.get("attributes", []), "span " + s["name"])
                for e in s.get("events", []):
                    _keys(e, EVENT_KEYS, "event")
                    t = _nanos(e.get("timeUnixNano"), "event.timeUnixNano")
                    _need(start <= t <= end, "event %s outside its span" % e.get("name"))
                    _need(isinstance(e.get("name"), str) and e["name"], "event.name")
                st = s.get("status", {})
                _keys(st, STATUS_KEYS, "status")
                _need(st.get("code", 0) in (0, 1, 2), "status.code")
                if "traceState" in s:
                    _need(isinstance(s["traceState"], str), "traceState")
                spans.append(s)
    return spans


def attrs(span):
    """A span's attributes as a dict of plain values."""
    out = {}
    for kv in span.get("attributes", []):
        (t, x), = kv["value"].items()
        out[kv["key"]] = int(x) if t == "intValue" else x
    return out


class Receiver:
    """Listens on loopback; `spans` grows as exports arrive."""

    def __init__(self, status=200):
        self.spans = []
        self.errors = []
        self.posts = []
        self.status = status
        self.lock = threading.Lock()
        recv = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                code = recv.status
                try:
                    if self.path != "/v1/traces":
                        raise SchemaError("path %s" % self.path)
                    if self.headers.get("Content-Type") != "application/json":
                        raise SchemaError("content type %s" % self.headers.get("Content-Type"))
                    spans = validate(json.loads(body))
                    with recv.lock:
                        recv.posts.append(dict(self.headers))
                        recv.spans.extend(spans)
                except (ValueError, SchemaError) as e:
                    with recv.lock:
                        recv.errors.append(str(e))
                    code = 400
                out = b"{}"
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def trace(self, trace_id):
        with self.lock:
            return [s for s in self.spans if s["traceId"] == trace_id]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
