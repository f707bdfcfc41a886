package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis client the locks use: scripts only.
// *redis.Client and *redis.ClusterClient satisfy it. Build it with
// ContextTimeoutEnabled (as redisclient.New does): go-redis
// does not promise to honour context deadlines otherwise, so a call to a
// hung Redis may last up to the client's ReadTimeout. A lost lock's Context
// is cancelled in time either way; Release and Acquire might wait.
type Client interface {
	redis.Scripter
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
)

// ErrNotAcquired is returned by Acquire when another holder has the lock.
var ErrNotAcquired = errors.New("redislock: lock held by another holder")

// ErrNotHeld is returned by Release and Renew when the lock no longer holds
// the caller's token: it expired, and perhaps another holder took it.
var ErrNotHeld = errors.New("redislock: lock not held")

// ErrLost is the cause (context.Cause) of a Lock's Context when the lock was
// lost: a renewal found another token or none, or renewals kept failing
// until the TTL since the last successful one had passed.
var ErrLost = errors.New("redislock: lock lost")

// ErrReleased is the cause of a Lock's Context after Release.
var ErrReleased = errors.New("redislock: lock released")

// DefaultTimeout bounds one Redis call when Config.Timeout is zero.
const DefaultTimeout = time.Second

// Config tunes a Locker. The zero value is usable.
type Config struct {
	// Timeout bounds each Redis call (acquire, renew, release); zero means
	// DefaultTimeout. A watchdog's renewal is also bounded by its interval,
	// so a hung Redis never delays the next attempt.
	Timeout time.Duration
	// FenceTTL is how long a resource's fencing counter outlives its last
	// acquisition; zero means it never expires. It exists so that locks on
	// unbounded resource names (request ids) do not leave one counter each
	// in Redis forever. An expired counter costs nothing in order: the next
	// token comes from Redis's clock, above the ones before it (see
	// Lock.Fence). It is never shorter than the lock's TTL.
	FenceTTL time.Duration
	// ManualRenewal turns the watchdog off: a lock then lasts its TTL unless
	// the holder calls Renew. The zero value renews every ttl/3.
	ManualRenewal bool
}

// Locker takes locks on one Redis (standalone or Cluster). It holds no
// state of its own besides its configuration and starts nothing; it is
// safe for concurrent use.
type Locker struct {
	client Client
	cfg    Config
}

// New returns a Locker on client. It rejects a nil client and negative
// durations.
func New(client Client, cfg Config) (*Locker, error) {
	if client == nil {
		return nil, errors.New("creating redis locker: nil client")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("creating redis locker: timeout %s is negative", cfg.Timeout)
	}
	if cfg.FenceTTL < 0 {
		return nil, fmt.Errorf("creating redis locker: fence ttl %s is negative", cfg.FenceTTL)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Locker{client: client, cfg: cfg}, nil
}

// Acquire takes the lock on resource for ttl (at least a millisecond; Redis
// counts it in whole milliseconds on its own clock), without waiting: when
// another holder has it, the error is ErrNotAcquired. Resource may be any
// string; only its hash reaches Redis.
//
// Unless Config.ManualRenewal is set, a watchdog renews the lock every
// ttl/3 until Release or until ctx ends. The returned Lock's Context is
// derived from ctx and is cancelled when the lock is lost or released. The
// caller must call Release, whatever happens.
func (l *Locker) Acquire(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
	if resource == "" {
		return nil, errors.New("acquiring lock: empty resource name")
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("acquiring lock on %q: ttl %s is under a millisecond", resource, ttl)
	}
	key, fenceKey := Keys(resource)
	token := rand.Text() // 26 base32 characters, 130 bits from crypto/rand
	fenceTTL := l.cfg.FenceTTL
	if fenceTTL > 0 && fenceTTL < ttl {
		fenceTTL = ttl
	}
	callCtx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	sent := time.Now()
	fence, err := acquireScript.Run(callCtx, l.client, []string{key, fenceKey},
		token, ttl.Milliseconds(), fenceTTL.Milliseconds()).Int64()
	cancel()
	if err != nil {
		// The lock may have been taken by a reply we never read: it then
		// expires after ttl, as a crashed holder's would.
		return nil, fmt.Errorf("acquiring lock on %q: %w", resource, err)
	}
	if fence == 0 {
		return nil, ErrNotAcquired
	}
	lk := &Lock{locker: l, key: key, token: token, fence: fence, ttl: ttl}
	lk.ctx, lk.cancel = context.WithCancelCause(ctx)
	if !l.cfg.ManualRenewal {
		lk.done = make(chan struct{})
		go lk.watch(sent.Add(ttl))
	}
	return lk, nil
}

// Lock is one acquisition of a lock. Its methods are safe for concurrent
// use.
type Lock struct {
	locker *Locker
	key    string
	token  string
	fence  int64
	ttl    time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the watchdog returns; nil without one
}

// Key returns the lock's Redis key (see Keys).
func (lk *Lock) Key() string { return lk.key }

// Token returns the random value that identifies this holder in Redis.
func (lk *Lock) Token() string { return lk.token }

// Fence returns the fencing token: larger than that of every earlier
// acquisition of the same resource, and below 2^53. It is the larger of the
// resource's counter plus one and Redis's clock in microseconds, so it
// keeps growing when the counter is lost (Redis restarted without
// persistence, Config.FenceTTL passed) as long as Redis's clock does not go
// back; across a failover, as long as the new master's clock is not behind
// the old one's by more than the failover took. A protected resource that
// remembers the largest token it has seen can refuse a stale holder's
// writes.
func (lk *Lock) Fence() int64 { return lk.fence }

// Context returns a context that ends when the lock is lost (cause ErrLost),
// released (cause ErrReleased), or when the context given to Acquire ends.
// Work done under the lock should stop when it ends.
func (lk *Lock) Context() context.Context { return lk.ctx }

// Release stops the watchdog, waits for it, and deletes the lock if it still
// holds this holder's token. It returns ErrNotHeld when the lock had
// expired: another holder may have run at the same time. Calling it again
// returns ErrNotHeld.
func (lk *Lock) Release(ctx context.Context) error {
	lk.cancel(ErrReleased)
	if lk.done != nil {
		<-lk.done
	}
	callCtx, cancel := context.WithTimeout(ctx, lk.locker.cfg.Timeout)
	defer cancel()
	n, err := releaseScript.Run(callCtx, lk.locker.client, []string{lk.key}, lk.token).Int64()
	if err != nil {
		return fmt.Errorf("releasing lock: %w", err)
	}
	if n == 0 {
		return ErrNotHeld
	}
	return nil
}

// Renew resets the lock's TTL to the one it was acquired with, if it still
// holds this holder's token. When it does not, Renew returns ErrNotHeld and
// cancels the lock's Context with ErrLost. With the watchdog on there is no
// need to call it.
func (lk *Lock) Renew(ctx context.Context) error {
	ok, err := lk.renew(ctx, lk.locker.cfg.Timeout)
	if err != nil {
		return fmt.Errorf("renewing lock: %w", err)
	}
	if !ok {
		lk.cancel(ErrLost)
		return ErrNotHeld
	}
	return nil
}

func (lk *Lock) renew(ctx context.Context, timeout time.Duration) (bool, error) {
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := renewScript.Run(callCtx, lk.locker.client, []string{lk.key}, lk.token, lk.ttl.Milliseconds()).Int64()
	return n == 1, err
}
