"""An OTLP/HTTP trace receiver for the tests: POST /v1/traces, each body
checked against OTLP's ExportTraceServiceRequest (opentelemetry-proto's
trace.proto, common.proto and resource.proto) before its spans are kept. A
body that breaks the schema is answered 400 and kept in `errors`.

Both of OTLP/HTTP's encodings are read:
- application/json, OTLP's JSON mapping: lowerCamelCase field names, trace
  and span ids as hex of 32 and 16 digits, 64-bit integers as decimal
  strings, enums as integers;
- application/x-protobuf, the protobuf wire format, decoded here by a
  stdlib reader that knows each message's fields (number, wire type,
  repeated or not) and refuses any other, a field of the wrong wire type, a
  singular field twice, ids not 16 and 8 bytes, strings not UTF-8, bytes
  past a message's end. It yields the same dicts as the JSON mapping (proto3
  defaults filled in), which then get the same checks.

No OpenTelemetry package on the registries this project reaches receives
OTLP (the JavaScript SDK has exporters and a serializer, no receiver), so
the schema is checked here, field by field. Field numbers: github.com/
open-telemetry/opentelemetry-proto at ac2c4b5d1f3a6079de62f9afec860158ecc8af09
(opentelemetry/proto/collector/trace/v1/trace_service.proto,
opentelemetry/proto/trace/v1/trace.proto, .../common/v1/common.proto,
.../resource/v1/resource.proto)."""

import json
import re
import struct
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


# ---- protobuf ------------------------------------------------------------------

# message -> {field number: (JSON name, type, repeated)}; type is a scalar
# ("string", "bytes", "id16", "id8", "bool", "int64", "uint32", "enum",
# "fixed32", "fixed64", "double") or the name of a message
PB = {
    "ExportTraceServiceRequest": {1: ("resourceSpans", "ResourceSpans", True)},
    "ResourceSpans": {1: ("resource", "Resource", False),
                      2: ("scopeSpans", "ScopeSpans", True),
                      3: ("schemaUrl", "string", False)},
    "Resource": {1: ("attributes", "KeyValue", True),
                 2: ("droppedAttributesCount", "uint32", False),
                 3: ("entityRefs", "EntityRef", True)},
    "EntityRef": {1: ("schemaUrl", "string", False), 2: ("type", "string", False),
                  3: ("idKeys", "string", True), 4: ("descriptionKeys", "string", True)},
    "ScopeSpans": {1: ("scope", "InstrumentationScope", False),
                   2: ("spans", "Span", True),
                   3: ("schemaUrl", "string", False)},
    "InstrumentationScope": {1: ("name", "string", False), 2: ("version", "string", False),
                             3: ("attributes", "KeyValue", True),
                             4: ("droppedAttributesCount", "uint32", False)},
    "Span": {1: ("traceId", "id16", False), 2: ("spanId", "id8", False),
             3: ("traceState", "string", False), 4: ("parentSpanId", "id8", False),
             16: ("flags", "fixed32", False), 5: ("name", "string", False),
             6: ("kind", "enum", False), 7: ("startTimeUnixNano", "fixed64", False),
             8: ("endTimeUnixNano", "fixed64", False), 9: ("attributes", "KeyValue", True),
             10: ("droppedAttributesCount", "uint32", False), 11: ("events", "Event", True),
             12: ("droppedEventsCount", "uint32", False), 13: ("links", "Link", True),
             14: ("droppedLinksCount", "uint32", False), 15: ("status", "Status", False)},
    "Event": {1: ("timeUnixNano", "fixed64", False), 2: ("name", "string", False),
              3: ("attributes", "KeyValue", True),
              4: ("droppedAttributesCount", "uint32", False)},
    "Link": {1: ("traceId", "id16", False), 2: ("spanId", "id8", False),
             3: ("traceState", "string", False), 4: ("attributes", "KeyValue", True),
             5: ("droppedAttributesCount", "uint32", False), 6: ("flags", "fixed32", False)},
    "Status": {2: ("message", "string", False), 3: ("code", "enum", False)},
    "KeyValue": {1: ("key", "string", False), 2: ("value", "AnyValue", False)},
    # a oneof: one of these at most (checked by _attributes: "one value")
    "AnyValue": {1: ("stringValue", "string", False), 2: ("boolValue", "bool", False),
                 3: ("intValue", "int64", False), 4: ("doubleValue", "double", False),
                 5: ("arrayValue", "ArrayValue", False),
                 6: ("kvlistValue", "KeyValueList", False), 7: ("bytesValue", "bytes", False)},
    "ArrayValue": {1: ("values", "AnyValue", True)},
    "KeyValueList": {1: ("values", "KeyValue", True)},
}

# the wire type each type is written with
WIRE = {"bool": 0, "int64": 0, "uint32": 0, "enum": 0, "fixed64": 1, "double": 1,
        "fixed32": 5}

# proto3 defaults the JSON mapping would show for a field left out (what the
# JSON checks and the tests read as present)
DEFAULTS = {
    "Span": {"name": "", "kind": 0, "startTimeUnixNano": "0", "endTimeUnixNano": "0",
             "status": {"code": 0}},
    "Event": {"timeUnixNano": "0", "name": ""},
    "KeyValue": {"key": ""},
    "Status": {"code": 0},
}


def _varint(buf, i, end):
    v = shift = 0
    while True:
        _need(i < end, "varint past the end")
        b = buf[i]
        i += 1
        v |= (b & 0x7f) << shift
        if not b & 0x80:
            _need(v < 1 << 64, "varint over 64 bits")
            return v, i
        shift += 7
        _need(shift < 70, "varint over 10 bytes")


def _scalar(typ, wt, raw, where):
    """A field's value in the JSON mapping's form."""
    _need(wt == WIRE.get(typ, 2), "%s: wire type %d" % (where, wt))
    if typ == "string":
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaError("%s: not UTF-8" % where)
    if typ == "bytes":
        return bytes(raw).hex()
    if typ in ("id16", "id8"):
        _need(len(raw) == (16 if typ == "id16" else 8), "%s: %d bytes" % (where, len(raw)))
        return bytes(raw).hex()
    if typ == "bool":
        _need(raw in (0, 1), "%s: bool %d" % (where, raw))
        return bool(raw)
    if typ == "int64":
        return str(raw - (1 << 64) if raw >= 1 << 63 else raw)
    if typ == "uint32":
        _need(raw < 1 << 32, "%s: over 32 bits" % where)
        return raw
    if typ == "enum":
        _need(raw < 1 << 31, "%s: enum %d" % (where, raw))
        return raw
    if typ == "fixed64":
        return str(struct.unpack("<Q", raw)[0])
    if typ == "double":
        return struct.unpack("<d", raw)[0]
    return struct.unpack("<I", raw)[0]  # fixed32


def pb_decode(buf, msg="ExportTraceServiceRequest", start=0, end=None):
    """Decodes a message of OTLP's trace schema into the JSON mapping's dict."""
    end = len(buf) if end is None else end
    fields = PB[msg]
    out = {}
    i = start
    while i < end:
        tag, i = _varint(buf, i, end)
        num, wt = tag >> 3, tag & 7
        _need(num in fields, "%s: unknown field %d" % (msg, num))
        name, typ, repeated = fields[num]
        where = "%s.%s" % (msg, name)
        if wt == 0:
            raw, i = _varint(buf, i, end)
        elif wt == 1:
            _need(i + 8 <= end, "%s: fixed64 past the end" % where)
            raw, i = buf[i:i + 8], i + 8
        elif wt == 5:
            _need(i + 4 <= end, "%s: fixed32 past the end" % where)
            raw, i = buf[i:i + 4], i + 4
        elif wt == 2:
            n, i = _varint(buf, i, end)
            _need(i + n <= end, "%s: %d bytes past the end" % (where, n))
            raw, i = (i, i + n), i + n
        else:
            raise SchemaError("%s: wire type %d" % (where, wt))
        if typ in PB:
            _need(wt == 2, "%s: wire type %d" % (where, wt))
            val = pb_decode(buf, typ, raw[0], raw[1])
        else:
            val = _scalar(typ, wt, buf[raw[0]:raw[1]] if wt == 2 else raw, where)
        if repeated:
            out.setdefault(name, []).append(val)
        else:
            _need(name not in out, "%s: twice" % where)
            if msg == "AnyValue":
                _need(not out, "AnyValue: two values")
            out[name] = val
    for k, v in DEFAULTS.get(msg, {}).items():
        out.setdefault(k, dict(v) if isinstance(v, dict) else v)
    return out


def attrs(span):
    """A span's attributes as a dict of plain values."""
    out = {}
    for kv in span.get("attributes", []):
        (t, x), = kv["value"].items()
        out[kv["key"]] = int(x) if t == "intValue" else x
    return out


class Receiver:
    """Listens on loopback; `spans` grows as exports arrive."""

    def __init__(self, status=200, encoding=None):
        """encoding: "protobuf" or "json" to refuse the other (None: either)."""
        self.spans = []
        self.content_types = []
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
                    ctype = self.headers.get("Content-Type")
                    want = {"protobuf": "application/x-protobuf",
                            "json": "application/json"}.get(encoding)
                    if ctype not in ("application/json", "application/x-protobuf") \
                            or (want is not None and ctype != want):
                        raise SchemaError("content type %s" % ctype)
                    if ctype == "application/json":
                        spans = validate(json.loads(body))
                    else:
                        spans = validate(pb_decode(memoryview(body)))
                    with recv.lock:
                        recv.content_types.append(ctype)
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
