// Streams one chat completion with the openai npm client's stream helper,
// which folds the chunks into one completion, and prints a JSON summary.
// usage: node openai_stream.mjs BASE_URL BODY_JSON
import OpenAI from "openai";

const [baseURL, body] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: process.env.OPENAI_API_KEY || "unused" });
const stream = client.chat.completions.stream(JSON.parse(body));
const ids = new Set();
let chunks = 0;
stream.on("chunk", (chunk) => {
  chunks++;
  ids.add(chunk.id);
});
const done = await stream.finalChatCompletion();
console.log(JSON.stringify({
  content: done.choices[0].message.content,
  finish_reason: done.choices[0].finish_reason,
  chunks,
  ids: ids.size,
}));
