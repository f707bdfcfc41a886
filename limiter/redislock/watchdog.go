package redislock

import (
	"fmt"
	"time"
)

// watch renews the lock every ttl/3 until the lock's context ends. heldUntil
// is a lower bound of when Redis expires the key: the local instant the
// last successful call was sent, plus ttl (durations measured on the local
// monotonic clock; Redis keeps its own). When renewals fail until heldUntil
// has passed, the lock must be presumed lost: the context is cancelled with
// ErrLost. A renewal that finds the token gone cancels it at once.
func (lk *Lock) watch(heldUntil time.Time) {
	defer close(lk.done)
	interval := lk.ttl / 3
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-lk.ctx.Done():
			return
		case <-timer.C:
		}
		sent := time.Now()
		// The lock's own context bounds the call, so Release interrupts a
		// renewal in flight instead of waiting for it.
		ok, err := lk.renew(lk.ctx, min(lk.locker.cfg.Timeout, interval))
		switch {
		case lk.ctx.Err() != nil:
			return
		case err == nil && ok:
			heldUntil = sent.Add(lk.ttl)
			timer.Reset(interval)
		case err == nil:
			lk.cancel(ErrLost)
			return
		default:
			left := time.Until(heldUntil)
			if left <= 0 {
				lk.cancel(fmt.Errorf("%w: renewals failed for %s: %w", ErrLost, lk.ttl, err))
				return
			}
			// Retry sooner than the interval, and no later than the
			// instant the lock is presumed lost.
			timer.Reset(min(interval/2, left))
		}
	}
}
