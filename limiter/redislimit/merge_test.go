package redislimit

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// A merged call folds neighbours: a call with the keys and arguments of
// the one before it joins its group (sent once, counted), one with its
// arguments alone starts a group that reuses them (its keys sent, a
// negative count), and anything else is sent whole. A sliding window's
// member makes every call of it unique.
func TestMergeFoldsNeighbours(t *testing.T) {
	g := limiter.Check{Rule: policy("f-gcra", limiter.GCRA), Limit: limiter.Limit{Rate: 5, Period: time.Hour}}
	sw := limiter.Check{Rule: policy("f-sw", limiter.SlidingWindow), Limit: limiter.Limit{Rate: 5, Period: time.Hour}}
	cmds := []redis.Cmder{
		decideCall(t, "a", g), decideCall(t, "a", g), decideCall(t, "a", g), // one group of 3
		decideCall(t, "b", g), decideCall(t, "c", g), // a's arguments, keys of their own
		decideCall(t, "c", g),                          // joins c's group
		decideCall(t, "a", sw), decideCall(t, "a", sw), // members differ: two groups
	}
	merged, _ := mergeDecides(cmds)
	if len(merged) != 1 {
		t.Fatalf("merged into %d commands, want 1", len(merged))
	}
	key := func(i, j int) any { return cmds[i].Args()[3+j] }
	argv := func(i int) []any {
		a := cmds[i].Args()
		k, _ := a[2].(int)
		return a[3+k:]
	}
	want := []any{"evalsha", decideManyScript.Hash(), 7,
		key(0, 0), key(3, 0), key(4, 0), key(6, 0), key(6, 1), key(7, 0), key(7, 1),
		5, 3}
	want = append(want, argv(0)...)
	want = append(want, -1, -2, 1)
	want = append(want, argv(6)...)
	want = append(want, 1)
	want = append(want, argv(7)...)
	got := merged[0].Args()
	if len(got) != len(want) {
		t.Fatalf("merged args %v\nwant %v", got, want)
	}
	for i := range want {
		if !sameValues(got[i:i+1], want[i:i+1]) {
			t.Fatalf("merged arg %d = %v, want %v\ngot  %v\nwant %v", i, got[i], want[i], got, want)
		}
	}
}

// Folded or not, a merged call decides as the same calls sent one by one:
// random runs of requests on a few keys, every algorithm, record and peek,
// with many neighbours repeated (a hot key) or sharing their arguments
// (tenants of one policy), run merged on one server, merged for a Cluster
// master on another, and one call at a time on a third, give every call the
// same reply (reset and retry within a second: each server reads its own
// clock) and leave the same counts.
func TestMergedFoldedCallsDecideAsOneByOne(t *testing.T) {
	ctx := context.Background()
	servers := map[string]*Limiter{}
	clients := map[string]redis.UniversalClient{}
	for _, name := range []string{"merged", "node", "alone"} {
		s := redistest.Start(t)
		clients[name] = newTestClient(t, 2*time.Second, s.Addr())
		servers[name] = newTestRedis(t, clients[name], Config{Timeout: 2 * time.Second})
	}
	hour := func(name string, alg limiter.Algorithm, n int64) limiter.Check {
		return limiter.Check{Rule: policy(name, alg), Limit: limiter.Limit{Rate: n, Period: time.Hour, Burst: n}}
	}
	g, g2 := hour("o-gcra", limiter.GCRA, 6), hour("o-gcra2", limiter.GCRA, 3)
	fw, sw, cc := hour("o-fw", limiter.FixedWindow, 5), hour("o-sw", limiter.SlidingWindow, 4), hour("o-cc", limiter.SharedConcurrency, 2)
	requests := [][]limiter.Check{{g}, {g}, {g, fw}, {fw}, {g2, g}, {sw}, {sw, g}, {cc}, {g2}}
	var keys []string // every run's
	rng := rand.New(rand.NewPCG(7, 24))
	folded := 0
	for run := range 12 {
		// Keys of the run's own, so that each run starts with full limits.
		runKeys := []string{"k1-" + strconv.Itoa(run), "k2-" + strconv.Itoa(run), "k3-" + strconv.Itoa(run)}
		keys = append(keys, runKeys...)
		var calls []*redis.IntSliceCmd
		var prevKey string
		var prevReq []limiter.Check
		var prevMode scriptMode
		for range 40 {
			key, req, mode := runKeys[rng.IntN(len(runKeys))], requests[rng.IntN(len(requests))], modeRecord
			if rng.IntN(8) == 0 {
				mode = modePeek
			}
			switch p := rng.IntN(4); {
			case prevReq != nil && p < 2: // the same request again
				key, req, mode = prevKey, prevReq, prevMode
			case prevReq != nil && p == 2: // the same policies, another key
				req, mode = prevReq, prevMode
			}
			prevKey, prevReq, prevMode = key, req, mode
			calls = append(calls, decideCallMode(t, key, mode, req...))
		}
		copies := func() []redis.Cmder {
			out := make([]redis.Cmder, len(calls))
			for i, c := range calls {
				cp := redis.NewIntSliceCmd(ctx, c.Args()...)
				cp.SetFirstKeyPos(evalFirstKey)
				out[i] = cp
			}
			return out
		}
		merged, node, alone := copies(), copies(), copies()
		m, split := mergeDecides(merged)
		if len(m) != 1 {
			t.Fatalf("run %d: merged into %d commands, want 1", run, len(m))
		}
		groups := m[0].Args()[3+m[0].Args()[2].(int)].(int)
		folded += len(calls) - groups
		servers["merged"].execOn(ctx, servers["merged"].single, m)
		split()
		mn, splitNode, _ := mergeNodeDecides(node)
		servers["node"].execOn(ctx, servers["node"].single, mn)
		splitNode()
		for _, c := range alone {
			servers["alone"].execOn(ctx, servers["alone"].single, []redis.Cmder{c})
		}
		for i := range calls {
			want, err := alone[i].(*redis.IntSliceCmd).Result()
			if err != nil {
				t.Fatalf("run %d call %d alone: %v", run, i, err)
			}
			for name, c := range map[string]redis.Cmder{"merged": merged[i], "node": node[i]} {
				got, err := c.(*redis.IntSliceCmd).Result()
				if err != nil {
					t.Fatalf("run %d call %d %s: %v", run, i, name, err)
				}
				if !sameReply(got, want) {
					t.Fatalf("run %d call %d (%v) %s: reply %v, one by one %v", run, i, calls[i].Args(), name, got, want)
				}
			}
		}
	}
	if folded < 100 {
		t.Fatalf("%d of 480 calls folded into a neighbour's group, want most of the repeats (the test lost its point)", folded)
	}
	t.Logf("%d of 480 calls folded", folded)
	// The three servers hold the same state.
	for _, k := range keys {
		for _, c := range []limiter.Check{g, g2, fw, sw, cc} {
			base := redisBaseKey(c.Rule.Name, digestKey(k))
			var keys []string
			switch c.Rule.Algorithm {
			case limiter.GCRA:
				keys = []string{gcraKeyPrefix + base}
			case limiter.FixedWindow:
				keys = []string{base + fixedSuffix}
			case limiter.SlidingWindow:
				keys = []string{base + slidingSumSuffix}
			}
			for _, key := range keys {
				want := clients["alone"].Get(ctx, key).Val()
				for _, name := range []string{"merged", "node"} {
					got := clients[name].Get(ctx, key).Val()
					if c.Rule.Algorithm == limiter.GCRA {
						if !closeFloat(got, want, 1) {
							t.Errorf("%s %s: TAT %q, one by one %q", name, key, got, want)
						}
					} else if got != want {
						t.Errorf("%s %s: %q, one by one %q", name, key, got, want)
					}
				}
			}
		}
		lease := redisBaseKey(cc.Rule.Name, digestKey(k)) + concurrencySuffix
		want := clients["alone"].ZCard(ctx, lease).Val()
		for _, name := range []string{"merged", "node"} {
			if got := clients[name].ZCard(ctx, lease).Val(); got != want {
				t.Errorf("%s %s: %d leases, one by one %d", name, lease, got, want)
			}
		}
	}
}

// sameReply compares two decideScript replies check by check (see
// readDecideReply): their shapes, allowed, remaining, the window's end and
// the recorded flag exactly, the retry and reset after (µs from each
// server's own clock) within a second.
func sameReply(got, want []int64) bool {
	if len(got) != len(want) || len(got) == 0 || got[len(got)-1] != want[len(want)-1] {
		return false
	}
	near := func(x, y int64) bool { return math.Abs(float64(x-y)) <= 1e6 }
	for at := 0; at < len(got)-1; {
		switch {
		case got[at] >= 0 && want[at] >= 0: // an admitted check's reset
			if !near(got[at], want[at]) {
				return false
			}
			at++
		case got[at] == fullReply && want[at] == fullReply && at+6 < len(got):
			for i := 1; i <= 5; i++ {
				if i == 3 || i == 4 { // retry, reset
					if !near(got[at+i], want[at+i]) {
						return false
					}
				} else if got[at+i] != want[at+i] {
					return false
				}
			}
			at += 6
		default:
			return false
		}
	}
	return true
}

// closeFloat says whether two TATs (seconds, as redis_rate writes them)
// are within tol seconds of each other.
func closeFloat(a, b string, tol float64) bool {
	if a == b {
		return true
	}
	x, errX := strconv.ParseFloat(a, 64)
	y, errY := strconv.ParseFloat(b, 64)
	return errX == nil && errY == nil && math.Abs(x-y) <= tol
}
