package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// TestTenantKeysByDigest: a tenants.keys entry "sha256:<hex>" names the
// API key whose SHA-256 it is, so that a file can hold the digest instead
// of the key; the digest itself is no key, and a malformed digest is an
// error naming its place.
func TestTenantKeysByDigest(t *testing.T) {
	sum := sha256.Sum256([]byte("sk-live-acme"))
	yaml := `
tenants:
  keys:
    "sha256:` + hex.EncodeToString(sum[:]) + `": {tenant: acme, plan: pro}
    sk-plain: {tenant: globex}
routes:
  - {name: api, match: {path_prefix: /}, upstream: builtin:echo, policies: [per-tenant]}
policies:
  per-tenant: {key: tenant, rate: 5, per: 1m}
`
	snap, err := Parse("gateway.yaml", []byte(yaml), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, tenant string
		ok          bool
	}{
		{"sk-live-acme", "acme", true},
		{"sk-plain", "globex", true},
		{"sha256:" + hex.EncodeToString(sum[:]), "", false},
		{"sk-live-acm", "", false},
	} {
		tn, ok := snap.Tenants.Lookup(c.key)
		if ok != c.ok || tn.Name != c.tenant {
			t.Errorf("Lookup(%q): got %q %v, want %q %v", c.key, tn.Name, ok, c.tenant, c.ok)
		}
	}
	if tn, _ := snap.Tenants.Lookup("sk-live-acme"); tn.Plan != "pro" {
		t.Errorf("plan: got %q, want pro", tn.Plan)
	}
	// Upper-case hex names the same key.
	upper := strings.Replace(yaml, "sk-plain", "sha256:"+strings.ToUpper(hex.EncodeToString(sum[:])), 1)
	upper = strings.Replace(upper, `"sha256:`+hex.EncodeToString(sum[:])+`": {tenant: acme, plan: pro}`, `sk-other: {tenant: acme}`, 1)
	us, err := Parse("gateway.yaml", []byte(upper), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tn, ok := us.Tenants.Lookup("sk-live-acme"); !ok || tn.Name != "globex" {
		t.Errorf("upper-case digest: got %q %v, want globex true", tn.Name, ok)
	}
	for _, bad := range []string{"sha256:abc", "sha256:" + strings.Repeat("g", 64)} {
		_, err := Parse("gateway.yaml", []byte(strings.Replace(yaml, "sk-plain", bad, 1)), Options{})
		if err == nil || !strings.Contains(err.Error(), "gateway.yaml: tenants.keys") || !strings.Contains(err.Error(), "64 hex digits") {
			t.Errorf("%s: got %v, want an error naming the place", bad, err)
		}
	}
}
