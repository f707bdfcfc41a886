package llm

import "math"

// RatesOf converts prices in US dollars per million tokens to Rates, in
// pico-dollars a token, filling in the defaults: cached input at the
// input's price, a 5-minute cache write at 1.25 × and a 1-hour one at 2 ×
// the input's (Anthropic's published multipliers). Audio has no default.
func RatesOf(input, cached, output, write5m, write1h, audioIn, audioOut float64) Rates {
	r := Rates{Input: pico(input), CachedInput: pico(cached), Output: pico(output),
		CacheWrite5m: pico(write5m), CacheWrite1h: pico(write1h), AudioInput: pico(audioIn), AudioOutput: pico(audioOut)}
	if r.CachedInput == 0 {
		r.CachedInput = r.Input
	}
	if r.CacheWrite5m == 0 {
		r.CacheWrite5m = r.Input + (r.Input+3)/4 // 1.25 ×, rounded up
	}
	if r.CacheWrite1h == 0 {
		r.CacheWrite1h = MulSat(r.Input, 2)
	}
	return r
}

// pico converts dollars per million tokens (bounded by the config's
// validation) to pico-dollars a token, rounding up what is not an integer
// there beyond float error.
func pico(perMillion float64) int64 {
	if !(perMillion > 0) {
		return 0
	}
	f := perMillion * 1e6
	n := math.Round(f)
	if f > n+1e-6 {
		n = math.Ceil(f)
	}
	if n >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

// ListPrices returns the providers' published prices the gateway knows,
// by model (its name without a snapshot date), for builtin_prices. They
// were read on 2026-12-07 from:
//
//   - Anthropic: docs.anthropic.com/en/docs/about-claude/pricing (input,
//     5-minute and 1-hour cache writes, cache hits, output; Sonnet 4's
//     long-context price past 200,000 input tokens, which reprices the
//     whole request and to which the cache multipliers apply), and for
//     the models that page did not list then (Opus 4.5, Sonnet 4.5,
//     Haiku 4.5) a copy of its table at docs.electronhub.ai.
//   - OpenAI: openai.com/api-priority-processing (the priority tier);
//     the standard tier of the same models as openai.com/api/pricing
//     states it, read through copies (the page itself was not
//     available); gpt-4o-audio-preview's audio rates from a copy at
//     aitoolrank.net. No flex price was available: flex is not in the
//     list, and a flex request on these models is refused unless the
//     file prices it.
func ListPrices() Prices {
	anthropic := func(name string, in, hit, out float64) Price {
		return Price{Entry: name, Rates: RatesOf(in, hit, out, in*1.25, in*2, 0, 0)}
	}
	out := Prices{}
	for _, p := range []Price{
		anthropic("claude-opus-4-1", 15, 1.50, 75),
		anthropic("claude-opus-4", 15, 1.50, 75),
		anthropic("claude-opus-4-5", 5, 0.50, 25),
		anthropic("claude-sonnet-4-5", 3, 0.30, 15),
		anthropic("claude-sonnet-4", 3, 0.30, 15),
		anthropic("claude-3-7-sonnet", 3, 0.30, 15),
		anthropic("claude-haiku-4-5", 1, 0.10, 5),
		anthropic("claude-3-5-haiku", 0.80, 0.08, 4),
		anthropic("claude-3-haiku", 0.25, 0.03, 1.25),
		{Entry: "gpt-5", Rates: RatesOf(1.25, 0.125, 10, 0, 0, 0, 0),
			Tiers: map[string]Rates{"priority": RatesOf(2.50, 0.25, 20, 0, 0, 0, 0)}},
		{Entry: "gpt-5-mini", Rates: RatesOf(0.25, 0.025, 2, 0, 0, 0, 0),
			Tiers: map[string]Rates{"priority": RatesOf(0.45, 0.045, 3.60, 0, 0, 0, 0)}},
		{Entry: "gpt-4.1", Rates: RatesOf(2, 0.50, 8, 0, 0, 0, 0),
			Tiers: map[string]Rates{"priority": RatesOf(3.50, 0.875, 14, 0, 0, 0, 0)}},
		{Entry: "gpt-4o", Rates: RatesOf(2.50, 1.25, 10, 0, 0, 0, 0)},
		{Entry: "gpt-4o-mini", Rates: RatesOf(0.15, 0.075, 0.60, 0, 0, 0, 0)},
		{Entry: "gpt-4o-audio-preview", Rates: RatesOf(2.50, 0, 10, 0, 0, 40, 80)},
	} {
		out[p.Entry] = p
	}
	s4 := out["claude-sonnet-4"]
	s4.LongContext = &LongContext{Threshold: 200_000, WholeRequest: true, Rates: RatesOf(6, 0.60, 22.50, 7.50, 12, 0, 0)}
	out["claude-sonnet-4"] = s4
	return out
}
