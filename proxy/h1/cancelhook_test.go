package h1

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// silentUpstream accepts connections, reads what comes and never answers;
// arrived gets a value as a request's first bytes come, closed as the
// transport closes its end.
func silentUpstream(t *testing.T) (addr string, arrived, closed chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	arrived, closed = make(chan struct{}, 4), make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var b [512]byte
				if _, err := c.Read(b[:]); err != nil {
					return
				}
				arrived <- struct{}{}
				io.Copy(io.Discard, c)
				closed <- struct{}{}
			}()
		}
	}()
	return ln.Addr().String(), arrived, closed
}

// TestLeanExchangeEndsWithItsClient: a handler of the lean server waits on
// a lean exchange with an upstream that does not answer; the exchange holds
// the request's cancel slot (no context.AfterFunc), and when the client
// goes the exchange ends, its upstream connection closed, and the slot is
// given back.
func TestLeanExchangeEndsWithItsClient(t *testing.T) {
	up, arrived, closed := silentUpstream(t)
	tr := New(Config{})
	t.Cleanup(tr.CloseIdleConnections)
	errc := make(chan error, 1)
	var srv *Server
	var st *steps
	srv, addr := startServerWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://"+up+"/", nil)
		if err != nil {
			errc <- err
			return
		}
		res, err := tr.RoundTrip(out)
		if err == nil {
			res.Body.Close()
			err = errors.New("the upstream answered")
		}
		errc <- err
	}), nil, func(s *Server) { st = newSteps(s) })

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n")
	within(t, arrived, "the request to reach the upstream")
	if sc := onlyConn(t, srv); !hookHeld(sc) {
		t.Fatal("the exchange does not hold its request's cancel slot")
	}
	st.wait(t, "started", 1)
	c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RoundTrip: got %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exchange did not end when its client went")
	}
	within(t, closed, "the upstream connection to close")
	if sc := onlyConn(t, srv); sc != nil && hookHeld(sc) {
		t.Error("the slot is still held after the exchange ended")
	}
}

func within(t *testing.T, ch chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10 s for %s", what)
	}
}

func onlyConn(t *testing.T, s *Server) *serverConn {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		return c
	}
	return nil
}

func hookHeld(c *serverConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hook != nil
}

// TestCancelSlot checks the slot as context.AfterFunc's contract has it:
// taken only for the running request's own context, once; given back
// (true) before the request ends; run once when it ends, after which
// giving it back reports false; run at once on a request ended already.
func TestCancelSlot(t *testing.T) {
	start := func() (*serverConn, context.Context, context.CancelFunc) {
		c := &serverConn{}
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), serverConnKey{}, c))
		c.cancel, c.reqDone = cancel, ctx.Done()
		return c, ctx, cancel
	}
	runs := 0
	f := func() { runs++ }

	c, ctx, cancel := start()
	if !c.onCancel(ctx, f) {
		t.Fatal("onCancel of the request's own context: got false, want true")
	}
	if c.onCancel(ctx, f) {
		t.Error("onCancel with the slot taken: got true, want false")
	}
	if !c.offCancel() || runs != 0 {
		t.Errorf("offCancel before the end: got false or a run (%d), want true and none", runs)
	}
	inner, stop := context.WithCancel(ctx)
	defer stop()
	if c.onCancel(inner, f) {
		t.Error("onCancel of a context that another can end first: got true, want false")
	}
	if !c.onCancel(context.WithValue(ctx, struct{}{}, 1), f) {
		t.Error("onCancel of a value below the request's context: got false, want true")
	}
	c.mu.Lock()
	c.cancelLocked()
	c.mu.Unlock()
	if runs != 1 || c.offCancel() {
		t.Errorf("after the cancel: %d runs and the slot given back; want 1 run and false", runs)
	}
	cancel()

	c, ctx, cancel = start()
	cancel()
	if !c.onCancel(ctx, f) || runs != 2 || c.offCancel() {
		t.Errorf("onCancel of an ended request: want f run at once (runs %d) and offCancel false", runs)
	}

	c, ctx, cancel = start()
	c.onCancel(ctx, f)
	c.endRequest(cancel)
	if runs != 3 || ctx.Err() == nil || c.offCancel() {
		t.Errorf("endRequest: want the context ended and f run (runs %d), the slot empty", runs)
	}
	if c.onCancel(ctx, f) {
		t.Error("onCancel after the request: got true, want false")
	}
}
