package main

import (
	"net/http"
	"os"
	"strings"
	"testing"
)

// An upstream URL that fails validation is echoed without its user info or
// query values: in the start error, in POST /admin/reload's 422 body, and in
// the log of the failed reload.
func TestRejectedUpstreamIsNotEchoed(t *testing.T) {
	const secretUpstreams = `
  - {name: userinfo, upstream: "http://user:pw-s3cret@127.0.0.1:9"}
  - {name: query, upstream: "http://127.0.0.1:9/v1?token=tok-s3cret"}
`
	good := "server: {listen: \"127.0.0.1:0\"}\nadmin: {token: t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4}\nroutes:\n  - {name: api, upstream: \"http://127.0.0.1:9\"}\n"
	bad := good + secretUpstreams

	g, exited := serveOutcome(t, "start", writePressureConfig(t, bad))
	if !exited || g.code != 1 {
		t.Fatalf("start with a bad upstream: exited %v code %d, want exit 1:\n%s", exited, g.code, g.output())
	}
	for _, want := range []string{"routes[1].upstream", "routes[2].upstream", "REDACTED@127.0.0.1:9", "token=REDACTED"} {
		if out := g.output(); !strings.Contains(out, want) {
			t.Errorf("start error lacks %q:\n%s", want, out)
		}
	}
	if out := g.output(); strings.Contains(out, "s3cret") {
		t.Errorf("start error echoes a secret:\n%s", out)
	}

	path := writePressureConfig(t, good)
	g = startGateway(t, "reload", path)
	adm := g.adminBase(t)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body := adminDo(t, "POST", adm+"/admin/reload", "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4")
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(body), "routes[1].upstream") ||
		!strings.Contains(string(body), "REDACTED") || strings.Contains(string(body), "s3cret") {
		t.Errorf("reload: got %d %s, want 422 naming routes[1].upstream with the URLs redacted", code, body)
	}
	if out := g.output(); strings.Contains(out, "s3cret") {
		t.Errorf("the gateway's log echoes a secret:\n%s", out)
	}
}
