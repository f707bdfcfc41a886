package redislock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/redislock"
)

// maxSafeInteger is 2^53 - 1, the largest integer a JavaScript number holds
// exactly; fences must stay at or below it.
const maxSafeInteger = 1<<53 - 1

// fenceLog checks fences as an upstream would see them: every fence must
// be larger than all fences handed out before its Acquire began (no repeat,
// no step back), whatever happened to Redis in between.
type fenceLog struct {
	mu     sync.Mutex
	newest int64
	all    []int64
	bad    []string
}

// begin returns the newest fence handed out so far.
func (f *fenceLog) begin() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.newest
}

// got records fence, drawn by an Acquire that began when newestBefore was
// the newest.
func (f *fenceLog) got(fence, newestBefore int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fence <= newestBefore || fence > maxSafeInteger {
		f.bad = append(f.bad, strconv.FormatInt(fence, 10)+" after "+strconv.FormatInt(newestBefore, 10))
	}
	f.newest = max(f.newest, fence)
	f.all = append(f.all, fence)
}

// 40 duplicates wait on one resource, taking and releasing it in turn, and
// Redis (no RDB, no AOF) is killed and restarted in the middle: the counter
// is gone, yet no fence repeats and none is smaller than one handed out
// before.
func TestFenceSurvivesRedisRestart(t *testing.T) {
	s, _, l := newLocker(t, redislock.Config{ManualRenewal: true})
	const (
		duplicates = 40
		restartAt  = 600 * time.Millisecond
		// The flood goes on for at least minFlood and until minAfter
		// acquisitions followed the restart (a loaded machine is slow to
		// get there), and never past maxFlood.
		minFlood = 1500 * time.Millisecond
		minAfter = 20
		maxFlood = 20 * time.Second
	)
	var (
		log       fenceLog
		errMu     sync.Mutex
		errs      int
		lastErr   error
		after     atomic.Int64 // acquisitions that began after the restart
		restarted atomic.Bool
	)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), maxFlood)
	defer cancel()
	done := func() bool {
		return ctx.Err() != nil || time.Since(start) >= minFlood && after.Load() >= minAfter
	}
	var wg sync.WaitGroup
	for range duplicates {
		wg.Go(func() {
			for !done() {
				before, late := log.begin(), restarted.Load()
				lk, err := l.Acquire(ctx, "payment:42", 5*time.Second)
				switch {
				case errors.Is(err, redislock.ErrNotAcquired):
					continue
				case err != nil:
					errMu.Lock()
					errs, lastErr = errs+1, err
					errMu.Unlock()
					continue
				}
				log.got(lk.Fence(), before)
				if late {
					after.Add(1)
				}
				_ = lk.Release(context.Background())
			}
		})
	}
	select {
	case <-time.After(restartAt):
	case <-ctx.Done():
	}
	s.Restart()
	restarted.Store(true)
	wg.Wait()

	if len(log.bad) > 0 {
		t.Fatalf("%d fences repeated or went back (of %d), first: %s", len(log.bad), len(log.all), log.bad[0])
	}
	sorted := slices.Clone(log.all)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			t.Fatalf("fence %d handed out twice", sorted[i])
		}
	}
	if after.Load() < minAfter {
		t.Fatalf("got %d acquisitions, %d after the restart within %s; want the flood to go on across it (%d after)",
			len(log.all), after.Load(), maxFlood, minAfter)
	}
	t.Logf("%d acquisitions in %s, %d after the restart, %d errors (last: %v), fences %d..%d",
		len(log.all), time.Since(start).Round(time.Millisecond), after.Load(), errs, lastErr, sorted[0], sorted[len(sorted)-1])
}

// A counter left by the INCR-only script (a small count) is passed at once,
// an instance still running that script keeps counting up from the new
// value, and the counter is stored as a plain integer that INCR accepts.
func TestFenceUpgradeFromCounter(t *testing.T) {
	_, client, l := newLocker(t, redislock.Config{ManualRenewal: true})
	ctx := context.Background()
	_, fenceKey := redislock.Keys("invoice:7")
	if err := client.Set(ctx, fenceKey, 41, 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	first := mustAcquire(t, l, "invoice:7", time.Second)
	if first.Fence() <= 41 || first.Fence() > maxSafeInteger {
		t.Fatalf("fence after an old counter of 41: got %d, want in (41, 2^53)", first.Fence())
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// An instance on the old script: INCR of the same counter.
	old, err := client.Incr(ctx, fenceKey).Result()
	if err != nil {
		t.Fatalf("INCR of the new counter (old instance): %v", err)
	}
	if old != first.Fence()+1 {
		t.Fatalf("old instance's INCR: got %d, want %d", old, first.Fence()+1)
	}
	second := mustAcquire(t, l, "invoice:7", time.Second)
	if second.Fence() <= old {
		t.Fatalf("fence after the old instance's %d: got %d, want larger", old, second.Fence())
	}
}

// A counter that is not a number, or that reached 2^53, is an error that
// leaves no lock behind.
func TestFenceCounterOutOfRange(t *testing.T) {
	tests := []struct{ name, value string }{
		{"not a number", "abc"},
		{"negative", "-5"},
		{"at 2^53 - 1", strconv.FormatInt(maxSafeInteger, 10)},
		{"past 2^53", "9007199254740993"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, l := newLocker(t, redislock.Config{ManualRenewal: true})
			lockKey, fenceKey := redislock.Keys("r")
			if _, err := s.Do("SET", fenceKey, tc.value); err != nil {
				t.Fatalf("SET: %v", err)
			}
			lk, err := l.Acquire(context.Background(), "r", time.Second)
			if err == nil {
				_ = lk.Release(context.Background())
				t.Fatalf("Acquire with counter %s: got fence %d, want an error", tc.value, lk.Fence())
			}
			if v, _ := s.Do("EXISTS", lockKey); v != "0" {
				t.Fatalf("lock key after the error: EXISTS %s, want 0", v)
			}
		})
	}
}
