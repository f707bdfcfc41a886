package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
		"bad.yaml: routes[0].upstreams[0].weight: must be > 0 (to take a member out, remove it from the list), got -2",
		`bad.yaml: routes[0].upstreams[1].name: duplicate member name "a" (also upstreams[0])`,
		`bad.yaml: routes[0].upstreams[1].protocol: must be auto, http1, h2 or h2c, got "h3"`,
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("want %q in:\n%s", want, errOut.String())
		}
	}
}

// TestServePoolAcrossReloads: gateway serve ejects a failing member, shows
// it in /metrics, keeps it ejected across a reload that keeps the pool,
// probes members with an active check, and forgets the pool when a reload
// removes it.
func TestServePoolAcrossReloads(t *testing.T) {
	var aGot, bGot, probes atomic.Int64
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			probes.Add(1)
			return
		}
		aGot.Add(1)
	}))
	t.Cleanup(a.Close)
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		bGot.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(b.Close)
	const token = "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4"
	config := func(route string) string {
		return `server: {listen: "127.0.0.1:0"}
admin: {token: ` + token + `}
routes:
  - ` + route + "\n"
	}
	pool := func(weightA int) string {
		return fmt.Sprintf(`{name: api, match: {path_prefix: /}, health: {failures: 2, check: {path: /healthz, interval: 200ms, timeout: 100ms}},
     upstreams: [{name: a, url: %q, weight: %d}, {name: b, url: %q}]}`, a.URL, weightA, b.URL)
	}
	path := writeConfig(t, "gateway.yaml", config(pool(1)))
	g := startGateway(t, "gateway", path)
	adm := g.adminBase(t)
	c := newTestClient(t)
	for bGot.Load() < 2 {
		mustSend(t, c, "GET", g.base+"/x")
	}
	metricsText := func() []byte {
		code, text := adminDo(t, "GET", adm+"/metrics", token)
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		return text
	}
	text := metricsText()
	for _, s := range []struct {
		name, labels string
		want         float64
	}{
		{"gateway_pool_member_healthy", "route=api,member=b,state=ejected", 1},
		{"gateway_pool_member_healthy", "route=api,member=a,state=healthy", 1},
		{"gateway_pool_member_errors_total", "route=api,member=b", 2},
		{"gateway_pool_member_ejections_total", "route=api,member=b", 1},
	} {
		if got := scrapeValue(t, text, s.name, s.labels); got != s.want {
			t.Errorf("%s{%s}: got %v, want %v", s.name, s.labels, got, s.want)
		}
	}
	if got := scrapeValue(t, text, "gateway_pool_member_requests_total", "route=api,member=a"); got < 1 {
		t.Errorf("a's requests: got %v, want at least 1", got)
	}

	// A reload that keeps the pool (a's weight changes) keeps b ejected.
	from := g.logLen()
	if err := os.WriteFile(path, []byte(config(pool(3))), 0o644); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, from, regexp.MustCompile(`msg="config reloaded"`))
	before := bGot.Load()
	for range 10 {
		if r := mustSend(t, c, "GET", g.base+"/x"); r.status != http.StatusOK {
			t.Fatalf("after the reload: got %d, want 200 from a", r.status)
		}
	}
	if n := bGot.Load() - before; n != 0 {
		t.Errorf("b got %d requests after a reload that kept the pool: its ejection was forgotten", n)
	}
	if got := scrapeValue(t, metricsText(), "gateway_pool_member_healthy", "route=api,member=b,state=ejected"); got != 1 {
		t.Errorf("b after the reload: ejected %v, want 1", got)
	}
	// The active check probes a while serve runs.
	deadline := time.Now().Add(10 * time.Second)
	for probes.Load() == 0 && time.Now().Before(deadline) {
		mustSend(t, c, "GET", g.base+"/x") // something to do while the probes come
	}
	if probes.Load() == 0 {
		t.Error("no probe of a within 10s (interval 200ms)")
	}

	// A reload that removes the pool: its members leave /metrics.
	from = g.logLen()
	if err := os.WriteFile(path, []byte(config(fmt.Sprintf(`{name: api, match: {path_prefix: /}, upstream: %q}`, a.URL))), 0o644); err != nil {
		t.Fatal(err)
	}
	g.waitLog(t, from, regexp.MustCompile(`msg="config reloaded"`))
	mustSend(t, c, "GET", g.base+"/x")
	if strings.Contains(string(metricsText()), "gateway_pool_member_requests_total{") {
		t.Error("the removed pool's members are still in /metrics")
	}
}
