package policies

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

const envYAML = `
server: {listen: "127.0.0.1:8080"}
tenants:
  keys:
    sk-demo-free: {tenant: acme, plan: free}
routes:
  - {name: chat, upstream: builtin:echo, policies: [per-ip, tenant-rpm]}
  - {name: other, upstream: "http://127.0.0.1:9000"}
policies:
  per-ip: {key: ip, rate: 20, burst: 40}
  tenant-rpm: {key: tenant, per: 1m, plans: {free: 60, pro: 600}}
`

// envPlainKeyWarning is envYAML's warning of its own: its key is in plain
// text.
const envPlainKeyWarning = `gateway.yaml: tenants.keys: 1 API key(s) written in plain text: whoever reads this file holds them; ` +
	`write each as its digest (gateway key-digest KEY prints "sha256:<hex>")`

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name  string
		env   []string
		check func(t *testing.T, s *Snapshot)
	}{
		{"server listen", []string{"GATEWAY_SERVER_LISTEN=127.0.0.1:9999"}, func(t *testing.T, s *Snapshot) {
			if got := s.Config.Server.Listen; got != "127.0.0.1:9999" {
				t.Errorf("got %q, want 127.0.0.1:9999", got)
			}
		}},
		{"trusted proxies list", []string{"GATEWAY_SERVER_TRUSTED_PROXIES=10.0.0.0/8, 127.0.0.1/32,::1"}, func(t *testing.T, s *Snapshot) {
			want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
			if got := s.Identity.TrustedProxies; !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		}},
		{"empty list clears", []string{"GATEWAY_SERVER_TRUSTED_PROXIES="}, func(t *testing.T, s *Snapshot) {
			if got := s.Identity.TrustedProxies; len(got) != 0 {
				t.Errorf("got %v, want none", got)
			}
		}},
		{"hyphenated policy rate", []string{"GATEWAY_POLICIES_PER_IP_RATE=5"}, func(t *testing.T, s *Snapshot) {
			l := s.Policies["per-ip"].Limit
			if l.Rate != 5 || l.Burst != 40 {
				t.Errorf("got %v, want rate 5 burst 40", l)
			}
		}},
		{"plan rate", []string{"GATEWAY_POLICIES_TENANT_RPM_PLANS_PRO=1200"}, func(t *testing.T, s *Snapshot) {
			if got := s.Policies["tenant-rpm"].Plans["pro"].Rate; got != 1200 {
				t.Errorf("got %d, want 1200", got)
			}
		}},
		{"duration", []string{"GATEWAY_POLICIES_TENANT_RPM_PER=1h"}, func(t *testing.T, s *Snapshot) {
			if got := s.Policies["tenant-rpm"].Plans["free"].Period; got != time.Hour {
				t.Errorf("got %v, want 1h", got)
			}
		}},
		{"redis password into an absent section", []string{"GATEWAY_REDIS_PASSWORD=s3cret"}, func(t *testing.T, s *Snapshot) {
			if got := s.Config.Redis.Password; got != "s3cret" {
				t.Errorf("got %q, want s3cret", got)
			}
		}},
		{"redis addrs turn on shared algorithms", []string{"GATEWAY_REDIS_ADDRS=127.0.0.1:6379", "GATEWAY_POLICIES_TENANT_RPM_ALGORITHM=gcra"}, func(t *testing.T, s *Snapshot) {
			if got := s.Policies["tenant-rpm"].Rule.Algorithm; got != "gcra" {
				t.Errorf("got %q, want gcra", got)
			}
		}},
		{"sentinel master", []string{"GATEWAY_REDIS_SENTINEL_MASTER_NAME=mymaster", "GATEWAY_REDIS_SENTINEL_ADDRS=s1:26379,s2:26379"}, func(t *testing.T, s *Snapshot) {
			sn := s.Config.Redis.Sentinel
			if sn.MasterName != "mymaster" || !slices.Equal(sn.Addrs, []string{"s1:26379", "s2:26379"}) {
				t.Errorf("got %+v, want mymaster at s1, s2", sn)
			}
		}},
		{"route by index", []string{"GATEWAY_ROUTES_1_UPSTREAM=https://api.example.com"}, func(t *testing.T, s *Snapshot) {
			if got := s.Routes[1].Upstream.String(); got != "https://api.example.com" {
				t.Errorf("got %q, want https://api.example.com", got)
			}
		}},
		{"tenant key by normalised name", []string{"GATEWAY_TENANTS_KEYS_SK_DEMO_FREE_PLAN=pro"}, func(t *testing.T, s *Snapshot) {
			if got := s.Tenants.Keys["sk-demo-free"].Plan; got != "pro" {
				t.Errorf("got %q, want pro", got)
			}
		}},
		{"bool", []string{"GATEWAY_REDIS_TLS=true"}, func(t *testing.T, s *Snapshot) {
			if !s.Config.Redis.TLS {
				t.Errorf("got false, want true")
			}
		}},
		{"other variables ignored", []string{"PATH=/bin", "GATEWAYX=1", "HOME=/root"}, func(t *testing.T, s *Snapshot) {
			if got := s.Config.Server.Listen; got != "127.0.0.1:8080" {
				t.Errorf("got %q, want the file's value", got)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustParse(t, envYAML, tt.env...))
		})
	}
}

func TestEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"env value validated", []string{"GATEWAY_POLICIES_PER_IP_RATE=-3"},
			"gateway.yaml: policies.per-ip.rate (from GATEWAY_POLICIES_PER_IP_RATE): must be >= 0"},
		{"env value type checked", []string{"GATEWAY_POLICIES_PER_IP_RATE=many"},
			`gateway.yaml: policies.per-ip.rate (from GATEWAY_POLICIES_PER_IP_RATE): must be an integer, not the string "many"`},
		{"env duration checked", []string{"GATEWAY_SERVER_IDLE_TIMEOUT=30"},
			`gateway.yaml: server.idle_timeout (from GATEWAY_SERVER_IDLE_TIMEOUT): must be a duration with a unit, like "1s" or "500ms" (got 30)`},
		{"env name checked", []string{"GATEWAY_POLICIES_PER_IP_ALGORITHM=leaky"},
			`gateway.yaml: policies.per-ip.algorithm (from GATEWAY_POLICIES_PER_IP_ALGORITHM): must be token_bucket, gcra, sliding_window, fixed_window, concurrency or shared_concurrency, got "leaky"`},
		{"env list item validated", []string{"GATEWAY_SERVER_TRUSTED_PROXIES=10.0.0.0/8,bogus"},
			`gateway.yaml: server.trusted_proxies[1] (from GATEWAY_SERVER_TRUSTED_PROXIES): must be a CIDR (10.0.0.0/8) or an address, got "bogus"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantLine(t, errorLines(t, envYAML, tt.env...), tt.want)
		})
	}
}

// TestEnvWarnings: a variable that names no setting of this file is
// ignored and reported as a warning naming it.
func TestEnvWarnings(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"unknown variable", []string{"GATEWAY_SERVER_LISTN=x"},
			"environment: GATEWAY_SERVER_LISTN: matches no setting, ignored (policies, routes and tenant keys must exist in the file to be overridden)"},
		{"unknown policy", []string{"GATEWAY_POLICIES_NOPE_RATE=1"},
			"environment: GATEWAY_POLICIES_NOPE_RATE: matches no setting, ignored (policies, routes and tenant keys must exist in the file to be overridden)"},
		{"route index out of range", []string{"GATEWAY_ROUTES_5_UPSTREAM=http://x"},
			"environment: GATEWAY_ROUTES_5_UPSTREAM: matches no setting, ignored (policies, routes and tenant keys must exist in the file to be overridden)"},
		{"section", []string{"GATEWAY_SERVER=x"},
			"environment: GATEWAY_SERVER: server is a section, not a single setting; ignored (set one of its keys)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := mustParse(t, envYAML, tt.env...)
			if len(snap.Warnings) != 2 || snap.Warnings[0].Error() != tt.want || snap.Warnings[1].Error() != envPlainKeyWarning {
				t.Errorf("warnings: got %v, want [%s %s]", snap.Warnings, tt.want, envPlainKeyWarning)
			}
		})
	}
}

func TestEnvAmbiguousMapNames(t *testing.T) {
	yaml := `
routes: [{name: r, upstream: builtin:echo, policies: [a-b, a_b]}]
policies:
  a-b: {key: ip, rate: 1}
  a_b: {key: ip, rate: 2}
`
	wantLine(t, errorLines(t, yaml, "GATEWAY_POLICIES_A_B_RATE=3"),
		"environment: GATEWAY_POLICIES_A_B_RATE: ambiguous: could set policies.a-b.rate or policies.a_b.rate")

	// A longer name that shares a prefix with a shorter one is not
	// ambiguous: only one reading reaches a setting.
	yaml = `
routes: [{name: r, upstream: builtin:echo, policies: [a, a-rate]}]
policies:
  a: {key: ip, rate: 1}
  a-rate: {key: ip, rate: 2}
`
	snap := mustParse(t, yaml, "GATEWAY_POLICIES_A_RATE_BURST=9")
	if got := snap.Policies["a-rate"].Limit.Burst; got != 9 {
		t.Errorf("got burst %d, want 9", got)
	}
}

func TestPolicyNameWithDot(t *testing.T) {
	yaml := `
routes: [{name: r, upstream: builtin:echo, policies: [api.v1]}]
policies:
  api.v1: {key: ip, rate: 1}
`
	snap := mustParse(t, yaml, "GATEWAY_POLICIES_API_V1_RATE=7")
	pol, ok := snap.Policies["api.v1"]
	if !ok || pol.Limit.Rate != 7 || snap.Routes[0].Policies[0] != pol {
		t.Errorf("got policies %v, want api.v1 at rate 7 used by the route", snap.Policies)
	}
}

// TestEnvVariablesThatNameNoSettingWarn is a pod in a namespace with a
// Service named "gateway": Kubernetes sets GATEWAY_PORT and friends in every
// container. They name no setting, so they must not stop the load; each is
// reported as a warning naming it. A variable that does name a setting is
// still applied, and its bad value is still an error.
func TestEnvVariablesThatNameNoSettingWarn(t *testing.T) {
	kubernetes := []string{
		"GATEWAY_PORT=tcp://10.0.0.1:8080",
		"GATEWAY_SERVICE_HOST=10.0.0.1",
		"GATEWAY_SERVICE_PORT=8080",
		"GATEWAY_SERVICE_PORT_HTTP=8080",
		"GATEWAY_PORT_8080_TCP=tcp://10.0.0.1:8080",
		"GATEWAY_PORT_8080_TCP_PROTO=tcp",
		"GATEWAY_PORT_8080_TCP_PORT=8080",
		"GATEWAY_PORT_8080_TCP_ADDR=10.0.0.1",
		// A Service named "gateway-redis" and a typo of a real setting.
		"GATEWAY_REDIS_PORT=tcp://10.0.0.2:6379",
		"GATEWAY_SERVER_LISTN=0.0.0.0:9",
	}
	env := append([]string{"GATEWAY_SERVER_LISTEN=127.0.0.1:9999"}, kubernetes...)
	snap, err := parse(t, envYAML, env...)
	if err != nil {
		t.Fatalf("Parse: got error\n%v\nwant none (variables that name no setting are warnings)", err)
	}
	if got := snap.Config.Server.Listen; got != "127.0.0.1:9999" {
		t.Errorf("listen: got %q, want 127.0.0.1:9999 (the override that names a setting applies)", got)
	}
	var warnings []string
	for _, w := range snap.Warnings {
		warnings = append(warnings, w.Error())
	}
	for _, kv := range kubernetes {
		name, _, _ := strings.Cut(kv, "=")
		wantLine(t, warnings, "environment: "+name+": matches no setting, ignored (policies, routes and tenant keys must exist in the file to be overridden)")
	}
	wantLine(t, warnings, envPlainKeyWarning)
	if len(warnings) != len(kubernetes)+1 {
		t.Errorf("got %d warnings, want %d:\n  %s", len(warnings), len(kubernetes)+1, strings.Join(warnings, "\n  "))
	}

	// A bad value for a real setting is an error, reported with the
	// warnings so that a typo that explains it is seen with it.
	_, err = parse(t, envYAML, append([]string{"GATEWAY_POLICIES_PER_IP_RATE=many"}, kubernetes...)...)
	if err == nil {
		t.Fatalf("Parse with a bad rate: got no error, want one")
	}
	wantLine(t, errorLines(t, envYAML, "GATEWAY_POLICIES_PER_IP_RATE=many", "GATEWAY_PORT=tcp://10.0.0.1:8080"),
		`gateway.yaml: policies.per-ip.rate (from GATEWAY_POLICIES_PER_IP_RATE): must be an integer, not the string "many"`)
	if !strings.Contains(err.Error(), "warning: environment: GATEWAY_PORT: matches no setting") {
		t.Errorf("error text:\n%v\nwant it to carry the warnings too", err)
	}
}
