package proxy

import (
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// priceFor finds the call's price in prices and, on a route with a usd
// policy, the rates it may be billed at (its reach): the dearest of the
// tiers it may be served at, its modalities, the long-context price when
// its input may pass the threshold. What the price cannot bound (a tier or
// audio the entry does not price) is refused: it returns the message for
// the client's 400, "" to go on.
func (c *llmCall) priceFor(route *policies.Route, prices policies.Prices) string {
	if len(prices) == 0 {
		return ""
	}
	c.price, c.unpriced = prices.For(c.req.Model)
	if !countsUSD(route) || c.req.UnitMicroUSD > 0 {
		return ""
	}
	reach, err := c.price.Reach(llm.Ask{
		Kind:          c.kind,
		ServiceTier:   c.req.ServiceTier,
		DefaultTier:   route.DefaultTier,
		AudioInput:    c.req.AudioInput,
		AudioOutput:   c.req.AudioOutput,
		PromptTokens:  c.req.PromptTokens,
		ContextWindow: c.req.Family.ContextWindow,
	})
	if err != nil {
		return "this route caps dollars, and " + err.Error()
	}
	c.reach = reach
	return ""
}

// countsUSD reports whether a policy of route counts dollars.
func countsUSD(route *policies.Route) bool {
	for _, p := range route.Policies {
		if p.Cost == policies.CostUSD {
			return true
		}
	}
	return false
}

// priceNote says, for explain, which entry of prices the call is priced by
// and at which tiers it reserves; "" on a route without a usd policy or
// prices.
func (c *llmCall) priceNote(route *policies.Route) string {
	if !countsUSD(route) || c.price.Entry == "" {
		return ""
	}
	if c.req.UnitMicroUSD > 0 {
		return "per unit (an image, a character of speech), not by the price table"
	}
	tier := c.req.ServiceTier
	if tier == "" || tier == "auto" {
		tier = route.DefaultTier
	}
	if tier == "" {
		tier = "default"
	}
	s := "prices." + c.price.Entry + " at service_tier " + tier
	if tier == "priority" || tier == "scale" {
		s += " (or default, which it may fall back to: reserved at the dearer)"
	}
	if c.price.MayReachLongContext(c.req.PromptTokens) {
		s += ", at the long-context price (its input may pass the threshold)"
	}
	return s
}
