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
