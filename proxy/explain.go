package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ratelimit-gateway/gateway/jwtauth"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
	"github.com/ratelimit-gateway/gateway/proxy/pool"
)

// ExplainOptions tune Explain. The zero value reads no body and names no
// Redis keys.
type ExplainOptions struct {
	// ReadBody makes Explain read r's body as ServeHTTP would: on an llm
	// route the call's model and tokens (and a body the gateway refuses),
	// on an idempotent route its size. False leaves the body alone: r's
	// ContentLength still meets max_body_bytes, and what depends on the body
	// (an llm call's token costs, a key on its model) is reported unknown.
	ReadBody bool
	// RedisKeys returns the Redis keys a check of a shared algorithm uses
	// (cmd passes redislimit.KeysFor). Nil leaves ExplainedPolicy.RedisKeys
	// empty. It must not touch the network.
	RedisKeys func(rule *limiter.Rule, key string) []string
	// Tokens verifies bearer JWTs as serving does; nil verifies HMAC
	// tokens only. It must not touch the network (a KeySet's Key never
	// does).
	Tokens *jwtauth.Verifier
	// Pools is what a running gateway knows of its pools' members; nil
	// shows them as a gateway that has just started sees them: healthy.
	Pools *pool.Pools
}

// Explanation is what the gateway would do with a request up to the
// limiter's decision: the canonical request, the route, who is asking, and
// each policy's check. Status is set when the gateway answers before the
// limiter is asked; Identity and Policies are set only when the limiter
// would be asked. The route and each policy carry their entry of the config
// as policies.Redacted shows it, beside what is particular to this request.
// Nothing in it carries an API key or another secret in clear.
type Explanation struct {
	// ReachesLimiter is true when the route's checks would go to the
	// limiter (always, for a route without policies: it then forwards).
	ReachesLimiter bool `json:"reaches_limiter"`
	// Status is the gateway's own answer before the limiter: 400, 404, 413,
	// 431 or 500. It is 0 when ReachesLimiter.
	Status int `json:"status"`
	// Reason is the answer's message, as the gateway would send it; when
	// ReachesLimiter, "" but for tenants.quota_path, where it says what
	// answers once the limiter lets the request through.
	Reason string `json:"reason"`
	// QuotaStatus, for tenants.quota_path on a route that answers it, is
	// the gateway's answer once the limiter lets the request through: 200
	// (the report) or 401 (no known key); 0 for any other request.
	QuotaStatus int              `json:"quota_status,omitempty"`
	Request     ExplainedRequest `json:"request"`
	// Route is the route that takes the request; nil when none does (404)
	// or the request was refused before routes were tried.
	Route    *ExplainedRoute    `json:"route"`
	Identity *ExplainedIdentity `json:"identity"`
	// Policies are the route's policies in order; empty before the limiter.
	Policies []ExplainedPolicy `json:"policies"`
	// RejectedBy names the first policy whose key the request lacks under
	// on_missing_key: reject: the answer is then 401, after the other
	// policies counted the request (429 if one of them denies it).
	RejectedBy  string                `json:"rejected_by"`
	LLM         *ExplainedLLM         `json:"llm"`
	Idempotency *ExplainedIdempotency `json:"idempotency"`
}

// ExplainedRequest is the request as received and in its canonical form.
type ExplainedRequest struct {
	Method string `json:"method"`
	Host   string `json:"host"`
	// Target is the request target as received (RequestURI).
	Target string `json:"target"`
	// Peer is the socket peer (RemoteAddr).
	Peer string `json:"peer"`
	// Path and Query are the canonical forms every later step reads; Path
	// is "" when the path is refused.
	Path  string `json:"path"`
	Query string `json:"query"`
	// RemovedHeaders are removed before anything reads them: hop-by-hop
	// headers, and client-address headers from an untrusted peer.
	RemovedHeaders []string `json:"removed_headers"`
}

// ExplainedRoute is the route that takes the request: its entry of routes
// and where the request would go.
type ExplainedRoute struct {
	Name string `json:"name"`
	// UpstreamPath is the path and query the upstream receives: strip_prefix
	// removed, the rest joined to the upstream's base path.
	UpstreamPath string `json:"upstream_path"`
	// Pool is the route's upstreams; nil when it has one.
	Pool *ExplainedPool `json:"pool,omitempty"`
	// Config is the route's entry of routes, defaults applied, as
	// policies.Redacted shows it (the config's own keys: upstream, match,
	// timeout, idempotency ..., no secret); nil for a route of a snapshot
	// built without a config.
	Config map[string]any `json:"config"`
}

// ExplainedPool is a route's pool of upstreams.
type ExplainedPool struct {
	Balance string            `json:"balance"`
	Members []ExplainedMember `json:"members"`
	// HashKey is balance: hash's key as written; HashPick the member this
	// request's key goes to while every member is in ("" when the request
	// lacks the key: it is balanced in turn).
	HashKey  string `json:"hash_key,omitempty"`
	HashPick string `json:"hash_pick,omitempty"`
	// Retries says whether the route retries on another member, and how
	// many members one request may try.
	Retries  bool `json:"retries"`
	Attempts int  `json:"attempts,omitempty"`
	// LiveHealth is true when the members' health is a running gateway's;
	// false: as a gateway that has just started sees them.
	LiveHealth bool `json:"live_health"`
}

// ExplainedMember is one member of a pool: its name, its URL redacted, and
// its health (healthy, ejected, held or down).
type ExplainedMember struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	Weight   int    `json:"weight"`
	Protocol string `json:"protocol"`
	Health   string `json:"health"`
}

// ExplainedIdentity is who the gateway takes the client to be.
type ExplainedIdentity struct {
	// ClientIP is the client after trusted proxies; ClientNet groups it by
	// the configured prefix and is what an ip key reads.
	ClientIP  string `json:"client_ip"`
	ClientNet string `json:"client_net"`
	// PeerTrusted is true when the socket peer is a trusted proxy, whose
	// ChainHeader (X-Forwarded-For or Forwarded) was read.
	PeerTrusted bool   `json:"peer_trusted"`
	ChainHeader string `json:"chain_header"`
	// APIKeyPresented says whether the request carries an API key, in
	// APIKeyHeader. The key itself is never shown: APIKeySHA256 is the first
	// 8 hex digits of its SHA-256 (an api_key key part is the whole digest).
	APIKeyPresented bool   `json:"api_key_presented"`
	APIKeyHeader    string `json:"api_key_header"`
	APIKeySHA256    string `json:"api_key_sha256"`
	// Credential is what identified the caller: "api_key" (a known key),
	// "jwt" (a verified token), or "" (neither).
	Credential string `json:"credential"`
	// TokenRefused is why a presented JWT was refused (its reason, as the
	// 401 and the metrics name it); "" when none was or it passed.
	TokenRefused string `json:"token_refused"`
	// Tenant and Plan are the caller's (a known key's or a verified
	// token's claims); "" for none.
	Tenant string `json:"tenant"`
	Plan   string `json:"plan"`
	// Model is the model an llm call asks for, when its body was read.
	Model string `json:"model"`
}

// The outcomes of a policy for one request (ExplainedPolicy.Outcome).
const (
	OutcomeChecked   = "checked"   // counted under its own key
	OutcomeAnonymous = "anonymous" // key missing: the one shared anonymous bucket
	OutcomeSkipped   = "skipped"   // key missing: the policy does not apply
	OutcomeRejects   = "rejects"   // key missing: 401, after the others counted it
	OutcomeUnknown   = "unknown"   // the key reads a body that was not read
)

// ExplainedPolicy is one policy's check of the request: the facts of this
// request, beside the policy's entry of policies.
type ExplainedPolicy struct {
	Name string `json:"name"`
	// Key is the bucket key for people: its parts joined by "+", a digest
	// part as sha256:HEX, and a part carrying an API key or a credential
	// header as redacted:sha256:HEX (16 hex digits of its SHA-256). "" unless
	// Outcome is checked.
	Key     string `json:"key"`
	Outcome string `json:"outcome"`
	// Plan is the tenant's plan when the policy has a limit for it
	// (config.plans); "" when the policy's own limit applies.
	Plan string `json:"plan"`
	// Units is what this request takes, in the unit of config.cost (usd in
	// micro-dollars); 0 when unknown (an llm call whose body was not read)
	// or not counted.
	Units int64 `json:"units"`
	// Shadow is true when the check is decided and reported, never
	// enforced: the policy's mode or the config's is shadow.
	Shadow bool `json:"shadow"`
	// RedisKeys are the keys the check uses on Redis (see
	// ExplainOptions.RedisKeys).
	RedisKeys []string `json:"redis_keys"`
	Note      string   `json:"note"`
	// Config is the policy's entry of policies, defaults applied, as
	// policies.Redacted shows it; nil in a snapshot built without a config.
	Config map[string]any `json:"config"`
}

// ExplainedLLM is what an llm route does with the request's body.
type ExplainedLLM struct {
	// Call is true for a request that costs tokens: one to an endpoint
	// the route's provider declares as billed.
	Call bool `json:"call"`
	// Endpoint is the declared endpoint the request reaches ("POST
	// /v1/chat/completions"), "" for none.
	Endpoint string `json:"endpoint,omitempty"`
	API      string `json:"api"`
	// BodyRead says whether the body was read; without it the tokens below
	// are unknown (0).
	BodyRead bool `json:"body_read"`
	// BeforeBody is true for a call that lacks a key a policy needs: it is
	// answered before its body is read (401, or 429 from a policy that
	// counts requests), so its body is never read.
	BeforeBody bool   `json:"before_body"`
	Model      string `json:"model"`
	// PromptTokens and MaxOutput are what the call reserves: its prompt, and
	// its output cap or the cap it is given (the route's
	// default_max_tokens, or its model family's).
	PromptTokens int64 `json:"prompt_tokens"`
	MaxOutput    int64 `json:"max_output"`
	// Price is the entry of prices a usd policy prices the call by, and
	// the tiers it is reserved at (see priceNote); "" on a route without
	// one.
	Price string `json:"price,omitempty"`
	Note  string `json:"note"`
}

// ExplainedIdempotency is what the route's idempotency block (its
// config.idempotency) makes of the request.
type ExplainedIdempotency struct {
	// Applies is true when the request's method is one of the block's
	// methods.
	Applies bool `json:"applies"`
	// Present is true when the request carries a valid key, Key.
	Present bool   `json:"present"`
	Key     string `json:"key"`
	// NeedsAPIKey is true when the block has require_api_key and the
	// request lacks a known API key (401 once the policies have judged it).
	NeedsAPIKey bool `json:"needs_api_key"`
	// Scope is the route and who the key belongs to ("route:NAME" and
	// tenant:NAME, key:sha256:HEX for an unknown API key, or ip:NETWORK
	// without a key); ScopedKey the store's key: scope, method, path and key.
	Scope     string `json:"scope"`
	ScopedKey string `json:"scoped_key"`
}

// Explain renders the plan ServeHTTP makes of r under snap, built by the
// same function (see plan): header size, canonical request, quota path,
// route match, key inputs, body size, the llm call and idempotency key
// (bodies only with opts.ReadBody), identity, the checks, and for each
// check what the limiter would read. It decides nothing, takes nothing
// from any bucket, asks no store and forwards nothing: the peek a served
// llm call gets before its body is read is the one step it leaves out. It
// may read r's body (ReadBody). It is safe for concurrent use.
func Explain(snap *policies.Snapshot, r *http.Request, opts ExplainOptions) Explanation {
	e := Explanation{
		Request:  ExplainedRequest{Method: r.Method, Host: r.Host, Target: r.RequestURI, Peer: r.RemoteAddr, RemovedHeaders: []string{}},
		Policies: []ExplainedPolicy{},
	}
	if !opts.ReadBody || r.Body == nil {
		noBody := *r
		noBody.Body = http.NoBody // ContentLength stays: max_body_bytes still meets it
		r = &noBody
	}
	pl := planner{readBody: opts.ReadBody, tokens: hmacOnly}
	if opts.Tokens != nil {
		pl.tokens = &tokens{v: opts.Tokens, now: time.Now}
	}
	if snap != nil {
		pl.maxHeaderBytes = headerLimit(snap)
	}
	p, early := pl.plan(snap, r)
	if p.reached >= stepCanonical {
		e.Request.Path, e.Request.Query = p.r.URL.EscapedPath(), p.r.URL.RawQuery
		for name := range p.in.Header {
			if _, kept := p.r.Header[name]; !kept {
				e.Request.RemovedHeaders = append(e.Request.RemovedHeaders, name)
			}
		}
		slices.Sort(e.Request.RemovedHeaders)
	}
	route := p.route
	if route != nil {
		e.Route = explainRoute(p.r, snap, route)
		if route.Pool != nil {
			e.Route.Pool = explainPool(p, opts.Pools)
		}
	}
	if route != nil && route.Provider != nil && p.reached >= stepBody {
		e.LLM = explainLLM(p, opts.ReadBody)
	}
	if route != nil && route.Idempotency != nil && p.reached >= stepCall {
		e.Idempotency = explainIdempotency(p)
	}
	if early.given() {
		return e.answer(early.status, early.msg)
	}

	e.ReachesLimiter = true
	e.Identity = explainIdentity(p)
	secrets := credentials(p)
	bodyUnknown := p.headersOnly || p.bodyUnread
	next := 0
	for _, pol := range route.Policies {
		var check *limiter.Check
		if next < len(p.checks) && p.checks[next].Rule == pol.Rule { // buildChecks keeps the policies' order
			check = &p.checks[next]
			next++
		}
		ep := explainPolicy(pol, check, p, secrets, bodyUnknown, opts.RedisKeys)
		if ep.Outcome == OutcomeRejects && e.RejectedBy == "" {
			e.RejectedBy = ep.Name
		}
		e.Policies = append(e.Policies, ep)
	}
	if p.quota {
		// serveQuota reads the key where any client SDK sends it.
		e.RejectedBy = ""
		if s, _ := identify(p.r, snap, anySDKRoute, pl.tokens); s.Tenant == nil {
			e.QuotaStatus = http.StatusUnauthorized
			e.Reason = "tenants.quota_path: once the route's policies that need no key let it through, 401: the quota report needs a known API key"
		} else {
			e.QuotaStatus = http.StatusOK
			e.Reason = "tenants.quota_path: once the route's policies that need no key let it through, the gateway answers with the tenant's quota report itself, taking nothing more"
		}
	}
	return e
}

// explainLLM is what an llm route does with the plan's request.
func explainLLM(p *plan, bodyRead bool) *ExplainedLLM {
	el := &ExplainedLLM{BodyRead: bodyRead, Call: p.isCall}
	if ep := p.endpoint; ep != nil {
		el.Endpoint = ep.Method + " " + ep.Path
	}
	if p.isCall && p.kind != 0 {
		el.API = p.kind.String()
	}
	switch {
	case !p.isCall:
		el.Note = "not an llm call (only the endpoints its provider declares as billed cost tokens): each policy takes 1"
	case p.call != nil && p.call.fixed != nil:
		el.Note = "an endpoint the operator declared at a fixed cost per call (routes[].endpoints): each token policy takes its tokens, each usd policy its dollars"
	case p.headersOnly:
		el.BeforeBody = true
		el.Note = "a call without the key a policy needs is answered before its body is read: the policies that count requests decide it, then 401"
	case p.bodyUnread:
		el.Note = "token costs and the model come from the body, which was not read: the call reserves its prompt's tokens plus its output cap (or the cap it is given: default_max_tokens, or the model family's)"
	case p.call != nil:
		el.Model, el.PromptTokens, el.MaxOutput = p.call.req.Model, p.call.req.PromptTokens, p.call.maxOutput
		el.Price = p.call.priceNote(p.route)
	}
	return el
}

func (e Explanation) answer(status int, reason string) Explanation {
	e.Status, e.Reason = status, reason
	return e
}

// headerLimit is the header limit serve gives the Handler: the config's,
// DefaultMaxHeaderBytes for 0, none for a negative one.
func headerLimit(snap *policies.Snapshot) int {
	limit := 0
	if snap.Config != nil {
		limit = snap.Config.Server.MaxHeaderBytes
	}
	if limit == 0 {
		limit = DefaultMaxHeaderBytes
	}
	return limit
}

func explainRoute(r *http.Request, snap *policies.Snapshot, route *policies.Route) *ExplainedRoute {
	er := &ExplainedRoute{Name: route.Name}
	if rc, ok := snap.RouteConfig(route); ok {
		er.Config = shown(rc)
	}
	if route.Upstream == nil {
		return er
	}
	// What rewrite does to the outbound URL: strip_prefix, then SetURL.
	u := *r.URL
	if route.StripPrefix != "" {
		stripPrefix(&u, route.StripPrefix)
	}
	pr := &httputil.ProxyRequest{In: r, Out: &http.Request{URL: &u, Header: http.Header{}}}
	pr.SetURL(route.Upstream)
	er.UpstreamPath = pr.Out.URL.RequestURI()
	return er
}

// explainPool shows the plan's route's pool, its members' health as pools
// knows it, and where balance: hash sends the request.
func explainPool(p *plan, pools *pool.Pools) *ExplainedPool {
	cfg := p.route.Pool
	ep := &ExplainedPool{Balance: string(cfg.Balance), HashKey: cfg.HashKeySpec, Retries: cfg.Retry != nil, LiveHealth: pools != nil}
	if cfg.Retry != nil {
		ep.Attempts = cfg.Retry.Attempts
	}
	var st *pool.State
	if pools != nil {
		st = pools.For(p.snap, p.route)
	}
	for i, m := range cfg.Members {
		health := string(pool.Healthy)
		if st != nil {
			health = string(st.Member(i).HealthAt(pools.Now()))
		}
		ep.Members = append(ep.Members, ExplainedMember{
			Name: m.Name, URL: shownURL(m.URL), Weight: m.Weight, Protocol: string(m.Protocol), Health: health,
		})
	}
	if cfg.HashKey != nil && p.reached >= stepBody {
		if key, ok := cfg.HashKey(p.r, &p.subject); ok {
			if st == nil {
				st = pool.New(pool.Config{}).For(p.snap, p.route)
			}
			ep.HashPick = cfg.Members[st.HashPick(key)].Name
		}
	}
	return ep
}

// shownURL is an upstream's URL redacted, or builtin:NAME for a built-in
// one that is not started (a placeholder).
func shownURL(u *url.URL) string {
	if name, ok := strings.CutPrefix(u.Hostname(), "builtin."); ok && strings.HasSuffix(name, ".invalid") {
		return "builtin:" + strings.TrimSuffix(name, ".invalid")
	}
	return policies.RedactURL(u.String())
}

// shown is a config entry as policies.Redacted shows it.
func shown(v any) map[string]any {
	m, _ := policies.Redacted(v).(map[string]any)
	return m
}

// explainIdempotency is what the route's idempotency block makes of the
// plan's request.
func explainIdempotency(p *plan) *ExplainedIdempotency {
	ei := &ExplainedIdempotency{Applies: p.route.Idempotency.Applies(p.r.Method)}
	if idem := p.idem; idem != nil && p.reached >= stepChecks {
		ei.Present, ei.Key = true, idem.clientKey
		ei.Scope = "route:" + p.route.Name + " " + idem.who
		ei.NeedsAPIKey = idem.needsKey(&p.subject)
		ei.ScopedKey = strings.ReplaceAll(idem.key, "\x00", " ")
	}
	return ei
}

func explainIdentity(p *plan) *ExplainedIdentity {
	s := &p.subject
	ei := &ExplainedIdentity{PeerTrusted: p.peerTrusted, Model: s.Model}
	if s.ClientIP.IsValid() {
		ei.ClientIP = s.ClientIP.String()
	}
	if s.ClientNet.IsValid() {
		ei.ClientNet = s.ClientNet.String()
	}
	if p.peerTrusted {
		ei.ChainHeader = "X-Forwarded-For"
		if p.snap.Identity.UseForwarded {
			ei.ChainHeader = "Forwarded"
		}
	}
	if s.APIKey != "" {
		ei.APIKeyPresented = true
		for _, h := range keyHeaders(p.snap, p.route) {
			if apiKey(p.r, h) == s.APIKey {
				ei.APIKeyHeader = h
				break
			}
		}
		sum := sha256.Sum256([]byte(s.APIKey))
		ei.APIKeySHA256 = hex.EncodeToString(sum[:4])
	}
	if s.Tenant != nil {
		ei.Tenant, ei.Plan = s.Tenant.Name, s.Tenant.Plan
	}
	ei.Credential = s.Credential
	if s.TokenRefused != nil {
		ei.TokenRefused = s.TokenRefused.Reason
	}
	return ei
}

// credentials are the values a shown key must not carry in clear: the API
// key, the headers that carry keys or credentials, and the configured
// values the route matches headers with (match.headers, which the config
// views redact: a header equal to a shared secret guards a route).
func credentials(p *plan) []string {
	var vs []string
	if p.subject.APIKey != "" {
		vs = append(vs, p.subject.APIKey)
	}
	for _, h := range append(keyHeaders(p.snap, p.route), "Authorization", "X-Api-Key", "Cookie") {
		if v := strings.TrimSpace(p.r.Header.Get(h)); v != "" {
			vs = append(vs, v)
		}
	}
	for _, hm := range p.route.Match.Headers {
		if hm.Value != "" {
			vs = append(vs, hm.Value)
		}
	}
	return vs
}

func explainPolicy(p *policies.Policy, check *limiter.Check, pl *plan, secrets []string, bodyUnknown bool, redisKeys func(*limiter.Rule, string) []string) ExplainedPolicy {
	s := &pl.subject
	ep := ExplainedPolicy{Name: p.Name(), Shadow: p.Rule.Shadow, RedisKeys: []string{}}
	if c := pl.snap.Config; c != nil {
		if pc, ok := c.Policies[ep.Name]; ok {
			ep.Config = shown(pc)
		}
	}
	if s.Tenant != nil {
		if _, ok := p.Plans[s.Tenant.Plan]; ok {
			ep.Plan = s.Tenant.Plan
		}
	}
	switch {
	case bodyUnknown && p.Reads.Model:
		ep.Outcome = OutcomeUnknown
		ep.Note = "the key has the llm call's model, read from the body"
	case check == nil && pl.quota:
		ep.Outcome = OutcomeSkipped
		ep.Note = "not decided: the quota report is judged by the route's policies that need no key, then peeks at the key's own"
	case check == nil && p.OnMissingKey == policies.MissingReject:
		ep.Outcome = OutcomeRejects
	case check == nil && pl.headersOnly:
		ep.Outcome = OutcomeSkipped
		ep.Note = "not decided: the call lacks a key, and is answered before its body is read by the policies that count requests"
	case check == nil:
		ep.Outcome = OutcomeSkipped
	case check.Key == anonymousKey:
		ep.Outcome = OutcomeAnonymous
	default:
		ep.Outcome = OutcomeChecked
		ep.Key = showKey(check.Key, secrets)
	}
	if check != nil && ep.Outcome != OutcomeUnknown {
		ep.Units = check.Units()
		if redisKeys != nil && p.Rule.Algorithm.Shared() {
			if keys := redisKeys(p.Rule, check.Key); keys != nil {
				ep.RedisKeys = keys
			}
		}
	}
	if bodyUnknown && p.Cost.CountsTokens() && ep.Outcome != OutcomeSkipped && ep.Outcome != OutcomeRejects {
		ep.Units = 0
		if ep.Note == "" {
			ep.Note = "its cost comes from the body: the call's prompt tokens plus its output cap"
		}
	}
	return ep
}

// showKey renders a bucket key for people (see ExplainedPolicy.Key).
func showKey(key string, secrets []string) string {
	parts := policies.KeyParts(key)
	for i, part := range parts {
		for _, s := range secrets {
			if strings.Contains(part, s) {
				sum := sha256.Sum256([]byte(part))
				part = "redacted:sha256:" + hex.EncodeToString(sum[:8])
				break
			}
		}
		if !utf8.ValidString(part) || strings.IndexFunc(part, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0 {
			part = strconv.QuoteToASCII(part)
		}
		parts[i] = part
	}
	return strings.Join(parts, "+")
}
