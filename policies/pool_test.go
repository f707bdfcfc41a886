package policies

import (
	"testing"
	"time"
)

func TestPoolErrors(t *testing.T) {
	member := func(extra string) string {
		return `{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}, ` + extra + `]}`
	}
	tests := []struct{ name, route, want string }{
		{"both", `{name: p, upstream: "http://127.0.0.1:9000", upstreams: [{name: a, url: "http://127.0.0.1:9001"}]}`,
			"gateway.yaml: routes[0].upstream: set upstream or upstreams, not both"},
		{"neither", `{name: p}`, "gateway.yaml: routes[0].upstream: required (http(s)://host or builtin:NAME)"},
		{"name missing", member(`{url: "http://127.0.0.1:9002"}`), `gateway.yaml: routes[0].upstreams[1].name: required: letters, digits, _ . - (at most 64), got ""`},
		{"name twice", member(`{name: a, url: "http://127.0.0.1:9002"}`), `gateway.yaml: routes[0].upstreams[1].name: duplicate member name "a" (also upstreams[0])`},
		{"weight", member(`{name: b, url: "http://127.0.0.1:9002", weight: -1}`), "gateway.yaml: routes[0].upstreams[1].weight: must be > 0 (to take a member out, remove it from the list), got -1"},
		{"weight 0", member(`{name: b, url: "http://127.0.0.1:9002", weight: 0}`), "gateway.yaml: routes[0].upstreams[1].weight: must be > 0 (to take a member out, remove it from the list), got 0"},
		{"url secret redacted", member(`{name: b, url: "ftp://u:secret@h"}`), `gateway.yaml: routes[0].upstreams[1].url: must be http(s)://host or builtin:NAME, got "ftp://REDACTED@h"`},
		{"path differs", member(`{name: b, url: "http://127.0.0.1:9002/v2"}`), `gateway.yaml: routes[0].upstreams[1].url: every member of a pool has the same path (upstreams[0]'s is ""), got "/v2"`},
		{"protocol", member(`{name: b, url: "http://127.0.0.1:9002", protocol: spdy}`), `gateway.yaml: routes[0].upstreams[1].protocol: must be auto, http1, h2 or h2c, got "spdy"`},
		{"h2c over tls", member(`{name: b, url: "https://127.0.0.1:9002", protocol: h2c}`), "gateway.yaml: routes[0].upstreams[1].protocol: h2c is HTTP/2 without TLS and needs an http:// upstream (h2 is HTTP/2 over TLS), got https://"},
		{"balance", `{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}], balance: random}`,
			`gateway.yaml: routes[0].balance: must be round_robin, least_request or hash, got "random"`},
		{"hash without key", `{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}], balance: hash}`,
			"gateway.yaml: routes[0].hash_key: required with balance: hash (a key as policies write it: tenant, header:NAME, ip, ...)"},
		{"hash key bad", `{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}], balance: hash, hash_key: "cookie:x"}`,
			"gateway.yaml: routes[0].hash_key: "},
		{"retry on one upstream", `{name: p, upstream: "http://127.0.0.1:9000", retry: {}}`,
			"gateway.yaml: routes[0].retry: applies to a pool of upstreams only (set upstreams)"},
		{"retry attempts", `{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}], retry: {attempts: 11}}`,
			"gateway.yaml: routes[0].retry.attempts: must be between 1 and 10, got 11"},
		{"retry 4xx", `{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}], retry: {statuses: [504, 429]}}`,
			"gateway.yaml: routes[0].retry.statuses[1]: must be a 5xx status (429 is not retried: its Retry-After is the member's), got 429"},
		{"max ejection", `{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}], health: {ejection: 1m, max_ejection: 10s}}`,
			"gateway.yaml: routes[0].health.max_ejection: must be at least ejection (1m0s), got 10s"},
		{"check path", `{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}], health: {check: {path: healthz}}}`,
			`gateway.yaml: routes[0].health.check.path: must start with "/", got "healthz"`},
		{"check timeout", `{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}], health: {check: {path: /h, interval: 1s, timeout: 2s}}}`,
			"gateway.yaml: routes[0].health.check.timeout: must be > 0 and at most interval (1s), got 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := errorLines(t, withRoute(tt.route))
			for _, l := range lines {
				if len(l) >= len(tt.want) && l[:len(tt.want)] == tt.want {
					return
				}
			}
			t.Errorf("got %q, want a line starting %q", lines, tt.want)
		})
	}
}

func TestPoolCompiles(t *testing.T) {
	snap := mustParse(t, withRoute(`{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001/v1", weight: 3}, {name: b, url: "http://127.0.0.1:9002/v1", protocol: h2c}],
    balance: hash, hash_key: tenant, retry: {statuses: [504], idempotency_key: true}, health: {check: {path: /healthz}}}`))
	pool := snap.Routes[0].Pool
	if pool == nil {
		t.Fatal("got no pool")
	}
	if got := snap.Routes[0].Upstream.String(); got != "http://127.0.0.1:9001/v1" {
		t.Errorf("got upstream %s, want the first member's", got)
	}
	if len(pool.Members) != 2 || pool.Members[0].Weight != 3 || pool.Members[1].Weight != 1 || pool.Members[1].Protocol != UpstreamH2C || pool.Members[0].Protocol != UpstreamAuto {
		t.Errorf("got members %+v", pool.Members)
	}
	if pool.HashKey == nil || pool.Balance != BalanceHash {
		t.Errorf("got balance %s, hash key set %v", pool.Balance, pool.HashKey != nil)
	}
	if want := (Health{Failures: 5, Ejection: 30 * time.Second, MaxEjection: 5 * time.Minute}); pool.Health != want {
		t.Errorf("got health %+v, want %+v", pool.Health, want)
	}
	if c := pool.Check; c == nil || c.Interval != 10*time.Second || c.Timeout != 2*time.Second || c.Healthy != 2 || c.Unhealthy != 3 {
		t.Errorf("got check %+v", c)
	}
	if r := pool.Retry; r == nil || r.Attempts != 2 || !r.Retries(502) || !r.Retries(503) || !r.Retries(504) || r.Retries(500) || !r.IdempotencyKey {
		t.Errorf("got retry %+v", r)
	}
	one := mustParse(t, withRoute(`{name: p, upstream: "http://127.0.0.1:9000"}`))
	if one.Routes[0].Pool != nil {
		t.Error("a route with one upstream got a pool")
	}
}

// A member's URL, which may hold a secret, can come from the environment,
// and a bad one is an error that names the variable, redacted.
func TestPoolMemberFromTheEnvironment(t *testing.T) {
	yaml := withRoute(`{name: p, upstreams: [{name: a, url: "http://127.0.0.1:9001"}, {name: b, url: "http://127.0.0.1:9002"}]}`)
	snap := mustParse(t, yaml, "GATEWAY_ROUTES_0_UPSTREAMS_1_URL=http://10.9.9.9:1/")
	if got := snap.Routes[0].Pool.Members[1].URL.String(); got != "http://10.9.9.9:1/" {
		t.Errorf("got b at %s, want the environment's", got)
	}
	lines := errorLines(t, yaml, "GATEWAY_ROUTES_0_UPSTREAMS_1_URL=http://u:secret@10.9.9.9:1")
	wantLine(t, lines, `gateway.yaml: routes[0].upstreams[1].url (from GATEWAY_ROUTES_0_UPSTREAMS_1_URL): must be http(s)://host or builtin:NAME, got "http://REDACTED@10.9.9.9:1"`)
}
