package redislimit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// A flood of concurrent decisions on one key, with a healthy Redis and the
// default 30ms deadline, must neither open the breaker nor let more through
// than rate × elapsed + burst: waiting for a connection is this instance's
// own queue, not a Redis failure, and under overload a decision is denied,
// never failed open.
func TestFloodDoesNotSwitchTheLimitOff(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, 0, s.Addr()) // the default timeout, as deployed
	r, err := New(c, Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	lim := limiter.Limit{Rate: 100, Period: time.Second, Burst: 100}
	pol := &limiter.Rule{Name: "flood", Algorithm: limiter.GCRA, OnRedisError: limiter.FailAllow}
	// Every decision goes to Redis: distinct costs keep the denial cache from
	// answering (a cached denial covers only dearer requests), which is the
	// worst case for the round-trip queue.
	var admitted, overloaded atomic.Int64
	start := time.Now()
	deadline := start.Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100_000 && time.Now().Before(deadline); i++ {
				cost := int64(1)
				if g%2 == 1 {
					cost = 2
				}
				ds, _ := r.Decide(context.Background(), []limiter.Check{{Rule: pol, Limit: lim, Key: "one", Cost: cost}}, nil)
				switch {
				case ds[0].Allowed:
					admitted.Add(cost)
				case ds[0].Reason == limiter.ReasonOverloaded:
					overloaded.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := r.Stats()
	bound := float64(lim.Rate)*elapsed.Seconds() + float64(lim.Burst)
	t.Logf("256 goroutines, %v: admitted %d units, bound %.0f; round trips %d, errors %d, breaker opens %d, failed open %d, overloaded %d",
		elapsed.Round(time.Millisecond), admitted.Load(), bound, st.RoundTrips, st.Errors, st.BreakerOpens, st.FailedOpen, st.Overloaded)
	if got := float64(admitted.Load()); got > bound+2 { // +2: one request of cost 2 at the edge of Redis's clock reading
		t.Fatalf("admitted %.0f units, want at most rate × elapsed + burst = %.0f", got, bound)
	}
	if st.BreakerOpens != 0 || st.FailedOpen != 0 {
		t.Fatalf("got %d breaker opens and %d decisions failed open with a healthy redis, want 0 and 0", st.BreakerOpens, st.FailedOpen)
	}
}
