// The official OpenAI SDK, unmodified, against a gateway running the
// default config: a plain call, a stream with usage, the SDK's own
// RateLimitError once the free plan's tokens run out, and the SDK's own
// retry after the gateway's retry-after-ms. Prints one JSON line per step;
// TestOpenAISDK reads them.
import OpenAI from "openai";

const baseURL = process.argv[2];
const messages = [{ role: "user", content: "Tell me about rate limits." }];
const model = "gpt-4o-mini";
const say = (step) => console.log(JSON.stringify(step));

const noRetry = new OpenAI({ apiKey: "sk-demo-free", baseURL, maxRetries: 0 });

const plain = await noRetry.chat.completions.create({ model, messages, max_tokens: 50 });
say({ step: "plain", total_tokens: plain.usage?.total_tokens ?? 0, content: plain.choices[0]?.message?.content?.length ?? 0 });

const stream = await noRetry.chat.completions.create({ model, messages, stream: true, stream_options: { include_usage: true } });
let chunks = 0, usage = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
}
say({ step: "stream", chunks, total_tokens: usage?.total_tokens ?? 0 });

let limited = null;
for (let i = 0; i < 20 && !limited; i++) {
  try {
    await noRetry.chat.completions.create({ model, messages });
  } catch (e) {
    limited = e;
  }
}
say({
  step: "rate_limited",
  is_rate_limit_error: limited instanceof OpenAI.RateLimitError,
  status: limited?.status ?? 0,
  code: limited?.code ?? "",
  retry_after_ms: Number(limited?.headers?.get?.("retry-after-ms") ?? 0),
});

// The SDK retries a 429 by itself, waiting what retry-after-ms says.
const retrying = new OpenAI({ apiKey: "sk-demo-free", baseURL, maxRetries: 3, timeout: 60_000 });
const started = Date.now();
const retried = await retrying.chat.completions.create({ model, messages }); // as large as the call refused above
say({ step: "retried", total_tokens: retried.usage?.total_tokens ?? 0, waited_ms: Date.now() - started });
