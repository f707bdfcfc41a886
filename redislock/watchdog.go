package redislock

import (
	"fmt"
	"time"
)

// watch renews the lock every ttl/3 until the lock's context ends.
//
// heldUntil is a lower bound of when Redis expires the key: the local
// instant the last successful call was sent, plus ttl (a duration on the
// local monotonic clock; Redis keeps its own time). A timer fires at
// heldUntil and cancels the context with ErrLost: renewals failed until then,
// so the lock must be presumed lost. The timer runs apart from the renewal
// calls so that the holder learns it in time even while a call hangs on a
// client that does not bound it. A renewal that finds the token gone cancels
// the context at once.
func (lk *Lock) watch(heldUntil time.Time) {
	defer close(lk.done)
	lost := time.AfterFunc(time.Until(heldUntil), func() {
		lk.cancel(fmt.Errorf("%w: no renewal succeeded within the ttl %s", ErrLost, lk.ttl))
	})
	defer lost.Stop()

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
		// renewal in flight (on a client that honours contexts).
		ok, err := lk.renew(lk.ctx, min(lk.locker.cfg.Timeout, interval))
		switch {
		case lk.ctx.Err() != nil:
			return
		case err == nil && ok:
			lost.Reset(time.Until(sent.Add(lk.ttl)))
			timer.Reset(interval)
		case err == nil:
			lk.cancel(ErrLost)
			return
		default: // a failed call: Redis slow, down or paused
			// Retry sooner than the interval; the lost timer decides
			// when to give up.
			timer.Reset(interval / 2)
		}
	}
}
