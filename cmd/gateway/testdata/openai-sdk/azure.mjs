// The openai package's AzureOpenAI client, unmodified and with its default
// retries, against an llm: azure route onto an Azure OpenAI mock: a call, a
// stream with usage, a stream under an API version that takes no
// stream_options, a per-minute limit's RateLimitError, and a spent day's
// refusal raised at once. A counting fetch tells how many attempts each
// made. Prints one JSON line per step; TestAzureOpenAISDK reads them.
import { AzureOpenAI, RateLimitError } from "openai";

const [endpoint, minuteKey, spentKey, limitedKey] = process.argv.slice(2);
const messages = [{ role: "user", content: "Tell me about rate limits." }];
const deployment = "chat";
const say = (step) => console.log(JSON.stringify(step));

function counting() {
  const f = (...args) => {
    f.calls++;
    return fetch(...args);
  };
  f.calls = 0;
  return f;
}

const client = (apiKey, apiVersion, opts = {}) =>
  new AzureOpenAI({ endpoint, apiKey, apiVersion, deployment, ...opts });

const plain = await client(minuteKey, "2024-10-21").chat.completions.create({ model: deployment, messages, max_tokens: 50 });
say({ step: "plain", total_tokens: plain.usage?.total_tokens ?? 0, content: plain.choices[0]?.message?.content?.length ?? 0, model: plain.model });

async function stream(step, apiVersion, params) {
  const s = await client(minuteKey, apiVersion).chat.completions.create({ model: deployment, messages, max_tokens: 50, stream: true, ...params });
  let chunks = 0, total = 0;
  for await (const c of s) {
    chunks++;
    if (c.usage) total = c.usage.total_tokens;
  }
  say({ step, chunks, total_tokens: total });
}
await stream("stream", "2024-10-21", { stream_options: { include_usage: true } });
await stream("stream_old_version", "2024-06-01", {});

async function refused(step, apiKey, opts) {
  const f = counting();
  const started = Date.now();
  try {
    await client(apiKey, "2024-10-21", { fetch: f, ...opts }).chat.completions.create({ model: deployment, messages, max_tokens: 50 });
    say({ step, ok: true, attempts: f.calls, ms: Date.now() - started });
  } catch (e) {
    say({ step, ok: false, attempts: f.calls, ms: Date.now() - started, rate_limit_error: e instanceof RateLimitError,
      status: e.status ?? 0, code: e.code ?? "", should_retry: e.headers?.get?.("x-should-retry") ?? "" });
  }
}
await refused("rate_limited", limitedKey, { maxRetries: 0 });
await refused("spent", spentKey, {});
