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
	if err := s.enter(ctx, wait); err != nil {
		return nil, err
	}
	return s.release, nil
}

// enter is acquire without the release function (a closure, an allocation
// on every decision): the caller calls release itself.
func (s slots) enter(ctx context.Context, wait time.Duration) error {
	select {
	case s <- struct{}{}:
		return nil
	default:
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case s <- struct{}{}:
		return nil
	case <-timer.C:
		return errQueueTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s slots) release() { <-s }
