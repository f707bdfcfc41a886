package policies

import "github.com/ratelimit-gateway/gateway/limiter"

// The config's closed lists of names are typed values: checkStrict reads
// each through its UnmarshalText, so a name outside the list is an error
// with the file and the place, and the decoder through the same method.

// Costs lists every cost.
var Costs = []Cost{CostRequests, CostTokens, CostInputTokens, CostOutputTokens, CostUSD}

// MissingKeys lists every missing-key behaviour.
var MissingKeys = []MissingKey{MissingSkip, MissingShared, MissingReject}

// RateLimitHeaderSets lists every set of rate-limit headers.
var RateLimitHeaderSets = []RateLimitHeaders{RateLimitHeadersAll, RateLimitHeadersIETF, RateLimitHeadersLegacy, RateLimitHeadersNone}

// UnmarshalText sets s to the set named by text, one of
// RateLimitHeaderSets; empty text leaves the zero value, all of them.
func (s *RateLimitHeaders) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(s, RateLimitHeaderSets, text)
}

// MarshalText returns the set's name.
func (s RateLimitHeaders) MarshalText() ([]byte, error) { return []byte(s), nil }

// UnmarshalText sets c to the cost named by text, one of Costs; empty text
// leaves the zero value, which defaults to CostRequests.
func (c *Cost) UnmarshalText(text []byte) error { return limiter.UnmarshalName(c, Costs, text) }

// MarshalText returns the cost's name.
func (c Cost) MarshalText() ([]byte, error) { return []byte(c), nil }

// UnmarshalText sets m to the behaviour named by text, one of MissingKeys;
// empty text leaves the zero value, which defaults to MissingShared.
func (m *MissingKey) UnmarshalText(text []byte) error {
	return limiter.UnmarshalName(m, MissingKeys, text)
}

// MarshalText returns the behaviour's name.
func (m MissingKey) MarshalText() ([]byte, error) { return []byte(m), nil }
