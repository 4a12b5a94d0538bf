// Drives llmgate with the official clients of the Responses API (the openai
// npm package's client.responses) and of Anthropic's Messages API
// (@anthropic-ai/sdk, when installed), then prints a JSON summary for the
// test (tests/integration/test_agent_apis.py).
// usage: node agent_apis.mjs BASE_URL MODEL TURNS
import OpenAI from "openai";

const [base, model, turnsArg] = process.argv.slice(2);
const turns = Number(turnsArg || 6);
const openai = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
const out = { chain: [], anthropic: null };

// a conversation: each turn names the previous answer, alternately streamed
let prev = null;
for (let i = 0; i < turns; i++) {
  const stream = i % 2 === 1;
  const req = { model, input: `turn ${i}`, max_output_tokens: 4 + i };
  if (prev) req.previous_response_id = prev;
  const turn = { stream };
  try {
    if (stream) {
      const s = await openai.responses.create({ ...req, stream: true });
      let text = "";
      let deltas = 0;
      for await (const ev of s) {
        if (ev.type === "response.created") turn.created_id = ev.response.id;
        if (ev.type === "response.output_text.delta") { text += ev.delta; deltas++; }
        if (ev.type === "response.completed") {
          turn.id = ev.response.id;
          turn.usage = ev.response.usage;
        }
      }
      turn.text = text;
      turn.deltas = deltas;
    } else {
      const r = await openai.responses.create(req);
      turn.id = r.id;
      turn.text = r.output_text;
      turn.usage = r.usage;
    }
    turn.ok = true;
  } catch (e) {
    turn.ok = false;
    turn.status = e.status;
    turn.code = e.code ?? e.error?.code ?? null;
  }
  out.chain.push(turn);
  if (!turn.ok) break;
  prev = turn.id;
}

// a follow-up naming an id the gateway never saw: the engine decides (404 from llmsim)
try {
  await openai.responses.create({ model, input: "x", previous_response_id: "resp_00000000000000ff" });
  out.unknown = { ok: true };
} catch (e) {
  out.unknown = { ok: false, status: e.status };
}

let Anthropic = null;
try {
  Anthropic = (await import("@anthropic-ai/sdk")).default;
} catch (e) {
  Anthropic = null;
}
if (Anthropic) {
  const claude = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0 });
  const a = {};
  const msg = await claude.messages.create({
    model, max_tokens: 5, system: "Be brief.",
    messages: [{ role: "user", content: "Say something." }],
  });
  a.plain = { text: msg.content.map((b) => b.text ?? "").join(""), usage: msg.usage,
              stop_reason: msg.stop_reason };
  const stream = await claude.messages.create({
    model, max_tokens: 7, stream: true,
    messages: [{ role: "user", content: "Stream something." }],
  });
  let text = "";
  let deltas = 0;
  let outTokens = null;
  let stopped = false;
  for await (const ev of stream) {
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") {
      text += ev.delta.text;
      deltas++;
    }
    if (ev.type === "message_delta") outTokens = ev.usage.output_tokens;
    if (ev.type === "message_stop") stopped = true;
  }
  a.stream = { text, deltas, output_tokens: outTokens, stopped };
  const count = await claude.messages.countTokens({
    model, messages: [{ role: "user", content: "count these words please" }],
  });
  a.count = count.input_tokens;
  out.anthropic = a;
}
console.log(JSON.stringify(out));
