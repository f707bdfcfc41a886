package llm

import (
	"encoding/json"
	"strings"
	"testing"
)

// validJSON agrees with json.Valid on every document, valid or not.
func TestValidJSONMatchesEncodingJSON(t *testing.T) {
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, doc := range validSeeds() {
		if got, want := validJSON([]byte(doc)), json.Valid([]byte(doc)); got != want {
			t.Errorf("%.60q: got %v, want %v (json.Valid)", doc, got, want)
		}
	}
	// The nesting limit: json.Valid takes 10,000 levels, not one more.
	for _, n := range []int{maxNesting, maxNesting + 1} {
		doc := []byte(deep(n))
		if got, want := validJSON(doc), json.Valid(doc); got != want {
			t.Errorf("%d levels: got %v, want %v (json.Valid)", n, got, want)
		}
	}
	if !validJSON([]byte(deep(maxNesting))) {
		t.Error("10,000 levels: got invalid")
	}
}

func validSeeds() []string {
	return []string{
		``, ` `, `{}`, `[]`, `{ }`, `[ ]`, ` {} `, `{}{}`, `{},`, `{`, `}`, `[`, `]`, `[}`, `{]`,
		`null`, `nul`, `nulls`, `true`, `tru`, `false`, `fals`, `truefalse`, `"x"`, `"`, `"\"`, `"\\"`,
		`"\/\b\f\n\r\t"`, `"\u00e9"`, `"\u00E9"`, `"\u00g9"`, `"\u00e"`, `"\x"`, `"a` + "\x01" + `b"`, "\"\x7f\xff\xfe\"",
		`0`, `-0`, `-`, `01`, `1.`, `1.5`, `.5`, `+1`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `-1.5e10`, `1.5.5`, `2x`, `1 2`,
		`{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `{"a":[1,2,{"b":null}],"c":"d"}`,
		`[1,2]`, `[1,,2]`, `[,1]`, `[1 2]`, `[1,]`, "[\t1\r\n,\n2 ]", `{"a":{"b":{"c":[]}}}`, `{"":""}`,
		`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello there, mock!"}],"max_tokens":16}`,
		`{"usage":{"prompt_tokens":11,"completion_tokens":16,"total_tokens":27}}`, "\v{}", "{}\x00",
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, doc := range validSeeds() {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if got, want := validJSON(doc), json.Valid(doc); got != want {
			t.Fatalf("%q: got %v, want %v (json.Valid)", doc, got, want)
		}
	})
}
