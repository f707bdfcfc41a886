package policies

import (
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/llm"
)

const pricesRoute = "routes: [{name: r, upstream: builtin:echo, llm: openai, policies: [p]}]\npolicies: {p: {key: tenant, cost: usd, rate: 5, per: 24h}}\n"

// Every key of a price entry: tiers, modalities, cache writes by ttl and a
// long-context price compile to pico-dollars a token, defaults filled in.
func TestPricesCompileEveryKey(t *testing.T) {
	snap, err := Parse("gateway.yaml", []byte(pricesRoute+`
prices:
  default: {input: 20, output: 80}
  gpt-4o-audio-preview:
    input: 2.5
    cached_input: 1.25
    output: 10
    audio_input: 40
    audio_output: 80
    tiers:
      priority: {input: 4.25, output: 17}
      flex: {input: 1.25, cached_input: 0.625, output: 5}
  claude-sonnet-4:
    input: 3
    cached_input: 0.3
    output: 15
    cache_write_1h: 6
    long_context: {threshold: 200000, input: 6, cached_input: 0.6, output: 22.5}
`), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, def := snap.Prices.For("gpt-4o-audio-preview-2024-12-17")
	if def || a.Entry != "gpt-4o-audio-preview" {
		t.Fatalf("a dated snapshot: got entry %q (default %v), want gpt-4o-audio-preview's", a.Entry, def)
	}
	if want := (llm.Rates{Input: 2_500_000, CachedInput: 1_250_000, Output: 10_000_000, CacheWrite5m: 3_125_000,
		CacheWrite1h: 5_000_000, AudioInput: 40_000_000, AudioOutput: 80_000_000}); a.Rates != want {
		t.Errorf("rates: got %+v, want %+v", a.Rates, want)
	}
	if got := a.Tiers["priority"]; got.Input != 4_250_000 || got.CachedInput != 4_250_000 || got.Output != 17_000_000 || got.AudioOutput != 0 {
		t.Errorf("priority: got %+v, want input 4.25, cached at input, output 17, no audio", got)
	}
	c, _ := snap.Prices.For("claude-sonnet-4-20250514")
	if lc := c.LongContext; lc == nil || lc.Threshold != 200_000 || !lc.WholeRequest || lc.Rates.Output != 22_500_000 || lc.Rates.CacheWrite1h != 12_000_000 {
		t.Errorf("long context: got %+v, want threshold 200000, the whole request, output 22.5, 1h writes at 2 × 6", lc)
	}
	if c.CacheWrite5m != 3_750_000 || c.CacheWrite1h != 6_000_000 {
		t.Errorf("cache writes: got 5m %d, 1h %d, want 3.75 and 6 dollars a million", c.CacheWrite5m, c.CacheWrite1h)
	}
	if names := snap.ModelNames(); strings.Join(names, ",") != "claude-sonnet-4,gpt-4o-audio-preview" {
		t.Errorf("model names: got %v", names)
	}
}

// A mistake in a price entry names the file and the place.
func TestPriceMistakes(t *testing.T) {
	for _, tt := range []struct{ name, prices, want string }{
		{"a tier's negative price", `{default: {input: 1, output: 2, tiers: {priority: {input: -2, output: 4}}}}`,
			"gateway.yaml: prices.default.tiers.priority.input: must not be negative"},
		{"the standard tier as a tier", `{default: {input: 1, output: 2, tiers: {default: {input: 2, output: 4}}}}`,
			`gateway.yaml: prices.default.tiers.default: "default" is the standard tier`},
		{"a tier's name", `{default: {input: 1, output: 2, tiers: {"Prio rity": {input: 2, output: 4}}}}`,
			`gateway.yaml: prices.default.tiers.Prio rity: must be a service tier's name`},
		{"a free tier", `{default: {input: 1, output: 2, tiers: {flex: {}}}}`,
			"gateway.yaml: prices.default.tiers.flex: input and output are both 0"},
		{"no threshold", `{default: {input: 1, output: 2, long_context: {input: 2, output: 3}}}`,
			"gateway.yaml: prices.default.long_context.threshold: must be > 0"},
		{"long context without output", `{default: {input: 1, output: 2, long_context: {threshold: 100, input: 2}}}`,
			"gateway.yaml: prices.default.long_context.output: must be set"},
		{"a price past the bound", `{default: {input: 1, output: 2, audio_output: 2000000}}`,
			"gateway.yaml: prices.default.audio_output: must be a number up to"},
		{"an unknown key", `{default: {input: 1, output: 2, tiers: {flex: {input: 1, output: 1, speed: 2}}}}`,
			"prices.default.tiers.flex.speed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("gateway.yaml", []byte(pricesRoute+"prices: "+tt.prices+"\n"), Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	_, err := Parse("gateway.yaml", []byte(strings.Replace(pricesRoute, "llm: openai,", "llm: openai, default_service_tier: Fast!,", 1)+"prices: {default: {input: 1, output: 2}}\n"), Options{})
	if err == nil || !strings.Contains(err.Error(), "routes[0].default_service_tier: must be a service tier's name") {
		t.Fatalf("a route's default tier: got %v", err)
	}
}

// builtin_prices puts the providers' list under the file's entries, which
// replace a built-in entry whole.
func TestBuiltinPrices(t *testing.T) {
	snap, err := Parse("gateway.yaml", []byte(pricesRoute+"builtin_prices: true\nprices: {default: {input: 20, output: 80}, gpt-4o: {input: 1, output: 2}}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p, def := snap.Prices.For("claude-sonnet-4-20250514"); def || p.Input != 3_000_000 || p.LongContext == nil {
		t.Errorf("claude-sonnet-4: got %+v (default %v), want the list's $3 with its long-context price", p, def)
	}
	if p, _ := snap.Prices.For("gpt-5"); p.Tiers["priority"].Output != 20_000_000 {
		t.Errorf("gpt-5 priority: got %+v, want output at $20", p.Tiers["priority"])
	}
	if p, _ := snap.Prices.For("gpt-4o"); p.Input != 1_000_000 {
		t.Errorf("gpt-4o: got input %d, want the file's $1", p.Input)
	}
	if names := snap.ModelNames(); strings.Join(names, ",") != "gpt-4o" {
		t.Errorf("model names: got %v, want the file's entries only", names)
	}
}
