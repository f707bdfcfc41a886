package proxy

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
)

// plan is everything the gateway works out about one request before its
// limiter decides: the canonical request, its route, who is asking, an llm
// call with its body read and its tokens counted, its idempotency key, and
// the checks the limiter is asked. One function builds it (planner.plan),
// for serving and for Explain alike, so what is served and what is
// explained are one thing.
type plan struct {
	snap *policies.Snapshot
	// grpc: the request is a gRPC call (isGRPC), answered in gRPC's terms;
	// grpcTimeout is its grpc-timeout (0: none), which bounds the call in
	// place of the route's timeout and body limit.
	grpc        bool
	grpcTimeout time.Duration
	// in is the request as received; r the one every later step reads and
	// forwards: canonical, in its route's error format, its body held once
	// it was read.
	in, r *http.Request
	// reached is the last step the plan completed (an early answer stops
	// it); Explain renders what it reached.
	reached planStep
	route   *policies.Route
	// subject is who asks; peerTrusted says the socket peer is a trusted
	// proxy, whose forwarding headers are passed on.
	subject     policies.Subject
	peerTrusted bool
	// endpoint is an llm request's endpoint, as its route's provider API
	// declares it (nil: none); kind is a call's API; isCall says the
	// request costs more than one (its body read, its cost reserved).
	endpoint *llm.Endpoint
	kind     llm.Kind
	isCall   bool
	// call is the llm call, its body read; nil on other routes, for a
	// request that costs no tokens, and for one whose body is unread.
	call *llmCall
	// headersOnly: an llm call that lacks a key a policy rejects without
	// is judged by its headers alone, its body never read: only the
	// policies that count requests decide it, then 401.
	headersOnly bool
	// bodyUnread: an llm call whose body was not read (Explain without a
	// body); what its costs and a model key are is unknown.
	bodyUnread bool
	// peeked is what the body-free peek of an llm call saw, for the
	// headers of a later 429.
	peeked []limiter.Decision
	// idem is the request's idempotency key; nil when none applies.
	idem *idemRequest
	// checks are what the limiter is asked, with each one's policy cost;
	// rejectedBy is the first policy whose key the request lacks under
	// on_missing_key: reject (401 once the others let it through).
	checks     []limiter.Check
	costs      []policies.Cost
	rejectedBy *policies.Policy
	// checkBuf and costBuf back checks and costs for up to planChecks
	// policies; peekBuf backs peeked for one (every plan carries it: one
	// decision keeps a plan within the next size class, 576 bytes).
	checkBuf [planChecks]limiter.Check
	costBuf  [planChecks]policies.Cost
	peekBuf  [1]limiter.Decision
	// reserve: the decision holds what it takes until the request ends (an
	// llm call's tokens, in-flight slots), settled then.
	reserve bool
	// quota: the request asks for the quota report (tenants.quota_path on
	// a route that answers it); checks are its policies that need no key,
	// and once they let it through the gateway answers it itself.
	quota bool
}

// planStep names how far a plan got.
type planStep int

const (
	stepStarted   planStep = iota
	stepCanonical          // the request is canonical
	stepRoute              // a route matched, with an upstream
	stepBody               // the key inputs and the body's size pass
	stepCall               // the llm call is read (or judged without its body)
	stepChecks             // idempotency read, the checks built: the limiter decides
)

// answer is the gateway's own answer to a request before its limiter
// decides. The zero value is no answer.
type answer struct {
	// status and msg are the answer, in the route's error format;
	// statusClientClosed (the client left) is the status alone.
	status int
	msg    string
	// retry sets Retry-After: 1 (a moment's wait helps).
	retry bool
	// written: the answer was written already (a peek refused the call).
	written bool
}

func (a answer) given() bool { return a.status != 0 || a.written }

// planner builds plans. Serving gives it the Handler, whose slots bound
// token counting and whose limiter peeks at an llm call before its body is
// read, and the client's ResponseWriter, which bounds body reads; Explain
// gives it neither and reads a body only when asked.
type planner struct {
	h   *Handler
	w   http.ResponseWriter
	rep *report
	// maxHeaderBytes bounds the request line and headers (≤ 0: none).
	maxHeaderBytes int
	// readBody reads an llm call's body (always, when serving).
	readBody bool
	// tokens verifies JWTs (nil: HMAC only).
	tokens *tokens
}

// plan works out r under snap, step by step, and stops at the first step
// that answers. It may read r's body; it sends nothing to Redis or the
// upstream. The one exception is the cheap check before an llm call's body
// (cheap.go), which the serving planner asks of its Handler: a peek that
// takes nothing, and that refuses a call its headers already condemn.
func (pl *planner) plan(snap *policies.Snapshot, r *http.Request) (*plan, answer) {
	p := &plan{snap: snap, in: r, r: r}
	if isGRPC(r) {
		p.grpc = true
		r = withErrorFormat(r, formatGRPC)
		p.r = r
		if v, ok := r.Header[hdrGRPCTimeout]; ok {
			d, valid := parseGRPCTimeout(v[0])
			if !valid || len(v) != 1 {
				return p, answer{status: http.StatusBadRequest, msg: "malformed grpc-timeout: want up to 8 digits and a unit (H, M, S, m, u, n)"}
			}
			p.grpcTimeout = d
		}
	}
	if snap == nil {
		return p, answer{status: http.StatusServiceUnavailable, msg: "the gateway has no configuration loaded"}
	}
	if pl.maxHeaderBytes > 0 && headerTooLarge(r, pl.maxHeaderBytes) {
		return p, answer{status: http.StatusRequestHeaderFieldsTooLarge, msg: "request headers exceed " + strconv.Itoa(pl.maxHeaderBytes) + " bytes"}
	}
	// One canonical request from here on: what is matched, keyed, stripped
	// and forwarded is the same request.
	peer, peerOK := parseHop(r.RemoteAddr) // once: canonical headers and identity read it
	cr, bad := canonicalRequest(r, snap, peer)
	if bad != "" {
		return p, answer{status: http.StatusBadRequest, msg: bad}
	}
	p.r, p.reached = cr, stepCanonical
	r = cr
	badMethod := methodProblem(r.Method)
	route := snap.Match(r)
	if badMethod != "" {
		// Refused; matched as upper case only to answer in the shape of
		// the route the client meant.
		route = snap.Match(withMethod(r, strings.ToUpper(r.Method)))
	}
	if route == nil {
		if badMethod != "" {
			return p, answer{status: http.StatusBadRequest, msg: badMethod}
		}
		return p, answer{status: http.StatusNotFound, msg: "no route matches this request"}
	}
	p.route = route
	if route.Upstream == nil { // the compiler never builds one; do not panic in SetURL if it did
		return p, answer{status: http.StatusInternalServerError, msg: "the matched route has no upstream; see the gateway log"}
	}
	p.reached = stepRoute
	if f := routeErrorFormat(route); f != formatGateway && !p.grpc {
		r = withErrorFormat(r, f) // errors in the shape the provider's SDKs read
		p.r = r
	}
	if badMethod != "" {
		return p, answer{status: http.StatusBadRequest, msg: badMethod}
	}
	if route.ClientCertificate && !policies.VerifiedClientCertificate(r) {
		return p, answer{status: http.StatusUnauthorized, msg: "this route needs a client certificate that the gateway's client CA signed"}
	}
	fitted, bad := fitToRoute(r, snap, route)
	if bad != "" {
		return p, answer{status: http.StatusBadRequest, msg: bad}
	}
	p.r, r = fitted, fitted
	if route.Quota && r.Method == http.MethodGet && snap.Tenants.QuotaPath != "" && r.URL.Path == snap.Tenants.QuotaPath {
		return p, pl.quota(p, peer, peerOK)
	}
	if msg := keyInputProblem(r, route, keyHeaders(snap, route)); msg != "" {
		return p, answer{status: http.StatusBadRequest, msg: msg}
	}
	if limit := bodyLimit(route, r.Method, r.URL.Path); limit > 0 && r.ContentLength > limit && !p.grpc {
		return p, answer{status: http.StatusRequestEntityTooLarge, msg: tooLargeMessage(limit)}
	}
	p.reached = stepBody
	p.subject, p.peerTrusted = identifyPeer(r, snap, route, peer, peerOK, pl.tokens)
	if route.Provider != nil {
		if a := pl.llmCall(p); a.given() {
			return p, a
		}
	}
	p.reached = stepCall
	if p.headersOnly {
		p.reached = stepChecks
		return p, answer{}
	}
	if route.Idempotency != nil {
		read, idem, status, msg := readIdempotency(pl.w, p.r, route)
		if status != 0 {
			return p, answer{status: status, msg: msg}
		}
		p.r, p.idem = read, idem
	}
	if p.call != nil {
		p.subject.Model = p.call.req.Model
	}
	if p.idem != nil {
		p.idem.scope(route, p.r, &p.subject)
	}
	// A policy that needs a key the request lacks answers 401, but only
	// after the policies that can judge the request have: each guess costs
	// its per-IP tokens, so keys cannot be guessed without limit.
	var cost func(policies.Cost) int64
	if p.call != nil {
		cost = p.call.costFor()
	}
	p.buildChecks(cost)
	p.reserve = p.call != nil || route.InFlight
	p.reached = stepChecks
	return p, answer{}
}

// quota plans a request for the quota report. The route's policies that
// need no API key judge it first, each taking one request as any request
// of the route would, so that the report answers no more key guesses than
// the route does; serveQuota answers once they let it through (401 for a
// key it does not know).
func (pl *planner) quota(p *plan, peer netip.Addr, peerOK bool) answer {
	r, route := p.r, p.route
	if msg := keyInputProblem(r, route, keyHeaders(p.snap, route)); msg != "" {
		return answer{status: http.StatusBadRequest, msg: msg}
	}
	p.reached = stepBody
	p.subject, p.peerTrusted = identifyPeer(r, p.snap, route, peer, peerOK, pl.tokens)
	p.reached = stepCall
	pols := make([]*policies.Policy, 0, len(route.Policies))
	for _, pol := range route.Policies {
		reads := pol.Reads
		if reads.Tenant || reads.APIKey || reads.Model || pol.Cost != policies.CostRequests || pol.Rule.Algorithm.InFlight() {
			continue // the report peeks at the key's own; the rest count what a call costs or holds
		}
		pols = append(pols, pol)
	}
	p.checks, p.costs, _ = checksInto(p.checkBuf[:0], p.costBuf[:0], r, pols, &p.subject, nil)
	p.quota = true
	p.reached = stepChecks
	return answer{}
}

// llmCall is the plan's llm step: an upgrade refused on a route that counts
// tokens, and for a call (cheap before costly) first what its headers
// decide, then its body read and its tokens counted.
func (pl *planner) llmCall(p *plan) answer {
	r, route := p.r, p.route
	if msg := refuseUpgrade(r, route); msg != "" {
		return answer{status: http.StatusBadRequest, msg: msg}
	}
	ep, a := endpoint(r, route)
	if a.given() {
		return a
	}
	p.endpoint, p.isCall = ep, isCall(ep, route)
	if !p.isCall {
		return answer{}
	}
	p.kind = ep.Kind
	// Judged by its headers: the policies not keyed on the model, each
	// taking one.
	pols := make([]*policies.Policy, 0, len(route.Policies))
	for _, pol := range route.Policies {
		if !pol.Reads.Model { // keyed by the model: known only from the body
			pols = append(pols, pol)
		}
	}
	// In the plan's arrays: the checks after the body are built there
	// later, and only the peek's decisions are kept.
	one := func(policies.Cost) int64 { return 1 }
	checks, costs, rejectedBy := checksInto(p.checkBuf[:0], p.costBuf[:0], r, pols, &p.subject, one)
	if rejectedBy != nil || p.subject.TokenRefused != nil {
		// A missing or unknown key: the policies that count requests decide
		// it (each guess costs its share, as on any route), then 401, or 429
		// when one of them refused. Its body is never read.
		p.headersOnly, p.rejectedBy = true, rejectedBy
		p.checks, p.costs = requestChecks(checks, costs)
		return answer{}
	}
	if pl.h != nil {
		var refused bool
		if p.peeked, refused = pl.h.peekBeforeBody(pl.w, p, pl.rep, checks, costs); refused {
			return answer{written: true}
		}
	}
	if !pl.readBody {
		p.bodyUnread = true
		return answer{}
	}
	return pl.readCall(p)
}

// readCall reads an llm call's body and counts its tokens, at most the
// Handler's slots at a time (Explain counts at once), and fits the call to
// its route (see forRoute).
func (pl *planner) readCall(p *plan) answer {
	if p.endpoint.Bound == llm.BoundFixed {
		// The operator declared its cost: its body is forwarded unread.
		p.call = &llmCall{fixed: p.endpoint, delivered: chargeDelivered(p.route)}
		return answer{}
	}
	rq, body, status, msg := readBodyUpTo(pl.w, p.r, bodyLimit(p.route, p.r.Method, p.r.URL.Path))
	if status != 0 {
		return answer{status: status, msg: msg}
	}
	var lim reserver // none in Explain: a stream's later windows are never granted
	release := func() {}
	if h := pl.h; h != nil && len(body) > countWithoutSlot {
		var ok bool
		if release, ok = h.tokenize.enter(p.r.Context()); !ok {
			if p.r.Context().Err() != nil {
				return answer{status: statusClientClosed}
			}
			return answer{status: http.StatusServiceUnavailable, retry: true,
				msg: fmt.Sprintf("the gateway is counting the tokens of %d other calls and none finished within %s; retry shortly",
					cap(h.tokenize.slots), h.tokenize.wait)}
		}
	}
	var pace llm.Pace // Explain counts at once
	if pl.h != nil {
		lim = pl.h.limiter
		if c := p.snap.Config; c != nil { // nil in a snapshot built by hand: no pause
			pace = pl.h.countPace
			pace.Share = c.Server.PromptCountShare
		}
	}
	out, call, status, msg := func() (*http.Request, *llmCall, int, string) {
		defer release()
		return readLLMCall(pl.w, rq, p.kind, p.route, p.snap.Prices, pace)
	}()
	if status != 0 {
		return answer{status: status, msg: msg}
	}
	if pl.h != nil && call.unpriced {
		pl.h.unpriced.warn(pl.h.log, call.req.Model)
	}
	if status, msg := call.forRoute(out, p.route, lim); status != 0 {
		return answer{status: status, msg: msg}
	}
	p.r, p.call = out, call
	return answer{}
}

// requestChecks returns the checks (and their costs) of the policies that
// count requests.
func requestChecks(checks []limiter.Check, costs []policies.Cost) ([]limiter.Check, []policies.Cost) {
	var rc []limiter.Check
	var rcost []policies.Cost
	for i, c := range checks {
		if costs[i] == policies.CostRequests {
			rc, rcost = append(rc, c), append(rcost, costs[i])
		}
	}
	return rc, rcost
}

func tooLargeMessage(limit int64) string {
	return "request body exceeds this route's limit of " + strconv.FormatInt(limit, 10) + " bytes"
}
