package redislimit

import (
	"context"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// The script's GCRA keeps redis_rate's state (its key prefix, its epoch,
// its float TAT): redis_rate's AllowN and the gateway read and write one
// key alike, alone or beside other checks, so state written by a gateway
// that called AllowN is what this one reads. If an upgrade of redis_rate
// changes either, this fails.
func TestGCRAStateSharedWithRedisRate(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	for _, pipelines := range []int{0, -1} {
		r := newTestRedis(t, c, Config{Pipelines: pipelines})
		name := "compat-g" + map[int]string{0: "", -1: "-alone"}[pipelines]
		lim := limiter.Limit{Rate: 5, Period: time.Minute, Burst: 5}
		g := limiter.Check{Rule: policy(name, limiter.GCRA), Limit: lim, Key: "k"}
		other := limiter.Check{Rule: policy(name+"-fw", limiter.FixedWindow), Limit: limiter.Limit{Rate: 100, Period: time.Hour}, Key: "k"}
		avoidWindowEdge(t, c, time.Hour, 5*time.Second)
		rl := redis_rate.NewLimiter(c)
		allowN := func() limiter.Decision {
			res, err := rl.AllowN(context.Background(), redisBaseKey(name, digestKey(g.Key)),
				redis_rate.Limit{Rate: int(lim.Rate), Burst: int(lim.Burst), Period: lim.Period}, 1)
			if err != nil {
				t.Fatalf("redis_rate: %v", err)
			}
			return limiter.Decision{Allowed: res.Allowed > 0, Remaining: gcraRemaining(lim, res.ResetAfter)}
		}
		gateway := func(checks ...limiter.Check) func() limiter.Decision {
			return func() limiter.Decision {
				ds, _ := decide(t, r, checks...)
				for _, d := range ds {
					if d.Policy == name {
						return d
					}
				}
				return limiter.Decision{}
			}
		}
		steps := []struct {
			name      string
			do        func() limiter.Decision
			allowed   bool
			remaining int64 // of the GCRA check
		}{
			{"redis_rate takes 1", allowN, true, 4},
			{"gateway sees redis_rate's state", gateway(g), true, 3},
			{"redis_rate sees the gateway's", allowN, true, 2},
			{"gateway beside another check", gateway(g, other), true, 1},
			{"redis_rate takes the last", allowN, true, 0},
			{"gateway denies", gateway(other, g), false, 0},
			{"redis_rate denies", allowN, false, 0},
		}
		for _, st := range steps {
			if d := st.do(); d.Allowed != st.allowed || d.Remaining != st.remaining {
				t.Fatalf("pipelines %d, %s: got allowed=%v remaining=%d, want %v %d", pipelines, st.name, d.Allowed, d.Remaining, st.allowed, st.remaining)
			}
		}
		key := gcraKeyPrefix + redisBaseKey(name, digestKey(g.Key))
		if n, err := c.Exists(t.Context(), key).Result(); err != nil || n != 1 {
			t.Fatalf("redis_rate's key %q: got exists=%d err=%v, want it to hold the state", key, n, err)
		}
	}
}
