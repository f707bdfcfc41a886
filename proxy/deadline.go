package proxy

import (
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// timer is the part of *time.Timer the forwarder uses; tests substitute a
// timer they fire by hand.
type timer interface {
	Stop() bool
	Reset(time.Duration) bool
}

func realAfterFunc(d time.Duration, f func()) timer { return time.AfterFunc(d, f) }

// routeDeadline is a route's timeout for one forwarded request that the lean
// transport does not time itself (see timeUpstream). It bounds how long the
// upstream keeps the gateway waiting, not how long the exchange takes: it is
// armed when the outbound request is ready, pushed back each time the upload
// moves (a body read) and once more when the whole request has been written,
// and stopped for good when the response headers arrive. So a slow upload that
// keeps moving is never cut, an upstream that stops reading the body is, and
// the wait for the response headers gets the whole timeout. It is safe for
// concurrent use: the transport reads the body on its own goroutine.
type routeDeadline struct {
	d     time.Duration
	mu    sync.Mutex
	t     timer
	over  bool // stopped (headers arrived) or fired: nothing moves it again
	fired atomic.Bool
	owner expirer
}

// expirer is told when a deadline passes. An interface, not a func: the
// requestState that holds the deadline is the expirer, so arming one
// allocates no closure.
type expirer interface{ expire() }

// arm starts a deadline of d that tells owner when it passes.
func (rd *routeDeadline) arm(afterFunc func(time.Duration, func()) timer, d time.Duration, owner expirer) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.d, rd.owner = d, owner
	rd.t = afterFunc(d, rd.fire)
}

// fire runs when the timer expires. expire runs under the lock, so once
// stop has returned (the handler is done) it can no longer touch the
// connection.
func (rd *routeDeadline) fire() {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.over {
		return
	}
	rd.over = true
	rd.fired.Store(true)
	rd.owner.expire()
}

// extend gives the upstream the whole timeout again from now, unless the
// deadline is over.
func (rd *routeDeadline) extend() {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.over {
		rd.t.Reset(rd.d)
	}
}

// stop ends the deadline because the response headers arrived. It reports
// false when the deadline had already passed.
func (rd *routeDeadline) stop() bool {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.over {
		return !rd.fired.Load()
	}
	rd.over = true
	rd.t.Stop()
	return true
}

// timedOut reports whether the deadline passed.
func (rd *routeDeadline) timedOut() bool { return rd != nil && rd.fired.Load() }

// uploadBody is the outbound request body: it tells the deadline that the
// upload moves and remembers whether it was read to the end.
type uploadBody struct {
	io.ReadCloser
	deadline *routeDeadline // nil when the route has no timeout
	eof      atomic.Bool
}

func (b *uploadBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.deadline != nil {
		b.deadline.extend()
	}
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}
