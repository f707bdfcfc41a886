package proxy

import (
	"net/url"
	"strings"
	"testing"
)

// TestCanonicalPath is the canonical form at the level of one path: the
// escaped form forwarded, the decoded form matched, or the refusal.
func TestCanonicalPath(t *testing.T) {
	tests := []struct {
		in, esc, dec string
		bad          string // part of the refusal
	}{
		{in: "", esc: "/", dec: "/"},
		{in: "/", esc: "/", dec: "/"},
		{in: "/a/b/", esc: "/a/b/", dec: "/a/b/"},
		{in: "//a///b", esc: "/a/b", dec: "/a/b"},
		{in: "/a/./b/.", esc: "/a/b/", dec: "/a/b/"},
		{in: "/a/../b", esc: "/b", dec: "/b"},
		{in: "/a/b/..", esc: "/a/", dec: "/a/"},
		{in: "/a/%2e%2E/b", esc: "/b", dec: "/b"},
		{in: "/%7euser/%41", esc: "/~user/A", dec: "/~user/A"},
		{in: "/a%20b/%3f%c3%a9", esc: "/a%20b/%3F%C3%A9", dec: "/a b/?é"},
		{in: "/.well-known/x", esc: "/.well-known/x", dec: "/.well-known/x"},
		{in: "/a/..b/c..", esc: "/a/..b/c..", dec: "/a/..b/c.."},
		{in: "/..", bad: "above the root"},
		{in: "/a/../../b", bad: "above the root"},
		{in: "/a%2Fb", bad: "encoded slash"},
		{in: "/a%5cb", bad: "backslash"},
		{in: `/a\b`, bad: "backslash"},
		{in: "/a%00", bad: "control character (%00)"},
		{in: "/a%7F", bad: "control character (%7F)"},
		{in: "/a/..;/b", bad: "dot segment with parameters"},
		{in: "/a/.;x/b", bad: "dot segment with parameters"},
		{in: "/a%zz", bad: "malformed escape"},
		{in: "/payments;jsessionid=x", bad: `parameters (";jsessionid=x")`},
		{in: "/a;x/b", bad: `parameters (";x")`},
		{in: "/a%3Bx", bad: `encoded ";" (%3B)`},
		{in: "*", bad: "must be a path"},
	}
	for _, tt := range tests {
		esc, dec, bad := canonicalPath(tt.in, rejectParams)
		if tt.bad != "" {
			if !strings.Contains(bad, tt.bad) {
				t.Errorf("canonicalPath(%q): got (%q, %q, %q), want a refusal containing %q", tt.in, esc, dec, bad, tt.bad)
			}
			continue
		}
		if esc != tt.esc || dec != tt.dec || bad != "" {
			t.Errorf("canonicalPath(%q): got (%q, %q, %q), want (%q, %q)", tt.in, esc, dec, bad, tt.esc, tt.dec)
		}
	}
}

// A clean path costs no allocation: it is the common case.
func TestCanonicalPathCleanAllocs(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { canonicalPath("/v1/chat/completions", rejectParams) }); n != 0 {
		t.Errorf("allocations for a clean path: got %v, want 0", n)
	}
}

// canonicalPath's two forms agree on any path it accepts: the decoded form
// is the escaped one unescaped, and a canonical path is its own canonical
// form (what it returns, given again, comes back unchanged).
func FuzzCanonicalPath(f *testing.F) {
	for _, p := range []string{"/", "/v1/chat/completions", "/a//b", "/a/./b/../c", "/%41%2f%7e", "/a;x/b", `/a\b`, "/ü/%C3%BC", "/a/b/"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		for _, params := range []pathParams{rejectParams, stripParams} {
			esc, dec, bad := canonicalPath(p, params)
			if bad != "" {
				continue
			}
			want, err := url.PathUnescape(esc)
			if err != nil || want != dec {
				t.Fatalf("canonicalPath(%q) = %q, %q: unescaped, the first is %q (%v)", p, esc, dec, want, err)
			}
			esc2, dec2, bad2 := canonicalPath(esc, params)
			if esc2 != esc || dec2 != dec || bad2 != "" {
				t.Fatalf("canonicalPath(%q) = %q, %q, %q: not its own canonical form (%q, %q)", esc, esc2, dec2, bad2, esc, dec)
			}
		}
	})
}
