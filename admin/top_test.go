package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/metrics/topk"
	"github.com/ratelimit-gateway/gateway/policies"
)

// emptyTop is a Top that has seen no refusal.
type emptyTop struct{}

func (emptyTop) Top(string) []topk.Entry { return nil }
func (emptyTop) Window() time.Duration   { return 5 * time.Minute }

const topYAML = `
routes:
  - {name: api, match: {path_prefix: /}, upstream: builtin:echo, policies: [per-ip]}
tenants:
  keys:
    sk-test-free: {tenant: acme, plan: free}
policies:
  per-ip: {key: ip, rate: 5, per: 1m}
  per-tenant-ip: {key: tenant+ip, rate: 5, per: 1m}
  by-key: {key: api_key, rate: 5, per: 1m}
  by-user: {key: "header:X-User", rate: 5, per: 1m, on_missing_key: shared}
  by-model: {key: model, rate: 5, per: 1m}
`

// TestTopShowsWhoWithoutSecrets: /admin/top lists each policy's most
// refused keys as an operator can act on them: a tenant, a network, a
// model as they are; a header value or an API key only as a short digest,
// never as sent.
func TestTopShowsWhoWithoutSecrets(t *testing.T) {
	set, err := topk.New(topk.Config{}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	apiKeyDigest := sha256.Sum256([]byte("sk-test-free"))
	userSum := sha256.Sum256([]byte("bearer-secret-value"))
	long := strings.Repeat("x", 300) // over MaxKeyPartBytes: the gateway keys on its digest
	longSum := sha256.Sum256([]byte(long))
	refuse := func(policy, key string, n int) {
		for range n {
			set.Refused(policy, key)
		}
	}
	refuse("per-ip", "203.0.113.0/32", 7)
	refuse("per-ip", "2001:db8::/64", 3)
	refuse("per-tenant-ip", "acme\x1f203.0.113.0/32", 2)
	refuse("by-key", hex.EncodeToString(apiKeyDigest[:]), 4)
	refuse("by-user", "bearer-secret-value", 5)
	refuse("by-user", "\x1e"+hex.EncodeToString(longSum[:]), 1)
	refuse("by-user", anonKey, 2)
	refuse("by-model", "gpt-4o-mini", 1)

	cfg := fullConfig(t, testToken)
	cfg.Snapshots = policies.NewCurrent(parse(t, topYAML))
	cfg.Top = set
	srv := serve(t, cfg)
	a := call(t, srv, "GET", "/admin/top", testToken)
	if a.status != http.StatusOK {
		t.Fatalf("got %d %s", a.status, a.body)
	}
	var v topView
	a.decode(t, &v)
	if v.Window != "5m" || !strings.HasPrefix(v.Scope, "this instance") {
		t.Errorf("window %q scope %q: want 5m, this instance", v.Window, v.Scope)
	}
	got := map[string][]topKeyView{}
	for _, p := range v.Policies {
		got[p.Policy] = p.Keys
	}
	want := map[string][]topKeyView{
		"per-ip":        {{"ip 203.0.113.0/32", 7, 0}, {"ip 2001:db8::/64", 3, 0}},
		"per-tenant-ip": {{"tenant acme + ip 203.0.113.0/32", 2, 0}},
		"by-key":        {{"api_key sha256:" + hex.EncodeToString(apiKeyDigest[:])[:12], 4, 0}},
		"by-user": {
			{"header:X-User sha256:" + hex.EncodeToString(userSum[:])[:12], 5, 0},
			{"(no key: the shared anonymous bucket)", 2, 0},
			{"header:X-User sha256:" + hex.EncodeToString(longSum[:])[:12], 1, 0},
		},
		"by-model": {{"model gpt-4o-mini", 1, 0}},
	}
	for p, w := range want {
		if len(got[p]) != len(w) {
			t.Errorf("%s: got %v, want %v", p, got[p], w)
			continue
		}
		for i := range w {
			if got[p][i] != w[i] {
				t.Errorf("%s[%d]: got %+v, want %+v", p, i, got[p][i], w[i])
			}
		}
	}
	for _, secret := range []string{"bearer-secret-value", "sk-test-free", long[:40]} {
		if strings.Contains(string(a.body), secret) {
			t.Errorf("/admin/top holds %q", secret)
		}
	}

	one := call(t, srv, "GET", "/admin/top?policy=per-ip", testToken)
	var only topView
	one.decode(t, &only)
	if len(only.Policies) != 1 || only.Policies[0].Policy != "per-ip" {
		t.Errorf("?policy=per-ip: got %s", one.body)
	}
	for _, q := range []string{"?policy=nope", "?policy=per-ip&policy=by-key", "?other=1"} {
		if a := call(t, srv, "GET", "/admin/top"+q, testToken); a.status != http.StatusBadRequest {
			t.Errorf("%s: got %d %s, want 400", q, a.status, a.body)
		}
	}
	cfg.Top = nil
	if a := call(t, serve(t, cfg), "GET", "/admin/top", testToken); a.status != http.StatusNotImplemented {
		t.Errorf("without Top: got %d, want 501", a.status)
	}
}
