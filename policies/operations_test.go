package policies

import (
	"testing"
	"time"
)

// The operations settings: defaults, shadow (per policy and global), delay.
func TestOperationsDefaultsAndModes(t *testing.T) {
	snap := mustParse(t, `
routes:
  - {name: r, upstream: "http://127.0.0.1:9000", policies: [a, b]}
policies:
  a: {key: ip, rate: 5, mode: shadow}
  b: {key: ip, rate: 5, on_limit: delay}
`)
	c := snap.Config
	if *c.Admin.Listen != "127.0.0.1:9090" || c.Admin.Token != "" || c.Log.Format != "text" || c.Log.AccessSample != 1 || c.Mode != "enforce" {
		t.Fatalf("defaults: admin %q token %q, log %+v, mode %q", *c.Admin.Listen, c.Admin.Token, c.Log, c.Mode)
	}
	a, b := snap.Policies["a"], snap.Policies["b"]
	if !a.Rule.Shadow || b.Rule.Shadow {
		t.Fatalf("shadow: a %v, b %v; want true, false", a.Rule.Shadow, b.Rule.Shadow)
	}
	if a.MaxDelay != 0 || b.MaxDelay != 2*time.Second || b.MaxWaiters != 100 {
		t.Fatalf("delay: a %s, b %s/%d; want 0, 2s/100", a.MaxDelay, b.MaxDelay, b.MaxWaiters)
	}
	global := mustParse(t, `
mode: shadow
admin: {listen: ""}
routes:
  - {name: r, upstream: "http://127.0.0.1:9000", policies: [a]}
policies:
  a: {key: ip, rate: 5}
`)
	if !global.Policies["a"].Rule.Shadow {
		t.Fatal("mode: shadow left a policy enforcing")
	}
	if *global.Config.Admin.Listen != "" {
		t.Fatalf(`admin.listen "" became %q, want off`, *global.Config.Admin.Listen)
	}
	open := mustParse(t, `
admin: {listen: "0.0.0.0:9090", token: secret-0123456789abcdef0123456789, pprof: true}
routes:
  - {name: r, upstream: "http://127.0.0.1:9000"}
`)
	if *open.Config.Admin.Listen != "0.0.0.0:9090" {
		t.Fatal("a non-loopback admin listener with a token was refused")
	}
}

func TestOperationsValidationErrors(t *testing.T) {
	route := "routes:\n  - {name: r, upstream: \"http://127.0.0.1:9000\", policies: [p]}\n"
	tests := []struct{ name, yaml, want string }{
		{"bad mode", "mode: dry\n" + route + "policies:\n  p: {key: ip, rate: 1}\n", `gateway.yaml: mode: must be enforce or shadow, got "dry"`},
		{"public admin without token", "admin: {listen: \"0.0.0.0:9090\"}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			"gateway.yaml: admin.listen: 0.0.0.0:9090 is reachable from other hosts: set admin.token (GATEWAY_ADMIN_TOKEN), or listen on 127.0.0.1"},
		{"every interface without token", "admin: {listen: \":9090\"}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			"gateway.yaml: admin.listen: :9090 is reachable from other hosts: set admin.token (GATEWAY_ADMIN_TOKEN), or listen on 127.0.0.1"},
		{"admin not host:port", "admin: {listen: \"9090\"}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			`gateway.yaml: admin.listen: must be host:port, or "" for no admin listener, got "9090"`},
		{"pprof without token", "admin: {pprof: true}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			"gateway.yaml: admin.pprof: needs admin.token: profiles show the process's memory and stacks"},
		{"short token", "admin: {token: Z}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			"gateway.yaml: admin.token: must be at least 32 characters, got 1: a short token can be guessed (make one with: head -c 32 /dev/urandom | base64)"},
		{"token of 31", "admin: {token: abcdefghijklmnopqrstuvwxyz01234}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			"gateway.yaml: admin.token: must be at least 32 characters, got 31: a short token can be guessed (make one with: head -c 32 /dev/urandom | base64)"},
		{"negative session_ttl", "admin: {session_ttl: -1s}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			"gateway.yaml: admin.session_ttl: must be more than 0 and at most 168h0m0s, got -1s"},
		{"session_ttl over a week", "admin: {session_ttl: 200h}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			"gateway.yaml: admin.session_ttl: must be more than 0 and at most 168h0m0s, got 200h0m0s"},
		{"tiny memory limit", "server: {memory_limit_bytes: 1000}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			"gateway.yaml: server.memory_limit_bytes: must be at least 33554432 (32 MiB), or 0 for the container's limit, or -1 for none, got 1000"},
		{"memory limit below -1", "server: {memory_limit_bytes: -2}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n",
			"gateway.yaml: server.memory_limit_bytes: must be at least 33554432 (32 MiB), or 0 for the container's limit, or -1 for none, got -2"},
		{"log format", "log: {format: xml}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n", `gateway.yaml: log.format: must be text or json, got "xml"`},
		{"sample", "log: {access_sample: 2}\n" + route + "policies:\n  p: {key: ip, rate: 1}\n", "gateway.yaml: log.access_sample: must be in (0, 1], got 2"},
		{"policy mode", route + "policies:\n  p: {key: ip, rate: 1, mode: log}\n", `gateway.yaml: policies.p.mode: must be enforce or shadow, got "log"`},
		{"on_limit", route + "policies:\n  p: {key: ip, rate: 1, on_limit: queue}\n", `gateway.yaml: policies.p.on_limit: must be reject or delay, got "queue"`},
		{"max_delay without delay", route + "policies:\n  p: {key: ip, rate: 1, max_delay: 1s}\n", "gateway.yaml: policies.p.max_delay: applies to on_limit: delay only"},
		{"max_waiters without delay", route + "policies:\n  p: {key: ip, rate: 1, max_waiters: 3}\n", "gateway.yaml: policies.p.max_waiters: applies to on_limit: delay only"},
		{"negative max_delay", route + "policies:\n  p: {key: ip, rate: 1, on_limit: delay, max_delay: -1s}\n", "gateway.yaml: policies.p.max_delay: must be > 0, got -1s"},
		{"delay on concurrency", route + "policies:\n  p: {key: ip, algorithm: concurrency, limit: 2, on_limit: delay}\n",
			"gateway.yaml: policies.p.on_limit: delay applies to rate policies; a concurrency slot frees when a request ends, not at a known time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantLine(t, errorLines(t, tt.yaml), tt.want)
		})
	}
}
