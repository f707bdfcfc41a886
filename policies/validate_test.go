package policies

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// withPolicy returns a config with one route using policy "p" defined by body.
func withPolicy(body string) string {
	return `
routes:
  - {name: r, upstream: "http://127.0.0.1:9000", policies: [p]}
policies:
  p: ` + body + "\n"
}

// withRoute returns a config whose only route is body (a YAML flow mapping).
func withRoute(body string) string {
	return `
routes:
  - ` + body + `
policies:
  p: {key: ip, rate: 1}
`
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"negative rate", withPolicy("{key: ip, rate: -1}"), "gateway.yaml: policies.p.rate: must be >= 0"},
		{"rate missing", withPolicy("{key: ip}"), "gateway.yaml: policies.p.rate: required (or set plans)"},
		{"per negative", withPolicy("{key: ip, rate: 1, per: -1s}"), "gateway.yaml: policies.p.per: must be > 0"},
		{"burst negative", withPolicy("{key: ip, rate: 1, burst: -2}"), "gateway.yaml: policies.p.burst: must be >= 0"},
		{"burst on a window", "redis: {addrs: [127.0.0.1:6379]}\n" + withPolicy("{key: ip, algorithm: fixed_window, rate: 5, burst: 9}"), "gateway.yaml: policies.p.burst: applies to token_bucket and gcra only: a fixed_window admits rate per per"},
		{"algorithm", withPolicy("{key: ip, rate: 1, algorithm: leaky}"),
			`gateway.yaml: policies.p.algorithm: must be token_bucket, gcra, sliding_window, fixed_window, concurrency or shared_concurrency, got "leaky"`},
		{"gcra without redis", withPolicy("{key: tenant, rate: 1, algorithm: gcra}"),
			"gateway.yaml: policies.p.algorithm: gcra needs redis (set redis.addrs)"},
		{"sliding window without redis", withPolicy("{key: ip, rate: 1, algorithm: sliding_window}"),
			"gateway.yaml: policies.p.algorithm: sliding_window needs redis (set redis.addrs)"},
		{"on_redis_error", withPolicy("{key: ip, rate: 1, on_redis_error: panic}"),
			`gateway.yaml: policies.p.on_redis_error: must be allow, deny or local, got "panic"`},
		{"local_share above 1", withPolicy("{key: ip, rate: 1, on_redis_error: local, local_share: 1.5}"),
			"gateway.yaml: policies.p.local_share: must be in (0, 1], got 1.5"},
		{"local_share negative", withPolicy("{key: ip, rate: 1, local_share: -0.1}"),
			"gateway.yaml: policies.p.local_share: must be in (0, 1], got -0.1"},
		{"cost", withPolicy("{key: ip, rate: 1, cost: bytes}"),
			`gateway.yaml: policies.p.cost: must be requests, tokens, input_tokens, output_tokens or usd, got "bytes"`},
		{"charge_without_usage", withPolicy("{key: ip, rate: 1, cost: tokens, charge_without_usage: half}"),
			`gateway.yaml: policies.p.charge_without_usage: must be reserved or delivered, got "half"`},
		{"algorithm not a string", withPolicy("{key: ip, rate: 1, algorithm: [gcra]}"),
			`gateway.yaml: policies.p.algorithm: must be a string, not a list (quote it)`},
		{"on_missing_key", withPolicy("{key: ip, rate: 1, on_missing_key: ignore}"),
			`gateway.yaml: policies.p.on_missing_key: must be skip, shared or reject, got "ignore"`},
		{"key missing", withPolicy("{rate: 1}"),
			"gateway.yaml: policies.p.key: required (ip, header:NAME, query:NAME, claim:NAME, api_key, tenant, model, or several joined with +)"},
		{"key unknown source", withPolicy("{key: cookie:sid, rate: 1}"),
			`gateway.yaml: policies.p.key: unknown key source "cookie:sid" (want ip, header:NAME, query:NAME, claim:NAME, cert:FIELD, api_key, tenant or model)`},
		{"key typo", withPolicy("{key: tenat, rate: 1}"),
			`gateway.yaml: policies.p.key: unknown key source "tenat" (want ip, header:NAME, query:NAME, claim:NAME, cert:FIELD, api_key, tenant or model); did you mean "tenant"?`},
		{"key header without name", withPolicy("{key: 'header:', rate: 1}"),
			`gateway.yaml: policies.p.key: "header:" needs a header name (header:X-User)`},
		{"key query without name", withPolicy("{key: 'ip+query:', rate: 1}"),
			`gateway.yaml: policies.p.key: "query:" needs a parameter name (query:user)`},
		{"key empty part", withPolicy("{key: ip++tenant, rate: 1}"), `gateway.yaml: policies.p.key: empty part in "ip++tenant"`},
		{"key ip with name", withPolicy("{key: 'ip:x', rate: 1}"), `gateway.yaml: policies.p.key: "ip:x" takes no name`},
		{"plan rate negative", withPolicy("{key: tenant, plans: {free: -5}}"), "gateway.yaml: policies.p.plans.free: must be >= 0"},
		{"policy name", `
routes: [{name: r, upstream: builtin:echo, policies: ["bad name!"]}]
policies: {"bad name!": {key: ip, rate: 1}}
`, `gateway.yaml: policies.bad name!: policy name must be 1 to 64 of A-Z a-z 0-9 _ . -, got "bad name!"`},
		{"policy name too long", `
routes: [{name: r, upstream: builtin:echo}]
policies: {` + strings.Repeat("a", 65) + `: {key: ip, rate: 1}}
`, "gateway.yaml: policies." + strings.Repeat("a", 65) + `: policy name must be 1 to 64 of A-Z a-z 0-9 _ . -, got "` + strings.Repeat("a", 65) + `"`},
		{"unknown policy", `
routes:
  - {name: a, upstream: builtin:echo, policies: [p]}
  - {name: b, upstream: builtin:echo, policies: [nope]}
policies: {p: {key: ip, rate: 1}}
`, `gateway.yaml: routes[1].policies[0]: unknown policy "nope"`},
		{"policy twice", withRoute(`{name: r, upstream: builtin:echo, policies: [p, p]}`),
			`gateway.yaml: routes[0].policies[1]: policy "p" listed twice`},
		{"no routes", "policies: {p: {key: ip, rate: 1}}\n", "gateway.yaml: routes: at least one route is required"},
		{"route name required", withRoute(`{upstream: builtin:echo}`), "gateway.yaml: routes[0].name: required"},
		{"duplicate route name", `
routes:
  - {name: a, upstream: builtin:echo}
  - {name: a, upstream: builtin:echo}
`, `gateway.yaml: routes[1].name: duplicate route name "a" (also routes[0])`},
		{"upstream scheme", withRoute(`{name: r, upstream: "ftp://x"}`),
			`gateway.yaml: routes[0].upstream: must be http(s)://host or builtin:NAME, got "ftp://x"`},
		{"upstream without host", withRoute(`{name: r, upstream: "http://"}`),
			`gateway.yaml: routes[0].upstream: must be http(s)://host or builtin:NAME, got "http://"`},
		{"upstream missing", withRoute(`{name: r}`),
			"gateway.yaml: routes[0].upstream: required (http(s)://host or builtin:NAME)"},
		{"upstream query", withRoute(`{name: r, upstream: "http://h/?a=b"}`),
			`gateway.yaml: routes[0].upstream: must not have a query or fragment, got "http://h/?a=REDACTED"`},
		{"strip_prefix", withRoute(`{name: r, upstream: builtin:echo, strip_prefix: api}`),
			`gateway.yaml: routes[0].strip_prefix: must start with "/", got "api"`},
		{"route timeout negative", withRoute(`{name: r, upstream: builtin:echo, timeout: -5s}`),
			"gateway.yaml: routes[0].timeout: must not be negative, got -5s"},
		{"rate_limit_headers", withRoute(`{name: r, upstream: builtin:echo, rate_limit_headers: draft}`),
			`gateway.yaml: routes[0].rate_limit_headers: must be all, ietf, legacy or none, got "draft"`},
		{"max_body_bytes", withRoute(`{name: r, upstream: builtin:echo, max_body_bytes: -2}`),
			"gateway.yaml: routes[0].max_body_bytes: must be >= 0, or -1 for no limit"},
		{"path", withRoute(`{name: r, upstream: builtin:echo, match: {path: x}}`),
			`gateway.yaml: routes[0].match.path: must start with "/", got "x"`},
		{"path_prefix not clean", withRoute(`{name: r, upstream: builtin:echo, match: {path_prefix: /v1//admin}}`),
			`gateway.yaml: routes[0].match.path_prefix: must be a clean path (no "//", "." or ".." segments): requests are matched after cleaning, so "/v1//admin" would never match; did you mean "/v1/admin"?`},
		{"path with dot segment", withRoute(`{name: r, upstream: builtin:echo, match: {path: /a/../admin/}}`),
			`gateway.yaml: routes[0].match.path: must be a clean path (no "//", "." or ".." segments): requests are matched after cleaning, so "/a/../admin/" would never match; did you mean "/admin/"?`},
		{"strip_prefix escaped", withRoute(`{name: r, upstream: builtin:echo, strip_prefix: /a%2Fb}`),
			`gateway.yaml: routes[0].strip_prefix: must be a decoded path without % escapes or backslashes, got "/a%2Fb"`},
		{"path_prefix", withRoute(`{name: r, upstream: builtin:echo, match: {path_prefix: x}}`),
			`gateway.yaml: routes[0].match.path_prefix: must start with "/", got "x"`},
		{"path and prefix", withRoute(`{name: r, upstream: builtin:echo, match: {path: /a, path_prefix: /b}}`),
			"gateway.yaml: routes[0].match: set path or path_prefix, not both"},
		{"host with port", withRoute(`{name: r, upstream: builtin:echo, match: {host: "a.com:80"}}`),
			`gateway.yaml: routes[0].match.host: must be a host name or *.domain, without scheme or port, got "a.com:80"`},
		{"method", withRoute(`{name: r, upstream: builtin:echo, match: {methods: ["GE T"]}}`),
			`gateway.yaml: routes[0].match.methods[0]: must be an HTTP method, got "GE T"`},
		{"header name", withRoute(`{name: r, upstream: builtin:echo, match: {headers: {"X Y": a}}}`),
			`gateway.yaml: routes[0].match.headers.X Y: must be a header name, got "X Y"`},
		{"listen", minimalYAML + "server: {listen: localhost}\n", `gateway.yaml: server.listen: must be host:port, got "localhost"`},
		{"negative duration", minimalYAML + "server: {idle_timeout: -1s}\n", "gateway.yaml: server.idle_timeout: must not be negative, got -1s"},
		{"trusted proxy", minimalYAML + "server: {trusted_proxies: [10.0.0.0/8, not-an-ip]}\n",
			`gateway.yaml: server.trusted_proxies[1]: must be a CIDR (10.0.0.0/8) or an address, got "not-an-ip"`},
		{"forwarded_header", minimalYAML + "server: {forwarded_header: x-real-ip}\n", `gateway.yaml: server.forwarded_header: must be x-forwarded-for or forwarded, got "x-real-ip"`},
		{"path_parameters", minimalYAML + "server: {path_parameters: keep}\n", `gateway.yaml: server.path_parameters: must be reject or strip, got "keep"`},
		{"min_heap_bytes", minimalYAML + "server: {min_heap_bytes: -2}\n", "gateway.yaml: server.min_heap_bytes: must be > 0, or -1 for Go's own rule, got -2"},
		{"prompt_count_share above 1", minimalYAML + "server: {prompt_count_share: 1.5}\n", "gateway.yaml: server.prompt_count_share: must be more than 0 and at most 1 (a share of one core), got 1.5"},
		{"prompt_count_share negative", minimalYAML + "server: {prompt_count_share: -0.5}\n", "gateway.yaml: server.prompt_count_share: must be more than 0 and at most 1 (a share of one core), got -0.5"},
		{"prompt_count_share not a number", minimalYAML + "server: {prompt_count_share: .nan}\n", "gateway.yaml: server.prompt_count_share: must be more than 0 and at most 1 (a share of one core), got NaN"},
		{"upstream_transport", minimalYAML + "server: {upstream_transport: fast}\n", `gateway.yaml: server.upstream_transport: must be lean or standard, got "fast"`},
		{"client_server", minimalYAML + "server: {client_server: fasthttp}\n", `gateway.yaml: server.client_server: must be lean or standard, got "fasthttp"`},
		{"ipv4_prefix", minimalYAML + "server: {ipv4_prefix: 33}\n", "gateway.yaml: server.ipv4_prefix: must be between 1 and 32, got 33"},
		{"ipv6_prefix", minimalYAML + "server: {ipv6_prefix: 129}\n", "gateway.yaml: server.ipv6_prefix: must be between 1 and 128, got 129"},
		{"ipv6_prefix negative", minimalYAML + "server: {ipv6_prefix: -1}\n", "gateway.yaml: server.ipv6_prefix: must be between 1 and 128, got -1"},
		{"max_header_bytes", minimalYAML + "server: {max_header_bytes: -1}\n", "gateway.yaml: server.max_header_bytes: must be > 0"},
		{"tenant header", minimalYAML + "tenants: {header: 'X Key'}\n", `gateway.yaml: tenants.header: must be a header name, got "X Key"`},
		{"tenant required", minimalYAML + "tenants: {keys: {sk-1: {plan: free}}}\n", "gateway.yaml: tenants.keys." + keyEntryPlace("sk-1") + ".tenant: required"},
		{"empty api key", minimalYAML + "tenants: {keys: {'': {tenant: a}}}\n", "gateway.yaml: tenants.keys: an API key must not be empty"},
		{"redis addr", minimalYAML + "redis: {addrs: [nohost]}\n",
			`gateway.yaml: redis.addrs[0]: must be host:port, redis://host:port or rediss://host:port, got "nohost"`},
		{"redis scheme", minimalYAML + "redis: {addrs: ['http://h:1']}\n",
			`gateway.yaml: redis.addrs[0]: must be host:port, redis://host:port or rediss://host:port, got "http://h:1"`},
		{"sentinel without addrs", minimalYAML + "redis: {sentinel: {master_name: m}}\n",
			"gateway.yaml: redis.sentinel.addrs: required with redis.sentinel.master_name"},
		{"redis both", minimalYAML + "redis: {addrs: ['h:1'], sentinel: {master_name: m, addrs: ['s:2']}}\n",
			"gateway.yaml: redis: set redis.addrs or redis.sentinel, not both"},
		{"redis timeout", minimalYAML + "redis: {timeout: -1ms}\n", "gateway.yaml: redis.timeout: must be > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantLine(t, errorLines(t, tt.yaml), tt.want)
		})
	}
}

func TestValidConfigs(t *testing.T) {
	tests := []struct{ name, yaml string }{
		{"rate zero denies all", withPolicy("{key: ip, rate: 0}")},
		{"plans only", withPolicy("{key: tenant, plans: {free: 60, pro: 600}, per: 1m}")},
		{"gcra with redis", withPolicy("{key: tenant, rate: 5, algorithm: gcra}") + "redis: {addrs: ['127.0.0.1:6379']}\n"},
		{"fixed window with sentinel", withPolicy("{key: ip, rate: 5, algorithm: fixed_window}") +
			"redis: {sentinel: {master_name: m, addrs: ['127.0.0.1:26379']}}\n"},
		{"rediss url", withPolicy("{key: ip, rate: 5}") + "redis: {addrs: ['rediss://cache:6380']}\n"},
		{"composite key", withPolicy("{key: tenant+ip+header:X-User+query:u+api_key, rate: 5}")},
		{"wildcard host and everything", withRoute(`{name: r, upstream: "https://api.example.com/base", strip_prefix: /api,
    timeout: 2s, max_body_bytes: -1, policies: [p],
    match: {host: "*.example.com", path_prefix: /api, methods: [get, POST], headers: {X-Debug: "*", X-Env: prod}}}`)},
		{"empty server and policy sections", "server:\nroutes: [{name: r, upstream: builtin:echo}]\npolicies:\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mustParse(t, tt.yaml)
		})
	}
}

func TestBuiltinUpstreams(t *testing.T) {
	yaml := withRoute(`{name: r, upstream: builtin:echo}`)
	snap := mustParse(t, yaml)
	if got, want := snap.Routes[0].Upstream.String(), "http://builtin.echo.invalid"; got != want {
		t.Errorf("placeholder: got %q, want %q", got, want)
	}

	echo := &url.URL{Scheme: "http", Host: "127.0.0.1:41234"}
	snap, err := Parse("gateway.yaml", []byte(yaml), Options{Builtins: map[string]*url.URL{"echo": echo}})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := snap.Routes[0].Upstream.String(); got != "http://127.0.0.1:41234" {
		t.Errorf("resolved: got %q, want %q", got, echo)
	}
	if snap.Routes[0].Upstream == echo {
		t.Errorf("resolved upstream shares the caller's *url.URL; want a copy")
	}

	_, err = Parse("gateway.yaml", []byte(yaml), Options{Builtins: map[string]*url.URL{"other": echo}})
	if want := `gateway.yaml: routes[0].upstream: unknown builtin upstream "echo" (known: other)`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

// TestPlansNeedATenantKey: local buckets are per (policy, limit), and the
// limit comes from the plan of the API key presented. With a key that does
// not identify the tenant, one client presenting keys of different plans
// gets a bucket per plan.
func TestPlansNeedATenantKey(t *testing.T) {
	const msg = "needs a key that identifies the tenant (tenant or api_key, alone or joined with +): with key %q a client presenting API keys of different plans gets a bucket per plan"
	for _, key := range []string{"ip", "header:X-User", "header:X-User+ip", "query:u"} {
		t.Run("error "+key, func(t *testing.T) {
			wantLine(t, errorLines(t, withPolicy("{key: '"+key+"', rate: 5, plans: {free: 5, pro: 50}}")),
				"gateway.yaml: policies.p.plans: "+strings.Replace(msg, "%q", `"`+key+`"`, 1))
		})
	}
	for _, key := range []string{"tenant", "api_key", "tenant+ip", "ip+api_key"} {
		t.Run("ok "+key, func(t *testing.T) {
			mustParse(t, withPolicy("{key: '"+key+"', rate: 5, plans: {free: 5, pro: 50}}"))
		})
	}
}

func TestCalendarWindows(t *testing.T) {
	const redis = "redis: {addrs: [127.0.0.1:6379]}\n"
	bad := []struct{ name, policy, want string }{
		{"unknown window", "{key: tenant, algorithm: fixed_window, rate: 5, window: week}", `gateway.yaml: policies.p.window: must be day or month, got "week"`},
		{"window on gcra", "{key: tenant, algorithm: gcra, rate: 5, window: month}", "gateway.yaml: policies.p.window: applies to fixed_window only (a calendar day or month, UTC), not gcra"},
		{"window and per", "{key: tenant, algorithm: fixed_window, rate: 5, per: 1h, window: day}", "gateway.yaml: policies.p.window: set per or window, not both"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("gateway.yaml", []byte(redis+withPolicy(tt.policy)), Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		window string
		want   limiter.Limit
	}{
		{"day", limiter.Limit{Rate: 5, Period: 24 * time.Hour, Burst: 5}},
		{"month", limiter.Limit{Rate: 5, Period: limiter.MonthPeriod, Burst: 5, Calendar: limiter.CalendarMonth}},
	} {
		t.Run(tt.window, func(t *testing.T) {
			snap, err := Parse("gateway.yaml", []byte(redis+withPolicy("{key: tenant, algorithm: fixed_window, rate: 5, window: "+tt.window+"}")), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := snap.Policies["p"].Limit; got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDollarBudgetsNeedPrices(t *testing.T) {
	const route = "routes: [{name: r, upstream: builtin:echo, llm: openai, policies: [p]}]\n"
	for _, tt := range []struct{ name, yaml, want string }{
		{"no default price", route + "prices: {gpt-4o: {input: 2.5, output: 10}}\npolicies: {p: {key: tenant, cost: usd, rate: 5, per: 24h}}",
			"gateway.yaml: policies.p.cost: usd needs prices, with a default entry for models the table does not name (never free)"},
		{"free by accident", route + "prices: {default: {input: 0, output: 0}}\npolicies: {p: {key: tenant, cost: usd, rate: 5, per: 24h}}",
			"gateway.yaml: prices.default: input and output are both 0"},
		{"negative price", route + "prices: {default: {input: -1, output: 1}}\npolicies: {p: {key: tenant, cost: usd, rate: 5, per: 24h}}",
			"gateway.yaml: prices.default.input: must not be negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("gateway.yaml", []byte(tt.yaml), Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	snap, err := Parse("gateway.yaml", []byte(route+"prices: {default: {input: 1, output: 2}}\npolicies: {p: {key: tenant, cost: usd, rate: 5, per: 24h}}"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Policies["p"].Limit.Rate; got != 5*MicroUSD {
		t.Fatalf("a $5 budget: got rate %d, want %d micro-dollars", got, 5*MicroUSD)
	}
	if pr, def := snap.Prices.For("anything"); !def || pr.CachedInput != 1_000_000 {
		t.Fatalf("an unnamed model: got %+v (default %v), want the default price, cached input at the input price", pr, def)
	}
}
