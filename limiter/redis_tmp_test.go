package limiter

import (
	"log/slog"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

func TestTmpLongOutage(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, failTimeout, s.Addr())
	r := newTestRedis(t, c, RedisConfig{Timeout: failTimeout, Logger: slog.New(&logCounter{})})
	chk := Check{Policy: &Policy{Name: "restart", Algorithm: GCRA, OnRedisError: FailAllow}, Limit: Limit{Rate: 5, Period: time.Minute}, Key: "k"}
	chk2 := Check{Policy: &Policy{Name: "restart2", Algorithm: SlidingWindow, OnRedisError: FailAllow}, Limit: Limit{Rate: 5, Period: time.Minute}, Key: "k"}
	decideOne(t, r, chk)
	s.Kill()
	downAt := time.Now()
	for time.Since(downAt) < 15*time.Second {
		timed(r, chk)
		timed(r, chk, chk2)
		<-time.After(2 * time.Millisecond)
	}
	s.Restart()
	recovery := waitEnforced(t, r, chk, time.Now())
	t.Logf("single: %s", recovery)
	recovery = waitEnforced(t, r, chk2, time.Now())
	t.Logf("pipeline: %s", recovery)
}
