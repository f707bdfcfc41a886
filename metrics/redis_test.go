package metrics

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
)

// redisTimeout is the decision deadline of these tests: the default's order
// of magnitude, with room for a loaded machine under -race.
const redisTimeout = 50 * time.Millisecond

// newRedisEngine builds what cmd/gateway builds: one client, one
// redislimit.Limiter, an engine on the wall clock. All are closed when the
// test ends, the limiter before the client.
func newRedisEngine(t *testing.T, addr string) (*redislimit.Limiter, *limiter.Engine) {
	t.Helper()
	client, err := redisclient.New(redisclient.Options{Addrs: []string{addr}, Timeout: redisTimeout})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	rl, err := redislimit.New(client, redislimit.Config{
		Timeout:         redisTimeout,
		BreakerCooldown: 200 * time.Millisecond,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("redislimit.New: %v", err)
	}
	t.Cleanup(func() { rl.Close() })
	e, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), rl)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	return rl, e
}

// decideUntil runs decisions on check, a few milliseconds apart, until done
// says so or 5 s have passed.
func decideUntil(t *testing.T, e *limiter.Engine, check limiter.Check, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after 5s of decisions")
		}
		if _, err := e.Decide(t.Context(), []limiter.Check{check}); err != nil {
			t.Fatalf("Decide: %v", err)
		}
		<-time.After(2 * time.Millisecond) // pacing: the breaker's clock must move
	}
}

func TestWatchRedis(t *testing.T) {
	lim := limiter.Limit{Rate: 10_000, Period: time.Minute}

	t.Run("killed", func(t *testing.T) {
		s := redistest.Start(t)
		rl, e := newRedisEngine(t, s.Addr())
		m := New()
		m.WatchRedis(rl.Stats)
		check := limiter.Check{Rule: &limiter.Rule{Name: "per-ip", Algorithm: limiter.GCRA}, Limit: lim, Key: "203.0.113.7"}

		const n = 25
		for i := range n {
			v, err := e.Decide(t.Context(), []limiter.Check{check})
			if err != nil || !v.Allowed {
				t.Fatalf("decision %d: got allowed=%v err=%v, want admitted by redis", i, v.Allowed, err)
			}
		}
		e1 := scrape(t, m)
		st := rl.Stats()
		trips := e1.value(t, "gateway_redis_round_trips_total", "")
		if trips != float64(st.RoundTrips) || trips != n {
			t.Fatalf("got %v round trips, Stats says %d, want %d", trips, st.RoundTrips, n)
		}
		for _, tt := range []struct{ name, labels string }{
			{"gateway_redis_errors_total", ""},
			{"gateway_redis_timeouts_total", ""},
			{"gateway_redis_breaker_open", ""},
			{"gateway_redis_breaker_opens_total", ""},
			{"gateway_redis_fail_fast_total", ""},
			{"gateway_redis_failure_mode_total", "mode=allow"},
			{"gateway_redis_failure_mode_total", "mode=deny"},
			{"gateway_redis_failure_mode_total", "mode=local"},
			{"gateway_redis_overloaded_total", ""},
			{"gateway_denial_cache_hits_total", ""},
			{"gateway_denial_cache_keys", ""},
			{"gateway_redis_refunds_total", ""},
			{"gateway_redis_refund_errors_total", ""},
		} {
			if got := e1.value(t, tt.name, tt.labels); got != 0 {
				t.Errorf("healthy redis: %s{%s}: got %v, want 0", tt.name, tt.labels, got)
			}
		}

		// A fresh Redis has no scripts cached: the first call loads them, once.
		if got := e1.value(t, "gateway_redis_script_reloads_total", ""); got > 1 {
			t.Errorf("healthy redis: script reloads %v, want at most the first load", got)
		}
		if got, want := e1.value(t, "gateway_redis_pipelines_total", ""), float64(rl.Stats().Pipelines); got != want || got == 0 {
			t.Errorf("pipelines %v, want Stats' %v (> 0)", got, want)
		}

		s.Kill()
		decideUntil(t, e, check, func() bool { return rl.Stats().BreakerOpen })
		// More decisions while it is open are answered without Redis.
		for range 5 {
			if _, err := e.Decide(t.Context(), []limiter.Check{check}); err != nil {
				t.Fatalf("Decide: %v", err)
			}
		}
		e2 := scrape(t, m)
		st = rl.Stats()
		if got := e2.value(t, "gateway_redis_breaker_open", ""); got != 1 {
			t.Fatalf("breaker open: got %v, want 1", got)
		}
		for _, tt := range []struct {
			name, labels string
			stat         uint64
		}{
			{"gateway_redis_errors_total", "", st.Errors},
			{"gateway_redis_breaker_opens_total", "", st.BreakerOpens},
			{"gateway_redis_fail_fast_total", "", st.FailFast},
			{"gateway_redis_failure_mode_total", "mode=allow", st.FailedOpen},
		} {
			got := e2.value(t, tt.name, tt.labels)
			if got <= 0 || got != float64(tt.stat) {
				t.Errorf("redis killed: %s{%s}: got %v, Stats says %d, want them equal and > 0", tt.name, tt.labels, got, tt.stat)
			}
		}
		if got := e2.value(t, "gateway_redis_round_trips_total", ""); got != float64(st.RoundTrips) || got <= n {
			t.Errorf("round trips: got %v, Stats says %d, want them equal and > %d", got, st.RoundTrips, n)
		}
	})

	t.Run("hung", func(t *testing.T) {
		s := redistest.Start(t)
		rl, e := newRedisEngine(t, s.Addr())
		m := New()
		m.WatchRedis(rl.Stats)
		check := limiter.Check{Rule: &limiter.Rule{Name: "login", Algorithm: limiter.GCRA, OnRedisError: limiter.FailDeny}, Limit: lim, Key: "acme"}
		if v, err := e.Decide(t.Context(), []limiter.Check{check}); err != nil || !v.Allowed {
			t.Fatalf("before the hang: got allowed=%v err=%v, want admitted", v.Allowed, err)
		}

		s.Stop()
		// A hung Redis is recognised by timeouts, then a direct check left
		// unanswered for the cooldown (see redislimit's classify).
		decideUntil(t, e, check, func() bool { return rl.Stats().BreakerOpen })
		e2 := scrape(t, m)
		st := rl.Stats()
		if got := e2.value(t, "gateway_redis_breaker_open", ""); got != 1 {
			t.Fatalf("breaker open: got %v, want 1", got)
		}
		timeouts := e2.value(t, "gateway_redis_timeouts_total", "")
		errs := e2.value(t, "gateway_redis_errors_total", "")
		if timeouts <= 0 || timeouts != float64(st.Timeouts) || timeouts > errs {
			t.Fatalf("got %v timeouts (Stats: %d) and %v errors, want timeouts > 0, as Stats says, and at most the errors", timeouts, st.Timeouts, errs)
		}
		if got := e2.value(t, "gateway_redis_failure_mode_total", "mode=deny"); got <= 0 || got != float64(st.FailedClosed) {
			t.Fatalf("deny failure mode: got %v, Stats says %d, want them equal and > 0", got, st.FailedClosed)
		}
	})
}
