package docs

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/ratelimit-gateway/gateway/policies"
)

// documentedKey is one key a reference table lists, and where.
type documentedKey struct {
	path  string // normalised like policies.SchemaKey.Path
	place string // file:line
}

var (
	// tableHeader matches the first cell of a reference table's header:
	// "key (under `PREFIX`)" or "key (top level)".
	tableHeader = regexp.MustCompile("^\\|\\s*key \\((?:under `([^`]+)`|top level)\\)\\s*\\|")
	// mapEntry is a map entry written for the reader: <name>, <model>, <key>.
	mapEntry = regexp.MustCompile(`<[^>.]+>`)
	keyName  = regexp.MustCompile("^[a-z0-9_]+(\\.(<[^>.]+>|[a-z0-9_]+))*$")
)

// documentedKeys reads every reference table of the pages, by the
// convention written at the top of docs/configuration.md.
func documentedKeys(t *testing.T, pages []page) []documentedKey {
	t.Helper()
	var out []documentedKey
	for _, p := range pages {
		prefix, inTable := "", false
		for _, l := range p.lines {
			if l.inFence() || !strings.HasPrefix(l.text, "|") {
				inTable = false
				continue
			}
			if m := tableHeader.FindStringSubmatch(l.text); m != nil {
				prefix, inTable = m[1], true
				continue
			}
			if !inTable || strings.HasPrefix(l.text, "| ---") {
				continue
			}
			cells := strings.Split(l.text, "|")
			if len(cells) < 3 {
				continue
			}
			place := fmt.Sprintf("%s:%d", p.path, l.n)
			names := codeSpan.FindAllStringSubmatch(cells[1], -1)
			if len(names) == 0 {
				t.Errorf("%s: a row of a reference table names no key in backticks: %s", place, l.text)
			}
			for _, m := range names {
				name := m[1] + m[2]
				if !keyName.MatchString(name) {
					t.Errorf("%s: %q is not a key path (lower-case names joined by \".\", <name> for a map entry)", place, name)
					continue
				}
				full := name
				if prefix != "" {
					full = prefix + "." + name
				}
				out = append(out, documentedKey{path: mapEntry.ReplaceAllString(full, "*"), place: place})
			}
		}
	}
	return out
}

// TestConfigKeysAreDocumented: every key of the schema that holds a value
// is listed in a reference table under docs/, and every key listed is one
// the schema has.
func TestConfigKeysAreDocumented(t *testing.T) {
	var docs []page
	for _, p := range docPages(t) {
		if strings.HasPrefix(p.path, "docs/") {
			docs = append(docs, p)
		}
	}
	documented := documentedKeys(t, docs)
	if len(documented) == 0 {
		t.Fatal("no reference table found under docs/: see the convention at the top of docs/configuration.md")
	}
	schema := map[string]bool{}
	for _, k := range policies.Schema() {
		schema[k.Path] = true
	}
	listed := map[string]bool{}
	for _, d := range documented {
		listed[d.path] = true
		if !schema[d.path] {
			t.Errorf("%s: documents %s, which is not a key of the config schema (policies.Config)", d.place, d.path)
		}
	}
	for _, k := range policies.Schema() {
		if !k.Section && !listed[k.Path] {
			t.Errorf("config key %s is not documented: add a row to a reference table under docs/ (see the top of docs/configuration.md)", k.Path)
		}
	}
}

// TestReferenceTablesAreRead keeps the reader of the convention honest: a
// table with a prefix, a top-level table and a map entry are read as the
// convention says, and other tables are not.
func TestReferenceTablesAreRead(t *testing.T) {
	p := page{path: "x.md", lines: []line{
		{n: 1, fence: "-", text: "| key (under `policies.<name>`) | default | meaning |"},
		{n: 2, fence: "-", text: "| --- | --- | --- |"},
		{n: 3, fence: "-", text: "| `rate`, `per` | `1s` | see `burst` |"},
		{n: 4, fence: "-", text: ""},
		{n: 5, fence: "-", text: "| key (top level) | default | meaning |"},
		{n: 6, fence: "-", text: "| `mode` | `enforce` | |"},
		{n: 7, fence: "-", text: "| key (under `tenants`) | default | meaning |"},
		{n: 8, fence: "-", text: "| `keys.<key>.plan` | | |"},
		{n: 9, fence: "-", text: ""},
		{n: 10, fence: "-", text: "| key part | shown as |"},
		{n: 11, fence: "-", text: "| `tenant` | `acme` |"},
	}}
	var got []string
	for _, d := range documentedKeys(t, []page{p}) {
		got = append(got, d.path+"@"+d.place)
	}
	want := []string{"policies.*.rate@x.md:3", "policies.*.per@x.md:3", "mode@x.md:6", "tenants.keys.*.plan@x.md:8"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
}
