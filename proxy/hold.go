package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
)

// holdMax is the largest request body forward reads whole before it sends
// the request on. A streamed body cannot go the lean transport's way (it
// could not be sent again on a connection the upstream had closed), so it
// takes the fallback transport, whose goroutine hand-offs cost a small POST
// more than all of the gateway's own work: through a route without policies,
// wrk's POST of 98 bytes ran at 0.68 × the same route's GET, an llm route
// (which holds its bodies) at 0.76 ×. A body of known length this small
// nearly always arrived with its headers; held, it goes out in one write
// with them. Larger bodies, and bodies of unknown length, stream as before.
const holdMax = 16 << 10

// errBodyStalled is a held body's read cut by the route timeout: the client
// stopped sending it.
var errBodyStalled = errors.New("the request body stopped arriving")

// arrivedBody is a request body that can tell whether what is left of it
// has arrived already (the lean server's can): reading it to its end will
// not wait on the client.
type arrivedBody interface{ Arrived() bool }

// hold reads r's body whole (holdable said it is small) and returns r
// carrying it in memory. The route deadline (st's) bounds the wait between
// two reads, as it does for a body streamed upstream: a body that keeps
// moving is never cut, one that stalls is (errBodyStalled).
func (h *Handler) hold(st *requestState, w http.ResponseWriter, r *http.Request) (*http.Request, error) {
	body := io.Reader(r.Body)
	timeout := st.p.route.Timeout
	if b, ok := r.Body.(arrivedBody); timeout > 0 && (!ok || !b.Arrived()) {
		// A small body nearly always arrives with its head; only one that
		// has not arms the deadline's timer.
		st.holding, st.deadline = true, &st.dl
		body = &uploadBody{ReadCloser: r.Body, deadline: st.deadline}
		st.dl.arm(h.afterFunc, timeout, st)
	}
	buf, err := readHeld(body, int(r.ContentLength))
	stalled := false
	if st.holding {
		stalled = !st.dl.stop()
		st.holding = false
	}
	if err != nil {
		if stalled {
			return r, errBodyStalled
		}
		return r, err
	}
	return withBody(r, buf), nil
}

// holdFirst is the buffer a held body is read into first; it doubles, up
// to the declared length, only as the body's bytes fill it.
const holdFirst = 4 << 10

// readHeld reads exactly n bytes of body (io.ErrUnexpectedEOF when it ends
// sooner). The buffer grows with what arrives, not with what the client
// declared: a client that declares 16 KiB and then sends a byte at a time
// holds 4 KiB of the gateway's memory, and never more than twice what it
// has sent. A body of at most holdFirst bytes takes one allocation.
func readHeld(body io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, holdFirst))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(make([]byte, 0, min(n, 2*cap(buf))), buf...)
		}
		m, err := body.Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		switch {
		case len(buf) == n:
			return buf, nil
		case err == io.EOF:
			return nil, io.ErrUnexpectedEOF
		case err != nil:
			return nil, err
		}
	}
	return buf, nil
}

// holdFailed answers a request whose body could not be held: 408 when it
// stalled, nothing (the client's own 499, logged) when the client went
// away, 400 otherwise. The connection closes: what is left of the body is
// never read.
func (h *Handler) holdFailed(w http.ResponseWriter, r *http.Request, st *requestState, err error) {
	rt := st.route()
	route := slog.String("route", rt.Name)
	closeAfter(w, r)
	switch {
	case errors.Is(err, errBodyStalled):
		setRateLimitHeaders(w.Header(), st.verdict, rt.RateLimitHeaders)
		h.writeError(w, r, http.StatusRequestTimeout, errorBody{
			Message: fmt.Sprintf("the request body stopped arriving: no byte of it for %s", rt.Timeout),
		}, route)
	case r.Context().Err() != nil || errors.Is(err, context.Canceled):
		h.logAnswer(r.Context(), r, statusClientClosed, "client closed the request while sending its body", route, slog.Any("err", err))
		w.WriteHeader(statusClientClosed)
	default:
		setRateLimitHeaders(w.Header(), st.verdict, rt.RateLimitHeaders)
		h.writeError(w, r, http.StatusBadRequest, errorBody{Message: "the request body could not be read"}, route, slog.Any("err", err))
	}
}
