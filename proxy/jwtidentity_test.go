package proxy

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/ratelimit-gateway/gateway/internal/jwttest"
	"github.com/ratelimit-gateway/gateway/jwtauth"
	"github.com/ratelimit-gateway/gateway/policies"
)

const jwtIssuer = "https://id.example.test/"

// jwtKit is an identity provider on loopback: an RSA key published in a
// JWKS, the Verifier built on it as cmd builds it, and tokens it signs.
type jwtKit struct {
	key      *rsa.PrivateKey
	jwks     *httptest.Server
	verifier *jwtauth.Verifier
}

func newJWTKit(t *testing.T) *jwtKit {
	t.Helper()
	key, doc := jwttest.Key(t, "k1")
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(doc) }))
	t.Cleanup(jwks.Close)
	ks, err := jwtauth.NewKeySet(jwtauth.KeySetConfig{URL: jwks.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &jwtKit{key: key, jwks: jwks, verifier: jwtauth.NewVerifier(ks, 0)}
}

// token signs claims over valid defaults (nil drops a default).
func (k *jwtKit) token(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	full := jwt.MapClaims{"iss": jwtIssuer, "aud": "api", "exp": time.Now().Add(time.Hour).Unix(), "sub": "u1", "org": map[string]any{"id": "acme"}, "plan": "pro"}
	for n, v := range claims {
		if v == nil {
			delete(full, n)
		} else {
			full[n] = v
		}
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, full)
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(k.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// jwtConfig: a route with a per-IP policy before a tenant policy that
// needs a known caller, and a per-sub policy.
const jwtConfig = `
tenants:
  keys:
    sk-known: {tenant: keyed, plan: free}
  jwt:
    issuer: https://id.example.test/
    audiences: [api]
    jwks_url: JWKS
    tenant_claim: org.id
    plan_claim: plan
    FORWARD
routes:
  - {name: api, upstream: UPSTREAM, policies: [per_ip, per_tenant, per_sub]}
policies:
  per_ip: {key: ip, rate: 1, per: 1h, burst: BURST}
  per_tenant: {key: tenant, rate: 1000, per: 1h, on_missing_key: reject, plans: {free: 1000, pro: 2000}}
  per_sub: {key: "claim:sub", rate: 1000, per: 1h, on_missing_key: skip}
`

// seen is what the upstream received.
type seen struct {
	mu     sync.Mutex
	header http.Header
}

func jwtGateway(t *testing.T, kit *jwtKit, burst, forward string, obs Observer) (string, *seen, *logRecorder) {
	t.Helper()
	up := &seen{}
	upstream := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.mu.Lock()
		up.header = r.Header.Clone()
		up.mu.Unlock()
		w.Write([]byte("ok"))
	}))
	yaml := strings.NewReplacer("JWKS", kit.jwks.URL, "UPSTREAM", upstream.URL, "BURST", burst, "FORWARD", forward).Replace(jwtConfig)
	snap, err := policies.Parse("gateway.yaml", []byte(yaml), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap.Config.Log.Access = true
	logs := newLogRecorder()
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{tokens: kit.verifier, metrics: obs, log: logs})
	return srv.URL, up, logs
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

func TestJWTIdentifiesTheCaller(t *testing.T) {
	kit := newJWTKit(t)
	base, up, logs := jwtGateway(t, kit, "100", "", nil)
	tok := kit.token(t, nil)
	r := do(t, http.DefaultClient, "GET", base+"/x", nil, bearer(tok))
	if r.status != http.StatusOK {
		t.Fatalf("got %d %s, want 200", r.status, r.body)
	}
	up.mu.Lock()
	got := up.header.Get("Authorization")
	up.mu.Unlock()
	if got != "Bearer "+tok {
		t.Errorf("upstream got Authorization %.20q, want the token as received", got)
	}
	if rec := logs.wait(t, http.StatusOK); rec.attrs["credential"] != "jwt" || rec.attrs["tenant"] != "acme" {
		t.Errorf("access log: got credential %q tenant %q, want jwt acme", rec.attrs["credential"], rec.attrs["tenant"])
	}
	// An API key on the same route.
	r = do(t, http.DefaultClient, "GET", base+"/x", nil, http.Header{"X-Api-Key": {"sk-known"}})
	if r.status != http.StatusOK {
		t.Fatalf("API key: got %d %s, want 200", r.status, r.body)
	}
	if rec := logs.wait(t, http.StatusOK); rec.attrs["credential"] != "api_key" || rec.attrs["tenant"] != "keyed" {
		t.Errorf("access log: got credential %q tenant %q, want api_key keyed", rec.attrs["credential"], rec.attrs["tenant"])
	}
}

func TestJWTExplainSaysWhichCredential(t *testing.T) {
	kit := newJWTKit(t)
	snap, err := policies.Parse("gateway.yaml", []byte(strings.NewReplacer("JWKS", kit.jwks.URL, "UPSTREAM", "http://127.0.0.1:1", "BURST", "5", "FORWARD", "").Replace(jwtConfig)), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                      string
		header                    http.Header
		credential, refused, tent string
	}{
		{"jwt", bearer(kit.token(t, map[string]any{"sub": "s9"})), "jwt", "", "acme"},
		{"api key", http.Header{"X-Api-Key": {"sk-known"}}, "api_key", "", "keyed"},
		{"expired jwt", bearer(kit.token(t, map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})), "", "expired", ""},
		{"nothing", nil, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/x", nil)
			r.RemoteAddr = "192.0.2.1:1234"
			for k, v := range tt.header {
				r.Header[k] = v
			}
			e := Explain(snap, r, ExplainOptions{Tokens: kit.verifier})
			if e.Identity == nil {
				t.Fatalf("no identity: %+v", e)
			}
			id := e.Identity
			if id.Credential != tt.credential || id.TokenRefused != tt.refused || id.Tenant != tt.tent {
				t.Errorf("got credential %q refused %q tenant %q, want %q %q %q", id.Credential, id.TokenRefused, id.Tenant, tt.credential, tt.refused, tt.tent)
			}
			for _, p := range e.Policies {
				if p.Name == "per_tenant" && tt.credential != "" {
					// The caller's plan picks the limit: the token's plan claim, the key's plan.
					if want := map[string]string{"jwt": "pro", "api_key": "free"}[tt.credential]; p.Plan != want {
						t.Errorf("per_tenant plan: got %q, want %q", p.Plan, want)
					}
				}
			}
			out, _ := json.Marshal(e)
			if v := tt.header.Get("Authorization"); v != "" && strings.Contains(string(out), strings.TrimPrefix(v, "Bearer ")) {
				t.Error("explain prints the token")
			}
		})
	}
}

// tokenCounts counts refusals by reason (and nothing else).
type tokenCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *tokenCounts) Request(string, string)                 {}
func (c *tokenCounts) Policy(string, string, string)          {}
func (c *tokenCounts) Decision(string, time.Duration)         {}
func (c *tokenCounts) Upstream(string, int, time.Duration)    {}
func (c *tokenCounts) InFlight(int)                           {}
func (c *tokenCounts) LLMCharge(string, string, int64, int64) {}
func (c *tokenCounts) TokenRefused(reason string) {
	c.mu.Lock()
	c.m[reason]++
	c.mu.Unlock()
}

func TestJWTRefusalsSayWhich(t *testing.T) {
	kit := newJWTKit(t)
	counts := &tokenCounts{m: map[string]int{}}
	base, _, _ := jwtGateway(t, kit, "1000", "", counts)
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forged := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": jwtIssuer, "aud": "api", "exp": time.Now().Add(time.Hour).Unix(), "org": map[string]any{"id": "acme"}})
	forged.Header["kid"] = "k1"
	forgedTok, _ := forged.SignedString(other)
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": jwtIssuer, "aud": "api", "exp": time.Now().Add(time.Hour).Unix(), "org": map[string]any{"id": "acme"}})
	hs.Header["kid"] = "k1"
	hsTok, _ := hs.SignedString([]byte("anything"))
	tests := []struct {
		name, token, reason string
	}{
		{"expired", kit.token(t, map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}), "expired"},
		{"wrong audience", kit.token(t, map[string]any{"aud": "other"}), "wrong_audience"},
		{"wrong issuer", kit.token(t, map[string]any{"iss": "https://evil.test/"}), "wrong_issuer"},
		{"bad signature", forgedTok, "bad_signature"},
		{"no tenant claim", kit.token(t, map[string]any{"org": nil}), "missing_claim"},
		{"tenant claim is an object", kit.token(t, map[string]any{"org": map[string]any{"id": map[string]any{"x": 1}}}), "missing_claim"},
		{"HS256 not allowed", hsTok, "algorithm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, http.DefaultClient, "GET", base+"/x", nil, bearer(tt.token))
			if r.status != http.StatusUnauthorized {
				t.Fatalf("got %d %s, want 401", r.status, r.body)
			}
			e := decodeError(t, r)
			if !strings.Contains(e.Message, "("+tt.reason+")") {
				t.Errorf("got message %q, want it to name %s", e.Message, tt.reason)
			}
			if strings.Contains(string(r.body), tt.token[:20]) {
				t.Errorf("the 401 echoes the token: %s", r.body)
			}
			if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate: got %q", r.header.Get("WWW-Authenticate"))
			}
		})
	}
	counts.mu.Lock()
	defer counts.mu.Unlock()
	want := map[string]int{"expired": 1, "wrong_audience": 1, "wrong_issuer": 1, "bad_signature": 1, "missing_claim": 2, "algorithm": 1}
	for reason, n := range want {
		if counts.m[reason] != n {
			t.Errorf("counted %d %s, want %d (all: %v)", counts.m[reason], reason, n, counts.m)
		}
	}
}

// TestJWTNeverTriedAsKey: a bearer value shaped as a JWS is a JWT, even
// when the same string is listed as an API key; a failed one is never
// looked up.
func TestJWTNeverTriedAsKey(t *testing.T) {
	kit := newJWTKit(t)
	bad := kit.token(t, map[string]any{"aud": "other"})
	upstream := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	yaml := strings.NewReplacer("JWKS", kit.jwks.URL, "UPSTREAM", upstream.URL, "BURST", "100", "FORWARD", "", "sk-known", bad).Replace(jwtConfig)
	snap, err := policies.Parse("gateway.yaml", []byte(yaml), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{tokens: kit.verifier})
	for _, h := range []http.Header{bearer(bad), {"X-Api-Key": {bad}}} {
		if r := do(t, http.DefaultClient, "GET", srv.URL+"/x", nil, h); r.status != http.StatusUnauthorized || !strings.Contains(string(r.body), "wrong_audience") {
			t.Errorf("a failed JWT listed as a key: got %d %s, want 401 wrong_audience", r.status, r.body)
		}
	}
}

// TestJWTGuessesCostPerIPTokens: 64 clients flood bad tokens from one
// address; the per-IP policy runs before the 401, so at most its burst
// (its clock stands still) are answered 401 and the rest 429.
func TestJWTGuessesCostPerIPTokens(t *testing.T) {
	kit := newJWTKit(t)
	base, _, _ := jwtGateway(t, kit, "20", "", nil)
	bad := kit.token(t, map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})
	var unauthorized, limited, other atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	for c := 0; c < 64; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 8; i++ {
				req, _ := http.NewRequest("GET", base+"/x", nil)
				req.Header.Set("Authorization", "Bearer "+bad)
				resp, err := client.Do(req)
				if err != nil {
					other.Add(1)
					continue
				}
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusUnauthorized:
					unauthorized.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if unauthorized.Load() != 20 || limited.Load() != 64*8-20 || other.Load() != 0 {
		t.Errorf("got %d 401, %d 429, %d other; want 20 (the burst), %d, 0", unauthorized.Load(), limited.Load(), other.Load(), 64*8-20)
	}
}

func TestJWTForwardRemove(t *testing.T) {
	kit := newJWTKit(t)
	base, up, _ := jwtGateway(t, kit, "100", "forward: remove", nil)
	if r := do(t, http.DefaultClient, "GET", base+"/x", nil, bearer(kit.token(t, nil))); r.status != http.StatusOK {
		t.Fatalf("got %d %s", r.status, r.body)
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if v := up.header.Get("Authorization"); v != "" {
		t.Errorf("upstream got Authorization %.20q, want none", v)
	}
}

// TestJWTClaimKeys: claim:sub counts each subject apart; an array claim is
// no key (the policy, on_missing_key: skip, does not apply).
func TestJWTClaimKeys(t *testing.T) {
	kit := newJWTKit(t)
	snap, err := policies.Parse("gateway.yaml", []byte(strings.NewReplacer("JWKS", kit.jwks.URL, "UPSTREAM", "http://127.0.0.1:1", "BURST", "5", "FORWARD", "").Replace(jwtConfig)), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keyOf := func(claims map[string]any) (string, string) {
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("Authorization", "Bearer "+kit.token(t, claims))
		e := Explain(snap, r, ExplainOptions{Tokens: kit.verifier})
		for _, p := range e.Policies {
			if p.Name == "per_sub" {
				return p.Key, p.Outcome
			}
		}
		t.Fatal("per_sub not explained")
		return "", ""
	}
	if k, o := keyOf(map[string]any{"sub": "alice"}); k != "alice" || o != OutcomeChecked {
		t.Errorf("got %q %s, want alice checked", k, o)
	}
	if k, o := keyOf(map[string]any{"sub": []string{"a", "b"}}); o != OutcomeSkipped {
		t.Errorf("an array sub: got %q %s, want skipped", k, o)
	}
}

// TestJWTQuotaReport: the quota report answers a JWT caller with its
// tenant and plan; a refused token is 401 naming why.
func TestJWTQuotaReport(t *testing.T) {
	kit := newJWTKit(t)
	upstream := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	yaml := strings.NewReplacer("JWKS", kit.jwks.URL, "UPSTREAM", upstream.URL, "BURST", "100", "FORWARD", "",
		"policies: [per_ip, per_tenant, per_sub]}", "policies: [per_ip, per_tenant, per_sub], quota: true}").Replace(jwtConfig)
	snap, err := policies.Parse("gateway.yaml", []byte(yaml), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{tokens: kit.verifier})
	r := do(t, http.DefaultClient, "GET", srv.URL+"/v1/quota", nil, bearer(kit.token(t, nil)))
	if r.status != http.StatusOK {
		t.Fatalf("got %d %s, want 200", r.status, r.body)
	}
	var rep struct {
		Tenant, Plan string
		Policies     []struct{ Policy string }
	}
	if err := json.Unmarshal(r.body, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Tenant != "acme" || rep.Plan != "pro" || len(rep.Policies) != 1 || rep.Policies[0].Policy != "per_tenant" {
		t.Errorf("got %+v, want tenant acme, plan pro, policy per_tenant", rep)
	}
	r = do(t, http.DefaultClient, "GET", srv.URL+"/v1/quota", nil, bearer(kit.token(t, map[string]any{"iss": "https://evil.test/"})))
	if r.status != http.StatusUnauthorized || !strings.Contains(decodeError(t, r).Message, "wrong_issuer") {
		t.Errorf("a refused token: got %d %s, want 401 naming wrong_issuer", r.status, r.body)
	}
}

// TestJWTRefusedOnLLMRoute: on an llm route a refused token is 401 in the
// OpenAI error shape, decided by its headers: the body is never read.
func TestJWTRefusedOnLLMRoute(t *testing.T) {
	kit := newJWTKit(t)
	var reached atomic.Int64
	upstream := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	yaml := `
tenants:
  jwt: {issuer: "https://id.example.test/", audiences: [api], jwks_url: "` + kit.jwks.URL + `", tenant_claim: org.id}
routes:
  - {name: llm, upstream: "` + upstream.URL + `", llm: openai, policies: [per_ip, per_tenant]}
policies:
  per_ip: {key: ip, rate: 1, per: 1h, burst: 100}
  per_tenant: {key: tenant, cost: tokens, rate: 100000, per: 1h, on_missing_key: reject}
`
	snap, err := policies.Parse("gateway.yaml", []byte(yaml), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{tokens: kit.verifier})
	// A body that is not JSON: reading it would be a 400, not a 401.
	body := strings.NewReader("not json at all")
	h := bearer(kit.token(t, map[string]any{"exp": time.Now().Add(-time.Hour).Unix()}))
	h.Set("Content-Type", "application/json")
	r := do(t, http.DefaultClient, "POST", srv.URL+"/v1/chat/completions", body, h)
	if r.status != http.StatusUnauthorized {
		t.Fatalf("got %d %s, want 401", r.status, r.body)
	}
	var e struct {
		Error struct{ Message, Type string }
	}
	if err := json.Unmarshal(r.body, &e); err != nil || !strings.Contains(e.Error.Message, "(expired)") {
		t.Errorf("got %s (%v), want the OpenAI error shape naming expired", r.body, err)
	}
	if reached.Load() != 0 {
		t.Errorf("the upstream was reached %d times", reached.Load())
	}
}

// TestJWTIdempotencyScope: JWT callers without a tenant behind one address
// keep their idempotency keys apart by their sub; with a tenant, by it.
func TestJWTIdempotencyScope(t *testing.T) {
	r := httptest.NewRequest("POST", "/pay", nil)
	route := &policies.Route{Name: "pay"}
	net := policies.Subject{}
	whoOf := func(s policies.Subject) string {
		idem := &idemRequest{clientKey: "k1"}
		idem.scope(route, r, &s)
		return idem.who
	}
	alice := policies.Subject{Credential: policies.CredentialJWT, Claims: map[string]any{"sub": "alice"}}
	bob := policies.Subject{Credential: policies.CredentialJWT, Claims: map[string]any{"sub": "bob"}}
	tenant := policies.Subject{Credential: policies.CredentialJWT, Claims: map[string]any{"sub": "bob"}, Tenant: &policies.Tenant{Name: "acme"}}
	if a, b := whoOf(alice), whoOf(bob); a == b || a == whoOf(net) {
		t.Errorf("alice %q, bob %q, keyless %q: want three scopes", a, b, whoOf(net))
	}
	if got := whoOf(tenant); got != "tenant:acme" {
		t.Errorf("got %q, want tenant:acme", got)
	}
}
