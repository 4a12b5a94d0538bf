// Drives llmgate's token budgets with the official openai npm client and prints
// what the client saw, as JSON, for integration.budgets to judge:
//   retry: a request refused while a stream holds the room (Retry-After: 1); the
//          client waits as told and retries once the stream, cancelled, gave
//          back what it did not use
//   large: a request larger than the key's whole budget (x-should-retry: false):
//          no retry, whatever maxRetries
//   over:  a request over what is left (Retry-After: the window's end), with
//          maxRetries 0: the RateLimitError and its headers
// usage: KEY_RETRY=... KEY_SMALL=... node openai_budgets.mjs BASE_URL MODEL
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
const prompt = "x".repeat(400); // 100 tokens as the gateway estimates them
const messages = [{ role: "user", content: prompt }];
const retryKey = new OpenAI({ baseURL, apiKey: process.env.KEY_RETRY });
const smallKey = new OpenAI({ baseURL, apiKey: process.env.KEY_SMALL });
const rl = (h) => {
  const out = {};
  for (const name of ["limit", "remaining", "reset"]) {
    for (const what of ["requests", "tokens"]) {
      const v = h.get(`x-ratelimit-${name}-${what}`);
      if (v !== null) out[`${name}-${what}`] = v;
    }
  }
  for (const name of ["retry-after", "x-should-retry"]) {
    const v = h.get(name);
    if (v !== null) out[name] = v;
  }
  return out;
};
const failure = (e, t0) => ({
  status: e.status,
  code: e.code ?? null,
  type: e.type ?? null,
  name: e.constructor.name,
  message: e.message,
  headers: e.headers ? rl(e.headers) : null,
  elapsed_ms: Date.now() - t0,
});

const out = {};

// ---- retry: the room a cancelled stream gives back
{
  const first = await retryKey.chat.completions
    .create({ model, messages, max_tokens: 10 })
    .withResponse();
  out.first = { status: first.response.status, headers: rl(first.response.headers),
                usage: first.data.usage };
  const stream = await retryKey.chat.completions.create({
    model, messages, max_tokens: 2000, stream: true,
  });
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  await it.next();
  // the stream holds 2100 of what is left; the request below needs 500: refused with
  // Retry-After: 1 while the stream runs; the stream is cancelled meanwhile
  setTimeout(() => stream.controller.abort(), 300);
  const t0 = Date.now();
  try {
    const r = await retryKey.chat.completions
      .create({ model, messages, max_tokens: 400 }, { maxRetries: 2 })
      .withResponse();
    out.retry = { status: r.response.status, elapsed_ms: Date.now() - t0,
                  headers: rl(r.response.headers), usage: r.data.usage };
  } catch (e) {
    out.retry = failure(e, t0);
  }
  try {
    for (;;) {
      const { done } = await it.next();
      if (done) break;
    }
  } catch (e) {
    // the abort ends the iteration
  }
}

// ---- large: can never fit: refused for good, not retried
{
  const t0 = Date.now();
  try {
    await smallKey.chat.completions.create({ model, messages, max_tokens: 250 }, { maxRetries: 2 });
    out.large = { status: 200 };
  } catch (e) {
    out.large = failure(e, t0);
  }
}

// ---- over: what is left is too little until the day ends
{
  const ok = await smallKey.chat.completions
    .create({ model, messages, max_tokens: 150 })
    .withResponse();
  out.fits = { status: ok.response.status, headers: rl(ok.response.headers) };
  const t0 = Date.now();
  try {
    await smallKey.chat.completions.create({ model, messages, max_tokens: 100 }, { maxRetries: 0 });
    out.over = { status: 200 };
  } catch (e) {
    out.over = failure(e, t0);
  }
}
console.log(JSON.stringify(out));
