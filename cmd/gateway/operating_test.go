package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

var adminLine = regexp.MustCompile(`admin listening" addr=(\S+)`)

// adminBase is the admin listener's URL, from the gateway's log.
func (g *gateway) adminBase(t *testing.T) string {
	t.Helper()
	return "http://" + g.waitLog(t, 0, adminLine)[1]
}

// adminDo sends method to the admin listener with token ("" for none).
func adminDo(t *testing.T, method, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// scrapeValue returns the value of the series name{labels} ("k=v,k=v") in
// the exposition text, failing when it is missing.
func scrapeValue(t *testing.T, text []byte, name, labels string) float64 {
	t.Helper()
	v, ok := scrapeLookup(t, text, name, labels)
	if !ok {
		t.Fatalf("no series %s{%s} in /metrics", name, labels)
	}
	return v
}

// scrapeLookup is scrapeValue that reports a missing series as !ok.
func scrapeLookup(t *testing.T, text []byte, name, labels string) (float64, bool) {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(text)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	want := map[string]string{}
	if labels != "" {
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			want[k] = v
		}
	}
	for _, m := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, lp := range m.GetLabel() {
			got[lp.GetName()] = lp.GetValue()
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

const operatingConfig = `
server: {listen: "127.0.0.1:0"}
admin: {token: t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4}
log: {access: true}
routes:
  - name: api
    match: {path_prefix: /}
    upstream: UPSTREAM
    policies: [trial, per-ip]
policies:
  trial: {key: ip, rate: 1, per: 1h, mode: shadow}
  per-ip: {key: ip, rate: 3, per: 1h}
`

// The operator's tour through "gateway serve": a known sequence of
// requests, then exact metric values parsed from /metrics, the token on
// the admin API, a key's state and its reset, a reload, and /readyz
// flipping the moment a drain starts while a request is still in flight.
func TestOperatingTour(t *testing.T) {
	hold := make(chan struct{})
	arrived := make(chan struct{}, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			<-hold
		}
	}))
	t.Cleanup(up.Close)
	path := writePressureConfig(t, strings.Replace(operatingConfig, "UPSTREAM", up.URL, 1))
	g := startGateway(t, "gw", path)
	adm := g.adminBase(t)
	c := newTestClient(t)

	var statuses []int
	for range 5 {
		statuses = append(statuses, mustSend(t, c, "GET", g.base+"/x").status)
	}
	if fmt.Sprint(statuses) != "[200 200 200 429 429]" {
		t.Fatalf("statuses %v, want 3 × 200 then 429s: the shadow policy (1/h) must not block", statuses)
	}

	if code, _ := adminDo(t, "GET", adm+"/metrics", ""); code != http.StatusUnauthorized {
		t.Fatalf("/metrics without the token: %d, want 401", code)
	}
	if code, _ := adminDo(t, "GET", adm+"/admin/config", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("/admin/config with a wrong token: %d, want 401", code)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := adminDo(t, "GET", adm+p, ""); code != http.StatusOK {
			t.Fatalf("%s: %d %s, want 200 without a token", p, code, body)
		}
	}
	code, text := adminDo(t, "GET", adm+"/metrics", "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"gateway_requests_total", "route=api,outcome=allowed", 1},
		{"gateway_requests_total", "route=api,outcome=shadow_limited", 2},
		{"gateway_requests_total", "route=api,outcome=limited", 2},
		{"gateway_policy_decisions_total", "route=api,policy=trial,outcome=allowed", 1},
		{"gateway_policy_decisions_total", "route=api,policy=trial,outcome=shadow_limited", 4},
		{"gateway_policy_decisions_total", "route=api,policy=per-ip,outcome=allowed", 3},
		{"gateway_policy_decisions_total", "route=api,policy=per-ip,outcome=limited", 2},
		{"gateway_upstream_responses_total", "route=api,class=2xx", 3},
		{"gateway_upstream_duration_seconds", "route=api", 3},
		{"gateway_decision_duration_seconds", "backend=local", 5},
		{"gateway_requests_in_flight", "", 0},
		{"gateway_local_buckets", "", 2},
		{"gateway_config_reloads_total", "result=success", 0},
	} {
		if got := scrapeValue(t, text, c.name, c.labels); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, secret := range []string{"t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4", "127.0.0.1/32"} {
		if strings.Contains(string(text), secret) {
			t.Errorf("/metrics holds %q", secret)
		}
	}

	// The key's state, its reset, and a request admitted again.
	keyURL := adm + "/admin/keys?policy=per-ip&key=127.0.0.1/32"
	code, body := adminDo(t, "GET", keyURL, "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4")
	var state struct {
		Remaining int64 `json:"remaining"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &state) != nil || state.Remaining != 0 {
		t.Fatalf("key state: %d %s, want remaining 0", code, body)
	}
	if code, body := adminDo(t, "DELETE", keyURL, "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4"); code != http.StatusOK {
		t.Fatalf("reset: %d %s", code, body)
	}
	if r := mustSend(t, c, "GET", g.base+"/x"); r.status != http.StatusOK {
		t.Fatalf("after the reset: %d, want 200", r.status)
	}
	// An edit, applied through the API: counted, and the config hash moves.
	hashOf := func(text []byte) string {
		m := regexp.MustCompile(`gateway_config_info\{hash="([0-9a-f]+)"\} 1`).FindSubmatch(text)
		if m == nil {
			t.Fatalf("no gateway_config_info in /metrics")
		}
		return string(m[1])
	}
	before := hashOf(text)
	edited := strings.Replace(strings.Replace(operatingConfig, "UPSTREAM", up.URL, 1), "rate: 1, per: 1h", "rate: 2, per: 1h", 1)
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := adminDo(t, "POST", adm+"/admin/reload", "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4"); code != http.StatusOK {
		t.Fatalf("reload: %d %s", code, body)
	}
	_, text = adminDo(t, "GET", adm+"/metrics", "t0k3n-5c81e2a94f07b3d6a2e9c1f0b7d4")
	if got := scrapeValue(t, text, "gateway_config_reloads_total", "result=success"); got != 1 {
		t.Fatalf("reloads after POST /admin/reload: %v, want 1", got)
	}
	if after := hashOf(text); after == before {
		t.Fatalf("config hash %s did not change with the edit", after)
	}
	if n := g.countLog(0, `msg=request route=api method=GET path=/x status=429 decision=limited`); n != 2 {
		t.Errorf("access log lines of the two 429s: %d, want 2", n)
	}

	// Drain: a request in flight, then SIGTERM (the run's context ends).
	slow := make(chan int, 1)
	go func() {
		r, err := send(c, "GET", g.base+"/slow")
		if err != nil {
			t.Error(err)
		}
		slow <- r.status
	}()
	<-arrived
	g.stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := adminDo(t, "GET", adm+"/readyz", "")
		if code == http.StatusServiceUnavailable && strings.Contains(string(body), "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz during the drain: %d %s, want 503 draining", code, body)
		}
	}
	close(hold)
	if st := <-slow; st != http.StatusOK {
		t.Fatalf("the request in flight at SIGTERM got %d, want 200 (drained, not cut)", st)
	}
	<-g.done
	if g.code != 0 {
		t.Fatalf("serve exited %d after the drain, want 0", g.code)
	}
}

// An admin listener reachable from other hosts without a token stops the
// start with an error naming the setting.
func TestServeRefusesAPublicAdminWithoutToken(t *testing.T) {
	t.Setenv("GATEWAY_ADMIN_LISTEN", "0.0.0.0:0")
	path := writePressureConfig(t, `
server: {listen: "127.0.0.1:0"}
routes:
  - {name: r, match: {path_prefix: /}, upstream: builtin:echo}
`)
	g, exited := serveOutcome(t, "gw", path)
	if !exited || g.code != 1 {
		t.Fatalf("serve: exited %v code %d, want exit 1", exited, g.code)
	}
	if !strings.Contains(g.output(), "admin.listen (from GATEWAY_ADMIN_LISTEN): 0.0.0.0:0 is reachable from other hosts: set admin.token") {
		t.Fatalf("output:\n%s", g.output())
	}
}
