package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/redislock"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// A job that runs for several TTLs keeps its lock: the watchdog renews it
// every ttl/3, and every other acquirer keeps getting ErrNotAcquired. After
// Release the watchdog is gone and the lock is free at once.
func TestWatchdogKeepsLongJobAlive(t *testing.T) {
	s := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer client.Close()
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("ping: %v", err)
	}
	before := goleak.IgnoreCurrent() // the client's own goroutines
	l, err := redislock.New(client, redislock.Config{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	const ttl = 150 * time.Millisecond
	job := mustAcquire(t, l, "cron:nightly", ttl)

	const held = 5 * ttl
	start := time.Now()
	attempts := 0
	for time.Since(start) < held {
		wantNotAcquired(t, l, "cron:nightly")
		attempts++
		if err := job.Context().Err(); err != nil {
			t.Fatalf("job's Context after %s: got %v (cause %v), want alive", time.Since(start), err, context.Cause(job.Context()))
		}
		time.Sleep(ttl / 6) // pacing the other acquirer, not ordering
	}
	t.Logf("held %s (%d TTLs), %d rival attempts refused", time.Since(start).Round(time.Millisecond), held/ttl, attempts)

	if err := job.Release(context.Background()); err != nil {
		t.Fatalf("Release after %s: got %v, want nil (the watchdog kept the lock)", held, err)
	}
	if cause := context.Cause(job.Context()); !errors.Is(cause, redislock.ErrReleased) {
		t.Fatalf("job's Context cause after Release: got %v, want ErrReleased", cause)
	}
	goleak.VerifyNone(t, before) // Release stopped the watchdog and waited for it
	next := mustAcquire(t, l, "cron:nightly", ttl)
	if next.Fence() <= job.Fence() {
		t.Fatalf("fence: got %d after %d, want larger", next.Fence(), job.Fence())
	}
}

// When the context given to Acquire ends, the watchdog stops renewing and
// returns; the lock then expires by itself.
func TestWatchdogStopsWithParentContext(t *testing.T) {
	_, _, l := newLocker(t, redislock.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	lk, err := l.Acquire(ctx, "cron:hourly", 30*time.Millisecond)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	cancel()
	<-lk.Context().Done()
	// No renewal keeps the key alive any more: another holder gets it.
	acquireAfterExpiry(t, l, "cron:hourly", time.Second)
	if err := lk.Release(context.Background()); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("Release: got %v, want ErrNotHeld", err)
	}
}

// A lost lock cancels its holder's Context with ErrLost: the key deleted
// behind its back (the watchdog's renewal finds no token), or Redis paused
// (SIGSTOP) past the TTL, so renewals keep failing until the lock must be
// presumed expired.
func TestLostLockCancelsContext(t *testing.T) {
	tests := []struct {
		name string
		lose func(t *testing.T, s *redistest.Server) (resume func())
	}{
		{"key deleted", func(t *testing.T, s *redistest.Server) func() {
			if _, err := s.Do("FLUSHALL"); err != nil {
				t.Fatalf("FLUSHALL: %v", err)
			}
			return func() {}
		}},
		{"redis paused past the ttl", func(t *testing.T, s *redistest.Server) func() {
			s.Stop()
			return s.Cont
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, l := newLocker(t, redislock.Config{Timeout: 200 * time.Millisecond})
			const ttl = 60 * time.Millisecond
			lk := mustAcquire(t, l, "stream:7", ttl)
			lostAt := time.Now()
			resume := tc.lose(t, s)
			select {
			case <-lk.Context().Done():
			case <-time.After(5 * time.Second):
				resume()
				t.Fatalf("Context still alive 5s after the lock was lost, want cancelled")
			}
			took := time.Since(lostAt)
			resume()
			if cause := context.Cause(lk.Context()); !errors.Is(cause, redislock.ErrLost) {
				t.Fatalf("Context cause: got %v, want ErrLost", cause)
			}
			t.Logf("lost lock noticed after %s (ttl %s): %v", took.Round(time.Millisecond), ttl, context.Cause(lk.Context()))
			// Renewals sent while Redis was paused may still run when it
			// resumes, so the key may outlive the holder's notice by up to a
			// ttl: liveness, not safety. Once it is gone, a new holder takes
			// it and the old holder's Release leaves it in place.
			next := acquireAfterExpiry(t, l, "stream:7", time.Second)
			if err := lk.Release(context.Background()); !errors.Is(err, redislock.ErrNotHeld) {
				t.Fatalf("Release: got %v, want ErrNotHeld", err)
			}
			if err := next.Release(context.Background()); err != nil {
				t.Fatalf("next holder's Release: got %v, want nil", err)
			}
		})
	}
}
