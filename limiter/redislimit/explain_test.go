package redislimit

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// TestKeysForIsWhatADecisionWrites decides once per case on a real Redis and
// compares the keys Redis then holds for the case's policies with KeysFor's:
// the keys "gateway explain" prints are the ones the limiter uses.
func TestKeysForIsWhatADecisionWrites(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	hostile := "{evil}\r\nSET x y\r\n" + strings.Repeat("k", 1000)
	perMinute := limiter.Limit{Rate: 10, Period: time.Minute, Burst: 10}
	tests := []struct {
		name   string
		checks []limiter.Check
	}{
		{"gcra alone", []limiter.Check{{Rule: policy("x-gcra", limiter.GCRA), Limit: perMinute, Key: "203.0.113.7/32"}}},
		{"sliding_window", []limiter.Check{{Rule: policy("x-sliding", limiter.SlidingWindow), Limit: limiter.Limit{Rate: 10, Period: time.Minute}, Key: "acme"}}},
		{"fixed_window", []limiter.Check{{Rule: policy("x-fixed", limiter.FixedWindow), Limit: limiter.Limit{Rate: 10, Period: time.Hour}, Key: "acme"}}},
		{"fixed_window month", []limiter.Check{{Rule: policy("x-month", limiter.FixedWindow),
			Limit: limiter.Limit{Rate: 10, Period: limiter.MonthPeriod, Calendar: limiter.CalendarMonth}, Key: "acme"}}},
		{"shared_concurrency", []limiter.Check{{Rule: policy("x-inflight", limiter.SharedConcurrency),
			Limit: limiter.Limit{Rate: 4, Burst: 4, Period: 30 * time.Second}, Key: "acme"}}},
		{"gcra and fixed_window in one script call", []limiter.Check{
			{Rule: policy("y-gcra", limiter.GCRA), Limit: perMinute, Key: "acme"},
			{Rule: policy("y-fixed", limiter.FixedWindow), Limit: limiter.Limit{Rate: 10, Period: time.Hour}, Key: "acme"},
		}},
		{"hostile key", []limiter.Check{{Rule: policy("x-hostile", limiter.GCRA), Limit: perMinute, Key: hostile}}},
		{"anonymous bucket", []limiter.Check{{Rule: policy("x-anon", limiter.GCRA), Limit: perMinute, Key: "\x00anon"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, _ := decide(t, r, tt.checks...)
			var want []string
			for i, ch := range tt.checks {
				if !ds[i].Allowed {
					t.Fatalf("check %d (%s): got %+v, want it allowed", i, ch.Rule.Name, ds[i])
				}
				keys := KeysFor(ch.Rule, ch.Key)
				if len(keys) == 0 {
					t.Fatalf("KeysFor(%s, %q): got no keys, want the check's keys", ch.Rule.Algorithm, ch.Key)
				}
				want = append(want, keys...)
			}
			var got []string
			for _, ch := range tt.checks {
				ks, err := c.Keys(t.Context(), "*{"+ch.Rule.Name+":*").Result()
				if err != nil {
					t.Fatalf("KEYS: %v", err)
				}
				got = append(got, ks...)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("Redis holds %q, KeysFor says %q", got, want)
			}
		})
	}
}

func TestKeysForLocalAlgorithms(t *testing.T) {
	for _, alg := range []limiter.Algorithm{limiter.TokenBucket, limiter.Concurrency, ""} {
		if got := KeysFor(policy("p", alg), "k"); got != nil {
			t.Errorf("KeysFor(%q): got %q, want nil (no Redis state)", alg, got)
		}
	}
	if got := KeysFor(nil, "k"); got != nil {
		t.Errorf("KeysFor(nil): got %q, want nil", got)
	}
}
