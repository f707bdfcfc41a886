package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

const poolConfig = `
routes:
  - name: api
    match: {path_prefix: /api/}
    upstreams:
      - {name: a, url: "http://10.0.0.1:8080"}
      - {name: b, url: "http://10.0.0.2:8080", weight: 2}
      - {name: c, url: "builtin:echo"}
    balance: hash
    hash_key: header:X-User
    retry: {attempts: 3}
    health: {check: {path: /healthz}}
`

// gateway check and gateway explain name a pool's members, their health
// and, for balance: hash, where the request goes.
func TestCheckAndExplainShowAPool(t *testing.T) {
	path := writeConfig(t, "pool.yaml", poolConfig)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "-config", path}, &out, &errOut); code != 0 {
		t.Fatalf("check: exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{
		"pool: a, b, c",
		"route api: pool of a http://10.0.0.1:8080 (weight 1), b http://10.0.0.2:8080 (weight 2), c builtin:echo (weight 1); hash by header:X-User",
		"probes /healthz every 10s (down after 3, back after 2); retries when safe, 3 attempts at most, on [502 503]",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check: want %q in:\n%s", want, out.String())
		}
	}
	code, stdout, stderr := runExplain(t, "-config", path, "-H", "X-User: u1", "/api/x")
	if code != 0 {
		t.Fatalf("explain: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"→ pool of 3 members → /api/x",
		"pool:          hash, retries on another member when safe (3 attempts at most)",
		"member:        a http://10.0.0.1:8080 (weight 1, auto): healthy",
		"member:        c builtin:echo (weight 1, auto): healthy",
		"hash:          header:X-User of this request → ",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("explain: want %q in:\n%s", want, stdout)
		}
	}
	// The same key, the same member, every time; another key may differ.
	_, again, _ := runExplain(t, "-config", path, "-H", "X-User: u1", "-o", "json", "/api/x")
	rep := decodeExplain(t, again)
	if rep.Route == nil || rep.Route.Pool == nil || rep.Route.Pool.HashPick == "" || len(rep.Route.Pool.Members) != 3 {
		t.Fatalf("explain JSON: got route %+v, want a pool of 3 with a hash pick", rep.Route)
	}
	if !strings.Contains(stdout, "→ "+rep.Route.Pool.HashPick+" (while every member is in)") {
		t.Errorf("text and JSON disagree on the hash pick %q:\n%s", rep.Route.Pool.HashPick, stdout)
	}
	_, none, _ := runExplain(t, "-config", path, "/api/x")
	if !strings.Contains(none, "this request lacks header:X-User: balanced in turn") {
		t.Errorf("explain without the key:\n%s", none)
	}
}

// A pool's mistakes are errors with the file and the place.
func TestCheckRefusesABadPool(t *testing.T) {
	path := writeConfig(t, "bad.yaml", `
routes:
  - name: api
    upstream: http://10.0.0.9
    upstreams:
      - {name: a, url: "http://10.0.0.1:8080", weight: -2}
      - {name: a, url: "http://10.0.0.2:8080", protocol: h3}
`)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "-config", path}, &out, &errOut); code != 1 {
		t.Fatalf("check: exit %d, want 1", code)
	}
	for _, want := range []string{
		"bad.yaml: routes[0].upstream: set upstream or upstreams, not both",
		"bad.yaml: routes[0].upstreams[0].weight: must be > 0, got -2",
		`bad.yaml: routes[0].upstreams[1].name: duplicate member name "a" (also upstreams[0])`,
		`bad.yaml: routes[0].upstreams[1].protocol: must be auto, http1, h2 or h2c, got "h3"`,
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("want %q in:\n%s", want, errOut.String())
		}
	}
}
