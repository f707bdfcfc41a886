package policies

import (
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// Config is gateway.yaml as decoded. The koanf tags are the YAML keys; every
// key not listed here is an error. Defaults are filled in by ApplyDefaults
// before validation.
type Config struct {
	Server   ServerConfig            `koanf:"server"`
	Redis    RedisConfig             `koanf:"redis"`
	Tenants  TenantsConfig           `koanf:"tenants"`
	Routes   []RouteConfig           `koanf:"routes"`
	Policies map[string]PolicyConfig `koanf:"policies"`
	// Prices are what models cost, for cost: usd policies: model -> price;
	// "default" prices a model the table does not name.
	Prices map[string]PriceConfig `koanf:"prices"`
	// BuiltinPrices puts the providers' published prices (llm.ListPrices)
	// under the file's: an entry the file names replaces the built-in one.
	BuiltinPrices bool `koanf:"builtin_prices"`
	// Models bound what calls of each model family may be billed beyond
	// their text (see ModelConfig); built-in families need no entry.
	Models map[string]ModelConfig `koanf:"models"`
	// Mode is enforce (default) or shadow: every policy in shadow mode.
	Mode  Mode        `koanf:"mode"`
	Admin AdminConfig `koanf:"admin"`
	Log   LogConfig   `koanf:"log"`
	// Tracing exports OpenTelemetry traces (see TracingConfig).
	Tracing TracingConfig `koanf:"tracing"`
}

// AdminConfig is the admin listener: metrics, health, readiness and the
// admin API. It takes effect at start only.
type AdminConfig struct {
	// Listen is host:port (default 127.0.0.1:9090 when absent); "" turns
	// the listener off. A non-loopback address needs Token.
	Listen *string `koanf:"listen"`
	// Token, when set, is required as "Authorization: Bearer <token>" by
	// everything but /healthz and /readyz (keep it out of the file:
	// GATEWAY_ADMIN_TOKEN). Without it the admin API is off. It has at
	// least MinAdminTokenLen characters: a short one can be guessed.
	Token string `koanf:"token" redact:"set"`
	// SessionTTL is how long a status page login lasts (default 12h); a
	// logout ends it sooner.
	SessionTTL time.Duration `koanf:"session_ttl"`
	// Pprof serves /debug/pprof/ (with the token).
	Pprof bool `koanf:"pprof"`
	// TLS serves the admin listener with server.tls's certificates.
	TLS bool `koanf:"tls"`
	// MetricsModels are models that get a model label of their own in
	// /metrics, besides those the price table names; any other model a
	// request names is counted as "other".
	MetricsModels []string `koanf:"metrics_models"`
}

// LogConfig shapes the process log and the access log. Format takes effect
// at start only; the access log follows reloads.
type LogConfig struct {
	Format LogFormat `koanf:"format"` // text (default) or json
	// Access logs one line per request: route, policies, decision, status,
	// duration and upstream time.
	Access bool `koanf:"access"`
	// AccessSample is the fraction of requests the access log keeps
	// (default 1: all); a request that was refused or failed is always kept.
	AccessSample float64 `koanf:"access_sample"`
}

// ServerConfig holds listener settings. They take effect at start only (a
// reload that changes them is applied except for these, and says so), except
// TrustedProxies, ForwardedHeader, IPv4Prefix, IPv6Prefix, PathParameters and
// PromptCountShare, which the proxy reads from each snapshot.
type ServerConfig struct {
	Listen            string          `koanf:"listen"`              // default 127.0.0.1:8080
	ReadHeaderTimeout time.Duration   `koanf:"read_header_timeout"` // default 5s
	ReadTimeout       time.Duration   `koanf:"read_timeout"`        // default 0: none (bodies may stream)
	WriteTimeout      time.Duration   `koanf:"write_timeout"`       // default 0: none (responses may stream)
	IdleTimeout       time.Duration   `koanf:"idle_timeout"`        // default 120s
	MaxHeaderBytes    int             `koanf:"max_header_bytes"`    // default 32768 (431 beyond)
	ShutdownTimeout   time.Duration   `koanf:"shutdown_timeout"`    // default 15s
	TrustedProxies    []string        `koanf:"trusted_proxies"`     // CIDRs or addresses
	ForwardedHeader   ForwardedHeader `koanf:"forwarded_header"`    // x-forwarded-for (default) or forwarded
	IPv4Prefix        int             `koanf:"ipv4_prefix"`         // default 32
	IPv6Prefix        int             `koanf:"ipv6_prefix"`         // default 64
	MaxKeysPerPolicy  int             `koanf:"max_keys_per_policy"` // default 100000
	// IdempotencyMaxBytes bounds the in-process idempotency store (without
	// Redis): keys, and the responses kept for replay (default 64 MiB, at
	// least 64 KiB). Over it, the responses closest to expiry are dropped,
	// each leaving a done marker (docs/memory.md).
	IdempotencyMaxBytes int64 `koanf:"idempotency_max_bytes"`
	// PathParameters is what a path segment's parameters (";" and what
	// follows, as in /payments;jsessionid=x) get: reject (default: 400) or
	// strip (matched and forwarded without them).
	PathParameters PathParameters `koanf:"path_parameters"`
	// UpstreamTransport: lean (default: proxy/h1 for http:// upstreams,
	// net/http's transport for the rest) or standard (net/http's for all).
	UpstreamTransport UpstreamTransport `koanf:"upstream_transport"`
	// ClientServer: lean (default: proxy/h1's Server reads plain HTTP/1.1
	// requests, net/http's server takes the rest) or standard (net/http's
	// for all).
	ClientServer ClientServer `koanf:"client_server"`
	// MinHeapBytes lets the heap grow this far before the runtime collects
	// while little is alive (default 64 MiB; -1: Go's GOGC rule alone, as
	// does a GOGC set in the environment). See internal/heapfloor.
	MinHeapBytes int64 `koanf:"min_heap_bytes"`
	// MemoryLimitBytes is the Go runtime's soft memory limit
	// (debug.SetMemoryLimit): the heap is collected harder as the process
	// nears it. 0 (default) takes the container's cgroup memory limit less
	// a headroom (internal/memlimit), and no limit outside a limited
	// cgroup; -1 sets none. GOMEMLIMIT in the environment wins over both.
	MemoryLimitBytes int64 `koanf:"memory_limit_bytes"`
	// PromptCountShare is the share of one core the token count of one
	// long llm prompt (over 32 KiB of text) may take, in (0, 1] (default
	// 0.5; 1 counts without pausing): see llm.Pace.
	PromptCountShare float64 `koanf:"prompt_count_share"`
	// ProxyProtocol accepts a PROXY protocol header (v1 or v2) on Listen
	// and TLS.PlainListen from TrustedProxies peers, and refuses it from
	// any other.
	ProxyProtocol bool `koanf:"proxy_protocol"`
	// TLS makes Listen a TLS listener (see TLSConfig).
	TLS TLSConfig `koanf:"tls"`
	// Protocols are what the client listeners speak (default [http1,
	// h2]): http1 everywhere, h2 (HTTP/2) by ALPN on the TLS listener, h2c
	// (HTTP/2 by prior knowledge, without TLS) on the plain ones, opt-in.
	Protocols []ServerProtocol `koanf:"protocols"`
	// MaxConcurrentStreams caps the streams one HTTP/2 client connection
	// may have open at once (default 250, net/http's); each stream is a
	// request and counts against the client's policies like any other.
	MaxConcurrentStreams int `koanf:"max_concurrent_streams"`
}

// RedisConfig connects shared policies to Redis. Empty Addrs and no Sentinel:
// no Redis, local policies only.
type RedisConfig struct {
	// Addrs: one address is a standalone server, several are a Redis Cluster.
	// "host:port", "redis://host:port" or "rediss://host:port" (TLS).
	Addrs    []string       `koanf:"addrs" redact:"url"`
	Sentinel SentinelConfig `koanf:"sentinel"`
	Username string         `koanf:"username" redact:"set"`
	Password string         `koanf:"password" redact:"set"`
	TLS      bool           `koanf:"tls"`
	PoolSize int            `koanf:"pool_size"` // default 10 per CPU (go-redis)
	// Timeout bounds one decision's round trip (default 30ms). It starts once
	// the decision has a round-trip slot (pool_size of them).
	Timeout time.Duration `koanf:"timeout"`
	// QueueTimeout bounds the wait for a round-trip slot; a decision still
	// waiting then is denied with 429 (default 250ms).
	QueueTimeout time.Duration `koanf:"queue_timeout"`
	// Breaker: after BreakerFailures consecutive failures Redis is not asked
	// for BreakerCooldown; then one probe decides whether it is back.
	BreakerFailures int           `koanf:"breaker_failures"` // default 3
	BreakerCooldown time.Duration `koanf:"breaker_cooldown"` // default 500ms
	// DenialCacheSize bounds the keys remembered as denied (default 100000).
	DenialCacheSize int `koanf:"denial_cache_size"`
	// Pipelines is how many shared pipelines may carry decisions to Redis
	// at once (default 4); -1 sends every decision on its own.
	Pipelines int `koanf:"pipelines"`
}

// SentinelConfig selects a Redis master through Sentinel.
type SentinelConfig struct {
	MasterName string   `koanf:"master_name"`
	Addrs      []string `koanf:"addrs" redact:"url"`
	Password   string   `koanf:"password" redact:"set"`
}

// Enabled reports whether any Redis is configured.
func (r RedisConfig) Enabled() bool { return len(r.Addrs) > 0 || r.Sentinel.MasterName != "" }

// TenantsConfig maps API keys to tenants and plans.
type TenantsConfig struct {
	Header string `koanf:"header"` // default X-API-Key
	// Keys maps an API key, or its digest written "sha256:<hex>" (see
	// KeyDigest), to its owner.
	Keys map[string]TenantConfig `koanf:"keys" redact:"omit"`
	// KeysFile names a file of API key digests, one a line, or a directory
	// of such files (docs/keys.md): for more keys than a config file holds,
	// kept apart from it (a Secret). Relative to the config file's
	// directory; reloaded with the config.
	KeysFile string `koanf:"keys_file"`
	// Certificates bind client certificate identities to tenants (mutual
	// TLS): a request without an API key takes the tenant of the first
	// entry its verified certificate matches.
	Certificates []CertificateTenantConfig `koanf:"certificates"`
	// QuotaPath answers GET with the asking key's limits and what remains
	// of them (default /v1/quota), on a request that an llm route or a
	// route with quota: true matches; "off" answers it nowhere.
	QuotaPath string `koanf:"quota_path"`
	// JWT identifies callers by a bearer JWT as well (nil: API keys only).
	JWT *JWTConfig `koanf:"jwt"`
}

// TenantConfig is one API key's owner.
type TenantConfig struct {
	Tenant string `koanf:"tenant"`
	Plan   string `koanf:"plan"`
}

// RouteConfig is one entry of routes.
type RouteConfig struct {
	Name     string      `koanf:"name"`
	Match    MatchConfig `koanf:"match"`
	Upstream string      `koanf:"upstream" redact:"url"` // http(s)://... or builtin:echo
	// Upstreams is a pool of instances, instead of Upstream (see
	// MemberConfig); Balance, HashKey, Health and Retry apply to it.
	Upstreams []MemberConfig `koanf:"upstreams"`
	// Balance is round_robin (default, by weight), least_request or hash.
	Balance Balance `koanf:"balance"`
	// HashKey is the key balance: hash spreads by, written as a policy's
	// key (tenant, header:NAME, ip, ...): one key goes to one member.
	HashKey string `koanf:"hash_key"`
	// Health ejects members that fail and, with a check, probes them.
	Health *HealthConfig `koanf:"health"`
	// Retry, when present, retries a request on another member when that
	// is safe (docs/upstreams.md); off by default.
	Retry       *RetryConfig `koanf:"retry"`
	StripPrefix string       `koanf:"strip_prefix"`
	// UpstreamProtocol is what the gateway speaks to Upstream: auto
	// (default: HTTP/1.1 to http://, ALPN's choice to https://), http1, h2
	// (https:// only) or h2c (http:// only; a plain gRPC server).
	UpstreamProtocol UpstreamProtocol `koanf:"upstream_protocol"`
	// ClientCertificate: require answers 401 to a request without a
	// client certificate that server.tls.client_ca_file verifies; "" asks
	// for none.
	ClientCertificate string        `koanf:"client_certificate"`
	Timeout           time.Duration `koanf:"timeout"`        // default 30s
	MaxBodyBytes      int64         `koanf:"max_body_bytes"` // default 10 MiB; -1: no limit
	// LLM makes the route's policies count tokens of LLM calls, naming
	// the provider API the route speaks, one of llm's registry
	// (docs/llm.md lists them), or "" (none).
	LLM LLMAPI `koanf:"llm"`
	// Deployments maps the deployments an llm route's paths name (an
	// API whose endpoints have a {deployment} segment) to the model each
	// serves, which its calls are counted and priced as. Empty: a
	// deployment is read as the model of its name.
	Deployments map[string]string `koanf:"deployments"`
	// Enforce is how an llm route holds a stream to the tenant's tokens:
	// "reserve" (default: the output cap is reserved before the call) or
	// "stream" (a window at a time as the output flows; the stream is ended
	// when the tenant has no more; docs/llm-streaming.md).
	Enforce Enforce `koanf:"enforce"`
	// StreamWindow is the output tokens a stream takes at a time under
	// enforce: stream (default 256).
	StreamWindow int64 `koanf:"stream_window"`
	// DefaultMaxTokens is the output cap a request without one is given
	// and reserves, per choice (default 0: its model family's, see
	// ModelConfig); never more than the family's max_output_tokens.
	DefaultMaxTokens int64 `koanf:"default_max_tokens"`
	// UnsizedInput is what a call whose billed input the gateway cannot
	// see gets on a route with a token or usd policy: refuse (default:
	// 400) or context_window (reserve the model's context window).
	UnsizedInput UnsizedInput `koanf:"unsized_input"`
	// DefaultServiceTier is the tier the upstream's project serves a call
	// that asks for none or for "auto" at (default: the standard tier);
	// usd policies price such a call at it.
	DefaultServiceTier string `koanf:"default_service_tier"`
	// UpstreamAPIKey, when set, replaces the client's key on the way
	// upstream: "Authorization: Bearer <key>" and no x-api-key (llm:
	// anthropic: "x-api-key: <key>" and no Authorization). Keep it out of the
	// file: GATEWAY_ROUTES_<i>_UPSTREAM_API_KEY.
	UpstreamAPIKey string `koanf:"upstream_api_key" redact:"set"`
	// ErrorFormat is how the gateway's own errors read on this route:
	// "gateway" ({"code", "message", ...}), a provider API's name (its
	// error body, which its SDKs read) or "grpc" (a gRPC status in a
	// trailers-only answer); default the llm API's own on llm routes,
	// gateway elsewhere. A gRPC call (Content-Type application/grpc...) is
	// always answered in grpc.
	ErrorFormat ErrorFormat `koanf:"error_format"`
	// GRPCLimitStatus is the gRPC status of a gRPC call refused by a
	// rate limit: resource_exhausted (default, 8) or unavailable (14).
	GRPCLimitStatus GRPCLimitStatus `koanf:"grpc_limit_status"`
	// RateLimitHeaders is which rate-limit headers responses carry: all
	// (default: RateLimit-Policy, RateLimit, X-RateLimit-*), ietf, legacy or
	// none.
	RateLimitHeaders RateLimitHeaders `koanf:"rate_limit_headers"`
	Policies         []string         `koanf:"policies"`
	// Idempotency, when present, makes requests that carry an idempotency
	// key reach the upstream once per key (docs/idempotency.md).
	Idempotency *IdempotencyConfig `koanf:"idempotency"`
	// Quota answers tenants.quota_path on this route (after its policies
	// that need no key); llm routes always do.
	Quota bool `koanf:"quota"`
	// Upgrades are the protocols a request may upgrade to on this route
	// (default [websocket]); any other Upgrade (h2c, ...) is dropped from
	// the request. [] allows none.
	Upgrades []string `koanf:"upgrades"`
	// MethodOverride names a header (X-HTTP-Method-Override) whose value
	// becomes the request's method for every step, forwarding included;
	// "" (default): method-override headers are dropped.
	MethodOverride string `koanf:"method_override"`
	// Endpoints are endpoints the operator declares on an llm route, each
	// at a fixed cost per call, ahead of the provider's own declarations:
	// one the provider refuses, or one it does not know (docs/llm.md).
	// No credential in them (methods, paths, costs): shown as they are.
	Endpoints []EndpointConfig `koanf:"endpoints" redact:"none"`
}

// EndpointConfig is an endpoint an operator declares on an llm route, at a
// fixed cost per call that the operator owns.
type EndpointConfig struct {
	// Method is the request's method (upper case after compiling).
	Method string `koanf:"method"`
	// Path is the path pattern as the upstream receives it: literal
	// segments, {name} for one segment, a last {name...} for the rest.
	Path string `koanf:"path"`
	// Tokens is what a call takes from every policy that counts tokens.
	Tokens int64 `koanf:"tokens"`
	// USD is what a call takes from every policy that counts dollars.
	USD float64 `koanf:"usd"`
}

// IdempotencyConfig is a route's idempotency block. An empty block ({})
// enables it with every default.
type IdempotencyConfig struct {
	Header  string   `koanf:"header"`  // default Idempotency-Key
	Methods []string `koanf:"methods"` // default [POST, PATCH]
	// Required: a request of those methods without the header gets 400.
	Required bool `koanf:"required"`
	// RequireAPIKey: a request that carries the header needs a known API
	// key (401 otherwise); responses are then kept for tenants only, never
	// for a client known only by its network.
	RequireAPIKey bool `koanf:"require_api_key"`
	// LockTTL is how long a key stays held when its holder stops renewing
	// it (a crashed instance, on Redis); default 10s, renewed every third.
	LockTTL   time.Duration `koanf:"lock_ttl"`
	ReplayTTL time.Duration `koanf:"replay_ttl"` // default 24h
	// MaxResponseBytes bounds a stored response body (default 1 MiB); a
	// larger one is not replayed, its duplicates get 409.
	MaxResponseBytes int64 `koanf:"max_response_bytes"`
	// ReplayHeaders are the upstream response headers kept for replay
	// (default Content-Type, Content-Language, Location, ETag, Cache-Control).
	ReplayHeaders []string `koanf:"replay_headers"`
	FencingHeader string   `koanf:"fencing_header"` // default X-Fencing-Token
	// OnConflict: reject (409, default) or wait for the first request's
	// response, up to MaxWait (default 10s).
	OnConflict OnConflict    `koanf:"on_conflict"`
	MaxWait    time.Duration `koanf:"max_wait"`
	// OnRedisError: deny (503, default) or allow (forward without the key's
	// protection).
	OnRedisError IdempotencyRedisMode `koanf:"on_redis_error"`
}

// MatchConfig selects requests for a route.
type MatchConfig struct {
	Host       string            `koanf:"host"`
	Path       string            `koanf:"path"`
	PathPrefix string            `koanf:"path_prefix"`
	Methods    []string          `koanf:"methods"`
	Headers    map[string]string `koanf:"headers" redact:"values"` // value "" or "*": present; otherwise equal
}

// PolicyConfig is one entry of policies.
type PolicyConfig struct {
	// Key: "ip", "header:NAME", "query:NAME", "api_key", "tenant", or several
	// joined with "+" ("tenant+ip").
	Key       string            `koanf:"key"`
	Algorithm limiter.Algorithm `koanf:"algorithm"` // default token_bucket
	Rate      *int64            `koanf:"rate"`      // events per Per; 0 denies all
	Per       time.Duration     `koanf:"per"`       // default 1s
	Window    Window            `koanf:"window"`    // fixed_window only: day or month (UTC calendar), instead of per
	Cost      Cost              `koanf:"cost"`      // requests (default), tokens, input_tokens, output_tokens, usd (rate in whole dollars)
	Burst     int64             `koanf:"burst"`     // default Rate
	// Limit is the number of requests in flight per key of a concurrency or
	// shared_concurrency policy (required there, an error elsewhere).
	Limit int64 `koanf:"limit"`
	// Lease is how long a shared_concurrency slot lasts on Redis unless
	// renewed (default 30s): what a crashed instance's slots are held for.
	Lease        time.Duration    `koanf:"lease"`
	Plans        map[string]int64 `koanf:"plans"` // plan -> rate (burst = rate scaled like Burst/Rate)
	OnMissingKey MissingKey       `koanf:"on_missing_key"`
	// OnRedisError is allow, deny or local; default deny for a policy
	// whose cost counts tokens or dollars (it caps spend), allow for the
	// rest.
	OnRedisError limiter.FailureMode `koanf:"on_redis_error"`
	LocalShare   float64             `koanf:"local_share"` // default 1.0 with on_redis_error: local
	// Mode is enforce (default) or shadow: evaluated and counted, its
	// would-be 429s reported, nothing blocked.
	Mode Mode `koanf:"mode"`
	// OnLimit is reject (default: 429 at once) or delay: a request over the
	// limit waits for its turn, up to MaxDelay (default 2s) and with at most
	// MaxWaiters (default 100) waiting per key, before it gets the 429.
	OnLimit    OnLimit       `koanf:"on_limit"`
	MaxDelay   time.Duration `koanf:"max_delay"`
	MaxWaiters int           `koanf:"max_waiters"`
	// ChargeWithoutUsage is what an llm call that ended without the
	// provider's usage (a cut stream) is charged: reserved (default: its
	// reservation, an upper bound of what it was billed) or delivered (its
	// prompt and the text that reached the client: less, and not a bound).
	ChargeWithoutUsage Charge `koanf:"charge_without_usage"`
}

// PriceConfig is what one model costs, in US dollars per million tokens:
// its rates at the standard tier, at each other service_tier, and past a
// long-context threshold (see prices.go for what a zero rate means).
type PriceConfig struct {
	Input        float64 `koanf:"input"`
	CachedInput  float64 `koanf:"cached_input"` // default: Input
	Output       float64 `koanf:"output"`
	CacheWrite5m float64 `koanf:"cache_write_5m"` // default: 1.25 × Input
	CacheWrite1h float64 `koanf:"cache_write_1h"` // default: 2 × Input
	AudioInput   float64 `koanf:"audio_input"`    // default: none (audio refused)
	AudioOutput  float64 `koanf:"audio_output"`   // default: none (audio refused)
	// Tiers price each service_tier other than the standard one.
	Tiers map[string]RatesConfig `koanf:"tiers"`
	// LongContext is the price past a threshold of input tokens.
	LongContext *LongContextConfig `koanf:"long_context"`
}

// RatesConfig is one tier's rates, in US dollars per million tokens, with
// the defaults of PriceConfig's.
type RatesConfig struct {
	Input        float64 `koanf:"input"`
	CachedInput  float64 `koanf:"cached_input"`
	Output       float64 `koanf:"output"`
	CacheWrite5m float64 `koanf:"cache_write_5m"`
	CacheWrite1h float64 `koanf:"cache_write_1h"`
	AudioInput   float64 `koanf:"audio_input"`
	AudioOutput  float64 `koanf:"audio_output"`
}

// LongContextConfig is the dearer price of a request whose input passes
// Threshold tokens (cache reads and writes counted).
type LongContextConfig struct {
	Threshold int64 `koanf:"threshold"`
	// WholeRequest (default true): crossing the threshold bills every
	// token, output included, at these rates; false: the input alone.
	WholeRequest *bool   `koanf:"whole_request"`
	Input        float64 `koanf:"input"`
	CachedInput  float64 `koanf:"cached_input"`
	Output       float64 `koanf:"output"`
	CacheWrite5m float64 `koanf:"cache_write_5m"`
	CacheWrite1h float64 `koanf:"cache_write_1h"`
	AudioInput   float64 `koanf:"audio_input"`
	AudioOutput  float64 `koanf:"audio_output"`
}
