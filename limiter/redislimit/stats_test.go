package redislimit

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// Stats.Timeouts counts the round trips that ran out of time: those to a
// hung Redis, not those refused by a dead one, nor those whose caller gave
// up first.
func TestStatsCountTimeouts(t *testing.T) {
	check := limiter.Check{
		Rule:  &limiter.Rule{Name: "timeouts", Algorithm: limiter.GCRA, OnRedisError: limiter.FailDeny},
		Limit: limiter.Limit{Rate: 1000, Period: time.Minute},
		Key:   "k",
	}

	t.Run("hung", func(t *testing.T) {
		s := redistest.Start(t)
		c := newTestClient(t, failTimeout, s.Addr())
		r := newTestRedis(t, c, Config{Timeout: failTimeout, Logger: slog.New(&logCounter{})})
		if d := decideOne(t, r, check); !d.Allowed {
			t.Fatalf("before the hang: got %+v, want admitted", d)
		}
		s.Stop()

		// A caller that went away while Redis was asked says nothing about
		// Redis: an error, not a timeout.
		ctx, cancel := context.WithCancel(t.Context())
		stop := time.AfterFunc(failTimeout/5, cancel)
		r.Decide(ctx, []limiter.Check{check}, nil)
		stop.Stop()
		cancel()
		if st := r.Stats(); st.Errors != 1 || st.Timeouts != 0 {
			t.Fatalf("caller gave up: got errors=%d timeouts=%d, want 1 and 0", st.Errors, st.Timeouts)
		}

		const n = 3
		for range n {
			decideOne(t, r, check)
		}
		st := r.Stats()
		if st.Timeouts != n || st.Errors != n+1 || st.RoundTrips != n+2 {
			t.Fatalf("got timeouts=%d errors=%d round trips=%d, want %d, %d and %d", st.Timeouts, st.Errors, st.RoundTrips, n, n+1, n+2)
		}
	})

	t.Run("killed", func(t *testing.T) {
		s := redistest.Start(t)
		c := newTestClient(t, failTimeout, s.Addr())
		r := newTestRedis(t, c, Config{Timeout: failTimeout, Logger: slog.New(&logCounter{})})
		if d := decideOne(t, r, check); !d.Allowed {
			t.Fatalf("before the kill: got %+v, want admitted", d)
		}
		s.Kill()
		for range DefaultBreakerFailures {
			decideOne(t, r, check)
		}
		st := r.Stats()
		if st.Errors != DefaultBreakerFailures || st.Timeouts != 0 || !st.BreakerOpen {
			t.Fatalf("got errors=%d timeouts=%d breaker open=%v, want %d, 0 and open (a refused connection is no timeout)",
				st.Errors, st.Timeouts, st.BreakerOpen, DefaultBreakerFailures)
		}
	})
}
