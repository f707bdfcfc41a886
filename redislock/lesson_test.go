package redislock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/redislock"
)

// The lesson's first test: a lock cannot be taken twice, by another holder
// or by the same Locker, until it is released.
func TestLockCannotBeTakenTwice(t *testing.T) {
	_, _, l := newLocker(t, redislock.Config{})
	a := mustAcquire(t, l, "sku:1001", 10*time.Second)
	wantNotAcquired(t, l, "sku:1001")
	wantNotAcquired(t, l, "sku:1001")
	if err := a.Release(context.Background()); err != nil {
		t.Fatalf("Release: got %v, want nil", err)
	}
	b := mustAcquire(t, l, "sku:1001", 10*time.Second)
	if b.Token() == a.Token() {
		t.Fatalf("tokens: got the same token %q twice, want random tokens", a.Token())
	}
}

// The lesson's second test: after expiry, the old holder's unlock leaves
// the new holder's lock in place.
func TestExpiredHolderUnlockKeepsNewHolder(t *testing.T) {
	_, _, l := newLocker(t, redislock.Config{ManualRenewal: true})
	const ttl = 30 * time.Millisecond
	old := mustAcquire(t, l, "job:report", ttl)
	current := acquireAfterExpiry(t, l, "job:report", 10*time.Second)

	if err := old.Release(context.Background()); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("old holder's Release: got %v, want ErrNotHeld", err)
	}
	wantNotAcquired(t, l, "job:report") // the new holder's lock is still there
	if err := current.Release(context.Background()); err != nil {
		t.Fatalf("new holder's Release: got %v, want nil (its lock was in place)", err)
	}
}

// The lesson's A/B timeline, in milliseconds instead of seconds: the TTL is
// shorter than A's work, the lock expires while A still works, B takes it,
// both work at once, A's late unlock does not delete B's lock, B unlocks.
func TestABTimeline(t *testing.T) {
	_, _, l := newLocker(t, redislock.Config{ManualRenewal: true})
	const ttl = 40 * time.Millisecond // "30s"; A's work lasts past it
	const resource = "lock:sku:1001"

	a := mustAcquire(t, l, resource, ttl) // 0s: A locks, starts working
	wantNotAcquired(t, l, resource)       // B cannot take it while it lives
	b := acquireAfterExpiry(t, l, resource, ttl*100)
	// 31s: the key expired by itself; B locked; A and B both work now. The
	// fencing token is what tells them apart.
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence: got B %d <= A %d, want B's larger", b.Fence(), a.Fence())
	}
	// 40s: A finishes and unlocks late.
	if err := a.Release(context.Background()); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("A's late Release: got %v, want ErrNotHeld", err)
	}
	wantNotAcquired(t, l, resource) // B's lock survived A's unlock
	// 51s: B finishes and unlocks; the lock is free.
	if err := b.Release(context.Background()); err != nil {
		t.Fatalf("B's Release: got %v, want nil", err)
	}
	c := mustAcquire(t, l, resource, ttl)
	if err := c.Release(context.Background()); err != nil {
		t.Fatalf("C's Release: got %v, want nil", err)
	}
}

// fencedStore is a protected resource that refuses writes carrying a
// fencing token older than the newest it has seen, as the lesson advises.
type fencedStore struct {
	mu     sync.Mutex
	newest int64
	value  string
}

func (s *fencedStore) write(fence int64, value string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.newest {
		return false
	}
	s.newest, s.value = fence, value
	return true
}

// A holder paused past its TTL (a GC pause, SIGSTOP: no watchdog runs)
// wakes up believing it holds the lock; its fencing token is smaller than
// the next holder's, so the protected resource refuses its write.
func TestPausedHolderGetsSmallerFence(t *testing.T) {
	_, _, l := newLocker(t, redislock.Config{ManualRenewal: true})
	const ttl = 30 * time.Millisecond
	store := &fencedStore{}

	paused := mustAcquire(t, l, "account:42", ttl)
	// paused does nothing now; its lock expires, the next holder comes.
	next := acquireAfterExpiry(t, l, "account:42", 10*time.Second)
	if next.Fence() <= paused.Fence() {
		t.Fatalf("fence: got next %d <= paused %d, want the next holder's larger", next.Fence(), paused.Fence())
	}
	if !store.write(next.Fence(), "next") {
		t.Fatalf("next holder's write (fence %d): refused, want accepted", next.Fence())
	}
	// The paused holder wakes up and writes.
	if store.write(paused.Fence(), "paused") {
		t.Fatalf("paused holder's write (fence %d after %d): accepted, want refused", paused.Fence(), next.Fence())
	}
	if store.value != "next" {
		t.Fatalf("store: got %q, want %q", store.value, "next")
	}
}

// Renewal is a compare-and-PEXPIRE: a holder whose lock expired and was
// taken learns it from Renew (ErrNotHeld, its Context cancelled with
// ErrLost) and does not extend the new holder's lock.
func TestRenewAfterExpiryLeavesNewHolder(t *testing.T) {
	_, _, l := newLocker(t, redislock.Config{ManualRenewal: true})
	old := mustAcquire(t, l, "invoice:9", 30*time.Millisecond)
	if err := old.Renew(context.Background()); err != nil {
		t.Fatalf("Renew while held: got %v, want nil", err)
	}
	current := acquireAfterExpiry(t, l, "invoice:9", 30*time.Millisecond)
	if err := old.Renew(context.Background()); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("old holder's Renew: got %v, want ErrNotHeld", err)
	}
	if cause := context.Cause(old.Context()); !errors.Is(cause, redislock.ErrLost) {
		t.Fatalf("old holder's Context cause: got %v, want ErrLost", cause)
	}
	// Had the old Renew extended it, the new 30ms lock would still be held
	// long after; it expires on its own ttl instead.
	acquireAfterExpiry(t, l, "invoice:9", time.Second)
	if err := current.Release(context.Background()); !errors.Is(err, redislock.ErrNotHeld) {
		t.Fatalf("new holder's Release after its ttl: got %v, want ErrNotHeld", err)
	}
}
