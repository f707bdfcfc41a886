package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gateway key-digest prints what tenants.keys accepts in place of a key,
// from arguments or from stdin, and never the key; a config that holds
// digests only loads without the plain-key warning, one with a plain key
// gets it, naming the file.
func TestKeyDigestCommand(t *testing.T) {
	const digestA = "sha256:a4a6d307ad00fa67176e1099fdbc4f4a09bb527a7f24718a5030f2f173d11f7f" // printf sk-a | sha256sum
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"key-digest", "sk-a"}, &out, &errOut); code != 0 || out.String() != digestA+"\n" {
		t.Fatalf("key-digest sk-a: exit %d, output %q (%s), want %q", code, out.String(), errOut.String(), digestA)
	}

	stdin = strings.NewReader("sk-a\r\nsk-b\n")
	t.Cleanup(func() { stdin = os.Stdin })
	out.Reset()
	if code := run(context.Background(), []string{"key-digest"}, &out, &errOut); code != 0 {
		t.Fatalf("key-digest from stdin: exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || lines[0] != digestA || !strings.HasPrefix(lines[1], "sha256:") || strings.Contains(out.String(), "sk-") {
		t.Fatalf("key-digest from stdin: got %q, want two digests, the first %s", out.String(), digestA)
	}
	stdin = strings.NewReader("")
	if code := run(context.Background(), []string{"key-digest"}, &out, &errOut); code != 1 {
		t.Fatalf("key-digest with no key: exit %d, want 1", code)
	}

	dir := t.TempDir()
	for _, tt := range []struct {
		name, key, warning string
	}{
		{"digest.yaml", digestA, ""},
		{"plain.yaml", "sk-a", "warning: " + filepath.Join(dir, "plain.yaml") + ": tenants.keys: 1 API key(s) written in plain text"},
	} {
		path := filepath.Join(dir, tt.name)
		yaml := "tenants:\n  keys:\n    \"" + tt.key + "\": {tenant: acme}\nroutes:\n  - {name: r, upstream: \"http://127.0.0.1:9000\"}\n"
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		out.Reset()
		errOut.Reset()
		if code := run(context.Background(), []string{"check", "-config", path}, &out, &errOut); code != 0 {
			t.Fatalf("check %s: exit %d: %s", tt.name, code, errOut.String())
		}
		if got := strings.TrimSpace(errOut.String()); (tt.warning == "" && got != "") || !strings.HasPrefix(got, tt.warning) {
			t.Errorf("check %s warnings: got %q, want %q", tt.name, got, tt.warning)
		}
	}
}
