package policies

import (
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
)

// compile turns a defaulted, validated Config into a Snapshot. It still
// returns errors rather than trusting validation, because a Snapshot with a
// nil upstream or key function would fail on the request path instead.
func compile(c *Config, builtins map[string]*url.URL) (*Snapshot, error) {
	snap := &Snapshot{
		Config:   c,
		Identity: Identity{IPv4Prefix: c.Server.IPv4Prefix, IPv6Prefix: c.Server.IPv6Prefix, UseForwarded: c.Server.ForwardedHeader == ForwardedStandard},
		Tenants: Tenants{
			Header:       http.CanonicalHeaderKey(c.Tenants.Header),
			QuotaPath:    c.Tenants.QuotaPath,
			Keys:         make(map[string]Tenant, len(c.Tenants.Keys)),
			Certificates: compileCertificateTenants(c),
			JWT:          compileJWT(c.Tenants.JWT),
		},
		Policies:            make(map[string]*Policy, len(c.Policies)),
		StripPathParameters: c.Server.PathParameters == PathParametersStrip,
	}
	for i, tp := range c.Server.TrustedProxies {
		pfx, err := parsePrefix(tp)
		if err != nil {
			return nil, fmt.Errorf("server.trusted_proxies[%d]: %w", i, err)
		}
		snap.Identity.TrustedProxies = append(snap.Identity.TrustedProxies, pfx)
	}
	for key, tc := range c.Tenants.Keys {
		t := Tenant{Name: tc.Tenant, Plan: tc.Plan}
		d, isDigest := digestEntry(key)
		if !isDigest {
			snap.Tenants.Keys[key] = t
			continue
		}
		var sum [32]byte
		if _, err := hex.Decode(sum[:], []byte(d)); err != nil || !validDigestHex(d) {
			return nil, fmt.Errorf("tenants.keys: an entry starting with %q is not a SHA-256 digest", DigestPrefix)
		}
		if snap.Tenants.Digests == nil {
			snap.Tenants.Digests = make(map[[32]byte]Tenant)
		}
		snap.Tenants.Digests[sum] = t
	}
	snap.Prices = compilePrices(c)
	snap.Models = compileModels(c.Models)
	for name, pc := range c.Policies {
		pol, err := compilePolicy(name, pc)
		if err != nil {
			return nil, fmt.Errorf("policies.%s: %w", name, err)
		}
		pol.Rule.Shadow = pc.Mode == ModeShadow || c.Mode == ModeShadow
		if pc.OnLimit == OnLimitDelay {
			pol.MaxDelay, pol.MaxWaiters = pc.MaxDelay, pc.MaxWaiters
		}
		snap.Policies[name] = pol
	}
	for i := range c.Routes {
		rt, err := compileRoute(&c.Routes[i], snap.Policies, builtins)
		if err != nil {
			return nil, fmt.Errorf("routes[%d]: %w", i, err)
		}
		rt.Models = snap.Models
		snap.Routes = append(snap.Routes, rt)
		snap.MethodOverrides = snap.MethodOverrides || rt.MethodOverride != ""
		for _, h := range rt.Match.Headers {
			if !slices.Contains(snap.MatchHeaders, h.Name) {
				snap.MatchHeaders = append(snap.MatchHeaders, h.Name)
			}
		}
	}
	if snap.Tenants.QuotaPath == QuotaPathOff {
		snap.Tenants.QuotaPath = ""
	}
	if len(snap.Routes) >= minIndexedRoutes {
		snap.routes = newRouteIndex(snap.Routes)
	}
	return snap, nil
}

func compilePolicy(name string, pc PolicyConfig) (*Policy, error) {
	parts, err := parseKeySpec(pc.Key)
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	pol := &Policy{
		Rule: &limiter.Rule{
			Name:         name,
			Algorithm:    pc.Algorithm,
			OnRedisError: pc.OnRedisError,
			LocalShare:   pc.LocalShare,
		},
		KeySpec:         pc.Key,
		Key:             keyFunc(parts),
		Reads:           readsOf(parts),
		OnMissingKey:    pc.OnMissingKey,
		Cost:            pc.Cost,
		ChargeDelivered: pc.ChargeWithoutUsage == ChargeDelivered,
	}
	if algo := pc.Algorithm; algo.InFlight() {
		// Rate and Burst are the slots, so Quota() is and headers show them.
		// Period is the lease; an in-process slot has none, and its period
		// only keeps the limit from denying all (and is what w= shows).
		pol.Limit = limiter.Limit{Rate: pc.Limit, Period: pc.Lease, Burst: pc.Limit}
		if algo == limiter.Concurrency {
			pol.Limit.Period = limiter.SlotRetryAfter
		}
		return pol, nil
	}
	if len(pc.Plans) > 0 {
		pol.Plans = make(map[string]limiter.Limit, len(pc.Plans))
		for plan, rate := range pc.Plans {
			pol.Plans[plan] = windowed(limiter.Limit{Rate: rate, Period: pc.Per, Burst: planBurst(rate, pc)}, pc.Window)
		}
	}
	if pc.Rate != nil {
		pol.Limit = windowed(limiter.Limit{Rate: *pc.Rate, Period: pc.Per, Burst: pc.Burst}, pc.Window)
		if pol.Limit.Rate == 0 {
			pol.Limit.Burst = 0
		}
	} else {
		// Without a rate of its own, a plan-only policy holds subjects with no
		// plan (or an unlisted one) to the smallest plan: the cheapest tier
		// is the safe guess for an unknown caller.
		first := true
		for _, l := range pol.Plans {
			if first || l.Rate < pol.Limit.Rate {
				pol.Limit, first = l, false
			}
		}
	}
	if pol.Cost == CostUSD {
		// Dollars in the file, micro-dollars in the buckets: a call's price
		// is rarely a whole cent.
		pol.Limit = usdLimit(pol.Limit)
		for plan, l := range pol.Plans {
			pol.Plans[plan] = usdLimit(l)
		}
	}
	return pol, nil
}

// usdLimit turns a limit in dollars into micro-dollars.
func usdLimit(l limiter.Limit) limiter.Limit {
	scale := func(n int64) int64 {
		if n > math.MaxInt64/MicroUSD {
			return math.MaxInt64
		}
		return n * MicroUSD
	}
	l.Rate, l.Burst = scale(l.Rate), scale(l.Burst)
	return l
}

// windowed applies a policy's calendar window: a day is a 24h window (fixed
// windows of 24h are UTC days), a month the calendar month.
func windowed(l limiter.Limit, window Window) limiter.Limit {
	switch window {
	case WindowDay:
		l.Period = 24 * time.Hour
	case WindowMonth:
		l.Period, l.Calendar = limiter.MonthPeriod, limiter.CalendarMonth
	}
	return l
}

// planBurst scales the policy's burst to a plan's rate (a policy with rate
// 100 and burst 200 gives a plan of 60 a burst of 120). Without a positive
// policy rate to scale from, the burst is the plan's rate.
func planBurst(planRate int64, pc PolicyConfig) int64 {
	if planRate <= 0 {
		return 0
	}
	if pc.Rate == nil || *pc.Rate <= 0 {
		return planRate
	}
	hi, lo := bits.Mul64(uint64(planRate), uint64(pc.Burst))
	if hi >= uint64(*pc.Rate) {
		return math.MaxInt64 // the quotient would overflow; the burst is unbounded in practice
	}
	q, _ := bits.Div64(hi, lo, uint64(*pc.Rate))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return max(int64(q), 1)
}

func compileRoute(rc *RouteConfig, policies map[string]*Policy, builtins map[string]*url.URL) (*Route, error) {
	pool, err := compilePool(rc, builtins)
	if err != nil {
		return nil, err
	}
	var up *url.URL
	if pool != nil {
		up = pool.Members[0].URL
	} else if up, err = resolveUpstream(rc.Upstream, builtins); err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	rt := &Route{
		Name:              rc.Name,
		Upstream:          up,
		Pool:              pool,
		StripPrefix:       rc.StripPrefix,
		Timeout:           rc.Timeout,
		MaxBodyBytes:      max(rc.MaxBodyBytes, 0), // -1 (no limit) is 0 in the Snapshot
		ClientCertificate: rc.ClientCertificate == ClientCertificateRequire,
		Provider:          rc.LLM.Provider(),
		DefaultMaxTokens:  rc.DefaultMaxTokens,
		UnsizedContext:    rc.UnsizedInput == UnsizedInputContextWindow,
		DefaultTier:       rc.DefaultServiceTier,
		UpstreamAPIKey:    rc.UpstreamAPIKey,
		ErrorShape:        rc.ErrorFormat.Provider(),
		GRPCErrors:        rc.ErrorFormat == ErrorFormatGRPC,
		GRPCLimitStatus:   rc.GRPCLimitStatus,
		UpstreamProtocol:  rc.UpstreamProtocol,
		RateLimitHeaders:  rc.RateLimitHeaders,
		Quota:             rc.Quota || rc.LLM != "",
		Match: Match{
			Host:       strings.ToLower(strings.TrimSuffix(rc.Match.Host, ".")),
			Path:       rc.Match.Path,
			PathPrefix: rc.Match.PathPrefix,
		},
	}
	if rc.Enforce == EnforceStream {
		rt.StreamWindow = rc.StreamWindow
	}
	for _, u := range rc.Upgrades {
		rt.Upgrades = append(rt.Upgrades, strings.ToLower(u))
	}
	if rc.MethodOverride != "" {
		rt.MethodOverride = http.CanonicalHeaderKey(rc.MethodOverride)
	}
	if len(rc.Deployments) > 0 {
		rt.Deployments = maps.Clone(rc.Deployments)
	}
	if p := rc.LLM.Provider(); p != nil {
		rt.API = p.API().With(operatorEndpoints(rc.Endpoints))
	}
	for _, m := range rc.Match.Methods {
		rt.Match.Methods = append(rt.Match.Methods, strings.ToUpper(m))
	}
	for _, name := range sortedKeys(rc.Match.Headers) {
		v := rc.Match.Headers[name]
		if v == "*" {
			v = ""
		}
		rt.Match.Headers = append(rt.Match.Headers, HeaderMatch{Name: http.CanonicalHeaderKey(name), Value: v})
	}
	if id := rc.Idempotency; id != nil {
		rt.Idempotency = &Idempotency{
			Header:           http.CanonicalHeaderKey(id.Header),
			FencingHeader:    http.CanonicalHeaderKey(id.FencingHeader),
			Required:         id.Required,
			RequireAPIKey:    id.RequireAPIKey,
			LockTTL:          id.LockTTL,
			ReplayTTL:        id.ReplayTTL,
			MaxResponseBytes: id.MaxResponseBytes,
			Wait:             id.OnConflict == OnConflictWait,
			MaxWait:          id.MaxWait,
			FailOpen:         id.OnRedisError == IdempotencyAllow,
		}
		for _, m := range id.Methods {
			rt.Idempotency.Methods = append(rt.Idempotency.Methods, strings.ToUpper(m))
		}
		for _, h := range id.ReplayHeaders {
			rt.Idempotency.ReplayHeaders = append(rt.Idempotency.ReplayHeaders, http.CanonicalHeaderKey(h))
		}
	}
	for _, name := range rc.Policies {
		pol, ok := policies[name]
		if !ok {
			return nil, fmt.Errorf("unknown policy %q", name)
		}
		rt.Policies = append(rt.Policies, pol)
		rt.InFlight = rt.InFlight || pol.Rule.Algorithm.InFlight()
	}
	return rt, nil
}

// operatorEndpoints compiles a route's endpoints: each at its fixed cost.
func operatorEndpoints(ecs []EndpointConfig) []llm.Endpoint {
	var out []llm.Endpoint
	for _, ec := range ecs {
		out = append(out, llm.Endpoint{
			Method:   strings.ToUpper(ec.Method),
			Path:     ec.Path,
			Bound:    llm.BoundFixed,
			Tokens:   ec.Tokens,
			MicroUSD: int64(math.Ceil(ec.USD * 1e6)),
		})
	}
	return out
}
