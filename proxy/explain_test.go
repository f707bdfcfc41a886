package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/limiter"
)

// The secrets of explainYAML: none may ever appear in an Explanation.
const (
	freeKey     = "sk-secret-free-1234"
	proKey      = "sk-secret-pro-5678"
	upstreamKey = "sk-secret-upstream-9012"
)

// explainYAML has a route per concern; every upstream is the test's, so the
// real Handler can serve the same requests (TestExplainAgreesWithServeHTTP).
const explainYAML = `
server:
  trusted_proxies: [10.0.0.0/8]
tenants:
  header: X-API-Key
  keys:
    ` + freeKey + `: {tenant: acme, plan: free}
    ` + proKey + `: {tenant: globex, plan: pro}
routes:
  - name: llm
    match: {path_prefix: /llm/, methods: [POST]}
    strip_prefix: /llm
    upstream: UP
    llm: openai
    default_max_tokens: 100
    policies: [llm-tokens, per-model]
  - name: pay
    match: {path: /pay, methods: [POST]}
    upstream: UP
    idempotency: {required: true}
    policies: [per-ip]
  - name: pay-keyed
    match: {path: /pay-keyed, methods: [POST]}
    upstream: UP
    idempotency: {required: true, require_api_key: true}
    policies: [per-ip]
  - name: auth
    match: {path_prefix: /auth/}
    upstream: UP
    policies: [per-auth]
  - {name: quota, match: {path: /v1/quota}, upstream: UP, quota: true, policies: [per-ip, per-tenant]}
  - name: api
    match: {path_prefix: /v1/}
    upstream: UP/base
    strip_prefix: /v1
    max_body_bytes: 1000
    upstream_api_key: ` + upstreamKey + `
    policies: [per-ip, per-tenant, per-user, per-q, per-key]
policies:
  per-ip: {key: ip, rate: 1000, per: 1m}
  per-tenant: {key: tenant, rate: 100, per: 1m, burst: 200, plans: {free: 100, pro: 1000}, on_missing_key: reject}
  per-user: {key: header:X-User, rate: 100, per: 1m, on_missing_key: skip}
  per-q: {key: query:user+ip, rate: 100, per: 1m}
  per-key: {key: api_key, rate: 100, per: 1m, on_missing_key: skip}
  per-auth: {key: header:Authorization, rate: 100, per: 1m}
  llm-tokens: {key: tenant, cost: tokens, rate: 100000, per: 1m, on_missing_key: reject}
  per-model: {key: tenant+model, rate: 1000, per: 1m, on_missing_key: reject}
`

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

const explainChatBody = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there, mock!"}]}`

// explainCase is one request and what Explain must say of it. policies maps
// a policy to "outcome" or "outcome key".
type explainCase struct {
	name           string
	method, target string
	remote         string // default 203.0.113.7:51000
	headers        []string
	body           string
	readBody       bool
	status         int // 0: reaches the limiter
	route          string
	client, net    string
	tenant, plan   string
	rejectedBy     string
	policies       map[string]string
	check          func(t *testing.T, e Explanation)
}

var explainCases = []explainCase{
	{
		name: "matching route, no key", method: "GET", target: "/v1/items?x=1",
		route: "api", client: "203.0.113.7", net: "203.0.113.7/32", rejectedBy: "per-tenant",
		policies: map[string]string{
			"per-ip": "checked 203.0.113.7/32", "per-tenant": "rejects", "per-user": "skipped",
			"per-q": "anonymous", "per-key": "skipped",
		},
		check: func(t *testing.T, e Explanation) {
			if got, want := e.Route.UpstreamPath, "/base/items?x=1"; got != want {
				t.Errorf("upstream path: got %q, want %q", got, want)
			}
			if c := e.Route.Config; c["strip_prefix"] != "/v1" || c["max_body_bytes"] != int64(1000) || c["upstream_api_key_set"] != true {
				t.Errorf("route config: got %v, want strip_prefix /v1, max_body_bytes 1000, upstream_api_key_set (the key itself never)", c)
			}
			if p := policyNamed(e, "per-tenant"); p.Plan != "" || p.Config["rate"] != int64(100) || p.Config["burst"] != int64(200) {
				t.Errorf("per-tenant without a tenant: got plan %q config %v, want the policy's 100/1m burst 200", p.Plan, p.Config)
			}
		},
	},
	{
		name: "plan limit by the tenant's API key", method: "GET", target: "/v1/items?user=bob",
		headers: []string{"X-API-Key", proKey, "X-User", "u-1"},
		route:   "api", client: "203.0.113.7", tenant: "globex", plan: "pro",
		policies: map[string]string{
			"per-ip": "checked 203.0.113.7/32", "per-tenant": "checked globex", "per-user": "checked u-1",
			"per-q": "checked bob+203.0.113.7/32", "per-key": "checked " + sha256Hex(proKey),
		},
		check: func(t *testing.T, e Explanation) {
			p := policyNamed(e, "per-tenant")
			if plans, _ := p.Config["plans"].(map[string]any); p.Plan != "pro" || plans["pro"] != int64(1000) || p.Config["per"] != "1m" {
				t.Errorf("per-tenant for a pro tenant: got plan %q config %v, want plan pro of 1000/1m", p.Plan, p.Config)
			}
			if got, want := e.Identity.APIKeySHA256, sha256Hex(proKey)[:8]; got != want || e.Identity.APIKeyHeader != "X-Api-Key" {
				t.Errorf("api key: got sha256 %q in %q, want %q in X-Api-Key", got, e.Identity.APIKeyHeader, want)
			}
		},
	},
	{
		name: "free plan", method: "GET", target: "/v1/x", headers: []string{"X-API-Key", freeKey},
		route: "api", client: "203.0.113.7", tenant: "acme", plan: "free",
		check: func(t *testing.T, e Explanation) {
			if p := policyNamed(e, "per-tenant"); p.Plan != "free" {
				t.Errorf("per-tenant for a free tenant: got plan %q, want free", p.Plan)
			}
		},
	},
	{
		name: "unknown API key: no tenant, still hashed", method: "GET", target: "/v1/x", headers: []string{"X-API-Key", "sk-made-up-0000"},
		route: "api", client: "203.0.113.7", rejectedBy: "per-tenant",
		policies: map[string]string{"per-tenant": "rejects", "per-key": "checked " + sha256Hex("sk-made-up-0000")},
	},
	{
		name: "API key in a header key is redacted", method: "GET", target: "/auth/x", headers: []string{"Authorization", "Bearer " + freeKey},
		route: "auth", client: "203.0.113.7",
		check: func(t *testing.T, e Explanation) {
			if k := policyNamed(e, "per-auth").Key; !strings.HasPrefix(k, "redacted:sha256:") {
				t.Errorf("per-auth key: got %q, want it redacted", k)
			}
		},
	},
	{
		name: "crafted path is canonical first", method: "GET", target: "/x/..//v1/%61b/./c",
		rejectedBy: "per-tenant", route: "api", client: "203.0.113.7",
		check: func(t *testing.T, e Explanation) {
			if e.Request.Path != "/v1/ab/c" || e.Route.UpstreamPath != "/base/ab/c" {
				t.Errorf("got path %q upstream %q, want /v1/ab/c and /base/ab/c", e.Request.Path, e.Route.UpstreamPath)
			}
		},
	},
	{name: "encoded slash", method: "GET", target: "/v1/a%2Fb", status: 400},
	{name: "climbs above the root", method: "GET", target: "/../v1/x", status: 400},
	{name: "no route", method: "GET", target: "/nothing", status: 404},
	{name: "key header twice", method: "GET", target: "/v1/x", headers: []string{"X-API-Key", freeKey, "X-API-Key", proKey}, status: 400},
	{name: "underscore twin of the key header", method: "GET", target: "/v1/x", headers: []string{"X_API_Key", freeKey}, status: 400},
	{name: "key query parameter twice", method: "GET", target: "/v1/x?user=a&user=b", status: 400},
	{name: "body over max_body_bytes", method: "POST", target: "/v1/x", body: strings.Repeat("b", 1001), readBody: true, status: 413},
	{name: "headers over the limit", method: "GET", target: "/v1/x", headers: []string{"X-Big", strings.Repeat("h", 33<<10)}, status: 431},
	{
		name: "trusted proxy's X-Forwarded-For", method: "GET", target: "/v1/x", remote: "10.1.2.3:5000",
		headers:    []string{"X-Forwarded-For", "198.51.100.9, 10.0.0.5"},
		rejectedBy: "per-tenant", route: "api", client: "198.51.100.9", net: "198.51.100.9/32",
		policies: map[string]string{"per-ip": "checked 198.51.100.9/32"},
		check: func(t *testing.T, e Explanation) {
			if !e.Identity.PeerTrusted || e.Identity.ChainHeader != "X-Forwarded-For" {
				t.Errorf("got peer trusted %v via %q, want true via X-Forwarded-For", e.Identity.PeerTrusted, e.Identity.ChainHeader)
			}
		},
	},
	{
		name: "untrusted peer's X-Forwarded-For is removed", method: "GET", target: "/v1/x",
		headers:    []string{"X-Forwarded-For", "198.51.100.9", "Connection", "X-User", "X-User", "u-1"},
		rejectedBy: "per-tenant", route: "api", client: "203.0.113.7",
		policies: map[string]string{"per-ip": "checked 203.0.113.7/32", "per-user": "skipped"},
		check: func(t *testing.T, e Explanation) {
			if got := strings.Join(e.Request.RemovedHeaders, ","); got != "Connection,X-Forwarded-For,X-User" {
				t.Errorf("removed headers: got %q, want Connection,X-Forwarded-For,X-User", got)
			}
		},
	},
	{
		name: "IPv6 client is keyed by its /64", method: "GET", target: "/v1/x", remote: "[2001:db8::1]:5000",
		rejectedBy: "per-tenant", route: "api", client: "2001:db8::1", net: "2001:db8::/64",
	},
	{
		name: "long and odd key values", method: "GET", target: "/v1/x?user=%01x", headers: []string{"X-User", strings.Repeat("u", 300)},
		rejectedBy: "per-tenant", route: "api", client: "203.0.113.7",
		policies: map[string]string{
			"per-user": "checked sha256:" + sha256Hex(strings.Repeat("u", 300)),
			"per-q":    `checked "\x01x"+203.0.113.7/32`,
		},
	},
	{name: "idempotency key required", method: "POST", target: "/pay", status: 400},
	{
		name: "idempotency key scoped by network", method: "POST", target: "/pay", headers: []string{"Idempotency-Key", "k-1"},
		route: "pay", client: "203.0.113.7",
		check: func(t *testing.T, e Explanation) {
			id := e.Idempotency
			if id == nil || !id.Present || id.Scope != "route:pay ip:203.0.113.7/32" || id.ScopedKey != "route:pay ip:203.0.113.7/32 POST /pay k-1" {
				t.Errorf("idempotency: got %+v, want k-1 scoped by ip:203.0.113.7/32", id)
			}
		},
	},
	{
		name: "idempotency key of an unknown API key scoped by its digest", method: "POST", target: "/pay",
		headers: []string{"Idempotency-Key", "k-1", "X-API-Key", "bogus"}, route: "pay", client: "203.0.113.7",
		check: func(t *testing.T, e Explanation) {
			if id, want := e.Idempotency, "route:pay key:sha256:"+sha256Hex("bogus"); id == nil || id.Scope != want {
				t.Errorf("idempotency: got %+v, want scope %s", id, want)
			}
		},
	},
	{
		name: "idempotency key without the API key its route requires", method: "POST", target: "/pay-keyed",
		headers: []string{"Idempotency-Key", "k-1", "X-API-Key", "bogus"}, route: "pay-keyed", client: "203.0.113.7",
		check: func(t *testing.T, e Explanation) {
			if id := e.Idempotency; id == nil || !id.NeedsAPIKey || e.Route.Config["idempotency"].(map[string]any)["require_api_key"] != true {
				t.Errorf("idempotency: got %+v, want require_api_key and needs_api_key", id)
			}
		},
	},
	{
		name: "idempotency key with the API key its route requires", method: "POST", target: "/pay-keyed",
		headers: []string{"Idempotency-Key", "k-1", "X-API-Key", freeKey}, route: "pay-keyed", client: "203.0.113.7", tenant: "acme", plan: "free",
		check: func(t *testing.T, e Explanation) {
			if id := e.Idempotency; id == nil || id.NeedsAPIKey || id.Scope != "route:pay-keyed tenant:acme" {
				t.Errorf("idempotency: got %+v, want route:pay-keyed tenant:acme, no key needed", id)
			}
		},
	},
	{
		name: "idempotency key scoped by tenant", method: "POST", target: "/pay", headers: []string{"Idempotency-Key", "k-1", "X-API-Key", freeKey},
		route: "pay", client: "203.0.113.7", tenant: "acme", plan: "free",
		check: func(t *testing.T, e Explanation) {
			if id := e.Idempotency; id == nil || id.Scope != "route:pay tenant:acme" {
				t.Errorf("idempotency: got %+v, want scope route:pay tenant:acme", id)
			}
		},
	},
	{
		name: "llm call with its body", method: "POST", target: "/llm/v1/chat/completions", body: explainChatBody, readBody: true,
		headers: []string{"Authorization", "Bearer " + freeKey, "Content-Type", "application/json"},
		route:   "llm", client: "203.0.113.7", tenant: "acme", plan: "free",
		policies: map[string]string{"llm-tokens": "checked acme", "per-model": "checked acme+gpt-4o-mini"},
		check: func(t *testing.T, e Explanation) {
			if e.LLM == nil || !e.LLM.Call || e.LLM.Model != "gpt-4o-mini" || e.LLM.PromptTokens <= 0 || e.LLM.MaxOutput != 100 {
				t.Fatalf("llm: got %+v, want a chat call on gpt-4o-mini with max output 100", e.LLM)
			}
			if got, want := policyNamed(e, "llm-tokens").Units, e.LLM.PromptTokens+100; got != want {
				t.Errorf("llm-tokens units: got %d, want prompt + 100 = %d", got, want)
			}
			if e.Identity.APIKeyHeader != "Authorization" {
				t.Errorf("api key header: got %q, want Authorization", e.Identity.APIKeyHeader)
			}
		},
	},
	{
		name: "llm call without its body", method: "POST", target: "/llm/v1/chat/completions",
		headers: []string{"Authorization", "Bearer " + freeKey},
		route:   "llm", client: "203.0.113.7", tenant: "acme", plan: "free",
		policies: map[string]string{"llm-tokens": "checked acme", "per-model": "unknown"},
		check: func(t *testing.T, e Explanation) {
			if e.LLM == nil || !e.LLM.Call || e.LLM.BodyRead || e.LLM.Note == "" {
				t.Errorf("llm: got %+v, want a call whose body was not read, with a note", e.LLM)
			}
			if p := policyNamed(e, "llm-tokens"); p.Units != 0 || p.Note == "" {
				t.Errorf("llm-tokens: got units %d note %q, want 0 (unknown) with a note", p.Units, p.Note)
			}
		},
	},
	{name: "llm call with a bad body", method: "POST", target: "/llm/v1/chat/completions", body: "{", readBody: true, status: 400,
		headers: []string{"Authorization", "Bearer " + freeKey}},
	{
		name: "llm call without a key is judged before its body", method: "POST", target: "/llm/v1/chat/completions", body: "{", readBody: true,
		route: "llm", client: "203.0.113.7", rejectedBy: "llm-tokens",
	},
	{name: "lower-case method", method: "post", target: "/pay", status: 400},
	{name: "quota report", method: "GET", target: "/v1/quota", headers: []string{"X-API-Key", freeKey},
		route: "quota", client: "203.0.113.7", tenant: "acme", plan: "free",
		policies: map[string]string{"per-ip": "checked 203.0.113.7/32", "per-tenant": "skipped"},
		check: func(t *testing.T, e Explanation) {
			if !strings.Contains(e.Reason, "quota report itself") {
				t.Errorf("reason: got %q, want the report once per-ip lets it through", e.Reason)
			}
		}},
	{name: "quota report without a key", method: "GET", target: "/v1/quota",
		route: "quota", client: "203.0.113.7",
		policies: map[string]string{"per-ip": "checked 203.0.113.7/32", "per-tenant": "skipped"},
		check: func(t *testing.T, e Explanation) {
			if !strings.Contains(e.Reason, "401") {
				t.Errorf("reason: got %q, want 401 once per-ip lets it through", e.Reason)
			}
		}},
}

// newExplainRequest builds a request as Go's server hands it to a handler.
func newExplainRequest(c explainCase) *http.Request {
	var body io.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	}
	r := httptest.NewRequest(c.method, c.target, body)
	r.RemoteAddr = c.remote
	if r.RemoteAddr == "" {
		r.RemoteAddr = "203.0.113.7:51000"
	}
	for i := 0; i+1 < len(c.headers); i += 2 {
		r.Header.Add(c.headers[i], c.headers[i+1])
	}
	return r
}

func policyNamed(e Explanation, name string) ExplainedPolicy {
	for _, p := range e.Policies {
		if p.Name == name {
			return p
		}
	}
	return ExplainedPolicy{}
}

func explainSnapshotYAML(upstream string) string {
	return strings.ReplaceAll(explainYAML, "UP", upstream)
}

func TestExplain(t *testing.T) {
	snap := compileYAML(t, explainSnapshotYAML("http://127.0.0.1:9"))
	for _, c := range explainCases {
		t.Run(c.name, func(t *testing.T) {
			e := Explain(snap, newExplainRequest(c), ExplainOptions{ReadBody: c.readBody})
			if e.Status != c.status || e.ReachesLimiter != (c.status == 0) {
				t.Fatalf("got status %d (reaches limiter %v, %q), want %d", e.Status, e.ReachesLimiter, e.Reason, c.status)
			}
			if c.status != 0 {
				if e.Reason == "" || e.Identity != nil || len(e.Policies) != 0 {
					t.Errorf("answered before the limiter: got reason %q, identity %v, %d policies; want a reason, no identity, no policies", e.Reason, e.Identity, len(e.Policies))
				}
			} else {
				if e.Route == nil || e.Route.Name != c.route {
					t.Fatalf("route: got %+v, want %s", e.Route, c.route)
				}
				id := e.Identity
				if id.ClientIP != c.client || (c.net != "" && id.ClientNet != c.net) || id.Tenant != c.tenant || id.Plan != c.plan {
					t.Errorf("identity: got %+v, want client %s net %s tenant %q plan %q", id, c.client, c.net, c.tenant, c.plan)
				}
				if e.RejectedBy != c.rejectedBy {
					t.Errorf("rejected by: got %q, want %q", e.RejectedBy, c.rejectedBy)
				}
				for name, want := range c.policies {
					p := policyNamed(e, name)
					got := strings.TrimSpace(p.Outcome + " " + p.Key)
					if got != want {
						t.Errorf("policy %s: got %q, want %q", name, got, want)
					}
				}
			}
			if c.check != nil {
				c.check(t, e)
			}
			out, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range []string{freeKey, proKey, upstreamKey, "sk-made-up-0000"} {
				if strings.Contains(string(out), secret) || strings.Contains(string(out), strings.TrimPrefix(secret, "sk-")) {
					t.Fatalf("the explanation shows an API key in clear: %s", out)
				}
			}
		})
	}
}

// TestExplainAgreesWithServeHTTP serves every request of explainCases with
// the real Handler on the same snapshot: where Explain says the gateway
// answers first, the Handler answers that status; where it says the limiter
// decides, the Handler forwards (limits are generous), or answers 401 naming
// RejectedBy.
func TestExplainAgreesWithServeHTTP(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	snap := compileYAML(t, explainSnapshotYAML(up.URL))
	_, h := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	for _, c := range explainCases {
		e := Explain(snap, newExplainRequest(c), ExplainOptions{ReadBody: c.readBody})
		if e.LLM != nil && e.LLM.Call && !e.LLM.BodyRead {
			// Explained without its body, which the Handler always reads:
			// not the same request, so nothing to compare (TestExplain
			// covers these cases).
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, newExplainRequest(c))
			want := e.Status
			switch {
			case e.ReachesLimiter && e.QuotaStatus != 0:
				want = e.QuotaStatus
			case e.ReachesLimiter && e.RejectedBy != "":
				want = http.StatusUnauthorized
			case e.ReachesLimiter && e.Idempotency != nil && e.Idempotency.NeedsAPIKey:
				want = http.StatusUnauthorized
			case e.ReachesLimiter:
				want = http.StatusOK
			}
			if rec.Code != want {
				t.Fatalf("Handler answered %d %s; Explain said %d (%+v)", rec.Code, rec.Body, want, e)
			}
			if want == http.StatusUnauthorized && e.Route != nil && e.Route.Config["error_format"] == "gateway" {
				var body errorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Policy != e.RejectedBy {
					t.Fatalf("401 body %s: want policy %q", rec.Body, e.RejectedBy)
				}
			}
		})
	}
}

// TestExplainSharedPolicy covers what only shared algorithms and the newer
// modes have: the failure mode, the Redis keys (from the injected function,
// with the raw key), shadow mode and on_limit: delay. Nothing connects to
// redis.addrs.
func TestExplainSharedPolicy(t *testing.T) {
	snap := compileYAML(t, `
redis: {addrs: ["127.0.0.1:1"]}
tenants:
  keys: {`+freeKey+`: {tenant: acme, plan: free}}
routes:
  - name: api
    match: {path_prefix: /}
    upstream: http://127.0.0.1:9
    policies: [tenant-rps, per-key, inflight, tried]
policies:
  tenant-rps: {key: tenant, algorithm: gcra, rate: 5, per: 1s, on_missing_key: reject, on_redis_error: local, local_share: 0.5, on_limit: delay, max_delay: 3s, max_waiters: 7}
  per-key: {key: api_key, algorithm: fixed_window, rate: 1000, window: day, on_redis_error: deny}
  inflight: {key: tenant, algorithm: shared_concurrency, limit: 4, lease: 10s}
  tried: {key: ip, rate: 1, per: 1m, mode: shadow}
`)
	var asked []string
	keys := func(rule *limiter.Rule, key string) []string {
		asked = append(asked, rule.Name+"="+key)
		return []string{"k:" + rule.Name}
	}
	r := newExplainRequest(explainCase{method: "GET", target: "/", headers: []string{"X-API-Key", freeKey}})
	e := Explain(snap, r, ExplainOptions{RedisKeys: keys})
	if !e.ReachesLimiter {
		t.Fatalf("got status %d %q, want the limiter", e.Status, e.Reason)
	}
	// Each policy carries its entry of policies, defaults applied.
	tests := []struct {
		policy    string
		shadow    bool
		redisKeys string
		config    map[string]any
	}{
		{"tenant-rps", false, "k:tenant-rps", map[string]any{"algorithm": "gcra", "rate": int64(5), "per": "1s", "burst": int64(5),
			"on_redis_error": "local", "local_share": 0.5, "on_limit": "delay", "max_delay": "3s", "max_waiters": 7, "mode": "enforce"}},
		{"per-key", false, "k:per-key", map[string]any{"algorithm": "fixed_window", "rate": int64(1000), "window": "day", "on_redis_error": "deny", "on_limit": "reject"}},
		{"inflight", false, "k:inflight", map[string]any{"algorithm": "shared_concurrency", "limit": int64(4), "lease": "10s", "on_redis_error": "allow"}},
		{"tried", true, "", map[string]any{"algorithm": "token_bucket", "rate": int64(1), "per": "1m", "burst": int64(1), "mode": "shadow"}},
	}
	for _, tt := range tests {
		p := policyNamed(e, tt.policy)
		if p.Shadow != tt.shadow || strings.Join(p.RedisKeys, ",") != tt.redisKeys {
			t.Errorf("policy %s: got shadow %v redis keys %q, want %v %q", tt.policy, p.Shadow, p.RedisKeys, tt.shadow, tt.redisKeys)
		}
		for k, want := range tt.config {
			// As explain's JSON shows it: a typed name marshals as its text.
			got, _ := json.Marshal(p.Config[k])
			if w, _ := json.Marshal(want); string(got) != string(w) {
				t.Errorf("policy %s: config %s is %s, want %s", tt.policy, k, got, w)
			}
		}
	}
	// The store sees the raw key (the API key's digest, not the key).
	want := "tenant-rps=acme per-key=" + sha256Hex(freeKey) + " inflight=acme"
	if got := strings.Join(asked, " "); got != want {
		t.Errorf("RedisKeys asked for %q, want %q (shared algorithms only)", got, want)
	}
}
