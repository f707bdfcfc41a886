package redislimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/limiter"
)

// 200 concurrent calls while the first pipeline is held: every command is
// sent exactly once, every call returns with its reply, no more than max
// pipelines are ever in flight, and the waiting calls share pipelines.
func TestCoalescerSendsEveryCallOnceInSharedPipelines(t *testing.T) {
	const calls, max = 200, 2
	hold := make(chan struct{})
	var inFlight, peak, pipelines atomic.Int64
	var first sync.Once
	sent := sync.Map{}
	co := newCoalescer(max, func(ctx context.Context, cmds []*redis.Cmd) {
		n := inFlight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		pipelines.Add(1)
		first.Do(func() { <-hold })
		for _, c := range cmds {
			if _, dup := sent.LoadOrStore(c, true); dup {
				t.Errorf("command %v sent twice", c.Args())
			}
			c.SetVal(c.Args()[1])
		}
		inFlight.Add(-1)
	})
	var wg sync.WaitGroup
	var queued atomic.Int64
	for i := range calls {
		wg.Go(func() {
			cmd := redis.NewCmd(context.Background(), "echo", i)
			queued.Add(1)
			co.do(context.Background(), []*redis.Cmd{cmd})
			if v, err := cmd.Result(); err != nil || v != i {
				t.Errorf("call %d: reply %v, %v", i, v, err)
			}
		})
	}
	// Let the calls pile up behind the held pipeline, then release it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		co.mu.Lock()
		waiting := len(co.queue)
		co.mu.Unlock()
		if waiting >= calls-max || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	close(hold)
	wg.Wait()
	if peak.Load() > max {
		t.Fatalf("%d pipelines in flight at once, want at most %d", peak.Load(), max)
	}
	if p := pipelines.Load(); p >= calls/10 {
		t.Fatalf("%d pipelines for %d calls, want them shared (under %d)", p, calls, calls/10)
	}
	t.Logf("%d calls in %d pipelines, at most %d at once", calls, pipelines.Load(), peak.Load())
}

// On a real Redis, 64 goroutines deciding one gcra key at once: every
// decision is right (admitted exactly the burst), and the decisions shared
// pipelines (fewer pipelines than round trips).
func TestPipelinesGatherConcurrentDecisions(t *testing.T) {
	s := redistest.Start(t)
	r := newTestRedis(t, newTestClient(t, 2*time.Second, s.Addr()), Config{Timeout: 2 * time.Second})
	e := newTestEngine(t, r)
	rule := &limiter.Rule{Name: "gathered", Algorithm: limiter.GCRA}
	lim := limiter.Limit{Rate: 100, Period: time.Hour, Burst: 100}
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 64 {
		wg.Go(func() {
			for range 10 {
				v, err := e.Decide(context.Background(), []limiter.Check{{Rule: rule, Limit: lim, Key: "k"}})
				if err != nil {
					t.Error(err)
					return
				}
				if v.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st := r.Stats()
	if admitted.Load() != 100 {
		t.Fatalf("admitted %d of 640, want exactly the burst of 100", admitted.Load())
	}
	if st.Pipelines >= st.RoundTrips {
		t.Fatalf("pipelines %d for %d round trips: want them shared", st.Pipelines, st.RoundTrips)
	}
	t.Logf("640 decisions: %d round trips in %d pipelines, %d denied from the cache", st.RoundTrips, st.Pipelines, st.DenialCacheHits)
}
