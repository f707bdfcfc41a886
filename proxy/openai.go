package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// On an llm route the gateway speaks as the provider's own API does, so that
// the official SDKs understand it: errors in OpenAI's shape (the SDKs raise
// their RateLimitError on a 429 and back off by themselves), and OpenAI's
// x-ratelimit-*-requests / -tokens headers beside the IETF fields.

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

// setOpenAIHeadersWith adds OpenAI's rate-limit headers, one set per unit
// (see rateSets), each from the denying policy of its unit or else the most
// restrictive one. costs holds each decision's policy cost. peeked is what
// a peek before the body found: a policy the decision did not read (not
// asked because another denied first, denied without reading its state)
// shows the peek's remaining, so a 429 carries every set that applies with
// its true values.
func setOpenAIHeadersWith(h http.Header, v limiter.Verdict, costs []policies.Cost, peeked []limiter.Decision) {
	var stack [headerStack]byte
	var hv headerValues
	hv.setOn(h, hv.openAI(stack[:0], v, costs, peeked))
}

// openAI renders OpenAI's rate-limit headers into buf (see
// setOpenAIHeadersWith), so that they can share one string with the
// response's other header values.
func (hv *headerValues) openAI(buf []byte, v limiter.Verdict, costs []policies.Cost, peeked []limiter.Decision) []byte {
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
		if set.usd {
			buf = appendDollars(buf, best.Limit.Quota())
			hv.end(buf, set.limitKey)
			buf = appendDollars(buf, bestRemaining)
			hv.end(buf, set.remainingKey)
		} else {
			buf = hv.int(buf, set.limitKey, best.Limit.Quota())
			buf = hv.int(buf, set.remainingKey, bestRemaining)
		}
		buf = appendOpenAIDuration(buf, reset)
		hv.end(buf, set.resetKey)
	}
	return buf
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

// appendDollars appends micro-dollars as dollars with six decimals.
func appendDollars(b []byte, micro int64) []byte {
	micro = max(micro, 0)
	b = strconv.AppendInt(b, micro/1_000_000, 10)
	b = append(b, '.')
	frac := micro % 1_000_000
	for unit := int64(100_000); unit > 0; unit /= 10 {
		b = append(b, byte('0'+frac/unit))
		frac %= unit
	}
	return b
}

// appendOpenAIDuration appends d as OpenAI's headers write it: "6m0s",
// "1.5s", "120ms" (under a second, in whole milliseconds rounded up; from
// a second, as time.Duration's String of d rounded to the millisecond).
func appendOpenAIDuration(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	if d < time.Second {
		b = strconv.AppendInt(b, ceilDiv(int64(d), int64(time.Millisecond)), 10)
		return append(b, "ms"...)
	}
	u := uint64(d.Round(time.Millisecond)) // Round saturates: still positive
	secs, frac := u/uint64(time.Second), u%uint64(time.Second)
	if secs >= 3600 {
		b = strconv.AppendUint(b, secs/3600, 10)
		b = append(b, 'h')
	}
	if secs >= 60 {
		b = strconv.AppendUint(b, secs/60%60, 10)
		b = append(b, 'm')
	}
	b = strconv.AppendUint(b, secs%60, 10)
	if frac > 0 {
		// Nine digits of nanoseconds, without the trailing zeros.
		var digits [9]byte
		for i := len(digits) - 1; i >= 0; i-- {
			digits[i] = byte('0' + frac%10)
			frac /= 10
		}
		n := len(digits)
		for digits[n-1] == '0' {
			n--
		}
		b = append(b, '.')
		b = append(b, digits[:n]...)
	}
	return append(b, 's')
}
