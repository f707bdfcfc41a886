package limiter

import (
	"fmt"
	"slices"
	"strings"
)

// FailureModes lists every failure mode.
var FailureModes = []FailureMode{FailAllow, FailDeny, FailLocal}

// UnmarshalText sets a to the algorithm named by text, one of Algorithms;
// empty text leaves the zero value, which a config reads as its default.
func (a *Algorithm) UnmarshalText(text []byte) error { return UnmarshalName(a, Algorithms, text) }

// MarshalText returns the algorithm's name.
func (a Algorithm) MarshalText() ([]byte, error) { return []byte(a), nil }

// UnmarshalText sets m to the failure mode named by text, one of
// FailureModes; empty text leaves the zero value.
func (m *FailureMode) UnmarshalText(text []byte) error { return UnmarshalName(m, FailureModes, text) }

// MarshalText returns the failure mode's name.
func (m FailureMode) MarshalText() ([]byte, error) { return []byte(m), nil }

// UnmarshalName sets *v to text when it is empty or one of names, and
// otherwise says which names it may be ("must be a, b or c, got ..."): the
// UnmarshalText of a type whose values are a closed list of names.
func UnmarshalName[T ~string](v *T, names []T, text []byte) error {
	if s := T(text); s == "" || slices.Contains(names, s) {
		*v = s
		return nil
	}
	return fmt.Errorf("must be %s, got %q", oneOf(names), text)
}

// oneOf lists names as "a, b or c".
func oneOf[T ~string](names []T) string {
	var b strings.Builder
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(string(n))
	}
	return b.String()
}
