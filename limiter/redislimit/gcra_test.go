package redislimit

import (
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// A lone GCRA check goes through redis_rate; a GCRA check beside others goes
// through decideScript, which keeps redis_rate's state (its key prefix, its
// epoch, its float TAT). Both must read and write one key alike: if an
// upgrade of redis_rate changes either, this fails.
func TestGCRAStateSharedWithRedisRate(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	lim := limiter.Limit{Rate: 5, Period: time.Minute, Burst: 5}
	g := limiter.Check{Rule: policy("compat-g", limiter.GCRA), Limit: lim, Key: "k"}
	other := limiter.Check{Rule: policy("compat-fw", limiter.FixedWindow), Limit: limiter.Limit{Rate: 100, Period: time.Hour}, Key: "k"}
	avoidWindowEdge(t, c, time.Hour, 5*time.Second)

	steps := []struct {
		name      string
		checks    []limiter.Check
		allowed   bool
		remaining int64 // of the GCRA check
	}{
		{"redis_rate takes 1", []limiter.Check{g}, true, 4},
		{"redis_rate takes 2", []limiter.Check{g}, true, 3},
		{"script sees redis_rate's state", []limiter.Check{g, other}, true, 2},
		{"redis_rate sees the script's state", []limiter.Check{g}, true, 1},
		{"script takes the last", []limiter.Check{other, g}, true, 0},
		{"redis_rate denies", []limiter.Check{g}, false, 0},
	}
	for _, st := range steps {
		ds, _ := decide(t, r, st.checks...)
		var d limiter.Decision
		for _, x := range ds {
			if x.Policy == g.Rule.Name {
				d = x
			}
		}
		if d.Allowed != st.allowed || d.Remaining != st.remaining {
			t.Fatalf("%s: got allowed=%v remaining=%d, want %v %d", st.name, d.Allowed, d.Remaining, st.allowed, st.remaining)
		}
	}
	key := gcraKeyPrefix + redisBaseKey(g.Rule.Name, digestKey(g.Key))
	if n, err := c.Exists(t.Context(), key).Result(); err != nil || n != 1 {
		t.Fatalf("redis_rate's key %q: got exists=%d err=%v, want it to hold the state", key, n, err)
	}
}
