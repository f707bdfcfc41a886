package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redisclient"
	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/redis/go-redis/v9"
)

// semanticsTimeout is the decision deadline of tests about algorithm
// semantics: generous, so that a loaded CI machine under -race does not turn
// a slow answer into a failure mode.
const semanticsTimeout = 2 * time.Second

// newTestClient connects to addrs (one: standalone, several: cluster) and
// closes the client when the test ends.
func newTestClient(t testing.TB, timeout time.Duration, addrs ...string) redis.UniversalClient {
	t.Helper()
	c, err := redisclient.New(redisclient.Options{Addrs: addrs, Timeout: timeout})
	if err != nil {
		t.Fatalf("NewRedisClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newTestRedis(t testing.TB, client redis.UniversalClient, cfg Config) *Limiter {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = semanticsTimeout
	}
	r, err := New(client, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// newTestEngine puts a Redis limiter behind an engine on the wall clock, with
// an unbounded local fallback.
func newTestEngine(t testing.TB, r *Limiter) *limiter.Engine {
	t.Helper()
	e, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), r)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	return e
}

// redisNow reads Redis's clock, the one every shared algorithm uses.
func redisNow(t testing.TB, c redis.UniversalClient) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

// waitRedisTime waits until Redis's clock has reached at, polling TIME (the
// windows are measured on that clock, not ours), for at most a few seconds
// past the distance to at when it was called (avoidWindowEdge may ask for
// more than ten).
func waitRedisTime(t testing.TB, c redis.UniversalClient, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(max(at.Sub(redisNow(t, c)), 0) + 5*time.Second)
	for {
		now := redisNow(t, c)
		if !now.Before(at) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis time %s never reached %s", now, at)
		}
		// Poll again after a slice of what is left: this waits on Redis's
		// clock, there is no event to block on.
		<-time.After(min(at.Sub(now), 5*time.Millisecond))
	}
}

// decide runs one Decide and returns the decisions and, when the request
// holds anything, an undo that gives it all back (Adjust to zeros).
func decide(t testing.TB, r *Limiter, checks ...limiter.Check) ([]limiter.Decision, func(context.Context)) {
	t.Helper()
	ds, held := r.Decide(context.Background(), checks, nil)
	if held == nil {
		return ds, nil
	}
	return ds, func(ctx context.Context) { held.Settle(ctx, make([]int64, len(checks))) }
}

// decideOne runs one check.
func decideOne(t testing.TB, r *Limiter, c limiter.Check) limiter.Decision {
	t.Helper()
	ds, _ := decide(t, r, c)
	if len(ds) != 1 {
		t.Fatalf("got %d decisions, want 1", len(ds))
	}
	return ds[0]
}

func policy(name string, alg limiter.Algorithm) *limiter.Rule {
	return &limiter.Rule{Name: name, Algorithm: alg}
}

// redisGetInt reads an integer key; a missing key is 0.
func redisGetInt(t testing.TB, c redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := c.Get(t.Context(), key).Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return n
}

// avoidWindowEdge waits, when Redis's clock is within need of the end of a
// fixed window of period, until the next window starts, so that a test
// counting in one window does not straddle two.
func avoidWindowEdge(t testing.TB, c redis.UniversalClient, period, need time.Duration) {
	t.Helper()
	now := redisNow(t, c)
	into := time.Duration(now.UnixMilli()%period.Milliseconds()) * time.Millisecond
	if period-into > need {
		return
	}
	waitRedisTime(t, c, now.Add(period-into))
}
