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

// A peek answers for the check's Units, as the decision would: a cost that
// fits what is left is allowed, a larger one is not and says when it
// would; a key the denial cache holds denied at that cost is answered
// from it, without Redis.
func TestPeekAsksForItsCost(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	avoidWindowEdge(t, c, time.Hour, 10*time.Second)
	r := newTestRedis(t, c, Config{})
	e := newTestEngine(t, r)
	lim := limiter.Limit{Rate: 10, Period: time.Hour}
	for _, alg := range []limiter.Algorithm{limiter.TokenBucket, limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow} {
		t.Run(string(alg), func(t *testing.T) {
			chk := limiter.Check{Rule: policy("peekn-"+string(alg), alg), Limit: lim, Key: "k", Cost: 4}
			if v, err := e.Decide(context.Background(), []limiter.Check{chk}); err != nil || !v.Allowed {
				t.Fatalf("decide: %v %v", v.Allowed, err)
			}
			chk.Cost = 6
			if d := e.Peek(context.Background(), []limiter.Check{chk})[0]; !d.Allowed || d.Remaining != 6 {
				t.Fatalf("a peek for the 6 left: got %+v, want allowed with 6 left", d)
			}
			chk.Cost = 7
			d := e.Peek(context.Background(), []limiter.Check{chk})[0]
			if d.Allowed || d.Remaining != 6 || d.RetryAfter <= 0 {
				t.Fatalf("a peek for 7 of the 6 left: got %+v, want refused, 6 left, a retry time", d)
			}
			if v, _ := e.Decide(context.Background(), []limiter.Check{chk}); v.Allowed {
				t.Fatal("the decision for 7: allowed, want refused as the peek said")
			}
			chk.Cost = 11
			if d := e.Peek(context.Background(), []limiter.Check{chk})[0]; d.Allowed || d.Reason != limiter.ReasonCostTooHigh {
				t.Fatalf("a peek for more than the quota: got %+v, want ReasonCostTooHigh", d)
			}
		})
	}
	chk := limiter.Check{Rule: policy("peekn-cached", limiter.GCRA), Limit: lim, Key: "k", Cost: 10}
	e.Decide(context.Background(), []limiter.Check{chk})
	if v, _ := e.Decide(context.Background(), []limiter.Check{chk}); v.Allowed {
		t.Fatal("a second 10 of 10: allowed")
	}
	s.Kill() // from here only the denial cache can answer
	if d := e.Peek(context.Background(), []limiter.Check{chk})[0]; d.Reason != limiter.ReasonDenialCached || d.RetryAfter <= 0 {
		t.Fatalf("a peek of a cached denial with Redis gone: got %+v, want ReasonDenialCached with its wait", d)
	}
}
