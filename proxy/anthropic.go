package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// Anthropic's rate-limit headers (llm.HeadersAnthropic), and the bound of
// an Anthropic prompt.

// setLLMHeaders adds the provider's own rate-limit headers of an llm route.
// peeked is what a read before the body saw, as setOpenAIHeadersWith takes it.
func setLLMHeaders(route *policies.Route, h http.Header, v limiter.Verdict, costs []policies.Cost, peeked []limiter.Decision) {
	if route.Provider != nil && route.Provider.Headers() == llm.HeadersAnthropic {
		setAnthropicHeaders(h, v, costs, peeked, time.Now())
		return
	}
	setOpenAIHeadersWith(h, v, costs, peeked)
}

// setAnthropicHeaders adds Anthropic's anthropic-ratelimit-* headers, each
// from the most restrictive policy of its kind: requests (policies that do
// not count tokens), tokens, input-tokens and output-tokens. A dollar
// budget is none of them. Resets are RFC 3339 instants, as Anthropic sends
// them. A policy the decision did not read shows what a peek found, as in
// setOpenAIHeadersWith.
func setAnthropicHeaders(h http.Header, v limiter.Verdict, costs []policies.Cost, peeked []limiter.Decision, now time.Time) {
	kinds := []struct {
		name string
		of   func(policies.Cost) bool
	}{
		{"requests", func(c policies.Cost) bool { return !c.CountsTokens() }},
		{"tokens", func(c policies.Cost) bool { return c == policies.CostTokens }},
		{"input-tokens", func(c policies.Cost) bool { return c == policies.CostInputTokens }},
		{"output-tokens", func(c policies.Cost) bool { return c == policies.CostOutputTokens }},
	}
	for _, k := range kinds {
		var best *limiter.Decision
		for i := range v.Decisions {
			d := &v.Decisions[i]
			if !decided(d) {
				if p, seen := peekedFor(peeked, d.Policy); seen {
					d = &p
				}
			}
			if i >= len(costs) || !decided(d) || d.Shadow || !k.of(costs[i]) {
				continue
			}
			if best == nil || anthropicRemaining(d) < anthropicRemaining(best) {
				best = d
			}
		}
		if best == nil {
			continue
		}
		reset := best.ResetAfter
		if !best.Allowed {
			reset = best.RetryAfter
		}
		p := "anthropic-ratelimit-" + k.name
		h.Set(p+"-limit", strconv.FormatInt(best.Limit.Quota(), 10))
		h.Set(p+"-remaining", strconv.FormatInt(anthropicRemaining(best), 10))
		h.Set(p+"-reset", ceilInstant(now.Add(max(reset, 0))).Format(time.RFC3339))
	}
}

// anthropicRemaining is what a policy has left, as the OpenAI headers show
// it (stateRemaining): the true count, on the refusing policy too.
func anthropicRemaining(d *limiter.Decision) int64 {
	r, _ := stateRemaining(*d)
	return r
}

// ceilInstant rounds t up to the second, in UTC: a reset never reads
// earlier than it is.
func ceilInstant(t time.Time) time.Time {
	s := t.UTC().Truncate(time.Second)
	if s.Before(t) {
		s = s.Add(time.Second)
	}
	return s
}
