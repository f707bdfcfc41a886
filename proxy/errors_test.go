package proxy

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// The hand-written encoder of error bodies gives exactly encoding/json's
// bytes, hostile strings included.
func TestErrorBodyJSONIsEncodingJSON(t *testing.T) {
	ms := int64(1500)
	for _, msg := range []string{
		"", "plain", `quote " and \ backslash`, "ctl \x00\x01\x1f\n\r\t", "del \x7f", "<script>&amp;</script>",
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

// appendQuote is strconv.AppendQuote for every byte in every place of a
// name, and for names of more than one byte that need escaping.
func TestAppendQuoteAsStrconv(t *testing.T) {
	names := []string{"", "per-ip", "a.b_c-9", `we"ird`, `back\slash`, "tab\t", "é", "\u2028", "\xff", "~", "\x7f"}
	for c := range 256 {
		names = append(names, string([]byte{byte(c)}), "ab"+string([]byte{byte(c)})+"cd")
	}
	for _, s := range names {
		if got, want := string(appendQuote([]byte("x"), s)), string(strconv.AppendQuote([]byte("x"), s)); got != want {
			t.Errorf("%q: got %s, want %s", s, got, want)
		}
	}
}

// The 429's message rendered into bytes reads as the string one, for
// every reason, and its parts as the standard library writes them.
func TestAppendDeniedMessageParts(t *testing.T) {
	for _, d := range []time.Duration{0, 1, time.Millisecond - 1, time.Millisecond, 999 * time.Millisecond,
		time.Second - 1, time.Second, time.Second + 1, 59 * time.Second, time.Minute, time.Minute + 1, 3599 * time.Second,
		time.Hour, time.Hour + time.Second, 26*time.Hour + 7*time.Minute + 3*time.Second, 1 << 62} {
		want := roundUp(d).String()
		if got := string(appendWait(nil, d)); got != want {
			t.Errorf("appendWait(%v): got %q, want %q", d, got, want)
		}
	}
	for ms := range int64(5000) {
		d := time.Duration(ms) * time.Millisecond / 3
		if got, want := string(appendWait(nil, d)), roundUp(d).String(); got != want {
			t.Fatalf("appendWait(%v): got %q, want %q", d, got, want)
		}
	}
	for _, l := range []limiter.Limit{
		{Rate: 1, Period: time.Minute}, {Rate: 1, Period: 2 * time.Hour}, {Rate: 1, Period: 90 * time.Second},
		{Rate: 1, Period: 1500 * time.Millisecond}, {Rate: 1, Period: 0}, {Rate: 1, Period: 31 * 24 * time.Hour, Calendar: limiter.CalendarMonth},
	} {
		if got, want := string(appendPer(nil, l)), l.Per(); got != want {
			t.Errorf("appendPer(%+v): got %q, want %q", l, got, want)
		}
	}
	for _, reason := range []limiter.Reason{limiter.ReasonLimited, limiter.ReasonDenialCached, limiter.ReasonDenyAll,
		limiter.ReasonOverloaded, limiter.ReasonCostTooHigh} {
		d := limiter.Decision{Policy: "per-ip", Reason: reason, Limit: limiter.Limit{Rate: 2, Period: time.Minute, Burst: 3}, RetryAfter: 1500 * time.Millisecond}
		if got, want := string(appendDeniedMessage([]byte("x"), d)), "x"+deniedMessage(d); got != want {
			t.Errorf("%v: got %q, want %q", reason, got, want)
		}
	}
}

// The error body with its message as bytes is the body with it as a
// string.
func TestAppendErrorJSONBytes(t *testing.T) {
	ms := int64(59993)
	for _, msg := range []string{"plain", `policy "p" <&>`, "bad utf8 \xff\xfe end \xc3", "unicode é 😀 \u2028"} {
		b := errorBody{Code: 42900, Message: msg, Policy: "p", RetryAfterMs: &ms}
		if got, want := string(appendErrorJSON(nil, b.Code, []byte(msg), b.Policy, &ms)), string(b.appendJSON(nil)); got != want {
			t.Errorf("%q:\n got %s\nwant %s", msg, got, want)
		}
	}
}
