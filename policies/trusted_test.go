package policies

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestTrustedProxyForms: client addresses are unmapped before they are
// compared, so an IPv4-mapped prefix must become its IPv4 prefix or it would
// never match.
func TestTrustedProxyForms(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"192.0.2.7", "192.0.2.7/32"},
		{"::1", "::1/128"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"::ffff:192.0.2.7", "192.0.2.7/32"},
		{"::ffff:127.0.0.0/104", "127.0.0.0/8"},
		{"::ffff:10.0.0.0/96", "0.0.0.0/0"},
		{"::ffff:192.0.2.7/128", "192.0.2.7/32"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			snap := mustParse(t, minimalYAML+"server: {trusted_proxies: ['"+tt.in+"']}\n")
			want := []netip.Prefix{netip.MustParsePrefix(tt.want)}
			if got := snap.Identity.TrustedProxies; !slices.Equal(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

func TestTrustedProxyMappedPrefixTooShort(t *testing.T) {
	// ::ffff:0:0/95 holds non-mapped IPv6 addresses too: there is no IPv4
	// prefix it stands for.
	wantLine(t, errorLines(t, minimalYAML+"server: {trusted_proxies: ['::ffff:10.0.0.0/95']}\n"),
		`gateway.yaml: server.trusted_proxies[0]: an IPv4-mapped prefix needs a length of 96 or more (write the IPv4 CIDR instead), got "::ffff:10.0.0.0/95"`)
}

// TestTrustAllProxiesWarns: trusting every address lets any client choose
// its own address with X-Forwarded-For. That is right only where nothing
// but the proxies can reach the gateway, so it loads, with a warning naming
// the place.
func TestTrustAllProxiesWarns(t *testing.T) {
	tests := []struct {
		proxies string
		env     []string
		want    []string
	}{
		{"[0.0.0.0/0]", nil, []string{"gateway.yaml: server.trusted_proxies[0]: 0.0.0.0/0 trusts every IPv4 address: any client can choose its own address with the forwarding header, so per-IP limits hold only if nothing but your proxies can reach the gateway"}},
		{"[10.0.0.0/8, '::/0']", nil, []string{"gateway.yaml: server.trusted_proxies[1]: ::/0 trusts every IPv6 address: any client can choose its own address with the forwarding header, so per-IP limits hold only if nothing but your proxies can reach the gateway"}},
		{"['::ffff:0.0.0.0/96']", nil, []string{"gateway.yaml: server.trusted_proxies[0]: ::ffff:0.0.0.0/96 trusts every IPv4 address: any client can choose its own address with the forwarding header, so per-IP limits hold only if nothing but your proxies can reach the gateway"}},
		{"[]", []string{"GATEWAY_SERVER_TRUSTED_PROXIES=0.0.0.0/0"}, []string{"gateway.yaml: server.trusted_proxies[0] (from GATEWAY_SERVER_TRUSTED_PROXIES): 0.0.0.0/0 trusts every IPv4 address: any client can choose its own address with the forwarding header, so per-IP limits hold only if nothing but your proxies can reach the gateway"}},
		{"[10.0.0.0/8, 192.0.2.0/24]", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.proxies, func(t *testing.T) {
			snap := mustParse(t, minimalYAML+"server: {trusted_proxies: "+tt.proxies+"}\n", tt.env...)
			var got []string
			for _, w := range snap.Warnings {
				got = append(got, w.Error())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("warnings:\n  got  %s\n  want %s", strings.Join(got, "\n       "), strings.Join(tt.want, "\n       "))
			}
		})
	}
}
