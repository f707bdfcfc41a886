package policies

import (
	"slices"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// The defaults of settings left empty (zero) in the file. The Redis
// backend's settings (redis.timeout, queue_timeout, breaker_*,
// denial_cache_size, pipelines) stay zero here: zero means the default of
// the package that owns them, which cmd fills in where it builds them.
const (
	DefaultListen             = "127.0.0.1:8080"
	DefaultReadHeaderTimeout  = 5 * time.Second
	DefaultIdleTimeout        = 120 * time.Second
	DefaultMaxHeaderBytes     = 32 << 10
	DefaultShutdownTimeout    = 15 * time.Second
	DefaultIPv4Prefix         = 32
	DefaultIPv6Prefix         = 64
	DefaultForwardedHeader    = ForwardedXFF
	DefaultPathParameters     = PathParametersReject
	DefaultUpstreamTransport  = UpstreamTransportLean
	DefaultClientServer       = ClientServerLean
	DefaultMinHeapBytes       = 64 << 20
	DefaultPromptCountShare   = 0.25
	DefaultTenantHeader       = "X-API-Key"
	DefaultRouteTimeout       = 30 * time.Second
	DefaultMaxBodyBytes       = 10 << 20
	DefaultUnsizedInput       = UnsizedInputRefuse
	DefaultStreamWindow       = 256
	DefaultChargeWithoutUsage = ChargeReserved
	DefaultLLMMaxBodyBytes    = 1 << 20
	DefaultQuotaPath          = "/v1/quota"
	DefaultPer                = time.Second
	DefaultLease              = 30 * time.Second

	DefaultAdminListen          = "127.0.0.1:9090"
	DefaultSessionTTL           = 12 * time.Hour
	DefaultLogFormat            = LogText
	DefaultMaxDelay             = 2 * time.Second
	DefaultMaxWaiters           = 100
	DefaultIdempotencyHeader    = "Idempotency-Key"
	DefaultFencingHeader        = "X-Fencing-Token"
	DefaultIdempotencyLockTTL   = 10 * time.Second
	DefaultReplayTTL            = 24 * time.Hour
	DefaultMaxResponseBytes     = 1 << 20
	DefaultIdempotencyMaxWait   = 10 * time.Second
	DefaultIdempotencyConflict  = OnConflictReject
	DefaultIdempotencyRedisMode = IdempotencyDeny
)

// QuotaPathOff is the tenants.quota_path that answers the report nowhere.
const QuotaPathOff = "off"

// DefaultUpgrades are the protocols a route lets a request upgrade to.
var DefaultUpgrades = []string{"websocket"}

// The defaults of an idempotency block's lists.
var (
	DefaultIdempotentMethods = []string{"POST", "PATCH"}
	DefaultReplayHeaders     = []string{"Content-Type", "Content-Language", "Location", "ETag", "Cache-Control"}
)

// Bounds of the idempotency stores.
const (
	// DefaultIdempotencyMaxBytes and MinIdempotencyMaxBytes bound
	// server.idempotency_max_bytes.
	DefaultIdempotencyMaxBytes = 64 << 20
	MinIdempotencyMaxBytes     = 64 << 10
	// MaxIdempotencyResponseBytes is the largest max_response_bytes: a
	// record is one value, in memory and in Redis.
	MaxIdempotencyResponseBytes = 16 << 20
)

// Bounds of the operator's settings.
const (
	// MinAdminTokenLen is the shortest admin.token: 32 characters of
	// base64 are 192 bits, out of reach of guessing at any rate.
	MinAdminTokenLen = 32
	// MaxSessionTTL bounds admin.session_ttl.
	MaxSessionTTL = 7 * 24 * time.Hour
	// MinMemoryLimitBytes is the least server.memory_limit_bytes: below
	// it the runtime would collect without pause at the gateway's own
	// baseline.
	MinMemoryLimitBytes = 32 << 20
)

// ApplyDefaults fills every zero setting that has a default. Negative values
// are left alone so that validation reports them. Policies and routes are
// written back into their map and slice, which ApplyDefaults therefore
// modifies in place.
func (c *Config) ApplyDefaults() {
	s := &c.Server
	setDefault(&s.Listen, DefaultListen)
	setDefault(&s.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDefault(&s.IdleTimeout, DefaultIdleTimeout)
	setDefault(&s.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setDefault(&s.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&s.ForwardedHeader, DefaultForwardedHeader)
	setDefault(&s.PathParameters, DefaultPathParameters)
	setDefault(&s.UpstreamTransport, DefaultUpstreamTransport)
	setDefault(&s.ClientServer, DefaultClientServer)
	setDefault(&s.IPv4Prefix, DefaultIPv4Prefix)
	setDefault(&s.IPv6Prefix, DefaultIPv6Prefix)
	setDefault(&s.MaxKeysPerPolicy, limiter.DefaultMaxKeys)
	setDefault(&s.IdempotencyMaxBytes, DefaultIdempotencyMaxBytes)
	setDefault(&s.MinHeapBytes, DefaultMinHeapBytes)
	setDefault(&s.PromptCountShare, DefaultPromptCountShare)
	s.TLS.applyDefaults()
	if s.Protocols == nil {
		s.Protocols = slices.Clone(DefaultServerProtocols)
	}
	setDefault(&s.MaxConcurrentStreams, DefaultMaxConcurrentStreams)

	setDefault(&c.Mode, ModeEnforce)
	if c.Admin.Listen == nil {
		c.Admin.Listen = new(DefaultAdminListen)
	}
	setDefault(&c.Admin.SessionTTL, DefaultSessionTTL)
	setDefault(&c.Log.Format, DefaultLogFormat)
	setDefault(&c.Log.AccessSample, 1)

	setDefault(&c.Tenants.Header, DefaultTenantHeader)
	setDefault(&c.Tenants.QuotaPath, DefaultQuotaPath)
	applyJWTDefaults(c.Tenants.JWT)

	for i := range c.Routes {
		rt := &c.Routes[i]
		setDefault(&rt.Timeout, DefaultRouteTimeout)
		if rt.LLM != "" {
			// The body is read and tokenized before the limiter decides:
			// a smaller bound keeps what one request can cost in CPU small.
			setDefault(&rt.MaxBodyBytes, DefaultLLMMaxBodyBytes)
			setDefault(&rt.UnsizedInput, DefaultUnsizedInput)
			setDefault(&rt.ErrorFormat, ErrorFormat(rt.LLM))
			setDefault(&rt.Enforce, EnforceReserve)
			if rt.Enforce == EnforceStream {
				setDefault(&rt.StreamWindow, DefaultStreamWindow)
			}
		}
		setDefault(&rt.ErrorFormat, ErrorFormatGateway)
		setDefault(&rt.UpstreamProtocol, UpstreamAuto)
		setDefault(&rt.GRPCLimitStatus, GRPCResourceExhausted)
		setDefault(&rt.RateLimitHeaders, RateLimitHeadersAll)
		setDefault(&rt.MaxBodyBytes, DefaultMaxBodyBytes)
		rt.applyPoolDefaults()
		if rt.Upgrades == nil {
			rt.Upgrades = slices.Clone(DefaultUpgrades)
		}
		if id := rt.Idempotency; id != nil {
			setDefault(&id.Header, DefaultIdempotencyHeader)
			setDefault(&id.FencingHeader, DefaultFencingHeader)
			setDefault(&id.LockTTL, DefaultIdempotencyLockTTL)
			setDefault(&id.ReplayTTL, DefaultReplayTTL)
			setDefault(&id.MaxResponseBytes, DefaultMaxResponseBytes)
			setDefault(&id.OnConflict, DefaultIdempotencyConflict)
			setDefault(&id.OnRedisError, DefaultIdempotencyRedisMode)
			if id.OnConflict == OnConflictWait {
				setDefault(&id.MaxWait, DefaultIdempotencyMaxWait)
			}
			if id.Methods == nil {
				id.Methods = slices.Clone(DefaultIdempotentMethods)
			}
			if id.ReplayHeaders == nil {
				id.ReplayHeaders = slices.Clone(DefaultReplayHeaders)
			}
		}
	}

	for name, p := range c.Policies {
		if p.Algorithm == "" {
			p.Algorithm = limiter.TokenBucket
		}
		if p.Cost == "" {
			p.Cost = CostRequests
		}
		switch {
		case p.Algorithm == limiter.SharedConcurrency:
			setDefault(&p.Lease, DefaultLease)
		case p.Algorithm.InFlight():
			// no period: a slot is held for as long as its request runs
		case p.Window == "":
			setDefault(&p.Per, DefaultPer)
		}
		if p.Burst == 0 && p.Rate != nil && *p.Rate > 0 {
			p.Burst = *p.Rate
		}
		if p.OnMissingKey == "" {
			p.OnMissingKey = MissingShared
		}
		if p.OnRedisError == "" {
			// A policy that caps spend stays a cap while Redis is down.
			p.OnRedisError = limiter.FailAllow
			if p.Cost.CountsTokens() {
				p.OnRedisError = limiter.FailDeny
			}
		}
		if p.Cost.CountsTokens() {
			setDefault(&p.ChargeWithoutUsage, DefaultChargeWithoutUsage)
		}
		if p.LocalShare == 0 && p.OnRedisError == limiter.FailLocal {
			p.LocalShare = 1
		}
		setDefault(&p.Mode, ModeEnforce)
		setDefault(&p.OnLimit, OnLimitReject)
		if p.OnLimit == OnLimitDelay {
			setDefault(&p.MaxDelay, DefaultMaxDelay)
			setDefault(&p.MaxWaiters, DefaultMaxWaiters)
		}
		c.Policies[name] = p
	}
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}
