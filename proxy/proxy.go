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

	"github.com/ratelimit-gateway/gateway/jwtauth"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/idempotency"
	"github.com/ratelimit-gateway/gateway/proxy/pool"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
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

// Limiter is what the Handler asks of the limiter; *limiter.Engine is one.
// Its methods are called on the request path and must be safe for
// concurrent use.
type Limiter interface {
	// Decide decides a request's checks, all or nothing.
	Decide(ctx context.Context, checks []limiter.Check) (limiter.Verdict, error)
	// Reserve decides like Decide and holds what an admitted request takes
	// until it ends: an llm call's tokens, settled to what it cost, and
	// in-flight slots, given back.
	Reserve(ctx context.Context, checks []limiter.Check) (limiter.Verdict, *limiter.Reservation, error)
	// Peek reads what each check would be told, taking nothing: the
	// check of an llm call before its body is read, the quota report.
	Peek(ctx context.Context, checks []limiter.Check) []limiter.Decision
}

var _ Limiter = (*limiter.Engine)(nil)

// Config holds a Handler's dependencies. Snapshots, Limiter, Transport and
// Logger are required.
type Config struct {
	// Snapshots yields the configuration each request uses.
	Snapshots Snapshots
	// Limiter decides every request's checks.
	Limiter Limiter
	// Transport carries requests upstream. It is a process-lifetime resource
	// built in cmd (proxy/h1's lean transport over NewStandardTransport's,
	// or NewStandardTransport's), shared across reloads so its connection
	// pool is.
	Transport http.RoundTripper
	// Protocols carries requests on routes whose upstream_protocol is not
	// auto (auto's being Transport's). Nil: New builds them
	// (NewUpstreamTransports over Transport); a process builds them once,
	// and closes their idle connections when it ends.
	Protocols *UpstreamTransports
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
	// at once; zero means GOMAXPROCS-1 (at least 1), which keeps a core
	// for the calls beside them.
	TokenizeSlots int
	// TokenizeWait is how long a call waits for one of those slots before
	// it is refused with 503; zero means DefaultTokenizeWait.
	TokenizeWait time.Duration
	// Pools holds the health of upstream pools' members and the retry
	// budget (a process-lifetime resource, whose Run probes the members
	// of pools with an active check). Nil means a handler's own, without
	// active checks.
	Pools *pool.Pools
	// Tokens verifies the bearer JWTs of tenants.jwt against the signing
	// keys cmd fetches (a process-lifetime resource). Nil verifies HMAC
	// tokens only: a token signed with a key pair is refused.
	Tokens *jwtauth.Verifier
}

// Handler is the gateway's request path: match → identify → decide → forward.
// Build it with New; the zero value is not usable. It is safe for concurrent
// use and holds no per-request state, so a reload never replaces it.
type Handler struct {
	snapshots Snapshots
	// protocols are the transports of each upstream protocol; the
	// ReverseProxy sends on them (UpstreamTransports.RoundTrip).
	protocols *UpstreamTransports
	// keeper is the transport when it keeps a request's deadline itself,
	// for the requests it says so of (see timeUpstream); nil otherwise.
	keeper deadlineKeeper
	// transport carries every exchange upstream (see transportFor); pools
	// is what the gateway knows of the members of pools.
	transport      http.RoundTripper
	pools          *pool.Pools
	limiter        Limiter
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
	// tokens verifies the bearer JWTs of tenants.jwt.
	tokens *tokens
	// countPace is how a long prompt's tokens are counted, its Share taken
	// from each snapshot (server.prompt_count_share); tests set its clock.
	countPace llm.Pace
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
		tokens:         hmacOnly,
	}
	if cfg.Tokens != nil {
		h.tokens = &tokens{v: cfg.Tokens, now: time.Now}
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
	h.keeper, _ = cfg.Transport.(deadlineKeeper)
	h.transport, h.pools = cfg.Transport, cfg.Pools
	if h.pools == nil {
		h.pools = pool.New(pool.Config{Snapshots: cfg.Snapshots, Transport: cfg.Transport})
	}
	h.protocols = cfg.Protocols
	if h.protocols == nil {
		h.protocols = NewUpstreamTransports(cfg.Transport)
	}
	h.rp = h.newReverseProxy(h.protocols)
	return h, nil
}

// ServeHTTP answers r or forwards it upstream: plan, decide, then (an
// idempotency key claimed, a turn waited for) forward. See the package doc.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	snap := h.snapshots.Load()
	w, rec, rep := h.observe(w, snap)
	if h.tracer != nil {
		r = h.startSpan(r, snap, rep)
	}
	defer func() { h.observed(rec, r, snap) }()
	pl := planner{h: h, w: w, rep: rep, maxHeaderBytes: h.maxHeaderBytes, readBody: true, tokens: h.tokens}
	p, early := pl.plan(snap, r)
	r = p.r // what the access log and the span report
	if early.given() {
		h.answerEarly(w, p, early)
		return
	}
	if p.subject.Tenant != nil {
		rep.tenant = p.subject.Tenant.Name
	}
	rep.credential = p.subject.Credential
	rep.route, rep.llm = p.route, p.call
	dec, err := h.decide(p)
	if p.call != nil {
		p.call.res, p.call.costs = dec.res, dec.costs
	}
	rep.recordDecision(p.route, dec, err)
	if !h.admitted(w, p, dec, err, rep) {
		return
	}
	var idem *idemState
	if p.idem != nil {
		hold, answered := h.claimIdempotency(w, r, p.route, dec.verdict, p.idem)
		if answered {
			// A duplicate: its rate tokens are spent, its reservation
			// (tokens of an llm call, in-flight slots) goes back.
			h.unreserve(p, dec.res)
			return
		}
		if hold != nil {
			idem = &idemState{req: p.idem, hold: hold}
		}
	}
	h.forward(w, p, dec, idem, rep)
}

// answerEarly gives the answer a plan stopped at.
func (h *Handler) answerEarly(w http.ResponseWriter, p *plan, a answer) {
	switch {
	case a.written:
	case a.status == statusClientClosed:
		w.WriteHeader(statusClientClosed)
	case p.route == nil:
		h.writeError(w, p.r, a.status, errorBody{Message: a.msg})
	default:
		if a.retry {
			w.Header()[hdrRetryAfter] = []string{"1"}
		}
		h.writeError(w, p.r, a.status, errorBody{Message: a.msg}, slog.String("route", p.route.Name))
	}
}

// admitted answers a request its decision does not let through: the
// limiter failed (500), refused (429, 503), or let through a request that
// lacks a key its route needs (401: the guess still cost its tokens). It
// reports whether the request goes on.
func (h *Handler) admitted(w http.ResponseWriter, p *plan, dec decision, err error, rep *report) bool {
	r, route := p.r, p.route
	switch {
	case err != nil:
		h.writeError(w, r, http.StatusInternalServerError, errorBody{Message: "the rate limiter failed; see the gateway log"},
			slog.String("route", route.Name), slog.Any("err", err))
	case !dec.verdict.Allowed && r.Context().Err() != nil: // left while waiting for its turn
		h.logAnswer(r.Context(), r, statusClientClosed, "client left while waiting for its turn", slog.String("route", route.Name))
		w.WriteHeader(statusClientClosed)
	case !dec.verdict.Allowed:
		if route.Provider != nil {
			setLLMHeaders(route, w.Header(), dec.verdict, dec.costs, h.peekUnread(r.Context(), p.checks, dec.costs, dec.verdict, p.peeked))
		}
		h.refuse(w, r, route, dec.verdict)
	case p.subject.TokenRefused != nil:
		rep.unauthorized = true
		h.unreserve(p, dec.res)
		setRateLimitHeaders(w.Header(), dec.verdict, route.RateLimitHeaders)
		h.writeTokenRefused(w, r, p.snap, route, p.subject.TokenRefused)
	case p.rejectedBy != nil:
		rep.unauthorized = true
		h.unreserve(p, dec.res) // the guess still costs its tokens, as with Decide
		setRateLimitHeaders(w.Header(), dec.verdict, route.RateLimitHeaders)
		h.writeUnauthorized(w, r, p.snap, route, p.rejectedBy)
	case p.quota:
		setRateLimitHeaders(w.Header(), dec.verdict, route.RateLimitHeaders)
		h.serveQuota(w, r, p.snap)
	case p.idem != nil && p.idem.needsKey(&p.subject):
		h.unreserve(p, dec.res)
		setRateLimitHeaders(w.Header(), dec.verdict, route.RateLimitHeaders)
		h.writeIdempotencyUnauthorized(w, r, p.snap, route, p.idem)
	default:
		return true
	}
	return false
}

// unreserve gives back what an admitted request reserved but that was never
// forwarded: an llm call's tokens, in-flight slots.
func (h *Handler) unreserve(p *plan, res *limiter.Reservation) {
	switch {
	case p.call != nil:
		p.call.settle(p.r.Context())
		h.afterSettle()
	case res != nil:
		if err := res.Done(context.WithoutCancel(p.r.Context())); err != nil {
			h.log.Error("settling a reservation", "route", p.route.Name, "err", err)
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

func (h *Handler) afterSettle() {
	if h.settled != nil {
		h.settled()
	}
}
