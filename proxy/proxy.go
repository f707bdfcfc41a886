// Package proxy is the gateway's http.Handler: for each request it reads one
// policies.Snapshot, matches a route, identifies the client, asks the limiter,
// and either answers (404, 413, 431, 401, 429, 503, 500 as JSON) or forwards
// the request upstream through one shared httputil.ReverseProxy. Every
// rate-limit header and the 429 body are rendered from the limiter's Verdict.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/h1"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
)

// DefaultMaxHeaderBytes is the request header limit used when
// Config.MaxHeaderBytes is zero.
const DefaultMaxHeaderBytes = 32 << 10

// Snapshots hands out the current configuration. *policies.Current and
// *atomic.Pointer[policies.Snapshot] satisfy it. Load must be safe for
// concurrent use; it is called once per request.
type Snapshots interface {
	Load() *policies.Snapshot
}

// Config holds a Handler's dependencies. Snapshots, Limiter, Transport and
// Logger are required.
type Config struct {
	// Snapshots yields the configuration each request uses.
	Snapshots Snapshots
	// Limiter decides every request's checks.
	Limiter limiter.Limiter
	// Transport carries requests upstream. It is a process-lifetime resource
	// (see NewTransport), shared across reloads so its connection pool is.
	Transport http.RoundTripper
	// Logger receives one line per answer the gateway gives itself: 4xx at
	// debug, 5xx at warn, 500 at error.
	Logger *slog.Logger
	// Idempotency holds the idempotency keys of routes that enable them. Nil
	// means an in-process store (idempotency.NewLocal), which is enough for
	// one instance; with several, give them one on Redis.
	Idempotency idempotency.Store
	// Metrics, when set, is told about every request (see Observer).
	Metrics Observer
	// Refusals, when set, is told the policy and key of every request a
	// limit refused (see metrics/topk); nil records nothing.
	Refusals Refusals
	// AccessLogger receives the access log (log.access in the config); nil
	// means Logger.
	AccessLogger *slog.Logger
	// MaxHeaderBytes bounds the request line plus headers, counted as on the
	// wire; beyond it the answer is 431 JSON. Zero means
	// DefaultMaxHeaderBytes, negative disables the check. Set the
	// http.Server's own MaxHeaderBytes somewhat higher as a backstop: Go's
	// server answers 431 itself, in plain text, before the handler runs.
	MaxHeaderBytes int
	// Tracing, when set, gives every request a server span and its
	// decision and upstream exchange child spans, and passes the trace
	// upstream (W3C traceparent). Nil means no tracing, at no cost.
	Tracing trace.TracerProvider
	// TokenizeSlots bounds how many llm calls count their prompt's tokens
	// at once; zero means GOMAXPROCS.
	TokenizeSlots int
	// TokenizeWait is how long a call waits for one of those slots before
	// it is refused with 503; zero means DefaultTokenizeWait.
	TokenizeWait time.Duration
}

// Handler is the gateway's request path: match → identify → decide → forward.
// Build it with New; the zero value is not usable. It is safe for concurrent
// use and holds no per-request state, so a reload never replaces it.
type Handler struct {
	snapshots Snapshots
	// leanTransport: the transport is h1's, which times lean exchanges by
	// itself (see timeUpstream).
	leanTransport  bool
	limiter        limiter.Limiter
	log            *slog.Logger
	maxHeaderBytes int
	rp             *httputil.ReverseProxy
	// settled, when set, is called after a reservation (an llm call, in-flight
	// slots) was settled (tests).
	settled     func()
	unpriced    modelWarnings // models priced at prices.default, logged once each
	afterFunc   func(time.Duration, func()) timer
	upgrades    upgrades
	idempotency idempotency.Store
	metrics     Observer
	refusals    Refusals
	access      *slog.Logger
	waiters     waiters
	// turnAfter arms the wait of an on_limit: delay request (tests replace
	// it).
	turnAfter func(time.Duration, func()) timer
	// tracer starts the request's spans; nil when tracing is off.
	tracer   trace.Tracer
	tokenize tokenizeGate
	// headerPeeks bounds the reads of Redis made only for a 429's headers
	// (peekUnread, withUnpeeked): a flood of refusals stays a flood the
	// denial path answers without Redis.
	headerPeeks *rate.Limiter
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler for cfg. It starts nothing.
func New(cfg Config) (*Handler, error) {
	var errs []error
	if cfg.Snapshots == nil {
		errs = append(errs, errors.New("nil Snapshots"))
	}
	if cfg.Limiter == nil {
		errs = append(errs, errors.New("nil Limiter"))
	}
	if cfg.Transport == nil {
		errs = append(errs, errors.New("nil Transport"))
	}
	if cfg.Logger == nil {
		errs = append(errs, errors.New("nil Logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("creating proxy: %w", err)
	}
	h := &Handler{
		snapshots:      cfg.Snapshots,
		limiter:        cfg.Limiter,
		log:            cfg.Logger,
		maxHeaderBytes: cfg.MaxHeaderBytes,
		afterFunc:      realAfterFunc,
		turnAfter:      realAfterFunc,
		idempotency:    cfg.Idempotency,
		metrics:        cfg.Metrics,
		refusals:       cfg.Refusals,
		access:         cfg.AccessLogger,
		tokenize:       newTokenizeGate(cfg.TokenizeSlots, cfg.TokenizeWait),
		headerPeeks:    rate.NewLimiter(headerPeeksPerSecond, headerPeeksPerSecond),
	}
	if h.access == nil {
		h.access = h.log
	}
	if h.idempotency == nil {
		local, err := idempotency.NewLocal(time.Now, idempotency.LocalConfig{})
		if err != nil {
			return nil, fmt.Errorf("creating proxy: %w", err)
		}
		h.idempotency = local
	}
	if h.maxHeaderBytes == 0 {
		h.maxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.Tracing != nil {
		h.tracer = cfg.Tracing.Tracer(tracerName)
	}
	_, h.leanTransport = cfg.Transport.(*h1.Transport)
	h.rp = h.newReverseProxy(cfg.Transport)
	return h, nil
}

// ServeHTTP answers r or forwards it upstream.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	snap := h.snapshots.Load()
	if h.tracer != nil {
		r = h.startSpan(r, snap)
	}
	r0 := r
	w, rep, done := h.observe(w, snap)
	defer func() { done(r, snap) }()
	if snap == nil {
		h.writeError(w, r, http.StatusServiceUnavailable, errorBody{Message: "the gateway has no configuration loaded"})
		return
	}
	if h.maxHeaderBytes > 0 && headerTooLarge(r, h.maxHeaderBytes) {
		h.writeError(w, r, http.StatusRequestHeaderFieldsTooLarge, errorBody{
			Message: fmt.Sprintf("request headers exceed %d bytes", h.maxHeaderBytes),
		})
		return
	}
	// One canonical request from here on: what is matched, keyed, stripped
	// and forwarded is the same request.
	r, bad := canonicalRequest(r, snap)
	if bad != "" {
		h.writeError(w, r0, http.StatusBadRequest, errorBody{Message: bad})
		return
	}
	if r.Method == http.MethodGet && snap.Tenants.QuotaPath != "" && r.URL.Path == snap.Tenants.QuotaPath {
		h.serveQuota(w, r, snap)
		return
	}
	route := snap.Match(r)
	if route == nil {
		h.writeError(w, r, http.StatusNotFound, errorBody{Message: "no route matches this request"})
		return
	}
	if route.Upstream == nil { // the compiler never builds one; do not panic in SetURL if it did
		h.writeError(w, r, http.StatusInternalServerError, errorBody{Message: "the matched route has no upstream; see the gateway log"},
			slog.String("route", route.Name))
		return
	}
	if route.OpenAIErrors {
		r = withOpenAIErrors(r) // errors in the shape the provider's SDKs read
	}
	if route.AnthropicErrors {
		r = withAnthropicErrors(r)
	}
	if msg := keyInputProblem(r, route, keyHeaders(snap, route)); msg != "" {
		h.writeError(w, r, http.StatusBadRequest, errorBody{Message: msg}, slog.String("route", route.Name))
		return
	}
	if route.MaxBodyBytes > 0 && r.ContentLength > route.MaxBodyBytes {
		h.writeError(w, r, http.StatusRequestEntityTooLarge, errorBody{
			Message: fmt.Sprintf("request body exceeds this route's limit of %d bytes", route.MaxBodyBytes),
		}, slog.String("route", route.Name))
		return
	}

	var call *llmCall
	var pre preBody
	if msg := refuseUpgrade(r, route); route.LLM && msg != "" {
		h.writeError(w, r, http.StatusBadRequest, errorBody{Message: msg}, slog.String("route", route.Name))
		return
	}
	if _, costly := llmKind(r); route.LLM && costly {
		var answered bool
		if pre, answered = h.beforeBody(w, r, snap, route, rep); answered {
			return
		}
		if call, r = h.readLLMCall(w, r, route, snap); call == nil {
			return
		}
		if status, msg := call.forRoute(r, route, h.limiter); status != 0 {
			h.writeError(w, r, status, errorBody{Message: msg}, slog.String("route", route.Name))
			return
		}
	}
	var idem *idemRequest
	if route.Idempotency != nil {
		var status int
		var msg string
		rq := r
		if r, idem, status, msg = readIdempotency(w, r, route); status != 0 {
			h.writeError(w, rq, status, errorBody{Message: msg}, slog.String("route", route.Name))
			return
		}
	}

	subject, peerTrusted := identify(r, snap, route)
	if subject.Tenant != nil {
		rep.tenant = subject.Tenant.Name
	}
	rep.route, rep.llm = route, call
	if call != nil {
		subject.Model = call.req.Model
	}
	if idem != nil {
		idem.scope(route, r, &subject)
	}
	// A policy that needs a key the request lacks answers 401, but only after
	// the policies that can judge the request have: each guess costs its
	// per-IP tokens, so keys cannot be guessed without limit.
	var cost func(policies.Cost) int64
	if call != nil {
		cost = call.costFor()
	}
	checks, costs, rejectedBy := buildChecks(r, route, &subject, cost)
	// res is what an admitted request holds until it ends: an llm call's
	// tokens, settled to its real cost, and the slots of in-flight policies.
	dec, err := h.decide(r, route, checks, costs, call != nil || route.InFlight)
	verdict, res := dec.verdict, dec.res
	if call != nil {
		call.res, call.costs = res, dec.costs
	}
	costs = dec.costs
	rep.recordDecision(route, dec, err)
	if err != nil {
		h.writeError(w, r, http.StatusInternalServerError, errorBody{Message: "the rate limiter failed; see the gateway log"},
			slog.String("route", route.Name), slog.Any("err", err))
		return
	}
	if !verdict.Allowed {
		if r.Context().Err() != nil { // left while waiting for its turn
			h.logAnswer(r.Context(), r, statusClientClosed, "client left while waiting for its turn", slog.String("route", route.Name))
			w.WriteHeader(statusClientClosed)
			return
		}
		if route.LLM {
			setLLMHeaders(route, w.Header(), verdict, costs, h.peekUnread(r.Context(), checks, costs, verdict, pre.peeked))
		}
		h.refuse(w, r, route, verdict)
		return
	}
	if rejectedBy != nil {
		rep.unauthorized = true
		h.unreserve(r, route, call, res) // the guess still costs its tokens, as with Decide
		setRateLimitHeaders(w.Header(), verdict, route.RateLimitHeaders)
		h.writeUnauthorized(w, r, snap, route, rejectedBy)
		return
	}
	if idem != nil && idem.needsKey(&subject) {
		h.unreserve(r, route, call, res)
		setRateLimitHeaders(w.Header(), verdict, route.RateLimitHeaders)
		h.writeIdempotencyUnauthorized(w, r, snap, route, idem)
		return
	}
	var hold idempotency.Owner
	if idem != nil {
		var answered bool
		if hold, answered = h.claimIdempotency(w, r, route, verdict, idem); answered {
			// A duplicate: its rate tokens are spent, its reservation
			// (tokens of an llm call, in-flight slots) goes back.
			h.unreserve(r, route, call, res)
			return
		}
	}
	var is *idemState
	if hold != nil {
		is = &idemState{req: idem, hold: hold}
	}
	h.forward(w, r, route, verdict, costs, peerTrusted, call, res, is, rep)
}

// readLLMCall reads an llm call's body and counts its tokens, at most
// h.tokenize's slots at a time. It returns the call and the request to
// forward, or a nil call when it answered. Its errors take the route's
// error format.
func (h *Handler) readLLMCall(w http.ResponseWriter, r *http.Request, route *policies.Route, snap *policies.Snapshot) (*llmCall, *http.Request) {
	rq, _, status, msg := readBody(w, r, route)
	if status != 0 {
		h.writeError(w, r, status, errorBody{Message: msg}, slog.String("route", route.Name))
		return nil, r
	}
	release, ok := h.tokenize.enter(r.Context())
	if !ok {
		if r.Context().Err() != nil {
			w.WriteHeader(statusClientClosed)
			return nil, r
		}
		w.Header()[hdrRetryAfter] = []string{"1"}
		h.writeError(w, r, http.StatusServiceUnavailable, errorBody{
			Message: fmt.Sprintf("the gateway is counting the tokens of %d other calls and none finished within %s; retry shortly",
				cap(h.tokenize.slots), h.tokenize.wait),
		}, slog.String("route", route.Name))
		return nil, r
	}
	out, call, status, msg := func() (*http.Request, *llmCall, int, string) {
		defer release()
		return readLLMCall(w, rq, route, snap.Prices)
	}()
	if status != 0 {
		h.writeError(w, r, status, errorBody{Message: msg}, slog.String("route", route.Name))
		return nil, r
	}
	if call.unpriced {
		h.unpriced.warn(h.log, call.req.Model)
	}
	return call, out
}

// unreserve gives back what an admitted request reserved but that was never
// forwarded: an llm call's tokens, in-flight slots.
func (h *Handler) unreserve(r *http.Request, route *policies.Route, call *llmCall, res *limiter.Reservation) {
	switch {
	case call != nil:
		call.settle(r.Context())
		h.afterSettle()
	case res != nil:
		if err := res.Done(context.WithoutCancel(r.Context())); err != nil {
			h.log.Error("settling a reservation", "route", route.Name, "err", err)
		}
	}
}

// refuse answers a request the limiter did not allow: 503 when a fail-closed
// policy could not be enforced, 429 otherwise.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, route *policies.Route, v limiter.Verdict) {
	d, ok := v.Deciding()
	switch {
	case !ok:
		h.writeError(w, r, http.StatusInternalServerError, errorBody{Message: "the rate limiter denied without a decision; see the gateway log"},
			slog.String("route", route.Name))
	case v.Unavailable():
		// When Redis is worth asking again: the breaker's next probe.
		w.Header()[hdrRetryAfter] = []string{strconv.FormatInt(retryAfterSeconds(d.RetryAfter), 10)}
		h.writeError(w, r, http.StatusServiceUnavailable, errorBody{
			Message: fmt.Sprintf("policy %q cannot be enforced right now and fails closed; try again shortly", d.Policy),
			Policy:  d.Policy,
		}, slog.String("route", route.Name))
	default:
		h.writeRateLimited(w, r, route, v, d)
	}
}

// writeUnauthorized answers 401 for a policy whose key the request lacks
// (on_missing_key: reject), saying what to send.
func (h *Handler) writeUnauthorized(w http.ResponseWriter, r *http.Request, snap *policies.Snapshot, route *policies.Route, p *policies.Policy) {
	header := keyHeaders(snap, route)[0]
	var msg string
	switch reads := p.Reads; {
	case reads.Tenant:
		msg = fmt.Sprintf("policy %q needs a known API key in the %s header", p.Name(), header)
	case reads.APIKey:
		msg = fmt.Sprintf("policy %q needs an API key in the %s header", p.Name(), header)
	default:
		msg = fmt.Sprintf("policy %q needs a key (%s) that this request does not carry", p.Name(), p.KeySpec)
	}
	if strings.EqualFold(header, "Authorization") {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	h.writeError(w, r, http.StatusUnauthorized, errorBody{Message: msg, Policy: p.Name()}, slog.String("route", route.Name))
}

// writeIdempotencyUnauthorized answers 401 to a request whose idempotency
// key its route keeps for known API keys only.
func (h *Handler) writeIdempotencyUnauthorized(w http.ResponseWriter, r *http.Request, snap *policies.Snapshot, route *policies.Route, idem *idemRequest) {
	header := keyHeaders(snap, route)[0]
	if strings.EqualFold(header, "Authorization") {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	h.writeError(w, r, http.StatusUnauthorized, errorBody{
		Message: fmt.Sprintf("this route takes an %s only with a known API key in the %s header", idem.cfg.Header, header),
	}, slog.String("route", route.Name))
}

// headerTooLarge reports whether the request line and headers, counted as
// they travel in HTTP/1.1 ("Name: value\r\n"), exceed limit.
func headerTooLarge(r *http.Request, limit int) bool {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 // two spaces, CRLF
	n += len("Host") + len(r.Host) + 4                        // Go moves Host out of Header
	if n > limit {
		return true
	}
	for name, vs := range r.Header {
		for _, v := range vs {
			if n += len(name) + len(v) + 4; n > limit {
				return true
			}
		}
	}
	return false
}

func (h *Handler) afterSettle() {
	if h.settled != nil {
		h.settled()
	}
}
