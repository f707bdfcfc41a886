package limiter

import (
	"context"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// BenchmarkLocalDecide measures an Engine decision on local buckets against
// its anchor, one bare x/time/rate limiter's AllowN in the same run: the
// difference is the sharded map, the key lookup and the Decision value.
func BenchmarkLocalDecide(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	huge := Limit{Rate: 1 << 40, Period: time.Second, Burst: 1 << 40}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "203.0.113." + strconv.Itoa(i%256) + "/" + strconv.Itoa(i)
	}
	b.Run("anchor_rate_limiter", func(b *testing.B) {
		lim := rate.NewLimiter(rate.Limit(float64(huge.Rate)/huge.Period.Seconds()), int(huge.Quota()))
		b.ReportAllocs()
		for b.Loop() {
			lim.AllowN(now, 1)
		}
	})
	e, err := NewEngine(func() time.Time { return now }, NewLocal(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	p := &Rule{Name: "per-ip"}
	b.Run("engine_one_policy", func(b *testing.B) {
		b.ReportAllocs()
		checks := []Check{{Rule: p, Limit: huge}}
		for i := 0; b.Loop(); i++ {
			checks[0].Key = keys[i%len(keys)]
			if v, _ := e.Decide(context.Background(), checks); !v.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run("engine_one_policy_parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			checks := []Check{{Rule: p, Limit: huge}}
			for i := 0; pb.Next(); i++ {
				checks[0].Key = keys[i%len(keys)]
				e.Decide(context.Background(), checks)
			}
		})
	})
}
