package policies

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// minimalYAML is the smallest valid configuration the tests build on.
const minimalYAML = `
routes:
  - name: default
    upstream: builtin:echo
    policies: [per-ip]
policies:
  per-ip: {key: ip, rate: 10}
`

func parse(t *testing.T, yaml string, env ...string) (*Snapshot, error) {
	t.Helper()
	return Parse("gateway.yaml", []byte(yaml), Options{Env: env})
}

func mustParse(t *testing.T, yaml string, env ...string) *Snapshot {
	t.Helper()
	snap, err := parse(t, yaml, env...)
	if err != nil {
		t.Fatalf("Parse: got error\n%v\nwant none", err)
	}
	return snap
}

// errorLines parses yaml expecting failure and returns one line per problem.
func errorLines(t *testing.T, yaml string, env ...string) []string {
	t.Helper()
	_, err := parse(t, yaml, env...)
	if err == nil {
		t.Fatalf("Parse: got no error, want one")
	}
	fes := FieldErrors(err)
	if len(fes) == 0 {
		t.Fatalf("Parse: got %T %v, want *ValidationError", err, err)
	}
	lines := make([]string, len(fes))
	for i, fe := range fes {
		lines[i] = fe.Error()
	}
	return lines
}

func wantLine(t *testing.T, lines []string, want string) {
	t.Helper()
	if !slices.Contains(lines, want) {
		t.Errorf("errors:\n  %s\nwant a line %q", strings.Join(lines, "\n  "), want)
	}
}

func TestDefaults(t *testing.T) {
	snap := mustParse(t, minimalYAML)
	c := snap.Config
	checks := []struct {
		name      string
		got, want any
	}{
		{"server.listen", c.Server.Listen, "127.0.0.1:8080"},
		{"server.read_header_timeout", c.Server.ReadHeaderTimeout, 5 * time.Second},
		{"server.read_timeout", c.Server.ReadTimeout, time.Duration(0)},
		{"server.idle_timeout", c.Server.IdleTimeout, 120 * time.Second},
		{"server.max_header_bytes", c.Server.MaxHeaderBytes, 32768},
		{"server.shutdown_timeout", c.Server.ShutdownTimeout, 15 * time.Second},
		{"server.ipv4_prefix", c.Server.IPv4Prefix, 32},
		{"server.ipv6_prefix", c.Server.IPv6Prefix, 64},
		{"server.max_keys_per_policy", c.Server.MaxKeysPerPolicy, 100000},
		{"server.min_heap_bytes", c.Server.MinHeapBytes, int64(64 << 20)},
		{"server.prompt_count_share", c.Server.PromptCountShare, 0.25},
		{"server.idempotency_max_bytes", c.Server.IdempotencyMaxBytes, int64(64 << 20)},
		// The Redis backend's settings stay zero: their packages' defaults
		// apply, filled in by cmd where it builds them.
		{"redis.timeout", c.Redis.Timeout, time.Duration(0)},
		{"redis.breaker_failures", c.Redis.BreakerFailures, 0},
		{"redis.breaker_cooldown", c.Redis.BreakerCooldown, time.Duration(0)},
		{"redis.denial_cache_size", c.Redis.DenialCacheSize, 0},
		{"tenants.header", c.Tenants.Header, "X-API-Key"},
		{"routes[0].timeout", c.Routes[0].Timeout, 30 * time.Second},
		{"routes[0].max_body_bytes", c.Routes[0].MaxBodyBytes, int64(10 << 20)},
		{"routes[0].rate_limit_headers", c.Routes[0].RateLimitHeaders, RateLimitHeadersAll},
		{"policies.per-ip.algorithm", c.Policies["per-ip"].Algorithm, limiter.TokenBucket},
		{"policies.per-ip.per", c.Policies["per-ip"].Per, time.Second},
		{"policies.per-ip.burst", c.Policies["per-ip"].Burst, int64(10)},
		{"policies.per-ip.on_missing_key", c.Policies["per-ip"].OnMissingKey, MissingShared},
		{"policies.per-ip.on_redis_error", c.Policies["per-ip"].OnRedisError, limiter.FailAllow},
		{"snapshot route timeout", snap.Routes[0].Timeout, 30 * time.Second},
		{"snapshot route max body", snap.Routes[0].MaxBodyBytes, int64(10 << 20)},
		{"snapshot identity v4", snap.Identity.IPv4Prefix, 32},
		{"snapshot identity v6", snap.Identity.IPv6Prefix, 64},
		{"snapshot tenant header", snap.Tenants.Header, "X-Api-Key"},
		{"snapshot limit", snap.Policies["per-ip"].Limit, limiter.Limit{Rate: 10, Period: time.Second, Burst: 10}},
		{"snapshot source", snap.Source, "gateway.yaml"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestLocalShareDefaultsWithLocalFailureMode(t *testing.T) {
	snap := mustParse(t, minimalYAML+`
  shared: {key: ip, rate: 5, algorithm: gcra, on_redis_error: local}
redis: {addrs: ["127.0.0.1:6379"]}
`)
	pol := snap.Policies["shared"].Rule
	if pol.LocalShare != 1 || pol.OnRedisError != limiter.FailLocal || pol.Algorithm != limiter.GCRA {
		t.Errorf("got %s, %s, share %v, want gcra, local, share 1", pol.Algorithm, pol.OnRedisError, pol.LocalShare)
	}
}

func TestNoBodyLimit(t *testing.T) {
	snap := mustParse(t, strings.Replace(minimalYAML, "upstream: builtin:echo", "upstream: builtin:echo\n    max_body_bytes: -1", 1))
	if got := snap.Routes[0].MaxBodyBytes; got != 0 {
		t.Errorf("MaxBodyBytes: got %d, want 0 (no limit)", got)
	}
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"typo in policy", minimalYAML + "  other: {key: ip, ratee: 5}\n",
			`gateway.yaml: policies.other.ratee: unknown key (did you mean "rate"?)`},
		{"typo at top", minimalYAML + "polices: {}\n",
			`gateway.yaml: polices: unknown key (did you mean "policies"?)`},
		{"in a route", strings.Replace(minimalYAML, "name: default", "name: default\n    upstrem: x", 1),
			`gateway.yaml: routes[0].upstrem: unknown key (did you mean "upstream"?)`},
		{"in match", strings.Replace(minimalYAML, "name: default", "name: default\n    match: {pathprefix: /x}", 1),
			`gateway.yaml: routes[0].match.pathprefix: unknown key (did you mean "path_prefix"?)`},
		{"wrong case", minimalYAML + "  other: {key: ip, Rate: 5}\n",
			`gateway.yaml: policies.other.Rate: unknown key (did you mean "rate"?)`},
		{"nothing close", minimalYAML + "server: {zzzzzzzz: 1}\n",
			"gateway.yaml: server.zzzzzzzz: unknown key (known: client_server, forwarded_header, idempotency_max_bytes, idle_timeout, ipv4_prefix, ipv6_prefix, listen, max_concurrent_streams, max_header_bytes, max_keys_per_policy, memory_limit_bytes, min_heap_bytes, path_parameters, prompt_count_share, protocols, proxy_protocol, read_header_timeout, read_timeout, shutdown_timeout, tls, trusted_proxies, upstream_transport, write_timeout)"},
		{"in sentinel", minimalYAML + "redis: {sentinel: {master: x}}\n",
			`gateway.yaml: redis.sentinel.master: unknown key (did you mean "master_name"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantLine(t, errorLines(t, tt.yaml), tt.want)
		})
	}
}

func TestWrongTypes(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"string for int", minimalYAML + "  other: {key: ip, rate: lots}\n",
			`gateway.yaml: policies.other.rate: must be an integer, not the string "lots"`},
		{"fraction for int", minimalYAML + "  other: {key: ip, rate: 1.5}\n",
			`gateway.yaml: policies.other.rate: must be an integer, not 1.5`},
		{"int for string", minimalYAML + "server: {listen: 8080}\n",
			`gateway.yaml: server.listen: must be a string, not 8080 (quote it)`},
		{"scalar for list", strings.Replace(minimalYAML, "policies: [per-ip]", "policies: per-ip", 1),
			`gateway.yaml: routes[0].policies: must be a list, not the string "per-ip"`},
		{"list for mapping", minimalYAML + "server: [a]\n",
			`gateway.yaml: server: must be a mapping, not a list`},
		{"string for bool", minimalYAML + "redis: {tls: yes please}\n",
			`gateway.yaml: redis.tls: must be true or false, not the string "yes please"`},
		{"string for float", minimalYAML + "  other: {key: ip, rate: 1, local_share: half}\n",
			`gateway.yaml: policies.other.local_share: must be a number, not the string "half"`},
		{"routes not a list", "routes: {name: x}\n",
			`gateway.yaml: routes: must be a list, not a mapping`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantLine(t, errorLines(t, tt.yaml), tt.want)
		})
	}
}

func TestDurations(t *testing.T) {
	good := []struct {
		value string
		want  time.Duration
	}{
		{`"1m"`, time.Minute},
		{`500ms`, 500 * time.Millisecond},
		{`1h30m`, 90 * time.Minute},
		{`0`, 0},
	}
	for _, tt := range good {
		t.Run("ok "+tt.value, func(t *testing.T) {
			snap := mustParse(t, minimalYAML+"server: {read_timeout: "+tt.value+"}\n")
			if got := snap.Config.Server.ReadTimeout; got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	bad := []struct {
		value, want string
	}{
		{`5`, `gateway.yaml: server.read_timeout: must be a duration with a unit, like "1s" or "500ms" (got 5)`},
		{`1.5`, `gateway.yaml: server.read_timeout: must be a duration with a unit, like "1s" or "500ms" (got 1.5)`},
		{`5 minutes`, `gateway.yaml: server.read_timeout: invalid duration "5 minutes" (use a number with a unit: 500ms, 1s, 1m, 1h)`},
		{`[1s]`, `gateway.yaml: server.read_timeout: must be a duration like "1s" or "500ms", not a list`},
	}
	for _, tt := range bad {
		t.Run("bad "+tt.value, func(t *testing.T) {
			wantLine(t, errorLines(t, minimalYAML+"server: {read_timeout: "+tt.value+"}\n"), tt.want)
		})
	}
}

func TestAllErrorsAtOnce(t *testing.T) {
	yaml := `
server: {listen: nowhere, bogus: 1}
routes:
  - name: a
    upstream: ftp://x
    policies: [missing]
policies:
  per-ip: {key: ip, rate: -1}
`
	want := []string{
		`gateway.yaml: server.bogus: unknown key (known: client_server, forwarded_header, idempotency_max_bytes, idle_timeout, ipv4_prefix, ipv6_prefix, listen, max_concurrent_streams, max_header_bytes, max_keys_per_policy, memory_limit_bytes, min_heap_bytes, path_parameters, prompt_count_share, protocols, proxy_protocol, read_header_timeout, read_timeout, shutdown_timeout, tls, trusted_proxies, upstream_transport, write_timeout)`,
		`gateway.yaml: server.listen: must be host:port, got "nowhere"`,
		`gateway.yaml: routes[0].upstream: must be http(s)://host or builtin:NAME, got "ftp://x"`,
		`gateway.yaml: routes[0].policies[0]: unknown policy "missing"`,
		`gateway.yaml: policies.per-ip.rate: must be >= 0`,
	}
	lines := errorLines(t, yaml, "GATEWAY_NOPE=1")
	if !slices.Equal(lines, want) {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(lines, "\n  "), strings.Join(want, "\n  "))
	}
	// The variable that names no setting is a warning, carried with the
	// errors and rendered after them.
	warning := `warning: environment: GATEWAY_NOPE: matches no setting, ignored (policies, routes and tenant keys must exist in the file to be overridden)`
	_, err := parse(t, yaml, "GATEWAY_NOPE=1")
	var ve *ValidationError
	if !errors.As(err, &ve) || ve.Error() != strings.Join(append(want, warning), "\n") {
		t.Errorf("Error(): got %q, want the lines joined, then the warning", err)
	}
}

// TestTypeErrorsReportedWithTheRest: values of the wrong type are reported
// with every other problem at once; validation says nothing more about the
// places whose value could not be decoded (rate: lots is not also "required").
func TestTypeErrorsReportedWithTheRest(t *testing.T) {
	yaml := `
server: {listen: nowhere, idle_timeout: 5}
routes: [{name: a, upstream: builtin:echo, policies: [missing]}]
policies: {per-ip: {key: ip, rate: lots, burst: many}}
`
	want := []string{
		`gateway.yaml: server.idle_timeout: must be a duration with a unit, like "1s" or "500ms" (got 5)`,
		`gateway.yaml: policies.per-ip.rate: must be an integer, not the string "lots"`,
		`gateway.yaml: policies.per-ip.burst: must be an integer, not the string "many"`,
		`gateway.yaml: server.listen: must be host:port, got "nowhere"`,
		`gateway.yaml: routes[0].policies[0]: unknown policy "missing"`,
	}
	if lines := errorLines(t, yaml); !slices.Equal(lines, want) {
		t.Errorf("got\n  %s\nwant\n  %s", strings.Join(lines, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestYAMLSyntaxError(t *testing.T) {
	lines := errorLines(t, "routes: [\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "gateway.yaml: parsing yaml: ") {
		t.Errorf("got %q, want one line starting with %q", lines, "gateway.yaml: parsing yaml: ")
	}
}

func TestEmptyFileNeedsRoutes(t *testing.T) {
	wantLine(t, errorLines(t, ""), "gateway.yaml: routes: at least one route is required")
}

func TestLoadReadsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(minimalYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := Load(path, Options{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if snap.Source != path || len(snap.Routes) != 1 {
		t.Errorf("got source %q with %d routes, want %q with 1", snap.Source, len(snap.Routes), path)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), Options{}); err == nil || !strings.HasPrefix(err.Error(), "loading config: ") {
		t.Errorf("missing file: got %v, want a loading config error", err)
	}
	bad := strings.Replace(minimalYAML, "rate: 10", "rate: -1", 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path, Options{})
	if want := path + ": policies.per-ip.rate: must be >= 0"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestLoaderUsesItsEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(minimalYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	l := Loader{Path: path, Env: []string{"GATEWAY_SERVER_LISTEN=127.0.0.1:1234"}}
	snap, err := l.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := snap.Config.Server.Listen; got != "127.0.0.1:1234" {
		t.Errorf("listen: got %q, want 127.0.0.1:1234", got)
	}
	snap, err = l.Parse([]byte(configWithRate("3")))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if snap.Source != path || rateOf(snap) != 3 || snap.Config.Server.Listen != "127.0.0.1:1234" {
		t.Errorf("Parse: got source %q rate %d listen %q", snap.Source, rateOf(snap), snap.Config.Server.Listen)
	}
}

func TestCompileLeavesInputAlone(t *testing.T) {
	rate := int64(5)
	cfg := Config{
		Routes:   []RouteConfig{{Name: "r", Upstream: "http://127.0.0.1:9", Policies: []string{"p"}}},
		Policies: map[string]PolicyConfig{"p": {Key: "ip", Rate: &rate}},
	}
	snap, err := Compile("test", cfg, Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if cfg.Routes[0].Timeout != 0 || cfg.Policies["p"].Algorithm != "" {
		t.Errorf("input was modified: %+v", cfg)
	}
	if snap.Routes[0].Timeout != DefaultRouteTimeout || snap.Policies["p"].Limit.Burst != 5 {
		t.Errorf("got timeout %v burst %d, want defaults", snap.Routes[0].Timeout, snap.Policies["p"].Limit.Burst)
	}
	if snap.Digest != ([32]byte{}) {
		t.Errorf("Digest: got %x, want zero for an in-memory config", snap.Digest)
	}
}
