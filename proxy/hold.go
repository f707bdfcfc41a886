package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
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

// holdable reports whether forward holds r's body: small, of known length,
// not held yet, and bound for an exchange the lean transport carries (plain
// HTTP, no Expect or Upgrade, which go to the fallback either way).
func (h *Handler) holdable(r *http.Request, route *policies.Route) bool {
	if !h.leanTransport || r.ContentLength <= 0 || r.ContentLength > holdMax || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	if _, held := r.Body.(*heldBody); held {
		return false
	}
	return route.Upstream != nil && route.Upstream.Scheme == "http" && h1.LeanExchange(r.Method, r.Header)
}

// errBodyStalled is a held body's read cut by the route timeout: the client
// stopped sending it.
var errBodyStalled = errors.New("the request body stopped arriving")

// hold reads r's body whole (holdable said it is small) and returns r
// carrying it in memory. The route timeout bounds the wait between two
// reads, as it does for a body streamed upstream: a body that keeps moving
// is never cut, one that stalls is (errBodyStalled).
func (h *Handler) hold(w http.ResponseWriter, r *http.Request, route *policies.Route) (*http.Request, error) {
	body := io.Reader(r.Body)
	var deadline *routeDeadline // nil: nothing to wait for, or no bound on the wait
	if route.Timeout > 0 && !h1.BodyBuffered(r.Body) {
		// A small body nearly always arrives with its head; only one that
		// has not gets the watch and its timer.
		watch := &stallWatch{w: w}
		deadline = &watch.rd
		body = &uploadBody{ReadCloser: r.Body, deadline: deadline}
		watch.rd.arm(h.afterFunc, route.Timeout, watch)
		defer watch.rd.stop()
	}
	buf, err := readHeld(body, int(r.ContentLength))
	if err != nil {
		if deadline.timedOut() {
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

// stallWatch cuts a held body's read when the route timeout passes with
// no byte of it: the client connection's read deadline is moved into the
// past, which ends the read at once.
type stallWatch struct {
	rd routeDeadline
	w  http.ResponseWriter
}

func (s *stallWatch) expire() { http.NewResponseController(s.w).SetReadDeadline(longAgo) }

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
