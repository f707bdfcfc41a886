package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/redislock"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// redisAddr is a real redis-server for the examples, started by TestMain.
var redisAddr string

func TestMain(m *testing.M) {
	code := redistest.RunWithServer(m, &redisAddr)
	if code == 0 {
		// Every client is closed and every lock released by now: any
		// goroutine left is a watchdog nobody stopped.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newLocker starts a redis-server and returns it with a Locker on it and
// the Locker's client (closed when the test ends), which the test may read
// Redis with.
func newLocker(t *testing.T, cfg redislock.Config) (*redistest.Server, *redis.Client, *redislock.Locker) {
	t.Helper()
	s := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	l, err := redislock.New(client, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, client, l
}

// mustAcquire acquires resource or fails the test; the lock is released
// at the end of the test if the test did not release it.
func mustAcquire(t *testing.T, l *redislock.Locker, resource string, ttl time.Duration) *redislock.Lock {
	t.Helper()
	lk, err := l.Acquire(context.Background(), resource, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q): got error %v, want a lock", resource, err)
	}
	t.Cleanup(func() { _ = lk.Release(context.Background()) })
	return lk
}

// acquireAfterExpiry polls Redis (bounded) until the lock on resource can be
// taken again, which happens once Redis has expired the previous holder's
// key, and returns the new lock.
func acquireAfterExpiry(t *testing.T, l *redislock.Locker, resource string, ttl time.Duration) *redislock.Lock {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lk, err := l.Acquire(context.Background(), resource, ttl)
		if err == nil {
			t.Cleanup(func() { _ = lk.Release(context.Background()) })
			return lk
		}
		if !errors.Is(err, redislock.ErrNotAcquired) {
			t.Fatalf("Acquire(%q): got error %v, want a lock or ErrNotAcquired", resource, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Acquire(%q): still held after 5s; want it expired", resource)
		}
		time.Sleep(2 * time.Millisecond) // polling Redis for the key's expiry
	}
}

// wantNotAcquired fails the test unless resource is held by someone else.
func wantNotAcquired(t *testing.T, l *redislock.Locker, resource string) {
	t.Helper()
	lk, err := l.Acquire(context.Background(), resource, time.Second)
	if err == nil {
		_ = lk.Release(context.Background())
		t.Fatalf("Acquire(%q): got a lock (fence %d), want ErrNotAcquired", resource, lk.Fence())
	}
	if !errors.Is(err, redislock.ErrNotAcquired) {
		t.Fatalf("Acquire(%q): got error %v, want ErrNotAcquired", resource, err)
	}
}
