// Anthropic's official SDK, unmodified, against a gateway running the
// default config's anthropic route: a plain call, a stream with usage, and
// the SDK's own RateLimitError once the free plan's tokens run out. Prints
// one JSON line per step; TestAnthropicSDK reads them.
import Anthropic from "@anthropic-ai/sdk";

const baseURL = process.argv[2];
const model = "claude-sonnet-4-5";
const messages = [{ role: "user", content: "Tell me about rate limits." }];
const say = (step) => console.log(JSON.stringify(step));

const client = new Anthropic({ apiKey: "sk-demo-free", baseURL, maxRetries: 0 });

if (process.argv[3] === "enforced") {
  // A route with enforce: stream and fewer tokens than the stream wants:
  // the gateway ends it, and the SDK reads a message cut at max_tokens.
  const cut = client.messages.stream({ model, max_tokens: 1000, messages });
  let text = "";
  cut.on("text", (t) => { text += t; });
  const msg = await cut.finalMessage();
  say({ step: "enforced", stop_reason: msg.stop_reason ?? "", output_tokens: msg.usage?.output_tokens ?? 0, words: text.trim().split(/\s+/).length });
  process.exit(0);
}

if (process.argv[3] === "final") {
  // The SDK with its default retries: on a spent daily budget it raises at
  // once (x-should-retry: false); on a per-minute limit it waits and
  // succeeds. A counting fetch tells how many attempts each made.
  const [spentKey, minuteKey] = [process.argv[4], process.argv[5]];
  const attempt = async (apiKey) => {
    let calls = 0;
    const fetchCounted = (...args) => { calls++; return fetch(...args); };
    const c = new Anthropic({ apiKey, baseURL, fetch: fetchCounted });
    const started = Date.now();
    try {
      await c.messages.create({ model, max_tokens: 200, messages });
      return { ok: true, ms: Date.now() - started, attempts: calls };
    } catch (e) {
      return { ok: false, ms: Date.now() - started, attempts: calls, status: e?.status ?? 0, type: e?.error?.error?.type ?? "" };
    }
  };
  say({ step: "spent", ...(await attempt(spentKey)) });
  let refused = -1;
  for (let i = 0; i < 40 && refused < 0; i++) {
    const r = await fetch(baseURL + "/v1/messages", {
      method: "POST",
      headers: { "Content-Type": "application/json", "x-api-key": minuteKey, "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model, max_tokens: 200, messages }),
    });
    await r.arrayBuffer();
    if (r.status === 429) refused = i;
  }
  say({ step: "per_minute", spent_calls: refused, ...(await attempt(minuteKey)) });
  process.exit(0);
}

const plain = await client.messages.create({ model, max_tokens: 50, messages });
say({
  step: "plain",
  input_tokens: plain.usage?.input_tokens ?? 0,
  output_tokens: plain.usage?.output_tokens ?? 0,
  text: plain.content?.[0]?.text?.length ?? 0,
});

const stream = client.messages.stream({ model, max_tokens: 50, messages });
let events = 0;
for await (const _ of stream) events++;
const final = await stream.finalMessage();
say({
  step: "stream",
  events,
  input_tokens: final.usage?.input_tokens ?? 0,
  output_tokens: final.usage?.output_tokens ?? 0,
  stop_reason: final.stop_reason ?? "",
});

let limited = null;
for (let i = 0; i < 20 && !limited; i++) {
  try {
    await client.messages.create({ model, max_tokens: 256, messages });
  } catch (e) {
    limited = e;
  }
}
say({
  step: "rate_limited",
  is_rate_limit_error: limited instanceof Anthropic.RateLimitError,
  status: limited?.status ?? 0,
  type: limited?.error?.error?.type ?? "",
  retry_after: Number(limited?.headers?.get?.("retry-after") ?? 0),
  tokens_remaining: limited?.headers?.get?.("anthropic-ratelimit-tokens-remaining") ?? "",
});
