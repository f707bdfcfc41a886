package redislimit

import (
	"cmp"
	"context"
	"math"
	"slices"
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
	// sending is how long requests were sent for.
	sending time.Duration
	// lost is what the floor leaves out for the time a bucket may have
	// been full (see mayBeFull), summed over keys.
	lost int64
}

// span is one request, from when it was sent to when its answer came
// (Unix ns).
type span struct{ sent, recv int64 }

// mayBeFull is how much of [from, to] a GCRA bucket of lim may have spent
// full, wasting what the rate earned. A denial decided at some instant in
// [sent, recv] saw the bucket empty (the denial cache's too: it answers
// only until Redis's retry time), and an empty bucket takes (quota - 1) /
// rate to fill: the bucket was certainly not full over [recv, sent + that].
// The rest of [from, to] is counted.
func mayBeFull(denied []span, from, to int64, lim limiter.Limit) time.Duration {
	fill := int64(float64(lim.Quota()-1) / float64(lim.Rate) * float64(lim.Period))
	slices.SortFunc(denied, func(a, b span) int { return cmp.Compare(a.recv, b.recv) })
	var full int64
	at := from // [from, at) is accounted for
	for _, d := range denied {
		lo, hi := d.recv, min(d.sent+fill, to)
		if hi <= lo || hi <= at {
			continue
		}
		if lo > at {
			full += lo - at
		}
		at = max(at, hi)
	}
	if to > at {
		full += to - at
	}
	return time.Duration(full)
}

// fitLimit returns lim scaled down, rate and burst alike, so that each of
// keys is asked about three times its bound at the pace the warm-up run
// measured (requests over its sending time): the floor measures the
// limiter only when the limit is saturated, and a loaded machine sends a
// fraction of what an idle one does. The rate stays at least least, so
// that one event of rounding per key stays near 1% of the bound.
func fitLimit(lim limiter.Limit, warm hammerResult, keys int, least int64) limiter.Limit {
	if warm.sending <= 0 {
		return lim
	}
	perKey := float64(warm.requests) / warm.sending.Seconds() / float64(keys)
	// Over 1.5s, a key's bound is burst + 1.5 × rate = 2 × rate with burst
	// rate/2: three times it is 6 × rate per 1.5s, 4 × rate a second.
	rate := min(lim.Rate, max(least, int64(perKey/4)))
	return limiter.Limit{Rate: rate, Period: lim.Period, Burst: rate * lim.Burst / lim.Rate}
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
	var mu sync.Mutex
	deniedSpans := make([][]span, len(keys)) // of the denials, per key
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
				denied := make([][]span, len(keys))
				defer func() {
					mu.Lock()
					defer mu.Unlock()
					for k := range denied {
						deniedSpans[k] = append(deniedSpans[k], denied[k]...)
					}
				}()
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
					} else {
						denied[k] = append(denied[k], span{sent, time.Now().UnixNano()})
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
	res := hammerResult{requests: min(requests.Load(), maxRequests), sending: sending}
	for k := range keys {
		n := admittedPerKey[k].Load()
		if n > lim.Quota()+earned {
			t.Fatalf("key %q: admitted %d, want at most %d (burst + rate over the interval)", keys[k], n, lim.Quota()+earned)
		}
		res.admitted += n
		res.bound += lim.Quota() + earned
		// Tokens a limiter that wastes nothing may still lose: what the
		// rate earned while the bucket may have been full (a stalled
		// machine, Redis or test, asking nothing of the key).
		full := mayBeFull(deniedSpans[k], startLocal.UnixNano(), lastSend.Load(), lim)
		lost := int64(math.Ceil(full.Seconds() / lim.Period.Seconds() * float64(lim.Rate)))
		res.lost += lost
		// Less one whole event for the edge: the first request was
		// decided after startLocal.
		supply := lim.Quota() + earnedWhileSending - lost - 1
		res.floor += min(askedPerKey[k].Load(), supply)
		if askedPerKey[k].Load() > lim.Quota()+earned {
			res.saturated++
		}
	}
	return res
}

func checkHammer(t *testing.T, name string, res hammerResult) {
	t.Helper()
	t.Logf("%s: admitted %d of %d requests; limit+burst over the interval %d (%.2f%%); floor (per key, the requests or limit+burst over the sending time less %d earned while a bucket may have been full) %d (%.2f%%); %d keys asked more than their bound",
		name, res.admitted, res.requests, res.bound, 100*float64(res.admitted)/float64(res.bound),
		res.lost, res.floor, 100*float64(res.admitted)/float64(res.floor), res.saturated)
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
	// otherwise eat into the measured interval, and measures the pace.
	warm := hammer(t, clients, "warm-up", lim, keys, 200*time.Millisecond, 5_000_000)
	lim = fitLimit(lim, warm, len(keys), 100)
	res := hammer(t, clients, "shared-gcra", lim, keys, 1500*time.Millisecond, 5_000_000)
	checkHammer(t, "standalone, 3 instances x 4 goroutines, 1 key, "+lim.String(), res)
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
		warm := hammer(t, clients, "warm-up", lim, keys, 200*time.Millisecond, 5_000_000)
		lim = fitLimit(lim, warm, len(keys), 50)
		res := hammer(t, clients, "shared-gcra", lim, keys, 1500*time.Millisecond, 5_000_000)
		checkHammer(t, "cluster, 3 instances x 4 goroutines, 9 keys, each "+lim.String(), res)
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
