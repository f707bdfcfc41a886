package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
	"github.com/ratelimit-gateway/gateway/policies"
	"golang.org/x/net/http/httpguts"
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

var valGRPC = []string{"application/grpc"}[:1:1]

// isGRPC reports whether r is a gRPC call, by its Content-Type.
func isGRPC(r *http.Request) bool {
	ct := r.Header["Content-Type"]
	if len(ct) != 1 {
		return false
	}
	rest, ok := strings.CutPrefix(strings.ToLower(ct[0]), "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
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

// Once its route is known, a canonical request is fitted to it (fitToRoute)
// so that every later step, and the upstream, reads it one way:
//
//   - a header some route's match.headers reads has one value: sent twice
//     with different values (a case other than canonical is the same
//     name), or spelt with "_" for "-", it is refused, since the route
//     would be matched on one copy and the upstream may read another;
//   - the route's method_override header, when it names one, becomes the
//     method (route, idempotency, llm accounting, keys and forwarding all
//     read it) and is not forwarded; the request must still match the
//     same route. Every other method-override header is dropped (by
//     cleanHeader already when no route names one);
//   - an Upgrade to a protocol the route's upgrades do not name (h2c,
//     which curl --http2 offers on every request) is dropped, so that no
//     upstream can turn the connection into a tunnel past the limits.

// standardMethods are the methods RFC 9110 and RFC 5789 define.
var standardMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace,
}

// methodProblem says why the gateway will not read method as sent, or "":
// methods are case-sensitive (RFC 9110 section 9.1), but route matching
// once ignored case and many upstreams (Werkzeug, Django) upper-case them,
// so "post" would be served as POST without being judged as one.
func methodProblem(method string) string {
	up := strings.ToUpper(method)
	if up == method {
		return ""
	}
	for _, m := range standardMethods {
		if m == up {
			return fmt.Sprintf("method %q is not %s: methods are case-sensitive; send %s", method, up, up)
		}
	}
	return ""
}

// withMethod is a shallow copy of r with another method.
func withMethod(r *http.Request, method string) *http.Request {
	out := new(http.Request)
	*out = *r
	out.Method = method
	return out
}

// fitToRoute returns r fitted to route (see above), or why it is refused.
func fitToRoute(r *http.Request, snap *policies.Snapshot, route *policies.Route) (*http.Request, string) {
	if msg := matchHeaderProblem(r.Header, snap.MatchHeaders); msg != "" {
		return nil, msg
	}
	var header http.Header // r's, copied once something changes
	edit := func() http.Header {
		if header == nil {
			header = r.Header.Clone()
		}
		return header
	}
	method := r.Method
	if snap.MethodOverrides { // else cleanHeader dropped every method-override header
		for name, vs := range r.Header {
			as := spelledAs(name)
			if kindOf(as) != methodOverrideHeader && (route.MethodOverride == "" || as != route.MethodOverride) {
				continue
			}
			if name == route.MethodOverride {
				m, msg := overrideMethod(name, vs)
				if msg != "" {
					return nil, msg
				}
				method = m
			}
			delete(edit(), name)
		}
	}
	if up := r.Header["Upgrade"]; len(up) > 0 {
		if kept := allowedUpgrades(up, route.Upgrades); kept != strings.Join(up, ", ") {
			h := edit()
			if kept == "" {
				delete(h, "Upgrade")
				delete(h, "Connection")
			} else {
				h["Upgrade"] = []string{kept}
			}
		}
	}
	if header == nil && method == r.Method {
		return r, ""
	}
	out := withMethod(r, method)
	if header != nil {
		out.Header = header
	}
	if method != r.Method && snap.Match(out) != route {
		return nil, fmt.Sprintf("%s: %s takes this request off route %q, which names the header; send the method itself", route.MethodOverride, method, route.Name)
	}
	return out, ""
}

// overrideMethod reads a method_override header's values.
func overrideMethod(name string, vs []string) (string, string) {
	if len(vs) != 1 {
		return "", fmt.Sprintf("header %q appears %d times; the method it overrides with must be sent once", name, len(vs))
	}
	m := strings.TrimSpace(vs[0])
	switch {
	case !httpguts.ValidHeaderFieldName(m): // a token, as a method is
		return "", fmt.Sprintf("header %q must hold a method, got %q", name, m)
	case methodProblem(m) != "":
		return "", name + ": " + methodProblem(m)
	case m == http.MethodConnect:
		return "", "the gateway does not tunnel CONNECT requests"
	}
	return m, ""
}

// matchHeaderProblem says why h does not give each header routes are
// matched on (names, canonical) one value, or "".
func matchHeaderProblem(h http.Header, names []string) string {
	if len(names) == 0 {
		return ""
	}
	for name := range h {
		if strings.IndexByte(name, '_') < 0 {
			continue
		}
		for _, n := range names {
			if spelledAs(name) == n {
				return fmt.Sprintf("header %q is read as %q by some upstreams, and routes are matched on %s: send it once, as %s", name, n, n, n)
			}
		}
	}
	for _, n := range names {
		vs := h[n]
		for _, v := range vs[min(1, len(vs)):] {
			if v != vs[0] {
				return fmt.Sprintf("header %q appears %d times with different values; a header routes are matched on must have one value", n, len(vs))
			}
		}
	}
	return ""
}

// allowedUpgrades is the protocols of an Upgrade header that allowed (lower
// case names) holds, as sent, joined by ", "; "" for none.
func allowedUpgrades(values []string, allowed []string) string {
	var kept []string
	for _, v := range values {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			name, _, _ := strings.Cut(p, "/") // websocket, or h2c; a version after "/"
			for _, a := range allowed {
				if strings.EqualFold(name, a) {
					kept = append(kept, p)
					break
				}
			}
		}
	}
	return strings.Join(kept, ", ")
}

// errorFormat is the shape of the gateway's own answers on a route: its
// own JSON, a gRPC status, or a provider's error body, which its SDKs read
// (they raise their RateLimitError on a 429 and back off by themselves).
// A provider's is formatProvider plus its place in llm's registry: one
// byte, which a context holds without an allocation.
type errorFormat uint8

const (
	formatGateway errorFormat = iota
	// formatGRPC: a gRPC status, trailers-only (grpc.go); every gRPC
	// call's, whatever its route says.
	formatGRPC
	formatProvider
)

// providerFormat is the error format of provider p.
func providerFormat(p llm.Provider) errorFormat {
	if i := llm.ProviderIndex(p); i >= 0 {
		return formatProvider + errorFormat(i)
	}
	return formatGateway
}

// provider is the provider whose error body f is, nil for none.
func (f errorFormat) provider() llm.Provider {
	if f < formatProvider {
		return nil
	}
	if ps := llm.Providers(); int(f-formatProvider) < len(ps) {
		return ps[f-formatProvider]
	}
	return nil
}

// String is the format as the config names it (error_format).
func (f errorFormat) String() string {
	switch {
	case f == formatGRPC:
		return "grpc"
	case f.provider() != nil:
		return f.provider().Name()
	}
	return "gateway"
}

// routeErrorFormat is route's error format.
func routeErrorFormat(route *policies.Route) errorFormat {
	switch {
	case route.GRPCErrors:
		return formatGRPC
	case route.ErrorShape != nil:
		return providerFormat(route.ErrorShape)
	}
	return formatGateway
}

// errorFormatKey carries a request's errorFormat in its context; none
// means formatGateway.
type errorFormatKey struct{}

func withErrorFormat(r *http.Request, f errorFormat) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), errorFormatKey{}, f))
}

func errorFormatOf(r *http.Request) errorFormat {
	f, _ := r.Context().Value(errorFormatKey{}).(errorFormat)
	return f
}

// openAIErrors reports whether r's answers take the shape of an API whose
// SDKs are OpenAI's (OpenAI's, Azure OpenAI's).
func openAIErrors(r *http.Request) bool {
	p := errorFormatOf(r).provider()
	return p != nil && p.Headers() == llm.HeadersOpenAI
}

// keyInputProblem says why r's key inputs are ambiguous on route, or "".
// A header or query parameter a key is read from must appear once: keyed on
// one value and forwarded with several, a request could be judged as one
// caller and served as another. The API key header always counts (it picks
// the tenant and its plan); so does a header whose name differs from a key
// header only by "_" for "-", which CGI-style upstreams read as the same.
func keyInputProblem(r *http.Request, route *policies.Route, apiKeyHeaders []string) string {
	suspect, queryKeys := false, false
	for name, vs := range r.Header {
		if len(vs) > 1 || strings.IndexByte(name, '_') >= 0 {
			suspect = true
			break
		}
	}
	for _, p := range route.Policies {
		queryKeys = queryKeys || len(p.Reads.Queries) > 0
	}
	if !suspect && !queryKeys {
		return ""
	}
	keyHeaders := map[string]bool{}
	for _, h := range apiKeyHeaders {
		keyHeaders[http.CanonicalHeaderKey(h)] = true
	}
	var queries []string
	for _, p := range route.Policies {
		for _, h := range p.Reads.Headers {
			keyHeaders[h] = true
		}
		queries = append(queries, p.Reads.Queries...)
	}
	for name, vs := range r.Header {
		if len(vs) > 1 && keyHeaders[name] {
			return fmt.Sprintf("header %q appears %d times; a header the gateway keys on must appear once", name, len(vs))
		}
		if strings.IndexByte(name, '_') >= 0 {
			if as := http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-")); keyHeaders[as] {
				return fmt.Sprintf("header %q is read as %q by some upstreams; send the key once, as %s", name, as, as)
			}
		}
	}
	for _, q := range queries {
		if n := policies.QueryCount(r.URL.RawQuery, q); n > 1 {
			return fmt.Sprintf("query parameter %q appears %d times; a parameter the gateway keys on must appear once", q, n)
		}
	}
	return ""
}

// endpoint finds an llm request's endpoint in its route's provider API,
// by the path the upstream will receive (strip_prefix, then the
// upstream's own path), never by how the path ends. On a route that
// counts tokens it also refuses what the API does not declare (404) and
// what it declares refused (403), before anything reaches the upstream or
// carries the operator's key; on other routes every request goes on as
// before, and only a declared call is read as one.
func endpoint(r *http.Request, route *policies.Route) (*llm.Endpoint, answer) {
	ep := routeAPI(route).Lookup(r.Method, upstreamPath(route, r.URL.Path))
	if !countsTokens(route) {
		return ep, answer{}
	}
	what := r.Method + " " + r.URL.Path
	switch {
	case ep == nil:
		return nil, answer{status: http.StatusNotFound, msg: what + " is no endpoint the " + apiName(route) +
			" API declares: this route counts tokens, and what an unknown endpoint bills cannot be bounded"}
	case ep.Refused != "":
		return nil, answer{status: http.StatusForbidden, msg: what + " is refused on this route: " + ep.Refused}
	case ep.Stored && route.UpstreamAPIKey != "":
		return nil, answer{status: http.StatusForbidden, msg: what + " is refused on this route: it reaches objects the provider stores under the route's upstream key, which every tenant shares"}
	}
	return ep, answer{}
}

// isCall reports whether a request to ep on route costs more than one
// request: its body is read and its cost reserved and settled. On a route
// that counts no tokens only the text APIs are read (for a key on the
// model), as before endpoints were declared.
func isCall(ep *llm.Endpoint, route *policies.Route) bool {
	switch {
	case ep == nil || ep.Refused != "":
		return false
	case !countsTokens(route):
		return ep.Bound == llm.BoundFixed || ep.Bound == llm.BoundTokens && ep.Kind <= llm.AnthropicMessages
	}
	return ep.Bound == llm.BoundTokens || ep.Bound == llm.BoundFixed
}

// bodyLimit is the body limit of a request to path on route: on a route
// that counts tokens, its endpoint's own where it declares one (an
// upload's), else the route's max_body_bytes.
func bodyLimit(route *policies.Route, method, path string) int64 {
	if route.Provider != nil && countsTokens(route) {
		if ep := routeAPI(route).Lookup(method, upstreamPath(route, path)); ep != nil && ep.MaxBody > 0 {
			return ep.MaxBody
		}
	}
	return route.MaxBodyBytes
}

func apiName(route *policies.Route) string { return routeAPI(route).Name }

// routeAPI is an llm route's provider API. A snapshot built by hand (in
// tests) may leave Route.API unset: it is then its provider's own, as the
// compiler would have set it.
func routeAPI(route *policies.Route) *llm.API {
	switch {
	case route.API != nil:
		return route.API
	case route.Provider != nil:
		return route.Provider.API()
	}
	return llm.OpenAI
}

// upstreamPath is the path the upstream receives for a request to path,
// as rewrite makes it: strip_prefix, then joined to the upstream's path
// as httputil.ProxyRequest.SetURL joins them.
func upstreamPath(route *policies.Route, path string) string {
	if p := route.StripPrefix; p != "" && policies.PathHasPrefix(path, p) {
		path = withSlash(path[len(p):])
	}
	base := ""
	if route.Upstream != nil {
		base = route.Upstream.Path
	}
	switch a, b := strings.HasSuffix(base, "/"), strings.HasPrefix(path, "/"); {
	case a && b:
		return base + path[1:]
	case !a && !b:
		return base + "/" + path
	}
	return base + path
}

// countsTokens reports whether a policy of route counts tokens or dollars.
func countsTokens(route *policies.Route) bool {
	for _, p := range route.Policies {
		if p.Cost.CountsTokens() {
			return true
		}
	}
	return false
}

// refuseUpgrade refuses an upgrade (a WebSocket, such as the Realtime API)
// on a route that counts tokens: what a session bills cannot be seen or
// bounded from its first request. It returns the message, "" to go on.
func refuseUpgrade(r *http.Request, route *policies.Route) string {
	if len(r.Header["Upgrade"]) == 0 || r.Header["Upgrade"][0] == "" || !countsTokens(route) {
		return ""
	}
	return "this route caps tokens, and what a " + r.Header.Get("Upgrade") + " session (such as the Realtime API) bills cannot be bounded: use the HTTP endpoints"
}

// anonymousKey is the bucket shared by every request that lacks a policy's
// key when the policy says on_missing_key: shared. The NUL byte keeps it apart
// from any key a request can produce.
const anonymousKey = "\x00anon"

// buildChecks turns the route's policies into limiter checks for p's request.
// A policy whose key is missing is skipped, shares the anonymous bucket, or
// rejects the request. A rejection does not stop the others: their checks
// are still built, so that a request answered 401 is counted by every policy
// that can judge it; rejectedBy is the first rejecting policy. An unset or
// unknown OnMissingKey behaves as MissingShared, the config's default: it
// never lets a keyless request escape the policy.
//
// cost says what the request takes from a policy; nil means one each. costs
// holds each check's policy cost, for settling an LLM call later.
//
// The checks and costs are built in p's own arrays when they are large
// enough (most routes have one or two policies): p is on the heap anyway.
func (p *plan) buildChecks(cost func(policies.Cost) int64) {
	p.checks, p.costs, p.rejectedBy = checksInto(p.checkBuf[:0], p.costBuf[:0], p.r, p.route.Policies, &p.subject, cost)
}

// planChecks is how many checks a plan holds without allocating.
const planChecks = 2

// spillChecks is how many checks a checkSpill holds.
const spillChecks = 8

// checkSpill backs the checks and costs of a route with more policies than
// a plan holds (up to spillChecks): one allocation for both, however many
// policies, rather than one each. checkPair is the same for a list of
// policies built outside a plan (checksOf), most often one or two.
type (
	checkSpill struct {
		checks [spillChecks]limiter.Check
		costs  [spillChecks]policies.Cost
	}
	checkPair struct {
		checks [planChecks]limiter.Check
		costs  [planChecks]policies.Cost
	}
)

// newChecks returns empty checks and costs with room for n each.
func newChecks(n int) ([]limiter.Check, []policies.Cost) {
	switch {
	case n <= planChecks:
		s := new(checkPair)
		return s.checks[:0], s.costs[:0]
	case n <= spillChecks:
		s := new(checkSpill)
		return s.checks[:0], s.costs[:0]
	}
	return make([]limiter.Check, 0, n), make([]policies.Cost, 0, n)
}

// checksInto is buildChecks for a list of policies, building into checks
// and costs (length 0) when their capacity holds every policy's.
func checksInto(checks []limiter.Check, costs []policies.Cost, r *http.Request, pols []*policies.Policy, s *policies.Subject, cost func(policies.Cost) int64) ([]limiter.Check, []policies.Cost, *policies.Policy) {
	if len(pols) == 0 {
		return nil, nil, nil
	}
	if cap(checks) < len(pols) || cap(costs) < len(pols) {
		checks, costs = newChecks(len(pols))
	}
	var rejectedBy *policies.Policy
	for _, p := range pols {
		var key string
		ok := false
		if p.Key != nil {
			key, ok = p.Key(r, s)
		}
		if !ok {
			switch p.OnMissingKey {
			case policies.MissingReject:
				if rejectedBy == nil {
					rejectedBy = p
				}
				continue
			case policies.MissingSkip:
				continue
			default:
				key = anonymousKey
			}
		}
		units := int64(1)
		if cost != nil {
			units = cost(p.Cost)
		}
		checks = append(checks, limiter.Check{
			Rule:  p.Rule,
			Limit: p.LimitFor(s),
			Key:   key,
			Cost:  units,
		})
		costs = append(costs, p.Cost)
	}
	return checks, costs, rejectedBy
}
