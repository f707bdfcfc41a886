package llm

import (
	"strings"
	"testing"
)

// FuzzHasLowerPrefix holds hasLowerPrefix to its definition.
func FuzzHasLowerPrefix(f *testing.F) {
	for _, s := range [][2]string{{"gpt-4o-mini", "GPT-4o"}, {"gpt-4o", "gpt-4o-mini"}, {"abk", "ab\u212a"}, {"ab", "ab\u212a"}, {"", ""}, {"İx", "İ"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, p string) {
		name = strings.ToLower(name) // as For calls it
		if got, want := hasLowerPrefix(name, p), strings.HasPrefix(name, strings.ToLower(p)); got != want {
			t.Errorf("hasLowerPrefix(%q, %q) = %v, want %v", name, p, got, want)
		}
	})
}
