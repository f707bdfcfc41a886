package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestKeyParts(t *testing.T) {
	keyHex := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	long := strings.Repeat("x", MaxKeyPartBytes+1)
	subject := &Subject{ClientNet: netip.MustParsePrefix("192.0.2.0/24"), APIKey: "sk-secret", Tenant: &Tenant{Name: "acme"}}
	tests := []struct {
		spec, target string
		want         []string
	}{
		{"ip", "/", []string{"192.0.2.0/24"}},
		{"tenant+ip", "/", []string{"acme", "192.0.2.0/24"}},
		{"api_key+query:q", "/?q=a%2Bb", []string{keyHex("sk-secret"), "a+b"}},
		{"query:q+tenant", "/?q=" + long, []string{"sha256:" + keyHex(long), "acme"}},
		{"query:q+query:r", "/?q=a%1Fb&r=%1Ec", []string{"sha256:" + keyHex("a\x1fb"), "sha256:" + keyHex("\x1ec")}},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			parts, err := parseKeySpec(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			key, ok := keyFunc(parts)(httptest.NewRequest("GET", tt.target, nil), subject)
			if !ok {
				t.Fatalf("key of %s missing", tt.spec)
			}
			if got := KeyParts(key); !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
