package redislimit

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/limiter/internal/shardmap"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
)

func TestDenialCacheAtFixedInstants(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lim := limiter.Limit{Rate: 10, Period: time.Second}
	k := denialKey{policy: "p", limit: lim, key: digestKey("client")}
	other := denialKey{policy: "p", limit: lim, key: digestKey("other")}
	otherLimit := denialKey{policy: "p", limit: limiter.Limit{Rate: 20, Period: time.Second}, key: digestKey("client")}

	c := newDenialCache(0)
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
	c := newDenialCache(size)
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
	c := newDenialCache(1000)
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
