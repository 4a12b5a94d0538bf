// Drives llmgate's scheduler with the official openai npm client and prints what
// the client saw, as JSON, for integration.sched to judge:
//   shed:    a sheddable class refused at once while the fleet is saturated
//            (maxRetries 0): the RateLimitError, its code and headers
//   retried: the same request with retries: the client waits Retry-After and
//            gets in once the test frees the slot
// usage: KEY_BATCH=... node openai_sched.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const messages = [{ role: "user", content: "hello" }];
const headers = (h) => {
  const out = {};
  for (const name of ["retry-after", "x-ratelimit-limit-requests",
                      "x-ratelimit-remaining-requests", "x-should-retry"]) {
    const v = h.get(name);
    if (v !== null) out[name.replace("x-ratelimit-", "")] = v;
  }
  return out;
};
const out = {};
{
  const client = new OpenAI({ baseURL, apiKey: process.env.KEY_BATCH, maxRetries: 0 });
  const t0 = Date.now();
  try {
    await client.chat.completions.create({ model, messages, max_tokens: 2 });
    out.shed = { status: 200 };
  } catch (e) {
    out.shed = {
      status: e.status, code: e.code ?? null, type: e.type ?? null,
      name: e.constructor.name, message: e.message,
      headers: e.headers ? headers(e.headers) : null, elapsed_ms: Date.now() - t0,
    };
  }
}
{
  const client = new OpenAI({ baseURL, apiKey: process.env.KEY_BATCH, maxRetries: 5 });
  const t0 = Date.now();
  try {
    const r = await client.chat.completions.create({ model, messages, max_tokens: 2 })
      .withResponse();
    out.retried = { status: r.response.status, elapsed_ms: Date.now() - t0 };
  } catch (e) {
    out.retried = { status: e.status, message: e.message, elapsed_ms: Date.now() - t0 };
  }
}
console.log(JSON.stringify(out));
