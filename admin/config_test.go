package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
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
  token: SECRET-admin-token-93be1f7c0a2d4e6b
redis:
  addrs: ["redis://ops:SECRET-redis-url-pw@10.0.0.7:6379"]
  username: ops
  password: SECRET-redis-password
tenants:
  keys:
    SECRET-key-acme-1: {tenant: acme, plan: free}
    SECRET-key-acme-2: {tenant: acme, plan: free}
    SECRET-key-globex: {tenant: globex, plan: pro}
    "sha256:5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2": {tenant: globex, plan: pro}
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

// configJSON is /admin/config's answer as a client reads it.
type configJSON struct {
	Source  string         `json:"source"`
	Digest  string         `json:"digest"`
	Config  map[string]any `json:"config"`
	APIKeys keyCounts      `json:"api_keys"`
}

// at is the value at path in v, a decoded JSON value: names index objects,
// numbers ("0") arrays; nil when nothing is there.
func at(v any, path ...string) any {
	for _, p := range path {
		switch c := v.(type) {
		case map[string]any:
			v = c[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			v = c[i]
		default:
			return nil
		}
	}
	return v
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

// The dump is the config as the file spells it, defaults applied: routes
// in order with their policies, policies with their limits and modes, Redis
// addresses without credentials; API keys (in clear and as digests) only
// counted per plan.
func TestConfigShowsWhatApplies(t *testing.T) {
	snap := parse(t, secretYAML)
	srv := serve(t, Config{Token: testToken, Snapshots: policies.NewCurrent(snap)})
	var v configJSON
	call(t, srv, "GET", "/admin/config", testToken).decode(t, &v)

	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{"mode"}, "enforce"},
		{[]string{"admin", "token_set"}, true},
		// routes in order, keyed as the file spells them, defaults applied
		{[]string{"routes", "0", "name"}, "chat"},
		{[]string{"routes", "0", "upstream"}, "https://api.example.com/base"},
		{[]string{"routes", "0", "upstream_api_key_set"}, true},
		{[]string{"routes", "0", "llm"}, "openai"},
		{[]string{"routes", "0", "error_format"}, "openai"},
		{[]string{"routes", "0", "timeout"}, "30s"},
		{[]string{"routes", "0", "policies", "1"}, "tenant-rpm"},
		{[]string{"routes", "0", "policies", "2"}, "tenant-inflight"},
		{[]string{"routes", "0", "idempotency", "on_conflict"}, "wait"},
		{[]string{"routes", "0", "idempotency", "max_wait"}, "10s"},
		// match.headers: names, and whether a value is compared (not which)
		{[]string{"routes", "0", "match", "headers", "X-API-Key"}, "*"},
		{[]string{"routes", "0", "match", "headers", "X-Internal"}, "REDACTED"},
		// policies with their defaults
		{[]string{"policies", "per-ip", "algorithm"}, "token_bucket"},
		{[]string{"policies", "per-ip", "rate"}, 10.0},
		{[]string{"policies", "per-ip", "per"}, "1m"},
		{[]string{"policies", "per-ip", "burst"}, 20.0},
		{[]string{"policies", "per-ip", "mode"}, "shadow"},
		{[]string{"policies", "per-ip", "cost"}, "requests"},
		{[]string{"policies", "per-ip", "on_missing_key"}, "shared"},
		{[]string{"policies", "tenant-rpm", "plans", "pro"}, 600.0},
		{[]string{"policies", "tenant-rpm", "on_redis_error"}, "local"},
		{[]string{"policies", "tenant-rpm", "local_share"}, 0.5},
		{[]string{"policies", "tenant-daily", "window"}, "day"},
		{[]string{"policies", "tenant-daily", "max_delay"}, "3s"},
		{[]string{"policies", "tenant-daily", "max_waiters"}, 100.0},
		{[]string{"policies", "tenant-inflight", "limit"}, 4.0},
		{[]string{"policies", "tenant-inflight", "lease"}, "20s"},
		// Redis: addresses without credentials, whether they are set
		{[]string{"redis", "addrs", "0"}, "redis://10.0.0.7:6379"},
		{[]string{"redis", "password_set"}, true},
		{[]string{"redis", "username_set"}, true},
		{[]string{"tenants", "header"}, "X-API-Key"},
		{[]string{"tenants", "keys"}, nil},
	} {
		if got := at(v.Config, c.path...); got != c.want {
			t.Errorf("config.%s: got %v (%T), want %v", strings.Join(c.path, "."), got, got, c.want)
		}
	}

	wantPlans := map[string]planCount{"free": {Tenants: 1, Keys: 2}, "pro": {Tenants: 1, Keys: 2}, "(none)": {Tenants: 1, Keys: 1}}
	if v.APIKeys.Keys != 5 || len(v.APIKeys.Plans) != len(wantPlans) {
		t.Errorf("api keys: got %+v, want 5 keys in %v", v.APIKeys, wantPlans)
	}
	for plan, want := range wantPlans {
		if got := v.APIKeys.Plans[plan]; got != want {
			t.Errorf("plan %s: got %+v, want %+v", plan, got, want)
		}
	}
}
