package topk

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/clocktest"
	"github.com/ratelimit-gateway/gateway/internal/heaptest"
)

// newClock is a settable instant, safe for concurrent use.
func newClock() *clocktest.Clock { return clocktest.New(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)) }

func newSet(t testing.TB, cfg Config, c *clocktest.Clock) *Set {
	t.Helper()
	s, err := New(cfg, c.Now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHotKeysFoundAmongColdOnes floods one policy from 64 goroutines with
// three hot keys (5 %, 4 % and 3 % of the refusals) among 200,000 distinct
// cold ones. The three come out on top, in order, each count within its
// error of the truth, and the Set holds no more keys than its fixed bound.
func TestHotKeysFoundAmongColdOnes(t *testing.T) {
	c := newClock()
	s := newSet(t, Config{}, c)
	hot := []string{"tenant-a", "tenant-b", "tenant-c"}
	share := []int{50, 40, 30} // per mille
	const workers, each = 64, 5000
	var want [3]atomic.Uint64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range each {
				r := rng.IntN(1000)
				switch {
				case r < share[0]:
					s.Refused("per-tenant", hot[0])
					want[0].Add(1)
				case r < share[0]+share[1]:
					s.Refused("per-tenant", hot[1])
					want[1].Add(1)
				case r < share[0]+share[1]+share[2]:
					s.Refused("per-tenant", hot[2])
					want[2].Add(1)
				default:
					s.Refused("per-tenant", fmt.Sprintf("cold-%d-%d", w, i))
				}
			}
		}()
	}
	wg.Wait()
	top := s.Top("per-tenant")
	if len(top) != s.K() {
		t.Fatalf("got %d entries, want K=%d", len(top), s.K())
	}
	for i, key := range hot {
		e := top[i]
		if e.Key != key {
			t.Fatalf("top[%d]: got %q (%d), want %q; top: %v", i, e.Key, e.Count, key, top[:5])
		}
		if truth := want[i].Load(); e.Count < truth || e.Count-e.Error > truth {
			t.Errorf("%s: got count %d error %d, want the true %d within [count-error, count]", key, e.Count, e.Error, truth)
		}
	}
	cfg := s.cfg
	if bound := cfg.Shards * cfg.Windows * cfg.K; s.Keys() > bound {
		t.Errorf("keys held: got %d, want at most %d", s.Keys(), bound)
	}
}

// TestMemoryIsFlat: after the summaries are full, another 300,000 distinct
// keys leave the Set's key count and the live heap where they were.
func TestMemoryIsFlat(t *testing.T) {
	c := newClock()
	s := newSet(t, Config{}, c)
	flood := func(from, n int) {
		for i := from; i < from+n; i++ {
			s.Refused("per-ip", fmt.Sprintf("203.0.%d.%d/32", i>>8&0xff, i&0xff)+fmt.Sprint(i))
		}
	}
	flood(0, 100_000)
	keys := s.Keys()
	before := heaptest.Live()
	flood(100_000, 300_000)
	after := heaptest.Live()
	if got := s.Keys(); got != keys {
		t.Errorf("keys held: got %d after 300,000 more keys, want %d as before", got, keys)
	}
	// The keys kept are replaced, not added: what grows is at most a
	// summary's worth of key strings, never the flood.
	if after > before+256<<10 {
		t.Errorf("live heap: got %d bytes after 300,000 more keys, want at most %d (+256 KiB)", after, before)
	}
	runtime.KeepAlive(s)
}

// TestWindowsRotate: counts cover the last Windows windows; a key refused
// long ago drops out, window by window, at fixed instants.
func TestWindowsRotate(t *testing.T) {
	c := newClock()
	s := newSet(t, Config{Window: time.Minute, Windows: 3}, c)
	for range 5 {
		s.Refused("p", "old")
	}
	c.Advance(time.Minute)
	for range 2 {
		s.Refused("p", "old")
		s.Refused("p", "new")
	}
	tests := []struct {
		after    time.Duration
		old, new uint64
	}{
		{0, 7, 2},
		{time.Minute, 7, 2},      // windows 0, 1, 2: all of it
		{time.Minute, 2, 2},      // window 0 has gone
		{time.Minute, 0, 0},      // both gone
		{59 * time.Minute, 0, 0}, // stale windows are never read back
	}
	for i, tt := range tests {
		c.Advance(tt.after)
		got := map[string]uint64{}
		for _, e := range s.Top("p") {
			got[e.Key] = e.Count
		}
		if got["old"] != tt.old || got["new"] != tt.new {
			t.Errorf("step %d: got old=%d new=%d, want old=%d new=%d", i, got["old"], got["new"], tt.old, tt.new)
		}
	}
	// A reused window starts empty.
	s.Refused("p", "again")
	if top := s.Top("p"); len(top) != 1 || top[0].Key != "again" || top[0].Count != 1 {
		t.Errorf("after rotation: got %v, want [again 1]", top)
	}
}

// TestSummaryIsExactUntilFull: with fewer distinct keys than K the counts
// are exact (no error); past it the smallest is replaced and the newcomer
// inherits its count as error.
func TestSummaryIsExactUntilFull(t *testing.T) {
	s := newSummary(3)
	for i, k := range []string{"a", "b", "a", "c", "a", "b"} {
		_ = i
		s.add(k)
	}
	got := map[string]item{}
	for _, it := range s.items {
		got[it.key] = it
	}
	if got["a"].count != 3 || got["b"].count != 2 || got["c"].count != 1 || got["a"].err+got["b"].err+got["c"].err != 0 {
		t.Fatalf("got %v, want a=3 b=2 c=1 without error", got)
	}
	s.add("d") // replaces c (1): d = 2 with error 1
	got = map[string]item{}
	for _, it := range s.items {
		got[it.key] = it
	}
	if _, ok := got["c"]; ok || got["d"].count != 2 || got["d"].err != 1 {
		t.Errorf("after d: got %v, want c replaced by d=2 (error 1)", got)
	}
}

// TestPoliciesBoundedAndRetained: past MaxPolicies nothing new is tracked;
// Retain drops what a reload removed.
func TestPoliciesBoundedAndRetained(t *testing.T) {
	s := newSet(t, Config{MaxPolicies: 2}, newClock())
	s.Refused("a", "k")
	s.Refused("b", "k")
	s.Refused("c", "k")
	if got := s.Policies(); fmt.Sprint(got) != "[a b]" {
		t.Errorf("policies: got %v, want [a b]", got)
	}
	s.Retain(func(p string) bool { return p == "b" })
	if got := s.Policies(); fmt.Sprint(got) != "[b]" {
		t.Errorf("after Retain: got %v, want [b]", got)
	}
	if s.Top("a") != nil {
		t.Errorf("Top of a dropped policy: got %v, want nil", s.Top("a"))
	}
}

func TestNewNeedsAClock(t *testing.T) {
	if _, err := New(Config{}, nil); err == nil {
		t.Error("New(nil clock): got no error, want one")
	}
}

// BenchmarkRefused is the hook's own cost on a refused request: a hot key
// (kept) and a stream of distinct keys (each replaces the smallest).
func BenchmarkRefused(b *testing.B) {
	s, _ := New(Config{}, time.Now)
	b.Run("hot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Refused("p", "203.0.113.7/32")
		}
	})
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("198.51.%d.%d/32", i>>8, i&0xff)
	}
	b.Run("spray", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s.Refused("p", keys[i%len(keys)])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(len(keys))
			for pb.Next() {
				s.Refused("p", keys[i%len(keys)])
				i++
			}
		})
	})
}
