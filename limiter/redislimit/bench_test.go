package redislimit

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// BenchmarkRedisDecide measures one Decide against a local
// redis-server: one round trip per op except for denial-cache hits. Report
// each case as a ratio to anchor_ping from the same run.
func BenchmarkRedisDecide(b *testing.B) {
	s := redistest.Start(b)
	c := newTestClient(b, time.Second, s.Addr())
	big := limiter.Limit{Rate: 1 << 40, Period: time.Second}
	cases := []struct {
		name   string
		checks func(i int) []limiter.Check
	}{
		{"gcra", func(i int) []limiter.Check {
			return []limiter.Check{{Rule: policy("b-gcra", limiter.GCRA), Limit: big, Key: strconv.Itoa(i % 1000)}}
		}},
		{"sliding_window", func(i int) []limiter.Check {
			return []limiter.Check{{Rule: policy("b-sw", limiter.SlidingWindow), Limit: limiter.Limit{Rate: 1 << 40, Period: 10 * time.Millisecond}, Key: strconv.Itoa(i % 1000)}}
		}},
		{"fixed_window", func(i int) []limiter.Check {
			return []limiter.Check{{Rule: policy("b-fw", limiter.FixedWindow), Limit: big, Key: strconv.Itoa(i % 1000)}}
		}},
		{"gcra+gcra+sliding+fixed", func(i int) []limiter.Check {
			k := strconv.Itoa(i % 1000)
			return []limiter.Check{
				{Rule: policy("b4-g1", limiter.GCRA), Limit: big, Key: k},
				{Rule: policy("b4-g2", limiter.GCRA), Limit: big, Key: k},
				{Rule: policy("b4-sw", limiter.SlidingWindow), Limit: limiter.Limit{Rate: 1 << 40, Period: 10 * time.Millisecond}, Key: k},
				{Rule: policy("b4-fw", limiter.FixedWindow), Limit: big, Key: k},
			}
		}},
		{"gcra+gcra", func(i int) []limiter.Check {
			k := strconv.Itoa(i % 1000)
			return []limiter.Check{
				{Rule: policy("b2-g1", limiter.GCRA), Limit: big, Key: k},
				{Rule: policy("b2-g2", limiter.GCRA), Limit: big, Key: k},
			}
		}},
		{"denial_cache_hit", func(int) []limiter.Check {
			return []limiter.Check{{Rule: policy("b-denied", limiter.GCRA), Limit: limiter.Limit{Rate: 1, Period: time.Hour}, Key: "k"}}
		}},
	}
	// The anchor: one bare PING round trip on the same client, so each case
	// reads as a ratio to the network round trip it cannot avoid.
	b.Run("anchor_ping", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Ping(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What two GCRA checks of one request would cost through redis_rate's
	// public API alone: two AllowN calls, two round trips (the alternative
	// to decideScript that the package doc weighs).
	b.Run("gcra+gcra_via_two_AllowN", func(b *testing.B) {
		rl := redis_rate.NewLimiter(c)
		lim := redis_rate.Limit{Rate: 1 << 40, Burst: 1 << 40, Period: time.Second}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := strconv.Itoa(i % 1000)
			for _, p := range []string{"b2a-g1", "b2a-g2"} {
				if _, err := rl.AllowN(context.Background(), redisBaseKey(p, digestKey(k)), lim, 1); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			r := newTestRedis(b, c, Config{})
			r.Decide(context.Background(), bc.checks(0), nil) // load scripts
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				r.Decide(context.Background(), bc.checks(i), nil)
			}
			b.StopTimer()
			if st := r.Stats(); st.Errors > 0 {
				b.Fatalf("got %d failed round trips, want none", st.Errors)
			}
		})
	}
}

// BenchmarkMergedScript measures what Redis itself spends on a merged
// decision call of 13 GCRA requests (the batch the coalescer carries under
// load at 64 connections), from INFO commandstats: redis-µs/decision. The
// anchor is a script that returns at once, called with the same arguments:
// what any script call of that size costs. Report hot_key and many_keys as
// ratios to it.
func BenchmarkMergedScript(b *testing.B) {
	s := redistest.Start(b)
	c := newTestClient(b, time.Second, s.Addr())
	ctx := context.Background()
	const batch = 13
	mergedArgs := func(key func(i int) string) []any {
		check := limiter.Check{Rule: policy("ms-gcra", limiter.GCRA), Limit: limiter.Limit{Rate: 1 << 40, Period: time.Second}}
		cmds := make([]redis.Cmder, batch)
		for i := range cmds {
			cmds[i] = decideCall(b, key(i), check)
		}
		merged, _ := mergeDecides(cmds)
		if len(merged) != 1 {
			b.Fatalf("merged into %d calls, want 1", len(merged))
		}
		return merged[0].Args()
	}
	nodeArgs := func(key func(i int) string) []any {
		check := limiter.Check{Rule: policy("ms-gcra", limiter.GCRA), Limit: limiter.Limit{Rate: 1 << 40, Period: time.Second}}
		cmds := make([]redis.Cmder, batch)
		for i := range cmds {
			cmds[i] = decideCall(b, key(i), check)
		}
		merged, _, _ := mergeNodeDecides(cmds)
		return merged[0].Args()
	}
	anchor, err := c.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, src := range []string{decideManySrc, decideManyNodeSrc} {
		if err := c.ScriptLoad(ctx, src).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		args []any
	}{
		{"anchor_return", append([]any{"evalsha", anchor}, mergedArgs(func(int) string { return "hot" })[2:]...)},
		{"hot_key", mergedArgs(func(int) string { return "hot" })},
		{"many_keys", mergedArgs(strconv.Itoa)},
		// The call one Cluster master gets (keys read from the arguments).
		{"many_keys_node_script", nodeArgs(strconv.Itoa)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			redistest.ResetStats(b, s.Addr())
			for b.Loop() {
				if err := c.Do(ctx, bc.args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			st := redistest.CommandTime(b, s.Addr(), "evalsha")
			b.ReportMetric(float64(st.Usec)/float64(st.Calls)/batch, "redis-µs/decision")
		})
	}
}

// BenchmarkNodeScriptBatch measures what Redis spends (INFO commandstats,
// redis-µs/decision) on the script a Cluster master gets, by the number of
// GCRA decisions merged into one call (a lone call unmerged, as sent), on a standalone server and on a
// Cluster-mode server holding every slot: what a call costs whatever it
// carries, what each decision adds, and what Cluster mode adds (each key a
// script touches is checked against the node's slots). A 3-master Cluster
// gives each master a third of an instance's decisions, so its batches are
// a third as large at the same load: compare batch=16 on standalone with
// batch=4 or 8 on cluster. redis-cpu-µs/decision is the server's whole CPU
// time (INFO cpu) over the same calls: the script and the reading, writing
// and waking around it, which commandstats leaves out. Both are times, so
// they move with the machine's load; BenchmarkNodeScriptInstructions counts
// instructions instead.
func BenchmarkNodeScriptBatch(b *testing.B) {
	ctx := context.Background()
	// Never reached, but slow enough that each decision moves the key's
	// TAT (at 1<<40 a second an emission interval is below a float's
	// resolution: nothing would ever be written).
	check := limiter.Check{Rule: policy("nb-gcra", limiter.GCRA), Limit: limiter.Limit{Rate: 1_000_000, Period: time.Hour}}
	for _, server := range []struct {
		name  string
		start func(b *testing.B) *redistest.Server
	}{
		{"standalone", func(b *testing.B) *redistest.Server { return redistest.Start(b) }},
		{"cluster", func(b *testing.B) *redistest.Server {
			return redistest.StartClusterWith(b, redistest.ClusterOptions{Masters: 1}).Servers[0]
		}},
	} {
		b.Run(server.name, func(b *testing.B) {
			s := server.start(b)
			c := redis.NewClient(&redis.Options{Addr: s.Addr()})
			b.Cleanup(func() { c.Close() })
			for _, src := range []string{decideSrc, decideManyNodeSrc} {
				if err := c.ScriptLoad(ctx, src).Err(); err != nil {
					b.Fatal(err)
				}
			}
			for _, batch := range []int{1, 4, 8, 16} {
				cmds := make([]redis.Cmder, batch)
				for i := range cmds {
					cmds[i] = decideCall(b, strconv.Itoa(i*7919%1000), check)
				}
				// A lone call goes unmerged, as the gatherer sends it.
				merged, _, _ := mergeNodeDecides(cmds)
				args := merged[0].Args()
				b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
					redistest.ResetStats(b, s.Addr())
					cpu := redistest.CPU(b, s.Addr())
					for b.Loop() {
						if err := c.Do(ctx, args...).Err(); err != nil {
							b.Fatal(err)
						}
					}
					cpu = redistest.CPU(b, s.Addr()) - cpu
					st := redistest.CommandTime(b, s.Addr(), "evalsha")
					decisions := float64(st.Calls) * float64(batch)
					b.ReportMetric(float64(st.Usec)/decisions, "redis-µs/decision")
					b.ReportMetric(float64(cpu.Microseconds())/decisions, "redis-cpu-µs/decision")
				})
			}
		})
	}
}

// BenchmarkRedisDecideParallel measures what this process spends on a Redis
// decision under load: 64 goroutines (as wrk -c64 gives the gateway) each
// deciding one gcra check per client key through an Engine, against a real
// redis-server, the calls gathered into shared pipelines. ns/op is
// throughput on a shared machine (Redis and the Go side compete for the
// cores); cpu-ns/op is this process's CPU per decision (user + system, from
// getrusage: Redis's own time is not in it), the Go side's cost; and
// decisions/pipeline the batches the gatherer made. Anchor: the local
// token bucket's decision in the same run (engine_local).
//
//	go test -run '^$' -bench BenchmarkRedisDecideParallel -count 10 ./limiter/redislimit/
func BenchmarkRedisDecideParallel(b *testing.B) {
	s := redistest.Start(b)
	c := newTestClient(b, time.Second, s.Addr())
	// Never reached, not even by gcra-hot's one key taking every decision
	// of a run (over a million in 3 s on 2 cores), yet slow enough that
	// Redis's replies carry the large numbers (µs until the bucket is full)
	// a real limit's do.
	big := limiter.Limit{Rate: 1_000_000_000, Period: time.Hour}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "203.0.113." + strconv.Itoa(i%256) + "/" + strconv.Itoa(i)
	}
	run := func(b *testing.B, e *limiter.Engine, rule *limiter.Rule, keys []string) {
		b.ReportAllocs()
		b.SetParallelism(32 / max(1, runtime.GOMAXPROCS(0)/2)) // 64 goroutines on 2 CPUs
		start := processCPU()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			checks := []limiter.Check{{Rule: rule, Limit: big}}
			for i := rand.IntN(len(keys)); pb.Next(); i++ {
				checks[0].Key = keys[i%len(keys)]
				if v, err := e.Decide(context.Background(), checks); err != nil || !v.Allowed {
					b.Errorf("decision: %v, allowed %v", err, v.Allowed)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
	b.Run("engine_local", func(b *testing.B) {
		e, err := limiter.NewEngine(time.Now, limiter.NewLocal(0), nil)
		if err != nil {
			b.Fatal(err)
		}
		run(b, e, &limiter.Rule{Name: "bp-local"}, keys)
	})
	// gcra: a thousand clients; gcra-hot: one client (what gateway-redis
	// sends), whose calls a pipeline folds into one group (see mergeCalls).
	for _, t := range []struct {
		name string
		keys []string
	}{{"gcra", keys}, {"gcra-hot", keys[:1]}} {
		name, keys := t.name, t.keys
		b.Run(name, func(b *testing.B) {
			r := newTestRedis(b, c, Config{})
			e := newTestEngine(b, r)
			rule := policy("bp-"+name, limiter.GCRA)
			run(b, e, rule, keys)
			st := r.Stats()
			if st.Errors > 0 {
				b.Fatalf("got %d failed round trips, want none", st.Errors)
			}
			b.ReportMetric(float64(st.RoundTrips)/float64(max(1, st.Pipelines)), "decisions/pipeline")
		})
	}
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
