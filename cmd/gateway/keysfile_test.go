package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/ratelimit-gateway/gateway/policies"
)

// TestServeKeysFile: a gateway whose tenants are in a keys file knows
// them over HTTP, takes a key added to the file without a restart, and
// keeps the last good keys when the file turns bad, logging file and line.
func TestServeKeysFile(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "tenants.keys")
	writeKeys := func(content string) {
		t.Helper()
		tmp := filepath.Join(t.TempDir(), "tenants.keys")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, keys); err != nil {
			t.Fatal(err)
		}
	}
	writeKeys(policies.KeyDigest("sk-one") + " acme\n")
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(`server: {listen: "127.0.0.1:0"}
admin: {listen: ""}
tenants: {keys_file: tenants.keys}
routes:
  - {name: echo, match: {path_prefix: /}, upstream: "builtin:echo", policies: [per-tenant]}
policies:
  per-tenant: {key: tenant, rate: 1000, per: 1s, on_missing_key: reject}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, "gateway", cfg)
	c := newTestClient(t)
	status := func(key string) int { return mustSend(t, c, "GET", g.base+"/x", "X-API-Key", key).status }
	if got := status("sk-one"); got != 200 {
		t.Fatalf("a key of the keys file: got %d, want 200", got)
	}
	if got := status("sk-two"); got != 401 {
		t.Fatalf("a key not in it: got %d, want 401", got)
	}

	from := g.logLen()
	writeKeys(policies.KeyDigest("sk-one") + " acme\n" + policies.KeyDigest("sk-two") + " globex\n")
	g.waitLog(t, from, regexp.MustCompile(`msg="config reloaded"`))
	if got := status("sk-two"); got != 200 {
		t.Fatalf("a key added to the keys file: got %d, want 200 after the reload", got)
	}

	from = g.logLen()
	writeKeys(policies.KeyDigest("sk-three") + " acme\nsk-plain-key globex\n")
	g.waitLog(t, from, regexp.MustCompile(regexp.QuoteMeta(keys)+`: line 2: the first field must be a key's digest`))
	for key, want := range map[string]int{"sk-one": 200, "sk-two": 200, "sk-three": 401} {
		if got := status(key); got != want {
			t.Errorf("after a bad keys file, %s: got %d, want %d (the last good keys)", key, got, want)
		}
	}
	if out := g.output(); regexp.MustCompile(`sk-plain-key`).MatchString(out) {
		t.Errorf("the log repeats the plain key written in the keys file:\n%s", out)
	}
}
