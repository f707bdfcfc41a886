package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func TestKeyFuncs(t *testing.T) {
	keyHex := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:])
	}
	long := strings.Repeat("x", MaxKeyPartBytes+1)
	longer := strings.Repeat("x", 10*MaxKeyPartBytes)
	subject := &Subject{
		ClientIP:  netip.MustParseAddr("2001:db8::1"),
		ClientNet: netip.MustParsePrefix("2001:db8::/64"),
		APIKey:    "sk-secret",
		Tenant:    &Tenant{Name: "acme", Plan: "pro"},
	}
	tests := []struct {
		name    string
		spec    string
		target  string
		headers map[string]string
		subject *Subject
		want    string
		wantOK  bool
	}{
		{name: "ip is the grouped network", spec: "ip", subject: subject, want: "2001:db8::/64", wantOK: true},
		{name: "ip falls back to the address", spec: "ip", subject: &Subject{ClientIP: netip.MustParseAddr("192.0.2.7")}, want: "192.0.2.7", wantOK: true},
		{name: "ip v4 network", spec: "ip", subject: &Subject{ClientNet: netip.MustParsePrefix("203.0.113.7/32")}, want: "203.0.113.7/32", wantOK: true},
		{name: "ip v4-mapped address", spec: "ip", subject: &Subject{ClientIP: netip.MustParseAddr("::ffff:192.0.2.7")}, want: "::ffff:192.0.2.7", wantOK: true},
		{name: "ip longest v6", spec: "ip", subject: &Subject{ClientNet: netip.MustParsePrefix("2001:db8:1234:5678:9abc:def0:1234:5678/128")},
			want: "2001:db8:1234:5678:9abc:def0:1234:5678/128", wantOK: true},
		{name: "ip missing", spec: "ip", subject: &Subject{}},
		{name: "ip without subject", spec: "ip"},
		{name: "header", spec: "header:x-user", headers: map[string]string{"X-User": "alice"}, want: "alice", wantOK: true},
		{name: "header missing", spec: "header:X-User"},
		{name: "header empty is missing", spec: "header:X-User", headers: map[string]string{"X-User": ""}},
		{name: "query", spec: "query:user", target: "/?a=1&user=bob&user=eve", want: "bob", wantOK: true},
		{name: "query escaped", spec: "query:user id", target: "/?user+id=b%20c", want: "b c", wantOK: true},
		{name: "query missing", spec: "query:user", target: "/?users=bob"},
		{name: "query empty is missing", spec: "query:user", target: "/?user="},
		{name: "api key is hashed", spec: "api_key", subject: subject, want: keyHex("sk-secret"), wantOK: true},
		{name: "api key missing", spec: "api_key", subject: &Subject{}},
		{name: "tenant", spec: "tenant", subject: subject, want: "acme", wantOK: true},
		{name: "tenant missing", spec: "tenant", subject: &Subject{APIKey: "unknown"}},
		{name: "composite", spec: "tenant+ip", subject: subject, want: "acme\x1f2001:db8::/64", wantOK: true},
		{name: "composite missing a part", spec: "tenant+header:X-User", subject: subject},
		{name: "long value bounded", spec: "header:X-User", headers: map[string]string{"X-User": long},
			want: "\x1e" + keyHex(long), wantOK: true},
		{name: "longer value same length", spec: "header:X-User", headers: map[string]string{"X-User": longer},
			want: "\x1e" + keyHex(longer), wantOK: true},
		{name: "value at the bound kept", spec: "header:X-User", headers: map[string]string{"X-User": long[1:]},
			want: long[1:], wantOK: true},
		{name: "separator inside a value is hashed", spec: "header:X-A+header:X-B",
			headers: map[string]string{"X-A": "a\x1fb", "X-B": "c"}, want: "\x1e" + keyHex("a\x1fb") + "\x1fc", wantOK: true},
		{name: "marker at the start is hashed", spec: "query:q", target: "/?q=%1Eabc", want: "\x1e" + keyHex("\x1eabc"), wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts, err := parseKeySpec(tt.spec)
			if err != nil {
				t.Fatalf("parseKeySpec(%q): %v", tt.spec, err)
			}
			target := tt.target
			if target == "" {
				target = "/"
			}
			r := httptest.NewRequest("GET", target, nil)
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			got, ok := keyFunc(parts)(r, tt.subject)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("got (%q, %v), want (%q, %v)", got, ok, tt.want, tt.wantOK)
			}
			if len(got) > MaxKeyPartBytes*2+1 {
				t.Errorf("key of %d bytes, want bounded", len(got))
			}
		})
	}
}

// TestCompositeKeysDoNotCollide shows why parts are bounded before they are
// joined: two different pairs of values must never give the same key.
func TestCompositeKeysDoNotCollide(t *testing.T) {
	parts, err := parseKeySpec("header:X-A+header:X-B")
	if err != nil {
		t.Fatal(err)
	}
	f := keyFunc(parts)
	key := func(a, b string) string {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-A", a)
		r.Header.Set("X-B", b)
		k, _ := f(r, nil)
		return k
	}
	pairs := [][2]string{{"a\x1fb", "c"}, {"a", "b\x1fc"}, {"a", "b"}, {"\x1e" + strings.Repeat("0", 64), "b"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k := key(p[0], p[1])
		if other, dup := seen[k]; dup {
			t.Errorf("pairs %q and %q both give key %q", other, p, k)
		}
		seen[k] = p
	}
}

func TestPolicyKeyFromSnapshot(t *testing.T) {
	snap := mustParse(t, withPolicy("{key: tenant+ip, rate: 1, on_missing_key: reject}"))
	pol := snap.Policies["p"]
	if pol.KeySpec != "tenant+ip" || pol.OnMissingKey != MissingReject {
		t.Errorf("got spec %q missing %q, want tenant+ip reject", pol.KeySpec, pol.OnMissingKey)
	}
	s := &Subject{ClientNet: netip.MustParsePrefix("192.0.2.0/24"), Tenant: &Tenant{Name: "t"}}
	if got, ok := pol.Key(httptest.NewRequest("GET", "/", nil), s); !ok || got != "t\x1f192.0.2.0/24" {
		t.Errorf("got (%q, %v), want (%q, true)", got, ok, "t\x1f192.0.2.0/24")
	}
}

// A shared client key reads as the network it was made of, and a Subject
// whose network changed since reads the new one, never the stale string.
func TestSharedClientKey(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	ip, both := mustKeyFunc(t, "ip"), mustKeyFunc(t, "tenant+ip")
	s := &Subject{ClientIP: netip.MustParseAddr("2001:db8::1"), ClientNet: netip.MustParsePrefix("2001:db8::/64"), Tenant: &Tenant{Name: "t"}}
	s.ShareClientKey()
	for _, tt := range []struct {
		net, want string
	}{{"2001:db8::/64", "2001:db8::/64"}, {"192.0.2.0/24", "192.0.2.0/24"}} {
		s.ClientNet = netip.MustParsePrefix(tt.net)
		if got, ok := ip(r, s); !ok || got != tt.want {
			t.Errorf("ip: got (%q, %v), want (%q, true)", got, ok, tt.want)
		}
		if got, ok := both(r, s); !ok || got != "t"+keySeparator+tt.want {
			t.Errorf("tenant+ip: got (%q, %v), want (%q, true)", got, ok, "t"+keySeparator+tt.want)
		}
	}
	s.ClientNet = netip.Prefix{}
	if got, ok := ip(r, s); !ok || got != "2001:db8::1" {
		t.Errorf("no network: got (%q, %v), want the address", got, ok)
	}
	s.ClientNet = netip.MustParsePrefix("2001:db8::/64")
	if n := testing.AllocsPerRun(100, func() { s.ShareClientKey(); ip(r, s); ip(r, s); ip(r, s) }); n != 1 {
		t.Errorf("three ip keys of one request: %v allocations, want 1 (the shared string)", n)
	}
	s.ClientNet = netip.Prefix{}
	if n := testing.AllocsPerRun(100, func() { ip(r, s) }); n != 1 {
		t.Errorf("an address's key: %v allocations, want 1 (its string)", n)
	}
}

func mustKeyFunc(t *testing.T, spec string) KeyFunc {
	t.Helper()
	parts, err := parseKeySpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	return keyFunc(parts)
}
