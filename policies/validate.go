package policies

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/llm"
)

var policyNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// validate checks a defaulted Config, adding every problem to p.
func validate(p *problems, c *Config, builtins map[string]*url.URL) {
	validateServer(p, &c.Server)
	validateRedis(p, &c.Redis)
	validateTenants(p, &c.Tenants)
	validateJWT(p, c.Tenants.JWT)
	validateRoutes(p, c, builtins)
	validatePolicies(p, c)
	validateOperations(p, c)
	validateTracing(p, &c.Tracing)
	validateTLS(p, c)
}

func validateServer(p *problems, s *ServerConfig) {
	if _, _, err := net.SplitHostPort(s.Listen); err != nil {
		p.addf("server.listen", "must be host:port, got %q", s.Listen)
	}
	nonNegative(p, "server.read_header_timeout", s.ReadHeaderTimeout)
	nonNegative(p, "server.read_timeout", s.ReadTimeout)
	nonNegative(p, "server.write_timeout", s.WriteTimeout)
	nonNegative(p, "server.idle_timeout", s.IdleTimeout)
	nonNegative(p, "server.shutdown_timeout", s.ShutdownTimeout)
	if s.MaxHeaderBytes < 0 {
		p.add("server.max_header_bytes", "must be > 0")
	}
	for i, tp := range s.TrustedProxies {
		place := indexPlace("server.trusted_proxies", i)
		pfx, err := parsePrefix(tp)
		switch {
		case errors.Is(err, errMappedPrefixTooShort):
			p.addf(place, "%v, got %q", err, tp)
		case err != nil:
			p.addf(place, "must be a CIDR (10.0.0.0/8) or an address, got %q", tp)
		case pfx.Bits() == 0:
			// Legitimate where nothing but the proxies can reach the
			// gateway (a platform router in front), so not an error; but
			// it voids every per-IP limit otherwise, so never silent.
			family := "IPv4"
			if pfx.Addr().Is6() {
				family = "IPv6"
			}
			p.warnf(place, "%s trusts every %s address: any client can choose its own address with the forwarding header, "+
				"so per-IP limits hold only if nothing but your proxies can reach the gateway", strings.TrimSpace(tp), family)
		}
	}
	validateProtocols(p, s)
	if s.IPv4Prefix < 1 || s.IPv4Prefix > 32 {
		p.addf("server.ipv4_prefix", "must be between 1 and 32, got %d", s.IPv4Prefix)
	}
	if s.IPv6Prefix < 1 || s.IPv6Prefix > 128 {
		p.addf("server.ipv6_prefix", "must be between 1 and 128, got %d", s.IPv6Prefix)
	}
	if s.MinHeapBytes < -1 {
		p.addf("server.min_heap_bytes", "must be > 0, or -1 for Go's own rule, got %d", s.MinHeapBytes)
	}
	if s.MemoryLimitBytes < -1 || (s.MemoryLimitBytes > 0 && s.MemoryLimitBytes < MinMemoryLimitBytes) {
		p.addf("server.memory_limit_bytes", "must be at least %d (32 MiB), or 0 for the container's limit, or -1 for none, got %d", MinMemoryLimitBytes, s.MemoryLimitBytes)
	}
	if !(s.PromptCountShare > 0 && s.PromptCountShare <= 1) {
		p.addf("server.prompt_count_share", "must be more than 0 and at most 1 (a share of one core), got %v", s.PromptCountShare)
	}
	if s.MaxKeysPerPolicy < 0 {
		p.add("server.max_keys_per_policy", "must be > 0")
	}
	if s.IdempotencyMaxBytes < MinIdempotencyMaxBytes {
		p.addf("server.idempotency_max_bytes", "must be at least %d (64 KiB), got %d", MinIdempotencyMaxBytes, s.IdempotencyMaxBytes)
	}
}

func validateRedis(p *problems, r *RedisConfig) {
	for i, a := range r.Addrs {
		if err := checkRedisAddr(a); err != nil {
			p.add(indexPlace("redis.addrs", i), err.Error())
		}
	}
	sn := &r.Sentinel
	switch {
	case sn.MasterName != "" && len(sn.Addrs) == 0:
		p.add("redis.sentinel.addrs", "required with redis.sentinel.master_name")
	case sn.MasterName == "" && len(sn.Addrs) > 0:
		p.add("redis.sentinel.master_name", "required with redis.sentinel.addrs")
	}
	if sn.MasterName != "" && len(r.Addrs) > 0 {
		p.add("redis", "set redis.addrs or redis.sentinel, not both")
	}
	for i, a := range sn.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			p.addf(indexPlace("redis.sentinel.addrs", i), "must be host:port, got %q", RedactURL(a))
		}
	}
	if r.PoolSize < 0 {
		p.add("redis.pool_size", "must not be negative")
	}
	if r.Timeout < 0 {
		p.add("redis.timeout", "must be > 0")
	}
	if r.BreakerFailures < 0 {
		p.add("redis.breaker_failures", "must be >= 1")
	}
	nonNegative(p, "redis.queue_timeout", r.QueueTimeout)
	nonNegative(p, "redis.breaker_cooldown", r.BreakerCooldown)
	if r.DenialCacheSize < 0 {
		p.add("redis.denial_cache_size", "must not be negative")
	}
	if r.Pipelines < -1 {
		p.addf("redis.pipelines", "must be > 0, or -1 to send every decision on its own, got %d", r.Pipelines)
	}
}

func checkRedisAddr(a string) error {
	if strings.Contains(a, "://") {
		u, err := url.Parse(a)
		if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			return fmt.Errorf("must be host:port, redis://host:port or rediss://host:port, got %q", RedactURL(a))
		}
		return nil
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return fmt.Errorf("must be host:port, redis://host:port or rediss://host:port, got %q", RedactURL(a))
	}
	return nil
}

func validateTenants(p *problems, t *TenantsConfig) {
	if !isToken(t.Header) {
		p.addf("tenants.header", "must be a header name, got %q", t.Header)
	}
	if t.QuotaPath == QuotaPathOff {
		// no report
	} else if !strings.HasPrefix(t.QuotaPath, "/") {
		p.addf("tenants.quota_path", "must start with \"/\" or be off, got %q", t.QuotaPath)
	} else {
		canonicalConfigPath(p, "tenants.quota_path", t.QuotaPath)
	}
	if t.KeysFile != "" && strings.TrimSpace(t.KeysFile) != t.KeysFile {
		p.addf("tenants.keys_file", "must be a path without surrounding spaces, got %q", t.KeysFile)
	}
	plain := 0
	seen := map[string]bool{} // hex digests
	for _, key := range sortedKeys(t.Keys) {
		place := keyPlace("tenants.keys", key)
		if strings.TrimSpace(key) == "" {
			p.add("tenants.keys", "an API key must not be empty")
			continue
		}
		d, isDigest := digestEntry(key)
		switch {
		case isDigest && !validDigestHex(d):
			p.addf(place, "a key written as its digest is %q and 64 hex digits (gateway key-digest prints it)", DigestPrefix)
			continue
		case !isDigest:
			plain++
			d = strings.TrimPrefix(KeyDigest(key), DigestPrefix)
		}
		if seen[strings.ToLower(d)] {
			// Named by its digest: one of the entries may be the key itself.
			p.addf("tenants.keys", "the API key %s%s is listed twice", DigestPrefix, strings.ToLower(d))
		}
		seen[strings.ToLower(d)] = true
		if t.Keys[key].Tenant == "" {
			p.add(place+".tenant", "required")
		}
	}
	if plain > 0 {
		p.warnf("tenants.keys", "%d API key(s) written in plain text: whoever reads this file holds them; "+
			"write each as its digest (gateway key-digest KEY prints \"%s<hex>\")", plain, DigestPrefix)
	}
}

func validateRoutes(p *problems, c *Config, builtins map[string]*url.URL) {
	if len(c.Routes) == 0 {
		p.add("routes", "at least one route is required")
		return
	}
	seen := map[string]int{}
	for i := range c.Routes {
		rt := &c.Routes[i]
		place := indexPlace("routes", i)
		switch first, dup := seen[rt.Name]; {
		case rt.Name == "":
			p.add(place+".name", "required")
		case dup:
			p.addf(place+".name", "duplicate route name %q (also routes[%d])", rt.Name, first)
		default:
			seen[rt.Name] = i
		}
		validateMatch(p, place+".match", &rt.Match)
		validatePool(p, place, rt, builtins)
		if rt.StripPrefix != "" && !strings.HasPrefix(rt.StripPrefix, "/") {
			p.addf(place+".strip_prefix", "must start with \"/\", got %q", rt.StripPrefix)
		} else {
			canonicalConfigPath(p, place+".strip_prefix", rt.StripPrefix)
		}
		nonNegative(p, place+".timeout", rt.Timeout)
		if rt.MaxBodyBytes < -1 {
			p.add(place+".max_body_bytes", "must be >= 0, or -1 for no limit")
		}
		switch {
		case rt.LLM != "" && rt.MaxBodyBytes == -1:
			p.add(place+".max_body_bytes", "an llm route reads the body to count its tokens: it needs a limit, not -1")
		case rt.LLM == "" && rt.DefaultMaxTokens != 0:
			p.add(place+".default_max_tokens", "applies to llm routes only (set llm: openai)")
		case rt.DefaultMaxTokens < 0:
			p.add(place+".default_max_tokens", "must be > 0")
		}
		validateDeployments(p, place, rt)
		switch {
		case rt.LLM == "" && rt.DefaultServiceTier != "":
			p.add(place+".default_service_tier", "applies to llm routes only")
		case rt.DefaultServiceTier != "" && !llm.ServiceTierOK(rt.DefaultServiceTier):
			p.addf(place+".default_service_tier", "must be a service tier's name (a-z, 0-9, _), got %q", rt.DefaultServiceTier)
		}
		if rt.LLM == "" && rt.UnsizedInput != "" {
			p.add(place+".unsized_input", "applies to llm routes only (set llm: openai)")
		}
		if err := rt.UpstreamProtocol.Fits(upstreamScheme(rt.Upstream)); err != nil {
			p.add(place+".upstream_protocol", err.Error())
		}
		validateEnforce(p, place, rt)
		validateEndpoints(p, place, rt)
		if rt.Idempotency != nil {
			validateIdempotency(p, place+".idempotency", rt.Idempotency)
			if mr := rt.Idempotency.MaxResponseBytes; !c.Redis.Enabled() && mr > c.Server.IdempotencyMaxBytes &&
				c.Server.IdempotencyMaxBytes >= MinIdempotencyMaxBytes {
				p.addf(place+".idempotency.max_response_bytes", "%d is more than server.idempotency_max_bytes (%d) holds: no response could be kept", mr, c.Server.IdempotencyMaxBytes)
			}
			if rt.MaxBodyBytes == -1 {
				p.add(place+".max_body_bytes", "a route with idempotency reads the body to fingerprint it: it needs a limit, not -1")
			}
		}
		validateUpgrades(p, place+".upgrades", rt.Upgrades)
		if rt.MethodOverride != "" && !isToken(rt.MethodOverride) {
			p.addf(place+".method_override", "must be a header name, got %q", rt.MethodOverride)
		}
		used := map[string]bool{}
		for j, name := range rt.Policies {
			pp := indexPlace(place+".policies", j)
			pc, ok := c.Policies[name]
			switch {
			case !ok:
				p.addf(pp, "unknown policy %q", name)
			case used[name]:
				p.addf(pp, "policy %q listed twice", name)
			case pc.Cost.CountsTokens() && rt.LLM == "":
				p.addf(pp, "policy %q counts %s, which only an llm route knows (set llm: openai)", name, pc.Cost)
			case keysOnModel(pc.Key) && rt.LLM == "":
				p.addf(pp, "policy %q keys on model, which only an llm route knows (set llm: openai)", name)
			}
			used[name] = true
		}
	}
}

// validateUpgrades checks a route's upgrades: protocol names, each once.
func validateUpgrades(p *problems, place string, upgrades []string) {
	seen := map[string]bool{}
	for i, u := range upgrades {
		switch name := strings.ToLower(u); {
		case !isToken(u):
			p.addf(indexPlace(place, i), "must be a protocol name (websocket), got %q", u)
		case seen[name]:
			p.addf(indexPlace(place, i), "%q listed twice", u)
		default:
			seen[name] = true
		}
	}
}

// notReplayable are response headers a replay computes itself, or that
// belong to one connection.
var notReplayable = map[string]bool{
	"Content-Length": true, "Transfer-Encoding": true, "Connection": true, "Keep-Alive": true,
	"Trailer": true, "Upgrade": true, "Idempotent-Replayed": true,
}

func validateIdempotency(p *problems, place string, c *IdempotencyConfig) {
	if !isToken(c.Header) {
		p.addf(place+".header", "must be a header name, got %q", c.Header)
	}
	if !isToken(c.FencingHeader) {
		p.addf(place+".fencing_header", "must be a header name, got %q", c.FencingHeader)
	} else if strings.EqualFold(c.FencingHeader, c.Header) {
		p.addf(place+".fencing_header", "must differ from header (%q)", c.Header)
	}
	if len(c.Methods) == 0 {
		p.add(place+".methods", "must name at least one method (default [POST, PATCH])")
	}
	seen := map[string]bool{}
	for i, m := range c.Methods {
		up := strings.ToUpper(m)
		switch {
		case !isToken(m):
			p.addf(indexPlace(place+".methods", i), "must be an HTTP method, got %q", m)
		case seen[up]:
			p.addf(indexPlace(place+".methods", i), "method %s listed twice", up)
		}
		seen[up] = true
	}
	if c.LockTTL < 30*time.Millisecond {
		p.addf(place+".lock_ttl", "must be at least 30ms (it is renewed every third of it), got %s", c.LockTTL)
	}
	if c.ReplayTTL < time.Second {
		p.addf(place+".replay_ttl", "must be at least 1s, got %s", c.ReplayTTL)
	}
	if c.MaxResponseBytes < 0 || c.MaxResponseBytes > MaxIdempotencyResponseBytes {
		p.addf(place+".max_response_bytes", "must be > 0 and at most %d (16 MiB), got %d", MaxIdempotencyResponseBytes, c.MaxResponseBytes)
	}
	for i, h := range c.ReplayHeaders {
		switch {
		case !isToken(h):
			p.addf(indexPlace(place+".replay_headers", i), "must be a header name, got %q", h)
		case notReplayable[http.CanonicalHeaderKey(h)]:
			p.addf(indexPlace(place+".replay_headers", i), "%s is set by the gateway on each response; it cannot be replayed", http.CanonicalHeaderKey(h))
		}
	}
	switch c.OnConflict {
	case OnConflictReject:
		if c.MaxWait != 0 {
			p.add(place+".max_wait", "applies to on_conflict: wait only")
		}
	case OnConflictWait:
		if c.MaxWait <= 0 {
			p.addf(place+".max_wait", "must be > 0, got %s", c.MaxWait)
		}
	}
}

func validateMatch(p *problems, place string, m *MatchConfig) {
	if m.Host != "" {
		host := strings.TrimPrefix(m.Host, "*.")
		if host == "" || strings.ContainsAny(host, "/:*@ ") {
			p.addf(place+".host", "must be a host name or *.domain, without scheme or port, got %q", m.Host)
		}
	}
	if m.Path != "" && !strings.HasPrefix(m.Path, "/") {
		p.addf(place+".path", "must start with \"/\", got %q", m.Path)
	} else {
		canonicalConfigPath(p, place+".path", m.Path)
	}
	if m.PathPrefix != "" && !strings.HasPrefix(m.PathPrefix, "/") {
		p.addf(place+".path_prefix", "must start with \"/\", got %q", m.PathPrefix)
	} else {
		canonicalConfigPath(p, place+".path_prefix", m.PathPrefix)
	}
	if m.Path != "" && m.PathPrefix != "" {
		p.add(place, "set path or path_prefix, not both")
	}
	for i, meth := range m.Methods {
		if !isToken(meth) {
			p.addf(indexPlace(place+".methods", i), "must be an HTTP method, got %q", meth)
		}
	}
	for _, name := range sortedKeys(m.Headers) {
		if !isToken(name) {
			p.addf(keyPlace(place+".headers", name), "must be a header name, got %q", name)
		}
	}
}

func validatePolicies(p *problems, c *Config) {
	validatePrices(p, c)
	validateModels(p, c.Models)
	for _, name := range sortedKeys(c.Policies) {
		pc := c.Policies[name]
		place := keyPlace("policies", name)
		if !policyNameRE.MatchString(name) {
			p.addf(place, "policy name must be 1 to 64 of A-Z a-z 0-9 _ . -, got %q", name)
		}
		parts, err := parseKeySpec(pc.Key)
		if err != nil {
			p.add(place+".key", err.Error())
		}
		if err == nil && c.Tenants.JWT == nil && len(readsOf(parts).Claims) > 0 {
			p.add(place+".key", "a claim:NAME key needs tenants.jwt, which verifies the claims")
		}
		if err == nil && readsCert(parts) && c.Server.TLS.ClientCAFile == "" {
			p.addf(place+".key", "%q reads the client certificate: set server.tls.client_ca_file, or no request would have one", pc.Key)
		}
		if len(pc.Plans) > 0 && err == nil && !identifiesTenant(parts) {
			// Local buckets are per (policy, limit) and the limit follows the
			// plan of the API key presented: without the tenant in the key,
			// one client would get a fresh bucket for each plan it has a key of.
			p.addf(place+".plans", "needs a key that identifies the tenant (tenant or api_key, alone or joined with +): "+
				"with key %q a client presenting API keys of different plans gets a bucket per plan", pc.Key)
		}
		// A name outside a list (algorithm, cost, on_missing_key,
		// on_redis_error) is checkStrict's error: see enums.go.
		algo := pc.Algorithm
		if algo.Shared() && !c.Redis.Enabled() {
			p.addf(place+".algorithm", "%s needs redis (set redis.addrs)", algo)
		}
		if algo.InFlight() {
			validateInFlight(p, place, &pc)
		} else {
			validateRate(p, place, &pc)
		}
		if _, ok := c.Prices[DefaultPriceModel]; pc.Cost == CostUSD && !ok {
			p.add(place+".cost", "usd needs prices, with a default entry for models the table does not name (never free)")
		}
		if !pc.Cost.CountsTokens() && pc.ChargeWithoutUsage != "" {
			p.add(place+".charge_without_usage", "applies to policies whose cost counts tokens or usd")
		}
		if pc.LocalShare < 0 || pc.LocalShare > 1 {
			p.addf(place+".local_share", "must be in (0, 1], got %v", pc.LocalShare)
		}
		validateModes(p, place, &pc)
	}
}

// validateModes checks how a policy enforces: on_limit and what goes with
// it (mode and on_limit are names checkStrict checked).
func validateModes(p *problems, place string, pc *PolicyConfig) {
	switch pc.OnLimit {
	case OnLimitReject:
		if pc.MaxDelay != 0 {
			p.add(place+".max_delay", "applies to on_limit: delay only")
		}
		if pc.MaxWaiters != 0 {
			p.add(place+".max_waiters", "applies to on_limit: delay only")
		}
	case OnLimitDelay:
		if pc.Algorithm.InFlight() {
			p.addf(place+".on_limit", "delay applies to rate policies; a %s slot frees when a request ends, not at a known time", pc.Algorithm)
		}
		if pc.MaxDelay <= 0 {
			p.addf(place+".max_delay", "must be > 0, got %s", pc.MaxDelay)
		}
		if pc.MaxWaiters <= 0 {
			p.addf(place+".max_waiters", "must be > 0, got %d", pc.MaxWaiters)
		}
	}
}

// validateOperations checks the top-level mode, the admin listener and the
// log settings.
func validateOperations(p *problems, c *Config) {
	if listen := *c.Admin.Listen; listen != "" {
		host, _, err := net.SplitHostPort(listen)
		switch {
		case err != nil:
			p.addf("admin.listen", `must be host:port, or "" for no admin listener, got %q`, listen)
		case !isLoopbackHost(host) && c.Admin.Token == "":
			p.addf("admin.listen", "%s is reachable from other hosts: set admin.token (GATEWAY_ADMIN_TOKEN), or listen on 127.0.0.1", listen)
		}
	}
	if n := len(c.Admin.Token); n > 0 && n < MinAdminTokenLen {
		// The token itself is never shown: only its length.
		p.addf("admin.token", "must be at least %d characters, got %d: a short token can be guessed (make one with: head -c 32 /dev/urandom | base64)", MinAdminTokenLen, n)
	}
	if ttl := c.Admin.SessionTTL; ttl <= 0 || ttl > MaxSessionTTL {
		p.addf("admin.session_ttl", "must be more than 0 and at most %s, got %s", MaxSessionTTL, ttl)
	}
	if c.Admin.Pprof && c.Admin.Token == "" {
		p.add("admin.pprof", "needs admin.token: profiles show the process's memory and stacks")
	}
	for i, m := range c.Admin.MetricsModels {
		if m == "" || len(m) > 128 || !utf8.ValidString(m) {
			p.addf(indexPlace("admin.metrics_models", i), "must be a model name of 1 to 128 bytes of UTF-8, got %q", m)
		}
	}
	if c.Log.AccessSample <= 0 || c.Log.AccessSample > 1 {
		p.addf("log.access_sample", "must be in (0, 1], got %v", c.Log.AccessSample)
	}
}

// isLoopbackHost reports whether host (of host:port) names only loopback
// addresses: "localhost", 127.0.0.0/8 or ::1. "" (every interface) is not.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.Unmap().IsLoopback()
}

// validateRate checks the limit of a policy that counts requests per period.
func validateRate(p *problems, place string, pc *PolicyConfig) {
	if pc.Limit != 0 {
		p.addf(place+".limit", "applies to concurrency and shared_concurrency only; a %s counts rate per per", pc.Algorithm)
	}
	if pc.Lease != 0 {
		p.addf(place+".lease", "applies to shared_concurrency only, not %s", pc.Algorithm)
	}
	switch {
	case pc.Rate == nil && len(pc.Plans) == 0:
		p.add(place+".rate", "required (or set plans)")
	case pc.Rate != nil && *pc.Rate < 0:
		p.add(place+".rate", "must be >= 0")
	}
	switch {
	case pc.Window == "" && pc.Per <= 0:
		p.add(place+".per", "must be > 0")
	case pc.Window != "" && pc.Algorithm != limiter.FixedWindow:
		p.addf(place+".window", "applies to fixed_window only (a calendar day or month, UTC), not %s", pc.Algorithm)
	case pc.Window != "" && pc.Per != 0:
		p.add(place+".window", "set per or window, not both")
	}
	if pc.Burst < 0 {
		p.add(place+".burst", "must be >= 0")
	} else if pc.Rate != nil && *pc.Rate > 0 && pc.Burst < 1 {
		p.add(place+".burst", "must be >= 1 when rate > 0")
	} else if window := pc.Algorithm; window.Windowed() &&
		pc.Rate != nil && pc.Burst != *pc.Rate {
		p.addf(place+".burst", "applies to token_bucket and gcra only: a %s admits rate per per", window)
	}
	for _, plan := range sortedKeys(pc.Plans) {
		if plan == "" {
			p.add(place+".plans", "a plan name must not be empty")
		} else if pc.Plans[plan] < 0 {
			p.add(keyPlace(place+".plans", plan), "must be >= 0")
		}
	}
}

// validateInFlight checks the limit of a policy that counts requests in
// flight: a number of slots, and (shared) a lease, but no rate.
func validateInFlight(p *problems, place string, pc *PolicyConfig) {
	if pc.Limit <= 0 {
		p.addf(place+".limit", "required with %s: the requests in flight allowed per key, > 0 (got %d)", pc.Algorithm, pc.Limit)
	}
	for _, set := range []struct {
		key string
		on  bool
	}{
		{"rate", pc.Rate != nil}, {"per", pc.Per != 0}, {"burst", pc.Burst != 0},
		{"window", pc.Window != ""}, {"plans", len(pc.Plans) > 0},
	} {
		if set.on {
			p.addf(place+"."+set.key, "does not apply to %s, which counts requests in flight: set limit", pc.Algorithm)
		}
	}
	switch {
	case pc.Algorithm == limiter.Concurrency && pc.Lease != 0:
		p.add(place+".lease", "applies to shared_concurrency only: an in-process slot is held until its request ends")
	case pc.Lease < 0:
		p.addf(place+".lease", "must be > 0, got %s", pc.Lease)
	case pc.Lease > 0 && pc.Lease < minLease:
		p.addf(place+".lease", "must be at least %s (it is renewed every third of it), got %s", minLease, pc.Lease)
	}
	if pc.Cost != CostRequests {
		p.addf(place+".cost", "a %s policy counts one slot per request: cost must be requests, got %q", pc.Algorithm, pc.Cost)
	}
}

// minLease bounds how often a request renews its leases (a third of it).
const minLease = 30 * time.Millisecond

func nonNegative(p *problems, place string, d time.Duration) {
	if d < 0 {
		p.addf(place, "must not be negative, got %s", d)
	}
}

// errMappedPrefixTooShort is an IPv4-mapped prefix shorter than /96: it
// holds IPv6 addresses that are not mapped, so no IPv4 prefix stands for it.
var errMappedPrefixTooShort = errors.New("an IPv4-mapped prefix needs a length of 96 or more (write the IPv4 CIDR instead)")

// parsePrefix reads a CIDR or a bare address (a single host: /32 or /128).
// Client addresses are unmapped before they are compared, so an IPv4-mapped
// prefix (::ffff:10.0.0.0/104) becomes its IPv4 prefix (10.0.0.0/8); written
// as is, it would never match.
func parsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if pfx.Addr().Is4In6() {
			if pfx.Bits() < 96 {
				return netip.Prefix{}, errMappedPrefixTooShort
			}
			pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
		}
		return pfx.Masked(), nil
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	addr = addr.Unmap()
	return netip.PrefixFrom(addr, addr.BitLen()), nil
}

// canonicalConfigPath reports a path that no request can have: the proxy
// matches the canonical (decoded, cleaned) path, so "/a//b", "/a/../b" or
// "/a%2Fb" in the config could never match and would silently leave its
// route or prefix unused.
func canonicalConfigPath(p *problems, place, v string) {
	if v == "" {
		return
	}
	clean := path.Clean(v)
	if strings.HasSuffix(v, "/") && clean != "/" {
		clean += "/"
	}
	switch {
	case strings.ContainsAny(v, "\\%"):
		p.addf(place, "must be a decoded path without %% escapes or backslashes, got %q", v)
	case clean != v:
		p.addf(place, "must be a clean path (no \"//\", \".\" or \"..\" segments): requests are matched after cleaning, so %q would never match; did you mean %q?", v, clean)
	}
}

// keysOnModel reports whether a key spec has a model part.
func keysOnModel(spec string) bool {
	parts, err := parseKeySpec(spec)
	return err == nil && readsOf(parts).Model
}
