package limiter

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A decision may carry an instant taken before it waited for the bucket
// (another goroutine's later instant got there first). Time must never run
// backwards for a bucket: a stale instant is read as the latest one seen.
func TestLocalStaleInstantGrantsNothingTwice(t *testing.T) {
	l := NewLocal(0)
	lim := Limit{Rate: 1, Period: time.Second, Burst: 1}
	steps := []struct {
		t  time.Duration
		ok bool
	}{
		{0, true},                        // the burst
		{time.Second, true},              // one token refilled
		{500 * time.Millisecond, false},  // a late, stale instant: nothing is there
		{1500 * time.Millisecond, false}, // half a token since 1s, not one since 500ms
		{2 * time.Second, true},
	}
	for i, s := range steps {
		d, _ := l.Reserve(at(s.t), BucketGroup{Policy: "p", Limit: lim}, "k", 1)
		if d.Allowed != s.ok {
			t.Fatalf("step %d at %v: got allowed=%v, want %v", i, s.t, d.Allowed, s.ok)
		}
	}
}

// Denied requests on an empty bucket must not push each other's retry time
// out: with 10 per minute, no denial can ask for more than 6s.
func TestLocalConcurrentDenialsRetryAtMostOneEmission(t *testing.T) {
	l := NewLocal(0)
	lim := Limit{Rate: 10, Period: time.Minute, Burst: 10}
	for range 10 {
		if d, _ := l.Reserve(t0, BucketGroup{Policy: "p", Limit: lim}, "k", 1); !d.Allowed {
			t.Fatal("burst: got denied, want allowed")
		}
	}
	var worst atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				now := at(time.Duration(g*200+i) * time.Microsecond)
				d, _ := l.Reserve(now, BucketGroup{Policy: "p", Limit: lim}, "k", 1)
				if d.Allowed {
					t.Errorf("got a request admitted 13ms after the burst, want none")
					return
				}
				for r := int64(d.RetryAfter); ; {
					old := worst.Load()
					if r <= old || worst.CompareAndSwap(old, r) {
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	if got := time.Duration(worst.Load()); got > 6*time.Second {
		t.Fatalf("got a retry of %v, want at most 6s (one token at 10 per minute)", got)
	}
}

// Many goroutines deciding on one key through the Engine, each reading the
// real clock: what passes never exceeds rate × elapsed + burst, and a flood
// gets nearly all of it.
func TestEngineLocalBucketHoldsUnderConcurrency(t *testing.T) {
	e, err := NewEngine(time.Now, NewLocal(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim := Limit{Rate: 200, Period: time.Second, Burst: 20}
	checks := []Check{{Rule: &Rule{Name: "p"}, Limit: lim, Key: "one"}}
	var admitted, last atomic.Int64 // last: the latest end of a decision, in ns since start
	start := time.Now()
	deadline := start.Add(time.Second)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1_000_000 && time.Now().Before(deadline); i++ {
				v, err := e.Decide(context.Background(), checks)
				if err != nil {
					t.Error(err)
					return
				}
				if v.Allowed {
					admitted.Add(1)
				}
				for end, old := int64(time.Since(start)), last.Load(); end > old && !last.CompareAndSwap(old, end); old = last.Load() {
				}
			}
		}()
	}
	wg.Wait()
	// The decisions' own span: a loaded machine's wait for 64 goroutines to
	// see the deadline and return is no time the bucket could admit in.
	elapsed := time.Duration(last.Load())
	bound := float64(lim.Rate)*elapsed.Seconds() + float64(lim.Burst)
	got := float64(admitted.Load())
	t.Logf("admitted %.0f in %v, bound %.1f", got, elapsed.Round(time.Millisecond), bound)
	if got > bound {
		t.Fatalf("got %.0f admitted, want at most rate × elapsed + burst = %.1f", got, bound)
	}
	if got < 0.95*bound-1 {
		t.Fatalf("got %.0f admitted, want at least 95%% of %.1f", got, bound)
	}
}
