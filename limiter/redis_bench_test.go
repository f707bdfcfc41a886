package limiter

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// BenchmarkRedisDecide measures one DecideShared against a local
// redis-server: one round trip per op except for denial-cache hits. Report
// each case as a ratio to anchor_ping from the same run.
func BenchmarkRedisDecide(b *testing.B) {
	s := redistest.Start(b)
	c := newTestClient(b, time.Second, s.Addr())
	big := Limit{Rate: 1 << 40, Period: time.Second}
	cases := []struct {
		name   string
		checks func(i int) []Check
	}{
		{"gcra", func(i int) []Check {
			return []Check{{Rule: policy("b-gcra", GCRA), Limit: big, Key: strconv.Itoa(i % 1000)}}
		}},
		{"sliding_window", func(i int) []Check {
			return []Check{{Rule: policy("b-sw", SlidingWindow), Limit: Limit{Rate: 1 << 40, Period: 10 * time.Millisecond}, Key: strconv.Itoa(i % 1000)}}
		}},
		{"fixed_window", func(i int) []Check {
			return []Check{{Rule: policy("b-fw", FixedWindow), Limit: big, Key: strconv.Itoa(i % 1000)}}
		}},
		{"gcra+gcra+sliding+fixed", func(i int) []Check {
			k := strconv.Itoa(i % 1000)
			return []Check{
				{Rule: policy("b4-g1", GCRA), Limit: big, Key: k},
				{Rule: policy("b4-g2", GCRA), Limit: big, Key: k},
				{Rule: policy("b4-sw", SlidingWindow), Limit: Limit{Rate: 1 << 40, Period: 10 * time.Millisecond}, Key: k},
				{Rule: policy("b4-fw", FixedWindow), Limit: big, Key: k},
			}
		}},
		{"denial_cache_hit", func(int) []Check {
			return []Check{{Rule: policy("b-denied", GCRA), Limit: Limit{Rate: 1, Period: time.Hour}, Key: "k"}}
		}},
	}
	// The anchor: one bare PING round trip on the same client, so each case
	// reads as a ratio to the network round trip it cannot avoid.
	b.Run("anchor_ping", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Ping(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			r := newTestRedis(b, c, RedisConfig{})
			r.Decide(context.Background(), bc.checks(0)) // load scripts
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				r.Decide(context.Background(), bc.checks(i))
			}
			b.StopTimer()
			if st := r.Stats(); st.Errors > 0 {
				b.Fatalf("got %d failed round trips, want none", st.Errors)
			}
		})
	}
}
