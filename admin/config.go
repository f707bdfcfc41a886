package admin

import (
	"net/http"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/policies"
)

// /admin/config shows the configuration in force. Routes and Redis are the
// decoded config (defaults applied) as policies.Redacted renders it, so the
// rule that keeps secrets out is declared once, on the config types: tenant
// API keys, the Redis, Sentinel and admin credentials, upstream_api_key and
// the values a route's match.headers compares with (a header equal to a
// shared secret is a way to guard a route) are never shown, and no URL is
// shown with its user info or query. Policies are shown as compiled (each
// limit with its defaults and plan scaling), tenants as counts per plan.

// configView is /admin/config's answer.
type configView struct {
	Source string `json:"source"`
	// Digest is the SHA-256 of the bytes the configuration was read from,
	// in hex ("" for one built in memory).
	Digest   string                `json:"digest"`
	Mode     string                `json:"mode,omitempty"`
	Routes   []map[string]any      `json:"routes"`
	Policies map[string]policyView `json:"policies"`
	Tenants  tenantsView           `json:"tenants"`
	Redis    any                   `json:"redis,omitempty"`
}

// headerMatchView is one match.headers entry; Match is "present" or
// "equals a configured value (not shown)".
type headerMatchView struct {
	Name  string `json:"name"`
	Match string `json:"match"`
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
		Routes:   make([]map[string]any, 0, len(snap.Routes)),
		Policies: make(map[string]policyView, len(snap.Policies)),
		Tenants:  tenantsOf(snap.Tenants),
	}
	for i, rt := range snap.Routes {
		var rc policies.RouteConfig
		if c := snap.Config; c != nil && i < len(c.Routes) {
			rc = c.Routes[i]
		}
		v.Routes = append(v.Routes, routeOf(rt, rc))
	}
	for name, p := range snap.Policies {
		v.Policies[name] = policyOf(p)
	}
	if c := snap.Config; c != nil {
		v.Mode = c.Mode
		if c.Redis.Enabled() {
			v.Redis = policies.Redacted(c.Redis)
		}
	}
	return v
}

// routeOf is rc as policies.Redacted renders it, with what the compiled
// route rt knows better: whether it is an LLM route, its policies, and the
// headers it matches on (by name only).
func routeOf(rt *policies.Route, rc policies.RouteConfig) map[string]any {
	v, _ := policies.Redacted(rc).(map[string]any)
	if v == nil {
		v = map[string]any{}
	}
	v["name"] = rt.Name
	v["llm"] = rt.LLM
	if !rt.LLM {
		delete(v, "llm")
	}
	names := make([]string, 0, len(rt.Policies))
	for _, p := range rt.Policies {
		names = append(names, p.Name())
	}
	v["policies"] = names
	match, _ := v["match"].(map[string]any)
	if match == nil {
		match = map[string]any{}
	}
	var headers []headerMatchView
	for _, hm := range rt.Match.Headers {
		m := "present"
		if hm.Value != "" {
			m = "equals a configured value (not shown)"
		}
		headers = append(headers, headerMatchView{Name: hm.Name, Match: m})
	}
	if headers != nil {
		match["headers"] = headers
	}
	v["match"] = match
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

// duration renders d as the config spells durations ("30s", "1m", "1h").
func duration(d time.Duration) string { return limiter.ShortDuration(d) }
