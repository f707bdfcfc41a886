package policies

import (
	"slices"
	"strings"
	"testing"
)

// TestRouteReadingKeys: quota, upgrades, method_override and
// tenants.quota_path compile as documented, and mistakes name their place.
func TestRouteReadingKeys(t *testing.T) {
	const base = `
tenants: {quota_path: %s}
routes:
  - {name: a, match: {path_prefix: /a, headers: {X-Tier: gold}}, upstream: builtin:echo}
  - {name: b, match: {path_prefix: /b, headers: {x-tier: "*", X-Plan: x}}, upstream: builtin:echo, quota: true, upgrades: [], method_override: x-http-method-override}
  - {name: c, match: {path_prefix: /c}, upstream: builtin:echo, llm: openai, upgrades: [WebSocket, h2c]}
`
	snap, err := Parse("t.yaml", []byte(strings.Replace(base, "%s", "off", 1)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := snap.Routes[0], snap.Routes[1], snap.Routes[2]
	if snap.Tenants.QuotaPath != "" {
		t.Errorf("quota_path off: got %q, want none", snap.Tenants.QuotaPath)
	}
	if a.Quota || !b.Quota || !c.Quota {
		t.Errorf("quota: got %v %v %v, want false true true (an llm route answers it)", a.Quota, b.Quota, c.Quota)
	}
	if !slices.Equal(a.Upgrades, []string{"websocket"}) || len(b.Upgrades) != 0 || !slices.Equal(c.Upgrades, []string{"websocket", "h2c"}) {
		t.Errorf("upgrades: got %q %q %q, want [websocket] [] [websocket h2c]", a.Upgrades, b.Upgrades, c.Upgrades)
	}
	if a.MethodOverride != "" || b.MethodOverride != "X-Http-Method-Override" || !snap.MethodOverrides {
		t.Errorf("method_override: got %q %q (snapshot %v), want \"\" X-Http-Method-Override (true)", a.MethodOverride, b.MethodOverride, snap.MethodOverrides)
	}
	if !slices.Equal(snap.MatchHeaders, []string{"X-Tier", "X-Plan"}) {
		t.Errorf("match headers: got %q, want [X-Tier X-Plan]", snap.MatchHeaders)
	}

	_, err = Parse("t.yaml", []byte(strings.Replace(base, "%s", "none", 1)), Options{})
	if want := `tenants.quota_path: must start with "/" or be off, got "none"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"upgrades: []", "upgrades: [web socket]", `routes[1].upgrades[0]: must be a protocol name`},
		{"upgrades: []", "upgrades: [echo, ECHO]", `routes[1].upgrades[1]: "ECHO" listed twice`},
		{"method_override: x-http-method-override", "method_override: 'a b'", `routes[1].method_override: must be a header name`},
	} {
		_, err := Parse("t.yaml", []byte(strings.Replace(strings.Replace(base, "%s", "off", 1), tc.from, tc.to, 1)), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "t.yaml") {
			t.Errorf("%s: got %v, want t.yaml and %q", tc.to, err, tc.want)
		}
	}
}
