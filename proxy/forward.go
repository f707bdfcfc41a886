package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/pool"
)

// errUpstreamTimeout is returned by modifyResponse when the route timeout
// fired while the response headers were arriving.
var errUpstreamTimeout = errors.New("proxy: upstream timed out")

// longAgo is a deadline that has passed whatever the clock says.
var longAgo = time.Unix(1, 0)

// stateKey carries a *requestState in the outbound request's context: the one
// ReverseProxy is shared by all routes, so the request's plan travels with it.
type stateKey struct{}

// requestState is one allowed request on its way upstream and back: its plan
// and the verdict that let it through (what ReverseProxy's hooks, rewrite,
// modifyResponse and proxyError, read), what the exchange keeps (the
// idempotency key held, the upload, the report), and the route deadline.
// It is the outbound request's context itself (see Value and Deadline),
// and the deadline's and client trace's holder too, so that forwarding a
// request allocates one object for all of them rather than one each: the
// shared ReverseProxy hands its hooks nothing but the request.
type requestState struct {
	context.Context
	p       *plan
	verdict limiter.Verdict
	// costs holds each decision's policy cost (for the providers' headers).
	costs []policies.Cost
	// idem is the request's idempotency key, held; nil when none.
	idem *idemState
	// rep is told the upstream's status and how long its headers took.
	rep  *report
	sent time.Time
	// w answers the client: the rate-limit headers go on it, and expire
	// uses it to end a read of the body.
	w http.ResponseWriter
	// body is the outbound request body when the gateway streams it; nil
	// when there is none or it is held (held: the body the gateway read
	// whole, an llm call's or an idempotent request's).
	body *uploadBody
	// pool is the route's pool (nil for one upstream); member the member
	// the exchange is on, tried those it was sent to, retries how many
	// times it was sent again; poolKey is balance: hash's key.
	pool       *pool.State
	member     int
	tried      pool.Tried
	retries    int
	poolKey    string
	hasPoolKey bool
	held       []byte
	// heldReader reads held for the outbound request: kept here, the
	// request's io.NopCloser over it is its only allocation.
	heldReader bytes.Reader
	// deadline is the route timeout (see routeDeadline): nil until the
	// wait it bounds starts, and when the route has none, else &dl.
	deadline *routeDeadline
	dl       routeDeadline
	// holding: the deadline bounds the client's sending of a held body.
	holding bool
	trace   httptrace.ClientTrace
	// cancel ends the outbound context (the route deadline's timer fired);
	// nil when no timer was armed.
	cancel context.CancelFunc
}

// route is the request's route.
func (st *requestState) route() *policies.Route { return st.p.route }

// inbound is the client request's own context: when it is done the client
// went away (as opposed to the route timeout cancelling the outbound one).
func (st *requestState) inbound() context.Context { return st.p.r.Context() }

// Value makes a requestState the context that carries it.
func (st *requestState) Value(key any) any {
	if key == (stateKey{}) {
		return st
	}
	return st.Context.Value(key)
}

// heldAgain is the held body from its start, the outbound request's GetBody.
func (st *requestState) heldAgain() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(st.held)), nil
}

func stateFrom(ctx context.Context) *requestState {
	st, _ := ctx.Value(stateKey{}).(*requestState)
	return st
}

// newReverseProxy builds the Handler's single ReverseProxy.
func (h *Handler) newReverseProxy(transport http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        h.rewrite,
		Transport:      &poolTransport{h: h, next: transport},
		BufferPool:     newBufferPool(),
		ModifyResponse: h.modifyResponse,
		ErrorHandler:   h.proxyError,
		// Errors while copying a body the client already started receiving
		// (upstream reset mid-stream) can only be logged.
		ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelWarn),
		// FlushInterval stays 0: ReverseProxy already flushes every write of
		// text/event-stream and of responses without a Content-Length, so
		// streams pass through as produced while sized bodies are not flushed
		// write by write.
	}
}

// forward sends an allowed request upstream: p as dec let it through. The
// route timeout bounds how long the upstream keeps the gateway waiting (see
// routeDeadline): an upload that moves and a stream that has started are
// never cut by it.
//
// What dec reserved (dec.res), when anything, is held until
// ReverseProxy.ServeHTTP returns: the response was copied (streamed or
// not), the client went away, or the upstream failed. Its leases are
// renewed meanwhile; then an llm call settles to what it cost, any other
// request to what it reserved, and in-flight slots come back either way.
//
// idem, when not nil, is the request's idempotency key, held until the same
// point; then the response is stored for its duplicates, or the key is
// released without one when the upstream failed.
func (h *Handler) forward(w http.ResponseWriter, p *plan, dec decision, idem *idemState, rep *report) {
	r, route := p.r, p.route
	st := &requestState{p: p, verdict: dec.verdict, costs: dec.costs, idem: idem, rep: rep, w: w, sent: time.Now()}
	if idem != nil {
		defer idem.finish(r.Context(), h.log, route.Name)
	}
	if res := dec.res; p.call != nil || res != nil {
		stop := func() {}
		if res != nil {
			stop = res.KeepAlive(r.Context())
		}
		// After the response was copied, or the call failed: the renewal
		// stops first, so none races the release, then what was held is
		// settled (an llm call to its real cost).
		defer func() {
			stop()
			var err error
			if p.call != nil {
				err = p.call.settle(r.Context())
			} else {
				err = res.Done(context.WithoutCancel(r.Context()))
			}
			if err != nil {
				h.log.Error("settling a reservation", "route", route.Name, "err", err)
			}
			h.afterSettle()
		}()
	}
	if h.holdable(r, route) {
		// After the defers: what the decision reserved is given back if
		// the body never comes.
		var err error
		if r, err = h.hold(st, w, r); err != nil {
			h.holdFailed(w, r, st, err)
			return
		}
		st.sent = time.Now() // the upstream's time starts now
	}
	rep.upstream.forwarded = true
	budget := h.pools.Budget()
	budget.Begin()
	defer budget.End()
	held, isHeld := r.Body.(*heldBody)
	if r.Body != nil && r.Body != http.NoBody && !isHeld {
		body := r.Body
		if route.MaxBodyBytes > 0 && !p.grpc {
			// (A gRPC stream is bounded by its messages' limits at both
			// ends, not by the route's: it may run for hours.)
			// Catches bodies without a Content-Length (chunked) or that lie
			// about it; the error surfaces from the transport and becomes a
			// 413.
			body = http.MaxBytesReader(rawWriter(w), body, route.MaxBodyBytes)
		}
		st.body = &uploadBody{ReadCloser: body}
	}
	st.Context = r.Context()
	if h.tracer != nil {
		defer h.startUpstream(st)()
	}
	// The route timeout is set up by rewrite, once the outbound request is
	// known; this ends what it started.
	defer st.endDeadline()
	defer st.releaseMember()
	if isHeld {
		// Read whole already: nothing left for the deadline to watch (see
		// rewrite for how it is sent).
		st.held = held.b
	}
	out := r.WithContext(st)
	if st.body != nil {
		out.Body = st.body
	}
	h.rp.ServeHTTP(w, out)
}

// holdable reports whether forward holds r's body: small, of known length,
// not held yet, and bound for a plain-HTTP exchange a transport can carry
// whole (no CONNECT, Expect or Upgrade, which stream either way).
func (h *Handler) holdable(r *http.Request, route *policies.Route) bool {
	if r.ContentLength <= 0 || r.ContentLength > holdMax || r.Body == nil || r.Body == http.NoBody {
		return false
	}
	if _, held := r.Body.(*heldBody); held {
		return false
	}
	if route.Upstream == nil || route.Upstream.Scheme != "http" || r.Method == http.MethodConnect {
		return false
	}
	_, upgrade := r.Header["Upgrade"]
	_, expect := r.Header["Expect"]
	return !upgrade && !expect
}

// rewrite is the ReverseProxy's Rewrite hook. ReverseProxy has already
// removed hop-by-hop headers (including any a client named in Connection) and
// every X-Forwarded-* and Forwarded header from pr.Out, so whatever is set
// here reaches the upstream as set.
func (h *Handler) rewrite(pr *httputil.ProxyRequest) {
	st := stateFrom(pr.In.Context())
	if st == nil { // cannot happen: forward always sets it
		return
	}
	route := st.route()
	if route.StripPrefix != "" {
		stripPrefix(pr.Out.URL, route.StripPrefix)
	}
	target := route.Upstream
	if route.Pool != nil {
		target = h.pickMember(st)
	}
	pr.SetURL(target) // also points Host at the upstream
	if len(st.held) > 0 {
		// ReverseProxy wraps every body in a reader of its own, which
		// net/http cannot tell is in memory, so it flushes the headers in a
		// write of their own first. A held body is in memory: as a
		// bytes.Reader it goes out in one write with the headers. With
		// GetBody it can be read again, which is what lets the transport's
		// lean path send it (and send it again on a connection the upstream
		// had closed, when that is harmless). (An empty one ReverseProxy
		// already sends as none.)
		st.heldReader.Reset(st.held)
		pr.Out.Body = io.NopCloser(&st.heldReader)
		pr.Out.GetBody = st.heldAgain
		// The client's, which a body given a cap or include_usage no
		// longer fits: the length goes out from ContentLength.
		delete(pr.Out.Header, "Content-Length")
	}
	if id := route.Idempotency; id != nil {
		// Only the gateway speaks for the fencing token: a client's own
		// never reaches the upstream.
		pr.Out.Header.Del(id.FencingHeader)
		if st.idem != nil {
			pr.Out.Header[id.FencingHeader] = []string{strconv.FormatInt(st.idem.hold.Fence(), 10)}
		}
	}
	if st.p.call != nil {
		// Its answer is read and edited as it passes (see decodeAnswer).
		pr.Out.Header["Accept-Encoding"] = upstreamAcceptEncoding
	}
	if p := route.Provider; p != nil {
		p.Upstream(pr.Out, route.UpstreamAPIKey)
	} else if key := route.UpstreamAPIKey; key != "" {
		// The tenant's key identifies it to the gateway only; the upstream
		// sees the gateway's own.
		delete(pr.Out.Header, "X-Api-Key")
		pr.Out.Header["Authorization"] = []string{"Bearer " + key}
	}
	if j := st.p.snap.Tenants.JWT; j != nil && j.Remove && st.p.subject.Credential == policies.CredentialJWT {
		removeToken(pr.Out, j)
	}
	if st.p.peerTrusted {
		// The chain is only worth passing on when a proxy we trust built it;
		// SetXForwarded appends the peer to it.
		if xff := pr.In.Header["X-Forwarded-For"]; len(xff) > 0 {
			pr.Out.Header["X-Forwarded-For"] = xff
		}
		if fwd := pr.In.Header["Forwarded"]; len(fwd) > 0 {
			pr.Out.Header["Forwarded"] = fwd
		}
	}
	pr.SetXForwarded()
	if st.p.peerTrusted {
		// A trusted proxy in front (a TLS-terminating load balancer) knows the
		// original scheme and host better than our socket does.
		for _, name := range []string{"X-Forwarded-Proto", "X-Forwarded-Host"} {
			if v := pr.In.Header[name]; len(v) > 0 {
				pr.Out.Header[name] = v
			}
		}
	}
	if h.tracer != nil {
		injectTrace(st.Context, st.rep.span, pr.Out.Header)
	}
	pr.Out = h.timeUpstream(st, pr.Out)
}

// poolTransport is the ReverseProxy's transport: a request of a route with
// one upstream goes to next as it is; one of a pool goes to the member
// rewrite picked, and, when that is safe, to others after it (see
// roundTripPool).
type poolTransport struct {
	h    *Handler
	next http.RoundTripper
}

func (t *poolTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if st := stateFrom(req.Context()); st != nil && st.pool != nil {
		return t.h.roundTripPool(st, req)
	}
	return t.next.RoundTrip(req)
}

// For is the transport of protocol p: the one function that chooses, for a
// route's upstream and for any other place that names a protocol.
func (t *UpstreamTransports) For(p policies.UpstreamProtocol) http.RoundTripper {
	switch p {
	case policies.UpstreamHTTP1:
		return t.http1
	case policies.UpstreamH2:
		return t.h2
	case policies.UpstreamH2C:
		return t.h2c
	}
	return t.auto
}

// RoundTrip sends req on the transport of its route's upstream protocol
// (auto's when req carries no route).
func (t *UpstreamTransports) RoundTrip(req *http.Request) (*http.Response, error) {
	if st := stateFrom(req.Context()); st != nil {
		return t.For(st.route().UpstreamProtocol).RoundTrip(req)
	}
	return t.auto.RoundTrip(req)
}

// modifyResponse stops the route timer (if one was armed) now that headers
// have arrived and puts the gateway's rate-limit headers on the client's
// response, replacing any the upstream sent under the same names.
func (h *Handler) modifyResponse(resp *http.Response) error {
	st := stateFrom(resp.Request.Context())
	if st == nil {
		return nil
	}
	route := st.route()
	if st.deadline != nil && !st.deadline.stop() {
		// The timer fired (or is firing) as the headers arrived; the outbound
		// context is cancelled, so the body cannot be read anyway.
		return errUpstreamTimeout
	}
	st.rep.upstream.status, st.rep.upstream.took = resp.StatusCode, time.Since(st.sent)
	// The gateway's rate-limit headers go on the client's response as they
	// are, and the upstream's own under those names are dropped. (Set on
	// resp.Header, ReverseProxy would copy each once more, and five more
	// names push a small response's header map into a bigger table.) They
	// are rendered into one buffer, an OpenAI route's own sets with them,
	// and handed to a server that takes them apart from the header map
	// (fieldSetter), or cut from one string onto net/http's.
	hs := putAnswerHeaders(st.w, resp.Header, route, st.verdict, st.costs, st.idem != nil)
	defer hs.release()
	hv := &hs.hv
	// The response's Date is the gateway's, stamped by net/http as it
	// writes, as nginx's proxy does: the clock that computed the rate-limit
	// headers' resets. It also keeps a small response within the eight
	// header names a Go header map holds before it grows into a table,
	// which measured a tenth of the throughput of a small proxied response.
	// Both go as moveFields passes them, but where resp.Header is read
	// before (a stored answer) or kept as it is (an upgrade).
	if st.idem != nil || resp.StatusCode == http.StatusSwitchingProtocols {
		hv.dropFrom(resp.Header)
		delete(resp.Header, "Date")
	}
	if st.p.call != nil {
		if err := decodeAnswer(resp); err != nil {
			// Billed, perhaps, and unreadable: charged its reservation.
			st.p.call.status, st.p.call.unreadable = resp.StatusCode, true
			resp.Body.Close()
			return err
		}
		st.p.call.watch(resp)
	}
	if st.idem != nil {
		st.idem.capture(resp)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The body is the upstream connection; ReverseProxy copies both ways
		// until one side closes. Tracked so that a shutdown can wait for it.
		if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
			resp.Body = h.upgrades.track(rwc)
		}
		return nil // ReverseProxy reads the Upgrade from resp.Header
	}
	moveFields(st.w.Header(), resp.Header, hv)
	return nil
}

// releaseMember ends the exchange's request at its pool member, once its
// answer was passed on whole or it failed: what least_request weighs.
func (st *requestState) releaseMember() {
	if st.pool != nil && st.tried.Has(st.member) {
		st.pool.Release(st.member)
	}
}

// proxyError is the ReverseProxy's ErrorHandler: every upstream failure before
// the response started ends here. r is the outbound request.
func (h *Handler) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	logErr := slog.Any("err", err)
	st := stateFrom(r.Context())
	if st == nil {
		h.writeError(w, r, http.StatusBadGateway, errorBody{Message: "the upstream failed to answer"}, logErr)
		return
	}
	if st.p.call != nil {
		st.p.call.upstreamErr = err // whether the provider may have billed
	}
	rt := st.route()
	route := slog.String("route", rt.Name)
	if st.body != nil && !st.body.eof.Load() {
		// The client may still be sending a body nobody will read. Without
		// this, Go's server would read up to 256 KiB of it before answering,
		// and wait for ever on a client that stalled.
		closeAfter(w, r)
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.Is(err, errUpstreamTimeout) || st.deadline.timedOut(err):
		setRateLimitHeaders(w.Header(), st.verdict, rt.RateLimitHeaders)
		h.writeError(w, r, http.StatusGatewayTimeout, errorBody{
			Message: fmt.Sprintf("the upstream did not answer within %s", rt.Timeout),
		}, route, slog.String("upstream", st.upstreamName()))
	case st.grpcDeadlinePassed() && st.inbound().Err() == nil:
		setRateLimitHeaders(w.Header(), st.verdict, rt.RateLimitHeaders)
		h.writeError(w, r, http.StatusGatewayTimeout, errorBody{
			Message: fmt.Sprintf("the call's grpc-timeout of %s passed before the upstream answered", st.p.grpcTimeout),
		}, route, slog.String("upstream", st.upstreamName()))
	case errors.As(err, &tooLarge):
		setRateLimitHeaders(w.Header(), st.verdict, rt.RateLimitHeaders)
		h.writeError(w, r, http.StatusRequestEntityTooLarge, errorBody{
			Message: fmt.Sprintf("request body exceeds this route's limit of %d bytes", tooLarge.Limit),
		}, route)
	case errors.Is(err, errUnreadableEncoding):
		setRateLimitHeaders(w.Header(), st.verdict, rt.RateLimitHeaders)
		h.writeError(w, r, http.StatusBadGateway, errorBody{Message: "the upstream answered in an encoding the gateway cannot read"},
			route, logErr)
	case st.inbound().Err() != nil:
		// The client went away; nobody will read an answer.
		h.logAnswer(r.Context(), r, statusClientClosed, "client closed the request before the upstream answered",
			route, logErr)
		w.WriteHeader(statusClientClosed)
	default:
		setRateLimitHeaders(w.Header(), st.verdict, rt.RateLimitHeaders)
		h.writeError(w, r, http.StatusBadGateway, errorBody{Message: "the upstream could not be reached or failed to answer"},
			route, slog.String("upstream", st.upstreamName()), logErr)
	}
}

// closeAfter ends r's connection after the answer, on HTTP/1: what is left
// of the body is never read. On HTTP/2 the stream alone ends (net/http
// resets it), and "Connection: close" would end every other stream of the
// connection with it (net/http reads it as a GOAWAY to send).
func closeAfter(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor < 2 {
		w.Header()["Connection"] = []string{"close"}
	}
}

// stripPrefix removes prefix from u's path when it matches whole segments,
// keeping a leading "/". RawPath (the escaped form, set when the path holds
// escapes such as %2F) is cut by the same number of decoded bytes so that
// escapes survive; if that is impossible it is dropped and Path wins.
func stripPrefix(u *url.URL, prefix string) {
	if !policies.PathHasPrefix(u.Path, prefix) {
		return
	}
	rest := u.Path[len(prefix):]
	if u.RawPath != "" {
		if raw, ok := cutEscaped(u.RawPath, len(prefix)); ok {
			u.RawPath = withSlash(raw)
		} else {
			u.RawPath = ""
		}
	}
	u.Path = withSlash(rest)
}

// cutEscaped drops the first n decoded bytes of an escaped path.
func cutEscaped(raw string, n int) (string, bool) {
	i := 0
	for ; n > 0 && i < len(raw); n-- {
		if raw[i] == '%' && i+2 < len(raw) {
			i += 3
		} else {
			i++
		}
	}
	return raw[i:], n == 0
}

func withSlash(p string) string {
	if p == "" || p[0] != '/' {
		return "/" + p
	}
	return p
}

// bufferSize is the copy buffer of the ReverseProxy, as its default.
const bufferSize = 32 << 10

// bufferPool recycles response copy buffers. It stores array pointers, so
// putting a buffer back does not allocate a slice header for the interface.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { return new([bufferSize]byte) }}}
}

// Get returns a buffer of bufferSize bytes.
func (b *bufferPool) Get() []byte { return b.p.Get().(*[bufferSize]byte)[:] }

// Put returns a buffer obtained from Get.
func (b *bufferPool) Put(buf []byte) {
	if cap(buf) >= bufferSize {
		b.p.Put((*[bufferSize]byte)(buf[:bufferSize]))
	}
}

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
