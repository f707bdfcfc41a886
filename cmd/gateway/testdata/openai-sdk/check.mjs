// The client SDKs people point at an OpenAI-compatible endpoint, unmodified
// and with their default settings (their own retries included), against a
// gateway running the default config with small windows: the official
// openai SDK (current major and 6.x), the Vercel AI SDK and LangChain JS.
// Each meets a spent daily budget, a call larger than the whole quota, and
// a per-minute limit. A counting fetch (the only option given beyond key
// and URL) tells how many attempts each made. Prints one JSON line per
// step; TestClientSDKs reads them.
import OpenAI from "openai";
import OpenAI6 from "openai6";
import { generateText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";

const [baseURL, minuteKey, spentKey, neverFits] = [process.argv[2], process.argv[3], process.argv[4], Number(process.argv[5])];
// An enforce: stream route and, per SDK, a key whose tokens run out mid-stream.
const [enforcedURL, enforcedKeys] = [process.argv[6], (process.argv[7] ?? "").split(",")];
const content = "Tell me about rate limits.";
const messages = [{ role: "user", content }];
const model = "gpt-4o-mini";
const say = (step) => console.log(JSON.stringify(step));

// counting returns a fetch that counts the attempts that reached the gateway.
function counting() {
  const f = (...args) => {
    f.calls++;
    return fetch(...args);
  };
  f.calls = 0;
  return f;
}

const sdks = {
  openai: (apiKey, fetch) => {
    const c = new OpenAI({ apiKey, baseURL, fetch });
    return (maxTokens) => c.chat.completions.create({ model, messages, max_tokens: maxTokens });
  },
  openai6: (apiKey, fetch) => {
    const c = new OpenAI6({ apiKey, baseURL, fetch });
    return (maxTokens) => c.chat.completions.create({ model, messages, max_tokens: maxTokens });
  },
  "ai-sdk": (apiKey, fetch) => {
    const p = createOpenAI({ apiKey, baseURL, fetch });
    return (maxTokens) => generateText({ model: p.chat(model), prompt: content, maxOutputTokens: maxTokens });
  },
  langchain: (apiKey, fetch) => {
    const m = (maxTokens) => new ChatOpenAI({ model, apiKey, maxTokens, configuration: { baseURL, fetch } });
    return (maxTokens) => m(maxTokens).invoke(content);
  },
};

// attempt runs one call and says how it ended, how long it took and how
// many requests it sent.
async function attempt(name, apiKey, maxTokens) {
  const f = counting();
  const call = sdks[name](apiKey, f);
  const started = Date.now();
  try {
    await call(maxTokens);
    return { ok: true, ms: Date.now() - started, attempts: f.calls };
  } catch (e) {
    const cause = e?.lastError ?? e?.cause ?? e;
    return {
      ok: false, ms: Date.now() - started, attempts: f.calls,
      error: e?.name ?? String(e), status: e?.status ?? cause?.status ?? cause?.statusCode ?? 0,
      code: e?.code ?? cause?.code ?? "",
    };
  }
}

// exhaust spends the minute key's tokens with plain requests (no SDK, no
// retry) until the gateway refuses one of the size the SDK will send.
async function exhaust(maxTokens) {
  for (let i = 0; i < 40; i++) {
    const r = await fetch(baseURL + "/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${minuteKey}` },
      body: JSON.stringify({ model, messages, max_tokens: maxTokens }),
    });
    await r.arrayBuffer();
    if (r.status === 429) return i;
  }
  throw new Error("the minute key was never refused");
}

const plain = await new OpenAI({ apiKey: minuteKey, baseURL }).chat.completions.create({ model, messages, max_tokens: 50 });
say({ step: "plain", total_tokens: plain.usage?.total_tokens ?? 0, content: plain.choices[0]?.message?.content?.length ?? 0 });

const stream = await new OpenAI({ apiKey: minuteKey, baseURL }).chat.completions.create({
  model, messages, max_tokens: 50, stream: true, stream_options: { include_usage: true },
});
let chunks = 0, usage = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
}
say({ step: "stream", chunks, total_tokens: usage?.total_tokens ?? 0 });

// A stream the gateway ends when the tenant's tokens run out
// (enforce: stream): the SDK sees a well-formed end (finish_reason "length"
// on chat, response.incomplete on the Responses API), not an error.
const enforced = { openai: OpenAI, openai6: OpenAI6 };
for (const [i, [name, Client]] of Object.entries(enforced).entries()) {
  const c = new Client({ apiKey: enforcedKeys[i], baseURL: enforcedURL });
  const step = { step: "enforced_chat", sdk: name, ok: false, chunks: 0, content: 0, finish: "", total_tokens: 0 };
  try {
    const s = await c.chat.completions.create({ model, messages, stream: true, stream_options: { include_usage: true } });
    for await (const chunk of s) {
      step.chunks++;
      for (const ch of chunk.choices ?? []) {
        step.content += ch.delta?.content?.length ?? 0;
        if (ch.finish_reason) step.finish = ch.finish_reason;
      }
      if (chunk.usage) step.total_tokens = chunk.usage.total_tokens;
    }
    step.ok = true;
  } catch (e) {
    step.error = e?.name ?? String(e);
    step.status = e?.status ?? 0;
  }
  say(step);
}
{
  const c = new OpenAI({ apiKey: enforcedKeys[2], baseURL: enforcedURL });
  const step = { step: "enforced_responses", sdk: "openai", ok: false, chunks: 0, finish: "", total_tokens: 0 };
  try {
    const s = await c.responses.create({ model, input: content, stream: true });
    for await (const ev of s) {
      step.chunks++;
      if (ev.type === "response.incomplete" || ev.type === "response.completed") {
        step.finish = ev.type + ":" + (ev.response?.incomplete_details?.reason ?? "");
        step.total_tokens = ev.response?.usage?.total_tokens ?? 0;
      }
    }
    step.ok = true;
  } catch (e) {
    step.error = e?.name ?? String(e);
    step.status = e?.status ?? 0;
  }
  say(step);
}

for (const name of Object.keys(sdks)) {
  say({ step: "spent", sdk: name, ...(await attempt(name, spentKey, 50)) });
  say({ step: "never_fits", sdk: name, ...(await attempt(name, minuteKey, neverFits)) });
  const refused = await exhaust(200);
  say({ step: "per_minute", sdk: name, spent_calls: refused, ...(await attempt(name, minuteKey, 200)) });
}
