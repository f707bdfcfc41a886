package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// An admin token shorter than 32 characters can be guessed: refused at
// start, by check, and on a reload, which keeps the config in force. The
// error names the file and the place, and never shows the token.
func TestShortAdminTokenRefused(t *testing.T) {
	const long = "long-admin-token-4b9e07c2d1a5f36e8c0b"
	config := func(token string) string {
		return "server: {listen: \"127.0.0.1:0\"}\nadmin: {listen: \"127.0.0.1:0\", token: " + token + "}\n" +
			"routes:\n  - {name: api, upstream: \"http://127.0.0.1:9\"}\n"
	}
	const short = "Zq8s3"
	want := "admin.token: must be at least 32 characters, got 5"

	path := writePressureConfig(t, config(short))
	g, exited := serveOutcome(t, "start", path)
	if !exited || g.code != 1 || !strings.Contains(g.output(), path+": "+want) || strings.Contains(g.output(), short) {
		t.Fatalf("start with a short token: exited %v code %d, want exit 1 naming %q and never the token:\n%s", exited, g.code, path+": "+want, g.output())
	}

	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "-config", path}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), path+": "+want) || strings.Contains(errOut.String(), short) {
		t.Fatalf("check: exited %d, stderr:\n%s\nwant 1 and %q", code, errOut.String(), path+": "+want)
	}

	if err := os.WriteFile(path, []byte(config(long)), 0o644); err != nil {
		t.Fatal(err)
	}
	g = startGateway(t, "reload", path)
	adm := g.adminBase(t)
	digest := func() string {
		code, body := adminDo(t, "GET", adm+"/admin/config", long)
		var v struct{ Digest string }
		if code != http.StatusOK || json.Unmarshal(body, &v) != nil || v.Digest == "" {
			t.Fatalf("/admin/config: got %d %s", code, body)
		}
		return v.Digest
	}
	before := digest()
	if err := os.WriteFile(path, []byte(config(short)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body := adminDo(t, "POST", adm+"/admin/reload", long)
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), want) || strings.Contains(string(body), short) {
		t.Fatalf("reload with a short token: got %d %s, want 422 naming %q", code, body, want)
	}
	if after := digest(); after != before {
		t.Fatalf("digest after the refused reload: got %s, want %s (the config in force)", after, before)
	}
	if code, _ := adminDo(t, "GET", adm+"/admin/config", long+"x"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong token: got %d, want 401", code)
	}
	_, text := adminDo(t, "GET", adm+"/metrics", long)
	for _, line := range []string{`gateway_admin_auth_failures_total{result="wrong"} 1`, `gateway_admin_auth_failures_total{result="throttled"} 0`} {
		if !strings.Contains(string(text), line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}
