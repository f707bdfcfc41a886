// Package httpfield checks HTTP field names by a table of a token's bytes,
// at a few instructions a byte where net/http's own checks decode runes or
// take about 30: for the lean HTTP/1.1 server and transport (proxy/h1) and
// the handler's copy of an upstream's answer (proxy), which both do it for
// every field of every request.
package httpfield

import "golang.org/x/net/http/httpguts"

var tokenByte = func() (t [256]bool) {
	for c := range 128 {
		t[c] = httpguts.IsTokenRune(rune(c))
	}
	return t
}()

// Token reports whether c may stand in a token (RFC 9110), as
// httpguts.IsTokenRune does.
func Token(c byte) bool { return tokenByte[c] }

// ValidName is httpguts.ValidHeaderFieldName: a non-empty token.
func ValidName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !tokenByte[k[i]] {
			return false
		}
	}
	return true
}

// CanonicalName reports whether k is a field name that
// textproto.CanonicalMIMEHeaderKey returns as it is: a token, each letter
// upper case at the start and after a hyphen and lower case elsewhere.
func CanonicalName(k string) bool {
	if k == "" {
		return false
	}
	upper := true
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !tokenByte[c] || upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}
