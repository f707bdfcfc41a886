package proxy

import (
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/ratelimit-gateway/gateway/policies"
)

// FuzzClientIP feeds hostile forwarding headers from a trusted peer: the
// walk must never panic and must answer with the peer or an address that
// appears in the header.
func FuzzClientIP(f *testing.F) {
	for _, seed := range []string{
		"192.0.2.1", "for=192.0.2.43", `for="[2001:db8::1]:4711"`, "for=_hidden, for=unknown",
		`for="192.0.2.43`, "a,,b, ,", "for=1.2.3.4;for=5.6.7.8", "[::ffff:10.0.0.1]", "\x00\xff,\"",
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	f.Fuzz(func(t *testing.T, header string, useForwarded bool) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.1:1234"
		r.Header["X-Forwarded-For"] = []string{header}
		r.Header["Forwarded"] = []string{header}
		got, _ := resolveClient(r, policies.Identity{TrustedProxies: trusted, UseForwarded: useForwarded})
		if !got.IsValid() {
			t.Fatalf("got an invalid client for a valid peer (header %q)", header)
		}
		peer := netip.MustParseAddr("10.0.0.1")
		if got != peer && !containsAddrText(header, got) {
			t.Fatalf("got %v, which is neither the peer nor in the header %q", got, header)
		}
	})
}

// containsAddrText reports whether a's text (or, for IPv4-mapped input, the
// unmapped form's source) could have come from header.
func containsAddrText(header string, a netip.Addr) bool {
	for i := 0; i+1 <= len(header); i++ {
		for j := i + 1; j <= len(header); j++ {
			if p, err := netip.ParseAddr(header[i:j]); err == nil && p.Unmap().WithZone("") == a {
				return true
			}
		}
	}
	return false
}
