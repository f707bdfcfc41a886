package proxy

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/ratelimit-gateway/gateway/policies"
)

// A tenant key written in the config as its digest is known over HTTP as
// the key itself is; sending the digest as a key gets nothing.
func TestTenantKeyWrittenAsDigest(t *testing.T) {
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	snap := compileYAML(t, fmt.Sprintf(`
tenants:
  keys:
    "%s": {tenant: acme, plan: pro}
    sk-plain: {tenant: other}
routes:
  - {name: api, upstream: "%s", policies: [per-tenant]}
policies:
  per-tenant: {key: tenant, per: 1m, plans: {pro: 1000}, on_missing_key: reject}
`, policies.KeyDigest("sk-hidden"), up.URL))
	gw, _ := newGateway(t, snap, newEngine(t, newTestClock()), gatewayOpts{})
	for _, tt := range []struct {
		key  string
		want int
	}{
		{"sk-hidden", http.StatusOK},
		{"sk-plain", http.StatusOK},
		{policies.KeyDigest("sk-hidden"), http.StatusUnauthorized},
		{"sk-unknown", http.StatusUnauthorized},
	} {
		r := do(t, http.DefaultClient, http.MethodGet, gw.URL+"/x", nil, http.Header{"X-Api-Key": {tt.key}})
		if r.status != tt.want {
			t.Errorf("key %q: status %d %s, want %d", tt.key, r.status, r.body, tt.want)
		}
	}
}
