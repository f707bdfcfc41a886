package policies

import (
	"math"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

func TestPlansLimitFor(t *testing.T) {
	snap := mustParse(t, `
routes: [{name: r, upstream: builtin:echo, policies: [scaled, plan-only, zero]}]
policies:
  scaled: {key: tenant, rate: 100, burst: 200, per: 1m, plans: {free: 60, pro: 600, off: 0}}
  plan-only: {key: tenant, per: 1h, plans: {free: 1000, pro: 50000}}
  zero: {key: ip, rate: 0, burst: 5}
`)
	sub := func(plan string) *Subject { return &Subject{Tenant: &Tenant{Name: "t", Plan: plan}} }
	tests := []struct {
		policy  string
		subject *Subject
		want    limiter.Limit
	}{
		{"scaled", sub("free"), limiter.Limit{Rate: 60, Period: time.Minute, Burst: 120}},
		{"scaled", sub("pro"), limiter.Limit{Rate: 600, Period: time.Minute, Burst: 1200}},
		{"scaled", sub("off"), limiter.Limit{Rate: 0, Period: time.Minute, Burst: 0}},
		{"scaled", sub("enterprise"), limiter.Limit{Rate: 100, Period: time.Minute, Burst: 200}},
		{"scaled", nil, limiter.Limit{Rate: 100, Period: time.Minute, Burst: 200}},
		{"scaled", &Subject{}, limiter.Limit{Rate: 100, Period: time.Minute, Burst: 200}},
		{"plan-only", sub("pro"), limiter.Limit{Rate: 50000, Period: time.Hour, Burst: 50000}},
		{"plan-only", sub("enterprise"), limiter.Limit{Rate: 1000, Period: time.Hour, Burst: 1000}},
		{"plan-only", nil, limiter.Limit{Rate: 1000, Period: time.Hour, Burst: 1000}},
		{"zero", nil, limiter.Limit{Rate: 0, Period: time.Second, Burst: 0}},
	}
	for _, tt := range tests {
		name := tt.policy + " nil"
		if tt.subject != nil && tt.subject.Tenant != nil {
			name = tt.policy + " " + tt.subject.Tenant.Plan
		}
		t.Run(name, func(t *testing.T) {
			if got := snap.Policies[tt.policy].LimitFor(tt.subject); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	if !snap.Policies["zero"].Limit.DenyAll() {
		t.Errorf("rate 0: got a limit that admits, want DenyAll")
	}
}

func TestPlanBurstDoesNotOverflow(t *testing.T) {
	rate := int64(1)
	pc := PolicyConfig{Rate: &rate, Burst: math.MaxInt64}
	if got := planBurst(math.MaxInt64, pc); got != math.MaxInt64 {
		t.Errorf("got %d, want MaxInt64", got)
	}
	rate = 3
	pc = PolicyConfig{Rate: &rate, Burst: 1}
	if got := planBurst(1, pc); got != 1 {
		t.Errorf("got %d, want at least 1", got)
	}
}

func TestCompileSnapshot(t *testing.T) {
	snap := mustParse(t, `
server: {trusted_proxies: [10.0.0.0/8, 192.0.2.9, "2001:db8::1", "10.1.2.3/8"], ipv6_prefix: 56, ipv4_prefix: 24}
tenants:
  header: authorization
  keys: {sk-1: {tenant: acme, plan: pro}}
routes:
  - name: r
    upstream: builtin:echo
    strip_prefix: /api
    timeout: 2s
    policies: [b, a]
    match: {host: "API.Example.com.", methods: [get, Post], headers: {x-debug: "*", x-env: prod}}
policies:
  a: {key: ip, rate: 1}
  b: {key: api_key, rate: 5, algorithm: fixed_window, on_redis_error: deny}
redis: {addrs: ["127.0.0.1:6379"]}
`)
	wantProxies := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.9/32"),
		netip.MustParsePrefix("2001:db8::1/128"), netip.MustParsePrefix("10.0.0.0/8"),
	}
	if got := snap.Identity.TrustedProxies; !slices.Equal(got, wantProxies) {
		t.Errorf("trusted proxies: got %v, want %v", got, wantProxies)
	}
	if snap.Identity.IPv4Prefix != 24 || snap.Identity.IPv6Prefix != 56 {
		t.Errorf("prefixes: got %d/%d, want 24/56", snap.Identity.IPv4Prefix, snap.Identity.IPv6Prefix)
	}
	if snap.Tenants.Header != "Authorization" || snap.Tenants.Keys["sk-1"] != (Tenant{Name: "acme", Plan: "pro"}) {
		t.Errorf("tenants: got %+v", snap.Tenants)
	}
	rt := snap.Routes[0]
	if rt.Match.Host != "api.example.com" || !slices.Equal(rt.Match.Methods, []string{"GET", "POST"}) {
		t.Errorf("match: got host %q methods %q, want api.example.com [GET POST]", rt.Match.Host, rt.Match.Methods)
	}
	wantHeaders := []HeaderMatch{{Name: "X-Debug"}, {Name: "X-Env", Value: "prod"}}
	if !slices.Equal(rt.Match.Headers, wantHeaders) {
		t.Errorf("headers: got %+v, want %+v", rt.Match.Headers, wantHeaders)
	}
	if len(rt.Policies) != 2 || rt.Policies[0] != snap.Policies["b"] || rt.Policies[1] != snap.Policies["a"] {
		t.Errorf("route policies: got %v, want [b a] in order, shared with Snapshot.Policies", rt.Policies)
	}
	if rt.StripPrefix != "/api" || rt.Timeout != 2*time.Second {
		t.Errorf("route: got strip %q timeout %v", rt.StripPrefix, rt.Timeout)
	}
	b := snap.Policies["b"]
	r := b.Rule
	if r.Name != "b" || r.Algorithm != limiter.FixedWindow || r.OnRedisError != limiter.FailDeny || r.LocalShare != 0 || r.Shadow || b.Name() != "b" {
		t.Errorf("limiter policy: got %q %s %s share %v shadow %v, want b fixed_window deny share 0 not shadow", r.Name, r.Algorithm, r.OnRedisError, r.LocalShare, r.Shadow)
	}
}

func TestRouteMatching(t *testing.T) {
	snap := mustParse(t, `
routes:
  - {name: admin-host, upstream: builtin:echo, match: {host: admin.example.com}}
  - {name: wildcard, upstream: builtin:echo, match: {host: "*.example.com", path_prefix: /w}}
  - {name: exact, upstream: builtin:echo, match: {path: /health}}
  - {name: debug, upstream: builtin:echo, match: {path_prefix: /api, headers: {X-Debug: ""}}}
  - {name: env, upstream: builtin:echo, match: {path_prefix: /api, headers: {x-env: canary}}}
  - {name: post-api, upstream: builtin:echo, match: {path_prefix: /api, methods: [post]}}
  - {name: api, upstream: builtin:echo, match: {path_prefix: /api}}
  - {name: slash, upstream: builtin:echo, match: {path_prefix: /files/}}
`)
	tests := []struct {
		name, method, target, host string
		headers                    map[string]string
		want                       string // "" for no match
	}{
		{name: "host exact", target: "/", host: "admin.example.com", want: "admin-host"},
		{name: "host case and port", target: "/", host: "ADMIN.example.com:8443", want: "admin-host"},
		{name: "wildcard host", target: "/w/x", host: "a.b.example.com", want: "wildcard"},
		{name: "wildcard needs a subdomain", target: "/w/x", host: "example.com"},
		{name: "wildcard suffix is a label", target: "/w/x", host: "badexample.com"},
		{name: "exact path", target: "/health", want: "exact"},
		{name: "exact path not a prefix", target: "/health/x"},
		{name: "prefix itself", target: "/api", want: "api"},
		{name: "prefix segment", target: "/api/v1", want: "api"},
		{name: "prefix is whole segments", target: "/apix"},
		{name: "prefix with slash", target: "/files/a", want: "slash"},
		{name: "prefix with slash needs it", target: "/files"},
		{name: "method", method: "POST", target: "/api/x", want: "post-api"},
		{name: "method other", method: "PUT", target: "/api/x", want: "api"},
		{name: "header presence", target: "/api/x", headers: map[string]string{"x-debug": "1"}, want: "debug"},
		{name: "header presence with empty value", target: "/api/x", headers: map[string]string{"X-Debug": ""}, want: "debug"},
		{name: "header value", target: "/api/x", headers: map[string]string{"X-Env": "canary"}, want: "env"},
		{name: "header value differs", target: "/api/x", headers: map[string]string{"X-Env": "prod"}, want: "api"},
		{name: "first match wins", method: "POST", target: "/api/x", headers: map[string]string{"X-Debug": "1"}, want: "debug"},
		{name: "no match", target: "/nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = "GET"
			}
			r := httptest.NewRequest(method, tt.target, nil)
			r.Host = tt.host
			if r.Host == "" {
				r.Host = "gateway.local"
			}
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			got := snap.Match(r)
			switch {
			case tt.want == "" && got != nil:
				t.Errorf("got route %q, want no match", got.Name)
			case tt.want != "" && got == nil:
				t.Errorf("got no match, want route %q", tt.want)
			case tt.want != "" && got.Name != tt.want:
				t.Errorf("got route %q, want %q", got.Name, tt.want)
			}
		})
	}
}

func TestRestartRequired(t *testing.T) {
	old := mustParse(t, minimalYAML+"server: {listen: '127.0.0.1:8080', trusted_proxies: [10.0.0.0/8]}\n").Config
	changed := mustParse(t, minimalYAML+`
server: {listen: '127.0.0.1:9090', trusted_proxies: [192.0.2.0/24], idle_timeout: 1m}
redis: {password: x}
`).Config
	want := []string{"server.listen", "server.idle_timeout", "redis.password"}
	if got := RestartRequired(old, changed); !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := RestartRequired(old, old); len(got) != 0 {
		t.Errorf("same config: got %q, want none", got)
	}
}
