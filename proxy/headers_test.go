package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

func TestSetRateLimitHeaders(t *testing.T) {
	lim := limiter.Limit{Rate: 10, Period: time.Minute, Burst: 20}
	noBurst := limiter.Limit{Rate: 7, Period: 1500 * time.Millisecond}
	tests := []struct {
		name    string
		verdict limiter.Verdict
		want    map[string]string // each header must hold exactly this one value
	}{
		{
			name:    "no decisions leaves headers alone",
			verdict: limiter.Verdict{Allowed: true},
			want: map[string]string{
				"RateLimit-Policy": "upstream", "RateLimit": "upstream", "X-RateLimit-Limit": "upstream",
			},
		},
		{
			name: "one allowed, quota is the burst, reset rounded up",
			verdict: limiter.Verdict{Allowed: true, Decisions: []limiter.Decision{
				{Policy: "p", Allowed: true, Limit: lim, Remaining: 17, ResetAfter: 8*time.Second + time.Nanosecond},
			}},
			want: map[string]string{
				"RateLimit-Policy": `"p";q=20;w=60`, "RateLimit": `"p";r=17;t=9`,
				"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "17", "X-RateLimit-Reset": "9",
			},
		},
		{
			name: "no burst: quota is the rate, window rounded up",
			verdict: limiter.Verdict{Allowed: true, Decisions: []limiter.Decision{
				{Policy: "p", Allowed: true, Limit: noBurst, Remaining: 6, ResetAfter: 200 * time.Millisecond},
			}},
			want: map[string]string{
				"RateLimit-Policy": `"p";q=7;w=2`, "RateLimit": `"p";r=6;t=1`,
				"X-RateLimit-Limit": "7", "X-RateLimit-Remaining": "6", "X-RateLimit-Reset": "1",
			},
		},
		{
			name: "denied item: r=0 and t is the retry wait; unasked checks render nothing",
			verdict: limiter.DeniedBy(1, []limiter.Decision{
				{Policy: "a", Allowed: true, Limit: lim, Remaining: 5, ResetAfter: 45 * time.Second},
				{Policy: "b", Limit: noBurst, Reason: limiter.ReasonLimited, Remaining: 3, RetryAfter: 2100 * time.Millisecond, ResetAfter: time.Minute},
				{Policy: "c", Limit: lim, Reason: limiter.ReasonNotAsked},
			}),
			want: map[string]string{
				"RateLimit-Policy": `"a";q=20;w=60, "b";q=7;w=2`, "RateLimit": `"a";r=5;t=45, "b";r=0;t=3`,
				"X-RateLimit-Limit": "7", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "3",
			},
		},
		{
			name: "failed open and local fallback still render",
			verdict: limiter.Verdict{Allowed: true, Decisions: []limiter.Decision{
				{Policy: "open", Allowed: true, Limit: lim, Remaining: 20, Reason: limiter.ReasonFailedOpen},
				{Policy: "fallback", Allowed: true, Limit: lim, Remaining: 4, ResetAfter: time.Second, Reason: limiter.ReasonLocalFallback},
			}},
			want: map[string]string{
				"RateLimit-Policy": `"open";q=20;w=60, "fallback";q=20;w=60`, "RateLimit": `"open";r=20;t=0, "fallback";r=4;t=1`,
				"X-RateLimit-Limit": "20", "X-RateLimit-Remaining": "4", "X-RateLimit-Reset": "1",
			},
		},
		{
			name: "names are escaped as structured-field strings",
			verdict: limiter.Verdict{Allowed: true, Decisions: []limiter.Decision{
				{Policy: `we"ird\é`, Allowed: true, Limit: lim, Remaining: 1},
			}},
			want: map[string]string{
				"RateLimit-Policy": `"we\"ird\\??";q=20;w=60`, "RateLimit": `"we\"ird\\??";r=1;t=0`,
				"X-RateLimit-Limit": "20",
			},
		},
	}
	sets := []policies.RateLimitHeaders{policies.RateLimitHeadersAll, policies.RateLimitHeadersIETF,
		policies.RateLimitHeadersLegacy, policies.RateLimitHeadersNone}
	for _, tt := range tests {
		for _, set := range sets {
			t.Run(tt.name+"/"+string(set), func(t *testing.T) {
				h := http.Header{}
				// What an upstream might have sent: replaced, never
				// duplicated; left as sent under names the set leaves out.
				h.Add("RateLimit", "upstream")
				h.Add("RateLimit-Policy", "upstream")
				h.Add("X-RateLimit-Limit", "upstream")
				setRateLimitHeaders(h, tt.verdict, set)
				for name, want := range tt.want {
					inSet := set.IETF() && strings.HasPrefix(name, "RateLimit") || set.Legacy() && strings.HasPrefix(name, "X-")
					got := h.Values(name)
					switch {
					case inSet && (len(got) != 1 || got[0] != want):
						t.Errorf("%s: got %q, want [%q]", name, got, want)
					case !inSet && name != "X-RateLimit-Remaining" && name != "X-RateLimit-Reset" && (len(got) != 1 || got[0] != "upstream"):
						t.Errorf("%s is not in the set: got %q, want the upstream's own", name, got)
					case !inSet && (name == "X-RateLimit-Remaining" || name == "X-RateLimit-Reset") && len(got) != 0:
						t.Errorf("%s is not in the set: got %q, want none", name, got)
					}
				}
			})
		}
	}
}

func TestRetryAfterRounding(t *testing.T) {
	tests := []struct {
		d          time.Duration
		wantSecs   int64
		wantMillis int64
	}{
		{0, 1, 1},
		{-time.Second, 1, 1},
		{time.Nanosecond, 1, 1},
		{999 * time.Millisecond, 1, 999},
		{time.Second, 1, 1000},
		{time.Second + time.Nanosecond, 2, 1001},
		{12 * time.Second, 12, 12000},
		{time.Hour, 3600, 3600000},
	}
	for _, tt := range tests {
		if got := retryAfterSeconds(tt.d); got != tt.wantSecs {
			t.Errorf("retryAfterSeconds(%v): got %d, want %d", tt.d, got, tt.wantSecs)
		}
		if got := retryAfterMillis(tt.d); got != tt.wantMillis {
			t.Errorf("retryAfterMillis(%v): got %d, want %d", tt.d, got, tt.wantMillis)
		}
	}
}

func TestDeniedMessage(t *testing.T) {
	lim := limiter.Limit{Rate: 10, Period: time.Minute, Burst: 20}
	tests := []struct {
		d    limiter.Decision
		want string
	}{
		{limiter.Decision{Policy: "p", Limit: limiter.Limit{Period: time.Minute}, Reason: limiter.ReasonDenyAll},
			`policy "p" denies all requests (rate 0)`},
		{limiter.Decision{Policy: "p", Limit: lim, Reason: limiter.ReasonCostTooHigh},
			`the request costs more than policy "p" allows at once (burst 20), so it can never pass`},
		{limiter.Decision{Policy: "p", Limit: lim, Reason: limiter.ReasonLimited, RetryAfter: 2500 * time.Millisecond},
			`rate limit exceeded for policy "p" (10 per 1m, burst 20); retry in 3s`},
		{limiter.Decision{Policy: "p", Limit: lim, Reason: limiter.ReasonLimited, RetryAfter: 120 * time.Microsecond},
			`rate limit exceeded for policy "p" (10 per 1m, burst 20); retry in 1ms`},
	}
	for _, tt := range tests {
		if got := deniedMessage(tt.d); got != tt.want {
			t.Errorf("deniedMessage(%v): got %q, want %q", tt.d.Reason, got, tt.want)
		}
	}
}

func TestHeaderTooLarge(t *testing.T) {
	r, err := http.NewRequest("GET", "http://gw.test/path?q=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.RequestURI = "/path?q=1"
	r.Proto = "HTTP/1.1"
	r.Header.Set("X-A", strings.Repeat("a", 10))
	// "GET /path?q=1 HTTP/1.1\r\n" = 24, "Host: gw.test\r\n" = 15,
	// "X-A: aaaaaaaaaa\r\n" = 17: 56 in all.
	tests := []struct {
		limit int
		want  bool
	}{
		{56, false},
		{55, true},
		{30, true},
		{1000, false},
	}
	for _, tt := range tests {
		if got := headerTooLarge(r, tt.limit); got != tt.want {
			t.Errorf("headerTooLarge(limit %d): got %v, want %v", tt.limit, got, tt.want)
		}
	}
}

// rateSets' header names are the canonical forms of OpenAI's names, as
// http.Header.Set would store them.
func TestRateSetKeysAreCanonical(t *testing.T) {
	for _, set := range rateSets {
		for _, k := range []struct{ got, name string }{
			{set.limitKey, "x-ratelimit-limit-" + set.name},
			{set.remainingKey, "x-ratelimit-remaining-" + set.name},
			{set.resetKey, "x-ratelimit-reset-" + set.name},
		} {
			if want := http.CanonicalHeaderKey(k.name); k.got != want {
				t.Errorf("%s: got %q, want %q", k.name, k.got, want)
			}
		}
	}
}

// appendSFString writes an RFC 9651 sf-string: a plain name as it is, a
// quote and a backslash escaped, and what sf-strings cannot hold as "?".
func TestAppendSFString(t *testing.T) {
	for in, want := range map[string]string{
		"gateway-local": `"gateway-local"`,
		"":              `""`,
		`a"b\c`:         `"a\"b\\c"`,
		"tab\there":     `"tab?here"`,
		"café":          `"caf??"`,
	} {
		if got := string(appendSFString([]byte("x"), in)); got != "x"+want {
			t.Errorf("appendSFString(%q) = %s, want x%s", in, got, want)
		}
	}
}
