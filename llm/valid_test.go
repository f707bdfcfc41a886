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

// validMembers is validJSON, and finds an object's members as
// appendMembers does.
func TestValidMembers(t *testing.T) {
	for _, doc := range validSeeds() {
		checkMembers(t, []byte(doc))
	}
	checkMembers(t, []byte(`{"a\u0041":1, "b" : [ {"c":2} , "}" ] ,"a\"":{},"d":null,"e":"x\\"}`))
}

func checkMembers(t *testing.T, doc []byte) {
	t.Helper()
	ms, ok := validMembers(doc, nil)
	if ok != validJSON(doc) {
		t.Fatalf("%q: validMembers says %v, validJSON %v", doc, ok, !ok)
	}
	open := skipSpace(doc, 0)
	if !ok || doc[open] != '{' {
		if ok && len(ms) > 0 {
			t.Fatalf("%q: not an object, got members %v", doc, ms)
		}
		return
	}
	want := appendMembers(nil, doc, open)
	if len(ms) != len(want) {
		t.Fatalf("%q: got %d members, want %d", doc, len(ms), len(want))
	}
	for i := range ms {
		if string(ms[i].key) != string(want[i].key) || ms[i].val != want[i].val || ms[i].end != want[i].end {
			t.Fatalf("%q: member %d: got %q %d:%d, want %q %d:%d", doc, i,
				ms[i].key, ms[i].val, ms[i].end, want[i].key, want[i].val, want[i].end)
		}
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
		checkMembers(t, doc)
	})
}

// TestValidStringEveryByte puts every byte, and every escape's start, at
// every offset of an eight-byte word in strings of every length to 24, and
// compares validString with a byte-by-byte scan.
func TestValidStringEveryByte(t *testing.T) {
	byteByByte := func(b []byte) int {
		for i := 1; i < len(b); i++ {
			switch c := b[i]; {
			case c == '"':
				return i + 1
			case c < 0x20:
				return -1
			case c == '\\':
				i++
				if i >= len(b) {
					return -1
				}
				switch b[i] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				case 'u':
					if i+4 >= len(b) {
						return -1
					}
					for _, h := range b[i+1 : i+5] {
						if !isHex(h) {
							return -1
						}
					}
					i += 4
				default:
					return -1
				}
			}
		}
		return -1
	}
	var inserts [][]byte
	for c := range 256 {
		inserts = append(inserts, []byte{byte(c)})
	}
	for _, e := range []string{`\"`, `\\`, `\n`, `\u00e9`, `\u00g9`, `\u00e`, `\x`, `\`} {
		inserts = append(inserts, []byte(e))
	}
	for n := range 24 {
		for at := 0; at <= n; at++ {
			for _, ins := range inserts {
				doc := []byte(`"` + strings.Repeat("a", at))
				doc = append(doc, ins...)
				doc = append(doc, strings.Repeat("é", (n-at)/2)...)
				for _, tail := range []string{`"`, `"}`, `", "x": "yyyyyyyyy"}`, ``} {
					d := append(append([]byte(nil), doc...), tail...)
					if got, want := validString(d, 0), byteByByte(d); got != want {
						t.Fatalf("%q: got %d, want %d", d, got, want)
					}
				}
			}
		}
	}
}
