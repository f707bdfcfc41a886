package redislimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// Shared limits are timed by Redis: two instances whose clocks are an hour
// apart, either way, enforce one limit together exactly. Their own clocks
// only time their denial caches and breakers.
func TestSharedLimitsIgnoreGatewayClocks(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	ahead := newTestRedis(t, c, Config{Clock: func() time.Time { return time.Now().Add(time.Hour) }})
	behind := newTestRedis(t, c, Config{Clock: func() time.Time { return time.Now().Add(-time.Hour) }})
	lim := limiter.Limit{Rate: 5, Period: time.Minute}
	avoidWindowEdge(t, c, time.Minute, 5*time.Second)
	for _, alg := range []limiter.Algorithm{limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow} {
		t.Run(string(alg), func(t *testing.T) {
			chk := limiter.Check{Rule: policy("skew-"+string(alg), alg), Limit: lim, Key: "k"}
			admitted := 0
			for i := range 12 {
				r := ahead
				if i%2 == 1 {
					r = behind
				}
				if d := decideOne(t, r, chk); d.Allowed {
					admitted++
				} else if d.RetryAfter <= 0 || d.RetryAfter > time.Minute {
					t.Fatalf("request %d: got retry %v, want within one period (Redis's clock, not the gateway's)", i, d.RetryAfter)
				}
			}
			if admitted != int(lim.Rate) {
				t.Fatalf("got %d admitted by two instances %s apart, want exactly %s", admitted, 2*time.Hour, strconv.FormatInt(lim.Rate, 10))
			}
		})
	}
}
