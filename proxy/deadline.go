package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
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

// deadlineKeeper is a transport that keeps the deadline of a request's
// context itself, for the requests it says so of, by its connections' own
// deadlines (the gateway's lean HTTP/1.1 transport does): for those the
// route deadline arms no timer. Any other transport is told by the context's
// Done, which the timer closes.
type deadlineKeeper interface {
	KeepsDeadline(*http.Request) bool
}

// routeDeadline is a route's timeout for one request, and its one owner. It
// bounds how long anyone keeps the gateway waiting, not how long the
// request takes: the client while the gateway holds its body (see hold),
// then the upstream. It starts when the wait does, is pushed back each
// time an upload moves (a body read) and once more when the whole request
// has been written, and is stopped for good when the response headers
// arrive. So a slow upload that keeps moving is never cut, an upstream
// that stops reading the body is, and the wait for the response headers
// gets the whole timeout. It is the outbound context's Deadline; a
// transport that keeps that deadline (deadlineKeeper) needs nothing more,
// for any other a timer tells owner when it passes. It is safe for
// concurrent use: a transport reads the body on its own goroutine.
type routeDeadline struct {
	mu  sync.Mutex
	d   time.Duration
	due time.Time
	// t fires at due; nil when the transport keeps the deadline.
	t timer
	// gen is which start a timer belongs to: one started for a held body
	// and stopped may still be running its fire when the next starts.
	gen   uint32
	over  bool // stopped (headers arrived) or fired: nothing moves it again
	fired atomic.Bool
	owner expirer
}

// expirer is told when a deadline passes. An interface, not a func: the
// requestState that holds the deadline is the expirer, so arming one
// allocates no closure of its own.
type expirer interface{ expire() }

// keep starts a deadline of d from now that the transport keeps: no timer.
func (rd *routeDeadline) keep(d time.Duration) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.gen++
	rd.d, rd.due, rd.t, rd.over = d, time.Now().Add(d), nil, false
}

// arm starts a deadline of d from now with a timer that tells owner when
// it passes.
func (rd *routeDeadline) arm(afterFunc func(time.Duration, func()) timer, d time.Duration, owner expirer) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.gen++
	gen := rd.gen
	rd.d, rd.due, rd.over, rd.owner = d, time.Now().Add(d), false, owner
	rd.t = afterFunc(d, func() { rd.fire(gen) })
}

// fire runs when the timer of start gen expires. expire runs under the
// lock, so once stop has returned (the handler is done) it can no longer
// touch the connection.
func (rd *routeDeadline) fire(gen uint32) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.over || gen != rd.gen {
		return
	}
	rd.over = true
	rd.fired.Store(true)
	rd.owner.expire()
}

// extend gives the whole timeout again from now, unless the deadline is
// over.
func (rd *routeDeadline) extend() {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.over {
		return
	}
	rd.due = time.Now().Add(rd.d)
	if rd.t != nil {
		rd.t.Reset(rd.d)
	}
}

// stop ends the deadline because the wait is over (the response headers
// arrived, the held body came). It reports false when the deadline had
// already passed.
func (rd *routeDeadline) stop() bool {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.over {
		return !rd.fired.Load()
	}
	rd.over = true
	if rd.t != nil {
		rd.t.Stop()
	}
	return true
}

// at is the deadline while it runs; ok is false once it is over.
func (rd *routeDeadline) at() (time.Time, bool) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.due, !rd.over
}

// timedOut reports whether err, an exchange's failure, is the deadline
// passing: its timer fired, or the transport that keeps it said so
// (context.DeadlineExceeded, as net/http says it of a context's deadline).
func (rd *routeDeadline) timedOut(err error) bool {
	return rd != nil && (rd.fired.Load() || errors.Is(err, context.DeadlineExceeded))
}

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
