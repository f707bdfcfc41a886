package admin

import (
	"cmp"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// The view of /admin/config is built from the compiled snapshot field by
// field, never by marshalling the decoded Config: a field added to the
// Config later (a new secret) stays out until someone decides to show it.
// Secrets are never shown: tenant API keys (only counts per plan), the Redis
// and Sentinel passwords (only whether one is set), upstream_api_key (only
// whether it is set), userinfo in any URL, the admin token, and the values
// a route's match.headers compares with (a header equal to a shared secret
// is a way to guard a route).

// configView is /admin/config's answer.
type configView struct {
	Source string `json:"source"`
	// Digest is the SHA-256 of the bytes the configuration was read from,
	// in hex ("" for one built in memory).
	Digest   string                `json:"digest"`
	Mode     string                `json:"mode,omitempty"`
	Routes   []routeView           `json:"routes"`
	Policies map[string]policyView `json:"policies"`
	Tenants  tenantsView           `json:"tenants"`
	Redis    *redisView            `json:"redis,omitempty"`
}

type routeView struct {
	Name        string    `json:"name"`
	Match       matchView `json:"match"`
	Upstream    string    `json:"upstream"`
	StripPrefix string    `json:"strip_prefix,omitempty"`
	Timeout     string    `json:"timeout"`
	// MaxBodyBytes is absent when bodies are not limited.
	MaxBodyBytes     int64  `json:"max_body_bytes,omitempty"`
	LLM              bool   `json:"llm,omitempty"`
	DefaultMaxTokens int64  `json:"default_max_tokens,omitempty"`
	ErrorFormat      string `json:"error_format"`
	RateLimitHeaders string `json:"rate_limit_headers"`
	// UpstreamAPIKeySet says that upstream_api_key replaces the client's
	// key upstream; the key itself is never shown.
	UpstreamAPIKeySet bool             `json:"upstream_api_key_set,omitempty"`
	Idempotency       *idempotencyView `json:"idempotency,omitempty"`
	Policies          []string         `json:"policies"`
}

type matchView struct {
	Host       string            `json:"host,omitempty"`
	Path       string            `json:"path,omitempty"`
	PathPrefix string            `json:"path_prefix,omitempty"`
	Methods    []string          `json:"methods,omitempty"`
	Headers    []headerMatchView `json:"headers,omitempty"`
}

// headerMatchView is one match.headers entry; Match is "present" or
// "equals a configured value (not shown)".
type headerMatchView struct {
	Name  string `json:"name"`
	Match string `json:"match"`
}

type idempotencyView struct {
	Header           string   `json:"header"`
	Methods          []string `json:"methods"`
	Required         bool     `json:"required"`
	LockTTL          string   `json:"lock_ttl"`
	ReplayTTL        string   `json:"replay_ttl"`
	MaxResponseBytes int64    `json:"max_response_bytes"`
	ReplayHeaders    []string `json:"replay_headers"`
	FencingHeader    string   `json:"fencing_header"`
	OnConflict       string   `json:"on_conflict"`
	MaxWait          string   `json:"max_wait,omitempty"`
	OnRedisError     string   `json:"on_redis_error"`
}

type policyView struct {
	Algorithm string               `json:"algorithm"`
	Key       string               `json:"key"`
	Limit     limitView            `json:"limit"`
	Plans     map[string]limitView `json:"plans,omitempty"`
	// Cost is what a request takes; for usd the limits are in
	// micro-dollars, as the buckets count.
	Cost         string `json:"cost"`
	OnMissingKey string `json:"on_missing_key"`
	// OnRedisError and LocalShare are shown for shared algorithms only.
	OnRedisError string  `json:"on_redis_error,omitempty"`
	LocalShare   float64 `json:"local_share,omitempty"`
	Shadow       bool    `json:"shadow"`
	MaxDelay     string  `json:"max_delay,omitempty"`
	MaxWaiters   int     `json:"max_waiters,omitempty"`
}

// limitView is a rate limit (rate, per, burst) or an in-flight one (limit,
// and the lease of shared_concurrency).
type limitView struct {
	Rate  *int64 `json:"rate,omitempty"`
	Per   string `json:"per,omitempty"`
	Burst int64  `json:"burst,omitempty"`
	Limit *int64 `json:"limit,omitempty"`
	Lease string `json:"lease,omitempty"`
}

type tenantsView struct {
	Header    string `json:"header"`
	QuotaPath string `json:"quota_path,omitempty"`
	// Keys counts the API keys; Plans counts them, and the tenants they
	// belong to, per plan ("(none)" for keys without a plan).
	Keys  int                  `json:"keys"`
	Plans map[string]planCount `json:"plans"`
}

type planCount struct {
	Tenants int `json:"tenants"`
	Keys    int `json:"keys"`
}

type redisView struct {
	Addrs    []string      `json:"addrs,omitempty"`
	Sentinel *sentinelView `json:"sentinel,omitempty"`
	// UsernameSet and PasswordSet say whether credentials are configured;
	// they are never shown.
	UsernameSet bool `json:"username_set"`
	PasswordSet bool `json:"password_set"`
	TLS         bool `json:"tls"`
}

type sentinelView struct {
	MasterName  string   `json:"master_name"`
	Addrs       []string `json:"addrs"`
	PasswordSet bool     `json:"password_set"`
}

func (h *handler) serveConfig(w http.ResponseWriter, _ *http.Request) {
	snap := h.cfg.Snapshots.Load()
	if snap == nil {
		writeError(w, http.StatusServiceUnavailable, "no configuration is loaded yet")
		return
	}
	writeJSON(w, http.StatusOK, viewOf(snap))
}

// viewOf renders snap without its secrets.
func viewOf(snap *policies.Snapshot) configView {
	v := configView{
		Source:   snap.Source,
		Digest:   digestHex(snap.Digest),
		Routes:   make([]routeView, 0, len(snap.Routes)),
		Policies: make(map[string]policyView, len(snap.Policies)),
		Tenants:  tenantsOf(snap.Tenants),
	}
	for _, rt := range snap.Routes {
		v.Routes = append(v.Routes, routeOf(rt))
	}
	for name, p := range snap.Policies {
		v.Policies[name] = policyOf(p)
	}
	if c := snap.Config; c != nil {
		v.Mode = c.Mode
		if c.Redis.Enabled() {
			v.Redis = redisOf(c.Redis)
		}
	}
	return v
}

func routeOf(rt *policies.Route) routeView {
	v := routeView{
		Name:              rt.Name,
		Upstream:          redactURL(rt.Upstream),
		StripPrefix:       rt.StripPrefix,
		Timeout:           duration(rt.Timeout),
		MaxBodyBytes:      rt.MaxBodyBytes,
		LLM:               rt.LLM,
		ErrorFormat:       "gateway",
		RateLimitHeaders:  string(cmp.Or(rt.RateLimitHeaders, policies.RateLimitHeadersAll)),
		UpstreamAPIKeySet: rt.UpstreamAPIKey != "",
		Policies:          make([]string, 0, len(rt.Policies)),
		Match: matchView{
			Host:       rt.Match.Host,
			Path:       rt.Match.Path,
			PathPrefix: rt.Match.PathPrefix,
			Methods:    rt.Match.Methods,
		},
	}
	if rt.LLM {
		v.DefaultMaxTokens = rt.DefaultMaxTokens
	}
	if rt.OpenAIErrors {
		v.ErrorFormat = "openai"
	}
	if rt.AnthropicErrors {
		v.ErrorFormat = "anthropic"
	}
	for _, hm := range rt.Match.Headers {
		m := "present"
		if hm.Value != "" {
			m = "equals a configured value (not shown)"
		}
		v.Match.Headers = append(v.Match.Headers, headerMatchView{Name: hm.Name, Match: m})
	}
	if id := rt.Idempotency; id != nil {
		iv := &idempotencyView{
			Header: id.Header, Methods: id.Methods, Required: id.Required,
			LockTTL: duration(id.LockTTL), ReplayTTL: duration(id.ReplayTTL),
			MaxResponseBytes: id.MaxResponseBytes, ReplayHeaders: id.ReplayHeaders,
			FencingHeader: id.FencingHeader, OnConflict: "reject", OnRedisError: "deny",
		}
		if id.Wait {
			iv.OnConflict, iv.MaxWait = "wait", duration(id.MaxWait)
		}
		if id.FailOpen {
			iv.OnRedisError = "allow"
		}
		v.Idempotency = iv
	}
	for _, p := range rt.Policies {
		v.Policies = append(v.Policies, p.Name())
	}
	return v
}

func policyOf(p *policies.Policy) policyView {
	alg := p.Rule.Algorithm
	if alg == "" {
		alg = limiter.TokenBucket
	}
	v := policyView{
		Algorithm:    string(alg),
		Key:          p.KeySpec,
		Limit:        limitOf(alg, p.Limit),
		Cost:         string(p.Cost),
		OnMissingKey: string(p.OnMissingKey),
		Shadow:       p.Rule.Shadow,
		MaxWaiters:   p.MaxWaiters,
	}
	if len(p.Plans) > 0 {
		v.Plans = make(map[string]limitView, len(p.Plans))
		for plan, l := range p.Plans {
			v.Plans[plan] = limitOf(alg, l)
		}
	}
	if alg.Shared() {
		v.OnRedisError = string(p.Rule.OnRedisError)
		if v.OnRedisError == "" {
			v.OnRedisError = string(limiter.FailAllow)
		}
		if p.Rule.OnRedisError == limiter.FailLocal {
			v.LocalShare = p.Rule.LocalShare
		}
	}
	if p.MaxDelay > 0 {
		v.MaxDelay = duration(p.MaxDelay)
	}
	return v
}

func limitOf(alg limiter.Algorithm, l limiter.Limit) limitView {
	if alg.InFlight() {
		slots := l.Quota()
		v := limitView{Limit: &slots}
		if alg == limiter.SharedConcurrency {
			v.Lease = duration(l.Period)
		}
		return v
	}
	rate := l.Rate
	v := limitView{Rate: &rate, Per: l.Per()}
	if !alg.Windowed() {
		v.Burst = l.Quota()
	}
	return v
}

// tenantsOf counts API keys and tenants per plan; no key is shown.
func tenantsOf(t policies.Tenants) tenantsView {
	v := tenantsView{Header: t.Header, QuotaPath: t.QuotaPath, Keys: len(t.Keys), Plans: map[string]planCount{}}
	seen := map[policies.Tenant]bool{}
	for _, tn := range t.Keys {
		plan := tn.Plan
		if plan == "" {
			plan = "(none)"
		}
		pc := v.Plans[plan]
		pc.Keys++
		if !seen[tn] {
			seen[tn] = true
			pc.Tenants++
		}
		v.Plans[plan] = pc
	}
	return v
}

func redisOf(c policies.RedisConfig) *redisView {
	v := &redisView{UsernameSet: c.Username != "", PasswordSet: c.Password != "", TLS: c.TLS}
	for _, a := range c.Addrs {
		v.Addrs = append(v.Addrs, redactAddr(a))
	}
	if c.Sentinel.MasterName != "" {
		sv := &sentinelView{MasterName: c.Sentinel.MasterName, PasswordSet: c.Sentinel.Password != ""}
		for _, a := range c.Sentinel.Addrs {
			sv.Addrs = append(sv.Addrs, redactAddr(a))
		}
		v.Sentinel = sv
	}
	return v
}

// redactURL renders u without userinfo, query or fragment.
func redactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}

// redactAddr renders a Redis address ("host:port" or "redis://...")
// without credentials: a URL keeps its scheme and host only, and anything
// that does not parse is shown as its host part, or not at all.
func redactAddr(a string) string {
	if !strings.Contains(a, "://") {
		if at := strings.LastIndexByte(a, '@'); at >= 0 {
			return a[at+1:] // "user:pass@host:port" is no valid address, but never show it
		}
		return a
	}
	u, err := url.Parse(a)
	if err != nil {
		return "(unparsable address, not shown)"
	}
	return u.Scheme + "://" + u.Host
}

// duration renders d as the config spells durations ("30s", "1m", "1h").
func duration(d time.Duration) string { return limiter.ShortDuration(d) }
