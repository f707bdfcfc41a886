package policies

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestKeyDigest(t *testing.T) {
	sum := sha256.Sum256([]byte("sk-demo-free"))
	if got, want := KeyDigest("sk-demo-free"), "sha256:"+hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("KeyDigest: got %q, want %q", got, want)
	}
}

// An API key may be written in tenants.keys as its digest: the key is then
// known, a plain entry beside it too, and the digest itself is no key. A
// plain entry is a warning that names the file; a malformed digest or the
// same key twice is an error.
func TestTenantKeysAsDigests(t *testing.T) {
	yaml := `
tenants:
  keys:
    "` + KeyDigest("sk-hidden") + `": {tenant: hidden, plan: pro}
    "` + strings.ToUpper(strings.TrimPrefix(KeyDigest("sk-upper"), DigestPrefix)) + `": {tenant: wrong}
    sk-plain: {tenant: plain}
routes:
  - {name: r, upstream: "http://127.0.0.1:9000"}
`
	// The upper-case entry above is not written as a digest (no prefix):
	// it is a plain key of 64 characters.
	snap := mustParse(t, yaml)
	for _, tt := range []struct {
		key    string
		tenant string // "" for none
	}{
		{"sk-hidden", "hidden"},
		{"sk-plain", "plain"},
		{KeyDigest("sk-hidden"), ""}, // the digest grants nothing
		{strings.TrimPrefix(KeyDigest("sk-hidden"), DigestPrefix), ""},
		{"sk-upper", ""},
		{"sk-unknown", ""},
		{"", ""},
	} {
		got, ok := snap.Tenants.Lookup(tt.key)
		if ok != (tt.tenant != "") || got.Name != tt.tenant {
			t.Errorf("Lookup(%q): got %+v %v, want tenant %q", tt.key, got, ok, tt.tenant)
		}
	}
	if got, _ := snap.Tenants.Lookup("sk-hidden"); got.Plan != "pro" {
		t.Errorf("plan of the digest entry: got %q, want pro", got.Plan)
	}
	if !snap.Tenants.HasTenant("hidden") || !snap.Tenants.HasTenant("plain") || snap.Tenants.HasTenant("nobody") {
		t.Errorf("HasTenant: hidden %v, plain %v, nobody %v; want true, true, false",
			snap.Tenants.HasTenant("hidden"), snap.Tenants.HasTenant("plain"), snap.Tenants.HasTenant("nobody"))
	}
	want := `gateway.yaml: tenants.keys: 2 API key(s) written in plain text: whoever reads this file holds them; ` +
		`write each as its digest (gateway key-digest KEY prints "sha256:<hex>")`
	if len(snap.Warnings) != 1 || snap.Warnings[0].Error() != want {
		t.Errorf("warnings: got %v, want [%s]", snap.Warnings, want)
	}

	onlyDigests := mustParse(t, "tenants:\n  keys:\n    \""+KeyDigest("k")+"\": {tenant: a}\nroutes:\n  - {name: r, upstream: \"http://127.0.0.1:9000\"}\n")
	if len(onlyDigests.Warnings) != 0 {
		t.Errorf("warnings of a file with digests only: got %v, want none", onlyDigests.Warnings)
	}
}

func TestTenantKeyDigestErrors(t *testing.T) {
	base := "routes:\n  - {name: r, upstream: \"http://127.0.0.1:9000\"}\ntenants:\n  keys:\n"
	upper := DigestPrefix + strings.ToUpper(strings.TrimPrefix(KeyDigest("k"), DigestPrefix))
	for _, tt := range []struct {
		name, keys, want string
	}{
		{"short digest", `    "sha256:abcd": {tenant: a}`,
			`gateway.yaml: tenants.keys.sha256:abcd: a key written as its digest is "sha256:" and 64 hex digits (gateway key-digest prints it)`},
		{"not hex", `    "sha256:` + strings.Repeat("z", 64) + `": {tenant: a}`,
			`is "sha256:" and 64 hex digits`},
		{"plain and digest", "    k: {tenant: a}\n    \"" + KeyDigest("k") + `": {tenant: b}`,
			"gateway.yaml: tenants.keys: the API key " + KeyDigest("k") + " is listed twice"},
		{"digest in two cases", `    "` + KeyDigest("k") + "\": {tenant: a}\n    \"" + upper + `": {tenant: b}`,
			"gateway.yaml: tenants.keys: the API key " + KeyDigest("k") + " is listed twice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lines := errorLines(t, base+tt.keys+"\n")
			found := false
			for _, l := range lines {
				found = found || strings.Contains(l, tt.want)
				if tt.name == "plain and digest" && strings.Contains(l, "k:") {
					t.Errorf("an error repeats the plain key: %q", l)
				}
			}
			if !found {
				t.Errorf("errors: got\n  %s\nwant a line containing %q", strings.Join(lines, "\n  "), tt.want)
			}
		})
	}
}

// An error about a tenants.keys entry written in plain text names it by the
// start of its digest, never by the key.
func TestTenantKeyErrorsDoNotRepeatTheKey(t *testing.T) {
	yaml := "routes:\n  - {name: r, upstream: \"http://127.0.0.1:9000\"}\ntenants:\n  keys:\n" +
		"    sk-s3cret-1: {tenat: a}\n    sk-s3cret-2: {plan: free}\n    sk-s3cret-3: {tenant: [a]}\n"
	lines := errorLines(t, yaml)
	for _, want := range []string{
		"gateway.yaml: tenants.keys." + keyEntryPlace("sk-s3cret-1") + ".tenat: unknown key",
		"gateway.yaml: tenants.keys." + keyEntryPlace("sk-s3cret-2") + ".tenant: required",
		"gateway.yaml: tenants.keys." + keyEntryPlace("sk-s3cret-3") + ".tenant",
	} {
		found := false
		for _, l := range lines {
			found = found || strings.HasPrefix(l, want)
		}
		if !found {
			t.Errorf("errors: got\n  %s\nwant a line starting %q", strings.Join(lines, "\n  "), want)
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "s3cret") {
			t.Errorf("an error repeats a key: %q", l)
		}
	}
}
