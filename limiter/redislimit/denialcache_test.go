package redislimit

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/internal/shardmap"

	"github.com/ratelimit-gateway/gateway/internal/heaptest"
	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

func TestDenialCacheAtFixedInstants(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lim := limiter.Limit{Rate: 10, Period: time.Second}
	k := denialKey{policy: "p", limit: lim, key: digestKey("client")}
	other := denialKey{policy: "p", limit: lim, key: digestKey("other")}
	otherLimit := denialKey{policy: "p", limit: limiter.Limit{Rate: 20, Period: time.Second}, key: digestKey("client")}

	c := newDenialCache(0, testRefresh)
	c.put(k, 2, at(0), at(100), at(500)) // denied at cost 2 until 100ms

	steps := []struct {
		name    string
		key     denialKey
		cost    int64
		now     time.Time
		wantHit bool
	}{
		{"same cost, before until", k, 2, at(50), true},
		{"dearer request is covered", k, 5, at(50), true},
		{"cheaper request may fit: ask redis", k, 1, at(50), false},
		{"other key", other, 2, at(50), false},
		{"same key under a changed limit", otherLimit, 2, at(50), false},
		{"just before until", k, 2, at(99), true},
		{"at until: expired", k, 2, at(100), false},
		{"expired entry was dropped", k, 2, at(50), false},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			d, hit := c.get(st.key, st.cost, st.now)
			if hit != st.wantHit {
				t.Fatalf("got hit=%v, want %v", hit, st.wantHit)
			}
			if hit && (d.until != at(100).UnixNano() || d.resetAt != at(500).UnixNano()) {
				t.Fatalf("got until %d reset %d, want %d and %d", d.until, d.resetAt, at(100).UnixNano(), at(500).UnixNano())
			}
		})
	}
	if n := c.len(); n != 0 {
		t.Fatalf("after expiry: got %d entries, want 0", n)
	}

	t.Run("an until in the past is not stored", func(t *testing.T) {
		c.put(k, 1, at(200), at(200), at(300))
		if _, hit := c.get(k, 1, at(200)); hit {
			t.Fatal("got hit, want none")
		}
	})
	t.Run("a denial longer than its trust is refreshed by one request", func(t *testing.T) {
		c := newDenialCache(0, testRefresh)
		c.put(k, 1, at(0), at(60_000), at(60_000)) // denied for a minute: trusted for a second
		for _, st := range []struct {
			name string
			now  int
			hit  bool
		}{
			{"trusted", 999, true},
			{"trust over: this request asks redis", 1000, false},
			{"the others answer from it meanwhile", 1030, true},
			{"no answer within the refresh window: another request asks", 1050, false},
			{"and the others answer from it meanwhile", 1051, true},
			{"nobody asked for a whole window: dropped", 1200, false},
			{"dropped", 1201, false},
		} {
			if _, hit := c.get(k, 1, at(st.now)); hit != st.hit {
				t.Fatalf("%s: hit %v, want %v", st.name, hit, st.hit)
			}
		}
	})
	t.Run("a wider entry is not narrowed", func(t *testing.T) {
		c.put(k, 1, at(0), at(300), at(300))
		c.put(k, 3, at(10), at(200), at(200)) // a concurrent, narrower denial
		if _, hit := c.get(k, 1, at(250)); !hit {
			t.Fatal("cost 1 at 250ms: got miss, want the wider entry kept")
		}
	})
}

func TestDenialCacheIsBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const size = 640 // 10 per shard
	c := newDenialCache(size, testRefresh)
	lim := limiter.Limit{Rate: 1, Period: time.Minute}
	// A flood of distinct denied keys, all live.
	for i := 0; i < 20*size; i++ {
		k := denialKey{policy: "p", limit: lim, key: digestKey(strconv.Itoa(i))}
		c.put(k, 1, t0, t0.Add(time.Minute), t0.Add(time.Minute))
	}
	if n := c.len(); n > size {
		t.Fatalf("got %d entries, want at most %d", n, size)
	}
	// Later, all have expired: new entries sweep them instead of evicting.
	later := t0.Add(2 * time.Minute)
	for i := 0; i < shardmap.Shards*2; i++ {
		k := denialKey{policy: "q", limit: lim, key: digestKey("new" + strconv.Itoa(i))}
		c.put(k, 1, later, later.Add(time.Minute), later.Add(time.Minute))
	}
	if n := c.len(); n > size/2 {
		t.Fatalf("after expiry and new inserts: got %d entries, want the expired ones swept (at most %d)", n, size/2)
	}
}

func TestDenialCacheConcurrentUse(t *testing.T) {
	c := newDenialCache(1000, testRefresh)
	now := time.Now()
	lim := limiter.Limit{Rate: 1, Period: time.Second}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				k := denialKey{policy: "p", limit: lim, key: digestKey(strconv.Itoa((g * i) % 3000))}
				c.put(k, 1, now, now.Add(time.Second), now.Add(time.Second))
				c.get(k, 1, now)
			}
		}()
	}
	wg.Wait()
	if n := c.len(); n > 1000+shardmap.Shards {
		t.Fatalf("got %d entries, want at most about 1000", n)
	}
}

// One client hammers one key far over its limit: the denial cache answers
// almost all denials without asking Redis.
func TestDenialCacheCutsRedisCalls(t *testing.T) {
	s := redistest.Start(t)
	c := newTestClient(t, semanticsTimeout, s.Addr())
	for _, alg := range []limiter.Algorithm{limiter.GCRA, limiter.SlidingWindow, limiter.FixedWindow} {
		t.Run(string(alg), func(t *testing.T) {
			r := newTestRedis(t, c, Config{})
			chk := limiter.Check{Rule: policy("hammered-"+string(alg), alg), Limit: limiter.Limit{Rate: 5, Period: time.Hour}, Key: "one-client"}
			avoidWindowEdge(t, c, time.Hour, 5*time.Second)
			redistest.ResetStats(t, s.Addr())
			const requests = 1000
			var admitted, denied, cached int
			for i := 0; i < requests; i++ {
				d := decideOne(t, r, chk)
				switch {
				case d.Allowed:
					admitted++
				case d.Reason == limiter.ReasonDenialCached:
					denied++
					cached++
					if d.RetryAfter <= 0 || d.RetryAfter > time.Hour {
						t.Fatalf("cached denial: got retry after %s, want in (0, 1h]", d.RetryAfter)
					}
				default:
					denied++
				}
			}
			calls := redistest.CommandCount(t, s.Addr(), "evalsha", "eval")
			perDenied := float64(calls-int64(admitted)) / float64(denied)
			t.Logf("%s: %d requests, %d admitted (limit 5), %d denied (%d from the cache); %d script calls in all, %.4f redis calls per denied request (%.4f counting every call)",
				alg, requests, admitted, denied, cached, calls, perDenied, float64(calls)/float64(denied))
			if admitted != 5 {
				t.Fatalf("got %d admitted, want 5", admitted)
			}
			if perDenied > 0.1 {
				t.Fatalf("got %.3f redis calls per denied request, want at most 0.1", perDenied)
			}
		})
	}
}

// testRefresh is the denial caches' refresh window in these tests.
const testRefresh = 50 * time.Millisecond

// 64 goroutines flooding one denied key for 2.2 s: when the cache stops
// trusting the denial (each second), one request asks Redis again while the
// others answer from it, so Redis sees about one call per second, not one
// per waiting goroutine.
func TestDenialCacheRefreshedByOneRequest(t *testing.T) {
	s := redistest.Start(t)
	r := newTestRedis(t, newTestClient(t, 2*time.Second, s.Addr()), Config{Timeout: 200 * time.Millisecond})
	e := newTestEngine(t, r)
	check := limiter.Check{Rule: &limiter.Rule{Name: "flooded", Algorithm: limiter.GCRA}, Limit: limiter.Limit{Rate: 1, Period: time.Hour, Burst: 1}, Key: "k"}
	if v, err := e.Decide(context.Background(), []limiter.Check{check}); err != nil || !v.Allowed {
		t.Fatalf("first: %+v %v", v, err)
	}
	// The denial Redis gives next is what the cache remembers.
	if v, err := e.Decide(context.Background(), []limiter.Check{check}); err != nil || v.Allowed {
		t.Fatalf("second: %+v %v, want denied", v, err)
	}
	before := r.Stats().RoundTrips
	stop := time.Now().Add(2200 * time.Millisecond)
	var wg sync.WaitGroup
	var admitted, denied atomic.Int64
	for range 64 {
		wg.Go(func() {
			for n := 0; n < 1_000_000 && time.Now().Before(stop); n++ {
				v, err := e.Decide(context.Background(), []limiter.Check{check})
				switch {
				case err != nil:
					t.Error(err)
					return
				case v.Allowed:
					admitted.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	trips := r.Stats().RoundTrips - before
	t.Logf("64 goroutines, 2.2s: %d denied, %d admitted, %d round trips", denied.Load(), admitted.Load(), trips)
	if admitted.Load() != 0 {
		t.Fatalf("admitted %d on an exhausted key", admitted.Load())
	}
	if trips > 6 {
		t.Fatalf("%d round trips in 2.2s, want about one per second (at most 6)", trips)
	}
}

// What the denial cache costs at its default cap, for docs/memory.md: the
// live heap of 100,000 denials, per entry.
func TestDenialCacheBytesAtTheCap(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lim := limiter.Limit{Rate: 1, Period: time.Minute}
	keys := make([]denialKey, DefaultDenialCacheSize)
	for i := range keys {
		keys[i] = denialKey{policy: "p", limit: lim, key: digestKey(strconv.Itoa(i))}
	}
	before := heaptest.Live()
	c := newDenialCache(DefaultDenialCacheSize, testRefresh)
	for _, k := range keys {
		c.put(k, 1, t0, t0.Add(time.Minute), t0.Add(time.Minute))
	}
	after := heaptest.Live()
	n := c.len() // each shard holds its share of the cap: a few fill first
	if n < DefaultDenialCacheSize*9/10 || n > DefaultDenialCacheSize {
		t.Fatalf("got %d entries, want nearly %d", n, DefaultDenialCacheSize)
	}
	per := float64(after-before) / float64(n)
	t.Logf("%d denials: %.1f MiB of live heap, %.0f bytes each", n, float64(after-before)/(1<<20), per)
	if per > 256 {
		t.Fatalf("got %.0f bytes a denial, want at most 256 (docs/memory.md)", per)
	}
	runtime.KeepAlive(c)
}
