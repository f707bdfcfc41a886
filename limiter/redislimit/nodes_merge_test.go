package redislimit

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// mergeFlood decides one GCRA check a request for d from 64 goroutines over
// 1,000 keys and returns how many decisions Redis answered.
func mergeFlood(t *testing.T, r *Limiter, d time.Duration) int64 {
	t.Helper()
	pol := policy("merge", limiter.GCRA)
	lim := limiter.Limit{Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for w := range 64 {
		wg.Go(func() {
			for i := 0; i < 1_000_000 && time.Now().Before(stop); i++ {
				ds, _ := r.Decide(context.Background(), []limiter.Check{{Rule: pol, Limit: lim, Key: fmt.Sprint((w*997 + i) % 1000)}}, nil)
				if ds[0].Allowed {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return n.Load()
}

// On a Cluster, the calls bound for one master are merged into one script
// call as on a standalone server: under 64 concurrent decisions over 1,000
// keys (in every slot) far fewer EVALSHAs reach the masters than decisions
// are made, and each master runs about a third of them.
func TestClusterMergesEachNodesCalls(t *testing.T) {
	c := redistest.StartCluster(t)
	r := newTestRedis(t, newTestClient(t, time.Second, c.Addrs()...), Config{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	mergeFlood(t, r, 200*time.Millisecond) // scripts cached, connections made
	for _, s := range c.Servers {
		redistest.ResetStats(t, s.Addr())
	}
	decisions := mergeFlood(t, r, 1500*time.Millisecond)
	var calls int64
	var per []int64
	for _, s := range c.Servers {
		n := redistest.CommandCount(t, s.Addr(), "evalsha", "eval")
		calls += n
		per = append(per, n)
	}
	t.Logf("%d decisions, %d script calls on the masters (%v): %.1f decisions a call", decisions, calls, per, float64(decisions)/float64(max(1, calls)))
	if decisions == 0 || float64(calls) > 0.5*float64(decisions) {
		t.Errorf("%d script calls for %d decisions, want at most half as many (merged per node)", calls, decisions)
	}
	for i, n := range per {
		if n == 0 {
			t.Errorf("master %d ran no script", i)
		}
	}
}

// A merged call that its node refuses as a whole, because a key it names
// lives on another master (a failover or a resharding moved its slot), is
// sent again unmerged: each call goes to its slot's master through the
// redirection, and every call gets its own reply.
func TestClusterMergedCallRefusedIsSentAgainUnmerged(t *testing.T) {
	c := redistest.StartCluster(t)
	client := newTestClient(t, time.Second, c.Addrs()...)
	r := newTestRedis(t, client, Config{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	cc := client.(*redis.ClusterClient)
	ctx := context.Background()
	check := limiter.Check{Rule: policy("again", limiter.GCRA), Limit: limiter.Limit{Rate: 10, Period: time.Second, Burst: 10}}
	// Keys on two masters, the first one's first.
	var keys []string
	owners := map[string]int{}
	var first string
	for i := 0; len(keys) < 6 && i < 1000; i++ {
		k := fmt.Sprint("k", i)
		m, err := cc.MasterForKey(ctx, redisBaseKey(check.Rule.Name, digestKey(k)))
		if err != nil {
			t.Fatal(err)
		}
		a := m.Options().Addr
		if first == "" {
			first = a
		}
		if owners[a] < 3 && (a == first || len(owners) < 2 || owners[a] > 0) {
			owners[a]++
			keys = append(keys, k)
		}
	}
	if len(owners) != 2 {
		t.Fatalf("keys on %d masters, want 2", len(owners))
	}
	cmds := make([]redis.Cmder, len(keys))
	for i, k := range keys {
		cmds[i] = decideCall(t, k, check)
	}
	n := r.nodeOf(ctx, cmdKey(cmds[0]))
	merged, split, again := mergeNodeDecides(cmds)
	if len(merged) != 1 {
		t.Fatalf("merged into %d calls, want 1", len(merged))
	}
	r.execOn(ctx, n, merged)
	split()
	re := again()
	if err := merged[0].Err(); err == nil || len(re) != len(cmds) {
		t.Fatalf("merged call over two masters: err %v, %d calls to send again; want a refusal and %d", err, len(re), len(cmds))
	}
	r.execOn(ctx, n, re)
	for i, c := range cmds {
		checkDecideReply(t, i, c, []bool{true}, true)
	}
}
