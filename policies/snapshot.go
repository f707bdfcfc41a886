// Package policies owns the gateway's configuration: the model, loading it with
// koanf (file + GATEWAY_ environment overrides), strict validation, compiling
// it into an immutable Snapshot (routes, matchers, key functions, limits) and
// watching the file for changes. It never touches the network.
//
// GATEWAY_ variables are read by koanf's env provider; its transform resolves
// each name against the Config schema and the file (keys hold underscores, and
// policies and routes are named by the file). The merge after it is the
// package's own only because koanf's replaces a whole list, where a variable
// sets one field of one route.
package policies

import (
	"cmp"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
)

// Snapshot is one compiled, validated configuration. It is immutable: a reload
// builds a new one and swaps it atomically; each request reads exactly one.
type Snapshot struct {
	// Source is the file the snapshot was read from ("" when built in memory).
	Source string
	// Config is the decoded configuration the snapshot was compiled from.
	// Server and Redis settings in it take effect only at start.
	Config *Config
	// Digest is the SHA-256 of the bytes the snapshot was parsed from, and
	// of the keys file's when the config names one (zero when built with
	// Compile). The watcher skips content it has seen.
	Digest [32]byte
	// Warnings are problems that do not stop the configuration from loading
	// (a GATEWAY_ variable that names no setting, a trusted_proxies entry
	// that trusts every address). cmd logs them and "gateway check" prints
	// them.
	Warnings []*FieldError

	Identity Identity
	// StripPathParameters matches and forwards paths without their
	// segments' parameters (server.path_parameters: strip); false refuses
	// a path that has any.
	StripPathParameters bool
	Tenants             Tenants
	// Routes are tried in file order; the first match wins.
	Routes []*Route
	// MatchHeaders are the headers some route's match.headers reads
	// (canonical names): a request must send each with one value.
	MatchHeaders []string
	// MethodOverrides is true when some route names a method_override
	// header.
	MethodOverrides bool
	// Policies by name.
	Policies map[string]*Policy
	// Prices are what models cost (cost: usd policies).
	Prices Prices
	// Models are the model families llm calls are bounded by: the
	// built-in ones as the file's models changed them.
	Models llm.Models

	// routes finds the first route that takes a request without trying
	// each; nil (a snapshot built by hand) scans Routes in order.
	routes *routeIndex
	// keys is the keys file's path and digest, for the watcher; nil
	// without one.
	keys *keysSource
}

// ModelNames are the models the config names: the price table's entries
// (not its default) and admin.metrics_models, sorted, each once. Only these
// get a model label of their own in the metrics.
func (s *Snapshot) ModelNames() []string {
	var names []string
	prices := maps.Keys(s.Prices)
	if s.Config != nil {
		// The file's entries: builtin_prices does not name every model it
		// knows in the metrics.
		prices = maps.Keys(s.Config.Prices)
		names = append(names, s.Config.Admin.MetricsModels...)
	}
	for m := range prices {
		if m != DefaultPriceModel {
			names = append(names, m)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// RouteConfig returns the entry of routes rt was compiled from, defaults
// applied (the views show it through Redacted); false for a route s was not
// compiled with (a snapshot built by hand).
func (s *Snapshot) RouteConfig(rt *Route) (RouteConfig, bool) {
	if s.Config == nil {
		return RouteConfig{}, false
	}
	for i, r := range s.Routes {
		if r == rt && i < len(s.Config.Routes) {
			return s.Config.Routes[i], true
		}
	}
	return RouteConfig{}, false
}

// Identity says how the client of a request is recognised.
type Identity struct {
	// TrustedProxies are the peers whose X-Forwarded-For / Forwarded headers
	// are believed. Empty: the socket peer is always the client.
	TrustedProxies []netip.Prefix
	// UseForwarded reads the chain from the RFC 7239 Forwarded header
	// instead of X-Forwarded-For. Only one is read, so a client cannot pick
	// its address through the header its proxies pass along untouched.
	UseForwarded bool
	// IPv4Prefix and IPv6Prefix group client addresses before they become a
	// key (defaults 32 and 64: one bucket per IPv6 /64).
	IPv4Prefix int
	IPv6Prefix int
}

// ClientNet is the network a client address is keyed by (an ip key part):
// a grouped by the prefix length of its family, the default where id has
// none (one bucket per IPv4 address and per IPv6 /64: a /64 is what one
// subscriber usually gets, so per-address IPv6 limits are trivial to dodge).
// It is invalid for an invalid address.
func (id Identity) ClientNet(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	bits := cmp.Or(max(id.IPv4Prefix, 0), DefaultIPv4Prefix)
	if a.Is6() {
		bits = cmp.Or(max(id.IPv6Prefix, 0), DefaultIPv6Prefix)
	}
	p, err := a.Prefix(min(bits, a.BitLen()))
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// Tenant is who an API key belongs to.
type Tenant struct {
	Name string
	Plan string
}

// Tenants maps API keys to tenants. Read a key's tenant with Lookup.
type Tenants struct {
	// Header carries the API key (default "X-API-Key"). For "Authorization"
	// a "Bearer " prefix is removed.
	Header string
	// Keys are the entries written as the key itself.
	Keys map[string]Tenant
	// Digests are the entries written as the key's digest
	// ("sha256:<hex>"), by SHA-256: those of tenants.keys and of the keys
	// file.
	Digests map[[32]byte]Tenant
	// Certificates bind client certificate identities to tenants, in
	// config order (see LookupCertificate).
	Certificates []CertificateTenant
	// KeysFile is the keys file (or directory) read, as resolved; "" for
	// none.
	KeysFile string
	// QuotaPath is where a tenant reads its limits (GET), on a route
	// whose Quota is set; "" for none.
	QuotaPath string
	// JWT is tenants.jwt; nil when callers are known by API keys only.
	JWT *JWT
}

// Route is one compiled entry of routes.
type Route struct {
	Name  string
	Match Match
	// Upstream is where allowed requests go. A built-in upstream
	// ("builtin:echo") is already resolved to its loopback URL.
	Upstream *url.URL
	// Pool is the route's upstreams when it has several (Upstream is then
	// its first member's URL); nil when it has one.
	Pool *Pool
	// StripPrefix is removed from the path before forwarding ("" keeps it).
	StripPrefix string
	// Timeout bounds the wait for the upstream's response headers (504).
	Timeout time.Duration
	// MaxBodyBytes bounds the request body (413); 0 means no limit.
	MaxBodyBytes int64
	// ClientCertificate: a request without a verified client certificate
	// is answered 401.
	ClientCertificate bool
	// Provider is an llm route's provider API (routes[].llm): the route's
	// policies may count tokens of its calls, whose bodies are read
	// (bounded by MaxBodyBytes) before the limiter decides; its key
	// headers, upstream auth and rate-limit headers are the provider's.
	// Nil on other routes.
	Provider llm.Provider
	// DefaultMaxTokens is the output cap a request without one is given,
	// per choice; 0: its model family's.
	DefaultMaxTokens int64
	// Models are the snapshot's model families (see Snapshot.Models).
	Models llm.Models
	// UnsizedContext reserves the model's context window for input the
	// gateway cannot size; false refuses such a call (400) when a policy
	// of the route counts tokens.
	UnsizedContext bool
	// DefaultTier is the service tier a call asking for none or "auto" is
	// priced at; "" is the standard tier.
	DefaultTier string
	// UpstreamAPIKey replaces the client's API key upstream ("" forwards
	// the request's own headers).
	UpstreamAPIKey string
	// ErrorShape is the provider whose error body the gateway's own
	// answers take (error_format); nil: the gateway's own JSON.
	ErrorShape llm.Provider
	// Deployments maps a deployment a path names (Provider.Deployment) to
	// the model its calls are counted and priced as.
	Deployments map[string]string
	// GRPCErrors renders the gateway's own errors as gRPC statuses, to
	// every request (a gRPC call gets them on any route).
	GRPCErrors bool
	// GRPCLimitStatus is the gRPC status of a rate-limit refusal of a
	// gRPC call.
	GRPCLimitStatus GRPCLimitStatus
	// UpstreamProtocol is what the gateway speaks to Upstream.
	UpstreamProtocol UpstreamProtocol
	// API is an llm route's provider API with the operator's endpoints
	// first: a request's endpoint is found in its declarations alone. Nil
	// on other routes.
	API *llm.API
	// StreamWindow, when > 0, is enforce: stream: a streamed call reserves
	// its output this many tokens at a time and is ended when the tenant
	// has no more.
	StreamWindow int64
	// RateLimitHeaders is which rate-limit headers responses carry.
	RateLimitHeaders RateLimitHeaders
	// Policies apply in order.
	Policies []*Policy
	// InFlight is true when a policy of the route counts requests in flight
	// (concurrency, shared_concurrency): each request holds a slot until its
	// response ends, so the proxy reserves and settles every one.
	InFlight bool
	// Idempotency is the route's idempotency-key handling; nil when off.
	Idempotency *Idempotency
	// Quota: the route answers Tenants.QuotaPath (an llm route, or
	// quota: true).
	Quota bool
	// Upgrades are the protocols (lower case) a request may upgrade to;
	// other Upgrade headers are dropped. Empty: none.
	Upgrades []string
	// MethodOverride is the header (canonical) whose value is the
	// request's method on this route; "" for none.
	MethodOverride string
}

// Idempotency is a compiled idempotency block: requests of Methods that carry
// Header reach the upstream once per key, scoped by route, caller (tenant, an
// unknown key's digest, or the client network), method and path.
type Idempotency struct {
	Header        string   // canonical
	FencingHeader string   // canonical
	Methods       []string // upper case
	// Required: a request of Methods without Header gets 400.
	Required bool
	// RequireAPIKey: a request that carries Header needs a known API key
	// (401 otherwise), so that no response is kept for a caller known only
	// by its network.
	RequireAPIKey    bool
	LockTTL          time.Duration
	ReplayTTL        time.Duration
	MaxResponseBytes int64
	ReplayHeaders    []string // canonical
	// Wait: a duplicate of a request in progress waits up to MaxWait for
	// its response instead of getting 409.
	Wait    bool
	MaxWait time.Duration
	// FailOpen forwards requests without the key's protection when the
	// store fails, instead of answering 503.
	FailOpen bool
}

// Applies reports whether requests of method are subject to id.
func (id *Idempotency) Applies(method string) bool {
	return id != nil && slices.Contains(id.Methods, method)
}

// Match says which requests a route takes. Empty fields match anything.
type Match struct {
	Host       string // exact host (port ignored, case-insensitive) or "*.example.com"
	Path       string // exact path
	PathPrefix string
	Methods    []string
	Headers    []HeaderMatch
}

// HeaderMatch requires a header to be present or, when Value is set, to equal
// Value exactly.
type HeaderMatch struct {
	Name  string
	Value string
}

// Subject is who is asking, as worked out once per request by the proxy.
type Subject struct {
	// ClientIP is the client's address after trusted-proxy resolution.
	ClientIP netip.Addr
	// ClientNet is ClientIP grouped by the configured prefix length; its
	// string is the key of "ip" policies.
	ClientNet netip.Prefix
	// APIKey is the presented API key ("" when none).
	APIKey string
	// Tenant is the tenant of a known API key or of a verified JWT's
	// tenant_claim, or nil.
	Tenant *Tenant
	// Credential says what identified the caller: CredentialAPIKey,
	// CredentialJWT, or "" (nothing known).
	Credential string
	// Claims are a verified JWT's claims (shared: read only); nil without.
	Claims map[string]any
	// TokenRefused is why a presented JWT was refused; the request is then
	// answered 401 after the policies that need no identity counted it.
	TokenRefused *TokenRefusal
	// Model is the model an LLM call asks for (its body's "model"), on llm
	// routes; "" elsewhere.
	Model string

	// clientKey is ClientNet's string, made once by ShareClientKey for
	// every policy of a request; clientKeyOf is the network it was made of,
	// so that a Subject whose ClientNet changed since reads the new one.
	clientKey   string
	clientKeyOf netip.Prefix
}

// Credentials a Subject can be known by.
const (
	CredentialAPIKey = "api_key"
	CredentialJWT    = "jwt"
)

// TokenRefusal is a refused JWT: a reason from a fixed set (a metric label)
// and a message that never quotes the token.
type TokenRefusal struct {
	Reason, Message string
}

// ShareClientKey formats what an ip key part reads (ClientNet) once, for
// the policies of one request to share: each would format it again (a
// fifth of the cost of a policy keyed by ip).
func (s *Subject) ShareClientKey() {
	s.clientKey, s.clientKeyOf = "", netip.Prefix{}
	if s.ClientNet.IsValid() {
		s.clientKey, s.clientKeyOf = prefixString(s.ClientNet), s.ClientNet
	}
}

// clientKeyPart is what an ip key part reads: the client's network, or its
// address when it has none.
func (s *Subject) clientKeyPart() (string, bool) {
	if s.ClientNet.IsValid() {
		if s.clientKey != "" && s.clientKeyOf == s.ClientNet {
			return s.clientKey, true
		}
		return prefixString(s.ClientNet), true
	}
	if s.ClientIP.IsValid() {
		return addrString(s.ClientIP), true
	}
	return "", false
}

// prefixString and addrString are String rendered on the stack: one
// allocation, not three. (Not one generic function: through a generic's
// dictionary the buffer escapes to the heap: TestSharedClientKey.)
func prefixString(v netip.Prefix) string {
	var b [64]byte
	return string(v.AppendTo(b[:0]))
}

func addrString(v netip.Addr) string {
	var b [64]byte
	return string(v.AppendTo(b[:0]))
}

// MissingKey says what a policy does with a request that lacks its key.
type MissingKey string

// The missing-key behaviours.
const (
	MissingSkip   MissingKey = "skip"   // the policy does not apply
	MissingShared MissingKey = "shared" // all such requests share one anonymous bucket
	MissingReject MissingKey = "reject" // answer 401
)

// KeyFunc extracts a policy's key from a request. ok is false when the key is
// missing. Keys are bounded in length.
type KeyFunc func(r *http.Request, s *Subject) (key string, ok bool)

// Cost is what one request costs a policy.
type Cost string

// The costs of a request.
const (
	CostRequests     Cost = "requests"      // one per request
	CostTokens       Cost = "tokens"        // input and output tokens
	CostInputTokens  Cost = "input_tokens"  // the prompt's tokens
	CostOutputTokens Cost = "output_tokens" // the generated tokens
	CostUSD          Cost = "usd"           // the call's price, in micro-dollars (see Prices)
)

// CountsTokens reports whether the cost depends on an LLM call's tokens.
func (c Cost) CountsTokens() bool {
	return c == CostTokens || c == CostInputTokens || c == CostOutputTokens || c == CostUSD
}

// MicroUSD is one millionth of a US dollar: the unit of a cost: usd
// policy's limit (its rate in dollars times a million) and of its checks.
const MicroUSD = 1_000_000

// MaxPrice bounds a price in the file, in dollars per million tokens (a
// million times the dearest model's): a price is multiplied by client-chosen
// token counts, and the product must stay a number.
const MaxPrice = 1_000_000

// Price is what one model costs (see llm.Price).
type Price = llm.Price

// Prices names what models cost (see llm.Prices for the lookup).
type Prices = llm.Prices

// DefaultPriceModel names the entry that prices every model the table does
// not name.
const DefaultPriceModel = llm.DefaultPriceEntry

// Policy is one compiled policy.
type Policy struct {
	// Rule is what the limiter needs; shared by every check of the policy.
	Rule *limiter.Rule
	// KeySpec is the configured key ("ip", "header:X-User", "tenant+ip"...).
	KeySpec string
	Key     KeyFunc
	// Reads is what Key reads from a request, parsed once from KeySpec.
	Reads        KeyReads
	OnMissingKey MissingKey
	// Cost is what one request takes from the policy's buckets.
	Cost Cost
	// ChargeDelivered charges an llm call that ended without usage its
	// prompt and delivered text instead of its reservation.
	ChargeDelivered bool
	// Limit applies unless the subject's plan has its own entry in Plans.
	Limit limiter.Limit
	Plans map[string]limiter.Limit
	// MaxDelay, when > 0, makes a request over the limit wait for its turn
	// (on_limit: delay) for up to that long, with at most MaxWaiters
	// waiting per key, instead of a 429 at once.
	MaxDelay   time.Duration
	MaxWaiters int
}

// Name returns the policy's name.
func (p *Policy) Name() string { return p.Rule.Name }

// LimitFor returns the limit that applies to s.
func (p *Policy) LimitFor(s *Subject) limiter.Limit {
	if s != nil && s.Tenant != nil {
		if l, ok := p.Plans[s.Tenant.Plan]; ok {
			return l
		}
	}
	return p.Limit
}

// KeepsBuckets reports whether local buckets of g are still of use under
// this snapshot: the policy exists with g's limit as its limit or a plan's
// limit, or (for the fallback buckets of a shared policy) the policy exists.
// cmd passes it to limiter.Local.Retain after each reload.
func (s *Snapshot) KeepsBuckets(g limiter.BucketGroup) bool {
	p, ok := s.Policies[g.Policy]
	if !ok {
		return false
	}
	if g.Fallback {
		return true
	}
	if p.Limit == g.Limit {
		return true
	}
	for _, l := range p.Plans {
		if l == g.Limit {
			return true
		}
	}
	return false
}

// RateLimitHeaders is which rate-limit headers a route's responses carry
// (rate_limit_headers). The zero value, as a Route built without the
// config has it, is all of them.
type RateLimitHeaders string

const (
	RateLimitHeadersAll    RateLimitHeaders = "all"    // RateLimit-Policy, RateLimit and X-RateLimit-*
	RateLimitHeadersIETF   RateLimitHeaders = "ietf"   // RateLimit-Policy and RateLimit only
	RateLimitHeadersLegacy RateLimitHeaders = "legacy" // X-RateLimit-Limit, -Remaining, -Reset only
	RateLimitHeadersNone   RateLimitHeaders = "none"   // none (a 429 still carries Retry-After)
)

// IETF reports whether the set has RateLimit-Policy and RateLimit.
func (s RateLimitHeaders) IETF() bool {
	return s == "" || s == RateLimitHeadersAll || s == RateLimitHeadersIETF
}

// Legacy reports whether the set has X-RateLimit-*.
func (s RateLimitHeaders) Legacy() bool {
	return s == "" || s == RateLimitHeadersAll || s == RateLimitHeadersLegacy
}
