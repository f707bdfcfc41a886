package redislimit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

func TestSlotRetryMatches(t *testing.T) {
	if got, want := slotRetryMicros, "1000000"; limiter.SlotRetryAfter != time.Second || got != want {
		t.Fatalf("slotRetryMicros %s, limiter.SlotRetryAfter %s: want them equal", got, limiter.SlotRetryAfter)
	}
}

// leaseEngines returns n engines, each with its own Redis limiter (as n
// gateway instances), on one Redis.
func leaseEngines(t *testing.T, c redis.UniversalClient, n int) []*limiter.Engine {
	t.Helper()
	es := make([]*limiter.Engine, n)
	for i := range es {
		e := newTestEngine(t, newTestRedis(t, c, Config{}))
		es[i] = e
	}
	return es
}

func leaseCheck(key string, slots int64, lease time.Duration) limiter.Check {
	return limiter.Check{Rule: policy("inflight", limiter.SharedConcurrency), Limit: limiter.Limit{Rate: slots, Burst: slots, Period: lease}, Key: key}
}

// leaseKey is the lease set of key under the policy "inflight".
func leaseKey(key string) string {
	return redisBaseKey("inflight", digestKey(key)) + concurrencySuffix
}

func zcard(t *testing.T, c redis.UniversalClient, key string) int64 {
	t.Helper()
	n, err := c.ZCard(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Two instances on one Redis share the slots: of 64 requests at once, 4
// hold one; once they end, the set is empty and 4 new ones pass.
func TestSharedConcurrencyAcrossInstances(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	es := leaseEngines(t, c, 2)
	check := leaseCheck("tenant-a", 4, 30*time.Second)
	ctx := context.Background()

	var mu sync.Mutex
	var held []*limiter.Reservation
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, res, err := es[i%2].Reserve(ctx, []limiter.Check{check})
			if err != nil {
				t.Error(err)
				return
			}
			if v.Allowed {
				mu.Lock()
				held = append(held, res)
				mu.Unlock()
			} else if d := v.Decisions[0]; d.Reason != limiter.ReasonLimited || d.Policy != "inflight" {
				t.Errorf("denial: got %+v, want ReasonLimited by inflight", d)
			}
		}()
	}
	wg.Wait()
	if len(held) != 4 {
		t.Fatalf("admitted across two instances: got %d of 64, want 4", len(held))
	}
	if got := zcard(t, c, leaseKey("tenant-a")); got != 4 {
		t.Fatalf("leases: got %d, want 4", got)
	}
	for _, res := range held {
		if err := res.Done(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := zcard(t, c, leaseKey("tenant-a")); got != 0 {
		t.Fatalf("leases after every request ended: got %d, want 0", got)
	}
	for i := range 4 {
		if v, _, err := es[i%2].Reserve(ctx, []limiter.Check{check}); err != nil || !v.Allowed {
			t.Fatalf("request %d after the release: got allowed=%v err=%v, want admitted", i+1, v.Allowed, err)
		}
	}
}

// An instance that dies holding a lease (its reservation dropped, never
// settled or renewed, as after SIGKILL) keeps the slot for one lease, no
// longer: the slot comes back by Redis's clock.
func TestSharedConcurrencyLeaseLapses(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	es := leaseEngines(t, c, 2)
	const lease = 200 * time.Millisecond
	check := leaseCheck("tenant-a", 1, lease)
	ctx := context.Background()

	before := redisNow(t, c)
	if v, _, err := es[0].Reserve(ctx, []limiter.Check{check}); err != nil || !v.Allowed {
		t.Fatalf("dying instance: got allowed=%v err=%v, want admitted", v.Allowed, err)
	} // the reservation is dropped: the instance is gone
	if v, _, _ := es[1].Reserve(ctx, []limiter.Check{check}); v.Allowed {
		t.Fatal("survivor while the lease is live: admitted, want denied")
	}
	members, err := c.ZRangeWithScores(ctx, leaseKey("tenant-a"), 0, -1).Result()
	if err != nil || len(members) != 1 {
		t.Fatalf("leases: got %v %v, want 1", members, err)
	}
	expiry := time.UnixMilli(int64(members[0].Score))
	// Scores are whole ms of Redis time: compare with before in whole ms.
	if got := expiry.Sub(before.Truncate(time.Millisecond)); got < lease || got > lease+time.Second {
		t.Fatalf("lease expiry: %s after the reservation, want %s", got, lease)
	}
	waitRedisTime(t, c, expiry.Add(time.Millisecond))
	v, res, err := es[1].Reserve(ctx, []limiter.Check{check})
	if err != nil || !v.Allowed {
		t.Fatalf("survivor after the lease: got allowed=%v err=%v, want admitted", v.Allowed, err)
	}
	if err := res.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if got := zcard(t, c, leaseKey("tenant-a")); got != 0 {
		t.Fatalf("leases at the end: got %d, want 0", got)
	}
}

// A request that runs for several leases keeps its slot while its
// reservation is kept alive, and gives it back when it ends.
func TestSharedConcurrencyRenewal(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	es := leaseEngines(t, c, 2)
	const lease = 150 * time.Millisecond
	check := leaseCheck("tenant-a", 1, lease)
	ctx := context.Background()

	start := redisNow(t, c)
	v, res, err := es[0].Reserve(ctx, []limiter.Check{check})
	if err != nil || !v.Allowed {
		t.Fatalf("long request: got allowed=%v err=%v, want admitted", v.Allowed, err)
	}
	stop := res.KeepAlive(ctx)
	var denied atomic.Int64
	for i := 1; i <= 5; i++ {
		waitRedisTime(t, c, start.Add(time.Duration(i)*lease))
		if v, _, _ := es[1].Reserve(ctx, []limiter.Check{check}); v.Allowed {
			t.Fatalf("%d leases into the long request: another admitted, want denied", i)
		}
		denied.Add(1)
	}
	stop()
	stop() // idempotent
	if err := res.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if got := zcard(t, c, leaseKey("tenant-a")); got != 0 {
		t.Fatalf("leases after the long request ended: got %d, want 0", got)
	}
	if v, _, _ := es[1].Reserve(ctx, []limiter.Check{check}); !v.Allowed {
		t.Fatal("after the long request: denied, want admitted")
	}
	t.Logf("lease %s: slot kept for %d leases by renewal", lease, denied.Load())
}

// 10,000 requests one after another through a slot of 1, on two instances:
// each finds the slot free, and the lease set is empty at the end.
func TestSharedConcurrencyNoLeaseLeaked(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	es := leaseEngines(t, c, 2)
	check := leaseCheck("tenant-a", 1, 30*time.Second)
	ctx := context.Background()
	const n = 10_000
	deadline := time.Now().Add(60 * time.Second)
	for i := range n {
		v, res, err := es[i%2].Reserve(ctx, []limiter.Check{check})
		if err != nil || !v.Allowed {
			t.Fatalf("request %d: got allowed=%v err=%v, want admitted (a lease leaked)", i+1, v.Allowed, err)
		}
		stop := res.KeepAlive(ctx)
		stop()
		if err := res.Done(ctx); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests within the time bound", i+1)
		}
	}
	if got := zcard(t, c, leaseKey("tenant-a")); got != 0 {
		t.Fatalf("leases after %d requests: got %d, want 0", n, got)
	}
}

// With Redis gone and on_redis_error: local, an instance holds its share of
// the slots in-process, and gives them back when requests end.
func TestSharedConcurrencyLocalFallback(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{Timeout: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	e := newTestEngine(t, r)
	check := leaseCheck("tenant-a", 4, 30*time.Second)
	check.Rule = &limiter.Rule{Name: "inflight", Algorithm: limiter.SharedConcurrency, OnRedisError: limiter.FailLocal, LocalShare: 0.5}
	ctx := context.Background()
	s.Kill()

	var held []*limiter.Reservation
	for i := range 3 {
		v, res, err := e.Reserve(ctx, []limiter.Check{check})
		if err != nil {
			t.Fatal(err)
		}
		if d := v.Decisions[0]; d.Reason != limiter.ReasonLocalFallback {
			t.Fatalf("request %d: got reason %v, want ReasonLocalFallback", i+1, d.Reason)
		}
		if want := i < 2; v.Allowed != want {
			t.Fatalf("request %d with 2 local slots: got allowed=%v, want %v", i+1, v.Allowed, want)
		}
		if v.Allowed {
			held = append(held, res)
		}
	}
	if err := held[0].Done(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := e.Reserve(ctx, []limiter.Check{check}); !v.Allowed {
		t.Fatal("after one request ended: denied, want its local slot back")
	}
}

// On a Cluster a request's checks are decided one slot at a time: a lease
// taken before another policy denies the request is given back.
func TestSharedConcurrencyClusterRefund(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := newTestClient(t, semanticsTimeout, cl.Addrs()...)
	es := leaseEngines(t, c, 1)
	ctx := context.Background()
	lease := leaseCheck("tenant-a", 2, 30*time.Second)
	hourly := limiter.Check{Rule: policy("hourly", limiter.GCRA), Limit: limiter.Limit{Rate: 1, Period: time.Hour, Burst: 1}, Key: "tenant-a"}
	checks := []limiter.Check{lease, hourly}

	v, res, err := es[0].Reserve(ctx, checks)
	if err != nil || !v.Allowed {
		t.Fatalf("first: got allowed=%v err=%v, want admitted", v.Allowed, err)
	}
	v, _, err = es[0].Reserve(ctx, checks)
	if i, denied := v.DeniedBy(); err != nil || v.Allowed || !denied || i != 1 {
		t.Fatalf("second: got allowed=%v denied=%d (%v) err=%v, want denied by hourly", v.Allowed, i, denied, err)
	}
	if got := zcard(t, c, leaseKey("tenant-a")); got != 1 {
		t.Fatalf("leases after the denial: got %d, want 1 (the first request's)", got)
	}
	if err := res.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if got := zcard(t, c, leaseKey("tenant-a")); got != 0 {
		t.Fatalf("leases at the end: got %d, want 0", got)
	}
}

// A lease that lapsed while its request ran (forced here: the lease set is
// deleted, as a Redis failover could) is found by the next renewal, logged
// and counted as lost; renewing it does not bring it back.
func TestSharedConcurrencyLostLeaseCounted(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	r := newTestRedis(t, c, Config{})
	e := newTestEngine(t, r)
	ctx := context.Background()
	v, res, err := e.Reserve(ctx, []limiter.Check{leaseCheck("tenant-l", 1, 60*time.Millisecond)})
	if err != nil || !v.Allowed {
		t.Fatalf("reserve: %v %v", v.Allowed, err)
	}
	if err := c.Del(ctx, leaseKey("tenant-l")).Err(); err != nil {
		t.Fatal(err)
	}
	stop := res.KeepAlive(ctx) // renews every 20ms
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().LeasesLost == 0 {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("no renewal counted the lapsed lease as lost")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	stop()
	if err := res.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if got := zcard(t, c, leaseKey("tenant-l")); got != 0 {
		t.Fatalf("a lost lease was brought back: %d leases", got)
	}
	if st := r.Stats(); st.RenewErrors != 0 {
		t.Fatalf("renew errors %d with a healthy Redis, want 0", st.RenewErrors)
	}
}
