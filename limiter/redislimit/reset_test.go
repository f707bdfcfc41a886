package redislimit

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// sharedAlgorithms are the algorithms whose state lives in Redis.
var sharedAlgorithms = []limiter.Algorithm{limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow, limiter.SharedConcurrency}

// resetLimit is 5 per hour (5 slots with a lease of an hour): nothing comes
// back while a test runs.
func resetLimit(alg limiter.Algorithm) limiter.Limit {
	if alg.Windowed() {
		return limiter.Limit{Rate: 5, Period: time.Hour}
	}
	return limiter.Limit{Rate: 5, Period: time.Hour, Burst: 5}
}

// allKeys lists every key in c's Redis, sorted.
func allKeys(t *testing.T, c redis.UniversalClient) []string {
	t.Helper()
	keys, err := c.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	slices.Sort(keys)
	return keys
}

// take reserves n units of c through e, one request each, and fails unless
// all are admitted. The reservations stay held (slots stay taken).
func take(t *testing.T, e *limiter.Engine, c limiter.Check, n int) {
	t.Helper()
	for i := range n {
		v, _, err := e.Reserve(t.Context(), []limiter.Check{c})
		if err != nil || !v.Allowed {
			t.Fatalf("request %d: allowed %v, err %v; want admitted", i+1, v.Allowed, err)
		}
	}
}

// Whatever algorithm wrote a key's state, the keys it wrote are among those
// Reset deletes, and after Reset Redis holds nothing of the key. Every way a
// key is written is covered: a lone GCRA check, GCRA beside other checks, each other algorithm, and a settled reservation (the
// adjust scripts).
func TestResetKeysAreEveryKeyTheAlgorithmsWrite(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	avoidWindowEdge(t, c, time.Hour, 10*time.Second)
	r := newTestRedis(t, c, Config{})
	e := newTestEngine(t, r)
	ctx := context.Background()

	other := limiter.Check{Rule: policy("other", limiter.FixedWindow), Limit: resetLimit(limiter.FixedWindow), Key: "someone"}
	cases := []struct {
		name   string
		alg    limiter.Algorithm
		beside bool // decided with another check: the multi-check script
		settle int64
	}{
		{"gcra alone", limiter.GCRA, false, -1},
		{"gcra in the script", limiter.GCRA, true, -1},
		{"gcra settled for more", limiter.GCRA, false, 3},
		{"sliding_window", limiter.SlidingWindow, false, -1},
		{"sliding_window settled for more", limiter.SlidingWindow, false, 2},
		{"fixed_window", limiter.FixedWindow, false, -1},
		{"fixed_window settled for more", limiter.FixedWindow, false, 2},
		{"shared_concurrency", limiter.SharedConcurrency, false, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := c.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			chk := limiter.Check{Rule: policy("p", tc.alg), Limit: resetLimit(tc.alg), Key: "tenant-a", Cost: 1}
			checks := []limiter.Check{chk}
			if tc.beside {
				checks = append(checks, other)
			}
			v, res, err := e.Reserve(ctx, checks)
			if err != nil || !v.Allowed {
				t.Fatalf("reserve: allowed %v, err %v", v.Allowed, err)
			}
			if tc.settle >= 0 {
				if err := res.Settle(ctx, []int64{tc.settle}); err != nil {
					t.Fatal(err)
				}
			}
			want := stateKeys("p", digestKey("tenant-a"))
			var mine []string
			for _, k := range allKeys(t, c) {
				if tc.beside && slices.Contains(stateKeys("other", digestKey("someone")), k) {
					continue
				}
				if !slices.Contains(want, k) {
					t.Fatalf("redis holds %q, which Reset would not delete (it deletes %q)", k, want)
				}
				mine = append(mine, k)
			}
			if len(mine) == 0 {
				t.Fatalf("redis holds no key of the check: got %q", allKeys(t, c))
			}
			if err := r.Reset(ctx, chk); err != nil {
				t.Fatalf("Reset: %v", err)
			}
			if n := c.Exists(ctx, want...).Val(); n != 0 {
				t.Fatalf("after Reset: %d of %q exist, want none", n, want)
			}
			if tc.beside && c.Exists(ctx, stateKeys("other", digestKey("someone"))...).Val() == 0 {
				t.Fatal("after Reset: the other policy's key was deleted too, want it kept")
			}
		})
	}
}

// After Reset a key has its whole limit again on every algorithm, and other
// keys of the policy keep what they had.
func TestResetStartsTheKeyAfresh(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	avoidWindowEdge(t, c, time.Hour, 10*time.Second)
	e := newTestEngine(t, newTestRedis(t, c, Config{}))
	ctx := context.Background()
	for _, alg := range sharedAlgorithms {
		t.Run(string(alg), func(t *testing.T) {
			rule := policy("fresh-"+string(alg), alg)
			chk := limiter.Check{Rule: rule, Limit: resetLimit(alg), Key: "tenant-a", Cost: 1}
			neighbour := chk
			neighbour.Key = "tenant-b"
			take(t, e, chk, 3)
			take(t, e, neighbour, 3)
			for _, step := range []struct {
				name string
				do   func() error
				want int64
			}{
				{"after taking 3 of 5", func() error { return nil }, 2},
				{"after Reset", func() error { return e.Reset(ctx, chk) }, 5},
			} {
				if err := step.do(); err != nil {
					t.Fatalf("%s: %v", step.name, err)
				}
				d, err := e.PeekOne(ctx, chk)
				if err != nil || !d.Allowed || d.Remaining != step.want {
					t.Fatalf("%s: got %+v, err %v; want allowed with %d left", step.name, d, err, step.want)
				}
			}
			if d, err := e.PeekOne(ctx, neighbour); err != nil || d.Remaining != 2 {
				t.Fatalf("the other key after Reset: got %+v, err %v; want 2 left", d, err)
			}
			take(t, e, chk, 5) // the whole limit, and no more
			if v, _, _ := e.Reserve(ctx, []limiter.Check{chk}); v.Allowed {
				t.Fatal("a 6th request after Reset: admitted, want denied")
			}
		})
	}
}

// A key denied and remembered in the denial cache is admitted at once after
// Reset, even when the denial was cached under another limit (a plan).
func TestResetForgetsCachedDenials(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	e := newTestEngine(t, r)
	ctx := context.Background()
	rule := policy("cached", limiter.GCRA)
	free := limiter.Check{Rule: rule, Limit: limiter.Limit{Rate: 2, Period: time.Hour, Burst: 2}, Key: "acme"}
	pro := free
	pro.Limit = limiter.Limit{Rate: 20, Period: time.Hour, Burst: 20}

	take(t, e, free, 2)
	for i, want := range []limiter.Reason{limiter.ReasonLimited, limiter.ReasonDenialCached} {
		if v, _ := e.Decide(ctx, []limiter.Check{free}); v.Allowed || v.Decisions[0].Reason != want {
			t.Fatalf("request %d over the limit: got %+v, want denied with reason %d", 3+i, v.Decisions[0], want)
		}
	}
	if err := e.Reset(ctx, pro); err != nil { // the reset names the other plan's limit
		t.Fatal(err)
	}
	if v, err := e.Decide(ctx, []limiter.Check{free}); err != nil || !v.Allowed {
		t.Fatalf("after Reset: got %+v, err %v; want admitted", v.Decisions[0], err)
	}
}

// Reset also refills the key's in-process fallback share (on_redis_error:
// local), which Redis knows nothing about.
func TestResetRefillsTheLocalFallback(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	local := limiter.NewLocal(0)
	r := newTestRedis(t, c, Config{})
	e, err := limiter.NewEngine(time.Now, local, r) // the engine owns the fallback share
	if err != nil {
		t.Fatal(err)
	}
	rule := &limiter.Rule{Name: "fallback", Algorithm: limiter.GCRA, OnRedisError: limiter.FailLocal, LocalShare: 0.5}
	chk := limiter.Check{Rule: rule, Limit: limiter.Limit{Rate: 10, Period: time.Hour, Burst: 10}, Key: "acme"}
	share := limiter.Limit{Rate: 5, Period: time.Hour, Burst: 5} // half of chk.Limit
	g := limiter.BucketGroup{Policy: rule.Name, Limit: share, Fallback: true, Algorithm: rule.Algorithm}
	now := time.Now()
	for range 5 { // what a Redis outage would have taken: the whole share
		if d, _ := local.Reserve(now, g, chk.Key, 1); !d.Allowed {
			t.Fatalf("taking the fallback share: denied early: %+v", d)
		}
	}
	if d := local.Peek(now, g, chk.Key); d.Allowed {
		t.Fatalf("fallback share before Reset: got %+v, want spent", d)
	}
	if err := e.Reset(context.Background(), chk); err != nil {
		t.Fatal(err)
	}
	if d := local.Peek(now, g, chk.Key); !d.Allowed || d.Remaining != 5 {
		t.Fatalf("fallback share after Reset: got %+v, want 5 left", d)
	}
}

// With Redis gone Reset says so, and still forgets what the instance
// remembers (the denial cache).
func TestResetWithRedisDown(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, 200*time.Millisecond, s.Addr())
	r := newTestRedis(t, c, Config{Timeout: 200 * time.Millisecond})
	rule := policy("down", limiter.GCRA)
	chk := limiter.Check{Rule: rule, Limit: limiter.Limit{Rate: 1, Period: time.Hour, Burst: 1}, Key: "acme"}
	dk := denialKey{policy: rule.Name, limit: chk.Limit, key: digestKey(chk.Key)}
	now := time.Now()
	r.denials.put(dk, 1, now, now.Add(time.Hour), now.Add(time.Hour))
	s.Kill()
	if err := r.Reset(context.Background(), chk); err == nil {
		t.Fatal("Reset with redis down: got nil error, want one")
	}
	if _, hit := r.denials.get(dk, 1, now); hit {
		t.Fatal("the cached denial survived the reset, want it forgotten")
	}
}

// On a Cluster the key's state is one slot: one DEL covers it, for every
// algorithm.
func TestResetOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := newTestClient(t, semanticsTimeout, cl.Addrs()...)
	avoidWindowEdge(t, c, time.Hour, 10*time.Second)
	e := newTestEngine(t, newTestRedis(t, c, Config{}))
	ctx := context.Background()
	for _, alg := range sharedAlgorithms {
		chk := limiter.Check{Rule: policy("cl-"+string(alg), alg), Limit: resetLimit(alg), Key: "tenant-a", Cost: 1}
		take(t, e, chk, 3)
		if err := e.Reset(ctx, chk); err != nil {
			t.Fatalf("%s: Reset: %v", alg, err)
		}
		if n := c.Exists(ctx, stateKeys(chk.Rule.Name, digestKey(chk.Key))...).Val(); n != 0 {
			t.Fatalf("%s: after Reset %d keys exist, want none", alg, n)
		}
		if d, err := e.PeekOne(ctx, chk); err != nil || d.Remaining != 5 {
			t.Fatalf("%s: after Reset got %+v, err %v; want 5 left", alg, d, err)
		}
	}
}
