package proxy

import (
	"context"

	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// fixedCost is what a call to an endpoint the operator declared at a fixed
// cost takes from a policy of cost: its tokens from each policy that
// counts tokens (input, output or both: the operator's number bounds
// them all), its dollars from one that counts dollars.
func fixedCost(ep *llm.Endpoint, cost policies.Cost) int64 {
	switch {
	case cost == policies.CostUSD:
		return ep.MicroUSD
	case cost.CountsTokens():
		return ep.Tokens
	}
	return 1
}

// settleFixed settles a call at a fixed cost: charged as declared once the
// request may have reached the upstream, nothing when it answered with an
// error status or was never sent.
func (c *llmCall) settleFixed(ctx context.Context) error {
	failed := c.status >= 400 || (c.status == 0 && neverSent(c.upstreamErr))
	actual := make([]int64, len(c.costs))
	for i, cost := range c.costs {
		switch {
		case !cost.CountsTokens():
			actual[i] = 1
		case !failed:
			actual[i] = fixedCost(c.fixed, cost)
		}
	}
	c.charged = true
	if !failed {
		c.chargedUsage = usage{input: c.fixed.Tokens}
		c.chargedTokens, c.chargedMicroUSD = c.fixed.Tokens, c.fixed.MicroUSD
	}
	return c.settleWindows(context.WithoutCancel(ctx), actual)
}
