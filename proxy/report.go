package proxy

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// Observer receives what the gateway decides and forwards, for metrics.
// *metrics.Metrics satisfies it. Its methods are called on the request path:
// they must be cheap and safe for concurrent use. Labels it gets are route
// and policy names from the config, a tenant name and a model name; never an
// API key or an address.
type Observer interface {
	Request(route, outcome string)
	Policy(route, policy, outcome string)
	Decision(backend string, d time.Duration)
	Upstream(route string, status int, d time.Duration)
	InFlight(delta int)
	LLMCharge(tenant, model string, tokens, microUSD int64)
}

// The outcomes of a request, as metrics and the access log name them.
const (
	outcomeAllowed       = "allowed"
	outcomeLimited       = "limited"
	outcomeShadowLimited = "shadow_limited"
	outcomeFailedOpen    = "failed_open"
	outcomeFailedClosed  = "failed_closed"
	outcomeDelayed       = "delayed"
	outcomeError         = "error"
	// outcomeUnauthorized is a request answered 401: a policy needs a key
	// it lacks, and the policies that could judge it let it through.
	outcomeUnauthorized = "unauthorized"
	// outcomeInvalid is a request answered before the limiter: no route,
	// a path or body that cannot be judged (400, 404, 413, 431).
	outcomeInvalid = "invalid"
)

// noRoute is the route label of a request no route took.
const noRoute = "none"

// report follows one request for the metrics and the access log. It is
// pooled with the statusRecorder that carries it.
type report struct {
	// start is when the request came, when the access log is on.
	start   time.Time
	route   *policies.Route
	decided bool
	dec     decision
	failed  bool // the limiter returned an error
	// unauthorized: admitted by the limiter, answered 401 for a missing or
	// unknown key.
	unauthorized bool
	tenant       string
	// credential is what identified the caller (policies.Credential*).
	credential string
	upstream   struct {
		forwarded bool
		status    int // 0: no response
		took      time.Duration
		// member is the pool member that answered last ("" for a route
		// with one upstream), after retries retries.
		member  string
		retries int
	}
	llm *llmCall
	// span is the request's server span when tracing is on (see
	// startSpan).
	span trace.Span
}

// recordDecision records the limiter's answer.
func (rep *report) recordDecision(route *policies.Route, dec decision, err error) {
	rep.route, rep.decided, rep.dec, rep.failed = route, true, dec, err != nil
}

// outcome sums the request up in one word.
func (rep *report) outcome(status int) string {
	switch {
	case rep.failed:
		return outcomeError
	case !rep.decided && status >= 500:
		return outcomeError
	case !rep.decided && status >= 400:
		return outcomeInvalid
	case !rep.decided: // answered by the gateway itself (the quota endpoint)
		return outcomeAllowed
	case !rep.dec.verdict.Allowed && rep.dec.verdict.Unavailable():
		return outcomeFailedClosed
	case !rep.dec.verdict.Allowed:
		return outcomeLimited
	case rep.unauthorized:
		return outcomeUnauthorized
	}
	for _, d := range rep.dec.verdict.Decisions {
		if d.Reason == limiter.ReasonFailedOpen {
			return outcomeFailedOpen
		}
	}
	if len(rep.dec.shadowed) > 0 {
		return outcomeShadowLimited
	}
	return outcomeAllowed
}

// policyOutcome names what one decision did.
func policyOutcome(d *limiter.Decision) string {
	switch {
	case d.Shadow && !d.Allowed:
		return outcomeShadowLimited
	case d.Reason == limiter.ReasonFailedOpen:
		return outcomeFailedOpen
	case d.Reason == limiter.ReasonUnavailable:
		return outcomeFailedClosed
	case d.Allowed:
		return outcomeAllowed
	}
	return outcomeLimited
}

// statusRecorder remembers the status a handler answered. Unwrap lets
// http.ResponseController reach the connection (flush, hijack, deadlines).
type statusRecorder struct {
	http.ResponseWriter
	status int
	rep    report
	// headers is the answer's header scratch (see headerScratch).
	headers headerScratch
}

var recorders = sync.Pool{New: func() any { return new(statusRecorder) }}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// rawWriter is the server's own ResponseWriter under a statusRecorder:
// http.MaxBytesReader tells the server to close the connection through it.
func rawWriter(w http.ResponseWriter) http.ResponseWriter {
	if s, ok := w.(*statusRecorder); ok {
		return s.ResponseWriter
	}
	return w
}

// observe wraps w in a pooled statusRecorder when metrics, the access log
// or tracing want to see the request, and returns its report; observed
// must be called with the recorder (nil when none) once the request has
// been answered. Nothing here allocates: a method, not a closure, ends it.
func (h *Handler) observe(w http.ResponseWriter, snap *policies.Snapshot) (http.ResponseWriter, *statusRecorder, *report) {
	if h.metrics == nil && !accessLogOn(snap) && h.tracer == nil {
		return w, nil, new(report)
	}
	rec := recorders.Get().(*statusRecorder)
	rec.ResponseWriter, rec.status, rec.rep = w, 0, report{}
	if accessLogOn(snap) { // the access line's duration; nothing else reads it
		rec.rep.start = time.Now()
	}
	if h.metrics != nil {
		h.metrics.InFlight(1)
	}
	return rec, rec, &rec.rep
}

// observed reports the request rec recorded and returns rec to its pool.
func (h *Handler) observed(rec *statusRecorder, r *http.Request, snap *policies.Snapshot) {
	if rec == nil {
		return
	}
	h.finish(r, snap, rec)
	rec.ResponseWriter, rec.rep = nil, report{}
	recorders.Put(rec)
}

// finish reports an answered request to the metrics and the access log.
func (h *Handler) finish(r *http.Request, snap *policies.Snapshot, rec *statusRecorder) {
	rep := &rec.rep
	status := rec.status
	if status == 0 && r.Context().Err() != nil {
		status = statusClientClosed
	}
	outcome := rep.outcome(status)
	route := noRoute
	if rep.route != nil {
		route = rep.route.Name
	}
	if m := h.metrics; m != nil {
		// The charge first: a scrape that sees this request counted sees
		// what it was charged too.
		if c := rep.llm; c != nil && c.charged && rep.tenant != "" {
			m.LLMCharge(rep.tenant, c.req.Model, c.chargedTokens, c.chargedMicroUSD)
		}
		m.InFlight(-1)
		m.Request(route, outcome)
		if rep.decided {
			if len(rep.dec.verdict.Decisions) > 0 || len(rep.dec.shadowed) > 0 {
				m.Decision(rep.dec.backend, rep.dec.took)
			}
			for i := range rep.dec.verdict.Decisions {
				if d := &rep.dec.verdict.Decisions[i]; decided(d) {
					m.Policy(route, d.Policy, policyOutcome(d))
				}
			}
			for i := range rep.dec.shadowed {
				m.Policy(route, rep.dec.shadowed[i].Policy, outcomeShadowLimited)
			}
			if rep.dec.delayed > 0 && rep.dec.verdict.Allowed { // waited, then passed
				if d, ok := rep.dec.verdict.Deciding(); ok {
					m.Policy(route, d.Policy, outcomeDelayed)
				}
			}
		}
		if rep.upstream.forwarded {
			m.Upstream(route, rep.upstream.status, rep.upstream.took)
		}
	}
	if h.tracer != nil {
		h.endSpan(r, rep, route, outcome, status)
	}
	if !accessLogOn(snap) {
		return
	}
	// Refusals and failures are always kept; the rest is sampled.
	if outcome == outcomeAllowed && status < 400 && snap.Config.Log.AccessSample < 1 && rand.Float64() >= snap.Config.Log.AccessSample {
		return
	}
	h.accessLine(r.Context(), r, rep, route, outcome, status)
}

// accessLogOn reports whether snap asks for the access log.
func accessLogOn(snap *policies.Snapshot) bool {
	return snap != nil && snap.Config != nil && snap.Config.Log.Access
}

// accessLine logs one request. It never logs a header, a query string or
// the client's API key: only the canonical path, names from the config and
// the client address.
func (h *Handler) accessLine(ctx context.Context, r *http.Request, rep *report, route, outcome string, status int) {
	attrs := []slog.Attr{
		slog.String("route", route),
		slog.String("method", r.Method),
		slog.String("path", loggedPath(r)),
		slog.Int("status", status),
		slog.String("decision", outcome),
		slog.Float64("duration_ms", msec(time.Since(rep.start))),
		slog.String("remote", r.RemoteAddr),
	}
	if rep.tenant != "" {
		attrs = append(attrs, slog.String("tenant", rep.tenant))
	}
	if rep.credential != "" {
		attrs = append(attrs, slog.String("credential", rep.credential))
	}
	if id, ok := h.traceID(rep); ok {
		attrs = append(attrs, slog.String("trace_id", id))
	}
	if d, ok := rep.dec.verdict.Deciding(); ok && rep.decided {
		attrs = append(attrs, slog.String("policy", d.Policy), slog.Int64("remaining", d.Remaining))
	}
	for _, d := range rep.dec.shadowed {
		attrs = append(attrs, slog.String("shadow_limited", d.Policy))
	}
	if rep.dec.delayed > 0 {
		attrs = append(attrs, slog.Float64("delayed_ms", msec(rep.dec.delayed)))
	}
	if rep.upstream.forwarded {
		attrs = append(attrs, slog.Int("upstream_status", rep.upstream.status), slog.Float64("upstream_ms", msec(rep.upstream.took)))
		if rep.upstream.member != "" {
			attrs = append(attrs, slog.String("upstream_member", rep.upstream.member), slog.Int("upstream_retries", rep.upstream.retries))
		}
	}
	h.access.LogAttrs(ctx, slog.LevelInfo, "request", attrs...)
}

// loggedPath is how the access log and spans show a request's URL: the
// canonical path, never the query string, which may carry a secret.
func loggedPath(r *http.Request) string { return r.URL.Path }

func msec(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
