package redislimit

import (
	"context"
	"errors"
	"time"
)

// errQueueTimeout says a decision waited too long for a round-trip slot.
var errQueueTimeout = errors.New("limiter: no redis slot free within the queue timeout")

// slots bounds the Redis round trips in flight. Waiting for one is the
// instance's backpressure: it happens before the Redis deadline starts, so a
// flood queues here instead of timing out inside go-redis's pool, where the
// wait would look like a Redis failure. Safe for concurrent use.
type slots chan struct{}

func newSlots(n int) slots { return make(slots, max(1, n)) }

// acquire takes a slot, waiting at most wait or until ctx ends. release must
// be called once.
func (s slots) acquire(ctx context.Context, wait time.Duration) (release func(), err error) {
	select {
	case s <- struct{}{}:
		return s.release, nil
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case s <- struct{}{}:
		return s.release, nil
	case <-timer.C:
		return nil, errQueueTimeout
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s slots) release() { <-s }
