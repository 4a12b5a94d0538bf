// Drives llmgate with the official openai npm client: one streaming and one
// non-streaming chat completion, then prints a JSON summary for the test.
// usage: node openai_client.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY || "unused" });

const out = {};
const plain = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Say something." }],
  max_tokens: 6,
});
out.plain = {
  content: plain.choices[0].message.content,
  finish_reason: plain.choices[0].finish_reason,
  completion_tokens: plain.usage?.completion_tokens,
};

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Stream something." }],
  max_tokens: 8,
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let chunks = 0;
let usage = null;
let finish = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  const choice = chunk.choices[0];
  if (choice?.delta?.content) text += choice.delta.content;
  if (choice?.finish_reason) finish = choice.finish_reason;
}
out.stream = { content: text, chunks, finish_reason: finish, completion_tokens: usage?.completion_tokens };

try {
  await client.chat.completions.create({ model: "no-such-model", messages: [] });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, code: e.code ?? e.error?.code ?? null };
}
console.log(JSON.stringify(out));
