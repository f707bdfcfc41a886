package policies

import (
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const jwtBase = `
tenants:
  jwt:
    issuer: https://id.example.test/
    audiences: [api]
    jwks_url: https://id.example.test/jwks
    tenant_claim: org.id
    plan_claim: https://example\.com/plan
`

func TestJWTConfigCompiles(t *testing.T) {
	snap := mustParse(t, jwtBase+withPolicy("{key: claim:sub, rate: 1}"))
	j := snap.Tenants.JWT
	if j == nil {
		t.Fatal("tenants.jwt was not compiled")
	}
	if j.Leeway != 30*time.Second || j.Header != "Authorization" || j.Remove || j.Refresh != 5*time.Minute || j.UnknownKidCooldown != 30*time.Second {
		t.Errorf("got defaults leeway %s header %s remove %v refresh %s cooldown %s", j.Leeway, j.Header, j.Remove, j.Refresh, j.UnknownKidCooldown)
	}
	if !slices.Equal(j.Algorithms, []string{"RS256", "ES256"}) {
		t.Errorf("got algorithms %v, want RS256 ES256", j.Algorithms)
	}
	if !slices.Equal(j.TenantClaim, []string{"org", "id"}) || !slices.Equal(j.PlanClaim, []string{"https://example.com/plan"}) {
		t.Errorf("got claims %q %q", j.TenantClaim, j.PlanClaim)
	}
	if got := snap.Policies["p"].Reads.Claims; !slices.Equal(got, []string{"sub"}) {
		t.Errorf("got reads %v, want [sub]", got)
	}
}

func TestJWTKeysFileIsRelativeToTheConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	writeFile(t, cfg, strings.Replace(jwtBase, "jwks_url: https://id.example.test/jwks", "keys_file: jwks.json", 1)+withPolicy("{key: ip, rate: 1}"))
	snap, err := Load(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := snap.Tenants.JWT.KeysFile, filepath.Join(dir, "jwks.json"); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestJWTConfigErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"no issuer", strings.Replace(jwtBase, "issuer: https://id.example.test/", "leeway: 1s", 1), "gateway.yaml: tenants.jwt.issuer: required"},
		{"no audience", strings.Replace(jwtBase, "audiences: [api]", "audiences: []", 1), "gateway.yaml: tenants.jwt.audiences: required"},
		{"alg none", jwtBase + "    algorithms: [RS256, none]\n", `gateway.yaml: tenants.jwt.algorithms: "none" is never accepted`},
		{"HS without secret", jwtBase + "    algorithms: [HS256]\n", "gateway.yaml: tenants.jwt.algorithms: HS256 needs tenants.jwt.hmac_secret"},
		{"secret without HS", jwtBase + "    hmac_secret: " + strings.Repeat("s", 32) + "\n", "gateway.yaml: tenants.jwt.hmac_secret: set, but no HS algorithm"},
		{"short secret", jwtBase + "    algorithms: [HS256]\n    hmac_secret: short\n", "gateway.yaml: tenants.jwt.hmac_secret: must be at least 32 bytes"},
		{"unknown alg", jwtBase + "    algorithms: [RS1]\n", `gateway.yaml: tenants.jwt.algorithms: unknown algorithm "RS1"`},
		{"two sources", jwtBase + "    discovery: true\n", "gateway.yaml: tenants.jwt: give one of jwks_url, discovery and keys_file"},
		{"no source", strings.Replace(jwtBase, "jwks_url: https://id.example.test/jwks", "leeway: 1s", 1), "gateway.yaml: tenants.jwt: needs signing keys"},
		{"negative leeway", jwtBase + "    leeway: -1s\n", "gateway.yaml: tenants.jwt.leeway: must be between 0s and 5m"},
		{"bad claim path", strings.Replace(jwtBase, "tenant_claim: org.id", "tenant_claim: org..id", 1), "gateway.yaml: tenants.jwt.tenant_claim: a claim path has an empty name"},
		{"bad forward", jwtBase + "    forward: maybe\n", `gateway.yaml: tenants.jwt.forward: must be as_received or remove, got "maybe"`},
		{"unknown key", jwtBase + "    audience: api\n", "tenants.jwt.audience"},
		{"claim key without jwt", withPolicy("{key: claim:sub, rate: 1}"), "gateway.yaml: policies.p.key: a claim:NAME key needs tenants.jwt"},
		{"claim key without a name", jwtBase + withPolicy("{key: 'claim:', rate: 1}"), `gateway.yaml: policies.p.key: "claim:" needs a claim path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yaml := tt.yaml
			if !strings.Contains(yaml, "routes:") {
				yaml += withPolicy("{key: ip, rate: 1}")
			}
			lines := errorLines(t, yaml)
			for _, l := range lines {
				if strings.Contains(l, tt.want) {
					return
				}
			}
			t.Errorf("got %q, want a line with %q", lines, tt.want)
		})
	}
}

func TestParseClaimPath(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  bool
	}{
		{"sub", []string{"sub"}, false},
		{"org.id", []string{"org", "id"}, false},
		{`https://example\.com/tenant`, []string{"https://example.com/tenant"}, false},
		{`a\\.b`, []string{`a\`, "b"}, false},
		{`a\b`, nil, true},
		{"a.", nil, true},
		{".a", nil, true},
		{`a\`, nil, true},
	}
	for _, tt := range tests {
		got, err := ParseClaimPath(tt.in)
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("ParseClaimPath(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestClaimValueRefusesArraysAndObjects(t *testing.T) {
	var claims map[string]any
	d := json.NewDecoder(strings.NewReader(`{"sub":"u1","n":12345678901234567890,"ok":true,"org":{"id":"acme","tags":["a"]},"a.b":"dotted","roles":["x"],"nil":null,"empty":""}`))
	d.UseNumber()
	if err := d.Decode(&claims); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		want string
		ok   bool
	}{
		{"sub", "u1", true},
		{"n", "12345678901234567890", true},
		{"ok", "true", true},
		{"org.id", "acme", true},
		{`a\.b`, "dotted", true},
		{"org", "", false},
		{"roles", "", false},
		{"org.tags", "", false},
		{"nil", "", false},
		{"empty", "", false},
		{"missing", "", false},
		{"sub.x", "", false},
	}
	for _, tt := range tests {
		path, _ := ParseClaimPath(tt.path)
		got, ok := ClaimValue(claims, path)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ClaimValue(%s) = %q, %v; want %q, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}

func TestJWTToken(t *testing.T) {
	j := &JWT{Header: "Authorization"}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "bearer a.b.c")
	if got := j.Token(r); got != "a.b.c" {
		t.Errorf("bearer: got %q", got)
	}
	r.Header.Set("Authorization", "Basic a.b.c")
	if got := j.Token(r); got != "" {
		t.Errorf("basic: got %q, want none", got)
	}
	c := &JWT{Header: "Authorization", Cookie: "session"}
	r.Header.Set("Cookie", "session=x.y.z")
	if got := c.Token(r); got != "x.y.z" {
		t.Errorf("cookie: got %q", got)
	}
}

func TestJWTSecretFromEnvironment(t *testing.T) {
	secret := strings.Repeat("k", 40)
	snap := mustParse(t, jwtBase+"    algorithms: [RS256, HS256]\n"+withPolicy("{key: ip, rate: 1}"), "GATEWAY_TENANTS_JWT_HMAC_SECRET="+secret)
	if got := string(snap.Tenants.JWT.HMACSecret); got != secret {
		t.Errorf("got secret of %d bytes, want the environment's %d", len(got), len(secret))
	}
}
