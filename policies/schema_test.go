package policies

import "testing"

func TestSchemaWritesListsMapsAndSections(t *testing.T) {
	got := map[string]bool{} // path -> section
	for _, k := range Schema() {
		if _, dup := got[k.Path]; dup {
			t.Errorf("%s listed twice", k.Path)
		}
		got[k.Path] = k.Section
	}
	for _, c := range []struct {
		path    string
		section bool
	}{
		{"server", true},
		{"server.listen", false},
		{"redis.sentinel", true},
		{"redis.sentinel.master_name", false},
		{"routes", true},
		{"routes[].match.headers", false}, // a map of scalars holds a value
		{"routes[].idempotency", true},    // a pointer to a block
		{"routes[].idempotency.max_wait", false},
		{"policies.*.plans", false},
		{"tenants.keys.*.plan", false},
		{"models.*.prefixes", false},
		{"mode", false},
	} {
		section, ok := got[c.path]
		if !ok {
			t.Errorf("%s: missing from the schema", c.path)
			continue
		}
		if section != c.section {
			t.Errorf("%s: section %v, want %v", c.path, section, c.section)
		}
	}
	for _, absent := range []string{"routes[]", "policies.*", "routes.match"} {
		if _, ok := got[absent]; ok {
			t.Errorf("%s: listed, but it is no key", absent)
		}
	}
}
