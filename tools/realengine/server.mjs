#!/usr/bin/env node
// realengine: an OpenAI-style inference server on llama.cpp, through the
// node-llama-cpp package's prebuilt CPU binary. It serves one GGUF model
// (by default a tiny one with seeded random weights, made by make_gguf.py)
// with real prefill and real decode steps, several requests batched in one
// context, a queue beyond its sequences, and /metrics in llama.cpp server's
// own vocabulary. It stands in for a real engine replica behind llmgate in
// tests and benchmarks (tools/realengine/README.md).
//
//   node tools/realengine/server.mjs [--listen 127.0.0.1:0] [--name r1]
//        [--threads 1] [--sequences 4] [--spares 3] [--ctx 2048] [--batch 512]
//        [--model FILE.gguf | --weights q8_0|f16|f32 --layers 4 --embd 512 ...]
//
// Prints "realengine ready name=NAME listen=ADDR:PORT ..." once it serves.

import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import crypto from "node:crypto";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));

// ---- options ----------------------------------------------------------------

const OPTIONS = {
    listen: { def: "127.0.0.1:0", help: "address to listen on (port 0: any free port)" },
    name: { def: "realengine", help: "replica name, in the ready line and the logs" },
    threads: { def: 1, int: true, help: "CPU threads llama.cpp computes with" },
    sequences: { def: 4, int: true, help: "requests run at once in the context (llama.cpp's --parallel)" },
    spares: { def: 3, int: true, help: "cleared sequences kept per slot, so that a slot is free when its answer ends" },
    ctx: { def: 2048, int: true, help: "context tokens per sequence (prompt + answer)" },
    batch: { def: 512, int: true, help: "tokens per decode step at most (prefill chunk)" },
    alias: { def: "", help: "model id in /v1/models and answers (default: the file's name)" },
    model: { def: "", help: "GGUF file to serve (default: the generated model below)" },
    "model-dir": { def: path.join(os.tmpdir(), "llmgate-realengine"),
                   help: "where generated models are kept" },
    weights: { def: "q8_0", help: "generated model: weight type q8_0, f16 or f32" },
    layers: { def: 4, int: true, help: "generated model: layers" },
    embd: { def: 512, int: true, help: "generated model: embedding width" },
    ff: { def: 1536, int: true, help: "generated model: feed-forward width" },
    seed: { def: 1, int: true, help: "generated model: weight seed" },
    "step-log": { def: "", help: "file: one JSON line per decode step (tokens, sequences, ms)" },
    "ready-file": { def: "", help: "file: the ready line is also written there once serving" },
    "replica-header": { def: "", help: "response header naming this replica (--name) in every answer" },
    quiet: { def: false, flag: true, help: "no per-request log lines" },
    "endpoint-load-metrics": { def: "off", help: "vLLM's load header on request (endpoint-load-metrics-format: TEXT|JSON): off, vllm (answers not streamed) or all (stream heads too)" },
    "enable-server-load-tracking": { def: false, flag: true, help: "vLLM's GET /load: {\"server_load\":N}, the requests being served" },
};

function usage(msg) {
    const lines = Object.entries(OPTIONS).map(([k, o]) =>
        `  --${k}${o.flag ? "" : " V"}`.padEnd(22) + o.help + (o.flag ? "" : ` (default ${o.def})`));
    process.stderr.write((msg ? `realengine: ${msg}\n` : "") +
                         "usage: node server.mjs [options]\n" + lines.join("\n") + "\n");
    process.exit(msg ? 2 : 0);
}

function parseArgs(argv) {
    const opt = Object.fromEntries(Object.entries(OPTIONS).map(([k, o]) => [k, o.def]));
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === "-h" || a === "--help") usage();
        const [key, inline] = a.startsWith("--") ? a.slice(2).split(/=(.*)/s) : [null];
        const o = OPTIONS[key];
        if (!o) usage(`unknown argument ${JSON.stringify(a)}`);
        if (o.flag) { opt[key] = true; continue; }
        const v = inline !== undefined ? inline : argv[++i];
        if (v === undefined) usage(`--${key} needs a value`);
        if (o.int) {
            if (!/^\d+$/.test(v) || +v < 1) usage(`--${key}: ${JSON.stringify(v)} is not a positive integer`);
            opt[key] = +v;
        } else {
            opt[key] = v;
        }
    }
    if (!["q8_0", "f16", "f32"].includes(opt.weights)) usage(`--weights: ${opt.weights}?`);
    if (!["off", "vllm", "all"].includes(opt["endpoint-load-metrics"])) {
        usage(`--endpoint-load-metrics: ${opt["endpoint-load-metrics"]}? (off, vllm or all)`);
    }
    const m = /^(.*):(\d+)$/.exec(opt.listen);
    if (!m) usage(`--listen: ${JSON.stringify(opt.listen)} is not HOST:PORT`);
    opt.host = m[1].replace(/^\[|\]$/g, "");
    opt.port = +m[2];
    return opt;
}

const opt = parseArgs(process.argv.slice(2));
const log = (...a) => { if (!opt.quiet) console.error(`realengine ${opt.name}:`, ...a); };

// The model: the file given, or the generated one (made once, atomically, so
// that replicas started together share it).
function modelPath() {
    if (opt.model) {
        if (!fs.existsSync(opt.model)) usage(`--model: no such file ${opt.model}`);
        return opt.model;
    }
    // named by the generator's own hash too: a changed generator makes a new file
    const gen = path.join(HERE, "make_gguf.py");
    const hash = crypto.createHash("sha256").update(fs.readFileSync(gen)).digest("hex").slice(0, 8);
    const file = path.join(opt["model-dir"], `tiny-${opt.weights}-l${opt.layers}-e${opt.embd}` +
                                             `-f${opt.ff}-s${opt.seed}-${hash}.gguf`);
    if (!fs.existsSync(file)) {
        fs.mkdirSync(opt["model-dir"], { recursive: true });
        const r = spawnSync("python3", [gen, file, "--type", opt.weights,
                                        "--layers", String(opt.layers), "--embd", String(opt.embd),
                                        "--ff", String(opt.ff), "--seed", String(opt.seed)],
                            { stdio: ["ignore", "inherit", "inherit"] });
        if (r.status !== 0) {
            console.error("realengine: make_gguf.py failed");
            process.exit(1);
        }
    }
    return file;
}

// ---- llama.cpp --------------------------------------------------------------

// The prebuilt CPU binary only: never a build from source, never a download.
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = "true";
let nlc;
try {
    nlc = await import("node-llama-cpp");
} catch (e) {
    console.error("realengine: the node-llama-cpp package is missing: run " +
                  "`npm ci --omit=optional --ignore-scripts` in tools/realengine (" + e.message + ")");
    process.exit(3);
}
const llama = await nlc.getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
    progressLogs: false, logLevel: nlc.LlamaLogLevel.error, maxThreads: opt.threads,
});
const file = modelPath();
const model = await llama.loadModel({ modelPath: file });
const context = await model.createContext({
    // --spares cleared sequences per slot besides its own (see "slots and the queue")
    contextSize: opt.ctx, sequences: (1 + opt.spares) * opt.sequences, batchSize: opt.batch, threads: opt.threads,
    failedCreationRemedy: false,
});
const alias = opt.alias || path.basename(file);
const BOS = model.tokens.bos;

// ---- metrics (llama.cpp server's server_metrics) ----------------------------

const metrics = {
    t_start: Math.floor(Date.now() / 1000),
    n_prompt_tokens_processed_total: 0, t_prompt_processing_total: 0,
    n_tokens_predicted_total: 0, t_tokens_generation_total: 0,
    // since the last /metrics request (llama.cpp resets this "bucket" then)
    n_prompt_tokens_processed: 0, t_prompt_processing: 0,
    n_tokens_predicted: 0, t_tokens_generation: 0,
    n_decode_total: 0, n_busy_slots_total: 0,
};

// Each llama_decode() call: counted, and logged with its size and duration
// when --step-log is set. node-llama-cpp batches the queued work of every
// sequence into one decode (initBatch, addToBatch per sequence, decodeBatch);
// its native context object is wrapped here to see each call.
const stepLog = opt["step-log"] ? fs.createWriteStream(opt["step-log"], { flags: "a" }) : null;
{
    const native = context._ctx;
    let cur = null;
    const wrap = {
        initBatch(n) {
            cur = { tokens: n, seqs: 0, parts: [] };
            return native.initBatch(n);
        },
        addToBatch(seqId, first, tokens, logits) {
            if (cur) { cur.seqs++; cur.parts.push(tokens.length); }
            return native.addToBatch(seqId, first, tokens, logits);
        },
        async decodeBatch() {
            const step = cur;
            cur = null;
            const t0 = performance.now();
            try {
                return await native.decodeBatch();
            } finally {
                const ms = performance.now() - t0;
                metrics.n_decode_total++;
                metrics.n_busy_slots_total += busySlots();
                if (step) {
                    if (stepLog) {
                        stepLog.write(JSON.stringify({ t: +(t0 / 1000).toFixed(6), ms: +ms.toFixed(3),
                                                       tokens: step.tokens, seqs: step.seqs,
                                                       parts: step.parts, busy: busySlots(),
                                                       queued: queue.length }) + "\n");
                    }
                }
            }
        },
    };
    // the addon object's methods are read-only: a proxy stands in for it
    context._ctx = new Proxy(native, {
        get(target, key) {
            if (Object.hasOwn(wrap, key)) return wrap[key];
            const v = target[key];
            return typeof v === "function" ? v.bind(target) : v;
        },
    });
}

// C++ iostream's default formatting of a double (llama.cpp writes every
// value through `stream << double`): 6 significant digits, %g style.
function cppDouble(v) {
    if (!Number.isFinite(v)) return v > 0 ? "inf" : v < 0 ? "-inf" : "nan";
    if (v === 0) return "0";
    const exp = Math.floor(Math.log10(Math.abs(Number(v.toPrecision(6)))));
    if (exp < -5 || exp >= 6) {
        let [mant, e] = v.toExponential(5).split("e");
        mant = mant.replace(/\.?0+$/, "");
        const n = +e;
        return `${mant}e${n < 0 ? "-" : "+"}${String(Math.abs(n)).padStart(2, "0")}`;
    }
    let s = v.toFixed(Math.max(0, 5 - exp));
    if (s.includes(".")) s = s.replace(/\.?0+$/, "");
    return s;
}

// The requests' tokens: the slots' sequences (a spare awaiting its clearing
// holds the last answer's, which no request uses; counted, they took the
// usage ratio over its slots' context past 1).
function kvCells() {
    let used = 0;
    for (const s of slots) if (s.seq) used += s.seq.nextTokenIndex;
    return used;
}

function metricsText() {
    const m = metrics;
    const defs = [
        // llama.cpp's server with its KV gauges (examples/server/server.cpp,
        // handle_metrics: the "counter" then the "gauge" entries of one table;
        // tests/fixtures/engines/llamacpp/metrics_with_kv.prom)
        ["prompt_tokens_total", "Number of prompt tokens processed.", "counter", m.n_prompt_tokens_processed_total],
        ["prompt_seconds_total", "Prompt process time", "counter", Math.floor(m.t_prompt_processing_total) / 1e3],
        ["tokens_predicted_total", "Number of generation tokens processed.", "counter", m.n_tokens_predicted_total],
        ["tokens_predicted_seconds_total", "Predict process time", "counter", Math.floor(m.t_tokens_generation_total) / 1e3],
        ["n_decode_total", "Total number of llama_decode() calls", "counter", m.n_decode_total],
        ["n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", "counter",
         Math.fround(m.n_busy_slots_total / Math.max(m.n_decode_total, 1))],
        ["prompt_tokens_seconds", "Average prompt throughput in tokens/s.", "gauge",
         m.n_prompt_tokens_processed ? 1e3 / m.t_prompt_processing * m.n_prompt_tokens_processed : 0],
        ["predicted_tokens_seconds", "Average generation throughput in tokens/s.", "gauge",
         m.n_tokens_predicted ? 1e3 / m.t_tokens_generation * m.n_tokens_predicted : 0],
        ["kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.", "gauge",
         kvCells() / (opt.ctx * opt.sequences)],
        ["kv_cache_tokens", "KV-cache tokens.", "gauge", kvCells()],
        ["requests_processing", "Number of requests processing.", "gauge", busySlots()],
        ["requests_deferred", "Number of requests deferred.", "gauge", queue.length],
    ];
    let out = "";
    for (const [name, help, type, value] of defs) {
        out += `# HELP llamacpp:${name} ${help}\n# TYPE llamacpp:${name} ${type}\n` +
               `llamacpp:${name} ${cppDouble(value)}\n`;
    }
    m.n_prompt_tokens_processed = 0;
    m.t_prompt_processing = 0;
    m.n_tokens_predicted = 0;
    m.t_tokens_generation = 0;
    return out;
}

// ---- load reports in vLLM's formats (tests/fixtures/engines/vllm/SOURCES.md) ----

// Python's repr() of a float: 3.0, 0.25, 1.5e-05, 1e+16
function pyRepr(v) {
    if (Number.isInteger(v) && Math.abs(v) < 1e16) return v.toFixed(1);
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-4 || a >= 1e16)) {
        const [mant, e] = v.toExponential().split("e");
        const n = +e;
        return `${mant}e${n < 0 ? "-" : "+"}${String(Math.abs(n)).padStart(2, "0")}`;
    }
    return String(v);
}

// vLLM's create_orca_header(): the waiting requests and the KV use (as
// /metrics' requests_deferred and kv_cache_usage_ratio hold them now), for
// a request's endpoint-load-metrics-format: TEXT or JSON in any case; null
// for anything else, as vLLM writes no header then.
function loadHeader(req) {
    const fmt = String(req.headers["endpoint-load-metrics-format"] || "").trim().toLowerCase();
    const waiting = pyRepr(queue.length);
    const kv = pyRepr(kvCells() / (opt.ctx * opt.sequences));
    if (fmt === "text") {
        return `TEXT named_metrics.num_requests_waiting=${waiting}, named_metrics.kv_cache_usage_perc=${kv}`;
    }
    if (fmt === "json") {
        return `JSON {"named_metrics": {"num_requests_waiting": ${waiting}, "kv_cache_usage_perc": ${kv}}}`;
    }
    return null;
}

let serverLoad = 0;  // vLLM's server_load_metrics: inference requests being served

// ---- slots and the queue ----------------------------------------------------

// A slot is free the moment its answer ends, as llama.cpp's server frees it
// (and counts it no longer in requests_processing). The sequence it ran on
// is cleared before it serves again, and clearing waits for the context's
// lock, which the other sequences' steps keep taking: 280 ms with three
// streams running. So the context holds --spares cleared sequences per
// slot, a slot takes a clean one for each request, and the one it leaves is
// cleared meanwhile; before, the slot idled and /metrics counted the
// finished request all that time. Under a queue the clearing can still fall
// behind and a request wait for a clean sequence (sequence_wait_ms in its
// log line): with one spare per slot 6-9% of the fast replica's requests
// waited over 10 ms at 10 req/s, with three 0.4-1.9% (NOTES.md 54).
const sequences = [];
for (let i = 0; i < (1 + opt.spares) * opt.sequences; i++) sequences.push(context.getSequence());
const clean = sequences.slice();  // cleared sequences, ready for a request
const cleanWaiters = [];          // requests waiting for one (all spares still clearing)

function takeSequence() {
    if (clean.length) return Promise.resolve(clean.shift());
    return new Promise((resolve) => cleanWaiters.push(resolve));
}

function giveBack(seq) {
    seq.clearHistory().catch((e) => log(`clearing a sequence failed: ${e.message}`)).finally(() => {
        if (cleanWaiters.length) cleanWaiters.shift()(seq);
        else clean.push(seq);
    });
}

const slots = [];
for (let i = 0; i < opt.sequences; i++) slots.push({ id: i, seq: null, job: null });
const queue = [];  // jobs waiting for a slot, oldest first

function busySlots() {
    return slots.reduce((n, s) => n + (s.job ? 1 : 0), 0);
}

function schedule() {
    while (queue.length) {
        const slot = slots.find((s) => !s.job);
        if (!slot) return;
        const job = queue.shift();
        slot.job = job;
        run(slot, job).catch((e) => job.fail(e)).finally(() => {
            if (slot.seq) giveBack(slot.seq);
            slot.seq = null;
            slot.job = null;
            schedule();
        });
    }
}

// Runs one request on a slot: prefill, then one token per decode step until
// max_tokens, the context's end, or the client leaving.
async function run(slot, job) {
    const tSlot = performance.now();
    slot.seq = await takeSequence();
    const t0 = performance.now();
    let tFirst = null;
    let n = 0;
    const limit = Math.min(job.maxTokens, opt.ctx - job.tokens.length);
    const options = { temperature: job.temperature };
    if (job.temperature > 0) {
        options.seed = job.seed;
        if (job.topP !== undefined) options.topP = job.topP;
        if (job.topK !== undefined) options.topK = job.topK;
    }
    let finish = "length";
    const recent = job.tokens.slice(-4);
    if (limit > 0 && !job.aborted) {
        for await (const tok of slot.seq.evaluate(job.tokens, options)) {
            if (tFirst === null) tFirst = performance.now();
            n++;
            if (model.isEogToken(tok)) { finish = "stop"; break; }
            const piece = model.detokenize([tok], false, recent);
            recent.push(tok);
            recent.shift();
            job.token(piece);
            if (n >= limit || job.aborted) break;
        }
    }
    const tEnd = performance.now();
    // what llama.cpp counts when a slot is released (server_metrics)
    const promptMs = (tFirst ?? tEnd) - t0;
    const genMs = tFirst === null ? 0 : tEnd - tFirst;
    metrics.n_prompt_tokens_processed_total += job.tokens.length;
    metrics.n_prompt_tokens_processed += job.tokens.length;
    metrics.t_prompt_processing_total += promptMs;
    metrics.t_prompt_processing += promptMs;
    metrics.n_tokens_predicted_total += n;
    metrics.n_tokens_predicted += n;
    metrics.t_tokens_generation_total += genMs;
    metrics.t_tokens_generation += genMs;
    log(`${job.id} prompt=${job.tokens.length} tokens=${n} prefill_ms=${promptMs.toFixed(1)} ` +
        `decode_ms=${genMs.toFixed(1)} sequence_wait_ms=${(t0 - tSlot).toFixed(1)}` +
        `${job.aborted ? " aborted" : ""}`);
    job.done(finish, n, {
        // llama.cpp's result timings (server_task_result_cmpl_final)
        cache_n: 0, prompt_n: job.tokens.length, prompt_ms: promptMs,
        prompt_per_token_ms: promptMs / job.tokens.length,
        prompt_per_second: 1e3 * job.tokens.length / promptMs,
        predicted_n: n, predicted_ms: genMs,
        predicted_per_token_ms: n ? genMs / n : 0, predicted_per_second: genMs ? 1e3 * n / genMs : 0,
    });
}

// ---- HTTP -------------------------------------------------------------------

const BODY_MAX = 16 << 20;

function sendJson(res, status, obj) {
    const body = JSON.stringify(obj);
    res.writeHead(status, { "Content-Type": "application/json; charset=utf-8",
                            "Content-Length": Buffer.byteLength(body) });
    res.end(body);
}

// Which replica answered, for benchmarks that count shares (llama.cpp sends
// no such header: off unless asked for).
function replicaHeader(res) {
    if (opt["replica-header"]) res.setHeader(opt["replica-header"], opt.name);
}

// llama.cpp's error body: {"error":{"code","message","type"}}
function sendError(res, status, message, type = "invalid_request_error") {
    sendJson(res, status, { error: { code: status, message, type } });
}

class BadRequest extends Error {}

function textOf(content) {
    if (typeof content === "string") return content;
    if (content === null || content === undefined) return "";
    if (Array.isArray(content)) {
        return content.map((p) => {
            if (p && p.type === "text" && typeof p.text === "string") return p.text;
            throw new BadRequest("unsupported content part: only text is served");
        }).join("");
    }
    throw new BadRequest("'content' must be a string or an array of text parts");
}

// The chat template: a fixed text one (the model has none of its own).
function chatPrompt(messages) {
    if (!Array.isArray(messages) || messages.length === 0) {
        throw new BadRequest("'messages' must be a non-empty array");
    }
    let text = "";
    for (const m of messages) {
        if (!m || typeof m.role !== "string") throw new BadRequest("each message needs a 'role'");
        text += `<|${m.role}|>\n${textOf(m.content)}\n`;
    }
    return text + "<|assistant|>\n";
}

function intField(body, names, def) {
    for (const k of names) {
        if (body[k] === undefined || body[k] === null) continue;
        if (!Number.isInteger(body[k])) throw new BadRequest(`'${k}' must be an integer`);
        return body[k];
    }
    return def;
}

function numField(body, name, def) {
    if (body[name] === undefined || body[name] === null) return def;
    if (typeof body[name] !== "number" || !Number.isFinite(body[name])) {
        throw new BadRequest(`'${name}' must be a number`);
    }
    return body[name];
}

let seqNo = 0;

// llama.cpp's random_string(): ids of 32 letters and digits
function randomString(n) {
    const abc = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let out = "";
    for (const b of crypto.randomBytes(n)) out += abc[b % abc.length];
    return out;
}

function handleCompletion(req, res, body, chat) {
    let prompt;
    if (chat) {
        prompt = chatPrompt(body.messages);
    } else {
        if (typeof body.prompt !== "string") throw new BadRequest("'prompt' must be a string");
        prompt = body.prompt;
    }
    if (body.n !== undefined && body.n !== 1) throw new BadRequest("Only one completion choice is allowed");
    let maxTokens = intField(body, ["max_completion_tokens", "max_tokens", "n_predict"], -1);
    if (maxTokens < 0) maxTokens = Infinity;  // llama.cpp's n_predict = -1: until the context ends
    const tokens = [BOS, ...model.tokenize(prompt)];
    if (tokens.length >= opt.ctx) {
        const e = new BadRequest(`the request exceeds the available context size (${tokens.length} ` +
                                 `tokens, context ${opt.ctx}), try increasing it`);
        e.type = "exceed_context_size_error";
        throw e;
    }
    const stream = body.stream === true;
    const includeUsage = stream && body.stream_options && body.stream_options.include_usage === true;
    const id = (chat ? "chatcmpl-" : "cmpl-") + randomString(32);
    const created = Math.floor(Date.now() / 1000);
    const modelName = typeof body.model === "string" ? body.model : alias;
    const fingerprint = "b-realengine";
    const object = chat ? "chat.completion.chunk" : "text_completion";
    const job = {
        id: `req${++seqNo}`, tokens, maxTokens, aborted: false,
        temperature: numField(body, "temperature", 0.8),
        seed: intField(body, ["seed"], crypto.randomInt(2 ** 31)),
        topP: body.top_p === undefined ? undefined : numField(body, "top_p"),
        topK: body.top_k === undefined ? undefined : intField(body, ["top_k"]),
    };
    const usage = (n) => ({ completion_tokens: n, prompt_tokens: tokens.length,
                            total_tokens: n + tokens.length });
    const chunk = (choices, extra) => JSON.stringify(Object.assign(
        { choices, created, id, model: modelName, system_fingerprint: fingerprint, object }, extra));
    const sse = (data) => res.write(`data: ${data}\n\n`);
    let text = "";
    replicaHeader(res);
    const loadMode = opt["endpoint-load-metrics"];
    if (stream) {
        const head = { "Content-Type": "text/event-stream" };
        const load = loadMode === "all" ? loadHeader(req) : null;
        if (load) head["endpoint-load-metrics"] = load;
        res.writeHead(200, head);
        if (chat) sse(chunk([{ finish_reason: null, index: 0, delta: { role: "assistant", content: null } }]));
        job.token = (piece) => {
            if (!piece) return;
            sse(chunk([chat ? { finish_reason: null, index: 0, delta: { content: piece } }
                            : { text: piece, index: 0, logprobs: null, finish_reason: null }]));
        };
        job.done = (finish, n, timings) => {
            if (job.aborted) return;
            sse(chunk([chat ? { finish_reason: finish, index: 0, delta: {} }
                            : { text: "", index: 0, logprobs: null, finish_reason: finish }]));
            if (includeUsage) sse(chunk([], { usage: usage(n), timings }));
            res.end("data: [DONE]\n\n");
        };
    } else {
        job.token = (piece) => { text += piece; };
        job.done = (finish, n) => {
            if (job.aborted) return;
            const choice = chat
                ? { finish_reason: finish, index: 0, message: { role: "assistant", content: text } }
                : { text, index: 0, logprobs: null, finish_reason: finish };
            // vLLM's: made once the answer is done, on answers that are not streamed
            const load = loadMode !== "off" ? loadHeader(req) : null;
            if (load) res.setHeader("endpoint-load-metrics", load);
            sendJson(res, 200, { choices: [choice], created, model: modelName,
                                 system_fingerprint: fingerprint,
                                 object: chat ? "chat.completion" : "text_completion",
                                 usage: usage(n), id });
        };
    }
    job.fail = (e) => {
        console.error(`realengine ${opt.name}: ${job.id} failed: ${e.stack || e}`);
        if (job.aborted) return;
        if (!res.headersSent) {
            sendError(res, 500, String(e.message || e), "server_error");
        } else {
            sse(JSON.stringify({ error: { code: 500, message: String(e.message || e), type: "server_error" } }));
            res.end();
        }
    };
    // The client leaving ends its generation (at the next token) or its wait.
    res.on("close", () => {
        if (res.writableFinished) return;
        job.aborted = true;
        const i = queue.indexOf(job);
        if (i >= 0) queue.splice(i, 1);
    });
    queue.push(job);
    schedule();
}

function readBody(req) {
    return new Promise((resolve, reject) => {
        const parts = [];
        let size = 0;
        req.on("data", (d) => {
            size += d.length;
            if (size > BODY_MAX) {
                reject(Object.assign(new Error("request body too large"), { status: 413 }));
                req.destroy();
                return;
            }
            parts.push(d);
        });
        req.on("end", () => resolve(Buffer.concat(parts)));
        req.on("error", reject);
    });
}

const server = http.createServer(async (req, res) => {
    const url = req.url.split("?")[0];
    try {
        if (req.method === "GET" && url === "/health") {
            return sendJson(res, 200, { status: "ok" });
        }
        if (req.method === "GET" && url === "/metrics") {
            const body = metricsText();
            res.writeHead(200, { "Content-Type": "text/plain; version=0.0.4",
                                 "Process-Start-Time-Unix": String(metrics.t_start),
                                 "Content-Length": Buffer.byteLength(body) });
            return res.end(body);
        }
        if (req.method === "GET" && url === "/load" && opt["enable-server-load-tracking"]) {
            // vLLM's GET /load (Starlette's JSONResponse: compact)
            const body = `{"server_load":${serverLoad}}`;
            res.writeHead(200, { "Content-Type": "application/json",
                                 "Content-Length": Buffer.byteLength(body) });
            return res.end(body);
        }
        if (req.method === "GET" && url === "/props") {
            // llama.cpp's server properties: the slots it runs at once among them
            return sendJson(res, 200, {
                default_generation_settings: { n_ctx: opt.ctx },
                total_slots: opt.sequences, model_alias: alias, model_path: file,
                build_info: "realengine (node-llama-cpp 3.21.1)" });
        }
        if (req.method === "GET" && (url === "/v1/models" || url === "/models")) {
            return sendJson(res, 200, { object: "list", data: [{
                id: alias, object: "model", created: metrics.t_start, owned_by: "llamacpp",
                meta: { n_ctx_train: model.trainContextSize, size: model.size } }] });
        }
        const chat = url === "/v1/chat/completions" || url === "/chat/completions";
        const cmpl = url === "/v1/completions" || url === "/completions";
        if (chat || cmpl) {
            if (req.method !== "POST") return sendError(res, 405, "use POST");
            // vLLM's load_aware_call: counted until the answer is sent, or its client leaves
            serverLoad++;
            res.on("close", () => { serverLoad--; });
            const raw = await readBody(req);
            let body;
            try {
                body = JSON.parse(raw.toString("utf8"));
            } catch (e) {
                return sendError(res, 400, `invalid JSON: ${e.message}`);
            }
            if (!body || typeof body !== "object" || Array.isArray(body)) {
                return sendError(res, 400, "the body must be a JSON object");
            }
            return handleCompletion(req, res, body, chat);
        }
        return sendError(res, 404, "File Not Found", "not_found_error");
    } catch (e) {
        if (e instanceof BadRequest) return sendError(res, 400, e.message, e.type);
        if (e.status === 413) return sendError(res, 413, e.message);
        console.error(`realengine ${opt.name}: ${e.stack || e}`);
        if (!res.headersSent) sendError(res, 500, String(e.message || e), "server_error");
        else res.destroy();
    }
});

server.listen(opt.port, opt.host, () => {
    const a = server.address();
    const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
    const line = `realengine ready name=${opt.name} listen=${host}:${a.port} model=${alias} ` +
                 `threads=${opt.threads} sequences=${opt.sequences} ctx=${opt.ctx} file=${file}`;
    console.log(line);
    if (opt["ready-file"]) {
        fs.writeFileSync(opt["ready-file"] + ".tmp", line + "\n");
        fs.renameSync(opt["ready-file"] + ".tmp", opt["ready-file"]);
    }
});

async function shutdown() {
    server.close();
    for (const j of queue.splice(0)) j.aborted = true;
    for (const s of slots) if (s.job) s.job.aborted = true;
    if (stepLog) stepLog.end();
    setTimeout(() => process.exit(0), 50);
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
