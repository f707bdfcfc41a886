package limiter

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratelimit-gateway/gateway/limiter/internal/shardmap"
)

// Resetter is a Backend that can forget one key's state, so that the key
// starts afresh (redislimit's can). Reset must forget whatever the backend
// keeps for the check's policy and key: its shared state and anything it
// remembers about it in-process. (The Engine resets the fallback share.)
type Resetter interface {
	Reset(ctx context.Context, c Check) error
}

// ErrNoReset is returned by Engine.Reset for a shared check when the
// engine's shared backend cannot reset keys.
var ErrNoReset = errors.New("limiter: the shared backend cannot reset keys")

// ErrNotReported is returned by Engine.PeekOne for a shared check whose
// state the shared backend could not report: Redis did not answer, or the
// backend cannot peek.
var ErrNotReported = errors.New("limiter: the shared backend could not report the key's state")

// Reset drops key's state in g: its token bucket, which the next request
// finds full, or, for an InFlight group, its count of requests in flight,
// which starts again from zero. The requests holding those slots keep
// running and give back nothing when they end (their release finds the
// count gone, as after an eviction), so until they end the key may have up
// to twice its limit in flight. A key without state is left as it is. Reset
// is safe for concurrent use with decisions on the same key.
func (l *Local) Reset(g BucketGroup, key string) {
	if g.Algorithm.InFlight() {
		l.mu.RLock()
		s := l.slotStores[slotGroup{policy: g.Policy, fallback: g.Fallback}]
		l.mu.RUnlock()
		if s != nil {
			deleteKey(s.m, key)
		}
		return
	}
	if s := l.bucketStores()[g.buckets()]; s != nil {
		deleteKey(s.m, key)
	}
}

// deleteKey drops key from m under its shard's lock.
func deleteKey[V any](m *shardmap.Map[string, V], key string) {
	sh := m.Shard(key)
	sh.Lock()
	sh.Delete(key)
	sh.Unlock()
}

// Reset makes c's key start afresh under c's policy at c's limit: the local
// bucket or in-flight count (see Local.Reset) for a local algorithm, the
// shared backend's state (see Resetter) for a shared one, and then, for a
// FailLocal policy, the key's in-process fallback share at c.Limit, even
// when Redis could not be reset. Only c.Rule, its Algorithm, OnRedisError,
// LocalShare, c.Limit and c.Key matter. Local buckets are kept per limit, so
// a policy with plans is reset once per limit to reset the key everywhere.
func (e *Engine) Reset(ctx context.Context, c Check) error {
	if c.Rule == nil {
		return errors.New("limiter: reset without policy")
	}
	if !c.Rule.Algorithm.Shared() {
		e.local.Reset(c.group(), c.Key)
		return nil
	}
	if e.shared == nil {
		return ErrNoSharedBackend
	}
	r, ok := e.shared.(Resetter)
	if !ok {
		return ErrNoReset
	}
	err := r.Reset(ctx, c)
	if c.Rule.OnRedisError == FailLocal {
		e.local.Reset(fallbackGroup(c), c.Key)
	}
	if err != nil {
		return fmt.Errorf("resetting policy %q: %w", c.Rule.Name, err)
	}
	return nil
}

// PeekOne is Peek for one check: its state, without taking anything. A
// shared check whose state the backend could not report is ErrNotReported
// (ErrNoSharedBackend without a shared backend), with the Decision Peek
// gave.
func (e *Engine) PeekOne(ctx context.Context, c Check) (Decision, error) {
	if c.Rule == nil {
		return Decision{}, errors.New("limiter: peek without policy")
	}
	if c.Rule.Algorithm.Shared() && e.shared == nil {
		return Decision{Policy: c.Rule.Name, Limit: c.Limit, Reason: ReasonUnavailable}, ErrNoSharedBackend
	}
	d := e.Peek(ctx, []Check{c})[0]
	if c.Rule.Algorithm.Shared() && d.Reason == ReasonUnavailable {
		return d, ErrNotReported
	}
	return d, nil
}
