package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// Peeking shows what is left, on every algorithm, and takes nothing.
func TestPeekTakesNothing(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	avoidWindowEdge(t, c, time.Hour, 10*time.Second)
	r := newTestRedis(t, c, Config{})
	e := newTestEngine(t, r)
	lim := limiter.Limit{Rate: 10, Period: time.Hour}
	for _, alg := range []limiter.Algorithm{limiter.TokenBucket, limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow} {
		t.Run(string(alg), func(t *testing.T) {
			chk := limiter.Check{Rule: policy("peek-"+string(alg), alg), Limit: lim, Key: "k", Cost: 4}
			if d := e.Peek(context.Background(), []limiter.Check{chk})[0]; !d.Allowed || d.Remaining != 10 {
				t.Fatalf("before any request: got %+v, want allowed with 10 left", d)
			}
			if v, err := e.Decide(context.Background(), []limiter.Check{chk}); err != nil || !v.Allowed {
				t.Fatalf("decide: %v %v", v.Allowed, err)
			}
			for range 3 { // peeking again and again changes nothing
				if d := e.Peek(context.Background(), []limiter.Check{chk})[0]; !d.Allowed || d.Remaining != 6 {
					t.Fatalf("after taking 4: got %+v, want allowed with 6 left", d)
				}
			}
			chk.Cost = 6
			e.Decide(context.Background(), []limiter.Check{chk})
			if d := e.Peek(context.Background(), []limiter.Check{chk})[0]; d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
				t.Fatalf("after taking all: got %+v, want not allowed, 0 left, a retry time", d)
			}
		})
	}
}
