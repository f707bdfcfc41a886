package redislimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// A reservation on Redis settles to the request's real cost, for each
// algorithm: what was reserved beyond it comes back, what it cost beyond is
// taken, past the quota if need be.
func TestReservationSettlesOnRedis(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	avoidWindowEdge(t, c, time.Hour, 10*time.Second)
	lim := limiter.Limit{Rate: 10, Period: time.Hour}
	steps := []struct {
		name    string
		settle  int64 // what the reserved 6 turn out to cost
		wantRem int64 // left afterwards; -1: the next request is refused
	}{
		{"cost less than reserved", 2, 8},
		{"cost exactly what was reserved", 6, 4},
		{"cost nothing", 0, 10},
		{"cost more than reserved", 9, 1},
		{"cost more than the quota", 14, -1},
	}
	for _, alg := range []limiter.Algorithm{limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow} {
		for i, st := range steps {
			t.Run(string(alg)+"/"+st.name, func(t *testing.T) {
				r := newTestRedis(t, c, Config{})
				e := newTestEngine(t, r)
				rule := policy("settle-"+string(alg)+strconv.Itoa(i), alg)
				other := limiter.Check{Rule: policy("settle-other", limiter.FixedWindow), Limit: limiter.Limit{Rate: 1000, Period: time.Hour}, Key: "o" + strconv.Itoa(i)}
				v, res, err := e.Reserve(context.Background(), []limiter.Check{{Rule: rule, Limit: lim, Key: "k", Cost: 6}, other})
				if err != nil || !v.Allowed || res == nil {
					t.Fatalf("reserve: got allowed=%v reservation=%v err=%v, want admitted", v.Allowed, res != nil, err)
				}
				if err := res.Settle(context.Background(), []int64{st.settle, 1}); err != nil {
					t.Fatal(err)
				}
				probe, probeRes, err := e.Reserve(context.Background(), []limiter.Check{{Rule: rule, Limit: lim, Key: "k", Cost: 1}})
				if err != nil {
					t.Fatal(err)
				}
				got := int64(-1)
				if probe.Allowed {
					got = probe.Decisions[0].Remaining + 1
					probeRes.Settle(context.Background(), []int64{0})
				}
				if got != st.wantRem {
					t.Fatalf("after settling 6 reserved to %d: got %d left (decision %+v), want %d", st.settle, got, probe.Decisions[0], st.wantRem)
				}
				if st := r.Stats(); st.RefundErrors != 0 {
					t.Fatalf("got %d failed adjustments, want 0", st.RefundErrors)
				}
			})
		}
	}
}

// Fifty concurrent requests reserve what they may cost and settle to what
// they did: the quota is never exceeded (reservations bound it), and what
// Redis holds afterwards is exactly the sum of the real costs. Once the
// flood is over, the quota is usable up to within one reservation: nothing
// a reservation took is kept past its settling.
//
// How much of the quota the flood itself uses depends on timing: a request
// denied while others' reservations were in flight may be remembered as
// denied (up to maxDenialTrust, by the gateway clock, which stands still
// here), and the flood's 2,000 attempts can run out against it. So the
// top-up is asked after the flood, with the clock moved past that trust.
func TestConcurrentReservationsStayInsideTheQuota(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	avoidWindowEdge(t, c, time.Hour, 10*time.Second)
	clock := clocktest.New(time.Now())
	r := newTestRedis(t, c, Config{Clock: clock.Now})
	e := newTestEngine(t, r)
	const quota, reserve = 5000, 200
	chk := limiter.Check{Rule: policy("tokens-hourly", limiter.FixedWindow), Limit: limiter.Limit{Rate: quota, Period: time.Hour}, Key: "tenant", Cost: reserve}
	var settled, admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 40 {
				v, res, err := e.Reserve(context.Background(), []limiter.Check{chk})
				if err != nil {
					t.Error(err)
					return
				}
				if !v.Allowed {
					continue
				}
				actual := 1 + rng.Int64N(reserve)
				if err := res.Settle(context.Background(), []int64{actual}); err != nil {
					t.Error(err)
					return
				}
				admitted.Add(1)
				settled.Add(actual)
			}
		}()
	}
	wg.Wait()
	used := redisGetInt(t, c, redisBaseKey(chk.Rule.Name, digestKey(chk.Key))+fixedSuffix)
	t.Logf("50 clients × 40 requests reserving %d of a %d quota: %d admitted, %d tokens settled, redis holds %d", reserve, quota, admitted.Load(), settled.Load(), used)
	if settled.Load() > quota {
		t.Fatalf("settled %d tokens, want at most the quota %d", settled.Load(), quota)
	}
	if used != settled.Load() {
		t.Fatalf("redis holds %d, want exactly the settled %d", used, settled.Load())
	}
	// The top-up, one request at a time, each costing all it reserved:
	// admitted while the reservation fits, so it ends with more than
	// quota-reserve used, and the denial that ends it is Redis's.
	clock.Advance(2 * maxDenialTrust)
	for range quota / reserve {
		v, res, err := e.Reserve(context.Background(), []limiter.Check{chk})
		if err != nil {
			t.Fatal(err)
		}
		if !v.Allowed {
			if reason := v.Decisions[0].Reason; reason == limiter.ReasonDenialCached {
				t.Fatalf("the top-up was denied from the denial cache, want Redis asked")
			}
			break
		}
		if err := res.Settle(context.Background(), []int64{reserve}); err != nil {
			t.Fatal(err)
		}
		settled.Add(reserve)
	}
	used = redisGetInt(t, c, redisBaseKey(chk.Rule.Name, digestKey(chk.Key))+fixedSuffix)
	if used != settled.Load() || used <= quota-reserve || used > quota {
		t.Fatalf("after the top-up redis holds %d, settled %d; want them equal, above %d and at most %d",
			used, settled.Load(), quota-reserve, quota)
	}
}
