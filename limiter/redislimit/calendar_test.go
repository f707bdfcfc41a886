package redislimit

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// The fixed window's month arithmetic runs in Redis's Lua: for instants
// across four centuries (leap years, century rules, the last millisecond of a
// month, the first of the next), the end of the month it computes is the
// first of the next month, 00:00 UTC, as Go's calendar says.
func TestMonthEndInRedisLua(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	src := monthEndLua + `
local out = {}
for i = 1, #ARGV do out[i] = month_end(tonumber(ARGV[i])) end
return out
`
	var instants []time.Time
	for d := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() < 2400; d = d.AddDate(0, 0, 17) {
		instants = append(instants, d.Add(13*time.Hour))
	}
	for _, y := range []int{1999, 2000, 2024, 2026, 2100} {
		for m := time.January; m <= time.December; m++ {
			first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
			instants = append(instants, first, first.Add(-time.Millisecond))
		}
	}
	for len(instants) > 0 {
		batch := instants[:min(len(instants), 500)]
		instants = instants[len(batch):]
		args := make([]any, len(batch))
		for i, at := range batch {
			args[i] = at.UnixMilli()
		}
		got, err := c.Eval(t.Context(), src, nil, args...).Int64Slice()
		if err != nil {
			t.Fatalf("EVAL: %v", err)
		}
		for i, at := range batch {
			want := time.Date(at.Year(), at.Month()+1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
			if got[i] != want {
				t.Fatalf("month_end(%s): got %s, want %s", at.Format(time.RFC3339Nano),
					time.UnixMilli(got[i]).UTC().Format(time.RFC3339), time.UnixMilli(want).UTC().Format(time.RFC3339))
			}
		}
	}
}

// A monthly fixed window resets at the start of the next UTC month, by
// Redis's clock, and counts its quota until then.
func TestFixedWindowCalendarMonth(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	lim := limiter.Limit{Rate: 3, Period: limiter.MonthPeriod, Calendar: limiter.CalendarMonth}
	chk := limiter.Check{Rule: policy("monthly", limiter.FixedWindow), Limit: lim, Key: "tenant"}
	before := redisNow(t, c)
	var last limiter.Decision
	for i, want := range []bool{true, true, true, false} {
		last = decideOne(t, r, chk)
		if last.Allowed != want {
			t.Fatalf("request %d: got allowed=%v, want %v", i+1, last.Allowed, want)
		}
	}
	after := redisNow(t, c)
	next := time.Date(before.Year(), before.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	if got := after.Add(last.RetryAfter); got.Before(next.Add(-time.Second)) || got.After(next.Add(time.Second)) {
		t.Fatalf("denied until %s, want the start of next month %s", got.UTC().Format(time.RFC3339), next.Format(time.RFC3339))
	}
	if got := lim.String(); got != "3 per month, burst 0" {
		t.Fatalf("String: got %q", got)
	}
}
