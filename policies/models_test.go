package policies

import (
	"strings"
	"testing"
)

const llmRouteYAML = `
routes:
  - {name: llm, upstream: "http://127.0.0.1:1", llm: openai, match: {path_prefix: /v1/}, policies: [tokens, rps]}
policies:
  tokens: {key: ip, rate: 5000, per: 1h, cost: tokens}
  rps: {key: ip, rate: 10}
`

// A policy that caps spend is not lifted while Redis is down: tokens and
// usd policies default to on_redis_error: deny, requests policies keep
// allow; a cut stream is charged its reservation unless a policy opts for
// less.
func TestSpendPoliciesDefaults(t *testing.T) {
	snap, err := Parse("gateway.yaml", []byte(llmRouteYAML), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Policies["tokens"].Rule.OnRedisError; got != "deny" {
		t.Errorf("tokens policy: got on_redis_error %q, want deny", got)
	}
	if got := snap.Policies["rps"].Rule.OnRedisError; got != "allow" {
		t.Errorf("requests policy: got on_redis_error %q, want allow", got)
	}
	if snap.Policies["tokens"].ChargeDelivered {
		t.Error("tokens policy: got charge_without_usage delivered, want reserved by default")
	}
	rt := snap.Routes[0]
	if rt.UnsizedContext || rt.DefaultMaxTokens != 0 {
		t.Errorf("route: got unsized context %v, default_max_tokens %d; want refuse and 0 (the family's)", rt.UnsizedContext, rt.DefaultMaxTokens)
	}
}

// The file's models change a built-in family's bounds or add a family.
func TestModelsConfig(t *testing.T) {
	yaml := llmRouteYAML + `
models:
  gpt-4o-mini: {image_low: 3000}
  llama: {prefixes: [llama-3], default_max_tokens: 2048, max_output_tokens: 8192, reasoning: true}
  default: {file_tokens: 64000}
`
	snap, err := Parse("gateway.yaml", []byte(yaml), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f := snap.Models.For("gpt-4o-mini-2024-07-18"); f.ImageLow != 3000 || f.ImageHigh != 2833+8*5667 {
		t.Errorf("gpt-4o-mini: got image low %d high %d, want 3000 and the built-in high", f.ImageLow, f.ImageHigh)
	}
	if f := snap.Models.For("llama-3.1-70b"); f.Name != "llama" || f.DefaultMaxTokens != 2048 || !f.Reasoning {
		t.Errorf("llama: got %+v", f)
	}
	if f := snap.Models.For("mistral-large"); f.Name != "default" || f.FileTokens != 64000 {
		t.Errorf("unknown model: got %+v, want the default family with file_tokens 64000", f)
	}
}

func TestModelsAndSpendValidation(t *testing.T) {
	tests := []struct{ name, extra, want string }{
		{"new family without prefixes", "models: {llama: {image_low: 5}}", "models.llama.prefixes"},
		{"negative bound", "models: {gpt-4o: {image_high: -1}}", "models.gpt-4o.image_high: must be > 0"},
		{"default with prefixes", "models: {default: {prefixes: [x]}}", "models.default.prefixes"},
		{"price not a number", "prices: {default: {input: .nan, output: 1}}", "prices.default"},
		{"price beyond bound", "prices: {default: {input: 1e300, output: 1}}", "prices.default"},
		{"cached input dearer", "prices: {default: {input: 1, cached_input: 2, output: 1}}", "prices.default.cached_input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("gateway.yaml", []byte(llmRouteYAML+tt.extra+"\n"), Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
	bad := []struct{ yaml, want string }{
		{strings.Replace(llmRouteYAML, "llm: openai,", "llm: openai, unsized_input: guess,", 1), "routes[0].unsized_input"},
		{strings.Replace(llmRouteYAML, "rate: 10}", "rate: 10, charge_without_usage: delivered}", 1), "policies.rps.charge_without_usage"},
		{strings.Replace(llmRouteYAML, "cost: tokens}", "cost: tokens, charge_without_usage: nothing}", 1), "policies.tokens.charge_without_usage"},
	}
	for _, b := range bad {
		if _, err := Parse("gateway.yaml", []byte(b.yaml), Options{}); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("got %v, want an error naming %q", err, b.want)
		}
	}
}
