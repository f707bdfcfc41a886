package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/policies"
)

// secretYAML holds a secret in every place a configuration can: tenant API
// keys, the Redis password (and one in an address), upstream_api_key, the
// admin token, a header a route matches on. Each secret is unique text, so
// a grep of the answer finds any of them.
const secretYAML = `
admin:
  token: SECRET-admin-token
redis:
  addrs: ["redis://ops:SECRET-redis-url-pw@10.0.0.7:6379"]
  username: ops
  password: SECRET-redis-password
tenants:
  keys:
    SECRET-key-acme-1: {tenant: acme, plan: free}
    SECRET-key-acme-2: {tenant: acme, plan: free}
    SECRET-key-globex: {tenant: globex, plan: pro}
    SECRET-key-initech: {tenant: initech}
routes:
  - name: chat
    match: {path_prefix: /v1/, methods: [POST], headers: {X-Internal: SECRET-header-value, X-API-Key: "*"}}
    upstream: https://api.example.com/base
    upstream_api_key: SECRET-upstream-api-key
    llm: openai
    idempotency: {on_conflict: wait}
    policies: [per-ip, tenant-rpm, tenant-inflight]
policies:
  per-ip: {key: ip, rate: 10, per: 1m, burst: 20, mode: shadow}
  tenant-rpm: {key: tenant, algorithm: gcra, per: 1m, plans: {free: 60, pro: 600},
               on_missing_key: reject, on_redis_error: local, local_share: 0.5}
  tenant-daily: {key: tenant, algorithm: fixed_window, rate: 1000, window: day, on_limit: delay, max_delay: 3s}
  tenant-inflight: {key: tenant, algorithm: shared_concurrency, limit: 4, lease: 20s}
`

// sentinelYAML holds the Sentinel password.
const sentinelYAML = `
redis:
  sentinel: {master_name: mymaster, addrs: ["10.0.0.8:26379"], password: SECRET-sentinel-password}
  password: SECRET-redis-password
routes: [{name: r, upstream: builtin:echo, policies: [g]}]
policies:
  g: {key: ip, algorithm: gcra, rate: 1, per: 1s}
`

// configJSON is /admin/config's answer as a client reads it: the fields
// these tests check.
type configJSON struct {
	Source string `json:"source"`
	Digest string `json:"digest"`
	Mode   string `json:"mode"`
	Routes []struct {
		Policies          []string `json:"policies"`
		Upstream          string   `json:"upstream"`
		UpstreamAPIKeySet bool     `json:"upstream_api_key_set"`
		LLM               bool     `json:"llm"`
		ErrorFormat       string   `json:"error_format"`
		Timeout           string   `json:"timeout"`
		Idempotency       *struct {
			OnConflict string `json:"on_conflict"`
			MaxWait    string `json:"max_wait"`
		} `json:"idempotency"`
		Match struct {
			Headers []headerMatchView `json:"headers"`
		} `json:"match"`
	} `json:"routes"`
	Policies map[string]policyView `json:"policies"`
	Tenants  tenantsView           `json:"tenants"`
	Redis    *struct {
		Addrs       []string `json:"addrs"`
		UsernameSet bool     `json:"username_set"`
		PasswordSet bool     `json:"password_set"`
	} `json:"redis"`
}

// The config dump shows the configuration in force and none of its
// secrets.
func TestConfigHasNoSecrets(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
	}{
		{"addrs", secretYAML},
		{"sentinel", sentinelYAML},
	} {
		t.Run(c.name, func(t *testing.T) {
			snap := parse(t, c.yaml)
			token := snap.Config.Admin.Token
			if token == "" {
				token = testToken
			}
			srv := serve(t, Config{Token: token, Snapshots: policies.NewCurrent(snap)})
			a := call(t, srv, "GET", "/admin/config", token)
			if a.status != http.StatusOK {
				t.Fatalf("got %d %s, want 200", a.status, a.body)
			}
			if strings.Contains(string(a.body), "SECRET") {
				i := strings.Index(string(a.body), "SECRET")
				t.Fatalf("the dump shows a secret: …%s…", a.body[max(0, i-60):min(len(a.body), i+40)])
			}
			var v configJSON
			a.decode(t, &v)
			sum := sha256.Sum256([]byte(c.yaml))
			if v.Source != "gateway.yaml" || v.Digest != hex.EncodeToString(sum[:]) {
				t.Fatalf("source %q digest %q, want gateway.yaml and the file's SHA-256", v.Source, v.Digest)
			}
		})
	}
}

// The dump says what applies: routes in order with their policies,
// policies with their limits and modes, tenants counted per plan, Redis
// addresses without credentials.
func TestConfigShowsWhatApplies(t *testing.T) {
	snap := parse(t, secretYAML)
	srv := serve(t, Config{Token: testToken, Snapshots: policies.NewCurrent(snap)})
	var v configJSON
	call(t, srv, "GET", "/admin/config", testToken).decode(t, &v)

	if len(v.Routes) != 1 {
		t.Fatalf("routes: got %d, want 1", len(v.Routes))
	}
	rt := v.Routes[0]
	if got, want := strings.Join(rt.Policies, ","), "per-ip,tenant-rpm,tenant-inflight"; got != want {
		t.Errorf("route policies: got %s, want %s (in order)", got, want)
	}
	if rt.Upstream != "https://api.example.com/base" || !rt.UpstreamAPIKeySet || !rt.LLM || rt.ErrorFormat != "openai" || rt.Timeout != "30s" {
		t.Errorf("route: got %+v", rt)
	}
	if rt.Idempotency == nil || rt.Idempotency.OnConflict != "wait" || rt.Idempotency.MaxWait != "10s" {
		t.Errorf("idempotency: got %+v, want on_conflict wait, max_wait 10s", rt.Idempotency)
	}
	if len(rt.Match.Headers) != 2 || rt.Match.Headers[0].Match != "present" || !strings.Contains(rt.Match.Headers[1].Match, "not shown") {
		t.Errorf("match headers: got %+v, want X-API-Key present and X-Internal's value not shown", rt.Match.Headers)
	}

	for _, c := range []struct {
		policy string
		check  func(p policyView) bool
	}{
		{"per-ip", func(p policyView) bool {
			return p.Algorithm == "token_bucket" && p.Key == "ip" && *p.Limit.Rate == 10 && p.Limit.Per == "1m" &&
				p.Limit.Burst == 20 && p.Shadow && p.OnRedisError == "" && p.Cost == "requests" && p.OnMissingKey == "shared"
		}},
		{"tenant-rpm", func(p policyView) bool {
			return p.Algorithm == "gcra" && p.OnRedisError == "local" && p.LocalShare == 0.5 && p.OnMissingKey == "reject" &&
				*p.Plans["pro"].Rate == 600 && p.Plans["pro"].Burst == 600 && *p.Limit.Rate == 60 && !p.Shadow
		}},
		{"tenant-daily", func(p policyView) bool {
			return p.Algorithm == "fixed_window" && *p.Limit.Rate == 1000 && p.Limit.Per == "24h" && p.Limit.Burst == 0 &&
				p.MaxDelay == "3s" && p.MaxWaiters == 100 && p.OnRedisError == "allow"
		}},
		{"tenant-inflight", func(p policyView) bool {
			return p.Algorithm == "shared_concurrency" && p.Limit.Rate == nil && *p.Limit.Limit == 4 && p.Limit.Lease == "20s"
		}},
	} {
		if p, ok := v.Policies[c.policy]; !ok || !c.check(p) {
			t.Errorf("policy %s: got %+v", c.policy, p)
		}
	}

	wantPlans := map[string]planCount{"free": {Tenants: 1, Keys: 2}, "pro": {Tenants: 1, Keys: 1}, "(none)": {Tenants: 1, Keys: 1}}
	if v.Tenants.Keys != 4 || len(v.Tenants.Plans) != len(wantPlans) {
		t.Errorf("tenants: got %+v, want 4 keys in %v", v.Tenants, wantPlans)
	}
	for plan, want := range wantPlans {
		if got := v.Tenants.Plans[plan]; got != want {
			t.Errorf("plan %s: got %+v, want %+v", plan, got, want)
		}
	}
	if v.Redis == nil || len(v.Redis.Addrs) != 1 || v.Redis.Addrs[0] != "redis://10.0.0.7:6379" || !v.Redis.PasswordSet || !v.Redis.UsernameSet {
		t.Errorf("redis: got %+v, want the address without credentials, password and username set", v.Redis)
	}
	if v.Mode != "enforce" {
		t.Errorf("mode: got %q, want enforce", v.Mode)
	}
}
