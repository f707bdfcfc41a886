package admin

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ratelimit-gateway/gateway/internal/clocktest"
	"github.com/ratelimit-gateway/gateway/limiter"
	"github.com/ratelimit-gateway/gateway/metrics"
	"github.com/ratelimit-gateway/gateway/policies"
)

// TestStatusNumbersAreTheMetrics: /admin/status's counts are
// gateway_requests_total's, summed as the page shows them; the series
// holds the counts per sample interval at the History's instants, with a
// last, partial point up to now; the LLM tenants have their totals and
// what is left of their quotas.
func TestStatusNumbersAreTheMetrics(t *testing.T) {
	m := metrics.New()
	clk := clocktest.New(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	hist, err := NewHistory(m.Registry(), clk.Now, 10*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	hist.Sample() // at 12:00:00, nothing yet
	for range 4 {
		m.Request("api", metrics.OutcomeAllowed)
	}
	m.Request("api", metrics.OutcomeShadowLimited)
	m.Request("api", metrics.OutcomeLimited)
	m.Request("api", metrics.OutcomeFailedOpen)
	m.Request("api", metrics.OutcomeError)
	m.Request("none", metrics.OutcomeInvalid)
	clk.Advance(10 * time.Second)
	hist.Sample()
	m.Request("api", metrics.OutcomeLimited)
	m.Request("api", metrics.OutcomeFailedClosed)
	m.LLMCharge("acme", "gpt-4o-mini", 120, 30)
	m.LLMCharge("acme", "gpt-4o", 80, 70)
	m.Reload(false)
	clk.Advance(4 * time.Second)

	snap := parse(t, baseYAML+`  tokens: {key: tenant, cost: tokens, rate: 1000, per: 24h}
`)
	engine := localEngine(t)
	// acme has spent 300 of its 1000 tokens.
	p := snap.Policies["tokens"]
	if v, err := engine.Decide(t.Context(), []limiter.Check{{Rule: p.Rule, Limit: p.Limit, Key: "acme", Cost: 300}}); err != nil || !v.Allowed {
		t.Fatalf("spending: %v %v", v, err)
	}
	cfg := fullConfig(t, testToken)
	cfg.Snapshots = policies.NewCurrent(snap)
	cfg.Keys = EngineKeys{Engine: engine}
	cfg.Gatherer, cfg.History = m.Registry(), hist
	srv := serve(t, cfg)
	a := call(t, srv, "GET", "/admin/status", testToken)
	if a.status != http.StatusOK {
		t.Fatalf("got %d %s", a.status, a.body)
	}
	var v statusView
	a.decode(t, &v)
	routes := map[string]routeCounts{}
	for _, r := range v.Routes {
		routes[r.Name] = r.Requests
	}
	if got, want := routes["api"], (routeCounts{Allowed: 5, Limited: 2, Failed: 3}); got != want {
		t.Errorf("api: got %+v, want %+v", got, want)
	}
	if got, want := routes["none"], (routeCounts{Invalid: 1}); got != want {
		t.Errorf("none: got %+v, want %+v", got, want)
	}
	if v.Config.ReloadsFailed != 1 || v.Config.ReloadsOK != 0 {
		t.Errorf("reloads: got %d ok %d failed, want 0, 1", v.Config.ReloadsOK, v.Config.ReloadsFailed)
	}
	if v.Series == nil || len(v.Series.Points) != 3 {
		t.Fatalf("series: got %+v, want 3 points (zero, one interval, partial)", v.Series)
	}
	pts := v.Series.Points
	if pts[1].At != clk.Now().Add(-4*time.Second).UnixMilli() || pts[2].At != clk.Now().UnixMilli() {
		t.Errorf("instants: got %d, %d", pts[1].At, pts[2].At)
	}
	if got, want := pts[1].Routes["api"], (routeCounts{Allowed: 5, Limited: 1, Failed: 2}); got != want {
		t.Errorf("first interval: got %+v, want %+v", got, want)
	}
	if got, want := pts[2].Routes["api"], (routeCounts{Limited: 1, Failed: 1}); got != want {
		t.Errorf("partial interval: got %+v, want %+v", got, want)
	}
	if len(v.LLM) != 2 || v.LLM[0].Tenant != "acme" || v.LLM[0].Tokens != 200 || v.LLM[0].USD != 0.0001 {
		t.Fatalf("llm: got %+v, want acme with 200 tokens, $0.0001, then globex", v.LLM)
	}
	if q := v.LLM[0].Quotas; len(q) != 1 || q[0].Policy != "tokens" || q[0].Limit != 1000 || q[0].Used != 300 || q[0].Per != "24h" {
		t.Errorf("acme's quotas: got %+v, want tokens 300 of 1000 per 24h", q)
	}
	if v.Redis != nil {
		t.Errorf("redis: got %+v without redis configured", v.Redis)
	}
}

// TestHistoryKeepsTheLastSamples: the oldest sample goes once keep are
// held; the series starts at zero from the oldest kept.
func TestHistoryKeepsTheLastSamples(t *testing.T) {
	m := metrics.New()
	clk := clocktest.New(time.Unix(1000, 0))
	hist, err := NewHistory(m.Registry(), clk.Now, time.Second, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		for range i + 1 {
			m.Request("api", metrics.OutcomeLimited)
		}
		hist.Sample()
		clk.Advance(time.Second)
	}
	s := hist.series(nil)
	if len(s.Points) != 2 || s.Points[0].At != 1002000 || s.Points[1].Routes["api"].Limited != 4 {
		t.Errorf("got %+v, want 2 points from t=1002s, the last with 4 limited", s.Points)
	}
	if _, err := NewHistory(nil, clk.Now, time.Second, 2); err == nil {
		t.Error("NewHistory(nil gatherer): got no error")
	}
	var _ prometheus.Gatherer = gathered{}
}

// TestStatusPageIsSelfContained: the page is served with a CSP that lets
// only its own inline script and style run (their digests match what it
// holds), and it loads nothing from elsewhere.
func TestStatusPageIsSelfContained(t *testing.T) {
	srv := serve(t, fullConfig(t, testToken))
	a := call(t, srv, "GET", "/status", "")
	if a.status != http.StatusOK || a.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("got %d %s", a.status, a.header.Get("Content-Type"))
	}
	csp := a.header.Get("Content-Security-Policy")
	for _, tag := range []string{"script", "style"} {
		m := regexp.MustCompile(`(?s)<` + tag + `>(.*?)</` + tag + `>`).FindSubmatch(a.body)
		if m == nil {
			t.Fatalf("no inline %s", tag)
		}
		sum := sha256.Sum256(m[1])
		want := tag + "-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		if !bytes.Contains([]byte(csp), []byte(want)) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if n := bytes.Count(a.body, []byte("<script")); n != 1 {
		t.Errorf("got %d script elements, want the one inline", n)
	}
	if regexp.MustCompile(`(src|href)="(https?:)?//`).Match(a.body) {
		t.Error("the page refers to another site")
	}
	if a.header.Get("X-Frame-Options") != "DENY" || a.header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers: %v", a.header)
	}
}
