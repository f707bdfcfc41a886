package redislimit

import (
	"sync"
	"sync/atomic"
	"time"
)

// breakerState is where a breaker stands.
type breakerState int32

const (
	breakerClosed   breakerState = iota // Redis is asked
	breakerOpen                         // Redis is not asked until the cooldown ends
	breakerHalfOpen                     // one probe is asking Redis; others fail fast
)

func (s breakerState) String() string {
	switch s {
	case breakerClosed:
		return "closed"
	case breakerOpen:
		return "open"
	default:
		return "half-open"
	}
}

// breaker stops paying the Redis timeout while Redis is down: after threshold
// consecutive failed round trips it opens; after cooldown one caller probes
// while the others keep failing fast; a success closes it, a failed probe
// opens it for another cooldown. Time comes from clock. It is hand-written
// because a library breaker cannot tell a hung Redis from a starved gateway
// (see classify) nor settle a timed-out probe by a direct check.
//
// A breaker is safe for concurrent use. In the closed state a decision costs
// two atomic loads; mu serializes the transitions and guards openUntil.
type breaker struct {
	clock     func() time.Time
	threshold int32
	cooldown  time.Duration

	state     atomic.Int32 // breakerState; written under mu
	failures  atomic.Int32 // consecutive failures while closed
	opens     atomic.Uint64
	mu        sync.Mutex
	openUntil time.Time
}

func newBreaker(clock func() time.Time, threshold int, cooldown time.Duration) *breaker {
	return &breaker{clock: clock, threshold: int32(max(1, threshold)), cooldown: cooldown}
}

// allow reports whether the caller may ask Redis, and whether it does so as
// the one probe of a half-open breaker (it must then report the outcome).
func (b *breaker) allow() (ok, probe bool) {
	if breakerState(b.state.Load()) == breakerClosed {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch breakerState(b.state.Load()) {
	case breakerClosed:
		return true, false
	case breakerOpen:
		if b.clock().Before(b.openUntil) {
			return false, false
		}
		b.state.Store(int32(breakerHalfOpen))
		return true, true
	default: // a probe is in flight
		return false, false
	}
}

// success records a round trip that worked; probe says whether it was the
// probe. It returns the state the breaker was in when this call closed it,
// so that the caller logs a change (anything but closed) once. Only the probe
// closes an open breaker: a straggler that was in flight when the breaker
// opened may have been answered just before Redis went down.
func (b *breaker) success(probe bool) (from breakerState) {
	if breakerState(b.state.Load()) == breakerClosed && b.failures.Load() == 0 {
		return breakerClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	from = breakerState(b.state.Load())
	switch {
	case from == breakerClosed:
		b.failures.Store(0)
	case probe:
		b.failures.Store(0)
		b.state.Store(int32(breakerClosed))
	default:
		return breakerClosed
	}
	return from
}

// failure records a failed round trip; probe says whether it was the probe.
// opened is true when this failure opened a closed breaker. Failures of
// requests that were already in flight when the breaker opened change nothing.
func (b *breaker) failure(probe bool) (opened bool) {
	if breakerState(b.state.Load()) == breakerClosed && b.failures.Add(1) < b.threshold {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch breakerState(b.state.Load()) {
	case breakerClosed:
		if b.failures.Load() < b.threshold { // a success reset the count meanwhile
			return false
		}
		b.open()
		return true
	case breakerHalfOpen:
		if probe {
			b.open()
		}
	}
	return false
}

// trip opens a closed breaker at once, for a failure that is conclusive on
// its own. It reports whether this call opened it.
func (b *breaker) trip() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if breakerState(b.state.Load()) != breakerClosed {
		return false
	}
	b.open()
	return true
}

// release gives the probe back without a verdict (its request was cancelled
// by its client, which says nothing about Redis): the next caller probes.
func (b *breaker) release(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if breakerState(b.state.Load()) == breakerHalfOpen {
		b.state.Store(int32(breakerOpen))
	}
}

// open must be called with mu held.
func (b *breaker) open() {
	b.state.Store(int32(breakerOpen))
	b.openUntil = b.clock().Add(b.cooldown)
	b.failures.Store(0)
	b.opens.Add(1)
}

// current returns the state for stats and tests.
func (b *breaker) current() breakerState { return breakerState(b.state.Load()) }
