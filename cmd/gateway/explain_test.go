package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/redistest"
	"github.com/ratelimit-gateway/gateway/proxy"
)

// runExplain runs "gateway explain args..." in-process.
func runExplain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"explain"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// decodeExplain decodes explain's JSON strictly: every field known, one
// object and nothing after it.
func decodeExplain(t *testing.T, out string) explainReport {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var rep explainReport
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decoding explain's JSON: %v\n%s", err, out)
	}
	if dec.More() {
		t.Fatalf("explain printed more than one JSON value:\n%s", out)
	}
	return rep
}

func policyOf(rep explainReport, name string) proxy.ExplainedPolicy {
	for _, p := range rep.Policies {
		if p.Name == name {
			return p
		}
	}
	return proxy.ExplainedPolicy{}
}

// planRate is the rate a policy's config gives plan, as JSON decodes it.
func planRate(p proxy.ExplainedPolicy, plan string) float64 {
	plans, _ := p.Config["plans"].(map[string]any)
	rate, _ := plans[plan].(float64)
	return rate
}

// squeeze collapses runs of spaces, so that tests do not depend on how far
// the text output pads its labels.
func squeeze(s string) string {
	for strings.Contains(s, "  ") {
		s = strings.ReplaceAll(s, "  ", " ")
	}
	return s
}

const tourChat = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Tell me about rate limits."}],"stream":true}`

// TestExplainDefaultConfig runs explain on the shipped gateway.yaml over a
// table of requests, in text and JSON.
func TestExplainDefaultConfig(t *testing.T) {
	const config = "../../gateway.yaml"
	tests := []struct {
		name     string
		args     []string
		code     int
		text     []string // lines or parts of lines the text output has
		json     func(t *testing.T, rep explainReport)
		noSecret string // must not appear in stdout or stderr
	}{
		{
			name: "root from an IP", args: []string{"-remote", "203.0.113.7:51000", "http://127.0.0.1:8080/"},
			text: []string{
				"route:         default (prefix=/) → builtin:echo → /",
				"client ip:     203.0.113.7 (the socket peer)",
				"policy 1:      per-ip",
				"  key:         ip = 203.0.113.7/32",
				"  limit:       10/1m burst 10",
				"result:        reaches the limiter (1 policy; exit 0)",
			},
			json: func(t *testing.T, rep explainReport) {
				p := policyOf(rep, "per-ip")
				if rep.Route.Name != "default" || rep.Route.Config["upstream"] != "builtin:echo" || p.Key != "203.0.113.7/32" ||
					p.Config["rate"] != 10.0 || p.Config["per"] != "1m" || p.Config["burst"] != 10.0 || p.Config["algorithm"] != "token_bucket" || len(p.RedisKeys) != 0 {
					t.Errorf("got route %+v policy %+v, want default with per-ip 10/1m burst 10 on 203.0.113.7/32", rep.Route, p)
				}
			},
		},
		{
			name: "llm call of a free tenant", noSecret: "sk-demo-free",
			args: []string{"-X", "POST", "-H", "Authorization: Bearer sk-demo-free", "-H", "Content-Type: application/json", "-d", tourChat, "http://127.0.0.1:8080/v1/chat/completions"},
			text: []string{
				"route:         llm (prefix=/v1/ POST) → builtin:openai-mock → /v1/chat/completions",
				"tenant:        acme",
				"plan:          free",
				"llm:           chat completions call on gpt-4o-mini: 13 prompt tokens + 256 output → reserves 269 tokens",
				"  limit:       1000 tokens/1m burst 1000 tokens (plan free)",
				"  cost:        269 tokens",
			},
			json: func(t *testing.T, rep explainReport) {
				id := rep.Identity
				sum := sha256.Sum256([]byte("sk-demo-free"))
				if id.Tenant != "acme" || id.Plan != "free" || id.APIKeyHeader != "Authorization" || id.APIKeySHA256 != hex.EncodeToString(sum[:4]) {
					t.Errorf("identity: got %+v, want acme on free, key in Authorization", id)
				}
				if p := policyOf(rep, "llm-tokens"); p.Units != 269 || p.Config["cost"] != "tokens" || p.Plan != "free" || planRate(p, "free") != 1000 {
					t.Errorf("llm-tokens: got %+v, want 269 tokens of the free plan's 1000/1m", p)
				}
				if p := policyOf(rep, "llm-requests"); p.Key != "acme" || p.Plan != "free" || planRate(p, "free") != 20 {
					t.Errorf("llm-requests: got %+v, want acme at 20/1m", p)
				}
			},
		},
		{
			name: "llm call without its body", noSecret: "sk-demo-pro",
			args: []string{"-X", "POST", "-H", "X-API-Key: sk-demo-pro", "/v1/chat/completions"},
			text: []string{"plan:          pro", "  cost:        tokens: unknown without the body"},
			json: func(t *testing.T, rep explainReport) {
				if rep.LLM == nil || rep.LLM.BodyRead || policyOf(rep, "llm-tokens").Units != 0 || policyOf(rep, "llm-requests").Plan != "pro" || planRate(policyOf(rep, "llm-requests"), "pro") != 600 {
					t.Errorf("got llm %+v, tokens %+v; want an unread body, unknown tokens, the pro plan", rep.LLM, policyOf(rep, "llm-tokens"))
				}
			},
		},
		{
			name: "api without a key: 401 after the limiter",
			args: []string{"/v1/models"},
			text: []string{"then:          401: policy per-tenant needs a key", "  key:         tenant: missing, 401 once the others counted the request"},
			json: func(t *testing.T, rep explainReport) {
				if rep.RejectedBy != "per-tenant" || policyOf(rep, "per-tenant").Outcome != proxy.OutcomeRejects {
					t.Errorf("got rejected by %q, want per-tenant", rep.RejectedBy)
				}
			},
		},
		{
			name: "crafted path", args: []string{"http://127.0.0.1:8080/a/%2e%2e/%2e%2e/x"}, code: 2,
			text: []string{"path:    refused", `result:  400 Bad Request before the limiter: the path climbs above the root with ".." (exit 2)`},
			json: func(t *testing.T, rep explainReport) {
				if rep.ReachesLimiter || rep.Status != 400 || rep.Route != nil || rep.Identity != nil || len(rep.Policies) != 0 {
					t.Errorf("got %+v, want 400 before any route", rep.Explanation)
				}
			},
		},
		{
			name: "dot segments resolved", args: []string{"/v1/../hello/./x"},
			text: []string{"path:          /hello/x", "route:         default"},
		},
		{
			name: "payment without its idempotency key", args: []string{"-X", "POST", "/payments"}, code: 2,
			text: []string{"result:  400 Bad Request before the limiter: this route needs an Idempotency-Key header on POST requests (exit 2)"},
		},
		{
			name: "payment with its idempotency key", args: []string{"-X", "POST", "-H", "Idempotency-Key: pay-A-1001", "-remote", "198.51.100.4:1234", "/payments"},
			text: []string{`idempotency:   Idempotency-Key "pay-A-1001", scoped by route:payments ip:198.51.100.4/32`},
			json: func(t *testing.T, rep explainReport) {
				if id := rep.Idempotency; id == nil || !id.Present || id.Scope != "route:payments ip:198.51.100.4/32" || id.ScopedKey != "route:payments ip:198.51.100.4/32 POST /payments pay-A-1001" {
					t.Errorf("idempotency: got %+v", id)
				}
			},
		},
		{
			name: "lower-case method", args: []string{"-X", "post", "/payments"}, code: 2,
			text: []string{"route:         payments", `400 Bad Request before the limiter: method "post" is not POST`},
		},
		{
			name: "body over max_body_bytes", args: []string{"-X", "POST", "-H", "Content-Length: 20000000", "/upload"}, code: 2,
			text: []string{"413 Request Entity Too Large before the limiter"},
		},
		{
			name: "forwarded header from an untrusted peer", args: []string{"-H", "X-Forwarded-For: 192.0.2.1", "-remote", "203.0.113.7:1", "/"},
			text: []string{"removed:       X-Forwarded-For", "client ip:     203.0.113.7 (the socket peer)"},
		},
		{
			name: "quota report", args: []string{"-H", "X-API-Key: sk-demo-free", "/v1/quota"}, code: 0, noSecret: "sk-demo-free",
			text: []string{"route:         api", "then:          200 OK: tenants.quota_path"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"-config", config}, tt.args...)
			code, out, errOut := runExplain(t, args...)
			if code != tt.code {
				t.Fatalf("text: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, out, errOut)
			}
			for _, want := range tt.text {
				if !strings.Contains(squeeze(out), squeeze(want)) {
					t.Errorf("text output lacks %q:\n%s", want, out)
				}
			}
			code, jsonOut, errOut := runExplain(t, append(args, "-o", "json")...)
			if code != tt.code {
				t.Fatalf("json: exit %d, want %d\nstderr:\n%s", code, tt.code, errOut)
			}
			rep := decodeExplain(t, jsonOut)
			if rep.Config != config || rep.ReachesLimiter != (tt.code == 0) || (tt.code == 0) != (rep.Status == 0) {
				t.Errorf("json: got config %q reaches %v status %d, want %q, %v", rep.Config, rep.ReachesLimiter, rep.Status, config, tt.code == 0)
			}
			if tt.json != nil {
				tt.json(t, rep)
			}
			if tt.noSecret != "" && strings.Contains(out+errOut+jsonOut, tt.noSecret) {
				t.Errorf("the API key %q appears in clear in the output", tt.noSecret)
			}
		})
	}
}

// writeConfig writes yaml to a temp file and returns its path.
func writeConfig(t *testing.T, name, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExplainOtherConfigs covers what the default config cannot show: no
// route, a config that fails, bad flags, and shared algorithms whose Redis
// nothing listens on (explain must not connect).
func TestExplainOtherConfigs(t *testing.T) {
	narrow := writeConfig(t, "narrow.yaml", `
routes:
  - name: api
    match: {host: api.example.com, path_prefix: /api/}
    upstream: http://127.0.0.1:9
    strip_prefix: /api
policies: {}
`)
	bad := writeConfig(t, "bad.yaml", "routes:\n  - name: a\n    upstream: ftp://x\n    policies: [nope]\n")
	redisData, err := os.ReadFile("../../gateway.redis.yaml")
	if err != nil {
		t.Fatal(err)
	}
	shared := writeConfig(t, "gateway.redis.yaml", strings.Replace(string(redisData), "127.0.0.1:6379", "127.0.0.1:1", 1))
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
		json   func(t *testing.T, rep explainReport)
	}{
		{name: "no route", args: []string{"-config", narrow, "http://www.example.com/api/x"}, code: 2,
			stdout: []string{"route:   none", "404 Not Found before the limiter: no route matches this request"}},
		{name: "host and strip_prefix", args: []string{"-config", narrow, "http://api.example.com:8080/api/v2/x?y=1"},
			stdout: []string{"route:   api (host=api.example.com prefix=/api/) → http://127.0.0.1:9, strip_prefix /api → /v2/x?y=1", "no policies: forwarded unlimited"}},
		{name: "Host header wins over the URL's", args: []string{"-config", narrow, "-H", "Host: api.example.com", "/api/x"},
			stdout: []string{"route:   api"}},
		{name: "bad config", args: []string{"-config", bad, "/"}, code: 1,
			stderr: []string{"bad.yaml: routes[0].upstream", "bad.yaml: routes[0].policies[0]"}},
		{name: "missing config", args: []string{"-config", filepath.Join(t.TempDir(), "none.yaml"), "/"}, code: 1, stderr: []string{"none.yaml"}},
		{name: "no URL", args: []string{"-config", narrow}, code: 1, stderr: []string{"want one URL"}},
		{name: "two URLs", args: []string{"-config", narrow, "/a", "/b"}, code: 1, stderr: []string{"want one URL"}},
		{name: "bad output", args: []string{"-config", narrow, "-o", "yaml", "/"}, code: 1, stderr: []string{"-o must be text or json"}},
		{name: "bad header", args: []string{"-config", narrow, "-H", "NoColon", "/"}, code: 1, stderr: []string{"want 'Name: value'"}},
		{name: "bad remote", args: []string{"-config", narrow, "-remote", "somewhere", "/"}, code: 1, stderr: []string{"-remote"}},
		{name: "bad URL", args: []string{"-config", narrow, "ftp://x/"}, code: 1, stderr: []string{"want http://host"}},
		{name: "space in the target", args: []string{"-config", narrow, "/a b"}, code: 1, stderr: []string{"spaces"}},
		{name: "unknown flag", args: []string{"-config", narrow, "-frob", "/"}, code: 1, stderr: []string{"-frob"}},
		{name: "help", args: []string{"-h"}, code: 0, stderr: []string{"usage: gateway explain", "Exit status"}},
		{name: "flags after the URL", args: []string{"/api/x", "-config", narrow, "-H", "Host: api.example.com"}, stdout: []string{"route:   api"}},
		{
			name: "shared algorithms, Redis not asked", args: []string{"-config", shared, "-H", "X-API-Key: sk-demo-free", "-remote", "198.51.100.7:9", "/v1/x"},
			stdout: []string{
				"policy 1:      per-ip",
				"  algorithm:   gcra (Redis, shared by every instance)",
				"  redis down:  local (0.34 of the limit in-process)",
				"  redis keys:  rate:rl:{per-ip:",
				"  redis keys:  rl:{tenant-hourly:",
			},
			json: func(t *testing.T, rep explainReport) {
				for name, suffix := range map[string]string{"per-ip": "}", "tenant-rps": "}", "tenant-hourly": "}:fw"} {
					p := policyOf(rep, name)
					if len(p.RedisKeys) != 1 || !strings.HasPrefix(p.RedisKeys[0], "rate:rl:{"+name+":") && !strings.HasPrefix(p.RedisKeys[0], "rl:{"+name+":") ||
						!strings.HasSuffix(p.RedisKeys[0], suffix) {
						t.Errorf("%s: got redis keys %q, want one under rl:{%s:…%s", name, p.RedisKeys, name, suffix)
					}
				}
				if p := policyOf(rep, "tenant-hourly"); p.Config["on_redis_error"] != "allow" || p.Config["rate"] != 1000.0 || p.Config["per"] != "1h" {
					t.Errorf("tenant-hourly: got %+v, want allow, 1000/1h", p)
				}
			},
		},
		{
			name: "sliding window", args: []string{"-config", shared, "-X", "POST", "/login"},
			stdout: []string{"  redis down:  deny (503)", ":sw rl:{login-attempts:"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			code, out, errOut := runExplain(t, tt.args...)
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("explain took %s: it must not wait for anything", took)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, out, errOut)
			}
			for _, want := range tt.stdout {
				if !strings.Contains(squeeze(out), squeeze(want)) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}
			for _, want := range tt.stderr {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr lacks %q:\n%s", want, errOut)
				}
			}
			if len(tt.stderr) == 0 && errOut != "" {
				t.Errorf("got stderr %q, want none", errOut)
			}
			if tt.json != nil {
				code, out, errOut := runExplain(t, append(tt.args, "-o", "json")...)
				if code != tt.code {
					t.Fatalf("json: exit %d, want %d: %s", code, tt.code, errOut)
				}
				tt.json(t, decodeExplain(t, out))
			}
		})
	}
}

// TestExplainShowsNoSecret explains a request on a route whose config holds
// a secret in every place a route can (upstream_api_key, a header value it
// matches on), with a Redis password and the API key sent: neither the text
// nor the JSON shows any.
func TestExplainShowsNoSecret(t *testing.T) {
	path := writeConfig(t, "secret.yaml", `
redis: {addrs: ["redis://ops:SECRET-redis-url@127.0.0.1:1"], password: SECRET-redis-password}
tenants:
  keys: {SECRET-key-acme: {tenant: acme, plan: free}}
routes:
  - name: internal
    match: {path_prefix: /, headers: {X-Internal: SECRET-header-value, X-Debug: "*"}}
    upstream: "http://127.0.0.1:9/base"
    upstream_api_key: SECRET-upstream-api-key
    policies: [per-key, shared]
policies:
  per-key: {key: "header:X-Internal+api_key", rate: 10, per: 1m}
  shared: {key: tenant, algorithm: gcra, rate: 10, per: 1m}
`)
	args := []string{"-config", path, "-H", "X-Internal: SECRET-header-value", "-H", "X-Debug: 1", "-H", "X-API-Key: SECRET-key-acme", "/x"}
	code, out, errOut := runExplain(t, args...)
	if code != explainReachesLimiter || !strings.Contains(squeeze(out), "route: internal (prefix=/ X-Debug X-Internal=REDACTED) → http://127.0.0.1:9/base → /base/x") {
		t.Fatalf("exit %d, want 0 and the route with its header's value hidden:\n%s%s", code, out, errOut)
	}
	code, jsonOut, errOut := runExplain(t, append(args, "-o", "json")...)
	rep := decodeExplain(t, jsonOut)
	if code != explainReachesLimiter || rep.Route.Config["upstream_api_key_set"] != true || policyOf(rep, "per-key").Outcome != proxy.OutcomeChecked {
		t.Fatalf("exit %d, route %+v, want 0, upstream_api_key_set, per-key checked:\n%s", code, rep.Route, errOut)
	}
	if all := out + jsonOut + errOut; strings.Contains(all, "SECRET") {
		i := strings.Index(all, "SECRET")
		t.Fatalf("explain shows a secret: …%s…", all[max(0, i-80):min(len(all), i+40)])
	}
}

// TestExplainRedisKeysAreWhatTheGatewayWrites serves requests through a real
// gateway on a real Redis, then checks that the keys explain prints for the
// same requests are exactly the keys Redis holds: one gcra check alone and
// four shared checks in one script call.
func TestExplainRedisKeysAreWhatTheGatewayWrites(t *testing.T) {
	s := redistest.Start(t)
	path := writeConfig(t, "gateway.yaml", `
server: {listen: "127.0.0.1:0"}
redis: {addrs: [`+s.Addr()+`], timeout: 1s}
tenants:
  keys: {sk-demo-free: {tenant: acme, plan: free}}
routes:
  - name: api
    match: {path_prefix: /v1/}
    upstream: builtin:echo
    policies: [per-ip, tenant-rps, tenant-hourly, tenant-window]
  - name: default
    match: {path_prefix: /}
    upstream: builtin:echo
    policies: [per-ip]
policies:
  per-ip: {key: ip, algorithm: gcra, rate: 10, per: 1m}
  tenant-rps: {key: tenant, algorithm: gcra, rate: 5, per: 1s, plans: {free: 5}, on_missing_key: reject}
  tenant-hourly: {key: tenant, algorithm: fixed_window, rate: 1000, per: 1h, on_missing_key: reject}
  tenant-window: {key: api_key, algorithm: sliding_window, rate: 100, per: 1m, on_missing_key: reject}
`)
	g := startGateway(t, "gateway", path)
	c := newTestClient(t)
	requests := []struct {
		path    string
		headers []string
	}{
		{"/", nil},
		{"/v1/x", []string{"X-API-Key", "sk-demo-free"}},
	}
	var printed []string
	for _, rq := range requests {
		if r := mustSend(t, c, "GET", g.base+rq.path, rq.headers...); r.status != 200 {
			t.Fatalf("GET %s: got %d %s, want 200", rq.path, r.status, r.body)
		}
		args := []string{"-config", path, "-o", "json", rq.path}
		for i := 0; i+1 < len(rq.headers); i += 2 {
			args = append(args, "-H", rq.headers[i]+": "+rq.headers[i+1])
		}
		code, out, errOut := runExplain(t, args...)
		if code != 0 {
			t.Fatalf("explain %s: exit %d: %s", rq.path, code, errOut)
		}
		for _, p := range decodeExplain(t, out).Policies {
			if len(p.RedisKeys) == 0 {
				t.Fatalf("explain %s: policy %s has no redis keys", rq.path, p.Name)
			}
			for _, k := range p.RedisKeys {
				if n, err := s.Do("EXISTS", k); err != nil || n != "1" {
					t.Errorf("EXISTS %s (policy %s): got %q %v, want 1", k, p.Name, n, err)
				}
				if !slices.Contains(printed, k) {
					printed = append(printed, k)
				}
			}
		}
	}
	// And nothing else: every key a decision wrote was printed.
	rdb := newRedisReader(t, s.Addr())
	held, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(held)
	slices.Sort(printed)
	if !slices.Equal(held, printed) {
		t.Fatalf("Redis holds %q; explain printed %q", held, printed)
	}
}

func TestExplainInUsage(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"help"}, &out, &out); code != 0 || !strings.Contains(out.String(), "gateway explain -config gateway.yaml") {
		t.Fatalf("help: exit %d, want explain in the usage:\n%s", code, out.String())
	}
}
