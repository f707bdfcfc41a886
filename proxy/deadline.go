package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
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

// Deadline is the route deadline while it runs (it moves as an upload
// does: see routeDeadline), else the client request's.
func (st *requestState) Deadline() (time.Time, bool) {
	if rd := st.deadline; rd != nil {
		if at, ok := rd.at(); ok {
			return at, true
		}
	}
	return st.Context.Deadline()
}

// expire is the route deadline's timer firing: the outbound request ends,
// and a read of the client's body stops waiting.
func (st *requestState) expire() {
	if st.cancel != nil {
		st.cancel()
	}
	if st.holding || st.body != nil && !st.body.eof.Load() {
		// The transport (or hold) gives up only once its read of the body
		// returns, and the client may be sending nothing: a read deadline
		// in the past ends that read now.
		http.NewResponseController(st.w).SetReadDeadline(longAgo)
	}
}

// wroteRequest is the client trace's: the whole request is written, so the
// wait for the answer starts now.
func (st *requestState) wroteRequest(httptrace.WroteRequestInfo) { st.deadline.extend() }

// timeUpstream starts the route deadline for the outbound request out and
// returns out as it is to be sent. The deadline is out's context's
// Deadline. On an exchange the transport keeps by itself (the lean
// transport's: plain HTTP, no streamed upload) that is all: nothing to
// build per request. Otherwise the deadline's timer ends out's context, and
// a client trace pushes it back once the request is written.
func (h *Handler) timeUpstream(st *requestState, out *http.Request) *http.Request {
	if st.p.grpc {
		st.deadline = nil
		return timeGRPC(st, out)
	}
	route := st.p.route
	if route.Timeout <= 0 {
		return out
	}
	timeout := route.Timeout
	st.deadline = &st.dl
	if h.keeper != nil && route.UpstreamProtocol.Auto() && h.keeper.KeepsDeadline(out) {
		st.dl.keep(timeout)
		return out
	}
	// out's context is st: from here on its Done is the route deadline's.
	st.Context, st.cancel = context.WithCancel(st.inbound())
	st.deadline.arm(h.afterFunc, timeout, st)
	if st.body != nil {
		st.body.deadline = st.deadline
	}
	st.trace.WroteRequest = st.wroteRequest
	return out.WithContext(httptrace.WithClientTrace(st, &st.trace))
}

// timeGRPC bounds a gRPC call by its own grpc-timeout, the whole call,
// as the client's own deadline does, rather than by the route timeout: a
// streaming call's answer may start only when the client's stream ends,
// and a server stream may run for as long as the client wants it.
func timeGRPC(st *requestState, out *http.Request) *http.Request {
	if st.p.grpcTimeout <= 0 {
		return out
	}
	st.Context, st.cancel = context.WithTimeout(st.inbound(), st.p.grpcTimeout)
	return out.WithContext(st)
}

// grpcDeadlinePassed reports whether a gRPC call's grpc-timeout ran out:
// the gateway's deadline fired, or the upstream, which read the same
// grpc-timeout, gave up on it a moment sooner (its timer may fire first on
// a busy machine, and it resets the stream).
func (st *requestState) grpcDeadlinePassed() bool {
	if !st.p.grpc || st.p.grpcTimeout <= 0 {
		return false
	}
	if errors.Is(st.Context.Err(), context.DeadlineExceeded) {
		return true
	}
	dl, ok := st.Context.Deadline()
	return ok && time.Until(dl) < max(st.p.grpcTimeout/20, 10*time.Millisecond)
}

// endDeadline stops the route deadline, if timeUpstream armed one, and
// ends the outbound context it cancels.
func (st *requestState) endDeadline() {
	if st.deadline != nil {
		st.deadline.stop()
	}
	if st.cancel != nil {
		st.cancel()
	}
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
