package proxy

import (
	"context"
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

// openAIKey marks a request on an llm route in its context.
type openAIKey struct{}

func withOpenAIErrors(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), openAIKey{}, true))
}

func openAIErrors(r *http.Request) bool {
	v, _ := r.Context().Value(openAIKey{}).(bool)
	return v
}

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
		if body.budget {
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

// setOpenAIHeaders adds OpenAI's rate-limit headers: for requests, the most
// restrictive policy that counts requests; for tokens, the most restrictive
// that counts tokens. costs holds each decision's policy cost.
func setOpenAIHeaders(h http.Header, v limiter.Verdict, costs []policies.Cost) {
	for _, kind := range []string{"requests", "tokens"} {
		var best *limiter.Decision
		for i := range v.Decisions {
			d := &v.Decisions[i]
			if i >= len(costs) || !decided(d) || d.Shadow || costs[i].CountsTokens() != (kind == "tokens") {
				continue
			}
			if best == nil || remaining(d) < remaining(best) {
				best = d
			}
		}
		if best == nil {
			continue
		}
		h.Set("x-ratelimit-limit-"+kind, strconv.FormatInt(best.Limit.Quota(), 10))
		h.Set("x-ratelimit-remaining-"+kind, strconv.FormatInt(remaining(best), 10))
		reset := best.ResetAfter
		if !best.Allowed {
			reset = best.RetryAfter
		}
		h.Set("x-ratelimit-reset-"+kind, openAIDuration(reset))
	}
}

func remaining(d *limiter.Decision) int64 {
	if !d.Allowed {
		return 0
	}
	return max(d.Remaining, 0)
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
