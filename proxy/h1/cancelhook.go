package h1

import "context"

// An exchange of the lean transport must end when the request that asked
// for it is cancelled. context.AfterFunc does that for any context, at the
// cost of a context of its own, an entry in the request context's set of
// children and its removal: four allocations and about 2,800 instructions
// an exchange. A request the lean server serves is cancelled by the server
// alone (its client gone, a failed write, its handler's end), so the
// server offers the transport one slot for the function to run then. The
// transport takes it only for a context whose Done is the request's own,
// with no other context in between that could end first; any other context
// goes to context.AfterFunc.

// serverConnKey is the key under which a lean server's request contexts
// carry their connection.
type serverConnKey struct{}

// onCancel takes f to run when the running request is cancelled, and
// reports whether it did: not when ctx's Done is not the request's, or
// another exchange holds the slot. On a request cancelled already f runs
// at once, and offCancel then reports false, as context.AfterFunc's stop
// would.
func (c *serverConn) onCancel(ctx context.Context, f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reqDone == nil || c.hook != nil || ctx.Done() != c.reqDone {
		return false
	}
	select {
	case <-c.reqDone:
		f()
	default:
		c.hook = f
	}
	return true
}

// offCancel takes back the function onCancel took: false when it has run.
func (c *serverConn) offCancel() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hook == nil {
		return false
	}
	c.hook = nil
	return true
}

// cancelLocked cancels the running request, and runs the function an
// exchange left with onCancel. c.mu is held.
func (c *serverConn) cancelLocked() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	if f := c.hook; f != nil {
		c.hook = nil
		f()
	}
}

// endRequest cancels the request's context as its handler has returned,
// as net/http's server does, and runs what an exchange left with onCancel.
func (c *serverConn) endRequest(cancel context.CancelFunc) {
	c.mu.Lock()
	f := c.hook
	c.hook, c.reqDone = nil, nil
	c.mu.Unlock()
	cancel()
	if f != nil {
		f()
	}
}

// cancelWith runs c.abort when ctx ends, until the function it returns is
// called (which reports false when abort has run or is running).
func (c *conn) cancelWith(ctx context.Context) (stop func() bool) {
	if sc, ok := ctx.Value(serverConnKey{}).(*serverConn); ok && sc.onCancel(ctx, c.abort) {
		c.hookOn = sc
		return c.unhook
	}
	return context.AfterFunc(ctx, c.abort)
}
