package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// On an llm route the gateway speaks as the provider's own API does, so that
// the official SDKs understand it: errors in OpenAI's shape (the SDKs raise
// their RateLimitError on a 429 and back off by themselves), and OpenAI's
// x-ratelimit-*-requests / -tokens headers beside the IETF fields.

// openAIError is OpenAI's error body.
type openAIError struct {
	Error openAIErrorDetail `json:"error"`
}

type openAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// newOpenAIError renders body as OpenAI would for status.
func newOpenAIError(status int, body errorBody) openAIError {
	typ, code := "invalid_request_error", ""
	switch {
	case status == http.StatusTooManyRequests:
		typ, code = "rate_limit_exceeded", "rate_limit_exceeded"
		if body.final {
			typ, code = "insufficient_quota", "insufficient_quota"
		}
	case status == http.StatusUnauthorized:
		code = "invalid_api_key"
	case status == http.StatusNotFound:
		code = "not_found"
	case status >= 500:
		typ = "server_error"
	}
	e := openAIError{Error: openAIErrorDetail{Message: body.Message, Type: typ}}
	if code != "" {
		e.Error.Code = &code
	}
	return e
}

// budgetPeriod is how long a limit's window must be for its exhaustion to
// read as a spent budget (insufficient_quota) rather than a rate limit.
const budgetPeriod = 24 * time.Hour

// rateSets are OpenAI's header sets, x-ratelimit-{limit,remaining,reset}-
// <name>, and the policy costs each shows. A set shows one unit only:
// tokens are never compared with requests or micro-dollars. A dollar
// budget has its own set, in dollars with six decimals.
var rateSets = [...]struct {
	name   string
	counts func(policies.Cost) bool
	usd    bool
	// The set's header names, canonical as http.Header.Set would make
	// them, built once rather than on each response.
	limitKey, remainingKey, resetKey string
}{
	{"requests", func(c policies.Cost) bool { return c == policies.CostRequests }, false,
		"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
	{"tokens", func(c policies.Cost) bool {
		return c == policies.CostTokens || c == policies.CostInputTokens || c == policies.CostOutputTokens
	}, false, "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	{"usd", func(c policies.Cost) bool { return c == policies.CostUSD }, true,
		"X-Ratelimit-Limit-Usd", "X-Ratelimit-Remaining-Usd", "X-Ratelimit-Reset-Usd"},
}

// setOpenAIHeaders adds OpenAI's rate-limit headers, one set per unit (see
// rateSets), each from the denying policy of its unit or else the most
// restrictive one. costs holds each decision's policy cost.
func setOpenAIHeaders(h http.Header, v limiter.Verdict, costs []policies.Cost) {
	setOpenAIHeadersWith(h, v, costs, nil)
}

// setOpenAIHeadersWith is setOpenAIHeaders with what a peek before the body
// found: a policy the decision did not read (not asked because another
// denied first, denied without reading its state) shows the peek's
// remaining, so a 429 carries every set that applies with its true values.
func setOpenAIHeadersWith(h http.Header, v limiter.Verdict, costs []policies.Cost, peeked []limiter.Decision) {
	deniedBy, denied := v.DeniedBy()
	for _, set := range rateSets {
		var best limiter.Decision
		var bestRemaining int64
		found, bestDenies := false, false
		for i := range v.Decisions {
			if i >= len(costs) || !set.counts(costs[i]) || v.Decisions[i].Shadow {
				continue
			}
			d := v.Decisions[i]
			rem, ok := stateRemaining(d)
			if !ok {
				p, seen := peekedFor(peeked, d.Policy)
				// A denial from the denial cache is newer than a peek
				// that found room: nothing the call could use is left.
				seen = seen && (d.Reason != limiter.ReasonDenialCached || !p.Allowed)
				if !decided(&d) && !seen {
					continue
				}
				if seen {
					rem, _ = stateRemaining(p)
					if !decided(&d) {
						d = p
					}
				}
			}
			denies := i == deniedBy && denied
			if !found || denies || (!bestDenies && rem < bestRemaining) {
				best, bestRemaining, found, bestDenies = d, rem, true, denies
			}
			if denies {
				break
			}
		}
		if !found {
			continue
		}
		reset := best.ResetAfter
		if !best.Allowed {
			reset = max(best.RetryAfter, best.ResetAfter)
		}
		limit, remaining := strconv.FormatInt(best.Limit.Quota(), 10), strconv.FormatInt(bestRemaining, 10)
		if set.usd {
			limit, remaining = dollars(best.Limit.Quota()), dollars(bestRemaining)
		}
		// As h.Set, the three values in one allocation.
		v := []string{limit, remaining, openAIDuration(reset)}
		h[set.limitKey], h[set.remainingKey], h[set.resetKey] = v[0:1:1], v[1:2:2], v[2:3:3]
	}
}

// stateRemaining is what remains under d's policy, when d read the key's
// state: an admitted decision's units left after it, or a denied one's
// units left that were too few (a large call can be refused with much
// left). ok is false when d says nothing of the state.
func stateRemaining(d limiter.Decision) (int64, bool) {
	switch d.Reason {
	case limiter.ReasonNone, limiter.ReasonLimited, limiter.ReasonLocalFallback:
		return max(d.Remaining, 0), true
	}
	return 0, false
}

func peekedFor(peeked []limiter.Decision, policy string) (limiter.Decision, bool) {
	for _, d := range peeked {
		if d.Policy == policy {
			_, ok := stateRemaining(d)
			return d, ok
		}
	}
	return limiter.Decision{}, false
}

// dollars writes micro-dollars as dollars with six decimals.
func dollars(micro int64) string {
	micro = max(micro, 0)
	frac := strconv.FormatInt(micro%1_000_000, 10)
	return strconv.FormatInt(micro/1_000_000, 10) + "." + strings.Repeat("0", 6-len(frac)) + frac
}

// openAIDuration writes d as OpenAI's headers do: "6m0s", "1s", "120ms".
func openAIDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if d < time.Second {
		return strconv.FormatInt(ceilDiv(int64(d), int64(time.Millisecond)), 10) + "ms"
	}
	return d.Round(time.Millisecond).String()
}
