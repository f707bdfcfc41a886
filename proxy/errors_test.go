package proxy

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// The hand-written encoder of error bodies gives exactly encoding/json's
// bytes, hostile strings included.
func TestErrorBodyJSONIsEncodingJSON(t *testing.T) {
	ms := int64(1500)
	for _, msg := range []string{
		"", "plain", `quote " and \ backslash`, "ctl \x00\x01\x1f\n\r\t", "<script>&amp;</script>",
		"unicode é 漢字 😀", "line\u2028sep\u2029", "bad utf8 \xff\xfe end", "\xc3", `policy "per-ip"`,
	} {
		for _, b := range []errorBody{
			{Code: 42900, Message: msg, Policy: msg, RetryAfterMs: &ms},
			{Code: 40000, Message: msg},
		} {
			want, err := json.Marshal(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := b.appendJSON(nil); string(got) != string(want) {
				t.Errorf("%q:\n got %s\nwant %s", msg, got, want)
			}
		}
	}
}

// The 429 message built by hand reads as the Sprintf it replaced.
func TestDeniedMessageAsSprintf(t *testing.T) {
	for _, d := range []limiter.Decision{
		{Policy: "per-ip", Limit: limiter.Limit{Rate: 10, Period: time.Minute, Burst: 10}, RetryAfter: 5400 * time.Millisecond},
		{Policy: `we"ird`, Limit: limiter.Limit{Rate: 3, Period: 90 * time.Second, Burst: 7}, RetryAfter: 80 * time.Millisecond},
		{Policy: "daily", Limit: limiter.Limit{Rate: 100, Period: 24 * time.Hour, Burst: 100}, RetryAfter: 3 * time.Hour},
	} {
		want := fmt.Sprintf("rate limit exceeded for policy %q (%d per %s, burst %d); retry in %s",
			d.Policy, d.Limit.Rate, d.Limit.Per(), d.Limit.Quota(), roundUp(d.RetryAfter))
		if got := deniedMessage(d); got != want {
			t.Errorf("got  %q\nwant %q", got, want)
		}
	}
}
