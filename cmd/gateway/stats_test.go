package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/redislimit"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/policies"
)

// statsRedisTimeout is the decision deadline of these tests: the default's order
// of magnitude, with room for a loaded machine under -race.
const statsRedisTimeout = 50 * time.Millisecond

// newStatsEngine builds what cmd/gateway builds: one client, one
// redislimit.Limiter, an engine on the wall clock. All are closed when the
// test ends, the limiter before the client.
func newStatsEngine(t *testing.T, addr string) (*redislimit.Limiter, *limiter.Engine) {
	t.Helper()
	client, err := redisclient.New(redisclient.Options{Addrs: []string{addr}, Timeout: statsRedisTimeout})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	rl, err := redislimit.New(client, redislimit.Config{
		Timeout:         statsRedisTimeout,
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

func TestRedisStatsReachTheMetrics(t *testing.T) {
	lim := limiter.Limit{Rate: 10_000, Period: time.Minute}

	t.Run("killed", func(t *testing.T) {
		s := redistest.Start(t)
		rl, e := newStatsEngine(t, s.Addr())
		m := metrics.New()
		m.WatchRedis(redisStats(rl))
		check := limiter.Check{Rule: &limiter.Rule{Name: "per-ip", Algorithm: limiter.GCRA}, Limit: lim, Key: "203.0.113.7"}

		const n = 25
		for i := range n {
			v, err := e.Decide(t.Context(), []limiter.Check{check})
			if err != nil || !v.Allowed {
				t.Fatalf("decision %d: got allowed=%v err=%v, want admitted by redis", i, v.Allowed, err)
			}
		}
		e1 := scrapeMetrics(t, m)
		st := rl.Stats()
		trips := scrapeValue(t, e1, "gateway_redis_round_trips_total", "")
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
			if got := scrapeValue(t, e1, tt.name, tt.labels); got != 0 {
				t.Errorf("healthy redis: %s{%s}: got %v, want 0", tt.name, tt.labels, got)
			}
		}

		// A fresh Redis has no scripts cached: the first call loads them, once.
		if got := scrapeValue(t, e1, "gateway_redis_script_reloads_total", ""); got > 1 {
			t.Errorf("healthy redis: script reloads %v, want at most the first load", got)
		}
		if got, want := scrapeValue(t, e1, "gateway_redis_pipelines_total", ""), float64(rl.Stats().Pipelines); got != want || got == 0 {
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
		e2 := scrapeMetrics(t, m)
		st = rl.Stats()
		if got := scrapeValue(t, e2, "gateway_redis_breaker_open", ""); got != 1 {
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
			got := scrapeValue(t, e2, tt.name, tt.labels)
			if got <= 0 || got != float64(tt.stat) {
				t.Errorf("redis killed: %s{%s}: got %v, Stats says %d, want them equal and > 0", tt.name, tt.labels, got, tt.stat)
			}
		}
		if got := scrapeValue(t, e2, "gateway_redis_round_trips_total", ""); got != float64(st.RoundTrips) || got <= n {
			t.Errorf("round trips: got %v, Stats says %d, want them equal and > %d", got, st.RoundTrips, n)
		}
	})

	t.Run("hung", func(t *testing.T) {
		s := redistest.Start(t)
		rl, e := newStatsEngine(t, s.Addr())
		m := metrics.New()
		m.WatchRedis(redisStats(rl))
		check := limiter.Check{Rule: &limiter.Rule{Name: "login", Algorithm: limiter.GCRA, OnRedisError: limiter.FailDeny}, Limit: lim, Key: "acme"}
		if v, err := e.Decide(t.Context(), []limiter.Check{check}); err != nil || !v.Allowed {
			t.Fatalf("before the hang: got allowed=%v err=%v, want admitted", v.Allowed, err)
		}

		s.Stop()
		// A hung Redis is recognised by timeouts, then a direct check left
		// unanswered for the cooldown (see redislimit's classify).
		decideUntil(t, e, check, func() bool { return rl.Stats().BreakerOpen })
		e2 := scrapeMetrics(t, m)
		st := rl.Stats()
		if got := scrapeValue(t, e2, "gateway_redis_breaker_open", ""); got != 1 {
			t.Fatalf("breaker open: got %v, want 1", got)
		}
		timeouts := scrapeValue(t, e2, "gateway_redis_timeouts_total", "")
		errs := scrapeValue(t, e2, "gateway_redis_errors_total", "")
		if timeouts <= 0 || timeouts != float64(st.Timeouts) || timeouts > errs {
			t.Fatalf("got %v timeouts (Stats: %d) and %v errors, want timeouts > 0, as Stats says, and at most the errors", timeouts, st.Timeouts, errs)
		}
		if got := scrapeValue(t, e2, "gateway_redis_failure_mode_total", "mode=deny"); got <= 0 || got != float64(st.FailedClosed) {
			t.Fatalf("deny failure mode: got %v, Stats says %d, want them equal and > 0", got, st.FailedClosed)
		}
	})
}

// scrapeMetrics is one scrape of m's handler over real HTTP, as text.
func scrapeMetrics(t *testing.T, m *metrics.Metrics) []byte {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatalf("scraping: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, %v", resp.StatusCode, err)
	}
	return b
}

// The config model leaves the Redis backend's settings zero; cmd fills in
// the defaults of the packages that own them, and keeps what the file set.
func TestRedisDefaultsFillZero(t *testing.T) {
	got := redisDefaults(policies.RedisConfig{})
	want := policies.RedisConfig{
		Timeout: redisclient.DefaultTimeout, QueueTimeout: redislimit.DefaultQueueTimeout,
		BreakerFailures: redislimit.DefaultBreakerFailures, BreakerCooldown: redislimit.DefaultBreakerCooldown,
		DenialCacheSize: redislimit.DefaultDenialCacheSize, Pipelines: redislimit.DefaultPipelines,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("zero config: got %+v, want %+v", got, want)
	}
	set := policies.RedisConfig{Timeout: time.Second, Pipelines: -1, BreakerFailures: 9}
	if got := redisDefaults(set); got.Timeout != time.Second || got.Pipelines != -1 || got.BreakerFailures != 9 {
		t.Errorf("set values: got %+v, want them kept", got)
	}
	if got := redisClientOptions(policies.RedisConfig{}); got.Timeout != redisclient.DefaultTimeout || got.DialTimeout < redislimit.DefaultBreakerCooldown {
		t.Errorf("client options of a zero config: timeout %v, dial timeout %v", got.Timeout, got.DialTimeout)
	}
}
