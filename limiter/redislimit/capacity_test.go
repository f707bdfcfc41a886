package redislimit

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// Each server of BenchmarkRedisCapacity gets capQuota of CPU every
// capPeriod: a tenth of a core.
const (
	capQuota  = time.Millisecond
	capPeriod = 10 * time.Millisecond
)

// BenchmarkRedisCapacity measures what Redis holds when Redis, not the
// gateway, is what runs out: every redis-server is capped at a tenth of a
// core (redistest's LimitCPU), as though each had a slow core of its own,
// and enough decisions are kept in flight (as many as the gatherer's
// pipelines carry, 4 × 128) to keep every server busy. On a small machine
// this is the only way to saturate three masters and still have the cores
// to feed them; uncapped, the gateway runs out first.
//
// Every server runs on the last CPU this process may use: the kernel hands a capped group its
// quota per CPU, and a server moving between two CPUs found its share on
// the other one now and then. Unpinned, the standalone server's rate
// varied from 12.9k to 19k decisions/s over rounds; pinned, 19.0–19.2k.
//
// standalone is one server; cluster-3 a Cluster of three masters. Each
// decides one gcra check a decision over 1,000 client keys, on a limit
// never reached that writes its key. Metrics: decisions/s (the capacity),
// redis-cpu-µs/decision (INFO cpu of every server over the run, divided by
// the decisions: what a decision costs a saturated server), and
// decisions/pipeline (the batches saturation makes). Compare cluster-3 with
// standalone in the same run: about 3 × the decisions, at about the same
// CPU a decision. make bench runs it (bench/README.md).
//
//	go test -run '^$' -bench BenchmarkRedisCapacity -benchtime 3s -count 3 ./limiter/redislimit/
func BenchmarkRedisCapacity(b *testing.B) {
	for _, target := range []struct {
		name  string
		start func(b *testing.B) ([]*redistest.Server, redis.UniversalClient)
	}{
		{"standalone", func(b *testing.B) ([]*redistest.Server, redis.UniversalClient) {
			s := redistest.Start(b)
			return []*redistest.Server{s}, newTestClient(b, time.Second, s.Addr())
		}},
		{"cluster-3", func(b *testing.B) ([]*redistest.Server, redis.UniversalClient) {
			c := redistest.StartCluster(b)
			return c.Servers, newTestClient(b, time.Second, c.Addrs()...)
		}},
	} {
		servers, client := target.start(b)
		cpu := lastCPU(b)
		for _, s := range servers {
			if err := s.PinCPU(cpu); err != nil {
				b.Fatal(err)
			}
			if err := s.LimitCPU(capQuota, capPeriod); err != nil {
				b.Skipf("cannot cap redis-server's CPU here, so cannot saturate it: %v", err)
			}
		}
		// The deadline is generous: a capped server answers late by design,
		// and a decision past it would leave the count of what Redis decided.
		r := newTestRedis(b, client, Config{Timeout: 2 * time.Second})
		e := newTestEngine(b, r)
		b.Run(target.name, func(b *testing.B) {
			benchCapacity(b, e, r, servers)
		})
	}
}

// lastCPU is the highest-numbered CPU this process may run on.
func lastCPU(b *testing.B) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		b.Fatalf("reading this process's CPUs: %v", err)
	}
	for cpu := len(set)*64 - 1; cpu >= 0; cpu-- {
		if set.IsSet(cpu) {
			return cpu
		}
	}
	b.Fatal("this process may run on no CPU")
	return 0
}

// benchCapacity floods e with gcra decisions from DefaultPipelines × maxBatch
// goroutines and reports what the servers spent on them.
func benchCapacity(b *testing.B, e *limiter.Engine, r *Limiter, servers []*redistest.Server) {
	rule := policy("cap-gcra", limiter.GCRA)
	limit := limiter.Limit{Rate: 1_000_000, Period: time.Hour}
	cpu := func() (d time.Duration) {
		for _, s := range servers {
			d += redistest.CPU(b, s.Addr())
		}
		return d
	}
	before, pipes, decided := cpu(), r.Stats().Pipelines, r.Stats().RoundTrips
	start := time.Now()
	b.SetParallelism(DefaultPipelines * maxBatch / runtime.GOMAXPROCS(0))
	b.RunParallel(func(pb *testing.PB) {
		checks := []limiter.Check{{Rule: rule, Limit: limit}}
		for i := rand.IntN(1000); pb.Next(); i++ {
			checks[0].Key = strconv.Itoa(i % 1000)
			v, err := e.Decide(context.Background(), checks)
			if err != nil || !v.Allowed || v.Decisions[0].Reason != limiter.ReasonNone {
				b.Errorf("a decision not made by Redis: %v, %+v", err, v.Decisions)
				return
			}
		}
	})
	elapsed, used := time.Since(start), cpu()-before
	st := r.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(used.Nanoseconds())/1e3/float64(b.N), "redis-cpu-µs/decision")
	b.ReportMetric(float64(st.RoundTrips-decided)/float64(max(1, st.Pipelines-pipes)), "decisions/pipeline")
}
