package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// Response header names the gateway owns. On proxied responses the gateway's
// values replace any the upstream sent under the same names.
const (
	hdrPolicy     = "Ratelimit-Policy" // canonical form of RateLimit-Policy
	hdrRateLimit  = "Ratelimit"        // canonical form of RateLimit
	hdrXLimit     = "X-Ratelimit-Limit"
	hdrXRemaining = "X-Ratelimit-Remaining"
	hdrXReset     = "X-Ratelimit-Reset"
	hdrRetryAfter = "Retry-After"
)

// setRateLimitHeaders renders v into h, replacing what h held under those
// names. It writes nothing for a verdict without rendered decisions (no
// policy applied), so an upstream's own headers then pass through.
//
// RateLimit-Policy and RateLimit follow the IETF httpapi draft: one item per
// decided policy, `"name";q=<quota>;w=<window s>` and
// `"name";r=<remaining>;t=<s until reset>`. X-RateLimit-* describe the
// deciding (denying or most restrictive) decision.
func setRateLimitHeaders(h http.Header, v limiter.Verdict) {
	var pol, rl strings.Builder
	for i := range v.Decisions {
		d := &v.Decisions[i]
		if !decided(d) || d.Shadow { // a shadow policy is not the client's limit
			continue
		}
		if pol.Len() > 0 {
			pol.WriteString(", ")
			rl.WriteString(", ")
		}
		writeSFString(&pol, d.Policy)
		pol.WriteString(";q=")
		pol.WriteString(strconv.FormatInt(d.Limit.Quota(), 10))
		pol.WriteString(";w=")
		pol.WriteString(strconv.FormatInt(ceilSeconds(d.Limit.Period), 10))

		r, t := remainingAndReset(d)
		writeSFString(&rl, d.Policy)
		rl.WriteString(";r=")
		rl.WriteString(strconv.FormatInt(r, 10))
		rl.WriteString(";t=")
		rl.WriteString(strconv.FormatInt(t, 10))
	}
	if pol.Len() == 0 {
		return
	}
	h[hdrPolicy] = []string{pol.String()}
	h[hdrRateLimit] = []string{rl.String()}

	d, _ := v.Deciding()
	r, t := remainingAndReset(&d)
	h[hdrXLimit] = []string{strconv.FormatInt(d.Limit.Quota(), 10)}
	h[hdrXRemaining] = []string{strconv.FormatInt(r, 10)}
	h[hdrXReset] = []string{strconv.FormatInt(t, 10)}
}

// decided reports whether a check was actually asked. When one check denies,
// the limiter may leave later ones unasked, which would otherwise render as
// "r=0".
func decided(d *limiter.Decision) bool { return d.Reason != limiter.ReasonNotAsked }

// remainingAndReset gives the r and t values of a decision: for a denial,
// nothing remains and t is the wait until a retry can pass.
func remainingAndReset(d *limiter.Decision) (r, t int64) {
	if !d.Allowed {
		return 0, ceilSeconds(d.RetryAfter)
	}
	return max(d.Remaining, 0), ceilSeconds(d.ResetAfter)
}

// retryAfterSeconds is the Retry-After value: whole seconds rounded up and at
// least 1, so a client that honours it never retries in a hot loop.
func retryAfterSeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// retryAfterMillis is the body's retry_after_ms: milliseconds rounded up, at
// least 1 for the same reason.
func retryAfterMillis(d time.Duration) int64 {
	return max(ceilDiv(int64(d), int64(time.Millisecond)), 1)
}

func ceilSeconds(d time.Duration) int64 { return ceilDiv(int64(d), int64(time.Second)) }

func ceilDiv(n, unit int64) int64 {
	if n <= 0 {
		return 0
	}
	return (n + unit - 1) / unit
}

// writeSFString writes s as a structured-field string (RFC 9651): quoted,
// with '"' and '\' escaped. Policy names are validated to a safe alphabet;
// escaping keeps the header well-formed even if that changes.
func writeSFString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		if c < 0x20 || c > 0x7e {
			c = '?' // sf-string allows printable ASCII only
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
}
