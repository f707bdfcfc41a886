package httpfield

import (
	"net/textproto"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// The table's answers against httpguts' for every byte, alone and inside
// a name, and for names with UTF-8; CanonicalName's against net/textproto's
// canonical form.
func TestNamesAsHttpguts(t *testing.T) {
	names := []string{"", "Content-Type", "X-A_b.c~d!#$%&'*+^`|", "é", "Aé", "a b", "a:b", "a\x00", "\xff", "\xc3\xa9"}
	for c := range 256 {
		names = append(names, string([]byte{byte(c)}), "X-"+string([]byte{byte(c)})+"-Y")
		if got, want := Token(byte(c)), c < 128 && httpguts.IsTokenRune(rune(c)); got != want {
			t.Errorf("Token(%#x): got %v, want %v", c, got, want)
		}
	}
	names = append(names, "content-type", "Content-type", "CONTENT-TYPE", "X-Api-Key", "X-API-Key", "Www-Authenticate", "A-", "-a", "A--B", "a1-B2", "Etag", "ETag")
	for _, k := range names {
		if got, want := ValidName(k), httpguts.ValidHeaderFieldName(k); got != want {
			t.Errorf("ValidName(%q): got %v, want %v", k, got, want)
		}
		// A name CanonicalMIMEHeaderKey leaves as it is, and a token.
		want := httpguts.ValidHeaderFieldName(k) && textproto.CanonicalMIMEHeaderKey(k) == k
		if got := CanonicalName(k); got != want {
			t.Errorf("CanonicalName(%q): got %v, want %v", k, got, want)
		}
	}
}
