package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// A token bucket per key: 3 a minute, one refilled every 20 seconds.
func ExampleLocal_AllowAt() {
	buckets := limiter.NewLocal(0)
	perMinute := limiter.Limit{Rate: 3, Period: time.Minute}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for range 4 {
		d := buckets.AllowAt(now, "203.0.113.7", perMinute, 1)
		fmt.Printf("allowed=%v remaining=%d retry=%s\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	d := buckets.AllowAt(now.Add(20*time.Second), "203.0.113.7", perMinute, 1)
	fmt.Printf("20s later: allowed=%v\n", d.Allowed)
	// Output:
	// allowed=true remaining=2 retry=0s
	// allowed=true remaining=1 retry=0s
	// allowed=true remaining=0 retry=0s
	// allowed=false remaining=0 retry=20s
	// 20s later: allowed=true
}

// An Engine decides all the checks of a request: a request that one rule
// denies takes nothing from the others.
func ExampleEngine_Decide() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	engine, err := limiter.NewEngine(func() time.Time { return now }, limiter.NewLocal(0), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	perSecond := &limiter.Rule{Name: "per-second"}
	hourly := &limiter.Rule{Name: "hourly"}
	checks := []limiter.Check{
		{Rule: hourly, Limit: limiter.Limit{Rate: 100, Period: time.Hour}, Key: "acme"},
		{Rule: perSecond, Limit: limiter.Limit{Rate: 1, Period: time.Second}, Key: "acme"},
	}
	for range 3 {
		v, err := engine.Decide(context.Background(), checks)
		if err != nil {
			fmt.Println(err)
			return
		}
		d, _ := v.Deciding()
		fmt.Printf("allowed=%v (deciding: %s), hourly left %d\n", v.Allowed, d.Policy, v.Decisions[0].Remaining)
	}
	// Output:
	// allowed=true (deciding: per-second), hourly left 99
	// allowed=false (deciding: per-second), hourly left 99
	// allowed=false (deciding: per-second), hourly left 99
}
