package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/ratelimit-gateway/gateway/policies"
)

func prefixes(t *testing.T, cidrs ...string) []netip.Prefix {
	t.Helper()
	var ps []netip.Prefix
	for _, c := range cidrs {
		ps = append(ps, netip.MustParsePrefix(c))
	}
	return ps
}

func TestClientIP(t *testing.T) {
	trusted := prefixes(t, "10.0.0.0/8", "2001:db8:ffff::/48")
	tests := []struct {
		name      string
		remote    string
		xff       []string
		forwarded []string
		// Cases that set forwarded read it (server.forwarded_header: forwarded)
		// unless useXFF says otherwise.
		useForwarded, useXFF bool
		want                 string // "" for an invalid address
		wantTrusted          bool
	}{
		{name: "untrusted peer ignores X-Forwarded-For", remote: "192.0.2.1:1234",
			xff: []string{"198.51.100.1"}, want: "192.0.2.1"},
		{name: "untrusted peer ignores Forwarded", remote: "192.0.2.1:1234",
			forwarded: []string{"for=198.51.100.1"}, want: "192.0.2.1"},
		{name: "trusted peer without header", remote: "10.0.0.1:1234", want: "10.0.0.1", wantTrusted: true},
		{name: "trusted peer, one hop", remote: "10.0.0.1:1234",
			xff: []string{"198.51.100.1"}, want: "198.51.100.1", wantTrusted: true},
		{name: "right-most untrusted wins over spoofed left entries", remote: "10.0.0.1:1234",
			xff: []string{"6.6.6.6, 198.51.100.1, 10.0.0.2"}, want: "198.51.100.1", wantTrusted: true},
		{name: "all trusted: left-most", remote: "10.0.0.1:1234",
			xff: []string{"10.0.0.3, 10.0.0.2"}, want: "10.0.0.3", wantTrusted: true},
		{name: "several header lines form one chain", remote: "10.0.0.1:1234",
			xff: []string{"6.6.6.6", "198.51.100.1, 10.0.0.2"}, want: "198.51.100.1", wantTrusted: true},
		{name: "several header lines, client in the first", remote: "10.0.0.1:1234",
			xff: []string{"198.51.100.1", "10.0.0.3,10.0.0.2"}, want: "198.51.100.1", wantTrusted: true},
		{name: "malformed right-most: the peer is the client", remote: "10.0.0.1:1234",
			xff: []string{"198.51.100.1, garbage"}, want: "10.0.0.1", wantTrusted: true},
		{name: "malformed in the middle: its trusted right neighbour", remote: "10.0.0.1:1234",
			xff: []string{"198.51.100.1, bad, 10.0.0.2"}, want: "10.0.0.2", wantTrusted: true},
		{name: "empty entry stops like a malformed one", remote: "10.0.0.1:1234",
			xff: []string{"198.51.100.1,,10.0.0.2"}, want: "10.0.0.2", wantTrusted: true},
		{name: "entry with port", remote: "10.0.0.1:1234",
			xff: []string{"198.51.100.1:5678"}, want: "198.51.100.1", wantTrusted: true},
		{name: "bracketed IPv6 with port", remote: "10.0.0.1:1234",
			xff: []string{"[2001:db8::1]:443"}, want: "2001:db8::1", wantTrusted: true},
		{name: "bare IPv6", remote: "10.0.0.1:1234",
			xff: []string{"2001:db8::1 , 10.0.0.2"}, want: "2001:db8::1", wantTrusted: true},
		{name: "IPv4-mapped entry is unmapped", remote: "10.0.0.1:1234",
			xff: []string{"::ffff:198.51.100.1"}, want: "198.51.100.1", wantTrusted: true},
		{name: "IPv4-mapped trusted peer is unmapped", remote: "[::ffff:10.0.0.1]:1234",
			xff: []string{"198.51.100.1"}, want: "198.51.100.1", wantTrusted: true},
		{name: "IPv4-mapped untrusted peer is unmapped", remote: "[::ffff:192.0.2.1]:1234",
			want: "192.0.2.1"},
		{name: "trusted IPv6 peer", remote: "[2001:db8:ffff::1]:443",
			xff: []string{"2001:db8:1::5"}, want: "2001:db8:1::5", wantTrusted: true},
		{name: "trusted IPv6 hop in the chain", remote: "10.0.0.1:1234",
			xff: []string{"192.0.2.7, 2001:db8:ffff::9"}, want: "192.0.2.7", wantTrusted: true},
		{name: "bracketed IPv4 is malformed", remote: "10.0.0.1:1234",
			xff: []string{"[192.0.2.7]"}, want: "10.0.0.1", wantTrusted: true},
		{name: "non-numeric port is malformed", remote: "10.0.0.1:1234",
			xff: []string{"[2001:db8::1]:https"}, want: "10.0.0.1", wantTrusted: true},
		{name: "peer is not an address", remote: "@", xff: []string{"198.51.100.1"}, want: ""},

		{name: "Forwarded: for with other params", remote: "10.0.0.1:1234",
			forwarded: []string{"for=192.0.2.60;proto=http;by=203.0.113.43"}, want: "192.0.2.60", wantTrusted: true},
		{name: "Forwarded: quoted IPv6 with port", remote: "10.0.0.1:1234",
			forwarded: []string{`for="[2001:db8:cafe::17]:4711"`}, want: "2001:db8:cafe::17", wantTrusted: true},
		{name: "Forwarded: parameter name is case-insensitive", remote: "10.0.0.1:1234",
			forwarded: []string{`For="192.0.2.60"`}, want: "192.0.2.60", wantTrusted: true},
		{name: "Forwarded: right-most untrusted", remote: "10.0.0.1:1234",
			forwarded: []string{"for=6.6.6.6, for=192.0.2.43, for=10.0.0.9"}, want: "192.0.2.43", wantTrusted: true},
		{name: "Forwarded: several lines", remote: "10.0.0.1:1234",
			forwarded: []string{"for=6.6.6.6", "for=192.0.2.43;proto=https, for=10.0.0.9"}, want: "192.0.2.43", wantTrusted: true},
		{name: "Forwarded: comma inside quotes does not split", remote: "10.0.0.1:1234",
			forwarded: []string{`for=192.0.2.43;ext="a,b"`}, want: "192.0.2.43", wantTrusted: true},
		{name: "Forwarded mode ignores X-Forwarded-For", remote: "10.0.0.1:1234", useForwarded: true,
			forwarded: []string{"for=192.0.2.60"}, xff: []string{"198.51.100.1"}, want: "192.0.2.60", wantTrusted: true},
		{name: "X-Forwarded-For mode ignores a client's Forwarded", remote: "10.0.0.1:1234", useXFF: true,
			forwarded: []string{"for=192.0.2.60"}, xff: []string{"198.51.100.1"}, want: "198.51.100.1", wantTrusted: true},
		{name: "Forwarded: unknown stops at the trusted hop that reported it", remote: "10.0.0.1:1234",
			forwarded: []string{"for=192.0.2.43, for=unknown"}, want: "10.0.0.1", wantTrusted: true},
		{name: "Forwarded: obfuscated stops at the trusted hop that reported it", remote: "10.0.0.1:1234",
			forwarded: []string{"for=_hidden, for=10.0.0.7"}, want: "10.0.0.7", wantTrusted: true},
		{name: "Forwarded: element without for stops", remote: "10.0.0.1:1234",
			forwarded: []string{"for=192.0.2.43, proto=https"}, want: "10.0.0.1", wantTrusted: true},
		{name: "Forwarded: two for in one element stops", remote: "10.0.0.1:1234",
			forwarded: []string{"for=192.0.2.43;for=192.0.2.44"}, want: "10.0.0.1", wantTrusted: true},
		{name: "Forwarded: unterminated quote stops", remote: "10.0.0.1:1234",
			forwarded: []string{`for="192.0.2.43`}, want: "10.0.0.1", wantTrusted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			if tt.xff != nil {
				r.Header["X-Forwarded-For"] = tt.xff
			}
			if tt.forwarded != nil {
				r.Header["Forwarded"] = tt.forwarded
			}
			id := policies.Identity{TrustedProxies: trusted, UseForwarded: (tt.forwarded != nil || tt.useForwarded) && !tt.useXFF}
			got, gotTrusted := resolveClient(r, id)
			if tt.want == "" {
				if got.IsValid() {
					t.Errorf("client: got %v, want an invalid address", got)
				}
			} else if want := netip.MustParseAddr(tt.want); got != want {
				t.Errorf("client: got %v, want %v", got, want)
			}
			if gotTrusted != tt.wantTrusted {
				t.Errorf("peer trusted: got %v, want %v", gotTrusted, tt.wantTrusted)
			}
		})
	}
}

func TestIdentifyGroupsAndKeys(t *testing.T) {
	tenants := policies.Tenants{Keys: map[string]policies.Tenant{
		"sk-free": {Name: "acme", Plan: "free"},
	}}
	tests := []struct {
		name       string
		identity   policies.Identity
		keyHeader  string
		remote     string
		header     http.Header
		wantNet    string
		wantKey    string
		wantTenant string
	}{
		{name: "IPv4 default /32", remote: "192.0.2.77:1", wantNet: "192.0.2.77/32"},
		{name: "IPv6 default /64", remote: "[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:1", wantNet: "2001:db8:1:2::/64"},
		{name: "IPv6 neighbour shares the /64", remote: "[2001:db8:1:2::1]:1", wantNet: "2001:db8:1:2::/64"},
		{name: "IPv6 next /64 differs", remote: "[2001:db8:1:3::1]:1", wantNet: "2001:db8:1:3::/64"},
		{name: "custom IPv4 /24", identity: policies.Identity{IPv4Prefix: 24}, remote: "192.0.2.77:1", wantNet: "192.0.2.0/24"},
		{name: "custom IPv6 /48", identity: policies.Identity{IPv6Prefix: 48}, remote: "[2001:db8:1:2::1]:1", wantNet: "2001:db8:1::/48"},
		{name: "prefix longer than the address is clamped", identity: policies.Identity{IPv4Prefix: 64},
			remote: "192.0.2.77:1", wantNet: "192.0.2.77/32"},
		{name: "no address, no net", remote: "@", wantNet: "invalid Prefix"},
		{name: "API key in the default header", remote: "192.0.2.1:1", header: http.Header{"X-Api-Key": {"sk-free"}},
			wantNet: "192.0.2.1/32", wantKey: "sk-free", wantTenant: "acme"},
		{name: "unknown API key has no tenant", remote: "192.0.2.1:1", header: http.Header{"X-Api-Key": {"sk-nope"}},
			wantNet: "192.0.2.1/32", wantKey: "sk-nope"},
		{name: "bearer token", keyHeader: "Authorization", remote: "192.0.2.1:1",
			header: http.Header{"Authorization": {"Bearer sk-free"}}, wantNet: "192.0.2.1/32", wantKey: "sk-free", wantTenant: "acme"},
		{name: "bearer scheme is case-insensitive", keyHeader: "authorization", remote: "192.0.2.1:1",
			header: http.Header{"Authorization": {"bearer  sk-free"}}, wantNet: "192.0.2.1/32", wantKey: "sk-free", wantTenant: "acme"},
		{name: "basic auth is not an API key", keyHeader: "Authorization", remote: "192.0.2.1:1",
			header: http.Header{"Authorization": {"Basic dXNlcjpwdw=="}}, wantNet: "192.0.2.1/32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := &policies.Snapshot{Identity: tt.identity, Tenants: tenants}
			snap.Tenants.Header = tt.keyHeader
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for k, vs := range tt.header {
				r.Header[k] = vs
			}
			s := Identify(r, snap, nil)
			if got := s.ClientNet.String(); got != tt.wantNet {
				t.Errorf("ClientNet: got %q, want %q", got, tt.wantNet)
			}
			if s.APIKey != tt.wantKey {
				t.Errorf("APIKey: got %q, want %q", s.APIKey, tt.wantKey)
			}
			gotTenant := ""
			if s.Tenant != nil {
				gotTenant = s.Tenant.Name
			}
			if gotTenant != tt.wantTenant {
				t.Errorf("tenant: got %q, want %q", gotTenant, tt.wantTenant)
			}
		})
	}
}

// parseHop reads an address as a peer or a forwarded hop gives it: bare, with
// a port, IPv6 in brackets with a port; anything else is not an address.
func TestParseHop(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string // "" when not an address
	}{
		{"192.0.2.1", "192.0.2.1"},
		{" 192.0.2.1 ", "192.0.2.1"},
		{"192.0.2.1:8080", "192.0.2.1"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"::ffff:192.0.2.1", "192.0.2.1"},
		{"fe80::1%eth0", "fe80::1"},
		{"[192.0.2.1]:80", ""}, // brackets are for IPv6
		{"192.0.2.1:", ""},
		{"192.0.2.1:99999", ""},
		{"example.com:80", ""},
		{"unknown", ""},
		{"", ""},
	} {
		got := ""
		if a, ok := parseHop(tt.in); ok {
			got = a.String()
		}
		if got != tt.want {
			t.Errorf("parseHop(%q): got %q, want %q", tt.in, got, tt.want)
		}
	}
}
