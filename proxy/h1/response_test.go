package h1

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestAppendFieldAsNetHTTP checks appendField's fast path against what
// net/http's Header.Write does to a value: line breaks made spaces, then
// spaces, tabs and line breaks trimmed off both ends.
func TestAppendFieldAsNetHTTP(t *testing.T) {
	netHTTP := func(v string) string {
		v = strings.NewReplacer("\n", " ", "\r", " ").Replace(v) // net/http's headerNewlineToSpace
		return strings.Trim(v, " \t\r\n")
	}
	values := []string{"", " ", "\t", "\r\n", "a", " a", "a ", "\ta\t", "a b", "a\rb", "a\nb", "a\r\nb",
		"\r\na", "a\r\n", "59", "application/json; charset=utf-8", " \r\n \t", "x\x00y", "\x7f", "é",
		// Long enough for the vectorized scans.
		"Sun, 06 Dec 2026 16:00:00 GMT", "a long value with a\nline break inside", "a long value with a\rreturn inside",
		"a long value ending in a line break\n", strings.Repeat("x", 40) + "\r" + strings.Repeat("y", 40)}
	// And every two-byte value over the bytes that matter.
	for _, a := range " \t\r\nax" {
		for _, b := range " \t\r\nax" {
			values = append(values, string(a)+string(b))
		}
	}
	for _, v := range values {
		got := string(appendField(nil, "K", v))
		want := "K: " + netHTTP(v) + "\r\n"
		if got != want {
			t.Errorf("appendField(%q): got %q, want %q", v, got, want)
		}
	}
}

// TestSortFields checks the insertion sort against slices.SortFunc at
// every size up to past its switch to slices.SortFunc.
func TestSortFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 40 {
		for range 20 {
			fields := make([]field, n)
			for i := range fields {
				fields[i].name = fmt.Sprintf("X-%c%d", 'A'+rng.IntN(6), rng.IntN(1000))
			}
			want := slices.Clone(fields)
			slices.SortFunc(want, func(a, b field) int { return strings.Compare(a.name, b.name) })
			sortFields(fields)
			for i := range fields {
				if fields[i].name != want[i].name {
					t.Fatalf("n=%d: got %v, want %v", n, fields, want)
				}
			}
		}
	}
}
