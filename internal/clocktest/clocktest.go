// Package clocktest is a clock that tests move by hand, for code that takes
// its time as a func() time.Time (the limiter engine, the Redis breaker, the
// lean transport's idle timeout, the admin history, the top-keys windows):
// pass Clock.Now, then Advance or Set it at fixed instants instead of
// sleeping.
package clocktest

import (
	"sync/atomic"
	"time"
)

// Clock is an instant that moves only when told. It is safe for concurrent
// use; the zero value stands at the Unix epoch.
type Clock struct{ ns atomic.Int64 }

// New returns a Clock standing at start.
func New(start time.Time) *Clock {
	c := &Clock{}
	c.Set(start)
	return c
}

// Now returns the clock's instant, in UTC.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Advance moves the clock by d (back, if d is negative).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// WaitPastHourEdge waits, when the wall clock (which a local redis-server
// shares) is within need of the end of the hour, until the next hour has
// begun, so that an hourly fixed window does not reset in the middle of a
// test against real time. It waits for a clock, not an event: there is
// nothing to block on.
func WaitPastHourEdge(need time.Duration) {
	into := time.Duration(time.Now().UnixNano() % int64(time.Hour))
	if time.Hour-into > need {
		return
	}
	<-time.After(time.Hour - into + 10*time.Millisecond)
}
