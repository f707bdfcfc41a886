package proxy

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// An llm call's response carries the gateway's rate-limit headers and
// OpenAI's x-ratelimit-*-<unit> sets, rendered into one buffer: under each
// header mode they read exactly as they did when each value was a string of
// its own (the want values were taken from that rendering), the upstream's
// own values under the gateway's names are replaced, and the upstream's
// values of a set the route does not show pass through.
func TestLLMResponseHeadersByMode(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		for _, name := range []string{"Ratelimit", "Ratelimit-Policy", "X-Ratelimit-Limit", "X-Ratelimit-Remaining",
			"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Reset-Tokens", "X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Usd"} {
			h.Add(name, "upstream")
			h.Add(name, "upstream-2")
		}
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"gpt-4o-mini","choices":[],`+
			`"usage":{"prompt_tokens":11,"completion_tokens":16,"total_tokens":27}}`)
	}))
	for _, tc := range []struct {
		mode, policies string
		want           []string
	}{
		{"all", "rpm, tpm, dollars", []string{
			"Content-Length: 142",
			"Content-Type: application/json",
			"Ratelimit-Policy: \"rpm\";q=3;w=60, \"tpm\";q=1000;w=3600, \"dollars\";q=1000000;w=3600",
			"Ratelimit: \"rpm\";r=2;t=20, \"tpm\";r=887;t=407, \"dollars\";r=999938;t=1",
			"X-Ratelimit-Limit-Requests: 3",
			"X-Ratelimit-Limit-Tokens: 1000",
			"X-Ratelimit-Limit-Usd: 1.000000",
			"X-Ratelimit-Limit: 3",
			"X-Ratelimit-Remaining-Requests: 2",
			"X-Ratelimit-Remaining-Tokens: 887",
			"X-Ratelimit-Remaining-Usd: 0.999938",
			"X-Ratelimit-Remaining: 2",
			"X-Ratelimit-Reset-Requests: 20s",
			"X-Ratelimit-Reset-Tokens: 6m46.8s",
			"X-Ratelimit-Reset-Usd: 224ms",
			"X-Ratelimit-Reset: 20",
		}},
		{"ietf", "rpm, tpm, dollars", []string{
			"Content-Length: 142",
			"Content-Type: application/json",
			"Ratelimit-Policy: \"rpm\";q=3;w=60, \"tpm\";q=1000;w=3600, \"dollars\";q=1000000;w=3600",
			"Ratelimit: \"rpm\";r=2;t=20, \"tpm\";r=887;t=407, \"dollars\";r=999938;t=1",
			"X-Ratelimit-Limit-Requests: 3",
			"X-Ratelimit-Limit-Tokens: 1000",
			"X-Ratelimit-Limit-Usd: 1.000000",
			"X-Ratelimit-Limit: upstream | upstream-2",
			"X-Ratelimit-Remaining-Requests: 2",
			"X-Ratelimit-Remaining-Tokens: 887",
			"X-Ratelimit-Remaining-Usd: 0.999938",
			"X-Ratelimit-Remaining: upstream | upstream-2",
			"X-Ratelimit-Reset-Requests: 20s",
			"X-Ratelimit-Reset-Tokens: 6m46.8s",
			"X-Ratelimit-Reset-Usd: 224ms",
		}},
		{"legacy", "rpm, tpm, dollars", []string{
			"Content-Length: 142",
			"Content-Type: application/json",
			"Ratelimit-Policy: upstream | upstream-2",
			"Ratelimit: upstream | upstream-2",
			"X-Ratelimit-Limit-Requests: 3",
			"X-Ratelimit-Limit-Tokens: 1000",
			"X-Ratelimit-Limit-Usd: 1.000000",
			"X-Ratelimit-Limit: 3",
			"X-Ratelimit-Remaining-Requests: 2",
			"X-Ratelimit-Remaining-Tokens: 887",
			"X-Ratelimit-Remaining-Usd: 0.999938",
			"X-Ratelimit-Remaining: 2",
			"X-Ratelimit-Reset-Requests: 20s",
			"X-Ratelimit-Reset-Tokens: 6m46.8s",
			"X-Ratelimit-Reset-Usd: 224ms",
			"X-Ratelimit-Reset: 20",
		}},
		{"none", "rpm, tpm, dollars", []string{
			"Content-Length: 142",
			"Content-Type: application/json",
			"Ratelimit-Policy: upstream | upstream-2",
			"Ratelimit: upstream | upstream-2",
			"X-Ratelimit-Limit-Requests: 3",
			"X-Ratelimit-Limit-Tokens: 1000",
			"X-Ratelimit-Limit-Usd: 1.000000",
			"X-Ratelimit-Limit: upstream | upstream-2",
			"X-Ratelimit-Remaining-Requests: 2",
			"X-Ratelimit-Remaining-Tokens: 887",
			"X-Ratelimit-Remaining-Usd: 0.999938",
			"X-Ratelimit-Remaining: upstream | upstream-2",
			"X-Ratelimit-Reset-Requests: 20s",
			"X-Ratelimit-Reset-Tokens: 6m46.8s",
			"X-Ratelimit-Reset-Usd: 224ms",
		}},
		{"all", "tpm", []string{
			"Content-Length: 142",
			"Content-Type: application/json",
			"Ratelimit-Policy: \"tpm\";q=1000;w=3600",
			"Ratelimit: \"tpm\";r=887;t=407",
			"X-Ratelimit-Limit-Requests: upstream | upstream-2",
			"X-Ratelimit-Limit-Tokens: 1000",
			"X-Ratelimit-Limit: 1000",
			"X-Ratelimit-Remaining-Tokens: 887",
			"X-Ratelimit-Remaining-Usd: upstream | upstream-2",
			"X-Ratelimit-Remaining: 887",
			"X-Ratelimit-Reset-Tokens: 6m46.8s",
			"X-Ratelimit-Reset: 407",
		}},
		{"none", "dollars", []string{
			"Content-Length: 142",
			"Content-Type: application/json",
			"Ratelimit-Policy: upstream | upstream-2",
			"Ratelimit: upstream | upstream-2",
			"X-Ratelimit-Limit-Requests: upstream | upstream-2",
			"X-Ratelimit-Limit-Tokens: upstream | upstream-2",
			"X-Ratelimit-Limit-Usd: 1.000000",
			"X-Ratelimit-Limit: upstream | upstream-2",
			"X-Ratelimit-Remaining-Usd: 0.999938",
			"X-Ratelimit-Remaining: upstream | upstream-2",
			"X-Ratelimit-Reset-Tokens: upstream | upstream-2",
			"X-Ratelimit-Reset-Usd: 224ms",
		}},
	} {
		t.Run(tc.mode+" "+tc.policies, func(t *testing.T) {
			snap := compileYAML(t, `
prices:
  default: {input: 0.15, output: 0.6}
routes:
  - name: llm
    match: {path_prefix: /v1/}
    upstream: `+up.URL+`
    llm: openai
    rate_limit_headers: `+tc.mode+`
    policies: [`+tc.policies+`]
policies:
  rpm: {key: ip, rate: 3, per: 1m}
  tpm: {key: ip, cost: tokens, rate: 1000, per: 1h}
  dollars: {key: ip, cost: usd, rate: 1, per: 1h}
`)
			srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
			a := llmDo(t, "POST", srv.URL+"/v1/chat/completions", "", chatCall(100))
			if a.status != http.StatusOK {
				t.Fatalf("status: got %d, want 200", a.status)
			}
			var got []string
			for name, vs := range a.header {
				if name != "Date" {
					got = append(got, name+": "+strings.Join(vs, " | "))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				var b strings.Builder
				for _, g := range got {
					fmt.Fprintf(&b, "\t%q,\n", g)
				}
				t.Errorf("headers:\n%s", b.String())
			}
		})
	}
}

// appendOpenAIDuration and appendDollars write what the strings they
// replaced did: under a second, whole milliseconds rounded up; from a
// second, time.Duration's String rounded to the millisecond; dollars with
// six decimals.
func TestOpenAIValuesAsStrings(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, 0, 1, time.Millisecond - 1, time.Millisecond, 999_999_999, time.Second,
		time.Second + 1, 1500 * time.Millisecond, 1_000_500_000, 1_050_000_000, 1_005_000_000, 59_999_999_999, time.Minute,
		6*time.Minute + 46_800*time.Millisecond, time.Hour, 25*time.Hour + 61*time.Second + 7*time.Millisecond,
		math.MaxInt64, math.MaxInt64 - 400_000} {
		want := "0s"
		switch {
		case d > 0 && d < time.Second:
			want = strconv.FormatInt(ceilDiv(int64(d), int64(time.Millisecond)), 10) + "ms"
		case d >= time.Second:
			want = d.Round(time.Millisecond).String()
		}
		if got := string(appendOpenAIDuration(nil, d)); got != want {
			t.Errorf("appendOpenAIDuration(%d): got %q, want %q", int64(d), got, want)
		}
	}
	for _, micro := range []int64{-5, 0, 1, 999_999, 1_000_000, 1_000_001, 12_345_678, math.MaxInt64} {
		want := fmt.Sprintf("%d.%06d", max(micro, 0)/1_000_000, max(micro, 0)%1_000_000)
		if got := string(appendDollars(nil, micro)); got != want {
			t.Errorf("appendDollars(%d): got %q, want %q", micro, got, want)
		}
	}
}
