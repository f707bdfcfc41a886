package policies

import (
	"net/http/httptest"
	"testing"
)

// TestMethodMatch: a route that takes GET takes HEAD too, so its policies
// judge HEAD requests; nothing else widens.
func TestMethodMatch(t *testing.T) {
	tests := []struct {
		methods []string
		method  string
		want    bool
	}{
		{[]string{"GET"}, "GET", true},
		{[]string{"GET"}, "HEAD", true},
		{[]string{"GET", "POST"}, "HEAD", true},
		{[]string{"POST"}, "HEAD", false},
		{[]string{"HEAD"}, "GET", false},
		{[]string{"GET"}, "POST", false},
		{nil, "DELETE", true},
		{[]string{"POST"}, "post", false}, // case-sensitive: the proxy refuses "post" before it asks
		{[]string{"GET"}, "head", false},
	}
	for _, tt := range tests {
		m := Match{PathPrefix: "/reports", Methods: tt.methods}
		r := httptest.NewRequest(tt.method, "/reports/x", nil)
		if got := m.Matches(r); got != tt.want {
			t.Errorf("methods %v, %s: got %v, want %v", tt.methods, tt.method, got, tt.want)
		}
	}
}

// TestKeyReads: what a key reads comes from the parsed spec, not from
// matching words in it (a header named X-Tenant is not the tenant).
func TestKeyReads(t *testing.T) {
	tests := []struct {
		spec string
		want KeyReads
	}{
		{"ip", KeyReads{IP: true}},
		{"tenant+ip", KeyReads{IP: true, Tenant: true}},
		{"api_key", KeyReads{APIKey: true}},
		{"header:x-tenant", KeyReads{Headers: []string{"X-Tenant"}}},
		{"header:X-User+query:api_key", KeyReads{Headers: []string{"X-User"}, Queries: []string{"api_key"}}},
		{"bogus", KeyReads{}},
	}
	for _, tt := range tests {
		var got KeyReads
		if parts, err := parseKeySpec(tt.spec); err == nil {
			got = readsOf(parts)
		}
		if got.IP != tt.want.IP || got.APIKey != tt.want.APIKey || got.Tenant != tt.want.Tenant ||
			!equalStrings(got.Headers, tt.want.Headers) || !equalStrings(got.Queries, tt.want.Queries) {
			t.Errorf("Reads(%q): got %+v, want %+v", tt.spec, got, tt.want)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
