package redislimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

// hammerResult is what a multi-instance run admitted and the bound it had.
type hammerResult struct {
	admitted, requests int64
	bound              int64 // burst + what the rate earned over the interval, summed over keys
	// floor is, per key, the smaller of the requests it got and the same
	// bound over the part of the interval in which requests were still
	// being sent: what a limiter that wastes nothing must admit. A loaded
	// machine may send fewer requests than the limit allows; each of them
	// must then pass.
	floor int64
	// saturated is how many keys were asked more than their bound.
	saturated int
}

// hammer drives three Engines (each with its own Redis client, as three
// gateway instances) from several goroutines each, over keys, for about d
// and at most maxRequests requests. The bound counts, per key, the burst plus
// what the rate earns between two readings of Redis's clock taken before
// the first and after the last request (whole events: GCRA admits the burst,
// then one event per emission interval).
func hammer(t *testing.T, clients [3]redis.UniversalClient, policyName string, lim limiter.Limit, keys []string, d time.Duration, maxRequests int64) hammerResult {
	t.Helper()
	var engines [3]*limiter.Engine
	for i, c := range clients {
		r := newTestRedis(t, c, Config{})
		e := newTestEngine(t, r)
		engines[i] = e
	}
	pol := policy(policyName, limiter.GCRA)

	admittedPerKey := make([]atomic.Int64, len(keys))
	askedPerKey := make([]atomic.Int64, len(keys))
	var requests atomic.Int64
	var failures atomic.Int64
	start := redisNow(t, clients[0])
	startLocal := time.Now()
	var lastSend atomic.Int64 // unix ns of the latest request sent
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i, e := range engines {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := i*4 + g; time.Now().Before(deadline) && requests.Add(1) <= maxRequests; n++ {
					k := n % len(keys)
					sent := time.Now().UnixNano()
					for last := lastSend.Load(); sent > last && !lastSend.CompareAndSwap(last, sent); last = lastSend.Load() {
					}
					v, err := e.Decide(context.Background(), []limiter.Check{{Rule: pol, Limit: lim, Key: keys[k]}})
					if err != nil || (v.Decisions[0].Reason != limiter.ReasonNone && v.Decisions[0].Reason != limiter.ReasonLimited && v.Decisions[0].Reason != limiter.ReasonDenialCached) {
						failures.Add(1)
						continue
					}
					askedPerKey[k].Add(1)
					if v.Allowed {
						admittedPerKey[k].Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	end := redisNow(t, clients[0])
	if n := failures.Load(); n > 0 {
		t.Fatalf("got %d decisions that were not Redis answers, want none", n)
	}
	earned := int64(end.Sub(start).Seconds() / lim.Period.Seconds() * float64(lim.Rate))
	sending := time.Duration(lastSend.Load() - startLocal.UnixNano())
	earnedWhileSending := int64(sending.Seconds() / lim.Period.Seconds() * float64(lim.Rate))
	res := hammerResult{requests: min(requests.Load(), maxRequests)}
	for k := range keys {
		n := admittedPerKey[k].Load()
		if n > lim.Quota()+earned {
			t.Fatalf("key %q: admitted %d, want at most %d (burst + rate over the interval)", keys[k], n, lim.Quota()+earned)
		}
		res.admitted += n
		res.bound += lim.Quota() + earned
		supply := lim.Quota() + earnedWhileSending
		res.floor += min(askedPerKey[k].Load(), supply)
		if askedPerKey[k].Load() > lim.Quota()+earned {
			res.saturated++
		}
	}
	return res
}

func checkHammer(t *testing.T, name string, res hammerResult) {
	t.Helper()
	t.Logf("%s: admitted %d of %d requests; limit+burst over the interval %d (%.2f%%); floor (per key, the requests or limit+burst over the sending time) %d (%.2f%%); %d keys asked more than their bound",
		name, res.admitted, res.requests, res.bound, 100*float64(res.admitted)/float64(res.bound),
		res.floor, 100*float64(res.admitted)/float64(res.floor), res.saturated)
	if res.admitted > res.bound {
		t.Fatalf("admitted %d, want at most %d (limit + burst over the interval)", res.admitted, res.bound)
	}
	if float64(res.admitted) < 0.99*float64(res.floor) {
		t.Fatalf("admitted %d, want at least 99%% of %d (per key, the requests or limit + burst while they were sent)", res.admitted, res.floor)
	}
}

// Three gateway instances sharing one Redis enforce one limit together.
func TestThreeInstancesShareOneLimit(t *testing.T) {
	s := redistest.Start(t)
	var clients [3]redis.UniversalClient
	for i := range clients {
		clients[i] = newTestClient(t, semanticsTimeout, s.Addr())
	}
	// A burst of half a second's rate: a worker stalled by a loaded machine
	// for less than that loses no token, so the 99% floor measures the
	// limiter, not the scheduler.
	lim := limiter.Limit{Rate: 400, Period: time.Second, Burst: 200}
	keys := []string{"tenant-a"}
	// The warm-up run fills the pools and the script caches, which would
	// otherwise eat into the measured interval.
	hammer(t, clients, "warm-up", lim, keys, 200*time.Millisecond, 5_000_000)
	res := hammer(t, clients, "shared-gcra", lim, keys, 1500*time.Millisecond, 5_000_000)
	checkHammer(t, "standalone, 3 instances x 4 goroutines, 1 key, 400/s burst 200", res)
}

// The same on a three-master Redis Cluster with keys spread over all slots,
// and a request's checks split over nodes in one pipeline.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	var clients [3]redis.UniversalClient
	for i := range clients {
		clients[i] = newTestClient(t, semanticsTimeout, cl.Addrs()...)
		if _, ok := clients[i].(*redis.ClusterClient); !ok {
			t.Fatalf("got client %T for %d addrs, want *redis.ClusterClient", clients[i], len(cl.Addrs()))
		}
	}

	t.Run("three instances share limits over many keys", func(t *testing.T) {
		// Few keys, so that rounding to whole events per key stays far
		// below 1%; the check below shows they cover every node.
		keys := make([]string, 9)
		for i := range keys {
			keys[i] = "tenant-" + strconv.Itoa(i)
		}
		lim := limiter.Limit{Rate: 150, Period: time.Second, Burst: 75} // half a second's rate, as above
		hammer(t, clients, "warm-up", lim, keys, 200*time.Millisecond, 5_000_000)
		res := hammer(t, clients, "shared-gcra", lim, keys, 1500*time.Millisecond, 5_000_000)
		checkHammer(t, "cluster, 3 instances x 4 goroutines, 9 keys, 150/s burst 75 each", res)
		for _, srv := range cl.Servers {
			n, err := redistest.Do(srv.Addr(), "DBSIZE")
			if err != nil {
				t.Fatal(err)
			}
			if cnt, _ := strconv.Atoi(n); cnt == 0 {
				t.Fatalf("node %s holds no keys, want the keys spread over every node", srv.Addr())
			}
		}
	})

	t.Run("denied request consumes nothing", func(t *testing.T) {
		runConsumesNothing(t, clients[0])
	})

	t.Run("one pipeline over several nodes after script flush", func(t *testing.T) {
		r := newTestRedis(t, clients[1], Config{})
		for _, srv := range cl.Servers {
			if _, err := redistest.Do(srv.Addr(), "SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
		}
		lim := limiter.Limit{Rate: 10, Period: time.Minute}
		var checks []limiter.Check
		for i, alg := range []limiter.Algorithm{limiter.GCRA, limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow, limiter.SlidingWindow, limiter.FixedWindow} {
			checks = append(checks, limiter.Check{Rule: policy("multi-"+strconv.Itoa(i), alg), Limit: lim, Key: "k" + strconv.Itoa(i)})
		}
		ds, undo := decide(t, r, checks...)
		for i, d := range ds {
			if !d.Allowed || d.Reason != limiter.ReasonNone {
				t.Fatalf("check %d: got allowed=%v reason=%d, want admitted by redis", i, d.Allowed, d.Reason)
			}
		}
		undo(context.Background())
		if st := r.Stats(); st.Refunds != 6 || st.RefundErrors != 0 || st.ScriptReloads == 0 {
			t.Fatalf("got %d refunds, %d refund errors, %d script reloads; want 6, 0, at least 1", st.Refunds, st.RefundErrors, st.ScriptReloads)
		}
	})
}
