package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratelimit-gateway/gateway/internal/jwttest"
	"github.com/ratelimit-gateway/gateway/policies"
)

// TestServeJWT: "gateway serve" reads the signing keys of tenants.jwt from
// a JWKS server on loopback at start; a token they sign identifies its
// tenant, an API key still works beside it, and a token that fails is
// 401 saying why. With the JWKS server gone, known keys keep working.
func TestServeJWT(t *testing.T) {
	key, doc := jwttest.Key(t, "k1")
	var down atomic.Bool
	jwks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Write(doc)
	}))
	defer jwks.Close()
	sign := func(claims jwt.MapClaims) string {
		full := jwt.MapClaims{"iss": "https://id.example.test/", "aud": "api", "exp": time.Now().Add(time.Hour).Unix(), "org_id": "acme"}
		for k, v := range claims {
			full[k] = v
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, full)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(`server: {listen: "127.0.0.1:0"}
admin: {listen: ""}
tenants:
  keys: {sk-one: {tenant: keyed}}
  jwt:
    issuer: https://id.example.test/
    audiences: [api]
    jwks_url: `+jwks.URL+`
    tenant_claim: org_id
routes:
  - {name: echo, match: {path_prefix: /}, upstream: "builtin:echo", policies: [per-tenant]}
policies:
  per-tenant: {key: tenant, rate: 1000, per: 1s, on_missing_key: reject}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "gateway", cfg)
	c := newTestClient(t)
	if r := mustSend(t, c, "GET", g.base+"/x", "Authorization", "Bearer "+sign(nil)); r.status != 200 {
		t.Fatalf("a valid JWT: got %d %s, want 200", r.status, r.body)
	}
	if r := mustSend(t, c, "GET", g.base+"/x", "X-API-Key", "sk-one"); r.status != 200 {
		t.Fatalf("an API key: got %d %s, want 200", r.status, r.body)
	}
	r := mustSend(t, c, "GET", g.base+"/x", "Authorization", "Bearer "+sign(jwt.MapClaims{"aud": "other"}))
	if e := r.errorBody(t); r.status != 401 || !strings.Contains(e.Message, "wrong_audience") {
		t.Fatalf("a token for another audience: got %d %q, want 401 naming wrong_audience", r.status, e.Message)
	}
	down.Store(true)
	for i := 0; i < 20; i++ {
		if r := mustSend(t, c, "GET", g.base+"/x", "Authorization", "Bearer "+sign(jwt.MapClaims{"sub": string(rune('a' + i))})); r.status != 200 {
			t.Fatalf("with the JWKS server down: got %d %s, want 200", r.status, r.body)
		}
	}
}

// TestJWTKeySourceChangeNeedsRestart: a reload that changes where the
// signing keys come from says it applies at the next start; one that
// changes the audiences does not (they apply at once).
func TestJWTKeySourceChangeNeedsRestart(t *testing.T) {
	start := &policies.Config{Tenants: policies.TenantsConfig{JWT: &policies.JWTConfig{JWKSURL: "http://127.0.0.1:1/a", Audiences: []string{"api"}}}}
	moved := &policies.Config{Tenants: policies.TenantsConfig{JWT: &policies.JWTConfig{JWKSURL: "http://127.0.0.1:1/b", Audiences: []string{"api"}}}}
	other := &policies.Config{Tenants: policies.TenantsConfig{JWT: &policies.JWTConfig{JWKSURL: "http://127.0.0.1:1/a", Audiences: []string{"web"}}}}
	if got := strings.Join(startOnlyChanges(start, moved), ","); !strings.Contains(got, "tenants.jwt key source") {
		t.Errorf("a new jwks_url: got %q, want the key source named", got)
	}
	if got := startOnlyChanges(start, other); len(got) != 0 {
		t.Errorf("new audiences: got %q, want nothing that waits for a start", got)
	}
}
